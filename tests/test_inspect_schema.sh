#!/bin/bash
# test_inspect_schema.sh BATON: `baton inspect --json` of every bundled plan and every good test
# plan matches docs/inspect.schema.json (checked by tests/check_schema.py), and a document that
# breaks the schema is caught (so the check can fail).
set -uo pipefail
baton=${1:?usage: test_inspect_schema.sh path/to/baton}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0
for p in examples/plans/*.json tests/data/good/*.json; do
  out=$tmp/$(basename "$p")
  # As in test_cli.sh: plans with collectives wait for a baton that has them.
  if grep -q '"collective"' "$p" &&
    [[ $("$baton" validate "$p" 2>&1) == *"unknown key 'collective'"* ]]; then
    echo "SKIP $p: this baton has no collective steps yet"; continue
  fi
  if ! "$baton" inspect --json -q "$p" > "$out" 2> "$tmp/err"; then
    echo "FAIL: baton inspect --json $p: $(cat "$tmp/err")"; fail=1; continue
  fi
  python3 tests/check_schema.py docs/inspect.schema.json "$out" > "$tmp/check" ||
    { echo "FAIL: $p:"; cat "$tmp/check"; fail=1; }
  n=$((n + 1))
done
# a mutated document must fail the check
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['version']=2; d['steps'][0]['kind']='thing'; json.dump(d, open(sys.argv[2],'w'))" \
  "$tmp/rfc.json" "$tmp/broken.json"
if python3 tests/check_schema.py docs/inspect.schema.json "$tmp/broken.json" > /dev/null; then
  echo "FAIL: a document with version 2 and an unknown step kind passed the schema check"; fail=1
fi
[ $fail = 0 ] && echo "$n passed, 0 failed" || echo "inspect schema: FAILED"
exit $fail
