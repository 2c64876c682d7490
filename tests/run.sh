#!/usr/bin/env bash
# The test command: lint, format check, then the CPU test suite (GPU tests skip without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m pytest -q -p no:cacheprovider "$@"
