"""``wakman reproduce``: the paper's experiments on the simulator, in one command.

Stages (each a progress bar): the 20 mixes (one hour at 1.5 requests/s; all policies at the
primary capacity, the static and adaptive ones at half of it), the Figure 3 ablations (turns per
session and input length, at 33/33/34 and 0/50/50), and the real traces (the bundled Mooncake chat
trace; the Claude Code sessions when ``../shared/traces`` is there). Every task generates its own
trace from (preset, seed), so results do not depend on the number of jobs.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wakman.adaptive import simulate
from wakman.experiments.regret import regret_points
from wakman.workload import ABLATIONS, MIXES, build_config, generate_requests

STATIC = ("lru", "s3fifo")
ADAPTIVE = ("wakman", "wakman-plus")
ALL_POLICIES = (*STATIC, *ADAPTIVE, "belady", "infinite")
PAPER = {
    "lru_wins": 8,
    "s3fifo_wins": 12,
    "lru_worst_loss_pct": 22.4,
    "s3fifo_worst_loss_pct": 11.7,
    "wakman_gain_over_lru_points": 5.0,
    "wakman_median_recovered_pct": 84.0,
}


@dataclass(frozen=True)
class Plan:
    duration_s: float = 3600.0
    ablation_duration_s: float = 1800.0  # Figure 3's traces: half an hour (8K-token inputs are heavy)
    capacity: int = 6000  # blocks of 32 tokens: the primary size, under pressure for every mix
    other_capacities: tuple[int, ...] = (3000,)  # half the primary: S3-FIFO's regime (5-min budget)
    seed: int = 0
    real_capacities: tuple[int, ...] = (5000, 19200)
    claude_capacities: tuple[int, ...] = (20000, 60000)
    claude_window_s: float = 1800.0
    shared: Path | None = None
    ablations: tuple[str, ...] = tuple(p.name for p in ABLATIONS)

    @staticmethod
    def quick(shared: Path | None = None) -> Plan:
        """Ten-minute traces, one capacity, five ablations, Mooncake only: about a minute."""
        subset = ("turns2-thirds", "turns8-thirds", "turns32-thirds", "input128-thirds", "input2048-thirds")
        return Plan(
            duration_s=600.0,
            ablation_duration_s=600.0,
            capacity=4000,
            other_capacities=(),
            real_capacities=(19200,),
            claude_capacities=(),
            shared=shared,
            ablations=subset,
        )


@dataclass
class Results:
    plan: Plan
    mixes: list[dict[str, Any]] = field(default_factory=list)
    ablations: list[dict[str, Any]] = field(default_factory=list)
    real: list[dict[str, Any]] = field(default_factory=list)
    decisions_example: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    jobs: int = 1


def _mix_task(args: tuple[str, Plan]) -> dict[str, Any]:
    name, plan = args
    preset = next(p for p in MIXES if p.name == name)
    reqs = generate_requests(build_config(preset=name, duration_s=plan.duration_s), seed=plan.seed)
    row: dict[str, Any] = {
        "name": name,
        "fractions": list(preset.mix),
        "requests": len(reqs),
        "hit_rate": {},
        "by_capacity": {},
    }
    for policy in ALL_POLICIES:
        res = simulate(reqs, policy, plan.capacity)
        row["hit_rate"][policy] = res.hit_rate
        if policy == "wakman":
            row["wakman_decisions"] = res.extra["decisions"]
        row.setdefault("ttft_p90_s", {})[policy] = res.as_flat_dict().get("ttft_s_p90")
    for capacity in plan.other_capacities:
        row["by_capacity"][str(capacity)] = {
            p: simulate(reqs, p, capacity).hit_rate for p in (*STATIC, *ADAPTIVE)
        }
    row["by_capacity"][str(plan.capacity)] = {p: row["hit_rate"][p] for p in (*STATIC, *ADAPTIVE)}
    return row


def _ablation_task(args: tuple[str, Plan]) -> dict[str, Any]:
    name, plan = args
    preset = next(p for p in ABLATIONS if p.name == name)
    reqs = generate_requests(build_config(preset=name, duration_s=plan.ablation_duration_s), seed=plan.seed)
    return {
        "name": name,
        "group": preset.group,
        "fractions": list(preset.mix),
        "overrides": preset.overrides,
        "hit_rate": {p: simulate(reqs, p, plan.capacity).hit_rate for p in (*STATIC, *ADAPTIVE)},
    }


def _real_task(args: tuple[str, Plan]) -> list[dict[str, Any]]:
    name, plan = args
    from wakman.data import BUNDLED_MOONCAKE
    from wakman.traces import read_trace

    if name == "mooncake":
        reqs, capacities, mode = list(read_trace(BUNDLED_MOONCAKE)), plan.real_capacities, "serve"
    else:
        assert plan.shared is not None
        tarball = plan.shared / "traces" / "weka_claude_code_traces.tar.xz"
        reqs = [r for r in read_trace(tarball) if r.arrival_s < plan.claude_window_s]
        capacities, mode = plan.claude_capacities, "cache"
    rows = []
    for capacity in capacities:
        rates = {p: simulate(reqs, p, capacity, mode=mode).hit_rate for p in ALL_POLICIES}
        rows.append(
            {"trace": name, "mode": mode, "capacity": capacity, "requests": len(reqs), "hit_rate": rates}
        )
    return rows


def _expected_cost(stage: str, name: str) -> float:
    """Roughly the task's seconds on one core, only to order the tasks (measured once)."""
    if stage == "ablations":
        tokens = int("".join(c for c in name.split("-")[0] if c.isdigit()))
        if name.startswith("input"):
            return tokens / 250
        return tokens / 4 if name.startswith("turns") else 2.0
    if stage == "mixes":
        return 20.0
    return 5.0


def run(
    plan: Plan, jobs: int | None = None, progress: Callable[[str, int, int], None] | None = None
) -> Results:
    """Run every stage; ``progress(stage, done, total)`` after each task."""
    began = time.perf_counter()
    results = Results(plan)
    jobs = max(1, jobs or os.cpu_count() or 1)
    results.jobs = jobs
    stages: list[tuple[str, Callable, list]] = [
        ("mixes", _mix_task, [(p.name, plan) for p in MIXES]),
        ("ablations", _ablation_task, [(name, plan) for name in plan.ablations]),
        (
            "real traces",
            _real_task,
            [("mooncake", plan)]
            + (
                [("claude-code", plan)]
                if plan.shared
                and plan.claude_capacities
                and (plan.shared / "traces" / "weka_claude_code_traces.tar.xz").exists()
                else []
            ),
        ),
    ]
    context = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    # the heaviest tasks first, so that no worker is left with a long one at the end
    order = sorted(
        ((stage, fn, i, task) for stage, fn, tasks in stages for i, task in enumerate(tasks)),
        key=lambda item: -_expected_cost(item[0], item[3][0]),
    )
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        submitted = {(stage, i): pool.submit(fn, task) for stage, fn, i, task in order}
        futures = {stage: [submitted[stage, i] for i in range(len(tasks))] for stage, _, tasks in stages}
        for stage, _, tasks in stages:
            out = []
            for done, future in enumerate(futures[stage], start=1):
                out.append(future.result())
                if progress:
                    progress(stage, done, len(tasks))
            if stage == "mixes":
                results.mixes = out
            elif stage == "ablations":
                results.ablations = out
            else:
                results.real = [row for rows in out for row in rows]
    example = max(results.mixes, key=lambda m: sum(d["switched"] for d in m["wakman_decisions"]))
    results.decisions_example = {"mix": example["name"], "decisions": example["wakman_decisions"]}
    results.wall_s = time.perf_counter() - began
    return results


def summarize(mixes: list[dict[str, Any]]) -> dict[str, Any]:
    """Regret against the better of lru and s3fifo per mix, wins, recovery, gap to Belady."""

    def rate(m, p):
        return m["hit_rate"][p]

    summary: dict[str, Any] = {"policies": {}}
    for policy in (*STATIC, *ADAPTIVE):
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
    lru_wins = sum(rate(m, "lru") > rate(m, "s3fifo") for m in mixes)
    summary["lru_wins"] = lru_wins
    summary["s3fifo_wins"] = len(mixes) - lru_wins
    summary["lru_worst_loss_pct"] = max(
        100 * (rate(m, "s3fifo") - rate(m, "lru")) / rate(m, "s3fifo") for m in mixes
    )
    summary["s3fifo_worst_loss_pct"] = max(
        100 * (rate(m, "lru") - rate(m, "s3fifo")) / rate(m, "lru") for m in mixes
    )
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
    summary["paper"] = PAPER
    return summary


def write_outputs(results: Results, out: Path) -> dict[str, Any]:
    """``results.json`` in ``out``; returns its payload (the report is rendered from it)."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(results.mixes)
    payload = {
        "plan": {k: (str(v) if isinstance(v, Path) else v) for k, v in results.plan.__dict__.items()},
        "mixes": [{k: v for k, v in m.items() if k != "wakman_decisions"} for m in results.mixes],
        "summary": summary,
        "ablations": results.ablations,
        "real_traces": results.real,
        "decisions_example": results.decisions_example,
        "run": {"wall_s": results.wall_s, "jobs": results.jobs, "cpus": os.cpu_count()},
    }
    (out / "results.json").write_text(json.dumps(payload, indent=1))
    return payload
