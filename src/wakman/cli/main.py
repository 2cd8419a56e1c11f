"""The `wakman` command line."""

from __future__ import annotations

import typer

from wakman.cli import advise, generate, policies, replay, reproduce, simulate, traces

app = typer.Typer(
    name="wakman",
    help="Workload-aware KV-cache manager: policies, traces, simulation and adaptive eviction.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("reproduce")(reproduce.reproduce)
app.command("policies")(policies.policies)
app.command("shadow")(policies.shadow)
app.command("stats")(traces.stats)
app.command("convert")(traces.convert)
app.command("generate")(generate.generate)
app.command("simulate")(simulate.simulate)
app.command("sweep")(simulate.sweep)
app.command("replay")(replay.replay)
app.command("advise")(advise.advise)

if __name__ == "__main__":  # pragma: no cover
    app()
