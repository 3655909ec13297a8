/* kcuda_common.cuh: what baton's CUDA kernels share: element conversions, 16-byte vector loads,
 * block and cluster reductions, programmatic-dependent-launch hooks, and the checked launcher that
 * turns a failed launch into BATON_ECUDA with the reason in ctx->errbuf. Private to kernels/cuda.
 */
#ifndef BATON_KCUDA_COMMON_CUH
#define BATON_KCUDA_COMMON_CUH

#include <cooperative_groups.h>
#include <cuda.h> /* CUtensorMap: the copies through tensor maps; the encoder is found at run time */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "baton/baton.h"
#include "core/core.h"

namespace kcuda
{

namespace cg = cooperative_groups;

/* ---- errors ---------------------------------------------------------------------------------- */

/* Kernels give the reason only, through core's baton__ctx_fail (the runtime names the step). */

/* ---- element types --------------------------------------------------------------------------- */

template <typename T> struct acc_of {
    using type = float;
};
template <> struct acc_of<double> {
    using type = double;
};

__device__ __forceinline__ float to_f(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}
__device__ __forceinline__ float to_f(__half v)
{
    return __half2float(v);
}
__device__ __forceinline__ float to_f(float v)
{
    return v;
}
__device__ __forceinline__ float to_f(double v)
{
    return (float)v;
}

template <typename A, typename T> __device__ __forceinline__ A to_acc(T v)
{
    return (A)to_f(v);
}
template <> __device__ __forceinline__ double to_acc<double, double>(double v)
{
    return v;
}

/* Element e of a vector held in registers, as the accumulator type. For bf16 it is the 32-bit
 * word that holds the pair, shifted or masked: one instruction, where unpacking the pair and
 * converting each half takes two for the upper one (a PRMT, then the shift). The same bits as
 * __bfloat162float: the widening is exact either way. e must be a constant after unrolling. */
template <typename A, typename T, int N>
__device__ __forceinline__ A elem_acc(const T (&v)[N], int e)
{
    return to_acc<A>(v[e]);
}
template <typename A, int N>
__device__ __forceinline__ A elem_acc(const __nv_bfloat16 (&v)[N], int e)
{
    static_assert(N % 2 == 0, "bf16 vectors hold whole pairs");
    uint32_t w;
    memcpy(&w, &v[e & ~1], sizeof w);
    return (A)__uint_as_float(e & 1 ? w & 0xffff0000u : w << 16);
}

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_f<__half>(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ float from_f<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ double from_f<double>(float v)
{
    return (double)v;
}

template <typename T> __device__ __forceinline__ T from_d(double v);
template <> __device__ __forceinline__ __nv_bfloat16 from_d<__nv_bfloat16>(double v)
{
    return __double2bfloat16(v);
}
template <> __device__ __forceinline__ __half from_d<__half>(double v)
{
    return __double2half(v);
}
template <> __device__ __forceinline__ float from_d<float>(double v)
{
    return (float)v;
}
template <> __device__ __forceinline__ double from_d<double>(double v)
{
    return v;
}

template <typename T> __device__ __forceinline__ T from_acc(float v)
{
    return from_f<T>(v);
}
template <typename T> __device__ __forceinline__ T from_acc(double v)
{
    return from_d<T>(v);
}

/* ---- vector loads and stores: N elements, in the widest aligned pieces (16 bytes at most) -----
 */

template <int B> struct raw;
template <> struct raw<16> {
    using type = uint4;
};
template <> struct raw<8> {
    using type = uint2;
};
template <> struct raw<4> {
    using type = unsigned int;
};
template <> struct raw<2> {
    using type = unsigned short;
};

template <typename T, int N> struct piece {
    static constexpr int bytes = (int)sizeof(T) * N;
    static constexpr int unit = bytes >= 16 ? 16 : bytes;
    static constexpr int count = bytes / unit;
    static constexpr int per = unit / (int)sizeof(T); /* elements per piece */
};

/* Vector load of N elements at p, aligned to the piece size, each piece by load(const R *). */
template <typename T, int N, typename Load>
__device__ __forceinline__ void ld_pieces(const T *p, T (&out)[N], Load load)
{
    using P = piece<T, N>;
    using R = typename raw<P::unit>::type;
#pragma unroll
    for (int k = 0; k < P::count; k++) {
        R r = load(reinterpret_cast<const R *>(p) + k);
        memcpy(&out[k * P::per], &r, sizeof r);
    }
}

/* Read-only (non-coherent) vector load of N elements at p, which is aligned to the piece size. */
template <typename T, int N> __device__ __forceinline__ void ld_ro(const T *p, T (&out)[N])
{
    ld_pieces(p, out, [](const auto *q) { return __ldg(q); });
}

/* Coherent vector load (for buffers the same kernel writes, e.g. part_grad in loop mode). */
template <typename T, int N> __device__ __forceinline__ void ld_rw(const T *p, T (&out)[N])
{
    using P = piece<T, N>;
    using R = typename raw<P::unit>::type;
#pragma unroll
    for (int k = 0; k < P::count; k++) {
        R r = reinterpret_cast<const R *>(p)[k];
        memcpy(&out[k * P::per], &r, sizeof r);
    }
}

/* Vector load from L2 (ld.global.cg): data another block wrote and published after this block
 * started, which this SM's L1 must not answer from a stale line. */
template <typename T, int N> __device__ __forceinline__ void ld_l2(const T *p, T (&out)[N])
{
    ld_pieces(p, out, [](const auto *q) { return __ldcg(q); });
}

/* A counter another block publishes to (atomicAdd after __threadfence): an acquire load at GPU
 * scope, so that the writes it counts are visible to what this thread reads next. */
__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

template <typename T, int N> __device__ __forceinline__ void st(T *p, const T (&in)[N])
{
    using P = piece<T, N>;
    using R = typename raw<P::unit>::type;
#pragma unroll
    for (int k = 0; k < P::count; k++) {
        R r;
        memcpy(&r, &in[k * P::per], sizeof r);
        reinterpret_cast<R *>(p)[k] = r;
    }
}

/* Global store of N elements at p, 16-byte pieces as one st.global.v4 each: through st() the
 * front end splits a 16-byte store of converted elements into four 4-byte stores (4x the store
 * instructions and L2 write requests; seen in the PTX of the RMSNorm kernels). p is global. */
template <typename T, int N> __device__ __forceinline__ void stg(T *p, const T (&in)[N])
{
    using P = piece<T, N>;
    if constexpr (P::unit == 16) {
#pragma unroll
        for (int k = 0; k < P::count; k++) {
            unsigned u[4];
            memcpy(u, &in[k * P::per], sizeof u);
            asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p + k * P::per),
                         "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3])
                         : "memory");
        }
    } else {
        st(p, in);
    }
}

/* Hides a register array's contents from the optimiser, so that values derived from it (e.g.
 * bf16 -> float conversions) are recomputed after this point instead of being kept live across a
 * reduction: a packed bf16 pair costs one register, its two floats two. Emits no instruction. */
template <typename T, int N> __device__ __forceinline__ void opaque(T (&v)[N])
{
    if constexpr (sizeof(T) * N % 4 == 0) {
        constexpr int W = (int)(sizeof(T) * N / 4);
        unsigned int u[W];
        memcpy(u, v, sizeof u);
#pragma unroll
        for (int i = 0; i < W; i++)
            asm volatile("" : "+r"(u[i]));
        memcpy(v, u, sizeof u);
    } else {
        static_assert(sizeof(T) * N == 2, "opaque() takes whole registers or one 16-bit value");
        unsigned short h;
        memcpy(&h, v, sizeof h);
        asm volatile("" : "+h"(h));
        memcpy(v, &h, sizeof h);
    }
}

/* ---- asynchronous copies into shared memory (cp.async, sm_80+) -------------------------------
 * Used as registers that cost no registers: a thread copies the vectors it will itself read, so
 * cp.async.wait_group alone orders the copy before the read; no barrier is needed for them. */

template <int B> __device__ __forceinline__ void cp_async_piece(void *s, const void *g)
{
    const unsigned sa = (unsigned)__cvta_generic_to_shared(s);
    if constexpr (B == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(sa), "l"(g), "n"(B)
                     : "memory");
}

/* Copies N elements (4 to 16 bytes per piece; the addresses are aligned to the piece size). */
template <typename T, int N> __device__ __forceinline__ void cp_async(T *s, const T *g)
{
    using P = piece<T, N>;
    static_assert(P::unit >= 4, "cp.async copies 4, 8 or 16 bytes");
#pragma unroll
    for (int k = 0; k < P::count; k++)
        cp_async_piece<P::unit>(s + k * P::per, g + k * P::per);
}

/* 16 bytes global -> shared at shared address s, or 16 zeros when !ok (src-size 0: nothing is
 * read, though g must still be a valid address). */
__device__ __forceinline__ void cp_async16_or_zero(unsigned s, const void *g, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(g), "r"(ok ? 16 : 0)
                 : "memory");
}

/* 16 bytes global -> shared at s with an L2 policy (pol, from createpolicy). */
__device__ __forceinline__ void cp_async16_pol(void *s, const void *g, unsigned long long pol)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(
                     (unsigned)__cvta_generic_to_shared(s)),
                 "l"(g), "l"(pol)
                 : "memory");
}

/* 16 bytes from shared address s, ordered after the thread's cp.async waits (volatile: not
 * moved above them; a thread reading only what it copied itself needs no barrier). */
__device__ __forceinline__ uint4 lds16_after_wait(unsigned s)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(s));
    return v;
}

/* Four 8x8 matrices of 16-bit elements from shared memory (ldmatrix.x4): lanes 8i..8i+7 give the
 * row addresses of matrix i, whose register i then holds (row g, columns 2t, 2t+1) at lane 4g + t;
 * the .trans form holds (rows 2t, 2t+1, column g). */
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned a)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], unsigned a)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

__device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Waits until at most N of this thread's committed groups are pending (any N the loop over the
 * groups knows at compile time). */
template <int N> __device__ __forceinline__ void cp_wait_group()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* Waits until at most n of this thread's committed groups are pending (n < 4). */
__device__ __forceinline__ void cp_wait(int n)
{
    switch (n) {
    case 0: cp_wait_group<0>(); break;
    case 1: cp_wait_group<1>(); break;
    case 2: cp_wait_group<2>(); break;
    default: cp_wait_group<3>(); break;
    }
}

/* ---- bulk copies into shared memory (cp.async.bulk, sm_90) completing on an mbarrier ---------
 * One thread issues a whole row's copy through the copy engine; the block waits on the stage's
 * mbarrier (phase parity), so no thread spends issue slots or registers on the bytes in flight. */

__device__ __forceinline__ unsigned smem_u32(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(unsigned long long *bar, unsigned count)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count)
                 : "memory");
#endif
}

/* Makes initialised mbarriers visible to the copy engine (the async proxy); a barrier follows. */
__device__ __forceinline__ void mbar_fence_init()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::
                     : "memory");
#endif
}

/* Arrives once on `bar` and tells it to expect `bytes` more from the copy engine. */
__device__ __forceinline__ void mbar_arrive_tx(unsigned long long *bar, unsigned bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}

/* Waits until the phase with parity `parity` of `bar` has completed. */
__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n\t.reg .pred P1;\n"
                 "LAB_WAIT:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
                 "@P1 bra DONE;\n\t"
                 "bra LAB_WAIT;\n"
                 "DONE:\n\t}" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
#endif
}

/* An L2 policy for data read once: evict it first. */
__device__ __forceinline__ unsigned long long l2_evict_first()
{
    unsigned long long pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#endif
    return pol;
}

/* Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to this block's
 * shared memory, completing on `bar`. */
__device__ __forceinline__ void bulk_g2s(void *s, const void *g, unsigned bytes,
                                         unsigned long long *bar, unsigned long long pol)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(s)),
                 "l"(g), "r"(bytes), "r"(smem_u32(bar)), "l"(pol)
                 : "memory");
#endif
}

/* The box at (x, y) of a 2-D tensor map into shared memory at dst (the map's swizzle applied),
 * completing on bar. */
__device__ __forceinline__ void tma_2d(unsigned dst, const CUtensorMap *map, int x, int y,
                                       unsigned long long *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(smem_u32(bar))
                 : "memory");
#endif
}

/* Asks the copy engine to bring `bytes` (a multiple of 16, from a 16-byte aligned address) of
 * global memory into L2 without waiting: a hint that raises the bytes in flight past what the
 * registers hold. */
__device__ __forceinline__ void prefetch_l2_bulk(const void *g, unsigned bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(g), "r"(bytes) : "memory");
#endif
}

/* Shared-memory vector load/store (aligned to the piece size). */
template <typename T, int N> __device__ __forceinline__ void ld_sh(const T *p, T (&out)[N])
{
    ld_rw(p, out);
}

/* ---- programmatic dependent launch ------------------------------------------------------------
 */

/* Waits until the grids this one depends on have completed and their writes are visible. A no-op
 * when the kernel was launched without the PDL attribute. Every baton kernel calls it before its
 * first global read, so that a chain stays ordered even through a kernel that reads nothing. */
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Lets the next PDL kernel on the stream start launching. Usually called after this block's last
 * global store: the dependent still waits for this grid's completion before it reads this grid's
 * output (the backward's first kernels call it early; rms_norm_bwd.cu says why that is safe). */
__device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* The register-rows kernels' vectors of a row: thread tid holds vectors v * T + tid (v < NV) of
 * VEC elements each; idx[v] is its first column, or -1 past the row's `cols`. */
template <int NV, int VEC>
__device__ __forceinline__ void rows_vector_offsets(int (&idx)[NV], int cols)
{
    const int tid = threadIdx.x, T = blockDim.x;
#pragma unroll
    for (int v = 0; v < NV; v++) {
        idx[v] = (v * T + tid) * VEC;
        if (idx[v] >= cols)
            idx[v] = -1;
    }
}

/* Sum over the W lanes of a group (W a power of two up to 32, lanes of a group adjacent; W the
 * same for every lane, all of which take part), in one xor tree; every lane gets the same bits. */
template <typename A> __device__ __forceinline__ A lanes_sum(A v, int W)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        if (o < W)
            v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename A> __device__ __forceinline__ A warp_sum(A v)
{
    return lanes_sum(v, 32);
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the same bits.
 * `red` holds 32 values; the leading barrier lets a caller reuse it in a loop. */
template <typename A> __device__ __forceinline__ A block_sum(A v, A *red)
{
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0)
        red[wid] = v;
    __syncthreads();
    A s = 0;
    for (int i = 0; i < nw; i++)
        s += red[i];
    return s;
}

/* Sum of one value per block over the cluster (x-dimension clusters of `n` blocks, n <= 32): each
 * block publishes its value in `slot`, then every warp adds the n values in one fixed tree, so all
 * blocks of the cluster get the same bits. The caller alternates between two slots across calls
 * (the cluster barrier of call k+1 orders call k's reads before call k+2's writes). */
template <typename A> __device__ __forceinline__ A cluster_sum(A v, A *slot, int n)
{
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0)
        *slot = v;
    cluster.sync();
    const int lane = threadIdx.x & 31;
    A mine = 0;
    if (lane < n)
        mine = *cluster.map_shared_rank(slot, lane);
    return warp_sum(mine);
}

/* The last cluster barrier before a block exits only keeps its shared memory alive until every
 * peer has read it (the reads were consumed before the peers arrive): no memory ordering needed,
 * so no fence that would wait for this block's outstanding stores. */
__device__ __forceinline__ void cluster_exit_barrier()
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::
                     : "memory");
}

/* The cluster's combine of its cy ranks' column sums (each rank's at sums, in its shared memory)
 * into part_grad's row dst: this rank writes columns srank * T + tid, stepping T * cy, each the
 * ranks' sums added in rank order (one fixed shape, so the same bits on every run), added onto
 * what dst holds when `onto` (a chained cluster after the first; read from L2). Between two
 * cluster barriers: every rank's sums are written before, and read before they change after.
 * The second orders no memory (as cluster_exit_barrier): a rank's reads of its peers' sums are
 * added into what it stores before it arrives, and waiting for those part_grad stores to land
 * cost bf16 4096 x 4096 at part_grad 16 0.4-1.0 us on an H100 (bench_kernels); a
 * caller that publishes dst to other blocks fences it itself.
 * marks: the timeline's stamps after the first barrier and after the adds (none by default). */
struct no_marks {
    __device__ void synced() const
    {
    }
    __device__ void combined() const
    {
    }
};
template <typename A, typename Marks = no_marks>
__device__ __forceinline__ void cluster_rank_sums(const A *sums, A *dst, int cols, int srank,
                                                  int tid, int T, int cy, bool onto,
                                                  Marks marks = Marks())
{
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    marks.synced();
    for (int j = srank * T + tid; j < cols; j += T * cy) {
        A s = 0;
        for (int q = 0; q < cy; q++)
            s += *cluster.map_shared_rank(sums + j, q);
        dst[j] = onto ? __ldcg(dst + j) + s : s;
    }
    marks.combined();
    cluster_exit_barrier(); /* the peers' sums are read (and added) before each arrives */
}

/* ---- the checked launcher -------------------------------------------------------------------- */

/* ---- per-device, per-kernel facts, looked up once ----------------------------------------------
 * A call must cost little more than its launch, so what the CUDA runtime would answer the same way
 * every time (SM count, kernel attributes already set, occupancy) is asked once per device and
 * kernel and kept in lock-free tables. Every entry is written with the value that any racing
 * writer would also write (the queries are pure, the attribute settings idempotent), so two runs
 * on two threads may fill the same entry at once and both read a right answer. */

#define KCUDA_MAX_DEVICES 64

static inline int device_of(const baton_exec_ctx *ctx)
{
    int dev = 0;
    if (ctx && ctx->device.kind == BATON_DEVICE_CUDA && ctx->device.index >= 0)
        return ctx->device.index;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return -1;
    return dev;
}

static inline int sm_count(const baton_exec_ctx *ctx)
{
    static std::atomic<int> cache[KCUDA_MAX_DEVICES];
    const int dev = device_of(ctx);
    if (dev < 0)
        return 132;
    if (dev < KCUDA_MAX_DEVICES) {
        const int c = cache[dev].load(std::memory_order_relaxed);
        if (c > 0)
            return c;
    }
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
        return 132;
    if (dev < KCUDA_MAX_DEVICES)
        cache[dev].store(n, std::memory_order_relaxed);
    return n;
}

/* What the launchers ask of ctx's device, asked once per device (one lookup per call): the SM
 * count and the shared memory a block may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin),
 * an H100's when the runtime cannot say; the compute capability (major * 10 + minor, 0 when the
 * runtime cannot say) and whether it takes cooperative launches (false then). */
struct DeviceFacts {
    int sms;
    int smem_optin;
    int cc;
    bool coop;
};

static inline DeviceFacts device_facts(const baton_exec_ctx *ctx)
{
    /* sms (16 bits) | smem_optin (24) | cc (8) | coop (1) | known (1), 0 while not asked */
    static std::atomic<uint64_t> cache[KCUDA_MAX_DEVICES];
    const int dev = device_of(ctx);
    if (dev >= 0 && dev < KCUDA_MAX_DEVICES) {
        const uint64_t c = cache[dev].load(std::memory_order_relaxed);
        if (c)
            return DeviceFacts{(int)(c >> 34), (int)(c >> 10 & 0xffffff), (int)(c >> 2 & 0xff),
                               (c >> 1 & 1) != 0};
    }
    DeviceFacts f = {132, 227 * 1024, 0, false};
    if (dev < 0)
        return f;
    int sms = 0, optin = 0, major = 0, minor = 0, coop = 0;
    const bool ok_sms =
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && sms > 0;
    const bool ok_optin = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                                 dev) == cudaSuccess &&
                          optin > 0;
    const bool ok_cc =
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess;
    const bool ok_coop =
        cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) == cudaSuccess;
    if (ok_sms)
        f.sms = sms;
    if (ok_optin)
        f.smem_optin = optin;
    if (ok_cc)
        f.cc = major * 10 + minor;
    f.coop = ok_coop && coop != 0;
    const bool all = ok_sms && ok_optin && ok_cc && ok_coop;
    if (!all)
        (void)cudaGetLastError(); /* a failure may pass: not remembered */
    else if (dev < KCUDA_MAX_DEVICES && f.sms < (1 << 16) && f.smem_optin < (1 << 24) && f.cc < 256)
        cache[dev].store((uint64_t)f.sms << 34 | (uint64_t)f.smem_optin << 10 |
                             (uint64_t)f.cc << 2 | (uint64_t)f.coop << 1 | 1,
                         std::memory_order_relaxed);
    return f;
}

/* The name of ctx's GPU (cudaDeviceProp.name, at most 63 bytes), asked once per device; "" when
 * the runtime cannot say. Keys the tuned variants (rms_norm_tune.h): GPUs of one name share them.
 */
static inline const char *device_name(const baton_exec_ctx *ctx)
{
    static char names[KCUDA_MAX_DEVICES][64];
    static std::atomic<int> state[KCUDA_MAX_DEVICES]; /* 0 unknown, 1 being written, 2 known */
    const int dev = device_of(ctx);
    if (dev < 0 || dev >= KCUDA_MAX_DEVICES)
        return "";
    int st = state[dev].load(std::memory_order_acquire);
    if (st == 2)
        return names[dev];
    if (st == 0 && state[dev].compare_exchange_strong(st, 1, std::memory_order_acq_rel)) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            state[dev].store(0, std::memory_order_release);
            return "";
        }
        memcpy(names[dev], p.name, sizeof names[dev] - 1);
        names[dev][sizeof names[dev] - 1] = 0;
        state[dev].store(2, std::memory_order_release);
        return names[dev];
    }
    while ((st = state[dev].load(std::memory_order_acquire)) == 1)
        ; /* another thread is writing it: a few microseconds, once per process */
    return st == 2 ? names[dev] : "";
}

/* A value asked of device `dev` once per process: the first caller runs ask() and every later
 * call gets its answer (one that must not change, such as a cluster size that orders sums);
 * callers that come while it asks wait for it. A device out of range is asked every time. */
template <typename V> struct DeviceOnce {
    V val[KCUDA_MAX_DEVICES];
    std::atomic<int> state[KCUDA_MAX_DEVICES]; /* 0 unknown, 1 being asked, 2 known */

    template <typename F> V get(int dev, F &&ask)
    {
        if (dev < 0 || dev >= KCUDA_MAX_DEVICES)
            return ask();
        int st = state[dev].load(std::memory_order_acquire);
        if (st == 2)
            return val[dev];
        if (st == 0 && state[dev].compare_exchange_strong(st, 1, std::memory_order_acq_rel)) {
            val[dev] = ask();
            state[dev].store(2, std::memory_order_release);
            return val[dev];
        }
        while (state[dev].load(std::memory_order_acquire) != 2)
            ; /* another thread asks: the queries take microseconds, once per process */
        return val[dev];
    }
};

/* The calling thread's stream-capture mode relaxed while this lives: queries made while the
 * caller's stream captures a graph (occupancy, cluster fits) enqueue nothing, which the runtime
 * allows in relaxed mode. */
struct RelaxedCapture {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    const bool swapped = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
    ~RelaxedCapture()
    {
        if (swapped)
            (void)cudaThreadExchangeStreamCaptureMode(&mode);
    }
};

/* One kernel's facts: bit d of a mask is device d. `occ` packs the last occupancy answer:
 * valid (1) | device (6) | threads / 32 (5) | dynamic shared memory (18) | blocks per SM (8). */
struct FnFacts {
    std::atomic<const void *> key;
    std::atomic<uint64_t> smem_set; /* carveout and the dynamic shared-memory limit raised */
    std::atomic<uint64_t> np_set;   /* non-portable cluster sizes allowed */
    std::atomic<uint64_t> cl_known; /* whether a 16-block cluster can run: known ... */
    std::atomic<uint64_t> cl_ok;    /* ... and the answer */
    std::atomic<uint64_t> occ;
    std::atomic<uint64_t> fit; /* a kernel's own answer for the last key it was asked (below) */
};

#define KCUDA_FN_SLOTS 1024

/* The entry of `kernel`, created on first use; NULL when the table is full (then callers ask the
 * runtime every time, which is slower but right). */
static inline FnFacts *fn_facts(const void *kernel)
{
    static FnFacts table[KCUDA_FN_SLOTS];
    const size_t h = (size_t)((((uintptr_t)kernel >> 4) * 0x9E3779B97F4A7C15ull) >> 54);
    for (size_t i = 0; i < KCUDA_FN_SLOTS; i++) {
        FnFacts &f = table[(h + i) & (KCUDA_FN_SLOTS - 1)];
        const void *cur = f.key.load(std::memory_order_acquire);
        if (cur == kernel)
            return &f;
        if (!cur) {
            const void *expect = nullptr;
            if (f.key.compare_exchange_strong(expect, kernel, std::memory_order_acq_rel) ||
                expect == kernel)
                return &f;
        }
    }
    return nullptr;
}

typedef std::atomic<uint64_t> FnFacts::*FnMask;

static inline bool facts_has(const FnFacts *f, FnMask mask, int dev)
{
    return f && dev >= 0 && dev < KCUDA_MAX_DEVICES &&
           ((f->*mask).load(std::memory_order_acquire) >> dev & 1);
}

static inline void facts_set(FnFacts *f, FnMask mask, int dev)
{
    if (f && dev >= 0 && dev < KCUDA_MAX_DEVICES)
        (f->*mask).fetch_or(1ull << dev, std::memory_order_acq_rel);
}

/* cudaOccupancyMaxActiveBlocksPerMultiprocessor, remembered for the last (device, threads,
 * shared memory) asked of this kernel. */
static inline cudaError_t occupancy(const baton_exec_ctx *ctx, const void *kernel, int threads,
                                    size_t smem, int *per_sm)
{
    FnFacts *f = fn_facts(kernel);
    const int dev = device_of(ctx);
    const bool packable = f && dev >= 0 && dev < KCUDA_MAX_DEVICES && threads % 32 == 0 &&
                          threads <= 1024 && smem < (1u << 18);
    const uint64_t key = packable ? (1ull << 37) | ((uint64_t)dev << 31) |
                                        ((uint64_t)(threads / 32 - 1) << 26) | ((uint64_t)smem << 8)
                                  : 0;
    if (packable) {
        const uint64_t o = f->occ.load(std::memory_order_acquire);
        if ((o & ~(uint64_t)0xff) == key) {
            *per_sm = (int)(o & 0xff);
            return cudaSuccess;
        }
    }
    int n = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem);
    if (e != cudaSuccess)
        return e;
    *per_sm = n;
    if (packable && n >= 0 && n < 256)
        f->occ.store(key | (uint64_t)n, std::memory_order_release);
    return cudaSuccess;
}

/* A small per-kernel memo for answers that cost CUDA calls (the register backward's fitted cy):
 * `key` must be nonzero and fit in 56 bits; the answer in 8. */
static inline bool fit_get(const void *kernel, uint64_t key, int *answer)
{
    FnFacts *f = fn_facts(kernel);
    if (!f || !key || key >> 56)
        return false;
    const uint64_t v = f->fit.load(std::memory_order_acquire);
    if (v >> 8 != key)
        return false;
    *answer = (int)(v & 0xff);
    return true;
}

static inline void fit_put(const void *kernel, uint64_t key, int answer)
{
    FnFacts *f = fn_facts(kernel);
    if (f && key && !(key >> 56) && answer >= 0 && answer < 256)
        f->fit.store(key << 8 | (uint64_t)answer, std::memory_order_release);
}

/* cudaOccupancyMaxActiveClusters for `kernel` launched as `grid` blocks of `threads` in x-clusters
 * of `cluster`, `smem` bytes of dynamic shared memory each. */
static inline cudaError_t max_active_clusters(const void *kernel, unsigned grid, int threads,
                                              size_t smem, int cluster, cudaStream_t stream, int *n)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid, 1, 1);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute at;
    memset(&at, 0, sizeof at);
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = (unsigned)cluster;
    at.val.clusterDim.y = 1;
    at.val.clusterDim.z = 1;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    *n = 0;
    return cudaOccupancyMaxActiveClusters(n, kernel, &cfg);
}

/* prepare()'s work when a launch needs an attribute (below). */
template <typename K>
static int prepare_attrs(K kernel, const baton_exec_ctx *ctx, const char *what, int cluster,
                         long long grid, int threads, size_t smem, size_t smem_max, bool may_shrink,
                         bool max_shared)
{
    cudaError_t e;
    FnFacts *f = fn_facts((const void *)kernel);
    const int dev = device_of(ctx);
    /* The staged kernels want all of the SM's shared memory for their stages: prefer the largest
     * carveout (more blocks per SM) and allow above 48 KB per block (with the static part). */
    if (smem > 0 && !facts_has(f, &FnFacts::smem_set, dev)) {
        if ((max_shared &&
             (e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared)) != cudaSuccess) ||
            (e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem_max)) != cudaSuccess) {
            baton__ctx_fail(ctx, BATON_ECUDA,
                            "cudaFuncSetAttribute(%s, %zu bytes of shared memory) failed: %s", what,
                            smem, cudaGetErrorString(e));
            return -1;
        }
        facts_set(f, &FnFacts::smem_set, dev);
    }
    if (cluster <= 8)
        return 0;
    if (!facts_has(f, &FnFacts::np_set, dev)) {
        if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) !=
            cudaSuccess) {
            if (may_shrink) {
                cudaGetLastError();
                return 1;
            }
            baton__ctx_fail(ctx, BATON_ECUDA,
                            "cudaFuncSetAttribute(%s, non-portable cluster) failed: %s", what,
                            cudaGetErrorString(e));
            return -1;
        }
        facts_set(f, &FnFacts::np_set, dev);
    }
    if (!may_shrink)
        return 0;
    if (facts_has(f, &FnFacts::cl_known, dev))
        return facts_has(f, &FnFacts::cl_ok, dev) ? 0 : 1;
    int n = 0;
    if (max_active_clusters((const void *)kernel, (unsigned)grid, threads, smem, cluster,
                            ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0, &n) != cudaSuccess) {
        cudaGetLastError();
        return 1; /* not remembered: it may be a passing failure */
    }
    if (n >= 1)
        facts_set(f, &FnFacts::cl_ok, dev);
    facts_set(f, &FnFacts::cl_known, dev);
    return n < 1;
}

/* Prepares a kernel for a launch of `grid` blocks of `threads`, `smem` bytes of dynamic shared
 * memory each, in clusters of `cluster` blocks: allows the non-portable cluster size and shared
 * memory above 48 KB (up to smem_max, the most any launch of the kernel asks for). Returns 1 when
 * a cluster of more than 8 blocks cannot be scheduled and may_shrink (the caller chooses again
 * with 8), -1 with the reason in ctx->errbuf when an attribute cannot be set, 0 when ready. Each
 * attribute is set once per device and kernel, and the cluster answer is asked once: a block of
 * any layout fits on one SM, so whether 16 SMs of a GPC can take a cluster does not depend on the
 * layout. */
template <typename K>
static inline int prepare(K kernel, const baton_exec_ctx *ctx, const char *what, int cluster,
                          long long grid, int threads, size_t smem, size_t smem_max,
                          bool may_shrink, bool max_shared = true)
{
    if (smem == 0 && cluster <= 8)
        return 0; /* nothing to allow (most launches): no call */
    return prepare_attrs(kernel, ctx, what, cluster, grid, threads, smem, smem_max, may_shrink,
                         max_shared);
}

/* A copy of ctx (or of an empty one) launching with programmatic dependent launch when `on`, on
 * any stream but the legacy one. A call's second kernel, which waits for its first through
 * pdl_wait, is launched so: its blocks are placed while the first kernel still runs (0.3-1.3 us a
 * call saved, in bench_kernels). */
static inline baton_exec_ctx with_pdl(const baton_exec_ctx *ctx, bool on)
{
    baton_exec_ctx c;
    memset(&c, 0, sizeof c);
    if (ctx)
        c = *ctx;
    c.pdl = on && c.stream;
    return c;
}

/* While capturing: whether the node the next launch on s follows is a single kernel node. A
 * programmatic edge joins two kernel nodes only, so a launch after a copy or memset that the call
 * itself issued (a cache carried over first) is an ordinary one. Never asked on a replay. */
static inline bool capture_follows_kernel(cudaStream_t s)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    const cudaGraphNode_t *deps = nullptr;
    const cudaGraphEdgeData *ed = nullptr;
    size_t n = 0;
    cudaGraphNodeType t;
    if (cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, &ed, &n) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    if (st != cudaStreamCaptureStatusActive || n != 1 || !deps[0])
        return false;
    if (cudaGraphNodeGetType(deps[0], &t) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return t == cudaGraphNodeTypeKernel;
}

/* Whether launch() gives the next launch on ctx's stream the programmatic attribute: ctx->pdl,
 * and while capturing only right after a kernel node. A kernel told so may do work that only pays
 * while its predecessor still runs (decode attention's L2 prefetch before its wait). */
static inline bool launch_pdl(const baton_exec_ctx *ctx)
{
    return ctx && ctx->pdl &&
           (!ctx->capturing || capture_follows_kernel((cudaStream_t)ctx->stream));
}

/* cuTensorMapEncodeTiled, from the driver the runtime has loaded (NULL where it has none). */
typedef CUresult (*EncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static inline EncodeTiled tensor_map_encoder(void)
{
    static std::atomic<void *> fn{nullptr};
    void *f = fn.load(std::memory_order_relaxed);
    if (!f) {
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                             &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            return nullptr;
        }
        fn.store(f, std::memory_order_relaxed);
    }
    return (EncodeTiled)f;
}

/* The tensor map of an attention cache [S, Hkv * dh] of f16 (half) or bf16: boxes of dh features
 * (128 bytes at most: the swizzle's row) x `keys` keys, 128-byte swizzle (chunk c of row r at
 * chunk c ^ (r % 8)), keys past S read as zeros. 0, or the reason in ctx->errbuf. */
static inline int cache_tensor_map(const baton_exec_ctx *ctx, const char *what, CUtensorMap *m,
                                   const void *base, bool half, long long S, int Hkv, int dh,
                                   int keys)
{
    EncodeTiled enc = tensor_map_encoder();
    if (!enc)
        return baton__ctx_fail(ctx, BATON_ECUDA, "%s: no cuTensorMapEncodeTiled", what);
    const cuuint64_t dim[2] = {(cuuint64_t)Hkv * dh, (cuuint64_t)S};
    const cuuint64_t stride[1] = {(cuuint64_t)Hkv * dh * 2};
    const cuuint32_t box[2] = {(cuuint32_t)dh, (cuuint32_t)keys}, es[2] = {1, 1};
    const CUresult r =
        enc(m, half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
            const_cast<void *>(base), dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return baton__ctx_fail(ctx, BATON_ECUDA, "%s: cuTensorMapEncodeTiled failed (%d)", what,
                               (int)r);
    return 0;
}

/* Launches kernel<<<grid, block, smem, ctx->stream>>> through cudaLaunchKernelEx, with the
 * programmatic-stream-serialization attribute when ctx->pdl (while capturing, only right after a
 * kernel node: capture_follows_kernel), an x-cluster of `cluster` blocks when cluster > 1, and
 * with `coop` as a cooperative grid (every block resident at once, for grid.sync()); checks the
 * launch and the last error. The caller has set the kernel's attributes for clusters above 8
 * blocks and shared memory above 48 KB. */
template <typename... KArgs, typename... Args>
static int launch_with(const baton_exec_ctx *ctx, const char *name, bool coop,
                       void (*kernel)(KArgs...), dim3 grid, unsigned block, size_t smem,
                       int cluster, Args... args)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = dim3(block, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0;
    cudaLaunchAttribute attrs[3];
    memset(attrs, 0, sizeof attrs);
    unsigned n = 0;
    if (coop) {
        attrs[n].id = cudaLaunchAttributeCooperative;
        attrs[n].val.cooperative = 1;
        n++;
    }
    if (launch_pdl(ctx)) {
        attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    if (cluster > 1) {
        attrs[n].id = cudaLaunchAttributeClusterDimension;
        attrs[n].val.clusterDim.x = (unsigned)cluster;
        attrs[n].val.clusterDim.y = 1;
        attrs[n].val.clusterDim.z = 1;
        n++;
    }
    cfg.attrs = attrs;
    cfg.numAttrs = n;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e != cudaSuccess)
        return baton__ctx_fail(ctx, BATON_ECUDA, "cudaLaunchKernelEx(%s%s) failed: %s", name,
                               coop ? ", cooperative" : "", cudaGetErrorString(e));
    return 0;
}

/* launch_with() for an ordinary grid. */
template <typename... KArgs, typename... Args>
static int launch(const baton_exec_ctx *ctx, const char *name, void (*kernel)(KArgs...), dim3 grid,
                  unsigned block, size_t smem, int cluster, Args... args)
{
    return launch_with(ctx, name, false, kernel, grid, block, smem, cluster, args...);
}

/* Host-side validation shared by the kernels (dtype_is_float is core's). */
static inline const char *dtype_label(int32_t dt)
{
    switch (dt) {
    case BATON_DTYPE_BF16: return "bf16";
    case BATON_DTYPE_F16: return "f16";
    case BATON_DTYPE_F32: return "f32";
    case BATON_DTYPE_F64: return "f64";
    case BATON_DTYPE_I32: return "i32";
    case BATON_DTYPE_I64: return "i64";
    default: return "invalid";
    }
}

static inline size_t dtype_bytes(int32_t dt)
{
    switch (dt) {
    case BATON_DTYPE_BF16:
    case BATON_DTYPE_F16: return 2;
    case BATON_DTYPE_F32:
    case BATON_DTYPE_I32: return 4;
    case BATON_DTYPE_F64:
    case BATON_DTYPE_I64: return 8;
    default: return 0;
    }
}

static inline bool aligned(const void *p, size_t a)
{
    return ((uintptr_t)p % a) == 0;
}

/* ---- pieces of the attention kernels (decoder_attention.cu, decoder_prefill.cu,
 * attn_prefill_sm90.cu) ------------------------------------------------------------------------ */

/* Two floats rounded to T (bf16 or f16), lo in the low half: an MMA operand. */
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    if constexpr (std::is_same<T, __half>::value) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned *>(&h);
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned *>(&h);
    }
}

/* 2^x on the special-function unit: the online softmax's exponentials, in base 2. */
__device__ __forceinline__ float ex2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* One output element's merge of C states in rank order (the same bits every run): state k is
 * its running max m(k) (base 2; -inf: no keys), its weighted sum a(k) and its weight sum l(k);
 * the result is sum w_k a(k) / sum w_k l(k), w_k = 2^(m(k) - M). m, a and l read state k
 * wherever it is (registers, this block's shared memory): decode attention's cluster merges and
 * bench_decoder's floor of them. */
template <int CMAX, typename Fm, typename Fa, typename Fl>
__device__ __forceinline__ float softmax_fold(int C, Fm &&m, Fa &&a, Fl &&l)
{
    float M = -INFINITY;
#pragma unroll
    for (int k = 0; k < CMAX; k++)
        if (k < C)
            M = fmaxf(M, m(k));
    float sa = 0.f, sl = 0.f;
#pragma unroll
    for (int k = 0; k < CMAX; k++)
        if (k < C) {
            const float mk = m(k);
            const float w = mk == -INFINITY ? 0.f : exp2f(mk - M);
            sa = fmaf(w, a(k), sa);
            sl = fmaf(w, l(k), sl);
        }
    return sa / sl;
}

/* A prefill block's place in the order of work, its block index in and out: the longest rows
 * first, except that the second round of one block an SM goes lightest first: blocks b and
 * sms + b, which usually share an SM while the GPU fills, then carry about the same work
 * together. */
__device__ __forceinline__ void order_by_work(long long &rank, int sms)
{
    if (rank >= sms && rank < 2LL * sms)
        rank = sms + (min((long long)gridDim.x, 2LL * sms) - 1 - rank);
}

/* Row r's position for a prefill kernel: -1 for a row past `rows` (every key masked, nothing
 * written), else positions[r] (i64 when pos64), clamped into [0, S) after out_of_range(p) is
 * called with a value outside it. */
template <typename F>
__device__ __forceinline__ long long prefill_position(const void *pos, int pos64, long long r,
                                                      long long rows, long long S, F &&out_of_range)
{
    long long p = -1;
    if (r < rows) {
        p = pos64 ? ((const long long *)pos)[r] : ((const int *)pos)[r];
        if (p < 0 || p >= S) {
            out_of_range(p);
            p = p < 0 ? 0 : S - 1;
        }
    }
    return p;
}

/* A kernel's run-time error into a decoder file's record (decoder_record.cuh): the first tag wins;
 * its values go to err, then to the host's copy that *host points to (NULL: none) with the tag
 * last, so that a host that sees the tag sees its values. Only the winner reads *host. */
__device__ __forceinline__ void record_error(unsigned long long *err,
                                             unsigned long long *const *host,
                                             unsigned long long tag, long long i, long long v,
                                             long long limit)
{
    if (atomicCAS(&err[0], 0ull, tag) == 0ull) {
        err[1] = (unsigned long long)i;
        err[2] = (unsigned long long)v;
        err[3] = (unsigned long long)limit;
        volatile unsigned long long *h = *(volatile unsigned long long *const *)host;
        if (h) {
            h[1] = (unsigned long long)i;
            h[2] = (unsigned long long)v;
            h[3] = (unsigned long long)limit;
            __threadfence_system();
            h[0] = tag;
        }
        __threadfence_system();
    }
}

/* n rounded up to a multiple of 16 (the staged kernels carve shared memory in 16-byte pieces). */
__host__ __device__ __forceinline__ size_t pad16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

} /* namespace kcuda */

#endif /* BATON_KCUDA_COMMON_CUH */
