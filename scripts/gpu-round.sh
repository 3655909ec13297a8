#!/bin/bash
# gpu-round.sh: this round's GPU call in one go: build with CUDA, the GPU and CPU tests, the decoder
# ops' benchmark and its PyTorch peers, and (PARTS has llm) the decode of an exported
# Llama-3.2-1B-shaped model against the gpt-fast PyTorch recipe, all in one call so every ratio
# has its floor and peer from the same machine and minute. Figures go to $OUT (logs.tgz, *.json).
#   From the device tool: run(command="bash scripts/gpu-round.sh", carry=[".deps"])
#   env: PARTS (default "tests decoder"; also "cputests", "gemv", "llm", "dims", "rfcdims", "host39",
#        "prof", "sched", "host", "llmcheck", "trace" (after llmcheck), "torch"), JOBS (16), *_TIMEOUT (per part), PEERS_ARGS, TORCH_DECODE=0,
#        CTEST_ARGS (e.g. "-R decoder" to run some GPU tests only), LLM_ARGS (bench_generate.py),
#        DECODER_ONLY ("PREFIX;PREFIX": bench_decoder's rows by label prefix, one process each)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
final=${OUT:-$root/gpu-round-out}
mkdir -p "$final"
work=$final/logs
mkdir -p "$work"
PARTS=${PARTS:-"tests decoder"}
JOBS=${JOBS:-16}
BUILD=build-gpu
has() { [[ " $PARTS " == *" $1 "* ]]; }
summary=$final/summary.txt
say() { echo "$*" | tee -a "$summary"; }
t0=$(date +%s)
{ nvidia-smi -L; nvcc --version | tail -1; } 2>&1 | tee -a "$summary"
eval "$(bash scripts/deps-prefix.sh)"
export NCCL_NVLS_ENABLE=0
if cmake -C "$BATON_DEPS_PREFIX/deps.cmake" -S . -B "$BUILD" -DBATON_CUDA=ON \
     -DCMAKE_BUILD_TYPE=Release -DBATON_BENCH=ON ${BATON_CMAKE_ARGS:-} > "$work/build.log" 2>&1 &&
   cmake --build "$BUILD" -j"$JOBS" ${BUILD_TARGETS:+--target $BUILD_TARGETS} -- -k >> "$work/build.log" 2>&1; then
  say "build: ok in $(( $(date +%s) - t0 )) s"
else
  say "build: FAILED"; grep -E "error" "$work/build.log" | head -30
fi
if has tests; then
  (cd "$BUILD" && ctest -L gpu ${CTEST_ARGS:-} --output-on-failure --timeout "${CTEST_TIMEOUT:-300}" -j4) > "$work/ctest_gpu.log" 2>&1
  say "ctest -L gpu: $(grep -E 'tests passed' "$work/ctest_gpu.log" | tail -1)"
  grep -E "\*\*\*Failed|\[FAIL\]|Failed  |Exception" "$work/ctest_gpu.log" | head -20
  if has cputests; then
    (cd "$BUILD" && ctest -L cpu --output-on-failure --timeout 300 -j12) > "$work/ctest_cpu.log" 2>&1
    say "ctest -L cpu: $(grep -E 'tests passed' "$work/ctest_cpu.log" | tail -1)"
    grep -E "\*\*\*Failed|\[FAIL\]" "$work/ctest_cpu.log" | head -10
  fi
fi
if has gemv; then
  say "== bench_gemv (the decode GEMV: baton's own vs cuBLASLt vs the copy, cold, in graphs)"
  timeout "${GEMV_TIMEOUT:-90}" "$BUILD/bench_gemv" --json "$final/bench_gemv.json" > "$work/bench_gemv.log" 2>&1
  say "(rc $?)"; grep -v "^RESULT" "$work/bench_gemv.log" | tee -a "$summary" > /dev/null
fi
if has rfcdims; then
  python3 scripts/rfc_dims.py examples/plans/rfc.json "$work/rfc-dims.json"
  for plan in examples/plans/rfc.json "$work/rfc-dims.json" examples/plans/rfc.json "$work/rfc-dims.json"; do
    say "baton bench --modes=graph $(basename "$plan"): $(timeout 120 "$BUILD/baton" bench --gpu=cuda \
      --modes=graph --iters=1000 --warmup=50 -q "$plan" 2>&1 | grep -E '^graph')"
  done
fi
if has decoder; then
  if [ -z "${DECODER_ONLY:-}" ]; then
    timeout "${DECODER_TIMEOUT:-200}" "$BUILD/bench_decoder" --json "$final/bench_decoder.json" > "$work/bench_decoder.log" 2>&1
    say "== bench_decoder (rc $?)"; grep -v "^RESULT" "$work/bench_decoder.log" | tee -a "$summary" >/dev/null
  else
    # DECODER_ONLY="PREFIX;PREFIX;..": one bench_decoder process per row prefix, one JSON of all
    IFS=';' read -ra prefixes <<< "$DECODER_ONLY"
    i=0
    for pre in "${prefixes[@]}"; do
      i=$((i + 1))
      timeout "${DECODER_TIMEOUT:-200}" "$BUILD/bench_decoder" --only "$pre" --json "$work/bd-$i.json" \
        > "$work/bench_decoder-$i.log" 2>&1
      say "== bench_decoder --only '$pre' (rc $?)"; grep -v "^RESULT" "$work/bench_decoder-$i.log" | tee -a "$summary" >/dev/null
    done
    python3 - "$final/bench_decoder.json" "$work"/bd-*.json <<'PY'
import json, sys
out, parts = sys.argv[1], [json.load(open(f)) for f in sys.argv[2:]]
if parts:
    merged = parts[0]
    for p in parts[1:]:
        merged["results"] = merged.get("results", []) + p.get("results", [])
    json.dump(merged, open(out, "w"), indent=1)
PY
  fi
  [ "${DECODER_PEERS:-1}" = 0 ] || timeout "${PEERS_TIMEOUT:-200}" python3 bench/kernels/decoder_peers.py ${PEERS_ARGS:-} --json "$final/decoder_peers.json" \
    > "$work/decoder_peers.log" 2>&1
  say "== decoder_peers (rc $?)"; grep -v "^RESULT" "$work/decoder_peers.log" | tail -40 | tee -a "$summary" >/dev/null
fi
if has llm; then
  say "== bench_generate (baton's decode and prefill of a Llama-3.2-1B-shaped model)"
  PYTHONPATH=python timeout "${LLM_TIMEOUT:-420}" python3 bench/llm/bench_generate.py --generate "$BUILD/generate" \
    --json "$final/bench_generate.json" ${LLM_ARGS:-} > "$work/bench_generate.log" 2>&1
  say "(rc $?)"; tail -n 30 "$work/bench_generate.log" | tee -a "$summary" > /dev/null
fi
if has llmcheck; then
  # the 1B plans exported once (fused, and gemv: norms and SwiGLU folded into the GEMVs), then
  # generate on each with and without PDL, each run bounded (a hang is reported, not waited out)
  say "== llmcheck: generate per plan, with and without PDL"
  PYTHONPATH=python timeout 120 python3 - > "$work/llm_export.log" 2>&1 <<'PY'
import sys, time
sys.path.insert(0, "bench/llm")
import torch, bench_generate as bg, baton_export
cfg = dict(bg.CFG)
m, how = bg.make_model(cfg, "cuda")
import os
for fused in [("gemv" if v == "gemv" else True) for v in os.environ.get("LLMC_PLANS", "fused gemv").split()]:
    t = time.time()
    baton_export.export_causal_lm(m, f"/tmp/llmc/{'gemv' if fused == 'gemv' else 'fused'}",
                                  max_seq_len=1024 + 129, device="cuda:0", verbose=False,
                                  prefill_logits="last", fused=fused,
                                  decode_outputs=tuple(os.environ.get("LLMC_OUTPUTS", "next_token").split(",")))
    print("exported", fused, f"{time.time() - t:.1f} s", how, flush=True)
PY
  say "(export rc $?) $(tail -n 2 "$work/llm_export.log" | tr '\n' ' ')"
  ids=$(python3 -c "print(','.join(str((7 * i + 3) % 1000 + 1) for i in range(1024)))")
  # LLMC_PLANS (fused gemv), LLMC_FLAGS (each a set of generate flags joined by commas, e.g.
  # "--temperature=0.8,--top-k=50"; "-" for none), LLMC_OUTPUTS (the decode plan's outputs,
  # comma-separated: "logits" to sample); each run's ids as a checksum, to compare runs
  for v in ${LLMC_PLANS:-fused gemv}; do
    for pdl in ${LLMC_FLAGS:-- --no-pdl}; do
      [ "$pdl" = - ] && pdl=""
      pdl=${pdl//,/ }
      timeout "${GEN_TIMEOUT:-40}" "$BUILD/generate" /tmp/llmc/$v --prompt "$ids" --max-new-tokens 129 \
        --gpu=cuda --mode=graph --warmup 2 $pdl > "$work/gen.out" 2> "$work/gen.err"
      rc=$?
      tag=$(echo "$v$pdl" | tr -c 'A-Za-z0-9.=\n-' '_')
      mv "$work/gen.out" "$work/gen-$tag.out"; mv "$work/gen.err" "$work/gen-$tag.err"
      say "generate $v graph $pdl: rc $rc | $(grep -E 'prefill:|ms/token|host outside|load\+prepare|sampling:' "$work/gen-$tag.err" | tr '\n' ' ') | ids $(tail -n 1 "$work/gen-$tag.out" | md5sum | cut -c1-12) ...$(tail -c 40 "$work/gen-$tag.out")"
    done
  done
fi
if has trace && [ -d /tmp/llmc/gemv ]; then
  # where a decode token's time goes inside the graph (CUPTI kernel records; after llmcheck)
  ids=$(python3 -c "print(','.join(str((7 * i + 3) % 1000 + 1) for i in range(1000)))")
  cupti=$(dirname "$(find / -name 'libcupti.so*' -path '*lib*' 2>/dev/null | head -1)")
  LD_LIBRARY_PATH="$cupti:${LD_LIBRARY_PATH:-}" timeout 60 "$BUILD/generate" /tmp/llmc/gemv --prompt "$ids" \
    --max-new-tokens 24 --gpu=cuda --mode=graph --trace "$work/decode-trace.json" > /dev/null 2> "$work/trace.err"
  say "== trace (rc $?, cupti from $cupti): $(grep -E 'ms/token' "$work/trace.err")"
  python3 scripts/trace_token.py "$work/decode-trace.json" 2>&1 | head -40 | tee -a "$summary" > /dev/null
fi
# the PyTorch recipe: its own part, and with llm unless TORCH_DECODE=0
if has torch || { has llm && [ "${TORCH_DECODE:-1}" != 0 ]; }; then
  say "== torch_decode (the gpt-fast recipe, same machine)"
  timeout "${TORCH_TIMEOUT:-400}" python3 bench/llm/torch_decode.py --context 1024 --prefill 1024 --steps 200 \
    --json "$final/torch_decode.json" > "$work/torch_decode.log" 2>&1
  say "(rc $?)"; grep -vE "Warning|warn\(" "$work/torch_decode.log" | tail -n 12 | tee -a "$summary" > /dev/null
fi
if has dims; then
  say "== bench_dims (graph mode: static vs dims unchanged; a 1-in-8 change pattern)"
  for a in "" "--steps 64 --rows 256 --features 4096"; do
    # shellcheck disable=SC2086
    timeout 150 "$BUILD/bench_dims" --gpu cuda $a > "$work/bench_dims.log" 2>&1
    say "(bench_dims $a: rc $?)"; grep -v "^RESULT" "$work/bench_dims.log" | tail -n 14 | tee -a "$summary" > /dev/null
  done
fi
if has dims; then
  timeout 150 "$BUILD/bench_safetensors_load" > "$work/st_load.log" 2>&1
  say "(bench_safetensors_load: rc $?)"; tail -n 6 "$work/st_load.log" | tee -a "$summary" > /dev/null
fi
if has host39 && [ -d old39 ]; then
  # issue 39: host time per step before (70ec00f^, the tree in old39/) and after decode-once
  say "== host time per RMSNorm step, before/after decode-once (boundary mode: issue time)"
  (cd old39 && cmake -C "$BATON_DEPS_PREFIX/deps.cmake" -S . -B build-old -DBATON_CUDA=ON \
     -DCMAKE_BUILD_TYPE=Release -DBATON_TESTS=OFF > "$work/build-old.log" 2>&1 &&
   cmake --build build-old -j"$JOBS" --target baton_cli >> "$work/build-old.log" 2>&1) || say "old build failed"
  for i in 1 2 3 4; do
    for b in old39/build-old/baton "$BUILD/baton"; do
      timeout 60 "$b" bench --gpu=cuda --modes=strict,boundary --iters=3000 --warmup=200 --steps -q \
        examples/plans/rmsnorm_chain64.json > "$work/host39-$i-$(basename "$(dirname "$b")").txt" 2>&1
      say "$b round $i: $(python3 -c "
import statistics,sys
v=[l.split() for l in open(sys.argv[1]) if l.startswith('norm')]
print('steps', len(v), 'median strict ns', statistics.median(float(x[1]) for x in v), 'boundary ns', statistics.median(float(x[2]) for x in v))" "$work/host39-$i-$(basename "$(dirname "$b")").txt")"
    done
  done
fi
if has prof; then
  # per-kernel device times of the 1B decode plan (ncu, caches not flushed), after an llm part
  # exported it to /tmp/bench_llm (LLM_ARGS must include --out /tmp/bench_llm)
  d=${PROF_DIR:-/tmp/bench_llm/fused}
  ids=$(python3 -c "print(','.join(str(i+1) for i in range(1000)))")
  timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --print-units base "$BUILD/generate" "$d" --prompt "$ids" --max-new-tokens 3 --gpu=cuda --mode=graph \
    > "$work/ncu.csv" 2> "$work/ncu.err"
  say "ncu (rc $?): $(python3 scripts/ncu_token.py "$work/ncu.csv" | tee "$work/ncu-token.txt" | head -3)"
  cat "$work/ncu-token.txt" >> "$summary"
fi
if has sched; then
  say "== bench_sched (the 64-step chain: baton's graph mode vs hand-built graphs with and without PDL)"
  BATON_GRAPH_EDGES=1 timeout "${SCHED_TIMEOUT:-90}" "$BUILD/bench_sched" --src . --iters 300 --rounds 2 \
    > "$work/bench_sched.log" 2>&1
  say "(rc $?)"; grep -E "^baton: " "$work/bench_sched.log" | sort | uniq -c | head -5 | tee -a "$summary" > /dev/null
  sed -n '/^64 x rms_norm_fwd/,$p' "$work/bench_sched.log" | grep -vE "^RESULT" | tee -a "$summary" > /dev/null
fi
if has host; then
  timeout 120 "$BUILD/bench_host" > "$work/bench_host.log" 2>&1; tail -30 "$work/bench_host.log" | tee -a "$summary"
fi
say "== done in $(( $(date +%s) - t0 )) s"
tar -czf "$final/logs.tgz" -C "$final" logs 2>/dev/null && rm -rf "$work"
