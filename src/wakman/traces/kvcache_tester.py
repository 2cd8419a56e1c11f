"""kv-cache-tester conversations (callanjfox/kv-cache-tester): one Claude Code session per JSON file.

File: ``{id, block_size: 64, hash_id_scope: "local", requests: [...]}``. A request has ``t`` (s from
the conversation's start), ``type`` (``n``, ``s``, or ``subagent`` holding nested ``requests`` whose
``t`` counts from the sub-agent's ``t``), ``in``/``out`` tokens and ``hash_ids`` of full 64-token
blocks. Input: one file, a folder of them, or the ``.tar.xz``/``.tar.gz`` archive, read directly.

Ids are local to a file, so each conversation's ids are namespaced: key = ``(n << 32) | id`` where n
is the conversation's 1-based position in name order. There is no global clock: conversations start
as a Poisson process of ``rate`` conversations per second (seeded, exponential gaps, the first at 0),
each keeping its own gaps. Sub-agent requests carry the session id ``<conversation>/<agent_id>`` and
the label ``claude-code-subagent``; the others ``claude-code``.

Every request's ``block_keys`` is a fresh ``np.ndarray[uint64]``. Placing conversations on one
timeline needs them all, so the reader holds the whole trace, but compactly: a request is stored as
the number of leading keys it shares with its session's previous request plus its other keys, as
uint32 local ids (the archive's 94 M block accesses are 3.5 M such ids, about 14 MB); full arrays are
rebuilt as requests are yielded. Decoding finds the prefix a request shares with its predecessor in
the raw JSON text, so only its new ids are parsed.
"""

from __future__ import annotations

import lzma
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import msgspec
import numpy as np

from wakman.traces.model import MAX_ARRIVAL_S, Request, TraceFormatError, validate_request

DEFAULT_RATE = 1 / 60.0  # conversations per second: one new Claude Code session a minute
DEFAULT_SEED = 0
_NO_IDS = msgspec.Raw(b"[]")


class TesterRequest(msgspec.Struct, kw_only=True):
    t: float
    type: str
    hash_ids: msgspec.Raw = _NO_IDS  # a JSON list of ints, decoded by _Ids
    requests: list[TesterRequest] = []
    agent_id: str | None = None
    model: str | None = None
    out: int = 0
    # "in" is a Python keyword: mapped below
    in_: int = msgspec.field(default=0, name="in")


class Conversation(msgspec.Struct, kw_only=True):
    id: str
    block_size: int
    requests: list[TesterRequest]
    hash_id_scope: str = "local"


_conversation = msgspec.json.Decoder(Conversation)
_id_list = msgspec.json.Decoder(list[int])


class _Ids:
    """Decodes a run of ``hash_ids`` lists, reusing the previous list's ids for the leading text the
    two share: ids that end at a comma inside the common byte prefix are equal (the previous text
    decoded as a list of ints), so only the rest is decoded. Output: int64 arrays of ids in [0, 2**32)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.raw = b""
        self.ids = np.zeros(0, dtype=np.int64)

    def decode(self, raw: bytes) -> np.ndarray:
        shared = start = 0
        m = min(len(raw), len(self.raw))
        if m > 1:
            diff = np.frombuffer(raw, np.uint8, m) != np.frombuffer(self.raw, np.uint8, m)
            common = int(diff.argmax()) if diff.any() else m
            cut = raw.rfind(b",", 0, common)
            if cut > 0:
                shared, start = raw.count(b",", 0, cut + 1), cut + 1
        try:
            tail = _id_list.decode(b"[" + raw[start:] if start else raw)
        except msgspec.MsgspecError as exc:
            raise TraceFormatError(self.source, 0, "hash_ids", str(exc)) from exc
        if tail and (min(tail) < 0 or max(tail) >= 1 << 32):
            raise TraceFormatError(self.source, 0, "hash_ids", "local ids must lie in [0, 2**32)")
        ids = np.array(tail, dtype=np.int64)
        if shared:
            ids = np.concatenate((self.ids[:shared], ids))
        self.raw, self.ids = raw, ids
        return ids


class _Stored(NamedTuple):
    """A request without its keys: ``shared`` leading keys of its session's previous request, then
    ``tail`` (local ids, uint32)."""

    arrival_s: float
    session: str
    label: str
    prompt_tokens: int
    output_tokens: int
    block_size: int
    shared: int
    tail: np.ndarray


def _sources(path: Path) -> Iterator[tuple[str, bytes]]:
    """(name, raw JSON) of every conversation, in storage order (callers sort by name)."""
    if path.is_dir():
        for file in sorted(path.rglob("*.json")):
            yield str(file), file.read_bytes()
    elif path.suffix in (".xz", ".gz", ".tar", ".tgz", ".bz2") and tarfile.is_tarfile(path):
        try:
            with tarfile.open(path, "r|*") as tar:  # one sequential pass: seeking would re-decompress
                for member in tar:
                    if member.isfile() and member.name.endswith(".json"):
                        handle = tar.extractfile(member)
                        assert handle is not None
                        yield f"{path}!{member.name}", handle.read()
        except (tarfile.TarError, EOFError, lzma.LZMAError, zlib.error, OSError) as exc:
            raise TraceFormatError(path, 0, "-", f"truncated or corrupt archive ({exc})") from exc
    elif path.is_file():
        yield str(path), path.read_bytes()
    else:
        raise TraceFormatError(path, 0, "-", "no such file or folder")


def _flatten(conv: Conversation, source: str) -> list[tuple[float, str, str, TesterRequest, np.ndarray]]:
    """The conversation's requests in its own time, as (arrival, session, label, request, local ids)."""
    out: list[tuple[float, str, str, TesterRequest, np.ndarray]] = []

    def add(items: list[TesterRequest], offset: float, session: str | None, label: str) -> None:
        ids = _Ids(source)
        for item in items:
            if item.type == "subagent" and session is None:
                add(item.requests, item.t, f"{conv.id}/{item.agent_id or 'subagent'}", "claude-code-subagent")
            else:
                ids_now = ids.decode(bytes(item.hash_ids))
                out.append((offset + item.t, session or conv.id, label, item, ids_now))

    add(conv.requests, 0.0, None, "claude-code")
    out.sort(key=lambda r: r[0])
    return out


def _store(conv: Conversation, source: str) -> list[_Stored]:
    """The conversation's requests, each stored against its session's previous request (in arrival
    order, the order they are yielded in); keys still local."""
    previous: dict[str, np.ndarray] = {}
    stored: list[_Stored] = []
    for arrival, session, label, item, ids in _flatten(conv, source):
        before = previous.get(session)
        shared = 0
        if before is not None:
            m = min(len(before), len(ids))
            diff = before[:m] != ids[:m]
            shared = int(diff.argmax()) if diff.any() else m
        previous[session] = ids
        tail = ids[shared:].astype(np.uint32)
        prompt = max(item.in_, 1)
        stored.append(_Stored(arrival, session, label, prompt, item.out, conv.block_size, shared, tail))
    return stored


def read(path: str | Path, rate: float = DEFAULT_RATE, seed: int = DEFAULT_SEED) -> Iterator[Request]:
    """All conversations on one timeline, in arrival order."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0 conversations per second, got {rate}")
    path = Path(path)
    named: list[tuple[str, str, list[_Stored]]] = []
    for source, raw in _sources(path):
        try:
            conv = _conversation.decode(raw)
        except msgspec.MsgspecError as exc:
            field = str(exc).split("at `$.", 1)[1].split("`", 1)[0] if "at `$." in str(exc) else "-"
            raise TraceFormatError(source, 0, field, str(exc)) from exc
        named.append((source.rsplit("!", 1)[-1], source, _store(conv, source)))
        del conv, raw  # the raw text is held by the decoded ids until here
    if not named:
        raise TraceFormatError(path, 0, "-", "no conversations found")
    named.sort(key=lambda x: (Path(x[0]).name, x[0]))
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=len(named))
    starts = np.concatenate(([0.0], np.cumsum(gaps[1:])))
    if starts[-1] > MAX_ARRIVAL_S:
        raise ValueError(
            f"--rate {rate:g} conversations per second starts the last of {len(named):,} conversations "
            f"{starts[-1]:.3g} s in, past ten years: give a higher rate"
        )
    timeline: list[tuple[float, int, int, _Stored]] = []
    remaining: dict[tuple[int, str], int] = {}  # requests still to yield, per session
    sources = [source for _, source, _ in named]
    for c, (start, (_, _, stored)) in enumerate(zip(starts.tolist(), named, strict=True)):
        for i, req in enumerate(stored):
            timeline.append((start + req.arrival_s, c, i, req))
            remaining[c, req.session] = remaining.get((c, req.session), 0) + 1
    del named
    timeline.sort(key=lambda x: x[:3])
    last: dict[tuple[int, str], np.ndarray] = {}  # each open session's latest keys
    previous_arrival = 0.0
    for arrival, c, _, req in timeline:
        session = (c, req.session)
        tail = req.tail.astype(np.uint64) | np.uint64((c + 1) << 32)  # conversation c + 1's namespace
        keys = np.concatenate((last[session][: req.shared], tail)) if req.shared else tail
        remaining[session] -= 1
        if remaining[session]:
            last[session] = keys
        else:
            last.pop(session, None)
        out = Request(
            arrival_s=arrival,
            block_keys=keys,
            prompt_tokens=req.prompt_tokens,
            output_tokens=req.output_tokens,
            block_size=req.block_size,
            session_id=req.session,
            label=req.label,
        )
        validate_request(out, sources[c], 0, previous_arrival)
        previous_arrival = arrival
        yield out


def conversation_count(path: str | Path) -> int:
    return sum(1 for _ in _sources(Path(path)))
