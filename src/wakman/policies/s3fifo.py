"""S3-FIFO (Yang et al., SOSP 2023), exactly as libCacheSim implements it.

Semantics (C = capacity in blocks):
- small FIFO S of ``int(small_ratio * C)`` blocks, main FIFO M of ``C - |S|`` blocks with a frequency
  counter, ghost FIFO G of ``int(ghost_ratio * C)`` keys (keys only).
- hit: ``freq += 1`` (in S or M, pinned or not; saturating at 255).
- ``miss`` of a key in G: it leaves G at once (libCacheSim's ``S3FIFO_find``), before the evictions
  that make room for it, and its ``insert`` puts it in M with freq 0. A key inserted while still in G
  (no ``miss`` first) does the same. Any other insert goes to S with freq 0, except (variant
  ``s3fifo`` only, libCacheSim ``S3FIFO``) while nothing has been evicted yet and S is full, when new
  keys go to M. ``s3fifo-v0`` (libCacheSim ``S3FIFOv0``, the SOSP artifact) has no warm-up rule.
- evict: from M when ``|M| > C - |S|`` or S is empty, else from S.
  S's oldest with ``freq >= promote_threshold`` moves to M (freq 0) and the scan goes on; otherwise it
  is evicted and its key enters G (G's oldest key leaves when G is full). M's oldest with
  ``freq >= 1`` is reinserted at M's head with ``min(freq, freq_cap) - 1``; otherwise it is evicted.

Pinning: a pinned block leaves its queue, keeping its segment and frequency; ``unpin`` puts it at
the head (newest end) of that queue. Segment sizes count pinned blocks. ``adopt`` (policy switch)
puts inherited blocks in M, oldest first, freq 0; S and G start empty. ``remove`` takes a block out
of its queue without a ghost entry; ``evict_key`` (the host's eviction of a given block) puts a
key from S into G as S's victims go (G's oldest leaves when G is full) and drops one from M; it
does not count as an eviction for the warm-up rule. A ghost hit whose key is never inserted waits
among at most C such keys before it is forgotten (fewer only where C + the ghost + C would pass the
core's 2**31 keys).

Parameters: ``small_ratio=0.1``, ``ghost_ratio=0.9``, ``promote_threshold=2``, ``freq_cap=3``,
``warmup_to_main=True``.

Edge case: libCacheSim refuses to insert anything when ``int(small_ratio * C) <= 1``; here S may be
that small and blocks are still inserted, so exact agreement needs ``C >= 2 / small_ratio``.
"""

from __future__ import annotations

from typing import Any

from wakman import _core


class S3FIFO(_core.S3FIFO):
    name = "s3fifo"


class S3FIFOv0(_core.S3FIFO):
    """S3-FIFO as in the SOSP artifact (libCacheSim ``S3FIFOv0``): no warm-up rule (see s3fifo)."""

    name = "s3fifo-v0"

    def __init__(self, capacity: int, *args: Any, **params: Any) -> None:
        if "warmup_to_main" in params:  # the warm-up rule is what tells the two apart
            raise TypeError("s3fifo-v0 has no warm-up rule: warmup_to_main is s3fifo's parameter")
        super().__init__(capacity, *args, warmup_to_main=False, **params)
