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
        An optional method, ``watch_decoding(view)``, is called by the step loop
        (``wakman.simulation.steps``) before the run with a ``DecodedBlocks`` (each request's
        decoded blocks so far, as vLLM shows them) and after it with None."""

    def cache_decide(self, now: float, capacity: int) -> str | None:
        """Cache mode, after ``on_arrival`` of the request that arrived at ``now``: the policy to
        switch the live cache (of ``capacity`` blocks) to before that request is replayed, or None.
        The decisions may read the requests, never the live cache: cache mode takes them all first,
        then replays the live cache with each switch at its request (the same run as deciding in
        line, with one policy's tables in the CPU's caches at a time)."""

    def cache_switch(self, live: EvictionPolicy, name: str) -> EvictionPolicy:
        """Cache mode: a ``name`` policy that took ``live``'s blocks over (``handover``)."""

    def report(self) -> dict[str, Any]:
        """Figures merged into ``SimResult.extra`` at the end of the run."""
