#!/usr/bin/env python3
"""test_decoder_torch.py BATON: the decoder ops against PyTorch's own functions, through plans that
`baton run` loads and runs (so the load-time checks and the runtime take part): F.embedding, HF's
rotate_half rotary embedding and the interleaved (GPT-J) form, Tensor.index_copy_ (the cache
update), F.scaled_dot_product_attention with enable_gqa and the equivalent mask (causal prefill
after a prefix, and decode), F.silu(a) * b, F.silu, F.gelu (erf and tanh), torch.softmax, casts,
and sample with top_k = 1 against torch.argmax. On the CPU always, on cuda:0 too where torch sees
a GPU and baton was built with CUDA. bf16 runs as f32 inputs cast to bf16 inside the plan and back.

Exits 77 (CTest: skipped) when torch or numpy cannot be imported. BATON_TEST_SEED=N replays."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # not an error: the CI step with PyTorch runs it
    print("skipped: %s (this check needs torch and numpy)" % e)
    sys.exit(77)

BATON = sys.argv[1] if len(sys.argv) > 1 else "build/baton"
SEED = int(os.environ.get("BATON_TEST_SEED", torch.seed() % 100000))
print("seed %d (BATON_TEST_SEED=%d replays)" % (SEED, SEED))
torch.manual_seed(SEED)
TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1e-2}
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "i64": np.int64}
failures = []


def devices():
    out = ["cpu"]
    ver = subprocess.run([BATON, "--version"], capture_output=True, text=True).stdout
    if "CUDA built" in ver and torch.cuda.is_available():
        out.append("cuda:0")
    return out


def run_plan(tmp, name, tensors, steps, inputs, outputs, device):
    """tensors: [(name, dtype, shape, role)]; steps: [(target, [ins], [outs], attrs)]."""
    plan = {"format": "baton.plan", "version": 1, "name": name,
            "tensors": [dict({"name": n, "dtype": d, "shape": list(s)},
                             **({} if r == "intermediate" else {"role": r}))
                        for n, d, s, r in tensors],
            "steps": [{"name": "s%d" % i, "kernel": t, "device": device, "inputs": ins,
                       "outputs": outs, "attrs": attrs}
                      for i, (t, ins, outs, attrs) in enumerate(steps)]}
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(plan, f)
    args = [BATON, "run", "-q", "--gpu=cuda" if device != "cpu" else "--gpu=auto", path]
    for k, v in inputs.items():
        p = os.path.join(tmp, "%s.in.%s.npy" % (name, k))
        np.save(p, v)
        args += ["--input", "%s=%s" % (k, p)]
    outp = {}
    for k in outputs:
        p = os.path.join(tmp, "%s.out.%s.npy" % (name, k))
        args += ["--output", "%s=%s" % (k, p)]
        outp[k] = p
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s: baton run exited %d: %s" % (name, r.returncode, r.stderr.strip()))
    return {k: np.load(p) for k, p in outp.items()}


def compare(what, got, want, dt):
    got = torch.from_numpy(np.asarray(got, dtype=np.float64))
    want = want.double()
    err = ((got - want).norm() / max(want.norm().item(), 1e-30)).item()
    ok = err <= TOL[dt]
    print("%-44s rel err %.2e %s" % (what, err, "ok" if ok else "FAIL (tol %g)" % TOL[dt]))
    if not ok:
        failures.append(what)


def rounded(x, dt):
    """x as the plan sees it after the cast to dt (f32 inputs)."""
    return x.to({"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dt]).float()


def unary(tmp, dev, dt, target, x, attrs, name):
    """f32 x -> cast to dt -> target -> cast to f32 y"""
    shape = list(x.shape)
    t = [("x", "f32", shape, "input"), ("xd", dt, shape, "intermediate"),
         ("yd", dt, shape, "intermediate"), ("y", "f32", shape, "output")]
    st = [("cast", ["x"], ["xd"], {}), (target, ["xd"], ["yd"], attrs), ("cast", ["yd"], ["y"], {})]
    if dt == "f32":
        t = [("x", "f32", shape, "input"), ("y", "f32", shape, "output")]
        st = [(target, ["x"], ["y"], attrs)]
    return run_plan(tmp, name, t, st, {"x": x.numpy()}, ["y"], dev)["y"]


def rope_ref(x, pos, inv_freq, H, Dh, interleaved, scale):
    T = x.shape[0]
    ang = pos.float()[:, None] * inv_freq[None, :]  # f32, as HF
    cos, sin = ang.cos().double() * scale, ang.sin().double() * scale
    xh = x.double().view(T, H, Dh)
    if interleaved:
        x0, x1 = xh[..., 0::2], xh[..., 1::2]
        c, s = cos[:, None, :], sin[:, None, :]
        out = torch.stack([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1).reshape(T, H, Dh)
    else:
        emb_c = torch.cat([cos, cos], -1)[:, None, :]
        emb_s = torch.cat([sin, sin], -1)[:, None, :]
        rot = torch.cat([-xh[..., Dh // 2:], xh[..., :Dh // 2]], -1)  # rotate_half
        out = xh * emb_c + rot * emb_s
    return out.reshape(T, H * Dh)


def elementwise(tmp, dev, dt, tag):
    """silu, gelu (both forms), softmax and silu_mul in dtype dt."""
    x = torch.randn(7, 512) * 3
    compare("silu " + tag, unary(tmp, dev, dt, "silu", x, {}, "silu"),
            F.silu(rounded(x, dt).double()), dt)
    for approx in (False, True):
        compare("gelu(%s) %s" % ("tanh" if approx else "none", tag),
                unary(tmp, dev, dt, "gelu", x, {"approximate": approx}, "gelu"),
                F.gelu(rounded(x, dt).double(),
                       approximate="tanh" if approx else "none"), dt)
    compare("softmax " + tag, unary(tmp, dev, dt, "softmax", x, {}, "softmax"),
            torch.softmax(rounded(x, dt).double(), -1), dt)
    a, b = torch.randn(4, 1024) * 3, torch.randn(4, 1024)
    out = run_plan(tmp, "sm", [("a", dt, [4, 1024], "input"),
                               ("b", dt, [4, 1024], "input"),
                               ("y", dt, [4, 1024], "output")],
                   [("silu_mul", ["a", "b"], ["y"], {})],
                   {"a": a.numpy().astype(NP[dt]), "b": b.numpy().astype(NP[dt])},
                   ["y"], dev)["y"] if dt != "bf16" else None
    if out is not None:
        ar, br = rounded(a, dt).double(), rounded(b, dt).double()
        compare("silu_mul " + tag, out.astype(np.float64), F.silu(ar) * br, dt)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for dev in devices():
            for dt in ("f32", "f16", "bf16"):
                tag = "%s %s" % (dev, dt)
                elementwise(tmp, dev, dt, tag)
            tag = dev + " f32"
            if True:  # the ops below run in f32: their dtypes are covered by test_decoder.c
                # embedding
                V, D, n = 300, 64, 9
                ids = torch.randint(0, V, (1, n))
                table = torch.randn(V, D)
                out = run_plan(tmp, "emb", [("ids", "i64", [1, n], "input"),
                                            ("table", "f32", [V, D], "input"),
                                            ("y", "f32", [1, n, D], "output")],
                               [("embedding", ["ids", "table"], ["y"], {})],
                               {"ids": ids.numpy(), "table": table.numpy()}, ["y"], dev)["y"]
                compare("embedding " + tag, out, F.embedding(ids, table), "f32")
                # softmax of a decode step's logits and of 64 such rows (on CUDA: one row over
                # all SMs, and rows held in registers and shared memory)
                for shape in ((1, 128256), (64, 128256)):
                    x = torch.randn(*shape) * 4
                    compare("softmax %s %s f32" % (list(shape), dev),
                            unary(tmp, dev, "f32", "softmax", x, {}, "softmax"),
                            torch.softmax(x.double(), -1), "f32")
                # rope, both forms, with Llama 3's inverse frequencies: a few rows, a decode row
                # (on CUDA over several blocks) and positions far from 0
                Dh = 64
                inv_freq = 1.0 / (500000.0 ** (torch.arange(0, Dh, 2).float() / Dh))
                for H, T, pmax in ((4, 6, 4096), (32, 1, 131072), (8, 5, 1 << 22)):
                    pos = torch.randint(0, pmax, (T,))
                    x = torch.randn(T, H * Dh)
                    for il in (False, True):
                        t = [("x", "f32", [T, H * Dh], "input"), ("pos", "i64", [T], "input"),
                             ("f", "f32", [Dh // 2], "input"), ("y", "f32", [T, H * Dh], "output")]
                        out = run_plan(tmp, "rope", t,
                                       [("rope", ["x", "pos", "f"], ["y"],
                                         {"head_dim": Dh, "interleaved": il, "scale": 1.0})],
                                       {"x": x.numpy(), "pos": pos.numpy(), "f": inv_freq.numpy()},
                                       ["y"], dev)["y"]
                        compare("rope(%s) [%d, %d] pos < %d %s f32"
                                % ("interleaved" if il else "rotate_half", T, H * Dh, pmax, dev),
                                out, rope_ref(x, pos, inv_freq, H, Dh, il, 1.0), "f32")
                # kv_cache_update (index_copy_), into a separate output here
                S, KF = 32, 128
                cache, new = torch.randn(S, KF), torch.randn(3, KF)
                p = torch.tensor([5, 0, 31])
                out = run_plan(tmp, "kv", [("c", "f32", [S, KF], "input"),
                                           ("n", "f32", [3, KF], "input"),
                                           ("p", "i64", [3], "input"),
                                           ("o", "f32", [S, KF], "output")],
                               [("kv_cache_update", ["c", "n", "p"], ["o"], {})],
                               {"c": cache.numpy(), "n": new.numpy(), "p": p.numpy()}, ["o"],
                               dev)["o"]
                compare("kv_cache_update " + dev, out, cache.clone().index_copy_(0, p, new), "f32")
                # attention: prefill of T rows after a prefix, and decode
                H, Hkv, Dh, S = 8, 2, 64, 40
                for T, p0 in ((7, 20), (1, 39)):
                    q = torch.randn(T, H * Dh)
                    kc, vc = torch.randn(S, Hkv * Dh), torch.randn(S, Hkv * Dh)
                    pos = torch.arange(p0, p0 + T)
                    t = [("q", "f32", [1, T, H * Dh], "input"), ("k", "f32", [S, Hkv * Dh], "input"),
                         ("v", "f32", [S, Hkv * Dh], "input"), ("p", "i64", [T], "input"),
                         ("o", "f32", [1, T, H * Dh], "output")]
                    out = run_plan(tmp, "att", t,
                                   [("attention", ["q", "k", "v", "p"], ["o"],
                                     {"head_dim": Dh, "n_heads": H, "n_kv_heads": Hkv})],
                                   {"q": q.numpy()[None], "k": kc.numpy(), "v": vc.numpy(),
                                    "p": pos.numpy()}, ["o"], dev)["o"]
                    qh = q.double().view(T, H, Dh).transpose(0, 1)[None]
                    kh = kc.double().view(S, Hkv, Dh).transpose(0, 1)[None]
                    vh = vc.double().view(S, Hkv, Dh).transpose(0, 1)[None]
                    mask = torch.arange(S)[None, :] <= pos[:, None]
                    try:
                        ref = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask,
                                                             enable_gqa=True)
                    except TypeError:  # torch < 2.5: the same, with K and V repeated per group
                        ref = F.scaled_dot_product_attention(
                            qh, kh.repeat_interleave(H // Hkv, 1),
                            vh.repeat_interleave(H // Hkv, 1), attn_mask=mask)
                    compare("attention T=%d %s f32" % (T, dev), out.reshape(T, H * Dh),
                            ref[0].transpose(0, 1).reshape(T, H * Dh), "f32")
                # sample with top_k = 1 is argmax
                logits = torch.randn(3, 1000)
                out = run_plan(tmp, "smp", [("l", "f32", [3, 1000], "input"),
                                            ("step", "i64", [1], "input"),
                                            ("ids", "i64", [3], "output")],
                               [("sample", ["l", "step"], ["ids"], {"top_k": 1, "seed": 3})],
                               {"l": logits.numpy(), "step": np.array([4], dtype=np.int64)},
                               ["ids"], dev)["ids"]
                ok = (torch.from_numpy(out) == logits.argmax(-1)).all().item()
                print("%-44s %s" % ("sample top_k=1 == argmax " + dev, "ok" if ok else "FAIL"))
                if not ok:
                    failures.append("sample " + dev)
    if failures:
        print("FAILED: " + ", ".join(failures))
        return 1
    print("all decoder ops match PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
