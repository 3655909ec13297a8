#!/usr/bin/env python3
"""shard.py: turns a one-device RMSNorm plan (an rms_norm_fwd step and an rms_norm_bwd step, as in
examples/plans/rmsnorm_tutorial.json) into its data-parallel plan over N devices: x and grad_y split
by rows, the weight replicated, and grad_weight from an all_gather of the part_grads (bitwise the
one-device grad_weight) or an all_reduce of each device's grad_weight. docs/shard.md explains.

    python3 scripts/shard.py --devices cuda:0,cuda:1 [--reduce gather|all_reduce] PLAN.json > OUT.json

Exit codes: 0 success, 2 a plan it cannot shard or bad usage, 4 a file that cannot be read.
Python 3 standard library only."""
import argparse
import json
import re
import sys

DEVICE_RE = re.compile(r"^(cpu|cuda:([0-9]|1[0-4]))$")
FLOAT_DTYPES = ("bf16", "f16", "f32", "f64")


class ShardError(Exception):
    """A plan this script cannot shard; the message names the file, the place and the fix."""


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        print("shard.py: %s: cannot read the plan: %s" % (path, e.strerror or e), file=sys.stderr)
        sys.exit(4)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ShardError("%s:%d:%d: not JSON: %s (validate it with `baton validate %s`)"
                         % (path, e.lineno, e.colno, e.msg, path))


def find_pattern(path, plan):
    """The tutorial pattern: exactly an rms_norm_fwd step and an rms_norm_bwd step on one device,
    the backward reading the forward's invvar, x and weight; returns the named parts."""
    if not isinstance(plan, dict) or plan.get("format") != "baton.plan":
        raise ShardError("%s: not a baton plan (no \"format\": \"baton.plan\")" % path)
    steps, tensors = plan.get("steps"), plan.get("tensors")
    if not isinstance(steps, list) or not isinstance(tensors, list):
        raise ShardError("%s: the plan needs \"tensors\" and \"steps\" arrays" % path)
    want = "an rms_norm_fwd step then an rms_norm_bwd step on one device (as in " \
           "examples/plans/rmsnorm_tutorial.json)"
    kinds = [s.get("kernel") if isinstance(s, dict) else None for s in steps]
    if kinds != ["rms_norm_fwd", "rms_norm_bwd"]:
        raise ShardError("%s: steps are %s, but shard.py shards only %s; other plans need their "
                         "data-parallel form written by hand (docs/shard.md)"
                         % (path, [k or "(not a kernel)" for k in kinds], want))
    fwd, bwd = steps
    byname = {}
    for t in tensors:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise ShardError("%s: a tensor without a name: %s" % (path, json.dumps(t)[:80]))
        byname[t["name"]] = t
    for s in steps:
        if s.get("opaque") is not None:
            raise ShardError("%s: step '%s' has an opaque descriptor, which fixes n1 and "
                             "part_grad_size: remove \"opaque\" so the sharded steps get their "
                             "own" % (path, s.get("name")))
        for n in s.get("inputs", []) + s.get("outputs", []):
            if n not in byname:
                raise ShardError("%s: step '%s' names tensor '%s', which is not declared "
                                 "(run `baton validate %s`)" % (path, s.get("name"), n, path))
    if fwd.get("device") != bwd.get("device"):
        raise ShardError("%s: the forward runs on %s and the backward on %s: %s"
                         % (path, fwd.get("device"), bwd.get("device"), want))
    fin, fout = fwd.get("inputs", []), fwd.get("outputs", [])
    bin_, bout = bwd.get("inputs", []), bwd.get("outputs", [])
    if len(fin) != 2 or len(fout) != 2 or len(bin_) != 4 or len(bout) != 3:
        raise ShardError("%s: rms_norm_fwd takes x, weight -> y, invvar and rms_norm_bwd grad_y, "
                         "invvar, x, weight -> grad_x, grad_weight, part_grad; the steps list "
                         "other counts (run `baton validate %s`)" % (path, path))
    x, w = fin
    y, iv = fout
    gy, iv2, x2, w2 = bin_
    gx, gw, pg = bout
    if (iv2, x2, w2) != (iv, x, w):
        raise ShardError("%s: step '%s' reads invvar, x, weight = %s, %s, %s, but the forward "
                         "uses %s, %s, %s: the backward must read the forward's (%s)"
                         % (path, bwd.get("name"), iv2, x2, w2, iv, x, w, want))
    used = {x, w, y, iv, gy, gx, gw, pg}
    extra = sorted(set(byname) - used)
    if extra:
        raise ShardError("%s: tensors %s are used by neither step: remove them, shard.py copies "
                         "only the pattern's tensors" % (path, ", ".join(extra)))
    roles = {n: byname[n].get("role", "intermediate") for n in used}
    for n in (x, gy):
        if roles[n] != "input":
            raise ShardError("%s: tensor '%s' has role '%s', but the rows to split must be plan "
                             "inputs: make it \"role\": \"input\"" % (path, n, roles[n]))
    if roles[w] not in ("constant", "input"):
        raise ShardError("%s: the weight '%s' has role '%s': it must be a constant or an input, "
                         "read (replicated) by every device" % (path, w, roles[w]))
    return {"x": x, "w": w, "y": y, "iv": iv, "gy": gy, "gx": gx, "gw": gw, "pg": pg,
            "fwd": fwd, "bwd": bwd, "t": byname, "roles": roles}


def shard(path, plan, devices, reduce):
    p = find_pattern(path, plan)
    t, N = p["t"], len(devices)
    xt, wt, pgt = t[p["x"]], t[p["w"]], t[p["pg"]]
    xs, ws, pgs = xt["shape"], wt["shape"], pgt["shape"]
    if not (isinstance(xs, list) and isinstance(ws, list) and isinstance(pgs, list)) or \
            len(ws) < 1 or len(ws) > len(xs) or xs[len(xs) - len(ws):] != ws:
        raise ShardError("%s: x is %s and the weight %s: the weight's shape must be x's last dims "
                         "(run `baton validate %s`)" % (path, xs, ws, path))
    lead = xs[:len(xs) - len(ws)]
    if not lead:
        raise ShardError("%s: x %s is one row (its shape is the weight's): there are no rows to "
                         "split; give x a leading batch dim" % (path, xs))
    n1, n2 = numel(lead), numel(ws)
    if not pgs or pgs[0] < 1:
        raise ShardError("%s: part_grad '%s' has shape %s: declare it [P] + the weight's shape"
                         % (path, p["pg"], pgs))
    P = pgs[0]
    attrs = p["bwd"].get("attrs") or {}
    if "part_grad_size" in attrs and attrs["part_grad_size"] != P:
        raise ShardError("%s: step '%s' has part_grad_size %s but part_grad '%s' is declared with "
                         "%d rows (run `baton validate %s`)"
                         % (path, p["bwd"].get("name"), attrs["part_grad_size"], p["pg"], P, path))
    if n1 % P:
        raise ShardError("%s: x has n1 = %d rows, not divisible by part_grad_size %d (part_grad "
                         "'%s' %s): the one-device blocks of ceil(n1 / P) rows would not line up "
                         "with the shards'; declare part_grad with a divisor of %d rows"
                         % (path, n1, P, p["pg"], pgs, n1))
    # all_reduce: each shard keeps the one-device call's P blocks (of n1 / (N * P) rows) where
    # its rows divide into them, so that its backward's grid fills its GPU as the one-device
    # call's does (half the blocks ran the backward of 65536 x 4096 bf16 rows in 499 us against
    # 410 for half of one GPU's 131072, on an H200); gather must keep the one-device blocks
    # (P / N each), whose bits it reproduces.
    keep_p = reduce == "all_reduce" and xs[0] % N == 0 and (n1 // N) % P == 0
    if P % N and not keep_p:
        sizes = [q for q in range(N, n1 + 1, N) if n1 % q == 0][:6]
        counts = [d for d in range(2, P + 1) if P % d == 0 and xs[0] % d == 0]
        fixes = []
        if sizes:
            fixes.append("declare part_grad with %s rows (a multiple of %d dividing n1 = %d)"
                         % (" or ".join(map(str, sizes)), N, n1))
        if counts:
            fixes.append("shard over %s devices" % " or ".join(map(str, counts)))
        raise ShardError("%s: part_grad_size %d (part_grad '%s' %s) is not divisible by the %d "
                         "devices, so they cannot each own whole blocks: %s"
                         % (path, P, p["pg"], pgs, N,
                            "; or ".join(fixes) or "this plan cannot be split over %d devices" % N))
    if xs[0] % N:
        raise ShardError("%s: x %s splits by its first dim, %d, which the %d devices do not "
                         "divide: reshape x (and grad_y, y, grad_x) so that its first dim is a "
                         "multiple of %d" % (path, xs, xs[0], N, N))
    Ps = P if keep_p else P // N

    def rows_of(shape):  # a row-sharded tensor's shape: the first dim divided
        return [shape[0] // N] + list(shape[1:])

    tensors, steps = [], []

    def add(name, like, shape, role):
        d = {"name": name, "dtype": like["dtype"], "shape": shape}
        if role != "intermediate":
            d["role"] = role
        tensors.append(d)

    def sh(name, i):
        return "%s.%d" % (name, i)

    # Inputs first, then the replicated weight, then per-device tensors: the order a reader wants.
    for n in (p["x"], p["gy"]):
        for i in range(N):
            add(sh(n, i), t[n], rows_of(t[n]["shape"]), "input")
    tensors.append(dict(wt))
    per_device = [(p["y"], "y"), (p["iv"], "invvar"), (p["gx"], "grad_x")]
    for i in range(N):
        for n, _ in per_device:
            add(sh(n, i), t[n], rows_of(t[n]["shape"]), p["roles"][n])
        add("%s.%d.partial" % (p["gw"], i), t[p["gw"]], list(ws), "intermediate")
        add(sh(p["pg"], i), pgt, [Ps] + list(pgs[1:]), "intermediate")
    gw_role = p["roles"][p["gw"]]

    def gw_name(i):  # device 0's grad_weight keeps the plan's name; the replicas get .i
        return p["gw"] if i == 0 else sh(p["gw"], i)

    if reduce == "gather":
        for i in range(N):
            add("%s.all.%d" % (p["pg"], i), pgt, list(pgs), "intermediate")
    for i in range(N):
        add(gw_name(i), t[p["gw"]], list(ws), gw_role if i == 0 else "intermediate")

    fa = {k: v for k, v in (p["fwd"].get("attrs") or {}).items()}
    ba = {k: v for k, v in attrs.items()}
    ba["part_grad_size"] = Ps
    if reduce == "gather":
        # CUDA fits a block's row split to the number of blocks: tell each shard the one-device
        # call's, so that it adds each block's rows as that call does (docs/shard.md).
        ba["unsharded_part_grad_size"] = P
    fname, bname = p["fwd"].get("name", "forward"), p["bwd"].get("name", "backward")
    # Device by device, forward then backward: one segment (one graph) per GPU, issued one after
    # the other by the host and run at once by the GPUs, which do not wait for each other.
    for i, dev in enumerate(devices):
        s = {"name": sh(fname, i), "kernel": "rms_norm_fwd", "device": dev,
             "inputs": [sh(p["x"], i), p["w"]], "outputs": [sh(p["y"], i), sh(p["iv"], i)]}
        if fa:
            s["attrs"] = fa
        steps.append(s)
        steps.append({"name": sh(bname, i), "kernel": "rms_norm_bwd", "device": dev,
                      "inputs": [sh(p["gy"], i), sh(p["iv"], i), sh(p["x"], i), p["w"]],
                      "outputs": [sh(p["gx"], i), "%s.%d.partial" % (p["gw"], i),
                                  sh(p["pg"], i)],
                      "attrs": ba})
    if reduce == "gather":
        steps.append({"name": "gather_%s" % p["pg"], "collective": "all_gather",
                      "devices": list(devices), "inputs": [sh(p["pg"], i) for i in range(N)],
                      "outputs": ["%s.all.%d" % (p["pg"], i) for i in range(N)]})
        for i, dev in enumerate(devices):
            steps.append({"name": sh("%s_from_%s" % (p["gw"], p["pg"]), i),
                          "kernel": "rms_norm_grad_weight", "device": dev,
                          "inputs": ["%s.all.%d" % (p["pg"], i), p["w"]], "outputs": [gw_name(i)]})
    else:
        steps.append({"name": "sum_%s" % p["gw"], "collective": "all_reduce",
                      "devices": list(devices),
                      "inputs": ["%s.%d.partial" % (p["gw"], i) for i in range(N)],
                      "outputs": [gw_name(i) for i in range(N)], "attrs": {"op": "sum"}})
    name = plan.get("name", "plan")
    suffix = "-%dgpu" % N if all(d.startswith("cuda:") for d in devices) else "-dp%d" % N
    return {"format": "baton.plan", "version": plan.get("version", 1),
            "name": (name + suffix)[:255], "tensors": tensors, "steps": steps}


def dump(plan, out):
    # one tensor or step per line, as scripts/gen_plans.py writes the bundled plans
    out.write('{\n  "format": "baton.plan", "version": %s, "name": %s,\n'
              % (json.dumps(plan["version"]), json.dumps(plan["name"])))
    for key in ("tensors", "steps"):
        out.write('  "%s": [\n' % key)
        out.write(",\n".join("    " + json.dumps(x) for x in plan[key]))
        out.write("\n  ]%s\n" % ("," if key == "tensors" else ""))
    out.write("}\n")


def parse_devices(text):
    devices = [d.strip() for d in text.split(",")]
    for d in devices:
        if not DEVICE_RE.match(d):
            raise ShardError("--devices: '%s' is not a device: give cpu or cuda:N (N from 0 to 14), "
                             "comma-separated, e.g. --devices cuda:0,cuda:1" % d)
    if len(devices) < 2:
        raise ShardError("--devices: give at least two devices, e.g. --devices cuda:0,cuda:1")
    if len(set(devices)) != len(devices):
        raise ShardError("--devices: %s names a device twice: each shard needs its own device"
                         % text)
    return devices


def main(argv):
    ap = argparse.ArgumentParser(
        prog="shard.py",
        description="Write the data-parallel form of a one-device RMSNorm plan (rms_norm_fwd then "
                    "rms_norm_bwd) to stdout. docs/shard.md explains the result.")
    ap.add_argument("--devices", required=True,
                    help="comma-separated devices, one shard each, e.g. cuda:0,cuda:1")
    ap.add_argument("--reduce", choices=("gather", "all_reduce"), default="gather",
                    help="gather (default): all_gather the part_grads and sum them on every "
                         "device, the one-device grad_weight's bits; all_reduce: sum each "
                         "device's grad_weight (less traffic, not bitwise)")
    ap.add_argument("plan", help="the one-device plan, e.g. examples/plans/rmsnorm_tutorial.json")
    args = ap.parse_args(argv)
    try:
        devices = parse_devices(args.devices)
        out = shard(args.plan, load(args.plan), devices, args.reduce)
    except ShardError as e:
        print("shard.py: %s" % e, file=sys.stderr)
        return 2
    dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
