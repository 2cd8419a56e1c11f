"""CPU seconds of each task of the full ``wakman reproduce``, each run alone in this process (one
core), stage by stage: where the reproduction's time goes. ``archive`` runs the Claude Code archive's
tasks (it reads ``../shared/traces`` first and prints the read's time); ``synthetic`` the mixes,
ablations, map and Mooncake. Run the two side by side, as the reproduction's two workers do:
``python benchmarks/reproduce_tasks.py synthetic & python benchmarks/reproduce_tasks.py archive``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import wakman.experiments.reproduce as R

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "synthetic"
    plan = R.Plan(shared=SHARED)
    if which == "archive":
        began = time.process_time()
        R._claude_requests = R._claude_archive(plan)
        print(f"read the archive: {time.process_time() - began:.1f} s", flush=True)
        stages = {"claude code": (R._claude_task, [(p, plan) for p in R._claude_tasks()])}
    else:
        stages = {
            "mixes": (R._mix_task, [(m.name, plan) for m in R.MIXES]),
            "ablations": (R._ablation_task, [(a, plan) for a in plan.ablations]),
            "map": (R._map_task, [((a, v), plan) for a, values in plan.map_values for v in values]),
            "real traces": (R._mooncake_task, [(c, plan) for c in plan.real_capacities]),
        }
    for stage, (task, args) in stages.items():
        total = 0.0
        for arg in args:
            began = time.process_time()
            task(arg)
            seconds = time.process_time() - began
            total += seconds
            print(f"{stage:<12} {arg[0]!s:<32} {seconds:6.2f} s", flush=True)
        print(f"{stage:<12} {'(stage)':<32} {total:6.1f} s CPU", flush=True)


if __name__ == "__main__":
    main()
