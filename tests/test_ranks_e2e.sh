#!/usr/bin/env bash
# test_ranks_e2e.sh BATON [PYTHON]: one process per GPU, end to end. The tutorial plan sharded over
# cuda:0 and cuda:1 (scripts/shard.py) runs once in one process and once as two `baton run
# --rank=R --world=2 --rendezvous=FILE` processes; every output each rank makes must have the
# bits of the one-process run, in every sync mode. The inputs are the CLI's seeded defaults, the
# same in every process. Needs two CUDA GPUs and NCCL (exit 77, a skip, otherwise): on the test
# device ranks are threads of one process, which tests/test_multigpu.c covers.
set -u
baton=${1:?usage: test_ranks_e2e.sh BATON [PYTHON]}
py=${2:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 2 ]; then
  echo "SKIP: one process per GPU needs two CUDA GPUs (found ${ngpu:-0})"
  exit 77
fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$root/scripts/shard.py" --devices cuda:0,cuda:1 "$root/examples/plans/rmsnorm_tutorial.json" \
  > "$tmp/two.json" || { echo "FAIL: shard.py"; exit 1; }
out0="y.0 invvar.0 grad_x.0 grad_weight"
out1="y.1 invvar.1 grad_x.1"
outs() { for n in $1; do printf -- '--output %s=%s/%s.npy ' "$n" "$2" "$n"; done; }
fail=0
for mode in strict boundary graph; do
  mkdir -p "$tmp/$mode/one" "$tmp/$mode/r0" "$tmp/$mode/r1"
  # shellcheck disable=SC2046
  if ! timeout 60 "$baton" run -q --gpu=cuda --mode=$mode --iters=3 "$tmp/two.json" \
       $(outs "$out0 $out1" "$tmp/$mode/one") > "$tmp/$mode/one.log" 2>&1; then
    echo "FAIL: $mode: the one-process run"; cat "$tmp/$mode/one.log"; fail=1; continue
  fi
  rv="$tmp/$mode/rendezvous"
  t0=$(date +%s.%N)
  # each rank bounded: a rank that stops after NCCL's join leaves the other waiting on its GPU
  # shellcheck disable=SC2046
  timeout 60 "$baton" run -q --gpu=cuda --mode=$mode --iters=3 --rank=0 --world=2 \
    --rendezvous="$rv" --rendezvous-timeout=30 \
    "$tmp/two.json" $(outs "$out0" "$tmp/$mode/r0") > "$tmp/$mode/r0.log" 2>&1 &
  p0=$!
  # shellcheck disable=SC2046
  timeout 60 "$baton" run -q --gpu=cuda --mode=$mode --iters=3 --rank=1 --world=2 \
    --rendezvous="$rv" --rendezvous-timeout=30 \
    "$tmp/two.json" $(outs "$out1" "$tmp/$mode/r1") > "$tmp/$mode/r1.log" 2>&1 &
  p1=$!
  wait $p0; rc0=$?
  wait $p1; rc1=$?
  t1=$(date +%s.%N)
  if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then
    echo "FAIL: $mode: rank 0 rc $rc0, rank 1 rc $rc1"; cat "$tmp/$mode/r0.log" "$tmp/$mode/r1.log"
    fail=1; continue
  fi
  [ -e "$rv" ] && { echo "FAIL: $mode: rank 0 left the rendezvous file"; fail=1; }
  for n in $out0; do
    cmp -s "$tmp/$mode/one/$n.npy" "$tmp/$mode/r0/$n.npy" ||
      { echo "FAIL: $mode: rank 0's $n differs from the one-process run"; fail=1; }
  done
  for n in $out1; do
    cmp -s "$tmp/$mode/one/$n.npy" "$tmp/$mode/r1/$n.npy" ||
      { echo "FAIL: $mode: rank 1's $n differs from the one-process run"; fail=1; }
  done
  printf 'ranks %s: 2 processes, %s outputs compared bitwise (%.1f s with start-up)\n' "$mode" \
    "$(echo $out0 $out1 | wc -w)" "$(awk "BEGIN { print $t1 - $t0 }")"
done
[ $fail -eq 0 ] && echo "PASS: two ranks equal one process bitwise in every mode"
exit $fail
