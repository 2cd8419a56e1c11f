"""Sizing a prefix cache for a trace: LRU's hit rate at every cache size in one pass, the other
policies by a sweep, the infinite-cache ceiling, and the smallest cache within a fraction of it.

The metric throughout is vLLM's: cached prompt tokens / prompt tokens, a request hitting its longest
cached prefix of full blocks, at most ``prompt - 1`` tokens. The LRU curve is exact for cache mode
(``wakman.simulation.cache_mode``: no time, no pinning) at every size: LRU's contents with C blocks
are the C most recently used keys of a capacity-independent access sequence, so a block hits iff
the largest stack distance over its prefix is < C (``_core.TraceScan.replay_request``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wakman import _core
from wakman.experiments.kv_memory import KVLayout
from wakman.experiments.regret import within_tie
from wakman.experiments.sweep import HINT_MODE
from wakman.experiments.workload_map import MAP_TIE_POINTS
from wakman.simulation.server import saturated_runs_warning
from wakman.traces.model import Request

ORACLES = ("belady", "infinite")  # references, not policies a server can run
# never the best policy: oracles, and hint mode, which needs clients that send session ids and ends
NOT_CANDIDATES = (*ORACLES, HINT_MODE)
METRIC = "vLLM prefix-cache hit rate: cached prompt tokens / prompt tokens (first-miss rule, <= prompt-1)"


@dataclass
class LruCurve:
    """``hit_tokens[c]`` = LRU's hit tokens with ``c`` blocks (cache mode), c = 0 .. distinct."""

    hit_tokens: np.ndarray
    prompt_tokens: int
    requests: int
    block_size: int
    duration_s: float = 0.0  # first arrival to last

    @property
    def distinct_blocks(self) -> int:
        return len(self.hit_tokens) - 1

    @property
    def ceiling_tokens(self) -> int:
        """What an infinite cache hits: every full prompt and output block ever seen stays."""
        return int(self.hit_tokens[-1])

    @property
    def ceiling(self) -> float:
        return self.ceiling_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def tokens_at(self, capacity: int) -> int:
        return int(self.hit_tokens[min(max(capacity, 0), self.distinct_blocks)])

    def hit_rate(self, capacity: int) -> float:
        return self.tokens_at(capacity) / self.prompt_tokens if self.prompt_tokens else 0.0

    def smallest_within(self, fraction: float) -> int:
        """The fewest blocks (at least 1, the smallest cache) with which LRU hits at least
        ``fraction`` of the ceiling's tokens."""
        threshold = fraction * self.ceiling_tokens
        return max(1, int(np.searchsorted(self.hit_tokens, threshold, side="left")))


def lru_curve(requests: Iterable[Request]) -> LruCurve:
    """One pass over ``requests`` (a stream; memory O(distinct blocks))."""
    scan = _core.TraceScan(stack_distances=True)
    prompt = n = 0
    block_size = None
    first = last = 0.0
    for req in requests:
        if n == 0:
            first = req.arrival_s
        last = req.arrival_s
        if block_size is None:
            block_size = req.block_size
        elif req.block_size != block_size:
            raise ValueError(f"the trace mixes block sizes ({block_size} and {req.block_size})")
        n += 1
        prompt += req.prompt_tokens
        scan.replay_request(
            req.block_keys,
            req.max_hit_blocks,
            req.full_blocks,
            req.output_keys,
            req.arrival_s,
            req.block_size,
        )
    hist = scan.prefix_histogram()
    hits = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(hist, dtype=np.int64)))
    return LruCurve(
        hit_tokens=hits, prompt_tokens=prompt, requests=n, block_size=block_size or 0, duration_s=last - first
    )


def sweep_capacities(
    curve: LruCurve, points: int, extra: Iterable[int] = (), band: float | None = None
) -> list[int]:
    """``points`` log-spaced sizes from where LRU reaches 10 % of the ceiling to where it reaches the
    ceiling, with ``extra`` sizes (the user's) added, and with ``band`` (a target fraction) the sizes
    1/2, 1/sqrt 2, 1, sqrt 2 and 2 times LRU's smallest size within it, where the other policies'
    answers usually lie; sorted, distinct, each >= 1."""
    lo = max(1, curve.smallest_within(0.10))
    hi = max(lo, curve.smallest_within(1.0))
    grid = {round(x) for x in np.geomspace(lo, hi, points)} if points > 1 else {hi}
    grid.update(int(c) for c in extra)
    if band is not None:
        at = curve.smallest_within(band)
        grid.update(round(at * f) for f in (0.5, 2**-0.5, 1.0, 2**0.5, 2.0))
    return sorted(c for c in grid if c >= 1)


def smallest_sampled(rows: list[dict], policy: str, threshold_rate: float) -> tuple[int | None, int | None]:
    """From a sweep: the smallest sampled size at which ``policy``'s hit rate reaches
    ``threshold_rate``, and the sampled size below it (the answer lies in between); (None, largest
    sampled) when no sample reaches it. A size that rejects requests (serve mode: too long for the
    whole cache) does not qualify: its hit rate leaves them out; nor does one whose modelled server
    saturated (its hit rate is an overloaded queue's)."""
    points = sorted(
        (r["capacity_blocks"], r["hit_rate"] if not (r.get("rejected") or r.get("saturated")) else -1.0)
        for r in rows
        if r["policy"] == policy
    )
    below = None
    for capacity, rate in points:
        if rate >= threshold_rate:
            return capacity, below
        below = capacity
    return None, below


def best_at(rows: list[dict], capacity: int) -> dict | None:
    """The online policy with the highest hit rate at ``capacity`` (first listed wins a tie; never an
    oracle or hint mode). ``build_report`` then keeps LRU unless this beats it by more than
    ``MAP_TIE_POINTS``."""
    best = None
    for row in rows:
        if row["capacity_blocks"] != capacity or row["policy"] in NOT_CANDIDATES:
            continue
        if best is None or row["hit_rate"] > best["hit_rate"]:
            best = row
    return best


def log_points(curve: LruCurve, n: int = 400) -> list[int]:
    """Sizes to draw the exact curve at: log-spaced from 1 block to every distinct block."""
    top = max(curve.distinct_blocks, 1)
    return sorted({round(x) for x in np.geomspace(1, top, n)})


def human_tokens(tokens: float, signed: bool = False) -> str:
    """``tokens`` in G, M or k (``signed``: with its sign, + included; a negative count always
    shows its minus)."""
    if tokens < 0 or signed:
        sign = "-" if tokens < 0 else "+" if signed and tokens > 0 else ""
        return sign + human_tokens(abs(tokens))
    if tokens >= 1e9:
        return f"{tokens / 1e9:z.2f} G"
    if tokens >= 1e6:
        return f"{tokens / 1e6:z.2f} M"
    if tokens >= 1e3:
        return f"{tokens / 1e3:z.1f} k"
    return f"{tokens:z.0f}"


def size_entry(blocks: int | None, curve: LruCurve, layout: KVLayout | None) -> dict[str, Any] | None:
    if blocks is None:
        return None
    return {
        "capacity_blocks": blocks,
        "tokens": blocks * curve.block_size,
        "gib": layout.gib(blocks, curve.block_size) if layout else None,
    }


def curve_row(curve: LruCurve, capacity: int) -> dict[str, Any]:
    return {
        "policy": "lru",
        "mode": "cache",
        "capacity_blocks": capacity,
        "hit_rate": curve.hit_rate(capacity),
        "hit_tokens": curve.tokens_at(capacity),
        "prompt_tokens": curve.prompt_tokens,
        "source": "curve",
    }


ROW_KEYS = (
    "policy",
    "mode",
    "capacity_blocks",
    "hit_rate",
    "hit_tokens",
    "prompt_tokens",
    "block_hit_rate",
    "ttft_s_p50",
    "ttft_s_p99",
    "queueing_delay_s_p99",
    "preemptions",
    "rejected",
    "saturated",
    "prefill_utilization",
    "queue_growth",
    "measured_requests",
    "source",
)


def build_report(
    path: Path,
    curve: LruCurve,
    layout: KVLayout | None,
    mode: str,
    target: float,
    names: list[str],
    sizes: list[int],
    rows: list[dict[str, Any]],
    capacity: int | None,
    warnings: list[str],
    lru_baseline: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The advice: smallest cache within ``target`` of the ceiling per policy, the sweep, and at
    ``capacity`` each policy against LRU, vLLM's default: the ``lru`` row there, or where ``names``
    leave LRU out, ``lru_baseline`` (its run at ``capacity``; in cache mode the curve's exact
    value serves), which is compared with, not listed, and given as ``lru_baseline``. The best
    policy there is LRU unless one beats it by more than ``MAP_TIE_POINTS`` points of hit rate
    (``tied_with_lru``: the policies within that of it, either side)."""
    rows = [{k: row[k] for k in ROW_KEYS if k in row} for row in rows]
    threshold = target * curve.ceiling
    smallest: dict[str, Any] = {}
    for name in names:
        if name == "infinite":  # the ceiling at any size: no smallest cache to give
            continue
        if name == "lru" and mode == "cache":
            entry = size_entry(curve.smallest_within(target), curve, layout)
            assert entry is not None
            entry["exact"] = True
        else:
            found, below = smallest_sampled(rows, name, threshold)
            entry = size_entry(found, curve, layout) or {"capacity_blocks": None, "tokens": None, "gib": None}
            entry["exact"] = False
            entry["above_blocks"] = below  # the next smaller sampled size missed the target
            if mode == "serve":  # sizes left out of the answer: an overloaded queue's hit rates
                entry["saturated_blocks"] = sorted(
                    r["capacity_blocks"] for r in rows if r["policy"] == name and r.get("saturated")
                )
        smallest[name] = entry
    at: dict[str, Any] | None = None
    if capacity is not None:
        here = [r for r in rows if r["capacity_blocks"] == capacity]
        lru = next((r for r in here if r["policy"] == "lru"), None)
        baseline = None  # LRU left out of ``names``: the run compared with, shown apart from the rows
        if lru is None:
            lru = lru_baseline if lru_baseline is not None or mode != "cache" else curve_row(curve, capacity)
            baseline = None if lru is None else {k: lru[k] for k in ROW_KEYS if k in lru}
        for row in here:
            row["prefill_tokens_saved"] = row["hit_tokens"]
            if lru is not None:
                row["prefill_tokens_saved_vs_lru"] = row["hit_tokens"] - lru["hit_tokens"]
                row["points_vs_lru"] = 100 * (row["hit_rate"] - lru["hit_rate"])
        best = best_at(rows, capacity)
        at = {
            **(size_entry(capacity, curve, layout) or {}),
            "rows": here,
            "lru_curve_hit_rate": curve.hit_rate(capacity),
        }
        if baseline is not None:
            at["lru_baseline"] = baseline
        if lru is not None:
            # a lead of at most MAP_TIE_POINTS (points) is a tie, as on the map: vLLM's default stays
            at["tie_points"] = MAP_TIE_POINTS
            at["tied_with_lru"] = [
                r["policy"]
                for r in here
                if r["policy"] not in (*NOT_CANDIDATES, "lru")
                and within_tie(100 * (r["hit_rate"] - lru["hit_rate"]), MAP_TIE_POINTS)
            ]
            if (
                best is None
                or best["hit_rate"] <= lru["hit_rate"]
                or within_tie(100 * (best["hit_rate"] - lru["hit_rate"]), MAP_TIE_POINTS)
            ):
                best = lru
        if best is not None:
            at["best"] = best["policy"]
            at["best_hit_rate"] = best["hit_rate"]
            # the candidates within MAP_TIE_POINTS of the best (which of them is named best
            # follows --policies' order): the measurement does not tell them apart
            at["tie_points"] = MAP_TIE_POINTS
            at["tied_with_best"] = [
                r["policy"]
                for r in here
                if r["policy"] not in (*NOT_CANDIDATES, best["policy"])
                and within_tie(100 * (r["hit_rate"] - best["hit_rate"]), MAP_TIE_POINTS)
            ]
            # its modelled server saturated: an overloaded queue's hit rate (the line says so)
            at["best_saturated"] = bool(best.get("saturated"))
            if lru is not None:
                at["gain_points_vs_lru"] = 100 * (best["hit_rate"] - lru["hit_rate"])
                at["prefill_tokens_saved_vs_lru"] = best["hit_tokens"] - lru["hit_tokens"]
        rejected = [f"{r['policy']} ({r['rejected']:,})" for r in here if r.get("rejected")]
        if here and all(r.get("measured_requests") == 0 and r.get("rejected") for r in here):
            warnings.append(
                f"serve mode: every request is too long for your cache ({capacity:,} blocks) and is "
                "rejected: no hit rate is measured at your size, and the best policy there means nothing"
            )
        elif rejected:
            warnings.append(
                "serve mode: requests too long for your cache are rejected and left out of the hit rate "
                f"at your size ({', '.join(rejected)}): it is measured over the others only"
            )
    runs = rows + ([lru_baseline] if lru_baseline is not None else [])
    yours = [r["policy"] for r in runs if r["capacity_blocks"] == capacity and r.get("saturated")]
    fields = "marked s in the table, `saturated` and `prefill_utilization` in the JSON"
    saturated = saturated_runs_warning(
        runs, False, (f"at your size: {', '.join(dict.fromkeys(yours))}; " if yours else "") + fields
    )
    if saturated is not None:
        warnings.append(
            f"serve mode: {saturated}. No smallest cache within the target is taken from a saturated run"
        )
    if curve.ceiling_tokens == 0:
        warnings.append(
            "the trace has no prefix reuse (an infinite cache hits nothing): no cache size or policy "
            "raises its hit rate above 0"
        )
    if capacity is not None and capacity >= curve.distinct_blocks:
        warnings.append(
            f"your cache ({capacity:,} blocks) holds every distinct block of the trace: "
            + (
                "any policy hits the ceiling"
                if mode == "cache"
                else "only the running requests' partial and duplicate blocks can still force an "
                "eviction, and the hit rate is about what serving order allows"
            )
        )
    return {
        "trace": str(path),
        "mode": mode,
        "metric": METRIC,
        "requests": curve.requests,
        "prompt_tokens": curve.prompt_tokens,
        "mean_prompt_tokens": curve.prompt_tokens / curve.requests,
        "block_size": curve.block_size,
        "cacheable_blocks": curve.distinct_blocks,  # full prompt and output blocks (stats: every prompt key)
        "kv": None
        if layout is None
        else {**layout.as_dict(), "block_bytes": layout.block_bytes(curve.block_size)},
        "ceiling": {
            "hit_rate": curve.ceiling,
            "hit_tokens": curve.ceiling_tokens,
            "lru_reaches_it": size_entry(curve.smallest_within(1.0), curve, layout),
            "source": "infinite cache, cache mode (every full prompt and output block kept)",
        },
        "target": target,
        "target_hit_rate": threshold,
        "smallest_within_target": smallest,
        "sweep_capacities_blocks": sizes,
        "lru_curve": {
            "source": "exact at every size, one pass (stack distances, cache mode)",
            "capacity_blocks": (caps := log_points(curve, 60)),
            "hit_rate": [curve.hit_rate(c) for c in caps],
        },
        "sweep": rows,
        "at_capacity": at,
        "warnings": warnings,
    }
