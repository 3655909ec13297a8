"""decoder_peers.py: PyTorch's side of bench/cuda/bench_decoder.cu, on the same Llama-3.2-1B shapes
(bf16, batch 1): F.scaled_dot_product_attention for one decode token against 1024 to 32768 (powers
of 2) cached positions (32 query heads, 8 KV heads, head_dim 64, enable_gqa), with the flash and
cuDNN backends where they take the case and whatever PyTorch picks; prefill (causal, T = 1024,
2048, 4096, 8192, also in TFLOP/s); and F.linear for x [1, 2048] by W [N, 2048] (N = 2048, 2560,
8192, 16384, 128256; K = 2048, the decode GEMVs of issue 41); softmax, F.embedding and HF's
rope (with cos and sin given), and transformers' sampling (top-k / top-p warpers, multinomial) at
bench_decoder's shapes, cold. Each is timed two ways: warm (the
same inputs every call, the same W for F.linear, as PyTorch's published figures were taken) and
cold (the inputs rotated over sets that together exceed 2.5x the
L2 and 64 MB, as bench_decoder times baton). Calls are captured k at a time into a CUDA graph and
the per-call time is the median graph replay over k, as bench_decoder does, so launch overhead is
not counted for either.

    python3 bench/kernels/decoder_peers.py [--reps N] [--json FILE] [--only OP[,OP..]]
"""
import argparse
import json
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--only", help="the rows whose op contains this, or one of these "
                    "comma-separated (e.g. 'attention decode', "
                    "'attention decode ctx 32768', 'gemv')")
    args = ap.parse_args()

    def want(op):
        """Whether row `op` (its full name, as recorded) is asked for."""
        return not args.only or any(o in op for o in args.only.split(","))

    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print("decoder_peers: needs torch (%s)" % e)
        return 1
    if not torch.cuda.is_available():
        print("decoder_peers: no CUDA device")
        return 1
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print("device: %s, L2 %d MB, torch %s" % (props.name, l2 >> 20, torch.__version__))
    results = []

    def sets_for(nbytes, cap=256):
        want = max(64 << 20, int(2.5 * l2))
        return max(1, min(cap, -(-want // max(nbytes, 1))))

    def time_graph(fn, k):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(3):  # warm-up outside the capture (kernel selection, workspaces)
                fn(i)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(k):
                fn(i)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1000.0 / k)
        return statistics.median(times)

    def record(op, shape, impl, nbytes, us, warm):
        gbps = nbytes / us * 1e-3
        results.append({"op": op, "shape": shape, "impl": impl, "bytes": nbytes, "us": us,
                        "gbps": gbps, "cold": not warm})
        print("%-34s %-28s %-22s %8.2f us %8.1f GB/s %s" %
              (op, shape, impl, us, gbps, "warm" if warm else "cold"))

    H, HKV, DH = 32, 8, 64
    backends = [("auto", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends += [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    except ImportError:
        sdpa_kernel = None
    import contextlib

    for ctx in (1024, 2048, 4096, 8192, 16384, 32768):
        if not want("attention decode ctx %d" % ctx):
            continue
        kv_bytes = 2 * ctx * HKV * DH * 2
        for warm in (True, False):
            n = 1 if warm else sets_for(kv_bytes)
            q = [torch.randn(1, H, 1, DH, device=dev, dtype=torch.bfloat16) for _ in range(n)]
            k = [torch.randn(1, HKV, ctx, DH, device=dev, dtype=torch.bfloat16) for _ in range(n)]
            v = [torch.randn(1, HKV, ctx, DH, device=dev, dtype=torch.bfloat16) for _ in range(n)]
            for name, be in backends:
                cm = sdpa_kernel(be) if be is not None and sdpa_kernel else contextlib.nullcontext()
                try:
                    with cm:
                        us = time_graph(lambda i: F.scaled_dot_product_attention(
                            q[i % n], k[i % n], v[i % n], enable_gqa=True), min(max(n, 16), 256))
                except Exception as e:  # a backend that refuses the case (or GQA)
                    print("  sdpa %s at ctx %d: not available (%s)" % (name, ctx,
                                                                      str(e).split("\n")[0]))
                    continue
                record("attention decode ctx %d" % ctx, "q[1,32,1,64] kv[1,8,%d,64]" % ctx,
                       "torch sdpa " + name, kv_bytes + 2 * H * DH * 2, us, warm)
            del q, k, v
    for T in (1024, 2048, 4096, 8192):
        if not want("attention prefill T %d" % T):
            continue
        q = torch.randn(1, H, T, DH, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, HKV, T, DH, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, HKV, T, DH, device=dev, dtype=torch.bfloat16)
        for name, be in backends:
            cm = sdpa_kernel(be) if be is not None and sdpa_kernel else contextlib.nullcontext()
            try:
                with cm:
                    us = time_graph(lambda i: F.scaled_dot_product_attention(
                        q, k, v, is_causal=True, enable_gqa=True), 8)
            except Exception as e:
                print("  sdpa %s prefill T %d: not available (%s)" % (name, T,
                                                                      str(e).split("\n")[0]))
                continue
            record("attention prefill T %d" % T, "q[1,32,%d,64]" % T, "torch sdpa " + name,
                   T * HKV * DH * 2 * 2 + 2 * T * H * DH * 2, us, True)
            # causal: row r takes r + 1 keys, 4 flops per key and feature (as bench_decoder)
            print("  %.1f TFLOP/s" % (2.0 * H * DH * T * (T + 1) / us * 1e-6))
    for N in (2048, 2560, 8192, 16384, 128256) if want("gemv") else ():
        wbytes = N * 2048 * 2
        for warm in (True, False):
            n = 1 if warm else sets_for(wbytes, 64)
            x = [torch.randn(1, 2048, device=dev, dtype=torch.bfloat16) for _ in range(n)]
            w = [torch.randn(N, 2048, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(n)]
            # 16 calls a graph at least: a W of 525 MB is cold with one set, but a graph of one
            # call would add its launch to the call
            us = time_graph(lambda i: F.linear(x[i % n], w[i % n]), max(n, 16))
            record("gemv", "x[1,2048].W[%d,2048]^T" % N, "torch F.linear",
                   wbytes + 2048 * 2 + N * 2, us, warm)
            del x, w
    # The small ops, cold only (as bench_decoder's rows), each as the PyTorch recipe writes it:
    # softmax over the last dim (f32 logits); F.embedding of a decode token's id and of 8192 ids
    # from the [128256, 2048] table (one copy, ids uniform); and HF's rope of one layer, q * cos +
    # rotate_half(q) * sin with cos and sin given (HF forms them once per forward for all layers).
    # softmax rows, and ("softmax x+4") the same on x a view 4 bytes past a 16-byte boundary
    plain = ((1, 128256, "f32"), (8, 128256, "f32"), (64, 128256, "f32"), (67, 128256, "f32"),
             (128, 128256, "f32"), (256, 128256, "f32"), (4096, 8192, "f32"), (140, 65536, "f32"),
             (512, 65536, "f32"),
             (1024, 32000, "bf16"), (8192, 2048, "bf16"), (65536, 128, "bf16"),
             (65536, 127, "bf16"), (100, 128256, "bf16"), (1, 8192, "f32"), (1, 50257, "f32"),
             (8, 50257, "f32"), (7, 1000003, "bf16"))
    views = ((1, 50257, "f32"), (8, 50257, "f32"), (1024, 32000, "bf16"), (65536, 128, "bf16"))
    for op, shift, shapes in (("softmax", 0, plain), ("softmax x+4", 4, views)):
        for rows, V, dt in shapes if want(op) else ():
            tdt, esz = (torch.float32, 4) if dt == "f32" else (torch.bfloat16, 2)
            nbytes = rows * V * esz * 2
            n = sets_for(nbytes)
            off = shift // esz
            x = [(torch.randn(rows * V + off, device=dev, dtype=torch.float32) * 4).to(tdt)[off:]
                 .view(rows, V) for _ in range(n)]
            us = time_graph(lambda i: torch.softmax(x[i % n], dim=-1), min(max(n, 16), 256))
            record(op, "%s[%d,%d]" % (dt, rows, V), "torch softmax", nbytes, us, False)
            del x
    # F.gelu (erf) of bf16 [rows, 8192], as bench_decoder's gelu rows
    for rows in (1, 2048) if want("gelu") else ():
        nbytes = rows * 8192 * 2 * 2
        n = sets_for(nbytes)
        x = [torch.randn(rows, 8192, device=dev, dtype=torch.bfloat16) for _ in range(n)]
        us = time_graph(lambda i: F.gelu(x[i % n]), min(max(n, 16), 256))
        record("gelu", "bf16[%d,8192]" % rows, "torch F.gelu", nbytes, us, False)
        del x
    # F.silu(a) * b of bf16 [rows, 8192] (silu_mul), and of the halves of one [rows, 2F] (swiglu:
    # the gate_up GEMM's output; F = 8192 and an odd 8191, whose halves sit at different offsets)
    for rows in (1, 2048) if want("silu_mul") else ():
        nbytes = rows * 8192 * 2 * 3
        n = sets_for(nbytes)
        a = [torch.randn(rows, 8192, device=dev, dtype=torch.bfloat16) for _ in range(n)]
        b = [torch.randn(rows, 8192, device=dev, dtype=torch.bfloat16) for _ in range(n)]
        us = time_graph(lambda i: F.silu(a[i % n]) * b[i % n], min(max(n, 16), 256))
        record("silu_mul", "bf16[%d,8192]" % rows, "torch F.silu(a) * b", nbytes, us, False)
        del a, b
    for ff, rows in ((8192, 1), (8192, 2048), (8191, 1), (8191, 2048)) if want("swiglu") else ():
        nbytes = rows * ff * 2 * 3
        n = sets_for(nbytes)
        gu = [torch.randn(rows, 2 * ff, device=dev, dtype=torch.bfloat16) for _ in range(n)]
        us = time_graph(lambda i: F.silu(gu[i % n][..., :ff]) * gu[i % n][..., ff:],
                        min(max(n, 16), 256))
        record("swiglu", "bf16[%d,%d]" % (rows, 2 * ff), "torch F.silu(gu[..., :F]) * gu[..., F:]",
               nbytes, us, False)
        del gu
    # the reference table, and rows of 896 (Qwen2.5-0.5B: vocabulary 151936) as "embedding d896"
    for op, V, D in (("embedding", 128256, 2048), ("embedding d896", 151936, 896)):
        if not want(op):
            continue
        table = torch.randn(V, D, device=dev, dtype=torch.bfloat16)
        for rows in (1, 8192):
            nbytes = rows * (D * 2 * 2 + 8)
            n = sets_for(nbytes)
            ids = [torch.randint(0, V, (rows,), device=dev, dtype=torch.int64) for _ in range(n)]
            us = time_graph(lambda i: F.embedding(ids[i % n], table), min(max(n, 16), 256))
            record(op, "i64[%d]" % rows, "torch F.embedding", nbytes, us, False)
            del ids
        del table

    # sampling one token from a decode step's logits [1, 128256] as transformers' generate does
    # (bench/hf_sampling.py); greedy is torch.argmax. bench_decoder's rows.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from hf_sampling import hf_sample  # bench/hf_sampling.py, both peer scripts'

    # peaked: 30 logits in [8, 12) among [-2, 2), as bench_decoder's peaked rows
    def peaked_logits(V):
        x = torch.rand(1, V, device=dev) * 4 - 2
        x[0, torch.randint(0, V, (30,), device=dev)] = 8 + torch.rand(30, device=dev) * 4
        return x

    for op, dt, t, top_k, top_p in (("sample top_k 50 top_p 0.9 t 0.8", "f32", 0.8, 50, 0.9),
                                    ("sample bf16 top_k 50 top_p 0.9", "bf16", 0.8, 50, 0.9),
                                    ("sample top_p 0.9 t 0.8", "f32", 0.8, 0, 0.9),
                                    ("sample top_k 50 top_p 0.9 t 0.8, peaked", "f32", 0.8, 50, 0.9),
                                    ("sample top_p 0.9 t 0.8, peaked", "f32", 0.8, 0, 0.9),
                                    ("sample greedy (top_k 1)", "f32", 1.0, 1, 1.0)):
        if not want(op):
            continue
        V = 128256
        tdt, esz = (torch.float32, 4) if dt == "f32" else (torch.bfloat16, 2)
        nbytes = V * esz
        n = sets_for(nbytes)
        if op.endswith("peaked"):
            x = [peaked_logits(V).to(tdt) for _ in range(n)]
        else:
            x = [(torch.randn(1, V, device=dev, dtype=torch.float32) * 4).to(tdt) for _ in range(n)]
        if top_k == 1:
            fn, impl = (lambda i: torch.argmax(x[i % n], dim=-1)), "torch argmax"
        else:
            fn = lambda i: hf_sample(x[i % n], t, top_k, top_p)  # noqa: E731
            impl = "torch HF warpers + multinomial"
        try:
            us = time_graph(fn, min(max(n, 16), 256))
            record(op, "%s[1,%d]" % (dt, V), impl, nbytes, us, False)
        except RuntimeError as e:  # a PyTorch whose sampling cannot be captured in a graph
            print("%-34s %s: not timed (%s)" % (op, impl, str(e).splitlines()[0]))
        del x

    def rotate_half(t):
        h = t.shape[-1] // 2
        return torch.cat((-t[..., h:], t[..., :h]), dim=-1)

    # (rows, heads, head_dim): a decode row and 8192 at the reference shape, and a prompt of 37
    # tokens at head_dim 128 (Llama 3 8B's 32 heads)
    for rows, nh, dh in ((1, H, DH), (8192, H, DH), (37, 32, 128)) if want("rope") else ():
        nbytes = rows * (nh * dh * 2 * 2 + 8)
        n = sets_for(nbytes)
        q = [torch.randn(1, nh, rows, dh, device=dev, dtype=torch.bfloat16) for _ in range(n)]
        cos = [torch.randn(1, 1, rows, dh, device=dev, dtype=torch.bfloat16) for _ in range(n)]
        sin = [torch.randn(1, 1, rows, dh, device=dev, dtype=torch.bfloat16) for _ in range(n)]
        us = time_graph(lambda i: q[i % n] * cos[i % n] + rotate_half(q[i % n]) * sin[i % n],
                        min(max(n, 16), 256))
        record("rope", "bf16[%d,%d]" % (rows, nh * dh), "torch HF rotate_half", nbytes, us, False)
        del q, cos, sin
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"format": "baton.bench_decoder_peers", "format_version": 1,
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "device": props.name, "torch": torch.__version__,
                       "command": " ".join(sys.argv), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
