/* gemv_fused.c: rms_norm_gemm and swiglu_gemm_add on the CPU. The prologue (the norm, or the
 * SwiGLU gating) is computed as the unfused kernels compute it and rounded to the dtype, a chunk
 * of K at a time on the stack, and dotted in float64 with a block of W's rows: nothing is
 * allocated, and the prologue is recomputed once per block of rows (N / 16 times), which costs
 * little next to reading W. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "core/dtype.h"
#include "kernels/cpu/cpu_gemv_fused.h"
#include "kernels/gemv_fused.h"

#define NB 16  /* rows of W a pass */
#define KC 256 /* elements of K a chunk */

static double round_to(baton_dtype dt, double v)
{
    double cell;
    store_f64(dt, &cell, 0, v);
    return load_f64(dt, &cell, 0);
}

/* silu_mul's arithmetic on the CPU (kernels/cpu/decoder_impl.h): f32 for bf16, f16 and f32, f64
 * for f64, then rounded to the dtype. */
static double swiglu_at(baton_dtype dt, double a, double b)
{
    if (dt == BATON_DTYPE_F64)
        return a / (1.0 + exp(-a)) * b;
    const float fa = (float)a, fb = (float)b;
    return round_to(dt, (double)(fa / (1.0f + expf(-fa)) * fb));
}

static void run(int op, const gf_shape *s, double eps, void *const *buf)
{
    const baton_dtype dt = s->dt;
    const int64_t K = s->k, N = s->n, ldx = op == GF_RMS_NORM_GEMM ? K : 2 * K;
    const void *x = buf[0];
    const void *g = op == GF_RMS_NORM_GEMM ? buf[1] : NULL;
    const void *w = op == GF_RMS_NORM_GEMM ? buf[2] : buf[1];
    const void *c = op == GF_SWIGLU_GEMM_ADD ? buf[2] : NULL;
    void *y = buf[3];
    for (int64_t r = 0; r < s->m; r++) {
        const int64_t xr = r * ldx;
        double iv = 0;
        if (op == GF_RMS_NORM_GEMM) { /* rms_norm_fwd's CPU arithmetic (kernels/cpu/rms_norm.c) */
            double ss = 0;
            for (int64_t j = 0; j < K; j++) {
                const double v = load_f64(dt, x, xr + j);
                ss += v * v;
            }
            iv = 1.0 / sqrt(ss / (double)K + eps);
        }
        for (int64_t n0 = 0; n0 < N; n0 += NB) {
            const int nb = N - n0 < NB ? (int)(N - n0) : NB;
            double acc[NB] = {0};
            for (int64_t k0 = 0; k0 < K; k0 += KC) {
                const int kc = K - k0 < KC ? (int)(K - k0) : KC;
                double xs[KC];
                for (int j = 0; j < kc; j++) {
                    const double v = load_f64(dt, x, xr + k0 + j);
                    xs[j] = op == GF_RMS_NORM_GEMM
                                ? round_to(dt, load_f64(dt, g, k0 + j) * (v * iv))
                                : swiglu_at(dt, v, load_f64(dt, x, xr + K + k0 + j));
                }
                for (int i = 0; i < nb; i++) {
                    const int64_t wr = (n0 + i) * K + k0;
                    double a = acc[i];
                    for (int j = 0; j < kc; j++)
                        a += xs[j] * load_f64(dt, w, wr + j);
                    acc[i] = a;
                }
            }
            for (int i = 0; i < nb; i++) {
                const int64_t o = r * N + n0 + i;
                store_f64(dt, y, o, acc[i] + (c ? load_f64(dt, c, o) : 0.0));
            }
        }
    }
}

static int fused(int op, const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    baton_gemv_fused_desc d;
    gf_shape s;
    int rc = baton__gf_call_read(ctx, op, buffers, 4, opaque, len, &d, &s);
    if (rc)
        return rc;
    run(op, &s, d.eps, buffers);
    return 0;
}

int baton__kcpu_rms_norm_gemm(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                              size_t len)
{
    return fused(GF_RMS_NORM_GEMM, ctx, buffers, opaque, len);
}

int baton__kcpu_swiglu_gemm_add(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                size_t len)
{
    return fused(GF_SWIGLU_GEMM_ADD, ctx, buffers, opaque, len);
}
