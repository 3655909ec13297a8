/* sample.c: the sampler on the CPU (the decoder op `sample`; its CUDA twin is
 * kernels/cuda/decoder_sample.cu).
 *
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

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/simd.h"
#include "kernels/cpu/cpu_decoder.h"
#include "kernels/cpu/decoder_read.h"
#include "kernels/decoder_desc.h"

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

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

/* The weight: dec_sample_weight, the CUDA kernel's bits (NaN's is 0). */
static inline uint64_t weight_of(float f, float mx, float inv_t)
{
    return (uint64_t)sample_llrint(dec_sample_weight(f, mx, inv_t));
}

#ifdef SIMD_X86
/* dec_sample_weight of 8 logits in AVX2's lanes: each lane the scalar function's float operations
 * in its order, so its bits. The target has no FMA, so that no multiply and add can be fused (a
 * GCC intrinsic is an expression it may contract). The loops below weigh every member of a row:
 * top_p alone over 128256 logits 2.5 ms this way, 3.2 one weight at a time (decision 0016). */
__attribute__((target("avx2"))) static void weigh8_avx2(const float *f, float mx, float inv_t,
                                                        double *w)
{
#define SET1 _mm256_set1_ps
    const __m256 tiny = SET1(DEC_W_FLT_MIN);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
#define FTZ(v) _mm256_andnot_ps(_mm256_cmp_ps(_mm256_and_ps(v, abs_mask), tiny, _CMP_LT_OQ), v)
    const __m256 fv = FTZ(_mm256_loadu_ps(f)), mv = SET1(dec_ftz(mx));
    const __m256 d =
        _mm256_andnot_ps(_mm256_cmp_ps(fv, mv, _CMP_EQ_OQ),
                         FTZ(_mm256_add_ps(fv, _mm256_sub_ps(_mm256_setzero_ps(), mv))));
    const __m256 z0 = _mm256_mul_ps(d, SET1(dec_ftz(inv_t)));
    const __m256 valid = _mm256_cmp_ps(z0, SET1(DEC_W_Z_MIN), _CMP_GT_OQ);
    const __m256 z = _mm256_and_ps(z0, valid); /* 0 in the lanes that weigh 0: no NaN below */
    const __m256 t = _mm256_mul_ps(z, SET1(DEC_W_LOG2E));
    const __m256 kf = _mm256_sub_ps(_mm256_add_ps(t, SET1(DEC_W_ROUND)), SET1(DEC_W_ROUND));
    __m256 r = _mm256_sub_ps(z, _mm256_mul_ps(kf, SET1(DEC_W_LN2_HI)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(kf, SET1(DEC_W_LN2_LO)));
    const __m256 r2 = _mm256_mul_ps(r, r), r4 = _mm256_mul_ps(r2, r2);
    const __m256 b = _mm256_add_ps(SET1(0.5f), _mm256_mul_ps(SET1(DEC_W_C3), r));
    const __m256 c = _mm256_add_ps(SET1(DEC_W_C4), _mm256_mul_ps(SET1(DEC_W_C5), r));
    const __m256 e = _mm256_add_ps(SET1(DEC_W_C6), _mm256_mul_ps(SET1(DEC_W_C7), r));
    const __m256 hi = _mm256_add_ps(c, _mm256_mul_ps(r2, e));
    const __m256 q = _mm256_add_ps(_mm256_add_ps(r, _mm256_mul_ps(r2, b)), _mm256_mul_ps(r4, hi));
    const __m256 p = _mm256_and_ps(_mm256_add_ps(SET1(1.0f), q), valid);
#undef FTZ
#undef SET1
    /* 2^(40 + k) from each lane's k, as the scalar code builds it */
    const __m256i k = _mm256_cvttps_epi32(kf);
    const __m256i e0 =
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(k)),
                                           _mm256_set1_epi64x(DEC_W_EXP_BIAS)),
                          52);
    const __m256i e1 =
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(k, 1)),
                                           _mm256_set1_epi64x(DEC_W_EXP_BIAS)),
                          52);
    _mm256_storeu_pd(
        w, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(p)), _mm256_castsi256_pd(e0)));
    _mm256_storeu_pd(w + 4, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)),
                                          _mm256_castsi256_pd(e1)));
}
#endif

/* A cut of the order: member(i) iff key > t or (key == t and i <= i_cut). */
typedef struct cut {
    uint32_t t;
    int64_t i_cut;
} cut;

static inline int member(const cut *c, uint32_t key, int64_t i)
{
    return key > c->t || (key == c->t && i <= c->i_cut);
}

/* Elements i0 .. of the row, 8 of them or up to V (*m): their keys into k and, for those that are
 * members of c (bit j of the result), their weights into w: 8 at a time in AVX2's lanes where the
 * machine has them and a member is among them, else the members' one at a time (a weight is a
 * polynomial: the members of a top_k, or the walk to the draw, need no others). */
static inline __attribute__((always_inline)) unsigned weigh_run(baton_dtype dt, const void *x,
                                                                int64_t i0, int64_t V, const cut *c,
                                                                float mx, float inv_t, int avx2,
                                                                uint32_t *k, uint64_t *w, int *m)
{
    float f[8];
    unsigned in = 0;
    *m = V - i0 < 8 ? (int)(V - i0) : 8;
    for (int j = 0; j < *m; j++) {
        f[j] = load_f32(dt, x, i0 + j);
        k[j] = key_of(f[j]);
        in |= (unsigned)member(c, k[j], i0 + j) << j;
    }
    if (!in)
        return 0;
#ifdef SIMD_X86
    if (avx2 && *m == 8) {
        double v[8];
        weigh8_avx2(f, mx, inv_t, v);
        for (int j = 0; j < 8; j++)
            w[j] = (uint64_t)sample_llrint(v[j]);
        return in;
    }
#endif
    (void)avx2;
    for (int j = 0; j < *m; j++)
        if (in >> j & 1)
            w[j] = weight_of(f[j], mx, inv_t);
    return in;
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
    const int avx2 = baton__simd_level_get() >= SIMD_AVX2;
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
        for (int64_t i0 = 0; i0 < V; i0 += 8) {
            uint32_t k[8];
            uint64_t w[8];
            int m;
            const unsigned in = weigh_run(dt, x, i0, V, &c, mx, inv_t, avx2, k, w, &m);
            for (int j = 0; j < m; j++) {
                if (!(in >> j & 1))
                    continue;
                mass0[k[j] >> 24] += w[j];
                cnt0[k[j] >> 24]++;
                heap_offer(h, &n, SAMPLE_HEAP, k[j], i0 + j, w[j]);
            }
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
        for (int64_t i0 = 0; i0 < V; i0 += 8) {
            uint32_t k[8];
            uint64_t w[8];
            int m;
            const unsigned in = weigh_run(dt, x, i0, V, &c, mx, inv_t, avx2, k, w, &m);
            for (int j = 0; j < m; j++)
                if (in >> j & 1)
                    total += w[j];
        }
    }
    const uint64_t target =
        (uint64_t)(dec_uniform(d->seed, step, row) * (double)total); /* < total */
    uint64_t cum = 0;
    int64_t pick = imax;
    for (int64_t i0 = 0; i0 < V; i0 += 8) {
        uint32_t k[8];
        uint64_t w[8];
        int m;
        const unsigned in = weigh_run(dt, x, i0, V, &c, mx, inv_t, avx2, k, w, &m);
        int j = 0;
        for (; j < m; j++) {
            if (!(in >> j & 1))
                continue;
            pick = i0 + j;
            cum += w[j];
            if (cum > target)
                break;
        }
        if (j < m)
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

void baton__kcpu_sample_weights(const float *f, int64_t n, float mx, float inv_t, uint64_t *w)
{
    const int avx2 = baton__simd_level_get() >= SIMD_AVX2;
    const cut all = {0, INT64_MAX};
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
        uint32_t k[8];
        int m;
        weigh_run(BATON_DTYPE_F32, f, i0, n, &all, mx, inv_t, avx2, k, w + i0, &m);
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
