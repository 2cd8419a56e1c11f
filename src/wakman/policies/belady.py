"""Belady / MIN: evict the unpinned key whose next access is farthest in the future.

Semantics: given the whole future key sequence up front. In shadow replay the i-th ``access`` must be
``future[i]``; a key's next use is the next index holding the same key (never = infinity), computed by
one backward pass, as libCacheSim does from ``next_access_vtime``. The incoming key is always
inserted. Victims come from a max-heap on next use with lazy deletion.

Pool use: the caller moves the clock with ``seek(position)`` (accesses before ``position`` are past);
``insert``/``hit``/``unpin`` then look the key's next use up as its first occurrence at or after the
clock. With prefix caching and pinning this is a reference, not a proven optimum.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from wakman.policies.base import EvictionPolicy, Key

NEVER = 1 << 62  # next use of a key that is not accessed again


class Belady(EvictionPolicy):
    name = "belady"

    def __init__(self, capacity: int, future: Sequence[Key] | None = None) -> None:
        super().__init__(capacity)
        if future is None:
            raise ValueError("belady: needs future=, the whole key sequence it will be given, in order")
        self._future = future if isinstance(future, list) else list(future)
        nxt = [NEVER] * len(self._future)
        last: dict[Key, int] = {}
        for i in range(len(self._future) - 1, -1, -1):
            key = self._future[i]
            nxt[i] = last.get(key, NEVER)
            last[key] = i
        self._next_index = nxt
        self._occurrences: dict[Key, list[int]] | None = None  # built on first pool use
        self._clock = 0
        self._next_use: dict[Key, int] = {}  # evictable key -> next use
        self._heap: list[tuple[int, int, Key]] = []  # (-next use, tiebreak, key)
        self._tiebreak = 0

    def __contains__(self, key: object) -> bool:
        return key in self._next_use or key in self._pinned

    def __len__(self) -> int:
        return len(self._next_use) + len(self._pinned)

    def seek(self, position: int) -> None:
        """Accesses before ``position`` (an index into ``future``) are in the past."""
        self._clock = position

    def access(self, key: Key) -> bool:
        i = self._clock
        if i >= len(self._future) or self._future[i] != key:
            raise ValueError(f"belady: access #{i} is {key!r}, but future[{i}] is not that key")
        self._clock = i + 1
        hit = key in self
        if not hit:
            while len(self) >= self.capacity:
                self.evict()
        if key in self._pinned:
            self._pinned[key] = self._next_index[i]
        else:
            self._set(key, self._next_index[i])
        return hit

    def replay(self, keys: Iterable[Key]) -> int:
        access = self.access
        return sum(1 for key in keys if access(key))

    def _set(self, key: Key, next_use: int) -> None:
        self._next_use[key] = next_use
        self._tiebreak += 1
        heapq.heappush(self._heap, (-next_use, self._tiebreak, key))
        if len(self._heap) > 4 * len(self._next_use) + 1024:
            self._heap = [(-nu, i, k) for i, (k, nu) in enumerate(self._next_use.items())]
            heapq.heapify(self._heap)

    def _next_after_clock(self, key: Key) -> int:
        if self._occurrences is None:
            occ: dict[Key, list[int]] = {}
            for i, k in enumerate(self._future):
                occ.setdefault(k, []).append(i)
            self._occurrences = occ
        positions = self._occurrences.get(key)
        if not positions:
            return NEVER
        j = bisect_left(positions, self._clock)
        return positions[j] if j < len(positions) else NEVER

    def _insert(self, key: Key) -> None:
        self._set(key, self._next_after_clock(key))

    def _hit(self, key: Key) -> None:
        self._set(key, self._next_after_clock(key))

    def _hit_pinned(self, key: Key, meta: int) -> int:
        return meta

    def _evict(self) -> Key:
        heap, next_use = self._heap, self._next_use
        while True:
            neg, _, key = heapq.heappop(heap)
            if next_use.get(key) == -neg:
                del next_use[key]
                return key

    def _detach(self, key: Key) -> int:
        return self._next_use.pop(key)

    def _attach(self, key: Key, meta: int) -> None:
        self._set(key, self._next_after_clock(key) if self._occurrences is not None else meta)

    def eviction_order(self) -> list[Key]:
        return sorted(self._next_use, key=self._next_use.__getitem__, reverse=True)

    def _clear(self) -> None:
        self._next_use.clear()
        self._heap.clear()
