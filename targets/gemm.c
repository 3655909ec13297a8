/* gemm.c: the "gemm" and "gemm_add" delegates as targets: their signature check and descriptor
 * (from baton__gemm_resolve, delegates/gemm.c) and its backends, OpenBLAS on the CPU and cuBLASLt
 * on CUDA. */
#include <string.h>

#include "delegates/gemm.h"
#include "targets/builtin.h"
#ifdef BATON_CUDA
#include "delegates/cuda/gemm_cublaslt.h"
#endif

static int gemm_check(const baton_sig_args *sig, baton_tensor_desc *expected, char *msg, size_t len)
{
    baton_gemm_desc d;
    return baton__gemm_resolve(sig, &d, expected, msg, len);
}

static int gemm_pack(const baton_sig_args *sig, char *opaque, size_t cap)
{
    baton_gemm_desc d;
    char msg[256];
    int rc = baton__gemm_resolve(sig, &d, NULL, msg, sizeof msg);
    if (rc)
        return rc;
    if (!opaque || cap < sizeof d)
        return BATON_EINVAL;
    memcpy(opaque, &d, sizeof d);
    return (int)sizeof d;
}

/* What gemm and gemm_add share: attributes, signature (gemm_add's c is checked by the same
 * resolve, as its third input) and backends, which both take c when there is one. */
#ifdef BATON_CUDA
#define GEMM_IMPLS                                                                                 \
    .impls = {{.device = BATON_DEVICE_CPU, .delegate = &baton__gemm_openblas_iface},               \
              {.device = BATON_DEVICE_CUDA, .delegate = &baton__gemm_cublaslt_iface}},             \
    .n_impls = 2
#else
#define GEMM_IMPLS                                                                                 \
    .impls = {{.device = BATON_DEVICE_CPU, .delegate = &baton__gemm_openblas_iface}}, .n_impls = 1
#endif
#define GEMM_COMMON                                                                                \
    .attrs = {{"trans_a", BATON_ATTR_BOOL, 0, "a is stored [K, M]; default false"},                \
              {"trans_b", BATON_ATTR_BOOL, 0, "b is stored [N, K]; default false"},                \
              {"alpha", BATON_ATTR_FLOAT, 0, "scale of the product; default 1"}},                  \
    .check = gemm_check, .pack = gemm_pack, GEMM_IMPLS

const baton_target baton__target_gemm_add = {
    .struct_size = sizeof(baton_target),
    .name = "gemm_add",
    .kind = BATON_TARGET_DELEGATE,
    .n_inputs = 3,
    .n_outputs = 1,
    .summary = "y = alpha * op(a) * op(b) + c, as gemm with c (the output's dtype and shape) added "
               "in the same call (cuBLASLt's beta = 1; OpenBLAS's beta = 1): a Linear with a "
               "residual, or a bias broadcast by the plan beforehand",
    GEMM_COMMON,
};

const baton_target baton__target_gemm = {
    .struct_size = sizeof(baton_target),
    .name = "gemm",
    .kind = BATON_TARGET_DELEGATE,
    .n_inputs = 2,
    .n_outputs = 1,
    .summary = "out = alpha * op(a) * op(b): a [M,K] (or [K,M] with trans_a; leading dims of a "
               "fold into M), b [K,N] (or [N,K] with trans_b); f32, f64, bf16, f16",
    GEMM_COMMON,
};
