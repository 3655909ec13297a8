/* gemv.c: the products of a few rows of x with a weight read once in its own dtype and layout
 * (gemv.h). W [N, K] (trans_b): a task takes a block of W's rows and dots four at a time with each
 * row of x. W [K, N]: a task takes a block of W's rows (a range of k) and accumulates x[m][k] *
 * W[k][:] into its own partial sums, added in task order at the end: every read of W is a
 * sequential stream, which is what reaches the memory bandwidth. */
#include <string.h>

#include "core/dtype.h"
#include "core/simd.h"
#include "core/threads.h"
#include "delegates/cpu/gemv.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

typedef struct gemv_job {
    baton_dtype dt;
    int64_t M, N, K;
    float alpha;
    const float *x;
    const char *w;
    float *y, *partial;
    int64_t per_task; /* rows of W per task */
    int64_t n_tasks;
    simd_level level;
    /* AVX-512 bf16: a 512-bit load holds 32 weights, whose even ones are the low halves of its
     * 32-bit lanes shifted up and whose odd ones are the high halves masked: two f32 vectors for
     * two instructions, no widening shuffle. x is then read as [x0 x2 .. x30 | x1 x3 .. x31] per
     * block of 32 (xp, K rounded up to 32, zero padded), and the [K, N] form's partial sums hold
     * columns in the same order (the reduction puts them back). */
    int perm;
    /* AVX512-BF16 (bf16 weights, [N, K]): x rounded back to bf16 (exact: it came from bf16) and
     * dotted with W in pairs by vdpbf16ps, no widening at all. */
    int bfdot;
    const uint16_t *xb;
    const float *xp;
    int64_t kpad, npad;
} gemv_job;

/* The task split: a function of the sizes alone (never of the thread count). */
static int64_t rows_per_task(int64_t rows, int64_t row_bytes, int64_t grain_bytes,
                             int64_t max_tasks)
{
    int64_t t = par_tasks(rows * row_bytes, grain_bytes, max_tasks);
    int64_t per = (rows + t - 1) / t;
    return (per + 3) / 4 * 4;
}

#define KN_GRAIN     (512 << 10)
#define KN_MAX_TASKS 32
#define NK_GRAIN     (256 << 10)
#define NK_MAX_TASKS 256

static int64_t pad32(int64_t v)
{
    return (v + 31) / 32 * 32;
}

size_t baton__gemv_partial_floats(int64_t M, int64_t N, int64_t K, baton_dtype wdt)
{
    int64_t per = rows_per_task(K, N * (int64_t)baton_dtype_size(wdt), KN_GRAIN, KN_MAX_TASKS);
    int64_t tasks = (K + per - 1) / per;
    /* the [K, N] form's sums (N padded for the bf16 order), then x in the bf16 order */
    return (size_t)(tasks * M * pad32(N) + M * pad32(K));
}

static ALWAYS_INLINE float wload(baton_dtype dt, const char *w, int64_t i)
{
    return dt == BATON_DTYPE_BF16  ? bf16_to_f32(((const uint16_t *)w)[i])
           : dt == BATON_DTYPE_F16 ? f16_to_f32(((const uint16_t *)w)[i])
                                   : ((const float *)w)[i];
}

/* ---- scalar ---------------------------------------------------------------------------------- */

static void nk_scalar(const gemv_job *j, int64_t n0, int64_t n1)
{
    for (int64_t m = 0; m < j->M; m++)
        for (int64_t n = n0; n < n1; n++) {
            const float *x = j->x + m * j->K;
            float s = 0;
            for (int64_t k = 0; k < j->K; k++)
                s += x[k] * wload(j->dt, j->w, n * j->K + k);
            j->y[m * j->N + n] = j->alpha * s;
        }
}

static void kn_scalar(const gemv_job *j, int64_t k0, int64_t k1, float *p)
{
    for (int64_t k = k0; k < k1; k++)
        for (int64_t m = 0; m < j->M; m++) {
            float xv = j->x[m * j->K + k];
            float *pm = p + m * j->npad;
            for (int64_t n = 0; n < j->N; n++) {
                float v = xv * wload(j->dt, j->w, k * j->N + n);
                pm[n] = k == k0 ? v : pm[n] + v;
            }
        }
}

#ifdef SIMD_X86
/* ---- AVX-512 --------------------------------------------------------------------------------- */

/* 16 weights as f32. A NaN's payload does not matter to a product (unlike to a stored value), so
 * f16 takes the hardware's conversion as it is. */
static ALWAYS_INLINE SIMD_T512 __m512 wvec16(const baton_dtype dt, const void *p, __mmask16 m)
{
    if (dt == BATON_DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    return v16_load(dt, p, m);
}

/* The same without a mask: masked loads cost the main loop a third of its speed (Zen 4). */
static ALWAYS_INLINE SIMD_T512 __m512 wvec16u(const baton_dtype dt, const void *p)
{
    if (dt == BATON_DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256(p));
    if (dt == BATON_DTYPE_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)), 16));
    return _mm512_loadu_ps(p);
}

/* Rows n .. n+R-1 of W (R <= 4) against rows m0 .. m0+MB-1 of x. */
static ALWAYS_INLINE SIMD_T512 void nk512_block(const baton_dtype dt, const int MB, const int R,
                                                const gemv_job *j, int64_t m0, int64_t n)
{
    const size_t es = baton_dtype_size(dt);
    const int64_t K = j->K;
    __m512 acc[4][4];
    for (int a = 0; a < MB; a++)
        for (int r = 0; r < R; r++)
            acc[a][r] = _mm512_setzero_ps();
    const char *w = j->w + es * (size_t)(n * K);
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 b[4];
        for (int r = 0; r < R; r++)
            b[r] = wvec16u(dt, w + es * (size_t)(r * K + k));
        for (int a = 0; a < MB; a++) {
            __m512 xv = _mm512_loadu_ps(j->x + (m0 + a) * K + k);
            for (int r = 0; r < R; r++)
                acc[a][r] = _mm512_fmadd_ps(xv, b[r], acc[a][r]);
        }
    }
    for (; k < K; k += 16) {
        __mmask16 msk = v16_tail(K - k);
        __m512 b[4];
        for (int r = 0; r < R; r++)
            b[r] = wvec16(dt, w + es * (size_t)(r * K + k), msk);
        for (int a = 0; a < MB; a++) {
            __m512 xv = _mm512_maskz_loadu_ps(msk, j->x + (m0 + a) * K + k);
            for (int r = 0; r < R; r++)
                acc[a][r] = _mm512_fmadd_ps(xv, b[r], acc[a][r]);
        }
    }
    for (int a = 0; a < MB; a++)
        for (int r = 0; r < R; r++)
            j->y[(m0 + a) * j->N + n + r] = j->alpha * v16_sum(acc[a][r]);
}

static ALWAYS_INLINE SIMD_T512 void nk512_mb(const baton_dtype dt, const int MB, const gemv_job *j,
                                             int64_t m0, int64_t n0, int64_t n1)
{
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4)
        nk512_block(dt, MB, 4, j, m0, n);
    for (; n < n1; n++)
        nk512_block(dt, MB, 1, j, m0, n);
}

/* One row of x (decode): rows n .. n+R-1 of W, A chains of sums per row over 16 A weights at a
 * time. Fewer rows at once with longer runs of each than nk512_block: each row gives 256 bytes of
 * a sequential stream a pass, and the chains keep the sums off the critical path when the weight
 * comes from the L3. f16 reads one row at a time: with its conversions, 4 rows at once ran at
 * under half the read bandwidth, one row at about two thirds (docs/decisions/cpu-gemm.md). */
static ALWAYS_INLINE SIMD_T512 void nk512_row1(const baton_dtype dt, const int R, const int A,
                                               const gemv_job *j, int64_t n)
{
    const size_t es = baton_dtype_size(dt);
    const int64_t K = j->K;
    __m512 acc[4][8];
    for (int r = 0; r < R; r++)
        for (int q = 0; q < A; q++)
            acc[r][q] = _mm512_setzero_ps();
    const char *w = j->w + es * (size_t)(n * K);
    const float *x = j->x;
    int64_t k = 0;
    for (; k + 16 * A <= K; k += 16 * A)
        for (int q = 0; q < A; q++) {
            __m512 xv = _mm512_loadu_ps(x + k + 16 * q);
            for (int r = 0; r < R; r++)
                acc[r][q] = _mm512_fmadd_ps(xv, wvec16u(dt, w + es * (size_t)(r * K + k + 16 * q)),
                                            acc[r][q]);
        }
    for (; k + 16 <= K; k += 16) {
        __m512 xv = _mm512_loadu_ps(x + k);
        for (int r = 0; r < R; r++)
            acc[r][0] = _mm512_fmadd_ps(xv, wvec16u(dt, w + es * (size_t)(r * K + k)), acc[r][0]);
    }
    if (k < K) {
        __mmask16 msk = v16_tail(K - k);
        __m512 xv = _mm512_maskz_loadu_ps(msk, x + k);
        for (int r = 0; r < R; r++)
            acc[r][1] =
                _mm512_fmadd_ps(xv, wvec16(dt, w + es * (size_t)(r * K + k), msk), acc[r][1]);
    }
    for (int r = 0; r < R; r++) {
        for (int h = A / 2; h >= 1; h /= 2) /* a tree: A is a power of two */
            for (int q = 0; q < h; q++)
                acc[r][q] = _mm512_add_ps(acc[r][q], acc[r][q + h]);
        j->y[n + r] = j->alpha * v16_sum(acc[r][0]);
    }
}

static ALWAYS_INLINE SIMD_T512 void nk512_dt(const baton_dtype dt, const gemv_job *j, int64_t n0,
                                             int64_t n1)
{
    if (j->M == 1) {
        int64_t n = n0;
        if (dt == BATON_DTYPE_F16) {
            for (; n < n1; n++)
                nk512_row1(dt, 1, 8, j, n);
            return;
        }
        for (; n + 4 <= n1; n += 4)
            nk512_row1(dt, 4, 4, j, n);
        for (; n < n1; n++)
            nk512_row1(dt, 1, 4, j, n);
        return;
    }
    for (int64_t m0 = 0; m0 < j->M; m0 += 4) {
        switch (j->M - m0 < 4 ? (int)(j->M - m0) : 4) {
        case 1: nk512_mb(dt, 1, j, m0, n0, n1); break;
        case 2: nk512_mb(dt, 2, j, m0, n0, n1); break;
        case 3: nk512_mb(dt, 3, j, m0, n0, n1); break;
        default: nk512_mb(dt, 4, j, m0, n0, n1); break;
        }
    }
}

static SIMD_T512 void nk512(const gemv_job *j, int64_t n0, int64_t n1)
{
    if (j->dt == BATON_DTYPE_BF16)
        nk512_dt(BATON_DTYPE_BF16, j, n0, n1);
    else if (j->dt == BATON_DTYPE_F16)
        nk512_dt(BATON_DTYPE_F16, j, n0, n1);
    else
        nk512_dt(BATON_DTYPE_F32, j, n0, n1);
}

/* Rows k .. k+KB-1 of W into the partial sums p, for every m: two chains of sums per vector of
 * columns, joined before the store. */
static ALWAYS_INLINE SIMD_T512 void kn_rows(const baton_dtype dt, const int KB, const gemv_job *j,
                                            int64_t k, int64_t k0, float *p)
{
    const size_t es = baton_dtype_size(dt);
    const int64_t N = j->N, K = j->K;
    const char *w = j->w + es * (size_t)(k * N);
    for (int64_t n = 0; n < N; n += 16) {
        __m512 b[16];
        if (n + 16 <= N) {
            for (int r = 0; r < KB; r++)
                b[r] = wvec16u(dt, w + es * (size_t)(r * N + n));
        } else {
            __mmask16 msk = v16_tail(N - n);
            for (int r = 0; r < KB; r++)
                b[r] = wvec16(dt, w + es * (size_t)(r * N + n), msk);
        }
        for (int64_t m = 0; m < j->M; m++) {
            const float *x = j->x + m * K + k;
            float *pm = p + m * j->npad + n;
            __m512 acc = k == k0 ? _mm512_setzero_ps() : _mm512_loadu_ps(pm);
            __m512 acc2 = _mm512_setzero_ps();
            for (int r = 0; r < KB; r++) {
                if (r % 2 == 0)
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(x[r]), b[r], acc);
                else
                    acc2 = _mm512_fmadd_ps(_mm512_set1_ps(x[r]), b[r], acc2);
            }
            _mm512_storeu_ps(pm, KB > 1 ? _mm512_add_ps(acc, acc2) : acc); /* padded to 32 */
        }
    }
}

static ALWAYS_INLINE SIMD_T512 void kn512_dt(const baton_dtype dt, const gemv_job *j, int64_t k0,
                                             int64_t k1, float *p)
{
    int64_t k = k0;
    for (; k + 16 <= k1; k += 16)
        kn_rows(dt, 16, j, k, k0, p);
    for (; k < k1; k++)
        kn_rows(dt, 1, j, k, k0, p);
}

static SIMD_T512 void kn512(const gemv_job *j, int64_t k0, int64_t k1, float *p)
{
    if (j->dt == BATON_DTYPE_BF16)
        kn512_dt(BATON_DTYPE_BF16, j, k0, k1, p);
    else if (j->dt == BATON_DTYPE_F16)
        kn512_dt(BATON_DTYPE_F16, j, k0, k1, p);
    else
        kn512_dt(BATON_DTYPE_F32, j, k0, k1, p);
}

/* bf16 in the even/odd order (gemv_job.perm): 32 weights per load. */
static ALWAYS_INLINE SIMD_T512 void bf16_pair(const uint16_t *p, __mmask32 m, __m512 *even,
                                              __m512 *odd)
{
    __m512i v = _mm512_maskz_loadu_epi16(m, p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}

static ALWAYS_INLINE SIMD_T512 void bf16_pair_u(const uint16_t *p, __m512 *even, __m512 *odd)
{
    __m512i v = _mm512_loadu_si512(p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}

static inline __mmask32 tail32(int64_t left)
{
    return left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1ull << left) - 1u);
}

static ALWAYS_INLINE SIMD_T512 void nkp_block(const int MB, const int R, const gemv_job *j,
                                              int64_t m0, int64_t n)
{
    const int64_t K = j->K, KP = j->kpad;
    __m512 acc[4][4];
    for (int a = 0; a < MB; a++)
        for (int r = 0; r < R; r++)
            acc[a][r] = _mm512_setzero_ps();
    const uint16_t *w = (const uint16_t *)j->w + n * K;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        __m512 be[4], bo[4];
        for (int r = 0; r < R; r++)
            bf16_pair_u(w + r * K + k, &be[r], &bo[r]);
        for (int a = 0; a < MB; a++) {
            __m512 xe = _mm512_loadu_ps(j->xp + (m0 + a) * KP + k);
            __m512 xo = _mm512_loadu_ps(j->xp + (m0 + a) * KP + k + 16);
            for (int r = 0; r < R; r++) {
                acc[a][r] = _mm512_fmadd_ps(xe, be[r], acc[a][r]);
                acc[a][r] = _mm512_fmadd_ps(xo, bo[r], acc[a][r]);
            }
        }
    }
    for (; k < K; k += 32) {
        __mmask32 msk = tail32(K - k);
        __m512 be[4], bo[4];
        for (int r = 0; r < R; r++)
            bf16_pair(w + r * K + k, msk, &be[r], &bo[r]);
        for (int a = 0; a < MB; a++) {
            __m512 xe = _mm512_loadu_ps(j->xp + (m0 + a) * KP + k);
            __m512 xo = _mm512_loadu_ps(j->xp + (m0 + a) * KP + k + 16);
            for (int r = 0; r < R; r++) {
                acc[a][r] = _mm512_fmadd_ps(xe, be[r], acc[a][r]);
                acc[a][r] = _mm512_fmadd_ps(xo, bo[r], acc[a][r]);
            }
        }
    }
    for (int a = 0; a < MB; a++)
        for (int r = 0; r < R; r++)
            j->y[(m0 + a) * j->N + n + r] = j->alpha * v16_sum(acc[a][r]);
}

static ALWAYS_INLINE SIMD_T512 void nkp_mb(const int MB, const gemv_job *j, int64_t m0, int64_t n0,
                                           int64_t n1)
{
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4)
        nkp_block(MB, 4, j, m0, n);
    for (; n < n1; n++)
        nkp_block(MB, 1, j, m0, n);
}

static SIMD_T512 void nkp512(const gemv_job *j, int64_t n0, int64_t n1)
{
    for (int64_t m0 = 0; m0 < j->M; m0 += 4) {
        switch (j->M - m0 < 4 ? (int)(j->M - m0) : 4) {
        case 1: nkp_mb(1, j, m0, n0, n1); break;
        case 2: nkp_mb(2, j, m0, n0, n1); break;
        case 3: nkp_mb(3, j, m0, n0, n1); break;
        default: nkp_mb(4, j, m0, n0, n1); break;
        }
    }
}

/* The [K, N] form in the bf16 order: partial sums of columns n .. n+31 are stored as the even
 * columns then the odd ones. */
static ALWAYS_INLINE SIMD_T512 void knp_rows(const int KB, const gemv_job *j, int64_t k, int64_t k0,
                                             float *p)
{
    const int64_t N = j->N, NP = j->npad, K = j->K;
    const uint16_t *w = (const uint16_t *)j->w + k * N;
    for (int64_t n = 0; n < N; n += 32) {
        __m512 e[8], o[8];
        if (n + 32 <= N) {
            for (int r = 0; r < KB; r++)
                bf16_pair_u(w + r * N + n, &e[r], &o[r]);
        } else {
            __mmask32 msk = tail32(N - n);
            for (int r = 0; r < KB; r++)
                bf16_pair(w + r * N + n, msk, &e[r], &o[r]);
        }
        for (int64_t m = 0; m < j->M; m++) {
            const float *x = j->x + m * K + k;
            float *pm = p + m * NP + n;
            __m512 ae = k == k0 ? _mm512_setzero_ps() : _mm512_loadu_ps(pm);
            __m512 ao = k == k0 ? _mm512_setzero_ps() : _mm512_loadu_ps(pm + 16);
            for (int r = 0; r < KB; r++) {
                __m512 xv = _mm512_set1_ps(x[r]);
                ae = _mm512_fmadd_ps(xv, e[r], ae);
                ao = _mm512_fmadd_ps(xv, o[r], ao);
            }
            _mm512_storeu_ps(pm, ae);
            _mm512_storeu_ps(pm + 16, ao);
        }
    }
}

static SIMD_T512 void knp512(const gemv_job *j, int64_t k0, int64_t k1, float *p)
{
    int64_t k = k0;
    for (; k + 8 <= k1; k += 8)
        knp_rows(8, j, k, k0, p);
    for (; k < k1; k++)
        knp_rows(1, j, k, k0, p);
}

/* ---- AVX512-BF16: W [N, K] bf16 dotted with x in bf16, pairs at a time ---- */

static ALWAYS_INLINE SIMD_T512BF void nkd_block(const int MB, const int R, const gemv_job *j,
                                                int64_t m0, int64_t n)
{
    const int64_t K = j->K, KP = j->kpad;
    __m512 acc[4][8];
    for (int a = 0; a < MB; a++)
        for (int r = 0; r < R; r++)
            acc[a][r] = _mm512_setzero_ps();
    const uint16_t *w = (const uint16_t *)j->w + n * K;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        __m512i b[8];
        for (int r = 0; r < R; r++)
            b[r] = _mm512_loadu_si512(w + r * K + k);
        for (int a = 0; a < MB; a++) {
            __m512i xv = _mm512_loadu_si512(j->xb + (m0 + a) * KP + k);
            for (int r = 0; r < R; r++)
                acc[a][r] = _mm512_dpbf16_ps(acc[a][r], (__m512bh)xv, (__m512bh)b[r]);
        }
    }
    if (k < K) {
        __mmask32 msk = tail32(K - k);
        for (int r = 0; r < R; r++) {
            __m512i b = _mm512_maskz_loadu_epi16(msk, w + r * K + k);
            for (int a = 0; a < MB; a++) {
                __m512i xv = _mm512_loadu_si512(j->xb + (m0 + a) * KP + k); /* zero padded */
                acc[a][r] = _mm512_dpbf16_ps(acc[a][r], (__m512bh)xv, (__m512bh)b);
            }
        }
    }
    for (int a = 0; a < MB; a++)
        for (int r = 0; r < R; r++)
            j->y[(m0 + a) * j->N + n + r] = j->alpha * v16_sum(acc[a][r]);
}

/* One row of x (decode): as nk512_row1, 128 weights (256 bytes) of each of R rows a pass. */
static ALWAYS_INLINE SIMD_T512BF void nkd_row1(const int R, const gemv_job *j, int64_t n)
{
    const int64_t K = j->K;
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int q = 0; q < 4; q++)
            acc[r][q] = _mm512_setzero_ps();
    const uint16_t *w = (const uint16_t *)j->w + n * K, *x = j->xb;
    int64_t k = 0;
    for (; k + 128 <= K; k += 128)
        for (int q = 0; q < 4; q++) {
            __m512i xv = _mm512_loadu_si512(x + k + 32 * q);
            for (int r = 0; r < R; r++)
                acc[r][q] = _mm512_dpbf16_ps(acc[r][q], (__m512bh)xv,
                                             (__m512bh)_mm512_loadu_si512(w + r * K + k + 32 * q));
        }
    for (; k + 32 <= K; k += 32) {
        __m512i xv = _mm512_loadu_si512(x + k);
        for (int r = 0; r < R; r++)
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)xv,
                                         (__m512bh)_mm512_loadu_si512(w + r * K + k));
    }
    if (k < K) {
        __mmask32 msk = tail32(K - k);
        __m512i xv = _mm512_loadu_si512(x + k); /* zero padded */
        for (int r = 0; r < R; r++)
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)xv,
                                         (__m512bh)_mm512_maskz_loadu_epi16(msk, w + r * K + k));
    }
    for (int r = 0; r < R; r++)
        j->y[n + r] = j->alpha * v16_sum(_mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]),
                                                       _mm512_add_ps(acc[r][2], acc[r][3])));
}

static ALWAYS_INLINE SIMD_T512BF void nkd_mb(const int MB, const gemv_job *j, int64_t m0,
                                             int64_t n0, int64_t n1)
{
    int64_t n = n0;
    if (MB == 1 && j->M == 1) {
        for (; n + 4 <= n1; n += 4)
            nkd_row1(4, j, n);
        for (; n < n1; n++)
            nkd_row1(1, j, n);
        return;
    }
    for (; n + 4 <= n1; n += 4)
        nkd_block(MB, 4, j, m0, n);
    for (; n < n1; n++)
        nkd_block(MB, 1, j, m0, n);
}

static SIMD_T512BF void nkd512(const gemv_job *j, int64_t n0, int64_t n1)
{
    for (int64_t m0 = 0; m0 < j->M; m0 += 4) {
        switch (j->M - m0 < 4 ? (int)(j->M - m0) : 4) {
        case 1: nkd_mb(1, j, m0, n0, n1); break;
        case 2: nkd_mb(2, j, m0, n0, n1); break;
        case 3: nkd_mb(3, j, m0, n0, n1); break;
        default: nkd_mb(4, j, m0, n0, n1); break;
        }
    }
}

/* W [K, N] bf16 by pairs of rows: W[k][n] and W[k+1][n] interleaved (vpunpck{l,h}wd within each
 * 128-bit lane) and dotted with (x[k], x[k+1]) by vdpbf16ps. The low unpack holds columns
 * 8L..8L+3 of lane L, the high one 8L+4..8L+7: the partial sums keep that order (perm 2). */
static ALWAYS_INLINE SIMD_T512BF void knd_rows(const int PAIRS, const int ALL, const gemv_job *j,
                                               int64_t k, int64_t k1, int64_t k0, float *p)
{
    const int64_t N = j->N, NP = j->npad, KP = j->kpad;
    const uint16_t *w = (const uint16_t *)j->w + k * N;
    /* ALL: every row of the pass exists (no checks in the loop) */
    const int64_t rows = ALL ? 2 * PAIRS : k1 - k < 2 * PAIRS ? k1 - k : 2 * PAIRS;
    /* each row of x's pairs (x[k], x[k+1]) for this pass, made once for all columns; a lone last
     * row pairs with zeros on both sides (0 * inf would be NaN) */
    uint32_t xq[GEMV_MAX_M][8];
    for (int64_t m = 0; m < j->M; m++)
        for (int pr = 0; pr < PAIRS; pr++) {
            const uint16_t *x = j->xb + m * KP + k;
            uint32_t hi16 = 2 * pr + 1 < rows ? (uint32_t)x[2 * pr + 1] << 16 : 0;
            xq[m][pr] = (uint32_t)x[2 * pr] | hi16;
        }
    for (int64_t n = 0; n < N; n += 32) {
        __m512i lo[8], hi[8];
        const int full = n + 32 <= N;
        const __mmask32 msk = tail32(N - n);
        for (int pr = 0; pr < PAIRS; pr++) {
            __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
            if (ALL && full) {
                a = _mm512_loadu_si512(w + 2 * pr * N + n);
                b = _mm512_loadu_si512(w + (2 * pr + 1) * N + n);
            } else {
                if (2 * pr < rows)
                    a = full ? _mm512_loadu_si512(w + 2 * pr * N + n)
                             : _mm512_maskz_loadu_epi16(msk, w + 2 * pr * N + n);
                if (2 * pr + 1 < rows)
                    b = full ? _mm512_loadu_si512(w + (2 * pr + 1) * N + n)
                             : _mm512_maskz_loadu_epi16(msk, w + (2 * pr + 1) * N + n);
            }
            lo[pr] = _mm512_unpacklo_epi16(a, b);
            hi[pr] = _mm512_unpackhi_epi16(a, b);
        }
        for (int64_t m = 0; m < j->M; m++) {
            float *pm = p + m * NP + n;
            __m512 al = k == k0 ? _mm512_setzero_ps() : _mm512_loadu_ps(pm);
            __m512 ah = k == k0 ? _mm512_setzero_ps() : _mm512_loadu_ps(pm + 16);
            for (int pr = 0; pr < PAIRS; pr++) {
                __m512i xv = _mm512_set1_epi32((int)xq[m][pr]);
                al = _mm512_dpbf16_ps(al, (__m512bh)lo[pr], (__m512bh)xv);
                ah = _mm512_dpbf16_ps(ah, (__m512bh)hi[pr], (__m512bh)xv);
            }
            _mm512_storeu_ps(pm, al);
            _mm512_storeu_ps(pm + 16, ah);
        }
    }
}

static SIMD_T512BF void knd512(const gemv_job *j, int64_t k0, int64_t k1, float *p)
{
    int64_t k = k0;
    for (; k + 16 <= k1; k += 16)
        knd_rows(8, 1, j, k, k1, k0, p);
    for (; k < k1; k += 2)
        knd_rows(1, 0, j, k, k1, k0, p);
}

/* ---- AVX2 ------------------------------------------------------------------------------------ */

static ALWAYS_INLINE SIMD_T256 void nk256_block(const baton_dtype dt, const int MB, const int R,
                                                const gemv_job *j, int64_t m0, int64_t n)
{
    const size_t es = baton_dtype_size(dt);
    const int64_t K = j->K;
    __m256 acc[4][4];
    for (int a = 0; a < MB; a++)
        for (int r = 0; r < R; r++)
            acc[a][r] = _mm256_setzero_ps();
    const char *w = j->w + es * (size_t)(n * K);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 b[4];
        for (int r = 0; r < R; r++)
            b[r] = v8_load(dt, w + es * (size_t)(r * K + k));
        for (int a = 0; a < MB; a++) {
            __m256 xv = _mm256_loadu_ps(j->x + (m0 + a) * K + k);
            for (int r = 0; r < R; r++)
                acc[a][r] = _mm256_fmadd_ps(xv, b[r], acc[a][r]);
        }
    }
    for (int a = 0; a < MB; a++)
        for (int r = 0; r < R; r++) {
            float s = v8_sum(acc[a][r]);
            for (int64_t t = k; t < K; t++)
                s += j->x[(m0 + a) * K + t] * wload(dt, w, r * K + t);
            j->y[(m0 + a) * j->N + n + r] = j->alpha * s;
        }
}

static ALWAYS_INLINE SIMD_T256 void nk256_mb(const baton_dtype dt, const int MB, const gemv_job *j,
                                             int64_t m0, int64_t n0, int64_t n1)
{
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4)
        nk256_block(dt, MB, 4, j, m0, n);
    for (; n < n1; n++)
        nk256_block(dt, MB, 1, j, m0, n);
}

static ALWAYS_INLINE SIMD_T256 void nk256_dt(const baton_dtype dt, const gemv_job *j, int64_t n0,
                                             int64_t n1)
{
    for (int64_t m0 = 0; m0 < j->M; m0 += 4) {
        switch (j->M - m0 < 4 ? (int)(j->M - m0) : 4) {
        case 1: nk256_mb(dt, 1, j, m0, n0, n1); break;
        case 2: nk256_mb(dt, 2, j, m0, n0, n1); break;
        case 3: nk256_mb(dt, 3, j, m0, n0, n1); break;
        default: nk256_mb(dt, 4, j, m0, n0, n1); break;
        }
    }
}

static SIMD_T256 void nk256(const gemv_job *j, int64_t n0, int64_t n1)
{
    if (j->dt == BATON_DTYPE_BF16)
        nk256_dt(BATON_DTYPE_BF16, j, n0, n1);
    else if (j->dt == BATON_DTYPE_F16)
        nk256_dt(BATON_DTYPE_F16, j, n0, n1);
    else
        nk256_dt(BATON_DTYPE_F32, j, n0, n1);
}

static ALWAYS_INLINE SIMD_T256 void kn256_dt(const baton_dtype dt, const gemv_job *j, int64_t k0,
                                             int64_t k1, float *p)
{
    const size_t es = baton_dtype_size(dt);
    const int64_t N = j->N, K = j->K;
    for (int64_t k = k0; k < k1; k++) {
        const char *w = j->w + es * (size_t)(k * N);
        for (int64_t m = 0; m < j->M; m++) {
            const float xs = j->x[m * K + k];
            const __m256 xv = _mm256_set1_ps(xs);
            float *pm = p + m * j->npad;
            int64_t n = 0;
            for (; n + 8 <= N; n += 8) {
                __m256 acc = k == k0 ? _mm256_setzero_ps() : _mm256_loadu_ps(pm + n);
                _mm256_storeu_ps(pm + n, _mm256_fmadd_ps(xv, v8_load(dt, w + es * (size_t)n), acc));
            }
            for (; n < N; n++) {
                float acc = k == k0 ? 0.0f : pm[n];
                pm[n] = __builtin_fmaf(xs, wload(dt, w, n), acc);
            }
        }
    }
}

static SIMD_T256 void kn256(const gemv_job *j, int64_t k0, int64_t k1, float *p)
{
    if (j->dt == BATON_DTYPE_BF16)
        kn256_dt(BATON_DTYPE_BF16, j, k0, k1, p);
    else if (j->dt == BATON_DTYPE_F16)
        kn256_dt(BATON_DTYPE_F16, j, k0, k1, p);
    else
        kn256_dt(BATON_DTYPE_F32, j, k0, k1, p);
}
#endif /* SIMD_X86 */

/* ---- tasks ----------------------------------------------------------------------------------- */

static void nk_task(void *arg, int64_t t)
{
    const gemv_job *j = arg;
    int64_t n0 = t * j->per_task, n1 = n0 + j->per_task < j->N ? n0 + j->per_task : j->N;
#ifdef SIMD_X86
    if (j->bfdot)
        nkd512(j, n0, n1);
    else if (j->perm)
        nkp512(j, n0, n1);
    else if (j->level == SIMD_AVX512)
        nk512(j, n0, n1);
    else if (j->level == SIMD_AVX2)
        nk256(j, n0, n1);
    else
#endif
        nk_scalar(j, n0, n1);
}

static void kn_task(void *arg, int64_t t)
{
    const gemv_job *j = arg;
    int64_t k0 = t * j->per_task, k1 = k0 + j->per_task < j->K ? k0 + j->per_task : j->K;
    float *p = j->partial + t * j->M * j->npad;
#ifdef SIMD_X86
    if (j->bfdot)
        knd512(j, k0, k1, p);
    else if (j->perm)
        knp512(j, k0, k1, p);
    else if (j->level == SIMD_AVX512)
        kn512(j, k0, k1, p);
    else if (j->level == SIMD_AVX2)
        kn256(j, k0, k1, p);
    else
#endif
        kn_scalar(j, k0, k1, p);
}

/* y = alpha * (the partial sums added in task order), over a range of columns. */
#define REDUCE_COLS 1024
static void reduce_task(void *arg, int64_t t)
{
    const gemv_job *j = arg;
    int64_t n0 = t * REDUCE_COLS, n1 = n0 + REDUCE_COLS < j->N ? n0 + REDUCE_COLS : j->N;
    const size_t stride = (size_t)(j->M * j->npad);
    for (int64_t m = 0; m < j->M; m++) {
        float *y = j->y + m * j->N;
        const float *p = j->partial + m * j->npad;
        /* blocks of 32 stored columns (the partial sums are padded to 32), summed in task order
         * lane by lane, then put back in column order */
        for (int64_t b = n0; b < n1; b += 32) {
            float acc[32];
            memcpy(acc, p + b, sizeof acc);
            for (int64_t s = 1; s < j->n_tasks; s++) {
                const float *ps = p + (size_t)s * stride + (size_t)b;
                for (int i = 0; i < 32; i++)
                    acc[i] += ps[i];
            }
            const int64_t e = b + 32 < n1 ? b + 32 : n1;
            for (int64_t n = b; n < e; n++) {
                int c = (int)(n & 31), q = c;
                if (j->perm == 2) /* the unpack order: see knd_rows */
                    q = ((c & 7) < 4 ? 0 : 16) + (c >> 3) * 4 + (c & 3);
                else if (j->perm)
                    q = (c >> 1) + ((c & 1) << 4);
                y[n] = j->alpha * acc[q];
            }
        }
    }
}

void baton__gemv_run(baton_dtype wdt, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *x, const void *w, float *y, float *partial)
{
    gemv_job j = {.dt = wdt,
                  .M = M,
                  .N = N,
                  .K = K,
                  .alpha = alpha,
                  .x = x,
                  .w = w,
                  .y = y,
                  .partial = partial,
                  .level = baton__simd_level_get(),
                  .kpad = pad32(K),
                  .npad = pad32(N)};
    j.perm = j.level == SIMD_AVX512 && wdt == BATON_DTYPE_BF16;
    const int64_t es = (int64_t)baton_dtype_size(wdt);
    int64_t per_kn = rows_per_task(K, N * es, KN_GRAIN, KN_MAX_TASKS);
    int64_t tasks_kn = (K + per_kn - 1) / per_kn;
    j.bfdot = j.perm && baton__simd_has_bf16_dot();
    if (j.bfdot) { /* x back in bf16 [M, kpad] (exact), zero padded, after the partial sums */
        uint16_t *xb = (uint16_t *)(partial + tasks_kn * M * j.npad);
        for (int64_t m = 0; m < M; m++) {
            baton__cvt_from_f32(BATON_DTYPE_BF16, x + m * K, xb + m * j.kpad, K);
            memset(xb + m * j.kpad + K, 0, sizeof(uint16_t) * (size_t)(j.kpad - K));
        }
        j.xb = xb;
        if (!trans_b)
            j.perm = 2;
    }
    if (trans_b) {
        if (j.bfdot) {
            /* x is in xb already */
        } else if (j.perm) { /* x in the bf16 order, after the [K, N] form's space */
            float *xp = partial + tasks_kn * M * j.npad;
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < j.kpad; k++) {
                    int64_t b = k & ~31, i = k & 31;
                    int64_t src = b + (i < 16 ? 2 * i : 2 * (i - 16) + 1);
                    xp[m * j.kpad + k] = src < K ? x[m * K + src] : 0.0f;
                }
            j.xp = xp;
        }
        j.per_task = rows_per_task(N, K * es, NK_GRAIN, NK_MAX_TASKS);
        j.n_tasks = (N + j.per_task - 1) / j.per_task;
        baton__par_for(j.n_tasks, nk_task, &j);
        return;
    }
    j.per_task = per_kn;
    j.n_tasks = tasks_kn;
    baton__par_for(j.n_tasks, kn_task, &j);
    baton__par_for((N + REDUCE_COLS - 1) / REDUCE_COLS, reduce_task, &j);
}
