"""Trace statistics in one streaming pass: volume, reuse, the infinite-cache ceiling and the LRU
hit-ratio curve over every cache size (Mattson stack distances).

Block-level figures count every key of every request (partial last blocks included), so
``infinite_block_hit_ratio = 1 - distinct_blocks / block_accesses``. The token figure counts the
way vLLM does: a request hits its longest cached prefix of full blocks, at most ``prompt - 1`` tokens
(``Request.max_hit_blocks``, through ``wakman._core.cached_prefix``), and an infinite cache (the
``infinite`` policy) holds every full prompt block and output block it has seen.
The LRU curve: the stack distance of an access is the number of distinct keys touched since the
same key's previous access; LRU with C blocks hits exactly the accesses with distance < C.
The per-key pass runs in the core (``wakman._core.TraceScan``, core/stack_distance.hpp), one call per
request; memory is O(distinct keys). Reuse-time percentiles come from its log-spaced histogram: each
is within 0.049 % of numpy's exact (linear) percentile, or within 2**-20 s of it for reuse times
below 2**-20 s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from wakman import _core
from wakman.policies import make_policy
from wakman.traces.model import Request

REUSE_QUANTILES = (10, 50, 90, 99)  # the trace-wide reuse-time percentiles reported
REUSE_PRECISION = 2.0**-11  # relative error bound of every reuse-time percentile (TraceScan)


@dataclass
class LabelStats:
    requests: int = 0
    block_accesses: int = 0
    block_hits: int = 0

    def summary(self, scan: _core.TraceScan, index: int) -> dict[str, float]:
        p50, p90 = scan.reuse_percentiles([50.0, 90.0], index)
        return {
            "requests": self.requests,
            "block_accesses": self.block_accesses,
            "infinite_block_hit_ratio": (
                self.block_hits / self.block_accesses if self.block_accesses else math.nan
            ),
            "reuse_time_p50_s": p50,
            "reuse_time_p90_s": p90,
        }


@dataclass
class TraceStats:
    requests: int
    duration_s: float
    request_rate: float
    sessions: int
    distinct_blocks: int
    block_accesses: int
    infinite_block_hit_ratio: float
    prompt_tokens: int
    infinite_token_hit_ratio: float
    mean_prompt_tokens: float
    # requests with fewer block keys than their prompt's full blocks: AIPerf's prefix-only rows (the
    # rest of the prompt uncached), or every request when the block size read is wrong
    short_keyed_requests: int
    reuse_time_percentiles_s: dict[str, float]
    per_label: dict[str, dict[str, float]]
    lru_hits_by_capacity: np.ndarray | None  # [c] = LRU block hits with c blocks, c = 0..distinct

    def lru_hit_ratio(self, capacity: int) -> float:
        """LRU's block hit ratio at ``capacity`` blocks; NaN for a trace with no block access."""
        assert self.lru_hits_by_capacity is not None
        if not self.block_accesses:
            return math.nan
        c = min(capacity, len(self.lru_hits_by_capacity) - 1)
        return float(self.lru_hits_by_capacity[c]) / self.block_accesses

    def as_flat_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "requests": self.requests,
            "duration_s": self.duration_s,
            "request_rate": self.request_rate,
            "sessions": self.sessions,
            "distinct_blocks": self.distinct_blocks,
            "block_accesses": self.block_accesses,
            "infinite_block_hit_ratio": self.infinite_block_hit_ratio,
            "prompt_tokens": self.prompt_tokens,
            "infinite_token_hit_ratio": self.infinite_token_hit_ratio,
            "mean_prompt_tokens": self.mean_prompt_tokens,
            "short_keyed_requests": self.short_keyed_requests,
        }
        out.update({f"reuse_time_{k}_s": v for k, v in self.reuse_time_percentiles_s.items()})
        for label, values in self.per_label.items():
            out.update({f"label.{label}.{k}": v for k, v in values.items()})
        if self.lru_hits_by_capacity is not None:
            for fraction in (0.01, 0.05, 0.1, 0.25, 0.5):
                c = max(1, int(fraction * self.distinct_blocks))
                out[f"lru_hit_ratio_at_{c}_blocks"] = self.lru_hit_ratio(c)
        return out


def compute_stats(requests: Iterable[Request], lru_curve: bool = True) -> TraceStats:
    """One pass over ``requests`` (consumed as a stream, never held)."""
    scan = _core.TraceScan(stack_distances=lru_curve)
    ceiling = make_policy("infinite", 1)  # the full prompt and output blocks an infinite vLLM pool holds
    labels: dict[str, tuple[int, LabelStats]] = {}  # label -> (its index in scan, counts)
    sessions: set[str] = set()
    n = prompt_tokens = hit_tokens = short_keyed = 0
    first = last = 0.0
    for req in requests:
        if n == 0:
            first = req.arrival_s
        n += 1
        last = req.arrival_s
        prompt_tokens += req.prompt_tokens
        if req.session_id is not None:
            sessions.add(req.session_id)
        keys = req.block_keys
        full = req.full_blocks
        short_keyed += req.short_keyed
        depth = _core.cached_prefix(ceiling, keys, req.max_hit_blocks)
        hit_tokens += depth * req.block_size
        if full > depth:  # keys[:depth] are resident already: replaying them would change nothing
            ceiling.replay(keys[depth:full])
        if len(req.output_keys):
            ceiling.replay(req.output_keys)
        if req.label is None:
            scan.scan(keys, req.arrival_s)
            continue
        entry = labels.get(req.label)
        if entry is None:
            entry = labels[req.label] = (len(labels), LabelStats())
        index, label = entry
        label.block_hits += scan.scan(keys, req.arrival_s, index)
        label.requests += 1
        label.block_accesses += len(keys)
    duration = last - first
    accesses = scan.accesses
    curve = None
    if lru_curve:
        counts = np.zeros(scan.distinct + 1, dtype=np.int64)
        counts[: scan.distinct] = scan.distance_histogram()
        curve = np.concatenate(([0], np.cumsum(counts)[:-1]))  # hits with c blocks = #(d < c)
    percentiles = scan.reuse_percentiles([float(q) for q in REUSE_QUANTILES])  # NaN (null) without reuse
    return TraceStats(
        requests=n,
        duration_s=duration,
        request_rate=n / duration if duration > 0 else float("nan"),
        sessions=len(sessions),
        distinct_blocks=scan.distinct,
        block_accesses=accesses,
        infinite_block_hit_ratio=scan.reuses / accesses if accesses else math.nan,
        prompt_tokens=prompt_tokens,
        infinite_token_hit_ratio=hit_tokens / prompt_tokens if prompt_tokens else math.nan,
        mean_prompt_tokens=prompt_tokens / n if n else 0.0,
        short_keyed_requests=short_keyed,
        reuse_time_percentiles_s={f"p{q}": v for q, v in zip(REUSE_QUANTILES, percentiles, strict=True)},
        per_label={k: stats.summary(scan, i) for k, (i, stats) in sorted(labels.items())},
        lru_hits_by_capacity=curve,
    )
