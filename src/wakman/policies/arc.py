"""ARC (Megiddo and Modha, FAST 2003), exactly as libCacheSim (current ``ARC.c``) implements it.

Semantics (C = capacity): T1 (seen once) and T2 (seen twice or more) hold keys in LRU order; ghosts
B1 and B2 hold evicted keys; ``p`` (a float) is T1's target size.
- hit in T1 or T2: move to T2's MRU end (a pinned key moves from T1 to T2's segment).
- ``miss`` found in B1: ``p = min(p + max(|B2| / |B1|, 1), C)``; found in B2: ``p = max(p - max(|B1| /
  |B2|, 1), 0)`` (sizes before the key leaves its ghost); the key leaves the ghost, every eviction
  until its insert is a REPLACE, and the insert puts it at T2's MRU end. A ghost key inserted without
  a ``miss`` first adapts ``p`` at the insert.
- eviction after any other miss: if ``|T1| + |B1| >= C``: drop B1's LRU key and REPLACE when B1 is not
  empty, else evict T1's LRU key outright; otherwise drop B2's LRU key when ``|T1|+|T2|+|B1|+|B2| >=
  2C``, then REPLACE. The new key enters T1's MRU end.
- REPLACE: if (``|T1| > 0`` and (``|T1| > p`` or (``|T1| == p`` and the key was in B2))) or ``|T2| == 0``,
  move T1's LRU key to B1's MRU end, else move T2's LRU key to B2's MRU end.

Pinning: pinned keys leave T1/T2 (sizes still count them); ``unpin`` re-enters at the MRU end of the
same list; when the list REPLACE picks has no unpinned key the other one is used. ``adopt`` puts
inherited keys in T1, oldest first (a key it knows, resident or ghost, is refused). ``remove``
forgets a key without a ghost; ``evict_key`` (the host's eviction of a given key) leaves the
directory as an eviction of that key would: the trim above first (outside a pending ghost hit:
``|T1| + |B1| >= C`` drops B1's LRU key, or, B1 empty, a key from T1 leaves outright, without a
ghost; else a directory of 2C drops B2's LRU key), then T1 to B1's MRU end or T2 to B2's, as REPLACE
does, ``p`` unchanged: ``evict_key`` of the first victim is ``evict()``, and with one miss per
insert the directory stays within its bounds however the host makes room (it grew by one ghost per
``evict_key``). Batched misses (below) can take it past 2C under ``evict()`` alone, as they could
before.
Batched misses (the pools report every missed key of an admission, then evict, then insert): the
REPLACE flag is the last ``miss``'s, so a ghost hit governs the evictions that follow only when its
miss comes last; an insert clears it. No parameters.
"""

from __future__ import annotations

from wakman import _core


class ARC(_core.ARC):
    name = "arc"
