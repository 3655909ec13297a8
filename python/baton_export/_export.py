"""export(): torch.export a module, lower its ATen graph to baton steps, write plan.json and
weights.safetensors. One lowering function per ATen op; patterns (Hugging Face's decomposed
RMSNorm, silu(a) * b) are matched before the walk and lowered as one step."""
import inspect
import operator
import os
import sys

import torch

from ._init import init_of
from ._plan import DTYPES, ExportError, Plan, Value, dtype_name, write_weights, write_weights_npy

aten = torch.ops.aten


# ---- helpers -------------------------------------------------------------------------------------
def _meta(node):
    v = node.meta.get("val")
    if isinstance(v, (list, tuple)):
        v = v[0]
    return v


def _where(node):
    """The model's source line that made `node` (the last frame of its stack trace)."""
    st = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in st.strip().splitlines() if ln.strip()]
    frames = [i for i, ln in enumerate(lines) if ln.startswith("File ")]
    if not frames:
        return "(no source line recorded)"
    i = frames[-1]
    code = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith("File ") else ""
    return lines[i] + (f": {code}" if code else "")


def _packet_name(p):
    """'aten.add' for torch.ops.aten.add, aten.add.Tensor, or the string itself."""
    if isinstance(p, str):
        s = p
        if s.startswith("torch.ops."):
            s = s[len("torch.ops."):]
        parts = s.split(".")
        return ".".join(parts[:2])
    if isinstance(p, torch._ops.OpOverload):
        p = p.overloadpacket
    if isinstance(p, torch._ops.OpOverloadPacket):
        return f"{p._qualified_op_name.replace('::', '.')}"
    raise TypeError(f"cpu_ops: {p!r} is not a torch op (use e.g. torch.ops.aten.add)")


def _shape(node):
    return [int(d) for d in _meta(node).shape]


def _is_suffix(small, big):
    s = list(small)
    while s and s[0] == 1:
        s = s[1:]
    return len(s) <= len(big) and (not s or list(big[len(big) - len(s):]) == s)


# ---- the lowering ---------------------------------------------------------------------------------
class _Lowering:
    def __init__(self, ep, plan, cpu_ops, names_in, consts, output_names):
        self.ep = ep
        self.p = plan
        self.cpu_ops = cpu_ops
        self.env = {}  # fx node -> Value, or ("T", Value) for a 2-D transpose
        self.names_in = names_in
        self.consts = consts
        self.output_names = output_names
        self.skip = set()
        self.fused = {}

    # the supported set, for the error message
    def supported(self):
        return sorted({_packet_name(k) for k in LOWERINGS if isinstance(k, torch._ops.OpOverload)
                       and k is not aten._assert_tensor_metadata.default})

    def unsupported(self, node, why=None):
        op = node.target
        name = _packet_name(op) if isinstance(op, (torch._ops.OpOverload,)) else str(op)
        msg = f"cannot lower {name}"
        if isinstance(op, torch._ops.OpOverload):
            msg += f" ({op})"
        if why:
            msg += f": {why}"
        msg += f"\n  at {_where(node)}\n  supported ops: {', '.join(self.supported())}"
        return ExportError(msg)

    def on_cpu(self, node):
        op = node.target
        return isinstance(op, torch._ops.OpOverload) and _packet_name(op) in self.cpu_ops

    def val(self, node, for_node=None):
        v = self.env.get(node)
        if isinstance(v, tuple):
            raise self.unsupported(for_node or node,
                                   "a transposed tensor is supported only as a GEMM operand")
        if v is None:
            raise self.unsupported(for_node or node, f"its input {node} has no baton tensor")
        return v

    def out_value(self, node, base=None, dtype=None, shape=None):
        m = _meta(node)
        dt = dtype or dtype_name(m.dtype, f"{node.name}")
        return self.p.temp(base or node.name, dt, shape if shape is not None else _shape(node))

    def step(self, node, target, inputs, outputs, attrs=None):
        return self.p.step(target, inputs, outputs, attrs, name=node.name,
                           cpu=self.on_cpu(node),
                           why=f"{_packet_name(node.target)} is in cpu_ops")

    def cast(self, node, v, dtype):
        if v.dtype == dtype:
            return v
        out = self.p.temp(f"{node.name}_cast", dtype, v.shape)
        self.step(node, "cast", [v], [out])
        return out

    # ---- patterns --------------------------------------------------------------------------------
    def find_patterns(self, graph):
        # last node first, so that weight * (x * rsqrt(...)) matches before its inner product
        for n in reversed(graph.nodes):
            if n.op != "call_function" or n in self.skip:
                continue
            if n.target == aten.mul.Tensor:
                m = self._match_rms(n)
                if m:
                    self.fused[n] = ("rms", m[0], m[1], m[2])
                    self.skip.update(m[3])
                    continue
                a, b = n.args[0], n.args[1]
                for s, other in ((a, b), (b, a)):
                    if (isinstance(s, torch.fx.Node) and s.target == aten.silu.default
                            and len(s.users) == 1 and isinstance(other, torch.fx.Node)
                            and _shape(s) == _shape(other) == _shape(n)
                            and _meta(s).dtype == _meta(other).dtype == _meta(n).dtype):
                        self.fused[n] = ("silu_mul", s.args[0], other)
                        self.skip.add(s)
                        break

    def _match_rms(self, root):
        """weight * to(x * rsqrt(mean(x^2, -1, keepdim) + eps)), x optionally cast to f32 first;
        returns (x, weight or None, eps, interior nodes) when every interior node is used only
        inside the pattern."""
        def only_in(n, users):
            return all(u in users or u.target == aten._assert_tensor_metadata.default
                       for u in n.users)

        a, b = root.args[0], root.args[1]
        weight, norm = None, root
        for w, other in ((a, b), (b, a)):
            if isinstance(w, torch.fx.Node) and w.op == "placeholder" and isinstance(
                    other, torch.fx.Node) and len(_shape(w)) == 1:
                weight, norm = w, other
                break
        interior = []
        cast = None
        if weight is not None and norm.target in (aten._to_copy.default, aten.to.dtype):
            cast, norm = norm, norm.args[0]
        if not isinstance(norm, torch.fx.Node) or norm.target != aten.mul.Tensor:
            return None
        x, r = norm.args[0], norm.args[1]
        if isinstance(x, torch.fx.Node) and x.target == aten.rsqrt.default:
            x, r = r, x
        if not (isinstance(r, torch.fx.Node) and r.target == aten.rsqrt.default):
            return None
        add = r.args[0]
        if add.target != aten.add.Tensor or not isinstance(add.args[1], (int, float)):
            return None
        eps = float(add.args[1])
        mean = add.args[0]
        if mean.target != aten.mean.dim or list(mean.args[1]) not in ([-1], [len(_shape(mean)) - 1]) \
                or not (len(mean.args) > 2 and mean.args[2] or mean.kwargs.get("keepdim")):
            return None
        pw = mean.args[0]
        if pw.target != aten.pow.Tensor_Scalar or pw.args[1] != 2 or pw.args[0] is not x:
            return None
        xin = x
        if x.target in (aten._to_copy.default, aten.to.dtype) and _meta(x).dtype == torch.float32:
            xin = x.args[0]
        interior += [pw, mean, add, r]
        if weight is not None:
            interior.append(norm)
        if cast is not None:
            interior.append(cast)
        inner = set(interior) | {root}
        for n in interior:
            if not only_in(n, inner):
                return None
        if weight is None:
            # the root is the normalising mul itself; its x*rsqrt interior is the root
            interior = [n for n in interior if n is not root]
        if weight is not None and _shape(weight)[0] != _shape(xin)[-1]:
            return None
        if x is not xin and only_in(x, inner):
            interior.append(x)  # the cast to f32 has no other reader: it goes with the pattern
        return xin, weight, eps, interior

    # ---- the walk ----------------------------------------------------------------------------
    def run(self):
        gm = self.ep.graph_module
        graph = gm.graph
        sig = self.ep.graph_signature
        specs = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
        self.find_patterns(graph)
        out_node = next(n for n in graph.nodes if n.op == "output")
        outs = list(out_node.args[0])
        user_outs = [s for s in sig.output_specs]
        for s in user_outs:
            if s.kind.name != "USER_OUTPUT":
                raise ExportError(f"the module mutates a buffer or input ({s.target}); baton plans "
                                  "export pure functions (state tensors come from export_causal_lm)")
        # output names decided up front, so the producing step writes the output tensor
        if self.output_names is not None:
            onames = list(self.output_names)
            if len(onames) != len(outs):
                raise ExportError(f"output_names has {len(onames)} names, the module returns "
                                  f"{len(outs)} outputs")
        else:
            onames = ["output"] if len(outs) == 1 else [f"output.{i}" for i in range(len(outs))]
        self.onames = onames
        self.out_for = {}
        for n, oname in zip(outs, onames):
            if isinstance(n, torch.fx.Node) and n not in self.out_for and n.op == "call_function":
                self.out_for[n] = oname
        user_i = 0
        for node in graph.nodes:
            if node.op == "placeholder":
                spec = specs[node.name]
                kind = spec.kind.name
                m = _meta(node)
                if kind == "USER_INPUT":
                    if not isinstance(m, torch.Tensor):
                        raise ExportError(f"input '{node.name}' is not a tensor; baton plans take "
                                          "tensors (bake Python values into the module)")
                    name = self.names_in[user_i]
                    user_i += 1
                    self.env[node] = self.p.tensor(name, dtype_name(m.dtype, f"input '{name}'"),
                                                   list(m.shape), role="input")
                elif kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                    key = spec.target
                    t = self.consts[key]
                    self.env[node] = self.p.weight(key, t, init=init_of(t))
                else:
                    raise ExportError(f"placeholder {node.name} of kind {kind} is not supported")
            elif node.op == "call_function":
                if node in self.skip:
                    continue
                if node in self.fused:
                    self.lower_fused(node)
                    continue
                fn = LOWERINGS.get(node.target) or LOWERINGS.get(
                    getattr(node.target, "overloadpacket", None))
                if fn is None:
                    raise self.unsupported(node)
                r = fn(self, node)
                if r is not None:
                    self.env[node] = r
            elif node.op == "output":
                self.finish(outs, onames)
            else:
                raise ExportError(f"graph node {node.name} ({node.op}) is not supported")

    def result(self, node, base=None, dtype=None):
        """The Value a step computing `node` writes: the plan output when node is one."""
        m = _meta(node)
        dt = dtype or dtype_name(m.dtype, node.name)
        oname = self.out_for.get(node)
        if oname is not None and dt == dtype_name(m.dtype, node.name):
            del self.out_for[node]
            return self.p.tensor(oname, dt, _shape(node), role="output")
        return self.p.temp(base or node.name, dt, _shape(node))

    def finish(self, outs, onames):
        for n, oname in zip(outs, onames):
            if oname in self.p.tensors:
                continue
            if not isinstance(n, torch.fx.Node):
                raise ExportError(f"output {oname} is not a tensor ({n!r})")
            v = self.val(n)
            out = self.p.tensor(oname, v.dtype, v.shape, role="output")
            # a view, an input or a constant returned as is: the output needs its own bytes
            self.p.step("copy", [v], [out], name=f"{oname}_copy")

    def lower_fused(self, node):
        f = self.fused[node]
        if f[0] == "rms":
            _, x, w, eps = f
            xv = self.val(x, node)
            if w is None:
                wv = self.p.const_values(f"{node.name}_ones", xv.dtype, [1.0] * xv.shape[-1]) \
                    if xv.shape[-1] <= 4096 else self.p.tensor(
                        self.p.fresh(f"{node.name}_ones"), xv.dtype, [xv.shape[-1]],
                        role="constant", init={"kind": "fill", "value": 1})
            else:
                wv = self.val(w, node)
            self.env[node] = self._rms(node, xv, wv, eps, packet="aten.rms_norm")
        else:
            _, a, b = f
            out = self.result(node)
            self.step(node, "silu_mul", [self.val(a, node), self.val(b, node)], [out])
            self.env[node] = out

    def _rms(self, node, xv, wv, eps, packet=None):
        m = _meta(node)
        want = dtype_name(m.dtype, node.name)
        y_dt = wv.dtype  # rms_norm_fwd writes the weight's dtype
        y = self.result(node, dtype=y_dt) if y_dt == want else self.p.temp(node.name, y_dt,
                                                                           xv.shape)
        inv = self.p.temp(f"{node.name}_invvar", "f64" if xv.dtype == "f64" else "f32",
                          xv.shape[:-1] or [1])
        cpu = self.on_cpu(node) or (packet is not None and packet in self.cpu_ops)
        self.p.step("rms_norm_fwd", [xv, wv], [y, inv], {"eps": eps}, name=node.name, cpu=cpu,
                    why="aten.rms_norm is in cpu_ops")
        if y_dt != want:
            out = self.result(node)
            self.step(node, "cast", [y], [out])
            return out
        return y


# ---- lowerings, one per op ------------------------------------------------------------------------
def _gemm(L, node, a, b, trans_b_default=False, bias=None, alpha=1.0):
    """a @ b (b 2-D, possibly a transpose node), plus bias."""
    av = L.env.get(a)
    trans_a = False
    if isinstance(av, tuple):
        av, trans_a = av[1], True
    elif av is None:
        av = L.val(a, node)
    bv = L.env.get(b)
    trans_b = trans_b_default
    if isinstance(bv, tuple):
        bv, trans_b = bv[1], not trans_b
    elif bv is None:
        bv = L.val(b, node)
    if len(bv.shape) != 2:
        raise L.unsupported(node, f"the right operand is {len(bv.shape)}-D; baton's gemm takes a "
                            "2-D weight (batched matmul has no lowering)")
    if trans_a and len(av.shape) != 2:
        raise L.unsupported(node, "a transposed left operand must be 2-D")
    want = dtype_name(_meta(node).dtype, node.name)
    av, bv = L.cast(node, av, want), L.cast(node, bv, want)
    attrs = {}
    if trans_a:
        attrs["trans_a"] = True
    if trans_b:
        attrs["trans_b"] = True
    if alpha != 1.0:
        attrs["alpha"] = float(alpha)
    if bias is None:
        out = L.result(node)
        L.step(node, "gemm", [av, bv], [out], attrs)
        return out
    mm = L.p.temp(f"{node.name}_mm", want, _shape(node))
    L.step(node, "gemm", [av, bv], [mm], attrs)
    bv2 = L.cast(node, L.val(bias, node), want)
    if not _is_suffix(bv2.shape, mm.shape):
        raise L.unsupported(node, f"bias of shape {bv2.shape} does not broadcast over the rows")
    out = L.result(node)
    L.p.step("add", [mm, bv2], [out], name=f"{node.name}_bias", cpu=L.on_cpu(node),
             why=f"{_packet_name(node.target)} is in cpu_ops")
    return out


def _linear(L, n):
    bias = n.args[2] if len(n.args) > 2 else n.kwargs.get("bias")
    return _gemm(L, n, n.args[0], n.args[1], trans_b_default=True, bias=bias)


def _mm(L, n):
    return _gemm(L, n, n.args[0], n.args[1])


def _matmul(L, n):
    if len(_shape(n.args[1])) != 2:
        raise L.unsupported(n, "only x @ W with a 2-D W lowers to baton's gemm")
    return _gemm(L, n, n.args[0], n.args[1])


def _addmm(L, n):
    beta = n.kwargs.get("beta", 1)
    if beta != 1:
        raise L.unsupported(n, "addmm with beta != 1")
    return _gemm(L, n, n.args[1], n.args[2], bias=n.args[0], alpha=n.kwargs.get("alpha", 1))


def _t(L, n):
    src = n.args[0]
    if len(_shape(src)) != 2:
        raise L.unsupported(n, "only 2-D transposes (as GEMM operands) are supported")
    if n.target in (aten.transpose.int,) and sorted(int(d) % 2 for d in n.args[1:3]) != [0, 1]:
        raise L.unsupported(n)
    if n.target == aten.permute.default and [int(d) % 2 for d in n.args[1]] != [1, 0]:
        raise L.unsupported(n)
    v = L.env.get(src)
    if isinstance(v, tuple):  # a transpose of a transpose
        return v[1]
    return ("T", L.val(src, n))


def _binary(L, n, target):
    a, b = n.args[0], n.args[1]
    if n.kwargs.get("alpha", 1) != 1:
        raise L.unsupported(n, "alpha != 1")
    want = dtype_name(_meta(n).dtype, n.name)
    if not isinstance(b, torch.fx.Node) and isinstance(a, torch.fx.Node):
        return _scalar(L, n, a, b, target)
    if not isinstance(a, torch.fx.Node):
        return _scalar(L, n, b, a, target)
    av, bv = L.val(a, n), L.val(b, n)
    shape = _shape(n)
    if _prod(av.shape) != _prod(shape) or not _is_suffix(bv.shape, av.shape):
        av, bv = bv, av  # add and mul commute: the full-shape operand goes first
    if _prod(av.shape) != _prod(shape) or not _is_suffix(bv.shape, av.shape):
        raise L.unsupported(n, f"broadcast of {av.shape} and {bv.shape}: baton's {target} "
                            "repeats b over a's leading dims only")
    if av.shape != shape:
        av = L.p.view(f"{n.name}_a", av, shape)
    av, bv = L.cast(n, av, want), L.cast(n, bv, want)
    out = L.result(n)
    L.step(n, target, [av, bv], [out])
    return out


def _prod(s):
    r = 1
    for d in s:
        r *= d
    return r


def _scalar(L, n, x, s, target):
    if isinstance(s, bool) or not isinstance(s, (int, float)):
        raise L.unsupported(n, f"scalar operand {s!r}")
    want = dtype_name(_meta(n).dtype, n.name)
    xv = L.cast(n, L.val(x, n), want)
    out = L.result(n)
    if target == "add":
        L.step(n, "add_scalar", [xv], [out], {"value": float(s) if want[0] in "bf" else int(s)})
    else:  # mul by a scalar: a one-element constant that the mul kernel repeats
        c = L.p.const_values(f"{n.name}_scalar", want, [s], [1])
        L.step(n, "mul", [xv, c], [out])
    return out


def _add(L, n):
    return _binary(L, n, "add")


def _mul(L, n):
    return _binary(L, n, "mul")


def _sub(L, n):
    if isinstance(n.args[1], (int, float)) and not isinstance(n.args[1], bool):
        return _scalar(L, n, n.args[0], -n.args[1], "add")
    raise L.unsupported(n, "baton has no sub kernel (only x - scalar lowers, to add_scalar)")


def _div(L, n):
    s = n.args[1]
    if isinstance(s, (int, float)) and not isinstance(s, bool) and s != 0:
        # multiplying by the reciprocal rounds differently from dividing (≤ 1 ulp)
        return _scalar(L, n, n.args[0], 1.0 / s, "mul")
    raise L.unsupported(n, "only division by a scalar lowers (to mul by its reciprocal)")


def _unary(target, attrs_fn=None):
    def f(L, n):
        x = L.val(n.args[0], n)
        want = dtype_name(_meta(n).dtype, n.name)
        x = L.cast(n, x, want)
        out = L.result(n)
        L.step(n, target, [x], [out], attrs_fn(n) if attrs_fn else None)
        return out
    return f


def _softshrink_attrs(n):
    lam = n.args[1] if len(n.args) > 1 else n.kwargs.get("lambd", 0.5)
    return {"lambda": float(lam)}


def _gelu_attrs(n):
    a = n.kwargs.get("approximate", n.args[1] if len(n.args) > 1 else "none")
    return {"approximate": True} if a == "tanh" else None


def _softmax(L, n):
    dim = int(n.args[1])
    if dim not in (-1, len(_shape(n)) - 1):
        raise L.unsupported(n, "softmax over a dim other than the last")
    return _unary("softmax")(L, n)


def _to(L, n):
    x = L.val(n.args[0], n)
    want = dtype_name(_meta(n).dtype, n.name)
    if x.dtype == want:
        return x  # a no-op conversion is the same tensor
    out = L.result(n)
    L.step(n, "cast", [x], [out])
    return out


def _alias(L, n):
    return L.val(n.args[0], n)


def _view(L, n):
    x = L.val(n.args[0], n)
    shape = _shape(n)
    if shape == x.shape:
        return x
    return L.p.view(n.name, x, shape)


def _embedding(L, n):
    table, ids = L.val(n.args[0], n), L.val(n.args[1], n)
    out = L.result(n)
    L.step(n, "embedding", [ids, table], [out])
    return out


def _rms_norm(L, n):
    x = L.val(n.args[0], n)
    shape = list(n.args[1])
    w = n.args[2] if len(n.args) > 2 else n.kwargs.get("weight")
    eps = n.args[3] if len(n.args) > 3 else n.kwargs.get("eps")
    if eps is None:
        eps = torch.finfo(TORCH_DT[x.dtype]).eps
    if len(shape) != 1 and w is None:
        raise L.unsupported(n, "rms_norm over several dims without a weight")
    if w is None:
        wv = L.p.tensor(L.p.fresh(f"{n.name}_ones"), x.dtype, shape, role="constant",
                        init={"kind": "fill", "value": 1})
    else:
        wv = L.val(w, n)
    return L._rms(n, x, wv, float(eps))


def _getitem(L, n):
    src, i = n.args
    v = L.env.get(src)
    if isinstance(v, list):
        return v[i]
    raise L.unsupported(n, f"item {i} of {src.name}")


def _argmax(L, n):
    dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
    x = L.val(n.args[0], n)
    if dim is None or int(dim) not in (-1, len(x.shape) - 1):
        raise L.unsupported(n, "argmax over the last dim only")
    out = L.result(n)
    L.step(n, "argmax", [x], [out])
    return out


def _ignore(L, n):
    return None


def _args(n, names, defaults):
    """A custom op's arguments by name: positional, keyword, or the schema's default."""
    out = dict(defaults)
    out.update(zip(names, n.args))
    out.update(n.kwargs)
    return out


def _baton_rope(L, n):
    a = _args(n, ["x", "positions", "inv_freq", "head_dim", "interleaved", "scale"],
              {"interleaved": False, "scale": 1.0})
    attrs = {"head_dim": int(a["head_dim"])}
    if a["interleaved"]:
        attrs["interleaved"] = True
    if a["scale"] != 1.0:
        attrs["scale"] = float(a["scale"])
    out = L.result(n)
    L.step(n, "rope", [L.val(a["x"], n), L.val(a["positions"], n), L.val(a["inv_freq"], n)],
           [out], attrs)
    return out


def _baton_attention(L, n):
    a = _args(n, ["q", "k_cache", "v_cache", "positions", "head_dim", "n_heads", "n_kv_heads",
                  "scale"], {"scale": None})
    attrs = {"head_dim": int(a["head_dim"]), "n_heads": int(a["n_heads"]),
             "n_kv_heads": int(a["n_kv_heads"])}
    if a["scale"] is not None:
        attrs["scale"] = float(a["scale"])
    out = L.result(n)
    L.step(n, "attention", [L.val(a[k], n) for k in ("q", "k_cache", "v_cache", "positions")],
           [out], attrs)
    return out


TORCH_DT = {v: k for k, v in DTYPES.items()}

LOWERINGS = {
    aten.linear.default: _linear,
    aten.mm.default: _mm,
    aten.matmul.default: _matmul,
    aten.addmm.default: _addmm,
    aten.t.default: _t,
    aten.transpose.int: _t,
    aten.permute.default: _t,
    aten.add.Tensor: _add,
    aten.mul.Tensor: _mul,
    aten.sub.Tensor: _sub,
    aten.div.Tensor: _div,
    aten.softshrink.default: _unary("softshrink", _softshrink_attrs),
    aten.silu.default: _unary("silu"),
    aten.gelu.default: _unary("gelu", _gelu_attrs),
    aten.softmax.int: _softmax,
    aten._softmax.default: _softmax,
    aten.to.dtype: _to,
    aten.to.dtype_layout: _to,
    aten._to_copy.default: _to,
    aten.type_as.default: _to,
    aten.clone.default: _alias,
    aten.alias.default: _alias,
    aten.detach.default: _alias,
    aten.contiguous.default: _alias,
    aten.dropout.default: _alias,
    aten.view.default: _view,
    aten._unsafe_view.default: _view,
    aten.reshape.default: _view,
    aten.unsqueeze.default: _view,
    aten.squeeze.dim: _view,
    aten.squeeze.dims: _view,
    aten.squeeze.default: _view,
    aten.flatten.using_ints: _view,
    aten.embedding.default: _embedding,
    aten.rms_norm.default: _rms_norm,
    aten.argmax.default: _argmax,
    aten._assert_tensor_metadata.default: _ignore,
    operator.getitem: _getitem,
}
from . import ops as _ops  # noqa: E402,F401  (registers torch.ops.baton.*)

LOWERINGS[torch.ops.baton.rope.default] = _baton_rope
LOWERINGS[torch.ops.baton.attention.default] = _baton_attention


# ---- the entry point ----------------------------------------------------------------------------
class ExportResult:
    """What export() wrote and decided: paths, the CPU placements, and (check=True) the max
    absolute error of each output against the module's eager output."""

    def __init__(self, plan_path, weights_path, notes, plan):
        self.plan_path = plan_path
        self.weights_path = weights_path
        self.notes = notes
        self.plan = plan
        self.errors = None

    def __repr__(self):
        return f"ExportResult({self.plan_path!r}, errors={self.errors})"


def export(module, args, out_dir, *, device="cuda:0", cpu_ops=(), name=None, check=False,
           baton=None, output_names=None, verbose=True, kwargs=None,
           weights_format="safetensors"):
    """Exports `module(*args)` to out_dir/plan.json and out_dir/weights.safetensors.

    device: where steps go ("cuda:0", "cpu"); cpu_ops: torch ops (torch.ops.aten.add, an
    overload, or "aten.add") whose steps go on the CPU; name: the plan's name (default: the
    module's class name); check: run the plan with the baton CLI on args and report the max
    error of each output against module(*args); baton: that CLI (default $BATON, then PATH); a
    CUDA build's `baton targets --json` also says which targets run on CUDA; output_names: names
    for the outputs instead of output / output.0, output.1, ...; weights_format: "safetensors"
    (default) or "npy" (one .npy per constant under out_dir/weights/, for baton builds without
    the safetensors init). Raises ExportError naming the op and source line of anything that
    does not lower. Returns an ExportResult."""
    if not isinstance(args, tuple):
        args = (args,)
    cpu = {_packet_name(p) for p in cpu_ops}
    module = module.eval()
    with torch.no_grad():
        ep = torch.export.export(module, args, kwargs=kwargs)
    params = list(inspect.signature(module.forward).parameters.values())
    names_in = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    n_user = sum(1 for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT")
    names_in = names_in[:n_user] + [f"input.{i}" for i in range(len(names_in), n_user)]
    consts = dict(module.named_parameters())
    consts.update(dict(module.named_buffers()))
    consts.update(ep.constants)
    for k, v in ep.state_dict.items():
        consts.setdefault(k, v)
    plan = Plan(name or type(module).__name__, device=device, verbose=verbose,
                weights_format=weights_format)
    if device != "cpu":
        from ._plan import targets_from_cli

        known = targets_from_cli(baton)
        if known:
            plan.cuda_targets, plan.delegates = known
    L = _Lowering(ep, plan, cpu, names_in, consts, output_names)
    L.run()
    os.makedirs(out_dir, exist_ok=True)
    plan_path = os.path.join(out_dir, "plan.json")
    weights_path = os.path.join(out_dir, "weights.safetensors")
    if plan.weights and weights_format == "npy":
        write_weights_npy(out_dir, plan.weights)
        weights_path = os.path.join(out_dir, "weights")
    elif plan.weights:
        write_weights(weights_path, plan.weights)
    else:
        weights_path = None
    plan.write(plan_path)
    res = ExportResult(plan_path, weights_path, plan.notes, plan.to_json())
    if check:
        from ._check import check_plan

        with torch.no_grad():
            ref = module(*args, **(kwargs or {}))
        refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        ins = dict(zip(names_in, args))
        res.errors = check_plan(plan_path, ins, dict(zip(L.onames, refs)),
                                baton=baton, verbose=verbose)
    return res
