"""The estimator: what WAKMan logs, and nothing more (no request type, no prompt content).

Per request: its arrival time (s) and block keys; per event: the number of free blocks, integrated
over time so that each window's time-weighted mean is exact (``free_log``, the core's
``FreeBlockLog``: the serve-mode loops sample it at every event themselves, without a call into
Python; the count read before an event is processed is logged from the previous event's time,
since it held from then; vLLM's scheduler logs the count after each step's allocations and after
each step's frees, the two moments it changes). Memory is bounded: at most ``max_blocks`` logged
prompt keys, the oldest requests dropped first. Each request's keys are the uint64 array it came
with (a trace's requests share their reader's arrays; the vLLM plugin builds one per request), 8
bytes a key: the default 4 M keys is 32 MB. A request's output keys (wakman-plus logs them: in vLLM a
view of the request's own block hashes while it runs, an array of 8-byte keys once it finishes) are
not counted in that bound. The free-block log holds
one 24-byte segment per event since the oldest window start a decision still reads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from wakman import _core

DEFAULT_MAX_BLOCKS = 4_000_000


@dataclass(frozen=True)
class LoggedRequest:
    arrival_s: float
    block_keys: Sequence
    block_size: int
    prompt_tokens: int
    output_keys: Sequence = ()  # blocks decoding filled (cached by vLLM), when logged
    index: int = 0  # the request's position among every request recorded (arrival order, from 0)


class Estimator:
    def __init__(self, max_blocks: int = DEFAULT_MAX_BLOCKS) -> None:
        self.max_blocks = max_blocks
        self.log: deque[LoggedRequest] = deque()
        self.logged_blocks = 0
        self.dropped_requests = 0
        self.recorded = 0  # requests recorded so far, dropped ones included
        self.free_log = _core.FreeBlockLog()  # (start s, end s, free blocks) segments

    def record(
        self,
        arrival_s: float,
        block_keys: Sequence,
        block_size: int,
        prompt_tokens: int,
        output_keys: Sequence = (),
    ) -> None:
        self.log.append(
            LoggedRequest(arrival_s, block_keys, block_size, prompt_tokens, output_keys, self.recorded)
        )
        self.recorded += 1
        self.logged_blocks += len(block_keys)
        while self.logged_blocks > self.max_blocks and len(self.log) > 1:
            old = self.log.popleft()
            self.logged_blocks -= len(old.block_keys)
            self.dropped_requests += 1

    def sample_free(self, now: float, free_blocks: int) -> None:
        """The pool has ``free_blocks`` free blocks from ``now`` on, until the next sample (a sample back
        in time is ignored; a second one at the same time replaces the first's count)."""
        self.free_log.sample(now, free_blocks)

    def first_arrival_from(self, start_s: float) -> float | None:
        """The earliest logged arrival at or after ``start_s`` (seconds), or None (O(older entries))."""
        return next((r.arrival_s for r in self.log if r.arrival_s >= start_s), None)

    def last_arrival_before(self, end_s: float) -> float | None:
        """The latest logged arrival before ``end_s`` (seconds), or None (O(newer entries))."""
        return next((r.arrival_s for r in reversed(self.log) if r.arrival_s < end_s), None)

    def window(self, start_s: float, end_s: float) -> list[LoggedRequest]:
        return [r for r in self.log if start_s <= r.arrival_s < end_s]

    def mean_free(self, start_s: float, end_s: float) -> float:
        """Time-weighted mean number of free blocks over [start_s, end_s) (the part the samples
        cover, the last sample's count holding from its time on; where they cover none, the last
        sample's count)."""
        return self.free_log.mean(start_s, end_s)

    def forget_before(self, t: float) -> None:
        """Drop what no future window will read (requests and samples before ``t``)."""
        while self.log and self.log[0].arrival_s < t:
            old = self.log.popleft()
            self.logged_blocks -= len(old.block_keys)
        self.free_log.forget_before(t)
