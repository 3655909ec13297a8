#!/bin/bash
# gpu-async.sh: the numbers of issue 13 on the GPU machine, from an existing CUDA build (BUILD,
# default build-b as scripts/gpu-ab.sh leaves it): how a loop learns GPU work is done
# (bench_async), then the RFC plan through a pool: 1, 2, 4, 8 in flight (graph mode), 8 in flight
# in boundary and strict, its GPU floor at 8 in flight (the same plan with the CPU steps on
# cuda:0, so no host step and no hand-off), and one-at-a-time graph mode (`baton bench`).
# Prints RESULT lines and a table of the ratios last.
#   env: BUILD (build-b), OUT (gpu-async-out), REQ (requests per measurement, 2000)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build-b}
OUT=${OUT:-$root/gpu-async-out}
REQ=${REQ:-2000}
mkdir -p "$OUT"
log=$OUT/async.log
: > "$log"
export BATON_SOURCE_DIR=$root
plan=examples/plans/rfc.json
floor=$OUT/rfc_gpu_only.json
# The floor: every step on cuda:0 (the CPU add becomes the CUDA add_scalar), so a run is one graph.
sed 's/"device": *"cpu"/"device": "cuda:0"/g' "$plan" > "$floor"

timeout 120 "$BUILD/bench_async" --reps 3000 2>&1 | tee -a "$log"
ab() { # ab LABEL ARGS...
  local label=$1; shift
  echo "== $label: async_batch $*" | tee -a "$log"
  timeout 240 "$BUILD/async_batch" --gpu cuda "$@" 2>&1 | sed "s/^RESULT async_batch\./RESULT $label./" |
    tee -a "$log"
}
for n in 1 2 4 8; do ab "graph.$n" --inflight $n --requests "$REQ" --no-timer "$plan"; done
ab "graph.8.lag" --inflight 8 --requests "$REQ" "$plan"
ab "boundary.8" --inflight 8 --requests "$REQ" --mode boundary --no-timer "$plan"
ab "strict.8" --inflight 8 --requests "$REQ" --mode strict --no-timer "$plan"
ab "floor.8" --inflight 8 --requests "$REQ" --no-timer "$floor"
ab "floor.1" --inflight 1 --requests "$REQ" --no-timer "$floor"
# The floor as issue 13 defines it: the same GPU segments of 8 instances, no host steps.
echo "== bench_pool_floor: the RFC plan against its GPU segments only, 8 in flight" | tee -a "$log"
timeout 240 "$BUILD/bench_pool_floor" "$plan" --gpu cuda --inflight 8 --requests "$REQ" \
  --rounds 3 2>&1 | tee -a "$log"
# The same with the gates that queue a segment ahead, which a pool of several no longer uses.
timeout 240 "$BUILD/bench_pool_floor" "$plan" --gpu cuda --inflight 8 --requests "$REQ" \
  --rounds 3 --queue-ahead 2>&1 | sed 's/^RESULT pool_floor\./RESULT pool_floor_ahead./' |
  tee -a "$log"
# The GPU busy fraction at 8 in flight (a second, CUPTI-recorded pass of each measurement).
for pl in "$plan" "$floor"; do
  echo "== baton bench --inflight 8 $(basename "$pl")" | tee -a "$log"
  timeout 120 "$BUILD/baton" bench "$pl" --gpu=cuda --inflight=8 --modes=graph,boundary,strict \
    --iters="$REQ" -q 2>&1 | tee -a "$log"
done
echo "== one at a time: baton bench --modes=graph" | tee -a "$log"
timeout 120 "$BUILD/baton" bench "$plan" --gpu=cuda --modes=graph,boundary,strict --iters=1000 \
  --warmup=50 --format=csv -q 2>&1 | tee -a "$log"

python3 - "$log" <<'PY'
import re, sys
v = {}
for line in open(sys.argv[1]):
    m = re.match(r"^RESULT (\S+) ([0-9.eE+-]+)", line)
    if m:
        v[m.group(1)] = float(m.group(2))
one = None
for line in open(sys.argv[1]):
    if line.startswith("graph,"):
        one = 1e6 / float(line.split(",")[2])  # runs/s from the p50 in us
def g(k):
    return v.get(k)
rows = []
t8, f8 = g("graph.8.runs_per_s"), g("floor.8.runs_per_s")
rows.append(("throughput at 8 in flight / all-on-GPU plan at 8 (stricter floor)",
             t8 / f8 if t8 and f8 else None))
rows.append(("bench_pool_floor: plan / its GPU segments only at 8 (>= 0.90)", g("pool_floor.ratio")))
rows.append(("  the same, queueing ahead forced on (--queue-ahead)", g("pool_floor_ahead.ratio")))
rows.append(("throughput at 8 in flight / one at a time, graph (>= 2)", t8 / one if t8 and one else None))
p50, p99 = g("graph.8.p50_us"), g("graph.8.p99_us")
rows.append(("p99 / p50 latency at 8 in flight (<= 1.5)", p99 / p50 if p50 and p99 else None))
rows.append(("loop thread us per run at 8 in flight (<= 5)", g("graph.8.loop_us_per_run")))
rows.append(("loop timer lag at 8 in flight, ms", g("graph.8.lag.loop_late_ms")))
rows.append(("GPU floor at 8 / GPU floor at 1 (how much 8 instances overlap)",
             f8 / g("floor.1.runs_per_s") if f8 and g("floor.1.runs_per_s") else None))
print("\nissue 13 ratios (RFC plan):")
for n in (1, 2, 4, 8):
    print(f"  graph, {n} in flight: {g(f'graph.{n}.runs_per_s')} runs/s, p50 {g(f'graph.{n}.p50_us')} us")
print(f"  one at a time (baton bench graph p50): {one and round(one, 1)} runs/s")
for name, x in rows:
    print(f"  {name:62s} {x if x is None else round(x, 3)}")
PY
