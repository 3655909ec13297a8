/* cpu_decoder_fused.h: the fused decoder targets on the CPU (kernels/cpu/decoder_fused.c):
 * swiglu and rope_cache_update, built on the unfused kernels so their bits are those of silu_mul,
 * and of rope then kv_cache_update. */
#ifndef BATON_KERNELS_CPU_DECODER_FUSED_H
#define BATON_KERNELS_CPU_DECODER_FUSED_H

#include "baton/baton.h"

int baton__kcpu_swiglu(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);
int baton__kcpu_rope_cache_update(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                  size_t len);

#endif
