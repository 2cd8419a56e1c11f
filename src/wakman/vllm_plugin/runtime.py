"""The live policy of one vLLM block pool, and, for ``wakman``/``wakman-plus``, its manager.

Called from the scheduler (one thread): ``on_request`` logs what the paper's estimator logs (arrival
time, block hashes, prompt length); ``sample_free`` logs the free blocks after each step's
allocations and after each step's frees; ``on_step`` drives decisions. A
decision snapshots its window on the scheduler thread, replays it in a background thread (``thread``
mode, the default: the step never waits), and is applied by the first step after the replay ends:
the switch reorders the free blocks in O(cached blocks) on the scheduler thread, the only one that
touches the pool. A replay that raises is logged once; the live policy stays.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from wakman.adaptive.manager import AdaptiveManager, PendingDecision, timed_replay
from wakman.policies import make_policy
from wakman.vllm_plugin.block_pool import install, request_group
from wakman.vllm_plugin.free_queue import policy_key
from wakman.vllm_plugin.metrics import EngineState, publish_state
from wakman.vllm_plugin.sessions import SessionHints
from wakman.vllm_plugin.settings import PluginSettings

log = logging.getLogger(__name__)


class PolicyRuntime:
    def __init__(
        self,
        settings: PluginSettings,
        pool: Any,
        coordinator: Any = None,
        clock: Callable[[], float] = time.time,
        engine_index: int = 0,
        manager: Any = None,
    ) -> None:
        self.settings, self.clock, self.engine_index = settings, clock, engine_index
        self.capacity = pool.num_gpu_blocks - 1
        self.manager = AdaptiveManager(settings.adaptive, self.capacity) if settings.adaptive else None
        if self.manager:
            policy = self.manager.initial_policy()
        else:
            params = {"sessions": True} if settings.sessions else {}
            policy = make_policy(settings.policy, self.capacity, **params)
        self.pool = install(pool, policy, coordinator, manager)
        self.sessions = SessionHints(self.pool.free_block_queue) if settings.sessions else None
        # the session-ends counter's publishing: at most once a second, from the scheduler thread or
        # from the one timer left for an end held back; _publish_lock orders every publish
        self._unpublished_ends, self._next_publish_s = False, 0.0
        self._publish_lock = threading.Lock()
        self._ends_timer: threading.Timer | None = None
        # None: the pool's groups do not cache the request's hash blocks, so no request hints
        self._group = request_group(manager, pool) if manager is not None else 0
        self._executor = (
            ThreadPoolExecutor(1, thread_name_prefix="wakman-replay")
            if self.manager and settings.replay == "thread"
            else None
        )
        self._pending: tuple[PendingDecision, Future] | None = None
        self._publish()

    @property
    def live_policy(self) -> str:
        return self.manager.live if self.manager else self.settings.policy

    # ------------------------------------------------------------------ scheduler calls
    def on_request(
        self, arrival_s: float, block_hashes: list, block_size: int, prompt_tokens: int, request: Any = None
    ) -> None:
        """A request arrived (``arrival_s``: vLLM's arrival time, seconds): with ``WAKMAN_SESSIONS=1``
        its session hint (``request``: vLLM's ``Request``), then the live policy's request hint (its
        full prompt blocks; a policy that does not learn from requests skips it in the core; none
        where the pool's groups do not cache the hash blocks: ``request_group``), and
        the estimator's log. ``block_hashes`` is the request's own list, which vLLM extends as
        decoding fills blocks: with ``log_outputs`` the estimator keeps a view of that growing
        tail."""
        if self.sessions is not None and request is not None:
            self.sessions.arrived(request)
        if self._group is not None:
            self.pool.free_block_queue.request_arrived(block_hashes, self._group, arrival_s)
        if self.manager is not None:
            # 8 bytes a key in the estimator's log (a list of Python ints would take about 40)
            prompt = np.fromiter(map(policy_key, block_hashes), dtype=np.uint64, count=len(block_hashes))
            outputs = OutputBlocks(block_hashes, len(prompt)) if self.manager.config.log_outputs else ()
            self.manager.estimator.record(arrival_s, prompt, block_size, prompt_tokens, outputs)

    def on_requests_done(self, live: Any, order: Any = (), deferred: Any = (), step: int = 0) -> None:
        """After a scheduler call that may finish requests (``live``: the ids still held, vLLM's
        ``scheduler.requests``; ``order``: the ids in the order the call finished them; ``deferred``
        and ``step``: vLLM's deferred frees and step number): the ends of the sessions whose marked
        last request is done and whose blocks are back (``SessionHints.tell_done``)."""
        self.sample_free()  # the blocks the finished requests gave back
        if self.sessions is not None:
            self._publish_ends(told=self.sessions.tell_done(live, order, deferred, step))

    def _publish(self) -> None:
        """Write this engine's state for the collector (``publish_state``), one writer at a time."""
        with self._publish_lock:
            publish_state(self)

    def _publish_ends(self, told: bool = False) -> None:
        """Publish the session ends counter if it changed (``told``: ends were told just now), at
        most once a second. An end within the second after a publish is published when the second
        is over, by a timer (daemon thread): an engine that goes idle right after it (no more steps)
        still shows it."""
        with self._publish_lock:
            self._unpublished_ends |= told
            if not self._unpublished_ends:
                return
            now = time.monotonic()
            if now < self._next_publish_s:
                if self._ends_timer is None:
                    self._ends_timer = threading.Timer(self._next_publish_s - now, self._publish_held_ends)
                    self._ends_timer.daemon = True
                    self._ends_timer.start()
                return
            self._unpublished_ends, self._next_publish_s = False, now + 1.0
            publish_state(self)

    def _publish_held_ends(self) -> None:
        with self._publish_lock:
            self._ends_timer = None
        try:
            self._publish_ends()
        except Exception:  # the state changed under the timer's read: the next step publishes it
            log.debug("wakman: a held session-ends publish failed", exc_info=True)

    def sample_free(self) -> None:
        """Log the pool's free blocks from now on (the manager's estimator): the scheduler calls it
        once a step has allocated its blocks and once a step's output (or an abort) has freed
        some, the two moments the count changes."""
        if self.manager is not None:
            self.manager.estimator.sample_free(self.clock(), self.pool.get_num_free_blocks())

    def on_step(self) -> None:
        self._publish_ends()
        manager = self.manager
        if manager is None:
            return
        now = self.clock()
        if self._pending is not None and self._pending[1].done():
            self.drain()
        if self._pending is None and now >= manager.next_decision:
            self._start(now)

    # ------------------------------------------------------------------ decisions
    def _start(self, now: float) -> None:
        pending = self.manager.open_decision(now)
        if pending is None:
            self._publish()
            return
        replay = self.manager.replay_hook or self.manager.replay
        if self._executor is None:
            self._apply(pending, *timed_replay(replay, pending))
        else:
            self._pending = (pending, self._executor.submit(timed_replay, replay, pending))

    def _apply(self, pending: PendingDecision, rates: dict | None, error: str | None, wall_s: float) -> None:
        self._pending = None
        switch_to = self.manager.close_decision(pending, rates, error, wall_s)
        if switch_to is not None:
            self.pool.free_block_queue.switch(self.manager.make_policy(switch_to, self.capacity))
            log.info("wakman: live policy is now %s (shadow hit rates %s)", switch_to, rates)
        self._publish()

    def drain(self) -> None:
        """Apply the running replay's outcome, waiting for it if needed (end of a replay, tests)."""
        if self._pending is not None:
            pending, future = self._pending
            self._apply(pending, *future.result())

    def close(self) -> None:
        with self._publish_lock:
            if self._ends_timer is not None:
                self._ends_timer.cancel()
                self._ends_timer = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ reporting
    def state(self) -> EngineState:
        state = EngineState(
            engine=self.engine_index,
            policy_setting=self.settings.policy,
            live_policy=self.live_policy,
            candidates=list(self.manager.config.candidates) if self.manager else [self.settings.policy],
            capacity_blocks=self.capacity,
            session_ends=self.sessions.ends_told if self.sessions is not None else 0,
        )
        if self.manager is not None:
            decisions = self.manager.decisions
            replayed = [d for d in decisions if d.rates or d.error]
            state.decisions = len(decisions)
            state.switches = sum(d.switched for d in decisions)
            state.replay_errors = sum(d.error is not None for d in decisions)
            state.replay_seconds_total = sum(d.replay_wall_s for d in decisions)
            if replayed:
                state.last_replay_seconds = replayed[-1].replay_wall_s
                state.shadow_hit_rate = dict(replayed[-1].rates)
        return state


class OutputBlocks:
    """The blocks a request's decoding has filled so far: ``hashes[start:]``, read when replayed
    (vLLM appends to the list on the scheduler thread; a replay thread reads a consistent slice)."""

    __slots__ = ("hashes", "start")

    def __init__(self, hashes: list, start: int) -> None:
        self.hashes, self.start = hashes, start

    def __iter__(self):
        return map(policy_key, self.hashes[self.start :])

    def __len__(self) -> int:
        return max(0, len(self.hashes) - self.start)
