"""The simulator against its references: Belady and the infinite ceiling bound every online policy;
cache mode agrees with kvcache-simulator (KVCache.AI) on the Mooncake chat trace; the CLI's JSON."""

from __future__ import annotations

import json
import math

import msgspec
import pytest
from typer.testing import CliRunner

from conftest import MOONCAKE
from wakman.cli.main import app
from wakman.simulation import simulate
from wakman.traces import read_trace, write_trace
from wakman.workload import build_config, generate_requests

ONLINE = ("lru", "fifo", "s3fifo", "s3fifo-v0", "sieve", "arc")


def traces():
    yield "single", generate_requests(build_config(preset="mix01-pure-single", duration_s=900), seed=3)
    yield "agentic", generate_requests(build_config(preset="mix03-pure-agentic", duration_s=900), seed=3)
    yield "thirds", generate_requests(build_config(preset="mix19-thirds", duration_s=900), seed=3)


@pytest.mark.parametrize("mode", ["cache", "serve"])
def test_belady_bounds_online_policies_and_infinite_bounds_belady(mode):
    for name, reqs in traces():
        for capacity in (1_500, 4_000):
            rates = {
                p: simulate(reqs, p, capacity, mode=mode).hit_rate for p in (*ONLINE, "belady", "infinite")
            }
            best = max(rates[p] for p in ONLINE)
            assert rates["belady"] >= best, (name, capacity, rates)
            assert rates["infinite"] >= rates["belady"], (name, capacity, rates)


@pytest.mark.parametrize("mode", ["cache", "serve"])
def test_one_belady_future_serves_every_capacity(mode):
    """A future built once (its offsets: each request's full prompt and output blocks, summed) gives
    every capacity the hit rate of a future built for that run alone; one from other requests or in
    the other mode's order is refused."""
    from itertools import accumulate

    from wakman.simulation.run import belady_future

    _, reqs = next(traces())
    future = belady_future(reqs, mode)
    sizes = [r.full_blocks + len(r.output_keys) for r in reqs]
    assert future[1] == [0, *accumulate(sizes)]
    assert len(future[0]) == sum(sizes)
    for capacity in (800, 1_500, 4_000):  # the shared future first, so a Belady that spoils it shows
        shared = simulate(reqs, "belady", capacity, mode=mode, future=future)
        alone = simulate(reqs, "belady", capacity, mode=mode)
        assert (shared.hit_rate, shared.evictions) == (alone.hit_rate, alone.evictions)
    other_mode = belady_future(reqs, "serve" if mode == "cache" else "cache")
    for wrong_requests, wrong_future in ((reqs[:-1], future), (reqs, other_mode)):
        with pytest.raises(ValueError, match="not belady_future"):
            simulate(wrong_requests, "belady", 800, mode=mode, future=wrong_future)


def test_belady_and_infinite_on_the_mooncake_trace():
    reqs = list(read_trace(MOONCAKE))
    for capacity in (5_000, 19_200):
        rates = {
            p: simulate(reqs, p, capacity, mode="cache").hit_rate
            for p in ("lru", "s3fifo", "belady", "infinite")
        }
        assert max(rates["lru"], rates["s3fifo"]) <= rates["belady"] <= rates["infinite"]


def kvcache_simulator_lru(path, capacity: int, warmup_requests: int) -> float:
    kv_trace = pytest.importorskip("kvcache_sim.trace")
    kv_cpp = pytest.importorskip("kvcache_sim.cpp_backend")
    trace = kv_trace.parse_trace_file(str(path), block_size=512)
    result = kv_cpp.run_cpp_sweep(
        trace, capacities=[capacity], policies=["lru"], warmup_requests=warmup_requests
    )
    point = result.results[("lru", capacity)]
    assert point.measurementMode == "fixed_window"
    return point.hitRate


@pytest.mark.parametrize("capacity", [5_000, 19_200, 50_000])
def test_cache_mode_lru_matches_kvcache_simulator(capacity):
    """Same trace, block capacity and window (the last 50 % of requests, kvcache-simulator's
    default). Expected differences, all small: kvcache-simulator weights every block by its tokens
    (the partial last block included, all prompt tokens can hit) and evicts leaves of its prefix
    trie only; wakman counts vLLM's way (full blocks, at most prompt - 1 tokens) and orders LRU by
    vLLM's release order (deepest block first)."""
    reqs = list(read_trace(MOONCAKE))
    warmup = math.floor(len(reqs) * 0.5)
    ours = simulate(reqs, "lru", capacity, mode="cache", warmup_requests=warmup).hit_rate
    theirs = kvcache_simulator_lru(MOONCAKE, capacity, warmup)
    assert abs(ours - theirs) < 0.01, f"wakman {ours:.4f} vs kvcache-simulator {theirs:.4f}"


def test_simulate_cli_json(tmp_path):
    path = tmp_path / "t.jsonl"
    runner = CliRunner()
    assert (
        runner.invoke(
            app, ["generate", "--preset", "mix19-thirds", "--duration", "300", "-o", str(path)]
        ).exit_code
        == 0
    )
    result = runner.invoke(
        app, ["simulate", str(path), "--policy", "s3fifo", "--capacity-blocks", "2000", "--json", "--series"]
    )
    assert result.exit_code == 0, result.output
    flat = json.loads(result.stdout)  # stdout is the JSON alone; a saturation warning goes to stderr
    for key in (
        "hit_rate",
        "block_hit_rate",
        "requests",
        "evictions",
        "stranded_blocks",
        "ttft_s_p90",
        "queueing_delay_s_p90",
        "mean_free_blocks",
        "intervals",
    ):
        assert key in flat
    assert 0 < flat["hit_rate"] < 1 and flat["requests"] > 100


def test_simulate_cli_session_hints(tmp_path):
    """``--sessions`` puts chain-lru in session mode (the generator's sessions never abandon a
    branch, so alone it changes nothing here); ``--session-ends-after-s 0`` tells each session's end
    as its last request finishes, which the run shows as a higher hit rate (the figures are those
    of the Python API given the same hints)."""
    path = tmp_path / "t.jsonl"
    runner = CliRunner()
    args = ["generate", "--preset", "mix04-single-multi-50", "--duration", "600", "-o", str(path)]
    assert runner.invoke(app, args).exit_code == 0
    rates = {}
    for extra in ((), ("--sessions",), ("--sessions", "--session-ends-after-s", "0")):
        base = ["simulate", str(path), "--policy", "chain-lru", "--capacity-blocks", "3000", "--json"]
        result = runner.invoke(app, [*base, *extra])
        assert result.exit_code == 0, result.output
        rates[extra] = json.loads(result.stdout)["hit_rate"]
    hash_only, sessions, told = rates.values()
    assert sessions == hash_only and told > hash_only + 0.01
    requests = list(read_trace(path))
    direct = simulate(requests, "chain-lru", 3000, policy_params={"sessions": True}, session_ends_after_s=0)
    assert told == direct.hit_rate


def test_sweep_cli_writes_csv_json_png(tmp_path):
    path = tmp_path / "t.jsonl"
    runner = CliRunner()
    runner.invoke(app, ["generate", "--preset", "mix01-pure-single", "--duration", "300", "-o", str(path)])
    out = tmp_path / "sweep"
    result = runner.invoke(
        app,
        [
            "sweep",
            str(path),
            "--policies",
            "lru,s3fifo,infinite",
            "--capacities",
            "500,1000",
            "--out",
            str(out),
            "--jobs",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "sweep.json").read_text())["results"]
    assert [(r["policy"], r["capacity_blocks"]) for r in rows] == [
        (p, c) for p in ("lru", "s3fifo", "infinite") for c in (500, 1000)
    ]
    assert (out / "sweep.csv").read_text().count("\n") == 7 and (out / "sweep.png").stat().st_size > 1000


def test_sweep_sessions_adds_the_hint_column_as_simulate_runs_it(tmp_path):
    """``sweep --sessions --session-ends-after-s 0`` adds ``chain-lru+sessions``, whose rate at each
    size is ``simulate --policy chain-lru --sessions --session-ends-after-s 0``'s (sweep had no
    hint mode) and to the table it prints; a trace without session ids is refused naming the flag."""
    path = tmp_path / "t.jsonl"
    runner = CliRunner()
    args = ["generate", "--preset", "mix04-single-multi-50", "--duration", "300", "-o", str(path)]
    assert runner.invoke(app, args).exit_code == 0
    out = tmp_path / "sweep"
    told = ["--sessions", "--session-ends-after-s", "0"]
    sweep = ["sweep", str(path), "--policies", "lru", "--capacities", "1000,3000", "--out", str(out)]
    result = runner.invoke(app, [*sweep, "--jobs", "1", *told])
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "sweep.json").read_text())["results"]
    hint = {r["capacity_blocks"]: r["hit_rate"] for r in rows if r["policy"] == "chain-lru+sessions"}
    for capacity, rate in hint.items():
        base = ["simulate", str(path), "--policy", "chain-lru", "--capacity-blocks", str(capacity), "--json"]
        alone = runner.invoke(app, [*base, *told])
        assert rate == json.loads(alone.stdout)["hit_rate"]
    assert sorted(hint) == [1000, 3000]
    # the printed table has the added row too (it listed the --policies only)
    line = next(x for x in result.stdout.splitlines() if "chain-lru+sessions" in x)
    assert all(f"{rate:.4f}" in line for rate in hint.values()), line
    plain = tmp_path / "plain.jsonl"  # the same requests without their session ids
    write_trace([msgspec.structs.replace(r, session_id=None) for r in read_trace(path)], plain, "native")
    refused = runner.invoke(
        app, ["sweep", str(plain), "--capacities", "100", "--out", str(tmp_path / "x"), "--sessions"]
    )
    assert refused.exit_code == 2 and "no session ids" in refused.output


def test_sweep_records_when_hint_mode_heard_ends_and_its_warmup_and_server(tmp_path):
    """``sweep --sessions`` tells no session end unless --session-ends-after-s is given, under the
    label that advise and reproduce give ends at 0 s: each hint-mode row of sweep.csv and sweep.json
    says which (``session_ends_after_s``: the seconds given, empty or null for none; the policies'
    rows have no such cell). sweep.json's header records --warmup-s and the server model (its class
    and settings; null in cache mode), enough to rerun a row with ``simulate --server-model``."""
    import csv

    path = tmp_path / "t.jsonl"
    runner = CliRunner()
    args = ["generate", "--preset", "mix04-single-multi-50", "--duration", "300", "-o", str(path)]
    assert runner.invoke(app, args).exit_code == 0

    def sweep(name: str, *flags: str) -> tuple[dict, list[dict]]:
        out = tmp_path / name
        base = ["sweep", str(path), "--policies", "lru", "--capacities", "1000", "--jobs", "1", "--sessions"]
        result = runner.invoke(app, [*base, "--out", str(out), *flags])
        assert result.exit_code == 0, result.output
        with open(out / "sweep.csv", encoding="utf-8") as f:
            return json.loads((out / "sweep.json").read_text()), list(csv.DictReader(f))

    throughputs = ["--prefill-tps", "20000", "--decode-tps", "50", "--max-running", "8"]
    document, csv_rows = sweep("none", "--warmup-s", "60", *throughputs)
    assert document["warmup_s"] == 60
    server = document["server_model"]
    assert server["model"] == "ServerModel"
    assert (server["prefill_tokens_per_s"], server["decode_tokens_per_s"], server["max_running"]) == (
        20000,
        50,
        8,
    )
    lru, hint = document["results"]
    assert (lru["policy"], hint["policy"]) == ("lru", "chain-lru+sessions")
    assert "session_ends_after_s" not in lru and hint["session_ends_after_s"] is None
    assert [r["session_ends_after_s"] for r in csv_rows] == ["", ""]
    alone = [
        "simulate",
        str(path),
        "--policy",
        "chain-lru",
        "--capacity-blocks",
        "1000",
        "--json",
        "--sessions",
    ]
    untold = runner.invoke(app, [*alone, "--warmup-s", "60", *throughputs])
    assert hint["hit_rate"] == json.loads(untold.stdout)["hit_rate"]  # run with no end told

    document, csv_rows = sweep("told", "--session-ends-after-s", "30", "--max-num-seqs", "16")
    assert document["warmup_s"] == 0 and document["results"][1]["session_ends_after_s"] == 30
    assert [r["session_ends_after_s"] for r in csv_rows] == ["", "30.0"]
    assert (document["server_model"]["model"], document["server_model"]["max_num_seqs"]) == ("VllmServer", 16)
    again = [*alone, "--session-ends-after-s", "30", "--server-model", str(tmp_path / "told" / "sweep.json")]
    assert json.loads(runner.invoke(app, again).stdout)["hit_rate"] == document["results"][1]["hit_rate"]

    document, _ = sweep("cache", "--mode", "cache", "--session-ends-after-s", "0")
    assert document["server_model"] is None and document["results"][1]["session_ends_after_s"] == 0


def test_unknown_policy_is_a_clean_error(tmp_path):
    path = tmp_path / "t.jsonl"
    CliRunner().invoke(app, ["generate", "--duration", "60", "-o", str(path)])
    result = CliRunner().invoke(app, ["simulate", str(path), "--policy", "lfu", "--capacity-blocks", "10"])
    assert result.exit_code == 2 and "unknown policy" in result.output
