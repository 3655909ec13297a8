/* test_noalloc.c: a run of a prepared plan allocates nothing. The test binary is linked with
 * -Wl,--wrap for malloc, calloc, realloc, aligned_alloc, posix_memalign, strdup and strndup (see
 * CMakeLists.txt), so every allocation made by baton's code goes through the counters below; runs
 * after the first (which, in graph mode, captures and instantiates the graphs) must add none.
 * Built a second time with TEST_ON_CUDA as test_noalloc_cuda (label gpu), which also wraps
 * cudaMalloc, cudaMallocHost, cudaHostAlloc, cudaMallocAsync and cudaMallocManaged and runs the
 * plans on a real GPU. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "baton/baton.h"
#include "tests/support.h"

#ifdef TEST_ON_CUDA
#include <cuda_runtime_api.h>
#endif

static volatile int counting;
static volatile long allocations;
/* The CUDA allocators' own count: the CUDA runtime itself may call malloc inside them (it is
 * linked statically, so its calls are wrapped too), which is not baton allocating. */
static volatile long cuda_allocations;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

void *__wrap_aligned_alloc(size_t a, size_t n)
{
    if (counting)
        allocations++;
    return __real_aligned_alloc(a, n);
}

int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
    if (counting)
        allocations++;
    return __real_posix_memalign(p, a, n);
}

char *__wrap_strdup(const char *s)
{
    if (counting)
        allocations++;
    return __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    if (counting)
        allocations++;
    return __real_strndup(s, n);
}

#ifdef TEST_ON_CUDA
cudaError_t __real_cudaMalloc(void **p, size_t n);
cudaError_t __real_cudaMallocHost(void **p, size_t n);
cudaError_t __real_cudaHostAlloc(void **p, size_t n, unsigned int flags);
cudaError_t __real_cudaMallocAsync(void **p, size_t n, cudaStream_t s);
cudaError_t __real_cudaMallocManaged(void **p, size_t n, unsigned int flags);

cudaError_t __wrap_cudaMalloc(void **p, size_t n)
{
    if (counting)
        cuda_allocations++;
    return __real_cudaMalloc(p, n);
}

cudaError_t __wrap_cudaMallocHost(void **p, size_t n)
{
    if (counting)
        cuda_allocations++;
    return __real_cudaMallocHost(p, n);
}

cudaError_t __wrap_cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
    if (counting)
        cuda_allocations++;
    return __real_cudaHostAlloc(p, n, flags);
}

cudaError_t __wrap_cudaMallocAsync(void **p, size_t n, cudaStream_t s)
{
    if (counting)
        cuda_allocations++;
    return __real_cudaMallocAsync(p, n, s);
}

cudaError_t __wrap_cudaMallocManaged(void **p, size_t n, unsigned int flags)
{
    if (counting)
        cuda_allocations++;
    return __real_cudaMallocManaged(p, n, flags);
}
#endif

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

/* Buffers a caller binds, made before counting: device memory on CUDA, else host memory. */
typedef struct bound {
    int in, out;
    baton_buffer x[4], y[4];
} bound;

static void make_bound(const baton_plan *plan, baton_gpu_backend gpu, bound *b)
{
    b->in = b->out = -1;
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role == BATON_ROLE_INPUT && b->in < 0)
            b->in = t;
        if (ti.role == BATON_ROLE_OUTPUT && b->out < 0)
            b->out = t;
    }
    for (int k = 0; k < 4; k++)
        for (int io = 0; io < 2; io++) {
            baton_tensor_info ti;
            baton_plan_tensor_info(plan, io ? b->out : b->in, &ti);
            baton_buffer *bb = io ? &b->y[k] : &b->x[k];
            bb->device = (baton_device){BATON_DEVICE_CPU, 0};
            bb->nbytes = ti.nbytes;
            bb->dtype = ti.desc.dtype;
#ifdef TEST_ON_CUDA
            if (gpu == BATON_GPU_CUDA) {
                /* pinned host memory: the RFC plan's output comes from a CPU step */
                cr_assert_eq(cudaMallocHost(&bb->data, (ti.nbytes + 255) & ~(size_t)255),
                             cudaSuccess);
                continue;
            }
#endif
            (void)gpu;
            bb->data = aligned_alloc(256, (ti.nbytes + 255) & ~(size_t)255);
        }
}

static void free_bound(baton_gpu_backend gpu, bound *b)
{
    for (int k = 0; k < 4; k++)
        for (int io = 0; io < 2; io++) {
            void *p = io ? b->y[k].data : b->x[k].data;
#ifdef TEST_ON_CUDA
            if (gpu == BATON_GPU_CUDA) {
                cudaFreeHost(p);
                continue;
            }
#endif
            (void)gpu;
            free(p);
        }
}

static int bind_run(baton_runtime *rt, const bound *b, int k, baton_error *err)
{
    int rc = baton_runtime_bind(rt, b->in, &b->x[k % 4], err);
    if (!rc)
        rc = baton_runtime_bind(rt, b->out, &b->y[k % 4], err);
    return rc ? rc : baton_runtime_run(rt, err);
}

/* Runs allocate nothing; with `bind`, neither do runs on caller buffers whose addresses change
 * every run (after the first round, which learns how to patch the graphs). */
static void expect_no_allocation_bound(const char *rel, baton_gpu_backend gpu, baton_sync_mode mode,
                                       int bind)
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
    o.allow_unset_inputs = 1; /* what the inputs hold does not matter here */
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), 0, "%s", err.message);
    bound b;
    if (bind) {
        make_bound(plan, gpu, &b);
        for (int k = 0; k < 4; k++) /* captures, and learns each op's patch once */
            cr_assert_eq(bind_run(rt, &b, k, &err), 0, "%s", err.message);
    }
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message); /* captures in graph mode */
    /* check that the counter works at all */
    counting = 1;
    free(malloc(16));
    counting = 0;
    cr_assert_eq(allocations, 1, "the malloc wrapper is not linked in");
    allocations = 0;
    counting = 1;
    for (int i = 0; i < 5; i++)
        if ((bind ? bind_run(rt, &b, i + 1, &err) : baton_runtime_run(rt, &err)) != 0)
            break;
    counting = 0;
    cr_assert_eq(err.code, 0, "%s", err.message);
    cr_assert_eq(allocations, 0, "%s, %s mode%s: %ld allocations in 5 runs", rel,
                 baton_sync_mode_name(mode), bind ? ", buffers bound anew each run" : "",
                 allocations);
    cr_assert_eq(cuda_allocations, 0, "%s, %s mode: %ld CUDA allocations in 5 runs", rel,
                 baton_sync_mode_name(mode), cuda_allocations);
    baton_runtime_destroy(rt);
    if (bind)
        free_bound(gpu, &b);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
}

static void expect_no_allocation(const char *rel, baton_gpu_backend gpu, baton_sync_mode mode)
{
    expect_no_allocation_bound(rel, gpu, mode, 0);
    expect_no_allocation_bound(rel, gpu, mode, 1);
}

Test(baton__runtime_memory, runs_allocate_nothing_on_the_test_device)
{
    for (int m = 0; m < 3; m++) {
        expect_no_allocation("examples/plans/rmsnorm_chain64.json", BATON_GPU_SIM,
                             (baton_sync_mode)m);
        expect_no_allocation("examples/plans/rmsnorm_tutorial.json", BATON_GPU_SIM,
                             (baton_sync_mode)m);
    }
}

Test(baton__runtime_memory, runs_allocate_nothing_on_the_cpu)
{
    expect_no_allocation("examples/plans/rfc.json", BATON_GPU_CPU, BATON_SYNC_BOUNDARY);
}

Test(baton__runtime_memory, every_wrapped_allocator_is_counted)
{
    allocations = 0;
    counting = 1;
    void *p = aligned_alloc(256, 256), *q = NULL;
    int rc = posix_memalign(&q, 64, 64);
    char *s = strdup("baton"), *t = strndup("baton", 3);
    counting = 0;
    cr_assert_eq(rc, 0);
    free(p), free(q), free(s), free(t);
    cr_assert_eq(allocations, 4, "aligned_alloc, posix_memalign, strdup, strndup: %ld counted",
                 allocations);
    allocations = 0;
}

#ifdef TEST_ON_CUDA
Test(baton__runtime_memory, runs_allocate_nothing_on_cuda)
{
    if (baton_cuda_device_count() == 0)
        cr_skip("no CUDA device: the CUDA no-allocation test needs one");
    /* the CUDA allocators are wrapped too */
    cuda_allocations = 0;
    counting = 1;
    void *d = NULL, *h = NULL;
    cudaError_t e1 = cudaMalloc(&d, 256), e2 = cudaMallocHost(&h, 256);
    counting = 0;
    cr_assert_eq(e1, cudaSuccess);
    cr_assert_eq(e2, cudaSuccess);
    cudaFree(d);
    cudaFreeHost(h);
    cr_assert_eq(cuda_allocations, 2, "the cudaMalloc/cudaMallocHost wrappers are not linked in");
    cuda_allocations = 0;
    allocations = 0;
    for (int m = 0; m < 3; m++) {
        expect_no_allocation("examples/plans/rmsnorm_chain64.json", BATON_GPU_CUDA,
                             (baton_sync_mode)m);
        expect_no_allocation("examples/plans/rmsnorm_tutorial.json", BATON_GPU_CUDA,
                             (baton_sync_mode)m);
        expect_no_allocation("examples/plans/rfc.json", BATON_GPU_CUDA, (baton_sync_mode)m);
    }
}
#endif

/* Issue 40: a run whose dims changed repacks its steps' descriptors and counts its copies in
 * prepare's buffers, and in graph mode a binding seen before launches its kept graph: runs that
 * switch between two seen bindings, and runs carrying state, allocate nothing. */
static void expect_no_allocation_dims(baton_gpu_backend gpu, baton_sync_mode mode)
{
    static const char text[] =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"dims\", \"dims\": {\"seq\": "
        "{\"min\": 1, \"max\": 8}}, \"tensors\": [{\"name\": \"x\", \"dtype\": \"f32\", "
        "\"shape\": [\"seq\", 4], \"role\": \"input\"}, {\"name\": \"h\", \"dtype\": \"f32\", "
        "\"shape\": [\"seq\", 4]}, {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [\"seq\", 4], "
        "\"role\": \"output\"}, {\"name\": \"s\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
        "\"state\"}, {\"name\": \"one\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
        "\"constant\", \"init\": {\"kind\": \"fill\", \"value\": 1}}], \"steps\": [{\"name\": "
        "\"a\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"x\"], "
        "\"outputs\": [\"h\"], \"attrs\": {\"value\": 1}}, {\"name\": \"b\", \"kernel\": "
        "\"add_scalar\", \"device\": \"cpu\", \"inputs\": [\"h\"], \"outputs\": [\"y\"], "
        "\"attrs\": {\"value\": 1}}, {\"name\": \"c\", \"kernel\": \"add\", \"device\": "
        "\"cuda:0\", \"inputs\": [\"s\", \"one\"], \"outputs\": [\"s\"]}]}";
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_registry_create(&reg), 0);
    cr_assert_eq(baton_plan_load_string(reg, text, sizeof text - 1, "dims.json", NULL, &plan, &err),
                 0, "%s", err.message);
    baton_options o;
    baton_options_init(&o);
    o.gpu = gpu;
    o.mode = mode;
    o.quiet = 1;
    o.allow_unset_inputs = 1; /* what the inputs hold does not matter here */
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), 0, "%s", err.message);
    static float x[32];
    for (int seq = 3; seq <= 5; seq += 2) { /* each binding's graph captured once */
        cr_assert_eq(baton_runtime_set_dims(rt, "seq", seq, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    }
    allocations = 0;
    counting = 1;
    int rc = 0;
    for (int i = 0; i < 6 && !rc; i++) {
        int seq = i % 2 ? 5 : 3;
        rc = baton_runtime_set_input(rt, "x", x, (size_t)seq * 16, &err);
        if (!rc)
            rc = baton_runtime_run(rt, &err);
    }
    counting = 0;
    cr_assert_eq(rc, 0, "%s", err.message);
    cr_assert_eq(allocations, 0, "dims, %s mode: %ld allocations in 6 runs that change seq",
                 baton_sync_mode_name(mode), allocations);
    cr_assert_eq(cuda_allocations, 0, "dims, %s mode: %ld CUDA allocations",
                 baton_sync_mode_name(mode), cuda_allocations);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
}

Test(baton__runtime_memory, runs_that_change_dims_allocate_nothing)
{
    for (int m = 0; m < 3; m++) {
        expect_no_allocation_dims(BATON_GPU_SIM, (baton_sync_mode)m);
        expect_no_allocation_dims(BATON_GPU_CPU, (baton_sync_mode)m);
#ifdef TEST_ON_CUDA
        if (baton_cuda_device_count() > 0)
            expect_no_allocation_dims(BATON_GPU_CUDA, (baton_sync_mode)m);
#endif
    }
}
