/* bench_trace.c: what tracing costs per run (issue 12). One plan (default the 64-step RMSNorm
 * chain) in graph mode on cuda:0, taking turns in rounds: tracing off; CUPTI's kernel and copy
 * records alone, enabled on the untraced runtime through baton_gpu_busy_begin (the floor: what
 * the profiler interface costs with nothing of baton's tracing); and tracing on with
 * the GPU timeline (CUPTI is process-wide: it is on only while its way runs). Prints p50 per run
 * and the ratios, and writes the trace.
 *   bench_trace [plan.json] [--runs N] [--rounds R] [--mode M] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

static void on_segv(int sig)
{
    void *f[64];
    int n = backtrace(f, 64);
    backtrace_symbols_fd(f, n, 2);
    _exit(128 + sig);
}

#include "baton/baton.h"
#include "bench/cuda/bench_stats.h"

/* CUPTI's records alone: baton_gpu_busy_begin/end enable the same activity kinds as a trace's
 * device timeline, with nothing of the trace (no spans, no step tags). */
static int floor_on(int on, double *busy)
{
    baton_error e = {0};
    return on ? baton_gpu_busy_begin(&e) == 0 : baton_gpu_busy_end(busy, &e) == 0;
}

int main(int argc, char **argv)
{
    signal(SIGSEGV, on_segv);
    const char *path = "examples/plans/rmsnorm_chain64.json";
    int runs = 300, rounds = 5;
    baton_sync_mode mode = BATON_SYNC_GRAPH;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc)
            baton_sync_mode_parse(argv[++i], &mode);
        else
            path = argv[i];
    }
    if (baton_cuda_device_count() == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    baton_error err = {0};
    baton_registry *reg;
    baton_plan *plan;
    CHECK(baton_registry_create(&reg));
    CHECK(baton_plan_load(reg, path, &plan, &err));
    baton_options o;
    baton_options_init(&o);
    o.mode = mode;
    o.gpu = BATON_GPU_CUDA;
    o.quiet = 1;
    /* CUPTI is process-wide: while any runtime traces, every kernel of the process is recorded.
     * So the ways take turns, each round tracing only while its traced way runs. */
    enum { OFF, FLOOR, ON, NWAYS };
    static const char *const name[NWAYS] = {"tracing off", "CUPTI records alone (floor)",
                                            "tracing on (host + GPU timeline)"};
    int have_floor = floor_on(1, NULL) && floor_on(0, NULL); /* CUPTI can be had */
    double busy = 0;
    baton_runtime *rt[NWAYS];
    for (int w = 0; w < NWAYS; w++)
        CHECK(baton_runtime_create(plan, &o, &rt[w], &err));
    size_t cap = (size_t)(runs + 50) * (size_t)(baton_plan_step_count(plan) * 3 + 8);
    int total = runs * rounds;
    double *lat[NWAYS];
    for (int w = 0; w < NWAYS; w++)
        lat[w] = malloc((size_t)total * sizeof(double));
    for (int i = 0; i < 20; i++)
        for (int w = 0; w < NWAYS; w++)
            CHECK(baton_runtime_run(rt[w], &err));
    for (int r = 0; r < rounds; r++)
        for (int w = 0; w < NWAYS; w++) {
            if (w == FLOOR && !have_floor)
                continue;
            if (w == FLOOR) {
                floor_on(1, NULL);
                for (int i = 0; i < 5; i++) /* settle, as the traced way does */
                    CHECK(baton_runtime_run(rt[w], &err));
            }
            if (w == ON) {
                CHECK(baton_runtime_trace_begin(rt[w], cap));
                for (int i = 0; i < 5; i++) /* settle */
                    CHECK(baton_runtime_run(rt[w], &err));
            }
            for (int i = 0; i < runs; i++) {
                double t0 = now_us();
                CHECK(baton_runtime_run(rt[w], &err));
                lat[w][r * runs + i] = now_us() - t0;
            }
            if (w == FLOOR)
                floor_on(0, &busy);
            if (w == ON && r == rounds - 1) {
                const char *out = "/tmp/bench_trace.json";
                CHECK(baton_runtime_trace_write(rt[w], out, &err));
                printf("RESULT trace written to %s\n", out);
            }
            if (w == ON)
                CHECK(baton_runtime_trace_begin(rt[w], 0));
        }
    printf("bench_trace: %s, %s mode, %d rounds x %d runs per way\n", path,
           baton_sync_mode_name(mode), rounds, runs);
    double p50[NWAYS];
    for (int w = 0; w < NWAYS; w++) {
        if (w == FLOOR && !have_floor)
            continue;
        p50[w] = pct(lat[w], total, 0.5);
        printf("%-34s p50 %8.2f us  p90 %8.2f us\n", name[w], p50[w], pct(lat[w], total, 0.9));
    }
    printf("RESULT tracing on / off p50 ratio %.3f\n", p50[ON] / p50[OFF]);
    if (have_floor)
        printf("RESULT CUPTI alone / off p50 ratio %.3f (GPU busy %.1f %% in its last round; "
               "tracing on / CUPTI alone %.3f)\n",
               p50[FLOOR] / p50[OFF], 100 * busy, p50[ON] / p50[FLOOR]);
    else
        printf("RESULT CUPTI alone: not measured (no CUPTI: baton_gpu_busy_begin refused)\n");
    for (int w = 0; w < NWAYS; w++)
        baton_runtime_destroy(rt[w]);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return 0;
}
