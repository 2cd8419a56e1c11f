"""Shadow-path speed: block accesses per second of wakman's ``replay`` beside libCacheSim's C code.

Both replay the same Zipf stream at the same capacity in one run, best of ``--repeats``:
libCacheSim with a ``hashpower`` of log2(capacity) + 1 (its table sized to the cache) and its binary
``oracleGeneral`` reader (its fastest path); wakman's compiled core over a numpy uint64 array, and
over a Python list of ints (the conversion included). Prints wakman / libCacheSim per policy; the
goal is >= 1.0x (aim 2x) for the array path. Run: ``python benchmarks/bench_policies.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np

from lcs_oracle import lcs_cache, write_oracle_general
from streams import zipf_stream
from wakman.policies import make_policy


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2_000_000)
    parser.add_argument("--capacity", type=int, default=20_000)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--universe", type=int, default=1_000_000, help="Distinct keys in the stream.")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import libcachesim as lcs

    keys = zipf_stream(args.requests, args.alpha, args.universe, seed=7).astype(np.uint64)
    key_list = keys.tolist()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_oracle_general(keys, Path(tmp) / "zipf.bin")
        print(
            f"{args.requests:,} requests over {args.universe:,} keys, Zipf({args.alpha}), "
            f"capacity {args.capacity:,} blocks"
        )
        print(f"{'policy':<8} {'wakman M/s':>11} {'libCacheSim M/s':>16} {'ratio':>7} {'from a list':>12}")
        for name in ("lru", "fifo", "s3fifo", "sieve", "arc"):
            ours = best_of(args.repeats, lambda n=name: make_policy(n, args.capacity).replay(keys))
            from_list = best_of(args.repeats, lambda n=name: make_policy(n, args.capacity).replay(key_list))

            def theirs(n=name):
                reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
                lcs_cache(n, args.capacity).process_trace(reader)

            ref = best_of(args.repeats, theirs)
            rate, ref_rate = args.requests / ours / 1e6, args.requests / ref / 1e6
            list_ratio = args.requests / from_list / 1e6 / ref_rate
            print(f"{name:<8} {rate:>11.2f} {ref_rate:>16.2f} {rate / ref_rate:>6.2f}x {list_ratio:>11.2f}x")


if __name__ == "__main__":
    main()
