/* tune.h: the prepare-time hooks of a kernel (tuning, and deciding its calls once), shared by the
 * layers that provide it (the CUDA kernels), name it (the registry, the plan) and call it (the CUDA
 * device), so that none of them includes another's headers the wrong way. */
#ifndef BATON_CORE_TUNE_H
#define BATON_CORE_TUNE_H

#include <stddef.h>

#include "baton/baton.h"

/* Chooses, for a call as the kernel will receive it (ctx not capturing, buffers, opaque), among
 * the kernel's variants that give its default's bits, by timing them on these buffers (which it
 * may overwrite: call it before their contents matter), and remembers the choice where the
 * kernel's calls with ctx->autotune find it. Writes a one-line account of the choice into note
 * (note_len bytes, may be 0). Returns 0, or a negative code with the reason in ctx->errbuf. */
typedef int (*kernel_tune_fn)(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                              size_t opaque_len, char *note, size_t note_len);

/* Decides, once at prepare, what a kernel would otherwise decide on every call of this step
 * (decode and check its descriptor, choose its layout and tuned variant), for a call as the kernel
 * will receive it (ctx, buffers, opaque); the runtime hands *state to every call as
 * ctx->prepared and frees it with free() when it is destroyed. The kernel keys what it kept by
 * what it was derived from and decides again when that changes (the dims of a plan change the
 * descriptor). Returns 0 (*state may be NULL: nothing kept), or a negative code with the reason
 * in ctx->errbuf. */
typedef int (*kernel_prepare_fn)(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                 size_t opaque_len, void **state);
/* The run-time error record of a CUDA kernel family (the decoder ops record an index out of range
 * on the device, clamping the access): reads and clears it for CUDA device `device` once the host
 * has waited for the device. 0 when none; else a negative code, the failing step's index in *step
 * (-1 if unknown) and the reason in msg. */
typedef int (*kernel_error_fn)(int device, int *step, char *msg, size_t len);

#endif /* BATON_CORE_TUNE_H */
