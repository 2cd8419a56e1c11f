"""`wakman stats` and `wakman convert`."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import typer
from rich.table import Table

from wakman.cli.checks import check_numbers, check_output, check_plot
from wakman.cli.console import console, counted, err_console, json_text, progress_bars
from wakman.cli.errors import cli_errors
from wakman.cli.inputs import (
    FORMATS_WITHOUT_BLOCK_SIZE,
    BlockSizeOption,
    FormatOption,
    RateOption,
    SeedOption,
    open_trace,
)
from wakman.traces import FORMATS, detect_format, write_trace
from wakman.traces.formats import check_format
from wakman.traces.model import Request
from wakman.traces.mooncake import DEFAULT_BLOCK_SIZE


def stats(
    trace: Path = typer.Argument(..., help="Trace file, folder or archive."),
    fmt: str | None = FormatOption,
    as_json: bool = typer.Option(False, "--json", help="Print one flat JSON object."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Draw the LRU hit-ratio curve to this file (.png, .pdf or .svg)."
    ),
    curve: bool = typer.Option(True, "--curve/--no-curve", help="Compute the one-pass LRU curve."),
    block_size: int | None = BlockSizeOption,
    rate: float | None = RateOption,
    seed: int | None = SeedOption,
) -> None:
    """Requests, blocks, reuse, the infinite-cache ceiling and the LRU curve of a trace."""
    from wakman.traces.stats import compute_stats

    # progress on stderr (stdout may be --json), gone once done; reading an archive takes seconds
    # before the first request arrives
    with cli_errors("nothing was written" if plot is None else f"{plot} was not written"):
        if plot is not None and not curve:
            raise ValueError("--plot draws the LRU curve: drop --no-curve or --plot")
        check_plot(plot)
        with progress_bars(to=err_console, transient=True, disable=not err_console.is_terminal) as progress:
            requests = counted(open_trace(trace, fmt, block_size, rate, seed), progress, "requests read")
            result = compute_stats(requests, lru_curve=curve)
        if plot is not None and not result.block_accesses:
            raise ValueError(f"--plot: {trace.name} has no block access, so no LRU curve to draw")
        flat = result.as_flat_dict()
        if as_json:
            print(json_text(flat))
        else:
            table = Table(title=f"{trace.name}", show_header=False)
            for key, value in flat.items():
                if isinstance(value, float):  # NaN: a statistic of no sample (no reuse at all)
                    table.add_row(key, f"{value:,.4f}" if math.isfinite(value) else "-")
                else:
                    table.add_row(key, f"{value:,}")
            console.print(table)
        if plot is not None:
            from wakman.experiments.plots import plot_lru_curve

            plot_lru_curve(result, plot, title=trace.name)
            if not as_json:
                console.print(f"LRU curve written to {plot}")


def _block_size_kept(requests: Iterator[Request], to_fmt: str, confirmed: int | None) -> Iterator[Request]:
    """``requests``, refused before the first is written where ``to_fmt`` has no block size field
    (its readers assume 512 tokens, or the size ``--block-size`` states) and the trace's blocks
    (one size: the readers refuse a second) are another size: the one ``confirmed``, else 512."""
    expected = DEFAULT_BLOCK_SIZE if confirmed is None else confirmed
    for index, req in enumerate(requests):
        if index == 0 and req.block_size != expected:
            if confirmed is not None:
                raise ValueError(
                    f"--block-size {confirmed} does not match the trace: its blocks are "
                    f"{req.block_size} tokens ({to_fmt} rows carry no block size; the file would be "
                    "read back with the wrong one)"
                )
            raise ValueError(
                f"{to_fmt} rows carry no block size and their readers assume {DEFAULT_BLOCK_SIZE} "
                f"tokens, but this trace's blocks are {req.block_size} tokens: reading it back would "
                f"misplace every block. Write --to native (it keeps the block size), or pass "
                f"--block-size {req.block_size} to write it anyway and read it back with "
                f"--block-size {req.block_size}"
            )
        yield req


# What each output format cannot carry (``Request`` field -> what the notice calls it); native keeps all.
_DROPPED = {
    "mooncake": {"output_keys": "output keys", "label": "labels", "session_id": "session ids"},
    "aiperf-sessions": {"label": "labels"},
}


class _Dropped:
    """Counts, as ``requests`` pass, the requests whose fields ``to_fmt`` cannot carry."""

    def __init__(self, to_fmt: str) -> None:
        self.to_fmt = to_fmt
        self.fields = _DROPPED.get(to_fmt, {})
        self.counts = dict.fromkeys(self.fields, 0)

    def watch(self, requests: Iterator[Request]) -> Iterator[Request]:
        for req in requests:
            for field in self.fields:
                value = getattr(req, field)
                self.counts[field] += value is not None and (field != "output_keys" or len(value) > 0)
            yield req

    def notice(self) -> str | None:
        lost = [f"{self.fields[f]} ({n:,} requests)" for f, n in self.counts.items() if n]
        if not lost:
            return None
        return f"{self.to_fmt} rows carry no {', no '.join(lost)}: dropped (--to native keeps them)"


class _AnswersAdded:
    """Counts, as ``requests`` pass, the later session turns written ``--to aiperf-sessions`` whose
    previous turn carries no output keys: AIPerf replays a turn after the previous turn's answer,
    whose decoded blocks the server caches, and the reader gives them to the previous turn as its
    output keys, so the file describes hits the source trace did not have."""

    def __init__(self) -> None:
        self.turns = 0
        self._unkeyed: dict[str, bool] = {}  # session -> its latest turn decodes blocks it has no keys for

    def watch(self, requests: Iterator[Request]) -> Iterator[Request]:
        for req in requests:
            if req.session_id is not None:
                self.turns += self._unkeyed.get(req.session_id, False)
                decoded = (req.prompt_tokens + req.output_tokens - 1) // req.block_size
                self._unkeyed[req.session_id] = (
                    len(req.output_keys) == 0 and decoded > req.prompt_tokens // req.block_size
                )
            yield req

    def notice(self) -> str | None:
        if not self.turns:
            return None
        return (
            f"{self.turns:,} session turns follow a turn that carries no output keys: AIPerf replays "
            "each after the previous answer, whose blocks the server caches, and reading this file "
            "back keys them, so it hits blocks the source trace did not (its infinite-cache token "
            "ceiling rises)"
        )


def convert(
    source: Path = typer.Argument(..., help="Input trace."),
    target: Path = typer.Argument(..., help="Output trace (.gz, .bz2, .xz compress)."),
    from_fmt: str | None = typer.Option(None, "--from", help=f"Input format: {', '.join(FORMATS)}."),
    to_fmt: str = typer.Option(..., "--to", help="Output format: native, mooncake, aiperf-sessions."),
    block_size: int | None = BlockSizeOption,
    rate: float | None = RateOption,
    seed: int | None = SeedOption,
) -> None:
    """Convert a trace between formats; the output appears only once complete.

    Mooncake and AIPerf-session rows carry no block size (readers assume 512 tokens): a trace with
    other blocks is written to them only with --block-size confirming its size."""
    with cli_errors(f"nothing was written to {target}"):
        writable = [n for n, f in FORMATS.items() if f.write]
        if to_fmt not in writable:
            raise ValueError(f"--to {to_fmt!r}: choose from {', '.join(writable)}")
        check_numbers(("--block-size", block_size, ">=1"))
        check_output(target, "target")
        check_format(from_fmt, "--from")
        name = from_fmt or detect_format(source)
        # --block-size is the input's block size where the input lacks one; otherwise it only
        # confirms the block size of an output without one
        reads_it = name in FORMATS_WITHOUT_BLOCK_SIZE
        if block_size is not None and not reads_it and to_fmt not in FORMATS_WITHOUT_BLOCK_SIZE:
            raise ValueError(f"--block-size does not apply to {name} traces written --to {to_fmt}")
        # progress on stderr, only on a terminal, gone once done (an archive takes seconds)
        with progress_bars(to=err_console, transient=True, disable=not err_console.is_terminal) as progress:
            requests = open_trace(source, name, block_size if reads_it else None, rate, seed)
            if to_fmt in FORMATS_WITHOUT_BLOCK_SIZE:
                requests = _block_size_kept(requests, to_fmt, block_size)
            watchers: list[_Dropped | _AnswersAdded] = [_Dropped(to_fmt)]
            if to_fmt == "aiperf-sessions":
                watchers.append(_AnswersAdded())
            for watcher in watchers:
                requests = watcher.watch(requests)
            count = write_trace(counted(requests, progress, "requests converted"), target, to_fmt)
    for watcher in watchers:
        if (notice := watcher.notice()) is not None:
            err_console.print(f"[yellow]notice:[/yellow] {notice}", highlight=False)
    err_console.print(f"wrote {count:,} request{'' if count == 1 else 's'} to {target} ({to_fmt})")
