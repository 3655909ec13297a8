#!/bin/bash
# ci-jax.sh: the CI step for baton's XLA FFI layer. Creates a virtual environment with jax (CPU)
# and numpy from PyPI (pinned), builds libbaton_jax (CPU-only: -DBATON_CUDA=OFF) with CMake against
# jax.ffi.include_dir(), and runs examples/jax/rms_norm.py on XLA's CPU platform, which registers
# the typed FFI handlers and checks forward and gradient against jax.numpy references (non-zero
# exit on failure), then examples/jax/sharded_rms_norm.py on two forced host devices, which checks
# the custom_partitioning rules (batch-sharded calls, grad_weight summed with psum), then
# examples/jax/export_rms_norm.py, which exports the tutorial's training step with baton_export.jax
# and checks that the baton CLI's run gives JAX's bits. Works on a
# fresh Debian machine with PyPI reachable: installs the Debian packages it needs only if they are
# missing.
#
#   bash scripts/ci-jax.sh            env: VENV (default .venv-jax), BUILD (default build-jax),
#                                          JOBS (default 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
VENV=${VENV:-$root/.venv-jax}
BUILD=${BUILD:-$root/build-jax}
JOBS=${JOBS:-2}
t0=$(date +%s)

# Debian packages: a compiler, CMake, pkg-config, venv, and the libraries baton's CMake requires.
need=()
command -v cc >/dev/null || need+=(build-essential)
command -v cmake >/dev/null || need+=(cmake)
command -v pkg-config >/dev/null || need+=(pkg-config)
python3 -c "import ensurepip" 2>/dev/null || need+=(python3-venv)
pkg-config --exists jansson 2>/dev/null || need+=(libjansson-dev)
pkg-config --exists libuv 2>/dev/null || need+=(libuv1-dev)
# any one of the places a cblas.h lives (ls of all three fails when one is missing)
cblas=0
for f in /usr/include/cblas.h /usr/include/*/cblas.h /usr/include/*/openblas-pthread/cblas.h; do
  [ -e "$f" ] && cblas=1
done
[ "$cblas" = 1 ] || need+=(libopenblas-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "ci-jax: installing ${need[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
# Pinned, as the PyTorch exporter's venv is: a new jaxlib may change what XLA fuses on the CPU.
"$VENV/bin/python" -m pip install -q jax==0.10.2 jaxlib==0.10.2 numpy==2.4.6
inc=$("$VENV/bin/python" -c "import jax.ffi; print(jax.ffi.include_dir())")
echo "ci-jax: $("$VENV/bin/python" -c "import jax; print('jax', jax.__version__)"), FFI headers in $inc ($(( $(date +%s) - t0 )) s)"

mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -DBATON_CUDA=OFF -DBATON_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
      -DBATON_XLA_FFI_INCLUDE="$inc" > "$BUILD/configure.log" 2>&1 ||
  { cat "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j"$JOBS" --target baton_jax baton_cli
echo "ci-jax: built $BUILD/libbaton_jax.so and $BUILD/baton ($(( $(date +%s) - t0 )) s)"

JAX_PLATFORMS=cpu "$VENV/bin/python" examples/jax/rms_norm.py --lib "$BUILD/libbaton_jax.so"
# Two host devices stand in for two GPUs: the batch is split over them, as it would be on a node.
JAX_PLATFORMS=cpu XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=2" \
  "$VENV/bin/python" examples/jax/sharded_rms_norm.py --lib "$BUILD/libbaton_jax.so"
# baton_export.jax (python/, no install: it needs jax and numpy only): the tutorial's training step
# exported to a plan and run by the baton CLI gives JAX's bits.
JAX_PLATFORMS=cpu PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$VENV/bin/python" examples/jax/export_rms_norm.py --lib "$BUILD/libbaton_jax.so" \
  --baton "$BUILD/baton"
echo "ci-jax: ok ($(( $(date +%s) - t0 )) s)"
