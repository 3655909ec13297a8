"""rms_norm.py: baton's RMSNorm kernels called from JAX through typed XLA FFI handlers.

libbaton_jax.so (cmake -DBATON_XLA_FFI_INCLUDE=...; see cmake/ffi.cmake) holds the handlers: one
pair for XLA's CPU platform on baton's CPU kernels and, in CUDA builds, one pair for CUDA on the CUDA
kernels. This file registers them with jax.ffi.register_ffi_target, defines rms_norm with a
jax.custom_vjp, and checks, as the JAX custom-op tutorial does, that the forward pass equals a
jax.numpy reference and that jax.grad of -mean(rms_norm(x, w)**2) equals the reference gradient,
for bf16 and f32 inputs of shape (4, 512, 512) with weight (512, 512) and (32, 4096) with weight
(4096,), and that part_grad declared (16, n2) as the tutorial does gives the bits of (16,) + w.shape.
It exits non-zero when a check fails.

    python3 examples/jax/rms_norm.py --lib build/libbaton_jax.so          # JAX's default backend
    JAX_PLATFORMS=cuda python3 examples/jax/rms_norm.py --lib ...         # on the GPU
"""
import argparse
import ctypes
import functools
import glob
import os
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp

# Rows of the partial-gradient buffer, as in the tutorial (and baton's plan default).
PART_GRAD_SIZE = 16


def find_library(explicit):
    if explicit:
        return explicit
    if os.environ.get("BATON_JAX_LIB"):
        return os.environ["BATON_JAX_LIB"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    hits = sorted(glob.glob(os.path.join(root, "build*", "libbaton_jax.so")), key=os.path.getmtime)
    if not hits:
        sys.exit("libbaton_jax.so not found: build it (cmake -DBATON_XLA_FFI_INCLUDE=...) and pass "
                 "--lib or set BATON_JAX_LIB")
    return hits[-1]


def register(path):
    """Loads the handlers and registers them; returns the platforms they were registered for."""
    lib = ctypes.cdll.LoadLibrary(path)
    platforms = ["cpu"]
    jax.ffi.register_ffi_target("baton_rms_norm_fwd",
                                jax.ffi.pycapsule(lib.baton_ffi_rms_norm_fwd_cpu), platform="cpu")
    jax.ffi.register_ffi_target("baton_rms_norm_bwd",
                                jax.ffi.pycapsule(lib.baton_ffi_rms_norm_bwd_cpu), platform="cpu")
    if lib.baton_ffi_has_cuda():
        jax.ffi.register_ffi_target("baton_rms_norm_fwd",
                                    jax.ffi.pycapsule(lib.baton_ffi_rms_norm_fwd_cuda),
                                    platform="CUDA")
        jax.ffi.register_ffi_target("baton_rms_norm_bwd",
                                    jax.ffi.pycapsule(lib.baton_ffi_rms_norm_bwd_cuda),
                                    platform="CUDA")
        platforms.append("cuda")
    return platforms


def _invvar_dtype(x):
    return jnp.float64 if x.dtype == jnp.float64 else jnp.float32


# fwd_call and bwd_call are the bare FFI calls (no custom_vjp), public so that
# sharded_rms_norm.py can run them per shard inside custom_partitioning.
def fwd_call(x, w, eps):
    """(y, invvar) for x whose trailing dims are w's; invvar holds one value per row, flat."""
    n2 = w.size
    n1 = x.size // n2
    out = (jax.ShapeDtypeStruct(x.shape, w.dtype), jax.ShapeDtypeStruct((n1,), _invvar_dtype(x)))
    return jax.ffi.ffi_call("baton_rms_norm_fwd", out)(x, w, eps=np.float32(eps))


def bwd_call(g, invvar, x, w, eps, part_grad_shape=None):
    """(grad_input, grad_weight, part_grad) from the output gradient g and fwd_call's invvar.

    part_grad is (PART_GRAD_SIZE,) + w.shape unless part_grad_shape says otherwise; the handler
    also takes the tutorial's (P, w.size), and takes P from the shape either way."""
    if part_grad_shape is None:
        part_grad_shape = (PART_GRAD_SIZE,) + w.shape
    out = (jax.ShapeDtypeStruct(x.shape, x.dtype),
           jax.ShapeDtypeStruct(w.shape, w.dtype),
           jax.ShapeDtypeStruct(tuple(part_grad_shape), _invvar_dtype(x)))
    # grad_output has y's dtype, the weight's (kernels/descriptors.h).
    return jax.ffi.ffi_call("baton_rms_norm_bwd", out)(g.astype(w.dtype), invvar, x, w,
                                                       eps=np.float32(eps))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def rms_norm(x, w, eps=1e-5):
    """y = w * x / sqrt(mean(x**2 over w's dims) + eps), in w's dtype."""
    y, _ = fwd_call(x, w, eps)
    return y


def _rms_norm_fwd(x, w, eps):
    y, invvar = fwd_call(x, w, eps)
    return y, (invvar, x, w)


def _rms_norm_bwd(eps, res, g):
    invvar, x, w = res
    grad_input, grad_weight, _ = bwd_call(g, invvar, x, w, eps)
    return grad_input, grad_weight


rms_norm.defvjp(_rms_norm_fwd, _rms_norm_bwd)


def rms_norm_ref(x, w, eps=1e-5):
    """The jax.numpy reference, computed in f32 from the same inputs."""
    axes = tuple(range(x.ndim - w.ndim, x.ndim))
    xf = x.astype(jnp.float32)
    invvar = jax.lax.rsqrt(jnp.mean(xf * xf, axis=axes, keepdims=True) + eps)
    return (w.astype(jnp.float32) * (xf * invvar)).astype(w.dtype)


def loss(f, x, w):
    return -jnp.mean(f(x, w).astype(jnp.float32) ** 2)


def rel_err(a, ref):
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        return float("inf")
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(a - ref) / (den if den > 0 else 1.0))


# Relative L2 error allowed, per dtype: the results are rounded to it (bf16 has 8 bits).
TOLERANCE = {jnp.bfloat16: 1e-2, jnp.float32: 1e-5}
GRAD_TOLERANCE = {jnp.bfloat16: 2e-2, jnp.float32: 1e-4}


def check(shape, wshape, dtype, key):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, shape, jnp.float32).astype(dtype)
    w = (1.0 + 0.1 * jax.random.normal(kw, wshape, jnp.float32)).astype(dtype)

    fwd = jax.jit(rms_norm)
    y = fwd(x, w)
    y_ref = rms_norm_ref(x.astype(jnp.float32), w.astype(jnp.float32))
    e_fwd = rel_err(y, y_ref)

    grad = jax.jit(jax.grad(functools.partial(loss, rms_norm), argnums=(0, 1)))
    gx, gw = grad(x, w)
    gx_ref, gw_ref = jax.grad(functools.partial(loss, rms_norm_ref), argnums=(0, 1))(
        x.astype(jnp.float32), w.astype(jnp.float32))
    e_gx, e_gw = rel_err(gx, gx_ref), rel_err(gw, gw_ref)

    # Time the jitted calls (after the warm-up above), for the record.
    t0 = time.perf_counter()
    for _ in range(10):
        jax.block_until_ready(fwd(x, w))
    t_fwd = (time.perf_counter() - t0) / 10
    t0 = time.perf_counter()
    for _ in range(10):
        jax.block_until_ready(grad(x, w))
    t_grad = (time.perf_counter() - t0) / 10

    ok = (y.dtype == dtype and gx.dtype == dtype and gw.dtype == dtype and
          e_fwd <= TOLERANCE[dtype] and e_gx <= GRAD_TOLERANCE[dtype] and
          e_gw <= GRAD_TOLERANCE[dtype])
    name = jnp.dtype(dtype).name
    print(f"{str(shape):>14} w{str(wshape):<12} {name:>8}  fwd {e_fwd:9.2e}  grad_x {e_gx:9.2e}  "
          f"grad_w {e_gw:9.2e}  (tol {TOLERANCE[dtype]:.0e}/{GRAD_TOLERANCE[dtype]:.0e})  "
          f"fwd {t_fwd * 1e3:8.3f} ms  grad {t_grad * 1e3:8.3f} ms  {'ok' if ok else 'FAIL'}")
    return ok


def check_tutorial_part_grad(key):
    """The tutorial's abstract evaluation declares part_grad (16, n2): the handler must give the
    bits it gives for (16,) + w.shape, and refuse a part_grad of neither shape with its reason."""
    kx, kw, kg = jax.random.split(key, 3)
    x = jax.random.normal(kx, (5, 3, 7), jnp.float32)
    w = 1.0 + 0.1 * jax.random.normal(kw, (3, 7), jnp.float32)
    g = jax.random.normal(kg, x.shape, jnp.float32)
    _, invvar = fwd_call(x, w, 1e-5)
    n2 = w.size
    flat = jax.jit(lambda *a: bwd_call(*a, 1e-5, part_grad_shape=(PART_GRAD_SIZE, n2)))
    shaped = jax.jit(lambda *a: bwd_call(*a, 1e-5))
    a = [np.asarray(t) for t in flat(g, invvar, x, w)]
    b = [np.asarray(t) for t in shaped(g, invvar, x, w)]
    same = (a[2].shape == (PART_GRAD_SIZE, n2) and
            all(np.array_equal(u.reshape(-1).view(np.uint32), v.reshape(-1).view(np.uint32))
                for u, v in zip(a, b)))
    print(f"part_grad {(PART_GRAD_SIZE, n2)} as the tutorial declares it: "
          f"{'the bits of ' + str((PART_GRAD_SIZE,) + w.shape) + '  ok' if same else 'differs  FAIL'}")
    try:
        jax.block_until_ready(bwd_call(g, invvar, x, w, 1e-5,
                                       part_grad_shape=(PART_GRAD_SIZE, n2 + 1)))
        print("part_grad of neither shape: no error raised  FAIL")
        return False
    except Exception as e:  # XLA raises its own exception type
        good = "baton rms_norm_bwd" in str(e) and "part_grad" in str(e)
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"part_grad of neither shape: error raised ({msg[:100]})  {'ok' if good else 'FAIL'}")
        return same and good


def check_huge_rows(key):
    """Rows whose RMS exceeds 8.5e37 have an invvar below FLT_MIN, a subnormal f32. XLA:CPU runs
    custom calls with flush-to-zero and denormals-are-zero, which once made grad_weight all zeros;
    the kernels keep subnormals whatever the caller's mode. Checked against a float64 numpy
    reference of the same formula (jax.numpy under XLA flushes the reference itself)."""
    kx, kw = jax.random.split(key)
    n2 = 64
    x = np.array(jax.random.normal(kx, (8, n2), jnp.float32))
    x[:4] = np.where(x[:4] < 0, -1.5e38, 1.5e38).astype(np.float32)  # RMS 1.5e38: invvar 6.7e-39
    w = np.asarray(1.0 + 0.1 * jax.random.normal(kw, (n2,), jnp.float32))
    _, gw = jax.jit(jax.grad(lambda a, b: jnp.sum(rms_norm(a, b)), argnums=(0, 1)))(x, w)
    # d/dw sum(w * x * invvar) = sum over rows of x * invvar, in float64
    xd = x.astype(np.float64)
    iv = 1.0 / np.sqrt(np.mean(xd * xd, axis=1, keepdims=True) + 1e-5)
    gw_ref = np.sum(xd * iv.astype(np.float32).astype(np.float64), axis=0)
    e = rel_err(gw, gw_ref)
    ok = e <= 1e-5
    print(f"rows with RMS 1.5e38 (subnormal invvar, under XLA's flush-to-zero): grad_w {e:9.2e}  "
          f"{'ok' if ok else 'FAIL'}")
    return ok


def check_empty_batch():
    """x of shape (0, n) works under jax.grad as in PyTorch: an empty y and grad_x, a zero
    grad_weight."""
    ok = True
    for dtype in (jnp.bfloat16, jnp.float32):
        x = jnp.zeros((0, 32), dtype)
        w = jnp.ones((32,), dtype)
        try:
            y = jax.jit(rms_norm)(x, w)
            gx, gw = jax.jit(jax.grad(functools.partial(loss, rms_norm), argnums=(0, 1)))(x, w)
            good = (y.shape == (0, 32) and gx.shape == (0, 32) and gw.shape == (32,) and
                    gx.dtype == dtype and gw.dtype == dtype and
                    not np.any(np.asarray(gw, dtype=np.float32)))
            why = "" if good else f" (y {y.shape}, grad_x {gx.shape}, grad_w {np.asarray(gw)[:4]})"
        except Exception as e:  # XLA raises its own exception type
            good, why = False, f" ({str(e).splitlines()[0][:100]})"
        print(f"empty batch (0, 32) {jnp.dtype(dtype).name}: empty grad_x, zero grad_w{why}  "
              f"{'ok' if good else 'FAIL'}")
        ok = ok and good
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="path to libbaton_jax.so (default: $BATON_JAX_LIB or build*/)")
    ap.add_argument("--seed", type=int, default=None, help="PRNG seed (default: fresh)")
    args = ap.parse_args()

    path = find_library(args.lib)
    platforms = register(path)
    backend = {"gpu": "cuda"}.get(jax.default_backend(), jax.default_backend())
    seed = args.seed if args.seed is not None else int(time.time_ns() % (2**31))
    print(f"libbaton_jax: {path} (handlers for {', '.join(platforms)}); JAX {jax.__version__} on "
          f"{backend} ({jax.devices()[0].device_kind}); seed {seed}")
    if backend not in platforms:
        sys.exit(f"JAX runs on {backend}, but this libbaton_jax has handlers for "
                 f"{', '.join(platforms)} only")

    key = jax.random.PRNGKey(seed)
    cases = [((4, 512, 512), (512, 512)), ((32, 4096), (4096,))]
    ok = True
    for dtype in (jnp.bfloat16, jnp.float32):
        for shape, wshape in cases:
            key, sub = jax.random.split(key)
            ok = check(shape, wshape, dtype, sub) and ok

    key, sub = jax.random.split(key)
    ok = check_tutorial_part_grad(sub) and ok
    key, sub = jax.random.split(key)
    ok = check_huge_rows(sub) and ok
    ok = check_empty_batch() and ok

    # Bad input gives an error, not a crash: x whose trailing dims are not the weight's.
    try:
        jax.block_until_ready(fwd_call(jnp.ones((4, 8), jnp.float32),
                                       jnp.ones((6,), jnp.float32), 1e-5))
        print("mismatched shapes: no error raised  FAIL")
        ok = False
    except Exception as e:  # XLA raises its own exception type
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        good = "baton rms_norm_fwd" in str(e)
        print(f"mismatched shapes: error raised ({msg[:100]})  {'ok' if good else 'FAIL'}")
        ok = ok and good

    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
