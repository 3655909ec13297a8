/* bench_floors.cu: the hardware floors that baton's other benchmarks are read against, measured
 * in the same call: memory bandwidth (cudaMemcpy and hand-written copy kernels), the cost of
 * handing control between the host and the GPU (event waits, stream memory operations), and
 * every cuBLASLt algorithm the heuristic offers for the RFC plan's GEMV. It also drives one kernel
 * shape repeatedly for a profiler (--rms).
 *
 * Usage: bench_floors [mem] [handoff] [gemv] [--rms DTYPE N1 N2 CALLS]   (default: all three)
 * Prints "RESULT key value" lines for scripts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include "baton/baton.h"
#include "bench/cuda/bench_common.h"
#include "bench/cuda/copy_kernels.cuh"
#include "kernels/cuda/kcuda_common.cuh"
#include "kernels/cuda/rms_norm_cuda.h"
#include "kernels/descriptors.h"

#define CHECK_DRV(call)                                                                            \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "bench_floors: %s:%d: %s failed: %d\n", __FILE__, __LINE__, #call,     \
                    (int)r_);                                                                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---- memory ---------------------------------------------------------------------------------- */

static void bench_mem(const cudaDeviceProp &prop, cudaStream_t s)
{
    const size_t bytes = (size_t)1 << 30; /* per buffer: far beyond L2 */
    void *a, *b;
    CHECK_CUDA(cudaMalloc(&a, bytes));
    CHECK_CUDA(cudaMalloc(&b, bytes));
    CHECK_CUDA(cudaMemset(a, 1, bytes));
    CHECK_CUDA(cudaMemset(b, 2, bytes));
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    auto timeit = [&](auto &&fn, int reps) {
        std::vector<double> t;
        for (int r = 0; r < reps; r++) {
            CHECK_CUDA(cudaEventRecord(e0, s));
            fn();
            CHECK_CUDA(cudaEventRecord(e1, s));
            CHECK_CUDA(cudaEventSynchronize(e1));
            float ms = 0;
            CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms * 1e3);
        }
        return median(t);
    };
    const double moved = 2.0 * (double)bytes; /* read + written */
    double us =
        timeit([&] { CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); }, 11);
    double ref = moved / us / 1e6;
    printf("\nmemory (1 GiB buffers, bytes read + written; median of 11)\n");
    printf("%-40s %9.1f us %7.3f TB/s\n", "cudaMemcpyAsync D2D", us, ref);
    printf("RESULT floors memcpy_tbs %.4f\n", ref);
    const size_t n = bytes / 16;
    double best_copy = 0, best_bulk = 0, best_row = 0; /* TB/s */
    for (int per : {1, 2, 4, 8, 16})
        for (int threads : {256, 512, 1024}) {
            if (per * threads > 2048)
                continue;
            const int grid = prop.multiProcessorCount * per;
            double u4 = timeit(
                [&] { copy16<4><<<grid, threads, 0, s>>>((const uint4 *)a, (uint4 *)b, n); }, 11);
            double u1 = timeit(
                [&] { copy16<1><<<grid, threads, 0, s>>>((const uint4 *)a, (uint4 *)b, n); }, 11);
            printf("copy kernel grid %6d x %4d  unroll 4 %9.1f us %7.3f TB/s (%.1f %%)   unroll 1 "
                   "%9.1f us %7.3f TB/s\n",
                   grid, threads, u4, moved / u4 / 1e6, 100.0 * moved / u4 / 1e6 / ref, u1,
                   moved / u1 / 1e6);
            best_copy = std::max(best_copy, moved / std::min(u4, u1) / 1e6);
        }
    CHECK_CUDA(
        cudaFuncSetAttribute(bulkcopy, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    for (int ch : {8192, 16384, 32768})
        for (int S : {2, 4, 6})
            for (int per : {1, 2, 4}) {
                if ((size_t)ch * S * per > 200 * 1024)
                    continue;
                const int grid = prop.multiProcessorCount * per;
                const int64_t nch = (int64_t)(bytes / ch);
                double u = timeit(
                    [&] {
                        bulkcopy<<<grid, 32, (size_t)ch * S, s>>>((const char *)a, (char *)b, nch,
                                                                  ch, S);
                    },
                    11);
                CHECK_CUDA(cudaGetLastError());
                best_bulk = std::max(best_bulk, moved / u / 1e6);
                printf("bulk copy, %5d B chunks, %d stages, %d blocks/SM %9.1f us %7.3f TB/s (%.1f "
                       "%%)\n",
                       ch, S, per, u, moved / u / 1e6, 100.0 * moved / u / 1e6 / ref);
            }
    {
        /* the bulk copy moved every byte */
        CHECK_CUDA(cudaMemsetAsync(b, 0, bytes, s));
        bulkcopy<<<prop.multiProcessorCount * 2, 32, 16384 * 4, s>>>(
            (const char *)a, (char *)b, (int64_t)(bytes / 16384), 16384, 4);
        CHECK_CUDA(cudaStreamSynchronize(s));
        std::vector<unsigned char> h(bytes);
        CHECK_CUDA(cudaMemcpy(h.data(), b, bytes, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < bytes; i++)
            bad += h[i] != 1;
        printf("bulk copy check: %zu wrong bytes of %zu\n", bad, bytes);
    }
    for (int cols_vec : {512, 1024}) { /* 8192 / 16384 bytes per row */
        const int64_t rows = (int64_t)(n / cols_vec);
        for (int per : {2, 4, 8}) {
            const int threads = cols_vec / 4;
            const int grid = prop.multiProcessorCount * per;
            double u = timeit(
                [&] {
                    rowcopy16<<<grid, threads, 0, s>>>((const uint4 *)a, (uint4 *)b, rows,
                                                       cols_vec);
                },
                11);
            best_row = std::max(best_row, moved / u / 1e6);
            printf("row copy, %5d B rows, %d blocks/SM x %4d %9.1f us %7.3f TB/s (%.1f %%)\n",
                   cols_vec * 16, per, threads, u, moved / u / 1e6, 100.0 * moved / u / 1e6 / ref);
        }
        /* A block for every row: the hardware, not the grid, keeps rows in flight. */
        for (int threads : {cols_vec / 4, cols_vec / 2}) {
            double u = timeit(
                [&] {
                    rowcopy16<<<(unsigned)rows, threads, 0, s>>>((const uint4 *)a, (uint4 *)b, rows,
                                                                 cols_vec);
                },
                11);
            best_row = std::max(best_row, moved / u / 1e6);
            printf("row copy, %5d B rows, a block per row x %4d %9.1f us %7.3f TB/s (%.1f %%)\n",
                   cols_vec * 16, threads, u, moved / u / 1e6, 100.0 * moved / u / 1e6 / ref);
        }
    }
    printf("best of each, against cudaMemcpy: copy kernel %.3f TB/s (%.1f %%), bulk copy %.3f "
           "(%.1f %%), row copy %.3f (%.1f %%)\n",
           best_copy, 100 * best_copy / ref, best_bulk, 100 * best_bulk / ref, best_row,
           100 * best_row / ref);
    printf("RESULT floors copy_kernel_pct %.1f bulk_copy_pct %.1f row_copy_pct %.1f\n",
           100 * best_copy / ref, 100 * best_bulk / ref, 100 * best_row / ref);
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaFree(b));
}

/* ---- host <-> GPU hand-off ------------------------------------------------------------------- */

__global__ void empty_kernel()
{
}

typedef CUresult (*wait32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

/* A gate as a kernel: one thread polls the flag in mapped host memory, then closes it. */
__global__ void gate_kernel(volatile unsigned *flag)
{
    while (*flag != 1u)
        __nanosleep(100);
    *flag = 0u;
    __threadfence_system();
}

/* The gate kernel that also copies the segment's input from pinned host memory (n16 16-byte
 * words), instead of a memcpy node after it. */
__global__ void gate_copy_kernel(volatile unsigned *flag, const uint4 *src, uint4 *dst, int n16)
{
    if (threadIdx.x == 0) {
        while (*flag != 1u)
            __nanosleep(100);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n16; i += blockDim.x)
        dst[i] = __ldcv(&src[i]); /* not cached: the host rewrites it every run */
    __syncthreads();
    if (threadIdx.x == 0) {
        *flag = 0u;
        __threadfence_system();
    }
}

/* What a gate costs in front of a segment that starts with a copy from the host (8 KiB), timed
 * from the store that opens it (or, for the fresh launch, from the launch) to the host seeing the
 * graph's last write: [gate kernel, memcpy node, kernel, write], [gate kernel that copies, kernel,
 * write], [memcpy node, kernel, write] launched fresh. */
static void gate_then_copy(cudaStream_t s, write32_fn write32, volatile uint32_t *to_gpu,
                           volatile uint32_t *to_host, CUdeviceptr d_to_gpu, CUdeviceptr d_to_host)
{
    const int N = 500, bytes = 8192;
    std::vector<double> t(N);
    void *hsrc, *ddst;
    CHECK_CUDA(cudaHostAlloc(&hsrc, bytes, cudaHostAllocMapped));
    CHECK_CUDA(cudaMalloc(&ddst, bytes));
    void *dsrc = NULL;
    CHECK_CUDA(cudaHostGetDevicePointer(&dsrc, hsrc, 0));
    for (int variant = 0; variant < 3; variant++) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        if (variant == 0) {
            gate_kernel<<<1, 1, 0, s>>>((volatile unsigned *)d_to_gpu);
            CHECK_CUDA(cudaMemcpyAsync(ddst, hsrc, bytes, cudaMemcpyHostToDevice, s));
        } else if (variant == 1) {
            gate_copy_kernel<<<1, 256, 0, s>>>((volatile unsigned *)d_to_gpu, (const uint4 *)dsrc,
                                               (uint4 *)ddst, bytes / 16);
        } else {
            CHECK_CUDA(cudaMemcpyAsync(ddst, hsrc, bytes, cudaMemcpyHostToDevice, s));
        }
        empty_kernel<<<1, 32, 0, s>>>();
        CHECK_DRV(write32(s, d_to_host, 1, 0));
        CHECK_CUDA(cudaStreamEndCapture(s, &g));
        CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
        for (int i = 0; i < N; i++) {
            *to_gpu = variant == 2;
            *to_host = 0;
            spin_kernel<<<1, 32, 0, s>>>(40000);
            if (variant < 2)
                CHECK_CUDA(cudaGraphLaunch(ge, s));
            double w0 = now_ns();
            while (now_ns() - w0 < 60000)
                ;
            double t0 = now_ns();
            if (variant < 2)
                __atomic_store_n((uint32_t *)to_gpu, 1u, __ATOMIC_RELEASE);
            else
                CHECK_CUDA(cudaGraphLaunch(ge, s));
            while (*to_host != 1u)
                ;
            t[i] = now_ns() - t0;
            CHECK_CUDA(cudaStreamSynchronize(s));
        }
        static const char *names[] = {"gate kernel, then memcpy node", "gate kernel that copies",
                                      "fresh launch, memcpy node first"};
        printf("8 KiB input: %-34s %8.2f us\n", names[variant], median(t) / 1e3);
        CHECK_CUDA(cudaGraphExecDestroy(ge));
        CHECK_CUDA(cudaGraphDestroy(g));
    }
    CHECK_CUDA(cudaFreeHost(hsrc));
    CHECK_CUDA(cudaFree(ddst));
}

/* Copies n16 16-byte words between pinned host memory and the device inside a kernel (the host
 * side through its UVA pointer), instead of a copy-engine memcpy node. */
__global__ void copy_kernel(const uint4 *src, uint4 *dst, int n16)
{
    for (int i = threadIdx.x; i < n16; i += blockDim.x)
        dst[i] = __ldcv(&src[i]);
}

/* An RFC-like layer, 8 times: [8 KiB host -> device, a 15 us kernel (the GEMV), two small
 * kernels, 8 KiB device -> host] then the host adds 1 to the 8 KiB and the next layer reads it.
 * Variants: copies as memcpy nodes or as kernels; each layer's graph launched after the host
 * step, or queued ahead behind a gate kernel. Per 8 layers, median of 300. */
static void layer_variants(cudaStream_t s, volatile uint32_t *gate_host, CUdeviceptr gate_dev)
{
    const int L = 8, bytes = 8192, n16 = bytes / 16, N = 300;
    unsigned char *h;
    void *d_in, *d_out;
    CHECK_CUDA(cudaHostAlloc((void **)&h, bytes, cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(&d_in, bytes));
    CHECK_CUDA(cudaMalloc(&d_out, bytes));
    memset(h, 0, bytes);
    cudaEvent_t ev;
    CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    std::vector<double> t(N);
    for (int variant = 0; variant < 4; variant++) {
        const int kcopy = variant & 1, ahead = variant >> 1;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        if (ahead)
            gate_kernel<<<1, 1, 0, s>>>((volatile unsigned *)gate_dev);
        if (kcopy)
            copy_kernel<<<1, 256, 0, s>>>((const uint4 *)h, (uint4 *)d_in, n16);
        else
            CHECK_CUDA(cudaMemcpyAsync(d_in, h, bytes, cudaMemcpyHostToDevice, s));
        spin_kernel<<<1, 32, 0, s>>>(15000);
        empty_kernel<<<1, 32, 0, s>>>();
        empty_kernel<<<1, 32, 0, s>>>();
        if (kcopy)
            copy_kernel<<<1, 256, 0, s>>>((const uint4 *)d_out, (uint4 *)h, n16);
        else
            CHECK_CUDA(cudaMemcpyAsync(h, d_out, bytes, cudaMemcpyDeviceToHost, s));
        CHECK_CUDA(cudaStreamEndCapture(s, &g));
        CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
        for (int i = 0; i < N + 10; i++) {
            double t0 = now_ns();
            *gate_host = ahead; /* the first layer's gate is open */
            CHECK_CUDA(cudaGraphLaunch(ge, s));
            for (int l = 0; l < L; l++) {
                CHECK_CUDA(cudaEventRecord(ev, s));
                if (ahead && l + 1 < L)
                    CHECK_CUDA(cudaGraphLaunch(ge, s));
                CHECK_CUDA(cudaEventSynchronize(ev));
                for (int b = 0; b < bytes; b++) /* the CPU step */
                    h[b] = (unsigned char)(h[b] + 1);
                if (l + 1 < L) {
                    if (ahead)
                        __atomic_store_n((uint32_t *)gate_host, 1u, __ATOMIC_RELEASE);
                    else
                        CHECK_CUDA(cudaGraphLaunch(ge, s));
                }
            }
            CHECK_CUDA(cudaStreamSynchronize(s));
            if (i >= 10)
                t[i - 10] = now_ns() - t0;
        }
        static const char *names[] = {"memcpy nodes, launch after the host step",
                                      "copy kernels, launch after the host step",
                                      "memcpy nodes, queued behind a gate kernel",
                                      "copy kernels, queued behind a gate kernel"};
        printf("8 layers: %-44s %8.1f us\n", names[variant], median(t) / 1e3);
        CHECK_CUDA(cudaGraphExecDestroy(ge));
        CHECK_CUDA(cudaGraphDestroy(g));
    }
    CHECK_CUDA(cudaEventDestroy(ev));
    CHECK_CUDA(cudaFreeHost(h));
    CHECK_CUDA(cudaFree(d_in));
    CHECK_CUDA(cudaFree(d_out));
}

/* The gates the scheduler could use, each in a graph of [gate, empty kernel, write 1 to the
 * host], timed from the host's store that opens the gate to the host seeing the write; "busy":
 * the graph was launched behind a 40 us kernel, as the scheduler launches it behind a segment. */
static void gate_variants(cudaStream_t s, wait32_fn wait32, write32_fn write32,
                          volatile uint32_t *to_gpu, volatile uint32_t *to_host,
                          CUdeviceptr d_to_gpu, CUdeviceptr d_to_host)
{
    const int N = 500;
    std::vector<double> t(N);
    for (int variant = 0; variant < 3; variant++) {
        /* 0: wait EQ 1 + write 0 (the gate closes itself); 1: wait GEQ 1 (the host closes it);
         * 2: the gate kernel (as scheduler/cuda/gate.cu) */
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        if (variant == 0) {
            CHECK_DRV(wait32(s, d_to_gpu, 1, CU_STREAM_WAIT_VALUE_EQ));
            CHECK_DRV(write32(s, d_to_gpu, 0, 0));
        } else if (variant == 1) {
            CHECK_DRV(wait32(s, d_to_gpu, 1, CU_STREAM_WAIT_VALUE_GEQ));
        } else {
            gate_kernel<<<1, 1, 0, s>>>((volatile unsigned *)d_to_gpu);
        }
        empty_kernel<<<1, 32, 0, s>>>();
        CHECK_DRV(write32(s, d_to_host, 1, 0));
        CHECK_CUDA(cudaStreamEndCapture(s, &g));
        CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
        static const char *names[] = {"wait EQ + write 0", "wait GEQ (host closes)", "gate kernel"};
        for (int busy = 0; busy < 2; busy++) {
            for (int i = 0; i < N; i++) {
                *to_gpu = 0;
                *to_host = 0;
                if (busy)
                    spin_kernel<<<1, 32, 0, s>>>(40000);
                CHECK_CUDA(cudaGraphLaunch(ge, s));
                double w0 = now_ns();
                while (now_ns() - w0 < (busy ? 60000 : 20000))
                    ;
                double t0 = now_ns();
                __atomic_store_n((uint32_t *)to_gpu, 1u, __ATOMIC_RELEASE);
                while (*to_host != 1u)
                    ;
                t[i] = now_ns() - t0;
                CHECK_CUDA(cudaStreamSynchronize(s));
            }
            printf("gate %-32s %-5s store -> write seen %8.2f us\n", names[variant],
                   busy ? "busy" : "idle", median(t) / 1e3);
        }
        /* and the fresh launch it replaces, behind the same busy kernel */
        if (variant == 1) {
            for (int i = 0; i < N; i++) {
                *to_gpu = 1;
                *to_host = 0;
                spin_kernel<<<1, 32, 0, s>>>(40000);
                CHECK_CUDA(cudaStreamSynchronize(s));
                double t0 = now_ns();
                CHECK_CUDA(cudaGraphLaunch(ge, s));
                while (*to_host != 1u)
                    ;
                t[i] = now_ns() - t0;
                CHECK_CUDA(cudaStreamSynchronize(s));
            }
            printf("gate %-32s %-5s launch -> write seen %7.2f us\n", "none: fresh graph launch",
                   "", median(t) / 1e3);
        }
        CHECK_CUDA(cudaGraphExecDestroy(ge));
        CHECK_CUDA(cudaGraphDestroy(g));
    }
}

static void bench_handoff(cudaStream_t s)
{
    wait32_fn wait32 = NULL;
    write32_fn write32 = NULL;
    cudaDriverEntryPointQueryResult q;
    CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void **)&wait32, 12000,
                                                cudaEnableDefault, &q));
    CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void **)&write32, 12000,
                                                cudaEnableDefault, &q));
    printf("\nhand-off (median of 2000 round trips, host clock)\n");
    volatile uint32_t *flags;
    CHECK_CUDA(cudaHostAlloc((void **)&flags, 256, cudaHostAllocMapped));
    memset((void *)flags, 0, 256);
    uint32_t *dflags;
    CHECK_CUDA(cudaHostGetDevicePointer((void **)&dflags, (void *)flags, 0));
    volatile uint32_t *to_gpu = flags, *to_host = flags + 16;
    CUdeviceptr d_to_gpu = (CUdeviceptr)dflags, d_to_host = (CUdeviceptr)(dflags + 16);
    cudaEvent_t ev;
    CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    const int N = 2000;
    std::vector<double> t(N);
    for (int i = 0; i < N; i++) {
        double t0 = now_ns();
        empty_kernel<<<1, 32, 0, s>>>();
        CHECK_CUDA(cudaEventRecord(ev, s));
        CHECK_CUDA(cudaEventSynchronize(ev));
        t[i] = now_ns() - t0;
    }
    printf("%-56s %8.2f us\n", "launch + event record + cudaEventSynchronize", median(t) / 1e3);
    for (int i = 0; i < N; i++) {
        double t0 = now_ns();
        empty_kernel<<<1, 32, 0, s>>>();
        CHECK_DRV(write32(s, d_to_host, (cuuint32_t)(i + 1), 0));
        while (*to_host != (uint32_t)(i + 1))
            ;
        t[i] = now_ns() - t0;
    }
    printf("%-56s %8.2f us\n", "launch + cuStreamWriteValue32 + host spin", median(t) / 1e3);
    CHECK_CUDA(cudaStreamSynchronize(s));
    /* The GPU is already waiting on a host flag: the host's store starts the work. */
    *to_host = 0;
    for (int i = 0; i < N; i++) {
        CHECK_DRV(wait32(s, d_to_gpu, (cuuint32_t)(i + 1), CU_STREAM_WAIT_VALUE_GEQ));
        empty_kernel<<<1, 32, 0, s>>>();
        CHECK_DRV(write32(s, d_to_host, (cuuint32_t)(i + 1), 0));
        const double w0 = now_ns();
        while (now_ns() - w0 < 20000) /* let the wait reach the GPU */
            ;
        double t0 = now_ns();
        __atomic_store_n((uint32_t *)to_gpu, (uint32_t)(i + 1), __ATOMIC_RELEASE);
        while (*to_host != (uint32_t)(i + 1))
            ;
        t[i] = now_ns() - t0;
    }
    printf("%-56s %8.2f us\n", "queued: host store -> GPU wait -> kernel -> write -> host",
           median(t) / 1e3);
    CHECK_CUDA(cudaStreamSynchronize(s));

    /* The same with a pre-launched graph holding the wait, a kernel and the write. */
    cudaGraph_t g;
    cudaGraphExec_t ge;
    *to_gpu = 0;
    *to_host = 0;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CUresult cr = wait32(s, d_to_gpu, 1, CU_STREAM_WAIT_VALUE_GEQ);
    empty_kernel<<<1, 32, 0, s>>>();
    CUresult cw = write32(s, d_to_host, 1, 0);
    cudaError_t ce = cudaStreamEndCapture(s, &g);
    if (cr != CUDA_SUCCESS || cw != CUDA_SUCCESS || ce != cudaSuccess)
        printf("stream memory operations could not be captured (%d, %d, %s)\n", (int)cr, (int)cw,
               cudaGetErrorString(ce));
    if (cr == CUDA_SUCCESS && cw == CUDA_SUCCESS && ce == cudaSuccess) {
        CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
        for (int i = 0; i < N; i++) {
            *to_gpu = 0;
            *to_host = 0;
            CHECK_CUDA(cudaGraphLaunch(ge, s));
            double w0 = now_ns();
            while (now_ns() - w0 < 20000)
                ;
            double t0 = now_ns();
            __atomic_store_n((uint32_t *)to_gpu, 1u, __ATOMIC_RELEASE);
            while (*to_host != 1u)
                ;
            t[i] = now_ns() - t0;
            CHECK_CUDA(cudaStreamSynchronize(s));
        }
        printf("%-56s %8.2f us\n", "queued graph: host store -> wait node -> kernel -> write",
               median(t) / 1e3);
        for (int i = 0; i < N; i++) {
            *to_gpu = 1;
            *to_host = 0;
            double t0 = now_ns();
            CHECK_CUDA(cudaGraphLaunch(ge, s));
            while (*to_host != 1u)
                ;
            t[i] = now_ns() - t0;
            CHECK_CUDA(cudaStreamSynchronize(s));
        }
        printf("%-56s %8.2f us\n", "graph launch (flag already set) -> write seen by host",
               median(t) / 1e3);
    }
    cudaGetLastError();
    gate_variants(s, wait32, write32, to_gpu, to_host, d_to_gpu, d_to_host);
    gate_then_copy(s, write32, to_gpu, to_host, d_to_gpu, d_to_host);
    layer_variants(s, to_gpu, d_to_gpu);
}

/* ---- GEMV algorithms ------------------------------------------------------------------------- */

static void bench_gemv(cudaStream_t s)
{
    const int64_t M = 1, N = 4096, K = 4096;
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayout_t lb, la, lc;
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, N, K, N);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, M, K);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, M, N);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t ws = 32 << 20;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulHeuristicResult_t res[32];
    int nres = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, op, lb, la, lc, lc, pref, 32, res, &nres);
    void *A, *B[16], *C, *W;
    CHECK_CUDA(cudaMalloc(&A, K * 2));
    for (int i = 0; i < 16; i++) {
        CHECK_CUDA(cudaMalloc(&B[i], N * K * 2));
        CHECK_CUDA(cudaMemset(B[i], 0x3c, N * K * 2));
    }
    CHECK_CUDA(cudaMalloc(&C, N * 2));
    CHECK_CUDA(cudaMalloc(&W, ws));
    CHECK_CUDA(cudaMemset(A, 0x3c, K * 2));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float alpha = 1, beta = 0;
    printf("\nGEMV 1x4096 . 4096x4096 bf16: %d heuristic results; us per call (median of 200): "
           "cold (16 weights rotated), hot (one weight)\n",
           nres);
    for (int r = 0; r < nres; r++) {
        double v[2];
        for (int hot = 0; hot < 2; hot++) {
            std::vector<double> t;
            for (int i = 0; i < 200; i++) {
                void *b = B[hot ? 0 : i % 16];
                cudaEventRecord(e0, s);
                cublasStatus_t st = cublasLtMatmul(lt, op, &alpha, b, lb, A, la, &beta, C, lc, C,
                                                   lc, &res[r].algo, W, ws, s);
                cudaEventRecord(e1, s);
                cudaEventSynchronize(e1);
                float ms = 0;
                cudaEventElapsedTime(&ms, e0, e1);
                t.push_back(st == CUBLAS_STATUS_SUCCESS ? ms * 1e3 : 1e9);
            }
            v[hot] = median(t);
        }
        int id = -1, tile = -1, splitk = -1, stages = -1;
        size_t sz;
        cublasLtMatmulAlgoConfigGetAttribute(&res[r].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id,
                                             &sz);
        cublasLtMatmulAlgoConfigGetAttribute(&res[r].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof tile, &sz);
        cublasLtMatmulAlgoConfigGetAttribute(&res[r].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof splitk, &sz);
        cublasLtMatmulAlgoConfigGetAttribute(&res[r].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                             sizeof stages, &sz);
        printf("  #%2d algo %3d tile %3d splitK %3d stages %3d ws %8zu: cold %7.2f  hot %7.2f us\n",
               r, id, tile, splitk, stages, res[r].workspaceSize, v[0], v[1]);
    }
}

/* ---- one RMSNorm shape, repeatedly, for a profiler ------------------------------------------ */

static void drive_rms(cudaStream_t s, const char *dt, int64_t n1, int64_t n2, int calls, int bwd)
{
    baton_dtype d = !strcmp(dt, "f32") ? BATON_DTYPE_F32 : BATON_DTYPE_BF16;
    size_t es = d == BATON_DTYPE_F32 ? 4 : 2;
    baton_rms_norm_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.n1 = n1;
    desc.n2 = n2;
    desc.eps = 1e-5;
    desc.x_dtype = d;
    desc.w_dtype = d;
    desc.part_grad_size = n1 < 256 ? n1 : 256;
    void *x, *w, *y, *inv, *g, *gx, *gw, *pg;
    CHECK_CUDA(cudaMalloc(&x, n1 * n2 * es));
    CHECK_CUDA(cudaMalloc(&y, n1 * n2 * es));
    CHECK_CUDA(cudaMalloc(&g, n1 * n2 * es));
    CHECK_CUDA(cudaMalloc(&gx, n1 * n2 * es));
    CHECK_CUDA(cudaMalloc(&w, n2 * es));
    CHECK_CUDA(cudaMalloc(&gw, n2 * es));
    CHECK_CUDA(cudaMalloc(&pg, desc.part_grad_size * n2 * 4));
    CHECK_CUDA(cudaMalloc(&inv, n1 * 4));
    CHECK_CUDA(cudaMemset(x, 0x3c, n1 * n2 * es));
    CHECK_CUDA(cudaMemset(g, 0x3c, n1 * n2 * es));
    CHECK_CUDA(cudaMemset(w, 0x3c, n2 * es));
    char eb[256];
    baton_exec_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.struct_size = sizeof ctx;
    ctx.device.kind = BATON_DEVICE_CUDA;
    ctx.stream = s;
    ctx.step_name = "drive";
    ctx.errbuf = eb;
    ctx.errbuf_len = sizeof eb;
    for (int i = 0; i < calls; i++) {
        void *fb[4] = {x, w, y, inv};
        void *bb[7] = {g, inv, x, w, gx, gw, pg};
        int rc = bwd ? baton__kcuda_rms_norm_bwd_cfg(&ctx, bb, (const char *)&desc, sizeof desc,
                                                     NULL, NULL)
                     : baton__kcuda_rms_norm_fwd_cfg(&ctx, fb, (const char *)&desc, sizeof desc,
                                                     NULL, NULL);
        if (rc) {
            fprintf(stderr, "drive: %s\n", eb);
            exit(1);
        }
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    printf("drove %d %s calls of %s %lldx%lld\n", calls, bwd ? "bwd" : "fwd", dt, (long long)n1,
           (long long)n2);
}

int main(int argc, char **argv)
{
    int mem = 0, handoff = 0, gemv = 0, any = 0;
    cudaStream_t s;
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "mem"))
            mem = any = 1;
        else if (!strcmp(argv[i], "handoff"))
            handoff = any = 1;
        else if (!strcmp(argv[i], "gemv"))
            gemv = any = 1;
        else if ((!strcmp(argv[i], "--rms") || !strcmp(argv[i], "--rms-bwd")) && i + 4 < argc) {
            drive_rms(s, argv[i + 1], atoll(argv[i + 2]), atoll(argv[i + 3]), atoi(argv[i + 4]),
                      !strcmp(argv[i], "--rms-bwd"));
            i += 4;
            any = 1;
        } else {
            fprintf(stderr,
                    "usage: bench_floors [mem] [handoff] [gemv] [--rms[-bwd] DTYPE N1 N2 CALLS]\n");
            return 2;
        }
    }
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20);
    if (!any)
        mem = handoff = gemv = 1;
    if (mem)
        bench_mem(prop, s);
    if (handoff)
        bench_handoff(s);
    if (gemv)
        bench_gemv(s);
    return 0;
}
