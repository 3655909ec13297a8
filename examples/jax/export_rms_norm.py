"""export_rms_norm.py: the JAX tutorial's RMSNorm training step (examples/jax/rms_norm.py: the
forward, and jax.grad of -mean(rms_norm(x, w)**2) through the custom_vjp, whose custom calls are
baton's rms_norm_fwd and rms_norm_bwd) exported with baton_export.jax to a plan, run by the
`baton` CLI on the CPU, and compared with JAX on the CPU: the same bits for every output, bf16 and
f32, as JAX computes them a primitive at a time (jax.disable_jit: each op rounds its result, as
each plan step does). The jitted function may differ by an ulp: XLA's CPU fusions contract a
multiply and a subtract into one FMA (the SGD update), which the jaxpr does not say; those
outputs are checked within one ulp of the plan's, and the count is printed. Also checks that a
primitive without a lowering is refused by name. Exits non-zero on a failure. Run by
scripts/ci-jax.sh:

    JAX_PLATFORMS=cpu PYTHONPATH=python python3 examples/jax/export_rms_norm.py \
        --lib build-jax/libbaton_jax.so --baton build-jax/baton
"""
import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rms_norm as R  # noqa: E402  (the tutorial's custom_vjp and its FFI registration)
from baton_export import ExportError  # noqa: E402
import baton_export.jax as bj  # noqa: E402


def train_step(x, w):
    """The tutorial's training step: the output, and the loss's gradients for x and w."""
    gx, gw = jax.grad(functools.partial(R.loss, R.rms_norm), argnums=(0, 1))(x, w)
    return R.rms_norm(x, w), gx, gw


def sgd_step(x, w):
    """One SGD step on the weight (learning rate 0.01): the new weight, and grad_x."""
    gx, gw = jax.grad(functools.partial(R.loss, R.rms_norm), argnums=(0, 1))(x, w)
    return w - jnp.asarray(0.01, w.dtype) * gw, gx


def bits(a):
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32).reshape(-1)


def run_case(baton, shape, wshape, dtype, key, tmp, fn=train_step,
             names=("y", "grad_x", "grad_w")):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, shape, jnp.float32).astype(dtype)
    w = (1.0 + 0.1 * jax.random.normal(kw, wshape, jnp.float32)).astype(dtype)
    step = jax.jit(fn)
    with jax.disable_jit():
        want = [np.asarray(t) for t in fn(x, w)]
    fused = [np.asarray(t) for t in step(x, w)]
    d = os.path.join(tmp, f"{fn.__name__}_{jnp.dtype(dtype).name}_{'x'.join(map(str, shape))}")
    t0 = time.perf_counter()
    res = bj.export(step, (x, w), d, device="cpu", output_names=list(names),
                    baton=baton, verbose=False)
    t_export = time.perf_counter() - t0
    cmd = [baton, "run", "--gpu=cpu", "-q"]
    for n, a in (("x", x), ("w", w)):
        f = os.path.join(d, f"{n}.npy")
        np.save(f, np.asarray(a), allow_pickle=False)
        cmd += ["--input", f"{n}={f}"]
    for n in res["outputs"]:
        cmd += ["--output", f"{n}={os.path.join(d, 'out_' + n + '.npy')}"]
    r = subprocess.run(cmd + [res["plan"]], capture_output=True, text=True)
    if r.returncode:
        print(f"baton run failed: {' '.join(cmd)}\n{r.stderr}")
        return False
    import json

    plan = json.load(open(res["plan"]))
    kinds = [s.get("kernel") or s.get("delegate") for s in plan["steps"]]
    ok = "rms_norm_fwd" in kinds and "rms_norm_bwd" in kinds
    line = []
    for n, ref, jit_ref in zip(res["outputs"], want, fused):
        got = np.load(os.path.join(d, f"out_{n}.npy"), allow_pickle=False)
        same = got.size == ref.size and np.array_equal(bits(got), bits(ref))
        diff = 0 if same else int(np.sum(bits(got) != bits(ref))) if got.size == ref.size else -1
        note = f"{n} {'same bits' if same else f'{diff} elements differ'}"
        if same and not np.array_equal(bits(got), bits(jit_ref)):
            # Same-signed finite values: the bit patterns' difference is the distance in ulps.
            ulps = np.abs(bits(got).astype(np.int64) - bits(jit_ref).astype(np.int64))
            near = bool(np.all(ulps <= 1) and np.all(np.sign(got) == np.sign(jit_ref)))
            note += (f" (jitted: {int(np.sum(ulps != 0))} within 1 ulp, XLA's FMA)" if near
                     else f" (jitted: {int(np.max(ulps))} ulps apart)")
            same = near
        line.append(note)
        ok = ok and same
    print(f"{fn.__name__} {str(shape):>14} w{str(wshape):<10} {jnp.dtype(dtype).name:>8}: {len(kinds)} steps "
          f"({', '.join(kinds)}), exported in {t_export:.2f} s; {'; '.join(line)}  "
          f"{'ok' if ok else 'FAIL'}")
    return ok


def check_legacy(baton, key, tmp):
    """The tutorial's legacy custom calls (examples/jax/legacy_custom_call.py: descriptor bytes,
    baton's 40-byte layout and the tutorial's 32-byte one) are only traced here (their handlers
    are CUDA-only): the exported plan, run by the CLI, has the bits of the typed-FFI calls."""
    import json

    import legacy_custom_call as LC

    kx, kw, kg = jax.random.split(key, 3)
    x = jax.random.normal(kx, (8, 256), jnp.float32).astype(jnp.bfloat16)
    w = (1.0 + 0.1 * jax.random.normal(kw, (256,), jnp.float32)).astype(jnp.bfloat16)
    g = jax.random.normal(kg, x.shape, jnp.float32).astype(jnp.bfloat16)

    def legacy(x, w, g):
        y, inv = LC._fwd_call(x, w, 1e-5)
        gx, gw, _ = LC._bwd_call(g, inv, x, w, 1e-5)
        return y, gx, gw

    def typed(x, w, g):
        y, inv = R.fwd_call(x, w, 1e-5)
        gx, gw, _ = R.bwd_call(g, inv, x, w, 1e-5, part_grad_shape=(LC.PART_GRAD_SIZE, w.size))
        return y, gx, gw

    want = [np.asarray(t) for t in jax.jit(typed)(x, w, g)]
    ok = True
    for layout in (False, True):
        LC.LAYOUT["tutorial"] = layout
        d = os.path.join(tmp, f"legacy_{int(layout)}")
        res = bj.export(jax.jit(legacy), (x, w, g), d, baton=baton, verbose=False)
        steps = json.load(open(res["plan"]))["steps"]
        attrs = [s.get("attrs") for s in steps]
        cmd = [baton, "run", "--gpu=cpu", "-q"]
        for n, a in (("x", x), ("w", w), ("g", g)):
            np.save(os.path.join(d, n + ".npy"), np.asarray(a), allow_pickle=False)
            cmd += ["--input", f"{n}={os.path.join(d, n + '.npy')}"]
        for n in res["outputs"]:
            cmd += ["--output", f"{n}={os.path.join(d, n + '.npy')}"]
        r = subprocess.run(cmd + [res["plan"]], capture_output=True, text=True)
        same = r.returncode == 0 and all(
            np.array_equal(bits(np.load(os.path.join(d, n + ".npy"))), bits(ref))
            for n, ref in zip(res["outputs"], want))
        good = same and attrs[1].get("part_grad_size") == LC.PART_GRAD_SIZE and all(
            abs(a["eps"] - 1e-5) < 1e-12 for a in attrs)
        print(f"legacy descriptors ({'tutorial 32' if layout else 'baton 40'} bytes): attrs "
              f"{attrs}; {'same bits as the typed FFI' if same else 'DIFFERENT: ' + r.stderr}  "
              f"{'ok' if good else 'FAIL'}")
        ok = ok and good
    LC.LAYOUT["tutorial"] = False
    return ok


def check_refusal(tmp):
    def f(x, w):
        return jnp.exp(R.rms_norm(x, w))

    x = jnp.ones((4, 8), jnp.float32)
    try:
        bj.export(jax.jit(f), (x, jnp.ones((8,), jnp.float32)), os.path.join(tmp, "bad"),
                  verbose=False)
    except ExportError as e:
        good = "'exp'" in str(e) and "export_rms_norm.py" in str(e)
        print(f"unsupported primitive: {str(e)[:140]}...  {'ok' if good else 'FAIL'}")
        return good
    print("unsupported primitive: no error  FAIL")
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="libbaton_jax.so (default: $BATON_JAX_LIB or build*/)")
    ap.add_argument("--baton", default=os.environ.get("BATON", "build-jax/baton"))
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    R.register(R.find_library(a.lib))
    seed = a.seed if a.seed is not None else int(time.time_ns() % (2**31))
    print(f"JAX {jax.__version__} on {jax.default_backend()}; baton {a.baton}; seed {seed}")
    key = jax.random.PRNGKey(seed)
    ok = True
    with tempfile.TemporaryDirectory(prefix="baton_jax_export_") as tmp:
        for dtype in (jnp.bfloat16, jnp.float32):
            for shape, wshape in (((4, 64, 128), (64, 128)), ((32, 4096), (4096,))):
                key, sub = jax.random.split(key)
                ok = run_case(a.baton, shape, wshape, dtype, sub, tmp) and ok
            key, sub = jax.random.split(key)
            ok = run_case(a.baton, (8, 256), (256,), dtype, sub, tmp, sgd_step,
                          ("new_w", "grad_x")) and ok
        key, sub = jax.random.split(key)
        ok = check_legacy(a.baton, sub, tmp) and ok
        ok = check_refusal(tmp) and ok
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
