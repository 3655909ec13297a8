/* async_batch.c: keeps N requests of a plan in flight on a libuv loop, as an inference server
 * would, and prints throughput and latency percentiles. A 1 ms timer on the same loop reports how
 * late the loop ever ran it (the loop must stay free for the server's sockets and timers).
 *
 *   async_batch [--inflight N] [--requests R] [--mode strict|boundary|graph] [--gpu
 * auto|cuda|cpu|sim] [PLAN.json]        (default: examples/plans/rfc.json, 8 in flight, 400
 * requests)
 *
 * It uses only the public headers: baton.h and baton_uv.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "baton/baton.h"
#include "baton/baton_uv.h"

#define MAX_INFLIGHT 64
#define MAX_BINDINGS 16

typedef struct request {
    baton_job job;
    baton_binding in[MAX_BINDINGS], out[MAX_BINDINGS];
} request;

typedef struct app {
    baton_pool *pool;
    int inflight, total, submitted, finished, failed;
    double *latency_us;
    uv_timer_t timer;
    uint64_t last_tick, worst_late_ns;
    uint64_t t_start, t_end;
} app;

static app A;

static void on_done(baton_job *job, int status);

static int submit(request *r)
{
    int rc = baton_pool_submit(A.pool, &r->job, on_done);
    if (rc) {
        fprintf(stderr, "async_batch: submit: %s\n", r->job.err.message);
        return rc;
    }
    A.submitted++;
    return 0;
}

static void on_done(baton_job *job, int status)
{
    request *r = job->data;
    if (status) {
        A.failed++;
        fprintf(stderr, "async_batch: request failed: %s\n", job->err.message);
    } else {
        A.latency_us[A.finished] = (double)(uv_hrtime() - (uint64_t)job->submit_ns) / 1e3;
    }
    A.finished++;
    if (A.submitted < A.total)
        submit(r);
    else if (A.finished == A.total) {
        A.t_end = uv_hrtime();
        uv_timer_stop(&A.timer);
    }
}

static void on_tick(uv_timer_t *t)
{
    uint64_t now = uv_hrtime();
    if (A.last_tick && now - A.last_tick > 1000000 && now - A.last_tick - 1000000 > A.worst_late_ns)
        A.worst_late_ns = now - A.last_tick - 1000000;
    A.last_tick = now;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void on_closed(void *arg)
{
    (void)arg;
}

int main(int argc, char **argv)
{
    const char *path = "examples/plans/rfc.json";
    baton_options opts;
    baton_options_init(&opts);
    opts.quiet = 1;
    A.inflight = 8;
    A.total = 400;
    int no_timer = 0; /* --no-timer: measure the loop's own cost per request without the ticks */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--inflight") && i + 1 < argc)
            A.inflight = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-timer"))
            no_timer = 1;
        else if (!strcmp(argv[i], "--no-queue-ahead"))
            opts.disable_queue_ahead = 1;
        else if (!strcmp(argv[i], "--queue-ahead")) /* a pool of more than 4 does not by default */
            opts.disable_queue_ahead = -1;
        else if (!strcmp(argv[i], "--requests") && i + 1 < argc)
            A.total = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            if (baton_sync_mode_parse(argv[++i], &opts.mode)) {
                fprintf(stderr, "async_batch: --mode is strict, boundary or graph\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--gpu") && i + 1 < argc) {
            const char *g = argv[++i];
            opts.gpu = !strcmp(g, "cuda")  ? BATON_GPU_CUDA
                       : !strcmp(g, "cpu") ? BATON_GPU_CPU
                       : !strcmp(g, "sim") ? BATON_GPU_SIM
                                           : BATON_GPU_AUTO;
        } else if (argv[i][0] != '-')
            path = argv[i];
        else {
            fprintf(stderr, "usage: async_batch [--inflight N] [--requests R] [--mode M] "
                            "[--gpu auto|cuda|cpu|sim] [--no-timer] [--no-queue-ahead | "
                            "--queue-ahead] [PLAN.json]\n");
            return 2;
        }
    }
    if (A.inflight < 1 || A.inflight > MAX_INFLIGHT || A.total < A.inflight) {
        fprintf(stderr, "async_batch: 1 <= --inflight <= %d and --requests >= --inflight\n",
                MAX_INFLIGHT);
        return 2;
    }

    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_error err = {0};
    if (baton_registry_create(&reg) || baton_plan_load(reg, path, &plan, &err)) {
        fprintf(stderr, "async_batch: %s\n", err.message);
        return 1;
    }
    uv_loop_t *loop = uv_default_loop();
    /* the loop's idle time, so its busy time per request can be reported */
    uv_loop_configure(loop, UV_METRICS_IDLE_TIME);
    if (baton_pool_create(loop, plan, &opts, A.inflight, &A.pool, &err)) {
        fprintf(stderr, "async_batch: %s\n", err.message);
        return 3;
    }
    size_t const_bytes = 0, arena_bytes = 0;
    baton_pool_memory(A.pool, &const_bytes, &arena_bytes);
    printf("%d instances: constants %.1f MiB once, arenas %.1f MiB each\n", A.inflight,
           (double)const_bytes / 1048576.0, (double)arena_bytes / 1048576.0);

    /* Each request binds every input of the plan to its own buffer of seeded random values and
     * every output to a buffer of its own. */
    static request req[MAX_INFLIGHT];
    int n_tensors = baton_plan_tensor_count(plan);
    for (int k = 0; k < A.inflight; k++) {
        request *r = &req[k];
        baton_job_init(&r->job);
        r->job.data = r;
        for (int t = 0; t < n_tensors; t++) {
            baton_tensor_info ti;
            baton_plan_tensor_info(plan, t, &ti);
            if (ti.role != BATON_ROLE_INPUT && ti.role != BATON_ROLE_OUTPUT)
                continue;
            baton_binding *b = ti.role == BATON_ROLE_INPUT ? &r->in[r->job.n_inputs++]
                                                           : &r->out[r->job.n_outputs++];
            b->name = ti.name;
            b->nbytes = ti.nbytes;
            b->data = malloc(ti.nbytes ? ti.nbytes : 1);
            if (ti.role == BATON_ROLE_INPUT)
                baton_fill_normal(b->data, ti.desc.dtype, baton_tensor_desc_numel(&ti.desc),
                                  (uint64_t)(k * 131 + t + 1), 0.0, 1.0);
            if (r->job.n_inputs == MAX_BINDINGS || r->job.n_outputs == MAX_BINDINGS) {
                fprintf(stderr, "async_batch: more than %d inputs or outputs\n", MAX_BINDINGS);
                return 2;
            }
        }
        r->job.inputs = r->in;
        r->job.outputs = r->out;
    }
    A.latency_us = calloc((size_t)A.total, sizeof *A.latency_us);

    uv_timer_init(loop, &A.timer);
    /* Warm up: two runs on every instance (with all of them free, a round of `inflight`
     * requests puts one on each), so graph capture and first launches stay out of the numbers. */
    int total = A.total;
    for (int round = 0; round < 2; round++) {
        A.total = A.inflight;
        A.submitted = A.finished = A.failed = 0;
        for (int k = 0; k < A.inflight; k++)
            if (submit(&req[k]))
                return 3;
        uv_run(loop, UV_RUN_DEFAULT);
        if (A.failed)
            return 3;
    }
    A.total = total;
    A.submitted = A.finished = 0;
    if (!no_timer)
        uv_timer_start(&A.timer, on_tick, 1, 1);
    A.t_start = uv_hrtime();
    uint64_t idle0 = uv_metrics_idle_time(loop);
    for (int k = 0; k < A.inflight; k++)
        if (submit(&req[k]))
            return 3;
    uv_run(loop, UV_RUN_DEFAULT);
    uint64_t idle_ns = uv_metrics_idle_time(loop) - idle0;
    uv_close((uv_handle_t *)&A.timer, NULL);
    baton_pool_close(A.pool, on_closed, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    int closed = uv_loop_close(loop);

    int ok = A.finished - A.failed;
    qsort(A.latency_us, (size_t)ok, sizeof *A.latency_us, cmp_double);
    double secs = (double)(A.t_end - A.t_start) / 1e9;
    printf("%s, %d in flight, %s mode: %d requests (%d failed) in %.3f s\n", baton_plan_name(plan),
           A.inflight, baton_sync_mode_name(opts.mode), A.finished, A.failed, secs);
    if (ok > 0)
        printf("throughput %.1f runs/s; latency p50 %.1f us, p99 %.1f us, max %.1f us\n", ok / secs,
               A.latency_us[ok / 2], A.latency_us[(size_t)(0.99 * (ok - 1))], A.latency_us[ok - 1]);
    /* busy = wall - idle, less the timer's own ticks: submit and completion per request */
    double busy_us = ((double)(A.t_end - A.t_start) - (double)idle_ns) / 1e3;
    printf("loop: busy %.2f us per request (submit + completion%s); ", busy_us / A.finished,
           no_timer ? "" : " + timer ticks");
    if (!no_timer)
        printf("the 1 ms timer was at most %.2f ms late; ", (double)A.worst_late_ns / 1e6);
    printf("uv_loop_close: %s\n", closed == 0 ? "ok" : uv_strerror(closed));
    printf("RESULT async_batch.runs_per_s %.2f\n", ok > 0 ? ok / secs : 0.0);
    if (no_timer)
        printf("RESULT async_batch.loop_us_per_run %.3f\n", busy_us / A.finished);
    else
        printf("RESULT async_batch.loop_late_ms %.3f\n", (double)A.worst_late_ns / 1e6);
    if (ok > 0)
        printf("RESULT async_batch.p50_us %.2f\nRESULT async_batch.p99_us %.2f\n",
               A.latency_us[ok / 2], A.latency_us[(size_t)(0.99 * (ok - 1))]);
    for (int k = 0; k < A.inflight; k++) {
        for (int i = 0; i < req[k].job.n_inputs; i++)
            free(req[k].in[i].data);
        for (int i = 0; i < req[k].job.n_outputs; i++)
            free(req[k].out[i].data);
    }
    free(A.latency_us);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return A.failed ? 3 : 0;
}
