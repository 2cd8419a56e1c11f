"""The live policy of one vLLM block pool, and, for ``wakman``/``wakman-plus``, its manager.

Called from the scheduler (one thread): ``on_request`` logs what the paper's estimator logs (arrival
time, block hashes, prompt length); ``sample_free`` logs the free blocks after each step's
allocations and after each step's frees; ``on_step`` drives decisions, the first one interval after
the runtime starts (``AdaptiveManager.start``). A decision snapshots its window on the scheduler
thread, replays it in a background thread (``thread`` mode, the default: the step does not wait for
it; the core's replay loops run without the GIL), and is applied by the first step after the replay ends:
the switch reorders the free blocks in O(cached blocks) on the scheduler thread, the only one that
touches the pool. A replay that raises is logged once; the live policy stays.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from wakman.adaptive.manager import KEPT_DECISIONS, AdaptiveManager, PendingDecision
from wakman.adaptive.replays import DecisionReplays
from wakman.policies import make_policy
from wakman.vllm_plugin.block_pool import install, request_group
from wakman.vllm_plugin.free_queue import policy_key
from wakman.vllm_plugin.metrics import EngineState, publish_state
from wakman.vllm_plugin.sessions import SessionHints
from wakman.vllm_plugin.settings import PluginSettings

log = logging.getLogger(__name__)


def pool_blocks_per_key(manager: Any, pool: Any) -> float:
    """Pool blocks one hash block takes: vLLM keeps every KV-cache group in one pool, a group of
    ``b``-token blocks taking ``hash_block_size / b`` of them a hash block (one for each full
    attention group of the hash block size; below 1 where every group's blocks are larger than
    the hash block). Groups that cache no prefix (vLLM's ``prefix_cacheable``) are not counted. A
    sliding-window group holds fewer (the window's); counted as full attention, its shadows are
    that much smaller than the cache. 1 without groups to read (a bare pool)."""
    if manager is None:
        return 1.0
    managers = manager.coordinator.single_type_managers
    cached = [m for m in managers if getattr(m.kv_cache_spec, "prefix_cacheable", True)]
    return sum(pool.hash_block_size / m.block_size for m in cached) or 1.0


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
        self.manager = (
            AdaptiveManager(
                settings.adaptive,
                self.capacity,
                kept_decisions=KEPT_DECISIONS,
                pool_blocks_per_key=pool_blocks_per_key(manager, pool),
            )
            if settings.adaptive
            else None
        )
        if self.manager:
            self.manager.start(clock())  # the first decision one interval after the engine starts
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
        if self._group is None and settings.sessions:
            log.warning(
                "wakman: WAKMAN_SESSIONS=1 has no effect here: this model's KV-cache groups cache "
                "blocks larger than the request's hash blocks, so chain-lru hears no request hints "
                "(no session is followed; ends are counted, not acted on)"
            )
        self._replays = DecisionReplays(bool(self.manager) and settings.replay == "thread", "wakman-replay")
        # the logged outputs of requests not yet finished (log_outputs), by vLLM's request id
        self._decoding: dict[str, OutputBlocks] = {}
        self._overrun_logged = False  # a replay longer than the interval was logged
        self._publish()

    def use_clock(self, clock: Callable[[], float], start_s: float = 0.0) -> None:
        """Decide on ``clock`` from now on (a replay's trace seconds), the due times counted from
        ``start_s`` (0: a trace's start, as the simulator counts them), and keep every decision
        (a replay's report lists them all). Before the first request."""
        self.clock = clock
        if self.manager is not None:
            self.manager.start(start_s)
            self.manager.kept_decisions = None

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
            outputs: Any = ()
            if self.manager.config.log_outputs:
                outputs = OutputBlocks(block_hashes, len(prompt))
                if request is not None:
                    self._decoding[request.request_id] = outputs
            # vLLM stamps arrival_s before the request reaches the scheduler: a decision opened in
            # between has passed it, and it is logged at the earliest time a later one replays
            arrival_s = max(arrival_s, self.manager.earliest_replayed_s())
            self.manager.estimator.record(arrival_s, prompt, block_size, prompt_tokens, outputs)

    def on_request_chunk(self, request: Any) -> None:
        """A streaming input's next chunk (vLLM's ``Request`` of a known id): its session end mark
        (``WAKMAN_SESSIONS=1``); its blocks are the request's, already logged."""
        if self.sessions is not None:
            self.sessions.chunk_arrived(request)

    def on_requests_done(self, live: Any, order: Any = (), deferred: Any = (), step: int = 0) -> None:
        """After a scheduler call that may finish requests (``live``: the ids still held, vLLM's
        ``scheduler.requests``; ``order``: the ids in the order the call finished them; ``deferred``
        and ``step``: vLLM's deferred frees and step number): the ends of the sessions whose marked
        last request is done and whose blocks are back (``SessionHints.tell_done``)."""
        self.sample_free()  # the blocks the finished requests gave back
        if self._decoding:
            self._freeze_finished(live, order)
        if self.sessions is not None:
            self._publish_ends(told=self.sessions.tell_done(live, order, deferred, step))

    def _freeze_finished(self, live: Any, order: Any) -> None:
        """The finished requests' logged outputs become arrays of their keys (``OutputBlocks.freeze``),
        which drops vLLM's block-hash lists (about 80 bytes a block, 8 as keys). The ids finished
        now, and every id no longer held once the map holds twice the requests vLLM does (requests
        finished without a call that names them)."""
        decoding = self._decoding
        for request_id in order:
            if request_id not in live and (outputs := decoding.pop(request_id, None)) is not None:
                outputs.freeze()
        if len(decoding) > 2 * len(live) + 64:
            for request_id in [r for r in decoding if r not in live]:
                decoding.pop(request_id).freeze()

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
        if (outcome := self._replays.ended()) is not None:
            self._apply(*outcome)
        if not self._replays.running and now >= manager.next_decision:
            self._start(now)

    # ------------------------------------------------------------------ decisions
    def _start(self, now: float) -> None:
        pending = self.manager.open_decision(now, latest=True)
        if pending is None:
            self._publish()
            return
        outcome = self._replays.start(pending, self.manager.replay_hook or self.manager.replay)
        if outcome is not None:  # inline
            self._apply(*outcome)

    def _apply(self, pending: PendingDecision, rates: dict | None, error: str | None, wall_s: float) -> None:
        interval_s = self.manager.config.interval_s
        if wall_s > interval_s and not self._overrun_logged:
            log.warning(
                "wakman: a shadow replay took %.1f s, longer than the %g s between decisions: "
                "the decisions due meanwhile are passed over, each decision replays the latest "
                "window (WAKMAN_REPLAY=inline: steps wait for them); raise WAKMAN_INTERVAL_S",
                wall_s,
                interval_s,
            )
            self._overrun_logged = True
        switch_to = self.manager.close_decision(pending, rates, error, wall_s)
        if switch_to is not None:
            self.pool.free_block_queue.switch(self.manager.make_policy(switch_to, self.capacity))
            log.info("wakman: live policy is now %s (shadow hit rates %s)", switch_to, rates)
        self._publish()

    def drain(self) -> None:
        """Apply the running replay's outcome, waiting for it if needed (end of a replay, tests)."""
        if (outcome := self._replays.ended(wait=True)) is not None:
            self._apply(*outcome)

    def close(self) -> None:
        with self._publish_lock:
            if self._ends_timer is not None:
                self._ends_timer.cancel()
                self._ends_timer = None
        self._replays.close()

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
            totals = self.manager.totals  # O(1): the manager keeps the last decisions only
            state.decisions = totals.decisions
            state.switches = totals.switches
            state.replay_errors = totals.replay_errors
            state.replay_seconds_total = totals.replay_wall_s
            if (last := totals.last_replayed) is not None:
                state.last_replay_seconds = last.replay_wall_s
                state.shadow_hit_rate = dict(last.rates)
        return state


class OutputBlocks:
    """The blocks a request's decoding has filled so far: ``hashes[start:]``, read when replayed
    (vLLM appends to the list on the scheduler thread; a replay thread reads a consistent slice).
    Once the request finishes, ``freeze`` keeps those blocks' keys (a uint64 array) and lets go of
    vLLM's list."""

    __slots__ = ("hashes", "keys", "start")

    def __init__(self, hashes: list, start: int) -> None:
        self.hashes: list | None = hashes
        self.keys: np.ndarray | None = None
        self.start = start

    def freeze(self) -> None:
        hashes = self.hashes
        if hashes is not None:
            tail = hashes[self.start :]
            self.keys = np.fromiter(map(policy_key, tail), dtype=np.uint64, count=len(tail))
            self.hashes = None

    def __iter__(self):
        keys = self.keys  # read before hashes: a freeze (scheduler thread) sets keys, then drops hashes
        if keys is None:
            hashes = self.hashes
            if hashes is not None:
                return map(policy_key, hashes[self.start :])
            keys = self.keys
        return iter(keys)

    def __len__(self) -> int:
        keys = self.keys
        if keys is None:
            hashes = self.hashes
            if hashes is not None:
                return max(0, len(hashes) - self.start)
            keys = self.keys
        return len(keys)
