/* rms_norm.cu: RMSNorm forward and backward on CUDA, for the 16 (x, weight) dtype pairs, at the
 * memory-bandwidth limit: one pass over x (and grad_output) with rows held in registers, 16-byte
 * loads, long rows split over a thread-block cluster, and a deterministic grad_weight through the
 * part_grad buffer that kernels/descriptors.h defines. No allocation, no synchronisation. */
#include "kernels/cuda/kcuda_common.cuh"

#include <math.h>

#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/rms_norm_cuda.h"
#include "kernels/descriptors.h"

namespace kcuda
{

__device__ __forceinline__ float rsqrt_acc(float v)
{
    return rsqrtf(v);
}
__device__ __forceinline__ double rsqrt_acc(double v)
{
    return rsqrt(v);
}

#define KCUDA_MAX_THREADS 512

struct FwdArgs {
    const void *x;
    const void *w;
    void *y;
    void *invvar;
    int64_t n1, n2;
    double eps;
    int64_t chunk; /* columns per block; cx * chunk >= n2 */
    int cx;        /* blocks per row (cluster size) */
    int stages;    /* staged kernel: rows in flight per block (1..4) */
};

__host__ __device__ __forceinline__ size_t pad16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* Dynamic shared memory of the staged forward kernel: w's chunk, then `stages` chunks of x. */
template <typename TX, typename TW> __host__ __device__ size_t fwd_smem(int64_t chunk, int stages)
{
    return pad16((size_t)chunk * sizeof(TW)) + (size_t)stages * pad16((size_t)chunk * sizeof(TX));
}

/* The 16-byte path. A block handles `chunk` columns of a row (all of it when cx == 1), rows
 * strided over the grid. Each thread copies its own 16-byte vectors of x (and, once, of w) into
 * shared memory with cp.async, `stages` rows ahead, so the bytes in flight cost no registers; it
 * reads back only what it copied, so no barrier guards the staging. */
template <typename TX, typename TW>
__global__ void __launch_bounds__(KCUDA_MAX_THREADS) rms_fwd_staged(FwdArgs a)
{
    using A = typename acc_of<TX>::type;
    constexpr int VEC = 16 / (int)sizeof(TX);
    extern __shared__ __align__(16) unsigned char dyn[];
    __shared__ A red[32];
    __shared__ A slots[2];
    const TX *__restrict__ x = static_cast<const TX *>(a.x);
    const TW *__restrict__ w = static_cast<const TW *>(a.w);
    TW *__restrict__ y = static_cast<TW *>(a.y);
    A *__restrict__ inv = static_cast<A *>(a.invvar);
    const int tid = threadIdx.x, T = blockDim.x, cx = a.cx, S = a.stages;
    const int crank = cx > 1 ? (int)(blockIdx.x % (unsigned)cx) : 0;
    const int64_t group = blockIdx.x / (unsigned)cx, ngroups = gridDim.x / (unsigned)cx;
    const int64_t col0 = (int64_t)crank * a.chunk;
    const int64_t left = a.n2 - col0;
    const int cols = (int)(left < a.chunk ? (left > 0 ? left : 0) : a.chunk);
    const size_t xstride = pad16((size_t)a.chunk * sizeof(TX)) / sizeof(TX);
    TW *ws = reinterpret_cast<TW *>(dyn);
    TX *xs = reinterpret_cast<TX *>(dyn + pad16((size_t)a.chunk * sizeof(TW)));
    const A inv_n = A(1) / A(a.n2);
    const A eps = (A)a.eps;

    pdl_wait(); /* x and w may be a predecessor's outputs */

    for (int idx = tid * VEC; idx < cols; idx += T * VEC)
        cp_async<TW, VEC>(ws + idx, w + col0 + idx);
    int64_t ahead = group; /* the next row to copy */
    for (int k = 0; k < S - 1; k++, ahead += ngroups) {
        if (ahead < a.n1)
            for (int idx = tid * VEC; idx < cols; idx += T * VEC)
                cp_async<TX, VEC>(xs + k * xstride + idx, x + ahead * a.n2 + col0 + idx);
        cp_commit();
    }
    int stage = 0, slot = 0;
    for (int64_t row = group; row < a.n1; row += ngroups) {
        const int ist = stage + S - 1 < S ? stage + S - 1 : stage - 1;
        if (ahead < a.n1)
            for (int idx = tid * VEC; idx < cols; idx += T * VEC)
                cp_async<TX, VEC>(xs + ist * xstride + idx, x + ahead * a.n2 + col0 + idx);
        cp_commit();
        ahead += ngroups;
        cp_wait(S - 1);
        const TX *xst = xs + stage * xstride;
        A ss = 0;
#pragma unroll 2
        for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
            TX v[VEC];
            ld_sh(xst + idx, v);
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                const A f = to_acc<A>(v[e]);
                ss += f * f;
            }
        }
        ss = block_sum(ss, red);
        if (cx > 1) {
            ss = cluster_sum(ss, &slots[slot], cx);
            slot ^= 1;
        }
        const A r = rsqrt_acc(ss * inv_n + eps);
        if (crank == 0 && tid == 0)
            inv[row] = r;
        TW *yr = y + row * a.n2 + col0;
#pragma unroll 2
        for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
            TX v[VEC];
            TW u[VEC], out[VEC];
            ld_sh(xst + idx, v);
            ld_sh(ws + idx, u);
#pragma unroll
            for (int e = 0; e < VEC; e++)
                out[e] = from_acc<TW>(to_acc<A>(u[e]) * (to_acc<A>(v[e]) * r));
            st(yr + idx, out);
        }
        stage = stage + 1 == S ? 0 : stage + 1;
    }
    cp_commit(); /* w's copies, when this block had no row */
    cp_wait(0);
    if (cx > 1)
        cluster_exit_barrier(); /* peers may still read this block's slots */
    pdl_trigger();
}

/* y = w * (x * r) for one vector, converting two elements at a time where the output is 16-bit
 * and the accumulation float (one packed conversion instead of two; the same bits). */
template <typename TX, typename TW, typename A, int VEC>
__device__ __forceinline__ void scale_vec(const TX (&v)[VEC], const TW (&u)[VEC], A r,
                                          TW (&out)[VEC])
{
    if constexpr (sizeof(A) == 4 && VEC % 2 == 0 && std::is_same<TW, __nv_bfloat16>::value) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2) {
            const __nv_bfloat162 p =
                __floats2bfloat162_rn(to_acc<A>(u[e]) * (to_acc<A>(v[e]) * r),
                                      to_acc<A>(u[e + 1]) * (to_acc<A>(v[e + 1]) * r));
            memcpy(&out[e], &p, sizeof p);
        }
    } else if constexpr (sizeof(A) == 4 && VEC % 2 == 0 && std::is_same<TW, __half>::value) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2) {
            const __half2 p = __floats2half2_rn(to_acc<A>(u[e]) * (to_acc<A>(v[e]) * r),
                                                to_acc<A>(u[e + 1]) * (to_acc<A>(v[e + 1]) * r));
            memcpy(&out[e], &p, sizeof p);
        }
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++)
            out[e] = from_acc<TW>(to_acc<A>(u[e]) * (to_acc<A>(v[e]) * r));
    }
}

/* out[e] = from_acc(f[e]), two elements per conversion where the output is 16-bit and the
 * accumulation float (the same bits as one at a time). */
template <typename T, typename A, int VEC>
__device__ __forceinline__ void pack_vec(const A (&f)[VEC], T (&out)[VEC])
{
    if constexpr (sizeof(A) == 4 && VEC % 2 == 0 && std::is_same<T, __nv_bfloat16>::value) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2) {
            const __nv_bfloat162 p = __floats2bfloat162_rn(f[e], f[e + 1]);
            memcpy(&out[e], &p, sizeof p);
        }
    } else if constexpr (sizeof(A) == 4 && VEC % 2 == 0 && std::is_same<T, __half>::value) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2) {
            const __half2 p = __floats2half2_rn(f[e], f[e + 1]);
            memcpy(&out[e], &p, sizeof p);
        }
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++)
            out[e] = from_acc<T>(f[e]);
    }
}

/* The most rows in flight per block of the bulk-copy forward kernel. */
#define KCUDA_FWD_BULK_STAGES 8

/* The persistent forward path: like rms_fwd_staged, but thread 0 copies each row's chunk into
 * shared memory with one bulk copy (the copy engine) completing on the stage's mbarrier, `stages`
 * rows ahead. A stage is refilled once every thread has passed the next row's block_sum barrier,
 * which orders all reads of it before the copy is issued. Same shared-memory layout (fwd_smem). */
template <typename TX, typename TW>
__global__ void __launch_bounds__(KCUDA_MAX_THREADS) rms_fwd_bulk(FwdArgs a)
{
    using A = typename acc_of<TX>::type;
    constexpr int VEC = 16 / (int)sizeof(TX);
    extern __shared__ __align__(128) unsigned char dyn[];
    __shared__ A red[32];
    __shared__ A slots[2];
    __shared__ __align__(8) unsigned long long full[KCUDA_FWD_BULK_STAGES];
    const TX *__restrict__ x = static_cast<const TX *>(a.x);
    const TW *__restrict__ w = static_cast<const TW *>(a.w);
    TW *__restrict__ y = static_cast<TW *>(a.y);
    A *__restrict__ inv = static_cast<A *>(a.invvar);
    const int tid = threadIdx.x, T = blockDim.x, cx = a.cx, S = a.stages;
    const int crank = cx > 1 ? (int)(blockIdx.x % (unsigned)cx) : 0;
    const int64_t group = blockIdx.x / (unsigned)cx, ngroups = gridDim.x / (unsigned)cx;
    const int64_t col0 = (int64_t)crank * a.chunk;
    const int64_t left = a.n2 - col0;
    const int cols = (int)(left < a.chunk ? (left > 0 ? left : 0) : a.chunk);
    const unsigned bytes = (unsigned)cols * (unsigned)sizeof(TX);
    const size_t xstride = pad16((size_t)a.chunk * sizeof(TX)) / sizeof(TX);
    TW *ws = reinterpret_cast<TW *>(dyn);
    TX *xs = reinterpret_cast<TX *>(dyn + pad16((size_t)a.chunk * sizeof(TW)));
    const A inv_n = A(1) / A(a.n2);
    const A eps = (A)a.eps;

    if (tid == 0) {
        for (int k = 0; k < S; k++)
            mbar_init(&full[k], 1);
        mbar_fence_init();
    }
    __syncthreads();

    pdl_wait(); /* x and w may be a predecessor's outputs */

    const unsigned long long pol = l2_evict_first();
    for (int idx = tid * VEC; idx < cols; idx += T * VEC)
        cp_async<TW, VEC>(ws + idx, w + col0 + idx);
    cp_commit();
    int64_t ahead = group; /* the next row to copy */
    if (tid == 0)
        for (int k = 0; k < S && ahead < a.n1; k++, ahead += ngroups) {
            mbar_arrive_tx(&full[k], bytes);
            if (bytes)
                bulk_g2s(xs + k * xstride, x + ahead * a.n2 + col0, bytes, &full[k], pol);
        }
    cp_wait(0); /* w: each thread reads back only what it copied */
    int stage = 0, slot = 0;
    unsigned phase = 0;
    bool first = true;
    for (int64_t row = group; row < a.n1; row += ngroups) {
        mbar_wait(&full[stage], phase);
        const TX *xst = xs + stage * xstride;
        A ss = 0;
#pragma unroll 2
        for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
            TX v[VEC];
            ld_sh(xst + idx, v);
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                const A f = to_acc<A>(v[e]);
                ss += f * f;
            }
        }
        ss = block_sum(ss, red);
        /* Every thread has finished the previous row: refill its stage S rows ahead. */
        if (tid == 0) {
            const int prev = stage == 0 ? S - 1 : stage - 1;
            if (!first && ahead < a.n1) {
                mbar_arrive_tx(&full[prev], bytes);
                if (bytes)
                    bulk_g2s(xs + prev * xstride, x + ahead * a.n2 + col0, bytes, &full[prev], pol);
            }
        }
        if (!first)
            ahead += ngroups;
        first = false;
        if (cx > 1) {
            ss = cluster_sum(ss, &slots[slot], cx);
            slot ^= 1;
        }
        const A r = rsqrt_acc(ss * inv_n + eps);
        if (crank == 0 && tid == 0)
            inv[row] = r;
        TW *yr = y + row * a.n2 + col0;
#pragma unroll 2
        for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
            TX v[VEC];
            TW u[VEC], out[VEC];
            ld_sh(xst + idx, v);
            ld_sh(ws + idx, u);
            scale_vec<TX, TW, A, VEC>(v, u, r, out);
            stg(yr + idx, out);
        }
        if (++stage == S) {
            stage = 0;
            phase ^= 1;
        }
    }
    if (cx > 1)
        cluster_exit_barrier(); /* peers may still read this block's slots */
    pdl_trigger();
}

/* One row of the register forward: x's vectors are already in `cur`; the next row's loads go
 * out into `nxt` before this row's barrier, so the block keeps a row in flight while it waits.
 * idx[v] is the thread's column of vector v, or -1 past the row's end. */
template <typename TX, typename TW, typename A, int VEC, int NV>
__device__ __forceinline__ void rows_step(const FwdArgs &a, int64_t row, int64_t next,
                                          const int (&idx)[NV], TX (&cur)[NV][VEC],
                                          TX (&nxt)[NV][VEC], A *slot)
{
    const TW *__restrict__ w = static_cast<const TW *>(a.w);
    const int tid = threadIdx.x, nw = blockDim.x >> 5;
    if (next < a.n1) {
        const TX *__restrict__ xn = static_cast<const TX *>(a.x) + next * a.n2;
#pragma unroll
        for (int v = 0; v < NV; v++)
            if (idx[v] >= 0)
                ld_ro(xn + idx[v], nxt[v]);
    }
    A ss = 0;
#pragma unroll
    for (int v = 0; v < NV; v++)
        if (idx[v] >= 0) {
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                const A f = to_acc<A>(cur[v][e]);
                ss += f * f;
            }
        }
    /* One barrier per row (the caller alternates `slot` between rows: a thread reaches row
     * k + 2's write only after row k + 1's barrier, which every thread passes after its reads of
     * row k). The warps' sums are added by a second shuffle tree: the same bits in every thread. */
    ss = warp_sum(ss);
    if ((tid & 31) == 0)
        slot[tid >> 5] = ss;
    __syncthreads();
    ss = warp_sum((tid & 31) < nw ? slot[tid & 31] : A(0));
    const A r = rsqrt_acc(ss / A(a.n2) + (A)a.eps);
    if (tid == 0)
        static_cast<A *>(a.invvar)[row] = r;
    TW *__restrict__ yr = static_cast<TW *>(a.y) + row * a.n2;
#pragma unroll
    for (int v = 0; v < NV; v++)
        if (idx[v] >= 0) {
            TW u[VEC], out[VEC];
            ld_ro(w + idx[v], u); /* every block of the SM reads the same w: L1 hits */
            scale_vec<TX, TW, A, VEC>(cur[v], u, r, out);
            stg(yr + idx[v], out);
        }
}

/* The register forward for many rows of 16-byte vectors: a persistent grid, a block per row,
 * each thread holding NV vectors of x. Row i + grid's loads are issued before row i's reduction,
 * so every block has a row in flight at all times without shared-memory staging, and several
 * blocks per SM hide each other's barriers: occupancy matters more than anything else here (w
 * held in registers, four partial sums and L1-bypassing loads, together, cost 2 blocks per SM and
 * were 3-6 % slower on an H200). A register row copy, a block per row and no arithmetic, reaches
 * 92-94 % of cudaMemcpy on an H200 and an H100 at 2 to 8 blocks per SM (bench_floors mem). */
template <typename TX, typename TW, int NV>
__global__ void __launch_bounds__(KCUDA_MAX_THREADS) rms_fwd_rows(FwdArgs a)
{
    using A = typename acc_of<TX>::type;
    constexpr int VEC = 16 / (int)sizeof(TX);
    __shared__ A red[2][32];
    const int tid = threadIdx.x, T = blockDim.x, cols = (int)a.n2;
    const int64_t G = gridDim.x;
    int idx[NV];
#pragma unroll
    for (int v = 0; v < NV; v++) {
        idx[v] = (v * T + tid) * VEC;
        if (idx[v] >= cols)
            idx[v] = -1;
    }

    pdl_wait(); /* x and w may be a predecessor's outputs */

    TX xa[NV][VEC], xb[NV][VEC];
    int64_t row = blockIdx.x;
    if (row < a.n1) {
        const TX *__restrict__ xr = static_cast<const TX *>(a.x) + row * a.n2;
#pragma unroll
        for (int v = 0; v < NV; v++)
            if (idx[v] >= 0)
                ld_ro(xr + idx[v], xa[v]);
    }
    /* Unrolled by two so that the two register buffers (and the two reduction slots) swap roles
     * without copies. */
    for (; row < a.n1; row += 2 * G) {
        rows_step<TX, TW, A, VEC, NV>(a, row, row + G, idx, xa, xb, red[0]);
        if (row + G >= a.n1)
            break;
        rows_step<TX, TW, A, VEC, NV>(a, row + G, row + 2 * G, idx, xb, xa, red[1]);
    }
    pdl_trigger();
}

/* One block handles `chunk` columns of a row (all of it when cx == 1), rows strided over the
 * grid. The chunk lives in registers (NV vectors of VEC elements per thread) unless it does not
 * fit, in which case the block streams it twice (the second read mostly hits L2). */
template <typename TX, typename TW, int VEC, int NV, bool STREAM>
__global__ void __launch_bounds__(KCUDA_MAX_THREADS) rms_fwd_kernel(FwdArgs a)
{
    using A = typename acc_of<TX>::type;
    __shared__ A red[32];
    __shared__ A slots[2];
    const TX *__restrict__ x = static_cast<const TX *>(a.x);
    const TW *__restrict__ w = static_cast<const TW *>(a.w);
    TW *__restrict__ y = static_cast<TW *>(a.y);
    A *__restrict__ inv = static_cast<A *>(a.invvar);
    const int tid = threadIdx.x, T = blockDim.x, cx = a.cx;
    const int crank = cx > 1 ? (int)(blockIdx.x % (unsigned)cx) : 0;
    const int64_t group = blockIdx.x / (unsigned)cx, ngroups = gridDim.x / (unsigned)cx;
    const int64_t col0 = (int64_t)crank * a.chunk;
    const int64_t left = a.n2 - col0;
    const int cols = (int)(left < a.chunk ? (left > 0 ? left : 0) : a.chunk);
    constexpr bool fits = !STREAM; /* the host checked that the chunk fits */
    const A inv_n = A(1) / A(a.n2);
    const A eps = (A)a.eps;

    pdl_wait(); /* x and w may be a predecessor's outputs */

    int slot = 0;
    for (int64_t row = group; row < a.n1; row += ngroups) {
        const TX *xr = x + row * a.n2 + col0;
        TW *yr = y + row * a.n2 + col0;
        A ss = 0;
        TX xv[NV][VEC];
        TW wv[NV][VEC];
        if constexpr (fits) {
#pragma unroll
            for (int v = 0; v < NV; v++) {
                const int idx = (v * T + tid) * VEC;
                if (idx < cols)
                    ld_ro(xr + idx, xv[v]);
            }
#pragma unroll
            for (int v = 0; v < NV; v++) {
                const int idx = (v * T + tid) * VEC;
                if (idx < cols)
                    ld_ro(w + col0 + idx, wv[v]);
            }
#pragma unroll
            for (int v = 0; v < NV; v++) {
                const int idx = (v * T + tid) * VEC;
                if (idx < cols) {
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        const A f = to_acc<A>(xv[v][e]);
                        ss += f * f;
                    }
                }
            }
        } else {
            for (int base = tid * VEC; base < cols; base += T * VEC * NV) {
                TX t[NV][VEC];
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const int idx = base + v * T * VEC;
                    if (idx < cols)
                        ld_ro(xr + idx, t[v]);
                }
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const int idx = base + v * T * VEC;
                    if (idx < cols) {
#pragma unroll
                        for (int e = 0; e < VEC; e++) {
                            const A f = to_acc<A>(t[v][e]);
                            ss += f * f;
                        }
                    }
                }
            }
        }
        ss = block_sum(ss, red);
        if (cx > 1) {
            ss = cluster_sum(ss, &slots[slot], cx);
            slot ^= 1;
        }
        /* This block has read its row: let the next kernel start launching now (it still waits
         * for this grid's completion before it touches memory), so its launch overlaps our tail.
         * Repeated triggers are ignored. */
        if constexpr (fits)
            pdl_trigger();
        const A r = rsqrt_acc(ss * inv_n + eps);
        if (crank == 0 && tid == 0)
            inv[row] = r;
        if constexpr (fits) {
#pragma unroll
            for (int v = 0; v < NV; v++) {
                opaque(xv[v]); /* reconvert x below rather than keep its floats live */
                opaque(wv[v]);
            }
#pragma unroll
            for (int v = 0; v < NV; v++) {
                const int idx = (v * T + tid) * VEC;
                if (idx < cols) {
                    TW out[VEC];
#pragma unroll
                    for (int e = 0; e < VEC; e++)
                        out[e] = from_acc<TW>(to_acc<A>(wv[v][e]) * (to_acc<A>(xv[v][e]) * r));
                    st(yr + idx, out);
                }
            }
        } else {
            for (int base = tid * VEC; base < cols; base += T * VEC * NV) {
                TX t[NV][VEC];
                TW u[NV][VEC];
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const int idx = base + v * T * VEC;
                    if (idx < cols) {
                        ld_ro(xr + idx, t[v]);
                        ld_ro(w + col0 + idx, u[v]);
                    }
                }
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const int idx = base + v * T * VEC;
                    if (idx < cols) {
                        TW out[VEC];
#pragma unroll
                        for (int e = 0; e < VEC; e++)
                            out[e] = from_acc<TW>(to_acc<A>(u[v][e]) * (to_acc<A>(t[v][e]) * r));
                        st(yr + idx, out);
                    }
                }
            }
        }
    }
    if (cx > 1)
        cluster_exit_barrier(); /* peers may still read this block's slots */
    pdl_trigger();
}

struct BwdArgs {
    const void *g;
    const void *invvar;
    const void *x;
    const void *w;
    void *gi;
    void *pg;
    int64_t n1, n2;
    int64_t P;      /* part_grad rows */
    int64_t B;      /* rows per part_grad block: ceil(n1 / P) */
    int64_t active; /* blocks that hold rows: ceil(n1 / B); the rest are zeroed by colsum */
    int64_t chunk;
    int cx, cy;
    int stages; /* staged kernel: rows in flight per block (1..4) */
};

/* Dynamic shared memory of the staged backward kernel: w's chunk, the column sums (one per column,
 * in the accumulation type), stages + 1 invvar slots, then `stages` chunks of grad_output and of x.
 */
template <typename TX, typename TW> __host__ __device__ size_t bwd_smem(int64_t chunk, int stages)
{
    using A = typename acc_of<TX>::type;
    return pad16((size_t)chunk * sizeof(TW)) + pad16((size_t)chunk * sizeof(A)) +
           pad16((size_t)(stages + 1) * sizeof(A)) +
           (size_t)stages * (pad16((size_t)chunk * sizeof(TW)) + pad16((size_t)chunk * sizeof(TX)));
}

/* The 16-byte path of the backward pass. The cluster (cx * cy blocks, one of cx, cy is 1) owns
 * part_grad block p; with cx > 1 its blocks split each row's columns, with cy > 1 they split the
 * block's rows. Each thread stages its own vectors of grad_output and x `stages` rows ahead with
 * cp.async, and keeps its columns' sums of grad_output * x * invvar in shared memory, where with
 * cy > 1 the cluster adds them in rank order through distributed shared memory: one fixed order
 * per column, so part_grad is the same bits on every run. */
template <typename TX, typename TW>
__global__ void __launch_bounds__(KCUDA_MAX_THREADS) rms_bwd_staged(BwdArgs a)
{
    using A = typename acc_of<TX>::type;
    constexpr int VEC = 16 / (int)sizeof(TX);
    extern __shared__ __align__(16) unsigned char dyn[];
    __shared__ A red[32];
    __shared__ A slots[2];
    const TW *__restrict__ g = static_cast<const TW *>(a.g); /* y's dtype */
    const TX *__restrict__ x = static_cast<const TX *>(a.x);
    const TW *__restrict__ w = static_cast<const TW *>(a.w);
    const A *__restrict__ inv = static_cast<const A *>(a.invvar);
    TX *__restrict__ gi = static_cast<TX *>(a.gi);
    A *__restrict__ pg = static_cast<A *>(a.pg);
    const int tid = threadIdx.x, T = blockDim.x, cx = a.cx, cy = a.cy, cl = cx * cy;
    const int S = a.stages;
    const int q = cl > 1 ? (int)(blockIdx.x % (unsigned)cl) : 0;
    const int crank = q % cx, srank = q / cx;
    const int64_t col0 = (int64_t)crank * a.chunk;
    const int64_t left = a.n2 - col0;
    const int cols = (int)(left < a.chunk ? (left > 0 ? left : 0) : a.chunk);
    const A inv_n = A(1) / A(a.n2);

    unsigned char *sp = dyn;
    TW *ws = reinterpret_cast<TW *>(sp);
    sp += pad16((size_t)a.chunk * sizeof(TW));
    A *acc = reinterpret_cast<A *>(sp);
    sp += pad16((size_t)a.chunk * sizeof(A));
    A *rs = reinterpret_cast<A *>(sp); /* stages + 1 slots: see below */
    sp += pad16((size_t)(S + 1) * sizeof(A));
    const size_t xstride = pad16((size_t)a.chunk * sizeof(TX)) / sizeof(TX);
    const size_t gstride = pad16((size_t)a.chunk * sizeof(TW)) / sizeof(TW);
    TW *gs = reinterpret_cast<TW *>(sp); /* grad_output has y's dtype */
    TX *xs = reinterpret_cast<TX *>(sp + (size_t)S * gstride * sizeof(TW));

    pdl_wait();

    for (int idx = tid * VEC; idx < cols; idx += T * VEC)
        cp_async<TW, VEC>(ws + idx, w + col0 + idx);

    int slot = 0, rslot_issue = 0;
    const int64_t pstep = gridDim.x / (unsigned)cl;
    for (int64_t p = blockIdx.x / (unsigned)cl; p < a.active; p += pstep) {
        const int64_t rb = p * a.B;
        const int64_t re = rb + a.B < a.n1 ? rb + a.B : a.n1; /* empty when rb >= n1 */
        __syncthreads(); /* every thread has read the last block's invvar slots */
        for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
            A z[VEC];
#pragma unroll
            for (int e = 0; e < VEC; e++)
                z[e] = 0;
            st(acc + idx, z);
        }
        /* Thread 0 stages invvar[row] too; the other threads read it after block_sum's barrier.
         * Slot i mod (S + 1) holds the i-th row's: the slot refilled in iteration i was last read
         * in iteration i - 2, before every thread passed iteration i - 1's barrier. */
        int64_t ahead = rb + srank;
        int st_issue = 0;
        for (int k = 0; k < S - 1; k++, ahead += cy) {
            if (ahead < re) {
                for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
                    cp_async<TW, VEC>(gs + k * gstride + idx, g + ahead * a.n2 + col0 + idx);
                    cp_async<TX, VEC>(xs + k * xstride + idx, x + ahead * a.n2 + col0 + idx);
                }
                if (tid == 0)
                    cp_async<A, 1>(rs + rslot_issue, inv + ahead);
            }
            rslot_issue = rslot_issue == S ? 0 : rslot_issue + 1;
            st_issue = st_issue + 1 == S ? 0 : st_issue + 1;
            cp_commit();
        }
        int stage = 0, rslot = (rslot_issue + (S + 1) - (S - 1)) % (S + 1);
        for (int64_t row = rb + srank; row < re; row += cy) {
            if (ahead < re) {
                for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
                    cp_async<TW, VEC>(gs + st_issue * gstride + idx, g + ahead * a.n2 + col0 + idx);
                    cp_async<TX, VEC>(xs + st_issue * xstride + idx, x + ahead * a.n2 + col0 + idx);
                }
                if (tid == 0)
                    cp_async<A, 1>(rs + rslot_issue, inv + ahead);
            }
            cp_commit();
            ahead += cy;
            rslot_issue = rslot_issue == S ? 0 : rslot_issue + 1;
            st_issue = st_issue + 1 == S ? 0 : st_issue + 1;
            cp_wait(S - 1);
            const TW *gst = gs + stage * gstride;
            const TX *xst = xs + stage * xstride;
            A d = 0;
#pragma unroll 2
            for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
                TW gv[VEC], wv[VEC];
                TX xv[VEC];
                ld_sh(gst + idx, gv);
                ld_sh(xst + idx, xv);
                ld_sh(ws + idx, wv);
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    d += to_acc<A>(wv[e]) * to_acc<A>(gv[e]) * to_acc<A>(xv[e]);
            }
            d = block_sum(d, red); /* its barriers publish rs[rslot] */
            const A r = rs[rslot];
            if (cx > 1) {
                d = cluster_sum(d, &slots[slot], cx);
                slot ^= 1;
            }
            const A c = d * inv_n * r * r;
            TX *gir = gi + row * a.n2 + col0;
#pragma unroll 2
            for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
                TW gv[VEC], wv[VEC];
                TX xv[VEC], out[VEC];
                A av[VEC], of[VEC];
                ld_sh(gst + idx, gv);
                ld_sh(xst + idx, xv);
                ld_sh(ws + idx, wv);
                ld_sh(acc + idx, av);
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    const A gf = to_acc<A>(gv[e]), xf = to_acc<A>(xv[e]);
                    of[e] = r * (to_acc<A>(wv[e]) * gf - xf * c);
                    av[e] += gf * xf * r;
                }
                pack_vec(of, out);
                stg(gir + idx, out);
                st(acc + idx, av);
            }
            stage = stage + 1 == S ? 0 : stage + 1;
            rslot = rslot == S ? 0 : rslot + 1;
        }
        A *pgr = pg + p * a.n2 + col0;
        if (cy == 1) {
            for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
                A av[VEC];
                ld_sh(acc + idx, av);
                stg(pgr + idx, av);
            }
        } else {
            cg::cluster_group cluster = cg::this_cluster();
            cluster.sync();
            for (int j = srank * T + tid; j < cols; j += T * cy) {
                A s = 0;
                for (int k = 0; k < cy; k++)
                    s += *cluster.map_shared_rank(acc + j, k);
                pgr[j] = s;
            }
            cluster.sync(); /* acc is zeroed for the next block, or freed at exit */
        }
    }
    cp_commit();
    cp_wait(0);
    if (cl > 1)
        cluster_exit_barrier();
    pdl_trigger();
}

/* The cluster (cx * cy blocks, one of cx, cy is 1) owns part_grad block p; with cx > 1 its blocks
 * split each row's columns, with cy > 1 they split the block's rows and add their column sums in
 * rank order through distributed shared memory. Each thread keeps its columns' sums of
 * grad_output * x * invvar in registers across rows, and prefetches the next row while reducing
 * the current one. */
template <typename TX, typename TW, int VEC, int NV, bool STREAM>
__global__ void __launch_bounds__(KCUDA_MAX_THREADS) rms_bwd_kernel(BwdArgs a)
{
    using A = typename acc_of<TX>::type;
    extern __shared__ __align__(16) unsigned char dyn[];
    __shared__ A red[32];
    __shared__ A slots[2];
    const TW *__restrict__ g = static_cast<const TW *>(a.g); /* y's dtype */
    const TX *__restrict__ x = static_cast<const TX *>(a.x);
    const TW *__restrict__ w = static_cast<const TW *>(a.w);
    const A *__restrict__ inv = static_cast<const A *>(a.invvar);
    TX *__restrict__ gi = static_cast<TX *>(a.gi);
    A *__restrict__ pg = static_cast<A *>(a.pg);
    const int tid = threadIdx.x, T = blockDim.x, cx = a.cx, cy = a.cy, cl = cx * cy;
    const int q = cl > 1 ? (int)(blockIdx.x % (unsigned)cl) : 0;
    const int crank = q % cx, srank = q / cx;
    const int64_t col0 = (int64_t)crank * a.chunk;
    const int64_t left = a.n2 - col0;
    const int cols = (int)(left < a.chunk ? (left > 0 ? left : 0) : a.chunk);
    constexpr bool fits = !STREAM; /* the host checked that the chunk fits */
    const A inv_n = A(1) / A(a.n2);

    pdl_wait();

    TW wv[NV][VEC]; /* packed: converted at each use (see opaque()) */
    if constexpr (fits) {
#pragma unroll
        for (int v = 0; v < NV; v++) {
            const int idx = (v * T + tid) * VEC;
            if (idx < cols)
                ld_ro(w + col0 + idx, wv[v]);
        }
    }

    int slot = 0;
    const int64_t pstep = gridDim.x / (unsigned)cl;
    for (int64_t p = blockIdx.x / (unsigned)cl; p < a.active; p += pstep) {
        const int64_t rb = p * a.B;
        const int64_t re = rb + a.B < a.n1 ? rb + a.B : a.n1; /* empty when rb >= n1 */
        A *pgr = pg + p * a.n2 + col0;
        if constexpr (fits) {
            A acc[NV][VEC];
#pragma unroll
            for (int v = 0; v < NV; v++)
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    acc[v][e] = 0;
            TW gc[NV][VEC];
            TX xc[NV][VEC];
            A rc = 0;
            int64_t row = rb + srank;
            if (row < re) {
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const int idx = (v * T + tid) * VEC;
                    if (idx < cols) {
                        ld_ro(g + row * a.n2 + col0 + idx, gc[v]);
                        ld_ro(x + row * a.n2 + col0 + idx, xc[v]);
                    }
                }
                rc = __ldg(inv + row);
            }
            while (row < re) {
                const int64_t nxt = row + cy;
                TW gn[NV][VEC];
                TX xn[NV][VEC];
                A rn = 0;
                if (nxt < re) {
#pragma unroll
                    for (int v = 0; v < NV; v++) {
                        const int idx = (v * T + tid) * VEC;
                        if (idx < cols) {
                            ld_ro(g + nxt * a.n2 + col0 + idx, gn[v]);
                            ld_ro(x + nxt * a.n2 + col0 + idx, xn[v]);
                        }
                    }
                    rn = __ldg(inv + nxt);
                }
                A d = 0;
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    opaque(wv[v]);
                    const int idx = (v * T + tid) * VEC;
                    if (idx < cols) {
#pragma unroll
                        for (int e = 0; e < VEC; e++)
                            d += to_acc<A>(wv[v][e]) * to_acc<A>(gc[v][e]) * to_acc<A>(xc[v][e]);
                    }
                }
                d = block_sum(d, red);
                if (cx > 1) {
                    d = cluster_sum(d, &slots[slot], cx);
                    slot ^= 1;
                }
                const A c = d * inv_n * rc * rc;
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    opaque(wv[v]);
                    opaque(gc[v]);
                    opaque(xc[v]);
                }
                TX *gir = gi + row * a.n2 + col0;
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const int idx = (v * T + tid) * VEC;
                    if (idx < cols) {
                        TX out[VEC];
#pragma unroll
                        for (int e = 0; e < VEC; e++) {
                            const A gv = to_acc<A>(gc[v][e]), xv = to_acc<A>(xc[v][e]);
                            out[e] = from_acc<TX>(rc * (to_acc<A>(wv[v][e]) * gv - xv * c));
                            acc[v][e] += gv * xv * rc;
                        }
                        st(gir + idx, out);
                    }
                }
#pragma unroll
                for (int v = 0; v < NV; v++)
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        gc[v][e] = gn[v][e];
                        xc[v][e] = xn[v][e];
                    }
                rc = rn;
                row = nxt;
            }
            if (cy == 1) {
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const int idx = (v * T + tid) * VEC;
                    if (idx < cols)
                        st(pgr + idx, acc[v]);
                }
            } else {
                /* Add the cy blocks' column sums in rank order: every column's sum has one
                 * fixed shape, so part_grad is the same bits on every run. */
                cg::cluster_group cluster = cg::this_cluster();
                A *buf = reinterpret_cast<A *>(dyn);
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const int idx = (v * T + tid) * VEC;
                    if (idx < cols)
                        st(buf + idx, acc[v]);
                }
                cluster.sync();
                for (int j = srank * T + tid; j < cols; j += T * cy) {
                    A s = 0;
                    for (int k = 0; k < cy; k++)
                        s += *cluster.map_shared_rank(buf + j, k);
                    pgr[j] = s;
                }
                cluster.sync(); /* buf is rewritten by the next block, or freed at exit */
            }
        } else {
            /* Streaming: the chunk does not fit in registers. cy == 1 here (the host ensures it),
             * so this block alone owns part_grad[p][its columns] and accumulates there. */
            if (rb >= re) {
                for (int j = tid; j < cols; j += T)
                    pgr[j] = 0;
            }
            for (int64_t row = rb; row < re; row++) {
                const TW *gr = g + row * a.n2 + col0;
                const TX *xr = x + row * a.n2 + col0;
                TX *gir = gi + row * a.n2 + col0;
                const A r = __ldg(inv + row);
                A d = 0;
                for (int base = tid * VEC; base < cols; base += T * VEC * NV) {
                    TW tg[NV][VEC];
                    TX tx[NV][VEC];
                    TW tw[NV][VEC];
#pragma unroll
                    for (int v = 0; v < NV; v++) {
                        const int idx = base + v * T * VEC;
                        if (idx < cols) {
                            ld_ro(gr + idx, tg[v]);
                            ld_ro(xr + idx, tx[v]);
                            ld_ro(w + col0 + idx, tw[v]);
                        }
                    }
#pragma unroll
                    for (int v = 0; v < NV; v++) {
                        const int idx = base + v * T * VEC;
                        if (idx < cols) {
#pragma unroll
                            for (int e = 0; e < VEC; e++)
                                d +=
                                    to_acc<A>(tw[v][e]) * to_acc<A>(tg[v][e]) * to_acc<A>(tx[v][e]);
                        }
                    }
                }
                d = block_sum(d, red);
                if (cx > 1) {
                    d = cluster_sum(d, &slots[slot], cx);
                    slot ^= 1;
                }
                const A c = d * inv_n * r * r;
                const bool first = row == rb;
                for (int base = tid * VEC; base < cols; base += T * VEC * NV) {
                    TW tg[NV][VEC];
                    TX tx[NV][VEC];
                    TW tw[NV][VEC];
                    A tp[NV][VEC];
#pragma unroll
                    for (int v = 0; v < NV; v++) {
                        const int idx = base + v * T * VEC;
                        if (idx < cols) {
                            ld_ro(gr + idx, tg[v]);
                            ld_ro(xr + idx, tx[v]);
                            ld_ro(w + col0 + idx, tw[v]);
                            if (!first)
                                ld_rw(pgr + idx, tp[v]);
                        }
                    }
#pragma unroll
                    for (int v = 0; v < NV; v++) {
                        const int idx = base + v * T * VEC;
                        if (idx < cols) {
                            TX out[VEC];
#pragma unroll
                            for (int e = 0; e < VEC; e++) {
                                const A gv = to_acc<A>(tg[v][e]), xv = to_acc<A>(tx[v][e]);
                                out[e] = from_acc<TX>(r * (to_acc<A>(tw[v][e]) * gv - xv * c));
                                const A part = gv * xv * r;
                                tp[v][e] = first ? part : tp[v][e] + part;
                            }
                            st(gir + idx, out);
                            st(pgr + idx, tp[v]);
                        }
                    }
                }
            }
        }
    }
    if (cl > 1)
        cluster_exit_barrier();
    pdl_trigger();
}

/* grad_weight[j] = the sum over p of part_grad[p][j]. Lane (lx, ly) of a 32 x 8 block adds the
 * rows p = ly, ly + 8, ... of column j in order, then row ly = 0 adds the eight partial sums in
 * order: one fixed shape per column, so the result is deterministic. The blocks from `active` on
 * hold no rows: this kernel writes their zeros (the main kernel launches no block for them) and
 * leaves them out of the sum, where they would add nothing. */
template <typename A, typename TW>
__global__ void __launch_bounds__(256) rms_colsum_kernel(A *__restrict__ pg, TW *__restrict__ gw,
                                                         int64_t P, int64_t active, int64_t n2)
{
    __shared__ A part[8][33];
    const int lx = threadIdx.x & 31, ly = threadIdx.x >> 5;
    pdl_wait();
    for (int64_t j0 = (int64_t)blockIdx.x * 32; j0 < n2; j0 += (int64_t)gridDim.x * 32) {
        const int64_t j = j0 + lx;
        A s = 0;
        if (j < n2) {
#pragma unroll 4
            for (int64_t p = ly; p < active; p += 8)
                s += pg[p * n2 + j];
            for (int64_t p = active + ly; p < P; p += 8)
                pg[p * n2 + j] = 0;
        }
        part[ly][lx] = s;
        __syncthreads();
        if (ly == 0 && j < n2) {
            A t = 0;
#pragma unroll
            for (int k = 0; k < 8; k++)
                t += part[k][lx];
            gw[j] = from_acc<TW>(t);
        }
        __syncthreads();
    }
    pdl_trigger();
}

/* ---- the split backward: few long rows over the whole GPU, in two kernels ----------------------
 * Block b owns columns [b * chunk, b * chunk + cols) of every row (n1 <= KCUDA_SPLIT_ROWS). The
 * dot kernel writes block b's partial dot(w * grad_output, x) of each row, and the finish kernel
 * adds the nb partials of a row in one fixed order (so every block gets the same bits), then
 * writes grad_input, part_grad and grad_weight of its columns. The partials travel through
 * part_grad: the dot kernel writes a copy of all of them into the part_grad cells of every block's
 * own columns, so each finishing block reads only cells that it alone overwrites afterwards. A
 * block's partials of all rows lie side by side in every copy (cell b * n1 + i), so its stores
 * are 4 * n1 contiguous bytes per copy rather than n1 cells nb apart.
 * The dot kernel lets the finish kernel launch (PDL) as soon as each of its blocks has passed its
 * own wait: the finish kernel then loads its first grad_output, x, w and invvar while the partials
 * are still being computed. Those are inputs of the call, complete before any dot block passed its
 * wait, and only the partials are waited for. */

#define KCUDA_SPLIT_ROWS    16
#define KCUDA_SPLIT_THREADS 128

struct SplitArgs {
    const void *g;
    const void *invvar;
    const void *x;
    const void *w;
    void *gi;
    void *gw;
    void *pg;
    int64_t n1, n2, P, B, active;
    int64_t chunk; /* columns per block, a multiple of the vector width */
    int64_t nb;    /* blocks */
};

/* Where block b's partial of row i lies in the copy that block `owner` reads: cell s = b * n1 + i
 * of the owner's columns of part_grad, row by row. s < nb * n1 <= 2 * SMs * 16 and a block's
 * columns are fewer than 2^31 (chunk is at most n2 / SMs), so 32-bit division suffices. */
template <typename A>
__device__ __forceinline__ A *split_cell(const SplitArgs &a, A *pg, int owner, int i, int b)
{
    const int64_t c0 = (int64_t)owner * a.chunk;
    const unsigned cw = (unsigned)(a.n2 - c0 < a.chunk ? a.n2 - c0 : a.chunk);
    const unsigned s = (unsigned)(b * (int)a.n1 + i);
    return pg + (int64_t)(s / cw) * a.n2 + c0 + s % cw;
}

template <typename TX, typename TW>
__global__ void __launch_bounds__(KCUDA_SPLIT_THREADS) rms_bwd_split_dot(SplitArgs a)
{
    using A = typename acc_of<TX>::type;
    constexpr int VEC = 16 / (int)sizeof(TX);
    constexpr int R = 4; /* rows whose loads are in flight together */
    __shared__ A red[KCUDA_SPLIT_THREADS / 32][R];
    __shared__ A part[KCUDA_SPLIT_ROWS];
    const TW *__restrict__ g = static_cast<const TW *>(a.g);
    const TX *__restrict__ x = static_cast<const TX *>(a.x);
    const TW *__restrict__ w = static_cast<const TW *>(a.w);
    A *__restrict__ pg = static_cast<A *>(a.pg);
    const int tid = threadIdx.x, T = blockDim.x, lane = tid & 31, wid = tid >> 5, nw = T >> 5;
    const int64_t b = blockIdx.x, col0 = b * a.chunk;
    const int cols = (int)(a.n2 - col0 < a.chunk ? a.n2 - col0 : a.chunk);

    pdl_wait();
    /* Every block has passed its wait once the finish kernel launches: see the section comment. */
    pdl_trigger();

    for (int64_t i0 = 0; i0 < a.n1; i0 += R) {
        A d[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            d[r] = 0;
        for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
            TW wv[VEC], gv[R][VEC];
            TX xv[R][VEC];
            ld_ro(w + col0 + idx, wv);
#pragma unroll
            for (int r = 0; r < R; r++)
                if (i0 + r < a.n1) {
                    ld_ro(g + (i0 + r) * a.n2 + col0 + idx, gv[r]);
                    ld_ro(x + (i0 + r) * a.n2 + col0 + idx, xv[r]);
                }
#pragma unroll
            for (int r = 0; r < R; r++)
                if (i0 + r < a.n1) {
#pragma unroll
                    for (int e = 0; e < VEC; e++)
                        d[r] += to_acc<A>(wv[e]) * to_acc<A>(gv[r][e]) * to_acc<A>(xv[r][e]);
                }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const A v = warp_sum(d[r]);
            if (lane == 0)
                red[wid][r] = v;
        }
        __syncthreads();
        if (tid < R && i0 + tid < a.n1) {
            A t = 0;
            for (int k = 0; k < nw; k++)
                t += red[k][tid];
            part[i0 + tid] = t;
        }
        __syncthreads();
    }
    /* One copy for every block's columns; neighbouring threads write neighbouring cells. */
    const int n = (int)(a.nb * a.n1), n1 = (int)a.n1;
    for (int q = tid; q < n; q += T) {
        const int owner = q / n1, i = q - owner * n1;
        *split_cell(a, pg, owner, i, (int)b) = part[i];
    }
}

template <typename TX, typename TW>
__global__ void __launch_bounds__(KCUDA_SPLIT_THREADS) rms_bwd_split_finish(SplitArgs a)
{
    using A = typename acc_of<TX>::type;
    constexpr int VEC = 16 / (int)sizeof(TX);
    constexpr int R = 4;
    __shared__ A dot[KCUDA_SPLIT_ROWS];
    const TW *__restrict__ g = static_cast<const TW *>(a.g);
    const TX *__restrict__ x = static_cast<const TX *>(a.x);
    const TW *__restrict__ w = static_cast<const TW *>(a.w);
    const A *__restrict__ inv = static_cast<const A *>(a.invvar);
    TX *__restrict__ gi = static_cast<TX *>(a.gi);
    TW *__restrict__ gw = static_cast<TW *>(a.gw);
    A *__restrict__ pg = static_cast<A *>(a.pg);
    const int tid = threadIdx.x, T = blockDim.x, lane = tid & 31, wid = tid >> 5, nw = T >> 5;
    const int64_t b = blockIdx.x, col0 = b * a.chunk;
    const int cols = (int)(a.n2 - col0 < a.chunk ? a.n2 - col0 : a.chunk);
    const A inv_n = A(1) / A(a.n2);
    const int n1 = (int)a.n1, nb = (int)a.nb, B = (int)a.B;

    /* The first vector's inputs, before the wait: they are the call's inputs, not the dot
     * kernel's output (see the section comment), so their latency overlaps the dot kernel. */
    const int idx0 = tid * VEC;
    TW wv0[VEC], gv0[R][VEC];
    TX xv0[R][VEC];
    A rv0[R];
    if (idx0 < cols) {
        ld_ro(w + col0 + idx0, wv0);
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < n1) {
                ld_ro(g + r * a.n2 + col0 + idx0, gv0[r]);
                ld_ro(x + r * a.n2 + col0 + idx0, xv0[r]);
                rv0[r] = inv[r];
            }
    }

    pdl_wait(); /* the dot kernel's partials */

    /* Row i's dot: lane l adds the partials b = l, l + 32, ... in order, then the warp's fixed
     * butterfly: the same bits in every block. */
    for (int i = wid; i < n1; i += nw) {
        A s = 0;
        for (int k = lane; k < nb; k += 32)
            s += *split_cell(a, pg, (int)b, i, k);
        s = warp_sum(s);
        if (lane == 0)
            dot[i] = s;
    }
    __syncthreads(); /* every read of this block's copy is done before part_grad is written */

    for (int idx = tid * VEC; idx < cols; idx += T * VEC) {
        TW wv[VEC];
        const bool first = idx == idx0;
        if (first) {
#pragma unroll
            for (int e = 0; e < VEC; e++)
                wv[e] = wv0[e];
        } else {
            ld_ro(w + col0 + idx, wv);
        }
        A acc[VEC], tot[VEC];
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            acc[e] = 0;
            tot[e] = 0;
        }
        for (int64_t i0 = 0; i0 < a.n1; i0 += R) {
            TW gv[R][VEC];
            TX xv[R][VEC];
            A rv[R];
            if (first && i0 == 0) {
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (r < n1) {
#pragma unroll
                        for (int e = 0; e < VEC; e++) {
                            gv[r][e] = gv0[r][e];
                            xv[r][e] = xv0[r][e];
                        }
                        rv[r] = rv0[r];
                    }
            } else {
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (i0 + r < a.n1) {
                        ld_ro(g + (i0 + r) * a.n2 + col0 + idx, gv[r]);
                        ld_ro(x + (i0 + r) * a.n2 + col0 + idx, xv[r]);
                        rv[r] = inv[i0 + r];
                    }
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int i = (int)i0 + r;
                if (i < n1) {
                    const A rr = rv[r];
                    const A c = dot[i] * inv_n * rr * rr;
                    TX out[VEC];
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        const A gf = to_acc<A>(gv[r][e]), xf = to_acc<A>(xv[r][e]);
                        out[e] = from_acc<TX>(rr * (to_acc<A>(wv[e]) * gf - xf * c));
                        acc[e] += gf * xf * rr;
                    }
                    st(gi + i * a.n2 + col0 + idx, out);
                    const int p = i / B;
                    if (i + 1 == n1 || i + 1 == (p + 1) * B) { /* the last row of block p */
                        st(pg + p * a.n2 + col0 + idx, acc);
#pragma unroll
                        for (int e = 0; e < VEC; e++) {
                            tot[e] += acc[e];
                            acc[e] = 0;
                        }
                    }
                }
            }
        }
        A z[VEC];
#pragma unroll
        for (int e = 0; e < VEC; e++)
            z[e] = 0;
        for (int64_t p = a.active; p < a.P; p++)
            st(pg + p * a.n2 + col0 + idx, z);
        TW o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; e++)
            o[e] = from_acc<TW>(tot[e]);
        st(gw + col0 + idx, o);
    }
    pdl_trigger();
}

#ifndef KCUDA_KERNELS_ONLY /* defined by register-usage experiments */
/* ---- host side ------------------------------------------------------------------------------- */

struct Layout {
    int mode; /* MODE_* */
    int vec, nv, threads, cx, cy, stages;
    int64_t chunk;
    long long grid;
    size_t smem;
};

/* MODE_STAGED_CP: the forward's staged kernel with per-thread cp.async copies instead of bulk
 * copies (an override and report only; one stage always runs it). */
enum {
    MODE_STAGED = 0,
    MODE_REGS = 1,
    MODE_STREAM = 2,
    MODE_SPLIT = 3,
    MODE_STAGED_CP = 4,
    MODE_ROWS = 5
};

/* The most rows in flight per block of the persistent forward kernel. */
#define KCUDA_FWD_STAGES 4

#define KCUDA_SMEM_MAX (226 * 1024) /* 227 KB per block, less the static shared memory */

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int check_desc(const baton_exec_ctx *ctx, const char *what, void **buffers, int nbuf,
                      const char *opaque, size_t len, baton_rms_norm_desc *d, int bwd)
{
    if (!opaque || len != sizeof(baton_rms_norm_desc))
        return fail(ctx, BATON_EINVAL,
                    "%s: the descriptor is %zu bytes, expected %zu (baton_rms_norm_desc: n1, n2, "
                    "eps, x_dtype, w_dtype, part_grad_size)",
                    what, opaque ? len : (size_t)0, sizeof(baton_rms_norm_desc));
    memcpy(d, opaque, sizeof *d);
    if (d->n1 < 1 || d->n2 < 1)
        return fail(ctx, BATON_EINVAL,
                    "%s: zero-sized shape (n1 = %lld rows, n2 = %lld columns); both must be >= 1",
                    what, (long long)d->n1, (long long)d->n2);
    if (d->n1 > INT64_MAX / 8 / d->n2)
        return fail(ctx, BATON_EINVAL, "%s: n1 * n2 = %lld * %lld overflows", what,
                    (long long)d->n1, (long long)d->n2);
    if (!dtype_is_float(d->x_dtype) || !dtype_is_float(d->w_dtype))
        return fail(ctx, BATON_EINVAL,
                    "%s: unknown dtype code (x_dtype %d, w_dtype %d); RMSNorm takes 1 (bf16), "
                    "2 (f16), 3 (f32) or 4 (f64)",
                    what, (int)d->x_dtype, (int)d->w_dtype);
    if (!(d->eps >= 0.0) || !isfinite(d->eps))
        return fail(ctx, BATON_EINVAL, "%s: eps = %g; it must be finite and >= 0", what, d->eps);
    if (bwd && d->part_grad_size < 1)
        return fail(ctx, BATON_EINVAL, "%s: part_grad_size = %lld; it must be >= 1", what,
                    (long long)d->part_grad_size);
    if (!buffers)
        return fail(ctx, BATON_EINVAL, "%s: buffers is NULL", what);
    for (int i = 0; i < nbuf; i++)
        if (!buffers[i])
            return fail(ctx, BATON_EINVAL, "%s: buffer %d is NULL", what, i);
    return 0;
}

static int check_override(const baton_exec_ctx *ctx, const char *what, const kcuda_rms_cfg *o)
{
    if (!o)
        return 0;
    if (o->threads < 0 || o->threads % 32 || o->threads > KCUDA_MAX_THREADS)
        return fail(ctx, BATON_EINVAL, "%s: override threads = %d (a multiple of 32, <= %d)", what,
                    o->threads, KCUDA_MAX_THREADS);
    if (o->cx < 0 || o->cx > 16 || o->cy < 0 || o->cy > 16 || (o->cx > 1 && o->cy > 1))
        return fail(ctx, BATON_EINVAL, "%s: override cx = %d, cy = %d (0..16, not both > 1)", what,
                    o->cx, o->cy);
    if (o->vec != 0 && o->vec != 1)
        return fail(ctx, BATON_EINVAL, "%s: override vec = %d (0 or 1)", what, o->vec);
    if (o->stages < 0 || o->stages > KCUDA_FWD_BULK_STAGES)
        return fail(ctx, BATON_EINVAL, "%s: override stages = %d (0..%d)", what, o->stages,
                    KCUDA_FWD_BULK_STAGES);
    if (o->nv != 0 && o->nv != 2 && o->nv != 4 && o->nv != 8)
        return fail(ctx, BATON_EINVAL, "%s: override nv = %d (0, 2, 4 or 8)", what, o->nv);
    if (o->grid < 0 || o->mode < 0 || o->mode > MODE_ROWS)
        return fail(ctx, BATON_EINVAL, "%s: override grid = %lld, mode = %d", what, o->grid,
                    o->mode);
    return 0;
}

/* Blocks per row: few rows leave most SMs idle, so a long row is split over a cluster. */
static int choose_cx(int64_t n1, int64_t n2, int sms, int max_cx, const kcuda_rms_cfg *o)
{
    if (o && o->cx)
        return o->cx;
    const int64_t want_blocks = 2 * (int64_t)sms;
    if (n1 >= want_blocks)
        return 1;
    int64_t cx = ceil_div(want_blocks, n1);
    const int64_t by_len = n2 / 4096; /* at least 4096 columns per block */
    if (cx > by_len)
        cx = by_len;
    if (cx > max_cx)
        cx = max_cx;
    return cx < 1 ? 1 : (int)cx;
}

/* Splits a row over cx blocks and picks the threads: four 16-byte vectors per thread in the
 * staged kernels (they hold nothing in registers, so more blocks fit per SM), NV = 4 vectors in the
 * register kernels. `smem_of` gives the staged kernel's shared memory for a chunk; when it does
 * not fit, the 16-byte path streams. */
template <typename SmemOf>
static void shape_chunk(Layout *L, int64_t n2, int cx, int vx, const kcuda_rms_cfg *o,
                        int default_stages, SmemOf smem_of, int per = 4)
{
    L->chunk = ceil_div(ceil_div(n2, cx), L->vec) * L->vec;
    L->cx = (int)ceil_div(n2, L->chunk);
    const int64_t nvec = ceil_div(L->chunk, L->vec);
    L->nv = 4;
    L->stages = 0;
    L->smem = 0;
    if (L->vec != vx)
        per = 4;
    if (L->vec == vx) {
        L->stages = (o && o->stages) ? o->stages : default_stages;
        while (L->stages > 1 && smem_of(L->chunk, L->stages) > KCUDA_SMEM_MAX)
            L->stages--;
        L->mode = smem_of(L->chunk, L->stages) <= KCUDA_SMEM_MAX ? MODE_STAGED : MODE_STREAM;
        if (o && o->mode == 2)
            L->mode = MODE_STREAM;
        if (L->mode == MODE_STAGED) {
            L->smem = smem_of(L->chunk, L->stages);
            L->nv = 0;
        } else {
            L->stages = 0;
        }
    } else {
        L->mode = MODE_REGS;
    }
    if (L->mode == MODE_STREAM && L->vec > 1)
        L->nv = 2; /* the 16-byte streaming kernels hold 2 vectors per thread and step */
    int64_t t = (o && o->threads) ? o->threads : ceil_div(ceil_div(nvec, per), 32) * 32;
    if (!(o && o->threads) && t < 64 && nvec > 32)
        t = 64;
    if (t > KCUDA_MAX_THREADS)
        t = KCUDA_MAX_THREADS;
    if (t < 32)
        t = 32;
    L->threads = (int)t;
    if (L->mode == MODE_REGS && L->chunk > t * L->nv * L->vec)
        L->mode = MODE_STREAM;
}

template <typename T> static size_t vec_align(int vec)
{
    const size_t b = sizeof(T) * (size_t)vec;
    return b >= 16 ? 16 : b;
}

static void report(const Layout &L, kcuda_rms_cfg *chosen)
{
    if (!chosen)
        return;
    chosen->threads = L.threads;
    chosen->nv = L.mode == MODE_STAGED ? 0 : L.nv;
    chosen->vec = L.vec;
    chosen->cx = L.cx;
    chosen->cy = L.cy;
    chosen->stages = L.stages;
    chosen->mode = L.mode;
    chosen->grid = L.grid;
    chosen->smem = (long long)L.smem;
}

/* Prepares a kernel for its launch: the non-portable cluster size and the shared memory above
 * 48 KB. Returns 1 when a cluster of more than 8 blocks cannot be scheduled (the caller retries
 * with 8), -1 with the reason in errbuf when an attribute cannot be set, 0 when ready. Each
 * attribute is set once per device and kernel (to the most any layout asks for), and the cluster
 * answer is asked once: a block of any layout fits on one SM, so whether 16 SMs of a GPC can take
 * a cluster does not depend on the layout. */
template <typename K>
static int prepare(K kernel, const Layout &L, const baton_exec_ctx *ctx, const char *what,
                   bool may_shrink)
{
    const int cl = L.cx * L.cy;
    cudaError_t e;
    FnFacts *f = fn_facts((const void *)kernel);
    const int dev = device_of(ctx);
    /* The staged kernels want all of the SM's shared memory for their stages: prefer the largest
     * carveout (more blocks per SM) and allow above 48 KB per block (with the static part). */
    if (L.smem > 0 && !facts_has(f, &FnFacts::smem_set, dev)) {
        if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      cudaSharedmemCarveoutMaxShared)) != cudaSuccess ||
            (e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      KCUDA_SMEM_MAX)) != cudaSuccess) {
            fail(ctx, BATON_ECUDA,
                 "cudaFuncSetAttribute(%s, %zu bytes of shared memory) failed: %s", what, L.smem,
                 cudaGetErrorString(e));
            return -1;
        }
        facts_set(f, &FnFacts::smem_set, dev);
    }
    if (cl <= 8)
        return 0;
    if (!facts_has(f, &FnFacts::np_set, dev)) {
        if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) !=
            cudaSuccess) {
            if (may_shrink) {
                cudaGetLastError();
                return 1;
            }
            fail(ctx, BATON_ECUDA, "cudaFuncSetAttribute(%s, non-portable cluster) failed: %s",
                 what, cudaGetErrorString(e));
            return -1;
        }
        facts_set(f, &FnFacts::np_set, dev);
    }
    if (!may_shrink)
        return 0;
    if (facts_has(f, &FnFacts::cl_known, dev))
        return facts_has(f, &FnFacts::cl_ok, dev) ? 0 : 1;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((unsigned)L.grid, 1, 1);
    cfg.blockDim = dim3((unsigned)L.threads, 1, 1);
    cfg.dynamicSmemBytes = L.smem;
    cfg.stream = (cudaStream_t)ctx->stream;
    cudaLaunchAttribute at;
    memset(&at, 0, sizeof at);
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = (unsigned)cl;
    at.val.clusterDim.y = 1;
    at.val.clusterDim.z = 1;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
        cudaGetLastError();
        return 1; /* not remembered: it may be a passing failure */
    }
    if (n >= 1)
        facts_set(f, &FnFacts::cl_ok, dev);
    facts_set(f, &FnFacts::cl_known, dev);
    return n < 1;
}

/* ---- forward ---- */

/* The forward kernels' arguments: buffers x, weight | y, invvar, laid out as L says. */
static FwdArgs fwd_args(void **buffers, const baton_rms_norm_desc &d, const Layout &L)
{
    FwdArgs a;
    memset(&a, 0, sizeof a);
    a.x = buffers[0];
    a.w = buffers[1];
    a.y = buffers[2];
    a.invvar = buffers[3];
    a.n1 = d.n1;
    a.n2 = d.n2;
    a.eps = d.eps;
    a.chunk = L.chunk;
    a.cx = L.cx;
    a.stages = L.stages;
    return a;
}

template <typename TX, typename TW> static void *fwd_kernel_for(const Layout &L, bool cp)
{
    constexpr int VX = 16 / (int)sizeof(TX);
    if (L.mode == MODE_STAGED)
        return L.stages >= 2 && !cp ? (void *)rms_fwd_bulk<TX, TW> : (void *)rms_fwd_staged<TX, TW>;
    if (L.mode == MODE_REGS && L.vec == VX)
        return (void *)rms_fwd_kernel<TX, TW, VX, 4, false>;
    if (L.vec == 1)
        return L.mode == MODE_STREAM ? (void *)rms_fwd_kernel<TX, TW, 1, 4, true>
                                     : (void *)rms_fwd_kernel<TX, TW, 1, 4, false>;
    return (void *)rms_fwd_kernel<TX, TW, VX, 2, true>;
}

template <typename TX, typename TW, int NV> static void *fwd_rows_kernel()
{
    if constexpr (sizeof(TX) <= 4 && sizeof(TW) <= 4)
        return (void *)rms_fwd_rows<TX, TW, NV>;
    else
        return NULL;
}

/* Launches rms_fwd_rows: NV vectors per thread, the fewest threads that cover the row, and as
 * many blocks as are resident, evened out so that every block gets the same number of rows. */
template <typename TX, typename TW>
static int fwd_rows(const baton_exec_ctx *ctx, void **buffers, const baton_rms_norm_desc &d,
                    const kcuda_rms_cfg *o, kcuda_rms_cfg *chosen, int sms)
{
    constexpr int VX = 16 / (int)sizeof(TX);
    const int64_t nvec = ceil_div(d.n2, VX);
    /* Measured on an H200 (bench_kernels --sweep): 2-byte x runs best at 2 vectors per thread
     * (8 at 8192 columns is as fast), 4-byte x at 4; longer rows take more per thread. */
    int nv = (o && o->nv) ? o->nv : sizeof(TX) == 2 ? 2 : 4;
    while (nv < 8 && nvec > (int64_t)nv * KCUDA_MAX_THREADS)
        nv *= 2;
    int64_t t = ceil_div(ceil_div(nvec, nv), 32) * 32;
    if (o && o->threads) {
        if ((int64_t)o->threads * nv < nvec)
            return fail(ctx, BATON_EINVAL,
                        "rms_norm_fwd: override threads = %d with nv = %d cannot hold %lld vectors",
                        o->threads, nv, (long long)nvec);
        t = o->threads;
    }
    if (t < 32)
        t = 32;
    void *k = nv == 2   ? fwd_rows_kernel<TX, TW, 2>()
              : nv == 4 ? fwd_rows_kernel<TX, TW, 4>()
                        : fwd_rows_kernel<TX, TW, 8>();
    Layout L;
    memset(&L, 0, sizeof L);
    L.mode = MODE_ROWS;
    L.vec = VX;
    L.nv = nv;
    L.threads = (int)t;
    L.cx = L.cy = 1;
    L.chunk = d.n2;
    long long groups = d.n1;
    if (o && o->grid) {
        groups = o->grid;
    } else {
        int per_sm = 0;
        cudaError_t e = occupancy(ctx, k, L.threads, 0, &per_sm);
        if (e != cudaSuccess)
            return fail(ctx, BATON_ECUDA,
                        "cudaOccupancyMaxActiveBlocksPerMultiprocessor(rms_norm_fwd) failed: %s",
                        cudaGetErrorString(e));
        const long long resident = (long long)(per_sm > 0 ? per_sm : 1) * sms;
        if (groups > resident) {
            const long long per = (groups + resident - 1) / resident;
            groups = (groups + per - 1) / per;
        }
    }
    L.grid = groups;
    const FwdArgs a = fwd_args(buffers, d, L);
    report(L, chosen);
    return launch(ctx, "rms_norm_fwd", (void (*)(FwdArgs))k, (unsigned)L.grid, (unsigned)L.threads,
                  0, 1, a);
}

template <typename TX, typename TW>
static int fwd_typed(const baton_exec_ctx *ctx, void **buffers, const baton_rms_norm_desc &d,
                     const kcuda_rms_cfg *o, kcuda_rms_cfg *chosen)
{
    constexpr int VX = 16 / (int)sizeof(TX);
    Layout L;
    memset(&L, 0, sizeof L);
    const bool vec_ok = d.n2 % VX == 0 && aligned(buffers[0], 16) &&
                        aligned(buffers[1], vec_align<TW>(VX)) &&
                        aligned(buffers[2], vec_align<TW>(VX));
    L.vec = (vec_ok && !(o && o->vec == 1)) ? VX : 1;
    L.cy = 1;
    const int sms = sm_count(ctx);
    /* Decode rows (few short rows): one block per row holding its row in registers, four 16-byte
     * vectors of x and w per thread, no staging; a graph of them runs near the empty-kernel floor.
     */
    const bool no_override =
        !o || !(o->mode || o->threads || o->stages || o->grid || o->cx || o->vec);
    const int64_t nvec_row = ceil_div(d.n2, VX);
    if (no_override && L.vec == VX && d.n1 <= 2LL * sms && nvec_row <= 4LL * KCUDA_MAX_THREADS) {
        L.mode = MODE_REGS;
        L.nv = 4;
        L.cx = 1;
        L.stages = 0;
        L.chunk = d.n2;
        L.threads = (int)(ceil_div(ceil_div(nvec_row, 4), 32) * 32);
        L.grid = d.n1;
        L.smem = 0;
        const FwdArgs a = fwd_args(buffers, d, L);
        report(L, chosen);
        return launch(ctx, "rms_norm_fwd", rms_fwd_kernel<TX, TW, VX, 4, false>, (unsigned)L.grid,
                      (unsigned)L.threads, 0, 1, a);
    }
    /* Many rows of 16-byte vectors: the register kernel, a persistent grid of blocks that each
     * hold a row and load the next (rms_fwd_rows). Wider weights than 4 bytes would double its
     * registers; those pairs take the staged kernel. */
    const bool rows_fit =
        L.vec == VX && sizeof(TX) <= 4 && sizeof(TW) <= 4 && nvec_row <= 8LL * KCUDA_MAX_THREADS;
    const bool force_rows = o && o->mode == MODE_ROWS;
    if (force_rows && !rows_fit)
        return fail(ctx, BATON_EINVAL,
                    "rms_norm_fwd: override mode 5 (register rows) needs 16-byte vectors, x and w "
                    "of at most 4 bytes and n2 <= %d vectors",
                    8 * KCUDA_MAX_THREADS);
    if (rows_fit && (force_rows || (no_override && d.n1 >= 2LL * sms)))
        return fwd_rows<TX, TW>(ctx, buffers, d, o, chosen, sms);
    /* The cp.async staged kernel (override mode 4) waits on at most 3 groups: 4 stages. */
    const bool cp = o && o->mode == MODE_STAGED_CP;
    if (cp && o->stages > 4)
        return fail(ctx, BATON_EINVAL, "rms_norm_fwd: override stages = %d with mode 4 (1..4)",
                    o->stages);
    int max_cx = 16;
    for (;;) {
        const int cx = choose_cx(d.n1, d.n2, sms, max_cx, o);
        /* Many rows: a persistent grid, each block staging the next rows while it reduces one
         * (and reading w once). Few rows: a block (or cluster) per row. */
        /* Stages: about 64 KB of x in flight per block (measured best on an H100: 4 stages of
         * 16 KB rows, 3 of 32 KB; bench_kernels --sweep), at least 2. */
        const int64_t row_bytes = ceil_div(d.n2, cx) * (int64_t)sizeof(TX);
        int deep = (int)(1 + (64 << 10) / (row_bytes > 0 ? row_bytes : 1));
        deep = deep < 2 ? 2 : deep > KCUDA_FWD_STAGES ? KCUDA_FWD_STAGES : deep;
        int want_stages;
        if (o && o->stages)
            want_stages = o->stages;
        else if (o && o->grid)
            want_stages = o->grid / cx < d.n1 ? deep : 1;
        else
            want_stages = d.n1 * cx > 2LL * sms ? deep : 1;
        shape_chunk(
            &L, d.n2, cx, VX, o, want_stages,
            [](int64_t c, int s) { return fwd_smem<TX, TW>(c, s); }, cx > 1 ? 8 : 4);
        long long groups = d.n1;
        if (o && o->grid)
            groups = o->grid / L.cx > 0 ? o->grid / L.cx : 1;
        const long long cap = (1LL << 30) / L.cx;
        if (groups > cap)
            groups = cap;
        L.grid = groups * L.cx;
        void (*k)(FwdArgs) = (void (*)(FwdArgs))fwd_kernel_for<TX, TW>(L, cp);
        const int pr = prepare(k, L, ctx, "rms_norm_fwd", L.cx > 8 && !(o && o->cx));
        if (pr > 0) {
            max_cx = 8;
            continue;
        }
        if (pr < 0)
            return BATON_ECUDA;
        if (L.mode == MODE_STAGED && L.stages > 1 && !(o && o->grid)) {
            int per_sm = 0;
            cudaError_t e = occupancy(ctx, (const void *)k, L.threads, L.smem, &per_sm);
            if (e != cudaSuccess)
                return fail(
                    ctx, BATON_ECUDA,
                    "cudaOccupancyMaxActiveBlocksPerMultiprocessor(rms_norm_fwd) failed: %s",
                    cudaGetErrorString(e));
            long long resident = (long long)(per_sm > 0 ? per_sm : 1) * sms / L.cx;
            if (resident < 1)
                resident = 1;
            if (groups > resident) {
                /* As few blocks as give every block the same number of rows: no tail. */
                const long long per = (groups + resident - 1) / resident;
                groups = (groups + per - 1) / per;
            }
            L.grid = groups * L.cx;
        }
        const FwdArgs a = fwd_args(buffers, d, L);
        report(L, chosen);
        if (chosen && cp && L.mode == MODE_STAGED)
            chosen->mode = MODE_STAGED_CP;
        return launch(ctx, "rms_norm_fwd", k, (unsigned)L.grid, (unsigned)L.threads, L.smem, L.cx,
                      a);
    }
}

template <typename TX>
static int fwd_w(const baton_exec_ctx *ctx, void **b, const baton_rms_norm_desc &d,
                 const kcuda_rms_cfg *o, kcuda_rms_cfg *c)
{
    switch (d.w_dtype) {
    case BATON_DTYPE_BF16: return fwd_typed<TX, __nv_bfloat16>(ctx, b, d, o, c);
    case BATON_DTYPE_F16: return fwd_typed<TX, __half>(ctx, b, d, o, c);
    case BATON_DTYPE_F32: return fwd_typed<TX, float>(ctx, b, d, o, c);
    default: return fwd_typed<TX, double>(ctx, b, d, o, c);
    }
}

/* ---- backward ---- */

template <typename TX, typename TW> static void *bwd_kernel_for(const Layout &L)
{
    constexpr int VX = 16 / (int)sizeof(TX);
    if (L.mode == MODE_STAGED)
        return (void *)rms_bwd_staged<TX, TW>;
    if (L.vec == 1)
        return L.mode == MODE_STREAM ? (void *)rms_bwd_kernel<TX, TW, 1, 4, true>
                                     : (void *)rms_bwd_kernel<TX, TW, 1, 4, false>;
    return (void *)rms_bwd_kernel<TX, TW, VX, 2, true>;
}

template <typename TX, typename TW>
static int bwd_typed(const baton_exec_ctx *ctx, void **buffers, const baton_rms_norm_desc &d,
                     const kcuda_rms_cfg *o, kcuda_rms_cfg *chosen)
{
    using A = typename acc_of<TX>::type;
    constexpr int VX = 16 / (int)sizeof(TX);
    /* buffers: grad_output, invvar, x, weight | grad_input, grad_weight, part_grad */
    kcuda_rms_cfg o4;
    if (o && o->stages > 4) { /* the staged backward waits on at most 3 cp.async groups */
        o4 = *o;
        o4.stages = 4;
        o = &o4;
    }
    Layout L;
    memset(&L, 0, sizeof L);
    const bool vec_ok = d.n2 % VX == 0 && aligned(buffers[0], vec_align<TW>(VX)) &&
                        aligned(buffers[2], 16) && aligned(buffers[4], 16) &&
                        aligned(buffers[3], vec_align<TW>(VX)) && aligned(buffers[1], sizeof(A)) &&
                        aligned(buffers[6], vec_align<A>(VX));
    L.vec = (vec_ok && !(o && o->vec == 1)) ? VX : 1;
    const int sms = sm_count(ctx);
    const int64_t P = d.part_grad_size;
    const int64_t B = ceil_div(d.n1, P);
    const int64_t active = ceil_div(d.n1, B); /* part_grad blocks that hold rows */
    {
        /* Few long rows: the split kernels use every SM (a cluster per row would use at most 16
         * blocks a row). They need room for the copies of the partials in each block's columns. */
        const bool forced = o && o->mode == MODE_SPLIT;
        const int64_t per = (int64_t)KCUDA_SPLIT_THREADS * VX;
        int64_t nvt = ceil_div(d.n2, per * 2 * sms);
        const int64_t chunk = (nvt < 1 ? 1 : nvt) * per;
        const int64_t nb = ceil_div(d.n2, chunk);
        const int64_t last = d.n2 - (nb - 1) * chunk;
        const bool fits = L.vec == VX && d.n1 <= KCUDA_SPLIT_ROWS && P * last >= nb * d.n1;
        const bool want =
            (!o || !(o->mode || o->threads || o->stages || o->grid || o->cx || o->cy || o->vec)) &&
            choose_cx(d.n1, d.n2, sms, 16, NULL) > 1;
        if (forced && !fits)
            return fail(ctx, BATON_EINVAL,
                        "rms_norm_bwd: the split kernels need 16-byte rows, n1 <= %d and "
                        "part_grad room for the partials (n1 %lld, n2 %lld, part_grad_size %lld)",
                        KCUDA_SPLIT_ROWS, (long long)d.n1, (long long)d.n2, (long long)P);
        if (fits && (forced || want)) {
            SplitArgs a;
            a.g = buffers[0];
            a.invvar = buffers[1];
            a.x = buffers[2];
            a.w = buffers[3];
            a.gi = buffers[4];
            a.gw = buffers[5];
            a.pg = buffers[6];
            a.n1 = d.n1;
            a.n2 = d.n2;
            a.P = P;
            a.B = B;
            a.active = active;
            a.chunk = chunk;
            a.nb = nb;
            L.mode = MODE_SPLIT;
            L.threads = KCUDA_SPLIT_THREADS;
            L.nv = (int)(nvt < 1 ? 1 : nvt);
            L.cx = 1;
            L.cy = 1;
            L.grid = nb;
            report(L, chosen);
            int rc = launch(ctx, "rms_norm_bwd partial dots", rms_bwd_split_dot<TX, TW>,
                            (unsigned)nb, (unsigned)KCUDA_SPLIT_THREADS, 0, 1, a);
            if (rc)
                return rc;
            /* The finish kernel waits for the dot kernel before anything else: let it
             * launch early (programmatic dependent launch) on any stream but the legacy one. */
            baton_exec_ctx c2;
            memset(&c2, 0, sizeof c2);
            if (ctx)
                c2 = *ctx;
            if (c2.stream)
                c2.pdl = 1;
            return launch(&c2, "rms_norm_bwd finish", rms_bwd_split_finish<TX, TW>, (unsigned)nb,
                          (unsigned)KCUDA_SPLIT_THREADS, 0, 1, a);
        }
    }
    int max_cl = 16;
    for (;;) {
        /* Few rows: split each over a cluster (cx); many rows but few part_grad blocks: split
         * each block's rows over a cluster (cy). */
        const int cx = choose_cx(d.n1, d.n2, sms, max_cl, o);
        auto smem_of = [](int64_t c, int s) { return bwd_smem<TX, TW>(c, s); };
        shape_chunk(&L, d.n2, cx, VX, o, 1, smem_of);
        L.cy = 1;
        if (o && o->cy) {
            L.cy = o->cy;
        } else if (L.cx == 1 && L.mode == MODE_STAGED && !(o && o->grid)) {
            int64_t cy = ceil_div(2 * (int64_t)sms, active);
            if (cy > B)
                cy = B;
            if (cy > max_cl)
                cy = max_cl;
            L.cy = cy < 1 ? 1 : (int)cy;
        }
        if (L.cy > 1 && (L.cx > 1 || L.mode != MODE_STAGED))
            return fail(ctx, BATON_EINVAL,
                        "rms_norm_bwd: cy = %d needs cx == 1 and the staged (16-byte) kernel",
                        L.cy);
        const int cl = L.cx * L.cy;
        /* Only the blocks that hold rows are launched; grad_weight's kernel zeroes the others. */
        long long groups = active;
        const long long cap = (1LL << 30) / cl;
        if (o && o->grid)
            groups = o->grid / cl > 0 ? o->grid / cl : 1;
        if (groups > cap)
            groups = cap;
        L.grid = groups * cl;
        if (L.mode == MODE_STAGED && !(o && o->stages)) {
            /* Stages (bench_kernels --sweep with BENCH_SWEEP_BWD=1 on an H100 and an H200): none
             * ahead when a block has one row; with few blocks per SM, 16-bit rows want one row
             * ahead and 32-bit rows none (more threads' worth of rows instead). With many blocks,
             * 32-bit rows want three ahead, as many as fit (f32 32768 x 4096: 87 -> 91 % of copy
             * on the H100, 86 -> 90 % on the H200); 16-bit rows of 16 KB one ahead (three ahead
             * was 2 points better on the H100 but 8 worse on the H200), of 8 KB none. */
            const bool one_row = ceil_div(B, L.cy) <= 1;
            const bool crowded = L.grid >= 3LL * sms;
            int st = 1, per = 4;
            if (!one_row) {
                if (sizeof(TX) == 2)
                    st = !crowded || L.chunk * (int64_t)sizeof(TX) >= (16 << 10) ? 2 : 1;
                else if (crowded)
                    st = 4;
                else /* 16384 x 8192 f32: t256 s2 88% of copy, t256 s1 70% (one block per SM) */
                    st = L.chunk * (int64_t)sizeof(TX) >= (32 << 10) ? 2 : 1;
                if (sizeof(TX) > 2 && !crowded)
                    per = 8;
            }
            shape_chunk(&L, d.n2, L.cx, VX, o, st, smem_of, per);
        }
        void (*k)(BwdArgs) = (void (*)(BwdArgs))bwd_kernel_for<TX, TW>(L);
        const int pr = prepare(k, L, ctx, "rms_norm_bwd", cl > 8 && !(o && (o->cx || o->cy)));
        if (pr > 0) {
            max_cl = 8;
            continue;
        }
        if (pr < 0)
            return BATON_ECUDA;
        BwdArgs a;
        a.g = buffers[0];
        a.invvar = buffers[1];
        a.x = buffers[2];
        a.w = buffers[3];
        a.gi = buffers[4];
        a.pg = buffers[6];
        a.n1 = d.n1;
        a.n2 = d.n2;
        a.P = P;
        a.B = B;
        a.active = active;
        a.chunk = L.chunk;
        a.cx = L.cx;
        a.cy = L.cy;
        a.stages = L.stages;
        report(L, chosen);
        int rc =
            launch(ctx, "rms_norm_bwd", k, (unsigned)L.grid, (unsigned)L.threads, L.smem, cl, a);
        if (rc)
            return rc;
        int64_t cgrid = ceil_div(d.n2, 32);
        if (cgrid > 8LL * sms)
            cgrid = 8LL * sms;
        /* Zeroing empty part_grad blocks is memory-bound work: let it use every SM. */
        const int64_t min_grid = P > active ? 4LL * sms : 1;
        if (cgrid < min_grid && ceil_div(d.n2, 32) >= min_grid)
            cgrid = min_grid;
        return launch(ctx, "rms_norm_bwd grad_weight", rms_colsum_kernel<A, TW>, (unsigned)cgrid,
                      256u, 0, 1, (A *)buffers[6], (TW *)buffers[5], P, active, d.n2);
    }
}

template <typename TX>
static int bwd_w(const baton_exec_ctx *ctx, void **b, const baton_rms_norm_desc &d,
                 const kcuda_rms_cfg *o, kcuda_rms_cfg *c)
{
    switch (d.w_dtype) {
    case BATON_DTYPE_BF16: return bwd_typed<TX, __nv_bfloat16>(ctx, b, d, o, c);
    case BATON_DTYPE_F16: return bwd_typed<TX, __half>(ctx, b, d, o, c);
    case BATON_DTYPE_F32: return bwd_typed<TX, float>(ctx, b, d, o, c);
    default: return bwd_typed<TX, double>(ctx, b, d, o, c);
    }
}

} /* namespace kcuda */

using namespace kcuda;

extern "C" int kcuda_rms_norm_fwd_cfg(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                      size_t len, const kcuda_rms_cfg *o, kcuda_rms_cfg *chosen)
{
    baton_rms_norm_desc d;
    int rc = check_desc(ctx, "rms_norm_fwd", buffers, 4, opaque, len, &d, 0);
    if (rc)
        return rc;
    if ((rc = check_override(ctx, "rms_norm_fwd", o)))
        return rc;
    switch (d.x_dtype) {
    case BATON_DTYPE_BF16: return fwd_w<__nv_bfloat16>(ctx, buffers, d, o, chosen);
    case BATON_DTYPE_F16: return fwd_w<__half>(ctx, buffers, d, o, chosen);
    case BATON_DTYPE_F32: return fwd_w<float>(ctx, buffers, d, o, chosen);
    default: return fwd_w<double>(ctx, buffers, d, o, chosen);
    }
}

extern "C" int kcuda_rms_norm_bwd_cfg(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                      size_t len, const kcuda_rms_cfg *o, kcuda_rms_cfg *chosen)
{
    baton_rms_norm_desc d;
    int rc = check_desc(ctx, "rms_norm_bwd", buffers, 7, opaque, len, &d, 1);
    if (rc)
        return rc;
    if ((rc = check_override(ctx, "rms_norm_bwd", o)))
        return rc;
    switch (d.x_dtype) {
    case BATON_DTYPE_BF16: return bwd_w<__nv_bfloat16>(ctx, buffers, d, o, chosen);
    case BATON_DTYPE_F16: return bwd_w<__half>(ctx, buffers, d, o, chosen);
    case BATON_DTYPE_F32: return bwd_w<float>(ctx, buffers, d, o, chosen);
    default: return bwd_w<double>(ctx, buffers, d, o, chosen);
    }
}

extern "C" int kcuda_rms_norm_fwd(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                  size_t len)
{
    return kcuda_rms_norm_fwd_cfg(ctx, buffers, opaque, len, NULL, NULL);
}

extern "C" int kcuda_rms_norm_bwd(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                  size_t len)
{
    return kcuda_rms_norm_bwd_cfg(ctx, buffers, opaque, len, NULL, NULL);
}
#endif /* KCUDA_KERNELS_ONLY */
