/* gemm.h: the gemm delegate (C = alpha * op(A) * op(B), beta = 0): its descriptor, its backends
 * and the one place that turns a step's signature into GEMM sizes, shared by the target's check()
 * and pack() (targets/gemm.c) and every backend's init() (OpenBLAS in delegates/cpu/, cuBLASLt in
 * delegates/cuda/), so they cannot disagree. */
#ifndef BATON_DELEGATES_GEMM_H
#define BATON_DELEGATES_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton.h"

/* gemm (the delegate's attributes, packed the same way so a plan can pass them verbatim):
 *   0  int64  m, 8 int64 n, 16 int64 k
 *  24  int32  dtype
 *  28  int32  flags: bit 0 trans_a, bit 1 trans_b
 *  32  float64 alpha
 *  40  float64 beta (0: the output is overwritten) */
typedef struct baton_gemm_desc {
    int64_t m, n, k;
    int32_t dtype;
    int32_t flags;
    double alpha;
    double beta;
} baton_gemm_desc;

#define BATON_GEMM_TRANS_A 1
#define BATON_GEMM_TRANS_B 2

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(baton_gemm_desc) == 48, "gemm descriptor layout");
#endif

/* The CPU backend (delegates/cpu/gemm_openblas.c). */
extern const baton_delegate_iface baton__gemm_openblas_iface;
/* Bytes the CPU backend holds in prepared copies of constant weights (f32 copies of bf16/f16
 * weights for its OpenBLAS path, [N, K] copies of [K, N] weights for its GEMV), all steps and
 * runtimes together. */
size_t baton__gemm_cpu_prepared_bytes(void);
/* The weight a CPU gemm step's GEMV streams: its [N, K] copy where it has one, else `b` (the
 * benchmark's read floor reads the same bytes). */
const void *baton__gemm_cpu_gemv_weight(const void *state, const void *b);

/* Resolves a gemm step: inputs a [M,K] (or [K,M] with trans_a; without trans_a, a's leading dims
 * fold into M) and b [K,N] (or [N,K] with trans_b), attrs trans_a, trans_b, alpha. Fills *desc
 * (beta = 0) and *out (the output's desc: a's leading dims then N) when non-NULL. A third input c
 * (gemm_add: y = op(a) op(b) + c) must have the output's dtype and shape; desc->beta is then 1,
 * and the buffers are a, b, c, y. On a bad
 * signature writes a one-line reason (what is wrong and what would be right) into msg and returns
 * BATON_EPLAN. */
int baton__gemm_resolve(const baton_sig_args *sig, baton_gemm_desc *desc, baton_tensor_desc *out,
                        char *msg, size_t msg_len);

/* The run's M: from the step's signature as the runtime bound it (a plan with dims rebinds
 * sig->inputs[0] when the dims change), else desc->m (init's, the max). -1 for a signature gemm
 * does not take. Every backend multiplies this many rows, not the max. */
int64_t baton__gemm_run_m(const baton_gemm_desc *desc, const baton_sig_args *sig);

/* The run's K, likewise: a's contracted dimension as the runtime bound it (an exporter's one-hot
 * row selection [1, 1, seq] by [seq, D] contracts over the plan's dim), else desc->k. Every backend
 * contracts over this many, not the max: the values past it are another run's. -1 for a
 * signature gemm does not take. */
int64_t baton__gemm_run_k(const baton_gemm_desc *desc, const baton_sig_args *sig);

/* Whether the run's b agrees: its N the prepared one (N never follows a dim) and its K the run's
 * k. 0, or BATON_EINVAL with the reason in msg (never a product of mismatched shapes). */
int baton__gemm_run_n_ok(const baton_gemm_desc *desc, const baton_sig_args *sig, int64_t k,
                         char *msg, size_t len);

#endif /* BATON_DELEGATES_GEMM_H */
