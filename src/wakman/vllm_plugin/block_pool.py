"""The ``BlockPool`` hooks a policy needs and the free queue alone cannot see.

``install(pool, policy)`` turns a freshly built vLLM ``BlockPool`` (all blocks free and uncached)
into a ``PolicyBlockPool`` in place, so the coordinator and the per-type managers, which already hold
the pool, keep using the same object, and gives it a ``PolicyFreeQueue``. Every hook calls the stock
method; no vLLM code is copied. ``get_new_blocks``, ``free_blocks``, ``unpin_blocks`` and the rest stay
stock: they reach the policy through the queue (``popleft_n`` evicts, ``remove`` pins, ``append_n`` /
``prepend_n`` unpin or free).

- ``touch``: before the stock touch, a prefix hit reaches the policy whether the block is free or
  already in use (``ref_cnt > 0``). Only touches made while the coordinator admits a request's
  computed blocks (``counting_hits``, set by ``install``) are hits; the offload paths' touches only
  pin (the stock touch's ``remove``), so they do not inflate frequencies.
- ``_insert_block_hash``: after the stock method, a block's first hash makes it a policy key (pinned
  while in use); a secondary hash leaves the key as it is.
- ``_remove_cached_block_hashes``: before the stock method, a hash removed outside eviction (a
  connector's ``evict_blocks``, ``move_block_hashes``, a partial block promoted) takes the block's key
  out of the policy, O(1). After an eviction the queue has let go of the key already: a no-op.
- ``reset_prefix_cache``: on success the policy forgets everything, ghosts included.

The two hash hooks run once per block, so they are the queue's compiled methods
(``PolicyFreeQueue.insert_block_hash`` / ``remove_cached_block_hashes``), set on the pool instance by
``install``, each calling the stock ``BlockPool`` method: no Python frame of ours per block.

``compat.py`` checks, at start-up, that the stock methods these hooks rely on are the ones read.
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
        if self.counting_hits:
            self.free_block_queue.hit(blocks)
        super().touch(blocks)

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
    queue = pool.free_block_queue = PolicyFreeQueue(pool.blocks, free, policy)
    queue.hook_pool(pool, BlockPool._insert_block_hash, BlockPool._remove_cached_block_hashes)
    pool._insert_block_hash = queue.insert_block_hash
    pool._remove_cached_block_hashes = queue.remove_cached_block_hashes
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
