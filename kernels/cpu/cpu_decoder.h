/* cpu_decoder.h: the decoder ops on the CPU (kernels/cpu/decoder.c; sample in sample.c), in the
 * baton_kernel_fn convention; the descriptor is baton_decoder_desc (kernels/decoder_desc.h) and the
 * shapes come from ctx->sig. */
#ifndef BATON_KERNELS_CPU_DECODER_H
#define BATON_KERNELS_CPU_DECODER_H

#include <stdint.h>

#include "baton/baton.h"

#define KCPU_DECODER_FN(name)                                                                      \
    int baton__kcpu_##name(const baton_exec_ctx *ctx, void **buffers, const char *opaque,          \
                           size_t len);
KCPU_DECODER_FN(embedding)
KCPU_DECODER_FN(rope)
KCPU_DECODER_FN(kv_cache_update)
KCPU_DECODER_FN(attention)
KCPU_DECODER_FN(silu_mul)
KCPU_DECODER_FN(silu)
KCPU_DECODER_FN(gelu)
KCPU_DECODER_FN(softmax)
KCPU_DECODER_FN(cast)
KCPU_DECODER_FN(sample)
#undef KCPU_DECODER_FN

/* The sampler's weights of f[0..n) as its loops compute them (in vector lanes where the CPU has
 * them), for the tests to hold against dec_sample_weight. */
void baton__kcpu_sample_weights(const float *f, int64_t n, float mx, float inv_t, uint64_t *w);

#endif
