/* gemv.h: baton's own matrix products for a few rows (the GEMV of decode and small batches), which
 * stream the weight once in its stored dtype and layout and widen it to f32 in registers: no copy
 * of the weight, at the machine's read bandwidth (docs/decisions/cpu-gemm.md). */
#ifndef BATON_DELEGATES_CPU_GEMV_H
#define BATON_DELEGATES_CPU_GEMV_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton.h"

/* The most rows of x the kernels take; the delegate sends more to OpenBLAS. */
#define GEMV_MAX_M 16

/* y[m][n] = alpha * sum_k x[m][k] * W(k, n) for m < M, in f32. x is f32 [M, K]; W is bf16, f16
 * or f32, stored [N, K] (trans_b, PyTorch's Linear) or [K, N]. `partial` is scratch of
 * baton__gemv_partial_floats(M, N, K, dt) floats (the [K, N] form's per-task sums). The split into
 * tasks depends on the sizes alone and sums are ordered by task, so the bits do not depend on the
 * number of threads; they do depend on the vector level (a different summation order). */
void baton__gemv_run(baton_dtype wdt, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *x, const void *w, float *y, float *partial);
size_t baton__gemv_partial_floats(int64_t M, int64_t N, int64_t K, baton_dtype wdt);

#endif /* BATON_DELEGATES_CPU_GEMV_H */
