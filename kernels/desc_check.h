/* desc_check.h: descriptor checks that a kernel's CPU and CUDA implementations share, so that both
 * refuse the same descriptors with the same words. */
#ifndef BATON_KERNELS_DESC_CHECK_H
#define BATON_KERNELS_DESC_CHECK_H

#include <stddef.h>

#include "baton/baton.h"
#include "kernels/descriptors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies rms_norm_grad_weight's descriptor (opaque, len) to *d and checks it: 0, or BATON_EINVAL
 * with the reason through ctx (the size, pg_dtype f32 or f64, w_dtype a float, part_grad_size
 * and n2 at least 1 with their product in 64 bits). */
int rms_grad_weight_desc_read(const baton_exec_ctx *ctx, const char *opaque, size_t len,
                              baton_rms_grad_weight_desc *d);

#ifdef __cplusplus
}
#endif
#endif /* BATON_KERNELS_DESC_CHECK_H */
