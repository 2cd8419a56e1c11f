"""Chained block hashes over token ids, as vLLM computes them.

``sha256`` mode is vLLM 0.32's default exactly: block i's hash is
``sha256(pickle.dumps((parent_hash or NONE_HASH, tuple(block_tokens), None), protocol=5))`` with
``NONE_HASH = sha256(pickle.dumps(seed))`` and seed ``"vllm-none-hash"`` (vLLM's default when
PYTHONHASHSEED is unset; else PYTHONHASHSEED's value). The trace key of a block is vLLM's 64-bit
external form of that hash, ``int.from_bytes(hash, "big") & (2**64 - 1)`` (its KV-event integers).
``fast`` mode chains blake2b-64 over the raw token bytes: block i's hash is
``blake2b((parent_hash or NONE_HASH) + int32 token bytes, digest_size=8)`` with ``NONE_HASH`` the
blake2b-64 of the seed, and its key the hash read big-endian; same prefix structure, simulation only.
Its per-block loop runs in the compiled core (``core/block_hash.hpp``; hashlib is its reference).
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence

import numpy as np

from wakman import _core

MASK64 = (1 << 64) - 1
DEFAULT_SEED = "vllm-none-hash"


def vllm_sha256(obj: object) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


class BlockHasher:
    """Extends a chain of block hashes block by block; holds only the last hash."""

    def __init__(self, mode: str = "fast", seed: str = DEFAULT_SEED) -> None:
        if mode not in ("fast", "sha256"):
            raise ValueError(f"hash mode must be 'fast' or 'sha256', got {mode!r}")
        self.mode = mode
        self.none_hash = (
            vllm_sha256(seed) if mode == "sha256" else hashlib.blake2b(seed.encode(), digest_size=8).digest()
        )

    def chain(self, parent: bytes | None, block: np.ndarray | Sequence[int]) -> bytes:
        """The hash of ``block`` (one full block of token ids) after ``parent`` (None: first block)."""
        if self.mode == "sha256":
            tokens = tuple(block.tolist() if isinstance(block, np.ndarray) else block)
            return vllm_sha256((parent or self.none_hash, tokens, None))
        return self.chain_blocks(parent, np.asarray(block), len(block))[0]

    def chain_blocks(self, parent: bytes | None, tokens: np.ndarray, block_size: int) -> list[bytes]:
        """The hashes of the full blocks of ``tokens``, each chained on the one before, the first on
        ``parent``: ``chain`` block by block."""
        if self.mode == "fast":
            return [int(k).to_bytes(8, "big") for k in self.chain_keys(parent, tokens, block_size)[0]]
        out = []
        for start in range(0, len(tokens) - block_size + 1, block_size):
            parent = self.chain(parent, tokens[start : start + block_size])
            out.append(parent)
        return out

    def chain_keys(
        self, parent: bytes | None, tokens: np.ndarray, block_size: int
    ) -> tuple[np.ndarray, bytes | None]:
        """The keys (uint64) of the full blocks of ``tokens`` chained on ``parent``, and the chain's
        last hash (``parent`` when there is no full block). Fast mode runs in the compiled core
        (``core/block_hash.hpp``), one call for the whole run of blocks."""
        if self.mode == "sha256":
            hashes = self.chain_blocks(parent, tokens, block_size)
            return self.key_array(hashes), (hashes[-1] if hashes else parent)
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        keys = _core.chain_blake2b64(parent or self.none_hash, tokens, block_size)
        return keys, (int(keys[-1]).to_bytes(8, "big") if len(keys) else parent)

    @staticmethod
    def key(block_hash: bytes) -> int:
        """The integer trace key of a block hash (vLLM's 64-bit external block hash)."""
        return int.from_bytes(block_hash, "big") & MASK64

    @staticmethod
    def key_array(block_hashes: Sequence[bytes]) -> np.ndarray:
        """``key`` of each hash, as one uint64 array (the low 64 bits are the last 8 bytes)."""
        return np.frombuffer(b"".join(h[-8:] for h in block_hashes), dtype=">u8").astype(np.uint64)

    def keys(self, tokens: np.ndarray | Sequence[int], block_size: int) -> list[int]:
        """Keys of every full block of ``tokens``."""
        return self.chain_keys(None, np.asarray(tokens), block_size)[0].tolist()
