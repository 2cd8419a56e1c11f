"""``simulate`` with the adaptive policies: a static policy, or a WAKMan preset whose manager
watches the simulation and switches the live policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wakman.adaptive.config import ADAPTIVE_PRESETS, AdaptiveConfig
from wakman.adaptive.manager import AdaptiveManager
from wakman.policies import POLICIES, EvictionPolicy
from wakman.simulation import SimResult
from wakman.simulation import simulate as simulate_static
from wakman.traces.model import Request

POLICY_NAMES = (*POLICIES, *ADAPTIVE_PRESETS)


def simulate(
    requests: Sequence[Request],
    policy: str | EvictionPolicy | AdaptiveConfig,
    capacity_blocks: int,
    **options: Any,
) -> SimResult:
    """``wakman.simulation.simulate`` where ``policy`` may also be ``wakman``, ``wakman-plus`` or an
    ``AdaptiveConfig``; the result's ``extra`` then holds the manager's decisions."""
    if isinstance(policy, str) and policy in ADAPTIVE_PRESETS:
        policy = ADAPTIVE_PRESETS[policy]
    if isinstance(policy, str) and policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICY_NAMES)}")
    if not isinstance(policy, AdaptiveConfig):
        return simulate_static(requests, policy, capacity_blocks, **options)
    if capacity_blocks < 1:
        raise ValueError(f"capacity must be >= 1 block, got {capacity_blocks}")
    manager = AdaptiveManager(policy, capacity_blocks)
    result = simulate_static(
        requests, manager.initial_policy(), capacity_blocks, controller=manager, **options
    )
    result.policy = policy.name
    return result
