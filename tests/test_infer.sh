#!/bin/bash
# test_infer.sh INFER: examples/infer.c on a plan of bf16, f16 and i32 inputs and outputs: it
# fills each input with its ramp through baton_convert and prints each output's first values,
# which must be the ramp through the plan's steps (bf16 + 1, f16 copied, i32 + 3).
set -u
infer=${1:?usage: test_infer.sh path/to/infer}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=$("$infer" tests/data/infer_dtypes.json 2>/dev/null) ||
  { echo "FAIL: infer exited $?"; exit 1; }
echo "$out"
python3 - "$out" <<'PY'
import sys
ramp = [(i % 17) / 17.0 - 0.5 for i in range(4)]
want = {"yb (bf16)": ([r + 1 for r in ramp], 1e-2), "yh (f16)": (ramp, 1e-3),
        "yi (i32)": ([3, 3, 3, 3], 0)}
seen = set()
for line in sys.argv[1].splitlines():
    head, _, rest = line.partition(":")
    if head not in want:
        continue
    vals = rest.split()
    assert vals[-1] == "...", "%s: the 6 elements' first 4 end with '...': %r" % (head, line)
    got = [float(v) for v in vals[:-1]]
    exp, tol = want[head]
    assert len(got) == 4 and all(abs(g - e) <= tol for g, e in zip(got, exp)), \
        "%s: printed %r, want %r (within %g)" % (head, got, exp, tol)
    seen.add(head)
missing = set(want) - seen
assert not missing, "no line for %s" % sorted(missing)
print("test_infer: ok")
PY
