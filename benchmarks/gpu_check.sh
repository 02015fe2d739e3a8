#!/usr/bin/env bash
# The GPU path in one short run (< 4 minutes on one GPU); see benchmarks/gpu_check.py.
#   bash benchmarks/gpu_check.sh                 # on a GPU machine
#   bash benchmarks/gpu_check.sh --cpu-smoke     # anywhere, toy sizes, to check the script
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
exec timeout 240 "$PYTHON" -m benchmarks.gpu_check "$@"
