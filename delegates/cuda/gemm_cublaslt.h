/* gemm_cublaslt.h: the CUDA backend of the "gemm" delegate, on cuBLASLt. The algorithm and its
 * workspace are chosen at init(), so execute() only enqueues one cublasLtMatmul on the run's
 * stream and can be captured into a CUDA graph. */
#ifndef BATON_DELEGATES_GEMM_CUBLASLT_H
#define BATON_DELEGATES_GEMM_CUBLASLT_H

#include "baton/baton.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C[M,N] = alpha * op(A) op(B) with A [M,K] (trans_a: [K,M]) and B [K,N] (trans_b: [N,K]),
 * row-major, bf16, f16 or f32 (all three the same), accumulated in f32 (no TF32 for f32).
 * init() returns BATON_ENOTSUP for other dtypes, BATON_ECUDA when the GPU or cuBLASLt refuses.
 * buffers: a, b | c. */
extern const baton_delegate_iface baton__gemm_cublaslt_iface;

#ifdef __cplusplus
}
#endif
#endif /* BATON_DELEGATES_GEMM_CUBLASLT_H */
