"""A live manager's decision replays, one at a time, in a background thread or inline.

The vLLM hosts (the GPU pool's runtime, the CPU offload tier) open a decision on their own thread
(``AdaptiveManager.open_decision``: a snapshot of its window), hand it to ``start``, and apply the
outcome there too (``close_decision`` and the switch: the host's thread is the only one that
touches the live policy). In ``thread`` mode the replay runs in one worker thread (the core's replay
loops run without the GIL) and ``ended`` hands its outcome back once it has ended; inline, ``start``
returns it at once (reproducible runs and tests).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from wakman.adaptive.estimator import LoggedRequest
from wakman.adaptive.manager import PendingDecision, timed_replay

# (the decision, its rates or None, the error or None, the replay's wall seconds)
Outcome = tuple[PendingDecision, dict[str, float] | None, str | None, float]
Replay = Callable[[list[LoggedRequest], int], dict[str, float]]


class DecisionReplays:
    """At most one replay running (``running``); ``drop`` forgets it (its outcome is never handed
    back: the host cleared its manager)."""

    def __init__(self, in_thread: bool, thread_name: str) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=thread_name) if in_thread else None
        self._running: tuple[PendingDecision, Future] | None = None

    @property
    def running(self) -> bool:
        return self._running is not None

    def start(self, pending: PendingDecision, replay: Replay) -> Outcome | None:
        """Replay ``pending`` with ``replay``: inline, the outcome; in the thread, None (``ended``
        hands it back). Only when none is ``running``."""
        assert self._running is None, "one replay at a time"
        if self._executor is None:
            return (pending, *timed_replay(replay, pending))
        self._running = (pending, self._executor.submit(timed_replay, replay, pending))
        return None

    def ended(self, wait: bool = False) -> Outcome | None:
        """The running replay's outcome once it has ended (``wait``: waiting for it), else None."""
        if self._running is None or not (wait or self._running[1].done()):
            return None
        pending, future = self._running
        self._running = None
        return (pending, *future.result())

    def drop(self) -> None:
        self._running = None

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
