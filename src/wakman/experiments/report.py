"""The markdown report and Table 1's CSV of ``wakman reproduce``, rendered from results.json's
payload. Every sentence is computed from the run: a claim is printed only where this run's
numbers hold it, and then with them; figures are linked only when they were drawn."""

from __future__ import annotations

import csv
import itertools
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from wakman.experiments.regret import ALL_POLICIES as POLICIES
from wakman.experiments.regret import (
    BEHIND_POINTS,
    NEW,
    ONLINE,
    TIE,
    behind_summary,
    beside,
    lru_lead_points,
    regret_points,
    static_winner,
)
from wakman.experiments.summary import require_finite
from wakman.experiments.workload_map import AXES, MAP_TIE_POINTS
from wakman.simulation.server import KEEP_UP_STEP, KEEP_UP_UTILIZATION, ServerModel
from wakman.traces.io import atomic_path

TYPES = ("single_turn", "multi_turn", "agentic")
TITLE = "# Reproduction of the WAKMan results"  # the report's first line


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


def write_table1(payload: dict[str, Any], path: Path) -> None:
    rows = table1_rows(payload)
    with atomic_path(path) as target, open(target, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _mix(fractions: list[float]) -> str:
    return "/".join(f"{x:g}" for x in fractions)


def _display(policy: str) -> str:
    return {"lru": "LRU", "s3fifo": "S3-FIFO"}.get(policy, policy)


def _image(name: str, title: str, figures: set[str]) -> str:
    return (
        f"![{title}]({name})" if name in figures else f"*({title}: not drawn, matplotlib is not installed)*"
    )


def render_markdown(
    payload: dict[str, Any], command: str = "wakman reproduce", figures: set[str] | None = None
) -> str:
    """The report; ``figures`` names the PNGs drawn beside it (none: figures are not linked)."""
    figures = figures or set()
    require_finite(
        [*payload["mixes"], *payload["ablations"], *payload["real_traces"], *payload.get("map", [])]
    )
    s = payload["summary"]
    t1 = _markdown_table(
        ["mix", "single/multi/agentic", *POLICIES],
        [
            [m["name"], _mix(m["fractions"]), *[f"{m['hit_rate'][p]:z.4f}" for p in POLICIES]]
            for m in payload["mixes"]
        ],
    )
    regret = _markdown_table(
        [
            "policy",
            "mean regret (points)",
            "max regret (points)",
            "mean gain over LRU (points)",
            "mean gap to Belady: Belady - policy (points)",
        ],
        [
            [
                p,
                f"{v['mean_regret_points']:z.2f}",
                f"{v['max_regret_points']:z.2f}",
                f"{v['mean_gain_over_lru_points']:+z.2f}",
                f"{v['mean_gap_to_belady_points']:z.2f}",
            ]
            for p, v in s["policies"].items()
        ],
    )
    sections = [
        TITLE,
        _header(payload, command),
        "## How the capacity was chosen",
        _capacity_note(payload),
        "## Summary beside the paper",
        _comparison(s),
        "## What this run shows",
        _findings(payload),
        "## Regret (against the better of LRU and S3-FIFO on each mix)",
        regret,
    ]
    caps = sorted({int(c) for m in payload["mixes"] for c in m["by_capacity"]})
    if len(caps) > 1:
        sections += ["### At other capacities", _capacity_table(payload["mixes"], caps)]
    for policy, per_capacity in s.get("new_policies", {}).items():
        if per_capacity:
            sections += [
                f"## The hash-chain policy ({policy}) against the better static policy and Belady",
                _new_policy_section(payload, policy, per_capacity),
            ]
    for label, per_capacity in s.get("hint_mode", {}).items():
        if per_capacity:
            sections += [
                f"## Hint mode ({label}): told session ids and ends",
                _hint_section(payload, label, per_capacity),
            ]
    if any("prefill_tokens_saved" in m for m in payload["mixes"]):
        sections += ["## What the serving engineer pays for (primary capacity)", _serving_cost(payload)]
    sections += [
        "## Table 1: hit rate per mix and policy",
        t1,
        _image("figure1.png", "Figure 1", figures),
        "## Figure 3: ablations (primary capacity)",
        _ablation_table(payload["ablations"], (*NEW, *s.get("hint_mode", {}))),
        _image("figure3.png", "Figure 3", figures),
    ]
    if payload.get("map"):
        sections += ["## The map: where each static policy wins", _map_section(payload, figures)]
    sections += [
        f"## WAKMan's decisions on one mix ({payload['decisions_example']['mix']})",
        _decisions_note(payload),
        _image("decisions.png", "decisions", figures),
    ]
    if payload["real_traces"]:
        sections += ["## Real traces", _real_section(payload)]
    return "\n\n".join(sections) + "\n"


def _header(payload: dict[str, Any], command: str) -> str:
    plan, s = payload["plan"], payload["summary"]
    rate = payload.get("workload", {}).get("rate")
    block = payload.get("workload", {}).get("block_tokens")
    kept = s.get("serve_runs", 0) - s.get("saturated_runs", 0)
    text = (
        f"Generated by `{command}` (duration {plan['duration_s']:g} s per mix"
        + (f" at {rate:g} requests/s" if rate else "")
        + f", seed {plan['seed']}, primary capacity {plan['capacity']:,} blocks"
        + (f" of {block:,} tokens" if block else "")
        + "; the simulator "
        "in serve mode with its default server model). The seed is that of every generated trace (the mixes, "
        "the ablations, the map); the real traces are read from their files and do not depend on it. Hit "
        "rates are vLLM's metric: cached prompt tokens / prompt tokens."
    )
    if s.get("serve_runs"):
        text += (
            f" The modelled server kept up in {kept} of the {s['serve_runs']} serve-mode runs of the mixes"
        )
        if kept == s["serve_runs"]:
            text += "."
        else:
            which = _saturated_list(payload["mixes"], plan["capacity"])
            text += (
                f"; {s['saturated_runs']} saturated (`saturated` in results.json; docs/simulator.md), so "
                f"their hit rates are those of an overloaded queue: {which}."
            )
    if s.get("hint_mode_serve_runs"):
        runs, saturated = s["hint_mode_serve_runs"], s["hint_mode_saturated_runs"]
        text += (
            f" Hint mode's {runs} serve-mode runs of the mixes (not counted above): "
            f"{runs - saturated} kept up"
        )
        if saturated:
            which = "; ".join(
                f"{m['name']} at {int(c):,} blocks"
                for m in payload["mixes"]
                for c, flag in m.get("hint_saturated", {}).items()
                if flag
            )
            text += f", {saturated} saturated ({which})"
        text += "."
    return text


def _saturation_by_capacity(mix: dict[str, Any], primary: int) -> dict[str, dict[str, bool]]:
    """A mix's saturation flags by capacity (blocks, as a string) and policy: the primary capacity's
    runs are ``saturated``, the others' ``saturated_by_capacity``."""
    return {str(primary): mix.get("saturated", {}), **mix.get("saturated_by_capacity", {})}


def _saturated_list(mixes: list[dict[str, Any]], primary: int) -> str:
    """``mix at N blocks (policies)`` for every saturated run of the mixes."""
    out = []
    for m in mixes:
        for capacity, flags in _saturation_by_capacity(m, primary).items():
            hit = [p for p, flag in flags.items() if flag]
            if hit:
                which = "every policy" if len(hit) == len(flags) else ", ".join(hit)
                out.append(f"{m['name']} at {int(capacity):,} blocks ({which})")
    return "; ".join(out)


def _capacity_note(payload: dict[str, Any]) -> str:
    """Why the primary capacity: every mix should be under pressure (LRU well below infinite)."""
    plan, mixes = payload["plan"], payload["mixes"]
    gaps = sorted(100 * (m["hit_rate"]["infinite"] - m["hit_rate"]["lru"]) for m in mixes)
    under = sum(g >= 1.0 for g in gaps)
    block = payload.get("workload", {}).get("block_tokens")
    tokens = f" ({plan['capacity'] * block:,} tokens)" if block else ""
    text = (
        "The policies only differ where the cache is under pressure. At the primary capacity, "
        f"{plan['capacity']:,} blocks{tokens}, LRU is below the infinite cache by "
        f"{gaps[0]:z.1f} to {gaps[-1]:z.1f} points (median {statistics.median(gaps):z.1f}) across the "
        f"{len(mixes)} mixes; {under} of them lose at least a point to eviction."
    )
    if plan["other_capacities"]:
        others = ", ".join(f"{c:,}" for c in plan["other_capacities"])
        text += f" The regret figures are repeated at {others} blocks below."
    return text


def _comparison(s: dict[str, Any]) -> str:
    paper = s["paper"]
    return _markdown_table(
        ["figure", "paper", "wakman (this run)"],
        [
            [
                "LRU / S3-FIFO wins",
                f"{paper['lru_wins']} / {paper['s3fifo_wins']}",
                f"{s['lru_wins']} / {s['s3fifo_wins']}" + _ties(s.get("static_ties", 0)),
            ],
            ["LRU worst loss", f"{paper['lru_worst_loss_pct']} %", _pct(s["lru_worst_loss_pct"], 1)],
            [
                "S3-FIFO worst loss",
                f"{paper['s3fifo_worst_loss_pct']} %",
                _pct(s["s3fifo_worst_loss_pct"], 1),
            ],
            [
                "WAKMan gain over LRU",
                f"+{paper['wakman_gain_over_lru_points']} points",
                f"{s['policies']['wakman']['mean_gain_over_lru_points']:+z.2f} points",
            ],
            [
                "WAKMan median recovery (difference > 1 point)",
                f"{paper['wakman_median_recovered_pct']} %",
                _pct(s["wakman_median_recovered_pct"]) + f" over {s['wakman_mixes_over_one_point']} mixes",
            ],
            ["WAKMan-plus median recovery", "-", _pct(s["wakman-plus_median_recovered_pct"])],
        ],
    )


def _ties(n: int) -> str:
    """`` (n tied)`` where mixes tie (neither static policy ahead: no win for either), else nothing."""
    return f" ({n} tied)" if n else ""


def _compare(a: float, b: float, decimals: int = 2) -> str:
    """How ``a`` compares with ``b`` as the report prints them (to ``decimals``): two values that
    print alike are equal, so the sentence never reads "0.72 is lower than 0.72"."""
    a, b = round(a, decimals), round(b, decimals)
    return "lower than" if a < b else "higher than" if a > b else "equal to"


def _findings(payload: dict[str, Any]) -> str:
    """The explanations, each stated only where this run's numbers hold it."""
    mixes, s = payload["mixes"], payload["summary"]
    lines = [_who_wins(payload)]
    share = _agentic_share(mixes)
    if share is not None:
        lines.append(share)
    gap = _gap_sentence(payload)
    if gap:
        lines.append(gap)
    flips = _ablation_flips(payload["ablations"])
    lines.append(
        "- **Winner flips in the ablations.** "
        + (
            f"At a fixed mix the winner changes along {'; '.join(flips)}."
            if flips
            else "No ablation sweep changes the winner at this capacity."
        )
    )
    paper_mode, lru, s3 = s["policies"]["wakman"], s["policies"]["lru"], s["policies"]["s3fifo"]
    worst = max(mixes, key=lambda m: regret_points(m["hit_rate"], "wakman"))
    adaptive = payload.get("adaptive", {}).get("wakman")
    worst_regret = regret_points(worst["hit_rate"], "wakman")
    worst_note = f"its worst mix is {worst['name']} ({_mix(worst['fractions'])}, {worst_regret:z.2f} points)"
    worst_winner = static_winner(worst["hit_rate"])
    if adaptive and worst_winner not in (TIE, adaptive["start_policy"]):
        worst_note += (
            f", where {_display(worst_winner)} wins and the manager serves its first "
            f"{adaptive['first_decision_s']:g} s with {_display(adaptive['start_policy'])}"
        )
    lines.append(
        "- **WAKMan (paper mode)**: its mean gain over LRU is "
        f"{paper_mode['mean_gain_over_lru_points']:+z.2f} "
        f"points (paper +{s['paper']['wakman_gain_over_lru_points']}). Its mean regret, "
        f"{paper_mode['mean_regret_points']:z.2f} "
        f"points, is {_compare(paper_mode['mean_regret_points'], lru['mean_regret_points'])} LRU's "
        f"({lru['mean_regret_points']:z.2f}) and "
        f"{_compare(paper_mode['mean_regret_points'], s3['mean_regret_points'])} "
        f"S3-FIFO's ({s3['mean_regret_points']:z.2f}); its worst-case regret, "
        f"{paper_mode['max_regret_points']:z.2f}, is "
        f"{_compare(paper_mode['max_regret_points'], lru['max_regret_points'])} LRU's "
        f"({lru['max_regret_points']:z.2f}) "
        f"and {_compare(paper_mode['max_regret_points'], s3['max_regret_points'])} S3-FIFO's "
        f"({s3['max_regret_points']:z.2f}); {worst_note}."
    )
    plus = s["policies"]["wakman-plus"]
    over = [(m["name"], regret_points(m["hit_rate"], "wakman-plus")) for m in mixes]
    over = [(n, r) for n, r in over if r > BEHIND_POINTS]
    lines.append(
        f"- **wakman-plus** has mean regret {plus['mean_regret_points']:z.2f} and max "
        f"{plus['max_regret_points']:z.2f} "
        "points; "
        + (
            f"it is within {BEHIND_POINTS:g} point of the better static policy on every mix."
            if not over
            else f"it is more than {BEHIND_POINTS:g} point behind on "
            + ", ".join(f"{n} ({beside(r, BEHIND_POINTS, sign='')})" for n, r in over)
            + "."
        )
    )
    run = payload.get("run", {})
    if run.get("wall_s"):
        lines.append(
            f"- **Run time.** This run took {run['wall_s']:z.0f} s with {run.get('jobs', '?')} worker "
            "processes on "
            f"{run.get('cpus', '?')} CPUs."
        )
    return "\n".join(lines)


def _who_wins(payload: dict[str, Any]) -> str:
    mixes = payload["mixes"]
    agentic = [m for m in mixes if m["fractions"][2] > 0]
    other = [m for m in mixes if m["fractions"][2] == 0]
    single = [m for m in other if m["fractions"][0] >= 0.5]

    def wins(policy: str, rows: list[dict[str, Any]]) -> int:
        return sum(static_winner(m["hit_rate"]) == policy for m in rows)

    text = (
        f"- **Who wins.** LRU wins {wins('lru', agentic)} of the {len(agentic)} mixes that contain agentic "
        "sessions "
        f"and {wins('lru', other)} of the {len(other)} without; S3-FIFO wins "
        f"{wins('s3fifo', single)} of the "
        f"{len(single)} without agentic sessions where single-turn sessions are at least half."
    )
    tied = [m["name"] for m in mixes if static_winner(m["hit_rate"]) == TIE]
    if tied:
        text += f" LRU and S3-FIFO tie (equal hit rates, a win for neither) on {', '.join(tied)}."
    defaults = payload.get("workload")
    pure_multi = next((m for m in mixes if m["fractions"] == [0.0, 1.0, 0.0]), None)
    if defaults and pure_multi is not None:
        lead = lru_lead_points(pure_multi["hit_rate"])
        winner = static_winner(pure_multi["hit_rate"])
        text += (
            f" The generator's multi-turn sessions (median {defaults['turns_median']['multi_turn']:g} turns, "
            f"{defaults['gap_s_median']['multi_turn']:g} s human gaps) "
            + ("favour neither LRU nor S3-FIFO" if winner == TIE else f"favour {_display(winner)}")
            + f" at the primary capacity: on {pure_multi['name']} LRU leads S3-FIFO by "
            f"{beside(lead, 0.0)} points."
        )
    return text


def _agentic_share(mixes: list[dict[str, Any]]) -> str | None:
    """How much of each agentic mix's traffic its agentic sessions carry (requests, prompt blocks)."""
    rows = [
        m for m in mixes if m["fractions"][2] > 0 and "requests_by_type" in m and 0 < m["fractions"][2] < 1
    ]
    if not rows:
        return None
    req = [m["requests_by_type"].get("agentic", 0) / m["requests"] for m in rows]
    blocks = [m["blocks_by_type"].get("agentic", 0) / max(1, sum(m["blocks_by_type"].values())) for m in rows]
    fewest = min(m["fractions"][2] for m in rows)
    low = [i for i, m in enumerate(rows) if m["fractions"][2] == fewest]  # every mix at the fewest
    shares = [100 * req[i] for i in low]
    at_fewest = (
        f"{rows[low[0]]['name']}: {shares[0]:z.0f} %"
        if len(low) == 1
        else f"{len(low)} mixes: {min(shares):z.0f}-{max(shares):z.0f} %"
    )
    return (
        f"- **Sessions are not requests.** A mix is a fraction of new sessions. In the {len(rows)} "
        "mixes that "
        f"combine agentic sessions with others, agentic sessions carry "
        f"{100 * min(req):z.0f}-{100 * max(req):z.0f} % "
        f"of the requests and {100 * min(blocks):z.0f}-{100 * max(blocks):z.0f} % of the prompt blocks "
        f"looked up (at {100 * fewest:g} % of sessions, {at_fewest} of the requests)."
    )


def _gap_sentence(payload: dict[str, Any]) -> str | None:
    rows = [a for a in payload["ablations"] if a["group"] == "ablation-gap-single-multi-50"]
    if not rows:
        return None
    steps = ", ".join(
        f"{a['name'].split('-')[0][3:]} s: LRU {lru_lead_points(a['hit_rate']):+z.1f}" for a in rows
    )
    winners = [static_winner(a["hit_rate"]) for a in rows]
    changes = sum(a != b for a, b in itertools.pairwise(winners))
    if changes == 0:
        verdict = (
            "ties LRU and S3-FIFO at every gap"
            if winners[0] == TIE
            else f"leaves {_display(winners[0])} ahead at every gap"
        )
    elif changes == 1 and TIE not in winners:
        verdict = (
            f"moves the winner from {_display(winners[0])} to {_display(winners[-1])} as the median gap grows"
        )
    else:
        verdict = (
            "changes the winner more than once as the median gap grows ("
            + ", ".join(_display(w) for w in winners)
            + ")"
        )
    return (
        f"- **The multi-turn human gap** (ablation at 50/50 single/multi) {verdict} ({steps} points "
        "against S3-FIFO)."
    )


def _ablation_flips(ablations: list[dict[str, Any]]) -> list[str]:
    flips = []
    for group in dict.fromkeys(a["group"] for a in ablations):
        rows = [a for a in ablations if a["group"] == group]
        winners = [static_winner(a["hit_rate"]) for a in rows]
        if len(set(winners)) > 1:
            steps = ", ".join(
                f"{a['name'].split('-')[0]}: {w}"
                + (" (saturated server)" if any(a.get("saturated", {}).values()) else "")
                for a, w in zip(rows, winners, strict=True)
            )
            flips.append(f"{group.replace('ablation-', '')} ({steps})")
    return flips


def _ablation_table(ablations: list[dict[str, Any]], gains: tuple[str, ...] = NEW) -> str:
    """Each ablation's hit rates, its static winner, the gain over that winner (points) of each of
    ``gains`` (the new policies, hint mode) that the ablations ran, and whether the server kept up."""
    new = [p for p in gains if ablations and all(p in a["hit_rate"] for a in ablations)]
    return _markdown_table(
        [
            "ablation",
            "single/multi/agentic",
            *ONLINE,
            "winner",
            *[f"{p} gain (points)" for p in new],
            "kept up",
        ],
        [
            [
                a["name"],
                _mix(a["fractions"]),
                *[f"{a['hit_rate'][p]:z.4f}" for p in ONLINE],
                static_winner(a["hit_rate"]),
                *[f"{-regret_points(a['hit_rate'], p):+z.2f}" for p in new],
                _kept_up(a),
            ]
            for a in ablations
        ],
    )


def _kept_up(row: dict[str, Any]) -> str:
    """``yes``, or ``no`` with the highest prefill utilization of the row's saturated runs."""
    if "saturated" not in row:
        return "-"
    if not any(row["saturated"].values()):
        return "yes"
    util = max(u for p, u in row["prefill_utilization"].items() if row["saturated"][p] and u is not None)
    return f"no (prefill utilization {util:z.2f})"


def _map_winner(cell: dict[str, Any]) -> str:
    """A map cell's static winner, a lead of at most ``MAP_TIE_POINTS`` being a tie."""
    return static_winner(cell["hit_rate"], MAP_TIE_POINTS)


def _winners(at: dict[tuple[float, int], dict[str, Any]], keys: list[tuple[float, int]]) -> set[str]:
    """The static winners of the map cells ``keys`` (axis value, capacity), ties left out."""
    return {_map_winner(at[k]) for k in keys} - {TIE}


def _map_section(payload: dict[str, Any], figures: set[str]) -> str:
    cells = payload["map"]
    parts = []
    for name in dict.fromkeys(c["axis"] for c in cells):
        mine = [c for c in cells if c["axis"] == name]
        values = sorted({c["value"] for c in mine})
        capacities = sorted({c["capacity"] for c in mine})
        at = {(c["value"], c["capacity"]): c for c in mine}
        axis = AXES.get(name)
        label = f"{axis.label} at {_mix(list(axis.mix))} single/multi/agentic" if axis else name
        table = _markdown_table(
            [label.split(" at ")[0], *[f"{c:,} blocks" for c in capacities]],
            [
                [
                    f"{v:g}",
                    *[
                        f"{_map_winner(at[v, c])} {at[v, c]['lead_points']:+.2f}; wakman "
                        f"{_points(at[v, c]['regret_points']['wakman'])}, "
                        f"plus {_points(at[v, c]['regret_points']['wakman-plus'])}"
                        + (" (saturated)" if at[v, c].get("saturated") else "")
                        for c in capacities
                    ],
                ]
                for v in values
            ],
        )
        flips = [c for c in capacities if len(_winners(at, [(v, c) for v in values])) > 1]
        verdict = (
            f"The winner changes along this axis at {', '.join(f'{c:,}' for c in flips)} blocks."
            if flips
            else "The winner is the same along this axis at every capacity."
        )
        by_cap = [v for v in values if len(_winners(at, [(v, c) for c in capacities])) > 1]
        if by_cap:
            short = label.split(" (")[0]
            at_values = ", ".join(f"{v:g}" for v in by_cap)
            verdict += f" At {short} = {at_values}, the cache size alone changes the winner."
        parts.append(f"**{label}.** {verdict}\n\n{table}")
    worst = {p: max(c["regret_points"][p] for c in cells) for p in ("wakman", "wakman-plus")}
    mean = {p: statistics.mean(c["regret_points"][p] for c in cells) for p in ("wakman", "wakman-plus")}
    lead = [abs(c["lead_points"]) for c in cells]
    intro = (
        "Each cell: the static winner and LRU's lead over S3-FIFO (points; negative: S3-FIFO ahead), "
        f"then each manager's regret (points behind the better static policy); a lead of at most "
        f"{MAP_TIE_POINTS:g} point is a tie here (elsewhere only equal hit rates are). Over the "
        f"{len(cells)} cells LRU and S3-FIFO "
        f"differ by {min(lead):.2f}-{max(lead):.2f} points; wakman's regret is "
        f"{mean['wakman']:z.2f} on average "
        f"(worst {worst['wakman']:z.2f}), wakman-plus's {mean['wakman-plus']:z.2f} (worst "
        f"{worst['wakman-plus']:z.2f})."
    )
    return "\n\n".join([intro, *parts, _image("map.png", "map of the winner", figures)])


def _decisions_note(payload: dict[str, Any]) -> str:
    decisions = payload["decisions_example"]["decisions"]
    switches = sum(d["switched"] for d in decisions)
    if not decisions:
        return "The manager took no decision in this run (the traces end before its first decision)."
    return (
        f"{len(decisions)} decision{'s' if len(decisions) != 1 else ''}, {switches} of them "
        f"switch{'es' if switches != 1 else ''}; the mix with the most switches is shown."
    )


def _real_section(payload: dict[str, Any]) -> str:
    rows = payload["real_traces"]
    table = _markdown_table(
        ["trace", "mode", "capacity (blocks)", "block (tokens)", "requests", *POLICIES, "kept up"],
        [
            [
                r["trace"],
                r["mode"],
                f"{r['capacity']:,}",
                " / ".join(str(b) for b in r.get("block_tokens", [])) or "n/a",
                f"{r['requests']:,}",
                *[f"{r['hit_rate'][p]:z.4f}" for p in POLICIES],
                _kept_up(r),
            ]
            for r in rows
        ],
    )
    notes = [table]
    sized = [r for r in rows if len(r.get("block_tokens", [])) == 1]
    if sized:
        notes.append(
            "A capacity counts the trace's own blocks, whose size its file fixes (the hashes are per "
            "block): "
            + "; ".join(
                f"{trace} {block:,} tokens a block, so {_and(f'{c:,}' for c in caps)} blocks hold "
                f"{_and(f'{c * block:,}' for c in caps)} tokens"
                for trace, block, caps in _capacities_by_trace(sized)
            )
            + "."
        )
    serve = [r for r in rows if r["mode"] == "serve"]
    for trace in dict.fromkeys(r["trace"] for r in serve):
        mine = [r for r in serve if r["trace"] == trace]
        server = mine[0]["server"]
        util = max(u for r in mine for u in r["prefill_utilization"].values() if u is not None)
        saturated = sum(sum(r["saturated"].values()) for r in mine)
        runs = sum(len(r["saturated"]) for r in mine)
        notes.append(
            f"{trace} runs in serve mode on a server sized to keep up with it "
            "(`ServerModel.keeping_up`: prefill "
            f"{server['prefill_tokens_per_s']:,.0f} tokens/s, "
            + (
                f"the default, already at least {1 / KEEP_UP_UTILIZATION:g} times its prompt tokens per "
                "second"
                if server["prefill_tokens_per_s"] <= ServerModel.prefill_tokens_per_s
                else f"the next multiple of {KEEP_UP_STEP:,.0f} above {1 / KEEP_UP_UTILIZATION:g} times its "
                "prompt tokens per second"
            )
            + f"; decode {server['decode_tokens_per_s']:g} tokens/s per sequence, "
            f"{server['max_running']} "
            f"sequences at most). Its prefill lane is at most {util:z.2f} busy, and {runs - saturated} "
            f"of {runs} "
            "runs kept up."
        )
    for trace in dict.fromkeys(r["trace"] for r in rows if r["mode"] == "cache"):
        r = next(r for r in rows if r["trace"] == trace)
        notes.append(
            f"{trace} runs in cache mode over all {r['requests']:,} requests ({r['span_s'] / 3600:z.1f} "
            "h of its "
            f"timeline; prompts average {r['mean_prompt_tokens']:,.0f} tokens)."
            + (
                f" Its conversations start as the kv-cache-tester reader's seeded Poisson process, at the "
                f"reader's seed {r['arrival_seed']} whatever the run's seed."
                if "arrival_seed" in r
                else ""
            )
        )
    return "\n\n".join(notes)


def _capacities_by_trace(rows: list[dict[str, Any]]) -> list[tuple[str, int, list[int]]]:
    """(trace, its one block size in tokens, its capacities in blocks), in row order."""
    out: dict[str, tuple[int, list[int]]] = {}
    for r in rows:
        out.setdefault(r["trace"], (r["block_tokens"][0], []))[1].append(r["capacity"])
    return [(trace, block, caps) for trace, (block, caps) in out.items()]


def _and(items: Iterable[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _points(value: float) -> str:
    """One decimal, without a minus sign on what rounds to zero."""
    return f"{value:z.1f}"


def _pct(value: float | None, decimals: int = 0) -> str:
    return "n/a" if value is None else f"{value:z.{decimals}f} %"


def _capacity_table(mixes: list[dict[str, Any]], caps: list[int]) -> str:
    return _markdown_table(
        [
            "capacity (blocks)",
            "LRU wins",
            "S3-FIFO wins",
            "ties",
            *[f"{p} regret mean / max" for p in ONLINE],
        ],
        [[f"{c:,}", *_capacity_row(mixes, str(c))] for c in caps],
    )


def _capacity_row(mixes: list[dict[str, Any]], cap: str) -> list[str]:
    rows = [m["by_capacity"][cap] for m in mixes if cap in m["by_capacity"]]
    winners = [static_winner(r) for r in rows]
    out = [str(winners.count("lru")), str(winners.count("s3fifo")), str(winners.count(TIE))]
    for p in ONLINE:
        regrets = [regret_points(r, p) for r in rows]
        out.append(f"{sum(regrets) / len(regrets):z.2f} / {max(regrets):z.2f}")
    return out


GOAL_GAIN_POINTS, GOAL_CLOSED_PCT, GOAL_WORST_POINTS = 3.0, 30.0, -BEHIND_POINTS


def _new_policy_section(payload: dict[str, Any], policy: str, per_capacity: dict[str, Any]) -> str:
    """Gain over the better static policy per capacity, the share of the gap to Belady it closes,
    and each real trace; the goal (+3 points, 30 % of the gap, never 0.5 point below) is checked."""
    saturated = {c: _saturated_mixes(payload, policy, c) for c in per_capacity}
    table = _markdown_table(
        [
            "capacity (blocks)",
            "mixes",
            "mean gain (points)",
            "worst mix (gain)",
            "mean gap to Belady: Belady - better static (points)",
            "gap closed",
            f"mixes > {BEHIND_POINTS:g} below",
            "mixes whose server saturated",
        ],
        [
            [
                f"{int(c):,}",
                str(v["mixes"]),
                beside(v["mean_gain_points"], GOAL_GAIN_POINTS),  # as the sentence gives them (_shortfall)
                f"{v['worst_mix']} ({beside(v['worst_gain_points'], GOAL_WORST_POINTS)}"
                + (", saturated server)" if v["worst_mix"] in saturated[c] else ")"),
                f"{v['mean_gap_to_belady_points']:z.2f}",
                "n/a"
                if v["gap_closed_pct"] is None
                else beside(v["gap_closed_pct"], GOAL_CLOSED_PCT, 1, "") + " %",
                str(len(v["mixes_over_half_point_below"])),
                str(len(saturated[c])),
            ]
            for c, v in per_capacity.items()
        ],
    )
    met = [
        c
        for c, v in per_capacity.items()
        if v["mean_gain_points"] >= GOAL_GAIN_POINTS
        and (v["gap_closed_pct"] or 0) >= GOAL_CLOSED_PCT
        and v["worst_gain_points"] >= GOAL_WORST_POINTS
    ]
    missed = [c for c in per_capacity if c not in met]
    verdict = (
        f"Gain is {policy}'s hit rate minus the better of LRU and S3-FIFO on each mix. On the mixes, the "
        f"goal (mean gain at least +{GOAL_GAIN_POINTS:g} points, at least {GOAL_CLOSED_PCT:g} % of the gap "
        f"to Belady closed, never more than {-GOAL_WORST_POINTS:g} point below) is "
        + (f"met at {', '.join(f'{int(c):,}' for c in met)} blocks" if met else "met at no capacity")
        + (
            " and missed at "
            + "; ".join(f"{int(c):,} blocks ({_shortfall(per_capacity[c], saturated[c])})" for c in missed)
            + "."
            if missed
            else "."
        )
    )
    # "never more than half a point below" on every mix, real trace and ablation that ran the policy
    behind = [
        f"{_flag_saturated(name, saturated[c])} at {int(c):,} blocks"
        for c, v in per_capacity.items()
        for name in v["mixes_over_half_point_below"]
    ]
    if any(saturated.values()):
        verdict += (
            " Runs whose modelled server saturated (an overloaded queue's hit rates; docs/simulator.md): "
            + "; ".join(
                f"{len(names)} of the mixes at {int(c):,} blocks" for c, names in saturated.items() if names
            )
            + "."
        )
    real = behind_summary(
        [
            {"name": f"{r['trace']} at {r['capacity']:,} blocks", "hit_rate": r["hit_rate"]}
            for r in payload["real_traces"]
        ],
        policy,
    )
    if real is not None:
        verdict += (
            " On the real traces its gain is "
            + "; ".join(f"{n} {g:+z.2f}" for n, g in real["gain_points"].items())
            + " points."
        )
        behind += real["over_half_point_below"]
    ablations = behind_summary(payload.get("ablations", []), policy)
    if ablations is None:
        verdict += " The ablations do not run it." if payload.get("ablations") else ""
    else:
        flagged = set(ablations["saturated"])

        def shown(name: str) -> str:
            return _flag_saturated(name, flagged)

        below = ablations["over_half_point_below"]
        verdict += (
            f" On the {ablations['rows']} ablation presets (primary capacity; no Belady run, so no gap "
            f"closed) its mean gain is {ablations['mean_gain_points']:+z.2f} points, the worst "
            f"{shown(ablations['worst'])} ({beside(ablations['worst_gain_points'], GOAL_WORST_POINTS)}); "
            + (
                f"{len(below)} more than {-GOAL_WORST_POINTS:g} point below: "
                + ", ".join(
                    f"{shown(n)} ({beside(ablations['gain_points'][n], GOAL_WORST_POINTS)})" for n in below
                )
                + "."
                if below
                else f"none is more than {-GOAL_WORST_POINTS:g} point below."
            )
        )
        behind += [f"ablation {n}" for n in below]
    kinds = ["mix", *(["real trace"] if real else []), *(["ablation"] if ablations else [])]
    scope = f"{', '.join(kinds[:-1])} or {kinds[-1]}" if len(kinds) > 1 else kinds[0]
    limit = f"more than {-GOAL_WORST_POINTS:g} point below the better static policy"
    verdict += (
        f" So it is never {limit} on any {scope}."
        if not behind
        else f" So it is {limit} in {len(behind)} run{'s' if len(behind) > 1 else ''}: "
        + "; ".join(behind)
        + "."
    )
    return f"{verdict}\n\n{table}"


def _shortfall(v: dict[str, Any], saturated: set[str] = frozenset()) -> str:
    """Which parts of the goal a capacity misses, each with its number, printed with the decimals
    that keep it on its side of the goal (``beside``: a gain of 2.996 is not shown as +3.00)."""
    out = []
    if v["mean_gain_points"] < GOAL_GAIN_POINTS:
        out.append(f"mean gain {beside(v['mean_gain_points'], GOAL_GAIN_POINTS)}")
    closed, gap = v["gap_closed_pct"], v["mean_gap_to_belady_points"]
    if closed is None:  # no gap; or serve mode, where Belady (optimal in cache mode only) can be behind
        out.append(
            "no gap to Belady to close"
            if gap == 0
            else f"Belady {-gap:z.2f} points behind the better static policy"
        )
    elif closed < GOAL_CLOSED_PCT:
        out.append(f"{beside(closed, GOAL_CLOSED_PCT, 1, '')} % of the gap closed")
    if v["worst_gain_points"] < GOAL_WORST_POINTS:
        worst = beside(v["worst_gain_points"], GOAL_WORST_POINTS)
        out.append(f"{_flag_saturated(v['worst_mix'], saturated)} {worst}")
    return ", ".join(out)


def _flag_saturated(name: str, saturated: set[str]) -> str:
    return name + (" (saturated server)" if name in saturated else "")


def _saturated_mixes(payload: dict[str, Any], policy: str, capacity: str) -> set[str]:
    """The mixes whose run of ``policy`` (a policy, or hint mode's label) at ``capacity`` blocks found
    the modelled server saturated."""
    out = set()
    for m in payload["mixes"]:
        flags = _saturation_by_capacity(m, payload["plan"]["capacity"]).get(capacity, {})
        flag = flags[policy] if policy in flags else m.get("hint_saturated", {}).get(capacity, False)
        if flag:
            out.add(m["name"])
    return out


def _hint_section(payload: dict[str, Any], label: str, per_capacity: dict[str, Any]) -> str:
    """Hint mode against the same goal as the hash-only policy, after what it is told."""
    without = sorted({r["trace"] for r in payload["real_traces"] if label not in r["hit_rate"]})
    intro = (
        f"{label} is chain-lru in session mode, told each request's session id and each session's end "
        "as its last request is done (a client that closes its sessions: vLLM's `WAKMAN_SESSIONS=1`). "
        "The trace knows each end after the fact, so this measures what clients that send their session "
        "ids and ends give the cache, apart from the hash-only policies above."
    )
    if without:
        intro += f" Not run on {', '.join(without)}: no session ids."
    return f"{intro}\n\n{_new_policy_section(payload, label, per_capacity)}"


def _serving_cost(payload: dict[str, Any]) -> str:
    """Prefill tokens saved (cached prompt tokens, summed over the mixes) and the modelled TTFT per
    policy at the primary capacity (seconds; the mean over the mixes of each mix's p50 and p99)."""
    mixes = [m for m in payload["mixes"] if "prefill_tokens_saved" in m]
    policies = [p for p in POLICIES if p != "infinite" and all(p in m["prefill_tokens_saved"] for m in mixes)]
    saved = {p: sum(m["prefill_tokens_saved"][p] for m in mixes) for p in policies}
    rows = [
        [
            p,
            f"{saved[p] / 1e6:,.1f}",
            f"{100 * (saved[p] / saved['lru'] - 1):+z.1f} %" if saved.get("lru") else "-",
            f"{statistics.mean(m['ttft_p50_s'][p] for m in mixes):z.3f}",
            f"{statistics.mean(m['ttft_p99_s'][p] for m in mixes):z.3f}",
        ]
        for p in policies
        if all(m["ttft_p50_s"].get(p) is not None for m in mixes)
    ]
    return (
        f"Over the {len(mixes)} mixes in serve mode: prefill tokens the cache saved (millions) and the "
        "modelled time to first token (seconds; mean over the mixes of each run's p50 and p99).\n\n"
        + _markdown_table(
            ["policy", "prefill tokens saved (M)", "vs LRU", "TTFT p50 (s)", "TTFT p99 (s)"], rows
        )
    )
