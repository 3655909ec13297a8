/* bench_host.c: the host-side costs of baton, on the CPU path.
 *   1. Load, validate and analyse a generated 10,000-step plan (target: <= 50 ms).
 *   2. Scheduler dispatch overhead per step with no-op kernels on the CPU (target: <= 100 ns),
 *      against the floor of calling the same kernel function directly in a loop.
 * Prints a table; medians of repeated measurements. Usage: bench_host [steps] [repeats] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/baton.h"
#include "kernels/cpu/cpu_kernels.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t median(int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

/* A chain of `steps` steps alternating over a few kernels and devices, like a real model:
 * noop on the CPU, with a cuda:0 step every 8 so that segments, boundaries and transfers
 * are analysed too (`gpu` = 0 keeps everything on the CPU for the dispatch benchmark). */
static char *gen_plan(int steps, int gpu)
{
    size_t cap = (size_t)steps * 220 + 4096, n = 0;
    char *b = malloc(cap);
    n += (size_t)snprintf(b + n, cap - n,
                          "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"gen%d\",\n"
                          "\"tensors\": [\n{\"name\": \"t0\", \"dtype\": \"f32\", \"shape\": [1, "
                          "64], \"role\": \"input\"}",
                          steps);
    for (int i = 1; i <= steps; i++)
        n += (size_t)snprintf(b + n, cap - n,
                              ",\n{\"name\": \"t%d\", \"dtype\": \"f32\", \"shape\": [1, 64]%s}", i,
                              i == steps ? ", \"role\": \"output\"" : "");
    n += (size_t)snprintf(b + n, cap - n, "],\n\"steps\": [\n");
    for (int i = 0; i < steps; i++) {
        const char *dev = gpu && i % 8 == 7 ? "cuda:0" : "cpu";
        n += (size_t)snprintf(b + n, cap - n,
                              "%s{\"name\": \"s%d\", \"kernel\": \"noop\", \"device\": \"%s\", "
                              "\"inputs\": [\"t%d\"], \"outputs\": [\"t%d\"]}\n",
                              i ? "," : "", i, dev, i, i + 1);
    }
    snprintf(b + n, cap - n, "]}\n");
    return b;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 10000;
    int reps = argc > 2 ? atoi(argv[2]) : 21;
    baton_registry *reg = NULL;
    baton_error err = {0};
    if (baton_registry_create(&reg))
        return 1;

    /* 1. load + validate + analyse */
    char *json = gen_plan(steps, 1);
    size_t len = strlen(json);
    int64_t *t = malloc((size_t)reps * sizeof *t);
    for (int r = 0; r < reps; r++) {
        baton_plan *p = NULL;
        int64_t t0 = now_ns();
        if (baton_plan_load_string(reg, json, len, "gen.json", NULL, &p, &err)) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        t[r] = now_ns() - t0;
        baton_plan_free(p);
    }
    double load_ms = (double)median(t, reps) / 1e6;
    free(json);

    /* 2. dispatch: a CPU-only noop chain, run many times */
    json = gen_plan(steps, 0);
    baton_plan *p = NULL;
    if (baton_plan_load_string(reg, json, strlen(json), "gen.json", NULL, &p, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    baton_options o;
    baton_options_init(&o);
    o.mode = BATON_SYNC_BOUNDARY;
    baton_runtime *rt = NULL;
    if (baton_runtime_create(p, &o, &rt, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    for (int r = 0; r < 5; r++)
        baton_runtime_run(rt, &err);
    for (int r = 0; r < reps; r++) {
        int64_t t0 = now_ns();
        for (int k = 0; k < 10; k++)
            if (baton_runtime_run(rt, &err)) {
                fprintf(stderr, "%s\n", err.message);
                return 1;
            }
        t[r] = now_ns() - t0;
    }
    double per_step = (double)median(t, reps) / 10.0 / steps;

    /* the floor: the same kernel called directly through a function pointer */
    volatile baton_kernel_fn fn = kcpu_noop;
    char ebuf[64];
    baton_exec_ctx ctx = {.errbuf = ebuf, .errbuf_len = sizeof ebuf};
    void *bufs[2] = {0, 0};
    for (int r = 0; r < reps; r++) {
        int64_t t0 = now_ns();
        for (int k = 0; k < 10 * steps; k++)
            fn(&ctx, bufs, NULL, 0);
        t[r] = now_ns() - t0;
    }
    double floor_ns = (double)median(t, reps) / 10.0 / steps;
    baton_run_stats st;
    baton_runtime_stats(rt, &st);

    printf("bench_host: %d-step plans, median of %d\n", steps, reps);
    printf("%-44s %12s %10s %8s\n", "quantity", "measured", "target", "ok");
    printf("%-44s %9.2f ms %7s ms %8s\n", "load + validate + analyse", load_ms, "<= 50",
           load_ms <= 50 ? "yes" : "NO");
    printf("%-44s %9.1f ns %7s ns %8s\n", "dispatch per step (CPU, no-op kernel)", per_step,
           "<= 100", per_step <= 100 ? "yes" : "NO");
    printf("%-44s %9.1f ns %10s %8s\n", "floor: direct call of the same kernel", floor_ns, "-",
           "-");
    printf("%-44s %9.1f ns %10s %8s\n", "scheduler's own cost per step", per_step - floor_ns, "-",
           "-");
    printf("runs %lld, steps per run %lld, host waits %lld\n", (long long)st.runs,
           (long long)(st.steps / (st.runs ? st.runs : 1)), (long long)st.host_waits);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
    baton_registry_destroy(reg);
    free(json);
    free(t);
    return 0;
}
