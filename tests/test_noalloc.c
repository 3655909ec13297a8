/* test_noalloc.c: a run of a prepared plan allocates nothing. The test binary is linked with
 * -Wl,--wrap=malloc,calloc,realloc (see CMakeLists.txt), so every allocation made by baton's code
 * goes through the counters below; runs after the first (which captures graphs) must add none. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "baton/baton.h"
#include "tests/support.h"

static volatile int counting;
static volatile long allocations;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);

void *__wrap_malloc(size_t n)
{
    if (counting)
        allocations++;
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t m)
{
    if (counting)
        allocations++;
    return __real_calloc(n, m);
}

void *__wrap_realloc(void *p, size_t n)
{
    if (counting)
        allocations++;
    return __real_realloc(p, n);
}

static void expect_no_allocation(const char *rel, baton_gpu_backend gpu, baton_sync_mode mode)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_registry_create(&reg), 0);
    cr_assert_eq(baton_plan_load(reg, test_path(rel), &plan, &err), 0, "%s", err.message);
    baton_options o;
    baton_options_init(&o);
    o.gpu = gpu;
    o.mode = mode;
    o.quiet = 1;
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message); /* captures in graph mode */
    /* check that the counter works at all */
    counting = 1;
    free(malloc(16));
    counting = 0;
    cr_assert_eq(allocations, 1, "the malloc wrapper is not linked in");
    allocations = 0;
    counting = 1;
    for (int i = 0; i < 5; i++)
        if (baton_runtime_run(rt, &err) != 0)
            break;
    counting = 0;
    cr_assert_eq(err.code, 0, "%s", err.message);
    cr_assert_eq(allocations, 0, "%s, %s mode: %ld allocations in 5 runs", rel,
                 baton_sync_mode_name(mode), allocations);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
}

Test(runtime_memory, runs_allocate_nothing_on_the_test_device)
{
    for (int m = 0; m < 3; m++) {
        expect_no_allocation("examples/plans/rmsnorm_chain64.json", BATON_GPU_SIM,
                             (baton_sync_mode)m);
        expect_no_allocation("examples/plans/rmsnorm_tutorial.json", BATON_GPU_SIM,
                             (baton_sync_mode)m);
    }
}

Test(runtime_memory, runs_allocate_nothing_on_the_cpu)
{
    expect_no_allocation("examples/plans/rfc.json", BATON_GPU_CPU, BATON_SYNC_BOUNDARY);
}
