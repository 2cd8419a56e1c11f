"""WAKMan: choose the eviction policy at run time from shadow replays of recent traffic."""

from wakman.adaptive.config import ADAPTIVE_PRESETS, PAPER, PLUS, AdaptiveConfig
from wakman.adaptive.manager import AdaptiveManager, Decision
from wakman.adaptive.run import POLICY_NAMES, simulate

__all__ = [
    "ADAPTIVE_PRESETS",
    "PAPER",
    "PLUS",
    "POLICY_NAMES",
    "AdaptiveConfig",
    "AdaptiveManager",
    "Decision",
    "simulate",
]
