"""What a simulation reports: vLLM's hit rate and the figures around it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class IntervalStats:
    """One window of ``interval_s`` seconds: counters and the time-weighted free blocks."""

    start_s: float
    admissions: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    evictions: int = 0
    free_block_seconds: float = 0.0
    seconds: float = 0.0
    policy: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "start_s": self.start_s,
            "admissions": self.admissions,
            "prompt_tokens": self.prompt_tokens,
            "hit_tokens": self.hit_tokens,
            "hit_rate": self.hit_tokens / self.prompt_tokens if self.prompt_tokens else None,
            "evictions": self.evictions,
            "mean_free_blocks": self.free_block_seconds / self.seconds if self.seconds else None,
            "policy": self.policy,
        }


@dataclass
class SimResult:
    policy: str
    mode: str
    capacity_blocks: int
    requests: int = 0
    measured_requests: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    block_lookups: int = 0
    block_hits: int = 0
    evictions: int = 0
    stranded_blocks: int = 0
    preemptions: int = 0
    rejected: int = 0
    mean_free_blocks: float = 0.0
    queueing_delays_s: list[float] = field(default_factory=list)
    ttfts_s: list[float] = field(default_factory=list)
    intervals: list[IntervalStats] = field(default_factory=list)
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        """vLLM's metric: cached prompt tokens / prompt tokens, over measured admissions."""
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def block_hit_rate(self) -> float:
        """Hit blocks / looked-up blocks (every prompt key of measured admissions)."""
        return self.block_hits / self.block_lookups if self.block_lookups else 0.0

    def as_flat_dict(self, series: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "policy": self.policy,
            "mode": self.mode,
            "capacity_blocks": self.capacity_blocks,
            "hit_rate": self.hit_rate,
            "block_hit_rate": self.block_hit_rate,
            "requests": self.requests,
            "measured_requests": self.measured_requests,
            "prompt_tokens": self.prompt_tokens,
            "hit_tokens": self.hit_tokens,
            "evictions": self.evictions,
            "stranded_blocks": self.stranded_blocks,
            "preemptions": self.preemptions,
            "rejected": self.rejected,
            "mean_free_blocks": self.mean_free_blocks,
            "wall_s": self.wall_s,
        }
        import numpy as np

        for name, values in (("queueing_delay_s", self.queueing_delays_s), ("ttft_s", self.ttfts_s)):
            if values:
                arr = np.asarray(values)
                out[f"{name}_mean"] = float(arr.mean())
                for q in (50, 90, 99):
                    out[f"{name}_p{q}"] = float(np.percentile(arr, q))
        out.update(self.extra)
        if series:
            out["intervals"] = [i.as_dict() for i in self.intervals]
        return out
