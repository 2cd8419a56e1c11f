"""chain-lru's session mode against its hash-only mode (issue: past choosing between two policies),
cache mode: the whole Claude Code archive (kv-cache-tester conversations; sub-agents are sessions
of their own) at each capacity, with lru and s3fifo beside them, and the generator's mixes (whose
sessions always extend their chains, so the two modes should agree). Session mode follows each
request's ``session_id`` and sends a session's abandoned branch (what its next request no longer
shares) to the probation queue's oldest end.

Run: ``python benchmarks/chain_lru_sessions.py [--shared ../shared] [--capacities 20000,60000]
[--mix-capacity 6000] [--seed 0]``. About two minutes on two cores.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from wakman.policies import make_policy
from wakman.simulation import simulate
from wakman.workload import MIXES, build_config, generate_requests

ARCHIVE = "traces/weka_claude_code_traces.tar.xz"


def run(requests: list, capacity: int) -> dict[str, float]:
    """Hit rates (cache mode) of lru, s3fifo and chain-lru in both modes; chain-lru's demoted blocks."""
    out: dict[str, float] = {}
    for name in ("lru", "s3fifo"):
        out[name] = simulate(requests, name, capacity, mode="cache", track_stranded=False).hit_rate
    for label, sessions in (("hash-only", False), ("sessions", True)):
        policy = make_policy("chain-lru", capacity, sessions=sessions)
        out[label] = simulate(requests, policy, capacity, mode="cache", track_stranded=False).hit_rate
        out[f"{label} demoted"] = policy.demoted
    return out


def row(trace: str, capacity: int, r: dict[str, float]) -> str:
    cells = " | ".join(f"{r[k]:.4f}" for k in ("lru", "s3fifo", "hash-only", "sessions"))
    gain = 100 * (r["sessions"] - r["hash-only"])
    return f"| {trace} | {capacity:,} | {cells} | {gain:+.2f} | {r['sessions demoted']:,} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared")
    parser.add_argument("--capacities", default="20000,60000")
    parser.add_argument("--mix-capacity", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    print(
        "| trace | blocks | lru | s3fifo | chain-lru | chain-lru, sessions | sessions - hash-only | demoted |"
    )
    print("|---|---|---|---|---|---|---|---|")
    archive = args.shared / ARCHIVE
    if archive.exists():
        from wakman.traces import read_trace

        requests = list(read_trace(archive))
        for capacity in (int(c) for c in args.capacities.split(",")):
            print(row("claude-code", capacity, run(requests, capacity)), flush=True)
    else:
        print(f"(no {archive}: the archive rows are skipped)")
    diffs = []
    for mix in MIXES:
        requests = generate_requests(build_config(preset=mix.name, duration_s=3600), seed=args.seed)
        r = run(requests, args.mix_capacity)
        diffs.append(100 * (r["sessions"] - r["hash-only"]))
        print(row(mix.name, args.mix_capacity, r), flush=True)
    print(
        f"\nmixes: sessions - hash-only mean {statistics.mean(diffs):+.3f}, "
        f"largest |difference| {max(map(abs, diffs)):.3f} points; {time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
