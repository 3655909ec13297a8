#!/bin/bash
# check-format.sh: fails when a tracked C, CUDA or header file differs from what clang-format makes
# of it with the repository's .clang-format (CI runs it first; `clang-format -i FILE` fixes one).
#   CLANG_FORMAT  the binary (default clang-format)
set -euo pipefail
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format}
command -v "$cf" > /dev/null || { echo "check-format: $cf not found (apt-get install clang-format)"; exit 1; }
git ls-files -z '*.c' '*.h' '*.cu' '*.cuh' | xargs -0 "$cf" --dry-run -Werror
echo "check-format: $(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | wc -l) files formatted ($("$cf" --version))"
