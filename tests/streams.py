"""Deterministic key streams for policy tests (numpy's seeded generator)."""

from __future__ import annotations

import hashlib

import numpy as np

MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """splitmix64's output function of x + golden ratio, written here apart from the core's
    (``core/key_map.hpp``): the duel's sampling hash, the copy keys and vLLM's policy keys use it."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def key_of(label: object) -> int:
    """A deterministic 64-bit block key for a readable test label ("a", ("a", 2), ...)."""
    return int.from_bytes(hashlib.blake2b(repr(label).encode(), digest_size=8).digest(), "little")


def keys_of(*labels: object) -> list[int]:
    return [key_of(label) for label in labels]


def zipf_stream(n: int, alpha: float, universe: int, seed: int) -> np.ndarray:
    """``n`` keys over ``universe`` objects whose popularity follows Zipf(``alpha``) (any alpha > 0)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, universe + 1) ** alpha
    ranks = rng.choice(universe, size=n, p=weights / weights.sum())
    return rng.permutation(universe)[ranks].astype(np.int64)  # popular keys are not the small ids


def zipf_with_scans(
    n: int, seed: int, universe: int = 50_000, scan_every: int = 20_000, scan_length: int = 4_000
) -> np.ndarray:
    """Zipf(1.0) traffic interrupted by sequential one-time scans of fresh keys."""
    keys = zipf_stream(n, 1.0, universe, seed)
    next_fresh = 10 * universe
    for start in range(scan_every, n - scan_length, scan_every):
        keys[start : start + scan_length] = np.arange(next_fresh, next_fresh + scan_length)
        next_fresh += scan_length
    return keys


def lcg_stream(n: int, universe: int, seed: int = 12345) -> list[int]:
    """A skewed stream from a fixed linear congruential generator: stable across numpy versions."""
    state, out = seed, []
    for _ in range(n):
        state = (6364136223846793005 * state + 1442695040888963407) % (1 << 64)
        u = (state >> 11) / float(1 << 53)
        out.append(int(universe * u * u * u))  # cubic skew towards small ids
    return out
