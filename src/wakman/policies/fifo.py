"""FIFO: evict the unpinned key that entered the order first; hits change nothing.

Semantics: one queue from oldest to newest insertion. With pinning, ``unpin`` re-enters at the
newest end, so a block's age counts from its last release (in a pool where every hit pins, FIFO then
orders by release time like LRU; in shadow replay it is plain FIFO). No parameters.
"""

from __future__ import annotations

from wakman import _core


class FIFO(_core.FIFO):
    name = "fifo"
