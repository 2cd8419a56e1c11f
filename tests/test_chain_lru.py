"""chain-lru against an independent model of its docstring (plain Python dicts and lists), and its
behaviour on traffic whose chains are or are not extended."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from wakman.drivers import replay_request
from wakman.policies import make_policy
from wakman.simulation import simulate
from wakman.workload import build_config, generate_requests


class Model:
    """chain-lru as its docstring states it, written without the core's structures."""

    def __init__(
        self, capacity: int, window_s: float = 120.0, threshold: float = 0.2, sessions: bool = False
    ) -> None:
        self.capacity, self.window_s, self.threshold, self.sessions = capacity, window_s, threshold, sessions
        self.session_last: dict[int, list[int]] = {}
        self.prob: OrderedDict[int, None] = OrderedDict()  # oldest first
        self.main: OrderedDict[int, None] = OrderedDict()
        self.rare: dict[int, bool] = {}
        self.count: dict[int, int] = {}
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
            last = self.session_last.get(session, [])
            shared = 0
            while shared < min(len(last), len(chain)) and last[shared] == chain[shared]:
                shared += 1
            for k in last[shared:]:  # each to P's oldest end: the deepest ends oldest, evicted first
                if k in self.prob or k in self.main:
                    (self.prob if k in self.prob else self.main).pop(k)
                    self.prob[k] = None
                    self.prob.move_to_end(k, last=False)
            self.session_last[session] = chain
        for end, (t, root) in sorted(self.open.items(), key=lambda item: item[1][0]):
            if t <= now - self.window_s:
                del self.open[end]
                self.tally(root, False)
        for k in keys[: max(full - 1, 0)]:
            if k in self.open:
                self.tally(self.open.pop(k)[1], True)
        if not full and not outputs:
            self.context_rare = False
            return
        root = keys[0] if full else outputs[0]
        self.stats.setdefault(root, [0.0, 0.0])
        for end in ([keys[full - 1]] if full else []) + (outputs[-1:] if outputs else []):
            self.open.pop(end, None)
            self.open[end] = (now, root)
        self.context_rare = self.rate(root) < self.threshold

    def access(self, key: int) -> bool:
        if key in self.prob or key in self.main:
            if key in self.main and self.rare[key]:
                self.count[key] = min(self.count[key] + 1, 3)
            (self.prob if key in self.prob else self.main).pop(key)
            self.main[key] = None
            return True
        if key in self.ghost:
            del self.ghost[key]
            self.pending.add(key)
        while len(self.prob) + len(self.main) >= self.capacity:
            self.evict()
        to_main = key in self.pending or key in self.ghost
        self.pending.discard(key)
        self.ghost.pop(key, None)
        self.rare[key], self.count[key] = self.context_rare, 0
        (self.main if to_main or not self.context_rare else self.prob)[key] = None
        return False

    def evict(self) -> int:
        if self.prob:
            key, _ = self.prob.popitem(last=False)
            if len(self.ghost) >= self.capacity:
                self.ghost.popitem(last=False)
            self.ghost[key] = None
            return key
        while True:
            key, _ = self.main.popitem(last=False)
            if self.count[key]:
                self.count[key] -= 1
                self.main[key] = None
                continue
            return key

    def serve(self, keys: list[int]) -> int:
        """A request's blocks as replay_request drives them (after ``on_request``): its cached prefix
        by the first-miss rule, then every block accessed deepest first. Returns the prefix's blocks."""
        hits = 0
        while hits < len(keys) and (keys[hits] in self.prob or keys[hits] in self.main):
            hits += 1
        for k in reversed(keys):
            self.access(k)
        return hits

    def order(self) -> list[int]:
        return [*self.prob, *self.main]


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


@settings(max_examples=200, deadline=None)
@given(reqs=requests, capacity=st.integers(2, 24), window=st.sampled_from([5.0, 30.0, 120.0]))
def test_chain_lru_follows_its_stated_semantics(reqs, capacity, window):
    policy = make_policy("chain-lru", capacity, window_s=window, threshold=0.4)
    model = Model(capacity, window, threshold=0.4)
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
        assert policy.eviction_order() == model.order()
        assert [k for k in model.ghost] == [k for k in model.ghost if policy.in_ghost(k)]


def test_without_request_hints_it_is_lru():
    keys = [(i * 7919) % 500 for i in range(20_000)]
    lru, chain = make_policy("lru", 120), make_policy("chain-lru", 120)
    assert chain.replay(keys) == lru.replay(keys)
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
    return {p: simulate(reqs, p, capacity, mode="cache").hit_rate for p in ("lru", "s3fifo", "chain-lru")}


def test_single_turn_payloads_go_first_and_sessions_keep_lru():
    single = _rates("mix01-pure-single", 4000)  # popular fixed prompts, payloads used once
    assert single["chain-lru"] > single["lru"] + 0.03
    agentic = _rates("mix03-pure-agentic", 4000)  # every root's requests are extended
    assert agentic["chain-lru"] == agentic["lru"]


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
        prefix = {"extend": before, "keep-half": before[: max(1, len(before) // 2)], "restart": before[:1]}[
            how
        ]
        keys = prefix + list(range(fresh, fresh + new))
        fresh += new
        last[session] = keys
        hits, _, _ = replay_request(policy, keys, len(keys) * 16 + 1, 16, (), now, f"s{session}")
        model.on_request(keys, len(keys), [], now, session)
        assert hits == model.serve(keys)
        assert policy.eviction_order() == model.order()
    if not sessions:
        assert policy.demoted == 0
