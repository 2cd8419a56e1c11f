"""`wakman generate`: synthetic single-turn / multi-turn / agentic traces."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from wakman.cli.common import cli_errors, console
from wakman.traces import write_trace


def generate(
    out: Path | None = typer.Option(None, "-o", "--out", help="Output trace (.gz compresses)."),
    mix: str | None = typer.Option(
        None, "--mix", help="Session fractions single,multi,agentic, e.g. 0.33,0.33,0.34."
    ),
    preset: str | None = typer.Option(None, "--preset", help="A named mix or ablation (see --list-presets)."),
    duration: float | None = typer.Option(None, "--duration", help="Trace length in seconds (default 3600)."),
    rate: float | None = typer.Option(None, "--rate", help="Requests per second (default 1.5)."),
    seed: int = typer.Option(0, "--seed", help="Same seed, byte-identical trace."),
    config: Path | None = typer.Option(None, "--config", help="A workload TOML (default: the bundled one)."),
    settings: list[str] = typer.Option([], "--set", help="Override any parameter: key=value, dotted."),
    fmt: str = typer.Option("native", "--format", help="native | mooncake | aiperf-sessions."),
    list_presets: bool = typer.Option(False, "--list-presets", help="List the presets and exit."),
) -> None:
    """Generate a workload deterministically, at the token level, with vLLM-style chained block keys."""
    from wakman.workload import PRESETS, build_config, generate_requests

    if list_presets:
        table = Table("preset", "mix (single, multi, agentic)", "overrides", "group")
        for p in PRESETS.values():
            table.add_row(
                p.name,
                ", ".join(f"{x:g}" for x in p.mix),
                " ".join(f"{k}={v}" for k, v in p.overrides.items()),
                p.group,
            )
        console.print(table)
        return
    with cli_errors():
        if out is None:
            raise ValueError("-o/--out is required")
        overrides = {}
        for item in settings:
            if "=" not in item:
                raise ValueError(f"--set needs key=value, got {item!r}")
            key, value = item.split("=", 1)
            overrides[key.strip()] = value.strip()
        fractions = [float(x) for x in mix.split(",")] if mix else None
        cfg = build_config(fractions, preset, config, overrides, duration, rate)
        count = write_trace(generate_requests(cfg, seed), out, fmt)
    console.print(
        f"wrote {count:,} requests ({cfg.duration_s:g} s at {cfg.rate:g}/s, mix "
        f"{', '.join(f'{x:g}' for x in cfg.mix)}) to {out}"
    )
