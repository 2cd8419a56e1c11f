"""Figures (matplotlib, the ``plot`` extra), written as PNG."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wakman.traces.stats import TraceStats


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ValueError("plots need matplotlib: pip install 'wakman[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_lru_curve(stats: TraceStats, path: Path, title: str = "") -> Path:
    """LRU block hit ratio against cache size (blocks), with the infinite-cache ceiling."""
    import numpy as np

    plt = _pyplot()
    hits = stats.lru_hits_by_capacity
    assert hits is not None
    capacities = np.arange(len(hits))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(capacities[1:], hits[1:] / stats.block_accesses, label="LRU (stack distances)")
    ax.axhline(stats.infinite_block_hit_ratio, color="grey", linestyle="--", label="infinite cache")
    ax.set_xscale("log")
    ax.set_xlabel("cache size (blocks)")
    ax.set_ylabel("block hit ratio")
    ax.set_title(title or "LRU hit-ratio curve")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
