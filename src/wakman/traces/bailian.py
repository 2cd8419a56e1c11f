"""Alibaba Bailian usage traces (``qwen-bailian-usagetraces-anon``, USENIX ATC'25), JSONL rows:

    {"chat_id": 7, "parent_chat_id": -1, "timestamp": 1.25, "input_length": 900, "output_length": 40,
     "type": "text", "turn": 1, "hash_ids": [1, 2, ...]}

``timestamp`` in seconds; ``hash_ids`` are 16-token blocks covering the request's whole context
(a follow-up's history included: each row is a self-contained request). Each id names one block's
tokens alone (the dataset's README: "apply salted SipHash-2-4 to each block"), not its prefix, so the
reader chains them (``wakman._core.chain_ids``: key i from key i-1 and id i) into keys that stand
for the whole prefix, as vLLM's block hashes do: an id seen after another prefix is another key, and
an id repeated within a prompt is two keys (an id outside [0, 2**64) is an error). Where the ids
already stand for their prefix, chaining changes no hit.
``parent_chat_id`` is -1 (or absent) on a first turn. A request's session is the ``chat_id`` of its
first turn (followed through ``parent_chat_id``; an unknown parent starts a new session); ``type`` becomes the
label. Streaming: memory grows with the number of chats, not their blocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec

from wakman import _core
from wakman.traces.io import read_rows
from wakman.traces.model import Request, key_array

DEFAULT_BLOCK_SIZE = 16


class BailianRow(msgspec.Struct, kw_only=True):
    chat_id: int
    parent_chat_id: int = -1  # optional, as in AIPerf's loader: a first turn
    timestamp: float  # an integer too large for a float is refused by the decoder
    input_length: int
    output_length: int
    hash_ids: list[int]
    type: str | None = None
    turn: int | None = None


_row = msgspec.json.Decoder(BailianRow)


def read(path: str | Path, block_size: int = DEFAULT_BLOCK_SIZE) -> Iterator[Request]:
    root_of: dict[int, int] = {}

    def to_request(row: BailianRow) -> Request:
        root = root_of.get(row.parent_chat_id, row.chat_id) if row.parent_chat_id >= 0 else row.chat_id
        root_of[row.chat_id] = root
        return Request(
            arrival_s=float(row.timestamp),
            block_keys=_core.chain_ids(key_array(row.hash_ids)),
            prompt_tokens=row.input_length,
            output_tokens=row.output_length,
            block_size=block_size,
            session_id=str(root),
            label=row.type,
        )

    return read_rows(Path(path), _row, to_request)
