"""SIEVE (Zhang et al., NSDI 2024), exactly as libCacheSim implements it.

Semantics: one queue from tail (oldest) to head (newest); new keys enter at the head with
``visited = 0``; a hit sets ``visited = 1`` and moves nothing. The hand walks from the tail towards the
head clearing visited bits, wraps to the tail past the head, and evicts the first key with
``visited == 0``; it then rests on that key's newer neighbour (on the tail if it evicted the head).

Representation: the queue is split at the hand into ``_behind`` (tail .. hand, exclusive) and
``_ahead`` (hand .. head), both oldest first, so every step is an O(1) ``OrderedDict`` operation.
Pinning: a pinned key leaves the queue keeping its bit; ``unpin`` re-enters at the head.
No parameters.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from wakman.policies.base import EvictionPolicy, Key


class Sieve(EvictionPolicy):
    name = "sieve"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._ahead: OrderedDict[Key, int] = OrderedDict()  # hand .. head: key -> visited
        self._behind: OrderedDict[Key, int] = OrderedDict()  # tail .. hand (already swept)

    def __contains__(self, key: object) -> bool:
        return key in self._ahead or key in self._behind or key in self._pinned

    def __len__(self) -> int:
        return len(self._ahead) + len(self._behind) + len(self._pinned)

    def replay(self, keys: Iterable[Key]) -> int:
        if self._pinned:
            return super().replay(keys)
        capacity, hits, evict = self.capacity, 0, self._evict
        for key in keys:
            ahead, behind = self._ahead, self._behind
            if key in ahead:
                ahead[key] = 1
                hits += 1
            elif key in behind:
                behind[key] = 1
                hits += 1
            else:
                if len(ahead) + len(behind) >= capacity:
                    evict()
                self._ahead[key] = 0
        return hits

    def _insert(self, key: Key) -> None:
        self._ahead[key] = 0

    def _hit(self, key: Key) -> None:
        if key in self._ahead:
            self._ahead[key] = 1
        else:
            self._behind[key] = 1

    def _evict(self) -> Key:
        while True:
            if not self._ahead:  # the hand passed the head: wrap to the tail
                self._ahead, self._behind = self._behind, self._ahead
            key, visited = self._ahead.popitem(False)
            if not visited:
                if not self._ahead:  # evicted the head: the hand restarts from the tail
                    self._ahead, self._behind = self._behind, self._ahead
                return key
            self._behind[key] = 0

    def _detach(self, key: Key) -> int:
        return self._ahead.pop(key) if key in self._ahead else self._behind.pop(key)

    def _attach(self, key: Key, meta: int) -> None:
        self._ahead[key] = meta

    def eviction_order(self) -> list[Key]:
        return [*self._ahead, *self._behind]

    def _clear(self) -> None:
        self._ahead.clear()
        self._behind.clear()
