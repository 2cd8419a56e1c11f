"""Round trips, the Bailian reader on hand-written rows, and format detection."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import MOONCAKE
from wakman.traces import Request, TraceFormatError, detect_format, read_trace, write_trace
from wakman.traces.model import key_list


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


def as_lists(req: Request) -> Request:
    """``req`` with its keys as lists of ints, so requests compare with ``==`` (arrays do not)."""
    return msgspec.structs.replace(
        req, block_keys=key_list(req.block_keys), output_keys=key_list(req.output_keys)
    )


def write_rows(path: Path, *rows: dict) -> Path:
    """``rows`` as a JSONL file at ``path``, one object a line."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def same(a: Request, b: Request, session: bool = True) -> bool:
    return (
        abs(a.arrival_s - b.arrival_s) < 1e-9
        and list(a.block_keys) == list(b.block_keys)
        and a.prompt_tokens == b.prompt_tokens
        and a.output_tokens == b.output_tokens
        and a.block_size == b.block_size
        and (not session or a.session_id == b.session_id)
    )


@pytest.mark.parametrize(
    ("suffix", "decompress"),
    [("", bytes), (".gz", gzip.decompress), (".bz2", bz2.decompress), (".xz", lzma.decompress)],
    ids=["plain", "gz", "bz2", "xz"],
)
def test_native_round_trip_keeps_everything(tmp_path, suffix, decompress):
    """Each compression the suffix names is written (the standard library's own decompressor reads
    it back to the plain file's bytes) and read back by its magic bytes, whatever the file's name."""
    reqs = sample_requests()
    write_trace(reqs, tmp_path / f"t.jsonl{suffix}", "native")
    write_trace(reqs, tmp_path / "plain.jsonl", "native")
    assert decompress((tmp_path / f"t.jsonl{suffix}").read_bytes()) == (tmp_path / "plain.jsonl").read_bytes()
    (tmp_path / f"t.jsonl{suffix}").rename(tmp_path / "renamed")
    back = list(read_trace(tmp_path / "renamed"))
    assert [as_lists(r) for r in back] == [as_lists(r) for r in reqs]


def test_native_mooncake_native(tmp_path):
    reqs = sample_requests()
    write_trace(reqs, tmp_path / "m.jsonl", "mooncake")
    assert detect_format(tmp_path / "m.jsonl") == "mooncake"
    write_trace(read_trace(tmp_path / "m.jsonl", "mooncake"), tmp_path / "n.jsonl", "native")
    back = list(read_trace(tmp_path / "n.jsonl"))
    # each row a whole request, without a session_id (AIPerf would make rows sharing one a chat)
    assert all(r.session_id is None for r in back)
    assert len(back) == len(reqs) and all(same(a, b, session=False) for a, b in zip(reqs, back, strict=True))


def test_native_aiperf_sessions_native(tmp_path):
    """Each later turn is written as what it adds to its previous turn's prompt and answer (session
    a: 1,300 - 1,000 - 10 = 290 tokens); read back, every prompt has its tokens again and a later
    turn's keys start with its previous turn's full prompt blocks."""
    reqs = sample_requests()
    write_trace(reqs, tmp_path / "s.jsonl", "aiperf-sessions")
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert rows[2] == {
        "session_id": "a",
        "input_length": 290,
        "output_length": 20,
        "hash_ids": [2],
        "timestamp": 1500,  # its arrival: AIPerf would count a delay from turn 1's answer
    }
    assert "session_id" not in rows[1]  # a request of its own: no name that a session could have
    back = list(read_trace(tmp_path / "s.jsonl", "aiperf-sessions"))
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens, r.session_id) for r in back] == [
        (r.arrival_s, r.prompt_tokens, r.output_tokens, r.session_id) for r in reqs
    ]
    assert key_list(back[2].block_keys)[:1] == [1]
    assert key_list(back[4].block_keys)[:2] == key_list(back[2].block_keys)[:2]
    assert key_list(back[2].block_keys)[1:] != [2, 3]  # past the history: keys of this chat alone


@pytest.mark.parametrize("fmt", ["mooncake", "aiperf-sessions"])
def test_aiperf_chats_are_read_as_aiperf_replays_them(tmp_path, fmt):
    """Rows sharing a session_id are one chat (AIPerf's default for Mooncake rows with hash_ids):
    turn k's prompt is the earlier turns and their answers, then its own tokens. Worked by hand with
    512-token blocks and vLLM's first-miss rule (at most prompt - 1 tokens hit):
    s1: 1,024 tokens [1, 2], 0 hit; then 1,024 + 100 + 512 = 1,636 tokens, hits blocks 1, 2: 1,024.
    s2: 900 tokens [1, 7] hits block 1 (s1's): 512; then 900 + 40 + 100 = 1,040 tokens: 512 (a short
    turn: the old reader refused it). s3: 600 tokens, a 1,000-token answer completes blocks 2 and 3;
    then 1,700 tokens hit all three: 1,536. Total 2,560 + 1,536 hit of 4,600 + 2,300 tokens."""
    from wakman.traces.stats import compute_stats

    turns = [  # (ms, session, new tokens, answer tokens, hash_ids)
        (0, "s1", 1024, 100, [1, 2]),
        (1000, "s2", 900, 40, [1, 7]),
        (2000, "s3", 600, 1000, [30, 31]),
        (5000, "s1", 512, 100, [3]),
        (6000, "s2", 100, 10, [8]),
        (7000, "s3", 100, 5, [32]),
    ]
    first_ms: dict[str, int] = {}
    rows = []
    for ms, sid, new, answer, ids in turns:
        row = {"session_id": sid, "input_length": new, "output_length": answer, "hash_ids": ids}
        if fmt == "mooncake" or sid not in first_ms:
            row["timestamp"] = ms
        else:
            row["delay"] = ms - first_ms[sid]
        first_ms[sid] = ms
        rows.append(row)
    path = write_rows(tmp_path / "chats.jsonl", *rows)
    assert detect_format(path) == "aiperf-sessions"  # rows with a session_id
    reqs = list(read_trace(path, fmt))
    assert [r.prompt_tokens for r in reqs] == [1024, 900, 600, 1636, 1040, 1700]
    # read after s2's next turn, which keeps only its full block [1] and views the same session's keys
    assert [key_list(r.block_keys)[:2] for r in reqs[:3]] == [[1, 2], [1, 7], [30, 31]]
    stats = compute_stats(reqs, lru_curve=False)
    assert stats.prompt_tokens == 6900
    assert stats.infinite_token_hit_ratio == pytest.approx((512 + 1024 + 512 + 1536) / 6900)


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
    path = write_rows(tmp_path / "bailian.jsonl", *rows)
    assert detect_format(path) == "bailian"
    reqs = list(read_trace(path))
    assert [r.session_id for r in reqs] == ["10", "11", "10", "10"]
    assert [r.label for r in reqs] == ["text", "search", "text", "text"]
    assert reqs[3].block_size == 16 and reqs[3].prompt_tokens == 90 and reqs[2].arrival_s == 2.0


def test_bailian_ids_name_blocks_not_prefixes(tmp_path):
    """Bailian's ids hash each 16-token block alone: a block hits only after the same prefix, as
    vLLM's chained hashes make it. The expected hits come from an independent model that keys a
    block by the tuple of ids up to it, with vLLM's first-miss rule (at most prompt - 1 tokens)."""
    from wakman.traces.stats import compute_stats

    rows = [  # (input_length, hash_ids): 9 and 2 recur after other prefixes, 7 twice in one prompt
        (48, [1, 2, 9]),
        (48, [3, 1, 9]),
        (64, [3, 2, 7, 7]),
        (64, [1, 2, 9, 5]),
        (64, [3, 2, 7, 7]),
    ]
    path = tmp_path / "bailian.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "chat_id": i,
                    "parent_chat_id": -1,
                    "timestamp": float(i),
                    "input_length": n,
                    "output_length": 1,
                }
                | {"hash_ids": ids}
            )
            + "\n"
            for i, (n, ids) in enumerate(rows)
        )
    )
    cache, hit, total, distinct = set(), 0, 0, set()
    for n, ids in rows:
        keys = [tuple(ids[: i + 1]) for i in range(len(ids))]
        found = 0
        while found < min(len(keys), (n - 1) // 16) and keys[found] in cache:
            found += 1
        hit, total = hit + 16 * found, total + n
        cache.update(keys[: n // 16])
        distinct.update(keys)
    reqs = list(read_trace(path))
    stats = compute_stats(reqs, lru_curve=False)
    assert stats.infinite_token_hit_ratio == pytest.approx(hit / total)
    assert len({k for r in reqs for k in key_list(r.block_keys)}) == len(distinct) == 10
    assert key_list(reqs[3].block_keys)[:3] == key_list(reqs[0].block_keys)  # one prefix, the same keys


def test_bailian_rows_without_their_optional_fields(tmp_path):
    """parent_chat_id, type and turn are optional (AIPerf's loader has them so): a row without them
    is a first turn of its own session."""
    row = {"chat_id": 5, "timestamp": 0.5, "input_length": 40, "output_length": 8, "hash_ids": [1, 2, 3]}
    path = write_rows(tmp_path / "bailian.jsonl", row)
    assert detect_format(path) == "bailian"
    [req] = read_trace(path)
    assert (req.session_id, req.label, req.prompt_tokens) == ("5", None, 40)


@pytest.mark.parametrize("fmt", ["native", "mooncake", "aiperf-sessions"])
def test_writers_write_the_same_bytes_from_arrays_and_lists(tmp_path, fmt):
    import numpy as np

    lists = sample_requests()
    arrays = [
        msgspec.structs.replace(
            r,
            block_keys=np.array(r.block_keys, dtype=np.uint64),
            output_keys=np.array(r.output_keys, dtype=np.uint64),
        )
        for r in lists
    ]
    write_trace(lists, tmp_path / "lists.jsonl", fmt)
    write_trace(arrays, tmp_path / "arrays.jsonl", fmt)
    assert (tmp_path / "lists.jsonl").read_bytes() == (tmp_path / "arrays.jsonl").read_bytes()


def test_requests_with_array_keys_validate_and_pickle():
    import pickle

    import numpy as np

    from wakman.traces.model import validate_request

    keys = np.array([2**64 - 1, 5, 2**40], dtype=np.uint64)
    req = Request(arrival_s=1.0, block_keys=keys, prompt_tokens=1500, output_tokens=4, block_size=512)
    validate_request(req, "mem", 1, 0.0)
    back = pickle.loads(pickle.dumps(req))
    assert back.block_keys.dtype == np.uint64 and back.block_keys.tolist() == keys.tolist()
    with pytest.raises(TraceFormatError, match="hash_ids"):
        validate_request(msgspec.structs.replace(req, prompt_tokens=1000), "mem", 1, 0.0)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 2**32 - 1) | st.sampled_from([1, 12, 123, 2, 23]), max_size=8),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from([",", ", ", " ,\n"]),
)
def test_kv_cache_tester_ids_decode_like_a_full_parse(lists, sep):
    """The reader reuses the ids of the text a list shares with the previous one; same result as
    decoding every list whole, whatever the spacing ([12, 3] after [123] included)."""
    from wakman.traces.kvcache_tester import _Ids

    ids = _Ids("mem")
    previous: list[int] = []
    for values in lists:
        values = previous[: len(values) // 2] + values  # share a prefix, as turns of a session do
        raw = ("[" + sep.join(map(str, values)) + "]").encode()
        assert ids.decode(raw).tolist() == values
        previous = values


def test_kv_cache_tester_bad_ids_after_a_shared_prefix(tmp_path):
    turns = [{"t": 0.0, "type": "n", "in": 640, "out": 1, "hash_ids": [1, 2, 3]}]
    turns.append({"t": 1.0, "type": "n", "in": 640, "out": 1, "hash_ids": [1, 2, "x"]})
    (tmp_path / "c.json").write_text(json.dumps({"id": "c", "block_size": 64, "requests": turns}))
    with pytest.raises(TraceFormatError, match="hash_ids"):
        list(read_trace(tmp_path / "c.json"))
    turns[1]["hash_ids"] = [1, 2, 2**32]
    (tmp_path / "c.json").write_text(json.dumps({"id": "c", "block_size": 64, "requests": turns}))
    with pytest.raises(TraceFormatError, match=r"\[0, 2\*\*32\)"):
        list(read_trace(tmp_path / "c.json"))


# a session's turns: each extends, cuts or replaces the previous one's keys (ids kept small so
# that the turns of one session share prefixes often)
_turn = st.tuples(st.integers(0, 3), st.integers(0, 40), st.lists(st.integers(0, 5), max_size=30))


@settings(max_examples=60, deadline=None)
@given(st.lists(_turn, max_size=25))
def test_native_sessions_read_back_their_own_keys_after_the_whole_trace(tmp_path_factory, turns):
    """Rows of four sessions, interleaved, each turn keeping some prefix of its session's previous
    keys and adding its own: read all of them first (later turns write into shared buffers), each
    request's keys are the ones written."""
    latest: dict[int, list[int]] = {}
    reqs = []
    for i, (session, keep, new) in enumerate(turns):
        keys = latest.get(session, [])[:keep] + new
        latest[session] = keys
        reqs.append(
            Request(
                arrival_s=float(i),
                block_keys=keys,
                prompt_tokens=16 * len(keys) + 1,
                output_tokens=1,
                block_size=16,
                session_id=f"s{session}",
            )
        )
    path = tmp_path_factory.mktemp("native") / "t.jsonl"
    write_trace(reqs, path, "native")
    back = list(read_trace(path))
    assert [key_list(r.block_keys) for r in back] == [r.block_keys for r in reqs]


def test_a_later_turn_before_its_sessions_previous_turn_is_refused(tmp_path):
    """Turn 2 extends turn 1's prompt and answer, so it cannot arrive first; read as given, turn 1
    would hit the blocks turn 2 brought."""
    path = write_rows(
        tmp_path / "back.jsonl",
        {"session_id": "a", "timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]},
        {"session_id": "a", "timestamp": 500, "input_length": 100, "output_length": 5, "hash_ids": [3]},
    )
    with pytest.raises(TraceFormatError) as info:
        list(read_trace(path, "aiperf-sessions"))
    assert (info.value.line, info.value.field) == (2, "timestamp")
    assert "previous turn" in str(info.value)


def test_sessions_given_one_after_another_are_detected_and_read_in_arrival_order(tmp_path):
    """AIPerf session rows with a timestamp on every turn, grouped by session (arrivals go back at
    the second session's first row): read as aiperf-sessions, which sorts them, not as Mooncake rows
    that must be in arrival order."""
    path = write_rows(
        tmp_path / "grouped.jsonl",
        {"session_id": "s1", "timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]},
        {"session_id": "s1", "timestamp": 5000, "input_length": 100, "output_length": 5, "hash_ids": [3]},
        {"session_id": "s2", "timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [1, 4]},
    )
    assert detect_format(path) == "aiperf-sessions"
    reqs = list(read_trace(path))
    assert [(r.session_id, r.arrival_s) for r in reqs] == [("s1", 0.0), ("s2", 1.0), ("s1", 5.0)]
    named = list(read_trace(path, "aiperf-sessions"))
    assert [list(r.block_keys) for r in reqs] == [list(r.block_keys) for r in named]
    assert [r.prompt_tokens for r in reqs] == [600, 600, 705]  # s1's turn 2: 600 + 5 + 100


def test_jsonl_rows_in_a_json_file_are_not_taken_for_a_conversation(tmp_path):
    """``.json`` names a kv-cache-tester conversation, unless its first line is a whole trace row."""
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}]
    path = write_rows(tmp_path / "moon.json", *rows, {**rows[0], "timestamp": 1})
    assert detect_format(path) == "mooncake"
    assert len(list(read_trace(path))) == 2
    conversation = {"id": "c", "block_size": 64, "requests": [{"t": 0, "in": 100, "out": 5, "hash_ids": [1]}]}
    assert detect_format(write_rows(tmp_path / "c.json", conversation)) == "kv-cache-tester"


@pytest.mark.parametrize("fmt", ["native", "mooncake", "aiperf-sessions", "kv-cache-tester"])
def test_a_utf8_byte_order_mark_is_read_past(tmp_path, fmt):
    """Windows tools (PowerShell's Out-File -Encoding utf8) open a text file with a UTF-8 BOM: the
    file reads, is detected, as the same file without it, plain or gzip-compressed."""
    if fmt == "kv-cache-tester":
        plain = tmp_path / "c.json"
        plain.write_text(
            json.dumps(
                {
                    "id": "c",
                    "block_size": 64,
                    "hash_id_scope": "local",
                    "requests": [
                        {"t": 0.0, "type": "n", "in": 130, "out": 2, "hash_ids": [1, 2]},
                        {"t": 3.0, "type": "n", "in": 200, "out": 2, "hash_ids": [1, 2, 3]},
                    ],
                }
            )
        )
    else:
        plain = tmp_path / "t.jsonl"
        write_trace(sample_requests(), plain, fmt)
    expected = [as_lists(r) for r in read_trace(plain)]
    for name, data in (
        ("bom" + plain.suffix, b"\xef\xbb\xbf" + plain.read_bytes()),
        ("bom" + plain.suffix + ".gz", gzip.compress(b"\xef\xbb\xbf" + plain.read_bytes())),
    ):
        marked = tmp_path / name
        marked.write_bytes(data)
        assert detect_format(marked) == fmt
        assert [as_lists(r) for r in read_trace(marked)] == expected


def test_aiperf_rows_without_a_session_id_are_requests_of_their_own(tmp_path):
    """A ``mooncake_trace`` row without a ``session_id`` (AIPerf: a one-turn chat) beside rows that
    carry one is a request of its own, read as the Mooncake reader reads it, whichever reader the
    file is detected for; the session's later turn extends its first turn's prompt and answer
    (1,000 + 100 + 300 tokens)."""
    rows = [
        {"timestamp": 0, "input_length": 1000, "output_length": 100, "hash_ids": [1, 2]},
        {"session_id": "a", "timestamp": 10, "input_length": 1000, "output_length": 100, "hash_ids": [1, 2]},
        {"session_id": "a", "timestamp": 2010, "input_length": 300, "output_length": 50, "hash_ids": [4]},
    ]
    path = write_rows(tmp_path / "mixed.jsonl", *rows)
    assert detect_format(path) == "aiperf-sessions"
    got = list(read_trace(path))
    assert [(r.arrival_s, r.session_id, r.prompt_tokens) for r in got] == [
        (0.0, None, 1000),
        (0.01, "a", 1000),
        (2.01, "a", 1400),
    ]
    # its first turn's one full prompt block (1,000 // 512), then keys of its own: 1,400 tokens, 3 blocks
    assert got[2].block_keys[0] == 1 and len(got[2].block_keys) == 3 and 2 not in list(got[2].block_keys)
    as_mooncake = list(read_trace(path, "mooncake"))  # the same requests, by the other reader
    assert [as_lists(r) for r in as_mooncake] == [as_lists(r) for r in got]


def test_a_session_named_like_a_generated_name_stays_its_own(tmp_path):
    """Writing a request without a session beside a session that happens to be called ``r0`` (the
    name the writer used to give that request) keeps them apart: two one-turn requests read back
    (they were merged into one two-turn chat, the second turn's prompt counting the first's)."""
    reqs = [
        Request(arrival_s=0.0, block_keys=[1, 2], prompt_tokens=1000, output_tokens=10, block_size=512),
        Request(
            arrival_s=1.0, block_keys=[5], prompt_tokens=15, output_tokens=1, block_size=512, session_id="r0"
        ),
    ]
    write_trace(reqs, tmp_path / "s.jsonl", "aiperf-sessions")
    back = list(read_trace(tmp_path / "s.jsonl"))
    assert [(r.session_id, r.prompt_tokens) for r in back] == [(None, 1000), ("r0", 15)]


def test_a_first_turn_keyed_on_a_prefix_keys_the_rest_for_the_next_turn(tmp_path):
    """AIPerf's prefix-only rows key a prompt's cached prefix and sample the rest once into the turn's
    text, which the next turn sends again as history: its blocks get keys of their own, so the next
    turn hits them. Turn 1: 2,048 tokens, one id (4 blocks of 512); turn 2 adds a 1-token answer and
    600 tokens: 2,649 tokens, of which turn 1's 4 full blocks (2,048 tokens) hit (512 before)."""
    from wakman.traces.stats import compute_stats

    path = write_rows(
        tmp_path / "prefix.jsonl",
        {"session_id": "s", "timestamp": 0, "input_length": 2048, "output_length": 1, "hash_ids": [1]},
        {"session_id": "s", "timestamp": 60000, "input_length": 600, "output_length": 1, "hash_ids": [9]},
    )
    first, second = read_trace(path)
    assert len(first.block_keys) == 4 and first.block_keys[0] == 1
    assert key_list(second.block_keys)[:4] == key_list(first.block_keys)
    stats = compute_stats([first, second], lru_curve=False)
    assert stats.infinite_token_hit_ratio == pytest.approx(2048 / (2048 + 2649))


@pytest.mark.parametrize(
    ("rows_", "fmt", "field", "says"),
    [
        (  # both clocks on one row: which one AIPerf follows depends on its mode
            [
                {
                    "session_id": "a",
                    "timestamp": 0,
                    "delay": 100,
                    "input_length": 10,
                    "output_length": 1,
                    "hash_ids": [1],
                }
            ],
            None,
            "delay",
            "give one of them",
        ),
        (  # AIPerf's untimed sessions start at its own request rate, which the file does not hold
            [{"session_id": "a", "input_length": 10, "output_length": 1, "hash_ids": [1]}],
            "aiperf-sessions",
            "timestamp",
            "--request-rate",
        ),
        (  # a session's delayed turn read as Mooncake rows would lose its delay
            [
                {"session_id": "a", "timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]},
                {"session_id": "a", "delay": 5, "input_length": 10, "output_length": 1, "hash_ids": [2]},
            ],
            "mooncake",
            "delay",
            r"read it as aiperf-sessions \(--format; --from in convert\)",
        ),
    ],
    ids=["timestamp-and-delay", "untimed-session", "delay-as-mooncake"],
)
def test_aiperf_rows_a_reader_cannot_time_are_refused(tmp_path, rows_, fmt, field, says):
    path = write_rows(tmp_path / "t.jsonl", *rows_)
    with pytest.raises(TraceFormatError, match=says) as info:
        list(read_trace(path, fmt))
    assert info.value.field == field
