#!/bin/bash
# gpu-all.sh: everything the GPU machine is for, in one call: build with CUDA (and the JAX FFI
# library), the GPU and CPU test suites, the host benchmark, the kernel checks and benchmarks
# (scripts/gpu-kernels.sh) and the scheduler benchmarks (scripts/gpu-sched.sh), the hardware
# floors they are read against (bench_floors), and `baton bench` on the bundled plans. Logs are packed into $OUT/logs.tgz (the device tool returns few files);
# a summary prints last.
#   From the device tool: run(command="bash scripts/gpu-all.sh", carry=[".deps"])
#   env: PARTS (default "tests host floors kernels sched plans embed"; also "trace", "async", "jax",
#        "multi"; MULTI_OLD=0 leaves out the scaling figures),
#        JOBS (16)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
final=${OUT:-$root/gpu-all-out}
work=$(mktemp -d)
PARTS=${PARTS:-"tests host floors kernels sched plans embed"}
JOBS=${JOBS:-16}
BUILD=build-gpu
mkdir -p "$final"
summary=$work/summary.txt
say() { echo "$*" | tee -a "$summary"; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
t0=$(date +%s)

{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem \
    --format=csv,noheader; nvcc --version | tail -1; lscpu | grep -E "Model name|^CPU\(s\)"; } \
  2>&1 | tee -a "$summary"

eval "$(bash scripts/deps-prefix.sh)"
export BATON_SOURCE_DIR=$root
# NVLink multicast stays off on the lent machines (NCCL, under baton and under JAX alike).
export NCCL_NVLS_ENABLE=0
inc=$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())" 2>/dev/null || true)
ffi=()
[ -n "$inc" ] && ffi=(-DBATON_XLA_FFI_INCLUDE="$inc")
if cmake -C "$BATON_DEPS_PREFIX/deps.cmake" -S . -B "$BUILD" -DBATON_CUDA=ON \
     -DCMAKE_BUILD_TYPE=Release -DBATON_BENCH=ON "${ffi[@]}" > "$work/build.log" 2>&1 &&
   cmake --build "$BUILD" -j"$JOBS" >> "$work/build.log" 2>&1; then
  say "build: ok in $(( $(date +%s) - t0 )) s"
else
  say "build: FAILED"; grep -E "error" "$work/build.log" | head -20
fi

if has tests; then
  (cd "$BUILD" && ctest -L gpu --output-on-failure --timeout 400 -j2) > "$work/ctest_gpu.log" 2>&1
  say "ctest -L gpu: $(grep -E 'tests passed' "$work/ctest_gpu.log" | tail -1)"
  grep -E "\*\*\*Failed|\[FAIL\]" "$work/ctest_gpu.log" | head -10
  (cd "$BUILD" && ctest -L cpu --output-on-failure --timeout 400 -j8) > "$work/ctest_cpu.log" 2>&1
  say "ctest -L cpu: $(grep -E 'tests passed' "$work/ctest_cpu.log" | tail -1)"
  grep -E "\*\*\*Failed|\[FAIL\]" "$work/ctest_cpu.log" | head -10
fi

if has host; then
  "$BUILD/bench_host" > "$work/bench_host.log" 2>&1
  cat "$work/bench_host.log" | tee -a "$summary"
fi

if has floors; then
  timeout 240 "$BUILD/bench_floors" > "$work/floors.log" 2>&1
  say "== floors (bench_floors, rc $?)"
  grep -vE "^RESULT|^  #|grid +(132|528|1056) x" "$work/floors.log" | tee -a "$summary" > /dev/null
fi

if has plans; then
  for p in examples/plans/rfc.json examples/plans/rmsnorm_chain64.json \
           examples/plans/rmsnorm_tutorial.json; do
    say "== baton bench $p"
    timeout 120 "$BUILD/baton" bench "$p" --iters=300 --warmup=20 -q 2>&1 | tee -a "$summary"
  done
  "$BUILD/baton" run examples/plans/rfc.json --gpu=cuda --trace="$work/rfc_trace.json" -q \
    > "$work/run_rfc.log" 2>&1
  say "baton run rfc (trace): rc $?"
  "$BUILD/baton" bench examples/plans/rfc.json --gpu=cuda --iters=300 --warmup=20 -q \
    --report="$final/report-rfc.html" > /dev/null 2>&1
  say "baton bench rfc --report: rc $? ($final/report-rfc.html; render it with chromium --screenshot)"
fi

if has embed; then
  say "== bench_bind (caller-owned buffers, graph mode)"
  timeout 240 "$BUILD/bench_bind" examples/plans/rmsnorm_chain64.json ${BIND_ARGS:-} 2>&1 | tee -a "$summary"
  say "== embed_executor on CUDA"
  timeout 60 "$BUILD/embed_executor" --gpu=cuda 2>&1 | tee -a "$summary"
  say "== example plugin on CUDA"
  timeout 60 "$BUILD/baton" run --gpu=cuda -q --plugin "$BUILD/libbaton_example_plugin.so" \
    examples/plugin/scale_plan.json 2>&1 | tail -3 | tee -a "$summary"
fi

if has trace; then
  summarise() {
    python3 - "$1" <<'PY' 2>&1 | tee -a "$summary"
import collections, json, sys
t = json.load(open(sys.argv[1]))
ev = [e for e in t["traceEvents"] if e["ph"] == "X"]
names = {(e["pid"]): e["args"]["name"] for e in t["traceEvents"]
         if e["ph"] == "M" and e["name"] == "process_name"}
c = collections.Counter((names.get(e["pid"], e["pid"]), e["cat"]) for e in ev)
print("  trace:", json.dumps(t.get("otherData")))
for k, v in sorted(c.items(), key=str):
    print(f"    {k[0]:28s} {k[1]:16s} {v}")
PY
  }
  say "== bench_trace (tracing cost, device timelines from CUPTI)"
  timeout 150 "$BUILD/bench_trace" examples/plans/rmsnorm_chain64.json 2>&1 | tee -a "$summary"
  summarise /tmp/bench_trace.json
  timeout 150 "$BUILD/bench_trace" examples/plans/rfc.json --runs 100 2>&1 | tee -a "$summary"
  for m in strict boundary graph; do
    "$BUILD/baton" run --gpu=cuda --mode=$m --iters=3 -q --trace="$work/rfc_$m.json" \
      examples/plans/rfc.json > /dev/null 2>&1
    say "== baton run rfc --mode=$m --trace (rc $?)"
    summarise "$work/rfc_$m.json"
  done
fi

if has async; then
  mkdir -p "$work/async"
  OUT=$work/async BUILD=$BUILD REQ=${REQ:-2000} bash scripts/gpu-async.sh > "$work/async/run.log" 2>&1
  say "== async (scripts/gpu-async.sh)"; tail -12 "$work/async/run.log" | tee -a "$summary" > /dev/null
  # What the hand-off costs at 8 in flight, A/B in alternating rounds: the workers spinning for
  # their next job or not, and CUDA's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) 8 or 32.
  say "== async A/B at 8 in flight (graph, RFC plan and its GPU floor), ${AB_ROUNDS:-3} rounds"
  for r in $(seq "${AB_ROUNDS:-3}"); do
    for v in "spin=default conn=8" "spin=0 conn=8" "spin=default conn=32" "spin=0 conn=32"; do
      spin=${v%% *}; spin=${spin#spin=}; conn=${v##*conn=}
      for pl in examples/plans/rfc.json "$work/async/rfc_gpu_only.json"; do
        env $( [ "$spin" = 0 ] && echo BATON_POOL_SPIN_US=0 ) \
          CUDA_DEVICE_MAX_CONNECTIONS="$conn" timeout 120 "$BUILD/async_batch" --gpu cuda \
          --inflight 8 --requests "${REQ:-2000}" --no-timer "$pl" 2>&1 |
          sed -n "s/^RESULT async_batch\./RESULT r$r $(basename "$pl" .json) $v /p" | tee -a "$summary"
      done
    done
  done
fi

if has jax; then
  # The XLA FFI kernels inside JAX on this machine's GPUs: the single-device checks, then the
  # tutorial's custom_partitioning example over a mesh of every visible GPU.
  lib=$BUILD/libbaton_jax.so
  for ex in rms_norm.py sharded_rms_norm.py; do
    JAX_PLATFORMS=cuda timeout 300 python3 "examples/jax/$ex" --lib "$lib" > "$work/jax_$ex.log" 2>&1
    say "== examples/jax/$ex on $(nvidia-smi -L | wc -l) GPU(s): rc $?"
    tail -25 "$work/jax_$ex.log" | tee -a "$summary" > /dev/null
  done
fi

if has multi; then
  # Several GPUs (issues 14, 43): the copy and collective costs against cudaMemcpyPeer and NCCL, the
  # sharded tutorial plan against the one-GPU plan on real GPUs, XLA's own scaling, and the
  # 2-GPU tests' log. On one GPU each says why it measures nothing.
  ngpu=$(nvidia-smi -L | wc -l)
  say "== several GPUs ($ngpu present)"
  # The two-GPU tests first (issue 43): event nodes and stream waits both ways, ranks as threads
  # over NCCL, and two `baton run --rank` processes against one, bitwise.
  # bounded: each two-GPU test ends after a minute (tests/test_multigpu.c), each rank process
  # of ranks_e2e after 60 s
  (cd "$BUILD" && timeout 400 ctest -R "multigpu|ranks_e2e" -V --timeout 150) \
    > "$work/ctest_multi.log" 2>&1
  say "ctest multigpu|ranks_e2e: $(grep -E 'tests passed' "$work/ctest_multi.log" | tail -1)"
  grep -E "Test +#|\[FAIL\]|FAIL:|PASS:|^ranks |SKIP" "$work/ctest_multi.log" | head -30 |
    tee -a "$summary"
  # Copies (peer access off / on: memcpy, peer-reading kernel, baton), graph-mode ordering
  # (hand-built and baton's plan, event nodes vs waits outside) and collectives, then PyTorch's
  # copy as the copies' anchor.
  timeout 300 "$BUILD/bench_multigpu" --reps 30 2>&1 | tee "$work/bench_multigpu.log" |
    tee -a "$summary"
  timeout 120 python3 bench/multigpu/torch_peer_copy.py 2>&1 | tee "$work/torch_copy.log" |
    tail -6 | tee -a "$summary"
  # baton's copy against the best of the three peers, size by size (target >= 0.90)
  cat "$work/bench_multigpu.log" "$work/torch_copy.log" | python3 -c '
import re, sys
peer, torch = {}, {}
for line in sys.stdin:
    m = re.match(r"RESULT peer\.(\d+) (.*)", line)
    if m:
        f = m.group(2).split()
        peer[int(m.group(1))] = dict(zip(f[::2], map(float, f[1::2])))
    m = re.match(r"RESULT torch_peer\.(\d+) gbs ([0-9.]+)", line)
    if m:
        torch[int(m.group(1))] = float(m.group(2))
for b in sorted(peer):
    p = peer[b]
    best = max(p["memcpy_gbs"], p["kernel_gbs"], torch.get(b, 0.0))
    print("copy %5d MiB: baton %.1f GB/s, best of memcpy/kernel/torch %.1f GB/s: ratio %.3f"
          % (b >> 20, p["baton_gbs"], best, p["baton_gbs"] / best if best > 0 else float("nan")))
' 2>&1 | tee -a "$summary"
  # The pipeline and the scaling figures with their explanations and peers (XLA):
  # scripts/gpu-multi.sh on this build (MULTI_OLD=0 keeps to the pipeline).
  if [ "$ngpu" -ge 2 ]; then
    mparts="pipeline scaling"
    [ "${MULTI_OLD:-1}" = 0 ] && mparts="pipeline"
    SKIP_BUILD=1 BUDGET=${MULTI_BUDGET:-400} PARTS="$mparts" OUT="$work/multi" \
      bash scripts/gpu-multi.sh > "$work/gpu_multi.log" 2>&1
    cat "$work/multi/summary.txt" >> "$summary"
    cp -r "$work/multi"/trace-* "$final/" 2>/dev/null
  fi
fi

if has kernels; then
  mkdir -p "$work/kernels"
  OUT=$work/kernels BIN=$BUILD BUILD=$BUILD JOBS=$JOBS bash scripts/gpu-kernels.sh \
    ${KERNEL_ARGS:-} > "$work/kernels/run.log" 2>&1
  say "== kernels"; tail -40 "$work/kernels/run.log" | tee -a "$summary" > /dev/null
fi

if has sched; then
  mkdir -p "$work/sched"
  OUT=$work/sched BUILD=$BUILD JOBS=$JOBS bash scripts/gpu-sched.sh ${SCHED_ARGS:---no-tests} \
    > "$work/sched/run.log" 2>&1
  say "== sched"; tail -40 "$work/sched/run.log" | tee -a "$summary" > /dev/null
fi

say "gpu-all: $(( $(date +%s) - t0 )) s"
tar czf "$final/logs.tgz" -C "$work" .
cp "$summary" "$final/summary.txt"
cat "$summary" | tail -120
