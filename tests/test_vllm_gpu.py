"""wakman in vLLM on a CUDA GPU: the engine replay, ``vllm serve`` with async scheduling (vLLM's GPU
default, which the CPU platform turns off), and the CPU offload tier with a wakman policy.

``scripts/gpu-check.sh`` runs this file with vLLM 0.34 (or ``VLLM_VERSION``) on a GPU; where torch
sees no CUDA device (CI, a laptop) the module is skipped, so these checks run only where that script
runs them.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest

from vllm_support import complete, need_vllm, phased_trace, wakman_cli, write_trace_file
from wakman.adaptive import simulate
from wakman.simulation import VllmServer
from wakman.vllm_plugin.engine import SCHEDULER_CLS, tiny_model_dir
from wakman.vllm_plugin.server import ServerProcess, free_port

pytestmark = [pytest.mark.vllm, pytest.mark.gpu]
need_vllm()
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: scripts/gpu-check.sh runs these on a GPU", allow_module_level=True)

CAPACITY = 600  # blocks, as the CPU engine tests (test_vllm_engine.py)
PHASES = (20.0, 2)  # their phased trace, shortened: 40 s, 110 requests, 233k prompt tokens
SERVE = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]  # `vllm serve`
TINY_FLAGS = ["--load-format", "dummy", "--skip-tokenizer-init", "--dtype", "float32", "--enforce-eager"]
TINY_FLAGS += ["--block-size", "32", "--gpu-memory-utilization", "0.3"]
SHARED_PREFIX = list(range(3, 3 + 200))  # 200 tokens: 6 full blocks of 32 that later requests hit


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """One engine process per policy on the phased trace, on the GPU."""
    trace = write_trace_file(phased_trace(*PHASES), tmp_path_factory.mktemp("gpu") / "phased.jsonl")
    replay = ["replay", "--engine", "vllm", "--capacity-blocks", str(CAPACITY), str(trace)]
    return {p: wakman_cli(*replay, "--policy", p) for p in ("stock", "lru", "s3fifo")}


def test_engine_lru_is_stock_and_the_simulator_is_within_a_point(runs):
    """On the GPU engine: wakman's lru gives stock vLLM's prefix-cache counters exactly, and the
    simulator, run with the server model the replay reports, gives vLLM's hit tokens for lru and
    s3fifo, as on the CPU engine (the replay steps on the same virtual clock there; the issue's bound
    is one point, which a simulator that left the generated blocks uncached also met here; the one
    GPU run, vLLM 0.33 on an H200, gave +0.00 points for both)."""
    print(f"\nGPU engine replay, phased trace {PHASES}, {CAPACITY} blocks:")
    for policy, run in runs.items():
        print(f"  {policy:7s} hit rate {run['hit_rate']:.4f}  hit tokens {run['hit_tokens']}")
    assert runs["stock"]["prompt_tokens"] > 100_000
    assert runs["lru"]["vllm:prefix_cache_hits"] == runs["stock"]["vllm:prefix_cache_hits"]
    assert runs["lru"]["vllm:prefix_cache_queries"] == runs["stock"]["vllm:prefix_cache_queries"]
    assert runs["s3fifo"]["hit_rate"] != runs["lru"]["hit_rate"]
    for policy in ("lru", "s3fifo"):
        predicted = simulate(
            phased_trace(*PHASES), policy, CAPACITY, server=VllmServer(**runs[policy]["server_model"])
        )
        gap = predicted.hit_rate - runs[policy]["hit_rate"]
        print(f"  simulator {policy}: {predicted.hit_rate:.4f} ({gap * 100:+.2f} points)")
        assert predicted.prompt_tokens == runs[policy]["prompt_tokens"]
        assert abs(gap) <= 0.01
        assert predicted.hit_tokens == runs[policy]["hit_tokens"]


def test_serve_with_async_scheduling_runs_wakmans_async_scheduler(tmp_path):
    """``vllm serve --async-scheduling --scheduler-cls wakman...`` on the GPU: the engine runs
    WakmanAsyncScheduler (vLLM's AsyncScheduler with wakman's pool), requests sharing a prefix hit
    it, and /metrics shows wakman's live policy and decisions beside vLLM's counters."""
    model = tiny_model_dir(tmp_path / "tiny")
    port = free_port()
    cmd = [
        *SERVE,
        str(model),
        "--enable-prefix-caching",
        "--scheduler-cls",
        SCHEDULER_CLS,
        "--async-scheduling",
    ]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *TINY_FLAGS, "--max-model-len", "4096"]
    cmd += ["--num-gpu-blocks-override", "257"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WAKMAN_POLICY": "wakman", "WAKMAN_INTERVAL_S": "1"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    log_path = tmp_path / "server.log"
    with ServerProcess(cmd, env, port, log_path, start_timeout_s=600) as server:
        for i in range(6):
            complete(server.url, model, SHARED_PREFIX + [500 + i] * 40, timeout_s=120)
            time.sleep(1.1)
        metrics = server.metrics()
        counts = server.totals("vllm:prefix_cache_hits_total", "wakman:decisions_total")
    log = log_path.read_text()
    print("\n" + "\n".join(line for line in log.splitlines() if "wakman" in line or "async" in line.lower()))
    assert re.search(
        r"wakman: wakman behind vLLM's free-block queue \(\d+ blocks, WakmanAsyncScheduler\)", log
    )
    hits = counts["vllm:prefix_cache_hits_total"]
    print(f"prefix-cache hits {hits:.0f} tokens over 6 requests")
    assert hits >= 5 * 192
    assert re.search(r'^wakman:live_policy\{engine="0",policy="[\w-]+"\} 1\.0', metrics, re.M)
    assert counts["wakman:decisions_total"] >= 1


@pytest.mark.parametrize("policy", ["s3fifo", "wakman-plus"])
def test_offload_tier_serves_evicted_prefixes_with_a_wakman_policy(tmp_path, policy):
    """``vllm serve --kv-offloading-size 1`` with wakman's offload policy: a prompt pushed out of a
    64-block GPU cache by three others comes back from the CPU tier (vLLM's external prefix-cache
    hits), and the tier ran the wakman policy named in ``WAKMAN_OFFLOAD_POLICY``."""
    model = tiny_model_dir(tmp_path / "tiny")
    port = free_port()
    extra = {"eviction_policy": "WakmanPolicy", "cache_policy_module_path": "wakman.vllm_plugin.offload"}
    transfer = {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": extra,
    }
    cmd = [*SERVE, str(model), "--enable-prefix-caching", "--kv-offloading-size", "1"]
    cmd += ["--kv-transfer-config", json.dumps(transfer)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *TINY_FLAGS, "--max-model-len", "2048"]
    cmd += ["--num-gpu-blocks-override", "65"]  # 64 blocks: 2,048 tokens, two of the prompts
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WAKMAN_OFFLOAD_POLICY": policy}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    env.pop("WAKMAN_POLICY", None)
    prompts = [[(7 * k + i) % 900 + 3 for i in range(1000)] for k in range(4)]  # 31 full blocks each
    log_path = tmp_path / "server.log"
    with ServerProcess(cmd, env, port, log_path, start_timeout_s=600) as server:
        for prompt in (*prompts, prompts[0]):
            complete(server.url, model, prompt, timeout_s=120)
            time.sleep(0.5)  # the stores of the last request finish
        counts = server.totals("vllm:external_prefix_cache_hits_total", "vllm:prefix_cache_hits_total")
    log = log_path.read_text()
    print("\n" + "\n".join(line for line in log.splitlines() if "wakman" in line))
    external = counts["vllm:external_prefix_cache_hits_total"]
    gpu_hits = counts["vllm:prefix_cache_hits_total"]
    print(f"{policy}: GPU prefix-cache hits {gpu_hits:.0f} tokens, CPU tier hits {external:.0f} tokens")
    # the first prompt's full blocks (at most prompt - 1 tokens) came back from the tier
    assert external >= 30 * 32
    assert re.search(
        rf"wakman: {policy} chooses what vLLM's CPU offload tier keeps \(\d+ chunks, WakmanPolicy\)", log
    )
