"""Run a grid of (policy, capacity) simulations on all cores, deterministically."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from wakman.adaptive import simulate
from wakman.simulation import ServerModel
from wakman.traces.model import Request

_REQUESTS: list[Request] = []  # set before forking: workers inherit it instead of unpickling it


def _run(task: tuple[str, int, str, ServerModel, float, int]) -> dict[str, Any]:
    policy, capacity, mode, server, warmup_s, warmup_requests = task
    result = simulate(
        _REQUESTS,
        policy,
        capacity,
        mode=mode,
        server=server,
        warmup_s=warmup_s,
        warmup_requests=warmup_requests,
    )
    return result.as_flat_dict()


def run_grid(
    requests: Sequence[Request],
    policies: Sequence[str],
    capacities: Sequence[int],
    mode: str = "serve",
    server: ServerModel | None = None,
    warmup_s: float = 0.0,
    warmup_requests: int = 0,
    jobs: int | None = None,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """One flat result per (policy, capacity), in grid order whatever the number of jobs."""
    global _REQUESTS
    server = server or ServerModel()
    tasks = [(p, c, mode, server, warmup_s, warmup_requests) for p in policies for c in capacities]
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
            with ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork")) as pool:
                futures = {pool.submit(_run, task): i for i, task in enumerate(tasks)}
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    if on_done:
                        on_done(results[futures[future]])
    finally:
        _REQUESTS = []
    return [results[i] for i in range(len(tasks))]
