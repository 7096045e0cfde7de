#!/usr/bin/env bash
# Installs everything, then runs every CPU test (GPU tests are marked `gpu` and run on the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export TRIDENT_CACHE_DIR="${TRIDENT_CACHE_DIR:-$(mktemp -d)}"
python3 -m pytest tests -q -p no:cacheprovider
