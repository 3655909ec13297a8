#!/bin/bash
# gpu-sched.sh: on the GPU machine, builds baton with CUDA from the Debian packages in .deps/debs,
# runs the GPU tests and the scheduler benchmarks of issue 4 (bench_gemm, bench_sched and the
# PyTorch comparison), writes every log under $OUT and prints a short table last.
#
#   bash scripts/gpu-sched.sh [--no-tests] [--no-bench] [--quick]
#   env: OUT (logs; default ./gpu-sched-out), BUILD (default build-gpu), JOBS (default 16),
#        TESTS (ctest -R regex within label gpu; default all gpu tests)
# From the device tool: run(command="bash scripts/gpu-sched.sh", carry=[".deps"]).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-$root/gpu-sched-out}
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-16}
TESTS=${TESTS:-}
do_tests=1 do_bench=1 quick=0
for a in "$@"; do
  case $a in
    --no-tests) do_tests=0 ;;
    --no-bench) do_bench=0 ;;
    --quick) quick=1 ;;
    *) echo "usage: $0 [--no-tests] [--no-bench] [--quick]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
: > "$OUT/status.txt"
status() { printf '%-14s %s\n' "$1" "$2" | tee -a "$OUT/status.txt"; }
t_start=$(date +%s)

# at most 8 files come back from the device tool: device facts go into status.txt
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv;
  nvcc --version | tail -1; } 2>&1 | tee -a "$OUT/status.txt"

eval "$(bash scripts/deps-prefix.sh)"
if ! cmake -C "$BATON_DEPS_PREFIX/deps.cmake" -S . -B "$BUILD" -DBATON_CUDA=ON -DBATON_BENCH=ON \
     -DCMAKE_BUILD_TYPE=Release > "$OUT/build.log" 2>&1; then
  status configure "FAILED (see build.log)"; tail -20 "$OUT/build.log"; exit 1
fi
if cmake --build "$BUILD" -j"$JOBS" >> "$OUT/build.log" 2>&1; then
  status build "ok ($(( $(date +%s) - t_start )) s)"
else
  status build "FAILED (see build.log); building what links"
  grep -E "error|undefined reference" "$OUT/build.log" | head -20
  cmake --build "$BUILD" -j"$JOBS" --target bench_sched bench_gemm test_gemm_cuda test_device_cuda \
    >> "$OUT/build.log" 2>&1 || true
fi

if [ $do_tests = 1 ]; then
  t0=$(date +%s)
  args=(-L gpu --output-on-failure --timeout 300)
  [ -n "$TESTS" ] && args+=(-R "$TESTS")
  if (cd "$BUILD" && ctest "${args[@]}") > "$OUT/ctest_gpu.log" 2>&1; then r=ok; else r=FAILED; fi
  status "ctest -L gpu" "$r: $(grep -E 'tests passed' "$OUT/ctest_gpu.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
  grep -E "^\s*[0-9]+/[0-9]+ Test" "$OUT/ctest_gpu.log" | grep -v Passed | head -20
fi

if [ $do_bench = 1 ]; then
  iters=300 rounds=3 giters=200 titers=300
  [ $quick = 1 ] && iters=100 rounds=2 giters=60 titers=100
  export BATON_SOURCE_DIR=$root
  if [ -x "$BUILD/bench_gemm" ]; then
    timeout 240 "$BUILD/bench_gemm" --iters $giters > "$OUT/bench_gemm.log" 2>&1
    status bench_gemm "rc $?"
  fi
  if [ -x "$BUILD/bench_sched" ]; then
    timeout 300 "$BUILD/bench_sched" --src "$root" --iters $iters --rounds $rounds \
      > "$OUT/bench_sched.log" 2>&1
    status bench_sched "rc $?"
  fi
  PYTHONUNBUFFERED=1 timeout 240 python3 bench/sched/torch_rfc.py --iters $titers \
    > "$OUT/torch_rfc.log" 2>&1
  status torch_rfc "rc $?"
fi

# ---- the short table, last ------------------------------------------------------------------
cat "$OUT"/bench_gemm.log "$OUT"/bench_sched.log "$OUT"/torch_rfc.log 2>/dev/null \
  | grep '^RESULT ' > "$OUT/results.txt"
python3 - "$OUT/results.txt" "$OUT/status.txt" <<'PY'
import sys
r = {}
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) >= 3:
        r[p[1]] = p[2]
def f(k, fmt="{:.1f}"):
    v = r.get(k)
    try:
        return fmt.format(float(v))
    except (TypeError, ValueError):
        return v if v is not None else "-"
print("\n==== gpu-sched summary ====")
print(open(sys.argv[2]).read().rstrip())
print("\n64 x rms_norm_fwd 1x4096 bf16, us per iteration (median):")
for k in ["floor.wait_after_each", "floor.one_stream_one_wait", "floor.one_stream_pdl_one_wait",
          "floor.hand_graph", "floor.hand_graph_pdl", "floor_io.one_stream_one_wait",
          "floor_io.one_stream_pdl_one_wait", "floor_io.hand_graph", "floor_io.hand_graph_pdl",
          "floor.hand_graph_edges", "floor_io.hand_graph_pdl_copy_kernels",
          "baton.strict", "baton.boundary",
          "baton.boundary_nopdl", "baton.graph", "baton.graph_nopdl", "baton.graph_notune"]:
    w = r.get(k.replace(".median_us", "") + ".host_waits_per_run")
    print(f"  {k:32s} {f(k + '.median_us'):>9s}" + (f"   waits/run {float(w):.2f}" if w else ""))
print(f"  {'torch chain: sync each/one sync/graph':32s} {f('torch.chain64.sync_after_each_us')} / "
      f"{f('torch.chain64.one_sync_us')} / {f('torch.chain64.cuda_graph_us')}")
print("\nRFC plan, us per iteration (median):")
for k in ["rfc.strict", "rfc.boundary", "rfc.graph", "rfc.graph_no_ahead"]:
    w = r.get(k + ".host_waits_per_run")
    print(f"  {k:32s} {f(k + '.median_us'):>9s}" + (f"   waits/run {float(w):.2f}" if w else ""))
print(f"  {'torch eager (sync for CPU step)':32s} {f('torch.rfc.eager_sync_for_cpu_us'):>9s}")
print(f"  {'torch, sync after every op':32s} {f('torch.rfc.sync_after_each_op_us'):>9s}")
print("\nratios vs targets:")
checks = [("graph_nopdl/hand_graph", "<=", 1.15), ("graph/hand_graph_pdl", "<=", 1.10),
          ("graph/hand_graph_pdl_issue43", "<=", 1.05), ("graph_notune/hand_graph_pdl", "<=", 1.05),
          ("hand_graph_edges/hand_graph_pdl", "<=", 1.05),
          ("graph/hand_graph_pdl_copy_kernels", "<=", 1.05),
          ("boundary_nopdl/one_stream_one_wait", "<=", 1.10),
          ("boundary/one_stream_pdl_one_wait", "<=", 1.10), ("strict/graph", ">=", 6.0),
          ("rfc_strict/rfc_graph", ">=", 2.5),
          ("graph_nopdl/hand_graph_io", "<=", 1.15), ("graph/hand_graph_pdl_io", "<=", 1.10),
          ("boundary_nopdl/one_stream_io", "<=", 1.10), ("boundary/one_stream_pdl_io", "<=", 1.10),
          ("floor_wait_after_each/hand_graph_pdl", ">=", 6.0)]
for name, op, b in checks:
    v = r.get("ratio." + name)
    ok = v is not None and (float(v) <= b if op == "<=" else float(v) >= b)
    print(f"  {name:40s} {f('ratio.' + name, '{:.2f}'):>6s}  {op} {b:<5} {'PASS' if ok else 'FAIL'}")
g, t = r.get("rfc.graph.median_us"), r.get("torch.rfc.eager_sync_for_cpu_us")
if g and t:
    print(f"  {'torch_eager/rfc_graph':40s} {float(t) / float(g):6.2f}  >  1     "
          f"{'PASS' if float(g) < float(t) else 'FAIL'}")
print(f"  {'scheduler own ns/step (boundary)':40s} {f('sched_own_ns_per_step', '{:.0f}'):>6s}  <= 1000")
print("\ngemm: delegate / cublasGemmEx (per call, back to back):")
for k in sorted(x for x in r if x.startswith("gemm.") and x.endswith(".ratio")):
    s = k[5:-6]
    print(f"  {s:18s} {f(k, '{:.3f}')} / {f('gemm.' + s + '.b2b_ratio', '{:.3f}')}   "
          f"delegate {f('gemm.' + s + '.delegate_us', '{:.2f}')} us, "
          f"cublas {f('gemm.' + s + '.cublas_us', '{:.2f}')} us")
print(f"all bench_sched targets: {r.get('all_targets', '-')}; gemm agree: {r.get('gemm.agree', '-')}")
PY
