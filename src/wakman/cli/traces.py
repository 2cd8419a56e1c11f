"""`wakman stats` and `wakman convert`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from wakman.cli.common import (
    BlockSizeOption,
    FormatOption,
    RateOption,
    SeedOption,
    cli_errors,
    console,
    counted,
    err_console,
    open_trace,
    progress_bars,
)
from wakman.traces import FORMATS, write_trace


def stats(
    trace: Path = typer.Argument(..., help="Trace file, folder or archive."),
    fmt: str | None = FormatOption,
    as_json: bool = typer.Option(False, "--json", help="Print one flat JSON object."),
    plot: Path | None = typer.Option(None, "--plot", help="Draw the LRU hit-ratio curve to this PNG."),
    curve: bool = typer.Option(True, "--curve/--no-curve", help="Compute the one-pass LRU curve."),
    block_size: int | None = BlockSizeOption,
    rate: float | None = RateOption,
    seed: int | None = SeedOption,
) -> None:
    """Requests, blocks, reuse, the infinite-cache ceiling and the LRU curve of a trace."""
    from wakman.traces.stats import compute_stats

    # progress on stderr (stdout may be --json), gone once done; reading an archive takes seconds
    # before the first request arrives
    with (
        cli_errors(),
        progress_bars(to=err_console, transient=True, disable=not err_console.is_terminal) as progress,
    ):
        requests = counted(open_trace(trace, fmt, block_size, rate, seed), progress, "requests read")
        result = compute_stats(requests, lru_curve=curve or plot is not None)
    flat = result.as_flat_dict()
    if as_json:
        print(json.dumps(flat))
    else:
        table = Table(title=f"{trace.name}", show_header=False)
        for key, value in flat.items():
            table.add_row(key, f"{value:,.4f}" if isinstance(value, float) else f"{value:,}")
        console.print(table)
    if plot is not None:
        from wakman.experiments.plots import plot_lru_curve

        plot_lru_curve(result, plot, title=trace.name)
        if not as_json:
            console.print(f"LRU curve written to {plot}")


def convert(
    source: Path = typer.Argument(..., help="Input trace."),
    target: Path = typer.Argument(..., help="Output trace (.gz compresses)."),
    from_fmt: str | None = typer.Option(None, "--from", help=f"Input format: {', '.join(FORMATS)}."),
    to_fmt: str = typer.Option(..., "--to", help="Output format: native, mooncake, aiperf-sessions."),
    block_size: int | None = BlockSizeOption,
    rate: float | None = RateOption,
    seed: int | None = SeedOption,
) -> None:
    """Convert a trace between formats; the output appears only once complete."""
    with cli_errors():
        count = write_trace(open_trace(source, from_fmt, block_size, rate, seed), target, to_fmt)
    console.print(f"wrote {count:,} requests to {target} ({to_fmt})")
