/* test_kernels_cuda.c: baton's CUDA kernels against float64 references computed here on the host,
 * on fresh random inputs with every output poisoned first: RMSNorm forward and backward for the 16
 * dtype pairs and odd and extreme shapes, each launch path (staged, scalar, streaming, clusters
 * splitting rows or part_grad blocks, persistent grids, programmatic dependent launch, graph
 * capture), deterministic grad_weight, the elementwise kernels, argmax, the legacy XLA ABI, and
 * the error paths (which must launch nothing). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <cuda_runtime.h>

#include "baton/baton_xla.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/rms_norm_cuda.h"
#include "kernels/cuda/rms_norm_layout.h"
#include "kernels/cuda/rms_norm_tune.h"
#include "kernels/descriptors.h"
#include "core/dtype.h"
#include "tests/support.h"

#define SKIP_WITHOUT_GPU()                                                                         \
    do {                                                                                           \
        if (test_cuda_devices() == 0)                                                              \
            cr_skip("no CUDA device on this machine: the CUDA kernels need one");                  \
    } while (0)

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        cr_assert_eq(e_, cudaSuccess, "%s failed: %s", #call, cudaGetErrorString(e_));             \
    } while (0)

static const baton_dtype FLOATS[4] = {BATON_DTYPE_BF16, BATON_DTYPE_F16, BATON_DTYPE_F32,
                                      BATON_DTYPE_F64};

typedef struct kctx {
    baton_exec_ctx ctx;
    char err[BATON_ERROR_MAX];
    cudaStream_t stream;
} kctx;

static void kctx_init(kctx *k, int pdl)
{
    memset(k, 0, sizeof *k);
    CK(cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking));
    k->ctx.device.kind = BATON_DEVICE_CUDA;
    k->ctx.device.index = 0;
    k->ctx.stream = k->stream;
    k->ctx.pdl = pdl;
    k->ctx.step_name = "test";
    k->ctx.errbuf = k->err;
    k->ctx.errbuf_len = sizeof k->err;
}

static void kctx_deinit(kctx *k)
{
    CK(cudaStreamSynchronize(k->stream));
    CK(cudaStreamDestroy(k->stream));
}

static void *dev_alloc(size_t n)
{
    void *p = NULL;
    CK(cudaMalloc(&p, n ? n : 1));
    return p;
}

/* The kernels run on non-blocking streams, which do not wait for the legacy stream that
 * cudaMemcpy and cudaMemset use: each helper waits for its copy or fill to finish. */
static void *dev_upload(const void *h, size_t n)
{
    void *p = dev_alloc(n);
    CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    return p;
}

static void *host_download(const void *d, size_t n)
{
    void *h = malloc(n ? n : 1);
    cr_assert(h);
    CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    return h;
}

static void dev_poison(void *p, size_t n)
{
    CK(cudaMemset(p, 0xff, n));
    CK(cudaDeviceSynchronize());
}

static int all_poisoned(const void *d, size_t n)
{
    unsigned char *h = host_download(d, n);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++)
        ok = h[i] == 0xff;
    free(h);
    return ok;
}

static baton_dtype acc_dtype(baton_dtype x)
{
    return x == BATON_DTYPE_F64 ? BATON_DTYPE_F64 : BATON_DTYPE_F32;
}

/* An output of dtype `out` computed in accumulation type `acc`: both roundings count. */
static double tol2(baton_dtype out, baton_dtype acc)
{
    double a = test_tolerance(out), b = test_tolerance(acc);
    return a > b ? a : b;
}

/* ---------------------------------------------------------------------------------------------
 * RMSNorm
 * ------------------------------------------------------------------------------------------- */

typedef struct rms_case {
    baton_dtype xdt, wdt;
    int64_t n1, n2, pgs;
    kcuda_rms_cfg over; /* all zero: the kernels choose */
    int pdl;
    int check_determinism;
} rms_case;

/* Runs forward then backward (on the forward's invvar) and checks every output against float64
 * references; returns nothing, asserts. The launched configurations are written to fc, bc. */
static void run_rms_case(const rms_case *c, kcuda_rms_cfg *fc, kcuda_rms_cfg *bc)
{
    const baton_dtype xdt = c->xdt, wdt = c->wdt, adt = acc_dtype(xdt);
    const int64_t n1 = c->n1, n2 = c->n2, n = n1 * n2, P = c->pgs;
    const size_t xs = baton_dtype_size(xdt), ws = baton_dtype_size(wdt), as = baton_dtype_size(adt);
    const uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    const char *xn = baton_dtype_name(xdt), *wn = baton_dtype_name(wdt);
    char what[160];
    snprintf(what, sizeof what, "x %s, w %s, n1 %lld, n2 %lld, part_grad %lld (seed %llu)", xn, wn,
             (long long)n1, (long long)n2, (long long)P, (unsigned long long)seed);

    void *hx = malloc((size_t)n * xs), *hw = malloc((size_t)n2 * ws), *hg = malloc((size_t)n * ws);
    cr_assert(hx && hw && hg);
    test_fill_random(&rng, xdt, hx, n, 1.0);
    for (int64_t j = 0; j < n2; j++)
        store_f64(wdt, hw, j, 1.0 + 0.25 * test_rng_normal(&rng));
    test_fill_random(&rng, wdt, hg, n, 1.0);

    void *dx = dev_upload(hx, (size_t)n * xs), *dw = dev_upload(hw, (size_t)n2 * ws);
    void *dg = dev_upload(hg, (size_t)n * ws);
    void *dy = dev_alloc((size_t)n * ws), *div = dev_alloc((size_t)n1 * as);
    void *dgi = dev_alloc((size_t)n * xs), *dgw = dev_alloc((size_t)n2 * ws);
    void *dpg = dev_alloc((size_t)P * n2 * as);
    dev_poison(dy, (size_t)n * ws);
    dev_poison(div, (size_t)n1 * as);
    dev_poison(dgi, (size_t)n * xs);
    dev_poison(dgw, (size_t)n2 * ws);
    dev_poison(dpg, (size_t)P * n2 * as);

    kctx k;
    kctx_init(&k, c->pdl);
    baton_rms_norm_desc d = {
        .n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = xdt, .w_dtype = wdt, .part_grad_size = P};
    const int overridden = memcmp(&c->over, &(kcuda_rms_cfg){0}, sizeof c->over) != 0;
    void *fb[4] = {dx, dw, dy, div};
    int rc = baton__kcuda_rms_norm_fwd_cfg(&k.ctx, fb, (const char *)&d, sizeof d,
                                           overridden ? &c->over : NULL, fc);
    cr_assert_eq(rc, 0, "forward failed (%s): %s", what, k.err);
    void *bb[7] = {dg, div, dx, dw, dgi, dgw, dpg};
    rc = baton__kcuda_rms_norm_bwd_cfg(&k.ctx, bb, (const char *)&d, sizeof d,
                                       overridden ? &c->over : NULL, bc);
    cr_assert_eq(rc, 0, "backward failed (%s): %s", what, k.err);
    CK(cudaStreamSynchronize(k.stream));

    void *hy = host_download(dy, (size_t)n * ws), *hiv = host_download(div, (size_t)n1 * as);
    void *hgi = host_download(dgi, (size_t)n * xs), *hgw = host_download(dgw, (size_t)n2 * ws);
    void *hpg = host_download(dpg, (size_t)P * n2 * as);

    /* float64 references: the forward from x and w; the backward from the invvar the forward
     * produced (its input), so each pass is checked on its own. */
    double *ry = malloc(sizeof(double) * (size_t)n), *riv = malloc(sizeof(double) * (size_t)n1);
    double *rgi = malloc(sizeof(double) * (size_t)n), *rgw = calloc((size_t)n2, sizeof(double));
    double *rgs = malloc(sizeof(double) * (size_t)n);
    double *rpg = calloc((size_t)(P * n2), sizeof(double));
    cr_assert(ry && riv && rgi && rgw && rpg);
    const int64_t B = (n1 + P - 1) / P;
    for (int64_t r = 0; r < n1; r++) {
        double ss = 0;
        for (int64_t j = 0; j < n2; j++) {
            double v = load_f64(xdt, hx, r * n2 + j);
            ss += v * v;
        }
        riv[r] = 1.0 / sqrt(ss / (double)n2 + d.eps);
        for (int64_t j = 0; j < n2; j++)
            ry[r * n2 + j] = load_f64(wdt, hw, j) * (load_f64(xdt, hx, r * n2 + j) * riv[r]);
        const double iv = load_f64(adt, hiv, r);
        double s = 0;
        for (int64_t j = 0; j < n2; j++)
            s += load_f64(wdt, hg, r * n2 + j) * load_f64(wdt, hw, j) *
                 load_f64(xdt, hx, r * n2 + j);
        const double kk = iv * iv * s / (double)n2;
        const int64_t p = r / B;
        for (int64_t j = 0; j < n2; j++) {
            const double gv = load_f64(wdt, hg, r * n2 + j), xv = load_f64(xdt, hx, r * n2 + j);
            rgi[r * n2 + j] = iv * (gv * load_f64(wdt, hw, j) - xv * kk);
            rgs[r * n2 + j] = fabs(iv * gv * load_f64(wdt, hw, j)) + fabs(iv * xv * kk);
            rpg[p * n2 + j] += gv * xv * iv;
        }
    }
    for (int64_t p = 0; p < P; p++)
        for (int64_t j = 0; j < n2; j++)
            rgw[j] += rpg[p * n2 + j];

    double e;
    e = test_rel_err(wdt, hy, ry, n);
    cr_expect_leq(e, tol2(wdt, adt), "y: relative error %.3g (%s)", e, what);
    e = test_rel_err(adt, hiv, riv, n1);
    cr_expect_leq(e, test_tolerance(adt), "invvar: relative error %.3g (%s)", e, what);
    /* grad_input is a difference of two terms that nearly cancel when n2 is tiny (n2 = 1: the
     * exact result is eps-sized), so its error is measured against the terms' size, which is what
     * f32 (or f64) arithmetic can promise; for ordinary rows this is the usual relative error. */
    {
        double num = 0, den = 0;
        for (int64_t i = 0; i < n; i++) {
            const double v = load_f64(xdt, hgi, i);
            num += isnan(v) ? INFINITY : (v - rgi[i]) * (v - rgi[i]);
            den += rgs[i] * rgs[i];
        }
        e = den > 0 ? sqrt(num / den) : sqrt(num);
    }
    cr_expect_leq(e, tol2(xdt, adt), "grad_input: error %.3g relative to its terms (%s)", e, what);
    e = test_rel_err(adt, hpg, rpg, P * n2);
    cr_expect_leq(e, test_tolerance(adt), "part_grad: relative error %.3g (%s)", e, what);
    e = test_rel_err(wdt, hgw, rgw, n2);
    cr_expect_leq(e, tol2(wdt, adt), "grad_weight: relative error %.3g (%s)", e, what);

    if (c->check_determinism) {
        /* Same inputs again, outputs poisoned: grad_weight and part_grad must be the same bits. */
        dev_poison(dgw, (size_t)n2 * ws);
        dev_poison(dpg, (size_t)P * n2 * as);
        rc = baton__kcuda_rms_norm_bwd_cfg(&k.ctx, bb, (const char *)&d, sizeof d,
                                           overridden ? &c->over : NULL, NULL);
        cr_assert_eq(rc, 0, "second backward failed (%s): %s", what, k.err);
        CK(cudaStreamSynchronize(k.stream));
        void *hgw2 = host_download(dgw, (size_t)n2 * ws);
        void *hpg2 = host_download(dpg, (size_t)P * n2 * as);
        cr_expect(memcmp(hgw, hgw2, (size_t)n2 * ws) == 0,
                  "grad_weight differs between two runs (%s)", what);
        cr_expect(memcmp(hpg, hpg2, (size_t)P * n2 * as) == 0,
                  "part_grad differs between two runs (%s)", what);
        free(hgw2);
        free(hpg2);
    }

    kctx_deinit(&k);
    void *dev[] = {dx, dw, dg, dy, div, dgi, dgw, dpg};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        CK(cudaFree(dev[i]));
    void *host[] = {hx, hw, hg, hy, hiv, hgi, hgw, hpg, ry, riv, rgi, rgw, rpg, rgs};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

static void rms(baton_dtype xdt, baton_dtype wdt, int64_t n1, int64_t n2, int64_t pgs)
{
    rms_case c = {.xdt = xdt, .wdt = wdt, .n1 = n1, .n2 = n2, .pgs = pgs};
    run_rms_case(&c, NULL, NULL);
}

Test(kernels_cuda, rms_norm_matches_float64_reference_for_every_dtype_pair_and_odd_sizes)
{
    SKIP_WITHOUT_GPU();
    /* n2 = 1 and 7 (below any vector), 4095 (odd), 4096 (the 16-byte path), 2 x 262147 (long,
     * odd: clusters with scalar loads); part_grad_size below, equal to and above n1. */
    static const int64_t shapes[][3] = {{1, 1, 1},    {3, 7, 16},    {17, 4095, 16},
                                        {5, 4096, 2}, {33, 4096, 7}, {2, 262147, 16}};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                rms(FLOATS[a], FLOATS[b], shapes[s][0], shapes[s][1], shapes[s][2]);
}

Test(kernels_cuda, rms_norm_handles_extreme_shapes)
{
    SKIP_WITHOUT_GPU();
    /* Many tiny rows, one huge row (streams: no block holds a 1M-element chunk), the tutorial's
     * 4 x 262144 with the plan's default part_grad_size, and many rows per part_grad block. */
    rms(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 65536, 1, 16);
    rms(BATON_DTYPE_F32, BATON_DTYPE_BF16, 65536, 7, 65536);
    rms(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 1, 1048576, 16);
    rms(BATON_DTYPE_F32, BATON_DTYPE_F32, 1, 1048576, 1);
    rms(BATON_DTYPE_F64, BATON_DTYPE_F16, 2, 1048576, 3);
    rms(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 4, 262144, 16);
    rms(BATON_DTYPE_BF16, BATON_DTYPE_F32, 4, 262144, 4);
    rms(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 2048, 8192, 16);
    rms(BATON_DTYPE_F32, BATON_DTYPE_F32, 4096, 4096, 256);
    rms(BATON_DTYPE_F16, BATON_DTYPE_BF16, 1000, 4096, 1000);
    rms(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 32, 4096, 16);
    rms(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 1, 4096, 16);
}

/* Every launch path, forced on shapes small enough to check quickly. */
Test(kernels_cuda, rms_norm_is_correct_on_every_launch_path)
{
    SKIP_WITHOUT_GPU();
    const struct {
        baton_dtype x, w;
        int64_t n1, n2, pgs;
        kcuda_rms_cfg over;
        int want_mode, want_cx, want_cy;
    } paths[] = {
        /* streaming with 16-byte loads, and with scalar loads */
        {BATON_DTYPE_BF16, BATON_DTYPE_F32, 3, 8192, 2, {.mode = 2}, 2, 0, 0},
        {BATON_DTYPE_F16, BATON_DTYPE_F16, 3, 8190, 2, {.threads = 64}, 2, 0, 0},
        /* scalar loads forced on an aligned row */
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 4, 2048, 2, {.vec = 1}, 1, 0, 0},
        /* a cluster of 4 blocks per row, staged and streaming */
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 2, 16384, 4, {.cx = 4}, 0, 4, 1},
        {BATON_DTYPE_F32, BATON_DTYPE_F64, 2, 16384, 4, {.cx = 4, .mode = 2}, 2, 4, 1},
        {BATON_DTYPE_F64, BATON_DTYPE_F64, 3, 6001, 2, {.cx = 3}, 1, 3, 1},
        /* a cluster of 16 (non-portable) */
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 2, 65536, 2, {.cx = 16}, 0, 16, 1},
        /* part_grad blocks split over a cluster of 4 and 8 blocks, odd rows per block */
        {BATON_DTYPE_BF16, BATON_DTYPE_F32, 67, 4096, 2, {.cy = 4}, 0, 1, 4},
        {BATON_DTYPE_F64, BATON_DTYPE_BF16, 130, 2048, 3, {.cy = 8}, 0, 1, 8},
        /* persistent grids: several rows (and part_grad blocks) per block, 1 to 4 stages */
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 100, 4096, 64, {.grid = 8, .stages = 1}, 0, 1, 1},
        {BATON_DTYPE_F32, BATON_DTYPE_F16, 100, 4096, 64, {.grid = 8, .stages = 3}, 0, 1, 1},
        {BATON_DTYPE_F16, BATON_DTYPE_F32, 100, 1024, 64, {.grid = 5, .stages = 4}, 0, 1, 1},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 99, 8192, 99, {.grid = 14, .threads = 512}, 0, 2, 1},
        /* the split backward (partial-dot and finishing kernels) forced on short rows: a
         * narrower last chunk, 1 to 16 rows, part_grad blocks of several rows and empty ones */
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 3, 8192, 2, {.mode = 3}, 3, 0, 0},
        {BATON_DTYPE_F64, BATON_DTYPE_F16, 5, 6000, 7, {.mode = 3}, 3, 0, 0},
        {BATON_DTYPE_F16, BATON_DTYPE_F32, 16, 20000, 3, {.mode = 3}, 3, 0, 0},
        {BATON_DTYPE_F32, BATON_DTYPE_BF16, 9, 70000, 4, {.mode = 3}, 3, 0, 0},
        /* the bulk-copy forward (2 to 8 stages, the backward clamps to 4), over a cluster of 4
         * too, and the cp.async forward it replaced (mode 4) */
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 10, 16384, 4, {.cx = 4, .stages = 2}, 0, 4, 1},
        {BATON_DTYPE_F16, BATON_DTYPE_BF16, 100, 4096, 64, {.grid = 8, .stages = 8}, 0, 1, 1},
        {BATON_DTYPE_F64, BATON_DTYPE_F32, 37, 2048, 8, {.grid = 6, .stages = 6}, 0, 1, 1},
        {BATON_DTYPE_BF16,
         BATON_DTYPE_F32,
         100,
         4096,
         64,
         {.grid = 8, .stages = 3, .mode = 4},
         0,
         1,
         1},
        /* the register forward and backward (mode 5; the backward's mode is not checked): 2, 4 and
         * 8 vectors per thread, a row that is not a multiple of the block's vectors, one-vector
         * rows, and an odd number of rows per block (the loop runs two rows per iteration) */
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 300, 4096, 30, {.mode = 5, .nv = 2}, -1, 0, 0},
        {BATON_DTYPE_F32, BATON_DTYPE_BF16, 257, 8192, 16, {.mode = 5, .nv = 8}, -1, 0, 0},
        {BATON_DTYPE_F16, BATON_DTYPE_F32, 130, 4104, 13, {.mode = 5, .nv = 4}, -1, 0, 0},
        {BATON_DTYPE_BF16, BATON_DTYPE_F16, 70, 8, 7, {.mode = 5}, -1, 0, 0},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 101, 2048, 101, {.mode = 5, .grid = 7}, -1, 0, 0},
        /* the default forward and backward on many rows (the register kernels; the backward's
         * cy fitted to this GPU, not checked) */
        {BATON_DTYPE_F32, BATON_DTYPE_BF16, 3000, 1024, 30, {0}, 5, 1, 0},
        /* the register backward forced: one row per part_grad block, clusters of 2 and 3, and 3
         * and 4 rows held on blocks whose rows are not a multiple of them */
        {BATON_DTYPE_BF16, BATON_DTYPE_F32, 300, 2048, 300, {.mode = 5}, 5, 1, 1},
        {BATON_DTYPE_F16, BATON_DTYPE_BF16, 300, 1000, 3, {.mode = 5, .cy = 2}, 5, 1, 2},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 301, 1024, 3, {.mode = 5, .stages = 4}, 5, 1, 0},
        {BATON_DTYPE_F32,
         BATON_DTYPE_F32,
         301,
         2048,
         5,
         {.mode = 5, .stages = 3, .cy = 3},
         5,
         1,
         3},
        /* chained clusters: 2 with cy fitted, 3 of 2 blocks over blocks of 100 rows (the last
         * cluster 32), 4 of one block each; 6 and 8 rows held */
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 301, 1024, 3, {.mode = 5, .kx = 2}, 5, 1, 0},
        {BATON_DTYPE_F32, BATON_DTYPE_BF16, 500, 2048, 5, {.mode = 5, .kx = 3, .cy = 2}, 5, 1, 2},
        {BATON_DTYPE_BF16, BATON_DTYPE_F32, 1000, 4096, 4, {.mode = 5, .kx = 4, .cy = 1}, 5, 1, 1},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 999, 2048, 7, {.mode = 5, .stages = 8}, 5, 1, 0},
        {BATON_DTYPE_F16,
         BATON_DTYPE_F16,
         640,
         4096,
         2,
         {.mode = 5, .stages = 6, .kx = 2},
         5,
         1,
         0},
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        rms_case c = {.xdt = paths[i].x,
                      .wdt = paths[i].w,
                      .n1 = paths[i].n1,
                      .n2 = paths[i].n2,
                      .pgs = paths[i].pgs,
                      .over = paths[i].over,
                      .check_determinism = 1};
        kcuda_rms_cfg fc, bc;
        run_rms_case(&c, &fc, &bc);
        if (paths[i].over.mode == 5 || (paths[i].n1 >= 3000 && paths[i].over.mode == 0))
            cr_expect_eq(fc.mode, 5, "path %zu: forward ran mode %d, not 5 (register rows)", i,
                         fc.mode);
        if (paths[i].want_mode >= 0)
            cr_expect_eq(bc.mode, paths[i].want_mode, "path %zu: backward ran mode %d, not %d", i,
                         bc.mode, paths[i].want_mode);
        if (paths[i].want_cx)
            cr_expect_eq(bc.cx, paths[i].want_cx, "path %zu: backward cx %d, not %d", i, bc.cx,
                         paths[i].want_cx);
        if (paths[i].want_cy)
            cr_expect_eq(bc.cy, paths[i].want_cy, "path %zu: backward cy %d, not %d", i, bc.cy,
                         paths[i].want_cy);
        if (paths[i].over.kx)
            cr_expect_eq(bc.kx, paths[i].over.kx, "path %zu: backward kx %d, not %d", i, bc.kx,
                         paths[i].over.kx);
        if (paths[i].over.stages && paths[i].over.mode == 5)
            cr_expect_eq(bc.stages, paths[i].over.stages, "path %zu: backward held %d rows, not %d",
                         i, bc.stages, paths[i].over.stages);
    }
}

Test(kernels_cuda, rms_norm_grad_weight_is_bitwise_deterministic)
{
    SKIP_WITHOUT_GPU();
    /* The default layouts of the benchmark shapes' kind: cluster-combined part_grad blocks
     * (part_grad_size 16 over many rows) and cluster-split long rows. */
    rms_case cases[] = {
        {.xdt = BATON_DTYPE_BF16, .wdt = BATON_DTYPE_BF16, .n1 = 4096, .n2 = 8192, .pgs = 16},
        {.xdt = BATON_DTYPE_F32, .wdt = BATON_DTYPE_F32, .n1 = 8192, .n2 = 4096, .pgs = 16},
        {.xdt = BATON_DTYPE_BF16, .wdt = BATON_DTYPE_BF16, .n1 = 4, .n2 = 262144, .pgs = 16},
        {.xdt = BATON_DTYPE_F16, .wdt = BATON_DTYPE_F32, .n1 = 3000, .n2 = 4096, .pgs = 300},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cases[i].check_determinism = 1;
        run_rms_case(&cases[i], NULL, NULL);
    }
}

/* ---- rms_norm_grad_weight and row shards ----------------------------------------------------
 * What the data-parallel plan (scripts/shard.py) relies on, bitwise, on one GPU: the grad_weight
 * kernel gives the backward's grad_weight from its part_grad, and backwards over row shards (n1 / N
 * rows, P / N blocks each: device pointers into the full inputs) write exactly their blocks of the
 * full backward's part_grad. The second holds only where a shard's layout adds each block's rows in
 * the full call's order: kernels/cuda/rms_norm_layout.c splits a block's rows over cy cluster
 * blocks, with cy fitted to the number of blocks (docs/shard.md), except in the split kernels. */

typedef struct dev_bwd {
    void *g, *iv, *x, *w;     /* device inputs */
    void *hg, *hiv, *hx, *hw; /* their host copies */
} dev_bwd;

static void dev_bwd_init(dev_bwd *b, test_rng *rng, baton_dtype xdt, baton_dtype wdt, int64_t n1,
                         int64_t n2)
{
    const baton_dtype adt = acc_dtype(xdt);
    const size_t xs = baton_dtype_size(xdt), ws = baton_dtype_size(wdt);
    const size_t as = baton_dtype_size(adt);
    b->hx = malloc((size_t)(n1 * n2) * xs);
    b->hg = malloc((size_t)(n1 * n2) * ws);
    b->hw = malloc((size_t)n2 * ws);
    b->hiv = malloc((size_t)n1 * as);
    cr_assert(b->hx && b->hg && b->hw && b->hiv);
    test_fill_random(rng, xdt, b->hx, n1 * n2, 1.0);
    test_fill_random(rng, wdt, b->hg, n1 * n2, 1.0);
    for (int64_t j = 0; j < n2; j++)
        store_f64(wdt, b->hw, j, 1.0 + 0.25 * test_rng_normal(rng));
    for (int64_t r = 0; r < n1; r++) /* any positive invvar will do */
        store_f64(adt, b->hiv, r, 0.1 + fabs(test_rng_normal(rng)));
    b->x = dev_upload(b->hx, (size_t)(n1 * n2) * xs);
    b->g = dev_upload(b->hg, (size_t)(n1 * n2) * ws);
    b->w = dev_upload(b->hw, (size_t)n2 * ws);
    b->iv = dev_upload(b->hiv, (size_t)n1 * as);
}

static void dev_bwd_deinit(dev_bwd *b)
{
    CK(cudaFree(b->g));
    CK(cudaFree(b->iv));
    CK(cudaFree(b->x));
    CK(cudaFree(b->w));
    free(b->hg), free(b->hiv), free(b->hx), free(b->hw);
}

/* The backward over rows r0 .. r0 + n1 - 1 of b with P blocks; returns the host copies of
 * grad_weight and part_grad (poisoned on the device first), and grad_input in *gi when asked. */
/* unsharded > 0: the 48-byte row-shard descriptor with that unsharded_part_grad_size. */
static void dev_bwd_rows(const dev_bwd *b, baton_dtype xdt, baton_dtype wdt, int64_t r0, int64_t n1,
                         int64_t n2, int64_t P, const kcuda_rms_cfg *o, int64_t unsharded,
                         void **gw, void **pg, void **gi)
{
    const baton_dtype adt = acc_dtype(xdt);
    const size_t xs = baton_dtype_size(xdt), ws = baton_dtype_size(wdt);
    const size_t as = baton_dtype_size(adt);
    void *dgi = dev_alloc((size_t)(n1 * n2) * xs), *dgw = dev_alloc((size_t)n2 * ws);
    void *dpg = dev_alloc((size_t)(P * n2) * as);
    dev_poison(dgi, (size_t)(n1 * n2) * xs);
    dev_poison(dgw, (size_t)n2 * ws);
    dev_poison(dpg, (size_t)(P * n2) * as);
    kctx k;
    kctx_init(&k, 0);
    baton_rms_norm_desc d = {
        .n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = xdt, .w_dtype = wdt, .part_grad_size = P};
    void *bb[7] = {(char *)b->g + (size_t)(r0 * n2) * ws,
                   (char *)b->iv + (size_t)r0 * as,
                   (char *)b->x + (size_t)(r0 * n2) * xs,
                   b->w,
                   dgi,
                   dgw,
                   dpg};
    const baton_rms_norm_shard_desc sd = {d, unsharded};
    cr_assert_eq(baton__kcuda_rms_norm_bwd_cfg(&k.ctx, bb, (const char *)&sd,
                                               unsharded ? sizeof sd : sizeof d, o, NULL),
                 0, "backward of rows %lld..%lld failed: %s", (long long)r0,
                 (long long)(r0 + n1 - 1), k.err);
    kctx_deinit(&k);
    *gw = host_download(dgw, (size_t)n2 * ws);
    *pg = host_download(dpg, (size_t)(P * n2) * as);
    if (gi)
        *gi = host_download(dgi, (size_t)(n1 * n2) * xs);
    CK(cudaFree(dgi));
    CK(cudaFree(dgw));
    CK(cudaFree(dpg));
}

/* rms_norm_grad_weight of the host part_grad hpg (P rows); returns grad_weight's host copy and
 * checks that part_grad, an input, was left as it was. */
static void *dev_grad_weight(const void *hpg, baton_dtype adt, const void *dw, baton_dtype wdt,
                             int64_t P, int64_t n2)
{
    const size_t as = baton_dtype_size(adt), ws = baton_dtype_size(wdt);
    void *dpg = dev_upload(hpg, (size_t)(P * n2) * as), *dgw = dev_alloc((size_t)n2 * ws);
    dev_poison(dgw, (size_t)n2 * ws);
    kctx k;
    kctx_init(&k, 0);
    baton_rms_grad_weight_desc d = {.part_grad_size = P, .n2 = n2, .pg_dtype = adt, .w_dtype = wdt};
    void *bufs[3] = {dpg, (void *)dw, dgw};
    cr_assert_eq(baton__kcuda_rms_norm_grad_weight(&k.ctx, bufs, (const char *)&d, sizeof d), 0,
                 "rms_norm_grad_weight failed: %s", k.err);
    kctx_deinit(&k);
    void *gw = host_download(dgw, (size_t)n2 * ws),
         *pg2 = host_download(dpg, (size_t)(P * n2) * as);
    cr_assert_eq(memcmp(pg2, hpg, (size_t)(P * n2) * as), 0,
                 "rms_norm_grad_weight wrote into its input part_grad");
    free(pg2);
    CK(cudaFree(dpg));
    CK(cudaFree(dgw));
    return gw;
}

/* Whether gw (f32, n2) is part_grad's column sum in the lane order of docs/kernels.md: lane k of 8
 * adds rows k, k + 8, ... in row order from +0, then the lanes are added in lane order, in the
 * accumulator's dtype adt, and rounded once to f32. *bad: the first column that differs. */
static int in_lane_order(const void *pg, baton_dtype adt, const float *gw, int64_t P, int64_t n2,
                         int64_t *bad)
{
    for (int64_t j = 0; j < n2; j++) {
        float t;
        if (adt == BATON_DTYPE_F32) {
            float lanes[8] = {0}, s = 0;
            for (int64_t p = 0; p < P; p++)
                lanes[p % 8] += ((const float *)pg)[p * n2 + j];
            for (int k = 0; k < 8; k++)
                s += lanes[k];
            t = s;
        } else {
            double lanes[8] = {0}, s = 0;
            for (int64_t p = 0; p < P; p++)
                lanes[p % 8] += ((const double *)pg)[p * n2 + j];
            for (int k = 0; k < 8; k++)
                s += lanes[k];
            t = (float)s;
        }
        if (memcmp(&t, gw + j, sizeof t) != 0) {
            *bad = j;
            return 0;
        }
    }
    return 1;
}

Test(kernels_cuda, rms_norm_grad_weight_gives_the_backwards_bits_from_its_part_grad)
{
    SKIP_WITHOUT_GPU();
    /* Every backward family: the split kernels with at most 8 and more than 8 blocks (12, 16:
     * the finish re-reads part_grad), staged with a row-splitting cluster (cy 16, cy 2 at P 256),
     * trailing empty blocks, scalar rows, one streamed row, f64 x (an f64 part_grad). With f32
     * weights (the sum rounded at most once) grad_weight is also checked against the lane order
     * on the host: both column sum kernels (a thread per column up to KCUDA_COLSUM_COLS_P rows, in
     * one round of 16 and in two, with blocks without rows (P 24 over 100 rows: 20 hold rows);
     * 32 columns by 8 lanes above, with and without batched loads) and the split backward's. */
    static const struct {
        baton_dtype xdt, wdt;
        int64_t n1, n2, P;
    } cases[] = {
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 4, 262144, 4},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 4, 262144, 16},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 12, 262144, 16},
        {BATON_DTYPE_F32, BATON_DTYPE_F32, 16, 262144, 16},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 8192, 4096, 16},
        {BATON_DTYPE_F32, BATON_DTYPE_F32, 8192, 4096, 256},
        {BATON_DTYPE_BF16, BATON_DTYPE_F32, 1000, 4096, 1000},
        {BATON_DTYPE_F16, BATON_DTYPE_BF16, 33, 4095, 7},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 1, 1048576, 16},
        {BATON_DTYPE_F64, BATON_DTYPE_F16, 300, 4096, 16},
        {BATON_DTYPE_F32, BATON_DTYPE_F32, 8192, 4096, 16},
        {BATON_DTYPE_BF16, BATON_DTYPE_F32, 4096, 4096, 16},
        {BATON_DTYPE_F32, BATON_DTYPE_F32, 100, 4096, 24},
        {BATON_DTYPE_F32, BATON_DTYPE_F32, 8192, 2048, 32},
        {BATON_DTYPE_F32, BATON_DTYPE_F32, 4096, 4096, 40},
        {BATON_DTYPE_F32, BATON_DTYPE_F32, 12, 262144, 16},
        {BATON_DTYPE_F64, BATON_DTYPE_F32, 300, 4096, 16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const baton_dtype xdt = cases[i].xdt, wdt = cases[i].wdt, adt = acc_dtype(xdt);
        const int64_t n1 = cases[i].n1, n2 = cases[i].n2, P = cases[i].P;
        const uint64_t seed = test_fresh_seed();
        test_rng rng = {seed};
        dev_bwd b;
        dev_bwd_init(&b, &rng, xdt, wdt, n1, n2);
        void *gw, *pg;
        dev_bwd_rows(&b, xdt, wdt, 0, n1, n2, P, NULL, 0, &gw, &pg, NULL);
        void *gw2 = dev_grad_weight(pg, adt, b.w, wdt, P, n2);
        cr_expect(memcmp(gw, gw2, (size_t)n2 * baton_dtype_size(wdt)) == 0,
                  "x %s, w %s, %lld x %lld, P %lld: rms_norm_grad_weight(part_grad) is not "
                  "rms_norm_bwd's grad_weight (seed %llu)",
                  baton_dtype_name(xdt), baton_dtype_name(wdt), (long long)n1, (long long)n2,
                  (long long)P, (unsigned long long)seed);
        int64_t bad = -1;
        if (wdt == BATON_DTYPE_F32)
            cr_expect(in_lane_order(pg, adt, gw, P, n2, &bad),
                      "x %s, %lld x %lld, P %lld: grad_weight[%lld] is not part_grad's column "
                      "sum in lane order (seed %llu)",
                      baton_dtype_name(xdt), (long long)n1, (long long)n2, (long long)P,
                      (long long)bad, (unsigned long long)seed);
        free(gw), free(pg), free(gw2);
        dev_bwd_deinit(&b);
    }
}

/* o: the layout for the full call and its shards alike (NULL: each chooses its own); told: the
 * shards get the 48-byte descriptor with unsharded_part_grad_size P (scripts/shard.py's gather). */
static void cuda_shard_case(baton_dtype xdt, baton_dtype wdt, int64_t n1, int64_t n2, int64_t P,
                            int N, const kcuda_rms_cfg *o, int told)
{
    cr_assert(n1 % P == 0 && P % N == 0, "a shard case needs P | n1 and N | P");
    const baton_dtype adt = acc_dtype(xdt);
    const size_t as = baton_dtype_size(adt), ws = baton_dtype_size(wdt);
    const size_t xs = baton_dtype_size(xdt);
    const uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    char what[200];
    snprintf(what, sizeof what, "x %s, w %s, %lld x %lld, P %lld over %d shards (seed %llu)",
             baton_dtype_name(xdt), baton_dtype_name(wdt), (long long)n1, (long long)n2,
             (long long)P, N, (unsigned long long)seed);
    dev_bwd b;
    dev_bwd_init(&b, &rng, xdt, wdt, n1, n2);
    void *gw, *pg, *gi;
    dev_bwd_rows(&b, xdt, wdt, 0, n1, n2, P, o, 0, &gw, &pg, &gi);
    const int64_t rows = n1 / N, Ps = P / N;
    char *gathered = malloc((size_t)(P * n2) * as);
    cr_assert(gathered);
    for (int i = 0; i < N; i++) {
        void *sgw, *spg, *sgi;
        dev_bwd_rows(&b, xdt, wdt, i * rows, rows, n2, Ps, o, told ? P : 0, &sgw, &spg, &sgi);
        memcpy(gathered + (size_t)(i * Ps * n2) * as, spg, (size_t)(Ps * n2) * as);
        cr_expect(
            memcmp(sgi, (char *)gi + (size_t)(i * rows * n2) * xs, (size_t)(rows * n2) * xs) == 0,
            "shard %d's grad_input differs from its rows of the full one (%s)", i, what);
        free(sgw), free(spg), free(sgi);
    }
    int64_t first_bad = -1;
    for (int64_t p = 0; p < P && first_bad < 0; p++)
        if (memcmp(gathered + (size_t)(p * n2) * as, (char *)pg + (size_t)(p * n2) * as,
                   (size_t)n2 * as) != 0)
            first_bad = p;
    cr_expect(first_bad < 0,
              "part_grad block %lld of the shards differs from the full backward's: the shard's "
              "layout adds the block's rows in another order (%s)",
              (long long)first_bad, what);
    void *ggw = dev_grad_weight(gathered, adt, b.w, wdt, P, n2);
    cr_expect(memcmp(ggw, gw, (size_t)n2 * ws) == 0,
              "grad_weight of the gathered part_grads differs from the full backward's (%s)", what);
    free(ggw), free(gathered), free(gw), free(pg), free(gi);
    dev_bwd_deinit(&b);
}

Test(kernels_cuda, row_shards_give_the_full_part_grad_and_grad_weight_bitwise)
{
    SKIP_WITHOUT_GPU();
    for (int N = 2; N <= 4; N += 2) {
        /* The tutorial: 4 x 512 x 512 over a 512 x 512 weight, its declared part_grad of 4. */
        cuda_shard_case(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 4, 262144, 4, N, NULL, 0);
        cuda_shard_case(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 16, 262144, 16, N, NULL, 0);
        /* Many rows: the register backward fits cy to the number of blocks, which a shard
         * divides: the property holds at one cy forced on both, and where the shards are told
         * the unsharded call's blocks (docs/shard.md). */
        const kcuda_rms_cfg rows8 = {.mode = 5, .cy = 8};
        cuda_shard_case(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 8192, 4096, 16, N, &rows8, 0);
        cuda_shard_case(BATON_DTYPE_F32, BATON_DTYPE_F32, 8192, 4096, 16, N, &rows8, 0);
        cuda_shard_case(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 8192, 4096, 16, N, NULL, 1);
        cuda_shard_case(BATON_DTYPE_F32, BATON_DTYPE_F32, 8192, 4096, 16, N, NULL, 1);
    }
}

Test(kernels_cuda, rms_norm_grad_weight_rejects_bad_descriptors_and_launches_nothing)
{
    SKIP_WITHOUT_GPU();
    const int64_t P = 4, n2 = 64;
    void *pg = dev_alloc(P * n2 * 4), *w = dev_alloc(n2 * 2), *gw = dev_alloc(n2 * 2);
    dev_poison(gw, n2 * 2);
    const baton_rms_grad_weight_desc good = {
        .part_grad_size = P, .n2 = n2, .pg_dtype = BATON_DTYPE_F32, .w_dtype = BATON_DTYPE_BF16};
    struct {
        baton_rms_grad_weight_desc d;
        size_t len;
        const char *must_say;
    } bad[] = {
        {good, 23, "24"},
        {{.part_grad_size = P, .n2 = n2, .pg_dtype = BATON_DTYPE_BF16, .w_dtype = 1},
         24,
         "pg_dtype"},
        {{.part_grad_size = P, .n2 = n2, .pg_dtype = BATON_DTYPE_F32, .w_dtype = 5}, 24, "w_dtype"},
        {{.part_grad_size = 0, .n2 = n2, .pg_dtype = BATON_DTYPE_F32, .w_dtype = 1}, 24, ">= 1"},
        {{.part_grad_size = P, .n2 = INT64_MAX, .pg_dtype = BATON_DTYPE_F32, .w_dtype = 1},
         24,
         "64 bits"},
    };
    void *bufs[3] = {pg, w, gw};
    kctx k;
    kctx_init(&k, 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        k.err[0] = 0;
        int rc =
            baton__kcuda_rms_norm_grad_weight(&k.ctx, bufs, (const char *)&bad[i].d, bad[i].len);
        cr_expect_eq(rc, BATON_EINVAL, "case %zu: rc %d", i, rc);
        cr_expect(strstr(k.err, bad[i].must_say) && strstr(k.err, "rms_norm_grad_weight"),
                  "case %zu: \"%s\" does not say %s", i, k.err, bad[i].must_say);
    }
    void *nul[3] = {pg, NULL, gw};
    cr_expect_eq(baton__kcuda_rms_norm_grad_weight(&k.ctx, nul, (const char *)&good, sizeof good),
                 BATON_EINVAL);
    kctx_deinit(&k);
    cr_expect(all_poisoned(gw, n2 * 2), "a refused call wrote grad_weight");
    CK(cudaFree(pg));
    CK(cudaFree(w));
    CK(cudaFree(gw));
}

/* ---- tuning: every variant the tuner may choose gives the default's bits ----------------------
 */

/* The layout's view of device 0, as the launchers build it. */
static kcuda_rms_device this_gpu(void)
{
    int sms = 0, optin = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    return (kcuda_rms_device){.sms = sms, .smem_optin = optin, .max_cluster = KCUDA_MAX_CLUSTER};
}

/* Device 0's name as the kernels key their tuning by it: at most 63 bytes. */
static void this_gpu_name(char (*gpu)[64])
{
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    memcpy(*gpu, prop.name, sizeof *gpu - 1);
    (*gpu)[sizeof *gpu - 1] = 0;
}

/* The first byte at which two buffers differ, or -1. */
static long long first_diff(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return (long long)i;
    return -1;
}

typedef struct tune_bufs {
    void *d[8];   /* x, w, g, y, invvar, grad_input, grad_weight, part_grad */
    size_t n[8];  /* their bytes */
    void *ref[8]; /* the default's outputs (indices 3..7), host copies */
} tune_bufs;

/* Runs pass bwd with override o (NULL: plain) on poisoned outputs; returns the host copies of
 * its outputs in out[3..7] (those of the pass). */
static void run_pass(kctx *k, tune_bufs *b, const baton_rms_norm_desc *d, int bwd,
                     const kcuda_rms_cfg *o, kcuda_rms_cfg *chosen, void **out, const char *what)
{
    const int lo = bwd ? 5 : 3, hi = bwd ? 8 : 5;
    for (int i = lo; i < hi; i++)
        dev_poison(b->d[i], b->n[i]);
    void *fb[4] = {b->d[0], b->d[1], b->d[3], b->d[4]};
    void *bb[7] = {b->d[2], b->d[4], b->d[0], b->d[1], b->d[5], b->d[6], b->d[7]};
    const int rc =
        bwd ? baton__kcuda_rms_norm_bwd_cfg(&k->ctx, bb, (const char *)d, sizeof *d, o, chosen)
            : baton__kcuda_rms_norm_fwd_cfg(&k->ctx, fb, (const char *)d, sizeof *d, o, chosen);
    cr_assert_eq(rc, 0, "%s: %s", what, k->err);
    CK(cudaStreamSynchronize(k->stream));
    for (int i = lo; i < hi; i++)
        out[i] = host_download(b->d[i], b->n[i]);
}

static const char *const OUT_NAMES[8] = {
    "", "", "", "y", "invvar", "grad_input", "grad_weight", "part_grad"};

/* Allocates b's buffers for d, in tune_bufs' order, and fills x, w and grad_output with random
 * values from rng; the outputs are left for run_pass to poison. */
static void tune_bufs_init(tune_bufs *b, const baton_rms_norm_desc *d, test_rng *rng)
{
    const baton_dtype xdt = (baton_dtype)d->x_dtype, wdt = (baton_dtype)d->w_dtype;
    const size_t xs = baton_dtype_size(xdt), ws = baton_dtype_size(wdt);
    const size_t as = baton_dtype_size(acc_dtype(xdt));
    const size_t n = (size_t)(d->n1 * d->n2), n2 = (size_t)d->n2;
    const size_t sizes[8] = {n * xs,
                             n2 * ws,
                             n * ws,
                             n * ws,
                             (size_t)d->n1 * as,
                             n * xs,
                             n2 * ws,
                             (size_t)d->part_grad_size * n2 * as};
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 8; i++) {
        b->n[i] = sizes[i];
        b->d[i] = dev_alloc(sizes[i]);
    }
    const baton_dtype fill[3] = {xdt, wdt, wdt}; /* x, w, grad_output */
    const size_t count[3] = {n, n2, n};
    for (int i = 0; i < 3; i++) {
        void *h = malloc(sizes[i]);
        cr_assert(h);
        test_fill_random(rng, fill[i], h, (int64_t)count[i], 1.0);
        CK(cudaMemcpy(b->d[i], h, sizes[i], cudaMemcpyHostToDevice));
        free(h);
    }
}

static void tune_bufs_deinit(tune_bufs *b)
{
    for (int i = 0; i < 8; i++)
        CK(cudaFree(b->d[i]));
}

/* Returns how many variants other than the default it checked. */
static int check_variants(baton_dtype xdt, baton_dtype wdt, int64_t n1, int64_t n2, int64_t P)
{
    const uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    char what[200];
    snprintf(what, sizeof what, "x %s, w %s, %lld x %lld, part_grad %lld (seed %llu)",
             baton_dtype_name(xdt), baton_dtype_name(wdt), (long long)n1, (long long)n2,
             (long long)P, (unsigned long long)seed);
    const baton_rms_norm_desc d = {
        .n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = xdt, .w_dtype = wdt, .part_grad_size = P};
    tune_bufs b;
    tune_bufs_init(&b, &d, &rng);
    kctx k;
    kctx_init(&k, 0);
    const kcuda_rms_device dev = this_gpu();
    int checked = 0;
    for (int bwd = 0; bwd < 2; bwd++) {
        const int lo = bwd ? 5 : 3, hi = bwd ? 8 : 5;
        kcuda_rms_cfg base;
        run_pass(&k, &b, &d, bwd, NULL, &base, b.ref, what);
        void *const bufs_f[4] = {b.d[0], b.d[1], b.d[3], b.d[4]};
        void *const bufs_b[7] = {b.d[2], b.d[4], b.d[0], b.d[1], b.d[5], b.d[6], b.d[7]};
        kcuda_rms_layout L;
        char why[512] = "";
        const int rc =
            bwd ? baton__kcuda_rms_bwd_layout(&d, bufs_b, &dev, NULL, &L, why, sizeof why)
                : baton__kcuda_rms_fwd_layout(&d, bufs_f, &dev, NULL, &L, why, sizeof why);
        cr_assert_eq(rc, 0, "%s: %s", what, why);
        cr_assert_eq(base.mode, L.mode, "%s: the host's layout is not the launch's", what);
        kcuda_rms_variant v[KCUDA_RMS_MAX_VARIANTS];
        const int nv = baton__kcuda_rms_variants(&d, bwd, &dev, &L, v, KCUDA_RMS_MAX_VARIANTS);
        for (int i = 1; i < nv; i++) {
            const kcuda_rms_cfg o = {.variant = v[i]};
            kcuda_rms_cfg got;
            void *out[8] = {0};
            run_pass(&k, &b, &d, bwd, &o, &got, out, what);
            cr_assert(got.variant.kernel == v[i].kernel && got.variant.stages == v[i].stages &&
                          got.variant.prefetch == v[i].prefetch && got.threads == base.threads &&
                          got.cx == base.cx && got.cy == base.cy,
                      "%s: variant {%d, %d, %d} launched {%d, %d, %d}, %d threads (default %d)",
                      what, v[i].kernel, v[i].stages, v[i].prefetch, got.variant.kernel,
                      got.variant.stages, got.variant.prefetch, got.threads, base.threads);
            for (int j = lo; j < hi; j++) {
                const long long at = first_diff(b.ref[j], out[j], b.n[j]);
                cr_expect_eq(at, -1,
                             "%s: %s of variant {kernel %d, stages %d, prefetch %d} (mode %d, %d "
                             "stages) differs from the default's (mode %d) at byte %lld",
                             what, OUT_NAMES[j], v[i].kernel, v[i].stages, v[i].prefetch, got.mode,
                             got.stages, base.mode, at);
                free(out[j]);
            }
            checked++;
        }
        /* Chained clusters (kx: other part_grad bits): grad_input does not depend on how
         * part_grad's rows are shared, so it must come back with the default's bits. */
        for (int kx = 2; bwd && L.mode == KCUDA_RMS_ROWS && kx <= 3; kx++) {
            const kcuda_rms_cfg o = {.kx = kx};
            kcuda_rms_layout Lk;
            if (baton__kcuda_rms_bwd_layout(&d, bufs_b, &dev, &o, &Lk, why, sizeof why) != 0)
                continue; /* grad_weight without room or alignment for the chain's counters */
            kcuda_rms_cfg got;
            void *out[8] = {0};
            run_pass(&k, &b, &d, bwd, &o, &got, out, what);
            cr_assert_eq(got.kx, kx, "%s: kx %d launched %d", what, kx, got.kx);
            const long long at = first_diff(b.ref[5], out[5], b.n[5]);
            cr_expect_eq(at, -1,
                         "%s: grad_input with %d chained clusters per part_grad block differs "
                         "from the default's at byte %lld",
                         what, kx, at);
            for (int j = lo; j < hi; j++)
                free(out[j]);
            checked++;
        }
        for (int j = lo; j < hi; j++)
            free(b.ref[j]);
    }
    kctx_deinit(&k);
    tune_bufs_deinit(&b);
    return checked;
}

Test(kernels_cuda, rms_norm_every_tuning_variant_gives_the_default_bits)
{
    SKIP_WITHOUT_GPU();
    const struct {
        baton_dtype x, w;
        int64_t n1, n2, P;
        int want; /* variants expected: 1 at least, or 0 to accept none */
    } cases[] = {
        /* the benchmark shapes: register rows forward and backward, the backward without and
         * with clusters (part_grad 256 and 16) */
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 4096, 4096, 256, 1},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 16384, 4096, 16, 1},
        {BATON_DTYPE_F32, BATON_DTYPE_F32, 8192, 4096, 16, 1},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 16384, 8192, 256, 1},
        {BATON_DTYPE_F32, BATON_DTYPE_F32, 4096, 4096, 256, 1},
        {BATON_DTYPE_F32, BATON_DTYPE_F32, 16384, 8192, 256, 1},
        /* the bulk-copy forward (wide weights), and split over clusters (few long rows) */
        {BATON_DTYPE_BF16, BATON_DTYPE_F64, 2048, 4096, 64, 1},
        {BATON_DTYPE_BF16, BATON_DTYPE_BF16, 100, 65536, 16, 1},
        /* odd shapes: mixed dtypes, rows of odd vector counts, part_grad that does not divide */
        {BATON_DTYPE_F16, BATON_DTYPE_F32, 1000, 2056, 100, 1},
        {BATON_DTYPE_F32, BATON_DTYPE_BF16, 300, 4100, 7, 1},
        {BATON_DTYPE_F16, BATON_DTYPE_F16, 5000, 6144, 300, 1},
        {BATON_DTYPE_BF16, BATON_DTYPE_F16, 777, 1032, 33, 0},
        {BATON_DTYPE_F64, BATON_DTYPE_F64, 3000, 2048, 30, 0},
    };
    int total = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = check_variants(cases[i].x, cases[i].w, cases[i].n1, cases[i].n2, cases[i].P);
        if (cases[i].want)
            cr_expect_gt(n, 0, "case %zu: no variant to check", i);
        total += n;
    }
    cr_log_info("%d variants checked bitwise against their defaults", total);
}

Test(kernels_cuda, rms_norm_calls_with_autotune_launch_the_tuned_variant_with_the_same_bits)
{
    SKIP_WITHOUT_GPU();
    baton__kcuda_rms_tune_reset();
    char gpu[64];
    this_gpu_name(&gpu);
    test_rng rng = {test_fresh_seed()};
    const baton_rms_norm_desc d = {.n1 = 4096,
                                   .n2 = 4096,
                                   .eps = 1e-5,
                                   .x_dtype = BATON_DTYPE_BF16,
                                   .w_dtype = BATON_DTYPE_BF16,
                                   .part_grad_size = 256};
    tune_bufs b;
    tune_bufs_init(&b, &d, &rng);
    kctx k;
    kctx_init(&k, 0);
    const kcuda_rms_device dev = this_gpu();
    for (int bwd = 0; bwd < 2; bwd++) {
        const int lo = bwd ? 5 : 3, hi = bwd ? 8 : 5;
        void *const bufs_f[4] = {b.d[0], b.d[1], b.d[3], b.d[4]};
        void *const bufs_b[7] = {b.d[2], b.d[4], b.d[0], b.d[1], b.d[5], b.d[6], b.d[7]};
        kcuda_rms_layout L;
        char why[512] = "";
        cr_assert_eq(bwd ? baton__kcuda_rms_bwd_layout(&d, bufs_b, &dev, NULL, &L, why, sizeof why)
                         : baton__kcuda_rms_fwd_layout(&d, bufs_f, &dev, NULL, &L, why, sizeof why),
                     0, "%s", why);
        kcuda_rms_variant v[KCUDA_RMS_MAX_VARIANTS];
        const int nv = baton__kcuda_rms_variants(&d, bwd, &dev, &L, v, KCUDA_RMS_MAX_VARIANTS);
        cr_assert_gt(nv, 1, "pass %d: no variant", bwd);
        kcuda_rms_cfg got;
        k.ctx.autotune = 0;
        run_pass(&k, &b, &d, bwd, NULL, &got, b.ref, "default");
        kcuda_rms_tune_key key;
        baton__kcuda_rms_tune_key_make(&key, gpu, bwd, &d, &L);
        for (int i = 1; i < nv; i++) {
            baton__kcuda_rms_tune_reset();
            cr_assert_eq(baton__kcuda_rms_tune_store(&key, &v[i]), 0);
            void *out[8] = {0};
            /* Without autotune the cache is not read; with it, the variant runs. */
            k.ctx.autotune = 0;
            run_pass(&k, &b, &d, bwd, NULL, &got, out, "autotune off");
            cr_assert(kcuda_rms_variant_none(&got.variant));
            for (int j = lo; j < hi; j++)
                free(out[j]);
            k.ctx.autotune = 1;
            run_pass(&k, &b, &d, bwd, NULL, &got, out, "autotune on");
            cr_assert(got.variant.kernel == v[i].kernel && got.variant.stages == v[i].stages &&
                          got.variant.prefetch == v[i].prefetch,
                      "pass %d: the cached variant {%d, %d, %d} did not run ({%d, %d, %d})", bwd,
                      v[i].kernel, v[i].stages, v[i].prefetch, got.variant.kernel,
                      got.variant.stages, got.variant.prefetch);
            for (int j = lo; j < hi; j++) {
                cr_expect_eq(first_diff(b.ref[j], out[j], b.n[j]), -1, "%s differs, variant %d",
                             OUT_NAMES[j], i);
                free(out[j]);
            }
        }
        /* The tuner itself: measures, caches, says what it chose; refuses to time a capture. */
        baton__kcuda_rms_tune_reset();
        char note[256] = "";
        void *fb[4] = {b.d[0], b.d[1], b.d[3], b.d[4]};
        void *bb[7] = {b.d[2], b.d[4], b.d[0], b.d[1], b.d[5], b.d[6], b.d[7]};
        k.ctx.autotune = 0;
        int rc = bwd ? baton__kcuda_rms_norm_bwd_tune(&k.ctx, bb, (const char *)&d, sizeof d, note,
                                                      sizeof note)
                     : baton__kcuda_rms_norm_fwd_tune(&k.ctx, fb, (const char *)&d, sizeof d, note,
                                                      sizeof note);
        cr_assert_eq(rc, 0, "%s", k.err);
        cr_assert(strstr(note, "tuned:") || strstr(note, "default: measured"), "%s", note);
        cr_log_info("pass %d on %s: %s", bwd, gpu, note);
        kcuda_rms_variant have;
        cr_assert_eq(baton__kcuda_rms_tune_find(&key, &have), 1, "nothing cached");
        k.ctx.autotune = 1;
        void *out[8] = {0};
        run_pass(&k, &b, &d, bwd, NULL, &got, out, "tuned");
        cr_assert(got.variant.kernel == have.kernel && got.variant.stages == have.stages &&
                  got.variant.prefetch == have.prefetch);
        for (int j = lo; j < hi; j++) {
            cr_expect_eq(first_diff(b.ref[j], out[j], b.n[j]), -1, "%s differs after tuning",
                         OUT_NAMES[j]);
            free(out[j]);
            free(b.ref[j]);
        }
        rc = bwd ? baton__kcuda_rms_norm_bwd_tune(&k.ctx, bb, (const char *)&d, sizeof d, note,
                                                  sizeof note)
                 : baton__kcuda_rms_norm_fwd_tune(&k.ctx, fb, (const char *)&d, sizeof d, note,
                                                  sizeof note);
        cr_assert(rc == 0 && strstr(note, "measured earlier"), "%s", note);
        k.ctx.capturing = 1;
        rc = bwd ? baton__kcuda_rms_norm_bwd_tune(&k.ctx, bb, (const char *)&d, sizeof d, note,
                                                  sizeof note)
                 : baton__kcuda_rms_norm_fwd_tune(&k.ctx, fb, (const char *)&d, sizeof d, note,
                                                  sizeof note);
        k.ctx.capturing = 0;
        cr_assert_eq(rc, BATON_ESTATE, "tuning while capturing: %d", rc);
        cr_assert(strstr(k.err, "captured") != NULL, "%s", k.err);
    }
    kctx_deinit(&k);
    tune_bufs_deinit(&b);
    baton__kcuda_rms_tune_reset();
}

/* The built-in picks for this GPU (kernels/cuda/rms_norm_tune.c), which the JAX/XLA entry points
 * launch: with autotune and nothing measured, each pick runs on its class's own shape and gives
 * the default's bits; with BATON_NO_AUTOTUNE's answer (autotune 0) the default runs. */
Test(kernels_cuda, the_built_in_picks_launch_on_their_gpu_with_the_default_bits)
{
    SKIP_WITHOUT_GPU();
    char gpu[64];
    this_gpu_name(&gpu);
    kctx k;
    kctx_init(&k, 0);
    int ran = 0;
    for (int i = 0; i < baton__kcuda_rms_tune_builtin_count(); i++) {
        kcuda_rms_tune_key key;
        kcuda_rms_variant pick;
        baton__kcuda_rms_tune_builtin_at(i, &key, &pick);
        if (strcmp(key.device, gpu) != 0)
            continue;
        const baton_dtype xdt = (baton_dtype)key.x_dtype, wdt = (baton_dtype)key.w_dtype;
        const int bwd = key.bwd;
        const int64_t n1 = (int64_t)1 << key.n1_log2, n2 = key.n2;
        const int64_t P = bwd ? (int64_t)1 << key.p_log2 : 1;
        const baton_rms_norm_desc d = {
            .n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = xdt, .w_dtype = wdt, .part_grad_size = P};
        test_rng rng = {test_fresh_seed()};
        tune_bufs b;
        tune_bufs_init(&b, &d, &rng);
        if (bwd) { /* invvar as the forward leaves it */
            void *fb[4] = {b.d[0], b.d[1], b.d[3], b.d[4]};
            cr_assert_eq(baton__kcuda_rms_norm_fwd(&k.ctx, fb, (const char *)&d, sizeof d), 0, "%s",
                         k.err);
        }
        const int lo = bwd ? 5 : 3, hi = bwd ? 8 : 5;
        kcuda_rms_cfg got;
        baton__kcuda_rms_tune_reset();
        k.ctx.autotune = 0;
        run_pass(&k, &b, &d, bwd, NULL, &got, b.ref, "default");
        cr_assert(kcuda_rms_variant_none(&got.variant));
        k.ctx.autotune = 1;
        void *out[8] = {0};
        run_pass(&k, &b, &d, bwd, NULL, &got, out, "built-in pick");
        cr_assert(got.variant.kernel == pick.kernel && got.variant.stages == pick.stages &&
                      got.variant.prefetch == pick.prefetch,
                  "pick %d (%s %lld x %lld, part_grad %lld): {%d, %d, %d} ran instead of {%d, %d, "
                  "%d}",
                  i, bwd ? "bwd" : "fwd", (long long)n1, (long long)n2, (long long)P,
                  got.variant.kernel, got.variant.stages, got.variant.prefetch, pick.kernel,
                  pick.stages, pick.prefetch);
        for (int j = lo; j < hi; j++) {
            cr_expect_eq(first_diff(b.ref[j], out[j], b.n[j]), -1, "pick %d: %s differs", i,
                         OUT_NAMES[j]);
            free(out[j]);
            free(b.ref[j]);
        }
        tune_bufs_deinit(&b);
        ran++;
    }
    kctx_deinit(&k);
    cr_log_info("%d built-in picks for %s run against their defaults", ran, gpu);
}

/* The forward's y and invvar for descriptor d on buffers fb (x, w, y, invvar; y and invvar
 * poisoned first), with ctx->prepared as given; host copies in out[0..1]. */
static void fwd_prepared_pass(kctx *k, void *const *fb, const size_t *nb,
                              const baton_rms_norm_desc *d, void *prepared, void **out)
{
    dev_poison(fb[2], nb[2]);
    dev_poison(fb[3], nb[3]);
    k->ctx.prepared = prepared;
    const int rc = baton__kcuda_rms_norm_fwd(&k->ctx, (void **)fb, (const char *)d, sizeof *d);
    k->ctx.prepared = NULL;
    cr_assert_eq(rc, 0, "%s", k->err);
    CK(cudaStreamSynchronize(k->stream));
    out[0] = host_download(fb[2], nb[2]);
    out[1] = host_download(fb[3], nb[3]);
}

/* A call decided at prepare (ctx->prepared) launches what a plain call launches, bit for bit, and
 * decides again when the descriptor changes (a plan's dims) or a buffer's alignment does. */
Test(kernels_cuda, rms_norm_fwd_decided_at_prepare_follows_its_descriptor)
{
    SKIP_WITHOUT_GPU();
    test_rng rng = {test_fresh_seed()};
    const baton_rms_norm_desc big = {.n1 = 64,
                                     .n2 = 1024,
                                     .eps = 1e-5,
                                     .x_dtype = BATON_DTYPE_BF16,
                                     .w_dtype = BATON_DTYPE_F32,
                                     .part_grad_size = 16};
    baton_rms_norm_desc small = big;
    small.n1 = 7;
    small.n2 = 96;
    tune_bufs b;
    tune_bufs_init(&b, &big, &rng);
    kctx k;
    kctx_init(&k, 0);
    void *fb[4] = {b.d[0], b.d[1], b.d[3], b.d[4]};
    const size_t nb[4] = {b.n[0], b.n[1], b.n[3], b.n[4]};
    void *state = NULL;
    cr_assert_eq(
        baton__kcuda_rms_norm_fwd_prepare(&k.ctx, fb, (const char *)&big, sizeof big, &state), 0,
        "%s", k.err);
    cr_assert_not_null(state);
    const baton_rms_norm_desc *seq[4] = {&big, &small, &big, &small};
    for (int shifted = 0; shifted < 2; shifted++) {
        /* x 2 bytes off its 16-byte alignment: the scalar path, decided again */
        fb[0] = (char *)b.d[0] + (shifted ? 2 : 0);
        for (int i = 0; i < 4; i++) {
            if (shifted && seq[i] == &big)
                continue; /* big's x does not fit past the shift */
            void *want[2], *got[2];
            fwd_prepared_pass(&k, fb, nb, seq[i], NULL, want);
            fwd_prepared_pass(&k, fb, nb, seq[i], state, got);
            for (int o = 0; o < 2; o++) {
                cr_expect_eq(first_diff(want[o], got[o], nb[2 + o]), -1,
                             "call %d (%lld x %lld, x shifted %d): the prepared call's %s differs "
                             "from a plain call's",
                             i, (long long)seq[i]->n1, (long long)seq[i]->n2, shifted,
                             o ? "invvar" : "y");
                free(want[o]);
                free(got[o]);
            }
        }
    }
    free(state);
    kctx_deinit(&k);
    tune_bufs_deinit(&b);
}

/* The backward's grad_input, grad_weight and part_grad for descriptor d on buffers bb (their
 * outputs poisoned first), with ctx->prepared as given; host copies in out[0..2]. */
static void bwd_prepared_pass(kctx *k, void *const *bb, const size_t *nb,
                              const baton_rms_norm_desc *d, void *prepared, void **out)
{
    for (int o = 4; o < 7; o++)
        dev_poison(bb[o], nb[o]);
    k->ctx.prepared = prepared;
    const int rc = baton__kcuda_rms_norm_bwd(&k->ctx, (void **)bb, (const char *)d, sizeof *d);
    k->ctx.prepared = NULL;
    cr_assert_eq(rc, 0, "%s", k->err);
    CK(cudaStreamSynchronize(k->stream));
    for (int o = 4; o < 7; o++)
        out[o - 4] = host_download(bb[o], nb[o]);
}

Test(kernels_cuda, rms_norm_bwd_decided_at_prepare_follows_its_descriptor)
{
    SKIP_WITHOUT_GPU();
    test_rng rng = {test_fresh_seed()};
    const baton_rms_norm_desc big = {.n1 = 64,
                                     .n2 = 1024,
                                     .eps = 1e-5,
                                     .x_dtype = BATON_DTYPE_BF16,
                                     .w_dtype = BATON_DTYPE_F32,
                                     .part_grad_size = 16};
    baton_rms_norm_desc small = big, split = big;
    small.n1 = 7;
    small.n2 = 96;
    small.part_grad_size = 4;
    split.n1 = 4; /* few long rows: the split backward, where it applies */
    tune_bufs b;
    tune_bufs_init(&b, &big, &rng);
    kctx k;
    kctx_init(&k, 0);
    void *fb[4] = {b.d[0], b.d[1], b.d[3], b.d[4]};
    cr_assert_eq(baton__kcuda_rms_norm_fwd(&k.ctx, fb, (const char *)&big, sizeof big), 0, "%s",
                 k.err);
    void *bb[7] = {b.d[2], b.d[4], b.d[0], b.d[1], b.d[5], b.d[6], b.d[7]};
    const size_t nb[7] = {b.n[2], b.n[4], b.n[0], b.n[1], b.n[5], b.n[6], b.n[7]};
    void *state = NULL;
    cr_assert_eq(
        baton__kcuda_rms_norm_bwd_prepare(&k.ctx, bb, (const char *)&big, sizeof big, &state), 0,
        "%s", k.err);
    cr_assert_not_null(state);
    const baton_rms_norm_desc *seq[5] = {&big, &small, &split, &big, &small};
    for (int i = 0; i < 5; i++) {
        void *want[3], *got[3];
        bwd_prepared_pass(&k, bb, nb, seq[i], NULL, want);
        bwd_prepared_pass(&k, bb, nb, seq[i], state, got);
        for (int o = 0; o < 3; o++) {
            cr_expect_eq(first_diff(want[o], got[o], nb[4 + o]), -1,
                         "call %d (%lld x %lld): the prepared call's output %d differs from a "
                         "plain call's",
                         i, (long long)seq[i]->n1, (long long)seq[i]->n2, o);
            free(want[o]);
            free(got[o]);
        }
    }
    free(state);
    kctx_deinit(&k);
    tune_bufs_deinit(&b);
}

Test(kernels_cuda, rms_norm_with_programmatic_dependent_launch_is_correct)
{
    SKIP_WITHOUT_GPU();
    rms_case cases[] = {
        {.xdt = BATON_DTYPE_BF16, .wdt = BATON_DTYPE_BF16, .n1 = 32, .n2 = 4096, .pgs = 16},
        {.xdt = BATON_DTYPE_BF16, .wdt = BATON_DTYPE_BF16, .n1 = 4, .n2 = 262144, .pgs = 16},
        {.xdt = BATON_DTYPE_F32, .wdt = BATON_DTYPE_F32, .n1 = 3, .n2 = 4095, .pgs = 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cases[i].pdl = 1;
        run_rms_case(&cases[i], NULL, NULL);
    }
}

/* A chain copy -> add_scalar -> rms_norm_fwd -> rms_norm_bwd -> mul, launched with PDL, captured
 * into a CUDA graph and replayed, must give the same bits as the plain launches. */
Test(kernels_cuda, kernel_chains_are_the_same_with_pdl_and_in_a_captured_graph)
{
    SKIP_WITHOUT_GPU();
    const int64_t n1 = 4, n2 = 262144, n = n1 * n2, P = 16;
    test_rng rng = {test_fresh_seed()};
    uint16_t *hx = malloc((size_t)n * 2), *hw = malloc((size_t)n2 * 2);
    test_fill_random(&rng, BATON_DTYPE_BF16, hx, n, 1.0);
    test_fill_random(&rng, BATON_DTYPE_BF16, hw, n2, 1.0);
    void *x = dev_upload(hx, (size_t)n * 2), *w = dev_upload(hw, (size_t)n2 * 2);
    void *outs[3];
    for (int mode = 0; mode < 3; mode++) { /* plain, PDL, graph with PDL */
        void *x2 = dev_alloc((size_t)n * 2), *x3 = dev_alloc((size_t)n * 2);
        void *y = dev_alloc((size_t)n * 2), *iv = dev_alloc((size_t)n1 * 4);
        void *gi = dev_alloc((size_t)n * 2), *gw = dev_alloc((size_t)n2 * 2);
        void *pg = dev_alloc((size_t)P * n2 * 4), *out = dev_alloc((size_t)n * 2);
        dev_poison(out, (size_t)n * 2);
        kctx k;
        kctx_init(&k, mode > 0);
        baton_ew_desc cd = {.n = n, .dtype = BATON_DTYPE_BF16};
        baton_ew_desc ad = {.n = n, .dtype = BATON_DTYPE_BF16, .value = 0.5};
        baton_ew_desc md = {.n = n, .nb = n, .dtype = BATON_DTYPE_BF16};
        baton_rms_norm_desc rd = {.n1 = n1,
                                  .n2 = n2,
                                  .eps = 1e-5,
                                  .x_dtype = BATON_DTYPE_BF16,
                                  .w_dtype = BATON_DTYPE_BF16,
                                  .part_grad_size = P};
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        if (mode == 2)
            CK(cudaStreamBeginCapture(k.stream, cudaStreamCaptureModeThreadLocal));
        void *b1[] = {x, x2}, *b2[] = {x2, x3}, *b3[] = {x3, w, y, iv};
        void *b4[] = {y, iv, x3, w, gi, gw, pg}, *b5[] = {gi, y, out};
        cr_assert_eq(baton__kcuda_copy(&k.ctx, b1, (const char *)&cd, sizeof cd), 0, "%s", k.err);
        cr_assert_eq(baton__kcuda_add_scalar(&k.ctx, b2, (const char *)&ad, sizeof ad), 0, "%s",
                     k.err);
        cr_assert_eq(baton__kcuda_rms_norm_fwd(&k.ctx, b3, (const char *)&rd, sizeof rd), 0, "%s",
                     k.err);
        cr_assert_eq(baton__kcuda_rms_norm_bwd(&k.ctx, b4, (const char *)&rd, sizeof rd), 0, "%s",
                     k.err);
        cr_assert_eq(baton__kcuda_mul(&k.ctx, b5, (const char *)&md, sizeof md), 0, "%s", k.err);
        if (mode == 2) {
            CK(cudaStreamEndCapture(k.stream, &graph));
            CK(cudaGraphInstantiate(&exec, graph, 0));
            for (int rep = 0; rep < 3; rep++)
                CK(cudaGraphLaunch(exec, k.stream));
        }
        CK(cudaStreamSynchronize(k.stream));
        outs[mode] = host_download(out, (size_t)n * 2);
        if (mode == 2) {
            CK(cudaGraphExecDestroy(exec));
            CK(cudaGraphDestroy(graph));
        }
        kctx_deinit(&k);
        void *f[] = {x2, x3, y, iv, gi, gw, pg, out};
        for (int i = 0; i < 8; i++)
            CK(cudaFree(f[i]));
    }
    cr_expect(memcmp(outs[0], outs[1], (size_t)n * 2) == 0, "PDL launches changed the result");
    cr_expect(memcmp(outs[0], outs[2], (size_t)n * 2) == 0,
              "the captured graph changed the result");
    size_t unwritten = 0;
    for (int64_t i = 0; i < n; i++)
        unwritten += ((uint16_t *)outs[0])[i] == 0xffff;
    cr_expect_eq(unwritten, 0, "%zu elements of the chain's output were never written", unwritten);
    for (int i = 0; i < 3; i++)
        free(outs[i]);
    CK(cudaFree(x));
    CK(cudaFree(w));
    free(hx);
    free(hw);
}

/* ---------------------------------------------------------------------------------------------
 * Elementwise, argmax, noop
 * ------------------------------------------------------------------------------------------- */

enum { OP_SOFTSHRINK, OP_ADD, OP_MUL, OP_ADD_SCALAR, OP_COPY };

static double ref_op(int op, double a, double b, double v)
{
    switch (op) {
    case OP_SOFTSHRINK: return a > v ? a - v : a < -v ? a + v : 0.0;
    case OP_ADD: return a + b;
    case OP_MUL: return a * b;
    case OP_ADD_SCALAR: return a + v;
    default: return a;
    }
}

static void run_ew(int op, baton_dtype dt, int64_t n, int64_t nb, double value)
{
    static const baton_kernel_fn fns[] = {baton__kcuda_softshrink, baton__kcuda_add,
                                          baton__kcuda_mul, baton__kcuda_add_scalar,
                                          baton__kcuda_copy};
    static const char *names[] = {"softshrink", "add", "mul", "add_scalar", "copy"};
    const int binary = op == OP_ADD || op == OP_MUL;
    const size_t es = baton_dtype_size(dt);
    const uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    void *ha = malloc((size_t)n * es), *hb = malloc((size_t)(nb ? nb : 1) * es);
    const int ints = dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64;
    for (int64_t i = 0; i < n; i++)
        store_f64(dt, ha, i,
                  ints ? (double)(int64_t)(test_rng_next(&rng) % 2001) - 1000.0
                       : test_rng_normal(&rng));
    for (int64_t i = 0; i < nb; i++)
        store_f64(dt, hb, i,
                  ints ? (double)(int64_t)(test_rng_next(&rng) % 2001) - 1000.0
                       : test_rng_normal(&rng));
    if (op == OP_SOFTSHRINK && n > 3) /* NaN gives 0, as on the CPU */
        store_f64(dt, ha, 3, NAN);
    void *da = dev_upload(ha, (size_t)n * es), *db = dev_upload(hb, (size_t)(nb ? nb : 1) * es);
    void *dout = dev_alloc((size_t)n * es);
    dev_poison(dout, (size_t)n * es);
    kctx k;
    kctx_init(&k, 0);
    baton_ew_desc d = {.n = n, .nb = binary ? nb : 0, .dtype = dt, .value = value};
    void *bufs[3] = {da, binary ? db : dout, dout};
    int rc = fns[op](&k.ctx, bufs, (const char *)&d, sizeof d);
    cr_assert_eq(rc, 0, "%s %s n %lld: %s", names[op], baton_dtype_name(dt), (long long)n, k.err);
    CK(cudaStreamSynchronize(k.stream));
    void *hout = host_download(dout, (size_t)n * es);
    double *ref = malloc(sizeof(double) * (size_t)n);
    /* The kernels use the scalar as an f32 for 16/32-bit floats. */
    const double v = dt == BATON_DTYPE_F64 || ints ? value : (double)(float)value;
    for (int64_t i = 0; i < n; i++) {
        const double a = load_f64(dt, ha, i);
        const double b = binary ? load_f64(dt, hb, i % nb) : 0;
        ref[i] = ref_op(op, a, b, v);
        if (op == OP_SOFTSHRINK && isnan(a))
            ref[i] = 0;
    }
    if (ints || op == OP_COPY) {
        if (op == OP_COPY)
            cr_expect(memcmp(hout, ha, (size_t)n * es) == 0, "copy %s n %lld is not exact",
                      baton_dtype_name(dt), (long long)n);
        else
            for (int64_t i = 0; i < n; i++)
                if (load_f64(dt, hout, i) != ref[i]) {
                    cr_expect(0, "%s %s n %lld: element %lld is %g, expected %g", names[op],
                              baton_dtype_name(dt), (long long)n, (long long)i,
                              load_f64(dt, hout, i), ref[i]);
                    break;
                }
    } else {
        double e = test_rel_err(dt, hout, ref, n);
        cr_expect_leq(e, test_tolerance(dt),
                      "%s %s n %lld nb %lld: relative error %.3g (seed %llu)", names[op],
                      baton_dtype_name(dt), (long long)n, (long long)nb, e,
                      (unsigned long long)seed);
    }
    kctx_deinit(&k);
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dout));
    free(ha);
    free(hb);
    free(hout);
    free(ref);
}

Test(kernels_cuda, elementwise_kernels_match_reference_for_every_dtype)
{
    SKIP_WITHOUT_GPU();
    static const baton_dtype all[] = {BATON_DTYPE_BF16, BATON_DTYPE_F16, BATON_DTYPE_F32,
                                      BATON_DTYPE_F64,  BATON_DTYPE_I32, BATON_DTYPE_I64};
    for (size_t t = 0; t < 6; t++) {
        const baton_dtype dt = all[t];
        const int ints = dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64;
        for (int64_t n = 1; n <= 1 << 20; n = n * 37 + 3) {
            if (!ints)
                run_ew(OP_SOFTSHRINK, dt, n, 0, 0.5);
            run_ew(OP_ADD_SCALAR, dt, n, 0, ints ? 7.0 : 1.25);
            run_ew(OP_COPY, dt, n, 0, 0);
            run_ew(OP_ADD, dt, n, n, 0);
            run_ew(OP_MUL, dt, n, n, 0);
        }
        /* b repeating over a's leading dims: aligned rows, odd rows, one element */
        run_ew(OP_ADD, dt, 64 * 4096, 4096, 0);
        run_ew(OP_MUL, dt, 12 * 7, 7, 0);
        run_ew(OP_ADD, dt, 1000, 1, 0);
        run_ew(OP_COPY, dt, 8 << 20, 0, 0);
    }
}

/* baton__kcuda_argmax over n1 rows of n2 values of dtype dt (host hx), into a poisoned output: the
 * indices, downloaded (free() them). */
static int64_t *argmax_on_gpu(const void *hx, baton_dtype dt, int64_t n1, int64_t n2)
{
    void *dx = dev_upload(hx, (size_t)(n1 * n2) * baton_dtype_size(dt));
    void *dout = dev_alloc((size_t)n1 * 8);
    dev_poison(dout, (size_t)n1 * 8);
    kctx k;
    kctx_init(&k, 0);
    baton_argmax_desc d = {.n1 = n1, .n2 = n2, .dtype = dt};
    void *b[2] = {dx, dout};
    cr_assert_eq(baton__kcuda_argmax(&k.ctx, b, (const char *)&d, sizeof d), 0, "%s", k.err);
    CK(cudaStreamSynchronize(k.stream));
    int64_t *out = host_download(dout, (size_t)n1 * 8);
    kctx_deinit(&k);
    CK(cudaFree(dx));
    CK(cudaFree(dout));
    return out;
}

Test(kernels_cuda, argmax_finds_the_first_maximum_and_nan_wins)
{
    SKIP_WITHOUT_GPU();
    /* {1, 128256}: a decode step's logits, the 16-byte path; {2, 131075}: rows not a multiple of
     * 16 bytes, the element path */
    static const int64_t shapes[][2] = {{1, 1},     {7, 33},     {1000, 1000}, {3, 100000},
                                        {65536, 5}, {1, 128256}, {2, 131075}};
    for (int t = 0; t < 4; t++) {
        const baton_dtype dt = FLOATS[t];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t n1 = shapes[s][0], n2 = shapes[s][1], n = n1 * n2;
            const size_t es = baton_dtype_size(dt);
            test_rng rng = {test_fresh_seed()};
            void *hx = malloc((size_t)n * es);
            /* Few distinct values, so ties are common; a NaN in every third row; a row of -inf. */
            for (int64_t i = 0; i < n; i++)
                store_f64(dt, hx, i, (double)(test_rng_next(&rng) % 16));
            for (int64_t r = 0; r < n1; r += 3)
                store_f64(dt, hx, r * n2 + (int64_t)(test_rng_next(&rng) % (uint64_t)n2), NAN);
            if (n1 > 1)
                for (int64_t j = 0; j < n2; j++)
                    store_f64(dt, hx, n2 + j, -INFINITY);
            int64_t *out = argmax_on_gpu(hx, dt, n1, n2);
            for (int64_t r = 0; r < n1; r++) {
                int64_t best = 0;
                for (int64_t j = 1; j < n2; j++) {
                    double v = load_f64(dt, hx, r * n2 + j), bv = load_f64(dt, hx, r * n2 + best);
                    if (!isnan(bv) && (isnan(v) || v > bv))
                        best = j;
                }
                if (out[r] != best) {
                    cr_expect_eq(out[r], best,
                                 "argmax %s (%lld x %lld) row %lld: %lld, expected %lld",
                                 baton_dtype_name(dt), (long long)n1, (long long)n2, (long long)r,
                                 (long long)out[r], (long long)best);
                    break;
                }
            }
            free(hx);
            free(out);
        }
    }
}

/* Integer x, as the CPU kernel takes it (tests/test_kernels_cpu.c checks it by the same rules):
 * fresh random rows of a few kinds (test_fill_argmax_ints: ties, where the first index must win
 * across threads, warps and blocks, extremes of the range, i64 values above 2^53), against an
 * exact reference. */

Test(kernels_cuda, argmax_on_integers_finds_the_first_maximum_exactly)
{
    SKIP_WITHOUT_GPU();
    static const int64_t shapes[][2] = {{1, 1},     {7, 33},     {1000, 1000}, {5, 100000},
                                        {65536, 5}, {1, 128256}, {2, 131075}};
    for (int t = 0; t < 2; t++) {
        const baton_dtype dt = t ? BATON_DTYPE_I64 : BATON_DTYPE_I32;
        const size_t es = baton_dtype_size(dt);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t n1 = shapes[s][0], n2 = shapes[s][1], n = n1 * n2;
            test_rng rng = {test_fresh_seed()};
            int64_t *v = malloc(sizeof(int64_t) * (size_t)n);
            void *hx = malloc((size_t)n * es);
            cr_assert(v && hx, "out of memory");
            test_fill_argmax_ints(&rng, dt, n1, n2, v, hx);
            int64_t *out = argmax_on_gpu(hx, dt, n1, n2);
            for (int64_t r = 0; r < n1; r++) {
                const int64_t best = test_argmax_row(v, n2, r);
                if (out[r] != best) {
                    cr_expect_eq(out[r], best,
                                 "argmax %s (%lld x %lld) row %lld (kind %d): %lld, expected %lld",
                                 baton_dtype_name(dt), (long long)n1, (long long)n2, (long long)r,
                                 (int)(r % 5), (long long)out[r], (long long)best);
                    break;
                }
            }
            free(hx);
            free(v);
            free(out);
        }
    }
}

Test(kernels_cuda, noop_launches_one_kernel_and_succeeds)
{
    SKIP_WITHOUT_GPU();
    kctx k;
    kctx_init(&k, 0);
    for (int pdl = 0; pdl < 2; pdl++) {
        k.ctx.pdl = pdl;
        cr_assert_eq(baton__kcuda_noop(&k.ctx, NULL, NULL, 0), 0, "%s", k.err);
    }
    CK(cudaStreamSynchronize(k.stream));
    kctx_deinit(&k);
}

/* ---------------------------------------------------------------------------------------------
 * Errors: a clear reason, BATON_EINVAL, and nothing launched (the outputs stay poisoned)
 * ------------------------------------------------------------------------------------------- */

Test(kernels_cuda, bad_descriptors_are_rejected_with_a_reason_and_launch_nothing)
{
    SKIP_WITHOUT_GPU();
    const int64_t n1 = 4, n2 = 64;
    void *x = dev_alloc(n1 * n2 * 4), *w = dev_alloc(n2 * 4), *y = dev_alloc(n1 * n2 * 4);
    void *iv = dev_alloc(n1 * 4), *pg = dev_alloc(16 * n2 * 4), *gi = dev_alloc(n1 * n2 * 4);
    void *gw = dev_alloc(n2 * 4);
    CK(cudaMemset(x, 0, n1 * n2 * 4));
    CK(cudaMemset(w, 0, n2 * 4));
    CK(cudaDeviceSynchronize());
    dev_poison(y, n1 * n2 * 4);
    dev_poison(gi, n1 * n2 * 4);
    kctx k;
    kctx_init(&k, 0);
    const baton_rms_norm_desc good = {.n1 = n1,
                                      .n2 = n2,
                                      .eps = 1e-5,
                                      .x_dtype = BATON_DTYPE_F32,
                                      .w_dtype = BATON_DTYPE_F32,
                                      .part_grad_size = 16};
    void *fb[4] = {x, w, y, iv};
    void *bb[7] = {x, iv, x, w, gi, gw, pg};
    struct {
        baton_rms_norm_desc d;
        size_t len;
        const char *must_say;
    } bad[] = {
        {good, 39, "40"},
        {good, 56, "40"},
        {{.n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = 9, .w_dtype = 3, .part_grad_size = 16},
         40,
         "dtype"},
        {{.n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = 3, .w_dtype = 5, .part_grad_size = 16},
         40,
         "dtype"},
        {{.n1 = 0, .n2 = n2, .eps = 1e-5, .x_dtype = 3, .w_dtype = 3, .part_grad_size = 16},
         40,
         "both must be >= 1"},
        {{.n1 = n1, .n2 = 0, .eps = 1e-5, .x_dtype = 3, .w_dtype = 3, .part_grad_size = 16},
         40,
         "both must be >= 1"},
        {{.n1 = n1, .n2 = n2, .eps = -1, .x_dtype = 3, .w_dtype = 3, .part_grad_size = 16},
         40,
         "eps"},
        {{.n1 = n1, .n2 = n2, .eps = NAN, .x_dtype = 3, .w_dtype = 3, .part_grad_size = 16},
         40,
         "eps"},
        {{.n1 = INT64_MAX / 2,
          .n2 = 1 << 20,
          .eps = 1e-5,
          .x_dtype = 3,
          .w_dtype = 3,
          .part_grad_size = 16},
         40,
         "fit in 64 bits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char opaque[64] = {0};
        memcpy(opaque, &bad[i].d, sizeof bad[i].d);
        k.err[0] = 0;
        int rc = baton__kcuda_rms_norm_fwd(&k.ctx, fb, opaque, bad[i].len);
        cr_expect_eq(rc, BATON_EINVAL, "case %zu: forward returned %d", i, rc);
        cr_expect(strstr(k.err, bad[i].must_say), "case %zu: '%s' does not say '%s'", i, k.err,
                  bad[i].must_say);
        /* the kernel names itself; the step is the runtime's to name */
        cr_expect(strstr(k.err, "rms_norm_fwd") && !strstr(k.err, "step 'test'"),
                  "case %zu: '%s' does not name the kernel, or names the step", i, k.err);
        k.err[0] = 0;
        rc = baton__kcuda_rms_norm_bwd(&k.ctx, bb, opaque, bad[i].len);
        cr_expect_eq(rc, BATON_EINVAL, "case %zu: backward returned %d", i, rc);
        cr_expect(strstr(k.err, bad[i].must_say), "case %zu: '%s' does not say '%s'", i, k.err,
                  bad[i].must_say);
    }
    /* The backward's 48-byte row-shard form with fewer unsharded blocks than its own (8 < 16),
     * and the forward, which takes only 40 bytes (row_shards_... runs the valid form). */
    const baton_rms_norm_shard_desc sd = {good, 8};
    cr_expect_eq(baton__kcuda_rms_norm_bwd(&k.ctx, bb, (const char *)&sd, sizeof sd), BATON_EINVAL);
    cr_expect(strstr(k.err, "unsharded_part_grad_size is 8"), "'%s'", k.err);
    cr_expect_eq(baton__kcuda_rms_norm_fwd(&k.ctx, fb, (const char *)&sd, sizeof sd), BATON_EINVAL);
    baton_rms_norm_desc nopg = good;
    nopg.part_grad_size = 0;
    cr_expect_eq(baton__kcuda_rms_norm_bwd(&k.ctx, bb, (const char *)&nopg, sizeof nopg),
                 BATON_EINVAL);
    cr_expect(strstr(k.err, "part_grad_size"), "'%s'", k.err);
    cr_expect_eq(baton__kcuda_rms_norm_fwd(&k.ctx, fb, NULL, 40), BATON_EINVAL);
    void *nullb[4] = {x, NULL, y, iv};
    cr_expect_eq(baton__kcuda_rms_norm_fwd(&k.ctx, nullb, (const char *)&good, sizeof good),
                 BATON_EINVAL);
    cr_expect(strstr(k.err, "buffer 1"), "'%s'", k.err);
    cr_expect_eq(baton__kcuda_rms_norm_fwd(&k.ctx, NULL, (const char *)&good, sizeof good),
                 BATON_EINVAL);
    /* A NULL errbuf is allowed. */
    baton_exec_ctx quiet = k.ctx;
    quiet.errbuf = NULL;
    quiet.errbuf_len = 0;
    cr_expect_eq(baton__kcuda_rms_norm_fwd(&quiet, fb, (const char *)&good, 3), BATON_EINVAL);

    /* Elementwise and argmax descriptors. */
    const baton_ew_desc ew_bad[] = {
        {.n = 0, .dtype = BATON_DTYPE_F32},
        {.n = 10, .dtype = 0},
        {.n = 10, .dtype = 7},
        {.n = 10, .dtype = BATON_DTYPE_F32, .reserved = 1},
        {.n = 10, .nb = 3, .dtype = BATON_DTYPE_F32},
        {.n = 10, .dtype = BATON_DTYPE_F32, .value = INFINITY},
    };
    for (size_t i = 0; i < sizeof ew_bad / sizeof ew_bad[0]; i++) {
        void *b2[3] = {x, y, y};
        cr_expect_eq(baton__kcuda_copy(&k.ctx, b2, (const char *)&ew_bad[i], sizeof ew_bad[i]),
                     BATON_EINVAL, "copy case %zu", i);
        cr_expect_eq(baton__kcuda_add(&k.ctx, b2, (const char *)&ew_bad[i], 31), BATON_EINVAL);
    }
    baton_ew_desc add_nb = {.n = 10, .nb = 3, .dtype = BATON_DTYPE_F32};
    void *b3[3] = {x, w, y};
    cr_expect_eq(baton__kcuda_add(&k.ctx, b3, (const char *)&add_nb, sizeof add_nb), BATON_EINVAL);
    cr_expect(strstr(k.err, "divisor"), "'%s'", k.err);
    baton_ew_desc ss = {.n = 10, .dtype = BATON_DTYPE_F32, .value = -1};
    cr_expect_eq(baton__kcuda_softshrink(&k.ctx, b3, (const char *)&ss, sizeof ss), BATON_EINVAL);
    baton_ew_desc ssi = {.n = 10, .dtype = BATON_DTYPE_I32, .value = 1};
    cr_expect_eq(baton__kcuda_softshrink(&k.ctx, b3, (const char *)&ssi, sizeof ssi), BATON_EINVAL);
    baton_ew_desc asi = {.n = 10, .dtype = BATON_DTYPE_I32, .value = 0.5};
    cr_expect_eq(baton__kcuda_add_scalar(&k.ctx, b3, (const char *)&asi, sizeof asi), BATON_EINVAL);
    cr_expect(strstr(k.err, "integer"), "'%s'", k.err);
    baton_argmax_desc am = {.n1 = 0, .n2 = 4, .dtype = BATON_DTYPE_F32};
    cr_expect_eq(baton__kcuda_argmax(&k.ctx, b3, (const char *)&am, sizeof am), BATON_EINVAL);
    am.n1 = 1;
    am.dtype = 42;
    cr_expect_eq(baton__kcuda_argmax(&k.ctx, b3, (const char *)&am, sizeof am), BATON_EINVAL);
    cr_expect_eq(baton__kcuda_argmax(&k.ctx, b3, (const char *)&am, 8), BATON_EINVAL);

    CK(cudaStreamSynchronize(k.stream));
    cr_expect(all_poisoned(y, n1 * n2 * 4), "a rejected call wrote y");
    cr_expect(all_poisoned(gi, n1 * n2 * 4), "a rejected call wrote grad_input");
    kctx_deinit(&k);
    void *f[] = {x, w, y, iv, pg, gi, gw};
    for (int i = 0; i < 7; i++)
        CK(cudaFree(f[i]));
}

Test(kernels_cuda, a_failed_launch_names_the_call_and_returns_ecuda)
{
    SKIP_WITHOUT_GPU();
    /* While a blocking stream is captured in global mode, a launch on the legacy stream (which
     * would have to wait for it) is refused by cudaLaunchKernelEx. */
    cudaStream_t cap;
    CK(cudaStreamCreate(&cap));
    void *x = dev_alloc(64 * 4), *y = dev_alloc(64 * 4);
    kctx k;
    kctx_init(&k, 0);
    k.ctx.stream = NULL;
    CK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal));
    baton_ew_desc d = {.n = 64, .dtype = BATON_DTYPE_F32};
    void *b[2] = {x, y};
    int rc = baton__kcuda_copy(&k.ctx, b, (const char *)&d, sizeof d);
    cudaGraph_t g = NULL;
    cudaStreamEndCapture(cap, &g);
    if (g)
        cudaGraphDestroy(g);
    cudaGetLastError();
    cr_expect_eq(rc, BATON_ECUDA, "a refused launch returned %d", rc);
    /* the kernel names the CUDA call; the runtime, not the kernel, names the step */
    cr_expect(strstr(k.err, "cudaLaunchKernelEx(copy) failed") && !strstr(k.err, "step 'test'"),
              "'%s' does not name the call, or names the step", k.err);
    /* The next call on a working stream succeeds. */
    k.ctx.stream = k.stream;
    cr_expect_eq(baton__kcuda_copy(&k.ctx, b, (const char *)&d, sizeof d), 0, "%s", k.err);
    kctx_deinit(&k);
    CK(cudaStreamDestroy(cap));
    CK(cudaFree(x));
    CK(cudaFree(y));
}

/* ---------------------------------------------------------------------------------------------
 * The legacy XLA custom-call ABI
 * ------------------------------------------------------------------------------------------- */

Test(kernels_cuda, legacy_xla_abi_runs_the_kernels_and_reports_bad_descriptors)
{
    SKIP_WITHOUT_GPU();
    const int64_t n1 = 8, n2 = 4096, n = n1 * n2;
    test_rng rng = {test_fresh_seed()};
    uint16_t *hx = malloc((size_t)n * 2), *hw = malloc((size_t)n2 * 2);
    test_fill_random(&rng, BATON_DTYPE_BF16, hx, n, 1.0);
    test_fill_random(&rng, BATON_DTYPE_BF16, hw, n2, 1.0);
    void *x = dev_upload(hx, (size_t)n * 2), *w = dev_upload(hw, (size_t)n2 * 2);
    void *y = dev_alloc((size_t)n * 2), *iv = dev_alloc((size_t)n1 * 4);
    void *y2 = dev_alloc((size_t)n * 2);
    dev_poison(y, (size_t)n * 2);
    dev_poison(y2, (size_t)n * 2);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    baton_rms_norm_desc d = {
        .n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = BATON_DTYPE_BF16, .w_dtype = BATON_DTYPE_BF16};
    void *b[4] = {x, w, y, iv};
    baton_rms_norm_fwd(s, b, (const char *)&d, sizeof d);
    /* The status form with no XLA in the process: the reason goes to stderr, nothing launches. */
    void *b2[4] = {x, w, y2, iv};
    baton_rms_norm_fwd_status(s, b2, (const char *)&d, 12, NULL);
    baton_rms_norm_bwd(s, b2, (const char *)&d, 0);
    CK(cudaStreamSynchronize(s));
    uint16_t *hy = host_download(y, (size_t)n * 2);
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t r = 0; r < n1; r++) {
        double ss = 0;
        for (int64_t j = 0; j < n2; j++)
            ss += pow(bf16_to_f32(hx[r * n2 + j]), 2);
        double v = 1.0 / sqrt(ss / n2 + 1e-5);
        for (int64_t j = 0; j < n2; j++)
            ref[r * n2 + j] = bf16_to_f32(hw[j]) * bf16_to_f32(hx[r * n2 + j]) * v;
    }
    double e = test_rel_err(BATON_DTYPE_BF16, hy, ref, n);
    cr_expect_leq(e, test_tolerance(BATON_DTYPE_BF16), "legacy forward: relative error %.3g", e);
    cr_expect(all_poisoned(y2, (size_t)n * 2), "a call with a bad descriptor wrote its output");
    CK(cudaStreamDestroy(s));
    void *f[] = {x, w, y, iv, y2};
    for (int i = 0; i < 5; i++)
        CK(cudaFree(f[i]));
    free(hx);
    free(hw);
    free(hy);
    free(ref);
}
