/* bench_pipeline.c: where the time of a pipelined plan goes (issue 43): runs in flight on a
 * baton_uv pool of N instances, graph mode, then the same runs traced (each instance's host spans
 * and its GPUs' timelines: the test device's worker or CUPTI), and what the timelines say:
 *   - per GPU, the part of the window in which one of its graphs ran, and how many ran side by
 *     side (busy, concurrency): a pipeline whose GPUs are each half busy is held up elsewhere;
 *   - how much of the last stage's GPU time overlaps the first stage's (runs pipelined or not);
 *   - the hand-off: from the end of a run's graph on one GPU to the start of its next stage's;
 *   - per run on the host: the run's length in its worker, its waits, its graph launches, and
 *     the time a job spends queued before a worker takes it (traced: CUPTI slows every launch
 *     of a graph by its kernels' records, so the launches' own cost comes from an untraced pass
 *     of every instance run directly by a thread, with step timing);
 * and one runtime's runs queued back to back (baton_runtime_run_async), whose stages overlap
 * across runs on their GPUs' streams.
 * The traces go to DIR/pipeline_i.json (Perfetto). Lines starting with RESULT are for scripts.
 *
 *   bench_pipeline PLAN [--gpu cuda|sim] [--inflight N] [--runs R] [--traced K] [--out DIR]
 *                  [--sim-delay-us D] [--no-pdl] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "baton/baton.h"
#include "baton/baton_uv.h"
#include "scheduler/pool.h"
#include "scheduler/runtime.h"

#define MAX_INFLIGHT 16
#define MAX_SPANS    (1 << 16)

typedef struct req {
    baton_job job;
    baton_binding in[8], out[8];
} req;

typedef struct flight {
    baton_pool *pool;
    req r[MAX_INFLIGHT];
    int total, submitted, finished, failed;
    int64_t *lat, *queued, *worker; /* per finished run: submit->done, submit->start, start->end */
    int n;
    baton_error err;
} flight;

static void on_done(baton_job *job, int status);

/* One pool instance run directly by a thread (the pool idle), with step timing: the host's time
 * in its graph launches (each launch is timed on its segment's first step). */
typedef struct direct {
    baton_runtime *rt;
    int runs;
    uv_barrier_t *start;
    int64_t launch_ns, launches, runs_done;
    int rc;
} direct;

static void run_direct(void *arg)
{
    direct *d = arg;
    baton_error e = {0};
    const int ns = baton_plan_step_count(d->rt->plan);
    baton_runtime_reset_stats(d->rt);
    baton_runtime_enable_step_timing(d->rt, 1);
    uv_barrier_wait(d->start);
    for (int i = 0; i < d->runs && !d->rc; i++)
        d->rc = baton_runtime_run(d->rt, &e);
    baton_runtime_enable_step_timing(d->rt, 0);
    for (int i = 0; i < ns; i++) {
        int64_t v = 0;
        baton_runtime_step_time_ns(d->rt, i, &v);
        d->launch_ns += v;
    }
    baton_run_stats st;
    baton_runtime_stats(d->rt, &st);
    d->launches = st.graph_launches;
    d->runs_done = st.runs;
    baton_runtime_reset_stats(d->rt);
}

static void submit(flight *f, req *r)
{
    if (baton_pool_submit(f->pool, &r->job, on_done) == 0)
        f->submitted++;
    else if (!f->failed++)
        f->err = r->job.err;
}

static void on_done(baton_job *job, int status)
{
    flight *f = job->data;
    if (status && !f->failed++)
        f->err = job->err;
    if (!status && f->lat) {
        f->lat[f->n] = (int64_t)uv_hrtime() - job->submit_ns;
        f->queued[f->n] = job->start_ns - job->submit_ns;
        f->worker[f->n] = job->end_ns - job->start_ns;
        f->n++;
    }
    f->finished++;
    if (f->submitted < f->total && !f->failed)
        submit(f, (req *)job);
}

static int64_t fly(uv_loop_t *loop, flight *f, int n, int total)
{
    f->total = total;
    f->submitted = f->finished = f->n = 0;
    uint64_t t0 = uv_hrtime();
    for (int k = 0; k < n && k < total; k++)
        submit(f, &f->r[k]);
    uv_run(loop, UV_RUN_DEFAULT);
    return f->failed ? -1 : (int64_t)(uv_hrtime() - t0);
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double pct_us(int64_t *v, int n, double p)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp64);
    return (double)v[(int)((n - 1) * p)] / 1e3;
}

typedef struct span {
    int64_t t0, t1;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

/* The union's length of spans v (sorted here), and their summed length in *sum. */
static int64_t union_len(span *v, int n, int64_t *sum)
{
    qsort(v, (size_t)n, sizeof *v, cmp_span);
    int64_t u = 0, c0 = 0, c1 = -1, s = 0;
    for (int i = 0; i < n; i++) {
        s += v[i].t1 - v[i].t0;
        if (v[i].t0 <= c1) {
            c1 = v[i].t1 > c1 ? v[i].t1 : c1;
            continue;
        }
        if (c1 >= 0)
            u += c1 - c0;
        c0 = v[i].t0, c1 = v[i].t1;
    }
    if (c1 >= 0)
        u += c1 - c0;
    if (sum)
        *sum = s;
    return u;
}

/* The length of the part of a (a union, sorted, disjoint after merging) that b's spans cover. */
static int64_t covered(const span *a, int na, const span *b, int nb)
{
    int64_t c = 0;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++) {
            int64_t lo = a[i].t0 > b[j].t0 ? a[i].t0 : b[j].t0;
            int64_t hi = a[i].t1 < b[j].t1 ? a[i].t1 : b[j].t1;
            if (hi > lo)
                c += hi - lo;
        }
    return c;
}

/* Merges sorted spans into disjoint ones, in place; returns their count. */
static int merge(span *v, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && v[i].t0 <= v[m - 1].t1) {
            if (v[i].t1 > v[m - 1].t1)
                v[m - 1].t1 = v[i].t1;
        } else {
            v[m++] = v[i];
        }
    }
    return m;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *out = ".";
    int n = 8, runs = 2000, traced = 64, delay_us = 0, no_pdl = 0;
    baton_gpu_backend gpu = BATON_GPU_CUDA;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--inflight") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--traced") && i + 1 < argc)
            traced = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--sim-delay-us") && i + 1 < argc)
            delay_us = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-pdl"))
            no_pdl = 1;
        else if (!strcmp(argv[i], "--gpu") && i + 1 < argc) {
            i++;
            gpu = !strcmp(argv[i], "sim") ? BATON_GPU_SIM : BATON_GPU_CUDA;
        } else if (!path && argv[i][0] != '-')
            path = argv[i];
        else {
            fprintf(stderr, "bench_pipeline: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!path || n < 1 || n > MAX_INFLIGHT || runs < n || traced < 1) {
        fprintf(stderr,
                "usage: bench_pipeline PLAN [--gpu cuda|sim] [--inflight 1..%d] [--runs R] "
                "[--traced K] [--out DIR] [--sim-delay-us D] [--no-pdl]\n",
                MAX_INFLIGHT);
        return 2;
    }
    if (gpu == BATON_GPU_CUDA && baton_cuda_device_count() < 1) {
        printf("bench_pipeline: no CUDA device: nothing measured\n");
        return 0;
    }
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_error err = {0};
    if (baton_registry_create(&reg) || baton_plan_load(reg, path, &plan, &err)) {
        fprintf(stderr, "bench_pipeline: %s: %s\n", path, err.message);
        return 1;
    }
    flight f;
    memset(&f, 0, sizeof f);
    /* inputs: one normal fill per input, shared by the requests; outputs: each request's own */
    int nt = baton_plan_tensor_count(plan);
    for (int k = 0; k < n; k++) {
        req *r = &f.r[k];
        baton_job_init(&r->job);
        r->job.data = &f;
        r->job.inputs = r->in;
        r->job.outputs = r->out;
    }
    for (int t = 0; t < nt; t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_INPUT && ti.role != BATON_ROLE_OUTPUT)
            continue;
        void *shared = NULL;
        if (ti.role == BATON_ROLE_INPUT) {
            shared = calloc(1, ti.nbytes ? ti.nbytes : 1);
            if (shared && (ti.desc.dtype == BATON_DTYPE_F32 || ti.desc.dtype == BATON_DTYPE_BF16 ||
                           ti.desc.dtype == BATON_DTYPE_F16))
                baton_fill_normal(shared, ti.desc.dtype, baton_tensor_desc_numel(&ti.desc),
                                  (uint64_t)t + 1, 0, 1);
        }
        for (int k = 0; k < n; k++) {
            req *r = &f.r[k];
            int *cnt = ti.role == BATON_ROLE_INPUT ? &r->job.n_inputs : &r->job.n_outputs;
            baton_binding *b = ti.role == BATON_ROLE_INPUT ? &r->in[*cnt] : &r->out[*cnt];
            if (*cnt == 8) {
                fprintf(stderr, "bench_pipeline: more than 8 inputs or outputs\n");
                return 2;
            }
            b->name = ti.name;
            b->nbytes = ti.nbytes;
            b->data = shared ? shared : malloc(ti.nbytes ? ti.nbytes : 1);
            ++*cnt;
        }
    }
    baton_options o;
    baton_options_init(&o);
    o.gpu = gpu;
    o.mode = BATON_SYNC_GRAPH;
    o.quiet = 1;
    o.sim_delay_us = delay_us;
    o.disable_pdl = no_pdl;
    uv_loop_t loop;
    uv_loop_init(&loop);
    if (baton_pool_create(&loop, plan, &o, n, &f.pool, &err)) {
        printf("bench_pipeline: %s: %s: nothing measured\n", path, err.message);
        return 0;
    }
    f.lat = malloc((size_t)(runs + traced) * sizeof *f.lat);
    f.queued = malloc((size_t)(runs + traced) * sizeof *f.queued);
    f.worker = malloc((size_t)(runs + traced) * sizeof *f.worker);
    /* warm-up: graph captures, first launches */
    if (fly(&loop, &f, n, 2 * n) < 0) {
        fprintf(stderr, "bench_pipeline: %s\n", f.err.message);
        return 1;
    }
    int64_t wall = fly(&loop, &f, n, runs);
    if (wall < 0) {
        fprintf(stderr, "bench_pipeline: %s\n", f.err.message);
        return 1;
    }
    const double rate = runs / (wall / 1e9);
    const double p50 = pct_us(f.lat, f.n, 0.5), p99 = pct_us(f.lat, f.n, 0.99);
    const double q50 = pct_us(f.queued, f.n, 0.5), w50 = pct_us(f.worker, f.n, 0.5);
    printf("%s: %d in flight, %d runs: %.0f runs/s, latency p50 %.1f us p99 %.1f us; in the "
           "worker p50 %.1f us, queued p50 %.1f us\n",
           baton_plan_name(plan), n, runs, rate, p50, p99, w50, q50);
    printf("RESULT pipeline.runs_per_s %.1f\nRESULT pipeline.p50_us %.2f\n"
           "RESULT pipeline.p99_us %.2f\nRESULT pipeline.worker_p50_us %.2f\n",
           rate, p50, p99, w50);

    /* One runtime, its runs queued without the host's wait (baton_runtime_run_async): its
     * stages overlap across runs on their GPUs' streams, one stream per GPU. */
    {
        baton_runtime *one = NULL;
        if (baton_runtime_create(plan, &o, &one, &err) == 0) {
            int rc = 0;
            for (int k = 0; k < f.r[0].job.n_inputs && !rc; k++)
                rc = baton_runtime_set_input(one, f.r[0].in[k].name, f.r[0].in[k].data,
                                             f.r[0].in[k].nbytes, &err);
            for (int i = 0; i < 3 && !rc; i++) /* captures */
                rc = baton_runtime_run(one, &err);
            uint64_t a0 = uv_hrtime();
            for (int i = 0; i < runs && !rc; i++)
                rc = baton_runtime_run_async(one, &err);
            if (!rc)
                rc = baton_runtime_wait(one, &err);
            const double secs = (double)(uv_hrtime() - a0) / 1e9;
            if (rc)
                printf("one runtime, runs queued: failed: %s\n", err.message);
            else
                printf("one runtime, %d runs queued back to back (baton_runtime_run_async, one "
                       "wait): %.0f runs/s\nRESULT pipeline.queued_runs_per_s %.1f\n",
                       runs, runs / secs, runs / secs);
            baton_runtime_destroy(one);
        } else {
            printf("one runtime, runs queued: %s\n", err.message);
        }
    }

    /* The host's time in the graph launches untraced: every instance run directly by a thread of
     * its own (the pool idle meanwhile), with step timing on, as many at once as the pool has.
     * A traced launch costs many times more (CUPTI's record of every kernel of the graph,
     * bench_graph_launch's "traced" rows), so the traced pass below says where the GPUs' time
     * goes, not what a launch costs. */
    {
        direct d[MAX_INFLIGHT];
        uv_thread_t th[MAX_INFLIGHT];
        uv_barrier_t start;
        uv_barrier_init(&start, (unsigned)n);
        for (int k = 0; k < n; k++) {
            d[k] = (direct){baton__pool_instance(f.pool, k), traced / n + 1, &start, 0, 0, 0, 0};
            uv_thread_create(&th[k], run_direct, &d[k]);
        }
        int64_t ns = 0, launches = 0, runs_done = 0, bad = 0;
        for (int k = 0; k < n; k++) {
            uv_thread_join(&th[k]);
            ns += d[k].launch_ns, launches += d[k].launches, runs_done += d[k].runs_done;
            bad += d[k].rc != 0;
        }
        uv_barrier_destroy(&start);
        if (bad || !runs_done) {
            printf("host, untraced launches: a direct run failed\n");
        } else {
            const double us = (double)ns / 1e3 / (double)runs_done;
            const double per = (double)launches / (double)runs_done;
            printf("host, per run, untraced (%d instances run directly by a thread each, step "
                   "timing): %.1f us in %.1f graph launches (%.2f us each)\n"
                   "RESULT pipeline.launch_us_per_run %.3f\n",
                   n, us, per, per > 0 ? us / per : 0, us);
        }
    }

    /* the traced pass: every instance's host spans and device timelines */
    const size_t cap = (size_t)(traced / n + 4) * (size_t)(baton_plan_step_count(plan) * 4 + 64);
    for (int k = 0; k < n; k++)
        if (baton_runtime_trace_begin(baton__pool_instance(f.pool, k), cap)) {
            fprintf(stderr, "bench_pipeline: trace_begin failed (out of memory)\n");
            return 1;
        }
    if (fly(&loop, &f, n, traced) < 0) {
        fprintf(stderr, "bench_pipeline: traced pass: %s\n", f.err.message);
        return 1;
    }
    /* per GPU (plan memory index d), the graph spans of every instance */
    const int nd = baton__pool_instance(f.pool, 0)->nd;
    span *by_dev[PLAN_MAX_DEVICES] = {0};
    int n_by[PLAN_MAX_DEVICES] = {0};
    int64_t lo = INT64_MAX, hi = 0;
    int64_t run_ns = 0, wait_ns = 0, launch_ns = 0, handoff[MAX_SPANS];
    int n_runs = 0, n_wait = 0, n_launch = 0, n_hand = 0, untraced = 0;
    char why[200] = "";
    for (int k = 0; k < n; k++) {
        baton_runtime *rt = baton__pool_instance(f.pool, k);
        char file[512];
        snprintf(file, sizeof file, "%s/pipeline_%d.json", out, k);
        if (baton_runtime_trace_write(rt, file, &err)) /* also syncs the device timelines */
            fprintf(stderr, "bench_pipeline: %s: %s\n", file, err.message);
        for (size_t i = 0; i < rt->trace_n; i++) {
            const trace_event *e = &rt->trace[i];
            if (!strcmp(e->cat, "run"))
                run_ns += e->dur_ns, n_runs++;
            else if (!strcmp(e->cat, "wait"))
                wait_ns += e->dur_ns, n_wait++;
            else if (!strcmp(e->cat, "graph"))
                launch_ns += e->dur_ns, n_launch++;
        }
        /* the k-th graph of this instance on each GPU belongs to its k-th run */
        span *mine[PLAN_MAX_DEVICES] = {0};
        int n_mine[PLAN_MAX_DEVICES] = {0};
        for (int d = 1; d < nd; d++) {
            const dev_trace *t = &rt->dev_trace[d];
            if (!t->spans) {
                untraced++;
                snprintf(why, sizeof why, "%s", rt->trace_why[d]);
                continue;
            }
            size_t m = atomic_load(&t->n);
            if (!by_dev[d])
                by_dev[d] = malloc(MAX_SPANS * sizeof(span));
            mine[d] = malloc((m + 1) * sizeof(span));
            for (size_t i = 0; i < m; i++)
                if (!strcmp(t->spans[i].cat, "graph") && t->spans[i].lane == 0) {
                    span s = {t->spans[i].t0, t->spans[i].t1};
                    if (n_by[d] < MAX_SPANS)
                        by_dev[d][n_by[d]++] = s;
                    mine[d][n_mine[d]++] = s;
                    lo = s.t0 < lo ? s.t0 : lo;
                    hi = s.t1 > hi ? s.t1 : hi;
                }
            qsort(mine[d], (size_t)n_mine[d], sizeof(span), cmp_span);
        }
        /* the hand-off between consecutive GPUs of a run (plan memory order is stage order for
         * scripts/pipeline.py's plans) */
        for (int d = 1; d + 1 < nd; d++)
            for (int r = 0; r < n_mine[d] && r < n_mine[d + 1] && n_hand < MAX_SPANS; r++)
                handoff[n_hand++] = mine[d + 1][r].t0 - mine[d][r].t1;
        for (int d = 0; d < nd; d++)
            free(mine[d]);
    }
    if (untraced)
        printf("device timelines: %d of %d missing (%s)\n", untraced, n * (nd - 1), why);
    const double window = hi > lo ? (double)(hi - lo) : 1;
    printf("traced: %d runs; window %.1f us (%.1f us a run)\n", traced, window / 1e3,
           window / 1e3 / traced);
    span *first = NULL, *last = NULL;
    int n_first = 0, n_last = 0;
    for (int d = 1; d < nd; d++) {
        if (!n_by[d])
            continue;
        int64_t sum = 0;
        const int64_t u = union_len(by_dev[d], n_by[d], &sum);
        char name[32];
        baton_device_format(plan->memory[d].device, name, sizeof name);
        printf("%s: graphs busy %.1f %% of the window, %.2f side by side on average, %.1f us of "
               "graph a run (from launch to end)\n",
               name, 100.0 * (double)u / window, u ? (double)sum / (double)u : 0,
               (double)sum / 1e3 / traced);
        printf("RESULT pipeline.%s.busy %.4f\nRESULT pipeline.%s.side_by_side %.3f\n", name,
               (double)u / window, name, u ? (double)sum / (double)u : 0);
        if (!first) {
            first = by_dev[d];
            n_first = n_by[d];
        }
        last = by_dev[d];
        n_last = n_by[d];
    }
    if (first && last && first != last) {
        /* by_dev are sorted by union_len; merged, how much of the last stage's time the first
         * stage ran too */
        int mf = merge(first, n_first), ml = merge(last, n_last);
        int64_t lu = 0;
        for (int i = 0; i < ml; i++)
            lu += last[i].t1 - last[i].t0;
        const double ov = lu ? (double)covered(last, ml, first, mf) / (double)lu : 0;
        printf("the last stage's GPU ran while the first stage's GPU ran: %.1f %% of its busy "
               "time (pipelined: high; serialised: near 0)\nRESULT pipeline.overlap %.4f\n",
               100 * ov, ov);
    }
    if (n_hand) {
        double h50 = pct_us(handoff, n_hand, 0.5), h99 = pct_us(handoff, n_hand, 0.99);
        printf("hand-off from one stage's graph end to the next stage's graph start: p50 %.1f us, "
               "p99 %.1f us\nRESULT pipeline.handoff_p50_us %.2f\n",
               h50, h99, h50);
    }
    if (n_runs)
        printf("host, per run in its worker, traced (on CUDA, CUPTI's record of every kernel "
               "slows each launch many times: the untraced line above is a launch's cost): %.1f "
               "us in baton_runtime_run, of which %.1f us in %.1f host waits and %.1f us in %.1f "
               "graph launches\n",
               (double)run_ns / 1e3 / n_runs, (double)wait_ns / 1e3 / n_runs,
               (double)n_wait / n_runs, (double)launch_ns / 1e3 / n_runs,
               (double)n_launch / n_runs);
    for (int d = 0; d < nd; d++)
        free(by_dev[d]);
    int closed = 0;
    baton_pool_close(f.pool, NULL, &closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return 0;
}
