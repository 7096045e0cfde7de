#!/usr/bin/env bash
# GPU machine, one call: build, GPU tests, then the benchmark suite.
# Usage: gpu_bench.sh [--quick] [tests | triton-tests]
# (BENCH_BUDGET=seconds caps the suite, compile latency included;
# BENCH_ROUNDS=N runs every mode N times and keeps each entry's fastest round;
# BENCH_COMMIT=<commit> names the commit in the table: the machine's copy of .git may be stale)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/trident-bench}"; mkdir -p "$OUT"
export TRIDENT_CACHE_DIR="$(mktemp -d)" PYTHONUNBUFFERED=1
python3 -m pip install -q --no-build-isolation -e . >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
if [[ " $* " == *" tests "* ]]; then
  python3 -m pytest tests -q -p no:cacheprovider -m gpu -W ignore::FutureWarning >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log")"
elif [[ " $* " == *" triton-tests "* ]]; then  # the Triton and backend GPU files only (shorter)
  python3 -m pytest tests/python/test_triton_gpu.py tests/python/test_backend_gpu.py -q -p no:cacheprovider \
    -m gpu -W ignore::FutureWarning >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log")"
fi
quick=""; [[ " $* " == *" --quick "* ]] && quick="--quick"
python3 benchmarks/run.py --out "$OUT/bench" $quick ${BENCH_BUDGET:+--budget-s $BENCH_BUDGET} ${BENCH_ROUNDS:+--rounds $BENCH_ROUNDS} >"$OUT/bench.log" 2>&1
cp "$OUT/bench/results.json" "$OUT/bench/decode.png" "$OUT/bench/table.txt" "$OUT/" 2>/dev/null
tail -60 "$OUT/bench.log"
