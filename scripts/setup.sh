#!/bin/bash
# setup.sh: installs the Debian packages baton needs (only those missing), then configures and
# builds into ./build. Used by scripts/run.sh and scripts/test.sh; safe to run again.
#   BATON_BUILD_DIR  build directory (default: build)
#   BATON_CMAKE_ARGS extra CMake arguments (e.g. -DBATON_CUDA=OFF)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BATON_BUILD_DIR:-build}

need=()
for pkg in build-essential cmake pkg-config libuv1-dev libjansson-dev libcriterion-dev \
           libopenblas-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# nvcc lives outside PATH on a fresh CUDA install; CMake finds it through CUDACXX.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

jobs=$(nproc 2>/dev/null || echo 2)
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${BATON_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$jobs" 2>&1 | grep -E "error|warning:|Error" || true
test -x "$build/baton" || { echo "setup: build failed" >&2; cmake --build "$build" -j1; exit 1; }
echo "setup: built $build/baton"
