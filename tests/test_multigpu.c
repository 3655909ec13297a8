/* test_multigpu.c: plans over several GPUs: a tensor moving from one GPU to another (the reader's
 * copy waits on the writer's event, with no host wait; in graph mode as event nodes inside the
 * graphs or as stream waits around them), collective steps, and one runtime per GPU (ranks as
 * threads of this process, baton_options.world) against one runtime for all. Built twice: as
 * test_multigpu on two test devices (label cpu: "cuda:0" and "cuda:1" run on the test device,
 * and on the CPU fallback), and with TEST_ON_CUDA as test_multigpu_cuda on two real GPUs through
 * NCCL (label gpu; it skips with fewer than two). Results are compared bitwise with the same
 * computation on one device, host waits with what the analysis promises, and a run without the
 * cross-device wait must read stale data (a mutation the test device's delays expose). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "baton/baton_uv.h"
#include "plan/plan_internal.h"
#include "scheduler/pool.h"
#include "scheduler/runtime.h"
#include "scheduler/testing.h"
#include "tests/support.h"

#ifdef TEST_ON_CUDA
#define NEED_GPUS()                                                                                \
    do {                                                                                           \
        if (baton_cuda_device_count() < 2)                                                         \
            cr_skip("fewer than two CUDA devices: the multi-GPU tests need two");                  \
    } while (0)
static const baton_gpu_backend backends[] = {BATON_GPU_CUDA};
#else
#define NEED_GPUS() ((void)0)
static const baton_gpu_backend backends[] = {BATON_GPU_SIM, BATON_GPU_CPU};
#endif
#define N_BACKENDS ((int)(sizeof backends / sizeof backends[0]))

static baton_registry *reg;

static void setup(void)
{
    cr_assert_eq(baton_registry_create(&reg), 0);
}

static void teardown(void)
{
    baton_registry_destroy(reg);
}

/* On GPUs a rank that stops after NCCL's join leaves its peer waiting on the GPU without a
 * bound: each test ends after a minute there (and run_ranks gives up on a rank sooner), so a hang
 * costs a GPU call a minute, not the call. */
#ifdef TEST_ON_CUDA
#define SUITE_TIMEOUT_S    60
#define RANK_JOIN_S        45
#define RANK_RENDEZVOUS_MS 20000
#else
#define SUITE_TIMEOUT_S    300
#define RANK_JOIN_S        240
#define RANK_RENDEZVOUS_MS 0 /* the default */
#endif
TestSuite(multigpu, .init = setup, .fini = teardown, .timeout = SUITE_TIMEOUT_S);

enum { ROWS = 4, COLS = 64, N = ROWS * COLS };

/* Two GPUs: each adds to its own input; the sum over both (all_reduce) and both rows stacked
 * (all_gather) land on each; cuda:1 then reads cuda:0's sum (a GPU-to-GPU boundary) and a last
 * step on cuda:0 reads cuda:1's gather. */
static const char *two_gpus =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"two-gpus\", \"tensors\": ["
    "{\"name\": \"x0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
    "{\"name\": \"x1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
    "{\"name\": \"a0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"a1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"r0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"r1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"},"
    "{\"name\": \"g0\", \"dtype\": \"f32\", \"shape\": [8, 64], \"role\": \"output\"},"
    "{\"name\": \"g1\", \"dtype\": \"f32\", \"shape\": [8, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"o1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"},"
    "{\"name\": \"h0\", \"dtype\": \"f32\", \"shape\": [8, 64], \"role\": \"output\"}],\"steps\": ["
    "{\"name\": \"s0\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"x0\"], "
    "\"outputs\": [\"a0\"], \"attrs\": {\"value\": 1.0}},"
    "{\"name\": \"s1\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": [\"x1\"], "
    "\"outputs\": [\"a1\"], \"attrs\": {\"value\": 2.0}},"
    "{\"name\": \"ar\", \"collective\": \"all_reduce\", \"devices\": [\"cuda:0\", \"cuda:1\"], "
    "\"inputs\": [\"a0\", \"a1\"], \"outputs\": [\"r0\", \"r1\"], \"attrs\": {\"op\": \"sum\"}},"
    "{\"name\": \"ag\", \"collective\": \"all_gather\", \"devices\": [\"cuda:0\", \"cuda:1\"], "
    "\"inputs\": [\"a0\", \"a1\"], \"outputs\": [\"g0\", \"g1\"]},"
    "{\"name\": \"mv\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": [\"r0\"], "
    "\"outputs\": [\"o1\"], \"attrs\": {\"value\": 0.5}},"
    "{\"name\": \"back\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": "
    "[\"g1\"], \"outputs\": [\"h0\"], \"attrs\": {\"value\": -1.0}}]}";

/* The same arithmetic on one device: the sum by `add`, the gather read back as a0 and a1. */
static const char *one_gpu =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"one-gpu\", \"tensors\": ["
    "{\"name\": \"x0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
    "{\"name\": \"x1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
    "{\"name\": \"a0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"},"
    "{\"name\": \"a1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"},"
    "{\"name\": \"r\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"},"
    "{\"name\": \"o1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"},"
    "{\"name\": \"h0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"},"
    "{\"name\": \"h1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"}],\"steps\": ["
    "{\"name\": \"s0\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"x0\"], "
    "\"outputs\": [\"a0\"], \"attrs\": {\"value\": 1.0}},"
    "{\"name\": \"s1\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"x1\"], "
    "\"outputs\": [\"a1\"], \"attrs\": {\"value\": 2.0}},"
    "{\"name\": \"sum\", \"kernel\": \"add\", \"device\": \"cuda:0\", \"inputs\": [\"a0\", "
    "\"a1\"], \"outputs\": [\"r\"]},"
    "{\"name\": \"mv\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"r\"], "
    "\"outputs\": [\"o1\"], \"attrs\": {\"value\": 0.5}},"
    "{\"name\": \"b0\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"a0\"], "
    "\"outputs\": [\"h0\"], \"attrs\": {\"value\": -1.0}},"
    "{\"name\": \"b1\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"a1\"], "
    "\"outputs\": [\"h1\"], \"attrs\": {\"value\": -1.0}}]}";

static baton_plan *load(const char *json)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(
        baton_plan_load_string(reg, json, strlen(json), "multigpu.json", NULL, &plan, &err), 0,
        "%s", err.message);
    return plan;
}

static baton_runtime *make(const baton_plan *plan, baton_gpu_backend gpu, baton_sync_mode mode,
                           int delay_us)
{
    return test_runtime(plan, gpu, mode, delay_us, 1);
}

static void set(baton_runtime *rt, const char *name, const float *v)
{
    baton_error err = {0};
    cr_assert_eq(baton_runtime_set_input(rt, name, v, N * sizeof(float), &err), 0, "%s",
                 err.message);
}

static void get(baton_runtime *rt, const char *name, float *v, size_t n)
{
    baton_error err = {0};
    test_poison(v, n * sizeof(float));
    cr_assert_eq(baton_runtime_get_output(rt, name, v, n * sizeof(float), &err), 0, "%s",
                 err.message);
}

static const char *backend_name(baton_gpu_backend g)
{
    return g == BATON_GPU_CUDA ? "cuda" : g == BATON_GPU_SIM ? "sim" : "cpu";
}

/* Runs the two-GPU plan and its one-device twin three times each on fresh inputs (graph mode
 * captures on the first) and checks every output bitwise, and the host waits against the
 * analysis. */
static void check_two_equal_one(baton_plan *two, baton_plan *one, baton_gpu_backend gpu,
                                baton_sync_mode m)
{
    baton_runtime *rt2 = make(two, gpu, m, 0);
    baton_runtime *rt1 = make(one, gpu, m, 0);
    baton_error err = {0};
    for (int run = 0; run < 3; run++) {
        static float x0[N], x1[N], r1[N], g0[2 * N], o1[N], h0[2 * N];
        static float a0[N], a1[N], r[N], w1[N], k0[N], k1[N];
        test_rng rng = {test_fresh_seed()};
        test_fill_random(&rng, BATON_DTYPE_F32, x0, N, 1.0);
        test_fill_random(&rng, BATON_DTYPE_F32, x1, N, 1.0);
        set(rt2, "x0", x0);
        set(rt2, "x1", x1);
        set(rt1, "x0", x0);
        set(rt1, "x1", x1);
        baton_runtime_reset_stats(rt2);
        cr_assert_eq(baton_runtime_run(rt2, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_run(rt1, &err), 0, "%s", err.message);
        get(rt2, "r1", r1, N);
        get(rt2, "g0", g0, 2 * N);
        get(rt2, "o1", o1, N);
        get(rt2, "h0", h0, 2 * N);
        get(rt1, "a0", a0, N);
        get(rt1, "a1", a1, N);
        get(rt1, "r", r, N);
        get(rt1, "o1", w1, N);
        get(rt1, "h0", k0, N);
        get(rt1, "h1", k1, N);
        const char *how = backend_name(gpu);
        const char *mode = baton_sync_mode_name(m);
        cr_assert_arr_eq(r1, r, sizeof r, "%s %s run %d: all_reduce != add", how, mode, run);
        cr_assert_arr_eq(g0, a0, sizeof a0, "%s %s: all_gather's first rows", how, mode);
        cr_assert_arr_eq(g0 + N, a1, sizeof a1, "%s %s: all_gather's last rows", how, mode);
        cr_assert_arr_eq(o1, w1, sizeof w1, "%s %s: cuda:0 -> cuda:1", how, mode);
        cr_assert_arr_eq(h0, k0, sizeof k0, "%s %s: cuda:1 -> cuda:0", how, mode);
        cr_assert_arr_eq(h0 + N, k1, sizeof k1, "%s %s: cuda:1 -> cuda:0", how, mode);
        baton_run_stats st;
        baton_runtime_stats(rt2, &st);
        if (gpu != BATON_GPU_CPU)
            cr_assert_eq(st.host_waits, two->n_sync[m],
                         "%s %s: %lld host waits, the analysis promises %d", how, mode,
                         (long long)st.host_waits, two->n_sync[m]);
    }
    baton_runtime_destroy(rt1);
    baton_runtime_destroy(rt2);
}

Test(multigpu, two_gpus_equal_one_in_every_mode_with_the_waits_the_analysis_promises)
{
    NEED_GPUS();
    baton_plan *two = load(two_gpus), *one = load(one_gpu);
    /* what the analysis promises: no host wait at a GPU-to-GPU boundary */
    for (int b = 0; b < two->n_boundaries; b++)
        if (two->boundaries[b].from.kind == BATON_DEVICE_CUDA &&
            two->boundaries[b].to.kind == BATON_DEVICE_CUDA)
            cr_assert(!two->boundaries[b].host_wait, "boundary %d waits on the host", b);
    cr_assert_eq(two->n_sync[BATON_SYNC_GRAPH], 2, "graph mode: the end of the run on each GPU");
    cr_assert_eq(two->n_sync[BATON_SYNC_BOUNDARY], 2);
    for (int bk = 0; bk < N_BACKENDS; bk++)
        for (int m = 0; m < 3; m++)
            check_two_equal_one(two, one, backends[bk], (baton_sync_mode)m);
    baton_plan_free(two);
    baton_plan_free(one);
}

/* cuda:0 writes in two steps; cuda:1 reads what it wrote (a GPU-to-GPU boundary, no host wait). */
static const char *relay =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"relay\", \"tensors\": ["
    "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
    "{\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"}],\"steps\": ["
    "{\"name\": \"w\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"x\"], "
    "\"outputs\": [\"b\"], \"attrs\": {\"value\": 0.5}},"
    "{\"name\": \"w2\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"b\"], "
    "\"outputs\": [\"a\"], \"attrs\": {\"value\": 0.5}},"
    "{\"name\": \"r\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": [\"a\"], "
    "\"outputs\": [\"y\"], \"attrs\": {\"value\": 1.0}}]}";

/* Runs the relay plan `runs` times on fresh inputs; returns how many outputs were not what the
 * three additions give (each rounded to f32, as every backend's add_scalar rounds). */
static int relay_stale(baton_gpu_backend gpu, baton_sync_mode mode, int delay_us, int skip,
                       int runs, long long *peer_waits)
{
    baton_plan *plan = load(relay);
    baton_runtime *rt = make(plan, gpu, mode, delay_us);
    baton__runtime_skip_cross_waits(rt, skip);
    static float x[N], y[N];
    int stale = 0;
    baton_error err = {0};
    for (int run = 0; run < runs; run++) {
        test_rng rng = {test_fresh_seed()};
        test_fill_random(&rng, BATON_DTYPE_F32, x, N, 1.0);
        set(rt, "x", x);
        baton_runtime_reset_stats(rt);
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        get(rt, "y", y, N);
        for (int i = 0; i < N; i++) {
            float b = (float)((double)x[i] + 0.5), a = (float)((double)b + 0.5);
            stale += y[i] != (float)((double)a + 1.0);
        }
        baton_run_stats st;
        baton_runtime_stats(rt, &st);
        if (gpu != BATON_GPU_CPU)
            cr_assert_eq(st.host_waits, plan->n_sync[mode], "%s: %lld host waits, promised %d",
                         baton_sync_mode_name(mode), (long long)st.host_waits, plan->n_sync[mode]);
    }
    cr_assert_eq(plan->n_sync[BATON_SYNC_BOUNDARY], 2, "only the end of the run, on each GPU");
    for (int d = 1; peer_waits && d < rt->nd; d++) {
        dev_counters c = {0};
        if (rt->dev[d].ops->counters)
            rt->dev[d].ops->counters(rt->dev[d].ctx, &c);
        *peer_waits += c.peer_waits;
    }
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    return stale;
}

#ifndef TEST_ON_CUDA
/* cuda:0 writes slowly, cuda:1 reads at once: correct only because cuda:1's copy waits for
 * cuda:0's event. Without the wait (baton__runtime_skip_cross_waits) the copy reads the slot before
 * the write: the test device's per-operation delay makes that certain, so this is how a missing
 * wait would be caught. Strict mode waits on the host after each step, so it cannot race. */
Test(multigpu, a_missing_cross_device_wait_reads_stale_data)
{
    for (int m = 0; m < 3; m++) {
        cr_assert_eq(relay_stale(BATON_GPU_SIM, (baton_sync_mode)m, 20000, 0, 2, NULL), 0,
                     "%s: stale data with the wait", baton_sync_mode_name((baton_sync_mode)m));
        if (m != BATON_SYNC_STRICT)
            cr_assert_gt(relay_stale(BATON_GPU_SIM, (baton_sync_mode)m, 20000, 1, 2, NULL), 0,
                         "%s: no wait, yet nothing stale: the test cannot see a missing wait",
                         baton_sync_mode_name((baton_sync_mode)m));
    }
}
#else
/* The CUDA paths of a GPU-to-GPU boundary (an event wait between streams, the copy captured into
 * the reader's graph) on two GPUs, or on two streams of one GPU where only one is present
 * (DEV_TEST_CUDA_ALIAS): NCCL is not involved. */
Test(multigpu, a_gpu_to_gpu_boundary_runs_on_cuda_in_every_mode)
{
    if (baton_cuda_device_count() < 1)
        cr_skip("no CUDA device");
    if (baton_cuda_device_count() == 1)
        setenv(DEV_TEST_CUDA_ALIAS, "1", 1);
    /* the copy into the reader's arena by the copy engine, then as the copy kernel reading the
     * writer's memory, then with the host's waits asleep in the driver, then polling with naps
     * (device_cuda.c's BATON_PEER_COPY_KERNEL, BATON_CUDA_BLOCKING_WAIT, BATON_CUDA_WAIT_POLL_US)
     */
    static const char *const how[] = {NULL, "BATON_PEER_COPY_KERNEL", "BATON_CUDA_BLOCKING_WAIT",
                                      "BATON_CUDA_WAIT_POLL_US"};
    for (int v = 0; v < 4; v++) {
        if (how[v])
            setenv(how[v], v == 3 ? "20" : "1", 1);
        for (int m = 0; m < 3; m++)
            cr_assert_eq(relay_stale(BATON_GPU_CUDA, (baton_sync_mode)m, 0, 0, 20, NULL), 0,
                         "%s, %s: wrong results", baton_sync_mode_name((baton_sync_mode)m),
                         how[v] ? how[v] : "defaults");
        if (how[v])
            unsetenv(how[v]);
    }
    unsetenv(DEV_TEST_CUDA_ALIAS);
}
#endif

/* Graph mode keeps the order between GPUs either as event record and wait nodes inside the
 * graphs (the default) or as records and waits on the streams around the graphs' launches
 * (BATON_GRAPH_EVENT_NODES=0): both give the one-device results bitwise, a missing wait is caught
 * in both (test device), and with event nodes no wait is issued on a stream once the graphs are
 * captured, while without them one is issued per boundary and run. */
Test(multigpu, graph_mode_orders_gpus_by_event_nodes_or_stream_waits_alike)
{
    NEED_GPUS();
    baton_plan *two = load(two_gpus), *one = load(one_gpu);
#ifdef TEST_ON_CUDA
    const baton_gpu_backend gpu = BATON_GPU_CUDA;
    const int delay_us = 0, runs = 20;
#else
    const baton_gpu_backend gpu = BATON_GPU_SIM;
    const int delay_us = 20000, runs = 3;
#endif
    for (int nodes = 1; nodes >= 0; nodes--) {
        setenv(RT_EVENT_NODES_ENV, nodes ? "1" : "0", 1);
        check_two_equal_one(two, one, gpu, BATON_SYNC_GRAPH);
        long long peer_waits = 0;
        cr_assert_eq(relay_stale(gpu, BATON_SYNC_GRAPH, delay_us, 0, runs, &peer_waits), 0,
                     "event nodes %d: stale data with the wait", nodes);
        cr_assert_eq(peer_waits, nodes ? 0 : runs,
                     "event nodes %d: %lld waits issued on a stream over %d runs", nodes,
                     peer_waits, runs);
#ifndef TEST_ON_CUDA
        cr_assert_gt(relay_stale(gpu, BATON_SYNC_GRAPH, delay_us, 1, 2, NULL), 0,
                     "event nodes %d: no wait, yet nothing stale", nodes);
#endif
    }
    unsetenv(RT_EVENT_NODES_ENV);
    baton_plan_free(two);
    baton_plan_free(one);
}

#ifndef TEST_ON_CUDA
/* Rebinding the caller's buffers between runs patches (or re-captures) the graphs that hold the
 * event nodes, and the order between the GPUs holds: cuda:0 slow, each run on other buffers,
 * every output fresh, and still no wait issued on a stream. */
Test(multigpu, event_nodes_keep_the_order_when_buffers_are_rebound)
{
    baton_plan *plan = load(relay);
    baton_runtime *rt = make(plan, BATON_GPU_SIM, BATON_SYNC_GRAPH, 20000);
    static float xs[2][N] __attribute__((aligned(BATON_ARENA_ALIGN)));
    static float ys[2][N] __attribute__((aligned(BATON_ARENA_ALIGN)));
    baton_error err = {0};
    const int xt = baton_plan_tensor_index(plan, "x"), yt = baton_plan_tensor_index(plan, "y");
    for (int run = 0; run < 4; run++) {
        float *x = xs[run % 2], *y = ys[run % 2];
        test_rng rng = {test_fresh_seed()};
        test_fill_random(&rng, BATON_DTYPE_F32, x, N, 1.0);
        test_poison(y, sizeof ys[0]);
        baton_buffer bx = {{BATON_DEVICE_CPU, 0}, x, sizeof xs[0], BATON_DTYPE_F32};
        baton_buffer by = {{BATON_DEVICE_CPU, 0}, y, sizeof ys[0], BATON_DTYPE_F32};
        cr_assert_eq(baton_runtime_bind(rt, xt, &bx, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_bind(rt, yt, &by, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        for (int i = 0; i < N; i++) {
            float b = (float)((double)x[i] + 0.5), a = (float)((double)b + 0.5);
            cr_assert_eq(y[i], (float)((double)a + 1.0), "run %d: y[%d] stale", run, i);
        }
    }
    for (int d = 1; d < rt->nd; d++) {
        dev_counters c = {0};
        rt->dev[d].ops->counters(rt->dev[d].ctx, &c);
        cr_assert_eq(c.peer_waits, 0, "device %d: %lld waits issued on its stream", d,
                     c.peer_waits);
    }
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}
#endif

#ifndef TEST_ON_CUDA
/* What two plans below share: their tensors, then cuda:1's slow part, four steps from x1 to t,
 * ending the tensor list and opening the step list. */
#define CUDA1_SLOW_T                                                                               \
    "{\"name\": \"x0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"             \
    "{\"name\": \"x1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"             \
    "{\"name\": \"t1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"      \
    "{\"name\": \"t2\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"      \
    "{\"name\": \"t3\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"      \
    "{\"name\": \"t\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"       \
    "{\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"       \
    "{\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"       \
    "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"}],\"steps\": " \
    "["                                                                                            \
    "{\"name\": \"s1\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": "          \
    "[\"x1\"], "                                                                                   \
    "\"outputs\": [\"t1\"], \"attrs\": {\"value\": 0.5}},"                                         \
    "{\"name\": \"s1b\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": "         \
    "[\"t1\"], "                                                                                   \
    "\"outputs\": [\"t2\"], \"attrs\": {\"value\": 0.5}},"                                         \
    "{\"name\": \"s1c\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": "         \
    "[\"t2\"], "                                                                                   \
    "\"outputs\": [\"t3\"], \"attrs\": {\"value\": 0.5}},"                                         \
    "{\"name\": \"s1d\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": "         \
    "[\"t3\"], "                                                                                   \
    "\"outputs\": [\"t\"], \"attrs\": {\"value\": 0.5}},"

/* cuda:1 makes t, slowly (four steps); cuda:0 runs, hands a to the CPU, and its next segment
 * (queued ahead behind the gate, before the CPU step runs) adds the CPU's b and cuda:1's t: its
 * graph holds the gate and then the wait for cuda:1, and the result is fresh with every device
 * slow. */
static const char *ahead_plan =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"ahead\", \"tensors\": [" CUDA1_SLOW_T
    "{\"name\": \"s0\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"x0\"], "
    "\"outputs\": [\"a\"], \"attrs\": {\"value\": 1.0}},"
    "{\"name\": \"c\", \"kernel\": \"add_scalar\", \"device\": \"cpu\", \"inputs\": [\"a\"], "
    "\"outputs\": [\"b\"], \"attrs\": {\"value\": 0.5}},"
    "{\"name\": \"s2\", \"kernel\": \"add\", \"device\": \"cuda:0\", \"inputs\": [\"b\", \"t\"], "
    "\"outputs\": [\"y\"]}]}";

Test(multigpu, a_segment_queued_ahead_waits_for_the_other_gpu_inside_its_graph)
{
    baton_plan *plan = load(ahead_plan);
    static float x0[N], x1[N], y[N];
    for (int nodes = 1; nodes >= 0; nodes--) {
        setenv(RT_EVENT_NODES_ENV, nodes ? "1" : "0", 1);
        baton_runtime *rt = make(plan, BATON_GPU_SIM, BATON_SYNC_GRAPH, 20000);
        unsetenv(RT_EVENT_NODES_ENV);
        baton_error err = {0};
        for (int run = 0; run < 3; run++) {
            test_rng rng = {test_fresh_seed()};
            test_fill_random(&rng, BATON_DTYPE_F32, x0, N, 1.0);
            test_fill_random(&rng, BATON_DTYPE_F32, x1, N, 1.0);
            set(rt, "x0", x0);
            set(rt, "x1", x1);
            cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
            get(rt, "y", y, N);
            for (int i = 0; i < N; i++) {
                float a = (float)((double)x0[i] + 1.0), b = (float)((double)a + 0.5), t = x1[i];
                for (int k = 0; k < 4; k++) /* cuda:1's four steps, each rounded */
                    t = (float)((double)t + 0.5);
                cr_assert_eq(y[i], (float)((double)b + (double)t), "nodes %d run %d: y[%d]", nodes,
                             run, i);
            }
        }
        baton_run_stats st;
        baton_runtime_stats(rt, &st);
        cr_assert_eq(st.queued_ahead, 3, "nodes %d: s2 was queued ahead %lld times of 3", nodes,
                     (long long)st.queued_ahead);
        baton_runtime_destroy(rt);
    }
    baton_plan_free(plan);
}
#endif

/* ---- one process per GPU (baton_options.world): ranks as threads of this process ---------- */

typedef struct rank_job {
    const baton_plan *plan;
    baton_gpu_backend gpu;
    baton_sync_mode mode;
    int rank, world, delay_us, runs, timeout_ms;
    const char *path;
    const char *inputs[4]; /* NULL-terminated, each N floats from in[] */
    const float *in[4];
    const char *outputs[4]; /* this rank's outputs, into out[] (their sizes in n_out) */
    float *out[4];
    size_t n_out[4];
    int create_only;
    int rc;
    char msg[BATON_ERROR_MAX];
} rank_job;

/* One rank: create (which meets the other ranks), set the inputs, run, read this rank's outputs.
 * No assertion here (a thread of its own): the test checks rc and msg. */
static void *rank_main(void *arg)
{
    rank_job *j = arg;
    baton_options o = test_options(j->gpu, j->mode, j->delay_us, 1);
    o.rank = j->rank;
    o.world = j->world;
    o.rendezvous = j->path;
    o.rendezvous_timeout_ms = j->timeout_ms ? j->timeout_ms : RANK_RENDEZVOUS_MS;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    j->rc = baton_runtime_create(j->plan, &o, &rt, &err);
    for (int k = 0; !j->rc && !j->create_only && j->inputs[k]; k++)
        j->rc = baton_runtime_set_input(rt, j->inputs[k], j->in[k], N * sizeof(float), &err);
    for (int r = 0; !j->rc && !j->create_only && r < j->runs; r++)
        j->rc = baton_runtime_run(rt, &err);
    for (int k = 0; !j->rc && !j->create_only && j->outputs[k]; k++) {
        test_poison(j->out[k], j->n_out[k] * sizeof(float));
        j->rc = baton_runtime_get_output(rt, j->outputs[k], j->out[k], j->n_out[k] * sizeof(float),
                                         &err);
    }
    snprintf(j->msg, sizeof j->msg, "%s", err.message);
    baton_runtime_destroy(rt);
    return NULL;
}

/* Runs the ranks as threads and waits for them, RANK_JOIN_S at most: a rank still running then
 * is reported as hung (the test's process ends, and the rank with it). */
static void run_ranks(rank_job *jobs, int world)
{
    pthread_t th[4];
    for (int r = 0; r < world; r++)
        cr_assert_eq(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += RANK_JOIN_S;
    for (int r = 0; r < world; r++) {
        int e = pthread_timedjoin_np(th[r], NULL, &until);
        if (e)
            cr_assert_fail(
                "rank %d of %d did not finish within %d s (a wait between the ranks that "
                "never ends: a send without its receive, or a rank that stopped after the "
                "join)",
                r, world, RANK_JOIN_S);
    }
}

/* A fresh rendezvous path per use: a file left behind would make rank 0 refuse to start. */
static void rendezvous_path(char *buf, size_t len, const char *what)
{
    static int serial;
    snprintf(buf, len, "%s/baton-test-%s-%ld-%d", P_tmpdir, what, (long)getpid(), ++serial);
    unlink(buf);
}

#ifdef TEST_ON_CUDA
static const baton_gpu_backend rank_gpu = BATON_GPU_CUDA;
#else
static const baton_gpu_backend rank_gpu = BATON_GPU_SIM;
#endif

/* Two ranks run the two-GPU plan (collectives, a tensor each way between the GPUs): each makes
 * the outputs of its GPU with the bits of the one-process run, in every mode. */
Test(multigpu, two_ranks_equal_one_process_bitwise_in_every_mode)
{
    NEED_GPUS();
    baton_plan *two = load(two_gpus);
    static float x0[N], x1[N], r1[N], g0[2 * N], o1[N], h0[2 * N];
    static float w_r1[N], w_g0[2 * N], w_o1[N], w_h0[2 * N];
    for (int m = 0; m < 3; m++) {
        test_rng rng = {test_fresh_seed()};
        test_fill_random(&rng, BATON_DTYPE_F32, x0, N, 1.0);
        test_fill_random(&rng, BATON_DTYPE_F32, x1, N, 1.0);
        baton_runtime *one = make(two, rank_gpu, (baton_sync_mode)m, 0);
        baton_error err = {0};
        set(one, "x0", x0);
        set(one, "x1", x1);
        cr_assert_eq(baton_runtime_run(one, &err), 0, "%s", err.message);
        get(one, "r1", w_r1, N);
        get(one, "g0", w_g0, 2 * N);
        get(one, "o1", w_o1, N);
        get(one, "h0", w_h0, 2 * N);
        baton_runtime_destroy(one);
        char path[256];
        rendezvous_path(path, sizeof path, "two");
        rank_job jobs[2];
        memset(jobs, 0, sizeof jobs);
        for (int r = 0; r < 2; r++) {
            jobs[r] = (rank_job){.plan = two,
                                 .gpu = rank_gpu,
                                 .mode = (baton_sync_mode)m,
                                 .rank = r,
                                 .world = 2,
                                 .runs = 3, /* graph mode captures on the first */
                                 .path = path,
                                 .inputs = {"x0", "x1"},
                                 .in = {x0, x1}};
        }
        jobs[0].outputs[0] = "g0", jobs[0].out[0] = g0, jobs[0].n_out[0] = 2 * N;
        jobs[0].outputs[1] = "h0", jobs[0].out[1] = h0, jobs[0].n_out[1] = 2 * N;
        jobs[1].outputs[0] = "r1", jobs[1].out[0] = r1, jobs[1].n_out[0] = N;
        jobs[1].outputs[1] = "o1", jobs[1].out[1] = o1, jobs[1].n_out[1] = N;
        run_ranks(jobs, 2);
        const char *mode = baton_sync_mode_name((baton_sync_mode)m);
        for (int r = 0; r < 2; r++)
            cr_assert_eq(jobs[r].rc, 0, "%s: rank %d: %s", mode, r, jobs[r].msg);
        cr_assert_arr_eq(g0, w_g0, sizeof w_g0, "%s: rank 0's all_gather", mode);
        cr_assert_arr_eq(h0, w_h0, sizeof w_h0, "%s: rank 0's h0 (received from rank 1)", mode);
        cr_assert_arr_eq(r1, w_r1, sizeof w_r1, "%s: rank 1's all_reduce", mode);
        cr_assert_arr_eq(o1, w_o1, sizeof w_o1, "%s: rank 1's o1 (received from rank 0)", mode);
        cr_assert_eq(access(path, F_OK), -1, "rank 0 removes the rendezvous file");
    }
    baton_plan_free(two);
}

/* The relay plan split over two ranks, rank 0 slow: rank 1's receive waits for rank 0's send,
 * whatever the delay, in every mode (test device; on CUDA without a delay). */
Test(multigpu, a_rank_receives_what_the_other_rank_made_in_every_mode)
{
    NEED_GPUS();
    baton_plan *plan = load(relay);
    static float x[N], y[N];
    for (int m = 0; m < 3; m++) {
        test_rng rng = {test_fresh_seed()};
        test_fill_random(&rng, BATON_DTYPE_F32, x, N, 1.0);
        char path[256];
        rendezvous_path(path, sizeof path, "relay");
        rank_job jobs[2];
        memset(jobs, 0, sizeof jobs);
        for (int r = 0; r < 2; r++)
            jobs[r] = (rank_job){.plan = plan,
                                 .gpu = rank_gpu,
                                 .mode = (baton_sync_mode)m,
                                 .rank = r,
                                 .world = 2,
                                 .delay_us = rank_gpu == BATON_GPU_SIM && r == 0 ? 20000 : 0,
                                 .runs = 2,
                                 .path = path,
                                 .inputs = {"x"},
                                 .in = {x}};
        jobs[1].outputs[0] = "y", jobs[1].out[0] = y, jobs[1].n_out[0] = N;
        run_ranks(jobs, 2);
        for (int r = 0; r < 2; r++)
            cr_assert_eq(jobs[r].rc, 0, "rank %d: %s", r, jobs[r].msg);
        for (int i = 0; i < N; i++) {
            float b = (float)((double)x[i] + 0.5), a = (float)((double)b + 0.5);
            cr_assert_eq(y[i], (float)((double)a + 1.0), "%s: y[%d] stale",
                         baton_sync_mode_name((baton_sync_mode)m), i);
        }
    }
    baton_plan_free(plan);
}

/* What goes wrong when ranks are launched wrongly says what to do. */
Test(multigpu, ranks_launched_wrongly_are_clear_errors)
{
    NEED_GPUS();
    baton_plan *plan = load(relay);
    char path[256];
    rendezvous_path(path, sizeof path, "alone");
    /* rank 1 alone: no file appears */
    rank_job j = {.plan = plan,
                  .gpu = rank_gpu,
                  .rank = 1,
                  .world = 2,
                  .path = path,
                  .timeout_ms = 200,
                  .create_only = 1};
    rank_main(&j);
    cr_assert_eq(j.rc, BATON_ESTATE, "%s", j.msg);
    cr_assert(strstr(j.msg, "no rendezvous file") && strstr(j.msg, path), "%s", j.msg);
    /* a file left by an earlier launch */
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fclose(f);
    j.rank = 0;
    rank_main(&j);
    cr_assert_eq(j.rc, BATON_ESTATE, "%s", j.msg);
    cr_assert(strstr(j.msg, "exists already"), "%s", j.msg);
    unlink(path);
    /* rank 0 alone: rank 1 never arrives, which rank 0 sees before anything waits without a
     * bound (NCCL's own join has none): an error after the timeout, with its files removed */
    rank_main(&j);
    cr_assert_eq(j.rc, BATON_ESTATE, "%s", j.msg);
    cr_assert(strstr(j.msg, "rank 1 did not arrive"), "%s", j.msg);
    char marker[300];
    snprintf(marker, sizeof marker, "%s.rank0", path);
    cr_assert_eq(access(path, F_OK), -1, "rank 0 removes the rendezvous file after a failed join");
    cr_assert_eq(access(marker, F_OK), -1, "rank 0 removes its marker after a failed join");
    /* a marker left by an earlier launch is refused like a stale id */
    snprintf(marker, sizeof marker, "%s.rank1", path);
    f = fopen(marker, "w");
    cr_assert(f);
    fclose(f);
    rank_main(&j);
    cr_assert_eq(j.rc, BATON_ESTATE, "%s", j.msg);
    cr_assert(strstr(j.msg, "exists already"), "%s", j.msg);
    unlink(marker);
    /* options out of range, and a world smaller than the plan */
    j.rank = 2;
    rank_main(&j);
    cr_assert_eq(j.rc, BATON_EINVAL, "%s", j.msg);
    j.rank = 0;
    j.world = 1;
    rank_main(&j);
    cr_assert_eq(j.rc, BATON_EINVAL, "%s", j.msg);
    cr_assert(strstr(j.msg, "cuda:1") && strstr(j.msg, "world"), "%s", j.msg);
    j.world = 2;
    j.path = NULL;
    rank_main(&j);
    cr_assert_eq(j.rc, BATON_EINVAL, "%s", j.msg);
    cr_assert(strstr(j.msg, "rendezvous"), "%s", j.msg);
    baton_plan_free(plan);
}

#ifndef TEST_ON_CUDA
/* A rank whose partner joined but never runs fails its run after the timeout (test device: every
 * wait between ranks is bounded), and both ranks close cleanly. */
Test(multigpu, a_receive_from_a_rank_that_never_sends_fails_after_the_timeout)
{
    baton_plan *plan = load(relay);
    char path[256];
    rendezvous_path(path, sizeof path, "idle");
    static float x[N], y[N];
    rank_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < 2; r++)
        jobs[r] = (rank_job){.plan = plan,
                             .gpu = BATON_GPU_SIM,
                             .mode = BATON_SYNC_GRAPH,
                             .rank = r,
                             .world = 2,
                             .runs = 1,
                             .timeout_ms = 1000,
                             .path = path,
                             .inputs = {"x"},
                             .in = {x}};
    jobs[0].create_only = 1; /* joins, then never runs: nothing is sent */
    jobs[1].outputs[0] = "y", jobs[1].out[0] = y, jobs[1].n_out[0] = N;
    run_ranks(jobs, 2);
    cr_assert_eq(jobs[0].rc, 0, "%s", jobs[0].msg);
    cr_assert_eq(jobs[1].rc, BATON_ESTATE, "%s", jobs[1].msg);
    cr_assert(strstr(jobs[1].msg, "rank 0 did not send within 1000 ms"), "%s", jobs[1].msg);
    baton_plan_free(plan);
}
#endif

/* A CPU step that reads what another rank's GPU made cannot run on this rank: refused at create,
 * naming the tensor. */
static const char *cpu_reads_gpu1 =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"cpu-reads\", \"tensors\": ["
    "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
    "{\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"}],\"steps\": ["
    "{\"name\": \"g0\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"x\"], "
    "\"outputs\": [\"a\"], \"attrs\": {\"value\": 0.5}},"
    "{\"name\": \"g1\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": [\"a\"], "
    "\"outputs\": [\"b\"], \"attrs\": {\"value\": 0.5}},"
    "{\"name\": \"c\", \"kernel\": \"add_scalar\", \"device\": \"cpu\", \"inputs\": [\"b\"], "
    "\"outputs\": [\"y\"], \"attrs\": {\"value\": 1.0}}]}";

Test(multigpu, a_cpu_step_reading_another_ranks_gpu_is_refused)
{
    NEED_GPUS();
    baton_plan *plan = load(cpu_reads_gpu1);
    char path[256];
    rendezvous_path(path, sizeof path, "cpu");
    rank_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < 2; r++)
        jobs[r] = (rank_job){
            .plan = plan, .gpu = rank_gpu, .rank = r, .world = 2, .path = path, .create_only = 1};
    run_ranks(jobs, 2);
    cr_assert_eq(jobs[0].rc, BATON_ENOTSUP, "%s", jobs[0].msg);
    cr_assert(strstr(jobs[0].msg, "'b'") && strstr(jobs[0].msg, "CPU step"), "%s", jobs[0].msg);
    cr_assert_eq(jobs[1].rc, 0, "rank 1 makes b itself: %s", jobs[1].msg);
    baton_plan_free(plan);
}

#ifndef TEST_ON_CUDA
/* Two GPUs with nothing between them: y0 = x0 + 1 on cuda:0, y1 = x1 + 2 on cuda:1. */
static const char *apart =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"apart\", \"tensors\": ["
    "{\"name\": \"x0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
    "{\"name\": \"x1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
    "{\"name\": \"y0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"},"
    "{\"name\": \"y1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": "
    "\"output\"}],\"steps\": ["
    "{\"name\": \"k0\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": "
    "[\"x0\"], \"outputs\": [\"y0\"], \"attrs\": {\"value\": 1.0}},"
    "{\"name\": \"k1\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": "
    "[\"x1\"], \"outputs\": [\"y1\"], \"attrs\": {\"value\": 2.0}}]}";

/* Two GPUs with nothing between them run at once: on the test device each operation starts 50 ms
 * late, so the kernels of cuda:0 and cuda:1 start together in the devices' timelines only if
 * neither waited for the other (no host wait, no event). */
Test(multigpu, independent_segments_on_two_gpus_run_concurrently)
{
    baton_plan *plan = load(apart);
    const float zero[N] = {0};
    for (int m = BATON_SYNC_BOUNDARY; m <= BATON_SYNC_GRAPH; m++) {
        baton_runtime *rt = make(plan, BATON_GPU_SIM, (baton_sync_mode)m, 50000);
        set(rt, "x0", zero);
        set(rt, "x1", zero);
        cr_assert_eq(baton_runtime_trace_begin(rt, 64), 0);
        baton_error err = {0};
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        int64_t t0[2] = {0, 0}, t1[2] = {0, 0};
        for (int g = 0; g < 2; g++) {
            baton_device dev = {BATON_DEVICE_CUDA, g};
            const dev_trace *t = &rt->dev_trace[baton__plan_memory_index(plan, dev)];
            size_t n = atomic_load(&t->n);
            for (size_t i = 0; i < n; i++)
                if (strcmp(t->spans[i].cat, "kernel") == 0) {
                    t0[g] = t->spans[i].t0;
                    t1[g] = t->spans[i].t1;
                }
            cr_assert(t1[g] > 0, "%s: no kernel in cuda:%d's timeline",
                      baton_sync_mode_name((baton_sync_mode)m), g);
        }
        /* run one after the other, the second GPU's kernel would start two delays (a copy
         * and a kernel, 100 ms) after the first's; at once, well within one (a loaded machine
         * may wake a worker late, never by a whole delay) */
        int64_t apart = t0[0] > t0[1] ? t0[0] - t0[1] : t0[1] - t0[0];
        cr_assert_lt(apart, 50000000,
                     "%s: the two GPUs' kernels started %.1f ms apart: one waited for the other",
                     baton_sync_mode_name((baton_sync_mode)m), apart / 1e6);
        baton_runtime_destroy(rt);
    }
    baton_plan_free(plan);
}
#endif

#ifndef TEST_ON_CUDA
/* The end of a run records every GPU's event before the host waits for the first. Recorded only
 * when the wait for cuda:0 has returned, cuda:1's event costs one more trip to its GPU and back
 * after work that is already done (BATON_END_RECORDS_FIRST=0 keeps that order, to time both).
 * The devices' records and waits of the end-of-run slot are logged through a table that wraps
 * the test device's. */
static const dev_ops *spied;
static dev_ctx *spy_ctx[2];
static char spy_log[32];
static int spy_n;

static void spy_note(dev_ctx *c, char what)
{
    for (int g = 0; g < 2; g++)
        if (c == spy_ctx[g] && spy_n + 2 < (int)sizeof spy_log) {
            spy_log[spy_n++] = what;
            spy_log[spy_n++] = (char)('0' + g);
        }
}

static int spy_record(dev_ctx *c, int slot, baton_error *err)
{
    if (slot == WAIT_SLOT)
        spy_note(c, 'r');
    return spied->record(c, slot, err);
}

static int spy_wait(dev_ctx *c, int slot, const char *where, baton_error *err)
{
    if (slot == WAIT_SLOT)
        spy_note(c, 'w');
    return spied->wait(c, slot, where, err);
}

Test(multigpu, the_end_of_a_run_records_every_gpus_event_before_the_first_wait)
{
    baton_plan *plan = load(apart);
    const float zero[N] = {0};
    for (int m = BATON_SYNC_BOUNDARY; m <= BATON_SYNC_GRAPH; m++)
        for (int first = 1; first >= 0; first--) {
            setenv(RT_END_RECORDS_ENV, first ? "1" : "0", 1);
            baton_runtime *rt = make(plan, BATON_GPU_SIM, (baton_sync_mode)m, 0);
            unsetenv(RT_END_RECORDS_ENV);
            static dev_ops spy;
            const baton_device g0 = {BATON_DEVICE_CUDA, 0}, g1 = {BATON_DEVICE_CUDA, 1};
            rt_device *d0 = &rt->dev[baton__plan_memory_index(plan, g0)];
            rt_device *d1 = &rt->dev[baton__plan_memory_index(plan, g1)];
            spied = d0->ops;
            spy = *spied;
            spy.record = spy_record;
            spy.wait = spy_wait;
            d0->ops = d1->ops = &spy;
            spy_ctx[0] = d0->ctx;
            spy_ctx[1] = d1->ctx;
            set(rt, "x0", zero);
            set(rt, "x1", zero);
            baton_error err = {0};
            for (int r = 0; r < 2; r++) { /* the first run captures in graph mode */
                spy_n = 0;
                memset(spy_log, 0, sizeof spy_log);
                cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
            }
            const char *want = first ? "r0r1w0w1" : "r0w0r1w1";
            cr_assert_str_eq(spy_log, want, "%s, BATON_END_RECORDS_FIRST=%d: %s, not %s",
                             baton_sync_mode_name((baton_sync_mode)m), first, spy_log, want);
            float y[N];
            get(rt, "y1", y, N);
            cr_assert_eq(y[0], 2.0f);
            d0->ops = d1->ops = spied;
            baton_runtime_destroy(rt);
        }
    baton_plan_free(plan);
}
#endif

#ifndef TEST_ON_CUDA
enum { POOL_JOBS = 7 };

typedef struct pool_slot {
    baton_job job;
    baton_binding in[2], out[2];
    float x0[N], x1[N], r1[N], o1[N];
    int status, called;
} pool_slot;

static void pool_done(baton_job *job, int status)
{
    pool_slot *p = job->data;
    p->status = status;
    p->called++;
}

static void pool_closed(void *arg)
{
    *(int *)arg = 1;
}

/* Runs in flight on a baton_uv pool over two GPUs: each instance has its own streams, events and
 * collective rendezvous; every run equals a synchronous run of the same inputs. */
Test(multigpu, runs_in_flight_over_two_gpus_equal_synchronous_runs)
{
    baton_plan *two = load(two_gpus);
    baton_runtime *sync_rt = make(two, BATON_GPU_SIM, BATON_SYNC_GRAPH, 0);
    baton_options o;
    baton_options_init(&o);
    o.gpu = BATON_GPU_SIM;
    o.quiet = 1;
    o.sim_delay_us = 500;
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_pool_create(&loop, two, &o, 3, &pool, &err), 0, "%s", err.message);
    static pool_slot slots[POOL_JOBS];
    test_rng rng = {test_fresh_seed()};
    for (int j = 0; j < POOL_JOBS; j++) {
        pool_slot *p = &slots[j];
        baton_job_init(&p->job);
        p->job.data = p;
        test_fill_random(&rng, BATON_DTYPE_F32, p->x0, N, 1.0);
        test_fill_random(&rng, BATON_DTYPE_F32, p->x1, N, 1.0);
        test_poison(p->r1, sizeof p->r1);
        test_poison(p->o1, sizeof p->o1);
        p->in[0] = (baton_binding){"x0", p->x0, sizeof p->x0};
        p->in[1] = (baton_binding){"x1", p->x1, sizeof p->x1};
        p->out[0] = (baton_binding){"r1", p->r1, sizeof p->r1};
        p->out[1] = (baton_binding){"o1", p->o1, sizeof p->o1};
        p->job.inputs = p->in;
        p->job.n_inputs = 2;
        p->job.outputs = p->out;
        p->job.n_outputs = 2;
        cr_assert_eq(baton_pool_submit(pool, &p->job, pool_done), 0, "%s", p->job.err.message);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    for (int j = 0; j < POOL_JOBS; j++) {
        pool_slot *p = &slots[j];
        cr_assert_eq(p->called, 1);
        cr_assert_eq(p->status, 0, "job %d: %s", j, p->job.err.message);
        static float r1[N], o1[N];
        set(sync_rt, "x0", p->x0);
        set(sync_rt, "x1", p->x1);
        cr_assert_eq(baton_runtime_run(sync_rt, &err), 0, "%s", err.message);
        get(sync_rt, "r1", r1, N);
        get(sync_rt, "o1", o1, N);
        cr_assert_arr_eq(p->r1, r1, sizeof r1, "job %d: all_reduce differs", j);
        cr_assert_arr_eq(p->o1, o1, sizeof o1, "job %d: cuda:0 -> cuda:1 differs", j);
    }
    int closed = 0;
    baton_pool_close(pool, pool_closed, &closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert(closed);
    cr_assert_eq(uv_loop_close(&loop), 0);
    baton_runtime_destroy(sync_rt);
    baton_plan_free(two);
}
#endif

#ifndef TEST_ON_CUDA
/* Two pipeline stages (scripts/pipeline.py's form): two steps on cuda:0, then two on cuda:1 that
 * read what cuda:0 made, meeting at a GPU-to-GPU boundary. */
static const char *two_stages =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"stages\", \"tensors\": ["
    "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
    "{\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"c\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"intermediate\"},"
    "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"}],\"steps\": ["
    "{\"name\": \"p0\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"x\"], "
    "\"outputs\": [\"a\"], \"attrs\": {\"value\": 1.0}},"
    "{\"name\": \"p0b\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"a\"], "
    "\"outputs\": [\"b\"], \"attrs\": {\"value\": 0.5}},"
    "{\"name\": \"p1\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": [\"b\"], "
    "\"outputs\": [\"c\"], \"attrs\": {\"value\": 0.25}},"
    "{\"name\": \"p1b\", \"kernel\": \"add_scalar\", \"device\": \"cuda:1\", \"inputs\": [\"c\"], "
    "\"outputs\": [\"y\"], \"attrs\": {\"value\": 2.0}}]}";

typedef struct stage_flight {
    baton_pool *pool;
    pool_slot slot[2];
    uv_timer_t later;
} stage_flight;

static void submit_second(uv_timer_t *t)
{
    stage_flight *f = t->data;
    cr_assert_eq(baton_pool_submit_to(f->pool, 1, &f->slot[1].job, pool_done), 0, "%s",
                 f->slot[1].job.err.message);
    uv_close((uv_handle_t *)t, NULL);
}

/* The one graph span of instance rt's run on GPU g (the test device's timeline of that GPU). */
static void stage_span(baton_runtime *rt, int g, int64_t *t0, int64_t *t1)
{
    baton_device dev = {BATON_DEVICE_CUDA, g};
    const dev_trace *t = &rt->dev_trace[baton__plan_memory_index(rt->plan, dev)];
    *t0 = *t1 = 0;
    for (size_t i = 0; i < atomic_load(&t->n); i++)
        if (strcmp(t->spans[i].cat, "graph") == 0) {
            cr_assert_eq(*t1, 0, "cuda:%d ran two graphs for one run", g);
            *t0 = t->spans[i].t0;
            *t1 = t->spans[i].t1;
        }
    cr_assert_gt(*t1, 0, "no graph in cuda:%d's timeline", g);
}

/* Runs in flight on a pool pipeline a two-stage plan: the next run's first stage runs on cuda:0
 * while the previous run's second stage runs on cuda:1. Each operation of the test device starts
 * 20 ms late; run B is submitted once run A's first stage is done. B's stage on cuda:0 must start
 * before A's stage on cuda:1 ends: it fails if anything ties B's first stage to A's second (the
 * pool's runs serialised on one thread or lock, a stream, event or buffer shared by the
 * instances), with the order between the GPUs as event nodes in the graphs or as stream waits. */
Test(multigpu, the_next_runs_first_stage_overlaps_the_previous_runs_second_stage)
{
    baton_plan *plan = load(two_stages);
    enum { DELAY_US = 20000 };
    for (int nodes = 1; nodes >= 0; nodes--) {
        setenv(RT_EVENT_NODES_ENV, nodes ? "1" : "0", 1);
        baton_options o = test_options(BATON_GPU_SIM, BATON_SYNC_GRAPH, DELAY_US, 1);
        uv_loop_t loop;
        cr_assert_eq(uv_loop_init(&loop), 0);
        static stage_flight f;
        memset(&f, 0, sizeof f);
        baton_error err = {0};
        cr_assert_eq(baton_pool_create(&loop, plan, &o, 2, &f.pool, &err), 0, "%s", err.message);
        unsetenv(RT_EVENT_NODES_ENV);
        /* a first run on each instance, untraced: graph mode captures there */
        test_rng rng = {test_fresh_seed()};
        for (int round = 0; round < 2; round++) {
            for (int k = 0; k < 2; k++) {
                pool_slot *p = &f.slot[k];
                baton_job_init(&p->job);
                p->job.data = p;
                p->called = 0;
                test_fill_random(&rng, BATON_DTYPE_F32, p->x0, N, 1.0);
                test_poison(p->r1, sizeof p->r1);
                p->in[0] = (baton_binding){"x", p->x0, sizeof p->x0};
                p->out[0] = (baton_binding){"y", p->r1, sizeof p->r1};
                p->job.inputs = p->in;
                p->job.n_inputs = 1;
                p->job.outputs = p->out;
                p->job.n_outputs = 1;
            }
            if (round == 0) {
                for (int k = 0; k < 2; k++)
                    cr_assert_eq(baton_pool_submit_to(f.pool, k, &f.slot[k].job, pool_done), 0);
                uv_run(&loop, UV_RUN_DEFAULT);
                continue;
            }
            for (int k = 0; k < 2; k++)
                cr_assert_eq(baton_runtime_trace_begin(baton__pool_instance(f.pool, k), 64), 0);
            cr_assert_eq(baton_pool_submit_to(f.pool, 0, &f.slot[0].job, pool_done), 0);
            /* A's first stage: a graph of a copy and two steps, each op 20 ms late */
            cr_assert_eq(uv_timer_init(&loop, &f.later), 0);
            f.later.data = &f;
            cr_assert_eq(uv_timer_start(&f.later, submit_second, 4 * DELAY_US / 1000 + 10, 0), 0);
            uv_run(&loop, UV_RUN_DEFAULT);
        }
        for (int k = 0; k < 2; k++) {
            pool_slot *p = &f.slot[k];
            cr_assert_eq(p->called, 1);
            cr_assert_eq(p->status, 0, "run %d: %s", k, p->job.err.message);
            for (int i = 0; i < N; i++) {
                float a = (float)((double)p->x0[i] + 1.0), b = (float)((double)a + 0.5);
                float c = (float)((double)b + 0.25), y = (float)((double)c + 2.0);
                cr_assert_eq(p->r1[i], y, "nodes %d, run %d: y[%d]", nodes, k, i);
            }
        }
        int64_t a0, a1, a2, a3, b0, b1, b2, b3;
        stage_span(baton__pool_instance(f.pool, 0), 0, &a0, &a1);
        stage_span(baton__pool_instance(f.pool, 0), 1, &a2, &a3);
        stage_span(baton__pool_instance(f.pool, 1), 0, &b0, &b1);
        stage_span(baton__pool_instance(f.pool, 1), 1, &b2, &b3);
        cr_assert_geq(a2, a1, "nodes %d: run A's second stage began before its first ended", nodes);
        cr_assert_lt(b0 + DELAY_US * 1000 / 2, a3,
                     "nodes %d: run B's first stage (cuda:0) began %.1f ms after run A's second "
                     "stage (cuda:1) ended: B waited for A (A on cuda:0 %.1f..%.1f ms, cuda:1 "
                     "%.1f..%.1f; B on cuda:0 %.1f..%.1f, cuda:1 %.1f..%.1f)",
                     nodes, (b0 - a3) / 1e6, 0.0, (a1 - a0) / 1e6, (a2 - a0) / 1e6, (a3 - a0) / 1e6,
                     (b0 - a0) / 1e6, (b1 - a0) / 1e6, (b2 - a0) / 1e6, (b3 - a0) / 1e6);
        int closed = 0;
        baton_pool_close(f.pool, pool_closed, &closed);
        uv_run(&loop, UV_RUN_DEFAULT);
        cr_assert(closed);
        cr_assert_eq(uv_loop_close(&loop), 0);
    }
    baton_plan_free(plan);
}
#endif

#ifndef TEST_ON_CUDA
/* cuda:1 is busy with work of its own when cuda:0 makes b; cuda:1 reads b after it. */
static const char *slow_reader =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"slow-reader\", \"tensors\": "
    "[" CUDA1_SLOW_T
    "{\"name\": \"p0\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"x0\"], "
    "\"outputs\": [\"a\"], \"attrs\": {\"value\": 1.0}},"
    "{\"name\": \"p0b\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"a\"], "
    "\"outputs\": [\"b\"], \"attrs\": {\"value\": 0.5}},"
    "{\"name\": \"p1\", \"kernel\": \"add\", \"device\": \"cuda:1\", \"inputs\": [\"b\", \"t\"], "
    "\"outputs\": [\"y\"]}]}";

/* The start and end of the k-th span of category cat in device g's timeline. */
static void nth_span(baton_runtime *rt, int g, const char *cat, int k, int64_t *t0, int64_t *t1)
{
    baton_device dev = {BATON_DEVICE_CUDA, g};
    const dev_trace *t = &rt->dev_trace[baton__plan_memory_index(rt->plan, dev)];
    int seen = 0;
    for (size_t i = 0; i < atomic_load(&t->n); i++)
        if (strcmp(t->spans[i].cat, cat) == 0 && seen++ == k) {
            *t0 = t->spans[i].t0;
            *t1 = t->spans[i].t1;
            return;
        }
    cr_assert_fail("cuda:%d ran %d spans of %s, not %d", g, seen, cat, k + 1);
}

/* Binds queued run k's x (on cuda:0) and, where each run may have its own, its y (on cuda:1; y
 * NULL: not). The test device patches a graph for a new address only once the graph's queued
 * launches are done, so graph mode binds y once: a new y per run would make each run wait for
 * the last on cuda:1 (CUDA patches for the launches to come, without waiting). */
static void bind_run(baton_runtime *rt, int tx, float *x, int ty, float *y, size_t bytes)
{
    baton_error err = {0};
    baton_buffer bx = {{BATON_DEVICE_CUDA, 0}, x, bytes, BATON_DTYPE_F32};
    baton_buffer by = {{BATON_DEVICE_CUDA, 1}, y, bytes, BATON_DTYPE_F32};
    cr_assert_eq(baton_runtime_bind(rt, tx, &bx, &err), 0, "%s", err.message);
    if (y)
        cr_assert_eq(baton_runtime_bind(rt, ty, &by, &err), 0, "%s", err.message);
}

/* Runs queued without the host's wait between them (baton_runtime_run_async), each on its own
 * x0: cuda:0 is free long before cuda:1 has copied the b of the run before (cuda:1 first runs
 * four steps of its own), and the next run's cuda:0 work writes b again. Each run must read its
 * own b: the next run's write of b starts after cuda:1's copy of it (the timelines), and every
 * run's y is right (boundary mode, each run with its own y; graph mode, the last run's), with
 * the order between the GPUs as event nodes and as stream waits. */
Test(multigpu, queued_runs_do_not_overwrite_what_another_gpu_has_yet_to_copy)
{
    baton_plan *plan = load(slow_reader);
    enum { RUNS = 4 };
    static float x1[N], x0[RUNS][N] __attribute__((aligned(256)));
    static float y[RUNS][N] __attribute__((aligned(256)));
    const int t0 = baton_plan_tensor_index(plan, "x0"), ty = baton_plan_tensor_index(plan, "y");
    for (int nodes = 1; nodes >= 0; nodes--)
        for (int m = BATON_SYNC_BOUNDARY; m <= BATON_SYNC_GRAPH; m++) {
            const char *mode = baton_sync_mode_name((baton_sync_mode)m);
            const int own_y = m == BATON_SYNC_BOUNDARY;
            setenv(RT_EVENT_NODES_ENV, nodes ? "1" : "0", 1);
            baton_runtime *rt = make(plan, BATON_GPU_SIM, (baton_sync_mode)m, 10000);
            unsetenv(RT_EVENT_NODES_ENV);
            baton_error err = {0};
            test_rng rng = {test_fresh_seed()};
            test_fill_random(&rng, BATON_DTYPE_F32, x1, N, 1.0);
            set(rt, "x1", x1);
            if (!own_y)
                bind_run(rt, t0, x0[0], ty, y[0], sizeof y[0]);
            for (int pass = 0; pass < 2; pass++) { /* the first captures in graph mode */
                if (pass == 1)
                    cr_assert_eq(baton_runtime_trace_begin(rt, 256), 0);
                for (int k = 0; k < RUNS; k++) {
                    test_fill_random(&rng, BATON_DTYPE_F32, x0[k], N, 1.0);
                    test_poison(y[k], sizeof y[k]);
                    bind_run(rt, t0, x0[k], ty, own_y ? y[k] : NULL, sizeof y[k]);
                    cr_assert_eq(baton_runtime_run_async(rt, &err), 0, "%s", err.message);
                }
                cr_assert_eq(baton_runtime_wait(rt, &err), 0, "%s", err.message);
                for (int k = own_y ? 0 : RUNS - 1; k < RUNS; k++)
                    for (int i = 0; i < N; i++) {
                        float a = (float)((double)x0[k][i] + 1.0), b = (float)((double)a + 0.5);
                        float t = x1[i];
                        for (int j = 0; j < 4; j++)
                            t = (float)((double)t + 0.5);
                        cr_assert_eq((own_y ? y[k] : y[0])[i], (float)((double)b + (double)t),
                                     "%s, nodes %d, pass %d, queued run %d: y[%d] read another "
                                     "run's b",
                                     mode, nodes, pass, k, i);
                    }
            }
            /* per run, cuda:0 runs p0 and p0b (which writes b); cuda:1 copies x1, later b */
            for (int k = 0; k + 1 < RUNS; k++) {
                int64_t w0, w1, c0, c1;
                nth_span(rt, 0, "kernel", 2 * (k + 1) + 1, &w0, &w1);
                nth_span(rt, 1, "copy", 2 * k + 1, &c0, &c1);
                cr_assert_geq(w0, c1,
                              "%s, nodes %d: run %d wrote b %.1f ms before cuda:1 had copied run "
                              "%d's",
                              mode, nodes, k + 1, (c1 - w0) / 1e6, k);
            }
            baton_runtime_destroy(rt);
        }
    baton_plan_free(plan);
}
#endif

#ifndef TEST_ON_CUDA
/* One runtime pipelines a two-stage plan with runs queued without the host's wait
 * (baton_runtime_run_async): the next run's first stage starts on cuda:0 once cuda:1 has copied
 * what the run before left it, while cuda:1 still runs that run's steps, in boundary mode and in
 * graph mode with event nodes (a record node after the copies). Each op 20 ms late; the outputs
 * are checked too (see bind_run). */
Test(multigpu, queued_runs_pipeline_the_stages_of_one_runtime)
{
    baton_plan *plan = load(two_stages);
    enum { RUNS = 3, DELAY_US = 20000 };
    static float x[RUNS][N] __attribute__((aligned(256)));
    static float y[RUNS][N] __attribute__((aligned(256)));
    const int tx = baton_plan_tensor_index(plan, "x"), ty = baton_plan_tensor_index(plan, "y");
    for (int m = BATON_SYNC_BOUNDARY; m <= BATON_SYNC_GRAPH; m++) {
        const char *mode = baton_sync_mode_name((baton_sync_mode)m);
        const int own_y = m == BATON_SYNC_BOUNDARY;
        baton_runtime *rt = make(plan, BATON_GPU_SIM, (baton_sync_mode)m, DELAY_US);
        baton_error err = {0};
        test_rng rng = {test_fresh_seed()};
        if (!own_y)
            bind_run(rt, tx, x[0], ty, y[0], sizeof y[0]);
        for (int pass = 0; pass < 2; pass++) { /* the first captures in graph mode */
            if (pass == 1)
                cr_assert_eq(baton_runtime_trace_begin(rt, 256), 0);
            for (int k = 0; k < RUNS; k++) {
                test_fill_random(&rng, BATON_DTYPE_F32, x[k], N, 1.0);
                test_poison(y[k], sizeof y[k]);
                bind_run(rt, tx, x[k], ty, own_y ? y[k] : NULL, sizeof y[k]);
                cr_assert_eq(baton_runtime_run_async(rt, &err), 0, "%s", err.message);
            }
            cr_assert_eq(baton_runtime_wait(rt, &err), 0, "%s", err.message);
            for (int k = own_y ? 0 : RUNS - 1; k < RUNS; k++)
                for (int i = 0; i < N; i++) {
                    float a = (float)((double)x[k][i] + 1.0), b = (float)((double)a + 0.5);
                    float c = (float)((double)b + 0.25), w = (float)((double)c + 2.0);
                    cr_assert_eq((own_y ? y[k] : y[0])[i], w, "%s, pass %d, queued run %d: y[%d]",
                                 mode, pass, k, i);
                }
        }
        /* cuda:0 runs p0, p0b and cuda:1 p1, p1b per run: run 2's p0 against run 1's p1b */
        int64_t p0_t0, p0_t1, p1b_t0, p1b_t1;
        nth_span(rt, 0, "kernel", 2, &p0_t0, &p0_t1);
        nth_span(rt, 1, "kernel", 1, &p1b_t0, &p1b_t1);
        cr_assert_lt(p0_t0, p1b_t1 - DELAY_US * 1000 / 2,
                     "%s: run 2's first stage began %.1f ms after run 1's second stage ended: the "
                     "queued run waited for the whole stage, not for its copy",
                     mode, (p0_t0 - p1b_t1) / 1e6);
        baton_runtime_destroy(rt);
    }
    baton_plan_free(plan);
}
#endif

Test(multigpu, bad_collectives_are_clear_errors)
{
    static const struct {
        const char *steps, *want;
    } cases[] = {
        {"{\"name\": \"c\", \"collective\": \"all_sum\", \"devices\": [\"cuda:0\", \"cuda:1\"], "
         "\"inputs\": [\"x0\", \"x1\"], \"outputs\": [\"y0\", \"y1\"]}",
         "unknown collective 'all_sum'"},
        {"{\"name\": \"c\", \"collective\": \"all_reduce\", \"devices\": [\"cuda:0\"], "
         "\"inputs\": [\"x0\"], \"outputs\": [\"y0\"]}",
         "two or more GPUs"},
        {"{\"name\": \"c\", \"collective\": \"all_reduce\", \"devices\": [\"cuda:0\", \"cpu\"], "
         "\"inputs\": [\"x0\", \"x1\"], \"outputs\": [\"y0\", \"y1\"]}",
         "a collective's devices are GPUs"},
        {"{\"name\": \"c\", \"collective\": \"all_reduce\", \"devices\": [\"cuda:0\", \"cuda:0\"], "
         "\"inputs\": [\"x0\", \"x1\"], \"outputs\": [\"y0\", \"y1\"]}",
         "repeats 'cuda:0'"},
        {"{\"name\": \"c\", \"collective\": \"all_reduce\", \"device\": \"cuda:0\", \"devices\": "
         "[\"cuda:0\", \"cuda:1\"], \"inputs\": [\"x0\", \"x1\"], \"outputs\": [\"y0\", \"y1\"]}",
         "no \"kernel\", \"delegate\", \"device\""},
        {"{\"name\": \"c\", \"collective\": \"all_reduce\", \"devices\": [\"cuda:0\", \"cuda:1\"], "
         "\"inputs\": [\"x0\"], \"outputs\": [\"y0\", \"y1\"]}",
         "takes 2 inputs and 2 outputs"},
        {"{\"name\": \"c\", \"collective\": \"all_reduce\", \"devices\": [\"cuda:0\", \"cuda:1\"], "
         "\"inputs\": [\"x0\", \"x1\"], \"outputs\": [\"y0\", \"y1\"], \"attrs\": {\"op\": "
         "\"max\"}}",
         "must be \"sum\""},
        {"{\"name\": \"c\", \"collective\": \"all_gather\", \"devices\": [\"cuda:0\", \"cuda:1\"], "
         "\"inputs\": [\"x0\", \"x1\"], \"outputs\": [\"y0\", \"y1\"]}",
         "declare tensor 'y0'"},
        {"{\"name\": \"c\", \"kernel\": \"copy\", \"devices\": [\"cuda:0\", \"cuda:1\"], "
         "\"inputs\": [\"x0\"], \"outputs\": [\"y0\"]}",
         "\"devices\" is for collective steps"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[2048];
        snprintf(
            json, sizeof json,
            "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"bad\", \"tensors\": ["
            "{\"name\": \"x0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
            "{\"name\": \"x1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},"
            "{\"name\": \"y0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"},"
            "{\"name\": \"y1\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"}], "
            "\"steps\": [%s]}",
            cases[i].steps);
        baton_plan *plan = NULL;
        baton_error err = {0};
        int rc = baton_plan_load_string(reg, json, strlen(json), "bad.json", NULL, &plan, &err);
        cr_expect_eq(rc, BATON_EPLAN, "case %zu loaded", i);
        cr_expect(strstr(err.message, cases[i].want) && strstr(err.message, "bad.json:"),
                  "case %zu: '%s' lacks '%s' or the file's name", i, err.message, cases[i].want);
        baton_plan_free(plan);
    }
}
