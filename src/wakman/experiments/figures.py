"""The figures of ``wakman reproduce`` (matplotlib, the ``plot`` extra), drawn from results.json's
payload: Figure 1 (regret per mix), Figure 3 (ablations), the map of the winner, the decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wakman.experiments.plots import _pyplot, plot_decisions, save_figure
from wakman.experiments.regret import ONLINE, regret_points
from wakman.experiments.workload_map import AXES

FIGURES = ("figure1.png", "figure3.png", "map.png", "decisions.png")
# a marker for each of regret.ONLINE
MARKERS = {"lru": "o", "s3fifo": "s", "wakman": "^", "wakman-plus": "D", "chain-lru": "v"}


def _seed(payload: dict[str, Any]) -> str:
    """The seed of the run's generated traces, for the figures' titles (a figure read apart from
    the report still says which traces it shows)."""
    return f"seed {payload['plan'].get('seed', 0)}"


def _saturated(row: dict[str, Any]) -> bool:
    """A mix or ablation whose modelled server fell behind for some policy (its rates are those of
    an overloaded queue)."""
    return any(row.get("saturated", {}).values())


def _mix_label(mix: dict[str, Any]) -> str:
    fractions = "/".join(f"{x:g}" for x in mix["fractions"])
    return f"{mix['name']} ({fractions})" + (" saturated" if _saturated(mix) else "")


def figure1(payload: dict[str, Any], path: Path) -> None:
    """Regret per mix (points behind the better of LRU and S3-FIFO) of every online policy of the
    reproduction (regret.ONLINE: the static ones, the managers, chain-lru), one row per mix: 0 is
    the better static policy, so a glance shows who wins where, what the managers lose and where
    chain-lru is ahead (left of 0)."""
    plt = _pyplot()
    mixes = payload["mixes"]
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(mixes) + 1.4))
    ys = range(len(mixes))
    for index, policy in enumerate(ONLINE):
        dodge = 0.5 * (
            index / (len(ONLINE) - 1) - 0.5
        )  # each policy a little apart: equal regrets stay visible
        ax.plot(
            [regret_points(m["hit_rate"], policy) for m in mixes],
            [y + dodge for y in ys],
            MARKERS[policy],
            ms=5,
            alpha=0.8,
            linestyle="none",
            label=policy,
        )
    ax.set_yticks(list(ys), [_mix_label(m) for m in mixes])
    ax.tick_params(axis="y", labelsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel("regret: points of hit rate behind the better of LRU and S3-FIFO")
    ax.set_title(f"Figure 1: regret per mix ({payload['plan']['capacity']:,} blocks, {_seed(payload)})")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    save_figure(fig, path)


def figure3(payload: dict[str, Any], path: Path) -> None:
    """Each ablation group's hit rate against its varied parameter, one panel a group, three panels
    a row (readable at page width); a circled point's modelled server was saturated."""
    plt = _pyplot()
    groups = list(dict.fromkeys(a["group"] for a in payload["ablations"]))
    columns = min(3, len(groups))
    rows_of_panels = -(-len(groups) // columns)
    fig, axes = plt.subplots(
        rows_of_panels, columns, figsize=(4.6 * columns, 3.6 * rows_of_panels), squeeze=False
    )
    panels = [ax for line in axes for ax in line]
    for ax in panels[len(groups) :]:
        ax.set_visible(False)
    circled = False
    for ax, group in zip(panels, groups, strict=False):
        rows = [a for a in payload["ablations"] if a["group"] == group]
        xs = [int("".join(c for c in a["name"].split("-")[0] if c.isdigit())) for a in rows]
        for policy in ONLINE:
            ax.plot(xs, [a["hit_rate"][policy] for a in rows], marker=MARKERS[policy], label=policy)
            busy = [
                (x, a["hit_rate"][policy])
                for x, a in zip(xs, rows, strict=True)
                if a["saturated"].get(policy)
            ]
            if busy:
                circled = True
                ax.plot(*zip(*busy, strict=True), "o", ms=12, mfc="none", color="grey", lw=0)
        ax.set_xscale("log", base=2)
        ax.set_title(group.replace("ablation-", ""), fontsize=9)
        ax.set_xlabel(
            "turns per session (median)"
            if "turns" in group
            else "multi-turn gap (median s)"
            if "gap" in group
            else "input tokens per turn (median)"
        )
        ax.grid(alpha=0.3)
    for line in axes:
        line[0].set_ylabel("hit rate")
    if circled:
        axes[0][0].plot([], [], "o", ms=12, mfc="none", color="grey", label="circled: saturated")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"Figure 3: ablations ({payload['plan']['capacity']:,} blocks, {_seed(payload)})")
    save_figure(fig, path)


def figure_map(payload: dict[str, Any], path: Path) -> None:
    """One row per map axis, capacities up, the axis across: LRU's lead over S3-FIFO (blue: LRU
    wins, red: S3-FIFO wins) and each manager's regret, every cell annotated in points."""
    plt = _pyplot()
    cells = payload["map"]
    axes_names = list(dict.fromkeys(c["axis"] for c in cells))
    panels = ("lead", "wakman", "wakman-plus")
    fig, grid = plt.subplots(len(axes_names), 3, figsize=(13, 2.2 + 1.9 * len(axes_names)), squeeze=False)
    for row, name in zip(grid, axes_names, strict=True):
        mine = [c for c in cells if c["axis"] == name]
        values = sorted({c["value"] for c in mine})
        capacities = sorted({c["capacity"] for c in mine})
        at = {(c["value"], c["capacity"]): c for c in mine}
        # the managers' panels share one scale: equal colours are equal regrets
        regrets = [c["regret_points"][p] for c in mine for p in panels[1:]]
        regret_bound = max([1.0] + [x for x in regrets if x == x])  # a NaN (x != x) left out
        for ax, panel in zip(row, panels, strict=True):
            data = [
                [
                    at[v, cap]["lead_points"] if panel == "lead" else at[v, cap]["regret_points"][panel]
                    for v in values
                ]
                for cap in capacities
            ]
            lead = panel == "lead"
            # the lead's scale is symmetric; a regret's runs from 0 up (a negative regret, a manager
            # ahead of the better static policy, is drawn as 0: white)
            leads = [abs(x) for line in data for x in line if x == x]  # a NaN (x != x) left out
            bound = max([1.0, *leads]) if lead else regret_bound
            image = ax.imshow(
                data,
                cmap="RdBu" if lead else "Reds",
                vmin=-bound if lead else 0,
                vmax=bound,
                aspect="auto",
                origin="lower",
            )
            for i, line in enumerate(data):
                for j, x in enumerate(line):
                    ax.text(
                        j,
                        i,
                        # the lead's sign says who wins: kept; * a saturated modelled server
                        (f"{x:+.2f}" if lead else f"{x:z.1f}")
                        + ("*" if at[values[j], capacities[i]]["saturated"] else ""),
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white" if (abs(x) if lead else x) > 0.6 * bound else "black",  # on dark cells
                    )
            ax.set_xticks(range(len(values)), [f"{v:g}" for v in values])
            ax.set_yticks(range(len(capacities)), [f"{c:,}" for c in capacities])
            ax.set_xlabel(AXES[name].label if name in AXES else name, fontsize=8)
            ax.set_ylabel("cache (blocks)", fontsize=8)
            mix = "/".join(f"{x:g}" for x in AXES[name].mix) if name in AXES else ""
            ax.set_title(
                f"LRU lead over S3-FIFO (points), {mix}" if lead else f"{panel} regret (points), {mix}",
                fontsize=9,
            )
            fig.colorbar(image, ax=ax, shrink=0.8)
    sizes = sorted({c["capacity"] for c in cells})
    across = (
        "across workloads and cache sizes" if len(sizes) > 1 else f"across workloads at {sizes[0]:,} blocks"
    )
    starred = any(c["saturated"] for c in cells)
    fig.suptitle(
        f"Which static policy wins, and what the managers lose, {across} ({_seed(payload)})"
        + ("\n* the modelled server is saturated there" if starred else "")
    )
    save_figure(fig, path)


def write_figures(payload: dict[str, Any], out: Path) -> list[Path]:
    """Every figure of the report into ``out``; the paths written."""
    written = [out / "figure1.png", out / "figure3.png"]
    figure1(payload, written[0])
    figure3(payload, written[1])
    if payload.get("map"):
        figure_map(payload, out / "map.png")
        written.append(out / "map.png")
    example = payload["decisions_example"]
    title = f"wakman decisions on {example['mix']} ({_seed(payload)})"
    plot_decisions(example["decisions"], out / "decisions.png", title, payload["plan"]["duration_s"])
    written.append(out / "decisions.png")
    return written
