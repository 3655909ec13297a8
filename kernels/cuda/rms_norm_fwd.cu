/* rms_norm_fwd.cu: the RMSNorm forward on CUDA, for the 16 (x, weight) dtype pairs, at the
 * memory-bandwidth limit (rows staged by bulk copies or held in registers, 16-byte loads, long rows
 * split over a thread-block cluster), and its launch; rms_norm_layout.c chooses the layout. */
#include "kernels/cuda/kcuda_common.cuh"

#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/rms_norm_cuda.h"
#include "kernels/cuda/rms_norm_layout.h"
#include "kernels/cuda/rms_norm_prepared.cuh"
#include "kernels/cuda/rms_norm_tune.h"
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

/* invvar in register rows' order: rsqrt(sum / n2 + eps), the add rounded on its own. The kernels
 * that must give the same bits (rms_fwd_rows, rms_fwd_row, rms_fwd_bulk in rows' order) call
 * this: written as one expression, the same sums gave other invvar bits in rms_fwd_row than in
 * rms_fwd_rows (ptxas may fuse the division's multiply into the add in one kernel only). */
__device__ __forceinline__ float rows_invvar(float ss, int64_t n2, float eps)
{
    return rsqrt_acc(__fadd_rn(ss / (float)n2, eps));
}
__device__ __forceinline__ double rows_invvar(double ss, int64_t n2, double eps)
{
    return rsqrt_acc(__dadd_rn(ss / (double)n2, eps));
}

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
    /* rms_fwd_bulk: reduce each row as rms_fwd_rows does (the tuner's variant
     * KCUDA_RMS_VK_BULK), so that the two give the same bits */
    int rows_order;
};

/* Sum over the block in register rows' order (rows_step): each warp's shuffle tree, then one
 * shuffle tree over the warps' sums; every thread gets the same bits. The leading barrier lets a
 * caller reuse `red` in a loop, as block_sum's does. */
template <typename A> __device__ __forceinline__ A block_sum_rows(A v, A *red)
{
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : A(0));
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

/* The persistent forward path: like rms_fwd_staged, but thread 0 copies each row's chunk into
 * shared memory with one bulk copy (the copy engine) completing on the stage's mbarrier, `stages`
 * rows ahead. A stage is refilled once every thread has passed the next row's block_sum barrier,
 * which orders all reads of it before the copy is issued. Shared memory is laid out as in
 * rms_fwd_staged. */
template <typename TX, typename TW>
__global__ void __launch_bounds__(KCUDA_MAX_THREADS) rms_fwd_bulk(FwdArgs a)
{
    using A = typename acc_of<TX>::type;
    constexpr int VEC = 16 / (int)sizeof(TX);
    /* its own name: a second declaration of `dyn` with another alignment conflicts (nvcc warns) */
    extern __shared__ __align__(128) unsigned char bulk_dyn[];
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
    TW *ws = reinterpret_cast<TW *>(bulk_dyn);
    TX *xs = reinterpret_cast<TX *>(bulk_dyn + pad16((size_t)a.chunk * sizeof(TW)));
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
        ss = a.rows_order ? block_sum_rows(ss, red) : block_sum(ss, red);
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
        /* Register rows' mean is sum / n2, not sum * (1 / n2): the same bits as it, where asked. */
        const A r = a.rows_order ? rows_invvar(ss, a.n2, eps) : rsqrt_acc(ss * inv_n + eps);
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

/* The thread's vectors of x's row `row` (idx[v] its columns, -1 past the row's end). */
template <typename TX, int VEC, int NV>
__device__ __forceinline__ void rows_row_load(const FwdArgs &a, int64_t row, const int (&idx)[NV],
                                              TX (&dst)[NV][VEC])
{
    const TX *__restrict__ xr = static_cast<const TX *>(a.x) + row * a.n2;
#pragma unroll
    for (int v = 0; v < NV; v++)
        if (idx[v] >= 0)
            ld_ro(xr + idx[v], dst[v]);
}

/* A row's invvar from the thread's vectors `cur` of it, in register rows' order: each thread's
 * squares in vector order, each warp's shuffle tree, then one shuffle tree over the warps' sums
 * (the same bits in every thread), through `slot` behind one barrier, before which `at_barrier`
 * runs (a kernel's wait for what it must have by then). Thread 0 stores it. */
template <typename TX, typename A, int VEC, int NV, typename F>
__device__ __forceinline__ A rows_row_invvar(const FwdArgs &a, int64_t row, const int (&idx)[NV],
                                             const TX (&cur)[NV][VEC], A *slot, F at_barrier)
{
    const int tid = threadIdx.x, nw = blockDim.x >> 5;
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
    ss = warp_sum(ss);
    if ((tid & 31) == 0)
        slot[tid >> 5] = ss;
    at_barrier();
    __syncthreads();
    ss = warp_sum((tid & 31) < nw ? slot[tid & 31] : A(0));
    const A r = rows_invvar(ss, a.n2, (A)a.eps);
    if (tid == 0)
        static_cast<A *>(a.invvar)[row] = r;
    return r;
}

/* y's row from the thread's vectors `cur` of x's: w's vector v from w_at(v, u). */
template <typename TX, typename TW, typename A, int VEC, int NV, typename W>
__device__ __forceinline__ void rows_row_scale(const FwdArgs &a, int64_t row, const int (&idx)[NV],
                                               const TX (&cur)[NV][VEC], A r, W w_at)
{
    TW *__restrict__ yr = static_cast<TW *>(a.y) + row * a.n2;
#pragma unroll
    for (int v = 0; v < NV; v++)
        if (idx[v] >= 0) {
            TW u[VEC], out[VEC];
            w_at(v, u);
            scale_vec<TX, TW, A, VEC>(cur[v], u, r, out);
            stg(yr + idx[v], out);
        }
}

/* One row of the register forward: x's vectors are already in `cur`; the next row's loads go
 * out into `nxt` before this row's barrier, so the block keeps a row in flight while it waits.
 * idx[v] is the thread's column of vector v, or -1 past the row's end. One barrier per row (the
 * caller alternates `slot` between rows: a thread reaches row k + 2's write only after row
 * k + 1's barrier, which every thread passes after its reads of row k). */
template <typename TX, typename TW, typename A, int VEC, int NV>
__device__ __forceinline__ void rows_step(const FwdArgs &a, int64_t row, int64_t next,
                                          const int (&idx)[NV], TX (&cur)[NV][VEC],
                                          TX (&nxt)[NV][VEC], A *slot)
{
    const TW *__restrict__ w = static_cast<const TW *>(a.w);
    if (next < a.n1)
        rows_row_load<TX, VEC, NV>(a, next, idx, nxt);
    const A r = rows_row_invvar<TX, A, VEC, NV>(a, row, idx, cur, slot, [] {});
    /* every block of the SM reads the same w: L1 hits */
    rows_row_scale<TX, TW, A, VEC, NV>(a, row, idx, cur, r,
                                       [&](int v, TW(&u)[VEC]) { ld_ro(w + idx[v], u); });
}

/* The register forward for many rows of 16-byte vectors: a block per row, each thread holding NV
 * vectors of x. Launched with a block for every row (the default), the hardware keeps as many
 * rows in flight as fit; on a persistent grid (the tuner's KCUDA_RMS_VK_PERSIST) row i + grid's
 * loads are issued before row i's reduction, so every block has a row in flight without
 * shared-memory staging. Either way several blocks per SM hide each other's barriers: occupancy
 * matters more than anything else here (w held in registers, four partial sums and L1-bypassing
 * loads, together, cost 2 blocks per SM and were 3-6 % slower on an H200). */
template <typename TX, typename TW, int NV>
__global__ void __launch_bounds__(KCUDA_MAX_THREADS) rms_fwd_rows(FwdArgs a)
{
    using A = typename acc_of<TX>::type;
    constexpr int VEC = 16 / (int)sizeof(TX);
    __shared__ A red[2][32];
    const int cols = (int)a.n2;
    const int64_t G = gridDim.x;
    int idx[NV];
    rows_vector_offsets<NV, VEC>(idx, cols);

    pdl_wait(); /* x and w may be a predecessor's outputs */

    TX xa[NV][VEC], xb[NV][VEC];
    int64_t row = blockIdx.x;
    if (row < a.n1)
        rows_row_load<TX, VEC, NV>(a, row, idx, xa);
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

/* The register forward with a block for every row, for exactly that launch (the tuner's
 * KCUDA_RMS_VK_ROW): rms_fwd_rows' row, without the buffer for a next row, so that 4 blocks of 512
 * threads fit an SM at 2 vectors per thread (32 registers), and with the thread's vectors of w
 * copied into shared memory by cp.async while the row loads: rms_fwd_rows reads w only after the
 * row's barrier, and on an H200 that read was the forward's whole gap to the copy kernels at bf16
 * 4096 x 4096 (95 against 102 % of the best copy kernel with w left out; bench_kernels). Each
 * thread reads back only the w it copied, so cp.async's wait orders it. The same sums, invvar and
 * scaling as rms_fwd_rows: the same bits. */
template <typename TX, typename TW, int NV>
__global__ void __launch_bounds__(KCUDA_MAX_THREADS, NV == 2 ? 4 : 0) rms_fwd_row(FwdArgs a)
{
    using A = typename acc_of<TX>::type;
    constexpr int VEC = 16 / (int)sizeof(TX);
    __shared__ A red[32];
    extern __shared__ __align__(16) unsigned char fwd_row_w[];
    TW *ws = reinterpret_cast<TW *>(fwd_row_w); /* n2 elements */
    const int64_t row = blockIdx.x;
    int idx[NV];
    rows_vector_offsets<NV, VEC>(idx, (int)a.n2);

    pdl_wait(); /* x and w may be a predecessor's outputs */

    const TW *__restrict__ w = static_cast<const TW *>(a.w);
#pragma unroll
    for (int v = 0; v < NV; v++)
        if (idx[v] >= 0)
            cp_async<TW, VEC>(ws + idx[v], w + idx[v]);
    cp_commit();
    TX xv[NV][VEC];
    rows_row_load<TX, VEC, NV>(a, row, idx, xv);
    const A r = rows_row_invvar<TX, A, VEC, NV>(a, row, idx, xv, red, [] { cp_wait(0); });
    rows_row_scale<TX, TW, A, VEC, NV>(
        a, row, idx, xv, r, [&](int v, TW(&u)[VEC]) { memcpy(u, ws + idx[v], sizeof u); });
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

/* ---- launch ---------------------------------------------------------------------------------- */

/* The forward kernels' arguments: buffers x, weight | y, invvar, laid out as L says. */
static FwdArgs fwd_args(void **buffers, const baton_rms_norm_desc &d, const kcuda_rms_layout &L)
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
    a.rows_order = L.variant.kernel == KCUDA_RMS_VK_BULK;
    return a;
}

typedef void (*FwdKernel)(FwdArgs);

template <typename TX, typename TW, int NV> static FwdKernel fwd_rows_kernel(bool one_row)
{
    if constexpr (sizeof(TX) <= 4 && sizeof(TW) <= 4)
        return one_row ? rms_fwd_row<TX, TW, NV> : rms_fwd_rows<TX, TW, NV>;
    else
        return NULL; /* the layout takes register rows only for x and w of at most 4 bytes */
}

template <typename TX, typename TW> static FwdKernel fwd_kernel_for(const kcuda_rms_layout &L)
{
    constexpr int VX = 16 / (int)sizeof(TX);
    switch (L.mode) {
    case KCUDA_RMS_ROWS: {
        const bool one = L.variant.kernel == KCUDA_RMS_VK_ROW;
        return L.nv == 2   ? fwd_rows_kernel<TX, TW, 2>(one)
               : L.nv == 4 ? fwd_rows_kernel<TX, TW, 4>(one)
                           : fwd_rows_kernel<TX, TW, 8>(one);
    }
    case KCUDA_RMS_STAGED: return L.stages >= 2 ? rms_fwd_bulk<TX, TW> : rms_fwd_staged<TX, TW>;
    case KCUDA_RMS_STAGED_CP: return rms_fwd_staged<TX, TW>;
    default: break;
    }
    if (L.mode == KCUDA_RMS_REGS && L.vec == VX)
        return rms_fwd_kernel<TX, TW, VX, 4, false>; /* the decode path */
    if (L.vec == 1)
        return L.mode == KCUDA_RMS_STREAM ? rms_fwd_kernel<TX, TW, 1, 4, true>
                                          : rms_fwd_kernel<TX, TW, 1, 4, false>;
    return rms_fwd_kernel<TX, TW, VX, 2, true>;
}

/* A call decided: its descriptor decoded, its layout (the tuned variant applied, spread over the
 * SMs) and the kernel that runs it, with its attributes set. */
struct FwdDecision {
    baton_rms_norm_desc d;
    kcuda_rms_layout L;
    FwdKernel k;
};

template <typename TX, typename TW>
static int fwd_decide(const baton_exec_ctx *ctx, void **buffers, const kcuda_rms_cfg *o,
                      FwdDecision *out)
{
    const baton_rms_norm_desc &d = out->d;
    const DeviceFacts facts = device_facts(ctx);
    kcuda_rms_device dev;
    dev.sms = facts.sms;
    dev.smem_optin = facts.smem_optin;
    dev.max_cluster = KCUDA_MAX_CLUSTER;
    const size_t smem_max = (size_t)baton__kcuda_rms_smem_max(&dev);
    char why[512];
    kcuda_rms_layout &L = out->L;
    for (;;) {
        int rc = baton__kcuda_rms_fwd_layout(&d, buffers, &dev, o, &L, why, sizeof why);
        if (rc)
            return baton__ctx_fail(ctx, rc, "%s", why);
        if (!o && ctx && ctx->autotune)
            baton__kcuda_rms_apply_tuned(device_name(ctx), 0, &d, &dev, &L);
        const FwdKernel k = fwd_kernel_for<TX, TW>(L);
        rc = prepare(k, ctx, "rms_norm_fwd", L.cx * L.cy, L.grid, L.threads, L.smem, smem_max,
                     L.may_shrink, kcuda_rms_max_carveout(&L));
        if (rc > 0) { /* 16-block clusters cannot run here */
            dev.max_cluster = 8;
            continue;
        }
        if (rc < 0)
            return BATON_ECUDA;
        if (L.spread) {
            int per_sm = 0;
            cudaError_t e = occupancy(ctx, (const void *)k, L.threads, L.smem, &per_sm);
            if (e != cudaSuccess)
                return baton__ctx_fail(
                    ctx, BATON_ECUDA,
                    "cudaOccupancyMaxActiveBlocksPerMultiprocessor(rms_norm_fwd) failed: %s",
                    cudaGetErrorString(e));
            baton__kcuda_rms_spread(&L, per_sm, dev.sms);
        }
        out->k = k;
        return 0;
    }
}

template <typename TX>
static int fwd_decide_w(const baton_exec_ctx *ctx, void **b, const kcuda_rms_cfg *o,
                        FwdDecision *out)
{
    switch (out->d.w_dtype) {
    case BATON_DTYPE_BF16: return fwd_decide<TX, __nv_bfloat16>(ctx, b, o, out);
    case BATON_DTYPE_F16: return fwd_decide<TX, __half>(ctx, b, o, out);
    case BATON_DTYPE_F32: return fwd_decide<TX, float>(ctx, b, o, out);
    default: return fwd_decide<TX, double>(ctx, b, o, out);
    }
}

/* Checks and decodes the descriptor, then decides the call (the override o: NULL to choose). */
static int fwd_decide_call(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                           size_t len, const kcuda_rms_cfg *o, FwdDecision *out)
{
    char why[512];
    const int rc = baton__kcuda_rms_check("rms_norm_fwd", buffers, 4, opaque, len, 0, o, &out->d,
                                          NULL, why, sizeof why);
    if (rc)
        return baton__ctx_fail(ctx, rc, "%s", why);
    switch (out->d.x_dtype) {
    case BATON_DTYPE_BF16: return fwd_decide_w<__nv_bfloat16>(ctx, buffers, o, out);
    case BATON_DTYPE_F16: return fwd_decide_w<__half>(ctx, buffers, o, out);
    case BATON_DTYPE_F32: return fwd_decide_w<float>(ctx, buffers, o, out);
    default: return fwd_decide_w<double>(ctx, buffers, o, out);
    }
}

static int fwd_launch(const baton_exec_ctx *ctx, void **buffers, const FwdDecision &c)
{
    return launch(ctx, "rms_norm_fwd", c.k, (unsigned)c.L.grid, (unsigned)c.L.threads, c.L.smem,
                  c.L.cx, fwd_args(buffers, c.d, c.L));
}

/* What a step keeps from prepare (ctx->prepared): the decision, keyed as rms_norm_prepared.cuh
 * says; a descriptor longer than the 40-byte one is decided on every call (baton__kcuda_rms_check
 * says what it is). */
typedef RmsPrepared<FwdDecision, 4, sizeof(baton_rms_norm_desc)> FwdPrepared;

} /* namespace kcuda */

using namespace kcuda;

extern "C" int baton__kcuda_rms_norm_fwd_cfg(const baton_exec_ctx *ctx, void **buffers,
                                             const char *opaque, size_t len, const kcuda_rms_cfg *o,
                                             kcuda_rms_cfg *chosen)
{
    return rms_cfg<FwdDecision>(ctx, buffers, opaque, len, o, chosen, fwd_decide_call, fwd_launch);
}

extern "C" int baton__kcuda_rms_norm_fwd_prepare(const baton_exec_ctx *ctx, void **buffers,
                                                 const char *opaque, size_t len, void **state)
{
    return rms_prepare<FwdPrepared>(ctx, "rms_norm_fwd", buffers, opaque, len, state,
                                    fwd_decide_call);
}

/* The runtime's calls carry ctx->prepared (rms_call); the XLA-ABI entry points
 * (xla_custom_call.c) and direct callers decide on every call. */
extern "C" int baton__kcuda_rms_norm_fwd(const baton_exec_ctx *ctx, void **buffers,
                                         const char *opaque, size_t len)
{
    return rms_call<FwdPrepared>(ctx, buffers, opaque, len, fwd_decide_call, fwd_launch);
}
