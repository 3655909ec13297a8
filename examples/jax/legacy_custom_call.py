"""legacy_custom_call.py: baton's RMSNorm kernels inside a real XLA through the legacy GPU
custom-call ABI of the JAX custom-operation tutorial: `void f(cudaStream_t, void **buffers,
const char *opaque, size_t opaque_len, XlaCustomCallStatus *)` (include/baton/baton_xla.h).

It registers libbaton's status-returning entry points with
jax.ffi.register_ffi_target(..., platform="CUDA", api_version=0), calls them with
jax.ffi.ffi_call(..., custom_call_api_version=2, legacy_backend_config=<descriptor>) where the
descriptor is the tutorial's (n1, n2, eps, x_type, w_type, part_grad_size) packed as baton's
40-byte baton_rms_norm_desc (kernels/descriptors.h, docs/kernels.md), wraps them in
jax.custom_vjp as the tutorial does, and checks the forward output and the gradients of x and
the weight against jax.numpy for the tutorial's shapes in bf16, f16 and f32. A bad descriptor
must raise a Python error through the status (not crash the process).

    python3 examples/jax/legacy_custom_call.py [path/to/libbaton.so]

Exit 0 on success, 1 on a failed check, 77 (skipped) without a CUDA device or without the
legacy symbols (a CPU-only libbaton)."""
import ctypes
import functools
import glob
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import jax
    import jax.numpy as jnp
    # the jax.numpy reference and the checks of the typed-FFI example, shared
    from rms_norm import loss, rel_err, rms_norm_ref
except ImportError as e:  # pragma: no cover
    print(f"SKIP: jax is not installed ({e})")
    sys.exit(77)

PART_GRAD_SIZE = 16  # the tutorial's rows of the partial gradient
DTYPE_CODE = {jnp.bfloat16: 1, jnp.float16: 2, jnp.float32: 3, jnp.float64: 4}


def find_library():
    if len(sys.argv) > 1:
        return sys.argv[1]
    if os.environ.get("BATON_LIB"):
        return os.environ["BATON_LIB"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    hits = sorted(glob.glob(os.path.join(root, "build*", "libbaton.so")), key=os.path.getmtime)
    return hits[-1] if hits else None


# Which layout descriptor() packs: baton's 40 bytes, or the tutorial's own 32 (main runs both).
LAYOUT = {"tutorial": False}


def descriptor(n1, n2, eps, x_dtype, w_dtype, part_grad_size=PART_GRAD_SIZE):
    """The tutorial's descriptor as baton lays it out: int64 n1, int64 n2, float64 eps, int32
    x_type, int32 w_type, int64 part_grad_size; little-endian, 40 bytes. With
    LAYOUT["tutorial"], the tutorial's own RMSNormDescriptor bytes instead: int n1, int n2,
    double eps, ElementType x_type, w_type (BF16 0, F16 1, F32 2, F64 3), int part_grad_size, 4
    bytes of padding: 32 bytes, which baton takes as well (docs/kernels.md)."""
    if LAYOUT["tutorial"]:
        return struct.pack("<iidiii4x", n1, n2, eps, DTYPE_CODE[x_dtype] - 1,
                           DTYPE_CODE[w_dtype] - 1, part_grad_size)
    return struct.pack("<qqdiiq", n1, n2, eps, DTYPE_CODE[x_dtype], DTYPE_CODE[w_dtype],
                       part_grad_size)


def register(path):
    lib = ctypes.cdll.LoadLibrary(path)
    for name in ("baton_rms_norm_fwd_status", "baton_rms_norm_bwd_status"):
        if not hasattr(lib, name):
            print(f"SKIP: {path} has no {name} (a CPU-only build of baton)")
            sys.exit(77)
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, name)),
                                    platform="CUDA", api_version=0)


def _sizes(x, w):
    n2 = int(np.prod(w.shape))
    return x.size // n2, n2


def _fwd_call(x, w, eps):
    n1, n2 = _sizes(x, w)
    out = (jax.ShapeDtypeStruct(x.shape, w.dtype), jax.ShapeDtypeStruct((n1,), jnp.float32))
    return jax.ffi.ffi_call("baton_rms_norm_fwd_status", out, custom_call_api_version=2,
                            legacy_backend_config=descriptor(n1, n2, eps, x.dtype.type,
                                                             w.dtype.type))(x, w)


def _bwd_call(g, invvar, x, w, eps):
    n1, n2 = _sizes(x, w)
    out = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(w.shape, w.dtype),
           jax.ShapeDtypeStruct((PART_GRAD_SIZE, n2), jnp.float32))  # the tutorial's (16, n2)
    return jax.ffi.ffi_call("baton_rms_norm_bwd_status", out, custom_call_api_version=2,
                            legacy_backend_config=descriptor(n1, n2, eps, x.dtype.type,
                                                             w.dtype.type))(
        g.astype(w.dtype), invvar, x, w)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def rms_norm(x, w, eps=1e-5):
    return _fwd_call(x, w, eps)[0]


def _rms_norm_fwd(x, w, eps):
    y, invvar = _fwd_call(x, w, eps)
    return y, (invvar, x, w)


def _rms_norm_bwd(eps, res, g):
    invvar, x, w = res
    grad_input, grad_weight, _ = _bwd_call(g, invvar, x, w, eps)
    return grad_input, grad_weight


rms_norm.defvjp(_rms_norm_fwd, _rms_norm_bwd)


TOL = {jnp.bfloat16: 1e-2, jnp.float16: 2e-3, jnp.float32: 1e-5}
GRAD_TOL = {jnp.bfloat16: 2e-2, jnp.float16: 5e-3, jnp.float32: 1e-4}


def check(shape, wshape, dtype, key):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, shape, jnp.float32).astype(dtype)
    w = (1.0 + 0.1 * jax.random.normal(kw, wshape, jnp.float32)).astype(dtype)
    y = jax.jit(rms_norm)(x, w)
    e_fwd = rel_err(y, rms_norm_ref(x, w))
    gx, gw = jax.jit(jax.grad(functools.partial(loss, rms_norm), argnums=(0, 1)))(x, w)
    rx, rw = jax.grad(functools.partial(loss, rms_norm_ref), argnums=(0, 1))(x, w)
    e_gx, e_gw = rel_err(gx, rx), rel_err(gw, rw)
    ok = e_fwd <= TOL[dtype] and e_gx <= GRAD_TOL[dtype] and e_gw <= GRAD_TOL[dtype]
    name = jnp.dtype(dtype).name
    print(f"  {str(shape):18s} {name:9s} fwd {e_fwd:.2e}  grad x {e_gx:.2e}  grad w {e_gw:.2e}  "
          f"{'ok' if ok else 'FAILED'}")
    return ok


def bad_descriptor_raises():
    """A descriptor that disagrees with the buffers' real size must come back as a Python error
    through the status (XLA's setter; under pip's jaxlib, which lacks it, the status as baton
    writes it, kernels/xla_status.c), with baton's reason, and leave the process usable."""
    x = jnp.ones((4, 256), jnp.float32)
    w = jnp.ones((256,), jnp.float32)
    out = (jax.ShapeDtypeStruct(x.shape, w.dtype), jax.ShapeDtypeStruct((4,), jnp.float32))
    bad = descriptor(4, 256, 1e-5, jnp.float32, jnp.float32)[:20]  # truncated
    try:
        jax.block_until_ready(jax.ffi.ffi_call("baton_rms_norm_fwd_status", out,
                                               custom_call_api_version=2,
                                               legacy_backend_config=bad)(x, w))
    except Exception as e:  # XlaRuntimeError / JaxRuntimeError
        msg = str(e)
        ok = "descriptor" in msg or "opaque" in msg or "baton" in msg
        print(f"  bad descriptor -> {type(e).__name__}: {msg.splitlines()[0][:150]}  "
              f"{'ok' if ok else 'FAILED (no reason from baton)'}")
        return ok
    print("  bad descriptor -> no error: FAILED")
    return False


def empty_batch():
    """x of shape (0, n) under jax.grad, as in PyTorch: empty y and grad_x, zero grad_weight."""
    x = jnp.zeros((0, 256), jnp.float32)
    w = jnp.ones((256,), jnp.float32)
    try:
        y = jax.jit(rms_norm)(x, w)
        gx, gw = jax.jit(jax.grad(functools.partial(loss, rms_norm), argnums=(0, 1)))(x, w)
        ok = y.shape == (0, 256) and gx.shape == (0, 256) and not np.any(np.asarray(gw))
        why = "" if ok else f" (grad_w {np.asarray(gw)[:4]})"
    except Exception as e:  # XlaRuntimeError / JaxRuntimeError
        ok, why = False, f" ({str(e).splitlines()[0][:150]})"
    print(f"  empty batch (0, 256): empty grad_x, zero grad_w{why}  {'ok' if ok else 'FAILED'}")
    return ok


def main():
    try:
        if not jax.devices("gpu"):
            raise RuntimeError("no GPU")
    except RuntimeError as e:
        print(f"SKIP: no CUDA device visible to JAX ({e})")
        return 77
    path = find_library()
    if not path or not os.path.exists(path):
        print("SKIP: libbaton.so not found (build it, pass its path or set BATON_LIB)")
        return 77
    register(path)
    print(f"legacy custom calls from {path}, jax {jax.__version__} on {jax.devices('gpu')[0]}")
    ok = True
    key = jax.random.PRNGKey(0)
    # The tutorial's shapes: x (4, 512, 512) over a (512, 512) weight, and the flat case.
    for shape, wshape in (((4, 512, 512), (512, 512)), ((8, 1024), (1024,))):
        for dtype in (jnp.bfloat16, jnp.float16, jnp.float32):
            key, sub = jax.random.split(key)
            ok &= check(shape, wshape, dtype, sub)
    ok &= bad_descriptor_raises()
    # still usable after the error
    key, sub = jax.random.split(key)
    ok &= check((8, 1024), (1024,), jnp.float32, sub)
    ok &= empty_batch()
    # the tutorial's own 32-byte descriptor, as its C++ packs it
    LAYOUT["tutorial"] = True
    print("  with the tutorial's 32-byte RMSNormDescriptor:")
    for dtype in (jnp.bfloat16, jnp.float32):
        key, sub = jax.random.split(key)
        ok &= check((4, 512, 512), (512, 512), dtype, sub)
    ok &= empty_batch()
    LAYOUT["tutorial"] = False
    print("legacy custom calls:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
