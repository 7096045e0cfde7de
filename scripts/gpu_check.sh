#!/usr/bin/env bash
# One call on the GPU machine: build, GPU tests, CPU suite, demo. Logs under $OUT; short table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/trident-gpu}"; mkdir -p "$OUT"
export TRIDENT_CACHE_DIR="$(mktemp -d)" PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install -q --no-build-isolation -e . >"$OUT/build.log" 2>&1; build=$?
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" >>"$OUT/gpu.txt" 2>&1
python3 -m pytest tests -q -p no:cacheprovider -m gpu -W ignore::FutureWarning >"$OUT/gpu_tests.log" 2>&1; gpu=$?
python3 -m pytest tests -q -p no:cacheprovider -x -W ignore::FutureWarning -m "not gpu and not dtype_variant" >"$OUT/cpu_tests.log" 2>&1; cpu=$?
python3 examples/demo.py >"$OUT/demo.log" 2>&1; demo=$?
echo "== gpu"; cat "$OUT/gpu.txt"
echo "== tail gpu tests"; tail -25 "$OUT/gpu_tests.log"
echo "== tail cpu tests"; tail -5 "$OUT/cpu_tests.log"
echo "== demo"; tail -5 "$OUT/demo.log"
echo "== summary: build=$build gpu_tests=$gpu cpu_tests=$cpu demo=$demo seconds=$(( $(date +%s) - t0 ))"
