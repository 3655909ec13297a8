#!/bin/bash
# test_report.sh BATON: `baton bench --report` writes one self-contained HTML page, and a real
# browser renders it: headless Chromium (Debian's `chromium`, installed here when missing and
# possible; else the test is skipped, exit 77) dumps the DOM, which must hold the plan's segment
# strip and a section per mode with its latency chart and timeline (host waits drawn), and the
# same p50 and waits per run as the JSON that the same invocation printed.
set -uo pipefail
baton=${1:?usage: test_report.sh path/to/baton}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ] && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
  echo "installing chromium (Debian) for the browser check..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium > "$tmp/apt.log" 2>&1 ||
    { apt-get update -q > /dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium > "$tmp/apt.log" 2>&1; }
  browser=$(command -v chromium || true)
fi
fail=0
if ! "$baton" bench --gpu=sim --iters=15 --warmup=2 -q --format=json \
     --report="$tmp/report.html" examples/plans/rfc.json > "$tmp/bench.json" 2> "$tmp/err"; then
  echo "FAIL: baton bench --report: $(cat "$tmp/err")"; exit 1
fi
# self-contained: nothing fetched, no scripts
if grep -Eiq '<script|src=|href=|@import|url\(' "$tmp/report.html"; then
  echo "FAIL: the report refers to something outside itself"; fail=1
fi
# a report path that cannot be written fails before any run
if "$baton" bench --gpu=sim --iters=2000 -q --report=/nonexistent/dir/r.html \
     examples/plans/rfc.json > /dev/null 2> "$tmp/err2"; then
  echo "FAIL: an unwritable --report path was accepted"; fail=1
fi
grep -q "/nonexistent/dir/r.html is in a directory that does not exist" "$tmp/err2" || { echo "FAIL: no clear error for the report path"; fail=1; }
if [ -z "$browser" ]; then
  echo "SKIP: no chromium to render the report (install Debian's chromium)"; exit 77
fi
"$browser" --headless --no-sandbox --disable-gpu --dump-dom "file://$tmp/report.html" \
  > "$tmp/dom.html" 2> "$tmp/browser.err" || { echo "FAIL: chromium: $(tail -3 "$tmp/browser.err")"; exit 1; }
python3 - "$tmp/dom.html" "$tmp/bench.json" <<'PY' || fail=1
import json, re, sys
from html.parser import HTMLParser

class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.modes, self.cur, self.want, self.svgs = [], {}, None, None, []
        self.segments = 0
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "")
        if tag == "section" and "mode" in cls.split():
            self.cur = a.get("data-mode"); self.modes[self.cur] = {"svg": set()}
        if tag == "svg":
            self.svgs.append(cls)
            if self.cur: self.modes[self.cur]["svg"].add(cls)
            if cls == "segments": self.segments += 1
        if tag == "rect" and self.cur:
            self.modes[self.cur].setdefault(a.get("class", "bar"), 0)
            self.modes[self.cur][a.get("class", "bar")] = self.modes[self.cur].get(a.get("class", "bar"), 0) + 1
        if tag == "span" and self.cur:
            for k in ("p50", "p99", "waits", "launches"):
                if k in cls.split(): self.want = k
    def handle_endtag(self, tag):
        if tag == "section": self.cur = None
    def handle_data(self, data):
        if self.want and self.cur:
            self.modes[self.cur][self.want] = float(data); self.want = None

d = Dom(); d.feed(open(sys.argv[1]).read())
bench = json.load(open(sys.argv[2]))
ok = True
if d.segments != 1:
    print("FAIL: no segment strip"); ok = False
for m in ("strict", "boundary", "graph"):
    s = d.modes.get(m)
    if not s:
        print(f"FAIL: no section for {m}"); ok = False; continue
    if not {"latency", "timeline"} <= s["svg"]:
        print(f"FAIL: {m}: charts missing: {s['svg']}"); ok = False
    if s.get("span", 0) < 10:
        print(f"FAIL: {m}: the timeline has {s.get('span', 0)} spans"); ok = False
    if s.get("wait", 0) < 1:
        print(f"FAIL: {m}: no host wait drawn"); ok = False
    for k in ("p50", "p99", "waits", "launches"):
        if k not in s:
            print(f"FAIL: {m}: no {k} number"); ok = False
for j in bench["modes"]:
    s = d.modes.get(j["mode"], {})
    if abs(s.get("waits", -1) - j["host_waits_per_run"]) > 1e-6 or abs(s.get("p50", -1) - j["p50_us"]) > 0.006:
        print(f"FAIL: {j['mode']}: the page says p50 {s.get('p50')}, {s.get('waits')} waits; "
              f"the JSON {j['p50_us']}, {j['host_waits_per_run']}"); ok = False
if d.modes.get("strict", {}).get("wait", 0) <= d.modes.get("graph", {}).get("wait", 0):
    print("FAIL: strict mode should show more host waits than graph mode"); ok = False
print("report DOM:", {m: {k: v for k, v in s.items() if k != "svg"} for m, s in d.modes.items()})
sys.exit(0 if ok else 1)
PY
[ $fail = 0 ] && echo "report: ok" || echo "report: FAILED"
exit $fail
