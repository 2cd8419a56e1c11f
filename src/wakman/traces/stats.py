"""Trace statistics in one streaming pass: volume, reuse, the infinite-cache ceiling and the LRU
hit-ratio curve over every cache size (Mattson stack distances).

Block-level figures count every key of every request (partial last blocks included), so
``infinite_block_hit_ratio = 1 - distinct_blocks / block_accesses``. The token figure counts the
way vLLM does: a request hits its longest cached prefix of full blocks, at most ``prompt - 1`` tokens,
and an infinite cache holds every full prompt block (and output block) it has seen.
The LRU curve: the stack distance of an access is the number of distinct keys touched since the
same key's previous access; LRU with C blocks hits exactly the accesses with distance < C.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from wakman.traces.model import Request


class _Fenwick:
    """Prefix sums over positions 1..n with point updates, O(log n) each."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.tree = array("q", bytes(8 * (n + 1)))

    def grow(self, n: int) -> None:
        if n > self.n:  # rebuild: prefix sums must cover the new positions
            old = [self.prefix(i) - self.prefix(i - 1) for i in range(1, self.n + 1)]
            self.n = max(n, 2 * self.n)
            self.tree = array("q", bytes(8 * (self.n + 1)))
            for i, v in enumerate(old, start=1):
                if v:
                    self.add(i, v)

    def add(self, i: int, delta: int) -> None:
        tree, n = self.tree, self.n
        while i <= n:
            tree[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        tree, total = self.tree, 0
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total


@dataclass
class LabelStats:
    requests: int = 0
    block_accesses: int = 0
    block_hits: int = 0
    reuse_times: array = field(default_factory=lambda: array("d"))

    def summary(self) -> dict[str, float]:
        reuse = np.frombuffer(self.reuse_times, dtype=np.float64) if len(self.reuse_times) else np.zeros(0)
        return {
            "requests": self.requests,
            "block_accesses": self.block_accesses,
            "infinite_block_hit_ratio": self.block_hits / self.block_accesses if self.block_accesses else 0.0,
            "reuse_time_p50_s": float(np.percentile(reuse, 50)) if len(reuse) else float("nan"),
            "reuse_time_p90_s": float(np.percentile(reuse, 90)) if len(reuse) else float("nan"),
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
    reuse_time_percentiles_s: dict[str, float]
    per_label: dict[str, dict[str, float]]
    lru_hits_by_capacity: np.ndarray | None  # [c] = LRU block hits with c blocks, c = 0..distinct

    def lru_hit_ratio(self, capacity: int) -> float:
        assert self.lru_hits_by_capacity is not None
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
    last_seen: dict[int, float] = {}  # key -> arrival of its last access (s)
    last_pos: dict[int, int] = {}  # key -> position of its last access (1-based), for stack distances
    cached_full: set[int] = set()  # full blocks an infinite vLLM-like cache would hold
    distance_counts = array("q")  # [d] = accesses with stack distance d
    fenwick = _Fenwick(1 << 16) if lru_curve else None
    reuse_times = array("d")
    labels: dict[str, LabelStats] = {}
    sessions: set[str] = set()
    n = accesses = hits = prompt_tokens = hit_tokens = 0
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
        depth = 0  # token hits: longest cached prefix, vLLM's way
        limit = req.max_hit_blocks
        while depth < limit and keys[depth] in cached_full:
            depth += 1
        hit_tokens += depth * req.block_size
        cached_full.update(keys[: req.full_blocks])
        cached_full.update(req.output_keys)
        label = labels.setdefault(req.label, LabelStats()) if req.label is not None else None
        t = req.arrival_s
        req_hits = 0
        if fenwick is not None:
            fenwick.grow(accesses + len(keys))
        for key in keys:
            accesses += 1
            prev_t = last_seen.get(key)
            if prev_t is not None:
                req_hits += 1
                reuse_times.append(t - prev_t)
                if label is not None:
                    label.reuse_times.append(t - prev_t)
            last_seen[key] = t
            if fenwick is not None:
                p = last_pos.get(key)
                if p is not None:
                    d = fenwick.prefix(accesses - 1) - fenwick.prefix(p)
                    fenwick.add(p, -1)
                    while len(distance_counts) <= d:
                        distance_counts.append(0)
                    distance_counts[d] += 1
                fenwick.add(accesses, 1)
                last_pos[key] = accesses
        hits += req_hits
        if label is not None:
            label.requests += 1
            label.block_accesses += len(keys)
            label.block_hits += req_hits
    duration = last - first
    reuse = np.frombuffer(reuse_times, dtype=np.float64) if len(reuse_times) else np.zeros(1)
    curve = None
    if lru_curve:
        counts = np.zeros(len(last_seen) + 1, dtype=np.int64)
        counts[: len(distance_counts)] = np.frombuffer(distance_counts, dtype=np.int64)
        curve = np.concatenate(([0], np.cumsum(counts)[:-1]))  # hits with c blocks = #(d < c)
    return TraceStats(
        requests=n,
        duration_s=duration,
        request_rate=n / duration if duration > 0 else float("nan"),
        sessions=len(sessions),
        distinct_blocks=len(last_seen),
        block_accesses=accesses,
        infinite_block_hit_ratio=hits / accesses if accesses else 0.0,
        prompt_tokens=prompt_tokens,
        infinite_token_hit_ratio=hit_tokens / prompt_tokens if prompt_tokens else 0.0,
        mean_prompt_tokens=prompt_tokens / n if n else 0.0,
        reuse_time_percentiles_s={f"p{q}": float(np.percentile(reuse, q)) for q in (10, 50, 90, 99)},
        per_label={k: v.summary() for k, v in sorted(labels.items())},
        lru_hits_by_capacity=curve,
    )
