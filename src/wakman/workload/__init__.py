"""Synthetic workloads: single-turn, multi-turn and agentic sessions, generated at the token level."""

from wakman.workload.build import build_config, generate_requests
from wakman.workload.config import WorkloadConfig, load_config
from wakman.workload.generator import WorkloadGenerator
from wakman.workload.presets import ABLATIONS, MIXES, PRESETS, get_preset

__all__ = [
    "ABLATIONS",
    "MIXES",
    "PRESETS",
    "WorkloadConfig",
    "WorkloadGenerator",
    "build_config",
    "generate_requests",
    "get_preset",
    "load_config",
]
