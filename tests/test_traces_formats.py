"""Round trips, the Bailian reader on hand-written rows, and format detection."""

from __future__ import annotations

import json

import pytest

from conftest import MOONCAKE
from wakman.traces import Request, detect_format, read_trace, write_trace


def sample_requests() -> list[Request]:
    """Two sessions whose turns extend their prefix, plus a one-off request; arrivals in ms steps."""
    return [
        Request(
            arrival_s=0.0,
            block_keys=[1, 2],
            prompt_tokens=1000,
            output_tokens=10,
            block_size=512,
            session_id="a",
            label="multi-turn",
        ),
        Request(arrival_s=0.25, block_keys=[7], prompt_tokens=300, output_tokens=3, block_size=512),
        Request(
            arrival_s=1.5,
            block_keys=[1, 2, 3],
            prompt_tokens=1300,
            output_tokens=20,
            block_size=512,
            session_id="a",
            label="multi-turn",
        ),
        Request(
            arrival_s=2.125,
            block_keys=[9, 10],
            prompt_tokens=1024,
            output_tokens=5,
            block_size=512,
            session_id="b",
        ),
        Request(
            arrival_s=4.0,
            block_keys=[1, 2, 3, 4, 5],
            prompt_tokens=2500,
            output_tokens=1,
            block_size=512,
            session_id="a",
            label="multi-turn",
        ),
    ]


def same(a: Request, b: Request, session: bool = True) -> bool:
    return (
        abs(a.arrival_s - b.arrival_s) < 1e-9
        and list(a.block_keys) == list(b.block_keys)
        and a.prompt_tokens == b.prompt_tokens
        and a.output_tokens == b.output_tokens
        and a.block_size == b.block_size
        and (not session or a.session_id == b.session_id)
    )


def test_native_round_trip_keeps_everything(tmp_path):
    reqs = sample_requests()
    write_trace(reqs, tmp_path / "t.jsonl.gz", "native")
    back = list(read_trace(tmp_path / "t.jsonl.gz"))
    assert back == reqs


def test_native_mooncake_native(tmp_path):
    reqs = sample_requests()
    write_trace(reqs, tmp_path / "m.jsonl", "mooncake")
    assert detect_format(tmp_path / "m.jsonl") == "mooncake"
    write_trace(read_trace(tmp_path / "m.jsonl", "mooncake"), tmp_path / "n.jsonl", "native")
    back = list(read_trace(tmp_path / "n.jsonl"))
    assert len(back) == len(reqs) and all(same(a, b) for a, b in zip(reqs, back, strict=True))


def test_native_aiperf_sessions_native(tmp_path):
    reqs = sample_requests()
    write_trace(reqs, tmp_path / "s.jsonl", "aiperf-sessions")
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert rows[2] == {
        "session_id": "a",
        "delay": 1500,
        "input_length": 300,
        "output_length": 20,
        "hash_ids": [3],
    }
    back = list(read_trace(tmp_path / "s.jsonl", "aiperf-sessions"))
    assert len(back) == len(reqs)
    for a, b in zip(reqs, back, strict=True):
        assert same(a, b, session=a.session_id is not None)


def test_aiperf_sessions_refuse_a_turn_that_does_not_extend(tmp_path):
    reqs = sample_requests()
    reqs[2] = Request(
        arrival_s=1.5, block_keys=[1, 99], prompt_tokens=1300, output_tokens=2, block_size=512, session_id="a"
    )
    with pytest.raises(ValueError, match="does not extend"):
        write_trace(reqs, tmp_path / "s.jsonl", "aiperf-sessions")
    assert not (tmp_path / "s.jsonl").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind either


def test_mooncake_file_round_trips_byte_for_byte(tmp_path):
    write_trace(read_trace(MOONCAKE), tmp_path / "copy.jsonl", "mooncake")
    ours = [json.loads(line) for line in (tmp_path / "copy.jsonl").read_text().splitlines()]
    theirs = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    assert ours == theirs


def test_bailian_rows_written_by_hand(tmp_path):
    rows = [
        {
            "chat_id": 10,
            "parent_chat_id": -1,
            "timestamp": 0.5,
            "input_length": 40,
            "output_length": 8,
            "type": "text",
            "turn": 1,
            "hash_ids": [1, 2, 3],
        },
        {
            "chat_id": 11,
            "parent_chat_id": -1,
            "timestamp": 0.75,
            "input_length": 20,
            "output_length": 4,
            "type": "search",
            "turn": 1,
            "hash_ids": [4, 5],
        },
        {
            "chat_id": 12,
            "parent_chat_id": 10,
            "timestamp": 2.0,
            "input_length": 70,
            "output_length": 9,
            "type": "text",
            "turn": 2,
            "hash_ids": [1, 2, 3, 6, 7],
        },
        {
            "chat_id": 13,
            "parent_chat_id": 12,
            "timestamp": 3.0,
            "input_length": 90,
            "output_length": 9,
            "type": "text",
            "turn": 3,
            "hash_ids": [1, 2, 3, 6, 7, 8],
        },
    ]
    path = tmp_path / "bailian.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert detect_format(path) == "bailian"
    reqs = list(read_trace(path))
    assert [r.session_id for r in reqs] == ["10", "11", "10", "10"]
    assert [r.label for r in reqs] == ["text", "search", "text", "text"]
    assert reqs[3].block_size == 16 and reqs[3].prompt_tokens == 90 and reqs[2].arrival_s == 2.0
