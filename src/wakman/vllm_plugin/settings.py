"""The plugin's options: one place, environment variables (read in every vLLM process).

| variable | default | meaning |
|---|---|---|
| ``WAKMAN_POLICY`` | ``lru`` | a static policy (``lru`` ... ``chain-lru``), ``wakman`` or ``wakman-plus`` |
| ``WAKMAN_INTERVAL_S`` | preset's (900 / 30) | seconds between decisions |
| ``WAKMAN_WINDOW_S`` | preset's | seconds of recent traffic each decision replays |
| ``WAKMAN_CANDIDATES`` | preset's | comma-separated candidate policies |
| ``WAKMAN_HYSTERESIS`` | preset's (0 / 2) | points of hit rate the best shadow must beat the live one by |
| ``WAKMAN_REPLAY`` | ``thread`` | ``thread`` (background replays) or ``inline`` (reproducible); offload too |
| ``WAKMAN_SESSIONS`` | ``0`` | ``1``: chain-lru follows vLLM's session ids and ends (``sessions.py``) |
| ``WAKMAN_METRICS_DIR`` | set by the plugin | where the engine publishes its state for ``/metrics`` |

Environment variables reach the engine-core processes vLLM spawns, and work the same for
``vllm serve`` and ``LLM(...)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from wakman.adaptive.config import ADAPTIVE_PRESETS, SESSION_POLICY, AdaptiveConfig
from wakman.policies import SERVABLE_POLICIES

STATIC_POLICIES = SERVABLE_POLICIES
REPLAY_MODES = ("thread", "inline")
ADAPTIVE_VARS = ("WAKMAN_INTERVAL_S", "WAKMAN_WINDOW_S", "WAKMAN_CANDIDATES", "WAKMAN_HYSTERESIS")
# the variable that sets each AdaptiveConfig field (its errors name the field)
FIELD_VARS = {
    "interval_s": "WAKMAN_INTERVAL_S",
    "first_decision_s": "WAKMAN_INTERVAL_S",
    "window_s": "WAKMAN_WINDOW_S",
    "hysteresis": "WAKMAN_HYSTERESIS",
    "candidates": "WAKMAN_CANDIDATES",
}


class SettingsError(ValueError):
    """A WAKMAN_* environment variable has a value the plugin cannot use."""


@dataclass(frozen=True)
class PluginSettings:
    policy: str = "lru"
    adaptive: AdaptiveConfig | None = None
    replay: str = "thread"
    sessions: bool = False  # chain-lru in session mode, told each request's session id and the ends

    @property
    def start_policy(self) -> str:
        return self.adaptive.start_policy if self.adaptive else self.policy

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PluginSettings:
        env = os.environ if env is None else env
        policy = env.get("WAKMAN_POLICY", "").strip().lower() or "lru"  # set but empty: unset
        replay = replay_mode_from_env(env)
        sessions = _sessions(env)
        if policy in STATIC_POLICIES:
            extra = [k for k in ADAPTIVE_VARS if _value(env, k)]
            if extra:
                raise SettingsError(f"{', '.join(extra)} only apply to wakman / wakman-plus, not {policy}")
            if sessions and policy != SESSION_POLICY:
                raise SettingsError(
                    f"WAKMAN_SESSIONS=1 needs {SESSION_POLICY} or a preset with it, not {policy}"
                )
            return cls(policy=policy, replay=replay, sessions=sessions)
        if policy not in ADAPTIVE_PRESETS:
            choices = ", ".join((*STATIC_POLICIES, *ADAPTIVE_PRESETS))
            raise SettingsError(f"WAKMAN_POLICY={policy!r}: choose one of {choices}")
        config = ADAPTIVE_PRESETS[policy]
        changes: dict[str, object] = {}
        for var, field in (("WAKMAN_INTERVAL_S", "interval_s"), ("WAKMAN_WINDOW_S", "window_s")):
            if _value(env, var):
                try:
                    changes[field] = float(_value(env, var))  # its bounds are AdaptiveConfig's, checked below
                except ValueError:
                    raise SettingsError(f"{var}={env[var]!r} is not a number of seconds") from None
        if _value(env, "WAKMAN_HYSTERESIS"):
            try:
                points = float(_value(env, "WAKMAN_HYSTERESIS"))
            except ValueError:
                raise SettingsError(
                    f"WAKMAN_HYSTERESIS={env['WAKMAN_HYSTERESIS']!r} is not a number of points"
                ) from None
            if not 0 <= points < 100:
                raise SettingsError(f"WAKMAN_HYSTERESIS must be in [0, 100) points, got {points}")
            changes["hysteresis"] = points / 100
        if "interval_s" in changes:
            changes["first_decision_s"] = changes["interval_s"]
            changes.setdefault("window_s", changes["interval_s"] if policy == "wakman" else config.window_s)
        if _value(env, "WAKMAN_CANDIDATES"):
            names = tuple(n.strip().lower() for n in env["WAKMAN_CANDIDATES"].split(",") if n.strip())
            bad = [n for n in names if n not in STATIC_POLICIES]
            if bad or len(names) < 2 or len(set(names)) != len(names):
                raise SettingsError(
                    f"WAKMAN_CANDIDATES={env['WAKMAN_CANDIDATES']!r}: give two or more distinct names of "
                    f"{', '.join(STATIC_POLICIES)}"
                )
            changes["candidates"] = names
            if config.start_policy not in names:
                changes["start_policy"] = names[0]
        try:
            config = config.with_options(**changes)
        except ValueError as exc:  # AdaptiveConfig's message names its field: name the variable too
            var = FIELD_VARS.get(str(exc).split(" ", 1)[0])
            shown = f"{var}={env[var]!r}" if var is not None and var in env else "WAKMAN_*"
            raise SettingsError(f"{shown}: {exc}") from None
        if sessions:
            try:
                config = config.with_sessions()
            except ValueError as exc:
                raise SettingsError(f"WAKMAN_SESSIONS=1: {exc}") from None
        return cls(policy=policy, adaptive=config, replay=replay, sessions=sessions)


def _value(env: Mapping[str, str], var: str) -> str:
    """``var``'s value, stripped: set but empty (or blank) is unset, as for every ``WAKMAN_*``."""
    return env.get(var, "").strip()


def replay_mode_from_env(env: Mapping[str, str] | None = None) -> str:
    """``WAKMAN_REPLAY``: ``thread`` (the default, also when set but empty) or ``inline``
    (``SettingsError`` otherwise). The GPU pool's runtime and the offload tier's adaptive classes
    read it."""
    env = os.environ if env is None else env
    replay = env.get("WAKMAN_REPLAY", "").strip().lower() or "thread"
    if replay not in REPLAY_MODES:
        raise SettingsError(f"WAKMAN_REPLAY={replay!r}: choose {' or '.join(REPLAY_MODES)}")
    return replay


def _sessions(env: Mapping[str, str]) -> bool:
    value = env.get("WAKMAN_SESSIONS", "").strip() or "0"
    if value not in ("0", "1"):
        raise SettingsError(f"WAKMAN_SESSIONS={value!r}: 1 (follow vLLM's session ids) or 0")
    return value == "1"


OFFLOAD_VAR = "WAKMAN_OFFLOAD_POLICY"


def offload_policy_from_env(env: Mapping[str, str] | None = None) -> str:
    """The CPU offload tier's policy (``WakmanPolicy``): ``WAKMAN_OFFLOAD_POLICY``, ``lru`` when
    unset or empty, else one of the servable policies and adaptive presets (``SettingsError``)."""
    env = os.environ if env is None else env
    name = env.get(OFFLOAD_VAR, "").strip().lower() or "lru"
    choices = (*STATIC_POLICIES, *ADAPTIVE_PRESETS)
    if name not in choices:
        raise SettingsError(f"{OFFLOAD_VAR}={name!r}: choose one of {', '.join(choices)}")
    return name
