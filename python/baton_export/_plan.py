"""The plan being built: tensors, steps, device placement and the writer of plan.json and
weights.safetensors. Shared by the torch.export lowering and the causal-LM template."""
import json
import os
import re
import sys

import torch

from ._base import CUDA_TARGETS, DELEGATES, ExportError, write_plan  # noqa: F401

DTYPES = {
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.float32: "f32",
    torch.float64: "f64",
    torch.int32: "i32",
    torch.int64: "i64",
}
TORCH_DTYPES = {v: k for k, v in DTYPES.items()}

def targets_from_cli(baton=None):
    """(CUDA targets, delegates) as a CUDA build of the baton CLI reports them (`baton targets
    --json`, which also lists plugins' targets), or None when no such CLI is found; the tables
    above are the fallback. A CPU-only build is not asked: it lists no CUDA implementation of
    anything, which says nothing about the GPU machine the plan is for."""
    import shutil
    import subprocess

    exe = baton or os.environ.get("BATON") or shutil.which("baton")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, "targets", "--json"], capture_output=True, text=True, timeout=30)
        doc = json.loads(r.stdout) if r.returncode == 0 else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    if not isinstance(doc, dict) or not doc.get("cuda_built"):
        return None
    ts = doc.get("targets") or []
    return ({t["name"] for t in ts if "cuda" in t.get("devices", ())},
            {t["name"] for t in ts if t.get("kind") == "delegate"})

_NAME_OK = re.compile(r"^[A-Za-z0-9_.:-]{1,255}$")


def dtype_name(dt, what):
    if dt not in DTYPES:
        raise ExportError(f"{what}: dtype {dt} has no baton equivalent; baton has "
                          + ", ".join(str(d).replace("torch.", "") for d in DTYPES))
    return DTYPES[dt]


class Value:
    """A plan tensor as the lowering sees it (name, dtype name, shape)."""

    __slots__ = ("name", "dtype", "shape")

    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, dtype, list(shape)

    def __repr__(self):
        return f"{self.name}:{self.dtype}{self.shape}"


class Plan:
    def __init__(self, name, device="cuda:0", weights_file="weights.safetensors", verbose=True,
                 weights_format="safetensors"):
        if weights_format not in ("safetensors", "npy"):
            raise ExportError(f"weights_format '{weights_format}': use 'safetensors' or 'npy'")
        self.weights_format = weights_format
        self.cuda_targets, self.delegates = CUDA_TARGETS, DELEGATES
        if device != "cpu" and not re.match(r"^cuda:([0-9]|1[0-4])$", device):
            raise ExportError(f"device '{device}': use 'cpu' or 'cuda:N' with N from 0 to 14")
        self.name = name
        self.device = device
        self.weights_file = weights_file
        self.verbose = verbose
        self.tensors = {}  # name -> dict, in declaration order
        self.steps = []
        self.step_names = set()
        self.weights = {}  # safetensors key -> torch tensor
        self.dims = {}
        self.notes = []  # what the exporter decided that a user should know (CPU placements)

    # ---- names ---------------------------------------------------------------------------------
    def fresh(self, base):
        base = re.sub(r"[^A-Za-z0-9_.:-]", "_", base)[:240] or "t"
        name, k = base, 1
        while name in self.tensors:
            name = f"{base}_{k}"
            k += 1
        return name

    def _fresh_step(self, base):
        base = re.sub(r"[^A-Za-z0-9_.:-]", "_", base)[:240] or "s"
        name, k = base, 1
        while name in self.step_names:
            name = f"{base}_{k}"
            k += 1
        self.step_names.add(name)
        return name

    # ---- tensors -------------------------------------------------------------------------------
    def tensor(self, name, dtype, shape, role=None, init=None, view_of=None):
        if not _NAME_OK.match(name):
            raise ExportError(f"tensor name '{name}' is not a valid baton name "
                              "(1 to 255 characters from A-Z a-z 0-9 _ . : -)")
        if name in self.tensors:
            raise ExportError(f"tensor '{name}' declared twice")
        t = {"name": name, "dtype": dtype, "shape": list(shape)}
        if role and role != "intermediate":
            t["role"] = role
        if init is not None:
            t["init"] = init
        if view_of is not None:
            t["view_of"] = view_of
        self.tensors[name] = t
        return Value(name, dtype, shape)

    def temp(self, base, dtype, shape):
        return self.tensor(self.fresh(base), dtype, shape)

    def weight(self, key, t, init=None):
        """A constant read from weights.safetensors under `key` (or a seeded init, no bytes)."""
        dt = dtype_name(t.dtype, f"weight '{key}'")
        if init is None:
            if self.weights_format == "npy":
                init = {"kind": "npy", "path": f"weights/{key}.npy"}
            else:
                init = {"kind": "safetensors", "path": self.weights_file, "key": key}
            self.weights[key] = t
        return self.tensor(key, dt, list(t.shape), role="constant", init=init)

    def const_values(self, base, dtype, values, shape=None):
        return self.tensor(self.fresh(base), dtype, shape or [len(values)], role="constant",
                           init={"kind": "values", "values": list(values)})

    def view(self, base, v, shape):
        """A zero-copy view of v (its root, so views of views stay one level deep)."""
        root = self.tensors[v.name].get("view_of", v.name)
        return self.tensor(self.fresh(base), v.dtype, shape, view_of=root)

    def is_view(self, v):
        return "view_of" in self.tensors[v.name]

    # ---- steps ---------------------------------------------------------------------------------
    def step(self, target, inputs, outputs, attrs=None, name=None, cpu=False, why=None):
        """Appends a step. cpu=True places it on the CPU (the op is in cpu_ops); so does a
        target baton implements only on the CPU, with a note either way."""
        sname = self._fresh_step(name or outputs[0].name)
        dev = self.device
        if dev != "cpu" and cpu:
            dev = "cpu"
            self._note(f"step '{sname}' ({target}) placed on cpu: {why or 'its op is in cpu_ops'}")
        elif dev != "cpu" and target not in self.cuda_targets:
            dev = "cpu"
            self._note(f"step '{sname}' ({target}) placed on cpu: baton has no CUDA "
                       f"implementation of '{target}'")
        s = {"name": sname, ("delegate" if target in self.delegates else "kernel"): target,
             "device": dev, "inputs": [v.name for v in inputs],
             "outputs": [v.name for v in outputs]}
        if attrs:
            s["attrs"] = attrs
        self.steps.append(s)
        return s

    def _note(self, msg):
        self.notes.append(msg)
        if self.verbose:
            print(f"baton_export: {msg}", file=sys.stderr)

    # ---- writing -------------------------------------------------------------------------------
    def to_json(self):
        p = {"format": "baton.plan", "version": 1, "name": self.name}
        if self.dims:
            p["dims"] = self.dims
        p["tensors"] = list(self.tensors.values())
        p["steps"] = self.steps
        return p

    def write(self, path):
        write_plan(path, self.to_json())


_ST_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32",
              torch.float64: "F64", torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8",
              torch.bool: "BOOL"}


def write_weights(path, weights):
    """weights.safetensors: every constant under its PyTorch name, in the safetensors layout (an
    8-byte little-endian header length, a JSON header padded to 8 bytes, the tensors' bytes in
    header order). Written here rather than by the safetensors package so that a machine with
    torch alone (a GPU box without network) can export; tied parameters are written once per
    name, each from its own bytes."""
    header, order, off = {}, [], 0
    for k, t in weights.items():
        if t.dtype not in _ST_DTYPES:
            raise ExportError(f"weight '{k}': dtype {t.dtype} has no safetensors equivalent")
        n = t.numel() * t.element_size()
        header[k] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + n]}
        order.append(k)
        off += n
    header["__metadata__"] = {"format": "pt", "writer": "baton_export"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for k in order:
            t = weights[k].detach().to("cpu").contiguous()
            if t.numel():
                f.write(memoryview(t.view(torch.uint8).reshape(-1).numpy()))
    os.replace(tmp, path)


def write_weights_npy(out_dir, weights):
    """One .npy per constant under out_dir/weights/ (the npy init every baton build reads)."""
    from ._check import save_npy

    d = os.path.join(out_dir, "weights")
    os.makedirs(d, exist_ok=True)
    for k, t in weights.items():
        save_npy(os.path.join(d, f"{k}.npy"), t)
