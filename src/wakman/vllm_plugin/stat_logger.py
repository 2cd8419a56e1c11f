"""The ``vllm.stat_logger_plugins`` entry point: ``vllm serve``'s API server loads it, and it puts
``WakmanCollector`` in vLLM's Prometheus registry. It records nothing per step: the engine
publishes its own state (``metrics.py``)."""

from __future__ import annotations

from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from wakman.vllm_plugin.metrics import register_collector


class WakmanStatLogger(StatLoggerBase):
    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        from vllm.v1.metrics.prometheus import get_prometheus_registry

        register_collector(get_prometheus_registry())

    def record(
        self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
    ) -> None:
        return None

    def log_engine_initialized(self) -> None:
        return None
