"""What knowing when a session ends is worth: LRU that drops a finished session's own blocks first.

The gap between the better static policy and Belady on the generator's mixes (docs/results.md) is
what Belady knows of the future: each session's next gap and its end. This benchmark measures the
second part alone. It runs LRU in cache mode (vLLM's first-miss rule over the full prompt blocks,
then every full prompt block and output block accessed deepest first, as
``wakman.simulation.cache_mode``) and, at a moment given by the rule below, moves a session's *own*
blocks (keys it cached first that no other session has accessed since; a shared system prompt
never is one) to LRU's eviction end, deepest evicted first. Rules:

- ``end+D``: ``D`` seconds after the arrival of the session's last request in the trace (hindsight:
  an oracle that learns of each end ``D`` seconds late; nothing else of the future is used);
- ``idle T``: ``T`` seconds after the session's latest request, if no request of it came since (a
  rule a policy that is told session ids could run: a timeout).

The ``told+D`` columns are the policy that acts on such news: the core's ``chain-lru`` in session mode
(``sessions=True``), told each end ``D`` seconds after the session's last request
(``simulate(..., session_ends_after_s=D)``; its own rule for a session's own blocks,
src/wakman/policies/chain_lru.py).

Per mix (or ``--trace``'s file): the core's ``lru``, ``s3fifo``, ``chain-lru`` and ``belady`` (cache
mode) and each column's hit rate as points over the better of LRU and S3-FIFO; the summary gives
each column's mean gain and its share of the mean gap to Belady. The loop's plain LRU must equal the
core's LRU on every workload (the loop's check; the run stops otherwise). Session ids are the
trace's (``Request.session_id``; the generator gives every request one).

Run: ``python benchmarks/session_end_bound.py [--mixes a,b] [--capacity 6000] [--seed 0]
[--ends 0,5,15,30,60] [--idle 10,20,30,60] [--trace PATH]``. 3-12 s per mix on one core; about
a minute per rule on the Claude Code archive (94 M prompt blocks).
"""

from __future__ import annotations

import argparse
import functools
import heapq
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from wakman.simulation import simulate
from wakman.traces.formats import read_trace
from wakman.traces.model import Request
from wakman.workload import MIXES, build_config, generate_requests

STATIC = ("lru", "s3fifo")
CORE = (*STATIC, "chain-lru", "belady")


def lru_with_drops(requests: list[Request], capacity: int, rule: str | None, seconds: float = 0.0) -> float:
    """Token hit rate of LRU in cache mode where each session's own blocks move to the eviction end
    by ``rule`` (``"end"``, ``"idle"`` or None: plain LRU) after ``seconds``."""
    last_index = {r.session_id: i for i, r in enumerate(requests)}
    cache: OrderedDict[int, None] = OrderedDict()  # first = next to evict
    owner: dict[int, str] = {}  # key -> the session that cached it first
    shared: set[int] = set()  # keys another session accessed since
    own: dict[str, list[int]] = {}  # session -> its own keys, in the order it first cached them
    latest: dict[str, float] = {}  # session -> arrival of its latest request (s)
    due: list[tuple[float, int, str, float]] = []  # (when s, tie-break, session, its latest then)
    hit_tokens = prompt_tokens = 0
    for i, r in enumerate(requests):
        now = r.arrival_s
        while due and due[0][0] <= now:
            _, _, session, then = heapq.heappop(due)
            if rule == "end" or latest.get(session) == then:
                for key in own.pop(session, ()):  # prefix order: the deepest ends up evicted first
                    if key in cache and key not in shared:
                        cache.move_to_end(key, last=False)
        keys = [int(k) for k in r.block_keys[: r.full_blocks]]
        hits = 0
        for key in keys[: r.max_hit_blocks]:
            if key not in cache:
                break
            hits += 1
        hit_tokens += hits * r.block_size
        prompt_tokens += r.prompt_tokens
        accessed = keys + [int(k) for k in r.output_keys]
        session = r.session_id
        for key in reversed(accessed):
            if key in cache:
                cache.move_to_end(key)
            else:
                if len(cache) >= capacity:
                    cache.popitem(last=False)
                cache[key] = None
        mine = own.setdefault(session, [])
        for key in accessed:
            first = owner.get(key)
            if first is None:
                owner[key] = session
                mine.append(key)
            elif first != session:
                shared.add(key)
        latest[session] = now
        if rule == "idle" or (rule == "end" and last_index[session] == i):
            heapq.heappush(due, (now + seconds, i, session, now))
    return hit_tokens / prompt_tokens if prompt_tokens else 0.0


def workloads(args: argparse.Namespace) -> list[tuple[str, Callable[[], list[Request]]]]:
    """(name, loader) of each workload to run: ``--trace``'s file, or the mixes at ``--seed``."""
    if args.trace:
        return [(Path(args.trace).name, lambda: list(read_trace(args.trace)))]
    config = functools.partial(build_config, duration_s=3600, rate=1.5)
    return [
        (mix, functools.partial(lambda m: generate_requests(config(preset=m), seed=args.seed), mix))
        for mix in args.mixes.split(",")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mixes", default=",".join(p.name for p in MIXES), help="comma-separated mix presets"
    )
    parser.add_argument("--trace", help="a trace with session ids instead of the mixes")
    parser.add_argument("--capacity", type=int, default=6000, help="cache size in blocks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ends", default="0,5,15,30,60", help="end+D rules: D in seconds")
    parser.add_argument("--idle", default="10,20,30,60", help="idle T rules: T in seconds")
    args = parser.parse_args()
    rules = [("end", float(d)) for d in args.ends.split(",") if d] + [
        ("idle", float(t)) for t in args.idle.split(",") if t
    ]
    names = [f"end+{d:g}" if rule == "end" else f"idle {d:g}" for rule, d in rules]
    told = [float(d) for d in args.ends.split(",") if d]  # chain-lru told each end D s late
    told_names = [f"told+{d:g}" for d in told]
    seed = "" if args.trace else f", seed {args.seed}"
    print(
        f"cache mode, {args.capacity:,} blocks{seed}; points over the better of lru and s3fifo "
        "(chain-lru and each rule)"
    )
    print("| mix | lru | s3fifo | belady | chain-lru | " + " | ".join(names + told_names) + " |")
    print("|---|---|---|---|---|" + "---|" * (len(names) + len(told_names)))
    gains: dict[str, list[float]] = {name: [] for name in ("chain-lru", *names, *told_names)}
    gaps: list[float] = []
    for mix, load in workloads(args):
        began = time.perf_counter()
        requests = load()
        if any(r.session_id is None for r in requests):
            raise SystemExit(f"{mix}: the rules need every request's session id; this trace lacks some")
        core = {name: simulate(requests, name, args.capacity, mode="cache").hit_rate for name in CORE}
        plain = lru_with_drops(requests, args.capacity, None)
        if plain != core["lru"]:
            raise SystemExit(f"{mix}: this loop's LRU {plain:.6f} != the core's {core['lru']:.6f}")
        best = max(core[name] for name in STATIC)
        gaps.append(100 * (core["belady"] - best))
        gains["chain-lru"].append(100 * (core["chain-lru"] - best))
        for name, (rule, seconds) in zip(names, rules, strict=True):
            gains[name].append(100 * (lru_with_drops(requests, args.capacity, rule, seconds) - best))
        for name, seconds in zip(told_names, told, strict=True):
            result = simulate(
                requests,
                "chain-lru",
                args.capacity,
                mode="cache",
                policy_params={"sessions": True},
                session_ends_after_s=seconds,
            )
            gains[name].append(100 * (result.hit_rate - best))
        cells = [f"{core[n]:.4f}" for n in ("lru", "s3fifo", "belady")]
        cells += [f"{gains[n][-1]:+.2f}" for n in gains]
        print(f"| {mix} | " + " | ".join(cells) + f" |  ({time.perf_counter() - began:.0f} s)", flush=True)
    gap = sum(gaps) / len(gaps)
    print(f"mean gap to Belady {gap:.2f} points over {len(gaps)} mixes")
    for name, values in gains.items():
        mean = sum(values) / len(values)
        closed = f"{mean / gap:.0%} of the gap" if gap > 0 else "no gap to close"
        print(f"{name:>10}: mean {mean:+.2f} points ({closed}), worst {min(values):+.2f}")


if __name__ == "__main__":
    main()
