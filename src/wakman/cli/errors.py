"""How every command ends on bad input or an interrupt: wrap a command's whole body in
``cli_errors(interrupted_note)``. Bad input (``ValueError``, ``OSError``, ``TraceFormatError``) becomes
one line on stderr and exit code 2; running out of memory one line and exit code 1; Ctrl-C says
"interrupted: <what was lost or kept>" and exits 130 (``interrupted()`` does that by hand), and so
does SIGTERM."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

from rich.markup import escape

from wakman.cli.console import err_console
from wakman.traces import TraceFormatError


def interrupted(what: str = "nothing was written") -> NoReturn:
    """Ctrl-C: say so, and what was lost or kept, on stderr; exit 130 (the shell's code for it)."""
    err_console.print(f"[yellow]interrupted:[/yellow] {escape(what)}", highlight=False)
    sys.exit(130)


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
    except MemoryError:  # one line too, not a traceback; exit 1: the input may be fine elsewhere
        err_console.print(
            f"[red]error:[/red] out of memory: this run needs more than the machine has; {interrupted_note}",
            highlight=False,
        )
        sys.exit(1)
    finally:
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
