"""Exact agreement with libCacheSim (the C reference) on hit counts, to the request, through every
driver of the policy protocol: the core's ``replay`` loop over a numpy array, ``access`` one key at a
time, and the pool protocol (``miss``/``evict``/``insert``/``hit``) driven from Python as a plain
cache, the way the serve-mode pool and vLLM's free queue drive it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libcachesim")  # a test dependency: `pip install -e .[test]`

from lcs_oracle import lcs_hits, write_oracle_general
from streams import zipf_stream, zipf_with_scans
from wakman.policies import make_policy
from wakman.policies.belady import BeladyFuture

N = 200_000
STREAMS = {
    "zipf-0.8": lambda: zipf_stream(N, 0.8, 100_000, seed=1),
    "zipf-1.2": lambda: zipf_stream(N, 1.2, 100_000, seed=2),
    "zipf-scans": lambda: zipf_with_scans(N, seed=3),
}
CAPACITIES = (200, 1_000, 5_000, 20_000)
POLICIES = ("lru", "fifo", "s3fifo", "s3fifo-v0", "sieve", "arc", "belady")


@pytest.fixture(scope="module", params=list(STREAMS))
def stream(request, tmp_path_factory):
    keys = STREAMS[request.param]().astype(np.uint64)
    path = write_oracle_general(keys, tmp_path_factory.mktemp("lcs") / f"{request.param}.bin")
    return keys, path, {c: {} for c in CAPACITIES}


def _reference(policy, capacity, stream) -> int:
    keys, path, cache = stream
    if policy not in cache[capacity]:
        cache[capacity][policy] = lcs_hits(policy, capacity, path, len(keys))
    return cache[capacity][policy]


def _build(policy, capacity, keys):
    return make_policy(policy, capacity, **({"future": keys} if policy == "belady" else {}))


def pool_protocol_hits(cache, keys) -> int:
    """A plain cache made of protocol events: hit, or miss -> evict while full -> insert."""
    hits = 0
    capacity = cache.capacity
    belady = cache.name == "belady"
    for position, key in enumerate(keys.tolist()):
        if belady:
            cache.seek(position + 1)  # the pool's clock: this access is past
        if key in cache:
            cache.hit(key)
            hits += 1
            continue
        cache.miss(key)
        while len(cache) >= capacity:
            cache.evict()
        cache.insert(key)
    return hits


@pytest.mark.parametrize("policy", POLICIES)
def test_replay_gives_libcachesim_hits(stream, policy):
    keys = stream[0]
    for capacity in CAPACITIES:
        ours = _build(policy, capacity, keys).replay(keys)
        theirs = _reference(policy, capacity, stream)
        assert ours == theirs, f"{policy} at {capacity} blocks: wakman {ours} hits, libCacheSim {theirs}"


@pytest.mark.parametrize("policy", POLICIES)
def test_access_gives_libcachesim_hits(stream, policy):
    keys = stream[0]
    for capacity in CAPACITIES[:2]:
        cache = _build(policy, capacity, keys)
        ours = sum(map(cache.access, keys.tolist()))
        assert ours == _reference(policy, capacity, stream), f"{policy} at {capacity} blocks"


@pytest.mark.parametrize("policy", POLICIES)
def test_pool_protocol_gives_libcachesim_hits(stream, policy):
    keys = stream[0]
    for capacity in CAPACITIES[:3]:
        ours = pool_protocol_hits(_build(policy, capacity, keys), keys)
        assert ours == _reference(policy, capacity, stream), f"{policy} at {capacity} blocks"


def test_one_shared_belady_future_gives_libcachesim_hits_at_every_capacity(stream):
    """One BeladyFuture behind a Belady per capacity, replayed in turns (each shares the next-use
    index, none another's state): each gives libCacheSim's count at its size."""
    keys = stream[0]
    future = BeladyFuture(keys)
    assert len(future) == len(keys)
    caches = {c: make_policy("belady", c, future=future) for c in CAPACITIES}
    hits = dict.fromkeys(CAPACITIES, 0)
    for start in range(0, len(keys), len(keys) // 4):
        for capacity, cache in caches.items():
            hits[capacity] += cache.replay(keys[start : start + len(keys) // 4])
    for capacity in CAPACITIES:
        assert hits[capacity] == _reference("belady", capacity, stream), f"belady at {capacity} blocks"
