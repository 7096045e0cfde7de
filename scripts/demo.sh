#!/usr/bin/env bash
# Installs everything, then runs the demo (a decoder block on the GPU if one is present, on the CPU otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
python3 examples/demo.py
