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
  ``finish_requests``), in the order vLLM finished them, before any later arrival; where vLLM
  defers block frees (a KV consumer connector with overlapping batches), once the deferred frees
  of the step it was done in are drained, since a pinned block cannot be demoted
  (``SessionHints``).

Session keys are ``wakman.drivers.session_key`` (BLAKE2b of the id: the simulator's keys for a
trace's ``session_id``). A policy that does not follow sessions ignores both hints.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Container, Iterable
from typing import Any

from wakman.drivers import session_key

log = logging.getLogger(__name__)

END_MARK = "session_end"  # SamplingParams.extra_args' (vllm_xargs') key marking a session's last request


def ends_session(request: Any) -> bool:
    """Whether the client marked ``request`` as its session's last (``extra_args["session_end"]``).
    A value that is not a flag is ignored (the first one logged)."""
    params = getattr(request, "sampling_params", None)
    extra = getattr(params, "extra_args", None) or {}
    value = extra.get(END_MARK)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "0", "false", ""):
        return value.strip().lower() in ("1", "true")
    global _warned
    if not _warned:
        _warned = True
        log.warning("wakman: ignoring vllm_xargs %s=%r (give true or false)", END_MARK, value)
    return False


_warned = False


class SessionHints:
    """The session hints of one pool's live policy (``queue.policy``, whichever is live).

    A marked request is *ending* from its arrival until vLLM is done with it; then, if vLLM holds
    freed blocks back (``deferred``: its deferred frees, ``(fence step, blocks)`` pairs, which a KV
    consumer's overlapping batches make), it *waits* under the step it was done in (vLLM's
    ``sched_step_seq``) until no deferred entry with a fence at or before that step is left (its own
    blocks are among those, vLLM frees them in fence order); then its end is told. Ends are told in
    the order the requests were done (a call's own ``order`` first, then by arrival). A session with
    several marked requests running at once (``n > 1``, a batch of prompts: vLLM's sibling requests)
    ends once, when the last of them is done."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self._ending: dict[str, int] = {}  # request id -> session key, for marked requests not yet done
        self._marked: dict[int, int] = {}  # session key -> its marked requests not yet done
        self._waiting: list[tuple[int, int]] = []  # (step done in, session key), in the order done
        self.ends_told = 0  # session ends told to the policy so far

    def arrived(self, request: Any) -> None:
        """A request arrived: its session (if it has one) is told before its request hint."""
        session_id = getattr(request, "session_id", None)
        if not session_id:
            return
        key = session_key(str(session_id))
        self._queue.policy.in_session(key)
        if ends_session(request):
            self._mark(request.request_id, key)

    def chunk_arrived(self, request: Any) -> None:
        """A streaming input's next chunk arrived (vLLM gives the request the chunk's sampling
        parameters): a mark on it ends the session when the stream is done, as a mark on its first."""
        session_id = getattr(request, "session_id", None)
        if session_id and ends_session(request):
            self._mark(request.request_id, session_key(str(session_id)))

    def _mark(self, request_id: str, key: int) -> None:
        if request_id not in self._ending:
            self._ending[request_id] = key
            self._marked[key] = self._marked.get(key, 0) + 1

    def tell_done(
        self,
        live: Container[str],
        order: Iterable[str] = (),
        deferred: Collection[tuple[int, Any]] = (),
        step: int = 0,
    ) -> int:
        """After a scheduler call that may have finished requests: the marked requests no longer
        ``live`` (vLLM's ``scheduler.requests``) are done, in ``order`` (the ids in the order the call
        finished them); tell every end whose blocks are back (``deferred`` and ``step``: above).
        Returns how many ends it told."""
        done = [rid for rid in self._ending if rid not in live] if self._ending else []
        if len(done) > 1:
            rank = {rid: i for i, rid in enumerate(order) if rid in self._ending}
            done.sort(key=lambda rid: rank.get(rid, len(rank)))
        for rid in done:
            key = self._ending.pop(rid)
            self._marked[key] -= 1
            if not self._marked[key]:  # the session's last marked request running is done
                del self._marked[key]
                self._waiting.append((step, key))
        if not self._waiting:
            return 0
        first_fence = min((fence for fence, _ in deferred), default=None)
        told = 0
        for done_in, key in self._waiting:
            if first_fence is not None and first_fence <= done_in:
                break
            self._queue.policy.end_session(key)
            told += 1
        del self._waiting[:told]
        self.ends_told += told
        return told
