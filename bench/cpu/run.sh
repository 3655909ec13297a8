#!/usr/bin/env bash
# run.sh BUILD_DIR [THREADS] [OUT.json]: bench_cpu against PyTorch's CPU ops, same inputs and threads.
# peers.py and bench_cpu run twice, alternating, and each side keeps its faster run, so that both see
# the same machine (on a shared machine one run of either can land on a busy moment).
# PyTorch must import (bench/cpu/setup_torch.sh prints the environment for a CPU-only machine).
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [THREADS] [OUT.json]}
threads=${2:-$(nproc)}
out=${3:-bench-cpu.json}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in 1 2; do
  python3 "$here/peers.py" --threads "$threads" --out "$tmp/peers$i.json"
  BATON_CPU_THREADS=$threads "$build/bench_cpu" --threads="$threads" --json="$tmp/baton$i.json" > /dev/null
done
python3 - "$tmp" "$out" <<'PY'
import json, sys
tmp, out = sys.argv[1], sys.argv[2]
p = [json.load(open(f"{tmp}/peers{i}.json")) for i in (1, 2)]
b = [json.load(open(f"{tmp}/baton{i}.json")) for i in (1, 2)]
doc = b[0]
doc["command"] = "bench/cpu/run.sh (bench_cpu + peers.py, best of 2 each)"
doc["torch"] = p[0]["torch"]
print(f"{'step':42} {'baton us':>10} {'torch us':>10} {'ratio':>6} {'read GB/s':>10} {'bw share':>8}")
for r, r2 in zip(doc["rows"], b[1]["rows"]):
    for k in ("baton_us", "read_us"):
        if k in r:
            r[k] = min(r[k], r2[k])
    t = min(q["ops"][r["key"]] for q in p)
    r["torch_us"] = round(t, 2)
    r["ratio"] = round(r["baton_us"] / t, 3)
    line = f"{r['step']:42} {r['baton_us']:10.1f} {t:10.1f} {r['ratio']:6.2f}"
    if "bytes" in r:
        r["read_gbs"] = round(r["bytes"] / r["read_us"] / 1e3, 2)
        r["bw_share"] = round(r["read_us"] / r["baton_us"], 3)
        line += f" {r['read_gbs']:10.1f} {100 * r['bw_share']:7.0f}%"
    print(line)
json.dump(doc, open(out, "w"), indent=1)
print("wrote", out)
PY
