#!/usr/bin/env bash
# test_shard_e2e.sh BATON [PYTHON]: the tutorial plan against its data-parallel form from
# scripts/shard.py, run end to end by `baton run` on each --gpu choice in BATON_E2E_GPUS (default
# "sim cpu"; add "cuda" on a machine with 2 GPUs). The same random x and grad_y go to both plans
# (split by rows into x.0, x.1, ... for the sharded one); grad_weight must be the same bits with
# --reduce gather, and within bf16 rounding with --reduce all_reduce; y, invvar and grad_x are the
# concatenations of the shards' (bitwise on sim and cpu, whose kernels are row by row; within
# rounding on cuda, whose row reductions are laid out by the number of rows).
set -u
baton=${1:?usage: test_shard_e2e.sh BATON [PYTHON]}
py=${2:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
seed=${BATON_TEST_SEED:-$(date +%s)}
echo "test seed: $seed (BATON_TEST_SEED=$seed replays this run's data)"

# x and grad_y, whole and split by rows, as .npy (bf16 is NumPy's '<V2'); the comparisons.
cat >"$tmp/npy.py" <<'EOF'
import random, struct, sys

def write(path, descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(map(str, shape)) + ("," if len(shape) == 1 else ""))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)

def read(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<H", b[8:10])[0]
    h = b[10:10 + n].decode()
    descr = h.split("'descr': '")[1].split("'")[0]
    shape = tuple(int(s) for s in h.split("(")[1].split(")")[0].split(",") if s.strip())
    return descr, shape, b[10 + n:]

def values(descr, data):
    if descr in ("<V2", "|V2"):  # bf16: the top half of an f32
        return [struct.unpack("<f", b"\0\0" + data[i:i + 2])[0] for i in range(0, len(data), 2)]
    fmt, size = {"<f4": ("<f", 4), "<f8": ("<d", 8)}[descr]
    return [struct.unpack(fmt, data[i:i + size])[0] for i in range(0, len(data), size)]

def bf16(v):
    b = struct.pack("<f", v)
    u = struct.unpack("<I", b)[0]
    u += 0x7FFF + ((u >> 16) & 1)  # round to nearest even
    return struct.pack("<H", (u >> 16) & 0xFFFF)

cmd = sys.argv[1]
if cmd == "inputs":  # inputs DIR SEED N
    d, seed, N = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    row = 512 * 512
    for name in ("x", "grad_y"):
        data = b"".join(bf16(rng.gauss(0, 1)) for _ in range(4 * row))
        write("%s/%s.npy" % (d, name), "<V2", (4, 512, 512), data)
        k = 4 // N
        for i in range(N):
            write("%s/%s.%d.npy" % (d, name, i), "<V2", (k, 512, 512),
                  data[i * k * row * 2:(i + 1) * k * row * 2])
elif cmd == "compare":  # compare WHOLE exact|close PART...
    whole, how, parts = sys.argv[2], sys.argv[3], sys.argv[4:]
    dw, sw, bw = read(whole)
    got = [read(p) for p in parts]
    bp = b"".join(g[2] for g in got)
    if any(g[0] != dw for g in got) or sum(g[1][0] for g in got) != sw[0]:
        sys.exit("%s: the parts' dtypes or shapes %s do not make %s %s"
                 % (whole, [g[:2] for g in got], dw, sw))
    if how == "exact":
        if bp != bw:
            i = next(i for i in range(len(bw)) if bp[i] != bw[i])
            sys.exit("%s: not the same bits as %s (first difference at byte %d)"
                     % (whole, " + ".join(parts), i))
    else:
        a, b = values(dw, bw), values(dw, bp)
        scale = max(abs(v) for v in a) or 1.0
        err = max(abs(x - y) for x, y in zip(a, b)) / scale
        if not err <= 2.0 ** -6:
            sys.exit("%s vs %s: max error %.3g of the largest value, above 2^-6"
                     % (whole, " + ".join(parts), err))
EOF

one="$root/examples/plans/rmsnorm_tutorial.json"
# CUDA runs as many devices as the machine has (the plan names cuda:0 .. cuda:N-1).
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
for gpu in ${BATON_E2E_GPUS:-sim cpu}; do
  for N in 2 4; do
    if [ "$gpu" = cuda ] && [ "$N" -gt "${ngpu:-0}" ]; then
      echo "skip: --gpu=cuda, $N devices: ${ngpu:-0} GPU(s) present"
      continue
    fi
    devs=$(seq -s, -f "cuda:%g" 0 $((N - 1)))
    d="$tmp/$gpu.$N"
    mkdir -p "$d"
    "$py" "$tmp/npy.py" inputs "$d" "$seed" "$N" || { echo "FAIL: writing inputs"; exit 1; }
    if ! "$baton" run --gpu="$gpu" -q --input "x=$d/x.npy" --input "grad_y=$d/grad_y.npy" \
        --output "grad_weight=$d/gw.npy" --output "y=$d/y.npy" --output "invvar=$d/invvar.npy" \
        --output "grad_x=$d/grad_x.npy" "$one" >/dev/null 2>"$d/err"; then
      echo "FAIL: --gpu=$gpu: the one-device plan: $(cat "$d/err")"
      fail=1
      continue
    fi
    for reduce in gather all_reduce; do
      plan="$d/plan.$reduce.json"
      if [ "$N" = 2 ] && [ "$reduce" = gather ]; then
        plan="$root/examples/plans/rmsnorm_tutorial_2gpu.json"
      elif ! "$py" "$root/scripts/shard.py" --devices "$devs" --reduce "$reduce" "$one" >"$plan"; then
        echo "FAIL: shard.py --devices $devs --reduce $reduce"
        fail=1
        continue
      fi
      args=()
      for ((i = 0; i < N; i++)); do
        args+=(--input "x.$i=$d/x.$i.npy" --input "grad_y.$i=$d/grad_y.$i.npy")
        for o in y invvar grad_x; do args+=(--output "$o.$i=$d/$reduce.$o.$i.npy"); done
      done
      what="--gpu=$gpu, $N devices, --reduce $reduce"
      if ! "$baton" run --gpu="$gpu" -q "${args[@]}" --output "grad_weight=$d/$reduce.gw.npy" \
          "$plan" >/dev/null 2>"$d/err"; then
        echo "FAIL: $what: $(cat "$d/err")"
        fail=1
        continue
      fi
      how=exact
      [ "$reduce" = all_reduce ] && how=close
      "$py" "$tmp/npy.py" compare "$d/gw.npy" "$how" "$d/$reduce.gw.npy" ||
        { echo "FAIL: $what: grad_weight"; fail=1; }
      how=exact
      [ "$gpu" = cuda ] && how=close
      for o in y invvar grad_x; do
        parts=()
        for ((i = 0; i < N; i++)); do parts+=("$d/$reduce.$o.$i.npy"); done
        "$py" "$tmp/npy.py" compare "$d/$o.npy" "$how" "${parts[@]}" ||
          { echo "FAIL: $what: $o"; fail=1; }
      done
      [ "$fail" = 0 ] && echo "ok: $what"
    done
  done
done
exit $fail
