"""`wakman generate`: synthetic single-turn / multi-turn / agentic traces."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from wakman.cli.checks import check_numbers, check_output
from wakman.cli.console import console, counted, err_console, progress_bars
from wakman.cli.errors import cli_errors
from wakman.cli.inputs import FORMATS_WITHOUT_BLOCK_SIZE
from wakman.traces import FORMATS, write_trace
from wakman.traces.mooncake import DEFAULT_BLOCK_SIZE


def _fractions(mix: str) -> list[float]:
    """``--mix`` as three fractions summing to 1 (the config's rule, ``check_mix``), or a
    ``ValueError`` naming the flag."""
    from wakman.workload.config import check_mix

    try:
        fractions = [float(x) for x in mix.split(",")]
    except ValueError:
        raise ValueError(f"--mix needs three comma-separated fractions, got {mix!r}") from None
    check_mix(fractions, "--mix")
    return fractions


def generate(
    out: Path | None = typer.Option(
        None, "-o", "--out", help="Output trace (.gz, .bz2, .xz compress); required unless --list-presets."
    ),
    mix: str | None = typer.Option(
        None,
        "--mix",
        help="Session fractions single,multi,agentic, e.g. 0.33,0.33,0.34 (replaces a --preset's mix).",
    ),
    preset: str | None = typer.Option(None, "--preset", help="A named mix or ablation (see --list-presets)."),
    duration: float | None = typer.Option(None, "--duration", help="Trace length in seconds (default 3600)."),
    rate: float | None = typer.Option(None, "--rate", help="Requests per second (default 1.5)."),
    seed: int = typer.Option(0, "--seed", help="Same seed, byte-identical trace (0 to 2**32 - 1)."),
    config: Path | None = typer.Option(None, "--config", help="A workload TOML (default: the bundled one)."),
    settings: list[str] = typer.Option([], "--set", help="Override any parameter: key=value, dotted."),
    fmt: str = typer.Option("native", "--format", help="native | mooncake | aiperf-sessions."),
    list_presets: bool = typer.Option(False, "--list-presets", help="List the presets and exit."),
) -> None:
    """Generate a workload deterministically, at the token level, with vLLM-style chained block keys."""
    from wakman.workload import PRESETS, build_config, generate_requests
    from wakman.workload.generator import check_seed

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
    with cli_errors(f"nothing was written to {out}"):
        if out is None:
            raise ValueError("-o/--out is required")
        check_numbers(("--duration", duration, ">0"), ("--rate", rate, ">0"))
        check_seed(seed, "--seed")
        writable = [n for n, f in FORMATS.items() if f.write]
        if fmt not in writable:
            raise ValueError(f"--format {fmt!r}: choose from {', '.join(writable)}")
        check_output(out, "-o/--out")
        overrides = {}
        for item in settings:
            if "=" not in item:
                raise ValueError(f"--set needs key=value, got {item!r}")
            key, value = item.split("=", 1)
            overrides[key.strip()] = value.strip()
        for flag, given, key in (
            ("--mix", mix, "mix"),
            ("--duration", duration, "duration_s"),
            ("--rate", rate, "rate"),
        ):
            if given is not None and key in overrides:
                raise ValueError(f"{flag} and --set {key}=... both set {key}: give one")
        fractions = _fractions(mix) if mix is not None else None
        cfg = build_config(fractions, preset, config, overrides, duration, rate)
        with progress_bars(to=err_console, transient=True, disable=not err_console.is_terminal) as progress:
            progress.add_task("generating", total=None)
            requests = generate_requests(cfg, seed)
            if not requests:
                raise ValueError(
                    f"--duration {cfg.duration_s:g} s at --rate {cfg.rate:g}/s yields no requests; "
                    "nothing written (make it longer)"
                )
            count = write_trace(counted(requests, progress, "writing", len(requests)), out, fmt)
    if fmt in FORMATS_WITHOUT_BLOCK_SIZE and cfg.block_size != DEFAULT_BLOCK_SIZE:
        err_console.print(
            f"note: {fmt} rows carry no block size and readers assume {DEFAULT_BLOCK_SIZE} tokens: "
            f"read this trace back with --block-size {cfg.block_size}",
            highlight=False,
        )
    err_console.print(
        f"wrote {count:,} requests ({cfg.duration_s:g} s at {cfg.rate:g}/s, mix "
        f"{', '.join(f'{x:g}' for x in cfg.mix)}) to {out}"
    )
