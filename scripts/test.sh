#!/bin/bash
# test.sh: sets up (scripts/setup.sh) and runs the whole test suite with CTest. GPU tests (label
# gpu) skip with a reason when no CUDA device is present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
build=${BATON_BUILD_DIR:-build}
cd "$build"
ctest --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" "$@"
