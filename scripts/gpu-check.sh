#!/usr/bin/env bash
# wakman with vLLM on an NVIDIA GPU: the engine replay (lru = stock, the simulator within a point),
# `vllm serve` with async scheduling, and the CPU offload tier with wakman's policies
# (tests/test_vllm_gpu.py; docs/vllm.md shows runs). CI has no GPU, so these run only here.
#
#   scripts/gpu-check.sh [VENV]     install vLLM (VLLM_VERSION, default 0.34.0) and wakman into VENV
#                                   (default .venv-gpu), then run the checks
#   PYTHON=python scripts/gpu-check.sh   use an interpreter that already has vLLM and wakman
set -euo pipefail
VENV=$(realpath -m "${1:-$(dirname "$0")/../.venv-gpu}")  # a relative VENV: from the caller's folder
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  # wakman needs Python 3.11+ (Ubuntu 22.04's python3 is 3.10), its headers and a C++17 compiler
  # for its core
  BASE=$(for p in python3 python3.13 python3.12 python3.11; do
    command -v "$p" >/dev/null && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))' && { echo "$p"; break; }
  done || true)
  if [ -z "$BASE" ]; then
    echo "gpu-check: wakman needs Python 3.11 or later (python3 is $(python3 -V 2>&1)); install one" \
      "(e.g. apt install python3.11 python3.11-venv python3.11-dev) or set PYTHON to an interpreter with vLLM and wakman" >&2
    exit 2
  fi
  if ! command -v "${CXX:-c++}" >/dev/null; then
    echo "gpu-check: building wakman's core needs a C++17 compiler (e.g. apt install g++)" >&2
    exit 2
  fi
  "$BASE" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "vllm==${VLLM_VERSION:-0.34.0}" -e '.[test]'
  PYTHON=$VENV/bin/python
fi
"$PYTHON" - <<'PY'
import sys

import torch
import vllm

if not torch.cuda.is_available():
    sys.exit(f"gpu-check: torch {torch.__version__} sees no CUDA device; these checks need an NVIDIA GPU")
print(f"vLLM {vllm.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
PY
# the tests must see this release (VLLM_VERSION, else the one PYTHON imports), not another on the path
REQUIRE=${VLLM_VERSION:-$("$PYTHON" -c 'import vllm; print(vllm.__version__)')}
# one engine at a time: vLLM's start-up memory profiling fails when another process on the GPU frees
# memory meanwhile (seen with the four tests under pytest -n 4); -rA prints each test's figures
WAKMAN_REQUIRE_VLLM=$(echo "$REQUIRE" | cut -d. -f1,2) exec "$PYTHON" -m pytest -v -rA -p no:cacheprovider -m gpu --durations=0 \
  tests/test_vllm_gpu.py
