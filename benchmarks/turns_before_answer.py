"""How many of a generated trace's later turns arrive before the previous turn's answer is decoded.

The generator draws a session's gaps arrival to arrival (docs/workload.md), with no regard to how
long the previous turn's answer takes to decode: a later turn whose gap is shorter than the
previous turn's ``output_tokens / decode_tps`` seconds arrives while that answer is still being
decoded, even with no prefill and no queue (a lower bound on the turns a serving engine would see
early). This script counts them per profile over the consecutive requests of each session in the
trace (a session whose earlier turns fell in the warm-up counts from its first request in it).

With ``--capacities``, it also simulates ``--policies`` in serve mode (the default server model,
whose decode rate is 40 tokens/s a request) on the trace as generated and with such turns pushed
back to when the previous answer is decoded (at ``decode_tps``, from the previous turn's arrival,
itself pushed back or not), two ways: ``alone``, each later turn at ``max(its arrival, that
time)``, the session's other turns where they were unless they too come early; ``shift``, each gap
raised to at least that decode time, so a pushed turn delays the session's later turns too.
Requests pushed to the duration or past it are dropped, as the generator drops them. It prints
the hit rates and the differences in points.

Run: ``python benchmarks/turns_before_answer.py [--preset mix19-thirds] [--seed 0] [--duration 3600]
[--decode-tps 40] [--capacities 3000,6000,12000] [--policies lru,s3fifo]``. The count takes about
a second (generating the trace), the simulations a few seconds more.
"""

from __future__ import annotations

import argparse
from collections import Counter

import msgspec

from wakman.simulation import ServerModel, simulate
from wakman.traces.model import Request
from wakman.workload import build_config, generate_requests


def early_turns(requests: list[Request], decode_tps: float) -> tuple[Counter, Counter]:
    """Per label: the later turns (a request whose session has an earlier one in the trace) and
    those that arrive less than the previous turn's ``output_tokens / decode_tps`` seconds after it."""
    later, early = Counter(), Counter()
    previous: dict[str, Request] = {}
    for req in requests:  # arrival order
        prev = previous.get(req.session_id)
        if prev is not None:
            later[req.label] += 1
            early[req.label] += req.arrival_s - prev.arrival_s < prev.output_tokens / decode_tps
        previous[req.session_id] = req
    return later, early


def pushed_back(requests: list[Request], decode_tps: float, duration_s: float, shift: bool) -> list[Request]:
    """The trace with no later turn before its previous answer is decoded (the previous turn's new
    arrival plus its ``output_tokens / decode_tps`` seconds): ``shift`` False moves only the turns
    that come early, True raises each gap to at least that decode time (moving the session's later
    turns with it). Requests pushed to ``duration_s`` or later are dropped; arrival order."""
    out: list[Request] = []
    previous: dict[str, tuple[Request, float]] = {}  # a session's last request and its new arrival
    for req in requests:
        arrival = req.arrival_s
        if req.session_id in previous:
            prev, prev_arrival = previous[req.session_id]
            decoded = prev_arrival + prev.output_tokens / decode_tps
            arrival = max(prev_arrival + req.arrival_s - prev.arrival_s if shift else arrival, decoded)
        previous[req.session_id] = (req, arrival)
        if arrival < duration_s:
            out.append(msgspec.structs.replace(req, arrival_s=arrival))
    return sorted(out, key=lambda r: r.arrival_s)  # stable: ties keep the trace's order


WAYS = ("alone", "shift")  # how a turn that comes early is pushed back (pushed_back's shift)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--preset", default="mix19-thirds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds")
    parser.add_argument("--decode-tps", type=float, default=40.0, help="decode tokens/s a request")
    parser.add_argument("--capacities", default="", help="comma-separated blocks (none: count only)")
    parser.add_argument("--policies", default="lru,s3fifo")
    args = parser.parse_args()

    requests = generate_requests(build_config(preset=args.preset, duration_s=args.duration), seed=args.seed)
    later, early = early_turns(requests, args.decode_tps)
    print(f"{args.preset}, seed {args.seed}, {args.duration:g} s: {len(requests):,} requests")
    for label in sorted(later):
        print(
            f"  {label}: {early[label]:,} of {later[label]:,} later turns "
            f"({100 * early[label] / later[label]:.1f} %) arrive before the previous answer is "
            f"decoded at {args.decode_tps:g} tokens/s"
        )
    if not args.capacities:
        return
    traces = {way: pushed_back(requests, args.decode_tps, args.duration, way == "shift") for way in WAYS}
    server = ServerModel(decode_tokens_per_s=args.decode_tps)  # the decode speed the turns were pushed by
    print(
        f"serve mode, default server model decoding {args.decode_tps:g} tokens/s; pushed back: "
        + ", ".join(f"{way} {len(reqs):,} requests" for way, reqs in traces.items())
    )
    for capacity in (int(c) for c in args.capacities.split(",")):
        for policy in args.policies.split(","):
            before = simulate(requests, policy, capacity, mode="serve", server=server).hit_rate
            cells = []
            for way, reqs in traces.items():
                after = simulate(reqs, policy, capacity, mode="serve", server=server).hit_rate
                cells.append(f"{way} {after:.4f} ({100 * (after - before):+.2f} points)")
            print(f"  {capacity:>6,} blocks {policy:<8} as generated {before:.4f}, " + ", ".join(cells))


if __name__ == "__main__":
    main()
