"""A plan interpreter in PyTorch, following each target's definition (docs/kernels.md and the
decoder ops of docs/generate.md): a second opinion on an exported plan that needs no baton build,
used by the tests to check a plan's structure against the model it came from."""
import json
import os

import torch

from ._check import load_npy
from ._plan import TORCH_DTYPES


def _math(dt):
    return torch.float64 if dt == torch.float64 else torch.float32


def _rope(x, pos, inv, head_dim, scale=1.0, interleaved=False):
    shape = x.shape
    xm = x.to(_math(x.dtype)).reshape(-1, shape[-1] // head_dim, head_dim)
    f = pos.reshape(-1, 1).to(torch.float32) * inv.to(torch.float32).reshape(1, -1)
    emb = torch.cat([f, f], dim=-1)
    cos, sin = (emb.cos() * scale)[:, None, :], (emb.sin() * scale)[:, None, :]
    if interleaved:
        raise NotImplementedError("interleaved rope")
    half = head_dim // 2
    rot = torch.cat([-xm[..., half:], xm[..., :half]], dim=-1)
    return (xm * cos + rot * sin).to(x.dtype).reshape(shape)


def _attention(q, kc, vc, pos, head_dim, n_heads, n_kv_heads, scale=None):
    scale = head_dim ** -0.5 if scale is None else scale
    md = _math(q.dtype)
    T = pos.numel()
    qm = q.to(md).reshape(T, n_heads, head_dim).transpose(0, 1)  # H, T, Dh
    S = int(pos.max().item()) + 1
    k = kc[:S].to(md).reshape(S, n_kv_heads, head_dim).transpose(0, 1)
    v = vc[:S].to(md).reshape(S, n_kv_heads, head_dim).transpose(0, 1)
    rep = n_heads // n_kv_heads
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    s = (qm @ k.transpose(1, 2)) * scale
    mask = torch.arange(S).reshape(1, S) > pos.reshape(T, 1)
    s = s.masked_fill(mask, float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return o.transpose(0, 1).reshape(q.shape).to(q.dtype)


def _ew(fn):
    def f(ins, attrs, out):
        x = ins[0]
        return [fn(x.to(_math(x.dtype)), *[i.to(_math(x.dtype)) for i in ins[1:]], attrs)
                .to(out[0])]
    return f


def _bcast(a, b):
    return b.reshape(-1).repeat(a.numel() // b.numel()).reshape(a.shape)


def _gemm(ins, attrs, out):
    a, b = ins
    a2 = a.to(_math(a.dtype))
    b2 = b.to(_math(b.dtype))
    if attrs.get("trans_a"):
        a2 = a2.t()
    if attrs.get("trans_b"):
        b2 = b2.t()
    y = (a2 @ b2) * attrs.get("alpha", 1.0)
    return [y.to(out[0])]


def _gemm_add(ins, attrs, out):
    # baton's CPU gemm_add is the gemm (rounded to the output dtype) then the add
    y = _gemm(ins[:2], attrs, out)[0]
    return [(y.to(_math(y.dtype)) + ins[2].to(_math(y.dtype))).to(out[0])]


def _swiglu(ins, attrs, out):
    gu = ins[0]
    F = gu.shape[-1] // 2
    return _ew(lambda a, b, at: torch.nn.functional.silu(a) * b)([gu[..., :F], gu[..., F:]],
                                                                attrs, out)


def _rope_cache_update(ins, at, out):
    qkv, pos, inv, kc, vc = ins
    Dh, H, Hkv = at["head_dim"], at["n_heads"], at["n_kv_heads"]
    ra = {k: at[k] for k in ("scale", "interleaved") if k in at}
    q = _rope(qkv[..., :H * Dh].contiguous(), pos, inv, Dh, **ra)
    k = _rope(qkv[..., H * Dh:(H + Hkv) * Dh].contiguous(), pos, inv, Dh, **ra)
    _kv_update(kc, k, pos)
    _kv_update(vc, qkv[..., (H + Hkv) * Dh:], pos)
    return [q, kc, vc]


def _rms(ins, attrs, out):
    x, w = ins
    md = _math(x.dtype)
    n = w.numel()
    xm = x.to(md).reshape(-1, n)
    inv = torch.rsqrt(xm.pow(2).mean(-1, keepdim=True) + attrs.get("eps", 1e-5))
    y = w.to(md).reshape(1, n) * (xm * inv)
    return [y.reshape(x.shape).to(out[0]), inv.reshape(-1).to(out[1])]


def _rms_norm_gemm(ins, attrs, out):
    # rms_norm_fwd's output (rounded to the dtype, as the unfused plan stores it), then x W^T
    x, g, w = ins
    y = _rms([x, g], attrs, [x.dtype, _math(x.dtype)])[0]
    md = _math(x.dtype)
    return [(y.to(md) @ w.to(md).t()).to(out[0])]


def _swiglu_gemm_add(ins, attrs, out):
    # swiglu's output (rounded to the dtype), then m W^T + c, rounded once
    gu, w, c = ins
    m = _swiglu([gu], attrs, [gu.dtype])[0]
    md = _math(gu.dtype)
    return [(m.to(md) @ w.to(md).t() + c.to(md)).to(out[0])]


TARGETS = {
    "gemm": _gemm,
    "gemm_add": _gemm_add,
    "swiglu": _swiglu,
    "rope_cache_update": _rope_cache_update,
    "rms_norm_fwd": _rms,
    "rms_norm_gemm": _rms_norm_gemm,
    "swiglu_gemm_add": _swiglu_gemm_add,
    "add": _ew(lambda a, b, at: a + _bcast(a, b)),
    "mul": _ew(lambda a, b, at: a * _bcast(a, b)),
    "add_scalar": _ew(lambda a, at: a + at["value"]),
    "softshrink": _ew(lambda a, at: torch.nn.functional.softshrink(a, at.get("lambda", 0.5))),
    "silu": _ew(lambda a, at: torch.nn.functional.silu(a)),
    "gelu": _ew(lambda a, at: torch.nn.functional.gelu(
        a, approximate="tanh" if at.get("approximate") else "none")),
    "silu_mul": _ew(lambda a, b, at: torch.nn.functional.silu(a) * b),
    "softmax": _ew(lambda a, at: torch.softmax(a, dim=-1)),
    "copy": lambda ins, at, out: [ins[0].clone()],
    "cast": lambda ins, at, out: [ins[0].to(out[0])],
    "argmax": lambda ins, at, out: [ins[0].argmax(-1)],
    "embedding": lambda ins, at, out: [ins[1][ins[0]]],
    "rope": lambda ins, at, out: [_rope(*ins, **at)],
    "attention": lambda ins, at, out: [_attention(*ins, **at)],
}


def _kv_update(cache, new, pos):
    cache[pos.reshape(-1)] = new.reshape(pos.numel(), -1).to(cache.dtype)
    return [cache]


def _init(t, plan_dir, st_cache):
    init = t["init"]
    dt = TORCH_DTYPES[t["dtype"]]
    k = init["kind"]
    if k == "safetensors":
        from safetensors.torch import load_file

        path = os.path.join(plan_dir, init["path"])
        if path not in st_cache:
            st_cache[path] = load_file(path)
        return st_cache[path][init["key"]].to(dt)
    if k == "npy":
        return load_npy(os.path.join(plan_dir, init["path"]), dt)
    if k == "fill":
        return torch.full(t["shape"], init["value"], dtype=dt)
    if k == "values":
        return torch.tensor(init["values"], dtype=torch.float64).reshape(t["shape"]).to(dt)
    if k in ("normal", "uniform"):
        from ._init import normal_values, uniform_values

        n = 1
        for d in t["shape"]:
            n *= d
        v = normal_values(init["seed"], n, init.get("mean", 0.0), init["std"]) if k == "normal" \
            else uniform_values(init["seed"], n, init["low"], init["high"])
        return torch.from_numpy(v).reshape(t["shape"]).to(torch.float32).to(dt)
    raise NotImplementedError(f"init {k}")


class Runner:
    """Loads a plan once; run(inputs, dims) returns its outputs; state persists across runs."""

    def __init__(self, plan_path, weights_cache=None):
        with open(plan_path) as f:
            self.plan = json.load(f)
        d = os.path.dirname(os.path.abspath(plan_path))
        self.st = weights_cache if weights_cache is not None else {}
        self.tensors = {t["name"]: t for t in self.plan["tensors"]}
        self.consts, self.state = {}, {}
        for t in self.plan["tensors"]:
            if t.get("role") == "constant":
                self.consts[t["name"]] = _init(t, d, self.st)
        self.reset_state()

    def reset_state(self):
        for t in self.plan["tensors"]:
            if t.get("role") == "state":
                self.state[t["name"]] = torch.zeros(t["shape"], dtype=TORCH_DTYPES[t["dtype"]])

    def shape(self, name, dims):
        return [dims[s] if isinstance(s, str) else s for s in self.tensors[name]["shape"]]

    def run(self, inputs, dims=None):
        dims = dims or {}
        env = dict(self.consts)
        env.update(self.state)
        env.update(inputs)
        for t in self.plan["tensors"]:
            if "view_of" in t:
                env[t["name"]] = None  # resolved when read
        for s in self.plan["steps"]:
            tgt = s.get("kernel") or s.get("delegate")
            ins = []
            for n in s["inputs"]:
                t = self.tensors[n]
                v = env[t["view_of"]].reshape(self.shape(n, dims)) if "view_of" in t else env[n]
                ins.append(v)
            outs = [TORCH_DTYPES[self.tensors[n]["dtype"]] for n in s["outputs"]]
            if tgt == "kv_cache_update":
                res = _kv_update(*ins)
            else:
                res = TARGETS[tgt](ins, s.get("attrs", {}), outs)
            for n, v in zip(s["outputs"], res):
                env[n] = v.reshape(self.shape(n, dims))
        for n in self.state:
            self.state[n] = env[n]
        return {t["name"]: env[t["name"]] for t in self.plan["tensors"]
                if t.get("role") == "output"}
