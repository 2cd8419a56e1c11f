"""A block pool that mirrors vLLM 0.32's ``BlockPool`` + free queue, keyed by block hash.

Physical blocks are fungible for hit rates, so the pool counts them instead of naming them:

- ``blank``: free blocks holding no hash (handed out first, like vLLM's ``prepend_n``);
- cached blocks (copies), each tracked by the eviction ``policy`` under its policy key; a cached
  block is *pinned* while running requests reference it (``refs > 0``) and *evictable* otherwise
  (vLLM: in the free queue with its hash). The policy only orders; the pool owns capacity;
- ``uncached_in_use``: blocks held by running requests without a hash (a partial last block, a
  decode block not yet full).

vLLM does not deduplicate: a block that becomes full with a key that is cached already (a stranded
block recomputed after an earlier miss in its prompt, a block another running request computed
meanwhile) is a second cached copy, taking a block of its own. The copies of a key are kept in
caching order; a lookup finds the first (vLLM's ``get_one_block``), which a hit touches, and the
next one once the first is evicted. A copy's policy key is its trace key if no copy holds that,
else a remix of it (as the vLLM plugin's queue remixes a duplicate's key). Per copy the pool keeps
``refs`` (running requests holding it) and its parent key (the previous block of its chain, for
``stranded``, counted over first copies); a lookup (``longest_hit``) is the core's one first-miss
rule (``wakman._core.cached_prefix``) over the pool's copies; ``duplicates`` counts the copies beyond
the first of their key.

Invariants (``check``): ``blank + len(policy) + uncached_in_use == capacity``; ``free = blank +
policy.num_evictable``; a policy key is pinned iff its copy's ``refs > 0``; the policy's keys are
exactly the copies' policy keys (``cache`` adds one, only ``allocate``'s victims leave).

Admission of a request (``admit``, vLLM's lookup, ``touch``, ``allocate``, ``cache``): the longest
cached prefix of its full prompt blocks hits (at most ``max_hit`` blocks); if the blocks it needs
(the new ones plus the hit ones that are now free) exceed ``free``, nothing happens. Otherwise, in
libCacheSim's order: ``policy.miss(key)`` for each full prompt key after the hit prefix that no copy
holds as its policy key (a ghost hit is seen before any eviction), then the hits are touched, the
new blocks allocated (evicting), and the new full blocks cached, each pinned by the request.
"""

from __future__ import annotations

from wakman import _core

PoolExhausted = _core.PoolExhausted  # no free block (blank or evictable) is left; a RuntimeError
PoolInvariantError = _core.PoolInvariantError  # ``check`` found a broken invariant; an AssertionError


class BlockPool(_core.BlockPool):
    """The pool above (the core's ``BlockPool``, ``core/block_pool.hpp``), over any policy.

    Blocks in ``capacity``, ``blank``, ``uncached_in_use``, ``free``; ``evictions`` counts victims.
    Per block: ``longest_hit(keys, limit)``, ``evictable_among(keys)``, ``touch(keys)``,
    ``allocate(n)``, ``cache(key, parent)`` (-> the new copy's policy key), ``cache_run(keys, start,
    stop)``, ``release(held)`` (a request's blocks as policy keys, None for anonymous ones). Per request
    (serve mode; the pool keeps each run's held blocks): ``admit(run, keys, max_hit, total, full)``
    (the hit blocks, or -1 if it does not fit; the misses come before the evictions),
    ``fill_last(run, key, parent)``, ``extend(run)``, ``release_run(run)``, ``held(run)``.
    ``replace_policy(policy)`` swaps the policy (it must already hold the cached keys and pins:
    ``handover``); ``stranded()``; ``check()`` raises ``PoolInvariantError``. Keys are ints or
    numpy 8-byte integers; a numpy uint64 array of keys is read in place.
    """
