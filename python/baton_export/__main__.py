"""python -m baton_export FILE.py:FACTORY -o DIR [--device D] [--cpu-op aten.add]... [--dtype bf16]
[--name NAME] [--check] [--baton PATH]: FACTORY() returns (module, example_inputs)."""
import argparse
import importlib.util
import os
import sys

import torch

from . import ExportError, export
from ._plan import TORCH_DTYPES


def load_factory(spec):
    path, sep, fn = spec.rpartition(":")
    if not sep or not path or not fn:
        raise SystemExit(f"baton_export: '{spec}': expected FILE.py:FACTORY")
    if not os.path.isfile(path):
        raise SystemExit(f"baton_export: {path}: no such file")
    ms = importlib.util.spec_from_file_location("_baton_export_user", path)
    mod = importlib.util.module_from_spec(ms)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    ms.loader.exec_module(mod)
    if not hasattr(mod, fn):
        raise SystemExit(f"baton_export: {path} has no '{fn}'")
    return getattr(mod, fn)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m baton_export",
                                 description="Export a PyTorch module to a baton plan")
    ap.add_argument("factory", help="FILE.py:FACTORY; FACTORY() returns (module, example inputs)")
    ap.add_argument("-o", "--out", required=True, help="output directory")
    ap.add_argument("--device", default="cuda:0", help="where steps go (default cuda:0)")
    ap.add_argument("--cpu-op", action="append", default=[], metavar="aten.OP",
                    help="place this op's steps on the CPU (repeatable)")
    ap.add_argument("--dtype", choices=sorted(TORCH_DTYPES), help="convert the module and its "
                    "float inputs to this dtype first")
    ap.add_argument("--name", help="the plan's name")
    ap.add_argument("--check", action="store_true", help="run the plan with the baton CLI and "
                    "report the max error per output")
    ap.add_argument("--baton", help="the baton CLI for --check (default $BATON, then PATH)")
    a = ap.parse_args(argv)
    made = load_factory(a.factory)()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise SystemExit("baton_export: FACTORY must return (module, example_inputs)")
    module, args = made
    if not isinstance(args, tuple):
        args = (args,)
    if a.dtype:
        dt = TORCH_DTYPES[a.dtype]
        module = module.to(dt)
        args = tuple(x.to(dt) if torch.is_tensor(x) and x.is_floating_point() else x for x in args)
    try:
        r = export(module, args, a.out, device=a.device, cpu_ops=a.cpu_op, name=a.name,
                   check=a.check, baton=a.baton)
    except ExportError as e:
        print(f"baton_export: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {r.plan_path}" + (f" and {r.weights_path}" if r.weights_path else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
