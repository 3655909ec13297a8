#!/usr/bin/env python3
"""gen_plans.py: writes the bundled plans in examples/plans/ that the PyTorch exporter cannot make
(run from the repo root): the tutorial's backward and the RMSNorm chain. rfc.json is exported from a
PyTorch module by scripts/export_rfc.py. The plans are committed; this script is how they were
made, so they can be re-made or varied."""
import json, os

OUT = os.path.join(os.path.dirname(__file__), "..", "examples", "plans")


def plan(name, tensors, steps):
    return {"format": "baton.plan", "version": 1, "name": name, "tensors": tensors, "steps": steps}


def write(fname, p):
    with open(os.path.join(OUT, fname), "w") as f:
        # one tensor or step per line keeps the files readable and diffs small
        f.write('{\n  "format": "baton.plan", "version": 1, "name": %s,\n' % json.dumps(p["name"]))
        for key in ("tensors", "steps"):
            f.write('  "%s": [\n' % key)
            rows = [json.dumps(x) for x in p[key]]
            f.write(",\n".join("    " + r for r in rows))
            f.write("\n  ]%s\n" % ("," if key == "tensors" else ""))
        f.write("}\n")


def tutorial():
    t = [
        {"name": "x", "dtype": "bf16", "shape": [4, 512, 512], "role": "input"},
        {"name": "weight", "dtype": "bf16", "shape": [512, 512], "role": "constant",
         "init": {"kind": "normal", "seed": 1, "mean": 1.0, "std": 0.1}},
        {"name": "grad_y", "dtype": "bf16", "shape": [4, 512, 512], "role": "input"},
        {"name": "y", "dtype": "bf16", "shape": [4, 512, 512], "role": "output"},
        {"name": "invvar", "dtype": "f32", "shape": [4], "role": "output"},
        {"name": "grad_x", "dtype": "bf16", "shape": [4, 512, 512], "role": "output"},
        {"name": "grad_weight", "dtype": "bf16", "shape": [512, 512], "role": "output"},
        {"name": "part_grad", "dtype": "f32", "shape": [4, 512, 512]},
    ]
    s = [
        {"name": "forward", "kernel": "rms_norm_fwd", "device": "cuda:0",
         "inputs": ["x", "weight"], "outputs": ["y", "invvar"], "attrs": {"eps": 1e-5}},
        {"name": "backward", "kernel": "rms_norm_bwd", "device": "cuda:0",
         "inputs": ["grad_y", "invvar", "x", "weight"],
         "outputs": ["grad_x", "grad_weight", "part_grad"], "attrs": {"eps": 1e-5}},
    ]
    write("rmsnorm_tutorial.json", plan("rmsnorm-tutorial", t, s))


def chain(n=64, d=4096, rows=1):
    t = [{"name": "x", "dtype": "bf16", "shape": [rows, d], "role": "input"},
         {"name": "w", "dtype": "bf16", "shape": [d], "role": "constant",
          "init": {"kind": "normal", "seed": 3, "mean": 1.0, "std": 0.05}}]
    s = []
    prev = "x"
    for i in range(n):
        out = f"h{i+1}"
        t += [{"name": out, "dtype": "bf16", "shape": [rows, d],
               **({"role": "output"} if i == n - 1 else {})},
              {"name": f"inv{i+1}", "dtype": "f32", "shape": [rows]}]
        s.append({"name": f"norm{i+1}", "kernel": "rms_norm_fwd", "device": "cuda:0",
                  "inputs": [prev, "w"], "outputs": [out, f"inv{i+1}"], "attrs": {"eps": 1e-5}})
        prev = out
    write("rmsnorm_chain64.json" if rows == 1 else f"rmsnorm_chain64_r{rows}.json",
          plan(f"rmsnorm-chain-{n}x{rows}x{d}", t, s))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    tutorial()
    chain()
