"""vLLM's real scheduler, with no model and no engine (``vllm_sched_loop``): wakman's policies
against stock vLLM step by step, and the KV cache events that prefix-aware routers read."""

from __future__ import annotations

import itertools
import random
import time

import msgspec
import numpy as np
import pytest

from vllm_support import long_outputs_trace, need_vllm, phased_trace, small_trace, with_output_keys_trace

pytestmark = [pytest.mark.vllm, pytest.mark.bare_vllm]
need_vllm()

from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id  # noqa: E402

from vllm_sched_loop import (  # noqa: E402
    BLOCK_SIZE,
    EventMirror,
    RecordingPublisher,
    SchedulerLoop,
    build_scheduler,
    event_shape,
    pool_hash_counts,
    pool_of,
)
from wakman.policies import make_policy  # noqa: E402
from wakman.simulation import VllmServer, simulate  # noqa: E402
from wakman.traces.model import Request as TraceRequest  # noqa: E402
from wakman.traces.model import as_engine_serves  # noqa: E402
from wakman.vllm_plugin.block_pool import is_installed  # noqa: E402
from wakman.vllm_plugin.free_queue import policy_key  # noqa: E402

CAPACITY = 300  # blocks of 32 tokens: under pressure for this trace (see the first test)
STATIC = ("lru", "fifo", "s3fifo", "arc", "sieve", "chain-lru")


@pytest.fixture(scope="module")
def trace() -> list:
    return small_trace(duration_s=300, short_prompts=True)


@pytest.fixture(scope="module")
def stock_run(trace):
    return SchedulerLoop(build_scheduler(CAPACITY, None)).run(trace)


def _run(trace, policy, capacity=CAPACITY, env=None):
    scheduler = build_scheduler(capacity, policy, env=env)
    result = SchedulerLoop(scheduler).run(trace, after_step=lambda k: pool_of(scheduler).check())
    return scheduler, result


def test_lru_gives_stock_vllm_hits_step_by_step(trace, stock_run):
    """Same admissions, same hit tokens per admitted request, same PrefixCacheStats every step;
    and the capacity is under pressure (ten times the blocks hit far more)."""
    scheduler, ours = _run(trace, "lru")
    assert is_installed(pool_of(scheduler))
    assert stock_run.rejected == 0 and stock_run.query_tokens > 500_000
    assert len(ours.steps) == len(stock_run.steps)
    for k, (a, b) in enumerate(zip(ours.steps, stock_run.steps, strict=True)):
        assert a == b, f"step {k}: wakman lru {a} != stock {b}"
    roomy = SchedulerLoop(build_scheduler(10 * CAPACITY, None)).run(trace)
    assert roomy.hit_tokens > 2 * stock_run.hit_tokens


@pytest.fixture(scope="module")
def lru_run(trace):
    return _run(trace, "lru")[1]


@pytest.mark.parametrize("policy", ["s3fifo", "arc", "sieve"])
def test_policies_differ_from_lru_under_pressure(trace, lru_run, policy):
    _, ours = _run(trace, policy)
    assert ours.query_tokens == lru_run.query_tokens and ours.rejected == 0
    assert ours.hit_tokens != lru_run.hit_tokens


def _whole_prompt(keys: list[int], arrival_s: float) -> TraceRequest:
    """A request whose prompt is exactly these 32-token blocks plus one token, with a 1-token answer."""
    return TraceRequest(
        arrival_s=arrival_s,
        block_keys=np.array(keys, dtype=np.uint64),
        prompt_tokens=32 * len(keys) + 1,
        output_tokens=1,
        block_size=32,
    )


def _whole_prompts(seed: int, count: int = 160) -> list:
    """One request at a time (100 s apart), each a whole prompt drawn (Pareto popularity) from 14
    unrelated chains of 3-8 blocks, so prompts come back after their blocks were evicted."""
    rng = random.Random(seed)
    chains = [[1000 * p + j for j in range(rng.randint(3, 8))] for p in range(14)]
    out = []
    for i in range(count):
        keys = chains[min(int(rng.paretovariate(0.8)) - 1, len(chains) - 1)]
        out.append(_whole_prompt(keys, 100.0 * i))
    return out


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("policy", ["s3fifo", "arc"])
def test_ghost_hits_reach_the_policy_before_the_evictions(policy, seed):
    """A returning prompt's blocks that S3-FIFO or ARC remember as ghosts are missed before the
    admission's evictions (the manager's ``allocate_slots`` announces them, the queue tells the
    policy at its first ``popleft_n``), as the simulator's pool does: with one request at a time,
    vLLM's hit tokens per request and the policy's final eviction order are the simulator's
    exactly. Seen at insert instead (after the evictions, which can push the oldest ghosts out),
    11-15 requests differed for ARC on these streams."""
    requests = _whole_prompts(seed)
    scheduler = build_scheduler(24, policy)
    loop = SchedulerLoop(scheduler)
    trace_key = {}
    for i, req in enumerate(requests):
        hashes = loop._request(req, i, 1).block_hashes
        for block_hash, key in zip(hashes, req.block_keys.tolist(), strict=True):
            trace_key[policy_key(make_block_hash_with_group_id(block_hash, 0))] = key
    result = loop.run(requests, after_step=lambda k: pool_of(scheduler).check())
    hits = {int(rid.rsplit("-", 1)[1]): tokens for step in result.steps for rid, tokens in step[0]}
    reference = make_policy(policy, 24)
    sim = simulate(requests, reference, 24, server=VllmServer(4096, 64, 1 / 40))
    assert [hits[i] for i in range(len(requests))] == sim.first_hit_tokens
    assert reference.ghost_size > 0 and 0.3 < sim.hit_rate < 0.9
    live = pool_of(scheduler).free_block_queue.policy
    assert [trace_key[k] for k in live.eviction_order()] == reference.eviction_order()


def _chats_and_singles(seed: int, count: int = 200) -> list:
    """One request every 10 s: half single-turn (a fixed 3-block prompt, then a payload of 2-5
    blocks used once: its root is never extended), half turns of chats (four at a time, each turn
    its chat's previous prompt and 2 new blocks, 4 turns, then a new chat with a new root)."""
    rng = random.Random(seed)
    chats = [[10_000 * (c + 1) + j for j in range(3)] for c in range(4)]
    turns, next_chat, out = [0] * 4, 4, []
    for i in range(count):
        if rng.random() < 0.5:
            keys = [1, 2, 3] + [1_000_000 + 10 * i + j for j in range(rng.randint(2, 5))]
        else:
            c = rng.randrange(4)
            if turns[c] == 4:
                chats[c], turns[c], next_chat = (
                    [10_000 * (next_chat + 1) + j for j in range(3)],
                    0,
                    next_chat + 1,
                )
            chats[c] = chats[c] + [chats[c][-1] + 1, chats[c][-1] + 2]
            turns[c] += 1
            keys = chats[c]
        out.append(_whole_prompt(keys, 10.0 * i))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_chain_lru_hears_each_request_as_the_simulator_does(seed):
    """chain-lru learns from the request stream: the scheduler tells its pool of each arrival
    (``add_request``) and of each allocation's root (``allocate_slots``), as the simulator's serve
    loop tells its pool. One request at a time, vLLM's hit tokens per request are the simulator's
    exactly; without the hints chain-lru would be LRU, whose hits here differ."""
    requests = _chats_and_singles(seed)
    capacity = 40
    hits = {}
    for policy in ("chain-lru", "lru"):
        scheduler = build_scheduler(capacity, policy)
        checked = pool_of(scheduler)
        result = SchedulerLoop(scheduler).run(requests, after_step=lambda k, pool=checked: pool.check())
        by_id = {int(rid.rsplit("-", 1)[1]): tokens for step in result.steps for rid, tokens in step[0]}
        hits[policy] = [by_id[i] for i in range(len(requests))]
    server = VllmServer(4096, 64, 1 / 40)
    sim = simulate(_under_vllms_keys(requests, capacity), "chain-lru", capacity, server=server)
    assert hits["chain-lru"] == sim.first_hit_tokens
    assert hits["chain-lru"] != hits["lru"]


def test_groups_with_larger_blocks_give_chain_lru_no_request_hints():
    """A hybrid model whose second KV-cache group has 64-token blocks (vLLM's
    ``HybridKVCacheCoordinator``): the request's 32-token hash blocks are not the blocks that group
    caches, so the allocations carry no insert context, and the arrivals carry no request hint
    either (chain-lru learns nothing and is LRU), rather than statistics without the context they
    are for. With one group of 32-token blocks the same requests reach it."""
    requests = _chats_and_singles(1)[:12]
    heard = {}
    for sizes in ((32,), (32, 64)):
        scheduler = build_scheduler(120, "chain-lru", group_block_sizes=sizes)
        pool = pool_of(scheduler)
        SchedulerLoop(scheduler).run(requests, after_step=lambda k, pool=pool: pool.check())
        policy = pool.free_block_queue.policy
        heard[sizes] = (policy.requests_heard, policy.roots)
    assert heard[(32,)][0] == len(requests) and heard[(32,)][1] > 0
    assert heard[(32, 64)] == (0, 0)


def _chat_sessions(seed: int, spacing_s: float) -> list:
    """``_chats_and_singles`` with session ids: each chat's turns share one, each single request is
    a session of its own; one request every ``spacing_s`` seconds."""
    out, chat_of_root, chats = [], {}, 0
    for i, r in enumerate(_chats_and_singles(seed)):
        keys = r.block_keys.tolist()
        if keys[0] == 1:
            session = f"single-{i}"
        else:
            if keys[0] not in chat_of_root:
                chat_of_root[keys[0]], chats = chats, chats + 1
            session = f"chat-{chat_of_root[keys[0]]}"
        out.append(msgspec.structs.replace(r, arrival_s=spacing_s * i, session_id=session))
    return out


@pytest.mark.parametrize(("seed", "spacing_s"), [(1, 10.0), (2, 10.0), (3, 0.01)])
def test_session_ids_and_ends_reach_chain_lru_as_the_simulator_gives_them(
    seed, spacing_s, tmp_path, monkeypatch
):
    """With ``WAKMAN_SESSIONS=1`` chain-lru follows vLLM's ``Request.session_id`` and hears a
    session's end when the request its client marked last (``vllm_xargs`` ``session_end``) is done;
    the simulator's step loop gives the same hints from the trace (``session_ends_after_s=0``).
    vLLM's hit tokens per request and the policy's final eviction order are the simulator's
    exactly, one request at a time and with several arriving (and finishing) in each step; every
    session's end was heard; and the hints change the hits (hash-only chain-lru differs). The ends
    counter is published at most once a second while the run goes on, and an end held back by that
    limit is published when its second is over, with no step after it (an engine gone idle)."""
    monkeypatch.setenv("WAKMAN_METRICS_DIR", str(tmp_path))  # this test's engines' states only
    requests = _chat_sessions(seed, spacing_s)
    capacity = 40
    hits, live = {}, None
    for sessions in (True, False):
        scheduler = build_scheduler(capacity, "chain-lru", env={"WAKMAN_SESSIONS": "1" if sessions else "0"})
        checked = pool_of(scheduler)
        loop = SchedulerLoop(scheduler, sessions=True)
        result = loop.run(requests, after_step=lambda k, pool=checked: pool.check())
        hits[sessions] = _first_hits(result, len(requests))
        if sessions:
            live = checked.free_block_queue.policy
            ends_told = scheduler.wakman.state().session_ends
            published = _session_ends_metric()  # published during the run, at most once a second
            deadline = time.monotonic() + 10.0  # no step from now on: a held end's timer fires
            while (published_later := _session_ends_metric()) < ends_told and time.monotonic() < deadline:
                time.sleep(0.05)
            scheduler.wakman.close()
    reference = make_policy("chain-lru", capacity, sessions=True)
    keyed = _under_vllms_keys(requests, capacity)
    sim = simulate(keyed, reference, capacity, server=VllmServer(4096, 64, 1 / 40), session_ends_after_s=0)
    assert hits[True] == sim.first_hit_tokens
    assert live.eviction_order() == reference.eviction_order()
    sessions = len({r.session_id for r in requests})
    assert live.sessions_ended == reference.sessions_ended == ends_told == sessions
    assert 0 < published <= sessions
    assert published_later == sessions
    assert live.demoted > 0
    assert hits[True] != hits[False]


def _session_ends_metric() -> float:
    """``wakman:session_ends_total`` as ``/metrics`` shows it (this process's engine's state)."""
    from wakman.vllm_plugin.metrics import WakmanCollector

    family = next(f for f in WakmanCollector().collect() if f.name == "wakman:session_ends")
    return sum(sample.value for sample in family.samples if sample.name.endswith("_total"))


def _under_vllms_keys(requests: list, capacity: int) -> list:
    """The requests with the keys vLLM's queue gives the policy for their blocks (``policy_key`` of
    each block hash in group 0): chain-lru's duel samples blocks by key, so the simulator must see
    the same keys for the same samples."""
    loop = SchedulerLoop(build_scheduler(capacity, None))
    out = []
    for i, r in enumerate(requests):
        hashes = loop._request(r, i, 1).block_hashes
        keys = [policy_key(make_block_hash_with_group_id(h, 0)) for h in hashes]
        out.append(msgspec.structs.replace(r, block_keys=np.array(keys, dtype=np.uint64)))
    return out


def _first_hits(result, count: int) -> list[int]:
    """Each request's hit tokens at its first admission, in trace order (-1: never admitted)."""
    hits: dict[int, int] = {}
    for step in result.steps:
        for rid, tokens in step[0]:
            hits.setdefault(int(rid.rsplit("-", 1)[1]), tokens)
    return [hits.get(i, -1) for i in range(count)]


@pytest.mark.parametrize(
    ("capacity", "batched", "seqs", "step_s"), [(500, 4096, 64, 1 / 40), (400, 512, 8, 1 / 20)]
)
@pytest.mark.parametrize("policy", ["lru", "s3fifo", "sieve", "arc"])
def test_the_simulator_steps_as_vllms_scheduler(policy, capacity, batched, seqs, step_s):
    """With a vLLM configuration the simulator runs vLLM's scheduling step by step
    (``wakman.simulation.steps``): on overlapping requests whose long prompts are prefilled in
    chunks, in a cache small enough to preempt, every request hits what it hits under vLLM's own
    scheduler and the plugin's pool, and the preemptions are vLLM's. (The earlier continuous-time
    model, a prefill lane at max_num_batched_tokens / step_s, was 1.0-2.2 points off here at 500
    blocks and preempted 13 times against vLLM's 8-9.)"""
    requests = long_outputs_trace()
    scheduler = build_scheduler(capacity, policy, max_num_seqs=seqs, max_num_batched_tokens=batched)
    result = SchedulerLoop(scheduler, step_s).run(requests, after_step=lambda k: pool_of(scheduler).check())
    sim = simulate(requests, policy, capacity, server=VllmServer(batched, seqs, step_s))
    assert result.preemptions > 0 and sim.preemptions == result.preemptions
    assert max(r.prompt_tokens for r in requests) > 2 * batched  # prefilled in chunks
    assert sim.first_hit_tokens == _first_hits(result, len(requests))
    assert sim.hit_rate == pytest.approx(result.hit_rate, abs=1e-12)


def _partly_keyed_trace(seed: int, capacity: int) -> list:
    """40 overlapping requests on three documents, every third or so keyed only in part (as
    AIPerf's prefix-only rows: the rest of the prompt is text no other request has), some with no
    output, prompts up to a third of the pool, many a whole number of blocks."""
    rng, reqs, t = random.Random(seed), [], 0.0
    bs, most = BLOCK_SIZE, max(2, capacity // 3)
    for i in range(40):
        t += rng.expovariate(8.0)
        prompt = bs * rng.randint(1, most) if rng.random() < 0.5 else rng.randint(1, bs * most)
        shared = rng.randint(0, prompt // bs)
        doc = rng.randrange(3)
        keys = [doc * 1000 + j + 1 for j in range(shared)]
        keys += [10**9 + i * 1000 + j for j in range(shared, -(-prompt // bs))]
        if rng.random() < 0.3:
            keys = keys[: rng.randint(0, len(keys))]
        out = 0 if rng.random() < 0.3 else rng.randint(1, 3 * bs)
        reqs.append(
            TraceRequest(
                arrival_s=round(t, 3),
                block_keys=np.array(keys, dtype=np.uint64),
                prompt_tokens=prompt,
                output_tokens=out,
                block_size=bs,
            )
        )
    return reqs


@pytest.mark.parametrize(
    ("seed", "capacity", "batched", "seqs"), [(11, 30, 100, 8), (34, 40, 70, 64), (3, 12, 64, 4)]
)
def test_partly_keyed_prompts_step_as_in_vllms_scheduler(seed, capacity, batched, seqs):
    """Requests whose keys cover part of their prompt, preempted (some in their chunked prefill):
    the simulator's step loop preempts as often as vLLM's scheduler, rejects the same, and each
    request hits at its first admission what it hits there. (A request preempted before its first
    token was re-admitted with its lookup stopped at its keys, missing the blocks it had cached
    itself: one preemption fewer than vLLM on the first two.)"""
    requests = _partly_keyed_trace(seed, capacity)
    assert any(r.short_keyed for r in requests)
    result = SchedulerLoop(
        build_scheduler(capacity, None, max_num_seqs=seqs, max_num_batched_tokens=batched)
    ).run(requests)
    sim = simulate(requests, "lru", capacity, server=VllmServer(batched, seqs, 1 / 40))
    assert result.preemptions > 0
    assert (sim.preemptions, sim.rejected) == (result.preemptions, result.rejected)
    assert sim.first_hit_tokens == _first_hits(result, len(requests))


@pytest.mark.parametrize("policy", ["lru", "s3fifo"])
def test_a_trace_with_output_keys_is_simulated_as_the_engine_serves_it(policy):
    """A generated trace keeps its answers' keys (``output_keys``: a next turn's prompt holds the
    previous answer) but an engine samples its own tokens, so in vLLM those blocks get other hashes.
    Simulated as the engine serves it (``as_engine_serves``: fresh output keys, the replay's output
    cap), every request hits what it hits under vLLM's scheduler; simulated with the trace's output
    keys, the hit rate is visibly higher (the answers would hit)."""
    requests, cap, capacity, server = with_output_keys_trace(), 60, 1500, VllmServer(4096, 64, 1 / 40)
    assert sum(len(r.output_keys) for r in requests) > 500
    scheduler = build_scheduler(capacity, policy, max_num_seqs=64, max_num_batched_tokens=4096)
    result = SchedulerLoop(scheduler).run(requests, max_output_tokens=cap)
    served = as_engine_serves(requests, max_output_tokens=cap)
    sim = simulate(served, policy, capacity, server=server)
    assert sim.first_hit_tokens == _first_hits(result, len(requests))
    as_written = simulate(
        as_engine_serves(requests, fresh_outputs=False, max_output_tokens=cap),
        policy,
        capacity,
        server=server,
    )
    assert as_written.hit_rate > result.hit_rate + 0.01


class _WithoutLiveView:
    """A manager as a controller that takes no decoded blocks from the loop: it logs the trace's
    output keys, as the simulator did before the live view."""

    def __init__(self, manager) -> None:
        self._manager = manager

    def __getattr__(self, name: str):
        if name == "watch_decoding":
            raise AttributeError(name)
        return getattr(self._manager, name)


def test_wakman_plus_logs_decoded_blocks_as_vllm_shows_them():
    """wakman-plus's estimator logs each request's decoded blocks (``log_outputs``); in vLLM it sees
    them as decoding fills them. The step simulator gives its manager the same live view
    (``DecodedBlocks``), so on long outputs (20-400 tokens, many requests still decoding at each
    decision) its shadows score what vLLM's score, it makes vLLM's decisions and hits what vLLM
    hits. Logging a trace without output keys as the simulator did before (no decoded blocks) makes
    other decisions and misses by more than a point here."""
    from wakman.adaptive.manager import AdaptiveManager
    from wakman.simulation.run import simulate as simulate_static
    from wakman.vllm_plugin.settings import PluginSettings

    env = {"WAKMAN_INTERVAL_S": "10", "WAKMAN_REPLAY": "inline"}
    requests, capacity = long_outputs_trace(), 500
    scheduler = build_scheduler(
        capacity, "wakman-plus", max_num_seqs=64, max_num_batched_tokens=4096, env=env
    )
    result = SchedulerLoop(scheduler).run(requests)
    config = PluginSettings.from_env({**env, "WAKMAN_POLICY": "wakman-plus"}).adaptive
    keyed = _under_vllms_keys(requests, capacity)
    runs = {}
    for view in (True, False):
        manager = AdaptiveManager(config, capacity)
        controller = manager if view else _WithoutLiveView(manager)
        sim = simulate_static(
            keyed, manager.initial_policy(), capacity, server=VllmServer(), controller=controller
        )
        runs[view] = (sim, [(d.time_s, d.choice) for d in manager.decisions])
    vllm_decisions = [(d.time_s, d.choice) for d in scheduler.wakman.manager.decisions]
    assert any(choice != "chain-lru" for _, choice in vllm_decisions)
    assert runs[True][1] == vllm_decisions
    assert runs[True][0].hit_rate == pytest.approx(result.hit_rate, abs=0.002)
    assert runs[False][1] != vllm_decisions
    assert abs(runs[False][0].hit_rate - result.hit_rate) > 0.01


def test_wakman_decides_on_the_loops_clock(trace):
    scheduler, result = _run(trace, "wakman", env={"WAKMAN_INTERVAL_S": "10", "WAKMAN_REPLAY": "inline"})
    decisions = scheduler.wakman.manager.decisions
    assert len(decisions) >= 20 and not [d for d in decisions if d.error]
    assert result.query_tokens > 0


# ---------------------------------------------------------------------------------------- KV events
class EventCheck:
    """After every step: the published batches, applied to a mirror, give the pool's hashes."""

    def __init__(self, scheduler) -> None:
        self.scheduler, self.pool = scheduler, pool_of(scheduler)
        assert scheduler.enable_kv_cache_events
        self.publisher = scheduler.kv_event_publisher = RecordingPublisher()
        self.mirror = EventMirror()
        self.per_step: list[tuple] = []
        self.checked = 0

    def __call__(self, step: int) -> None:
        events = [e for batch in self.publisher.take() for e in batch.events]
        self.mirror.apply(events)
        self.per_step.append(tuple(event_shape(e) for e in events))
        self.compare(step)

    def compare(self, step: object) -> None:
        pool = pool_hash_counts(self.pool)
        assert self.mirror.hashes == set(pool), f"step {step}: event-derived hash set != pool's"
        assert self.mirror.counts == pool, f"step {step}: per-hash block counts differ"
        if hasattr(self.pool, "check"):
            self.pool.check()
        self.checked += 1

    def reset(self) -> None:
        """Reset the prefix cache between runs (every block is free then) and take its events as
        the next step would."""
        assert self.scheduler.reset_prefix_cache()
        events = self.scheduler.kv_cache_manager.take_events()
        assert [type(e).__name__ for e in events] == ["AllBlocksCleared"]
        self.mirror.apply(events)
        self.compare("reset")
        assert not self.mirror.counts


def _events_run(trace, policy, env=None, switch_every: int = 0):
    """Two halves of the trace with a prefix-cache reset between them, events checked every step;
    with ``switch_every``, the live policy is swapped every that many steps (static policies)."""
    scheduler = build_scheduler(CAPACITY, policy, env=env, kv_events=True)
    check = EventCheck(scheduler)
    loop = SchedulerLoop(scheduler)
    names = itertools.cycle(STATIC)
    switches = 0

    def after(step: int) -> None:
        nonlocal switches
        if switch_every and step % switch_every == switch_every - 1:
            pool_of(scheduler).free_block_queue.switch(make_policy(next(names), CAPACITY))
            switches += 1
        check(step)

    half = len(trace) // 2
    loop.run(trace[:half], after_step=after)
    check.reset()
    loop.run(trace[half:], after_step=after)
    removed = sum(1 for e in check.mirror.events if type(e).__name__ == "BlockRemoved")
    assert removed > 1000, "no cache pressure: evictions are what this test is about"
    return scheduler, check, switches


@pytest.fixture(scope="module")
def stock_events(trace):
    return _events_run(trace, None)[1]


def test_kv_events_track_stock_vllms_pool(stock_events):
    """The reference: stock vLLM's own events mirror its pool exactly."""
    assert stock_events.checked > 1000


@pytest.mark.parametrize("policy", STATIC)
def test_kv_events_stay_exact_under_each_policy_and_forced_switches(trace, policy):
    _, check, switches = _events_run(trace, policy, switch_every=97)
    assert switches > 20 and check.checked > 1000


@pytest.mark.parametrize("policy", ["wakman", "wakman-plus"])
def test_kv_events_stay_exact_across_live_switches(policy):
    """The adaptive manager switching on its own (phased traffic, a decision every 5 trace s).
    wakman-plus's chain-lru keeps single-turn phases out of the way by itself, so with its 2-point
    hysteresis the manager stays on it here; without a hysteresis it switches."""
    trace = phased_trace()
    env = {"WAKMAN_INTERVAL_S": "5", "WAKMAN_REPLAY": "inline"}
    if policy == "wakman-plus":
        env["WAKMAN_HYSTERESIS"] = "0"
    scheduler, _, _ = _events_run(trace, policy, env=env)
    decisions = scheduler.wakman.manager.decisions
    assert sum(d.switched for d in decisions) >= (2 if policy == "wakman" else 1)
    assert not [d for d in decisions if d.error]


def test_lru_publishes_stock_vllms_event_stream(trace, stock_events):
    """Step by step, wakman's lru publishes the very events stock vLLM publishes."""
    stock = stock_events
    _, ours, _ = _events_run(trace, "lru")
    assert len(ours.per_step) == len(stock.per_step)
    for k, (a, b) in enumerate(zip(ours.per_step, stock.per_step, strict=True)):
        assert a == b, f"step {k}: events differ"


class _TimedLoop(SchedulerLoop):
    """The loop with time passing inside a step (half of ``step_s`` between ``schedule`` and
    ``update_from_output``, as a forward pass takes), recording the pool's free blocks, as the test
    reads them itself, after each of the two calls."""

    def __init__(self, scheduler) -> None:
        super().__init__(scheduler)
        self.counts: list[tuple[float, int]] = []  # (virtual s, free blocks from then on)

    def step(self, result) -> None:
        scheduler, pool = self.scheduler, pool_of(self.scheduler)
        out = scheduler.schedule()
        self.counts.append((self.clock, pool.get_num_free_blocks()))
        self.clock += self.step_s / 2
        scheduler.update_from_output(out, self.model_output(out))
        self.counts.append((self.clock, pool.get_num_free_blocks()))
        result.steps.append(((), 0, 0, 0, 0))
        self.clock += self.step_s / 2


def test_the_paper_modes_free_block_log_is_the_pools_own_count():
    """vLLM's scheduler logs the free blocks after each step's allocations and after its frees: the
    estimator's time-weighted mean over a window equals the integral of the counts this test read
    from the pool itself at those moments (long outputs hold blocks across many steps; idle gaps
    between bursts hold none)."""
    trace = long_outputs_trace(duration_s=40.0, rate=1.0)
    trace += [msgspec.structs.replace(r, arrival_s=r.arrival_s + 200.0) for r in trace]
    scheduler = build_scheduler(300, "wakman", env={"WAKMAN_INTERVAL_S": "1000"})
    loop = _TimedLoop(scheduler)
    loop.run(trace)
    estimator = scheduler.wakman.manager.estimator
    counts = loop.counts
    start, end = counts[0][0], counts[-1][0]
    area = sum(f * (t2 - t1) for (t1, f), (t2, _) in itertools.pairwise(counts))
    assert min(f for _, f in counts) < 250  # blocks were held
    assert estimator.mean_free(start, end) == pytest.approx(area / (end - start), rel=1e-9)
