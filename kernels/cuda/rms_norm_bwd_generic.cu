/* rms_norm_bwd_generic.cu: the RMSNorm backward's register and streaming kernels
 * (rms_norm_bwd.cuh): rows that are not 16-byte vectors, unaligned buffers, rows too long to
 * stage. */
#include "kernels/cuda/kcuda_common.cuh"

#include <type_traits>

#include "kernels/cuda/rms_norm_bwd.cuh"

namespace kcuda
{

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
    pdl_trigger(); /* the column sum: see "Early trigger" above */

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
                /* Add the cy blocks' column sums in rank order (buf is rewritten by the next
                 * block, or freed at exit, after the combine). */
                A *buf = reinterpret_cast<A *>(dyn);
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const int idx = (v * T + tid) * VEC;
                    if (idx < cols)
                        st(buf + idx, acc[v]);
                }
                cluster_rank_sums(buf, pgr, cols, srank, tid, T, cy, false);
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
}

template <typename TX, typename TW> BwdKernel bwd_generic_kernel(bool vec1, bool stream)
{
    constexpr int VX = 16 / (int)sizeof(TX);
    if (vec1)
        return stream ? rms_bwd_kernel<TX, TW, 1, 4, true> : rms_bwd_kernel<TX, TW, 1, 4, false>;
    return rms_bwd_kernel<TX, TW, VX, 2, true>;
}

#define KCUDA_INST(TX, TW) template BwdKernel bwd_generic_kernel<TX, TW>(bool, bool);
KCUDA_BWD_PAIRS(KCUDA_INST)
#undef KCUDA_INST

} /* namespace kcuda */
