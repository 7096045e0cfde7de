#!/usr/bin/env bash
# Fetches, on a machine with PyPI, the wheels the GPU machine lacks for the library tests and
# benchmarks (FlagGems 5.0.2 and what it needs beyond the machine's packages; Liger-Kernel 0.7.0,
# and 0.8.5 apart for the DeepSeek-V2 fused MoE): .whl/ and .whl085/, both ignored by git.
# A device call then carries them and begins with:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
#   export PYTHONPATH=/tmp/site TRIDENT_TEST_LIGER_08=$PWD/.whl085/site
#   python3 -m pip install -q --no-index --no-deps --no-compile --target .whl085/site .whl085/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
grep -qx '/.whl085/' .git/info/exclude 2>/dev/null || echo '/.whl085/' >> .git/info/exclude
get() {  # folder, requirement...: wheels for the GPU machine's Python 3.12 on x86-64
  local dir=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$dir" "$@"
}
get .whl flag-gems==5.0.2 sqlalchemy==2.0.48 greenlet liger-kernel==0.7.0
get .whl085 liger-kernel==0.8.5
ls .whl .whl085
