/* desc_check.c: descriptor checks shared by the CPU and CUDA kernels (desc_check.h). */
#include "kernels/desc_check.h"

#include <string.h>

#include "core/core.h"

int rms_grad_weight_desc_read(const baton_exec_ctx *ctx, const char *opaque, size_t len,
                              baton_rms_grad_weight_desc *d)
{
    const char *name = "rms_norm_grad_weight";
    if (!opaque || len != sizeof *d)
        return ctx_fail(ctx, BATON_EINVAL,
                        "%s: the descriptor is %zu bytes but must be %zu (baton_rms_grad_weight_"
                        "desc: part_grad_size, n2, pg_dtype, w_dtype; see docs/kernels.md)",
                        name, opaque ? len : 0, sizeof *d);
    memcpy(d, opaque, sizeof *d);
    if (d->pg_dtype != BATON_DTYPE_F32 && d->pg_dtype != BATON_DTYPE_F64)
        return ctx_fail(ctx, BATON_EINVAL, "%s: pg_dtype is code %d, not f32 (3) or f64 (4)", name,
                        (int)d->pg_dtype);
    if (d->w_dtype != BATON_DTYPE_BF16 && d->w_dtype != BATON_DTYPE_F16 &&
        d->w_dtype != BATON_DTYPE_F32 && d->w_dtype != BATON_DTYPE_F64)
        return ctx_fail(ctx, BATON_EINVAL,
                        "%s: w_dtype is code %d, not bf16 (1), f16 (2), f32 (3) or f64 (4)", name,
                        (int)d->w_dtype);
    if (d->part_grad_size < 1 || d->n2 < 1 || d->part_grad_size > INT64_MAX / 8 / d->n2)
        return ctx_fail(ctx, BATON_EINVAL,
                        "%s: part_grad_size = %lld rows of n2 = %lld elements: both must be >= 1 "
                        "and their product fit in 64 bits",
                        name, (long long)d->part_grad_size, (long long)d->n2);
    return 0;
}
