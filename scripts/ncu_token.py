#!/usr/bin/env python3
"""ncu_token.py: per-kernel device time of the last decode token in an ncu CSV of `generate`
(gpu__time_duration.sum per kernel), grouped by kernel and launch shape, largest first. A token
starts at its embedding kernel."""
import collections
import csv
import re
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 14 and r[12] == "gpu__time_duration.sum"]
k = [(re.sub(r"\(.*", "", r[4])[:70], r[7], r[8], int(r[14].replace(",", ""))) for r in rows]
starts = [i for i, x in enumerate(k) if "embedding" in x[0]]
if not starts:
    sys.exit("no embedding kernel: not a generate run?")
tok = k[starts[-1]:]
print(f"last decode token: {len(tok)} kernels, {sum(x[3] for x in tok) / 1000:.1f} us of kernel time")
agg = collections.defaultdict(lambda: [0, 0])
for name, blk, grid, ns in tok:
    agg[(name, blk, grid)][0] += 1
    agg[(name, blk, grid)][1] += ns
for (name, blk, grid), (n, ns) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{ns / 1000:8.1f} us {n:4d}x {ns / n / 1000:7.2f} us  {name} blk{blk} grid{grid}")
