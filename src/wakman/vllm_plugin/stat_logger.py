"""The ``vllm.stat_logger_plugins`` entry point: ``vllm serve``'s API servers load it.

vLLM loads it into every ``vllm serve`` where wakman is installed, asked for or not. It does nothing
unless ``WAKMAN_METRICS_DIR`` is set, which the general plugin does in the first vLLM process
whenever wakman is asked for (the API servers and engines inherit it): stock vLLM's ``/metrics``
stays byte for byte stock, and nothing is created on disk.

With one API server it puts ``WakmanCollector`` in vLLM's Prometheus registry and records nothing
per step: the engine publishes its own state (``metrics.py``). With several
(``--api-server-count > 1``, prometheus_client's multiprocess mode) the first API server copies the
engines' states into the multiprocess files on vLLM's ``record`` and ``log`` calls
(``MultiprocessMirror``); the others do nothing, so counters summed over processes stay exact.

No call raises into vLLM: ``record`` runs inside ``AsyncLLM``'s output handler, where an exception
stops the server. A copy that fails is logged once (logger ``wakman``) and tried again on the next
call."""

from __future__ import annotations

import logging
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

log = logging.getLogger("wakman")


class WakmanStatLogger(StatLoggerBase):
    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.mirror: MultiprocessMirror | None = None
        self._failed = False
        if not os.environ.get(ENV_DIR):  # wakman not asked for: stock vLLM, untouched
            return
        if multiprocess_mode():
            if getattr(vllm_config.parallel_config, "_api_process_rank", 0) == 0:
                self.mirror = shared_mirror()
                self._refresh(force=True)
            return
        from vllm.v1.metrics.prometheus import get_prometheus_registry

        register_collector(get_prometheus_registry())

    def _refresh(self, force: bool = False) -> None:
        if self.mirror is None:
            return
        try:
            self.mirror.refresh(force=force)
        except Exception as exc:  # never into vLLM's output handler
            if not self._failed:
                log.warning("wakman: could not copy the engines' states into /metrics: %s", exc)
            self._failed = True

    def record(
        self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
    ) -> None:
        self._refresh()

    def log(self) -> None:
        self._refresh(force=True)

    def log_engine_initialized(self) -> None:
        self._refresh(force=True)
