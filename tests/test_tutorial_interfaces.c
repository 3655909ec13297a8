/* test_tutorial_interfaces.c: the JAX tutorial's interfaces, exactly. part_grad may be declared as
 * the tutorial's abstract evaluation declares it, [P, numel(weight)], with P taken from the
 * declaration when the part_grad_size attribute is absent (and a disagreeing attribute is a clear
 * error); argmax takes the same dtypes on every device kind. Built as test_tutorial_interfaces
 * (label cpu) the plans run on the CPU; built with TEST_ON_CUDA as test_tutorial_interfaces_cuda
 * (label gpu; it skips without a device) they run on cuda:0, checked against the same float64
 * references and, for argmax, against the CPU's indices. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/descriptors.h"
#include "tests/support.h"

#ifdef TEST_ON_CUDA
#define DEVICE "cuda:0"
#define NEED_DEVICE()                                                                              \
    do {                                                                                           \
        if (test_cuda_devices() == 0)                                                              \
            cr_skip("no CUDA device on this machine: these tests run the plans on cuda:0");        \
    } while (0)
#else
#define DEVICE "cpu"
#define NEED_DEVICE()                                                                              \
    do {                                                                                           \
    } while (0)
#endif

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

static baton_gpu_backend backend_for(const char *device)
{
    return strcmp(device, "cpu") == 0 ? BATON_GPU_CPU : BATON_GPU_CUDA;
}

/* The backward of x [rows, 3, 7] f32 with weight [3, 7], n2 = 21: part_grad declared `pg_shape`,
 * with an optional part_grad_size attribute (`attr` < 0: none). */
enum { COLS = 21, MAX_ROWS = 64, MAX_P = 16 };

static int load_bwd(const char *device, int rows, const char *pg_shape, int attr, baton_plan **plan,
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
        rows, rows, rows, rows, pg_shape, device, attrs);
    return baton_plan_load_string(reg, json, strlen(json), "tutorial_pg.json", NULL, plan, err);
}

/* One set of backward inputs, drawn from the run's seed. */
typedef struct bwd_data {
    int rows;
    float g[MAX_ROWS * COLS], x[MAX_ROWS * COLS], w[COLS], inv[MAX_ROWS];
} bwd_data;

static void bwd_data_fill(bwd_data *d, int rows)
{
    cr_assert_leq(rows, MAX_ROWS);
    test_rng r = {test_fresh_seed()};
    d->rows = rows;
    test_fill_random(&r, BATON_DTYPE_F32, d->g, rows * COLS, 1.0);
    test_fill_random(&r, BATON_DTYPE_F32, d->x, rows * COLS, 1.0);
    test_fill_random(&r, BATON_DTYPE_F32, d->w, COLS, 1.0);
    for (int i = 0; i < rows; i++)
        d->inv[i] = (float)(0.5 + test_rng_uniform(&r));
}

/* Loads and runs the backward on `device`; writes grad_weight and part_grad's p rows (both
 * poisoned first, so a kernel that skips an element is caught). */
static void run_bwd(const char *device, const bwd_data *d, const char *pg_shape, int attr, int p,
                    float dw[COLS], float *pg)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = load_bwd(device, d->rows, pg_shape, attr, &plan, &err);
    cr_assert_eq(rc, 0, "%s: %s", pg_shape, err.message);
    baton_options o;
    baton_options_init(&o);
    o.gpu = backend_for(device);
    o.quiet = 1;
    baton_runtime *rt = NULL;
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), 0, "%s", err.message);
    const size_t xs = sizeof(float) * (size_t)d->rows * COLS;
    cr_assert_eq(baton_runtime_set_input(rt, "g", d->g, xs, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "inv", d->inv, sizeof(float) * (size_t)d->rows, &err),
                 0, "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "x", d->x, xs, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "w", d->w, sizeof d->w, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    test_poison(dw, sizeof(float) * COLS);
    test_poison(pg, sizeof(float) * (size_t)p * COLS);
    cr_assert_eq(baton_runtime_get_output(rt, "dw", dw, sizeof(float) * COLS, &err), 0, "%s",
                 err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "pg", pg, sizeof(float) * (size_t)p * COLS, &err), 0,
                 "%s", err.message);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

/* grad_weight against a float64 reference, and part_grad's p rows: blocks of ceil(rows / p) rows,
 * the rows past the data holding zeros. */
static void check_bwd(const char *what, const bwd_data *d, int p, const float dw[COLS],
                      const float *pg)
{
    double ref[COLS] = {0};
    for (int i = 0; i < d->rows; i++)
        for (int j = 0; j < COLS; j++)
            ref[j] += (double)d->g[i * COLS + j] * d->x[i * COLS + j] * d->inv[i];
    cr_expect_lt(test_rel_err(BATON_DTYPE_F32, dw, ref, COLS), 1e-5, "%s: grad_weight", what);
    int per = (d->rows + p - 1) / p;
    for (int b = 0; b < p; b++)
        for (int j = 0; j < COLS; j++) {
            double want = 0;
            for (int i = b * per; i < d->rows && i < (b + 1) * per; i++)
                want += (double)d->g[i * COLS + j] * d->x[i * COLS + j] * d->inv[i];
            cr_expect(fabs(pg[b * COLS + j] - want) <= 1e-5 * (1 + fabs(want)),
                      "%s: part_grad[%d][%d] = %g, want %g", what, b, j, pg[b * COLS + j], want);
        }
}

Test(tutorial, part_grad_declared_p_by_n2_takes_p_from_the_declaration)
{
    NEED_DEVICE();
    /* The tutorial's abstract evaluation: part_grad (16, n2); 5 rows, so blocks 5..15 are zero. */
    bwd_data d;
    bwd_data_fill(&d, 5);
    float dw[COLS], pg[16 * COLS];
    run_bwd(DEVICE, &d, "[16, 21]", -1, 16, dw, pg);
    check_bwd(DEVICE " [16, 21]", &d, 16, dw, pg);
    for (int i = 5 * COLS; i < 16 * COLS; i++)
        cr_expect_eq(pg[i], 0.0f, "part_grad row %d past the data is not zero", i / COLS);
}

/* The two declarations are one buffer to the kernel: the same descriptor, so the same bits. */
Test(tutorial, part_grad_declared_p_by_n2_gives_the_bits_of_the_weight_shaped_form)
{
    NEED_DEVICE();
    static const struct {
        int rows, attr, p;
        const char *flat, *shaped;
    } cases[] = {
        {5, -1, 16, "[16, 21]", "[16, 3, 7]"},  /* the tutorial's P, fewer rows than blocks */
        {37, -1, 16, "[16, 21]", "[16, 3, 7]"}, /* blocks of 3 rows, the last ones short */
        {64, 4, 4, "[4, 21]", "[4, 3, 7]"},     /* with an agreeing attribute */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bwd_data d;
        bwd_data_fill(&d, cases[c].rows);
        float dw_flat[COLS], dw_shaped[COLS], pg_flat[MAX_P * COLS], pg_shaped[MAX_P * COLS];
        run_bwd(DEVICE, &d, cases[c].flat, cases[c].attr, cases[c].p, dw_flat, pg_flat);
        run_bwd(DEVICE, &d, cases[c].shaped, cases[c].attr, cases[c].p, dw_shaped, pg_shaped);
        check_bwd(cases[c].flat, &d, cases[c].p, dw_flat, pg_flat);
        cr_expect_arr_eq(dw_flat, dw_shaped, sizeof dw_flat,
                         "%s rows %d: grad_weight differs between %s and %s", DEVICE, cases[c].rows,
                         cases[c].flat, cases[c].shaped);
        cr_expect_arr_eq(pg_flat, pg_shaped, sizeof(float) * (size_t)cases[c].p * COLS,
                         "%s rows %d: part_grad differs between %s and %s", DEVICE, cases[c].rows,
                         cases[c].flat, cases[c].shaped);
    }
}

Test(tutorial, part_grad_declared_p_by_n2_with_an_agreeing_attribute_loads)
{
    NEED_DEVICE();
    bwd_data d;
    bwd_data_fill(&d, 9);
    float dw[COLS], pg[4 * COLS];
    run_bwd(DEVICE, &d, "[4, 21]", 4, 4, dw, pg);
    check_bwd(DEVICE " [4, 21] with part_grad_size 4", &d, 4, dw, pg);
}

Test(tutorial, part_grad_declared_with_the_weight_shape_takes_p_from_the_declaration)
{
    NEED_DEVICE();
    bwd_data d;
    bwd_data_fill(&d, 9);
    float dw[COLS], pg[3 * COLS];
    run_bwd(DEVICE, &d, "[3, 3, 7]", -1, 3, dw, pg);
    check_bwd(DEVICE " [3, 3, 7]", &d, 3, dw, pg);
}

#ifndef TEST_ON_CUDA /* what follows needs no device: the CPU build runs it once */

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

Test(tutorial, part_grad_of_neither_form_is_refused_with_a_shape_to_declare)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = load_bwd("cpu", 5, "[16, 20]", -1, &plan, &err);
    cr_assert_eq(rc, BATON_EPLAN, "rc %d: %s", rc, err.message);
    cr_expect(strstr(err.message, "output 'pg' is declared f32[16,20]") != NULL &&
                  strstr(err.message, "as f32[5,3,7]") != NULL,
              "%s", err.message);
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
    cr_assert_eq(baton__kcpu_argmax(&ctx, bufs, (const char *)&d, sizeof d), 0, "%s", errbuf);
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

#endif /* !TEST_ON_CUDA */

/* The argmax target takes integer x on every device kind: a plan step on fresh random rows with
 * few distinct values (ties are common: the first index wins) and, for i64, values above 2^53
 * that differ only in their low bits, checked against a straightforward reference. */
Test(tutorial, argmax_step_on_integers_finds_the_first_maximum)
{
    NEED_DEVICE();
    enum { R = 40, C = 37 };
    const char *dts[] = {"i32", "i64"};
    for (int k = 0; k < 2; k++) {
        const baton_dtype dt = k ? BATON_DTYPE_I64 : BATON_DTYPE_I32;
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"am\", \"tensors\": "
                 "[{\"name\": \"x\", \"dtype\": \"%s\", \"shape\": [%d, %d], \"role\": "
                 "\"input\"},"
                 " {\"name\": \"y\", \"dtype\": \"i64\", \"shape\": [%d], \"role\": "
                 "\"output\"}], \"steps\": [{\"name\": \"am\", \"kernel\": \"argmax\", "
                 "\"device\": \"%s\", \"inputs\": [\"x\"], \"outputs\": [\"y\"]}]}",
                 dts[k], R, C, R, DEVICE);
        baton_plan *plan = NULL;
        baton_error err = {0};
        cr_assert_eq(baton_plan_load_string(reg, json, strlen(json), "am.json", NULL, &plan, &err),
                     0, "%s: %s", dts[k], err.message);
        baton_options o;
        baton_options_init(&o);
        o.gpu = backend_for(DEVICE);
        o.quiet = 1;
        baton_runtime *rt = NULL;
        cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), 0, "%s", err.message);

        test_rng r = {test_fresh_seed()};
        int64_t v[R * C];
        for (int i = 0; i < R * C; i++) {
            int64_t u = (int64_t)(test_rng_next(&r) % 9) - 4;
            if (dt == BATON_DTYPE_I32)
                v[i] = (i / C) % 4 == 3 ? (u < 0 ? INT32_MIN : INT32_MAX) : u;
            else
                v[i] = (i / C) % 4 == 3 ? ((int64_t)1 << 60) + u : u;
        }
        int32_t v32[R * C];
        for (int i = 0; i < R * C; i++)
            v32[i] = (int32_t)v[i];
        const void *xs = dt == BATON_DTYPE_I32 ? (const void *)v32 : (const void *)v;
        cr_assert_eq(
            baton_runtime_set_input(rt, "x", xs, (size_t)R * C * baton_dtype_size(dt), &err), 0,
            "%s", err.message);
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        int64_t got[R];
        test_poison(got, sizeof got);
        cr_assert_eq(baton_runtime_get_output(rt, "y", got, sizeof got, &err), 0, "%s",
                     err.message);
        for (int row = 0; row < R; row++) {
            int64_t best = 0;
            for (int j = 1; j < C; j++)
                if (v[row * C + j] > v[row * C + best])
                    best = j;
            cr_expect_eq(got[row], best, "%s %s row %d: %lld, expected %lld", DEVICE, dts[k], row,
                         (long long)got[row], (long long)best);
        }
        baton_runtime_destroy(rt);
        baton_plan_free(plan);
    }
}
