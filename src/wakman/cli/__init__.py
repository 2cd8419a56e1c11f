"""The `wakman` command line; ``main`` is its entry point."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Run the CLI; Ctrl-C while it starts (imports take about a second, then typer reads the
    command's signature) is a clean exit 130 too. Each command says itself what an interrupt cost
    once its body runs (``cli_errors``); one reaching here was not caught there.

    numpy's OpenBLAS gets one thread unless the environment says otherwise: wakman does no linear
    algebra, and OpenBLAS otherwise starts a thread per core at import that spins for about 0.1 s
    of CPU each (a third of a ``wakman simulate`` run's CPU on two cores). Not for ``replay``,
    which runs a vLLM engine (whose torch may do its matrix work in OpenBLAS, as on ARM CPUs)."""
    if sys.argv[1:2] != ["replay"]:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        from wakman.cli.main import run

        run()
    except KeyboardInterrupt:
        print("interrupted: before the command started; nothing was done", file=sys.stderr)
        sys.exit(130)
