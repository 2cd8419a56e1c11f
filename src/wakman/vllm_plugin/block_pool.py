"""The ``BlockPool`` hooks a policy needs and the free queue alone cannot see.

``install(pool, policy)`` turns a freshly built vLLM ``BlockPool`` (all blocks free and uncached)
into a ``PolicyBlockPool`` in place, so the coordinator and the per-type managers, which already hold
the pool, keep using the same object, and gives it a ``PolicyFreeQueue``. No vLLM code is copied:
the per-block hot path (``get_new_blocks``, ``free_blocks``, ``_insert_block_hash``,
``_remove_cached_block_hashes``, ``unpin_blocks``) stays stock and reaches the policy through the
queue (``popleft_n`` evicts, ``remove`` pins, ``append_n`` / ``prepend_n`` release). The hooks below run
once per call, each calling the stock method and then telling the queue in one batch:

- ``touch``: before the stock touch, a prefix hit reaches the policy whether the block is free or
  already in use (``ref_cnt > 0``). Only touches made while the coordinator admits a request's
  computed blocks (``counting_hits``, set by ``install``) are hits; the offload paths' touches only
  pin (the stock touch's ``remove``), so they do not inflate frequencies.
- ``cache_full_blocks`` / ``cache_partial_block``: the blocks that got a hash become policy keys
  (pinned while in use); a block promoted from a partial to a full hash is re-keyed.
- ``evict_blocks`` (a connector's evictions) / ``move_block_hashes``: a block that lost its hash leaves
  the policy in O(1); every other key keeps its metadata. A free one joins the head of the blank
  blocks, as stock vLLM hands uncached blocks out first.
- ``reset_prefix_cache``: on success the policy forgets everything, ghosts included.

The queue also reconciles every block it is handed back (``append_n`` / ``prepend_n``) with its hash,
so a hash set or removed on a path not listed here (vLLM's Mamba checkpoint eviction) is caught at
the block's release at the latest. ``compat.py`` checks at start-up that the stock methods these
hooks and the queue rely on are the ones read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from vllm.v1.core.block_pool import BlockPool

from wakman.policies import EvictionPolicy
from wakman.vllm_plugin.free_queue import PolicyFreeQueue


class PolicyBlockPool(BlockPool):
    free_block_queue: PolicyFreeQueue  # type: ignore[assignment]
    counting_hits = False  # True while the coordinator pins a request's prefix hits

    def touch(self, blocks: Sequence[Any]) -> None:
        if self.counting_hits:
            self.free_block_queue.hit(blocks)
        super().touch(blocks)

    def cache_full_blocks(
        self,
        request: Any,
        blocks: list[Any],
        num_cached_blocks: int,
        num_full_blocks: int,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        super().cache_full_blocks(request, blocks, num_cached_blocks, num_full_blocks, *args, **kwargs)
        self.free_block_queue.sync(blocks, num_cached_blocks, num_full_blocks)

    def cache_partial_block(self, request: Any, block: Any, *args: Any, **kwargs: Any) -> Any:
        out = super().cache_partial_block(request, block, *args, **kwargs)
        self.free_block_queue.sync((block,))
        return out

    def move_block_hashes(self, src_block: Any, dst_block: Any) -> None:
        super().move_block_hashes(src_block, dst_block)
        self.free_block_queue.sync((src_block, dst_block))

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        block_ids = list(block_ids)
        super().evict_blocks(set(block_ids))
        self.free_block_queue.sync([self.blocks[i] for i in block_ids])

    def reset_prefix_cache(self) -> bool:
        done = super().reset_prefix_cache()
        if done:
            self.free_block_queue.clear_cache()
        return done

    def check(self) -> None:
        """Assert the queue's invariants and that no block is lost (free + used == capacity)."""
        self.free_block_queue.check(self.blocks)
        used = sum(1 for b in self.blocks if not b.is_null and b.ref_cnt > 0)
        assert used + self.get_num_free_blocks() == self.num_gpu_blocks - 1, (
            f"blocks lost: {used} used + {self.get_num_free_blocks()} free != {self.num_gpu_blocks - 1}"
        )


def install(pool: BlockPool, policy: EvictionPolicy, coordinator: Any = None) -> PolicyBlockPool:
    """Put ``policy`` behind ``pool``'s free queue. ``pool`` must be fresh: every block free, none
    cached. ``coordinator`` (the ``KVCacheCoordinator`` owning the pool) marks which touches are hits."""
    free = pool.free_block_queue.get_all_free_blocks()
    if len(free) != pool.num_gpu_blocks - 1 or any(b.block_hash is not None for b in pool.blocks):
        raise RuntimeError("wakman can only take over a fresh vLLM block pool (all blocks free, none cached)")
    pool.__class__ = PolicyBlockPool
    pool.free_block_queue = PolicyFreeQueue(pool.blocks, free, policy)
    if coordinator is not None:
        admit = coordinator.allocate_new_computed_blocks

        def allocate_new_computed_blocks(*args: Any, **kwargs: Any) -> Any:
            pool.counting_hits = True
            try:
                return admit(*args, **kwargs)
            finally:
                pool.counting_hits = False

        coordinator.allocate_new_computed_blocks = allocate_new_computed_blocks
    return pool  # type: ignore[return-value]
