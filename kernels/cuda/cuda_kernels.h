/* cuda_kernels.h: baton's built-in kernels on CUDA devices, in the baton_kernel_fn convention
 * (ctx->stream is the cudaStream_t; buffers are device pointers). This header includes no CUDA
 * header so that the registry can name these functions in any build. */
#ifndef BATON_KERNELS_CUDA_H
#define BATON_KERNELS_CUDA_H

#include "baton/baton.h"

#ifdef __cplusplus
extern "C" {
#endif

int baton__kcuda_rms_norm_fwd(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                              size_t len);
int baton__kcuda_rms_norm_bwd(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                              size_t len);
int baton__kcuda_rms_norm_grad_weight(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                      size_t len);
int baton__kcuda_softshrink(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                            size_t len);
int baton__kcuda_add(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);
int baton__kcuda_mul(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);
int baton__kcuda_add_scalar(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                            size_t len);
int baton__kcuda_copy(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);
int baton__kcuda_argmax(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);
int baton__kcuda_noop(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);

/* Prepare-time tuning of the RMSNorm kernels (rms_norm_tune.cu; core/tune.h's kernel_tune_fn):
 * times the variants that give the default's bits on the call's own buffers, which it overwrites,
 * and caches the fastest for the GPU's name and the shape class, where calls with
 * ctx->autotune find it. Writes what the call will launch, and why, into note. Never while
 * capturing (BATON_ESTATE). */
int baton__kcuda_rms_norm_fwd_tune(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                   size_t len, char *note, size_t note_len);
int baton__kcuda_rms_norm_bwd_tune(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                   size_t len, char *note, size_t note_len);

/* cudaMemsetAsync(p, 0, bytes) on stream, for the XLA entry points (kernels/ffi/ may not include
 * CUDA headers): 0, or BATON_ECUDA with the reason in err. */
int baton__kcuda_zero_async(void *p, size_t bytes, void *stream, char *err, size_t errlen);

/* Decide an RMSNorm call once (core/tune.h's kernel_prepare_fn): check the descriptor and keep
 * it decoded, with the layout, the tuned variant and the kernels chosen for it, which
 * baton__kcuda_rms_norm_fwd / _bwd then only launch (given it as ctx->prepared) while the
 * descriptor, the buffers' alignment, the device and autotune stay those it was decided for. */
int baton__kcuda_rms_norm_fwd_prepare(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                      size_t len, void **state);
int baton__kcuda_rms_norm_bwd_prepare(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                      size_t len, void **state);

#ifdef __cplusplus
}
#endif

#endif
