"""The server model's saturation rule against closed forms: a lane that falls behind, decode slots
that fill up, a server that keeps up; and the flag in every serve-mode output."""

from __future__ import annotations

import json

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


def run(reqs: list[Request], server: ServerModel) -> dict:
    return simulate(reqs, "lru", 100_000, server=server).as_flat_dict()


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
