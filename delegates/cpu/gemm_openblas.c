/* gemm_openblas.c: the CPU backend of the gemm delegate. A few rows of x (the GEMV of decode) go
 * to baton's own kernels (gemv.c), which read the weight in its dtype (a constant [K, N] weight
 * through an [N, K] copy made once at init and shared); more rows go to OpenBLAS's sgemm/dgemm,
 * bf16 and f16 through f32 copies (a constant weight's made once at init and shared). execute()
 * allocates nothing. docs/decisions/cpu-gemm.md says what was measured. */
#include <cblas.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <sys/mman.h>

#include "core/core.h"
#include "core/dtype.h"
#include "core/simd.h"
#include "core/threads.h"
#include "delegates/cpu/gemv.h"
#include "delegates/gemm.h"

/* Rows of x up to which baton's own kernels (gemv.c) run instead of OpenBLAS: measured
 * (docs/decisions/cpu-gemm.md). W [N, K] is read as rows dotted with each row of x, which stays
 * ahead of sgemm past 16 rows; W [K, N] accumulates partial sums per row of x, which sgemm
 * overtakes between 8 and 16. */
static int64_t gemv_max_m(const baton_gemm_desc *d)
{
    return (d->flags & BATON_GEMM_TRANS_B) ? GEMV_MAX_M : 8;
}

/* Prepared copies of constant weights, shared by every step (of every runtime) that multiplies by
 * the same constant: made once, counted, freed with the last step. Two kinds: an f32 copy of a
 * 16-bit weight for the OpenBLAS path, and a [K, N] weight transposed to [N, K] in its own dtype
 * for the GEMV (the GEMV streams [N, K] one row at a time: cpu-gemm.md); both through
 * alloc_copy. */
typedef struct wcopy {
    struct wcopy *next;
    const void *src;
    baton_dtype dt;
    size_t n;
    int64_t k; /* transposed: the source's rows (K); 0 for an f32 copy */
    float *f32;
    void *nk; /* transposed: [N, K] in dt */
    size_t bytes;
    int refs;
} wcopy;

static pthread_mutex_t wcopy_lock = PTHREAD_MUTEX_INITIALIZER;
static wcopy *wcopies;
static size_t wcopy_bytes;

size_t baton__gemm_cpu_prepared_bytes(void)
{
    pthread_mutex_lock(&wcopy_lock);
    size_t b = wcopy_bytes;
    pthread_mutex_unlock(&wcopy_lock);
    return b;
}

/* [K, N] -> [N, K], elements of es bytes, in tiles that keep both sides' lines in the cache. */
#define TRANSPOSE(T)                                                                               \
    do {                                                                                           \
        const T *s = src;                                                                          \
        T *t = dst;                                                                                \
        for (int64_t k0 = 0; k0 < k; k0 += 32)                                                     \
            for (int64_t n0 = 0; n0 < n; n0 += 32)                                                 \
                for (int64_t c = n0; c < n && c < n0 + 32; c++)                                    \
                    for (int64_t r = k0; r < k && r < k0 + 32; r++)                                \
                        t[c * k + r] = s[r * n + c];                                               \
    } while (0)

static void transpose(const void *src, void *dst, int64_t k, int64_t n, size_t es)
{
    if (es == 2)
        TRANSPOSE(uint16_t);
    else
        TRANSPOSE(uint32_t);
}

/* A prepared copy of 4 MiB or more goes on 2 MiB pages where the kernel lends them on request
 * (transparent huge pages in "madvise" mode, the default of many distributions): every run streams
 * it whole, and on 4 KiB pages that is a TLB miss every 4 KiB; the GEMV on a 32 MiB copy ran about
 * 5 % faster (docs/decisions/cpu-gemm.md). In whole huge pages, which *bytes then counts (what
 * is resident once the copy is written). */
#define HUGE_PAGE ((size_t)2 << 20)
static void *alloc_copy(size_t *bytes)
{
    if (*bytes < 2 * HUGE_PAGE)
        return aligned_alloc(64, (*bytes + 63) / 64 * 64);
    const size_t sz = (*bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = aligned_alloc(HUGE_PAGE, sz);
    *bytes = sz;
#ifdef MADV_HUGEPAGE
    if (p)
        (void)madvise(p, sz, MADV_HUGEPAGE); /* advice: refused, the copy works the same */
#endif
    return p;
}

/* kk = 0: an f32 copy of n values; kk > 0: the [kk, n / kk] weight transposed, in dt. */
static wcopy *wcopy_get(const void *src, baton_dtype dt, size_t n, int64_t kk, int *made)
{
    pthread_mutex_lock(&wcopy_lock);
    wcopy *c = wcopies;
    while (c && !(c->src == src && c->dt == dt && c->n == n && c->k == kk))
        c = c->next;
    *made = 0;
    size_t bytes = kk ? baton_dtype_size(dt) * n : sizeof(float) * n;
    if (c) {
        c->refs++;
    } else if ((c = calloc(1, sizeof *c)) && (kk ? (c->nk = alloc_copy(&bytes)) != NULL
                                                 : (c->f32 = alloc_copy(&bytes)) != NULL)) {
        c->src = src;
        c->dt = dt;
        c->n = n;
        c->k = kk;
        c->bytes = bytes;
        c->refs = 1;
        if (kk)
            transpose(src, c->nk, kk, (int64_t)n / kk, baton_dtype_size(dt));
        else
            baton__cvt_to_f32(dt, src, c->f32, (int64_t)n);
        c->next = wcopies;
        wcopies = c;
        wcopy_bytes += bytes;
        *made = 1;
    } else {
        free(c);
        c = NULL;
    }
    pthread_mutex_unlock(&wcopy_lock);
    return c;
}

static void wcopy_put(wcopy *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&wcopy_lock);
    if (--c->refs == 0) {
        wcopy **pp = &wcopies;
        while (*pp != c)
            pp = &(*pp)->next;
        *pp = c->next;
        wcopy_bytes -= c->bytes;
        free(c->f32);
        free(c->nk);
        free(c);
    }
    pthread_mutex_unlock(&wcopy_lock);
}

typedef struct gemm_cpu {
    baton_gemm_desc d; /* at the plan's largest shapes */
    /* OpenBLAS path (M above gemv_max_m), bf16/f16: f32 copies of a, b and the product */
    float *sa, *sb, *sc;
    wcopy *wc; /* b is a plan constant: its shared f32 copy, in place of sb */
    wcopy *wt; /* b is a constant [K, N] and every run takes the GEMV: its shared [N, K] copy */
    /* gemv path: x in f32 [M, K], y in f32 [M, N] (16-bit outputs), the per-task sums */
    float *xf, *yf, *partial;
    size_t own_bytes; /* all of the above but wc: for baton_pool_memory */
} gemm_cpu;

static void gemm_cpu_destroy(void *state)
{
    gemm_cpu *g = state;
    if (!g)
        return;
    free(g->sa);
    free(g->sb);
    free(g->sc);
    free(g->xf);
    free(g->yf);
    free(g->partial);
    wcopy_put(g->wc);
    wcopy_put(g->wt);
    free(g);
}

const void *baton__gemm_cpu_gemv_weight(const void *state, const void *b)
{
    const gemm_cpu *g = state;
    return g && g->wt ? g->wt->nk : b;
}

static int gemm_cpu_init(const baton_delegate_init *info, void **state, baton_error *err)
{
    char msg[512];
    const char *step = info && info->step_name ? info->step_name : "?";
    if (!info || !state) {
        if (err) {
            err->code = BATON_EINVAL;
            snprintf(err->message, sizeof err->message, "gemm (cpu): init called without %s",
                     info ? "a state pointer" : "its info");
        }
        return BATON_EINVAL;
    }
    *state = NULL;
    baton_gemm_desc d;
    int rc = baton__gemm_resolve(info->sig, &d, NULL, msg, sizeof msg);
    if (rc) {
        if (err) {
            err->code = rc;
            snprintf(err->message, sizeof err->message, "step %s (gemm on cpu): %s", step, msg);
        }
        return rc;
    }
    /* cblas takes int sizes and leading dimensions. */
    if (d.m > INT_MAX || d.n > INT_MAX || d.k > INT_MAX) {
        if (err) {
            err->code = BATON_ENOTSUP;
            snprintf(err->message, sizeof err->message,
                     "step %s (gemm on cpu): M=%lld, N=%lld, K=%lld exceed OpenBLAS's 32-bit "
                     "sizes (%d): split the product into smaller gemm steps",
                     step, (long long)d.m, (long long)d.n, (long long)d.k, INT_MAX);
        }
        return BATON_ENOTSUP;
    }
    gemm_cpu *g = calloc(1, sizeof *g);
    if (!g)
        goto nomem;
    g->d = d;
    const baton_dtype dt = (baton_dtype)d.dtype;
    const int half = dt == BATON_DTYPE_BF16 || dt == BATON_DTYPE_F16;
    if (dt != BATON_DTYPE_F64) {
        int64_t gm = d.m < gemv_max_m(&d) ? d.m : gemv_max_m(&d);
        g->xf = malloc(sizeof(float) * (size_t)(gm * d.k));
        g->yf = half ? malloc(sizeof(float) * (size_t)(gm * d.n)) : NULL;
        /* the most any run's K needs (a plan's dim may bind K below the max: gemm.h) */
        size_t partial = 0;
        for (int64_t k = 1; k <= d.k; k++) {
            const size_t f = baton__gemv_partial_floats(gm, d.n, k, dt);
            partial = f > partial ? f : partial;
        }
        g->partial = malloc(sizeof(float) * partial);
        if (!g->xf || (half && !g->yf) || !g->partial)
            goto nomem;
        g->own_bytes +=
            sizeof(float) * ((size_t)(gm * d.k) + (half ? (size_t)(gm * d.n) : 0) + partial);
    }
    if (half && d.m > gemv_max_m(&d)) {
        g->sa = malloc(sizeof(float) * (size_t)d.m * (size_t)d.k);
        g->sc = malloc(sizeof(float) * (size_t)d.m * (size_t)d.n);
        if (!g->sa || !g->sc)
            goto nomem;
        g->own_bytes += sizeof(float) * (size_t)d.m * ((size_t)d.k + (size_t)d.n);
        /* A constant weight never changes: widen it once, shared by every step using it,
         * instead of on every call (for a 4096 x 4096 weight that is most of the step's time). */
        if (info->input_constant && info->input_constant[1] && info->input_data &&
            info->input_data[1]) {
            int made = 0;
            g->wc = wcopy_get(info->input_data[1], dt, (size_t)d.k * (size_t)d.n, 0, &made);
            if (!g->wc)
                goto nomem;
            if (made)
                baton__log_msg(
                    BATON_LOG_NOTE,
                    "step %s (gemm on cpu): an f32 copy of its constant %s weight for "
                    "OpenBLAS (M up to %lld): %zu bytes, shared with every step using it; "
                    "%zu bytes of such copies in all",
                    step, baton_dtype_name(dt), (long long)d.m,
                    sizeof(float) * (size_t)d.k * (size_t)d.n, baton__gemm_cpu_prepared_bytes());
        } else {
            g->sb = malloc(sizeof(float) * (size_t)d.k * (size_t)d.n);
            if (!g->sb)
                goto nomem;
            g->own_bytes += sizeof(float) * (size_t)d.k * (size_t)d.n;
        }
    }
    /* A constant [K, N] weight of a step whose every run takes the GEMV: transposed once to
     * [N, K], which the GEMV streams one row at a time instead of accumulating partial sums
     * over many rows (57 % against 85-90 % of the read bandwidth, docs/decisions/cpu-gemm.md). */
    if (dt != BATON_DTYPE_F64 && !(d.flags & BATON_GEMM_TRANS_B) && d.m <= gemv_max_m(&d) &&
        info->input_constant && info->input_constant[1] && info->input_data &&
        info->input_data[1]) {
        int made = 0;
        g->wt = wcopy_get(info->input_data[1], dt, (size_t)d.k * (size_t)d.n, d.k, &made);
        if (!g->wt)
            goto nomem;
        if (made)
            baton__log_msg(BATON_LOG_NOTE,
                           "step %s (gemm on cpu): its constant %s weight [K, N] transposed once "
                           "to [N, K] for the GEMV: %zu bytes, shared with every step using it; "
                           "%zu bytes of prepared copies in all",
                           step, baton_dtype_name(dt), g->wt->bytes,
                           baton__gemm_cpu_prepared_bytes());
    }
    /* Fault the scratch in now: the first run pays no page faults, and what baton_pool_memory
     * reports is what is resident. */
    if (g->xf) {
        int64_t gm = d.m < gemv_max_m(&d) ? d.m : gemv_max_m(&d);
        memset(g->xf, 0, sizeof(float) * (size_t)(gm * d.k));
        if (g->yf)
            memset(g->yf, 0, sizeof(float) * (size_t)(gm * d.n));
        memset(g->partial, 0, sizeof(float) * baton__gemv_partial_floats(gm, d.n, d.k, dt));
    }
    if (g->sa) {
        memset(g->sa, 0, sizeof(float) * (size_t)d.m * (size_t)d.k);
        memset(g->sc, 0, sizeof(float) * (size_t)d.m * (size_t)d.n);
    }
    if (g->sb)
        memset(g->sb, 0, sizeof(float) * (size_t)d.k * (size_t)d.n);
    *state = g;
    return 0;
nomem:
    gemm_cpu_destroy(g);
    if (err) {
        err->code = BATON_ENOMEM;
        snprintf(err->message, sizeof err->message,
                 "step %s (gemm on cpu): out of memory for the scratch buffers of a %lldx%lld "
                 "by %lldx%lld product",
                 step, (long long)d.m, (long long)d.k, (long long)d.k, (long long)d.n);
    }
    return BATON_ENOMEM;
}

/* The run's M: from the step's signature as the runtime bound it (a plan with dims), else init's.
 */
static int64_t run_m(const gemm_cpu *g, const baton_exec_ctx *ctx)
{
    return baton__gemm_run_m(&g->d, ctx->sig);
}

/* OpenBLAS's threads follow the step's thread budget (its own pool, not baton's: the two never
 * run at once, since the calling thread waits in sgemm). */
static void blas_threads(void)
{
    static _Atomic int last = 0;
    int want = baton__par_threads();
    if (atomic_exchange(&last, want) != want)
        openblas_set_num_threads(want);
}

static int gemm_cpu_execute(void *state, const baton_exec_ctx *ctx, void **buffers)
{
    gemm_cpu *g = state;
    if (!g) {
        return baton__ctx_fail(ctx, BATON_EINVAL,
                               "gemm (cpu): no state: init() did not run or failed");
    }
    const baton_gemm_desc *d = &g->d;
    const int add = d->beta != 0; /* gemm_add: buffers a, b, c, y */
    if (!buffers || !buffers[0] || !buffers[1] || !buffers[2] || (add && !buffers[3])) {
        return baton__ctx_fail(ctx, BATON_EINVAL, "gemm (cpu): a NULL buffer (a, b, out expected)");
    }
    const int64_t rm = run_m(g, ctx), rk = baton__gemm_run_k(d, ctx->sig);
    if (rm < 1 || rm > d->m)
        return baton__ctx_fail(
            ctx, BATON_EINVAL,
            "gemm (cpu): this run's a gives M = %lld, outside 1..%lld, the M the step "
            "was prepared for",
            (long long)rm, (long long)d->m);
    if (rk < 1 || rk > d->k || (rk != d->k && (g->wt || g->wc)))
        return baton__ctx_fail(ctx, BATON_EINVAL,
                               "gemm (cpu): this run's a gives K = %lld, outside 1..%lld, the K "
                               "the step was prepared for%s",
                               (long long)rk, (long long)d->k,
                               g->wt || g->wc ? " (b is a constant of that K)" : "");
    char why[256];
    if (baton__gemm_run_n_ok(d, ctx->sig, rk, why, sizeof why))
        return baton__ctx_fail(ctx, BATON_EINVAL, "gemm (cpu): %s", why);
    int m = (int)rm, n = (int)d->n, k = (int)rk;
    void *out = buffers[add ? 3 : 2];
    const int64_t mn = rm * d->n;
    int ta = (d->flags & BATON_GEMM_TRANS_A) != 0, tb = (d->flags & BATON_GEMM_TRANS_B) != 0;
    const baton_dtype dt = (baton_dtype)d->dtype;
    const int half = dt == BATON_DTYPE_BF16 || dt == BATON_DTYPE_F16;
    if (dt != BATON_DTYPE_F64 && rm <= gemv_max_m(d)) {
        /* A few rows: x to f32 (small), the weight streamed as stored. */
        const float *x = g->xf;
        if (dt == BATON_DTYPE_F32 && !ta) {
            x = buffers[0];
        } else if (!ta) {
            baton__cvt_to_f32(dt, buffers[0], g->xf, rm * rk);
        } else {
            for (int64_t p = 0; p < rk; p++)
                for (int64_t i = 0; i < rm; i++)
                    g->xf[i * rk + p] = load_f32(dt, buffers[0], p * rm + i);
        }
        float *y = half ? g->yf : out;
        if (g->wt)
            baton__gemv_run(dt, 1, rm, d->n, rk, (float)d->alpha, x, g->wt->nk, y, g->partial);
        else
            baton__gemv_run(dt, tb, rm, d->n, rk, (float)d->alpha, x, buffers[1], y, g->partial);
        if (add) /* gemm_add: the product, then c added in f32 */
            for (int64_t i = 0; i < mn; i++)
                y[i] += load_f32(dt, buffers[2], i);
        if (half)
            baton__cvt_from_f32(dt, y, out, mn);
        return 0;
    }
    /* gemm_add on the BLAS path: y = c, then the product added into it (beta 1): one rounding */
    if (add && out != buffers[2] && !half)
        memmove(out, buffers[2], (size_t)mn * (dt == BATON_DTYPE_F32 ? 4 : 8));
    /* Row-major: a is [M,K] (lda K) or [K,M] (lda M); b is [K,N] (ldb N) or [N,K] (ldb K). */
    int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE opb = tb ? CblasTrans : CblasNoTrans;
    blas_threads();
    switch (dt) {
    case BATON_DTYPE_F32:
        cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, (float)d->alpha, buffers[0], lda, buffers[1],
                    ldb, (float)d->beta, out, ldc);
        return 0;
    case BATON_DTYPE_F64:
        cblas_dgemm(CblasRowMajor, opa, opb, m, n, k, d->alpha, buffers[0], lda, buffers[1], ldb,
                    d->beta, out, ldc);
        return 0;
    case BATON_DTYPE_BF16:
    case BATON_DTYPE_F16: {
        baton__cvt_to_f32(dt, buffers[0], g->sa, rm * rk);
        const float *b = g->wc ? g->wc->f32 : g->sb;
        if (!g->wc)
            baton__cvt_to_f32(dt, buffers[1], g->sb, rk * d->n);
        if (add)
            baton__cvt_to_f32(dt, buffers[2], g->sc, mn);
        cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, (float)d->alpha, g->sa, lda, b, ldb,
                    (float)d->beta, g->sc, ldc);
        baton__cvt_from_f32(dt, g->sc, out, mn);
        return 0;
    }
    default:
        return baton__ctx_fail(ctx, BATON_EINVAL,
                               "gemm (cpu): dtype code %d is not one of f32, f64, bf16, f16",
                               (int)d->dtype);
    }
}

static void gemm_cpu_memory(void *state, size_t *private_bytes, const void **shared_key,
                            size_t *shared_bytes)
{
    const gemm_cpu *g = state;
    if (!g)
        return;
    *private_bytes = g->own_bytes;
    /* a step holds at most one: wc above the GEMV's rows, wt within them */
    const wcopy *c = g->wc ? g->wc : g->wt;
    if (c) {
        *shared_key = c;
        *shared_bytes = c->bytes;
    }
}

const baton_delegate_iface baton__gemm_openblas_iface = {
    .struct_size = sizeof(baton_delegate_iface),
    .init = gemm_cpu_init,
    .execute = gemm_cpu_execute,
    .destroy = gemm_cpu_destroy,
    .capturable = 0,
    .memory = gemm_cpu_memory,
};
