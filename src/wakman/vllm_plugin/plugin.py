"""The ``vllm.general_plugins`` entry point: vLLM runs ``register`` once in every process it starts.

It does cheap things and changes nothing in vLLM: as soon as wakman is asked for
(``WAKMAN_POLICY`` set, or a ``wakman.vllm_plugin`` class named on the command line) it stops the
process with one line when the environment would kill vLLM (``environment.py``), refuses an
unsupported vLLM version or one whose relied-on code changed (``compat.py``: the scheduler's check
where the scheduler is asked for, the offload tier's where its module is named), and refuses a
``WAKMAN_*`` value the plugin cannot use (naming the variable); it hands wakman's log records
(logger ``wakman``) to vLLM's handlers, so they appear in vLLM's log in its format
(``log_through_vllm``); it creates the metrics directory in the first process so the engine
processes it spawns inherit it, and puts wakman's figures on the ``/metrics`` of the process that
serves it (``metrics.expose_metrics``: the collector with one API server, the one mirror with
several). When wakman is not asked for it returns at once and nothing changes; wakman ships no
stat logger plugin, whose mere presence turns vLLM's stats on (``--disable-log-stats`` or not).

Why ``--scheduler-cls`` and not only this entry point: the scheduler class is vLLM's official,
per-engine switch (stock vLLM runs when it is absent, even with wakman installed), it sees the
requests (arrival time, block hashes) and every step, and it owns the block pool. An entry point
alone would have to rebind vLLM's ``BlockPool`` name for every engine in the environment.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


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
    from wakman.vllm_plugin.compat import (
        OFFLOAD_STOP,
        SCHEDULER_STOP,
        UnsupportedVllmVersion,
        check_offload_vllm_version,
        check_vllm_version,
    )
    from wakman.vllm_plugin.metrics import expose_metrics, metrics_dir
    from wakman.vllm_plugin.settings import PluginSettings, SettingsError, offload_policy_from_env

    # the scheduler (WAKMAN_POLICY, --scheduler-cls) and the offload tier (--kv-transfer-config)
    # rely on different vLLM code, each checked where it is asked for; a refusal says how to drop
    # every part asked for
    offload_module = "wakman.vllm_plugin.offload"
    wakman_scheduler = any("wakman.vllm_plugin" in arg.replace(offload_module, "") for arg in sys.argv)
    scheduler = bool(os.environ.get("WAKMAN_POLICY")) or wakman_scheduler
    offload = any(offload_module in arg for arg in sys.argv)
    stop = " and ".join([SCHEDULER_STOP] * scheduler + [OFFLOAD_STOP] * offload)
    try:
        if scheduler:
            check_vllm_version(stock=stop)
        if offload:
            check_offload_vllm_version(stock=stop)
    except UnsupportedVllmVersion as exc:  # one line on stderr, no traceback
        raise SystemExit(str(exc)) from None
    log_through_vllm()
    try:
        PluginSettings.from_env()  # bad WAKMAN_* values fail here, at start-up
        if offload:
            offload_policy_from_env()
    except SettingsError as exc:  # one line on stderr, no traceback
        raise SystemExit(f"wakman: {exc}") from None
    if wakman_scheduler and "--no-enable-prefix-caching" in sys.argv:
        raise SystemExit(
            "wakman: the wakman scheduler orders the prefix cache's blocks: drop --no-enable-prefix-caching, "
            "or run stock vLLM without --scheduler-cls"
        )
    if scheduler and not wakman_scheduler:
        warn_stock_scheduler()
    try:
        metrics_dir()
    except OSError as exc:  # WAKMAN_METRICS_DIR names a file, or a folder it cannot make
        raise SystemExit(f"wakman: WAKMAN_METRICS_DIR: cannot use it as a folder ({exc})") from None
    expose_metrics()


_WARNED = "_WAKMAN_WARNED_STOCK_SCHEDULER"  # set once warned: the processes `vllm serve` starts inherit it


def _is_server_command(argv: list[str]) -> bool:
    """``vllm serve ...``, or ``python -m vllm.entrypoints.openai.api_server ...`` (the README's form
    for a CPU build, whose ``vllm`` command fails); not an engine process or an ``LLM(...)``."""
    return argv[1:2] == ["serve"] or Path(argv[0] if argv else "").parts[-3:] == (
        "entrypoints",
        "openai",
        "api_server.py",
    )


def warn_stock_scheduler() -> None:
    """``WAKMAN_POLICY`` is set, but the server's command line names no wakman scheduler: stock
    vLLM would run without a word (the variable is read by ``WakmanScheduler`` only). One line on
    stderr, once per server (not in the engine processes it starts). An in-process ``LLM(...)``
    gets none: its scheduler class is not on any command line."""
    if not _is_server_command(sys.argv) or os.environ.get(_WARNED):
        return
    os.environ[_WARNED] = "1"
    print(
        f"wakman: warning: WAKMAN_POLICY={os.environ.get('WAKMAN_POLICY')} is set, but this server "
        "runs vLLM's own scheduler: add --scheduler-cls wakman.vllm_plugin.WakmanScheduler to run it "
        "(unless a --config file names that scheduler)",
        file=sys.stderr,
    )


class VllmLogForwarder(logging.Handler):
    """Hands each record to the handlers vLLM's logger has when the record is emitted, at vLLM's
    level. Looked up per record, not copied once: plugins load before vLLM configures its logging
    (in the API server and an in-process ``LLM``), and a later reconfiguration replaces vLLM's
    handlers. Where vLLM has none (``VLLM_CONFIGURE_LOGGING=0``), the root logger's handlers take
    the record at the root's level, as an unconfigured ``wakman`` logger's would."""

    def emit(self, record: logging.LogRecord) -> None:
        vllm_logger = logging.getLogger("vllm")
        target = vllm_logger if vllm_logger.handlers else logging.getLogger()
        if record.levelno < target.getEffectiveLevel():
            return
        for handler in target.handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def log_through_vllm() -> None:
    """Route the ``wakman`` logger through a ``VllmLogForwarder`` (once per process); without it
    wakman's INFO lines (the policy an engine runs, its switches) reach no handler."""
    wakman_logger = logging.getLogger("wakman")
    if any(isinstance(h, VllmLogForwarder) for h in wakman_logger.handlers):
        return
    wakman_logger.addHandler(VllmLogForwarder())
    wakman_logger.setLevel(logging.DEBUG)  # the forwarder applies the target's level
    wakman_logger.propagate = False
