/* bench_pool_floor.c: a plan's runs in flight against its GPU floor, as issue 13 defines it: the
 * same GPU segments of N instances replayed concurrently with no host steps. Two pools of N
 * instances of one plan take turns in rounds: the plan as it is, and the plan with every run
 * issuing only its GPU segments (each as it would run: its graph or its calls, its copies in and
 * out) and skipping the CPU segments and the host waits they need (baton__runtime_gpu_only, a
 * testing hook). Closed loop, N requests in flight; prints runs/s and latency percentiles of each
 * way and the ratio of throughputs.
 *
 *   bench_pool_floor [PLAN] [--inflight N] [--requests R] [--rounds K] [--mode M]
 *                    [--no-queue-ahead | --queue-ahead] [--gpu auto|cuda|sim|cpu] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "baton/baton.h"
#include "baton/baton_uv.h"
#include "scheduler/pool.h"
#include "scheduler/testing.h"

#define MAX_INFLIGHT 64

typedef struct way {
    baton_pool *pool;
    baton_job job[MAX_INFLIGHT];
    int total, submitted, finished, failed;
    int64_t *lat_ns;
    int n_lat;
    baton_error err;
} way;

static void on_done(baton_job *job, int status);

static void submit(way *w, baton_job *job)
{
    if (baton_pool_submit(w->pool, job, on_done) == 0)
        w->submitted++;
    else if (!w->failed++)
        w->err = job->err;
}

static void on_done(baton_job *job, int status)
{
    way *w = job->data;
    if (status && !w->failed++)
        w->err = job->err;
    if (!status && w->lat_ns)
        w->lat_ns[w->n_lat++] = (int64_t)uv_hrtime() - job->submit_ns;
    w->finished++;
    if (w->submitted < w->total && !w->failed)
        submit(w, job);
}

/* R requests, N at a time; returns the wall time in ns, or -1 on failure. */
static int64_t fly(uv_loop_t *loop, way *w, int n, int total)
{
    w->total = total;
    w->submitted = w->finished = 0;
    int64_t t0 = (int64_t)uv_hrtime();
    for (int k = 0; k < n && k < total; k++)
        submit(w, &w->job[k]);
    uv_run(loop, UV_RUN_DEFAULT);
    return w->failed ? -1 : (int64_t)uv_hrtime() - t0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void on_closed(void *arg)
{
    (void)arg;
}

int main(int argc, char **argv)
{
    const char *path = "examples/plans/rfc.json";
    int n = 8, requests = 2000, rounds = 3;
    baton_options o;
    baton_options_init(&o);
    o.mode = BATON_SYNC_GRAPH;
    o.quiet = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--inflight") && v)
            n = atoi(v), i++;
        else if (!strcmp(a, "--requests") && v)
            requests = atoi(v), i++;
        else if (!strcmp(a, "--rounds") && v)
            rounds = atoi(v), i++;
        else if (!strcmp(a, "--no-queue-ahead"))
            o.disable_queue_ahead = 1;
        else if (!strcmp(a, "--queue-ahead")) /* on in a pool of several too (baton.h) */
            o.disable_queue_ahead = -1;
        else if (!strcmp(a, "--mode") && v)
            baton_sync_mode_parse(v, &o.mode), i++;
        else if (!strcmp(a, "--gpu") && v) {
            o.gpu = !strcmp(v, "cuda")  ? BATON_GPU_CUDA
                    : !strcmp(v, "sim") ? BATON_GPU_SIM
                    : !strcmp(v, "cpu") ? BATON_GPU_CPU
                                        : BATON_GPU_AUTO;
            i++;
        } else
            path = a;
    }
    if (n < 1 || n > MAX_INFLIGHT || requests < n || rounds < 1) {
        fprintf(stderr, "bench_pool_floor: --inflight 1..%d, --requests >= inflight\n",
                MAX_INFLIGHT);
        return 2;
    }
    baton_error err = {0};
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    if (baton_registry_create(&reg) || baton_plan_load(reg, path, &plan, &err)) {
        fprintf(stderr, "bench_pool_floor: %s\n", err.message);
        return 1;
    }
    /* zeroed inputs, shared by every request; outputs per request */
    int nt = baton_plan_tensor_count(plan);
    baton_binding in[16], out[MAX_INFLIGHT][16];
    int n_in = 0, n_out = 0;
    for (int t = 0; t < nt && n_in < 16 && n_out < 16; t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role == BATON_ROLE_INPUT)
            in[n_in++] = (baton_binding){ti.name, calloc(1, ti.nbytes ? ti.nbytes : 1), ti.nbytes};
        else if (ti.role == BATON_ROLE_OUTPUT) {
            for (int k = 0; k < n; k++)
                out[k][n_out] =
                    (baton_binding){ti.name, malloc(ti.nbytes ? ti.nbytes : 1), ti.nbytes};
            n_out++;
        }
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    static const char *const name[2] = {"the plan", "its GPU segments only (floor)"};
    way w[2];
    memset(w, 0, sizeof w);
    for (int k = 0; k < 2; k++) {
        baton_options ok = o;
        ok.disable_queue_ahead = k == 1 ? 1 : o.disable_queue_ahead;
        if (baton_pool_create(&loop, plan, &ok, n, &w[k].pool, &err)) {
            fprintf(stderr, "bench_pool_floor: %s\n", err.message);
            return 1;
        }
        if (k == 1)
            for (int i = 0; i < n; i++)
                baton__runtime_gpu_only(baton__pool_instance(w[k].pool, i), 1);
        w[k].lat_ns = malloc((size_t)requests * (size_t)rounds * sizeof(int64_t));
        for (int j = 0; j < n; j++) {
            baton_job_init(&w[k].job[j]);
            w[k].job[j].data = &w[k];
            w[k].job[j].inputs = in;
            w[k].job[j].n_inputs = n_in;
            w[k].job[j].outputs = out[j];
            w[k].job[j].n_outputs = n_out;
        }
    }
    printf("bench_pool_floor: %s, %s mode%s, %d in flight, GPU backend %s, %d rounds x %d "
           "requests\n",
           path, baton_sync_mode_name(o.mode),
           baton_pool_queues_ahead(w[0].pool) ? " (queueing ahead)" : " (no queueing ahead)", n,
           baton_pool_gpu_backend(w[0].pool) == BATON_GPU_CUDA ? "cuda" : "not cuda", rounds,
           requests);
    double secs[2] = {0, 0};
    int64_t *keep[2] = {w[0].lat_ns, w[1].lat_ns};
    for (int k = 0; k < 2; k++) { /* warm-up: two runs per instance, captures included */
        w[k].lat_ns = NULL;
        if (fly(&loop, &w[k], n, 2 * n) < 0) {
            fprintf(stderr, "bench_pool_floor: %s: %s\n", name[k], w[k].err.message);
            return 1;
        }
        w[k].lat_ns = keep[k];
        const baton_run_stats *st = &w[k].job[0].stats;
        printf("%-32s per run: %lld steps, %lld host waits, %lld graph launches\n", name[k],
               (long long)st->steps, (long long)st->host_waits, (long long)st->graph_launches);
    }
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) {
            int64_t ns = fly(&loop, &w[k], n, requests);
            if (ns < 0) {
                fprintf(stderr, "bench_pool_floor: %s: %s\n", name[k], w[k].err.message);
                return 1;
            }
            secs[k] += (double)ns / 1e9;
        }
    double rate[2];
    for (int k = 0; k < 2; k++) {
        qsort(w[k].lat_ns, (size_t)w[k].n_lat, sizeof(int64_t), cmp_i64);
        rate[k] = (double)requests * rounds / secs[k];
        double p50 = (double)w[k].lat_ns[w[k].n_lat / 2] / 1e3;
        double p99 = (double)w[k].lat_ns[(w[k].n_lat - 1) * 99 / 100] / 1e3;
        printf("%-32s %10.1f runs/s  p50 %9.2f us  p99 %9.2f us\n", name[k], rate[k], p50, p99);
        printf("RESULT pool_floor.%s runs_per_s %.2f p50_us %.3f p99_us %.3f\n",
               k ? "floor" : "plan", rate[k], p50, p99);
    }
    printf("RESULT pool_floor.ratio %.4f (the plan's throughput / its GPU floor's)\n",
           rate[0] / rate[1]);
    for (int k = 0; k < 2; k++) {
        baton_pool_close(w[k].pool, on_closed, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        free(w[k].lat_ns);
    }
    int rc = uv_loop_close(&loop);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return rc ? 1 : 0;
}
