"""Infinite: the ceiling. Never evicts; every key once seen stays resident.

``capacity`` is accepted for a uniform interface and ignored. ``evict`` raises ``NoEvictableKey``:
a pool using this policy must itself be unbounded.
"""

from __future__ import annotations

from collections.abc import Iterable

from wakman.policies.base import EvictionPolicy, Key, NoEvictableKey


class Infinite(EvictionPolicy):
    name = "infinite"

    def __init__(self, capacity: int = 1) -> None:
        super().__init__(max(1, int(capacity)))
        self._keys: dict[Key, None] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._keys or key in self._pinned

    def __len__(self) -> int:
        return len(self._keys) + len(self._pinned)

    def access(self, key: Key) -> bool:
        if key in self:
            return True
        self._keys[key] = None
        return False

    def replay(self, keys: Iterable[Key]) -> int:
        seen, hits = self._keys, 0
        for key in keys:
            if key in seen:
                hits += 1
            else:
                seen[key] = None
        return hits

    def evict(self) -> Key:
        raise NoEvictableKey("infinite: never evicts")

    def eviction_order(self) -> list[Key]:
        return list(self._keys)

    def _insert(self, key: Key) -> None:
        self._keys[key] = None

    def _hit(self, key: Key) -> None:
        pass

    def _evict(self) -> Key:
        raise NoEvictableKey("infinite: never evicts")

    def _detach(self, key: Key) -> None:
        del self._keys[key]

    def _attach(self, key: Key, meta: None) -> None:
        self._keys[key] = None

    def _clear(self) -> None:
        self._keys.clear()
