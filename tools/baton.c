/* baton.c: the command-line tool's entry point and its plan commands. `baton validate | inspect |
 * run | bench PLAN`: check a plan, show its analysis, run it with .npy inputs and outputs, or time
 * it in several sync modes (bench.c). Arguments are parsed in args.c; exit codes are in cli.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int cmd_validate(const cli *c)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    int rc = cli_load(c, &reg, &plan);
    if (!rc) {
        int nseg = 0;
        baton_step_info si;
        for (int i = 0; i < baton_plan_step_count(plan); i++)
            if (baton_plan_step_info(plan, i, &si) == 0 && si.segment + 1 > nseg)
                nseg = si.segment + 1;
        printf("%s: ok: plan '%s', %d tensors, %d steps, %d segments\n", cli_esc(c->plan_path),
               cli_esc(baton_plan_name(plan)), baton_plan_tensor_count(plan),
               baton_plan_step_count(plan), nseg);
    }
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return rc;
}

/* The described text, escaped, with the newlines and tabs of its layout kept, but not those of
 * the plan's name (the one free-form string in it): the name is printed escaped, as `run` and
 * `validate` print it, so that it cannot forge lines. */
static void print_described(const char *text, size_t len, const char *name)
{
    const size_t nl = name ? strlen(name) : 0;
    if (!nl || !strpbrk(name, "\n\t\r")) {
        cli_fputs_safe(text, len, stdout);
        return;
    }
    size_t at = 0;
    for (size_t i = 0; i + nl <= len;) {
        if (memcmp(text + i, name, nl) != 0) {
            i++;
            continue;
        }
        cli_fputs_safe(text + at, i - at, stdout);
        fputs(cli_esc(name), stdout);
        i += nl;
        at = i;
    }
    cli_fputs_safe(text + at, len - at, stdout);
}

static int cmd_inspect(const cli *c)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    int rc = cli_load(c, &reg, &plan);
    if (!rc && c->json) {
        /* JSON escapes every control byte itself */
        if (baton_plan_describe(plan, stdout, 1))
            rc = EXIT_IO;
    } else if (!rc) {
        /* the text names the plan's tensors and steps: escape what they hold on the way out */
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        if (!mem) {
            rc = EXIT_RUN;
        } else {
            int bad = baton_plan_describe(plan, mem, 0);
            fclose(mem);
            if (bad)
                rc = EXIT_IO;
            else
                print_described(text, len, baton_plan_name(plan));
            free(text);
        }
    }
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return rc;
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
    printf("%s %s [", cli_esc(ti->name), baton_dtype_name(ti->desc.dtype));
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
    void **inputs = NULL;
    cli_staged *staged = NULL;
    int n_staged = 0;
    int rc = cli_load(c, &reg, &plan);
    if (rc)
        goto out;
    /* everything that can be checked before a run is: names, then every path to be written */
    if ((rc = cli_check_bindings(c, plan)))
        goto out;
    inputs = calloc((size_t)baton_plan_tensor_count(plan) + 1, sizeof *inputs);
    staged = calloc((size_t)c->n_out + 2, sizeof *staged);
    if (!inputs || !staged) {
        rc = cli_oom("the command's tables", 0);
        goto out;
    }
    if ((rc = cli_read_inputs(c, plan, inputs, 1)))
        goto out;
    if (baton_runtime_create(plan, &c->opts, &rt, &err)) {
        char need[64];
        if (err.code == BATON_ENOMEM)
            fprintf(stderr, "baton: out of memory preparing the plan (its arenas need %s): %s\n",
                    cli_arena_total(plan, need, sizeof need), cli_esc(err.message));
        else
            fprintf(stderr, "%s\n", cli_esc(err.message));
        rc = EXIT_RUN;
        goto out;
    }
    if ((rc = cli_bind_inputs(c, plan, rt, inputs)))
        goto out;
    if (c->trace && baton_runtime_trace_begin(rt, 1u << 20)) {
        fprintf(stderr, "baton: --trace: %s\n", baton_strerror(BATON_ENOMEM));
        rc = EXIT_RUN;
        goto out;
    }
    int iters = c->iters > 0 ? c->iters : 1;
    cli_progress prog;
    cli_progress_begin(&prog, c, "baton run", iters);
    for (int it = 0; it < iters; it++) {
        if (baton_runtime_run(rt, &err)) {
            cli_progress_end(&prog);
            fprintf(stderr, "baton: run %d failed: %s\n", it + 1, cli_esc(err.message));
            rc = EXIT_RUN;
            goto out;
        }
        cli_progress_update(&prog, it + 1);
    }
    cli_progress_end(&prog);
    /* the trace and the outputs are written to temporary files and renamed together at the
     * end, so a failure leaves none of them behind */
    if (c->trace) {
        if (cli_stage(&staged[n_staged], c->trace)) {
            fprintf(stderr, "baton: --trace: cannot create a file beside %s: %s\n",
                    cli_esc(c->trace), strerror(errno));
            rc = EXIT_IO;
            goto out;
        }
        if (baton_runtime_trace_write(rt, staged[n_staged++].tmp, &err)) {
            fprintf(stderr, "baton: --trace: %s\n", cli_esc(err.message));
            rc = EXIT_IO;
            goto out;
        }
    }
    for (int i = 0; i < c->n_out; i++) {
        baton_tensor_info ti;
        int t = baton_plan_tensor_index(plan, c->out[i].name);
        baton_plan_tensor_info(plan, t, &ti); /* checked by cli_check_bindings */
        if (cli_stage(&staged[n_staged], c->out[i].path)) {
            fprintf(stderr, "baton: --output %s: cannot create a file beside %s: %s\n",
                    cli_esc(ti.name), cli_esc(c->out[i].path), strerror(errno));
            rc = EXIT_IO;
            goto out;
        }
        baton_tensor_desc run_desc = ti.desc; /* the last run's shape, under its dims */
        baton_runtime_tensor_desc(rt, ti.name, &run_desc);
        size_t nb = (size_t)baton_tensor_desc_numel(&run_desc) * baton_dtype_size(run_desc.dtype);
        void *buf = malloc(nb ? nb : 1);
        if (!buf) {
            char what[600];
            snprintf(what, sizeof what, "--output %s's copy", cli_esc(ti.name));
            rc = cli_oom(what, nb);
            n_staged++;
            goto out;
        }
        int got = baton_runtime_get_output(rt, ti.name, buf, nb, &err);
        int wrote = got ? -1 : baton_npy_write(staged[n_staged++].tmp, &run_desc, buf, &err);
        free(buf);
        if (got || wrote) {
            fprintf(stderr, "baton: --output %s: %s\n", cli_esc(ti.name), cli_esc(err.message));
            rc = got ? EXIT_RUN : EXIT_IO;
            goto out;
        }
    }
    if ((rc = cli_commit(staged, n_staged)))
        goto out;
    n_staged = 0;
    baton_run_stats st;
    baton_runtime_stats(rt, &st);
    printf("plan '%s': %lld run(s) in %s mode on %s\n", cli_esc(baton_plan_name(plan)),
           (long long)st.runs, baton_sync_mode_name(baton_runtime_mode(rt)),
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
        printf("note: %s\n", cli_esc(baton_runtime_note(rt)));
    for (int i = 0; i < baton_plan_step_count(plan); i++) {
        const char *t = baton_runtime_tuning(rt, i);
        baton_step_info si;
        if (t && baton_plan_step_info(plan, i, &si) == 0)
            printf("tuning: step '%s': %s\n", cli_esc(si.name), cli_esc(t));
    }
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_OUTPUT)
            continue;
        baton_runtime_tensor_desc(rt, ti.name, &ti.desc);
        ti.nbytes = (size_t)baton_tensor_desc_numel(&ti.desc) * baton_dtype_size(ti.desc.dtype);
        void *buf = malloc(ti.nbytes ? ti.nbytes : 1);
        if (buf && baton_runtime_get_output(rt, ti.name, buf, ti.nbytes, &err) == 0)
            print_output(&ti, buf, c->print);
        free(buf);
    }
out:
    if (staged)
        cli_discard(staged, n_staged);
    free(staged);
    if (inputs)
        cli_free_inputs(plan, inputs);
    free(inputs);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        cli_print_usage(argc > 2 ? argv[2] : NULL);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("baton %s (plan format %d, CUDA %s)\n", baton_version_string(),
               BATON_PLAN_FORMAT_VERSION, baton_cuda_built() ? "built" : "not built");
        return 0;
    }
    if (strcmp(argv[1], "targets") == 0) { /* takes no plan: its own small parser */
        baton_log_set(cli_log, NULL);
        int rc = cmd_targets(argc, argv);
        return fflush(stdout) || ferror(stdout) ? (rc ? rc : EXIT_IO) : rc;
    }
    if (strcmp(argv[1], "tokenize") == 0) { /* takes a tokenizer, not a plan */
        int rc = cmd_tokenize(argc, argv);
        return fflush(stdout) || ferror(stdout) ? (rc ? rc : EXIT_IO) : rc;
    }
    const char *cmds[] = {"validate", "inspect", "run", "bench"};
    int known = 0;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        known |= strcmp(argv[1], cmds[i]) == 0;
    if (!known) {
        fprintf(stderr, "baton: unknown command '%s'\n\n%s", cli_esc(argv[1]), cli_usage_main);
        return EXIT_USAGE;
    }
    baton_log_set(cli_log, NULL);
    cli_clean_up_on_signals();
    static cli c; /* large (the bindings' names): not on the stack */
    char msg[1024];
    if (cli_parse(argc, argv, &c, msg, sizeof msg)) {
        fprintf(stderr, "%s\n", msg); /* escaped by cli_parse */
        return EXIT_USAGE;
    }
    if (c.help) {
        cli_print_usage(c.cmd);
        return 0;
    }
    int rc = strcmp(c.cmd, "validate") == 0  ? cmd_validate(&c)
             : strcmp(c.cmd, "inspect") == 0 ? cmd_inspect(&c)
             : strcmp(c.cmd, "run") == 0     ? cmd_run(&c)
                                             : cmd_bench(&c);
    /* what was printed must have reached its file (a full disk, a closed pipe): exit 4 if not */
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "baton: cannot write the standard output: %s\n", strerror(errno));
        return rc ? rc : EXIT_IO;
    }
    return rc;
}
