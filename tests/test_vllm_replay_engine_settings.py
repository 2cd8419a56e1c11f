"""``wakman replay --engine vllm``: engine settings vLLM would refuse are one error naming wakman's
flag or the trace, exit code 2, before the engine is started (vLLM's own refusal comes after a
model config is built, as a pydantic report naming its field, not the flag)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vllm_support import need_vllm, wakman_cli, write_small_trace
from wakman.cli.main import app
from wakman.traces import read_trace, write_trace

pytestmark = pytest.mark.vllm
need_vllm()

runner = CliRunner()


class EngineStarted(Exception):
    """The replay went on to start vLLM (the first thing it does there is check the environment)."""


def _engine_started() -> None:
    raise EngineStarted


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_small_trace(tmp_path_factory.mktemp("replay") / "tiny.jsonl", duration_s=4)


def _vllm_accepts(max_num_batched_tokens: int, max_num_seqs: int) -> bool:
    from vllm.config import SchedulerConfig

    try:
        SchedulerConfig(
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=2048,
            is_encoder_decoder=False,
        )
    except ValueError:
        return False
    return True


# (--max-num-batched-tokens, --max-num-seqs); the engine's budget is at least one block (32 tokens)
SETTINGS = [(40, 64), (63, 64), (64, 64), (1, 32), (1, 33), (4096, 64)]


@pytest.mark.parametrize(("batched", "seqs"), SETTINGS)
def test_a_token_budget_vllm_refuses_is_refused_by_flag(trace, monkeypatch, batched, seqs):
    monkeypatch.setattr("wakman.vllm_plugin.environment.check_environment", _engine_started)
    args = ["replay", str(trace), "--engine", "vllm", "--policy", "lru", "--capacity-blocks", "64"]
    args += ["--max-num-batched-tokens", str(batched), "--max-num-seqs", str(seqs)]
    result = runner.invoke(app, args)
    block_size = next(iter(read_trace(trace))).block_size
    if _vllm_accepts(max(batched, block_size), seqs):  # what build_llm hands vLLM
        assert isinstance(result.exception, EngineStarted), result.output
        return
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert "--max-num-batched-tokens" in lines[0] and "--max-num-seqs" in lines[0]


def test_a_block_size_the_cpu_engine_refuses_names_the_trace(trace, tmp_path, monkeypatch):
    monkeypatch.setattr("wakman.vllm_plugin.environment.check_environment", _engine_started)
    path = tmp_path / "sixteen.jsonl"
    requests = list(read_trace(trace))
    import msgspec

    halved = [
        msgspec.structs.replace(r, block_size=16, prompt_tokens=min(r.prompt_tokens, 16 * len(r.block_keys)))
        for r in requests
    ]
    write_trace(halved, path, "native")
    args = ["replay", str(path), "--engine", "vllm", "--policy", "lru", "--capacity-blocks", "64"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(path.name) in lines[0] and "32" in lines[0], result.output


def test_a_step_time_the_simulator_refuses_is_refused_before_the_engine(trace, monkeypatch):
    """--step-s past the server models' bound (60 s) was refused only after the whole engine run,
    when the reported server was built, in a message that did not name the flag."""
    monkeypatch.setattr("wakman.vllm_plugin.environment.check_environment", _engine_started)
    args = ["replay", str(trace), "--engine", "vllm", "--policy", "lru", "--capacity-blocks", "64"]
    result = runner.invoke(app, [*args, "--step-s", "120"])
    assert result.exit_code == 2 and not isinstance(result.exception, EngineStarted), result.output
    assert "--step-s must be at most 60" in result.output


def test_the_reported_server_is_the_one_the_engine_ran(trace):
    """A budget under one block runs raised to one block (vLLM's step must hold a block); the JSON's
    server_model, which `wakman simulate --server-model` reads back, says what the engine ran, as
    vLLM's own scheduler config gives it, not the flag's value (a server four times slower)."""
    import subprocess
    import sys

    block_size = next(iter(read_trace(trace))).block_size
    args = ["replay", str(trace), "--engine", "vllm", "--policy", "lru", "--capacity-blocks", "64"]
    args += ["--max-num-batched-tokens", "8", "--max-num-seqs", "1"]
    reported = wakman_cli(*args, "--limit", "2", "--max-output-tokens", "2")["server_model"]
    probe = (  # one engine per process: vLLM's own config of the engine build_llm makes
        "from wakman.vllm_plugin.engine import build_llm, engine_core\n"
        f"llm = build_llm(64, {block_size}, policy='lru', max_num_seqs=1, max_num_batched_tokens=8)\n"
        "print(engine_core(llm).scheduler.scheduler_config.max_num_batched_tokens)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ran = int(proc.stdout.strip().splitlines()[-1])
    assert reported["max_num_batched_tokens"] == ran == block_size


@pytest.mark.parametrize(("variable", "value"), [("WAKMAN_REPLAY", "sync"), ("WAKMAN_INTERVAL_S", "30")])
def test_a_bad_plugin_setting_is_refused_before_the_engine(trace, monkeypatch, variable, value):
    """The plugin's WAKMAN_* settings, as the engine will read them, are checked with the flags:
    exit 2 naming the variable (it was exit 1, once vLLM had loaded the plugin, 10 s in)."""
    monkeypatch.setattr("wakman.vllm_plugin.environment.check_environment", _engine_started)
    monkeypatch.setenv(variable, value)
    args = ["replay", str(trace), "--engine", "vllm", "--policy", "lru", "--capacity-blocks", "64"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and not isinstance(result.exception, EngineStarted), result.output
    assert variable in result.output


def test_a_replay_that_rejected_its_requests_says_so(trace):
    """A request larger than the whole cache is rejected (vLLM refuses it past max_model_len); the
    replay says on stderr that nothing was measured, as ``simulate`` does (it printed a hit rate of
    0 without a word)."""
    import json
    import subprocess
    import sys

    first = next(iter(read_trace(trace)))
    capacity = max(2, first.prompt_tokens // first.block_size // 2)  # half the first prompt's blocks
    args = ["replay", str(trace), "--engine", "vllm", "--policy", "lru", "--capacity-blocks", str(capacity)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "wakman.cli.main",
            *args,
            "--limit",
            "1",
            "--max-output-tokens",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert (result["rejected"], result["measured_requests"]) == (1, 0)
    assert "no request was measured (1 read, 1 rejected as larger than the cache)" in proc.stderr
