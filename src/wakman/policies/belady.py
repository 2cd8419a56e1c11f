"""Belady / MIN: evict the unpinned key whose next access is farthest in the future.

Semantics: given the whole future key sequence up front. In shadow replay the i-th ``access`` must be
``future[i]`` (a ``ValueError`` otherwise); a key's next use is the next index holding the same key
(never = infinity), computed by one backward pass, as libCacheSim does from ``next_access_vtime``.
The incoming key is always inserted. Victims come from a max-heap on next use that holds each
unpinned resident key once (a hit moves its key in place); among keys never used again the one
whose next use was set first goes first.

Pool use: the caller moves the clock with ``seek(position)`` (accesses before ``position`` are past);
``insert``/``hit``/``unpin`` then look the key's next use up as its first occurrence at or after the
clock. With prefix caching and pinning this is a reference, not a proven optimum: MIN maximises
block hits, while vLLM's metric counts a request's blocks only up to its first miss, so another
policy can beat it there (cache mode too).

``reset()`` forgets every key but not the clock (a reset cache goes on at the same position of
the future); ``seek(0)`` starts the future over.

``future`` is the key sequence (any iterable of ints, a numpy uint64 array the fast way) or a
``BeladyFuture`` built from it once: the next-use index is then shared by every Belady given it (one
replay per capacity builds it once).

Memory: 12 bytes per future access (the key and its next use's index), plus, once pool use needs
each key's occurrences, 4 per access and 36-68 per distinct key (its start and index entry), all
shared by the Beladys of one ``BeladyFuture``; 24 per resident key besides the index and nodes every
policy keeps (its heap slot, next use and heap position), and 12 more for a cursor into its key's
occurrences, which pool use reads, so that a hit or unpin finds the next use without an index
lookup.
"""

from __future__ import annotations

from wakman import _core

BeladyFuture = _core.BeladyFuture


class Belady(_core.Belady):
    name = "belady"
