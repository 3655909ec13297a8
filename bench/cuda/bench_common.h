/* bench_common.h: what every CUDA benchmark needs: a CUDA call that exits naming itself on
 * failure, the median of a sample, a monotonic clock, and bf16 conversions. Header-only, for the
 * benchmark programs in bench/cuda/ (each is one translation unit). */
#ifndef BATON_BENCH_COMMON_H
#define BATON_BENCH_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "bench/cuda/bench_check.h"

/* The median (NAN for no samples); the sample is taken by value and sorted. */
template <typename T> static inline double median(std::vector<T> v)
{
    if (v.empty())
        return NAN;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? (double)v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

static inline double now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Round to nearest even, as the kernels store bf16. */
static inline uint16_t f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif /* BATON_BENCH_COMMON_H */
