"""Type checks for numbers handed in from Python, TOML or JSON, shared by every validating caller.

``bool`` is an ``int`` in Python; none of wakman's counts, seconds or rates accept ``True``."""

from __future__ import annotations

import numbers


def is_real(value: object) -> bool:
    """A real number (int, float, numpy scalar), not a ``bool``; it may still be NaN or infinite."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_integer(value: object) -> bool:
    """An integral number (int, numpy integer), not a ``bool``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
