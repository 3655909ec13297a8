#!/usr/bin/env python3
# check-pdl-waits.py: lists the __global__ kernels of the given .cu files whose body never calls
# pdl_wait() (directly, or through a __device__ function of the same file that does). A target
# that declares supports_pdl may be launched as a programmatic dependent launch after any kernel,
# so each of its kernels must wait before it touches global memory (docs/api.md, "Kernels").
#   python3 scripts/check-pdl-waits.py kernels/cuda/decoder_*.cu [more.cu ...]
# Exit status 1 when a kernel does not wait. Where in the body the wait sits is for review.
import re
import sys


def bodies(src):
    """(kind, name, body) of each __global__ / __device__ function with a body."""
    for m in re.finditer(r"\b(__global__|__device__)\b[^;{]*?\b(\w+)\s*\(", src):
        i = src.find("{", m.end())
        semi = src.find(";", m.end())
        if i < 0 or (0 <= semi < i):
            continue  # a declaration
        depth, j = 0, i
        while j < len(src):
            if src[j] == "{":
                depth += 1
            elif src[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        yield m.group(1), m.group(2), src[i:j + 1]


def main(paths):
    bad = 0
    for path in paths:
        src = open(path, encoding="utf-8").read()
        src = re.sub(r"__launch_bounds__\s*\([^)]*\)", lambda m: " " * len(m.group(0)), src)
        funcs = list(bodies(src))
        waiting = {"pdl_wait"}
        changed = True
        while changed:  # __device__ helpers that wait, transitively
            changed = False
            for kind, name, body in funcs:
                if kind == "__device__" and name not in waiting and any(
                        re.search(r"\b%s\s*\(" % re.escape(w), body) for w in waiting):
                    waiting.add(name)
                    changed = True
        for kind, name, body in funcs:
            if kind != "__global__":
                continue
            if not any(re.search(r"\b%s\s*\(" % re.escape(w), body) for w in waiting):
                print(f"{path}: kernel {name} never calls pdl_wait()")
                bad += 1
    print(f"check-pdl-waits: {bad} kernel(s) without a wait")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
