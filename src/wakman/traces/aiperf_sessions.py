"""AIPerf session rows (``aiperf synthesize`` multi-turn output): only each turn's new tokens.

    {"session_id": "s1", "timestamp": 0, "input_length": 900, "output_length": 40, "hash_ids": [1, 2]}
    {"session_id": "s1", "delay": 2500, "input_length": 300, "output_length": 30, "hash_ids": [3]}

``hash_ids`` (ids in [0, 2**64); the keys are uint64 arrays) and ``input_length`` cover the new tokens
of the turn; the turn's full prompt is the concatenation of its session's earlier ``hash_ids`` (and the
sum of their lengths). ``timestamp`` (ms) is on a session's first turn, ``delay`` (ms, after the
previous turn's arrival) on later ones; wakman places turn k at ``timestamp + sum(delays)``. Rows of
different sessions may come in any order, so reading buffers the whole trace to sort it by arrival
(memory grows with the trace, unlike the other readers). Writing needs each turn's keys to extend its
session's previous turn's keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec
import numpy as np

from wakman.traces.io import JSON_ENCODER, atomic_output, decode_rows, seconds_to_ms
from wakman.traces.model import (
    KeyRangeError,
    Request,
    TraceFormatError,
    key_array,
    key_list,
    no_keys,
    validate_request,
)

DEFAULT_BLOCK_SIZE = 512


class SessionRow(msgspec.Struct, kw_only=True, omit_defaults=True):
    session_id: str
    input_length: int
    output_length: int
    hash_ids: list[int]
    timestamp: float | None = None
    delay: float | None = None
    group_id: int | str | None = None


_row = msgspec.json.Decoder(SessionRow)


def read(path: str | Path, block_size: int = DEFAULT_BLOCK_SIZE) -> Iterator[Request]:
    path = Path(path)
    sessions: dict[str, tuple[float, np.ndarray, int]] = {}  # id -> (last arrival s, keys, tokens)
    turns: list[tuple[float, int, Request]] = []
    for number, row in decode_rows(path, _row):
        state = sessions.get(row.session_id)
        if state is None:
            if row.timestamp is None:
                raise TraceFormatError(path, number, "timestamp", "a session's first turn needs a timestamp")
            arrival, keys, tokens = row.timestamp / 1000.0, no_keys(), 0
        else:
            if row.delay is None:
                raise TraceFormatError(path, number, "delay", "a session's later turn needs a delay")
            if row.delay < 0:
                raise TraceFormatError(path, number, "delay", f"must be >= 0 ms, got {row.delay}")
            arrival, keys, tokens = state[0] + row.delay / 1000.0, state[1], state[2]
        try:
            new = key_array(row.hash_ids)
        except KeyRangeError as exc:
            raise TraceFormatError(path, number, exc.field, exc.message) from None
        keys = np.concatenate((keys, new)) if len(keys) else new
        tokens += row.input_length
        sessions[row.session_id] = (arrival, keys, tokens)
        req = Request(
            arrival_s=arrival,
            block_keys=keys,
            prompt_tokens=tokens,
            output_tokens=row.output_length,
            block_size=block_size,
            session_id=row.session_id,
        )
        validate_request(req, path, number, 0.0)
        turns.append((arrival, number, req))
    turns.sort(key=lambda t: (t[0], t[1]))
    for _, _, req in turns:
        yield req


def write(requests: Iterable[Request], path: str | Path) -> int:
    """Requests without a session id each become a one-turn session named ``r<index>``."""
    last: dict[str, tuple[Request, list[int]]] = {}  # session -> (its latest turn, that turn's keys)
    count = 0
    with atomic_output(path) as out:
        for index, req in enumerate(requests):
            sid = req.session_id if req.session_id is not None else f"r{index}"
            keys = key_list(req.block_keys)
            entry = last.get(sid)
            if entry is None:
                row = SessionRow(
                    session_id=sid,
                    timestamp=seconds_to_ms(req.arrival_s),
                    input_length=req.prompt_tokens,
                    output_length=req.output_tokens,
                    hash_ids=keys,
                )
            else:
                prev, prev_keys = entry
                n = len(prev_keys)
                if keys[:n] != prev_keys or req.prompt_tokens < prev.prompt_tokens:
                    raise ValueError(
                        f"request {index} (session {sid}) does not extend its previous turn's prompt; "
                        "AIPerf session rows cannot express it"
                    )
                row = SessionRow(
                    session_id=sid,
                    delay=seconds_to_ms(req.arrival_s - prev.arrival_s),
                    input_length=req.prompt_tokens - prev.prompt_tokens,
                    output_length=req.output_tokens,
                    hash_ids=keys[n:],
                )
            last[sid] = (req, keys)
            out.write(JSON_ENCODER.encode(row) + b"\n")
            count += 1
    return count
