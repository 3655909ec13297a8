"""baton's seeded initialisers (docs/plan-format.md, "The seeded algorithms, exactly") in numpy, so a
module can hold the very values a plan's `normal`/`uniform` init makes; a parameter filled here is
exported as that init instead of bytes in weights.safetensors."""
import numpy as np
import torch

_LN2 = 0.6931471805599453
_HALF_PI = 1.5707963267948966
_INIT_ATTR = "_baton_init"


def _splitmix64(seed, n):
    with np.errstate(over="ignore"):
        k = np.arange(1, n + 1, dtype=np.uint64)
        state = np.uint64(seed) + k * np.uint64(0x9E3779B97F4A7C15)
        z = state
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _ln(u):
    m, e = np.frexp(u)
    low = m < 0.70710678118654752440
    m = np.where(low, m * 2.0, m)
    e = np.where(low, e - 1, e).astype(np.float64)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    term = s.copy()
    total = s.copy()
    for k in range(1, 12):
        term = term * s2
        total = total + term / float(2 * k + 1)
    return e * _LN2 + 2.0 * total


def _cos_sin_2pi(u):
    t = u * 4.0
    q = np.floor(t + 0.5)
    x = (t - q) * _HALF_PI
    x2 = x * x
    st = x.copy()
    ss = x.copy()
    ct = np.ones_like(x)
    cs = np.ones_like(x)
    for k in range(1, 10):
        st = -(st * x2) / float((2 * k) * (2 * k + 1))
        ct = -(ct * x2) / float((2 * k - 1) * (2 * k))
        ss = ss + st
        cs = cs + ct
    qi = q.astype(np.int64) & 3
    c = np.choose(qi, [cs, -ss, -cs, ss])
    s = np.choose(qi, [ss, cs, -ss, -cs])
    return c, s


def normal_values(seed, n, mean=0.0, std=1.0):
    """float64 values of baton's `normal` init (before rounding to the tensor's dtype)."""
    pairs = (n + 1) // 2
    draws = _splitmix64(seed, 2 * pairs)
    a, b = draws[0::2], draws[1::2]
    u1 = ((a >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53
    u2 = (b >> np.uint64(11)).astype(np.float64) * 2.0**-53
    r = np.sqrt(-2.0 * _ln(u1))
    c, s = _cos_sin_2pi(u2)
    out = np.empty(2 * pairs)
    out[0::2] = mean + std * (r * c)
    out[1::2] = mean + std * (r * s)
    return out[:n]


def uniform_values(seed, n, low, high):
    a = _splitmix64(seed, n)
    return low + (high - low) * ((a >> np.uint64(11)).astype(np.float64) * 2.0**-53)


def _store(t, values, init):
    # baton rounds float64 -> f32 -> 16-bit; torch's f64 -> f32 -> bf16 casts round the same way
    v = torch.from_numpy(values.reshape(tuple(t.shape)))
    if t.dtype in (torch.bfloat16, torch.float16):
        v = v.to(torch.float32)
    elif not t.dtype.is_floating_point:
        raise TypeError("seeded inits are for float tensors here")
    with torch.no_grad():
        t.copy_(v.to(t.dtype))
    setattr(t, _INIT_ATTR, init)
    return t


def seeded_normal_(t, seed, std=1.0, mean=0.0):
    """Fills t (in place) with baton's `normal` init and marks it so that export() writes the
    init (`{"kind": "normal", ...}`) instead of the tensor's bytes. Call it on the nn.Parameter
    (or buffer) itself: the mark is an attribute of that object."""
    init = {"kind": "normal", "seed": int(seed), "std": float(std)}
    if mean:
        init["mean"] = float(mean)
    return _store(t, normal_values(seed, t.numel(), mean, std), init)


def seeded_uniform_(t, seed, low, high):
    init = {"kind": "uniform", "seed": int(seed), "low": float(low), "high": float(high)}
    return _store(t, uniform_values(seed, t.numel(), low, high), init)


def init_of(t):
    return getattr(t, _INIT_ATTR, None)
