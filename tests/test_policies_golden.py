"""Golden hit counts: every policy at three cache sizes on a fixed stream (checked once against
libCacheSim 0.3.5; ``infinite`` is the count of repeated keys). A change here is a behaviour change."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import lcg_stream
from wakman.policies import POLICIES, make_policy

KEYS = lcg_stream(100_000, 20_000)
CAPACITIES = (100, 1_000, 5_000)
GOLDEN = {
    "lru": (7261, 22974, 49986),
    "fifo": (6290, 20646, 46490),
    "s3fifo": (15133, 31824, 54180),
    "s3fifo-v0": (15053, 31735, 53921),
    "sieve": (14224, 30313, 54278),
    "arc": (14598, 31079, 53083),
    "chain-lru": (7261, 22974, 49986),  # no request hints in a plain replay: exactly LRU (its docstring)
    "belady": (23290, 47685, 71277),
    "infinite": (81534, 81534, 81534),
}


def test_every_policy_is_pinned():
    assert set(GOLDEN) == set(POLICIES)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_hits(name):
    extra = {"future": KEYS} if name == "belady" else {}
    hits = tuple(make_policy(name, c, **extra).replay(KEYS) for c in CAPACITIES)
    assert hits == GOLDEN[name]


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.integers(0, 40), min_size=1, max_size=400),
    capacity=st.integers(1, 30),
)
def test_belady_bounds_every_online_policy(keys, capacity):
    """MIN is optimal for unit-size keys: no online policy gets more hits, and none beats the
    infinite cache (computed on arbitrary streams, not read from the table above)."""
    belady = make_policy("belady", capacity, future=keys).replay(keys)
    for name in ("lru", "fifo", "s3fifo", "s3fifo-v0", "sieve", "arc", "chain-lru"):
        assert make_policy(name, capacity).replay(keys) <= belady, name
    assert belady <= make_policy("infinite", capacity).replay(keys) == len(keys) - len(set(keys))


def test_unknown_policy_and_bad_capacity_are_refused():
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("lfu", 10)
    with pytest.raises(ValueError, match="capacity"):
        make_policy("lru", 0)
    with pytest.raises(ValueError, match="future"):
        make_policy("belady", 10)


def test_belady_refuses_a_stream_that_is_not_its_future():
    cache = make_policy("belady", 10, future=[1, 2, 3])
    assert not cache.access(1)
    with pytest.raises(ValueError, match="future"):
        cache.access(3)
