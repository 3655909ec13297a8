/* rms_norm_bwd_staged.cu: the RMSNorm backward's staged kernel (rms_norm_bwd.cuh): 16-byte
 * vectors of grad_output and x staged in shared memory by cp.async, `stages` rows ahead. */
#include "kernels/cuda/kcuda_common.cuh"

#include <type_traits>

#include "kernels/cuda/rms_norm_bwd.cuh"

namespace kcuda
{

/* Early trigger: each main kernel of the backward lets the column sum that follows it launch
 * (pdl_trigger) right after its own pdl_wait. The column sum's first act is pdl_wait, which waits
 * for the whole of this grid and its writes, so no bit can change; its blocks only wait on the SMs
 * that this grid leaves free, and start the moment it ends, rather than a launch later. */

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
    pdl_trigger(); /* the column sum: see "Early trigger" above */

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
            /* acc is zeroed for the next block, or freed at exit, after the combine */
            cluster_rank_sums(acc, pgr, cols, srank, tid, T, cy, false);
        }
    }
    cp_commit();
    cp_wait(0);
    if (cl > 1)
        cluster_exit_barrier();
}

template <typename TX, typename TW> BwdKernel bwd_staged_kernel()
{
    return rms_bwd_staged<TX, TW>;
}

#define KCUDA_INST(TX, TW) template BwdKernel bwd_staged_kernel<TX, TW>();
KCUDA_BWD_PAIRS(KCUDA_INST)
#undef KCUDA_INST

} /* namespace kcuda */
