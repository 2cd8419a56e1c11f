"""FIFO: evict the unpinned key that entered the order first; hits change nothing.

Semantics: an ``OrderedDict`` from oldest to newest insertion. With pinning, ``unpin`` re-enters at
the newest end, so a block's age counts from its last release (in a pool where every hit pins, FIFO
then orders by release time like LRU; in shadow replay it is plain FIFO). No parameters.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from wakman.policies.base import Key
from wakman.policies.lru import LRU


class FIFO(LRU):
    name = "fifo"

    def replay(self, keys: Iterable[Key]) -> int:
        if self._pinned:
            return super(LRU, self).replay(keys)
        order: OrderedDict[Key, None] = self._order
        capacity, hits, pop = self.capacity, 0, order.popitem
        for key in keys:
            if key in order:
                hits += 1
            else:
                if len(order) >= capacity:
                    pop(False)
                order[key] = None
        return hits

    def _hit(self, key: Key) -> None:
        pass
