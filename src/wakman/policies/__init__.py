"""Eviction policies: one module per policy, one interface (``EvictionPolicy``) for every caller.

>>> from wakman.policies import make_policy
>>> cache = make_policy("s3fifo", capacity=20_000)
>>> cache.access(42)
False
"""

from __future__ import annotations

from typing import Any

from wakman import _core
from wakman.numbers_check import is_integer
from wakman.policies.arc import ARC
from wakman.policies.base import EvictionPolicy, Key, NoEvictableKey, handover, take_over
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
# the online policies a server runs (vLLM's GPU cache and offload tier, advise's default set);
# s3fifo-v0, the SOSP artifact's variant, is kept for comparison with it
SERVABLE_POLICIES = tuple(p for p in ONLINE_POLICIES if p != "s3fifo-v0")


MAX_CAPACITY: int = _core.MAX_CAPACITY  # blocks: the core's node slots are 32-bit


def make_policy(name: str, capacity: int, **params: Any) -> EvictionPolicy:
    """Build the policy called ``name`` with ``capacity`` blocks (an integer, 1 to ``MAX_CAPACITY``)
    and its keyword parameters; a bad name, capacity or parameter is a ``ValueError`` or
    ``TypeError`` naming it."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
    if not is_integer(capacity):
        raise TypeError(f"capacity must be an integer number of blocks, got {capacity!r}")
    if not 1 <= capacity <= MAX_CAPACITY:
        raise ValueError(f"capacity must be 1 to {MAX_CAPACITY:,} blocks, got {capacity}")
    try:
        return cls(int(capacity), **params)
    except TypeError as exc:  # nanobind's signature dump: say what the policy takes, in one line
        raise TypeError(f"{name}: {_signature_error(exc, params)}") from None


def _signature_error(exc: TypeError, params: dict[str, Any]) -> str:
    """nanobind's 'incompatible function arguments' as one line: the parameters given and the
    constructor's own (``__init__(self, capacity: int, ...)`` in its message); others as they are."""
    text = str(exc)
    if "incompatible function arguments" not in text:
        return text
    takes = next((line.strip() for line in text.splitlines() if "__init__(self" in line), "")
    takes = takes.split("__init__(self, ", 1)[-1].rsplit(") ->", 1)[0]
    given = ", ".join(f"{k}={v!r}" for k, v in params.items()) or "none"
    return f"bad parameters ({given}); it takes {takes}"


__all__ = [
    "ARC",
    "FIFO",
    "LRU",
    "MAX_CAPACITY",
    "ONLINE_POLICIES",
    "POLICIES",
    "S3FIFO",
    "SERVABLE_POLICIES",
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
    "take_over",
]
