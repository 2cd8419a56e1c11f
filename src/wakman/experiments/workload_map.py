"""The map of the winner: which static policy wins, and by how much, as one workload parameter and
the cache size vary, with the adaptive managers' regret across the same grid.

Two axes, each a one-hour trace per value at 1.5 requests/s (the mixes' rate), run at every
capacity of the map:
- ``gap``: the multi-turn human gap (median seconds between a reply and the next turn) at 50/50
  single-turn / multi-turn sessions;
- ``agentic-turns``: the agentic turn count (median turns per session) at 50/50 single-turn /
  agentic sessions.
A cell's ``lead_points`` is LRU's hit rate minus S3-FIFO's (points; negative: S3-FIFO wins); the
adaptive managers' regret is ``regret_points`` against the better of the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wakman.experiments.regret import lru_lead_points, regret_points, static_winner

MAP_POLICIES = ("lru", "s3fifo", "wakman", "wakman-plus")


@dataclass(frozen=True)
class MapAxis:
    name: str
    label: str  # the axis title of the figure
    mix: tuple[float, float, float]  # single-turn, multi-turn, agentic fractions of new sessions
    values: tuple[float, ...]

    def overrides(self, value: float) -> dict[str, str]:
        """The generator settings (``--set`` keys) that put this axis at ``value``."""
        if self.name == "gap":
            return {"multi_turn.gap_s.median": str(float(value))}
        turns = int(value)
        return {"agentic.turns.median": str(turns), "agentic.turns.max": str(max(100, 4 * turns))}


GAP = MapAxis("gap", "multi-turn human gap (median s)", (0.5, 0.5, 0.0), (15, 60, 240, 900))
AGENTIC_TURNS = MapAxis(
    "agentic-turns", "agentic turns per session (median)", (0.5, 0.0, 0.5), (2, 6, 16, 40)
)
AXES = {axis.name: axis for axis in (GAP, AGENTIC_TURNS)}


MAP_TIE_POINTS = 0.1  # on the map a lead of at most this (points) is a tie, not a winner


def cell(axis: str, value: float, capacity: int, hit_rate: dict[str, float]) -> dict[str, Any]:
    """One point of the map: the hit rates and what they say (winner, a lead of at most
    ``MAP_TIE_POINTS`` being a tie; lead; regret)."""
    return {
        "axis": axis,
        "value": value,
        "capacity": capacity,
        "hit_rate": hit_rate,
        "winner": static_winner(hit_rate, MAP_TIE_POINTS),
        "lead_points": lru_lead_points(hit_rate),
        "regret_points": {p: regret_points(hit_rate, p) for p in ("wakman", "wakman-plus")},
    }
