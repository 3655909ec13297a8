"""check=True: run an exported plan with the `baton` CLI on the example inputs (.npy files) and
compare each output with the module's eager output (max absolute error per output)."""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch


def find_baton(baton=None):
    """The baton CLI: the argument, else $BATON, else `baton` on PATH."""
    path = baton or os.environ.get("BATON") or shutil.which("baton")
    if not path or not os.access(path, os.X_OK):
        raise FileNotFoundError(
            "check=True needs the baton CLI: pass baton=PATH, set BATON=PATH, or put `baton` on "
            "PATH (it is build/baton after `bash scripts/test.sh`)")
    return path


def save_npy(path, t):
    """A tensor as .npy; bf16 as 2-byte void (|V2), as ml_dtypes and baton write it."""
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        a = t.view(torch.int16).numpy().view(np.dtype("V2"))
    else:
        a = t.numpy()
    np.save(path, a, allow_pickle=False)


def load_npy(path, dtype):
    a = np.load(path, allow_pickle=False)
    if dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def gpu_flag():
    return "--gpu=auto" if torch.cuda.is_available() else "--gpu=cpu"


def check_plan(plan_path, inputs, refs, baton=None, verbose=True, extra=()):
    """Runs plan_path with inputs {name: tensor}, returns {output: max abs error} against refs."""
    exe = find_baton(baton)
    errors = {}
    with tempfile.TemporaryDirectory(prefix="baton_check_") as tmp:
        cmd = [exe, "run", gpu_flag(), "-q"]
        for name, t in inputs.items():
            f = os.path.join(tmp, f"in_{len(cmd)}.npy")
            save_npy(f, t)
            cmd += ["--input", f"{name}={f}"]
        files = {}
        for name in refs:
            files[name] = os.path.join(tmp, f"out_{len(files)}.npy")
            cmd += ["--output", f"{name}={files[name]}"]
        cmd += list(extra) + [plan_path]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"baton run failed (exit {r.returncode}): {' '.join(cmd)}\n"
                               f"{r.stderr.strip()}")
        for name, ref in refs.items():
            got = load_npy(files[name], ref.dtype)
            if got.shape != ref.shape:
                got = got.reshape(ref.shape)
            if ref.dtype.is_floating_point:
                e = (got.double() - ref.double()).abs().max().item() if ref.numel() else 0.0
            else:
                e = float((got != ref).sum().item())
            errors[name] = e
            if verbose:
                print(f"baton_export: check: {name}: max abs error {e:.3g} "
                      f"(max |ref| {ref.double().abs().max().item():.3g})", file=sys.stderr)
    return errors
