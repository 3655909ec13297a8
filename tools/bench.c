/* bench.c: `baton bench`: times runs of a plan in one or more sync modes and prints a table,
 * CSV or JSON.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>
#include <uv.h>

#include "baton/baton_uv.h"
#include "cli.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct mode_result {
    baton_sync_mode mode;
    double mean_us, p50_us, p99_us, waits, launches, graphs;
    baton_gpu_backend backend; /* where the plan's cuda:N steps actually ran */
    int ok;
} mode_result;

/* Whether the plan has steps on a GPU at all. */
static int plan_uses_gpu(const baton_plan *plan)
{
    for (int i = 0; i < baton_plan_step_count(plan); i++) {
        baton_step_info si;
        if (baton_plan_step_info(plan, i, &si) == 0 && si.device.kind == BATON_DEVICE_CUDA)
            return 1;
    }
    return 0;
}

/* Where a mode ran, in words: "cuda", "sim (test device)", "cpu (fallback: no GPU)", "cpu". */
static const char *ran_on(baton_gpu_backend b, int uses_gpu)
{
    switch (b) {
    case BATON_GPU_CUDA: return "cuda";
    case BATON_GPU_SIM: return "sim (test device)";
    default: return uses_gpu ? "cpu (fallback)" : "cpu";
    }
}

static const char *gpu_asked(baton_gpu_backend g)
{
    static const char *const n[] = {"auto", "cuda", "cpu", "sim"};
    return (unsigned)g < 4 ? n[g] : "?";
}

/* The modes of --modes, checked before anything runs. 0 or an exit code. */
static int parse_modes(const char *list, baton_sync_mode *modes, int *n)
{
    char buf[256];
    *n = 0;
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
        buf[0] = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == 3 || baton_sync_mode_parse(tok, &modes[*n])) {
            fprintf(stderr,
                    "baton bench: --modes=%s: %s '%s' (give up to 3 of strict, boundary, "
                    "graph)\n",
                    cli_esc(list), *n == 3 ? "too many modes at" : "unknown mode", cli_esc(tok));
            return EXIT_USAGE;
        }
        ++*n;
    }
    if (*n == 0) {
        fprintf(stderr, "baton bench: --modes=%s names no mode (use strict, boundary, graph)\n",
                cli_esc(list));
        return EXIT_USAGE;
    }
    return 0;
}

static void json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    putchar('"');
}

/* ---- --inflight: N runs in flight on a baton_uv pool -------------------------------------- */

typedef struct flight flight;
typedef struct request {
    baton_job job;
    baton_binding *in, *out;
    flight *F;
} request;

struct flight {
    baton_pool *pool;
    request *req;
    int total, submitted, finished, failed, ok;
    int64_t *lat_ns;
    int64_t t_end;
    cli_progress *prog;
    int64_t done_before; /* progress of the modes before this one */
    baton_error first_err;
};

static void on_done(baton_job *job, int status);

static int submit(flight *F, request *r)
{
    int rc = baton_pool_submit(F->pool, &r->job, on_done);
    if (rc) {
        if (!F->failed++)
            F->first_err = r->job.err;
        return rc;
    }
    F->submitted++;
    return 0;
}

static void on_done(baton_job *job, int status)
{
    request *r = job->data;
    flight *F = r->F;
    if (status) {
        if (!F->failed++)
            F->first_err = job->err;
    } else {
        F->lat_ns[F->ok++] = (int64_t)uv_hrtime() - job->submit_ns;
    }
    F->finished++;
    if (F->prog)
        cli_progress_update(F->prog, F->done_before + F->finished);
    if (F->submitted < F->total && !F->failed)
        submit(F, r);
    else if (F->finished == F->submitted)
        F->t_end = (int64_t)uv_hrtime();
}

/* Submits `total` runs, at most `inflight` at a time, and runs the loop until they are done. */
static int fly(uv_loop_t *loop, flight *F, int inflight, int total)
{
    F->total = total;
    F->submitted = F->finished = F->failed = F->ok = 0;
    for (int k = 0; k < inflight && k < total; k++)
        if (submit(F, &F->req[k]))
            break;
    uv_run(loop, UV_RUN_DEFAULT);
    return F->failed ? -1 : 0;
}

static void on_closed(void *arg)
{
    (void)arg;
}

static int bench_inflight(cli *c, const baton_plan *plan, const baton_sync_mode *want, int nwant)
{
    int n = c->inflight, iters = c->iters > 0 ? c->iters : 100, rc = 0;
    int nt = baton_plan_tensor_count(plan), n_in = 0, n_out = 0;
    baton_error err = {0};
    for (int t = 0; t < nt; t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        n_in += ti.role == BATON_ROLE_INPUT;
        n_out += ti.role == BATON_ROLE_OUTPUT;
    }
    void **inputs = calloc((size_t)nt + 1, sizeof *inputs);
    flight F = {0};
    /* the warm-up rounds record n latencies too */
    F.lat_ns = malloc((size_t)(iters > n ? iters : n) * sizeof *F.lat_ns);
    struct {
        double runs_per_s, p50_us, p99_us, loop_us, busy; /* busy < 0: not measured */
        char busy_why[160];
        /* per CUDA device the plan uses (gpu_dev), with busy: its busy fraction and the device
         * time a run cost it (kernels and copies, side by side counted each) */
        double dev_busy[BATON_BUSY_MAX_DEVICES], dev_us[BATON_BUSY_MAX_DEVICES];
    } res[3];
    /* the plan's CUDA devices, in arena order */
    int gpu_dev[BATON_BUSY_MAX_DEVICES], n_gpu_dev = 0;
    for (int i = 0; i < baton_plan_arena_count(plan); i++) {
        baton_arena a;
        if (baton_plan_arena_info(plan, i, &a) == 0 && a.device.kind == BATON_DEVICE_CUDA &&
            a.device.index < BATON_BUSY_MAX_DEVICES && n_gpu_dev < BATON_BUSY_MAX_DEVICES)
            gpu_dev[n_gpu_dev++] = a.device.index;
    }
    int nres = 0, queues_ahead = 0;
    uv_loop_t loop;
    int loop_ok = 0;
    if (!inputs || !F.lat_ns) {
        rc = cli_oom("the latency table", (size_t)(iters > n ? iters : n) * sizeof *F.lat_ns);
        goto out;
    }
    if ((rc = cli_read_inputs(c, plan, inputs, 1)))
        goto out;
    /* The requests share the read-only input buffers; each has its own outputs. */
    request *req = calloc((size_t)n, sizeof *req);
    F.req = req;
    if (!req) {
        rc = cli_oom("the requests in flight", (size_t)n * sizeof *req);
        goto out;
    }
    for (int k = 0; k < n; k++) {
        request *r = &req[k];
        baton_job_init(&r->job);
        r->job.data = r;
        r->F = &F;
        r->in = calloc((size_t)n_in + 1, sizeof *r->in);
        r->out = calloc((size_t)n_out + 1, sizeof *r->out);
        if (!r->in || !r->out) {
            rc = cli_oom("the requests' bindings", 0);
            goto out;
        }
        for (int t = 0; t < nt; t++) {
            baton_tensor_info ti;
            baton_plan_tensor_info(plan, t, &ti);
            if (ti.role == BATON_ROLE_INPUT) {
                baton_binding *b = &r->in[r->job.n_inputs++];
                b->name = ti.name, b->data = inputs[t], b->nbytes = ti.nbytes;
            } else if (ti.role == BATON_ROLE_OUTPUT && !c->no_copies) {
                baton_binding *b = &r->out[r->job.n_outputs++];
                b->name = ti.name, b->nbytes = ti.nbytes;
                if (!(b->data = malloc(ti.nbytes ? ti.nbytes : 1))) {
                    char what[700];
                    snprintf(what, sizeof what,
                             "output '%s' for request %d of --inflight=%d (each request in "
                             "flight has its own outputs; give a smaller --inflight)",
                             cli_esc(ti.name), k + 1, n);
                    rc = cli_oom(what, ti.nbytes);
                    goto out;
                }
            }
        }
        r->job.inputs = r->in;
        r->job.outputs = r->out;
    }
    if (uv_loop_init(&loop)) {
        fprintf(stderr, "baton bench: uv_loop_init failed\n");
        rc = EXIT_RUN;
        goto out;
    }
    loop_ok = 1;
    /* the loop's idle time, so that its busy time per run can be reported */
    uv_loop_configure(&loop, UV_METRICS_IDLE_TIME);
    cli_progress prog;
    cli_progress_begin(&prog, c, "baton bench", (int64_t)nwant * iters);
    for (int m = 0; m < nwant; m++) {
        baton_options o = c->opts;
        o.mode = want[m];
        if (baton_pool_create(&loop, plan, &o, n, &F.pool, &err)) {
            cli_progress_end(&prog);
            char need[64];
            if (err.code == BATON_ENOMEM)
                fprintf(stderr,
                        "baton bench: %s mode: out of memory creating %d instances (each "
                        "needs arenas of %s; give a smaller --inflight): %s\n",
                        baton_sync_mode_name(want[m]), n, cli_arena_total(plan, need, sizeof need),
                        cli_esc(err.message));
            else
                fprintf(stderr, "baton bench: %s mode: %s\n", baton_sync_mode_name(want[m]),
                        cli_esc(err.message));
            rc = EXIT_RUN;
            break;
        }
        c->opts.quiet = 1; /* say the notes once */
        queues_ahead = baton_pool_queues_ahead(F.pool);
        /* warm-up: two rounds of n runs put two on every instance (all free, one each), so graph
         * capture and first launches stay out of the numbers; with --no-copies they copy the
         * inputs into every instance, and the timed runs then bind nothing */
        for (int k = 0; c->no_copies && k < n; k++)
            req[k].job.n_inputs = n_in; /* a previous mode's timed runs set it to 0 */
        F.prog = NULL;
        int bad = fly(&loop, &F, n, n) || fly(&loop, &F, n, n);
        for (int k = 0; c->no_copies && k < n; k++)
            req[k].job.n_inputs = 0;
        int64_t t0 = 0, idle0 = 0;
        if (!bad) {
            F.prog = &prog;
            F.done_before = (int64_t)m * iters;
            t0 = (int64_t)uv_hrtime();
            idle0 = (int64_t)uv_metrics_idle_time(&loop);
            bad = fly(&loop, &F, n, iters);
        }
        int64_t idle = (int64_t)uv_metrics_idle_time(&loop) - idle0;
        if (!bad) {
            qsort(F.lat_ns, (size_t)F.ok, sizeof *F.lat_ns, cmp_i64);
            double secs = (double)(F.t_end - t0) / 1e9;
            res[nres].runs_per_s = F.ok / secs;
            res[nres].p50_us = (double)F.lat_ns[F.ok / 2] / 1e3;
            res[nres].p99_us = (double)F.lat_ns[(int)((F.ok - 1) * 0.99)] / 1e3;
            /* busy = wall - idle: submit and completion work per run on the loop thread */
            res[nres].loop_us = ((double)(F.t_end - t0) - (double)idle) / 1e3 / F.ok;
        }
        /* The GPU busy fraction, from a second pass of the same runs recorded with CUPTI: the
         * recording slows every launch, so it stays out of the timed pass above. */
        res[nres].busy = -1;
        baton_gpu_backend be = baton_pool_gpu_backend(F.pool);
        if (!bad && be != BATON_GPU_CUDA) {
            snprintf(res[nres].busy_why, sizeof res[nres].busy_why, "the GPU steps ran on the %s",
                     be == BATON_GPU_SIM ? "test device" : "CPU");
        } else if (!bad) {
            baton_error busy_err = {0};
            double frac = 0;
            F.prog = NULL;
            if (baton_gpu_busy_begin(&busy_err) == 0) {
                bad = fly(&loop, &F, n, iters);
                if (baton_gpu_busy_end(&frac, &busy_err) == 0 && !bad) {
                    res[nres].busy = frac;
                    for (int g = 0; g < n_gpu_dev; g++) {
                        int64_t work = 0;
                        res[nres].dev_busy[g] = res[nres].dev_us[g] = -1;
                        if (baton_gpu_busy_device(gpu_dev[g], &res[nres].dev_busy[g], &work,
                                                  NULL) == 0)
                            res[nres].dev_us[g] = (double)work / 1e3 / iters;
                    }
                }
            }
            if (res[nres].busy < 0)
                snprintf(res[nres].busy_why, sizeof res[nres].busy_why, "%.150s",
                         bad ? "the recorded pass failed" : busy_err.message);
        }
        baton_pool_close(F.pool, on_closed, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        F.pool = NULL;
        if (bad) {
            cli_progress_end(&prog);
            fprintf(stderr, "baton bench: %s mode, %d in flight: %s\n",
                    baton_sync_mode_name(want[m]), n, cli_esc(F.first_err.message));
            rc = EXIT_RUN;
            break;
        }
        nres++;
    }
    cli_progress_end(&prog);
    if (rc)
        goto out;
    /* The GPU busy fraction is measured with device timestamps or not at all: throughput x the
     * one-at-a-time latency would count host and wait time as GPU time. */
    if (strcmp(c->format, "csv") == 0) {
        /* the per-device columns hold one value per CUDA device of the plan, in device order,
         * separated by spaces (empty: not measured) */
        printf("mode,inflight,runs,runs_per_s,p50_us,p99_us,loop_busy_us_per_run,gpu_busy_fraction,"
               "gpu_busy_by_device,gpu_us_per_run_by_device\n");
        for (int i = 0; i < nres; i++) {
            char busy[32] = "", by[2][BATON_BUSY_MAX_DEVICES * 16] = {"", ""};
            if (res[i].busy >= 0) {
                snprintf(busy, sizeof busy, "%.4f", res[i].busy);
                for (int g = 0; g < n_gpu_dev; g++) {
                    size_t l0 = strlen(by[0]), l1 = strlen(by[1]);
                    snprintf(by[0] + l0, sizeof by[0] - l0, "%s%.4f", g ? " " : "",
                             res[i].dev_busy[g]);
                    snprintf(by[1] + l1, sizeof by[1] - l1, "%s%.2f", g ? " " : "",
                             res[i].dev_us[g]);
                }
            }
            printf("%s,%d,%d,%.2f,%.3f,%.3f,%.3f,%s,%s,%s\n", baton_sync_mode_name(want[i]), n,
                   iters, res[i].runs_per_s, res[i].p50_us, res[i].p99_us, res[i].loop_us, busy,
                   by[0], by[1]);
        }
    } else if (strcmp(c->format, "json") == 0) {
        printf("{\"plan\": ");
        json_string(baton_plan_name(plan));
        printf(", \"inflight\": %d, \"iters\": %d, \"no_copies\": %s, \"modes\": [\n", n, iters,
               c->no_copies ? "true" : "false");
        for (int i = 0; i < nres; i++) {
            printf("  {\"mode\": \"%s\", \"runs_per_s\": %.2f, \"p50_us\": %.3f, \"p99_us\": "
                   "%.3f, \"loop_busy_us_per_run\": %.3f, \"gpu_busy_fraction\": ",
                   baton_sync_mode_name(want[i]), res[i].runs_per_s, res[i].p50_us, res[i].p99_us,
                   res[i].loop_us);
            if (res[i].busy >= 0) {
                printf("%.4f, \"gpu_busy_by_device\": {", res[i].busy);
                for (int g = 0; g < n_gpu_dev; g++)
                    printf("%s\"cuda:%d\": {\"busy\": %.4f, \"us_per_run\": %.3f}", g ? ", " : "",
                           gpu_dev[g], res[i].dev_busy[g], res[i].dev_us[g]);
                printf("}, \"gpu_busy_note\": null}");
            } else {
                printf("null, \"gpu_busy_note\": ");
                json_string(res[i].busy_why);
                printf("}");
            }
            printf("%s\n", i + 1 < nres ? "," : "");
        }
        printf("]}\n");
    } else {
        printf("plan '%s', %d in flight on a pool of %d instances: %d timed runs per mode after "
               "2 warm-up runs per instance; graph mode queues ahead: %s%s\n",
               cli_esc(baton_plan_name(plan)), n, n, iters, queues_ahead ? "yes" : "no",
               c->no_copies ? "; the timed runs bind no inputs or outputs (--no-copies)" : "");
        printf("%-9s %11s %11s %11s %14s %9s\n", "mode", "runs/s", "p50 us", "p99 us",
               "loop us/run", "GPU busy");
        int any_na = 0;
        for (int i = 0; i < nres; i++) {
            char busy[32] = "n/a";
            if (res[i].busy >= 0)
                snprintf(busy, sizeof busy, "%.1f %%", 100 * res[i].busy);
            else
                any_na = i + 1;
            printf("%-9s %11.1f %11.2f %11.2f %14.2f %9s\n", baton_sync_mode_name(want[i]),
                   res[i].runs_per_s, res[i].p50_us, res[i].p99_us, res[i].loop_us, busy);
            for (int g = 0; res[i].busy >= 0 && n_gpu_dev > 1 && g < n_gpu_dev; g++)
                printf("%-9s cuda:%d busy %.1f %%, %.2f us of device time a run\n", "", gpu_dev[g],
                       100 * res[i].dev_busy[g], res[i].dev_us[g]);
        }
        printf("latency: submit to completion; loop us/run: the libuv loop's busy time (wall - "
               "idle) per run.\nGPU busy: the part of a second pass of the same runs in which the "
               "GPU ran a kernel or copy\n(CUPTI device timestamps; recording slows launches, so "
               "that pass is not the timed one).\n");
        if (any_na)
            printf("GPU busy fraction: n/a, not measured: %s.\n",
                   cli_esc(res[any_na - 1].busy_why));
    }
out:
    if (F.req)
        for (int k = 0; k < n; k++) {
            for (int i = 0; i < F.req[k].job.n_outputs; i++)
                free(F.req[k].out[i].data);
            free(F.req[k].in);
            free(F.req[k].out);
        }
    free(F.req);
    if (loop_ok)
        uv_loop_close(&loop);
    if (inputs)
        cli_free_inputs(plan, inputs);
    free(inputs);
    free(F.lat_ns);
    return rc;
}

/* --report: one traced run per mode (after a few untimed ones), then the HTML page. */
static int bench_report(cli *c, const baton_plan *plan, void **inputs, const mode_result *res,
                        int nres, const int64_t *lat_all, int iters, int uses_gpu, int ratios,
                        double strict_p50)
{
    report_mode rm[3];
    char paths[3][64];
    int rc = 0, made = 0;
    size_t cap = (size_t)baton_plan_step_count(plan) * 16 + 256;
    for (int m = 0; m < nres && !rc; m++) {
        baton_options o = c->opts;
        o.mode = res[m].mode;
        o.quiet = 1;
        baton_runtime *rt = NULL;
        baton_error err = {0};
        snprintf(paths[m], sizeof paths[m], "/tmp/baton-report-XXXXXX");
        int fd = cli_temp_create(paths[m]); /* removed on SIGINT too */
        if (fd < 0) {
            fprintf(stderr, "baton bench: --report: cannot create a temporary file\n");
            rc = EXIT_IO;
            break;
        }
        close(fd);
        made = m + 1;
        if (baton_runtime_create(plan, &o, &rt, &err) || cli_bind_inputs(c, plan, rt, inputs)) {
            fprintf(stderr, "%s\n", cli_esc(err.message));
            baton_runtime_destroy(rt);
            rc = EXIT_RUN;
            break;
        }
        for (int i = 0; i < 3 && !rc; i++)
            rc = baton_runtime_run(rt, &err) ? EXIT_RUN : 0;
        /* three traced runs: the page draws the last, after the tracer's own first costs */
        if (!rc && (baton_runtime_trace_begin(rt, cap * 3) || baton_runtime_run(rt, &err) ||
                    baton_runtime_run(rt, &err) || baton_runtime_run(rt, &err) ||
                    baton_runtime_trace_write(rt, paths[m], &err))) {
            fprintf(stderr, "baton bench: --report: %s\n", cli_esc(err.message));
            rc = EXIT_RUN;
        }
        baton_runtime_destroy(rt);
        rm[m] = (report_mode){res[m].mode,   ran_on(res[m].backend, uses_gpu),
                              res[m].p50_us, res[m].p99_us,
                              res[m].waits,  res[m].launches,
                              res[m].graphs, lat_all + (size_t)m * (size_t)iters,
                              iters,         paths[m]};
    }
    /* the page is written beside its path and renamed over it at the end, as --output is: a
     * failure or a signal leaves the old report in place */
    if (!rc) {
        cli_staged st;
        if (cli_stage(&st, c->report)) {
            fprintf(stderr, "baton bench: --report: cannot create a file beside %s: %s\n",
                    cli_esc(c->report), strerror(errno));
            rc = EXIT_IO;
        } else {
            rc = cli_report_write(c, plan, rm, nres, ratios, strict_p50, st.tmp);
            if (rc)
                cli_discard(&st, 1);
            else
                rc = cli_commit(&st, 1);
        }
    }
    for (int m = 0; m < made; m++) {
        unlink(paths[m]);
        cli_temp_remove(paths[m]);
    }
    return rc;
}

int cmd_bench(cli *c)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_error err = {0};
    baton_sync_mode want[3];
    int nwant = 0;
    int64_t *times = NULL, *step_ns = NULL, *lat_all = NULL;
    char *tuning = NULL; /* the first runtime's "tuning: ..." lines (table format) */
    size_t tuning_len = 0;
    void **inputs = NULL;
    int rc = parse_modes(c->modes, want, &nwant);
    if (rc)
        return rc;
    if ((rc = cli_load(c, &reg, &plan)) || (rc = cli_check_bindings(c, plan)))
        goto out;
    if (c->inflight) {
        rc = bench_inflight(c, plan, want, nwant);
        goto out;
    }
    int iters = c->iters > 0 ? c->iters : 100;
    mode_result res[3];
    int nres = 0;
    times = malloc((size_t)iters * sizeof *times);
    lat_all = malloc((size_t)iters * 3 * sizeof *lat_all);
    int nsteps = baton_plan_step_count(plan);
    step_ns = calloc((size_t)(nsteps ? nsteps : 1) * 3, sizeof *step_ns);
    inputs = calloc((size_t)baton_plan_tensor_count(plan) + 1, sizeof *inputs);
    if (!times || !step_ns || !inputs || !lat_all) {
        rc = cli_oom("the latency tables", (size_t)iters * 4 * sizeof *times);
        goto out;
    }
    if ((rc = cli_read_inputs(c, plan, inputs, 1)))
        goto out;
    cli_progress prog;
    cli_progress_begin(&prog, c, "baton bench", (int64_t)nwant * (c->warmup + iters));
    int64_t done = 0;
    for (int m = 0; m < nwant; m++) {
        baton_options o = c->opts;
        o.mode = want[m];
        baton_runtime *rt = NULL;
        if (baton_runtime_create(plan, &o, &rt, &err)) {
            cli_progress_end(&prog);
            fprintf(stderr, "%s\n", cli_esc(err.message));
            rc = EXIT_RUN;
            break;
        }
        if ((rc = cli_bind_inputs(c, plan, rt, inputs))) {
            baton_runtime_destroy(rt);
            break;
        }
        c->opts.quiet = 1; /* say the notes once */
        if (m == 0 && strcmp(c->format, "table") == 0) {
            FILE *f = open_memstream(&tuning, &tuning_len);
            for (int i = 0; f && i < nsteps; i++) {
                const char *t = baton_runtime_tuning(rt, i);
                baton_step_info si;
                if (t && baton_plan_step_info(plan, i, &si) == 0)
                    fprintf(f, "tuning: step '%s': %s\n", cli_esc(si.name), cli_esc(t));
            }
            if (f)
                fclose(f);
        }
        for (int i = 0; i < c->warmup && !rc; i++) {
            if (baton_runtime_run(rt, &err))
                rc = EXIT_RUN;
            cli_progress_update(&prog, ++done);
        }
        baton_runtime_reset_stats(rt);
        baton_runtime_enable_step_timing(rt, c->per_step);
        for (int i = 0; i < iters && !rc; i++) {
            int64_t t0 = cli_clock_ns();
            if (baton_runtime_run(rt, &err))
                rc = EXIT_RUN;
            times[i] = cli_clock_ns() - t0;
            cli_progress_update(&prog, ++done);
        }
        if (rc) {
            cli_progress_end(&prog);
            fprintf(stderr, "baton bench: %s mode: %s\n", baton_sync_mode_name(want[m]),
                    cli_esc(err.message));
            baton_runtime_destroy(rt);
            break;
        }
        baton_run_stats st;
        baton_runtime_stats(rt, &st);
        double sum = 0;
        for (int i = 0; i < iters; i++)
            sum += (double)times[i];
        qsort(times, (size_t)iters, sizeof *times, cmp_i64);
        memcpy(lat_all + (size_t)nres * (size_t)iters, times, (size_t)iters * sizeof *times);
        mode_result *r = &res[nres];
        r->mode = o.mode;
        r->mean_us = sum / iters / 1e3;
        r->p50_us = (double)times[iters / 2] / 1e3;
        r->p99_us = (double)times[(int)((iters - 1) * 0.99)] / 1e3;
        r->waits = (double)st.host_waits / (double)st.runs;
        r->launches = (double)st.kernel_launches / (double)st.runs;
        r->graphs = (double)st.graph_launches / (double)st.runs;
        r->backend = baton_runtime_gpu_backend(rt);
        r->ok = 1;
        for (int i = 0; i < nsteps; i++)
            baton_runtime_step_time_ns(rt, i, &step_ns[(size_t)nres * (size_t)nsteps + (size_t)i]);
        nres++;
        baton_runtime_destroy(rt);
    }
    cli_progress_end(&prog);
    if (rc)
        goto out;
    /* The ratio of p50s against strict mode means something only when the modes differ: with
     * the plan's GPU steps on the CPU (the fallback) every mode runs the same code, and a ratio
     * is noise. */
    double strict_p50 = 0;
    int uses_gpu = plan_uses_gpu(plan), fallback = 0;
    for (int i = 0; i < nres; i++) {
        if (res[i].mode == BATON_SYNC_STRICT)
            strict_p50 = res[i].p50_us;
        fallback |= uses_gpu && res[i].backend == BATON_GPU_CPU;
    }
    int ratios = strict_p50 > 0 && !fallback && uses_gpu;
    const char *why_no_ratio = !uses_gpu
                                   ? "the plan has no GPU steps: every mode runs the same code"
                               : fallback ? "fallback: the GPU steps ran on the CPU, so every mode "
                                            "runs the same code"
                                          : "no strict mode to compare with";
    const int pdl = !c->opts.disable_pdl, ahead = c->opts.disable_queue_ahead <= 0;
    if (strcmp(c->format, "csv") == 0) {
        printf("mode,mean_us,p50_us,p99_us,host_waits_per_run,launches_per_run,graph_launches_per_"
               "run,p50_ratio_strict_over_mode,ran_on,fallback,gpu_asked,pdl,queue_ahead,"
               "baton_version\n");
        for (int i = 0; i < nres; i++) {
            char ratio[32] = "";
            if (ratios)
                snprintf(ratio, sizeof ratio, "%.3f", strict_p50 / res[i].p50_us);
            printf("%s,%.3f,%.3f,%.3f,%.2f,%.2f,%.2f,%s,%s,%d,%s,%d,%d,%s\n",
                   baton_sync_mode_name(res[i].mode), res[i].mean_us, res[i].p50_us, res[i].p99_us,
                   res[i].waits, res[i].launches, res[i].graphs, ratio,
                   ran_on(res[i].backend, uses_gpu), uses_gpu && res[i].backend == BATON_GPU_CPU,
                   gpu_asked(c->opts.gpu), pdl, ahead, baton_version_string());
        }
    } else if (strcmp(c->format, "json") == 0) {
        printf("{\"format\": \"baton.bench\", \"format_version\": 1, \"baton_version\": \"%s\", "
               "\"plan\": ",
               baton_version_string());
        json_string(baton_plan_name(plan));
        printf(", \"iters\": %d, \"warmup\": %d, \"options\": {\"gpu\": \"%s\", \"pdl\": %s, "
               "\"queue_ahead\": %s, \"modes\": ",
               iters, c->warmup, gpu_asked(c->opts.gpu), pdl ? "true" : "false",
               ahead ? "true" : "false");
        json_string(c->modes);
        printf("}, \"fallback\": %s, \"ratio_note\": ", fallback ? "true" : "false");
        if (ratios)
            printf("null");
        else
            json_string(why_no_ratio);
        printf(", \"modes\": [\n");
        for (int i = 0; i < nres; i++) {
            char ratio[32] = "null";
            if (ratios)
                snprintf(ratio, sizeof ratio, "%.3f", strict_p50 / res[i].p50_us);
            printf("  {\"mode\": \"%s\", \"ran_on\": \"%s\", \"fallback\": %s, \"mean_us\": %.3f, "
                   "\"p50_us\": %.3f, \"p99_us\": %.3f, \"host_waits_per_run\": %.2f, "
                   "\"launches_per_run\": %.2f, \"graph_launches_per_run\": %.2f, "
                   "\"p50_ratio_strict_over_mode\": %s}%s\n",
                   baton_sync_mode_name(res[i].mode), ran_on(res[i].backend, uses_gpu),
                   uses_gpu && res[i].backend == BATON_GPU_CPU ? "true" : "false", res[i].mean_us,
                   res[i].p50_us, res[i].p99_us, res[i].waits, res[i].launches, res[i].graphs,
                   ratio, i + 1 < nres ? "," : "");
        }
        printf("]}\n");
    } else {
        printf("plan '%s', %d timed runs per mode after %d warm-up runs; baton %s; --gpu=%s, "
               "pdl %s, queue-ahead %s, autotune %s\n",
               cli_esc(baton_plan_name(plan)), iters, c->warmup, baton_version_string(),
               gpu_asked(c->opts.gpu), pdl ? "on" : "off", ahead ? "on" : "off",
               c->opts.no_autotune ? "off" : "on");
        printf("%-9s %-18s %11s %11s %11s %11s %9s %9s %12s\n", "mode", "ran on", "mean us",
               "p50 us", "p99 us", "waits/run", "calls/run", "graphs", "strict/mode");
        for (int i = 0; i < nres; i++) {
            char sp[32] = "n/a";
            if (ratios)
                snprintf(sp, sizeof sp, "%.2fx", strict_p50 / res[i].p50_us);
            printf("%-9s %-18s %11.2f %11.2f %11.2f %11.2f %9.2f %9.2f %12s\n",
                   baton_sync_mode_name(res[i].mode), ran_on(res[i].backend, uses_gpu),
                   res[i].mean_us, res[i].p50_us, res[i].p99_us, res[i].waits, res[i].launches,
                   res[i].graphs, sp);
        }
        if (ratios)
            printf("strict/mode: strict mode's p50 over this mode's p50 (above 1: faster than "
                   "strict)%s\n",
                   res[0].backend == BATON_GPU_SIM ? "; the test device runs GPU steps on host "
                                                     "threads, so this measures scheduling only"
                                                   : "");
        else
            printf("strict/mode p50 ratio: n/a (%s)\n", why_no_ratio);
        if (tuning && tuning_len)
            fputs(tuning, stdout);
        if (c->per_step) {
            printf("\nhost time per step and run, ns (GPU steps: issue time except in strict "
                   "mode; graph mode: the whole segment's launch on its first step)\n%-24s",
                   "step");
            for (int m = 0; m < nres; m++)
                printf(" %12s", baton_sync_mode_name(res[m].mode));
            printf("\n");
            for (int s = 0; s < nsteps; s++) {
                baton_step_info si;
                baton_plan_step_info(plan, s, &si);
                printf("%-24s", cli_esc(si.name));
                for (int m = 0; m < nres; m++)
                    printf(" %12.0f",
                           (double)step_ns[(size_t)m * (size_t)nsteps + (size_t)s] / iters);
                printf("\n");
            }
        }
    }
    if (c->report)
        rc = bench_report(c, plan, inputs, res, nres, lat_all, iters, uses_gpu, ratios, strict_p50);
out:
    free(tuning);
    free(times);
    free(lat_all);
    free(step_ns);
    if (inputs)
        cli_free_inputs(plan, inputs);
    free(inputs);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return rc;
}
