"""The `wakman` command line; ``main`` is its entry point."""

from __future__ import annotations

import sys


def main() -> None:
    """Run the CLI; Ctrl-C while it starts (imports take about a second) is a clean exit 130 too."""
    try:
        from wakman.cli.main import app
    except KeyboardInterrupt:
        print("interrupted: before the command started; nothing was done", file=sys.stderr)
        sys.exit(130)
    app()
