"""wakman's own JSONL trace: a versioned header line, then one ``Request`` object per line.

    {"format": "wakman-trace", "version": 1}
    {"arrival_s": 0.0, "block_keys": [1, 2], "prompt_tokens": 1000, "output_tokens": 20, "block_size": 512}

Fields and units are those of ``wakman.traces.model.Request``; keys are read into uint64 arrays (a
key outside [0, 2**64) is an error) and written as JSON ints. The ``block_keys`` of a request with a
``session_id`` are a read-only view of its session's ``KeyChain``, sharing the prefix it has in
common with the session's previous request, so a reader holding a multi-turn trace holds each
session's context about once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from wakman.traces.io import DECODE_ERRORS, JSON_ENCODER, atomic_output, decode_error, iter_lines, read_rows
from wakman.traces.model import REQUEST_FIELDS, KeyChain, Request, TraceFormatError, key_array, key_list

FORMAT_NAME = "wakman-trace"
VERSION = 1


class Header(msgspec.Struct):
    format: str
    version: int


class NativeRow(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    arrival_s: float
    block_keys: list[int]
    prompt_tokens: int
    output_tokens: int
    block_size: int
    session_id: str | None = None
    label: str | None = None
    output_keys: list[int] = []


_header = msgspec.json.Decoder(Header)
_row = msgspec.json.Decoder(NativeRow)


def read(path: str | Path) -> Iterator[Request]:
    path = Path(path)
    lines = iter_lines(path)
    number, first = next(lines)
    try:
        header = _header.decode(first)
    except DECODE_ERRORS as exc:
        expected = JSON_ENCODER.encode(Header(FORMAT_NAME, VERSION)).decode()
        detail = decode_error(path, number, exc).message
        message = f"not a wakman trace header ({detail}): a native trace starts with the line {expected}"
        raise TraceFormatError(path, number, "format", message) from exc
    if header.format != FORMAT_NAME or header.version != VERSION:
        raise TraceFormatError(
            path,
            number,
            "version",
            f"expected {FORMAT_NAME} version {VERSION}, got {header.format} {header.version}",
        )
    chains: dict[str, KeyChain] = {}
    yield from read_rows(path, _row, lambda row: _to_request(row, chains), lines, REQUEST_FIELDS)


def _to_request(row: NativeRow, chains: dict[str, KeyChain]) -> Request:
    keys = key_array(row.block_keys, "block_keys")
    if row.session_id is not None:
        chain = chains.get(row.session_id)
        if chain is None:
            chain = chains[row.session_id] = KeyChain()
        keys = chain.follow(keys)
    return Request(
        arrival_s=row.arrival_s,
        block_keys=keys,
        prompt_tokens=row.prompt_tokens,
        output_tokens=row.output_tokens,
        block_size=row.block_size,
        session_id=row.session_id,
        label=row.label,
        output_keys=key_array(row.output_keys, "output_keys"),
    )


def write(requests: Iterable[Request], path: str | Path) -> int:
    count = 0
    with atomic_output(path) as out:
        out.write(JSON_ENCODER.encode(Header(FORMAT_NAME, VERSION)) + b"\n")
        for req in requests:
            # plain lists, so arrays and lists write the same bytes (an empty output_keys is omitted)
            row = NativeRow(
                arrival_s=req.arrival_s,
                block_keys=key_list(req.block_keys),
                prompt_tokens=req.prompt_tokens,
                output_tokens=req.output_tokens,
                block_size=req.block_size,
                session_id=req.session_id,
                label=req.label,
                output_keys=key_list(req.output_keys),
            )
            out.write(JSON_ENCODER.encode(row) + b"\n")
            count += 1
    return count
