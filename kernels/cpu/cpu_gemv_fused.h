/* cpu_gemv_fused.h: the GEMV fusions on the CPU (kernels/cpu/gemv_fused.c): rms_norm_gemm and
 * swiglu_gemm_add, whose prologue values carry the bits of rms_norm_fwd's and silu_mul's CPU
 * outputs, multiplied in float64. */
#ifndef BATON_KERNELS_CPU_GEMV_FUSED_H
#define BATON_KERNELS_CPU_GEMV_FUSED_H

#include "baton/baton.h"

/* buffers: x, g, w, y */
int baton__kcpu_rms_norm_gemm(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                              size_t len);
/* buffers: gu, w, c, y */
int baton__kcpu_swiglu_gemm_add(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                size_t len);

#endif
