"""wakman's figures on vLLM's ``/metrics``, put there by the general plugin (``plugin.register``,
which vLLM runs in every process it starts; ``metrics.expose_metrics``).

wakman ships no ``vllm.stat_logger_plugins`` entry point: vLLM turns its own stats on wherever one
is installed (``AsyncLLM``: ``log_stats or has_custom_loggers``), ``--disable-log-stats`` or not, so
its mere presence changed every ``vllm serve`` of the environment. When wakman is not asked for the
plugin must change nothing; when it is, the figures reach ``/metrics`` with one API server and with
several, and nothing may raise into vLLM. Each case runs in a fresh process: prometheus_client picks
its (multiprocess or not) value store when it is first imported."""

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

# vLLM's own way in: its loader runs the general plugins (as each vLLM process does at start-up);
# then what /metrics serves: the default registry (one API server) or the multiprocess files
DRIVE = """
import json, os, sys, time
from prometheus_client import REGISTRY, generate_latest
from vllm.plugins import load_general_plugins
from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories

before = generate_latest(REGISTRY).decode()
load_general_plugins()
time.sleep(float(os.environ.get("DRIVE_HOLD_S", "0")))  # a server lives on: the mirror's thread copies
after = generate_latest(REGISTRY).decode()
from wakman.vllm_plugin import metrics
print(json.dumps({
    "before": before,
    "after": after,
    "metrics_dir": os.environ.get("WAKMAN_METRICS_DIR"),
    "stat_loggers": [f"{f.__module__}.{f.__qualname__}" for f in load_stat_logger_plugin_factories()],
    "mirrors": metrics._mirror is not None,
}))
"""

# the state of an engine alive as long as the driving process: its own pid names the file
PUBLISH_THEN = """
import json, os
state = {"engine": 0, "policy_setting": "s3fifo", "live_policy": "s3fifo", "candidates": ["s3fifo"],
         "capacity_blocks": 64, "decisions": 4}
with open(os.path.join(os.environ["WAKMAN_METRICS_DIR"], f"engine-{os.getpid()}-0.json"), "w") as f:
    json.dump(state, f)
"""

BROKEN_UNLINK = """
import pathlib
def unlink(self, missing_ok=False):  # the server may not write the directory (another user's)
    raise PermissionError(13, "Permission denied", str(self))
pathlib.Path.unlink = unlink
"""


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _out(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKMAN_", "PROMETHEUS_"))}
    env.pop("prometheus_multiproc_dir", None)
    env.pop("VLLM_PLUGINS", None)
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    return env


def _scrape_files(prom: Path) -> str:
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(prom))
    return generate_latest(registry).decode()


def _wakman_loggers(out: dict) -> list[str]:
    return [name for name in out["stat_loggers"] if name.startswith("wakman.")]


@pytest.mark.parametrize("api_servers", [1, 2])
def test_stock_vllm_with_wakman_installed_is_unchanged(tmp_path, api_servers):
    """wakman not asked for (no ``WAKMAN_POLICY``, no wakman class on the command line): vLLM finds
    no stat logger of wakman's (so its ``log_stats`` stays as the user set it), ``/metrics`` is
    stock vLLM's, byte for byte, and nothing is created on disk (a ``wakman-metrics-*`` folder per
    API server, never removed)."""
    env = _clean_env(tmp_path)
    if api_servers > 1:  # what `vllm serve --api-server-count 2` sets (setup_multiprocess_prometheus)
        (tmp_path / "prom").mkdir()
        env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "prom")
    out = _out(_run(DRIVE, env))
    assert _wakman_loggers(out) == []
    assert "wakman:" not in out["after"]
    assert _stable(out["after"]) == _stable(out["before"])
    assert out["metrics_dir"] is None and not out["mirrors"]
    assert list((tmp_path / "tmp").glob("wakman-*")) == []  # (vLLM 0.34 leaves torch's cache there)
    if api_servers > 1:
        assert list((tmp_path / "prom").iterdir()) == []


def test_one_api_server_gets_the_collector(tmp_path):
    """Asked for, one API server: the plugin registers the collector in prometheus_client's default
    registry (vLLM's ``/metrics`` then), which reads the published states at scrape time; still no
    stat logger of wakman's, so vLLM's own stats stay as the user set them."""
    env = _clean_env(tmp_path)
    states = tmp_path / "states"
    states.mkdir()
    env.update(WAKMAN_POLICY="s3fifo", WAKMAN_METRICS_DIR=str(states))
    out = _out(_run(PUBLISH_THEN + DRIVE, env))
    assert 'wakman:decisions_total{engine="0"} 4.0' in out["after"]
    assert 'wakman:live_policy{engine="0",policy="s3fifo"} 1.0' in out["after"]
    assert _wakman_loggers(out) == [] and not out["mirrors"]


def test_several_api_servers_get_one_mirror(tmp_path):
    """Asked for, several API servers (and engine processes) all load the plugin: exactly one of
    them, the first to take the mirror lock, copies the states into the multiprocess files, so the
    counters are the engine's, not summed over the copiers; the others copy nothing."""
    env = _clean_env(tmp_path)
    states, prom = tmp_path / "states", tmp_path / "prom"
    states.mkdir()
    prom.mkdir()
    env.update(
        WAKMAN_POLICY="s3fifo",
        WAKMAN_METRICS_DIR=str(states),
        PROMETHEUS_MULTIPROC_DIR=str(prom),
        DRIVE_HOLD_S="3",  # the servers overlap in time, as a server's processes do
    )
    _published(states, 0)  # this test's process stands for the engine
    procs = [
        subprocess.Popen([sys.executable, "-c", DRIVE], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    assert sum(out["mirrors"] for out in outs) == 1
    text = _scrape_files(prom)
    assert 'wakman:decisions_total{engine="0"} 4.0' in text
    assert 'wakman:live_policy{engine="0",policy="s3fifo"} 1.0' in text


def test_the_mirror_never_raises_into_vllm(tmp_path):
    """Several API servers: a state left by an exited engine that the server cannot remove, and a
    state file it cannot use, neither raise out of the plugin nor stop the mirror; the live
    engine's figures still reach the multiprocess files."""
    env = _clean_env(tmp_path)
    states, prom = tmp_path / "states", tmp_path / "prom"
    states.mkdir()
    prom.mkdir()
    env.update(WAKMAN_POLICY="s3fifo", WAKMAN_METRICS_DIR=str(states), PROMETHEUS_MULTIPROC_DIR=str(prom))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (states / f"engine-{int(gone.stdout)}-0.json").write_text("{}")  # exited: to be removed
    _published(states, 0)
    (states / f"engine-{os.getpid()}-1.json").write_text('{"engine": 1}')  # not a state wakman wrote
    assert _out(_run(BROKEN_UNLINK + DRIVE, env))["mirrors"]
    text = _scrape_files(prom)
    assert 'wakman:decisions_total{engine="0"} 4.0' in text
    assert 'wakman:live_policy{engine="0",policy="s3fifo"} 1.0' in text
    assert 'engine="1"' not in text


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
