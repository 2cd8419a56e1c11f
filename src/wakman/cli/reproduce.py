"""`wakman reproduce`: the paper's experiments in one command (the README's first command)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from wakman.cli.checks import can_plot, check_numbers, check_output, check_output_dir
from wakman.cli.console import console, err_console, progress_bars
from wakman.cli.errors import cli_errors
from wakman.traces.io import atomic_paths

if TYPE_CHECKING:
    from wakman.experiments.reproduce import Results


def check_docs(docs: Path | None) -> None:
    """Before the work: ``--docs`` names a markdown file that is new or an earlier report, and the
    ``results.json`` beside it is new or an earlier run's, so the run replaces nothing else (the
    figures beside it, ``figure1.png`` ..., are replaced too: the help says so)."""
    if docs is None:
        return
    from wakman.experiments.report import TITLE

    if docs.suffix.lower() != ".md":
        raise ValueError(f"--docs {docs}: the report is markdown: give a path ending in .md")
    check_output(docs, "--docs")
    if docs.is_file() and _first_line(docs) != TITLE:
        raise ValueError(
            f"--docs {docs}: exists and is not a `wakman reproduce` report (its first line is not "
            f"{TITLE!r}); nothing was replaced: remove it or give another path"
        )
    beside = docs.parent / "results.json"
    if beside.exists():
        try:
            earlier = json.loads(beside.read_bytes())
        except (OSError, ValueError):
            earlier = None
        if not (isinstance(earlier, dict) and {"plan", "mixes", "summary"} <= earlier.keys()):
            raise ValueError(
                f"--docs {docs}: {beside} exists and is not an earlier run's results.json; nothing "
                "was replaced: remove it or give a report path in another folder"
            )


def _first_line(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().rstrip("\n")
    except OSError:
        return ""


def reproduce(
    quick: bool = typer.Option(False, "--quick", help="Shorter traces and one capacity (about a minute)."),
    out: Path = typer.Option(Path("results"), "--out", help="Folder for results.json, tables and figures."),
    jobs: int | None = typer.Option(None, "--jobs", help="Worker processes (default: all cores)."),
    seed: int = typer.Option(
        0,
        "--seed",
        help="Seed of every generated trace (the mixes, the ablations, the map; 0 to 2**32 - 1); the "
        "real traces are read from their files and do not depend on it. The report and results.json "
        "state it.",
    ),
    docs: Path | None = typer.Option(
        None,
        "--docs",
        help="Also write the markdown report here (a new .md file or an earlier report), with its "
        "figures (figure1.png ...) and results.json beside it.",
    ),
    shared: Path | None = typer.Option(
        None,
        "--shared",
        help="The shared/ folder with the real traces "
        "(default: ../shared beside the current folder, when present).",
    ),
) -> None:
    """Reproduce Table 1, Figures 1 and 3 and the real-trace results on the simulator."""
    from wakman.experiments.reproduce import CLAUDE_ARCHIVE, Plan, run
    from wakman.workload.generator import check_seed

    draw = can_plot()
    if not draw:
        err_console.print(
            "[yellow]notice:[/yellow] matplotlib is not installed: the figures are skipped and the report "
            "says so (pip install 'wakman[plot]' to draw them)",
            highlight=False,
        )
    if shared is None and (Path.cwd().parent / "shared" / "traces").is_dir():
        shared = Path.cwd().parent / "shared"
    with cli_errors():
        check_numbers(("--jobs", jobs, ">=1"))
        check_seed(seed, "--seed")
        if shared is not None and not (shared / "traces").is_dir():
            raise ValueError(f"--shared {shared}: no traces/ folder in it")
        check_output_dir(out, "--out")
        check_docs(docs)
    plan = Plan.quick(shared, seed=seed) if quick else Plan(shared=shared, seed=seed)
    # the command line the report quotes: the seed where it is not the default
    command = "wakman reproduce" + (" --quick" if quick else "") + (f" --seed {seed}" if seed else "")
    if plan.claude_capacities and (shared is None or not (shared / "traces" / CLAUDE_ARCHIVE).exists()):
        err_console.print(
            f"[yellow]notice:[/yellow] no {CLAUDE_ARCHIVE} in "
            f"{shared / 'traces' if shared else '--shared (not given, no ../shared)'}: the Claude Code "
            "archive's runs are skipped",
            highlight=False,
        )
    started = time.perf_counter()
    # The run and the writing sit in cli_errors as the checks do: Ctrl-C, or SIGTERM to this process
    # alone, stops the workers at once and says what was written (exit 130); an OSError (a full disk,
    # a folder removed meanwhile) is one line and exit code 2. The outputs are replaced as one set
    # (``_write_set``).
    with (
        cli_errors(f"nothing was written to {out}"),
        progress_bars(
            "{task.description:<12}", to=err_console, disable=not err_console.is_terminal
        ) as progress,  # without a terminal, a plain line a minute
    ):
        bars: dict[str, int] = {}

        def advance(stage: str, done: int, total: int) -> None:
            if stage not in bars:
                bars[stage] = progress.add_task(stage, total=total)
            progress.update(bars[stage], completed=done)

        results = run(plan, jobs, advance)
    with cli_errors(f"while writing: nothing in {out} (or beside --docs) was replaced"):
        payload, figures = _write_set(results, out, docs, command, draw)
    s = payload["summary"]
    table = Table(
        "policy",
        "mean regret",
        "max regret",
        "gain over LRU",
        title=f"regret (points) over the {len(payload['mixes'])} mixes, seed {plan.seed}",
    )
    for name, v in s["policies"].items():
        table.add_row(
            name,
            f"{v['mean_regret_points']:z.2f}",
            f"{v['max_regret_points']:z.2f}",
            f"{v['mean_gain_over_lru_points']:+z.2f}",
        )
    console.print(table)
    paper = s["paper"]
    ties = f", {s['static_ties']} tied" if s["static_ties"] else ""
    console.print(
        f"LRU wins {s['lru_wins']}, S3-FIFO wins {s['s3fifo_wins']}{ties} "
        f"(paper: {paper['lru_wins']} / {paper['s3fifo_wins']}); "
        f"worst losses {_loss(s['lru_worst_loss_pct'])} / {_loss(s['s3fifo_worst_loss_pct'])} "
        f"(paper: {paper['lru_worst_loss_pct']} % / {paper['s3fifo_worst_loss_pct']} %)"
    )
    if s["saturated_runs"]:
        err_console.print(
            f"[yellow]warning:[/yellow] the modelled server was saturated in {s['saturated_runs']} of "
            f"{s['serve_runs']} serve-mode runs of the mixes (`saturated` in results.json)",
            highlight=False,
        )
    written = ", ".join(["results.json", "table1.csv", "results.md", *sorted(figures)])
    console.print(f"wrote {written} to {out} in {time.perf_counter() - started:z.0f} s")


def _write_set(
    results: Results, out: Path, docs: Path | None, command: str, draw: bool
) -> tuple[dict[str, Any], set[str]]:
    """Every output of the run as one set: written whole to a staging folder first (results.json,
    table1.csv, the figures, results.md, and with ``docs`` the report and copies of the figures and
    results.json beside it), then moved into place together (``atomic_paths``). A failure while
    writing (a figure that cannot be drawn, a full disk) or Ctrl-C replaces none of them: an earlier
    run's outputs stay together (an OS error in the middle of the final moves excepted:
    ``atomic_paths``). Returns results.json's payload and the figures' file names."""
    from wakman.experiments.figures import write_figures
    from wakman.experiments.report import render_markdown, write_table1
    from wakman.experiments.reproduce import write_outputs

    out.mkdir(parents=True, exist_ok=True)  # the staging folder sits in it: the outputs' file system
    with tempfile.TemporaryDirectory(prefix=".wakman-reproduce-", dir=out) as folder:
        staging = Path(folder)
        payload = write_outputs(results, staging)
        write_table1(payload, staging / "table1.csv")
        figures = {p.name for p in write_figures(payload, staging)} if draw else set()
        (staging / "results.md").write_text(render_markdown(payload, command, figures))
        # final path (absolute: one entry where --docs lands in --out) -> its staged file
        files = {
            Path(os.path.abspath(out / name)): staging / name
            for name in ("results.json", "table1.csv", *sorted(figures), "results.md")
        }
        if docs is not None:
            for name in (*sorted(figures), "results.json"):  # the figures and the data beside the report
                files[Path(os.path.abspath(docs.parent / name))] = staging / name
            (staging / "docs.md").write_text(render_markdown(payload, f"{command} --docs {docs}", figures))
            files[Path(os.path.abspath(docs))] = staging / "docs.md"
        with atomic_paths(*files) as targets:
            for staged, target in zip(files.values(), targets, strict=True):
                shutil.copyfile(staged, target)
    return payload, figures


def _loss(pct: float | None) -> str:
    """A worst loss in percent, or n/a where no mix has one (never behind, or the rival hit nothing)."""
    return "n/a" if pct is None else f"{pct:z.1f} %"
