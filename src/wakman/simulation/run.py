"""``simulate``: one trace, one policy, one capacity, in serve or cache mode."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from wakman.policies import MAX_CAPACITY, POLICIES, EvictionPolicy, make_policy
from wakman.policies.belady import BeladyFuture
from wakman.simulation.cache_mode import replay_prefixes
from wakman.simulation.controller import Controller
from wakman.simulation.pool import BlockPool
from wakman.simulation.results import SimResult
from wakman.simulation.serve import ServeSimulation
from wakman.simulation.server import ServerModel, VllmServer
from wakman.traces.model import REQUEST_FIELDS, Request, validate_request

MODES = ("serve", "cache")
MAX_INTERVALS = 1_000_000  # a serve run's per-interval series: past this many rows it fills the memory


def belady_future(requests: Sequence[Request], mode: str = "serve") -> tuple[BeladyFuture, list[int]]:
    """Belady's future for ``requests`` in ``mode`` (every cacheable key, full prompt blocks then
    output blocks, in request order; reversed within a request in cache mode, its access order; with
    each access's next use) and each request's start offset in it (the last = its length): build it
    once and give it to ``simulate(..., future=...)`` at every capacity. 12 bytes an access."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return BeladyFuture.of_requests(list(requests), deepest_first=mode == "cache")


def upper_bound_blocks(requests: Sequence[Request]) -> int:
    """Enough blocks that nothing is ever evicted (the infinite ceiling's pool)."""
    return sum(-(-(r.prompt_tokens + r.output_tokens) // r.block_size) for r in requests) + 1


def simulate(
    requests: Sequence[Request],
    policy: str | EvictionPolicy,
    capacity_blocks: int,
    mode: str = "serve",
    server: ServerModel | VllmServer | None = None,
    warmup_s: float = 0.0,
    warmup_requests: int = 0,
    interval_s: float = 60.0,
    controller: Controller | None = None,
    policy_params: dict[str, Any] | None = None,
    track_stranded: bool = True,
    future: tuple[BeladyFuture, list[int]] | None = None,
    session_ends_after_s: float | None = None,
) -> SimResult:
    """Simulate ``requests`` (in arrival order). ``policy`` is a name from ``wakman.policies`` or a
    ready policy object; a ``controller`` (the adaptive manager, ``wakman.adaptive.simulate``)
    watches the run and may switch the policy. ``track_stranded`` False: cache mode leaves
    ``stranded_blocks`` at 0 and skips the walk over every chain that counts them (about a second
    on a 94 M-access trace). ``future``: Belady's, from ``belady_future(requests, mode)`` (built here
    when None; only ``belady`` reads it). ``session_ends_after_s``: tell the policy that each session
    has ended that many seconds after its last request is done (serve mode: finishes; cache mode:
    arrives, a request taking no time there), a what-if from the trace's hindsight: what a client
    that closes its sessions would give; only chain-lru built with ``sessions=True`` acts on it.
    Both modes pass each request's session id (``in_session``) where the trace has them."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if capacity_blocks < 1:
        raise ValueError(f"capacity must be >= 1 block, got {capacity_blocks}")
    requests = list(requests)
    _check_requests(requests)
    _check_window(requests, mode, warmup_s, warmup_requests, interval_s)
    started = time.perf_counter()
    offsets = None
    requested = capacity_blocks
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
        params = dict(policy_params or {})
        if policy == "belady":
            params["future"], offsets = future or belady_future(requests, mode)
            fits = len(offsets) == len(requests) + 1 and offsets[-1] == len(params["future"])
            if not fits or params["future"].deepest_first != (mode == "cache"):
                raise ValueError(f"future: not belady_future(requests, {mode!r}) of these requests")
        if policy == "infinite":
            # never full, whatever was asked (up to the core's largest cache)
            capacity_blocks = min(upper_bound_blocks(requests), MAX_CAPACITY)
        policy_obj = make_policy(policy, capacity_blocks, **params)
    else:
        if future is not None:
            raise ValueError("future: give the policy by name ('belady'); a ready policy has its own")
        if policy_params:
            raise ValueError("policy_params: give the policy by name; a ready policy was built with its own")
        if policy.capacity != capacity_blocks and policy.name != "infinite":
            raise ValueError(
                f"policy: a ready {policy.name} of {policy.capacity:,} blocks for a cache of "
                f"{capacity_blocks:,}: build it with the cache's capacity"
            )
        policy_obj = policy
    result = SimResult(policy=policy_obj.name, mode=mode, capacity_blocks=requested)
    if capacity_blocks != requested:
        result.extra["pool_blocks"] = capacity_blocks  # the infinite ceiling's unbounded pool
    if mode == "cache":
        replay_prefixes(
            requests,
            policy_obj,
            result,
            warmup_s,
            warmup_requests,
            track_stranded,
            controller=controller,
            session_ends_after_s=session_ends_after_s,
        )
    else:
        pool = BlockPool(capacity_blocks, policy_obj)
        ServeSimulation(
            requests,
            pool,
            server or ServerModel(),
            result,
            warmup_s,
            interval_s,
            controller,
            offsets,
            warmup_requests,
            session_ends_after_s,
        ).run()
    report = getattr(controller, "report", None)
    if report is not None:
        result.extra.update(report())
    result.wall_s = time.perf_counter() - started
    return result


def _check_window(
    requests: Sequence[Request], mode: str, warmup_s: float, warmup_requests: int, interval_s: float
) -> None:
    """The warm-up (``warmup_s`` >= 0 seconds, ``warmup_requests`` >= 0) and, in serve mode, the
    per-interval series' width: ``interval_s`` > 0 seconds, at most ``MAX_INTERVALS`` intervals over
    the arrivals (each interval holds a row of counts)."""
    if not (math.isfinite(warmup_s) and warmup_s >= 0):
        raise ValueError(f"warmup_s must be finite and >= 0 seconds, got {warmup_s!r}")
    if warmup_requests < 0:
        raise ValueError(f"warmup_requests must be >= 0, got {warmup_requests!r}")
    if mode == "serve":
        check_intervals(requests, interval_s)


def check_intervals(requests: Sequence[Request], interval_s: float, name: str = "interval_s") -> None:
    """A serve run's per-interval series: ``interval_s`` > 0 seconds and at most ``MAX_INTERVALS``
    intervals from the first arrival's to the last's (the series starts at the first); else a
    ``ValueError`` naming ``name``."""
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ValueError(f"{name} must be finite and > 0 seconds, got {interval_s!r}")
    span = requests[-1].arrival_s - requests[0].arrival_s if requests else 0.0
    if span / interval_s > MAX_INTERVALS:
        raise ValueError(
            f"{name} {interval_s:g} cuts the trace's {span:,.0f} s of arrivals into more than "
            f"{MAX_INTERVALS:,} intervals: give at least {span / MAX_INTERVALS:.3g} seconds"
        )


def _check_requests(requests: Sequence[Request]) -> None:
    """The readers' rules (``validate_request``) for requests built by hand: arrival times finite,
    >= 0 and non-decreasing (the serve loops' interval series starts at 0 and a NaN or a step back
    never ends), a prompt token at least, outputs >= 0, a block size, no more keys than blocks (fewer:
    the other tokens are misses), one block size."""
    previous, block_size = 0.0, None
    for index, req in enumerate(requests):
        where = f"request {index}"
        validate_request(req, where, 0, previous, REQUEST_FIELDS, trace_block_size=block_size)
        previous, block_size = req.arrival_s, req.block_size
