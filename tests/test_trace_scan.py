"""The core's one-pass trace scan (wakman._core.TraceScan) against independent computations: its
stack-distance histogram against LRU replays, its reuse-time percentiles against numpy's exact ones."""

from __future__ import annotations

import numpy as np
import pytest
from wakman._core import TraceScan

from wakman.policies import make_policy
from wakman.traces.stats import REUSE_PRECISION

LOW = 2.0**-20  # reuse times below this count as 0 (absolute error bound)


def lru_hits(hist: np.ndarray, capacity: int) -> int:
    return int(hist[:capacity].sum())


def scan_in_batches(scan: TraceScan, keys: np.ndarray, rng: np.random.Generator) -> None:
    i = 0
    while i < len(keys):
        n = int(rng.integers(0, 40))
        scan.scan(keys[i : i + n], float(i))
        i += n


@pytest.mark.parametrize(
    ("stream", "min_positions"),
    [("zipf", 1 << 16), ("zipf", 4), ("uniform", 16), ("loops", 2)],
)
def test_stack_distances_equal_lru_replays(stream, min_positions):
    rng = np.random.default_rng(7)
    n = 60_000
    if stream == "zipf":
        keys = rng.zipf(1.2, n).astype(np.uint64) % np.uint64(3000)
    elif stream == "uniform":
        keys = rng.integers(0, 800, n).astype(np.uint64)
    else:  # prefix-like: growing runs re-read in order, the shape of agentic traces
        keys = np.concatenate([np.arange(int(rng.integers(1, 300)), dtype=np.uint64) for _ in range(400)])
    keys = keys * np.uint64(0x9E3779B97F4A7C15)  # spread over the 64-bit range
    scan = TraceScan(min_positions=min_positions)
    scan_in_batches(scan, keys, rng)
    hist = scan.distance_histogram()
    assert scan.accesses == len(keys) and scan.distinct == len(np.unique(keys)) == len(hist)
    assert scan.reuses == hist.sum() == len(keys) - scan.distinct
    if min_positions < 1 << 16:
        assert scan.compactions >= 10  # the renumbering ran many times
    for capacity in (1, 2, 3, 10, 77, 256, 1000, scan.distinct):
        assert lru_hits(hist, capacity) == make_policy("lru", capacity).replay(keys), capacity


def test_batches_lists_and_repeats_inside_a_batch():
    keys = [5, 5, 7, 5, 2**64 - 1, 7, 7, 5]
    whole, one_by_one = TraceScan(min_positions=2), TraceScan(min_positions=2)
    assert whole.scan(keys, 0.0) == 5
    for k in keys:
        one_by_one.scan(np.array([k], dtype=np.uint64), 0.0)
    # reuse distances: 5 (0), 5 (1: 7 between), 7 (2: 5 and 2**64-1), 7 (0), 5 (2: 2**64-1 and 7)
    assert whole.distance_histogram().tolist() == one_by_one.distance_histogram().tolist() == [2, 1, 2]
    assert whole.reuses == one_by_one.reuses == 5


def test_without_stack_distances():
    scan = TraceScan(stack_distances=False)
    assert scan.scan(np.array([1, 2, 1], dtype=np.uint64), 0.0) == 1
    assert scan.distinct == 2 and scan.reuse_count() == 1
    with pytest.raises(Exception, match="stack_distances"):
        scan.distance_histogram()


def exact_reuse_times(keys: np.ndarray, times: np.ndarray) -> np.ndarray:
    last: dict[int, float] = {}
    out = []
    for k, t in zip(keys.tolist(), times.tolist(), strict=True):
        if k in last:
            out.append(t - last[k])
        last[k] = t
    return np.array(out)


@pytest.mark.parametrize("clock", ["continuous", "milliseconds", "tiny"])
def test_reuse_percentiles_match_numpy_within_the_documented_precision(clock):
    rng = np.random.default_rng(3)
    n = 50_000
    keys = rng.zipf(1.3, n).astype(np.uint64) % np.uint64(5000)
    gaps = {
        "continuous": rng.lognormal(0.0, 3.0, n),
        "milliseconds": np.round(rng.exponential(2.0, n), 3),
        "tiny": rng.exponential(1e-6, n),
    }[clock]
    times = np.cumsum(gaps)
    labels = rng.integers(0, 3, n)
    scan = TraceScan(stack_distances=False)
    for k, t, label in zip(keys, times.tolist(), labels.tolist(), strict=True):
        scan.scan(np.array([k]), t, label)
    qs = [0.0, 1.0, 10.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0]
    cases = [(-1, np.ones(n, dtype=bool))] + [(lab, labels == lab) for lab in range(3)]
    all_reuse = exact_reuse_times(keys, times)
    reused = np.zeros(n, dtype=bool)  # [i]: access i's key was seen before
    seen: set[int] = set()
    for i, k in enumerate(keys.tolist()):
        reused[i] = k in seen
        seen.add(k)
    for label, mask in cases:
        # a label's reuse times: since the key's previous access by anyone, filed under this access's label
        exact = all_reuse[mask[reused]]
        assert scan.reuse_count(label) == len(exact)
        ours = np.array(scan.reuse_percentiles(qs, label))
        theirs = np.percentile(exact, qs)
        assert np.all(np.abs(ours - theirs) <= REUSE_PRECISION * theirs + LOW), (label, ours, theirs)
    assert np.isnan(scan.reuse_percentiles([50.0], 9)[0]) and scan.reuse_count(9) == 0
