/* cuda_gemv.h: baton's decode GEMV on CUDA (kernels/cuda/gemv.cu), y = prologue(x) W^T (+ c) for
 * a few rows of x against W [N, K] as PyTorch stores it, with the prologues that fuse the decoder's
 * RMSNorm and SwiGLU into the GEMV that follows them. No CUDA header here, so the registry and the
 * gemm target can call it in any build. */
#ifndef BATON_KERNELS_CUDA_GEMV_H
#define BATON_KERNELS_CUDA_GEMV_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the GEMV computes before the product, from the rows of x as given:
 *   PLAIN   x itself ([m, k], row stride ldx)
 *   RMS     rms_norm_fwd's y: round(g[k] * (x[k] * rsqrt(mean(x^2) + eps))), g [k] (the norm
 *           recomputed by every block: x is a few thousand values)
 *   SWIGLU  silu_mul's y of gu = [gate | up] ([m, 2k], row stride ldx): round(silu(gate) * up) */
enum { BATON_GEMV_PLAIN = 0, BATON_GEMV_RMS = 1, BATON_GEMV_SWIGLU = 2 };

typedef struct baton_gemv_args {
    const void *x; /* [m, ldx] */
    const void *w; /* [n, k], row-major: y = x W^T */
    const void *c; /* [m, n] added to the product, or NULL */
    const void *g; /* RMS: the norm's weight [k]; else NULL */
    void *y;       /* [m, n] */
    int64_t m, n, k, ldx;
    int32_t dtype; /* of x, w, c, g and y alike: bf16, f16 or f32 */
    int32_t prologue;
    float alpha; /* y = alpha * (x W^T) + c */
    float eps;   /* RMS */
    /* Nonzero: w is a plan constant (never written by a step), so the kernel may start loading it
     * before waiting for the steps it depends on (pdl_wait). */
    int32_t w_const;
    /* The tile: 0 one row a warp, 1 two rows a warp, 2 one row with the next tile's loads issued
     * before this one's FMAs (bench_gemv times each); BATON_GEMV_AUTO the one measured fastest
     * for the launch (bench_gemv on an H200: with PDL, 2 for N <= 2560 or K >= 8192, else 1;
     * without, 0). Every variant gives the same bits: each lane sums its elements in k order,
     * the warp sums its lanes in a fixed butterfly. */
    int32_t variant;
} baton_gemv_args;

#define BATON_GEMV_VARIANTS 3
#define BATON_GEMV_AUTO     (-1)

/* Whether the GEMV runs these sizes (0), else a one-line reason in msg and BATON_ENOTSUP: k a
 * multiple of the 16-byte vector (8 bf16/f16, 4 f32), ldx too, and one row of x fitting in shared
 * memory. Any m is accepted: m > 8 runs in row tiles of 8 that each read all of W (correct, not
 * fast: prefill belongs to cuBLASLt). */
int baton__kcuda_gemv_supported(const baton_gemv_args *a, char *msg, size_t len);

/* Launches the GEMV on ctx->stream (ctx->pdl honoured). Pointers must be 16-byte aligned.
 * Returns 0, or a negative code with the reason in ctx->errbuf. */
int baton__kcuda_gemv(const baton_exec_ctx *ctx, const baton_gemv_args *a);

/* The fused targets (kernels/gemv_fused.h) in the baton_kernel_fn convention: rms_norm_gemm
 * (buffers x, g, w, y) and swiglu_gemm_add (gu, w, c, y). PDL-aware; bf16, f16, f32. */
int baton__kcuda_rms_norm_gemm(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                               size_t len);
int baton__kcuda_swiglu_gemm_add(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                 size_t len);

#ifdef __cplusplus
}
#endif
#endif
