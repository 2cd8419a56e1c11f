"""Property tests of the pinned life cycle that the block pool and vLLM's free queue rely on."""

from __future__ import annotations

import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from wakman.policies import POLICIES, NoEvictableKey, handover, make_policy, take_over

NAMES = sorted(POLICIES)
BOUNDED = [n for n in NAMES if n != "infinite"]
FUTURE = [k % 23 for k in range(400)]  # Belady's key sequence: keys 0..22, cycled


def build(name: str, capacity: int):
    extra = {"future": FUTURE} if name == "belady" else {}
    return make_policy(name, capacity, **extra)


def check(policy, resident: set, pinned: set) -> None:
    order = policy.eviction_order()
    assert len(order) == len(set(order)), "a key is duplicated in the eviction order"
    assert set(order) == resident - pinned, "evictable keys lost or invented"
    assert set(policy.pinned_keys()) == pinned
    assert len(policy) == len(resident)
    assert policy.num_evictable == len(resident) - len(pinned)
    for key in resident:
        assert key in policy
    assert all(not policy.is_pinned(k) for k in order)


operations = st.lists(
    st.tuples(
        st.sampled_from(["insert", "insert_pinned", "hit", "pin", "unpin", "evict", "seek"]),
        st.integers(0, 22),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(BOUNDED), capacity=st.integers(1, 8), ops=operations)
def test_pinned_life_cycle(name, capacity, ops):
    policy = build(name, capacity)
    resident: set[int] = set()
    pinned: set[int] = set()
    for op, key in ops:
        if op.startswith("insert") and key not in resident:
            while len(resident) >= capacity:  # the pool makes room first
                if len(pinned) == len(resident):
                    with pytest.raises(NoEvictableKey):
                        policy.evict()
                    break
                victim = policy.evict()
                assert victim in resident and victim not in pinned
                resident.discard(victim)
            else:
                policy.insert(key, pinned=(op == "insert_pinned"))
                resident.add(key)
                if op == "insert_pinned":
                    pinned.add(key)
        elif op == "hit" and key in resident:
            policy.hit(key)
        elif op == "pin" and key in resident:
            policy.pin(key)
            pinned.add(key)
        elif op == "unpin" and key in pinned:
            policy.unpin(key)
            pinned.discard(key)
        elif op == "evict":
            if resident - pinned:
                victim = policy.evict()
                assert victim in resident and victim not in pinned, "evicted a pinned or unknown key"
                resident.discard(victim)
            else:
                with pytest.raises(NoEvictableKey):
                    policy.evict()
        elif op == "seek" and name == "belady":
            policy.seek(key * 10)
        assert len(resident) <= capacity
        check(policy, resident, pinned)


# Belady's order (latest next use first) is checked against its future below; chain-lru also in its
# filter mode, where every block gets second chances.
ORDERED = [*(n for n in BOUNDED if n != "belady"), "chain-lru-filter"]


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(ORDERED),
    capacity=st.integers(1, 12),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["access", "access", "insert_pinned", "pin", "unpin", "miss"]), st.integers(0, 30)
        ),
        max_size=200,
    ),
)
def test_eviction_order_is_the_order_evict_takes(name, capacity, ops):
    """``eviction_order()`` is the order in which ``evict()`` would take every unpinned key if nothing
    else happened (S3-FIFO's promotions and second chances, SIEVE's visited bits, ARC's p and
    ghosts, a pending ghost hit included): draining the policy with ``evict()`` gives it."""
    policy = (
        make_policy("chain-lru", capacity, mode="filter")
        if name == "chain-lru-filter"
        else build(name, capacity)
    )
    for op, key in ops:
        if op == "access":
            if key in policy or len(policy) < capacity or policy.num_evictable > 0:
                policy.access(key)
        elif op == "insert_pinned" and key not in policy:
            if len(policy) >= capacity:
                if policy.num_evictable == 0:
                    continue
                policy.evict()
            policy.insert(key, pinned=True)
        elif op == "pin" and key in policy:
            policy.pin(key)
        elif op == "unpin" and key in policy and policy.is_pinned(key):
            policy.unpin(key)
        elif op == "miss" and key not in policy:
            policy.miss(key)  # a ghost hit (S3-FIFO, ARC, chain-lru) changes the next evictions
    order = policy.eviction_order()
    assert [policy.evict() for _ in range(len(order))] == order
    assert policy.num_evictable == 0


@pytest.mark.parametrize("capacity", [40, 1000])
def test_handover_inserts_the_pinned_keys_in_key_order(capacity):
    """The pinned keys have no order in the source; the hand-over inserts them in increasing key
    order, whatever the order they were pinned in or the source's index layout. S3-FIFO's warm-up
    rule shows it: after a reset the first small_ratio * capacity inserts fill the small queue, the
    rest go to main, and S3-FIFO's eviction order lists the small queue first."""
    rng = random.Random(capacity)
    keys = rng.sample(range(1, 1 << 62), capacity)
    src = make_policy("lru", capacity)
    for key in keys:  # inserted and pinned in a random order
        src.insert(key, pinned=True)
    dst = handover(src, make_policy("s3fifo", capacity))
    for key in keys:
        dst.unpin(key)
    small = capacity // 10  # s3fifo's small queue: 10 % of the capacity
    assert set(dst.eviction_order()[:small]) == set(sorted(keys)[:small])


@settings(max_examples=150, deadline=None)
@given(src=st.sampled_from(BOUNDED), dst=st.sampled_from(NAMES), ops=operations, capacity=st.integers(2, 8))
def test_handover_keeps_the_cached_blocks(src, dst, ops, capacity):
    policy = build(src, capacity)
    for _op, key in ops:
        if key not in policy:
            while len(policy) >= capacity:
                policy.evict()
            policy.insert(key)
        else:
            policy.hit(key)
    pinned = set(policy.eviction_order()[::2])
    for key in pinned:
        policy.pin(key)
    resident = set(policy.eviction_order()) | pinned
    target = handover(policy, build(dst, capacity))
    check(target, resident, pinned)
    check(policy, resident, pinned)  # the source is untouched
    for key in pinned:  # and the target keeps working afterwards
        target.unpin(key)
    check(target, resident, set())
    if dst != "infinite":
        for _ in range(len(resident)):
            target.evict()
        assert len(target) == 0


@pytest.mark.parametrize("name", BOUNDED)
def test_reset_forgets_everything(name):
    policy = build(name, 4)
    for key in (1, 2, 3):
        policy.insert(key, pinned=key == 2)
    policy.reset()
    assert len(policy) == 0 and policy.num_pinned == 0 and 1 not in policy


def test_pins_that_are_not_hits_do_not_raise_frequency():
    """S3-FIFO: a block pinned and unpinned without a hit is still a one-hit wonder in S."""
    policy = make_policy("s3fifo", 100)
    for key in range(10):
        policy.insert(key)
    for key in range(10):
        policy.pin(key)
        policy.unpin(key)
    policy.hit(9)
    policy.hit(9)
    victims = [policy.evict() for _ in range(9)]
    assert 9 not in victims and all(policy.in_ghost(v) for v in victims)


def test_lru_unpin_order_is_release_order():
    """vLLM frees a request's blocks tail first, so its root is evicted last."""
    policy = make_policy("lru", 10)
    root, mid, leaf = 11, 12, 13
    for key in (root, mid, leaf):
        policy.insert(key, pinned=True)
    for key in (leaf, mid, root):
        policy.unpin(key)
    assert policy.eviction_order() == [leaf, mid, root]


def test_s3fifo_ghost_is_keyed_by_hash_and_readmits_to_main():
    policy = make_policy("s3fifo", 20)
    for key in range(30):  # S holds 2 blocks, M 18: keys 0, 1 and 20..27 go through S to the ghost
        policy.access(key)
    assert policy.in_ghost(0) and 0 not in policy
    policy.access(0)  # a ghost hit goes straight to the main queue
    assert 0 in policy and not policy.in_ghost(0)


def run_fused_and_plain(name: str, ops, capacity: int = 6) -> None:
    """``hit_pin`` (one lookup: the pool's touch) and ``insert_pinned`` leave a policy exactly as
    ``hit`` then ``pin`` (or ``hit`` alone, ``pin_too=False``) and ``insert(pinned=True)`` do,
    victims and all."""
    fused, plain = build(name, capacity), build(name, capacity)
    resident: set[int] = set()
    pinned: set[int] = set()
    for op, key in ops:
        if op.startswith("insert") and key not in resident and len(resident) < capacity:
            if op == "insert_pinned":
                fused.insert_pinned(key)
                plain.insert(key, pinned=True)
                pinned.add(key)
            else:
                fused.insert(key)
                plain.insert(key)
            resident.add(key)
        elif op == "pin" and key in resident:
            fused.hit_pin(key)
            plain.hit(key)
            plain.pin(key)
            pinned.add(key)
        elif op == "hit" and key in resident:  # a later reference: no pin
            fused.hit_pin(key, pin_too=False)
            plain.hit(key)
        elif op == "unpin" and key in pinned:
            fused.unpin(key)
            plain.unpin(key)
            pinned.discard(key)
        elif op == "evict" and len(resident) > len(pinned):
            victim = fused.evict()
            assert victim == plain.evict()
            resident.discard(victim)
        assert fused.eviction_order() == plain.eviction_order()
        assert fused.pinned_keys() == plain.pinned_keys()
    for key in sorted(pinned):  # pinned metadata (frequencies, segments) shows once released
        fused.unpin(key)
        plain.unpin(key)
    while fused.num_evictable:  # the rest of the order, metadata included, through evictions
        assert fused.evict() == plain.evict()


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(BOUNDED), ops=operations)
def test_fused_calls_equal_their_parts(name, ops):
    run_fused_and_plain(name, ops)


@pytest.mark.parametrize("name", BOUNDED)
def test_fused_calls_equal_their_parts_on_a_long_sequence(name):
    """The same on 4,000 operations per policy (a hit's metadata shows only after its pin is
    released and the key comes up for eviction: rare in short sequences)."""
    rng = random.Random(7)
    kinds = ["insert", "insert", "insert_pinned", "hit", "pin", "pin", "unpin", "unpin", "evict"]
    ops = [(rng.choice(kinds), rng.randrange(23)) for _ in range(4000)]
    run_fused_and_plain(name, ops, capacity=8)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(BOUNDED), capacity=st.integers(2, 8), ops=operations, data=st.data())
def test_remove_takes_one_key_and_keeps_the_rest(name, capacity, ops, data):
    """``remove`` (vLLM's connector evictions and hash moves) drops exactly one key: the others keep
    their place in the order and their pins."""
    policy = build(name, capacity)
    for _op, key in ops:
        if key in policy:
            policy.hit(key)
            continue
        policy.miss(key)
        while len(policy) >= capacity:
            policy.evict()
        policy.insert(key)
    order = policy.eviction_order()
    if not order:
        return
    pinned = set(order[1::3])
    for key in pinned:
        policy.pin(key)
    order = policy.eviction_order()
    victim = data.draw(st.sampled_from(sorted(set(order) | pinned)))
    policy.remove(victim)
    assert victim not in policy
    assert policy.eviction_order() == [k for k in order if k != victim]
    assert set(policy.pinned_keys()) == pinned - {victim}
    policy.remove(victim)  # removing an absent key changes nothing
    assert policy.eviction_order() == [k for k in order if k != victim]


def test_remove_keeps_s3fifo_frequencies():
    """Rebuilding the order (the old ``discard``) reset every frequency; ``remove`` keeps them."""
    policy = make_policy("s3fifo", 10)  # S: 1 block, M: 9
    for key in range(10):
        policy.access(key)  # warm-up: keys 1..9 go to M (S fills with key 0 first)
    policy.hit(5)
    policy.remove(3)
    policy.miss(100)
    policy.insert(100)
    victims = [policy.evict() for _ in range(8)]
    assert 5 not in victims  # its hit still counts: it is reinserted once instead of evicted


def test_s3fifo_ghost_hit_is_seen_before_eviction():
    """The pool calls ``miss`` before it makes room: a ghost entry that the room-making would push
    out of the ghost still sends its key to M (libCacheSim's find-then-evict order)."""
    ghost_full = make_policy("s3fifo", 20)  # S 2, M 18, G 18
    for key in range(60):
        ghost_full.access(key)
    oldest_ghost = next(k for k in range(60) if ghost_full.in_ghost(k))
    ghost_full.miss(oldest_ghost)
    assert not ghost_full.in_ghost(oldest_ghost)
    for _ in range(3):
        ghost_full.evict()  # S evictions push new keys into G
    ghost_full.insert(oldest_ghost)
    assert oldest_ghost in ghost_full and oldest_ghost in ghost_full.eviction_order()[2:]


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=40, deadline=None)
@given(stream=st.lists(st.integers(0, 40), min_size=1, max_size=200), capacity=st.integers(1, 12))
def test_a_policy_that_does_not_hear_misses_ignores_them(name, stream, capacity):
    """``hears_misses`` False (vLLM's queue then skips building the misses' keys) must mean that
    miss() changes nothing: the same stream with and without a miss before each insert leaves the same
    eviction order. Where it is True, some stream tells the two apart (S3-FIFO and ARC's ghosts,
    chain-lru's), checked below."""
    policy = build(name, capacity)
    if policy.hears_misses:
        return
    heard, deaf = build(name, capacity), build(name, capacity)
    for key in stream:  # (Belady looks each next use up in FUTURE: never, for the keys past 22)
        for p, tell in ((heard, True), (deaf, False)):
            if key in p:
                p.hit(key)
                continue
            if tell:
                p.miss(key)
            while name in BOUNDED and len(p) >= capacity:  # the infinite ceiling never evicts
                p.evict()
            p.insert(key, False)
    assert heard.eviction_order() == deaf.eviction_order()


@pytest.mark.parametrize("name", [n for n in NAMES if build(n, 4).hears_misses])
def test_a_policy_that_hears_misses_uses_them(name):
    """The ghost policies' misses matter: the same stream without them goes through other states."""
    rng = random.Random(0)
    stream = [rng.randrange(9) for _ in range(100)]
    runs: list[list] = []
    for tell in (True, False):
        # chain-lru's ghosts come from its probation queue, which its filter mode feeds without hints
        p = make_policy(name, 4, mode="filter") if name == "chain-lru" else build(name, 4)
        states = []
        for key in stream:
            if key in p:
                p.hit(key)
                continue
            if tell:
                p.miss(key)
            while len(p) >= 4:
                p.evict()
            p.insert(key, False)
            states.append(p.eviction_order())
        runs.append(states)
    assert runs[0] != runs[1]


_draw = random.Random(7)
POOL_FUTURE = [min(_draw.randrange(12), _draw.randrange(12)) for _ in range(2_000)]  # keys 0..11, skewed


def first_use(key: int, clock: int) -> float:
    """The reference: key's first position at or after clock in POOL_FUTURE, by a linear scan."""
    return next((j for j in range(clock, len(POOL_FUTURE)) if POOL_FUTURE[j] == key), float("inf"))


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(2, 6),
    ops=st.lists(
        st.tuples(st.sampled_from(["insert", "hit", "pin", "unpin", "back", "jump"]), st.integers(0, 11)),
        min_size=60,
        max_size=300,
    ),
)
def test_belady_pool_use_evicts_the_latest_next_use(capacity, ops):
    """Belady driven as the pool drives it (seek, then insert / hit / unpin look up the next use at
    the clock, which may move back on a re-admission): the eviction order, and so each victim, puts the
    unpinned key whose next use, as last set, is the latest first (the earliest set first among
    equals), against a linear scan of the future."""
    policy = make_policy("belady", capacity, future=POOL_FUTURE)
    clock, order = 0, 0
    next_use: dict[int, tuple[float, int]] = {}  # resident key -> (next use as last set, when set)
    pinned: set[int] = set()

    def victim_order() -> list[int]:
        evictable = (k for k in next_use if k not in pinned)
        return sorted(evictable, key=lambda k: (-next_use[k][0], next_use[k][1]))

    def set_next(key: int) -> None:
        nonlocal order
        order += 1
        next_use[key] = (first_use(key, clock), order)

    for op, key in ops:
        if op == "insert" and key not in next_use:
            while len(next_use) >= capacity and len(pinned) < len(next_use):
                expected = max(
                    (k for k in next_use if k not in pinned), key=lambda k: (next_use[k][0], -next_use[k][1])
                )
                assert policy.evict() == expected
                del next_use[expected]
            if len(next_use) < capacity:
                policy.insert(key)
                set_next(key)
        elif op == "hit" and key in next_use:
            policy.hit(key)
            if key not in pinned:
                set_next(key)
            else:  # a pinned key's next use is set now and kept until its unpin looks it up again
                next_use[key] = (first_use(key, clock), next_use[key][1])
        elif op == "pin" and key in next_use and key not in pinned:
            policy.pin(key)
            pinned.add(key)
        elif op == "unpin" and key in pinned:
            policy.unpin(key)
            pinned.discard(key)
            set_next(key)
        elif op in ("back", "jump"):  # the clock moves back (a re-admission) or jumps forward
            clock = max(0, min(len(POOL_FUTURE), clock + 30 * key * (-1 if op == "back" else 1)))
            policy.seek(clock)
        evictable = sorted(
            (k for k in next_use if k not in pinned), key=lambda k: (-next_use[k][0], next_use[k][1])
        )
        assert policy.eviction_order() == evictable


def _warmed(name: str, capacity: int, keys: list[int]):
    """A plain cache of ``name`` after accessing ``keys`` (a driver's own evictions included)."""
    policy = build(name, capacity)
    for key in keys:
        policy.access(key)
    return policy


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(["lru", "fifo", "s3fifo", "s3fifo-v0", "chain-lru", "arc"]),
    capacity=st.integers(10, 24),  # S3-FIFO's small queue holds a block or more
    before=st.lists(st.integers(0, 40), min_size=30, max_size=160),
    after=st.lists(st.integers(0, 40), max_size=120),
)
def test_evict_key_of_the_next_victim_is_that_eviction(name, capacity, before, after):
    """The host evicting the policy's own next victim with ``evict_key`` leaves the policy as its
    ``evict()`` does, ghost entry included: from then on the two give the same hits and eviction
    orders, ghost hits on the victim included. Compared where ``evict()`` moved no other key (no
    promotion or second chance: every other key keeps its S3-FIFO segment and frequency; chain-lru
    without hints has none) and after a first eviction (S3-FIFO's warm-up rule counts only the
    policy's own). ARC's ``evict_key`` makes ``evict()``'s directory trim too: the ghosts, ``p`` and
    every later decision agree (its ghost lists grew by one per ``evict_key`` without the trim)."""
    assume(len(set(before)) > capacity)
    natural, hosted = _warmed(name, capacity, before), _warmed(name, capacity, before)
    order = hosted.eviction_order()
    victim = natural.evict()
    hosted.evict_key(victim)
    assert victim == order[0]
    if name.startswith("s3fifo"):
        assume(all(natural.segment(k) == hosted.segment(k) for k in order[1:]))
    if name == "arc":
        assert natural.ghost_size == hosted.ghost_size
    elif hasattr(natural, "ghost_size"):
        assume(natural.ghost_size == hosted.ghost_size)
        assert natural.in_ghost(victim) == hosted.in_ghost(victim)
    assert victim not in hosted and len(hosted) == len(natural)
    for key in [victim, *after]:
        assert natural.access(key) == hosted.access(key)
        assert natural.eviction_order() == hosted.eviction_order()
        if name == "arc":
            assert (natural.p, natural.ghost_size) == (hosted.p, hosted.ghost_size)


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_arc_ghosts_stay_bounded_when_the_host_evicts_by_key(share):
    """A host that makes room with ``evict_key`` (vLLM 0.34's lazy offload frees blocks that way and
    hands them out blank, with no ``evict()``): ARC's directory keeps its bounds, |T1| + |B1| <= C
    and |T1| + |T2| + |B1| + |B2| <= 2C, as under ``evict()`` alone (B1 and B2 grew by one per call,
    to 19,900 ghosts at C = 100)."""
    capacity, rng = 100, random.Random(0)
    arc = make_policy("arc", capacity)
    for key in range(20_000):
        if len(arc) >= capacity:
            if rng.random() < share:
                arc.evict_key(arc.eviction_order()[0])
            else:
                arc.evict()
        arc.miss(key)
        arc.insert(key)
        if key % 7 == 0 and key - 50 in arc:
            arc.hit(key - 50)  # some reuse: T2 and B2 are used too
        assert len(arc) + arc.ghost_size <= 2 * capacity
    assert arc.ghost_size <= capacity


def test_arc_adopt_refuses_a_known_key():
    """``adopt`` puts an inherited key in T1; a key ARC already knows (a ghost) is refused as
    S3-FIFO and chain-lru refuse it (it went to T2 and moved p)."""
    arc = make_policy("arc", 2)
    for key in (0, 1, 0, 2):  # 0 to T2; 2's eviction takes T1's 1 into B1
        arc.access(key)
    assert arc.ghost_size == 1 and 1 not in arc
    with pytest.raises(KeyError):
        arc.adopt([1])
    assert arc.p == 0.0 and 1 not in arc and arc.ghost_size == 1


@pytest.mark.parametrize("pinned", [False, True])
def test_evict_key_keeps_each_policys_ghost(pinned):
    """Where each policy keeps the ghost of a key the host evicts (pinned or not), read through the
    policy's own ghost probes: S3-FIFO and chain-lru from their probation queue into G and not from
    M; ARC from T1 into B1 (a later ghost hit raises p by max(|B2| / |B1|, 1), its insert goes to
    T2) and from T2 into B2; policies without ghosts simply forget the key."""
    s3 = make_policy("s3fifo", 20)
    for key in range(25):  # an eviction happened: no warm-up placement
        s3.access(key)
    in_small = s3.eviction_order()[0]
    in_main = s3.eviction_order()[-1]
    assert in_main not in s3.eviction_order()[:2]
    for key in (in_small, in_main):
        if pinned:
            s3.pin(key)
        s3.evict_key(key)
        assert key not in s3 and s3.num_pinned == 0
    assert s3.in_ghost(in_small) and not s3.in_ghost(in_main)
    s3.miss(in_small)
    s3.evict()
    s3.insert(in_small)
    assert s3.eviction_order()[-1] == in_small  # back from G: M's newest

    arc = make_policy("arc", 10)
    for key in [*range(10), 0, 1, 2]:  # 0, 1, 2 in T2; 3..9 in T1
        arc.access(key)
    ghosts = arc.ghost_size
    for key in (5, 1):
        if pinned:
            arc.pin(key)
        arc.evict_key(key)
        assert key not in arc
    assert arc.ghost_size == ghosts + 2 and arc.p == 0.0
    arc.miss(5)  # B1 holds 5 only, B2 holds 1: p += max(1 / 1, 1)
    assert arc.p == 1.0
    arc.insert(5)  # into T2, newest: T1 = 3 4 6 7 8 9, T2 = 0 2 5, B2 = 1, p = 1
    # REPLACE takes T1 down to p, then T2 oldest first (5 its newest), then T1's last key
    assert arc.eviction_order() == [3, 4, 6, 7, 8, 0, 2, 5, 9]

    for name in ("lru", "fifo", "sieve", "infinite"):
        policy = make_policy(name, 4)
        for key in range(4):
            policy.access(key)
        if pinned:
            policy.pin(2)
        policy.evict_key(2)
        assert 2 not in policy and policy.eviction_order() == [0, 1, 3]


# The policies whose memory_bytes is their key store alone (chain-lru's also holds its statistics).
STORE_ONLY = ["lru", "fifo", "sieve", "s3fifo", "s3fifo-v0", "arc"]


@pytest.mark.parametrize("name", [*STORE_ONLY, "chain-lru"])
def test_reserve_changes_no_decision_and_no_table_grows_after_it(name):
    """A policy reserved before a trace makes the same hits and holds the same order as one that
    grows its tables as keys come; after reserve() its tables do not grow, through a trace that
    fills the cache and its ghosts several times over, and a reset keeps the room."""
    from wakman.drivers import replay_request

    rng = random.Random(11)
    capacity = 300
    grown, reserved = make_policy(name, capacity), make_policy(name, capacity)
    empty = grown.memory_bytes
    reserved.reserve()
    room = reserved.memory_bytes
    assert room > empty  # the room is there before any key
    for _ in range(2):  # and again after a reset
        fresh = 0
        for i in range(600):
            hot = [1_000_000 + rng.randrange(40) * 10 + j for j in range(rng.randrange(1, 6))]
            keys = hot + list(range(fresh, fresh + rng.randrange(1, 12)))
            fresh += len(keys)
            got = [replay_request(p, keys, len(keys) * 16, 16, (), float(i)) for p in (grown, reserved)]
            assert got[0] == got[1]
        assert grown.eviction_order() == reserved.eviction_order()
        if name in STORE_ONLY:
            assert reserved.memory_bytes == room, "a table grew after reserve()"
            assert grown.memory_bytes > 50 * empty  # without reserve() the trace grew the tables
        reserved.reset()
        grown.reset()


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from([n for n in BOUNDED if n != "belady"]),  # Belady's keys are its future's
    capacity=st.integers(4, 16),
    before=st.lists(st.integers(0, 30), min_size=1, max_size=80),
    pin=st.booleans(),
    after=st.lists(st.integers(0, 30), max_size=80),
)
def test_rekey_renames_a_key_in_place_where_the_policy_can(name, capacity, before, pin, after):
    """``rekey(k, new)`` on LRU and FIFO: from then on the policy is the one that knew the key as
    ``new`` from the start (the same input, relabelled): the same hits and eviction orders with ``new``
    for ``k``, pin included. Every other policy answers False and is unchanged."""
    renamed, relabelled = build(name, capacity), build(name, capacity)
    fresh = 1000
    key = before[-1]
    for k in before:
        renamed.access(k)
        relabelled.access(fresh if k == key else k)
    if pin:
        renamed.pin(key)
        relabelled.pin(fresh)
    order = renamed.eviction_order()
    done = renamed.rekey(key, fresh)
    assert done == (name in ("lru", "fifo"))
    if not done:
        assert key in renamed and fresh not in renamed and renamed.eviction_order() == order
        return
    assert key not in renamed and fresh in renamed and renamed.is_pinned(fresh) == pin
    others = [k for k in renamed.eviction_order() if k != fresh]
    if others:  # a name the policy knows is refused, as is a key it does not hold
        assert not renamed.rekey(fresh, others[0]) and fresh in renamed
    assert not renamed.rekey(fresh + 1, fresh + 2) and fresh + 2 not in renamed
    if pin:
        renamed.unpin(fresh)
        relabelled.unpin(fresh)
    for k in after:
        k = fresh if k == key else k
        assert renamed.access(k) == relabelled.access(k)
        assert renamed.eviction_order() == relabelled.eviction_order()


@pytest.mark.parametrize("name", NAMES)
def test_take_over_adopts_an_order_and_pins_in_key_order(name):
    """``take_over(dst, order, pinned)`` (the offload tier's switch away from its vLLM-ordered lru):
    the unpinned keys leave in the order given, first victim first, whatever ``dst`` held before
    (reset first); the pinned ones enter in increasing key order, as ``handover`` puts them (the
    offload tier inserted them in its map's order)."""
    rng = random.Random(7)
    keys = rng.sample(range(1, 1 << 62), 60)
    order, pinned = keys[:40], keys[40:]
    dst = build(name, 60)
    dst.insert(123, False)  # forgotten at the reset
    assert take_over(dst, order, pinned) is dst
    if name != "belady":
        assert dst.eviction_order() == order
    assert len(dst) == 60 and 123 not in dst and dst.num_pinned == len(pinned)
    if name == "s3fifo":  # the warm-up rule fills the small queue with the first inserts after the reset
        after = build("s3fifo", 60)
        take_over(after, [], pinned[::-1])
        for key in pinned:
            after.unpin(key)
        assert set(after.eviction_order()[:6]) == set(sorted(pinned)[:6])
