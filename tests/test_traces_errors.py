"""Bad input: one clear error naming file, line and field; non-zero exit; never a half-written output."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from wakman.cli.main import app
from wakman.traces import FORMATS, TraceFormatError, read_trace

GOOD = {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]}


def rows(*items) -> str:
    return "\n".join(i if isinstance(i, str) else json.dumps(i) for i in items) + "\n"


CASES = {
    "malformed line": (rows(GOOD, '{"timestamp": 1, "input_length"'), 2, "-"),
    "missing field": (rows(GOOD, {"timestamp": 5, "input_length": 10, "output_length": 1}), 2, "hash_ids"),
    "wrong type": (rows(GOOD, {**GOOD, "timestamp": "soon"}), 2, "timestamp"),
    "wrong element type": (rows(GOOD, {**GOOD, "hash_ids": [1, "x"]}), 2, "hash_ids[1]"),
    "negative timestamp": (rows({**GOOD, "timestamp": -5}), 1, "timestamp"),
    "decreasing timestamp": (rows({**GOOD, "timestamp": 10}, {**GOOD, "timestamp": 3}), 2, "timestamp"),
    "too many blocks": (rows({**GOOD, "hash_ids": [1, 2, 3, 4]}), 1, "hash_ids"),
    "zero prompt": (rows({**GOOD, "input_length": 0, "hash_ids": []}), 1, "input_length"),
    # absurd values: refused with the line, never handed to the core (bad_cast, a vector past its
    # size, MemoryError) nor simulated for ever
    "input 1e26 tokens": (rows({**GOOD, "input_length": 10**26}), 1, "input_length"),
    "input 2**63 - 1 tokens": (rows({**GOOD, "input_length": 2**63 - 1}), 1, "input_length"),
    "output 2**63 - 1 tokens": (rows({**GOOD, "output_length": 2**63 - 1}), 1, "output_length"),
    "timestamp 1e308": (rows(GOOD, {**GOOD, "timestamp": 1e308}), 2, "timestamp"),
    "timestamp beyond a float": (rows(GOOD, {**GOOD, "timestamp": 10**400}), 2, "timestamp"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_bad_input_names_file_line_and_field(tmp_path, case):
    text, line, field = CASES[case]
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(path, "mooncake"))
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field)
    assert f"{path}:{line}" in str(err)
    assert ("field '" in str(err)) == (field != "-")  # a line that is not JSON names no field


def _kvcache_conversation(tmp_path, **request) -> Path:
    folder = tmp_path / "conversations"
    folder.mkdir()
    first = {"t": 0, "type": "n", "in": 100, "out": 5, "hash_ids": [1]}
    conv = {"id": "c", "block_size": 64, "requests": [first, {**first, **request}]}
    (folder / "c.json").write_text(json.dumps(conv))
    return folder


HUGE_ROWS = {  # format -> (its first row, {field: an absurd value}), each error's field
    "mooncake": (GOOD, {"timestamp": 1e300, "input_length": 2**63 - 1, "output_length": 2**40}),
    "bailian": (
        {**GOOD, "input_length": 20, "chat_id": 1, "parent_chat_id": -1},  # 16-token blocks
        {"timestamp": 1e300, "input_length": 2**63 - 1, "output_length": 2**40},
    ),
    "aiperf-sessions": (
        {**GOOD, "session_id": "s"},
        {"delay": 1e300, "input_length": 2**63 - 1, "output_length": 2**40},
    ),
    "native": (
        {"arrival_s": 0, "block_keys": [1], "prompt_tokens": 100, "output_tokens": 5, "block_size": 64},
        {"arrival_s": 1e300, "prompt_tokens": 2**63 - 1, "output_tokens": 2**40, "block_size": 2**40},
    ),
}
# the field an error names, where it is not the row's own: an AIPerf turn's arrival is its timestamp
FIELDS = {"delay": "timestamp"}


@pytest.mark.parametrize(
    ("fmt", "field"), [(f, k) for f, (_, bad) in HUGE_ROWS.items() for k in bad], ids=lambda x: str(x)
)
def test_absurd_lengths_and_times_name_the_line(tmp_path, fmt, field):
    first, bad = HUGE_ROWS[fmt]
    path = tmp_path / "huge.jsonl"
    header = ['{"format": "wakman-trace", "version": 1}'] if fmt == "native" else []
    if fmt == "aiperf-sessions":  # a session's next turn: timed by its delay alone
        later = {**{k: v for k, v in first.items() if k != "timestamp"}, "delay": 0}
    else:
        later = first
    path.write_text(rows(*header, first, {**later, field: bad[field]}))
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(path, fmt))
    assert (info.value.line, info.value.field) == (len(header) + 2, FIELDS.get(field, field))


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"t": 1e300}, "requests[1].t"),
        ({"in": 2**63 - 1}, "requests[1].in"),
        ({"out": 2**40}, "requests[1].out"),
    ],
)
def test_absurd_kvcache_tester_requests_name_the_file(tmp_path, request_, field):
    """Each error names the request and the format's own field (kv-cache-tester's ``t``, ``in``,
    ``out``)."""
    folder = _kvcache_conversation(tmp_path, **request_)
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(folder, "kv-cache-tester"))
    assert (info.value.path, info.value.field) == (str(folder / "c.json"), field)


NATIVE_FIRST = {"arrival_s": 5, "block_keys": [1], "prompt_tokens": 100, "output_tokens": 5, "block_size": 64}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"arrival_s": 3}, "arrival_s"),  # decreases
        ({"arrival_s": -1}, "arrival_s"),
        ({"prompt_tokens": 0, "block_keys": []}, "prompt_tokens"),
        ({"output_tokens": -1}, "output_tokens"),
        ({"block_keys": [1, 2, 3]}, "block_keys"),  # 3 blocks of 64 for 100 tokens
        ({"block_size": 0}, "block_size"),
        # 40 output tokens after 100 complete one 64-token block (tokens 64-127 of 139 with KV)
        ({"output_tokens": 40, "output_keys": [7, 8]}, "output_keys"),
        # one key for a prompt of two full blocks: an output key would name prompt block 1
        ({"prompt_tokens": 130, "output_tokens": 100, "output_keys": [7]}, "output_keys"),
    ],
)
def test_native_errors_name_the_native_fields(tmp_path, bad, field):
    """A native row's error names its own field, not the Mooncake name of the same quantity."""
    path = tmp_path / "t.jsonl"
    path.write_text(rows({"format": "wakman-trace", "version": 1}, NATIVE_FIRST, {**NATIVE_FIRST, **bad}))
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(path, "native"))
    assert (info.value.line, info.value.field) == (3, field)


@pytest.mark.parametrize(
    ("output_tokens", "keys", "ok"), [(40, [7], True), (29, [7], True), (28, [7], False)]
)
def test_output_keys_up_to_the_blocks_decoding_completes_are_read(tmp_path, output_tokens, keys, ok):
    """One output key per block that decoding completes, counted by hand: 100 prompt tokens and
    40 output tokens in 64-token blocks fill block 1 (tokens 64-127; the last sampled token has no
    KV); 29 output tokens just reach token 127, 28 fall one short."""
    path = tmp_path / "t.jsonl"
    row = {**NATIVE_FIRST, "output_tokens": output_tokens, "output_keys": keys}
    path.write_text(rows({"format": "wakman-trace", "version": 1}, row))
    if ok:
        (req,) = read_trace(path, "native")
        assert list(req.output_keys) == keys
    else:
        with pytest.raises(TraceFormatError, match="completes 0 blocks"):
            list(read_trace(path, "native"))


@pytest.mark.parametrize(
    ("requests", "field"),
    [
        ([{"t": 5}, {"t": 2}], "requests[1].t"),  # decreasing in its list
        ([{"t": -1}], "requests[0].t"),
        ([{"t": 0}, {"t": 1, "hash_ids": None}], "requests[1].hash_ids"),  # missing
        (
            [{"t": 0}, {"t": 1, "type": "subagent", "requests": [{"t": 4}, {"t": 3}]}],
            "requests[1].requests[1].t",
        ),
    ],
)
def test_kvcache_tester_times_in_order_and_ids_present(tmp_path, requests, field):
    """A conversation's list (and each sub-agent's) is in time order, from its start: a decreasing
    or negative ``t`` is refused, not sorted; a request without ``hash_ids`` is refused, not read as
    a prompt with no blocks. (None of the published archive's 49,397 entries breaks either.)"""
    folder = tmp_path / "conversations"
    folder.mkdir()
    base = {"type": "n", "in": 100, "out": 5, "hash_ids": [1]}
    items = []
    for r in requests:
        item = {**base, **r}
        if item["type"] == "subagent":
            item = {"t": item["t"], "type": "subagent", "requests": [{**base, **x} for x in item["requests"]]}
        items.append({k: v for k, v in item.items() if v is not None})
    (folder / "c.json").write_text(json.dumps({"id": "c", "block_size": 64, "requests": items}))
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(folder, "kv-cache-tester"))
    assert (info.value.path, info.value.field) == (str(folder / "c.json"), field)


def test_a_native_trace_without_its_header_is_told_so(tmp_path):
    """Native rows without the header line are detected as native, and the error shows the line
    the file must start with (it was read as Mooncake rows and blamed a missing 'timestamp')."""
    path = tmp_path / "t.jsonl"
    path.write_text(rows(NATIVE_FIRST, NATIVE_FIRST))
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(path))
    assert (info.value.line, info.value.field) == (1, "format")
    assert '{"format":"wakman-trace","version":1}' in str(info.value)


def test_a_kvcache_tester_rate_past_ten_years_is_refused(tmp_path):
    folder = _kvcache_conversation(tmp_path)
    (folder / "d.json").write_text((folder / "c.json").read_text())
    with pytest.raises(ValueError, match="--rate 1e-300"):
        list(read_trace(folder, "kv-cache-tester", rate=1e-300))


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(TraceFormatError, match="empty trace"):
        list(read_trace(path, "mooncake"))


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress], ids=["gz", "bz2", "xz"])
def test_truncated_compressed_trace(tmp_path, compress):
    data = compress(rows(*[{**GOOD, "timestamp": i} for i in range(2000)]).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="truncated or corrupt"):
        list(read_trace(path, "mooncake"))


def test_cli_exits_non_zero_and_writes_nothing(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text(rows(GOOD, {**GOOD, "timestamp": 3}, {**GOOD, "timestamp": 1}))
    out = tmp_path / "out" / "converted.jsonl"
    result = CliRunner().invoke(app, ["convert", str(src), str(out), "--from", "mooncake", "--to", "native"])
    assert result.exit_code == 2
    assert f"{src}:3" in result.output and "timestamp" in result.output
    assert not out.parent.exists()  # nothing written, not even the folder made for it


def test_cli_stats_on_missing_file(tmp_path):
    result = CliRunner().invoke(app, ["stats", str(tmp_path / "nope.jsonl"), "--format", "mooncake"])
    assert result.exit_code == 2 and "no such file" in result.output


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
field_names = st.sampled_from(
    [
        "timestamp",
        "input_length",
        "output_length",
        "hash_ids",
        "session_id",
        "delay",
        "chat_id",
        "parent_chat_id",
        "arrival_s",
        "block_keys",
        "prompt_tokens",
        "output_tokens",
        "block_size",
    ]
)
rows_strategy = st.lists(
    st.dictionaries(field_names, json_values, max_size=8).map(json.dumps)
    | st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    min_size=0,
    max_size=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=rows_strategy, fmt=st.sampled_from(["mooncake", "aiperf-sessions", "bailian", "native"]))
def test_fuzzed_readers_fail_only_with_trace_errors(tmp_path, lines, fmt):
    path = tmp_path / f"fuzz-{fmt}.jsonl"
    with open(path, "w", encoding="latin-1") as f:
        if fmt == "native":
            f.write('{"format": "wakman-trace", "version": 1}\n')
        f.write("\n".join(line.replace("\n", " ") for line in lines))
    try:
        for req in FORMATS[fmt].read(path):
            assert req.arrival_s >= 0 and req.prompt_tokens >= 1
    except TraceFormatError as err:
        assert err.path == str(path)


@pytest.mark.parametrize("field", ["input_length", "output_length"])
def test_an_absurd_chat_turn_names_the_line_before_any_key_is_made(tmp_path, field):
    """A Mooncake chat's later turn with 2**40 tokens is refused at its line (its keys would take
    petabytes)."""
    first = {**GOOD, "session_id": "s"}
    path = tmp_path / "chat.jsonl"
    path.write_text(rows(first, {**first, "timestamp": 1, field: 2**40}))
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(path, "mooncake"))
    assert (info.value.line, info.value.field) == (2, field)


def test_a_wrong_block_size_shows_as_too_many_or_too_few_keys(tmp_path):
    """Mooncake's ids cover the prompt's blocks of 512 tokens (1,000 tokens: 2 ids). Read with larger
    blocks, a row has more keys than blocks: refused on its line. Read with smaller ones, it keys
    fewer blocks than its prompt's full blocks, which AIPerf's prefix-only rows do on purpose: read,
    and counted by stats, whose CLI says what it may mean (16 tokens gave a hit ratio of 0.012 for
    0.373 on the Mooncake trace, silently)."""
    from wakman.traces.stats import compute_stats

    path = tmp_path / "m.jsonl"
    path.write_text(rows(GOOD, {**GOOD, "timestamp": 1}))
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(path, "mooncake", block_size=2048))
    assert (info.value.line, info.value.field) == (1, "hash_ids") and "at most 1" in str(info.value)
    for block_size, short in ((512, 0), (600, 0), (256, 2), (16, 2)):  # 600: 1 full block, 1 partial
        stats = compute_stats(read_trace(path, "mooncake", block_size=block_size))
        assert stats.short_keyed_requests == short
    result = CliRunner().invoke(app, ["stats", str(path), "--block-size", "16", "--json", "--no-curve"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["short_keyed_requests"] == 2
    assert "request 1 has 2 block keys for 62 full blocks of 16 tokens" in result.stderr
    assert result.stderr.count("notice:") == 1 and "--block-size" in result.stderr


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("fmt", ["mooncake", "native-header", "kv-cache-tester"])
def test_json_nested_past_the_stack_names_the_line(tmp_path, fmt):
    """An extra field nested thousands deep (valid JSON) exhausts the decoder's recursion: one error
    naming the file and line, not a RecursionError traceback."""
    deep = _nested(5000)
    if fmt == "kv-cache-tester":
        path = tmp_path / "c.json"
        path.write_text(f'{{"id": "c", "block_size": 64, "x": {deep}, "requests": []}}')
        line = 0
    elif fmt == "native-header":  # (a native row refuses any field it does not know)
        path = tmp_path / "n.jsonl"
        path.write_text(f'{{"format": "wakman-trace", "version": 1, "x": {deep}}}\n')
        line = 1
    else:
        path = tmp_path / "m.jsonl"
        path.write_text(rows(GOOD) + json.dumps(GOOD)[:-1] + f', "x": {deep}}}\n')
        line = 2
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(path, fmt.removesuffix("-header")))
    assert info.value.line == line and "nested too deeply" in str(info.value)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"format": "wakman-trace", "version": 1}', "format"),
        ("[1, 2]", "-"),
        ('{"sesion_id": "s"}', "sesion_id"),
    ],
)
def test_valid_json_of_the_wrong_shape_is_not_called_invalid_json(tmp_path, line, field):
    """A second header (two native traces concatenated), an array, a misspelt field: valid JSON that
    is not a row; the error names the field where there is one and never says "not valid JSON"."""
    first = {"arrival_s": 0, "block_keys": [1], "prompt_tokens": 64, "output_tokens": 1, "block_size": 64}
    path = tmp_path / "n.jsonl"
    path.write_text('{"format": "wakman-trace", "version": 1}\n' + rows(first) + line + "\n")
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(path, "native"))
    assert (info.value.line, info.value.field) == (3, field)
    assert "not valid JSON" not in str(info.value)


def test_a_folder_a_pipe_and_a_corrupt_bz2_say_what_they_are(tmp_path):
    """Each was once "no such file" or (a file system error) "corrupt compressed data"."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    corrupt = tmp_path / "bad.jsonl"
    corrupt.write_bytes(b"BZh9" + bytes(range(200)))
    for path, says in [
        (tmp_path, "is a folder, not a trace file"),
        (fifo, "not a regular file"),
        (tmp_path / "nope.jsonl", "no such file"),
        (corrupt, "corrupt compressed data"),
    ]:
        with pytest.raises(TraceFormatError, match=says):
            list(read_trace(path, "mooncake"))


def test_a_block_size_that_changes_within_a_trace_is_refused(tmp_path):
    """One cache holds blocks of one size: a native trace, a kv-cache-tester folder and requests
    built by hand whose block size changes are refused where it changes (convert once wrote such
    a native trace to Mooncake rows at the first request's size, silently)."""
    from wakman.simulation import simulate
    from wakman.traces import Request

    row = {"arrival_s": 0, "block_keys": [1], "prompt_tokens": 600, "output_tokens": 1, "block_size": 512}
    native = tmp_path / "mixed.jsonl"
    small = {**row, "arrival_s": 1, "prompt_tokens": 16, "block_size": 16}
    native.write_text(rows({"format": "wakman-trace", "version": 1}, row, small))
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(native))
    assert (info.value.line, info.value.field) == (3, "block_size")
    assert "16-token blocks after 512-token ones" in str(info.value)

    folder = tmp_path / "conversations"
    folder.mkdir()
    for name, size, start in (("a", 64, 0), ("b", 32, 1)):
        request = {"t": start, "type": "n", "in": 100, "out": 5, "hash_ids": [1]}
        conv = {"id": name, "block_size": size, "requests": [request]}
        (folder / f"{name}.json").write_text(json.dumps(conv))
    with pytest.raises(TraceFormatError, match="a trace has one block size"):
        list(read_trace(folder, "kv-cache-tester"))

    requests = [
        Request(arrival_s=float(i), block_keys=[1], prompt_tokens=32, output_tokens=1, block_size=size)
        for i, size in enumerate((32, 16))
    ]
    with pytest.raises(ValueError, match=r"request 1.*16-token blocks after 32-token ones"):
        simulate(requests, "lru", 10)


def test_a_request_with_no_block_size_is_an_error_not_a_crash():
    """vLLM's block arithmetic (the core's full_blocks / hit_limit) on a block size of 0: a
    ValueError from Python's API, not a division by zero that kills the interpreter."""
    import numpy as np

    from wakman.traces import Request

    req = Request(
        arrival_s=0.0,
        block_keys=np.array([1], dtype=np.uint64),
        prompt_tokens=10,
        output_tokens=1,
        block_size=0,
    )
    for figure in ("full_blocks", "max_hit_blocks"):
        with pytest.raises(ValueError, match="block_size"):
            getattr(req, figure)


@pytest.mark.parametrize(
    ("magic", "name"),
    [
        (b"PK\x03\x04", "zip"),
        (b"\x28\xb5\x2f\xfd", "zstd"),
        (b"\x04\x22\x4d\x18", "lz4"),
        (b"7z\xbc\xaf\x27\x1c", "7z"),
    ],
)
def test_a_compression_wakman_does_not_read_is_named(tmp_path, magic, name):
    """A zip, zstd, lz4 or 7z file (by its magic bytes, whatever its name) is refused naming its
    compression, not read as JSON that is 'malformed at byte 0'."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(magic + b"\x00" * 64)
    with pytest.raises(TraceFormatError, match=f"{name}-compressed, which wakman does not read"):
        list(read_trace(path, "mooncake"))


@pytest.mark.parametrize("suffix", [".zst", ".zip", ".lz4", ".tar.gz", ".TAR.XZ"])
def test_a_writer_refuses_a_compression_suffix_it_would_not_honour(tmp_path, suffix):
    """Writing ``x.jsonl.zst`` would put plain JSONL under a zstd name, ``x.tar.gz`` compressed JSONL
    under an archive's name (read back as a kv-cache-tester archive): refused, nothing written."""
    from wakman.traces import write_trace
    from wakman.traces.model import Request

    target = tmp_path / f"x{suffix}"
    req = Request(arrival_s=0.0, block_keys=[1], prompt_tokens=10, output_tokens=1, block_size=16)
    with pytest.raises(ValueError, match=f"{suffix} is not a format wakman writes"):
        write_trace([req], target, "native")
    assert not target.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".GZ", ".Bz2", ".XZ"])
def test_a_compression_suffix_in_capitals_compresses(tmp_path, suffix):
    """``x.jsonl.GZ`` is written compressed, as ``.gz`` is (it was plain text under a gzip name), and
    reads back the same."""
    from wakman.traces import read_trace, write_trace
    from wakman.traces.model import Request

    req = Request(arrival_s=0.0, block_keys=[1], prompt_tokens=10, output_tokens=1, block_size=16)
    target = tmp_path / f"x.jsonl{suffix}"
    write_trace([req], target, "native")
    magic = {".gz": b"\x1f\x8b", ".bz2": b"BZh", ".xz": b"\xfd7zXZ"}[suffix.lower()]
    assert target.read_bytes().startswith(magic)
    assert [r.block_keys.tolist() for r in read_trace(target)] == [[1]]


def test_an_interrupt_as_the_part_file_appears_leaves_nothing(tmp_path):
    """A Ctrl-C that lands as the hidden ``.part`` file is created (before the writer holds its name)
    still removes it: nothing is left beside the output (the generate test's rare leftover)."""
    from wakman.traces import io as trace_io

    real_close = os.close

    def close_then_interrupt(fd: int) -> None:
        real_close(fd)
        raise KeyboardInterrupt

    target = tmp_path / "out" / "t.jsonl"
    trace_io.os.close = close_then_interrupt  # the module's os is os itself: restored at once below
    try:
        with pytest.raises(KeyboardInterrupt), trace_io.atomic_path(target):
            pass
    finally:
        trace_io.os.close = real_close
    assert list(tmp_path.iterdir()) == []


def test_a_ctrl_c_while_several_outputs_are_moved_in_waits_until_all_are(tmp_path, monkeypatch):
    """``atomic_paths``: a real SIGINT that arrives as the first finished file is moved in is held
    back until every file is in place: the outputs are all new (the interrupt then raises), never
    some new and some old."""
    import signal

    from wakman.traces import io as trace_io

    names = [tmp_path / f"{n}.txt" for n in ("a", "b", "c")]
    for path in names:
        path.write_text("earlier")
    real_replace, moved = os.replace, []

    def replace_then_signal(src, dst):
        real_replace(src, dst)
        moved.append(dst)
        if len(moved) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(trace_io.os, "replace", replace_then_signal)
    with pytest.raises(KeyboardInterrupt), trace_io.atomic_paths(*names) as targets:
        for target in targets:
            target.write_text("new")
    assert [path.read_text() for path in names] == ["new"] * 3 and len(moved) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt", "c.txt"]


def test_aiperf_session_turns_out_of_arrival_order_name_the_reader_that_takes_them(tmp_path):
    """AIPerf orders each session's turns only, so its rows may interleave sessions out of arrival
    order: the Mooncake reader (which streams in file order) refuses such a turn and names the
    aiperf-sessions reader, which reads the file; a plain row out of order gets no such hint."""
    turn = {"input_length": 600, "output_length": 10, "hash_ids": [1, 2]}
    path = tmp_path / "t.jsonl"
    path.write_text(
        rows(
            {"timestamp": 5000, "session_id": "a", **turn},
            {"timestamp": 4000, "session_id": "b", **{**turn, "hash_ids": [3, 4]}},
        )
    )
    with pytest.raises(
        TraceFormatError, match=r"read it as aiperf-sessions \(--format; --from in convert\)"
    ) as info:
        list(read_trace(path, "mooncake"))
    assert (info.value.line, info.value.field) == (2, "timestamp")
    assert [r.arrival_s for r in read_trace(path, "aiperf-sessions")] == [4.0, 5.0]
    plain = tmp_path / "p.jsonl"
    plain.write_text(rows({"timestamp": 5000, **turn}, {"timestamp": 4000, **turn}))
    with pytest.raises(TraceFormatError, match=r"arrival order$"):
        list(read_trace(plain, "mooncake"))
