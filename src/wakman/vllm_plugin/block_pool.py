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

- ``get_new_blocks``: stock, written out so that an evicted block skips the hook above.

- ``free_blocks``: stock, written out so that released keys reach the policy in one call.

Hot-path overrides copy vLLM 0.32's code rather than wrap it (one Python frame less per block);
``compat.py`` refuses other vLLM versions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vllm.v1.core.block_pool import BlockPool

from wakman.policies import EvictionPolicy
from wakman.vllm_plugin.free_queue import PolicyFreeQueue, policy_key


class PolicyBlockPool(BlockPool):
    free_block_queue: PolicyFreeQueue  # type: ignore[assignment]
    counting_hits = False  # True while the coordinator pins a request's prefix hits

    def touch(self, blocks: Sequence[Any]) -> None:
        """Stock ``touch`` plus the policy calls: free cached blocks are hit and pinned in one
        batch after the loop (vLLM never touches a block twice in one call), pinned ones are hit."""
        queue = self.free_block_queue
        policy, collector = queue.policy, self.metrics_collector
        counting = self.counting_hits
        freed: list = []
        take = freed.append
        for block in blocks:
            if block.ref_cnt == 0 and not block.is_null:
                key = block.prev_free_block  # the block's policy key (free_queue.py)
                if key is None:
                    del queue.blank[block.block_id]
                else:
                    take(key)
            elif counting and (key := block.prev_free_block) is not None:
                policy.hit(key)
            block.ref_cnt += 1
            if collector:
                collector.on_block_accessed(block)
        if freed:
            if counting:
                policy.hit_pin_many(freed)
            else:
                for key in freed:
                    policy.pin(key)

    def _insert_block_hash(self, block_hash_with_group_id: Any, block: Any, num_tokens: int | None) -> None:
        """Stock vLLM 0.32's method, plus: a block's first hash makes it a policy key (a secondary
        hash leaves the key as it is). Written out, not wrapped: it runs once per computed block, so
        it reads the block's ``_block_hash`` field rather than the ``block_hash`` property."""
        if block._block_hash == block_hash_with_group_id:
            return
        cached = self.cached_block_hash_to_block
        if cached.contain(block_hash_with_group_id, block.block_id):
            return
        if block._block_hash is None:
            block.set_block_hash(block_hash_with_group_id, num_tokens=num_tokens)
            queue = self.free_block_queue
            key = policy_key(block_hash_with_group_id)
            if block.ref_cnt > 0 and key not in queue.block_of:
                # the usual case, a block of a running request: queue.cached() written out
                block.prev_free_block = key
                queue.block_of[key] = block
                queue.policy.insert_pinned(key)
            elif not block.is_null:
                queue.cached(block, block_hash_with_group_id)
        else:
            self.cached_block_hashes_by_block.setdefault(block.block_id, set()).add(block_hash_with_group_id)
        cached.insert(block_hash_with_group_id, block)

    def get_new_blocks(self, num_blocks: int) -> list[Any]:
        """Stock vLLM 0.32's method with caching on, written out: the queue has already let go of
        the victims' policy keys, so their hashes leave vLLM's map without the hook below."""
        if num_blocks > self.get_num_free_blocks():
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        ret = self.free_block_queue.popleft_n(num_blocks)
        if self._reuse_watchers:
            self._notify_reuse(ret)
        remove, collector = BlockPool._remove_cached_block_hashes, self.metrics_collector
        for block in ret:
            if collector:
                collector.on_block_evicted(block)
            evicted = remove(self, block)
            if evicted:
                self._emit_block_removed_events(evicted)
            block.ref_cnt += 1
            if collector:
                collector.on_block_allocated(block)
        return ret

    def free_blocks(self, ordered_blocks: Any) -> None:
        """Stock vLLM 0.32's method with caching on, written out: a block whose ``ref_cnt`` reaches
        0 re-enters the policy (it has a key iff it has a hash) or, uncached, the head of ``blank``;
        the keys are unpinned in one call, in vLLM's order (first to be evicted first)."""
        queue = self.free_block_queue
        uncached: list = []
        keys: list = []
        other_pools: dict = {}
        for block in ordered_blocks:
            if block.pool is not None and block.pool is not self:
                other_pools.setdefault(block.pool, []).append(block)
                continue
            block.ref_cnt -= 1
            if block.ref_cnt == 0 and not block.is_null:
                key = block.prev_free_block
                if key is None:
                    uncached.append(block)
                else:
                    keys.append(key)
        if uncached:
            queue.prepend_n(uncached)
        queue.policy.unpin_many(keys)
        for pool, blocks in other_pools.items():
            pool.free_blocks(blocks)

    def _remove_cached_block_hashes(self, block: Any) -> list:
        queue = self.free_block_queue
        if block.prev_free_block is not None:  # None after an eviction: the queue let go already
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
