"""``simulate`` with the adaptive policies: a static policy, or a WAKMan preset whose manager
watches the simulation and switches the live policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from wakman.adaptive.config import ADAPTIVE_PRESETS, AdaptiveConfig
from wakman.adaptive.manager import AdaptiveManager
from wakman.policies import POLICIES, EvictionPolicy
from wakman.simulation import SimResult
from wakman.simulation import simulate as simulate_static
from wakman.simulation.server import VllmServer
from wakman.traces.model import Request

POLICY_NAMES = (*POLICIES, *ADAPTIVE_PRESETS)


def simulate(
    requests: Sequence[Request],
    policy: str | EvictionPolicy | AdaptiveConfig,
    capacity_blocks: int,
    shadow_hits: Mapping[str, Sequence[int]] | None = None,
    **options: Any,
) -> SimResult:
    """``wakman.simulation.simulate`` where ``policy`` may also be ``wakman``, ``wakman-plus`` or an
    ``AdaptiveConfig``; the result's ``extra`` then holds the manager's decisions. ``shadow_hits``:
    the candidates' cache-mode ``first_hit_tokens`` on these requests at this capacity, which stand
    in for persistent shadows of the pool's size (``AdaptiveManager``; wakman-plus)."""
    if isinstance(policy, str) and policy in ADAPTIVE_PRESETS:
        policy = ADAPTIVE_PRESETS[policy]
    if isinstance(policy, str) and policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICY_NAMES)}")
    if not isinstance(policy, AdaptiveConfig):
        if shadow_hits is not None:
            raise ValueError("shadow_hits: only an adaptive policy has shadows")
        return simulate_static(requests, policy, capacity_blocks, **options)
    if options.get("policy_params"):
        raise ValueError(
            f"policy_params: {policy.name} builds its candidates with its config's policy_params "
            "({name: {...}}: AdaptiveConfig.with_options, or with_sessions())"
        )
    if capacity_blocks < 1:
        raise ValueError(f"capacity must be >= 1 block, got {capacity_blocks}")
    if shadow_hits is not None:
        requests = list(requests)
        if any(len(hits) != len(requests) for hits in shadow_hits.values()):
            raise ValueError("shadow_hits: need one hit count per request for every candidate")
        if isinstance(options.get("server"), VllmServer):
            raise ValueError("shadow_hits: the step loop's shadows see decoded blocks, not a plain run's")
    manager = AdaptiveManager(policy, capacity_blocks, shadow_hits=shadow_hits)
    if shadow_hits is not None and options.get("mode", "serve") == "serve":
        # serve mode refuses a request larger than the pool (vLLM's max_model_len) before the
        # manager hears of it, so the hits, one per trace request, would be read off by one
        too_large = next(
            (
                i
                for i, r in enumerate(requests)
                if r.prompt_tokens + max(r.output_tokens, 1) > capacity_blocks * r.block_size
            ),
            None,
        )
        if too_large is not None:
            raise ValueError(
                f"shadow_hits: request {too_large} is larger than the {capacity_blocks:,}-block pool "
                "and serve mode refuses it unheard: the hits would be read off by one"
            )
    result = simulate_static(
        requests, manager.initial_policy(), capacity_blocks, controller=manager, **options
    )
    result.policy = policy.name
    return result
