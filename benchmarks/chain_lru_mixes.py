"""chain-lru against the better static policy (lru or s3fifo) and Belady on the generator's 20 mixes
(issue: past choosing between two policies): per mix and capacity the gain over the better static
policy, then per capacity the mean gain, the worst mix and the share of the gap to Belady closed
(mean gain over mean gap).

Run: ``python benchmarks/chain_lru_mixes.py [--mode serve|cache] [--capacities 3000,6000,12000]
[--seed 0] [--mixes a,b] [--duration 3600]``. About a minute on two cores for the default
(serve mode, one-hour mixes, three capacities).
"""

from __future__ import annotations

import argparse
import statistics
import time

from wakman.simulation import simulate
from wakman.workload import MIXES, build_config, generate_requests

POLICIES = ("lru", "s3fifo", "chain-lru", "belady")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("serve", "cache"), default="serve")
    parser.add_argument("--capacities", default="3000,6000,12000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mixes", default="all")
    parser.add_argument("--duration", type=float, default=3600.0)
    args = parser.parse_args()
    capacities = [int(c) for c in args.capacities.split(",")]
    names = [m.name for m in MIXES] if args.mixes == "all" else args.mixes.split(",")
    gains: dict[int, list[float]] = {c: [] for c in capacities}
    gaps: dict[int, list[float]] = {c: [] for c in capacities}
    print(f"{args.mode} mode, seed {args.seed}; gain: points over the better of lru/s3fifo")
    print("| mix | blocks | lru | s3fifo | chain-lru | belady | gain |")
    print("|---|---|---|---|---|---|---|")
    started = time.perf_counter()
    for name in names:
        reqs = generate_requests(build_config(preset=name, duration_s=args.duration), seed=args.seed)
        for c in capacities:
            rate = {p: simulate(reqs, p, c, mode=args.mode).hit_rate for p in POLICIES}
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
        print(f"| {c} | {gain:+.2f} | {min(gains[c]):+.2f} | {gap:.2f} | {100 * gain / gap:.1f} % |")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
