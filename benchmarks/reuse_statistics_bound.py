"""How far a policy could go on the generator's mixes if it knew each block class's reuse statistics
exactly (not any block's own future): the ceiling for a policy that learns per-class statistics from
the hash chains (issue: past choosing between two policies).

Cache mode, vLLM's first-miss rule, each request's blocks accessed deepest first (as
``wakman.simulation.cache_mode``). A block's class at each access comes from the hash chains alone:
the chain's root block (its system prompt: the application), whether the block has been seen with
more than one child (a shared prefix), and the chain's turn (1 + the turn of the deepest earlier
request whose prompt or output ended on a block of this prompt; at most 8). The statistics are the
whole trace's, future included: per class, the histogram of the time to a block's next access
(48 log buckets, 0.05 s to 2 h, and "never"). A miss evicts, among cached blocks the request does not
touch, those with the lowest P(next access within ``T`` seconds | no access for ``age`` seconds)
for their class, deepest first, then least recent. The last column and the summary take each mix's
best horizon, chosen after the fact (one more piece of hindsight: read them as a ceiling).
``--check-lru`` also runs LRU through the same loop (it must equal the core's LRU: the loop's
correctness check).

Run: ``python benchmarks/reuse_statistics_bound.py [--mixes a,b] [--capacity 6000] [--seed 0]
[--horizons 15,30,60] [--check-lru]``. Under a minute per mix on two cores (numpy over the cache at
each eviction).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np

from wakman.simulation import simulate
from wakman.traces.model import Request
from wakman.workload import MIXES, build_config, generate_requests

BUCKETS = 48
EDGES = np.concatenate([[0.0], np.geomspace(0.05, 7200.0, BUCKETS - 1)])  # seconds
MAX_TURN = 8


def bucket(age_s: np.ndarray | float) -> np.ndarray:
    return np.searchsorted(EDGES, age_s, side="right") - 1


def accessed(r: Request) -> list[int]:
    """The blocks a request caches, as the core's ``replay_request`` accesses them: its full prompt
    blocks (``Request.full_blocks``), then its output blocks."""
    return [int(k) for k in r.block_keys[: r.full_blocks]] + [int(k) for k in r.output_keys]


def chain_classes(requests: list[Request]) -> list[list[int]]:
    """Per request, the class of each block it accesses (prompt then output keys), hash-only."""
    roots: dict[int, int] = {}
    end_turn: dict[int, int] = {}  # block key -> turn of the request whose prompt or output ended there
    children: dict[int, set[int]] = {}
    out = []
    for r in requests:
        keys = accessed(r)
        if not keys:
            out.append([])
            continue
        root = roots.setdefault(keys[0], len(roots))
        prompt = keys[: r.full_blocks]
        turn = next((end_turn[k] + 1 for k in reversed(prompt) if k in end_turn), 1)
        for parent, child in itertools.pairwise(keys):
            children.setdefault(parent, set()).add(child)
        out.append(
            [(root * 2 + (len(children.get(k, ())) > 1)) * (MAX_TURN + 1) + min(turn, MAX_TURN) for k in keys]
        )
        end_turn[keys[-1]] = turn
        if prompt:
            end_turn[prompt[-1]] = turn
    return out


def next_access_s(requests: list[Request]) -> list[np.ndarray]:
    """Per request, per accessed block: seconds to that key's next access (inf: never)."""
    last: dict[int, tuple[int, int]] = {}
    out: list[np.ndarray] = []
    for i, r in enumerate(requests):
        keys = accessed(r)
        out.append(np.full(len(keys), np.inf))
        for j, k in enumerate(keys):
            if k in last:
                pi, pj = last[k]
                out[pi][pj] = r.arrival_s - requests[pi].arrival_s
            last[k] = (i, j)
    return out


def reuse_table(classes: list[list[int]], gaps: list[np.ndarray], horizon_s: float) -> np.ndarray:
    """table[c, b] = P(next access within horizon_s | none for EDGES[b] seconds), class c."""
    n = 1 + max((max(c) for c in classes if c), default=0)
    hist = np.zeros((n, BUCKETS + 1))  # last column: never accessed again
    for cls, gap in zip(classes, gaps, strict=True):
        if cls:
            b = np.where(np.isinf(gap), BUCKETS, bucket(np.where(np.isinf(gap), 0.0, gap)))
            np.add.at(hist, (np.asarray(cls), b), 1)
    surviving = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1]
    table = np.zeros((n, BUCKETS))
    for b in range(BUCKETS):
        within = hist[:, b : min(int(bucket(EDGES[b] + horizon_s)), BUCKETS - 1) + 1].sum(axis=1)
        table[:, b] = np.divide(within, surviving[:, b], out=np.zeros(n), where=surviving[:, b] > 0)
    return table


def replay(
    requests: list[Request], capacity: int, classes: list[list[int]], table: np.ndarray | None
) -> float:
    """Token hit rate in cache mode; ``table`` None: LRU."""
    slot_of: dict[int, int] = {}
    key_at = np.zeros(capacity, dtype=np.uint64)
    last_s = np.zeros(capacity)
    stamp = np.zeros(capacity)  # access order (the LRU order)
    klass = np.zeros(capacity, dtype=np.int64)
    depth = np.zeros(capacity)
    used = np.zeros(capacity, dtype=bool)
    free = list(range(capacity))[::-1]
    hit_tokens = prompt_tokens = 0
    clock = 0.0
    for r, cls in zip(requests, classes, strict=True):
        keys = accessed(r)
        hits = 0
        while hits < r.max_hit_blocks and keys[hits] in slot_of:  # vLLM's first-miss rule
            hits += 1
        hit_tokens += hits * r.block_size
        prompt_tokens += r.prompt_tokens
        need = sum(k not in slot_of for k in dict.fromkeys(keys)) - len(free)
        if need > 0:
            candidate = used.copy()
            for k in keys:
                if k in slot_of:
                    candidate[slot_of[k]] = False
            idx = np.nonzero(candidate)[0]
            if table is None:
                order = np.argsort(stamp[idx], kind="stable")
            else:
                score = table[klass[idx], bucket(r.arrival_s - last_s[idx])]
                order = np.lexsort((stamp[idx], -depth[idx], score))
            for s in idx[order[:need]]:
                del slot_of[int(key_at[s])]
                used[s] = False
                free.append(int(s))
        for j in range(len(keys) - 1, -1, -1):  # deepest first
            s = slot_of.get(keys[j])
            if s is None:
                if not free:
                    continue
                s = free.pop()
                slot_of[keys[j]], key_at[s], used[s] = s, keys[j], True
            clock += 1
            last_s[s], stamp[s], klass[s], depth[s] = r.arrival_s, clock, cls[j], j
    return hit_tokens / prompt_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixes", default="mix02-pure-multi,mix03-pure-agentic,mix19-thirds")
    parser.add_argument("--capacity", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--horizons", default="15,30,60")
    parser.add_argument("--check-lru", action="store_true")
    args = parser.parse_args()
    names = [m.name for m in MIXES] if args.mixes == "all" else args.mixes.split(",")
    horizons = [float(h) for h in args.horizons.split(",")]
    print(f"capacity {args.capacity} blocks, seed {args.seed}; points over the better of lru/s3fifo")
    columns = " | ".join(f"T={h:g} s" for h in horizons)
    print(f"| mix | lru | s3fifo | belady | {columns} | gap closed (best T) |")
    print("|---|---|---|---|" + "---|" * len(horizons) + "---|")
    gains, gaps = [], []
    for name in names:
        started = time.perf_counter()
        reqs = generate_requests(build_config(preset=name, duration_s=3600.0), seed=args.seed)
        base = {
            p: simulate(reqs, p, args.capacity, mode="cache").hit_rate for p in ("lru", "s3fifo", "belady")
        }
        classes, future = chain_classes(reqs), next_access_s(reqs)
        if args.check_lru:
            mine = replay(reqs, args.capacity, classes, None)
            if abs(mine - base["lru"]) > 1e-9:
                sys.exit(f"{name}: this loop's LRU {mine:.6f} is not the core's {base['lru']:.6f}")
        best = max(base["lru"], base["s3fifo"])
        rates = [replay(reqs, args.capacity, classes, reuse_table(classes, future, h)) for h in horizons]
        gain, gap = 100 * (max(rates) - best), 100 * (base["belady"] - best)
        gains.append(gain)
        gaps.append(gap)
        cells = " | ".join(f"{v:.4f} ({100 * (v - best):+.2f})" for v in rates)
        print(
            f"| {name} | {base['lru']:.4f} | {base['s3fifo']:.4f} | {base['belady']:.4f} | {cells} | "
            f"{100 * gain / gap if gap > 0 else 0:.0f} % |  ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    print(
        f"mean gain at the best horizon {np.mean(gains):+.2f} points; "
        f"mean gap to Belady {np.mean(gaps):.2f}; "
        f"closed {100 * np.mean(gains) / np.mean(gaps):.0f} % (mean gain over mean gap)"
    )


if __name__ == "__main__":
    main()
