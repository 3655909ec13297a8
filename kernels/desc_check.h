/* desc_check.h: the one decoder and range check of each built-in kernel's descriptor, shared by
 * the CPU and CUDA kernels, the legacy XLA custom calls and the plan validator
 * (targets/builtin.c), so that all refuse the same descriptors with the same words. */
#ifndef BATON_KERNELS_DESC_CHECK_H
#define BATON_KERNELS_DESC_CHECK_H

#include <stddef.h>

#include "baton/baton.h"
#include "kernels/descriptors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The _decode functions copy a descriptor out of (opaque, len) and check its own ranges (its
 * size, dtype codes, counts >= 1 whose products fit in 64 bits, eps finite and >= 0, reserved
 * fields 0). 0, or BATON_EINVAL with one line in msg that starts with the field's name, e.g.
 * "n2 is -3: ...". They know nothing of the tensors: the validator compares the decoded fields
 * with the step's tensors, the kernels with their buffers' descriptors where they have them.
 * The _read functions are the same for a kernel: the reason goes to ctx, prefixed by `name`. */

/* rms_norm_fwd (bwd = 0) and rms_norm_bwd (bwd = 1): baton's 40 bytes, the backward's 48 (with
 * unsharded_part_grad_size, 0 or >= part_grad_size), or the JAX tutorial's 32
 * (baton_rms_norm_tutorial_desc, converted: its ElementType codes become baton_dtype codes).
 * part_grad_size must be >= 1 for the backward; the forward ignores it (>= 0). *tutorial, when
 * not NULL, is set when the bytes were the tutorial's layout. */
int baton__rms_norm_desc_decode(const char *opaque, size_t len, int bwd,
                                baton_rms_norm_shard_desc *d, int *tutorial, char *msg,
                                size_t msg_len);
int baton__rms_norm_desc_read(const baton_exec_ctx *ctx, const char *name, const char *opaque,
                              size_t len, int bwd, baton_rms_norm_shard_desc *d);
/* 1 when (opaque, len) is a valid RMSNorm descriptor but for n1 = 0, an empty batch (x of shape
 * (0, n)), which the XLA entry points answer without a kernel: nothing for the forward, zeros
 * for grad_weight and part_grad for the backward, as PyTorch does; *d is then decoded (n1 0). */
int baton__rms_norm_desc_empty_batch(const char *opaque, size_t len, int bwd,
                                     baton_rms_norm_shard_desc *d);

/* rms_norm_grad_weight: 24 bytes; pg_dtype f32 or f64, w_dtype a float, part_grad_size and n2 at
 * least 1 with their product in 64 bits. */
int baton__rms_grad_weight_desc_decode(const char *opaque, size_t len,
                                       baton_rms_grad_weight_desc *d, char *msg, size_t msg_len);
int baton__rms_grad_weight_desc_read(const baton_exec_ctx *ctx, const char *opaque, size_t len,
                                     baton_rms_grad_weight_desc *d);

/* softshrink, add, mul, add_scalar, copy: 32 bytes. binary: nb divides n (else nb is 0); ints:
 * i32 and i64 are accepted besides the floats; value finite. */
int baton__ew_desc_decode(const char *opaque, size_t len, int binary, int ints, baton_ew_desc *d,
                          char *msg, size_t msg_len);
int baton__ew_desc_read(const baton_exec_ctx *ctx, const char *name, const char *opaque, size_t len,
                        int binary, int ints, baton_ew_desc *d);

/* argmax: 24 bytes; n1, n2 >= 1, a float or integer dtype, reserved 0. */
int baton__argmax_desc_decode(const char *opaque, size_t len, baton_argmax_desc *d, char *msg,
                              size_t msg_len);
int baton__argmax_desc_read(const baton_exec_ctx *ctx, const char *opaque, size_t len,
                            baton_argmax_desc *d);

#ifdef __cplusplus
}
#endif
#endif /* BATON_KERNELS_DESC_CHECK_H */
