"""The regret formula, written once for the summary, the tables and the report."""

from __future__ import annotations


def regret_points(hit_rate: dict[str, float], policy: str) -> float:
    """How far ``policy`` is behind the better of static LRU and S3-FIFO, in points of hit rate."""
    return 100 * (max(hit_rate["lru"], hit_rate["s3fifo"]) - hit_rate[policy])
