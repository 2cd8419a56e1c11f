"""`wakman simulate` and `wakman sweep`."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import typer
from rich.table import Table

from wakman.adaptive import simulate as run_simulation
from wakman.cli.common import (
    PLOT_EXTRA,
    BlockSizeOption,
    FormatOption,
    RateOption,
    SeedOption,
    atomic_output,
    can_plot,
    check_numbers,
    check_output_dir,
    check_plot,
    cli_errors,
    console,
    counted,
    err_console,
    interrupted,
    open_trace,
    parse_ints,
    progress_bars,
)
from wakman.experiments.sweep import GridInterrupted, run_grid
from wakman.simulation import MODES, ServerModel

PREFILL = typer.Option(ServerModel.prefill_tokens_per_s, "--prefill-tps", help="Prefill tokens per second.")
DECODE = typer.Option(ServerModel.decode_tokens_per_s, "--decode-tps", help="Decode tokens/s per request.")
RUNNING = typer.Option(ServerModel.max_running, "--max-running", help="Concurrent requests at most.")
WARMUP = typer.Option(0.0, "--warmup-s", help="Requests arriving earlier are left out of the figures.")
MODE = typer.Option("serve", "--mode", help="serve (time, pinning) or cache (shadow replay).")


def _server(prefill_tps: float, decode_tps: float, max_running: int, warmup_s: float) -> ServerModel:
    """The CLI's server model: the throughputs given (checked, with ``--warmup-s``), the default
    per-request prefill overhead."""
    check_numbers(
        ("--prefill-tps", prefill_tps, ">0"),
        ("--decode-tps", decode_tps, ">0"),
        ("--max-running", max_running, ">=1"),
        ("--warmup-s", warmup_s, ">=0"),
    )
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
    with cli_errors("nothing was written" if plot is None else f"{plot} was not written"):
        if mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}")
        check_numbers(("--capacity-blocks", capacity, ">=1"), ("--interval-s", interval_s, ">0"))
        server = _server(prefill_tps, decode_tps, max_running, warmup_s)
        check_plot(plot)
        # progress on stderr (stdout may be --json), only on a terminal, gone once done
        with progress_bars(to=err_console, transient=True, disable=not err_console.is_terminal) as bar:
            requests = list(counted(open_trace(trace, fmt, block_size, rate, seed), bar, "reading"))
            bar.add_task(f"simulating {policy}", total=None)
            result = run_simulation(
                requests, policy, capacity, mode=mode, server=server, warmup_s=warmup_s, interval_s=interval_s
            )
        flat = result.as_flat_dict(series=series)
        if result.saturation is not None and result.saturation.saturated:
            err_console.print(f"[yellow]warning:[/yellow] {result.saturation.describe()}", highlight=False)
        if as_json:
            print(json.dumps(flat))
        else:
            title = f"{policy} at {capacity:,} blocks, {trace.name} ({mode} mode)"
            table = Table(title=title, show_header=False)
            for key, value in flat.items():
                table.add_row(key, f"{value:,.4f}" if isinstance(value, float) else str(value))
            console.print(table)
        if plot is not None:
            from wakman.experiments.plots import plot_decisions, plot_intervals

            if "decisions" in result.extra:
                plot_decisions(
                    result.extra["decisions"], plot, f"{policy}, {capacity:,} blocks, {trace.name}"
                )
            else:
                plot_intervals(
                    [i.as_dict() for i in result.intervals], plot, f"{policy}, {capacity:,} blocks"
                )


def _write_sweep(rows: list[dict], out: Path, trace: Path, mode: str) -> list[Path]:
    """sweep.csv and sweep.json of ``rows`` in ``out``, each all or nothing."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with atomic_output(out / "sweep.csv") as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    with atomic_output(out / "sweep.json") as raw:
        raw.write(json.dumps({"trace": str(trace), "mode": mode, "results": rows}, indent=1).encode())
    return [out / "sweep.csv", out / "sweep.json"]


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
    with cli_errors(f"nothing was written to {out}"):
        names = [p.strip() for p in policies.split(",") if p.strip()]
        if not names:
            raise ValueError("--policies needs at least one policy")
        sizes = parse_ints(capacities, "--capacities")
        if mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}")
        check_numbers(("--jobs", jobs, ">=1"))
        server = _server(prefill_tps, decode_tps, max_running, warmup_s)
        check_output_dir(out, "--out")
        with progress_bars() as progress:
            requests = list(counted(open_trace(trace, fmt, block_size, rate, seed), progress, "reading"))
            task = progress.add_task(f"sweeping {trace.name}", total=len(names) * len(sizes))
            try:
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
            except GridInterrupted as stop:
                stop_rows, total = stop.rows, stop.total
                rows = None
        if rows is None:  # Ctrl-C: keep the finished runs
            if not stop_rows:
                interrupted(f"0 of {total} runs finished; nothing was written to {out}")
            written = _write_sweep(stop_rows, out, trace, mode)
            interrupted(
                f"kept the {len(stop_rows)} of {total} runs that finished in "
                f"{', '.join(map(str, written))} (no plot)"
            )
        written = _write_sweep(rows, out, trace, mode)
        if can_plot():
            from wakman.experiments.plots import plot_sweep

            written.append(plot_sweep(rows, out / "sweep.png", f"{trace.name} ({mode} mode)"))
        else:
            err_console.print(
                f"no sweep.png: plots need matplotlib ({PLOT_EXTRA})", markup=False, highlight=False
            )
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
    console.print(f"wrote {', '.join(map(str, written))}")
