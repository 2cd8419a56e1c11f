"""Shared CLI plumbing: trace options, clean errors (file, line, field; exit code 2), console."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from wakman.traces import TraceFormatError, detect_format, read_trace
from wakman.traces.model import Request

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

FormatOption = typer.Option(None, "--format", "-f", help="Trace format (detected when omitted).")
BlockSizeOption = typer.Option(
    None, "--block-size", help="Tokens per block for formats without it (mooncake 512, bailian 16)."
)
RateOption = typer.Option(
    None, "--rate", help="kv-cache-tester: new conversations per second (default 1/60), Poisson, seeded."
)
FORMATS_WITHOUT_BLOCK_SIZE = ("mooncake", "aiperf-sessions", "bailian")  # --block-size sets theirs
SeedOption = typer.Option(None, "--seed", help="kv-cache-tester: seed of the conversation arrival process.")


def open_trace(
    path: Path,
    fmt: str | None,
    block_size: int | None = None,
    rate: float | None = None,
    seed: int | None = None,
) -> Iterator[Request]:
    name = fmt or detect_format(path)
    options: dict[str, object] = {}
    if block_size is not None:
        if name not in FORMATS_WITHOUT_BLOCK_SIZE:
            raise ValueError(f"--block-size does not apply to {name} traces (they carry their block size)")
        options["block_size"] = block_size
    if rate is not None or seed is not None:
        if name != "kv-cache-tester":
            raise ValueError("--rate/--seed apply to kv-cache-tester traces only")
        if rate is not None:
            options["rate"] = rate
        if seed is not None:
            options["seed"] = seed
    return read_trace(path, name, **options)


def progress_bars(label: str = "{task.description}", to: Console = console, **options: object) -> Progress:
    """The CLI's progress display: label, bar, done/total, elapsed time, on the shared console (or
    ``to``: ``err_console`` keeps stdout clean for machine-read output)."""
    return Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=to, **options
    )


def counted(requests: Iterable[Request], progress: Progress, description: str) -> Iterator[Request]:
    """``requests`` unchanged, counted on a task of ``progress`` (total unknown: a stream)."""
    task = progress.add_task(description, total=None)
    n = 0
    for n, req in enumerate(requests, start=1):
        yield req
        if n % 512 == 0:
            progress.update(task, completed=n)
    progress.update(task, completed=n)


@contextmanager
def stdout_to_stderr(active: bool = True) -> Iterator[None]:
    """While the block runs, file descriptor 1 is stderr's: anything it prints, from Python or from
    native code (an engine's log lines, child processes it starts), goes to stderr; stdout is back
    afterwards, for the command's own machine-read output. Both the Python and the C stdio buffers
    are flushed at each switch, so nothing printed inside lands on stdout later."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        with suppress(OSError, AttributeError):  # no C library to flush
            ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


@contextmanager
def cli_errors() -> Iterator[None]:
    """Bad input becomes one clear line on stderr and exit code 2, never a traceback."""
    try:
        yield
    except TraceFormatError as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(2)
    except (ValueError, OSError) as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(2)
