"""vLLM's free-block queue, ordered by a wakman ``EvictionPolicy`` instead of a fixed linked list.

``PolicyFreeQueue`` replaces the pool's ``FreeKVCacheBlockQueue`` as a unit: it fills the protocol
``BlockPool`` uses (``popleft``, ``popleft_n``, ``remove``, ``append_n``, ``prepend_n``,
``num_free_blocks``, ``get_all_free_blocks``, ``iter_blocks_after``) in the compiled core
(``core/free_queue.hpp``), over two parts:

- ``blank``: free blocks without a policy key, head first. They are handed out before any cached
  block (stock vLLM puts them at the head too); ``prepend_n`` puts blocks at the head, as vLLM does:
  uncached ones, and from vLLM 0.34 cached ones freed with ``evict_first`` (their key goes; they keep
  their hash, and a hit, until they are handed out).
- the policy: every block with a hash, keyed by ``policy_key(hash)`` (the 64-bit key the core takes);
  pinned while ``ref_cnt > 0``, evictable (i.e. in the free queue) when it is 0. A second block
  cached under a hash that another block already holds (vLLM allows such duplicates) gets the first
  of ``copy_key(key, 1)``, ``(key, 2)``, ... that no block holds (the simulator's pool keys its
  copies the same way). Ghost entries are keyed by hash, so they survive block-id reuse. A free
  block that loses its hash (a connector's ``evict_blocks``, ``move_block_hashes``) keeps its place
  in the order under a key of its own (``is_hashless``), as in stock vLLM's one list, where the
  policy can rename a key in place (``rekey``: lru, fifo); under the other policies it goes to
  blank's head, handed out before every cached block (and so do the hashless blocks at a switch
  to one of them).
- pages: free blocks without a hash that ``append_n`` released to the tail. Stock vLLM appends
  uncached blocks only in ``unpin_blocks`` (HiSparse's pages, readable until reused: "last-resort
  eviction candidates"; its ``free_blocks`` prepends every uncached block), to its one list's tail,
  behind the cached blocks free then and ahead of those freed later. Where the policy renames keys
  (lru, fifo) a page takes that place: it enters the order's newest end under a key of its own
  (``is_hashless``), so lru hands blocks out in stock's order. Under the other policies, and at a
  switch to one, pages wait in the ``reserve``, oldest first, handed out after every evictable
  policy key.

The block-to-key map lives in the core, by block id; the queue reads a block's ``block_id``,
``ref_cnt``, ``is_null`` and ``block_hash`` (from its ``_block_hash`` slot before vLLM 0.34) and
writes nothing to it (its ``prev_free_block`` / ``next_free_block`` slots stay None, so vLLM's
``repr`` of a block works).
``iter_blocks_after`` yields lazily: the first k blocks cost O(k) (plus the keys the eviction
order's dry run passes over); after a cursor, lru and fifo walk on from its key, the other
policies pay O(the cursor's depth) more.

Invariants (``check``): a non-null block is free (in blank, in reserve or an evictable key) iff
``ref_cnt == 0``; a key's block has a hash unless it is hashless, and a hashless block is free;
``num_free_blocks == num_blank_blocks + policy.num_evictable + num_reserve_blocks``;
``popleft_n(n)`` never refuses while ``n <= num_free_blocks``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wakman import _core
from wakman._core import FreeBlockQueue

policy_key = _core.policy_key
"""``policy_key(hash_key)``: the core's 64-bit key for a vLLM hash key (``BlockHashWithGroupId`` or the
offload tier's ``OffloadKey``: the ``BlockHash`` bytes, then the KV-cache group id as 4 big-endian
bytes). With ``splitmix64`` as in the core (``core/key_map.hpp``)::

    k = 0
    for each 8-byte word w of the BlockHash, big-endian (the last one shorter if need be):
        k = splitmix64(k ^ w)
    key = splitmix64(k ^ (group | len(BlockHash) << 32))

Every byte counts, and the key is the same in every process (Python's ``hash`` of bytes changes with
PYTHONHASHSEED). Another object gets Python's hash, mod 2**64. Two distinct hash keys collide with
probability ~n^2 / 2^65 for n cached blocks."""


class PolicyFreeQueue(FreeBlockQueue):
    """``FreeBlockQueue(blocks, free_blocks, policy)``: ``blocks`` is every block of the pool (index =
    block id), ``free_blocks`` the free ones in stock queue order, none of them cached (the state
    right after ``BlockPool.__init__``). Beside the stock protocol, the pool's hooks call
    ``sync(blocks)`` (after vLLM set or removed hashes: a block's first hash makes it a policy key,
    a removed one takes it out), ``hit(blocks)`` (prefix hits), ``expect_misses`` (an admission's
    misses, before its evictions), ``clear_cache()`` (a reset) and ``switch(policy)``."""

    def check(self, blocks: Sequence[Any]) -> None:
        """Assert the invariants over every non-null block (tests and the soak run call this)."""
        policy, free, keyed = self.policy, 0, 0
        for block in blocks:
            if block.is_null:
                assert not self.in_blank(block) and self.key_of(block) is None, block
                continue
            assert block.prev_free_block is None and block.next_free_block is None, block
            key = self.key_of(block)
            if key is None:
                in_blank, in_reserve = self.in_blank(block), self.in_reserve(block)
                assert not (in_blank and in_reserve), block
                in_queue = in_blank or in_reserve
                assert block.block_hash is None or block.ref_cnt > 0 or in_blank, block
            else:
                keyed += 1
                if self.is_hashless(block):  # lost its hash while free, or a page (lru, fifo)
                    assert block.block_hash is None and block.ref_cnt == 0, block
                else:
                    assert block.block_hash is not None, f"{block!r} has a key but no hash"
                assert self.block_of(key) is block and key in policy, block
                assert not self.in_blank(block) and not self.in_reserve(block), block
                in_queue = not policy.is_pinned(key)
            assert in_queue == (block.ref_cnt == 0), (
                f"block {block.block_id}: ref_cnt {block.ref_cnt}, free {in_queue}"
            )
            free += in_queue
        assert free == self.num_free_blocks, f"{free} free blocks, queue says {self.num_free_blocks}"
        assert len(policy) == keyed, f"{len(policy)} policy keys, {keyed} cached blocks"
