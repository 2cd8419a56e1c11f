"""chain-lru against an independent model of its docstring (plain Python dicts and lists), and its
behaviour on traffic whose chains are or are not extended."""

from __future__ import annotations

import copy
import random
from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import splitmix64
from wakman.data import BUNDLED_MOONCAKE
from wakman.drivers import replay_request, session_key
from wakman.policies import make_policy
from wakman.simulation import simulate
from wakman.simulation.server import ServerModel, VllmServer
from wakman.traces import read_trace
from wakman.traces.model import full_blocks
from wakman.workload import build_config, generate_requests

MAX_SESSIONS = 4096  # followed at once


class Model:
    """chain-lru as its docstring states it, written without the core's structures."""

    def __init__(
        self,
        capacity: int,
        window_s: float = 120.0,
        threshold: float = 0.2,
        sessions: bool = False,
        mode: str = "adaptive",
        small_ratio: float = 0.1,
        switch_walk: int = 65536,
    ) -> None:
        self.capacity, self.window_s, self.threshold, self.sessions = capacity, window_s, threshold, sessions
        self.filter, self.small_ratio, self.switch_walk = mode == "filter", small_ratio, switch_walk
        self.walk: int | None = None  # the switch walk's point: the block of M it examines next
        self.walk_left = 0  # blocks it may still examine
        self.minis: list[Model] = []
        if mode == "adaptive":
            self.every = 2
            while self.every * 2 <= capacity // 2048 and self.every < 64:
                self.every *= 2
            mini = max(1, capacity // self.every)
            self.minis = [Model(mini, window_s, threshold, mode=m, small_ratio=small_ratio) for m in MODES]
            self.blocks, self.duel_hits, self.switches = 0.0, [0.0, 0.0], 0
            self.guard = [0.0, 0.0, 0.0]  # the floor guard: sampled blocks, the live cache's hits, recency's
            self.guarded = 0  # requests at which it held the recency mode
        self.session_last: dict[int, list[int]] = {}
        self.serial: dict[int, int] = {}  # followed session -> its serial (an ended one's is gone)
        self.next_serial = 0
        self.owner: dict[int, int | None] = {}  # block -> the serial that brought it, None: shared
        self.prob: OrderedDict[int, None] = OrderedDict()  # oldest first
        self.main: OrderedDict[int, None] = OrderedDict()
        self.rare: dict[int, bool] = {}
        self.count: dict[int, int] = {}
        self.hit: dict[int, bool] = {}  # hit since its insert (or inserted back from the ghost)
        self.ghost: OrderedDict[int, None] = OrderedDict()
        self.pending: set[int] = set()
        self.stats: dict[int, list[float]] = {}  # root -> [extended, resolved]
        self.open: dict[int, tuple[float, int]] = {}  # end -> (time, root)
        self.context_rare = False

    def rate(self, root: int) -> float:
        e, r = self.stats.get(root, [0.0, 0.0])
        return (e + 0.5) / (r + 1.0)

    def tally(self, root: int, extended: bool) -> None:
        c = self.stats.setdefault(root, [0.0, 0.0])
        c[0] += extended
        c[1] += 1
        if c[1] >= 1024:
            c[0] /= 2
            c[1] /= 2

    def on_request(
        self, keys: list[int], full: int, outputs: list[int], now: float, session: int | None = None
    ) -> None:
        if self.sessions and session is not None:
            chain = keys[:full] + outputs
            last = self.session_last.pop(session, [])  # back in at the newest end: heard last
            shared = 0
            while shared < min(len(last), len(chain)) and last[shared] == chain[shared]:
                shared += 1
            for k in last[shared:]:  # the abandoned branch: the session's own blocks
                if self.owner.get(k) == self.serial.get(session):
                    self.demote(k)
            if session not in self.serial and len(self.serial) >= MAX_SESSIONS:
                oldest = next(iter(self.session_last))  # heard from longest ago: forgotten
                del self.session_last[oldest], self.serial[oldest]
            self.session_last[session] = chain
            if session not in self.serial:  # followed from now on, under a new serial
                self.serial[session] = self.next_serial = self.next_serial + 1
            self.own(self.serial[session], chain)
        for end, (t, root) in sorted(self.open.items(), key=lambda item: item[1][0]):
            if t <= now - self.window_s:
                del self.open[end]
                self.tally(root, False)
        for k in keys[: max(full - 1, 0)]:
            if k in self.open:
                self.tally(self.open.pop(k)[1], True)
        if not full and not outputs:
            self.context_rare = False
            if self.minis and self.walk_left:
                self.walk_main()
            return
        root = keys[0] if full else outputs[0]
        self.stats.setdefault(root, [0.0, 0.0])
        for end in ([keys[full - 1]] if full else []) + (outputs[-1:] if outputs else []):
            self.open.pop(end, None)
            self.open[end] = (now, root)
        self.context_rare = self.rate(root) < self.threshold
        if self.minis:
            self.duel(keys[:full], outputs)
            if self.walk_left:
                self.walk_main()

    def from_walk_point(self, n: int) -> list[int]:
        """M's first ``n`` blocks from the switch walk's point towards M's newest (the point is
        mostly near M's oldest: found in O(its depth))."""
        out: list[int] = []
        for k in self.main:
            if out or k == self.walk:
                out.append(k)
                if len(out) == n:
                    break
        return out

    def leave_main(self, k: int) -> None:
        """Take ``k`` out of M; the switch walk's point, if at ``k``, passes to the next newer block."""
        if k == self.walk:
            self.walk = [*self.from_walk_point(2), None][1]
        del self.main[k]

    def walk_main(self) -> None:
        """The switch walk's share of one request: up to ``switch_walk`` of M's blocks from the point
        towards M's newest; an unhit one joins P's newest end."""
        n = min(self.switch_walk, self.walk_left)
        # only the walk changes M in this call, behind its point
        order = self.from_walk_point(n + 1) if self.walk is not None else []
        for k in order[:n]:
            self.walk_left -= 1
            if not self.hit[k]:
                del self.main[k]
                self.prob[k] = None
        self.walk = order[n] if len(order) > n and self.walk_left else None
        if self.walk is None:
            self.walk_left = 0

    def demote(self, k: int) -> None:
        """A resident block to P's oldest end: of blocks demoted in prefix order, the deepest ends
        oldest, evicted first."""
        if k in self.prob or k in self.main:
            self.prob.pop(k) if k in self.prob else self.leave_main(k)
            self.prob[k] = None
            self.prob.move_to_end(k, last=False)

    def own(self, serial: int, keys: list[int]) -> None:
        """A followed session's request holds these blocks: the first session to hold a block that
        is not cached then owns it; another one makes it shared (None). First, past 4 * C
        entries, those of blocks no longer cached go."""
        if len(self.owner) > 4 * self.capacity:
            self.owner = {b: o for b, o in self.owner.items() if b in self.prob or b in self.main}
        for k in keys:
            if k in self.owner:
                if self.owner[k] != serial:
                    self.owner[k] = None
                continue
            self.owner[k] = None if (k in self.prob or k in self.main) else serial

    def end_session(self, session: int) -> None:
        last = self.session_last.pop(session, None)
        serial = self.serial.pop(session, None)
        for k in last or ():
            if serial is not None and self.owner.get(k) == serial:
                self.demote(k)

    def duel(self, prompt: list[int], outputs: list[int]) -> None:
        sampled = [k for k in prompt if splitmix64(k) % self.every == 0]
        sampled_out = [k for k in outputs if splitmix64(k) % self.every == 0]
        if not sampled and not sampled_out:
            return
        live = self.prefix(sampled)
        recency = self.minis[0].prefix(sampled)
        for m, mini in enumerate(self.minis):
            mini.context_rare = self.context_rare
            self.duel_hits[m] += mini.prefix(sampled)
            for k in reversed(sampled + sampled_out):
                mini.access(k)
        self.blocks += len(sampled)
        if self.blocks >= 8.0 * self.minis[0].capacity:
            self.blocks, self.duel_hits = self.blocks * 0.5, [h * 0.5 for h in self.duel_hits]
        self.guard = [g + x for g, x in zip(self.guard, (len(sampled), live, recency), strict=True)]
        if self.guard[0] >= 64.0 * self.minis[0].capacity:
            self.guard = [g * 0.5 for g in self.guard]
        now = int(self.filter)
        guarded = self.guard[1] < self.guard[2] - 0.02 * self.guard[0]
        self.guarded += guarded
        if self.filter if guarded else self.duel_hits[1 - now] - self.duel_hits[now] > 0.01 * self.blocks:
            self.filter, self.switches = not self.filter, self.switches + 1
            # to the filter mode: the switch walk starts at M's oldest; back to recency: it ends
            self.walk = next(iter(self.main), None) if self.filter else None
            self.walk_left = len(self.main) if self.filter else 0

    def prefix(self, keys: list[int]) -> int:
        hits = 0
        while hits < len(keys) and (keys[hits] in self.prob or keys[hits] in self.main):
            hits += 1
        return hits

    def access(self, key: int) -> bool:
        if key in self.prob or key in self.main:
            if key in self.main and (self.filter or self.rare[key]):
                self.count[key] = min(self.count[key] + 1, 3)
            self.prob.pop(key) if key in self.prob else self.leave_main(key)
            self.main[key] = None
            self.hit[key] = True
            return True
        if key in self.ghost:
            del self.ghost[key]
            self.pending.add(key)
        while len(self.prob) + len(self.main) >= self.capacity:
            self.evict()
        to_main = key in self.pending or key in self.ghost
        self.pending.discard(key)
        self.ghost.pop(key, None)
        self.rare[key], self.count[key], self.hit[key] = self.context_rare, 0, to_main
        (self.main if to_main or not (self.context_rare or self.filter) else self.prob)[key] = None
        return False

    def evict(self) -> int:
        small = len(self.prob) >= self.small_ratio * self.capacity
        if self.prob and (not self.filter or not self.main or small):
            key, _ = self.prob.popitem(last=False)
            if len(self.ghost) >= self.capacity:
                self.ghost.popitem(last=False)
            self.ghost[key] = None
            return key
        while True:
            key = next(iter(self.main))
            self.leave_main(key)
            if self.count[key]:
                self.count[key] -= 1
                self.main[key] = None
                continue
            return key

    def serve(self, keys: list[int]) -> int:
        """A request's blocks as replay_request drives them (after ``on_request``): its cached prefix
        by the first-miss rule, then every block accessed deepest first. Returns the prefix's blocks."""
        hits = self.prefix(keys)
        for k in reversed(keys):
            self.access(k)
        return hits

    def order(self) -> list[int]:
        """evict()'s order if nothing else happened: evict() run on a copy of the queues."""
        dry = copy.copy(self)
        dry.prob, dry.main, dry.ghost = OrderedDict(self.prob), OrderedDict(self.main), OrderedDict()
        dry.count = dict(self.count)
        return [dry.evict() for _ in range(len(self.prob) + len(self.main))]


MODES = ("recency", "filter")

# Requests over a few roots: some roots' requests are extended by a next turn, others never.
requests = st.lists(
    st.tuples(
        st.integers(0, 3),  # root
        st.booleans(),  # extends the previous request of this root
        st.integers(1, 6),  # new full blocks
        st.floats(0.0, 90.0),  # gap to the previous request (s)
    ),
    min_size=1,
    max_size=60,
)


def _check_against_model(policy, model: Model, reqs) -> None:
    last: dict[int, list[int]] = {}
    now, fresh = 0.0, 1000
    for root, extends, new, gap in reqs:
        now += gap
        prefix = last[root] if extends and root in last else [root]
        keys = prefix + list(range(fresh, fresh + new))
        fresh += new
        last[root] = keys
        hits, _, _ = replay_request(policy, keys, len(keys) * 16 + 1, 16, (), now)
        model.on_request(keys, len(keys), [], now)
        assert hits == model.serve(keys)
        assert policy.mode == ("filter" if model.filter else "recency")
        assert policy.eviction_order() == model.order()
        assert [k for k in model.ghost] == [k for k in model.ghost if policy.in_ghost(k)]


@settings(max_examples=300, deadline=None)
@given(
    reqs=requests,
    capacity=st.integers(2, 24),
    window=st.sampled_from([5.0, 30.0, 120.0]),
    mode=st.sampled_from(["adaptive", "recency", "filter"]),
    small_ratio=st.sampled_from([0.1, 0.5]),
    switch_walk=st.sampled_from([1, 2, 65536]),
)
def test_chain_lru_follows_its_stated_semantics(reqs, capacity, window, mode, small_ratio, switch_walk):
    params = dict(threshold=0.4, mode=mode, small_ratio=small_ratio, switch_walk=switch_walk)
    policy = make_policy("chain-lru", capacity, window_s=window, **params)
    model = Model(capacity, window, **params)
    _check_against_model(policy, model, reqs)


@pytest.mark.parametrize(("switch_walk", "n"), [(65536, 3000), (300, 800)])
def test_the_sampled_duel_follows_its_stated_semantics(switch_walk, n):
    """At 16,384 blocks the duel samples one block in 8 (miniatures of 2,048 blocks): the policy
    switches modes when the model does, and holds the model's blocks in its order. With a switch
    walk of 300 blocks a request, the switch to the filter mode (at request 537, M full) is walked
    over about 55 requests."""
    rng = random.Random(5)
    reqs = [
        (rng.randrange(40), rng.random() < 0.6, rng.randrange(5, 80), rng.expovariate(1 / 4.0))
        for _ in range(3000)
    ][:n]
    policy = make_policy("chain-lru", 16384, threshold=0.4, switch_walk=switch_walk)
    model = Model(16384, threshold=0.4, switch_walk=switch_walk)
    assert policy.sample_every == model.every == 8 and policy.switch_walk == switch_walk
    _check_against_model(policy, model, reqs)
    assert policy.mode_switches == model.switches > 0
    assert policy.requests_guarded == model.guarded


def test_the_floor_guard_follows_its_stated_semantics():
    """At 64 blocks (one block in 2 sampled, miniatures of 32) these requests make the duel switch
    back and forth and the live cache trail its recency miniature: the floor guard holds the
    recency mode at the requests where the model's does, and the policy stays the model's."""
    rng = random.Random(1)
    reqs = [
        (rng.randrange(40), rng.random() < 0.6, rng.randrange(5, 80), rng.expovariate(1 / 4.0))
        for _ in range(1500)
    ]
    policy = make_policy("chain-lru", 64, threshold=0.4)
    model = Model(64, threshold=0.4)
    _check_against_model(policy, model, reqs)
    assert policy.requests_guarded == model.guarded > 0
    assert policy.mode_switches == model.switches > 0


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["insert", "insert-pinned", "hit", "pin", "unpin", "remove", "evict"]),
            st.integers(0, 11),
        ),
        max_size=80,
    ),
    mode=st.sampled_from(["recency", "filter"]),
)
def test_the_filter_counts_probations_pinned_blocks(ops, mode):
    """The filter mode's share of P counts P's pinned blocks (as S3-FIFO counts its small queue's):
    through any pinned life cycle the count equals the pinned keys whose segment is P (in the filter
    mode every new block's; in the recency mode, without hints, none)."""
    policy = make_policy("chain-lru", 8, mode=mode)
    for op, key in ops:
        resident = key in policy
        pinned = resident and policy.is_pinned(key)
        if op.startswith("insert") and not resident and len(policy) < 8:
            policy.insert(key, op == "insert-pinned")
        elif op == "hit" and resident:
            policy.hit(key)
        elif op == "pin" and resident:
            policy.pin(key)
        elif op == "unpin" and pinned:
            policy.unpin(key)
        elif op == "remove":
            policy.remove(key)
        elif op == "evict" and policy.num_evictable:
            policy.evict()
        held = [k for k in policy.pinned_keys() if policy.in_probation(k)]
        assert policy.probation_pinned == len(held)


def test_without_request_hints_it_is_lru():
    keys = [(i * 7919) % 500 for i in range(20_000)]
    lru, chain = make_policy("lru", 120), make_policy("chain-lru", 120)
    assert chain.replay(keys) == lru.replay(keys)
    assert chain.mode == "recency" and chain.mode_switches == 0
    assert chain.eviction_order() == lru.eviction_order()


def test_it_learns_which_roots_are_extended():
    policy = make_policy("chain-lru", 1000)
    for i in range(20):  # root 1: single-turn (never extended); root 2: one growing session
        replay_request(policy, [1, 10_000 + 2 * i, 10_001 + 2 * i], 3 * 16 + 1, 16, (), 50.0 * i)
        session = [2, *range(100, 101 + i)]
        replay_request(policy, session, len(session) * 16 + 1, 16, (), 50.0 * i + 1)
    assert policy.extension_rate(1) < 0.05 < 0.9 < policy.extension_rate(2)
    assert policy.in_probation(10_001 + 2 * 19) and not policy.in_probation(100 + 19)


def _rates(preset: str, capacity: int) -> dict[str, float]:
    reqs = generate_requests(build_config(preset=preset, duration_s=1800.0), seed=3)
    rates = {p: simulate(reqs, p, capacity, mode="cache").hit_rate for p in ("lru", "s3fifo", "chain-lru")}
    recency = make_policy("chain-lru", capacity, mode="recency")
    rates["recency"] = simulate(reqs, recency, capacity, mode="cache").hit_rate
    return rates


def test_single_turn_payloads_go_first_and_sessions_keep_lru():
    single = _rates("mix01-pure-single", 4000)  # popular fixed prompts, payloads used once
    assert single["chain-lru"] > single["lru"] + 0.03
    assert single["recency"] > single["lru"] + 0.03
    agentic = _rates("mix03-pure-agentic", 4000)  # every root's requests are extended
    assert agentic["recency"] == agentic["lru"]  # no root is rarely extended: exactly LRU
    assert agentic["chain-lru"] >= agentic["lru"] - 0.005  # the duel's cost: at most half a point


def test_the_duel_takes_the_filter_where_frequency_wins_and_keeps_recency_where_it_does_not():
    """The bundled Mooncake chat trace in serve mode: at 5,000 blocks S3-FIFO beats LRU by 3 points
    (its popular prefixes under pressure), at 19,200 LRU beats S3-FIFO by 6; the adaptive mode comes
    within half a point of the better one at both, and the recency mode alone does not at the first."""
    reqs = list(read_trace(BUNDLED_MOONCAKE))
    server = ServerModel.keeping_up(reqs)
    for capacity in (5000, 19200):
        rates = {
            p: simulate(reqs, p, capacity, mode="serve", server=server).hit_rate for p in ("lru", "s3fifo")
        }
        adaptive = make_policy("chain-lru", capacity)
        rate = simulate(reqs, adaptive, capacity, mode="serve", server=server).hit_rate
        best = max(rates.values())
        assert rate >= best - 0.005, (capacity, rate, rates)
        if capacity == 5000:
            assert rates["s3fifo"] > rates["lru"] + 0.02
            recency = simulate(
                reqs,
                make_policy("chain-lru", capacity, mode="recency"),
                capacity,
                mode="serve",
                server=server,
            ).hit_rate
            assert recency < best - 0.02
            assert adaptive.requests_filtered > adaptive.requests_heard / 2


def test_a_switch_to_the_filter_moves_only_unhit_unpinned_blocks_to_probation():
    """The bundled Mooncake trace at 5,000 blocks, each request through on_request and then its
    blocks accessed deepest first (cache mode): at the duel's switch to the filter mode, the blocks
    the previous request inserted in M (never hit since) go to P, except one pinned across the
    switch, which stays in M and is back on M's list at its unpin; blocks that request hit in M stay
    there; P's pinned count stays exact."""
    policy = make_policy("chain-lru", 5000)
    inserted: list[int] = []  # the previous request's blocks inserted in M, still resident there
    hit: list[int] = []  # the previous request's blocks hit, in M
    for req in read_trace(BUNDLED_MOONCAKE):
        held = inserted.pop() if inserted else None
        if held is not None:
            policy.pin(held)
        full = full_blocks(len(req.block_keys), req.prompt_tokens, req.block_size)
        policy.on_request(req.block_keys, full, req.output_keys, req.arrival_s)
        if policy.mode == "filter":
            assert policy.mode_switches == 1 and inserted and hit and held is not None
            assert all(policy.in_probation(k) for k in inserted)
            assert not any(policy.in_probation(k) for k in hit)
            assert policy.is_pinned(held) and not policy.in_probation(held)
            assert policy.probation_pinned == 0
            policy.unpin(held)
            assert held in policy and not policy.is_pinned(held) and not policy.in_probation(held)
            return
        if held is not None:
            policy.unpin(held)
        blocks = [*req.block_keys[:full], *req.output_keys]
        found = {k: policy.access(k) for k in reversed(blocks)}
        in_main = [k for k in found if k in policy and not policy.in_probation(k)]
        inserted = [k for k in in_main if not found[k]]
        hit = [k for k in in_main if found[k]]
    pytest.fail("the duel never switched to the filter mode")


# Sessions whose next request extends their previous one, or keeps only part of it (a compacted or
# edited context): the part left behind is the abandoned branch session mode sends to P's oldest end.
session_requests = st.lists(
    st.tuples(
        st.integers(0, 3),  # session
        st.sampled_from(["extend", "keep-half", "restart"]),
        st.integers(1, 6),  # new full blocks
        st.floats(0.0, 90.0),  # gap to the previous request (s)
    ),
    min_size=1,
    max_size=60,
)


def _kept(before: list[int], how: str) -> list[int]:
    """What a session's next request keeps of its previous one's blocks."""
    return {"extend": before, "keep-half": before[: max(1, len(before) // 2)], "restart": before[:1]}[how]


def _session_request(policy, model: Model, session: int, keys: list[int], now: float) -> None:
    """One request of ``session`` through the policy (``replay_request`` with its session id) and
    the model: the same hit prefix."""
    hits, _, _ = replay_request(policy, keys, len(keys) * 16 + 1, 16, (), now, f"s{session}")
    model.on_request(keys, len(keys), [], now, session)
    assert hits == model.serve(keys)


@settings(max_examples=200, deadline=None)
@given(reqs=session_requests, capacity=st.integers(2, 24), sessions=st.booleans())
def test_session_mode_follows_its_stated_semantics(reqs, capacity, sessions):
    """With ``sessions=True`` and each request's session id, the blocks of a session's previous
    request after the prefix it shares with the new one leave for P's oldest end (the deepest
    first) before the new request is served; with ``sessions=False`` the ids change nothing."""
    policy = make_policy("chain-lru", capacity, window_s=30.0, threshold=0.4, sessions=sessions)
    model = Model(capacity, 30.0, threshold=0.4, sessions=sessions)
    last: dict[int, list[int]] = {}
    now, fresh = 0.0, 1000
    for session, how, new, gap in reqs:
        now += gap
        before = last.get(session, [500 + session % 2])  # two roots, two sessions each
        keys = _kept(before, how) + list(range(fresh, fresh + new))
        fresh += new
        last[session] = keys
        _session_request(policy, model, session, keys, now)
        assert policy.eviction_order() == model.order()
    if not sessions:
        assert policy.demoted == 0


# Sessions that extend their requests, abandon part of them, or end (the host is told): an ended
# session's own blocks go to P's oldest end; a block another followed session has held since the
# session brought it (the shared roots 500 and 501) stays.
ending_requests = st.lists(
    st.tuples(
        st.integers(0, 4),  # session
        st.sampled_from(["extend", "extend", "keep-half", "end"]),
        st.integers(1, 6),  # new full blocks
        st.floats(0.0, 90.0),  # gap to the previous request (s)
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(reqs=ending_requests, capacity=st.integers(2, 24), mode=st.sampled_from(["recency", "adaptive"]))
def test_a_sessions_end_follows_its_stated_semantics(reqs, capacity, mode):
    """``end_session`` moves the session's own blocks of its last request (brought by it, held by no
    other followed session's request since) to P's oldest end (the deepest first), and stops
    following the session (a later request of it starts afresh)."""
    policy = make_policy("chain-lru", capacity, window_s=30.0, threshold=0.4, sessions=True, mode=mode)
    model = Model(capacity, 30.0, threshold=0.4, sessions=True, mode=mode)
    last: dict[int, list[int]] = {}
    now, fresh, ended = 0.0, 1000, 0
    for session, how, new, gap in reqs:
        now += gap
        if how == "end":
            ended += session in model.session_last
            policy.end_session(session_key(f"s{session}"))
            model.end_session(session)
            last.pop(session, None)
        else:
            before = last.get(session, [500 + session % 2])  # two roots shared by the sessions
            keys = _kept(before, how) + list(range(fresh, fresh + new))
            fresh += new
            last[session] = keys
            _session_request(policy, model, session, keys, now)
        assert policy.eviction_order() == model.order()
        assert policy.sessions_followed == len(model.session_last)
    assert policy.sessions_ended == ended


def _served(policy, keys: list[int], now: float, session: str) -> int:
    """One request of ``keys`` (16-token blocks, all full, one token past them) in ``session``: its
    hit blocks."""
    return replay_request(policy, keys, len(keys) * 16 + 1, 16, [], now, session)[0]


def test_an_abandoned_branch_spares_the_blocks_a_sub_agent_extends():
    """A parent session brings 1-4, a sub-agent (a session of its own) extends them, the parent
    compacts to [1, 60]: 2, 3 and 4 are shared now, not the parent's own, so they keep their place
    as they would at the parent's end, and the sub-agent's next step hits 4 of its 5 blocks after
    two evictions, as hash-only chain-lru does (its compaction demoted them: 3 of 5)."""
    hits = {}
    for sessions in (False, True):
        policy = make_policy("chain-lru", 8, sessions=sessions, mode="recency")
        _served(policy, [1, 2, 3, 4], 0.0, "parent")
        _served(policy, [1, 2, 3, 4, 50], 1.0, "parent/agent_001")
        _served(policy, [1, 60], 2.0, "parent")  # compacted: 2, 3, 4 abandoned
        _served(policy, [70, 71, 72], 3.0, "other")  # 8 blocks -> 10: two evictions
        hits[sessions] = _served(policy, [1, 2, 3, 4, 50, 51], 4.0, "parent/agent_001")
        assert policy.demoted == 0
    assert hits == {False: 4, True: 4}


def test_sessions_that_never_end_do_not_stop_session_mode():
    """4,096 sessions followed, none ever ended (clients that never mark an end): a new session
    takes the place of the one heard from longest ago, so its end is heard and demotes its blocks
    (the table stayed full for good: no session was followed any more, every end was unknown); the
    Model does the same."""
    policy = make_policy("chain-lru", 64, sessions=True, mode="recency")
    model = Model(64, sessions=True, mode="recency")
    for i in range(MAX_SESSIONS + 10):
        _session_request(policy, model, i, [10**9 + i], i * 0.001)
    assert policy.sessions_followed == len(model.session_last) == MAX_SESSIONS
    _session_request(policy, model, "closing", [1, 2, 3], 100.0)
    policy.end_session(session_key("sclosing"))  # _session_request names it s<session>
    model.end_session("closing")
    assert policy.sessions_ended == 1 and policy.demoted == 3
    assert policy.eviction_order() == model.order()


def test_session_ends_in_cache_mode_are_told_after_each_sessions_last_request():
    """``simulate(..., session_ends_after_s=D)`` tells each session's end D seconds after its last
    request, before the first request at or after that time: the same hits, request by request, as
    the model told the same ends; told ends move the hit rate."""
    reqs = generate_requests(build_config(preset="mix04-single-multi-50", duration_s=900, rate=1.5), seed=5)
    capacity, params = 3000, {"sessions": True, "mode": "recency"}
    baseline = simulate(reqs, "chain-lru", capacity, mode="cache", policy_params=params)
    for after_s in (0.0, 5.0, 30.0):
        result = simulate(
            reqs, "chain-lru", capacity, mode="cache", policy_params=params, session_ends_after_s=after_s
        )
        model = Model(capacity, sessions=True, mode="recency")
        last = {r.session_id: i for i, r in enumerate(reqs)}  # session -> its last request
        ids = {sid: n for n, sid in enumerate(last)}
        told: set[str] = set()
        hits = []
        for index, r in enumerate(reqs):
            # before this request: every untold end due at or before its arrival, of a session
            # whose last request came before it, in the order (due time, last request)
            due = sorted(
                (reqs[i].arrival_s + after_s, i, sid)
                for sid, i in last.items()
                if sid not in told and i < index and reqs[i].arrival_s + after_s <= r.arrival_s
            )
            for _, _, sid in due:
                model.end_session(ids[sid])
                told.add(sid)
            keys = [int(k) for k in r.block_keys[: r.full_blocks]]
            outputs = [int(k) for k in r.output_keys]
            model.on_request(keys, len(keys), outputs, r.arrival_s, ids[r.session_id])
            prefix = model.prefix(keys[: r.max_hit_blocks])
            for k in reversed(keys + outputs):
                model.access(k)
            hits.append(prefix * r.block_size)
        assert result.first_hit_tokens == hits
        if after_s == 0.0:  # 0.189 -> 0.304 on 2026-12-05
            assert result.hit_rate > baseline.hit_rate + 0.05


def test_a_block_another_session_holds_since_is_not_the_ended_sessions_own():
    """B brings blocks 1 and 2; other traffic evicts them and the owner table is swept; A brings
    them again (they are A's own), then B's next request holds them: A's end demotes only its own
    block 10, not B's prefix."""
    policy = make_policy("chain-lru", 4, threshold=0.0, sessions=True, mode="recency")
    now = 0.0
    for sid, keys in [("B", [1, 2]), *((f"x{i}", [100 + 10 * i + j for j in range(3)]) for i in range(6))]:
        now += 1.0
        replay_request(policy, keys, len(keys) * 16 + 1, 16, (), now, sid)
    assert not {1, 2} & set(policy.eviction_order())
    for sid, keys in [("A", [1, 2, 10]), ("B", [1, 2, 20])]:
        now += 1.0
        replay_request(policy, keys, len(keys) * 16 + 1, 16, (), now, sid)
    policy.end_session(session_key("A"))
    assert policy.eviction_order() == [10, 20, 2, 1]  # oldest first: B's blocks stay in LRU order
    assert policy.demoted == 1 and policy.sessions_ended == 1 and policy.sessions_followed == 7


@pytest.mark.parametrize("server", [ServerModel(), VllmServer()])
def test_the_serve_loops_pass_session_ids_and_tell_each_end_after_its_last_request_finishes(server):
    """Both serve loops tell chain-lru each request's session (in_session) and, with
    ``session_ends_after_s``, each session's end that long after its last request finishes: at 0 s
    every session's end is told (each last request finishes before the run ends), an end due after
    the last event never is, and a policy that does not follow sessions is unaffected."""
    reqs = generate_requests(build_config(preset="mix04-single-multi-50", duration_s=900, rate=1.5), seed=5)
    sessions = {r.session_id for r in reqs}
    capacity = 3000

    def run(policy: str, after_s: float | None, **params):
        built = make_policy(policy, capacity, **params)
        return built, simulate(reqs, built, capacity, server=server, session_ends_after_s=after_s)

    followed, plain = run("chain-lru", None, sessions=True)
    assert followed.sessions_followed == len(sessions) and followed.sessions_ended == 0
    told, at_once = run("chain-lru", 0.0, sessions=True)
    assert told.sessions_ended == len(sessions) and told.sessions_followed == 0
    assert at_once.hit_rate > plain.hit_rate + 0.02  # the ended sessions' blocks go first
    never, late = run("chain-lru", 1e9, sessions=True)
    assert never.sessions_ended == 0 and late.first_hit_tokens == plain.first_hit_tokens
    _, lru = run("lru", None)
    _, lru_told = run("lru", 0.0)
    assert lru_told.first_hit_tokens == lru.first_hit_tokens


@pytest.mark.parametrize("server", [ServerModel(), VllmServer()])
def test_a_session_whose_last_request_is_refused_still_ends(server):
    """A request larger than the pool is refused and never finishes: it still counts as done, so
    its session's end is told and no session stays followed. (Neither loop tells the policy of a
    refused request, as vLLM's engine refuses it before its scheduler: a session refused whole is
    never followed.)"""
    reqs = generate_requests(build_config(preset="mix02-pure-multi", duration_s=900, rate=1.5), seed=5)
    capacity = 150

    def fits(r) -> bool:
        return r.prompt_tokens + r.output_tokens <= capacity * r.block_size

    last = {r.session_id: r for r in reqs}
    assert not all(fits(r) for r in last.values())  # some session's last request is refused
    heard = {r.session_id for r in reqs if fits(r)}
    policy = make_policy("chain-lru", capacity, sessions=True)
    simulate(reqs, policy, capacity, server=server, session_ends_after_s=0.0)
    assert policy.sessions_ended == len(heard) and policy.sessions_followed == 0


def test_session_ends_below_zero_are_refused():
    reqs = generate_requests(build_config(preset="mix02-pure-multi", duration_s=60, rate=1.5), seed=0)
    for mode in ("serve", "cache"):
        with pytest.raises(ValueError, match=">= 0 seconds"):
            simulate(reqs, "chain-lru", 100, mode=mode, session_ends_after_s=-1.0)


def test_a_root_past_the_followed_ones_reads_the_shared_entry_everywhere():
    """After 4,096 roots, new roots share one entry (the docstring). ``on_request`` read it, but
    ``inserting_for`` and ``extension_rate`` took such a root for an unknown one (the prior, not
    rarely extended): its blocks went to P in cache mode and to M in the serve loops and vLLM."""
    policy = make_policy("chain-lru", 1000, mode="recency")
    t = 0.0
    for root in range(1, 5001):  # single-block requests, never extended: their ends expire
        policy.on_request([root], 1, [], t)
        t += 1.0
    assert policy.roots == 4096
    late, other = 10**9, 10**9 + 1  # roots heard after the table filled
    policy.on_request([late], 1, [], t + 1000.0)  # every end expires, unextended
    shared = policy.extension_rate(late)
    assert shared < 0.2  # rarely extended: the 904 roots past the 4,096th, all unextended
    assert policy.extension_rate(other) == shared  # the one shared entry (it read the prior, 0.5)
    policy.insert(123)  # in on_request's context
    policy.inserting_for(other)
    policy.insert(456)  # in inserting_for's
    assert policy.in_probation(123) and policy.in_probation(456)


def test_reset_forgets_the_session_counters():
    """``reset`` forgets everything: ``demoted`` (blocks an ended session sent to P's oldest end)
    survived it, beside ``sessions_ended``, which did not."""
    policy = make_policy("chain-lru", 16, sessions=True, mode="recency")
    policy.in_session(1)
    policy.on_request([1, 2, 3], 3, [], 0.0)
    for key in (3, 2, 1):
        policy.access(key)
    policy.end_session(1)
    assert (policy.demoted, policy.sessions_ended) == (3, 1)
    policy.reset()
    assert (policy.demoted, policy.sessions_ended, len(policy)) == (0, 0, 0)
