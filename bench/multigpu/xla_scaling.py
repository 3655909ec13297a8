"""xla_scaling.py: XLA's own scaling of the tutorial's RMSNorm forward + backward over the GPUs of
one host, the peer that baton's sharded plan is read against (issue 14). A jitted function
computes y = rms_norm(x, w), then grad_x and grad_w of sum(y * g) by autodiff, with x and g
sharded by rows over a mesh of every visible GPU and w replicated (XLA inserts the all-reduce of
grad_w); the same function on one GPU with all the rows is the baseline. Efficiency =
t(1 GPU, all rows) / (N * t(N GPUs, all rows)). Timed two ways, by the wall clock, median of
--runs after a warm-up: each call blocked (the jitted call and block_until_ready around each), and
dispatch pipelined, as XLA's users run it (--runs calls issued back to back, then one
block_until_ready: the time per call), which hides the host's launch and wait between calls.

    NCCL_NVLS_ENABLE=0 python3 bench/multigpu/xla_scaling.py [--rows-per-gpu 65536] [--cols 4096]
Lines starting with RESULT are for scripts/gpu-all.sh's table.
"""
import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def rms_norm(x, w, eps=1e-5):
    xf = x.astype(jnp.float32)
    inv = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (xf * inv * w.astype(jnp.float32)).astype(x.dtype)


def loss(x, w, g):
    return jnp.sum(rms_norm(x, w).astype(jnp.float32) * g.astype(jnp.float32))


step = jax.jit(jax.grad(loss, argnums=(0, 1)))


def timed(x, w, g, runs):
    for _ in range(3):
        jax.block_until_ready(step(x, w, g))
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(step(x, w, g))
        t.append(time.perf_counter() - t0)
    return statistics.median(t)


def timed_pipelined(x, w, g, runs, rounds=5):
    for _ in range(3):
        jax.block_until_ready(step(x, w, g))
    t = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = None
        for _ in range(runs):  # each call's buffers freed when the next replaces them
            out = step(x, w, g)
        jax.block_until_ready(out)  # the calls run in order: the last ends after the others
        t.append((time.perf_counter() - t0) / runs)
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows-per-gpu", type=int, default=65536)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args()
    devs = jax.devices()
    n = len(devs)
    rows = a.rows_per_gpu * n
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(k[0], (rows, a.cols), jnp.bfloat16)
    g = jax.random.normal(k[1], (rows, a.cols), jnp.bfloat16)
    w = (1 + 0.1 * jax.random.normal(k[2], (a.cols,))).astype(jnp.bfloat16)
    one = [jax.device_put(v, devs[0]) for v in (x, w, g)]
    t1 = timed(*one, a.runs)
    mesh = Mesh(devs, ("x",))
    rows_s, rep = NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P())
    xs, gs, ws = jax.device_put(x, rows_s), jax.device_put(g, rows_s), jax.device_put(w, rep)
    tn = timed(xs, ws, gs, a.runs)
    eff = t1 / (n * tn)
    p1 = timed_pipelined(*one, a.runs)
    pn = timed_pipelined(xs, ws, gs, a.runs)
    peff = p1 / (n * pn)
    print(f"XLA RMSNorm fwd+grad, {rows}x{a.cols} bf16: 1 GPU {t1 * 1e6:.1f} us, {n} GPUs "
          f"{tn * 1e6:.1f} us, efficiency {eff:.3f} ({devs[0].device_kind})")
    print(f"RESULT xla_scaling.gpus {n}")
    print(f"RESULT xla_scaling.one_us {t1 * 1e6:.2f}")
    print(f"RESULT xla_scaling.n_us {tn * 1e6:.2f}")
    print(f"RESULT xla_scaling.efficiency {eff:.4f}")
    print(f"XLA RMSNorm fwd+grad, dispatch pipelined: 1 GPU {p1 * 1e6:.1f} us, {n} GPUs "
          f"{pn * 1e6:.1f} us a call, efficiency {peff:.3f}")
    print(f"RESULT xla_scaling.pipelined_one_us {p1 * 1e6:.2f}")
    print(f"RESULT xla_scaling.pipelined_n_us {pn * 1e6:.2f}")
    print(f"RESULT xla_scaling.pipelined_efficiency {peff:.4f}")


if __name__ == "__main__":
    main()
