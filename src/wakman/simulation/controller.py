"""The hook through which an adaptive manager watches a simulation and switches its policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from wakman.policies import EvictionPolicy
from wakman.traces.model import Request

if TYPE_CHECKING:
    from wakman.simulation.pool import BlockPool


class Controller(Protocol):
    def on_arrival(self, now: float, request: Request) -> None:
        """A request arrived (its arrival time and block keys are all an estimator may log)."""

    def on_time(self, now: float, pool: BlockPool) -> None:
        """Serve mode: simulated time reached ``now`` (seconds); the pool may be sampled or its
        policy switched (``pool.replace_policy``). Two optional attributes spare the loop a call
        into Python per event: ``free_log`` (a ``wakman._core.FreeBlockLog``), which the loop
        samples with the pool's free blocks at every event before this call, and ``wake_s``
        (seconds, read again after each call): this is called only at events at or after it.
        A third, ``decoded_blocks``, is set by the step loop (``wakman.simulation.steps``) before
        the run to a ``DecodedBlocks``: each request's decoded blocks so far, as vLLM shows them."""

    def cache_policy(self, now: float, live: EvictionPolicy) -> EvictionPolicy:
        """Cache mode: the policy to replay the request that arrived at ``now`` with (``live`` or a
        new one that took ``live``'s blocks over)."""

    def report(self) -> dict[str, Any]:
        """Figures merged into ``SimResult.extra`` at the end of the run."""
