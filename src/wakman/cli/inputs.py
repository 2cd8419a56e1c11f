"""A command's inputs beyond plain flags: a trace read by the shared ``--format/--block-size/
--rate/--seed`` options (``open_trace``: a trace without requests is an error naming the file), and
session mode's options (``session_mode``, ``require_session_ids``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from wakman.adaptive.config import AdaptiveConfig

from wakman.cli.checks import check_numbers
from wakman.cli.console import err_console
from wakman.traces import detect_format, read_trace
from wakman.traces.formats import check_format
from wakman.traces.model import MAX_BLOCK_SIZE, Request

FormatOption = typer.Option(None, "--format", "-f", help="Trace format (detected when omitted).")
BlockSizeOption = typer.Option(
    None, "--block-size", help="Tokens per block for formats without it (mooncake 512, bailian 16)."
)
RateOption = typer.Option(
    None, "--rate", help="kv-cache-tester: new conversations per second (default 1/60), Poisson, seeded."
)
FORMATS_WITHOUT_BLOCK_SIZE = ("mooncake", "aiperf-sessions", "bailian")  # --block-size sets theirs
SeedOption = typer.Option(None, "--seed", help="kv-cache-tester: seed of the conversation arrival process.")


def open_trace(
    path: Path,
    fmt: str | None,
    block_size: int | None = None,
    rate: float | None = None,
    seed: int | None = None,
) -> Iterator[Request]:
    """Stream ``path``'s requests (format detected when ``fmt`` is None); the shared options are
    checked first, and a trace without requests is a ``ValueError`` naming the file."""
    check_numbers(
        ("--block-size", block_size, ">=1", MAX_BLOCK_SIZE), ("--rate", rate, ">0"), ("--seed", seed, ">=0")
    )
    check_format(fmt, "--format")
    name = fmt or detect_format(path)
    options: dict[str, object] = {}
    if block_size is not None:
        if name not in FORMATS_WITHOUT_BLOCK_SIZE:
            raise ValueError(f"--block-size does not apply to {name} traces (they carry their block size)")
        options["block_size"] = block_size
    if rate is not None or seed is not None:
        if name != "kv-cache-tester":
            raise ValueError("--rate/--seed apply to kv-cache-tester traces only")
        if rate is not None:
            options["rate"] = rate
        if seed is not None:
            options["seed"] = seed
    return _checked(read_trace(path, name, **options), path)


def _checked(requests: Iterator[Request], path: Path) -> Iterator[Request]:
    """``requests`` unchanged; none at all is a ValueError naming the file. The first request with
    fewer block keys than its prompt's full blocks gets one notice on stderr, as it is read (every
    command that reads a trace, however much of it: a block size too small for the trace's ids
    makes every prompt miss); ``stats`` counts them all (``short_keyed_requests``)."""
    total = 0
    noticed = False
    for req in requests:
        total += 1
        if not noticed and req.short_keyed:
            noticed = True
            err_console.print(
                f"[yellow]notice:[/yellow] request {total:,} has {len(req.block_keys):,} block keys for "
                f"{req.prompt_tokens // req.block_size:,} full blocks of {req.block_size} tokens: the rest "
                "of such a prompt can never hit. Fine for prefix-only rows (AIPerf); if the trace's ids "
                "cover whole prompts, the block size it was read with is wrong (--block-size)",
                highlight=False,
            )
        yield req
    if not total:
        raise ValueError(f"{path}: the trace has no requests")


def session_mode(
    policy: str, sessions: bool, ends_after_s: float | None, ends_flag: str = "--session-ends-after-s"
) -> tuple[str | AdaptiveConfig, dict[str, Any]]:
    """What to run for ``--policy`` with ``--sessions`` and ``ends_flag`` (``ends_after_s``: seconds
    after a session's last request is done, None: no ends told): the policy (a preset with its
    chain-lru in session mode) and the simulation's session options; a ValueError naming the flag
    for a policy without a session mode."""
    from wakman.adaptive.config import ADAPTIVE_PRESETS, SESSION_POLICY

    check_numbers((ends_flag, ends_after_s, ">=0"))
    if not sessions:
        if ends_after_s is not None:
            raise ValueError(f"{ends_flag} needs --sessions (only session mode hears ends)")
        return policy, {}
    options: dict[str, Any] = {"session_ends_after_s": ends_after_s}
    if policy in ADAPTIVE_PRESETS:
        try:
            return ADAPTIVE_PRESETS[policy].with_sessions(), options
        except ValueError as exc:
            raise ValueError(f"--sessions: {exc}") from None
    if policy != SESSION_POLICY:
        raise ValueError(f"--sessions: {SESSION_POLICY} (or wakman-plus) has a session mode, not {policy}")
    return policy, {**options, "policy_params": {"sessions": True}}


def require_session_ids(trace: Path, requests: Iterable[Request]) -> None:
    """``--sessions`` on a trace whose requests carry no session id is a ValueError naming it."""
    if all(r.session_id is None for r in requests):
        raise ValueError(f"--sessions: {trace} has no session ids (a session_id per request)")
