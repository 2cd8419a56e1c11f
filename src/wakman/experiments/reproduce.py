"""``wakman reproduce``: the paper's experiments on the simulator, in one command.

Stages (each a progress bar): the 20 mixes (one hour at 1.5 requests/s; all policies at the
primary capacity, the static and adaptive ones at half of it), the Figure 3 ablations (turns per
session and input length, at 33/33/34 and 0/50/50), the map of the winner (``workload_map``), and
the real traces (the bundled Mooncake chat trace in serve mode on a server sized to keep up with it,
``ServerModel.keeping_up``; the whole Claude Code archive in cache mode when ``../shared/traces`` is
there: read once by the parent, shared by the forked workers, one task per policy for every size).
Hint mode (``HINT_MODE``: chain-lru told session ids and each session's end) runs beside the policies
on the mixes at every capacity, on the ablations (primary capacity) and on the Claude Code archive, the
traces with session ids.
Every other task generates its own trace from (preset, seed), so results do not depend on the
number of jobs. The plan's ``seed`` (``wakman reproduce --seed``) seeds every generated trace (the
mixes, the ablations, the map); the real traces are read from their files and do not depend on it
(the Claude Code archive's conversations start at the kv-cache-tester reader's own seeded times,
``ARCHIVE_ARRIVAL_SEED``, recorded in its rows). Every serve-mode run records whether its modelled
server kept up (``saturated``). The figures computed from the runs are ``summary.py``'s; the
report is ``report.py``'s.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wakman.adaptive import simulate
from wakman.adaptive.config import ADAPTIVE_PRESETS, PLUS
from wakman.experiments.regret import ALL_POLICIES, ONLINE
from wakman.experiments.summary import summarize
from wakman.experiments.sweep import HINT_MODE, HINT_OPTIONS
from wakman.experiments.workers import stopped_on_error, worker_signals
from wakman.experiments.workload_map import AXES, MAP_POLICIES, cell
from wakman.policies import make_policy
from wakman.simulation import ServerModel
from wakman.simulation.run import belady_future
from wakman.traces.formats import detect_format
from wakman.traces.io import atomic_path
from wakman.traces.kvcache_tester import DEFAULT_SEED as KVCACHE_TESTER_SEED
from wakman.workload import ABLATIONS, MIXES, build_config, generate_requests

# Hint mode (``HINT_MODE``, measured apart from the hash-only policies): ``experiments.sweep``.


def _hinted(reqs: list, capacity: int, **options: Any) -> Any:
    """chain-lru's hint-mode run (``HINT_OPTIONS``) on ``reqs``: a ``SimResult``."""
    return simulate(reqs, "chain-lru", capacity, **HINT_OPTIONS, **options)


@dataclass(frozen=True)
class Plan:
    duration_s: float = 3600.0
    ablation_duration_s: float = 1800.0  # Figure 3's traces: half an hour (8K-token inputs are heavy)
    capacity: int = 6000  # blocks of 32 tokens: the primary size, under pressure for every mix
    # half the primary (S3-FIFO's regime) and twice it: the online policies and Belady at each
    other_capacities: tuple[int, ...] = (3000, 12000)
    seed: int = 0
    real_capacities: tuple[int, ...] = (5000, 12000, 19200)  # S3-FIFO wins at 5,000, LRU beyond
    claude_capacities: tuple[int, ...] = (20000, 60000)  # the whole archive, cache mode
    shared: Path | None = None
    ablations: tuple[str, ...] = tuple(p.name for p in ABLATIONS)
    map_duration_s: float = 3600.0
    map_capacities: tuple[int, ...] = (3000, 6000, 12000)
    map_values: tuple[tuple[str, tuple[float, ...]], ...] = tuple((a.name, a.values) for a in AXES.values())

    @staticmethod
    def quick(shared: Path | None = None, seed: int = 0) -> Plan:
        """20-minute traces (the managers' first decision comes at 900 s), one capacity, five
        ablations, a 2x2 map, Mooncake only: one to two minutes on 2 cores."""
        subset = ("turns2-thirds", "turns8-thirds", "turns32-thirds", "input128-thirds", "input2048-thirds")
        return Plan(
            duration_s=1200.0,
            ablation_duration_s=1200.0,
            capacity=4000,
            other_capacities=(),
            real_capacities=(19200,),
            claude_capacities=(),
            seed=seed,
            shared=shared,
            ablations=subset,
            map_duration_s=1200.0,
            map_capacities=(4000,),
            map_values=tuple((a.name, (a.values[0], a.values[-1])) for a in AXES.values()),
        )


@dataclass
class Results:
    plan: Plan
    mixes: list[dict[str, Any]] = field(default_factory=list)
    ablations: list[dict[str, Any]] = field(default_factory=list)
    real: list[dict[str, Any]] = field(default_factory=list)
    map: list[dict[str, Any]] = field(default_factory=list)
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
        "requests_by_type": dict(Counter(r.label for r in reqs)),
        "blocks_by_type": _blocks_by_type(reqs),
        "hit_rate": {},
        "by_capacity": {},
    }
    future = {"future": belady_future(reqs)}  # Belady's, one for every capacity
    for policy in ALL_POLICIES:
        res = simulate(reqs, policy, plan.capacity, **(future if policy == "belady" else {}))
        row["hit_rate"][policy] = res.hit_rate
        if policy == "wakman":
            row["wakman_decisions"] = res.extra["decisions"]
        _record_server(row, policy, res.as_flat_dict())
    for capacity in plan.other_capacities:
        rates, saturated = {}, {}
        for policy in (*ONLINE, "belady"):
            res = simulate(reqs, policy, capacity, **(future if policy == "belady" else {}))
            rates[policy] = res.hit_rate
            saturated[policy] = res.saturation.saturated  # Belady's too: its gap figures use it
        rates[HINT_MODE] = _hint_run(row, reqs, capacity)
        row["by_capacity"][str(capacity)] = rates
        row.setdefault("saturated_by_capacity", {})[str(capacity)] = saturated
    row["by_capacity"][str(plan.capacity)] = {p: row["hit_rate"][p] for p in (*ONLINE, "belady")}
    row["by_capacity"][str(plan.capacity)][HINT_MODE] = _hint_run(row, reqs, plan.capacity)
    return row


def _hint_run(row: dict[str, Any], reqs: list, capacity: int) -> float:
    """Hint mode's serve-mode run at ``capacity``: its hit rate; whether its server was saturated
    goes to ``row["hint_saturated"]`` (apart from the policies' flags, which the summary counts)."""
    res = _hinted(reqs, capacity)
    row.setdefault("hint_saturated", {})[str(capacity)] = bool(res.saturation.saturated)
    return res.hit_rate


def _blocks_by_type(reqs: list) -> dict[str, int]:
    """Prompt blocks looked up per session type (the request's ``label``)."""
    out: Counter[str] = Counter()
    for r in reqs:
        out[r.label] += len(r.block_keys)
    return dict(out)


def _record_server(row: dict[str, Any], policy: str, flat: dict[str, Any]) -> None:
    """A serve-mode run's prefill tokens saved (cached prompt tokens), TTFT p50/p90/p99 (seconds) and
    whether its modelled server kept up, under ``policy``."""
    row.setdefault("prefill_tokens_saved", {})[policy] = flat.get("hit_tokens")
    for q in ("p50", "p90", "p99"):
        row.setdefault(f"ttft_{q}_s", {})[policy] = flat.get(f"ttft_s_{q}")
    row.setdefault("saturated", {})[policy] = bool(flat.get("saturated"))
    row.setdefault("prefill_utilization", {})[policy] = flat.get("prefill_utilization")


def _ablation_task(args: tuple[str, Plan]) -> dict[str, Any]:
    name, plan = args
    preset = next(p for p in ABLATIONS if p.name == name)
    reqs = generate_requests(build_config(preset=name, duration_s=plan.ablation_duration_s), seed=plan.seed)
    row: dict[str, Any] = {
        "name": name,
        "group": preset.group,
        "fractions": list(preset.mix),
        "overrides": preset.overrides,
        "hit_rate": {},
    }
    for policy in ONLINE:
        res = simulate(reqs, policy, plan.capacity)
        row["hit_rate"][policy] = res.hit_rate
        _record_server(row, policy, res.as_flat_dict())
    row["hit_rate"][HINT_MODE] = _hint_run(row, reqs, plan.capacity)
    return row


def _map_task(args: tuple[tuple[str, float], Plan]) -> list[dict[str, Any]]:
    (axis_name, value), plan = args
    axis = AXES[axis_name]
    config = build_config(mix=axis.mix, overrides=axis.overrides(value), duration_s=plan.map_duration_s)
    reqs = generate_requests(config, seed=plan.seed)
    cells = []
    for capacity in plan.map_capacities:
        results = {p: simulate(reqs, p, capacity) for p in MAP_POLICIES}
        point = cell(axis_name, value, capacity, {p: r.hit_rate for p, r in results.items()})
        point["saturated"] = any(r.saturation.saturated for r in results.values())
        point["requests"] = len(reqs)
        cells.append(point)
    return cells


CLAUDE_ARCHIVE = "weka_claude_code_traces.tar.xz"
# The archive's conversations start as the kv-cache-tester reader's seeded Poisson process, at its
# own default seed whatever the plan's: the real traces stay the same across ``--seed``
ARCHIVE_ARRIVAL_SEED = KVCACHE_TESTER_SEED
# The Claude Code archive's requests, read once by the parent before its workers fork (they share
# the pages); None where the workers are spawned or the plan has no archive: a task then reads it.
_claude_requests: list | None = None


def _claude_archive(plan: Plan) -> list:
    from wakman.traces import read_trace

    if _claude_requests is not None:
        return _claude_requests
    assert plan.shared is not None
    return list(read_trace(plan.shared / "traces" / CLAUDE_ARCHIVE))


def _trace_row(name: str, mode: str, capacity: int, reqs: list) -> dict[str, Any]:
    return {
        "trace": name,
        "mode": mode,
        "capacity": capacity,
        "requests": len(reqs),
        "span_s": reqs[-1].arrival_s - reqs[0].arrival_s,
        "mean_prompt_tokens": sum(r.prompt_tokens for r in reqs) / len(reqs),
        "block_tokens": sorted({r.block_size for r in reqs}),  # the trace's block sizes, tokens
        "hit_rate": {},
    }


def _mooncake_task(args: tuple[int, Plan]) -> list[dict[str, Any]]:
    """The bundled Mooncake chat trace in serve mode at one capacity, every policy."""
    from wakman.data import BUNDLED_MOONCAKE
    from wakman.traces import read_trace

    capacity, _ = args
    reqs = list(read_trace(BUNDLED_MOONCAKE))
    server = ServerModel.keeping_up(reqs)
    row = _trace_row("mooncake", "serve", capacity, reqs)
    row["server"] = {k: getattr(server, k) for k in server.__dataclass_fields__}
    for policy in ALL_POLICIES:
        res = simulate(reqs, policy, capacity, mode="serve", server=server)
        row["hit_rate"][policy] = res.hit_rate
        _record_server(row, policy, res.as_flat_dict())
    return [row]


# wakman-plus's candidates with its own parameters are the plain policies' columns: their runs can
# stand in for its shadows (``_claude_task``); with tuned parameters they could not
_PLUS_SHARES_RUNS = not any(PLUS.policy_params.get(name) for name in PLUS.candidates)


def _claude_tasks() -> list[str]:
    """The archive's tasks: one per policy, but wakman-plus's runs its candidates too (their plain
    cache-mode runs stand in for its shadows: ``_claude_task``); then hint mode (its session ids)."""
    return [*(p for p in ALL_POLICIES if not (_PLUS_SHARES_RUNS and p in PLUS.candidates)), HINT_MODE]


def _claude_task(args: tuple[str, Plan]) -> dict[str, dict[int, float]]:
    """The whole Claude Code archive in cache mode under one policy, at every archive capacity
    (the infinite ceiling does not depend on it: run once). Returns policy -> capacity -> hit rate
    (the stranded blocks, which the report does not show, are not counted). wakman-plus's task runs
    its candidates first and hands their per-request hits to it as its shadows' (the same decisions
    as replaying its own shadows: each is a plain cache-mode run of the pool's size), so the
    archive is replayed once per candidate, not twice."""
    policy, plan = args
    reqs, capacities = _claude_archive(plan), plan.claude_capacities

    def run(run_with: Any, capacity: int, **options: Any) -> Any:  # a policy name or a ready policy
        return simulate(reqs, run_with, capacity, mode="cache", track_stranded=False, **options)

    if policy == "belady":  # one future (94 M accesses) for every capacity
        future = belady_future(reqs, "cache")[0]
        return {policy: {c: run(make_policy(policy, c, future=future), c).hit_rate for c in capacities}}
    if policy == "infinite":
        once = run(policy, capacities[0]).hit_rate
        return {policy: dict.fromkeys(capacities, once)}
    if policy == HINT_MODE:
        return {
            policy: {c: _hinted(reqs, c, mode="cache", track_stranded=False).hit_rate for c in capacities}
        }
    if policy != PLUS.name or not _PLUS_SHARES_RUNS:
        return {policy: {c: run(policy, c).hit_rate for c in capacities}}
    rates: dict[str, dict[int, float]] = {name: {} for name in (*PLUS.candidates, policy)}
    for c in capacities:
        shadows = {}
        for name in PLUS.candidates:
            result = run(name, c)
            rates[name][c], shadows[name] = result.hit_rate, result.first_hit_tokens
        rates[policy][c] = run(policy, c, shadow_hits=shadows).hit_rate
    return rates


def _claude_rows(plan: Plan, rates: list[dict[str, dict[int, float]]]) -> list[dict[str, Any]]:
    """One row per archive capacity from the tasks' rates (policy -> capacity -> rate), the
    columns in ALL_POLICIES order, then hint mode's."""
    reqs = _claude_archive(plan)
    assert plan.shared is not None
    seeded_arrivals = detect_format(plan.shared / "traces" / CLAUDE_ARCHIVE) == "kv-cache-tester"
    by_policy = {policy: by_capacity for task in rates for policy, by_capacity in task.items()}
    rows = []
    for capacity in plan.claude_capacities:
        row = _trace_row("claude-code", "cache", capacity, reqs)
        if seeded_arrivals:
            row["arrival_seed"] = ARCHIVE_ARRIVAL_SEED
        row["hit_rate"] = {p: by_policy[p][capacity] for p in (*ALL_POLICIES, HINT_MODE)}
        rows.append(row)
    return rows


def _expected_cost(stage: str, name: Any) -> float:
    """Roughly the task's seconds on one core, only to order the tasks (measured once)."""
    if stage == "claude code":
        return {"wakman-plus": 24.0, "wakman": 16.0, "belady": 15.0, HINT_MODE: 12.0}.get(name, 7.0)
    if stage == "real traces":
        return 1.0
    if stage == "map":  # (axis, value): long agentic sessions cost the most
        return 1.5 + 0.15 * name[1] if name[0] == "agentic-turns" else 2.0
    if stage == "ablations":
        tokens = int("".join(c for c in name.split("-")[0] if c.isdigit()))
        if name.startswith("input"):
            return tokens / 1400
        return 0.6
    if stage == "mixes":
        return 2.5
    return 1.0


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
        ("map", _map_task, [((axis, v), plan) for axis, values in plan.map_values for v in values]),
        ("real traces", _mooncake_task, [(c, plan) for c in plan.real_capacities]),
    ]
    archive = plan.shared / "traces" / CLAUDE_ARCHIVE if plan.shared else None
    has_claude = bool(plan.claude_capacities and archive is not None and archive.exists())
    if has_claude:
        stages.append(("claude code", _claude_task, [(p, plan) for p in _claude_tasks()]))
    context = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    # the heaviest tasks first, so that no worker is left with a long one at the end
    order = sorted(
        ((stage, fn, i, task) for stage, fn, tasks in stages for i, task in enumerate(tasks)),
        key=lambda item: -_expected_cost(item[0], item[3][0]),
    )
    global _claude_requests
    try:
        out = _run_tasks(order, plan, jobs, context, has_claude, progress, {s: len(t) for s, _, t in stages})
        for stage, _, tasks in stages:
            rows = [out[stage, i] for i in range(len(tasks))]
            if stage == "mixes":
                results.mixes = rows
            elif stage == "ablations":
                results.ablations = rows
            elif stage == "map":
                results.map = [point for points in rows for point in points]
            elif stage == "real traces":
                results.real = [row for rows_ in rows for row in rows_]
            else:
                results.real += _claude_rows(plan, rows)
    finally:
        _claude_requests = None  # the parent does not keep the archive past the run
    example = max(results.mixes, key=lambda m: sum(d["switched"] for d in m["wakman_decisions"]))
    results.decisions_example = {"mix": example["name"], "decisions": example["wakman_decisions"]}
    results.wall_s = time.perf_counter() - began
    return results


def _run_tasks(
    order: list[tuple[str, Callable, int, Any]],
    plan: Plan,
    jobs: int,
    context: Any,
    has_claude: bool,
    progress: Callable[[str, int, int], None] | None,
    totals: dict[str, int],
) -> dict[tuple[str, int], Any]:
    """Run the tasks (in ``order``'s order as workers free up) on ``jobs`` worker processes; returns
    (stage, index) -> the task's result. With fork and the Claude Code archive, one worker starts
    on the synthetic tasks at once while the parent reads the archive, and the others fork after
    the read, sharing it (a worker forked before it never runs an archive task); the parent keeps
    the archive in ``_claude_requests`` for the caller to drop."""
    global _claude_requests
    pending, results = list(order), {}
    done_in: dict[str, int] = dict.fromkeys(totals, 0)
    early_jobs = 1 if has_claude and context is not None and jobs > 1 else 0
    pools: dict[ProcessPoolExecutor, tuple[int, bool]] = {}  # pool -> (workers, may run archive tasks)
    running: dict[Any, tuple[str, int, ProcessPoolExecutor]] = {}

    def feed(pool: ProcessPoolExecutor, workers: int, archive_ok: bool) -> None:
        busy = sum(1 for _, _, p in running.values() if p is pool)
        while busy < workers:
            item = next((t for t in pending if archive_ok or t[0] != "claude code"), None)
            if item is None:
                return
            pending.remove(item)
            stage, fn, i, task = item
            running[pool.submit(fn, task)] = (stage, i, pool)
            busy += 1

    with stopped_on_error(pools):
        if early_jobs:
            early = ProcessPoolExecutor(early_jobs, mp_context=context, initializer=worker_signals)
            pools[early] = (early_jobs, False)
            feed(early, early_jobs, False)  # its worker forks now, without the archive
        if has_claude and context is not None:
            _claude_requests = _claude_archive(plan)  # read once: the workers forked next share it
        late = ProcessPoolExecutor(jobs - early_jobs, mp_context=context, initializer=worker_signals)
        pools[late] = (jobs - early_jobs, True)
        while pending or running:
            for pool, (workers, archive_ok) in pools.items():
                feed(pool, workers, archive_ok)
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in finished:
                stage, i, _ = running.pop(future)
                results[stage, i] = future.result()
                done_in[stage] += 1
                if progress:
                    progress(stage, done_in[stage], totals[stage])
    return results


def _workload_defaults() -> dict[str, Any]:
    """The generator's defaults the report's explanations quote (medians of the bundled config)."""
    config = build_config()
    multi, agentic = config.multi_turn, config.agentic
    return {
        "rate": config.rate,
        "block_tokens": config.block_size,
        "turns_median": {"multi_turn": multi.turns.median, "agentic": agentic.turns.median},
        "gap_s_median": {"multi_turn": multi.gap_s.median, "agentic": agentic.gap_s.median},
    }


def write_outputs(results: Results, out: Path) -> dict[str, Any]:
    """``results.json`` in ``out``; returns its payload (the report is rendered from it)."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(results.mixes, results.ablations)
    payload = {
        "plan": {k: (str(v) if isinstance(v, Path) else v) for k, v in results.plan.__dict__.items()},
        "mixes": [{k: v for k, v in m.items() if k != "wakman_decisions"} for m in results.mixes],
        "summary": summary,
        "ablations": results.ablations,
        "real_traces": results.real,
        "map": results.map,
        "decisions_example": results.decisions_example,
        "adaptive": {
            name: {k: getattr(c, k) for k in ("first_decision_s", "interval_s", "start_policy")}
            for name, c in ADAPTIVE_PRESETS.items()
        },
        "workload": _workload_defaults(),
        "run": {"wall_s": results.wall_s, "jobs": results.jobs, "cpus": os.cpu_count()},
    }
    with atomic_path(out / "results.json") as target:
        target.write_text(json.dumps(payload, indent=1))
    return payload
