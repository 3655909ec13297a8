#!/usr/bin/env bash
# run.sh BUILD_DIR [THREADS] [OUT.json]: bench_cpu against PyTorch's CPU ops, same inputs and threads.
# THREADS is a count or a comma-separated list (default: 1 and the core count). For each, peers.py
# and bench_cpu run three times, alternating, and each side keeps its fastest figure per row, so
# that both see the same machine (on a shared machine one run of either can land on a busy moment).
# Environment:
#   LLM=1        also bench/cpu/bench_llm.py (decode ms/token against PyTorch eager; needs
#                BUILD_DIR/generate), twice per thread count, the faster of each side
#   RECORD=FILE  also write a results record (scripts/results_table.py's format) to FILE
# PyTorch must import (bench/cpu/setup_torch.sh prints the environment for a CPU-only machine).
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [THREADS] [OUT.json]}
threads=${2:-1,$(nproc)}
out=${3:-bench-cpu.json}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
uptime > "$tmp/load-start"
for t in ${threads//,/ }; do
  for i in 1 2 3; do
    python3 "$here/peers.py" --threads "$t" --out "$tmp/peers-$t-$i.json"
    BATON_CPU_THREADS=$t "$build/bench_cpu" --threads="$t" --json="$tmp/baton-$t-$i.json" > /dev/null
  done
  if [ "${LLM:-0}" = 1 ]; then
    for i in 1 2; do
      python3 "$here/bench_llm.py" --generate "$build/generate" --threads "$t" \
        --json "$tmp/llm-$t-$i.json"
    done
  fi
done
uptime > "$tmp/load-end"
python3 - "$tmp" "$out" "$threads" "${RECORD:-}" "$build" "${LLM:-0}" <<'PY'
import glob, json, sys
tmp, out, threads, record, build, llm_on = sys.argv[1:7]
load = [open(f"{tmp}/load-{w}").read().split("load average:")[1].strip() for w in ("start", "end")]
docs, rec_rows = [], []
for t in threads.split(","):
    p = [json.load(open(f)) for f in sorted(glob.glob(f"{tmp}/peers-{t}-*.json"))]
    b = [json.load(open(f)) for f in sorted(glob.glob(f"{tmp}/baton-{t}-*.json"))]
    doc = b[0]
    doc["torch"] = p[0]["torch"]
    tn = f"{t} thread" + ("s" if t != "1" else "")
    print(f"{tn}: {'step':50} {'baton us':>10} {'torch us':>10} {'ratio':>6} {'read GB/s':>10} "
          f"{'bw share':>8}")
    for i, r in enumerate(doc["rows"]):
        for k in ("baton_us", "read_us"):
            if k in r:
                r[k] = min(d["rows"][i][k] for d in b)
        # rows PyTorch is not run on (the GEMV at 4x the L3, the arithmetic alone) have no key
        tus = [q["ops"][r["key"]] for q in p if r["key"] in q["ops"]]
        tu = min(tus) if tus else None
        if tu is not None:
            r["torch_us"] = round(tu, 2)
            r["ratio"] = round(r["baton_us"] / tu, 3)
        line = f"{'':{len(tn)+2}}{r['step']:50} {r['baton_us']:10.1f} " + (
            f"{tu:10.1f} {r['ratio']:6.2f}" if tu is not None else f"{'-':>10} {'-':>6}")
        floor = None
        if "bytes" in r:
            r["read_gbs"] = round(r["bytes"] / r["read_us"] / 1e3, 2)
            r["bw_share"] = round(r["read_us"] / r["baton_us"], 3)
            line += f" {r['read_gbs']:10.1f} {100 * r['bw_share']:7.0f}%"
            if r.get("compute_only"):
                floor = (f"streaming read of a 4096 × 4096 weight of the same dtype from memory, "
                         f"one thread: {r['read_gbs']:.1f} GB/s; the arithmetic alone (weight "
                         f"in L2) at {100 * r['bw_share']:.0f} % of that rate")
            else:
                floor = (f"streaming read of the same {r['bytes'] / 2**20:.0f} MiB, same "
                         f"threads: {r['read_us']:.1f} µs ({r['read_gbs']:.1f} GB/s); the GEMV "
                         f"at {100 * r['bw_share']:.0f} % of it")
        print(line)
        peer = (f"PyTorch {doc['torch']} CPU, {tn}: {tu:.1f} µs (baton ×{r['ratio']:.2f})"
                if tu is not None else None)
        rec_rows.append({"what": f"{r['step'].replace(' . ', ' · ').replace('x', '×')}, {tn}",
                         "figure": round(r["baton_us"], 1), "unit": "µs", "floor": floor,
                         "peer": peer})
    llm = [json.load(open(f)) for f in sorted(glob.glob(f"{tmp}/llm-{t}-*.json"))]
    if llm:
        bm = min(x["baton_ms_per_token"] for x in llm)
        tm = min(x["torch_ms_per_token"] for x in llm)
        x = llm[0]
        doc["llm"] = dict(x, baton_ms_per_token=bm, torch_ms_per_token=tm, ratio=round(bm / tm, 3),
                          greedy_tokens_agreeing=[y["greedy_tokens_agreeing"] for y in llm])
        print(f"{'':{len(tn)+2}}{'decode ms/token (bench_llm.py)':50} {bm:10.3f} {tm:10.3f} "
              f"{bm / tm:6.2f}")
        rec_rows.append({"what": f"decode, Llama-architecture stand-in ({x['params_bytes'] / 1e6:.0f}"
                                 f" MB bf16, {x['layers']} layers, hidden {x['hidden']}), "
                                 f"{x['new']} tokens after {x['prompt']}, {tn}",
                         "figure": round(bm, 2), "unit": "ms/token", "floor": None,
                         "peer": f"PyTorch {x['torch']} eager, {tn}: {tm:.2f} ms/token "
                                 f"(baton ×{bm / tm:.2f})"})
    docs.append(doc)
json.dump({"load_average": load, "runs": docs}, open(out, "w"), indent=1)
print("load average at start:", load[0], "| at end:", load[1])
print("wrote", out)
if record:
    date = docs[0]["date"][:10]
    rec = {"date": date, "device": docs[0]["device"],
           "command": ("LLM=1 " if llm_on == "1" else "") + f"bash bench/cpu/run.sh {build} {threads}",
           "source": f"fastest of 3 alternating runs per side ({docs[0]['isa']}); "
                     f"load average {load[0]} at the start, {load[1]} at the end; "
                     "docs/decisions/cpu-gemm.md",
           "rows": rec_rows}
    with open(record, "w", encoding="utf-8") as f:
        json.dump(rec, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", record, "(then: python3 scripts/results_table.py)")
PY
