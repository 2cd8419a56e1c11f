"""The ``vllm.general_plugins`` entry point: vLLM runs ``register`` once in every process it starts.

It does cheap things and changes nothing in vLLM: as soon as wakman is asked for
(``WAKMAN_POLICY`` set, or a ``wakman.vllm_plugin`` class named on the command line) it stops the
process with one line when the environment would kill vLLM (``environment.py``) and refuses an
unsupported vLLM version; it sends wakman's log lines (logger ``wakman``) to vLLM's handlers at
vLLM's level, so they appear in vLLM's log in its format; and it creates the metrics directory in
the first process so the engine processes it spawns inherit it.

Why ``--scheduler-cls`` and not only this entry point: the scheduler class is vLLM's official,
per-engine switch (stock vLLM runs when it is absent, even with wakman installed), it sees the
requests (arrival time, block hashes) and every step, and it owns the block pool. An entry point
alone would have to rebind vLLM's ``BlockPool`` name for every engine in the environment.
"""

from __future__ import annotations

import logging
import os
import sys


def wakman_requested() -> bool:
    return bool(os.environ.get("WAKMAN_POLICY")) or any("wakman.vllm_plugin" in arg for arg in sys.argv)


def register() -> None:
    if not wakman_requested():
        return
    from wakman.vllm_plugin.environment import BrokenEnvironment, check_environment

    try:
        check_environment()
    except BrokenEnvironment as exc:
        raise SystemExit(str(exc)) from None  # one line on stderr, no traceback
    from wakman.vllm_plugin.compat import check_vllm_version
    from wakman.vllm_plugin.metrics import metrics_dir
    from wakman.vllm_plugin.settings import PluginSettings

    check_vllm_version()
    log_through_vllm()
    PluginSettings.from_env()  # bad WAKMAN_* values fail here, at start-up
    metrics_dir()


def log_through_vllm() -> None:
    """Attach vLLM's handlers to the ``wakman`` logger at vLLM's level (once per process); without
    this wakman's INFO lines (the policy an engine runs, switches) reach no handler."""
    vllm_logger = logging.getLogger("vllm")
    wakman_logger = logging.getLogger("wakman")
    if wakman_logger.handlers or not vllm_logger.handlers:
        return
    for handler in vllm_logger.handlers:
        wakman_logger.addHandler(handler)
    wakman_logger.setLevel(vllm_logger.level)
    wakman_logger.propagate = False
