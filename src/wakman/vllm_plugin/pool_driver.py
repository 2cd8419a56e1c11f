"""Drive a bare vLLM ``BlockPool`` with a trace's block keys, the way the scheduler does for
requests served one after another: look up the longest cached prefix, ``touch`` it, take new
blocks with ``get_new_blocks``, give the full ones their hash, then ``free_blocks`` deepest first.

The tests use it to compare wakman's pool with stock vLLM's operation by operation, and the
benchmark to time both on the same sequence. Keys become vLLM hash keys (32 bytes + group id 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

from wakman.policies import make_policy
from wakman.vllm_plugin.block_pool import install


def vllm_keys(keys: Iterable[int]) -> list[bytes]:
    return [make_block_hash_with_group_id((k & (2**256 - 1)).to_bytes(32, "big"), 0) for k in keys]


def make_pool(capacity_blocks: int, policy: str | None, block_size: int = 32) -> BlockPool:
    """A vLLM pool with ``capacity_blocks`` usable blocks; ``policy=None`` keeps stock vLLM's queue."""
    pool = BlockPool(capacity_blocks + 1, enable_caching=True, hash_block_size=block_size)
    if policy is not None:
        install(pool, make_policy(policy, capacity_blocks))
    return pool


def serve_one(pool: BlockPool, keys: Sequence[bytes], hit_limit: int, extra_blocks: int = 0) -> int:
    """One request over ``keys`` (its full blocks) plus ``extra_blocks`` uncached ones; returns the
    number of hit blocks (at most ``hit_limit``)."""
    hits: list[Any] = []
    for key in keys[:hit_limit]:
        block = pool.cached_block_hash_to_block.get_one_block(key)
        if block is None:
            break
        hits.append(block)
    counting = hasattr(pool, "counting_hits")
    if counting:
        pool.counting_hits = True
    pool.touch(hits)
    if counting:
        pool.counting_hits = False
    fresh = pool.get_new_blocks(len(keys) - len(hits) + extra_blocks)
    for offset, block in enumerate(fresh[: len(keys) - len(hits)]):
        pool._insert_block_hash(keys[len(hits) + offset], block, None)
    pool.free_blocks(reversed(hits + fresh))
    return len(hits)
