"""`wakman simulate` and `wakman sweep`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import typer
from rich.table import Table

from wakman.adaptive import simulate as run_simulation
from wakman.cli.common import (
    BlockSizeOption,
    FormatOption,
    RateOption,
    SeedOption,
    cli_errors,
    console,
    err_console,
    open_trace,
    progress_bars,
)
from wakman.experiments.sweep import run_grid
from wakman.simulation import MODES, ServerModel

PREFILL = typer.Option(ServerModel.prefill_tokens_per_s, "--prefill-tps", help="Prefill tokens per second.")
DECODE = typer.Option(ServerModel.decode_tokens_per_s, "--decode-tps", help="Decode tokens/s per request.")
RUNNING = typer.Option(ServerModel.max_running, "--max-running", help="Concurrent requests at most.")
WARMUP = typer.Option(0.0, "--warmup-s", help="Requests arriving earlier are left out of the figures.")
MODE = typer.Option("serve", "--mode", help="serve (time, pinning) or cache (shadow replay).")


def _server(prefill_tps: float, decode_tps: float, max_running: int) -> ServerModel:
    """The CLI's server model: the throughputs given, the default per-request prefill overhead."""
    return ServerModel(
        prefill_tokens_per_s=prefill_tps, decode_tokens_per_s=decode_tps, max_running=max_running
    )


def simulate(
    trace: Path = typer.Argument(..., help="Trace file, folder or archive."),
    policy: str = typer.Option(..., "--policy", help="A policy (`wakman policies`), wakman or wakman-plus."),
    capacity: int = typer.Option(..., "--capacity-blocks", help="Usable KV-cache blocks."),
    fmt: str | None = FormatOption,
    mode: str = MODE,
    as_json: bool = typer.Option(False, "--json", help="One flat JSON object."),
    series: bool = typer.Option(False, "--series", help="Include the per-interval series in --json."),
    plot: Path | None = typer.Option(None, "--plot", help="Draw the per-interval series to this PNG."),
    warmup_s: float = WARMUP,
    interval_s: float = typer.Option(60.0, "--interval-s", help="Width of the per-interval series."),
    prefill_tps: float = PREFILL,
    decode_tps: float = DECODE,
    max_running: int = RUNNING,
    block_size: int | None = BlockSizeOption,
    rate: float | None = RateOption,
    seed: int | None = SeedOption,
) -> None:
    """Simulate one policy at one cache size; report vLLM's prefix-cache hit rate and more."""
    with cli_errors():
        if mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}")
        requests = list(open_trace(trace, fmt, block_size, rate, seed))
        server = _server(prefill_tps, decode_tps, max_running)
        result = run_simulation(
            requests, policy, capacity, mode=mode, server=server, warmup_s=warmup_s, interval_s=interval_s
        )
    flat = result.as_flat_dict(series=series)
    if result.saturation is not None and result.saturation.saturated:
        err_console.print(f"[yellow]warning:[/yellow] {result.saturation.describe()}", highlight=False)
    if as_json:
        print(json.dumps(flat))
    else:
        table = Table(title=f"{policy} at {capacity:,} blocks, {trace.name} ({mode} mode)", show_header=False)
        for key, value in flat.items():
            table.add_row(key, f"{value:,.4f}" if isinstance(value, float) else str(value))
        console.print(table)
    if plot is not None:
        from wakman.experiments.plots import plot_decisions, plot_intervals

        if "decisions" in result.extra:
            plot_decisions(result.extra["decisions"], plot, f"{policy}, {capacity:,} blocks, {trace.name}")
        else:
            plot_intervals([i.as_dict() for i in result.intervals], plot, f"{policy}, {capacity:,} blocks")


def sweep(
    trace: Path = typer.Argument(..., help="Trace file, folder or archive."),
    policies: str = typer.Option("lru,s3fifo,belady,infinite", "--policies"),
    capacities: str = typer.Option(..., "--capacities", help="Comma-separated cache sizes in blocks."),
    out: Path = typer.Option(Path("sweep"), "--out", help="Folder for sweep.csv, sweep.json, sweep.png."),
    fmt: str | None = FormatOption,
    mode: str = MODE,
    jobs: int | None = typer.Option(None, "--jobs", help="Worker processes (default: all cores)."),
    warmup_s: float = WARMUP,
    prefill_tps: float = PREFILL,
    decode_tps: float = DECODE,
    max_running: int = RUNNING,
    block_size: int | None = BlockSizeOption,
    rate: float | None = RateOption,
    seed: int | None = SeedOption,
) -> None:
    """Every policy at every cache size, on all cores; CSV, JSON and a plot."""
    with cli_errors():
        names = [p.strip() for p in policies.split(",") if p.strip()]
        sizes = [int(c) for c in capacities.split(",") if c.strip()]
        if mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}")
        requests = list(open_trace(trace, fmt, block_size, rate, seed))
        server = _server(prefill_tps, decode_tps, max_running)
        with progress_bars() as progress:
            task = progress.add_task(f"sweeping {trace.name}", total=len(names) * len(sizes))
            rows = run_grid(
                requests,
                names,
                sizes,
                mode,
                server,
                warmup_s,
                jobs=jobs,
                on_done=lambda _row: progress.advance(task),
            )
    out.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(out / "sweep.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    (out / "sweep.json").write_text(
        json.dumps({"trace": str(trace), "mode": mode, "results": rows}, indent=1)
    )
    from wakman.experiments.plots import plot_sweep

    plot_sweep(rows, out / "sweep.png", f"{trace.name} ({mode} mode)")
    saturated = [f"{r['policy']} at {r['capacity_blocks']:,}" for r in rows if r.get("saturated")]
    if saturated:
        err_console.print(
            f"[yellow]warning:[/yellow] the modelled server is saturated in {len(saturated)} of "
            f"{len(rows)} runs ({', '.join(saturated)}): their hit rates are those of an overloaded "
            "queue (`saturated`, `prefill_utilization` and `queue_growth` in sweep.csv; raise "
            "--prefill-tps / --max-running)",
            highlight=False,
        )
    table = Table("policy", *[f"{s:,}" for s in sizes], title="hit rate by cache size (blocks)")
    for name in names:
        table.add_row(name, *[f"{r['hit_rate']:.4f}" for r in rows if r["policy"] == name])
    console.print(table)
    console.print(f"wrote {out / 'sweep.csv'}, {out / 'sweep.json'}, {out / 'sweep.png'}")
