"""Serve mode: a discrete-event simulation of one vLLM-like server over a trace.

Per request: arrival -> FCFS admission (lookup, pin hits, allocate and cache the prompt's blocks)
-> prefill on the single lane -> decode, one block event each time the computed tokens fill a block
(cache it with its key, allocate the next; when none is free, preempt the most recently admitted
request, as vLLM does, and re-queue it first) -> finish: release blocks deepest first.
Hit figures count first admissions of requests arriving after the warm-up; re-admissions after
preemption are counted apart (as vLLM's PrefixCacheStats does).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence

from wakman.policies import Belady
from wakman.simulation.controller import Controller
from wakman.simulation.pool import BlockPool
from wakman.simulation.results import IntervalStats, SimResult
from wakman.simulation.server import ServerModel
from wakman.traces.model import Request

_BLOCK, _FINISH = 0, 1


class _Run:
    """One request's state; its held blocks live in the pool (run number = request index)."""

    __slots__ = ("admit_t", "blocks", "full", "last", "max_hit", "measured", "prefill_end", "req", "started",
                 "total", "version")

    def __init__(self, req: Request, measured: bool) -> None:
        self.req = req
        self.measured = measured
        self.blocks = 0  # blocks held now
        self.version = 0
        self.started = False  # admitted at least once
        self.admit_t = 0.0
        self.prefill_end = 0.0
        bs = req.block_size
        self.total = -(-req.prompt_tokens // bs)  # prompt blocks, the partial last one included
        self.full = req.full_blocks
        self.max_hit = req.max_hit_blocks
        # tokens with KV when the request ends: the last sampled token has none
        self.last = req.prompt_tokens + max(req.output_tokens, 1) - 1


class ServeSimulation:
    def __init__(
        self,
        requests: Sequence[Request],
        pool: BlockPool,
        server: ServerModel,
        result: SimResult,
        warmup_s: float = 0.0,
        interval_s: float = 60.0,
        controller: Controller | None = None,
        belady_offsets: list[int] | None = None,
        warmup_requests: int = 0,
    ) -> None:
        self.requests, self.pool, self.server, self.result = requests, pool, server, result
        self.warmup_s, self.interval_s, self.controller = warmup_s, interval_s, controller
        self.belady_offsets = belady_offsets
        self.warmup_requests = warmup_requests
        self.events: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind, run index, version)
        self.seq = 0
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self.runs: list[_Run] = []
        self.lane_free = 0.0
        self.now = 0.0
        self.free_area = 0.0
        self.t0: float | None = None
        self.counted_evictions = 0

    # ------------------------------------------------------------------ time and bookkeeping
    def _interval(self, t: float) -> IntervalStats:
        index = int(t // self.interval_s)
        intervals = self.result.intervals
        while len(intervals) <= index:
            intervals.append(IntervalStats(start_s=len(intervals) * self.interval_s))
        return intervals[index]

    def _advance(self, t: float) -> None:
        """Integrate the free-block count from ``now`` to ``t`` (time-weighted means)."""
        if self.t0 is None:
            self.t0 = self.now = t
        cell = self._interval(self.now)
        cell.evictions += self.pool.evictions - self.counted_evictions
        cell.policy = self.pool.policy.name
        self.counted_evictions = self.pool.evictions
        free = self.pool.free
        start = self.now
        while start < t:
            cell = self._interval(start)
            end = min(t, cell.start_s + self.interval_s)
            cell.free_block_seconds += free * (end - start)
            cell.seconds += end - start
            start = end if end > start else t
        if t > self.now:
            self.free_area += free * (t - self.now)
            self.now = t
        if self.controller is not None:
            self.controller.on_time(t, self.pool)

    def _push(self, t: float, kind: int, index: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, index, self.runs[index].version))

    # ------------------------------------------------------------------ admission
    def _try_admit(self) -> None:
        while self.waiting and len(self.running) < self.server.max_running:
            index = self.waiting[0]
            req = self.runs[index].req
            if -(-self.runs[index].last // req.block_size) > self.pool.capacity:
                # it could never finish (vLLM refuses such a request: max_model_len must fit the cache)
                self.result.rejected += 1
                self.waiting.popleft()
                continue
            if not self._admit(index):
                return
            self.waiting.popleft()

    def _admit(self, index: int) -> bool:
        run, pool = self.runs[index], self.pool
        req = run.req
        bs = req.block_size
        if self.belady_offsets is not None:
            policy = pool.policy
            if isinstance(policy, Belady):
                policy.seek(self.belady_offsets[index + 1])
        hits = pool.admit(index, req.block_keys, run.max_hit, run.total, run.full)
        if hits < 0:
            return False  # it does not fit in the free blocks yet
        run.blocks = run.total
        first = not run.started
        run.started = True
        run.admit_t = self.now
        self.running.append(index)
        cell = self._interval(self.now)
        cell.admissions += 1
        cell.prompt_tokens += req.prompt_tokens
        cell.hit_tokens += hits * bs
        res = self.result
        if first and run.measured:
            res.measured_requests += 1
            res.prompt_tokens += req.prompt_tokens
            res.hit_tokens += hits * bs
            res.block_lookups += len(req.block_keys)
            res.block_hits += hits
            res.queueing_delays_s.append(self.now - req.arrival_s)
        start = max(self.now, self.lane_free)
        run.prefill_end = start + self.server.prefill_s(req.prompt_tokens - hits * bs)
        self.lane_free = run.prefill_end
        if run.measured and first:
            res.ttfts_s.append(run.prefill_end - req.arrival_s)
        self._schedule_next(index)
        return True

    # ------------------------------------------------------------------ decode
    def _schedule_next(self, index: int) -> None:
        run = self.runs[index]
        req = run.req
        boundary = run.blocks * req.block_size  # the held blocks are full at this token count
        if boundary <= run.last and boundary >= req.prompt_tokens:
            t = run.prefill_end + self.server.decode_s(boundary - req.prompt_tokens)
            self._push(t, _BLOCK, index)
        else:
            self._push(run.prefill_end + self.server.decode_s(max(req.output_tokens, 1)), _FINISH, index)

    def _on_block(self, index: int) -> None:
        run, pool = self.runs[index], self.pool
        req = run.req
        j = run.blocks - 1  # the last held block just filled up
        out = j - run.full
        outputs = req.output_keys
        if 0 <= out < len(outputs):  # cached if it is anonymous (the pool checks)
            parent = outputs[out - 1] if out > 0 else (req.block_keys[j - 1] if j else None)
            pool.fill_last(index, outputs[out], parent)
        if (j + 1) * req.block_size >= run.last:  # no token left needs a new block
            self._push(run.prefill_end + self.server.decode_s(max(req.output_tokens, 1)), _FINISH, index)
            return
        while pool.free < 1:
            victim = self.running[-1]
            self._preempt(victim)
            if victim == index:
                return
        run.blocks = pool.extend(index)
        self._schedule_next(index)

    def _preempt(self, index: int) -> None:
        run = self.runs[index]
        self.pool.release_run(index)
        run.blocks = 0
        run.version += 1
        self.running.remove(index)
        self.waiting.appendleft(index)
        self.result.preemptions += 1

    def _on_finish(self, index: int) -> None:
        self.pool.release_run(index)
        self.runs[index].blocks = 0
        self.running.remove(index)

    # ------------------------------------------------------------------ main loop
    def run(self) -> SimResult:
        requests = self.requests
        self.runs = [
            _Run(r, r.arrival_s >= self.warmup_s and i >= self.warmup_requests)
            for i, r in enumerate(requests)
        ]
        n, i = len(requests), 0
        self.pool.reserve_runs(n)
        events = self.events
        while i < n or events:
            next_arrival = requests[i].arrival_s if i < n else math.inf
            if events and events[0][0] <= next_arrival:
                t, _, kind, index, version = heapq.heappop(events)
                self._advance(t)
                if version != self.runs[index].version:
                    continue
                if kind == _BLOCK:
                    self._on_block(index)
                else:
                    self._on_finish(index)
            else:
                self._advance(next_arrival)
                if self.controller is not None:
                    self.controller.on_arrival(next_arrival, requests[i])
                self.waiting.append(i)
                i += 1
            self._try_admit()
        res = self.result
        res.requests = n
        span = self.now - (self.t0 or 0.0)
        res.mean_free_blocks = self.free_area / span if span > 0 else float(self.pool.free)
        res.evictions = self.pool.evictions
        res.stranded_blocks = self.pool.stranded()
        return res
