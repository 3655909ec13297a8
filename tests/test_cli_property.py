#!/usr/bin/env python3
"""test_cli_property.py BATON: random small plans (valid and invalid) and random --input/--output
bindings (good and bad .npy files, missing directories, wrong shapes and dtypes, unknown names,
duplicates), each run through `baton run`. Every outcome must be exit 0 with every requested output
written correctly, or exit 1, 2, 3 or 4 with one line on stderr and no output file written: never a
signal, a hang or a partial output. Where a case holds exactly one fault, the exit code must be the
one that fault calls for.

The seed is printed; BATON_TEST_SEED=N replays a run. python3 only (the .npy files are written by
hand). Runs for about BATON_TEST_SECONDS (default 40) seconds."""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

EXIT_PLAN, EXIT_USAGE, EXIT_RUN, EXIT_IO = 1, 2, 3, 4
DTYPES = {"f32": ("<f4", "f"), "f64": ("<f8", "d")}


def npy_bytes(dtype, shape, values, descr=None):
    d = descr or DTYPES[dtype][0]
    shp = "(%d,)" % shape[0] if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (d, shp)
    pad = 64 - (10 + len(header) + 1) % 64
    header += " " * (pad % 64) + "\n"
    fmt = "<%d%s" % (len(values), DTYPES[dtype][1])
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + \
        struct.pack(fmt, *values)


def read_npy(path):
    """(descr, shape, payload) of a version 1 .npy written by baton, or None."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:6] != b"\x93NUMPY":
        return None
    n = struct.unpack("<H", b[8:10])[0]
    hdr = b[10:10 + n].decode()
    descr = hdr.split("'descr': '")[1].split("'")[0]
    shape_txt = hdr.split("'shape': (")[1].split(")")[0]
    shape = [int(s) for s in shape_txt.replace(" ", "").split(",") if s]
    return descr, shape, b[10 + n:]


def rnd32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


class Case:
    """One plan, its bindings, the faults injected and what a correct run must produce."""

    def __init__(self, rng, root):
        self.rng, self.root = rng, root
        self.faults = []  # (name, expected exit code)
        self.args = ["run", "-q"]
        self.outputs = {}  # path -> (dtype, shape, expected values or None)
        self.make_plan()
        self.make_bindings()

    def fault(self, name, code):
        self.faults.append((name, code))

    def make_plan(self):
        rng = self.rng
        self.dtype = rng.choice(list(DTYPES))
        self.shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]
        self.numel = 1
        for s in self.shape:
            self.numel *= s
        self.n_inputs = rng.randint(1, 2)
        self.inputs = ["x%d" % i for i in range(self.n_inputs)]
        device = rng.choice(["cpu", "cpu", "cuda:0"])
        tensors = [{"name": x, "dtype": self.dtype, "shape": self.shape, "role": "input"}
                   for x in self.inputs]
        steps = []
        # y0 = a chain over x0 (and x1); y1 = x0 + c, when there are two outputs
        self.ops = []  # ("add_scalar", v) | ("copy",) | ("add_x1",)
        cur = "x0"
        n = rng.randint(1, 4)
        for k in range(n):
            out = "y0" if k == n - 1 else "t%d" % k
            op = rng.choice(["add_scalar", "copy"] + (["add"] if self.n_inputs > 1 else []))
            step = {"name": "s%d" % k, "kernel": op, "device": rng.choice([device, "cpu"]),
                    "inputs": [cur], "outputs": [out]}
            if op == "add_scalar":
                v = rng.choice([0.5, -1.25, 3.0, 0.0])
                step["attrs"] = {"value": v}
                self.ops.append(("add_scalar", v))
            elif op == "add":
                step["inputs"] = [cur, "x1"]
                self.ops.append(("add_x1",))
            else:
                self.ops.append(("copy",))
            if out != "y0":
                tensors.append({"name": out, "dtype": self.dtype, "shape": self.shape})
            steps.append(step)
            cur = out
        tensors.append({"name": "y0", "dtype": self.dtype, "shape": self.shape, "role": "output"})
        self.plan_outputs = ["y0"]
        if rng.random() < 0.4:
            tensors.append({"name": "y1", "dtype": self.dtype, "shape": self.shape,
                            "role": "output"})
            steps.append({"name": "extra", "kernel": "add_scalar", "device": "cpu",
                          "inputs": ["x0"], "outputs": ["y1"], "attrs": {"value": 2.0}})
            self.plan_outputs.append("y1")
        plan = {"format": "baton.plan", "version": 1, "name": "prop", "tensors": tensors,
                "steps": steps}
        text = json.dumps(plan, indent=1)
        if rng.random() < 0.2:  # an invalid plan
            kind = rng.choice(["json", "kernel", "shape", "unwritten", "dtype", "cuda9"])
            if kind == "json":
                text = text[:rng.randint(1, len(text) - 2)]
            elif kind == "kernel":
                steps[0]["kernel"] = "no_such_kernel"
            elif kind == "shape":
                tensors[-1]["shape"] = self.shape + [2]
            elif kind == "unwritten":
                tensors.append({"name": "ghost", "dtype": self.dtype, "shape": self.shape})
                steps[0]["inputs"] = ["ghost"]
            elif kind == "dtype":
                tensors[0]["dtype"] = "f33"
            if kind == "cuda9":
                # valid, but the run needs a device that no machine here has: exit 3
                for s in steps:
                    s["device"] = "cuda:9"
                self.args += ["--gpu=cuda"]
                self.fault("plan needs cuda:9", EXIT_RUN)
            else:
                self.fault("invalid plan (%s)" % kind, EXIT_PLAN)
            if kind != "json":
                text = json.dumps(plan, indent=1)
        elif rng.random() < 0.5:
            self.args.append(rng.choice(["--gpu=cpu", "--gpu=sim"]))
        else:
            self.args.append("--gpu=cpu")
        self.args.append(rng.choice(["--mode=strict", "--mode=boundary", "--mode=graph"]))
        self.plan_path = os.path.join(self.root, "plan.json")
        with open(self.plan_path, "w") as f:
            f.write(text)

    def make_bindings(self):
        rng, root = self.rng, self.root
        self.in_values = {}
        self.indir = os.path.join(root, "in")
        self.outdir = os.path.join(root, "out")
        os.makedirs(self.indir)
        os.makedirs(self.outdir)
        for x in self.inputs:
            if rng.random() < 0.15:
                continue  # not given: seeded values
            vals = [float(rng.randint(-8, 8)) / 4 for _ in range(self.numel)]
            path = os.path.join(self.indir, x + ".npy")
            kind = "good" if rng.random() < 0.75 else rng.choice(
                ["missing", "dir", "magic", "truncated", "shape", "dtype"])
            if kind in ("good", "truncated", "magic"):
                b = npy_bytes(self.dtype, self.shape, vals)
                if kind == "truncated":
                    b = b[:rng.randint(0, len(b) - 1)]
                    self.fault("truncated input", EXIT_IO)
                elif kind == "magic":
                    b = b"\x93NUMPZ" + b[6:]
                    self.fault("bad magic", EXIT_IO)
                with open(path, "wb") as f:
                    f.write(b)
            elif kind == "missing":
                self.fault("missing input file", EXIT_IO)
            elif kind == "dir":
                os.makedirs(path)
                self.fault("input is a directory", EXIT_IO)
            elif kind == "shape":
                # the same element count in another shape where possible: still wrong
                shape = [self.numel] if len(self.shape) > 1 else [1, self.numel]
                with open(path, "wb") as f:
                    f.write(npy_bytes(self.dtype, shape, vals))
                self.fault("input of the wrong shape", EXIT_USAGE)
            elif kind == "dtype":
                other = "f64" if self.dtype == "f32" else "f32"
                with open(path, "wb") as f:
                    f.write(npy_bytes(other, self.shape, vals))
                self.fault("input of the wrong dtype", EXIT_USAGE)
            if kind == "good":
                self.in_values[x] = [rnd32(v) for v in vals] if self.dtype == "f32" else vals
            self.args += ["--input", "%s=%s" % (x, path)]
        r = rng.random()
        if r < 0.05:
            self.args += ["--input", "nope=%s" % os.path.join(self.indir, "x0.npy")]
            self.fault("unknown input name", EXIT_USAGE)
        elif r < 0.1:
            self.args += ["--input", "y0=%s" % os.path.join(self.indir, "x0.npy")]
            self.fault("an output given as --input", EXIT_USAGE)
        elif r < 0.15:
            self.args += ["--input", "x0=a.npy", "--input", "x0=b.npy"]
            self.fault("--input twice", EXIT_USAGE)
        for y in self.plan_outputs:
            if rng.random() < 0.2:
                continue
            path = os.path.join(self.outdir, y + ".npy")
            kind = "good" if rng.random() < 0.8 else rng.choice(
                ["missing_dir", "is_dir", "unknown", "input_name", "dup"])
            if kind == "good":
                self.outputs[path] = y
                self.args += ["--output", "%s=%s" % (y, path)]
            elif kind == "missing_dir":
                self.args += ["--output", "%s=%s" % (y, os.path.join(root, "nodir", "y.npy"))]
                self.fault("output in a missing directory", EXIT_IO)
            elif kind == "is_dir":
                d = os.path.join(root, "adir")
                os.makedirs(d, exist_ok=True)
                self.args += ["--output", "%s=%s" % (y, d)]
                self.fault("output is a directory", EXIT_IO)
            elif kind == "unknown":
                self.args += ["--output", "nope=%s" % path]
                self.fault("unknown output name", EXIT_USAGE)
            elif kind == "input_name":
                self.args += ["--output", "x0=%s" % path]
                self.fault("an input given as --output", EXIT_USAGE)
            else:
                self.args += ["--output", "%s=%s" % (y, path), "--output",
                              "%s=%s" % (y, path + "2")]
                self.fault("--output twice", EXIT_USAGE)
        self.args.append(self.plan_path)

    def expected(self, y):
        """The values output y must hold, or None when an input was not given (seeded)."""
        if any(x not in self.in_values for x in self.inputs):
            return None
        f32 = self.dtype == "f32"
        r = rnd32 if f32 else (lambda v: v)
        x0 = self.in_values["x0"]
        if y == "y1":
            return [r(v + 2.0) for v in x0]
        cur = list(x0)
        for op in self.ops:
            if op[0] == "add_scalar":
                cur = [r(v + op[1]) for v in cur]
            elif op[0] == "add_x1":
                cur = [r(a + b) for a, b in zip(cur, self.in_values["x1"])]
        return cur


def files_under(d):
    out = []
    for base, dirs, files in os.walk(d):
        out += [os.path.join(base, f) for f in files]
    return out


def main():
    baton = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/baton"
    seed = int(os.environ.get("BATON_TEST_SEED", random.SystemRandom().randrange(1 << 31)))
    budget = float(os.environ.get("BATON_TEST_SECONDS", "40"))
    print("test_cli_property: seed %d (replay with BATON_TEST_SEED=%d)" % (seed, seed), flush=True)
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="baton-prop-")
    failures, cases, by_code = [], 0, {}
    t0 = time.time()
    try:
        while time.time() - t0 < budget and len(failures) < 5:
            root = os.path.join(tmp, "c%d" % cases)
            os.makedirs(root)
            case = Case(rng, root)
            cases += 1
            cmd = [baton] + case.args
            why = []
            try:
                p = subprocess.run(cmd, capture_output=True, timeout=30, cwd=root)
            except subprocess.TimeoutExpired:
                failures.append((case, ["hung (killed after 30 s)"], cmd))
                continue
            code, err = p.returncode, p.stderr.decode(errors="replace")
            by_code[code] = by_code.get(code, 0) + 1
            if code < 0:
                why.append("killed by signal %d" % -code)
            elif code == 0:
                if case.faults:
                    why.append("exit 0 despite: %s" % ", ".join(f for f, _ in case.faults))
                if err.strip():
                    why.append("exit 0 with stderr under -q: %r" % err[:300])
                for path, y in case.outputs.items():
                    if not os.path.isfile(path):
                        why.append("output %s not written" % y)
                        continue
                    got = read_npy(path)
                    want_descr = DTYPES[case.dtype][0]
                    if not got or got[0] != want_descr or got[1] != case.shape:
                        why.append("output %s: header %r, want %s %r" % (y, got and got[:2],
                                                                         want_descr, case.shape))
                        continue
                    if len(got[2]) != case.numel * struct.calcsize(DTYPES[case.dtype][1]):
                        why.append("output %s: %d data bytes" % (y, len(got[2])))
                        continue
                    vals = list(struct.unpack("<%d%s" % (case.numel, DTYPES[case.dtype][1]),
                                              got[2]))
                    want = case.expected(y)
                    if want is not None and vals != want:
                        why.append("output %s = %r, want %r" % (y, vals[:6], want[:6]))
                extra = set(files_under(case.outdir)) - set(case.outputs)
                if extra:
                    why.append("stray files: %s" % sorted(extra))
            elif code in (EXIT_PLAN, EXIT_USAGE, EXIT_RUN, EXIT_IO):
                lines = err.rstrip("\n").split("\n")
                if len(lines) != 1 or not lines[0].strip():
                    why.append("stderr is not one line: %r" % err[:400])
                if "\x1b" in err:
                    why.append("raw escape byte in stderr")
                written = files_under(case.outdir) + files_under(os.path.join(root, "adir")) \
                    + files_under(os.path.join(root, "nodir"))
                if written:
                    why.append("exit %d but wrote %s" % (code, sorted(written)))
                if len(case.faults) == 1 and code != case.faults[0][1]:
                    why.append("exit %d for '%s', want %d" % (code, case.faults[0][0],
                                                              case.faults[0][1]))
                if not case.faults:
                    why.append("exit %d with no fault injected: %r" % (code, err[:300]))
            else:
                why.append("exit %d is not one of 0, 1, 2, 3, 4" % code)
            if why:
                failures.append((case, why, cmd))
            else:
                shutil.rmtree(root)
    finally:
        for case, why, cmd in failures:
            print("FAIL: %s\n  command: %s\n  plan kept in %s" % ("; ".join(why), " ".join(cmd),
                                                                  case.root))
        if not failures:
            shutil.rmtree(tmp)
    print("test_cli_property: %d cases in %.1f s, exit codes %s; %d failed (seed %d)" %
          (cases, time.time() - t0, dict(sorted(by_code.items())), len(failures), seed))
    return 1 if failures or cases < 20 else 0


if __name__ == "__main__":
    sys.exit(main())
