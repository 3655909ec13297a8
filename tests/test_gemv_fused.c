/* test_gemv_fused.c: the GEMV fusions rms_norm_gemm and swiglu_gemm_add through their registered
 * targets: check() and pack() as a plan load runs them, then each device's kernel on one case table
 * (suites gemv_fused on the CPU, gpu_gemv_fused on CUDA, which skip without a GPU; CTest runs them
 * as test_gemv_fused_gpu, labelled gpu), against float64 references computed here on fresh random
 * inputs (BATON_TEST_SEED replays them), with the outputs poisoned first. And the load-time
 * refusals, each naming the tensor or attribute.
 *
 * Bound per element: eps_out |ref| + tol_acc sum_k |p_k w_k| + tiny, with eps_out the dtype's
 * unit roundoff and tol_acc the dtype's (a prologue value one rounding away from the reference's
 * moves the sum by at most that much) plus the accumulation's (f32 on CUDA). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "core/dtype.h"
#include "kernels/gemv_fused.h"
#include "targets/builtin.h"
#include "tests/support.h"
#ifdef BATON_CUDA
#include <cuda_runtime.h>
#endif

typedef struct fcase {
    int op;
    baton_dtype dt;
    int64_t rows, n, k;
} fcase;

static const fcase CASES[] = {
    {GF_RMS_NORM_GEMM, BATON_DTYPE_F32, 1, 40, 64},
    {GF_RMS_NORM_GEMM, BATON_DTYPE_F64, 3, 17, 260},
    {GF_RMS_NORM_GEMM, BATON_DTYPE_BF16, 1, 96, 512},
    {GF_RMS_NORM_GEMM, BATON_DTYPE_F16, 2, 33, 72},
    {GF_RMS_NORM_GEMM, BATON_DTYPE_BF16, 9, 50, 128},
    {GF_SWIGLU_GEMM_ADD, BATON_DTYPE_F32, 1, 64, 96},
    {GF_SWIGLU_GEMM_ADD, BATON_DTYPE_F64, 2, 19, 300},
    {GF_SWIGLU_GEMM_ADD, BATON_DTYPE_BF16, 1, 64, 1024},
    {GF_SWIGLU_GEMM_ADD, BATON_DTYPE_F16, 5, 31, 40},
    {GF_RMS_NORM_GEMM, BATON_DTYPE_F32, 2, 300, 512}, /* several CPU tasks */
    {GF_SWIGLU_GEMM_ADD, BATON_DTYPE_BF16, 1, 1000, 264},
    {GF_SWIGLU_GEMM_ADD, BATON_DTYPE_BF16, 11, 24, 64},
    {GF_SWIGLU_GEMM_ADD, BATON_DTYPE_BF16, 1, 37, 8192}, /* the down projection's K: 4 tiles */
};

static double unit(baton_dtype dt)
{
    switch (dt) {
    case BATON_DTYPE_BF16: return 1.0 / 256;
    case BATON_DTYPE_F16: return 1.0 / 2048;
    case BATON_DTYPE_F32: return 1.0 / (1 << 23);
    default: return 1.0 / 9007199254740992.0;
    }
}

/* One step's tensors: sig, descriptor, host data, the float64 reference and its magnitudes. */
typedef struct fstep {
    const fcase *c;
    baton_tensor_desc in[3], out;
    const char *names[3];
    baton_attr attr;
    baton_sig_args sig;
    char opaque[64];
    int opaque_len;
    void *h[4]; /* inputs, output */
    size_t bytes[4];
    double *ref, *mag;
} fstep;

static const baton_target *target_of(int op)
{
    return op == GF_RMS_NORM_GEMM ? &baton__target_rms_norm_gemm : &baton__target_swiglu_gemm_add;
}

static void step_init(fstep *s, const fcase *c)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    const baton_dtype dt = c->dt;
    const int rms = c->op == GF_RMS_NORM_GEMM;
    const int64_t K = c->k, N = c->n, M = c->rows;
    s->in[0] = (baton_tensor_desc){.dtype = dt, .rank = 3, .shape = {1, M, rms ? K : 2 * K}};
    if (rms) {
        s->in[1] = (baton_tensor_desc){.dtype = dt, .rank = 1, .shape = {K}};
        s->in[2] = (baton_tensor_desc){.dtype = dt, .rank = 2, .shape = {N, K}};
    } else {
        s->in[1] = (baton_tensor_desc){.dtype = dt, .rank = 2, .shape = {N, K}};
        s->in[2] = (baton_tensor_desc){.dtype = dt, .rank = 3, .shape = {1, M, N}};
    }
    s->names[0] = rms ? "x" : "gu";
    s->names[1] = rms ? "g" : "w";
    s->names[2] = rms ? "w" : "c";
    s->attr = (baton_attr){.name = "eps", .type = BATON_ATTR_FLOAT, .f = 1e-5};
    s->sig = (baton_sig_args){.struct_size = sizeof s->sig,
                              .n_inputs = 3,
                              .inputs = s->in,
                              .n_outputs = 1,
                              .outputs = &s->out,
                              .n_attrs = rms ? 1 : 0,
                              .attrs = rms ? &s->attr : NULL,
                              .input_names = s->names};
    char msg[512] = "";
    const baton_target *t = target_of(c->op);
    cr_assert_eq(t->check(&s->sig, &s->out, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(s->out.rank, 3);
    cr_assert_eq(s->out.shape[2], N);
    s->opaque_len = t->pack(&s->sig, s->opaque, sizeof s->opaque);
    cr_assert_eq(s->opaque_len, (int)sizeof(baton_gemv_fused_desc));

    test_rng rng = {test_fresh_seed()};
    for (int i = 0; i < 3; i++) {
        s->bytes[i] = (size_t)baton_tensor_desc_numel(&s->in[i]) * baton_dtype_size(dt);
        s->h[i] = malloc(s->bytes[i]);
        cr_assert(s->h[i]);
        const int is_w = (rms && i == 2) || (!rms && i == 1);
        test_fill_random(&rng, dt, s->h[i], baton_tensor_desc_numel(&s->in[i]),
                         is_w ? 1.0 / sqrt((double)K) : 1.0);
    }
    s->bytes[3] = (size_t)(M * N) * baton_dtype_size(dt);
    s->h[3] = malloc(s->bytes[3]);
    s->ref = malloc(sizeof(double) * (size_t)(M * N));
    s->mag = malloc(sizeof(double) * (size_t)(M * N));
    double *p = malloc(sizeof(double) * (size_t)K);
    cr_assert(s->h[3] && s->ref && s->mag && p);
    const void *x = s->h[0], *w = s->h[rms ? 2 : 1];
    for (int64_t r = 0; r < M; r++) {
        /* the prologue in float64, rounded to the dtype as the unfused step would store it */
        double ss = 0;
        const int64_t xr = r * (rms ? K : 2 * K);
        for (int64_t j = 0; j < K && rms; j++)
            ss += load_f64(dt, x, xr + j) * load_f64(dt, x, xr + j);
        const double iv = 1.0 / sqrt(ss / (double)K + 1e-5);
        for (int64_t j = 0; j < K; j++) {
            const double a = load_f64(dt, x, xr + j);
            const double v = rms ? load_f64(dt, s->h[1], j) * (a * iv)
                                 : a / (1.0 + exp(-a)) * load_f64(dt, x, xr + K + j);
            char cell[8];
            store_f64(dt, cell, 0, v);
            p[j] = load_f64(dt, cell, 0);
        }
        for (int64_t i = 0; i < N; i++) {
            double acc = rms ? 0.0 : load_f64(dt, s->h[2], r * N + i), mag = fabs(acc);
            for (int64_t j = 0; j < K; j++) {
                const double t2 = p[j] * load_f64(dt, w, i * K + j);
                acc += t2;
                mag += fabs(t2);
            }
            s->ref[r * N + i] = acc;
            s->mag[r * N + i] = mag;
        }
    }
    free(p);
}

static void step_free(fstep *s)
{
    for (int i = 0; i < 4; i++)
        free(s->h[i]);
    free(s->ref);
    free(s->mag);
}

static void expect_close(const fstep *s, const void *y, baton_device_kind kind)
{
    const fcase *c = s->c;
    const double acc_tol = kind == BATON_DEVICE_CUDA && c->dt != BATON_DTYPE_F64 ? 1e-5 : 1e-12;
    for (int64_t i = 0; i < c->rows * c->n; i++) {
        const double v = load_f64(c->dt, y, i);
        const double bound =
            unit(c->dt) * fabs(s->ref[i]) + (unit(c->dt) + acc_tol) * s->mag[i] + 1e-300;
        cr_assert(fabs(v - s->ref[i]) <= bound,
                  "%s %s rows=%lld N=%lld K=%lld on %s: y[%lld] = %.10g, float64 reference "
                  "%.10g (bound %.3g; BATON_TEST_SEED=%llu)",
                  baton__gf_op_name(c->op), baton_dtype_name(c->dt), (long long)c->rows,
                  (long long)c->n, (long long)c->k, kind == BATON_DEVICE_CUDA ? "cuda" : "cpu",
                  (long long)i, v, s->ref[i], bound, (unsigned long long)test_run_seed());
    }
}

static baton_kernel_fn kernel_of(int op, baton_device_kind kind)
{
    const baton_target *t = target_of(op);
    for (int i = 0; i < t->n_impls; i++)
        if (t->impls[i].device == kind)
            return t->impls[i].kernel;
    return NULL;
}

Test(gemv_fused, cpu_matches_float64_on_the_case_table)
{
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
        fstep s;
        step_init(&s, &CASES[ci]);
        test_poison(s.h[3], s.bytes[3]);
        char eb[512] = "";
        baton_exec_ctx ctx = {.struct_size = sizeof ctx,
                              .device = {BATON_DEVICE_CPU, 0},
                              .errbuf = eb,
                              .errbuf_len = sizeof eb,
                              .sig = &s.sig};
        baton_kernel_fn k = kernel_of(CASES[ci].op, BATON_DEVICE_CPU);
        cr_assert(k);
        cr_assert_eq(k(&ctx, s.h, s.opaque, (size_t)s.opaque_len), 0, "%s", eb);
        expect_close(&s, s.h[3], BATON_DEVICE_CPU);
        step_free(&s);
    }
}

#ifdef BATON_CUDA
Test(gpu_gemv_fused, cuda_matches_float64_on_the_case_table, .timeout = 600)
{
    if (test_cuda_devices() == 0)
        cr_skip("no CUDA device on this machine");
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
        if (CASES[ci].dt == BATON_DTYPE_F64)
            continue; /* CPU-only dtype */
        fstep s;
        step_init(&s, &CASES[ci]);
        void *d[4];
        for (int i = 0; i < 4; i++) {
            cr_assert_eq(cudaMalloc(&d[i], s.bytes[i]), cudaSuccess);
            if (i < 3)
                cr_assert_eq(cudaMemcpy(d[i], s.h[i], s.bytes[i], cudaMemcpyHostToDevice),
                             cudaSuccess);
        }
        cr_assert_eq(cudaMemset(d[3], 0xff, s.bytes[3]), cudaSuccess);
        cudaStream_t st;
        cr_assert_eq(cudaStreamCreate(&st), cudaSuccess);
        char eb[512] = "";
        baton_exec_ctx ctx = {.struct_size = sizeof ctx,
                              .device = {BATON_DEVICE_CUDA, 0},
                              .stream = st,
                              .errbuf = eb,
                              .errbuf_len = sizeof eb,
                              .sig = &s.sig};
        baton_kernel_fn k = kernel_of(CASES[ci].op, BATON_DEVICE_CUDA);
        cr_assert(k);
        cr_assert_eq(k(&ctx, d, s.opaque, (size_t)s.opaque_len), 0, "%s", eb);
        cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
        test_poison(s.h[3], s.bytes[3]);
        cr_assert_eq(cudaMemcpy(s.h[3], d[3], s.bytes[3], cudaMemcpyDeviceToHost), cudaSuccess);
        expect_close(&s, s.h[3], BATON_DEVICE_CUDA);
        /* run to run: the same bits */
        void *again = malloc(s.bytes[3]);
        cr_assert(again);
        cr_assert_eq(k(&ctx, d, s.opaque, (size_t)s.opaque_len), 0, "%s", eb);
        cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
        cr_assert_eq(cudaMemcpy(again, d[3], s.bytes[3], cudaMemcpyDeviceToHost), cudaSuccess);
        cr_assert(memcmp(again, s.h[3], s.bytes[3]) == 0, "%s: two runs gave other bits",
                  baton__gf_op_name(CASES[ci].op));
        free(again);
        cudaStreamDestroy(st);
        for (int i = 0; i < 4; i++)
            cudaFree(d[i]);
        step_free(&s);
    }
}
#endif

/* ---- load-time refusals ---------------------------------------------------------------------- */

static void expect_refusal(const fcase *c, void (*edit)(fstep *), const char *want1,
                           const char *want2)
{
    fstep s;
    step_init(&s, c);
    edit(&s);
    char msg[512] = "";
    baton_tensor_desc e;
    cr_assert_eq(target_of(c->op)->check(&s.sig, &e, msg, sizeof msg), BATON_EPLAN,
                 "check accepted it");
    cr_expect(strstr(msg, want1), "'%s' does not name %s", msg, want1);
    if (want2)
        cr_expect(strstr(msg, want2), "'%s' does not say %s", msg, want2);
    step_free(&s);
}

static void no_eps(fstep *s)
{
    s->sig.n_attrs = 0;
}
static void zero_eps(fstep *s)
{
    s->attr.f = 0;
}
static void short_x(fstep *s)
{
    s->in[0].shape[2] -= 1;
}
static void g_wrong(fstep *s)
{
    s->in[1].shape[0] += 2;
}
static void w_bf16(fstep *s)
{
    s->in[2].dtype = BATON_DTYPE_BF16;
}
static void c_wrong(fstep *s)
{
    s->in[2].shape[2] += 1;
}
static void gu_odd(fstep *s)
{
    s->in[0].shape[2] = s->c->k;
}
static void w_3d(fstep *s)
{
    s->in[1].rank = 3;
    s->in[1].shape[2] = 1;
}

Test(gemv_fused, check_refuses_bad_steps_naming_the_tensor)
{
    const fcase r = {GF_RMS_NORM_GEMM, BATON_DTYPE_F32, 1, 8, 16};
    const fcase sw = {GF_SWIGLU_GEMM_ADD, BATON_DTYPE_F32, 1, 8, 16};
    expect_refusal(&r, no_eps, "eps", NULL);
    expect_refusal(&r, zero_eps, "eps", "> 0");
    expect_refusal(&r, short_x, "input 'x' (x)", "16");
    expect_refusal(&r, g_wrong, "'g'", "[16]");
    expect_refusal(&r, w_bf16, "'w'", "bf16");
    expect_refusal(&sw, c_wrong, "'c'", "output's shape");
    expect_refusal(&sw, gu_odd, "'gu'", "32");
    expect_refusal(&sw, w_3d, "'w'", "[N, K]");
}

Test(gemv_fused, kernel_refuses_a_foreign_descriptor)
{
    fstep s;
    step_init(&s, &CASES[0]);
    baton_gemv_fused_desc d;
    memcpy(&d, s.opaque, sizeof d);
    d.op = GF_SWIGLU_GEMM_ADD;
    char eb[512] = "";
    baton_exec_ctx ctx = {.struct_size = sizeof ctx,
                          .device = {BATON_DEVICE_CPU, 0},
                          .errbuf = eb,
                          .errbuf_len = sizeof eb,
                          .sig = &s.sig};
    cr_assert_eq(
        kernel_of(GF_RMS_NORM_GEMM, BATON_DEVICE_CPU)(&ctx, s.h, (const char *)&d, sizeof d),
        BATON_EINVAL);
    cr_expect(strstr(eb, "rms_norm_gemm"), "%s", eb);
    step_free(&s);
}
