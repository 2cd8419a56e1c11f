"""SIEVE (Zhang et al., NSDI 2024), exactly as libCacheSim implements it.

Semantics: one queue from tail (oldest) to head (newest); new keys enter at the head with
``visited = 0``; a hit sets ``visited = 1`` (pinned or not) and moves nothing. The hand walks from the
tail towards the head clearing visited bits, wraps to the tail past the head, and evicts the first
key with ``visited == 0``; it then rests on that key's newer neighbour (on the tail if it evicted the
head). A key that leaves the queue under the hand (pinned or removed) moves the hand to its newer
neighbour, as libCacheSim's ``remove`` does.

Pinning: a pinned key leaves the queue keeping its bit; ``unpin`` re-enters at the head.
``eviction_order`` lists the keys in the order ``evict`` would take them if nothing else happened:
the keys with ``visited == 0``, then those with ``visited == 1`` (cleared on the hand's first
round), each in the hand's order (from the hand to the head, then from the tail). No parameters.
"""

from __future__ import annotations

from wakman import _core


class Sieve(_core.Sieve):
    name = "sieve"
