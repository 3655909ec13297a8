#!/bin/bash
# fetch-deps.sh: downloads the Debian packages the GPU machine lacks into .deps/debs (ignored by
# git; carried to that machine with the device tool's `carry`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -x "$root/../shared/fetch-debs.sh" ]; then
  bash "$root/../shared/fetch-debs.sh" "$root/.deps/debs"
else
  echo "fetch-deps: ../shared/fetch-debs.sh not found" >&2
  exit 1
fi
