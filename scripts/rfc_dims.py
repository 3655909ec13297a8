#!/usr/bin/env python3
"""rfc_dims.py: writes the RFC plan with its row count as the dimension "rows" (bounds 1..1, so a
run binds what the static plan has): `baton bench` of the two in graph mode shows what dims cost
when the binding does not change (issue 40's 3 % bound). Constants stay where rfc.json has them.

    python3 scripts/rfc_dims.py examples/plans/rfc.json OUT.json"""
import json
import os
import sys

src, out = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8") as f:
    p = json.load(f)
p["dims"] = {"rows": {"min": 1, "max": 1}}
p["name"] = p.get("name", "rfc") + "-dims"
base = os.path.dirname(os.path.abspath(src))
for t in p["tensors"]:
    if t["shape"] and t["shape"][0] == 1 and t.get("role") != "constant":
        t["shape"] = ["rows"] + t["shape"][1:]
    init = t.get("init") or {}
    if "path" in init and not os.path.isabs(init["path"]):
        init["path"] = os.path.join(base, init["path"])
with open(out, "w", encoding="utf-8") as f:
    json.dump(p, f, indent=1)
