"""A block pool that mirrors vLLM 0.32's ``BlockPool`` + free queue, keyed by block hash.

Physical blocks are fungible for hit rates, so the pool counts them instead of naming them:

- ``blank``: free blocks holding no hash (handed out first, like vLLM's ``prepend_n``);
- cached blocks: one per key, tracked by the eviction ``policy``; a cached block is *pinned* while
  running requests reference it (``refs[key] > 0``) and *evictable* otherwise (vLLM: in the free
  queue with its hash). The policy only orders; the pool owns capacity;
- ``uncached_in_use``: blocks held by running requests without a hash (a partial last block, a
  decode block whose key the trace does not know, a recomputed block whose key is already cached).

Per cached key the pool keeps ``refs`` (running requests holding it) and its parent key (the
previous block of its chain, for ``stranded``); the pool's cached keys are exactly the policy's
resident keys, so a lookup (``longest_hit``) is the core's one first-miss rule
(``wakman._core.cached_prefix``) on the policy.

Invariants (``check``): ``blank + len(policy) + uncached_in_use == capacity``; ``free = blank +
policy.num_evictable``; a key is pinned in the policy iff ``refs[key] > 0``; the pool's keys are
exactly the policy's keys (``cache`` adds a key, only ``allocate``'s victims leave).

Admission of a request (``admit``, vLLM's lookup, ``touch``, ``allocate``, ``cache``): the longest
cached prefix of its full prompt blocks hits (at most ``max_hit`` blocks); if the blocks it needs
(the new ones plus the hit ones that are now free) exceed ``free``, nothing happens. Otherwise, in
libCacheSim's order: ``policy.miss(key)`` for each full prompt key after the hit prefix that is not
cached (a ghost hit is seen before any eviction), then the hits are touched, the new blocks
allocated (evicting), and the new full blocks cached, each pinned by the request.

vLLM keeps a second physical copy when a request recomputes a block whose hash is still cached
(only possible for a stranded block: lookups stop at the first miss). Here the new block takes the
key over and the stale copy becomes blank, which frees the same capacity and keeps the key cached.
"""

from __future__ import annotations

from wakman import _core

PoolExhausted = _core.PoolExhausted  # no free block (blank or evictable) is left; a RuntimeError
PoolInvariantError = _core.PoolInvariantError  # ``check`` found a broken invariant; an AssertionError


class BlockPool(_core.BlockPool):
    """The pool above (the core's ``BlockPool``, ``core/block_pool.hpp``), over any policy.

    Blocks in ``capacity``, ``blank``, ``uncached_in_use``, ``free``; ``evictions`` counts victims.
    Per block: ``longest_hit(keys, limit)``, ``evictable_among(keys)``, ``touch(keys)``,
    ``allocate(n)``, ``cache(key, parent)`` (-> the key held, or None), ``cache_run(keys, start,
    stop)``, ``release(held)`` (a request's blocks as keys, None for anonymous ones). Per request
    (serve mode; the pool keeps each run's held blocks): ``admit(run, keys, max_hit, total, full)``
    (the hit blocks, or -1 if it does not fit; the misses come before the evictions),
    ``fill_last(run, key, parent)``, ``extend(run)``, ``release_run(run)``, ``held(run)``.
    ``replace_policy(policy)`` swaps the policy (it must already hold the cached keys and pins:
    ``handover``); ``stranded()``; ``check()`` raises ``PoolInvariantError``. Keys are ints or
    numpy 8-byte integers; a numpy uint64 array of keys is read in place.
    """
