"""WAKMan's settings, and the two named presets.

``wakman`` is the paper: every 15 minutes, replay the last interval through fresh LRU and S3-FIFO
shadows sized to the interval's mean free blocks, per-block hit rates, switch to the better.
``wakman-plus`` goes past the paper; its defaults come from ``wakman tune`` on the 20 mixes and the
real traces (docs/adaptive.md gives the command and the numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class AdaptiveConfig:
    name: str = "wakman"
    interval_s: float = 900.0  # time between decisions
    window_s: float = 900.0  # how much recent traffic each decision replays
    first_decision_s: float = 900.0  # when the first decision is taken
    candidates: tuple[str, ...] = ("lru", "s3fifo")
    start_policy: str = "lru"
    shadow_metric: str = "block"  # "block": hits / keys (paper); "vllm": first-miss rule, tokens
    hysteresis: float = 0.0  # switch only if the best beats the live policy's shadow by this (rate)
    skip_unchanged: bool = False  # reuse the last decision when traffic looks unchanged
    max_logged_blocks: int = 4_000_000
    policy_params: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.window_s <= 0 or self.first_decision_s <= 0:
            raise ValueError("interval, window and first decision must be > 0 seconds")
        if self.shadow_metric not in ("block", "vllm"):
            raise ValueError(f"shadow_metric must be 'block' or 'vllm', got {self.shadow_metric!r}")
        if self.start_policy not in self.candidates:
            raise ValueError("the start policy must be a candidate")

    def with_options(self, **changes: object) -> AdaptiveConfig:
        return replace(self, **changes)


PAPER = AdaptiveConfig()
PLUS = AdaptiveConfig(
    name="wakman-plus",
    interval_s=120.0,
    window_s=600.0,
    first_decision_s=120.0,
    candidates=("lru", "s3fifo", "arc"),
    shadow_metric="vllm",
    hysteresis=0.005,
    skip_unchanged=False,
)
ADAPTIVE_PRESETS: dict[str, AdaptiveConfig] = {PAPER.name: PAPER, PLUS.name: PLUS}
