"""``ServerProcess``, the harness's child HTTP server, without vLLM: a start-up cut short or a
server that dies leaves none of its processes behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from wakman.vllm_plugin.server import ServerFailed, ServerProcess, free_port


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(group: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _group_alive(group)


def _spawned(monkeypatch) -> list[subprocess.Popen]:
    """The processes ``ServerProcess`` starts, recorded (a test cleans up what a failure leaves)."""
    started: list[subprocess.Popen] = []
    real = subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)
    return started


def _kill(started: list[subprocess.Popen]) -> None:
    for proc in started:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_ctrl_c_during_start_up_stops_the_server(tmp_path, monkeypatch):
    """The server runs in its own session, so the terminal's Ctrl-C reaches this process only: a
    KeyboardInterrupt while waiting for ``/health`` left the server running."""
    started = _spawned(monkeypatch)
    never_healthy = [sys.executable, "-c", "import time; time.sleep(120)"]
    server = ServerProcess(never_healthy, dict(os.environ), free_port(), tmp_path / "log", 60.0)
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt), server:
            pass
        assert len(started) == 1 and _gone(started[0].pid)
    finally:
        timer.cancel()
        _kill(started)


def test_a_server_whose_first_process_died_has_its_group_stopped(tmp_path, monkeypatch):
    """The server's first process exits (a crashed API server) while a process it started (its
    engine core) lives on in its group: ``ServerFailed``, and the group is stopped (it was left)."""
    started = _spawned(monkeypatch)
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(90)']); "
        "time.sleep(0.5); sys.exit(1)"
    )
    server = ServerProcess(
        [sys.executable, "-c", code], dict(os.environ), free_port(), tmp_path / "log", 60.0
    )
    try:
        with pytest.raises(ServerFailed, match="exited with 1"), server:
            pass
        assert len(started) == 1 and _gone(started[0].pid)
    finally:
        _kill(started)
