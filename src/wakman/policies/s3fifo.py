"""S3-FIFO (Yang et al., SOSP 2023), exactly as libCacheSim implements it.

Semantics (C = capacity in blocks):
- small FIFO S of ``int(small_ratio * C)`` blocks, main FIFO M of ``C - |S|`` blocks with a frequency
  counter, ghost FIFO G of ``int(ghost_ratio * C)`` keys (keys only).
- hit: ``freq += 1`` (in S or M).
- miss on a key in G: drop it from G, insert into M with freq 0; any other miss inserts into S with
  freq 0, except (variant ``s3fifo`` only, libCacheSim ``S3FIFO``) while nothing has been evicted yet and S
  is full, when new keys go to M. ``s3fifo-v0`` (libCacheSim ``S3FIFOv0``, the SOSP artifact) has no
  such warm-up rule.
- evict: from M when ``|M| > C - |S|`` or S is empty, else from S.
  S's oldest with ``freq >= promote_threshold`` moves to M (freq 0) and the scan goes on; otherwise it
  is evicted and its key enters G. M's oldest with ``freq >= 1`` is reinserted at M's head with
  ``min(freq, freq_cap) - 1``; otherwise it is evicted.

Pinning: a pinned block leaves its queue, keeping its segment and frequency; ``unpin`` puts it at
the head (newest end) of that queue. Segment sizes count pinned blocks. ``adopt`` (policy switch)
puts inherited blocks in M, oldest first, freq 0; S and G start empty.

Edge case: libCacheSim refuses to insert anything when ``int(small_ratio * C) <= 1``; here S may be
that small and blocks are still inserted, so exact agreement needs ``C >= 2 / small_ratio``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from wakman.policies.base import EvictionPolicy, Key

SMALL_RATIO = 0.10
GHOST_RATIO = 0.90
PROMOTE_THRESHOLD = 2
FREQ_CAP = 3


class S3FIFO(EvictionPolicy):
    name = "s3fifo"

    def __init__(
        self,
        capacity: int,
        small_ratio: float = SMALL_RATIO,
        ghost_ratio: float = GHOST_RATIO,
        promote_threshold: int = PROMOTE_THRESHOLD,
        freq_cap: int = FREQ_CAP,
        warmup_to_main: bool = True,
    ) -> None:
        super().__init__(capacity)
        if not 0 <= small_ratio < 1 or ghost_ratio < 0 or promote_threshold < 1 or freq_cap < 1:
            raise ValueError("s3fifo: need 0 <= small_ratio < 1, ghost_ratio >= 0, threshold and cap >= 1")
        self.small_ratio, self.ghost_ratio = small_ratio, ghost_ratio
        self.promote_threshold, self.freq_cap, self.warmup_to_main = (
            promote_threshold,
            freq_cap,
            warmup_to_main,
        )
        self.small_capacity = int(capacity * small_ratio)
        self.main_capacity = capacity - self.small_capacity
        self.ghost_capacity = int(capacity * ghost_ratio)
        self._small: OrderedDict[Key, int] = OrderedDict()  # evictable, oldest first: key -> freq
        self._main: OrderedDict[Key, int] = OrderedDict()
        self._ghost: OrderedDict[Key, None] = OrderedDict()
        self._small_pinned = 0  # pinned blocks whose segment is S (count toward |S|)
        self._has_evicted = False

    def __contains__(self, key: object) -> bool:
        return key in self._small or key in self._main or key in self._pinned

    def __len__(self) -> int:
        return len(self._small) + len(self._main) + len(self._pinned)

    def in_ghost(self, key: Key) -> bool:
        return key in self._ghost

    # ------------------------------------------------------------ shadow fast path
    def access(self, key: Key) -> bool:
        if self._pinned:
            return super().access(key)
        return self.replay((key,)) == 1

    def replay(self, keys: Iterable[Key]) -> int:
        if self._pinned:
            return super().replay(keys)
        small, main, ghost, evict = self._small, self._main, self._ghost, self._evict
        capacity, hits = self.capacity, 0
        for key in keys:
            # A resident key is never in the ghost, so testing M first is libCacheSim's order too.
            if key in main:
                main[key] += 1
                hits += 1
                continue
            if key in small:
                small[key] += 1
                hits += 1
                continue
            in_ghost = key in ghost
            if in_ghost:
                del ghost[key]
            while len(small) + len(main) >= capacity:
                evict()
            if in_ghost or (
                self.warmup_to_main and not self._has_evicted and len(small) >= self.small_capacity
            ):
                main[key] = 0
            else:
                small[key] = 0
        return hits

    # ------------------------------------------------------------ hooks
    def _insert(self, key: Key) -> None:
        if key in self._ghost:
            del self._ghost[key]
            self._main[key] = 0
        elif (
            self.warmup_to_main
            and not self._has_evicted
            and len(self._small) + self._small_pinned >= self.small_capacity
        ):
            self._main[key] = 0
        else:
            self._small[key] = 0

    def _hit(self, key: Key) -> None:
        if key in self._small:
            self._small[key] += 1
        else:
            self._main[key] += 1

    def _hit_pinned(self, key: Key, meta: tuple[bool, int]) -> tuple[bool, int]:
        return meta[0], meta[1] + 1

    def _evict(self) -> Key:
        self._has_evicted = True
        small, main = self._small, self._main
        while True:
            main_resident = len(main) + len(self._pinned) - self._small_pinned
            if main and (main_resident > self.main_capacity or not small):
                return self._evict_main()
            victim = self._evict_small() if small else self._evict_main()
            if victim is not None:
                return victim

    def _evict_small(self) -> Key | None:
        small, main, threshold = self._small, self._main, self.promote_threshold
        while small:
            key, freq = small.popitem(False)
            if freq >= threshold:
                main[key] = 0
            else:
                if self.ghost_capacity > 0 and key not in self._ghost:
                    if len(self._ghost) >= self.ghost_capacity:
                        self._ghost.popitem(False)
                    self._ghost[key] = None
                return key
        return None

    def _evict_main(self) -> Key:
        main, cap = self._main, self.freq_cap
        while True:
            key, freq = main.popitem(False)
            if freq < 1:
                return key
            main[key] = min(freq, cap) - 1

    def hit_pin(self, key: Key) -> None:  # hit then pin, one call (the pools' hot path)
        pinned = self._pinned
        if key in pinned:
            in_main, freq = pinned[key]
            pinned[key] = (in_main, freq + 1)
        elif key in self._small:
            self._small_pinned += 1
            pinned[key] = (False, self._small.pop(key) + 1)
        else:
            pinned[key] = (True, self._main.pop(key) + 1)

    def _detach(self, key: Key) -> tuple[bool, int]:
        if key in self._small:
            self._small_pinned += 1
            return False, self._small.pop(key)
        return True, self._main.pop(key)

    def _attach(self, key: Key, meta: tuple[bool, int]) -> None:
        in_main, freq = meta
        if in_main:
            self._main[key] = freq
        else:
            self._small_pinned -= 1
            self._small[key] = freq

    def adopt(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self._main[key] = 0

    def eviction_order(self) -> list[Key]:
        return [*self._small, *self._main]

    def _clear(self) -> None:
        self._small.clear()
        self._main.clear()
        self._ghost.clear()
        self._small_pinned = 0
        self._has_evicted = False


class S3FIFOv0(S3FIFO):
    """The SOSP artifact (libCacheSim ``S3FIFOv0``): no warm-up rule."""

    name = "s3fifo-v0"

    def __init__(self, capacity: int, **params: float) -> None:
        params.setdefault("warmup_to_main", False)
        super().__init__(capacity, **params)
