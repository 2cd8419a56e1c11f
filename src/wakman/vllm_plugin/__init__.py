"""WAKMan inside vLLM 0.32, 0.33 and 0.34: every wakman policy, and the adaptive manager, behind vLLM's free
queue and in its CPU offload tier.

One flag turns it on, ``--scheduler-cls wakman.vllm_plugin.WakmanScheduler``; environment variables
choose the policy (``settings.py``). ``install(pool, policy)`` puts a wakman policy behind a bare
vLLM ``BlockPool``. Nothing here imports vLLM until one of these is used, so ``import wakman`` stays
light.

Layout: ``compat`` (supported vLLM versions), ``settings`` (options), ``free_queue`` (the policy
behind vLLM's free-block queue protocol), ``block_pool`` (the pool hooks the queue cannot see),
``runtime`` (estimator logging and background replays), ``scheduler`` (the entry class),
``metrics`` (Prometheus), ``plugin`` (the ``vllm.general_plugins`` entry point), ``engine`` and
``replay`` (an in-process engine driven by a trace), ``offload`` (the CPU offload tier's
``CachePolicy``, loaded by vLLM's own factory, independent of the scheduler class).
"""

from __future__ import annotations

from typing import Any

__all__ = ["WakmanAsyncScheduler", "WakmanScheduler", "install"]


def __getattr__(name: str) -> Any:
    if name == "install":
        from wakman.vllm_plugin.block_pool import install

        return install
    if name in __all__:
        from wakman.vllm_plugin import scheduler

        return getattr(scheduler, name)
    raise AttributeError(name)
