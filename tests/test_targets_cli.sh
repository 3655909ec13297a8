#!/bin/bash
# test_targets_cli.sh: `baton targets` lists every built-in target (the decoder ops included) and
# a plugin's, as text and as JSON that docs/targets.md is generated from; bad options exit 2.
#   $1 the baton CLI   $2 the example plugin
set -euo pipefail
cli=$1
plugin=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

text=$("$cli" targets)
for t in rms_norm_fwd gemm embedding rope kv_cache_update attention silu_mul silu gelu softmax \
         cast sample; do
  grep -q "^$t  (" <<<"$text" || fail "baton targets does not list $t"
done
grep -q "^kv_cache_update .*output 0 in place of input 0" <<<"$text" || fail "no cache alias"
grep -q "^    head_dim: int, required" <<<"$text" || fail "no head_dim attribute"

json=$("$cli" targets --json --plugin="$plugin")
python3 - "$json" <<'PY' || fail "targets --json"
import json, sys
doc = json.loads(sys.argv[1])
t = {x["name"]: x for x in doc["targets"]}
assert "example.scale" in t, "the plugin's target is missing"
assert t["kv_cache_update"]["aliases"] == [{"output": 0, "input": 0}]
att = {a["name"]: a for a in t["attention"]["attrs"]}
assert att["n_kv_heads"]["required"] and att["n_kv_heads"]["type"] == "int"
assert t["attention"]["inputs"] == 4 and t["attention"]["outputs"] == 1
assert "cpu" in t["sample"]["devices"]
PY

set +e
"$cli" targets --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown option does not exit 2"
"$cli" targets --plugin=/nonexistent/lib.so >/dev/null 2>&1
[ $? -eq 4 ] || fail "a missing plugin does not exit 4"
echo "ok"
