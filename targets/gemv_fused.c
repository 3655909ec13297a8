/* gemv_fused.c: the decoder's GEMV fusions as targets: rms_norm_gemm (the norm in front of the
 * qkv, gate_up and lm_head projections) and swiglu_gemm_add (the gating in front of down_proj,
 * with the residual added), each one launch where the unfused plan has two. Rules in
 * kernels/gemv_fused.c; kernels on the CPU (kernels/cpu/gemv_fused.c) and CUDA
 * (kernels/cuda/gemv.cu). */
#include <string.h>

#include "core/core.h"
#include "kernels/cpu/cpu_gemv_fused.h"
#include "kernels/gemv_fused.h"
#include "targets/builtin.h"
#ifdef BATON_CUDA
#include "kernels/cuda/cuda_gemv.h"
#endif

/* The descriptor of a step: the plan's verbatim opaque bytes when it gives them (checked, and
 * its eps the attribute's where the step gives that too), else the attributes'. */
static int desc_of(int op, const baton_sig_args *a, baton_gemv_fused_desc *d, char *msg, size_t len)
{
    if (a && a->opaque) {
        if (baton__gf_desc_read(op, a->opaque, a->opaque_len, d, msg, len))
            return BATON_EPLAN;
        baton_gemv_fused_desc want;
        if (op != GF_RMS_NORM_GEMM || !a->attrs || a->n_attrs <= 0 ||
            !baton_attrs_find(a->attrs, a->n_attrs, "eps"))
            return 0;
        int rc = baton__gf_desc_from_attrs(op, a, &want, msg, len);
        return rc ? rc : baton__opaque_attr(a, "eps", d->eps, "eps", want.eps, msg, len);
    }
    return baton__gf_desc_from_attrs(op, a, d, msg, len);
}

static int gf_check(int op, const baton_sig_args *a, baton_tensor_desc *expected, char *msg,
                    size_t len)
{
    baton_gemv_fused_desc d;
    int rc = desc_of(op, a, &d, msg, len);
    return rc ? rc : baton__gf_shapes(op, a, NULL, expected, msg, len);
}

static int gf_pack(int op, const baton_sig_args *a, char *opaque, size_t cap)
{
    baton_gemv_fused_desc d;
    char msg[512];
    int rc = desc_of(op, a, &d, msg, sizeof msg);
    if (rc == 0)
        rc = baton__gf_shapes(op, a, NULL, NULL, msg, sizeof msg);
    if (rc)
        return rc;
    return baton__put_desc(&d, sizeof d, opaque, cap);
}

#define GF_FNS(name, OP)                                                                           \
    static int name##_check(const baton_sig_args *a, baton_tensor_desc *e, char *m, size_t l)      \
    {                                                                                              \
        return gf_check(OP, a, e, m, l);                                                           \
    }                                                                                              \
    static int name##_pack(const baton_sig_args *a, char *o, size_t c)                             \
    {                                                                                              \
        return gf_pack(OP, a, o, c);                                                               \
    }

GF_FNS(rms_norm_gemm, GF_RMS_NORM_GEMM)
GF_FNS(swiglu_gemm_add, GF_SWIGLU_GEMM_ADD)

const baton_target baton__target_rms_norm_gemm = {
    .struct_size = sizeof(baton_target),
    .name = "rms_norm_gemm",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 3,
    .n_outputs = 1,
    .summary = "y = rms_norm_fwd(x, g) @ w^T in one step: inputs x [..., K], g [K] (the norm's "
               "weight), w [N, K] (a Linear's weight as PyTorch stores it), one dtype (f32, f64, "
               "bf16, f16; CUDA: not f64); output [..., N]; the normalised x has rms_norm_fwd's "
               "values (rounded to the dtype), products summed in f32 (f64 on the CPU)",
    .attrs = {{"eps", BATON_ATTR_FLOAT, 1, "added to the mean square; > 0"}},
    .check = rms_norm_gemm_check,
    .pack = rms_norm_gemm_pack,
    BATON_BUILTIN_KERNEL_IMPLS(rms_norm_gemm),
};

const baton_target baton__target_swiglu_gemm_add = {
    .struct_size = sizeof(baton_target),
    .name = "swiglu_gemm_add",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 3,
    .n_outputs = 1,
    .summary = "y = swiglu(gu) @ w^T + c in one step: inputs gu [..., 2K] (gate then up, as the "
               "gate_up GEMM writes them), w [N, K], c [..., N] (the residual), one dtype (f32, "
               "f64, bf16, f16; CUDA: not f64); output [..., N]; the gated values are swiglu's "
               "(rounded to the dtype), products summed in f32 (f64 on the CPU)",
    .check = swiglu_gemm_add_check,
    .pack = swiglu_gemm_add_pack,
    BATON_BUILTIN_KERNEL_IMPLS(swiglu_gemm_add),
};
