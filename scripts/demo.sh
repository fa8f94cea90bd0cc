#!/usr/bin/env bash
# Set up if needed, then run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m luminal.examples.demo "$@"
