"""Run a grid of (policy, capacity) simulations on all cores, deterministically.

A grid's policy is a name ``wakman.adaptive.simulate`` takes, or the label of a variant: a policy run
with simulation options (``HINT_MODE``: chain-lru told each request's session id and each session's
end), whose rows carry the label as their ``policy``."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from wakman.adaptive import simulate
from wakman.experiments.workers import stopped_on_error, worker_signals
from wakman.simulation import ServerModel, VllmServer
from wakman.traces.model import Request

_REQUESTS: list[Request] = []  # set before forking: workers inherit it instead of unpickling it

# chain-lru's hint mode: told each request's session id and each session's end as its last request is
# done (``end_session``; a client that closes its sessions: vLLM's ``WAKMAN_SESSIONS=1``). A trace
# knows its ends after the fact, so this is what a policy gets from clients that send them. The label
# is also that of ``sweep --sessions``, which tells the ends only with --session-ends-after-s: its
# rows say when (``session_ends_after_s``, None: no end told), as advise's hint_mode block does.
HINT_MODE = "chain-lru+sessions"
HINT_OPTIONS: dict[str, Any] = {"policy_params": {"sessions": True}, "session_ends_after_s": 0.0}

# a variant: label -> (policy, options for ``simulate``)
Variants = Mapping[str, tuple[str, Mapping[str, Any]]]
Task = tuple[str, int, str, ServerModel | VllmServer, float, int, str, Mapping[str, Any]]


class GridInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``run_grid``: ``rows`` are the runs that finished (in grid order), of ``total``."""

    def __init__(self, rows: list[dict[str, Any]], total: int) -> None:
        super().__init__(f"{len(rows)} of {total} runs finished")
        self.rows, self.total = rows, total


def _run(task: Task) -> dict[str, Any]:
    label, capacity, mode, server, warmup_s, warmup_requests, policy, options = task
    result = simulate(
        _REQUESTS,
        policy,
        capacity,
        mode=mode,
        server=server,
        warmup_s=warmup_s,
        warmup_requests=warmup_requests,
        **options,
    )
    row = {**result.as_flat_dict(), "policy": label}
    if "session_ends_after_s" in options:  # a session-mode variant: when it was told the ends
        row["session_ends_after_s"] = options["session_ends_after_s"]
    return row


def _run_in_workers(
    tasks: list[Task],
    jobs: int,
    results: dict[int, dict[str, Any]],
    on_done: Callable[[dict[str, Any]], None] | None,
) -> None:
    """``tasks`` on ``jobs`` forked workers, each result into ``results`` by index as it finishes.
    On Ctrl-C the workers this call started are terminated at once (no waiting for their runs),
    and the interrupt goes on to the caller."""
    pools: list[ProcessPoolExecutor] = []
    with stopped_on_error(pools):
        pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork"), initializer=worker_signals)
        pools.append(pool)
        futures = {pool.submit(_run, task): i for i, task in enumerate(tasks)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if on_done:
                on_done(results[futures[future]])


def run_grid(
    requests: Sequence[Request],
    policies: Sequence[str],
    capacities: Sequence[int],
    mode: str = "serve",
    server: ServerModel | VllmServer | None = None,
    warmup_s: float = 0.0,
    warmup_requests: int = 0,
    jobs: int | None = None,
    on_done: Callable[[dict[str, Any]], None] | None = None,
    variants: Variants | None = None,
) -> list[dict[str, Any]]:
    """One flat result per (policy, capacity), in grid order whatever the number of jobs. A policy
    named in ``variants`` runs as its (policy, options); its rows carry the label, and those of a
    variant with ``session_ends_after_s`` in its options also carry that (seconds after a session's
    last request is done; None: no end told).

    Ctrl-C (``KeyboardInterrupt``, also from ``on_done``) stops the workers and raises
    ``GridInterrupted`` with the runs finished so far.
    """
    global _REQUESTS
    server = server or ServerModel()
    variants = variants or {}
    tasks: list[Task] = [
        (p, c, mode, server, warmup_s, warmup_requests, *variants.get(p, (p, {})))
        for p in policies
        for c in capacities
    ]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    _REQUESTS = list(requests)
    results: dict[int, dict[str, Any]] = {}
    try:
        if jobs == 1 or "fork" not in mp.get_all_start_methods():
            for i, task in enumerate(tasks):
                results[i] = _run(task)
                if on_done:
                    on_done(results[i])
        else:
            _run_in_workers(tasks, jobs, results, on_done)
    except KeyboardInterrupt as exc:
        raise GridInterrupted([results[i] for i in sorted(results)], len(tasks)) from exc
    finally:
        _REQUESTS = []
    return [results[i] for i in range(len(tasks))]
