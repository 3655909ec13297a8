#!/usr/bin/env python3
"""check_trace.py: runs a plan with `baton run --trace` on the test device in every sync mode and
checks the trace: the Chrome trace event format Perfetto reads (traceEvents; ph, name, pid, tid;
"X" spans with ts and dur >= 0; process and thread names), args on every span (run, mode; step and
target where there is one), a device track with one span per GPU step per run, as many host-wait
spans per run as the run's counters report, and the order the sync modes promise: a device span
starts after the host issued it, and a host wait ends after every device span that began before it.

usage: check_trace.py BATON PLAN.json"""
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

RUNS = 3
EPS_US = 1.0  # two clocks read on two threads: allow a microsecond


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check_mode(baton, plan_path, mode, n_gpu_steps):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        out = subprocess.run(
            [baton, "run", "--gpu=sim", f"--mode={mode}", f"--iters={RUNS}", f"--trace={path}",
             plan_path], capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"{mode}: baton run failed: {out.stderr}")
        m = re.search(r"([0-9.]+) host waits", out.stdout + out.stderr)
        if not m:
            fail(f"{mode}: no 'host waits' in the run's summary:\n{out.stdout}")
        waits_per_run = float(m.group(1))
        with open(path) as f:
            trace = json.load(f)
    events = trace.get("traceEvents")
    if not isinstance(events, list) or not events:
        fail(f"{mode}: no traceEvents array")
    names = {}
    spans = []
    for e in events:
        for k in ("ph", "name", "pid", "tid"):
            if k not in e:
                fail(f"{mode}: event without '{k}': {e}")
        if e["ph"] == "M":
            if e["name"] in ("process_name", "thread_name"):
                names[(e["name"], e["pid"], e["tid"] if e["name"] == "thread_name" else 0)] = \
                    e["args"]["name"]
            continue
        if e["ph"] != "X":
            fail(f"{mode}: unexpected phase {e['ph']}")
        if not isinstance(e.get("ts"), (int, float)) or not isinstance(e.get("dur"), (int, float)) \
                or e["dur"] < 0:
            fail(f"{mode}: bad ts/dur: {e}")
        args = e.get("args")
        if not isinstance(args, dict) or args.get("mode") != mode or "run" not in args:
            fail(f"{mode}: span without args run/mode: {e}")
        spans.append(e)
    if ("process_name", 1, 0) not in names or ("process_name", 2, 0) not in names:
        fail(f"{mode}: process names missing: {sorted(names)}")
    for e in spans:
        if ("thread_name", e["pid"], e["tid"]) not in names:
            fail(f"{mode}: span on a lane without a thread name: {e}")
    host = [e for e in spans if e["pid"] == 1]
    dev = [e for e in spans if e["pid"] == 2]
    runs = sorted({e["args"]["run"] for e in host if e["cat"] == "run"})
    if runs != list(range(RUNS)):
        fail(f"{mode}: run markers {runs}, wanted {list(range(RUNS))}")
    kernels = collections.Counter(e["args"]["run"] for e in dev if e["cat"] == "device kernel")
    for r in runs:
        if kernels[r] != n_gpu_steps:
            fail(f"{mode}: run {r}: {kernels[r]} device kernel spans, wanted {n_gpu_steps}")
    for e in dev:
        if e["cat"] == "device kernel" and ("step" not in e["args"] or "target" not in e["args"]):
            fail(f"{mode}: device kernel span without step/target: {e}")
    waits = collections.Counter(e["args"]["run"] for e in host if e["cat"] == "wait")
    for r in runs:
        if waits[r] != waits_per_run:
            fail(f"{mode}: run {r}: {waits[r]} host-wait spans, the counters say {waits_per_run}")
    # a device span starts after the host issued it
    issued = {}
    for e in host:
        if e["cat"] in ("step", "graph") and "step" in e["args"]:
            issued.setdefault((e["args"]["run"], e["args"]["step"], e["cat"]), e["ts"])
    for e in dev:
        want = "graph" if e["cat"] == "device graph" else "step"
        key = (e["args"]["run"], e["args"].get("step"), want)
        if key in issued and e["ts"] + EPS_US < issued[key]:
            fail(f"{mode}: device span starts before the host issued it: {e}")
    # a host wait ends after every device span that began before the wait began, except a graph
    # queued ahead of the CPU segment (graph mode): it waits at its gate, which the host opens
    # after the wait, so it may start before the wait and end after it
    gates = [g["ts"] for g in host if g["cat"] == "gate"]
    for w in (e for e in host if e["cat"] == "wait"):
        w_end = w["ts"] + w["dur"]
        for e in dev:
            e_end = e["ts"] + e["dur"]
            gated = any(w_end - EPS_US <= g <= e_end + EPS_US for g in gates)
            if e["ts"] < w["ts"] and e_end > w_end + EPS_US and not gated:
                fail(f"{mode}: the wait {w['name']} at {w['ts']} ended before device span "
                     f"{e['name']} ({e['ts']}+{e['dur']}) that it should have waited for")
    print(f"{mode}: {len(spans)} spans, {len(dev)} on the device, "
          f"{waits_per_run:g} waits per run: ok")


def main():
    baton, plan_path = sys.argv[1], sys.argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    n_gpu = sum(1 for s in plan["steps"] if s["device"].startswith("cuda"))
    for mode in ("strict", "boundary", "graph"):
        check_mode(baton, plan_path, mode, n_gpu)


if __name__ == "__main__":
    main()
