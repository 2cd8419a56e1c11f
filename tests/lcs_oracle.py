"""libCacheSim as an oracle: write a key stream as an ``oracleGeneral`` binary trace and replay it.

Record layout (24 bytes, little-endian): uint32 clock time, uint64 object id, uint32 size,
int64 next access (virtual time, -1 = never), exactly what libCacheSim's binary reader expects.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

RECORD = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])


def write_oracle_general(keys: np.ndarray, path: Path) -> Path:
    """Write integer ``keys`` (one request each, size 1) with their next-access indices."""
    keys = np.asarray(keys, dtype=np.uint64)
    n = len(keys)
    next_access = np.full(n, -1, dtype=np.int64)
    order = np.lexsort((np.arange(n), keys))  # by key, then by position
    same = keys[order[1:]] == keys[order[:-1]]
    next_access[order[:-1][same]] = order[1:][same]
    records = np.zeros(n, dtype=RECORD)
    records["time"] = np.arange(n, dtype=np.uint32)
    records["id"] = keys
    records["size"] = 1
    records["next"] = next_access
    records.tofile(path)
    return path


def hashpower_for(capacity: int) -> int:
    return max(4, math.ceil(math.log2(max(capacity, 2))) + 1)


def lcs_cache(name: str, capacity: int):
    """A libCacheSim cache object for one of wakman's policy names."""
    import libcachesim as lcs
    from libcachesim import libcachesim_python as low

    hp = hashpower_for(capacity)
    if name == "s3fifo-v0":
        params = low.CommonCacheParams(
            cache_size=capacity, default_ttl=86400 * 300, hashpower=hp, consider_obj_metadata=False
        )
        cache = lcs.cache.CacheBase(
            low.S3FIFOv0_init(params, "small-size-ratio=0.1,ghost-size-ratio=0.9,move-to-main-threshold=2")
        )
        return cache
    cls = {
        "lru": lcs.LRU,
        "fifo": lcs.FIFO,
        "s3fifo": lcs.S3FIFO,
        "sieve": lcs.Sieve,
        "arc": lcs.ARC,
        "belady": lcs.Belady,
    }[name]
    return cls(capacity, hashpower=hp)


def lcs_hits(name: str, capacity: int, trace_path: Path, n_requests: int) -> int:
    """Hit count of libCacheSim's ``name`` over the binary trace at ``trace_path``."""
    import libcachesim as lcs

    reader = lcs.TraceReader(str(trace_path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, _ = lcs_cache(name, capacity).process_trace(reader)
    return n_requests - round(miss_ratio * n_requests)
