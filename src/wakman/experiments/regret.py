"""The regret formula and the static winner it is measured against, written once for the summary,
the tables, the map and the report."""

from __future__ import annotations

STATIC = ("lru", "s3fifo")
ADAPTIVE = ("wakman", "wakman-plus")
NEW = ("chain-lru",)  # the hash-chain policy, measured against the better static one and Belady
ONLINE = (*STATIC, *ADAPTIVE, *NEW)
ALL_POLICIES = (*ONLINE, "belady", "infinite")  # every column of the reproduction, in table order
BEHIND_POINTS = 0.5  # a policy more than this below the better static policy on a trace is behind


def regret_points(hit_rate: dict[str, float], policy: str) -> float:
    """How far ``policy`` is behind the better of static LRU and S3-FIFO, in points of hit rate."""
    return 100 * (max(hit_rate["lru"], hit_rate["s3fifo"]) - hit_rate[policy])


def static_winner(hit_rate: dict[str, float]) -> str:
    """The better of static LRU and S3-FIFO (``lru`` only when strictly ahead)."""
    return "lru" if hit_rate["lru"] > hit_rate["s3fifo"] else "s3fifo"
