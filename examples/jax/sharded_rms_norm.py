"""sharded_rms_norm.py: baton's RMSNorm FFI kernels on several devices with custom_partitioning.

XLA cannot look inside an FFI call, so by default it all-gathers a sharded operand and runs the
call on the whole array on every device. This example, the multi-GPU part of the JAX custom-op
tutorial on baton's kernels, wraps the forward and backward FFI calls of rms_norm.py (which it
imports) in jax.experimental.custom_partitioning and tells XLA how they split:

  * x and the output gradient are sharded by batch (their leading dims) over a 1-D mesh of all
    visible devices (jax.devices()); each device runs baton's kernel on its own rows;
  * the weight is replicated, and so are the normalised (trailing, the weight's) dims of x: a
    row's mean square needs the whole row, so the rules ask for those dims to be gathered;
  * in the backward pass each device's kernel gives the grad_weight of its rows only; the partial
    sums are added across the mesh with jax.lax.psum.

It runs the forward pass and jax.grad of sum(rms_norm(x, w) * c) under jax.jit with x and c
sharded as NamedSharding(mesh, P('x')), and checks out, grad_x and grad_w against the unsharded
baton kernels (rms_norm.py's rms_norm on one device) and against the jax.numpy reference, for f32
and bf16, shapes (8, 512, 512) with weight (512, 512) and (16, 1024) with weight (1024,) (the batch
rounded up to a multiple of the device count), fresh random inputs each run. It also checks that the
results keep their sharding and that, on several devices, the kernels saw per-shard shapes. One
line per check; the exit status is non-zero when one fails. It works on one device too (a 1-device
mesh, where XLA skips partitioning).

    JAX_PLATFORMS=cuda python3 examples/jax/sharded_rms_norm.py --lib build-gpu/libbaton_jax.so
    JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=2 \\
        python3 examples/jax/sharded_rms_norm.py --lib build-jax/libbaton_jax.so

The library is found as rms_norm.py finds it (--lib, $BATON_JAX_LIB, or the newest build*/).
JAX uses the Shardy partitioner by default, which reads the sharding_rule; --gspmd switches to the
older GSPMD partitioner, which reads infer_sharding_from_operands instead (both call partition).
"""
import argparse
import functools
import math
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

# The single-device example, next to this file (Python puts the script's directory on sys.path):
# its library loading, FFI calls, custom_vjp rms_norm, reference and tolerances are reused as is.
import rms_norm as base

AXIS = "x"  # the mesh axis the batch is sharded over

# Shapes of x seen by the per-shard lowering functions, recorded while XLA partitions, so that a
# check can tell a real per-shard call from one that ran on the gathered array.
SEEN = []


# Rule helpers. Inside the custom_partitioning calls x is (batch..., n) and w is (n,): the
# wrappers below flatten the weight's dims into one, which lets one rule (and one sharding_rule
# string) serve every rank of weight. A reshape that keeps the leading dims costs nothing on a
# batch-sharded array.

def _batch_spec(sharding, batch_rank):
    """The PartitionSpec entries of the leading (batch) dims of an operand's sharding."""
    if not isinstance(sharding, NamedSharding):
        return (None,) * batch_rank  # not expressible on our mesh (or none): run replicated
    spec = tuple(sharding.spec) + (None,) * batch_rank
    return spec[:batch_rank]


def _mesh_axes(spec):
    """The mesh axis names a PartitionSpec uses (an entry may be a name or a tuple of names)."""
    axes = []
    for entry in spec:
        if entry is None:
            continue
        axes.extend(entry if isinstance(entry, tuple) else (entry,))
    return tuple(axes)


def _shardings(mesh, x_sharding, x_ndim):
    """x's sharding with the normalised dim replicated, invvar's (batch dims) and w's (none)."""
    bs = _batch_spec(x_sharding, x_ndim - 1)
    return (NamedSharding(mesh, P(*bs, None)), NamedSharding(mesh, P(*bs)),
            NamedSharding(mesh, P(None)), bs)


# Forward: (x, w) -> (y, invvar), invvar shaped like x's batch dims so that it is sharded the
# same way (baton's kernel writes it flat, one value per row, rows in x's order).

def _fwd_impl(x, w, eps):
    y, invvar = base.fwd_call(x, w, eps)
    return y, invvar.reshape(x.shape[:-1])


_fwd = custom_partitioning(_fwd_impl, static_argnums=(2,))


def _fwd_infer(eps, mesh, arg_shapes, result_shape):
    # GSPMD only: the results follow x's batch sharding; a sharded normalised dim is dropped.
    x_sh, iv_sh, _, _ = _shardings(mesh, arg_shapes[0].sharding, len(arg_shapes[0].shape))
    return x_sh, iv_sh


def _fwd_partition(eps, mesh, arg_shapes, result_shape):
    # Ask for x with its normalised dim replicated and w replicated (XLA inserts the gathers if
    # they came in otherwise); each device then calls the kernel on its own rows, no collectives.
    x_sh, iv_sh, w_sh, _ = _shardings(mesh, arg_shapes[0].sharding, len(arg_shapes[0].shape))

    def lower(x, w):
        SEEN.append(("fwd", x.shape))
        return _fwd_impl(x, w, eps)

    return mesh, lower, (x_sh, iv_sh), (x_sh, w_sh)


# Shardy's rule: '...' are the batch dims, passed through to y and invvar; n is the normalised
# dim, which must not be sharded (need_replication).
_fwd.def_partition(partition=_fwd_partition, infer_sharding_from_operands=_fwd_infer,
                   sharding_rule="... n, n -> ... n, ...", need_replication_factors=("n",))


# Backward: (g, invvar, x, w) -> (grad_x, grad_w).

def _bwd_impl(g, invvar, x, w, eps):
    grad_x, grad_w, _ = base.bwd_call(g, invvar.reshape(-1), x, w, eps)
    return grad_x, grad_w


_bwd = custom_partitioning(_bwd_impl, static_argnums=(4,))


def _bwd_infer(eps, mesh, arg_shapes, result_shape):
    # GSPMD only: grad_x is sharded like x (operand 2); grad_w is the weight's, replicated.
    x_sh, _, w_sh, _ = _shardings(mesh, arg_shapes[2].sharding, len(arg_shapes[2].shape))
    return x_sh, w_sh


def _bwd_partition(eps, mesh, arg_shapes, result_shape):
    # x decides the layout; g and invvar are asked to match it so that every device holds the
    # same rows of all three.
    x_sh, iv_sh, w_sh, bs = _shardings(mesh, arg_shapes[2].sharding, len(arg_shapes[2].shape))
    axes = _mesh_axes(bs)

    def lower(g, invvar, x, w):
        SEEN.append(("bwd", x.shape))
        grad_x, grad_w = _bwd_impl(g, invvar, x, w, eps)
        if axes:
            # The kernel summed grad_w over this device's rows only: add the partials of all
            # devices. In f32 at least, so that bf16 partials are rounded once more, not per add.
            acc = jnp.promote_types(grad_w.dtype, jnp.float32)
            grad_w = jax.lax.psum(grad_w.astype(acc), axes).astype(w.dtype)
        return grad_x, grad_w

    return mesh, lower, (x_sh, w_sh), (x_sh, iv_sh, x_sh, w_sh)


# grad_w has no batch factor: each device's grad_w covers its own rows, and partition's psum adds
# them; n stays unsharded as in the forward pass.
_bwd.def_partition(partition=_bwd_partition, infer_sharding_from_operands=_bwd_infer,
                   sharding_rule="... n, ..., ... n, n -> ... n, n",
                   need_replication_factors=("n",))


def _flat(x, w):
    """x as (batch..., n) and w as (n,), n = w.size: the shapes the partitioned calls take."""
    return x.reshape(x.shape[:x.ndim - w.ndim] + (w.size,)), w.reshape(-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def sharded_rms_norm(x, w, eps=1e-5):
    """rms_norm.rms_norm, partitioned by batch when x is sharded by its leading dims."""
    x2, w2 = _flat(x, w)
    y, _ = _fwd(x2, w2, eps)
    return y.reshape(x.shape)


def _sharded_fwd(x, w, eps):
    x2, w2 = _flat(x, w)
    y, invvar = _fwd(x2, w2, eps)
    return y.reshape(x.shape), (invvar, x, w)


def _sharded_bwd(eps, res, g):
    invvar, x, w = res
    x2, w2 = _flat(x, w)
    grad_x, grad_w = _bwd(g.reshape(x2.shape), invvar, x2, w2, eps)
    return grad_x.reshape(x.shape), grad_w.reshape(w.shape)


sharded_rms_norm.defvjp(_sharded_fwd, _sharded_bwd)


def loss(f, x, w, c):
    # A scalar whose gradient with respect to the output is c: random, so that every element of
    # grad_x and grad_w matters.
    return jnp.sum(f(x, w).astype(jnp.float32) * c)


def step(f, x, w, c):
    """The output and the gradients with respect to x and w."""
    gx, gw = jax.grad(functools.partial(loss, f), argnums=(0, 1))(x, w, c)
    return f(x, w), gx, gw


def check(mesh, shape, wshape, dtype, key):
    kx, kw, kc = jax.random.split(key, 3)
    x = jax.random.normal(kx, shape, jnp.float32).astype(dtype)
    w = (1.0 + 0.1 * jax.random.normal(kw, wshape, jnp.float32)).astype(dtype)
    c = jax.random.normal(kc, shape, jnp.float32)

    # Sharded: x and c split by batch over the mesh, w on every device.
    batch = NamedSharding(mesh, P(AXIS))
    repl = NamedSharding(mesh, P())
    xs, cs, ws = jax.device_put(x, batch), jax.device_put(c, batch), jax.device_put(w, repl)
    SEEN.clear()
    y, gx, gw = jax.jit(functools.partial(step, sharded_rms_norm))(xs, ws, cs)
    jax.block_until_ready((y, gx, gw))
    seen = list(SEEN)

    # Unsharded baton, on the first device alone, and the f32 jax.numpy reference.
    dev = jax.devices()[0]
    x1, w1, c1 = (jax.device_put(a, dev) for a in (x, w, c))
    y1, gx1, gw1 = jax.jit(functools.partial(step, base.rms_norm))(x1, w1, c1)
    xf, wf = x1.astype(jnp.float32), w1.astype(jnp.float32)
    y_ref, gx_ref, gw_ref = jax.jit(functools.partial(step, base.rms_norm_ref))(xf, wf, c1)

    name = f"{str(shape):>15} w{str(wshape):<11} {jnp.dtype(dtype).name:>8}"
    ok = True
    for what, a, one, ref, tol in (("out", y, y1, y_ref, base.TOLERANCE[dtype]),
                                   ("grad_x", gx, gx1, gx_ref, base.GRAD_TOLERANCE[dtype]),
                                   ("grad_w", gw, gw1, gw_ref, base.GRAD_TOLERANCE[dtype])):
        e_one, e_ref = base.rel_err(a, one), base.rel_err(a, ref)
        good = a.dtype == dtype and a.shape == one.shape and e_one <= tol and e_ref <= tol
        print(f"{name}  {what:<7} vs unsharded baton {e_one:9.2e}  vs jax.numpy {e_ref:9.2e}  "
              f"(tol {tol:.0e})  {'ok' if good else 'FAIL'}")
        ok = ok and good

    # The layout: y and grad_x keep x's batch sharding, grad_w is whole on every device; on
    # several devices the kernels ran on 1/N of the rows (XLA skips partitioning on one device).
    n = mesh.devices.size
    local = (shape[0] // n,) + shape[1:len(shape) - len(wshape)] + (math.prod(wshape),)
    layout = (y.sharding.is_equivalent_to(batch, y.ndim) and
              gx.sharding.is_equivalent_to(batch, gx.ndim) and
              gw.sharding.is_equivalent_to(repl, gw.ndim))
    calls = (n == 1 or (("fwd", local) in seen and ("bwd", local) in seen and
                        all(s == local for _, s in seen)))
    good = layout and calls
    print(f"{name}  layout  out, grad_x P({AXIS!r}), grad_w replicated: {layout}; "
          f"per-shard kernel shapes {sorted(set(seen)) if seen else 'none (one device)'}  "
          f"{'ok' if good else 'FAIL'}")
    return ok and good


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="path to libbaton_jax.so (default: $BATON_JAX_LIB or build*/)")
    ap.add_argument("--seed", type=int, default=None, help="PRNG seed (default: fresh)")
    ap.add_argument("--gspmd", action="store_true",
                    help="use the GSPMD partitioner (infer_sharding_from_operands), not Shardy")
    args = ap.parse_args()
    if args.gspmd:
        jax.config.update("jax_use_shardy_partitioner", False)

    path = base.find_library(args.lib)
    platforms = base.register(path)
    backend = {"gpu": "cuda"}.get(jax.default_backend(), jax.default_backend())
    if backend not in platforms:
        sys.exit(f"JAX runs on {backend}, but this libbaton_jax has handlers for "
                 f"{', '.join(platforms)} only")
    seed = args.seed if args.seed is not None else int(time.time_ns() % (2**31))
    devices = jax.devices()
    mesh = Mesh(np.array(devices), (AXIS,))
    partitioner = "shardy" if jax.config.jax_use_shardy_partitioner else "gspmd"
    print(f"libbaton_jax: {path} (handlers for {', '.join(platforms)}); JAX {jax.__version__} on "
          f"{backend}; seed {seed}; partitioner {partitioner}")
    print(f"devices: {len(devices)} x {devices[0].device_kind}: "
          f"{', '.join(str(d) for d in devices)}; mesh axis {AXIS!r} of size {len(devices)}")

    n = len(devices)
    key = jax.random.PRNGKey(seed)
    ok = True
    for dtype in (jnp.bfloat16, jnp.float32):
        for shape, wshape in (((8, 512, 512), (512, 512)), ((16, 1024), (1024,))):
            # The batch must split evenly over the devices: round it up to a multiple of n.
            shape = (-(-shape[0] // n) * n,) + shape[1:]
            key, sub = jax.random.split(key)
            ok = check(mesh, shape, wshape, dtype, sub) and ok

    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
