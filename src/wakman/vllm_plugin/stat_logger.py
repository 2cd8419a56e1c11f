"""The ``vllm.stat_logger_plugins`` entry point: ``vllm serve``'s API servers load it.

vLLM loads it into every ``vllm serve`` where wakman is installed, asked for or not. It does nothing
unless ``WAKMAN_METRICS_DIR`` is set, which the general plugin does in the first vLLM process
whenever wakman is asked for (the API servers and engines inherit it): nothing of wakman's appears
on ``/metrics`` and nothing is created on disk. One effect it cannot avoid: vLLM turns its stats on
wherever a stat logger plugin is installed (``AsyncLLM``: ``log_stats or has_custom_loggers``),
``--disable-log-stats`` or not; ``VLLM_PLUGINS=wakman`` leaves this entry point (``wakman-metrics``)
out and keeps the general plugin (``docs/vllm.md``).

With one API server it puts ``WakmanCollector`` in vLLM's Prometheus registry and records nothing
per step: the engine publishes its own state (``metrics.py``). With several
(``--api-server-count > 1``, prometheus_client's multiprocess mode) the first API server starts the
process's ``MultiprocessMirror``, which copies the engines' states into the multiprocess files once
a second from a thread of its own (vLLM's ``record`` runs per engine step only, and its ``log``
never under ``--disable-log-stats``); the other API servers do nothing, so counters summed over
processes stay exact. The calls vLLM makes here do nothing: nothing can raise into ``AsyncLLM``'s
output handler, where an exception stops the server."""

from __future__ import annotations

import os
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from wakman.vllm_plugin.metrics import (
    ENV_DIR,
    MultiprocessMirror,
    multiprocess_mode,
    register_collector,
    shared_mirror,
)


class WakmanStatLogger(StatLoggerBase):
    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.mirror: MultiprocessMirror | None = None
        if not os.environ.get(ENV_DIR):  # wakman not asked for: stock vLLM, untouched
            return
        if multiprocess_mode():
            if getattr(vllm_config.parallel_config, "_api_process_rank", 0) == 0:
                self.mirror = shared_mirror()  # started: it copies once a second on its own
            return
        from vllm.v1.metrics.prometheus import get_prometheus_registry

        register_collector(get_prometheus_registry())

    def record(
        self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
    ) -> None:
        pass

    def log(self) -> None:
        pass

    def log_engine_initialized(self) -> None:
        pass
