#!/bin/bash
# ci-python.sh: the CI step for the PyTorch exporter (python/, package baton_export). Makes the
# pinned venv (scripts/py-venv.sh) and runs python/tests on the CPU against the baton CLI and the
# `generate` example of an existing build (scripts/test.sh makes build/).
#
#   bash scripts/ci-python.sh [PYTEST ARGS]   env: VENV (default .venv-py), BUILD (default build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-$root/build}
t0=$(date +%s)
if [ ! -x "$BUILD/baton" ]; then
  echo "ci-python: $BUILD/baton is missing: run bash scripts/test.sh (or set BUILD) first" >&2
  exit 1
fi
venv=$(bash scripts/py-venv.sh | tail -n 1)
echo "ci-python: $("$venv/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)') ($(( $(date +%s) - t0 )) s)"
export BATON="$BUILD/baton"
if [ -x "$BUILD/generate" ]; then export BATON_GENERATE="$BUILD/generate"; fi
# One seed per run for the random models and inputs, printed so that a failure can be replayed.
export BATON_TEST_SEED=${BATON_TEST_SEED:-$(( (RANDOM << 15) | RANDOM ))}
echo "ci-python: test seed: $BATON_TEST_SEED (BATON_TEST_SEED=$BATON_TEST_SEED replays it)"
# Every target and plan feature the tests use is on main: a skip for a missing one is a failure.
export BATON_EXPORT_REQUIRE_ALL=1
# python/tests' conftest puts only python/tests on sys.path: the installed package is tested
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests "$@"
# The decoder ops against PyTorch's functions (the ctest decoder_torch skips without torch).
"$venv/bin/python" tests/test_decoder_torch.py "$BATON"
echo "ci-python: ok ($(( $(date +%s) - t0 )) s)"
