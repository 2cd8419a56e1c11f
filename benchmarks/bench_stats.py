"""`wakman stats` on the kv-cache-tester archive (49,334 requests, 94 M block keys) as a whole process:
wall time and peak RSS, the goal being under 60 s and 1.5 GB. Run: ``python benchmarks/bench_stats.py
[--no-curve] [TRACE]``. Peak RSS is wait4's ru_maxrss, the figure ``/usr/bin/time -v`` prints."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
ARCHIVE = SHARED / "weka_claude_code_traces.tar.xz"
GOAL_S, GOAL_RSS_MB = 60.0, 1500.0


def run(trace: Path, extra: list[str]) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit code) of one `wakman stats TRACE --json` process."""
    wakman = Path(sys.executable).with_name("wakman")
    cmd = [str(wakman), "stats", str(trace), "--json", *extra]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode:
        print(err, file=sys.stderr)
    return wall, usage.ru_maxrss / 1024.0, proc.returncode  # ru_maxrss: KiB on Linux


def main() -> None:
    args = [a for a in sys.argv[1:] if a.startswith("--")]
    paths = [Path(a) for a in sys.argv[1:] if not a.startswith("--")]
    trace = paths[0] if paths else ARCHIVE
    if not trace.exists():
        print(f"{trace} missing")
        return
    wall, rss, code = run(trace, args)
    ok = code == 0 and wall < GOAL_S and rss < GOAL_RSS_MB
    print(f"{'trace':<36} {'seconds':>8} {'peak RSS MB':>12}  goal")
    if trace.resolve() == ARCHIVE.resolve():
        verdict = ("met" if ok else "MISSED") + f" (< {GOAL_S:g} s, < {GOAL_RSS_MB:g} MB)"
    else:  # the goal was set for the archive's size
        verdict = "none for this trace (the goal is the archive's)"
    print(f"{trace.name:<36} {wall:>8.1f} {rss:>12,.0f}  {verdict}")
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
