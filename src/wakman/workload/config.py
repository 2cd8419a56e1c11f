"""The workload configuration: one documented, versioned TOML file (``default.toml``) and overrides.

``load_config(path=None, overrides={"agentic.turns.median": "8"})`` reads the bundled defaults (or a
user's copy), applies dotted ``key=value`` overrides, validates, and returns ``WorkloadConfig``.
"""

from __future__ import annotations

import math
import tomllib
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal, get_args, get_type_hints

import msgspec

from wakman.traces.model import MAX_ARRIVAL_S, MAX_BLOCK_SIZE  # what the readers accept

CONFIG_VERSION = 1
DEFAULT_CONFIG = Path(str(files("wakman.workload") / "default.toml"))
PROFILES = ("single-turn", "multi-turn", "agentic")
MIX_TOLERANCE = 1e-6  # how far the mix's fractions may sum from 1
MAX_REQUESTS = 2**32 - 1  # rate times span: the simulator numbers requests with 32 bits
MAX_CATALOG = 10**7  # catalog prompts of a profile (one probability each)
MAX_VOCAB = 2**31  # token ids are int32
SECTIONS = ("single_turn", "multi_turn", "agentic")
# A log-normal law's bounds, by what it draws (a key's last part: ``*_s`` seconds, ``turns`` a
# session's turn count, any other tokens). Token lengths and turn counts need a finite ``max``: a
# drawn length is an array of that many token ids (4 bytes each), a turn count a loop.
MAX_LENGTH = 2**24  # tokens in one drawn length (64 MB of token ids)
MAX_TURNS = 100_000
MAX_SIGMA = 10.0  # past it exp(N(.)) spans more than any float: e^(10 * 8.3) at the 1e-16 quantile


def check_mix(fractions: list[float], name: str) -> None:
    """A mix is three session fractions (single-turn, multi-turn, agentic), each in [0, 1], summing to
    1 within ``MIX_TOLERANCE``: else a ValueError naming ``name`` (the config key, or ``--mix``)."""
    if len(fractions) != 3 or not all(0 <= f <= 1 for f in fractions):
        raise ValueError(f"{name} needs three fractions in [0, 1] (single, multi, agentic), got {fractions}")
    total = sum(fractions)
    if not abs(total - 1) <= MIX_TOLERANCE:
        raise ValueError(
            f"{name} {fractions} sums to {total:.6g}; the fractions must sum to 1 (within {MIX_TOLERANCE:g})"
        )


class LogNormal(msgspec.Struct, forbid_unknown_fields=True):
    """exp(N(ln(median), sigma^2)), clipped to [min, max]."""

    median: float
    sigma: float
    min: float = 0.0
    max: float = float("inf")

    def check(self, name: str) -> None:
        """``name`` is the TOML key (``multi_turn.turns``); its last part says what is drawn."""
        most, unit = _law_bound(name)
        if not (
            math.isfinite(self.median)
            and self.median > 0
            and 0 <= self.sigma <= MAX_SIGMA
            and math.isfinite(self.min)
            and 0 <= self.min <= self.median <= self.max
        ):
            raise ValueError(
                f"{name}: need finite median > 0, sigma in [0, {MAX_SIGMA:g}], finite min and "
                f"0 <= min <= median <= max (a log-normal law draws positive values), got {self}"
            )
        if most is not None and not self.max <= most:
            raise ValueError(f"{name}: max must be finite and at most {most:,} {unit}, got {self.max:g}")


def _law_bound(name: str) -> tuple[int | None, str]:
    """The largest ``max`` a law may have, by its key, and the unit: none for seconds."""
    last = name.rsplit(".", 1)[-1]
    if last.endswith("_s"):
        return None, "seconds"
    return (MAX_TURNS, "turns") if last == "turns" else (MAX_LENGTH, "tokens")


class SingleTurn(msgspec.Struct, forbid_unknown_fields=True):
    catalog_size: int
    zipf_s: float
    zipf_q: float
    fixed_prompt: LogNormal
    payload: LogNormal
    output: LogNormal


class MultiTurn(msgspec.Struct, forbid_unknown_fields=True):
    system_catalog_size: int
    system_zipf_s: float
    system_zipf_q: float
    system_prompt: LogNormal
    user_prefix: LogNormal
    turns: LogNormal
    message: LogNormal
    output: LogNormal
    gap_s: LogNormal


class Agentic(msgspec.Struct, forbid_unknown_fields=True):
    system_catalog_size: int
    system_zipf_s: float
    system_zipf_q: float
    system_prompt: LogNormal
    task: LogNormal
    turns: LogNormal
    tool_result: LogNormal
    output: LogNormal
    gap_s: LogNormal
    long_call_probability: float
    long_call_s: LogNormal


class WorkloadConfig(msgspec.Struct, forbid_unknown_fields=True):
    version: int
    rate: float
    duration_s: float
    warmup_s: float | Literal["auto"]  # seconds; "auto": the generator's steady_warmup_s
    mix: list[float]
    block_size: int
    vocab_size: int
    hash: str
    hash_seed: str
    single_turn: SingleTurn
    multi_turn: MultiTurn
    agentic: Agentic

    def validate(self) -> WorkloadConfig:
        if self.version != CONFIG_VERSION:
            raise ValueError(f"workload config version {self.version} is not {CONFIG_VERSION}")
        self.check_span(0.0 if self.warmup_s == "auto" else self.warmup_s)
        check_mix(self.mix, "mix")
        if not 1 <= self.block_size <= MAX_BLOCK_SIZE or not 2 <= self.vocab_size <= MAX_VOCAB:
            raise ValueError(
                f"block_size must be in [1, {MAX_BLOCK_SIZE:,}] tokens (the readers' bound) and vocab_size "
                f"in [2, {MAX_VOCAB:,}] (int32 token ids); got {self.block_size}, {self.vocab_size}"
            )
        if self.hash not in ("fast", "sha256"):
            raise ValueError(f"hash must be 'fast' or 'sha256', got {self.hash!r}")
        for name, size in (
            ("single_turn.catalog_size", self.single_turn.catalog_size),
            ("multi_turn.system_catalog_size", self.multi_turn.system_catalog_size),
            ("agentic.system_catalog_size", self.agentic.system_catalog_size),
        ):
            if not 1 <= size <= MAX_CATALOG:
                raise ValueError(f"{name} must be in [1, {MAX_CATALOG:,}], got {size}")
        st, mt, ag = self.single_turn, self.multi_turn, self.agentic
        for prefix, (s, q, n) in (
            ("single_turn.", (st.zipf_s, st.zipf_q, st.catalog_size)),
            ("multi_turn.system_", (mt.system_zipf_s, mt.system_zipf_q, mt.system_catalog_size)),
            ("agentic.system_", (ag.system_zipf_s, ag.system_zipf_q, ag.system_catalog_size)),
        ):
            _check_zipf(prefix, s, q, n)
        for section_name in SECTIONS:
            section = getattr(self, section_name)
            for name in section.__struct_fields__:
                value = getattr(section, name)
                if isinstance(value, LogNormal):
                    value.check(f"{section_name}.{name}")
        if not 0 <= self.agentic.long_call_probability <= 1:
            raise ValueError("agentic.long_call_probability must lie in [0, 1]")
        return self

    def check_span(self, warmup_s: float) -> None:
        """The arrival window ``[-warmup_s, duration_s)`` (seconds) and its expected requests are
        within the readers' bounds (the generator checks an "auto" warm-up once it is resolved)."""
        if not (self.rate > 0 and self.duration_s > 0 and warmup_s >= 0):
            raise ValueError(
                f'rate (--rate) and duration_s (--duration) must be > 0 and warmup_s >= 0 (or "auto"); got '
                f"{self.rate:g}, {self.duration_s:g}, "
                + ('"auto"' if self.warmup_s == "auto" and warmup_s == 0 else f"{warmup_s:g}")
            )
        span = warmup_s + self.duration_s
        if not span <= MAX_ARRIVAL_S:
            raise ValueError(
                f"warmup_s + duration_s (--duration) must be at most {MAX_ARRIVAL_S:g} s (ten years); got "
                f"{warmup_s:.6g} + {self.duration_s:.6g} s"
            )
        if self.rate * span > MAX_REQUESTS:
            raise ValueError(
                f"rate (--rate) {self.rate:g}/s over warmup_s + duration_s (--duration) {span:g} s makes "
                f"{self.rate * span:.3g} requests; at most {MAX_REQUESTS:,}"
            )

    def to_toml_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


_MAX_WEIGHT_LOG = 700.0  # |log| of a Zipf weight, and of its power: exp(709) overflows a float


def _check_zipf(prefix: str, s: float, q: float, n: int) -> None:
    """A catalog of ``n`` prompts under Zipf-Mandelbrot, rank k's weight 1 / (k + q) ** s for
    k = 1..n, needs every weight positive and finite, and (k + q) ** s too (the generator computes
    it): s >= 0 and q > -1, both finite, and s * log(k + q) within +-700 at both ends, k = 1 and n
    (it is monotone in k)."""
    ok = math.isfinite(s) and s >= 0 and math.isfinite(q) and q > -1
    if ok:
        ok = all(abs(s * math.log(k + q)) <= _MAX_WEIGHT_LOG for k in (1, n))
    if not ok:
        raise ValueError(
            f"{prefix}zipf_s and {prefix}zipf_q: rank k's weight is 1 / (k + q) ** s, so s must be >= 0 "
            f"and q > -1 (finite), with every rank's weight of the {n:,} catalog prompts positive and "
            f"finite (|s * ln(k + q)| <= {_MAX_WEIGHT_LOG:g}); got s = {s:g}, q = {q:g}"
        )


@cache
def _default_tree() -> dict[str, Any]:
    return tomllib.loads(DEFAULT_CONFIG.read_text(encoding="utf-8"))


def _set_dotted(tree: dict[str, Any], dotted: str, raw: str) -> None:
    """Set key ``dotted`` (a key of the bundled config; sections a user's file lacks are made) to
    ``raw`` read as a TOML value (or, failing that, a bare string)."""
    parts = dotted.split(".")
    node, known = tree, _default_tree()
    for part in parts[:-1]:
        if not isinstance(known.get(part), dict):
            raise ValueError(f"--set {dotted}: no section {part!r}")
        known, node = known[part], node.setdefault(part, {})
        if not isinstance(node, dict):
            return  # the file holds a value here, not a section: reading the file says so
    if parts[-1] not in known:
        raise ValueError(f"--set {dotted}: unknown key {parts[-1]!r}")
    try:
        node[parts[-1]] = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        node[parts[-1]] = raw  # a bare string
    value, kinds = node[parts[-1]], _field_kinds(parts)
    if isinstance(value, int) and not isinstance(value, bool) and float in kinds and int not in kinds:
        node[parts[-1]] = float(value)
    elif isinstance(value, int | float) and kinds == {str}:
        node[parts[-1]] = raw  # a string key given a number (hash_seed=0): its text


def _field_kinds(parts: list[str]) -> set[Any]:
    """The types a config key's value may take, from WorkloadConfig's annotations (a Literal counts
    as its values' type; an unknown path: none)."""
    kind: Any = WorkloadConfig
    for part in parts:
        hints = get_type_hints(kind) if isinstance(kind, type) and issubclass(kind, msgspec.Struct) else {}
        if part not in hints:
            return set()
        kind = hints[part]
    out: set[Any] = set()
    for k in get_args(kind) or (kind,):
        out |= {type(v) for v in get_args(k)} if getattr(k, "__origin__", None) is Literal else {k}
    return out


def load_config(path: str | Path | None = None, overrides: dict[str, str] | None = None) -> WorkloadConfig:
    source = Path(path) if path else DEFAULT_CONFIG
    try:
        tree = tomllib.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{source}: cannot read workload config ({exc})") from exc
    overrides = overrides or {}
    for key, value in overrides.items():
        _set_dotted(tree, key, value)
    try:
        return msgspec.convert(tree, WorkloadConfig, strict=False).validate()
    except msgspec.ValidationError as exc:
        # a value that came from an override is blamed on it, not on the file
        where = str(exc).split("at `$.", 1)[1].rstrip("`") if "at `$." in str(exc) else ""
        for key, value in overrides.items():
            if where == key or where.startswith((f"{key}.", f"{key}[")):
                raise ValueError(f"--set {key}={value}: {exc}") from exc
        raise ValueError(f"{source}: {exc}") from exc
