"""Keys as uint64 arrays against keys as lists of Python ints, side by side on the Mooncake chat trace
(``list(read_trace(path))``): reading time (best of a few runs) and the memory the parsed trace holds
(``tracemalloc``: what stays allocated once the list is built, and the peak while building it).

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


def measure(read: Callable[[Path], Iterator[Request]], path: Path, repeats: int) -> tuple[float, int, int]:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        reqs = list(read(path))
        best = min(best, time.perf_counter() - start)
        del reqs
    gc.collect()
    tracemalloc.start()
    reqs = list(read(path))
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del reqs
    return best, held, peak


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else (SHARED if SHARED.exists() else BUNDLED_MOONCAKE)
    reqs = list(mooncake.read(path))
    n, keys = len(reqs), sum(len(r.block_keys) for r in reqs)
    del reqs
    print(f"{path.name}: {n:,} requests, {keys:,} keys")
    print(f"{'keys as':<16} {'read s':>8} {'held MB':>8} {'peak MB':>8} {'held B/key':>10}")
    for name, read in (("list of ints", read_as_lists), ("uint64 array", mooncake.read)):
        seconds, held, peak = measure(read, path, 5)
        print(f"{name:<16} {seconds:>8.3f} {held / 1e6:>8.1f} {peak / 1e6:>8.1f} {held / keys:>10.1f}")


if __name__ == "__main__":
    main()
