/* test_gemv_cuda.c: baton's decode GEMV (kernels/cuda/gemv.cu) against a float64 reference, for
 * every dtype and prologue, rows 1..11 (past the 8-row tile), N and K off the tile sizes, with and
 * without the added c, on fresh random inputs with poisoned outputs; every tile variant giving the
 * same bits run to run; and the gemm target's CUDA backend taking it under BATON_GEMV=own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <cuda_runtime.h>

#include "core/dtype.h"
#include "kernels/cuda/cuda_gemv.h"
#include "targets/builtin.h"
#include "tests/support.h"

#define SKIP_WITHOUT_GPU()                                                                         \
    do {                                                                                           \
        if (test_cuda_devices() == 0)                                                              \
            cr_skip("no CUDA device on this machine: the GEMV needs one");                         \
    } while (0)

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        cr_assert(e_ == cudaSuccess, "%s failed: %s", #call, cudaGetErrorString(e_));              \
    } while (0)

static double unit_eps(baton_dtype dt)
{
    return dt == BATON_DTYPE_BF16  ? 1.0 / 256
           : dt == BATON_DTYPE_F16 ? 1.0 / 2048
                                   : 1.0 / (1 << 23);
}

/* The prologue's output as the dtype stores it, from the host copies (double math). */
static void prologue_ref(baton_dtype dt, int pro, const void *x, const void *g, int64_t m,
                         int64_t k, int64_t ldx, double eps, double *xs)
{
    double tmp[1];
    for (int64_t r = 0; r < m; r++) {
        double ss = 0;
        for (int64_t j = 0; j < k && pro == BATON_GEMV_RMS; j++) {
            const double v = load_f64(dt, x, r * ldx + j);
            ss += v * v;
        }
        const double rs = 1.0 / sqrt(ss / (double)k + eps);
        for (int64_t j = 0; j < k; j++) {
            double v = load_f64(dt, x, r * ldx + j);
            if (pro == BATON_GEMV_RMS)
                v = load_f64(dt, g, j) * (v * rs);
            else if (pro == BATON_GEMV_SWIGLU)
                v = v / (1.0 + exp(-v)) * load_f64(dt, x, r * ldx + k + j);
            char cell[8];
            store_f64(dt, cell, 0, v);
            tmp[0] = load_f64(dt, cell, 0);
            xs[r * k + j] = tmp[0];
        }
    }
}

typedef struct gemv_case {
    baton_dtype dt;
    int pro;
    int64_t m, n, k;
    int add;
} gemv_case;

static void run_case(const gemv_case *tc)
{
    const baton_dtype dt = tc->dt;
    const size_t es = baton_dtype_size(dt);
    const int64_t m = tc->m, n = tc->n, k = tc->k;
    const int64_t ldx = tc->pro == BATON_GEMV_SWIGLU ? 2 * k : k;
    test_rng rng = {test_fresh_seed()};
    void *hx = malloc((size_t)(m * ldx) * es), *hw = malloc((size_t)(n * k) * es),
         *hc = malloc((size_t)(m * n) * es), *hg = malloc((size_t)k * es),
         *hy = malloc((size_t)(m * n) * es), *hy2 = malloc((size_t)(m * n) * es);
    double *xs = malloc(sizeof(double) * (size_t)(m * k)),
           *ref = malloc(sizeof(double) * (size_t)(m * n)),
           *mag = malloc(sizeof(double) * (size_t)(m * n));
    cr_assert(hx && hw && hc && hg && hy && hy2 && xs && ref && mag);
    test_fill_random(&rng, dt, hx, m * ldx, 1.0);
    test_fill_random(&rng, dt, hw, n * k, 0.05);
    test_fill_random(&rng, dt, hc, m * n, 1.0);
    test_fill_random(&rng, dt, hg, k, 1.0);
    const double eps = 1e-5, alpha = tc->add ? 1.0 : 0.75;
    prologue_ref(dt, tc->pro, hx, hg, m, k, ldx, eps, xs);
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < n; i++) {
            double s = 0, a = 0;
            for (int64_t j = 0; j < k; j++) {
                const double p = xs[r * k + j] * load_f64(dt, hw, i * k + j);
                s += p;
                a += fabs(p);
            }
            const double c = tc->add ? load_f64(dt, hc, r * n + i) : 0.0;
            ref[r * n + i] = alpha * s + c;
            mag[r * n + i] = fabs(alpha) * a + fabs(c);
        }
    void *dx, *dw, *dc, *dg, *dy;
    CU(cudaMalloc(&dx, (size_t)(m * ldx) * es));
    CU(cudaMalloc(&dw, (size_t)(n * k) * es));
    CU(cudaMalloc(&dc, (size_t)(m * n) * es));
    CU(cudaMalloc(&dg, (size_t)k * es));
    CU(cudaMalloc(&dy, (size_t)(m * n) * es));
    CU(cudaMemcpy(dx, hx, (size_t)(m * ldx) * es, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dw, hw, (size_t)(n * k) * es, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dc, hc, (size_t)(m * n) * es, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dg, hg, (size_t)k * es, cudaMemcpyHostToDevice));
    cudaStream_t st;
    CU(cudaStreamCreate(&st));
    char eb[256] = "";
    baton_exec_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.device.kind = BATON_DEVICE_CUDA;
    ctx.stream = st;
    ctx.errbuf = eb;
    ctx.errbuf_len = sizeof eb;
    baton_gemv_args a;
    memset(&a, 0, sizeof a);
    a.x = dx, a.w = dw, a.c = tc->add ? dc : NULL, a.g = tc->pro == BATON_GEMV_RMS ? dg : NULL;
    a.y = dy, a.m = m, a.n = n, a.k = k, a.ldx = ldx, a.dtype = dt, a.prologue = tc->pro;
    a.alpha = (float)alpha, a.eps = (float)eps;
    for (int vi = 0; vi <= BATON_GEMV_VARIANTS; vi++) {
        const int v = vi < BATON_GEMV_VARIANTS ? vi : BATON_GEMV_AUTO;
        for (int rep = 0; rep < 2; rep++) {
            a.variant = v;
            a.w_const = rep; /* loading W before pdl_wait must not change a bit */
            ctx.pdl = rep;
            CU(cudaMemset(dy, 0xff, (size_t)(m * n) * es));
            cr_assert_eq(baton__kcuda_gemv(&ctx, &a), 0, "%s", eb);
            CU(cudaStreamSynchronize(st));
            CU(cudaMemcpy(v == 0 && rep == 0 ? hy : hy2, dy, (size_t)(m * n) * es,
                          cudaMemcpyDeviceToHost));
            if (v == 0 && rep == 0) {
                const double tol_acc = tc->pro ? unit_eps(dt) : 1e-5;
                for (int64_t i = 0; i < m * n; i++) {
                    const double y = load_f64(dt, hy, i);
                    const double bound =
                        unit_eps(dt) * fabs(ref[i]) + tol_acc * mag[i] + 1e-6 * (1 + mag[i]);
                    cr_assert(fabs(y - ref[i]) <= bound,
                              "%s prologue %d m=%lld n=%lld k=%lld%s: y[%lld] = %.8g, float64 "
                              "reference %.8g (bound %.3g; seed %llu)",
                              baton_dtype_name(dt), tc->pro, (long long)m, (long long)n,
                              (long long)k, tc->add ? " +c" : "", (long long)i, y, ref[i], bound,
                              (unsigned long long)test_run_seed());
                }
            } else {
                cr_assert(memcmp(hy, hy2, (size_t)(m * n) * es) == 0,
                          "variant %d (w_const %d) gives other bits than variant 0", v, rep);
            }
        }
    }
    CU(cudaStreamDestroy(st));
    cudaFree(dx), cudaFree(dw), cudaFree(dc), cudaFree(dg), cudaFree(dy);
    free(hx), free(hw), free(hc), free(hg), free(hy), free(hy2), free(xs), free(ref), free(mag);
}

static const gemv_case cases[] = {
    {BATON_DTYPE_BF16, BATON_GEMV_PLAIN, 1, 2048, 2048, 0},
    {BATON_DTYPE_BF16, BATON_GEMV_PLAIN, 1, 3000, 2056, 1},
    {BATON_DTYPE_BF16, BATON_GEMV_PLAIN, 3, 517, 4104, 1},
    {BATON_DTYPE_BF16, BATON_GEMV_PLAIN, 11, 300, 512, 0},
    {BATON_DTYPE_F16, BATON_GEMV_PLAIN, 2, 777, 1032, 1},
    {BATON_DTYPE_F32, BATON_GEMV_PLAIN, 5, 333, 1028, 1},
    {BATON_DTYPE_BF16, BATON_GEMV_RMS, 1, 3072, 2048, 0},
    {BATON_DTYPE_BF16, BATON_GEMV_RMS, 4, 129, 1000, 0},
    {BATON_DTYPE_F32, BATON_GEMV_RMS, 9, 70, 260, 0},
    {BATON_DTYPE_F16, BATON_GEMV_RMS, 1, 64, 264, 1},
    {BATON_DTYPE_BF16, BATON_GEMV_SWIGLU, 1, 2048, 8192, 1},
    {BATON_DTYPE_BF16, BATON_GEMV_SWIGLU, 6, 100, 1032, 1},
    {BATON_DTYPE_F32, BATON_GEMV_SWIGLU, 2, 90, 516, 0},
};

Test(gemv_cuda, matches_float64_reference_and_its_bits_for_every_variant, .timeout = 600)
{
    SKIP_WITHOUT_GPU();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
}

Test(gemv_cuda, refuses_k_off_the_vector_naming_it)
{
    baton_gemv_args a;
    memset(&a, 0, sizeof a);
    a.m = 1, a.n = 4, a.k = 2050, a.ldx = 2050, a.dtype = BATON_DTYPE_BF16;
    char msg[256] = "";
    cr_assert_eq(baton__kcuda_gemv_supported(&a, msg, sizeof msg), BATON_ENOTSUP);
    cr_expect(strstr(msg, "2050") && strstr(msg, "multiple of 8"), "%s", msg);
    a.k = 200000, a.ldx = 200000;
    cr_assert_eq(baton__kcuda_gemv_supported(&a, msg, sizeof msg), BATON_ENOTSUP);
    cr_expect(strstr(msg, "shared memory"), "%s", msg);
}

/* gemm_add through the gemm target's CUDA backend, as a runtime prepares it: with BATON_GEMV=own
 * a run of up to 8 rows takes the GEMV and gives its bits, 9 rows take cuBLASLt; by default a
 * one-row run of a small W takes the GEMV. */
static void target_run(int64_t m, const char *policy, void *hy_out)
{
    const baton_dtype dt = BATON_DTYPE_BF16;
    const int64_t n = 384, k = 1024;
    if (strcmp(policy, "default") != 0)
        setenv("BATON_GEMV", policy, 1);
    else
        unsetenv("BATON_GEMV");
    const baton_target *t = &baton__target_gemm_add;
    const baton_delegate_iface *iface = NULL;
    for (int i = 0; i < t->n_impls; i++)
        if (t->impls[i].device == BATON_DEVICE_CUDA)
            iface = t->impls[i].delegate;
    cr_assert(iface, "gemm_add has no CUDA backend in a CUDA build");
    baton_tensor_desc in[3] = {{.dtype = dt, .rank = 2, .shape = {m, k}},
                               {.dtype = dt, .rank = 2, .shape = {n, k}},
                               {.dtype = dt, .rank = 2, .shape = {m, n}}};
    baton_tensor_desc out = {.dtype = dt, .rank = 2, .shape = {m, n}};
    baton_attr tb = {.name = "trans_b", .type = BATON_ATTR_BOOL, .i = 1};
    baton_sig_args sig = {.struct_size = sizeof sig,
                          .n_inputs = 3,
                          .inputs = in,
                          .n_outputs = 1,
                          .outputs = &out,
                          .n_attrs = 1,
                          .attrs = &tb};
    baton_device dev = {BATON_DEVICE_CUDA, 0};
    baton_target_kind kind = BATON_TARGET_DELEGATE;
    const int constant[3] = {0, 1, 0};
    cudaStream_t st;
    CU(cudaStreamCreate(&st));
    baton_delegate_init info = {.struct_size = sizeof info,
                                .step_name = "o",
                                .device = dev,
                                .stream = st,
                                .sig = &sig,
                                .n_steps = 1,
                                .step_devices = &dev,
                                .step_kinds = &kind,
                                .input_constant = constant};
    void *state = NULL;
    baton_error err;
    memset(&err, 0, sizeof err);
    cr_assert_eq(iface->init(&info, &state, &err), 0, "%s", err.message);
    const size_t es = 2;
    test_rng rng = {0x5eed + (uint64_t)m};
    void *hx = malloc((size_t)(m * k) * es), *hw = malloc((size_t)(n * k) * es),
         *hc = malloc((size_t)(m * n) * es);
    cr_assert(hx && hw && hc);
    test_fill_random(&rng, dt, hx, m * k, 1.0);
    test_fill_random(&rng, dt, hw, n * k, 0.05);
    test_fill_random(&rng, dt, hc, m * n, 1.0);
    void *dx, *dw, *dc, *dy;
    CU(cudaMalloc(&dx, (size_t)(m * k) * es));
    CU(cudaMalloc(&dw, (size_t)(n * k) * es));
    CU(cudaMalloc(&dc, (size_t)(m * n) * es));
    CU(cudaMalloc(&dy, (size_t)(m * n) * es));
    CU(cudaMemcpy(dx, hx, (size_t)(m * k) * es, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dw, hw, (size_t)(n * k) * es, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dc, hc, (size_t)(m * n) * es, cudaMemcpyHostToDevice));
    CU(cudaMemset(dy, 0xff, (size_t)(m * n) * es));
    char eb[256] = "";
    baton_exec_ctx ctx = {.struct_size = sizeof ctx,
                          .device = dev,
                          .stream = st,
                          .errbuf = eb,
                          .errbuf_len = sizeof eb,
                          .sig = &sig};
    void *bufs[4] = {dx, dw, dc, dy};
    cr_assert_eq(iface->execute(state, &ctx, bufs), 0, "%s", eb);
    CU(cudaStreamSynchronize(st));
    CU(cudaMemcpy(hy_out, dy, (size_t)(m * n) * es, cudaMemcpyDeviceToHost));
    /* the default rule takes the GEMV for one row of a W up to 32 MiB (this one's 768 KiB) */
    const int gemv = (!strcmp(policy, "own") && m <= 8) || (!strcmp(policy, "default") && m == 1);
    if (gemv) { /* the GEMV ran: the kernel's own bits */
        baton_gemv_args a = {.x = dx,
                             .w = dw,
                             .c = dc,
                             .y = dy,
                             .m = m,
                             .n = n,
                             .k = k,
                             .ldx = k,
                             .dtype = dt,
                             .alpha = 1.0f};
        void *h2 = malloc((size_t)(m * n) * es);
        cr_assert(h2);
        CU(cudaMemset(dy, 0xff, (size_t)(m * n) * es));
        cr_assert_eq(baton__kcuda_gemv(&ctx, &a), 0, "%s", eb);
        CU(cudaStreamSynchronize(st));
        CU(cudaMemcpy(h2, dy, (size_t)(m * n) * es, cudaMemcpyDeviceToHost));
        cr_assert(memcmp(h2, hy_out, (size_t)(m * n) * es) == 0,
                  "BATON_GEMV=%s: gemm_add did not give the GEMV's bits", policy);
        free(h2);
    }
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < n; i++) {
            double s = load_f64(dt, hc, r * n + i), a = fabs(s);
            for (int64_t j = 0; j < k; j++) {
                const double p = load_f64(dt, hx, r * k + j) * load_f64(dt, hw, i * k + j);
                s += p;
                a += fabs(p);
            }
            const double y = load_f64(dt, hy_out, r * n + i);
            cr_assert(fabs(y - s) <= unit_eps(dt) * fabs(s) + 1e-5 * a + 1e-6,
                      "BATON_GEMV=%s m=%lld: y[%lld, %lld] = %.6g, float64 reference %.6g", policy,
                      (long long)m, (long long)r, (long long)i, y, s);
        }
    iface->destroy(state);
    CU(cudaStreamDestroy(st));
    cudaFree(dx), cudaFree(dw), cudaFree(dc), cudaFree(dy);
    free(hx), free(hw), free(hc);
    unsetenv("BATON_GEMV");
}

Test(gemv_cuda, gemm_add_target_takes_the_gemv_under_baton_gemv_own)
{
    SKIP_WITHOUT_GPU();
    static uint16_t y[9 * 384];
    target_run(1, "own", y);
    target_run(1, "cublaslt", y);
    target_run(9, "own", y); /* 9 rows: cuBLASLt, still right */
    target_run(1, "default", y);
    target_run(2, "default", y); /* 2 rows: cuBLASLt by default */
}
