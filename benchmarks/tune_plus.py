"""Measure candidate settings for ``wakman-plus`` on the 20 mixes; the preset's defaults are the
configuration with the lowest mean regret here (docs/adaptive.md records the run).

Regret of a policy on a trace = (best of static lru and s3fifo) - its hit rate, in points.
Run: ``python benchmarks/tune_plus.py [--duration 3600] [--capacity 6000] [--seed 0]``."""

from __future__ import annotations

import argparse
import statistics
from concurrent.futures import ProcessPoolExecutor

from wakman.adaptive import PAPER, PLUS, AdaptiveConfig, simulate
from wakman.workload import MIXES, build_config, generate_requests

_FAST = PAPER.with_options(name="fast", interval_s=120, window_s=600, first_decision_s=120, hysteresis=0.005)
_KEPT = _FAST.with_options(name="persistent", shadows="persistent", shadow_size="pool")
CANDIDATES: dict[str, AdaptiveConfig] = {
    # each line changes one thing from a line above it
    "paper-block": PAPER.with_options(name="paper-block", shadow_metric="block"),
    "paper": PAPER,  # vLLM's hit rate as the shadows' score
    "fast": _FAST,  # decide every 2 min over the last 10, 0.5-point hysteresis
    "fast+arc": _FAST.with_options(name="fast+arc", candidates=("lru", "s3fifo", "arc")),
    "fast+pool": _FAST.with_options(name="fast+pool", shadow_size="pool"),  # shadows the pool's size
    "persistent": _KEPT,  # long-lived pool-sized shadows, each request replayed once
    "+outputs": _KEPT.with_options(name="+outputs", log_outputs=True),  # shadows see decoded blocks
    "+h1-w900": _KEPT.with_options(name="+h1-w900", log_outputs=True, hysteresis=0.01, window_s=900),
    "+half-life": _KEPT.with_options(
        name="+half-life", log_outputs=True, hysteresis=0.01, window_s=900, half_life_s=300
    ),
    "lru-plus": PLUS.with_options(  # +half-life, deciding every 30 s (wakman-plus until 2026-12-03)
        name="lru-plus", candidates=("lru", "s3fifo"), start_policy="lru", hysteresis=0.01
    ),
    "+chain-lru": PLUS.with_options(name="+chain-lru", hysteresis=0.01),  # chain-lru for lru
    "plus": PLUS,  # +2-point hysteresis
}


def evaluate(args: tuple[str, int, float, int]) -> dict[str, float]:
    preset, capacity, duration, seed = args
    reqs = generate_requests(build_config(preset=preset, duration_s=duration), seed=seed)
    out = {p: simulate(reqs, p, capacity).hit_rate for p in ("lru", "s3fifo")}
    for name, cfg in CANDIDATES.items():
        out[name] = simulate(reqs, cfg, capacity).hit_rate
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=3600)
    parser.add_argument("--capacity", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tasks = [(m.name, args.capacity, args.duration, args.seed) for m in MIXES]
    with ProcessPoolExecutor() as pool:
        rows = list(pool.map(evaluate, tasks))
    where = f"(points, {len(rows)} mixes, {args.capacity} blocks)"
    print(f"{'config':<16} {'mean regret':>12} {'max regret':>11}   {where}")
    for name in ("lru", "s3fifo", *CANDIDATES):
        regrets = [100 * (max(r["lru"], r["s3fifo"]) - r[name]) for r in rows]
        print(f"{name:<16} {statistics.mean(regrets):>12.2f} {max(regrets):>11.2f}")


if __name__ == "__main__":
    main()
