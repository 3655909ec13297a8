"""peers.py: the RMSNorm shapes of bench/cuda/bench_kernels.cu through PyTorch's
torch.nn.functional.rms_norm (forward, and backward by autograd) and a jitted JAX RMSNorm, timed
the same way where the framework allows: median of >= 50 runs, input sets rotated so that together
they exceed twice the L2 cache. Torch is timed with CUDA events around each call (after a warm-up;
launch overhead included, as a user sees it). JAX is timed by the wall clock around a jitted call
and block_until_ready (dispatch included: some tens of microseconds, which matters for the small
shapes only). Run torch and JAX in separate processes (--only), so that neither holds memory the
other preallocates. Effective bandwidth counts the same bytes as bench_kernels.

    python3 bench/kernels/peers.py [--runs N] [--quick]
Lines starting with RESULT are for scripts/gpu-kernels.sh's table.
"""
import argparse
import os
import statistics
import sys
import time

RUNS = 100
BIG = [(16384, 8192), (32768, 4096), (65536, 4096)]
# (x shape, weight shape): the tutorial's x (4, 512, 512) with w (512, 512), and decode rows
SMALL = [((4, 512, 512), (512, 512)), ((1, 4096), (4096,)), ((32, 4096), (4096,))]


def result(line):
    print("RESULT peers " + line, flush=True)


def sets_for(bytes_per_set, l2):
    return max(2, min(64, -(-2 * l2 // bytes_per_set)))


def bench_torch(runs, quick):
    import torch
    import torch.nn.functional as F
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"torch {torch.__version__} on {props.name}", flush=True)

    def timed(fn, nsets):
        for i in range(5):
            fn(i % nsets)
        torch.cuda.synchronize()
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(runs)]
        for i, (a, b) in enumerate(evs):
            a.record()
            fn(i % nsets)
            b.record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in evs) * 1e3

    cases = [((n1, n2), (n2,), dt) for dt in (torch.bfloat16, torch.float32) for n1, n2 in BIG]
    cases += [(xs, ws, torch.bfloat16) for xs, ws in SMALL]
    for xs, ws, dt in cases:
        if quick and dt == torch.float32:
            continue
        e = torch.finfo(dt).bits // 8
        n = 1
        for d in xs:
            n *= d
        n2 = 1
        for d in ws:
            n2 *= d
        nsets = sets_for(3 * n * e, l2)
        xs_ = [torch.randn(xs, device=dev, dtype=dt, requires_grad=True) for _ in range(nsets)]
        w_ = [torch.randn(ws, device=dev, dtype=dt, requires_grad=True) for _ in range(nsets)]
        g_ = [torch.randn(xs, device=dev, dtype=dt) for _ in range(nsets)]
        with torch.no_grad():
            fwd_us = timed(lambda k: F.rms_norm(xs_[k], ws, w_[k], 1e-5), nsets)
        ys = [F.rms_norm(xs_[k], ws, w_[k], 1e-5) for k in range(nsets)]
        bwd_us = timed(lambda k: torch.autograd.grad(ys[k], (xs_[k], w_[k]), g_[k],
                                                     retain_graph=True), nsets)
        fb = n * e * 2 + n2 * e
        bb = n * e * 3 + n2 * e * 2 + (n // n2) * 4
        name = {torch.bfloat16: "bf16", torch.float32: "f32"}[dt]
        shape = "x".join(str(d) for d in ((n // n2, n2)))
        print(f"  torch fwd {name:5} {shape:>14} {fwd_us:10.2f} us {fb / fwd_us / 1e6:6.3f} TB/s   "
              f"bwd {bwd_us:10.2f} us {bb / bwd_us / 1e6:6.3f} TB/s", flush=True)
        result(f"torch fwd {name} {shape} us={fwd_us:.2f} tbs={fb / fwd_us / 1e6:.3f}")
        result(f"torch bwd {name} {shape} us={bwd_us:.2f} tbs={bb / bwd_us / 1e6:.3f}")
        del xs_, w_, g_, ys
        torch.cuda.empty_cache()


def bench_jax(runs, quick):
    import jax
    import jax.numpy as jnp
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}", flush=True)
    l2 = 50 << 20

    def rms_norm(x, w, eps=1e-5):
        axes = tuple(range(x.ndim - w.ndim, x.ndim))
        xf = x.astype(jnp.float32)
        inv = jax.lax.rsqrt(jnp.mean(xf * xf, axis=axes, keepdims=True) + eps)
        return (xf * inv).astype(x.dtype) * w

    fwd = jax.jit(rms_norm)

    def loss(x, w, g):
        return jnp.sum(rms_norm(x, w).astype(jnp.float32) * g.astype(jnp.float32))

    bwd = jax.jit(jax.grad(loss, argnums=(0, 1)))

    def wall(fn, args_sets):
        for i in range(5):
            jax.block_until_ready(fn(*args_sets[i % len(args_sets)]))
        ts = []
        for i in range(runs):
            a = args_sets[i % len(args_sets)]
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*a))
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e6

    key = jax.random.PRNGKey(0)
    cases = [((n1, n2), (n2,), dt) for dt in (jnp.bfloat16, jnp.float32) for n1, n2 in BIG]
    cases += [(xs, ws, jnp.bfloat16) for xs, ws in SMALL]
    for xs, ws, dt in cases:
        if quick and dt == jnp.float32:
            continue
        e = jnp.dtype(dt).itemsize
        n = 1
        for d in xs:
            n *= d
        n2 = 1
        for d in ws:
            n2 *= d
        nsets = sets_for(3 * n * e, l2)
        sets = []
        for k in range(nsets):
            key, a, b, c = jax.random.split(key, 4)
            sets.append((jax.random.normal(a, xs, dt), jax.random.normal(b, ws, dt),
                         jax.random.normal(c, xs, dt)))
        fwd_us = wall(fwd, [(x, w) for x, w, _ in sets])
        bwd_us = wall(bwd, sets)
        fb = n * e * 2 + n2 * e
        bb = n * e * 3 + n2 * e * 2 + (n // n2) * 4
        name = "bf16" if dt == jnp.bfloat16 else "f32"
        shape = f"{n // n2}x{n2}"
        line = (f"  jax   fwd {name:5} {shape:>14} {fwd_us:10.2f} us {fb / fwd_us / 1e6:6.3f} TB/s   "
                f"bwd {bwd_us:10.2f} us {bb / bwd_us / 1e6:6.3f} TB/s  (wall clock, dispatch incl.)")
        result(f"jax fwd {name} {shape} us={fwd_us:.2f} tbs={fb / fwd_us / 1e6:.3f}")
        result(f"jax bwd {name} {shape} us={bwd_us:.2f} tbs={bb / bwd_us / 1e6:.3f}")
        print(line, flush=True)
        del sets


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--quick", action="store_true", help="bf16 only")
    ap.add_argument("--only", choices=["torch", "jax"], default=None)
    args = ap.parse_args()
    runs = max(50, args.runs)
    ok = True
    if args.only in (None, "torch"):
        try:
            bench_torch(runs, args.quick)
        except Exception as e:  # report and go on to JAX
            print(f"torch: {type(e).__name__}: {e}", flush=True)
            ok = False
    if args.only in (None, "jax"):
        try:
            bench_jax(runs, args.quick)
        except Exception as e:
            print(f"jax: {type(e).__name__}: {e}", flush=True)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
