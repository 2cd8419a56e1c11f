"""The time model of a GPU server: simple, documented, configurable.

- Admission is first come, first served: the head request waits while its new blocks (plus its
  cached hits that are free, since pinning takes them out of the free queue) exceed the free
  blocks, or while ``max_running`` requests run.
- Prefill runs on one lane, one request at a time, at ``prefill_tokens_per_s`` over the uncached
  prompt tokens plus ``prefill_overhead_s``; the first token comes when it ends.
- Decode produces ``decode_tokens_per_s`` tokens per second per running request (continuous
  batching keeps per-request speed roughly flat up to the batch limit). A request of ``n`` output
  tokens holds its blocks until ``n / decode_tokens_per_s`` after its prefill ends (at least one
  token's time): the model charges the first token a decode step too, where vLLM samples it in the
  prefill step, so its requests finish one token's time (25 ms at the default) later than vLLM's
  would (the step loop's ``VllmServer`` counts vLLM's steps).

Defaults describe one 8B-parameter model on one H100-class GPU: prefill ~10k tokens/s, decode
~40 tokens/s per sequence at moderate batch, up to 64 concurrent sequences; they make 1.5
requests/s of the generated workloads busy but stable, so queueing reflects cache misses.

A vLLM configuration (``VllmServer``, by vLLM's own names: ``max_num_batched_tokens``,
``max_num_seqs``, and the time of an engine step, ``step_s`` seconds plus ``1 / tokens_per_s`` per
scheduled token when a throughput is given) is not turned into this model: ``simulate`` runs it step
by step as vLLM's scheduler does (``wakman.simulation.steps``: chunked prefill, admission only when
the whole sequence fits, preemption of the most recent request, blocks cached as they are
computed). ``wakman replay --engine vllm`` reports the configuration its engine ran (``server_model``
in ``--json``), which ``wakman simulate --server-model`` reads back.

Saturation (``saturation``): a modelled server that cannot keep up reports hit rates of a queue,
not of a server, so every serve-mode run says whether it kept up. Two measures over the measured
admissions, and the rule:
- ``prefill_utilization``: the prefill lane's busy seconds (every admission of a measured request,
  re-admissions after preemption included) over the arrival span (first to last arrival,
  seconds). Above 1 the offered prefill work exceeds what the lane can do in the time the traffic
  takes.
- ``queue_growth``: the least-squares slope of each measured request's queueing delay (seconds
  from its arrival to the start of its prefill: the admission queue and, in the continuous model,
  the prefill lane; its own prefill left out, so longer prompts alone do not read as a queue)
  against its arrival time (seconds): 0 for a server that keeps up, ``load - 1`` for one whose
  queue grows without end (the prefill lane, the decode slots or the KV pool can be the
  bottleneck).
- ``mean_wait_s``: the measured requests' mean queueing delay (seconds).
- saturated when ``prefill_utilization > 1`` or ``queue_growth > QUEUE_GROWTH_LIMIT`` (the
  queueing delay grows by more than 3 s per minute of traffic, sustained over the whole trace),
  and the requests wait for their prefill ``MIN_SATURATED_WAIT_S`` or more on average: a burst
  whose prefill work outruns its short span, but whose requests wait a fraction of a second, is
  served, not queued.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wakman.numbers_check import is_integer, is_real

if TYPE_CHECKING:
    from wakman.traces.model import Request

QUEUE_GROWTH_LIMIT = 0.05  # seconds of queueing delay per second of traffic
MIN_SATURATED_WAIT_S = 1.0  # mean queueing delay (s) below which a run kept up, whatever the rates
# Past these a modelled server's clock runs for ever (or its per-interval series fills the memory):
# one token a second at the least, a minute an engine step (or a prefill's fixed cost) at the most.
MIN_TOKENS_PER_S = 1.0
MAX_STEP_S = 60.0
MAX_SEQUENCES = 2**63 - 1  # a count of tokens or requests: the core holds it in 64 bits


def _check_rate(owner: str, name: str, value: float) -> None:
    if not (is_real(value) and math.isfinite(value) and value >= MIN_TOKENS_PER_S):
        rule = f"finite and >= {MIN_TOKENS_PER_S:g} tokens/s"
        raise ValueError(f"{owner}: {name} must be {rule}, got {value!r}")


def _check_seconds(owner: str, name: str, value: float, least: float, strict: bool) -> None:
    ok = is_real(value) and math.isfinite(value) and (value > least if strict else value >= least)
    if not (ok and value <= MAX_STEP_S):
        rule = f"{'>' if strict else '>='} {least:g} and <= {MAX_STEP_S:g} seconds"
        raise ValueError(f"{owner}: {name} must be {rule}, got {value!r}")


def _check_count(owner: str, name: str, value: int) -> None:
    if not (is_integer(value) and 1 <= value <= MAX_SEQUENCES):
        raise ValueError(f"{owner}: {name} must be an integer in [1, {MAX_SEQUENCES:,}], got {value!r}")


# ServerModel.keeping_up's defaults: a lane at most this busy over the trace's span if the cache
# never hit, and its prefill throughput raised in steps of this many tokens/s.
KEEP_UP_UTILIZATION = 0.5
KEEP_UP_STEP = 10_000.0


@dataclass(frozen=True)
class VllmServer:
    """A vLLM engine's scheduling settings, by vLLM's names. A step takes ``step_s`` seconds (what a
    GPU sustains at this batch, or the replay's virtual step) plus one second per ``tokens_per_s``
    tokens it schedules (None: every step takes ``step_s``). ``cache_outputs`` False leaves uncached
    the blocks generated tokens fill past the trace's output keys (vLLM caches them; a modelling
    switch, not a vLLM setting)."""

    max_num_batched_tokens: int = 4096
    max_num_seqs: int = 64
    step_s: float = 1 / 40
    tokens_per_s: float | None = None
    cache_outputs: bool = True

    def __post_init__(self) -> None:
        _check_count("vLLM server", "max_num_batched_tokens", self.max_num_batched_tokens)
        _check_count("vLLM server", "max_num_seqs", self.max_num_seqs)
        if self.max_num_batched_tokens < self.max_num_seqs:  # vLLM's SchedulerConfig refuses it too
            raise ValueError(
                f"vLLM server: max_num_batched_tokens ({self.max_num_batched_tokens}) is below "
                f"max_num_seqs ({self.max_num_seqs}), which vLLM refuses (--max-num-batched-tokens, "
                "--max-num-seqs)"
            )
        _check_seconds("vLLM server", "step_s", self.step_s, 0.0, strict=True)
        if self.tokens_per_s is not None:
            _check_rate("vLLM server", "tokens_per_s", self.tokens_per_s)

    def as_dict(self) -> dict[str, float | int | None]:
        """The settings by vLLM's names (what ``--server-model`` reads back)."""
        return {
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "step_s": self.step_s,
            "tokens_per_s": self.tokens_per_s,
        }


@dataclass(frozen=True)
class ServerModel:
    prefill_tokens_per_s: float = 10_000.0
    prefill_overhead_s: float = 0.005
    decode_tokens_per_s: float = 40.0
    max_running: int = 64
    cache_outputs: bool = True  # cache the blocks generated tokens fill, as vLLM does (serve.py)

    def __post_init__(self) -> None:
        _check_rate("server model", "prefill_tokens_per_s", self.prefill_tokens_per_s)
        _check_rate("server model", "decode_tokens_per_s", self.decode_tokens_per_s)
        _check_seconds("server model", "prefill_overhead_s", self.prefill_overhead_s, 0.0, strict=False)
        _check_count("server model", "max_running", self.max_running)

    @staticmethod
    def keeping_up(
        requests: Sequence[Request], utilization: float = KEEP_UP_UTILIZATION, step: float = KEEP_UP_STEP
    ) -> ServerModel:
        """The default model with its prefill throughput raised so that a cache that never hits keeps
        the lane at most ``utilization`` busy over the trace's arrival span (the next multiple of
        ``step`` tokens/s above ``prompt tokens / span / utilization``); never below the default."""
        if len(requests) < 2:
            return ServerModel()
        span = requests[-1].arrival_s - requests[0].arrival_s
        if span <= 0:
            return ServerModel()
        need = sum(r.prompt_tokens for r in requests) / span / utilization
        default = ServerModel.prefill_tokens_per_s
        return ServerModel(prefill_tokens_per_s=max(default, step * math.ceil(need / step)))

    def prefill_s(self, uncached_tokens: int) -> float:
        return self.prefill_overhead_s + uncached_tokens / self.prefill_tokens_per_s

    def decode_s(self, tokens: float) -> float:
        return tokens / self.decode_tokens_per_s


@dataclass(frozen=True)
class Saturation:
    """Whether a serve-mode run kept up (the rule: this module's docstring)."""

    prefill_utilization: float
    queue_growth: float
    backlog_at_last_arrival: int  # requests still waiting when the last one arrived
    vllm_steps: bool = False  # the run went step by step on a VllmServer (its flags are vLLM's)
    mean_wait_s: float = 0.0  # the measured requests' mean queueing delay (s)

    @property
    def saturated(self) -> bool:
        overloaded = self.prefill_utilization > 1.0 or self.queue_growth > QUEUE_GROWTH_LIMIT
        return overloaded and self.mean_wait_s >= MIN_SATURATED_WAIT_S

    def describe(self) -> str:
        """One line for a warning: the measures, and what to raise for the one that broke the rule
        (a prefill lane busier than the traffic's span, or a queue that grows while it is not)."""
        remedy = saturation_remedy(self.vllm_steps, self.prefill_utilization)
        utilization = (
            f"{self.prefill_utilization:.2f}"
            if math.isfinite(self.prefill_utilization)
            else "unbounded (the measured requests arrived at one instant)"
        )
        return (
            f"the modelled server is saturated: prefill utilization {utilization}, "
            f"queueing delay {self.mean_wait_s:.2f} s on average and growing {self.queue_growth:.3f} s "
            f"per s of traffic, {self.backlog_at_last_arrival:,} requests waiting at the last arrival; "
            f"hit rates are those of an overloaded queue ({remedy})"
        )


def saturation_remedy(vllm_steps: bool, prefill_utilization: float) -> str:
    """What to raise for a saturated run (the CLI's flags): a vLLM server model's step settings
    (``vllm_steps``: no prefill lane of its own), else the prefill lane where it is over-busy
    (``prefill_utilization > 1``, inf or NaN: unbounded), else the running slots and the cache."""
    if vllm_steps:
        return (
            "raise --max-num-seqs, --max-num-batched-tokens or the cache's size, shorten --step-s, "
            "or lower the load"
        )
    if not prefill_utilization <= 1.0:
        return "raise --prefill-tps or the cache's size (each miss is prefill work), or lower the load"
    return (  # the lane keeps up: requests wait for a running slot or for free cache blocks
        "the prefill lane keeps up, so requests wait for running slots or free cache blocks: "
        "raise --max-running / --max-num-seqs, --decode-tps or the cache's size, or lower the load"
    )


def saturation_remedies(vllm_steps: bool, prefill_utilizations: Iterable[float | None]) -> str:
    """Each distinct ``saturation_remedy`` of several saturated runs, in first-seen order, joined
    by "; " (a sweep's runs may be prefill-bound at one size and slot-bound at another); a run
    without a measured utilization (None) counts as unbounded."""
    return "; ".join(
        dict.fromkeys(
            saturation_remedy(vllm_steps, math.inf if u is None else u) for u in prefill_utilizations
        )
    )


def saturated_runs_warning(rows: Iterable[dict[str, Any]], vllm_steps: bool, fields: str) -> str | None:
    """One warning line on a sweep's saturated runs (rows with a true ``saturated``), None where no
    run is: how many of the rows, the first six named (``policy at capacity_blocks``), that their
    hit rates are an overloaded queue's, ``fields`` (where the runs' flags are shown) and each
    distinct remedy (``saturation_remedies``)."""
    rows = list(rows)
    saturated = [r for r in rows if r.get("saturated")]
    if not saturated:
        return None
    named = ", ".join(f"{r['policy']} at {r['capacity_blocks']:,}" for r in saturated[:6])
    named += f" and {len(saturated) - 6} more" if len(saturated) > 6 else ""
    remedy = saturation_remedies(vllm_steps, (r.get("prefill_utilization") for r in saturated))
    return (
        f"the modelled server is saturated in {len(saturated)} of {len(rows)} runs ({named}): their hit "
        f"rates are those of an overloaded queue ({fields}; {remedy})"
    )


def saturation(
    arrivals_s: Sequence[float],
    waits_s: Sequence[float],
    prefill_busy_s: float,
    backlog: int,
    vllm_steps: bool = False,
) -> Saturation:
    """The measures of ``Saturation`` from the measured admissions' arrivals and queueing delays
    (seconds, same order) and the prefill lane's busy seconds (``vllm_steps``: a step-by-step run
    on a ``VllmServer``)."""
    n = len(arrivals_s)
    span = max(arrivals_s) - min(arrivals_s) if n else 0.0
    burst = n >= 2 and prefill_busy_s > 0  # arrived at one instant: their prefill outruns a 0 s span
    utilization = prefill_busy_s / span if span > 0 else (math.inf if burst else 0.0)
    growth = 0.0
    if n >= 2 and span > 0:
        mean_t = sum(arrivals_s) / n
        mean_d = sum(waits_s) / n
        var = sum((t - mean_t) ** 2 for t in arrivals_s)
        cov = sum((t - mean_t) * (d - mean_d) for t, d in zip(arrivals_s, waits_s, strict=True))
        growth = cov / var if var > 0 else 0.0
    mean_wait = sum(waits_s) / n if n else 0.0
    return Saturation(utilization, growth, max(backlog, 0), vllm_steps, mean_wait)
