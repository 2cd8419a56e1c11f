"""The ``BlockPool`` hooks a policy needs and the free queue alone cannot see.

``install(pool, policy)`` gives a freshly built vLLM ``BlockPool`` (all blocks free and uncached) a
``PolicyFreeQueue`` and the hooks below, in place, so the coordinator and the per-type managers,
which already hold the pool, keep using the same object. No vLLM code is copied: the per-block hot
path (``get_new_blocks``, ``free_blocks``, ``_insert_block_hash``, ``_remove_cached_block_hashes``,
``unpin_blocks``) stays stock and reaches the policy through the queue (``popleft_n`` evicts,
``remove`` pins, ``append_n`` / ``prepend_n`` release; ``unpin_blocks``' uncached pages take their
place at the order's newest end under lru and fifo, as in stock's one list, and wait in the queue's
reserve under the other policies: free_queue.py). The hooks run once per call,
each calling the method of the pool's own class and then telling the queue in one batch. They are
set on the pool object (bound methods shadowing the class's), not by changing its class: CPython's
attribute fast path for the pool's fields (which the stock per-block loops read) keys on the class
the object was built as, and a changed class makes each such read about 2.5x slower.

- ``touch``: before the stock touch, a prefix hit reaches the policy whether the block is free or
  already in use (``ref_cnt > 0``). Only touches made while the coordinator admits a request's
  computed blocks (``counting_hits``, set by ``install``) are hits; the offload paths' touches only
  pin (the stock touch's ``remove``), so they do not inflate frequencies.
- ``cache_full_blocks`` / ``cache_partial_block``: the blocks that got a hash become policy keys
  (pinned while in use); a block promoted from a partial to a full hash is re-keyed.
- ``evict_blocks`` (a connector's evictions) / ``move_block_hashes``: a block that lost its hash leaves
  the policy in O(1); every other key keeps its metadata. A free one keeps its place in the order
  under a key of its own where the policy renames keys (lru, fifo: stock leaves it in its place in
  its one list); under the other policies it joins the head of the blank blocks, handed out before
  any cached block, which keeps each of those one eviction longer.
- ``reset_prefix_cache``: on success the policy forgets everything, ghosts included.
- the manager's ``allocate_slots``: first the request's chain root (its first full block) goes to
  the policy as the context of the blocks the allocation caches (``inserting_for``, the hint the
  simulator's serve loop gives at an admission and at each decoded block); then, for a request that
  was just looked up (a new or preempted one, ``num_computed_tokens == 0``), its full blocks after
  the cached prefix are announced to the queue (``expect_misses``), which passes a miss for each one
  not cached to the policy at the allocation's first ``popleft_n``, before any victim is chosen, so
  S3-FIFO's and ARC's ghost hits are seen before the evictions that make room for them
  (libCacheSim's order, the simulator's admission). An allocation that does not go ahead announces
  nothing.

The queue also checks each block it is handed back against its hash (``append_n``: an unkeyed block
with a hash becomes a key; ``prepend_n``: a keyed block without one loses its key), so a hash set or
removed on a path not listed here (vLLM's Mamba checkpoint eviction) is caught at the block's
release at the latest. ``compat.py`` checks at start-up, and ``install`` before it takes a pool,
that the vLLM version is supported and the stock methods these hooks and the queue rely on are the
ones read.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from vllm.v1.core.block_pool import BlockPool

from wakman.policies import EvictionPolicy
from wakman.vllm_plugin.compat import INSTALL_STOP, check_vllm_version
from wakman.vllm_plugin.free_queue import PolicyFreeQueue


def _stock(pool: Any, name: str) -> Callable:
    """The method ``name`` as the pool's class defines it (stock vLLM's, or a subclass's)."""
    return getattr(type(pool), name)


def touch(pool: Any, blocks: Sequence[Any]) -> None:
    if pool.counting_hits:
        pool.free_block_queue.hit(blocks)
    _stock(pool, "touch")(pool, blocks)


def cache_full_blocks(
    pool: Any,
    request: Any,
    blocks: list[Any],
    num_cached_blocks: int,
    num_full_blocks: int,
    *args: Any,
    **kwargs: Any,
) -> None:
    stock = _stock(pool, "cache_full_blocks")
    try:
        stock(pool, request, blocks, num_cached_blocks, num_full_blocks, *args, **kwargs)
    finally:  # what the stock method changed before it raised reaches the queue too
        pool.free_block_queue.sync(blocks, num_cached_blocks, num_full_blocks)


def cache_partial_block(pool: Any, request: Any, block: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return _stock(pool, "cache_partial_block")(pool, request, block, *args, **kwargs)
    finally:
        pool.free_block_queue.sync((block,))


def move_block_hashes(pool: Any, src_block: Any, dst_block: Any) -> None:
    try:
        _stock(pool, "move_block_hashes")(pool, src_block, dst_block)
    finally:
        pool.free_block_queue.sync((src_block, dst_block))


def evict_blocks(pool: Any, block_ids: Iterable[int]) -> None:
    # the caller's collection itself goes to stock (a set rebuilt from it may iterate in another
    # order, and stock's loop emits its BlockRemoved events in that order)
    ids = block_ids if isinstance(block_ids, Collection) else list(block_ids)
    try:
        _stock(pool, "evict_blocks")(pool, ids)
    finally:  # the blocks stock evicted before it raised (an id out of range) lose their keys too
        blocks = pool.blocks
        pool.free_block_queue.sync([blocks[i] for i in ids if isinstance(i, int) and 0 <= i < len(blocks)])


def reset_prefix_cache(pool: Any) -> bool:
    done = _stock(pool, "reset_prefix_cache")(pool)
    if done:
        pool.free_block_queue.clear_cache()
    return done


def check(pool: Any) -> None:
    """Assert the queue's invariants and that no block is lost (free + used == capacity)."""
    pool.free_block_queue.check(pool.blocks)
    used = sum(1 for b in pool.blocks if not b.is_null and b.ref_cnt > 0)
    assert used + pool.get_num_free_blocks() == pool.num_gpu_blocks - 1, (
        f"blocks lost: {used} used + {pool.get_num_free_blocks()} free != {pool.num_gpu_blocks - 1}"
    )


HOOKS = (
    touch,
    cache_full_blocks,
    cache_partial_block,
    move_block_hashes,
    evict_blocks,
    reset_prefix_cache,
    check,
)


@functools.cache
def _checked_vllm() -> str:
    """``check_vllm_version`` once per process (a refusal is not kept: it raises again): ``install``
    takes a pool only from a vLLM whose relied-on methods are the checked releases'."""
    return check_vllm_version(stock=INSTALL_STOP)


def is_installed(pool: Any) -> bool:
    """Whether ``install`` put a wakman policy behind this pool."""
    return isinstance(pool.free_block_queue, PolicyFreeQueue)


def install(
    pool: BlockPool, policy: EvictionPolicy, coordinator: Any = None, manager: Any = None
) -> BlockPool:
    """Put ``policy`` behind ``pool``'s free queue. ``pool`` must be fresh (every block free, none
    cached, no wakman policy yet) and ``policy`` empty, serving no other pool (a ``ValueError``
    otherwise), its capacity the pool's usable blocks, ``num_gpu_blocks - 1``; ghosts it kept from
    earlier use are forgotten. ``coordinator`` (the ``KVCacheCoordinator`` owning the pool) marks
    which touches are hits; ``manager`` (the ``KVCacheManager`` owning it) tells the policy an
    admission's misses before its evictions. Afterwards ``pool.check()`` asserts the invariants."""
    _checked_vllm()
    if is_installed(pool):
        raise RuntimeError("this vLLM block pool already has a wakman policy: install once per pool")
    free = pool.free_block_queue.get_all_free_blocks()
    if len(free) != pool.num_gpu_blocks - 1 or any(b.block_hash is not None for b in pool.blocks):
        raise RuntimeError("wakman can only take over a fresh vLLM block pool (all blocks free, none cached)")
    pool.free_block_queue = PolicyFreeQueue(pool.blocks, free, policy)
    pool.counting_hits = False  # True while the coordinator pins a request's prefix hits
    for hook in HOOKS:
        setattr(pool, hook.__name__, types.MethodType(hook, pool))
    if coordinator is not None:
        admit = coordinator.allocate_new_computed_blocks

        def allocate_new_computed_blocks(*args: Any, **kwargs: Any) -> Any:
            pool.counting_hits = True
            try:
                return admit(*args, **kwargs)
            finally:
                pool.counting_hits = False

        coordinator.allocate_new_computed_blocks = allocate_new_computed_blocks
    if manager is not None:
        _tell_allocations(pool, manager)
    return pool


def request_group(manager: Any, pool: Any) -> int | None:
    """The KV-cache group whose keys carry a request's hints (``request_arrived``, ``inserting_for``):
    the first group, where every group's blocks are the request's hash blocks (vLLM's usual layout).
    None otherwise (groups with larger blocks): a request's hash blocks are then not the blocks the
    pool caches, and the policy gets no request hints at all (chain-lru is then LRU), rather than
    statistics from one request and the insert context of another."""
    managers = manager.coordinator.single_type_managers
    if any(m.block_size != pool.hash_block_size for m in managers):
        return None
    return managers[0].kv_cache_group_id


def _tell_allocations(pool: Any, manager: Any) -> None:
    """Wrap ``manager.allocate_slots`` so that the policy knows whose blocks an allocation caches and
    an admission's lookup misses reach it before its evictions (the module docstring). Only where
    the request's hints have a group (``request_group``); otherwise misses are left out (ghost hits
    are seen at insert) and so are the hints."""
    group = request_group(manager, pool)
    if group is None:
        return
    groups = tuple(m.kv_cache_group_id for m in manager.coordinator.single_type_managers)
    queue, block_size, allocate = pool.free_block_queue, pool.hash_block_size, manager.allocate_slots

    def allocate_slots(request: Any, num_new_tokens: int, *args: Any, **kwargs: Any) -> Any:
        if request.block_hashes:
            queue.inserting_for(request.block_hashes[0], group)
        if request.num_computed_tokens:  # running: no lookup preceded this allocation
            return allocate(request, num_new_tokens, *args, **kwargs)
        hit_tokens = kwargs.get("num_new_computed_tokens", args[0] if args else 0)
        queue.expect_misses(request.block_hashes, hit_tokens // block_size, groups)
        try:
            return allocate(request, num_new_tokens, *args, **kwargs)
        finally:
            queue.drop_expected_misses()

    manager.allocate_slots = allocate_slots
