"""torch_decode.py: the PyTorch peer of baton's decode benchmark. A Llama-family decoder written
the way gpt-fast writes it (static KV cache as module buffers, index_copy_ into it, SDPA with a
causal mask over the whole cache), compiled with torch.compile(mode="reduce-overhead",
fullgraph=True) so that each decode step replays one CUDA graph, and the same code eager. Random
weights from a config (the Llama-3.2-1B architecture by default), bf16, batch 1.

It times a decode step at context CONTEXT (the cache holds CONTEXT tokens, the step appends one)
as the wall time of many steps in a row with one synchronisation at the end, and the prefill of
PREFILL tokens, and prints the floor: the bytes a step must read (weights + the KV cache up to the
context) at the read rate of a device-to-device copy measured in the same process.

    python3 bench/llm/torch_decode.py [--context 1024] [--prefill 1024] [--steps 200] [--eager]
                                       [--json FILE]
Lines starting with RESULT are for scripts/gpu-llm.sh's table.
"""
import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

LLAMA_1B = dict(vocab=128256, dim=2048, layers=16, heads=32, kv_heads=8, inter=8192, theta=500000.0)


class Cache(nn.Module):
    def __init__(self, max_seq, kv_heads, head_dim, dtype):
        super().__init__()
        shape = (1, kv_heads, max_seq, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype), persistent=False)

    def update(self, pos, k, v):
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        return self.k, self.v


class Block(nn.Module):
    def __init__(self, c, max_seq, dtype):
        super().__init__()
        d, hd = c["dim"], c["dim"] // c["heads"]
        self.h, self.kvh, self.hd = c["heads"], c["kv_heads"], hd
        self.wqkv = nn.Linear(d, (c["heads"] + 2 * c["kv_heads"]) * hd, bias=False)
        self.wo = nn.Linear(c["heads"] * hd, d, bias=False)
        self.w13 = nn.Linear(d, 2 * c["inter"], bias=False)
        self.w2 = nn.Linear(c["inter"], d, bias=False)
        self.n1 = nn.RMSNorm(d, eps=1e-5)
        self.n2 = nn.RMSNorm(d, eps=1e-5)
        self.cache = Cache(max_seq, c["kv_heads"], hd, dtype)

    def forward(self, x, cos, sin, mask, pos):
        t = x.shape[1]
        q, k, v = self.wqkv(self.n1(x)).split(
            [self.h * self.hd, self.kvh * self.hd, self.kvh * self.hd], dim=-1)
        q = rope(q.view(1, t, self.h, self.hd), cos, sin).transpose(1, 2)
        k = rope(k.view(1, t, self.kvh, self.hd), cos, sin).transpose(1, 2)
        v = v.view(1, t, self.kvh, self.hd).transpose(1, 2)
        k, v = self.cache.update(pos, k, v)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + self.wo(o.transpose(1, 2).reshape(1, t, self.h * self.hd))
        g, u = self.w13(self.n2(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(g) * u)


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return (x * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)


class Model(nn.Module):
    def __init__(self, c, max_seq, dtype):
        super().__init__()
        self.emb = nn.Embedding(c["vocab"], c["dim"])
        self.blocks = nn.ModuleList(Block(c, max_seq, dtype) for _ in range(c["layers"]))
        self.norm = nn.RMSNorm(c["dim"], eps=1e-5)
        self.out = nn.Linear(c["dim"], c["vocab"], bias=False)
        self.out.weight = self.emb.weight  # tied, as Llama-3.2-1B's (2.47 GB of weights)
        hd = c["dim"] // c["heads"]
        inv = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().to(dtype), persistent=False)
        self.register_buffer("sin", ang.sin().to(dtype), persistent=False)
        self.register_buffer("causal", torch.ones(max_seq, max_seq, dtype=torch.bool).tril(),
                             persistent=False)

    def forward(self, ids, pos):
        x = self.emb(ids)
        cos = self.cos[pos].view(1, -1, 1, self.cos.shape[-1])
        sin = self.sin[pos].view(1, -1, 1, self.sin.shape[-1])
        mask = self.causal[pos].view(1, 1, pos.shape[0], -1)
        for b in self.blocks:
            x = b(x, cos, sin, mask, pos)
        return self.out(self.norm(x[:, -1:]))


def copy_rate(nbytes):
    a = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        b.copy_(a)
    e1.record()
    torch.cuda.synchronize()
    # a copy reads and writes each byte once: both count, as the floor's bytes are reads alone
    return 2 * nbytes * 10 / (e0.elapsed_time(e1) * 1e-3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--prefill", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--eager", action="store_true", help="also time eager PyTorch")
    ap.add_argument("--json", help="write the figures to this file")
    a = ap.parse_args()
    torch.manual_seed(0)
    c = LLAMA_1B
    dtype = torch.bfloat16
    max_seq = max(a.context, a.prefill) + a.steps + 8
    with torch.device("cuda"):
        m = Model(c, max_seq, dtype).to(dtype).eval()
    wbytes = sum(p.numel() * p.element_size() for p in m.parameters())  # tied: once
    hd = c["dim"] // c["heads"]
    kv_bytes = 2 * c["layers"] * c["kv_heads"] * hd * 2 * a.context
    rate = copy_rate(1 << 30)
    floor_ms = (wbytes + kv_bytes) / rate * 1e3
    print(f"weights {wbytes / 1e9:.3f} GB, KV at context {a.context}: {kv_bytes / 1e6:.1f} MB; "
          f"copy read rate {rate / 1e12:.2f} TB/s; floor {floor_ms:.3f} ms/token")
    print(f"RESULT torch_decode floor_ms {floor_ms:.4f} read_tbs {rate / 1e12:.3f}")

    def step_fn(f):
        ids = torch.zeros(1, 1, dtype=torch.long, device="cuda")
        def run(p):
            pos = torch.tensor([p], device="cuda")
            return f(ids, pos)
        return run

    def time_decode(f, label):
        run = step_fn(f)
        with torch.no_grad():
            for i in range(5):
                run(a.context + i)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(a.steps):
                out = run(a.context)
                # a generate loop reads the token back each step: so does this
                out.argmax(-1).item()
            t = (time.perf_counter() - t0) / a.steps * 1e3
        print(f"{label:<44} {t:8.3f} ms/token  ({1e3 / t:7.1f} tok/s, floor share "
              f"{floor_ms / t * 100:5.1f} %)")
        print(f"RESULT torch_decode {label.split()[0]} ms {t:.4f}")
        figures[label] = t
        return t

    def time_prefill(f, label):
        ids = torch.zeros(1, a.prefill, dtype=torch.long, device="cuda")
        pos = torch.arange(a.prefill, device="cuda")
        with torch.no_grad():
            for _ in range(3):
                f(ids, pos)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            n = 10
            for _ in range(n):
                f(ids, pos).argmax(-1).item()
            t = (time.perf_counter() - t0) / n * 1e3
        print(f"{label:<44} {t:8.3f} ms ({a.prefill / t * 1e3:9.0f} tok/s)")
        print(f"RESULT torch_prefill {label.split()[0]} ms {t:.4f}")
        figures[label] = t

    figures = {}
    compiled = torch.compile(m, mode="reduce-overhead", fullgraph=True)
    time_decode(compiled, "compiled (gpt-fast recipe): decode")
    time_prefill(torch.compile(m, fullgraph=True, dynamic=False), "compiled: prefill")
    if a.eager:
        time_decode(m, "eager: decode")
        time_prefill(m, "eager: prefill")
    if a.json:
        import json
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "context": a.context, "prefill": a.prefill, "floor_ms": floor_ms,
                       "weights_bytes": wbytes, "ms": figures}, f, indent=1)


if __name__ == "__main__":
    main()
