"""The `wakman` command line.

Each command lives in a module of its own (``COMMANDS``). ``run()``, the entry point, registers only
the command its command line names: typer reads just that function's signature, and the other
commands' modules and their dependencies are never imported. With no command (``wakman``,
``--help``, ``--version``) or an unknown one (click's error then lists them all) it registers every
command. ``app``, every command, is built on first use (the tests, ``python -m wakman.cli.main``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import typer

# command -> (module of wakman.cli, function), in `wakman --help`'s order
COMMANDS: dict[str, tuple[str, str]] = {
    "reproduce": ("reproduce", "reproduce"),
    "policies": ("policies", "policies"),
    "shadow": ("policies", "shadow"),
    "stats": ("traces", "stats"),
    "convert": ("traces", "convert"),
    "generate": ("generate", "generate"),
    "simulate": ("simulate", "simulate"),
    "sweep": ("simulate", "sweep"),
    "replay": ("replay", "replay"),
    "advise": ("advise", "advise"),
}


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"wakman {version('wakman')}")
        raise typer.Exit()


def main(
    _: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the installed version and exit."
    ),
) -> None:
    """Workload-aware KV-cache manager: policies, traces, simulation and adaptive eviction."""


def build_app(names: Iterable[str] = COMMANDS) -> typer.Typer:
    """The command line with the named commands (a group even with one: it has a callback)."""
    cli = typer.Typer(
        name="wakman",
        help="Workload-aware KV-cache manager: policies, traces, simulation and adaptive eviction.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    cli.callback()(main)
    for name in names:
        module, function = COMMANDS[name]
        cli.command(name)(getattr(importlib.import_module(f"wakman.cli.{module}"), function))
    return cli


def run(args: Sequence[str] | None = None) -> None:
    """Run a command line (default ``sys.argv[1:]``) with only its command registered. A command
    comes first: the group's own options (--help, --version) end the run before any command.
    A file name that is not UTF-8 (Python holds its bytes as surrogates) prints with ``\\udcXX``
    escapes where the output's encoding is strict, not as an error."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    given = list(sys.argv[1:] if args is None else args)
    cli = build_app(given[:1] if given and given[0] in COMMANDS else COMMANDS)
    if args is None:
        cli()  # typer reads sys.argv itself (and expands wildcards where the shell does not)
    else:
        cli(args=given)


def __getattr__(name: str) -> Any:  # `app`: every command, built on first use
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    global app
    app = build_app()
    return app


if __name__ == "__main__":  # pragma: no cover
    run()
