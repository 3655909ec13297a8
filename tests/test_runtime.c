/* test_runtime.c: the scheduler end to end. Built twice: as test_runtime, on the test device
 * (label cpu), and with TEST_ON_CUDA as test_runtime_cuda, where the same tests run on a real
 * GPU (label gpu; they skip without one). The bundled plans run on the CPU fallback and on the
 * test device (a worker thread that behaves like a GPU stream) in every sync mode and are checked
 * against float64 references written here, independent of the kernels; host waits per run are
 * counted against the analysis; results must be bitwise identical across modes; injected faults
 * fail a run cleanly and the next run succeeds. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "kernels/descriptors.h"
#include "core/dtype.h"
#include "plan/plan_internal.h"
#include "scheduler/testing.h"
#include "tests/support.h"

#ifdef TEST_ON_CUDA
#include <cuda_runtime_api.h>
#define GPU BATON_GPU_CUDA
/* Every test on CUDA first checks that a device exists. */
#define NEED_BACKEND()                                                                             \
    do {                                                                                           \
        if (baton_cuda_device_count() == 0)                                                        \
            cr_skip("no CUDA device: the CUDA variant of the runtime tests needs one");            \
    } while (0)
#define SIM_ONLY() cr_skip("the test device's delays have no CUDA counterpart")
#else
#define GPU            BATON_GPU_SIM
#define NEED_BACKEND() ((void)0)
#define SIM_ONLY()     ((void)0)
#endif

static baton_registry *reg;

/* A kernel that fails while `fail_next` is set: a custom call reporting an error. Its CPU
 * variant first sleeps `slow_us`, to stand for a slow host step. */
static int fail_next;
static int slow_us;

static int test_fail_kernel(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                            size_t len)
{
    if (fail_next) {
        snprintf(ctx->errbuf, ctx->errbuf_len, "custom call reported failure code 42");
        return BATON_EKERNEL;
    }
    if (slow_us && ctx->device.kind == BATON_DEVICE_CPU)
        usleep((useconds_t)slow_us);
    const baton_ew_desc *d = (const void *)opaque;
    memcpy(buffers[1], buffers[0], (size_t)d->n * 4);
    return 0;
}

/* The validator wants a CUDA implementation for a cuda:0 step in CUDA builds. The sim variant
 * calls the CPU one; the CUDA variant copies on the stream, or fails on demand. */
static int test_fail_cuda(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
#ifdef TEST_ON_CUDA
    if (fail_next) {
        snprintf(ctx->errbuf, ctx->errbuf_len, "custom call reported failure code 42");
        return BATON_EKERNEL;
    }
    const baton_ew_desc *d = (const void *)opaque;
    cudaError_t e = cudaMemcpyAsync(buffers[1], buffers[0], (size_t)d->n * 4,
                                    cudaMemcpyDeviceToDevice, (cudaStream_t)ctx->stream);
    if (e != cudaSuccess) {
        snprintf(ctx->errbuf, ctx->errbuf_len, "cudaMemcpyAsync failed: %s", cudaGetErrorString(e));
        return BATON_ECUDA;
    }
    return 0;
#else
    snprintf(ctx->errbuf, ctx->errbuf_len, "test_fail has no real CUDA implementation here");
    return BATON_ENOTSUP;
#endif
}

static int test_fail_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg,
                           size_t len)
{
    if (a->inputs[0].dtype != BATON_DTYPE_F32) {
        snprintf(msg, len, "test_fail takes f32");
        return BATON_EPLAN;
    }
    expected[0] = a->inputs[0];
    return 0;
}

static int test_fail_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    baton_ew_desc d = {.n = baton_tensor_desc_numel(&a->inputs[0]), .dtype = BATON_DTYPE_F32};
    memcpy(opaque, &d, sizeof d);
    return (int)sizeof d;
}

static const baton_target test_fail_target = {
    .struct_size = sizeof(baton_target),
    .name = "test_fail",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 1,
    .n_outputs = 1,
    .summary = "copies f32, or fails on demand",
    .check = test_fail_check,
    .pack = test_fail_pack,
    .impls = {{.device = BATON_DEVICE_CPU, .kernel = test_fail_kernel},
              {.device = BATON_DEVICE_CUDA, .kernel = test_fail_cuda}},
    .n_impls = 2,
};

static void setup(void)
{
    cr_assert_eq(baton_registry_create(&reg), 0);
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, &test_fail_target, &err), 0, "%s", err.message);
    fail_next = 0;
    slow_us = 0;
}

static void teardown(void)
{
    baton_registry_destroy(reg);
}

TestSuite(runtime, .init = setup, .fini = teardown, .timeout = 300);

static baton_plan *load_file(const char *rel)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = baton_plan_load(reg, test_path(rel), &plan, &err);
    cr_assert_eq(rc, 0, "%s: %s", rel, err.message);
    return plan;
}

static baton_plan *load_text(const char *json)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = baton_plan_load_string(reg, json, strlen(json), "test.json", NULL, &plan, &err);
    cr_assert_eq(rc, 0, "%s", err.message);
    return plan;
}

static baton_runtime *make(const baton_plan *p, baton_gpu_backend gpu, baton_sync_mode mode,
                           int delay_us)
{
    return test_runtime(p, gpu, mode, delay_us, 0);
}

static void run_ok(baton_runtime *rt)
{
    baton_error err = {0};
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
}

static void *constant(const baton_plan *p, const char *name)
{
    int t = baton_plan_tensor_index(p, name);
    cr_assert_geq(t, 0);
    void *buf = malloc(p->tensors[t].nbytes);
    baton_error err = {0};
    cr_assert_eq(baton__plan_tensor_materialize(p, t, buf, &err), 0, "%s", err.message);
    return buf;
}

static void *output(baton_runtime *rt, const baton_plan *p, const char *name)
{
    int t = baton_plan_tensor_index(p, name);
    void *buf = malloc(p->tensors[t].nbytes);
    test_poison(buf, p->tensors[t].nbytes);
    baton_error err = {0};
    cr_assert_eq(baton_runtime_get_output(rt, name, buf, p->tensors[t].nbytes, &err), 0, "%s",
                 err.message);
    return buf;
}

static double bf(double v)
{
    return bf16_to_f32(f32_to_bf16((float)v));
}

/* ---- the RFC plan: 8 x [gemm -> rms_norm -> softshrink on the GPU -> add 1 on the CPU] ----- */

/* On a GPU the plan itself; on the test device and the CPU the same plan 256 wide
 * (tests/data/good/rfc-small.json), whose float64 reference and CPU GEMMs take a second, not 25. */
#ifdef TEST_ON_CUDA
#define D        4096
#define RFC_PLAN "examples/plans/rfc.json"
#else
#define D        256
#define RFC_PLAN "tests/data/good/rfc-small.json"
#endif
#define LAYERS 8

/* x8 of the RFC plan in float64, rounding to bf16 wherever the plan stores a tensor. */
static void rfc_reference(const baton_plan *p, const uint16_t *x0, double *x8)
{
    uint16_t *A = constant(p, "A");
    double *x = malloc(D * sizeof *x), *h = malloc(D * sizeof *h);
    for (int j = 0; j < D; j++)
        x[j] = bf16_to_f32(x0[j]);
    for (int l = 0; l < LAYERS; l++) {
        char wn[8];
        snprintf(wn, sizeof wn, "w%d", l);
        uint16_t *w = constant(p, wn);
        for (int j = 0; j < D; j++)
            h[j] = 0;
        for (int k = 0; k < D; k++) {
            double xk = x[k];
            const uint16_t *row = A + (size_t)k * D;
            for (int j = 0; j < D; j++)
                h[j] += xk * bf16_to_f32(row[j]);
        }
        double ss = 0;
        for (int j = 0; j < D; j++) {
            h[j] = bf(h[j]);
            ss += h[j] * h[j];
        }
        double inv = 1.0 / sqrt(ss / D + 1e-5);
        for (int j = 0; j < D; j++) {
            double n = bf(bf16_to_f32(w[j]) * h[j] * inv);
            double s = n > 0.5 ? n - 0.5 : n < -0.5 ? n + 0.5 : 0.0;
            x[j] = bf(bf(s) + 1.0);
        }
        free(w);
    }
    memcpy(x8, x, D * sizeof *x);
    free(A);
    free(x);
    free(h);
}

static void set_random_input(baton_runtime *rt, const baton_plan *p, const char *name, test_rng *r,
                             void **keep)
{
    int t = baton_plan_tensor_index(p, name);
    const plan_tensor *pt = &p->tensors[t];
    void *buf = malloc(pt->nbytes);
    test_fill_random(r, pt->desc.dtype, buf, baton_tensor_desc_numel(&pt->desc), 1.0);
    baton_error err = {0};
    cr_assert_eq(baton_runtime_set_input(rt, name, buf, pt->nbytes, &err), 0, "%s", err.message);
    if (keep)
        *keep = buf;
    else
        free(buf);
}

static void check_rfc(baton_gpu_backend gpu, baton_sync_mode mode, int delay_us, int runs)
{
    baton_plan *p = load_file(RFC_PLAN);
    baton_runtime *rt = make(p, gpu, mode, delay_us);
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    double *ref = malloc(D * sizeof *ref);
    for (int run = 0; run < runs; run++) {
        /* fresh inputs every run: a missing wait would let the CPU read the last run's data */
        void *x0;
        set_random_input(rt, p, "x0", &r, &x0);
        run_ok(rt);
        uint16_t *x8 = output(rt, p, "x8");
        rfc_reference(p, x0, ref);
        double e = test_rel_err(BATON_DTYPE_BF16, x8, ref, D);
        cr_assert_lt(e, 2e-2, "seed %llu, %s mode, run %d: relative error %g",
                     (unsigned long long)seed, baton_sync_mode_name(mode), run, e);
        free(x0);
        free(x8);
    }
    free(ref);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

Test(runtime, rfc_plan_matches_reference_on_the_cpu_fallback)
{
    NEED_BACKEND();
    check_rfc(BATON_GPU_CPU, BATON_SYNC_GRAPH, 0, 1);
}

Test(runtime, rfc_plan_matches_reference_in_every_mode)
{
    NEED_BACKEND();
    for (int m = 0; m < 3; m++)
        check_rfc(GPU, (baton_sync_mode)m, 0, 2);
}

Test(runtime, rfc_plan_waits_where_needed_when_the_device_is_slow)
{
    NEED_BACKEND();
    SIM_ONLY();
    /* each queued operation starts 1 ms late: reading before the wait would see stale data */
    check_rfc(BATON_GPU_SIM, BATON_SYNC_BOUNDARY, 1000, 2);
    check_rfc(BATON_GPU_SIM, BATON_SYNC_GRAPH, 1000, 2);
}

/* ---- the tutorial's forward + backward ------------------------------------------------------ */

Test(runtime, tutorial_plan_matches_reference)
{
    NEED_BACKEND();
    baton_plan *p = load_file("examples/plans/rmsnorm_tutorial.json");
    baton_runtime *rt = make(p, GPU, BATON_SYNC_GRAPH, 0);
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    void *xv, *gv;
    set_random_input(rt, p, "x", &r, &xv);
    set_random_input(rt, p, "grad_y", &r, &gv);
    run_ok(rt);
    const int n1 = 4, n2 = 512 * 512;
    uint16_t *x = xv, *g = gv, *w = constant(p, "weight");
    uint16_t *y = output(rt, p, "y"), *gx = output(rt, p, "grad_x");
    uint16_t *gw = output(rt, p, "grad_weight");
    float *inv = output(rt, p, "invvar");
    double *ry = malloc((size_t)n1 * n2 * sizeof *ry), *rgx = malloc((size_t)n1 * n2 * sizeof *rgx);
    double *rgw = calloc((size_t)n2, sizeof *rgw), rinv[4];
    for (int i = 0; i < n1; i++) {
        double ss = 0, dot = 0;
        for (int j = 0; j < n2; j++) {
            double xv_ = bf16_to_f32(x[(size_t)i * n2 + j]);
            ss += xv_ * xv_;
        }
        rinv[i] = 1.0 / sqrt(ss / n2 + 1e-5);
        for (int j = 0; j < n2; j++) {
            size_t k = (size_t)i * n2 + j;
            double xv_ = bf16_to_f32(x[k]), wv = bf16_to_f32(w[j]), gvv = bf16_to_f32(g[k]);
            ry[k] = wv * xv_ * rinv[i];
            dot += gvv * wv * xv_;
            rgw[j] += gvv * xv_ * rinv[i];
        }
        for (int j = 0; j < n2; j++) {
            size_t k = (size_t)i * n2 + j;
            double xv_ = bf16_to_f32(x[k]), wv = bf16_to_f32(w[j]), gvv = bf16_to_f32(g[k]);
            rgx[k] = rinv[i] * (gvv * wv - xv_ * rinv[i] * rinv[i] * dot / n2);
        }
    }
    cr_assert_lt(test_rel_err(BATON_DTYPE_BF16, y, ry, (int64_t)n1 * n2), 1e-2, "seed %llu",
                 (unsigned long long)seed);
    cr_assert_lt(test_rel_err(BATON_DTYPE_F32, inv, rinv, n1), 1e-5);
    cr_assert_lt(test_rel_err(BATON_DTYPE_BF16, gx, rgx, (int64_t)n1 * n2), 1e-2);
    cr_assert_lt(test_rel_err(BATON_DTYPE_BF16, gw, rgw, n2), 1e-2);
    free(xv), free(gv), free(w), free(y), free(gx), free(gw), free(inv), free(ry), free(rgx);
    free(rgw);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

/* ---- invariants ----------------------------------------------------------------------------- */

static void expect_waits(const char *rel, int gpu_steps, int gpu_to_cpu, int ends_on_gpu,
                         int gpu_segments, int queued_ahead)
{
    baton_plan *p = load_file(rel);
    for (int m = 0; m < 3; m++) {
        baton_runtime *rt = make(p, GPU, (baton_sync_mode)m, 0);
        test_rng r = {test_fresh_seed()};
        for (int t = 0; t < p->n_tensors; t++)
            if (p->tensors[t].role == BATON_ROLE_INPUT)
                set_random_input(rt, p, p->tensors[t].name, &r, NULL);
        run_ok(rt); /* the first run captures in graph mode */
        baton_runtime_reset_stats(rt);
        for (int i = 0; i < 3; i++)
            run_ok(rt);
        baton_run_stats st;
        baton_runtime_stats(rt, &st);
        cr_assert_eq(st.runs, 3);
        long want = m == BATON_SYNC_STRICT ? gpu_steps : gpu_to_cpu + ends_on_gpu;
        cr_assert_eq(st.host_waits, 3 * want, "%s, %s mode: %lld host waits in 3 runs, want %ld",
                     rel, baton_sync_mode_name((baton_sync_mode)m), (long long)st.host_waits,
                     3 * want);
        cr_assert_eq(want, p->n_sync[m], "%s: the analysis promises %d waits in %s mode", rel,
                     p->n_sync[m], baton_sync_mode_name((baton_sync_mode)m));
        cr_assert_eq(st.queued_ahead, m == BATON_SYNC_GRAPH ? 3 * queued_ahead : 0,
                     "%s, %s mode: %lld segments queued ahead in 3 runs", rel,
                     baton_sync_mode_name((baton_sync_mode)m), (long long)st.queued_ahead);
        if (m == BATON_SYNC_GRAPH) {
            cr_assert_eq(st.graph_launches, 3 * gpu_segments);
            cr_assert_eq(st.captures, 0, "a replay must not capture again");
            cr_assert_eq(st.kernel_launches, 0, "a replay issues no single launches");
        } else {
            cr_assert_eq(st.graph_launches, 0);
            cr_assert_eq(st.kernel_launches, 3 * gpu_steps);
        }
        baton_runtime_destroy(rt);
    }
    baton_plan_free(p);
}

Test(runtime, host_waits_per_run_follow_the_sync_mode)
{
    NEED_BACKEND();
    /* the RFC plan's layers 2 to 8 are queued ahead of the CPU step before them */
    expect_waits("examples/plans/rfc.json", 24, 8, 0, 8, 7);
    expect_waits("examples/plans/rmsnorm_chain64.json", 64, 0, 1, 1, 0);
    expect_waits("examples/plans/rmsnorm_tutorial.json", 2, 0, 1, 1, 0);
}

static void *run_outputs(const baton_plan *p, baton_gpu_backend gpu, baton_sync_mode m,
                         uint64_t seed, const char *out)
{
    /* On the test device, a delay before every queued operation: a wait the scheduler misses
     * then shows as a result that differs from the CPU's, instead of passing by luck. */
    baton_runtime *rt = make(p, gpu, m, gpu == BATON_GPU_SIM ? 50 : 0);
    test_rng r = {seed};
    for (int t = 0; t < p->n_tensors; t++)
        if (p->tensors[t].role == BATON_ROLE_INPUT)
            set_random_input(rt, p, p->tensors[t].name, &r, NULL);
    run_ok(rt);
    run_ok(rt);
    void *o = output(rt, p, out);
    baton_runtime_destroy(rt);
    return o;
}

Test(runtime, results_are_bitwise_identical_across_modes)
{
    NEED_BACKEND();
    const char *plans[][2] = {{"examples/plans/rfc.json", "x8"},
                              {"examples/plans/rmsnorm_chain64.json", "h64"},
                              {"examples/plans/rmsnorm_tutorial.json", "grad_weight"}};
    for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
        baton_plan *p = load_file(plans[k][0]);
        uint64_t seed = test_fresh_seed();
        int t = baton_plan_tensor_index(p, plans[k][1]);
        /* The reference: on the test device, the plan run on the CPU alone (the same kernels,
         * called inline with no queue, so no wait can be missing); the test device then runs them
         * on its delayed worker in every mode. On CUDA, strict mode. */
        void *base = run_outputs(p, GPU == BATON_GPU_SIM ? BATON_GPU_CPU : GPU, BATON_SYNC_STRICT,
                                 seed, plans[k][1]);
        for (int m = 0; m < 3; m++) {
            void *o = run_outputs(p, GPU, (baton_sync_mode)m, seed, plans[k][1]);
            cr_assert_eq(memcmp(base, o, p->tensors[t].nbytes), 0, "%s: %s mode differs",
                         plans[k][0], baton_sync_mode_name((baton_sync_mode)m));
            free(o);
        }
        free(base);
        baton_plan_free(p);
    }
}

#ifdef TEST_ON_CUDA
/* RMSNorm forward and backward at a size whose layouts have variants to tune (register rows or
 * bulk copies forward, the stages of the staged backward), part_grad 256. */
static const char *tune_plan =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"tune\",\n"
    " \"tensors\": [\n"
    "  {\"name\": \"x\", \"dtype\": \"bf16\", \"shape\": [16384, 8192], \"role\": \"input\"},\n"
    "  {\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": [8192], \"role\": \"input\"},\n"
    "  {\"name\": \"gy\", \"dtype\": \"bf16\", \"shape\": [16384, 8192], \"role\": \"input\"},\n"
    "  {\"name\": \"y\", \"dtype\": \"bf16\", \"shape\": [16384, 8192], \"role\": \"output\"},\n"
    "  {\"name\": \"inv\", \"dtype\": \"f32\", \"shape\": [16384], \"role\": \"output\"},\n"
    "  {\"name\": \"gx\", \"dtype\": \"bf16\", \"shape\": [16384, 8192], \"role\": \"output\"},\n"
    "  {\"name\": \"gw\", \"dtype\": \"bf16\", \"shape\": [8192], \"role\": \"output\"},\n"
    "  {\"name\": \"pg\", \"dtype\": \"f32\", \"shape\": [256, 8192], \"role\": \"output\"}],\n"
    " \"steps\": [\n"
    "  {\"name\": \"fwd\", \"kernel\": \"rms_norm_fwd\", \"device\": \"cuda:0\", \"inputs\": "
    "[\"x\", \"w\"], \"outputs\": [\"y\", \"inv\"]},\n"
    "  {\"name\": \"bwd\", \"kernel\": \"rms_norm_bwd\", \"device\": \"cuda:0\", \"inputs\": "
    "[\"gy\", \"inv\", \"x\", \"w\"], \"outputs\": [\"gx\", \"gw\", \"pg\"]}]}\n";
#endif

Test(runtime, autotuned_kernels_give_the_same_bits_as_their_defaults)
{
#ifndef TEST_ON_CUDA
    cr_skip("tuning happens on CUDA devices only (test_runtime_cuda)");
#else
    NEED_BACKEND();
    baton_plan *p = load_text(tune_plan);
    const char *outs[] = {"y", "inv", "gx", "gw", "pg"};
    const uint64_t seed = test_fresh_seed();
    void *want[5] = {0};
    for (int tuned = 0; tuned < 2; tuned++)
        for (int m = BATON_SYNC_BOUNDARY; m <= BATON_SYNC_GRAPH; m++) {
            baton_options o;
            baton_options_init(&o);
            o.gpu = BATON_GPU_CUDA;
            o.mode = (baton_sync_mode)m;
            o.quiet = 1;
            o.no_autotune = !tuned;
            baton_runtime *rt = NULL;
            baton_error err = {0};
            cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), 0, "%s", err.message);
            for (int st = 0; st < 2; st++) {
                const char *t = baton_runtime_tuning(rt, st);
                if (tuned) {
                    cr_assert(t != NULL, "step %d: no account of its tuning", st);
                    cr_log_info("%s mode, step %d: %s", baton_sync_mode_name(o.mode), st, t);
                } else {
                    cr_assert(t == NULL, "step %d tuned with no_autotune: %s", st, t);
                }
            }
            cr_assert_null(baton_runtime_tuning(rt, 2));
            cr_assert_null(baton_runtime_tuning(rt, -1));
            test_rng r = {seed};
            for (int t = 0; t < p->n_tensors; t++)
                if (p->tensors[t].role == BATON_ROLE_INPUT)
                    set_random_input(rt, p, p->tensors[t].name, &r, NULL);
            run_ok(rt);
            run_ok(rt);
            for (int k = 0; k < 5; k++) {
                void *o2 = output(rt, p, outs[k]);
                const size_t n = p->tensors[baton_plan_tensor_index(p, outs[k])].nbytes;
                if (!want[k]) {
                    want[k] = o2;
                    continue;
                }
                cr_assert_eq(memcmp(want[k], o2, n), 0, "%s differs (%s, %s mode)", outs[k],
                             tuned ? "autotune" : "no_autotune", baton_sync_mode_name(o.mode));
                free(o2);
            }
            baton_runtime_destroy(rt);
        }
    for (int k = 0; k < 5; k++)
        free(want[k]);
    baton_plan_free(p);
#endif
}

/* ---- faults --------------------------------------------------------------------------------- */

/* The fault tests run on the test device; on a machine with a GPU, only missing_gpu_* would
 * touch CUDA, and it skips there. */
static const char *fail_plan =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"faults\",\n"
    " \"tensors\": [\n"
    "  {\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"input\"},\n"
    "  {\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [64]},\n"
    "  {\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [64]},\n"
    "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"output\"}],\n"
    " \"steps\": [\n"
    "  {\"name\": \"first\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": "
    "[\"x\"], \"outputs\": [\"a\"], \"attrs\": {\"value\": 2}},\n"
    "  {\"name\": \"flaky\", \"kernel\": \"test_fail\", \"device\": \"cuda:0\", \"inputs\": "
    "[\"a\"], \"outputs\": [\"b\"]},\n"
    "  {\"name\": \"last\", \"kernel\": \"add_scalar\", \"device\": \"cpu\", \"inputs\": [\"b\"], "
    "\"outputs\": [\"y\"], \"attrs\": {\"value\": 1}}]}\n";

/* Runs the plan on x = base, base + 1, ... (64 f32) and expects y[i] = want(x[i]) exactly. */
static void expect_run(baton_runtime *rt, float base, float (*want)(float))
{
    float x[64], y[64];
    for (int i = 0; i < 64; i++)
        x[i] = base + (float)i;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0);
    run_ok(rt);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0);
    for (int i = 0; i < 64; i++)
        cr_assert_float_eq(y[i], want(x[i]), 0, "base %g: y[%d] = %g", base, i, y[i]);
}

static float plus_3(float x)
{
    return x + 3.0f;
}

/* fail_plan: y = x + 3 */
static void expect_good_run(baton_runtime *rt, const baton_plan *p, float base)
{
    (void)p;
    expect_run(rt, base, plus_3);
}

Test(runtime, a_failing_custom_call_fails_the_run_and_the_next_run_succeeds)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    for (int m = 0; m < 3; m++) {
        baton_runtime *rt = make(p, GPU, (baton_sync_mode)m, 0);
        expect_good_run(rt, p, 1);
        fail_next = 1;
        baton_runtime_recapture(rt); /* graph mode: the failure must also surface in a capture */
        baton_error err = {0};
        int rc = baton_runtime_run(rt, &err);
        fail_next = 0;
        cr_assert_neq(rc, 0, "%s mode: the run should fail", baton_sync_mode_name(m));
        cr_assert(strstr(err.message, "flaky") && strstr(err.message, "cuda:0") &&
                      strstr(err.message, "code 42"),
                  "%s mode: message lacks step, device or reason: %s", baton_sync_mode_name(m),
                  err.message);
        expect_good_run(rt, p, 10);
        baton_runtime_destroy(rt);
    }
    baton_plan_free(p);
}

Test(runtime, an_injected_launch_or_copy_failure_names_the_step_and_recovers)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    dev_fault faults[] = {DEV_FAULT_LAUNCH, DEV_FAULT_COPY};
    for (int f = 0; f < 2; f++) {
        baton_runtime *rt = make(p, GPU, BATON_SYNC_BOUNDARY, 0);
        expect_good_run(rt, p, 1);
        baton__runtime_inject(rt, 1, faults[f]);
        baton_error err = {0};
        cr_assert_neq(baton_runtime_run(rt, &err), 0);
        cr_assert(strstr(err.message, "cuda:0") && strstr(err.message, "injected"), "%s",
                  err.message);
        if (faults[f] == DEV_FAULT_LAUNCH)
            cr_assert(strstr(err.message, "step 'first'"), "%s", err.message);
        else
            cr_assert(strstr(err.message, "transfer x"), "%s", err.message);
        expect_good_run(rt, p, 5);
        baton_runtime_destroy(rt);
    }
    baton_plan_free(p);
}

/* GPU -> CPU -> GPU -> CPU: in graph mode the second GPU segment is queued before the CPU step
 * "mid" runs, behind the device's gate. */
static const char *gate_plan =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"queue-ahead\",\n"
    " \"tensors\": [\n"
    "  {\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"input\"},\n"
    "  {\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [64]},\n"
    "  {\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [64]},\n"
    "  {\"name\": \"c\", \"dtype\": \"f32\", \"shape\": [64]},\n"
    "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"output\"}],\n"
    " \"steps\": [\n"
    "  {\"name\": \"first\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": "
    "[\"x\"], \"outputs\": [\"a\"], \"attrs\": {\"value\": 2}},\n"
    "  {\"name\": \"mid\", \"kernel\": \"test_fail\", \"device\": \"cpu\", \"inputs\": "
    "[\"a\"], \"outputs\": [\"b\"]},\n"
    "  {\"name\": \"second\", \"kernel\": \"mul\", \"device\": \"cuda:0\", \"inputs\": "
    "[\"b\", \"b\"], \"outputs\": [\"c\"]},\n"
    "  {\"name\": \"last\", \"kernel\": \"add_scalar\", \"device\": \"cpu\", \"inputs\": "
    "[\"c\"], \"outputs\": [\"y\"], \"attrs\": {\"value\": 1}}]}\n";

static float square_of_plus_2_plus_1(float x)
{
    return (x + 2) * (x + 2) + 1;
}

/* gate_plan: y = (x + 2)^2 + 1 for fresh x, or the test fails. */
static void expect_gated_run(baton_runtime *rt, float base)
{
    expect_run(rt, base, square_of_plus_2_plus_1);
}

Test(runtime, a_segment_queued_ahead_waits_for_the_cpu_step_before_it)
{
    NEED_BACKEND();
    baton_plan *p = load_text(gate_plan);
    /* The CPU step takes 2 ms: a segment queued ahead that did not wait for its gate would read
     * b before the CPU step wrote it, and get the last run's value. */
    slow_us = 2000;
    for (int off = 0; off < 2; off++) {
        baton_options o;
        baton_options_init(&o);
        o.gpu = GPU;
        o.quiet = 1;
        o.disable_queue_ahead = off;
        baton_runtime *rt = NULL;
        baton_error err = {0};
        cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), 0, "%s", err.message);
        for (int run = 0; run < 4; run++)
            expect_gated_run(rt, (float)(10 * run));
        baton_run_stats st;
        baton_runtime_stats(rt, &st);
        cr_assert_eq(st.queued_ahead, off ? 0 : 4, "queue-ahead %s: %lld queued in 4 runs",
                     off ? "off" : "on", (long long)st.queued_ahead);
        cr_assert_eq(st.host_waits, 4 * 2, "one wait per GPU -> CPU boundary, queued or not");
        baton_runtime_destroy(rt);
    }
    baton_plan_free(p);
}

Test(runtime, a_cpu_step_failing_behind_a_queued_segment_fails_the_run_and_recovers)
{
    NEED_BACKEND();
    baton_plan *p = load_text(gate_plan);
    baton_runtime *rt = make(p, GPU, BATON_SYNC_GRAPH, GPU == BATON_GPU_SIM ? 200 : 0);
    expect_gated_run(rt, 1);
    /* "mid" fails while "second" waits behind the closed gate: the run must open it, drain the
     * stream and fail; the next runs must be right. */
    fail_next = 1;
    baton_error err = {0};
    int rc = baton_runtime_run(rt, &err);
    fail_next = 0;
    cr_assert_neq(rc, 0, "the run should fail");
    cr_assert(strstr(err.message, "mid") && strstr(err.message, "code 42"), "%s", err.message);
    expect_gated_run(rt, 7);
    expect_gated_run(rt, 8);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

Test(runtime, a_failed_allocation_fails_prepare_cleanly)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    baton_options o;
    baton_options_init(&o);
    o.gpu = GPU;
    baton_runtime *rt = (baton_runtime *)1;
    baton_error err = {0};
    int rc = baton__runtime_create_faulty(p, &o, 1, DEV_FAULT_ALLOC, &rt, &err);
    cr_assert_eq(rc, BATON_ENOMEM);
    cr_assert_null(rt);
    cr_assert(strstr(err.message, "arena") && strstr(err.message, "cuda:0"), "%s", err.message);
    /* and the same plan prepares fine afterwards */
    rt = make(p, GPU, BATON_SYNC_GRAPH, 0);
    expect_good_run(rt, p, 1);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

Test(runtime, a_segment_that_cannot_be_captured_runs_uncaptured_and_says_why_once)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    baton_runtime *rt = make(p, GPU, BATON_SYNC_GRAPH, 0);
    baton__runtime_inject(rt, 1, DEV_FAULT_CAPTURE);
    expect_good_run(rt, p, 1);
    cr_assert_not_null(baton_runtime_note(rt));
    cr_assert(strstr(baton_runtime_note(rt), "without a CUDA graph"), "%s", baton_runtime_note(rt));
    baton_runtime_reset_stats(rt);
    expect_good_run(rt, p, 2);
    baton_run_stats st;
    baton_runtime_stats(rt, &st);
    cr_assert_eq(st.graph_launches, 0);
    cr_assert_eq(st.kernel_launches, 2);
    cr_assert_eq(st.host_waits, 1, "still boundary waits only");
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

Test(runtime, recapture_updates_the_graphs_in_place)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    baton_runtime *rt = make(p, GPU, BATON_SYNC_GRAPH, 0);
    expect_good_run(rt, p, 1);
    baton_runtime_recapture(rt);
    expect_good_run(rt, p, 2);
    baton_run_stats st;
    baton_runtime_stats(rt, &st);
    cr_assert_eq(st.captures, 2);
    cr_assert_eq(st.graph_updates, 1);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

/* ---- binding and fallback ------------------------------------------------------------------- */

Test(runtime, binding_errors_say_what_to_do)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    baton_runtime *rt = make(p, BATON_GPU_CPU, BATON_SYNC_STRICT, 0);
    float buf[64];
    baton_error err = {0};
    cr_assert_eq(baton_runtime_set_input(rt, "x", buf, 10, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "256 bytes"), "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "a", buf, sizeof buf, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "not an input"), "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "b", buf, sizeof buf, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "role\": \"output"), "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "nope", buf, sizeof buf, &err), BATON_ENOENT);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

Test(runtime, missing_gpu_falls_back_or_fails_as_asked)
{
    NEED_BACKEND();
    if (baton_cuda_device_count() > 0)
        cr_skip("a CUDA device is present: the fallback is not taken");
    baton_plan *p = load_text(fail_plan);
    baton_options o;
    baton_options_init(&o);
    o.quiet = 1;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_gpu_backend(rt), BATON_GPU_CPU);
    expect_good_run(rt, p, 3);
    baton_runtime_destroy(rt);
    o.fallback_is_error = 1;
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), BATON_ENODEV);
    cr_assert(strstr(err.message, "step 'first' needs cuda:0"), "%s", err.message);
    o.fallback_is_error = 0;
    o.gpu = BATON_GPU_CUDA;
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), BATON_ENODEV);
    cr_assert_null(rt);
    baton_plan_free(p);
}

Test(runtime, trace_has_a_track_per_device_with_steps_transfers_and_waits)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    baton_runtime *rt = make(p, GPU, BATON_SYNC_BOUNDARY, 0);
    cr_assert_eq(baton_runtime_trace_begin(rt, 1000), 0);
    expect_good_run(rt, p, 1);
    char path[] = "/tmp/baton-trace-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    baton_error err = {0};
    cr_assert_eq(baton_runtime_trace_write(rt, path, &err), 0, "%s", err.message);
    size_t len;
    char *text = test_read_file(path, &len);
    unlink(path);
    cr_assert(strstr(text, "\"name\": \"first\"") && strstr(text, "\"cat\": \"transfer\"") &&
                  strstr(text, "\"cat\": \"wait\"") && strstr(text, "cuda:0: issue and wait") &&
                  strstr(text, "cpu: CPU steps") && strstr(text, "\"args\": {\"run\": 0"),
              "%s", text);
#ifndef TEST_ON_CUDA
    /* the test device's own timeline, from its worker thread */
    cr_assert(strstr(text, "cuda:0 (test device)") && strstr(text, "\"cat\": \"device kernel\""),
              "%s", text);
#endif
    free(text);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

/* ---- misuse of the API ---------------------------------------------------------------------- */

Test(runtime, set_input_and_get_output_refuse_a_null_buffer)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    baton_runtime *rt = make(p, GPU, BATON_SYNC_BOUNDARY, 0);
    baton_error err = {0};
    cr_assert_eq(baton_runtime_set_input(rt, "x", NULL, 64 * sizeof(float), &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "tensor 'x': data is NULL; pass a buffer of 256 bytes"), "%s",
              err.message);
    expect_good_run(rt, p, 1);
    cr_assert_eq(baton_runtime_get_output(rt, "y", NULL, 64 * sizeof(float), &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "tensor 'y': data is NULL"), "%s", err.message);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

Test(runtime, an_output_is_readable_only_after_a_run_that_succeeded)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    /* boundary mode: a CUDA graph would replay the test kernel's launch without calling it, so
     * fail_next could not fail the run */
    baton_runtime *rt = make(p, GPU, BATON_SYNC_BOUNDARY, 0);
    float x[64], y[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)i;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), BATON_ESTATE,
                 "an output before any run read as success");
    cr_assert(strstr(err.message, "output 'y': no run has completed yet"), "%s", err.message);
    /* an input reads back what was set, run or not */
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "x", y, sizeof y, &err), 0, "%s", err.message);
    cr_assert_arr_eq(x, y, sizeof x);
    expect_good_run(rt, p, 1);
    fail_next = 1;
    cr_assert_neq(baton_runtime_run(rt, &err), 0);
    fail_next = 0;
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), BATON_ESTATE);
    cr_assert(strstr(err.message, "the last run failed"), "%s", err.message);
    expect_good_run(rt, p, 5);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

/* An input that was never given a value would make a run compute on whatever its memory held:
 * the run is refused, naming it, until the input is set or bound, or the caller opts in. */
Test(runtime, a_run_refuses_an_input_never_set_unless_asked)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    baton_runtime *rt = make(p, GPU, BATON_SYNC_BOUNDARY, 0);
    baton_error err = {0};
    cr_assert_eq(baton_runtime_run(rt, &err), BATON_ESTATE, "a run on an unset input succeeded");
    cr_assert_eq(err.code, BATON_ESTATE);
    cr_assert(strstr(err.message, "input 'x' was never set") &&
                  strstr(err.message, "baton_runtime_set_input") &&
                  strstr(err.message, "options.allow_unset_inputs"),
              "%s", err.message);
    float y[64];
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), BATON_ESTATE,
                 "a refused run left an output readable");
    /* a buffer bound in its place gives it a value; unbound, the runtime's memory has none */
    float *host = NULL; /* a host buffer a GPU copies from is pinned */
#ifdef TEST_ON_CUDA
    cr_assert_eq(cudaMallocHost((void **)&host, 256), cudaSuccess);
#else
    host = aligned_alloc(BATON_ARENA_ALIGN, 256);
#endif
    for (int i = 0; i < 64; i++)
        host[i] = (float)i;
    baton_buffer b = {{BATON_DEVICE_CPU, 0}, host, 256, BATON_DTYPE_F32};
    int xt = baton_plan_tensor_index(p, "x");
    cr_assert_eq(baton_runtime_bind(rt, xt, &b, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_bind(rt, xt, NULL, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), BATON_ESTATE, "unbound, 'x' has no value again");
    /* set once, it keeps its value for every later run */
    expect_good_run(rt, p, 1);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    baton_runtime_destroy(rt);
#ifdef TEST_ON_CUDA
    cudaFreeHost(host);
#else
    free(host);
#endif
    /* the caller may opt in */
    baton_options o = test_options(GPU, BATON_SYNC_BOUNDARY, 0, 0);
    o.allow_unset_inputs = 1;
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

/* A custom target with only a CPU implementation: y = 2x (f32), test_fail's signature. */
static int cpu_twice_kernel(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                            size_t len)
{
    const baton_ew_desc *d = (const void *)opaque;
    const float *x = buffers[0];
    float *y = buffers[1];
    for (int64_t i = 0; i < d->n; i++)
        y[i] = 2.0f * x[i];
    return 0;
}

static float times_2_plus_4(float x)
{
    return 2.0f * (x + 1.0f) + 2.0f;
}

static char fallback_log[2048];
static void catch_note(void *user, baton_log_level level, const char *message)
{
    (void)user;
    if (level == BATON_LOG_NOTE && strstr(message, "step 'twice'"))
        snprintf(fallback_log, sizeof fallback_log, "%s", message);
}

/* One rule in every build (docs/embedding.md §3): a cuda:0 step whose target has only a CPU
 * implementation loads and runs on the CPU, that step alone, between GPU steps; where CUDA is
 * built in, the runtime notes it (a CPU-only build runs every cuda:N step on the CPU). */
Test(runtime, a_cpu_only_target_on_a_gpu_falls_back_to_the_cpu_for_its_step)
{
    NEED_BACKEND();
    baton_target t = test_fail_target;
    t.name = "cpu_twice";
    t.impls[0].kernel = cpu_twice_kernel;
    t.n_impls = 1;
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
    baton_plan *p = load_text(
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"fallback\",\n"
        " \"tensors\": [\n"
        "  {\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"input\"},\n"
        "  {\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [64]},\n"
        "  {\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [64]},\n"
        "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"output\"}],\n"
        " \"steps\": [\n"
        "  {\"name\": \"first\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": "
        "[\"x\"], \"outputs\": [\"a\"], \"attrs\": {\"value\": 1}},\n"
        "  {\"name\": \"twice\", \"kernel\": \"cpu_twice\", \"device\": \"cuda:0\", \"inputs\": "
        "[\"a\"], \"outputs\": [\"b\"]},\n"
        "  {\"name\": \"last\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": "
        "[\"b\"], \"outputs\": [\"y\"], \"attrs\": {\"value\": 2}}]}\n");
    baton_step_info si;
    cr_assert_eq(baton_plan_step_info(p, 1, &si), 0);
    cr_expect_eq(si.device.kind, baton_cuda_built() ? BATON_DEVICE_CPU : BATON_DEVICE_CUDA,
                 "the fallback step is placed on %s",
                 si.device.kind == BATON_DEVICE_CPU ? "cpu" : "cuda");
    const baton_gpu_backend backends[] = {GPU, BATON_GPU_CPU};
    for (int b = 0; b < 2; b++)
        for (int m = 0; m < 3; m++) {
            baton_options o = test_options(backends[b], (baton_sync_mode)m, 0, 0);
            o.quiet = 0;
            fallback_log[0] = 0;
            baton_log_set(catch_note, NULL);
            baton_runtime *rt = NULL;
            int rc = baton_runtime_create(p, &o, &rt, &err);
            baton_log_set(NULL, NULL);
            cr_assert_eq(rc, 0, "%s", err.message);
            if (baton_cuda_built())
                cr_expect(strstr(fallback_log, "step 'twice' runs on the CPU, not cuda:0") &&
                              strstr(fallback_log, "has only a CPU implementation"),
                          "no note of the fallback: '%s'", fallback_log);
            expect_run(rt, 1.0f, times_2_plus_4);
            expect_run(rt, -40.0f, times_2_plus_4);
            baton_runtime_destroy(rt);
        }
    baton_plan_free(p);
}

Test(runtime, create_refuses_options_out_of_range_naming_the_field)
{
    baton_plan *p = load_text(fail_plan);
    struct {
        int mode, gpu, delay;
        const char *want;
    } bad[] = {
        {BATON_SYNC_GRAPH, 9, 0,
         "options.gpu is 9; use BATON_GPU_AUTO, BATON_GPU_CUDA, "
         "BATON_GPU_CPU or BATON_GPU_SIM"},
        {BATON_SYNC_GRAPH, -1, 0, "options.gpu is -1"},
        {7, BATON_GPU_SIM, 0, "options.mode is 7; use BATON_SYNC_STRICT"},
        {BATON_SYNC_GRAPH, BATON_GPU_SIM, -5,
         "options.sim_delay_us is -5; use 0 (no delay) to "
         "1000000 microseconds"},
        {BATON_SYNC_GRAPH, BATON_GPU_SIM, 2000000000, "options.sim_delay_us is 2000000000"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        baton_options o;
        baton_options_init(&o);
        o.mode = (baton_sync_mode)bad[i].mode;
        o.gpu = (baton_gpu_backend)bad[i].gpu;
        o.sim_delay_us = bad[i].delay;
        o.quiet = 1;
        baton_runtime *rt = (baton_runtime *)1;
        baton_error err = {0};
        cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), BATON_EINVAL, "case %zu accepted", i);
        cr_assert_null(rt);
        cr_assert(strstr(err.message, bad[i].want), "case %zu: %s", i, err.message);
    }
    baton_plan_free(p);
}

Test(runtime, the_cpu_fallback_counts_no_launches_and_no_device_transfers)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    for (int m = 0; m < 3; m++) {
        baton_runtime *rt = make(p, BATON_GPU_CPU, (baton_sync_mode)m, 0);
        expect_good_run(rt, p, 1);
        expect_good_run(rt, p, 2);
        baton_run_stats st;
        baton_runtime_stats(rt, &st);
        const char *mode = baton_sync_mode_name((baton_sync_mode)m);
        cr_assert_eq(st.runs, 2);
        cr_assert_eq(st.steps, 6, "%s mode: %lld steps", mode, (long long)st.steps);
        cr_assert_eq(st.kernel_launches, 0, "%s mode: %lld launches on the CPU fallback", mode,
                     (long long)st.kernel_launches);
        cr_assert_eq(st.bytes_h2d + st.bytes_d2h + st.bytes_d2d, 0,
                     "%s mode: %lld bytes h2d, %lld d2h that never left the host", mode,
                     (long long)st.bytes_h2d, (long long)st.bytes_d2h);
        cr_assert_eq(st.host_waits + st.graph_launches + st.captures, 0);
        baton_runtime_destroy(rt);
    }
    /* on a device, the same plan moves x in and b out each run and launches two steps */
    baton_runtime *rt = make(p, GPU, BATON_SYNC_BOUNDARY, 0);
    expect_good_run(rt, p, 1);
    baton_run_stats st;
    baton_runtime_stats(rt, &st);
    cr_assert_eq(st.kernel_launches, 2);
    cr_assert_eq(st.bytes_h2d, 256);
    cr_assert_eq(st.bytes_d2h, 256);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

/* ---- lifetimes ------------------------------------------------------------------------------ */

static const char *two_device_plan =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"lifetimes\",\n"
    " \"tensors\": [\n"
    "  {\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"input\"},\n"
    "  {\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [64]},\n"
    "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"output\"}],\n"
    " \"steps\": [\n"
    "  {\"name\": \"first\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": "
    "[\"x\"], \"outputs\": [\"a\"], \"attrs\": {\"value\": 2}},\n"
    "  {\"name\": \"last\", \"kernel\": \"add_scalar\", \"device\": \"cpu\", \"inputs\": [\"a\"], "
    "\"outputs\": [\"y\"], \"attrs\": {\"value\": 1}}]}\n";

/* Run under ASan (CI does) this is what proves the point: before reference counts, freeing the
 * registry and the plan first made every later call a use after free. */
Test(runtime, a_runtime_keeps_its_plan_and_registry_alive)
{
    NEED_BACKEND();
    for (int m = 0; m < 3; m++) {
        baton_registry *own = NULL;
        cr_assert_eq(baton_registry_create(&own), 0);
        baton_plan *p = NULL;
        baton_error err = {0};
        cr_assert_eq(baton_plan_load_string(own, two_device_plan, strlen(two_device_plan),
                                            "lifetimes.json", NULL, &p, &err),
                     0, "%s", err.message);
        baton_registry_destroy(own); /* the plan still holds it */
        baton_runtime *rt = make(p, GPU, (baton_sync_mode)m, 0);
        baton_plan_free(p); /* the runtime still holds it */
        expect_good_run(rt, NULL, 1);
        expect_good_run(rt, NULL, 7);
        cr_assert_eq(baton_runtime_mode(rt), (baton_sync_mode)m);
        baton_runtime_destroy(rt); /* frees the plan, then the registry */
    }
}

Test(runtime, runtimes_of_one_plan_release_it_in_any_order)
{
    NEED_BACKEND();
    baton_plan *p = load_text(fail_plan);
    baton_runtime *a = make(p, GPU, BATON_SYNC_GRAPH, 0);
    baton_runtime *b = make(p, BATON_GPU_CPU, BATON_SYNC_STRICT, 0);
    baton_plan_free(p);
    expect_good_run(a, NULL, 1);
    baton_runtime_destroy(a);
    expect_good_run(b, NULL, 2); /* the plan lives on in b */
    baton_runtime_destroy(b);
}

static void *run_and_destroy(void *arg)
{
    baton_runtime *rt = arg;
    for (int i = 0; i < 20; i++)
        expect_good_run(rt, NULL, (float)i);
    baton_runtime_destroy(rt); /* one of these frees the plan and the registry */
    return NULL;
}

Test(runtime, runtimes_destroyed_in_several_threads_release_the_plan_once)
{
    NEED_BACKEND();
    baton_registry *own = NULL;
    cr_assert_eq(baton_registry_create(&own), 0);
    baton_plan *p = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_plan_load_string(own, two_device_plan, strlen(two_device_plan),
                                        "lifetimes.json", NULL, &p, &err),
                 0, "%s", err.message);
    pthread_t th[4];
    baton_runtime *rts[4];
    for (int i = 0; i < 4; i++)
        rts[i] = make(p, i % 2 ? GPU : BATON_GPU_CPU, (baton_sync_mode)(i % 3), 0);
    baton_plan_free(p);
    baton_registry_destroy(own);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, run_and_destroy, rts[i]), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
}

/* ---- a delegate with many inputs ---------------------------------------------------------- */

#define WIDE_N 20

static int wide_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t len)
{
    expected[0] = a->inputs[0];
    return 0;
}

/* Checks that init sees all WIDE_N inputs: f32[64], constants at odd positions. */
static int wide_init(const baton_delegate_init *info, void **state, baton_error *err)
{
    *state = NULL;
    if (info->sig->n_inputs != WIDE_N)
        return baton__err_set(err, BATON_EKERNEL, "n_inputs %d", info->sig->n_inputs);
    for (int k = 0; k < WIDE_N; k++) {
        const baton_tensor_desc *d = &info->sig->inputs[k];
        if (d->dtype != BATON_DTYPE_F32 || d->rank != 1 || d->shape[0] != 64 ||
            info->input_constant[k] != (k % 2))
            return baton__err_set(err, BATON_EKERNEL, "input %d seen wrong", k);
    }
    return 0;
}

static int wide_execute(void *state, const baton_exec_ctx *ctx, void **buffers)
{
    float *y = buffers[WIDE_N];
    for (int i = 0; i < 64; i++) {
        y[i] = 0;
        for (int k = 0; k < WIDE_N; k++)
            y[i] += ((const float *)buffers[k])[i];
    }
    return 0;
}

Test(runtime, a_delegate_with_more_than_16_inputs_sees_every_one)
{
    static const baton_delegate_iface wide_iface = {
        .struct_size = sizeof(baton_delegate_iface), .init = wide_init, .execute = wide_execute};
    baton_target t = {.struct_size = sizeof(baton_target),
                      .name = "wide_sum",
                      .kind = BATON_TARGET_DELEGATE,
                      .n_inputs = WIDE_N,
                      .n_outputs = 1,
                      .summary = "y = the sum of 20 inputs",
                      .check = wide_check,
                      .impls = {{.device = BATON_DEVICE_CPU, .delegate = &wide_iface}},
                      .n_impls = 1};
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
    char json[8192], *w = json, *end = json + sizeof json;
    w +=
        snprintf(w, (size_t)(end - w),
                 "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"wide\", \"tensors\": [");
    for (int k = 0; k < WIDE_N; k++)
        w += snprintf(w, (size_t)(end - w),
                      k % 2 ? "{\"name\": \"x%d\", \"dtype\": \"f32\", \"shape\": [64], \"role\": "
                              "\"constant\", \"init\": {\"kind\": \"fill\", \"value\": %d}},"
                            : "{\"name\": \"x%d\", \"dtype\": \"f32\", \"shape\": [64], \"role\": "
                              "\"input\"},",
                      k, k);
    w += snprintf(w, (size_t)(end - w),
                  "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"output\"}], "
                  "\"steps\": [{\"name\": \"sum\", \"delegate\": \"wide_sum\", \"device\": "
                  "\"cpu\", \"inputs\": [");
    for (int k = 0; k < WIDE_N; k++)
        w += snprintf(w, (size_t)(end - w), "%s\"x%d\"", k ? ", " : "", k);
    snprintf(w, (size_t)(end - w), "], \"outputs\": [\"y\"]}]}");
    baton_plan *p = load_text(json);
    baton_runtime *rt = make(p, BATON_GPU_CPU, BATON_SYNC_BOUNDARY, 0);
    float x[64], y[64], want = 0;
    for (int k = 0; k < WIDE_N; k++) {
        char name[8];
        snprintf(name, sizeof name, "x%d", k);
        for (int i = 0; i < 64; i++)
            x[i] = (float)(100 * k);
        if (k % 2 == 0)
            cr_assert_eq(baton_runtime_set_input(rt, name, x, sizeof x, &err), 0, "%s",
                         err.message);
        want += k % 2 ? (float)k : (float)(100 * k);
    }
    run_ok(rt);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0, "%s", err.message);
    for (int i = 0; i < 64; i++)
        cr_assert_float_eq(y[i], want, 0, "y[%d] = %g, want %g", i, y[i], want);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
}

/* A second thread's run of a runtime that is running is refused at once (BATON_ESTATE), not run
 * over the first one's arenas (issue 38); the first run is unharmed and the runtime stays usable.
 */
typedef struct concurrent_run {
    baton_runtime *rt;
    int rc;
    baton_error err;
} concurrent_run;

static void *run_in_thread(void *arg)
{
    concurrent_run *c = arg;
    c->rc = baton_runtime_run(c->rt, &c->err);
    return NULL;
}

Test(runtime, a_concurrent_run_of_one_runtime_is_refused)
{
    const char *text =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"slow\", \"tensors\": ["
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"},"
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}],"
        "\"steps\": [{\"name\": \"s\", \"kernel\": \"test_fail\", \"device\": \"cpu\", "
        "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}]}";
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(baton_plan_load_string(reg, text, strlen(text), "slow.json", NULL, &plan, &err), 0,
                 "%s", err.message);
    baton_runtime *rt = test_runtime(plan, BATON_GPU_CPU, BATON_SYNC_STRICT, 0, 0);
    const float x[4] = {1, 2, 3, 4};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0);
    slow_us = 400000; /* the first run sleeps in its step */
    concurrent_run first = {.rt = rt};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, run_in_thread, &first), 0);
    usleep(100000);
    int rc = baton_runtime_run(rt, &err);
    pthread_join(th, NULL);
    slow_us = 0;
    cr_expect_eq(rc, BATON_ESTATE, "the second run: %d (%s)", rc, err.message);
    cr_expect(strstr(err.message, "already running"), "%s", err.message);
    cr_expect_eq(first.rc, 0, "the first run: %s", first.err.message);
    cr_expect_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    float y[4];
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0);
    cr_expect_eq(memcmp(x, y, sizeof y), 0);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}
