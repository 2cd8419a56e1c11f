"""The server model's saturation rule against closed forms: a lane that falls behind, decode slots
that fill up, a server that keeps up; and the flag in every serve-mode output."""

from __future__ import annotations

import json

import msgspec
import pytest
from typer.testing import CliRunner

from wakman.cli.main import app
from wakman.simulation import ServerModel, simulate
from wakman.simulation.server import QUEUE_GROWTH_LIMIT
from wakman.traces import write_trace
from wakman.traces.model import Request

BLOCK = 16


def steady_trace(n: int, gap_s: float, prompt_tokens: int, output_tokens: int = 1) -> list[Request]:
    """``n`` requests every ``gap_s`` seconds, unique keys (no hits: every prompt is prefilled whole)."""
    blocks = -(-prompt_tokens // BLOCK)
    return [
        Request(
            arrival_s=i * gap_s,
            block_keys=[i * 1000 + b + 1 for b in range(blocks)],
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            block_size=BLOCK,
        )
        for i in range(n)
    ]


def run(reqs: list[Request], server: ServerModel, capacity: int = 100_000) -> dict:
    return simulate(reqs, "lru", capacity, server=server).as_flat_dict()


@pytest.mark.parametrize("service_over_gap", [1.5, 3.0])
def test_a_prefill_lane_that_falls_behind(service_over_gap):
    # request i reaches the lane at i * service: TTFT_i = service + i * (service - gap), so the slope of
    # TTFT against arrival (i * gap) is service / gap - 1, and the lane is busy n * service seconds
    n, gap, tokens = 200, 1.0, 1600
    overhead = 0.005
    rate = tokens / (service_over_gap * gap - overhead)
    service = overhead + tokens / rate
    out = run(steady_trace(n, gap, tokens), ServerModel(prefill_tokens_per_s=rate, max_running=n))
    assert out["saturated"] is True
    assert out["queue_growth"] == pytest.approx(service / gap - 1, rel=1e-9)
    assert out["prefill_utilization"] == pytest.approx(n * service / ((n - 1) * gap), rel=1e-9)


def test_decode_slots_that_fill_up_saturate_a_lane_that_is_idle():
    # one slot, each request holds it for its prefill plus decode (output tokens / decode speed), so
    # request i is admitted at i * hold: its TTFT grows hold / gap - 1 per second of traffic
    n, gap, tokens, output = 100, 1.0, 160, 79  # 80 tokens of KV at the end: decode of 79 tokens
    server = ServerModel(prefill_tokens_per_s=16_000, decode_tokens_per_s=40, max_running=1)
    hold = server.prefill_s(tokens) + server.decode_s(output)
    out = run(steady_trace(n, gap, tokens, output), server)
    assert out["prefill_utilization"] < 0.05
    assert out["saturated"] is True
    assert out["queue_growth"] == pytest.approx(hold / gap - 1, rel=1e-6)
    assert out["backlog_at_last_arrival"] > 0


def test_a_server_that_keeps_up():
    n, gap, tokens = 200, 1.0, 1600
    server = ServerModel(prefill_tokens_per_s=4_000)  # 0.405 s of prefill a second
    out = run(steady_trace(n, gap, tokens), server)
    assert out["saturated"] is False
    assert out["queue_growth"] == pytest.approx(0.0, abs=1e-12)
    assert out["prefill_utilization"] == pytest.approx(n * server.prefill_s(tokens) / ((n - 1) * gap))
    assert out["backlog_at_last_arrival"] == 0
    assert QUEUE_GROWTH_LIMIT > 0


def test_keeping_up_sizes_the_lane_from_the_trace():
    reqs = steady_trace(101, 1.0, 16_000)  # 16,000 tokens a second offered
    server = ServerModel.keeping_up(reqs, utilization=0.5)
    assert server.prefill_tokens_per_s == 40_000  # 16,160 / 0.5 = 32,320 -> next 10,000
    assert run(reqs, server)["prefill_utilization"] < 0.5


def test_requests_that_arrive_at_one_instant(tmp_path):
    """A burst: 50 requests at t = 0 queue for the lane (request i waits i prefills), so the prefill
    work outruns the arrivals' span of 0 s: utilization is infinite (null in JSON) and the run is
    saturated, where it read 0 and not saturated; one request alone stays 0."""
    burst = steady_trace(50, 0.0, 1600)
    server = ServerModel(prefill_tokens_per_s=4_000, max_running=50)
    out = run(burst, server)
    assert out["ttft_s_p99"] > 40 * server.prefill_s(1600)
    assert out["prefill_utilization"] == float("inf") and out["saturated"] is True
    single = run(burst[:1], server)
    assert single["prefill_utilization"] == 0.0 and single["saturated"] is False
    path = tmp_path / "burst.jsonl"
    write_trace(burst, path, "native")
    result = CliRunner().invoke(
        app, ["simulate", str(path), "--policy", "lru", "--capacity-blocks", "5000", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["prefill_utilization"] is None
    assert "prefill utilization unbounded" in result.stderr


def test_simulate_json_and_warning_name_the_saturation(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(steady_trace(200, 0.1, 1600), path, "native")  # 0.165 s of prefill every 0.1 s
    result = CliRunner().invoke(
        app, ["simulate", str(path), "--policy", "lru", "--capacity-blocks", "5000", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["saturated"] is True
    assert "saturated" in result.stderr
    calm = CliRunner().invoke(
        app,
        [
            "simulate",
            str(path),
            "--policy",
            "lru",
            "--capacity-blocks",
            "5000",
            "--json",
            "--prefill-tps",
            "1e6",
        ],
    )
    assert json.loads(calm.stdout)["saturated"] is False
    assert "saturated" not in calm.stderr


def test_a_saturated_vllm_step_run_names_vllms_flags(tmp_path):
    """On vLLM's step model the warning names the flags that model takes (--max-num-seqs, ...), not
    the continuous model's (--prefill-tps, --decode-tps), which that mode refuses."""
    path = tmp_path / "t.jsonl"
    write_trace(steady_trace(200, 0.1, 1600), path, "native")
    args = ["simulate", str(path), "--policy", "lru", "--capacity-blocks", "5000", "--json"]
    result = CliRunner().invoke(app, [*args, "--max-num-seqs", "1", "--max-num-batched-tokens", "64"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["saturated"] is True
    assert "--max-num-seqs" in result.stderr and "--step-s" in result.stderr
    assert "--prefill-tps" not in result.stderr and "--decode-tps" not in result.stderr


# --- from a review of the serve loops against hand-worked cases -----------------------------------


@pytest.mark.parametrize("warmup", [5, 8])
def test_warm_up_work_is_not_measured_utilization(warmup):
    """10 requests 1 s apart, 0.5 s of prefill each, the first ``warmup`` left out: the measured
    work over the measured arrivals' span is (10 - w) * 0.5 / (10 - w - 1) s per s (0.625, 1.0);
    counting the warm-up's work too made it 1.25 and 5.0, and a server that keeps up saturated."""
    reqs = steady_trace(10, 1.0, 16 * 16)
    server = ServerModel(
        prefill_tokens_per_s=512.0, prefill_overhead_s=0.0, decode_tokens_per_s=1e9, max_running=64
    )
    result = simulate(reqs, "lru", 100_000, server=server, warmup_requests=warmup)
    measured = 10 - warmup
    assert result.saturation.prefill_utilization == pytest.approx(measured * 0.5 / (measured - 1))


def test_both_loops_refuse_what_max_model_len_refuses():
    """A request's prompt + output tokens must fit the pool's tokens (vLLM's max_model_len): 16 +
    1 tokens in one block of 16 is refused by both loops (the event loop took prompt + output - 1)."""
    from wakman.simulation import VllmServer

    req = Request(arrival_s=0.0, block_keys=[1], prompt_tokens=16, output_tokens=1, block_size=16)
    fits = Request(arrival_s=1.0, block_keys=[2], prompt_tokens=15, output_tokens=1, block_size=16)
    for server in (ServerModel(), VllmServer()):
        result = simulate([req, fits], "lru", 1, server=server)
        assert (result.rejected, result.measured_requests) == (1, 1), server


class _Arrivals:
    """A controller that records the arrivals it hears and changes nothing."""

    def __init__(self) -> None:
        self.heard: list[float] = []

    def on_arrival(self, now: float, request: Request) -> None:
        self.heard.append(now)

    def on_time(self, now: float, pool) -> None:
        pass

    def report(self) -> dict:
        return {}


def test_both_loops_reject_at_arrival():
    """A request larger than the pool is refused on arrival by both loops: it never waits, so the
    backlog at the last arrival counts only requests that can run, and the controller (the adaptive
    manager's estimator) never hears of it. Ten oversized requests arrive behind one that holds the
    only running slot for 100 s, then one that fits: one request waits at the last arrival."""
    from wakman.simulation import VllmServer

    big = [
        Request(arrival_s=1.0 + i, block_keys=[100 + i], prompt_tokens=16, output_tokens=5000, block_size=16)
        for i in range(10)
    ]
    first = Request(arrival_s=0.0, block_keys=[1], prompt_tokens=16, output_tokens=4000, block_size=16)
    last = Request(arrival_s=20.0, block_keys=[2], prompt_tokens=16, output_tokens=1, block_size=16)
    for server in (
        ServerModel(decode_tokens_per_s=40.0, max_running=1),
        VllmServer(max_num_seqs=1, step_s=0.025),
    ):
        heard = _Arrivals()
        result = simulate([first, *big, last], "lru", 260, server=server, controller=heard)
        assert (result.rejected, result.measured_requests) == (10, 2), server
        assert result.saturation.backlog_at_last_arrival == 1, server
        assert heard.heard == pytest.approx([0.0, 20.0], abs=0.05), server  # (the step loop: at its step)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"interval_s": 0.0},
        {"interval_s": -1.0},
        {"interval_s": float("nan")},
        {"interval_s": 1e-9},  # 1e11 rows of counts for a 100-s trace
        {"warmup_s": float("nan")},
        {"warmup_s": -1.0},
        {"warmup_requests": -1},
    ],
    ids=str,
)
def test_a_window_that_measures_nothing_or_fills_the_memory_is_refused(kwargs):
    reqs = steady_trace(10, 10.0, 64)
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        simulate(reqs, "lru", 100, **kwargs)


@pytest.mark.parametrize("mode", ["serve", "cache"])
@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"block_size": 0}, "block_size"),  # cache mode divided by it
        ({"prompt_tokens": -1}, "prompt_tokens"),
        ({"output_tokens": -1}, "output_tokens"),  # accepted in both modes before
        ({"arrival_s": float("nan")}, "arrival_s"),
        ({"block_keys": [1, 2, 3]}, "block_keys"),  # 3 keys for one block's tokens
    ],
)
def test_requests_built_by_hand_are_checked_as_the_readers_check_them(mode, bad, field):
    ok = Request(arrival_s=0.0, block_keys=[1], prompt_tokens=16, output_tokens=1, block_size=16)
    with pytest.raises(ValueError, match=f"request 1: field '{field}'"):
        simulate([ok, msgspec.structs.replace(ok, **bad)], "lru", 10, mode=mode)


@pytest.mark.parametrize("mode", ["serve", "cache"])
def test_a_ready_policy_of_another_size_is_refused(mode):
    """A capacity-50 policy handed in for a 2,000-block run would be reported as 2,000 blocks."""
    from wakman.policies import make_policy

    with pytest.raises(ValueError, match="a ready lru of 50 blocks for a cache of 2,000"):
        simulate(steady_trace(3, 1.0, 64), make_policy("lru", 50), 2000, mode=mode)


def test_rejected_counts_the_requests_after_the_warm_up_as_measured_does():
    """With a warm-up, each request after it is either measured or rejected (counted from the
    trace: those that fit the pool and those that do not); the warm-up's are neither."""
    from wakman.simulation import VllmServer
    from wakman.workload import build_config, generate_requests

    reqs = generate_requests(build_config(preset="mix19-thirds", duration_s=240.0), seed=2)
    capacity, warmup = 60, 100.0
    after = [r for r in reqs if r.arrival_s >= warmup]
    too_big = sum(r.prompt_tokens + max(r.output_tokens, 1) > capacity * r.block_size for r in after)
    assert 0 < too_big < len(after) and len(after) < len(reqs)
    for server in (ServerModel(), VllmServer()):
        result = simulate(reqs, "lru", capacity, server=server, warmup_s=warmup)
        assert (result.rejected, result.measured_requests) == (too_big, len(after) - too_big), server


def test_the_interval_series_counts_first_admissions():
    """Preemptions re-admit requests: the intervals' prompt tokens still sum to the run's (each
    request once), and no interval hits more tokens than it was asked."""
    from wakman.simulation import VllmServer

    reqs = [
        Request(arrival_s=0.0, block_keys=[1, 2], prompt_tokens=32, output_tokens=60, block_size=16),
        Request(arrival_s=0.001, block_keys=[3, 4], prompt_tokens=32, output_tokens=60, block_size=16),
    ]
    for server in (ServerModel(decode_tokens_per_s=40.0), VllmServer()):
        result = simulate(reqs, "lru", 7, server=server)
        assert result.preemptions >= 1, server
        assert sum(i.prompt_tokens for i in result.intervals) == result.prompt_tokens == 64
        assert all(i.hit_tokens <= i.prompt_tokens for i in result.intervals)


@pytest.mark.parametrize(
    ("server", "field"),
    [
        ({"prefill_tokens_per_s": float("nan")}, "prefill_tokens_per_s"),
        ({"decode_tokens_per_s": 1e-300}, "decode_tokens_per_s"),
        ({"prefill_overhead_s": float("inf")}, "prefill_overhead_s"),
        ({"prefill_overhead_s": -1.0}, "prefill_overhead_s"),
        ({"max_running": 1.5}, "max_running"),
        ({"max_running": True}, "max_running"),
    ],
)
def test_a_server_model_that_cannot_run_is_refused(server, field):
    """NaN, infinite or sub-token-a-second rates ran the clock for ever (memory grew until
    bad_alloc), a negative overhead gave negative TTFTs, a fractional batch failed deep in the run."""
    with pytest.raises(ValueError, match=f"server model: {field} must be"):
        ServerModel(**server)


@pytest.mark.parametrize(
    ("server", "field"),
    [
        ({"step_s": float("inf")}, "step_s"),
        ({"step_s": 1e300}, "step_s"),
        ({"tokens_per_s": float("nan")}, "tokens_per_s"),
        ({"max_num_batched_tokens": 100.5}, "max_num_batched_tokens"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
    ],
)
def test_a_vllm_server_that_cannot_run_is_refused(server, field):
    from wakman.simulation import VllmServer

    with pytest.raises(ValueError, match=f"vLLM server: {field} must be"):
        VllmServer(**server)


def test_a_step_budget_below_the_running_requests_is_refused_as_vllm_does():
    """vLLM's SchedulerConfig refuses max_num_batched_tokens < max_num_seqs; so does VllmServer,
    naming both flags; equal is allowed."""
    from wakman.simulation import VllmServer

    with pytest.raises(ValueError, match=r"max_num_batched_tokens \(32\) is below max_num_seqs \(64\)"):
        VllmServer(max_num_batched_tokens=32, max_num_seqs=64)
    assert VllmServer(max_num_batched_tokens=64, max_num_seqs=64).max_num_seqs == 64


def test_a_run_whose_clock_outruns_its_interval_series_stops_with_an_error():
    """Two 1,000,000-token prompts a second apart at 1 token/s of prefill: the arrivals make 1,000
    intervals of 1 ms, the run's clock (to 2,000,000 s) two billion; the series stops at 2,000,000
    cells with an error instead of filling the memory."""
    big = [
        Request(arrival_s=float(t), block_keys=[t + 1], prompt_tokens=10**6, output_tokens=1, block_size=16)
        for t in (0, 1)
    ]
    server = ServerModel(prefill_tokens_per_s=1.0)
    with pytest.raises(ValueError, match=r"the run's clock passed 2000000 intervals of 0\.001 s"):
        simulate(big, "lru", 200_000, server=server, interval_s=0.001)
    assert simulate(big, "lru", 200_000, server=server, interval_s=60.0).measured_requests == 2


def test_an_interval_with_no_event_names_the_live_policy():
    """Requests at 0 s and 30 s in 5 s intervals: the intervals between them hold no event but the
    live policy ordered the cache through them (they were labelled with no policy)."""
    from wakman.simulation import VllmServer

    reqs = [msgspec.structs.replace(r, arrival_s=30.0 * r.arrival_s) for r in steady_trace(2, 1.0, 64)]
    for server in (ServerModel(), VllmServer()):
        result = simulate(reqs, "s3fifo", 100, server=server, interval_s=5.0)
        assert len(result.intervals) == 7
        assert [i.policy for i in result.intervals] == ["s3fifo"] * 7


def test_a_late_trace_costs_no_interval_before_it():
    """Two requests at 10**8 s: the series starts at their interval (it held 1,666,667 cells)."""
    from wakman.simulation import VllmServer

    reqs = [msgspec.structs.replace(r, arrival_s=1e8 + r.arrival_s) for r in steady_trace(2, 1.0, 64)]
    for server in (ServerModel(), VllmServer()):
        result = simulate(reqs, "lru", 100, server=server)
        assert len(result.intervals) <= 2 and result.intervals[0].start_s == pytest.approx(1e8 - 1e8 % 60)


def test_a_request_preempted_before_its_prefill_ends_gets_its_first_token_later():
    """A (1 prompt block, 200 outputs at the default 40 tokens/s) and B (3,000 tokens: 188 blocks, a
    3 s prefill from 0.5 s) share 192 blocks: when A needs its 5th block none is free and B, the
    latest admitted, is preempted before its prefill ends; it cannot come back before A finishes at
    0.021 + 200 / 40 = 5.021 s, so its first token comes after that (the loop recorded the planned
    3.505 s: a TTFT of 3.005 s)."""
    a = Request(arrival_s=0.0, block_keys=[1], prompt_tokens=16, output_tokens=200, block_size=16)
    b = Request(
        arrival_s=0.5, block_keys=list(range(100, 287)), prompt_tokens=3000, output_tokens=1, block_size=16
    )
    result = simulate([a, b], "lru", 192, server=ServerModel(prefill_tokens_per_s=1000.0))
    assert result.preemptions >= 1
    assert result.ttfts_s[1] > 5.021 - 0.5


def test_a_victim_waits_for_the_blocks_it_held_and_keeps_its_first_token():
    """A and B arrive at 0 (64-token prompts: 4 blocks each; 64 and 20 outputs), each prefill
    0.005 + 64 / 10,000 = 0.0114 s: first tokens at 0.0114 and 0.0228 s. In 10 blocks both take their
    5th; at A's 6th (0.4114 s) none is free and B, the latest admitted, is preempted after its first
    token. It comes back only once its 5 blocks are free, when A finishes (1.6114 s): one preemption,
    as vLLM's scheduling gives (the step loop), where B had been re-admitted into its own freed
    blocks at once, preempted itself at its next block, 62 times, and its TTFT was rewritten."""
    from wakman.simulation import VllmServer

    a = Request(arrival_s=0.0, block_keys=[1, 2, 3, 4], prompt_tokens=64, output_tokens=64, block_size=16)
    b = Request(arrival_s=0.0, block_keys=[11, 12, 13, 14], prompt_tokens=64, output_tokens=20, block_size=16)
    prefill = 0.005 + 64 / 10_000
    for capacity, preemptions in ((20, 0), (10, 1)):
        result = simulate([a, b], "lru", capacity)
        assert result.preemptions == preemptions
        assert result.ttfts_s == pytest.approx([prefill, 2 * prefill])
        assert simulate([a, b], "lru", capacity, server=VllmServer()).preemptions == preemptions


def test_a_step_holds_its_blocks_until_it_ends():
    """One request of 4 blocks (52 tokens, 1 output) in a pool of 100, served in one step: both
    loops count 96 free blocks for the whole run (the step loop counted the step after its release:
    100); a last step that evicts is in the interval series."""
    from wakman.simulation import VllmServer

    one = [Request(arrival_s=5.0, block_keys=[1, 2, 3, 4], prompt_tokens=52, output_tokens=1, block_size=16)]
    for server in (ServerModel(), VllmServer(4096, 64, 0.025)):
        assert simulate(one, "lru", 100, server=server).mean_free_blocks == pytest.approx(96.0), server
    two = [
        Request(arrival_s=0.0, block_keys=[1, 2, 3], prompt_tokens=48, output_tokens=1, block_size=16),
        Request(arrival_s=10.0, block_keys=[9], prompt_tokens=16, output_tokens=2, block_size=16),
    ]
    result = simulate(two, "lru", 4, server=VllmServer(4096, 64, 0.025))
    assert result.evictions == 1 == sum(i.evictions for i in result.intervals)


def test_a_sweep_with_prefill_bound_and_slot_bound_runs_gives_both_remedies(tmp_path):
    """Two prompts of 100 blocks take turns every 0.1 s on one slot: at 110 blocks each evicts the
    other (every prompt prefilled whole: 0.2 s of prefill a 0.1 s gap, prefill-bound), at 250 both
    stay (99 blocks hit: the lane idles, the slot's 2 s of decode a request is the bottleneck). The
    sweep's warning gives each run's remedy, not the busiest run's alone."""
    n, gap, tokens, output = 100, 0.1, 1600, 79
    reqs = [
        Request(
            arrival_s=i * gap,
            block_keys=[(i % 2) * 1000 + b + 1 for b in range(tokens // BLOCK)],
            prompt_tokens=tokens,
            output_tokens=output,
            block_size=BLOCK,
        )
        for i in range(n)
    ]
    server = ServerModel(prefill_tokens_per_s=8_000, decode_tokens_per_s=40, max_running=1)
    evicting, keeping = (run(reqs, server, c) for c in (110, 250))
    assert evicting["prefill_utilization"] > 1.5 and keeping["prefill_utilization"] < 0.2
    assert evicting["saturated"] and keeping["saturated"]
    path = tmp_path / "t.jsonl"
    write_trace(reqs, path, "native")
    flags = ["--prefill-tps", "8000", "--decode-tps", "40", "--max-running", "1"]
    swept = CliRunner().invoke(
        app,
        [
            "sweep",
            str(path),
            "--policies",
            "lru",
            "--capacities",
            "110,250",
            *flags,
            "--out",
            str(tmp_path / "sw"),
        ],
    )
    assert swept.exit_code == 0, swept.output
    assert "saturated in 2 of 2 runs" in swept.stderr
    assert "raise --prefill-tps" in swept.stderr and "raise --max-running" in swept.stderr


def test_the_prefill_lane_queue_is_queueing_delay_and_backlog():
    """In the continuous model a request admitted to a busy lane waits for it: that wait is its
    queueing delay (it read 0, the admission being immediate) and it counts in the backlog at the
    last arrival (it read 0 while two dozen requests waited). Request i's prefill starts at
    i * service, so it waits i * (service - gap)."""
    n, gap, tokens = 30, 1.0, 16_000
    server = ServerModel(prefill_tokens_per_s=4_000, max_running=n)
    service = server.prefill_s(tokens)
    out = run(steady_trace(n, gap, tokens), server)
    mean_wait = (service - gap) * (n - 1) / 2
    assert out["queueing_delay_s_mean"] == pytest.approx(mean_wait, rel=1e-9)
    assert out["queueing_delay_s_p50"] == pytest.approx((service - gap) * (n - 1) / 2, rel=1e-9)
    assert out["ttft_s_mean"] == pytest.approx(mean_wait + service, rel=1e-9)
    # at the last arrival ((n - 1) * gap) every request whose prefill starts later waits
    started = sum(i * service <= (n - 1) * gap for i in range(n))
    assert out["backlog_at_last_arrival"] == n - started
    assert out["saturated"] is True


def test_a_short_burst_that_waits_a_fraction_of_a_second_is_not_saturated():
    """Three requests 1 ms apart: their prefill work outruns the 2 ms span (utilization 22) and the
    slope over it is steep, but each waits at most two short prefills: the run kept up. It was
    flagged saturated, and ``advise`` then gave no answer at any size."""
    reqs = steady_trace(3, 0.001, 160)
    server = ServerModel(prefill_tokens_per_s=10_000)
    out = run(reqs, server)
    assert out["prefill_utilization"] > 1 and out["queueing_delay_s_mean"] < 0.05
    assert out["saturated"] is False


def test_longer_prompts_with_no_queue_are_not_saturated():
    """Prompts that grow over the trace, each prefilled before the next arrives: no request waits,
    but the time to first token grows with the prompt. ``queue_growth`` regressed the time to first
    token (0.06 s per s here) and flagged the run; it regresses the queueing delay (0)."""
    reqs = [
        Request(
            arrival_s=20.0 * i,
            block_keys=[i * 10_000 + b + 1 for b in range((i + 1) * 750)],
            prompt_tokens=(i + 1) * 750 * BLOCK,
            output_tokens=1,
            block_size=BLOCK,
        )
        for i in range(15)
    ]
    out = run(reqs, ServerModel(prefill_tokens_per_s=10_000), capacity=1_000_000)
    assert out["ttft_s_p99"] > 15 and out["prefill_utilization"] < 1
    assert out["queueing_delay_s_p99"] == 0.0 and out["queue_growth"] == 0.0
    assert out["saturated"] is False
