#!/usr/bin/env python3
"""export_rfc.py: writes examples/plans/rfc.json with baton_export from the PyTorch module in
examples/torch/rfc_model.py (GPU steps, the + 1 on the CPU). Needs torch and baton_export
(pip install ./python). The names x0 (input) and x8 (output) are kept for the tests and
benchmarks that read them."""
import os
import shutil
import sys
import tempfile

import torch

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(root, "examples", "torch"))
import baton_export  # noqa: E402
from rfc_model import make  # noqa: E402


def export_rfc(out_path, layers=8, d=4096, check=False, baton=None):
    module, args = make(layers, d)
    with tempfile.TemporaryDirectory() as tmp:
        r = baton_export.export(module, args, tmp, device="cuda:0", cpu_ops=[torch.ops.aten.add],
                                name="executorch-rfc", output_names=[f"x{layers}"],
                                check=check, baton=baton, verbose=False)
        if r.weights_path:
            raise SystemExit("rfc: every weight should be a seeded init")
        shutil.copyfile(r.plan_path, out_path)
    return r


if __name__ == "__main__":
    export_rfc(os.path.join(root, "examples", "plans", "rfc.json"))
