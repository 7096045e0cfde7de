#!/usr/bin/env bash
# Installs torch-trident and what it builds against on a fresh machine of this project's kind.
# torch and triton are pinned: an unpinned `torch` would download a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cc >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq build-essential >/dev/null
fi
python3 -m pip install -q "torch==2.13.0" "triton==3.6.0" "scikit-build-core>=0.10" "cmake>=3.18" ninja pytest "pytest-xdist==3.8.0"
python3 -m pip install -q --no-build-isolation -e .
