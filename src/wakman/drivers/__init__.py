"""Drivers of the policy protocol that work on requests: vLLM's first-miss hit rule and a request's
replay through a plain cache. Both run in the compiled core (``core/prefix.hpp``, and the shared
driver's ``Policy::replay_request`` in ``core/driver.hpp``); every caller
(cache mode, the adaptive manager's shadows, trace statistics, the serve-mode pool) uses these.

The rule: a lookup walks a request's block keys in prefix order and stops at the first key that is
not cached; at most ``hit_limit`` blocks can hit (``wakman.traces.model``: full prompt blocks, at
most ``prompt_tokens - 1`` tokens; ``Request.max_hit_blocks``).
"""

from __future__ import annotations

from collections.abc import Sequence

from wakman import _core
from wakman.policies import EvictionPolicy
from wakman.traces.model import Request, full_blocks, hit_limit, session_key

cached_prefix = _core.cached_prefix
StrandedCount = _core.StrandedCount


def session_keys(requests: Sequence[Request]) -> list[int] | None:
    """Each request's session key (0 where it has no session id), or None when none has one: the
    serve loops' session hints (``in_session`` before each arrival's ``on_request``)."""
    if all(r.session_id is None for r in requests):
        return None
    return [0 if r.session_id is None else session_key(r.session_id) for r in requests]


def session_ends(requests: Sequence[Request], after_s: float) -> list[tuple[float, int, str]]:
    """Each session's end as cache mode tells it (``end_session``), in the order told: (when in
    seconds: its last request's arrival + ``after_s``, the index of that request, the session id);
    a request takes no time in cache mode, so that is ``after_s`` after the session's last request
    is done (the serve loops count from its finish). The trace knows each end after the fact; a
    live cache would hear it from a client that closes its sessions. An end is told before the
    first later request that arrives at or after its time (never before the session's last
    request); requests without a session id have none."""
    if not after_s >= 0:
        raise ValueError(f"session_ends_after_s must be >= 0 seconds, got {after_s}")
    last = {req.session_id: index for index, req in enumerate(requests) if req.session_id is not None}
    return sorted((requests[index].arrival_s + after_s, index, sid) for sid, index in last.items())


def replay_request(
    policy: EvictionPolicy,
    keys: Sequence[int],
    prompt_tokens: int,
    block_size: int,
    output_keys: Sequence[int] = (),
    arrival_s: float = 0.0,
    session_id: str | None = None,
) -> tuple[int, int, int]:
    """One request through ``policy`` as a plain cache, vLLM's way: the policy hears of the request
    (``in_session`` where it has a session id and the policy learns from requests, then ``on_request``,
    at ``arrival_s`` seconds), then its hit prefix by the first-miss rule, then its full prompt blocks
    and ``output_keys`` accessed deepest first. Returns (hit blocks, blocks accessed, accesses that
    hit)."""
    n = len(keys)
    if session_id is not None and policy.learns_from_requests:
        policy.in_session(session_key(session_id))
    return _core.replay_request(
        policy,
        keys,
        hit_limit(n, prompt_tokens, block_size),
        full_blocks(n, prompt_tokens, block_size),
        output_keys,
        arrival_s,
    )


__all__ = [
    "StrandedCount",
    "cached_prefix",
    "full_blocks",
    "hit_limit",
    "replay_request",
    "session_ends",
    "session_key",
    "session_keys",
]
