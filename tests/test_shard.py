#!/usr/bin/env python3
"""test_shard.py BATON: scripts/shard.py on the tutorial plan. The data-parallel plan's structure
(row shards of x and grad_y, the weight replicated, per-device steps with part_grad_size P / N,
the all_gather or all_reduce, grad_weight on every device), that the bundled
examples/plans/rmsnorm_tutorial_2gpu.json is what the script writes, that every per-device step
passes `baton validate` (the collectives' outputs stood in for by inputs until the runtime has
collectives), and that plans it cannot shard exit 2 naming the file and the fix."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SHARD = os.path.join(ROOT, "scripts", "shard.py")
TUTORIAL = os.path.join(ROOT, "examples", "plans", "rmsnorm_tutorial.json")
BUNDLED = os.path.join(ROOT, "examples", "plans", "rmsnorm_tutorial_2gpu.json")
BATON = sys.argv[1] if len(sys.argv) > 1 else None
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: %s" % what, file=sys.stderr)


def shard(*args):
    r = subprocess.run([sys.executable, SHARD] + list(args), capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def tensors(plan):
    return {t["name"]: t for t in plan["tensors"]}


def role(t):
    return t.get("role", "intermediate")


def check_plan(plan, devices, reduce):
    N = len(devices)
    T = tensors(plan)
    steps = plan["steps"]
    what = "%d devices, %s" % (N, reduce)
    check(plan["format"] == "baton.plan" and plan["version"] == 1, "%s: format" % what)
    check(plan["name"] == "rmsnorm-tutorial-%dgpu" % N, "%s: name %s" % (what, plan["name"]))
    rows = 4 // N
    for base in ("x", "grad_y"):
        check(base not in T, "%s: %s is split, not kept whole" % (what, base))
        for i in range(N):
            t = T.get("%s.%d" % (base, i))
            check(t is not None and t["dtype"] == "bf16" and t["shape"] == [rows, 512, 512]
                  and role(t) == "input", "%s: %s.%d is a bf16 [%d, 512, 512] input: %s"
                  % (what, base, i, rows, t))
    w = T.get("weight")
    check(w is not None and role(w) == "constant" and w["shape"] == [512, 512]
          and w["init"] == {"kind": "normal", "seed": 1, "mean": 1.0, "std": 0.1},
          "%s: the weight is the tutorial's one constant: %s" % (what, w))
    for i in range(N):
        for base, dt, shape in (("y", "bf16", [rows, 512, 512]), ("invvar", "f32", [rows]),
                                ("grad_x", "bf16", [rows, 512, 512])):
            t = T.get("%s.%d" % (base, i))
            check(t is not None and t["dtype"] == dt and t["shape"] == shape
                  and role(t) == "output", "%s: %s.%d is an output %s%s: %s"
                  % (what, base, i, dt, shape, t))
        pg = T.get("part_grad.%d" % i)
        check(pg is not None and pg["dtype"] == "f32" and pg["shape"] == [4 // N, 512, 512]
              and role(pg) == "intermediate", "%s: part_grad.%d holds P / N = %d blocks: %s"
              % (what, i, 4 // N, pg))
    gw = T.get("grad_weight")
    check(gw is not None and role(gw) == "output" and gw["shape"] == [512, 512]
          and gw["dtype"] == "bf16", "%s: grad_weight is device 0's output: %s" % (what, gw))
    outputs = sorted(n for n, t in T.items() if role(t) == "output")
    want = sorted(["grad_weight"] + ["%s.%d" % (b, i) for b in ("y", "invvar", "grad_x")
                                     for i in range(N)])
    check(outputs == want, "%s: outputs %s, want %s" % (what, outputs, want))

    byname = {s["name"]: s for s in steps}
    check(len(byname) == len(steps), "%s: step names are unique" % what)
    for i, dev in enumerate(devices):
        f, b = byname.get("forward.%d" % i), byname.get("backward.%d" % i)
        check(f is not None and f["kernel"] == "rms_norm_fwd" and f["device"] == dev
              and f["inputs"] == ["x.%d" % i, "weight"]
              and f["outputs"] == ["y.%d" % i, "invvar.%d" % i]
              and f.get("attrs") == {"eps": 1e-05}, "%s: forward.%d: %s" % (what, i, f))
        check(b is not None and b["kernel"] == "rms_norm_bwd" and b["device"] == dev
              and b["inputs"] == ["grad_y.%d" % i, "invvar.%d" % i, "x.%d" % i, "weight"]
              and b["outputs"][0] == "grad_x.%d" % i and b["outputs"][2] == "part_grad.%d" % i
              and b.get("attrs") == dict({"eps": 1e-05, "part_grad_size": 4 // N},
                                         **({"unsharded_part_grad_size": 4}
                                            if reduce == "gather" else {})),
              "%s: backward.%d: %s" % (what, i, b))
    coll = [s for s in steps if "collective" in s]
    check(len(coll) == 1, "%s: one collective step, got %d" % (what, len(coll)))
    c = coll[0]
    check(c["devices"] == devices and "device" not in c and "kernel" not in c,
          "%s: the collective spans %s: %s" % (what, devices, c))
    gw_names = ["grad_weight"] + ["grad_weight.%d" % i for i in range(1, N)]
    if reduce == "gather":
        check(c["collective"] == "all_gather"
              and c["inputs"] == ["part_grad.%d" % i for i in range(N)]
              and c["outputs"] == ["part_grad.all.%d" % i for i in range(N)] and "attrs" not in c,
              "%s: all_gather of the part_grads in device order: %s" % (what, c))
        for i, dev in enumerate(devices):
            t = T.get("part_grad.all.%d" % i)
            check(t is not None and t["shape"] == [4, 512, 512] and t["dtype"] == "f32",
                  "%s: part_grad.all.%d has the one-device part_grad's shape: %s" % (what, i, t))
            s = byname.get("grad_weight_from_part_grad.%d" % i)
            check(s is not None and s["kernel"] == "rms_norm_grad_weight" and s["device"] == dev
                  and s["inputs"] == ["part_grad.all.%d" % i, "weight"]
                  and s["outputs"] == [gw_names[i]], "%s: grad_weight on %s: %s" % (what, dev, s))
    else:
        check(c["collective"] == "all_reduce" and c.get("attrs") == {"op": "sum"}
              and c["inputs"] == [byname["backward.%d" % i]["outputs"][1] for i in range(N)]
              and c["outputs"] == gw_names,
              "%s: all_reduce of each device's grad_weight: %s" % (what, c))
        check(not any(s.get("kernel") == "rms_norm_grad_weight" for s in steps),
              "%s: no grad_weight kernel" % what)
    # Dataflow as the validator will see it: each read tensor is an input, a constant or written
    # by an earlier step; each tensor written once; no step reads an output of a later one.
    written = set()
    for s in steps:
        for n in s["inputs"]:
            check(n in T, "%s: step %s reads undeclared %s" % (what, s["name"], n))
            check(n in T and (role(T[n]) in ("input", "constant") or n in written),
                  "%s: step %s reads %s before it is written" % (what, s["name"], n))
        for n in s["outputs"]:
            check(n not in written and role(T[n]) not in ("input", "constant"),
                  "%s: %s written twice or is read-only" % (what, n))
            written.add(n)
    for n in outputs:
        check(n in written, "%s: output %s is never written" % (what, n))


def validate_without_collectives(plan, label):
    """Until the runtime has collectives: drop the collective step and make its outputs plan
    inputs, so `baton validate` checks every other step's signature against its tensors."""
    if not BATON:
        return
    p = json.loads(json.dumps(plan))
    coll = [s for s in p["steps"] if "collective" in s]
    p["steps"] = [s for s in p["steps"] if "collective" not in s]
    stood_in = {n for s in coll for n in s["outputs"]}
    for t in p["tensors"]:
        if t["name"] in stood_in:
            t["role"] = "input"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(p, f)
    try:
        r = subprocess.run([BATON, "validate", f.name], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "%s: baton validate of the per-device steps: rc %d: %s"
              % (label, r.returncode, r.stderr.strip()))
    finally:
        os.unlink(f.name)


def bad(args, code, *words, label):
    rc, out, err = shard(*args)
    check(rc == code, "%s: exit %d, want %d (stderr: %s)" % (label, rc, code, err.strip()))
    check(out == "", "%s: nothing on stdout" % label)
    check(err.startswith("shard.py: ") and err.count("\n") == 1,
          "%s: one line on stderr: %r" % (label, err))
    for w in words:
        check(w in err, "%s: the message names %r: %s" % (label, w, err.strip()))


def main():
    for devices in (["cuda:0", "cuda:1"], ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]):
        for reduce in ("gather", "all_reduce"):
            args = ["--devices", ",".join(devices)] + \
                (["--reduce", reduce] if reduce != "gather" else []) + [TUTORIAL]
            rc, out, err = shard(*args)
            check(rc == 0 and err == "", "%s %s: rc %d: %s" % (devices, reduce, rc, err))
            if rc:
                continue
            plan = json.loads(out)
            check_plan(plan, devices, reduce)
            validate_without_collectives(plan, "%d devices, %s" % (len(devices), reduce))
            if len(devices) == 2 and reduce == "gather":
                with open(BUNDLED) as f:
                    check(f.read() == out, "examples/plans/rmsnorm_tutorial_2gpu.json is not what "
                          "`scripts/shard.py --devices cuda:0,cuda:1` writes: regenerate it")

    with tempfile.TemporaryDirectory() as tmp:
        def variant(name, edit):
            with open(TUTORIAL) as f:
                p = json.load(f)
            edit(p)
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                json.dump(p, f)
            return path

        def pg3(p):  # part_grad of 3 blocks over 4 rows
            for t in p["tensors"]:
                if t["name"] == "part_grad":
                    t["shape"] = [3, 512, 512]
        path = variant("p3.json", pg3)
        bad(["--devices", "cuda:0,cuda:1", path], 2, path, "not divisible by part_grad_size 3",
            "a divisor of 4", label="n1 not divisible by P")
        bad(["--devices", "cuda:0,cuda:1,cuda:2", TUTORIAL], 2, TUTORIAL,
            "not divisible by the 3 devices", "shard over 2 or 4 devices",
            label="P not divisible by N")

        # all_reduce keeps the one-device P blocks on each shard where its rows divide into them
        # (its backward's grid then fills its GPU); gather keeps the one-device blocks, P / N
        def rows_and_blocks(n1, P):
            def edit(p):
                for t in p["tensors"]:
                    if t["name"] in ("x", "grad_y", "y", "grad_x"):
                        t["shape"] = [n1, 512, 512]
                    elif t["name"] == "invvar":
                        t["shape"] = [n1]
                    elif t["name"] == "part_grad":
                        t["shape"] = [P, 512, 512]
            return edit
        for n1, P, want in ((8, 4, {"gather": 2, "all_reduce": 4}),
                            (6, 3, {"gather": None, "all_reduce": 3})):
            path = variant("rows%d_p%d.json" % (n1, P), rows_and_blocks(n1, P))
            for reduce, ps in want.items():
                rc, out, err = shard("--devices", "cuda:0,cuda:1", "--reduce", reduce, path)
                label = "n1 %d, P %d, %s" % (n1, P, reduce)
                if ps is None:
                    check(rc == 2 and "not divisible by the 2 devices" in err,
                          "%s: refused: rc %d: %s" % (label, rc, err.strip()))
                    continue
                check(rc == 0, "%s: rc %d: %s" % (label, rc, err.strip()))
                if rc:
                    continue
                q = json.loads(out)
                T = {t["name"]: t for t in q["tensors"]}
                b = [st for st in q["steps"] if st["name"] == "backward.0"][0]
                check(b["attrs"]["part_grad_size"] == ps and T["part_grad.0"]["shape"][0] == ps,
                      "%s: each shard holds %d part_grad blocks: %s, %s"
                      % (label, ps, b["attrs"], T["part_grad.0"]["shape"]))
                validate_without_collectives(q, label)

        def three_steps(p):
            p["steps"].append({"name": "extra", "kernel": "copy", "device": "cuda:0",
                               "inputs": ["y"], "outputs": ["grad_x"]})
        path = variant("steps.json", three_steps)
        bad(["--devices", "cuda:0,cuda:1", path], 2, path, "rms_norm_fwd step then an "
            "rms_norm_bwd step", label="not the tutorial pattern")
        rfc = os.path.join(ROOT, "examples", "plans", "rfc.json")
        bad(["--devices", "cuda:0,cuda:1", rfc], 2, rfc, "shards only", label="the RFC plan")

        def x_const(p):
            for t in p["tensors"]:
                if t["name"] == "x":
                    t["role"] = "constant"
                    t["init"] = {"kind": "fill", "value": 1}
        path = variant("xconst.json", x_const)
        bad(["--devices", "cuda:0,cuda:1", path], 2, path, "'x'", "\"role\": \"input\"",
            label="x not an input")
        garbage = os.path.join(tmp, "garbage.json")
        with open(garbage, "w") as f:
            f.write('{"format": "baton.plan",\n  "tensors": [,]}\n')
        bad(["--devices", "cuda:0,cuda:1", garbage], 2, garbage + ":2:", "not JSON",
            label="not JSON")
        missing = os.path.join(tmp, "none.json")
        bad(["--devices", "cuda:0,cuda:1", missing], 4, missing, label="a missing file")
    bad(["--devices", "cuda:0", TUTORIAL], 2, "at least two devices", label="one device")
    bad(["--devices", "cuda:0,gpu1", TUTORIAL], 2, "'gpu1'", "cuda:N", label="a bad device")
    bad(["--devices", "cuda:0,cuda:0", TUTORIAL], 2, "twice", label="a repeated device")

    if failures:
        print("%d check(s) failed" % len(failures), file=sys.stderr)
        return 1
    print("shard.py: all checks passed%s" % ("" if BATON else " (no baton binary: not validated)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
