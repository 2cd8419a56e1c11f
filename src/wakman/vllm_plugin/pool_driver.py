"""Drive a bare vLLM ``BlockPool`` with a trace's block keys, the way the scheduler does for
requests served one after another: look up the longest cached prefix, ``touch`` it, take new
blocks with ``get_new_blocks``, cache the full ones with ``cache_full_blocks``, then ``free_blocks``
deepest first.

The tests use it to compare wakman's pool with stock vLLM's operation by operation, and the
benchmark to time both on the same sequence. Keys become vLLM hashes (32 bytes) and hash keys
(the hash + group id 0, ``BlockHashWithGroupId``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import get_block_hash, make_block_hash_with_group_id

from wakman.policies import make_policy
from wakman.traces.model import key_list
from wakman.vllm_plugin import install


def hash_bytes(keys: Iterable[int]) -> list[bytes]:
    """32-byte block hashes for integer block keys (Python ints, or a uint64 array: converted,
    since ``int.to_bytes`` needs Python ints); the offload driver keys its chunks the same way."""
    return [(k & (2**256 - 1)).to_bytes(32, "big") for k in key_list(keys)]


def vllm_keys(keys: Iterable[int]) -> list[bytes]:
    """vLLM hash keys (group 0) for integer block keys."""
    return [make_block_hash_with_group_id(h, 0) for h in hash_bytes(keys)]


class Prompt(NamedTuple):
    """A request's full blocks as ``serve_one`` needs them: ``keys`` for lookups (hash + group id),
    ``block_hashes`` for ``cache_full_blocks`` (what it reads of a vLLM ``Request``)."""

    keys: Sequence[bytes]
    block_hashes: Sequence[bytes]

    @classmethod
    def of(cls, keys: Sequence[bytes]) -> Prompt:
        return cls(keys, [get_block_hash(k) for k in keys])


def make_pool(capacity_blocks: int, policy: str | None, block_size: int = 32) -> BlockPool:
    """A vLLM pool with ``capacity_blocks`` usable blocks; ``policy=None`` keeps stock vLLM's queue."""
    pool = BlockPool(capacity_blocks + 1, enable_caching=True, hash_block_size=block_size)
    if policy is not None:
        install(pool, make_policy(policy, capacity_blocks))
    return pool


def serve_one(
    pool: BlockPool,
    prompt: Prompt | Sequence[bytes],
    hit_limit: int,
    extra_blocks: int = 0,
    arrival_s: float | None = None,
    while_held: Callable[[BlockPool], object] | None = None,
) -> int:
    """One request over ``prompt`` (its full blocks: a ``Prompt``, or hash keys) plus ``extra_blocks``
    uncached ones; returns the number of hit blocks (at most ``hit_limit``). With ``arrival_s``
    (seconds) a wakman pool's policy also gets the request hints the scheduler's hooks give
    (``request_arrived`` at arrival, ``inserting_for`` before the allocation). ``while_held(pool)``
    runs after the request's blocks are cached, before they are freed (a connector's call, say)."""
    if not isinstance(prompt, Prompt):
        prompt = Prompt.of(prompt)
    keys = prompt.keys
    if arrival_s is not None and hasattr(pool, "counting_hits") and prompt.block_hashes:
        pool.free_block_queue.request_arrived(prompt.block_hashes, 0, arrival_s)
        pool.free_block_queue.inserting_for(prompt.block_hashes[0], 0)
    hits: list[Any] = []
    lookup = pool.cached_block_hash_to_block.get_one_block
    for key in keys[:hit_limit]:
        block = lookup(key)
        if block is None:
            break
        hits.append(block)
    counting = hasattr(pool, "counting_hits")
    if counting:  # what the plugin's KVCacheManager hooks do around the scheduler's allocation
        pool.counting_hits = True
        pool.free_block_queue.expect_misses(prompt.block_hashes, len(hits), (0,))
    pool.touch(hits)
    if counting:
        pool.counting_hits = False
    blocks = hits + pool.get_new_blocks(len(keys) - len(hits) + extra_blocks)
    if counting:
        pool.free_block_queue.drop_expected_misses()
    pool.cache_full_blocks(prompt, blocks, len(hits), len(keys), pool.hash_block_size, 0)
    if while_held is not None:
        while_held(pool)
    pool.free_blocks(reversed(blocks))
    return len(hits)
