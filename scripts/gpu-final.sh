#!/bin/bash
# gpu-final.sh: one two-GPU call for the results table: gpu-round.sh's tests, GEMV, decoder ops
# with their PyTorch peers, the 1B decode (gemv and fused plans, with and without queued tokens)
# and the PyTorch recipe; the SwiGLU GEMV without its paired prologue; then gpu-multi.sh's
# scaling2 and launch parts on the same build. From the device tool (kind nvidia-h200-x2):
#   run(command="bash scripts/gpu-final.sh", carry=[".deps"])
export NCCL_NVLS_ENABLE=0
PARTS="tests gemv decoder llmcheck torch" LLMC_PLANS="gemv fused" LLMC_FLAGS="- --queue-tokens" \
  CTEST_ARGS="-R decoder_gpu|gemv|embed_cuda" CTEST_TIMEOUT=200 JOBS=32 GEN_TIMEOUT=40 GEMV_TIMEOUT=60 \
  DECODER_TIMEOUT=150 PEERS_TIMEOUT=120 TORCH_TIMEOUT=150 bash scripts/gpu-round.sh > /dev/null 2>&1
{
  echo "== bench_gemv with BATON_GEMV_SWIGLU_PAIR=0 (SwiGLU staged in every block)"
  BATON_GEMV_SWIGLU_PAIR=0 timeout 60 build-gpu/bench_gemv 2>&1 | grep -E "K8192"
  echo "== generate gemv plan with BATON_GEMV_SWIGLU_PAIR=0"
  ids=$(python3 -c "print(','.join(str((7 * i + 3) % 1000 + 1) for i in range(1024)))")
  BATON_GEMV_SWIGLU_PAIR=0 timeout 40 build-gpu/generate /tmp/llmc/gemv --prompt "$ids" --max-new-tokens 129 \
    --gpu=cuda --mode=graph --warmup 2 > /tmp/g0.out 2> /tmp/g0.err
  echo "rc $? | $(grep -E 'ms/token' /tmp/g0.err) | ids $(tail -c 60 /tmp/g0.out)"
} > "$OUT/extra.txt" 2>&1
mkdir -p /tmp/mout && OUT=/tmp/mout BUDGET=${MULTI_BUDGET:-120} PARTS='scaling2 launch' JOBS=32 \
  timeout 150 bash scripts/gpu-multi.sh > /dev/null 2>&1
tar -czf "$OUT/multi-logs.tgz" -C /tmp/mout . 2>/dev/null
cat "$OUT/summary.txt" "$OUT/extra.txt" /tmp/mout/summary.txt | grep -vE "^(gemv|floor|check) "
