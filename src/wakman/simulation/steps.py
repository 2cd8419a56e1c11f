"""Serve mode on a vLLM configuration (``VllmServer``): the engine's steps, as vLLM's V1 scheduler
runs them over its block pool (vLLM 0.32, 0.33 and 0.34 alike; no speculative decoding, connector or
encoder inputs; FCFS; chunked prefill on, ``long_prefill_token_threshold`` 0, no watermark).

Time moves by steps. The loop starts at the first arrival; before each step, the requests that have
arrived by then join the waiting queue's tail, and an engine with no unfinished request jumps to the
next arrival. A request generates ``max(output_tokens, 1)`` tokens; one whose prompt and outputs
exceed the pool's tokens (vLLM's ``max_model_len``) is rejected, never scheduled, and neither the
controller nor the policy hears of it. An accepted one is announced to the policy
(``on_request``) with its full prompt blocks and no output keys, as vLLM's plugin does. A step
takes ``step_s`` seconds plus ``1 / tokens_per_s`` per token it schedules (when set).

A step schedules at most ``max_num_batched_tokens`` tokens:

1. The running requests, in admission order. Each wants its tokens not yet computed (prompt tokens
   and the outputs sampled so far): the rest of its prompt (a chunk, cut to the budget left), or
   one token when decoding. It needs blocks for its computed tokens plus those; if the free blocks
   fall short, the most recently admitted running request is preempted (its blocks freed deepest
   first, its computed tokens forgotten, its outputs kept; it waits at the head of the queue) until
   they suffice, or until the request itself is the one preempted, which ends this part.
2. If nothing was preempted, the waiting requests, first come first served, while budget is left
   and fewer than ``max_num_seqs`` run. The head's tokens are its prompt and the outputs it sampled
   before a preemption. Its lookup finds the longest cached prefix of its full blocks (the
   first-miss rule; at most its tokens - 1, over prompt blocks with trace keys only for a fresh
   request; after a preemption, also the blocks past them it cached itself, whose keys only it has,
   and its outputs). It is admitted only if all its tokens fit: its
   blocks not hit plus its hit blocks that are free (touching takes them out of the free queue) at
   most the free blocks; otherwise the step admits no one else. Admission, in libCacheSim's order:
   each full block after the hit that no cached block holds is a policy miss, then the hits are
   touched (a policy hit, pinned), then the first chunk's blocks are allocated (evicting).

Before every allocation the policy hears the request's chain (``inserting_for`` its first block's
key, once its tokens fill a block: chain-lru's hint, given where vLLM's plugin gives it). Every
allocation caches the request's blocks that its computed tokens (after this step) fill, up to its
tokens: each becomes a cached copy under its key (a prompt block's trace key, then the trace's
output keys, then a key of its own: vLLM hashes the tokens the model generated; with
``cache_outputs`` False these last stay uncached), pinned by the request. After scheduling, each
request whose tokens are all computed samples one output token (its first: the time to first token,
at the step's end); one that reaches its output length frees its blocks deepest first and leaves.
Requests finish in scheduling order.

Counted as in ``serve`` (vLLM's ``PrefixCacheStats``): each request's first admission after the
warm-up (prompt tokens, hit tokens); admissions after a preemption are not. ``prefill_busy_s`` (the
saturation rule's busy time) is each step's duration times the share of its token budget scheduled
to measured requests that are not decoding (decoding: past its first token, computing one token, its last).

The loop is the core's (``core/steps.hpp``, ``wakman._core.serve_steps``), over the same pool and
controller hooks as ``serve``'s: a controller hears every accepted arrival and the start of every
step. A controller with a ``watch_decoding`` method gets a ``DecodedBlocks`` through it before the run:
what vLLM's request objects show a host as decoding goes on (the output blocks each request's sampled
tokens have filled so far), for the adaptive manager's log (``log_outputs``), as vLLM's plugin logs
them.
``tests/test_vllm_sched_loop.py`` holds it to vLLM's own scheduler, request by request.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from wakman import _core
from wakman.simulation.controller import Controller
from wakman.simulation.pool import BlockPool
from wakman.simulation.server import VllmServer
from wakman.traces.model import Request


def serve_steps(
    requests: Sequence[Request],
    pool: BlockPool,
    server: VllmServer,
    warmup_s: float,
    warmup_requests: int,
    interval_s: float,
    controller: Controller | None,
    belady_offsets: list[int] | None,
    sessions: list[int] | None = None,
    session_ends_after_s: float | None = None,
) -> dict[str, Any]:
    """Run the loop above; returns the core's figures (``serve.fill_result`` reads them).
    ``sessions`` / ``session_ends_after_s``: the session hints (``ServeSimulation``)."""
    sampled = None
    watch = getattr(controller, "watch_decoding", None)
    if watch is not None:
        sampled = np.zeros(len(requests), dtype=np.int64)
        watch(DecodedBlocks(requests, sampled))
    try:
        return _core.serve_steps(
            pool,
            requests,
            server.max_num_batched_tokens,
            server.max_num_seqs,
            float(server.step_s),
            1.0 / server.tokens_per_s if server.tokens_per_s else 0.0,
            float(warmup_s),
            warmup_requests,
            float(interval_s),
            controller,
            belady_offsets,
            server.cache_outputs,
            sampled,
            sessions,
            session_ends_after_s,
        )
    finally:
        if watch is not None:  # the views logged keep their own reference; no later run reads this one
            watch(None)


class DecodedBlocks:
    """The output blocks each request's sampled tokens have filled so far, as vLLM's growing
    ``request.block_hashes`` shows them to its plugin: blocks ``prompt // bs`` up to
    ``(prompt + sampled) // bs - 1`` of the request (vLLM hashes a block once its tokens exist, so the
    last may hold the final sampled token, whose KV is never computed or cached), keyed as the loop
    keys them (``_core.request_block_keys``: the trace's output keys, then keys of their own; with
    ``cache_outputs`` False the loop leaves the latter uncached, but a vLLM request still shows
    them). ``sampled`` (output tokens per request, trace order) is written by the loop as it runs;
    ``of(request)`` is a live view."""

    def __init__(self, requests: Sequence[Request], sampled: np.ndarray) -> None:
        self._requests = requests
        self._index = {id(r): i for i, r in enumerate(requests)}
        if len(self._index) != len(requests):
            raise ValueError("serve_steps: the same Request object appears twice in the trace")
        self.sampled = sampled

    def of(self, request: Request) -> DecodedView:
        """The view of ``request`` (one of the run's own request objects)."""
        return DecodedView(self, self._index[id(request)])


class DecodedView:
    """One request's decoded blocks so far (``DecodedBlocks``); read when iterated."""

    __slots__ = ("_blocks", "_index")

    def __init__(self, blocks: DecodedBlocks, index: int) -> None:
        self._blocks, self._index = blocks, index

    def __len__(self) -> int:
        r = self._blocks._requests[self._index]
        filled = (r.prompt_tokens + int(self._blocks.sampled[self._index])) // r.block_size
        return max(0, filled - r.prompt_tokens // r.block_size)

    def __iter__(self) -> Iterator[int]:
        r = self._blocks._requests[self._index]
        first = r.prompt_tokens // r.block_size
        keys = _core.request_block_keys(
            r.block_keys, r.full_blocks, r.output_keys, self._index, first, len(self)
        )
        return iter(keys.tolist())
