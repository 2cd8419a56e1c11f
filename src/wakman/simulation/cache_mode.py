"""Cache mode: no time, no pinning. Each request goes through the policy as a plain cache, vLLM's
way (``wakman.drivers.replay_request``): its hit prefix by the first-miss rule (at most prompt - 1
tokens can hit), then every full prompt block and every output block accessed (inserted on a
miss), deepest block first, as vLLM releases a request's blocks, so the chain's root ends up most
recent and is evicted last. This is the shadow replay of the adaptive manager and what other
KV-cache simulators compute."""

from __future__ import annotations

from collections.abc import Sequence

from wakman.drivers import ChainParents, replay_request
from wakman.policies import EvictionPolicy
from wakman.simulation.controller import Controller
from wakman.simulation.results import SimResult
from wakman.traces.model import Request


def replay_prefixes(
    requests: Sequence[Request],
    policy: EvictionPolicy,
    result: SimResult,
    warmup_s: float = 0.0,
    warmup_requests: int = 0,
    track_stranded: bool = True,
    controller: Controller | None = None,
) -> SimResult:
    """``controller.on_arrival`` sees each request before it is replayed, and its ``cache_policy``
    may then return a new live policy (the adaptive manager's decisions in cache mode)."""
    parents = ChainParents() if track_stranded else None
    misses = 0
    for index, req in enumerate(requests):
        if controller is not None:
            controller.on_arrival(req.arrival_s, req)
            policy = controller.cache_policy(req.arrival_s, policy)
        keys, bs = req.block_keys, req.block_size
        hits, accessed, access_hits = replay_request(
            policy, keys, req.prompt_tokens, bs, req.output_keys, parents
        )
        misses += accessed - access_hits
        if req.arrival_s >= warmup_s and index >= warmup_requests:
            result.measured_requests += 1
            result.prompt_tokens += req.prompt_tokens
            result.hit_tokens += hits * bs
            result.block_lookups += len(keys)
            result.block_hits += hits
    result.requests = len(requests)
    result.evictions = max(0, misses - len(policy))
    if parents is not None:
        result.stranded_blocks = parents.count_stranded(policy)
    return result
