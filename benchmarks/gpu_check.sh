#!/usr/bin/env bash
# The GPU path in one short run (about 10 minutes on one GPU):
#   1. benchmarks/gpu_check.py: bf16-mixed fit throughput (plain vs smoothness), attack vs bare loop;
#   2. bench_step_224 on CUDA under bf16 autocast: ResNet-18/50 at 224 x 224, batch 32, plain vs
#      the every-map recipe of configs/imagefolder_resnet18_every_map.yaml and its levers;
#   3. bench_eval_224 on CUDA: seconds per image of `robust-train evaluate` at 224 x 224 per
#      explainer, the default settings (attack ensemble) and the fast preset.
# Results: benchmarks/gpu_check_results.{json,md}, runs/benchmarks/{bench_step_224,bench_eval_224}_cuda.json
#   and the records benchmarks/results/{bench_step_224,bench_eval_224}_cuda.json (RESULTS.md)
# and benchmarks/RESULTS.md (appended).
#   bash benchmarks/gpu_check.sh                 # on a GPU machine; without one: skipped, exit 0
#   bash benchmarks/gpu_check.sh --cpu-smoke     # anywhere, toy sizes, to check the script
# GPU_CHECK_DRY_RUN=1 prints each command instead of running it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"

run() {
  if [[ -n "${GPU_CHECK_DRY_RUN:-}" ]]; then
    echo "+ $*"
  else
    "$@"
  fi
}

if [[ "${1:-}" == "--cpu-smoke" ]]; then
  run timeout 240 "$PYTHON" -m benchmarks.gpu_check "$@"
  run timeout 240 "$PYTHON" -m benchmarks run bench_step_224 --quick --no-write \
    --variants "every-map recipe"
  run timeout 240 "$PYTHON" -m benchmarks run bench_eval_224 --quick --no-write --presets fast
  exit 0
fi

if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: no CUDA device, skipped (bash benchmarks/gpu_check.sh --cpu-smoke checks the script)"
  exit 0
fi

run timeout 240 "$PYTHON" -m benchmarks.gpu_check "$@"
run timeout 300 "$PYTHON" -m benchmarks run bench_step_224 --device cuda --precision bf16 \
  --batch 32 --threads 4 --json runs/benchmarks/bench_step_224_cuda.json
run timeout 300 "$PYTHON" -m benchmarks run bench_eval_224 --device cuda --presets default fast \
  --images 2 --threads 4 --json runs/benchmarks/bench_eval_224_cuda.json
