"""Serve mode on a vLLM configuration (``wakman.simulation.steps``) on hand-worked cases: chunked
prefill, the token budget, max_num_seqs, whole-sequence admission, rejection, step time. (vLLM's
own scheduler is the reference for whole traces: tests/test_vllm_sched_loop.py.)"""

from __future__ import annotations

import msgspec
import pytest

from streams import key_of
from wakman.policies import make_policy
from wakman.simulation import ServerModel, VllmServer, simulate
from wakman.traces import Request

BS = 32


def req(t: float, keys: list, prompt: int, out: int = 1) -> Request:
    keys = [key_of(k) for k in keys]
    return Request(arrival_s=t, block_keys=keys, prompt_tokens=prompt, output_tokens=out, block_size=BS)


def chain(name: str, blocks: int) -> list:
    return [f"{name}{j}" for j in range(blocks)]


class Steps:
    """A controller that records each step's start (the loop calls on_time once per step)."""

    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_arrival(self, now, request) -> None:
        pass

    def on_time(self, now, pool) -> None:
        pool.check()
        self.starts.append(now)


def test_a_long_prompt_is_prefilled_in_budget_sized_chunks():
    """10,000 prompt tokens at 4,096 a step: 3 steps of prefill; the first token ends the third,
    then one token a step: 5 outputs take 3 + 4 steps."""
    steps = Steps()
    server = VllmServer(max_num_batched_tokens=4096, max_num_seqs=8, step_s=0.1)
    trace = [req(0.0, chain("a", 313), 10_000, out=5)]
    result = simulate(trace, "lru", 1000, server=server, controller=steps)
    assert result.ttfts_s == pytest.approx([0.3])
    assert steps.starts == pytest.approx([0.1 * k for k in range(7)])


def test_each_step_takes_longer_by_the_tokens_it_schedules():
    server = VllmServer(max_num_batched_tokens=4096, max_num_seqs=8, step_s=0.1, tokens_per_s=20_000)
    result = simulate([req(0.0, chain("a", 313), 10_000, out=1)], "lru", 1000, server=server)
    assert result.ttfts_s == pytest.approx([0.3 + 10_000 / 20_000])
    assert result.saturation.prefill_utilization == 0.0  # one arrival: no span to load


def test_a_second_request_hits_what_the_first_cached():
    """The lookup stops at prompt - 1 tokens: 9,999 tokens cover 312 full blocks."""
    server = VllmServer(4096, 8, 0.1)
    trace = [req(0.0, chain("a", 313), 10_000), req(5.0, chain("a", 313), 10_000)]
    result = simulate(trace, "lru", 1000, server=server)
    assert result.first_hit_tokens == [0, 312 * BS]
    assert result.ttfts_s[1] == pytest.approx(0.1)  # 16 tokens left: one step


def test_max_num_seqs_holds_the_others_in_the_queue():
    """Three one-token requests at once with one sequence allowed: each runs its prefill step (its
    only output token), and the next is admitted in the following step."""
    server = VllmServer(4096, 1, 0.5)
    trace = [req(0.0, chain(c, 2), 2 * BS + 1) for c in "abc"]
    result = simulate(trace, "lru", 100, server=server)
    assert result.queueing_delays_s == pytest.approx([0.0, 0.5, 1.0])
    assert result.ttfts_s == pytest.approx([0.5, 1.0, 1.5])


def test_the_budget_is_shared_first_come_first_served():
    """Two 3,000-token prompts at once, 4,096 tokens a step: the first takes 3,000, the second the
    1,096 left (a chunk), and finishes its prefill in the next step."""
    server = VllmServer(4096, 8, 0.1)
    trace = [req(0.0, chain("a", 93), 3000), req(0.0, chain("b", 93), 3000)]
    result = simulate(trace, "lru", 1000, server=server)
    assert result.queueing_delays_s == [0.0, 0.0]
    assert result.ttfts_s == pytest.approx([0.1, 0.2])


def test_a_request_is_admitted_only_when_its_whole_sequence_fits():
    """60 blocks: the first request holds 40 while it decodes (its 1,270 tokens and 10 outputs), the
    second needs 40 too: it waits, unadmitted, until the first finishes, though its first chunk
    would fit."""
    server = VllmServer(512, 8, 0.1)
    first = req(0.0, chain("a", 39), 1270, out=10)
    second = req(0.0, chain("b", 39), 1270, out=1)
    result = simulate([first, second], "lru", 60, server=server)
    # the first: 3 prefill steps (512 + 512 + 246), then 9 decode steps; freed at the end of step 12
    assert result.ttfts_s[0] == pytest.approx(0.3)
    assert result.queueing_delays_s[1] == pytest.approx(1.2)
    assert result.preemptions == 0


def test_a_decoding_request_that_needs_a_block_preempts_the_latest():
    """Both fit at admission (each 1 block of prompt), then grow by decoding past the pool: the one
    admitted last is preempted, re-admitted later, and counted once (its first admission)."""
    server = VllmServer(4096, 8, 0.1)
    trace = [req(0.0, ["a"], 31, out=70), req(0.0, ["b"], 31, out=70)]
    result = simulate(trace, "lru", 5, server=server)
    assert result.preemptions >= 1 and result.measured_requests == 2 and result.rejected == 0


def test_a_request_longer_than_the_pool_is_rejected():
    """vLLM refuses prompt + outputs above max_model_len (the pool's tokens); the rest runs."""
    server = VllmServer(4096, 8, 0.1)
    trace = [req(0.0, chain("a", 4), 4 * BS, out=BS + 1), req(0.0, chain("b", 2), 2 * BS, out=1)]
    policy = make_policy("lru", 5)
    result = simulate(trace, policy, 5, server=server)
    assert result.rejected == 1 and result.measured_requests == 1


class Decoding(Steps):
    """A controller that takes the loop's live view of decoded blocks and, at every step, checks it
    against the pool: every block a view names except the one holding the last sampled token is
    cached (the cache is large enough never to evict)."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded_blocks = None
        self.views: list = []
        self.checked = 0

    def watch_decoding(self, view) -> None:
        self.decoded_blocks = view

    def on_arrival(self, now, request) -> None:
        self.views.append((request, self.decoded_blocks.of(request)))

    def on_time(self, now, pool) -> None:
        super().on_time(now, pool)
        for request, view in self.views:
            keys = list(view)
            assert len(keys) == len(view)
            filled = (request.prompt_tokens + int(view._blocks.sampled[view._index]) - 1) // BS
            for key in keys[: max(0, filled - request.prompt_tokens // BS)]:
                assert pool.cached(key), (request.prompt_tokens, keys)
                self.checked += 1


def test_the_controller_sees_each_requests_decoded_blocks_as_they_fill():
    """Decoded blocks as vLLM's request shows them: after the run, (prompt + outputs) // 32 - prompt
    // 32 per request (the last may hold the final sampled token, never cached), the trace's output
    keys first, then the loop's own keys; a rejected request shows none; at every step each named
    block whose KV is computed is cached in the pool."""
    trace = [
        req(0.0, chain("a", 3), 100, out=70),  # 170 tokens fill blocks 3 and 4 past the prompt
        req(0.0, chain("b", 2), 64, out=1),  # 65 tokens: nothing past the prompt's 2 blocks
        req(0.05, chain("c", 4), 120, out=40),
        req(0.1, chain("d", 90), 2900, out=500),  # 3,400 tokens > 100 blocks: rejected
    ]
    trace[2] = msgspec.structs.replace(trace[2], output_keys=[key_of("c-out")])
    decoding = Decoding()
    result = simulate(trace, "lru", 100, server=VllmServer(64, 8, 0.1), controller=decoding)
    assert result.rejected == 1 and len(decoding.views) == 3
    lengths = {r.prompt_tokens: len(v) for r, v in decoding.views}
    assert lengths == {100: (100 + 70) // BS - 3, 64: 0, 120: (120 + 40) // BS - 3}
    c_keys = list(decoding.views[2][1])
    assert c_keys[0] == key_of("c-out") and len(set(c_keys)) == len(c_keys) == 2
    assert decoding.checked > 20
    assert decoding.decoded_blocks is None  # handed back after the run


def _prefix_only_and_filled(seed: int, n: int, block_size: int) -> tuple[list[Request], list[Request]]:
    """Two traces vLLM cannot tell apart: AIPerf-like prefix-only rows (keys for a shared prefix,
    none for the rest of the prompt, text no other request has) and the same rows with every rest
    block given a key no other request has. vLLM hashes and caches every full prompt block either
    way, so every figure of a run must be the same."""
    import random

    import numpy as np

    rng, reqs, t = random.Random(seed), [], 0.0
    for _ in range(n):
        t += rng.expovariate(4.0)
        shared = rng.randint(0, 12)  # some rows keyed not at all
        prompt = block_size * (shared + rng.randint(2, 20)) + rng.randrange(block_size)
        keys = np.array([rng.randrange(6) * 1000 + j for j in range(shared)], dtype=np.uint64)
        reqs.append(
            Request(
                arrival_s=t,
                block_keys=keys,
                prompt_tokens=prompt,
                output_tokens=rng.randint(1, 8 * block_size),
                block_size=block_size,
            )
        )
    filled = []
    for i, r in enumerate(reqs):
        rest = -(-r.prompt_tokens // block_size) - len(r.block_keys)
        own = np.arange(10**12 + i * 1000, 10**12 + i * 1000 + rest, dtype=np.uint64)
        filled.append(msgspec.structs.replace(r, block_keys=np.concatenate([r.block_keys, own])))
    assert all(r.short_keyed for r in reqs) and not any(r.short_keyed for r in filled)
    assert any(len(r.block_keys) == 0 for r in reqs)
    return reqs, filled


def _figures(result) -> tuple:
    return (
        result.hit_tokens,
        result.evictions,
        result.preemptions,
        result.first_hit_tokens,
        result.ttfts_s,
    )


@pytest.mark.parametrize(
    "server",
    [
        ServerModel(max_running=16),
        VllmServer(2048, 16),
        ServerModel(max_running=16, cache_outputs=False),
        VllmServer(2048, 16, cache_outputs=False),
    ],
    ids=["model", "steps", "model-no-outputs", "steps-no-outputs"],
)
@pytest.mark.parametrize(
    ("policy", "params"),
    [("lru", {}), ("s3fifo", {}), ("chain-lru", {"mode": "recency"})],
    ids=["lru", "s3fifo", "chain-lru"],
)
def test_a_prompt_keyed_only_in_part_is_served_as_one_keyed_in_full(server, policy, params):
    """Every full prompt block is cached at admission, keyed or not (also where the blocks decoding
    fills are not), a re-admission after a preemption hits the request's own blocks past its keys,
    and chain-lru hears the same chains (in its recency mode: its duel samples blocks by key value,
    which differ between the two): a short-keyed trace (some rows keyed not at all) and the same
    trace with its rest blocks keyed give the same hits, evictions, preemptions and first-token
    times (both serve loops; under pressure: requests are preempted)."""
    short, filled = _prefix_only_and_filled(7, 200, 16)
    a = simulate(short, policy, 150, server=server, policy_params=params)
    b = simulate(filled, policy, 150, server=server, policy_params=params)
    assert a.preemptions > 0
    assert _figures(a) == _figures(b)


def test_a_request_preempted_in_its_prefill_hits_its_own_blocks_past_its_keys():
    """The step loop: a request keyed for its first block only, prefilled a block a step, is
    preempted before its first token by a decoding request that needs a block; re-admitted, it
    hits the blocks it computed before (vLLM hashed their tokens), as when they are keyed."""
    import numpy as np

    def trace(keys_a: list[int]) -> list[Request]:
        return [
            Request(
                arrival_s=0.0,
                block_keys=np.array([1], dtype=np.uint64),
                prompt_tokens=62,
                output_tokens=105,
                block_size=32,
            ),
            Request(
                arrival_s=0.0,
                block_keys=np.array(keys_a, dtype=np.uint64),
                prompt_tokens=181,
                output_tokens=4,
                block_size=32,
            ),
        ]

    server = VllmServer(max_num_batched_tokens=32, max_num_seqs=4)
    short = simulate(trace([500]), "lru", 8, server=server)
    keyed = simulate(trace([500, *range(10**9, 10**9 + 5)]), "lru", 8, server=server)
    assert short.preemptions == keyed.preemptions == 1
    assert _figures(short) == _figures(keyed)
