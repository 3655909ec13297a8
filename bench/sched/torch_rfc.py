#!/usr/bin/env python3
"""torch_rfc.py: the PyTorch programs that bench_sched's baton rows are compared with.

The RFC plan (examples/plans/rfc.json) in eager PyTorch: 8 x [matmul 1x4096 . 4096x4096 bf16 ->
rms_norm -> softshrink on the GPU -> +1 on the CPU], the next layer reading the CPU result, run
(a) synchronising only where the CPU step needs the data and (b) synchronising after every op.
For scale, also the 64-step RMSNorm chain (1x4096 bf16): a sync after each, one sync, and a CUDA
graph replay. Prints per-iteration medians (host clock around the whole iteration) and lines
"RESULT key value" for scripts.

Usage: python3 bench/sched/torch_rfc.py [--iters N] [--warmup W]
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F


def load_rfc(path):
    """Layers, eps, lambda and the add value from the plan, so both programs do the same work."""
    layers, eps, lam, add = 8, 1e-5, 0.5, 1.0
    if os.path.exists(path):
        plan = json.load(open(path))
        steps = plan["steps"]
        layers = sum(1 for s in steps if s.get("delegate") == "gemm")
        for s in steps:
            a = s.get("attrs", {})
            if s.get("kernel") == "rms_norm_fwd":
                eps = a.get("eps", eps)
            elif s.get("kernel") == "softshrink":
                lam = a.get("lambda", lam)
            elif s.get("kernel") == "add_scalar":
                add = a.get("value", add)
    return layers, eps, lam, add


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    us = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        us.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(us), us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--plan", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                   "examples", "plans", "rfc.json"))
    args = ap.parse_args()
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    layers, eps, lam, add = load_rfc(args.plan)
    print(f"rfc: {layers} layers, eps {eps}, softshrink lambda {lam}, +{add} on the CPU")

    g = torch.Generator(device="cpu").manual_seed(7)
    A = (torch.randn(4096, 4096, generator=g) * 0.02).to(torch.bfloat16).to(dev)
    ws = [(1.0 + 0.05 * torch.randn(4096, generator=g)).to(torch.bfloat16).to(dev)
          for _ in range(layers)]
    x0 = (torch.rand(1, 4096, generator=g) * 2 - 1).to(torch.bfloat16).pin_memory()

    def rfc(sync_each):
        def sync():
            if sync_each:
                torch.cuda.synchronize()

        x = x0
        for i in range(layers):
            h = x.to(dev, non_blocking=True)
            sync()
            h = h @ A
            sync()
            n = F.rms_norm(h, (4096,), ws[i], eps=eps)
            sync()
            s = F.softshrink(n, lam)
            sync()
            c = s.to("cpu")  # the CPU step needs the data: this waits
            x = c + add
        return x

    results = {}
    results["torch.rfc.eager_sync_for_cpu"], _ = timed(lambda: rfc(False), args.iters, args.warmup)
    results["torch.rfc.sync_after_each_op"], _ = timed(lambda: rfc(True), args.iters, args.warmup)

    # the 64-step chain, for scale
    xc = (torch.rand(1, 4096, generator=g) * 2 - 1).to(torch.bfloat16).to(dev)
    wc = ws[0]

    def chain(sync_each):
        h = xc
        for _ in range(64):
            h = F.rms_norm(h, (4096,), wc, eps=eps)
            if sync_each:
                torch.cuda.synchronize()
        if not sync_each:
            torch.cuda.synchronize()
        return h

    results["torch.chain64.sync_after_each"], _ = timed(lambda: chain(True), args.iters,
                                                         args.warmup)
    results["torch.chain64.one_sync"], _ = timed(lambda: chain(False), args.iters, args.warmup)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            h = xc
            for _ in range(64):
                h = F.rms_norm(h, (4096,), wc, eps=eps)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        h = xc
        for _ in range(64):
            h = F.rms_norm(h, (4096,), wc, eps=eps)

    def replay():
        graph.replay()
        torch.cuda.synchronize()

    results["torch.chain64.cuda_graph"], _ = timed(replay, args.iters, args.warmup)

    print(f"\nper iteration, median of {args.iters}:")
    for k, v in results.items():
        print(f"  {k:40s} {v:9.1f} us")
    for k, v in results.items():
        print(f"RESULT {k}_us {v:.2f}")


if __name__ == "__main__":
    main()
