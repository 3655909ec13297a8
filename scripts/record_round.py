#!/usr/bin/env python3
"""record_round.py: turns the JSON that one scripts/gpu-round.sh call brings back (bench_decoder.json,
decoder_peers.json, bench_gemv.json, bench_generate.json, torch_decode.json) into one results record for
bench/results/ (the format scripts/results_table.py reads), so that every row of the decoder and
LLM tables carries its floor and its peer from the same call.

    python3 scripts/record_round.py DIR --out bench/results/DATE-h200-decoder.json [--source TEXT]
"""
import argparse
import json
import os
import sys


def load(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None
    with open(p, encoding="utf-8") as f:
        return json.load(f)


def best_peer(peers, op, shape, cold):
    """PyTorch's fastest implementation of `op` timed the same way (cold or warm), at the same
    shape where the peer names shapes as baton does (the GEMVs), or None."""
    if not peers:
        return None
    op = op.replace(" (warm)", "")
    cands = [r for r in peers["results"] if r["op"] == op and r.get("cold") == cold and r["us"]]
    same = [r for r in cands if r.get("shape") == shape]
    cands = same or [r for r in cands if not r.get("shape", "").startswith("x[")]
    return min(cands, key=lambda r: r["us"]) if cands else None


def floors_of(dec, r):
    """The floor kernels bench_decoder timed for row r in the same run: rows of impl "floor" whose
    label is r's followed by " floor" (e.g. "embedding floor: index read + row copy"), on the
    same bytes, cold like r."""
    if not r["cold"]:
        return []
    return [f for f in dec["results"] if f["impl"] == "floor" and f["cold"] and
            f["op"].startswith(r["op"] + " floor") and f["bytes"] == r["bytes"]]


def decoder_rows(dec, peers):
    rows = []
    for r in dec["results"]:
        if r["impl"] not in ("baton", "cublaslt"):
            continue
        what = f"{r['op']} {r['shape']}" + ("" if r["impl"] == "baton" else " (cuBLASLt, gemm)")
        # rows of one op and shape that move different bytes (kv_cache_update's decode row and its
        # 32 MB row both name the cache's shape): the smaller ones are told apart by their bytes
        if any(o["impl"] == r["impl"] and o["op"] == r["op"] and o["shape"] == r["shape"] and
               o["cold"] == r["cold"] and o["bytes"] > r["bytes"] for o in dec["results"]):
            what += f" ({r['bytes']} bytes)"
        what += ", cold" if r["cold"] else ", warm"
        ratio = r["ratio_to_copy"]
        peer = best_peer(peers, r["op"], r["shape"], r["cold"])
        floor = (f"copy kernel of the same bytes {r['copy_us']:.2f} µs; empty kernel "
                 f"{dec['latency_floor_us']:.2f} µs")
        for f in floors_of(dec, r):
            label = f["op"][len(r["op"] + " floor"):].lstrip(": ")
            floor += f"; {label} ({f['shape']}) {f['us']:.2f} µs ({f['us'] / f['copy_us']:.2f}× the copy)"
        rows.append({
            "what": what,
            "figure": round(r["us"], 2),
            "unit": f"µs ({ratio:.2f}× the copy)",
            "floor": floor,
            "peer": f"PyTorch {peer['impl']} {peer['us']:.2f} µs" if peer else None,
        })
    return rows


def llm_rows(gen, torch_dec):
    rows = []
    tmap = (torch_dec or {}).get("ms", {})
    t_dec = next((v for k, v in tmap.items() if k.startswith("compiled") and "decode" in k), None)
    t_pre = next((v for k, v in tmap.items() if k.startswith("compiled") and "prefill" in k), None)
    for run in gen["runs"]:
        # bench_generate.py runs the fused plans and, by default, the unfused ones too; --fused
        # gemv the plans whose norms and SwiGLU fold into the GEMVs (fused == "gemv")
        plan = {False: ", unfused plan", "gemv": ", gemv plan"}.get(run.get("fused"), "")
        m = run["mode"] + plan
        if "decode_ms_per_token" not in run:  # a run that failed or timed out (its error kept)
            continue
        if run.get("sample"):  # bench_generate.py --sample T,K,P: on the GPU and on the host
            t_, k_, p_ = run["sample"].split(",")
            where = "the decode's GPU" if run.get("sample_on") == "gpu" else "the host"
            twin = [g for g in gen["runs"] if g is not run and g.get("sample") == run["sample"]
                    and g.get("mode") == run["mode"] and g.get("fused") == run.get("fused")
                    and "decode_ms_per_token" in g]
            same = run.get("same_ids_as_gpu", twin[0].get("same_ids_as_gpu") if twin else None)
            rows.append({
                "what": f"Llama-3.2-1B-shaped decode, bf16, batch 1, prompt {gen['prompt']}, "
                        f"{run['mode']} mode{plan}, sampled (temperature {t_}, top_k {k_}, "
                        f"top_p {p_}) on {where}",
                "figure": round(run["decode_ms_per_token"], 3),
                "unit": f"ms/token ({run.get('host_us_per_token', float('nan')):.0f} µs a token "
                        f"on the host outside the decode run)",
                "floor": f"weights + KV bytes at the read rate of the same process "
                         f"{gen['floor_ms_per_token']:.3f} ms/token",
                "peer": (f"the same sampled on "
                         f"{'the host' if run.get('sample_on') == 'gpu' else 'the GPU'} "
                         f"{twin[0]['decode_ms_per_token']:.3f} ms/token, same call"
                         + ("" if same is None else
                            "; the same tokens" if same else "; NOT the same tokens"))
                        if twin else None,
            })
            continue
        share = gen["floor_ms_per_token"] / run["decode_ms_per_token"] * 100
        rows.append({
            "what": f"Llama-3.2-1B-shaped decode, bf16, batch 1, prompt {gen['prompt']}, "
                    + (f"{run['mode']} mode, gemv plan (fused='gemv', next_token on the GPU)"
                       if run.get("fused") == "gemv" else f"{m} mode"),
            "figure": round(run["decode_ms_per_token"], 3),
            "unit": f"ms/token ({share:.0f} % of the floor, "
                    f"{run['host_waits_per_token']:.2f} host waits/token)",
            "floor": f"weights + KV bytes at the read rate of the same process "
                     f"{gen['floor_ms_per_token']:.3f} ms/token",
            "peer": f"PyTorch gpt-fast recipe (torch.compile reduce-overhead) {t_dec:.3f} ms/token"
                    if t_dec else None,
        })
        rows.append({
            "what": f"Llama-3.2-1B-shaped prefill of {gen['prompt']} tokens, {m} mode",
            "figure": round(run["prefill_ms"], 3),
            "unit": "ms",
            "floor": None,
            "peer": f"PyTorch torch.compile {t_pre:.3f} ms" if t_pre else None,
        })
        rows.append({
            "what": f"generate start-up (load + prepare + first token), {m} mode",
            "figure": round(run["first_token_s"], 2),
            "unit": f"s (load + prepare {run['load_prepare_s']:.2f} s)",
            "floor": None,
            "peer": None,
        })
    rows.append({"what": "export_causal_lm of the Llama-3.2-1B-shaped model (2.47 GB bf16)",
                 "figure": round(gen["export_s"], 1), "unit": "s", "floor": None, "peer": None})
    return rows


GEMV_FORMS = [  # bench_gemv's impl, the row's words after "bf16", whether the read floor is named
    ("own.auto+pdl", ", baton's own kernel in a PDL chain (weights streamed before the wait)", True),
    ("own.auto", ", baton's own kernel, one launch (no PDL)", True),
    ("own.rms+pdl", " with the RMSNorm prologue (rms_norm_gemm), PDL chain", False),
    ("own.swiglu+pdl", " with the SwiGLU prologue (swiglu_gemm_add), PDL chain", False),
]


def gemv_rows(gemv, peers):
    """bench_gemv's decode GEMVs (bf16, cold W, in graphs): baton's own kernel as a decode step
    runs it (PDL chain) and alone, and the fused prologues, each against the copy and the read of
    W's bytes and cuBLASLt in the same run, and PyTorch's F.linear (cold) where the peer script
    timed the same x[1, K] . W[N, K]^T."""
    res = gemv["results"]
    rows = []
    for shape in dict.fromkeys(r["shape"] for r in res):
        at = {r["impl"]: r for r in res if r["shape"] == shape}
        if "own.auto+pdl" not in at or "cublaslt" not in at:
            continue
        n, k = (int(t[1:]) for t in shape.split(".")[1:3])
        lt = at["cublaslt"]["us"]
        torch = best_peer(peers, "gemv", f"x[1,{k}].W[{n},{k}]^T", True)
        for impl, words, with_read in GEMV_FORMS:
            r = at.get(impl)
            if not r:
                continue
            unit = f"µs ({r['us'] / r['copy_us']:.2f}× the copy of W's bytes"
            floor = f"copy kernel of W's bytes {r['copy_us']:.2f} µs"
            if with_read:
                unit += f", {r['us'] / r['read_us']:.2f}× the read"
                floor += f", read-only kernel {r['read_us']:.2f} µs"
                if impl.endswith("+pdl") and "read(W)+pdl" in at:
                    floor += f", the read in a PDL chain {at['read(W)+pdl']['us']:.2f} µs"
                peer = f"cuBLASLt (the gemm delegate) {lt:.2f} µs"
                if torch:
                    peer += f"; PyTorch F.linear {torch['us']:.2f} µs (cold, same call)"
            else:
                peer = (f"the same GEMV without the prologue {at['own.auto+pdl']['us']:.2f} µs; "
                        f"cuBLASLt alone {lt:.2f} µs")
            rows.append({"what": f"decode GEMV {shape} bf16{words}, cold",
                         "figure": round(r["us"], 2), "unit": unit + ")", "floor": floor,
                         "peer": peer})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--source", default="")
    ap.add_argument("--date", help="the call's date (default: bench_decoder.json's)")
    ap.add_argument("--command", default="PARTS=\"tests decoder llm\" bash scripts/gpu-round.sh")
    a = ap.parse_args()
    dec = load(a.dir, "bench_decoder.json")
    peers = load(a.dir, "decoder_peers.json")
    gen = load(a.dir, "bench_generate.json")
    tdec = load(a.dir, "torch_decode.json")
    gemv = load(a.dir, "bench_gemv.json")
    if not dec and not gen:
        sys.exit(f"record_round: {a.dir} has neither bench_decoder.json nor bench_generate.json")
    rows = (decoder_rows(dec, peers) if dec else []) + (gemv_rows(gemv, peers) if gemv else [])
    rows += llm_rows(gen, tdec) if gen else []
    device = (dec or gen)["device"]
    # bench_decoder writes its date; a call without it (PARTS=llm) takes --date
    date = a.date or (dec["date"][:10] if dec else None)
    if not date:
        sys.exit("record_round: no bench_decoder.json to date the record: give --date YYYY-MM-DD")
    rec = {"date": date, "device": device, "command": a.command, "source": a.source, "rows": rows}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(rec, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"record_round: {len(rows)} rows -> {a.out}")


if __name__ == "__main__":
    main()
