"""`wakman simulate` and `wakman sweep`."""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import typer

from wakman.adaptive import POLICY_NAMES
from wakman.adaptive import simulate as run_simulation
from wakman.adaptive.config import ADAPTIVE_PRESETS
from wakman.cli.checks import (
    MAX_BLOCKS,
    PLOT_EXTRA,
    can_plot,
    check_numbers,
    check_output_dir,
    check_plot,
    parse_ints,
    parse_names,
)
from wakman.cli.console import console, counted, err_console, json_text, progress_bars, warn_rejected
from wakman.cli.errors import cli_errors, interrupted
from wakman.cli.inputs import (
    BlockSizeOption,
    FormatOption,
    RateOption,
    SeedOption,
    open_trace,
    require_session_ids,
    session_mode,
)
from wakman.simulation import MODES, ServerModel, VllmServer
from wakman.simulation import server as server_limits
from wakman.simulation.run import check_intervals
from wakman.simulation.server import saturated_runs_warning
from wakman.traces import detect_format, kvcache_tester
from wakman.traces.io import atomic_paths
from wakman.traces.model import Request, as_engine_serves

PREFILL = typer.Option(
    None,
    "--prefill-tps",
    help=f"Prefill tokens per second (default {ServerModel.prefill_tokens_per_s:g}, about an 8B model on "
    "one H100-class GPU; advise's --model sizes the KV cache only, not these speeds).",
)
DECODE = typer.Option(
    None, "--decode-tps", help=f"Decode tokens/s per request (default {ServerModel.decode_tokens_per_s:g})."
)
RUNNING = typer.Option(
    None, "--max-running", help=f"Concurrent requests at most (default {ServerModel.max_running})."
)
BATCHED = typer.Option(
    None, "--max-num-batched-tokens", help="vLLM's token budget per engine step (a vLLM server model)."
)
SEQS = typer.Option(None, "--max-num-seqs", help="vLLM's max_num_seqs (a vLLM server model).")
STEP = typer.Option(
    None, "--step-s", help="Seconds per vLLM engine step (a vLLM server model; default 1/40)."
)
STEP_TPS = typer.Option(
    None,
    "--step-tokens-per-s",
    help="A vLLM server model's step also takes 1 s per this many tokens it schedules "
    "(default: fixed steps).",
)
SERVER_FILE = typer.Option(
    None,
    "--server-model",
    help="JSON with the vLLM settings: a server_model object (settings only), or `wakman replay --json` "
    "output (its server, and the trace as the replay served it: its --limit, --max-output-tokens, fresh "
    "output keys; the flags win).",
)
FRESH_OUTPUTS = typer.Option(
    None,
    "--fresh-outputs/--trace-outputs",
    help="Give every generated block a key of its own, ignoring the trace's output keys, as a real "
    "engine that samples its own tokens does (`wakman replay --engine vllm`).",
)
MAX_OUTPUT = typer.Option(None, "--max-output-tokens", help="Cap each request's output (tokens).")
LIMIT = typer.Option(None, "--limit", help="Simulate only the first N requests.")
CACHE_OUTPUTS = typer.Option(
    True, "--cache-outputs/--no-cache-outputs", help="Cache the blocks generated tokens fill, as vLLM does."
)
WARMUP_HELP = (
    "Requests arriving earlier are left out of the hit rates, token counts and latencies "
    "(evictions, stranded blocks and preemptions cover the whole run"
)
WARMUP = typer.Option(0.0, "--warmup-s", help=WARMUP_HELP + "; so do --per-request and --series).")
SWEEP_WARMUP = typer.Option(0.0, "--warmup-s", help=WARMUP_HELP + ").")
MODE = typer.Option("serve", "--mode", help="serve (time, pinning) or cache (shadow replay).")
# The server models' bounds (wakman.simulation.server), by flag; and a millisecond an interval at
# the least (a million intervals over the trace's arrivals at the most: check_intervals).
MIN_TOKENS_PER_S = f">={server_limits.MIN_TOKENS_PER_S:g}"
MAX_STEP_S = server_limits.MAX_STEP_S
MIN_INTERVAL_S = ">=0.001"
SESSIONS = typer.Option(
    False,
    "--sessions",
    help="chain-lru (also wakman-plus's) follows the trace's session ids: its session mode.",
)
SESSION_ENDS = typer.Option(
    None,
    "--session-ends-after-s",
    help="With --sessions: tell each session's end this many seconds after its last request is done "
    "(from the trace's hindsight: what a client that marks its sessions' last requests gives).",
)


@dataclass(frozen=True)
class TraceView:
    """Which requests a simulation takes, and how: the first ``limit``, each output capped at
    ``max_output_tokens`` tokens, and with ``fresh_outputs`` the trace's output keys ignored (the
    view of a trace that ``wakman replay --engine vllm`` serves; ``as_engine_serves``). From a
    replay's file, ``replayed_block_size`` is the block size it ran (a trace with another is refused)."""

    fresh_outputs: bool = False
    max_output_tokens: int | None = None
    limit: int | None = None
    replayed_block_size: int | None = None

    def take(self, requests: Iterable[Request]) -> Iterable[Request]:
        """The first ``limit`` requests, read no further."""
        return requests if self.limit is None else itertools.islice(requests, self.limit)

    def apply(self, requests: list[Request]) -> list[Request]:
        """The taken requests as the simulation serves them."""
        bs = self.replayed_block_size
        if bs is not None and requests and requests[0].block_size != bs:
            raise ValueError(
                f"--server-model: the replay ran {bs}-token blocks, this trace has {requests[0].block_size}"
                " (is it the trace that was replayed?)"
            )
        if self.fresh_outputs or self.max_output_tokens is not None:
            requests = as_engine_serves(
                requests, fresh_outputs=self.fresh_outputs, max_output_tokens=self.max_output_tokens
            )
        return requests


def _replay_view(path: Path, data: dict) -> TraceView:
    """How the engine replay whose ``--json`` output ``data`` is served its trace (``mode`` "vllm"):
    its ``limit`` and ``max_output_tokens`` (null when not given), ``output_keys_ignored`` and
    ``block_size``; checked like the flags."""
    ignored = data.get("output_keys_ignored", False)
    if not isinstance(ignored, bool):
        raise ValueError(f"--server-model: {path}: output_keys_ignored must be true or false")
    view = TraceView(
        fresh_outputs=ignored,
        max_output_tokens=data.get("max_output_tokens"),
        limit=data.get("limit"),
        replayed_block_size=data.get("block_size"),
    )
    for name, value in (
        ("max_output_tokens", view.max_output_tokens),
        ("limit", view.limit),
        ("block_size", view.replayed_block_size),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"--server-model: {path}: {name} must be an integer >= 1")
        check_numbers((f"--server-model: {path}: {name}", value, ">=1"))  # and at most the flags' bound
    return view


def _vllm_settings(path: Path) -> tuple[dict, TraceView | None]:
    """The vLLM settings in ``path`` (a JSON object, or one holding them under ``server_model``) and,
    for a replay's ``--json`` output, how it served the trace."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"--server-model: {path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--server-model: {path} is not a JSON file ({exc})") from None
    view = None
    if isinstance(data, dict) and isinstance(data.get("server_model"), dict):
        if data.get("mode") == "vllm":
            view = _replay_view(path, data)
        data = data["server_model"]
    kinds = {"max_num_batched_tokens": int, "max_num_seqs": int, "step_s": float, "tokens_per_s": float}
    if not isinstance(data, dict) or not set(kinds) & set(data):
        raise ValueError(f"--server-model: {path} holds none of {', '.join(sorted(kinds))}")
    settings = {}
    for name, kind in kinds.items():
        if data.get(name) is None:  # absent, or null (tokens_per_s: fixed steps)
            continue
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
            raise ValueError(
                f"--server-model: {path}: {name} must be {'a number' if kind is float else 'an integer'}"
            )
        settings[name] = kind(value)
    try:  # the bounds are VllmServer's own (one rule for the file, the flags and the API)
        VllmServer(**settings)
    except ValueError as exc:
        raise ValueError(f"--server-model: {path}: {str(exc).removeprefix('vLLM server: ')}") from None
    return settings, view


def _serve_only(mode: str, **flags: object) -> None:
    """Flags of the modelled server (given: not None, not False) are refused in cache mode, which has
    no server: ``flags`` maps each flag's name (``prefill_tps`` for ``--prefill-tps``) to its value
    (``no_cache_outputs``: True when --no-cache-outputs was given)."""
    given = [f"--{name.replace('_', '-')}" for name, value in flags.items() if value not in (None, False)]
    if mode == "cache" and given:
        raise ValueError(
            f"{', '.join(given)}: serve mode only (cache mode has no server); drop or give --mode serve"
        )


def _server(
    prefill_tps: float | None,
    decode_tps: float | None,
    max_running: int | None,
    warmup_s: float,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    step_s: float | None = None,
    server_model: Path | None = None,
    cache_outputs: bool = True,
    step_tokens_per_s: float | None = None,
    fresh_outputs: bool | None = None,
    max_output_tokens: int | None = None,
    limit: int | None = None,
    mode: str = "serve",
) -> tuple[ServerModel | VllmServer, TraceView]:
    """The CLI's server model: the throughputs given, or a vLLM configuration by vLLM's names
    (``--server-model`` first, then the flags over it; simulated step by step), never both
    (checked, with ``--warmup-s``); and the view of the trace (a replay's, from ``--server-model``,
    then the flags over it; a note on stderr says what the replay's file set). In cache mode the
    server's flags, and a ``--server-model`` of settings only, are refused: nothing in them would apply."""
    _serve_only(
        mode,
        prefill_tps=prefill_tps,
        decode_tps=decode_tps,
        max_running=max_running,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        step_s=step_s,
        step_tokens_per_s=step_tokens_per_s,
        no_cache_outputs=not cache_outputs,
    )
    check_numbers(
        ("--prefill-tps", prefill_tps, MIN_TOKENS_PER_S),
        ("--decode-tps", decode_tps, MIN_TOKENS_PER_S),
        ("--max-running", max_running, ">=1"),
        ("--max-num-batched-tokens", max_num_batched_tokens, ">=1"),
        ("--max-num-seqs", max_num_seqs, ">=1"),
        ("--step-s", step_s, ">0", MAX_STEP_S),
        ("--step-tokens-per-s", step_tokens_per_s, MIN_TOKENS_PER_S),
        ("--warmup-s", warmup_s, ">=0"),
        ("--max-output-tokens", max_output_tokens, ">=1"),
        ("--limit", limit, ">=1"),
    )
    flags = {"fresh_outputs": fresh_outputs, "max_output_tokens": max_output_tokens, "limit": limit}
    given = {name: value for name, value in flags.items() if value is not None}
    vllm_flags = {
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
        "step_s": step_s,
        "tokens_per_s": step_tokens_per_s,
    }
    if server_model is not None or any(v is not None for v in vllm_flags.values()):
        if any(v is not None for v in (prefill_tps, decode_tps, max_running)):
            raise ValueError(
                "give either --prefill-tps / --decode-tps / --max-running or a vLLM server model "
                "(--server-model, --max-num-batched-tokens, --max-num-seqs, --step-s, --step-tokens-per-s), "
                "not both"
            )
        settings, replayed = _vllm_settings(server_model) if server_model is not None else ({}, None)
        if mode == "cache" and server_model is not None and replayed is None:
            raise ValueError(
                f"--server-model {server_model}: server settings only, which cache mode does not use "
                "(a replay's JSON also sets the trace's view); drop it or give --mode serve"
            )
        settings.update({k: v for k, v in vllm_flags.items() if v is not None})
        view = replace(replayed or TraceView(), **given)
        if replayed is not None:
            _say_replay_view(server_model, replayed, given)
        if mode == "cache":  # a replay's JSON: its view applies, its engine's settings cannot
            err_console.print(
                f"cache mode: the server settings in {server_model} are not used (no server to model); "
                "give --mode serve to simulate that engine",
                markup=False,
                highlight=False,
            )
        return VllmServer(**settings, cache_outputs=cache_outputs), view
    throughputs = {
        "prefill_tokens_per_s": prefill_tps,
        "decode_tokens_per_s": decode_tps,
        "max_running": max_running,
    }
    server = ServerModel(
        cache_outputs=cache_outputs, **{k: v for k, v in throughputs.items() if v is not None}
    )
    return server, TraceView(**given)


def _say_replay_view(path: Path, view: TraceView, overridden: dict) -> None:
    """One stderr line: what the replay's file sets about the requests (flags given win)."""
    parts = []
    if view.limit is not None and "limit" not in overridden:
        parts.append(f"the first {view.limit:,} requests")
    if view.fresh_outputs and "fresh_outputs" not in overridden:
        parts.append("fresh output keys (the engine samples its own tokens)")
    if view.max_output_tokens is not None and "max_output_tokens" not in overridden:
        parts.append(f"outputs capped at {view.max_output_tokens:,} tokens")
    if parts:
        err_console.print(f"as the replay in {path}: {', '.join(parts)}", markup=False, highlight=False)


def simulate(
    trace: Path = typer.Argument(..., help="Trace file, folder or archive."),
    policy: str = typer.Option(..., "--policy", help="A policy (`wakman policies`), wakman or wakman-plus."),
    capacity: int = typer.Option(..., "--capacity-blocks", help="Usable KV-cache blocks."),
    fmt: str | None = FormatOption,
    mode: str = MODE,
    as_json: bool = typer.Option(
        False,
        "--json",
        help="One JSON object alone on stdout (flat figures; an adaptive policy adds its decisions, "
        "--series its intervals).",
    ),
    series: bool = typer.Option(False, "--series", help="Include the per-interval series in --json."),
    per_request: bool = typer.Option(
        False,
        "--per-request",
        help="Include each request's hit tokens at its first admission in --json (first_hit_tokens, "
        "trace order, -1 if never admitted; vLLM's RequestOutput.num_cached_tokens; in cache mode "
        "at its one lookup).",
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="Draw the per-interval series to this file (.png, .pdf or .svg)."
    ),
    warmup_s: float = WARMUP,
    interval_s: float = typer.Option(60.0, "--interval-s", help="Width of the per-interval series."),
    prefill_tps: float | None = PREFILL,
    decode_tps: float | None = DECODE,
    max_running: int | None = RUNNING,
    max_num_batched_tokens: int | None = BATCHED,
    max_num_seqs: int | None = SEQS,
    step_s: float | None = STEP,
    step_tokens_per_s: float | None = STEP_TPS,
    server_model: Path | None = SERVER_FILE,
    cache_outputs: bool = CACHE_OUTPUTS,
    fresh_outputs: bool | None = FRESH_OUTPUTS,
    max_output_tokens: int | None = MAX_OUTPUT,
    limit: int | None = LIMIT,
    block_size: int | None = BlockSizeOption,
    rate: float | None = RateOption,
    seed: int | None = SeedOption,
    sessions: bool = SESSIONS,
    session_ends_after_s: float | None = SESSION_ENDS,
) -> None:
    """Simulate one policy at one cache size; report vLLM's prefix-cache hit rate and more."""
    with cli_errors("nothing was written" if plot is None else f"{plot} was not written"):
        if mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}")
        check_numbers(
            ("--capacity-blocks", capacity, ">=1", MAX_BLOCKS), ("--interval-s", interval_s, MIN_INTERVAL_S)
        )
        if policy not in POLICY_NAMES:
            raise ValueError(f"--policy: unknown policy {policy!r}; choose from {', '.join(POLICY_NAMES)}")
        if per_request and not as_json:
            raise ValueError("--per-request needs --json (a value per request)")
        if series and not as_json:
            raise ValueError("--series needs --json (a list per interval; --plot draws the series)")
        _serve_only(mode, series=series)
        chosen, session_options = session_mode(policy, sessions, session_ends_after_s)
        if mode == "cache" and plot is not None and policy not in ADAPTIVE_PRESETS:
            raise ValueError(
                "--plot: cache mode draws an adaptive policy's decisions only (a static policy has no "
                "per-interval series there; give --mode serve)"
            )
        server, view = _server(
            prefill_tps,
            decode_tps,
            max_running,
            warmup_s,
            max_num_batched_tokens,
            max_num_seqs,
            step_s,
            server_model,
            cache_outputs,
            step_tokens_per_s,
            fresh_outputs,
            max_output_tokens,
            limit,
            mode=mode,
        )
        check_plot(plot)
        # progress on stderr (stdout may be --json), only on a terminal, gone once done
        with progress_bars(to=err_console, transient=True, disable=not err_console.is_terminal) as bar:
            requests = view.apply(
                list(counted(view.take(open_trace(trace, fmt, block_size, rate, seed)), bar, "reading"))
            )
            if sessions:
                require_session_ids(trace, requests)
            if mode == "serve":
                check_intervals(requests, interval_s, "--interval-s")
            bar.add_task(f"simulating {policy}", total=None)
            result = run_simulation(
                requests,
                chosen,
                capacity,
                mode=mode,
                server=server,
                warmup_s=warmup_s,
                interval_s=interval_s,
                **session_options,
            )
        flat = result.as_flat_dict(series=series, per_request=per_request)
        if result.saturation is not None and result.saturation.saturated:
            err_console.print(f"[yellow]warning:[/yellow] {result.saturation.describe()}", highlight=False)
        warn_rejected(result.requests, result.rejected, result.measured_requests, capacity, warmup_s)
        if as_json:
            print(json_text(flat))
        else:
            from rich.table import Table  # a --json run does without

            title = f"{policy} at {capacity:,} blocks, {trace.name} ({mode} mode)"
            table = Table(title=title, show_header=False)
            for key, value in flat.items():
                if key not in ("first_hit_tokens", "decisions"):  # a list: --json (and --plot) only
                    shown = (
                        "-" if value is None else f"{value:,.4f}" if isinstance(value, float) else str(value)
                    )
                    table.add_row(key, shown)
            console.print(table)
        if plot is not None:
            from wakman.experiments.plots import plot_decisions, plot_intervals

            if result.extra.get("decisions"):  # an adaptive run that decided; else its intervals
                end_s = result.intervals[-1].start_s + interval_s if result.intervals else None
                plot_decisions(
                    result.extra["decisions"], plot, f"{policy}, {capacity:,} blocks, {trace.name}", end_s
                )
            else:
                plot_intervals(
                    [i.as_dict() for i in result.intervals],
                    plot,
                    f"{policy}, {capacity:,} blocks, {trace.name}",
                )
            err_console.print(f"wrote {plot}", markup=False, highlight=False)


def _server_settings(server: ServerModel | VllmServer, mode: str) -> dict | None:
    """The modelled server's settings as sweep.json records them: its class (``ServerModel``: the
    throughputs, ``VllmServer``: vLLM's settings) and its fields; None in cache mode (no server)."""
    if mode == "cache":
        return None
    return {"model": type(server).__name__, **asdict(server)}


def _trace_view(
    trace: Path,
    fmt: str | None,
    requests: list[Request],
    view: TraceView,
    rate: float | None,
    seed: int | None,
) -> dict:
    """How the sweep read its trace, as sweep.json records it: the format (detected where
    ``--format`` was not given), the block size its requests have (tokens), the kv-cache-tester
    arrival process (``--rate``, ``--seed``), the view (``--limit``, ``--fresh-outputs``,
    ``--max-output-tokens``, from ``--server-model``'s replay or the flags) and the requests read."""
    name = fmt or detect_format(trace)
    return {
        "format": name,
        "block_size": requests[0].block_size if requests else None,
        # kv-cache-tester's arrival process, its defaults where the flags were left out
        "rate": rate if rate is not None or name != "kv-cache-tester" else kvcache_tester.DEFAULT_RATE,
        "seed": seed if seed is not None or name != "kv-cache-tester" else kvcache_tester.DEFAULT_SEED,
        "limit": view.limit,
        "fresh_outputs": view.fresh_outputs,
        "max_output_tokens": view.max_output_tokens,
        "requests": len(requests),
    }


def _write_sweep(
    rows: list[dict],
    out: Path,
    trace: Path,
    mode: str,
    planned: int,
    settings: dict,
    plot: bool = False,
) -> list[Path]:
    """sweep.csv, sweep.json and (``plot``) sweep.png of ``rows`` in ``out``: all of them or none;
    without a plot, a sweep.png an earlier sweep left there goes (it would not match). sweep.json
    says whether the sweep ran all ``planned`` runs (``complete``) and records ``settings`` (the
    run's --warmup-s, server model and trace view) beside the trace and mode."""
    paths = [out / name for name in ("sweep.csv", "sweep.json", "sweep.png")[: 3 if plot else 2]]
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with atomic_paths(*paths) as targets:
        with open(targets[0], "w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns, restval="")
            writer.writeheader()
            for row in rows:  # a list or dict cell (an adaptive policy's decisions) as JSON, not repr
                writer.writerow(
                    {k: json_text(v) if isinstance(v, list | dict) else v for k, v in row.items()}
                )
        document = {
            "trace": str(trace),
            "mode": mode,
            **settings,
            "complete": len(rows) == planned,
            "runs_planned": planned,
            "results": rows,
        }
        targets[1].write_bytes(json_text(document, indent=1).encode())
        if plot:
            from wakman.experiments.plots import plot_sweep

            plot_sweep(rows, targets[2], f"{trace.name} ({mode} mode)")
    if not plot:
        (out / "sweep.png").unlink(missing_ok=True)
    return paths


def sweep(
    trace: Path = typer.Argument(..., help="Trace file, folder or archive."),
    policies: str = typer.Option(
        "lru,s3fifo,belady,infinite", "--policies", help="Comma-separated policy names (`wakman policies`)."
    ),
    capacities: str = typer.Option(..., "--capacities", help="Comma-separated cache sizes in blocks."),
    out: Path = typer.Option(Path("sweep"), "--out", help="Folder for sweep.csv, sweep.json, sweep.png."),
    fmt: str | None = FormatOption,
    mode: str = MODE,
    jobs: int | None = typer.Option(None, "--jobs", help="Worker processes (default: all cores)."),
    warmup_s: float = SWEEP_WARMUP,
    prefill_tps: float | None = PREFILL,
    decode_tps: float | None = DECODE,
    max_running: int | None = RUNNING,
    max_num_batched_tokens: int | None = BATCHED,
    max_num_seqs: int | None = SEQS,
    step_s: float | None = STEP,
    step_tokens_per_s: float | None = STEP_TPS,
    server_model: Path | None = SERVER_FILE,
    cache_outputs: bool = CACHE_OUTPUTS,
    fresh_outputs: bool | None = FRESH_OUTPUTS,
    max_output_tokens: int | None = MAX_OUTPUT,
    limit: int | None = LIMIT,
    block_size: int | None = BlockSizeOption,
    rate: float | None = RateOption,
    seed: int | None = SeedOption,
    sessions: bool = typer.Option(
        False,
        "--sessions",
        help="Add chain-lru in its session mode, following the trace's session ids, as the column "
        "chain-lru+sessions (as simulate --policy chain-lru --sessions: told no session end without "
        "--session-ends-after-s; its rows' session_ends_after_s says which).",
    ),
    session_ends_after_s: float | None = SESSION_ENDS,
) -> None:
    """Every policy at every cache size, on all cores; CSV, JSON and a plot."""
    from wakman.experiments.sweep import HINT_MODE, GridInterrupted, run_grid  # worker pools: sweep's alone

    with cli_errors(f"nothing was written to {out}"):
        names = parse_names(policies, "--policies", POLICY_NAMES)
        sizes = list(dict.fromkeys(parse_ints(capacities, "--capacities", maximum=MAX_BLOCKS)))
        hint, options = session_mode("chain-lru", sessions, session_ends_after_s)
        variants = {HINT_MODE: (hint, options)} if sessions else {}
        labels = [*names, *variants]
        if mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}")
        check_numbers(("--jobs", jobs, ">=1"))
        server, view = _server(
            prefill_tps,
            decode_tps,
            max_running,
            warmup_s,
            max_num_batched_tokens,
            max_num_seqs,
            step_s,
            server_model,
            cache_outputs,
            step_tokens_per_s,
            fresh_outputs,
            max_output_tokens,
            limit,
            mode=mode,
        )
        check_output_dir(out, "--out")
        settings = {"warmup_s": warmup_s, "server_model": _server_settings(server, mode)}
        # stdout: the table alone; without a terminal, a plain line a minute
        with progress_bars(to=err_console, disable=not err_console.is_terminal) as progress:
            requests = view.apply(
                list(counted(view.take(open_trace(trace, fmt, block_size, rate, seed)), progress, "reading"))
            )
            if sessions:
                require_session_ids(trace, requests)
            settings["trace_view"] = _trace_view(trace, fmt, requests, view, rate, seed)
            task = progress.add_task(f"sweeping {trace.name}", total=len(labels) * len(sizes))
            try:
                rows = run_grid(
                    requests,
                    labels,
                    sizes,
                    mode,
                    server,
                    warmup_s,
                    jobs=jobs,
                    on_done=lambda _row: progress.advance(task),
                    variants=variants,
                )
            except GridInterrupted as stop:
                stop_rows, total = stop.rows, stop.total
                rows = None
        if rows is None:  # Ctrl-C: keep the finished runs
            if not stop_rows:
                interrupted(f"0 of {total} runs finished; nothing was written to {out}")
            written = _write_sweep(stop_rows, out, trace, mode, total, settings)
            interrupted(
                f"kept the {len(stop_rows)} of {total} runs that finished in "
                f"{', '.join(map(str, written))} (no plot)"
            )
        written = _write_sweep(rows, out, trace, mode, len(labels) * len(sizes), settings, plot=can_plot())
        if not can_plot():
            err_console.print(
                f"no sweep.png: plots need matplotlib ({PLOT_EXTRA})", markup=False, highlight=False
            )
    if rows and all(r.get("measured_requests") == 0 for r in rows):
        err_console.print(
            f"[yellow]warning:[/yellow] no request was measured (the warm-up of {warmup_s:g} s covers the "
            "trace, or every request is larger than the cache): every figure is 0",
            highlight=False,
        )
    saturated = saturated_runs_warning(  # some runs may be prefill-bound, others slot-bound
        rows,
        isinstance(server, VllmServer),
        "`saturated`, `prefill_utilization` and `queue_growth` in sweep.csv",
    )
    if saturated is not None:
        err_console.print(f"[yellow]warning:[/yellow] {saturated}", highlight=False)
    rejecting = sorted({r["capacity_blocks"] for r in rows if r.get("rejected")})
    if rejecting:
        err_console.print(
            "[yellow]warning:[/yellow] at "
            + ", ".join(f"{c:,}" for c in rejecting)
            + " blocks some requests need more blocks than the whole cache and were rejected, as vLLM "
            "refuses a request past max_model_len: those hit rates (marked r) are over the other "
            "requests only (`rejected` in sweep.csv), so a smaller cache can read higher",
            highlight=False,
        )
    from rich.table import Table

    table = Table("policy", *[f"{s:,}" for s in sizes], title="hit rate by cache size (blocks)")
    for name in labels:  # the policies asked for, then the runs added to them (--sessions)
        table.add_row(
            name,
            *[
                f"{r['hit_rate']:.4f}" + (" r" if r.get("rejected") else "")
                for r in rows
                if r["policy"] == name
            ],
        )
    console.print(table)
    console.print(f"wrote {', '.join(map(str, written))}")
