"""What the experiments' worker pools (sweep's grid, reproduce's tasks) share: workers leave Ctrl-C
to the parent, and a parent that is interrupted (Ctrl-C, or SIGTERM turned into one by the CLI) or
fails stops its workers at once instead of waiting for their runs."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
from collections.abc import Collection, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager


def worker_signals() -> None:
    """A worker's initializer: Ctrl-C is the parent's to handle (no traceback from each worker), and
    SIGTERM (the parent's ``terminate()``) ends the worker at once, as by default, even inside a long
    core call (a Python handler inherited from the parent would wait for the call to return). On
    Linux a parent that dies without a word (SIGKILL, the OOM killer) sends its workers SIGTERM
    too: they waited on the task queue forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> None:
    """SIGTERM this process when its parent dies (Linux's ``PR_SET_PDEATHSIG``; elsewhere nothing),
    and end it now if the parent died before the request."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # the parent is gone already
        os.kill(os.getpid(), signal.SIGTERM)


@contextmanager
def stopped_on_error(pools: Collection[ProcessPoolExecutor]) -> Iterator[None]:
    """Run the body that starts and feeds ``pools`` (a list, or a dict keyed by pool, that it may
    still add to: read on the way out). On any exception the pools' queued tasks are cancelled and
    the worker processes started inside are terminated, then the exception goes on; on a normal
    exit the pools shut down after their last task."""
    before = set(mp.active_children())
    try:
        yield
    except BaseException:
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        for worker in set(mp.active_children()) - before:
            worker.terminate()
        raise
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
