"""WAKMan's figures in vLLM's Prometheus registry (``/metrics`` of ``vllm serve``).

The policy lives in the engine-core process; ``/metrics`` is served by the API-server process. The
engine publishes its state (``PolicyRuntime.state``) to a small JSON file per engine in
``WAKMAN_METRICS_DIR`` (the plugin creates it in the first vLLM process, so spawned engines inherit
it), rewritten atomically at start-up and after each decision; ``WakmanCollector``, registered in
the API server by the general plugin (``expose_metrics``; in-process by the scheduler too, for an
engine in the API's process), reads them at scrape time. wakman has no stat logger plugin: vLLM
turns its own stats on wherever one is installed, ``--disable-log-stats`` or not.

With several API servers (``--api-server-count > 1``) vLLM serves ``/metrics`` from
prometheus_client's multiprocess files (``PROMETHEUS_MULTIPROC_DIR``) through a fresh registry that
holds only the multiprocess collector, so no custom collector can join it. There one process of
the server (the first to take the mirror lock, ``expose_metrics``) copies the published states
into real metrics whose values live in those files
(``MultiprocessMirror``): gauges in ``mostrecent`` mode, counters raised by what changed since its
last copy, so the sum over processes the multiprocess collector reports is the engine's own count.
It copies them once a second from a daemon thread, traffic or not (and ``--disable-log-stats`` or
not), so the figures lag the engine's published state by at most a second. Two differences from
one API server, where the collector reads the engines' current states: a counter there counts over
the engine processes of a rank (an engine that restarts adds from 0 to its predecessor's total;
one server shows the new process's count), and a gauge series the states stop giving (a shadow's
rate after a failed replay, an engine that is gone) reads NaN (one server leaves it out): the
multiprocess files cannot drop a series.
Metrics, in both modes:

- ``wakman:live_policy{policy}``: 1 for the live policy, 0 for the other candidates;
- ``wakman:decisions_total``, ``wakman:switches_total``, ``wakman:replay_errors_total``;
- ``wakman:shadow_hit_rate{policy}``: each shadow's hit rate at the last replay;
- ``wakman:last_replay_seconds`` and ``wakman:replay_seconds_total``;
- ``wakman:session_ends_total``: session ends told to the live policy (``WAKMAN_SESSIONS=1``;
  published when one is told, at most once a second: one within the second after a publish shows
  when that second is over).
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import msgspec

log = logging.getLogger("wakman")
ENV_DIR = "WAKMAN_METRICS_DIR"
_registered: set[int] = set()


class EngineState(msgspec.Struct, kw_only=True):
    """What one engine publishes (``PolicyRuntime.state``) and the collector and the mirror read:
    the file format, written and read by this one type. Counts since the engine started; seconds of
    wall time; ``shadow_hit_rate``: each shadow's hit rate at the last replay."""

    engine: int  # vLLM's data-parallel rank
    policy_setting: str  # WAKMAN_POLICY
    live_policy: str
    candidates: list[str]  # the manager's, or the one static policy
    capacity_blocks: int
    decisions: int = 0
    switches: int = 0
    replay_errors: int = 0
    replay_seconds_total: float = 0.0
    last_replay_seconds: float = 0.0
    shadow_hit_rate: dict[str, float] = msgspec.field(default_factory=dict)
    session_ends: int = 0  # told to the live policy (WAKMAN_SESSIONS=1)


def metrics_dir() -> Path:
    """The shared directory: ``WAKMAN_METRICS_DIR``, or else a temporary one, created (and exported
    to children) on first use in this process tree and removed when the process that made it exits
    (a user's ``WAKMAN_METRICS_DIR`` is left as it is)."""
    path = os.environ.get(ENV_DIR)
    if not path:
        path = tempfile.mkdtemp(prefix="wakman-metrics-")
        os.environ[ENV_DIR] = path
        atexit.register(_remove_made_dir, path, os.getpid())
    Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)


def _remove_made_dir(path: str, maker: int) -> None:
    if os.getpid() == maker:  # not a forked child that inherited the hook
        shutil.rmtree(path, ignore_errors=True)


_publish_failing = False  # the last publish in this process failed (logged once until one succeeds)


def publish_state(runtime: Any) -> None:
    """Write ``runtime.state()`` (an ``EngineState``) for the collector; never raises into the engine.
    A failure (a full disk, a directory made unusable) is logged once, and so is the recovery."""
    global _publish_failing
    try:
        state = runtime.state()
        target = metrics_dir() / f"engine-{os.getpid()}-{state.engine}.json"
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(msgspec.json.encode(state))
        tmp.replace(target)
    except OSError as exc:
        if not _publish_failing:
            log.warning("wakman: could not publish this engine's state for /metrics (it goes stale): %s", exc)
        _publish_failing = True
        return
    if _publish_failing:
        log.warning("wakman: publishing this engine's state for /metrics works again")
    _publish_failing = False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def read_states() -> list[EngineState]:
    """The states of the engines alive now (``read_states_by_pid``'s, without the pids)."""
    return [state for _, state in read_states_by_pid()]


def read_states_by_pid() -> list[tuple[int, EngineState]]:
    """The states of the engines alive now, each with its engine process's pid
    (``read_published``'s, without the publish times)."""
    return [(pid, state) for pid, _, state in read_published()]


def read_published() -> list[tuple[int, float, EngineState]]:
    """The states of the engines alive now, each with its engine process's pid and the time it was
    published (the file's modification time, s since the epoch), the latest last (the mirror's
    gauges of two live processes of one rank are the latest's, as the collector's). A file left by an
    engine process that has exited (a restarted engine, an earlier run sharing the directory) is
    removed, never reported: its counters would be read as the live engine's (one the reader may
    not remove is skipped all the same). Reading creates nothing: with ``WAKMAN_METRICS_DIR`` unset
    no engine of this process tree publishes (the plugin sets it wherever wakman is asked for), and
    the list is empty. A file that is not an ``EngineState`` (another version's, another
    program's, a partial write's) is skipped, not reported in part. Never raises: the readers run
    inside vLLM's ``/metrics`` and its output handler."""
    path = os.environ.get(ENV_DIR)
    if not path:
        return []
    states = []
    try:
        found = sorted(Path(path).glob("engine-*.json"))
    except OSError:
        return []
    for path in found:
        try:
            pid = int(path.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if not _alive(pid):
            with suppress(OSError):
                path.unlink(missing_ok=True)
            continue
        try:
            published = path.stat().st_mtime
            states.append((pid, published, msgspec.json.decode(path.read_bytes(), type=EngineState)))
        except (OSError, msgspec.DecodeError):  # ValidationError is a DecodeError
            continue
    states.sort(key=lambda state: state[1])  # the latest published last: its gauges are set last
    return states


class WakmanCollector:
    """A prometheus_client custom collector over the published engine states: one series per engine
    rank. Where two live processes publish one rank (a predecessor not yet reaped, two servers
    sharing a folder) their counters add up, as the multiprocess mirror's do, and the gauges are
    the one that published last's (two series with one label set would make Prometheus refuse the
    scrape)."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        live = GaugeMetricFamily(
            "wakman:live_policy", "1 for the live eviction policy", labels=["engine", "policy"]
        )
        shadow = GaugeMetricFamily(
            "wakman:shadow_hit_rate", "Shadow hit rate at the last replay", labels=["engine", "policy"]
        )
        decisions = CounterMetricFamily("wakman:decisions", "WAKMan decisions taken", labels=["engine"])
        switches = CounterMetricFamily("wakman:switches", "Live policy switches", labels=["engine"])
        errors = CounterMetricFamily("wakman:replay_errors", "Replays that failed", labels=["engine"])
        last = GaugeMetricFamily(
            "wakman:last_replay_seconds", "Wall time of the last replay", labels=["engine"]
        )
        total = CounterMetricFamily("wakman:replay_seconds", "Wall time of all replays", labels=["engine"])
        ends = CounterMetricFamily(
            "wakman:session_ends", "Session ends told to the live policy", labels=["engine"]
        )
        ranks: dict[int, list[tuple[float, EngineState]]] = {}
        for _, published, state in read_published():
            ranks.setdefault(state.engine, []).append((published, state))
        for rank, states in sorted(ranks.items()):
            engine = str(rank)
            latest = max(states, key=lambda published_state: published_state[0])[1]
            for name in latest.candidates:
                live.add_metric([engine, name], 1.0 if name == latest.live_policy else 0.0)
            for name, rate in latest.shadow_hit_rate.items():
                shadow.add_metric([engine, name], rate)
            last.add_metric([engine], latest.last_replay_seconds)
            decisions.add_metric([engine], sum(s.decisions for _, s in states))
            switches.add_metric([engine], sum(s.switches for _, s in states))
            errors.add_metric([engine], sum(s.replay_errors for _, s in states))
            total.add_metric([engine], sum(s.replay_seconds_total for _, s in states))
            ends.add_metric([engine], sum(s.session_ends for _, s in states))
        yield from (live, shadow, decisions, switches, errors, last, total, ends)


def register_collector(registry: Any = None) -> None:
    """Add ``WakmanCollector`` to ``registry`` (vLLM's: prometheus_client's default) once."""
    if registry is None:
        from prometheus_client import REGISTRY as registry
    if id(registry) in _registered:
        return
    registry.register(WakmanCollector())
    _registered.add(id(registry))


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_mode() -> bool:
    """True when vLLM serves ``/metrics`` from prometheus_client's multiprocess files."""
    return bool(os.environ.get(MULTIPROC_ENV))


class MultiprocessMirror:
    """The published engine states as prometheus_client metrics in the multiprocess files.

    One writer per server (``shared_mirror``, in the process holding the mirror lock:
    ``expose_metrics``), so summed counters stay exact.
    ``refresh`` copies the states once; ``start`` copies them every ``min_interval_s`` from a
    daemon thread, the only caller in a server, so the figures follow the
    engines with no traffic too, with no call from vLLM. A copy that fails is logged once (logger
    ``wakman``) and tried again at the next."""

    def __init__(self, min_interval_s: float = 1.0) -> None:
        from prometheus_client import Counter, Gauge

        def gauge(name: str, doc: str, labels: list[str]) -> Any:
            return Gauge(name, doc, labels, registry=None, multiprocess_mode="mostrecent")

        self.min_interval_s = min_interval_s
        self.live = gauge("wakman:live_policy", "1 for the live eviction policy", ["engine", "policy"])
        self.shadow = gauge(
            "wakman:shadow_hit_rate", "Shadow hit rate at the last replay", ["engine", "policy"]
        )
        self.last = gauge("wakman:last_replay_seconds", "Wall time of the last replay", ["engine"])
        self.counters = {
            key: Counter(name, doc, ["engine"], registry=None)
            for key, name, doc in (
                ("decisions", "wakman:decisions", "WAKMan decisions taken"),
                ("switches", "wakman:switches", "Live policy switches"),
                ("replay_errors", "wakman:replay_errors", "Replays that failed"),
                ("replay_seconds_total", "wakman:replay_seconds", "Wall time of all replays"),
                ("session_ends", "wakman:session_ends", "Session ends told to the live policy"),
            )
        }
        # (counter, engine, pid) -> the value last copied: each engine process counts on its own
        self._copied: dict[tuple[str, str, int], float] = {}
        self._shown: set[tuple[Any, tuple[str, ...]]] = set()  # gauge series the last copy set
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._failed = False

    def refresh(self) -> None:
        """Copy the live engines' states. A counter adds what each engine process counted since the
        last copy: an engine that restarted (a new process, same rank) counts from 0 again, added
        to its predecessor's total (two live processes of one rank add up, each once). A gauge
        series the states no longer give (a shadow's rate after a failed replay, an engine gone)
        reads NaN: the multiprocess files cannot drop a series, where one process's collector leaves
        it out."""
        with self._lock:
            shown: set[tuple[Any, tuple[str, ...]]] = set()
            copied_now: dict[tuple[str, str, int], float] = {}
            for pid, state in read_states_by_pid():
                engine = str(state.engine)
                for name in state.candidates:
                    self.live.labels(engine, name).set(1.0 if name == state.live_policy else 0.0)
                    shown.add((self.live, (engine, name)))
                for name, rate in state.shadow_hit_rate.items():
                    self.shadow.labels(engine, name).set(rate)
                    shown.add((self.shadow, (engine, name)))
                self.last.labels(engine).set(state.last_replay_seconds)
                shown.add((self.last, (engine,)))
                for key, counter in self.counters.items():
                    value = float(getattr(state, key))
                    copied = self._copied.get((key, engine, pid), 0.0)  # a new process: from 0
                    child = counter.labels(engine)  # a counter at 0 is scraped too, as in one process
                    if value > copied:
                        child.inc(value - copied)
                    copied_now[(key, engine, pid)] = max(value, copied)
            for gauge, labels in self._shown - shown:
                gauge.labels(*labels).set(math.nan)
            self._shown = shown
            # a process is forgotten once it has exited (a state it could not read this once
            # keeps its count: read again, it must not count from 0)
            kept = {**self._copied, **copied_now}
            self._copied = {k: v for k, v in kept.items() if k in copied_now or _alive(k[2])}

    def safe_refresh(self) -> None:
        """``refresh`` that never raises (it runs in the daemon thread)."""
        try:
            self.refresh()
        except Exception as exc:
            if not self._failed:
                log.warning("wakman: could not copy the engines' states into /metrics: %s", exc)
            self._failed = True
            return
        if self._failed:
            log.warning("wakman: copying the engines' states into /metrics works again")
        self._failed = False

    def start(self) -> None:
        """Copy now, then every ``min_interval_s`` from a daemon thread (once per mirror)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="wakman-metrics", daemon=True)
        self.safe_refresh()
        self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self.min_interval_s)
            self.safe_refresh()


_mirror: MultiprocessMirror | None = None


def shared_mirror() -> MultiprocessMirror:
    """This process's one mirror, started."""
    global _mirror
    if _mirror is None:
        _mirror = MultiprocessMirror()
        _mirror.start()
    return _mirror


# in the server's PROMETHEUS_MULTIPROC_DIR (one per server; prometheus_client reads only its *.db
# files): held by the one process of the server that mirrors
MIRROR_LOCK = "wakman-mirror.lock"
_mirror_lock: tuple[int, int] | None = None  # (pid, fd) of the lock this process holds


def _writes_multiprocess_files() -> bool:
    """prometheus_client in this process keeps its values in the multiprocess files: it was first
    imported with ``PROMETHEUS_MULTIPROC_DIR`` set (vLLM's launcher imported it before setting it,
    and a process forked from it keeps its values in memory)."""
    from prometheus_client import values

    return values.ValueClass is not values.MutexValue


def _take_mirror_lock() -> bool:
    """True in the one process of the server that holds the mirror lock (an exclusive ``flock`` on
    ``MIRROR_LOCK`` in the server's multiprocess directory, released when the process exits). A
    forked child closes its copy of the descriptor at once (an ``flock`` is shared across a fork):
    it never mirrors, and the lock lives as long as its holder."""
    global _mirror_lock
    if _mirror_lock is not None and _mirror_lock[0] == os.getpid():
        return True
    import fcntl

    fd = os.open(Path(os.environ[MULTIPROC_ENV]) / MIRROR_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _mirror_lock = (os.getpid(), fd)
    os.register_at_fork(after_in_child=_close_inherited_lock)
    return True


def _close_inherited_lock() -> None:
    global _mirror_lock
    if _mirror_lock is not None:
        with suppress(OSError):
            os.close(_mirror_lock[1])
        _mirror_lock = None


def expose_metrics() -> None:
    """Put the engines' figures on the ``/metrics`` this process may serve (the general plugin calls
    it in every vLLM process wherever wakman is asked for). One API server: ``WakmanCollector`` in
    prometheus_client's default registry, read at scrape time (in a process that serves no
    ``/metrics``, an engine's, it is never read). Several (multiprocess files): the first process of
    the server to take the mirror lock among those that write the files starts the mirror, so one
    writer copies the states and counters summed over processes stay exact (the lock is the
    server's own: it lives in the server's multiprocess directory). Never raises: a failure
    is logged and the server runs without wakman's figures."""
    try:
        if not multiprocess_mode():
            register_collector()
        elif _writes_multiprocess_files() and _take_mirror_lock():
            shared_mirror()
    except Exception as exc:
        log.warning("wakman: cannot put wakman's figures on /metrics: %s", exc)
