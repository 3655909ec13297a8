/* test_errors.c: one error family. A failing step is named once, with its target and device, in
 * the same words whether the step ran on the CPU or on the test device, and with the code the
 * header gives (BATON_EKERNEL for a kernel that refused its arguments); every public entry point
 * that takes a baton_error leaves it cleared on success, whatever it held before. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "baton/baton.h"
#include "baton/baton_uv.h"
#include "tests/support.h"

/* A step whose kernel refuses its descriptor at run time. baton's own targets now refuse a bad
 * "opaque" at load time, so "copy" is replaced (below) by a target whose check accepts any bytes
 * and whose kernel refuses a 1-byte descriptor, as a plugin's might. */
static const char *bad_plan =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"bad-descriptor\", \"tensors\": ["
    "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [8], \"role\": \"input\"},"
    "{\"name\": \"h\", \"dtype\": \"f32\", \"shape\": [8]},"
    "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [8], \"role\": \"output\"}],"
    "\"steps\": ["
    "{\"name\": \"first\", \"kernel\": \"noop\", \"device\": \"cuda:0\", \"inputs\": [\"x\"], "
    "\"outputs\": [\"h\"]},"
    "{\"name\": \"broken\", \"kernel\": \"copy\", \"device\": \"cuda:0\", \"inputs\": [\"h\"], "
    "\"outputs\": [\"y\"], \"opaque\": \"00\"}]}";

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static int any_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t len)
{
    (void)msg, (void)len;
    expected[0] = a->inputs[0];
    return 0;
}

static int refusing_copy(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    (void)buffers, (void)opaque;
    snprintf(ctx->errbuf, ctx->errbuf_len, "copy: the descriptor is %zu bytes but must be 32", len);
    return BATON_EINVAL;
}

static void run_bad(baton_gpu_backend gpu, baton_sync_mode mode, baton_error *err, int *rc)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_runtime *rt = NULL;
    baton_error e = {0};
    cr_assert_eq(baton_registry_create(&reg), 0);
    baton_target t = *baton_registry_find(reg, "copy");
    t.check = any_check;
    t.pack = NULL;
    t.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CPU, .kernel = refusing_copy};
    t.n_impls = 1;
    cr_assert_eq(baton_registry_replace(reg, &t, &e), 0, "%s", e.message);
    cr_assert_eq(
        baton_plan_load_string(reg, bad_plan, strlen(bad_plan), "bad.json", NULL, &plan, &e), 0,
        "%s", e.message);
    baton_options o;
    baton_options_init(&o);
    o.gpu = gpu;
    o.mode = mode;
    o.quiet = 1;
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &e), 0, "%s", e.message);
    float x[8] = {0};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &e), 0);
    *rc = baton_runtime_run(rt, err);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
}

Test(errors, a_bad_descriptor_reads_the_same_on_the_cpu_and_the_test_device)
{
    for (int m = 0; m < 3; m++) {
        baton_error on_cpu = {0}, on_sim = {0};
        int rc_cpu, rc_sim;
        run_bad(BATON_GPU_CPU, (baton_sync_mode)m, &on_cpu, &rc_cpu);
        run_bad(BATON_GPU_SIM, (baton_sync_mode)m, &on_sim, &rc_sim);
        const char *mode = baton_sync_mode_name((baton_sync_mode)m);
        cr_expect_eq(rc_cpu, BATON_EKERNEL, "%s, cpu: %s", mode, baton_strerror(rc_cpu));
        cr_expect_eq(rc_sim, BATON_EKERNEL, "%s, sim: %s", mode, baton_strerror(rc_sim));
        cr_expect_eq(on_cpu.code, rc_cpu);
        cr_expect_str_eq(on_cpu.message, on_sim.message, "%s mode:\n  cpu: %s\n  sim: %s", mode,
                         on_cpu.message, on_sim.message);
        cr_expect_eq(count(on_cpu.message, "broken"), 1, "the step is named %d times: %s",
                     count(on_cpu.message, "broken"), on_cpu.message);
        /* The replaced copy has only a CPU implementation. A CUDA build moves the cuda:0 step to
         * the CPU (the per-step fallback) and names the CPU; a CPU-only build runs the step as
         * cuda:0 on its CPU backend and names cuda:0. */
        const char *on_gpu = "step 'broken' (kernel 'copy' on cuda:0): ";
        const char *moved = "step 'broken' (kernel 'copy' on cpu): ";
        const char *want = baton_cuda_built() ? moved : on_gpu;
        cr_expect(strstr(on_cpu.message, want) == on_cpu.message,
                  "the message does not start with '%s': %s", want, on_cpu.message);
        cr_expect(strstr(on_cpu.message, "descriptor") != NULL, "no reason: %s", on_cpu.message);
    }
}

#define JUNK(e)                                                                                    \
    do {                                                                                           \
        (e).code = -99;                                                                            \
        snprintf((e).message, sizeof(e).message, "junk from an earlier call");                     \
    } while (0)

#define EXPECT_CLEARED(call, e)                                                                    \
    do {                                                                                           \
        JUNK(e);                                                                                   \
        int rc_ = (call);                                                                          \
        cr_expect_eq(rc_, 0, "%s failed: %s", #call, (e).message);                                 \
        cr_expect_eq((e).code, 0, "%s left code %d", #call, (e).code);                             \
        cr_expect_str_empty((e).message, "%s left '%s'", #call, (e).message);                      \
    } while (0)

static int noop_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t len)
{
    expected[0] = a->inputs[0];
    return 0;
}

static int noop_kernel(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return 0;
}

static void on_done(baton_job *job, int status)
{
    (void)job;
    (void)status;
}

static void on_closed(void *arg)
{
    (void)arg;
}

Test(errors, every_entry_point_clears_err_on_success)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL, *plan2 = NULL;
    baton_runtime *rt = NULL;
    baton_error e;
    cr_assert_eq(baton_registry_create(&reg), 0);
    baton_target t = {.struct_size = sizeof(baton_target),
                      .name = "my_noop",
                      .kind = BATON_TARGET_KERNEL,
                      .n_inputs = 1,
                      .n_outputs = 1,
                      .check = noop_check,
                      .impls = {{.device = BATON_DEVICE_CPU, .kernel = noop_kernel}},
                      .n_impls = 1};
    EXPECT_CLEARED(baton_registry_add(reg, &t, &e), e);
    EXPECT_CLEARED(baton_registry_replace(reg, &t, &e), e);
    const char *good =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"g\", \"tensors\": ["
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"},"
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}],"
        "\"steps\": [{\"name\": \"s\", \"kernel\": \"add_scalar\", \"device\": "
        "\"cuda:0\", \"inputs\": [\"x\"], \"outputs\": [\"y\"], \"attrs\": "
        "{\"value\": 2}}]}";
    EXPECT_CLEARED(baton_plan_load_string(reg, good, strlen(good), "g.json", NULL, &plan, &e), e);
    EXPECT_CLEARED(baton_plan_load(reg, test_path("tests/data/good/minimal.json"), &plan2, &e), e);
    baton_options o;
    baton_options_init(&o);
    o.gpu = BATON_GPU_SIM;
    EXPECT_CLEARED(baton_runtime_create(plan, &o, &rt, &e), e);
    float x[4] = {1, 2, 3, 4}, y[4];
    EXPECT_CLEARED(baton_runtime_set_input(rt, "x", x, sizeof x, &e), e);
    cr_assert_eq(baton_runtime_trace_begin(rt, 64), 0);
    EXPECT_CLEARED(baton_runtime_run(rt, &e), e);
    EXPECT_CLEARED(baton_runtime_get_output(rt, "y", y, sizeof y, &e), e);
    char dir[] = "/tmp/baton_errors_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    EXPECT_CLEARED(baton_runtime_trace_write(rt, path, &e), e);
    unlink(path);
    snprintf(path, sizeof path, "%s/y.npy", dir);
    baton_tensor_desc d = {.dtype = BATON_DTYPE_F32, .rank = 1, .shape = {4}};
    EXPECT_CLEARED(baton_npy_write(path, &d, y, &e), e);
    void *data = NULL;
    EXPECT_CLEARED(baton_npy_read(path, &d, &data, &e), e);
    free(data);
    unlink(path);
    rmdir(dir);
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    EXPECT_CLEARED(baton_pool_create(&loop, plan, &o, 1, &pool, &e), e);
    baton_pool_close(pool, on_closed, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0);
    (void)on_done;
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_plan_free(plan2);
    baton_registry_destroy(reg);
}

/* Without a GPU (or without CUDA in the build) the busy fraction says why it cannot be had, and
 * an end without a begin is a state error either way. */
Test(errors, the_gpu_busy_fraction_without_a_gpu_says_why)
{
    baton_error err = {0};
    double f = 0.5;
    cr_expect_eq(baton_gpu_busy_end(&f, &err), BATON_ESTATE);
    cr_expect_eq(f, 0.0);
    cr_expect(strstr(err.message, "baton_gpu_busy_begin") != NULL, "%s", err.message);
    /* a device's part: its range is checked first, in every build */
    int64_t work = 7;
    cr_expect_eq(baton_gpu_busy_device(BATON_BUSY_MAX_DEVICES, &f, &work, &err), BATON_EINVAL);
    cr_expect(strstr(err.message, "device 16") != NULL, "%s", err.message);
    cr_expect_eq(baton_gpu_busy_device(-1, NULL, NULL, &err), BATON_EINVAL);
    cr_expect_eq(work, 0);
    if (baton_cuda_device_count() > 0)
        cr_skip("a CUDA device is present: test_device_cuda measures the fraction");
    cr_expect_eq(baton_gpu_busy_begin(&err), BATON_ENOTSUP);
    cr_expect(strstr(err.message, "GPU busy fraction") != NULL, "%s", err.message);
    cr_expect_eq(baton_gpu_busy_device(0, &f, &work, &err), BATON_ESTATE, "%s", err.message);
}
