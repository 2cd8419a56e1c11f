"""Exact agreement with libCacheSim (the C reference) on hit counts, to the request."""

from __future__ import annotations

import pytest

pytest.importorskip("libcachesim")  # a test dependency: `pip install -e .[test]`

from lcs_oracle import lcs_hits, write_oracle_general
from streams import zipf_stream, zipf_with_scans
from wakman.policies import make_policy

N = 200_000
STREAMS = {
    "zipf-0.8": lambda: zipf_stream(N, 0.8, 100_000, seed=1),
    "zipf-1.2": lambda: zipf_stream(N, 1.2, 100_000, seed=2),
    "zipf-scans": lambda: zipf_with_scans(N, seed=3),
}
CAPACITIES = (200, 1_000, 5_000, 20_000)
POLICIES = ("lru", "fifo", "s3fifo", "s3fifo-v0", "sieve", "arc", "belady")


@pytest.fixture(scope="module", params=list(STREAMS))
def stream(request, tmp_path_factory):
    keys = STREAMS[request.param]()
    path = write_oracle_general(keys, tmp_path_factory.mktemp("lcs") / f"{request.param}.bin")
    return keys.tolist(), path


@pytest.mark.parametrize("policy", POLICIES)
def test_same_hits_as_libcachesim(stream, policy):
    keys, path = stream
    for capacity in CAPACITIES:
        extra = {"future": keys} if policy == "belady" else {}
        ours = make_policy(policy, capacity, **extra).replay(keys)
        theirs = lcs_hits(policy, capacity, path, len(keys))
        assert ours == theirs, f"{policy} at {capacity} blocks: wakman {ours} hits, libCacheSim {theirs}"


def test_per_request_access_matches_replay(stream):
    """``access`` one key at a time and the fast ``replay`` loop are the same algorithm."""
    keys, _ = stream
    keys = keys[:30_000]
    for policy in POLICIES:
        extra = {"future": keys} if policy == "belady" else {}
        one_by_one = make_policy(policy, 1_000, **extra)
        assert sum(map(one_by_one.access, keys)) == make_policy(policy, 1_000, **extra).replay(keys)
