"""The replay's engine settings (``vllm_plugin.engine.build_llm``) against vLLM's own config checks,
without starting an engine: a trace longer than the tiny model's positions, a step budget no step
can use, and the model folder a build leaves behind."""

from __future__ import annotations

import glob
import itertools
import os
import tempfile
from pathlib import Path

import pytest

from vllm_support import need_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.bare_vllm]
need_vllm()

from wakman.vllm_plugin import engine  # noqa: E402


def test_a_model_length_past_the_tiny_models_positions_is_one_vllm_accepts(tmp_path):
    """The tiny model said 131,072 positions: vLLM refused to start for a trace with a longer
    request (the Claude Code archive's 52nd), a multi-line pydantic error after half a minute."""
    from vllm.config import ModelConfig

    long = 600_000
    folder = engine.tiny_model_dir(tmp_path / "model", max_model_len=long)
    config = ModelConfig(
        model=str(folder), max_model_len=long, dtype=engine.TINY_DTYPE, skip_tokenizer_init=True
    )
    assert config.max_model_len == long
    stock = engine.tiny_model_dir(tmp_path / "stock")  # as before for shorter traces
    with pytest.raises(Exception, match="max_model_len"):
        ModelConfig(model=str(stock), max_model_len=long, dtype=engine.TINY_DTYPE, skip_tokenizer_init=True)


def test_build_llm_caps_the_step_budget_and_leaves_no_model_folder(monkeypatch):
    """A step budget past every sequence's whole length is never used, but vLLM sizes its buffers by
    it (2e9 tokens: 22 GB, then the OOM killer); and every build left a wakman-tiny-llama-* folder
    in the temporary directory."""
    import vllm

    seen: dict = {}

    class RecordingLLM:
        def __init__(self, **kwargs) -> None:
            seen.update(kwargs)
            seen["config_there"] = (Path(kwargs["model"]) / "config.json").exists()

    monkeypatch.setattr(vllm, "LLM", RecordingLLM)
    monkeypatch.setattr(os, "environ", os.environ.copy())  # build_llm sets the engine's variables
    pattern = str(Path(tempfile.gettempdir()) / "wakman-tiny-llama-*")
    before = set(glob.glob(pattern))
    engine.build_llm(
        100, 32, max_model_len=2_000, policy=None, max_num_seqs=4, max_num_batched_tokens=2_000_000_000
    )
    assert seen["config_there"] and seen["max_model_len"] == 2_000
    assert seen["max_num_batched_tokens"] == 4 * 2_000
    assert set(glob.glob(pattern)) == before


def test_build_llm_runs_the_engine_in_process_whatever_the_environment_says(monkeypatch):
    """A user's ``VLLM_ENABLE_V1_MULTIPROCESSING=1`` won: the replay started a whole engine in
    another process, then died on ``'SyncMPClient' object has no attribute 'engine_core'``."""
    import vllm

    seen: dict = {}

    class RecordingLLM:
        def __init__(self, **kwargs) -> None:
            seen["multiprocessing"] = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")

    monkeypatch.setattr(vllm, "LLM", RecordingLLM)
    monkeypatch.setattr(os, "environ", {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"})
    engine.build_llm(100, 32, policy=None)
    assert seen["multiprocessing"] == "0"


def test_the_served_engine_runs_build_llms_settings(tmp_path, monkeypatch):
    """``VllmHttpServer`` serves the engine ``build_llm`` builds: it left out the GPU memory
    fraction (vLLM's 0.9 refuses to start beside another process on the GPU) and the step budget's
    cap (2e9 tokens: 22 GB)."""
    import vllm

    from wakman.vllm_plugin.server import VllmHttpServer

    seen: dict = {}

    class RecordingLLM:
        def __init__(self, **kwargs) -> None:
            seen.update(kwargs)

    monkeypatch.setattr(vllm, "LLM", RecordingLLM)
    monkeypatch.setattr(os, "environ", os.environ.copy())
    settings = dict(max_model_len=2_000, max_num_seqs=4, max_num_batched_tokens=2_000_000_000)
    engine.build_llm(100, 32, policy=None, **settings)
    argv = VllmHttpServer(tmp_path, 100, 32, policy=None, **settings).argv
    served = dict(itertools.pairwise(argv))
    assert float(served["--gpu-memory-utilization"]) == seen["gpu_memory_utilization"]
    assert int(served["--max-num-batched-tokens"]) == seen["max_num_batched_tokens"] == 4 * 2_000
    assert int(served["--max-model-len"]) == seen["max_model_len"]
