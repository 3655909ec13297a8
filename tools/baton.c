/* baton.c: the command-line tool. `baton validate | inspect | run | bench PLAN`: check a plan,
 * show its analysis, run it with .npy inputs and outputs, or time it in several sync modes.
 *
 * Exit codes: 0 success, 1 invalid plan, 2 bad usage, 3 a run failed (device, kernel, delegate),
 * 4 an input or output file could not be read or written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/baton.h"

#define EXIT_PLAN    1
#define EXIT_USAGE   2
#define EXIT_RUN     3
#define EXIT_IO      4
#define MAX_BINDINGS 64

typedef struct binding {
    const char *name;
    const char *path;
} binding;

typedef struct cli {
    const char *cmd;
    const char *plan_path;
    int json;
    baton_options opts;
    const char *modes; /* bench */
    int iters, warmup;
    const char *format; /* bench: table, csv, json */
    int per_step;
    const char *trace;
    int n_in, n_out;
    binding in[MAX_BINDINGS], out[MAX_BINDINGS];
    int print;
} cli;

static const char *usage_main =
    "usage: baton <command> [options] PLAN.json\n"
    "\n"
    "commands:\n"
    "  validate   check a plan file and report the first error (file:line:column)\n"
    "  inspect    show a plan's analysis: segments, boundaries, transfers, memory plan, waits\n"
    "  run        run a plan, reading inputs from and writing outputs to .npy files\n"
    "  bench      time runs of a plan in one or more sync modes\n"
    "\n"
    "`baton <command> --help` lists a command's options.\n"
    "exit codes: 0 success, 1 invalid plan, 2 bad usage, 3 run failed, 4 file error\n";

static const char *usage_common =
    "  --gpu=auto|cuda|cpu|sim  where cuda:N steps run (default auto: CUDA when present, else\n"
    "                           the CPU with a warning; sim: the test device)\n"
    "  --no-fallback            with --gpu=auto, a missing CUDA device is an error\n"
    "  --no-pdl                 do not use programmatic dependent launch between kernels\n"
    "  --no-queue-ahead         graph mode: do not queue a GPU segment before the CPU segment\n"
    "                           that feeds it (behind a gate the host opens)\n"
    "  -q, --quiet              no warnings\n";

static void print_usage(const char *cmd)
{
    if (!cmd) {
        fputs(usage_main, stdout);
        return;
    }
    if (strcmp(cmd, "validate") == 0) {
        printf("usage: baton validate PLAN.json\n\nLoads, validates and analyses the plan; prints "
               "a one-line summary or the first error.\n");
    } else if (strcmp(cmd, "inspect") == 0) {
        printf("usage: baton inspect [--json] PLAN.json\n\nShows steps (with each step's next "
               "device), segments, boundaries,\ntransfers, the per-device memory plan and the "
               "host waits of each sync mode.\n  --json   machine-readable output\n");
    } else if (strcmp(cmd, "run") == 0) {
        printf(
            "usage: baton run [options] PLAN.json\n\n"
            "  --mode=strict|boundary|graph  sync mode (default graph)\n"
            "  --iters=N                     run N times (default 1); outputs are from the last\n"
            "  --input NAME=FILE.npy         bind an input (inputs not bound are filled with\n"
            "                                seeded N(0,1) values, with a note)\n"
            "  --output NAME=FILE.npy        write an output after the last run\n"
            "  --trace=FILE.json             write a Chrome trace (open it in Perfetto)\n"
            "  --print                       print every output's values, not just a summary\n");
        fputs(usage_common, stdout);
    } else if (strcmp(cmd, "bench") == 0) {
        printf("usage: baton bench [options] PLAN.json\n\n"
               "  --modes=LIST      comma-separated sync modes (default strict,boundary,graph)\n"
               "  --iters=N         timed runs per mode (default 100)\n"
               "  --warmup=N        untimed runs first (default 5)\n"
               "  --format=F        table (default), csv or json\n"
               "  --steps           also print host time per step\n");
        fputs(usage_common, stdout);
    } else {
        fputs(usage_main, stdout);
    }
}

static int parse_binding(const char *arg, binding *b)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return -1;
    static char store[MAX_BINDINGS * 2][512];
    static int used;
    if (used >= MAX_BINDINGS * 2 || (size_t)(eq - arg) >= sizeof store[0])
        return -1;
    char *name = store[used++];
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = 0;
    b->name = name;
    b->path = eq + 1;
    return 0;
}

/* Returns the value of --opt=value or --opt value; advances *i for the latter. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt)
{
    size_t n = strlen(opt);
    if (strncmp(argv[*i], opt, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] == 0 && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

static int parse_args(int argc, char **argv, cli *c)
{
    baton_options_init(&c->opts);
    c->iters = -1;
    c->warmup = 5;
    c->format = "table";
    c->modes = "strict,boundary,graph";
    c->cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_usage(c->cmd);
            exit(0);
        } else if (strcmp(a, "--json") == 0) {
            c->json = 1;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            c->opts.quiet = 1;
        } else if (strcmp(a, "--no-fallback") == 0) {
            c->opts.fallback_is_error = 1;
        } else if (strcmp(a, "--no-pdl") == 0) {
            c->opts.disable_pdl = 1;
        } else if (strcmp(a, "--no-queue-ahead") == 0) {
            c->opts.disable_queue_ahead = 1;
        } else if (strcmp(a, "--steps") == 0) {
            c->per_step = 1;
        } else if (strcmp(a, "--print") == 0) {
            c->print = 1;
        } else if ((v = opt_value(argc, argv, &i, "--mode"))) {
            if (baton_sync_mode_parse(v, &c->opts.mode)) {
                fprintf(stderr, "baton: unknown mode '%s' (use strict, boundary or graph)\n", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--modes"))) {
            c->modes = v;
        } else if ((v = opt_value(argc, argv, &i, "--gpu"))) {
            if (strcmp(v, "auto") == 0)
                c->opts.gpu = BATON_GPU_AUTO;
            else if (strcmp(v, "cuda") == 0)
                c->opts.gpu = BATON_GPU_CUDA;
            else if (strcmp(v, "cpu") == 0)
                c->opts.gpu = BATON_GPU_CPU;
            else if (strcmp(v, "sim") == 0)
                c->opts.gpu = BATON_GPU_SIM;
            else {
                fprintf(stderr, "baton: unknown --gpu '%s' (use auto, cuda, cpu or sim)\n", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--iters"))) {
            c->iters = atoi(v);
            if (c->iters < 1) {
                fprintf(stderr, "baton: --iters needs a positive number, not '%s'\n", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--warmup"))) {
            c->warmup = atoi(v);
            if (c->warmup < 0) {
                fprintf(stderr, "baton: --warmup needs a number >= 0, not '%s'\n", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--format"))) {
            if (strcmp(v, "table") && strcmp(v, "csv") && strcmp(v, "json")) {
                fprintf(stderr, "baton: unknown --format '%s' (use table, csv or json)\n", v);
                return -1;
            }
            c->format = v;
        } else if ((v = opt_value(argc, argv, &i, "--trace"))) {
            c->trace = v;
        } else if ((v = opt_value(argc, argv, &i, "--input"))) {
            if (c->n_in == MAX_BINDINGS || parse_binding(v, &c->in[c->n_in++])) {
                fprintf(stderr, "baton: --input takes NAME=FILE.npy, not '%s'\n", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--output"))) {
            if (c->n_out == MAX_BINDINGS || parse_binding(v, &c->out[c->n_out++])) {
                fprintf(stderr, "baton: --output takes NAME=FILE.npy, not '%s'\n", v);
                return -1;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "baton %s: unknown option '%s' (see baton %s --help)\n", c->cmd, a,
                    c->cmd);
            return -1;
        } else if (!c->plan_path) {
            c->plan_path = a;
        } else {
            fprintf(stderr, "baton %s: one plan file at a time ('%s' and '%s')\n", c->cmd,
                    c->plan_path, a);
            return -1;
        }
    }
    if (!c->plan_path) {
        fprintf(stderr, "baton %s: no plan file given (see baton %s --help)\n", c->cmd, c->cmd);
        return -1;
    }
    return 0;
}

static int load(const cli *c, baton_registry **reg, baton_plan **plan)
{
    baton_error err = {0};
    int rc = baton_registry_create(reg);
    if (rc) {
        fprintf(stderr, "baton: %s\n", baton_strerror(rc));
        return EXIT_RUN;
    }
    rc = baton_plan_load(*reg, c->plan_path, plan, &err);
    if (rc) {
        fprintf(stderr, "%s\n", err.message);
        return rc == BATON_EIO ? EXIT_IO : EXIT_PLAN;
    }
    return 0;
}

static int cmd_validate(const cli *c)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    int rc = load(c, &reg, &plan);
    if (!rc) {
        int nseg = 0;
        baton_step_info si;
        for (int i = 0; i < baton_plan_step_count(plan); i++)
            if (baton_plan_step_info(plan, i, &si) == 0 && si.segment + 1 > nseg)
                nseg = si.segment + 1;
        printf("%s: ok: plan '%s', %d tensors, %d steps, %d segments\n", c->plan_path,
               baton_plan_name(plan), baton_plan_tensor_count(plan), baton_plan_step_count(plan),
               nseg);
    }
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return rc;
}

static int cmd_inspect(const cli *c)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    int rc = load(c, &reg, &plan);
    if (!rc && baton_plan_describe(plan, stdout, c->json))
        rc = EXIT_IO;
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return rc;
}

/* Fills an unbound input with reproducible N(0, 1) values: the plan format's seeded normal, so a
 * plan constant with the same seed holds the same bits. */
static void fill_default(const baton_tensor_info *ti, void *buf, uint64_t seed)
{
    baton_fill_normal(buf, ti->desc.dtype, baton_tensor_desc_numel(&ti->desc), seed, 0.0, 1.0);
}

static int bind_inputs(const cli *c, baton_plan *plan, baton_runtime *rt)
{
    baton_error err = {0};
    for (int i = 0; i < c->n_in; i++)
        if (baton_plan_tensor_index(plan, c->in[i].name) < 0) {
            fprintf(stderr, "baton: --input %s: the plan has no tensor of that name\n",
                    c->in[i].name);
            return EXIT_USAGE;
        }
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_INPUT)
            continue;
        const char *path = NULL;
        for (int i = 0; i < c->n_in; i++)
            if (strcmp(c->in[i].name, ti.name) == 0)
                path = c->in[i].path;
        void *buf = NULL;
        if (path) {
            baton_tensor_desc d;
            if (baton_npy_read(path, &d, &buf, &err)) {
                fprintf(stderr, "baton: --input %s: %s\n", ti.name, err.message);
                return EXIT_IO;
            }
            int same = d.dtype == ti.desc.dtype &&
                       baton_tensor_desc_numel(&d) == baton_tensor_desc_numel(&ti.desc);
            if (!same) {
                fprintf(stderr,
                        "baton: --input %s: %s holds %s with %lld elements, the plan wants %s "
                        "with %lld\n",
                        ti.name, path, baton_dtype_name(d.dtype),
                        (long long)baton_tensor_desc_numel(&d), baton_dtype_name(ti.desc.dtype),
                        (long long)baton_tensor_desc_numel(&ti.desc));
                free(buf);
                return EXIT_IO;
            }
        } else {
            buf = malloc(ti.nbytes ? ti.nbytes : 1);
            if (!buf)
                return EXIT_RUN;
            fill_default(&ti, buf, (uint64_t)t + 1);
            if (!c->opts.quiet)
                fprintf(stderr, "baton: note: input '%s' not given; filled with N(0,1), seed %d\n",
                        ti.name, t + 1);
        }
        int rc = baton_runtime_set_input(rt, ti.name, buf, ti.nbytes, &err);
        free(buf);
        if (rc) {
            fprintf(stderr, "baton: %s\n", err.message);
            return EXIT_RUN;
        }
    }
    return 0;
}

/* Element i of a buffer of dtype dt, as a double (through the library's conversion). */
static double element(baton_dtype dt, const void *buf, int64_t i)
{
    double v = NAN;
    baton_convert(&v, BATON_DTYPE_F64, (const char *)buf + (size_t)i * baton_dtype_size(dt), dt, 1);
    return v;
}

static void print_output(const baton_tensor_info *ti, const void *buf, int all)
{
    int64_t n = baton_tensor_desc_numel(&ti->desc);
    double sum = 0, mn = INFINITY, mx = -INFINITY;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = element(ti->desc.dtype, buf, i);
        if (isnan(v)) {
            nan++;
            continue;
        }
        sum += v;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    printf("%s %s [", ti->name, baton_dtype_name(ti->desc.dtype));
    for (int i = 0; i < ti->desc.rank; i++)
        printf("%s%lld", i ? "," : "", (long long)ti->desc.shape[i]);
    printf("]  mean %.6g  min %.6g  max %.6g%s\n", n ? sum / (double)n : 0.0, mn, mx,
           nan ? "  (has NaN)" : "");
    int64_t show = all ? n : (n < 8 ? n : 8);
    printf("  ");
    for (int64_t i = 0; i < show; i++)
        printf("%.6g%s", element(ti->desc.dtype, buf, i), i + 1 < show ? " " : "");
    printf("%s\n", show < n ? " ..." : "");
}

static int cmd_run(cli *c)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    int rc = load(c, &reg, &plan);
    if (rc)
        goto out;
    if (baton_runtime_create(plan, &c->opts, &rt, &err)) {
        fprintf(stderr, "%s\n", err.message);
        rc = EXIT_RUN;
        goto out;
    }
    if ((rc = bind_inputs(c, plan, rt)))
        goto out;
    if (c->trace && baton_runtime_trace_begin(rt, 1u << 20)) {
        rc = EXIT_RUN;
        goto out;
    }
    int iters = c->iters > 0 ? c->iters : 1;
    for (int it = 0; it < iters; it++)
        if (baton_runtime_run(rt, &err)) {
            fprintf(stderr, "baton: run %d failed: %s\n", it + 1, err.message);
            rc = EXIT_RUN;
            goto out;
        }
    if (c->trace) {
        if (baton_runtime_trace_write(rt, c->trace, &err)) {
            fprintf(stderr, "baton: %s\n", err.message);
            rc = EXIT_IO;
            goto out;
        }
    }
    for (int i = 0; i < c->n_out; i++) {
        int t = baton_plan_tensor_index(plan, c->out[i].name);
        baton_tensor_info ti;
        if (t < 0 || baton_plan_tensor_info(plan, t, &ti) || ti.role != BATON_ROLE_OUTPUT) {
            fprintf(stderr, "baton: --output %s: the plan has no output of that name\n",
                    c->out[i].name);
            rc = EXIT_USAGE;
            goto out;
        }
        void *buf = malloc(ti.nbytes ? ti.nbytes : 1);
        int bad = !buf || baton_runtime_get_output(rt, ti.name, buf, ti.nbytes, &err) ||
                  baton_npy_write(c->out[i].path, &ti.desc, buf, &err);
        free(buf);
        if (bad) {
            fprintf(stderr, "baton: --output %s: %s\n", ti.name, err.message);
            rc = EXIT_IO;
            goto out;
        }
    }
    baton_run_stats st;
    baton_runtime_stats(rt, &st);
    printf("plan '%s': %lld run(s) in %s mode on %s\n", baton_plan_name(plan), (long long)st.runs,
           baton_sync_mode_name(baton_runtime_mode(rt)),
           baton_runtime_gpu_backend(rt) == BATON_GPU_CUDA  ? "CUDA"
           : baton_runtime_gpu_backend(rt) == BATON_GPU_SIM ? "the test device"
                                                            : "the CPU");
    printf("per run: %.0f steps, %.1f launches, %.1f host waits, %.1f graph launches "
           "(%.1f queued ahead), %.0f B to devices, %.0f B to host; %lld capture(s), %lld "
           "update(s)\n",
           (double)st.steps / (double)st.runs, (double)st.kernel_launches / (double)st.runs,
           (double)st.host_waits / (double)st.runs, (double)st.graph_launches / (double)st.runs,
           (double)st.queued_ahead / (double)st.runs, (double)st.bytes_h2d / (double)st.runs,
           (double)st.bytes_d2h / (double)st.runs, (long long)st.captures,
           (long long)st.graph_updates);
    if (baton_runtime_note(rt))
        printf("note: %s\n", baton_runtime_note(rt));
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_OUTPUT)
            continue;
        void *buf = malloc(ti.nbytes ? ti.nbytes : 1);
        if (buf && baton_runtime_get_output(rt, ti.name, buf, ti.nbytes, &err) == 0)
            print_output(&ti, buf, c->print);
        free(buf);
    }
out:
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return rc;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct mode_result {
    baton_sync_mode mode;
    double mean_us, p50_us, p99_us, waits, launches, graphs;
    int ok;
} mode_result;

static int cmd_bench(cli *c)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = load(c, &reg, &plan);
    if (rc)
        goto out;
    int iters = c->iters > 0 ? c->iters : 100;
    mode_result res[3];
    int nres = 0;
    char modes[256];
    snprintf(modes, sizeof modes, "%s", c->modes);
    int64_t *times = malloc((size_t)iters * sizeof *times);
    int nsteps = baton_plan_step_count(plan);
    int64_t *step_ns = calloc((size_t)(nsteps ? nsteps : 1) * 3, sizeof *step_ns);
    if (!times || !step_ns) {
        free(times);
        free(step_ns);
        rc = EXIT_RUN;
        goto out;
    }
    for (char *tok = strtok(modes, ","); tok && nres < 3; tok = strtok(NULL, ",")) {
        baton_options o = c->opts;
        if (baton_sync_mode_parse(tok, &o.mode)) {
            fprintf(stderr, "baton bench: unknown mode '%s' (use strict, boundary, graph)\n", tok);
            rc = EXIT_USAGE;
            break;
        }
        baton_runtime *rt = NULL;
        if (baton_runtime_create(plan, &o, &rt, &err) || bind_inputs(c, plan, rt)) {
            if (rt == NULL)
                fprintf(stderr, "%s\n", err.message);
            baton_runtime_destroy(rt);
            rc = EXIT_RUN;
            break;
        }
        o.quiet = 1;
        c->opts.quiet = 1; /* say the notes once */
        for (int i = 0; i < c->warmup && !rc; i++)
            if (baton_runtime_run(rt, &err))
                rc = EXIT_RUN;
        baton_runtime_reset_stats(rt);
        baton_runtime_enable_step_timing(rt, c->per_step);
        for (int i = 0; i < iters && !rc; i++) {
            int64_t t0 = clock_ns();
            if (baton_runtime_run(rt, &err))
                rc = EXIT_RUN;
            times[i] = clock_ns() - t0;
        }
        if (rc) {
            fprintf(stderr, "baton bench: %s mode: %s\n", tok, err.message);
            baton_runtime_destroy(rt);
            break;
        }
        baton_run_stats st;
        baton_runtime_stats(rt, &st);
        double sum = 0;
        for (int i = 0; i < iters; i++)
            sum += (double)times[i];
        qsort(times, (size_t)iters, sizeof *times, cmp_i64);
        mode_result *r = &res[nres];
        r->mode = o.mode;
        r->mean_us = sum / iters / 1e3;
        r->p50_us = (double)times[iters / 2] / 1e3;
        r->p99_us = (double)times[(int)((iters - 1) * 0.99)] / 1e3;
        r->waits = (double)st.host_waits / (double)st.runs;
        r->launches = (double)st.kernel_launches / (double)st.runs;
        r->graphs = (double)st.graph_launches / (double)st.runs;
        r->ok = 1;
        for (int i = 0; i < nsteps; i++)
            baton_runtime_step_time_ns(rt, i, &step_ns[(size_t)nres * (size_t)nsteps + (size_t)i]);
        nres++;
        baton_runtime_destroy(rt);
    }
    double strict_p50 = 0;
    for (int i = 0; i < nres; i++)
        if (res[i].mode == BATON_SYNC_STRICT)
            strict_p50 = res[i].p50_us;
    if (strcmp(c->format, "csv") == 0) {
        printf("mode,mean_us,p50_us,p99_us,host_waits_per_run,launches_per_run,graph_launches_per_"
               "run,speedup_over_strict\n");
        for (int i = 0; i < nres; i++)
            printf("%s,%.3f,%.3f,%.3f,%.2f,%.2f,%.2f,%.3f\n", baton_sync_mode_name(res[i].mode),
                   res[i].mean_us, res[i].p50_us, res[i].p99_us, res[i].waits, res[i].launches,
                   res[i].graphs, strict_p50 > 0 ? strict_p50 / res[i].p50_us : 0.0);
    } else if (strcmp(c->format, "json") == 0) {
        printf("{\"plan\": \"%s\", \"iters\": %d, \"modes\": [\n", baton_plan_name(plan), iters);
        for (int i = 0; i < nres; i++)
            printf("  {\"mode\": \"%s\", \"mean_us\": %.3f, \"p50_us\": %.3f, \"p99_us\": %.3f, "
                   "\"host_waits_per_run\": %.2f, \"launches_per_run\": %.2f, "
                   "\"graph_launches_per_run\": %.2f, \"speedup_over_strict\": %.3f}%s\n",
                   baton_sync_mode_name(res[i].mode), res[i].mean_us, res[i].p50_us, res[i].p99_us,
                   res[i].waits, res[i].launches, res[i].graphs,
                   strict_p50 > 0 ? strict_p50 / res[i].p50_us : 0.0, i + 1 < nres ? "," : "");
        printf("]}\n");
    } else {
        printf("plan '%s', %d timed runs per mode after %d warm-up runs\n", baton_plan_name(plan),
               iters, c->warmup);
        printf("%-9s %11s %11s %11s %11s %9s %9s %9s\n", "mode", "mean us", "p50 us", "p99 us",
               "waits/run", "calls/run", "graphs", "speedup");
        for (int i = 0; i < nres; i++) {
            char sp[32] = "-";
            if (strict_p50 > 0)
                snprintf(sp, sizeof sp, "%.2fx", strict_p50 / res[i].p50_us);
            printf("%-9s %11.2f %11.2f %11.2f %11.2f %9.2f %9.2f %9s\n",
                   baton_sync_mode_name(res[i].mode), res[i].mean_us, res[i].p50_us, res[i].p99_us,
                   res[i].waits, res[i].launches, res[i].graphs, sp);
        }
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
                printf("%-24s", si.name);
                for (int m = 0; m < nres; m++)
                    printf(" %12.0f",
                           (double)step_ns[(size_t)m * (size_t)nsteps + (size_t)s] / iters);
                printf("\n");
            }
        }
    }
    free(times);
    free(step_ns);
out:
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        print_usage(argc > 2 ? argv[2] : NULL);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("baton %s (plan format %d, CUDA %s)\n", baton_version_string(),
               BATON_PLAN_FORMAT_VERSION, baton_cuda_built() ? "built" : "not built");
        return 0;
    }
    const char *cmds[] = {"validate", "inspect", "run", "bench"};
    int known = 0;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        known |= strcmp(argv[1], cmds[i]) == 0;
    if (!known) {
        fprintf(stderr, "baton: unknown command '%s'\n\n%s", argv[1], usage_main);
        return EXIT_USAGE;
    }
    cli c = {0};
    if (parse_args(argc, argv, &c))
        return EXIT_USAGE;
    if (strcmp(c.cmd, "validate") == 0)
        return cmd_validate(&c);
    if (strcmp(c.cmd, "inspect") == 0)
        return cmd_inspect(&c);
    if (strcmp(c.cmd, "run") == 0)
        return cmd_run(&c);
    return cmd_bench(&c);
}
