/* decoder_fused.c: the fused decoder targets on the CPU. Each calls the unfused kernel on every
 * row (a signature of one row each), so swiglu gives silu_mul's bits and rope_cache_update those
 * of rope then kv_cache_update, however those kernels are written. Nothing is allocated. */
#include <string.h>

#include "core/core.h"
#include "kernels/cpu/cpu_decoder.h"
#include "kernels/cpu/cpu_decoder_fused.h"
#include "kernels/decoder_desc.h"

static baton_tensor_desc row_desc(baton_dtype dt, int64_t n)
{
    baton_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt;
    d.rank = 1;
    d.shape[0] = n;
    return d;
}

int baton__kcpu_swiglu(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    baton_decoder_desc d;
    dec_shape s;
    int rc = baton__dec_call_read(ctx, DEC_SWIGLU, buffers, 2, opaque, len, &d, &s);
    if (rc)
        return rc;
    baton_tensor_desc io[3] = {row_desc(s.x_dt, s.F), row_desc(s.x_dt, s.F), row_desc(s.x_dt, s.F)};
    const baton_sig_args sig = {.n_inputs = 2, .inputs = io, .n_outputs = 1, .outputs = io + 2};
    baton_decoder_desc sd = {.op = DEC_SILU_MUL};
    baton_exec_ctx c = *ctx;
    c.sig = &sig;
    const size_t esz = baton_dtype_size(s.x_dt), row = (size_t)s.F * esz;
    const char *gu = buffers[0];
    char *y = buffers[1];
    for (int64_t r = 0; r < s.rows; r++) {
        void *b[3] = {(void *)(gu + 2 * row * (size_t)r), (void *)(gu + 2 * row * (size_t)r + row),
                      y + row * (size_t)r};
        if ((rc = baton__kcpu_silu_mul(&c, b, (const char *)&sd, sizeof sd)))
            return rc;
    }
    return 0;
}

static int64_t pos_at(baton_dtype dt, const void *p, int64_t i)
{
    return dt == BATON_DTYPE_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

int baton__kcpu_rope_cache_update(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                  size_t len)
{
    baton_decoder_desc d;
    dec_shape s;
    int rc = baton__dec_call_read(ctx, DEC_ROPE_CACHE_UPDATE, buffers, 8, opaque, len, &d, &s);
    if (rc)
        return rc;
    const char *qkv = buffers[0], *pos = buffers[1];
    const void *inv_freq = buffers[2];
    char *q = buffers[5], *kc = buffers[6], *vc = buffers[7];
    for (int64_t r = 0; r < s.rows; r++) { /* every position first: on error nothing is written */
        const int64_t p = pos_at(s.idx_dt, pos, r);
        if (p < 0 || p >= s.S)
            return baton__ctx_fail(
                ctx, BATON_EKERNEL,
                "rope_cache_update: positions[%lld] = %lld is outside [0, %lld) (the "
                "cache's rows)",
                (long long)r, (long long)p, (long long)s.S);
    }
    const size_t esz = baton_dtype_size(s.x_dt), isz = baton_dtype_size(s.idx_dt);
    const size_t krow = (size_t)s.KF * esz;
    /* In place (the aliases) the caches are already the outputs; otherwise carry them over. */
    if (kc != buffers[3])
        memmove(kc, buffers[3], krow * (size_t)s.S);
    if (vc != buffers[4])
        memmove(vc, buffers[4], krow * (size_t)s.S);
    baton_tensor_desc qd[4] = {row_desc(s.x_dt, s.F), row_desc(s.idx_dt, 1),
                               row_desc(BATON_DTYPE_F32, d.head_dim / 2), row_desc(s.x_dt, s.F)};
    baton_tensor_desc kd[4] = {row_desc(s.x_dt, s.KF), row_desc(s.idx_dt, 1),
                               row_desc(BATON_DTYPE_F32, d.head_dim / 2), row_desc(s.x_dt, s.KF)};
    const baton_sig_args qsig = {.n_inputs = 3, .inputs = qd, .n_outputs = 1, .outputs = qd + 3};
    const baton_sig_args ksig = {.n_inputs = 3, .inputs = kd, .n_outputs = 1, .outputs = kd + 3};
    baton_decoder_desc rd = {
        .op = DEC_ROPE, .flags = d.flags, .head_dim = d.head_dim, .scale = d.scale};
    baton_exec_ctx cq = *ctx, ck = *ctx;
    cq.sig = &qsig;
    ck.sig = &ksig;
    for (int64_t r = 0; r < s.rows; r++) {
        const int64_t p = pos_at(s.idx_dt, pos, r);
        const char *row = qkv + (size_t)(r * s.QKV) * esz;
        void *bq[4] = {(void *)row, (void *)(pos + (size_t)r * isz), (void *)inv_freq,
                       q + (size_t)(r * s.F) * esz};
        void *bk[4] = {(void *)(row + (size_t)s.F * esz), (void *)(pos + (size_t)r * isz),
                       (void *)inv_freq, kc + (size_t)p * krow};
        if ((rc = baton__kcpu_rope(&cq, bq, (const char *)&rd, sizeof rd)) ||
            (rc = baton__kcpu_rope(&ck, bk, (const char *)&rd, sizeof rd)))
            return rc;
        memcpy(vc + (size_t)p * krow, row + (size_t)(s.F + s.KF) * esz, krow);
    }
    return 0;
}
