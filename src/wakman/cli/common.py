"""Shared CLI plumbing, for every command (new ones too):

- ``cli_errors(interrupted_note)``: wrap a command's whole body in it. Bad input (``ValueError``,
  ``OSError``, ``TraceFormatError``) becomes one line on stderr and exit code 2; Ctrl-C says
  "interrupted: <what was lost or kept>" and exits 130 (``interrupted()`` does that by hand), and
  so does SIGTERM.
- ``check_numbers`` and ``parse_ints``: validate numeric flags up front, naming the flag; an integer
  flag is at most ``INT_MAX`` (2**63 - 1, the core's 64-bit counts) unless a check gives its own bound
  (cache sizes: ``MAX_BLOCKS``).
- ``check_output`` / ``check_output_dir`` / ``check_plot``: before the work starts, refuse an output
  path that cannot be written (or a figure without matplotlib), naming the flag.
- ``atomic_path`` / ``atomic_paths`` / ``atomic_output`` (from ``wakman.traces.io``): every writer
  writes through one of them: all or nothing (``atomic_paths``: several outputs together), the user's
  umask, partial files removed on Ctrl-C, devices written in place.
- ``open_trace``: read a trace by the shared ``--format/--block-size/--rate/--seed`` options; a
  trace without requests is an error naming the file.
- ``progress_bars`` and ``counted``: progress (on ``err_console`` when stdout is machine-read).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from rich.progress import Progress

    from wakman.adaptive.config import AdaptiveConfig

from wakman.experiments.plots import FORMATS as PLOT_FORMATS
from wakman.policies import MAX_CAPACITY
from wakman.traces import TraceFormatError, detect_format, read_trace
from wakman.traces.formats import check_format
from wakman.traces.io import atomic_output, atomic_path, atomic_paths
from wakman.traces.model import MAX_BLOCK_SIZE, Request

# Where stdout is a file or a pipe, rich takes its width from a terminal on stdin or stderr, or 80
# columns without one, and cuts tables to it; keep every value there instead (240 columns). A
# terminal on stdout, or COLUMNS when set, still decides the width of tables; a line of text is
# never folded (soft_wrap), so a long file name stays whole on one line for grep and the shell.
console = Console(width=None if os.isatty(1) or "COLUMNS" in os.environ else 240, soft_wrap=True)
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

__all__ = [
    "INT_MAX",
    "MAX_BLOCKS",
    "atomic_output",
    "atomic_path",
    "atomic_paths",
    "can_plot",
    "check_numbers",
    "check_output",
    "check_output_dir",
    "check_plot",
    "cli_errors",
    "interrupted",
    "json_text",
    "open_trace",
    "parse_ints",
    "parse_names",
    "progress_bars",
]

PLOT_EXTRA = "pip install 'wakman[plot]'"
INT_MAX = 2**63 - 1  # the largest count (requests, tokens) the core's 64-bit integers hold
# the largest cache (blocks): the core's (its node slots are 32-bit), beyond any GPU's memory
MAX_BLOCKS = MAX_CAPACITY


def _shown(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def check_numbers(*checks: tuple[str, float | None, str] | tuple[str, float | None, str, float]) -> None:
    """Each ``(flag, value, rule)`` or ``(flag, value, rule, most)``, rule ``>N`` or ``>=N`` (``>0``,
    ``>=1``, ``>=0.001``): a value that breaks its rule, is not finite, or is above ``most`` (for an
    integer, by default ``INT_MAX``) is a ``ValueError`` naming the flag; ``None`` (flag not given)
    passes."""
    for flag, value, rule, *most in checks:
        if value is None:
            continue
        op = ">=" if rule.startswith(">=") else ">"
        least = float(rule[len(op) :])
        if not (isinstance(value, int) or math.isfinite(value)) or not (
            value >= least if op == ">=" else value > least
        ):
            raise ValueError(f"{flag} must be {op} {rule[len(op) :]}, got {_shown(value)}")
        bound = most[0] if most else INT_MAX if isinstance(value, int) else None
        if bound is not None and value > bound:
            raise ValueError(f"{flag} must be at most {_shown(bound)}, got {_shown(value)}")


def parse_ints(text: str, flag: str, minimum: int = 1, maximum: int = INT_MAX) -> list[int]:
    """A comma-separated list of integers in [``minimum``, ``maximum``] (at least one), or a
    ``ValueError`` naming the flag and the bad item."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ValueError(f"{flag} needs at least one integer, got {text!r}")
    values = []
    for item in items:
        try:
            value = int(item.replace("_", ""))
        except ValueError:
            raise ValueError(f"{flag}: {item!r} is not an integer") from None
        if value < minimum:
            raise ValueError(f"{flag}: {value} must be >= {minimum}")
        if value > maximum:
            raise ValueError(f"{flag}: {value} must be at most {maximum:,}")
        values.append(value)
    return values


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


def parse_names(text: str, flag: str, known: Iterable[str]) -> list[str]:
    """A comma-separated list of names from ``known`` (at least one; repeats dropped, order kept), or
    a ``ValueError`` naming the flag and the unknown name: checked before any work starts."""
    known = tuple(known)
    names = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not names:
        raise ValueError(f"{flag} needs at least one name, got {text!r}")
    for name in names:
        if name not in known:
            raise ValueError(f"{flag}: unknown name {name!r}; choose from {', '.join(known)}")
    return names


def _writable_dir(path: Path, flag: str, shown: Path) -> None:
    """``path`` (or its nearest existing parent, which will hold it) is a folder we can create in."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{flag} {shown}: {probe} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {shown}: cannot write in {probe} ({exc.strerror})") from None


def check_output(path: Path | None, flag: str) -> None:
    """Before the work: ``path`` can be written as a file (``atomic_path`` will write it), else a
    ``ValueError`` naming ``flag``. ``None`` (no output asked for) passes."""
    if path is None:
        return
    if path.is_dir():
        raise ValueError(f"{flag} {path}: is a folder, not a file")
    if path.exists() and not path.is_file():  # a device or FIFO: written in place
        if not os.access(path, os.W_OK):
            raise ValueError(f"{flag} {path}: not writable")
        return
    _writable_dir(path.parent, flag, path)


def can_plot() -> bool:
    """matplotlib (the ``plot`` extra) is installed: a spec look-up, nothing imported."""
    import importlib.util

    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        return False


def check_plot(path: Path | None, flag: str = "--plot") -> None:
    """Before the work: a figure can be drawn (matplotlib) and written to ``path`` (``check_output``)
    in the format its extension names (``wakman.experiments.plots.FORMATS``; none, or a device or
    FIFO: PNG)."""
    if path is None:
        return
    suffix = path.suffix.lower().lstrip(".")
    if suffix and suffix not in PLOT_FORMATS and not (path.exists() and not path.is_file()):
        raise ValueError(
            f"{flag} {path}: .{suffix} is not a figure format; end the name in "
            f"{', '.join('.' + f for f in PLOT_FORMATS)} (no extension: PNG)"
        )
    if not can_plot():
        raise ValueError(f"{flag} needs matplotlib: {PLOT_EXTRA}")
    check_output(path, flag)


def check_output_dir(path: Path | None, flag: str) -> None:
    """Before the work: ``path`` is, or can be made, a folder we can write files in."""
    if path is not None:
        _writable_dir(path, flag, path)


def interrupted(what: str = "nothing was written") -> NoReturn:
    """Ctrl-C: say so, and what was lost or kept, on stderr; exit 130 (the shell's code for it)."""
    err_console.print(f"[yellow]interrupted:[/yellow] {escape(what)}", highlight=False)
    sys.exit(130)


def open_trace(
    path: Path,
    fmt: str | None,
    block_size: int | None = None,
    rate: float | None = None,
    seed: int | None = None,
) -> Iterator[Request]:
    """Stream ``path``'s requests (format detected when ``fmt`` is None); the shared options are
    checked first, and a trace without requests is a ``ValueError`` naming the file."""
    check_numbers(
        ("--block-size", block_size, ">=1", MAX_BLOCK_SIZE), ("--rate", rate, ">0"), ("--seed", seed, ">=0")
    )
    check_format(fmt, "--format")
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
    return _not_empty(read_trace(path, name, **options), path)


def _not_empty(requests: Iterator[Request], path: Path) -> Iterator[Request]:
    empty = True
    for req in requests:
        empty = False
        yield req
    if empty:
        raise ValueError(f"{path}: the trace has no requests")


class HiddenProgress:
    """What ``progress_bars(disable=True)`` gives: the calls the commands make on a progress
    display (a context manager, ``add_task``, ``update``, ``advance``), each doing nothing, without
    loading rich's live display (about 0.01 s of a short command's start-up)."""

    def __enter__(self) -> HiddenProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: object, **kwargs: object) -> int:
        return 0

    def update(self, *args: object, **kwargs: object) -> None:
        return None

    def advance(self, *args: object, **kwargs: object) -> None:
        return None


def progress_bars(
    label: str = "{task.description}", to: Console = console, **options: object
) -> Progress | HiddenProgress:
    """The CLI's progress display: label, bar, done/total, elapsed time, on the shared console (or
    ``to``: ``err_console`` keeps stdout clean for machine-read output); ``disable=True`` (no
    terminal to draw on): a ``HiddenProgress``."""
    if options.get("disable"):
        return HiddenProgress()
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
    """``requests`` unchanged, counted on a task of ``progress`` (``total`` None: a stream)."""
    task = progress.add_task(description, total=total)
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


def _sigterm_handler(owner: int) -> Callable[[int, object], None]:
    """SIGTERM in process ``owner`` raises KeyboardInterrupt (handled as Ctrl-C); a worker process it
    forked, which inherits the handler, ends at once as by default."""

    def handler(signum: int, _frame: object) -> None:
        if os.getpid() == owner:
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    return handler


@contextmanager
def cli_errors(interrupted_note: str = "nothing was written") -> Iterator[None]:
    """Bad input becomes one clear line on stderr and exit code 2, never a traceback (a closed pipe
    on stdout ends the run quietly, as click does, exit code 1); Ctrl-C (and
    SIGTERM, in the main thread) becomes ``interrupted(interrupted_note)`` (exit 130; partial outputs
    are already removed by ``atomic_path``)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _sigterm_handler(os.getpid())) if main else None
    try:
        yield
    except KeyboardInterrupt:
        interrupted(interrupted_note)
    except BrokenPipeError:  # stdout's reader left (`| head`): click ends the run quietly
        raise
    except (TraceFormatError, ValueError, OSError) as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        sys.exit(2)
    finally:
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def session_mode(
    policy: str, sessions: bool, ends_after_s: float | None, ends_flag: str = "--session-ends-after-s"
) -> tuple[str | AdaptiveConfig, dict[str, Any]]:
    """What to run for ``--policy`` with ``--sessions`` and ``ends_flag`` (``ends_after_s``: seconds
    after a session's last request is done, None: no ends told): the policy (a preset with its
    chain-lru in session mode) and the simulation's session options; a ValueError naming the flag
    for a policy without a session mode."""
    from wakman.adaptive.config import ADAPTIVE_PRESETS, SESSION_POLICY

    check_numbers((ends_flag, ends_after_s, ">=0"))
    if not sessions:
        if ends_after_s is not None:
            raise ValueError(f"{ends_flag} needs --sessions (only session mode hears ends)")
        return policy, {}
    options: dict[str, Any] = {"session_ends_after_s": ends_after_s}
    if policy in ADAPTIVE_PRESETS:
        try:
            return ADAPTIVE_PRESETS[policy].with_sessions(), options
        except ValueError as exc:
            raise ValueError(f"--sessions: {exc}") from None
    if policy != SESSION_POLICY:
        raise ValueError(f"--sessions: {SESSION_POLICY} (or wakman-plus) has a session mode, not {policy}")
    return policy, {**options, "policy_params": {"sessions": True}}


def require_session_ids(trace: Path, requests: Iterable[Request]) -> None:
    """``--sessions`` on a trace whose requests carry no session id is a ValueError naming it."""
    if all(r.session_id is None for r in requests):
        raise ValueError(f"--sessions: {trace} has no session ids (a session_id per request)")
