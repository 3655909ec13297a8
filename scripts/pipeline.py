#!/usr/bin/env python3
"""pipeline.py: turns a plan whose steps run in order (a stack of layers, as
examples/plans/rfc.json) into its pipeline-parallel form: the steps split, in order, into one
stage per device, each stage holding about the same number of steps, so that a run's first
stage works on one GPU while the previous run's last stage works on the next (runs in flight on
a baton_uv pool, `baton bench --inflight=N`). With --gpu-steps, CPU steps move to the GPU of
their stage too (their targets need a CUDA implementation), so the stages meet at a GPU-to-GPU
boundary, which costs no host wait. The steps keep their order and arguments: the same
computation, and with one device (--devices cuda:0) the one-GPU plan to compare with.

    python3 scripts/pipeline.py --devices cuda:0,cuda:1 [--gpu-steps] PLAN.json > OUT.json

Exit codes: 0 success, 2 bad usage or a plan it cannot split, 4 a file that cannot be read.
Python 3 standard library only."""
import argparse
import json
import re
import sys

DEVICE_RE = re.compile(r"^cuda:([0-9]|1[0-4])$")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", required=True,
                    help="comma-separated GPUs, one per stage, e.g. cuda:0,cuda:1")
    ap.add_argument("--gpu-steps", action="store_true",
                    help="move CPU steps to the GPU of their stage as well")
    ap.add_argument("plan")
    a = ap.parse_args()
    devices = a.devices.split(",")
    bad = [d for d in devices if not DEVICE_RE.match(d)]
    if bad or len(set(devices)) != len(devices):
        print("pipeline.py: --devices takes distinct GPUs cuda:0 .. cuda:14, not %s" % a.devices,
              file=sys.stderr)
        return 2
    try:
        with open(a.plan, encoding="utf-8") as f:
            plan = json.load(f)
    except OSError as e:
        print("pipeline.py: %s: cannot read the plan: %s" % (a.plan, e.strerror or e),
              file=sys.stderr)
        return 4
    except json.JSONDecodeError as e:
        print("pipeline.py: %s:%d:%d: not JSON: %s" % (a.plan, e.lineno, e.colno, e.msg),
              file=sys.stderr)
        return 2
    steps = plan.get("steps") if isinstance(plan, dict) else None
    if not isinstance(steps, list) or not steps:
        print("pipeline.py: %s: no \"steps\" to split" % a.plan, file=sys.stderr)
        return 2
    if any(not isinstance(s, dict) or "collective" in s for s in steps):
        print("pipeline.py: %s: a collective step cannot go to one stage; split plans without "
              "collectives" % a.plan, file=sys.stderr)
        return 2
    movable = [i for i, s in enumerate(steps)
               if str(s.get("device", "cpu")).startswith("cuda:") or a.gpu_steps]
    if len(movable) < len(devices):
        print("pipeline.py: %s: %d GPU step(s) for %d stages" % (a.plan, len(movable),
                                                                  len(devices)), file=sys.stderr)
        return 2
    # stage k holds steps [cut[k], cut[k + 1]): about len(movable) / n GPU steps each
    n = len(devices)
    cut = [0] + [movable[(k * len(movable)) // n] for k in range(1, n)] + [len(steps)]
    for k in range(n):
        for s in steps[cut[k]:cut[k + 1]]:
            if str(s.get("device", "cpu")).startswith("cuda:") or a.gpu_steps:
                s["device"] = devices[k]
    plan["name"] = "%s-pipeline%d" % (plan.get("name", "plan"), n)
    json.dump(plan, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
