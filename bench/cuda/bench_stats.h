/* bench_stats.h: the clock and percentiles the C benchmarks share (bench_common.h is the C++
 * benchmarks' counterpart). */
#ifndef BATON_BENCH_STATS_H
#define BATON_BENCH_STATS_H

#include <stdlib.h>
#include <time.h>

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
