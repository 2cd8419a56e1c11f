"""The plugin's run-time side on vLLM's own ``BlockPool`` and scheduler, no model: when decisions
are due on an engine's clock, which requests they replay, what the runtime keeps as it runs, and
the harness server's environment."""

from __future__ import annotations

import logging

import pytest

from vllm_support import need_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.bare_vllm]
need_vllm()

from vllm.v1.core.block_pool import BlockPool  # noqa: E402

from vllm_sched_loop import SchedulerLoop, build_scheduler  # noqa: E402
from wakman.vllm_plugin.free_queue import policy_key  # noqa: E402
from wakman.vllm_plugin.pool_driver import vllm_keys  # noqa: E402
from wakman.vllm_plugin.runtime import KEPT_DECISIONS, PolicyRuntime  # noqa: E402
from wakman.vllm_plugin.settings import PluginSettings  # noqa: E402

EPOCH = 1_796_000_000.0  # an engine's clock: time.time(), seconds since 1970


@pytest.fixture(autouse=True)
def _metrics_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WAKMAN_METRICS_DIR", str(tmp_path / "metrics"))


def _runtime(policy: str, now: list[float], interval_s: int = 60) -> PolicyRuntime:
    env = {"WAKMAN_POLICY": policy}
    if policy.startswith("wakman"):
        env.update(WAKMAN_INTERVAL_S=str(interval_s), WAKMAN_REPLAY="inline")
    pool = BlockPool(101, enable_caching=True, hash_block_size=16)
    return PolicyRuntime(PluginSettings.from_env(env), pool, clock=lambda: now[0])


def _replayed(runtime: PolicyRuntime) -> list[float]:
    """Record the arrivals every replay is given (each candidate scores 0.5: no switch)."""
    seen: list[float] = []
    candidates = runtime.manager.config.candidates

    def replay(window, capacity):
        seen.extend(r.arrival_s for r in window)
        return dict.fromkeys(candidates, 0.5)

    runtime.manager.replay_hook = replay
    return seen


@pytest.mark.parametrize("policy", ["wakman", "wakman-plus"])
def test_the_first_decision_comes_one_interval_after_the_engine_starts(policy):
    """On an engine's clock (the epoch) the first decision was due at once (an empty one, counted in
    the metrics), the next at the following multiple of the interval since 1970: anywhere from 0 s
    to an interval after start-up. It is due an interval after the runtime starts."""
    now = [EPOCH + 17.0]  # not a multiple of the interval
    runtime = _runtime(policy, now)
    seen = _replayed(runtime)
    for t in (0.0, 1.0, 59.9):
        now[0] = EPOCH + 17.0 + t
        runtime.on_request(now[0], vllm_keys([1, 2, int(t * 10)]), 16, 48)
        runtime.on_step()
    assert runtime.state().decisions == 0 and not seen
    now[0] = EPOCH + 17.0 + 60.0
    runtime.on_step()
    assert runtime.state().decisions == 1
    assert seen == [EPOCH + 17.0, EPOCH + 18.0, EPOCH + 17.0 + 59.9]


@pytest.mark.parametrize("policy", ["wakman", "wakman-plus"])
def test_a_request_stamped_before_an_open_decision_is_still_replayed(policy):
    """vLLM stamps ``arrival_time`` in the API server, before the request reaches the scheduler: a
    decision can open in between. Such a request (stamped 29.99 s, added at 30.05 s, after the
    decision due at 30 s opened) was in no window, ever; it is replayed by the next decision."""
    now = [0.0]
    runtime = _runtime(policy, now, interval_s=30)
    seen = _replayed(runtime)
    now[0] = 10.0
    runtime.on_request(10.0, vllm_keys([1, 2]), 16, 32)
    runtime.on_step()
    now[0] = 30.01
    runtime.on_step()  # the decision due at 30 s opens
    assert seen == [10.0]
    now[0] = 30.05
    runtime.on_request(29.99, vllm_keys([3, 4]), 16, 32)
    now[0] = 60.01
    runtime.on_step()
    assert len(seen) == 2 and seen[1] >= 29.99  # logged at the earliest time a later window reads


def test_the_runtime_keeps_the_last_decisions_and_counts_them_all():
    """A live engine takes a decision every interval for as long as it runs: it keeps the last
    ``KEPT_DECISIONS`` (each publish read every decision: O(days of decisions)); the metrics count
    every one."""
    now = [0.0]
    runtime = _runtime("wakman", now, interval_s=1)
    _replayed(runtime)
    taken = 3 * KEPT_DECISIONS
    for i in range(taken):
        now[0] = 1.0 + i
        runtime.on_request(now[0] - 0.5, vllm_keys([1, i + 2]), 16, 32)
        runtime.on_step()
    state = runtime.state()
    assert state.decisions == taken and state.replay_errors == 0
    assert len(runtime.manager.decisions) <= 2 * KEPT_DECISIONS
    assert runtime.manager.decisions[-1].time_s == float(taken)
    # a replay on a trace's clock (wakman replay --engine vllm) reports every decision
    replayed = _runtime("wakman", now, interval_s=1)
    replayed.use_clock(lambda: now[0])
    _replayed(replayed)
    for i in range(taken):
        now[0] = 1.0 + i
        replayed.on_request(now[0] - 0.5, vllm_keys([1, i + 2]), 16, 32)
        replayed.on_step()
    assert len(replayed.manager.decisions) == replayed.state().decisions == taken


def test_a_streaming_inputs_next_chunk_is_not_logged_as_a_request_of_its_own():
    """A resumable request's next chunk reaches ``add_request`` with the same id; vLLM appends it to
    the request it holds. Its own block hashes cover the chunk alone (a chain no cache holds): it
    was logged as a new request whose keys the pool never held. The request's logged outputs (vLLM's
    own list) show the chunk's blocks as vLLM caches them."""
    from vllm import SamplingParams
    from vllm.v1.request import Request

    scheduler = build_scheduler(64, "wakman-plus", env={"WAKMAN_REPLAY": "inline"})
    loop = SchedulerLoop(scheduler)

    def chunk(tokens: list[int], t: float) -> Request:
        params = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0.0, detokenize=False)
        return Request(
            request_id="s-1",
            prompt_token_ids=tokens,
            sampling_params=params,
            pooling_params=None,
            arrival_time=t,
            block_hasher=loop.hasher,
            resumable=True,
        )

    def steps(n: int) -> None:
        for _ in range(n):
            out = scheduler.schedule()
            scheduler.update_from_output(out, loop.model_output(out))

    scheduler.add_request(chunk([10 + i % 50 for i in range(64)], 0.0))
    steps(3)
    scheduler.add_request(chunk([70 + i % 40 for i in range(64)], 1.0))
    steps(3)
    held = [policy_key(h) for h in scheduler.requests["s-1"].block_hashes]
    log = list(scheduler.wakman.manager.estimator.log)
    assert len(log) == 1
    logged = [int(k) for k in log[0].block_keys] + [int(k) for k in log[0].output_keys]
    assert logged == held and len(held) >= 4


def test_finished_requests_logged_outputs_become_key_arrays():
    """wakman-plus logs each request's decoded blocks as a view of vLLM's own block-hash list, which
    kept every hash object alive (about 80 bytes a block) for as long as the log held the request.
    Once the request finishes, the view holds the keys it showed then, 8 bytes each."""
    from vllm_support import long_outputs_trace

    requests = long_outputs_trace()[:40]
    env = {"WAKMAN_REPLAY": "inline", "WAKMAN_INTERVAL_S": "3600"}  # no decision: the log keeps all
    scheduler = build_scheduler(500, "wakman-plus", max_num_seqs=64, env=env)
    loop = SchedulerLoop(scheduler)
    held: dict[str, object] = {}  # vLLM's requests, kept past their finish by the test
    log = scheduler.wakman.manager.estimator.log

    def keep(step: int) -> None:
        held.update(scheduler.requests)

    loop.run(requests, after_step=keep)
    assert not scheduler.requests and len(log) == len(requests) == len(held)
    assert all(r.output_keys.hashes is None for r in log)
    by_prompt = {tuple(int(k) for k in r.block_keys): r for r in log}
    decoded = 0
    for req in held.values():  # vLLM's final block hashes: the prompt's, then decoding's
        keys = [policy_key(h) for h in req.block_hashes]
        n = req.num_prompt_tokens // 32
        logged = by_prompt[tuple(keys[:n])]
        assert list(map(int, logged.output_keys)) == keys[n:]
        decoded += len(keys) - n
    assert decoded > 100


@pytest.mark.parametrize(
    ("sizes", "per_key"), [((32, 32), 2.0), ((32,), 1.0), ((32, 64), 1.5), ((64, 64), 1.0)]
)
def test_kv_cache_groups_size_the_shadows_in_hash_blocks(sizes, per_key):
    """vLLM keeps every KV-cache group in one pool: with two full-attention groups each hash block
    takes two pool blocks (a group of 64-token blocks, half of one), so shadows sized in pool blocks
    held twice the traffic the cache can. wakman-plus's shadows are the pool's size: in keys, the
    usable blocks over the pool blocks a hash block takes, which the live pool shows."""
    from vllm_support import small_trace

    env = {"WAKMAN_REPLAY": "inline", "WAKMAN_INTERVAL_S": "5"}
    scheduler = build_scheduler(240, "wakman-plus", env=env, group_block_sizes=sizes)
    loop = SchedulerLoop(scheduler)
    runtime = scheduler.wakman
    taken: list[tuple[int, int]] = []  # (policy keys the pool holds, hash blocks those requests have)

    def after(step: int) -> None:
        running = scheduler.running
        if running and all(r.num_computed_tokens >= r.num_prompt_tokens for r in running):
            blocks = runtime.pool.num_gpu_blocks - 1 - runtime.pool.get_num_free_blocks()
            hashes = sum(r.num_computed_tokens // 32 for r in running)
            taken.append((blocks, hashes))

    loop.run(small_trace(duration_s=30, short_prompts=True), after_step=after)
    decisions = [d for d in runtime.manager.decisions if d.rates]
    assert decisions and runtime.manager.pool_blocks_per_key == per_key
    assert {d.shadow_capacity for d in decisions} == {round(runtime.capacity / per_key)}
    if sizes == (32, 32):  # the pool shows it: two blocks a full hash block
        assert taken and all(blocks >= 2 * hashes for blocks, hashes in taken)


def test_the_served_engine_gets_none_of_the_callers_wakman_settings(tmp_path, monkeypatch):
    """The harness server inherited every ``WAKMAN_*`` variable but the policy: a shell's
    ``WAKMAN_INTERVAL_S`` changed an adaptive engine's experiment and stopped a static one."""
    from wakman.vllm_plugin.server import VllmHttpServer

    monkeypatch.setenv("WAKMAN_INTERVAL_S", "5")
    monkeypatch.setenv("WAKMAN_SESSIONS", "1")
    server = VllmHttpServer(tmp_path / "srv", 300, policy="sieve")  # not started
    wakman_env = {k: v for k, v in server.env.items() if k.startswith("WAKMAN_")}
    assert wakman_env == {
        "WAKMAN_POLICY": "sieve",
        "WAKMAN_METRICS_DIR": str(tmp_path / "srv" / "wakman-metrics"),
    }
    PluginSettings.from_env(server.env)  # the engine starts with these


def test_a_publish_that_fails_is_logged_once_and_its_recovery_too(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("WAKMAN_METRICS_DIR", str(blocker / "metrics"))  # under a file: unusable
    now = [0.0]
    with caplog.at_level(logging.WARNING, logger="wakman"):
        runtime = _runtime("lru", now)
        runtime._publish()
        runtime._publish()
        failed = [r for r in caplog.records if "could not publish" in r.getMessage()]
        assert len(failed) == 1
        monkeypatch.setenv("WAKMAN_METRICS_DIR", str(tmp_path / "metrics"))
        runtime._publish()
        assert any("works again" in r.getMessage() for r in caplog.records)


def test_a_replay_longer_than_the_interval_is_logged_once(monkeypatch, caplog):
    """Decisions then cannot keep up with their due times: the log says so and what to change,
    once."""
    import wakman.adaptive.replays as replays_module

    now = [0.0]
    runtime = _runtime("wakman", now, interval_s=10)
    candidates = runtime.manager.config.candidates
    monkeypatch.setattr(
        replays_module, "timed_replay", lambda replay, pending: (dict.fromkeys(candidates, 0.5), None, 12.5)
    )
    with caplog.at_level(logging.WARNING, logger="wakman"):
        for t in (5.0, 10.0, 15.0, 20.0, 25.0, 30.0):
            now[0] = t
            runtime.on_request(t - 1.0, vllm_keys([1, int(t)]), 16, 32)
            runtime.on_step()
    overruns = [r for r in caplog.records if "longer than the 10 s" in r.getMessage()]
    assert runtime.state().decisions >= 2 and len(overruns) == 1
    assert "12.5 s" in overruns[0].getMessage()


@pytest.mark.parametrize("policy", ["wakman", "wakman-plus"])
def test_behind_a_slow_replay_the_next_decision_is_the_latest_due(policy):
    """A replay that takes 2.5 intervals (a request a second goes on arriving, stamped as it
    arrives): the next decision is the latest one due by then, its window the latest traffic, and
    the ones due meanwhile are passed over (counted). Before, each decision opened the one due an
    interval after the last, ever further behind (the 10th, taken at t=244 s, was due at 100 s)."""
    now = [0.0]
    runtime = _runtime(policy, now, interval_s=10)
    manager = runtime.manager
    candidates = manager.config.candidates
    last_replayed: list[float] = []

    def slow_replay(window, capacity):
        last_replayed.append(window[-1].arrival_s)
        now[0] += 25.0  # the replay's wall time (inline: the step waits for it)
        return dict.fromkeys(candidates, 0.5)

    manager.replay_hook = slow_replay
    logged = -1
    while now[0] < 300.0:
        for second in range(logged + 1, int(now[0]) + 1):  # the requests that arrived meanwhile
            runtime.on_request(float(second), vllm_keys([1, second]), 16, 32)
            logged = second
        runtime.on_step()
        now[0] += 1.0  # the next step
    taken = [d for d in manager.decisions if d.rates]
    assert len(taken) >= 8
    for d, last in zip(taken, last_replayed, strict=True):
        assert d.taken_s - d.time_s < 10.0, d  # opened within an interval of its due time
        assert d.time_s - 1.0 <= last < d.time_s, d  # replaying traffic up to it
    due_times = round((manager.decisions[-1].time_s - 10.0) / 10.0) + 1  # at 10 s, 20 s, ...
    assert manager.totals.passed_over == due_times - len(manager.decisions) > len(taken)


def test_session_mode_says_it_has_no_effect_where_the_groups_hear_no_hints(caplog):
    """KV-cache groups with blocks larger than the hash blocks give the policy no request hints, so
    chain-lru follows no session: the start-up said it "follows session ids" and nothing more."""
    with caplog.at_level(logging.WARNING, logger="wakman"):
        build_scheduler(128, "chain-lru", env={"WAKMAN_SESSIONS": "1"}, group_block_sizes=(32, 64))
    assert any("WAKMAN_SESSIONS=1 has no effect here" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wakman"):
        build_scheduler(128, "chain-lru", env={"WAKMAN_SESSIONS": "1"})
    assert not any("has no effect" in r.getMessage() for r in caplog.records)
