#!/bin/bash
# gpu-final.sh: one two-GPU call for the results table, within the device tool's 600 s:
#  - the build (everything), then the single-GPU tests (ctest -L gpu without the two-GPU ones) on
#    GPU 1 while GPU 0 times the decoder ops against their copies and floors, PyTorch's SDPA (decode
#    and prefill), and
#    the 1B decode's tokens (gpu-round.sh);
#  - then, with both GPUs, the two-GPU tests, the two-stage pool (gpu-multi.sh convoy) and the
#    sharded tutorial plan against XLA (gpu-multi.sh scaling2).
# From the device tool (kind nvidia-h200-x2):
#   run(command="bash scripts/gpu-final.sh", carry=[".deps"])
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-$PWD/gpu-final-out}
mkdir -p "$OUT"
extra=$OUT/extra.txt
: > "$extra"
t0=$(date +%s)
# the single-GPU tests on GPU 1, once gpu-round.sh's build is done
(
  for _ in $(seq 300); do grep -qE "^build: " "$OUT/summary.txt" 2> /dev/null && break; sleep 1; done
  eval "$(bash scripts/deps-prefix.sh)"
  cd build-gpu &&
    CUDA_VISIBLE_DEVICES=1 timeout 380 ctest -L gpu -E "multigpu|ranks" -j3 --timeout 340 \
      --output-on-failure > "$OUT/ctest1.log" 2>&1
  echo "rc $?" >> "$OUT/ctest1.log"
) &
tests=$!
CUDA_VISIBLE_DEVICES=0 PARTS="decoder llmcheck" JOBS=32 \
  DECODER_ONLY="attention decode;attention prefill;rope;softmax;embedding;kv_cache_update" \
  DECODER_TIMEOUT=70 PEERS_ARGS="--only attention" PEERS_TIMEOUT=150 LLMC_PLANS="gemv" LLMC_FLAGS="-" GEN_TIMEOUT=40 \
  bash scripts/gpu-round.sh > /dev/null 2>&1
eval "$(bash scripts/deps-prefix.sh)"
wait "$tests"
echo "== single-GPU tests on GPU 1 ($(( $(date +%s) - t0 )) s)" >> "$extra"
grep -E "tests passed|Failed|\*\*\*|^rc" "$OUT/ctest1.log" >> "$extra"
(cd build-gpu && timeout 150 ctest -R "multigpu|ranks" --timeout 140 --output-on-failure) \
  > "$OUT/ctest2.log" 2>&1
echo "== two-GPU tests (rc $?)" >> "$extra"
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest2.log" >> "$extra"
mkdir -p /tmp/mout && OUT=/tmp/mout BUDGET=${MULTI_BUDGET:-240} PARTS='convoy scaling2' JOBS=32 \
  SKIP_BUILD=1 timeout 260 bash scripts/gpu-multi.sh > /tmp/mout/out.txt 2>&1
tar -czf "$OUT/multi.tgz" -C /tmp/mout . 2> /dev/null
cp /tmp/mout/summary.txt "$OUT/multi-summary.txt"
tar -czf "$OUT/ctest.tgz" -C "$OUT" ctest1.log ctest2.log && rm -f "$OUT/ctest1.log" "$OUT/ctest2.log"
echo "== done in $(( $(date +%s) - t0 )) s" >> "$extra"
