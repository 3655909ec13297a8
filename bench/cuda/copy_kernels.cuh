/* copy_kernels.cuh: the copy kernels that RMSNorm's bandwidth is read against (bench_floors at
 * 1 GiB, bench_kernels at each shape's own bytes): a grid-stride copy, row copies in a forward's
 * access pattern (a persistent grid, or a block for every row) and the copy engine's bulk copies
 * through shared memory. Header-only, for the benchmark programs in bench/cuda/. */
#ifndef BATON_BENCH_COPY_KERNELS_CUH
#define BATON_BENCH_COPY_KERNELS_CUH

#include <stdint.h>

#include "kernels/cuda/kcuda_common.cuh"

/* 16-byte loads and stores strided over the grid, U vectors in flight per thread. */
template <int U>
__global__ void copy16(const uint4 *__restrict__ x, uint4 *__restrict__ y, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            v[u] = x[i + u * stride];
#pragma unroll
        for (int u = 0; u < U; u++)
            y[i + u * stride] = v[u];
    }
    for (; i < n; i += stride)
        y[i] = x[i];
}

/* Rows of `vecs` 16-byte vectors (at most 4 per thread), each held in registers and written after
 * a block-wide barrier: the access pattern of a one-pass row normalisation without its arithmetic.
 * Rows are strided over the grid: launched with a block for every row, each block copies one. */
__global__ void rowcopy16(const uint4 *__restrict__ x, uint4 *__restrict__ y, int64_t rows,
                          int vecs)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        uint4 v[4];
        int k = 0;
        for (int c = threadIdx.x; c < vecs && k < 4; c += blockDim.x, k++)
            v[k] = x[r * vecs + c];
        __syncthreads();
        k = 0;
        for (int c = threadIdx.x; c < vecs && k < 4; c += blockDim.x, k++)
            y[r * vecs + c] = v[k];
    }
}

/* What a one-pass row normalisation must wait for, without its arithmetic: R rows a block, each
 * thread loading NV 16-byte vectors of each (v * T + tid), folding its words of a row into one
 * (xor), the warps folding theirs (one instruction), the block its warps' through shared memory
 * behind one barrier; every vector is then stored mixed with its row's fold, so no store leaves
 * before the whole row is in, as a forward's y waits for its row's sum. rowcopy16's barrier does
 * not make a thread wait for its loads; this one does. */
template <int NV, int R>
__global__ void __launch_bounds__(512)
    rowfold16(const uint4 *__restrict__ x, uint4 *__restrict__ y, int64_t rows, int vecs)
{
    __shared__ unsigned red[R][32];
    const int tid = threadIdx.x, T = blockDim.x, lane = tid & 31, nw = T >> 5;
    const int64_t r0 = (int64_t)blockIdx.x * R;
    uint4 v[R][NV];
    unsigned f[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        f[r] = 0;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int c = k * T + tid;
            if (r0 + r < rows && c < vecs)
                v[r][k] = x[(r0 + r) * vecs + c];
            else
                v[r][k] = make_uint4(0, 0, 0, 0);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int k = 0; k < NV; k++)
            f[r] ^= v[r][k].x ^ v[r][k].y ^ v[r][k].z ^ v[r][k].w;
        f[r] = __reduce_xor_sync(0xffffffffu, f[r]);
        if (lane == 0)
            red[r][tid >> 5] = f[r];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; r++) {
        const unsigned t = __reduce_xor_sync(0xffffffffu, lane < nw ? red[r][lane] : 0u);
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int c = k * T + tid;
            if (r0 + r < rows && c < vecs)
                y[(r0 + r) * vecs + c] = make_uint4(v[r][k].x ^ t, v[r][k].y, v[r][k].z, v[r][k].w);
        }
    }
}

/* The copy engine's way: one thread per block moves CH-byte chunks through S shared-memory
 * stages with bulk copies (global to shared on an mbarrier, shared to global in bulk groups), so
 * no register holds the data. Chunks are strided over the grid. */
__global__ void bulkcopy(const char *__restrict__ x, char *__restrict__ y, int64_t nch, int ch,
                         int S)
{
    extern __shared__ __align__(128) unsigned char stage[];
    __shared__ __align__(8) unsigned long long full[8];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x != 0)
        return;
    for (int k = 0; k < S; k++)
        kcuda::mbar_init(&full[k], 1);
    kcuda::mbar_fence_init();
    const int64_t G = gridDim.x;
    const unsigned long long pol = kcuda::l2_evict_first();
    for (int k = 0; k < S; k++) {
        const int64_t c = blockIdx.x + k * G;
        if (c < nch) {
            kcuda::mbar_arrive_tx(&full[k], (unsigned)ch);
            kcuda::bulk_g2s(stage + (size_t)k * ch, x + c * ch, (unsigned)ch, &full[k], pol);
        }
    }
    for (int64_t i = 0;; i++) {
        const int64_t c = blockIdx.x + i * G;
        if (c >= nch)
            break;
        const int s = (int)(i % S);
        kcuda::mbar_wait(&full[s], (unsigned)((i / S) & 1));
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n\t"
                     "cp.async.bulk.commit_group;" ::"l"(y + c * ch),
                     "r"(kcuda::smem_u32(stage + (size_t)s * ch)), "r"(ch)
                     : "memory");
        const int64_t cn = c + S * G;
        if (cn < nch) {
            /* the stage is refilled once the store has read it out */
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            kcuda::mbar_arrive_tx(&full[s], (unsigned)ch);
            kcuda::bulk_g2s(stage + (size_t)s * ch, x + cn * ch, (unsigned)ch, &full[s], pol);
        }
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

/* bwdcopy's column sums: acc[e] += grad_output[e] * x[e] for the VEC elements of one 16-byte
 * vector of each (XB bytes an element: bf16 widened from its 32-bit word, as elem_acc does). */
template <int XB>
__device__ __forceinline__ void bwdcopy_colsums(const uint4 &g, const uint4 &x,
                                                float (&acc)[16 / XB])
{
    const unsigned gw[4] = {g.x, g.y, g.z, g.w}, xw[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (XB == 4) {
            acc[k] = fmaf(__uint_as_float(gw[k]), __uint_as_float(xw[k]), acc[k]);
        } else {
            acc[2 * k] =
                fmaf(__uint_as_float(gw[k] << 16), __uint_as_float(xw[k] << 16), acc[2 * k]);
            acc[2 * k + 1] = fmaf(__uint_as_float(gw[k] & 0xffff0000u),
                                  __uint_as_float(xw[k] & 0xffff0000u), acc[2 * k + 1]);
        }
    }
}

/* The register backward's memory traffic without its arithmetic: what a layout's grid and
 * cluster do with the bytes alone (a reference, not a bound: on an H200 the kernel beats it at
 * 4096 columns). The loop is rms_bwd_rows' own, line for line on purpose, so that the two stay
 * comparable. Part_grad block p's rows go to a cluster of cy blocks (rank k taking rows rb + k,
 * rb + k + cy, ...), each thread holding NV 16-byte vectors (v * T + tid) of grad_output's and
 * x's rows and D rows in flight exactly as rms_bwd_rows loads them (G rows consumed a step while
 * D - G load), and grad_input written as one vector of each pair's bits mixed. BAR adds the one
 * barrier a step that the row sums need. Launched at the backward's own grid and cluster, with
 * dynamic shared memory only to hold the blocks per SM where the real kernel's registers do.
 * TAIL (x's element bytes, 2 or 4; 0: none) adds the least of the backward's own work that its
 * tail waits for: the column sums (grad_output times x, an fma an element a row, in registers),
 * then part_grad's row p, written by the block (cy 1) or added up in rank order across the
 * cluster (cy > 1: cluster_rank_sums, the kernel's own combine, in the dynamic shared memory),
 * and a trigger for a column sum launched behind it (programmatic dependent launch). Its bits
 * mean nothing: it is timed, never checked. */
template <int NV, int D, bool BAR, int TAIL = 0>
__global__ void __launch_bounds__(D > 4 ? 256 : 512)
    bwdcopy(const uint4 *__restrict__ g, const uint4 *__restrict__ x, const float *__restrict__ iv,
            uint4 *__restrict__ gi, int64_t n1, int vecs, int64_t B, int cy, float *pg)
{
    constexpr int G = D >= 4 && D % 2 == 0 ? 2 : 1;
    constexpr int VEC = TAIL ? 16 / TAIL : 1; /* column sums a vector */
    extern __shared__ __align__(16) float bwdcopy_sums[];
    float acc[NV][VEC];
    if constexpr (TAIL != 0) {
        kcuda::pdl_trigger();
#pragma unroll
        for (int v = 0; v < NV; v++)
#pragma unroll
            for (int e = 0; e < VEC; e++)
                acc[v][e] = 0;
    }
    struct Row {
        uint4 g[NV], x[NV];
        float r;
    };
    const int tid = threadIdx.x, T = blockDim.x;
    const int64_t p = blockIdx.x / (unsigned)cy, dcy = cy;
    const int64_t rb = p * B, re = rb + B < n1 ? rb + B : n1;
    const int64_t first = rb + (int64_t)(blockIdx.x % (unsigned)cy);
    auto load = [&](int64_t row, Row &d) {
#pragma unroll
        for (int v = 0; v < NV; v++) {
            const int c = v * T + tid;
            if (c < vecs) {
                d.g[v] = __ldg(g + row * vecs + c);
                d.x[v] = __ldg(x + row * vecs + c);
            }
        }
        d.r = __ldg(iv + row);
    };
    Row buf[D];
#pragma unroll
    for (int j = 0; j < D - G; j++)
        if (first + j * dcy < re)
            load(first + j * dcy, buf[j]);
    for (int64_t row = first; row < re; row += D * dcy) {
#pragma unroll
        for (int j = 0; j < D; j += G) {
            const int64_t r0 = row + j * dcy;
            if (r0 >= re)
                break;
#pragma unroll
            for (int k = 0; k < G; k++)
                if (r0 + (D - G + k) * dcy < re)
                    load(r0 + (D - G + k) * dcy, buf[(j + D - G + k) % D]);
            if (BAR)
                __syncthreads();
#pragma unroll
            for (int k = 0; k < G; k++) {
                const int64_t rr = r0 + k * dcy;
                if (rr >= re)
                    break;
                const Row &d = buf[j + k];
                const unsigned m = __float_as_uint(d.r);
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const int c = v * T + tid;
                    if (c < vecs) {
                        gi[rr * vecs + c] = make_uint4(d.g[v].x ^ d.x[v].x ^ m, d.g[v].y ^ d.x[v].y,
                                                       d.g[v].z ^ d.x[v].z, d.g[v].w ^ d.x[v].w);
                        if constexpr (TAIL != 0)
                            bwdcopy_colsums<TAIL>(d.g[v], d.x[v], acc[v]);
                    }
                }
            }
        }
    }
    if constexpr (TAIL != 0) {
        float *pgr = pg + p * (int64_t)vecs * VEC;
        float *dst = cy > 1 ? bwdcopy_sums : pgr;
#pragma unroll
        for (int v = 0; v < NV; v++) {
            const int c = v * T + tid;
            if (c < vecs)
#pragma unroll
                for (int q = 0; q < VEC / 4; q++) /* 16-byte stores, as the kernel's */
                    reinterpret_cast<float4 *>(dst + c * VEC)[q] = make_float4(
                        acc[v][4 * q], acc[v][4 * q + 1], acc[v][4 * q + 2], acc[v][4 * q + 3]);
        }
        if (cy > 1)
            kcuda::cluster_rank_sums(bwdcopy_sums, pgr, vecs * VEC,
                                     (int)(blockIdx.x % (unsigned)cy), tid, T, cy, false);
    }
}

#endif /* BATON_BENCH_COPY_KERNELS_CUH */
