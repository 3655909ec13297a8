#!/usr/bin/env python3
"""check-layers.py: prints baton's include graph between source folders and fails (exit 1) on an
include that points the wrong way or on a cycle. The rule (docs/layout.md, CMakeLists.txt's
BATON_DEPS_*): core <- kernels, delegates <- targets <- plan <- scheduler, text; tools/ and examples/
include only the public headers (baton/...). tests/ and bench/ are white-box and not checked.
Usage: python3 scripts/check-layers.py [REPO_ROOT]"""
import os
import re
import sys

ALLOWED = {
    "core": set(),
    "kernels": {"core"},
    "delegates": {"core"},
    "targets": {"core", "kernels", "delegates"},
    "plan": {"core", "targets"},
    "scheduler": {"core", "plan"},
    "text": {"core", "plan"},
    "tools": set(),
    "examples": set(),
}
EXTS = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    edges = {}  # (from, to) -> first "file: include" seen
    bad = []
    for layer in ALLOWED:
        for dirpath, _, files in os.walk(os.path.join(root, layer)):
            for name in sorted(files):
                if not name.endswith(EXTS):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    if inc.startswith("baton/"):
                        continue  # the public headers: anyone may include them
                    if "/" not in inc:
                        if layer in ("tools", "examples"):
                            continue  # a program's own header beside it
                        bad.append(f"{rel}: #include \"{inc}\": write the folder "
                                   f"(\"{layer}/.../{inc}\") so the layer is visible")
                        continue
                    if inc.startswith(".") or "/../" in inc:
                        bad.append(f"{rel}: #include \"{inc}\": relative includes hide the layer")
                        continue
                    to = inc.split("/", 1)[0]
                    if to not in ALLOWED and to != "xla":
                        bad.append(f"{rel}: #include \"{inc}\": no such layer '{to}'")
                        continue
                    if to == "xla" or to == layer:
                        continue
                    edges.setdefault((layer, to), f"{rel}: #include \"{inc}\"")
                    if to not in ALLOWED[layer]:
                        may = ", ".join(sorted(ALLOWED[layer])) or "only baton/ (public)"
                        bad.append(f"{rel}: #include \"{inc}\": {layer}/ may include {may}")

    print("include graph (layer -> layers it includes):")
    for layer in ALLOWED:
        outs = sorted(t for (f, t) in edges if f == layer)
        print(f"  {layer:10s} -> {', '.join(outs) if outs else '(public headers only)'}")

    # A cycle check on the edges actually present, independent of the table above.
    graph = {}
    for f, t in edges:
        graph.setdefault(f, set()).add(t)
    state = {}
    cycle = []

    def visit(n, stack):
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                cycle.append(" -> ".join(stack + [n, m]))
            elif not state.get(m):
                visit(m, stack + [n])
        state[n] = 2

    for n in sorted(graph):
        if not state.get(n):
            visit(n, [])
    for c in cycle:
        bad.append(f"cycle: {c}")

    if bad:
        print(f"\n{len(bad)} wrong-way include(s):")
        for b in bad:
            print("  " + b)
        return 1
    print("layering: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
