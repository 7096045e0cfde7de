#!/usr/bin/env bash
# Runs the CPU tests under the GPU machines' versions (torch 2.11.0, transformers 5.17.0) on a machine
# without a GPU: PyPI's torch 2.11 is a CUDA build (about 4.7 GB with its CUDA libraries), which
# runs on the CPU. Not part of CI (its download); run it after a change to `_compat.py` or to how a
# capture meets torch. Extra arguments go to pytest (default: every test).
#   TRIDENT_TORCH211_VENV   the virtualenv to make or reuse (default ~/.cache/trident-torch211)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${TRIDENT_TORCH211_VENV:-$HOME/.cache/trident-torch211}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
if ! "$PY" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.11.0")' 2>/dev/null; then
  # the machine's pip may cap torch below a release on its disk; 2.11 lies under such caps
  "$PY" -m pip install -q "torch==2.11.0" "triton==3.6.0" numpy "scikit-build-core>=0.10" "cmake>=3.18" ninja \
    pytest "pytest-xdist==3.8.0"
  "$PY" -m pip install -q --no-deps "transformers==5.17.0" "liger-kernel==0.7.0"
  "$PY" -m pip install -q "huggingface-hub>=1.5,<2" "tokenizers>=0.22,<0.24" "safetensors>=0.8" \
    "regex>=2025.10.22" "packaging>=20" "pyyaml>=5.1" "tqdm>=4.60" typer
fi
# A build folder of its own: the default one is this checkout's torch 2.13 build. The extension and
# its _build_info land in the virtualenv; the Python sources stay this checkout's.
"$PY" -m pip install -q --no-build-isolation --no-deps -C build-dir=build/torch211 -e .
export TRIDENT_TEST_LIGER_08="${TMPDIR:-/tmp}/trident-liger-0.8.5"
"$PY" -m pip install -q --no-deps --upgrade --target "$TRIDENT_TEST_LIGER_08" "liger-kernel==0.8.5"
export TRIDENT_CACHE_DIR="${TRIDENT_CACHE_DIR:-$(mktemp -d)}"
"$PY" -m pytest -q -p no:cacheprovider -n "$("$PY" -c 'import os; print(max(1, min(4, len(os.sched_getaffinity(0)))))')" \
  "${@:-tests}"
