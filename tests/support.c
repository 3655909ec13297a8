/* support.c: see support.h. */
#include "tests/support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "core/dtype.h"
#include "core/rng.h"

/* The run's seed: BATON_TEST_SEED when set, else one drawn from the clock and put in the
 * environment before Criterion starts its workers, so that every worker of this run sees it. It is
 * printed once, so a failing run can be replayed with the same data. */
static uint64_t run_seed;

__attribute__((constructor)) static void pick_run_seed(void)
{
    const char *env = getenv("BATON_TEST_SEED");
    char *end = NULL;
    if (env && *env) {
        run_seed = strtoull(env, &end, 10);
        if (*end == 0)
            return;
        fprintf(stderr, "BATON_TEST_SEED='%s' is not a number: drawing a seed\n", env);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    run_seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec;
    run_seed %= 10000000000000000000ull; /* decimal, as it is typed back */
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)run_seed);
    setenv("BATON_TEST_SEED", buf, 1);
    fprintf(stderr, "test seed: %s (BATON_TEST_SEED=%s replays this run's data)\n", buf, buf);
}

uint64_t test_run_seed(void)
{
    return run_seed;
}

uint64_t test_fresh_seed(void)
{
    /* Criterion runs each test in a process of its own: the test's name and a per-process
     * counter make every call's seed distinct and the same in every run with that run seed. */
    static uint64_t counter;
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the test's name */
    const char *name =
        criterion_current_test && criterion_current_test->name ? criterion_current_test->name : "";
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    test_rng r = {run_seed ^ h ^ (++counter * 0x9e3779b97f4a7c15ull)};
    return test_rng_next(&r);
}

uint64_t test_rng_next(test_rng *r)
{
    return baton__rng_splitmix64(&r->state); /* the one splitmix64, core's */
}

double test_rng_uniform(test_rng *r)
{
    return (double)(test_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double test_rng_normal(test_rng *r)
{
    double u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static int64_t argmax_int(test_rng *r, baton_dtype dt, int kind)
{
    const int64_t small = (int64_t)(test_rng_next(r) % 9) - 4,
                  low = (int64_t)(test_rng_next(r) % 4);
    const int64_t hi = dt == BATON_DTYPE_I32 ? INT32_MAX : INT64_MAX;
    const int64_t lo = dt == BATON_DTYPE_I32 ? INT32_MIN : INT64_MIN;
    switch (kind) {
    case 0: return small;
    case 1: return hi - low;
    case 2: return lo + low;
    case 3: return dt == BATON_DTYPE_I32 ? (int32_t)test_rng_next(r) : ((int64_t)1 << 60) + low;
    default: return 7;
    }
}

void test_fill_argmax_ints(test_rng *r, baton_dtype dt, int64_t n1, int64_t n2, int64_t *v, void *x)
{
    for (int64_t i = 0; i < n1; i++)
        for (int64_t j = 0; j < n2; j++) {
            v[i * n2 + j] = argmax_int(r, dt, (int)(i % 5));
            if (dt == BATON_DTYPE_I32)
                ((int32_t *)x)[i * n2 + j] = (int32_t)v[i * n2 + j];
            else
                ((int64_t *)x)[i * n2 + j] = v[i * n2 + j];
        }
}

int64_t test_argmax_row(const int64_t *v, int64_t n2, int64_t r)
{
    int64_t best = 0;
    for (int64_t j = 1; j < n2; j++)
        if (v[r * n2 + j] > v[r * n2 + best])
            best = j;
    return best;
}

baton_options test_options(baton_gpu_backend gpu, baton_sync_mode mode, int delay_us,
                           int fallback_is_error)
{
    baton_options o;
    baton_options_init(&o);
    o.gpu = gpu;
    o.mode = mode;
    o.quiet = 1;
    o.fallback_is_error = fallback_is_error;
    o.sim_delay_us = delay_us;
    return o;
}

baton_runtime *test_runtime(const baton_plan *plan, baton_gpu_backend gpu, baton_sync_mode mode,
                            int delay_us, int fallback_is_error)
{
    const baton_options o = test_options(gpu, mode, delay_us, fallback_is_error);
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), 0, "%s", err.message);
    return rt;
}

void test_fill_random(test_rng *r, baton_dtype dt, void *p, int64_t n, double scale)
{
    for (int64_t i = 0; i < n; i++)
        store_f64(dt, p, i, scale * test_rng_normal(r));
}

void test_poison(void *p, size_t nbytes)
{
    memset(p, 0xff, nbytes);
}

double test_rel_err(baton_dtype dt, const void *a, const double *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = load_f64(dt, a, i);
        if (isnan(v) && !isnan(ref[i]))
            return INFINITY;
        double d = v - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0)
        return sqrt(num);
    return sqrt(num / den);
}

double test_tolerance(baton_dtype dt)
{
    switch (dt) {
    case BATON_DTYPE_BF16: return 1e-2;
    case BATON_DTYPE_F16: return 2e-3;
    case BATON_DTYPE_F32: return 1e-5;
    case BATON_DTYPE_F64: return 1e-12;
    default: return 0;
    }
}

const char *test_path(const char *rel)
{
    static char bufs[4][4096];
    static int slot;
    char *b = bufs[slot++ & 3];
    const char *root = getenv("BATON_SOURCE_DIR");
    snprintf(b, sizeof bufs[0], "%s/%s", root ? root : ".", rel);
    return b;
}

char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return buf;
}

int test_cuda_devices(void)
{
    return baton_cuda_device_count();
}

#ifndef BATON_PLAIN_CRITERION_H /* tests/plain/ has its own main */
/* GPU tests (a *_cuda binary, BATON_TEST_GPU, or a run of only the gpu_* suites of a case table)
 * without a CUDA device run nothing and exit 77, which CTest reports as skipped
 * (SKIP_RETURN_CODE), rather than a pass made of skipped tests. Otherwise Criterion's own main. */
static int wants_gpu(int argc, char *argv[])
{
#ifdef BATON_TEST_GPU
    (void)argc, (void)argv;
    return 1;
#else
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--filter=gpu_", 13) == 0)
            return 1;
    return 0;
#endif
}

int main(int argc, char *argv[])
{
    if (wants_gpu(argc, argv) && baton_cuda_device_count() == 0) {
        fprintf(stderr, "%s: no CUDA device: skipped\n", argv[0]);
        return 77;
    }
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true))
        result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
#endif
