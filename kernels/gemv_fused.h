/* gemv_fused.h: the GEMV fusions of the decoder, rms_norm_gemm (y = rmsnorm(x; g, eps) W^T) and
 * swiglu_gemm_add (y = (silu(gate) * up) W^T + c): their descriptor and shape rules, shared by the
 * signature checks (targets/gemv_fused.c) and the CPU and CUDA kernels, so a load-time check and a
 * run-time call refuse the same shapes with the same words. Shapes come from ctx->sig on every
 * call (a plan with run-time dims changes the rows); the descriptor carries the attributes. */
#ifndef BATON_KERNELS_GEMV_FUSED_H
#define BATON_KERNELS_GEMV_FUSED_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gf_op {
    GF_RMS_NORM_GEMM = 1,  /* inputs x [..., K], g [K], w [N, K]; output [..., N] */
    GF_SWIGLU_GEMM_ADD = 2 /* inputs gu [..., 2K], w [N, K], c [..., N]; output [..., N] */
} gf_op;

/* 16 bytes, little-endian (docs/targets.md):
 *   0 int32   op    gf_op; a kernel refuses another op's descriptor
 *   4 int32   0
 *   8 float64 eps   rms_norm_gemm: > 0 (added to the mean square); else 0 */
typedef struct baton_gemv_fused_desc {
    int32_t op;
    int32_t pad;
    double eps;
} baton_gemv_fused_desc;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(baton_gemv_fused_desc) == 16, "gemv fusion descriptor layout");
#endif

/* A call's shapes: rows of x (the leading dims folded), N and K, and the one dtype of every
 * tensor. */
typedef struct gf_shape {
    int64_t m, n, k;
    baton_dtype dt;
} gf_shape;

const char *baton__gf_op_name(int op);

/* The attributes of a step (eps for rms_norm_gemm: required, finite and > 0) as a descriptor. 0,
 * or BATON_EPLAN with the reason in msg. */
int baton__gf_desc_from_attrs(int op, const baton_sig_args *a, baton_gemv_fused_desc *d, char *msg,
                              size_t len);
/* Checks a descriptor's bytes into *d: 0 or BATON_EINVAL with the reason in msg. */
int baton__gf_desc_read(int op, const char *opaque, size_t len, baton_gemv_fused_desc *d, char *msg,
                        size_t cap);
/* The shape rules: a's inputs into *s, and the output the step must declare into expected (NULL:
 * not wanted). 0, or BATON_EPLAN with the reason naming the tensor and the expected value. */
int baton__gf_shapes(int op, const baton_sig_args *a, gf_shape *s, baton_tensor_desc *expected,
                     char *msg, size_t len);
/* For a kernel: the descriptor and ctx->sig read and checked, and the n buffers present. 0, or
 * BATON_EINVAL with the reason in ctx->errbuf. */
int baton__gf_call_read(const baton_exec_ctx *ctx, int op, void **buffers, int n_buffers,
                        const char *opaque, size_t opaque_len, baton_gemv_fused_desc *d,
                        gf_shape *s);

#ifdef __cplusplus
}
#endif
#endif
