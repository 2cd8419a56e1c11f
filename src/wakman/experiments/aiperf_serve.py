"""The paper's setup end to end: AIPerf replays a trace against ``vllm serve`` over HTTP.

AIPerf (the load generator the paper used) reads the trace as Mooncake rows and sends each row at its
``timestamp`` (``--fixed-schedule``) as a text completion; the server is a real ``vllm serve`` with
wakman's scheduler (``vllm_plugin.server``). The hit rate is the server's own
``vllm:prefix_cache_hits / vllm:prefix_cache_queries`` over the run, read from ``/metrics`` before
and after. ``wakman replay --engine vllm`` gives the same counters for the same trace on an
in-process engine with the same settings; the two agree where AIPerf reproduces the trace's blocks
and timing:

- Tokens: AIPerf turns each ``hash_id`` into one block of ``--isl-block-size`` tokens sampled from
  its text corpus (the same id, the same tokens), decodes the prompt to text, and the server
  encodes it again. The tiny model's byte-level tokenizer makes that round trip exact, so equal
  ids give equal vLLM blocks. Rows are written without ``session_id``: AIPerf would turn rows
  sharing one into a chat conversation that carries earlier turns and answers in each prompt.
- Time: the server runs in wall-clock time, the in-process replay on a virtual clock (one step =
  ``step_s`` trace seconds). Their hit rates differ where the CPU's real step time changes which
  requests overlap; the run reports AIPerf's own schedule lag and the concurrency it measured.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec

from wakman.traces import write_trace
from wakman.traces.model import Request
from wakman.vllm_plugin.server import (
    INTER_TOKEN_COUNT,
    INTER_TOKEN_SUM,
    PREFIX_HITS,
    PREFIX_QUERIES,
    SERVED_MODEL,
    VllmHttpServer,
)


@dataclass
class AiperfRun:
    """One AIPerf run against one server. Token counts are vLLM's counters over the run."""

    policy: str
    capacity_blocks: int
    block_size: int
    requests: int
    completed: int
    errors: int
    error_summary: list[dict]  # AIPerf's, as it reports them (each with a count)
    hit_tokens: int
    prompt_tokens: int
    trace_prompt_tokens: int
    schedule_lag_p99_ms: float | None
    effective_concurrency: float | None
    wall_s: float
    live_policies: list[str]
    step_s: float | None  # the server's mean time between output tokens over the run (seconds)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hit_rate": self.hit_rate}


def write_aiperf_trace(requests: Sequence[Request], path: Path) -> Path:
    """Mooncake rows AIPerf replays one request per row (no ``session_id``; outputs >= 1 token)."""
    rows = [
        msgspec.structs.replace(r, session_id=None, output_tokens=max(1, r.output_tokens)) for r in requests
    ]
    write_trace(rows, path, "mooncake")
    return path


TOKENIZER_REPO = "wakman/tiny-bytes"
SNAPSHOT = "0" * 40


def tokenizer_hub_cache(model_dir: Path, cache: Path) -> dict[str, str]:
    """Put the tiny model's tokenizer in a Hugging Face hub cache as ``TOKENIZER_REPO``; the
    environment that makes AIPerf read it from there, offline.

    AIPerf 0.13 decodes prompts in worker processes that force offline mode, and offline it looks a
    tokenizer up with ``snapshot_download``, which refuses a local folder path: a trace of more than
    ten requests then fails. A cached repository id works in every process."""
    repo = cache / ("models--" + TOKENIZER_REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / SNAPSHOT
    snapshot.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(model_dir / name, snapshot / name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    return {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def aiperf_argv(aiperf_python: str, url: str, trace: Path, block_size: int, out: Path) -> list[str]:
    return [
        aiperf_python, "-m", "aiperf", "profile",
        "--model", SERVED_MODEL, "--url", url, "--endpoint-type", "completions",
        "--input-file", str(trace), "--custom-dataset-type", "mooncake_trace",
        "--fixed-schedule", "--fixed-schedule-auto-offset",
        "--tokenizer", TOKENIZER_REPO, "--isl-block-size", str(block_size),
        "--extra-inputs", "ignore_eos:true", "--use-server-token-count",
        "--connection-reuse-strategy", "never",  # a pooled connection races the server's keep-alive close
        "--random-seed", "0", "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry",
        "--artifact-dir", str(out),
    ]  # fmt: skip


def _metric(summary: dict, name: str) -> float | None:
    value = summary.get(name)
    if isinstance(value, dict):
        return value.get("avg", value.get("p99"))
    return None


def run_aiperf(
    requests: Sequence[Request],
    policy: str | None,
    capacity_blocks: int,
    workdir: Path,
    aiperf_python: str,
    max_num_seqs: int = 64,
    max_num_batched_tokens: int = 4096,
    timeout_s: float = 3600.0,
) -> AiperfRun:
    """Start ``vllm serve`` (``policy=None``: stock vLLM), replay ``requests`` with AIPerf, stop it."""
    if not requests:
        raise ValueError("the trace has no requests")
    block_size = requests[0].block_size
    if any(r.block_size != block_size for r in requests):
        raise ValueError("the trace mixes block sizes")
    name = policy or "stock"
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    trace = write_aiperf_trace(requests, workdir / "trace.mooncake.jsonl")
    longest = max(r.prompt_tokens + max(1, r.output_tokens) for r in requests)
    server = VllmHttpServer(
        workdir,
        capacity_blocks,
        block_size,
        policy=policy,
        max_model_len=longest,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    out = workdir / f"aiperf-{name}"
    names = (PREFIX_HITS, PREFIX_QUERIES, INTER_TOKEN_SUM, INTER_TOKEN_COUNT)
    with server:
        before = server.totals(*names)
        began = time.perf_counter()
        argv = aiperf_argv(aiperf_python, server.url, trace, block_size, out)
        env = {**os.environ, **tokenizer_hub_cache(server.model_dir, workdir / "hub")}
        with (workdir / f"aiperf-{name}.log").open("wb") as log:
            proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout_s)
        wall = time.perf_counter() - began
        if proc.returncode != 0:
            tail = (workdir / f"aiperf-{name}.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"aiperf exited with {proc.returncode}:\n{tail}")
        after = server.totals(*names)
        live = server.live_policies()
    got = {name: after[name] - before[name] for name in names}
    summary = json.loads((out / "profile_export_aiperf.json").read_text())
    completed = _metric(summary, "completed_request_count") or 0
    return AiperfRun(
        policy=name,
        capacity_blocks=capacity_blocks,
        block_size=block_size,
        requests=len(requests),
        completed=int(completed),
        errors=sum(int(e.get("count", 1)) for e in summary.get("error_summary") or []),
        error_summary=list(summary.get("error_summary") or []),
        hit_tokens=int(got[PREFIX_HITS]),
        prompt_tokens=int(got[PREFIX_QUERIES]),
        trace_prompt_tokens=sum(r.prompt_tokens for r in requests),
        schedule_lag_p99_ms=_metric(summary, "replay_sched_lag_p99"),
        effective_concurrency=_metric(summary, "effective_concurrency"),
        wall_s=wall,
        live_policies=live,
        step_s=got[INTER_TOKEN_SUM] / got[INTER_TOKEN_COUNT] if got[INTER_TOKEN_COUNT] else None,
    )
