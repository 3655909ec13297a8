#!/bin/bash
# test_bench_schema.sh BATON: `baton bench --format=json` matches docs/bench.schema.json on the
# test device and on the CPU fallback; with the fallback the ratios are null and say why, on the
# test device they are numbers; a document that breaks the schema is caught.
set -uo pipefail
baton=${1:?usage: test_bench_schema.sh path/to/baton}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for gpu in sim cpu; do
  if ! "$baton" bench --gpu=$gpu --iters=3 --warmup=1 --format=json -q examples/plans/rfc.json \
       > "$tmp/$gpu.json" 2> "$tmp/err"; then
    echo "FAIL: bench --gpu=$gpu: $(cat "$tmp/err")"; fail=1; continue
  fi
  python3 tests/check_schema.py docs/bench.schema.json "$tmp/$gpu.json" > "$tmp/check" ||
    { echo "FAIL: --gpu=$gpu:"; cat "$tmp/check"; fail=1; }
done
python3 - "$tmp/sim.json" "$tmp/cpu.json" <<'PY' || fail=1
import json, sys
sim, cpu = (json.load(open(p)) for p in sys.argv[1:])
ok = True
if sim["fallback"] or any(m["p50_ratio_strict_over_mode"] is None for m in sim["modes"]):
    print("FAIL: the test device's ratios are missing"); ok = False
if any(m["ran_on"] != "sim (test device)" for m in sim["modes"]):
    print("FAIL: sim modes do not say where they ran"); ok = False
if not cpu["fallback"] or not cpu["ratio_note"] or \
        any(m["p50_ratio_strict_over_mode"] is not None or m["ran_on"] != "cpu (fallback)"
            for m in cpu["modes"]):
    print("FAIL: the fallback's ratios are shown as if they meant something"); ok = False
sys.exit(0 if ok else 1)
PY
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['format_version']=2; d['modes'][0]['ran_on']='gpu'; json.dump(d, open(sys.argv[2],'w'))" \
  "$tmp/sim.json" "$tmp/broken.json"
if python3 tests/check_schema.py docs/bench.schema.json "$tmp/broken.json" > /dev/null; then
  echo "FAIL: a document with format_version 2 passed the schema check"; fail=1
fi
[ $fail = 0 ] && echo "bench schema: ok" || echo "bench schema: FAILED"
exit $fail
