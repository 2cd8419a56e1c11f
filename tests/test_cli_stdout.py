"""``stdout_to_stderr``: what a block prints, from Python or from the C library, goes to stderr."""

from __future__ import annotations

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
