"""The CLI's terminal output: the two consoles (stdout for results, stderr for notes and progress),
strict JSON, progress bars, and sending a block's prints to stderr (``stdout_to_stderr``)."""

from __future__ import annotations

import ctypes
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from rich.progress import Progress

from wakman.traces.model import Request

# Where stdout is a file or a pipe, rich takes its width from a terminal on stdin or stderr, or 80
# columns without one, and cuts tables to it; keep every value there instead (240 columns). A
# terminal on stdout, or COLUMNS when set, still decides the width of tables; a line of text is
# never folded (soft_wrap), so a long file name stays whole on one line for grep and the shell.
console = Console(width=None if os.isatty(1) or "COLUMNS" in os.environ else 240, soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def _finite(value: object) -> object:
    if hasattr(value, "tolist"):  # a numpy scalar or array: its Python value
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def json_text(value: object, **options: object) -> str:
    """``value`` as strict JSON: a figure that is not a number (NaN, infinite: a statistic of zero
    samples) becomes null, which every JSON parser reads."""
    return json.dumps(_finite(value), allow_nan=False, **options)


class HiddenProgress:
    """What ``progress_bars(disable=True)`` gives where there is no terminal to draw on (a pipe, a
    file, nohup, CI): the calls the commands make on a progress display (a context manager,
    ``add_task``, ``update``, ``advance``), without loading rich's live display (about 0.01 s of a
    short command's start-up). With ``to``, a long run is not silent: once ``every_s`` seconds
    (wall clock) have passed since the last line (or the start), the next update prints one plain
    line per unfinished task, ``description: done/total, N s`` (``running`` for a task with no total
    and nothing counted yet); a run shorter than that prints nothing."""

    def __init__(self, to: Console | None = None, every_s: float = 60.0) -> None:
        self._to = to
        self._every_s = every_s
        self._started = self._last = time.monotonic()
        self._tasks: list[list] = []  # per task id: [description, total or None, completed]

    def __enter__(self) -> HiddenProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str = "", total: float | None = None, **kwargs: object) -> int:
        self._tasks.append([description, total, float(kwargs.get("completed", 0) or 0)])
        return len(self._tasks) - 1

    def update(
        self,
        task: int,
        *,
        completed: float | None = None,
        advance: float | None = None,
        total: float | None = None,
        description: str | None = None,
        **kwargs: object,
    ) -> None:
        entry = self._tasks[task]
        if description is not None:
            entry[0] = description
        if total is not None:
            entry[1] = total
        if completed is not None:
            entry[2] = float(completed)
        if advance is not None:
            entry[2] += advance
        self._report()

    def advance(self, task: int, advance: float = 1) -> None:
        self._tasks[task][2] += advance
        self._report()

    def _report(self) -> None:
        if self._to is None:
            return
        now = time.monotonic()
        if now - self._last < self._every_s:
            return
        self._last = now
        for description, total, completed in self._tasks:
            if total is not None and completed >= total:
                continue
            if total is None and not completed:  # one long call with no count: running, and for how long
                done = "running"
            else:
                done = f"{completed:,.0f}" + (f"/{total:,.0f}" if total is not None else "")
            self._to.print(
                f"{description}: {done}, {now - self._started:,.0f} s", markup=False, highlight=False
            )


def progress_bars(
    label: str = "{task.description}", to: Console = console, **options: object
) -> Progress | HiddenProgress:
    """The CLI's progress display: label, bar, done/total, elapsed time, on the shared console (or
    ``to``: ``err_console`` keeps stdout clean for machine-read output); ``disable=True`` (no
    terminal to draw on): a ``HiddenProgress`` that prints a plain line a minute on a long run."""
    if options.get("disable"):
        return HiddenProgress(to)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=to, **options
    )


def counted(
    requests: Iterable[Request],
    progress: Progress | HiddenProgress,
    description: str,
    total: int | None = None,
) -> Iterator[Request]:
    """``requests`` unchanged, counted on a task of ``progress`` (``total`` None: a stream, whose
    total becomes its count once it ends: the task shows as finished)."""
    task = progress.add_task(description, total=total)
    n = 0
    for n, req in enumerate(requests, start=1):
        yield req
        if n % 512 == 0:
            progress.update(task, completed=n)
    progress.update(task, completed=n, total=n)


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


def warn_rejected(requests: int, rejected: int, measured: int, capacity: int, warmup_s: float = 0.0) -> None:
    """The warnings of a run that rejected requests (larger than the whole cache: ``rejected``) or
    measured none, on stderr: ``requests`` read, ``measured`` of them counted (after the warm-up of
    ``warmup_s`` seconds, not rejected), ``capacity`` in blocks."""
    if rejected and measured:
        after = measured + rejected  # the requests after the warm-up
        of = f"{after:,} requests" + (" after the warm-up" if after < requests else "")
        err_console.print(
            f"[yellow]warning:[/yellow] {rejected:,} of {of} "
            f"({rejected / after:.0%}) need more blocks than the whole cache "
            f"({capacity:,}) and were rejected, as vLLM refuses a request past max_model_len: the hit "
            "rate is over the others only, so a smaller cache can read higher",
            highlight=False,
        )
    if measured == 0:
        warm = f", the rest in the warm-up of {warmup_s:g} s" if warmup_s > 0 else ""
        err_console.print(
            f"[yellow]warning:[/yellow] no request was measured ({requests:,} read, "
            f"{rejected:,} rejected as larger than the cache{warm}): the hit rate and token counts are 0",
            highlight=False,
        )
