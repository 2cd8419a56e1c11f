"""The serving simulator's pool on hand-worked cases, and its invariants under random traffic."""

from __future__ import annotations

import gc
import random
from dataclasses import replace

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import key_of, splitmix64
from wakman.policies import handover, make_policy
from wakman.simulation import BlockPool, ServerModel, simulate
from wakman.simulation.pool import PoolExhausted
from wakman.traces import Request

BS = 16
FAST = ServerModel(prefill_tokens_per_s=1e6, prefill_overhead_s=0.0, decode_tokens_per_s=1e3, max_running=8)


def req(
    t: float, keys: list, prompt: int | None = None, out: int = 1, outputs: list | None = None
) -> Request:
    return Request(
        arrival_s=t,
        block_keys=[key_of(k) for k in keys],
        prompt_tokens=prompt or len(keys) * BS + 1,
        output_tokens=out,
        block_size=BS,
        output_keys=[key_of(k) for k in outputs or []],
    )


class Checker:
    """A controller that checks the pool's invariants at every event."""

    def __init__(self) -> None:
        self.checks = 0

    def on_arrival(self, now, request) -> None:
        pass

    def on_time(self, now, pool) -> None:
        pool.check()
        self.checks += 1


def test_a_prefix_shared_by_two_requests():
    trace = [req(0.0, ["a", "b", "c"]), req(10.0, ["a", "b", "d"])]
    result = simulate(trace, "lru", 100, server=FAST)
    assert result.hit_tokens == 2 * BS  # a and b hit; d is new
    assert result.block_hits == 2 and result.block_lookups == 6


def test_at_most_prompt_minus_one_tokens_hit():
    trace = [req(0.0, ["a", "b"], prompt=2 * BS), req(10.0, ["a", "b"], prompt=2 * BS)]
    result = simulate(trace, "lru", 100, server=FAST)
    assert result.hit_tokens == BS  # the last block would cover the whole prompt: vLLM stops before it


def test_a_request_whose_ancestor_was_evicted_misses_everything():
    pool = BlockPool(4, make_policy("lru", 4))
    pool.allocate(3)
    held = pool.cache_run([key_of("a"), key_of("b"), key_of("c")], 0, 3)
    pool.release(held)
    # LRU with vLLM's release order evicts the deepest block first; force the root out instead
    pool.policy.pin(key_of("b"))
    pool.policy.pin(key_of("c"))
    pool.policy.hit(key_of("a"))
    pool.policy.unpin(key_of("b"))
    pool.policy.unpin(key_of("c"))  # order now: a, b, c
    pool.allocate(2)  # one blank, then one eviction: the root key_of("a")
    assert not pool.cached(key_of("a")) and pool.cached(key_of("b")) and pool.cached(key_of("c"))
    assert pool.longest_hit([key_of("a"), key_of("b"), key_of("c")], 3) == 0
    assert pool.stranded() == 2
    pool.check()


def test_tail_first_release_order():
    pool = BlockPool(8, make_policy("lru", 8))
    pool.allocate(3)
    held = [
        pool.cache(key_of("root"), None),
        pool.cache(key_of("mid"), key_of("root")),
        pool.cache(key_of("leaf"), key_of("mid")),
    ]
    pool.release(held)
    assert pool.policy.eviction_order() == [key_of("leaf"), key_of("mid"), key_of("root")]


def test_pinned_blocks_are_never_evicted_and_admission_waits():
    """Two long requests at capacity 6: the second waits for the first's blocks; nothing it
    pinned is evicted under pressure, and the invariants hold at every event."""
    slow = ServerModel(
        prefill_tokens_per_s=1e6, prefill_overhead_s=0.0, decode_tokens_per_s=1.0, max_running=8
    )
    trace = [req(0.0, ["a", "b", "c", "d"], out=2), req(0.5, ["x", "y", "z"], out=2)]
    checker = Checker()
    result = simulate(trace, "lru", 6, server=slow, controller=checker)
    assert result.measured_requests == 2 and result.preemptions == 0
    assert result.queueing_delays_s[1] > 1.0  # waited for the first request to finish
    assert checker.checks > 0


def test_output_blocks_are_cached_and_hit_by_the_next_turn():
    first = req(0.0, ["p1", "p2"], prompt=2 * BS, out=3 * BS, outputs=["o1", "o2"])
    second = req(100.0, ["p1", "p2", "o1", "o2", "m"], prompt=5 * BS + 3)
    result = simulate([first, second], "lru", 50, server=FAST)
    assert result.block_hits == 4  # turn 2 hits p1, p2 and both output blocks of turn 1


@pytest.mark.parametrize("cache_outputs", [True, False])
def test_blocks_filled_by_generated_tokens_are_cached_with_keys_of_their_own(cache_outputs):
    """vLLM hashes every block that fills up, the prompt's partial block and the generated tokens'
    included (prompt + output - 1 tokens have KV at the end): without output keys in the trace each
    gets a key no other request has, so the same request twice caches its outputs twice."""
    one = req(0.0, ["p1", "p2", "tail"], prompt=2 * BS + 5, out=3 * BS)  # KV tokens: 5 * BS + 4
    server = replace(FAST, cache_outputs=cache_outputs)
    outputs_per_request = 3 if cache_outputs else 0  # blocks 2, 3, 4 of 5 full ones
    policy = make_policy("lru", 100)
    result = simulate([one], policy, 100, server=server)
    assert len(policy) == 2 + outputs_per_request and result.hit_tokens == 0
    policy = make_policy("lru", 100)
    again = msgspec.structs.replace(one, arrival_s=100.0)
    result = simulate([one, again], policy, 100, server=server)
    assert len(policy) == 2 + 2 * outputs_per_request
    assert result.block_hits == 2  # the prompt's full blocks, never a generated block


def test_a_second_request_queues_on_the_prefill_lane():
    """Two requests at t = 0 on a 1,000 tokens/s lane: the second is admitted at once (holding its
    blocks) and queues on the lane: its queueing delay is the first prefill (the wait until its own
    prefill starts), and its first token comes after both prefills."""
    server = replace(FAST, prefill_tokens_per_s=1000.0)
    trace = [req(0.0, ["a", "b"], prompt=2 * BS), req(0.0, ["c", "d"], prompt=2 * BS)]
    result = simulate(trace, "lru", 100, server=server)
    first_prefill = 2 * BS / 1000.0
    assert result.queueing_delays_s == pytest.approx([0.0, first_prefill])
    assert result.ttfts_s == pytest.approx([first_prefill, 2 * first_prefill])


def test_oversized_request_is_rejected_not_stuck():
    trace = [req(0.0, list("abcdefghij")), req(1.0, ["a"])]
    result = simulate(trace, "lru", 5, server=FAST)
    assert result.rejected == 1 and result.measured_requests == 1


def test_preemption_under_decode_pressure_keeps_invariants():
    slow = ServerModel(
        prefill_tokens_per_s=1e6, prefill_overhead_s=0.0, decode_tokens_per_s=10.0, max_running=4
    )
    trace = [req(0.01 * i, [f"r{i}b{j}" for j in range(2)], out=5 * BS) for i in range(4)]
    checker = Checker()
    result = simulate(trace, "s3fifo", 10, server=slow, controller=checker)
    assert result.preemptions > 0 and result.measured_requests == 4


keys_strategy = st.lists(st.integers(0, 6), min_size=1, max_size=5)


@settings(max_examples=120, deadline=None)
@given(
    policy=st.sampled_from(["lru", "fifo", "s3fifo", "s3fifo-v0", "sieve", "arc", "belady"]),
    capacity=st.integers(4, 24),
    shapes=st.lists(
        st.tuples(keys_strategy, st.integers(1, 3 * BS), st.floats(0, 2)), min_size=1, max_size=25
    ),
)
def test_pool_invariants_hold_after_every_step(policy, capacity, shapes):
    """Random prefix trees (keys are chains of small ints), random lengths and arrival gaps."""
    trace, t = [], 0.0
    for ids, out, gap in shapes:
        t += gap
        chain = [key_of(tuple(ids[: i + 1])) for i in range(len(ids))]  # prefix-chained keys
        trace.append(
            Request(
                arrival_s=t,
                block_keys=chain,
                prompt_tokens=len(chain) * BS + 3,
                output_tokens=out,
                block_size=BS,
                output_keys=[key_of((*ids, "out", j)) for j in range((out + 2) // BS)],
            )
        )
    server = ServerModel(
        prefill_tokens_per_s=2000, prefill_overhead_s=0.0, decode_tokens_per_s=50, max_running=3
    )
    checker = Checker()
    result = simulate(trace, policy, capacity, server=server, controller=checker)
    assert result.hit_tokens <= result.prompt_tokens
    assert result.measured_requests + result.rejected == len(trace)
    assert checker.checks >= len(trace)


@pytest.mark.parametrize("mode", ["serve", "cache"])
def test_modes_agree_without_pressure(mode):
    """With a huge cache nothing is evicted: both modes give the infinite-cache hit rate."""
    trace = [req(float(i), ["s", f"u{i % 3}", f"v{i}"]) for i in range(30)]
    assert (
        simulate(trace, "lru", 10_000, mode=mode).hit_rate
        == simulate(trace, "infinite", 1, mode=mode).hit_rate
    )


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(0, 1e5, allow_nan=False), min_size=1, max_size=3000))
def test_flat_dict_statistics_are_numpys_bit_for_bit(values):
    np = pytest.importorskip("numpy")
    from wakman.simulation.results import SimResult

    flat = SimResult("lru", "serve", 1, queueing_delays_s=values).as_flat_dict()
    assert flat["queueing_delay_s_mean"] == float(np.mean(values))
    for q in (50, 90, 99):
        assert flat[f"queueing_delay_s_p{q}"] == float(np.percentile(values, q))


def copy_key(key: int, n: int) -> int:
    """The policy key of a key's n-th extra copy (pool.py): splitmix64 of the key and n."""
    return splitmix64(key + 0x9E3779B97F4A7C15 * n)


class ReferencePool:
    """The pool's semantics (pool.py's docstring) in plain Python dicts, to check the core against:
    cached copies by policy key, the copies of each trace key in caching order."""

    def __init__(self, capacity: int, policy) -> None:
        self.capacity, self.policy = capacity, policy
        self.blank, self.uncached_in_use, self.evictions = capacity, 0, 0
        self.copies: dict[int, list[int]] = {}  # trace key -> policy keys of its copies, oldest first
        self.key: dict[int, int] = {}  # policy key -> trace key
        self.refs: dict[int, int] = {}  # policy key -> running requests holding that copy
        self.parent: dict[int, int | None] = {}  # trace key -> the parent its first copy was cached with
        self.held: dict[int, list] = {}

    @property
    def free(self) -> int:
        return self.blank + self.policy.num_evictable

    def first(self, key: int) -> int:
        return self.copies[key][0]

    def allocate(self, n: int) -> None:
        from_blank = min(n, self.blank)
        self.blank -= from_blank
        for victim in self.policy.evict_many(n - from_blank):
            key = self.key.pop(victim)
            self.copies[key].remove(victim)
            self.refs.pop(victim, None)
            if not self.copies[key]:
                del self.copies[key], self.parent[key]
            self.evictions += 1
        self.uncached_in_use += n

    def cache(self, key: int, parent: int | None) -> int:
        pkey, n = key, 1
        while pkey in self.key:  # a copy holds it: the next extra-copy key
            pkey, n = copy_key(key, n), n + 1
        self.policy.insert(pkey, True)
        self.copies.setdefault(key, []).append(pkey)
        self.parent.setdefault(key, parent)
        self.key[pkey] = key
        self.uncached_in_use -= 1
        self.refs[pkey] = 1
        return pkey

    def admit(self, run: int, keys: list, max_hit: int, total: int, full: int) -> int:
        if total - max_hit > self.free:
            return -1
        hits = 0
        while hits < max_hit and keys[hits] in self.copies:
            hits += 1
        if total - hits + sum(1 for k in keys[:hits] if not self.refs.get(self.first(k))) > self.free:
            return -1
        for k in keys[hits:full]:
            if k not in self.key:
                self.policy.miss(k)
        held = []
        for k in keys[:hits]:
            pkey = self.first(k)
            self.policy.hit(pkey)
            if not self.refs.get(pkey):
                self.policy.pin(pkey)
            self.refs[pkey] = self.refs.get(pkey, 0) + 1
            held.append(pkey)
        self.allocate(total - hits)
        held += [self.cache(keys[j], keys[j - 1] if j else None) for j in range(hits, full)]
        self.held[run] = held + [None] * (total - full)
        return hits

    def extend(self, run: int) -> None:
        self.allocate(1)
        self.held[run].append(None)

    def fill_last(self, run: int, key: int, parent: int | None) -> None:
        if self.held[run][-1] is None:
            self.held[run][-1] = self.cache(key, parent)

    def release_run(self, run: int) -> None:
        for pkey in reversed(self.held.pop(run)):
            if pkey is None:
                self.uncached_in_use -= 1
                self.blank += 1
            elif self.refs[pkey] == 1:
                self.refs[pkey] = 0
                self.policy.unpin(pkey)
            else:
                self.refs[pkey] -= 1


@settings(max_examples=200, deadline=None)
@given(
    policy=st.sampled_from(["lru", "fifo", "s3fifo", "s3fifo-v0", "sieve", "arc"]),
    capacity=st.integers(2, 16),
    seed=st.integers(0, 2**32 - 1),
    as_array=st.booleans(),
)
def test_core_pool_matches_the_reference_step_by_step(policy, capacity, seed, as_array):
    """60 random steps: admissions (prefix-chained keys over a small tree, so evicted keys come
    back as ghost hits; some partial last blocks), decode growth (output keys, some shared) and
    releases, on the core pool and on ReferencePool with twin policies: the same hits, counts,
    eviction order, pins and held blocks after every step, and the invariants hold."""
    np = pytest.importorskip("numpy")
    rng = random.Random(seed)
    core, ref = (
        BlockPool(capacity, make_policy(policy, capacity)),
        ReferencePool(capacity, make_policy(policy, capacity)),
    )
    running: list[int] = []
    for step in range(60):
        op = rng.choice(["admit", "admit", "grow", "release"])
        if op == "admit":
            ids = [rng.randint(0, 2) for _ in range(rng.randint(1, 5))]
            keys = [key_of(tuple(ids[: i + 1])) for i in range(len(ids))]
            full = len(keys) - (rng.random() < 0.25)  # the last block partial now and then
            total, max_hit = len(keys), max(0, full - (rng.random() < 0.5))
            batch = np.asarray(keys, dtype=np.uint64) if as_array else keys
            got = core.admit(step, batch, max_hit, total, full)
            assert got == ref.admit(step, keys, max_hit, total, full)
            if got >= 0:
                running.append(step)
        elif op == "grow" and running:
            run = rng.choice(running)
            if ref.free >= 1:
                core.extend(run)
                ref.extend(run)
                n = rng.randint(0, 3)
                key, parent = key_of(("out", n)), key_of(("out", n - 1)) if n else None
                core.fill_last(run, key, parent)
                ref.fill_last(run, key, parent)
            else:
                with pytest.raises(PoolExhausted):
                    core.extend(run)
        elif op == "release" and running:
            run = running.pop(rng.randrange(len(running)))
            core.release_run(run)
            ref.release_run(run)
        core.check()
        assert (core.blank, core.uncached_in_use, core.free, core.evictions) == (
            ref.blank,
            ref.uncached_in_use,
            ref.free,
            ref.evictions,
        )
        assert core.policy.eviction_order() == ref.policy.eviction_order()
        assert sorted(core.policy.pinned_keys()) == sorted(ref.policy.pinned_keys())
        assert all(core.refs(k) == ref.refs[ref.first(k)] for k in ref.copies)
        assert all(core.held(run) == ref.held[run] for run in running)
        assert core.stranded() == count_stranded(set(ref.copies), ref.parent)
    for run in running:
        core.release_run(run)
    core.check()
    assert core.free == capacity


def test_a_ghost_hit_is_seen_before_the_evictions_that_make_room():
    """S3-FIFO (v0) with S = 2 blocks and a one-key ghost: a19 is evicted into the ghost; the next
    request needs a19 and c1, and allocating for them evicts two more keys into the ghost. The miss
    comes first, so a19 leaves the ghost before it is pushed out and its insert puts it in M (the
    last of the eviction order); evicting first would forget it and insert it into S."""
    a = [key_of(("a", i)) for i in range(20)]
    b0, c1 = key_of("b0"), key_of("c1")
    pool = BlockPool(20, make_policy("s3fifo-v0", 20, ghost_ratio=0.05))
    assert pool.policy.ghost_capacity == 1 and pool.policy.small_capacity == 2
    assert pool.admit(0, a, 20, 20, 20) == 0
    pool.release_run(0)
    assert pool.admit(1, [b0], 1, 1, 1) == 0  # evicts a19 (released first, so S's oldest)
    pool.release_run(1)
    assert pool.policy.in_ghost(a[19])
    assert pool.admit(2, [c1, a[19]], 0, 2, 2) == 0
    pool.release_run(2)
    assert pool.policy.eviction_order()[-1] == a[19]
    pool.check()


def test_replace_policy_keeps_the_new_policy_alive():
    pool = BlockPool(8, make_policy("lru", 8))
    assert pool.admit(0, [key_of("x"), key_of("y")], 2, 3, 2) == 0
    pool.replace_policy(handover(pool.policy, make_policy("s3fifo", 8)))  # no other reference left
    gc.collect()
    assert pool.policy.name == "s3fifo" and sorted(pool.policy.pinned_keys()) == sorted(
        [key_of("x"), key_of("y")]
    )
    pool.release_run(0)
    pool.check()
    assert pool.free == 8 and pool.policy.eviction_order() == [key_of("y"), key_of("x")]


@pytest.mark.parametrize("policy", ["lru", "s3fifo", "arc", "belady"])
def test_serve_mode_reads_numpy_keys_like_lists(policy):
    """Request.block_keys / output_keys as numpy uint64 arrays (read in place) give the same run."""
    np = pytest.importorskip("numpy")
    trace = [
        req(0.3 * i, [f"s{i % 4}", f"t{i % 7}", f"u{i}"], out=2 * BS + 5, outputs=[f"o{i}", f"p{i}"])
        for i in range(80)
    ]
    arrays = [
        msgspec.structs.replace(
            r,
            block_keys=np.asarray(r.block_keys, dtype=np.uint64),
            output_keys=np.asarray(r.output_keys, dtype=np.uint64),
        )
        for r in trace
    ]
    slow = ServerModel(
        prefill_tokens_per_s=1e4, prefill_overhead_s=0.0, decode_tokens_per_s=20, max_running=4
    )
    a = simulate(trace, policy, 30, server=slow).as_flat_dict(series=True)
    b = simulate(arrays, policy, 30, server=slow).as_flat_dict(series=True)
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b and a["evictions"] > 0 and a["hit_tokens"] > 0


def count_stranded(cached, parent: dict) -> int:
    """Reference: keys in ``cached`` with an ancestor (through ``parent``) that is not in ``cached``."""
    reachable: dict = {}
    count = 0
    for key in parent:
        if key not in cached:
            continue
        chain = []
        k = key
        ok = True
        while k is not None:
            known = reachable.get(k)
            if known is not None:
                ok = known
                break
            if k not in cached:
                ok = False
                break
            chain.append(k)
            k = parent.get(k)
        for c in chain:
            reachable[c] = ok
        if not ok:
            count += 1
    return count
