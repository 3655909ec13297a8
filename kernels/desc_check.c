/* desc_check.c: the descriptor decoders and checks that every user of a built-in descriptor shares
 * (desc_check.h): one check, one wording, whoever reads the bytes. */
#include "kernels/desc_check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/core.h"

#define RMS_LAYOUT                                                                                 \
    "baton_rms_norm_desc: n1, n2, eps, x_dtype, w_dtype, part_grad_size as int64/float64; or "     \
    "the JAX tutorial's 32-byte RMSNormDescriptor; see docs/kernels.md"

static int is_float_code(int32_t c)
{
    return c >= BATON_DTYPE_BF16 && c <= BATON_DTYPE_F64 && dtype_is_float((baton_dtype)c);
}

/* 0 when field `name` holds a float dtype code, else BATON_EINVAL with the reason in msg. */
static int float_code_check(const char *name, int32_t c, char *msg, size_t msg_len)
{
    if (is_float_code(c))
        return 0;
    return baton__reason_set(msg, msg_len, BATON_EINVAL,
                             "%s is code %d: it must be bf16 (1), f16 (2), f32 (3) or f64 (4)",
                             name, (int)c);
}

/* Counts of one descriptor: each >= 1 (or >= 0 where zero_ok) and, times 8 bytes, in 64 bits. */
static int counts_fit(int64_t a, int64_t b)
{
    return a >= 1 && b >= 1 && a <= INT64_MAX / 8 / b;
}

int baton__rms_norm_desc_decode(const char *opaque, size_t len, int bwd,
                                baton_rms_norm_shard_desc *d, int *tutorial, char *msg,
                                size_t msg_len)
{
    memset(d, 0, sizeof *d);
    if (tutorial)
        *tutorial = 0;
    if (opaque && len == sizeof(baton_rms_norm_tutorial_desc)) {
        baton_rms_norm_tutorial_desc t;
        memcpy(&t, opaque, sizeof t);
        /* ElementType {BF16, F16, F32, F64} is baton's bf16..f64 less one; anything else stays
         * out of range, so the dtype check below names it. */
        d->rms.n1 = t.n1;
        d->rms.n2 = t.n2;
        d->rms.eps = t.eps;
        d->rms.x_dtype = t.x_type >= 0 && t.x_type <= 3 ? t.x_type + 1 : -1;
        d->rms.w_dtype = t.w_type >= 0 && t.w_type <= 3 ? t.w_type + 1 : -1;
        d->rms.part_grad_size = t.part_grad_size;
        if (tutorial)
            *tutorial = 1;
        if (d->rms.x_dtype < 0 || d->rms.w_dtype < 0)
            return baton__reason_set(
                msg, msg_len, BATON_EINVAL,
                "%s is ElementType %d in the tutorial's 32-byte descriptor: it must "
                "be 0 (bf16), 1 (f16), 2 (f32) or 3 (f64)",
                d->rms.x_dtype < 0 ? "x_type" : "w_type",
                (int)(d->rms.x_dtype < 0 ? t.x_type : t.w_type));
    } else if (opaque && (len == sizeof(baton_rms_norm_desc) ||
                          (bwd && len == sizeof(baton_rms_norm_shard_desc)))) {
        memcpy(d, opaque, len);
    } else {
        return baton__reason_set(msg, msg_len, BATON_EINVAL,
                                 "the descriptor is %zu bytes but must be 40%s or 32 (%s)",
                                 opaque ? len : 0, bwd ? " or 48" : "", RMS_LAYOUT);
    }
    const baton_rms_norm_desc *r = &d->rms;
    if (float_code_check("x_dtype", r->x_dtype, msg, msg_len))
        return BATON_EINVAL;
    if (float_code_check("w_dtype", r->w_dtype, msg, msg_len))
        return BATON_EINVAL;
    if (!counts_fit(r->n1, r->n2))
        return baton__reason_set(
            msg, msg_len, BATON_EINVAL,
            "n1 = %lld rows of n2 = %lld elements: both must be >= 1 and their "
            "product fit in 64 bits",
            (long long)r->n1, (long long)r->n2);
    if (!(r->eps >= 0) || !isfinite(r->eps))
        return baton__reason_set(msg, msg_len, BATON_EINVAL,
                                 "eps is %g: it must be a finite number >= 0 (1e-5 is usual)",
                                 r->eps);
    if (bwd ? !counts_fit(r->part_grad_size, r->n2) : r->part_grad_size < 0)
        return baton__reason_set(msg, msg_len, BATON_EINVAL,
                                 "part_grad_size is %lld: it must be >= %d%s",
                                 (long long)r->part_grad_size, bwd ? 1 : 0,
                                 bwd ? " (the row blocks of part_grad; 16 is usual)" : "");
    const int64_t u = d->unsharded_part_grad_size;
    if (u < 0 || (u > 0 && u < r->part_grad_size))
        return baton__reason_set(
            msg, msg_len, BATON_EINVAL,
            "unsharded_part_grad_size is %lld: it must be 0 or >= part_grad_size "
            "(%lld), the part_grad_size of the call that this one is a row shard of",
            (long long)u, (long long)r->part_grad_size);
    return 0;
}

int baton__rms_norm_desc_empty_batch(const char *opaque, size_t len, int bwd,
                                     baton_rms_norm_shard_desc *d)
{
    char copy[sizeof(baton_rms_norm_shard_desc)], why[8];
    if (!opaque || len > sizeof copy || len < sizeof(int64_t))
        return 0;
    memcpy(copy, opaque, len);
    /* n1 is the first field in both layouts: 4 bytes in the tutorial's, 8 in baton's. */
    const size_t w =
        len == sizeof(baton_rms_norm_tutorial_desc) ? sizeof(int32_t) : sizeof(int64_t);
    int64_t n1 = 0;
    memcpy(&n1, copy, w); /* little-endian: the low bytes */
    if (n1 != 0)
        return 0;
    const int64_t one = 1;
    memcpy(copy, &one, w);
    if (baton__rms_norm_desc_decode(copy, len, bwd, d, NULL, why, sizeof why))
        return 0;
    d->rms.n1 = 0;
    return 1;
}

/* A _decode's reason, prefixed with the kernel's name, into ctx. */
static int ctx_reason(const baton_exec_ctx *ctx, const char *name, int rc, const char *msg)
{
    return rc ? baton__ctx_fail(ctx, rc, "%s: %s", name, msg) : 0;
}

int baton__rms_norm_desc_read(const baton_exec_ctx *ctx, const char *name, const char *opaque,
                              size_t len, int bwd, baton_rms_norm_shard_desc *d)
{
    char msg[320];
    return ctx_reason(ctx, name,
                      baton__rms_norm_desc_decode(opaque, len, bwd, d, NULL, msg, sizeof msg), msg);
}

int baton__rms_grad_weight_desc_decode(const char *opaque, size_t len,
                                       baton_rms_grad_weight_desc *d, char *msg, size_t msg_len)
{
    memset(d, 0, sizeof *d);
    if (!opaque || len != sizeof *d)
        return baton__reason_set(
            msg, msg_len, BATON_EINVAL,
            "the descriptor is %zu bytes but must be %zu (baton_rms_grad_weight_"
            "desc: part_grad_size, n2, pg_dtype, w_dtype; see docs/kernels.md)",
            opaque ? len : 0, sizeof *d);
    memcpy(d, opaque, sizeof *d);
    if (d->pg_dtype != BATON_DTYPE_F32 && d->pg_dtype != BATON_DTYPE_F64)
        return baton__reason_set(msg, msg_len, BATON_EINVAL,
                                 "pg_dtype is code %d: it must be f32 (3) or f64 (4)",
                                 (int)d->pg_dtype);
    if (float_code_check("w_dtype", d->w_dtype, msg, msg_len))
        return BATON_EINVAL;
    if (!counts_fit(d->part_grad_size, d->n2))
        return baton__reason_set(
            msg, msg_len, BATON_EINVAL,
            "part_grad_size = %lld rows of n2 = %lld elements: both must be >= 1 "
            "and their product fit in 64 bits",
            (long long)d->part_grad_size, (long long)d->n2);
    return 0;
}

int baton__rms_grad_weight_desc_read(const baton_exec_ctx *ctx, const char *opaque, size_t len,
                                     baton_rms_grad_weight_desc *d)
{
    char msg[320];
    return ctx_reason(ctx, "rms_norm_grad_weight",
                      baton__rms_grad_weight_desc_decode(opaque, len, d, msg, sizeof msg), msg);
}

int baton__ew_desc_decode(const char *opaque, size_t len, int binary, int ints, baton_ew_desc *d,
                          char *msg, size_t msg_len)
{
    memset(d, 0, sizeof *d);
    if (!opaque || len != sizeof *d)
        return baton__reason_set(
            msg, msg_len, BATON_EINVAL,
            "the descriptor is %zu bytes but must be %zu (baton_ew_desc: n, nb, "
            "dtype, reserved, value; see docs/kernels.md)",
            opaque ? len : 0, sizeof *d);
    memcpy(d, opaque, sizeof *d);
    const baton_dtype dt = (baton_dtype)d->dtype;
    const int ok = d->dtype >= BATON_DTYPE_BF16 && d->dtype <= BATON_DTYPE_I64 &&
                   (dtype_is_float(dt) || (ints && dtype_is_int(dt)));
    if (!ok)
        return baton__reason_set(msg, msg_len, BATON_EINVAL, "dtype is code %d: it must be %s",
                                 (int)d->dtype,
                                 ints ? "bf16 (1), f16 (2), f32 (3), f64 (4), i32 (5) or i64 (6)"
                                      : "bf16 (1), f16 (2), f32 (3) or f64 (4)");
    if (d->n < 1 || d->n > INT64_MAX / 8)
        return baton__reason_set(msg, msg_len, BATON_EINVAL, "n is %lld elements: it must be >= 1",
                                 (long long)d->n);
    if (binary) {
        if (d->nb < 1 || d->nb > d->n || d->n % d->nb != 0)
            return baton__reason_set(
                msg, msg_len, BATON_EINVAL,
                "nb is %lld but n is %lld: b must have n elements or a divisor of "
                "n (then it repeats)",
                (long long)d->nb, (long long)d->n);
    } else if (d->nb != 0) {
        return baton__reason_set(msg, msg_len, BATON_EINVAL,
                                 "nb is %lld: it must be 0 for a kernel with one input",
                                 (long long)d->nb);
    }
    if (d->reserved != 0)
        return baton__reason_set(msg, msg_len, BATON_EINVAL,
                                 "reserved (bytes 20-23) is %d: it must be 0", (int)d->reserved);
    if (!isfinite(d->value))
        return baton__reason_set(msg, msg_len, BATON_EINVAL, "value is %g: it must be finite",
                                 d->value);
    return 0;
}

int baton__ew_desc_read(const baton_exec_ctx *ctx, const char *name, const char *opaque, size_t len,
                        int binary, int ints, baton_ew_desc *d)
{
    char msg[320];
    return ctx_reason(ctx, name,
                      baton__ew_desc_decode(opaque, len, binary, ints, d, msg, sizeof msg), msg);
}

int baton__argmax_desc_decode(const char *opaque, size_t len, baton_argmax_desc *d, char *msg,
                              size_t msg_len)
{
    memset(d, 0, sizeof *d);
    if (!opaque || len != sizeof *d)
        return baton__reason_set(
            msg, msg_len, BATON_EINVAL,
            "the descriptor is %zu bytes but must be %zu (baton_argmax_desc: n1, "
            "n2, dtype, reserved; see docs/kernels.md)",
            opaque ? len : 0, sizeof *d);
    memcpy(d, opaque, sizeof *d);
    const baton_dtype dt = (baton_dtype)d->dtype;
    if (d->dtype < BATON_DTYPE_BF16 || d->dtype > BATON_DTYPE_I64 ||
        !(dtype_is_float(dt) || dtype_is_int(dt)))
        return baton__reason_set(
            msg, msg_len, BATON_EINVAL,
            "dtype is code %d: it must be bf16 (1), f16 (2), f32 (3), f64 (4), "
            "i32 (5) or i64 (6)",
            (int)d->dtype);
    if (!counts_fit(d->n1, d->n2))
        return baton__reason_set(
            msg, msg_len, BATON_EINVAL,
            "n1 = %lld rows of n2 = %lld elements: both must be >= 1 and their "
            "product fit in 64 bits",
            (long long)d->n1, (long long)d->n2);
    if (d->reserved != 0)
        return baton__reason_set(msg, msg_len, BATON_EINVAL,
                                 "reserved (bytes 20-23) is %d: it must be 0", (int)d->reserved);
    return 0;
}

int baton__argmax_desc_read(const baton_exec_ctx *ctx, const char *opaque, size_t len,
                            baton_argmax_desc *d)
{
    char msg[320];
    return ctx_reason(ctx, "argmax", baton__argmax_desc_decode(opaque, len, d, msg, sizeof msg),
                      msg);
}
