"""How far a policy could go on the generator's mixes if it knew each block class's reuse statistics
(not any block's own future): the ceiling for a policy that learns per-class statistics from the hash
chains (issue: past choosing between two policies), and how much of it survives learning them.

Cache mode, vLLM's first-miss rule, each request's blocks accessed deepest first (as
``wakman.simulation.cache_mode``). A block's class at each access comes from the hash chains alone:
the chain's root block (its system prompt: the application), whether the block has been seen with
more than one child (a shared prefix), and the chain's turn (1 + the turn of the deepest earlier
request whose prompt or output ended on a block of this prompt; at most 8). The statistics are, per
class, the histogram of the time to a block's next access (48 log buckets, 0.05 s to 2 h, and
"never"), taken (``--stats``) from the whole trace (future included: a ceiling, and one fitted to the
very accesses it ranks), from the requests of the trace's first half only (their next-access times
still read from the whole trace, so a gap that reaches into the second half counts; and applied
to the whole trace, the first half included), or learned online from the
past (``OnlineHistogram``, rebuilt every 15 s). A miss evicts, among cached blocks the request does
not touch, those ranked lowest for their class at their age (``--rank``): ``horizon``, the
probability of a next access within ``T`` seconds; ``density``, LHD's hit density (expected hits per
second of residence, the residence capped at ``T``); ties deepest first, then least recent. The
last column and the summary take each mix's best ``T``, chosen after the fact (more hindsight: read
them as a ceiling). ``--check-lru`` also runs LRU through the same loop (it must equal the core's
LRU: the loop's correctness check).

Run: ``python benchmarks/reuse_statistics_bound.py [--mixes a,b] [--capacity 6000] [--seed 0]
[--horizons 15,30,60] [--rank horizon|density] [--stats whole|first-half|online] [--check-lru]``.
Under a minute per mix and ``T`` on two cores (numpy over the cache at each eviction).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable

import numpy as np

from wakman.simulation import simulate
from wakman.traces.model import Request
from wakman.workload import MIXES, build_config, generate_requests

BUCKETS = 48
EDGES = np.concatenate([[0.0], np.geomspace(0.05, 7200.0, BUCKETS - 1)])  # seconds
MAX_TURN = 8
PRIOR = 20.0
RELEARN_S = 15.0  # the online statistics' table is rebuilt this often (trace seconds)


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


def class_count(classes: list[list[int]]) -> int:
    return 1 + max((max(c) for c in classes if c), default=0)


def class_histogram(classes: list[list[int]], gaps: list[np.ndarray], n: int) -> np.ndarray:
    """hist[c, b]: accesses of class c whose next access came after a gap in bucket b; the last
    column counts those never accessed again."""
    hist = np.zeros((n, BUCKETS + 1))
    for cls, gap in zip(classes, gaps, strict=False):
        if cls:
            b = np.where(np.isinf(gap), BUCKETS, bucket(np.where(np.isinf(gap), 0.0, gap)))
            np.add.at(hist, (np.asarray(cls), b), 1)
    return hist


def horizon_table(hist: np.ndarray, horizon_s: float) -> np.ndarray:
    """table[c, b] = P(next access within horizon_s | none for EDGES[b] seconds), class c."""
    n = len(hist)
    surviving = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1]
    table = np.zeros((n, BUCKETS))
    for b in range(BUCKETS):
        within = hist[:, b : min(int(bucket(EDGES[b] + horizon_s)), BUCKETS - 1) + 1].sum(axis=1)
        table[:, b] = np.divide(within, surviving[:, b], out=np.zeros(n), where=surviving[:, b] > 0)
    return table


MID = np.sqrt(EDGES * np.append(EDGES[1:], 2 * EDGES[-1]))  # a bucket's representative gap (s)
MID[0] = EDGES[1] / 2


def density_table(hist: np.ndarray, cap_s: float) -> np.ndarray:
    """table[c, b] = hit density at age EDGES[b]: expected hits per second of residence for a block
    of class c not accessed for EDGES[b] seconds and kept at most cap_s seconds more (LHD's ranking,
    Beckmann et al., NSDI'18, with the residence capped at cap_s instead of learned from evictions)."""
    n = len(hist)
    table = np.zeros((n, BUCKETS))
    for b in range(BUCKETS):
        age = EDGES[b]
        reused = np.zeros(BUCKETS + 1, dtype=bool)
        reused[b:BUCKETS] = MID[b:] <= age + cap_s
        stay = np.full(BUCKETS + 1, cap_s)
        stay[:BUCKETS] = np.where(reused[:BUCKETS], MID - age, cap_s)
        stay[:b] = 0.0  # gaps shorter than the age: not this block's future
        hits = hist[:, reused].sum(axis=1)
        seconds = (hist * stay).sum(axis=1)
        table[:, b] = np.divide(hits, seconds, out=np.zeros(n), where=seconds > 0)
    return table


RANKS = {"horizon": horizon_table, "density": density_table}


class OnlineHistogram:
    """The class histogram learned from the past only: each key's last access (seconds, class) is
    kept; a re-access ends that observation in its gap's bucket, a key not re-accessed yet is censored
    at its age. ``histogram(now)`` turns the per-class hazard of reuse per bucket (Kaplan-Meier, a
    sparse class shrunk towards all classes' hazard by ``PRIOR`` pseudo-observations per bucket) into
    the probability mass of each bucket and of "never" (past the last bucket)."""

    def __init__(self, classes: int) -> None:
        self.n = classes
        self.reuses = np.zeros((classes, BUCKETS))  # observations ended by a re-access in bucket b
        self.slot: dict[int, int] = {}
        self.last_s: list[float] = []
        self.last_class: list[int] = []

    def observe(self, keys: list[int], classes: list[int], now: float) -> None:
        for k, c in zip(keys, classes, strict=True):
            i = self.slot.get(k)
            if i is None:
                self.slot[k] = len(self.last_s)
                self.last_s.append(now)
                self.last_class.append(c)
                continue
            self.reuses[self.last_class[i], int(bucket(now - self.last_s[i]))] += 1
            self.last_s[i], self.last_class[i] = now, c

    def histogram(self, now: float) -> np.ndarray:
        censored = np.zeros((self.n, BUCKETS))
        ages = bucket(now - np.asarray(self.last_s))
        np.add.at(censored, (np.asarray(self.last_class, dtype=int), ages), 1)
        last_bucket = self.reuses + censored
        at_risk = np.cumsum(last_bucket[:, ::-1], axis=1)[:, ::-1]
        pooled_risk = at_risk.sum(axis=0)
        pooled = np.divide(self.reuses.sum(axis=0), pooled_risk, out=np.zeros(BUCKETS), where=pooled_risk > 0)
        hazard = (self.reuses + PRIOR * pooled) / (at_risk + PRIOR)
        alive = np.cumprod(1 - hazard, axis=1)
        before = np.concatenate([np.ones((self.n, 1)), alive[:, :-1]], axis=1)
        return np.concatenate([before * hazard, alive[:, -1:]], axis=1)


def replay(
    requests: list[Request],
    capacity: int,
    classes: list[list[int]],
    table: np.ndarray | None,
    learn: Callable[[np.ndarray], np.ndarray] | None = None,
) -> float:
    """Token hit rate in cache mode; ``table`` None (and no ``learn``): LRU. With ``learn`` (a
    histogram -> table function) the table is rebuilt every RELEARN_S seconds from an
    ``OnlineHistogram`` of the requests before (until the first rebuild: LRU order)."""
    online = OnlineHistogram(class_count(classes)) if learn is not None else None
    relearn_at = 0.0
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
        if online is not None and learn is not None:
            if r.arrival_s >= relearn_at:
                table, relearn_at = learn(online.histogram(r.arrival_s)), r.arrival_s + RELEARN_S
            online.observe(keys, cls, r.arrival_s)
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
    parser.add_argument("--horizons", default="15,30,60", help="seconds: T, or the residence cap")
    parser.add_argument("--rank", choices=sorted(RANKS), default="horizon")
    parser.add_argument("--stats", choices=("whole", "first-half", "online"), default="whole")
    parser.add_argument("--check-lru", action="store_true")
    args = parser.parse_args()
    names = [m.name for m in MIXES] if args.mixes == "all" else args.mixes.split(",")
    horizons = [float(h) for h in args.horizons.split(",")]
    rank = RANKS[args.rank]
    print(
        f"capacity {args.capacity} blocks, seed {args.seed}, rank {args.rank}, statistics {args.stats}; "
        "points over the better of lru/s3fifo"
    )
    columns = " | ".join(f"{h:g} s" for h in horizons)
    print(f"| mix | lru | s3fifo | chain-lru | belady | {columns} | gap closed (best) |")
    print("|---|---|---|---|---|" + "---|" * len(horizons) + "---|")
    gains, gaps = [], []
    for name in names:
        started = time.perf_counter()
        reqs = generate_requests(build_config(preset=name, duration_s=3600.0), seed=args.seed)
        base = {
            p: simulate(reqs, p, args.capacity, mode="cache").hit_rate
            for p in ("lru", "s3fifo", "chain-lru", "belady")
        }
        classes, future = chain_classes(reqs), next_access_s(reqs)
        if args.check_lru:
            mine = replay(reqs, args.capacity, classes, None)
            if abs(mine - base["lru"]) > 1e-9:
                sys.exit(f"{name}: this loop's LRU {mine:.6f} is not the core's {base['lru']:.6f}")
        best = max(base["lru"], base["s3fifo"])
        n = class_count(classes)
        if args.stats == "online":
            rates = [replay(reqs, args.capacity, classes, None, lambda h, x=x: rank(h, x)) for x in horizons]
        else:
            half_s = reqs[-1].arrival_s / 2
            seen = len(reqs) if args.stats == "whole" else sum(r.arrival_s < half_s for r in reqs)
            hist = class_histogram(classes[:seen], future[:seen], n)
            rates = [replay(reqs, args.capacity, classes, rank(hist, x)) for x in horizons]
        gain, gap = 100 * (max(rates) - best), 100 * (base["belady"] - best)
        gains.append(gain)
        gaps.append(gap)
        cells = " | ".join(f"{v:.4f} ({100 * (v - best):+.2f})" for v in rates)
        print(
            f"| {name} | {base['lru']:.4f} | {base['s3fifo']:.4f} | "
            f"{base['chain-lru']:.4f} ({100 * (base['chain-lru'] - best):+.2f}) | {base['belady']:.4f} | "
            f"{cells} | {100 * gain / gap if gap > 0 else 0:.0f} % |"
            f"  ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    gain, gap = np.mean(gains), np.mean(gaps)
    closed = f"closed {100 * gain / gap:.0f} % (mean gain over mean gap)" if gap > 0 else "no gap to close"
    print(f"mean gain at the best horizon {gain:+.2f} points; mean gap to Belady {gap:.2f}; {closed}")


if __name__ == "__main__":
    main()
