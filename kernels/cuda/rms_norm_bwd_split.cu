/* rms_norm_bwd_split.cu: the RMSNorm backward's split form (rms_norm_bwd.cuh): at most 16 long
 * rows over the whole GPU, a partial-dot kernel and a finishing kernel. */
#include "kernels/cuda/kcuda_common.cuh"

#include <type_traits>

#include "kernels/cuda/rms_norm_bwd.cuh"

namespace kcuda
{

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
        /* grad_weight in the column sum's order (rms_colsum_kernel's, so that
         * rms_norm_grad_weight gives the same bits from this part_grad). With at most
         * KCUDA_COLSUM_LANES blocks, each lane holds one block or none and the lanes add up in
         * block order: tot's order. With more (up to KCUDA_SPLIT_ROWS), the part_grad cells this
         * thread just wrote are read back and added in that order. */
        if (a.active > KCUDA_COLSUM_LANES) {
            const A *pgc = pg + col0 + idx;
#pragma unroll
            for (int e = 0; e < VEC; e++)
                tot[e] = colsum_combine<A>(
                    [&](int k) { return colsum_lane<false>(pgc, a.n2, e, k, a.active); });
        }
        TW o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; e++)
            o[e] = from_acc<TW>(tot[e]);
        st(gw + col0 + idx, o);
    }
    pdl_trigger();
}

/* The split backward: the partial-dot kernel, then the finishing kernel. */
template <typename TX, typename TW>
int bwd_split(const baton_exec_ctx *ctx, void **buffers, const baton_rms_norm_desc &d,
              const kcuda_rms_layout &L)
{
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
    a.P = L.P;
    a.B = L.B;
    a.active = L.active;
    a.chunk = L.chunk;
    a.nb = L.grid;
    int rc = launch(ctx, "rms_norm_bwd partial dots", rms_bwd_split_dot<TX, TW>, (unsigned)L.grid,
                    (unsigned)KCUDA_SPLIT_THREADS, 0, 1, a);
    if (rc)
        return rc;
    /* The finish kernel waits for the dot kernel before anything else: let it launch early. */
    const baton_exec_ctx c2 = with_pdl(ctx, true);
    return launch(&c2, "rms_norm_bwd finish", rms_bwd_split_finish<TX, TW>, (unsigned)L.grid,
                  (unsigned)KCUDA_SPLIT_THREADS, 0, 1, a);
}

#define KCUDA_INST(TX, TW)                                                                         \
    template int bwd_split<TX, TW>(const baton_exec_ctx *, void **, const baton_rms_norm_desc &,   \
                                   const kcuda_rms_layout &);
KCUDA_BWD_PAIRS(KCUDA_INST)
#undef KCUDA_INST

} /* namespace kcuda */
