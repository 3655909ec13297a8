#!/usr/bin/env python3
"""bench_llm.py: issue 44's decode figure on the CPU. A small Llama-architecture model with random
bf16 weights (bench/llm/bench_generate.py's stand-in: no download, no transformers) is exported by
baton_export.export_causal_lm(device="cpu"), then build/generate --gpu=cpu decodes NEW tokens
after a PROMPT-token prompt, against a PyTorch eager greedy loop over the same weights with a
static KV cache (torch ops only: F.linear, rms_norm, rope as Hugging Face writes it,
scaled_dot_product_attention with GQA), at the same thread count. Prints decode ms/token for both,
their ratio, and how many greedy tokens agree (bf16 rounding may part them after a while).

  PYTHONPATH=python python3 bench/cpu/bench_llm.py --generate build/generate [--threads N]
      [--prompt 16] [--new 64] [--layers 8] [--hidden 512] [--out DIR] [--json FILE]"""
import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
import baton_export  # noqa: E402


def load_standin():
    path = os.path.join(here, "..", "llm", "bench_generate.py")
    spec = importlib.util.spec_from_file_location("bench_generate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.standin


def torch_generate(sd, cfg, inv_freq, prompt, new, max_seq):
    """Greedy decode in PyTorch eager, one token at a time; returns (ids, decode s per token)."""
    D, Dh = cfg["hidden_size"], cfg["head_dim"]
    H, Hkv, L = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    eps = cfg["rms_norm_eps"]
    bf = torch.bfloat16
    E = sd["model.embed_tokens.weight"]
    layers = []
    for i in range(L):
        p = f"model.layers.{i}."
        layers.append({k: sd[p + k] for k in (
            "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
            "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")})
    kc = [torch.zeros(1, Hkv, max_seq, Dh, dtype=bf) for _ in range(L)]
    vc = [torch.zeros(1, Hkv, max_seq, Dh, dtype=bf) for _ in range(L)]

    def rms(x, w):  # Hugging Face's LlamaRMSNorm: f32 inside, back to bf16, times the weight
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return w * xf.to(bf)

    def rot(x):
        x1, x2 = x[..., : Dh // 2], x[..., Dh // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def step(tok, pos):
        x = E[tok].view(1, D)
        f = pos * inv_freq
        emb = torch.cat((f, f))
        cos, sin = emb.cos().to(bf), emb.sin().to(bf)
        for i, w in enumerate(layers):
            h = rms(x, w["input_layernorm.weight"])
            q = F.linear(h, w["self_attn.q_proj.weight"]).view(1, H, 1, Dh)
            k = F.linear(h, w["self_attn.k_proj.weight"]).view(1, Hkv, 1, Dh)
            v = F.linear(h, w["self_attn.v_proj.weight"]).view(1, Hkv, 1, Dh)
            q = q * cos + rot(q) * sin
            k = k * cos + rot(k) * sin
            kc[i][:, :, pos] = k[:, :, 0]
            vc[i][:, :, pos] = v[:, :, 0]
            a = F.scaled_dot_product_attention(q, kc[i][:, :, : pos + 1], vc[i][:, :, : pos + 1],
                                               enable_gqa=True)
            x = x + F.linear(a.reshape(1, H * Dh), w["self_attn.o_proj.weight"])
            h = rms(x, w["post_attention_layernorm.weight"])
            g = F.silu(F.linear(h, w["mlp.gate_proj.weight"])) * F.linear(h, w["mlp.up_proj.weight"])
            x = x + F.linear(g, w["mlp.down_proj.weight"])
        return F.linear(rms(x, sd["model.norm.weight"]), E).argmax(-1).item()

    with torch.inference_mode():
        for pos, tok in enumerate(prompt[:-1]):
            step(tok, pos)
        out, tok, pos = [], prompt[-1], len(prompt) - 1
        t0 = None
        for n in range(new):
            if n == 1:  # the first decoded token is the prompt's last step; time the rest
                t0 = time.perf_counter()
            tok = step(tok, pos)
            out.append(tok)
            pos += 1
        dt = (time.perf_counter() - t0) / (new - 1)
    return out, dt


def run_generate(exe, d, prompt, new, threads):
    env = dict(os.environ, BATON_CPU_THREADS=str(threads))
    cmd = [exe, d, "--prompt", ",".join(map(str, prompt)), "--max-new-tokens", str(new),
           "--gpu=cpu", "--warmup", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(f"generate failed: {r.stderr[-2000:]}")
    m = re.search(r"decode: (\d+) tokens in ([\d.]+) ms .*?([\d.]+) ms/token", r.stderr)
    if not m:
        raise SystemExit(f"generate: no decode rate in its output:\n{r.stderr[-2000:]}")
    ids = [int(t) for t in r.stdout.strip().splitlines()[-1].split()]
    return ids, float(m.group(3)) * 1e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--generate", default="build/generate")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    D = a.hidden
    cfg = dict(model_type="llama", vocab_size=a.vocab, hidden_size=D, intermediate_size=3 * D,
               num_hidden_layers=a.layers, num_attention_heads=D // 64,
               num_key_value_heads=max(1, D // 128), head_dim=64, rms_norm_eps=1e-5,
               rope_theta=10000.0, tie_word_embeddings=True, hidden_act="silu")
    max_seq = a.prompt + a.new + 1
    model = load_standin()(cfg, "cpu")
    sd = model.state_dict()
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    d = a.out or tempfile.mkdtemp(prefix="bench_llm_cpu_")
    baton_export.export_causal_lm(model, d, max_seq_len=max_seq, device="cpu")
    prompt = [(7 * i + 3) % 1000 + 1 for i in range(a.prompt)]
    b_ids, b_s = run_generate(a.generate, d, prompt, a.new, a.threads)
    t_ids, t_s = torch_generate(sd, cfg, model.model.rotary_emb.inv_freq, prompt, a.new, max_seq)
    same = next((i for i, (x, y) in enumerate(zip(b_ids, t_ids)) if x != y), len(t_ids))
    res = {"threads": torch.get_num_threads(), "torch": torch.__version__, "params_bytes": nbytes,
           "layers": a.layers, "hidden": D, "vocab": a.vocab, "prompt": a.prompt, "new": a.new,
           "baton_ms_per_token": round(b_s * 1e3, 3), "torch_ms_per_token": round(t_s * 1e3, 3),
           "ratio": round(b_s / t_s, 3), "greedy_tokens_agreeing": same}
    print(f"{nbytes / 1e6:.0f} MB of bf16 weights, {a.layers} layers, hidden {D}, {a.threads} "
          f"threads: baton {b_s * 1e3:.3f} ms/token, PyTorch eager {t_s * 1e3:.3f} ms/token, "
          f"ratio {b_s / t_s:.2f}; the first {same} of {a.new} greedy tokens agree")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
