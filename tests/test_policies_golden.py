"""Golden hit counts: every policy at three cache sizes on a fixed stream (checked once against
libCacheSim 0.3.5; ``infinite`` is the count of repeated keys). A change here is a behaviour change."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import lcg_stream
from wakman.policies import MAX_CAPACITY, POLICIES, NoEvictableKey, make_policy

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


@pytest.mark.parametrize("capacity", [1.5, float("nan"), "10", True, None])
def test_a_capacity_that_is_not_an_integer_is_a_type_error(capacity):
    with pytest.raises(TypeError, match="capacity must be an integer"):
        make_policy("lru", capacity)


@pytest.mark.parametrize("name", ["lru", "s3fifo", "arc", "chain-lru"])
def test_a_capacity_past_the_node_slots_is_refused_before_any_table_is_built(name):
    """Node slots are 32-bit: past MAX_CAPACITY blocks (2**30) a policy is refused at once (a
    reserve() at 2**62 blocks looped for ever); MAX_CAPACITY itself builds (tables grow lazily)."""
    assert MAX_CAPACITY == 2**30
    for capacity in (MAX_CAPACITY + 1, 2**62, 2**63, 2**64):
        with pytest.raises(ValueError, match="capacity must be 1 to 1,073,741,824"):
            make_policy(name, capacity)
    assert make_policy(name, MAX_CAPACITY).capacity == MAX_CAPACITY


@pytest.mark.parametrize("name", ["s3fifo", "s3fifo-v0", "chain-lru"])
@pytest.mark.parametrize("ratio", [float("nan"), float("inf"), 1e30, -0.1, 2**32])
def test_a_ghost_that_is_not_finite_or_does_not_fit_is_refused(name, ratio):
    """A NaN, infinite or huge ghost_ratio used to become a ghost of 0 (or overflow): refused."""
    with pytest.raises(ValueError, match="ghost_ratio must be finite and >= 0"):
        make_policy(name, 50, ghost_ratio=ratio)


def test_each_bad_parameter_is_named():
    with pytest.raises(ValueError, match="small_ratio must be in"):
        make_policy("s3fifo", 50, small_ratio=1.0)
    with pytest.raises(ValueError, match="promote_threshold must be 1 to 255"):
        make_policy("s3fifo", 50, promote_threshold=0)
    with pytest.raises(ValueError, match="window_s must be finite"):
        make_policy("chain-lru", 50, window_s=float("inf"))
    with pytest.raises(TypeError, match=r"s3fifo: bad parameters \(bogus=1\); it takes capacity: int, "):
        make_policy("s3fifo", 50, bogus=1)
    # s3fifo-v0 is s3fifo without the warm-up rule: turning it on would give s3fifo under its name
    with pytest.raises(TypeError, match="s3fifo-v0 has no warm-up rule"):
        make_policy("s3fifo-v0", 50, warmup_to_main=True)


def test_evict_many_past_the_unpinned_keys_raises_at_once():
    cache = make_policy("lru", 10)
    cache.access(1)
    with pytest.raises(NoEvictableKey, match="1 unpinned"):
        cache.evict_many(2**62)  # (it reserved 2**62 victims first: vector::reserve)
    assert len(cache) == 1


def test_belady_refuses_a_stream_that_is_not_its_future():
    cache = make_policy("belady", 10, future=[1, 2, 3])
    assert not cache.access(1)
    with pytest.raises(ValueError, match="future"):
        cache.access(3)


def _core_defaults(cls: type) -> dict[str, object]:
    """The keyword defaults of the compiled constructor behind ``cls`` (its signature line)."""
    import ast

    base = next(b for b in cls.__mro__ if b.__module__ == "wakman._core")
    signature = base.__init__.__doc__.splitlines()[0]
    tree = ast.parse(f"def f{signature[len('__init__') :].split(' ->')[0]}: pass").body[0].args
    names = [a.arg for a in tree.args]
    return {
        n: ast.literal_eval(d)
        for n, d in zip(names[len(names) - len(tree.defaults) :], tree.defaults, strict=True)
        if n != "capacity"
    }


@pytest.mark.parametrize("name", ["s3fifo", "chain-lru"])
def test_the_documented_parameters_are_the_cores_defaults(name):
    """Each policy module's ``Parameters:`` paragraph names every parameter with the default the
    compiled constructor has (the Python modules also kept copies of some as constants, used by
    nothing, that nothing tied to the core)."""
    import ast
    import re
    import sys

    cls = POLICIES[name]
    doc = sys.modules[cls.__module__].__doc__
    paragraph = re.search(r"Parameters: (.*?)(?:\n\n|\Z)", doc, re.S).group(1)
    documented = {k: ast.literal_eval(v) for k, v in re.findall(r"``(\w+)=([^`]+)``", paragraph)}
    assert documented == _core_defaults(cls)
