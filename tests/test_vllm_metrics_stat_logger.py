"""wakman's ``vllm.stat_logger_plugins`` entry point as vLLM's API server drives it.

vLLM loads every installed stat logger plugin into every ``vllm serve`` (``AsyncLLM``:
``load_stat_logger_plugin_factories``), wakman asked for or not, builds one per engine through its
``PerEngineStatLoggerAdapter`` and calls ``record`` inside its output handler, where an exception
stops the server (``AsyncLLM output_handler failed``, every request then fails). So the logger must
change nothing when wakman is not asked for, and must never raise. Each case runs in a fresh process:
prometheus_client picks its (multiprocess or not) value store when it is first imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_support import need_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.bare_vllm]
need_vllm()

# vLLM's own way in: the entry point's factories, built per engine by vLLM's adapter (the config is
# only passed through to the factory), then the calls AsyncLLM makes
DRIVE = """
import json, os, sys
from types import SimpleNamespace
from prometheus_client import REGISTRY, generate_latest
from vllm.v1.metrics.loggers import PerEngineStatLoggerAdapter, load_stat_logger_plugin_factories

before = generate_latest(REGISTRY).decode()
config = SimpleNamespace(parallel_config=SimpleNamespace(_api_process_rank=0, _api_process_count=2))
factories = [f for f in load_stat_logger_plugin_factories() if f.__module__.startswith("wakman.")]
assert factories, "wakman's stat logger plugin is not installed"
adapter = PerEngineStatLoggerAdapter(config, [0, 1], factories[0])
adapter.log_engine_initialized()
for engine in (0, 1):
    adapter.record(None, None, engine_idx=engine)
adapter.log()
after = generate_latest(REGISTRY).decode()
print(json.dumps({"before": before, "after": after, "metrics_dir": os.environ.get("WAKMAN_METRICS_DIR")}))
"""

BROKEN_UNLINK = """
import pathlib
def unlink(self, missing_ok=False):  # the API server may not write the directory (another user's)
    raise PermissionError(13, "Permission denied", str(self))
pathlib.Path.unlink = unlink
"""


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKMAN_", "PROMETHEUS_"))}
    env.pop("prometheus_multiproc_dir", None)
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    return env


@pytest.mark.parametrize("api_servers", [1, 2])
def test_stock_vllm_with_wakman_installed_is_unchanged(tmp_path, api_servers):
    """wakman not asked for (no ``WAKMAN_POLICY``, no wakman class on the command line, so the
    general plugin set no ``WAKMAN_METRICS_DIR``): ``/metrics`` is stock vLLM's, byte for byte, and
    nothing is created on disk (a ``wakman-metrics-*`` folder per API server, never removed)."""
    env = _clean_env(tmp_path)
    if api_servers > 1:  # what `vllm serve --api-server-count 2` sets (setup_multiprocess_prometheus)
        (tmp_path / "prom").mkdir()
        env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "prom")
    out = json.loads(_run(DRIVE, env).stdout.strip().splitlines()[-1])
    assert "wakman:" not in out["after"]
    assert _stable(out["after"]) == _stable(out["before"])
    assert out["metrics_dir"] is None
    assert list((tmp_path / "tmp").glob("wakman-*")) == []  # (vLLM 0.34 leaves torch's cache there)
    if api_servers > 1:
        assert list((tmp_path / "prom").iterdir()) == []


PLUGIN_GROUPS = """
import json
from vllm.plugins import load_plugins_by_group
print(json.dumps({group: sorted(load_plugins_by_group(group))
                  for group in ("vllm.general_plugins", "vllm.stat_logger_plugins")}))
"""


def test_vllm_plugins_can_leave_the_stat_logger_out(tmp_path):
    """vLLM turns its stats on (``log_stats``) wherever any stat logger plugin is installed,
    ``--disable-log-stats`` or not: the documented way to keep them off with wakman installed is
    ``VLLM_PLUGINS=wakman``, which keeps the general plugin and leaves the stat logger out. Its
    entry point is named apart from the general plugin's for that (one name covered both)."""
    env = _clean_env(tmp_path)
    env.pop("VLLM_PLUGINS", None)
    loaded = json.loads(_run(PLUGIN_GROUPS, env).stdout.strip().splitlines()[-1])
    assert "wakman" in loaded["vllm.general_plugins"]
    assert "wakman-metrics" in loaded["vllm.stat_logger_plugins"]
    env["VLLM_PLUGINS"] = "wakman"
    loaded = json.loads(_run(PLUGIN_GROUPS, env).stdout.strip().splitlines()[-1])
    assert "wakman" in loaded["vllm.general_plugins"]
    assert not [name for name in loaded["vllm.stat_logger_plugins"] if name.startswith("wakman")]


def _stable(text: str) -> list[str]:
    """The page without the process's own gauges and counters (GC, CPU time), which move anyway."""
    return [line for line in text.splitlines() if "python_gc" not in line and "process_" not in line]


def _published(states: Path, engine: int, **fields: object) -> Path:
    state = {
        "engine": engine,
        "policy_setting": "s3fifo",
        "live_policy": "s3fifo",
        "candidates": ["s3fifo"],
        "capacity_blocks": 64,
        "decisions": 4,
        "switches": 0,
        "replay_errors": 0,
        "replay_seconds_total": 0.0,
        "last_replay_seconds": 0.0,
        "shadow_hit_rate": {},
        "session_ends": 0,
        **fields,
    }
    path = states / f"engine-{os.getpid()}-{engine}.json"  # this (live) process's pid
    path.write_text(json.dumps(state))
    return path


def test_record_never_raises_into_vllms_output_handler(tmp_path):
    """Several API servers: a state left by an exited engine that the API server cannot remove, and
    a state file it cannot use, neither raise out of ``record``/``log`` (vLLM's output handler would
    stop the server); the live engine's figures still reach the multiprocess files."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    env = _clean_env(tmp_path)
    states, prom = tmp_path / "states", tmp_path / "prom"
    states.mkdir()
    prom.mkdir()
    env.update(WAKMAN_METRICS_DIR=str(states), PROMETHEUS_MULTIPROC_DIR=str(prom))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (states / f"engine-{int(gone.stdout)}-0.json").write_text("{}")  # exited: to be removed
    _published(states, 0)
    (states / f"engine-{os.getpid()}-1.json").write_text('{"engine": 1}')  # not a state wakman wrote
    _run(BROKEN_UNLINK + DRIVE, env)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(prom))
    text = generate_latest(registry).decode()
    assert 'wakman:decisions_total{engine="0"} 4.0' in text
    assert 'wakman:live_policy{engine="0",policy="s3fifo"} 1.0' in text


def test_a_scrape_never_fails_on_a_state_file(tmp_path, monkeypatch):
    """One API server: the collector is read inside vLLM's ``/metrics`` (prometheus_client's
    ``generate_latest`` over vLLM's registry): a state it cannot remove or use must not turn the
    whole page, vLLM's own metrics included, into an error."""
    from prometheus_client import CollectorRegistry, generate_latest

    from wakman.vllm_plugin import metrics

    monkeypatch.setenv(metrics.ENV_DIR, str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (tmp_path / f"engine-{int(gone.stdout)}-0.json").write_text("{}")
    _published(tmp_path, 0)
    (tmp_path / f"engine-{os.getpid()}-1.json").write_text("[1, 2]")

    def unlink(self, missing_ok=False):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", unlink)
    registry = CollectorRegistry()
    metrics.register_collector(registry)
    text = generate_latest(registry).decode()
    assert 'wakman:decisions_total{engine="0"} 4.0' in text
    assert 'engine="1"' not in text
