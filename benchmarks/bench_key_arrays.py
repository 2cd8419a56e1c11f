"""Keys as uint64 arrays against keys as lists of Python ints, side by side on the Mooncake chat trace
(``list(read_trace(path))``): reading time (best of 15 runs, the two variants alternating) and the
memory the parsed trace holds (``tracemalloc``: what stays allocated once the list is built, and the
peak while building it).

The list variant is the reader as it was before keys became arrays: the same rows, decoded by the
same msgspec decoder, with ``hash_ids`` kept as the decoded list. Run:
``python benchmarks/bench_key_arrays.py [trace.jsonl]`` (default: ``shared/traces``' Mooncake trace,
else the bundled one).
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

from wakman.data import BUNDLED_MOONCAKE
from wakman.traces import mooncake
from wakman.traces.io import read_rows
from wakman.traces.model import Request

REPEATS = 15
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"


def read_as_lists(path: Path) -> Iterator[Request]:
    def to_request(row: mooncake.MooncakeRow) -> Request:
        return Request(
            arrival_s=row.timestamp / 1000.0,
            block_keys=row.hash_ids,
            prompt_tokens=row.input_length,
            output_tokens=row.output_length,
            block_size=mooncake.DEFAULT_BLOCK_SIZE,
            session_id=row.session_id,
        )

    return read_rows(path, mooncake._row, to_request)


def timed(read: Callable[[Path], Iterator[Request]], path: Path) -> float:
    gc.collect()
    start = time.perf_counter()
    reqs = list(read(path))
    seconds = time.perf_counter() - start
    del reqs
    return seconds


def held(read: Callable[[Path], Iterator[Request]], path: Path) -> tuple[int, int]:
    gc.collect()
    tracemalloc.start()
    reqs = list(read(path))
    now, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del reqs
    return now, peak


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else (SHARED if SHARED.exists() else BUNDLED_MOONCAKE)
    reqs = list(mooncake.read(path))
    n, keys = len(reqs), sum(len(r.block_keys) for r in reqs)
    del reqs
    print(f"{path.name}: {n:,} requests, {keys:,} keys")
    variants = (("list of ints", read_as_lists), ("uint64 array", mooncake.read))
    best = {name: float("inf") for name, _ in variants}
    for _ in range(REPEATS):  # alternating, so both see the same machine load
        for name, read in variants:
            best[name] = min(best[name], timed(read, path))
    print(f"{'keys as':<16} {'read s':>8} {'held MB':>8} {'peak MB':>8} {'held B/key':>10}")
    for name, read in variants:
        now, peak = held(read, path)
        print(f"{name:<16} {best[name]:>8.3f} {now / 1e6:>8.1f} {peak / 1e6:>8.1f} {now / keys:>10.1f}")
    ratio = best["uint64 array"] / best["list of ints"]
    print(f"reading with arrays / with lists: {ratio:.2f}x (best of {REPEATS})")


if __name__ == "__main__":
    main()
