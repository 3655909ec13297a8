/* bench_check.h: a CUDA runtime call that must succeed, for the benchmarks in C and in C++
 * (bench_stats.h and bench_common.h include it): on failure the benchmark names the call, where it
 * is and CUDA's reason, and exits. */
#ifndef BATON_BENCH_CHECK_H
#define BATON_BENCH_CHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_CUDA(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                   \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
