"""ARC (Megiddo and Modha, FAST 2003), exactly as libCacheSim (current ``ARC.c``) implements it.

Semantics (C = capacity): T1 (seen once) and T2 (seen twice or more) hold keys in LRU order; ghosts
B1 and B2 hold evicted keys; ``p`` (a float) is T1's target size.
- hit in T1 or T2: move to T2's MRU end.
- miss found in B1: ``p = min(p + max(|B2| / |B1|, 1), C)``; found in B2: ``p = max(p - max(|B1| / |B2|,
  1), 0)`` (sizes before the key leaves its ghost); the key leaves the ghost, REPLACE runs while the
  cache is full, and the key enters T2's MRU end.
- other miss while full: if ``|T1| + |B1| >= C``: drop B1's LRU key and REPLACE when B1 is not empty,
  else evict T1's LRU key outright; otherwise drop B2's LRU key when ``|T1|+|T2|+|B1|+|B2| >= 2C``,
  then REPLACE. The new key enters T1's MRU end.
- REPLACE: if (``|T1| > 0`` and (``|T1| > p`` or (``|T1| == p`` and the key was in B2))) or ``|T2| == 0``,
  move T1's LRU key to B1's MRU end, else move T2's LRU key to B2's MRU end.

Pinning: pinned keys leave T1/T2 (sizes still count them); ``unpin`` re-enters at the MRU end of the
same list; when the list REPLACE picks has no unpinned key the other one is used. In the pool a ghost
hit adapts ``p`` at ``insert`` and the pool's eviction (made before the insert) is the plain-miss case.
No parameters.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from wakman.policies.base import EvictionPolicy, Key


class ARC(EvictionPolicy):
    name = "arc"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._t1: OrderedDict[Key, None] = OrderedDict()  # evictable, LRU first
        self._t2: OrderedDict[Key, None] = OrderedDict()
        self._b1: OrderedDict[Key, None] = OrderedDict()  # ghosts, LRU first
        self._b2: OrderedDict[Key, None] = OrderedDict()
        self._t1_pinned = 0
        self.p = 0.0

    def __contains__(self, key: object) -> bool:
        return key in self._t1 or key in self._t2 or key in self._pinned

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2) + len(self._pinned)

    def _t1_size(self) -> int:
        return len(self._t1) + self._t1_pinned

    def access(self, key: Key) -> bool:
        if key in self:
            self.hit(key)
            return True
        ghost = 0
        if key in self._b1 or key in self._b2:
            ghost = 2 if self._adapt(key) else 1
        while len(self) >= self.capacity:
            if ghost and self.num_evictable:
                self._replace(ghost == 2)
            else:
                self.evict()
        (self._t2 if ghost else self._t1)[key] = None
        return False

    def replay(self, keys: Iterable[Key]) -> int:
        access = self.access
        return sum(1 for key in keys if access(key))

    def _adapt(self, key: Key) -> bool:
        """Ghost hit: move ``p`` and drop the key from its ghost. Returns True if it was in B2."""
        b1, b2 = len(self._b1), len(self._b2)
        if key in self._b1:
            self.p = min(self.p + max(b2 / b1, 1.0), float(self.capacity))
            del self._b1[key]
            return False
        self.p = max(self.p - max(b1 / b2, 1.0), 0.0)
        del self._b2[key]
        return True

    def _replace(self, in_b2: bool) -> Key:
        t1 = self._t1_size()
        take_t1 = (t1 > 0 and (t1 > self.p or (t1 == self.p and in_b2))) or len(self) == t1
        if (take_t1 and self._t1) or not self._t2:
            key = self._t1.popitem(False)[0]
            self._b1[key] = None
        else:
            key = self._t2.popitem(False)[0]
            self._b2[key] = None
        return key

    def _evict(self) -> Key:
        if self._t1_size() + len(self._b1) + 1 > self.capacity:
            if self._b1:
                self._b1.popitem(False)
                return self._replace(False)
            if self._t1:
                return self._t1.popitem(False)[0]
            return self._replace(False)
        if len(self) + len(self._b1) + len(self._b2) >= 2 * self.capacity and self._b2:
            self._b2.popitem(False)
        return self._replace(False)

    def _insert(self, key: Key) -> None:
        if key in self._b1 or key in self._b2:
            self._adapt(key)
            self._t2[key] = None
        else:
            self._t1[key] = None

    def _hit(self, key: Key) -> None:
        if key in self._t1:
            del self._t1[key]
            self._t2[key] = None
        else:
            self._t2.move_to_end(key)

    def _hit_pinned(self, key: Key, meta: int) -> int:
        if meta == 1:
            self._t1_pinned -= 1
        return 2

    def _detach(self, key: Key) -> int:
        if key in self._t1:
            del self._t1[key]
            self._t1_pinned += 1
            return 1
        del self._t2[key]
        return 2

    def _attach(self, key: Key, meta: int) -> None:
        if meta == 1:
            self._t1_pinned -= 1
            self._t1[key] = None
        else:
            self._t2[key] = None

    def eviction_order(self) -> list[Key]:
        return [*self._t1, *self._t2]

    def _clear(self) -> None:
        for lst in (self._t1, self._t2, self._b1, self._b2):
            lst.clear()
        self._t1_pinned = 0
        self.p = 0.0
