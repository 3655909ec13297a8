#!/usr/bin/env python3
"""trace_token.py: where a decode token's time goes on the GPU, from `generate --trace FILE`.

Kernels of one token overlap under programmatic dependent launch, so each kernel is charged its
*advance*: how far it moved the token's last kernel end (end_i - max(end of the kernels before
it)). The advances of a token sum to its span on the GPU; what remains of the wall time per token
is the host's (the wait for the token, the graph launch). Tokens start at their embedding kernel;
the table is the median over the traced tokens, per kernel name and position class."""
import collections
import json
import statistics
import sys


def main(path):
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    ks = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "device kernel"),
                key=lambda e: e["ts"])
    starts = [i for i, e in enumerate(ks) if "embedding" in e["name"]]
    if len(starts) < 2:
        sys.exit("trace_token: fewer than two tokens (no embedding kernels) in " + path)
    tokens = [ks[a:b] for a, b in zip(starts, starts[1:])]
    per = collections.defaultdict(list)  # (name, occurrence) -> [(dur, advance)] per token
    spans, gaps = [], []
    for tok in tokens:
        end, seen = tok[0]["ts"], collections.Counter()
        for e in tok:
            e_end = e["ts"] + e["dur"]
            per[(e["name"], seen[e["name"]])].append((e["dur"], max(0.0, e_end - end)))
            seen[e["name"]] += 1
            end = max(end, e_end)
        spans.append(end - tok[0]["ts"])
    for a, b in zip(tokens, tokens[1:]):
        gaps.append(b[0]["ts"] - max(e["ts"] + e["dur"] for e in a))
    print(f"{len(tokens)} tokens, {len(tokens[0])} kernels a token; GPU span median "
          f"{statistics.median(spans):.1f} us, gap between tokens median {statistics.median(gaps):.1f} us")
    agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for (name, _), v in per.items():
        a = agg[name]
        a[0] += 1
        a[1] += statistics.median(d for d, _ in v)
        a[2] += statistics.median(x for _, x in v)
    print(f"{'advance us':>10} {'dur us':>8} {'n':>4}  kernel")
    for name, (n, dur, adv) in sorted(agg.items(), key=lambda kv: -kv[1][2]):
        print(f"{adv:10.1f} {dur:8.1f} {n:4d}  {name[:90]}")


if __name__ == "__main__":
    main(sys.argv[1])
