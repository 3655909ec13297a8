/* elementwise.c: the CPU elementwise kernels (softshrink, add, mul, add_scalar, copy), argmax and
 * noop. Floats are computed in double on stack chunks and rounded once to the dtype (with
 * scalars first rounded to f32 for 16/32-bit dtypes, so results equal f32 arithmetic, as on the
 * GPU); integers wrap in two's complement. Nothing is allocated. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_common.h"
#include "kernels/desc_check.h"
#include "kernels/descriptors.h"

enum ew_kind { EW_UNARY = 0, EW_BINARY = 1 };

/* Validates an elementwise descriptor (desc_check.h) and its buffers. */
static int read_ew(const baton_exec_ctx *ctx, const char *name, int binary, int ints,
                   void **buffers, const char *opaque, size_t len, baton_ew_desc *d)
{
    int rc = ew_desc_read(ctx, name, opaque, len, binary, ints, d);
    return rc ? rc : check_buffers(ctx, name, buffers, binary ? 3 : 2);
}

/* The scalar as the computation sees it: f32 for bf16/f16/f32 data, as GPU kernels use it. */
static double scalar_for(baton_dtype dt, double v)
{
    return dt == BATON_DTYPE_F64 ? v : (double)(float)v;
}

int kcpu_softshrink(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    baton_ew_desc d;
    int rc = read_ew(ctx, "softshrink", EW_UNARY, 0, buffers, opaque, len, &d);
    if (rc)
        return rc;
    if (d.value < 0)
        return ctx_fail(ctx, BATON_EINVAL, "softshrink: lambda is %g: it must be >= 0", d.value);
    const baton_dtype dt = (baton_dtype)d.dtype;
    const double l = scalar_for(dt, d.value);
    double b[CHUNK];
    for (int64_t j = 0; j < d.n; j += CHUNK) {
        int c = d.n - j < CHUNK ? (int)(d.n - j) : CHUNK;
        load_chunk(dt, buffers[0], j, c, b);
        /* NaN falls to the last branch and gives 0, as in the formula and the CUDA kernel. */
        for (int i = 0; i < c; i++) {
            double v = b[i];
            b[i] = v > l ? v - l : v < -l ? v + l : 0.0;
        }
        store_chunk(dt, buffers[1], j, c, b);
    }
    return 0;
}

enum bin_op { OP_ADD, OP_MUL };

static int binary(const baton_exec_ctx *ctx, const char *name, enum bin_op op, void **buffers,
                  const char *opaque, size_t len)
{
    baton_ew_desc d;
    int rc = read_ew(ctx, name, EW_BINARY, 1, buffers, opaque, len, &d);
    if (rc)
        return rc;
    const baton_dtype dt = (baton_dtype)d.dtype;
    const void *a = buffers[0], *b = buffers[1];
    void *y = buffers[2];
    if (dt == BATON_DTYPE_I32) {
        const int32_t *pa = a, *pb = b;
        int32_t *py = y;
        for (int64_t i = 0, j = 0; i < d.n; i++, j = j + 1 == d.nb ? 0 : j + 1) {
            uint32_t u = (uint32_t)pa[i], v = (uint32_t)pb[j];
            py[i] = (int32_t)(op == OP_ADD ? u + v : u * v);
        }
        return 0;
    }
    if (dt == BATON_DTYPE_I64) {
        const int64_t *pa = a, *pb = b;
        int64_t *py = y;
        for (int64_t i = 0, j = 0; i < d.n; i++, j = j + 1 == d.nb ? 0 : j + 1) {
            uint64_t u = (uint64_t)pa[i], v = (uint64_t)pb[j];
            py[i] = (int64_t)(op == OP_ADD ? u + v : u * v);
        }
        return 0;
    }
    double ba[CHUNK], bb[CHUNK];
    for (int64_t i0 = 0; i0 < d.n; i0 += CHUNK) {
        int c = d.n - i0 < CHUNK ? (int)(d.n - i0) : CHUNK;
        load_chunk(dt, a, i0, c, ba);
        if (d.nb == d.n) {
            load_chunk(dt, b, i0, c, bb);
        } else {
            /* b repeats: gather its elements for this chunk, in runs that do not wrap. */
            int64_t jb = i0 % d.nb;
            for (int t = 0; t < c;) {
                int run = d.nb - jb < c - t ? (int)(d.nb - jb) : c - t;
                load_chunk(dt, b, jb, run, bb + t);
                t += run;
                jb = 0;
            }
        }
        if (op == OP_ADD)
            for (int t = 0; t < c; t++)
                ba[t] += bb[t];
        else
            for (int t = 0; t < c; t++)
                ba[t] *= bb[t];
        store_chunk(dt, y, i0, c, ba);
    }
    return 0;
}

int kcpu_add(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return binary(ctx, "add", OP_ADD, buffers, opaque, len);
}

int kcpu_mul(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return binary(ctx, "mul", OP_MUL, buffers, opaque, len);
}

int kcpu_add_scalar(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    baton_ew_desc d;
    int rc = read_ew(ctx, "add_scalar", EW_UNARY, 1, buffers, opaque, len, &d);
    if (rc)
        return rc;
    const baton_dtype dt = (baton_dtype)d.dtype;
    if (dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64) {
        double lim = dt == BATON_DTYPE_I32 ? 2147483648.0 : 9223372036854775808.0;
        if (d.value != floor(d.value) || d.value >= lim || d.value < -lim)
            return ctx_fail(ctx, BATON_EINVAL,
                            "add_scalar: value %.17g is not an integer in %s's range", d.value,
                            baton_dtype_name(dt));
        if (dt == BATON_DTYPE_I32) {
            const int32_t *x = buffers[0];
            int32_t *y = buffers[1];
            uint32_t v = (uint32_t)(int32_t)d.value;
            for (int64_t i = 0; i < d.n; i++)
                y[i] = (int32_t)((uint32_t)x[i] + v);
        } else {
            const int64_t *x = buffers[0];
            int64_t *y = buffers[1];
            uint64_t v = (uint64_t)(int64_t)d.value;
            for (int64_t i = 0; i < d.n; i++)
                y[i] = (int64_t)((uint64_t)x[i] + v);
        }
        return 0;
    }
    const double v = scalar_for(dt, d.value);
    double b[CHUNK];
    for (int64_t j = 0; j < d.n; j += CHUNK) {
        int c = d.n - j < CHUNK ? (int)(d.n - j) : CHUNK;
        load_chunk(dt, buffers[0], j, c, b);
        for (int i = 0; i < c; i++)
            b[i] += v;
        store_chunk(dt, buffers[1], j, c, b);
    }
    return 0;
}

int kcpu_copy(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    baton_ew_desc d;
    int rc = read_ew(ctx, "copy", EW_UNARY, 1, buffers, opaque, len, &d);
    if (rc)
        return rc;
    if (buffers[0] != buffers[1])
        memmove(buffers[1], buffers[0], (size_t)d.n * baton_dtype_size((baton_dtype)d.dtype));
    return 0;
}

int kcpu_argmax(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    baton_argmax_desc d;
    int rc = argmax_desc_read(ctx, opaque, len, &d);
    if (rc)
        return rc;
    if (!buffers || !buffers[0] || !buffers[1])
        return ctx_fail(ctx, BATON_EINVAL, "argmax: a NULL buffer (x, out expected)");
    const baton_dtype dt = (baton_dtype)d.dtype;
    int64_t *out = buffers[1];
    if (dtype_is_int(dt)) { /* exact: an i64 above 2^53 would round through double */
        for (int64_t r = 0; r < d.n1; r++) {
            int64_t best = 0, bv = INT64_MIN;
            for (int64_t j = 0; j < d.n2; j++) {
                int64_t v = dt == BATON_DTYPE_I32 ? ((const int32_t *)buffers[0])[r * d.n2 + j]
                                                  : ((const int64_t *)buffers[0])[r * d.n2 + j];
                if (j == 0 || v > bv) {
                    bv = v;
                    best = j;
                }
            }
            out[r] = best;
        }
        return 0;
    }
    double b[CHUNK];
    for (int64_t r = 0; r < d.n1; r++) {
        int64_t best = 0;
        double bv = -INFINITY;
        int found_nan = 0;
        for (int64_t j = 0; j < d.n2 && !found_nan; j += CHUNK) {
            int c = d.n2 - j < CHUNK ? (int)(d.n2 - j) : CHUNK;
            load_chunk(dt, buffers[0], r * d.n2 + j, c, b);
            for (int i = 0; i < c; i++) {
                if (isnan(b[i])) {
                    best = j + i;
                    found_nan = 1;
                    break;
                }
                if (b[i] > bv) {
                    bv = b[i];
                    best = j + i;
                }
            }
        }
        out[r] = best;
    }
    return 0;
}

int kcpu_noop(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return 0;
}
