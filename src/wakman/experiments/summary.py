"""The figures ``wakman reproduce`` computes from its runs (``results.json``'s ``summary``): regret
against the better static policy per mix, wins, recovery, the gap to Belady, and the new policies'
gains; and the paper's figures they stand beside. Pure functions of the mixes' hit rates."""

from __future__ import annotations

import math
import statistics
from typing import Any

from wakman.experiments.regret import ADAPTIVE, NEW, ONLINE, TIE, behind_summary, regret_points, static_winner
from wakman.experiments.sweep import HINT_MODE

PAPER = {
    "lru_wins": 8,
    "s3fifo_wins": 12,
    "lru_worst_loss_pct": 22.4,
    "s3fifo_worst_loss_pct": 11.7,
    "wakman_gain_over_lru_points": 5.0,
    "wakman_median_recovered_pct": 84.0,
}


def worst_loss_pct(mixes: list[dict[str, Any]], own: str, rival: str) -> float | None:
    """``own``'s largest loss against ``rival`` over the mixes where ``own`` is behind, in percent of
    ``rival``'s hit rate; None where ``own`` is behind on no mix (a mix where it hits as much or more
    is no loss)."""
    losses = [
        100 * (rates[rival] - rates[own]) / rates[rival]
        for rates in (m["hit_rate"] for m in mixes)
        if rates[own] < rates[rival]
    ]
    return max(losses) if losses else None


def require_finite(rows: list[dict[str, Any]]) -> None:
    """A ``ValueError`` naming the row, capacity and policies where a hit rate is not a finite number
    (a NaN compares false both ways: it would pass every "never below" check and vanish from a max)."""
    for row in rows:
        where = [
            ("", row["hit_rate"]),
            *((f" at {c} blocks", r) for c, r in row.get("by_capacity", {}).items()),
        ]
        for at, rates in where:
            bad = [p for p, v in rates.items() if not math.isfinite(v)]
            if bad:
                raise ValueError(
                    f"{row.get('name', 'a row')}{at}: the hit rate of {', '.join(bad)} is not a finite number"
                )


def summarize(mixes: list[dict[str, Any]], ablations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Regret against the better of lru and s3fifo per mix, wins, recovery, gap to Belady; with
    ``ablations``, the new policies' and hint mode's gains on them (primary capacity, no Belady).
    Every hit rate must be finite (``require_finite``)."""
    require_finite([*mixes, *(ablations or [])])

    def rate(m, p):
        return m["hit_rate"][p]

    summary: dict[str, Any] = {"policies": {}}
    for policy in ONLINE:
        regrets = [regret_points(m["hit_rate"], policy) for m in mixes]
        summary["policies"][policy] = {
            "mean_regret_points": statistics.mean(regrets),
            "max_regret_points": max(regrets),
            "mean_gain_over_lru_points": statistics.mean(
                100 * (rate(m, policy) - rate(m, "lru")) for m in mixes
            ),
            "mean_gap_to_belady_points": statistics.mean(
                100 * (rate(m, "belady") - rate(m, policy)) for m in mixes
            ),
        }
    winners = [static_winner(m["hit_rate"]) for m in mixes]
    summary["lru_wins"], summary["s3fifo_wins"] = winners.count("lru"), winners.count("s3fifo")
    summary["static_ties"] = winners.count(TIE)
    summary["lru_worst_loss_pct"] = worst_loss_pct(mixes, "lru", "s3fifo")
    summary["s3fifo_worst_loss_pct"] = worst_loss_pct(mixes, "s3fifo", "lru")
    for policy in ADAPTIVE:
        recovered = [
            100
            * (rate(m, policy) - min(rate(m, "lru"), rate(m, "s3fifo")))
            / abs(rate(m, "lru") - rate(m, "s3fifo"))
            for m in mixes
            if abs(rate(m, "lru") - rate(m, "s3fifo")) > 0.01
        ]
        summary[f"{policy}_median_recovered_pct"] = statistics.median(recovered) if recovered else None
        summary[f"{policy}_mixes_over_one_point"] = len(recovered)
    runs = [
        flag
        for m in mixes
        for flags in (m.get("saturated", {}), *m.get("saturated_by_capacity", {}).values())
        for flag in flags.values()
    ]
    summary["saturated_runs"], summary["serve_runs"] = sum(runs), len(runs)
    hinted = [flag for m in mixes for flag in m.get("hint_saturated", {}).values()]
    summary["hint_mode_saturated_runs"], summary["hint_mode_serve_runs"] = sum(hinted), len(hinted)
    summary["new_policies"] = {policy: new_policy_summary(mixes, policy) for policy in NEW}
    summary["hint_mode"] = {HINT_MODE: new_policy_summary(mixes, HINT_MODE)}
    summary["paper"] = PAPER
    if ablations is not None:
        summary["new_policies_on_ablations"] = {policy: behind_summary(ablations, policy) for policy in NEW}
        summary["hint_mode_on_ablations"] = {HINT_MODE: behind_summary(ablations, HINT_MODE)}
    return summary


def new_policy_summary(mixes: list[dict[str, Any]], policy: str) -> dict[str, dict[str, Any]]:
    """Per capacity (blocks, as a string): ``policy``'s gain over the better static policy of each mix
    (``behind_summary``'s figures), the gap from that policy to Belady (points) and the share of it
    closed (mean gain / mean gap, %), over the mixes that ran both at that capacity."""
    out: dict[str, dict[str, Any]] = {}
    capacities = sorted({int(c) for m in mixes for c in m["by_capacity"]})
    for capacity in map(str, capacities):
        rows = [
            {"name": m["name"], "hit_rate": m["by_capacity"][capacity]}
            for m in mixes
            if policy in m["by_capacity"].get(capacity, {}) and "belady" in m["by_capacity"][capacity]
        ]
        behind = behind_summary(rows, policy)
        if behind is None:
            continue
        mean_gap = statistics.mean(-regret_points(r["hit_rate"], "belady") for r in rows)
        out[capacity] = {
            "mixes": behind["rows"],
            "mean_gain_points": behind["mean_gain_points"],
            "worst_mix": behind["worst"],
            "worst_gain_points": behind["worst_gain_points"],
            "mean_gap_to_belady_points": mean_gap,
            "gap_closed_pct": 100 * behind["mean_gain_points"] / mean_gap if mean_gap > 0 else None,
            "mixes_over_half_point_below": behind["over_half_point_below"],
        }
    return out
