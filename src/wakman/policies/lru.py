"""LRU: evict the least recently used unpinned key.

Semantics: one queue from oldest to newest. A hit moves the key to the newest end; a miss inserts
it there; the victim is the oldest. With pinning, the position of a key is the time it was last *hit
or released*: ``unpin`` re-enters at the newest end, and a hit on a pinned key changes nothing. That
is exactly vLLM's free-block queue, whose order is the release order (``free_blocks`` appends,
``touch`` removes). ``adopt`` appends at the newest end. No parameters.
"""

from __future__ import annotations

from wakman import _core


class LRU(_core.LRU):
    name = "lru"
