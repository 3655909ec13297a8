#!/bin/bash
# gpu-llm.sh: issue 42's GPU figures: builds baton with CUDA (the CLI and `generate`), checks
# `generate` against transformers on a small model where transformers is importable (the python
# tests' generate case, on the GPU machine's CPU), then bench/llm/bench_generate.py: a
# Llama-3.2-1B-shaped model (random bf16 weights) exported by baton_export and run by `generate`
# on cuda:0 in each sync mode (prefill tokens/s, decode ms/token, host waits per token, share of
# the decode floor). Needs torch (python3); transformers is optional.
#   From the device tool: run(command="bash scripts/gpu-llm.sh", carry=[".deps"])
#   env: JOBS (16), BENCH_ARGS (extra bench_generate.py arguments)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-llm-out}
mkdir -p "$out"
BUILD=build-gpu
JOBS=${JOBS:-16}
eval "$(bash scripts/deps-prefix.sh)"
if ! { cmake -C "$BATON_DEPS_PREFIX/deps.cmake" -S . -B "$BUILD" -DBATON_CUDA=ON \
         -DCMAKE_BUILD_TYPE=Release -DBATON_TESTS=OFF &&
       cmake --build "$BUILD" -j"$JOBS" --target baton_cli generate; } > "$out/build.log" 2>&1; then
  tail -n 40 "$out/build.log"
  exit 1
fi
echo "build: ok"
if python3 -c "import transformers, pytest" 2>/dev/null; then
  BATON="$BUILD/baton" BATON_GENERATE="$BUILD/generate" PYTHONPATH=python \
    python3 -m pytest -q -p no:cacheprovider python/tests/test_llm.py 2>&1 | tail -n 5
fi
PYTHONPATH=python python3 bench/llm/bench_generate.py --generate "$BUILD/generate" \
  --json "$out/bench_generate.json" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench_generate.txt"
