"""The one request model every trace format is read into and written from.

Units: ``arrival_s`` in seconds from the start of the trace; lengths in tokens; ``block_size`` in
tokens per block. ``block_keys[i]`` stands for the whole prefix up to the end of block ``i`` (keys are
prefix-chained: equal key means equal whole prefix), in prefix order. Block ``i`` covers tokens
``[i * block_size, (i + 1) * block_size)``; the last key may cover a partial block (Mooncake rows do
this), and only the ``prompt_tokens // block_size`` full blocks are cacheable in a vLLM-like pool.
``output_keys`` are the keys of blocks that decoding completes (vLLM hashes generated tokens too),
chained after ``block_keys``; traces that do not know them leave them empty.
``label`` (single-turn, multi-turn, agentic, ...) is for analysis only: no policy ever reads it.

Keys are uint64 values, held as C-contiguous ``np.ndarray[uint64]`` (8 bytes a key, rather than a
Python int in a list): every reader and the workload generator give ``block_keys`` / ``output_keys``
as such arrays (an empty array when there are none), and the core reads them in place; the
kv-cache-tester and native readers give each session's requests read-only views of one buffer
(``KeyChain``). ``key_array()``
makes one from any sequence of ints (a trace id outside [0, 2**64) is an error, never wrapped);
``key_list()`` gives plain ints back where Python ints are truly needed (JSON writers, vLLM hashes).
Code handling requests uses ``len()`` rather than truth tests, and ``np.concatenate`` rather than
``+``; requests built by hand may still hold lists (the drivers accept both). Requests holding arrays
pickle and validate like any other, but do not compare with ``==``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from functools import lru_cache

import msgspec
import numpy as np

from wakman import _core


@lru_cache(maxsize=65536)
def session_key(session_id: str) -> int:
    """A session id as the core's 64-bit key (the first 8 bytes of its BLAKE2b digest: the same in
    every process, unlike Python's string hash)."""
    return int.from_bytes(hashlib.blake2b(session_id.encode(), digest_size=8).digest(), "little")


def full_blocks(num_keys: int, prompt_tokens: int, block_size: int) -> int:
    """Prompt blocks vLLM can cache: only full blocks are hashed (the core's rule, prefix.hpp, which
    the serve loops use)."""
    return _core.full_blocks(num_keys, prompt_tokens, block_size)


def decoded_blocks(prompt_tokens: int, output_tokens: int, block_size: int) -> int:
    """Blocks a request's decoding completes after the prompt's full blocks: the full blocks of
    ``prompt + output - 1`` tokens (the last sampled token has no KV) past ``prompt // block_size``;
    0 without output. At most that many ``output_keys``."""
    return max(0, (prompt_tokens + max(output_tokens, 1) - 1) // block_size - prompt_tokens // block_size)


def hit_limit(num_keys: int, prompt_tokens: int, block_size: int) -> int:
    """Blocks that may hit under vLLM's rule: full blocks covering at most ``prompt_tokens - 1``
    tokens (the last prompt token is always computed; the core's rule, prefix.hpp)."""
    return _core.hit_limit(num_keys, prompt_tokens, block_size)


def read_only(keys: np.ndarray) -> np.ndarray:
    """``keys``, no longer writable (in place)."""
    keys.flags.writeable = False
    return keys


_NO_KEYS = read_only(np.zeros(0, dtype=np.uint64))


def no_keys() -> np.ndarray:
    """The empty key array (the default ``output_keys``): one shared read-only array, so a request
    without output keys costs no array of its own."""
    return _NO_KEYS


class Request(msgspec.Struct, kw_only=True, omit_defaults=True):
    arrival_s: float
    block_keys: Sequence[int]
    prompt_tokens: int
    output_tokens: int
    block_size: int
    session_id: str | None = None
    label: str | None = None
    output_keys: Sequence[int] = msgspec.field(default_factory=no_keys)

    @property
    def full_blocks(self) -> int:
        """Prompt blocks vLLM can cache: only full blocks are hashed."""
        return full_blocks(len(self.block_keys), self.prompt_tokens, self.block_size)

    @property
    def short_keyed(self) -> bool:
        """Fewer block keys than the prompt's full blocks (``prompt_tokens // block_size``): the rest
        of the prompt can never hit (AIPerf's prefix-only rows, or a block size too small for the
        trace's ids)."""
        return len(self.block_keys) < self.prompt_tokens // self.block_size

    @property
    def max_hit_blocks(self) -> int:
        """vLLM lets at most ``prompt_tokens - 1`` tokens hit, in whole blocks."""
        return hit_limit(len(self.block_keys), self.prompt_tokens, self.block_size)


KEY_MAX = (1 << 64) - 1


class KeyRangeError(ValueError):
    """A key that is not an integer in [0, 2**64); readers turn it into a ``TraceFormatError``."""

    def __init__(self, field: str, message: str) -> None:
        self.field, self.message = field, message
        super().__init__(f"field '{field}': {message}")


def key_array(keys: Sequence[int], field: str = "hash_ids") -> np.ndarray:
    """``keys`` as a C-contiguous ``np.ndarray[uint64]`` (returned as is when it already is one).

    Python ints must lie in [0, 2**64) and integer arrays must hold no negative value: anything else
    raises ``KeyRangeError`` naming ``field`` instead of wrapping modulo 2**64.
    """
    if isinstance(keys, np.ndarray):
        if keys.dtype == np.uint64:
            return np.ascontiguousarray(keys)
        if keys.dtype.kind not in "iu" or (keys.dtype.kind == "i" and len(keys) and keys.min() < 0):
            raise KeyRangeError(field, f"keys must be integers in [0, 2**64), got a {keys.dtype} array")
        return np.ascontiguousarray(keys, dtype=np.uint64)
    try:
        return np.array(keys, dtype=np.uint64)
    except (OverflowError, TypeError, ValueError):
        bad = next((k for k in keys if not isinstance(k, int) or not 0 <= k <= KEY_MAX), None)
        raise KeyRangeError(field, f"ids must be integers in [0, 2**64), got {bad!r}") from None


def joined_keys(runs: Iterable[Sequence[int]]) -> np.ndarray:
    """The key sequences of ``runs`` one after another, as one uint64 array (empty when none)."""
    arrays = [key_array(keys, "block_keys") for keys in runs]
    return np.concatenate(arrays) if arrays else no_keys()


class KeyChain:
    """One session's keys so far, in a buffer that its requests' ``block_keys`` view: a reader that
    holds a whole trace holds each session's keys about once instead of once per request.

    Invariant: ``buffer[:filled]`` is the session's latest request's keys, and no view handed out
    covers anything past ``filled`` in ``buffer``, so a request that extends the latest one (it
    shares all ``filled`` keys) writes its new keys there without changing any earlier view. One
    that extends it past the buffer's end starts a buffer of at least twice the old one's size (so
    a growing session's appends cost O(new keys) amortised); one that keeps only a prefix (a
    compacted or edited context) or nothing starts a buffer of exactly its keys (so a session
    whose requests share nothing holds what full arrays would). The prefix is copied into a new
    buffer; the views already handed out keep the old one alive. Views are read-only."""

    __slots__ = ("buffer", "filled")

    def __init__(self) -> None:
        self.buffer = np.empty(0, dtype=np.uint64)
        self.filled = 0

    def extend(self, shared: int, tail: np.ndarray) -> np.ndarray:
        """The keys ``latest[:shared] + tail`` as a read-only view (``shared <= filled``)."""
        end = shared + len(tail)
        extends = shared == self.filled and shared > 0
        if not extends or end > len(self.buffer):
            buffer = np.empty(max(end, 2 * len(self.buffer)) if extends else end, dtype=np.uint64)
            buffer[:shared] = self.buffer[:shared]
            self.buffer = buffer
        self.buffer[shared:end] = tail
        self.filled = end
        return read_only(self.buffer[:end])

    def follow(self, keys: np.ndarray) -> np.ndarray:
        """``keys`` (equal content) as a view of this chain, sharing its common prefix with the latest."""
        n = min(self.filled, len(keys))
        differ = np.flatnonzero(self.buffer[:n] != keys[:n])
        shared = int(differ[0]) if len(differ) else n
        return self.extend(shared, keys[shared:])


def key_list(keys: Sequence[int]) -> list[int]:
    """The keys as a list of Python ints, whatever holds them (list, ``array``, numpy array)."""
    return keys.tolist() if hasattr(keys, "tolist") else list(keys)


def as_engine_serves(
    requests: Iterable[Request], *, fresh_outputs: bool = True, max_output_tokens: int | None = None
) -> list[Request]:
    """The requests as a model-driven engine serves them (``wakman replay --engine vllm``, whose
    engine samples its own tokens): with ``fresh_outputs`` the trace's ``output_keys`` are dropped,
    so each block the generated tokens fill gets a key no other request has (a next turn's prompt no
    longer hits the previous answer); ``max_output_tokens`` caps each output (tokens), and the output
    keys kept are those of the blocks the capped output fills (``(prompt + output - 1) // block_size``
    blocks in all: the last sampled token has no KV). Requests needing no change are kept as they are."""
    out = []
    for req in requests:
        tokens = req.output_tokens if max_output_tokens is None else min(req.output_tokens, max_output_tokens)
        keep = 0
        if not fresh_outputs:
            keep = min(len(req.output_keys), decoded_blocks(req.prompt_tokens, tokens, req.block_size))
        if tokens != req.output_tokens or keep != len(req.output_keys):
            kept = req.output_keys[:keep] if keep else no_keys()
            req = msgspec.structs.replace(req, output_tokens=tokens, output_keys=kept)
        out.append(req)
    return out


class TraceFormatError(ValueError):
    """Bad trace input: names the file, the line (1-based, 0 = whole file) and the field ("-": the
    error is not about one field, and the message names none)."""

    def __init__(self, path: object, line: int, field: str, message: str) -> None:
        self.path, self.line, self.field, self.message = str(path), line, field, message
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {message}" if field == "-" else f"{where}: field '{field}': {message}")


# Bounds no real trace reaches, past which a row is refused rather than simulated for ever (or
# handed to the core, whose counts are 64-bit): ten years of arrivals, 2**31 tokens a prompt or
# output, 2**20 tokens a block.
MAX_ARRIVAL_S = 10 * 365.25 * 86400.0
MAX_TOKENS = 2**31
MAX_BLOCK_SIZE = 2**20


# A format's name for each ``Request`` field, for its readers' errors.
MOONCAKE_FIELDS = {
    "arrival_s": "timestamp",
    "block_keys": "hash_ids",
    "prompt_tokens": "input_length",
    "output_tokens": "output_length",
    "block_size": "block_size",
}
REQUEST_FIELDS = {name: name for name in MOONCAKE_FIELDS}  # wakman's native rows


def validate_request(
    req: Request,
    path: object,
    line: int,
    previous_arrival_s: float,
    fields: dict[str, str] = MOONCAKE_FIELDS,
    trace_block_size: int | None = None,
) -> None:
    """Rules every reader applies: non-negative and non-decreasing arrival times up to
    ``MAX_ARRIVAL_S`` (file order is arrival order); at least one prompt token; non-negative output;
    positive block size; lengths and block size at most ``MAX_TOKENS`` and ``MAX_BLOCK_SIZE``; at most
    one key per (possibly partial) block (fewer is allowed: AIPerf's prefix-only rows key the cached
    prefix only, the rest of the prompt a miss; ``stats`` counts such requests); the block size of
    the trace's earlier requests (``trace_block_size``, None for its first): one cache holds blocks
    of one size; at most ``decoded_blocks`` output keys, and none on a short-keyed request (they
    follow the prompt's full blocks, which its keys do not reach).
    An error names the field as the format
    does (``fields``: the ``Request`` field's name in it)."""
    if not 0 <= req.arrival_s <= MAX_ARRIVAL_S:
        raise TraceFormatError(
            path,
            line,
            fields["arrival_s"],
            f"must be a time in [0, {MAX_ARRIVAL_S:g}] s (ten years) from the trace's start, got "
            f"{req.arrival_s} s (clock times must be made relative to the first request)",
        )
    if req.arrival_s < previous_arrival_s:
        raise TraceFormatError(
            path,
            line,
            fields["arrival_s"],
            f"decreases ({req.arrival_s:.6f} s after {previous_arrival_s:.6f} s); "
            "rows must be in arrival order",
        )
    for field, value, least, most in (
        ("block_size", req.block_size, 1, MAX_BLOCK_SIZE),
        ("prompt_tokens", req.prompt_tokens, 1, MAX_TOKENS),
        ("output_tokens", req.output_tokens, 0, MAX_TOKENS),
    ):
        if not least <= value <= most:
            message = f"must be in [{least}, {most:,}] tokens, got {value}"
            raise TraceFormatError(path, line, fields[field], message)
    if trace_block_size is not None and req.block_size != trace_block_size:
        raise TraceFormatError(
            path,
            line,
            fields["block_size"],
            f"{req.block_size}-token blocks after {trace_block_size}-token ones: a trace has one block size",
        )
    most = -(-req.prompt_tokens // req.block_size)
    if len(req.block_keys) > most:
        raise TraceFormatError(
            path,
            line,
            fields["block_keys"],
            f"{len(req.block_keys)} blocks for {req.prompt_tokens} tokens of {req.block_size} per block "
            f"(at most {most}); is the block size right?",
        )
    decoded = decoded_blocks(req.prompt_tokens, req.output_tokens, req.block_size)
    if len(req.output_keys) and req.short_keyed:
        raise TraceFormatError(
            path,
            line,
            fields.get("output_keys", "output_keys"),
            f"output keys after {len(req.block_keys)} block keys, fewer than the prompt's "
            f"{req.prompt_tokens // req.block_size} full blocks: the output keys would name prompt "
            "blocks (give the prompt's every full block a key, or no output keys)",
        )
    if len(req.output_keys) > decoded:
        raise TraceFormatError(
            path,
            line,
            fields.get("output_keys", "output_keys"),
            f"{len(req.output_keys)} keys, but decoding {req.output_tokens} tokens after "
            f"{req.prompt_tokens} completes {decoded} block{'s' if decoded != 1 else ''} of "
            f"{req.block_size} tokens (the last sampled token has no KV)",
        )
