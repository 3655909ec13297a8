/* gemm.h: the "gemm" delegate target (C = alpha * op(A) * op(B), beta = 0) and the one place
 * that turns a step's signature into GEMM sizes, shared by check(), pack() and every backend's
 * init() (OpenBLAS here, cuBLASLt in delegates/cuda/), so they cannot disagree. */
#ifndef BATON_DELEGATES_GEMM_H
#define BATON_DELEGATES_GEMM_H

#include <stddef.h>

#include "baton/baton.h"
#include "kernels/descriptors.h"

extern const baton_target baton_target_gemm;

/* The CPU backend (delegates/cpu/gemm_openblas.c). */
extern const baton_delegate_iface baton_gemm_openblas_iface;

/* Resolves a gemm step: inputs a [M,K] (or [K,M] with trans_a; without trans_a, a's leading dims
 * fold into M) and b [K,N] (or [N,K] with trans_b), attrs trans_a, trans_b, alpha. Fills *desc
 * (beta = 0) and *out (the output's desc: a's leading dims then N) when non-NULL. On a bad
 * signature writes a one-line reason (what is wrong and what would be right) into msg and returns
 * BATON_EPLAN. */
int baton_gemm_resolve(const baton_sig_args *sig, baton_gemm_desc *desc, baton_tensor_desc *out,
                       char *msg, size_t msg_len);

#endif /* BATON_DELEGATES_GEMM_H */
