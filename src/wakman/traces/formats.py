"""The trace formats wakman reads and writes, by name, and format detection."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wakman.traces import aiperf_sessions, bailian, kvcache_tester, mooncake, native
from wakman.traces.io import iter_lines
from wakman.traces.model import Request


@dataclass(frozen=True)
class TraceFormat:
    name: str
    read: Callable[..., Iterator[Request]]
    write: Callable[[Iterable[Request], Path], int] | None
    description: str


FORMATS: dict[str, TraceFormat] = {
    f.name: f
    for f in (
        TraceFormat("native", native.read, native.write, "wakman's own versioned JSONL"),
        TraceFormat("mooncake", mooncake.read, mooncake.write, "Mooncake / AIPerf mooncake_trace rows"),
        TraceFormat("aiperf-sessions", aiperf_sessions.read, aiperf_sessions.write, "AIPerf session rows"),
        TraceFormat("kv-cache-tester", kvcache_tester.read, None, "kv-cache-tester conversations"),
        TraceFormat("bailian", bailian.read, None, "Alibaba Bailian usage trace rows"),
    )
}


def detect_format(path: str | Path) -> str:
    """Guess a trace's format from its shape: folders, tar archives (the names the kv-cache-tester
    reader opens as archives) and ``.json`` / ``.json.gz`` files are kv-cache-tester; JSONL by keys."""
    path = Path(path)
    if path.is_dir() or kvcache_tester.is_archive(path):
        return "kv-cache-tester"
    lines = iter_lines(path)
    try:  # the generator's file is closed at once, not at garbage collection
        return _detect_lines(path, lines)
    finally:
        lines.close()


def _detect_lines(path: Path, lines: Iterator[tuple[int, bytes]]) -> str:
    _, first = next(lines)
    if path.name.endswith(kvcache_tester.CONVERSATION_SUFFIXES) and not _is_jsonl_row(first):
        return "kv-cache-tester"
    if b'"wakman-trace"' in first or (b'"arrival_s"' in first and b'"block_keys"' in first):
        return "native"  # (a native row without its header: the native reader says what is missing)
    if b'"chat_id"' in first:
        return "bailian"
    # AIPerf session rows: a "session_id" (possibly after rows without one), or a later turn's "delay";
    # plain Mooncake rows carry neither (the aiperf-sessions reader sorts rows by arrival, which a
    # plain Mooncake file, read as it streams, must already be in)
    if b'"delay"' in first or b'"session_id"' in first:
        return "aiperf-sessions"
    for number, line in lines:
        if b'"delay"' in line or b'"session_id"' in line:
            return "aiperf-sessions"
        if number > 1000:
            break
    return "mooncake"


def _is_jsonl_row(first: bytes) -> bool:
    """The first line is one whole trace row (Mooncake, AIPerf, Bailian or native), not the start
    of a kv-cache-tester conversation (an object holding ``requests``, often over many lines)."""
    whole = first.startswith(b"{") and first.endswith(b"}") and b'"requests"' not in first
    return whole and any(key in first for key in (b'"hash_ids"', b'"block_keys"', b'"wakman-trace"'))


def read_trace(path: str | Path, fmt: str | None = None, **options: Any) -> Iterator[Request]:
    """Stream the requests of ``path`` (format detected when ``fmt`` is None)."""
    check_format(fmt)
    name = fmt or detect_format(path)
    return FORMATS[name].read(path, **options)


def check_format(fmt: str | None, given_as: str = "format") -> None:
    """``fmt`` (None: detect it) is a trace format, else a ``ValueError`` naming ``given_as`` (the
    argument, or the command line's flag)."""
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"{given_as} {fmt!r}: unknown trace format; choose from {', '.join(FORMATS)}")


def write_trace(requests: Iterable[Request], path: str | Path, fmt: str) -> int:
    if fmt not in FORMATS or FORMATS[fmt].write is None:
        writable = [n for n, f in FORMATS.items() if f.write]
        raise ValueError(f"cannot write format {fmt!r}; writable: {', '.join(writable)}")
    return FORMATS[fmt].write(requests, Path(path))
