"""``wakman replay --engine vllm``: engine settings vLLM would refuse are one error naming wakman's
flag or the trace, exit code 2, before the engine is started (vLLM's own refusal comes after a
model config is built, as a pydantic report naming its field, not the flag)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vllm_support import need_vllm, write_small_trace
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
