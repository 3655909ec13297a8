/* test_tutorial_interfaces.c: the JAX tutorial's interfaces, exactly. part_grad may be declared as
 * the tutorial's abstract evaluation declares it, [P, numel(weight)], with P taken from the
 * declaration when the part_grad_size attribute is absent (and a disagreeing attribute is a clear
 * error); argmax takes the same dtypes on every device kind. Runs on the CPU here and, when a CUDA
 * device is present, on cuda:0 too (the same checks, bitwise against the CPU). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/descriptors.h"
#include "tests/support.h"

static baton_registry *reg;

static void setup(void)
{
    cr_assert_eq(baton_registry_create(&reg), 0);
}

static void teardown(void)
{
    baton_registry_destroy(reg);
}

TestSuite(tutorial, .init = setup, .fini = teardown);

/* The backward of x [n1a, 3, 7] f32 with weight [3, 7]: part_grad declared `pg_shape`, with an
 * optional part_grad_size attribute (`attr` < 0: none). */
static int load_bwd(const char *device, int n1a, const char *pg_shape, int attr, baton_plan **plan,
                    baton_error *err)
{
    char attrs[64] = "";
    if (attr >= 0)
        snprintf(attrs, sizeof attrs, ", \"part_grad_size\": %d", attr);
    char json[4096];
    snprintf(
        json, sizeof json,
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"tutorial_pg\",\n"
        " \"tensors\": [\n"
        "  {\"name\": \"g\", \"dtype\": \"f32\", \"shape\": [%d, 3, 7], \"role\": \"input\"},\n"
        "  {\"name\": \"inv\", \"dtype\": \"f32\", \"shape\": [%d], \"role\": \"input\"},\n"
        "  {\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [%d, 3, 7], \"role\": \"input\"},\n"
        "  {\"name\": \"w\", \"dtype\": \"f32\", \"shape\": [3, 7], \"role\": \"input\"},\n"
        "  {\"name\": \"dx\", \"dtype\": \"f32\", \"shape\": [%d, 3, 7], \"role\": \"output\"},\n"
        "  {\"name\": \"dw\", \"dtype\": \"f32\", \"shape\": [3, 7], \"role\": \"output\"},\n"
        "  {\"name\": \"pg\", \"dtype\": \"f32\", \"shape\": %s, \"role\": \"output\"}],\n"
        " \"steps\": [{\"name\": \"bwd\", \"kernel\": \"rms_norm_bwd\", \"device\": \"%s\",\n"
        "   \"inputs\": [\"g\", \"inv\", \"x\", \"w\"], \"outputs\": [\"dx\", \"dw\", \"pg\"],\n"
        "   \"attrs\": {\"eps\": 1e-5%s}}]}\n",
        n1a, n1a, n1a, n1a, pg_shape, device, attrs);
    return baton_plan_load_string(reg, json, strlen(json), "tutorial_pg.json", NULL, plan, err);
}

static baton_gpu_backend backend_for(const char *device)
{
    return strcmp(device, "cpu") == 0 ? BATON_GPU_CPU : BATON_GPU_CUDA;
}

/* Runs the backward and checks grad_weight against a float64 reference and part_grad's P rows
 * (blocks of ceil(n1 / P) rows; the rows past the data hold zeros). */
static void run_and_check(const char *device, int n1a, const char *pg_shape, int attr, int p,
                          float *pg_out)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = load_bwd(device, n1a, pg_shape, attr, &plan, &err);
    cr_assert_eq(rc, 0, "%s: %s", pg_shape, err.message);
    baton_options o;
    baton_options_init(&o);
    o.gpu = backend_for(device);
    o.quiet = 1;
    baton_runtime *rt = NULL;
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), 0, "%s", err.message);

    const int rows = n1a, cols = 21; /* x [n1a, 3, 7] over w [3, 7]: n1a rows of 21 */
    test_rng r = {test_fresh_seed()};
    float *g = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * rows * cols);
    float w[21], inv[64];
    test_fill_random(&r, BATON_DTYPE_F32, g, rows * cols, 1.0);
    test_fill_random(&r, BATON_DTYPE_F32, x, rows * cols, 1.0);
    test_fill_random(&r, BATON_DTYPE_F32, w, cols, 1.0);
    for (int i = 0; i < rows; i++)
        inv[i] = (float)(0.5 + test_rng_uniform(&r));
    cr_assert_eq(baton_runtime_set_input(rt, "g", g, sizeof(float) * rows * cols, &err), 0, "%s",
                 err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "inv", inv, sizeof(float) * rows, &err), 0);
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof(float) * rows * cols, &err), 0);
    cr_assert_eq(baton_runtime_set_input(rt, "w", w, sizeof w, &err), 0);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);

    float dw[21];
    test_poison(dw, sizeof dw);
    test_poison(pg_out, sizeof(float) * (size_t)p * cols);
    cr_assert_eq(baton_runtime_get_output(rt, "dw", dw, sizeof dw, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "pg", pg_out, sizeof(float) * (size_t)p * cols, &err),
                 0, "%s", err.message);
    double ref[21] = {0};
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            ref[j] += (double)g[i * cols + j] * x[i * cols + j] * inv[i];
    cr_expect_lt(test_rel_err(BATON_DTYPE_F32, dw, ref, cols), 1e-5, "grad_weight");
    /* part_grad: P row blocks of ceil(rows / P) rows each */
    int per = (rows + p - 1) / p;
    for (int b = 0; b < p; b++)
        for (int j = 0; j < cols; j++) {
            double want = 0;
            for (int i = b * per; i < rows && i < (b + 1) * per; i++)
                want += (double)g[i * cols + j] * x[i * cols + j] * inv[i];
            cr_expect(fabs(pg_out[b * cols + j] - want) <= 1e-5 * (1 + fabs(want)),
                      "part_grad[%d][%d] = %g, want %g", b, j, pg_out[b * cols + j], want);
        }
    free(g);
    free(x);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

static const char *devices[] = {"cpu", "cuda:0"};

static int device_usable(const char *device)
{
    return strcmp(device, "cpu") == 0 || test_cuda_devices() > 0;
}

Test(tutorial, part_grad_declared_p_by_n2_takes_p_from_the_declaration)
{
    /* The tutorial's abstract evaluation: part_grad (16, n2); 5 rows, so blocks 5..15 are zero. */
    float pg[16 * 21];
    for (int d = 0; d < 2; d++) {
        if (!device_usable(devices[d]))
            continue;
        run_and_check(devices[d], 5, "[16, 21]", -1, 16, pg);
        for (int i = 5 * 21; i < 16 * 21; i++)
            cr_expect_eq(pg[i], 0.0f, "%s: part_grad row %d past the data is not zero", devices[d],
                         i / 21);
    }
}

Test(tutorial, part_grad_declared_p_by_n2_with_an_agreeing_attribute_loads)
{
    float pg[4 * 21];
    run_and_check("cpu", 9, "[4, 21]", 4, 4, pg);
}

Test(tutorial, part_grad_declared_with_the_weight_shape_takes_p_from_the_declaration)
{
    float pg[3 * 21];
    run_and_check("cpu", 9, "[3, 3, 7]", -1, 3, pg);
}

Test(tutorial, part_grad_attribute_that_disagrees_with_the_declaration_is_a_clear_error)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = load_bwd("cpu", 5, "[16, 21]", 8, &plan, &err);
    cr_assert_eq(rc, BATON_EPLAN, "rc %d: %s", rc, err.message);
    cr_assert_null(plan);
    /* the file, the step, the tensor, both values and the fix */
    cr_expect(strstr(err.message, "tutorial_pg.json:") != NULL, "no file in: %s", err.message);
    cr_expect(strstr(err.message, "step 'bwd'") != NULL, "no step in: %s", err.message);
    cr_expect(strstr(err.message, "part_grad_size is 8 but part_grad 'pg' is declared [16, 21], "
                                  "with 16 rows") != NULL,
              "message does not say what disagrees: %s", err.message);
    cr_expect(strstr(err.message, "set \"part_grad_size\": 16") != NULL &&
                  strstr(err.message, "declare 'pg' as [8, 21]") != NULL,
              "message gives no fix: %s", err.message);
}

Test(tutorial, part_grad_of_another_shape_names_both_forms)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = load_bwd("cpu", 5, "[16, 20]", -1, &plan, &err);
    cr_assert_eq(rc, BATON_EPLAN, "rc %d: %s", rc, err.message);
    cr_expect(strstr(err.message, "f32[16,20]") != NULL, "%s", err.message);
}

/* ---- argmax on integers ---- */

static void argmax_ints(baton_dtype dt)
{
    enum { N1 = 3, N2 = 5 };
    /* values above 2^53 that differ only in their low bits: a comparison through double would
     * call them equal and keep the first */
    const int64_t big = (int64_t)1 << 60;
    int64_t v64[N1 * N2] = {1, 7, 7, -3, 2, big, big + 1, big - 1, 0, big + 1, -5, -5, -9, -5, -6};
    int32_t v32[N1 * N2] = {1, 7,         7,  -3, 2,  INT32_MIN, 9, INT32_MAX,
                            0, INT32_MAX, -5, -5, -9, -5,        -6};
    int64_t want64[N1] = {1, 1, 0}, want32[N1] = {1, 2, 0};
    baton_argmax_desc d = {.n1 = N1, .n2 = N2, .dtype = (int32_t)dt};
    int64_t out[N1];
    test_poison(out, sizeof out);
    void *bufs[2] = {dt == BATON_DTYPE_I64 ? (void *)v64 : (void *)v32, out};
    char errbuf[256] = "";
    baton_exec_ctx ctx = {
        .device = {BATON_DEVICE_CPU, 0}, .errbuf = errbuf, .errbuf_len = sizeof errbuf};
    cr_assert_eq(kcpu_argmax(&ctx, bufs, (const char *)&d, sizeof d), 0, "%s", errbuf);
    for (int r = 0; r < N1; r++)
        cr_expect_eq(out[r], dt == BATON_DTYPE_I64 ? want64[r] : want32[r], "%s row %d: %lld",
                     baton_dtype_name(dt), r, (long long)out[r]);
}

Test(tutorial, cpu_argmax_takes_i64_exactly)
{
    argmax_ints(BATON_DTYPE_I64);
}

Test(tutorial, cpu_argmax_takes_i32)
{
    argmax_ints(BATON_DTYPE_I32);
}

/* The target accepts integer x on every device kind, and CPU and CUDA agree. */
Test(tutorial, argmax_step_on_integers_runs_the_same_on_cpu_and_cuda)
{
    const char *dts[] = {"i32", "i64"};
    for (int k = 0; k < 2; k++) {
        int64_t got[2][4];
        for (int d = 0; d < 2; d++) {
            if (!device_usable(devices[d]))
                continue;
            char json[1024];
            snprintf(json, sizeof json,
                     "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"am\", \"tensors\": "
                     "[{\"name\": \"x\", \"dtype\": \"%s\", \"shape\": [4, 6], \"role\": "
                     "\"constant\", \"init\": {\"kind\": \"uniform\", \"seed\": 3, \"low\": "
                     "-1000, \"high\": 1000}},"
                     " {\"name\": \"y\", \"dtype\": \"i64\", \"shape\": [4], \"role\": "
                     "\"output\"}], \"steps\": [{\"name\": \"am\", \"kernel\": \"argmax\", "
                     "\"device\": \"%s\", \"inputs\": [\"x\"], \"outputs\": [\"y\"]}]}",
                     dts[k], devices[d]);
            baton_plan *plan = NULL;
            baton_error err = {0};
            cr_assert_eq(
                baton_plan_load_string(reg, json, strlen(json), "am.json", NULL, &plan, &err), 0,
                "%s: %s", dts[k], err.message);
            baton_options o;
            baton_options_init(&o);
            o.gpu = backend_for(devices[d]);
            o.quiet = 1;
            baton_runtime *rt = NULL;
            cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), 0, "%s", err.message);
            cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
            test_poison(got[d], sizeof got[d]);
            cr_assert_eq(baton_runtime_get_output(rt, "y", got[d], sizeof got[d], &err), 0);
            for (int r = 0; r < 4; r++)
                cr_expect(got[d][r] >= 0 && got[d][r] < 6, "%s %s row %d: %lld", devices[d], dts[k],
                          r, (long long)got[d][r]);
            if (d == 1)
                cr_expect_arr_eq(got[1], got[0], sizeof got[0], "%s: CUDA and CPU disagree",
                                 dts[k]);
            baton_runtime_destroy(rt);
            baton_plan_free(plan);
        }
    }
}
