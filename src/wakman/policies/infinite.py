"""Infinite: the ceiling. Never evicts; every key once seen stays resident.

``capacity`` (1 to 2**30, as for every policy) is checked for a uniform interface and otherwise
ignored: the plain-cache driver never evicts.
``evict`` raises ``NoEvictableKey``: a pool using this policy must itself be unbounded.
"""

from __future__ import annotations

from wakman import _core


class Infinite(_core.Infinite):
    name = "infinite"
