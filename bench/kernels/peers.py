"""peers.py: the RMSNorm shapes of bench/cuda/bench_kernels.cu through PyTorch's
torch.nn.functional.rms_norm (forward, and backward by autograd) and a jitted JAX RMSNorm, timed
the same way where the framework allows: median of >= 50 runs, input sets rotated so that together
they exceed twice the L2 cache. Torch is timed with CUDA events around each call (after a warm-up;
launch overhead included, as a user sees it). JAX is timed by the wall clock around a jitted call
and block_until_ready (dispatch included: some tens of microseconds, which matters for the small
shapes only). Run torch and JAX in separate processes (--only), so that neither holds memory the
other preallocates. Effective bandwidth counts the same bytes as bench_kernels.

With --device-time LIB (libkernel_times.so, target kernel_times: bench/kernels/kernel_times.c),
each framework's calls are timed on the device as well, as baton's kernels are: CUPTI records the
kernels of each call, run alone (launched, waited for, its records collected), and the call's device
time is the time any of its kernels ran: the union of their intervals, which is their sum unless
one overlaps another, as a kernel launched with programmatic dependent launch does (and its span,
first start to last end, which adds the gaps between them); the median over the calls is reported
as "jaxdev" and "torchdev", with the kernels of one call named, so that one can say which fusions XLA ran. CUPTI is started only around
those calls, after the warm-up (so the framework has its CUDA context: CUPTI 13 records kernels of
contexts that exist already) and after the wall-clock and event timings, which it would slow. The
library is loaded after the framework, so that a libcupti the framework brings is the one used.

    python3 bench/kernels/peers.py [--runs N] [--quick] [--only torch|jax] [--shapes AxB,...]
                                   [--device-time build/libkernel_times.so]
Lines starting with RESULT are for scripts/gpu-kernels.sh's table.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

RUNS = 100
BIG = [(16384, 8192), (32768, 4096), (65536, 4096), (4096, 4096)]
# (x shape, weight shape): the tutorial's x (4, 512, 512) with w (512, 512), and decode rows
SMALL = [((4, 512, 512), (512, 512)), ((1, 4096), (4096,)), ((32, 4096), (4096,))]


def result(line):
    print("RESULT peers " + line, flush=True)


def sets_for(bytes_per_set, l2):
    return max(2, min(64, -(-2 * l2 // bytes_per_set)))


def shape_name(xs, ws):
    """The rows x columns that RESULT lines and --shapes name a case by."""
    n, n2 = 1, 1
    for d in xs:
        n *= d
    for d in ws:
        n2 *= d
    return f"{n // n2}x{n2}"


def busy_ns(records):
    """The time the GPU ran any of a call's kernels: the union of their [start, end) intervals
    (records sorted by start). Not their sum: a kernel launched with programmatic dependent launch
    starts before the one it waits for ends (baton's backward column sum does), and a sum would
    count the overlap twice."""
    total, lo, hi = 0, None, None
    for _, t0, t1 in records:
        if hi is None or t0 > hi:
            if hi is not None:
                total += hi - lo
            lo, hi = t0, t1
        else:
            hi = max(hi, t1)
    return total + (hi - lo if hi is not None else 0)


class KernelTimes:
    """libkernel_times.so through ctypes: the GPU kernels each of a series of calls runs. After the
    first failure that would repeat (CUPTI cannot start, or calls run no GPU kernel), it says why
    once and measures nothing more."""

    def __init__(self, path):
        self.off = None
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            # built elsewhere, its runpath may miss this machine's libcupti: a loaded one by the
            # same name serves it
            if "libcupti" not in str(e) or not self.preload_cupti():
                self.stop_measuring(f"cannot load {path}: {e}")
                return
            lib = ctypes.CDLL(path)
        lib.kt_error.restype = ctypes.c_char_p
        for f in ("kt_start", "kt_flush", "kt_stop"):
            getattr(lib, f).restype = ctypes.c_int
        u64 = ctypes.POINTER(ctypes.c_ulonglong)
        lib.kt_get.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), u64, u64]
        lib.kt_get.restype = ctypes.c_int
        self.lib = lib

    @staticmethod
    def preload_cupti():
        """Loads libcupti.so.13 from the CUDA toolkit or NVIDIA's wheels; whether one loaded."""
        import glob
        import site
        cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        places = [f"{cuda}/extras/CUPTI/lib64", f"{cuda}/lib64", f"{cuda}/lib"]
        for sp in site.getsitepackages() + [site.getusersitepackages()]:
            places += glob.glob(f"{sp}/nvidia/*/lib") + glob.glob(f"{sp}/nvidia/*/*/lib")
        for place in places:
            try:
                ctypes.CDLL(os.path.join(place, "libcupti.so.13"), mode=ctypes.RTLD_GLOBAL)
                return True
            except OSError:
                pass
        return False

    def stop_measuring(self, why):
        self.off = why
        print(f"device time: measuring nothing: {why}", flush=True)

    def why(self):
        return self.lib.kt_error().decode(errors="replace")

    def records(self, n):
        name, t0, t1 = ctypes.c_char_p(), ctypes.c_ulonglong(), ctypes.c_ulonglong()
        out = []
        for i in range(n):
            if self.lib.kt_get(i, ctypes.byref(name), ctypes.byref(t0), ctypes.byref(t1)) == 0:
                out.append((name.value.decode(errors="replace"), t0.value, t1.value))
        return sorted(out, key=lambda r: r[1])

    def measure(self, launch, sync, calls):
        """(median busy us, median span us, kernels per call, names of one call), or None with a
        line saying why. Each call is collected alone, so its kernels are exactly those it ran,
        however many XLA or torch launch for it."""
        if self.off:
            return None
        if self.lib.kt_start() < 0:
            self.stop_measuring(self.why())
            return None
        per_call, err = [], None
        try:
            for i in range(calls):
                self.lib.kt_clear()
                launch(i)
                sync()
                n = self.lib.kt_flush()
                if n < 0:
                    err = self.why()
                    break
                per_call.append(self.records(n))
        finally:
            if self.lib.kt_stop() < 0 and err is None:
                err = self.why()
            self.lib.kt_clear()
        if err:
            print(f"device time: this case measured nothing: {err}", flush=True)
            return None
        if not all(per_call):
            self.stop_measuring("a call ran no kernel on a GPU (is the framework on the CPU?)")
            return None
        counts = [len(c) for c in per_call]
        if min(counts) != max(counts):
            print(f"device time: kernels per call vary from {min(counts)} to {max(counts)}",
                  flush=True)
        busy = statistics.median(busy_ns(c) for c in per_call) / 1e3
        span = statistics.median(max(t1 for _, _, t1 in c) - c[0][1] for c in per_call) / 1e3
        typical = statistics.mode(counts)
        names = [r[0] for r in next(c for c in per_call if len(c) == typical)]
        return busy, span, typical, names


def device_result(who, pas, name, shape, nbytes, dev):
    """The RESULT line of a device-timed pass, and the kernels that made it."""
    if dev is None:
        return
    us, span, k, names = dev
    result(f"{who}dev {pas} {name} {shape} us={us:.2f} tbs={nbytes / us / 1e6:.3f} kernels={k} "
           f"span_us={span:.2f}")
    print(f"  {who}dev {pas} {name:5} {shape:>14} {us:10.2f} us {nbytes / us / 1e6:6.3f} TB/s  "
          f"span {span:.2f} us, {k} kernel(s): {', '.join(names)}", flush=True)


def bench_torch(runs, quick, shapes, kt_path):
    import torch
    import torch.nn.functional as F
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"torch {torch.__version__} on {props.name}", flush=True)
    kt = KernelTimes(kt_path) if kt_path else None

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
        if quick and dt == torch.float32 or shapes and shape_name(xs, ws) not in shapes:
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
        if kt:
            def fwd(i):
                with torch.no_grad():
                    F.rms_norm(xs_[i % nsets], ws, w_[i % nsets], 1e-5)

            def bwd(i):
                k = i % nsets
                torch.autograd.grad(ys[k], (xs_[k], w_[k]), g_[k], retain_graph=True)

            sync = torch.cuda.synchronize
            device_result("torch", "fwd", name, shape, fb, kt.measure(fwd, sync, runs))
            device_result("torch", "bwd", name, shape, bb, kt.measure(bwd, sync, runs))
        del xs_, w_, g_, ys
        torch.cuda.empty_cache()


def baton_ffi(path):
    """examples/jax/rms_norm.py with baton's FFI handlers registered from libbaton_jax.so at
    path: its fwd_call and bwd_call run baton's CUDA kernels inside a jitted JAX function, so that
    they are timed by the same CUPTI records, in the same process, as XLA's fusions."""
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "baton_rms_norm", os.path.join(here, "..", "..", "examples", "jax", "rms_norm.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if "cuda" not in mod.register(path):
        raise RuntimeError(f"{path} has no CUDA handlers")
    return mod


def bench_jax(runs, quick, shapes, kt_path, baton_path=None):
    import jax
    import jax.numpy as jnp
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}", flush=True)
    l2 = 50 << 20
    kt = KernelTimes(kt_path) if kt_path else None
    bj = baton_ffi(baton_path) if baton_path and kt else None
    if bj:
        bfwd = jax.jit(lambda x, w: bj.fwd_call(x, w, 1e-5))
        bbwd = jax.jit(lambda g, iv, x, w: bj.bwd_call(g, iv, x, w, 1e-5))

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
        if quick and dt == jnp.float32 or shapes and shape_name(xs, ws) not in shapes:
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
        fwd_sets = [(x, w) for x, w, _ in sets]
        fwd_us = wall(fwd, fwd_sets)
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
        if kt:
            # the calls of wall(), input sets rotated the same way; each call's outputs are
            # waited for before its kernels are collected
            out = []
            dev_f = kt.measure(lambda i: out.append(fwd(*fwd_sets[i % nsets])),
                               lambda: jax.block_until_ready(out.pop()), runs)
            device_result("jax", "fwd", name, shape, fb, dev_f)
            dev_b = kt.measure(lambda i: out.append(bwd(*sets[i % nsets])),
                               lambda: jax.block_until_ready(out.pop()), runs)
            device_result("jax", "bwd", name, shape, bb, dev_b)
        if bj:
            # baton's kernels through its FFI handlers, the same sets and the same records
            out = []
            dev_f = kt.measure(lambda i: out.append(bfwd(*fwd_sets[i % nsets])),
                               lambda: jax.block_until_ready(out.pop()), runs)
            device_result("baton", "fwd", name, shape, fb, dev_f)
            ivs = [bfwd(x, w)[1] for x, w in fwd_sets]
            dev_b = kt.measure(
                lambda i: out.append(bbwd(sets[i % nsets][2], ivs[i % nsets], *fwd_sets[i % nsets])),
                lambda: jax.block_until_ready(out.pop()), runs)
            device_result("baton", "bwd", name, shape, bb, dev_b)
            del ivs
        del sets, fwd_sets


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--quick", action="store_true", help="bf16 only")
    ap.add_argument("--only", choices=["torch", "jax"], default=None)
    ap.add_argument("--shapes", default="",
                    help="these shapes only, as RESULT lines name them: 16384x8192,4096x4096")
    ap.add_argument("--device-time", metavar="LIB", default=None,
                    help="libkernel_times.so: also time each call's kernels on the device (CUPTI)")
    ap.add_argument("--baton-jax", metavar="LIB", default=None,
                    help="libbaton_jax.so: with --device-time, also time baton's kernels through "
                         "its FFI handlers in the JAX process (batondev)")
    args = ap.parse_args()
    runs = max(50, args.runs)
    shapes = {s.strip() for s in args.shapes.split(",") if s.strip()}
    known = {shape_name((n1, n2), (n2,)) for n1, n2 in BIG} | {shape_name(*c) for c in SMALL}
    if shapes - known:
        ap.error(f"no case has shape {', '.join(sorted(shapes - known))}; "
                 f"the shapes are {', '.join(sorted(known))}")
    ok = True
    if args.only in (None, "torch"):
        try:
            bench_torch(runs, args.quick, shapes, args.device_time)
        except Exception as e:  # report and go on to JAX
            print(f"torch: {type(e).__name__}: {e}", flush=True)
            ok = False
    if args.only in (None, "jax"):
        try:
            bench_jax(runs, args.quick, shapes, args.device_time, args.baton_jax)
        except Exception as e:
            print(f"jax: {type(e).__name__}: {e}", flush=True)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
