#!/bin/bash
# gpu-kernels.sh: on the GPU machine, the CUDA-kernel checks and benchmarks of issue 3 in one call:
# the kernel tests, compute-sanitizer memcheck and racecheck on a representative set, the
# bandwidth benchmark (bench_kernels), the JAX example on CUDA through libbaton_jax, and the
# PyTorch / JAX peers, by the clock and, with libkernel_times.so, in device time (CUPTI: the jaxdev
# and torchdev columns, issue 11). Logs go under $OUT (at most 8 files come back); a short table
# prints last.
#
#   bash scripts/gpu-kernels.sh [--no-tests] [--no-sanitizer] [--no-bench] [--no-peers] [--no-jax]
#                               [--sweep]
#   env: OUT (default ./gpu-kernels-out), BIN (prebuilt test_kernels_cuda, bench_kernels,
#        libbaton_jax.so and libkernel_times.so; default build-gpubin), BUILD (build dir when BIN
#        has none; build-gpu),
#        JOBS (16)
# Build here first (scripts/gpu-kernels.sh --prebuild, on the development machine: nvcc compiles
# for sm_90 without a GPU), then from the device tool:
#   run(command="bash scripts/gpu-kernels.sh --sweep", carry=[".deps", "build-gpubin"])
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-$root/gpu-kernels-out}
BIN=${BIN:-build-gpubin}
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-16}
do_tests=1 do_san=1 do_bench=1 do_peers=1 do_jax=1 sweep="" prebuild=0
for a in "$@"; do
  case $a in
    --no-tests) do_tests=0 ;;
    --no-sanitizer) do_san=0 ;;
    --no-bench) do_bench=0 ;;
    --no-peers) do_peers=0 ;;
    --no-jax) do_jax=0 ;;
    --sweep) sweep=--sweep ;;
    --prebuild) prebuild=1 ;;
    *) echo "usage: $0 [--no-tests] [--no-sanitizer] [--no-bench] [--no-peers] [--no-jax] [--sweep] [--prebuild]" >&2
       exit 2 ;;
  esac
done

# ---- --prebuild: on the development machine, build the artefacts into $BIN -------------------
if [ $prebuild = 1 ]; then
  inc=$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())" 2>/dev/null ||
        "$root"/.venv-jax/bin/python -c "import jax.ffi; print(jax.ffi.include_dir())")
  cmake -S . -B "$BUILD" -DBATON_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DBATON_BENCH=ON \
        -DBATON_XLA_FFI_INCLUDE="$inc" -DBATON_XLA_STATUS_LAYOUT=ON > /dev/null &&
  cmake --build "$BUILD" -j"${PREBUILD_JOBS:-2}" --target test_kernels_cuda bench_kernels baton_jax \
    kernel_times &&
  mkdir -p "$BIN" && cp "$BUILD"/test_kernels_cuda "$BUILD"/bench_kernels "$BUILD"/libbaton_jax.so \
    "$BUILD"/libkernel_times.so "$BIN"/ &&
  ls -la "$BIN"
  exit $?
fi

mkdir -p "$OUT"
: > "$OUT/status.txt"
status() { printf '%-22s %s\n' "$1" "$2" | tee -a "$OUT/status.txt"; }
t_start=$(date +%s)
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv; nvcc --version | tail -1; python3 -c "import jax, torch; print('jax', jax.__version__, 'torch', torch.__version__)"; } \
  2>&1 | tee -a "$OUT/status.txt"

eval "$(bash scripts/deps-prefix.sh)"
if [ -x "$BIN/test_kernels_cuda" ] && [ -x "$BIN/bench_kernels" ] && [ -f "$BIN/libbaton_jax.so" ]; then
  status binaries "prebuilt in $BIN"
else
  BIN=$BUILD
  inc=$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())")
  if cmake -C "$BATON_DEPS_PREFIX/deps.cmake" -S . -B "$BUILD" -DBATON_CUDA=ON \
       -DCMAKE_BUILD_TYPE=Release -DBATON_BENCH=ON -DBATON_XLA_FFI_INCLUDE="$inc" -DBATON_XLA_STATUS_LAYOUT=ON > "$OUT/build.log" 2>&1 &&
     cmake --build "$BUILD" -j"$JOBS" --target test_kernels_cuda bench_kernels baton_jax \
       kernel_times >> "$OUT/build.log" 2>&1; then
    status build "ok ($(( $(date +%s) - t_start )) s)"
  else
    status build "FAILED (see build.log)"; grep -E "error" "$OUT/build.log" | head -20; exit 1
  fi
fi

if [ $do_tests = 1 ]; then
  t0=$(date +%s)
  timeout 240 "$BIN/test_kernels_cuda" --jobs=4 --verbose=0 > "$OUT/tests.log" 2>&1
  rc=$?
  status test_kernels_cuda "rc $rc: $(grep -E 'Synthesis' "$OUT/tests.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
  grep -E "\[FAIL\]|failed|Assertion" "$OUT/tests.log" | head -15
fi

if [ $do_bench = 1 ]; then
  t0=$(date +%s)
  timeout ${BENCH_TIMEOUT:-300} "$BIN/bench_kernels" --runs 100 $sweep > "$OUT/bench_kernels.log" 2>&1
  status bench_kernels "rc $? ($(( $(date +%s) - t0 )) s)"
fi
if [ $do_bench = 1 ] && [ $do_jax = 1 ]; then
  t0=$(date +%s)
  JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 timeout 120 \
    python3 examples/jax/rms_norm.py --lib "$BIN/libbaton_jax.so" > "$OUT/jax_example.log" 2>&1
  status "jax example (cuda)" "rc $? ($(( $(date +%s) - t0 )) s)"
  tail -8 "$OUT/jax_example.log"
  JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 timeout 180 \
    python3 examples/jax/legacy_custom_call.py "$BIN/libbaton.so" > "$OUT/jax_legacy.log" 2>&1
  status "jax legacy custom calls (cuda)" "rc $?"
  tail -12 "$OUT/jax_legacy.log"
fi

if [ $do_peers = 1 ]; then
  t0=$(date +%s)
  : > "$OUT/peers.log"
  # device time as well where the CUPTI helper was built (a prebuilt $BIN may predate it)
  devtime=()
  [ -f "$BIN/libkernel_times.so" ] && devtime=(--device-time "$BIN/libkernel_times.so")
  PYTHONUNBUFFERED=1 timeout 180 python3 bench/kernels/peers.py --only torch "${devtime[@]}" \
    >> "$OUT/peers.log" 2>&1
  r1=$?
  # baton's own kernels timed by the same records, in the JAX process, through its FFI handlers
  batonjax=()
  [ ${#devtime[@]} -gt 0 ] && [ -f "$BIN/libbaton_jax.so" ] &&
    batonjax=(--baton-jax "$BIN/libbaton_jax.so")
  JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 timeout 240 \
    python3 bench/kernels/peers.py --only jax "${devtime[@]}" "${batonjax[@]}" \
    >> "$OUT/peers.log" 2>&1
  r2=$?
  dev="no libkernel_times.so"
  [ ${#devtime[@]} -gt 0 ] && dev="$(grep -c '^RESULT peers [a-z]*dev ' "$OUT/peers.log") device-timed"
  status peers "torch rc $r1, jax rc $r2, $dev ($(( $(date +%s) - t0 )) s)"
  grep -E "^device time:" "$OUT/peers.log" | sort -u | head -5
fi

if [ $do_san = 1 ]; then
  t0=$(date +%s)
  san="compute-sanitizer --target-processes all --error-exitcode 86"
  : > "$OUT/sanitizer.log"
  for tool in memcheck racecheck; do
    for f in 'kernels_cuda/rms_norm_is_correct_on_every_launch_path' \
             'kernels_cuda/kernel_chains_are_the_same_with_pdl_and_in_a_captured_graph' \
             'kernels_cuda/bad_descriptors_are_rejected_with_a_reason_and_launch_nothing' \
             'kernels_cuda/argmax_finds_the_first_maximum_and_nan_wins'; do
      [ $tool = racecheck ] && [[ $f == *bad_desc* ]] && continue
      echo "=== $tool $f" >> "$OUT/sanitizer.log"
      timeout ${SAN_TIMEOUT:-60} $san --tool $tool "$BIN/test_kernels_cuda" --jobs=1 --filter="$f" \
        >> "$OUT/sanitizer.log" 2>&1
      r=$?
      sum=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log" | tail -1)
      status "$tool ${f#kernels_cuda/}" "rc $r ${sum:-}" 
    done
  done
  status sanitizer "$(( $(date +%s) - t0 )) s"
fi

# ---- the short table, last --------------------------------------------------------------------
cat "$OUT"/bench_kernels.log "$OUT"/peers.log 2>/dev/null | grep '^RESULT ' > "$OUT/results.txt"
python3 - "$OUT/results.txt" "$OUT/peers.log" <<'PY'
import os, re, sys
rows = [l.split()[1:] for l in open(sys.argv[1])]
kv = lambda r: dict(x.split("=", 1) for x in r if "=" in x)
copy = next((float(kv(r)["tbs"]) for r in rows if r[:2] == ["kernels", "copy"]), None)
peers = {}
for r in rows:
    if r[0] == "peers":
        peers[(r[1], r[2], r[3], r[4])] = kv(r)
# device-timed torch only when it was measured: the table is wide enough
cols = ["torch", "jax", "jaxdev"] + [c for c in ("batondev", "torchdev")
                                     if any(k[0] == c for k in peers)]
print(f"\ncopy bandwidth: {copy} TB/s   (jax: wall clock; jaxdev, batondev, torchdev: device "
      "time, CUPTI, the union of one call's kernels' intervals, k kernels a call; batondev: baton's kernels through "
      "its FFI handlers in the JAX process)")
print("%best: of the best copy kernel moving the shape's x bytes (bench_kernels measure_floor); "
      "%mcpy: of cudaMemcpy of those bytes; %copy: of a 2 GiB cudaMemcpy")
print(f"{'pass':4} {'dt':4} {'shape':>13} {'P':>6} {'how':10} {'us':>9} {'TB/s':>6} {'%copy':>6} {'%best':>6} {'%mcpy':>6}" +
      "".join(f" | {c + ' us':>11} {'TB/s':>6}" + (f" {'k':>2}" if c.endswith("dev") else "")
              for c in cols))


def peer_cols(p, dt, shape):
    out = ""
    for c in cols:
        d = peers.get((c, p, dt, shape), {})
        out += f" | {d.get('us', '-'):>11} {d.get('tbs', '-'):>6}"
        if c.endswith("dev"):
            out += f" {d.get('kernels', '-'):>2}"
    return out


shown = set()
for r in rows:
    if r[0] != "kernels" or r[1] not in ("fwd", "bwd"):
        continue
    d = kv(r)
    p, dt, shape, P, how = r[1], r[2], r[3], r[4], r[5]
    if how == "sweep":
        continue
    shown.add((p, dt, shape))
    print(f"{p:4} {dt:4} {shape:>13} {P[2:]:>6} {how:10} {float(d['us']):9.2f} {float(d['tbs']):6.3f} "
          f"{float(d.get('pct_copy', 0)):6.1f} {float(d.get('pct_best', 0)):6.1f} "
          f"{float(d.get('pct_memcpy', 0)):6.1f}" + peer_cols(p, dt, shape))
# shapes the peers ran that bench_kernels did not (4096x4096 of issue 11)
for p, dt, shape in sorted({k[1:] for k in peers} - shown):
    print(f"{p:4} {dt:4} {shape:>13} {'-':>6} {'peers only':10} {'-':>9} {'-':>6} {'-':>6} {'-':>6} {'-':>6}" +
          peer_cols(p, dt, shape))
for r in rows:
    if r[:2] == ["kernels", "floor"]:
        d = kv(r)
        print(f"floor {r[2]} {r[3]}: best copy kernel {d['tbs']} TB/s ({d['which']}), "
              f"cudaMemcpy {d['memcpy_tbs']} TB/s")
for r in rows:
    if r[:2] == ["kernels", "noop"]:
        print("noop", r[2], kv(r)["us"], "us per launch")
# which kernels XLA ran for a call (the same list for many shapes: each list once)
seen = {}
for line in open(sys.argv[2]) if os.path.exists(sys.argv[2]) else []:
    m = re.match(r"  jaxdev (fwd|bwd) +(\S+) +(\S+) .* kernel\(s\): (.*)", line)
    if m:
        seen.setdefault((m[1], m[4].strip()), []).append(f"{m[2]} {m[3]}")
for (p, names), where in sorted(seen.items()):
    print(f"XLA {p}: {names}   ({', '.join(where)})")
PY
echo "total $(( $(date +%s) - t_start )) s"
cat "$OUT/status.txt" | grep -v "^GPU\|^name" | tail -20
