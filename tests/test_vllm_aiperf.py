"""The paper's setup end to end: AIPerf replays a Mooncake trace against a real ``vllm serve`` with
wakman's scheduler, and the server's own prefix-cache counters agree with ``wakman replay``.

Two independent paths to vLLM's hit rate on the same trace: AIPerf (NVIDIA's load generator, in its
own environment) synthesizes text from the trace's hash ids and sends it over HTTP at the trace's
timestamps; ``wakman replay --engine vllm`` builds token ids from the keys and drives an in-process
engine on a virtual clock. The counters come from vLLM in both.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from vllm_support import engine_replay, need_vllm, small_trace, write_trace_file
from wakman.simulation import simulate

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[1]
AIPERF_PYTHON = os.environ.get("WAKMAN_AIPERF_PYTHON", str(ROOT / ".venv-aiperf" / "bin" / "python"))


def need_aiperf() -> None:
    if not Path(AIPERF_PYTHON).exists():
        if os.environ.get("WAKMAN_REQUIRE_VLLM"):
            pytest.fail(f"AIPerf environment missing at {AIPERF_PYTHON}: run `make test`")
        pytest.skip("AIPerf environment not built (make test builds .venv-aiperf)")


def test_the_tiny_tokenizer_gives_text_back_the_same_ids(tmp_path):
    """What lets a text client line up with the trace's blocks: ASCII ids decode to text that
    encodes to the same ids (also split anywhere and joined), the server adds no special token,
    and every id the model can generate decodes."""
    need_vllm()
    from transformers import AutoTokenizer

    from wakman.vllm_plugin.engine import TINY_VOCAB, tiny_model_dir

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir(tmp_path, tokenizer=True)))
    assert len(tok) == TINY_VOCAB
    text = "Shall I compare thee to a summer's day?\n  Thou art more lovely and more temperate:"
    assert tok.encode(text) == list(text.encode())  # one id per byte, nothing added
    rng = random.Random(0)
    ascii_ids = [9, 10, *range(32, 127)]
    for _ in range(300):
        ids = [rng.choice(ascii_ids) for _ in range(rng.randrange(1, 200))]
        assert tok.encode(tok.decode(ids), add_special_tokens=False) == ids
    assert all(tok.decode([i]) for i in range(TINY_VOCAB))


def test_aiperf_against_vllm_serve_agrees_with_the_engine_replay(tmp_path):
    """vllm serve (wakman's sieve) under AIPerf's fixed schedule: every request answered, exactly the
    trace's prompt tokens counted (AIPerf's synthesis and the tokenizer reproduce every block), wakman
    live in the server, and a hit rate within 1 point of ``wakman replay --engine vllm`` on a trace
    that evicts (below the infinite cache's), with the replay's default 1/40 s step and with the step
    the server measured. S3-FIFO ran here until its misses reached the policy before the evictions
    (2026-12-02); since then it is 0.79 point off at the default step and 1.39 at the measured one
    (served 0.7282, replay 0.7143, twice), over the goal: docs/vllm.md."""
    need_vllm()
    need_aiperf()
    from wakman.experiments.aiperf_serve import run_aiperf

    # the fidelity suite's agentic trace (87 requests over 90 s): concurrency about 0.2, so the
    # server's wall clock and the replay's virtual one schedule the same overlaps
    requests = small_trace(90, 3.0, seed=9, mix=(0, 0, 1), short_prompts=True)
    capacity = 300
    policy = "sieve"
    served = run_aiperf(requests, policy, capacity, tmp_path / "served", AIPERF_PYTHON)
    assert served.completed == len(requests) and served.errors == 0, served
    assert served.prompt_tokens == sum(r.prompt_tokens for r in requests), served
    assert served.live_policies == [policy], served
    path = write_trace_file(requests, tmp_path / "trace.jsonl")
    replayed = engine_replay(path, policy, capacity)
    infinite = simulate(requests, "lru", 1_000_000).hit_rate
    assert replayed["hit_rate"] < infinite - 0.02, (replayed["hit_rate"], infinite)
    gap = 100 * (served.hit_rate - replayed["hit_rate"])
    assert abs(gap) <= 1.0, f"AIPerf + vllm serve {served.hit_rate:.4f}, replay {replayed['hit_rate']:.4f}"
    # the replay's virtual clock set to the server's measured step time: the same timing, closer still
    assert served.step_s is not None and 0 < served.step_s < 1, served
    matched = engine_replay(path, policy, capacity, "--step-s", f"{served.step_s:.6f}")
    gap = 100 * (served.hit_rate - matched["hit_rate"])
    assert abs(gap) <= 1.0, f"AIPerf + vllm serve {served.hit_rate:.4f}, replay {matched['hit_rate']:.4f}"
