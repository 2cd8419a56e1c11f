"""Eviction policies: one module per policy, one interface (``EvictionPolicy``) for every caller.

>>> from wakman.policies import make_policy
>>> cache = make_policy("s3fifo", capacity=20_000)
>>> cache.access(42)
False
"""

from __future__ import annotations

from typing import Any

from wakman.policies.arc import ARC
from wakman.policies.base import EvictionPolicy, Key, NoEvictableKey, handover
from wakman.policies.belady import Belady
from wakman.policies.chain_lru import ChainLRU
from wakman.policies.fifo import FIFO
from wakman.policies.infinite import Infinite
from wakman.policies.lru import LRU
from wakman.policies.s3fifo import S3FIFO, S3FIFOv0
from wakman.policies.sieve import Sieve

POLICIES: dict[str, type[EvictionPolicy]] = {
    cls.name: cls for cls in (LRU, FIFO, S3FIFO, S3FIFOv0, Sieve, ARC, ChainLRU, Belady, Infinite)
}
ONLINE_POLICIES = ("lru", "fifo", "s3fifo", "s3fifo-v0", "sieve", "arc", "chain-lru")


def make_policy(name: str, capacity: int, **params: Any) -> EvictionPolicy:
    """Build the policy called ``name`` with ``capacity`` blocks and its keyword parameters."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
    return cls(capacity, **params)


__all__ = [
    "ARC",
    "FIFO",
    "LRU",
    "ONLINE_POLICIES",
    "POLICIES",
    "S3FIFO",
    "Belady",
    "ChainLRU",
    "EvictionPolicy",
    "Infinite",
    "Key",
    "NoEvictableKey",
    "S3FIFOv0",
    "Sieve",
    "handover",
    "make_policy",
]
