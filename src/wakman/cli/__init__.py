"""The `wakman` command line; ``main`` is its entry point."""

from __future__ import annotations

import sys


def main() -> None:
    """Run the CLI; Ctrl-C while it starts (imports take about a second, then typer reads the
    command's signature) is a clean exit 130 too. Each command says itself what an interrupt cost
    once its body runs (``cli_errors``); one reaching here was not caught there."""
    try:
        from wakman.cli.main import run

        run()
    except KeyboardInterrupt:
        print("interrupted: before the command started; nothing was done", file=sys.stderr)
        sys.exit(130)
