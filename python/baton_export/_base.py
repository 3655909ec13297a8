"""What every front end shares and that needs neither torch nor jax: the error type and the plan
writer (baton_export.jax runs in a venv without torch)."""
import json

# Targets with a CUDA implementation in baton (docs/kernels.md and the decoder ops of the
# contract). A step whose target is not here is placed on the CPU whatever `device` says.
CUDA_TARGETS = {
    "gemm", "rms_norm_fwd", "rms_norm_bwd", "rms_norm_grad_weight", "softshrink", "add", "mul",
    "add_scalar", "copy", "argmax", "noop", "embedding", "rope", "kv_cache_update", "attention",
    "silu_mul", "silu", "gelu", "softmax", "cast", "sample", "swiglu", "rope_cache_update",
    "gemm_add", "rms_norm_gemm", "swiglu_gemm_add",
}
DELEGATES = {"gemm", "gemm_add"}


class ExportError(Exception):
    """An op, dtype or shape the exporter cannot lower; the message says which and why."""


def write_plan(path, p):
    """One tensor or step per line, as scripts/gen_plans.py writes the bundled plans."""
    with open(path, "w") as f:
        f.write('{\n  "format": "baton.plan", "version": 1, "name": %s,\n' % json.dumps(p["name"]))
        if p.get("dims"):
            f.write('  "dims": %s,\n' % json.dumps(p["dims"]))
        for key in ("tensors", "steps"):
            f.write('  "%s": [\n' % key)
            f.write(",\n".join("    " + json.dumps(x) for x in p[key]))
            f.write("\n  ]%s\n" % ("," if key == "tensors" else ""))
        f.write("}\n")
