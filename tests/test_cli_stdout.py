"""``stdout_to_stderr``: what a block prints, from Python or from the C library, goes to stderr; and
the progress display where stderr is no terminal."""

from __future__ import annotations

import io
import subprocess
import sys

SCRIPT = """
import ctypes, os, sys
from wakman.cli.console import stdout_to_stderr
with stdout_to_stderr():
    print("python print")
    os.write(1, b"raw fd 1\\n")
    ctypes.CDLL(None).printf(b"C stdio\\n")
    subprocess = __import__("subprocess")
    subprocess.run([sys.executable, "-c", "print('child process')"])
with stdout_to_stderr(active=False):
    print("kept", end="")
print('{"ok": 1}')
"""


def test_only_what_comes_after_reaches_stdout():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == 'kept{"ok": 1}\n'
    for line in ("python print", "raw fd 1", "C stdio", "child process"):
        assert line in proc.stderr


def test_progress_without_a_terminal_prints_plain_lines_on_long_runs():
    """No terminal to draw on (a pipe, nohup, CI): a run that lasts past ``every_s`` prints one plain
    line per unfinished task at its next update; a shorter one prints nothing."""
    from rich.console import Console

    from wakman.cli.console import HiddenProgress, progress_bars

    out = io.StringIO()
    lines = HiddenProgress(Console(file=out, width=200), every_s=0.0)
    with lines:
        reading = lines.add_task("reading t.jsonl", total=None)
        sweep = lines.add_task("cache sweep", total=10)
        lines.update(reading, completed=4096)
        lines.advance(sweep, 3)
        lines.update(sweep, completed=10)  # finished: no line for it any more
        lines.update(reading, completed=5000, total=5000)  # a stream ends: counted() sets its total
    printed = out.getvalue().splitlines()
    assert printed[:2] == ["reading t.jsonl: 4,096, 0 s", "cache sweep: 0/10, 0 s"]
    assert printed[2:4] == ["reading t.jsonl: 4,096, 0 s", "cache sweep: 3/10, 0 s"]
    assert printed[4:] == ["reading t.jsonl: 4,096, 0 s"]  # (the sweep's end); then nothing
    running = io.StringIO()
    one_call = HiddenProgress(Console(file=running, width=200), every_s=0.0)
    one_call.update(one_call.add_task("generating", total=None))
    assert running.getvalue() == "generating: running, 0 s\n"
    quiet = io.StringIO()
    short = HiddenProgress(Console(file=quiet), every_s=3600.0)
    short.advance(short.add_task("sweep", total=2))
    assert quiet.getvalue() == ""
    assert isinstance(progress_bars(to=Console(file=quiet), disable=True), HiddenProgress)
