/* test_pool_memory.c: baton_pool_memory tells the truth. A pool of four CPU instances of a plan
 * whose gemm widens its constant bf16 weight to f32 for OpenBLAS holds that copy once (shared by
 * the instances) plus each instance's arenas and scratch; the figure the pool reports is checked
 * against the growth of the process's resident memory, within 10 %. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <criterion/criterion.h>
#include <uv.h>

#include "baton/baton.h"
#include "baton/baton_uv.h"
#include "scheduler/pool.h"
#include "tests/support.h"

enum { K = 4096, N = 4096, INSTANCES = 4 };

/* x [M, K] @ A [K, N] (A a constant: the [K, N] layout takes OpenBLAS above 8 rows, through an
 * f32 copy of A made once at prepare, and the GEMV up to 8, through an [N, K] copy of A made once
 * at prepare), then a CPU elementwise step. */
static const char *big_plan(char *buf, size_t cap, int M)
{
    snprintf(
        buf, cap,
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"pool-memory\",\n"
        " \"tensors\": [\n"
        "  {\"name\": \"x\", \"dtype\": \"bf16\", \"shape\": [%d, %d], \"role\": \"input\"},\n"
        "  {\"name\": \"A\", \"dtype\": \"bf16\", \"shape\": [%d, %d], \"role\": \"constant\",\n"
        "   \"init\": {\"kind\": \"normal\", \"seed\": 7, \"std\": 0.02}},\n"
        "  {\"name\": \"h\", \"dtype\": \"bf16\", \"shape\": [%d, %d]},\n"
        "  {\"name\": \"y\", \"dtype\": \"bf16\", \"shape\": [%d, %d], \"role\": \"output\"}],\n"
        " \"steps\": [\n"
        "  {\"name\": \"mm\", \"delegate\": \"gemm\", \"device\": \"cpu\", \"inputs\": [\"x\", "
        "\"A\"], \"outputs\": [\"h\"]},\n"
        "  {\"name\": \"inc\", \"kernel\": \"add_scalar\", \"device\": \"cpu\", \"inputs\": "
        "[\"h\"], \"outputs\": [\"y\"], \"attrs\": {\"value\": 1.0}}]}\n",
        M, K, K, N, M, N, M, N);
    return buf;
}

static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f, "cannot read /proc/self/statm");
    unsigned long size = 0, resident = 0;
    cr_assert_eq(fscanf(f, "%lu %lu", &size, &resident), 2);
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

static baton_plan *load(const char *json, const char *name)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    baton_registry *reg = NULL;
    cr_assert_eq(baton_registry_create(&reg), 0);
    int rc = baton_plan_load_string(reg, json, strlen(json), name, NULL, &plan, &err);
    baton_registry_destroy(reg); /* the plan keeps its reference */
    cr_assert_eq(rc, 0, "%s", err.message);
    return plan;
}

static void run_once(baton_runtime *rt, const void *x, size_t xbytes)
{
    baton_error err = {0};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, xbytes, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
}

static int closed;
static void on_close(void *arg)
{
    (void)arg;
    closed = 1;
}

/* prepared: the bytes of the one shared copy of A that the gemm step makes */
static void check_pool_memory(int M, double prepared, const char *what)
{
#ifdef BATON_TEST_SANITIZE
    cr_skip("a sanitizer build: AddressSanitizer's shadow and quarantine move resident memory "
            "by more than the bound");
#endif
#ifdef __GLIBC__
    /* Every block above 64 KiB its own mapping, returned when freed: resident memory then follows
     * what is live (glibc would otherwise raise the threshold after the first large free). */
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
#endif
    static char json[4096];
    baton_plan *plan = load(big_plan(json, sizeof json, M), "pool-memory.json");
    baton_options o;
    baton_options_init(&o);
    o.mode = BATON_SYNC_BOUNDARY;
    o.cpu_threads = 1; /* no thread pool's stacks and buffers in the figure */
    size_t xbytes = (size_t)M * K * 2;
    void *x = calloc(1, xbytes);
    cr_assert_not_null(x);
    test_rng r = {test_fresh_seed()};
    test_fill_random(&r, BATON_DTYPE_BF16, x, (int64_t)M * K, 1.0);

    /* Warm up what is process-wide and not the pool's: OpenBLAS's buffers, the thread pool's
     * bookkeeping, the libraries' first-call state. A runtime of the same plan, run and freed. */
    baton_error err = {0};
    baton_runtime *warm = NULL;
    cr_assert_eq(baton_runtime_create(plan, &o, &warm, &err), 0, "%s", err.message);
    run_once(warm, x, xbytes);
    baton_runtime_destroy(warm);

    const size_t before = rss_bytes();
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    cr_assert_eq(baton_pool_create(&loop, plan, &o, INSTANCES, &pool, &err), 0, "%s", err.message);
    for (int i = 0; i < INSTANCES; i++) /* every instance touches its arenas and scratch */
        run_once(baton__pool_instance(pool, i), x, xbytes);
    const size_t grown = rss_bytes() - before;

    size_t const_bytes = 0, arena_bytes = 0;
    baton_pool_memory(pool, &const_bytes, &arena_bytes);
    /* The pool holds its own copy of the plan's constants (shared by its instances), the
     * prepared copy of A (shared too), and per instance its arenas and scratch. */
    const double reported = (double)const_bytes + INSTANCES * (double)arena_bytes;
    cr_expect_geq(reported, prepared + (double)K * N * 2,
                  "the %s (%.0f bytes) is not in the report (%.0f bytes)", what, prepared,
                  reported);
    cr_expect_lt(reported, 2 * prepared + (double)K * N * 2,
                 "the %s is counted per instance: %.0f bytes", what, reported);
    const double rel = ((double)grown - reported) / reported;
    cr_expect(rel > -0.10 && rel < 0.10,
              "resident memory grew %zu bytes; baton_pool_memory reports %.0f (constants %zu, "
              "arenas and scratch %zu per instance): %.1f %% apart",
              grown, reported, const_bytes, arena_bytes, 100 * rel);

    closed = 0;
    baton_pool_close(pool, on_close, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert(closed);
    cr_assert_eq(uv_loop_close(&loop), 0);
    free(x);
    baton_plan_free(plan);
}

Test(pool_memory, the_reported_bytes_match_resident_memory_within_ten_percent, .timeout = 300)
{
    check_pool_memory(64, 4.0 * K * N, "f32 copy of A");
}

Test(pool_memory, counts_the_transposed_copy_of_a_kn_constant_for_the_gemv, .timeout = 300)
{
    check_pool_memory(1, 2.0 * K * N, "[N, K] copy of A");
}
