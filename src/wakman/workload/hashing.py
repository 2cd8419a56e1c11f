"""Chained block hashes over token ids, as vLLM computes them.

``sha256`` mode is vLLM 0.32's default exactly: block i's hash is
``sha256(pickle.dumps((parent_hash or NONE_HASH, tuple(block_tokens), None), protocol=5))`` with
``NONE_HASH = sha256(pickle.dumps(seed))`` and seed ``"vllm-none-hash"`` (vLLM's default when
PYTHONHASHSEED is unset; else PYTHONHASHSEED's value). The trace key of a block is vLLM's 64-bit
external form of that hash, ``int.from_bytes(hash, "big") & (2**64 - 1)`` (its KV-event integers).
``fast`` mode chains blake2b-64 over the raw token bytes: same prefix structure, simulation only.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence

import numpy as np

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
        data = np.asarray(block, dtype=np.int32).tobytes()
        return hashlib.blake2b((parent or self.none_hash) + data, digest_size=8).digest()

    def chain_blocks(self, parent: bytes | None, tokens: np.ndarray, block_size: int) -> list[bytes]:
        """The hashes of the full blocks of ``tokens`` (a whole number of blocks), each chained on
        the one before, the first on ``parent``: ``chain`` block by block, with one conversion of
        the tokens to bytes in fast mode."""
        if self.mode == "sha256":
            out = []
            for start in range(0, len(tokens) - block_size + 1, block_size):
                parent = self.chain(parent, tokens[start : start + block_size])
                out.append(parent)
            return out
        data, step = np.asarray(tokens, dtype=np.int32).tobytes(), 4 * block_size
        blake2b, none_hash, out = hashlib.blake2b, self.none_hash, []
        for start in range(0, len(data) - step + 1, step):
            parent = blake2b((parent or none_hash) + data[start : start + step], digest_size=8).digest()
            out.append(parent)
        return out

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
        full = len(tokens) // block_size * block_size
        return [self.key(h) for h in self.chain_blocks(None, np.asarray(tokens)[:full], block_size)]
