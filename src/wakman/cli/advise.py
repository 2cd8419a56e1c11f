"""`wakman advise`: which eviction policy, and how much KV cache, does this traffic need?"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.table import Table

from wakman.adaptive.run import POLICY_NAMES
from wakman.cli.common import (
    BlockSizeOption,
    FormatOption,
    cli_errors,
    console,
    counted,
    err_console,
    open_trace,
    progress_bars,
    stdout_to_stderr,
)
from wakman.cli.simulate import DECODE, PREFILL, RUNNING, _server
from wakman.data import BUNDLED_MOONCAKE
from wakman.experiments import advise as adv
from wakman.experiments.kv_memory import KVLayout, config_layout, dtype_bytes, model_layout
from wakman.experiments.sweep import run_grid
from wakman.simulation import ServerModel

DEFAULT_POLICIES = "lru,fifo,s3fifo,sieve,arc,wakman,wakman-plus"
METRIC = "vLLM prefix-cache hit rate: cached prompt tokens / prompt tokens (first-miss rule, <= prompt-1)"
# serve mode simulates every request's prefill and decode in time; past these the run takes too long
SERVE_MAX_MEAN_PROMPT = 32_768
SERVE_MAX_PROMPT_TOKENS = 200_000_000


def _layout(
    model: str | None, kv_bytes: int | None, model_config: Path | None, kv_dtype: str | None
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
    if kv_dtype is not None:
        dtype_bytes(kv_dtype)  # names the choices when unknown
    if model is not None:
        return model_layout(model, kv_dtype)
    if model_config is not None:
        return config_layout(model_config, kv_dtype)
    if kv_bytes is not None:
        if kv_bytes < 1:
            raise ValueError(f"--kv-bytes-per-token must be >= 1, got {kv_bytes}")
        if kv_dtype is not None:
            raise ValueError("--kv-dtype applies to --model or --model-config, not --kv-bytes-per-token")
        return KVLayout("--kv-bytes-per-token", kv_bytes, f"{kv_bytes} B given", "given", "given")
    return None


def _size(blocks: int | None, curve: adv.LruCurve, layout: KVLayout | None) -> dict[str, Any] | None:
    if blocks is None:
        return None
    return {
        "capacity_blocks": blocks,
        "tokens": blocks * curve.block_size,
        "gib": layout.gib(blocks, curve.block_size) if layout else None,
    }


def _size_text(size: dict[str, Any] | None) -> str:
    if size is None:
        return "-"
    text = f"{size['capacity_blocks']:,} blocks = {adv.human_tokens(size['tokens'])} tokens"
    if size["gib"] is not None:
        text += f" = {size['gib']:.2f} GiB"
    return text


def advise(
    trace: Path | None = typer.Argument(None, help="Trace (default: the bundled Mooncake chat trace)."),
    fmt: str | None = FormatOption,
    block_size: int | None = BlockSizeOption,
    model: str | None = typer.Option(
        None, "--model", help="A known model's Hub name (KV bytes from its config)."
    ),
    kv_bytes: int | None = typer.Option(None, "--kv-bytes-per-token", help="KV-cache bytes per token."),
    model_config: Path | None = typer.Option(
        None, "--model-config", help="A model's config.json (read, never downloaded)."
    ),
    kv_dtype: str | None = typer.Option(None, "--kv-dtype", help="KV-cache dtype override (fp8 = 1 byte)."),
    gpu_memory: float | None = typer.Option(
        None, "--gpu-memory", help="GiB of GPU memory left for the KV cache (needs the model's KV size)."
    ),
    capacity: int | None = typer.Option(None, "--capacity-blocks", help="Your cache size in blocks."),
    mode: str = typer.Option(
        "cache", "--mode", help="cache (shadow replay, exact LRU curve) or serve (time, pinning, TTFT)."
    ),
    target: float = typer.Option(0.95, "--target", help="Fraction of the ceiling to size for, in (0, 1]."),
    policy_names: str = typer.Option(DEFAULT_POLICIES, "--policies", help="Comma-separated policies."),
    points: int = typer.Option(8, "--points", help="Sweep sizes (log-spaced) besides yours."),
    jobs: int | None = typer.Option(None, "--jobs", help="Worker processes (default: all cores)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object alone on stdout."),
    plot: Path | None = typer.Option(None, "--plot", help="Draw hit rate against cache size to this PNG."),
    prefill_tps: float = PREFILL,
    decode_tps: float = DECODE,
    max_running: int = RUNNING,
) -> None:
    """Hit rate against cache size for every policy, the infinite-cache ceiling, the smallest cache
    within --target of it, and the best policy at your cache size."""
    started = time.perf_counter()
    path = trace or BUNDLED_MOONCAKE
    with cli_errors(), stdout_to_stderr(as_json):
        if not 0 < target <= 1:
            raise ValueError(f"--target must lie in (0, 1], got {target}")
        if mode not in ("cache", "serve"):
            raise ValueError(f"--mode must be cache or serve, got {mode!r}")
        if capacity is not None and capacity < 1:
            raise ValueError(f"--capacity-blocks must be >= 1, got {capacity}")
        if gpu_memory is not None and not gpu_memory > 0:
            raise ValueError(f"--gpu-memory must be > 0 GiB, got {gpu_memory}")
        if capacity is not None and gpu_memory is not None:
            raise ValueError("--capacity-blocks and --gpu-memory: give one of them")
        if points < 1:
            raise ValueError(f"--points must be >= 1, got {points}")
        names = list(dict.fromkeys(n.strip() for n in policy_names.split(",") if n.strip()))
        for name in names:
            if name not in POLICY_NAMES:
                raise ValueError(
                    f"--policies: unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}"
                )
        if not names:
            raise ValueError("--policies: none given")
        layout = _layout(model, kv_bytes, model_config, kv_dtype)
        if gpu_memory is not None and layout is None:
            raise ValueError("--gpu-memory needs --model, --model-config or --kv-bytes-per-token")
        progress = progress_bars(to=err_console, transient=True)
        with progress:
            requests = list(counted(open_trace(path, fmt, block_size), progress, f"reading {path.name}"))
            if not requests:
                raise ValueError(f"{path}: no requests")
            curve = adv.lru_curve(requests)
            if gpu_memory is not None:
                assert layout is not None
                capacity = layout.blocks_in(gpu_memory, curve.block_size)
                if capacity < 1:
                    raise ValueError(
                        f"--gpu-memory {gpu_memory} GiB holds no block of {curve.block_size} tokens "
                        f"({layout.block_bytes(curve.block_size):,} B each)"
                    )
            warnings: list[str] = []
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
                err_console.print(f"[yellow]warning:[/yellow] {warnings[-1]}", highlight=False)
            sizes = adv.sweep_capacities(curve, points, [capacity] if capacity else [], band=target)
            # cache-mode LRU is the curve itself, exactly; serve mode simulates it like the others
            simulated = [n for n in names if not (chosen == "cache" and n == "lru")]
            task = progress.add_task(f"{chosen} sweep", total=len(simulated) * len(sizes))
            server = _server(prefill_tps, decode_tps, max_running)
            rows = run_grid(
                requests,
                simulated,
                sizes,
                mode=chosen,
                server=server,
                jobs=jobs,
                on_done=lambda _row: progress.advance(task),
            )
        del requests
        if "lru" in names and chosen == "cache":
            rows = [_curve_row(curve, c) for c in sizes] + rows
        result = _report(path, curve, layout, chosen, target, names, sizes, rows, capacity, warnings, server)
        result["wall_s"] = time.perf_counter() - started
        if plot is not None:
            result["plot"] = str(_plot(result, curve, layout, plot))
    if as_json:
        print(json.dumps(result))
        return
    _print(result)


def _curve_row(curve: adv.LruCurve, capacity: int) -> dict[str, Any]:
    return {
        "policy": "lru",
        "mode": "cache",
        "capacity_blocks": capacity,
        "hit_rate": curve.hit_rate(capacity),
        "hit_tokens": curve.tokens_at(capacity),
        "prompt_tokens": curve.prompt_tokens,
        "source": "curve",
    }


ROW_KEYS = (
    "policy",
    "mode",
    "capacity_blocks",
    "hit_rate",
    "hit_tokens",
    "prompt_tokens",
    "block_hit_rate",
    "ttft_s_p50",
    "ttft_s_p99",
    "queueing_delay_s_p99",
    "preemptions",
    "rejected",
    "saturated",
    "source",
)


def _report(
    path: Path,
    curve: adv.LruCurve,
    layout: KVLayout | None,
    mode: str,
    target: float,
    names: list[str],
    sizes: list[int],
    rows: list[dict[str, Any]],
    capacity: int | None,
    warnings: list[str],
    server: ServerModel,
) -> dict[str, Any]:
    rows = [{k: row[k] for k in ROW_KEYS if k in row} for row in rows]
    threshold = target * curve.ceiling
    smallest: dict[str, Any] = {}
    for name in names:
        if name == "lru" and mode == "cache":
            entry = _size(curve.smallest_within(target), curve, layout)
            assert entry is not None
            entry["exact"] = True
        else:
            found, below = adv.smallest_sampled(rows, name, threshold)
            entry = _size(found, curve, layout) or {"capacity_blocks": None, "tokens": None, "gib": None}
            entry["exact"] = False
            entry["above_blocks"] = below  # the next smaller sampled size missed the target
        smallest[name] = entry
    at: dict[str, Any] | None = None
    if capacity is not None:
        here = [r for r in rows if r["capacity_blocks"] == capacity]
        lru = next((r for r in here if r["policy"] == "lru"), None)
        for row in here:
            row["prefill_tokens_saved"] = row["hit_tokens"]
            if lru is not None:
                row["prefill_tokens_saved_vs_lru"] = row["hit_tokens"] - lru["hit_tokens"]
                row["points_vs_lru"] = 100 * (row["hit_rate"] - lru["hit_rate"])
        best = adv.best_at(rows, capacity)
        at = {
            **(_size(capacity, curve, layout) or {}),
            "rows": here,
            "lru_curve_hit_rate": curve.hit_rate(capacity),
        }
        if best is not None:
            at["best"] = best["policy"]
            at["best_hit_rate"] = best["hit_rate"]
            if lru is not None:
                at["gain_points_vs_lru"] = 100 * (best["hit_rate"] - lru["hit_rate"])
                at["prefill_tokens_saved_vs_lru"] = best["hit_tokens"] - lru["hit_tokens"]
        if mode == "serve" and curve.duration_s > 0:
            for row in here:  # the prefill work the misses need / what the server does in the trace's span
                row["prefill_load"] = (row["prompt_tokens"] - row["hit_tokens"]) / (
                    curve.duration_s * server.prefill_tokens_per_s
                )
            heavy = [r["policy"] for r in here if r["prefill_load"] > 1]
            if heavy:
                warnings.append(
                    "serve mode: the misses need more prefill than "
                    f"--prefill-tps {server.prefill_tokens_per_s:g} "
                    f"gives over the trace ({', '.join(heavy)}): TTFT grows with the queue, not the cache"
                )
        if any(r.get("saturated") for r in here):
            warnings.append(
                "serve mode: the server is saturated at your size for "
                + ", ".join(r["policy"] for r in here if r.get("saturated"))
                + " (queues grow without bound; TTFT figures are not steady-state)"
            )
    if capacity is not None and capacity > curve.distinct_blocks:
        warnings.append(
            f"your cache ({capacity:,} blocks) holds every distinct block of the trace: "
            "any policy hits the ceiling"
        )
    return {
        "trace": str(path),
        "mode": mode,
        "metric": METRIC,
        "requests": curve.requests,
        "prompt_tokens": curve.prompt_tokens,
        "mean_prompt_tokens": curve.prompt_tokens / curve.requests,
        "block_size": curve.block_size,
        "distinct_blocks": curve.distinct_blocks,
        "kv": None
        if layout is None
        else {**layout.as_dict(), "block_bytes": layout.block_bytes(curve.block_size)},
        "ceiling": {
            "hit_rate": curve.ceiling,
            "hit_tokens": curve.ceiling_tokens,
            "lru_reaches_it": _size(curve.smallest_within(1.0), curve, layout),
            "source": "infinite cache, cache mode (every full prompt and output block kept)",
        },
        "target": target,
        "target_hit_rate": threshold,
        "smallest_within_target": smallest,
        "sweep_capacities_blocks": sizes,
        "lru_curve": {
            "source": "exact at every size, one pass (stack distances, cache mode)",
            "capacity_blocks": (caps := adv.log_points(curve, 60)),
            "hit_rate": [curve.hit_rate(c) for c in caps],
        },
        "sweep": rows,
        "at_capacity": at,
        "warnings": warnings,
    }


def _gib_text(gib: float) -> str:
    return f"{gib:,.0f}" if gib >= 100 else f"{gib:.2f}"


def _print(result: dict[str, Any]) -> None:
    for line in result["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {line}", highlight=False)
    kv = result["kv"]
    ceiling = result["ceiling"]
    console.print(
        f"[bold]{Path(result['trace']).name}[/bold]: {result['requests']:,} requests, "
        f"{adv.human_tokens(result['prompt_tokens'])} prompt tokens "
        f"(mean {result['mean_prompt_tokens']:,.0f}), block {result['block_size']} tokens, "
        f"{result['distinct_blocks']:,} distinct cacheable blocks; {result['mode']} mode",
        highlight=False,
    )
    if kv:
        console.print(
            f"KV cache: {kv['name']}: {kv['bytes_per_token']:,} B/token ({kv['formula']}), "
            f"{kv['block_bytes'] / 2**20:.2f} MiB/block",
            highlight=False,
        )
    console.print(f"metric: {result['metric']}", highlight=False)
    console.print(
        f"ceiling (infinite cache): {ceiling['hit_rate']:.4f}; LRU reaches it at "
        f"{_size_text(ceiling['lru_reaches_it'])}",
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
        cells += [f"{100 * by[(n, c)]['hit_rate']:.2f}" if (n, c) in by else "-" for n in policies]
        table.add_row(*cells)
    console.print(table)
    if yours is not None:
        console.print("* your size", highlight=False)
    t = Table(
        box=box.SIMPLE_HEAD,
        title=f"smallest cache within {result['target']:g} of the ceiling "
        f"(hit rate >= {result['target_hit_rate']:.4f})",
    )
    t.add_column("policy")
    t.add_column("blocks", justify="right")
    t.add_column("tokens", justify="right")
    t.add_column("GiB", justify="right")
    t.add_column("how")
    for name, entry in result["smallest_within_target"].items():
        blocks = entry["capacity_blocks"]
        if blocks is None:
            t.add_row(name, "-", "-", "-", f"not reached by {entry['above_blocks']:,} blocks")
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
        t.add_row(
            name,
            f"{blocks:,}",
            adv.human_tokens(entry["tokens"]),
            f"{entry['gib']:.2f}" if entry["gib"] is not None else "-",
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
            f"{row['hit_rate']:.4f}",
            f"{row['points_vs_lru']:+.2f}" if "points_vs_lru" in row else "-",
            adv.human_tokens(row["prefill_tokens_saved"]),
            f"{row['prefill_tokens_saved_vs_lru'] / 1e6:+,.2f} M"
            if "prefill_tokens_saved_vs_lru" in row
            else "-",
        ]
        if serve:
            cells += [f"{row[k]:.3f}" if k in row else "-" for k in ("ttft_s_p50", "ttft_s_p99")]
        t.add_row(*cells)
    console.print(t)
    if "best" in at:
        line = f"best at your size: [bold]{at['best']}[/bold] ({at['best_hit_rate']:.4f})"
        if "gain_points_vs_lru" in at:
            line += (
                f", {at['gain_points_vs_lru']:+.2f} points over vLLM's default LRU, "
                f"{adv.human_tokens(at['prefill_tokens_saved_vs_lru'])} prefill tokens saved over the trace"
            )
        console.print(line, highlight=False)
    console.print(f"[dim]{result['wall_s']:.1f} s[/dim]")


def _plot(result: dict[str, Any], curve: adv.LruCurve, layout: KVLayout | None, path: Path) -> Path:
    from wakman.experiments.plots import _pyplot, save_figure

    plt = _pyplot()
    scale = (lambda c: layout.gib(c, curve.block_size)) if layout else (lambda c: c)
    fig, ax = plt.subplots(figsize=(8, 4.8))
    caps = adv.log_points(curve)
    ax.plot(
        [scale(c) for c in caps],
        [curve.hit_rate(c) for c in caps],
        color="black",
        lw=1.5,
        label="lru (exact curve, cache mode)",
    )
    for name in dict.fromkeys(r["policy"] for r in result["sweep"]):
        points = sorted((r["capacity_blocks"], r["hit_rate"]) for r in result["sweep"] if r["policy"] == name)
        if name == "lru" and result["mode"] == "cache":
            continue
        ax.plot([scale(p[0]) for p in points], [p[1] for p in points], marker="o", ms=3, label=name)
    ax.axhline(curve.ceiling, color="grey", linestyle="--", label=f"infinite cache {curve.ceiling:.3f}")
    ax.axhline(
        result["target_hit_rate"], color="grey", linestyle=":", label=f"{result['target']:g} of ceiling"
    )
    if result["at_capacity"]:
        ax.axvline(
            scale(result["at_capacity"]["capacity_blocks"]),
            color="black",
            linestyle="-.",
            lw=1,
            label="your cache",
        )
    ax.set_xscale("log")
    ax.set_xlabel("KV cache (GiB)" if layout else "cache size (blocks)")
    ax.set_ylabel("prefix-cache hit rate (tokens)")
    ax.set_title(f"{Path(result['trace']).name}: hit rate against cache size ({result['mode']} mode)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
