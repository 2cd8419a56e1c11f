"""Session hints from vLLM's requests for chain-lru's session mode (``WAKMAN_SESSIONS=1``).

vLLM carries a session id on each request (``Request.session_id``, 0.32 on): the OpenAI server takes
it from the body's ``session_id``, the ``X-Session-ID`` header or ``vllm_xargs.session_id``; the
Python API from ``add_request(..., session_id=...)``. vLLM has no call that closes a session, so a
client marks the last request of one: ``vllm_xargs: {"session_end": true}`` (it reaches the
scheduler as ``SamplingParams.extra_args["session_end"]``; ``true``, a non-zero number or the
string ``"1"`` / ``"true"`` marks it).

What the live policy hears (the simulator's serve loops give the same hints, ``simulate(...,
session_ends_after_s=0)``):

- ``in_session(session_key(id))`` at the request's arrival, before its request hint
  (``on_request``), for a request with a session id;
- ``end_session(session_key(id))`` once a marked request is done (finished or aborted) and its
  blocks are back in the pool: after the scheduler call that finished it (``update_from_output``,
  ``finish_requests``), in the order vLLM finished them, before any later arrival; held while vLLM
  defers block frees (a KV connector's in-flight writes), since a pinned block cannot be demoted.

Session keys are ``wakman.drivers.session_key`` (BLAKE2b of the id: the simulator's keys for a
trace's ``session_id``). A policy that does not follow sessions ignores both hints.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Container, Iterable
from typing import Any

from wakman.drivers import session_key

log = logging.getLogger(__name__)

END_MARK = "session_end"  # SamplingParams.extra_args' (vllm_xargs') key marking a session's last request


def ends_session(request: Any) -> bool:
    """Whether the client marked ``request`` as its session's last (``extra_args["session_end"]``).
    A value that is not a flag is logged once and ignored."""
    params = getattr(request, "sampling_params", None)
    extra = getattr(params, "extra_args", None) or {}
    value = extra.get(END_MARK)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "0", "false", ""):
        return value.strip().lower() in ("1", "true")
    _warn_once(repr(value))
    return False


@functools.cache
def _warn_once(value: str) -> None:
    log.warning("wakman: ignoring vllm_xargs %s=%s (give true or false)", END_MARK, value)


class SessionHints:
    """The session hints of one pool's live policy (``queue.policy``, whichever is live)."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self._ending: dict[str, int] = {}  # request id -> session key, for marked requests not yet done

    def arrived(self, request: Any) -> None:
        """A request arrived: its session (if it has one) is told before its request hint."""
        session_id = getattr(request, "session_id", None)
        if not session_id:
            return
        key = session_key(session_id)
        self._queue.policy.in_session(key)
        if ends_session(request):
            self._ending[request.request_id] = key

    def tell_done(
        self, live: Container[str], order: Iterable[str] = (), blocks_pending: bool = False
    ) -> None:
        """Tell the ends of the marked requests no longer ``live`` (vLLM's ``scheduler.requests``),
        in ``order`` (the ids in the order vLLM finished them; others after, by arrival), unless
        ``blocks_pending`` (vLLM holds freed blocks back)."""
        if not self._ending or blocks_pending:
            return
        done = [rid for rid in self._ending if rid not in live]
        if not done:
            return
        if len(done) > 1:
            rank = {rid: i for i, rid in enumerate(order) if rid in self._ending}
            done.sort(key=lambda rid: rank.get(rid, len(rank)))
        policy = self._queue.policy
        for rid in done:
            policy.end_session(self._ending.pop(rid))
