"""The workload generator: determinism, closed-form checks of its distributions, prefix structure."""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
import sys
import warnings
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from typer.testing import CliRunner

import wakman.workload.generator as gen_module
from wakman.cli.main import app
from wakman.traces.stats import compute_stats
from wakman.workload import MIXES, PRESETS, WorkloadGenerator, build_config, generate_requests
from wakman.workload.config import LogNormal
from wakman.workload.generator import expected_turns, zipf_mandelbrot
from wakman.workload.hashing import BlockHasher

VECTOR = json.loads((Path(__file__).parent / "data" / "vllm_sha256_vector.json").read_text())


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    runner = CliRunner()
    outs = []
    for seed in (5, 5, 6):
        path = tmp_path / f"t{len(outs)}.jsonl"
        result = runner.invoke(
            app,
            [
                "generate",
                "--preset",
                "mix19-thirds",
                "--duration",
                "900",
                "--seed",
                str(seed),
                "-o",
                str(path),
            ],
        )
        assert result.exit_code == 0, result.output
        outs.append(path.read_bytes())
    assert outs[0] == outs[1] and outs[0] != outs[2]


def test_a_seed_past_32_bits_is_refused():
    """numpy splits a seed into 32-bit words and drops trailing zero words, so a seed of 2**32 + s
    would start its sessions from seed s's session 0 stream (``[s, 1, 0]``): refused, as a negative
    seed is; 2**32 - 1 is the largest taken."""
    a, b = np.random.SeedSequence([2**32 + 5, 0]), np.random.SeedSequence([5, 1, 0])
    assert (a.generate_state(8) == b.generate_state(8)).all()  # the collision the check prevents
    cfg = build_config(duration_s=60)
    assert WorkloadGenerator(cfg, 2**32 - 1).seed == 2**32 - 1
    for seed, needle in ((2**32, "at most 2**32 - 1"), (2**40 + 5, "at most 2**32 - 1"), (-1, ">= 0")):
        with pytest.raises(ValueError, match=rf"^seed must be {re.escape(needle)}"):
            WorkloadGenerator(cfg, seed)
        with pytest.raises(ValueError, match=r"^seed must be"):
            generate_requests(cfg, seed)


def test_twenty_mixes_from_pure_types_to_thirds():
    assert len(MIXES) == 20 and len({p.mix for p in MIXES}) == 20
    assert {(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (0.34, 0.33, 0.33)} <= {p.mix for p in MIXES}
    assert all(abs(sum(p.mix) - 1) < 1e-9 for p in PRESETS.values())


def test_arrival_rate_single_turn_within_5_percent():
    reqs = generate_requests(build_config(preset="mix01-pure-single"), seed=11)
    assert abs(len(reqs) / 3600 - 1.5) / 1.5 < 0.05


def test_arrival_rate_of_sessions_averaged_over_seeds():
    """Sessions cluster requests, so one hour of a mixed workload varies by ~6 %; the mean over
    20 seeds has a ~1.3 % standard error and must sit within 5 % of the target."""
    cfg = build_config(preset="mix19-thirds")
    counts = [len(generate_requests(cfg, seed)) for seed in range(20)]
    assert abs(np.mean(counts) / 3600 - 1.5) / 1.5 < 0.05


SHORT_TOKENS = {  # lengths of a few tokens: the timing is the same, the generation much faster
    f"{section}.{law}": "{median=8, sigma=0, min=1, max=8}"
    for section, laws in {
        "single_turn": ("fixed_prompt", "payload", "output"),
        "multi_turn": ("system_prompt", "user_prefix", "message", "output"),
        "agentic": ("system_prompt", "task", "tool_result", "output"),
    }.items()
    for law in laws
}


@pytest.mark.parametrize("preset", ["gap600-single-multi-50", "turns32-0-50-50"])
def test_long_sessions_keep_the_rate_from_the_first_minute(preset):
    """Presets whose sessions outlast 1,800 s (a 600-s median human gap; 32 turns a session): the
    "auto" warm-up starts the trace in steady state, so requests arrive at ``rate`` over the hour
    and in its first ten minutes alike (mean of 20 seeds within 5 % and 8 %). With a fixed 1,800-s
    warm-up these presets gave 72 % and 85 % of the rate, rising through the hour."""
    cfg = build_config(preset=preset, overrides=SHORT_TOKENS)
    assert cfg.warmup_s == "auto"
    hour, first = [], []
    for seed in range(20):
        arrivals = np.array([r.arrival_s for r in generate_requests(cfg, seed)])
        hour.append(len(arrivals) / 3600)
        first.append(np.count_nonzero(arrivals < 600) / 600)
    assert abs(np.mean(hour) / 1.5 - 1) < 0.05, np.mean(hour)
    assert abs(np.mean(first) / 1.5 - 1) < 0.08, np.mean(first)


def test_auto_warmup_covers_the_sessions_and_a_number_is_taken_as_given():
    """steady_warmup_s: at least 1,800 s, whole minutes, and past the age of 99 % of the requests,
    checked against the requests of a trace generated with a much longer warm-up (their ages, from
    their session's first request); an explicit warmup_s is used as it is."""
    cfg = build_config(preset="gap120-single-multi-50", overrides={**SHORT_TOKENS, "warmup_s": "30000"})
    auto = gen_module.steady_warmup_s(cfg)
    assert auto >= 1800 and auto % 60 == 0
    ages = []
    for seed in range(3):
        gen = gen_module.WorkloadGenerator(cfg, seed)
        assert gen.warmup_s == 30000.0
        starts, profiles = gen.session_starts()
        for index, (start, p) in enumerate(zip(starts.tolist(), profiles.tolist(), strict=True)):
            reqs = gen.session(index, start, gen_module.LABELS[p])
            ages += [r.arrival_s - reqs[0].arrival_s for r in reqs if 0 <= r.arrival_s < cfg.duration_s]
    older = np.mean(np.array(ages) > auto)
    assert older < 0.02, older  # 1 % at time 0 by the estimate, less later: sampled, with slack
    assert np.mean(np.array(ages) > auto - 300) > 0.008  # and not far past it (99 %, to the minute)


def _rare_long_calls(median: str) -> dict[str, str]:
    """One agentic gap in 10,000 gets a long call of ``median`` seconds (sigma 0: exactly that)."""
    return {
        "agentic.long_call_probability": "0.0001",
        "agentic.long_call_s": f"{{median={median}, sigma=0, min=0, max=inf}}",
    }


def test_rare_huge_long_calls_leave_the_auto_warmup_as_it_is():
    """A long call in one agentic gap of 10,000 lifts a few sessions' later requests (under 1 % of
    the requests) past every other age: whether the call takes 1e9 s or 1e307 s, no other request's
    age and no request's rank changes, so the 99 % age and the warm-up are the same. (Summed over
    every sample session at once, the 1e307-s calls overflowed to inf and inf - inf gave NaN.)"""
    warmups = []
    for median in ("1e9", "1e307"):
        cfg = build_config(preset="turns32-0-50-50", overrides=_rare_long_calls(median))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no RuntimeWarning from numpy either
            warmups.append(gen_module.steady_warmup_s(cfg))
    assert warmups[0] == warmups[1] > gen_module.WARMUP_FLOOR_S, warmups


@pytest.mark.parametrize(
    "law",
    ["{median=1e308, sigma=0, min=0, max=inf}", "{median=1e10, sigma=0, min=0, max=inf}"],
    ids=["past-the-largest-float", "past-ten-years"],
)
def test_an_auto_warmup_out_of_bounds_is_one_clear_error_naming_the_gap_law(tmp_path, law):
    """Multi-turn gaps of 1e308 s (two of them overflow a float) or 1e10 s (over 300 years) make the
    "auto" warm-up longer than a trace may span: the API and ``generate`` say so in one line that
    names the gap law and "auto" and asks for warmup_s, with no numpy warning and nothing written."""
    cfg = build_config(preset="mix02-pure-multi", duration_s=60, overrides={"multi_turn.gap_s": law})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r'warmup_s "auto" came to .*multi_turn\.gap_s.*set warmup_s'):
            gen_module.WorkloadGenerator(cfg)
    out = tmp_path / "t.jsonl"
    args = [
        "generate",
        "--preset",
        "mix02-pure-multi",
        "--duration",
        "60",
        "--set",
        f"multi_turn.gap_s={law}",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "wakman.cli.main", *args, "-o", str(out)], capture_output=True, text=True
    )
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.startswith('error: warmup_s "auto"') and result.stderr.count("\n") == 1, (
        result.stderr
    )
    assert "multi_turn.gap_s" in result.stderr and "Warning" not in result.stderr
    assert not out.exists()


def test_expected_turns_closed_form():
    """The exact mean against 100,000 draws (within 4 standard errors), also where the clip's point
    masses at a non-integer min or max round (halves to even) and where sigma is 0."""
    cfg = build_config()
    rng = np.random.default_rng(0)
    for dist in (
        cfg.multi_turn.turns,
        cfg.agentic.turns,
        LogNormal(median=3.5, sigma=0.4, min=2.5, max=6.5),
        LogNormal(median=2.5, sigma=1.5, min=0.3, max=9.5),
    ):
        sample = np.array([gen_module.draw(rng, dist) for _ in range(100_000)])
        assert abs(expected_turns(dist) - sample.mean()) < 4 * sample.std() / np.sqrt(len(sample))
    assert expected_turns(LogNormal(median=3.5, sigma=0.0, min=1, max=64)) == 4.0  # round(3.5) == 4
    assert expected_turns(LogNormal(median=4.5, sigma=0.0, min=1, max=64)) == 4.0  # round(4.5) == 4


def test_a_non_integer_turn_law_keeps_the_rate():
    """median 3.5 with sigma 0: every multi-turn session has round(3.5) = 4 turns, so sessions start
    at rate / 4 and the one-hour trace holds about rate * 3,600 requests (Poisson: within 5 %)."""
    cfg = build_config(
        preset="mix02-pure-multi", overrides={"multi_turn.turns": "{median=3.5, sigma=0, max=64}"}
    )
    counts = [len(generate_requests(cfg, seed)) for seed in range(3)]
    assert abs(np.mean(counts) / 3600 - 1.5) / 1.5 < 0.05


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "multi_turn.turns",
            "{median=4, sigma=0.7}",
            "multi_turn.turns: max must be finite and at most 100,000",
        ),
        ("agentic.turns.max", "1e9", "agentic.turns: max must be finite and at most 100,000"),
        ("single_turn.payload.max", "1e10", "single_turn.payload: max must be finite and at most 16,777,216"),
        ("single_turn.payload.sigma", "inf", "single_turn.payload: need finite median > 0, sigma in [0, 10]"),
        ("multi_turn.gap_s.median", "nan", "multi_turn.gap_s: need finite median > 0"),
        ("block_size", "1000000000000", "block_size must be in [1, 1,048,576]"),
    ],
)
def test_laws_past_their_bounds_are_refused_naming_the_key(key, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_config(overrides={key: value})


def test_a_time_law_may_leave_max_out_and_never_overflows():
    """sigma 10 with no max: a long-call wait can exceed any float's exp; draw clips it in log space."""
    dist = LogNormal(median=60.0, sigma=10.0, min=1.0)
    rng = np.random.default_rng(0)
    waits = [gen_module.draw(rng, dist, integer=False) for _ in range(10_000)]
    assert all(math.isfinite(w) and w >= 1.0 for w in waits)


@pytest.fixture(scope="module")
def recorded():
    """Every log-normal draw of a two-hour thirds workload, by distribution name."""
    cfg = build_config(preset="mix19-thirds", duration_s=7200)
    names = {}
    for section in ("single_turn", "multi_turn", "agentic"):
        for field in getattr(cfg, section).__struct_fields__:
            value = getattr(getattr(cfg, section), field)
            if isinstance(value, gen_module.LogNormal):
                names[id(value)] = (f"{section}.{field}", value)
    samples = defaultdict(list)
    original = gen_module.draw

    def spy(rng, dist, integer=True):
        value = original(rng, dist, integer)
        samples[names[id(dist)][0]].append(value)
        return value

    gen_module.draw = spy
    try:
        reqs = list(WorkloadGenerator(cfg, seed=2).requests())
    finally:
        gen_module.draw = original
    return cfg, {name: dist for name, dist in names.values()}, samples, reqs


def assert_follows(name: str, values: list[float], dist: LogNormal, integer: bool) -> None:
    """At five quantiles, the fraction of ``values`` below the configured distribution's quantile
    matches the closed form (clipped log-normal; rounded values compared at half-integers) within
    4.5 binomial standard errors; plus median and log-space spread."""
    n = len(values)
    arr = np.asarray(values, dtype=float)

    def cdf(x: float) -> float:
        if x < dist.min:
            return 0.0
        if x >= dist.max:
            return 1.0
        return float(sps.norm.cdf((math.log(x) - math.log(dist.median)) / dist.sigma))

    for q in (0.1, 0.25, 0.5, 0.75, 0.9):
        x = math.exp(math.log(dist.median) + dist.sigma * sps.norm.ppf(q))
        if integer:
            k = max(1, round(x))
            got, want = float(np.mean(arr <= k)), cdf(k + 0.5)
        else:
            got, want = float(np.mean(arr <= x)), cdf(x)
        tolerance = 4.5 * math.sqrt(max(want * (1 - want), 1e-4) / n)
        assert abs(got - want) <= tolerance, f"{name} at q{q}: {got:.3f} of {n:,} values, expected {want:.3f}"
    logs = np.log(arr)
    assert np.exp(np.median(logs)) == pytest.approx(dist.median, rel=0.15, abs=1), name
    if dist.median >= 50:  # rounding is negligible: the log-space spread is sigma
        assert np.std(logs) == pytest.approx(dist.sigma, rel=0.15), name


def test_every_lognormal_matches_its_configuration(recorded):
    """Every log-normal draw the generator makes follows its configured law (``assert_follows``)."""
    _cfg, dists, samples, _ = recorded
    checked = 0
    for name, values in samples.items():
        if len(values) < 200:
            continue  # catalog-level draws (100 or fewer): see the catalog test
        assert_follows(name, values, dists[name], isinstance(values[0], int))
        checked += 1
    assert checked >= 10


def _clipped_lognormal(rng: np.random.Generator, dist: LogNormal, n: int) -> np.ndarray:
    """``n`` seconds from a configured time law, drawn here (numpy's log-normal, clipped)."""
    return np.clip(rng.lognormal(math.log(dist.median), dist.sigma, n), dist.min, dist.max)


def test_the_requests_lengths_and_gaps_follow_their_laws(recorded):
    """What ends up in the requests, not what ``draw`` returned (the test above passed with the
    agentic long calls never happening, each answer appended twice, or the messages drawn from the
    output law): every output length, each turn's new tokens (a chat message, a tool result: the
    prompt past the previous prompt and answer), each single-turn payload (the prompt past its
    catalog prompt) and each chat gap follow their configured laws; the agentic gaps (a gap plus,
    with probability ``long_call_probability``, a long call) match that mixture drawn here."""
    cfg, _, _, reqs = recorded
    sections = {"single-turn": cfg.single_turn, "multi-turn": cfg.multi_turn, "agentic": cfg.agentic}
    for label, section in sections.items():
        outputs = [r.output_tokens for r in reqs if r.label == label]
        assert_follows(f"{label} output", outputs, section.output, integer=True)
    by_session = defaultdict(list)
    for r in reqs:
        by_session[r.session_id].append(r)
    steps, gaps = defaultdict(list), defaultdict(list)
    for turns in by_session.values():
        for prev, nxt in pairwise(turns):
            steps[nxt.label].append(nxt.prompt_tokens - prev.prompt_tokens - prev.output_tokens)
            gaps[nxt.label].append(nxt.arrival_s - prev.arrival_s)
    assert_follows("multi-turn message", steps["multi-turn"], cfg.multi_turn.message, integer=True)
    assert_follows("agentic tool result", steps["agentic"], cfg.agentic.tool_result, integer=True)
    assert_follows("multi-turn gap", gaps["multi-turn"], cfg.multi_turn.gap_s, integer=False)
    ag, rng = cfg.agentic, np.random.default_rng(0)
    reference = _clipped_lognormal(rng, ag.gap_s, 400_000)
    reference += np.where(
        rng.random(len(reference)) < ag.long_call_probability,
        _clipped_lognormal(rng, ag.long_call_s, len(reference)),
        0.0,
    )
    assert sps.ks_2samp(gaps["agentic"], reference).pvalue > 0.001
    gen = WorkloadGenerator(cfg, seed=2)
    bs = cfg.block_size
    catalog = [gen.catalog_prompt("single-turn", k) for k in range(cfg.single_turn.catalog_size)]
    length_of = {BlockHasher(cfg.hash).keys(p[:bs], bs)[0]: len(p) for p in catalog}
    payloads = [r.prompt_tokens - length_of[r.block_keys[0]] for r in reqs if r.label == "single-turn"]
    assert_follows("single-turn payload", payloads, cfg.single_turn.payload, integer=True)


def test_catalog_popularity_follows_zipf_mandelbrot():
    cfg = build_config(preset="mix01-pure-single", duration_s=7200)
    gen = WorkloadGenerator(cfg, seed=4)
    bs = cfg.block_size
    first_key = {
        BlockHasher(cfg.hash).keys(gen.catalog_prompt("single-turn", k)[:bs], bs)[0]: k
        for k in range(cfg.single_turn.catalog_size)
    }
    counts = Counter(first_key[r.block_keys[0]] for r in gen.requests())
    n = sum(counts.values())
    observed = np.array([counts.get(k, 0) for k in range(cfg.single_turn.catalog_size)], dtype=float)

    def p_value(s: float, q: float) -> float:
        ranks = np.arange(1, cfg.single_turn.catalog_size + 1)  # the closed form, stated here
        weights = 1.0 / (ranks + q) ** s
        expected = n * weights / weights.sum()
        cut = int(np.sum(expected >= 5))  # ranks are in decreasing popularity: pool the tail below 5
        obs, exp = observed[:cut], expected[:cut]
        if cut < len(expected):
            obs, exp = np.append(obs, observed[cut:].sum()), np.append(exp, expected[cut:].sum())
        return sps.chisquare(obs, exp).pvalue

    assert p_value(cfg.single_turn.zipf_s, cfg.single_turn.zipf_q) > 0.001
    assert p_value(0.6, cfg.single_turn.zipf_q) < 1e-6  # the test can tell another law apart


def test_single_turn_payload_blocks_are_never_reused(recorded):
    cfg, _, _, reqs = recorded
    seen = Counter(k for r in reqs for k in (*r.block_keys, *r.output_keys))
    gen = WorkloadGenerator(cfg, seed=2)
    fixed_blocks = {
        k
        for i in range(cfg.single_turn.catalog_size)
        for k in BlockHasher(cfg.hash).keys(gen.catalog_prompt("single-turn", i), cfg.block_size)
    }
    single = [r for r in reqs if r.label == "single-turn"]
    assert len(single) > 100
    for r in single:
        payload = [k for k in (*r.block_keys, *r.output_keys) if k not in fixed_blocks]
        assert payload and all(seen[k] == 1 for k in payload)


def test_turns_extend_the_previous_prompt_and_answer_exactly(recorded):
    _, _, _, reqs = recorded
    by_session = defaultdict(list)
    for r in reqs:
        by_session[r.session_id].append(r)
    checked = 0
    for turns in by_session.values():
        for prev, nxt in pairwise(turns):
            assert prev.label == nxt.label and nxt.label in ("multi-turn", "agentic")
            carried = [*prev.block_keys, *prev.output_keys]
            assert list(nxt.block_keys[: len(carried)]) == carried
            assert nxt.prompt_tokens > prev.prompt_tokens + prev.output_tokens
            assert nxt.arrival_s > prev.arrival_s
            checked += 1
    assert checked > 1000


def test_per_label_reuse_patterns(recorded):
    _, _, _, reqs = recorded
    per = compute_stats(reqs, lru_curve=False).per_label
    single, multi, agentic = per["single-turn"], per["multi-turn"], per["agentic"]
    # agentic steps reuse their prefix within seconds, chat turns after minutes, catalog prompts rarely
    assert agentic["reuse_time_p50_s"] < 15 < multi["reuse_time_p50_s"] < single["reuse_time_p50_s"]
    assert (
        agentic["infinite_block_hit_ratio"]
        > multi["infinite_block_hit_ratio"]
        > single["infinite_block_hit_ratio"]
    )


def test_sha256_keys_equal_vllm_block_hashes():
    """Against a vector computed once with vLLM 0.32's own hash_block_tokens (see tests/data)."""
    tokens = [(i * 7919 + 13) % 32000 for i in range(167)]
    hasher = BlockHasher("sha256")
    parent, hashes = None, []
    for b in range(len(tokens) // VECTOR["block_size"]):
        parent = hasher.chain(parent, np.array(tokens[b * 32 : (b + 1) * 32], dtype=np.int32))
        hashes.append(parent.hex())
    assert hashes == VECTOR["block_hashes_hex"]
    assert hasher.keys(tokens, 32) == [int(h, 16) & ((1 << 64) - 1) for h in VECTOR["block_hashes_hex"]]


@settings(max_examples=200, deadline=None)
@given(
    block_size=st.integers(1, 80),
    extra_tokens=st.integers(0, 200),
    parent=st.none() | st.binary(min_size=8, max_size=8),
    seed=st.integers(0, 2**32 - 1),
)
def test_fast_keys_equal_hashlib_blake2b(block_size, extra_tokens, parent, seed):
    """Fast mode's compiled chain against Python's hashlib: block i's key is the big-endian integer
    of blake2b(previous digest + the block's int32 token bytes, digest_size=8); inputs of one, two
    and more 128-byte compression blocks (block sizes up to 80 tokens), tails that are not a block."""
    tokens = np.random.default_rng(seed).integers(
        -(2**31), 2**31 - 1, size=block_size * 3 + extra_tokens, dtype=np.int32
    )
    hasher = BlockHasher("fast")
    digest, expected = parent or hasher.none_hash, []
    for b in range(len(tokens) // block_size):
        block = tokens[b * block_size : (b + 1) * block_size].tobytes()
        digest = hashlib.blake2b(digest + block, digest_size=8).digest()
        expected.append(int.from_bytes(digest, "big"))
    keys, last = hasher.chain_keys(parent, tokens, block_size)
    assert keys.dtype == np.uint64 and keys.tolist() == expected
    assert last == digest
    assert hasher.chain_blocks(parent, tokens, block_size)[-1] == digest


def test_ranks_draw_what_numpy_choice_draws():
    """``Ranks.draw`` against numpy's own ``Generator.choice(n, p=p)`` on the same generator state,
    for the generator's Zipf-Mandelbrot popularity and a skewed one with zero-probability ranks."""
    skewed = np.array([0.0, 0.5, 0.0, 0.25, 0.125, 0.125, 0.0])
    for p in (zipf_mandelbrot(1000, 1.1, 2.7), zipf_mandelbrot(3, 0.6, 0.0), skewed):
        ranks = gen_module.Ranks(p)
        for seed in range(200):
            ours, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
            assert [ranks.draw(ours) for _ in range(20)] == [
                int(theirs.choice(len(p), p=p)) for _ in range(20)
            ]


@pytest.mark.vllm
def test_sha256_keys_equal_vllm_live():
    from vllm_support import need_vllm

    need_vllm()
    import vllm.v1.core.kv_cache_utils as kv
    from vllm.utils.hashing import sha256

    kv.init_none_hash(sha256)
    rng = np.random.default_rng(9)
    tokens = rng.integers(0, 32000, size=32 * 12 + 5).tolist()
    parent, ours = None, BlockHasher("sha256")
    theirs = []
    for b in range(12):
        parent = kv.hash_block_tokens(sha256, parent, tokens[b * 32 : (b + 1) * 32])
        theirs.append(int.from_bytes(parent, "big") & ((1 << 64) - 1))
    assert ours.keys(tokens, 32) == theirs


def test_sha256_mode_generates_vllm_keys():
    cfg = build_config(preset="mix03-pure-agentic", duration_s=120, overrides={"hash": "sha256"})
    reqs = generate_requests(cfg, seed=1)
    assert reqs and all(0 <= k < 1 << 64 for r in reqs for k in r.block_keys)


def test_bad_overrides_are_refused():
    with pytest.raises(ValueError, match="no section 'turn'"):
        build_config(overrides={"agentic.turn.median": "3"})
    with pytest.raises(ValueError, match="unknown key 'medain'"):
        build_config(overrides={"agentic.turns.medain": "3"})
    with pytest.raises(ValueError, match="mix"):
        build_config(mix=[0.5, 0.6, 0.1])
    with pytest.raises(ValueError, match="median"):
        build_config(overrides={"agentic.turns.median": "-2"})


@pytest.mark.parametrize(
    "key, value",
    [
        ("single_turn.zipf_q", "-1"),  # rank 1's weight 1 / 0
        ("single_turn.zipf_q", "-1.5"),  # rank 1's weight negative
        ("single_turn.zipf_s", "nan"),
        ("multi_turn.system_zipf_s", "-0.5"),
        ("agentic.system_zipf_q", "inf"),
        ("agentic.system_zipf_s", "1e6"),  # (1 + q) ** s overflows: every weight 0
    ],
)
def test_a_catalog_law_without_finite_positive_weights_is_refused(key, value):
    """Every rank's weight 1 / (k + q) ** s must be positive and finite (a NaN or infinite weight
    would make numpy's draws meaningless, silently): the configuration names the keys."""
    try:
        cfg = build_config(overrides={key: value})
    except ValueError as exc:
        assert key.rsplit(".", 1)[0] in str(exc) and "zipf" in str(exc)
        return
    # accepted: then the law's weights must be usable, as the generator computes them
    st, mt, ag = cfg.single_turn, cfg.multi_turn, cfg.agentic
    for n, s_, q in (
        (st.catalog_size, st.zipf_s, st.zipf_q),
        (mt.system_catalog_size, mt.system_zipf_s, mt.system_zipf_q),
        (ag.system_catalog_size, ag.system_zipf_s, ag.system_zipf_q),
    ):
        with np.errstate(divide="raise", invalid="raise"):
            p = zipf_mandelbrot(n, s_, q)
        assert np.all(np.isfinite(p)) and np.all(p >= 0) and p.sum() == pytest.approx(1.0)


def test_a_vocabulary_past_int32_token_ids_is_refused():
    with pytest.raises(ValueError, match="vocab_size"):
        build_config(overrides={"vocab_size": str(2**31 + 1)})
    assert build_config(overrides={"vocab_size": str(2**31)}).vocab_size == 2**31


def test_every_preset_builds_a_valid_configuration():
    for name in PRESETS:
        build_config(preset=name)


def test_the_engines_view_keeps_the_output_keys_the_capped_output_fills():
    """``as_engine_serves`` with the trace's outputs kept (``fresh_outputs=False``) and a cap at
    least each output leaves every request as the generator made it (the generator counts the blocks
    an output fills on its own); a cap keeps the keys of the blocks the capped output fills, a
    prefix of the generator's; the engine's own view drops them all."""
    from wakman.traces.model import as_engine_serves

    cfg = build_config(mix=[0.2, 0.6, 0.2], duration_s=120, rate=2.0)
    requests = list(generate_requests(cfg, seed=3))
    longest = max(r.output_tokens for r in requests)
    same = as_engine_serves(requests, fresh_outputs=False, max_output_tokens=longest)
    assert all(a is b for a, b in zip(same, requests, strict=True))
    capped = as_engine_serves(requests, fresh_outputs=False, max_output_tokens=40)
    for before, after in zip(requests, capped, strict=True):
        assert after.output_tokens == min(before.output_tokens, 40)
        filled = (after.prompt_tokens + after.output_tokens - 1) // after.block_size - after.full_blocks
        assert len(after.output_keys) == min(len(before.output_keys), max(filled, 0))
        assert list(after.output_keys) == list(before.output_keys[: len(after.output_keys)])
    assert sum(len(r.output_keys) for r in capped) < sum(len(r.output_keys) for r in requests)
    fresh = as_engine_serves(requests)
    assert all(
        len(r.output_keys) == 0 and r.output_tokens == q.output_tokens
        for r, q in zip(fresh, requests, strict=True)
    )


def test_explicit_arguments_come_after_the_overrides():
    """build_config's order: defaults, the preset, ``overrides``, then ``mix``, ``duration_s`` and
    ``rate`` (the CLI refuses a --set of the same key beside its flag)."""
    cfg = build_config(
        mix=[1.0, 0.0, 0.0],
        preset="mix02-pure-multi",
        overrides={"mix": "[0, 0, 1]", "rate": "1", "duration_s": "5", "agentic.turns.median": "3"},
        duration_s=20,
        rate=2,
    )
    assert (cfg.mix, cfg.rate, cfg.duration_s, cfg.agentic.turns.median) == ([1.0, 0.0, 0.0], 2.0, 20.0, 3.0)
    assert build_config(preset="mix02-pure-multi", overrides={"mix": "[0, 0, 1]"}).mix == [0.0, 0.0, 1.0]
