/* test_embed.c: what an embedding runtime relies on: caller-owned input and output buffers bound
 * per run (host and device, every mode, with addresses that change each run), caller arenas,
 * caller streams, the log callback, and a kernel that reads its step's descriptors, attributes
 * and user pointer. Built twice: on the test device (label cpu) and, with TEST_ON_CUDA, as
 * test_embed_cuda on a real GPU. The test device's graphs keep the addresses they were captured
 * with, as CUDA graphs do, so a rebinding that does not patch the graph fails here too. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support.h"

#ifdef TEST_ON_CUDA
#include <cuda_runtime_api.h>
#define GPU BATON_GPU_CUDA
#define NEED_BACKEND()                                                                             \
    do {                                                                                           \
        if (baton_cuda_device_count() == 0)                                                        \
            cr_skip("no CUDA device: the CUDA variant of the embedding tests needs one");          \
    } while (0)
#else
#define GPU            BATON_GPU_SIM
#define NEED_BACKEND() ((void)0)
#endif

/* The RFC plan's structure (eight blocks of gemm, RMSNorm and softshrink on the GPU, each handing
 * over to a CPU step) at 4096 wide on a GPU; on the CPU the same plan 256 wide
 * (tests/data/good/rfc-small.json), since its bf16 4096 × 4096 GEMMs took a minute there and the
 * tests need the structure, not the size. */
#ifdef TEST_ON_CUDA
#define RFC_PLAN "examples/plans/rfc.json"
#else
#define RFC_PLAN "tests/data/good/rfc-small.json"
#endif

static const baton_device CPU = {BATON_DEVICE_CPU, 0};
static const baton_device GPU0 = {BATON_DEVICE_CUDA, 0};

/* Memory a caller would own: pinned host memory or device memory on CUDA; on the test device
 * both are plain host memory aligned like cudaMalloc's. */
static void *caller_alloc(int on_device, size_t n)
{
    void *p = NULL;
    n = (n + 255) & ~(size_t)255;
#ifdef TEST_ON_CUDA
    cr_assert_eq(on_device ? cudaMalloc(&p, n) : cudaMallocHost(&p, n), cudaSuccess);
#else
    (void)on_device;
    p = aligned_alloc(256, n);
    cr_assert_not_null(p);
#endif
    return p;
}

static void caller_free(int on_device, void *p)
{
#ifdef TEST_ON_CUDA
    if (on_device)
        cudaFree(p);
    else
        cudaFreeHost(p);
#else
    (void)on_device;
    free(p);
#endif
}

static void to_device(void *dst, const void *src, size_t n)
{
#ifdef TEST_ON_CUDA
    cr_assert_eq(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), cudaSuccess);
#else
    memcpy(dst, src, n);
#endif
}

static void from_device(void *dst, const void *src, size_t n)
{
#ifdef TEST_ON_CUDA
    cr_assert_eq(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), cudaSuccess);
#else
    memcpy(dst, src, n);
#endif
}

typedef struct fixture {
    baton_registry *reg;
    baton_plan *plan;
    int in, out; /* the plan's one input and one output */
    baton_tensor_info ii, oi;
} fixture;

static void load(fixture *f, const char *rel)
{
    baton_error err;
    cr_assert_eq(baton_registry_create(&f->reg), 0);
    cr_assert_eq(baton_plan_load(f->reg, test_path(rel), &f->plan, &err), 0, "%s", err.message);
    f->in = f->out = -1;
    for (int t = 0; t < baton_plan_tensor_count(f->plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(f->plan, t, &ti);
        if (ti.role == BATON_ROLE_INPUT && f->in < 0)
            f->in = t, f->ii = ti;
        if (ti.role == BATON_ROLE_OUTPUT && f->out < 0)
            f->out = t, f->oi = ti;
    }
    cr_assert(f->in >= 0 && f->out >= 0);
}

static void unload(fixture *f)
{
    baton_plan_free(f->plan);
    baton_registry_destroy(f->reg);
}

static baton_runtime *make(const fixture *f, baton_sync_mode mode, const baton_options *base)
{
    baton_options o;
    if (base)
        o = *base;
    else
        baton_options_init(&o);
    o.mode = mode;
    o.gpu = GPU;
    o.quiet = 1;
    baton_runtime *rt = NULL;
    baton_error err;
    cr_assert_eq(baton_runtime_create(f->plan, &o, &rt, &err), 0, "%s", err.message);
    return rt;
}

/* The reference: the same input through the copying API. */
static void run_copied(baton_runtime *rt, const fixture *f, const void *x, void *y)
{
    baton_error err;
    cr_assert_eq(baton_runtime_set_input(rt, f->ii.name, x, f->ii.nbytes, &err), 0, "%s",
                 err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, f->oi.name, y, f->oi.nbytes, &err), 0, "%s",
                 err.message);
}

static void fill_input(test_rng *r, const fixture *f, void *x)
{
    test_fill_random(r, f->ii.desc.dtype, x, baton_tensor_desc_numel(&f->ii.desc), 1.0);
}

/* Runs `runs` times with the input and output bound where asked, on buffers that change every
 * run, and compares each output bit for bit with the copying runtime's. */
static void check_bound(const char *rel, baton_sync_mode mode, int in_dev, int out_dev)
{
    fixture f;
    load(&f, rel);
    baton_runtime *ref = make(&f, mode, NULL), *rt = make(&f, mode, NULL);
    test_rng r = {test_fresh_seed()};
    enum { RUNS = 5, BUFS = 3 };
    void *xb[BUFS], *yb[BUFS];
    for (int k = 0; k < BUFS; k++) {
        xb[k] = caller_alloc(in_dev, f.ii.nbytes);
        yb[k] = caller_alloc(out_dev, f.oi.nbytes);
    }
    void *x = malloc(f.ii.nbytes), *want = malloc(f.oi.nbytes), *got = malloc(f.oi.nbytes);
    baton_error err;
    for (int run = 0; run < RUNS; run++) {
        fill_input(&r, &f, x);
        run_copied(ref, &f, x, want);
        int k = (run * 2 + 1) % BUFS; /* a new address every run */
        if (in_dev)
            to_device(xb[k], x, f.ii.nbytes);
        else
            memcpy(xb[k], x, f.ii.nbytes);
        test_poison(got, f.oi.nbytes);
        if (out_dev) {
            void *poison = malloc(f.oi.nbytes);
            test_poison(poison, f.oi.nbytes);
            to_device(yb[k], poison, f.oi.nbytes);
            free(poison);
        } else
            test_poison(yb[k], f.oi.nbytes);
        baton_buffer bx = {in_dev ? GPU0 : CPU, xb[k], f.ii.nbytes, f.ii.desc.dtype};
        baton_buffer by = {out_dev ? GPU0 : CPU, yb[k], f.oi.nbytes, f.oi.desc.dtype};
        cr_assert_eq(baton_runtime_bind(rt, f.in, &bx, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_bind(rt, f.out, &by, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        if (out_dev)
            from_device(got, yb[k], f.oi.nbytes);
        else
            memcpy(got, yb[k], f.oi.nbytes);
        cr_assert(memcmp(got, want, f.oi.nbytes) == 0,
                  "%s, %s mode, input on %s, output on %s, run %d: the bound output differs "
                  "from the copied one",
                  rel, baton_sync_mode_name(mode), in_dev ? "cuda:0" : "cpu",
                  out_dev ? "cuda:0" : "cpu", run);
        /* get_output reads a bound output where it is */
        memset(got, 0, f.oi.nbytes);
        cr_assert_eq(baton_runtime_get_output(rt, f.oi.name, got, f.oi.nbytes, &err), 0, "%s",
                     err.message);
        cr_assert(memcmp(got, want, f.oi.nbytes) == 0);
    }
    /* The chain's segment is captured once, when first run with its bindings; every later move
     * patches the graph's nodes instead of capturing it again. */
    if (mode == BATON_SYNC_GRAPH && strstr(rel, "chain64")) {
        baton_run_stats st;
        baton_runtime_stats(rt, &st);
        const char *note = baton_runtime_note(rt);
        cr_assert_eq(st.captures, 1, "%lld captures: %s", (long long)st.captures,
                     note ? note : "(no note)");
    }
    /* Unbound again: back to the runtime's own memory and copies. */
    cr_assert_eq(baton_runtime_bind(rt, f.in, NULL, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_bind(rt, f.out, NULL, &err), 0, "%s", err.message);
    fill_input(&r, &f, x);
    run_copied(ref, &f, x, want);
    run_copied(rt, &f, x, got);
    cr_assert(memcmp(got, want, f.oi.nbytes) == 0, "after unbinding, the output differs");
    for (int k = 0; k < BUFS; k++) {
        caller_free(in_dev, xb[k]);
        caller_free(out_dev, yb[k]);
    }
    free(x);
    free(want);
    free(got);
    baton_runtime_destroy(ref);
    baton_runtime_destroy(rt);
    unload(&f);
}

static const baton_sync_mode MODES[] = {BATON_SYNC_STRICT, BATON_SYNC_BOUNDARY, BATON_SYNC_GRAPH};

Test(bind, host_buffers_give_the_copied_results_in_every_mode)
{
    NEED_BACKEND();
    for (int m = 0; m < 3; m++) {
        check_bound(RFC_PLAN, MODES[m], 0, 0);
        check_bound("examples/plans/rmsnorm_chain64.json", MODES[m], 0, 0);
    }
}

Test(bind, device_buffers_give_the_copied_results_in_every_mode)
{
    NEED_BACKEND();
    for (int m = 0; m < 3; m++) {
        /* the RFC plan's output comes from a CPU step: it is bound on the host */
        check_bound(RFC_PLAN, MODES[m], 1, 0);
        check_bound("examples/plans/rmsnorm_chain64.json", MODES[m], 1, 1);
    }
}

/* The copies that binding on the GPU makes needless are gone from the counters. */
Test(bind, device_buffers_remove_their_copies_from_the_counters)
{
    NEED_BACKEND();
    fixture f;
    load(&f, "examples/plans/rmsnorm_chain64.json");
    for (int m = 0; m < 3; m++) {
        baton_runtime *rt = make(&f, MODES[m], NULL);
        baton_error err;
        baton_run_stats st;
        void *zero = calloc(1, f.ii.nbytes);
        cr_assert_eq(baton_runtime_set_input(rt, f.ii.name, zero, f.ii.nbytes, &err), 0, "%s",
                     err.message);
        free(zero);
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        baton_runtime_stats(rt, &st);
        cr_assert_eq(st.bytes_h2d, (int64_t)f.ii.nbytes);
        cr_assert_eq(st.bytes_d2h, (int64_t)f.oi.nbytes);
        void *x = caller_alloc(1, f.ii.nbytes), *y = caller_alloc(1, f.oi.nbytes);
        baton_buffer bx = {GPU0, x, f.ii.nbytes, f.ii.desc.dtype};
        baton_buffer by = {GPU0, y, f.oi.nbytes, f.oi.desc.dtype};
        cr_assert_eq(baton_runtime_bind(rt, f.in, &bx, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_bind(rt, f.out, &by, &err), 0, "%s", err.message);
        baton_runtime_reset_stats(rt);
        for (int i = 0; i < 3; i++)
            cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        baton_runtime_stats(rt, &st);
        cr_assert_eq(st.runs, 3);
        cr_assert_eq(st.bytes_h2d, 0, "%s mode: %lld bytes still copied in",
                     baton_sync_mode_name(MODES[m]), (long long)st.bytes_h2d);
        cr_assert_eq(st.bytes_d2h, 0, "%s mode: %lld bytes still copied out",
                     baton_sync_mode_name(MODES[m]), (long long)st.bytes_d2h);
        baton_runtime_destroy(rt);
        caller_free(1, x);
        caller_free(1, y);
    }
    unload(&f);
}

/* Queued runs (baton_runtime_run_async): each on its own device input and output, bound before
 * it, all in flight before one wait, give the copied runtime's outputs bit for bit, and the host
 * waits once for all of them (in strict mode, a queued run is a run). A call that reads what
 * queued runs write (get_output) waits for them first. */
Test(async_runs, queued_runs_on_their_own_buffers_give_the_copied_results)
{
    NEED_BACKEND();
    fixture f;
    load(&f, "examples/plans/rmsnorm_chain64.json");
    enum { RUNS = 6 };
    for (int m = 0; m < 3; m++) {
        baton_runtime *ref = make(&f, MODES[m], NULL), *rt = make(&f, MODES[m], NULL);
        test_rng r = {test_fresh_seed()};
        void *xb[RUNS], *yb[RUNS], *want[RUNS];
        void *x = malloc(f.ii.nbytes), *got = malloc(f.oi.nbytes), *poison = malloc(f.oi.nbytes);
        test_poison(poison, f.oi.nbytes);
        baton_error err;
        baton_run_stats st0, st1;
        for (int pass = 0; pass < 2; pass++) {
            for (int k = 0; k < RUNS; k++) {
                xb[k] = caller_alloc(1, f.ii.nbytes);
                yb[k] = caller_alloc(1, f.oi.nbytes);
                want[k] = malloc(f.oi.nbytes);
                fill_input(&r, &f, x);
                run_copied(ref, &f, x, want[k]);
                to_device(xb[k], x, f.ii.nbytes);
                to_device(yb[k], poison, f.oi.nbytes);
            }
            baton_runtime_stats(rt, &st0);
            for (int k = 0; k < RUNS; k++) {
                baton_buffer bx = {GPU0, xb[k], f.ii.nbytes, f.ii.desc.dtype};
                baton_buffer by = {GPU0, yb[k], f.oi.nbytes, f.oi.desc.dtype};
                cr_assert_eq(baton_runtime_bind(rt, f.in, &bx, &err), 0, "%s", err.message);
                cr_assert_eq(baton_runtime_bind(rt, f.out, &by, &err), 0, "%s", err.message);
                cr_assert_eq(baton_runtime_run_async(rt, &err), 0, "%s", err.message);
            }
            cr_assert_eq(baton_runtime_wait(rt, &err), 0, "%s", err.message);
            baton_runtime_stats(rt, &st1);
            /* Pass 1 follows an unbinding, so its first run captures again (updated in place),
             * after which CUDA patches by capturing again (device_cuda.c), waiting each time:
             * only the first pass has the one wait. */
            if (pass == 0 && MODES[m] != BATON_SYNC_STRICT)
                cr_assert_eq(st1.host_waits - st0.host_waits, 1,
                             "%s mode: %lld host waits for %d queued runs; expected the one wait",
                             baton_sync_mode_name(MODES[m]),
                             (long long)(st1.host_waits - st0.host_waits), RUNS);
            cr_assert_eq(st1.runs - st0.runs, RUNS);
            for (int k = 0; k < RUNS; k++) {
                from_device(got, yb[k], f.oi.nbytes);
                cr_assert(memcmp(got, want[k], f.oi.nbytes) == 0,
                          "%s mode, pass %d, queued run %d: the output differs from the copied "
                          "one",
                          baton_sync_mode_name(MODES[m]), pass, k);
            }
            /* the last binding stays: one more queued run, then get_output waits for it */
            cr_assert_eq(baton_runtime_run_async(rt, &err), 0, "%s", err.message);
            memset(got, 0, f.oi.nbytes);
            cr_assert_eq(baton_runtime_get_output(rt, f.oi.name, got, f.oi.nbytes, &err), 0, "%s",
                         err.message);
            cr_assert(memcmp(got, want[RUNS - 1], f.oi.nbytes) == 0,
                      "%s mode: get_output after a queued run did not see its output",
                      baton_sync_mode_name(MODES[m]));
            cr_assert_eq(baton_runtime_wait(rt, &err), 0, "nothing is queued: %s", err.message);
            cr_assert_eq(baton_runtime_bind(rt, f.in, NULL, &err), 0, "%s", err.message);
            cr_assert_eq(baton_runtime_bind(rt, f.out, NULL, &err), 0, "%s", err.message);
            for (int k = 0; k < RUNS; k++) {
                caller_free(1, xb[k]);
                caller_free(1, yb[k]);
                free(want[k]);
            }
        }
        free(x);
        free(got);
        free(poison);
        baton_runtime_destroy(ref);
        baton_runtime_destroy(rt);
    }
    unload(&f);
}

/* A plan with CPU steps needs the host inside every run: run_async is a run there, and its
 * outputs are ready when it returns. */
Test(async_runs, a_plan_with_cpu_steps_runs_whole)
{
    NEED_BACKEND();
    fixture f;
    load(&f, RFC_PLAN);
    baton_runtime *ref = make(&f, BATON_SYNC_GRAPH, NULL), *rt = make(&f, BATON_SYNC_GRAPH, NULL);
    test_rng r = {test_fresh_seed()};
    void *x = malloc(f.ii.nbytes), *want = malloc(f.oi.nbytes), *got = malloc(f.oi.nbytes);
    void *yb = caller_alloc(0, f.oi.nbytes);
    baton_error err;
    baton_buffer by = {CPU, yb, f.oi.nbytes, f.oi.desc.dtype};
    cr_assert_eq(baton_runtime_bind(rt, f.out, &by, &err), 0, "%s", err.message);
    for (int run = 0; run < 3; run++) {
        fill_input(&r, &f, x);
        run_copied(ref, &f, x, want);
        cr_assert_eq(baton_runtime_set_input(rt, f.ii.name, x, f.ii.nbytes, &err), 0, "%s",
                     err.message);
        test_poison(yb, f.oi.nbytes);
        cr_assert_eq(baton_runtime_run_async(rt, &err), 0, "%s", err.message);
        memcpy(got, yb, f.oi.nbytes); /* no wait: the run was whole */
        cr_assert(memcmp(got, want, f.oi.nbytes) == 0, "run %d differs", run);
    }
    cr_assert_eq(baton_runtime_wait(rt, &err), 0, "%s", err.message);
    caller_free(0, yb);
    free(x);
    free(want);
    free(got);
    baton_runtime_destroy(ref);
    baton_runtime_destroy(rt);
    unload(&f);
}

static void expect_refused(baton_runtime *rt, int t, baton_buffer b, const char *needle)
{
    baton_error err;
    int rc = baton_runtime_bind(rt, t, &b, &err);
    cr_assert_eq(rc, BATON_EINVAL, "binding was accepted; wanted an error about '%s'", needle);
    cr_assert_eq(err.code, rc);
    cr_assert(strstr(err.message, needle), "message '%s' does not mention '%s'", err.message,
              needle);
}

Test(bind, refuses_what_does_not_fit_and_stays_usable)
{
    NEED_BACKEND();
    fixture f;
    load(&f, RFC_PLAN);
    baton_runtime *rt = make(&f, BATON_SYNC_GRAPH, NULL);
    void *x = caller_alloc(0, f.ii.nbytes + 512);
    baton_buffer good = {CPU, x, f.ii.nbytes, f.ii.desc.dtype}, b;
    baton_error err;
    cr_assert_eq(baton_runtime_bind(rt, f.in, &good, &err), 0, "%s", err.message);
    b = good, b.nbytes += 2;
    expect_refused(rt, f.in, b, "bytes");
    b = good, b.dtype = BATON_DTYPE_F32;
    expect_refused(rt, f.in, b, "f32");
    b = good, b.data = (char *)x + 16;
    expect_refused(rt, f.in, b, "misaligned");
    b = good, b.data = NULL;
    expect_refused(rt, f.in, b, "NULL");
    b = good, b.device = (baton_device){BATON_DEVICE_CUDA, 7};
    expect_refused(rt, f.in, b, "does not live on cuda:7");
    int inter = baton_plan_tensor_index(f.plan, "matmul"); /* the first layer's GEMM output */
    cr_assert(inter >= 0);
    expect_refused(rt, inter, good, "intermediate");
    cr_assert_eq(baton_runtime_bind(rt, 9999, &good, &err), BATON_EINVAL);
    /* the last good binding holds and the runtime runs */
    void *want = malloc(f.oi.nbytes), *got = malloc(f.oi.nbytes), *in = malloc(f.ii.nbytes);
    test_rng r = {test_fresh_seed()};
    fill_input(&r, &f, in);
    memcpy(x, in, f.ii.nbytes);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, f.oi.name, got, f.oi.nbytes, &err), 0);
    baton_runtime *ref = make(&f, BATON_SYNC_GRAPH, NULL);
    run_copied(ref, &f, in, want);
    cr_assert(memcmp(got, want, f.oi.nbytes) == 0);
    baton_runtime_destroy(ref);
    baton_runtime_destroy(rt);
    caller_free(0, x);
    free(want);
    free(got);
    free(in);
    unload(&f);
}

/* An input that a CPU step and a GPU step both read cannot live on the GPU alone. */
Test(bind, refuses_a_device_input_that_other_devices_read)
{
    NEED_BACKEND();
    static const char plan[] =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"two-readers\", \"tensors\": ["
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"input\"},"
        "{\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [64]},"
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"output\"}],"
        "\"steps\": ["
        "{\"name\": \"g\", \"kernel\": \"copy\", \"device\": \"cuda:0\", \"inputs\": [\"x\"], "
        "\"outputs\": [\"a\"]},"
        "{\"name\": \"c\", \"kernel\": \"add\", \"device\": \"cpu\", \"inputs\": [\"a\", \"x\"], "
        "\"outputs\": [\"y\"]}]}";
    baton_registry *reg;
    baton_plan *p;
    baton_error err;
    cr_assert_eq(baton_registry_create(&reg), 0);
    cr_assert_eq(baton_plan_load_string(reg, plan, sizeof plan - 1, "two-readers", NULL, &p, &err),
                 0, "%s", err.message);
    baton_options o;
    baton_options_init(&o);
    o.gpu = GPU;
    baton_runtime *rt;
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), 0, "%s", err.message);
    void *x = caller_alloc(1, 256);
    expect_refused(rt, 0, (baton_buffer){GPU0, x, 256, BATON_DTYPE_F32}, "bind it on the host");
    caller_free(1, x);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
    baton_registry_destroy(reg);
}

Test(arenas, caller_arenas_give_the_same_results)
{
    NEED_BACKEND();
    fixture f;
    load(&f, RFC_PLAN);
    int n = baton_plan_arena_count(f.plan);
    cr_assert_eq(n, 2, "the RFC plan uses the CPU and cuda:0");
    baton_arena ar[2];
    for (int i = 0; i < n; i++) {
        cr_assert_eq(baton_plan_arena_info(f.plan, i, &ar[i]), 0);
        cr_assert_gt(ar[i].nbytes, 0);
        ar[i].data = caller_alloc(ar[i].device.kind == BATON_DEVICE_CUDA, ar[i].nbytes);
    }
    cr_assert_eq(baton_plan_arena_info(f.plan, n, &ar[0]), BATON_EINVAL);
    cr_assert_eq(ar[0].device.kind, BATON_DEVICE_CPU);
    baton_options o;
    baton_options_init(&o);
    o.arenas = ar;
    o.n_arenas = n;
    for (int m = 0; m < 3; m++) {
        baton_runtime *ref = make(&f, MODES[m], NULL), *rt = make(&f, MODES[m], &o);
        test_rng r = {test_fresh_seed()};
        void *x = malloc(f.ii.nbytes), *want = malloc(f.oi.nbytes), *got = malloc(f.oi.nbytes);
        for (int run = 0; run < 3; run++) {
            fill_input(&r, &f, x);
            run_copied(ref, &f, x, want);
            run_copied(rt, &f, x, got);
            cr_assert(memcmp(got, want, f.oi.nbytes) == 0, "%s mode: caller arenas differ",
                      baton_sync_mode_name(MODES[m]));
        }
        free(x);
        free(want);
        free(got);
        baton_runtime_destroy(ref);
        baton_runtime_destroy(rt); /* must not free the caller's arenas (ASan would tell) */
    }
    /* what does not fit */
    baton_runtime *rt = NULL;
    baton_error err;
    o.gpu = GPU;
    baton_arena bad[2] = {ar[0], ar[1]};
    o.arenas = bad;
    bad[1].nbytes = ar[1].nbytes - 1;
    cr_assert_eq(baton_runtime_create(f.plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "needs"), "%s", err.message);
    bad[1] = ar[1];
    bad[0].data = (char *)ar[0].data + 64;
    cr_assert_eq(baton_runtime_create(f.plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "BATON_ARENA_ALIGN"), "%s", err.message);
    bad[0] = ar[1]; /* two for cuda:0 */
    cr_assert_eq(baton_runtime_create(f.plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "one arena per device"), "%s", err.message);
    /* one memory given for two devices (issue 38): each would overwrite the other's tensors */
    bad[0] = ar[0];
    bad[1] = ar[1];
    bad[1].data = ar[0].data;
    cr_assert_eq(baton_runtime_create(f.plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "overlap"), "%s", err.message);
    bad[1].data = (char *)ar[0].data + 256; /* a part of it */
    cr_assert_eq(baton_runtime_create(f.plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "overlap"), "%s", err.message);
    bad[1] = ar[1];
    bad[1].device.index = 5;
    cr_assert_eq(baton_runtime_create(f.plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "does not use"), "%s", err.message);
    cr_assert_null(rt);
    /* A caller built against the header before arenas existed: its options end earlier. */
    baton_options old;
    baton_options_init(&old);
    old.gpu = GPU;
    old.struct_size = offsetof(baton_options, arenas);
    old.n_arenas = 12345; /* past its struct_size: never read */
    cr_assert_eq(baton_runtime_create(f.plan, &old, &rt, &err), 0, "%s", err.message);
    baton_runtime_destroy(rt);
    for (int i = 0; i < n; i++)
        caller_free(ar[i].device.kind == BATON_DEVICE_CUDA, ar[i].data);
    unload(&f);
}

Test(streams, a_caller_stream_is_used_and_left_alone)
{
    NEED_BACKEND();
    fixture f;
    load(&f, RFC_PLAN);
    baton_options o;
    baton_options_init(&o);
    o.gpu = GPU;
    baton_runtime *rt = NULL;
    baton_error err;
    baton_stream s = {GPU0, (void *)0};
    o.streams = &s;
    o.n_streams = 1;
    cr_assert_eq(baton_runtime_create(f.plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "default stream"), "%s", err.message);
#ifdef TEST_ON_CUDA
    cudaStream_t cs;
    cr_assert_eq(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), cudaSuccess);
    s.stream = cs;
    for (int m = 0; m < 3; m++) {
        baton_runtime *ref = make(&f, MODES[m], NULL), *mine = make(&f, MODES[m], &o);
        void *x = malloc(f.ii.nbytes), *want = malloc(f.oi.nbytes), *got = malloc(f.oi.nbytes);
        test_rng r = {test_fresh_seed()};
        for (int run = 0; run < 3; run++) {
            fill_input(&r, &f, x);
            run_copied(ref, &f, x, want);
            run_copied(mine, &f, x, got);
            cr_assert(memcmp(got, want, f.oi.nbytes) == 0);
        }
        /* the run is done when it returns: nothing of it is left on the caller's stream */
        cr_assert_eq(cudaStreamQuery(cs), cudaSuccess);
        baton_runtime_destroy(mine);
        baton_runtime_destroy(ref);
        free(x);
        free(want);
        free(got);
    }
    cr_assert_eq(cudaStreamSynchronize(cs), cudaSuccess, "baton destroyed the caller's stream");
    cudaStreamDestroy(cs);
#else
    /* the test device has no CUDA stream to run on */
    s.stream = (void *)0x1000;
    cr_assert_eq(baton_runtime_create(f.plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "CUDA backend"), "%s", err.message);
#endif
    unload(&f);
}

/* ---- the log callback --------------------------------------------------------------------- */

static int log_count;
static baton_log_level log_level;
static char log_text[2048];

static void catch_log(void *user, baton_log_level level, const char *message)
{
    cr_assert_eq(user, &log_count);
    log_count++;
    log_level = level;
    snprintf(log_text, sizeof log_text, "%s", message);
}

Test(log, warnings_go_to_the_callback)
{
    static const char plan[] =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"far\", \"tensors\": ["
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"},"
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}],"
        "\"steps\": [{\"name\": \"c\", \"kernel\": \"copy\", \"device\": \"cuda:9\", "
        "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}]}";
    baton_registry *reg;
    baton_plan *p;
    baton_error err;
    cr_assert_eq(baton_registry_create(&reg), 0);
    cr_assert_eq(baton_plan_load_string(reg, plan, sizeof plan - 1, "far", NULL, &p, &err), 0, "%s",
                 err.message);
    baton_log_set(catch_log, &log_count);
    baton_runtime *rt;
    cr_assert_eq(baton_runtime_create(p, NULL, &rt, &err), 0, "%s", err.message);
    cr_assert_eq(log_count, 1);
    cr_assert_eq(log_level, BATON_LOG_WARNING);
    cr_assert(strstr(log_text, "cuda:9") && !strchr(log_text, '\n'), "%s", log_text);
    baton_runtime_destroy(rt);
    /* quiet still silences a runtime's warnings */
    baton_options o;
    baton_options_init(&o);
    o.quiet = 1;
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), 0, "%s", err.message);
    cr_assert_eq(log_count, 1);
    baton_runtime_destroy(rt);
    baton_log_set(NULL, NULL);
    baton_plan_free(p);
    baton_registry_destroy(reg);
}

/* ---- a kernel that needs no pack() -------------------------------------------------------- */

typedef struct host_state {
    float bias;
    int calls;
} host_state;

/* y = x * alpha + state->bias, reading shapes and attributes from the context. */
static int scale_kernel(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    (void)opaque;
    (void)len;
    host_state *st = ctx->user;
    if (ctx->sig->n_inputs != 1 || ctx->sig->n_outputs != 1 || !st)
        return BATON_EINVAL;
    /* the run sees the step as its check() saw it, the plan's tensor names included */
    if (!ctx->sig->input_names || !ctx->sig->output_names ||
        strcmp(ctx->sig->input_names[0], "x") != 0 || strcmp(ctx->sig->output_names[0], "y") != 0)
        return BATON_EINVAL;
    const baton_attr *alpha = baton_attrs_find(ctx->sig->attrs, ctx->sig->n_attrs, "alpha");
    if (!alpha)
        return BATON_EINVAL;
    int64_t n = baton_tensor_desc_numel(&ctx->sig->inputs[0]);
    if (n != baton_tensor_desc_numel(&ctx->sig->outputs[0]))
        return BATON_EINVAL;
    const float *x = buffers[0];
    float *y = buffers[1];
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * (float)alpha->f + st->bias;
    st->calls++;
    return 0;
}

static int scale_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t cap)
{
    if (a->inputs[0].dtype != BATON_DTYPE_F32) {
        snprintf(msg, cap, "x must be f32");
        return BATON_EPLAN;
    }
    if (!a->input_names || !a->output_names || strcmp(a->input_names[0], "x") != 0 ||
        strcmp(a->output_names[0], "y") != 0) {
        snprintf(msg, cap, "check() does not see the plan's tensor names x and y");
        return BATON_EPLAN;
    }
    expected[0] = a->inputs[0];
    return 0;
}

Test(targets, a_kernel_sees_its_descriptors_attributes_tensor_names_and_user_pointer)
{
    host_state st = {0.5f, 0};
    baton_target t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.name = "test.scale";
    t.kind = BATON_TARGET_KERNEL;
    t.n_inputs = t.n_outputs = 1;
    t.attrs[0] = (baton_attr_spec){"alpha", BATON_ATTR_FLOAT, 1, "the factor"};
    t.check = scale_check;
    t.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CPU, .kernel = scale_kernel};
    t.n_impls = 1;
    t.user = &st;
    baton_registry *reg;
    baton_error err;
    cr_assert_eq(baton_registry_create(&reg), 0);
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
    /* another user pointer for the same target is refused */
    host_state other = {0};
    t.user = &other;
    t.impls[0].device = BATON_DEVICE_CUDA;
    cr_assert_eq(baton_registry_add(reg, &t, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "user pointer"), "%s", err.message);
    static const char plan[] =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"scale\", \"tensors\": ["
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [3, 5], \"role\": \"input\"},"
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [3, 5], \"role\": \"output\"}],"
        "\"steps\": [{\"name\": \"s\", \"kernel\": \"test.scale\", \"device\": \"cpu\", "
        "\"inputs\": [\"x\"], \"outputs\": [\"y\"], \"attrs\": {\"alpha\": 3}}]}";
    baton_plan *p;
    cr_assert_eq(baton_plan_load_string(reg, plan, sizeof plan - 1, "scale", NULL, &p, &err), 0,
                 "%s", err.message);
    baton_runtime *rt;
    cr_assert_eq(baton_runtime_create(p, NULL, &rt, &err), 0, "%s", err.message);
    float x[15], y[15];
    for (int i = 0; i < 15; i++)
        x[i] = (float)i - 7;
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0);
    for (int i = 0; i < 15; i++)
        cr_assert_eq(y[i], x[i] * 3 + 0.5f, "y[%d] = %g", i, y[i]);
    cr_assert_eq(st.calls, 1);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
    baton_registry_destroy(reg);
}

/* A caller's buffer bound to two tensors, or overlapping another's, is refused (issue 38): the
 * plan's writes to one would overwrite the other. */
Test(bind, overlapping_buffers_are_refused)
{
    NEED_BACKEND();
    fixture f;
    load(&f, "examples/plans/rfc.json");
    baton_runtime *rt = make(&f, MODES[0], NULL);
    size_t n = f.ii.nbytes > f.oi.nbytes ? f.ii.nbytes : f.oi.nbytes;
    char *mem = caller_alloc(0, 2 * n + 512);
    baton_buffer bx = {CPU, mem, f.ii.nbytes, f.ii.desc.dtype};
    baton_error err;
    cr_assert_eq(baton_runtime_bind(rt, f.in, &bx, &err), 0, "%s", err.message);
    baton_buffer by = {CPU, mem, f.oi.nbytes, f.oi.desc.dtype};
    cr_expect_eq(baton_runtime_bind(rt, f.out, &by, &err), BATON_EINVAL);
    cr_expect(strstr(err.message, "overlaps the one bound to"), "%s", err.message);
    by.data = mem + 256; /* inside x's buffer (x is at least 256 bytes) */
    if (f.ii.nbytes > 256) {
        cr_expect_eq(baton_runtime_bind(rt, f.out, &by, &err), BATON_EINVAL);
        cr_expect(strstr(err.message, "overlaps"), "%s", err.message);
    }
    by.data = mem + ((f.ii.nbytes + 255) / 256) * 256; /* right after it: fine */
    cr_expect_eq(baton_runtime_bind(rt, f.out, &by, &err), 0, "%s", err.message);
    /* rebinding a tensor to its own buffer is no overlap */
    cr_expect_eq(baton_runtime_bind(rt, f.in, &bx, &err), 0, "%s", err.message);
    cr_expect_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    baton_runtime_destroy(rt);
    caller_free(0, mem);
    unload(&f);
}
