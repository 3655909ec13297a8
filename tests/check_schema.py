#!/usr/bin/env python3
"""check_schema.py SCHEMA.json [DOC.json | -] ... : checks JSON documents against a JSON Schema,
with no package beyond Python's own: the subset baton's schemas use (type, const, enum, required,
properties, additionalProperties, items, minimum, pattern). Exit 1 with every violation listed.
The `jsonschema` package, where installed, checks the same documents too (--strict to require it)."""
import json
import re
import sys

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def is_type(v, t):
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return isinstance(v, TYPES[t])


def check(v, s, path, errs):
    if "const" in s and v != s["const"]:
        errs.append(f"{path}: {v!r} is not {s['const']!r}")
    if "enum" in s and v not in s["enum"]:
        errs.append(f"{path}: {v!r} is not one of {s['enum']}")
    if "type" in s:
        ts = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(is_type(v, t) for t in ts):
            errs.append(f"{path}: {type(v).__name__} is not {'/'.join(ts)}")
            return
    if "minimum" in s and isinstance(v, (int, float)) and v < s["minimum"]:
        errs.append(f"{path}: {v} < {s['minimum']}")
    if "pattern" in s and isinstance(v, str) and not re.search(s["pattern"], v):
        errs.append(f"{path}: {v!r} does not match {s['pattern']}")
    if isinstance(v, dict):
        for k in s.get("required", []):
            if k not in v:
                errs.append(f"{path}: missing '{k}'")
        props = s.get("properties", {})
        for k, x in v.items():
            if k in props:
                check(x, props[k], f"{path}.{k}", errs)
            elif isinstance(s.get("additionalProperties"), dict):
                check(x, s["additionalProperties"], f"{path}.{k}", errs)
            elif s.get("additionalProperties") is False:
                errs.append(f"{path}: unexpected '{k}'")
    if isinstance(v, list) and "items" in s:
        for i, x in enumerate(v):
            check(x, s["items"], f"{path}[{i}]", errs)


def main():
    args = [a for a in sys.argv[1:] if a != "--strict"]
    strict = "--strict" in sys.argv
    schema = json.load(open(args[0]))
    bad = 0
    for name in args[1:]:
        doc = json.load(sys.stdin if name == "-" else open(name))
        errs = []
        check(doc, schema, "$", errs)
        try:
            import jsonschema
            for e in jsonschema.Draft202012Validator(schema).iter_errors(doc):
                errs.append(f"jsonschema: {e.json_path}: {e.message}")
        except ImportError:
            if strict:
                errs.append("--strict: the jsonschema package is not installed")
        for e in errs:
            print(f"{name}: {e}")
        bad += bool(errs)
        if not errs:
            print(f"{name}: matches {args[0]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
