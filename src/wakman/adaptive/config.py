"""WAKMan's settings, and the two named presets.

``wakman`` is the paper: every 15 minutes, replay the last interval through fresh LRU and S3-FIFO
shadows sized to the interval's mean free blocks, score each with vLLM's hit rate (prompt tokens
hit under the first-miss rule / prompt tokens), switch to the better.
``wakman-plus`` goes past the paper: its candidates are chain-lru (wakman's hash-chain policy, which
is LRU on traffic whose chains are all extended) and S3-FIFO; long-lived shadows the size of the
pool that also see the blocks decoding fills, fed once per request and scored every 30 s over the
last 15 minutes (recent requests weigh more: 5-minute half-life), with a 2-point hysteresis.
``benchmarks/tune_plus.py`` measured each choice (docs/adaptive.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from wakman.numbers_check import is_integer, is_real
from wakman.policies import ONLINE_POLICIES, make_policy

PAPER_NAME = "wakman"
# The shortest interval, window or first decision: past a millisecond the next decision time may not
# move on from the last (float precision: 60.0 + 1e-15 == 60.0) and the manager would never stop.
MIN_SECONDS = 0.001


@dataclass(frozen=True)
class AdaptiveConfig:
    name: str = "wakman"
    interval_s: float = 900.0  # time between decisions
    window_s: float = 900.0  # how much recent traffic each decision replays
    first_decision_s: float = 900.0  # when the first decision is taken
    candidates: tuple[str, ...] = ("lru", "s3fifo")
    start_policy: str = "lru"
    shadow_metric: str = "vllm"  # "vllm": vLLM's hit rate (first-miss rule, tokens); "block": hits / keys
    shadows: str = "fresh"  # "fresh": new shadows replay each window (paper); "persistent": see manager
    shadow_size: str = (
        "free"  # "free": the window's mean free blocks (paper); "pool": the capacity (persistent)
    )
    half_life_s: float | None = None  # persistent shadows: weigh a request by 2^(-age / half-life)
    log_outputs: bool = False  # shadows also see the blocks decoding filled (vLLM caches them)
    hysteresis: float = 0.0  # switch only if the best beats the live policy's shadow by this (rate)
    skip_unchanged: bool = False  # reuse the last decision when traffic looks unchanged
    max_logged_blocks: int = 4_000_000
    policy_params: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for label, value in (
            ("interval_s", self.interval_s),
            ("window_s", self.window_s),
            ("first_decision_s", self.first_decision_s),
        ):
            if not (is_real(value) and math.isfinite(value) and value >= MIN_SECONDS):
                rule = f"a finite number of seconds >= {MIN_SECONDS:g}"
                raise ValueError(f"{label} must be {rule}, got {value!r}")
        if self.half_life_s is not None and not (
            is_real(self.half_life_s) and math.isfinite(self.half_life_s) and self.half_life_s > 0
        ):
            raise ValueError(
                f"half_life_s must be None or a finite number of seconds > 0, got {self.half_life_s!r}"
            )
        if not (is_real(self.hysteresis) and math.isfinite(self.hysteresis) and 0 <= self.hysteresis < 1):
            raise ValueError(f"hysteresis must be a hit-rate difference in [0, 1), got {self.hysteresis!r}")
        if (
            not isinstance(self.candidates, tuple)
            or not self.candidates
            or len(set(self.candidates)) != len(self.candidates)
            or any(name not in ONLINE_POLICIES for name in self.candidates)
        ):
            raise ValueError(
                f"candidates must be a tuple of distinct online policies ({', '.join(ONLINE_POLICIES)}), "
                f"at least one, got {self.candidates!r}"
            )
        if not (is_integer(self.max_logged_blocks) and self.max_logged_blocks >= 1):
            raise ValueError(f"max_logged_blocks must be an integer >= 1, got {self.max_logged_blocks!r}")
        for name, params in self.policy_params.items():
            if name not in self.candidates:
                raise ValueError(f"policy_params: {name!r} is not a candidate ({', '.join(self.candidates)})")
            try:  # the parameters each switch will build the candidate with, checked now
                make_policy(name, 1, **params)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"policy_params[{name!r}]: {exc}") from None
        if self.shadow_metric not in ("block", "vllm"):
            raise ValueError(f"shadow_metric must be 'block' or 'vllm', got {self.shadow_metric!r}")
        if self.shadows not in ("fresh", "persistent"):
            raise ValueError(f"shadows must be 'fresh' or 'persistent', got {self.shadows!r}")
        if self.shadows == "persistent" and self.shadow_metric != "vllm":
            raise ValueError("persistent shadows score with shadow_metric='vllm'")
        if self.log_outputs and self.shadow_metric != "vllm":  # the block replay reads prompt keys only
            raise ValueError("log_outputs: the shadows see logged outputs with shadow_metric='vllm' only")
        if self.shadow_size not in ("free", "pool"):
            raise ValueError(f"shadow_size must be 'free' or 'pool', got {self.shadow_size!r}")
        if self.shadows == "persistent" and self.shadow_size != "pool":
            raise ValueError("persistent shadows keep one size: shadow_size='pool' (a shadow cannot resize)")
        if self.shadows == "fresh" and self.half_life_s is not None:
            raise ValueError(
                "half_life_s weighs persistent shadows' scores: fresh shadows score one window alike"
            )
        if self.start_policy not in self.candidates:
            raise ValueError("the start policy must be a candidate")

    def describe(self) -> str:
        """One line of what the preset does (``wakman policies``)."""

        def span(s: float) -> str:
            return f"{s:g} s" if s < 60 else f"{s / 60:g} min"

        size = "the pool's size" if self.shadow_size == "pool" else "the mean free blocks"
        weigh = f", {span(self.half_life_s)} half-life" if self.half_life_s else ""
        margin = f", {self.hysteresis * 100:g}-point hysteresis" if self.hysteresis else ""
        paper = " (the paper)" if self.name == PAPER_NAME else ""
        return (
            f"adaptive{paper}: every {span(self.interval_s)}, {self.shadows} "
            f"{'/'.join(self.candidates)} shadows sized to {size} score the last "
            f"{span(self.window_s)}{weigh}; switch to the best{margin}"
        )

    def with_options(self, **changes: object) -> AdaptiveConfig:
        return replace(self, **changes)

    def with_sessions(self) -> AdaptiveConfig:
        """This config with its chain-lru candidate in session mode (``sessions=True``: the live
        chain-lru follows session ids; its shadows hear none). ValueError without that candidate."""
        if SESSION_POLICY not in self.candidates:
            raise ValueError(f"session mode needs {SESSION_POLICY} among the candidates of {self.name}")
        params = dict(self.policy_params)
        params[SESSION_POLICY] = {**params.get(SESSION_POLICY, {}), "sessions": True}
        return replace(self, policy_params=params)


SESSION_POLICY = "chain-lru"  # the one policy with a session mode (``sessions=True``)


PAPER = AdaptiveConfig()
PLUS = AdaptiveConfig(
    name="wakman-plus",
    interval_s=30.0,
    window_s=900.0,
    first_decision_s=30.0,
    candidates=("chain-lru", "s3fifo"),
    start_policy="chain-lru",
    shadows="persistent",
    shadow_size="pool",
    log_outputs=True,
    half_life_s=300.0,
    hysteresis=0.02,
)
ADAPTIVE_PRESETS: dict[str, AdaptiveConfig] = {PAPER.name: PAPER, PLUS.name: PLUS}
