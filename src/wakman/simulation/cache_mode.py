"""Cache mode: no time, no pinning. Each request goes through the policy as a plain cache, vLLM's
way (``wakman.drivers.replay_request``): its hit prefix by the first-miss rule (at most prompt - 1
tokens can hit), then every full prompt block and every output block accessed (inserted on a
miss), deepest block first, as vLLM releases a request's blocks, so the chain's root ends up most
recent and is evicted last. This is the shadow replay of the adaptive manager and what other
KV-cache simulators compute."""

from __future__ import annotations

from collections.abc import Sequence

from wakman.drivers import StrandedCount, replay_request, session_ends, session_key
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
    session_ends_after_s: float | None = None,
) -> SimResult:
    """``controller.on_arrival`` sees each request, then ``controller.cache_decide`` may name a
    policy to switch the live cache to before that request (the adaptive manager's decisions in
    cache mode). Those decisions read the requests only, so they are all taken first, in arrival
    order, and the live cache is replayed after them with each switch (``cache_switch``) at its
    request: the run an in-line loop gives, without the manager's shadows and the live cache taking
    turns in the CPU's caches. ``track_stranded``: count the stranded blocks at the end (one more
    walk over every chain). ``result.first_hit_tokens`` gets every request's hit tokens (arrival
    order, warm-up included), as serve mode's first admissions. ``session_ends_after_s``: the policy
    is told that each session has ended (``end_session``, ``wakman.drivers.session_ends``) that many
    seconds after its last request's arrival."""
    switches: dict[int, str] = {}  # request index -> the policy the live cache switches to before it
    if controller is not None:
        for index, req in enumerate(requests):
            controller.on_arrival(req.arrival_s, req)
            name = controller.cache_decide(req.arrival_s, policy.capacity)
            if name is not None:
                switches[index] = name
    misses = 0
    per_request = result.first_hit_tokens
    ends = session_ends(requests, session_ends_after_s) if session_ends_after_s is not None else []
    told = 0  # ends[:told] have been told
    for index, req in enumerate(requests):
        while told < len(ends) and ends[told][0] <= req.arrival_s and ends[told][1] < index:
            policy.end_session(session_key(ends[told][2]))
            told += 1
        if index in switches:
            assert controller is not None
            policy = controller.cache_switch(policy, switches[index])
        keys, bs = req.block_keys, req.block_size
        hits, accessed, access_hits = replay_request(
            policy, keys, req.prompt_tokens, bs, req.output_keys, req.arrival_s, req.session_id
        )
        misses += accessed - access_hits
        per_request.append(hits * bs)
        if req.arrival_s >= warmup_s and index >= warmup_requests:
            result.measured_requests += 1
            result.prompt_tokens += req.prompt_tokens
            result.hit_tokens += hits * bs
            result.block_lookups += len(keys)
            result.block_hits += hits
    result.requests = len(requests)
    result.evictions = max(0, misses - len(policy))
    if track_stranded and (result.evictions > 0 or controller is not None):
        # (with no eviction and no policy switch every accessed block is still resident: none stranded)
        result.stranded_blocks = count_stranded(requests, policy)
    return result


def count_stranded(requests: Sequence[Request], policy: EvictionPolicy) -> int:
    """Blocks resident in ``policy`` that no request's chain (full prompt blocks, then output blocks)
    reaches through resident blocks only: the first-miss rule can never hit them."""
    counter = StrandedCount()
    for req in requests:
        counter.walk(policy, req.block_keys, req.full_blocks, req.output_keys)
    return counter.count()
