"""Cache mode: no time, no pinning. Each request's prefix goes through the policy's shadow path
with vLLM's first-miss rule: the lookup walks the keys and stops at the first miss (at most
prompt - 1 tokens can hit); then every full prompt block and every output block is accessed
(inserted on a miss), deepest block first, as vLLM releases a request's blocks, so the chain's
root ends up most recent and is evicted last. This is the shadow replay of the adaptive manager
and what other KV-cache simulators compute."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from wakman.policies import EvictionPolicy
from wakman.simulation.pool import count_stranded
from wakman.simulation.results import SimResult
from wakman.traces.model import Request


def replay_prefixes(
    requests: Sequence[Request],
    policy: EvictionPolicy,
    result: SimResult,
    warmup_s: float = 0.0,
    warmup_requests: int = 0,
    track_stranded: bool = True,
    switcher: Callable[[float, Request, EvictionPolicy], EvictionPolicy] | None = None,
) -> SimResult:
    """``switcher(now, request, policy)``, called before each request, may return a new policy
    (the adaptive manager's decisions in cache mode)."""
    replay = policy.replay  # each policy's fast shadow loop
    parent: dict = {}
    misses = 0
    for index, req in enumerate(requests):
        if switcher is not None:
            new = switcher(req.arrival_s, req, policy)
            if new is not policy:
                policy, replay = new, new.replay
        keys, bs = req.block_keys, req.block_size
        limit, full = req.max_hit_blocks, req.full_blocks
        hits = 0
        while hits < limit and keys[hits] in policy:
            hits += 1
        chain = [*keys[:full], *req.output_keys]
        misses += len(chain) - replay(reversed(chain))
        if track_stranded:
            setdefault = parent.setdefault
            prev = chain[hits - 1] if hits else None
            for k in chain[hits:]:
                setdefault(k, prev)
                prev = k
        if req.arrival_s >= warmup_s and index >= warmup_requests:
            result.measured_requests += 1
            result.prompt_tokens += req.prompt_tokens
            result.hit_tokens += hits * bs
            result.block_lookups += len(keys)
            result.block_hits += hits
    result.requests = len(requests)
    result.evictions = max(0, misses - len(policy))
    if track_stranded:
        result.stranded_blocks = count_stranded(policy, parent)
    return result
