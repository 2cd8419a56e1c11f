"""The one interface every eviction policy implements, and the protocol its callers drive.

Every policy is one class of the compiled core (``wakman._core``, sources in ``core/``): a Python
module per policy states its exact semantics and subclasses the core class, which is the only
implementation. The callers are drivers of one event protocol (``core/policy.hpp``), made in
libCacheSim's order:

- ``miss(key)``: a lookup missed on ``key``; a ghost hit is recorded here, before any eviction;
- ``evict()`` / ``evict_many(n)``: victims among the unpinned resident keys;
- ``insert(key, pinned=False)``: ``key`` becomes resident (the caller made room);
- ``hit(key)``: a lookup found resident ``key``, pinned or not;
- ``pin(key)`` / ``unpin(key)``: the key leaves / re-enters the eviction order (vLLM: ``ref_cnt``
  leaves / reaches 0); ``hit_pin(key, pin_too=True)`` is ``hit`` then ``pin`` (when ``pin_too``)
  with one lookup (the pool's touch); ``hit_pin_many`` and ``unpin_many`` batch them;
- ``remove(key)`` (alias ``discard``): O(1) removal outside eviction; every other key keeps its
  metadata;
- ``evict_key(key)``: the host evicts this resident key (pinned or not; vLLM 0.34's
  ``free_blocks(evict_first=True)``): it leaves as the policy's own eviction of it would, its ghost
  entry kept where the policy keeps one (each policy's module says where); without ghosts, as
  ``remove``. O(1);
- ``adopt(keys)`` (hand-over, oldest first), ``reset()``;
- ``rekey(key, new_key)``: the resident ``key`` is known as ``new_key`` (a key the policy does not
  know) from now on, keeping its place, segment, counters and pin; ``True`` for the one-queue
  policies (LRU, FIFO, the infinite ceiling), ``False`` (nothing changed) for the others, whose
  keys carry more than a place, and when ``new_key`` is known or ``key`` is not resident. O(1).
  (vLLM's free queue keeps a free block that lost its hash in its place this way, as stock vLLM
  does.)

The drivers: ``access(key)`` and ``replay(keys)`` (one loop for every policy: find, hit or miss,
evict while full, insert; a numpy uint64 array is read in place), a request's replay through a
plain cache (``wakman.drivers.replay_request``: cache mode and the adaptive manager's shadows),
the serve-mode pool
(``wakman.simulation.pool``) and vLLM's free-block queue (``wakman.vllm_plugin.free_queue``).

Keys are 64-bit unsigned integers (block hashes); a Python int is taken modulo 2**64.

Pinning rule (the same for every policy): a pinned key leaves the eviction order and keeps its
metadata (frequency, segment, visited bit, ...); ``unpin`` puts it back at the policy's *newest*
position of its segment. ``evict`` only ever returns an unpinned key and never fails while one exists
(``NoEvictableKey`` otherwise). Ghost entries are keyed by the key itself (the block hash), never by a
block id. Misuse (``insert`` of a resident key, ``unpin`` of an unpinned one, ``hit`` of an absent
one) raises ``KeyError``; ``pin`` of a pinned key changes nothing (the vLLM pool pins a block only
while it is free). The batches (``hit_pin_many``, ``unpin_many``, ``adopt``) are not atomic: the
keys before the one that raises have been applied. ``evict_many(n)`` is all or nothing.

Invariants, checked by the property tests:
- ``len(self) == num_evictable + num_pinned``; a key is resident iff ``key in self``;
- ``evict`` returns a resident, unpinned key and removes it;
- ``handover(src, dst)`` leaves ``dst`` with exactly ``src``'s resident and pinned keys.
"""

from __future__ import annotations

from collections.abc import Iterable

from wakman import _core

EvictionPolicy = _core.Policy
NoEvictableKey = _core.NoEvictableKey
Key = int


def take_over(dst: EvictionPolicy, order: Iterable[int], pinned: Iterable[int]) -> EvictionPolicy:
    """Reset ``dst``, then give it cached blocks whose order another structure holds: ``order``'s
    keys unpinned through ``dst.adopt``, first victim first, and ``pinned``'s inserted pinned, in
    increasing key order (``handover``'s rules; the offload tier's switch away from its vLLM-ordered
    lru uses it). The keys must be distinct. O(keys)."""
    _core.take_over(dst, order, pinned)
    return dst


def handover(src: EvictionPolicy, dst: EvictionPolicy) -> EvictionPolicy:
    """Move ``src``'s cached blocks into ``dst`` (reset first): O(resident keys), nothing lost.

    The unpinned keys enter ``dst`` in ``src``'s eviction order (first victim first) through
    ``dst.adopt``; pinned keys are inserted pinned, in increasing key order (a fixed order that
    ``src``'s index layout does not change). ``src``'s ghosts and counters are not carried
    (switching S3-FIFO -> LRU discards the ghost queue). ``src`` is left untouched.
    """
    _core.handover(src, dst)
    return dst
