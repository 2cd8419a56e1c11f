"""Wall time of ``wakman reproduce`` (full) and ``--quick`` as whole processes on this machine; the
targets are under 90 s on two cores and about one minute for --quick.
Run: ``python benchmarks/bench_reproduce.py``."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    wakman = str(Path(sys.executable).parent / "wakman")
    for label, extra in (("reproduce --quick", ["--quick"]), ("reproduce (full)", [])):
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            subprocess.run([wakman, "reproduce", "--out", out, *extra], check=True, capture_output=True)
            seconds = time.perf_counter() - start
        target = 60 if extra else 90
        print(f"{label:<20} {seconds:>7.0f} s   target {target} s   ratio {seconds / target:.2f}x")


if __name__ == "__main__":
    main()
