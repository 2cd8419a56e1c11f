"""What a policy switch stalls: the longest request through chain-lru, whose switch to its filter
mode walks its main queue, and the adaptive manager's ``handover`` of every cached block from one
policy to the next, at large caches (a big GPU's pool or CPU offload tier).

chain-lru: a cache of ``C`` blocks serves requests that each read one of ``max(200, C / 500)`` hot
50-block chains, then 500 blocks never seen again (the scan), all at time 0, so no root is rarely extended
and the recency mode fills M with the scans; its duel switches to the filter mode once the hot
chains' reuse distance passes ``C``. The same requests go through chain-lru with its default
``switch_walk`` (the walk spread over requests, 65,536 blocks a request) and with ``switch_walk =
C`` (the whole walk inside the switching request), taking turns; each request is timed around
``replay_request`` (the policy's hint, first-miss lookup and accesses, as cache mode drives it).
A third run reserves the policy's tables first (``reserve()``, as vLLM's free queue and offload
tier do), so no index or node table grows while it serves. Printed per capacity (ms; each request's
fastest of ``--repeats``, so a longest request can read shorter than in any one run): the switching
request, the longest of the walk's requests (the switching one and
the ``C / 65,536`` after it, plus one), the longest request of the run and where it was. The
scans' blocks lie in memory about in M's order, so this walk is the cheapest kind; a walk over an M
that hits have reordered waits on memory at every block (on the order of 100 ns a block at a
million blocks).

handover: an LRU and an S3-FIFO cache of ``C`` blocks, filled and half of their blocks hit in random
order, each handed to the other (``wakman.policies.handover``: what a switch of ``wakman`` or
``wakman-plus`` does, in vLLM on the scheduler thread), ms and ns a block, best of ``--repeats``;
once into a new policy as built, once with its ``reserve()`` first (timed with it, as vLLM's free
queue and offload tier switch).

Run: ``python benchmarks/bench_switch.py [--capacities 100000,1000000] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from wakman.drivers import replay_request
from wakman.policies import handover, make_policy

HOT_BLOCKS, SCAN_BLOCKS = 50, 500
# (label, switch_walk (None: the whole cache, one pass), reserve() first)
VARIANTS = (
    ("walk spread", 65536, False),
    ("walk one pass", None, False),
    ("walk spread, reserve", 65536, True),
)


def chain_requests(capacity: int, n: int, seed: int = 0) -> list[np.ndarray]:
    """``n`` requests: one of ``capacity / 500`` hot chains, then 500 new blocks."""
    rng = np.random.default_rng(seed)
    hot = [rng.integers(1, 2**62, HOT_BLOCKS, dtype=np.uint64) for _ in range(max(200, capacity // 500))]
    out, fresh = [], 2**62
    for j in rng.integers(0, len(hot), n):
        out.append(np.concatenate([hot[j], np.arange(fresh, fresh + SCAN_BLOCKS, dtype=np.uint64)]))
        fresh += SCAN_BLOCKS
    return out


def request_seconds(
    capacity: int, requests: list[np.ndarray], switch_walk: int, reserve: bool
) -> tuple[np.ndarray, int]:
    """(each request's seconds, the request that switched to the filter mode, -1 if none)."""
    policy = make_policy("chain-lru", capacity, switch_walk=switch_walk)
    if reserve:  # as vLLM's free queue and offload tier do
        policy.reserve()
    seconds, switched = np.zeros(len(requests)), -1
    for i, keys in enumerate(requests):
        began = time.perf_counter()
        replay_request(policy, keys, len(keys) * 16, 16)
        seconds[i] = time.perf_counter() - began
        if switched < 0 and policy.mode_switches:
            switched = i
    return seconds, switched


def handover_seconds(src_name: str, dst_name: str, capacity: int, reserve: bool) -> float:
    """One handover of a full cache; with ``reserve`` the new policy's ``reserve()`` is timed with it
    (vLLM's free queue and offload tier reserve the new policy at a switch)."""
    rng = np.random.default_rng(1)
    keys = (rng.permutation(capacity).astype(np.uint64) + 1).tolist()
    src = make_policy(src_name, capacity)
    for k in keys:
        src.insert(k, False)
    for k in rng.permutation(keys)[: capacity // 2].tolist():
        src.hit(k)
    dst = make_policy(dst_name, capacity)
    began = time.perf_counter()
    if reserve:
        dst.reserve()
    handover(src, dst)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacities", default="100000,1000000", help="cache sizes, blocks")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for capacity in (int(c) for c in args.capacities.split(",")):
        # enough requests for the hot chains' reuse to pass C, the duel to switch and the walk to end
        requests = chain_requests(capacity, int(12 * capacity / SCAN_BLOCKS) + 2000)
        best: dict[str, np.ndarray] = {}
        switched: dict[str, int] = {}
        for _ in range(args.repeats):
            for label, walk, reserve in VARIANTS:
                seconds, switched[label] = request_seconds(capacity, requests, walk or capacity, reserve)
                best[label] = np.minimum(best[label], seconds) if label in best else seconds
        print(f"chain-lru, {capacity:,} blocks, {len(requests):,} requests (ms):")
        span = capacity // 65536 + 2
        for label, seconds in best.items():
            at = switched[label]
            if at < 0:
                print(f"  {label:<20}: no switch to the filter mode")
                continue
            worst = int(seconds.argmax())
            print(
                f"  {label:<20}: switch at request {at:,} {seconds[at] * 1e3:7.2f}, "
                f"longest of the walk's {span} {seconds[at : at + span].max() * 1e3:7.2f}, "
                f"longest of all {seconds[worst] * 1e3:7.2f} (request {worst:,})"
            )
        for src, dst in (("lru", "s3fifo"), ("s3fifo", "lru")):
            for reserve in (False, True):
                took = min(handover_seconds(src, dst, capacity, reserve) for _ in range(args.repeats))
                print(
                    f"  handover {src} -> {dst}{', reserve first' if reserve else '':<15}: "
                    f"{took * 1e3:8.1f} ms, {took / capacity * 1e9:.0f} ns a block"
                )


if __name__ == "__main__":
    main()
