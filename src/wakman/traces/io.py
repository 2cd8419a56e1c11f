"""Line-oriented reading (plain, gzip, bzip2 or xz, with line numbers) and all-or-nothing writing."""

from __future__ import annotations

import bz2
import errno
import gzip
import lzma
import os
import secrets
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

import msgspec

from wakman.traces.model import MOONCAKE_FIELDS, KeyRangeError, Request, TraceFormatError, validate_request

GZIP_MAGIC = b"\x1f\x8b"
# each compression's magic bytes -> its opener (reading); a file suffix -> its stream (writing)
_READERS: dict[bytes, Callable[..., IO[bytes]]] = {
    GZIP_MAGIC: gzip.open,
    b"BZh": bz2.open,
    b"\xfd7zXZ\x00": lzma.open,
}


# compressions read by none of the above: refused by name rather than read as bad JSON
UNREAD_MAGIC = {
    b"PK\x03\x04": "zip",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\x04\x22\x4d\x18": "lz4",
    b"7z\xbc\xaf": "7z",
}
# the suffixes a writer compresses; any other compression suffix is refused (it would hold plain text)
WRITTEN_SUFFIXES = (".gz", ".bz2", ".xz")
UNWRITTEN_SUFFIXES = (".zst", ".zstd", ".zip", ".lz4", ".7z", ".tgz", ".tar", ".tbz2", ".txz")


def _opener(path: Path) -> Callable[..., IO[bytes]]:
    """How to read ``path``: by its first bytes (gzip, bzip2, xz), else as plain bytes; a zip, zstd,
    lz4 or 7z file is a ``TraceFormatError`` naming its compression."""
    with open(path, "rb") as f:
        head = f.read(6)
    for magic, name in UNREAD_MAGIC.items():
        if head.startswith(magic):
            message = (
                f"{name}-compressed, which wakman does not read: decompress it, or recompress with gzip or xz"
            )
            raise TraceFormatError(path, 0, "-", message)
    return next((opener for magic, opener in _READERS.items() if head.startswith(magic)), open)


def open_decompressed(path: Path) -> IO[bytes]:
    """``path`` opened for reading its bytes, decompressed by its first bytes (gzip, bzip2, xz).
    Reading a truncated compressed stream to its end raises ``EOFError``."""
    return _opener(path)(path, "rb")


def iter_lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, line)`` for non-blank lines; gzip, bzip2 and xz are detected by their
    magic bytes. A UTF-8 byte-order mark opening the text (Windows tools write one) is dropped.

    A missing file, a folder, a pipe or device (readers may open a trace more than once), an empty
    file, a file that cannot be read and a truncated or corrupt compressed stream raise
    ``TraceFormatError``.
    """
    path = Path(path)
    if path.is_dir():
        raise TraceFormatError(path, 0, "-", "is a folder, not a trace file")
    if not path.exists():
        raise TraceFormatError(path, 0, "-", "no such file")
    if not path.is_file():
        message = "not a regular file (a pipe or a device; a trace may be read twice): save it first"
        raise TraceFormatError(path, 0, "-", message)
    count = 0
    number = 0
    try:
        with open_decompressed(path) as f:
            for number, raw in enumerate(f, start=1):
                line = (raw.removeprefix(UTF8_BOM) if number == 1 else raw).strip()
                if line:
                    count += 1
                    yield number, line
    except (EOFError, zlib.error, lzma.LZMAError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:  # the file system's (permissions, I/O)
            raise TraceFormatError(path, number + 1, "-", f"cannot be read ({exc.strerror})") from exc
        # the data's (gzip's BadGzipFile and bz2's "Invalid data stream" are OSErrors without errno)
        raise TraceFormatError(
            path, number + 1, "-", f"truncated or corrupt compressed data ({exc})"
        ) from exc
    if count == 0:
        raise TraceFormatError(path, 0, "-", "empty trace: no rows")


UTF8_BOM = b"\xef\xbb\xbf"
# what a decoder raises on a bad line: msgspec's errors, and Python's on JSON nested past its stack
DECODE_ERRORS = (msgspec.MsgspecError, RecursionError)


def decode_error(path: Path | str, line: int, exc: Exception) -> TraceFormatError:
    """Turn a decoder's error (``DECODE_ERRORS``) into one that names the field (``$.field``, a
    missing or unknown field in msgspec's message); only a line that is not JSON is called so."""
    text = str(exc)
    field = "-"
    if isinstance(exc, RecursionError):
        text = "JSON nested too deeply to read"
    elif "at `$." in text:
        field = text.split("at `$.", 1)[1].split("`", 1)[0]
    elif "required field `" in text or "unknown field `" in text:
        field = text.split("field `", 1)[1].split("`", 1)[0]
    elif isinstance(exc, msgspec.DecodeError) and not isinstance(exc, msgspec.ValidationError):
        text = f"not valid JSON ({text})"
    return TraceFormatError(path, line, field, text)


def decode_rows(
    path: Path, decoder: msgspec.json.Decoder, lines: Iterator[tuple[int, bytes]] | None = None
) -> Iterator[tuple[int, object]]:
    """``(line_number, row)`` for each line of ``path`` decoded by ``decoder``; errors name the field."""
    for number, line in lines if lines is not None else iter_lines(path):
        try:
            yield number, decoder.decode(line)
        except DECODE_ERRORS as exc:
            raise decode_error(path, number, exc) from exc


def read_rows(
    path: Path,
    decoder: msgspec.json.Decoder,
    to_request: Callable[[object], Request],
    lines: Iterator[tuple[int, bytes]] | None = None,
    fields: dict[str, str] = MOONCAKE_FIELDS,
) -> Iterator[Request]:
    """Decode, convert and check every row by the reader rules (file order is arrival order); a key
    ``to_request`` cannot hold (``KeyRangeError``) is reported with the file and line; errors name
    the fields as the format does (``fields``, ``validate_request``'s)."""
    previous, block_size = 0.0, None
    for number, row in decode_rows(path, decoder, lines):
        try:
            req = to_request(row)
        except KeyRangeError as exc:
            raise TraceFormatError(path, number, exc.field, exc.message) from None
        validate_request(req, path, number, previous, fields, trace_block_size=block_size)
        previous, block_size = req.arrival_s, req.block_size
        yield req


def _new_temp(path: Path, names: list[Path]) -> Path:
    """Create an empty hidden ``.part`` file beside ``path``, mode 0666 less the umask (what any new
    file gets; ``tempfile`` would make it 0600). Its name is appended to ``names`` before the file
    exists, so a caller interrupted at any point (a Ctrl-C as the file appears) can remove it."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.part"
        names.append(tmp)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            names.pop()  # another's file: not ours to remove
            continue
        return tmp


def _target(path: Path) -> tuple[Path, bool]:
    """Where ``path``'s content goes, and whether it is written in place.

    A process's stream (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``: a link chain through
    ``/proc`` or ``/dev/fd``, which may end at the regular file a shell redirected it to) and an
    existing path that is not a regular file (a FIFO, a device) are written in place; any other
    link's final target is replaced, the link kept."""
    hop = Path(os.path.abspath(path))
    for _ in range(40):  # the kernel's own limit on a link chain
        if _is_stream(hop):
            return path, True
        if not hop.is_symlink():
            break
        hop = Path(os.path.abspath(hop.parent / os.readlink(hop)))
    real = Path(os.path.realpath(path))
    if real.exists() and not real.is_file():
        return path, True
    return real, False


def _is_stream(path: Path) -> bool:
    """A process's file descriptor: ``/dev/fd/N`` or ``/proc/<pid or self>/fd/N``."""
    parts = path.parts
    return parts[1:3] == ("dev", "fd") or (len(parts) > 3 and parts[1] == "proc" and parts[3] == "fd")


def _make_parents(folder: Path, created: list[Path]) -> None:
    """Create ``folder`` and its missing parents, shallowest first, each put at the front of
    ``created`` as it is made (deepest first, so a failure part way leaves the ones made listed)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir(exist_ok=True)
        created.insert(0, made)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A path to write ``path``'s content to, moved onto ``path`` only once the block succeeds.

    The file is a hidden ``.part`` beside ``path`` (beside a link's final target), created with the
    user's umask; on any exception (Ctrl-C included) it is removed, with any folder created for it,
    and ``path`` is left as it was: never a half-written output. A process's stream
    (``/dev/stdout``) or an existing path that is not a regular file (a FIFO) is written in place,
    never renamed over (``_target``); a folder is refused. OS errors name ``path``.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
    try:
        target, in_place = _target(path)
        if in_place:
            yield path
            return
        created: list[Path] = []
        temps: list[Path] = []  # named before it exists: removed whenever the block is interrupted
        try:
            _make_parents(target.parent, created)
            tmp = _new_temp(target, temps)
            yield tmp
            os.replace(tmp, target)
        except BaseException:
            for name in temps:
                name.unlink(missing_ok=True)
            for folder in created:  # deepest first; only what this call made, only if still empty
                try:
                    folder.rmdir()
                except OSError:
                    break
            raise
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


@contextmanager
def atomic_paths(*paths: str | Path) -> Iterator[list[Path]]:
    """``atomic_path`` for several outputs at once: they appear together once the block succeeds, or
    none of them does. The finished files are moved in one after another with Ctrl-C and SIGTERM
    held back (in the main thread: they arrive once every file is in place), so an interrupt never
    leaves some outputs new and others old; an OS error in the middle of the moves (a folder made
    read-only meanwhile) still can."""
    with ExitStack() as stack:
        yield [stack.enter_context(atomic_path(path)) for path in paths]
        with _interrupts_held():
            stack.close()


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back for the block, then delivered (``raise_signal``), in the main
    thread (the only one whose Python handlers run); a signal whose handler Python does not know is
    left alone."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = [sig for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) is not None]
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)


@contextmanager
def atomic_output(path: str | Path) -> Iterator[IO[bytes]]:
    """A binary stream that becomes ``path`` only on success (``atomic_path``); ``.gz``, ``.bz2`` and
    ``.xz`` compress, in any case (the same requests give the same bytes); an archive's or another
    compression's name (``.tar.gz``, ``.zip``, ...) is refused."""
    path = Path(path)
    suffix = path.suffix.lower()  # .GZ compresses as .gz does (it was written as plain text)
    # .tar.gz: an archive's name (x.tar.jsonl is not)
    tar = suffix in WRITTEN_SUFFIXES and len(path.suffixes) > 1 and path.suffixes[-2].lower() == ".tar"
    if suffix in UNWRITTEN_SUFFIXES or tar:
        shown = "".join(path.suffixes[-2:]) if tar else path.suffix
        raise ValueError(
            f"{path}: {shown} is not a format wakman writes (it would hold something else); "
            f"name it .jsonl, or add {', '.join(WRITTEN_SUFFIXES)}"
        )
    with atomic_path(path) as target, open(target, "wb") as raw:
        if suffix == ".gz":
            # the header names the output, not the hidden .part file
            name = path.name[: -len(".gz")]
            with gzip.GzipFile(filename=name, fileobj=raw, mode="wb", mtime=0) as gz:
                yield gz
        elif suffix == ".bz2":
            with bz2.BZ2File(raw, "wb") as bz:
                yield bz
        elif suffix == ".xz":
            with lzma.LZMAFile(raw, "wb") as xz:
                yield xz
        else:
            yield raw


def _enc_hook(obj: object) -> object:
    if hasattr(obj, "tolist"):
        return obj.tolist()  # array('q'), numpy arrays
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


JSON_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def seconds_to_ms(seconds: float) -> int | float:
    """Milliseconds for trace files: rounded to the microsecond, an int when whole."""
    ms = round(seconds * 1000.0, 3)
    return int(ms) if ms == int(ms) else ms
