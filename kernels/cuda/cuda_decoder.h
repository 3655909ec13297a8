/* cuda_decoder.h: the decoder ops on CUDA (kernels/cuda/decoder_*.cu), in the baton_kernel_fn
 * convention. No CUDA header here, so the registry can name them in any build. */
#ifndef BATON_KERNELS_CUDA_DECODER_H
#define BATON_KERNELS_CUDA_DECODER_H

#include <stddef.h>

#include "baton/baton.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each op's kernel, and its prepare hook (core/tune.h's kernel_prepare_fn): the call's descriptor
 * read and its shapes checked once, kept for the kernel's calls (ctx->prepared). */
#define KCUDA_DECODER_FN(name)                                                                     \
    int baton__kcuda_##name(const baton_exec_ctx *ctx, void **buffers, const char *opaque,         \
                            size_t len);                                                           \
    int baton__kcuda_##name##_prepare(const baton_exec_ctx *ctx, void **buffers,                   \
                                      const char *opaque, size_t len, void **state);
KCUDA_DECODER_FN(embedding)
KCUDA_DECODER_FN(rope)
KCUDA_DECODER_FN(kv_cache_update)
KCUDA_DECODER_FN(attention)
KCUDA_DECODER_FN(silu_mul)
KCUDA_DECODER_FN(silu)
KCUDA_DECODER_FN(gelu)
KCUDA_DECODER_FN(softmax)
KCUDA_DECODER_FN(cast)
KCUDA_DECODER_FN(sample)
KCUDA_DECODER_FN(swiglu)
KCUDA_DECODER_FN(rope_cache_update)
#undef KCUDA_DECODER_FN

/* Run-time errors of the decoder kernels (an id or a position out of range): a kernel that meets
 * one clamps the access, so nothing is read or written out of bounds, and records the first such
 * error of the device in a device-side word (first writer wins). This reads and clears that
 * record of `device`: 0 when none, else BATON_EKERNEL, the step's index (ctx->step_index of the
 * call) in *step (may be NULL) and "embedding at step #3 on cuda:0: ids[0] = 130000 is outside
 * [0, 128256) ..." in msg. Call it where the host has waited anyway (the runtime does, at the end
 * of a run: core/tune.h's kernel_error_fn). The first call on a device gives the record a copy in
 * mapped pinned host memory (and synchronises the device once); after that a check without an
 * error reads host memory only, and only an error costs synchronous copies from the device. */
int baton__kcuda_decoder_error_take(int device, int *step, char *msg, size_t len);

#ifdef __cplusplus
}
#endif
#endif
