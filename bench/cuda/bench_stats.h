/* bench_stats.h: the clock, percentiles and failure checks the C benchmarks share (CUDA's in
 * bench_check.h; bench_common.h is the C++ benchmarks' counterpart). */
#ifndef BATON_BENCH_STATS_H
#define BATON_BENCH_STATS_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench/cuda/bench_check.h"

/* A baton call that must return 0: otherwise the benchmark names it, prints the message of the
 * baton_error `err` in scope, and exits. */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != 0) {                                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, err.message);     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static inline double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static inline int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p-quantile of n values (sorts them in place). */
static inline double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[(int)(p * (n - 1))];
}

#endif
