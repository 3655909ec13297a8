#!/bin/bash
# test_plugin_cli.sh BATON PLUGIN BAD_PLUGIN: `--plugin` on every command, its exit codes and
# messages, and the example plugin's plan run through the CLI against a built-ins-only reference.
set -u
baton=${1:?usage: test_plugin_cli.sh path/to/baton path/to/plugin.so path/to/bad_plugin.so}
plugin=${2:?}
bad=${3:?}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
plan=examples/plugin/scale_plan.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
check() { # name, expected exit code, command...
  local name=$1 want=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $got, want $want"
    sed 's/^/  | /' "$tmp/out" "$tmp/err" | head -20
  fi
}
contains() { # name, file, text
  if grep -qF -- "$3" "$2"; then pass=$((pass + 1)); else
    fail=$((fail + 1))
    echo "FAIL $1: '$3' not in output"
    sed 's/^/  | /' "$2" | head -20
  fi
}

for c in validate inspect run bench; do
  check "$c --help lists --plugin" 0 "$baton" "$c" --help
  contains "$c --help lists --plugin" "$tmp/out" "--plugin"
done
# The example exports its entry point and its plugin API version (BATON_PLUGIN_DECLARE_VERSION)
# and nothing else, and needs nothing of libbaton.
if command -v nm >/dev/null; then
  # (__odr_asan.*: AddressSanitizer's marker beside each exported global, in sanitizer builds)
  exported=$(nm -D --defined-only "$plugin" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' |
    grep -v '^__odr_asan' | sort | tr '\n' ' ')
  if [ "$exported" = "baton_plugin_api_version baton_plugin_init " ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL the example plugin exports other than its entry point and version: $exported"
  fi
  if nm -D --undefined-only "$plugin" | grep -q " baton_"; then
    fail=$((fail + 1)); echo "FAIL the example plugin calls libbaton directly:"
    nm -D --undefined-only "$plugin" | grep " baton_"
  else pass=$((pass + 1)); fi
fi

check "validate --plugin PATH" 0 "$baton" validate --plugin "$plugin" "$plan"
check "inspect --plugin=PATH" 0 "$baton" inspect --plugin="$plugin" "$plan"
contains "inspect shows the plugin's steps" "$tmp/out" "example.scale"
check "inspect --json --plugin" 0 "$baton" inspect --json --plugin "$plugin" "$plan"
check "run --plugin" 0 "$baton" run --gpu=sim -q --plugin "$plugin" "$plan"
check "bench --plugin" 0 "$baton" bench --gpu=sim -q --iters=3 --warmup=1 --plugin "$plugin" "$plan"
check "the same plugin twice loads once" 0 "$baton" validate --plugin "$plugin" \
  --plugin "$plugin" "$plan"

check "without the plugin the plan names the missing kernel" 1 "$baton" validate "$plan"
contains "without the plugin the plan names the missing kernel" "$tmp/err" "example.scale"
check "a missing plugin file" 4 "$baton" validate --plugin "$tmp/none.so" "$plan"
contains "a missing plugin file is named" "$tmp/err" "$tmp/none.so: no such file"
check "a plugin that is no library" 4 "$baton" run --plugin README.md "$plan"
contains "a plugin that is no library: the loader's reason" "$tmp/err" "cannot be loaded"
check "a plugin whose init fails" 2 env BATON_TEST_PLUGIN_MODE=fail "$baton" validate \
  --plugin "$bad" "$plan"
contains "a plugin whose init fails: its message" "$tmp/err" "(on purpose)"
check "--plugin without a value" 2 "$baton" validate "$plan" --plugin
many=()
for _ in $(seq 17); do many+=(--plugin "$plugin"); done
check "17 plugins" 2 "$baton" validate "${many[@]}" "$plan"
contains "17 plugins: the limit" "$tmp/err" "at most 16"

# The plugin's plan on the CPU fallback against the same computation with built-ins only:
# y = -(2 * rms_norm(x) * w + 0.5), from one input file.
if command -v python3 >/dev/null; then
  python3 - "$tmp/x.npy" <<'EOF'
import array, math, sys
x = array.array("f", [math.sin(0.37 * i) * 3.0 for i in range(4 * 256)])
head = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 256), }"
head += " " * (63 - (10 + len(head)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode())
    f.write(x.tobytes())
EOF
  check "run the plugin's plan" 0 "$baton" run --gpu=cpu -q --plugin "$plugin" \
    --input "x=$tmp/x.npy" --output "y=$tmp/y.npy" "$plan"
  check "run the reference" 0 "$baton" run -q --input "x=$tmp/x.npy" --output "y=$tmp/ref.npy" \
    tests/data/plugin_scale_ref.json
  check "the plugin's plan gives the reference's values" 0 \
    python3 - "$tmp/y.npy" "$tmp/ref.npy" <<'EOF'
import array, sys
def load(path):
    data = open(path, "rb").read()
    n = int.from_bytes(data[8:10], "little")
    assert b"'<f4'" in data[10:10 + n], data[10:10 + n]
    a = array.array("f")
    a.frombytes(data[10 + n:])
    return a
y, ref = load(sys.argv[1]), load(sys.argv[2])
assert len(y) == len(ref) == 1024, (len(y), len(ref))
bad = [(i, y[i], ref[i]) for i in range(len(y)) if abs(y[i] - ref[i]) > 1e-6 * (1 + abs(ref[i]))]
assert not bad, "%d values differ, first: %r" % (len(bad), bad[0])
assert max(abs(v) for v in ref) > 1, "the reference is degenerate"
EOF
else
  echo "SKIP numeric check: no python3"
fi

echo "test_plugin_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
