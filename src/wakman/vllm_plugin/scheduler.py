"""The entry class: ``--scheduler-cls wakman.vllm_plugin.WakmanScheduler``.

A thin subclass of vLLM's scheduler: after the stock constructor it puts the configured policy
behind the block pool (``PolicyRuntime``); ``add_request`` logs the request for the estimator;
``schedule`` gives the runtime one call per step; after ``update_from_output`` and
``finish_requests`` the runtime tells the ends of sessions whose last request is done
(``WAKMAN_SESSIONS=1``, ``sessions.py``). With async scheduling on (vLLM's GPU default),
``WakmanScheduler(...)`` builds a ``WakmanAsyncScheduler`` instead, so the same flag keeps async
scheduling working.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from wakman.vllm_plugin.compat import check_vllm_version
from wakman.vllm_plugin.environment import check_environment
from wakman.vllm_plugin.metrics import register_collector
from wakman.vllm_plugin.runtime import PolicyRuntime
from wakman.vllm_plugin.settings import PluginSettings

log = logging.getLogger(__name__)


class WakmanScheduler(Scheduler):
    wakman: PolicyRuntime

    def __new__(cls, *args: Any, **kwargs: Any) -> WakmanScheduler:
        config = kwargs.get("vllm_config", args[0] if args else None)
        if cls is WakmanScheduler and config is not None and config.scheduler_config.async_scheduling:
            cls = WakmanAsyncScheduler
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_environment()
        check_vllm_version()
        settings = PluginSettings.from_env()
        super().__init__(*args, **kwargs)
        manager = self.kv_cache_manager
        if not manager.enable_caching:
            raise RuntimeError("wakman needs prefix caching: start vLLM with --enable-prefix-caching")
        pools = {id(m.block_pool) for m in manager.coordinator.single_type_managers}
        if len(pools) != 1:
            raise RuntimeError("wakman supports models with one KV-cache block pool")
        self.wakman = PolicyRuntime(
            settings,
            manager.block_pool,
            manager.coordinator,
            engine_index=self.vllm_config.parallel_config.data_parallel_rank,
            manager=manager,
        )
        self._wakman_block_size = self.hash_block_size
        self._wakman_updating = False  # inside update_from_output
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
            register_collector()  # the engine shares the API's process: expose the metrics here
        log.info(
            "wakman: %s behind vLLM's free-block queue (%d blocks, %s%s)",
            settings.policy,
            self.wakman.capacity,
            type(self).__name__,
            "; chain-lru follows session ids and marked ends" if settings.sessions else "",
        )

    def add_request(self, request: Any) -> None:
        # a request id vLLM holds already is a streaming input's next chunk: vLLM appends it to that
        # request, whose logged block hashes (vLLM's own list) grow with it; the chunk's own hashes
        # cover the chunk alone, a chain no cache holds, and are not logged
        if request.request_id not in self.requests:
            size, tokens = self._wakman_block_size, request.num_prompt_tokens
            self.wakman.on_request(request.arrival_time, request.block_hashes, size, tokens, request)
        else:  # its end mark, where the client put it on a later chunk
            self.wakman.on_request_chunk(request)
        super().add_request(request)

    def update_from_output(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        self._wakman_updating = True  # its own finish_requests (a request's error) tells nothing yet
        try:
            out = super().update_from_output(scheduler_output, *args, **kwargs)
        finally:
            self._wakman_updating = False
        self._wakman_done(scheduler_output.num_scheduled_tokens)
        return out

    def finish_requests(self, request_ids: Any, *args: Any, **kwargs: Any) -> Any:
        aborted = super().finish_requests(request_ids, *args, **kwargs)  # the requests it finished, in order
        if not self._wakman_updating:
            self._wakman_done([r.request_id for r in aborted or ()])
        return aborted

    def _wakman_done(self, order: Any) -> None:
        # vLLM finishes requests in the order it processes them (update_from_output: the step's
        # scheduled requests); with deferred frees (a KV consumer's overlapping batches) their blocks
        # come back at a later step
        deferred = getattr(self, "deferred_frees", ())
        self.wakman.on_requests_done(self.requests, order, deferred, getattr(self, "sched_step_seq", 0))

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self.wakman.on_step()
        out = super().schedule(*args, **kwargs)
        self.wakman.sample_free()  # the step's blocks, held until its output frees them
        return out

    def shutdown(self) -> None:
        self.wakman.close()
        super().shutdown()


class WakmanAsyncScheduler(WakmanScheduler, AsyncScheduler):
    """The same, over vLLM's ``AsyncScheduler`` (chosen automatically when async scheduling is on)."""
