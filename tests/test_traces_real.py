"""The importers on the real traces in ../shared (and the bundled copy of the Mooncake trace)."""

from __future__ import annotations

import hashlib

import pytest

from conftest import KV_TARBALL, MOONCAKE
from wakman.data import BUNDLED_MOONCAKE
from wakman.policies import make_policy
from wakman.traces import read_trace
from wakman.traces.stats import compute_stats


def test_shared_traces_are_present():
    assert MOONCAKE.is_file() and KV_TARBALL.is_file(), "tests need ../shared/traces"


@pytest.fixture(scope="module")
def mooncake_stats():
    return compute_stats(read_trace(MOONCAKE))


def test_mooncake_figures(mooncake_stats):
    s = mooncake_stats
    assert s.requests == 12_031
    assert s.distinct_blocks == 182_790
    assert s.block_accesses == 288_500
    assert round(s.infinite_block_hit_ratio, 3) == 0.366
    assert round(s.duration_s) == 3537


def test_bundled_copy_is_the_same_trace():
    import gzip

    assert hashlib.sha256(gzip.decompress(BUNDLED_MOONCAKE.read_bytes())).hexdigest() == (
        hashlib.sha256(MOONCAKE.read_bytes()).hexdigest()
    )


def test_one_pass_lru_curve_equals_lru_replay(mooncake_stats):
    keys = [k for req in read_trace(MOONCAKE) for k in req.block_keys]
    for capacity in (1, 97, 2_048, 19_200, 60_000):
        assert mooncake_stats.lru_hits_by_capacity[capacity] == make_policy("lru", capacity).replay(keys)


def test_token_hit_ratio_follows_vllm_rules(mooncake_stats):
    # every prompt's first block is id 0 and is cached after the first request, so the token
    # ratio is bounded by the block ratio's neighbourhood but counts only full, prefix blocks
    assert 0.30 < mooncake_stats.infinite_token_hit_ratio < mooncake_stats.infinite_block_hit_ratio + 0.02


def test_kv_cache_tester_tarball():
    from wakman.traces.kvcache_tester import conversation_count

    requests = list(read_trace(KV_TARBALL))
    assert conversation_count(KV_TARBALL) == 710
    assert len(requests) == 49_334
    assert sum(r.label == "claude-code-subagent" for r in requests) == 676
    assert len({r.session_id.split("/")[0] for r in requests}) == 710
    arrivals = [r.arrival_s for r in requests]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    # ids are local to each file: namespaced, two conversations never share a key
    owner: dict[int, str] = {}
    for r in requests[:5000]:
        conv = r.session_id.split("/")[0]
        for k in r.block_keys[:50]:
            assert owner.setdefault(k, conv) == conv
    assert all(len(r.block_keys) == r.prompt_tokens // 64 for r in requests[:2000])


def test_kv_cache_tester_arrivals_are_seeded_and_keep_gaps():
    a = read_trace(KV_TARBALL, rate=0.05, seed=1)
    b = read_trace(KV_TARBALL, rate=0.05, seed=2)
    first_a, first_b = [next(a) for _ in range(200)], [next(b) for _ in range(200)]
    assert [r.arrival_s for r in first_a] != [r.arrival_s for r in first_b]
