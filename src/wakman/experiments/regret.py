"""The regret formula and the static winner it is measured against, written once for the summary,
the tables, the map and the report."""

from __future__ import annotations

STATIC = ("lru", "s3fifo")
ADAPTIVE = ("wakman", "wakman-plus")
NEW = ("chain-lru",)  # the hash-chain policy, measured against the better static one and Belady
ONLINE = (*STATIC, *ADAPTIVE, *NEW)
ALL_POLICIES = (*ONLINE, "belady", "infinite")  # every column of the reproduction, in table order
BEHIND_POINTS = 0.5  # a policy more than this below the better static policy on a trace is behind


def beside(value: float, threshold: float, decimals: int = 2, sign: str = "+") -> str:
    """``value`` with ``decimals`` decimals, or more where that many would put it on the other side
    of ``threshold`` or onto it (a mean gain of 2.996 prints +2.996, not the +3.00 the goal asks for;
    beside 0, a gain of -0.0014 prints -0.001, not +0.00)."""
    side = (value > threshold) - (value < threshold)
    while (
        decimals < 15 and (round(value, decimals) > threshold) - (round(value, decimals) < threshold) != side
    ):
        decimals += 1
    return f"{value:{sign}z.{decimals}f}"


def regret_points(hit_rate: dict[str, float], policy: str) -> float:
    """How far ``policy`` is behind the better of static LRU and S3-FIFO, in points of hit rate."""
    return 100 * (max(hit_rate["lru"], hit_rate["s3fifo"]) - hit_rate[policy])


def lru_lead_points(hit_rate: dict[str, float]) -> float:
    """How far static LRU is ahead of static S3-FIFO, in points (negative: behind)."""
    return 100 * (hit_rate["lru"] - hit_rate["s3fifo"])


TIE = "tie"  # static_winner where neither static policy leads


def within_tie(lead_points: float, tie_points: float) -> bool:
    """Whether a lead (points of hit rate, either sign) is at most ``tie_points``: a tie. Compared at
    9 decimals, so a lead of exactly ``tie_points`` computed from two hit rates (0.201 - 0.2 gives
    0.10000000000000009 points) is the tie it is."""
    return abs(round(lead_points, 9)) <= tie_points


def static_winner(hit_rate: dict[str, float], tie_points: float = 0.0) -> str:
    """The better of static LRU and S3-FIFO: ``lru`` or ``s3fifo`` where it leads the other by more
    than ``tie_points`` (points of hit rate; 0: strictly ahead), else ``TIE``. Every count of wins
    in the summary and the report is of this function, so a tie is never a win."""
    lead = lru_lead_points(hit_rate)
    if within_tie(lead, tie_points):
        return TIE
    return "lru" if lead > 0 else "s3fifo"


def behind_summary(rows: list[dict], policy: str) -> dict | None:
    """``policy``'s gain over the better static policy (points, the negated regret) on each row
    (a dict with ``name`` and ``hit_rate``; an ablation) that ran it: the mean, the worst row and
    the rows more than ``BEHIND_POINTS`` below, each with whether its server was saturated. None
    where no row ran ``policy``."""
    ran = [r for r in rows if policy in r["hit_rate"]]
    if not ran:
        return None
    gains = [(r["name"], -regret_points(r["hit_rate"], policy)) for r in ran]
    worst = min(gains, key=lambda g: g[1])
    saturated = [r["name"] for r in ran if any(r.get("saturated", {}).values())]
    return {
        "rows": len(ran),
        "gain_points": dict(gains),
        "mean_gain_points": sum(g for _, g in gains) / len(gains),
        "worst": worst[0],
        "worst_gain_points": worst[1],
        "over_half_point_below": [name for name, g in gains if g < -BEHIND_POINTS],
        "saturated": saturated,
    }
