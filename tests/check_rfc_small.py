#!/usr/bin/env python3
"""check_rfc_small.py: tests/data/good/rfc-small.json must stay examples/plans/rfc.json 256 wide
(test_embed runs it on the CPU in place of rfc.json's 4096 × 4096 GEMMs). Regenerate with --write."""
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
big = open(os.path.join(root, "examples/plans/rfc.json"), encoding="utf-8").read()
want = big.replace("4096", "256").replace('"name": "executorch-rfc"', '"name": "rfc-small"', 1)
path = os.path.join(root, "tests/data/good/rfc-small.json")
if "--write" in sys.argv:
    open(path, "w", encoding="utf-8").write(want)
    sys.exit(0)
if open(path, encoding="utf-8").read() != want:
    print(f"{path} is not examples/plans/rfc.json at 256 wide: run {sys.argv[0]} --write")
    sys.exit(1)
print("rfc-small.json matches rfc.json")
