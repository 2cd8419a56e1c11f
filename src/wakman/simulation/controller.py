"""The hook through which an adaptive manager watches a simulation and switches its policy."""

from __future__ import annotations

from typing import Protocol

from wakman.simulation.pool import BlockPool
from wakman.traces.model import Request


class Controller(Protocol):
    def on_arrival(self, now: float, request: Request) -> None:
        """A request arrived (its arrival time and block keys are all an estimator may log)."""

    def on_time(self, now: float, pool: BlockPool) -> None:
        """Simulated time reached ``now`` (seconds); the pool may be sampled or its policy switched."""
