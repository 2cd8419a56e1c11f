"""A block pool that mirrors vLLM 0.32's ``BlockPool`` + free queue, keyed by block hash.

Physical blocks are fungible for hit rates, so the pool counts them instead of naming them:

- ``blank``: free blocks holding no hash (handed out first, like vLLM's ``prepend_n``);
- cached blocks: one per key, tracked by the eviction ``policy``; a cached block is *pinned* while
  running requests reference it (``refs[key] > 0``) and *evictable* otherwise (vLLM: in the free
  queue with its hash). The policy only orders; the pool owns capacity;
- ``uncached_in_use``: blocks held by running requests without a hash (a partial last block, a
  decode block whose key the trace does not know, a recomputed block whose key is already cached).

Invariants (``check``): ``blank + len(policy) + uncached_in_use == capacity``; ``free = blank +
policy.num_evictable``; a key is pinned in the policy iff ``refs[key] > 0``; ``parent``'s keys are
exactly the policy's keys (a plain dict, so that prefix lookups run at C speed: ``cache`` adds a key,
only ``allocate``'s victims leave).

vLLM keeps a second physical copy when a request recomputes a block whose hash is still cached
(only possible for a stranded block: lookups stop at the first miss). Here the new block takes the
key over and the stale copy becomes blank, which frees the same capacity and keeps the key cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice, takewhile

from wakman.policies import EvictionPolicy, Key, NoEvictableKey


class PoolExhausted(RuntimeError):
    """No free block (blank or evictable) is left."""


class BlockPool:
    def __init__(self, capacity: int, policy: EvictionPolicy) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 block, got {capacity}")
        self.capacity = capacity
        self.policy = policy
        self.blank = capacity
        self.uncached_in_use = 0
        self.refs: dict[Key, int] = {}
        self.evictions = 0
        self.parent: dict[Key, Key | None] = {}  # every cached key -> previous key of its chain

    # ------------------------------------------------------------------ queries
    @property
    def free(self) -> int:
        return self.blank + self.policy.num_evictable

    def cached(self, key: Key) -> bool:
        return key in self.parent

    def longest_hit(self, keys: Sequence[Key], limit: int) -> int:
        """Blocks of the longest cached prefix of ``keys[:limit]`` (stops at the first miss)."""
        return sum(1 for _ in takewhile(self.parent.__contains__, islice(keys, limit)))

    def evictable_among(self, keys: Sequence[Key]) -> int:
        """How many of these cached ``keys`` are free (no reference): admitting them uses them up."""
        return len(keys) - sum(map(self.refs.__contains__, keys))

    # ------------------------------------------------------------------ life cycle
    def touch(self, keys: Sequence[Key]) -> None:
        """Hits: each block is a policy hit, then pinned by one more reference (vLLM ``touch``)."""
        refs = self.refs
        hit, hit_pin = self.policy.hit, self.policy.hit_pin
        for key in keys:
            count = refs.get(key, 0)
            if count == 0:
                hit_pin(key)
            else:
                hit(key)
            refs[key] = count + 1

    def allocate(self, n: int) -> None:
        """Take ``n`` free blocks: blank ones first, then the policy's victims (evicted now)."""
        if n > self.free:
            raise PoolExhausted(f"need {n} blocks, {self.free} free")
        from_blank = min(n, self.blank)
        self.blank -= from_blank
        if n > from_blank:
            try:
                victims = self.policy.evict_many(n - from_blank)
            except NoEvictableKey as exc:  # pragma: no cover - guarded by the check above
                raise PoolExhausted(str(exc)) from exc
            parent = self.parent
            for victim in victims:
                del parent[victim]
            self.evictions += len(victims)
        self.uncached_in_use += n

    def cache(self, key: Key | None, parent: Key | None) -> Key | None:
        """A held, uncached block became full with ``key``: register it (pinned by its request).

        Returns the key now held by the request, or None if the block stays uncached (no key, or
        the key is cached and pinned by someone else)."""
        if key is None:
            return None
        policy, refs = self.policy, self.refs
        count = refs.get(key, 0)
        if key in self.parent:
            if count > 0:
                return None  # another request holds the cached copy: this block stays anonymous
            policy.pin(key)  # take the key over; the stale copy becomes blank
            self.blank += 1
        else:
            policy.insert_pinned(key)
            self.parent[key] = parent
        self.uncached_in_use -= 1
        refs[key] = count + 1
        return key

    def release(self, held: Sequence[Key | None]) -> None:
        """A request frees its blocks, deepest first (vLLM frees ``reversed(blocks)``)."""
        refs = self.refs
        freed = []
        for key in reversed(held):
            if key is None:
                self.uncached_in_use -= 1
                self.blank += 1
                continue
            count = refs[key] - 1
            if count:
                refs[key] = count
            else:
                del refs[key]
                freed.append(key)
        self.policy.unpin_many(freed)

    def replace_policy(self, policy: EvictionPolicy) -> None:
        """Swap the eviction policy (the adaptive manager's switch); the cached blocks carry over."""
        self.policy = policy

    # ------------------------------------------------------------------ diagnostics
    def stranded(self) -> int:
        """Cached blocks no lookup can reach: some ancestor of the chain is not cached."""
        return count_stranded(self.policy, self.parent)

    def check(self) -> None:
        policy = self.policy
        assert self.blank >= 0 and self.uncached_in_use >= 0
        assert self.blank + len(policy) + self.uncached_in_use == self.capacity, (
            f"blocks lost: {self.blank} blank + {len(policy)} cached + {self.uncached_in_use} "
            f"anonymous != {self.capacity}"
        )
        assert policy.num_pinned == len(self.refs)
        assert len(self.parent) == len(policy) and all(k in policy for k in self.parent)
        assert all(policy.is_pinned(k) for k in self.refs)


def count_stranded(cached, parent: dict) -> int:
    """Keys in ``cached`` with an ancestor (through ``parent``) that is not in ``cached``."""
    reachable: dict = {}
    count = 0
    for key in parent:
        if key not in cached:
            continue
        chain = []
        k = key
        ok = True
        while k is not None:
            known = reachable.get(k)
            if known is not None:
                ok = known
                break
            if k not in cached:
                ok = False
                break
            chain.append(k)
            k = parent.get(k)
        for c in chain:
            reachable[c] = ok
        if not ok:
            count += 1
    return count
