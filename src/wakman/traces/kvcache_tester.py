"""kv-cache-tester conversations (callanjfox/kv-cache-tester): one Claude Code session per JSON file.

File: ``{id, block_size: 64, hash_id_scope: "local", requests: [...]}``. A request has ``t`` (s from
the conversation's start), ``type`` (``n``, ``s``, or ``subagent`` holding nested ``requests`` whose
``t`` counts from the sub-agent's ``t``), ``in``/``out`` tokens and ``hash_ids`` of full 64-token
blocks. Input: one file, a folder of them, or the ``.tar.xz``/``.tar.gz`` archive, read directly.

Ids are local to a file, so each conversation's ids are namespaced: key = ``(n << 32) | id`` where n
is the conversation's 1-based position in name order. There is no global clock: conversations start
as a Poisson process of ``rate`` conversations per second (seeded, exponential gaps, the first at 0),
each keeping its own gaps. Sub-agent requests carry the session id ``<conversation>/<agent_id>`` and
the label ``claude-code-subagent``; the others ``claude-code``. Keys are held as ``array('q')``
(8 bytes per block): the archive's 94 M block accesses take about 0.8 GB.
"""

from __future__ import annotations

import tarfile
from array import array
from collections.abc import Iterator
from pathlib import Path

import msgspec

from wakman.traces.model import Request, TraceFormatError

DEFAULT_RATE = 1 / 60.0  # conversations per second: one new Claude Code session a minute
DEFAULT_SEED = 0


class TesterRequest(msgspec.Struct, kw_only=True):
    t: float
    type: str
    hash_ids: list[int] = []
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


def _sources(path: Path) -> Iterator[tuple[str, bytes]]:
    """(name, raw JSON) of every conversation, in storage order (callers sort by name)."""
    if path.is_dir():
        for file in sorted(path.rglob("*.json")):
            yield str(file), file.read_bytes()
    elif path.suffix in (".xz", ".gz", ".tar", ".tgz", ".bz2") and tarfile.is_tarfile(path):
        with tarfile.open(path, "r|*") as tar:  # one sequential pass: seeking would re-decompress
            for member in tar:
                if member.isfile() and member.name.endswith(".json"):
                    handle = tar.extractfile(member)
                    assert handle is not None
                    yield f"{path}!{member.name}", handle.read()
    elif path.is_file():
        yield str(path), path.read_bytes()
    else:
        raise TraceFormatError(path, 0, "-", "no such file or folder")


def _flatten(conv: Conversation, source: str) -> list[Request]:
    """The conversation's requests in its own time, keys still local (int64 arrays)."""
    import numpy as np

    out: list[Request] = []

    def add(item: TesterRequest, offset: float, session: str, label: str) -> None:
        ids = np.array(item.hash_ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= 1 << 32):
            raise TraceFormatError(source, 0, "hash_ids", "local ids must lie in [0, 2**32)")
        out.append(
            Request(
                arrival_s=offset + item.t,
                block_keys=ids,
                prompt_tokens=max(item.in_, 1),
                output_tokens=item.out,
                block_size=conv.block_size,
                session_id=session,
                label=label,
            )
        )

    for item in conv.requests:
        if item.type == "subagent":
            session = f"{conv.id}/{item.agent_id or 'subagent'}"
            for nested in item.requests:
                add(nested, item.t, session, "claude-code-subagent")
        else:
            add(item, 0.0, conv.id, "claude-code")
    out.sort(key=lambda r: r.arrival_s)
    return out


def read(path: str | Path, rate: float = DEFAULT_RATE, seed: int = DEFAULT_SEED) -> Iterator[Request]:
    """All conversations on one timeline, in arrival order."""
    import numpy as np

    if rate <= 0:
        raise ValueError(f"rate must be > 0 conversations per second, got {rate}")
    path = Path(path)
    named: list[tuple[str, list[Request]]] = []
    for source, raw in _sources(path):
        try:
            conv = _conversation.decode(raw)
        except msgspec.MsgspecError as exc:
            field = str(exc).split("at `$.", 1)[1].split("`", 1)[0] if "at `$." in str(exc) else "-"
            raise TraceFormatError(source, 0, field, str(exc)) from exc
        named.append((source.rsplit("!", 1)[-1], _flatten(conv, source)))
    if not named:
        raise TraceFormatError(path, 0, "-", "no conversations found")
    named.sort(key=lambda x: (Path(x[0]).name, x[0]))
    conversations = [requests for _, requests in named]
    for n, requests in enumerate(conversations, start=1):
        for req in requests:
            req.block_keys = array("q", (req.block_keys | (n << 32)).tobytes())
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=len(conversations))
    starts = np.concatenate(([0.0], np.cumsum(gaps[1:])))
    timeline: list[tuple[float, int, int, Request]] = []
    for c, (start, requests) in enumerate(zip(starts.tolist(), conversations, strict=True)):
        for i, req in enumerate(requests):
            req.arrival_s = start + req.arrival_s
            timeline.append((req.arrival_s, c, i, req))
    timeline.sort(key=lambda x: x[:3])
    for entry in timeline:
        yield entry[3]


def conversation_count(path: str | Path) -> int:
    return sum(1 for _ in _sources(Path(path)))
