/* bench_common.h: what every CUDA benchmark needs: a CUDA call that exits naming itself on
 * failure, the median of a sample, a monotonic clock, bf16 conversions, a GPU spin, random
 * inputs, event timing of calls and of a graph's calls, and a launch with one attribute.
 * Header-only, for the benchmark programs in bench/cuda/ (each is one translation unit, compiled by
 * nvcc). */
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

/* Busy for `ns` nanoseconds of the GPU's global timer: holds a stream while the host queues the
 * work behind it, or stands for a segment's work. */
__global__ void spin_kernel(long long ns)
{
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

__global__ void fill_kernel(uint16_t *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        /* a bf16 or half of the f32 pattern: values in [-2, 2), never zero-only data */
        float f = ((h & 0xffffu) / 32768.0f) - 1.0f + 0.001f;
        float g = f * 2.0f;
        uint32_t u;
        memcpy(&u, &g, 4);
        p[i] = (uint16_t)(u >> 16);
    }
}

/* Random inputs, never zeros: any bit pattern of 16-bit halves of small floats, so bf16 values in
 * [-2, 2], and for f32 a pair of such halves is also a finite float of moderate size. */
static inline void fill_random(cudaStream_t s, void *p, size_t bytes, uint32_t seed)
{
    fill_kernel<<<1024, 256, 0, s>>>((uint16_t *)p, bytes / 2, seed);
    CHECK_CUDA(cudaGetLastError());
}

/* Times `runs` calls of fn(i) (fn launches on s), each between two events, after `warm` calls
 * and behind a spin kernel long enough for the host to queue them all. Returns the median in
 * microseconds. */
template <typename F> static double time_events(cudaStream_t s, F fn, int runs, int warm = 5)
{
    for (int i = 0; i < warm; i++)
        fn(i);
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<cudaEvent_t> ev(2 * (size_t)runs);
    for (auto &e : ev)
        CHECK_CUDA(cudaEventCreate(&e));
    spin_kernel<<<1, 1, 0, s>>>(std::min(50000000LL, 200000LL * runs));
    CHECK_CUDA(cudaGetLastError());
    for (int i = 0; i < runs; i++) {
        CHECK_CUDA(cudaEventRecord(ev[2 * i], s));
        fn(warm + i);
        CHECK_CUDA(cudaEventRecord(ev[2 * i + 1], s));
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<float> ms(runs);
    for (int i = 0; i < runs; i++)
        CHECK_CUDA(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    for (auto &e : ev)
        CHECK_CUDA(cudaEventDestroy(e));
    return median(ms) * 1000.0;
}

/* Captures `k` calls of fn(i) (fn launches on s) into one graph and times `reps` replays of it
 * (time_events, after 3); returns the median per call in microseconds. */
template <typename F> static double time_graph(cudaStream_t s, F fn, int k, int reps)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < k; i++)
        fn(i);
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
    const double us = time_events(
                          s, [&](int) { CHECK_CUDA(cudaGraphLaunch(ge, s)); }, reps, 3) /
                      k;
    CHECK_CUDA(cudaGraphExecDestroy(ge));
    CHECK_CUDA(cudaGraphDestroy(g));
    return us;
}

/* kernel<<<grid, block, 0, s>>> through cudaLaunchKernelEx with one launch attribute switched on:
 * cudaLaunchAttributeCooperative (a grid that may grid.sync()) or
 * cudaLaunchAttributeProgrammaticStreamSerialization (PDL: the kernel may start before the one
 * ahead of it ends, and waits for it at griddepcontrol.wait). */
template <typename... KArgs, typename... Args>
static inline void launch_attr(cudaStream_t s, unsigned grid, unsigned block,
                               cudaLaunchAttributeID id, void (*kernel)(KArgs...), Args... args)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid, 1, 1);
    cfg.blockDim = dim3(block, 1, 1);
    cfg.stream = s;
    cudaLaunchAttribute at;
    memset(&at, 0, sizeof at);
    at.id = id;
    if (id == cudaLaunchAttributeCooperative)
        at.val.cooperative = 1;
    else
        at.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    CHECK_CUDA(cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...));
}

#endif /* BATON_BENCH_COMMON_H */
