"""Mooncake / AIPerf ``mooncake_trace`` rows: one JSON object per line.

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}

``timestamp`` is the arrival in milliseconds from the start; ``hash_ids`` are prefix-chained ids of
the prompt's blocks (512 tokens by default, the last usually partial), read as a uint64 array (an id
outside [0, 2**64) is an error). Each row is a self-contained request. Rows that carry AIPerf's
optional ``session_id`` are turns of one chat, as AIPerf replays them: each turn's ``input_length``
and ``hash_ids`` are its new tokens, after the session's earlier turns and their answers
(``aiperf_sessions.Conversations``). Written rows use only fields AIPerf's ``MooncakeTrace`` model
accepts and carry no ``session_id``: each is the whole request, which AIPerf sends as it is (write
``aiperf-sessions`` to keep the sessions as chats).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from wakman.traces.aiperf_sessions import Conversations, one_request
from wakman.traces.io import JSON_ENCODER, atomic_output, read_rows, seconds_to_ms
from wakman.traces.model import KeyRangeError, Request, TraceFormatError, key_array, key_list

DEFAULT_BLOCK_SIZE = 512


class MooncakeRow(msgspec.Struct, kw_only=True, omit_defaults=True):
    timestamp: float | None = None  # required (checked below); an integer too large for a float is refused
    input_length: int
    output_length: int
    hash_ids: list[int]
    session_id: str | None = None
    delay: float | None = None  # AIPerf's: refused here (the aiperf-sessions reader takes it)


_row = msgspec.json.Decoder(MooncakeRow)


def read(
    path: str | Path, block_size: int = DEFAULT_BLOCK_SIZE, label: str | None = None
) -> Iterator[Request]:
    chats = Conversations(block_size)
    last_was_turn = [False]  # the row just read is a session's turn (for the order error's hint)

    def to_request(row: MooncakeRow) -> Request:
        last_was_turn[0] = row.session_id is not None
        if row.delay is not None:
            message = (
                "an AIPerf session's turn timed after its previous one: read it as aiperf-sessions "
                "(--format; --from in convert)"
            )
            raise KeyRangeError("delay", message)
        if row.timestamp is None:
            raise KeyRangeError("timestamp", "missing: each row's arrival, in ms from the trace's start")
        keys = key_array(row.hash_ids)
        if row.session_id is not None:  # a chat's turn (read_rows checks the request it makes)
            req = chats.turn(
                row.session_id, row.timestamp / 1000.0, row.input_length, row.output_length, keys
            )
            return msgspec.structs.replace(req, label=label)
        req = one_request(row.timestamp / 1000.0, row.input_length, row.output_length, keys, block_size)
        return msgspec.structs.replace(req, label=label) if label is not None else req

    return _hinted_order(read_rows(Path(path), _row, to_request), last_was_turn)


def _hinted_order(requests: Iterator[Request], last_was_turn: list[bool]) -> Iterator[Request]:
    """``requests``; a session's turn out of arrival order is refused with the reader that takes
    it (AIPerf orders turns within a session only, so its files may interleave sessions)."""
    try:
        yield from requests
    except TraceFormatError as exc:
        if not (last_was_turn[0] and exc.field == "timestamp" and "arrival order" in exc.message):
            raise
        raise TraceFormatError(
            exc.path,
            exc.line,
            exc.field,
            f"{exc.message}; this row is an AIPerf session's turn, whose file orders each session's "
            "turns only: read it as aiperf-sessions (--format; --from in convert)",
        ) from None


def to_row(req: Request) -> MooncakeRow:
    return MooncakeRow(
        timestamp=seconds_to_ms(req.arrival_s),
        input_length=req.prompt_tokens,
        output_length=req.output_tokens,
        hash_ids=key_list(req.block_keys),
    )


def write(requests: Iterable[Request], path: str | Path) -> int:
    count = 0
    with atomic_output(path) as out:
        for req in requests:
            out.write(JSON_ENCODER.encode(to_row(req)) + b"\n")
            count += 1
    return count
