"""kv-cache-tester conversations (callanjfox/kv-cache-tester): one Claude Code session per JSON file.

File: ``{id, block_size: 64, hash_id_scope: "local", requests: [...]}``. A request has ``t`` (s from
the conversation's start), ``type`` (``n``, ``s``, or ``subagent`` holding nested ``requests`` whose
``t`` counts from the sub-agent's start; a sub-agent may itself start sub-agents, at any depth, as
upstream's ``flatten_requests`` allows), ``in``/``out`` tokens and ``hash_ids`` of full 64-token
blocks. Every request other than a sub-agent entry needs ``in`` >= 1 (upstream never writes less; a
missing or non-positive ``in`` is refused, naming the file and e.g. ``requests[3].in``) and its
``hash_ids`` (``[]`` for a prompt under one block); each list's ``t`` is non-negative and
non-decreasing (a decreasing one is refused, naming e.g. ``requests[1].requests[2].t``, not sorted).
Input: one conversation (``.json`` or ``.json.gz``), a folder holding them (searched recursively), or a tar
archive of them (``.tar``, ``.tar.gz``/``.tgz``, ``.tar.xz``/``.txz``, ``.tar.bz2``/``.tbz2``: the
names ``ARCHIVE_SUFFIXES`` lists, which format detection uses too), read directly, in one pass. An
archive must end with tar's end-of-archive block and, compressed, with its stream's trailer: one cut
short (even at a member's end, which tarfile alone reads as the end) is refused, not read as fewer
conversations. Gzip is recognised by its magic bytes; a ``.json.gz`` conversation reads exactly as
the ``.json`` it holds (name order ignores the ``.gz``).

With ``hash_id_scope: "local"`` (upstream's, and the default) ids are local to a file, so each
conversation's ids are namespaced: key = ``(n << 32) | id`` where n is the conversation's 1-based
position in name order (file name, then full path); its sub-agents share its namespace. With
``"global"`` an id means the same text in every file of that scope: key = ``id``, shared by every
global conversation and by none of the local ones. Any other scope is refused, naming the file.
There is no global clock: conversations start as a Poisson process of ``rate`` conversations per
second (seeded, exponential gaps, the first at 0), each keeping its own gaps. A conversation's
session id is its ``id``, or ``<id>#<n>`` (n as above) where several files carry the same ``id``, so
that two files never share a session; a sub-agent's is its parent's session id, ``/`` and its ``agent_id``
(``subagent`` if none): ``conv/agent_1``, and ``conv/agent_1/agent_2`` for a sub-agent's sub-agent.
Sub-agent requests, at any depth, carry the label ``claude-code-subagent``; the others ``claude-code``.

Placing conversations on one timeline needs them all, so the reader holds the whole trace, but
compactly: a request is stored as the number of leading keys it shares with its session's previous
request plus its other keys, as uint32 local ids (the archive's 94 M block accesses are 3.5 M such
ids, about 14 MB). Decoding finds the prefix a request shares with its predecessor in the raw JSON
text, so only its new ids are parsed. Every request's ``block_keys`` is a read-only
``np.ndarray[uint64]``: a view of its session's chain buffer (``model.KeyChain``), so a turn that extends the
previous one adds only its new keys, and a caller holding the whole trace (``list(read(...))``)
holds each session's keys about once instead of once per request (the archive's 94 M keys: 754 MB
as full arrays, 162 MB in its sessions' buffers).
"""

from __future__ import annotations

import gzip
import io
import lzma
import tarfile
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgspec
import numpy as np

from wakman.traces.io import DECODE_ERRORS, GZIP_MAGIC, UTF8_BOM, decode_error, open_decompressed
from wakman.traces.model import MAX_ARRIVAL_S, KeyChain, Request, TraceFormatError, validate_request

# The tar archives read (and detected as this format): the compressions tarfile's stream mode reads.
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2")
# A conversation file, plain or gzip-compressed (in a folder or an archive).
CONVERSATION_SUFFIXES = (".json", ".json.gz")

SCOPES = ("local", "global")  # hash_id_scope: ids per file, or shared by every global file
DEFAULT_RATE = 1 / 60.0  # conversations per second: one new Claude Code session a minute
DEFAULT_SEED = 0
_MISSING = msgspec.Raw(b"")  # a request without hash_ids (JSON never decodes to an empty Raw)
# the format's names for a request's fields (errors from validate_request)
_FIELDS = {
    "arrival_s": "t",
    "block_keys": "hash_ids",
    "prompt_tokens": "in",
    "output_tokens": "out",
    "block_size": "block_size",
}


class TesterRequest(msgspec.Struct, kw_only=True):
    t: float
    type: str
    hash_ids: msgspec.Raw = _MISSING  # a JSON list of ints, decoded by _Ids
    requests: list[TesterRequest] = []
    agent_id: str | None = None
    model: str | None = None
    out: int = 0
    # "in" is a Python keyword: mapped below; None = missing (sub-agent entries have none)
    in_: int | None = msgspec.field(default=None, name="in")


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

    def decode(self, raw: bytes, field: str = "hash_ids") -> np.ndarray:
        """``raw``'s ids; an error names ``field`` (the request's path, ``requests[3].hash_ids``)."""
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
            raise TraceFormatError(self.source, 0, field, str(exc)) from exc
        if tail and (min(tail) < 0 or max(tail) >= 1 << 32):
            raise TraceFormatError(self.source, 0, field, "ids must lie in [0, 2**32)")
        ids = np.array(tail, dtype=np.int64)
        if shared:
            ids = np.concatenate((self.ids[:shared], ids))
        self.raw, self.ids = raw, ids
        return ids


class _Stored(NamedTuple):
    """A request without its keys: ``shared`` leading keys of its session's previous request, then
    ``tail`` (local ids, uint32). ``session``: the session id after the conversation's (``""`` for the
    conversation itself, ``"/agent_1"`` for a sub-agent), joined to it once all names are known."""

    arrival_s: float
    session: str
    label: str
    prompt_tokens: int
    output_tokens: int
    block_size: int
    shared: int
    tail: np.ndarray
    where: str  # its path in the file, for errors: "requests[3]", "requests[5].requests[0]"


def is_archive(path: Path) -> bool:
    """Whether ``path`` is read as a tar archive of conversations (by name: ``ARCHIVE_SUFFIXES``)."""
    return path.name.endswith(ARCHIVE_SUFFIXES)


def _unzip(name: str, raw: bytes) -> bytes:
    """The JSON text of a conversation file: gzip (recognised by its magic bytes) decompressed, a
    UTF-8 byte-order mark opening it dropped."""
    if raw.startswith(GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            raise TraceFormatError(name, 0, "-", f"truncated or corrupt compressed data ({exc})") from exc
    return raw.removeprefix(UTF8_BOM)


class _TailReader(io.RawIOBase):
    """A read-only stream over ``raw`` that counts the bytes read and keeps the last ``keep``."""

    def __init__(self, raw: IO[bytes], keep: int = 1 << 16) -> None:
        super().__init__()
        self.raw, self.keep, self.position, self.tail = raw, keep, 0, bytearray()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        buffer[: len(data)] = data
        self.position += len(data)
        self.tail += data
        del self.tail[: max(0, len(self.tail) - self.keep)]
        return len(data)

    def since(self, offset: int) -> bytes | None:
        """The bytes read from ``offset`` on, or None where they are no longer kept."""
        start = len(self.tail) - (self.position - offset)
        return bytes(self.tail[start:]) if start >= 0 else None


def _check_archive_end(path: Path, stream: _TailReader, end: int, members: int) -> None:
    """After tarfile's last member: the archive goes on with a zero block (tar's end-of-archive
    marker), and its compressed stream is whole (read to its end: a cut one raises EOFError).
    tarfile takes an archive cut at a member's end, or a header it cannot parse, for the end."""
    while stream.read(1 << 20):
        pass
    block = (stream.since(end) or b"")[: tarfile.BLOCKSIZE]
    if len(block) < tarfile.BLOCKSIZE or block.count(0) != tarfile.BLOCKSIZE:
        where = f"after its member {members}" if members else "at its start"
        message = f"truncated or corrupt archive: no end-of-archive block {where} (tar byte {end})"
        raise TraceFormatError(path, 0, "-", message)


def _sources(path: Path) -> Iterator[tuple[str, bytes]]:
    """(name, raw JSON) of every conversation, in storage order (callers sort by name)."""
    if path.is_dir():
        files = {
            file for suffix in CONVERSATION_SUFFIXES for file in path.rglob(f"*{suffix}") if file.is_file()
        }
        for file in sorted(files):
            yield str(file), _unzip(str(file), file.read_bytes())
    elif not path.is_file():
        raise TraceFormatError(path, 0, "-", "no such file or folder")
    elif is_archive(path):
        try:
            with open_decompressed(path) as raw:
                stream = _TailReader(raw)
                # one sequential pass: seeking would re-decompress
                with tarfile.open(fileobj=stream, mode="r|") as tar:
                    members = 0
                    for member in tar:
                        members += 1
                        if member.isfile() and member.name.endswith(CONVERSATION_SUFFIXES):
                            handle = tar.extractfile(member)
                            assert handle is not None
                            name = f"{path}!{member.name}"
                            yield name, _unzip(name, handle.read())
                    _check_archive_end(path, stream, tar.offset, members)
        except (tarfile.TarError, EOFError, lzma.LZMAError, zlib.error, OSError) as exc:
            raise TraceFormatError(path, 0, "-", f"truncated or corrupt archive ({exc})") from exc
    else:
        yield str(path), _unzip(str(path), path.read_bytes())


def _flatten(conv: Conversation, source: str) -> list[tuple[float, str, str, TesterRequest, np.ndarray, str]]:
    """The conversation's requests in its own time, as (arrival, session, label, request, local ids,
    its path in the file); sub-agents, at any depth, each their own session (``_Stored.session``)."""
    out: list[tuple[float, str, str, TesterRequest, np.ndarray, str]] = []

    def add(items: list[TesterRequest], offset: float, session: str, label: str, where: str) -> None:
        ids = _Ids(source)
        previous_t = 0.0
        for i, item in enumerate(items):
            if not 0 <= item.t <= MAX_ARRIVAL_S:
                message = f"must be a time in [0, {MAX_ARRIVAL_S:g}] s from its list's start, got {item.t} s"
                raise TraceFormatError(source, 0, f"{where}[{i}].t", message)
            if item.t < previous_t:
                message = f"decreases ({item.t:g} s after {previous_t:g} s): a list is in time order"
                raise TraceFormatError(source, 0, f"{where}[{i}].t", message)
            previous_t = item.t
            if item.type == "subagent":
                inner = f"{session}/{item.agent_id or 'subagent'}"
                add(item.requests, offset + item.t, inner, "claude-code-subagent", f"{where}[{i}].requests")
                continue
            if item.in_ is None or item.in_ <= 0:
                got = "missing" if item.in_ is None else f"got {item.in_}"
                message = f"a request's prompt length must be >= 1 token ({got})"
                raise TraceFormatError(source, 0, f"{where}[{i}].in", message)
            if item.hash_ids is _MISSING:
                message = "missing: a request lists its blocks' ids ([] for a prompt under one block)"
                raise TraceFormatError(source, 0, f"{where}[{i}].hash_ids", message)
            keys = ids.decode(bytes(item.hash_ids), f"{where}[{i}].hash_ids")
            out.append((offset + item.t, session, label, item, keys, f"{where}[{i}]"))

    add(conv.requests, 0.0, "", "claude-code", "requests")
    out.sort(key=lambda r: r[0])
    return out


def _store(conv: Conversation, source: str) -> list[_Stored]:
    """The conversation's requests, each stored against its session's previous request (in arrival
    order, the order they are yielded in); keys still local."""
    previous: dict[str, np.ndarray] = {}
    stored: list[_Stored] = []
    for arrival, session, label, item, ids, where in _flatten(conv, source):
        before = previous.get(session)
        shared = 0
        if before is not None:
            m = min(len(before), len(ids))
            diff = before[:m] != ids[:m]
            shared = int(diff.argmax()) if diff.any() else m
        previous[session] = ids
        tail = ids[shared:].astype(np.uint32)
        assert item.in_ is not None  # _flatten refuses a request without one
        stored.append(
            _Stored(arrival, session, label, item.in_, item.out, conv.block_size, shared, tail, where)
        )
    return stored


def read(path: str | Path, rate: float = DEFAULT_RATE, seed: int = DEFAULT_SEED) -> Iterator[Request]:
    """All conversations on one timeline, in arrival order."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0 conversations per second, got {rate}")
    path = Path(path)
    # (name, source, conversation id, requests, whether its ids are global)
    named: list[tuple[str, str, str, list[_Stored], bool]] = []
    for source, raw in _sources(path):
        try:
            conv = _conversation.decode(raw)
        except DECODE_ERRORS as exc:
            raise decode_error(source, 0, exc) from exc
        if conv.hash_id_scope not in SCOPES:
            raise TraceFormatError(
                source, 0, "hash_id_scope", f"{conv.hash_id_scope!r}: must be one of {', '.join(SCOPES)}"
            )
        name = source.rsplit("!", 1)[-1].removesuffix(".gz")
        named.append((name, source, conv.id, _store(conv, source), conv.hash_id_scope == "global"))
        del conv, raw  # the raw text is held by the decoded ids until here
    if not named:
        raise TraceFormatError(
            path,
            0,
            "-",
            "no conversations found (kv-cache-tester's are .json or .json.gz files, in a folder or a tar "
            "archive); a JSONL trace (Mooncake, AIPerf, Bailian, native) is read from its own file: "
            "give the file, extracted from the archive",
        )
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
    sources = [source for _, source, _, _, _ in named]
    repeated = Counter(conv_id for _, _, conv_id, _, _ in named)
    names = [
        conv_id if repeated[conv_id] == 1 else f"{conv_id}#{c + 1}"
        for c, (_, _, conv_id, _, _) in enumerate(named)
    ]
    # each conversation's key namespace: its own (local ids), or 0, shared by the global ones
    namespaces = [np.uint64(0 if is_global else (c + 1) << 32) for c, (*_, is_global) in enumerate(named)]
    session_ids: dict[tuple[int, str], str] = {}  # one string per session, shared by its requests
    for c, (start, (_, _, _, stored, _)) in enumerate(zip(starts.tolist(), named, strict=True)):
        for i, req in enumerate(stored):
            timeline.append((start + req.arrival_s, c, i, req))
            remaining[c, req.session] = remaining.get((c, req.session), 0) + 1
            session_ids.setdefault((c, req.session), names[c] + req.session)
    del named
    timeline.sort(key=lambda x: x[:3])
    chains: dict[tuple[int, str], KeyChain] = {}  # each open session's keys so far
    previous_arrival, block_size = 0.0, None
    for arrival, c, _, req in timeline:
        session = (c, req.session)
        tail = req.tail.astype(np.uint64) | namespaces[c]
        chain = chains.get(session)
        if chain is None:
            chain = chains[session] = KeyChain()
        keys = chain.extend(req.shared, tail)
        remaining[session] -= 1
        if not remaining[session]:  # the session's last request: its chain lives on in the views
            del chains[session]
        out = Request(
            arrival_s=arrival,
            block_keys=keys,
            prompt_tokens=req.prompt_tokens,
            output_tokens=req.output_tokens,
            block_size=req.block_size,
            session_id=session_ids[session],
            label=req.label,
        )
        try:
            validate_request(out, sources[c], 0, previous_arrival, _FIELDS, trace_block_size=block_size)
        except TraceFormatError as exc:  # name the request in its file, as the reader's own checks do
            field = exc.field if exc.field == "block_size" else f"{req.where}.{exc.field}"
            raise TraceFormatError(exc.path, 0, field, exc.message) from None
        previous_arrival, block_size = arrival, out.block_size
        yield out


def conversation_count(path: str | Path) -> int:
    return sum(1 for _ in _sources(Path(path)))
