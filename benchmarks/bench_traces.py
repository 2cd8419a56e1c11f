"""Trace reading speed: the Mooncake chat trace (goal: well under a second) and the kv-cache-tester
archive, each read to the end with every request materialised, and the keys that holds: the bytes of
the distinct arrays the requests' ``block_keys`` live in (a session's requests view one ``KeyChain``
buffer) beside what one array per request would take. Run: ``python benchmarks/bench_traces.py``."""

from __future__ import annotations

import time
from pathlib import Path

from wakman.data import BUNDLED_MOONCAKE
from wakman.traces import read_trace

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def held_bytes(reqs: list) -> int:
    """Bytes of the distinct arrays holding the requests' block keys (a view counts its base once)."""
    bases = {}
    for r in reqs:
        keys = r.block_keys
        base = keys.base if keys.base is not None else keys
        bases[id(base)] = base.nbytes
    return sum(bases.values())


def timed(path: Path, repeats: int) -> tuple[float, int, int, int]:
    best, n, keys, held = float("inf"), 0, 0, 0
    for _ in range(repeats):
        start = time.perf_counter()
        reqs = list(read_trace(path))
        best = min(best, time.perf_counter() - start)
        n, keys, held = len(reqs), sum(len(r.block_keys) for r in reqs), held_bytes(reqs)
    return best, n, keys, held


def main() -> None:
    targets = [
        (SHARED / "mooncake_conversation_trace.jsonl", 5),
        (BUNDLED_MOONCAKE, 5),
        (SHARED / "weka_claude_code_traces.tar.xz", 1),
    ]
    print(
        f"{'trace':<40} {'requests':>9} {'blocks':>11} {'seconds':>8} {'requests/s':>11} "
        f"{'keys held MB':>13} {'one array each MB':>18}"
    )
    for path, repeats in targets:
        if not path.exists():
            print(f"{path.name:<40} missing")
            continue
        seconds, n, keys, held = timed(path, repeats)
        print(
            f"{path.name:<40} {n:>9,} {keys:>11,} {seconds:>8.3f} {n / seconds:>11,.0f} "
            f"{held / 1e6:>13.1f} {keys * 8 / 1e6:>18.1f}"
        )


if __name__ == "__main__":
    main()
