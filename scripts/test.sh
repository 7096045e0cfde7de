#!/usr/bin/env bash
# Installs everything, then runs every CPU test (GPU tests are marked `gpu` and run on the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# tests/python/test_hf_llama_cpu.py: a Hugging Face Llama (benchmarks/hf_llama.py). transformers is
# pinned and installed without its resolver (it does not need torch, and must never swap it); its own
# dependencies, none of which is torch, loosely pinned, with torch restated so nothing moves it.
python3 -m pip install -q --no-deps "transformers==5.24.0"
python3 -m pip install -q "torch==2.13.0" "huggingface-hub>=1.31,<3" "tokenizers>=0.23.1,<0.24" \
  "safetensors>=0.8" "regex>=2025.10.22" "numpy>=1.17" "packaging>=20" "pyyaml>=5.1" "tqdm>=4.60" typer
# tests/python/test_liger_moe_cpu.py: Liger-Kernel's MoE experts (pure Python over Triton; its kernels
# themselves run in the GPU tests), pinned, without its resolver for the same reason.
python3 -m pip install -q --no-deps "liger-kernel==0.7.0"
# tests/python/test_liger_fused_moe_cpu.py: Liger-Kernel 0.8.5's fused MoE (DeepSeek-V2's entry point),
# in a folder of its own beside 0.7.0, put on the path of that test's child process only.
export TRIDENT_TEST_LIGER_08="${TMPDIR:-/tmp}/trident-liger-0.8.5"
python3 -m pip install -q --no-deps --upgrade --target "$TRIDENT_TEST_LIGER_08" "liger-kernel==0.8.5"
export TRIDENT_CACHE_DIR="${TRIDENT_CACHE_DIR:-$(mktemp -d)}"
# one worker per core (pytest-xdist; each worker's conftest makes its own trident cache); the slowest
# tests are listed at the end, to keep the run short
python3 -m pytest tests -q -p no:cacheprovider -n "$(python3 -c 'import os; print(max(1, min(4, len(os.sched_getaffinity(0)))))')" \
  --durations=15
