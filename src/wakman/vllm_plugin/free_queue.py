"""vLLM's free-block queue, ordered by a wakman ``EvictionPolicy`` instead of a fixed linked list.

Implements the protocol ``BlockPool`` uses (``popleft``, ``popleft_n``, ``remove``, ``append_n``,
``prepend_n``, ``num_free_blocks``, ``get_all_free_blocks``, ``iter_blocks_after``) over two parts:

- ``blank``: free blocks without a hash, head first. They are handed out before any cached block
  (stock vLLM prepends them to the head); ``prepend_n`` puts blocks at the head, as vLLM does.
- the policy: every block with a hash, keyed by ``policy_key(hash)`` (the 64-bit key the compiled
  core takes, from the ``BlockHashWithGroupId``); pinned while ``ref_cnt > 0``, evictable (i.e. in
  the free queue) when it is 0. A second block cached under a hash that another block already holds
  (vLLM allows such duplicates) is keyed ``policy_key((hash, block_id))``. Ghost entries are keyed
  by hash, so they survive block-id reuse.

A block's policy key is kept on the block, in its ``prev_free_block`` slot (``KVCacheBlock`` has
``__slots__``; vLLM reserves that slot for the free queue, which this class replaces, and no other
vLLM code reads it); None means no key. Reading it is one attribute load on the hot path.

Invariants (``check``): a non-null block is free (in ``blank`` or an evictable key) iff ``ref_cnt ==
0``; ``num_free_blocks == len(blank) + policy.num_evictable``; ``popleft_n(n)`` never refuses while
``n <= num_free_blocks``. The queue keeps no state per operation beyond these maps.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from wakman.policies import EvictionPolicy, Key, handover

KEY_MASK = (1 << 64) - 1


def policy_key(block_hash: object) -> int:
    """The core's 64-bit key for a vLLM block hash: Python's hash of it (cached on the bytes
    object, so a second call is one load), as an unsigned 64-bit integer. Two distinct hashes
    collide with probability ~n^2 / 2^65 for n cached blocks."""
    return hash(block_hash) & KEY_MASK


class PolicyFreeQueue:
    def __init__(self, blocks: Sequence[Any], free_blocks: Sequence[Any], policy: EvictionPolicy) -> None:
        """``blocks``: every block of the pool (index = block id); ``free_blocks``: the free ones, in
        stock queue order, none of them cached (the state right after ``BlockPool.__init__``).
        Every block's linked-list slots are cleared: from now on ``prev_free_block`` holds its key."""
        for block in blocks:
            block.prev_free_block = block.next_free_block = None
        self.policy = policy
        self.blank: OrderedDict[int, Any] = OrderedDict((b.block_id, b) for b in free_blocks)
        self.block_of: dict[Key, Any] = {}  # policy key -> block

    # ------------------------------------------------------------------ the stock protocol
    @property
    def num_free_blocks(self) -> int:
        return len(self.blank) + self.policy.num_evictable

    def popleft(self) -> Any:
        return self.popleft_n(1)[0]

    def popleft_n(self, n: int) -> list[Any]:
        """``n`` victims: blank blocks first, then the policy's. The pool evicts their hashes."""
        blank = self.blank
        take = min(n, len(blank))
        out = [blank.popitem(last=False)[1] for _ in range(take)]
        if n > take:
            pop = self.block_of.pop
            victims = [pop(key) for key in self.policy.evict_many(n - take)]
            for block in victims:
                block.prev_free_block = None  # no key any more
            out += victims
        return out

    def remove(self, block: Any) -> None:
        """``block`` leaves the free queue (``ref_cnt`` 0 -> 1): a cached block is pinned."""
        key = block.prev_free_block
        if key is None:
            del self.blank[block.block_id]
        else:
            self.policy.pin(key)

    def append_n(self, blocks: Sequence[Any]) -> None:
        """Blocks whose ``ref_cnt`` reached 0, deepest of a chain first: cached ones re-enter the
        policy's order; uncached ones join ``blank``'s tail. Only offload's ``unpin_blocks`` calls
        this: ``PolicyBlockPool.free_blocks`` unpins its keys itself, in one call."""
        for block in blocks:
            key = block.prev_free_block
            if key is None:
                self.blank[block.block_id] = block
            else:
                self.policy.unpin(key)

    def prepend_n(self, blocks: Sequence[Any]) -> None:
        """Uncached blocks to hand out first, ``blocks[0]`` at the head."""
        blank = self.blank
        for block in reversed(blocks):
            key = block.prev_free_block
            if key is not None:  # only with caching disabled, where no block has a key
                self.policy.unpin(key)
                continue
            blank[block.block_id] = block
            blank.move_to_end(block.block_id, last=False)

    def get_all_free_blocks(self) -> list[Any]:
        """Head to tail: blank blocks, then cached ones in the policy's eviction order."""
        return [*self.blank.values(), *(self.block_of[k] for k in self.policy.eviction_order())]

    def iter_blocks_after(self, cursor: Any | None) -> Iterator[Any]:
        blocks = self.get_all_free_blocks()
        start = (
            0 if cursor is None else next((i + 1 for i, b in enumerate(blocks) if b is cursor), len(blocks))
        )
        yield from blocks[start:]

    # ------------------------------------------------------------------ what the queue alone cannot see
    def cached(self, block: Any, block_hash: Key) -> None:
        """``block`` just got its first hash (``cache_full_blocks``, usually while in use)."""
        block_of = self.block_of
        key: Key = policy_key(block_hash)
        if key in block_of:
            key = policy_key((block_hash, block.block_id))
        bid = block.block_id
        block.prev_free_block = key
        block_of[key] = block
        if block.ref_cnt > 0:
            self.policy.insert_pinned(key)
        else:  # a free blank block got a hash (partial-block paths): it moves from blank to the policy
            self.blank.pop(bid, None)
            self.policy.insert(key)

    def uncached(self, block: Any) -> None:
        """``block`` lost its hash outside eviction (connector ``evict_blocks``, hash moves)."""
        key = block.prev_free_block
        if key is None:
            return
        self.policy.discard(key)
        del self.block_of[key]
        block.prev_free_block = None
        if block.ref_cnt == 0 and not block.is_null:
            self.blank[block.block_id] = block
            self.blank.move_to_end(block.block_id, last=False)

    def clear_cache(self) -> None:
        """``reset_prefix_cache`` succeeded: every block is free and loses its hash."""
        for key in self.policy.eviction_order():
            block = self.block_of[key]
            self.blank[block.block_id] = block
        self.policy.reset()
        for block in self.block_of.values():
            block.prev_free_block = None
        self.block_of.clear()

    def switch(self, policy: EvictionPolicy) -> None:
        """Make ``policy`` the live one: it adopts the current order, O(cached blocks)."""
        self.policy = handover(self.policy, policy)

    def check(self, blocks: Sequence[Any]) -> None:
        """Assert the invariants over every non-null block (tests and the soak run call this)."""
        policy, free = self.policy, 0
        for block in blocks:
            if block.is_null:
                continue
            key = block.prev_free_block
            if key is None:
                in_queue = block.block_id in self.blank
                assert block.block_hash is None or block.ref_cnt > 0 or in_queue, block
            else:
                assert self.block_of[key] is block and key in policy, block
                in_queue = not policy.is_pinned(key)
            assert in_queue == (block.ref_cnt == 0), (
                f"block {block.block_id}: ref_cnt {block.ref_cnt}, free {in_queue}"
            )
            free += in_queue
        assert free == self.num_free_blocks, f"{free} free blocks, queue says {self.num_free_blocks}"
        assert len(policy) == len(self.block_of)
