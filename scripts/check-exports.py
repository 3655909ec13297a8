#!/usr/bin/env python3
"""check-exports.py: fails (exit 1) when a shared library exports a symbol that no public header
declares with BATON_API, or when a public header declares a function without BATON_API (it would
be hidden, and a program calling it would not link). The library is built with
-fvisibility=hidden (include/baton/baton_export.h), so this keeps its ABI to what the headers say.

A static library (LIB ending in .a) is checked for collisions instead: every global symbol it
defines must be a BATON_API function of the headers or carry the internal prefix (--internal,
`baton__` as libuv's `uv__`), so that a program linking libbaton.a can have its own `log_msg`.
Weak symbols (C++ inline functions and templates of .cu files) are not collisions and are skipped,
and so are C++ (mangled, _Z...) symbols of the .cu files: a C program cannot name them.

Usage: check-exports.py LIB HEADER... [--expect REGEX]... [--nm NM] [--internal PREFIX]
                        [--report-only] [--symbols FILE]
  --expect REGEX  each BATON_API function whose whole name matches REGEX must be exported by LIB
                  (baton_xla.h's entry points live in other builds and libraries, so CMake names
                  what each library must have)
  --report-only   print the problems of a static library but exit 0 (until the internal symbols
                  are renamed to the internal prefix)
  --symbols FILE  write the sorted exported (or, for .a, global) symbol names to FILE, so that two
                  builds' sets can be compared (.ci/run compares the CPU-only and CUDA builds')"""
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


def static_globals(lib, nm):
    """Strong global symbols that the archive's objects define."""
    out = subprocess.run([nm, "-g", "--defined-only", lib], check=True, capture_output=True,
                         text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        # "ADDRESS TYPE NAME"; member headers ("file.o:") and blank lines have fewer fields
        if len(parts) >= 3 and parts[1] not in ("W", "V", "w", "v", "u"):
            # _Z: C++ (mangled, namespaced); __odr_asan/__asan/__ubsan: the sanitizers' own
            # indicators in an instrumented build, not names of baton's
            if not parts[2].startswith(("_Z", "__odr_asan", "__asan", "__ubsan", "__tsan")):
                syms.add(parts[2])
    return syms


def check_static(a, declared, problems):
    syms = static_globals(a.lib, a.nm)
    public = sorted(s for s in syms if s in declared)
    wrong = sorted(s for s in syms if s not in declared and not s.startswith(a.internal))
    for s in wrong:
        if s.startswith("baton_"):
            problems.append(f"{a.lib} defines {s}, which wears the public prefix but no public "
                            f"header declares it: rename it {a.internal}...")
        else:
            problems.append(f"{a.lib} defines the global {s}: a program with its own {s} fails "
                            f"to link; make it static or rename it {a.internal}...")
    for f in sorted(declared - syms):
        if any(re.fullmatch(p, f) for p in a.expect):
            problems.append(f"{a.lib} does not define {f}(), which a public header declares")
    print(f"{a.lib}: {len(syms)} global symbols: {len(public)} public, "
          f"{len(syms) - len(public) - len(wrong)} with the internal prefix {a.internal}, "
          f"{len(wrong)} without")
    return syms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("headers", nargs="+")
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--internal", default="baton__")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--symbols")
    a = ap.parse_args()
    declared, problems = set(), []
    for h in a.headers:
        exp, unmarked = header_functions(h)
        declared |= exp
        for f in unmarked:
            problems.append(f"{h}: {f}() is declared without BATON_API; mark it, or it is hidden")
    if a.lib.endswith(".a"):
        syms = check_static(a, declared, problems)
        if a.symbols:
            with open(a.symbols, "w", encoding="utf-8") as f:
                f.write("".join(s + "\n" for s in sorted(syms)))
        for p in problems:
            print(("NOTE: " if a.report_only else "FAIL: ") + p)
        if problems and a.report_only:
            print(f"{len(problems)} problems reported; --report-only: not a failure")
        return 1 if problems and not a.report_only else 0
    syms = exported_symbols(a.lib, a.nm)
    if a.symbols:
        with open(a.symbols, "w", encoding="utf-8") as f:
            f.write("".join(s + "\n" for s in sorted(syms)))
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
