/* gemm_openblas.c: the CPU backend of the gemm delegate, on OpenBLAS's cblas. f32 and f64 go
 * straight to sgemm/dgemm; bf16 and f16 are widened to f32 into scratch buffers that init()
 * allocates, multiplied with sgemm and rounded back (nearest even), so execute() allocates nothing.
 */
#include <cblas.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "delegates/gemm.h"
#include "core/dtype.h"

typedef struct gemm_cpu {
    baton_gemm_desc d;
    float *sa, *sb, *sc; /* f32 copies of a, b and the product (bf16/f16 only) */
    int b_cached;        /* b is a plan constant: sb was widened once, at init */
} gemm_cpu;

static void widen(baton_dtype dt, const uint16_t *src, float *dst, size_t n)
{
    if (dt == BATON_DTYPE_BF16)
        for (size_t i = 0; i < n; i++)
            dst[i] = bf16_to_f32(src[i]);
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = f16_to_f32(src[i]);
}

static void narrow(baton_dtype dt, const float *src, uint16_t *dst, size_t n)
{
    if (dt == BATON_DTYPE_BF16)
        for (size_t i = 0; i < n; i++)
            dst[i] = f32_to_bf16(src[i]);
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = f32_to_f16(src[i]);
}

static void gemm_cpu_destroy(void *state)
{
    gemm_cpu *g = state;
    if (!g)
        return;
    free(g->sa);
    free(g->sb);
    free(g->sc);
    free(g);
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
    int rc = baton_gemm_resolve(info->sig, &d, NULL, msg, sizeof msg);
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
    if (d.dtype == BATON_DTYPE_BF16 || d.dtype == BATON_DTYPE_F16) {
        g->sa = malloc(sizeof(float) * (size_t)d.m * (size_t)d.k);
        g->sb = malloc(sizeof(float) * (size_t)d.k * (size_t)d.n);
        g->sc = malloc(sizeof(float) * (size_t)d.m * (size_t)d.n);
        if (!g->sa || !g->sb || !g->sc)
            goto nomem;
        /* A constant weight never changes: widen it once instead of on every call (for a
         * 4096 x 4096 weight that is most of the step's time). */
        if (info->input_constant && info->input_constant[1] && info->input_data &&
            info->input_data[1]) {
            widen((baton_dtype)d.dtype, info->input_data[1], g->sb, (size_t)d.k * (size_t)d.n);
            g->b_cached = 1;
        }
    }
    *state = g;
    return 0;
nomem:
    gemm_cpu_destroy(g);
    if (err) {
        err->code = BATON_ENOMEM;
        snprintf(err->message, sizeof err->message,
                 "step %s (gemm on cpu): out of memory for the f32 scratch buffers of a %lldx%lld "
                 "by %lldx%lld product",
                 step, (long long)d.m, (long long)d.k, (long long)d.k, (long long)d.n);
    }
    return BATON_ENOMEM;
}

static int gemm_cpu_execute(void *state, const baton_exec_ctx *ctx, void **buffers)
{
    gemm_cpu *g = state;
    if (!g) {
        return ctx_fail(ctx, BATON_EINVAL, "gemm (cpu): no state: init() did not run or failed");
    }
    if (!buffers || !buffers[0] || !buffers[1] || !buffers[2]) {
        return ctx_fail(ctx, BATON_EINVAL, "gemm (cpu): a NULL buffer (a, b, out expected)");
    }
    const baton_gemm_desc *d = &g->d;
    /* A plan's dims may bind fewer rows than init saw (docs/plan-format.md): the run's shapes
     * are in ctx->sig. Only M may shrink; the scratch buffers hold the max. */
    baton_gemm_desc run;
    char why[8];
    if (ctx && ctx->sig && baton_gemm_resolve(ctx->sig, &run, NULL, why, sizeof why) == 0 &&
        run.m <= d->m && run.n == d->n && run.k == d->k && run.m != d->m)
        d = &run;
    int m = (int)d->m, n = (int)d->n, k = (int)d->k;
    int ta = (d->flags & BATON_GEMM_TRANS_A) != 0, tb = (d->flags & BATON_GEMM_TRANS_B) != 0;
    /* Row-major: a is [M,K] (lda K) or [K,M] (lda M); b is [K,N] (ldb N) or [N,K] (ldb K). */
    int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE opb = tb ? CblasTrans : CblasNoTrans;
    switch ((baton_dtype)d->dtype) {
    case BATON_DTYPE_F32:
        cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, (float)d->alpha, buffers[0], lda, buffers[1],
                    ldb, 0.0f, buffers[2], ldc);
        return 0;
    case BATON_DTYPE_F64:
        cblas_dgemm(CblasRowMajor, opa, opb, m, n, k, d->alpha, buffers[0], lda, buffers[1], ldb,
                    0.0, buffers[2], ldc);
        return 0;
    case BATON_DTYPE_BF16:
    case BATON_DTYPE_F16:
        widen((baton_dtype)d->dtype, buffers[0], g->sa, (size_t)d->m * (size_t)d->k);
        if (!g->b_cached)
            widen((baton_dtype)d->dtype, buffers[1], g->sb, (size_t)d->k * (size_t)d->n);
        cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, (float)d->alpha, g->sa, lda, g->sb, ldb, 0.0f,
                    g->sc, ldc);
        narrow((baton_dtype)d->dtype, g->sc, buffers[2], (size_t)d->m * (size_t)d->n);
        return 0;
    default:
        return ctx_fail(ctx, BATON_EINVAL,
                        "gemm (cpu): dtype code %d is not one of f32, f64, bf16, f16",
                        (int)d->dtype);
    }
}

const baton_delegate_iface baton_gemm_openblas_iface = {
    .struct_size = sizeof(baton_delegate_iface),
    .init = gemm_cpu_init,
    .execute = gemm_cpu_execute,
    .destroy = gemm_cpu_destroy,
    .capturable = 0,
};
