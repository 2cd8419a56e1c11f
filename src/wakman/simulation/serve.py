"""Serve mode: a discrete-event simulation of one vLLM-like server over a trace.

Per request: arrival -> FCFS admission (lookup, pin hits, allocate and cache the prompt's full
blocks: ``BlockPool``'s admission, misses before evictions; a short-keyed prompt's full blocks past
its keys are cached under keys no other request has, as vLLM hashes every full block; a re-admission
may hit those) -> prefill on the single lane -> decode, one block event each time the computed
tokens fill a block (cache it with its key, allocate the next; a block past the trace's output keys
gets a key no other request shares, as vLLM hashes the tokens the model generated: it takes cache
room and is never hit; ``ServerModel.cache_outputs``; when none is free, preempt the most recently
admitted request, as vLLM does, and re-queue it first; unlike vLLM, which keeps its sampled outputs,
it restarts from its prompt, but, as vLLM's victim must fit the tokens it sampled, it is re-admitted
only once as many blocks are free as it held, plus the one it was waiting for if it preempted
itself; preempted before its first admission's prefill ended it gives the lane back what is undone
and gets its first token after its next admission's prefill) -> finish: release blocks deepest
first. A request whose prompt + output tokens exceed the pool's is rejected at its arrival (vLLM's
max_model_len; the step loop's rule): it never waits, and neither the controller nor the policy
hears of it. Times come from the ``ServerModel``'s formulas. Hit figures count first admissions of
requests arriving after the warm-up; re-admissions after preemption are counted apart (as vLLM's
PrefixCacheStats does), and the per-interval series counts first admissions only. Each event
integrates the free blocks over time (per interval of ``interval_s`` seconds and overall) and then
calls the controller's ``on_time(now, pool)``; each arrival calls ``on_arrival(now, request)``
first. The run also reports whether the modelled server kept up (``server.saturation``).

The loop itself is the core's (``core/serve.hpp``, ``wakman._core.serve``): one pass over the
requests' keys (lists of ints or numpy uint64 arrays), the pool's per-request calls inlined, the
controller reached from C++. Given a vLLM configuration (``VllmServer``) instead of a
``ServerModel``, the run goes step by step as vLLM's scheduler does (``wakman.simulation.steps``).
"""

from __future__ import annotations

from collections.abc import Sequence

from wakman import _core
from wakman.drivers import session_keys
from wakman.simulation.controller import Controller
from wakman.simulation.pool import BlockPool
from wakman.simulation.results import IntervalStats, SimResult
from wakman.simulation.server import ServerModel, VllmServer, saturation
from wakman.simulation.steps import serve_steps
from wakman.traces.model import Request


class ServeSimulation:
    def __init__(
        self,
        requests: Sequence[Request],
        pool: BlockPool,
        server: ServerModel | VllmServer,
        result: SimResult,
        warmup_s: float = 0.0,
        interval_s: float = 60.0,
        controller: Controller | None = None,
        belady_offsets: list[int] | None = None,
        warmup_requests: int = 0,
        session_ends_after_s: float | None = None,
    ) -> None:
        self.requests, self.pool, self.server, self.result = requests, pool, server, result
        self.warmup_s, self.interval_s, self.controller = warmup_s, interval_s, controller
        self.belady_offsets = belady_offsets  # each request's start in Belady's future, then the end
        self.warmup_requests = warmup_requests
        # the session hints, where the trace has session ids: in_session before each arrival's
        # on_request, and each session's end told session_ends_after_s after its last-arriving
        # request is done (only chain-lru's session mode acts on them, also after a switch to it)
        self.sessions = session_keys(requests)
        self.session_ends_after_s = session_ends_after_s

    def run(self) -> SimResult:
        server, pool = self.server, self.pool
        if isinstance(server, VllmServer):
            out = serve_steps(
                self.requests,
                pool,
                server,
                self.warmup_s,
                self.warmup_requests,
                self.interval_s,
                self.controller,
                self.belady_offsets,
                self.sessions,
                self.session_ends_after_s,
            )
        else:
            out = _core.serve(
                pool,
                self.requests,
                float(server.prefill_tokens_per_s),
                float(server.prefill_overhead_s),
                float(server.decode_tokens_per_s),
                server.max_running,
                float(self.warmup_s),
                self.warmup_requests,
                float(self.interval_s),
                self.controller,
                self.belady_offsets,
                server.cache_outputs,
                self.sessions,
                self.session_ends_after_s,
            )
        return fill_result(self.result, out, pool, len(self.requests), isinstance(server, VllmServer))


def fill_result(
    res: SimResult, out: dict, pool: BlockPool, requests: int, vllm_steps: bool = False
) -> SimResult:
    """Add a loop's figures (``_core.serve`` or ``_core.serve_steps``: ``vllm_steps``) to ``res``."""
    for name in ("measured_requests", "prompt_tokens", "hit_tokens", "block_lookups", "block_hits"):
        setattr(res, name, getattr(res, name) + out[name])
    res.preemptions += out["preemptions"]
    res.rejected += out["rejected"]
    res.queueing_delays_s.extend(out["queueing_delays_s"])
    res.ttfts_s.extend(out["ttfts_s"])
    res.first_hit_tokens.extend(out["first_hit_tokens"])
    res.intervals.extend(
        IntervalStats(
            start_s=start,
            admissions=admissions,
            prompt_tokens=prompt,
            hit_tokens=hit,
            evictions=evictions,
            free_block_seconds=free_s,
            seconds=seconds,
            policy=policy,
        )
        for start, admissions, prompt, hit, evictions, free_s, seconds, policy in out["intervals"]
    )
    res.requests = requests
    span = out["now"] - (out["t0"] or 0.0)
    res.mean_free_blocks = out["free_area"] / span if span > 0 else float(pool.free)
    res.saturation = saturation(
        out["measured_arrivals_s"],
        out["queueing_delays_s"],
        out["prefill_busy_s"],
        out["backlog_at_last_arrival"],
        vllm_steps,
    )
    res.evictions = pool.evictions
    res.stranded_blocks = pool.stranded()
    return res
