"""The WAKMan adaptive manager: shadow replay of recent traffic and live policy switching.

Decisions are due at ``first_decision_s + k * interval_s`` from the clock's 0 (a trace's start;
a live engine calls ``start(now)`` to count from its own start). The one due at T replays the requests
that arrived in [T - ``window_s``, T) through a fresh shadow of every candidate policy whose
capacity is that span's time-weighted mean number of free blocks, scores each (per-block hits /
keys, or vLLM's first-miss token rate), and makes the best the live policy. It is taken at the
first event at or after T (the loops wake on events); when several due times passed between two
events (an idle stretch), those whose windows hold no request are skipped, unlogged (but for the last
due time by the event, taken and logged with no requests where no window holds one), and the others
are taken in order. A live host (vLLM's GPU cache, its offload tier), whose replays take wall time,
opens instead the latest due time by the event whose window holds the newest request logged before
it: behind a replay slower than the interval it passes the others over (``totals.passed_over``,
``decisions_passed_over`` in the report), and with fresh shadows their windows' requests are not
replayed. A switch rebuilds the free blocks' order with ``handover`` in O(cached blocks):
the new policy adopts the old one's eviction order (S3-FIFO puts inherited blocks in its main queue,
oldest first; leaving S3-FIFO discards its ghost queue); pinned blocks stay pinned; no block is
lost. A replay that raises is logged once; the live policy stays and serving goes on.

With ``shadows="persistent"`` (wakman-plus) each candidate keeps one long-lived shadow instead: a
decision feeds it only the requests logged since the previous one and scores the ``window_s``
seconds up to the newest request fed (both ends included; with sparse traffic that reaches before
the decision's own ``window_start_s``), so every request is replayed once per candidate and no
shadow restarts cold, unless a replay fails part-way: then every shadow restarts. Such a
shadow, the pool's size and fed the trace's own outputs, is a plain cache-mode run of its candidate:
where that run was made anyway, its per-request hit tokens (``shadow_hits``) stand in for the
shadow (one replay serves both).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wakman import _core
from wakman.adaptive.config import AdaptiveConfig
from wakman.adaptive.estimator import Estimator, LoggedRequest
from wakman.drivers import replay_request
from wakman.policies import EvictionPolicy, handover, make_policy
from wakman.traces.model import Request, joined_keys

if TYPE_CHECKING:
    from wakman.simulation.pool import BlockPool
    from wakman.simulation.steps import DecodedBlocks

log = logging.getLogger(__name__)

KEPT_DECISIONS = 1024  # decisions a live manager keeps (vLLM's GPU cache, the offload tier)


@dataclass
class Decision:
    time_s: float  # when it was due: its window is [window_start_s, time_s)
    window_start_s: float
    shadow_capacity: int
    rates: dict[str, float]
    live_before: str
    choice: str
    switched: bool
    replay_wall_s: float
    requests: int  # fresh shadows: the window's requests; persistent ones: those fed since the last decision
    skipped: bool = False
    error: str | None = None
    taken_s: float | None = None  # the event at which it was taken (>= time_s), where the live cache switched

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DecisionTotals:
    """Counts over every decision a manager took (its ``decisions`` may keep the last ones only)."""

    decisions: int = 0
    switches: int = 0
    replay_errors: int = 0
    replay_wall_s: float = 0.0  # seconds of replay, all decisions
    passed_over: int = 0  # due times a live host passed over, behind a slow replay (open_decision)
    last_replayed: Decision | None = None  # the latest decision that replayed (rates or an error)


@dataclass
class PendingDecision:
    """A decision whose replay is running: the window is a private snapshot of the log."""

    decision: Decision
    window: list[LoggedRequest]
    capacity: int


@dataclass
class AdaptiveManager:
    """A ``wakman.simulation.Controller``: give it to ``simulate`` with its ``initial_policy``.

    ``shadow_hits`` (persistent shadows of the pool's size only): per candidate, the hit tokens of
    every request in arrival order that a cache-mode run of that candidate at ``capacity`` counted
    on the same requests (``SimResult.first_hit_tokens`` of ``simulate(requests, name, capacity,
    mode="cache")`` with the manager's parameters for it); the shadows are then not replayed. Valid
    while the shadows see the requests' own outputs (not the step loop's decoded blocks) and the
    estimator drops no request."""

    config: AdaptiveConfig
    capacity: int
    decisions: list[Decision] = field(default_factory=list)  # the last kept_decisions of them
    kept_decisions: int | None = None  # None: every decision (a run's report); vLLM keeps the last ones
    # pool blocks a logged key stands for (vLLM: one per KV-cache group that caches hash blocks):
    # the shadows are sized in keys, the pool's capacity and mean free blocks divided by it
    pool_blocks_per_key: float = 1.0  # > 0
    # replaces replay(window, capacity) -> rates for every host (cache mode, vLLM, the offload tier)
    replay_hook: Any = None  # tests inject a failing or recording replay here
    shadow_hits: Mapping[str, Sequence[int]] | None = None

    def __post_init__(self) -> None:
        if self.shadow_hits is not None:
            cfg = self.config
            if cfg.shadows != "persistent" or cfg.shadow_size != "pool":
                raise ValueError("shadow_hits: only persistent shadows of the pool's size are plain runs")
            if set(self.shadow_hits) != set(cfg.candidates):
                raise ValueError(f"shadow_hits: need exactly the candidates {', '.join(cfg.candidates)}")
            if any(cfg.policy_params.get(name, {}).get("sessions") for name in cfg.candidates):
                raise ValueError(
                    "shadow_hits: a candidate in session mode hears session ids its shadow never does"
                )
            if any(min(hits, default=0) < 0 for hits in self.shadow_hits.values()):
                raise ValueError("shadow_hits: a cache-mode run's first_hit_tokens (serve mode's hold -1)")
        if self.kept_decisions is not None and self.kept_decisions < 2:
            raise ValueError("kept_decisions: at least the last 2 (skip_unchanged reads them)")
        if not (self.pool_blocks_per_key > 0 and math.isfinite(self.pool_blocks_per_key)):
            raise ValueError(f"pool_blocks_per_key must be finite and > 0, got {self.pool_blocks_per_key}")
        self.estimator = Estimator(self.config.max_logged_blocks)
        self.next_decision = self.config.first_decision_s
        self.totals = DecisionTotals()  # over every decision taken, kept or not
        self._error_logged = False
        self._last_signature: tuple[float, float] | None = None
        self.live = self.config.start_policy
        # the step loop's view (watch_decoding) of each request's decoded blocks so far, logged as
        # vLLM's plugin logs them; None: the trace's output keys are logged
        self._decoded: DecodedBlocks | None = None
        # persistent shadows: one per candidate, fed each request once; per request scored:
        # (arrival s, prompt tokens, hit tokens per candidate), the last window_s seconds kept
        self._shadows: dict[str, EvictionPolicy] = {}
        self._scores = _core.DecayedScores(len(self.config.candidates))
        self._fed_until = 0.0

    def start(self, now: float) -> None:
        """Count time from ``now`` (s, the host's clock; a live engine's is the epoch): the first
        decision is due ``first_decision_s`` later, and persistent shadows start from it. Call it
        before the first request is recorded; without it time counts from 0 (a trace's clock)."""
        self.next_decision = now + self.config.first_decision_s
        self._fed_until = now

    def earliest_replayed_s(self) -> float:
        """The earliest arrival (s) a decision not yet opened still replays: persistent shadows are
        fed from the last decision's due time on, fresh ones replay from the next decision's window
        start. A host whose arrival stamps can be older than that (vLLM's are taken before the
        request reaches the scheduler) logs them no earlier, or no window would hold them."""
        if self.config.shadows == "persistent":
            return self._fed_until
        return self.next_decision - self.config.window_s

    def initial_policy(self) -> EvictionPolicy:
        return self.make_policy(self.config.start_policy, self.capacity)

    def make_policy(self, name: str, capacity: int) -> EvictionPolicy:
        """A candidate policy with this manager's parameters for it."""
        return make_policy(name, capacity, **self.config.policy_params.get(name, {}))

    # ------------------------------------------------------------------ Controller
    def on_arrival(self, now: float, request: Request) -> None:
        outputs = ()
        if self.config.log_outputs:
            outputs = request.output_keys if self._decoded is None else self._decoded.of(request)
        self.estimator.record(now, request.block_keys, request.block_size, request.prompt_tokens, outputs)

    def watch_decoding(self, view: DecodedBlocks | None) -> None:
        """The step loop's view of each request's decoded blocks so far (None after its run): logged
        in place of the trace's output keys, as vLLM's plugin logs them."""
        self._decoded = view

    @property
    def free_log(self) -> _core.FreeBlockLog:
        """The estimator's free-block log: the serve loop samples it at every event."""
        return self.estimator.free_log

    @property
    def wake_s(self) -> float:
        """The serve loop calls ``on_time`` only once simulated time reaches this (seconds)."""
        return self.next_decision

    def on_time(self, now: float, pool: BlockPool) -> None:
        """Take the decisions due by ``now`` (the loop has already sampled the pool's free blocks into
        ``free_log``)."""
        while now >= self.next_decision:
            self.decide(now, pool)

    def cache_decide(self, now: float, capacity: int) -> str | None:
        """Cache mode: take the decisions due by ``now`` (shadows of the live cache's ``capacity``);
        the policy to switch to, or None. Reads the logged requests only, never the live cache.
        Several decisions at one event (an idle stretch) hand the cache over once, to the last one's
        choice (none if it is the policy before them), where serve mode hands over at each; the log
        (``report()["switches"]``) counts every decision that switched."""
        before = self.live
        while now >= self.next_decision:
            self.decide(now, None, shadow_capacity=capacity)
        return None if self.live == before else self.live

    def cache_switch(self, live: EvictionPolicy, name: str) -> EvictionPolicy:
        """Cache mode: a ``name`` policy with this manager's parameters that took ``live``'s blocks."""
        return handover(live, self.make_policy(name, live.capacity))

    # ------------------------------------------------------------------ decisions
    def decide(self, now: float, pool: BlockPool | None, shadow_capacity: int | None = None) -> str:
        """Take the earliest decision due by ``now`` (``open_decision``); switch ``pool``'s policy if
        needed. Returns the live name."""
        pending = self.open_decision(now, shadow_capacity)
        if pending is None:
            return self.live
        switch_to = self.close_decision(pending, *timed_replay(self.replay_hook or self.replay, pending))
        if switch_to is not None and pool is not None:
            pool.replace_policy(handover(pool.policy, self.make_policy(switch_to, pool.capacity)))
        return self.live

    def open_decision(
        self, now: float, shadow_capacity: int | None = None, latest: bool = False
    ) -> PendingDecision | None:
        """Start the earliest decision due by ``now`` (``next_decision <= now``): snapshot its window
        to replay (safe to hand to another thread) and move ``next_decision`` on by one interval.
        None when there is nothing to replay; that decision is already logged. Due times before it
        whose windows hold no request are skipped (``_first_due``). ``latest`` (a live host, whose
        replays take wall time): the latest due time by ``now`` whose window holds the newest
        request logged before it instead, the ones before it passed over (``totals.passed_over``;
        persistent shadows are fed their requests in this one), so a replay slower than the interval
        does not leave every later decision further behind."""
        cfg = self.config
        if self.shadow_hits is not None:  # raised here: the replay's errors are logged, not raised
            if self._decoded is not None or self.estimator.dropped_requests:
                raise RuntimeError(
                    "shadow_hits: these shadows would see decoded blocks or miss dropped requests"
                )
            if any(len(hits) < self.estimator.recorded for hits in self.shadow_hits.values()):
                raise ValueError("shadow_hits: fewer hit counts than requests arrived")
        due = self._first_due(now)
        if latest and now - due >= cfg.interval_s:
            passed = self._passed_over(due, now)
            due += passed * cfg.interval_s
            self.totals.passed_over += passed
        start = max(0.0, due - cfg.window_s)
        persistent = cfg.shadows == "persistent"
        window_start = self._fed_until if persistent else start
        window = self.estimator.window(window_start, due)
        capacity = shadow_capacity
        if capacity is None:
            if cfg.shadow_size == "pool":
                blocks = float(self.capacity)
            else:
                blocks = self.estimator.mean_free(start, due)
            capacity = max(1, round(blocks / self.pool_blocks_per_key))
        self.next_decision = due + cfg.interval_s
        decision = Decision(
            due, start, capacity, {}, self.live, self.live, False, 0.0, len(window), taken_s=now
        )
        signature = (  # requests a second over the span the window covers, mean keys a request
            len(window) / max(due - window_start, 1e-9),
            sum(len(r.block_keys) for r in window) / max(len(window), 1),
        )
        if window and cfg.skip_unchanged and self._unchanged(signature):
            decision.skipped = True  # the shadows are not fed: persistent ones get these requests next time
        elif window:
            self._last_signature = signature
            if persistent:  # the window handed over is what the shadows have not seen yet
                self._fed_until = due
        # what no later window reads: persistent shadows have been fed up to _fed_until
        self.estimator.forget_before(self.earliest_replayed_s())
        if not window or decision.skipped:
            self._log(decision)
            return None
        return PendingDecision(decision, window, capacity)

    def _passed_over(self, due: float, now: float) -> int:
        """How many due times from ``due`` on a live host passes over at ``now``: up to the latest
        one by ``now`` whose window holds the newest request logged before that latest one (the
        first due time after that request), none where it arrived before ``due``."""
        interval = self.config.interval_s
        latest = math.floor((now - due) / interval)
        while latest > 0 and due + latest * interval > now:  # floats: never a due time after now
            latest -= 1
        newest = self.estimator.last_arrival_before(due + latest * interval)
        if newest is None or newest < due:
            return 0
        first = math.floor((newest - due) / interval) + 1
        while due + first * interval <= newest:  # floats: the window [.., due) holds the newest
            first += 1
        return min(latest, first)

    def _first_due(self, now: float) -> float:
        """The due time of the next decision to take at ``now``: ``next_decision``, or, when later
        due times have passed too (an idle stretch), the first of them whose window may hold a
        logged request, at most the last due time by ``now``. O(1) however long the stretch."""
        cfg, due = self.config, self.next_decision
        if now - due < cfg.interval_s:
            return due
        last = due + math.floor((now - due) / cfg.interval_s) * cfg.interval_s
        first = self.estimator.first_arrival_from(self.earliest_replayed_s())  # due: next_decision
        if first is None or first >= last:
            return last
        if first < due:  # in the window of the due time itself
            return due
        return min(last, due + (math.floor((first - due) / cfg.interval_s) + 1) * cfg.interval_s)

    def close_decision(
        self, pending: PendingDecision, rates: dict[str, float] | None, error: str | None, wall_s: float
    ) -> str | None:
        """Log the decision; return the policy to switch the live cache to, or None to stay."""
        decision = pending.decision
        decision.replay_wall_s = wall_s
        switch_to = self._choose(decision, rates, error)
        self._log(decision)
        return switch_to

    def _choose(self, decision: Decision, rates: dict[str, float] | None, error: str | None) -> str | None:
        """Fill in the decision's outcome (rates or error, choice); the policy to switch to, or None."""
        if error is not None or rates is None:
            decision.error = error or "no rates"
            if not self._error_logged:
                log.warning(
                    "WAKMan replay failed at t=%.1fs; keeping %s: %s",
                    decision.time_s,
                    self.live,
                    decision.error,
                )
                self._error_logged = True
            return None
        decision.rates = rates
        cfg = self.config
        best = max(cfg.candidates, key=lambda name: (rates[name], name == self.live))
        if best == self.live or rates[best] - rates.get(self.live, 0.0) <= cfg.hysteresis:
            return None
        decision.choice = best
        decision.switched = True
        self.live = best
        return best

    def _log(self, decision: Decision) -> None:
        """Keep the decision (the last ``kept_decisions``) and count it in ``totals``."""
        self.decisions.append(decision)
        if self.kept_decisions is not None and len(self.decisions) > 2 * self.kept_decisions:
            del self.decisions[: -self.kept_decisions]  # amortized O(1) a decision
        totals = self.totals
        totals.decisions += 1
        totals.switches += decision.switched
        totals.replay_errors += decision.error is not None
        totals.replay_wall_s += decision.replay_wall_s
        if decision.rates or decision.error:
            totals.last_replayed = decision

    def _unchanged(self, signature: tuple[float, float]) -> bool:
        """Whether a decision may be skipped: the last two decisions were replayed (not skipped)
        and chose the same policy, and ``signature`` (requests a second, mean keys a request) is
        within 10 % of the last replayed window's, each over the span its window covers."""
        if self._last_signature is None or len(self.decisions) < 2:
            return False
        recent = [d for d in self.decisions[-2:] if not d.skipped]
        if len(recent) < 2 or recent[0].choice != recent[1].choice:
            return False
        return all(
            abs(a - b) <= 0.1 * max(abs(b), 1e-9)
            for a, b in zip(signature, self._last_signature, strict=True)
        )

    def replay(self, window: list[LoggedRequest], capacity: int) -> dict[str, float]:
        """Each candidate's shadow hit rate over the window, from fresh shadows of ``capacity``
        (or, with persistent shadows, from those fed ``window`` on top of all earlier traffic)."""
        if self.config.shadows == "persistent":
            return self._persistent_replay(window, capacity)
        rates = {}
        for name in self.config.candidates:
            shadow = self.make_policy(name, capacity)
            if self.config.shadow_metric == "block":
                keys = joined_keys(r.block_keys for r in window)
                rates[name] = shadow.replay(keys) / len(keys) if len(keys) else 0.0
            else:
                rates[name] = _first_miss_rate(window, shadow)
        return rates

    def _persistent_replay(self, new_requests: list[LoggedRequest], capacity: int) -> dict[str, float]:
        """Feed the requests logged since the last decision to one long-lived shadow per candidate
        (created at the first decision with ``capacity`` blocks) and score each over the last
        ``window_s`` seconds with vLLM's first-miss rule. Each request is replayed once per
        candidate, and the shadows never restart cold."""
        names = self.config.candidates
        if self.shadow_hits is not None:  # checked by open_decision
            given = self.shadow_hits
            per_shadow = [[given[name][r.index] for r in new_requests] for name in names]
        else:
            for name in names:
                if name not in self._shadows:
                    self._shadows[name] = self.make_policy(name, capacity)
            # one shadow at a time over the whole batch (the shadows are independent): its tables stay
            # in the CPU's cache, where interleaving the shadows request by request made each evict
            # the others' (about 1.5x the time on the Claude Code archive)
            try:
                per_shadow = [
                    [_first_miss_hits(r, self._shadows[name]) for r in new_requests] for name in names
                ]
            except BaseException:
                # a shadow fed part of the batch would differ from the others in history for good:
                # every shadow starts again cold, and the scores with them
                self._shadows.clear()
                self._scores = _core.DecayedScores(len(names))
                raise
        scores = self._scores
        for r, hits in zip(new_requests, zip(*per_shadow, strict=True), strict=True):
            scores.add(r.arrival_s, r.prompt_tokens, list(hits))
        if new_requests:
            scores.forget_before(new_requests[-1].arrival_s - self.config.window_s)
        # each request weighs 2^(-(newest arrival - its arrival) / half-life): hit tokens / prompt tokens
        return dict(zip(names, scores.rates(self.config.half_life_s), strict=True))

    def report(self) -> dict[str, Any]:
        return {
            "adaptive": self.config.name,
            "decisions": [d.as_dict() for d in self.decisions],
            "switches": self.totals.switches,
            "decisions_passed_over": self.totals.passed_over,
            "replay_wall_s_total": self.totals.replay_wall_s,
            "estimator_dropped_requests": self.estimator.dropped_requests,
        }


def timed_replay(
    replay: Callable[[list[LoggedRequest], int], dict[str, float]], pending: PendingDecision
) -> tuple[dict[str, float] | None, str | None, float]:
    """Run ``replay`` on a pending decision: (rates, None, wall s), or (None, error, wall s) when it
    raises. An estimator failure never reaches the cache; ``close_decision`` logs it."""
    began = time.perf_counter()
    try:
        return replay(pending.window, pending.capacity), None, time.perf_counter() - began
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}", time.perf_counter() - began


def _first_miss_rate(window: list[LoggedRequest], shadow: EvictionPolicy) -> float:
    """vLLM's way: each request hits its longest cached prefix (at most prompt - 1 tokens), then
    its blocks are accessed deepest first; the score is hit tokens / prompt tokens."""
    hit_tokens = prompt_tokens = 0
    for r in window:
        hit_tokens += _first_miss_hits(r, shadow)
        prompt_tokens += r.prompt_tokens
    return hit_tokens / prompt_tokens if prompt_tokens else 0.0


def _first_miss_hits(r: LoggedRequest, shadow: EvictionPolicy) -> int:
    """One request through ``shadow`` the vLLM way; returns its hit tokens."""
    hits, _, _ = replay_request(
        shadow, r.block_keys, r.prompt_tokens, r.block_size, r.output_keys, r.arrival_s
    )
    return hits * r.block_size
