"""The ``vllm.stat_logger_plugins`` entry point: ``vllm serve``'s API servers load it.

With one API server it puts ``WakmanCollector`` in vLLM's Prometheus registry and records nothing
per step: the engine publishes its own state (``metrics.py``). With several
(``--api-server-count > 1``, prometheus_client's multiprocess mode) the first API server copies the
engines' states into the multiprocess files on vLLM's ``record`` and ``log`` calls
(``MultiprocessMirror``); the others do nothing, so counters summed over processes stay exact."""

from __future__ import annotations

from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from wakman.vllm_plugin.metrics import (
    MultiprocessMirror,
    multiprocess_mode,
    register_collector,
    shared_mirror,
)


class WakmanStatLogger(StatLoggerBase):
    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.mirror: MultiprocessMirror | None = None
        if multiprocess_mode():
            if getattr(vllm_config.parallel_config, "_api_process_rank", 0) == 0:
                self.mirror = shared_mirror()
                self.mirror.refresh(force=True)
            return
        from vllm.v1.metrics.prometheus import get_prometheus_registry

        register_collector(get_prometheus_registry())

    def record(
        self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
    ) -> None:
        if self.mirror is not None:
            self.mirror.refresh()

    def log(self) -> None:
        if self.mirror is not None:
            self.mirror.refresh(force=True)

    def log_engine_initialized(self) -> None:
        if self.mirror is not None:
            self.mirror.refresh(force=True)
