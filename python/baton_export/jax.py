"""baton_export.jax: a jitted JAX function to a baton plan, from its jaxpr.

The function's custom calls are baton's targets (registered with jax.ffi as `baton_<target>`, as
examples/jax/rms_norm.py does): each becomes that target's step, its FFI attributes the step's
attrs (a legacy custom call's descriptor bytes are decoded). Calls (jit, custom_vjp, custom_jvp,
closed_call, remat) are inlined, unused equations dropped, equations on constants alone folded by
JAX itself, and the elementwise primitives that have a bit-exact baton form lowered
(convert_element_type, mul, add, sub, neg, div by a power of two, integer_pow 2, square,
reshape/squeeze/expand_dims as views, broadcast_in_dim into an add or mul). Anything else raises
ExportError naming the primitive and the source line. Needs jax and numpy only (no torch)."""
import inspect
import os

import numpy as np

from ._base import CUDA_TARGETS, DELEGATES, ExportError, write_plan

_DT = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64", "int32": "i32",
       "int64": "i64", "uint8": "u8", "bool": "bool"}
# baton targets a custom call may name (baton_<target>, or baton_<target>_status for the
# legacy descriptor form); `baton targets --json` of the given CLI adds plugins' targets
KNOWN_TARGETS = {"rms_norm_fwd", "rms_norm_bwd", "rms_norm_grad_weight"} | CUDA_TARGETS
_CALLS = ("jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
          "custom_vjp_call_jaxpr", "remat", "checkpoint", "custom_lin")
_NO_FOLD = ("ffi_call", "custom_call")
LOWERED = ("ffi_call/custom_call to baton_<target>", "convert_element_type", "mul", "add", "sub",
           "neg", "div (by a power of two)", "integer_pow (y=1, 2)", "square", "reshape",
           "squeeze", "expand_dims", "broadcast_in_dim (into add/mul)", "copy",
           "jit/custom_vjp/custom_jvp/closed_call/remat (inlined)")


class _Lit:
    """A value known at export time (a literal, a closed-over constant, or folded)."""
    __slots__ = ("val",)

    def __init__(self, val):
        self.val = np.asarray(val)


class _T:
    """A plan tensor; bshape set when it is a broadcast (broadcast_in_dim) not yet materialized."""
    __slots__ = ("name", "dtype", "shape", "bshape")

    def __init__(self, name, dtype, shape, bshape=None):
        self.name, self.dtype, self.shape, self.bshape = name, dtype, list(shape), bshape


def _dtype(dt, what):
    n = np.dtype(dt).name
    if n not in _DT:
        raise ExportError(f"{what}: dtype {n} has no baton equivalent ({', '.join(_DT)})")
    return _DT[n]


def _where(e):
    try:
        from jax._src import source_info_util

        return source_info_util.summarize(e.source_info)
    except Exception:  # the summary is a courtesy; the primitive's name is the message
        return "?"


def _inner(e):
    """(jaxpr, consts) of a call-like equation, or None."""
    if e.primitive.name not in _CALLS:
        return None
    for k in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        j = e.params.get(k)
        if j is None or callable(j) and not hasattr(j, "eqns") and not hasattr(j, "jaxpr"):
            continue
        if hasattr(j, "jaxpr") and hasattr(j, "consts"):
            return j.jaxpr, list(j.consts)
        if hasattr(j, "eqns"):
            return j, []
    return None


def _flatten(jaxpr, consts, ins, out):
    """Inlines calls: appends (eqn, input atoms, output keys) to out; returns the outputs' atoms.
    An atom is a _Lit or a key (an int) naming one value of the flat program."""
    env = {}
    for v, c in zip(jaxpr.constvars, consts):
        env[v] = _Lit(c)
    for v, a in zip(jaxpr.invars, ins):
        env[v] = a

    def read(v):
        return _Lit(v.val) if hasattr(v, "val") and not hasattr(v, "count") else env[v]

    for e in jaxpr.eqns:
        a = [read(v) for v in e.invars]
        sub = _inner(e)
        if sub is not None:
            if len(sub[0].invars) != len(a):  # custom_vjp_call's num_consts and the like
                a = a[len(a) - len(sub[0].invars):]
            res = _flatten(sub[0], sub[1], a, out)
        else:
            res = [_Key.new() for _ in e.outvars]
            out.append((e, a, res))
        for v, r in zip(e.outvars, res):
            if type(v).__name__ != "DropVar":
                env[v] = r
    return [read(v) for v in jaxpr.outvars]


class _Key:
    n = 0

    @classmethod
    def new(cls):
        cls.n += 1
        return cls.n


class _Lowering:
    def __init__(self, name, device, targets):
        self.name, self.device, self.targets = name, device, targets
        self.tensors, self.steps, self.names, self.notes = [], [], set(), []

    def fresh(self, base):
        n, k = base, 1
        while n in self.names:
            n, k = f"{base}.{k}", k + 1
        self.names.add(n)
        return n

    def tensor(self, base, dtype, shape, **kw):
        t = {"name": self.fresh(base), "dtype": dtype, "shape": [int(d) for d in shape], **kw}
        self.tensors.append(t)
        return _T(t["name"], dtype, shape)

    def const(self, base, val, dtype):
        v = np.asarray(val)
        shape = list(v.shape) or [1]
        if dtype in ("bf16", "f16", "f32", "f64"):
            vals = v.astype(np.float64).reshape(-1).tolist()  # exact: every such value fits
        else:
            vals = [int(x) for x in v.astype(np.int64).reshape(-1)]
        return self.tensor(base, dtype, shape, role="constant",
                           init={"kind": "values", "values": vals})

    def step(self, target, ins, outs, attrs=None):
        dev = self.device
        if dev != "cpu" and target not in CUDA_TARGETS:
            dev = "cpu"
            self.notes.append(f"{target} placed on cpu: baton has no CUDA implementation")
        s = {"name": self.fresh(f"s.{target}"),
             ("delegate" if target in DELEGATES else "kernel"): target, "device": dev,
             "inputs": [t.name for t in ins], "outputs": [t.name for t in outs]}
        if attrs:
            s["attrs"] = attrs
        self.steps.append(s)


def _legacy_attrs(target, cfg):
    """The tutorial's RMSNorm descriptor (baton's 40-byte or the tutorial's 32-byte layout)."""
    import struct

    if not target.startswith("rms_norm") or not cfg:
        raise ExportError(f"custom call baton_{target}_status: a legacy descriptor is decoded for "
                          "the RMSNorm targets only")
    b = bytes(cfg)
    if len(b) == 40:
        _, _, eps, _, _, p = struct.unpack("<qqdiiq", b)
    elif len(b) == 32:
        _, _, eps, _, _, p = struct.unpack("<iidiii4x", b)
    else:
        raise ExportError(f"custom call baton_{target}_status: descriptor of {len(b)} bytes "
                          "(baton's is 40, the tutorial's 32)")
    return {"eps": float(eps)} | ({"part_grad_size": int(p)} if target == "rms_norm_bwd" else {})


def _attr(v):
    a = np.asarray(v)
    if a.ndim:
        raise ExportError(f"attribute {v!r}: baton attrs are scalars")
    return bool(a) if a.dtype == bool else int(a) if a.dtype.kind in "iu" else float(a)


def export(fn, args, out_dir, *, device="cpu", name=None, input_names=None, output_names=None,
           baton=None, verbose=True):
    """Writes out_dir/plan.json for fn (jitted or not) traced at args (arrays or
    jax.ShapeDtypeStruct, one per positional parameter). Inputs are named after fn's parameters
    (or input_names), outputs `output` / `output.0`, `output.1`, ... (or output_names). Returns
    {"plan": path, "inputs": [...], "outputs": [...], "notes": [...]}."""
    import jax

    targets = set(KNOWN_TARGETS)
    if baton:
        import json
        import subprocess

        r = subprocess.run([baton, "targets", "--json"], capture_output=True, text=True)
        if r.returncode == 0:
            targets |= {t["name"] for t in json.loads(r.stdout).get("targets", [])}
    closed = jax.make_jaxpr(fn)(*args)
    leaves = closed.in_avals
    if len(leaves) != len(args):
        raise ExportError("pass one array per positional parameter (no pytrees)")
    if input_names is None:
        try:
            ps = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            ps = []
        input_names = ps[:len(args)] if len(ps) >= len(args) else [f"arg{i}"
                                                                     for i in range(len(args))]
    L = _Lowering(name or getattr(fn, "__name__", "jax"), device, targets)
    ins = []
    for nm, av in zip(input_names, leaves):
        t = L.tensor(nm, _dtype(av.dtype, f"input '{nm}'"), av.shape, role="input")
        ins.append(t)
    keys = [_Key.new() for _ in ins]
    flat = []
    outs = _flatten(closed.jaxpr, list(closed.consts), keys, flat)
    env = dict(zip(keys, ins))
    # drop what no output needs (grad's jaxpr keeps the primal loss, e.g. a reduce_sum)
    need = {o for o in outs if not isinstance(o, _Lit)}
    live = []
    for e, a, r in reversed(flat):
        if any(k in need for k in r):
            live.append((e, a, r))
            need |= {x for x in a if not isinstance(x, _Lit)}
    for e, a, r in reversed(live):
        vals = [x if isinstance(x, _Lit) else env[x] for x in a]
        if all(isinstance(v, _Lit) for v in vals) and e.primitive.name not in _NO_FOLD:
            res = e.primitive.bind(*[v.val for v in vals], **e.params)
            res = res if e.primitive.multiple_results else [res]
            for k, v in zip(r, res):
                env[k] = _Lit(np.asarray(v))
            continue
        res = _lower_eqn(L, e, vals)
        for k, v in zip(r, res):
            env[k] = v
    names = list(output_names or (["output"] if len(outs) == 1 else
                                  [f"output.{i}" for i in range(len(outs))]))
    if len(names) != len(outs):
        raise ExportError(f"output_names has {len(names)} names for {len(outs)} outputs")
    produced = {}
    for s in L.steps:
        for o in s["outputs"]:
            produced[o] = s
    tdict = {t["name"]: t for t in L.tensors}
    renamed = set()
    for nm, o in zip(names, outs):
        v = o if isinstance(o, _Lit) else env[o]
        if isinstance(v, _Lit):
            v = L.const(nm + ".value", v.val, _dtype(v.val.dtype, f"output '{nm}'"))
        v = _materialize(L, v, "output")
        t = tdict.get(v.name) or next(x for x in L.tensors if x["name"] == v.name)
        if (v.name in produced and "role" not in t and "view_of" not in t
                and v.name not in renamed and nm not in L.names):
            # the step's own output becomes the plan output under its name
            old = v.name
            t["name"], t["role"] = nm, "output"
            L.names.add(nm)
            for s in L.steps:
                s["inputs"] = [nm if x == old else x for x in s["inputs"]]
                s["outputs"] = [nm if x == old else x for x in s["outputs"]]
            for x in L.tensors:
                if x.get("view_of") == old:
                    x["view_of"] = nm
            renamed.add(nm)
            for k in env:
                if isinstance(env[k], _T) and env[k].name == old:
                    env[k].name = nm
        else:  # an input, a constant, a view or an output twice: a copy
            y = L.tensor(nm, v.dtype, v.shape, role="output")
            L.step("copy", [v], [y])
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "plan.json")
    write_plan(path, {"name": L.name, "tensors": L.tensors, "steps": L.steps})
    if verbose:
        for n in L.notes:
            print(f"baton_export.jax: {n}")
    return {"plan": path, "inputs": [t.name for t in ins], "outputs": names, "notes": L.notes}


def _unsupported(e, why=""):
    return ExportError(f"jaxpr primitive '{e.primitive.name}' has no baton lowering"
                       f"{': ' + why if why else ''} (at {_where(e)}); baton_export.jax lowers "
                       + ", ".join(LOWERED))


def _materialize(L, v, what):
    if v.bshape is not None:
        raise ExportError(f"a broadcast_in_dim result feeds {what}: baton broadcasts only inside "
                          "add and mul (trailing dims); broadcast in JAX after the export")
    return v


def _view(L, v, shape):
    v = _materialize(L, v, "a reshape")
    t = next(x for x in L.tensors if x["name"] == v.name)
    root = t.get("view_of", v.name)
    return L.tensor(v.name + ".view", v.dtype, shape, view_of=root)


def _splat(val):
    """The one value of a constant whose elements are all equal, else None."""
    f = val.reshape(-1)
    if f.size and np.all(f == f[0]) and np.all(np.signbit(f) == np.signbit(f[0])):
        return f[0]
    return None


def _binary(L, e, target, a, b, out_aval):
    """add or mul: baton repeats b when b has a's trailing dims; both commute bitwise."""
    odt = _dtype(out_aval.dtype, e.primitive.name)
    oshape = list(out_aval.shape)
    if isinstance(a, _Lit):
        a, b = b, a
    if isinstance(b, _Lit):
        s = _splat(b.val)
        if s is not None:
            c = L.const(f"{e.primitive.name}.c", np.asarray([s]).astype(b.val.dtype), odt)
        else:
            full = np.broadcast_to(b.val, oshape)
            c = L.const(f"{e.primitive.name}.c", full, odt)
        b = c
    if a.bshape is not None and b.bshape is None:
        a, b = b, a
    if a.bshape is not None or list(a.shape) != oshape:
        raise _unsupported(e, f"operand shapes {a.shape} and {b.shape}: both broadcast")
    bs = list(b.shape)
    while len(bs) > 1 and bs[0] == 1:
        bs = bs[1:]
    if not (bs == oshape[len(oshape) - len(bs):] or bs == [1]):
        raise _unsupported(e, f"{b.shape} is not trailing dims of {oshape}")
    if b.bshape is not None:
        b = _T(b.name, b.dtype, b.shape)
    if a.dtype != odt or b.dtype != odt:
        raise _unsupported(e, f"mixed dtypes {a.dtype}, {b.dtype}")
    y = L.tensor(target, odt, oshape)
    L.step(target, [a, b], [y])
    return y


def _pow2_reciprocal(c):
    m, _ = np.frexp(np.float64(c))
    return c != 0 and np.isfinite(c) and abs(m) == 0.5


def _lower_eqn(L, e, vals):
    p = e.primitive.name
    oav = [v.aval for v in e.outvars]
    if p in ("ffi_call", "custom_call"):
        tn = e.params.get("target_name", e.params.get("call_target_name", ""))
        tn = tn.decode() if isinstance(tn, bytes) else str(tn)
        legacy = tn.endswith("_status")
        tgt = tn[len("baton_"):] if tn.startswith("baton_") else None
        if tgt and legacy:
            tgt = tgt[:-len("_status")]
        if not tgt or tgt not in L.targets:
            raise _unsupported(e, f"custom call '{tn}' is not a baton target (baton_<target>, "
                               f"one of {', '.join(sorted(L.targets))})")
        if e.params.get("input_output_aliases"):
            raise _unsupported(e, f"custom call '{tn}' aliases inputs to outputs")
        if legacy:
            attrs = _legacy_attrs(tgt, e.params.get("legacy_backend_config")
                                  or e.params.get("backend_config"))
        else:
            attrs = {k: _attr(v) for k, v in (e.params.get("attributes") or ())}
        ins = []
        for i, v in enumerate(vals):
            if isinstance(v, _Lit):
                v = L.const(f"{tgt}.in{i}", v.val, _dtype(v.val.dtype, tn))
            ins.append(_materialize(L, v, f"custom call '{tn}'"))
        outs = [L.tensor(f"{tgt}.out{i}", _dtype(a.dtype, tn), a.shape) for i, a in enumerate(oav)]
        L.step(tgt, ins, outs, attrs)
        return outs
    if p == "convert_element_type":
        x = vals[0]
        odt = _dtype(oav[0].dtype, p)
        if x.dtype == odt:
            return [x]
        x = _materialize(L, x, p)
        y = L.tensor("cast", odt, oav[0].shape)
        L.step("cast", [x], [y])
        return [y]
    if p in ("mul", "add"):
        return [_binary(L, e, p, vals[0], vals[1], oav[0])]
    if p == "neg":
        return [_binary(L, e, "mul", vals[0], _Lit(np.asarray(-1, oav[0].dtype)), oav[0])]
    if p == "sub":
        a, b = vals
        if isinstance(b, _Lit):  # a - c == a + (-c) exactly
            return [_binary(L, e, "add", a, _Lit(-b.val), oav[0])]
        nb = _binary(L, e, "mul", b, _Lit(np.asarray(-1, oav[0].dtype)), oav[0]) \
            if b.bshape is None and list(b.shape) == list(oav[0].shape) else None
        if nb is None:
            raise _unsupported(e, "a broadcast subtrahend")
        return [_binary(L, e, "add", a, nb, oav[0])]
    if p == "div":
        a, b = vals
        if isinstance(b, _Lit) and not isinstance(a, _Lit):
            c = _splat(b.val)
            if c is not None and np.dtype(oav[0].dtype).kind == "f" and _pow2_reciprocal(c):
                return [_binary(L, e, "mul", a, _Lit(np.asarray(1 / c, b.val.dtype)), oav[0])]
        raise _unsupported(e, "only division by a power of two lowers (to an exact mul by its "
                              "reciprocal); baton has no div kernel")
    if p == "integer_pow" and e.params.get("y") in (1, 2) or p == "square":
        x = vals[0]
        if p == "integer_pow" and e.params["y"] == 1:
            return [x]
        return [_binary(L, e, "mul", x, x, oav[0])]
    if p in ("reshape", "squeeze", "expand_dims"):
        return [_view(L, vals[0], oav[0].shape)]
    if p == "broadcast_in_dim":
        x = _materialize(L, vals[0], p)
        shape = list(e.params["shape"])
        bd = list(e.params["broadcast_dimensions"])
        # leading dims added only: x repeats along them, as add/mul's second operand does
        if bd != list(range(len(shape) - len(x.shape), len(shape))) or \
                list(x.shape) != shape[len(shape) - len(x.shape):]:
            raise _unsupported(e, f"broadcast of {x.shape} to {shape} along {bd}: only new "
                                  "leading dims lower")
        return [_T(x.name, x.dtype, x.shape, bshape=shape)]
    if p in ("copy", "copy_p", "optimization_barrier"):
        return list(vals)
    raise _unsupported(e)
