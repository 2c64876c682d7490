#!/usr/bin/env bash
# The test command: lint, format check, then the CPU test suite (GPU tests skip without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m ruff check memopt passes tests benchmarks
python3 -m ruff format --check memopt passes tests benchmarks
python3 -m pytest -q -p no:cacheprovider --durations=40 "$@"
