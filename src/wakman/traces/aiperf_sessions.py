"""AIPerf multi-turn rows (``mooncake_trace`` rows that carry a ``session_id``): each turn's new tokens.

    {"session_id": "s1", "timestamp": 0, "input_length": 900, "output_length": 40, "hash_ids": [1, 2]}
    {"session_id": "s1", "delay": 2500, "input_length": 300, "output_length": 30, "hash_ids": [3]}

AIPerf replays the rows of one ``session_id`` as one chat (its ``deltas_without_responses`` mode,
the default for Mooncake rows with ``hash_ids``): turn k's prompt is the session's earlier turns,
each followed by the answer the server generated for it, then turn k's ``input_length`` new tokens.
``Conversations`` reads a session that way, in tokens and block keys (``block_size`` tokens a block):

- turn 1: its ``hash_ids`` as given (prefix-chained ids, in [0, 2**64)), ``input_length`` tokens;
- turn k > 1: ``prompt = history + input_length`` tokens, where ``history`` is turn k-1's prompt
  plus its ``output_length``; its first keys are the blocks vLLM cached for the history (turn k-1's
  full prompt blocks, then the blocks its decoding completed: ``(prompt + output - 1) // block_size``
  in all, the last sampled token having no KV), the rest keys no other session has (the history
  holds live answers; a turn's own ``hash_ids`` then name only the text AIPerf generates for it),
  one a block, the partial last block included, as Mooncake's rows key a prompt (a trace converted
  from one whose later turns key full blocks only, as the generator's do, reads back with one more
  block access on such turns: its block counts move a little, its token hit rates do not; one
  whose turns carry no output keys, as Bailian's, reads back with them, hits the source did not
  have, and ``convert`` says so);
- each turn's ``output_keys``: the blocks its decoding completes (full prompt blocks to
  ``(prompt + output - 1) // block_size``), which turn k+1's prompt hits.

A session's first turn whose ``hash_ids`` cover only a prefix of its prompt (AIPerf's prefix-only
rows: the rest is text sampled once) gets keys of its own for the rest, since AIPerf sends that text
again as the next turn's history. The keys no trace gives are ``splitmix64`` of the session's 64-bit
name (``session_key``: the first 8 bytes of the BLAKE2b digest of its id) plus a counter times the
golden ratio: distinct from each other and, with probability ~n / 2**64, from the trace's ids.
``timestamp`` (ms) is on a session's first turn; ``timestamp`` (not before the previous turn's) or
``delay`` (ms) on later ones; a row with both is refused, and so is a first turn without a timestamp
(AIPerf then starts it at its own request rate, which the trace does not record). AIPerf sends a
later turn at its ``timestamp``, or when the previous turn's answer is back if that is later; it
waits ``delay`` from that answer. The trace holds no answer's time, so a ``delay`` is read as the
time from the previous turn's arrival: such a session arrives earlier here than AIPerf sends it, by
its answers' times. A row without a ``session_id`` is a request of its own (AIPerf makes it a
one-turn chat), read as a Mooncake row is (``one_request``). Rows of different sessions may come in
any order, so reading buffers the whole trace to sort it by arrival (memory grows with the trace,
unlike the other readers); a ``mooncake`` file whose rows carry a ``session_id`` is read the same
way (``mooncake.read``), except that it refuses a ``delay``.

Writing gives each session's turns as AIPerf will replay them, each at its arrival (``timestamp``),
so a turn must extend its previous turn's prompt and answer: its prompt at least their tokens, its
keys starting with the previous turn's full prompt blocks and, where the trace has them, its output
blocks; anything else is refused (write ``mooncake`` rows, one self-contained request each,
instead). A request without a session id is written as a row without one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec
import numpy as np

from wakman import _core
from wakman.traces.io import JSON_ENCODER, atomic_output, decode_rows, seconds_to_ms
from wakman.traces.model import (
    MAX_TOKENS,
    KeyRangeError,
    Request,
    TraceFormatError,
    decoded_blocks,
    key_array,
    key_list,
    no_keys,
    session_key,
    validate_request,
)

DEFAULT_BLOCK_SIZE = 512
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class SessionRow(msgspec.Struct, kw_only=True, omit_defaults=True):
    session_id: str | None = None  # None: a one-turn session of its own (AIPerf names it)
    input_length: int
    output_length: int
    hash_ids: list[int]
    timestamp: float | None = None
    delay: float | None = None
    group_id: int | str | None = None


_row = msgspec.json.Decoder(SessionRow)


def _fresh_keys(name: int, start: int, n: int) -> np.ndarray:
    """Keys ``start .. start + n - 1`` of a session named ``name``: splitmix64(name + i * golden)."""
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as the core's does
        return _core.splitmix64(np.uint64(name) + np.arange(start, start + n, dtype=np.uint64) * _GOLDEN)


class _Session:
    __slots__ = ("arrival_s", "history_keys", "history_tokens", "issued", "name")

    def __init__(self, session_id: str) -> None:
        self.arrival_s = 0.0
        self.history_tokens = 0  # the previous turns' prompts and answers (tokens)
        self.history_keys = no_keys()  # the blocks vLLM cached for them
        self.name = session_key(session_id)
        self.issued = 0  # fresh keys handed out so far

    def fresh(self, n: int) -> np.ndarray:
        keys = _fresh_keys(self.name, self.issued, n)
        self.issued += n
        return keys


class Conversations:
    """AIPerf's chats, turn by turn: ``turn(...)`` gives the ``Request`` AIPerf sends for a row."""

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.block_size = block_size
        self.sessions: dict[str, _Session] = {}

    def is_first(self, session_id: str) -> bool:
        return session_id not in self.sessions

    def last_arrival_s(self, session_id: str) -> float:
        return self.sessions[session_id].arrival_s

    def turn(
        self, session_id: str, arrival_s: float, input_length: int, output_length: int, hash_ids: np.ndarray
    ) -> Request:
        """The request of a row; the caller checks it as every reader checks a request. Checked here,
        before any key is made: a turn adds 1 to ``MAX_TOKENS`` tokens (AIPerf refuses a turn
        without one) and answers with 0 to ``MAX_TOKENS``, and a later turn has at most one id per
        block of its new tokens: ``KeyRangeError`` naming the field otherwise."""
        bs = self.block_size
        for field, value, least in (("input_length", input_length, 1), ("output_length", output_length, 0)):
            if not least <= value <= MAX_TOKENS:
                raise KeyRangeError(field, f"must be in [{least}, {MAX_TOKENS:,}] tokens, got {value}")
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = _Session(session_id)
            keys, prompt = hash_ids, input_length
            unkeyed = -(-prompt // bs) - len(keys)  # AIPerf's prefix-only ids: its text is still sent
            if unkeyed > 0:  # again as the next turn's history, so its blocks get keys of their own
                keys = np.concatenate((keys, session.fresh(unkeyed)))
        else:
            if len(hash_ids) > -(-input_length // bs):
                raise KeyRangeError(
                    "hash_ids", f"{len(hash_ids)} blocks for {input_length} new tokens of {bs} per block"
                )
            prompt = session.history_tokens + input_length
            shared = session.history_keys
            keys = np.concatenate((shared, session.fresh(max(0, -(-prompt // bs) - len(shared)))))
        full = prompt // bs
        decoded = decoded_blocks(prompt, output_length, bs)
        outputs = session.fresh(decoded) if decoded else no_keys()
        session.arrival_s = arrival_s
        session.history_tokens = prompt + output_length
        session.history_keys = np.concatenate((keys[: min(full, len(keys))], outputs))
        return Request(
            arrival_s=arrival_s,
            block_keys=keys,
            prompt_tokens=prompt,
            output_tokens=output_length,
            block_size=bs,
            session_id=session_id,
            output_keys=outputs,
        )


def read(path: str | Path, block_size: int = DEFAULT_BLOCK_SIZE) -> Iterator[Request]:
    path = Path(path)
    chats = Conversations(block_size)
    turns: list[tuple[float, int, Request]] = []
    for number, row in decode_rows(path, _row):
        if row.timestamp is not None and row.delay is not None:
            raise TraceFormatError(
                path,
                number,
                "delay",
                "given with a timestamp: AIPerf's fixed schedule sends a turn at its timestamp, its "
                "session scheduler after its delay; give one of them",
            )
        if row.session_id is None:  # a request of its own (AIPerf: a one-turn chat), as Mooncake rows are
            if row.timestamp is None:
                raise TraceFormatError(
                    path, number, "timestamp", "missing: a row without a session_id is sent at it"
                )
            if row.delay is not None:
                raise TraceFormatError(
                    path, number, "delay", "a row without a session_id has no previous turn to be timed after"
                )
            arrival = row.timestamp / 1000.0
        elif chats.is_first(row.session_id):
            if row.timestamp is None:
                raise TraceFormatError(
                    path,
                    number,
                    "timestamp",
                    "a session's first turn needs a timestamp (ms): without one AIPerf starts sessions "
                    "at its own --request-rate or --concurrency, which the trace does not record",
                )
            arrival = row.timestamp / 1000.0
        elif row.delay is not None:
            if row.delay < 0:
                raise TraceFormatError(path, number, "delay", f"must be >= 0 ms, got {row.delay}")
            arrival = chats.last_arrival_s(row.session_id) + row.delay / 1000.0
        elif row.timestamp is not None:
            arrival = row.timestamp / 1000.0
            if arrival < (previous := chats.last_arrival_s(row.session_id)):
                raise TraceFormatError(
                    path,
                    number,
                    "timestamp",
                    f"{arrival:.6f} s is before its session's previous turn ({previous:.6f} s); a turn "
                    "is sent after the turn it extends",
                )
        else:
            raise TraceFormatError(
                path, number, "delay", "a session's later turn needs a delay or a timestamp"
            )
        turns.append((arrival, number, _turn(chats, row, arrival, path, number)))
    turns.sort(key=lambda t: (t[0], t[1]))
    for _, _, req in turns:
        yield req


def one_request(
    arrival_s: float, input_length: int, output_length: int, hash_ids: np.ndarray, block_size: int
) -> Request:
    """A row without a ``session_id``: the whole request, its ``hash_ids`` as given (the Mooncake
    reader's rows and this one's alike)."""
    return Request(
        arrival_s=arrival_s,
        block_keys=hash_ids,
        prompt_tokens=input_length,
        output_tokens=output_length,
        block_size=block_size,
    )


def _turn(chats: Conversations, row: SessionRow, arrival: float, path: Path, number: int) -> Request:
    """One row through ``chats`` (a row without a session: ``one_request``), checked as every reader
    checks a request."""
    try:
        ids = key_array(row.hash_ids)
        if row.session_id is None:
            req = one_request(arrival, row.input_length, row.output_length, ids, chats.block_size)
        else:
            req = chats.turn(row.session_id, arrival, row.input_length, row.output_length, ids)
    except KeyRangeError as exc:
        raise TraceFormatError(path, number, exc.field, exc.message) from None
    validate_request(req, path, number, 0.0)
    return req


def write(requests: Iterable[Request], path: str | Path) -> int:
    """Every turn carries its arrival as ``timestamp`` (ms): AIPerf's fixed schedule sends a later
    turn at it, or once the previous answer is back if that comes later (a ``delay`` would count
    from that answer, stretching the session by every answer's time). A request without a session
    id is a row without one (AIPerf: a one-turn chat; read back as a request of its own)."""
    last: dict[str, Request] = {}  # session -> its latest turn
    count = 0
    with atomic_output(path) as out:
        for index, req in enumerate(requests):
            sid = req.session_id
            keys = key_list(req.block_keys)
            prev = None if sid is None else last.get(sid)
            if prev is None:
                row = SessionRow(
                    session_id=sid,
                    timestamp=seconds_to_ms(req.arrival_s),
                    input_length=req.prompt_tokens,
                    output_length=req.output_tokens,
                    hash_ids=keys,
                )
            else:
                history = prev.prompt_tokens + prev.output_tokens
                full = prev.prompt_tokens // prev.block_size
                cached = key_list(prev.block_keys)[:full] + key_list(prev.output_keys)
                known = min(len(cached), len(keys))
                if req.prompt_tokens < history or keys[:known] != cached[:known] or known < full:
                    raise ValueError(
                        f"request {index} (session {sid}) does not extend its previous turn's prompt and "
                        "answer, as AIPerf replays a session's turns; write mooncake rows (one "
                        "self-contained request each) instead"
                    )
                new = req.prompt_tokens - history
                if new < 1:
                    raise ValueError(
                        f"request {index} (session {sid}) adds no token to its previous turn's prompt and "
                        "answer; AIPerf refuses such a turn: write mooncake rows instead"
                    )
                row = SessionRow(
                    session_id=sid,
                    timestamp=seconds_to_ms(req.arrival_s),
                    input_length=new,
                    output_length=req.output_tokens,
                    hash_ids=keys[known:][: -(-new // req.block_size)],
                )
            if sid is not None:
                last[sid] = req
            out.write(JSON_ENCODER.encode(row) + b"\n")
            count += 1
    return count
