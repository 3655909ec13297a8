/* decoder.c: the decoder ops on the CPU (embedding, rope, kv_cache_update, attention, silu_mul,
 * silu, gelu, softmax, cast; sample is in sample.c). Math in f32 for bf16/f16/f32 data and in f64
 * for f64 data (decoder_impl.h, included once per type); shapes from ctx->sig on every call;
 * nothing is allocated. Indices and positions are checked before anything is written, so a run
 * error leaves the outputs (the KV cache included) as they were. */
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "core/simd.h"
#include "core/threads.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_decoder.h"
#include "kernels/cpu/decoder_read.h"
#include "kernels/decoder_desc.h"

/* ---- conversions of runs of elements --------------------------------------------------------- */

/* bf16/f16/f32 runs to and from f32 in vectors (core/simd.h: the scalar conversions' bits). */
static inline void ld_f32(baton_dtype dt, const void *p, int64_t off, int n, float *out)
{
    baton__cvt_to_f32(dt, (const char *)p + baton_dtype_size(dt) * (size_t)off, out, n);
}

static inline void st_f32(baton_dtype dt, void *p, int64_t off, int n, const float *in)
{
    baton__cvt_from_f32(dt, in, (char *)p + baton_dtype_size(dt) * (size_t)off, n);
}

static inline void ld_f64(baton_dtype dt, const void *p, int64_t off, int n, double *out)
{
    (void)dt;
    memcpy(out, (const double *)p + off, sizeof(double) * (size_t)n);
}

static inline void st_f64(baton_dtype dt, void *p, int64_t off, int n, const double *in)
{
    (void)dt;
    memcpy((double *)p + off, in, sizeof(double) * (size_t)n);
}

/* ---- the arithmetic, once per accumulation type ---------------------------------------------- */

enum { ACT_SILU_MUL, ACT_SILU, ACT_GELU_ERF, ACT_GELU_TANH };
/* Heads of one KV group processed together, so each cached row is converted once for them; keys
 * per block of the online softmax. */
#define ATT_GROUP 8
#define ATT_BLOCK 32
/* Multiply-adds of an attention step from which its (row, head block) tasks go to the CPU pool. */
#define ATT_PAR_MIN (1 << 18)

/* Dot products: f32 in vectors (baton__simd_dot_f32: a fixed order at each vector level, so the
 * same bits on every thread), f64 in turn. */
static inline double dot_f64(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

#define T      float
#define SFX(n) n##_f32
#define LD     ld_f32
#define ST     st_f32
#define EXP    expf
#define COS    cosf
#define SIN    sinf
#define ERFC   erfcf
#define DOT    baton__simd_dot_f32
#include "kernels/cpu/decoder_impl.h"
#undef T
#undef SFX
#undef LD
#undef ST
#undef EXP
#undef COS
#undef SIN
#undef ERFC
#undef DOT
#define T      double
#define SFX(n) n##_f64
#define LD     ld_f64
#define ST     st_f64
#define EXP    exp
#define COS    cos
#define SIN    sin
#define ERFC   erfc
#define DOT    dot_f64
#include "kernels/cpu/decoder_impl.h"

/* ---- the kernels ------------------------------------------------------------------------------
 */

/* Every index of p (n of them, dtype dt) in [0, limit), else the first bad one as a run error. */
static int indices_ok(const baton_exec_ctx *ctx, const char *op, const char *what, baton_dtype dt,
                      const void *p, int64_t n, int64_t limit, const char *range)
{
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = idx_at(dt, p, i);
        if (v < 0 || v >= limit)
            return baton__ctx_fail(ctx, BATON_EKERNEL,
                                   "%s: %s[%lld] = %lld is outside [0, %lld) (%s)", op, what,
                                   (long long)i, (long long)v, (long long)limit, range);
    }
    return 0;
}

int baton__kcpu_embedding(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    READ(DEC_EMBEDDING, 3);
    const void *ids = buffers[0];
    const char *table = buffers[1];
    char *out = buffers[2];
    if ((rc = indices_ok(ctx, "embedding", "ids", s.idx_dt, ids, s.rows, s.V, "the table's rows")))
        return rc;
    const size_t row = (size_t)s.F * baton_dtype_size(s.x_dt);
    for (int64_t r = 0; r < s.rows; r++)
        memcpy(out + (size_t)r * row, table + (size_t)idx_at(s.idx_dt, ids, r) * row, row);
    return 0;
}

int baton__kcpu_rope(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    READ(DEC_ROPE, 4);
    const int il = (d.flags & DEC_FLAG_INTERLEAVED) != 0;
    if (s.x_dt == BATON_DTYPE_F64)
        rope_f64(s.x_dt, buffers[0], s.idx_dt, buffers[1], buffers[2], buffers[3], s.rows, s.F,
                 d.head_dim, il, d.scale);
    else
        rope_f32(s.x_dt, buffers[0], s.idx_dt, buffers[1], buffers[2], buffers[3], s.rows, s.F,
                 d.head_dim, il, d.scale);
    return 0;
}

int baton__kcpu_kv_cache_update(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                size_t len)
{
    READ(DEC_KV_CACHE_UPDATE, 4);
    const char *cache = buffers[0], *nw = buffers[1];
    const void *pos = buffers[2];
    char *out = buffers[3];
    if ((rc = indices_ok(ctx, "kv_cache_update", "positions", s.idx_dt, pos, s.rows, s.S,
                         "the cache's rows")))
        return rc;
    const size_t row = (size_t)s.F * baton_dtype_size(s.x_dt);
    /* In place (the alias) the cache is already the output; otherwise carry it over first. */
    if (out != cache)
        memmove(out, cache, row * (size_t)s.S);
    for (int64_t r = 0; r < s.rows; r++)
        memcpy(out + (size_t)idx_at(s.idx_dt, pos, r) * row, nw + (size_t)r * row, row);
    return 0;
}

int baton__kcpu_attention(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    READ(DEC_ATTENTION, 5);
    if ((rc = indices_ok(ctx, "attention", "positions", s.idx_dt, buffers[3], s.rows, s.S,
                         "the caches' rows")))
        return rc;
    if (s.x_dt == BATON_DTYPE_F64)
        attention_f64(s.x_dt, buffers[0], buffers[1], buffers[2], s.idx_dt, buffers[3], buffers[4],
                      s.rows, d.head_dim, d.n_heads, d.n_kv_heads, d.scale);
    else
        attention_f32(s.x_dt, buffers[0], buffers[1], buffers[2], s.idx_dt, buffers[3], buffers[4],
                      s.rows, d.head_dim, d.n_heads, d.n_kv_heads, d.scale);
    return 0;
}

static int act(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len, int op)
{
    const int binary = op == DEC_SILU_MUL;
    READ(op, binary ? 3 : 2);
    int kind = op == DEC_SILU_MUL          ? ACT_SILU_MUL
               : op == DEC_SILU            ? ACT_SILU
               : (d.flags & DEC_FLAG_TANH) ? ACT_GELU_TANH
                                           : ACT_GELU_ERF;
    const void *b = binary ? buffers[1] : NULL;
    void *y = buffers[binary ? 2 : 1];
    if (s.x_dt == BATON_DTYPE_F64)
        act_f64(kind, s.x_dt, buffers[0], b, y, s.n);
    else
        act_f32(kind, s.x_dt, buffers[0], b, y, s.n);
    return 0;
}

int baton__kcpu_silu_mul(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return act(ctx, buffers, opaque, len, DEC_SILU_MUL);
}

int baton__kcpu_silu(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return act(ctx, buffers, opaque, len, DEC_SILU);
}

int baton__kcpu_gelu(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return act(ctx, buffers, opaque, len, DEC_GELU);
}

int baton__kcpu_softmax(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    READ(DEC_SOFTMAX, 2);
    if (s.x_dt == BATON_DTYPE_F64)
        softmax_f64(s.x_dt, buffers[0], buffers[1], s.rows, s.F);
    else
        softmax_f32(s.x_dt, buffers[0], buffers[1], s.rows, s.F);
    return 0;
}

int baton__kcpu_cast(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    READ(DEC_CAST, 2);
    if (s.x_dt == s.y_dt) {
        memmove(buffers[1], buffers[0], (size_t)s.n * baton_dtype_size(s.x_dt));
        return 0;
    }
    /* f64 <-> anything goes through double (exact for every float dtype); the rest through
     * float, which holds bf16 and f16 exactly. */
    const int wide = s.x_dt == BATON_DTYPE_F64 || s.y_dt == BATON_DTYPE_F64;
    double bd[CHUNK];
    float bf[CHUNK];
    for (int64_t j = 0; j < s.n; j += CHUNK) {
        const int c = s.n - j < CHUNK ? (int)(s.n - j) : CHUNK;
        if (wide) {
            load_chunk(s.x_dt, buffers[0], j, c, bd);
            store_chunk(s.y_dt, buffers[1], j, c, bd);
        } else {
            ld_f32(s.x_dt, buffers[0], j, c, bf);
            st_f32(s.y_dt, buffers[1], j, c, bf);
        }
    }
    return 0;
}
