"""LRU: evict the least recently used unpinned key.

Semantics: an ``OrderedDict`` from oldest to newest. A hit moves the key to the newest end; a miss
inserts it there; the victim is the oldest. With pinning, the position of a key is the time it was
last *hit or released*: ``unpin`` re-enters at the newest end. That is exactly vLLM's free-block queue,
whose order is the release order (``free_blocks`` appends, ``touch`` removes).
No parameters.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from wakman.policies.base import EvictionPolicy, Key


class LRU(EvictionPolicy):
    name = "lru"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._order: OrderedDict[Key, None] = OrderedDict()  # evictable keys, oldest first

    def __contains__(self, key: object) -> bool:
        return key in self._order or key in self._pinned

    def __len__(self) -> int:
        return len(self._order) + len(self._pinned)

    def replay(self, keys: Iterable[Key]) -> int:
        if self._pinned:
            return super().replay(keys)
        order, capacity, hits = self._order, self.capacity, 0
        move, pop = order.move_to_end, order.popitem
        for key in keys:
            if key in order:
                move(key)
                hits += 1
            else:
                if len(order) >= capacity:
                    pop(False)
                order[key] = None
        return hits

    # pin/unpin without the generic hooks' dispatch: the vLLM free queue's hot path
    def pin(self, key: Key) -> None:
        if key not in self._pinned:
            del self._order[key]
            self._pinned[key] = None

    def insert_pinned(self, key: Key) -> None:
        self._pinned[key] = None

    hit_pin = pin  # a hit's move is undone by the pin: only pin

    def unpin(self, key: Key) -> None:
        del self._pinned[key]
        self._order[key] = None

    def hit_pin_many(self, keys: Iterable[Key]) -> None:
        pinned, order = self._pinned, self._order
        for key in keys:
            if key not in pinned:
                del order[key]
                pinned[key] = None

    def unpin_many(self, keys: Iterable[Key]) -> None:
        pinned, order = self._pinned, self._order
        for key in keys:
            del pinned[key]
            order[key] = None

    def evict_many(self, n: int) -> list[Key]:
        if n > len(self._order):
            return super().evict_many(n)  # raises NoEvictableKey
        pop = self._order.popitem
        return [pop(False)[0] for _ in range(n)]

    def eviction_order(self) -> list[Key]:
        return list(self._order)

    def _insert(self, key: Key) -> None:
        self._order[key] = None

    def _hit(self, key: Key) -> None:
        self._order.move_to_end(key)

    def _evict(self) -> Key:
        return self._order.popitem(False)[0]

    def _detach(self, key: Key) -> None:
        del self._order[key]

    def _attach(self, key: Key, meta: None) -> None:
        self._order[key] = None

    def _insert_pinned(self, key: Key) -> None:
        return None

    def _clear(self) -> None:
        self._order.clear()
