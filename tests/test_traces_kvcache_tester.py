"""The kv-cache-tester reader on hand-written conversations: nested sub-agents, a request without a
prompt length, gzip-compressed conversations in every container, and conversation ids repeated
across files. Expected values are worked out by hand from the JSON written here."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from wakman.traces import TraceFormatError, detect_format, read_trace

NS = 1 << 32  # conversation n's keys are (n << 32) | local id


def req(t: float, tokens: int, ids: list[int], out: int = 1) -> dict:
    return {"t": t, "type": "n", "in": tokens, "out": out, "hash_ids": ids}


def conv(cid: str, requests: list[dict]) -> dict:
    return {"id": cid, "block_size": 64, "hash_id_scope": "local", "requests": requests}


def rows(path: Path, fmt: str | None = None) -> list[tuple]:
    """(arrival, session, label, prompt, output, keys) of every request."""
    return [
        (r.arrival_s, r.session_id, r.label, r.prompt_tokens, r.output_tokens, [int(k) for k in r.block_keys])
        for r in read_trace(path, fmt)
    ]


# --- sub-agents inside sub-agents ----------------------------------------------------------------

NESTED = conv(
    "conv1",
    [
        req(0.0, 6400, list(range(1, 101)), out=10),
        {
            "t": 5.0,
            "type": "subagent",
            "agent_id": "agent_001",
            "requests": [
                req(0.0, 3200, list(range(200, 250)), out=10),
                {
                    "t": 2.0,
                    "type": "subagent",
                    "agent_id": "agent_002",
                    "requests": [req(0.0, 1280, list(range(300, 320)), out=5)],
                },
                req(3.0, 3840, list(range(200, 260)), out=7),
            ],
        },
        req(60.0, 7040, list(range(1, 111)), out=10),
    ],
)


def test_a_sub_agent_inside_a_sub_agent_is_its_own_session(tmp_path):
    """Upstream's flatten_requests recurses: the nested sub-agent starts at 5 + 2 s, its request
    counts from there, and the outer sub-agent goes on after it (8 s) from its own previous prompt."""
    (tmp_path / "trace_0001.json").write_text(json.dumps(NESTED))
    sub, nested = "claude-code-subagent", "claude-code-subagent"
    expected = [
        (0.0, "conv1", "claude-code", 6400, 10, [NS | i for i in range(1, 101)]),
        (5.0, "conv1/agent_001", sub, 3200, 10, [NS | i for i in range(200, 250)]),
        (7.0, "conv1/agent_001/agent_002", nested, 1280, 5, [NS | i for i in range(300, 320)]),
        (8.0, "conv1/agent_001", sub, 3840, 7, [NS | i for i in range(200, 260)]),
        (60.0, "conv1", "claude-code", 7040, 10, [NS | i for i in range(1, 111)]),
    ]
    got = rows(tmp_path)
    assert got == expected
    assert sum(r[3] for r in got) == 6400 + 3200 + 1280 + 3840 + 7040


@pytest.mark.parametrize("bad", [None, 0, -3], ids=["missing", "zero", "negative"])
@pytest.mark.parametrize(
    ("where", "field"),
    [("top", "requests[1].in"), ("sub-agent", "requests[1].requests[0].in")],
)
def test_a_request_without_a_positive_prompt_length_is_refused(tmp_path, bad, where, field):
    """kv-cache-tester never writes ``in`` <= 0 (none of its 49,334 published requests), and wakman's
    model needs a prompt token: refused, naming the file and the field, rather than read as 1 token."""
    broken = {"t": 1.0, "type": "n", "out": 1, "hash_ids": []}
    if bad is not None:
        broken["in"] = bad
    if where == "sub-agent":
        broken = {"t": 1.0, "type": "subagent", "agent_id": "a1", "requests": [broken]}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(conv("c", [req(0.0, 640, list(range(10))), broken])))
    with pytest.raises(TraceFormatError) as info:
        rows(path)
    assert (info.value.path, info.value.field) == (str(path), field)


@pytest.mark.parametrize(
    ("ids", "message"),
    [([1, 2, 3], "3 blocks for 64 tokens"), ([2**32], r"ids must lie in \[0, 2\*\*32\)"), ([1.5], "int")],
)
def test_bad_hash_ids_name_the_request_they_belong_to(tmp_path, ids, message):
    """Too many ids for the prompt, an id out of range, a float: the error names the request's path
    in the file (a Claude Code conversation holds thousands of requests), not the field alone."""
    broken = {
        "t": 1.0,
        "type": "subagent",
        "agent_id": "a1",
        "requests": [req(0.0, 64, [7]), req(2.0, 64, ids)],
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(conv("c", [req(0.0, 640, list(range(10))), broken])))
    with pytest.raises(TraceFormatError, match=message) as info:
        rows(path)
    assert (info.value.path, info.value.field) == (str(path), "requests[1].requests[1].hash_ids")


# --- .json.gz conversations, .tar.bz2 archives -----------------------------------------------------

A = conv("a", [req(0.0, 640, list(range(1, 11))), req(10.0, 1280, list(range(1, 21)))])
B = conv(
    "b",
    [
        req(0.0, 320, list(range(1, 6))),
        {"t": 3.0, "type": "subagent", "agent_id": "x", "requests": [req(0.0, 192, [7, 8, 9])]},
    ],
)
# a.json sorts first (namespace 1), b.json second (namespace 2)
A_KEYS = {NS | i for i in range(1, 21)}
B_KEYS = {2 * NS | i for i in (1, 2, 3, 4, 5, 7, 8, 9)}


def summary(got: list[tuple]) -> tuple[int, int, set[str], set[int]]:
    return len(got), sum(r[3] for r in got), {r[1] for r in got}, {k for r in got for k in r[5]}


def write(path: Path, data: dict) -> Path:
    text = json.dumps(data).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


def tree(root: Path, a_name: str, b_name: str) -> Path:
    (root / "traces").mkdir(parents=True)
    write(root / "traces" / a_name, A)
    write(root / "traces" / b_name, B)
    return root / "traces"


@pytest.mark.parametrize(
    ("names", "container"),
    [
        (("a.json.gz", "b.json"), "folder"),
        (("a.json.gz", "b.json.gz"), "folder"),
        (("a.json", "b.json"), "tar.bz2"),
        (("a.json.gz", "b.json"), "tar.bz2"),
        (("a.json.gz", "b.json.gz"), "tar.gz"),
        (("a.json.gz", "b.json.gz"), "tar.xz"),
    ],
)
def test_gzip_conversations_and_bz2_archives_read_like_plain_ones(tmp_path, names, container):
    plain = rows(tree(tmp_path / "plain", "a.json", "b.json"))
    folder = tree(tmp_path / "packed", *names)
    path = folder
    if container != "folder":
        path = tmp_path / f"two.{container}"
        with tarfile.open(path, f"w:{container.split('.')[1]}") as tar:
            tar.add(folder, arcname="traces")
    assert detect_format(path) == "kv-cache-tester"
    got = rows(path)
    # 640 + 1280 (a) + 320 + 192 (b and its sub-agent x)
    assert summary(got) == (4, 2432, {"a", "b", "b/x"}, A_KEYS | B_KEYS)
    assert got == plain
    assert rows(path, "kv-cache-tester") == got


def test_a_single_gzip_conversation(tmp_path):
    path = write(tmp_path / "a.json.gz", A)
    assert detect_format(path) == "kv-cache-tester"
    expected = [
        (0.0, "a", "claude-code", 640, 1, [NS | i for i in range(1, 11)]),
        (10.0, "a", "claude-code", 1280, 1, [NS | i for i in range(1, 21)]),
    ]
    assert rows(path) == expected
    assert rows(path, "kv-cache-tester") == expected


def test_a_truncated_gzip_conversation_names_the_file(tmp_path):
    whole = gzip.compress(json.dumps(A).encode())
    path = tmp_path / "traces" / "a.json.gz"
    path.parent.mkdir()
    path.write_bytes(whole[: len(whole) // 2])
    for target in (path, path.parent):
        with pytest.raises(TraceFormatError) as info:
            rows(target, "kv-cache-tester")
        assert info.value.path == str(path) and "truncated or corrupt" in str(info.value)


@pytest.mark.parametrize("compression", ["", "gz", "bz2", "xz"])
def test_a_cut_archive_is_refused_not_read_short(tmp_path, compression):
    """An archive cut anywhere (a download that stopped) is an error naming it, never a shorter
    trace: tarfile alone takes a cut at a member's end for the archive's end, and never checks a
    compressed stream's trailer. A plain tar cut inside the zero blocks after its last member still
    holds every conversation and reads whole."""
    folder = tmp_path / "convs"
    folder.mkdir()
    for i in range(12):  # each conversation's JSON spans more than one tar block
        turns = [req(float(j), 64 * (10 + j), list(range(1, 11 + j))) for j in range(8)]
        write(folder / f"c{i:02}.json", conv(f"c{i}", turns))
    whole = tmp_path / ("whole.tar" + (f".{compression}" if compression else ""))
    with tarfile.open(whole, f"w:{compression}") as tar:
        tar.add(folder, arcname="convs")
    data = whole.read_bytes()
    assert len(rows(whole)) == 96
    cut = tmp_path / whole.name.replace("whole", "cut")
    read_whole = 0
    for size in range(0, len(data), 37):
        cut.write_bytes(data[:size])
        try:
            got = rows(cut, "kv-cache-tester")
        except TraceFormatError as exc:
            assert exc.path == str(cut) and "truncated or corrupt" in str(exc)
            continue
        assert len(got) == 96, f"cut at byte {size} of {len(data)} read as {len(got)} requests"
        read_whole += 1
    if compression:  # the trailer (checksum, length) is part of every compressed stream
        assert read_whole == 0
    else:  # a cut past the first zero block after the last member
        last_data = len(data.rstrip(b"\0"))  # the last member's data ends in "}"
        first_zero_block = -(-last_data // 512) * 512
        assert read_whole == sum(1 for size in range(0, len(data), 37) if size >= first_zero_block + 512)


# --- one conversation id in several files ----------------------------------------------------------


def test_files_sharing_a_conversation_id_stay_separate_sessions(tmp_path):
    """Two trace sets side by side, each with a conversation "c": two conversations, each with its
    sub-agent; a repeated id takes ``#n`` (its position in name order), a unique one stays bare."""
    c = conv(
        "c",
        [
            req(0.0, 640, list(range(1, 11))),
            {"t": 1.0, "type": "subagent", "agent_id": "x", "requests": [req(0.0, 128, [50, 51])]},
        ],
    )
    for folder, name, data in (
        ("setA", "t.json", c),
        ("setB", "t.json", c),
        ("setB", "u.json", conv("d", [req(0.0, 64, [1])])),
    ):
        (tmp_path / folder).mkdir(exist_ok=True)
        write(tmp_path / folder / name, data)
    got = rows(tmp_path)
    assert len(got) == 5 and sum(r[3] for r in got) == 2 * (640 + 128) + 64
    sessions: dict[str, set[int]] = {}
    for r in got:
        sessions.setdefault(r[1], set()).update(k >> 32 for k in r[5])
    # name order: setA/t.json (1), setB/t.json (2), setB/u.json (3); each session in its own namespace
    assert sessions == {"c#1": {1}, "c#1/x": {1}, "c#2": {2}, "c#2/x": {2}, "d": {3}}


def test_global_ids_are_shared_across_files_and_local_ones_are_not(tmp_path):
    """``hash_id_scope: "global"``: an id names the same text in every global file (one key, reuse
    across conversations); a local file's same id is its own. An unknown scope is refused."""
    write(tmp_path / "a.json", {**conv("a", [req(0.0, 640, list(range(1, 11)))]), "hash_id_scope": "global"})
    write(tmp_path / "b.json", {**conv("b", [req(5.0, 640, list(range(1, 11)))]), "hash_id_scope": "global"})
    write(tmp_path / "c.json", conv("c", [req(9.0, 640, list(range(1, 11)))]))
    keys = {r[1]: r[5] for r in rows(tmp_path)}
    assert keys["a"] == keys["b"] == list(range(1, 11))  # namespace 0: the ids themselves
    assert keys["c"] == [3 * NS + i for i in range(1, 11)]  # c.json is third in name order
    from wakman.traces.stats import compute_stats

    assert compute_stats(read_trace(tmp_path), lru_curve=False).distinct_blocks == 20  # a/b's ten, c's ten
    write(tmp_path / "d.json", {**conv("d", [req(0.0, 64, [1])]), "hash_id_scope": "session"})
    with pytest.raises(TraceFormatError, match=r"d\.json.*hash_id_scope.*'session'"):
        rows(tmp_path)


# --- a session's turns share one buffer ------------------------------------------------------------


def test_turns_view_their_sessions_keys_and_a_later_turn_never_changes_an_earlier_one(tmp_path):
    """Turns that extend the previous one, a compaction that keeps only a prefix, its extension and
    a turn that outgrows its buffer: every request's keys, read after the whole trace, are its own
    JSON ids; an extension shares the previous turn's memory; the keys are read-only."""
    turns = [
        list(range(1, 101)),
        list(range(1, 121)),  # extends: written after the 100 keys already there
        list(range(1, 131)),
        [*range(1, 51), *range(500, 510)],  # compacted: keeps 50, then new ids
        [*range(1, 51), *range(500, 521)],  # extends the compacted context
        [*range(1, 51), *range(500, 521), *range(600, 801)],  # past the buffer's room
        list(range(1, 41)),  # a prefix of everything before it
    ]
    data = conv("c", [req(10.0 * i, 64 * len(ids), ids) for i, ids in enumerate(turns)])
    (tmp_path / "t.json").write_text(json.dumps(data))
    requests = list(read_trace(tmp_path))  # all of them first: later turns have been written
    assert [[int(k) for k in r.block_keys] for r in requests] == [[NS | i for i in ids] for ids in turns]
    assert np.shares_memory(requests[1].block_keys, requests[2].block_keys)  # within the room it made
    assert not np.shares_memory(requests[2].block_keys, requests[3].block_keys)
    with pytest.raises(ValueError, match="read-only"):
        requests[1].block_keys[0] = 0


def test_a_folder_without_conversations_says_what_it_looked_for(tmp_path):
    """A folder holding only a JSONL trace is no kv-cache-tester set: the error says which files a
    conversation is and that a JSONL trace is read from its own file."""
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "mooncake.jsonl").write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
    )
    with pytest.raises(
        TraceFormatError, match=r"no conversations found \(kv-cache-tester's are \.json"
    ) as info:
        rows(tmp_path / "set")
    assert "read from its own file" in str(info.value)
