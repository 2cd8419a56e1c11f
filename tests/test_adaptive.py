"""The WAKMan manager: switching on traffic shifts, staying put on stable traffic, surviving a
failing replay, and keeping the pool's invariants across switches at arbitrary times."""

from __future__ import annotations

import itertools
import logging
import math
import random

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import key_of
from wakman.adaptive import PAPER, PLUS, AdaptiveManager, simulate
from wakman.policies import handover, make_policy
from wakman.simulation import ServerModel
from wakman.traces import Request
from wakman.workload import build_config, generate_requests

HOUR = 3600.0


def shift(first: list[Request], second: list[Request], offset: float) -> list[Request]:
    moved = [msgspec.structs.replace(r, arrival_s=r.arrival_s + offset) for r in second]
    return [*first, *moved]


@pytest.fixture(scope="module")
def halves():
    agentic = generate_requests(build_config(preset="mix03-pure-agentic", duration_s=HOUR), seed=1)
    single = generate_requests(build_config(preset="mix01-pure-single", duration_s=HOUR), seed=2)
    return agentic, single


def capacity_where_halves_disagree(first, second, candidates=(8000, 12000)) -> int:
    """Capacities under pressure but not dominated by pinned blocks: at 6,000 blocks and below, the
    agentic half pins so much that the paper's shadow (sized to the mean *free* blocks, ~2,200)
    prefers S3-FIFO for its first post-shift interval and switches one interval late."""
    for capacity in candidates:
        a = {p: simulate(first, p, capacity).hit_rate for p in ("lru", "s3fifo")}
        b = {p: simulate(second, p, capacity).hit_rate for p in ("lru", "s3fifo")}
        if (
            max(a, key=a.get) != max(b, key=b.get)
            and abs(a["lru"] - a["s3fifo"]) > 0.01
            and abs(b["lru"] - b["s3fifo"]) > 0.01
        ):
            return capacity
    pytest.fail("no capacity where the two halves favour different policies")


@pytest.mark.parametrize("order", ["agentic-then-single", "single-then-agentic"])
def test_shift_is_followed_and_plus_tracks_the_better_static_policy(halves, order):
    agentic, single = halves
    first, second = (agentic, single) if order == "agentic-then-single" else (single, agentic)
    capacity = capacity_where_halves_disagree(first, second)
    trace = shift(first, second, HOUR)
    static = {p: simulate(trace, p, capacity).hit_rate for p in ("lru", "s3fifo")}
    paper = simulate(trace, "wakman", capacity)
    plus = simulate(trace, "wakman-plus", capacity)
    # paper mode: the second half's winner is live within one interval after the shift
    second_best = max(("lru", "s3fifo"), key=lambda p: simulate(second, p, capacity).hit_rate)
    after = [d for d in paper.extra["decisions"] if HOUR <= d["time_s"] <= HOUR + PAPER.interval_s + 1]
    assert any(d["choice"] == second_best for d in after), paper.extra["decisions"]
    assert plus.hit_rate >= max(static.values()) - 0.005, (plus.hit_rate, static)
    assert plus.hit_rate > paper.hit_rate, (plus.hit_rate, paper.hit_rate)


@pytest.mark.parametrize(
    "preset", ["mix02-pure-multi", "mix03-pure-agentic", "mix19-thirds", "mix20-agentic-heavy"]
)
def test_plus_stays_within_half_a_point_on_stable_traffic(preset):
    reqs = generate_requests(build_config(preset=preset), seed=5)
    for capacity in (3000, 8000):
        best = max(simulate(reqs, p, capacity).hit_rate for p in ("lru", "s3fifo"))
        plus = simulate(reqs, "wakman-plus", capacity).hit_rate
        assert plus >= best - 0.005, (preset, capacity, plus, best)


def test_a_failing_replay_keeps_serving_with_the_current_policy(caplog):
    reqs = generate_requests(build_config(preset="mix19-thirds", duration_s=1800), seed=3)
    manager = AdaptiveManager(PAPER.with_options(interval_s=300, first_decision_s=300), 4000)

    def broken(window, capacity):
        raise RuntimeError("shadow exploded")

    manager.replay_hook = broken
    with caplog.at_level(logging.WARNING, logger="wakman.adaptive.manager"):
        result = simulate(reqs, manager.initial_policy(), 4000, controller=manager)
    assert result.measured_requests == len(reqs)
    assert result.hit_rate == pytest.approx(simulate(reqs, "lru", 4000).hit_rate)
    errors = [d for d in manager.decisions if d.error]
    assert len(errors) >= 5 and all(d.choice == "lru" for d in manager.decisions)
    assert sum("shadow exploded" in r.getMessage() for r in caplog.records) == 1  # logged once


def test_decision_log_in_simulate_json():
    reqs = generate_requests(build_config(preset="mix19-thirds", duration_s=2700), seed=3)
    flat = simulate(reqs, "wakman", 4000).as_flat_dict()
    decisions = flat["decisions"]
    assert len(decisions) == 3
    for d in decisions:
        assert {"time_s", "window_start_s", "shadow_capacity", "rates", "choice", "replay_wall_s"} <= set(d)
        assert set(d["rates"]) == {"lru", "s3fifo"} and 0 < d["shadow_capacity"] <= 4000


class RandomSwitcher:
    """Switches the live policy at random events and checks the pool after each one."""

    def __init__(self, seed: int, names: list[str]) -> None:
        self.rng = random.Random(seed)
        self.names = names
        self.switches = 0

    def on_arrival(self, now, request) -> None:
        pass

    def on_time(self, now, pool) -> None:
        pool.check()
        if self.rng.random() < 0.3:
            cached = set(pool.policy.eviction_order()) | set(pool.policy.pinned_keys())
            name = self.rng.choice(self.names)
            pool.replace_policy(handover(pool.policy, make_policy(name, pool.capacity)))
            pool.check()
            assert set(pool.policy.eviction_order()) | set(pool.policy.pinned_keys()) == cached
            self.switches += 1


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), capacity=st.integers(8, 40))
def test_invariants_hold_across_switches_at_random_times(seed, capacity):
    rng = random.Random(seed)
    trace, t = [], 0.0
    for _ in range(30):
        t += rng.random()
        ids = [rng.randint(0, 5) for _ in range(rng.randint(1, 6))]
        chain = [key_of(tuple(ids[: i + 1])) for i in range(len(ids))]
        trace.append(
            Request(
                arrival_s=t,
                block_keys=chain,
                prompt_tokens=len(chain) * 16 + 5,
                output_tokens=rng.randint(1, 40),
                block_size=16,
            )
        )
    switcher = RandomSwitcher(seed, ["lru", "s3fifo", "s3fifo-v0", "arc", "sieve", "fifo"])
    server = ServerModel(
        prefill_tokens_per_s=3000, prefill_overhead_s=0.0, decode_tokens_per_s=40, max_running=4
    )
    result = simulate(trace, "lru", capacity, server=server, controller=switcher)
    assert switcher.switches > 0 and result.measured_requests + result.rejected == len(trace)


def test_cache_mode_supports_the_manager():
    reqs = generate_requests(build_config(preset="mix01-pure-single", duration_s=3600), seed=4)
    result = simulate(reqs, "wakman", 3000, mode="cache")
    assert any(d["switched"] for d in result.extra["decisions"])
    assert result.extra["decisions"][0]["shadow_capacity"] == 3000


@pytest.mark.parametrize("preset", ["wakman", "wakman-plus"])
def test_cache_mode_decides_ahead_as_in_line(preset):
    """Cache mode takes every decision first and then replays the live cache with the switches.
    The reference decides in line, request by request: each arrival, the decision due, the switch,
    then the request through the live cache (the loop cache mode ran before). Same hits per request,
    same switches, on traffic that shifts from single-turn to agentic."""
    from wakman.adaptive.config import ADAPTIVE_PRESETS
    from wakman.drivers import replay_request

    single = generate_requests(build_config(preset="mix01-pure-single", duration_s=1800), seed=4)
    agentic = generate_requests(build_config(preset="mix03-pure-agentic", duration_s=1800), seed=5)
    reqs, capacity = shift(single, agentic, 1800), 3000
    manager = AdaptiveManager(ADAPTIVE_PRESETS[preset], capacity)
    live, hits = manager.initial_policy(), 0
    for req in reqs:
        manager.on_arrival(req.arrival_s, req)
        name = manager.cache_decide(req.arrival_s, capacity)
        if name is not None:
            live = manager.cache_switch(live, name)
        hits += (
            replay_request(
                live,
                req.block_keys,
                req.prompt_tokens,
                req.block_size,
                req.output_keys,
                req.arrival_s,
                req.session_id,
            )[0]
            * req.block_size
        )
    result = simulate(reqs, preset, capacity, mode="cache")
    assert result.hit_tokens == hits
    ahead = [(d["time_s"], d["choice"], d["switched"]) for d in result.extra["decisions"]]
    assert ahead == [(d.time_s, d.choice, d.switched) for d in manager.decisions]
    assert sum(switched for _, _, switched in ahead) >= 1


@pytest.mark.parametrize("mode", ["cache", "serve"])
def test_plus_shadows_are_the_candidates_cache_runs(mode):
    """wakman-plus's shadows (persistent, the pool's size, fed the trace's outputs) are plain
    cache-mode runs of its candidates: given those runs' per-request hits instead of replaying its
    own shadows, it scores, decides and switches the same, on traffic that shifts."""
    single = generate_requests(build_config(preset="mix01-pure-single", duration_s=1800), seed=4)
    agentic = generate_requests(build_config(preset="mix03-pure-agentic", duration_s=1800), seed=5)
    reqs, capacity = shift(single, agentic, 1800), 3000
    runs = {n: simulate(reqs, n, capacity, mode="cache") for n in PLUS.candidates}
    hits = {n: run.first_hit_tokens for n, run in runs.items()}
    assert all(len(h) == len(reqs) and sum(h) == runs[n].hit_tokens for n, h in hits.items())
    own = simulate(reqs, "wakman-plus", capacity, mode=mode)
    given = simulate(reqs, "wakman-plus", capacity, mode=mode, shadow_hits=hits)
    assert given.hit_tokens == own.hit_tokens and given.first_hit_tokens == own.first_hit_tokens
    assert given.extra["decisions"] == [
        {**d, "replay_wall_s": g["replay_wall_s"]}
        for d, g in zip(own.extra["decisions"], given.extra["decisions"], strict=True)
    ]
    assert own.extra["switches"] >= 1


def test_shadow_hits_are_refused_where_they_cannot_stand_in():
    from wakman.simulation.server import VllmServer

    reqs = generate_requests(build_config(preset="mix19-thirds", duration_s=300), seed=3)
    hits = {n: [0] * len(reqs) for n in PLUS.candidates}
    with pytest.raises(ValueError, match="persistent shadows"):
        simulate(reqs, "wakman", 500, shadow_hits={"lru": [0] * len(reqs), "s3fifo": [0] * len(reqs)})
    with pytest.raises(ValueError, match="only an adaptive policy"):
        simulate(reqs, "lru", 500, shadow_hits=hits)
    with pytest.raises(ValueError, match="one hit count per request"):
        simulate(reqs, "wakman-plus", 500, shadow_hits={n: h[1:] for n, h in hits.items()})
    with pytest.raises(ValueError, match="exactly the candidates"):
        simulate(reqs, "wakman-plus", 500, shadow_hits={"chain-lru": hits["chain-lru"]})
    with pytest.raises(ValueError, match="decoded blocks"):
        simulate(reqs, "wakman-plus", 500, shadow_hits=hits, server=VllmServer())
    with pytest.raises(ValueError, match="-1"):  # serve mode's first_hit_tokens: never admitted
        simulate(reqs, "wakman-plus", 500, shadow_hits={n: [-1, *h[1:]] for n, h in hits.items()})
    # serve mode refuses a request larger than the pool before the manager hears of it: the hits,
    # one per trace request, would be read off by one from there (cache mode hears every request)
    big = max(range(len(reqs)), key=lambda i: reqs[i].prompt_tokens + reqs[i].output_tokens)
    pool = (reqs[big].prompt_tokens + reqs[big].output_tokens) // reqs[big].block_size - 1
    with pytest.raises(ValueError, match=f"request {big} is larger than the {pool:,}-block pool"):
        simulate(reqs, "wakman-plus", pool, shadow_hits=hits)
    assert simulate(reqs, "wakman-plus", pool, mode="cache", shadow_hits=hits).requests == len(reqs)
    # the manager built directly: too few hit counts is an error, not a logged failed replay
    manager = AdaptiveManager(PLUS, 500, shadow_hits={n: h[:1] for n, h in hits.items()})
    with pytest.raises(ValueError, match="fewer hit counts"):
        for r in reqs:
            manager.on_arrival(r.arrival_s, r)
            manager.cache_decide(r.arrival_s, 500)
    sessions = PLUS.with_options(policy_params={"chain-lru": {"sessions": True}})
    with pytest.raises(ValueError, match="session mode"):
        AdaptiveManager(sessions, 500, shadow_hits=hits)


def test_plus_is_a_documented_combination():
    assert PLUS.interval_s < PAPER.interval_s and PLUS.first_decision_s < PAPER.first_decision_s


def _first_miss_hit_tokens(policy, keys, prompt_tokens, block_size, outputs=(), arrival_s=0.0) -> int:
    """An independent statement of vLLM's rule: the policy hears the request (its full prompt
    blocks and outputs: chain-lru learns from them), hits the longest cached prefix (never the whole
    prompt), then every full block is touched deepest first (the order vLLM frees them)."""
    full = prompt_tokens // block_size
    policy.on_request(keys, min(full, len(keys)), list(outputs), arrival_s)
    hits = 0
    while hits < min(len(keys), (prompt_tokens - 1) // block_size) and keys[hits] in policy:
        hits += 1
    for key in reversed([*keys[:full], *outputs]):
        policy.access(key)
    return hits * block_size


@pytest.mark.parametrize("log_outputs", [False, True])
def test_persistent_shadows_score_like_one_continuous_replay(log_outputs):
    reqs = generate_requests(build_config(preset="mix19-thirds", duration_s=1200), seed=7)
    config = PLUS.with_options(
        log_outputs=log_outputs, interval_s=60.0, first_decision_s=60.0, window_s=300.0, half_life_s=120.0
    )
    capacity = 2500
    manager = AdaptiveManager(config, capacity)
    # the reference: one policy per candidate, fed the whole trace in one pass
    shadows = {name: make_policy(name, capacity) for name in config.candidates}
    scored: list[tuple[float, int, dict[str, int]]] = []
    checked = 0
    for r in reqs:
        while r.arrival_s >= manager.next_decision:
            decision_time = manager.next_decision
            manager.decide(decision_time, None)
            newest = scored[-1][0]
            window = [s for s in scored if s[0] >= newest - config.window_s]
            weight = [0.5 ** ((newest - s[0]) / config.half_life_s) for s in window]
            prompt = sum(w * s[1] for w, s in zip(weight, window, strict=True))
            expected = {
                n: sum(w * s[2][n] for w, s in zip(weight, window, strict=True)) / prompt
                for n in config.candidates
            }
            assert manager.decisions[-1].rates == pytest.approx(expected, abs=1e-12)
            assert manager.decisions[-1].shadow_capacity == capacity  # shadows the size of the pool
            checked += 1
        manager.on_arrival(r.arrival_s, r)
        outputs = r.output_keys if log_outputs else ()
        hits = {
            n: _first_miss_hit_tokens(p, r.block_keys, r.prompt_tokens, r.block_size, outputs, r.arrival_s)
            for n, p in shadows.items()
        }
        scored.append((r.arrival_s, r.prompt_tokens, hits))
    assert checked >= 15
    # each logged request is replayed once: the log holds nothing older than the last decision
    assert all(entry.arrival_s >= manager.decisions[-1].time_s for entry in manager.estimator.log)


def test_logged_output_blocks_reach_the_shadows():
    """The second turn's prompt is the first turn's prompt and answer: only a manager that logs the
    answer's blocks sees them hit."""
    size = 16
    first = Request(
        arrival_s=0.0,
        prompt_tokens=4 * size,
        block_keys=[1, 2, 3, 4],
        block_size=size,
        output_tokens=2 * size + 1,
        output_keys=[5, 6],
    )
    second = Request(
        arrival_s=1.0,
        prompt_tokens=7 * size,
        block_keys=[1, 2, 3, 4, 5, 6, 7],
        block_size=size,
        output_tokens=1,
    )
    rates = {}
    for log_outputs in (False, True):
        config = PLUS.with_options(
            log_outputs=log_outputs, half_life_s=None, candidates=("lru", "s3fifo"), start_policy="lru"
        )
        manager = AdaptiveManager(config, 100)
        for r in (first, second):
            manager.on_arrival(r.arrival_s, r)
        manager.decide(PLUS.first_decision_s, None)
        rates[log_outputs] = manager.decisions[-1].rates["lru"]
    assert rates[False] == pytest.approx(4 * size / (11 * size))
    assert rates[True] == pytest.approx(6 * size / (11 * size))


def test_paper_mode_scores_shadows_with_vllms_hit_rate():
    assert PAPER.shadow_metric == "vllm" and PAPER.shadows == "fresh" and PAPER.shadow_size == "free"
    assert PAPER.interval_s == 900.0 and PAPER.candidates == ("lru", "s3fifo") and PAPER.start_policy == "lru"


@settings(max_examples=200, deadline=None)
@given(
    samples=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 1000)), max_size=40),
    window=st.tuples(st.integers(-20, 420), st.integers(-20, 420)),
    forget=st.integers(-20, 420),
)
def test_free_block_log_means_are_exact(samples, window, forget):
    """The log's time-weighted mean against the step function integrated in exact fractions:
    a sample holds from its time to the next later sample's (the last one from its time on); one
    back in time is ignored."""
    from fractions import Fraction

    from wakman import _core

    log = _core.FreeBlockLog()
    kept: list[tuple[float, int]] = []  # the samples that took effect, times in 1/4 s
    for t, free in samples:
        log.sample(t / 4, free)
        if not kept or t / 4 >= kept[-1][0]:
            kept.append((t / 4, free))
    log.forget_before(forget / 4)
    steps = [(a, b, f) for (a, f), (b, _) in itertools.pairwise(kept) if b > a and b > forget / 4]
    start, end = (Fraction(w, 4) for w in window)
    area = covered = Fraction(0)
    tail = [(kept[-1][0], float(end), kept[-1][1])] if kept else []  # the last count, from its time on
    for a, b, f in steps + tail:
        overlap = min(Fraction(b), end) - max(Fraction(a), start)
        if overlap > 0:
            area, covered = area + f * overlap, covered + overlap
    expected = float(area / covered) if covered else float(kept[-1][1] if kept else 0)
    assert log.mean(float(start), float(end)) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert len(log) == len(steps)


@pytest.mark.parametrize("now, free", [(math.inf, 5), (-math.inf, 5), (math.nan, 5), (1.0, -1)])
def test_a_free_block_sample_at_no_time_or_of_a_negative_count_is_refused(now, free):
    """A sample at an infinite or NaN time, or of a negative count, would make every later mean NaN
    or negative: it is refused and the log keeps what it had."""
    from wakman import _core

    log = _core.FreeBlockLog()
    log.sample(0.0, 10)
    log.sample(2.0, 30)
    with pytest.raises(ValueError, match="free-block log"):
        log.sample(now, free)
    assert log.mean(0.0, 4.0) == 20.0 and len(log) == 1


class EveryEvent:
    """The manager driven from Python at every event, the way the loop did before it sampled the
    free blocks itself: no ``free_log`` or ``wake_s`` for the loop to use. The count read before an
    event is processed held since the previous event."""

    def __init__(self, manager: AdaptiveManager) -> None:
        self.manager, self.calls, self.previous_s = manager, 0, 0.0

    def on_arrival(self, now, request) -> None:
        self.manager.on_arrival(now, request)

    def on_time(self, now, pool) -> None:
        self.calls += 1
        self.manager.estimator.sample_free(self.previous_s, pool.free)
        self.previous_s = now
        self.manager.on_time(now, pool)

    def report(self):
        return self.manager.report()


@pytest.mark.parametrize("config", [PAPER, PLUS.with_options(interval_s=120.0)], ids=["paper", "plus"])
def test_the_loop_samples_free_blocks_and_wakes_the_manager_as_every_event_would(config):
    """The loop samples ``free_log`` natively and calls ``on_time`` only once ``wake_s`` is reached;
    the manager's decisions (times, shadow sizes from the mean free blocks, rates, choices) equal
    those of the same manager called at every event."""
    from wakman.simulation import simulate as simulate_static

    reqs = generate_requests(build_config(preset="mix19-thirds", duration_s=2700), seed=5)
    runs = []
    for wrap in (False, True):
        manager = AdaptiveManager(config, 2500)
        controller = EveryEvent(manager) if wrap else manager
        result = simulate_static(reqs, manager.initial_policy(), 2500, controller=controller)
        decisions = [
            (d.time_s, d.window_start_s, d.shadow_capacity, d.rates, d.choice) for d in manager.decisions
        ]
        runs.append((result.hit_rate, decisions))
    assert controller.calls > 100 * len(runs[1][1])  # every event, against a few wake-ups
    assert runs[0] == runs[1] and len(runs[0][1]) >= 2


class LogOnly:
    """A controller that only keeps the loop's free-block log."""

    def __init__(self) -> None:
        from wakman import _core

        self.free_log = _core.FreeBlockLog()

    def on_arrival(self, now, request) -> None:
        pass

    def on_time(self, now, pool) -> None:
        pass


@pytest.mark.parametrize("server", ["event", "steps"])
def test_the_loops_free_block_log_is_the_loops_own_integral(server):
    """Over the whole run, the log's time-weighted mean equals the loop's own integral of the free
    blocks (``mean_free_blocks``, summed in the loop between events). Sparse traffic (a request of
    100 blocks every 150 s, 200 blocks) makes a count logged one event late show: the idle stretch
    after a request finishes would carry its blocks as still in use (about 100 free instead of 200)."""
    from wakman.simulation import VllmServer
    from wakman.simulation import simulate as simulate_static

    reqs = [
        Request(
            arrival_s=150.0 * i + 1.0,
            block_keys=np.arange(1000 * i + 1, 1000 * i + 101, dtype=np.uint64),
            prompt_tokens=1600,
            output_tokens=4,
            block_size=16,
        )
        for i in range(12)
    ]
    controller = LogOnly()
    options = {"server": VllmServer()} if server == "steps" else {}
    result = simulate_static(reqs, "lru", 200, controller=controller, **options)
    assert result.mean_free_blocks > 190
    end = reqs[0].arrival_s + sum(interval.seconds for interval in result.intervals)  # the loop's span
    assert controller.free_log.mean(reqs[0].arrival_s, end) == pytest.approx(
        result.mean_free_blocks, rel=1e-9
    )


@settings(max_examples=200, deadline=None)
@given(
    requests=st.lists(
        st.tuples(st.integers(0, 4000), *[st.integers(0, 5000)] * 4),
        max_size=60,
    ),
    horizon=st.integers(0, 4000),
    half_life=st.one_of(st.none(), st.floats(1.0, 900.0)),
)
def test_decayed_scores_weigh_each_request_by_its_age(requests, horizon, half_life):
    """wakman-plus's window scores against the rule written out in Python floats: per candidate,
    sum of w * hit tokens over sum of w * prompt tokens, w = 0.5 ** (age / half-life), requests
    that arrived before the horizon dropped; the same figures bit for bit."""
    from wakman import _core

    requests = sorted((t / 8, p, (a, b, c)) for t, p, a, b, c in requests)
    scores = _core.DecayedScores(3)
    for t, p, hits in requests:
        scores.add(t, p, list(hits))
    scores.forget_before(horizon / 8)
    kept = requests[next((i for i, r in enumerate(requests) if r[0] >= horizon / 8), len(requests)) :]
    assert len(scores) == len(kept)
    expected = [0.0, 0.0, 0.0]
    if kept:
        newest = kept[-1][0]
        weights = [1.0 if half_life is None else 0.5 ** ((newest - t) / half_life) for t, _, _ in kept]
        prompt = sum(w * p for w, (_, p, _) in zip(weights, kept, strict=True))
        if prompt:
            hits = [sum(w * r[2][i] for w, r in zip(weights, kept, strict=True)) for i in range(3)]
            expected = [h / prompt for h in hits]
    assert scores.rates(half_life) == expected


def _first_miss_tokens(window, shadow) -> tuple[int, int]:
    """Hit and prompt tokens of ``window`` through ``shadow``, vLLM's way, written out: the longest
    cached prefix (at most prompt - 1 tokens), then every full prompt block accessed deepest first."""
    hit = prompt = 0
    for r in window:
        keys = [int(k) for k in r.block_keys]
        limit = min(len(keys), (r.prompt_tokens - 1) // r.block_size)
        found = 0
        while found < limit and keys[found] in shadow:
            found += 1
        hit, prompt = hit + found * r.block_size, prompt + r.prompt_tokens
        for k in reversed(keys[: min(len(keys), r.prompt_tokens // r.block_size)]):
            shadow.access(k)
    return hit, prompt


def test_a_decision_replays_its_due_window_after_an_idle_stretch():
    """Requests in [0, 800 s), none until 2,800 s, then traffic again: the decision due at 900 s is
    taken at the first event after the gap and replays [0, 900): every early request, scored as
    fresh LRU and S3-FIFO caches of the live cache's size score them (an independent loop); the due
    times between (1,800 s, empty) are skipped, the next is due at 2,700 s, on the grid. Before,
    the first decision replayed the empty [1,901, 2,801) and the early requests never."""
    from wakman.simulation import simulate as simulate_static

    early = generate_requests(build_config(preset="mix01-pure-single", duration_s=800), seed=3)
    late = generate_requests(build_config(preset="mix01-pure-single", duration_s=1800), seed=4)
    reqs = early + [msgspec.structs.replace(r, arrival_s=r.arrival_s + 2800.0) for r in late]
    manager = AdaptiveManager(PAPER, 3000)
    simulate_static(reqs, manager.initial_policy(), 3000, controller=manager, mode="cache")
    first = manager.decisions[0]
    assert (first.time_s, first.window_start_s, first.requests) == (900.0, 0.0, len(early))
    assert first.taken_s == reqs[len(early)].arrival_s
    for name in PAPER.candidates:
        hit, prompt = _first_miss_tokens(early, make_policy(name, 3000))
        assert first.rates[name] == pytest.approx(hit / prompt, abs=1e-12)
    assert [d.time_s for d in manager.decisions[1:3]] == [2700.0, 3600.0]
    assert all(d.time_s % 900.0 == 0.0 and d.window_start_s == d.time_s - 900.0 for d in manager.decisions)


def test_a_long_idle_stretch_costs_a_few_decisions():
    """wakman-plus decides every 30 s; a month without requests between two bursts is skipped in
    O(1): the decisions due in it hold no request and are not taken one by one."""
    from wakman.simulation import simulate as simulate_static

    burst = generate_requests(build_config(preset="mix19-thirds", duration_s=120), seed=1)
    month = 30 * 86400.0
    reqs = burst + [msgspec.structs.replace(r, arrival_s=r.arrival_s + month) for r in burst]
    manager = AdaptiveManager(PLUS, 2000)
    simulate_static(reqs, manager.initial_policy(), 2000, controller=manager, mode="cache")
    assert len(manager.decisions) < 20
    last = max(d.time_s for d in manager.decisions)
    assert last > month  # the second burst was decided on
    assert sum(d.requests for d in manager.decisions) == sum(r.arrival_s < last for r in reqs)


def test_skipped_decisions_leave_their_requests_to_the_persistent_shadows():
    """With skip_unchanged, a skipped decision feeds nothing; its requests reach the persistent
    shadows at the next decision that replays: every request before the last such decision is
    replayed exactly once (before, a skip dropped them)."""
    from wakman.simulation import simulate as simulate_static

    fed: list[float] = []

    class Counting(AdaptiveManager):
        def _persistent_replay(self, new_requests, capacity):
            fed.extend(r.arrival_s for r in new_requests)
            return super()._persistent_replay(new_requests, capacity)

    reqs = generate_requests(build_config(preset="mix19-thirds", duration_s=1800), seed=0)
    manager = Counting(PLUS.with_options(skip_unchanged=True), 6000)
    simulate_static(reqs, manager.initial_policy(), 6000, controller=manager, mode="cache")
    assert any(d.skipped for d in manager.decisions)
    last = max(d.time_s for d in manager.decisions if d.requests and not d.skipped)
    assert fed == [r.arrival_s for r in reqs if r.arrival_s < last]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"interval_s": float("nan")}, "interval_s"),
        ({"window_s": float("inf")}, "window_s"),
        ({"first_decision_s": -1.0}, "first_decision_s"),
        ({"half_life_s": float("nan")}, "half_life_s"),
        ({"hysteresis": float("nan")}, "hysteresis"),
        ({"hysteresis": -0.1}, "hysteresis"),
        ({"candidates": ("lru", "lru")}, "distinct"),
        ({"shadows": "persistent", "shadow_size": "free"}, "cannot resize"),
        ({"half_life_s": 1.0}, "fresh shadows"),  # paper mode: it used to be described, and ignored
        ({"max_logged_blocks": 0}, "max_logged_blocks"),
        # each of these ran: every decision failed (a logged warning) or the manager never stopped
        ({"candidates": ("lru", "nosuch")}, "candidates must be a tuple of distinct online policies"),
        ({"candidates": ("lru", "belady")}, "candidates must be a tuple of distinct online policies"),
        ({"candidates": ("lru", "infinite")}, "candidates must be a tuple of distinct online policies"),
        ({"candidates": "chain-lru"}, "candidates must be a tuple"),  # its letters were distinct "names"
        ({"policy_params": {"s3fifo": {"no_such": 1}}}, r"policy_params\['s3fifo'\]"),
        ({"policy_params": {"s3fifo": {"small_ratio": 2.0}}}, "small_ratio must be in"),
        ({"policy_params": {"arc": {}}}, "'arc' is not a candidate"),
        ({"interval_s": 1e-15}, "interval_s must be a finite number of seconds >= 0.001"),
        ({"interval_s": True}, "interval_s"),
        ({"interval_s": "900"}, "interval_s"),
        ({"max_logged_blocks": float("nan")}, "max_logged_blocks must be an integer"),
        # the block metric replays prompt keys only: the outputs were logged and never seen
        ({"shadow_metric": "block", "log_outputs": True}, "log_outputs"),
    ],
)
def test_configs_that_cannot_run_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        PAPER.with_options(**changes)


def test_an_adaptive_run_refuses_one_policys_parameters():
    """``policy_params`` of ``simulate`` build one policy by name; an adaptive run (or a ready policy)
    ignored them silently. Its candidates' parameters are its config's."""
    from wakman.simulation import simulate as simulate_static

    reqs = [Request(arrival_s=0.0, block_keys=[1], prompt_tokens=32, output_tokens=1, block_size=16)]
    with pytest.raises(ValueError, match="policy_params: wakman builds its candidates"):
        simulate(reqs, "wakman", 100, policy_params={"no_such_param": 1})
    with pytest.raises(ValueError, match="a ready policy was built with its own"):
        simulate_static(reqs, make_policy("lru", 100), 100, policy_params={"no_such_param": 1})


@pytest.mark.parametrize("mode", ["serve", "cache"])
@pytest.mark.parametrize("arrivals", [[float("nan"), 1.0], [-1.0, 1.0], [0.0, float("inf")], [2.0, 1.0]])
def test_simulate_refuses_arrival_times_it_cannot_run(mode, arrivals):
    """Hand-built requests with a NaN, negative, infinite or decreasing arrival are refused (serve
    mode ran for ever on them)."""
    from wakman.simulation import simulate as simulate_static

    reqs = [
        Request(arrival_s=t, block_keys=[i + 1], prompt_tokens=32, output_tokens=1, block_size=16)
        for i, t in enumerate(arrivals)
    ]
    with pytest.raises(ValueError, match="arrival"):
        simulate_static(reqs, "lru", 10, mode=mode)


def test_a_persistent_replay_that_fails_part_way_restarts_every_shadow(monkeypatch):
    """wakman-plus's second candidate raises on one request of a batch (a transient error): the
    decision logs the error, and every shadow starts again cold, so from there all are fed the same
    requests (the first had been fed the whole batch, the second part of it, for good)."""
    import wakman.adaptive.manager as manager_module

    reqs = [
        Request(
            arrival_s=float(t),
            block_keys=[t % 5, 10 + t % 5],
            prompt_tokens=33,
            output_tokens=1,
            block_size=16,
        )
        for t in range(120)
    ]
    real = manager_module._first_miss_hits
    fed: dict = {}  # shadow -> requests fed (the key keeps it alive: no id is reused)

    def flaky(r, shadow):
        if shadow.name == PLUS.candidates[1] and r.index == 45:
            raise MemoryError("transient")
        fed[shadow] = fed.get(shadow, 0) + 1
        return real(r, shadow)

    monkeypatch.setattr(manager_module, "_first_miss_hits", flaky)
    m = AdaptiveManager(PLUS, 20)
    simulate(reqs, m.initial_policy(), 20, mode="cache", controller=m)
    assert [d.error is not None for d in m.decisions].count(True) == 1 and m.decisions[-1].error is None
    assert len({fed[shadow] for shadow in m._shadows.values()}) == 1
