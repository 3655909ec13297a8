/* bench_host.c: the host-side costs of baton, on the CPU path.
 *   1. Load, validate and analyse a generated 10,000-step plan (target: <= 50 ms).
 *   2. Scheduler dispatch overhead per step with no-op kernels on the CPU (target: <= 100 ns),
 *      against the floor of calling the same kernel function directly in a loop.
 *   3. How load + validate + analyse scales with plan size (issue 9): 10k, 100k and 1M steps,
 *      alternating cpu/cuda:0 every step and on one device; targets: 100k alternating <= 12x the
 *      10k time, 1M steps < 5 s (999,999 steps: a chain has one tensor more than it has steps, and
 *      a plan holds at most 10^6 tensors). Each load starts from fresh memory, as a new process.
 * Prints tables; medians of repeated measurements.
 * Usage: bench_host [--scale=MAX] [steps] [repeats]   (--scale=0 skips part 3; default 1000000) */
#include <stdio.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
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

/* A chain of `steps` noop steps, like a real model: on the CPU, with a cuda:0 step every
 * `gpu_every` steps so that segments, boundaries and transfers are analysed too (8 for part 1; 2
 * alternates every step; 0 keeps everything on the CPU). */
static char *gen_plan(int steps, int gpu_every)
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
        const char *dev = gpu_every && i % gpu_every == gpu_every - 1 ? "cuda:0" : "cpu";
        n += (size_t)snprintf(b + n, cap - n,
                              "%s{\"name\": \"s%d\", \"kernel\": \"noop\", \"device\": \"%s\", "
                              "\"inputs\": [\"t%d\"], \"outputs\": [\"t%d\"]}\n",
                              i ? "," : "", i, dev, i, i + 1);
    }
    snprintf(b + n, cap - n, "]}\n");
    return b;
}

static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Median wall time in ms of `reps` loads (load + validate + analyse) of a generated plan, and in
 * *cpu_ms the median CPU time of the process over the same loads (less disturbed than wall time
 * on a shared machine); -1 if the plan does not load. */
static double time_load(const baton_registry *reg, int steps, int gpu_every, int reps,
                        double *cpu_ms)
{
    char *json = gen_plan(steps, gpu_every);
    size_t len = strlen(json);
    int64_t *t = malloc((size_t)reps * sizeof *t), *c = malloc((size_t)reps * sizeof *c);
    baton_error err = {0};
    double ms = -1;
    for (int r = 0; r < reps; r++) {
        baton_plan *p = NULL;
        int64_t t0 = now_ns(), c0 = cpu_ns();
        if (baton_plan_load_string(reg, json, len, "gen.json", NULL, &p, &err)) {
            fprintf(stderr, "%s\n", err.message);
            goto out;
        }
        t[r] = now_ns() - t0;
        c[r] = cpu_ns() - c0;
        baton_plan_free(p);
    }
    ms = (double)median(t, reps) / 1e6;
    if (cpu_ms)
        *cpu_ms = (double)median(c, reps) / 1e6;
out:
    free(t);
    free(c);
    free(json);
    return ms;
}

/* 3. load + validate + analyse against plan size, up to max_steps. Every load gets fresh pages
 * from the kernel, as a new process (`baton validate`) does: otherwise glibc would serve a 10k
 * plan's repeated loads from the heap its last load freed, while a plan's arrays above 32 MB are
 * always mapped afresh, and the ratio would compare warm memory with cold. */
static int scaling(const baton_registry *reg, int max_steps)
{
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 64 << 10); /* a fixed threshold: large blocks always mapped afresh */
    mallopt(M_TRIM_THRESHOLD, 64 << 10); /* and the heap's free top returned */
#endif
    /* a chain of n steps has n + 1 tensors, and the format allows 10^6: "1M" is 999,999 steps */
    static const int sizes[] = {10000, 100000, 999999};
    static const int reps[] = {21, 7, 3};
    static const char *const shapes[] = {"alternating cpu/cuda:0", "one device (cpu)"};
    double ms[2][3] = {{0}}, cpu[2][3] = {{0}};
    printf(
        "\nload + validate + analyse against plan size, fresh memory each load: wall ms (CPU ms), "
        "median of 21, 7, 3\n");
    printf("%-24s %18s %18s %18s %18s\n", "plan", "10k steps", "100k steps", "1M steps",
           "100k / 10k");
    for (int k = 0; k < 2; k++) {
        printf("%-24s", shapes[k]);
        for (int i = 0; i < 3; i++) {
            /* a 100k plan that takes seconds would take many minutes at 1M if cost is not linear */
            if (sizes[i] > max_steps + 1 || (i == 2 && ms[k][1] > 2000)) {
                printf(" %18s", sizes[i] > max_steps + 1 ? "-" : "skipped");
                continue;
            }
            ms[k][i] = time_load(reg, sizes[i], k == 0 ? 2 : 0, reps[i], &cpu[k][i]);
            if (ms[k][i] < 0)
                return 1;
            printf(" %8.1f (%7.1f)", ms[k][i], cpu[k][i]);
            fflush(stdout);
        }
        if (ms[k][1] > 0)
            printf(" %7.1fx (%6.1fx)", ms[k][1] / ms[k][0], cpu[k][1] / cpu[k][0]);
        printf("\n");
    }
    if (ms[0][1] > 0)
        printf("100k alternating <= 12x 10k (wall): %s\n",
               ms[0][1] <= 12 * ms[0][0] ? "yes" : "NO");
    if (ms[0][2] > 0 && ms[1][2] > 0)
        printf("1M steps < 5 s (wall, both plans): %s\n",
               ms[0][2] < 5000 && ms[1][2] < 5000 ? "yes" : "NO");
    return 0;
}

int main(int argc, char **argv)
{
    int max_scale = 1000000;
    if (argc > 1 && strncmp(argv[1], "--scale=", 8) == 0) {
        max_scale = atoi(argv[1] + 8);
        argc--;
        argv++;
    }
    int steps = argc > 1 ? atoi(argv[1]) : 10000;
    int reps = argc > 2 ? atoi(argv[2]) : 21;
    baton_registry *reg = NULL;
    baton_error err = {0};
    if (baton_registry_create(&reg))
        return 1;

    /* 1. load + validate + analyse */
    double load_ms = time_load(reg, steps, 8, reps, NULL);
    if (load_ms < 0)
        return 1;
    int64_t *t = malloc((size_t)reps * sizeof *t);

    /* 2. dispatch: a CPU-only noop chain, run many times */
    char *json = gen_plan(steps, 0);
    baton_plan *p = NULL;
    if (baton_plan_load_string(reg, json, strlen(json), "gen.json", NULL, &p, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    baton_options o;
    baton_options_init(&o);
    o.mode = BATON_SYNC_BOUNDARY;
    o.allow_unset_inputs = 1; /* dispatch time only: the input's values do not matter */
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
    volatile baton_kernel_fn fn = baton__kcpu_noop;
    char ebuf[64];
    baton_exec_ctx ctx = {
        .struct_size = sizeof(baton_exec_ctx), .errbuf = ebuf, .errbuf_len = sizeof ebuf};
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
    free(json);
    free(t);

    int rc = max_scale > 0 ? scaling(reg, max_scale) : 0;
    baton_registry_destroy(reg);
    return rc;
}
