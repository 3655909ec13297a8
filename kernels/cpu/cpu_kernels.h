/* cpu_kernels.h: baton's built-in kernels on the CPU, in the custom-call convention of
 * baton_kernel_fn (buffers = inputs then outputs; opaque = the descriptors in descriptors.h).
 * They are the reference path: every GPU kernel is checked against the same function. */
#ifndef BATON_KERNELS_CPU_H
#define BATON_KERNELS_CPU_H

#include "baton/baton.h"

int baton__kcpu_rms_norm_fwd(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                             size_t len);
int baton__kcpu_rms_norm_bwd(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                             size_t len);
/* grad_weight from rms_norm_bwd's part_grad (baton_rms_grad_weight_desc): the same bits as the
 * backward's own grad_weight from that part_grad. */
int baton__kcpu_rms_norm_grad_weight(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                     size_t len);
int baton__kcpu_softshrink(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                           size_t len);
int baton__kcpu_add(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);
int baton__kcpu_mul(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);
int baton__kcpu_add_scalar(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                           size_t len);
int baton__kcpu_copy(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);
int baton__kcpu_argmax(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);
/* A kernel that does nothing, for measuring the scheduler's own cost ("noop" target). */
int baton__kcpu_noop(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len);

#endif
