"""Block keys are contiguous uint64 arrays from every reader and the generator; writing then reading
keeps them exactly (keys >= 2**63 included); trace ids that do not fit uint64 are errors naming the
file, the line and the field, never wrapped."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from wakman.data import BUNDLED_MOONCAKE
from wakman.traces import FORMATS, Request, TraceFormatError, read_trace, write_trace
from wakman.traces.model import joined_keys, key_array, key_list
from wakman.workload import build_config, generate_requests

BIG = [2**64 - 1, 2**63, 2**63 - 1, 0, 12345678901234567890]


def requests_with_big_keys() -> list[Request]:
    """Two sessions whose turns extend their prefix, keys all over uint64, some output keys."""
    return [
        Request(
            arrival_s=0.0,
            block_keys=BIG[:2],
            prompt_tokens=1000,
            output_tokens=600,
            block_size=512,
            session_id="a",
            label="multi-turn",
            output_keys=[2**64 - 2],
        ),
        Request(arrival_s=0.5, block_keys=[2**63 + 7], prompt_tokens=300, output_tokens=3, block_size=512),
        Request(
            arrival_s=1.5,
            block_keys=BIG[:4],
            prompt_tokens=2000,
            output_tokens=20,
            block_size=512,
            session_id="a",
        ),
        Request(
            arrival_s=2.0,
            block_keys=BIG,
            prompt_tokens=2560,
            output_tokens=5,
            block_size=512,
            session_id="a",
        ),
    ]


def assert_key_arrays(reqs: list[Request]) -> None:
    assert reqs
    for r in reqs:
        for keys in (r.block_keys, r.output_keys):
            assert isinstance(keys, np.ndarray), type(keys)
            assert keys.dtype == np.uint64 and keys.ndim == 1 and keys.flags.c_contiguous


def kv_cache_tester_file(folder: Path) -> Path:
    turns = [
        {"t": 0.0, "type": "n", "in": 200, "out": 10, "hash_ids": [1, 2, 3]},
        {"t": 2.0, "type": "n", "in": 320, "out": 10, "hash_ids": [1, 2, 3, 4, 5]},
        {"t": 3.0, "type": "n", "in": 10, "out": 10, "hash_ids": []},
    ]
    path = folder / "c.json"
    path.write_text(json.dumps({"id": "c", "block_size": 64, "requests": turns}))
    return path


def bailian_file(folder: Path, hash_ids: list[int] | None = None) -> Path:
    rows = [
        {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 40, "output_length": 4,
         "type": "text", "turn": 1, "hash_ids": [1, 2, 3]},
        {"chat_id": 2, "parent_chat_id": 1, "timestamp": 1.5, "input_length": 60, "output_length": 4,
         "type": "text", "turn": 2, "hash_ids": hash_ids if hash_ids is not None else [1, 2, 3, 2**64 - 1]},
    ]  # fmt: skip
    path = folder / "bailian.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def aiperf_sessions_file(folder: Path) -> Path:
    """AIPerf chat rows: session a's second turn adds 400 tokens to its first turn and answer."""
    rows = [
        {"session_id": "a", "timestamp": 0, "input_length": 1000, "output_length": 600, "hash_ids": BIG[:2]},
        {
            "session_id": "b",
            "timestamp": 500,
            "input_length": 300,
            "output_length": 3,
            "hash_ids": [2**63 + 7],
        },
        {"session_id": "a", "delay": 1500, "input_length": 400, "output_length": 20, "hash_ids": BIG[2:3]},
    ]
    path = folder / "sessions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def trace_of(fmt: str, folder: Path) -> Path:
    if fmt == "kv-cache-tester":
        return kv_cache_tester_file(folder)
    if fmt == "bailian":
        return bailian_file(folder)
    if fmt == "aiperf-sessions":
        return aiperf_sessions_file(folder)
    path = folder / f"t.{fmt}.jsonl"
    write_trace(requests_with_big_keys(), path, fmt)
    return path


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_reader_yields_uint64_arrays(tmp_path, fmt):
    reqs = list(read_trace(trace_of(fmt, tmp_path), fmt))
    assert_key_arrays(reqs)
    assert any(len(r.block_keys) > 1 for r in reqs)


def test_the_bundled_trace_reads_into_arrays():
    reqs = list(read_trace(BUNDLED_MOONCAKE))
    assert_key_arrays(reqs)


def test_the_generator_yields_uint64_arrays():
    reqs = generate_requests(build_config(preset="mix19-thirds", duration_s=60), seed=3)
    assert_key_arrays(reqs)
    assert any(len(r.output_keys) for r in reqs)
    sha = generate_requests(
        build_config(preset="mix03-pure-agentic", duration_s=60, overrides={"hash": "sha256"})
    )
    assert_key_arrays(sha)
    assert max(int(r.block_keys.max()) for r in sha if len(r.block_keys)) >= 2**63  # the full 64 bits


@pytest.mark.parametrize("fmt", [name for name, f in FORMATS.items() if f.write])
def test_write_then_read_keeps_keys_exactly(tmp_path, fmt):
    """AIPerf chats key a later turn's blocks past its history afresh: written back, what they read
    as reads the same again."""
    reqs = (
        requests_with_big_keys()
        if fmt != "aiperf-sessions"
        else list(read_trace(aiperf_sessions_file(tmp_path)))
    )
    path = tmp_path / f"t.{fmt}.jsonl.gz"
    write_trace(reqs, path, fmt)
    back = list(read_trace(path, fmt))
    assert_key_arrays(back)
    assert [key_list(r.block_keys) for r in back] == [key_list(r.block_keys) for r in reqs]
    if fmt in ("native", "aiperf-sessions"):  # the formats that carry (or make) output keys
        assert [key_list(r.output_keys) for r in back] == [key_list(r.output_keys) for r in reqs]
        again = tmp_path / "again.jsonl.gz"
        write_trace(back, again, fmt)  # arrays write the same rows as the lists did
        assert gzip.decompress(again.read_bytes()) == gzip.decompress(path.read_bytes())


BAD_IDS = [-1, 2**64, -(2**63) - 1, 2**70]


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("fmt", ["mooncake", "bailian", "aiperf-sessions", "native"])
def test_ids_outside_uint64_name_file_line_and_field(tmp_path, fmt, bad):
    if fmt == "bailian":
        path, line, field = bailian_file(tmp_path, [1, 2, bad]), 2, "hash_ids"
    else:
        path = trace_of(fmt, tmp_path)
        lines = path.read_text().splitlines()
        line = len(lines)  # the last row: the first ones read fine
        row = json.loads(lines[-1])
        field = "block_keys" if fmt == "native" else "hash_ids"
        row[field] = [*row[field][:1], bad]
        lines[-1] = json.dumps(row)
        path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(path, fmt))
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field)
    assert str(bad) in err.message and "2**64" in err.message


def test_native_output_keys_out_of_range(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(requests_with_big_keys()[:1], path, "native")
    header, row = path.read_text().splitlines()
    row = json.loads(row)
    row["output_keys"] = [2**64]
    path.write_text(header + "\n" + json.dumps(row) + "\n")
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:2: field 'output_keys'"):
        list(read_trace(path))


def test_key_array_and_joined_keys():
    keys = np.array([1, 2, 3], dtype=np.uint64)
    assert key_array(keys) is keys
    assert key_array([2**64 - 1]).tolist() == [2**64 - 1]
    assert key_array(np.array([5, 6], dtype=np.int64)).dtype == np.uint64
    with pytest.raises(ValueError, match="2\\*\\*64"):
        key_array(np.array([-5], dtype=np.int64))
    with pytest.raises(ValueError, match="-1"):
        key_array([1, -1])
    assert joined_keys([]).dtype == np.uint64 and len(joined_keys([])) == 0
    assert joined_keys([[1, 2], keys, []]).tolist() == [1, 2, 1, 2, 3]


def test_a_gzip_trace_is_the_same_bytes_every_time(tmp_path):
    """The gzip header carries the output's name and no time, never the hidden temporary file's."""
    from wakman.traces import write_trace
    from wakman.traces.model import Request

    reqs = [Request(arrival_s=0.0, block_keys=[1, 2], prompt_tokens=32, output_tokens=1, block_size=16)]
    first, second = tmp_path / "a" / "t.jsonl.gz", tmp_path / "b" / "t.jsonl.gz"
    write_trace(reqs, first, "native")
    write_trace(reqs, second, "native")
    assert first.read_bytes() == second.read_bytes()
    assert b".part" not in first.read_bytes()[:64]


def test_the_cores_splitmix64_is_vignas():
    """splitmix64(x) is SplitMix64's output for the state x + golden ratio: from state 0 its first
    outputs are Vigna's published 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F."""
    from wakman import _core

    golden = 0x9E3779B97F4A7C15
    states = np.array([0, golden, 2 * golden % 2**64], dtype=np.uint64)
    assert _core.splitmix64(states).tolist() == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
