"""peers.py: PyTorch's CPU ops on the shapes and dtypes of bench/bench_cpu.c, at the same thread
count, timed the same way (the fastest of repeated wall-clock calls after two warm-up calls, outputs preallocated
with out= where the op takes it, so that neither side pays an allocation baton does not make).
Writes {"threads": N, "torch": "2.x", "ops": {key: microseconds}} for bench_cpu --peers.

    python3 bench/cpu/peers.py [--threads N] [--reps N] [--out FILE]

PyTorch from PyPI for Linux is the CUDA build; bench/cpu/setup_torch.sh installs it without its
CUDA wheels (CPU ops only) where a CPU-only machine should not download them.
"""
import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=int(os.environ.get("BATON_CPU_THREADS", "0")))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    threads = torch.get_num_threads()

    def timed(fn):
        fn()
        fn()
        t = []
        for _ in range(max(3, args.reps)):
            t0 = time.perf_counter()
            fn()
            t.append((time.perf_counter() - t0) * 1e6)
        return min(t)

    ops = {}
    with torch.inference_mode():
        for dt, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16"), (torch.float32, "f32")):
            x = torch.randn(1, 4096, dtype=dt)
            w = (torch.randn(4096, 4096) * 0.02).to(dt)  # [N, K]: nn.Linear's layout
            wkn = w.t().contiguous()  # [K, N]
            y = torch.empty(1, 4096, dtype=dt)
            ops["gemv_%s_nk" % name] = timed(lambda: F.linear(x, w))
            ops["gemv_%s_kn" % name] = timed(lambda: torch.matmul(x, wkn, out=y))
        a = torch.randn(2048, 4096)
        ya = torch.empty_like(a)
        ops["softshrink_f32"] = timed(lambda: torch.ops.aten.softshrink.out(a, 0.5, out=ya))
        s = torch.randn(4096)
        ys = torch.empty_like(s)
        ops["softshrink_small"] = timed(lambda: torch.ops.aten.softshrink.out(s, 0.5, out=ys))
        ab, bb = torch.randn(2048, 4096).bfloat16(), torch.randn(2048, 4096).bfloat16()
        yb = torch.empty_like(ab)
        ops["add_bf16"] = timed(lambda: torch.add(ab, bb, out=yb))
        xr, wr = torch.randn(4096, 4096), torch.randn(4096)
        ops["rmsnorm_f32"] = timed(lambda: F.rms_norm(xr, (4096,), wr, 1e-5))

        # sampling a token from 128256 logits as transformers' generate does (bench_cpu's sample
        # rows; bench/hf_sampling.py); greedy is torch.argmax
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        from hf_sampling import hf_sample  # bench/hf_sampling.py, both peer scripts'

        lf = torch.rand(1, 128256) * 8 - 4  # bench_cpu's logits: uniform in [-4, 4]
        lb = lf.bfloat16()
        ops["sample_topk_f32"] = timed(lambda: hf_sample(lf, 0.8, 50, 0.9))
        ops["sample_topk_bf16"] = timed(lambda: hf_sample(lb, 0.8, 50, 0.9))
        ops["sample_topp_f32"] = timed(lambda: hf_sample(lf, 0.8, 0, 0.9))
        lp = lf.clone()  # bench_cpu's peaked row: 30 tokens at 8 to 12
        for j in range(30):
            lp[0, (j * 4271 + 17) % 128256] = 8.0 + j / 7.5
        ops["sample_topp_peaked_f32"] = timed(lambda: hf_sample(lp, 0.8, 0, 0.9))
        ops["sample_greedy_f32"] = timed(lambda: torch.argmax(lf, dim=-1))
    doc = {"threads": threads, "torch": torch.__version__, "ops": ops}
    text = json.dumps(doc, indent=1)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
