/* gemv_fused.c: rms_norm_gemm and swiglu_gemm_add on the CPU. The prologue (the norm, or the
 * SwiGLU gating) is computed as the unfused kernels compute it and rounded to the dtype, a chunk
 * of K at a time on the stack, and dotted in float64 with a block of W's rows. Tasks take blocks
 * of W's rows (a split by size alone, so the bits do not depend on the thread count); nothing is
 * allocated, and the prologue is recomputed once per block of rows (N / 16 times), which costs
 * little next to reading W. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "core/dtype.h"
#include "core/threads.h"
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

/* n elements from p + off as float64, the dtype's switch outside the loop. */
static void load_chunk(baton_dtype dt, const void *p, int64_t off, int n, double *out)
{
    switch (dt) {
    case BATON_DTYPE_BF16:
        for (int i = 0; i < n; i++)
            out[i] = bf16_to_f32(((const uint16_t *)p)[off + i]);
        break;
    case BATON_DTYPE_F16:
        for (int i = 0; i < n; i++)
            out[i] = f16_to_f32(((const uint16_t *)p)[off + i]);
        break;
    case BATON_DTYPE_F32:
        for (int i = 0; i < n; i++)
            out[i] = ((const float *)p)[off + i];
        break;
    default:
        for (int i = 0; i < n; i++)
            out[i] = ((const double *)p)[off + i];
        break;
    }
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

typedef struct fused_job {
    int op;
    gf_shape s;
    double eps;
    void *const *buf;
    int64_t blocks_per_task; /* of NB rows of W */
} fused_job;

static void run_task(void *arg, int64_t task)
{
    const fused_job *j = arg;
    const gf_shape *s = &j->s;
    const int op = j->op;
    const baton_dtype dt = s->dt;
    const int64_t K = s->k, N = s->n, ldx = op == GF_RMS_NORM_GEMM ? K : 2 * K;
    const void *x = j->buf[0];
    const void *g = op == GF_RMS_NORM_GEMM ? j->buf[1] : NULL;
    const void *w = op == GF_RMS_NORM_GEMM ? j->buf[2] : j->buf[1];
    const void *c = op == GF_SWIGLU_GEMM_ADD ? j->buf[2] : NULL;
    void *y = j->buf[3];
    const int64_t n_lo = task * j->blocks_per_task * NB;
    int64_t n_hi = n_lo + j->blocks_per_task * NB;
    if (n_hi > N)
        n_hi = N;
    double xs[KC], a[KC], b[KC], wr[KC];
    for (int64_t r = 0; r < s->m; r++) {
        const int64_t xr = r * ldx;
        double iv = 0;
        if (op == GF_RMS_NORM_GEMM) { /* rms_norm_fwd's CPU arithmetic (kernels/cpu/rms_norm.c) */
            double ss = 0;
            for (int64_t k0 = 0; k0 < K; k0 += KC) {
                const int kc = K - k0 < KC ? (int)(K - k0) : KC;
                load_chunk(dt, x, xr + k0, kc, a);
                for (int i = 0; i < kc; i++)
                    ss += a[i] * a[i];
            }
            iv = 1.0 / sqrt(ss / (double)K + j->eps);
        }
        for (int64_t n0 = n_lo; n0 < n_hi; n0 += NB) {
            const int nb = n_hi - n0 < NB ? (int)(n_hi - n0) : NB;
            double acc[NB] = {0};
            for (int64_t k0 = 0; k0 < K; k0 += KC) {
                const int kc = K - k0 < KC ? (int)(K - k0) : KC;
                load_chunk(dt, x, xr + k0, kc, a);
                if (op == GF_RMS_NORM_GEMM) {
                    load_chunk(dt, g, k0, kc, b);
                    for (int i = 0; i < kc; i++)
                        xs[i] = round_to(dt, b[i] * (a[i] * iv));
                } else {
                    load_chunk(dt, x, xr + K + k0, kc, b);
                    for (int i = 0; i < kc; i++)
                        xs[i] = swiglu_at(dt, a[i], b[i]);
                }
                for (int i = 0; i < nb; i++) {
                    load_chunk(dt, w, (n0 + i) * K + k0, kc, wr);
                    double t = acc[i];
                    for (int q = 0; q < kc; q++)
                        t += xs[q] * wr[q];
                    acc[i] = t;
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
    if (s.m == 0)
        return 0;
    fused_job j = {.op = op, .s = s, .eps = d.eps, .buf = buffers};
    /* tasks of at least 256 KiB of W each, by size alone */
    const int64_t blocks = (s.n + NB - 1) / NB;
    const int64_t block_bytes = NB * s.k * (int64_t)baton_dtype_size(s.dt);
    const int64_t tasks = par_tasks(blocks * block_bytes, (int64_t)256 << 10, blocks);
    j.blocks_per_task = (blocks + tasks - 1) / tasks;
    baton__par_for((blocks + j.blocks_per_task - 1) / j.blocks_per_task, run_task, &j);
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
