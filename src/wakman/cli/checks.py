"""Flag checks, made before any work starts and naming the flag:

- ``check_numbers`` and ``parse_ints``: numeric flags; an integer flag is at most ``INT_MAX``
  (2**63 - 1, the core's 64-bit counts) unless a check gives its own bound (cache sizes:
  ``MAX_BLOCKS``); ``parse_names``: a list of known names.
- ``check_output`` / ``check_output_dir`` / ``check_plot``: an output path that cannot be written
  (or a figure without matplotlib) is refused. Every writer then writes through
  ``wakman.traces.io``'s ``atomic_path`` / ``atomic_paths`` / ``atomic_output``: all or nothing.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from wakman.experiments.plots import FORMATS as PLOT_FORMATS
from wakman.policies import MAX_CAPACITY

PLOT_EXTRA = "pip install 'wakman[plot]'"
INT_MAX = 2**63 - 1  # the largest count (requests, tokens) the core's 64-bit integers hold
# the largest cache (blocks): the core's (its node slots are 32-bit), beyond any GPU's memory
MAX_BLOCKS = MAX_CAPACITY


def _shown(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def check_numbers(*checks: tuple[str, float | None, str] | tuple[str, float | None, str, float]) -> None:
    """Each ``(flag, value, rule)`` or ``(flag, value, rule, most)``, rule ``>N`` or ``>=N`` (``>0``,
    ``>=1``, ``>=0.001``): a value that breaks its rule, is not finite, or is above ``most`` (for an
    integer, by default ``INT_MAX``) is a ``ValueError`` naming the flag; ``None`` (flag not given)
    passes."""
    for flag, value, rule, *most in checks:
        if value is None:
            continue
        op = ">=" if rule.startswith(">=") else ">"
        least = float(rule[len(op) :])
        bound = most[0] if most else INT_MAX if isinstance(value, int) else None
        if not (isinstance(value, int) or math.isfinite(value)):
            at_most = f" and at most {_shown(bound)}" if bound is not None else ""
            raise ValueError(
                f"{flag} must be a finite number {op} {rule[len(op) :]}{at_most}, got {_shown(value)}"
            )
        if not (value >= least if op == ">=" else value > least):
            raise ValueError(f"{flag} must be {op} {rule[len(op) :]}, got {_shown(value)}")
        if bound is not None and value > bound:
            raise ValueError(f"{flag} must be at most {_shown(bound)}, got {_shown(value)}")


def parse_ints(text: str, flag: str, minimum: int = 1, maximum: int = INT_MAX) -> list[int]:
    """A comma-separated list of integers in [``minimum``, ``maximum``] (at least one), or a
    ``ValueError`` naming the flag and the bad item."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ValueError(f"{flag} needs at least one integer, got {text!r}")
    values = []
    for item in items:
        try:
            value = int(item.replace("_", ""))
        except ValueError:
            raise ValueError(f"{flag}: {item!r} is not an integer") from None
        if value < minimum:
            raise ValueError(f"{flag}: {value} must be >= {minimum}")
        if value > maximum:
            raise ValueError(f"{flag}: {value} must be at most {maximum:,}")
        values.append(value)
    return values


def parse_names(text: str, flag: str, known: Iterable[str]) -> list[str]:
    """A comma-separated list of names from ``known`` (at least one; repeats dropped, order kept), or
    a ``ValueError`` naming the flag and the unknown name: checked before any work starts."""
    known = tuple(known)
    names = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not names:
        raise ValueError(f"{flag} needs at least one name, got {text!r}")
    for name in names:
        if name not in known:
            raise ValueError(f"{flag}: unknown name {name!r}; choose from {', '.join(known)}")
    return names


def _writable_dir(path: Path, flag: str, shown: Path) -> None:
    """``path`` (or its nearest existing parent, which will hold it) is a folder we can create in."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{flag} {shown}: {probe} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {shown}: cannot write in {probe} ({exc.strerror})") from None


def check_output(path: Path | None, flag: str) -> None:
    """Before the work: ``path`` can be written as a file (``atomic_path`` will write it), else a
    ``ValueError`` naming ``flag``. ``None`` (no output asked for) passes."""
    if path is None:
        return
    if path.is_dir():
        raise ValueError(f"{flag} {path}: is a folder, not a file")
    if path.exists() and not path.is_file():  # a device or FIFO: written in place
        if not os.access(path, os.W_OK):
            raise ValueError(f"{flag} {path}: not writable")
        return
    _writable_dir(path.parent, flag, path)


def can_plot() -> bool:
    """matplotlib (the ``plot`` extra) is installed: a spec look-up, nothing imported."""
    import importlib.util

    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        return False


def check_plot(path: Path | None, flag: str = "--plot") -> None:
    """Before the work: a figure can be drawn (matplotlib) and written to ``path`` (``check_output``)
    in the format its extension names (``wakman.experiments.plots.FORMATS``; none, or a device or
    FIFO: PNG)."""
    if path is None:
        return
    suffix = path.suffix.lower().lstrip(".")
    if suffix and suffix not in PLOT_FORMATS and not (path.exists() and not path.is_file()):
        raise ValueError(
            f"{flag} {path}: .{suffix} is not a figure format; end the name in "
            f"{', '.join('.' + f for f in PLOT_FORMATS)} (no extension: PNG)"
        )
    if not can_plot():
        raise ValueError(f"{flag} needs matplotlib: {PLOT_EXTRA}")
    check_output(path, flag)


def check_output_dir(path: Path | None, flag: str) -> None:
    """Before the work: ``path`` is, or can be made, a folder we can write files in."""
    if path is not None:
        _writable_dir(path, flag, path)
