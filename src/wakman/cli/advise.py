"""`wakman advise`: which eviction policy, and how much KV cache, does this traffic need?"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.table import Table

from wakman.adaptive.config import ADAPTIVE_PRESETS
from wakman.adaptive.run import POLICY_NAMES
from wakman.cli.checks import MAX_BLOCKS, check_numbers, check_plot, parse_names
from wakman.cli.console import console, counted, err_console, json_text, progress_bars, stdout_to_stderr
from wakman.cli.errors import cli_errors
from wakman.cli.inputs import (
    BlockSizeOption,
    FormatOption,
    RateOption,
    SeedOption,
    open_trace,
    require_session_ids,
)
from wakman.cli.simulate import DECODE, PREFILL, RUNNING, _server
from wakman.data import BUNDLED_MOONCAKE
from wakman.experiments import advise as adv
from wakman.experiments.kv_memory import KVLayout, config_layout, given_kv_dtype, model_layout
from wakman.experiments.plots import plot_advice
from wakman.experiments.regret import beside
from wakman.experiments.sweep import HINT_MODE, HINT_OPTIONS, run_grid
from wakman.policies import SERVABLE_POLICIES
from wakman.traces.model import Request

DEFAULT_POLICIES = ",".join((*SERVABLE_POLICIES, *ADAPTIVE_PRESETS))  # what a server can run
# serve mode simulates every request's prefill and decode in time; past these the run takes too long
SERVE_MAX_MEAN_PROMPT = 32_768
SERVE_MAX_PROMPT_TOKENS = 200_000_000
MAX_GPU_MEMORY_GIB = 1e6  # a million GiB
MAX_POINTS = 1000


def _memory_blocks(layout: KVLayout, gib: float, block_size: int) -> int:
    """The usable blocks of ``block_size`` tokens ``--gpu-memory`` holds (``KVLayout.blocks_in``:
    vLLM's null block left out); a ValueError outside 1..MAX_BLOCKS."""
    blocks = layout.blocks_in(gib, block_size)
    if not 1 <= blocks <= MAX_BLOCKS:
        raise ValueError(
            f"--gpu-memory {gib:g} GiB holds {blocks:,} usable blocks of {block_size} tokens "
            f"({layout.block_bytes(block_size):,} B each); the cache needs 1 to {MAX_BLOCKS:,}"
        )
    return blocks


def _memory_checked(requests: Iterator[Request], layout: KVLayout, gib: float) -> Iterator[Request]:
    """``requests`` unchanged, ``--gpu-memory`` checked at the first one's block size (a size the
    cache cannot take fails before the whole trace is read)."""
    for i, req in enumerate(requests):
        if i == 0:
            _memory_blocks(layout, gib, req.block_size)
        yield req


def _layout(
    model: str | None,
    kv_bytes: int | None,
    model_config: Path | None,
    kv_dtype: str | None,
    tensor_parallel: int = 1,
) -> KVLayout | None:
    given = [
        flag
        for flag, v in (
            ("--model", model),
            ("--kv-bytes-per-token", kv_bytes),
            ("--model-config", model_config),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)}: give one of them")
    kv_dtype = given_kv_dtype(kv_dtype)  # None for auto, the default; names the choices when unknown
    if tensor_parallel != 1 and model is None and model_config is None:
        raise ValueError("--tensor-parallel needs --model or --model-config (the KV heads to split)")
    if model is not None:
        return model_layout(model, kv_dtype, tensor_parallel)
    if model_config is not None:
        try:
            return config_layout(model_config, kv_dtype, tensor_parallel)
        except UnicodeDecodeError as exc:
            raise ValueError(f"--model-config {model_config}: not UTF-8 text ({exc})") from None
    if kv_bytes is not None:
        if kv_bytes < 1:
            raise ValueError(f"--kv-bytes-per-token must be >= 1, got {kv_bytes}")
        if kv_dtype is not None:
            raise ValueError("--kv-dtype applies to --model or --model-config, not --kv-bytes-per-token")
        return KVLayout("--kv-bytes-per-token", kv_bytes, f"{kv_bytes} B given", "given", "given")
    if kv_dtype is not None:
        raise ValueError("--kv-dtype applies to --model or --model-config: give one of them")
    return None


def _size_text(size: dict[str, Any] | None) -> str:
    if size is None:
        return "-"
    blocks = size["capacity_blocks"]
    text = f"{blocks:,} block{'' if blocks == 1 else 's'} = {adv.human_tokens(size['tokens'])} tokens"
    if size["gib"] is not None:
        text += f" = {_gib_text(size['gib'])} GiB"
    return text


def advise(
    trace: Path | None = typer.Argument(None, help="Trace (default: the bundled Mooncake chat trace)."),
    fmt: str | None = FormatOption,
    block_size: int | None = BlockSizeOption,
    rate: float | None = RateOption,
    seed: int | None = SeedOption,
    model: str | None = typer.Option(
        None, "--model", help="A known model's Hub name (KV bytes from its config)."
    ),
    kv_bytes: int | None = typer.Option(None, "--kv-bytes-per-token", help="KV-cache bytes per token."),
    model_config: Path | None = typer.Option(
        None, "--model-config", help="A model's config.json (read, never downloaded)."
    ),
    kv_dtype: str | None = typer.Option(
        None,
        "--kv-dtype",
        help="KV-cache dtype: auto (default: the config's, a float32 one served in 16 bits as vLLM "
        "does), bfloat16, float16, float32, fp8 (1 byte), ...",
    ),
    gpu_memory: float | None = typer.Option(
        None,
        "--gpu-memory",
        help="GiB of GPU memory left for the KV cache of one model replica, all its GPUs together "
        "(needs the model's KV size; with --tensor-parallel the KV heads are split over the GPUs as "
        "vLLM splits them, an MLA latent stored on each).",
    ),
    tensor_parallel: int = typer.Option(
        1, "--tensor-parallel", help="GPUs a replica's tensor parallelism spreads the model over."
    ),
    capacity: int | None = typer.Option(None, "--capacity-blocks", help="Your cache size in blocks."),
    mode: str = typer.Option(
        "cache", "--mode", help="cache (shadow replay, exact LRU curve) or serve (time, pinning, TTFT)."
    ),
    target: float = typer.Option(0.95, "--target", help="Fraction of the ceiling to size for, in (0, 1]."),
    policy_names: str = typer.Option(DEFAULT_POLICIES, "--policies", help="Comma-separated policies."),
    points: int = typer.Option(
        8,
        "--points",
        help="Log-spaced sweep sizes, besides yours and the five around LRU's smallest size within --target.",
    ),
    jobs: int | None = typer.Option(None, "--jobs", help="Worker processes (default: all cores)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object alone on stdout."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Draw hit rate against cache size to this file (.png, .pdf or .svg)."
    ),
    prefill_tps: float | None = PREFILL,
    decode_tps: float | None = DECODE,
    max_running: int | None = RUNNING,
    sessions: bool = typer.Option(
        False,
        "--sessions",
        help=f"Also run chain-lru's hint mode ({HINT_MODE}): told each request's session id and each "
        "session's end (the trace must carry session ids). Never the best policy: clients must send both.",
    ),
    session_ends_after_s: float | None = typer.Option(
        None,
        "--session-ends-after-s",
        help="With --sessions: tell each session's end this many seconds after its last request is done "
        "(default 0; from the trace's hindsight: what clients that mark their last requests give).",
    ),
) -> None:
    """Hit rate against cache size for every policy, the infinite-cache ceiling, the smallest cache
    within --target of it, and the best policy at your cache size."""
    started = time.perf_counter()
    path = trace or BUNDLED_MOONCAKE
    with cli_errors(), stdout_to_stderr(as_json):  # the work; the output follows, outside it
        if not 0 < target <= 1:
            raise ValueError(f"--target must lie in (0, 1], got {target}")
        if mode not in ("cache", "serve"):
            raise ValueError(f"--mode must be cache or serve, got {mode!r}")
        # the modelled server's flags (refused in cache mode, checked in serve mode) before the trace
        server, _ = _server(prefill_tps, decode_tps, max_running, 0.0, mode=mode)
        check_numbers(
            ("--capacity-blocks", capacity, ">=1", MAX_BLOCKS),
            ("--gpu-memory", gpu_memory, ">0", MAX_GPU_MEMORY_GIB),
            ("--points", points, ">=1", MAX_POINTS),
            ("--jobs", jobs, ">=1"),
        )
        if capacity is not None and gpu_memory is not None:
            raise ValueError("--capacity-blocks and --gpu-memory: give one of them")
        names = parse_names(policy_names, "--policies", POLICY_NAMES)
        check_numbers(("--session-ends-after-s", session_ends_after_s, ">=0"))
        if session_ends_after_s is not None and not sessions:
            raise ValueError("--session-ends-after-s needs --sessions (only hint mode hears ends)")
        variants = {}
        if sessions:
            ends = (
                HINT_OPTIONS["session_ends_after_s"] if session_ends_after_s is None else session_ends_after_s
            )
            variants[HINT_MODE] = ("chain-lru", {**HINT_OPTIONS, "session_ends_after_s": ends})
        check_plot(plot)
        check_numbers(("--tensor-parallel", tensor_parallel, ">=1"))
        layout = _layout(model, kv_bytes, model_config, kv_dtype, tensor_parallel)
        if gpu_memory is not None and layout is None:
            raise ValueError("--gpu-memory needs --model, --model-config or --kv-bytes-per-token")
        progress = progress_bars(to=err_console, transient=True, disable=not err_console.is_terminal)
        with progress:
            stream = open_trace(path, fmt, block_size, rate, seed)
            if gpu_memory is not None:  # checked at the first request, not after the whole trace
                assert layout is not None
                stream = _memory_checked(stream, layout, gpu_memory)
            requests = list(counted(stream, progress, f"reading {path.name}"))
            if sessions:
                require_session_ids(path, requests)
            curve_task = progress.add_task("exact LRU curve", total=1)
            curve = adv.lru_curve(requests)
            progress.update(curve_task, completed=1)
            if gpu_memory is not None:
                assert layout is not None
                capacity = _memory_blocks(layout, gpu_memory, curve.block_size)
            warnings: list[str] = []
            early = 0  # warnings already printed as they came
            mean_prompt = curve.prompt_tokens / curve.requests
            chosen = mode
            if mode == "serve" and (
                mean_prompt > SERVE_MAX_MEAN_PROMPT or curve.prompt_tokens > SERVE_MAX_PROMPT_TOKENS
            ):
                warnings.append(
                    f"serve mode on {curve.requests:,} requests of {mean_prompt:,.0f} prompt tokens "
                    "on average "
                    "simulates every prefill and decode step and takes long; cache mode answers the sizing "
                    "question (no TTFT)"
                )
                # now, as the sweep starts (its line is not printed again with the others at the end)
                err_console.print(f"[yellow]warning:[/yellow] {warnings[-1]}", highlight=False)
                early = len(warnings)
            sizes = adv.sweep_capacities(curve, points, [capacity] if capacity else [], band=target)
            # cache-mode LRU is the curve itself, exactly; serve mode simulates it like the others
            simulated = [n for n in names if not (chosen == "cache" and n == "lru")] + list(variants)
            task = progress.add_task(f"{chosen} sweep", total=len(simulated) * len(sizes))
            rows = run_grid(
                requests,
                simulated,
                sizes,
                mode=chosen,
                server=server,
                jobs=jobs,
                on_done=lambda _row: progress.advance(task),
                variants=variants,
            )
            baseline = None  # serve mode, LRU left out of --policies: its run at your size, to compare with
            if capacity is not None and "lru" not in names and chosen == "serve":
                base_task = progress.add_task("lru at your size (the baseline)", total=1)
                baseline = run_grid(requests, ["lru"], [capacity], mode=chosen, server=server, jobs=1)[0]
                progress.update(base_task, completed=1)
        del requests
        if "lru" in names and chosen == "cache":
            rows = [adv.curve_row(curve, c) for c in sizes] + rows
        result = adv.build_report(
            path,
            curve,
            layout,
            chosen,
            target,
            names + list(variants),
            sizes,
            rows,
            capacity,
            warnings,
            lru_baseline=baseline,
        )
        if sessions:
            result["hint_mode"] = {
                "policy": HINT_MODE,
                "runs": "chain-lru",
                "session_ends_after_s": variants[HINT_MODE][1]["session_ends_after_s"],
                "note": "told each request's session id and each session's end from the trace's hindsight; "
                "never chosen as the best policy (it needs clients that send both)",
            }
        result["wall_s"] = time.perf_counter() - started
        plot_error = None  # a plot that cannot be written loses none of the run's output
        if plot is not None:
            try:
                result["plot"] = str(plot_advice(result, curve, layout, plot))
            except OSError as exc:
                plot_error = f"--plot {plot}: not written ({exc.strerror or exc})"
    with cli_errors():
        for line in result["warnings"][early:]:  # on stderr, as simulate's (the JSON keeps them too)
            err_console.print(f"[yellow]warning:[/yellow] {line}", highlight=False)
        if as_json:
            print(json_text(result))
        else:
            _print(result)
        if plot_error is not None:
            raise ValueError(plot_error)
        if "plot" in result:
            err_console.print(f"wrote {result['plot']}", markup=False, highlight=False)


def _sweep_cell(row: dict[str, Any] | None) -> str:
    """A sweep cell: the hit rate in percent, marked ``r`` where requests were rejected and ``s``
    where the modelled server saturated."""
    if row is None:
        return "-"
    marks = (" r" if row.get("rejected") else "") + (" s" if row.get("saturated") else "")
    return f"{100 * row['hit_rate']:z.2f}" + marks


def _gib_text(gib: float) -> str:
    """GiB with the decimals that keep a small size visible (0.0049 GiB, not 0.00)."""
    if gib >= 100:
        return f"{gib:,.0f}"
    return f"{gib:z.2f}" if gib >= 0.01 or gib == 0 else f"{gib:.2g}"


def _print(result: dict[str, Any]) -> None:
    kv = result["kv"]
    ceiling = result["ceiling"]
    console.print(
        f"[bold]{Path(result['trace']).name}[/bold]: {result['requests']:,} requests, "
        f"{adv.human_tokens(result['prompt_tokens'])} prompt tokens "
        f"(mean {result['mean_prompt_tokens']:,.0f}), block {result['block_size']} tokens, "
        f"{result['cacheable_blocks']:,} distinct cacheable blocks; {result['mode']} mode",
        highlight=False,
    )
    if kv:
        console.print(
            f"KV cache: {kv['name']}: {kv['bytes_per_token']:,} B/token ({kv['formula']}), "
            f"{kv['block_bytes'] / 2**20:z.2f} MiB/block"
            + (f"; dtype {kv['dtype']} ({kv['dtype_source']})" if kv["dtype_source"] else ""),
            highlight=False,
        )
    console.print(f"metric: {result['metric']}", highlight=False)
    console.print(
        f"ceiling (infinite cache, cache mode): {ceiling['hit_rate']:z.4f}; LRU reaches it (cache mode) "
        f"at {_size_text(ceiling['lru_reaches_it'])}",
        highlight=False,
    )
    sizes = result["sweep_capacities_blocks"]
    table = Table(box=box.SIMPLE_HEAD, title=f"hit rate (%) against cache size ({result['mode']} mode)")
    table.add_column("blocks", justify="right")
    gib = kv is not None
    if gib:
        table.add_column("GiB", justify="right")
    by = {(r["policy"], r["capacity_blocks"]): r for r in result["sweep"]}
    policies = list(dict.fromkeys(r["policy"] for r in result["sweep"]))
    for name in policies:
        header = name.replace("-", "-\n")
        table.add_column(header, justify="right", min_width=max(len(p) for p in header.split("\n")))
    yours = result["at_capacity"]["capacity_blocks"] if result["at_capacity"] else None
    for c in sizes:
        cells = [f"{c:,}" + (" *" if c == yours else "")]
        if gib:
            cells.append(_gib_text(c * kv["block_bytes"] / 2**30))
        cells += [_sweep_cell(by.get((n, c))) for n in policies]
        table.add_row(*cells)
    console.print(table)
    if yours is not None:
        console.print("* your size", highlight=False)
    if any(r.get("rejected") for r in result["sweep"]):
        console.print(
            "r: some requests were too long for that cache and were rejected; the hit rate is over the "
            "others only (JSON: rejected)",
            highlight=False,
        )
    if any(r.get("saturated") for r in result["sweep"]):
        console.print(
            "s: the modelled server saturated (its queue grows): the hit rate is an overloaded queue's, "
            "never taken as the smallest cache within the target (JSON: saturated)",
            highlight=False,
        )
    t = Table(
        box=box.SIMPLE_HEAD,
        title=f"smallest cache within {result['target']:g} of the ceiling "
        f"(hit rate >= {result['target_hit_rate']:z.4f})",
    )
    t.add_column("policy")
    t.add_column("blocks", justify="right")
    t.add_column("tokens", justify="right")
    t.add_column("GiB", justify="right")
    t.add_column("how")
    for name, entry in result["smallest_within_target"].items():
        blocks = entry["capacity_blocks"]
        saturated = [c for c in entry.get("saturated_blocks", []) if blocks is None or c < blocks]
        left_out = f"{len(saturated)} saturated size{'s' if len(saturated) > 1 else ''} left out"
        if blocks is None:
            how = f"not reached by {entry['above_blocks']:,} blocks"
            if saturated:
                how = f"no answer: not reached by an unsaturated run ({left_out})"
            t.add_row(name, "-", "-", "-", how)
            continue
        how = (
            "exact (LRU curve)"
            if entry["exact"]
            else (
                f"sweep: between {entry['above_blocks']:,} and it"
                if entry["above_blocks"]
                else "sweep: smallest size tried"
            )
        )
        if saturated:
            how += f" ({left_out})"
        t.add_row(
            name,
            f"{blocks:,}",
            adv.human_tokens(entry["tokens"]),
            _gib_text(entry["gib"]) if entry["gib"] is not None else "-",
            how,
        )
    console.print(t)
    at = result["at_capacity"]
    if at is None:
        console.print(
            "[dim]give --capacity-blocks or --gpu-memory (with the model) "
            "for the best policy at your size[/dim]"
        )
        return
    t = Table(box=box.SIMPLE_HEAD, title=f"at your size: {_size_text(at)}")
    t.add_column("policy")
    t.add_column("hit rate", justify="right")
    t.add_column("vs LRU (points)", justify="right")
    t.add_column("prefill tokens saved", justify="right")
    t.add_column("vs LRU", justify="right")
    serve = result["mode"] == "serve"
    if serve:
        t.add_column("TTFT p50 (s)", justify="right")
        t.add_column("TTFT p99 (s)", justify="right")
    for row in at["rows"]:
        cells = [
            row["policy"] + (" *" if row["policy"] == at.get("best") else ""),
            f"{row['hit_rate']:z.4f}",
            beside(row["points_vs_lru"], 0.0) if "points_vs_lru" in row else "-",
            adv.human_tokens(row["prefill_tokens_saved"]),
            adv.human_tokens(row["prefill_tokens_saved_vs_lru"], signed=True)
            if "prefill_tokens_saved_vs_lru" in row
            else "-",
        ]
        if serve:
            cells += [f"{row[k]:z.3f}" if k in row else "-" for k in ("ttft_s_p50", "ttft_s_p99")]
        t.add_row(*cells)
    base = at.get("lru_baseline")
    if base is not None:  # LRU left out of --policies: the run the gains are measured against
        cells = [
            "lru (baseline)" + (" *" if at.get("best") == "lru" else ""),
            f"{base['hit_rate']:z.4f}",
            "-",
            adv.human_tokens(base["hit_tokens"]),
            "-",
        ]
        if serve:
            cells += [f"{base[k]:z.3f}" if k in base else "-" for k in ("ttft_s_p50", "ttft_s_p99")]
        t.add_row(*cells)
    console.print(t)
    hint = result.get("hint_mode")
    if hint is not None:
        console.print(
            f"{hint['policy']}: chain-lru told each request's session id and each session's end "
            f"{hint['session_ends_after_s']:g} s after its last request is done, from the trace's hindsight "
            "(in vLLM: WAKMAN_SESSIONS=1 and clients that mark their sessions' last requests); "
            "not a candidate for the best policy",
            highlight=False,
        )
    # a best run whose modelled server saturated is an overloaded queue's: say so on its line
    overloaded = " (its modelled server saturated: see the warning)" if at.get("best_saturated") else ""
    if at.get("best") == "lru":
        tied = at.get("tied_with_lru") or []
        console.print(
            f"best at your size: [bold]lru[/bold], vLLM's default ({at['best_hit_rate']:z.4f}){overloaded}: "
            + (
                f"{', '.join(tied)} {'ties' if len(tied) == 1 else 'tie'} with it (within "
                f"{at['tie_points']:g} point of hit rate, either side) and no listed policy beats it by more"
                if tied
                else "no listed policy beats it"
            ),
            highlight=False,
        )
    elif "best" in at:
        line = f"best at your size: [bold]{at['best']}[/bold] ({at['best_hit_rate']:z.4f}){overloaded}"
        if tied := at.get("tied_with_best"):
            line += (
                f" ({', '.join(tied)} {'ties' if len(tied) == 1 else 'tie'} with it, within "
                f"{at['tie_points']:g} point: the run does not tell them apart)"
            )
        if "gain_points_vs_lru" in at:
            line += (
                f", {beside(at['gain_points_vs_lru'], 0.0)} points over vLLM's default LRU, "
                f"{adv.human_tokens(at['prefill_tokens_saved_vs_lru'])} more prefill tokens saved "
                "over the trace"
            )
        console.print(line, highlight=False)
    console.print(f"[dim]{result['wall_s']:z.1f} s[/dim]")
