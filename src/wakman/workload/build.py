"""One call from a preset, a mix and overrides to the requests of a workload."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from wakman.traces.model import Request
from wakman.workload.config import WorkloadConfig, load_config
from wakman.workload.generator import WorkloadGenerator
from wakman.workload.presets import get_preset


def build_config(
    mix: Sequence[float] | None = None,
    preset: str | None = None,
    config_path: str | Path | None = None,
    overrides: dict[str, str] | None = None,
    duration_s: float | None = None,
    rate: float | None = None,
) -> WorkloadConfig:
    """Defaults (or ``config_path``), then the preset's mix and overrides, then ``overrides``, then the
    explicit arguments (``mix``, ``duration_s``, ``rate``), each replacing what came before."""
    settings: dict[str, str] = {}
    if preset is not None:
        p = get_preset(preset)
        settings["mix"] = str(list(p.mix))
        settings.update(p.overrides)
    settings.update(overrides or {})
    if mix is not None:
        settings["mix"] = str([float(x) for x in mix])
    if duration_s is not None:
        settings["duration_s"] = str(float(duration_s))
    if rate is not None:
        settings["rate"] = str(float(rate))
    return load_config(config_path, settings)


def generate_requests(config: WorkloadConfig, seed: int = 0) -> list[Request]:
    return list(WorkloadGenerator(config, seed=seed).requests())
