"""Whole-process time of ``wakman simulate`` on the Mooncake chat trace at 19,200 blocks, beside
kvcache-simulator's C++ backend on the same trace and capacity (its trace parsing, binary export
and C++ run; the C++ binary is compiled once before timing). Both in one run, as ratios to
kvcache-simulator's LRU run in cache mode (which also computes a ceiling and a trie), so the
s3fifo and serve-mode rows compare other work with it; the goal is <= 1.0x while wakman does more
(pinning and time in serve mode); no verdict is printed. Run:
``python benchmarks/bench_simulate.py [TRACE]``."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
CAPACITY = 19_200
KVSIM = """
import math, sys
from kvcache_sim.trace import parse_trace_file
from kvcache_sim.cpp_backend import run_cpp_sweep
trace = parse_trace_file(sys.argv[1], block_size=512)
r = run_cpp_sweep(trace, capacities=[int(sys.argv[2])], policies=["lru"],
                  warmup_requests=math.floor(trace.request_count * 0.5))
print(r.results[("lru", int(sys.argv[2]))].hitRate)
"""


def timed(cmd: list[str], repeats: int = 3) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(repeats):
        start = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    trace = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    from kvcache_sim.cpp_backend import ensure_cpp_simulator

    ensure_cpp_simulator()
    wakman = [
        str(Path(sys.executable).parent / "wakman"),
        "simulate",
        str(trace),
        "--policy",
        "lru",
        "--capacity-blocks",
        str(CAPACITY),
        "--json",
    ]
    ref, _ = timed([sys.executable, "-c", KVSIM, str(trace), str(CAPACITY)])
    print(f"trace {trace.name}, {CAPACITY:,} blocks, best of 3 whole-process runs")
    print(f"{'run':<40} {'seconds':>8} {'ratio':>7}")
    print(f"{'kvcache-simulator C++ (lru, cache)':<40} {ref:>8.2f} {1:>6.2f}x")
    for mode in ("cache", "serve"):
        for policy in ("lru", "s3fifo"):
            cmd = wakman.copy()
            cmd[4] = policy
            seconds, _ = timed([*cmd, "--mode", mode])
            label = f"wakman simulate {policy} --mode {mode}"
            print(f"{label:<40} {seconds:>8.2f} {seconds / ref:>6.2f}x")


if __name__ == "__main__":
    main()
