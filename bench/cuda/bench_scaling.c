/* bench_scaling.c: the data-parallel plan against the same computation on one GPU (issue 14), in
 * one process: ONE.json (every step on cuda:0) and one or more PLAN.json over cuda:0..N-1
 * (scripts/shard.py's forms, or one shard alone), graph mode, every input and output bound once to
 * a device buffer on the GPU it lives on (baton_runtime_bind), so that a run moves nothing through
 * the host and the time is the GPUs' work and their hand-offs, as XLA's peer figure is
 * (bench/multigpu/xla_scaling.py). The plans run in alternating rounds; it prints the p50 per run
 * of each and the scaling efficiency t(one) / (N * t(plan)), and checks that grad_weight has the
 * same bits as ONE's wherever a plan has it (the same x and grad_y: the one-GPU x's rows are the
 * shards' in order). Two more views of the same plans:
 *   --inflight: two runs in flight, a second runtime of each plan run by a second thread, so
 *     that one run is issued while the other is on the GPUs, the way XLA's dispatch is
 *     pipelined: the GPUs' time per run without the host's wait and launch between runs;
 *   --trace DIR: three traced runs of each plan (DIR/scaling_<plan>.json, Perfetto) and, for the
 *     last, each GPU's kernels and copies from its timeline (CUPTI): when each started after the
 *     run began, how long it took, and the idle time between them: where a run's time goes.
 *   --old-end-waits K: the runtimes of plan argument K (0 is ONE) record each GPU's end-of-run
 *     event right before its wait (BATON_END_RECORDS_FIRST=0), the others first: pass a plan
 *     twice (two file names) to time both orders in the same rounds.
 *   --pool: two runs in flight on a baton_pool of two instances of each plan (baton_uv.h), each
 *     instance's inputs and outputs bound to device buffers of its own (baton_pool_bind), jobs
 *     that bind nothing: the pool's dispatch, worker threads and stream groups on the GPUs'
 *     work, with no copy through the host, as --inflight and XLA's figure have none.
 * Exit 1 when the first PLAN's grad_weight differs from ONE's.
 *   bench_scaling ONE.json PLAN.json [PLAN.json ...] [--runs N] [--rounds R] [--inflight]
 *                 [--pool] [--trace DIR] [--old-end-waits K]   (NCCL_NVLS_ENABLE=0) */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/baton.h"
#include "baton/baton_uv.h"
#include "bench/cuda/bench_stats.h"
#include "plan/plan_internal.h"
#include "scheduler/runtime.h"

#define MAX_PLANS 6

static baton_error err;

/* Where bind_all binds: a runtime (pool NULL), or instance `instance` of a pool. */
typedef struct binder {
    baton_runtime *rt;
    baton_pool *pool;
    int instance;
} binder;

static int bind_one(const binder *to, int t, const baton_buffer *b, baton_error *e)
{
    return to->pool ? baton_pool_bind(to->pool, to->instance, t, b, e)
                    : baton_runtime_bind(to->rt, t, b, e);
}

/* Binds every input and output of a runtime or pool instance to a new device buffer on the first
 * GPU it lives on (the runtime refuses the others); inputs get the rows of `x` or `g` named by
 * their prefix, from element offset `at[...]` on, so the shards together hold the one-GPU
 * inputs. Returns the number of GPUs the plan uses. */
static int bind_all(const binder *to, const baton_plan *plan, const void *x, const void *g,
                    int ngpu, void **grad_w, int *grad_w_dev)
{
    *grad_w = NULL;
    *grad_w_dev = -1;
    size_t at_x = 0, at_g = 0;
    int used = 0;
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_INPUT && ti.role != BATON_ROLE_OUTPUT)
            continue;
        int bound = 0;
        for (int d = 0; d < ngpu && !bound; d++) {
            void *p;
            CHECK_CUDA(cudaSetDevice(d));
            CHECK_CUDA(cudaMalloc(&p, ti.nbytes));
            baton_buffer b = {{BATON_DEVICE_CUDA, d}, p, ti.nbytes, ti.desc.dtype};
            baton_error e2 = {0};
            if (bind_one(to, t, &b, &e2)) {
                CHECK_CUDA(cudaFree(p));
                continue;
            }
            bound = 1;
            used = d + 1 > used ? d + 1 : used;
            if (ti.role == BATON_ROLE_INPUT && (ti.name[0] == 'x' || ti.name[0] == 'g')) {
                int is_x = ti.name[0] == 'x';
                size_t *at = is_x ? &at_x : &at_g;
                CHECK_CUDA(cudaMemcpy(p, (const char *)(is_x ? x : g) + *at, ti.nbytes,
                                      cudaMemcpyHostToDevice));
                *at += ti.nbytes;
            }
            if (ti.role == BATON_ROLE_OUTPUT && strcmp(ti.name, "grad_weight") == 0) {
                *grad_w = p;
                *grad_w_dev = d;
            }
        }
        if (!bound) {
            fprintf(stderr, "bench_scaling: tensor '%s' lives on no GPU\n", ti.name);
            exit(1);
        }
    }
    return used;
}

/* --inflight: one thread's share of the runs, on its own runtime. */
typedef struct turns {
    baton_runtime *rt;
    int runs, rc;
} turns;

static void *take_turns(void *arg)
{
    turns *t = arg;
    baton_error e = {0};
    for (int i = 0; i < t->runs && !t->rc; i++)
        t->rc = baton_runtime_run(t->rt, &e);
    return NULL;
}

/* --pool: runs kept two in flight on a pool, each job resubmitted from its callback until
 * `left` runs have been handed out. */
typedef struct pool_flight {
    baton_pool *pool;
    baton_job job[2];
    int left, failed;
    baton_error first_err;
} pool_flight;

static void pool_done(baton_job *job, int status)
{
    pool_flight *f = job->data;
    if (status && !f->failed++)
        f->first_err = job->err;
    if (f->left > 0 && !f->failed) {
        f->left--;
        if (baton_pool_submit(f->pool, job, pool_done) && !f->failed++)
            f->first_err = job->err;
    }
}

/* µs a run over `runs` runs (at least 2) of f's pool, or -1 when a run failed. */
static double pool_runs(uv_loop_t *loop, pool_flight *f, int runs)
{
    f->left = runs - 2;
    f->failed = 0;
    double t0 = now_us();
    for (int k = 0; k < 2; k++) {
        baton_job_init(&f->job[k]);
        f->job[k].data = f;
        if (baton_pool_submit(f->pool, &f->job[k], pool_done) && !f->failed++)
            f->first_err = f->job[k].err;
    }
    uv_run(loop, UV_RUN_DEFAULT);
    return f->failed ? -1 : (now_us() - t0) / runs;
}

/* The median over the rounds of each plan's µs a run (per[k][round]), and each sharded plan's
 * efficiency against ONE's (plan 0), printed as `label` and as RESULT scaling.TAG.KEY_us and
 * scaling.TAG.KEY_efficiency lines. */
static void print_rounds(const char *label, const char *key, double **per, int rounds, int np,
                         const char **paths, char (*tag)[128], const int *gpus)
{
    double q[MAX_PLANS];
    for (int k = 0; k < np; k++)
        q[k] = pct(per[k], rounds, 0.5);
    printf("%s: %s %.1f us a run\n", label, paths[0], q[0]);
    for (int k = 1; k < np; k++) {
        double eff = q[0] / (gpus[k] * q[k]);
        printf("%s: %s %.1f us a run; scaling efficiency %.3f\nRESULT scaling.%s.%s_us %.2f\n"
               "RESULT scaling.%s.%s_efficiency %.4f\n",
               label, paths[k], q[k], eff, tag[k], key, q[k], tag[k], key, eff);
    }
}

/* The plan's name for RESULT lines: the file's base name without .json. */
static void tag_of(const char *path, char *out, size_t len)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, len, "%s", b);
    char *dot = strstr(out, ".json");
    if (dot)
        *dot = 0;
}

/* The last traced run of rt: each GPU's kernels and copies (its timeline), from the run's start
 * on the host. */
static void print_timeline(baton_runtime *rt, const char *tag)
{
    int64_t r0 = -1, r1 = -1;
    for (size_t i = 0; i < rt->trace_n; i++)
        if (!strcmp(rt->trace[i].cat, "run")) {
            r0 = rt->trace_t0 + rt->trace[i].ts_ns;
            r1 = r0 + rt->trace[i].dur_ns;
        }
    if (r0 < 0) {
        printf("%s: no traced run\n", tag);
        return;
    }
    printf("%s: the last traced run took %.1f us on the host (launch to the end of its waits)\n",
           tag, (r1 - r0) / 1e3);
    for (int d = 1; d < rt->nd; d++) {
        const dev_trace *t = &rt->dev_trace[d];
        char name[32];
        baton_device_format(rt->plan->memory[d].device, name, sizeof name);
        if (!t->spans) {
            printf("  %s: no timeline (%s)\n", name, rt->trace_why[d]);
            continue;
        }
        int64_t busy = 0, last_end = r0, first = -1, idle = 0;
        size_t m = atomic_load(&t->n);
        for (size_t i = 0; i < m; i++) {
            const dev_span *sp = &t->spans[i];
            if (sp->t0 < r0 || sp->t0 > r1 || !strcmp(sp->cat, "graph"))
                continue;
            if (first < 0)
                first = sp->t0;
            if (sp->t0 > last_end)
                idle += sp->t0 - last_end;
            printf("  %s %-44.44s start %+9.1f us  %8.1f us  (idle before %6.1f us)\n", name,
                   sp->name ? sp->name : "?", (sp->t0 - r0) / 1e3, (sp->t1 - sp->t0) / 1e3,
                   sp->t0 > last_end ? (sp->t0 - last_end) / 1e3 : 0.0);
            busy += sp->t1 - sp->t0;
            last_end = sp->t1 > last_end ? sp->t1 : last_end;
        }
        printf("  %s: busy %.1f us of the run's %.1f; idle %.1f us before its first op, %.1f "
               "between ops, %.1f after its last until the host's wait returned\n",
               name, busy / 1e3, (r1 - r0) / 1e3, first >= 0 ? (first - r0) / 1e3 : 0.0,
               (idle - (first >= 0 ? first - r0 : 0)) / 1e3, (r1 - last_end) / 1e3);
    }
}

int main(int argc, char **argv)
{
    const char *paths[MAX_PLANS] = {NULL}, *trace_dir = NULL;
    int runs = 50, rounds = 5, np = 0, inflight = 0, old_waits = -1, pooled = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc)
            trace_dir = argv[++i];
        else if (!strcmp(argv[i], "--inflight"))
            inflight = 1;
        else if (!strcmp(argv[i], "--pool"))
            pooled = 1;
        else if (!strcmp(argv[i], "--old-end-waits") && i + 1 < argc)
            old_waits = atoi(argv[++i]);
        else if (np < MAX_PLANS)
            paths[np++] = argv[i];
    }
    if (np < 2) {
        fprintf(stderr, "usage: bench_scaling ONE.json PLAN.json [PLAN.json ...] [--runs N] "
                        "[--rounds R] [--inflight] [--pool] [--trace DIR] [--old-end-waits "
                        "K]\n");
        return 2;
    }
    int ngpu = baton_cuda_device_count();
    baton_registry *reg;
    CHECK(baton_registry_create(&reg));
    baton_plan *plan[MAX_PLANS];
    for (int k = 0; k < np; k++)
        CHECK(baton_plan_load(reg, paths[k], &plan[k], &err));
    int x_t = baton_plan_tensor_index(plan[0], "x");
    if (x_t < 0) {
        fprintf(stderr, "bench_scaling: %s has no input 'x'\n", paths[0]);
        return 2;
    }
    baton_tensor_info xi;
    baton_plan_tensor_info(plan[0], x_t, &xi);
    int64_t n = baton_tensor_desc_numel(&xi.desc);
    void *x = malloc(xi.nbytes), *g = malloc(xi.nbytes);
    /* normal values for the first 16 M elements, repeated: filling a GiB with normals took the
     * host tens of seconds of the GPU call, and the figures need equal inputs, not fresh ones */
    const int64_t fresh = n < ((int64_t)16 << 20) ? n : ((int64_t)16 << 20);
    const size_t esz = xi.nbytes / (size_t)n, chunk = (size_t)fresh * esz;
    CHECK(baton_fill_normal(x, xi.desc.dtype, fresh, 1, 0, 1));
    CHECK(baton_fill_normal(g, xi.desc.dtype, fresh, 2, 0, 1));
    for (size_t at = chunk; at < xi.nbytes; at += chunk) {
        const size_t len = xi.nbytes - at < chunk ? xi.nbytes - at : chunk;
        memcpy((char *)x + at, x, len);
        memcpy((char *)g + at, g, len);
    }
    baton_options o;
    baton_options_init(&o);
    o.mode = BATON_SYNC_GRAPH;
    o.gpu = BATON_GPU_CUDA;
    o.quiet = 1;
    /* rt[k][1]: the second runtime of --inflight, run by a second thread */
    baton_runtime *rt[MAX_PLANS][2] = {{NULL}};
    void *gw[MAX_PLANS], *unused_gw;
    int gw_dev[MAX_PLANS], gpus[MAX_PLANS], unused_dev;
    char tag[MAX_PLANS][128];
    for (int k = 0; k < np; k++) {
        tag_of(paths[k], tag[k], sizeof tag[k]);
        for (int c = 0; c < 1 + inflight; c++) {
            if (baton_runtime_create(plan[k], &o, &rt[k][c], &err)) {
                printf("bench_scaling: %s: %s: nothing measured\n", paths[k], err.message);
                return 0;
            }
            const binder to = {rt[k][c], NULL, 0};
            gpus[k] = bind_all(&to, plan[k], x, g, ngpu, c ? &unused_gw : &gw[k],
                               c ? &unused_dev : &gw_dev[k]);
            if (k == old_waits)
                rt[k][c]->end_records_first = 0;
        }
    }
    double *lat[MAX_PLANS], *per[MAX_PLANS];
    for (int k = 0; k < np; k++) {
        lat[k] = malloc((size_t)runs * rounds * sizeof(double));
        per[k] = malloc((size_t)rounds * sizeof(double));
        for (int c = 0; c < 1 + inflight; c++)
            for (int i = 0; i < 3; i++) /* captures */
                CHECK(baton_runtime_run(rt[k][c], &err));
    }
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < np; k++)
            for (int i = 0; i < runs; i++) {
                double t0 = now_us();
                CHECK(baton_runtime_run(rt[k][0], &err));
                lat[k][r * runs + i] = now_us() - t0;
            }
    double p50[MAX_PLANS];
    for (int k = 0; k < np; k++)
        p50[k] = pct(lat[k], runs * rounds, 0.5);
    printf("%s on %d GPU: p50 %.1f us a run\n", paths[0], gpus[0], p50[0]);
    for (int k = 1; k < np; k++) {
        double eff = p50[0] / (gpus[k] * p50[k]);
        printf("%s on %d GPU%s: p50 %.1f us a run; scaling efficiency %.3f (a perfect split: "
               "%.1f us, %.1f us above it)\n",
               paths[k], gpus[k], gpus[k] > 1 ? "s" : "", p50[k], eff, p50[0] / gpus[k],
               p50[k] - p50[0] / gpus[k]);
        if (k == 1)
            printf("RESULT scaling.one_us %.2f\nRESULT scaling.sharded_us %.2f\n"
                   "RESULT scaling.gpus %d\nRESULT scaling.efficiency %.4f\n",
                   p50[0], p50[1], gpus[1], eff);
        printf("RESULT scaling.%s.us %.2f\nRESULT scaling.%s.gpus %d\n"
               "RESULT scaling.%s.efficiency %.4f\n",
               tag[k], p50[k], tag[k], gpus[k], tag[k], eff);
    }
    if (inflight) {
        /* Two threads, each running its own runtime of the plan: a run is issued while the
         * other thread's is still on the GPUs. The time per run is the GPUs' work and the gaps
         * between runs on them, not the host's wait and launch. */
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < np; k++) {
                turns tw[2] = {{rt[k][0], runs / 2, 0}, {rt[k][1], runs - runs / 2, 0}};
                pthread_t th;
                double t0 = now_us();
                if (pthread_create(&th, NULL, take_turns, &tw[1]) != 0) {
                    fprintf(stderr, "bench_scaling: pthread_create failed\n");
                    return 1;
                }
                take_turns(&tw[0]);
                pthread_join(th, NULL);
                per[k][r] = (now_us() - t0) / runs;
                if (tw[0].rc || tw[1].rc) {
                    fprintf(stderr, "bench_scaling: %s: a run in flight failed\n", paths[k]);
                    return 1;
                }
            }
        print_rounds("2 runs in flight", "inflight", per, rounds, np, paths, tag, gpus);
    }
    /* the pools' instance 0 grad_weight, compared with ONE's runtime's below */
    void *pool_gw[MAX_PLANS] = {NULL};
    int pool_gw_dev[MAX_PLANS];
    if (pooled) {
        uv_loop_t loop;
        if (uv_loop_init(&loop)) {
            fprintf(stderr, "bench_scaling: uv_loop_init failed\n");
            return 1;
        }
        pool_flight pf[MAX_PLANS];
        memset(pf, 0, sizeof pf);
        for (int k = 0; k < np; k++) {
            if (baton_pool_create(&loop, plan[k], &o, 2, &pf[k].pool, &err)) {
                printf("bench_scaling: %s: a pool: %s: nothing measured on pools\n", paths[k],
                       err.message);
                return 1;
            }
            for (int i = 0; i < 2; i++) {
                const binder to = {NULL, pf[k].pool, i};
                void *w;
                int wd;
                bind_all(&to, plan[k], x, g, ngpu, i ? &w : &pool_gw[k], i ? &wd : &pool_gw_dev[k]);
            }
            if (pool_runs(&loop, &pf[k], 4) < 0) { /* captures, two runs an instance */
                fprintf(stderr, "bench_scaling: %s: a pool's run: %s\n", paths[k],
                        pf[k].first_err.message);
                return 1;
            }
        }
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < np; k++)
                if ((per[k][r] = pool_runs(&loop, &pf[k], runs)) < 0) {
                    fprintf(stderr, "bench_scaling: %s: a pool's run: %s\n", paths[k],
                            pf[k].first_err.message);
                    return 1;
                }
        print_rounds("2 runs in flight on a pool of 2 instances", "pool", per, rounds, np, paths,
                     tag, gpus);
        for (int k = 0; k < np; k++)
            baton_pool_close(pf[k].pool, NULL, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
    }
    if (trace_dir) {
        for (int k = 0; k < np; k++) {
            char file[600];
            snprintf(file, sizeof file, "%s/scaling_%s.json", trace_dir, tag[k]);
            CHECK(baton_runtime_trace_begin(rt[k][0], 4096));
            for (int i = 0; i < 3; i++)
                CHECK(baton_runtime_run(rt[k][0], &err));
            if (baton_runtime_trace_write(rt[k][0], file, &err)) /* syncs the timelines */
                fprintf(stderr, "bench_scaling: %s: %s\n", file, err.message);
            print_timeline(rt[k][0], tag[k]);
            baton_runtime_trace_begin(rt[k][0], 0);
        }
    }
    baton_tensor_info wi;
    baton_plan_tensor_info(plan[0], baton_plan_tensor_index(plan[0], "grad_weight"), &wi);
    void *h[MAX_PLANS];
    int first_same = 1;
    for (int k = 0; k < np; k++) {
        h[k] = malloc(wi.nbytes);
        if (!gw[k])
            continue;
        CHECK_CUDA(cudaSetDevice(gw_dev[k]));
        CHECK_CUDA(cudaMemcpy(h[k], gw[k], wi.nbytes, cudaMemcpyDeviceToHost));
        if (k == 0)
            continue;
        int same = memcmp(h[0], h[k], wi.nbytes) == 0;
        printf("grad_weight of %s: %s bits as %s's\n", paths[k], same ? "the same" : "DIFFERENT",
               paths[0]);
        printf("RESULT scaling.%s.grad_weight_bitwise %d\n", tag[k], same);
        if (k == 1) {
            printf("RESULT scaling.grad_weight_bitwise %d\n", same);
            first_same = same;
        }
    }
    for (int k = 0; pooled && gw[0] && k < np; k++) {
        if (!pool_gw[k])
            continue;
        void *hp = malloc(wi.nbytes);
        CHECK_CUDA(cudaSetDevice(pool_gw_dev[k]));
        CHECK_CUDA(cudaMemcpy(hp, pool_gw[k], wi.nbytes, cudaMemcpyDeviceToHost));
        printf("grad_weight of %s's pool instance 0: %s bits as %s's runtime\n", paths[k],
               memcmp(h[0], hp, wi.nbytes) == 0 ? "the same" : "DIFFERENT", paths[0]);
        free(hp);
    }
    return first_same ? 0 : 1;
}
