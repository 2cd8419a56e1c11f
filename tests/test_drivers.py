"""The request-level drivers of the core (vLLM's first-miss rule, a request's replay, stranded
blocks) against direct Python statements of the same rules."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import key_of
from wakman.drivers import cached_prefix, replay_request
from wakman.policies import make_policy
from wakman.simulation.cache_mode import count_stranded
from wakman.traces.model import Request

BS = 4

requests_strategy = st.lists(
    st.tuples(
        st.lists(st.integers(0, 3), min_size=1, max_size=8),  # a path in a small prefix tree
        st.integers(1, 3 * BS),  # extra prompt tokens past the full blocks (0 = exactly full)
        st.integers(0, 2),  # output blocks
    ),
    min_size=1,
    max_size=40,
)


def build(shape) -> Request:
    ids, extra, outputs = shape
    keys = [key_of(tuple(ids[: i + 1])) for i in range(len(ids))]
    return Request(
        arrival_s=0.0,
        block_keys=keys,
        prompt_tokens=len(keys) * BS - BS + extra,
        output_tokens=outputs * BS,
        block_size=BS,
        output_keys=[key_of((*ids, "out", j)) for j in range(outputs)],
    )


def reference(req: Request, cache) -> tuple[int, int]:
    """vLLM's rule written out: the longest resident prefix of at most (prompt - 1) // bs blocks,
    then every full prompt block and output block accessed deepest first."""
    limit = min(len(req.block_keys), (req.prompt_tokens - 1) // BS)
    hits = 0
    while hits < limit and req.block_keys[hits] in cache:
        hits += 1
    full = min(len(req.block_keys), req.prompt_tokens // BS)
    chain = [*req.block_keys[:full], *req.output_keys]
    return hits, sum(cache.access(k) for k in reversed(chain))


@settings(max_examples=100, deadline=None)
@given(
    shapes=requests_strategy,
    name=st.sampled_from(["lru", "s3fifo", "arc", "sieve"]),
    capacity=st.integers(2, 12),
)
def test_replay_request_is_vllms_rule(shapes, name, capacity):
    ours, theirs = make_policy(name, capacity), make_policy(name, capacity)
    for shape in shapes:
        req = build(shape)
        hits, accessed, access_hits = replay_request(
            ours, np.asarray(req.block_keys, dtype=np.uint64), req.prompt_tokens, BS, req.output_keys
        )
        assert (hits, access_hits) == reference(req, theirs)
        assert accessed == req.full_blocks + len(req.output_keys)
        assert ours.eviction_order() == theirs.eviction_order()


def test_cached_prefix_stops_at_the_first_miss():
    cache = make_policy("lru", 10)
    cache.replay([1, 2, 4])
    assert cached_prefix(cache, [1, 2, 3, 4], 4) == 2
    assert cached_prefix(cache, [1, 2, 3, 4], 1) == 1
    assert cached_prefix(cache, np.array([5, 1], dtype=np.uint64), 2) == 0


@settings(max_examples=100, deadline=None)
@given(
    shapes=requests_strategy, capacity=st.integers(2, 12), name=st.sampled_from(["lru", "s3fifo", "sieve"])
)
def test_stranded_count_is_every_unreachable_resident_block(shapes, capacity, name):
    """A resident block is stranded when, in every chain that holds it, an earlier block is not
    resident: the definition written out over the chains, after the run."""
    cache = make_policy(name, capacity)
    requests = [build(shape) for shape in shapes]
    for req in requests:
        replay_request(cache, req.block_keys, req.prompt_tokens, BS, req.output_keys)
    resident = set(cache.eviction_order())
    chains = [[*req.block_keys[: req.full_blocks], *req.output_keys] for req in requests]
    reached = {
        key for chain in chains for i, key in enumerate(chain) if all(k in resident for k in chain[: i + 1])
    }
    held = {key for chain in chains for key in chain if key in resident}
    assert count_stranded(requests, cache) == len(held - reached)


def test_stranded_count_sees_an_evicted_root():
    cache = make_policy("lru", 3)
    req = build(([0, 1, 2], BS, 0))  # three full blocks, then a partial one
    replay_request(cache, req.block_keys, req.prompt_tokens, BS, req.output_keys)
    assert count_stranded([req], cache) == 0
    cache.remove(req.block_keys[0])  # the root goes: both descendants are stranded
    assert count_stranded([req], cache) == 2
    other = build(([5], BS, 0))  # a chain that does not hold them changes nothing
    assert count_stranded([req, other], cache) == 2
