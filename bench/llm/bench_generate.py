#!/usr/bin/env python3
"""bench_generate.py: issue 42's figures for build/generate on one GPU. A Llama-3.2-1B-shaped model
with random weights (bf16) is exported by baton_export.export_causal_lm, then `generate` runs a
PROMPT-token prompt (prefill, after --warmup runs) and decodes NEW tokens in each sync mode. Prints
the export time, generate's start-up, prefill tokens/s, decode ms/token, host waits per token, and
the decode floor: (weight bytes + KV bytes read per token at the mean context) at the read rate
this process measures (a bf16 sum over 4 GiB), with baton's share of it.

transformers builds the model when importable; otherwise a stand-in with the same config,
state_dict names and default rope (the figures do not depend on the rope frequencies).

  PYTHONPATH=python python3 bench/llm/bench_generate.py --generate build/generate
      [--prompt 1024] [--new 129] [--modes graph,boundary,strict] [--layers 16] [--out DIR]
      [--prefill-logits last|all] [--decode-outputs logits --sample T,K,P]"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import baton_export  # noqa: E402

CFG = dict(model_type="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
           num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
           rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True, hidden_act="silu")


def standin(cfg, device):
    """The state_dict and rope buffer export_causal_lm reads, without transformers."""
    D, F, Dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    H, Hkv, V = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    g = torch.Generator(device=device).manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, generator=g, device=device) * 0.02).to(torch.bfloat16)

    sd = {"model.embed_tokens.weight": w(V, D), "model.norm.weight": 1 + w(D)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        sd.update({p + "input_layernorm.weight": 1 + w(D),
                   p + "post_attention_layernorm.weight": 1 + w(D),
                   p + "self_attn.q_proj.weight": w(H * Dh, D),
                   p + "self_attn.k_proj.weight": w(Hkv * Dh, D),
                   p + "self_attn.v_proj.weight": w(Hkv * Dh, D),
                   p + "self_attn.o_proj.weight": w(D, H * Dh),
                   p + "mlp.gate_proj.weight": w(F, D), p + "mlp.up_proj.weight": w(F, D),
                   p + "mlp.down_proj.weight": w(D, F)})
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, Dh, 2, dtype=torch.float32) / Dh))
    rot = types.SimpleNamespace(inv_freq=inv, attention_scaling=1.0)
    return types.SimpleNamespace(config=types.SimpleNamespace(**cfg), state_dict=lambda: sd,
                                 model=types.SimpleNamespace(rotary_emb=rot))


def make_model(cfg, device):
    try:
        import transformers as tf
    except ImportError:
        return standin(cfg, device), "stand-in (no transformers)"
    c = {k: v for k, v in cfg.items() if k != "model_type"}
    with torch.device(device):
        m = tf.LlamaForCausalLM(tf.LlamaConfig(**c)).to(torch.bfloat16).eval()
    return m, f"transformers {tf.__version__}"


def read_rate(device):
    x = torch.ones(2 << 30, dtype=torch.bfloat16, device=device)  # 4 GiB
    x.sum()
    torch.cuda.synchronize()
    best = 0.0
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        x.sum()
        e1.record()
        torch.cuda.synchronize()
        best = max(best, x.numel() * 2 / (e0.elapsed_time(e1) * 1e-3))
    del x
    return best


def run_generate(exe, d, prompt, new, mode, warmup, timeout, extra=()):
    ids = ",".join(str((7 * i + 3) % 1000 + 1) for i in range(prompt))
    cmd = [exe, d, "--prompt", ids, "--max-new-tokens", str(new), "--gpu=cuda", f"--mode={mode}",
           "--warmup", str(warmup), *extra]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:  # reported, and the other variants still run
        return None, f"did not finish in {timeout} s"
    if r.returncode:
        return None, f"failed: {r.stderr[-2000:]}"
    e = r.stderr
    f = {"mode": mode}
    m = re.search(r"load\+prepare ([\d.]+) s, first token ([\d.]+) s", e)
    f["load_prepare_s"], f["first_token_s"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"prefill: (\d+) tokens in ([\d.]+) ms", e)
    f["prefill_ms"] = float(m.group(2))
    m = re.search(r"decode: (\d+) tokens in ([\d.]+) ms .*?([\d.]+) ms/token\), per token ([\d.]+) "
                  r"host waits", e)
    if m:
        f["decode_ms_per_token"] = float(m.group(3))
        f["host_waits_per_token"] = float(m.group(4))
    m = re.search(r"decode: ([\d.]+) us/token on the host outside", e)
    if m:
        f["host_us_per_token"] = float(m.group(1))
    m = re.search(r"after the first run (\d+) captures, (\d+) graph updates", e)
    if m:
        f["captures_after_first"], f["graph_updates_after_first"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"sampling: on (the host|the decode's GPU)", e)
    if m:
        f["sample_on"] = "host" if m.group(1) == "the host" else "gpu"
    f["ids"] = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    return f, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--generate", default="build/generate")
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--new", type=int, default=129)
    ap.add_argument("--modes", default="graph,boundary,strict")
    ap.add_argument("--layers", type=int, default=CFG["num_hidden_layers"])
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--prefill-logits", choices=["all", "last"], default="last",
                    help="export_causal_lm's prefill_logits (last: one row of logits back)")
    ap.add_argument("--fused", choices=["on", "off", "both", "gemv", "gemv+on"], default="both",
                    help="export_causal_lm's fused plans (qkv+rope_cache_update, gate_up+swiglu, "
                         "gemm_add residuals), the unfused per-op plans, or both (default); gemv: "
                         "the decode plan with rms_norm_gemm and swiglu_gemm_add (fused='gemv'); "
                         "gemv+on: that and the fused plans")
    ap.add_argument("--decode-outputs", default="next_token",
                    help="the decode plan's outputs (comma-separated: logits, next_token); "
                         "next_token: the greedy argmax on the GPU, as the PyTorch recipe does")
    ap.add_argument("--sample", metavar="T,K,P",
                    help="sample instead of greedy: generate --temperature T --top-k K --top-p P "
                         "--seed 1, once with the sampler on the GPU and once on the host "
                         "(--sample-on), whose tokens are compared; needs --decode-outputs logits")
    ap.add_argument("--run-timeout", type=float, default=120,
                    help="seconds a generate run may take before it is reported and skipped")
    ap.add_argument("--out", help="keep the exported plans here (default: a temporary folder)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    sampling = [()]  # greedy
    if a.sample:
        if "logits" not in a.decode_outputs.split(","):
            raise SystemExit("bench_generate: --sample needs --decode-outputs logits (the sampler "
                             "reads the decode plan's logits)")
        t_, k_, p_ = a.sample.split(",")
        flags = ["--temperature", t_, "--top-k", k_, "--top-p", p_, "--seed", "1"]
        sampling = [tuple(flags + ["--sample-on=device"]), tuple(flags + ["--sample-on=host"])]
    if not torch.cuda.is_available():
        raise SystemExit("bench_generate: no CUDA device")
    cfg = dict(CFG, num_hidden_layers=a.layers)
    dev = "cuda"
    rate = read_rate(dev)
    t = time.time()
    model, how = make_model(cfg, dev)
    t_model = time.time() - t
    base = a.out or tempfile.mkdtemp(prefix="bench_generate_")
    variants = {"on": [True], "off": [False], "both": [True, False], "gemv": ["gemv"],
                "gemv+on": ["gemv", True]}[a.fused]
    label = {True: "fused", False: "unfused", "gemv": "gemv"}
    dirs, t_exports = {}, {}
    for fused in variants:
        d = dirs[fused] = os.path.join(base, label[fused])
        t = time.time()
        baton_export.export_causal_lm(model, d, max_seq_len=a.prompt + a.new, device="cuda:0",
                                      verbose=False, prefill_logits=a.prefill_logits,
                                      fused=fused,
                                      decode_outputs=tuple(a.decode_outputs.split(",")))
        t_exports[fused] = time.time() - t
    t_export = t_exports[variants[0]]
    wbytes = os.path.getsize(os.path.join(dirs[variants[0]], "weights.safetensors"))
    del model
    torch.cuda.empty_cache()
    L, Hkv, Dh = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]
    ctx = a.prompt + a.new / 2
    kv = 2 * L * ctx * Hkv * Dh * 2
    floor_ms = (wbytes + kv) / rate * 1e3
    exp_s = ", ".join(f"{v:.1f} s {label[k]}" for k, v in t_exports.items())
    print(f"device {torch.cuda.get_device_name()}; model: {how}, {L} layers, bf16; built in "
          f"{t_model:.1f} s, exported in {exp_s}; weights {wbytes / 1e9:.2f} GB; "
          f"prefill logits: {a.prefill_logits}; decode outputs: {a.decode_outputs}")
    print(f"read rate {rate / 1e12:.2f} TB/s; decode floor at mean context {ctx:.0f}: "
          f"{floor_ms:.3f} ms/token (weights {wbytes / 1e9:.2f} GB + KV {kv / 1e6:.1f} MB)")
    res = {"device": torch.cuda.get_device_name(), "model": how, "export_s": t_export,
           "export_s_by_variant": {label[k]: v for k, v in t_exports.items()},
           "read_rate_Bps": rate, "floor_ms_per_token": floor_ms, "prompt": a.prompt,
           "new": a.new, "runs": []}
    for fused, mode, extra in [(f, m, x) for f in variants for m in a.modes.split(",")
                               for x in sampling]:
        f, why = run_generate(a.generate, dirs[fused], a.prompt, a.new, mode, a.warmup,
                              a.run_timeout, extra)
        if f is None:
            print(f"{label[fused]:7s} {mode:9s} generate {why}", flush=True)
            res["runs"].append({"mode": mode, "fused": fused, "error": why})
            continue
        f["fused"] = fused
        if a.sample:
            f["sample"] = a.sample
            twin = [g for g in res["runs"] if g.get("fused") == fused and g.get("mode") == mode
                    and g.get("sample") and "ids" in g]
            if twin:  # the GPU's run came first: the same tokens, but for a draw within the
                # weights' last bits (docs/generate.md)
                f["same_ids_as_gpu"] = twin[0]["ids"] == f["ids"]
                print(f"{label[fused]:7s} {mode:9s} sampled on the host: "
                      f"{'the same' if f['same_ids_as_gpu'] else 'NOT the same'} tokens as on "
                      f"the GPU", flush=True)
        res["runs"].append(f)
        share = floor_ms / f["decode_ms_per_token"] if "decode_ms_per_token" in f else 0
        how_s = f"sampled on the {f.get('sample_on', '?')}: " if a.sample else ""
        print(f"{label[fused]:7s} {mode:9s} {how_s}prefill {a.prompt} tokens "
              f"{f['prefill_ms']:8.3f} ms ({a.prompt / f['prefill_ms'] * 1e3:9.0f} tokens/s); "
              f"decode {f.get('decode_ms_per_token', float('nan')):.3f} ms/token ({share:.0%} of "
              f"the floor), {f.get('host_waits_per_token', float('nan')):.2f} host waits/token, "
              f"{f.get('host_us_per_token', float('nan')):.1f} us/token on the host outside the "
              f"run, "
              f"{f.get('captures_after_first', '?')} captures and "
              f"{f.get('graph_updates_after_first', '?')} graph updates after the first run; "
              f"load+prepare {f['load_prepare_s']:.2f} s, first token {f['first_token_s']:.2f} s "
              f"after start ({a.warmup} warm-up prefills included)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
