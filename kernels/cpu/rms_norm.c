/* rms_norm.c: RMSNorm forward, backward and grad_weight from a part_grad on the CPU, the reference
 * path every GPU kernel is checked against. Accumulates in double; rows are processed in chunks
 * converted to double on the stack, so nothing is allocated and a 262144-element row takes well
 * under a millisecond. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_common.h"
#include "kernels/desc_check.h"
#include "kernels/descriptors.h"

/* Validates the descriptor (any layout desc_check.h accepts) and the buffers; on success *d
 * holds it in baton's layout. The 48-byte form's unsharded_part_grad_size is only read by the
 * CUDA layout (the CPU adds a block's rows in order at any size): checked, then ignored. */
static int read_desc(const baton_exec_ctx *ctx, const char *name, void **buffers, int n_buffers,
                     const char *opaque, size_t len, int bwd, baton_rms_norm_desc *d)
{
    baton_rms_norm_shard_desc sd;
    int rc = baton__rms_norm_desc_read(ctx, name, opaque, len, bwd, &sd);
    if (rc)
        return rc;
    *d = sd.rms;
    return check_buffers(ctx, name, buffers, n_buffers);
}

static baton_dtype invvar_dtype(baton_dtype x)
{
    return x == BATON_DTYPE_F64 ? BATON_DTYPE_F64 : BATON_DTYPE_F32;
}

/* Outside noinline, so that no floating-point operation moves across the mode switch. */
__attribute__((noinline)) static int rms_norm_fwd_ieee(const baton_exec_ctx *ctx, void **buffers,
                                                       const char *opaque, size_t len)
{
    baton_rms_norm_desc d;
    int rc = read_desc(ctx, "rms_norm_fwd", buffers, 4, opaque, len, 0, &d);
    if (rc)
        return rc;
    const baton_dtype xdt = (baton_dtype)d.x_dtype, wdt = (baton_dtype)d.w_dtype;
    const void *x = buffers[0], *w = buffers[1];
    void *y = buffers[2], *invvar = buffers[3];
    double xb[CHUNK], wb[CHUNK];
    for (int64_t r = 0; r < d.n1; r++) {
        const int64_t row = r * d.n2;
        double ss = 0;
        for (int64_t j = 0; j < d.n2; j += CHUNK) {
            int c = d.n2 - j < CHUNK ? (int)(d.n2 - j) : CHUNK;
            load_chunk(xdt, x, row + j, c, xb);
            for (int i = 0; i < c; i++)
                ss += xb[i] * xb[i];
        }
        const double iv = 1.0 / sqrt(ss / (double)d.n2 + d.eps);
        store_f64(invvar_dtype(xdt), invvar, r, iv);
        for (int64_t j = 0; j < d.n2; j += CHUNK) {
            int c = d.n2 - j < CHUNK ? (int)(d.n2 - j) : CHUNK;
            load_chunk(xdt, x, row + j, c, xb);
            load_chunk(wdt, w, j, c, wb);
            for (int i = 0; i < c; i++)
                xb[i] = wb[i] * (xb[i] * iv);
            store_chunk(wdt, y, row + j, c, xb);
        }
    }
    return 0;
}

/* grad_weight = the column sum of part_grad (P rows of n2, dtype pgdt), in block order, in
 * double and rounded once to wdt: deterministic. rms_norm_bwd and rms_norm_grad_weight both call
 * this, so that from the same part_grad they write the same bits. */
static void column_sum(baton_dtype pgdt, const void *part, int64_t P, int64_t n2, baton_dtype wdt,
                       void *gw)
{
    double acc[CHUNK], pb[CHUNK];
    for (int64_t j = 0; j < n2; j += CHUNK) {
        int c = n2 - j < CHUNK ? (int)(n2 - j) : CHUNK;
        memset(acc, 0, sizeof(double) * (size_t)c);
        for (int64_t p = 0; p < P; p++) {
            load_chunk(pgdt, part, p * n2 + j, c, pb);
            for (int i = 0; i < c; i++)
                acc[i] += pb[i];
        }
        store_chunk(wdt, gw, j, c, acc);
    }
}

/* Outside noinline, so that no floating-point operation moves across the mode switch. */
__attribute__((noinline)) static int rms_norm_bwd_ieee(const baton_exec_ctx *ctx, void **buffers,
                                                       const char *opaque, size_t len)
{
    baton_rms_norm_desc d;
    int rc = read_desc(ctx, "rms_norm_bwd", buffers, 7, opaque, len, 1, &d);
    if (rc)
        return rc;
    const baton_dtype xdt = (baton_dtype)d.x_dtype, wdt = (baton_dtype)d.w_dtype;
    const baton_dtype ivdt = invvar_dtype(xdt);
    const void *g = buffers[0], *invvar = buffers[1], *x = buffers[2], *w = buffers[3];
    void *gi = buffers[4], *gw = buffers[5], *part = buffers[6];
    double gb[CHUNK], xb[CHUNK], wb[CHUNK];

    /* grad_input = invvar * (g*w - x * invvar^2 * mean(g*w*x)), row by row. */
    for (int64_t r = 0; r < d.n1; r++) {
        const int64_t row = r * d.n2;
        const double iv = load_f64(ivdt, invvar, r);
        double s = 0;
        for (int64_t j = 0; j < d.n2; j += CHUNK) {
            int c = d.n2 - j < CHUNK ? (int)(d.n2 - j) : CHUNK;
            load_chunk(wdt, g, row + j, c, gb);
            load_chunk(xdt, x, row + j, c, xb);
            load_chunk(wdt, w, j, c, wb);
            for (int i = 0; i < c; i++)
                s += gb[i] * wb[i] * xb[i];
        }
        const double k = iv * iv * (s / (double)d.n2);
        for (int64_t j = 0; j < d.n2; j += CHUNK) {
            int c = d.n2 - j < CHUNK ? (int)(d.n2 - j) : CHUNK;
            load_chunk(wdt, g, row + j, c, gb);
            load_chunk(xdt, x, row + j, c, xb);
            load_chunk(wdt, w, j, c, wb);
            for (int i = 0; i < c; i++)
                xb[i] = iv * (gb[i] * wb[i] - xb[i] * k);
            store_chunk(xdt, gi, row + j, c, xb);
        }
    }

    /* part_grad row p = sum over the rows of block p of g * x * invvar, accumulated in double and
     * rounded once; blocks are ceil(n1 / part_grad_size) contiguous rows, trailing ones may be
     * empty (zeros). */
    const int64_t pgs = d.part_grad_size;
    const int64_t block = (d.n1 + pgs - 1) / pgs;
    double acc[CHUNK];
    for (int64_t p = 0; p < pgs; p++) {
        const int64_t r0 = p * block < d.n1 ? p * block : d.n1;
        const int64_t r1 = r0 + block < d.n1 ? r0 + block : d.n1;
        for (int64_t j = 0; j < d.n2; j += CHUNK) {
            int c = d.n2 - j < CHUNK ? (int)(d.n2 - j) : CHUNK;
            memset(acc, 0, sizeof(double) * (size_t)c);
            for (int64_t r = r0; r < r1; r++) {
                const double iv = load_f64(ivdt, invvar, r);
                load_chunk(wdt, g, r * d.n2 + j, c, gb);
                load_chunk(xdt, x, r * d.n2 + j, c, xb);
                for (int i = 0; i < c; i++)
                    acc[i] += gb[i] * xb[i] * iv;
            }
            store_chunk(ivdt, part, p * d.n2 + j, c, acc);
        }
    }

    column_sum(ivdt, part, pgs, d.n2, wdt, gw);
    return 0;
}

__attribute__((noinline)) static int
rms_norm_grad_weight_ieee(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    const char *name = "rms_norm_grad_weight";
    baton_rms_grad_weight_desc d;
    int rc = baton__rms_grad_weight_desc_read(ctx, opaque, len, &d);
    if (rc)
        return rc;
    rc = check_buffers(ctx, name, buffers, 3);
    if (rc)
        return rc;
    /* buffers[1], the weight, only gave the plan grad_weight's dtype and shape. */
    column_sum((baton_dtype)d.pg_dtype, buffers[0], d.part_grad_size, d.n2, (baton_dtype)d.w_dtype,
               buffers[2]);
    return 0;
}

int baton__kcpu_rms_norm_fwd(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                             size_t len)
{
    const fp_mode m = fp_mode_ieee();
    const int rc = rms_norm_fwd_ieee(ctx, buffers, opaque, len);
    fp_mode_restore(m);
    return rc;
}

int baton__kcpu_rms_norm_bwd(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                             size_t len)
{
    const fp_mode m = fp_mode_ieee();
    const int rc = rms_norm_bwd_ieee(ctx, buffers, opaque, len);
    fp_mode_restore(m);
    return rc;
}

int baton__kcpu_rms_norm_grad_weight(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                     size_t len)
{
    const fp_mode m = fp_mode_ieee();
    const int rc = rms_norm_grad_weight_ieee(ctx, buffers, opaque, len);
    fp_mode_restore(m);
    return rc;
}
