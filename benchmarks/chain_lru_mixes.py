"""chain-lru against the better static policy (lru or s3fifo) and Belady on the generator's 20 mixes
(issue: past choosing between two policies): per mix and capacity the gain over the better static
policy, then per capacity the mean gain, the worst mix and the share of the gap to Belady closed
(mean gain over mean gap).

``--cost`` instead times cache mode (every request through ``replay_request``: the hints, the
lookup, every block accessed) for lru, chain-lru and chain-lru in session mode told each end at
once, side by side on two mixes, best of five, and prints each one's time over lru's: the
per-operation cost with the hints and the statistics included.

``--told D`` runs chain-lru in session mode told each session's end ``D`` seconds after its last
request (``simulate(..., session_ends_after_s=D)``: a what-if from the trace's hindsight) in place
of the hash-only chain-lru.

``--server vllm`` runs serve mode in vLLM's scheduling step by step (``VllmServer()``), the loop
whose session hints the vLLM plugin gives (``WAKMAN_SESSIONS=1``: ends told as the marked request
finishes, ``--told 0``).

Run: ``python benchmarks/chain_lru_mixes.py [--mode serve|cache] [--server event|vllm]
[--capacities 3000,6000,12000] [--seed 0] [--mixes a,b] [--duration 3600] [--cost] [--told D]``.
About a minute on two cores for the default (serve mode, one-hour mixes, three capacities).
"""

from __future__ import annotations

import argparse
import statistics
import time

from wakman.simulation import VllmServer, simulate
from wakman.workload import MIXES, build_config, generate_requests

POLICIES = ("lru", "s3fifo", "chain-lru", "belady")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("serve", "cache"), default="serve")
    parser.add_argument("--capacities", default="3000,6000,12000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mixes", default="all")
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--cost", action="store_true")
    parser.add_argument(
        "--server",
        choices=("event", "vllm"),
        default="event",
        help="serve mode's server: the event loop (docs/results.md's) or vLLM's scheduling step by step "
        "(VllmServer's defaults: the loop whose hints the vLLM plugin gives)",
    )
    parser.add_argument(
        "--told",
        type=float,
        help="chain-lru in session mode, told each session's end this many seconds after its last "
        "request (a what-if from the trace's hindsight; the default runs the hash-only chain-lru)",
    )
    args = parser.parse_args()
    if args.cost:
        return cost(args.seed, args.duration)
    capacities = [int(c) for c in args.capacities.split(",")]
    names = [m.name for m in MIXES] if args.mixes == "all" else args.mixes.split(",")
    gains: dict[int, list[float]] = {c: [] for c in capacities}
    gaps: dict[int, list[float]] = {c: [] for c in capacities}
    told = "" if args.told is None else f"; chain-lru told each session's end {args.told:g} s late"
    if args.server == "vllm" and args.mode != "serve":
        parser.error("--server vllm is a serve-mode server")
    run = {"mode": args.mode}
    if args.server == "vllm":
        run["server"] = VllmServer()
        told += "; vLLM's step loop"
    print(f"{args.mode} mode, seed {args.seed}{told}; gain: points over the better of lru/s3fifo")
    print("| mix | blocks | lru | s3fifo | chain-lru | belady | gain |")
    print("|---|---|---|---|---|---|---|")
    started = time.perf_counter()
    for name in names:
        reqs = generate_requests(build_config(preset=name, duration_s=args.duration), seed=args.seed)
        for c in capacities:
            rate = {p: simulate(reqs, p, c, **run).hit_rate for p in POLICIES if p != "chain-lru"}
            params = {} if args.told is None else {"policy_params": {"sessions": True}}
            rate["chain-lru"] = simulate(
                reqs, "chain-lru", c, session_ends_after_s=args.told, **run, **params
            ).hit_rate
            best = max(rate["lru"], rate["s3fifo"])
            gains[c].append(100 * (rate["chain-lru"] - best))
            gaps[c].append(100 * (rate["belady"] - best))
            cells = " | ".join(f"{rate[p]:.4f}" for p in POLICIES)
            print(f"| {name} | {c} | {cells} | {gains[c][-1]:+.2f} |", flush=True)
    print()
    print("| blocks | mean gain | worst mix | mean gap to Belady | gap closed |")
    print("|---|---|---|---|---|")
    for c in capacities:
        gain, gap = statistics.mean(gains[c]), statistics.mean(gaps[c])
        closed = f"{100 * gain / gap:.1f} %" if gap > 0 else "n/a (no gap)"
        print(f"| {c} | {gain:+.2f} | {min(gains[c]):+.2f} | {gap:.2f} | {closed} |")
    print(f"({time.perf_counter() - started:.0f} s)")


COST_RUNS = {  # label: simulate's policy options
    "lru": {"policy": "lru"},
    "chain-lru": {"policy": "chain-lru"},
    "chain-lru, sessions told at 0 s": {
        "policy": "chain-lru",
        "policy_params": {"sessions": True},
        "session_ends_after_s": 0.0,
    },
}


def cost(seed: int, duration_s: float) -> None:
    print("cache mode, 6,000 blocks, best of 5, the runs taking turns: ns per block access and x lru")
    for name in ("mix07-single75-multi25", "mix03-pure-agentic"):
        reqs = generate_requests(build_config(preset=name, duration_s=duration_s), seed=seed)
        accesses = sum(r.full_blocks + len(r.output_keys) for r in reqs)
        best: dict[str, float] = {}
        for _ in range(5):
            for label, options in COST_RUNS.items():
                options = dict(options)
                policy = options.pop("policy")
                started = time.perf_counter()
                simulate(reqs, policy, 6000, mode="cache", track_stranded=False, **options)
                best[label] = min(best.get(label, float("inf")), time.perf_counter() - started)
        print(
            f"{name}: {accesses:,} block accesses; "
            + "; ".join(
                f"{label} {1e9 * t / accesses:.0f} ns ({t / best['lru']:.2f}x)" for label, t in best.items()
            )
        )


if __name__ == "__main__":
    main()
