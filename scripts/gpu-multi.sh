#!/bin/bash
# gpu-multi.sh: issue 43's two open two-GPU figures in one bounded call, each with its peer from
# the same call, and what explains them:
#   pipeline: the RFC plan in two stages (scripts/pipeline.py) against one GPU, 8 runs in flight on
#     a pool: runs/s, p50/p99, each GPU's busy fraction and device time a run (baton bench), the
#     pool's own ceiling on plans of one small step per stage, 16 in flight, the order between the
#     GPUs outside the graphs, and bench_pipeline's reading of the traced runs (stage overlap,
#     hand-off, host time a run; traces in $OUT);
#   scaling: the tutorial plan at 2 x 65536 x 4096 bf16 on one GPU against its sharded forms
#     (grad_weight bitwise, and all_reduce with each shard's layout fitted for speed), one shard's
#     work alone on one GPU with either layout, one run at a time and two in flight, each GPU's
#     timeline of a traced run (bench_scaling), and XLA's efficiency, each call blocked and
#     dispatch pipelined (bench/multigpu/xla_scaling.py);
#   then the two-GPU tests (test_multigpu_cuda, ranks_e2e), bounded; last, the same scaling at
#   part_grad 32 (the bitwise form's shards then hold as many blocks as one GPU's plan at 16).
# Every step runs under `timeout` and is skipped once the call's budget (BUDGET seconds, build
# included) would be passed. The summary prints last; traces and logs go to $OUT.
#   run(kind="nvidia-h200-x2", carry=[".deps"], command="NCCL_NVLS_ENABLE=0 bash scripts/gpu-multi.sh")
#   env: BUDGET (400), JOBS (32), SKIP_BUILD=1 (use $BUILD as it is), PARTS ("pipeline scaling
#        tests"; also "glaunch": bench_graph_launch, the host's time in cudaGraphLaunch, hand-built
#        and baton's graphs, which runs on one GPU too (GLAUNCH_ARGS: more arguments, e.g.
#        --no-pdl); "convoy": the RFC plans' runtimes on threads run one at a time, queued and at
#        stream priorities, against the GPUs' floor; "endwait": the sharded plan with the end-of-run events recorded first and
#        before each wait, in the same rounds; "launch": the host's time in a pool's runs;
#        "scaling2": the short scaling form, one GPU, both sharded forms and XLA; "poolscale": the
#        sharded forms on a pool, 2 in flight, inputs and outputs on the GPUs, and XLA;
#        "poolcopies": the same through baton bench, copies through the host); for a smoke test of the script without GPUs: SKIP_BUILD=1 BUILD=build-cpu GPU=sim
#        NGPU=2 (the pipeline part on the test device)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
final=${OUT:-$root/gpu-multi-out}
# run after another script in the same call (gpu-round.sh): keep its summary, write beside it
[ -e "$final/summary.txt" ] && final=$final/gpu-multi
mkdir -p "$final"
work=$final/logs
mkdir -p "$work"
BUDGET=${BUDGET:-400}
JOBS=${JOBS:-32}
PARTS=${PARTS:-"pipeline scaling tests"}
BUILD=${BUILD:-build-gpu}
GPU=${GPU:-cuda}
t0=$(date +%s)
summary=$final/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
left() { echo $((BUDGET - ($(date +%s) - t0))); }
# tmo LIMIT: a step's timeout, LIMIT seconds or what is left of the budget, whichever is less
tmo() { local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
# room NEED: whether NEED more seconds fit in the budget (else says what is skipped)
room() {
  if [ "$(left)" -lt "$1" ]; then
    say "SKIPPED (budget: $(left) s left, $1 needed): $2"
    return 1
  fi
}
export NCCL_NVLS_ENABLE=0
{ nvidia-smi -L; nvidia-smi topo -m | head -4; } 2>&1 | tee -a "$summary"
ngpu=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}

# Only the targets the parts need; a build dir another script configured (gpu-round.sh, gpu-all.sh)
# is built on as it is, so only what it lacks is compiled.
targets=()
{ has pipeline || has launch; } && targets+=(baton_cli bench_pipeline)
{ has scaling || has scaling2 || has endwait; } && targets+=(bench_scaling baton_cli)
has poolscale && targets+=(bench_scaling)
has poolcopies && targets+=(baton_cli)
has tests && targets+=(baton_cli test_multigpu_cuda)
{ has glaunch || has convoy; } && targets+=(baton_cli bench_graph_launch)
[ -f scripts/deps-prefix.sh ] && eval "$(bash scripts/deps-prefix.sh)"
if [ "${SKIP_BUILD:-0}" != 1 ] && [ ${#targets[@]} -gt 0 ]; then
  if { [ -f "$BUILD/CMakeCache.txt" ] ||
       cmake -C "$BATON_DEPS_PREFIX/deps.cmake" -S . -B "$BUILD" -DBATON_CUDA=ON \
         -DCMAKE_BUILD_TYPE=Release -DBATON_BENCH=ON > "$work/build.log" 2>&1; } &&
     cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" >> "$work/build.log" 2>&1; then
    say "build: ok in $(( $(date +%s) - t0 )) s (${targets[*]})"
  else
    say "build: FAILED"; grep -E "error" "$work/build.log" | head -20 | tee -a "$summary"
    exit 1
  fi
fi
baton=$BUILD/baton

# glaunch (also on one GPU): the host's time in cudaGraphLaunch, hand-built graphs of N empty
# kernels (plain, PDL edges, clusters; 1 to 8 threads; 1 thread per GPU) against baton's graphs of
# the RFC plan's pipeline forms, the RFC plan itself and the sharded tutorial plan (bare launches,
# copies without event nodes, copies or programmatic edges, runtimes in threads); each captured
# graph as DOT (BATON_GRAPH_DOT) in $final/dot
if has glaunch && room 90 "graph launch"; then
  say "== glaunch: host time of graph launches (bench_graph_launch)"
  python3 scripts/pipeline.py --devices cuda:0 --gpu-steps examples/plans/rfc.json \
    > "$work/pipe1.json"
  gplans=("$work/pipe1.json" examples/plans/rfc.json)
  pairs=()
  if [ "$ngpu" -ge 2 ]; then
    python3 scripts/pipeline.py --devices cuda:0,cuda:1 --gpu-steps examples/plans/rfc.json \
      > "$work/pipe2.json"
    # the one-stage plan on cuda:1: with pipe1 on cuda:0, two GPUs that share only the process
    python3 scripts/pipeline.py --devices cuda:1 --gpu-steps examples/plans/rfc.json \
      > "$work/pipe1_gpu1.json"
    python3 scripts/shard.py --devices cuda:0,cuda:1 --reduce all_reduce \
      examples/plans/rmsnorm_tutorial.json > "$work/tut2.json"
    gplans=("$work/pipe1.json" "$work/pipe2.json" "$work/tut2.json")
    pairs=(--pair "$work/pipe1.json" "$work/pipe1_gpu1.json")
  fi
  mkdir -p "$final/dot"
  for p in "${gplans[@]}"; do
    n=$(basename "$p" .json)
    mkdir -p "$final/dot/$n"
    BATON_GRAPH_DOT="$final/dot/$n" BATON_GRAPH_EDGES=1 timeout "$(tmo 20)" "$baton" run -q \
      --gpu="$GPU" --mode=graph --iters=2 "$p" > "$work/dot-$n.log" 2>&1
    say "dot $n (rc $?): $(ls "$final/dot/$n" | tr '\n' ' ')"
    grep "captured:" "$work/dot-$n.log" | head -4 | tee -a "$summary"
  done
  gargs=()
  for p in "${gplans[@]}"; do gargs+=(--plan "$p"); done
  timeout "$(tmo 130)" "$BUILD/bench_graph_launch" "${gargs[@]}" "${pairs[@]}" --budget 100 \
    --json "$final/graph_launch.json" ${GLAUNCH_ARGS:-} 2>&1 | grep -v "^RESULT" |
    tee -a "$summary"
  # the two-stage plan again in other settings: a peer copy by kernel, the order between the GPUs
  # outside the graphs, waits asleep in the driver
  if [ "$ngpu" -ge 2 ]; then
    for e in BATON_PEER_COPY_KERNEL=1 BATON_GRAPH_EVENT_NODES=0 BATON_CUDA_BLOCKING_WAIT=1; do
      room 25 "glaunch $e" || break
      say "== glaunch --quick, $e"
      env "$e" timeout "$(tmo 40)" "$BUILD/bench_graph_launch" --quick --plan "$work/pipe2.json" \
        --budget 30 2>&1 | grep -v "^RESULT" | tee -a "$summary"
    done
  fi
fi

if [ "$ngpu" -lt 2 ]; then
  say "fewer than two GPUs: nothing more to measure"
  exit 0
fi

python3 scripts/pipeline.py --devices cuda:0 --gpu-steps examples/plans/rfc.json > "$work/pipe1.json"
python3 scripts/pipeline.py --devices cuda:0,cuda:1 --gpu-steps examples/plans/rfc.json \
  > "$work/pipe2.json"
# bench PLAN ENV INFLIGHT LABEL [ARGS...]: one `baton bench --inflight` line into the summary
bench() {
  local plan=$1 envv=$2 n=$3 label=$4
  shift 4
  env $envv timeout "$(tmo "${BENCH_TMO:-60}")" "$baton" bench -q --gpu="$GPU" --modes=graph --inflight="$n" \
    --iters=4000 --warmup=200 --format=csv "$@" "$plan" 2>&1 | grep "^graph" |
    tee "$work/$label.csv" | sed "s/^/pipeline $label: /" | tee -a "$summary"
}
# bpipe STAGES ENV INFLIGHT DIR [ARGS...]: bench_pipeline on that plan, traces into $final/DIR
bpipe() {
  local st=$1 envv=$2 n=$3 dir=$final/$4
  shift 4
  mkdir -p "$dir"
  say "== bench_pipeline stages=$st $envv inflight=$n $* (traces in $(basename "$dir")/)"
  env $envv timeout "$(tmo 60)" "$BUILD/bench_pipeline" "$work/pipe$st.json" --inflight "$n" \
    --runs 4000 --traced 96 --gpu "$GPU" --out "$dir" "$@" 2>&1 | grep -v "^baton: note" |
    tee -a "$summary"
}

# convoy: the pool (baton bench --inflight) on the one- and two-stage RFC plans, its instances
# each on streams of its own (BATON_POOL_GROUP=1), in stream groups of 2 (the default for a plan
# over two GPUs) or 4, two alternating rounds at 8 in flight, then priorities, then 16 in flight;
# each line's runs/s over
# the one-stage plan's and its p99/p50. CONVOY_BENCH=1 adds bench_graph_launch's runtimes on
# threads (run one at a time, queued, at priorities) against the GPUs' floor.
if has convoy && room 30 "convoy"; then
  say "== convoy: the pool at 8 and 16 in flight, instances on streams of their own / in stream groups"
  if [ "${CONVOY_BENCH:-0}" = 1 ] && room 60 "convoy bench_graph_launch"; then
    timeout "$(tmo 90)" "$BUILD/bench_graph_launch" --quick --plan "$work/pipe1.json" \
      --plan "$work/pipe2.json" --budget 60 --json "$final/convoy.json" 2>&1 |
      grep -v "^RESULT" | tee -a "$summary"
  fi
  say "columns: mode,inflight,runs,runs_per_s,p50_us,p99_us,loop_busy_us_per_run,gpu_busy (all GPUs),gpu_busy by device,device us a run by device"
  for r in 1 2; do
    room 12 "convoy round $r" || break
    bench "$work/pipe1.json" "" 8 "convoy,stages=1,r$r"
    bench "$work/pipe2.json" "BATON_POOL_GROUP=1" 8 "convoy,stages=2,no-groups,r$r"
    bench "$work/pipe2.json" "" 8 "convoy,stages=2,groups-of-2,r$r"
    bench "$work/pipe2.json" "BATON_POOL_GROUP=4" 8 "convoy,stages=2,groups-of-4,r$r"
  done
  if room 8 "convoy, spread priorities"; then
    bench "$work/pipe2.json" "BATON_POOL_GROUP=1 BATON_POOL_PRIORITIES=1" 8 \
      "convoy,stages=2,no-groups,spread"
    bench "$work/pipe2.json" "BATON_POOL_PRIORITIES=2" 8 "convoy,stages=2,groups-of-2,two-level"
  fi
  for r in 1 2; do
    room 12 "convoy, 16 in flight, round $r" || break
    bench "$work/pipe1.json" "" 16 "convoy,stages=1,16,r$r"
    bench "$work/pipe2.json" "BATON_POOL_GROUP=1" 16 "convoy,stages=2,no-groups,16,r$r"
    bench "$work/pipe2.json" "" 16 "convoy,stages=2,groups-of-2,16,r$r"
    bench "$work/pipe2.json" "BATON_POOL_GROUP=4" 16 "convoy,stages=2,groups-of-4,16,r$r"
  done
  python3 - "$work" <<'PY' 2>&1 | tee -a "$summary"
import glob, os, sys
w = sys.argv[1]
rows = {}
for f in sorted(glob.glob(w + "/convoy,*.csv")):
    try:
        c = open(f).read().strip().split(",")
        rows[os.path.basename(f)[len("convoy,"):-4]] = (float(c[3]), float(c[4]), float(c[5]))
    except (OSError, ValueError, IndexError):
        pass
def mean(v):
    return sum(v) / len(v) if v else None
one8 = mean([r[0] for k, r in rows.items() if k.startswith("stages=1,r")])
one16 = mean([r[0] for k, r in rows.items() if k.startswith("stages=1,16")])
for k, (rate, p50, p99) in sorted(rows.items()):
    one = one16 if ",16" in k else one8
    print("convoy %-26s %8.0f runs/s  %5.2fx the one-stage plan  p50 %6.1f us  p99 %6.1f us  "
          "p99/p50 %.2f (bars: >= 1.8x, <= 1.5)" % (k, rate, rate / one if one else float("nan"),
                                                    p50, p99, p99 / p50 if p50 else float("nan")))
PY
fi

if has pipeline && room 60 "pipeline"; then
  say "== pipeline: RFC layers 0-3 on cuda:0, 4-7 on cuda:1, graph mode"
  # the pool's own ceiling: one small step per stage (no 32 MiB matrix), same boundary
  python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def plan(devs):
    t = [{"name": "x", "dtype": "bf16", "shape": [1, 4096], "role": "input"}]
    s, prev = [], "x"
    for i, d in enumerate(devs):
        out = "y" if i == len(devs) - 1 else "t%d" % i
        t.append({"name": out, "dtype": "bf16", "shape": [1, 4096],
                  "role": "output" if out == "y" else "intermediate"})
        s.append({"name": "s%d" % i, "kernel": "softshrink", "device": d, "inputs": [prev],
                  "outputs": [out], "attrs": {"lambda": 0.5}})
        prev = out
    return {"format": "baton.plan", "version": 1, "name": "tiny-%d" % len(devs), "tensors": t,
            "steps": s}
json.dump(plan(["cuda:0", "cuda:0"]), open(w + "/tiny1.json", "w"))
json.dump(plan(["cuda:0", "cuda:1"]), open(w + "/tiny2.json", "w"))
PY
  say "columns: mode,inflight,runs,runs_per_s,p50_us,p99_us,loop_busy_us_per_run,gpu_busy (all GPUs),gpu_busy by device,device us a run by device"
  bench "$work/pipe1.json" "" 8 "stages=1"
  bench "$work/pipe2.json" "" 8 "stages=2"
  bench "$work/tiny1.json" "" 8 "tiny,1-GPU"
  bench "$work/tiny2.json" "" 8 "tiny,2-GPU"
  room 40 "pipeline variants" &&
  { bench "$work/pipe1.json" "" 16 "stages=1,inflight=16"
    bench "$work/pipe2.json" "" 16 "stages=2,inflight=16"
    bench "$work/pipe2.json" "BATON_GRAPH_EVENT_NODES=0" 8 "stages=2,waits-outside"
    bench "$work/pipe2.json" "CUDA_DEVICE_MAX_CONNECTIONS=32" 8 "stages=2,32-queues"
    bench "$work/pipe2.json" "BATON_PEER_COPY_KERNEL=1" 8 "stages=2,peer-copy-kernel"
    bench "$work/pipe1.json" "BATON_CUDA_BLOCKING_WAIT=1" 8 "stages=1,blocking-wait"
    bench "$work/pipe2.json" "BATON_CUDA_BLOCKING_WAIT=1" 8 "stages=2,blocking-wait"
    bench "$work/tiny2.json" "BATON_CUDA_BLOCKING_WAIT=1" 8 "tiny,2-GPU,blocking-wait"; }
  python3 - "$work" <<'PY' 2>&1 | tee -a "$summary"
import sys
w = sys.argv[1]
def row(n):
    try:
        f = open("%s/%s.csv" % (w, n)).read().strip().split(",")
        return float(f[3]), float(f[4]), float(f[5])
    except (OSError, ValueError, IndexError):
        return None
for n, sfx in ((8, ""), (16, ",inflight=16")):
    one, two = row("stages=1" + sfx), row("stages=2" + sfx)
    if one and two:
        print("pipeline, %d in flight: 2 stages %.0f runs/s over 1 GPU %.0f: %.2fx (target >= 1.8); "
              "p99/p50 %.2f (target <= 1.5)" % (n, two[0], one[0], two[0] / one[0], two[2] / two[1]))
t1, t2 = row("tiny,1-GPU"), row("tiny,2-GPU")
if t1 and t2:
    print("pool ceiling (one small step per stage, 8 in flight): 1 GPU %.0f runs/s, 2 GPUs %.0f: "
          "if the RFC figures sit at these, the host side caps them, not the GPUs"
          % (t1[0], t2[0]))
PY
  room 30 "bench_pipeline stages=2" && bpipe 2 "" 8 trace-pipe2
  room 30 "bench_pipeline stages=1" && bpipe 1 "" 8 trace-pipe1
  room 30 "bench_pipeline peer copy kernel" &&
    bpipe 2 BATON_PEER_COPY_KERNEL=1 8 trace-pipe2-peer-kernel
fi

# the tutorial plan at 2 x 65536 x 4096 bf16 rows on one GPU (one.json; one32.json with part_grad
# 32) and its sharded forms over 2 GPUs (two.json, two32.json bitwise; two_allreduce.json)
scaling_plans() {
  # one.json: part_grad 16 rows, as the tutorial plan has; one32.json: 32 rows, so that each
  # shard of the bitwise form holds 16 blocks, as one GPU's plan at 16 does
  python3 - "$work" <<'PY'
import json, sys
for name, pg in (("one", 16), ("one32", 32)):
    p = json.load(open("examples/plans/rmsnorm_tutorial.json"))
    shapes = {"x": [131072, 4096], "grad_y": [131072, 4096], "y": [131072, 4096],
              "grad_x": [131072, 4096], "weight": [4096], "grad_weight": [4096],
              "invvar": [131072], "part_grad": [pg, 4096]}
    for t in p["tensors"]:  # the backward's P is part_grad's first dim
        t["shape"] = shapes[t["name"]]
    p["name"] = "rmsnorm-tutorial-large" + ("" if pg == 16 else "-pg32")
    json.dump(p, open("%s/%s.json" % (sys.argv[1], name), "w"))
PY
  python3 scripts/shard.py --devices cuda:0,cuda:1 "$work/one.json" > "$work/two.json"
  python3 scripts/shard.py --devices cuda:0,cuda:1 "$work/one32.json" > "$work/two32.json"
  python3 scripts/shard.py --devices cuda:0,cuda:1 --reduce all_reduce "$work/one.json" \
    > "$work/two_allreduce.json"
}

# pool_scaling: the sharded plans with 2 runs in flight on a pool (baton bench --inflight=2, graph
# mode) against the one-GPU plan's pool, efficiency = runs/s over twice one GPU's. A pool's runs
# copy the plan's inputs to the GPUs and its outputs back (4 GB a run, 60-90 ms); --no-copies
# keeps the jobs' own copies out, and the CSV's last column gives each GPU's device time a run
pool_scaling() {
  room 40 "scaling on a pool" || return 0
  BENCH_TMO=90 bench "$work/one.json" "" 2 "scaling,pool,one" --iters=200 --no-copies
  BENCH_TMO=90 bench "$work/two_allreduce.json" "" 2 "scaling,pool,two_allreduce" --iters=200 \
    --no-copies
  BENCH_TMO=90 bench "$work/two.json" "" 2 "scaling,pool,two" --iters=200 --no-copies
  python3 - "$work" <<'PY' 2>&1 | tee -a "$summary"
import sys
w = sys.argv[1]
def rate(n):
    try:
        return float(open("%s/scaling,pool,%s.csv" % (w, n)).read().strip().split(",")[3])
    except (OSError, ValueError, IndexError):
        return None
one = rate("one")
for p in ("two_allreduce", "two"):
    r = rate(p)
    if one and r:
        print("scaling %s on a pool, 2 in flight: %.0f runs/s against one GPU's %.0f: efficiency "
              "%.3f (target >= 0.95 and >= XLA pipelined)" % (p, r, one, r / (2 * one)))
PY
}

# scaling2: the short form for a second call (one GPU, the two sharded forms, XLA)
if { has scaling || has scaling2; } && room 60 "scaling"; then
  say "== scaling: the tutorial plan at 2 x 65536 x 4096 bf16 rows, fwd+bwd, graph mode"
  scaling_plans
  # one shard's forward and backward alone on cuda:0: its kernels as the sharded plan runs them
  # (half: the layout of the bitwise form; half_fitted: fitted to the shard's own blocks)
  python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
for src, dst in (("two", "half"), ("two_allreduce", "half_fitted")):
    p = json.load(open("%s/%s.json" % (w, src)))
    steps = [s for s in p["steps"] if s["name"] in ("forward.0", "backward.0")]
    used = {n for s in steps for n in s["inputs"] + s["outputs"]}
    made = {n for s in steps for n in s["outputs"]}
    tensors = []
    for t in p["tensors"]:
        if t["name"] not in used:
            continue
        if t["name"] in made:
            t["role"] = "output"
        tensors.append(t)
    p.update(name=dst, tensors=tensors, steps=steps)
    json.dump(p, open("%s/%s.json" % (w, dst), "w"))
PY
  mkdir -p "$final/trace-scaling"
  extra=("$work/half.json" "$work/half_fitted.json")
  has scaling || extra=()
  timeout "$(tmo 150)" "$BUILD/bench_scaling" "$work/one.json" "$work/two.json" \
    "$work/two_allreduce.json" "${extra[@]}" --inflight --pool \
    --trace "$final/trace-scaling" 2>&1 | tee "$work/scaling.log" | tee -a "$summary"
  python3 - "$work/scaling.log" <<'PY' 2>&1 | tee -a "$summary"
import re, sys
r = {}
for line in open(sys.argv[1]):
    m = re.match(r"RESULT scaling\.(\S+) (\S+)", line)
    if m:
        r[m.group(1)] = float(m.group(2))
one = r.get("one_us")
if one:
    for h in ("half", "half_fitted"):
        if h + ".us" in r:
            print("scaling: one shard alone on one GPU (%s layout): %.1f us against a perfect "
                  "half of one GPU's %.1f: %.1f us above it" % (
                      "bitwise" if h == "half" else "fitted", r[h + ".us"], one / 2,
                      r[h + ".us"] - one / 2))
    for p in ("two", "two_allreduce"):
        if p + ".efficiency" in r:
            print("scaling %s: %.3f one run at a time, %s with 2 in flight, %s with 2 in flight on "
                  "a pool (target >= 0.95 and >= XLA pipelined)" % (
                      p, r[p + ".efficiency"],
                      "%.3f" % r[p + ".inflight_efficiency"]
                      if p + ".inflight_efficiency" in r else "n/a",
                      "%.3f" % r[p + ".pool_efficiency"] if p + ".pool_efficiency" in r else "n/a"))
PY
  xruns=30
  has scaling || xruns=20 # the short form
  room 45 "xla_scaling" &&
  JAX_PLATFORMS=cuda timeout "$(tmo 150)" \
    python3 bench/multigpu/xla_scaling.py --runs "$xruns" 2>&1 | grep -vE "^(W|I)[0-9]{4}" |
    tail -8 | tee -a "$summary"
fi

# poolscale: the sharded plans one run at a time and with 2 in flight on a pool whose instances
# hold their inputs and outputs on the GPUs (bench_scaling --pool), then XLA pipelined (a short
# call); poolcopies: the same pools through baton bench, each run copying its 4 GB through the host
if has poolcopies && room 60 "poolcopies"; then
  say "== poolcopies: the sharded tutorial plan on a pool whose runs copy through the host"
  [ -e "$work/two_allreduce.json" ] || scaling_plans
  pool_scaling
fi
if has poolscale && room 60 "poolscale"; then
  say "== poolscale: the sharded tutorial plan with 2 runs in flight on a pool, and XLA"
  [ -e "$work/two_allreduce.json" ] || scaling_plans
  timeout "$(tmo 120)" "$BUILD/bench_scaling" "$work/one.json" "$work/two_allreduce.json" \
    "$work/two.json" --pool --runs 40 --rounds 5 2>&1 | tee "$work/poolscale.log" |
    grep -v "^RESULT" | tee -a "$summary"
  room 45 "xla_scaling" &&
  JAX_PLATFORMS=cuda timeout "$(tmo 150)" python3 bench/multigpu/xla_scaling.py --runs 20 2>&1 |
    grep -vE "^(W|I)[0-9]{4}" | tail -8 | tee -a "$summary"
fi

# Why a graph launch took ~200-450 us of the host in a pool of 8 (the first call): each plan
# alone (1 in flight: the launch's own cost), 4 in flight, and with 8 in flight without PDL
# (programmatic edges in the graphs) and with the host's waits polling with naps.
if has launch && room 25 "launch"; then
  say "== launch: the host's time in a run, by runs in flight, PDL, and the way the host waits"
  # most telling first: the launch alone (1 in flight), then without PDL against the reference
  room 8 "bench_pipeline 2 1" && bpipe 2 "" 1 trace-launch-2-1
  room 8 "no PDL" && bench "$work/pipe2.json" "" 8 "stages=2,no-pdl" --no-pdl
  room 8 "reference" && bench "$work/pipe2.json" "" 8 "stages=2"
  room 8 "bench_pipeline 1 1" && bpipe 1 "" 1 trace-launch-1-1
  room 8 "no PDL" && bench "$work/pipe1.json" "" 8 "stages=1,no-pdl" --no-pdl
  room 8 "reference" && bench "$work/pipe1.json" "" 8 "stages=1"
  room 8 "poll" && bench "$work/pipe2.json" "BATON_CUDA_WAIT_POLL_US=20" 8 "stages=2,poll-20us"
  room 8 "no PDL" && bpipe 2 "" 8 trace-launch-2-nopdl --no-pdl
  room 8 "bench_pipeline 2 4" && bpipe 2 "" 4 trace-launch-2-4
  room 8 "poll" && bench "$work/pipe1.json" "BATON_CUDA_WAIT_POLL_US=20" 8 "stages=1,poll-20us"
fi

# endwait: the sharded plan (all_reduce) one run at a time with each GPU's end-of-run event recorded
# before the first wait (the default) and right before its own wait (BATON_END_RECORDS_FIRST=0),
# the same plan twice in the same rounds of one process
if has endwait && room 60 "endwait"; then
  say "== endwait: end-of-run events recorded first (two_allreduce) or before each wait (_oldwait)"
  [ -e "$work/two_allreduce.json" ] || scaling_plans
  cp "$work/two_allreduce.json" "$work/two_allreduce_oldwait.json"
  timeout "$(tmo 120)" "$BUILD/bench_scaling" "$work/one.json" "$work/two_allreduce.json" \
    "$work/two_allreduce_oldwait.json" --old-end-waits 2 --runs 50 --rounds 8 2>&1 |
    tee "$work/endwait.log" | grep -v "^RESULT" | tee -a "$summary"
fi

if has tests && room 45 "the two-GPU tests"; then
  # test_multigpu_cuda bounds each test to a minute (each rank thread to 45 s), ranks_e2e each
  # rank process to 60 s; ctest's own limit is the last resort
  (cd "$BUILD" && timeout "$(tmo 300)" ctest -R "multigpu_cuda|ranks_e2e" -V \
     --timeout 150) > "$work/ctest_multi.log" 2>&1
  say "ctest multigpu_cuda|ranks_e2e (rc $?): $(grep -E 'tests passed' "$work/ctest_multi.log" | tail -1)"
  grep -E "\[FAIL\]|FAIL:|PASS:|Synthesis|Timeout|\*\*\*" "$work/ctest_multi.log" | head -20 |
    tee -a "$summary"
fi

# last: the bitwise form's cost at part_grad 32 (each shard then holds 16 blocks)
if has scaling && [ -e "$work/two32.json" ] && room 60 "bench_scaling at part_grad 32"; then
  say "== scaling at part_grad 32 (one32: one GPU; two32: bitwise shards of 16 blocks each)"
  timeout "$(tmo 90)" "$BUILD/bench_scaling" "$work/one32.json" "$work/two32.json" --inflight \
    --runs 30 --trace "$final/trace-scaling" 2>&1 | tee "$work/scaling32.log" | tee -a "$summary"
fi

say "gpu-multi: $(( $(date +%s) - t0 )) s"
echo "================ summary"
cat "$summary"
