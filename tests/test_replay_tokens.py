"""The prompts ``wakman replay --engine vllm`` sends (``TokenBuilder``, no vLLM needed): equal block
keys give equal tokens, so vLLM's chained hashes line up where the trace's keys do."""

from __future__ import annotations

from wakman.traces.model import Request
from wakman.vllm_plugin.replay import FIRST_TOKEN, TokenBuilder


def _request(keys: list[int], prompt_tokens: int, block_size: int = 16) -> Request:
    return Request(
        arrival_s=0.0, block_keys=keys, prompt_tokens=prompt_tokens, output_tokens=1, block_size=block_size
    )


def test_prompts_share_tokens_exactly_where_they_share_keys():
    tokens = TokenBuilder(vocab=1000)
    a = tokens.prompt(_request([1, 2, 3], 48), 0)
    b = tokens.prompt(_request([1, 2, 9, 4], 60), 1)  # 3 full blocks and 12 tokens of key 4's block
    assert len(a) == 48 and len(b) == 60
    assert all(type(t) is int and FIRST_TOKEN <= t < 1000 for t in a + b)  # what vLLM's prompt takes
    assert a[:32] == b[:32] and a[32:48] != b[32:48]
    c = tokens.prompt(_request([4], 16), 2)
    assert b[48:60] == c[:12]  # a partial block is the start of its key's block
    # a key's tokens do not depend on what was built before (a fresh builder, another order)
    assert TokenBuilder(vocab=1000).prompt(_request([9], 16), 0) == b[32:48]


def test_a_prompt_past_its_keys_gets_tokens_no_other_request_has():
    tokens = TokenBuilder(vocab=1000)
    short_keyed = _request([1], 40)  # 2 full blocks, 1 key: the rest is the request's own
    first, again = tokens.prompt(short_keyed, 0), tokens.prompt(short_keyed, 1)
    assert len(first) == 40 and first[:16] == again[:16] and first[16:] != again[16:]
    assert all(type(t) is int and FIRST_TOKEN <= t < 1000 for t in first)
