"""The ``BlockPool`` hooks a policy needs and the free queue alone cannot see.

``install(pool, policy)`` turns a freshly built vLLM ``BlockPool`` (all blocks free and uncached)
into a ``PolicyBlockPool`` in place, so the coordinator and the per-type managers, which already hold
the pool, keep using the same object. Overridden, each a thin layer over the stock method:

- ``touch``: a prefix hit reaches the policy whether the block is free or already pinned
  (``ref_cnt > 0``), then the stock pinning happens. Only touches made while the coordinator admits
  a request's computed blocks (``counting_hits``, set by ``install``) are hits; the offload paths'
  touches only pin, so they do not inflate frequencies.
- ``_insert_block_hash``: a block's first hash makes it a policy key (pinned: it is in use).
- ``_remove_cached_block_hashes``: a hash removed outside eviction leaves the policy.
- ``reset_prefix_cache``: on success the policy forgets everything, ghosts included.

``get_new_blocks`` and ``free_blocks`` are stock: they reach the policy through the queue's
``popleft_n``, ``append_n`` and ``prepend_n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vllm.v1.core.block_pool import BlockPool

from wakman.policies import EvictionPolicy
from wakman.vllm_plugin.free_queue import PolicyFreeQueue


class PolicyBlockPool(BlockPool):
    free_block_queue: PolicyFreeQueue  # type: ignore[assignment]
    counting_hits = False  # True while the coordinator pins a request's prefix hits

    def touch(self, blocks: Sequence[Any]) -> None:
        queue = self.free_block_queue
        key_of, policy, collector = queue.key_of, queue.policy, self.metrics_collector
        pin_only = not self.counting_hits
        for block in blocks:
            key = key_of[block.block_id]
            if block.ref_cnt == 0 and not block.is_null:
                if key is None:
                    del queue.blank[block.block_id]
                else:
                    if not pin_only:
                        policy.hit(key)
                    policy.pin(key)
            elif key is not None and not pin_only:
                policy.hit(key)
            block.ref_cnt += 1
            if collector:
                collector.on_block_accessed(block)

    def _insert_block_hash(self, block_hash_with_group_id: Any, block: Any, num_tokens: int | None) -> None:
        first = block.block_hash is None  # a secondary hash leaves the block's policy key as it is
        super()._insert_block_hash(block_hash_with_group_id, block, num_tokens)
        if first and block.block_hash is not None and not block.is_null:
            self.free_block_queue.cached(block, block.block_hash)

    def _remove_cached_block_hashes(self, block: Any) -> list:
        queue = self.free_block_queue
        if queue.key_of[block.block_id] is not None:  # None after an eviction: the queue let go already
            queue.uncached(block)
        return super()._remove_cached_block_hashes(block)

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
    stock = pool.free_block_queue
    free = stock.get_all_free_blocks()
    if len(free) != pool.num_gpu_blocks - 1 or pool.cached_block_hash_to_block._cache:
        raise RuntimeError("wakman can only take over a fresh vLLM block pool (all blocks free, none cached)")
    for block in free:  # unthread the stock linked list
        block.prev_free_block = block.next_free_block = None
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
