"""What a simulation reports: vLLM's hit rate and the figures around it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from wakman.simulation.server import Saturation


def _pairwise_sum(values: Sequence[float], lo: int, n: int) -> float:
    """numpy's pairwise summation of values[lo:lo + n] (8 accumulators up to 128 values, then halves),
    so a mean here is numpy's mean bit for bit."""
    if n < 8:
        total = 0.0
        for i in range(lo, lo + n):
            total += values[i]
        return total
    if n <= 128:
        r = list(values[lo : lo + 8])
        end = lo + n - n % 8
        for i in range(lo + 8, end, 8):
            for k in range(8):
                r[k] += values[i + k]
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for i in range(end, lo + n):
            total += values[i]
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(values, lo, half) + _pairwise_sum(values, lo + half, n - half)


def _percentile(ordered: Sequence[float], q: float) -> float:
    """numpy's default (linear) percentile of sorted values, bit for bit."""
    at = (len(ordered) - 1) * (q / 100)
    lo = math.floor(at)
    a, b = ordered[lo], ordered[min(lo + 1, len(ordered) - 1)]
    t, d = at - lo, b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


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
    rejected: int = 0  # requests after the warm-up refused as larger than the pool (serve mode)
    mean_free_blocks: float | None = None  # serve mode's time average; cache mode has no clock (None)
    queueing_delays_s: list[float] = field(default_factory=list)
    ttfts_s: list[float] = field(default_factory=list)
    # each request's hit tokens at its first admission (trace order; -1: never admitted), what vLLM
    # reports per request as RequestOutput.num_cached_tokens; cache mode: at its one lookup
    first_hit_tokens: list[int] = field(default_factory=list)
    intervals: list[IntervalStats] = field(default_factory=list)
    wall_s: float = 0.0
    saturation: Saturation | None = None  # serve mode only: did the modelled server keep up
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        """vLLM's metric: cached prompt tokens / prompt tokens, over measured admissions."""
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def block_hit_rate(self) -> float:
        """Hit blocks / looked-up blocks (every prompt key of measured admissions)."""
        return self.block_hits / self.block_lookups if self.block_lookups else 0.0

    def as_flat_dict(self, series: bool = False, per_request: bool = False) -> dict[str, Any]:
        """The flat figures; ``series`` adds the per-interval series, ``per_request`` each request's
        ``first_hit_tokens``."""
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
        # numpy's figures without importing numpy (a tenth of a second of a simulate run)
        for name, values in (("queueing_delay_s", self.queueing_delays_s), ("ttft_s", self.ttfts_s)):
            if values:
                out[f"{name}_mean"] = _pairwise_sum(values, 0, len(values)) / len(values)
                ordered = sorted(values)
                for q in (50, 90, 99):
                    out[f"{name}_p{q}"] = _percentile(ordered, q)
        if self.saturation is not None:
            out["saturated"] = self.saturation.saturated
            out["prefill_utilization"] = self.saturation.prefill_utilization
            out["queue_growth"] = self.saturation.queue_growth
            out["backlog_at_last_arrival"] = self.saturation.backlog_at_last_arrival
        out.update(self.extra)
        if series:
            out["intervals"] = [i.as_dict() for i in self.intervals]
        if per_request:
            out["first_hit_tokens"] = self.first_hit_tokens
        return out
