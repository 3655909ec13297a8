#!/bin/bash
# gpu-ab.sh: "nothing got slower", measured in one call on the GPU machine. Builds a baseline
# source tree (default .base/, e.g. `git archive REV | tar -x -C .base`) and this tree with CUDA,
# runs this tree's GPU tests, then the same benchmarks on both builds, interleaved A B A B so that
# drift in the machine lands on both: bench_host, `baton bench` on the bundled plans (every mode),
# bench_sched and bench_kernels --small. Prints a table of B/A ratios last; logs go to $OUT.
#   From the device tool: run(command="bash scripts/gpu-ab.sh", carry=[".deps", ".base"])
#   env: BASE (baseline source, .base), ROUNDS (2), JOBS (16), PARTS ("tests host plans sched
#        kernels"), TESTS_ARGS (extra ctest args)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-$root/gpu-ab-out}
BASE=${BASE:-.base}
ROUNDS=${ROUNDS:-2}
JOBS=${JOBS:-16}
PARTS=${PARTS:-"tests host plans sched kernels"}
has() { [[ " $PARTS " == *" $1 "* ]]; }
mkdir -p "$OUT"
log=$OUT/ab.log
: > "$log"
say() { echo "$*" | tee -a "$log"; }
t0=$(date +%s)

{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  nvcc --version | tail -1; } 2>&1 | tee -a "$log"
eval "$(bash scripts/deps-prefix.sh)"
export BATON_SOURCE_DIR=$root

build() { # build SRC DIR
  cmake -C "$BATON_DEPS_PREFIX/deps.cmake" -S "$1" -B "$2" -DBATON_CUDA=ON -DBATON_BENCH=ON \
    -DCMAKE_BUILD_TYPE=Release > "$OUT/build-$(basename "$2").log" 2>&1 &&
    cmake --build "$2" -j"$JOBS" >> "$OUT/build-$(basename "$2").log" 2>&1
}
need_a=0
for p in host plans sched kernels; do has $p && need_a=1; done
pa=
[ $need_a = 1 ] && { build "$BASE" "$root/build-a" & pa=$!; }
build . "$root/build-b" & pb=$!
[ -n "$pa" ] && { wait $pa && say "build A ($BASE): ok" || say "build A: FAILED"; }
wait $pb && say "build B (this tree): ok" || { say "build B: FAILED";
  grep -E "error" "$OUT/build-build-b.log" | head -20; }
say "builds: $(( $(date +%s) - t0 )) s"

if has tests; then
  (cd build-b && ctest -L gpu --output-on-failure --timeout 300 -j2 ${TESTS_ARGS:-}) \
    > "$OUT/ctest_gpu.log" 2>&1
  say "ctest -L gpu (B): $(grep -E 'tests passed' "$OUT/ctest_gpu.log" | tail -1)"
  grep -E "\*\*\*Failed|\[FAIL\]|Failed  " "$OUT/ctest_gpu.log" | head -20 | tee -a "$log"
  # `package` is left out: the GPU machine's deps prefix sets PKG_CONFIG_SYSROOT_DIR, which
  # would prefix the installed test prefix too; CI runs it.
  (cd build-b && ctest -L cpu -E "^package$" --output-on-failure --timeout 300 -j8) \
    > "$OUT/ctest_cpu.log" 2>&1
  say "ctest -L cpu (B, on the GPU machine): $(grep -E 'tests passed' "$OUT/ctest_cpu.log" | tail -1)"
  grep -E "\*\*\*Failed|\[FAIL\]|Failed  " "$OUT/ctest_cpu.log" | head -20 | tee -a "$log"
fi

# Each benchmark prints lines; we keep them per side and round, and compare the medians.
run_side() { # run_side SIDE ROUND
  local s=$1 r=$2 b=$root/build-$1 src
  [ "$s" = a ] && src=$BASE || src=.
  if has host; then
    "$b/bench_host" > "$OUT/host-$s-$r.txt" 2>&1
  fi
  if has plans; then
    for p in rfc rmsnorm_chain64 rmsnorm_tutorial; do
      (cd "$src" && timeout 120 "$b/baton" bench "examples/plans/$p.json" --gpu=cuda \
         --modes=strict,boundary,graph --iters=300 --warmup=30 --format=csv -q) \
        > "$OUT/plan-$p-$s-$r.csv" 2>&1
    done
  fi
  if has sched; then
    (cd "$src" && timeout 200 "$b/bench_sched" --src "$src" --rounds 3) \
      > "$OUT/sched-$s-$r.txt" 2>&1
  fi
  if has kernels; then
    timeout 200 "$b/bench_kernels" --small > "$OUT/kernels-$s-$r.txt" 2>&1
  fi
}
for r in $(seq 1 "$ROUNDS"); do
  [ $need_a = 1 ] || break
  run_side a "$r"
  run_side b "$r"
done
say "benchmarks: $(( $(date +%s) - t0 )) s"

python3 - "$OUT" "$ROUNDS" <<'EOF' | tee -a "$log"
import csv, glob, os, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
rows = []
# bench_host: "name   value unit ..."
def host_vals(path):
    vals = {}
    for line in open(path, errors="replace"):
        m = re.match(r"^(load \+ validate \+ analyse|dispatch per step.*?|scheduler's own cost per step)\s+([0-9.]+)\s*(ms|ns|us)", line)
        if m:
            vals[m.group(1).strip()] = float(m.group(2))
    return vals
for key in ["load + validate + analyse", "dispatch per step (CPU, no-op kernel)",
            "scheduler's own cost per step"]:
    a = med([host_vals(p).get(key) for p in glob.glob(f"{out}/host-a-*.txt")])
    b = med([host_vals(p).get(key) for p in glob.glob(f"{out}/host-b-*.txt")])
    rows.append(("bench_host: " + key, a, b))
# baton bench csv: find the p50 column per mode
def plan_vals(path):
    vals = {}
    try:
        rd = list(csv.reader(open(path, errors="replace")))
    except Exception:
        return vals
    hdr = None
    for r in rd:
        if r and r[0] == "mode":
            hdr = r
            continue
        if hdr and len(r) == len(hdr):
            d = dict(zip(hdr, r))
            for k in d:
                if "p50" in k:
                    try:
                        vals[d["mode"]] = float(d[k])
                    except ValueError:
                        pass
                    break
    return vals
for p in ["rfc", "rmsnorm_chain64", "rmsnorm_tutorial"]:
    for mode in ["strict", "boundary", "graph"]:
        a = med([plan_vals(f).get(mode) for f in glob.glob(f"{out}/plan-{p}-a-*.csv")])
        b = med([plan_vals(f).get(mode) for f in glob.glob(f"{out}/plan-{p}-b-*.csv")])
        rows.append((f"baton bench {p} {mode} p50 (us)", a, b))
# bench_sched / bench_kernels: every "RESULT name value" line
def result_vals(path):
    # "RESULT key value" (bench_sched) or "RESULT kernels ... us=V ..." (bench_kernels)
    vals = {}
    for line in open(path, errors="replace"):
        m = re.match(r"^RESULT\s+(.*?)\s+us=([0-9.eE+-]+)", line)
        if m:
            vals[m.group(1)] = float(m.group(2))
            continue
        m = re.match(r"^RESULT\s+(\S+)\s+([0-9.eE+-]+)\s*$", line)
        if m and ("median_us" in m.group(1) or "ns_per" in m.group(1) or "ratio." in m.group(1)):
            vals[m.group(1)] = float(m.group(2))
    return vals
for kind in ["sched", "kernels"]:
    keys = set()
    for f in glob.glob(f"{out}/{kind}-*-*.txt"):
        keys |= set(result_vals(f))
    for k in sorted(keys):
        a = med([result_vals(f).get(k) for f in glob.glob(f"{out}/{kind}-a-*.txt")])
        b = med([result_vals(f).get(k) for f in glob.glob(f"{out}/{kind}-b-*.txt")])
        rows.append((f"{kind}: {k}", a, b))
print(f"\n{'quantity':60s} {'A (base)':>12s} {'B (this)':>12s} {'B/A':>7s}")
for name, a, b in rows:
    r = f"{b / a:7.3f}" if a and b else "      -"
    fa = f"{a:12.3f}" if a is not None else "           -"
    fb = f"{b:12.3f}" if b is not None else "           -"
    print(f"{name[:60]:60s} {fa} {fb} {r}")
EOF
say "gpu-ab: $(( $(date +%s) - t0 )) s"
tar czf "$OUT/logs.tgz" -C "$OUT" --exclude=logs.tgz . 2>/dev/null
