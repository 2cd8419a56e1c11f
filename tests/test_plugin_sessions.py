"""The vLLM plugin's session hints (``wakman.vllm_plugin.sessions``, no vLLM needed): how a client's
end mark is read, and when and in what order the live policy hears each session's end. (Against
vLLM's own scheduler and the simulator: ``tests/test_vllm_sched_loop.py``.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from wakman.drivers import session_key
from wakman.vllm_plugin.sessions import SessionHints, ends_session


@pytest.mark.parametrize(
    ("value", "ends"),
    [
        (True, True),
        (1, True),
        ("true", True),
        (" 1 ", True),
        (False, False),
        (0, False),
        ("0", False),
        ("", False),
        (None, False),
        ("soon", False),
        ([1], False),
    ],
)
def test_a_client_marks_a_sessions_last_request_in_vllm_xargs(value, ends):
    """``vllm_xargs: {"session_end": ...}`` reaches the scheduler as ``SamplingParams.extra_args``;
    a value that is not a flag is ignored, never fatal to the engine."""
    extra = None if value is None else {"session_end": value}
    assert ends_session(SimpleNamespace(sampling_params=SimpleNamespace(extra_args=extra))) is ends
    assert ends_session(SimpleNamespace(sampling_params=None)) is False


class Recorder:
    """A policy that records the session hints it hears."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, int]] = []

    def in_session(self, key: int) -> None:
        self.heard.append(("in", key))

    def end_session(self, key: int) -> None:
        self.heard.append(("end", key))


def _request(rid: str, session: object, marked: bool = False) -> SimpleNamespace:
    extra = {"session_end": True} if marked else None
    return SimpleNamespace(
        request_id=rid, session_id=session, sampling_params=SimpleNamespace(extra_args=extra)
    )


@pytest.fixture
def hints():
    policy = Recorder()
    hints = SessionHints(SimpleNamespace(policy=policy))
    return hints, policy


def test_each_arrival_with_a_session_is_told_and_marked_ones_end_in_vllms_finish_order(hints):
    hints, policy = hints
    for rid, session, marked in (("r1", "a", True), ("r2", "b", True), ("r3", None, True), ("r4", 7, True)):
        hints.arrived(_request(rid, session, marked))
    hints.arrived(_request("r5", "c"))
    assert policy.heard == [("in", session_key(s)) for s in ("a", "b", "7")] + [("in", session_key("c"))]
    policy.heard.clear()
    hints.tell_done(live={"r1", "r4", "r5"}, order=[])  # nothing the call finished was marked
    assert policy.heard == [("end", session_key("b"))]
    hints.tell_done(live={"r5"}, order=["r4", "r1"])  # vLLM finished r4 before r1
    assert policy.heard[1:] == [("end", session_key("7")), ("end", session_key("a"))]
    hints.tell_done(live=set(), order=["r5"])  # r5 was not marked: its session goes on
    assert len(policy.heard) == 3


def test_an_end_waits_for_its_steps_deferred_frees(hints):
    """vLLM frees a deferred entry once the step of its fence is processed; an end done in step s
    waits while an entry with a fence at or before s is left, and ends are told in the order done."""
    hints, policy = hints
    for rid, session in (("r1", "a"), ("r2", "b"), ("r3", "c")):
        hints.arrived(_request(rid, session, marked=True))
    policy.heard.clear()
    hints.tell_done(live={"r2", "r3"}, order=["r1"], deferred=[(5, ["blocks"])], step=5)
    assert policy.heard == []
    hints.tell_done(live={"r3"}, order=["r2"], deferred=[(5, ["blocks"]), (6, ["blocks"])], step=6)
    assert policy.heard == []
    hints.tell_done(live={"r3"}, order=[], deferred=[(6, ["blocks"])], step=6)  # step 5's drained
    assert policy.heard == [("end", session_key("a"))]
    hints.tell_done(live=set(), order=["r3"], deferred=[(8, ["blocks"])], step=7)
    assert policy.heard[1:] == [("end", session_key("b")), ("end", session_key("c"))]


def test_sibling_requests_of_a_session_end_it_once_after_the_last(hints):
    """``n > 1`` (or a batch of prompts) makes several marked requests of one session run at once:
    each ended the session as it finished (two ends counted, the first while its sibling still held
    the prompt blocks); the session ends once, when the last of them is done."""
    hints, policy = hints
    hints.arrived(_request("r1-0", "a", marked=True))
    hints.arrived(_request("r1-1", "a", marked=True))
    policy.heard.clear()
    assert hints.tell_done(live={"r1-1"}, order=["r1-0"]) == 0 and policy.heard == []
    assert hints.tell_done(live=set(), order=["r1-1"]) == 1
    assert policy.heard == [("end", session_key("a"))] and hints.ends_told == 1
    hints.arrived(_request("r2", "a", marked=True))  # a later turn, marked again: ends again
    hints.tell_done(live=set(), order=["r2"])
    assert hints.ends_told == 2


def test_a_mark_on_a_streaming_inputs_later_chunk_ends_its_session(hints):
    """A streaming input's chunks share one request id; vLLM gives the request each chunk's
    sampling parameters. A client that marks the last chunk ended nothing (the mark was read at
    the first arrival only); it ends the session once the stream is done, once."""
    hints, policy = hints
    hints.arrived(_request("s1", "a"))  # the first chunk, unmarked
    hints.chunk_arrived(_request("s1", "a", marked=True))
    hints.chunk_arrived(_request("s1", "a", marked=True))  # marked twice: still one end
    policy.heard.clear()
    assert hints.tell_done(live={"s1"}) == 0
    assert hints.tell_done(live=set(), order=["s1"]) == 1 and policy.heard == [("end", session_key("a"))]
