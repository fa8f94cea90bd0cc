#!/usr/bin/env bash
# Set up if needed, then lint, check formatting and run the test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check luminal tests bench
.venv/bin/ruff format --check luminal tests bench
.venv/bin/python -m pytest -n 2 "$@"
