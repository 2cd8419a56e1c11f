"""`wakman policies` (list them) and `wakman shadow` (replay a trace's block keys through them)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import typer
from rich.table import Table

from wakman.adaptive.config import ADAPTIVE_PRESETS
from wakman.cli.checks import MAX_BLOCKS, parse_ints, parse_names
from wakman.cli.console import console, counted, err_console, json_text, progress_bars
from wakman.cli.errors import cli_errors
from wakman.cli.inputs import BlockSizeOption, FormatOption, RateOption, SeedOption, open_trace
from wakman.data import BUNDLED_MOONCAKE, BUNDLED_MOONCAKE_ATTRIBUTION
from wakman.policies import POLICIES, make_policy
from wakman.traces.model import joined_keys


def policies() -> None:
    """List the eviction policies and the adaptive presets, with the first line of their semantics."""
    with cli_errors():
        table = Table("name", "semantics")
        for name, cls in POLICIES.items():
            # a variant's own docstring (s3fifo-v0), else its module's, whose first line names it
            own = cls.__dict__.get("__doc__")
            doc = (own or sys.modules[cls.__module__].__doc__ or "").strip()
            # reST's inline literals (``ARC.c``) read as plain names in a terminal table
            table.add_row(name, doc.splitlines()[0].replace("``", "") if doc else "")
        for name, preset in ADAPTIVE_PRESETS.items():
            table.add_row(name, preset.describe())
        console.print(table)


def shadow(
    trace: Path | None = typer.Argument(None, help="Trace (default: the bundled Mooncake chat trace)."),
    fmt: str | None = FormatOption,
    policy_names: str = typer.Option(
        "lru,fifo,s3fifo,s3fifo-v0,sieve,arc,belady,infinite",
        "--policies",
        help="Comma-separated policies (`wakman policies`).",
    ),
    capacities: str = typer.Option("5000,20000,50000", "--capacities", help="Cache sizes in blocks."),
    as_json: bool = typer.Option(
        False, "--json", help="One JSON object alone on stdout (block_hit_ratio: policy -> size -> ratio)."
    ),
    block_size: int | None = BlockSizeOption,
    rate: float | None = RateOption,
    seed: int | None = SeedOption,
) -> None:
    """Block hit ratio of each policy replaying the trace's block keys (plain shadow replay)."""
    path = trace or BUNDLED_MOONCAKE
    with cli_errors():
        names = parse_names(policy_names, "--policies", POLICIES)
        sizes = list(dict.fromkeys(parse_ints(capacities, "--capacities", maximum=MAX_BLOCKS)))
        results: dict[str, dict[int, float]] = {n: {} for n in names}
        # progress on stderr (stdout may be --json), only on a terminal, gone once done
        with progress_bars(to=err_console, transient=True, disable=not err_console.is_terminal) as progress:
            requests = counted(open_trace(path, fmt, block_size, rate, seed), progress, "reading")
            keys = joined_keys(req.block_keys for req in requests)
            task = progress.add_task("replaying", total=len(names) * len(sizes))
            for name in names:
                for size in sizes:
                    extra = {"future": keys} if name == "belady" else {}
                    hits = make_policy(name, size, **extra).replay(keys)
                    results[name][size] = hits / len(keys) if len(keys) else math.nan  # no access: no ratio
                    progress.advance(task)
    if as_json:
        print(json_text({"trace": str(path), "block_accesses": len(keys), "block_hit_ratio": results}))
        return
    table = Table(title=f"block hit ratio, {path.name} ({len(keys):,} block accesses)")
    table.add_column("policy")
    for size in sizes:
        table.add_column(f"{size:,} blocks", justify="right")
    online = [n for n in names if n not in ("belady", "infinite")]
    best = {s: max((results[n][s] for n in online), default=None) for s in sizes}
    for name in names:
        cells = []
        for size in sizes:
            value = results[name][size]
            if math.isnan(value):
                cells.append("-")
                continue
            mark = " *" if name not in ("belady", "infinite") and value == best[size] else ""
            cells.append(f"{value:.4f}{mark}")
        table.add_row(name, *cells)
    console.print(table)
    if online and keys.size:
        console.print("* best online policy at that size.")
    if trace is None:
        console.print(f"[dim]{BUNDLED_MOONCAKE_ATTRIBUTION}[/dim]")
