/* decoder.c: the decoder ops on the CPU (embedding, rope, kv_cache_update, attention, silu_mul,
 * silu, gelu, softmax, cast, sample). Math in f32 for bf16/f16/f32 data and in f64 for f64 data
 * (decoder_impl.h, included once per type); shapes from ctx->sig on every call; nothing is
 * allocated. Indices and positions are checked before anything is written, so a run error leaves
 * the outputs (the KV cache included) as they were. */
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "core/simd.h"
#include "core/threads.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_decoder.h"
#include "kernels/decoder_desc.h"

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

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

static inline int64_t idx_at(baton_dtype dt, const void *p, int64_t i)
{
    return dt == BATON_DTYPE_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
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

#define READ(op, nbuf)                                                                             \
    baton_decoder_desc d;                                                                          \
    dec_shape s;                                                                                   \
    int rc = baton__dec_call_read(ctx, op, buffers, nbuf, opaque, len, &d, &s);                    \
    if (rc)                                                                                        \
    return rc

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

/* ---- sample -------------------------------------------------------------------------------------
 * Per row: keys order the logits (dec_order_key; NaN counts as -inf); weights are
 * w = exp((z - max) / temperature) in 2^-40 fixed point, so that every sum is exact and the same in
 * any order (the CUDA kernel sums them across threads). The kept set is a prefix of the order
 * (key descending, index ascending): the top_k, then the shortest prefix of those with mass >=
 * top_p of theirs. The token is the first kept index, ascending, whose running weight exceeds
 * u * total, u = dec_uniform(seed, step, row).
 *
 * Nothing is allocated. A top_k of at most SAMPLE_HEAP (50 in transformers' default, 40 in
 * llama.cpp's; greedy is 1) takes one pass over the row into a heap of the k best on the stack, and
 * the rest works on those k (over 128256 logits, 0.13 ms where the radix passes took 10.4:
 * bench_cpu). Otherwise radix selection over the keys (4 passes of 8 bits, each over the keys that
 * match the digits so far) finds the cuts; the top_p one's first pass weighs every member, for
 * their total and for a heap of the best SAMPLE_HEAP, which finishes alone where it holds the
 * top_p mass (a model's peaked logits). The row's dtype is a constant in each instance of
 * sample_row, so the switch in load_f32 folds away. */

#define SAMPLE_ONE  1099511627776.0 /* 2^40 */
#define SAMPLE_HEAP 256 /* 6 KB of stack: an embedder's pool threads may have small stacks */

static inline uint32_t key_of(float f)
{
    if (f != f)
        f = -INFINITY;
    uint32_t u;
    memcpy(&u, &f, 4);
    return dec_order_key(u);
}

/* llrint without the library call (the compiler keeps one where errno may be set): on x86-64
 * cvtsd2si is what glibc's llrint runs, the same result for every input */
static inline int64_t sample_llrint(double v)
{
#if defined(__x86_64__) && defined(__SSE2__)
    return _mm_cvtsd_si64(_mm_set_sd(v));
#else
    return llrint(v);
#endif
}

static inline uint64_t weight_of(float f, float mx, float inv_t)
{
    if (f != f)
        return 0;
    return (uint64_t)sample_llrint((double)expf((f - mx) * inv_t) * SAMPLE_ONE);
}

/* A cut of the order: member(i) iff key > t or (key == t and i <= i_cut). */
typedef struct cut {
    uint32_t t;
    int64_t i_cut;
} cut;

static inline int member(const cut *c, uint32_t key, int64_t i)
{
    return key > c->t || (key == c->t && i <= c->i_cut);
}

/* An element of the order, with its weight once known. */
typedef struct ranked {
    uint32_t key;
    int64_t i;
    uint64_t w;
} ranked;

/* a before b in the order: larger key, then smaller index */
static inline int ranked_before(const ranked *a, const ranked *b)
{
    return a->key > b->key || (a->key == b->key && a->i < b->i);
}

static int by_order(const void *a, const void *b)
{
    return ranked_before(a, b) ? -1 : ranked_before(b, a);
}

static int by_index(const void *a, const void *b)
{
    const int64_t x = ((const ranked *)a)->i, y = ((const ranked *)b)->i;
    return (x > y) - (x < y);
}

static inline void ranked_swap(ranked *a, ranked *b)
{
    ranked t = *a;
    *a = *b;
    *b = t;
}

/* h[0..n) a heap whose root is the last in the order; h[0] replaced, sifted down. */
static void heap_down(ranked *h, int n)
{
    int p = 0;
    for (;;) {
        int c = 2 * p + 1;
        if (c >= n)
            break;
        if (c + 1 < n && ranked_before(&h[c], &h[c + 1]))
            c++; /* the later of the two children */
        if (!ranked_before(&h[p], &h[c]))
            break;
        ranked_swap(&h[p], &h[c]);
        p = c;
    }
}

static void heap_up(ranked *h, int c)
{
    while (c > 0) {
        int p = (c - 1) / 2;
        if (!ranked_before(&h[p], &h[c]))
            break;
        ranked_swap(&h[p], &h[c]);
        c = p;
    }
}

/* Offers element (key, i) to the heap of the best k met so far (indices ascending, so an equal key
 * comes later in the order than the root's and is not better). */
static inline void heap_offer(ranked *h, int *n, int k, uint32_t key, int64_t i, uint64_t w)
{
    if (*n < k) {
        h[*n] = (ranked){key, i, w};
        heap_up(h, (*n)++);
    } else if (key > h[0].key) {
        h[0] = (ranked){key, i, w};
        heap_down(h, *n);
    }
}

/* The definition's last steps on a set h[0..n) that holds the kept set's candidates, weighed, of
 * mass `total`: the top_p cut (the shortest prefix of the order whose mass reaches
 * ceil(top_p * total)), then the first kept index, ascending, whose running weight exceeds
 * u * (the kept mass). */
static int64_t heap_draw(ranked *h, int n, uint64_t total, const baton_decoder_desc *d,
                         int64_t step, int64_t row, int64_t fallback)
{
    if (d->top_p < 1) {
        qsort(h, (size_t)n, sizeof *h, by_order);
        const uint64_t target = (uint64_t)ceil(d->top_p * (double)total);
        uint64_t cum = 0;
        int m = 0;
        while (m < n && cum < target)
            cum += h[m++].w;
        n = m;
        total = cum;
    }
    qsort(h, (size_t)n, sizeof *h, by_index);
    const uint64_t target = (uint64_t)(dec_uniform(d->seed, step, row) * (double)total);
    uint64_t cum = 0;
    int64_t pick = fallback;
    for (int j = 0; j < n; j++) {
        pick = h[j].i;
        cum += h[j].w;
        if (cum > target)
            break;
    }
    return pick;
}

/* top_k <= SAMPLE_HEAP: the k best in one pass (a heap whose root is the k-th), then the top_p cut
 * and the draw over them alone: the definition's steps on a set of k. */
static inline __attribute__((always_inline)) void
sample_row_heap(baton_dtype dt, const void *x, int64_t V, const baton_decoder_desc *d, int64_t step,
                int64_t row, int64_t *out)
{
    ranked h[SAMPLE_HEAP];
    const int k = (int)d->top_k;
    int n = 0;
    uint32_t kmax = 0;
    int64_t imax = 0;
    for (int64_t i = 0; i < V; i++) {
        const uint32_t key = key_of(load_f32(dt, x, i));
        if (key > kmax || i == 0) {
            kmax = key;
            imax = i;
        }
        heap_offer(h, &n, k, key, i, 0);
    }
    const float mx = load_f32(dt, x, imax);
    if (mx == -INFINITY || mx != mx) {
        *out = imax;
        return;
    }
    const float inv_t = (float)(1.0 / d->temperature);
    uint64_t total = 0;
    for (int j = 0; j < n; j++) {
        h[j].w = weight_of(load_f32(dt, x, h[j].i), mx, inv_t);
        total += h[j].w;
    }
    *out = heap_draw(h, n, total, d, step, row, imax);
}

/* Any top_k: radix selection of the cuts over the keys. */
static inline __attribute__((always_inline)) void
sample_row_radix(baton_dtype dt, const void *x, int64_t V, const baton_decoder_desc *d,
                 int64_t step, int64_t row, int64_t *out)
{
#define KEY(i)    key_of(load_f32(dt, x, (i)))
#define WEIGHT(i) weight_of(load_f32(dt, x, (i)), mx, inv_t)
    uint32_t kmax = 0;
    int64_t imax = 0;
    for (int64_t i = 0; i < V; i++) {
        uint32_t k = KEY(i);
        if (k > kmax || i == 0) {
            kmax = k;
            imax = i;
        }
    }
    const float mx = load_f32(dt, x, imax);
    if (mx == -INFINITY || mx != mx) {
        *out = imax;
        return;
    }
    const float inv_t = (float)(1.0 / d->temperature);
    cut c = {0, INT64_MAX}; /* everything */
    if (d->top_k > 0 && d->top_k < V) {
        uint32_t prefix = 0, mask = 0;
        int64_t need = d->top_k;
        for (int shift = 24; shift >= 0; shift -= 8) {
            int64_t hist[256] = {0};
            for (int64_t i = 0; i < V; i++) {
                uint32_t k = KEY(i);
                if ((k & mask) == prefix)
                    hist[(k >> shift) & 255]++;
            }
            int b = 255;
            for (; b > 0 && hist[b] < need; b--)
                need -= hist[b];
            prefix |= (uint32_t)b << shift;
            mask |= 255u << shift;
        }
        c.t = prefix;
        for (int64_t i = 0; i < V; i++)
            if (KEY(i) == prefix && --need == 0) {
                c.i_cut = i;
                break;
            }
    }
    uint64_t total = 0;
    if (d->top_p < 1) {
        /* The first pass weighs every member: their total, the mass and count of each top digit,
         * and the SAMPLE_HEAP best of them. Where those reach the target the kept set is among
         * them (it is a prefix of the order), and heap_draw finishes (peaked logits: a few
         * tokens hold the mass); else the radix passes go on from the first digit's histogram. */
        ranked h[SAMPLE_HEAP];
        int n = 0;
        uint64_t mass0[256] = {0};
        int64_t cnt0[256] = {0};
        for (int64_t i = 0; i < V; i++) {
            const uint32_t k = KEY(i);
            if (!member(&c, k, i))
                continue;
            const uint64_t w = WEIGHT(i);
            mass0[k >> 24] += w;
            cnt0[k >> 24]++;
            heap_offer(h, &n, SAMPLE_HEAP, k, i, w);
        }
        uint64_t hmass = 0;
        for (int b = 0; b < 256; b++)
            total += mass0[b];
        for (int j = 0; j < n; j++)
            hmass += h[j].w;
        uint32_t prefix = 0, mask = 0;
        uint64_t before = 0, target = (uint64_t)ceil(d->top_p * (double)total);
        if (hmass >= target) {
            *out = heap_draw(h, n, total, d, step, row, imax);
            return;
        }
        for (int shift = 24; shift >= 0; shift -= 8) {
            uint64_t mass[256] = {0};
            int64_t cnt[256] = {0};
            if (shift == 24) {
                memcpy(mass, mass0, sizeof mass);
                memcpy(cnt, cnt0, sizeof cnt);
            } else {
                for (int64_t i = 0; i < V; i++) {
                    uint32_t k = KEY(i);
                    if ((k & mask) == prefix && member(&c, k, i)) {
                        mass[(k >> shift) & 255] += WEIGHT(i);
                        cnt[(k >> shift) & 255]++;
                    }
                }
            }
            int b = 255, lowest = -1;
            for (; b >= 0; b--) {
                if (!cnt[b])
                    continue;
                lowest = b;
                if (before + mass[b] >= target)
                    break;
                before += mass[b];
            }
            if (b < 0) { /* the members' mass falls short of the target: keep them all */
                b = lowest;
                before -= mass[b];
            }
            prefix |= (uint32_t)b << shift;
            mask |= 255u << shift;
        }
        /* The ties of the last digit in index order until the target: the cut, and (the members
         * above it weigh `before`) the kept set's total. The top_p cut is a prefix of the top_k
         * members, so it is the earlier of the two. */
        cut p = {prefix, -1};
        uint64_t cum = before;
        for (int64_t i = 0; i < V; i++) {
            uint32_t k = KEY(i);
            if (k == prefix && member(&c, k, i)) {
                p.i_cut = i;
                cum += WEIGHT(i);
                if (cum >= target)
                    break;
            }
        }
        c = p;
        total = cum;
    } else {
        for (int64_t i = 0; i < V; i++)
            if (member(&c, KEY(i), i))
                total += WEIGHT(i);
    }
    const uint64_t target =
        (uint64_t)(dec_uniform(d->seed, step, row) * (double)total); /* < total */
    uint64_t cum = 0;
    int64_t pick = imax;
    for (int64_t i = 0; i < V; i++) {
        if (!member(&c, KEY(i), i))
            continue;
        pick = i;
        cum += WEIGHT(i);
        if (cum > target)
            break;
    }
    *out = pick;
#undef KEY
#undef WEIGHT
}

static inline __attribute__((always_inline)) void
sample_row_of(baton_dtype dt, const void *x, int64_t V, const baton_decoder_desc *d, int64_t step,
              int64_t row, int64_t *out)
{
    if (d->top_k > 0 && d->top_k <= SAMPLE_HEAP && d->top_k < V)
        sample_row_heap(dt, x, V, d, step, row, out);
    else
        sample_row_radix(dt, x, V, d, step, row, out);
}

static void sample_row(baton_dtype dt, const void *x, int64_t V, const baton_decoder_desc *d,
                       int64_t step, int64_t row, int64_t *out)
{
    switch (dt) { /* each dtype its own instance: the loads' switch folds away */
    case BATON_DTYPE_BF16: sample_row_of(BATON_DTYPE_BF16, x, V, d, step, row, out); break;
    case BATON_DTYPE_F16: sample_row_of(BATON_DTYPE_F16, x, V, d, step, row, out); break;
    case BATON_DTYPE_F32: sample_row_of(BATON_DTYPE_F32, x, V, d, step, row, out); break;
    default: sample_row_of(dt, x, V, d, step, row, out); break;
    }
}

int baton__kcpu_sample(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    READ(DEC_SAMPLE, 3);
    const int64_t step = idx_at(s.idx_dt, buffers[1], 0);
    const size_t esz = baton_dtype_size(s.x_dt);
    for (int64_t r = 0; r < s.rows; r++)
        sample_row(s.x_dt, (const char *)buffers[0] + (size_t)(r * s.V) * esz, s.V, &d, step, r,
                   (int64_t *)buffers[2] + r);
    return 0;
}
