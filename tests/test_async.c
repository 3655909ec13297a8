/* test_async.c: non-blocking runs on a libuv loop (include/baton/baton_uv.h). Built twice, like
 * test_runtime.c: on the test device (label cpu) and with TEST_ON_CUDA as test_async_cuda (label
 * gpu). 1 to 16 runs in flight give, run for run, the outputs and counters of the same inputs run
 * synchronously; the loop stays responsive while 16 runs with 5 ms CPU steps are in flight (built
 * alone with TEST_LOOP_LATENCY as test_async_loop, run serially); a fault in one run fails that
 * run only; queued runs start in submission order and can be
 * cancelled; the instances share one set of constants; closing leaves the loop empty. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "baton/baton_uv.h"
#include "core/dtype.h"
#include "kernels/descriptors.h"
#include "scheduler/pool.h"
#include "scheduler/runtime.h"
#include "scheduler/testing.h"
#include "tests/support.h"

#ifdef TEST_ON_CUDA
#include <cuda_runtime_api.h>
#define GPU BATON_GPU_CUDA
#define NEED_BACKEND()                                                                             \
    do {                                                                                           \
        if (baton_cuda_device_count() == 0)                                                        \
            cr_skip("no CUDA device: the CUDA variant of the async tests needs one");              \
    } while (0)
#else
#define GPU            BATON_GPU_SIM
#define NEED_BACKEND() ((void)0)
#endif

/* Two layers of [gemm -> rms_norm -> softshrink on cuda:0 -> a CPU step], as in the RFC plan but
 * small, so 16 instances run quickly on the test device. The CPU step is `cpu_step`: add_scalar,
 * or the slow kernel below for the responsiveness test. */
static const char *plan_json(const char *cpu_step, char *buf, size_t cap)
{
    snprintf(
        buf, cap,
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"async-demo\",\n"
        " \"tensors\": [\n"
        "  {\"name\": \"x0\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"input\"},\n"
        "  {\"name\": \"A\", \"dtype\": \"f32\", \"shape\": [64, 64], \"role\": \"constant\",\n"
        "   \"init\": {\"kind\": \"normal\", \"seed\": 7, \"std\": 0.1}},\n"
        "  {\"name\": \"w\", \"dtype\": \"f32\", \"shape\": [64], \"role\": \"constant\",\n"
        "   \"init\": {\"kind\": \"uniform\", \"seed\": 9, \"low\": 0.5, \"high\": 1.5}},\n"
        "  {\"name\": \"h0\", \"dtype\": \"f32\", \"shape\": [4, 64]},\n"
        "  {\"name\": \"n0\", \"dtype\": \"f32\", \"shape\": [4, 64]},\n"
        "  {\"name\": \"i0\", \"dtype\": \"f32\", \"shape\": [4]},\n"
        "  {\"name\": \"s0\", \"dtype\": \"f32\", \"shape\": [4, 64]},\n"
        "  {\"name\": \"x1\", \"dtype\": \"f32\", \"shape\": [4, 64]},\n"
        "  {\"name\": \"h1\", \"dtype\": \"f32\", \"shape\": [4, 64]},\n"
        "  {\"name\": \"n1\", \"dtype\": \"f32\", \"shape\": [4, 64]},\n"
        "  {\"name\": \"i1\", \"dtype\": \"f32\", \"shape\": [4]},\n"
        "  {\"name\": \"s1\", \"dtype\": \"f32\", \"shape\": [4, 64]},\n"
        "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4, 64], \"role\": \"output\"}],\n"
        " \"steps\": [\n"
        "  {\"name\": \"p0\", \"delegate\": \"gemm\", \"device\": \"cuda:0\", \"inputs\": "
        "[\"x0\", \"A\"], \"outputs\": [\"h0\"]},\n"
        "  {\"name\": \"r0\", \"kernel\": \"rms_norm_fwd\", \"device\": \"cuda:0\", "
        "\"inputs\": [\"h0\", \"w\"], \"outputs\": [\"n0\", \"i0\"]},\n"
        "  {\"name\": \"k0\", \"kernel\": \"softshrink\", \"device\": \"cuda:0\", \"inputs\": "
        "[\"n0\"], \"outputs\": [\"s0\"]},\n"
        "  {\"name\": \"c0\", \"kernel\": \"%s\", \"device\": \"cpu\", \"inputs\": [\"s0\"], "
        "\"outputs\": [\"x1\"], \"attrs\": {\"value\": 1.0}},\n"
        "  {\"name\": \"p1\", \"delegate\": \"gemm\", \"device\": \"cuda:0\", \"inputs\": "
        "[\"x1\", \"A\"], \"outputs\": [\"h1\"]},\n"
        "  {\"name\": \"r1\", \"kernel\": \"rms_norm_fwd\", \"device\": \"cuda:0\", "
        "\"inputs\": [\"h1\", \"w\"], \"outputs\": [\"n1\", \"i1\"]},\n"
        "  {\"name\": \"k1\", \"kernel\": \"softshrink\", \"device\": \"cuda:0\", \"inputs\": "
        "[\"n1\"], \"outputs\": [\"s1\"]},\n"
        "  {\"name\": \"c1\", \"kernel\": \"%s\", \"device\": \"cpu\", \"inputs\": [\"s1\"], "
        "\"outputs\": [\"y\"], \"attrs\": {\"value\": 1.0}}]}\n",
        cpu_step, cpu_step);
    return buf;
}

/* A CPU step that takes 5 ms (it sleeps, as a host step waiting on I/O would): y = x + value. */
static int slow_kernel_math(const char *opaque, void **buffers)
{
    const baton_ew_desc *d = (const void *)opaque;
    const float *x = buffers[0];
    float *y = buffers[1];
    for (int64_t i = 0; i < d->n; i++)
        y[i] = x[i] + (float)d->value;
    return 0;
}

static int slow_kernel(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    usleep(5000);
    return slow_kernel_math(opaque, buffers);
}

/* A CPU step that holds its run until the test opens `gate` (y = x + value), so a test can act
 * while a job is certainly running. */
static atomic_int gate_entered, gate_open;
static int gated_kernel(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    atomic_store(&gate_entered, 1);
    while (!atomic_load(&gate_open))
        usleep(100);
    return slow_kernel_math(opaque, buffers);
}

static baton_registry *reg;

static void add_cpu_variant(const char *name, baton_kernel_fn fn)
{
    const baton_target *add = baton_registry_find(reg, "add_scalar");
    cr_assert_not_null(add);
    baton_target t = *add;
    t.name = name;
    t.n_impls = 1;
    memset(t.impls, 0, sizeof t.impls);
    t.impls[0].device = BATON_DEVICE_CPU;
    t.impls[0].kernel = fn;
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
}

static void setup(void)
{
    cr_assert_eq(baton_registry_create(&reg), 0);
    /* slow_add, gated_add: add_scalar's signature and descriptor, run on the CPU by the kernels
     * above */
    add_cpu_variant("slow_add", slow_kernel);
    add_cpu_variant("gated_add", gated_kernel);
}

static void teardown(void)
{
    baton_registry_destroy(reg);
}

TestSuite(async, .init = setup, .fini = teardown, .timeout = 120);

static baton_plan *load(const char *cpu_step)
{
    char json[8192];
    plan_json(cpu_step, json, sizeof json);
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_plan_load_string(reg, json, strlen(json), "async.json", NULL, &plan, &err),
                 0, "%s", err.message);
    return plan;
}

static baton_options opts_for(baton_sync_mode mode, int delay_us)
{
    return test_options(GPU, mode, delay_us, 0);
}

enum { ELEMS = 4 * 64, MAX_JOBS = 64 };

typedef struct run_slot {
    baton_job job;
    baton_binding in, out;
    float x[ELEMS], y[ELEMS];
    int status, called, order;
} run_slot;

static int completed;

static void on_done(baton_job *job, int status)
{
    run_slot *s = job->data;
    s->status = status;
    s->called++;
    s->order = completed++;
}

static void prepare_slot(run_slot *s, test_rng *r)
{
    baton_job_init(&s->job);
    s->job.data = s;
    test_fill_random(r, BATON_DTYPE_F32, s->x, ELEMS, 1.0);
    test_poison(s->y, sizeof s->y);
    s->in = (baton_binding){"x0", s->x, sizeof s->x};
    s->out = (baton_binding){"y", s->y, sizeof s->y};
    s->job.inputs = &s->in;
    s->job.n_inputs = 1;
    s->job.outputs = &s->out;
    s->job.n_outputs = 1;
    s->status = 1;
    s->called = 0;
}

static int closed;
static void on_close(void *arg)
{
    closed = 1;
}

static void close_pool(uv_loop_t *loop, baton_pool *pool)
{
    closed = 0;
    baton_pool_close(pool, on_close, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    cr_assert(closed, "the close callback did not run");
    cr_assert_eq(uv_loop_close(loop), 0, "the loop still holds handles after baton_pool_close");
}

#ifndef TEST_LOOP_LATENCY
/* The same plan with its two CPU steps on cuda:0: every step on the GPU, so that a run can be
 * queued (baton_runtime_run_async) and a pool's runs can share streams. */
static baton_plan *load_gpu_only(void)
{
    char json[8192], gpu[8192];
    plan_json("add_scalar", json, sizeof json);
    size_t n = 0;
    for (const char *c = json; *c && n + 8 < sizeof gpu;) {
        const char *cpu = "\"device\": \"cpu\"";
        if (strncmp(c, cpu, strlen(cpu)) == 0) {
            n += (size_t)snprintf(gpu + n, sizeof gpu - n, "\"device\": \"cuda:0\"");
            c += strlen(cpu);
        } else {
            gpu[n++] = *c++;
        }
    }
    gpu[n] = 0;
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_plan_load_string(reg, gpu, n, "async-gpu.json", NULL, &plan, &err), 0, "%s",
                 err.message);
    return plan;
}

/* Under BATON_POOL_GROUP=N on CUDA, the instances of a group issue their work on its first
 * instance's streams, and those of different groups on their own. */
static void check_stream_groups(baton_pool *pool)
{
    const char *env = getenv("BATON_POOL_GROUP");
    const int group = env ? atoi(env) : 1, n = baton_pool_instances(pool);
    if (GPU != BATON_GPU_CUDA || group < 2)
        return;
    baton_stream first[4], mine[4];
    for (int i = 0; i < n; i++) {
        const int lead = i - i % group;
        int nf = baton__runtime_streams(baton__pool_instance(pool, lead), first, 4);
        int nm = baton__runtime_streams(baton__pool_instance(pool, i), mine, 4);
        cr_assert(nf == 1 && nm == 1, "instance %d: %d and %d streams", i, nf, nm);
        cr_assert_eq(mine[0].stream, first[0].stream, "instance %d is not on instance %d's stream",
                     i, lead);
        if (lead > 0) {
            baton__runtime_streams(baton__pool_instance(pool, 0), first, 4);
            cr_assert_neq(mine[0].stream, first[0].stream, "instance %d shares group 0's stream",
                          i);
        }
    }
}

/* Runs `jobs` jobs through a pool of `inflight` instances of plan (load("add_scalar") when
 * gpu_only is 0, else load_gpu_only()) and checks each against a synchronous run of the same
 * inputs: outputs bitwise equal, counters equal. queue_ahead: the pool's disable_queue_ahead (0:
 * the pool's default, off above BATON_POOL_QUEUE_AHEAD_MAX instances; -1: forced on). */
static void check_plan_against_sync(int gpu_only, baton_sync_mode mode, int inflight, int jobs,
                                    int queue_ahead)
{
    baton_plan *plan = gpu_only ? load_gpu_only() : load("add_scalar");
    baton_options o = opts_for(mode, 30);
    o.disable_queue_ahead = queue_ahead;
    /* the synchronous runtime queues ahead as the pool's instances do */
    baton_options so = o;
    so.disable_queue_ahead =
        queue_ahead == 0 && inflight > BATON_POOL_QUEUE_AHEAD_MAX ? 1 : queue_ahead;
    baton_error err = {0};
    baton_runtime *sync_rt = NULL;
    cr_assert_eq(baton_runtime_create(plan, &so, &sync_rt, &err), 0, "%s", err.message);

    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    cr_assert_eq(baton_pool_create(&loop, plan, &o, inflight, &pool, &err), 0, "%s", err.message);
    check_stream_groups(pool);
    static run_slot slots[MAX_JOBS];
    test_rng r = {test_fresh_seed()};
    completed = 0;
    for (int j = 0; j < jobs; j++) {
        prepare_slot(&slots[j], &r);
        cr_assert_eq(baton_pool_submit(pool, &slots[j].job, on_done), 0, "%s",
                     slots[j].job.err.message);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    for (int j = 0; j < jobs; j++) {
        run_slot *s = &slots[j];
        cr_assert_eq(s->called, 1, "job %d: callback ran %d times", j, s->called);
        cr_assert_eq(s->status, 0, "job %d: %s", j, s->job.err.message);
        float want[ELEMS];
        baton_run_stats st;
        cr_assert_eq(baton_runtime_set_input(sync_rt, "x0", s->x, sizeof s->x, &err), 0);
        baton_runtime_reset_stats(sync_rt);
        cr_assert_eq(baton_runtime_run(sync_rt, &err), 0, "%s", err.message);
        baton_runtime_stats(sync_rt, &st);
        cr_assert_eq(baton_runtime_get_output(sync_rt, "y", want, sizeof want, &err), 0);
        cr_expect_arr_eq(s->y, want, sizeof want,
                         "%s, %d in flight: job %d differs from a sync run",
                         baton_sync_mode_name(mode), inflight, j);
        /* the first run of an instance in graph mode captures: compare like with like */
        if (s->job.stats.captures == 0 && st.captures == 0) {
            cr_expect_eq(s->job.stats.host_waits, st.host_waits, "job %d host waits", j);
            cr_expect_eq(s->job.stats.kernel_launches, st.kernel_launches, "job %d launches", j);
            cr_expect_eq(s->job.stats.graph_launches, st.graph_launches, "job %d graphs", j);
            cr_expect_eq(s->job.stats.bytes_h2d, st.bytes_h2d, "job %d bytes h2d", j);
            cr_expect_eq(s->job.stats.bytes_d2h, st.bytes_d2h, "job %d bytes d2h", j);
            cr_expect_eq(s->job.stats.queued_ahead, st.queued_ahead, "job %d queued ahead", j);
            if (mode == BATON_SYNC_GRAPH && !gpu_only) /* only a CPU step has a run queue ahead */
                cr_expect_eq(s->job.stats.queued_ahead > 0,
                             queue_ahead < 0 || inflight <= BATON_POOL_QUEUE_AHEAD_MAX,
                             "job %d: %lld queued ahead, %d in flight, disable_queue_ahead %d", j,
                             (long long)s->job.stats.queued_ahead, inflight, queue_ahead);
        }
        cr_expect_eq(s->job.stats.runs, 1, "job %d: its counters are one run's", j);
    }
    close_pool(&loop, pool);
    baton_runtime_destroy(sync_rt);
    baton_plan_free(plan);
}

static void check_against_sync(baton_sync_mode mode, int inflight, int jobs, int queue_ahead)
{
    check_plan_against_sync(0, mode, inflight, jobs, queue_ahead);
}

Test(async, one_to_sixteen_in_flight_equal_synchronous_runs_in_every_mode)
{
    NEED_BACKEND();
    const int inflight[] = {1, 2, 4, 8, 16};
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < 5; i++)
            check_against_sync((baton_sync_mode)m, inflight[i], 2 * inflight[i] + 3, 0);
}

/* BATON_POOL_PRIORITIES: 1 gives each instance a level of its own, N >= 2 splits the instances
 * into N groups in order (the first the highest), anything else leaves the default priority. */
Test(async, stream_priority_levels_split_the_instances_in_order)
{
    int rank, of;
    for (int i = 0; i < 8; i++) {
        baton__pool_priority(i, 8, 1, &rank, &of);
        cr_assert(rank == i && of == 8, "spread: instance %d got %d of %d", i, rank, of);
        baton__pool_priority(i, 8, 2, &rank, &of);
        cr_assert(rank == (i < 4 ? 0 : 1) && of == 2, "two levels: instance %d got %d of %d", i,
                  rank, of);
        baton__pool_priority(i, 8, 0, &rank, &of);
        cr_assert(rank == 0 && of == 0, "off: instance %d got %d of %d", i, rank, of);
    }
    baton__pool_priority(5, 6, 3, &rank, &of);
    cr_assert(rank == 2 && of == 3, "three levels of 6: instance 5 got %d of %d", rank, of);
    baton__pool_priority(2, 3, 8, &rank, &of); /* more levels than instances: one each */
    cr_assert(rank == 2 && of == 3, "8 levels of 3: instance 2 got %d of %d", rank, of);
    baton__pool_priority(0, 1, 2, &rank, &of);
    cr_assert(rank == 0 && of == 0, "one instance: %d of %d", rank, of);
}

static void setenv_int(const char *name, int value)
{
    char v[16];
    snprintf(v, sizeof v, "%d", value);
    setenv(name, v, 1);
}

/* Instances at unequal stream priorities (on CUDA; the test device has none) run as the others. */
Test(async, pools_at_stream_priorities_equal_synchronous_runs)
{
    NEED_BACKEND();
    for (int levels = 1; levels <= 2; levels++) {
        setenv_int("BATON_POOL_PRIORITIES", levels);
        check_against_sync(BATON_SYNC_GRAPH, 8, 19, 0);
        unsetenv("BATON_POOL_PRIORITIES");
    }
}

/* Instances in stream groups (BATON_POOL_GROUP: on CUDA a group's runs share its first
 * instance's streams; the test device, which takes no caller's streams, runs them through the
 * same issue-then-wait path) run as the others, in every mode and more runs than instances. */
Test(async, pools_in_stream_groups_equal_synchronous_runs)
{
    NEED_BACKEND();
    for (int group = 2; group <= 3; group++) {
        setenv_int("BATON_POOL_GROUP", group);
        for (int gpu_only = 0; gpu_only <= 1; gpu_only++) {
            for (int m = 0; m < 3; m++)
                check_plan_against_sync(gpu_only, (baton_sync_mode)m, 8, 19, 0);
            check_plan_against_sync(gpu_only, BATON_SYNC_GRAPH, 3, 11, 0);
        }
        unsetenv("BATON_POOL_GROUP");
    }
}

/* A pool of more than BATON_POOL_QUEUE_AHEAD_MAX instances does not queue ahead by default
 * (baton.h); forced on, it does, and its runs still equal synchronous ones. */
Test(async, graph_mode_queues_ahead_in_flight_when_asked)
{
    NEED_BACKEND();
    const int inflight[] = {8, 16};
    for (int i = 0; i < 2; i++)
        check_against_sync(BATON_SYNC_GRAPH, inflight[i], 2 * inflight[i] + 3, -1);
}

Test(async, queued_runs_start_in_submission_order_and_can_be_cancelled)
{
    NEED_BACKEND();
    baton_plan *plan = load("slow_add");
    baton_options o = opts_for(BATON_SYNC_BOUNDARY, 0);
    baton_error err = {0};
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    cr_assert_eq(baton_pool_create(&loop, plan, &o, 2, &pool, &err), 0, "%s", err.message);
    static run_slot slots[8];
    test_rng r = {test_fresh_seed()};
    completed = 0;
    for (int j = 0; j < 8; j++) {
        prepare_slot(&slots[j], &r);
        cr_assert_eq(baton_pool_submit(pool, &slots[j].job, on_done), 0);
    }
    cr_assert_eq(baton_pool_submit(pool, &slots[3].job, on_done), BATON_ESTATE,
                 "a job in flight was submitted twice");
    cr_assert_eq(baton_pool_cancel(&slots[5].job), 0, "a queued job could not be cancelled");
    cr_assert_eq(baton_pool_cancel(&slots[5].job), BATON_ESTATE, "cancelled twice");
    cr_assert_eq(baton_pool_cancel(&slots[0].job), BATON_ESTATE, "a running job was cancelled");
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(slots[5].status, BATON_ECANCELED);
    cr_expect_eq(slots[5].called, 1);
    cr_expect_eq(slots[5].job.instance, -1, "a cancelled job never ran");
    int64_t prev_start = 0;
    for (int j = 0; j < 8; j++) {
        if (j == 5)
            continue;
        cr_expect_eq(slots[j].status, 0, "job %d: %s", j, slots[j].job.err.message);
        cr_expect_geq(slots[j].job.start_ns, prev_start, "job %d started before job %d", j, j - 1);
        prev_start = slots[j].job.start_ns;
    }
    /* a job whose callback ran can go again */
    prepare_slot(&slots[5], &r);
    cr_assert_eq(baton_pool_submit(pool, &slots[5].job, on_done), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(slots[5].status, 0, "%s", slots[5].job.err.message);
    close_pool(&loop, pool);
    baton_plan_free(plan);
}

Test(async, a_fault_fails_its_run_only_and_the_instance_recovers)
{
    NEED_BACKEND();
    baton_plan *plan = load("add_scalar");
    const dev_fault faults[] = {DEV_FAULT_LAUNCH, DEV_FAULT_COPY, DEV_FAULT_CAPTURE};
    for (int f = 0; f < 3; f++) {
        baton_options o = opts_for(BATON_SYNC_GRAPH, 20);
        baton_error err = {0};
        uv_loop_t loop;
        cr_assert_eq(uv_loop_init(&loop), 0);
        baton_pool *pool = NULL;
        cr_assert_eq(baton_pool_create(&loop, plan, &o, 4, &pool, &err), 0, "%s", err.message);
        /* the GPU device of instance 2 (memory index 1: the CPU is 0) */
        baton__runtime_inject(baton__pool_instance(pool, 2), 1, faults[f]);
        static run_slot slots[12];
        test_rng r = {test_fresh_seed()};
        completed = 0;
        for (int j = 0; j < 12; j++) {
            prepare_slot(&slots[j], &r);
            cr_assert_eq(baton_pool_submit(pool, &slots[j].job, on_done), 0);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        int failed = 0;
        for (int j = 0; j < 12; j++) {
            if (slots[j].status != 0) {
                failed++;
                cr_expect_eq(slots[j].job.instance, 2, "fault %d: job %d failed on instance %d", f,
                             j, slots[j].job.instance);
                cr_expect(slots[j].job.err.message[0], "a failed job has no message");
            }
        }
        if (faults[f] == DEV_FAULT_CAPTURE) {
            /* a segment that cannot be captured runs without a graph, and says so */
            cr_expect_eq(failed, 0, "a failed capture failed %d runs", failed);
            const char *note = baton_runtime_note(baton__pool_instance(pool, 2));
            cr_expect(note && strstr(note, "without a CUDA graph"), "note: %s",
                      note ? note : "(none)");
        } else {
            cr_expect_eq(failed, 1, "fault %d: %d runs failed, want exactly the one with the fault",
                         f, failed);
        }
        /* every later run on instance 2 is right: outputs equal the other instances' for the
         * same input */
        run_slot again[4];
        for (int k = 0; k < 4; k++) {
            prepare_slot(&again[k], &r);
            memcpy(again[k].x, again[0].x, sizeof again[k].x);
            cr_assert_eq(baton_pool_submit(pool, &again[k].job, on_done), 0);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        for (int k = 0; k < 4; k++) {
            cr_expect_eq(again[k].status, 0, "%s", again[k].job.err.message);
            cr_expect_arr_eq(again[k].y, again[0].y, sizeof again[0].y, "instance %d differs",
                             again[k].job.instance);
        }
        close_pool(&loop, pool);
    }
    baton_plan_free(plan);
}

/* Submitting a job that is running is refused and leaves the job alone: its worker owns
 * job->err until the callback (writing it there raced with the worker's own writes). */
Test(async, resubmitting_a_running_job_is_refused_without_touching_it)
{
    NEED_BACKEND();
    baton_plan *plan = load("gated_add");
    baton_options o = opts_for(BATON_SYNC_BOUNDARY, 0);
    baton_error err = {0};
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    cr_assert_eq(baton_pool_create(&loop, plan, &o, 1, &pool, &err), 0, "%s", err.message);
    static run_slot s;
    test_rng r = {test_fresh_seed()};
    prepare_slot(&s, &r);
    atomic_store(&gate_entered, 0);
    atomic_store(&gate_open, 0);
    completed = 0;
    cr_assert_eq(baton_pool_submit(pool, &s.job, on_done), 0, "%s", s.job.err.message);
    while (!atomic_load(&gate_entered)) /* the worker has cleared job->err and is running it */
        usleep(100);
    cr_expect_eq(baton_pool_submit(pool, &s.job, on_done), BATON_ESTATE);
    /* The worker wrote job->err before entering the gate and writes nothing while it waits
     * there, so this read is ordered after its writes (the atomics) and sees only what the
     * refused submit may have written. */
    cr_expect_eq(s.job.err.code, 0, "the refused submit wrote the running job's error: %s",
                 s.job.err.message);
    cr_expect_str_empty(s.job.err.message, "the refused submit wrote the running job's error");
    atomic_store(&gate_open, 1);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(s.called, 1);
    cr_expect_eq(s.status, 0, "%s", s.job.err.message);
    close_pool(&loop, pool);
    baton_plan_free(plan);
}

/* Memory the caller owns, 256-aligned: device memory on a GPU's arena (CUDA), pinned host memory
 * on the host's; plain host memory where the test device stands for the GPU. */
static void *caller_alloc(int on_device, size_t n)
{
    void *p = NULL;
    n = (n + 255) & ~(size_t)255;
#ifdef TEST_ON_CUDA
    cr_assert_eq(on_device ? cudaMalloc(&p, n ? n : 256) : cudaMallocHost(&p, n ? n : 256),
                 cudaSuccess);
#else
    (void)on_device;
    p = aligned_alloc(256, n ? n : 256);
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

enum { POOL_N = 3, MAX_ARENAS = 4 };

/* Each instance of a pool runs in the caller's arenas (instance 0's hold the constants, the
 * others' only their private part), and its runs equal synchronous ones. */
static void check_caller_arenas(baton_gpu_backend gpu)
{
    baton_plan *plan = load("add_scalar");
    baton_options o = test_options(gpu, BATON_SYNC_GRAPH, 0, 0);
    const int gpu_mem = gpu == GPU; /* the GPU's arena is device memory (the CPU backend's: host) */
    baton_error err = {0};
    int na = baton_plan_arena_count(plan);
    cr_assert(na >= 2 && na <= MAX_ARENAS);
    baton_arena arenas[POOL_N][MAX_ARENAS];
    baton_pool_instance per[POOL_N];
    for (int i = 0; i < POOL_N; i++) {
        for (int a = 0; a < na; a++) {
            cr_assert_eq(baton_pool_arena_info(plan, i, a, &arenas[i][a]), 0);
            baton_arena whole;
            cr_assert_eq(baton_plan_arena_info(plan, a, &whole), 0);
            cr_assert_eq(arenas[i][a].nbytes, whole.nbytes - (i ? plan->memory[a].const_bytes : 0),
                         "instance %d, arena %d: %zu bytes", i, a, arenas[i][a].nbytes);
            arenas[i][a].data = caller_alloc(a > 0 && gpu_mem, arenas[i][a].nbytes);
        }
        per[i] = (baton_pool_instance){
            .struct_size = sizeof per[i], .arenas = arenas[i], .n_arenas = na};
    }
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    cr_assert_eq(baton_pool_create_with(&loop, plan, &o, POOL_N, per, &pool, &err), 0, "%s",
                 err.message);
    for (int i = 0; i < POOL_N; i++) {
        const baton_runtime *rt = baton__pool_instance(pool, i);
        for (int a = 0; a < na; a++) {
            char *mine = arenas[i][a].data;
            cr_expect_eq(rt->dev[a].priv, mine + (i ? 0 : plan->memory[a].const_bytes),
                         "instance %d does not run in its arena %d", i, a);
            cr_expect_eq(rt->dev[a].consts, (char *)arenas[0][a].data,
                         "instance %d does not read instance 0's constants", i);
        }
    }
    baton_runtime *sync_rt = NULL;
    cr_assert_eq(baton_runtime_create(plan, &o, &sync_rt, &err), 0, "%s", err.message);
    static run_slot slots[3 * POOL_N];
    test_rng r = {test_fresh_seed()};
    for (int j = 0; j < 3 * POOL_N; j++) {
        prepare_slot(&slots[j], &r);
        cr_assert_eq(baton_pool_submit_to(pool, j % POOL_N, &slots[j].job, on_done), 0, "%s",
                     slots[j].job.err.message);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    for (int j = 0; j < 3 * POOL_N; j++) {
        cr_assert_eq(slots[j].status, 0, "job %d: %s", j, slots[j].job.err.message);
        float want[ELEMS];
        cr_assert_eq(baton_runtime_set_input(sync_rt, "x0", slots[j].x, sizeof slots[j].x, &err),
                     0);
        cr_assert_eq(baton_runtime_run(sync_rt, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_get_output(sync_rt, "y", want, sizeof want, &err), 0);
        cr_expect_arr_eq(slots[j].y, want, sizeof want, "job %d (instance %d) differs", j,
                         slots[j].job.instance);
    }
    close_pool(&loop, pool);
    baton_runtime_destroy(sync_rt);
    for (int i = 0; i < POOL_N; i++)
        for (int a = 0; a < na; a++)
            caller_free(a > 0 && gpu_mem, arenas[i][a].data);
    baton_plan_free(plan);
}

Test(async, instances_run_in_the_callers_arenas)
{
    NEED_BACKEND();
    check_caller_arenas(GPU);
    check_caller_arenas(BATON_GPU_CPU);
}

Test(async, caller_arenas_that_do_not_fit_are_refused_naming_the_instance)
{
    NEED_BACKEND();
    baton_plan *plan = load("add_scalar");
    baton_options o = opts_for(BATON_SYNC_GRAPH, 0);
    baton_error err = {0};
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    /* one set of arenas in the options cannot serve several instances */
    baton_arena one;
    cr_assert_eq(baton_plan_arena_info(plan, 1, &one), 0);
    one.data = caller_alloc(1, one.nbytes);
    baton_options shared = o;
    shared.arenas = &one;
    shared.n_arenas = 1;
    cr_assert_eq(baton_pool_create(&loop, plan, &shared, 2, &pool, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "baton_pool_create_with"), "%s", err.message);
    /* instance 1's arena one byte short of what baton_pool_arena_info says */
    baton_arena a0 = one, a1;
    cr_assert_eq(baton_pool_arena_info(plan, 1, 1, &a1), 0);
    a1.nbytes -= 1;
    a1.data = caller_alloc(1, a1.nbytes + 1);
    baton_pool_instance per[2] = {{sizeof per[0], &a0, 1, NULL, 0},
                                  {sizeof per[1], &a1, 1, NULL, 0}};
    cr_assert_eq(baton_pool_create_with(&loop, plan, &o, 2, per, &pool, &err), BATON_EINVAL);
    cr_assert_null(pool);
    cr_assert(strstr(err.message, "instance 1") && strstr(err.message, "options.arenas[0]"), "%s",
              err.message);
    a1.nbytes += 1;
    cr_assert_eq(baton_pool_create_with(&loop, plan, &o, 2, per, &pool, &err), 0, "%s",
                 err.message);
    close_pool(&loop, pool);
    caller_free(1, one.data);
    caller_free(1, a1.data);
    baton_plan_free(plan);
}

/* A device buffer bound to one instance: its jobs read the input and write the output there, with
 * no copy; binding while the instance runs is refused. */
Test(async, an_instance_runs_its_jobs_on_bound_device_buffers)
{
    NEED_BACKEND();
    baton_plan *plan = load("gated_add");
    baton_options o = opts_for(BATON_SYNC_BOUNDARY, 0);
    baton_error err = {0};
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    cr_assert_eq(baton_pool_create(&loop, plan, &o, 2, &pool, &err), 0, "%s", err.message);
    baton_runtime *sync_rt = NULL;
    cr_assert_eq(baton_runtime_create(plan, &o, &sync_rt, &err), 0, "%s", err.message);
    int xt = baton_plan_tensor_index(plan, "x0"), yt = baton_plan_tensor_index(plan, "y");
    float *xd = caller_alloc(1, ELEMS * sizeof(float)),
          *yh = caller_alloc(0, ELEMS * sizeof(float));
    baton_buffer bx = {{BATON_DEVICE_CUDA, 0}, xd, ELEMS * sizeof(float), BATON_DTYPE_F32};
    baton_buffer by = {{BATON_DEVICE_CPU, 0}, yh, ELEMS * sizeof(float), BATON_DTYPE_F32};
    cr_assert_eq(baton_pool_bind(pool, 1, xt, &bx, &err), 0, "%s", err.message);
    cr_assert_eq(baton_pool_bind(pool, 1, yt, &by, &err), 0, "%s", err.message);
    cr_assert_eq(baton_pool_bind(pool, 2, yt, &by, &err), BATON_EINVAL);
    atomic_store(&gate_open, 1);
    test_rng r = {test_fresh_seed()};
    for (int round = 0; round < 3; round++) {
        float x[ELEMS], want[ELEMS];
        test_fill_random(&r, BATON_DTYPE_F32, x, ELEMS, 1.0);
#ifdef TEST_ON_CUDA
        cr_assert_eq(cudaMemcpy(xd, x, sizeof x, cudaMemcpyHostToDevice), cudaSuccess);
#else
        memcpy(xd, x, sizeof x);
#endif
        test_poison(yh, sizeof want);
        static run_slot s;
        baton_job_init(&s.job); /* no bindings: the instance's bound buffers */
        s.job.data = &s;
        cr_assert_eq(baton_pool_submit_to(pool, 1, &s.job, on_done), 0, "%s", s.job.err.message);
        uv_run(&loop, UV_RUN_DEFAULT);
        cr_assert_eq(s.status, 0, "%s", s.job.err.message);
        cr_assert_eq(baton_runtime_set_input(sync_rt, "x0", x, sizeof x, &err), 0);
        baton_runtime_reset_stats(sync_rt);
        cr_assert_eq(baton_runtime_run(sync_rt, &err), 0, "%s", err.message);
        baton_run_stats st;
        baton_runtime_stats(sync_rt, &st);
        /* x0's copy to the GPU is gone (x1's, from the CPU step, stays) */
        cr_assert_eq(s.job.stats.bytes_h2d, st.bytes_h2d - (int64_t)sizeof x,
                     "bytes copied to the GPU: %lld, a copied run %lld",
                     (long long)s.job.stats.bytes_h2d, (long long)st.bytes_h2d);
        cr_assert_eq(baton_runtime_get_output(sync_rt, "y", want, sizeof want, &err), 0);
        cr_expect_arr_eq(yh, want, sizeof want, "round %d: the bound output differs", round);
    }
    /* instance 0 keeps the runtime's own memory: a job there without bindings has no input */
    static run_slot u;
    baton_job_init(&u.job);
    u.job.data = &u;
    cr_assert_eq(baton_pool_submit_to(pool, 0, &u.job, on_done), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(u.status, BATON_ESTATE, "%s", u.job.err.message);
    cr_expect(strstr(u.job.err.message, "input 'x0' was never set"), "%s", u.job.err.message);
    /* while instance 1 runs, its bindings stay */
    static run_slot g;
    prepare_slot(&g, &r);
    atomic_store(&gate_entered, 0);
    atomic_store(&gate_open, 0);
    cr_assert_eq(baton_pool_submit_to(pool, 1, &g.job, on_done), 0);
    while (!atomic_load(&gate_entered))
        usleep(100);
    cr_expect_eq(baton_pool_bind(pool, 1, xt, NULL, &err), BATON_ESTATE);
    cr_expect(strstr(err.message, "instance 1 is running a job"), "%s", err.message);
    atomic_store(&gate_open, 1);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(g.status, 0, "%s", g.job.err.message);
    cr_assert_eq(baton_pool_bind(pool, 1, xt, NULL, &err), 0, "%s", err.message);
    close_pool(&loop, pool);
    baton_runtime_destroy(sync_rt);
    caller_free(1, xd);
    caller_free(0, yh);
    baton_plan_free(plan);
}

Test(async, instances_share_one_set_of_constants)
{
    NEED_BACKEND();
    baton_plan *plan = load("add_scalar");
    baton_options o = opts_for(BATON_SYNC_GRAPH, 0);
    baton_error err = {0};
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    cr_assert_eq(baton_pool_create(&loop, plan, &o, 4, &pool, &err), 0, "%s", err.message);
    size_t cb = 0, ab = 0;
    baton_pool_memory(pool, &cb, &ab);
    /* A [64, 64] and w [64] f32 on the GPU (each 256-aligned): the constants; on the simulated
     * GPU (the CPU's gemm) also the [N, K] copy of A that its GEMV streams, made once for both
     * steps and every instance */
#ifdef TEST_ON_CUDA
    const size_t prepared = 0;
#else
    const size_t prepared = (size_t)64 * 64 * 4;
#endif
    cr_expect_eq(cb, (size_t)64 * 64 * 4 + 256 + prepared, "constant bytes %zu", cb);
    const plan_memory *gm = &plan->memory[1];
    /* the private arenas, plus what the gemm's delegate holds per instance (test_pool_memory
     * checks that total against resident memory) */
    cr_expect_geq(ab, plan->memory[0].arena_bytes + gm->arena_bytes - gm->const_bytes -
                          plan->memory[0].const_bytes);
    baton_runtime *first = baton__pool_instance(pool, 0);
    for (int i = 1; i < 4; i++) {
        baton_runtime *rt = baton__pool_instance(pool, i);
        cr_expect_eq(rt->dev[1].consts, first->dev[1].consts, "instance %d has its own constants",
                     i);
        cr_expect_neq(rt->dev[1].priv, first->dev[1].priv, "instance %d shares a private arena", i);
    }
    close_pool(&loop, pool);
    baton_plan_free(plan);
}

Test(async, bad_submissions_are_clear_errors)
{
    NEED_BACKEND();
    baton_plan *plan = load("add_scalar");
    baton_options o = opts_for(BATON_SYNC_GRAPH, 0);
    baton_error err = {0};
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    cr_assert_eq(baton_pool_create(&loop, plan, &o, 0, &pool, &err), BATON_EINVAL);
    cr_assert_null(pool);
    cr_assert_eq(baton_pool_create(&loop, plan, &o, 2, &pool, &err), 0, "%s", err.message);
    run_slot s;
    test_rng r = {1};
    prepare_slot(&s, &r);
    s.in.name = "y";
    cr_expect_eq(baton_pool_submit(pool, &s.job, on_done), BATON_EINVAL);
    cr_expect(strstr(s.job.err.message, "'y' is not an input") != NULL, "%s", s.job.err.message);
    prepare_slot(&s, &r);
    s.in.nbytes = 4;
    cr_expect_eq(baton_pool_submit(pool, &s.job, on_done), BATON_EINVAL);
    cr_expect(strstr(s.job.err.message, "1024 bytes") != NULL, "%s", s.job.err.message);
    prepare_slot(&s, &r);
    baton_binding twice[2] = {s.in, s.in}; /* the same input twice, as the CLI refuses */
    s.job.inputs = twice;
    s.job.n_inputs = 2;
    cr_expect_eq(baton_pool_submit(pool, &s.job, on_done), BATON_EINVAL);
    cr_expect(strstr(s.job.err.message, "both bind 'x0'") != NULL, "%s", s.job.err.message);
    prepare_slot(&s, &r);
    s.out.data = NULL;
    cr_expect_eq(baton_pool_submit(pool, &s.job, on_done), BATON_EINVAL);
    cr_expect_eq(baton_pool_submit(pool, &s.job, NULL), BATON_EINVAL);
    close_pool(&loop, pool);
    baton_plan_free(plan);
}
#else /* TEST_LOOP_LATENCY: built alone as test_async_loop, which ctest runs serially, so that no  \
       * other test shares the machine's cores while the loop's timing is measured */

/* The loop stays responsive: while 16 runs are in flight whose CPU steps take 5 ms each, nine
 * ticks in ten of a 1 ms timer are late by at most 2 ms. A loop that ran those steps itself
 * would make nearly every tick late by about 4 ms; a thread that the machine preempts makes a
 * few ticks late by any amount, which is why the bound is on the 90th percentile, not the worst
 * (CI saw the worst at 2.9-15.5 ms in five measurements in a row on a busy 2-core machine). */
#define MAX_TICKS 16384
static int64_t last_tick_ns, ticks, n_late;
static int64_t late_ns[MAX_TICKS];
static uv_timer_t timer;

static void on_tick(uv_timer_t *t)
{
    (void)t;
    int64_t now = (int64_t)uv_hrtime();
    if (last_tick_ns && n_late < MAX_TICKS)
        late_ns[n_late++] = now - last_tick_ns - 1000000;
    last_tick_ns = now;
    ticks++;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static baton_pool *stop_pool;
static void on_done_stop_timer(baton_job *job, int status)
{
    on_done(job, status);
    if (baton_pool_pending(stop_pool) == 0)
        uv_timer_stop(&timer);
}

Test(async, the_loop_stays_responsive_with_sixteen_slow_runs_in_flight)
{
    NEED_BACKEND();
    baton_plan *plan = load("slow_add");
    baton_options o = opts_for(BATON_SYNC_GRAPH, 0);
    baton_error err = {0};
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_pool *pool = NULL;
    cr_assert_eq(baton_pool_create(&loop, plan, &o, 16, &pool, &err), 0, "%s", err.message);
    stop_pool = pool;
    static run_slot slots[160];
    test_rng r = {test_fresh_seed()};
    /* Warm up every instance twice (all free: a round of 16 puts one on each), so the first
     * runs' graph captures are done before the timer starts. */
    for (int round = 0; round < 2; round++) {
        for (int j = 0; j < 16; j++) {
            prepare_slot(&slots[j], &r);
            cr_assert_eq(baton_pool_submit(pool, &slots[j].job, on_done), 0);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
    }
    /* Up to five measurements of 160 runs, 200 ms apart: a shared machine (a VM's vCPU taken
     * away, another process) can delay any thread for a while, which no library can prevent; the
     * loop must meet the bound in one of them, and every measurement is reported (90th
     * percentile / worst). A loop that a run blocks is late by its 5 ms step every time. */
    char seen[256] = "";
    size_t used = 0;
    int64_t best = INT64_MAX;
    for (int attempt = 0; attempt < 5 && best > 2000000; attempt++) {
        if (attempt)
            usleep(200000);
        completed = 0;
        for (int j = 0; j < 160; j++) {
            prepare_slot(&slots[j], &r);
            cr_assert_eq(baton_pool_submit(pool, &slots[j].job, on_done_stop_timer), 0);
        }
        last_tick_ns = ticks = n_late = 0;
        cr_assert_eq(uv_timer_init(&loop, &timer), 0);
        cr_assert_eq(uv_timer_start(&timer, on_tick, 1, 1), 0);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_close((uv_handle_t *)&timer, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        for (int j = 0; j < 160; j++)
            cr_assert_eq(slots[j].status, 0, "job %d: %s", j, slots[j].job.err.message);
        cr_expect_gt(ticks, 10, "the timer ticked %lld times", (long long)ticks);
        qsort(late_ns, (size_t)n_late, sizeof late_ns[0], cmp_i64);
        const int64_t p90 = n_late ? late_ns[n_late * 9 / 10] : INT64_MAX;
        const int64_t worst = n_late ? late_ns[n_late - 1] : INT64_MAX;
        if (p90 < best)
            best = p90;
        int k = snprintf(seen + used, sizeof seen - used, "%s%.2f / %.2f ms", attempt ? ", " : "",
                         (double)p90 / 1e6, (double)worst / 1e6);
        used += k > 0 && (size_t)k < sizeof seen - used ? (size_t)k : 0;
    }
    cr_expect_leq(best, 2000000, "the 1 ms timer's ticks were late by (90th percentile / worst) %s",
                  seen);
    close_pool(&loop, pool);
    baton_plan_free(plan);
}
#endif
