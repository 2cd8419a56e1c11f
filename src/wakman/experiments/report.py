"""Tables, figures and the markdown report of ``wakman reproduce``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from wakman.experiments.plots import _pyplot, plot_decisions, save_figure
from wakman.experiments.regret import regret_points

POLICIES = ("lru", "s3fifo", "wakman", "wakman-plus", "belady", "infinite")


def table1_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for m in payload["mixes"]:
        row = {
            "mix": m["name"],
            "single": m["fractions"][0],
            "multi": m["fractions"][1],
            "agentic": m["fractions"][2],
        }
        row.update({p: m["hit_rate"][p] for p in POLICIES})
        rows.append(row)
    return rows


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def figure1(payload: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    mixes = payload["mixes"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    xs = range(len(mixes))
    for policy in POLICIES:
        style = "--" if policy in ("belady", "infinite") else "-"
        ax.plot(xs, [m["hit_rate"][policy] for m in mixes], style, marker="o", ms=3, label=policy)
    ax.set_xticks(list(xs), [m["name"].split("-", 1)[1] for m in mixes], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("prefix-cache hit rate (tokens)")
    ax.set_title(f"Figure 1: hit rate across the 20 mixes ({payload['plan']['capacity']:,} blocks)")
    ax.grid(alpha=0.3)
    ax.legend(ncol=3, fontsize=8)
    save_figure(fig, path)


def figure3(payload: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    groups = list(dict.fromkeys(a["group"] for a in payload["ablations"]))
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3.6), squeeze=False)
    for ax, group in zip(axes[0], groups, strict=True):
        rows = [a for a in payload["ablations"] if a["group"] == group]
        xs = [int("".join(c for c in a["name"].split("-")[0] if c.isdigit())) for a in rows]
        for policy in ("lru", "s3fifo", "wakman", "wakman-plus"):
            ax.plot(xs, [a["hit_rate"][policy] for a in rows], marker="o", label=policy)
        ax.set_xscale("log", base=2)
        ax.set_title(group.replace("ablation-", ""), fontsize=9)
        ax.set_xlabel(
            "turns per session"
            if "turns" in group
            else "multi-turn gap (median s)"
            if "gap" in group
            else "input tokens per turn"
        )
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("hit rate")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Figure 3: ablations")
    save_figure(fig, path)


def write_report(payload: dict[str, Any], out: Path) -> None:
    rows = table1_rows(payload)
    with open(out / "table1.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    figure1(payload, out / "figure1.png")
    figure3(payload, out / "figure3.png")
    example = payload["decisions_example"]
    plot_decisions(example["decisions"], out / "decisions.png", f"wakman decisions on {example['mix']}")
    (out / "results.md").write_text(render_markdown(payload))


def render_markdown(payload: dict[str, Any], command: str = "wakman reproduce") -> str:
    s = payload["summary"]
    plan = payload["plan"]
    t1 = _markdown_table(
        ["mix", "single/multi/agentic", *POLICIES],
        [
            [
                m["name"],
                "/".join(f"{x:g}" for x in m["fractions"]),
                *[f"{m['hit_rate'][p]:.4f}" for p in POLICIES],
            ]
            for m in payload["mixes"]
        ],
    )
    regret = _markdown_table(
        [
            "policy",
            "mean regret (points)",
            "max regret (points)",
            "mean gain over LRU (points)",
            "mean gap to Belady (points)",
        ],
        [
            [
                p,
                f"{v['mean_regret_points']:.2f}",
                f"{v['max_regret_points']:.2f}",
                f"{v['mean_gain_over_lru_points']:+.2f}",
                f"{v['mean_gap_to_belady_points']:.2f}",
            ]
            for p, v in s["policies"].items()
        ],
    )
    paper = s["paper"]
    compare = _markdown_table(
        ["figure", "paper", "wakman (this run)"],
        [
            [
                "LRU / S3-FIFO wins",
                f"{paper['lru_wins']} / {paper['s3fifo_wins']}",
                f"{s['lru_wins']} / {s['s3fifo_wins']}",
            ],
            ["LRU worst loss", f"{paper['lru_worst_loss_pct']} %", f"{s['lru_worst_loss_pct']:.1f} %"],
            [
                "S3-FIFO worst loss",
                f"{paper['s3fifo_worst_loss_pct']} %",
                f"{s['s3fifo_worst_loss_pct']:.1f} %",
            ],
            [
                "WAKMan gain over LRU",
                f"+{paper['wakman_gain_over_lru_points']} points",
                f"{s['policies']['wakman']['mean_gain_over_lru_points']:+.2f} points",
            ],
            [
                "WAKMan median recovery (difference > 1 point)",
                f"{paper['wakman_median_recovered_pct']} %",
                _pct(s["wakman_median_recovered_pct"]) + f" over {s['wakman_mixes_over_one_point']} mixes",
            ],
            ["WAKMan-plus median recovery", "-", _pct(s["wakman-plus_median_recovered_pct"])],
        ],
    )
    caps = sorted({int(c) for m in payload["mixes"] for c in m["by_capacity"]})
    by_cap = _markdown_table(
        [
            "capacity (blocks)",
            "LRU wins",
            "S3-FIFO wins",
            *[f"{p} regret mean / max" for p in ("lru", "s3fifo", "wakman", "wakman-plus")],
        ],
        [[f"{c:,}", *_capacity_row(payload["mixes"], str(c))] for c in caps],
    )
    abl = _markdown_table(
        ["ablation", "single/multi/agentic", "lru", "s3fifo", "wakman", "wakman-plus", "winner"],
        [
            [
                a["name"],
                "/".join(f"{x:g}" for x in a["fractions"]),
                *[f"{a['hit_rate'][p]:.4f}" for p in ("lru", "s3fifo", "wakman", "wakman-plus")],
                max(("lru", "s3fifo"), key=lambda p: a["hit_rate"][p]),
            ]
            for a in payload["ablations"]
        ],
    )
    real = _markdown_table(
        ["trace", "mode", "capacity", "requests", *POLICIES],
        [
            [
                r["trace"],
                r["mode"],
                f"{r['capacity']:,}",
                f"{r['requests']:,}",
                *[f"{r['hit_rate'][p]:.4f}" for p in POLICIES],
            ]
            for r in payload["real_traces"]
        ],
    )
    differences = _differences(payload)
    capacity_note = _capacity_note(payload)
    return f"""# Reproduction of the WAKMan results

Generated by `{command}` (duration {plan["duration_s"]:g} s per mix at 1.5 requests/s, seed {plan["seed"]},
primary capacity {plan["capacity"]:,} blocks of 32 tokens; the simulator in serve mode with its default
server model). Hit rates are vLLM's metric: cached prompt tokens / prompt tokens.

## How the capacity was chosen

{capacity_note}

## Summary beside the paper

{compare}

## Why our figures differ from the paper's

{differences}

## Regret (against the better of LRU and S3-FIFO on each mix)

{regret}

### At other capacities

{by_cap}

## Table 1: hit rate per mix and policy

{t1}

![Figure 1](figure1.png)

## Figure 3: ablations (primary capacity)

{abl}

![Figure 3](figure3.png)

## WAKMan's decisions on one mix ({payload["decisions_example"]["mix"]})

![decisions](decisions.png)

## Real traces

{real}

The Mooncake chat trace (bundled, Apache-2.0) runs in serve mode; the Claude Code sessions
(kv-cache-tester, Apache-2.0) run in cache mode over the first {plan["claude_window_s"]:g} s of their
seeded timeline (their prompts average 122k tokens: serve mode would need a cluster, not one server).
"""


def _lead(row: dict[str, Any]) -> float:
    """LRU's lead over S3-FIFO in points (negative: S3-FIFO ahead)."""
    return 100 * (row["hit_rate"]["lru"] - row["hit_rate"]["s3fifo"])


def _capacity_note(payload: dict[str, Any]) -> str:
    """Why the primary capacity: every mix must be under pressure (LRU well below infinite)."""
    plan, mixes = payload["plan"], payload["mixes"]
    gaps = sorted(100 * (m["hit_rate"]["infinite"] - m["hit_rate"]["lru"]) for m in mixes)
    others = ", ".join(f"{c:,}" for c in plan["other_capacities"]) or "none"
    return (
        "The policies only differ where the cache is under pressure, so the primary capacity, "
        f"{plan['capacity']:,} blocks ({plan['capacity'] * 32:,} tokens), is the size at which every "
        "mix loses hits to eviction: LRU is below the infinite cache by "
        f"{gaps[0]:.1f} to {gaps[-1]:.1f} points (median {gaps[len(gaps) // 2]:.1f}) across the 20 mixes. "
        "The regret figures are repeated at "
        f"{others} blocks (stronger pressure, where S3-FIFO wins more mixes) below; "
        "docs/adaptive.md adds 12,000 blocks and other seeds."
    )


def _differences(payload: dict[str, Any]) -> str:
    """The explanations, with this run's numbers in them."""
    mixes, s = payload["mixes"], payload["summary"]

    def lru_wins(rows: list[dict[str, Any]]) -> int:
        return sum(m["hit_rate"]["lru"] > m["hit_rate"]["s3fifo"] for m in rows)

    agentic = [m for m in mixes if m["fractions"][2] > 0]
    other = [m for m in mixes if m["fractions"][2] == 0]
    single = [m for m in other if m["fractions"][0] >= 0.5]
    plus = s["policies"]["wakman-plus"]
    paper_mode = s["policies"]["wakman"]
    statics = s["policies"]["lru"], s["policies"]["s3fifo"]
    over = [(m["name"], regret_points(m["hit_rate"], "wakman-plus")) for m in mixes]
    over = [(n, r) for n, r in over if r > 0.5]
    flips = []
    for group in dict.fromkeys(a["group"] for a in payload["ablations"]):
        rows = [a for a in payload["ablations"] if a["group"] == group]
        winners = [max(("lru", "s3fifo"), key=lambda p, a=a: a["hit_rate"][p]) for a in rows]
        if len(set(winners)) > 1:
            steps = ", ".join(f"{a['name'].split('-')[0]}: {w}" for a, w in zip(rows, winners, strict=True))
            flips.append(f"{group.replace('ablation-', '')} ({steps})")
    gaps = [a for a in payload["ablations"] if a["group"] == "ablation-gap-single-multi-50"]
    gap_note = (
        "the gap ablation at 50/50 single/multi shows the winner moving from LRU to S3-FIFO as the "
        "median gap grows ("
        + ", ".join(f"{a['name'].split('-')[0][3:]} s: LRU {_lead(a):+.1f}" for a in gaps)
        + " points against S3-FIFO)."
        if gaps
        else "the generator's `multi_turn.gap_s` is the knob (`--set`)."
    )
    run = payload.get("run", {})
    lines = [
        f"- **Who wins.** LRU wins {lru_wins(agentic)} of the {len(agentic)} mixes that contain agentic "
        f"sessions and {lru_wins(other)} of the {len(other)} without; S3-FIFO wins "
        f"{len(single) - lru_wins(single)} of the {len(single)} where single-turn sessions are at least "
        "half. A mix here is a fraction of new *sessions*; an agentic session has 12 turns at the "
        "median (multi-turn 4, single-turn 1) and a growing context, so agentic steps carry most "
        "requests and blocks in every mix that has agentic sessions at all, and agentic traffic "
        "favours LRU (short reuse, growing prefixes). Our multi-turn profile (median 60 s human "
        "gaps, 4 turns) also favours LRU at the primary capacity: its reuse distance fits in the "
        "cache. The paper's multi-turn traffic, which favoured S3-FIFO, had longer human gaps: "
        + gap_note
        + " The paper's 8 / 12 split is a property of its workload, not of the policies.",
        "- **Winner flips in the ablations.** "
        + (
            "At a fixed mix the winner changes along " + "; ".join(flips) + "."
            if flips
            else "No ablation sweep changes the winner at this capacity."
        ),
        f"- **WAKMan's gain over LRU** is {paper_mode['mean_gain_over_lru_points']:+.2f} points (paper "
        "+5): where LRU already wins most mixes an adaptive manager can only gain on the few "
        "single-turn ones. Paper mode has lower mean and worst-case regret than both static "
        f"policies ({paper_mode['mean_regret_points']:.2f} / {paper_mode['max_regret_points']:.2f} "
        f"points against LRU's {statics[0]['mean_regret_points']:.2f} / "
        f"{statics[0]['max_regret_points']:.2f} and S3-FIFO's {statics[1]['mean_regret_points']:.2f} / "
        f"{statics[1]['max_regret_points']:.2f}); its worst mix is pure single-turn traffic, where it "
        "serves its first 15 minutes with LRU.",
        "- **Paper mode's score.** Its shadows score vLLM's hit rate (prompt tokens hit under the "
        "first-miss rule), the metric the paper reports. Counting hits per block instead (blocks "
        "after a request's first miss count too, though vLLM never reuses them) makes the shadows "
        "prefer S3-FIFO on agentic mixes that the live cache wins with LRU "
        "(`benchmarks/tune_plus.py`, docs/adaptive.md).",
        f"- **wakman-plus** has mean regret {plus['mean_regret_points']:.2f} and max "
        f"{plus['max_regret_points']:.2f} points; "
        + (
            "it is within 0.5 point on every mix."
            if not over
            else "over 0.5 point on "
            + ", ".join(f"{n} ({r:.2f})" for n, r in over)
            + ": on pure single-turn traffic the policies only differ once the cache is full, and "
            "where LRU and S3-FIFO are close over the hour, the better one changes from one quarter "
            "hour to the next and every switch costs a little (S3-FIFO rebuilds its queues from LRU's order)."
        ),
        f"- **Run time.** This run took {run.get('wall_s', 0):.0f} s with {run.get('jobs', '?')} worker "
        "processes (the goal: under 300 s on 2 cores; `benchmarks/bench_reproduce.py`).",
    ]
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} %"


def _capacity_row(mixes: list[dict[str, Any]], cap: str) -> list[str]:
    rows = [m["by_capacity"][cap] for m in mixes if cap in m["by_capacity"]]
    lru_wins = sum(r["lru"] > r["s3fifo"] for r in rows)
    out = [str(lru_wins), str(len(rows) - lru_wins)]
    for p in ("lru", "s3fifo", "wakman", "wakman-plus"):
        regrets = [regret_points(r, p) for r in rows]
        out.append(f"{sum(regrets) / len(regrets):.2f} / {max(regrets):.2f}")
    return out
