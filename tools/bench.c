/* bench.c: `baton bench`: times runs of a plan in one or more sync modes and prints a table,
 * CSV or JSON.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct mode_result {
    baton_sync_mode mode;
    double mean_us, p50_us, p99_us, waits, launches, graphs;
    int ok;
} mode_result;

int cmd_bench(cli *c)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = cli_load(c, &reg, &plan);
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
        if (baton_runtime_create(plan, &o, &rt, &err) || cli_bind_inputs(c, plan, rt)) {
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
            int64_t t0 = cli_clock_ns();
            if (baton_runtime_run(rt, &err))
                rc = EXIT_RUN;
            times[i] = cli_clock_ns() - t0;
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
