"""Trace reading speed: the Mooncake chat trace (goal: well under a second) and the kv-cache-tester
archive, each read to the end with every request materialised. Run: ``python benchmarks/bench_traces.py``."""

from __future__ import annotations

import time
from pathlib import Path

from wakman.data import BUNDLED_MOONCAKE
from wakman.traces import read_trace

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def timed(path: Path, repeats: int) -> tuple[float, int, int]:
    best, n, keys = float("inf"), 0, 0
    for _ in range(repeats):
        start = time.perf_counter()
        reqs = list(read_trace(path))
        best = min(best, time.perf_counter() - start)
        n, keys = len(reqs), sum(len(r.block_keys) for r in reqs)
    return best, n, keys


def main() -> None:
    targets = [
        (SHARED / "mooncake_conversation_trace.jsonl", 5),
        (BUNDLED_MOONCAKE, 5),
        (SHARED / "weka_claude_code_traces.tar.xz", 1),
    ]
    print(f"{'trace':<40} {'requests':>9} {'blocks':>11} {'seconds':>8} {'requests/s':>11}")
    for path, repeats in targets:
        if not path.exists():
            print(f"{path.name:<40} missing")
            continue
        seconds, n, keys = timed(path, repeats)
        print(f"{path.name:<40} {n:>9,} {keys:>11,} {seconds:>8.3f} {n / seconds:>11,.0f}")


if __name__ == "__main__":
    main()
