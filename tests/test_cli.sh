#!/bin/bash
# test_cli.sh BATON: the CLI's commands, exit codes and files, on the bundled plans.
set -u
baton=${1:?usage: test_cli.sh path/to/baton}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
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

check "help" 0 "$baton" --help
check "no arguments is a usage error" 2 "$baton"
check "unknown command" 2 "$baton" frobnicate x.json
check "unknown option" 2 "$baton" run --bogus examples/plans/rfc.json
check "bad mode" 2 "$baton" run --mode=fast examples/plans/rfc.json
for c in validate inspect run bench; do check "$c --help" 0 "$baton" "$c" --help; done
for p in examples/plans/*.json; do check "validate $p" 0 "$baton" validate "$p"; done

bad=$(ls tests/data/bad/*.json | head -1)
check "validate a bad plan" 1 "$baton" validate "$bad"
contains "error names file:line:column" "$tmp/err" "$bad:"
check "a missing file" 4 "$baton" validate "$tmp/none.json"

check "inspect" 0 "$baton" inspect examples/plans/rfc.json
contains "inspect shows boundaries" "$tmp/out" "cuda:0 -> cpu, 1 transfer(s), host waits"
check "inspect --json" 0 "$baton" inspect --json examples/plans/rfc.json
cp "$tmp/out" "$tmp/inspect.json"
if command -v python3 >/dev/null; then
  check "inspect --json is JSON" 0 python3 -c "import json; json.load(open('$tmp/inspect.json'))"
fi

check "run on the test device" 0 "$baton" run --gpu=sim --mode=boundary -q \
  --output "x8=$tmp/x8.npy" --trace="$tmp/trace.json" examples/plans/rfc.json
contains "run reports waits" "$tmp/out" "8.0 host waits"
test -s "$tmp/x8.npy" && test -s "$tmp/trace.json" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL run wrote no output or trace"; }
# feed the output back in as an input of the chain plan's shape-compatible input
check "run with --input" 0 "$baton" run --gpu=cpu -q --input "x=$tmp/x8.npy" \
  --output "h64=$tmp/h64.npy" examples/plans/rmsnorm_chain64.json
check "--input of an unknown tensor" 2 "$baton" run --gpu=cpu -q --input "nope=$tmp/x8.npy" \
  examples/plans/rmsnorm_chain64.json
# hostile .npy files and paths: exit 4 (a file could not be read), never a hang
npy_hdr() { # file, header dict: a version 1.0 .npy with that header and 16 data bytes
  local h="$2" n
  n=$((${#2} + 1))
  { printf '\223NUMPY\001\000'; printf "\\$(printf %03o $((n % 256)))\\$(printf %03o $((n / 256)))"
    printf '%s\n' "$h"; head -c 16 /dev/zero; } > "$1"
}
npy_hdr "$tmp/wrap.npy" \
  "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387905, 4), }"
check "--input whose shape overflows" 4 "$baton" run --gpu=cpu -q --input "x=$tmp/wrap.npy" \
  examples/plans/rmsnorm_chain64.json
contains "the overflow names the file" "$tmp/err" "$tmp/wrap.npy: the header's shape"
npy_hdr "$tmp/dup.npy" "{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (4,), }"
check "--input with a repeated key" 4 "$baton" run --gpu=cpu -q --input "x=$tmp/dup.npy" \
  examples/plans/rmsnorm_chain64.json
contains "the repeated key is named" "$tmp/err" "the key 'descr' appears twice"
mkfifo "$tmp/fifo.npy" "$tmp/fifo.json"
check "--input of a FIFO does not block" 4 timeout 20 "$baton" run --gpu=cpu -q \
  --input "x=$tmp/fifo.npy" examples/plans/rmsnorm_chain64.json
contains "the FIFO is named" "$tmp/err" "fifo.npy is a FIFO, not a regular file"
check "validate of a FIFO does not block" 4 timeout 20 "$baton" validate "$tmp/fifo.json"
check "validate of a directory" 4 "$baton" validate "$tmp"
sed "s#weights/w4_f32.npy#$tmp/wrap.npy#" tests/data/good/inits.json > "$tmp/inits.json"
check "a constant's bad .npy is exit 4" 4 "$baton" validate "$tmp/inits.json"
contains "the constant's error names plan and tensor" "$tmp/err" "$tmp/inits.json:21:"
sed "s#weights/w4_f32.npy#$tmp/fifo.npy#" tests/data/good/inits.json > "$tmp/inits.json"
check "a constant that is a FIFO does not block" 4 timeout 20 "$baton" validate "$tmp/inits.json"

# cuda:9 exists on no machine this runs on: asking for CUDA, or refusing the fallback, fails
sed 's/"cuda:0"/"cuda:9"/g' examples/plans/rmsnorm_tutorial.json > "$tmp/cuda9.json"
check "--gpu=cuda with a missing device" 3 "$baton" run --gpu=cuda -q "$tmp/cuda9.json"
contains "the missing device is named" "$tmp/err" "needs cuda:9"
check "--no-fallback with a missing device" 3 "$baton" run --no-fallback -q "$tmp/cuda9.json"
check "the fallback runs it on the CPU" 0 "$baton" run -q "$tmp/cuda9.json"

check "bench csv" 0 "$baton" bench --gpu=sim --iters=3 --warmup=1 --format=csv -q \
  examples/plans/rmsnorm_tutorial.json
contains "bench csv header" "$tmp/out" "mode,mean_us,p50_us,p99_us,host_waits_per_run"
check "bench table with steps" 0 "$baton" bench --gpu=sim --iters=3 --warmup=1 --steps -q \
  examples/plans/rmsnorm_tutorial.json
contains "bench speedup column" "$tmp/out" "speedup"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
