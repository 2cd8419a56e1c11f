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


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"wakman {version('wakman')}")
        raise typer.Exit()


@app.callback()
def main(
    _: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the installed version and exit."
    ),
) -> None:
    """Workload-aware KV-cache manager: policies, traces, simulation and adaptive eviction."""


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
