#!/usr/bin/env python3
"""check-exports.py: fails (exit 1) when a shared library exports a symbol that no public header
declares with BATON_API, or when a public header declares a function without BATON_API (it would
be hidden, and a program calling it would not link). The library is built with
-fvisibility=hidden (include/baton/baton_export.h), so this keeps its ABI to what the headers say.
Usage: check-exports.py LIB HEADER... [--expect REGEX]... [--nm NM]
  --expect REGEX  each BATON_API function whose whole name matches REGEX must be exported by LIB
                  (baton_xla.h's entry points live in other builds and libraries, so CMake names
                  what each library must have)"""
import argparse
import re
import subprocess
import sys

# Symbols the toolchain itself puts in a shared library's dynamic symbol table.
TOOLCHAIN = {"_init", "_fini", "__bss_start", "_edata", "_end", "__bss_start__", "__end__",
             "_bss_end__", "__bss_end__"}


def header_functions(path):
    """(exported, unmarked): functions declared at file scope with and without BATON_API."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)  # preprocessor lines
    text = re.sub(r'extern\s+"C"\s*\{', " ", text)
    exported, unmarked = set(), []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth <= 0:
            stmt = " ".join(text[start:i].split())
            start = i + 1
            # a function declaration: no body, not a typedef, a name before the first '('
            if "{" in stmt or stmt.startswith("typedef"):
                continue
            m = re.match(r"(BATON_API\s+)?[\w\s\*]*?\b(\w+)\s*\(", stmt)
            if not m:
                continue
            (exported.add(m.group(2)) if m.group(1) else unmarked.append(m.group(2)))
    return exported, unmarked


def exported_symbols(lib, nm):
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True, capture_output=True,
                         text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            syms.add(parts[2].split("@")[0])
    return syms - TOOLCHAIN


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("headers", nargs="+")
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--nm", default="nm")
    a = ap.parse_args()
    declared, problems = set(), []
    for h in a.headers:
        exp, unmarked = header_functions(h)
        declared |= exp
        for f in unmarked:
            problems.append(f"{h}: {f}() is declared without BATON_API; mark it, or it is hidden")
    syms = exported_symbols(a.lib, a.nm)
    for s in sorted(syms - declared):
        problems.append(f"{a.lib} exports {s}, which no public header declares with BATON_API: "
                        "make it static, or declare it in include/baton/ with BATON_API")
    for f in sorted(declared - syms):
        if any(re.fullmatch(p, f) for p in a.expect):
            problems.append(f"{a.lib} does not export {f}(), which a public header declares")
    print(f"{a.lib}: {len(syms)} exported symbols, {len(declared)} BATON_API declarations in "
          f"{len(a.headers)} headers")
    for p in problems:
        print("FAIL: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
