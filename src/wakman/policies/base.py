"""The one interface every eviction policy implements.

A policy orders the *resident* keys of a cache (block hashes, in KV-cache terms) and picks victims.
It serves three callers with the same object:

1. **Shadow replay** (fast path): ``access(key) -> bool`` and ``replay(keys) -> hits``. A hit updates
   the policy; a miss evicts while ``len(self) >= capacity`` and inserts the key. No pinning.
2. **A block pool with pinning** (the simulator): the pool calls ``insert`` when a block gets its
   hash, ``hit`` when a lookup finds a cached block (pinned or not), ``pin``/``unpin`` when the
   block's reference count leaves/reaches zero, and ``evict`` when it needs a free block. The pool
   owns capacity; the policy only orders.
3. **vLLM's free-block queue** (the vLLM integration): the same calls, made from the block pool.

Pinning rule (the same for every policy): a pinned key leaves the eviction order and keeps its
metadata (frequency, segment, visited bit, ...); ``unpin`` puts it back at the policy's *newest*
position of its segment. ``evict`` only ever returns an unpinned key and never fails while one exists
(``NoEvictableKey`` otherwise). Ghost entries are keyed by the key itself (the block hash), never by a
block id.

Invariants, checked by the property tests:
- ``len(self) == num_evictable + num_pinned``; a key is resident iff ``key in self``;
- ``evict`` returns a resident, unpinned key and removes it;
- ``handover(src, dst)`` leaves ``dst`` with exactly ``src``'s resident and pinned keys.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from typing import Any, ClassVar

Key = Hashable


class NoEvictableKey(LookupError):
    """Raised by ``evict`` when every resident key is pinned (or the cache is empty)."""


class EvictionPolicy(ABC):
    """Base class: pin bookkeeping, the generic shadow path and hand-over.

    Subclasses implement the eviction order through a handful of hooks, each O(1) amortised:
    ``_insert`` (new evictable key), ``_hit`` (hit on an evictable key), ``_evict`` (pick and remove a
    victim among evictable keys), ``_detach``/``_attach`` (leave/re-enter the order when pinned/unpinned),
    ``_hit_pinned`` (update a pinned key's metadata), ``_clear`` and ``eviction_order``.
    """

    name: ClassVar[str] = "policy"

    def __init__(self, capacity: int) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"{self.name}: capacity must be a positive number of blocks, got {capacity!r}")
        self.capacity = capacity
        self._pinned: dict[Key, Any] = {}  # pinned key -> metadata kept while out of the order

    # ------------------------------------------------------------------ shadow path
    def access(self, key: Key) -> bool:
        """Look ``key`` up; True on a hit. A miss evicts while full, then inserts ``key``."""
        if key in self:
            self.hit(key)
            return True
        while len(self) >= self.capacity:
            self.evict()
        self.insert(key)
        return False

    def replay(self, keys: Iterable[Key]) -> int:
        """Access every key in order; return the number of hits."""
        access = self.access
        return sum(1 for key in keys if access(key))

    # ------------------------------------------------------------------ pool path
    def insert(self, key: Key, pinned: bool = False) -> None:
        """A new key becomes resident (the caller made room). ``pinned``: in use by a request."""
        if pinned:
            self._pinned[key] = self._insert_pinned(key)
        else:
            self._insert(key)

    def insert_pinned(self, key: Key) -> None:
        """``insert(key, pinned=True)``: the vLLM pool's call for a block cached while in use."""
        self._pinned[key] = self._insert_pinned(key)

    def hit(self, key: Key) -> None:
        """A lookup found resident ``key`` (pinned or not)."""
        if key in self._pinned:
            self._pinned[key] = self._hit_pinned(key, self._pinned[key])
        else:
            self._hit(key)

    def pin(self, key: Key) -> None:
        """``key`` is in use: it leaves the eviction order until ``unpin``. Idempotent."""
        if key not in self._pinned:
            self._pinned[key] = self._detach(key)

    def hit_pin(self, key: Key) -> None:
        """A prefix hit that also takes the key into use: ``hit`` then ``pin`` (one call on the
        vLLM pool's hot path; policies may fuse the two)."""
        self.hit(key)
        self.pin(key)

    def unpin(self, key: Key) -> None:
        """``key`` is free again: it re-enters the order at its segment's newest position."""
        self._attach(key, self._pinned.pop(key))

    def hit_pin_many(self, keys: Iterable[Key]) -> None:
        """``hit_pin`` each key in order (a request's prefix hits on free blocks, in one call)."""
        hit_pin = self.hit_pin
        for key in keys:
            hit_pin(key)

    def unpin_many(self, keys: Iterable[Key]) -> None:
        """``unpin`` each key in order (the vLLM pool frees a request's blocks in one call)."""
        unpin = self.unpin
        for key in keys:
            unpin(key)

    def evict(self) -> Key:
        """Remove and return a victim among the unpinned keys."""
        if self.num_evictable == 0:
            raise NoEvictableKey(f"{self.name}: no unpinned key to evict ({len(self._pinned)} pinned)")
        return self._evict()

    def evict_many(self, n: int) -> list[Key]:
        """``n`` victims at once (the caller's hot path): one check, then the policy's own hook."""
        if n > self.num_evictable:
            raise NoEvictableKey(f"{self.name}: {n} victims asked, {self.num_evictable} unpinned")
        evict = self._evict
        return [evict() for _ in range(n)]

    def reset(self) -> None:
        """Forget everything: resident keys, pins, ghosts and adaptive state."""
        self._pinned.clear()
        self._clear()

    def discard(self, key: Key) -> None:
        """Drop resident ``key`` outside eviction (vLLM: a connector or a hash promotion removed it).

        Rare path, O(resident keys): the order is rebuilt without ``key`` through ``adopt``, so the
        other keys keep their order but lose policy metadata (frequencies, segments, ghosts)."""
        if key not in self:
            return
        pinned = [k for k in self._pinned if k != key]
        order = [k for k in self.eviction_order() if k != key]
        self.reset()
        self.adopt(order)
        for k in pinned:
            self.insert(k, pinned=True)

    def adopt(self, keys: Iterable[Key]) -> None:
        """Take over unpinned ``keys`` given oldest (first victim) first; used by ``handover``."""
        for key in keys:
            self._insert(key)

    def is_pinned(self, key: Key) -> bool:
        return key in self._pinned

    @property
    def num_pinned(self) -> int:
        return len(self._pinned)

    @property
    def num_evictable(self) -> int:
        return len(self) - len(self._pinned)

    def pinned_keys(self) -> list[Key]:
        return list(self._pinned)

    # ------------------------------------------------------------------ hooks
    @abstractmethod
    def __contains__(self, key: object) -> bool: ...

    @abstractmethod
    def __len__(self) -> int:
        """Resident keys, pinned ones included."""

    @abstractmethod
    def eviction_order(self) -> list[Key]:
        """Unpinned keys, likeliest victim first (exact for LRU/FIFO, best effort otherwise)."""

    @abstractmethod
    def _insert(self, key: Key) -> None: ...

    @abstractmethod
    def _hit(self, key: Key) -> None: ...

    @abstractmethod
    def _evict(self) -> Key: ...

    @abstractmethod
    def _detach(self, key: Key) -> Any: ...

    @abstractmethod
    def _attach(self, key: Key, meta: Any) -> None: ...

    def _hit_pinned(self, key: Key, meta: Any) -> Any:
        return meta

    def _insert_pinned(self, key: Key) -> Any:
        """Metadata of a key inserted already pinned (default: insert, then detach)."""
        self._insert(key)
        return self._detach(key)

    @abstractmethod
    def _clear(self) -> None: ...

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self.capacity}, resident={len(self)}, pinned={self.num_pinned})"
        )


def handover(src: EvictionPolicy, dst: EvictionPolicy) -> EvictionPolicy:
    """Move ``src``'s cached blocks into ``dst`` (reset first): O(resident keys), nothing lost.

    The unpinned keys enter ``dst`` in ``src``'s eviction order (first victim first) through
    ``dst.adopt``; pinned keys are inserted pinned. ``src``'s ghosts and counters are not carried
    (switching S3-FIFO -> LRU discards the ghost queue). ``src`` is left untouched.
    """
    dst.reset()
    dst.adopt(src.eviction_order())
    for key in src.pinned_keys():
        dst.insert(key, pinned=True)
    return dst
