#!/usr/bin/env bash
# test_pipeline.sh BATON [PYTHON]: the RFC plan split into two pipeline stages (scripts/pipeline.py
# --gpu-steps: layers 0-3 on cuda:0, 4-7 on cuda:1, meeting at a GPU-to-GPU boundary) against the
# same steps on one GPU: the same output bits in every mode, one at a time and with runs in flight
# on a pool over both GPUs, and no host wait at the boundary (`baton inspect`). On the test device
# by default; BATON_E2E_GPUS="sim cuda" adds CUDA on a machine with two GPUs.
set -u
baton=${1:?usage: test_pipeline.sh BATON [PYTHON]}
py=${2:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
"$py" "$root/scripts/pipeline.py" --devices cuda:0 --gpu-steps "$root/examples/plans/rfc.json" \
  > "$tmp/one.json" || { echo "FAIL: pipeline.py (one stage)"; exit 1; }
"$py" "$root/scripts/pipeline.py" --devices cuda:0,cuda:1 --gpu-steps \
  "$root/examples/plans/rfc.json" > "$tmp/two.json" || { echo "FAIL: pipeline.py (two stages)"; exit 1; }
# the stages meet on the GPUs: one boundary, cuda:0 -> cuda:1, and host waits only at the end
"$baton" inspect --json "$tmp/two.json" > "$tmp/inspect.json" || { echo "FAIL: inspect"; exit 1; }
"$py" - "$tmp/inspect.json" <<'PY' || fail=1
import json, sys
a = json.load(open(sys.argv[1]))
b = a["boundaries"]
ok = len(b) == 1 and b[0]["from"] == "cuda:0" and b[0]["to"] == "cuda:1" and not b[0]["host_wait"]
print(("PASS" if ok else "FAIL") + ": one GPU-to-GPU boundary without a host wait:", b)
sys.exit(0 if ok else 1)
PY
# memory: what the split adds to the arenas, constants apart (each GPU loads the constants its
# stage reads), against the bytes that cross the boundary
"$baton" inspect --json "$tmp/one.json" > "$tmp/inspect1.json" || { echo "FAIL: inspect"; exit 1; }
"$py" - "$tmp/inspect1.json" "$tmp/inspect.json" <<'PY' || fail=1
import json, sys
def split(a):
    const = {t["name"] for t in a["tensors"] if t.get("role") == "constant"}
    c = p = 0
    for m in a["memory"]:
        if m["device"] == "cpu":
            continue
        cb = sum(s["bytes"] for s in m["slots"] if s["tensor"] in const)
        c += cb
        p += m["arena_bytes"] - cb
    return c, p
(c1, p1), (c2, p2) = split(json.load(open(sys.argv[1]))), split(json.load(open(sys.argv[2])))
cross = sum(t["bytes"] for t in json.load(open(sys.argv[2]))["transfers"]
            if t["from"].startswith("cuda") and t["to"].startswith("cuda"))
print("memory: GPU arenas without constants %d B on one GPU, %d B in two stages (+%d B; %d B "
      "cross the boundary); constants %d B -> %d B (loaded on each GPU that reads them)"
      % (p1, p2, p2 - p1, cross, c1, c2))
PY
for gpu in ${BATON_E2E_GPUS:-sim}; do
  for mode in strict boundary graph; do
    "$baton" run -q --gpu=$gpu --mode=$mode --iters=2 "$tmp/one.json" --output x8="$tmp/one.npy" \
      > /dev/null || { echo "FAIL: $gpu $mode: one stage"; fail=1; continue; }
    "$baton" run -q --gpu=$gpu --mode=$mode --iters=2 "$tmp/two.json" --output x8="$tmp/two.npy" \
      > /dev/null || { echo "FAIL: $gpu $mode: two stages"; fail=1; continue; }
    if cmp -s "$tmp/one.npy" "$tmp/two.npy"; then echo "PASS: $gpu $mode: two stages = one GPU"
    else echo "FAIL: $gpu $mode: two stages differ from one GPU"; fail=1; fi
  done
  # runs in flight on a pool over both GPUs: every run completes (each run's outputs are its own)
  "$baton" bench -q --gpu=$gpu --modes=graph --inflight=4 --iters=12 --format=csv "$tmp/two.json" \
    > "$tmp/bench.csv" || { echo "FAIL: $gpu: bench --inflight=4"; fail=1; continue; }
  grep -q "^graph,4,12," "$tmp/bench.csv" && echo "PASS: $gpu: 12 runs, 4 in flight" ||
    { echo "FAIL: $gpu: bench --inflight=4 ran $(cat "$tmp/bench.csv")"; fail=1; }
done
exit $fail
