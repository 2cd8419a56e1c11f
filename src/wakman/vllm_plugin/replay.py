"""Replay a trace through a real in-process vLLM engine and read vLLM's own prefix-cache counters.

Token ids come from the block keys: block ``i`` of a prompt gets ``block_size`` pseudo-random ids
seeded by ``block_keys[i]``, so equal keys give equal tokens and vLLM's chained hashes match exactly
where the trace's keys do. A prompt's tokens past its full blocks come from its partial key if the
trace has one, else from a per-request seed (never shared). Generated tokens come from the model:
a trace's ``output_keys`` cannot be honoured (``as_engine_serves``: each generated block gets a
fresh key, as ``wakman simulate --fresh-outputs`` gives it), and are reported as ``output_keys_ignored``.

Time is compressed on a virtual clock: each engine step advances it by ``step_s`` (default 1/40 s,
the simulator's decode rate), requests enter when the clock passes their arrival time, and an idle
engine jumps to the next arrival. Requests carry that clock as their ``arrival_time`` and the
adaptive manager runs on it, so ``WAKMAN_INTERVAL_S`` is in trace seconds. The run is deterministic
with ``WAKMAN_REPLAY=inline`` (the default here).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wakman.simulation.server import VllmServer
from wakman.traces.model import Request, as_engine_serves, key_list
from wakman.vllm_plugin.engine import (
    TINY_VOCAB,
    build_llm,
    engine_core,
    prefix_cache_counters,
    shutdown_llm,
    step_budget,
)
from wakman.vllm_plugin.sessions import END_MARK

# WAKMAN_* defaults of a replay, where the environment does not set them: decisions in the step loop
REPLAY_DEFAULTS = {"WAKMAN_REPLAY": "inline"}
FIRST_TOKEN = 3  # ids 0-2 are left to special tokens


def with_replay_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with ``REPLAY_DEFAULTS`` where it leaves them unset (or set but blank, which the
    settings read as unset)."""
    return {**env, **{k: v for k, v in REPLAY_DEFAULTS.items() if not env.get(k, "").strip()}}


class TokenBuilder:
    """Deterministic prompt token ids from block keys, memoised per key as 32-bit arrays (4 bytes a
    token: as Python lists they took 16.9 KB a 512-token block)."""

    def __init__(self, vocab: int = TINY_VOCAB) -> None:
        self.vocab = vocab
        self._blocks: dict[tuple[Any, int], np.ndarray] = {}

    def block(self, key: Any, size: int) -> np.ndarray:
        memo = self._blocks.get((key, size))
        if memo is None:
            seed = hash(key) & 0xFFFF_FFFF_FFFF_FFFF
            memo = np.random.default_rng(seed).integers(FIRST_TOKEN, self.vocab, size).astype(np.int32)
            self._blocks[(key, size)] = memo
        return memo

    def prompt(self, req: Request, index: int) -> list[int]:
        bs, full = req.block_size, req.full_blocks
        keys = key_list(req.block_keys)  # Python ints: the seeds and the memo's keys
        parts = [self.block(key, bs) for key in keys[:full]]
        rest = req.prompt_tokens - full * bs
        if rest > 0:
            if len(keys) > full:
                parts.append(self.block(keys[full], bs)[:rest])
            else:
                rng = np.random.default_rng((1 << 62) + index)
                parts.append(rng.integers(FIRST_TOKEN, self.vocab, rest))
        return np.concatenate(parts).tolist() if parts else []


@dataclass
class ReplayResult:
    policy: str
    capacity_blocks: int
    block_size: int
    requests: int
    rejected: int
    hit_tokens: int
    prompt_tokens: int
    preemptions: int
    steps: int
    virtual_s: float
    wall_s: float
    output_keys_ignored: bool
    max_output_tokens: int | None = None  # the cap on each request's output (tokens), if any
    server: VllmServer = field(default_factory=VllmServer)
    adaptive: dict[str, Any] | None = None
    # each request's prefix-cache hit tokens as vLLM reports them (RequestOutput.num_cached_tokens,
    # its first prefill), in trace order; -1 for a rejected request
    first_hit_tokens: list[int] = field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_flat_dict(self, per_request: bool = False) -> dict[str, Any]:
        """The keys ``wakman simulate --json`` uses, plus the engine's own counters; ``per_request``
        adds each request's ``first_hit_tokens``."""
        out: dict[str, Any] = {
            "policy": self.policy,
            "mode": "vllm",
            "capacity_blocks": self.capacity_blocks,
            "hit_rate": self.hit_rate,
            "requests": self.requests,
            "measured_requests": self.requests - self.rejected,
            "prompt_tokens": self.prompt_tokens,
            "hit_tokens": self.hit_tokens,
            "preemptions": self.preemptions,
            "rejected": self.rejected,
            "wall_s": self.wall_s,
            "vllm:prefix_cache_hits": self.hit_tokens,
            "vllm:prefix_cache_queries": self.prompt_tokens,
            "block_size": self.block_size,
            "engine_steps": self.steps,
            "virtual_s": self.virtual_s,
            "output_keys_ignored": self.output_keys_ignored,
            "max_output_tokens": self.max_output_tokens,
            # the engine's scheduling settings: `wakman simulate --server-model` reads them back
            "server_model": self.server.as_dict(),
        }
        if self.adaptive:
            out.update(self.adaptive)
        if per_request:
            out["first_hit_tokens"] = self.first_hit_tokens
        return out


def replay(
    requests: Sequence[Request],
    policy: str | None,
    capacity_blocks: int,
    block_size: int | None = None,
    step_s: float = 1 / 40,
    max_output_tokens: int | None = None,
    max_num_seqs: int = 64,
    max_num_batched_tokens: int = 4096,
    after_step: Callable[[Any], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    llm: Any = None,
    sessions: bool = False,
    session_ends: bool = False,
) -> ReplayResult:
    """Drive an in-process engine with ``requests`` in arrival order; ``policy=None`` is stock vLLM.

    ``sessions``: each request goes to the engine with its trace ``session_id`` (vLLM's
    ``session_id``) and the engine runs with ``WAKMAN_SESSIONS=1``; ``session_ends`` (with it): each
    session's last request in the trace carries the client's end mark (``vllm_xargs`` ``session_end``,
    ``vllm_plugin.sessions``), as from a client that closes its sessions.

    ``after_step(scheduler)`` runs after every engine step (the soak test checks invariants there).
    Pass ``llm`` to reuse an engine built by ``build_llm`` with the same settings; the caller keeps
    it. An engine built here is shut down before this returns, so what vLLM logs at its shutdown
    comes while the caller still routes the engine's output (``wakman replay --json`` keeps stdout
    for its JSON alone), not later at the process's exit."""
    if not requests:
        raise ValueError("the trace has no requests")
    trace_bs = requests[0].block_size
    block_size = block_size or trace_bs
    if any(r.block_size != block_size for r in requests):
        raise ValueError(f"the trace's block size ({trace_bs}) differs from the engine's ({block_size})")
    if step_s <= 0:
        raise ValueError("step_s must be > 0 seconds")
    if session_ends and not sessions:
        raise ValueError("session_ends needs sessions")
    output_keys_ignored = any(len(r.output_keys) for r in requests)
    last = {r.session_id: i for i, r in enumerate(requests) if r.session_id is not None}
    marked = set(last.values()) if session_ends else set()  # as a client that closes its sessions
    requests = as_engine_serves(requests, max_output_tokens=max_output_tokens)
    os.environ.update(with_replay_defaults(os.environ))
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    longest = max(r.prompt_tokens + max(1, r.output_tokens) for r in requests)

    def build() -> Any:
        return build_llm(
            capacity_blocks,
            block_size,
            max_model_len=longest,
            policy=policy,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            sessions=sessions and policy is not None,
        )

    with _engine(llm, build) as llm:
        engine = llm.llm_engine
        scheduler = engine_core(llm).scheduler
        runtime = getattr(scheduler, "wakman", None)
        clock = {"t": requests[0].arrival_s}
        if runtime is not None:
            runtime.use_clock(lambda: clock["t"])  # due times in trace seconds, as the simulator's
        max_len = scheduler.vllm_config.model_config.max_model_len
        hits0, queries0 = prefix_cache_counters(llm)
        preempt0 = _preemptions(llm)
        tokens = TokenBuilder()
        began = time.perf_counter()
        n, i, rejected, steps = len(requests), 0, 0, 0
        first_hits = [-1] * n
        finished = 0  # requests the engine finished
        while i < n or engine.has_unfinished_requests():
            if not engine.has_unfinished_requests() and i < n:
                clock["t"] = max(clock["t"], requests[i].arrival_s)
            while i < n and requests[i].arrival_s <= clock["t"]:
                req = requests[i]
                out = max(1, req.output_tokens)
                if req.prompt_tokens + out > max_len:
                    rejected += 1
                else:
                    params = SamplingParams(
                        max_tokens=out,
                        ignore_eos=True,
                        detokenize=False,
                        temperature=0.0,
                        extra_args={END_MARK: True} if i in marked else None,
                    )
                    prompt = TokensPrompt(prompt_token_ids=tokens.prompt(req, i))
                    session = {"session_id": req.session_id} if sessions and req.session_id else {}
                    engine.add_request(str(i), prompt, params, arrival_time=clock["t"], **session)
                i += 1
            for output in engine.step():
                if output.finished:
                    finished += 1
                    if output.num_cached_tokens is not None:
                        first_hits[int(output.request_id)] = output.num_cached_tokens
            if progress is not None:
                progress(finished + rejected, n)  # requests done, not sent: the engine may lag
            steps += 1
            clock["t"] += step_s
            if after_step is not None:
                after_step(scheduler)
        wall = time.perf_counter() - began
        if runtime is not None:
            runtime.drain()
        hits, queries = prefix_cache_counters(llm)
        adaptive = None
        if runtime is not None and runtime.manager is not None:
            adaptive = runtime.manager.report()
        return ReplayResult(
            policy=policy or "stock",
            capacity_blocks=capacity_blocks,
            block_size=block_size,
            requests=n,
            rejected=rejected,
            hit_tokens=hits - hits0,
            prompt_tokens=queries - queries0,
            preemptions=_preemptions(llm) - preempt0,
            steps=steps,
            virtual_s=clock["t"] - requests[0].arrival_s,
            wall_s=wall,
            output_keys_ignored=output_keys_ignored,
            max_output_tokens=max_output_tokens,
            # the settings the engine ran with (its budget raised to one block), for the simulator
            server=VllmServer(step_budget(max_num_batched_tokens, block_size), max_num_seqs, step_s),
            adaptive=adaptive,
            first_hit_tokens=first_hits,
        )


@contextmanager
def _engine(llm: Any, build: Callable[[], Any]) -> Iterator[Any]:
    """``llm`` as given (its owner shuts it down), or one ``build()`` makes, shut down on exit."""
    if llm is not None:
        yield llm
        return
    built = build()
    try:
        yield built
    finally:
        shutdown_llm(built)


def _preemptions(llm: Any) -> int:
    return int(sum(m.value for m in llm.get_metrics() if m.name == "vllm:num_preemptions"))
