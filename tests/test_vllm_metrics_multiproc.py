"""wakman's figures in prometheus_client's multiprocess files (vLLM with several API servers).

The writer runs in a child process, as an API server does: prometheus_client picks its multiprocess
value store when it is first imported, from ``PROMETHEUS_MULTIPROC_DIR``. The reader is what vLLM's
``/metrics`` does then: a fresh registry holding only the multiprocess collector."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm  # prometheus_client comes with vLLM
pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest, multiprocess  # noqa: E402

WRITER = """
import json, sys
from pathlib import Path
from wakman.vllm_plugin.metrics import MultiprocessMirror, multiprocess_mode
assert multiprocess_mode()
states = json.loads(sys.argv[1])
mirror = MultiprocessMirror()  # not started: this process copies by hand
for decisions in (3, 5, 9):  # the engines publish new states; the mirror copies each
    for path, state in states.items():
        state["decisions"] = decisions
        state["replay_seconds_total"] = 0.5 * decisions
        state["session_ends"] = 2 * decisions
        Path(path).write_text(json.dumps(state))
    mirror.refresh()
"""


# The server's mirror as the general plugin starts it, then no call at all (no traffic, or
# --disable-log-stats): the engine publishes a new state and the server only waits
IDLE_WRITER = """
import json, sys, time
from pathlib import Path
from wakman.vllm_plugin.metrics import shared_mirror
path, state = json.loads(sys.argv[1])
Path(path).write_text(json.dumps(state))
shared_mirror()
state["decisions"], state["switches"], state["live_policy"] = 7, 3, "lru"
Path(path).write_text(json.dumps(state))
time.sleep(float(sys.argv[2]))
"""


def _state(engine: int, live: str) -> dict:
    return {
        "engine": engine,
        "policy_setting": "wakman",
        "live_policy": live,
        "candidates": ["lru", "s3fifo"],
        "capacity_blocks": 256,
        "decisions": 0,
        "switches": 2,
        "replay_errors": 1,
        "replay_seconds_total": 0.0,
        "last_replay_seconds": 0.25,
        "shadow_hit_rate": {"lru": 0.4, "s3fifo": 0.5},
    }


def _folders(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """The server's multiprocess folder, the engines' state folder, and an environment naming both."""
    prom, states = tmp_path / "prom", tmp_path / "states"
    prom.mkdir()
    states.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(prom), "WAKMAN_METRICS_DIR": str(states)}
    return prom, states, env


def _write(env: dict[str, str], script: str, *args: str) -> str:
    """``script`` run as a server process of its own (its prometheus_client picks the multiprocess
    store at import): its stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _scrape(path: Path) -> str:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(path))
    return generate_latest(registry).decode()


def _value(text: str, sample: str) -> float:
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
    assert match, f"{sample} missing from:\n{text}"
    return float(match.group(1))


def test_mirror_writes_exact_counters_and_gauges(tmp_path):
    """One writer (the process holding the mirror lock) for two engines: counters equal the
    engines' totals, not the sum of the copies, and gauges the latest values."""
    prom, states, env = _folders(tmp_path)
    published = {
        # published under this (live) process's pid: states of exited engines are not read
        str(states / f"engine-{os.getpid()}-{engine}.json"): _state(engine, live)
        for engine, live in ((0, "s3fifo"), (1, "lru"))
    }
    _write(env, WRITER, json.dumps(published))
    text = _scrape(prom)
    for engine, live, other in (("0", "s3fifo", "lru"), ("1", "lru", "s3fifo")):
        assert _value(text, f'wakman:live_policy{{engine="{engine}",policy="{live}"}}') == 1.0
        assert _value(text, f'wakman:live_policy{{engine="{engine}",policy="{other}"}}') == 0.0
        assert _value(text, f'wakman:decisions_total{{engine="{engine}"}}') == 9.0  # not 3 + 5 + 9
        assert _value(text, f'wakman:replay_seconds_total{{engine="{engine}"}}') == 4.5
        assert _value(text, f'wakman:session_ends_total{{engine="{engine}"}}') == 18.0
        assert _value(text, f'wakman:switches_total{{engine="{engine}"}}') == 2.0
        assert _value(text, f'wakman:replay_errors_total{{engine="{engine}"}}') == 1.0
        assert _value(text, f'wakman:last_replay_seconds{{engine="{engine}"}}') == 0.25
        assert _value(text, f'wakman:shadow_hit_rate{{engine="{engine}",policy="s3fifo"}}') == 0.5
    assert "# TYPE wakman:decisions_total counter" in text or "# TYPE wakman:decisions counter" in text


def test_a_state_left_by_an_exited_engine_is_not_reported(tmp_path, monkeypatch):
    """An engine process that exited (a restart, an earlier run in the same directory) leaves its
    state file: its counters must not be read as the live engine's, whatever the file order."""
    from wakman.vllm_plugin import metrics

    monkeypatch.setenv(metrics.ENV_DIR, str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(gone.stdout)
    stale = tmp_path / f"engine-{dead_pid}-0.json"
    stale.write_text(json.dumps({**_state(0, "lru"), "replay_errors": 0}))
    live = tmp_path / f"engine-{os.getpid()}-0.json"
    live.write_text(json.dumps({**_state(0, "lru"), "replay_errors": 3}))
    assert [s.replay_errors for s in metrics.read_states()] == [3]
    assert not stale.exists()


def test_one_process_collector_gives_one_series_per_rank(tmp_path, monkeypatch):
    """Two live processes publishing rank 0 (two servers sharing a folder, a predecessor not yet
    reaped): the collector gave every series twice with one label set (Prometheus refuses such a
    scrape); now counters add up (as the mirror's) and the gauges are the latest state's."""
    from wakman.vllm_plugin import metrics

    monkeypatch.setenv(metrics.ENV_DIR, str(tmp_path))
    engines = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        for engine, (decisions, live, at) in zip(
            engines, ((7, "lru", 1000.0), (3, "s3fifo", 2000.0)), strict=True
        ):
            path = tmp_path / f"engine-{engine.pid}-0.json"
            path.write_text(json.dumps({**_state(0, live), "decisions": decisions}))
            os.utime(path, (at, at))
        registry = CollectorRegistry()
        registry.register(metrics.WakmanCollector())
        text = generate_latest(registry).decode()
    finally:
        for engine in engines:
            engine.kill()
            engine.wait()
    samples = [line.rsplit(" ", 1)[0] for line in text.splitlines() if line.startswith("wakman:")]
    assert len(samples) == len(set(samples)), text
    assert _value(text, 'wakman:decisions_total{engine="0"}') == 10.0
    assert _value(text, 'wakman:live_policy{engine="0",policy="s3fifo"}') == 1.0  # the latest's


def test_the_mirror_copies_on_its_own_with_no_traffic(tmp_path):
    """The first API server's mirror copies the engines' states once a second from its own thread:
    a state the engine publishes after the last of vLLM's calls (an idle server; vLLM calls no
    ``log`` under ``--disable-log-stats``) reaches ``/metrics`` within about a second."""
    prom, states, env = _folders(tmp_path)
    published = [str(states / f"engine-{os.getpid()}-0.json"), _state(0, "s3fifo")]
    _write(env, IDLE_WRITER, json.dumps(published), "2.5")
    text = _scrape(prom)
    assert _value(text, 'wakman:decisions_total{engine="0"}') == 7.0
    assert _value(text, 'wakman:switches_total{engine="0"}') == 3.0
    assert _value(text, 'wakman:live_policy{engine="0",policy="lru"}') == 1.0
    assert _value(text, 'wakman:live_policy{engine="0",policy="s3fifo"}') == 0.0


ZERO_WRITER = """
import json, sys
from pathlib import Path
from wakman.vllm_plugin.metrics import MultiprocessMirror
path, state = json.loads(sys.argv[1])
Path(path).write_text(json.dumps(state))
MultiprocessMirror().refresh()
"""


def test_counters_still_at_zero_are_scraped_as_in_one_process(tmp_path):
    """A healthy server's replay errors and a fresh one's decisions are 0: with several API servers
    they are scraped as 0, as with one (they were missing, so an alert on their increase or their
    absence could not tell a healthy server from a broken one)."""
    prom, states, env = _folders(tmp_path)
    zero = {**_state(0, "lru"), "switches": 0, "replay_errors": 0, "session_ends": 0}
    published = [str(states / f"engine-{os.getpid()}-0.json"), zero]
    _write(env, ZERO_WRITER, json.dumps(published))
    text = _scrape(prom)
    for name in ("decisions", "switches", "replay_errors", "replay_seconds", "session_ends"):
        assert _value(text, f'wakman:{name}_total{{engine="0"}}') == 0.0


# Engines as processes of their own (their pids name their state files): engine A publishes, its
# last replay fails, it is replaced by engine B (same rank), then B is gone; the mirror copies after
# each and the scrape is taken then
LIFE_WRITER = """
import json, subprocess, sys
from pathlib import Path
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from wakman.vllm_plugin.metrics import MultiprocessMirror
states, prom, state = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
mirror = MultiprocessMirror()
scrapes = []
def publish(engine, **fields):
    (states / f"engine-{engine.pid}-0.json").write_text(json.dumps({**state, **fields}))
def copy():
    mirror.refresh()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=prom)
    scrapes.append(generate_latest(registry).decode())
a = subprocess.Popen(["sleep", "60"])
publish(a, decisions=10)
copy()
publish(a, decisions=11, replay_errors=2, shadow_hit_rate={})  # the last replay failed
copy()
a.kill(); a.wait()
b = subprocess.Popen(["sleep", "60"])
publish(b, decisions=4)  # the restarted engine
copy()
publish(b, decisions=13)
copy()
b.kill(); b.wait()
copy()
print(json.dumps(scrapes))
"""


def test_the_mirror_across_a_failed_replay_a_restart_and_a_gone_engine(tmp_path):
    """A restarted engine's counts are added from 0 (they were lost until they passed the old
    engine's total: 4 read 11, 13 read 13); a shadow rate the last replay did not give, and every
    gauge of an engine that is gone, read NaN (they kept their last values)."""
    prom, states, env = _folders(tmp_path)
    stdout = _write(env, LIFE_WRITER, str(states), str(prom), json.dumps(_state(0, "s3fifo")))
    first, failed, restarted, later, gone = json.loads(stdout)
    decisions = 'wakman:decisions_total{engine="0"}'
    shadow = 'wakman:shadow_hit_rate{engine="0",policy="s3fifo"}'
    live = 'wakman:live_policy{engine="0",policy="s3fifo"}'
    assert _value(first, decisions) == 10 and _value(first, shadow) == 0.5
    assert _value(failed, decisions) == 11 and _value(failed, 'wakman:replay_errors_total{engine="0"}') == 2
    assert math.isnan(_value(failed, shadow)) and _value(failed, live) == 1.0
    assert _value(restarted, decisions) == 11 + 4 and _value(restarted, shadow) == 0.5
    assert _value(later, decisions) == 11 + 13
    assert math.isnan(_value(gone, live)) and math.isnan(_value(gone, shadow))
    assert math.isnan(_value(gone, 'wakman:last_replay_seconds{engine="0"}'))
    assert _value(gone, decisions) == 24  # a counter keeps its total


TWO_OF_ONE_RANK = """
import json, subprocess, sys
from pathlib import Path
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from wakman.vllm_plugin.metrics import MultiprocessMirror
states, prom, state = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
mirror = MultiprocessMirror()
engines = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
for engine, decisions in zip(engines, (10, 3)):
    (states / f"engine-{engine.pid}-0.json").write_text(json.dumps({**state, "decisions": decisions}))
scrapes = []
for _ in range(3):
    mirror.refresh()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=prom)
    scrapes.append(generate_latest(registry).decode())
for engine in engines:
    engine.kill()
print(json.dumps(scrapes))
"""


def test_two_live_processes_of_one_rank_add_up_once(tmp_path):
    """Two live engine processes publishing rank 0 (two servers sharing a metrics directory, a
    predecessor not yet reaped): the counter is their sum at every copy (it grew by both totals
    at each copy, 13, 26, 39, when the mirror kept one process per rank)."""
    prom, states, env = _folders(tmp_path)
    stdout = _write(env, TWO_OF_ONE_RANK, str(states), str(prom), json.dumps(_state(0, "lru")))
    for text in json.loads(stdout):
        assert _value(text, 'wakman:decisions_total{engine="0"}') == 13.0


FLAKY_READ = """
import json, os, sys
from pathlib import Path
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from wakman.vllm_plugin.metrics import MultiprocessMirror
states, prom, state = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
path = states / f"engine-{os.getpid()}-0.json"
mirror = MultiprocessMirror()
path.write_text(json.dumps({**state, "decisions": 10}))
mirror.refresh()
path.write_text("{not json")  # one copy cannot read it (say a read failed)
mirror.refresh()
path.write_text(json.dumps({**state, "decisions": 12}))
mirror.refresh()
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry, path=prom)
print(json.dumps(generate_latest(registry).decode()))
"""


def test_a_state_read_failing_once_does_not_count_its_engine_again(tmp_path):
    """A live engine's state that one copy could not read keeps the count copied before it: 12
    decisions read 12, not 22 (forgetting the process when its state was missing once would count
    it from 0 again)."""
    prom, states, env = _folders(tmp_path)
    stdout = _write(env, FLAKY_READ, str(states), str(prom), json.dumps(_state(0, "lru")))
    assert _value(json.loads(stdout), 'wakman:decisions_total{engine="0"}') == 12.0


# A server process that took the mirror lock forks a child (vLLM forks engine and worker processes
# on a GPU) and exits while the child lives: the child neither mirrors nor keeps the lock
FORKING_HOLDER = """
import os, sys, time
from wakman.vllm_plugin import metrics
metrics.expose_metrics()
assert metrics._mirror is not None, "the holder did not take the lock"
pid = os.fork()
if pid == 0:
    sys.stdout.write(f"child holds: {metrics._mirror_lock is not None}\\n")
    sys.stdout.flush()
    time.sleep(6)
    os._exit(0)
time.sleep(1)
print(pid)
"""

TAKER = """
from wakman.vllm_plugin import metrics
metrics.expose_metrics()
print(metrics._mirror is not None)
"""


def test_the_mirror_lock_is_the_servers_and_dies_with_its_holder(tmp_path):
    """The lock lives in the server's multiprocess directory (one per server; a metrics directory
    shared by two servers left one of them without figures), and a forked child of its holder does
    not keep it: once the holder exits, another process takes it."""
    prom, states, env = _folders(tmp_path)
    assert "child holds: False" in _write(env, FORKING_HOLDER)
    assert (prom / "wakman-mirror.lock").exists() and not list(states.glob("*.lock"))
    assert _write(env, TAKER).strip() == "True"  # the child still lives (it sleeps 6 s) but holds nothing


# vLLM's launcher on a GPU: prometheus_client imported before PROMETHEUS_MULTIPROC_DIR is set (its
# values then live in memory), the engine core forked from it, the API servers spawned fresh
GPU_LAUNCHER = """
import json, multiprocessing, os, sys
import prometheus_client  # the launcher's imports come before setup_multiprocess_prometheus
os.environ["PROMETHEUS_MULTIPROC_DIR"] = sys.argv[1]

def start(queue):
    from wakman.vllm_plugin import metrics
    metrics.expose_metrics()
    queue.put(metrics._mirror is not None)

if __name__ == "__main__":
    results = {}
    for method in ("fork", "spawn"):  # the engine core (forked on a GPU), then an API server
        ctx = multiprocessing.get_context(method)
        queue = ctx.Queue()
        proc = ctx.Process(target=start, args=(queue,))
        proc.start()
        results[method] = queue.get(timeout=120)
        proc.join()
    print(json.dumps(results))
"""


def test_a_forked_engine_core_leaves_the_mirror_to_a_spawned_api_server(tmp_path):
    """The GPU arrangement, which the CPU engine tests do not reach (vLLM's CPU platform spawns its
    engine core): a process forked from the launcher keeps prometheus_client's in-memory values, so
    it must not take the mirror lock (its copies would reach no file); a spawned API server, whose
    prometheus_client writes the files, takes it."""
    prom, _, env = _folders(tmp_path)
    del env["PROMETHEUS_MULTIPROC_DIR"]  # the launcher sets it itself, after its imports
    script = tmp_path / "launcher.py"  # a file: spawn re-imports the main module
    script.write_text(GPU_LAUNCHER)
    proc = subprocess.run(
        [sys.executable, str(script), str(prom)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"fork": False, "spawn": True}


def test_a_metrics_dir_wakman_made_is_removed_when_its_maker_exits(tmp_path):
    """Without WAKMAN_METRICS_DIR each server made a temporary folder and left it behind; the
    process that made it removes it at exit, a child that inherited it does not, and a folder the
    user named stays."""
    code = (
        "import os, subprocess, sys; from wakman.vllm_plugin.metrics import metrics_dir; d = metrics_dir(); "
        "(d / 'engine-1-0.json').write_text('{}'); "
        "subprocess.run([sys.executable, '-c', 'from wakman.vllm_plugin.metrics import metrics_dir; "
        'assert str(metrics_dir()) == __import__("os").environ["WAKMAN_METRICS_DIR"]\'], check=True); '
        # a forked child (vLLM's engine processes may be forks) inherits the exit hook, not the folder
        "pid = os.fork(); pid or sys.exit(0); os.waitpid(pid, 0); "
        "assert d.exists(); print(d)"
    )
    env = {k: v for k, v in os.environ.items() if k != "WAKMAN_METRICS_DIR"}
    made = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    assert not Path(made.stdout.strip()).exists()
    named = tmp_path / "mine"
    env["WAKMAN_METRICS_DIR"] = str(named)
    kept = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert kept.returncode == 0, kept.stderr
    assert named.is_dir() and (named / "engine-1-0.json").exists()
