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

# issue 9: bindings are checked against the plan before anything runs
lacks() { # name, file, text: the text must NOT be in the file
  if grep -qF -- "$3" "$2"; then
    fail=$((fail + 1)); echo "FAIL $1: '$3' in output"; sed 's/^/  | /' "$2" | head -20
  else pass=$((pass + 1)); fi
}
absent() { # name, path: the file must not exist
  if [ -e "$2" ]; then fail=$((fail + 1)); echo "FAIL $1: $2 was written"; else pass=$((pass + 1)); fi
}
minimal=tests/data/good/minimal.json # x f32[4] -> y f32[4], on the CPU
npy_hdr "$tmp/x4.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }"
npy_hdr "$tmp/x22.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }"
check "--input naming an output is an error" 2 "$baton" run -q --input "y=$tmp/x4.npy" "$minimal"
contains "it says the name is an output and lists the inputs" "$tmp/err" \
  "'y' is an output of the plan, not one of its inputs; its inputs: x"
check "--input of an unknown name" 2 "$baton" run -q --input "x_0=$tmp/x4.npy" \
  examples/plans/rfc.json
contains "an unknown input gets a did-you-mean" "$tmp/err" "(did you mean 'x0'?); its inputs: x0"
check "--input naming an intermediate tensor" 2 "$baton" run -q --input "softshrink=$tmp/x4.npy" \
  examples/plans/rfc.json
contains "it says what softshrink is, with no did-you-mean" "$tmp/err" \
  "'softshrink' is an intermediate tensor of the plan, not one of its inputs; its inputs: x0"
check "--input of a (2,2) file for an f32[4] input" 2 "$baton" run -q --input "x=$tmp/x22.npy" \
  "$minimal"
contains "the mismatch shows both shapes" "$tmp/err" "holds f32 [2,2], the plan's input is f32 [4]"
check "--input of the exact shape" 0 "$baton" run -q --input "x=$tmp/x4.npy" "$minimal"
check "the same --input twice" 2 "$baton" run -q --input "x=$tmp/x4.npy" --input "x=$tmp/x4.npy" \
  "$minimal"
contains "the duplicate is named" "$tmp/err" "--input x is given twice"
check "the same --output twice" 2 "$baton" run -q --output "y=$tmp/a.npy" --output "y=$tmp/b.npy" \
  "$minimal"
absent "a duplicate --output writes nothing" "$tmp/a.npy"
check "--output naming an input" 2 "$baton" run -q --output "x=$tmp/a.npy" "$minimal"
contains "it says the name is an input" "$tmp/err" "'x' is an input of the plan, not one of its outputs"
check "--input that cannot be read" 4 "$baton" run -q --input "x=$tmp/none.npy" "$minimal"
# every output path is checked before the first run: nothing is written if one is unusable
sed 's/"name": "y", "dtype": "f32", "shape": \[4\], "role": "output"}/&,\n    {"name": "z", "dtype": "f32", "shape": [4], "role": "output"}/; s/"outputs": \["y"\]}/&,\n    {"name": "copy", "kernel": "add_scalar", "device": "cpu", "inputs": ["y"], "outputs": ["z"], "attrs": {"value": 0}}/' \
  "$minimal" > "$tmp/two_out.json"
check "a plan with two outputs" 0 "$baton" validate "$tmp/two_out.json"
check "an --output in a missing directory" 4 "$baton" run -q --output "y=$tmp/y.npy" \
  --output "z=$tmp/missing/z.npy" "$tmp/two_out.json"
contains "the missing directory is named" "$tmp/err" "$tmp/missing/z.npy is in a directory that does not exist"
absent "no output written when one path is unusable" "$tmp/y.npy"
mkdir "$tmp/adir"
check "an --output that is a directory" 4 "$baton" run -q --output "y=$tmp/y.npy" \
  --output "z=$tmp/adir" "$tmp/two_out.json"
absent "no output written when one is a directory" "$tmp/y.npy"
check "a --trace in a missing directory" 4 "$baton" run -q --output "y=$tmp/y.npy" \
  --trace "$tmp/missing/t.json" "$tmp/two_out.json"
absent "no output written when the trace path is unusable" "$tmp/y.npy"
check "both outputs written" 0 "$baton" run -q --output "y=$tmp/y.npy" --output "z=$tmp/z.npy" \
  "$tmp/two_out.json"
test -s "$tmp/y.npy" && test -s "$tmp/z.npy" && cmp -s "$tmp/y.npy" "$tmp/z.npy" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL both outputs: y and z differ or missing"; }
ls "$tmp" | grep -q baton- && { fail=$((fail + 1)); echo "FAIL temporary files left in $tmp"; } ||
  pass=$((pass + 1))
check "an option of another command" 2 "$baton" bench -q --output "y=$tmp/y.npy" "$minimal"
contains "the option's commands are named" "$tmp/err" "--output is not an option of bench"

# nothing read from a file reaches the terminal raw: escape bytes in names are shown as \x1b
esc=$(printf '\033')
# (tensor and step names are restricted to [A-Za-z0-9_.:-]; the plan's name is free text)
sed 's/"name": "minimal"/"name": "evil\\u001b]0;pwned\\u0007\\u001b[31m\\n"/' \
  tests/data/good/minimal.json > "$tmp/evil.json"
check "a plan with escape sequences in names" 0 "$baton" validate "$tmp/evil.json"
contains "validate shows the escape as text" "$tmp/out" 'evil\x1b]0;pwned\x07\x1b[31m\x0a'
for cmd in validate inspect run bench; do
  extra=""
  [ $cmd = bench ] && extra="--iters=2 --warmup=0 --steps"
  "$baton" $cmd $extra "$tmp/evil.json" >"$tmp/out" 2>&1
  lacks "$cmd prints no raw escape byte" "$tmp/out" "$esc"
done
# baton tokenize: a tokenizer's tokens are a file's text too (--json keeps them exact)
printf '{"model": {"type": "BPE", "vocab": {"a": 0, "\\u001b[31m": 1}, "merges": []}, "decoder": {"type": "ByteLevel"}}' \
  > "$tmp/evil_tok.json"
check "tokenize decodes a tokenizer's own text" 0 "$baton" tokenize "$tmp/evil_tok.json" --decode 0,1
lacks "tokenize prints no raw escape byte" "$tmp/out" "$esc"
contains "tokenize shows the escape as text" "$tmp/out" 'a\x1b[31m'
check "tokenize --json" 0 "$baton" tokenize "$tmp/evil_tok.json" --decode 0,1 --json
contains "tokenize --json is exact" "$tmp/out" '{"text":"a\u001B[31m"}'
check "tokenize --help" 0 "$baton" tokenize --help
check "tokenize needs --encode, --encode-file or --decode" 2 "$baton" tokenize "$tmp/evil_tok.json"
check "tokenize of a missing tokenizer.json exits 4" 4 "$baton" tokenize "$tmp/none.json" --encode x
check "tokenize of a plan, not a tokenizer.json, exits 1" 1 "$baton" tokenize tests/data/good/minimal.json --encode x
# baton tokenize --chat: a conversation through chat.json (beside the tokenizer, or --chat-format)
tokdir=tests/data/tokenizer
printf '[{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "hi"}]' > "$tmp/conv.json"
check "tokenize --chat renders and encodes" 0 "$baton" tokenize "$tokdir/byte_level.json" --chat "$tmp/conv.json" --json
contains "tokenize --chat gives the template's text" "$tmp/out" '"text": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>'
cp "$tokdir/byte_level.json" "$tmp/bl.json"
check "tokenize --chat-format names the chat.json" 0 "$baton" tokenize "$tmp/bl.json" --chat "$tmp/conv.json" --chat-format "$tokdir/chat.json" --no-generation-prompt --json
contains "no generation prompt: the text ends with the last message" "$tmp/out" 'hi<|eot_id|>"'
check "tokenize --chat without a chat.json beside exits 4" 4 "$baton" tokenize "$tmp/bl.json" --chat "$tmp/conv.json"
contains "the missing chat.json is named" "$tmp/err" "chat.json"
printf '[{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]' > "$tmp/conv2.json"
check "tokenize --chat refuses a late system message" 1 "$baton" tokenize "$tokdir/byte_level.json" --chat "$tmp/conv2.json"
contains "the refused message is named" "$tmp/err" "message 1: a system message goes first"
printf '[{"role": "user"}]' > "$tmp/conv3.json"
check "tokenize --chat refuses a message without content" 1 "$baton" tokenize "$tokdir/byte_level.json" --chat "$tmp/conv3.json"
printf '[{"role": ' > "$tmp/conv4.json"
check "tokenize --chat of a file that is not JSON exits 4" 4 "$baton" tokenize "$tokdir/byte_level.json" --chat "$tmp/conv4.json"
check "tokenize --chat-format goes with --chat" 2 "$baton" tokenize "$tokdir/byte_level.json" --encode x --chat-format "$tokdir/chat.json"
"$baton" run --input "$(printf 'x\033[31m')=$tmp/x4.npy" "$tmp/evil.json" >"$tmp/out" 2>&1
lacks "an escape in an argument is not echoed raw" "$tmp/out" "$esc"
"$baton" run -q --input "x=$tmp/dup.npy" "$tmp/evil.json" >"$tmp/out" 2>&1
lacks "a library message is escaped too" "$tmp/out" "$esc"

# exit codes: 4 when what was printed could not be written
if [ -w /dev/full ]; then
  "$baton" validate "$minimal" >/dev/full 2>"$tmp/err"
  got=$?
  [ $got -eq 4 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL stdout on a full disk: exit $got, want 4"; }
  contains "a full standard output is named" "$tmp/err" "cannot write the standard output"
fi
# exit codes: 3 for a run that fails, 4 for an output that cannot be written at the end
check "bench --inflight on the test device" 0 "$baton" bench --gpu=sim --inflight=4 --iters=20 \
  -q examples/plans/rmsnorm_chain64.json
contains "inflight prints throughput" "$tmp/out" "runs/s"
contains "inflight says the GPU busy fraction is not measured" "$tmp/out" "GPU busy fraction: n/a"
check "bench --inflight csv" 0 "$baton" bench --gpu=sim --inflight=2 --iters=5 --modes=graph \
  --format=csv -q examples/plans/rmsnorm_chain64.json
contains "inflight csv header" "$tmp/out" "mode,inflight,runs,runs_per_s,p50_us,p99_us"
check "bench --inflight with fewer runs than instances" 0 "$baton" bench --inflight=8 --iters=2 \
  --modes=graph -q "$minimal"
check "bench --inflight --no-copies" 0 "$baton" bench --gpu=sim --inflight=2 --iters=5 \
  --modes=graph --no-copies --format=json -q examples/plans/rmsnorm_chain64.json
contains "--no-copies is in the json" "$tmp/out" '"no_copies": true'
check "--no-copies needs --inflight" 2 "$baton" bench --no-copies -q "$minimal"
contains "--no-copies without --inflight says why" "$tmp/err" "add --inflight=N"
check "bench with an unknown mode runs nothing" 2 "$baton" bench --modes=graph,fast -q "$minimal"
lacks "nothing was timed" "$tmp/out" "timed runs"

# issue 12: progress on a terminal only; never in a pipe or file
# enough runs for about 4 s on this machine (8 s where the progress must show, against noise):
# the time of 21 runs over 21, start-up included, so that a slow first process on a loaded
# machine can only shorten the long runs (a difference of two timings could come out near zero)
t1=$(date +%s%N)
"$baton" run -q --gpu=cpu --iters=21 examples/plans/rmsnorm_tutorial.json >/dev/null 2>&1
t2=$(date +%s%N)
per=$(((t2 - t1) / 21))
[ $per -lt 1000 ] && per=1000
long=$((4000000000 / per))
[ $long -lt 20 ] && long=20
[ $long -gt 100000 ] && long=100000
long8=$((long * 2))
check "a long run in a pipe" 0 "$baton" run --gpu=cpu --iters=$long examples/plans/rmsnorm_tutorial.json
lacks "no progress when stderr is not a terminal" "$tmp/err" "about"
if command -v script >/dev/null && script -qc true /dev/null </dev/null >/dev/null 2>&1; then
  # A run of under 3 s says nothing when it shows no progress (a machine busier during the
  # calibration than now makes it short: 58 runs in 1.6 s under ctest -j8 on 2 cores): it runs
  # again, 4 times as long, at most twice.
  iters=$long8
  for attempt in 1 2 3; do
    t1=$(date +%s%N)
    script -qc "$baton run --gpu=cpu --iters=$iters $root/examples/plans/rmsnorm_tutorial.json" \
      /dev/null </dev/null >"$tmp/tty" 2>&1
    t2=$(date +%s%N)
    if grep -q "baton run: " "$tmp/tty" || [ $(((t2 - t1) / 1000000)) -ge 3000 ]; then
      break
    fi
    iters=$((iters * 4))
  done
  contains "progress on a terminal" "$tmp/tty" "baton run: "
  contains "the progress line is cleared" "$tmp/tty" "$(printf '\r\033[K')"
  script -qc "$baton run -q --gpu=cpu --iters=$long $root/examples/plans/rmsnorm_tutorial.json" \
    /dev/null </dev/null >"$tmp/tty" 2>&1
  lacks "no progress with -q" "$tmp/tty" "baton run: "
else
  echo "SKIP the terminal progress checks: script(1) from util-linux is not available"
fi

# cuda:9 exists on no machine this runs on: asking for CUDA, or refusing the fallback, fails
sed 's/"cuda:0"/"cuda:9"/g' examples/plans/rmsnorm_tutorial.json > "$tmp/cuda9.json"
check "--gpu=cuda with a missing device" 3 "$baton" run --gpu=cuda -q "$tmp/cuda9.json"
contains "the missing device is named" "$tmp/err" "needs cuda:9"
check "--no-fallback with a missing device" 3 "$baton" run --no-fallback -q "$tmp/cuda9.json"
check "the fallback runs it on the CPU" 0 "$baton" run -q "$tmp/cuda9.json"

# one process per GPU: the flags, and a rank whose partner never comes (the test device's ranks
# are threads of one process, so a lone process times out, saying so)
check "--rank without --world" 2 "$baton" run --rank=1 -q examples/plans/rmsnorm_tutorial.json
contains "--rank names --world" "$tmp/err" "--world=N"
check "--rank out of range" 2 "$baton" run --rank=99 --world=2 -q examples/plans/rmsnorm_tutorial.json
check "--world on bench" 2 "$baton" bench --world=2 -q examples/plans/rmsnorm_tutorial.json
rm -f "$tmp/rv"
sed '0,/"cuda:0"/s//"cuda:1"/' examples/plans/rmsnorm_tutorial.json > "$tmp/two_gpus.json"
check "rank 1 alone" 3 "$baton" run --gpu=sim --rank=1 --world=2 --rendezvous="$tmp/rv" \
  --rendezvous-timeout=1 -q "$tmp/two_gpus.json"
contains "rank 1 alone names the rendezvous" "$tmp/err" "no rendezvous file"

check "bench csv" 0 "$baton" bench --gpu=sim --iters=3 --warmup=1 --format=csv -q \
  examples/plans/rmsnorm_tutorial.json
contains "bench csv header" "$tmp/out" "mode,mean_us,p50_us,p99_us,host_waits_per_run"
check "bench table with steps" 0 "$baton" bench --gpu=sim --iters=3 --warmup=1 --steps -q \
  examples/plans/rmsnorm_tutorial.json
contains "bench ratio column" "$tmp/out" "strict/mode"
contains "bench says where it ran" "$tmp/out" "sim (test device)"
# without a GPU (--gpu=cpu: the fallback asked for), the ratios are not shown as if they meant
# something
check "bench on the CPU fallback" 0 "$baton" bench --gpu=cpu --iters=3 --warmup=1 -q \
  examples/plans/rmsnorm_tutorial.json
contains "bench fallback ratio" "$tmp/out" "n/a (fallback"
# a note is said once per process: bench prepares a runtime per mode, each with the same notes
check "bench on the CPU, three modes" 0 "$baton" bench --gpu=cpu --iters=1 --warmup=0 \
  examples/plans/rfc.json
if [ "$(grep -c 'transposed once' "$tmp/err")" -eq 1 ]; then pass=$((pass + 1)); else
  fail=$((fail + 1))
  echo "FAIL bench's GEMV note: $(grep -c 'transposed once' "$tmp/err") times, want once"
fi

# ---- issue 38: hostile paths, allocation failures, signals, names --------------------------------
cat > "$tmp/two.json" <<'JSON'
{"format": "baton.plan", "version": 1, "name": "two",
 "tensors": [{"name": "x", "dtype": "f32", "shape": [4], "role": "input"},
             {"name": "y", "dtype": "f32", "shape": [4], "role": "output"},
             {"name": "z", "dtype": "f32", "shape": [4], "role": "output"}],
 "steps": [{"name": "a", "kernel": "copy", "device": "cpu", "inputs": ["x"], "outputs": ["y"]},
           {"name": "b", "kernel": "copy", "device": "cpu", "inputs": ["x"], "outputs": ["z"]}]}
JSON
cp "$tmp/two.json" "$tmp/base.json" # what follows must not depend on two.json surviving
mkfifo "$tmp/report.fifo"
check "bench --report of a FIFO does not block" 4 timeout 20 "$baton" bench --gpu=sim --iters=2 \
  --warmup=0 -q --report="$tmp/report.fifo" examples/plans/rmsnorm_tutorial.json
contains "the FIFO report is named" "$tmp/err" "is not a regular file"
echo "the old report" > "$tmp/old.html"
ls /tmp/baton-report-* 2>/dev/null | sort > "$tmp/reports.before"
check "a failed bench" 3 "$baton" bench --gpu=cuda --no-fallback --iters=2 -q \
  --report="$tmp/old.html" examples/plans/rmsnorm_tutorial.json
contains "a failed bench leaves the old report" "$tmp/old.html" "the old report"
ls /tmp/baton-report-* 2>/dev/null | sort > "$tmp/reports.after"
check "a failed bench leaves no /tmp/baton-report-*" 0 cmp "$tmp/reports.before" "$tmp/reports.after"
check "bench --report" 0 "$baton" bench --gpu=sim --iters=2 --warmup=0 -q \
  --report="$tmp/old.html" examples/plans/rmsnorm_tutorial.json
contains "the report replaced the old one" "$tmp/old.html" "<!doctype html>"
ls "$tmp"/old.html.baton-* >/dev/null 2>&1 && { fail=$((fail + 1)); echo "FAIL report temporary left"; } ||
  pass=$((pass + 1))
"$baton" run --gpu=cpu -q --output "y=$tmp/in.npy" "$tmp/two.json" >/dev/null 2>&1
cp "$tmp/in.npy" "$tmp/in.copy"
check "--report naming an --input" 2 "$baton" bench --gpu=cpu --iters=2 -q --input "x=$tmp/in.npy" \
  --report="$tmp/./in.npy" "$tmp/two.json"
contains "the input is named" "$tmp/err" "a file written must not be one that is read"
check "the input survives" 0 cmp "$tmp/in.npy" "$tmp/in.copy"
check "--output naming an --input" 2 "$baton" run --gpu=cpu -q --input "x=$tmp/in.npy" \
  --output "y=$tmp/in.npy" "$tmp/two.json"
check "two outputs, one file by two names" 2 "$baton" run --gpu=cpu -q \
  --output "y=$tmp/o.npy" --output "z=$tmp/./o.npy" "$tmp/two.json"
contains "both outputs are named" "$tmp/err" "give each file written its own path"
ln -sf "$tmp/o.npy" "$tmp/link.npy"
touch "$tmp/o.npy"
check "an output and a link to it" 2 "$baton" run --gpu=cpu -q \
  --output "y=$tmp/o.npy" --output "z=$tmp/link.npy" "$tmp/two.json"
check "--trace naming an output" 2 "$baton" run --gpu=cpu -q --output "y=$tmp/o.npy" \
  --trace="$tmp/o.npy" "$tmp/two.json"
check "--trace naming the plan" 2 "$baton" run --gpu=cpu -q --trace="$tmp/two.json" "$tmp/two.json"
check "the plan survives" 0 cmp "$tmp/two.json" "$tmp/base.json"
check "two outputs to /dev/null" 0 "$baton" run --gpu=cpu -q --output "y=/dev/null" \
  --output "z=/dev/null" "$tmp/two.json"
check "an empty --trace=" 2 "$baton" run --gpu=cpu -q --trace= "$tmp/two.json"
contains "the empty trace is named" "$tmp/err" "--trace= names no file"
# allocations the CLI cannot make say what and how much (a 16 GiB input under a 2 GiB limit)
sed 's/"shape": \[4\]/"shape": [4096, 1048576]/g' "$tmp/base.json" > "$tmp/huge.json"
# A sanitizer build reserves terabytes of shadow memory at start, which `ulimit -v` forbids: the
# memory-limit checks run in the plain build (CI's first stage) only.
sanitized=0
ldd "$baton" 2>/dev/null | grep -qE 'lib[at]san' && sanitized=1
if [ $sanitized = 0 ]; then
  check "an input too large for memory" 3 bash -c "ulimit -v 2000000; exec '$baton' run --gpu=cpu -q '$tmp/huge.json'"
  contains "the input's allocation is named" "$tmp/err" "cannot allocate input 'x' (17179869184 bytes, 16.0 GiB)"
  check "bench --inflight too large for memory" 3 bash -c \
    "ulimit -v 2000000; exec '$baton' bench --gpu=cpu -q --inflight=4 --iters=2 '$tmp/huge.json'"
  contains "bench --inflight says what it could not allocate" "$tmp/err" "out of memory"
else
  echo "SKIP the memory-limit checks: a sanitizer build cannot run under ulimit -v"
fi
# SIGINT or SIGTERM while the outputs are written leaves no temporaries. (A background job of a
# script ignores SIGINT, so SIGINT is sent to a child started with it restored, from Python.)
sed 's/"shape": \[4\]/"shape": [32, 1048576]/g' "$tmp/base.json" > "$tmp/mid.json"
interrupt() { # signal: run mid.json, signal it once its first temporary exists, check none is left
  python3 - "$baton" "$tmp" "$1" <<'PY'
import glob, os, shutil, signal, subprocess, sys, time
baton, tmp, sig = sys.argv[1], sys.argv[2], getattr(signal, sys.argv[3])
# A run that finished writing before the signal came proves nothing: it is tried again, and the
# check fails only if no try was ended by the signal.
for attempt in range(5):
    shutil.rmtree(f"{tmp}/sig", ignore_errors=True)
    os.mkdir(f"{tmp}/sig")
    p = subprocess.Popen([baton, "run", "--gpu=cpu", "-q", "--output", f"y={tmp}/sig/y.npy",
                          "--output", f"z={tmp}/sig/z.npy", f"{tmp}/mid.json"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    t0 = time.time()
    while p.poll() is None and not glob.glob(f"{tmp}/sig/*.baton-*") and time.time() - t0 < 60:
        time.sleep(0.002)
    p.send_signal(sig)
    p.wait()
    left = glob.glob(f"{tmp}/sig/*.baton-*")
    print(f"exit {p.returncode}, temporaries left: {left}")
    if left:
        sys.exit(1)
    if p.returncode == -sig:
        sys.exit(0)
print("no try was ended by the signal")
sys.exit(1)
PY
}
if command -v python3 >/dev/null; then
  check "SIGINT while writing outputs leaves no temporaries" 0 interrupt SIGINT
  check "SIGTERM while writing outputs leaves no temporaries" 0 interrupt SIGTERM
fi
# out of memory while reading a plan is a file that could not be read (4), with a message, even
# for validate; a plan denser in values than the reader's memory bound is an invalid plan (1)
if command -v python3 >/dev/null; then
  python3 - "$tmp" <<'PY'
import json, sys
n = 300000
names = ["x"] + ["h%d" % i for i in range(n - 1)] + ["y"]
t = [{"name": v, "dtype": "f32", "shape": [4]} for v in names]
t[0]["role"], t[-1]["role"] = "input", "output"
s = [{"name": "s%d" % i, "kernel": "copy", "device": "cpu", "inputs": [names[i]],
      "outputs": [names[i + 1]]} for i in range(n)]
d = {"format": "baton.plan", "version": 1, "name": "chain", "tensors": t, "steps": s}
open(sys.argv[1] + "/chain.json", "w").write(json.dumps(d, separators=(",", ":")))
open(sys.argv[1] + "/dense.json", "w").write('{"format": "baton.plan", "version": 1, "x": [' +
                                             ",".join(["0"] * 3000000) + "]}")
PY
  if [ $sanitized = 0 ]; then
    check "validate out of memory" 4 timeout 120 bash -c \
      "ulimit -v 250000; OPENBLAS_NUM_THREADS=1 exec '$baton' validate '$tmp/chain.json'"
    contains "out of memory is said" "$tmp/err" "out of memory parsing the plan's"
  fi
  check "validate a plan too dense for the reader" 1 "$baton" validate "$tmp/dense.json"
  contains "the bound is named" "$tmp/err" "baton's reader keeps its memory within 8 times the file"
  rm -f "$tmp/chain.json" "$tmp/dense.json"
fi
# inspect escapes the plan's name as run and validate do
printf '{"format": "baton.plan", "version": 1, "name": "evil\\nFORGED line\\tx", "tensors": [{"name": "x", "dtype": "f32", "shape": [4], "role": "input"}, {"name": "y", "dtype": "f32", "shape": [4], "role": "output"}], "steps": [{"name": "c", "kernel": "copy", "device": "cpu", "inputs": ["x"], "outputs": ["y"]}]}' > "$tmp/evil.json"
check "inspect a plan whose name holds a newline" 0 "$baton" inspect "$tmp/evil.json"
contains "the name is escaped" "$tmp/out" 'evil\x0aFORGED line\x09x'
if grep -q '^FORGED' "$tmp/out"; then fail=$((fail + 1)); echo "FAIL inspect printed a forged line"; else
  pass=$((pass + 1)); fi

# issue 40: state kept across --iters and written with --output, dims from --dim or --input
sd=tests/data/good/state-dims-views.json
python3 -c "
import struct, sys
hdr = \"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }\"
hdr += ' ' * (63 - (10 + len(hdr)) % 64) + '\\n'
d = struct.pack('<12f', *range(12))
open(sys.argv[1], 'wb').write(b'\\x93NUMPY\\x01\\x00' + struct.pack('<H', len(hdr)) + hdr.encode() + d)
" "$tmp/x3.npy"
check "state and dims from an input" 0 "$baton" run -q --iters=3 --input "x=$tmp/x3.npy" \
  --output "y=$tmp/y3.npy" --output "total=$tmp/total.npy" "$sd"
check "the state after 3 runs is 3 w" 0 python3 -c "
import struct, sys
b = open(sys.argv[1], 'rb').read(); hl = struct.unpack('<H', b[8:10])[0]
assert struct.unpack('<4f', b[10 + hl:]) == (1.5, -3.0, 6.0, 0.75), b[10 + hl:]
b = open(sys.argv[2], 'rb').read(); hl = struct.unpack('<H', b[8:10])[0]
assert b'(3, 2, 2)' in b[:10 + hl], b[:10 + hl]
" "$tmp/total.npy" "$tmp/y3.npy"
check "--dim binds a dimension" 0 "$baton" run -q --dim seq=2 "$sd"
contains "the output has the bound shape" "$tmp/out" "y f32 [2,2,2]"
check "--dim out of bounds" 2 "$baton" run -q --dim seq=9 "$sd"
contains "the bounds are named" "$tmp/err" "dimension 'seq' = 9 is outside its bounds 1..8"
check "--dim of an unknown dimension" 2 "$baton" run -q --dim sq=2 "$sd"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
