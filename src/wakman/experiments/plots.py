"""Figures (matplotlib, the ``plot`` extra), written as PNG, PDF or SVG by their file names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wakman.traces.io import atomic_path

FORMATS = ("png", "pdf", "svg")  # a figure's file name ends in one of these

if TYPE_CHECKING:
    from wakman.experiments.advise import LruCurve
    from wakman.experiments.kv_memory import KVLayout
    from wakman.traces.stats import TraceStats


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ValueError("plots need matplotlib: pip install 'wakman[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> Path:
    """Lay out, write in the format ``path``'s extension names (one of ``FORMATS``; PNG otherwise,
    120 dpi), parent folders made, all or nothing, and release ``fig``."""
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    fmt = path.suffix.lower().lstrip(".")
    try:
        for text in fig.findobj(Text):  # a file name's undecodable bytes (in titles) drawn as \xNN
            text.set_text(
                text.get_text().encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            )
        fig.tight_layout()
        with atomic_path(path) as target:
            fig.savefig(target, dpi=120, format=fmt if fmt in FORMATS else "png")
    finally:
        plt.close(fig)
    return path


def _finish_axes(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()


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
    _finish_axes(ax, "cache size (blocks)", "block hit ratio", title or "LRU hit-ratio curve")
    return save_figure(fig, path)


def nested(index: int, lines: int) -> dict[str, float]:
    """Line width and marker size of the ``index``-th of ``lines`` lines, each thinner than the one
    before: a line equal to an earlier one is drawn inside it, so both stay visible."""
    step = 0 if lines <= 1 else index / (lines - 1)
    return {"lw": 3.2 - 2.2 * step, "ms": 8.0 - 5.0 * step}


def plot_policy_rows(
    ax: Any,
    rows: list[dict],
    x: Callable[[int], float],  # capacity_blocks -> the x axis's unit (blocks, GiB)
    label: str,
    style: str = "-",
    lw: float = 1.5,
    ms: float = 6.0,
    hollow_ms: float = 6.0,
) -> bool:
    """One policy's rows (sorted by size) as a line, x = ``x(capacity_blocks)``; a size where requests
    were rejected as longer than the cache is a hollow marker off the line (its rate is over the
    others only). True where it drew one."""
    kept = [r for r in rows if not r.get("rejected")]
    (line,) = ax.plot(
        [x(r["capacity_blocks"]) for r in kept],
        [r["hit_rate"] for r in kept],
        style,
        marker="o",
        lw=lw,
        ms=ms,
        label=label,
    )
    left_out = [r for r in rows if r.get("rejected")]
    if left_out:
        ax.plot(
            [x(r["capacity_blocks"]) for r in left_out],
            [r["hit_rate"] for r in left_out],
            linestyle="none",
            marker="o",
            ms=hollow_ms,
            mfc="none",
            color=line.get_color(),
        )
    return bool(left_out)


def legend_rejected(ax: Any, label: str) -> None:
    """The legend entry of ``plot_policy_rows``'s hollow markers."""
    ax.plot([], [], linestyle="none", marker="o", mfc="none", color="grey", label=label)


def plot_sweep(rows: list[dict], path: Path, title: str = "") -> Path:
    """Hit rate (vLLM's token metric) against cache size, one line per policy (each thinner than the
    one before, so equal results stay visible). A size where requests were rejected as longer than
    the cache is a hollow marker off the line (its rate is over the others only); one that measured
    no request is left out. Sizes spanning a factor of 10 or more get a log axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    rejected_any = False
    for index, policy in enumerate(policies):
        mine = sorted(
            (r for r in rows if r["policy"] == policy and r.get("measured_requests", 1) != 0),
            key=lambda r: r["capacity_blocks"],
        )
        style = "--" if policy in ("belady", "infinite") else "-"
        size = nested(index, len(policies))
        rejected_any |= plot_policy_rows(
            ax, mine, lambda c: c, policy, style, size["lw"], size["ms"], size["ms"]
        )
    if rejected_any:
        legend_rejected(ax, "hollow: requests rejected")
    sizes = [r["capacity_blocks"] for r in rows if r["capacity_blocks"] > 0]
    if sizes and max(sizes) >= 10 * min(sizes):
        ax.set_xscale("log")
    _finish_axes(
        ax, "cache size (blocks)", "prefix-cache hit rate (tokens)", title or "hit rate against cache size"
    )
    return save_figure(fig, path)


def plot_intervals(series: list[dict], path: Path, title: str = "") -> Path:
    """Per-interval hit rate and mean free blocks of one simulation."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    xs = [s["start_s"] / 60 for s in series]
    # markers: an interval between empty ones (NaN), or the only one, still shows
    top.plot(xs, [s["hit_rate"] if s["hit_rate"] is not None else float("nan") for s in series], marker=".")
    top.set_ylabel("hit rate")
    bottom.plot(
        xs,
        [s["mean_free_blocks"] if s["mean_free_blocks"] is not None else float("nan") for s in series],
        marker=".",
    )
    bottom.set_ylabel("mean free blocks")
    bottom.set_xlabel("time (min)")
    top.set_title(title)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_decisions(decisions: list[dict], path: Path, title: str = "", end_s: float | None = None) -> Path:
    """WAKMan's shadow hit rates at each decision and the live policy over time: from 0 s, the
    policy live before the first decision, to ``end_s`` (seconds; the last decision without it)."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    names = sorted({n for d in decisions for n in d["rates"]})
    for name in names:
        pts = [(d["time_s"] / 60, d["rates"][name]) for d in decisions if name in d["rates"]]
        top.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=f"shadow {name}")
    top.set_ylabel("shadow hit rate")
    if names:
        top.legend()
    top.grid(alpha=0.3)
    top.set_title(title or "WAKMan decisions")
    times = [0.0] + [d["time_s"] for d in decisions]
    live = [decisions[0]["live_before"] if decisions else "lru"] + [d["choice"] for d in decisions]
    if end_s is not None and end_s > times[-1]:
        times.append(end_s)
        live.append(live[-1])
    order = {n: i for i, n in enumerate(dict.fromkeys([*names, *sorted(set(live) - set(names))]))}
    bottom.step([t / 60 for t in times], [order[n] for n in live], where="post")
    bottom.set_yticks(list(order.values()), list(order))
    bottom.set_ylabel("live")
    bottom.set_xlabel("time (min)")
    bottom.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_advice(result: dict[str, Any], curve: LruCurve, layout: KVLayout | None, path: Path) -> Path:
    """`wakman advise`'s figure: hit rate against cache size (GiB when the model is known), the
    exact LRU curve, each swept policy (a saturated serve-mode run crossed, as the table's ``s``),
    the ceiling, the target and the user's size."""
    from wakman.experiments.advise import log_points

    plt = _pyplot()
    scale = (lambda c: layout.gib(c, curve.block_size)) if layout else (lambda c: c)
    fig, ax = plt.subplots(figsize=(8, 4.8))
    caps = log_points(curve)
    ax.plot(
        [scale(c) for c in caps],
        [curve.hit_rate(c) for c in caps],
        color="black",
        lw=4.5,  # the widest, drawn first: the policies' lines run inside it where they equal it
        label="lru (exact curve, cache mode)",
    )
    rejected_any = False
    drawn = [
        name
        for name in dict.fromkeys(r["policy"] for r in result["sweep"])
        if not (name == "lru" and result["mode"] == "cache")
    ]
    for index, name in enumerate(drawn):  # each thinner than the one before: equal lines stay visible
        rows = sorted((r for r in result["sweep"] if r["policy"] == name), key=lambda r: r["capacity_blocks"])
        size = nested(index, len(drawn))
        rejected_any |= plot_policy_rows(ax, rows, scale, name, "-", size["lw"], size["ms"] * 0.6, 5)
    if rejected_any:
        legend_rejected(ax, "hollow: requests rejected (too long)")
    saturated = [r for r in result["sweep"] if r.get("saturated")]  # serve mode: an overloaded queue's
    if saturated:
        ax.plot(
            [scale(r["capacity_blocks"]) for r in saturated],
            [r["hit_rate"] for r in saturated],
            linestyle="none",
            marker="x",
            color="black",
            ms=7,
            label="x: modelled server saturated (no answer taken from it)",
        )
    ax.axhline(curve.ceiling, color="grey", linestyle="--", label=f"infinite cache {curve.ceiling:.3f}")
    ax.axhline(
        result["target_hit_rate"], color="grey", linestyle=":", label=f"{result['target']:g} of ceiling"
    )
    if result["at_capacity"]:
        ax.axvline(
            scale(result["at_capacity"]["capacity_blocks"]),
            color="black",
            linestyle="-.",
            lw=1,
            label="your cache",
        )
    ax.set_xscale("log")
    ax.set_xlabel("KV cache (GiB)" if layout else "cache size (blocks)")
    ax.set_ylabel("prefix-cache hit rate (tokens)")
    ax.set_title(f"{Path(result['trace']).name}: hit rate against cache size ({result['mode']} mode)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
