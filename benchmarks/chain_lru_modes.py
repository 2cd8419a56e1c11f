"""chain-lru's duel against its two modes run alone, on one generated preset (a mix or an ablation).

Prints, at ``--capacity`` blocks: LRU, S3-FIFO, chain-lru (the duel), and chain-lru held in its
recency mode and in its filter mode (``make_policy("chain-lru", C, mode=...)``), in serve mode (the
event loop of docs/results.md) and in cache mode; the duel's switches and the share of requests it
heard in the filter mode; and, in cache mode, each mode on the trace's sampled blocks alone (one key
in ``S`` by splitmix64, S the duel's own sampling at this capacity) at ``C // S`` blocks, which is
what each of the duel's miniatures sees.

Run: ``python benchmarks/chain_lru_modes.py --preset turns16-thirds --seed 2 --duration 1800``
(reproduce's ablations run 1,800 s at 6,000 blocks; its mixes 3,600 s at 3,000, 6,000, 12,000).
``--decode-tps`` sets serve mode's decode speed (tokens per second per request; the server model's
default otherwise): how long a running request keeps its blocks pinned.
"""

from __future__ import annotations

import argparse

import msgspec
import numpy as np

from wakman.adaptive import simulate
from wakman.policies import make_policy
from wakman.simulation import ServerModel
from wakman.workload import build_config, generate_requests


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The core's splitmix64 (core/key_map.hpp), on a uint64 array."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def sampled(reqs: list, every: int) -> list:
    """Each request's full prompt blocks and outputs with ``splitmix64(key) % every == 0``, the
    prompt cut to those blocks (all of them can hit: one token past them), the output at least as
    long as the sampled output keys (a request's output keys are at most the blocks its decoding
    completes)."""
    mask = np.uint64(every - 1)
    out = []
    for r in reqs:
        keys = np.asarray(r.block_keys[: r.full_blocks], dtype=np.uint64)
        keys = keys[(splitmix64(keys) & mask) == 0]
        outs = np.asarray(r.output_keys, dtype=np.uint64)
        outs = outs[(splitmix64(outs) & mask) == 0]
        tokens = len(keys) * r.block_size + 1
        decoded = max(r.output_tokens, len(outs) * r.block_size)
        out.append(
            msgspec.structs.replace(
                r, block_keys=keys, output_keys=outs, prompt_tokens=tokens, output_tokens=decoded
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duration", type=float, default=1800.0)
    parser.add_argument("--capacity", type=int, default=6000)
    parser.add_argument("--decode-tps", type=float, default=ServerModel().decode_tokens_per_s)
    args = parser.parse_args()
    server = ServerModel(decode_tokens_per_s=args.decode_tps)
    reqs = generate_requests(build_config(preset=args.preset, duration_s=args.duration), seed=args.seed)
    cap = args.capacity
    print(
        f"{args.preset}, seed {args.seed}, {args.duration:g} s, {len(reqs):,} requests, {cap:,} blocks, "
        f"serve mode decoding {args.decode_tps:g} tokens/s a request"
    )
    for mode in ("serve", "cache"):
        rates = {}
        for label in ("lru", "s3fifo", "chain-lru", "recency", "filter"):
            if label in ("recency", "filter"):
                policy = make_policy("chain-lru", cap, mode=label)
            else:
                policy = make_policy(label, cap)
            options = {"server": server} if mode == "serve" else {}
            rates[label] = simulate(reqs, policy, cap, mode=mode, **options).hit_rate
            if label == "chain-lru":
                duel = policy
        best = max(rates["lru"], rates["s3fifo"])
        cells = ", ".join(f"{k} {v:.4f} ({100 * (v - best):+.2f})" for k, v in rates.items())
        print(f"{mode} mode (points over the better of lru and s3fifo): {cells}")
        # each mode's own duel: the floor guard reads the live cache's hits, which differ by mode
        print(
            f"  the duel in {mode} mode: {duel.mode_switches} switches, {duel.requests_filtered:,} of "
            f"{duel.requests_heard:,} requests heard in the filter mode"
        )
    every = duel.sample_every
    small = sampled(reqs, every)
    for mode in ("recency", "filter"):
        full = simulate(reqs, make_policy("chain-lru", cap, mode=mode), cap, mode="cache").hit_rate
        mini = simulate(small, make_policy("chain-lru", cap // every, mode=mode), cap // every, mode="cache")
        print(
            f"cache mode, {mode} mode: {full:.4f} at {cap:,} blocks; {mini.hit_rate:.4f} on one key in "
            f"{every} at {cap // every:,} blocks (a miniature's view)"
        )


if __name__ == "__main__":
    main()
