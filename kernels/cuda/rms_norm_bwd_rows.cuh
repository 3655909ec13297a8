/* rms_norm_bwd_rows.cuh: the RMSNorm backward's register rows (rms_norm_bwd.cuh): many rows of
 * 16-byte vectors, each thread holding its vectors of w, of its column sums and of D rows. Its
 * kernels are many (row counts, vectors a thread, the prefetch flag, 9 dtype pairs): they are
 * instantiated in a file per x dtype (rms_norm_bwd_rows_bf16.cu, _f16.cu, _f32.cu) so that they
 * compile in parallel, by KCUDA_BWD_ROWS_FILE at the end of each. */
#ifndef BATON_KCUDA_RMS_NORM_BWD_ROWS_CUH
#define BATON_KCUDA_RMS_NORM_BWD_ROWS_CUH

#include "kernels/cuda/kcuda_common.cuh"

#include <type_traits>

#include "kernels/cuda/rms_norm_bwd.cuh"

namespace kcuda
{

/* One row's inputs of the register backward: grad_output (y's dtype) and x, NV vectors each, and
 * invvar. */
template <typename TX, typename TW, typename A, int NV, int VEC> struct BwdRow {
    TW g[NV][VEC];
    TX x[NV][VEC];
    A r;
};

/* The register backward for many rows of 16-byte vectors: the cluster of cy blocks owns part_grad
 * block p (rank k taking rows rb + k, rb + k + cy, ..., as rms_bwd_staged with cx == 1), but each
 * thread holds its NV vectors of w, of its column sums and of D rows in registers, so every block
 * keeps rows loading without shared-memory staging. Two rows at a time where D is 4, 6 or 8 (their
 * reductions share one barrier and their latencies overlap), else one; the other D - G rows are in
 * flight meanwhile. A row's sum is each thread's vectors in order, each warp's
 * shuffle tree, then one shuffle tree over the warps' sums (every thread the same bits); the
 * column sums add the block's rows in row order, and the cluster adds its ranks' sums in rank
 * order. D (and so G) changes only how far ahead the loads run, never a bit: a tuning variant.
 * Dynamic shared memory: cy > 1, the column sums for the cluster's combine (n2 values). Where the
 * rows and sums fit in 64 registers, two blocks of 512 threads fit on an SM: asked for, so that
 * the layout can fit more clusters. */
template <typename TX, typename TW, int NV, int D> struct BwdRowsFit {
    static constexpr int regs = KCUDA_BWD_ROWS_REGS((int)sizeof(TX), (int)sizeof(TW), NV, D);
    static constexpr int min_blocks = regs <= 44 ? 2 : 1;
    /* More than 4 rows: blocks of at most KCUDA_BWD_DEEP_THREADS, so that a thread may have the
     * registers (the layout holds them only there). */
    static constexpr int max_threads = D > 4 ? KCUDA_BWD_DEEP_THREADS : KCUDA_MAX_THREADS;
    static constexpr int G = D >= 4 && D % 2 == 0 ? 2 : 1; /* rows reduced at a time */
    static constexpr bool ok = D <= 4 ? (NV <= 2 || D == 2) : regs <= KCUDA_BWD_DEEP_REGS;
};

template <typename TX, typename TW, int NV, int D, bool PF>
__global__ void __launch_bounds__((BwdRowsFit<TX, TW, NV, D>::max_threads),
                                  (BwdRowsFit<TX, TW, NV, D>::min_blocks)) rms_bwd_rows(BwdArgs a)
{
    using A = typename acc_of<TX>::type;
    constexpr int VEC = 16 / (int)sizeof(TX);
    constexpr int G = BwdRowsFit<TX, TW, NV, D>::G;
    using Row = BwdRow<TX, TW, A, NV, VEC>;
    extern __shared__ __align__(16) unsigned char dyn[];
    __shared__ A red[2][G][32];
    const TW *__restrict__ g = static_cast<const TW *>(a.g);
    const TX *__restrict__ x = static_cast<const TX *>(a.x);
    const A *__restrict__ inv = static_cast<const A *>(a.invvar);
    const int tid = threadIdx.x, T = blockDim.x, nw = T >> 5, lane = tid & 31, cy = a.cy;
    const int srank = cy > 1 ? (int)(blockIdx.x % (unsigned)cy) : 0;
    const int cols = (int)a.n2;
    const A inv_n = A(1) / A(a.n2);
    int idx[NV];
    rows_vector_offsets<NV, VEC>(idx, cols);

    TL_MAIN(ENTRY);
    pdl_wait();
    TL_MAIN(WAITED);
    if (a.kx <= 1) /* a chain's clusters wait for each other: trigger only as they finish */
        pdl_trigger();

    TW wv[NV][VEC];
#pragma unroll
    for (int v = 0; v < NV; v++)
        if (idx[v] >= 0)
            ld_ro(static_cast<const TW *>(a.w) + idx[v], wv[v]);
    auto load = [&](int64_t row, Row &d) {
#pragma unroll
        for (int v = 0; v < NV; v++)
            if (idx[v] >= 0) {
                ld_ro(g + row * a.n2 + idx[v], d.g[v]);
                ld_ro(x + row * a.n2 + idx[v], d.x[v]);
            }
        d.r = inv[row];
    };
    /* PF: rounds of D rows further ahead than the registers hold, asked into L2 by one thread at
     * the top of a round (a hint: no bit depends on it). A template flag, because even a zero
     * distance read at run time cost the 16-bit rows' kernel at 4 rows its last registers. */
    const int pf = PF ? a.prefetch : 0;
    auto prefetch_round = [&](int64_t row0, int64_t dcy, int64_t end) {
        if (tid != 0)
            return;
        for (int j = 0; j < D && row0 + j * dcy < end; j++) {
            const int64_t at = (row0 + j * dcy) * a.n2;
            prefetch_l2_bulk(g + at, (unsigned)(a.n2 * (int64_t)sizeof(TW)));
            prefetch_l2_bulk(x + at, (unsigned)(a.n2 * (int64_t)sizeof(TX)));
        }
    };
    A acc[NV][VEC];
    /* Rows rows[0..n) (n <= G, buffers cur[0..n)): their sums share one barrier; the reduction's
     * slot alternates between steps (a slot is rewritten only after every thread has passed the
     * barrier of the step between). Then grad_input, and the rows added to acc in row order.
     * 16-bit rows are widened from their 32-bit words (elem_acc) and grad_input's difference is
     * one fma: about a fifth fewer instructions a 16-bit element (by the SASS before), and 2-4 %
     * faster on an H200 at part_grad 16 (bench_kernels).
     * SUMS_EARLY (16-bit x): the row's dot takes g * x once for the dot and the column sums (w *
     * (g * x)), one multiply an element fewer than forming it again after the barrier: 4-5 %
     * faster at bf16 16384 x 8192 on an H200. 32-bit rows lost 7 % that way (a
     * longer stretch before the barrier), so they keep the column sums after it. The column sums'
     * bits are the same either way; the dot's are each kernel's own, the same in every variant. */
    constexpr bool SUMS_EARLY = sizeof(TX) == 2;
    int slot = 0;
    auto step = [&](const int64_t *rows, const Row *const *cur, int n) {
        A d[G];
#pragma unroll
        for (int k = 0; k < G; k++) {
            d[k] = 0;
            if (k < n) {
#pragma unroll
                for (int v = 0; v < NV; v++)
                    if (idx[v] >= 0) {
#pragma unroll
                        for (int e = 0; e < VEC; e++) {
                            const A gf = elem_acc<A>(cur[k]->g[v], e),
                                    xf = elem_acc<A>(cur[k]->x[v], e);
                            if constexpr (SUMS_EARLY) {
                                const A gx = gf * xf;
                                d[k] += to_acc<A>(wv[v][e]) * gx;
                                acc[v][e] += gx * cur[k]->r;
                            } else {
                                d[k] += to_acc<A>(wv[v][e]) * gf * xf;
                            }
                        }
                    }
            }
            d[k] = warp_sum(d[k]);
            if (lane == 0)
                red[slot][k][tid >> 5] = d[k];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < G; k++)
            d[k] = warp_sum(lane < nw ? red[slot][k][lane] : A(0));
        slot ^= 1;
#pragma unroll
        for (int k = 0; k < G; k++) {
            if (k >= n)
                break;
            const Row &rw = *cur[k];
            const A r = rw.r;
            const A c = d[k] * inv_n * r * r;
            TX *__restrict__ gir = static_cast<TX *>(a.gi) + rows[k] * a.n2;
#pragma unroll
            for (int v = 0; v < NV; v++)
                if (idx[v] >= 0) {
                    A of[VEC];
                    TX out[VEC];
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        const A gf = elem_acc<A>(rw.g[v], e), xf = elem_acc<A>(rw.x[v], e);
                        of[e] = r * fma(-xf, c, to_acc<A>(wv[v][e]) * gf);
                        if constexpr (!SUMS_EARLY)
                            acc[v][e] += gf * xf * r;
                    }
                    pack_vec(of, out);
                    stg(gir + idx[v], out);
                }
        }
    };

    /* kx == 1: cluster c owns part_grad blocks c, c + clusters, ... (one each when the grid
     * covers them). kx > 1: each cluster takes one kx-th of one part_grad block, in the order in
     * which the clusters claim their work from chain[0] (k-th of block p: claim k * active + p),
     * so that the cluster that waits for k - 1's sums below only waits for one that is running. */
    const int kx = a.kx;
    __shared__ int64_t claimed;
    int64_t first_item = blockIdx.x / (unsigned)cy, items = a.active, stride = gridDim.x / cy;
    if (kx > 1) {
        if (srank == 0 && tid == 0)
            claimed = (int64_t)atomicAdd(a.chain, 1u);
        if (cy > 1)
            cg::this_cluster().sync();
        else
            __syncthreads();
        first_item = cy > 1 ? *cg::this_cluster().map_shared_rank(&claimed, 0) : claimed;
        items = a.active * kx;
        stride = items; /* one item */
    }
    for (int64_t item = first_item; item < items; item += stride) {
        const int64_t p = kx > 1 ? item % a.active : item, k = kx > 1 ? item / a.active : 0;
        const int64_t sub = (a.B + kx - 1) / kx; /* the rows of each of the kx clusters */
        const int64_t pe = p * a.B + a.B < a.n1 ? p * a.B + a.B : a.n1;
        const int64_t rb = p * a.B + k * sub;
        const int64_t re = rb + sub < pe ? rb + sub : pe;
#pragma unroll
        for (int v = 0; v < NV; v++)
#pragma unroll
            for (int e = 0; e < VEC; e++)
                acc[v][e] = 0;
        /* D rows in registers; unrolled by D so that every buffer index is a constant and the
         * rows stay in registers. Step j of a round reduces buffers j*G .. j*G+G-1; the loads it
         * issues first (D - G rows ahead) refill the buffers that the previous step freed. */
        Row buf[D];
        const int64_t first = rb + srank, dcy = (int64_t)cy;
        for (int k = 1; k < pf; k++)
            prefetch_round(first + k * D * dcy, dcy, re);
#pragma unroll
        for (int j = 0; j < D - G; j++)
            if (first + j * dcy < re)
                load(first + j * dcy, buf[j]);
        for (int64_t row = first; row < re; row += D * dcy) {
            if (pf)
                prefetch_round(row + pf * D * dcy, dcy, re);
#pragma unroll
            for (int j = 0; j < D; j += G) {
                const int64_t r0 = row + j * dcy;
                if (r0 >= re)
                    break;
#pragma unroll
                for (int k = 0; k < G; k++)
                    if (r0 + (D - G + k) * dcy < re)
                        load(r0 + (D - G + k) * dcy, buf[(j + D - G + k) % D]);
                int64_t rows[G];
                const Row *cur[G];
                int n = 0;
#pragma unroll
                for (int k = 0; k < G; k++) {
                    rows[k] = r0 + k * dcy;
                    cur[k] = &buf[j + k];
                    n += rows[k] < re;
                }
                step(rows, cur, n);
                if (r0 == first)
                    TL_MAIN(FIRST_STEP);
            }
        }
        TL_MAIN(ROWS_DONE);
        A *pgr = static_cast<A *>(a.pg) + p * a.n2;
        /* Chained: this rank's columns of part_grad block p hold clusters 0..k-1's sums once
         * chain[1 + p * cy + srank] counts k; add this cluster's after them, then count it. */
        unsigned *ctr = a.chain + 1 + p * cy + srank;
        if (k > 0) {
            if (tid == 0)
                while (ld_acquire(ctr) < (unsigned)k)
                    __nanosleep(64);
            __syncthreads();
        }
        if (cy == 1) {
#pragma unroll
            for (int v = 0; v < NV; v++)
                if (idx[v] >= 0) {
                    if (k > 0) {
                        A before[VEC];
                        ld_l2(pgr + idx[v], before);
#pragma unroll
                        for (int e = 0; e < VEC; e++)
                            acc[v][e] = before[e] + acc[v][e];
                    }
                    stg(pgr + idx[v], acc[v]);
                }
        } else {
            A *accs = reinterpret_cast<A *>(dyn);
#pragma unroll
            for (int v = 0; v < NV; v++)
                if (idx[v] >= 0)
                    st(accs + idx[v], acc[v]);
            cluster_rank_sums(accs, pgr, cols, srank, tid, T, cy, k > 0, tl_marks());
        }
        if (kx > 1 && k < kx - 1) {
            __threadfence(); /* every thread's part_grad writes (the combine's last barrier does
                              * not order them) before the count */
            __syncthreads();
            if (tid == 0)
                atomicAdd(ctr, 1u);
        }
    }
    if (kx > 1)
        pdl_trigger();
    TL_MAIN(EXIT);
}

template <typename TX, typename TW, int NV, int D> static BwdKernel bwd_rows_at(bool pf)
{
    if constexpr (!BwdRowsFit<TX, TW, NV, D>::ok)
        return NULL; /* never compiled: the layout does not hold D rows at this NV */
    else if constexpr (KCUDA_BWD_PF_OK(NV, D))
        return pf ? rms_bwd_rows<TX, TW, NV, D, true> : rms_bwd_rows<TX, TW, NV, D, false>;
    else
        return pf ? NULL : rms_bwd_rows<TX, TW, NV, D, false>;
}

/* The register backward holding `rows` rows (2, 3, 4, 6 or 8: rms_norm_layout.c's bwd_rows_ok),
 * asking rows into L2 when pf; NULL where it is not compiled. */
template <typename TX, typename TW, int NV> static BwdKernel bwd_rows_kernel(int rows, bool pf)
{
    if constexpr (sizeof(TX) > 4 || sizeof(TW) > 4)
        return NULL; /* the layout takes register rows only for x and w of at most 4 bytes */
    else
        return rows <= 2   ? bwd_rows_at<TX, TW, NV, 2>(pf)
               : rows == 3 ? bwd_rows_at<TX, TW, NV, 3>(pf)
               : rows == 4 ? bwd_rows_at<TX, TW, NV, 4>(pf)
               : rows == 6 ? bwd_rows_at<TX, TW, NV, 6>(pf)
               : rows == 8 ? bwd_rows_at<TX, TW, NV, 8>(pf)
                           : NULL;
}

template <typename TX, typename TW> BwdKernel bwd_rows_kernel_for(int nv, int rows, bool pf)
{
    return nv == 1   ? bwd_rows_kernel<TX, TW, 1>(rows, pf)
           : nv == 2 ? bwd_rows_kernel<TX, TW, 2>(rows, pf)
           : nv == 4 ? bwd_rows_kernel<TX, TW, 4>(rows, pf)
                     : bwd_rows_kernel<TX, TW, 8>(rows, pf);
}

} /* namespace kcuda */

/* The file of x dtype TX: the register backward for (TX, w) with w of every dtype (NULL for x or w
 * of 8 bytes), and, in timeline builds, the stamps of its kernels' last launch (name: its suffix;
 * block 0's entry stamp into *entry, 0 before any launch of this file's kernels). */
#define KCUDA_BWD_ROWS_INST(TX)                                                                    \
    namespace kcuda                                                                                \
    {                                                                                              \
    template BwdKernel bwd_rows_kernel_for<TX, __nv_bfloat16>(int, int, bool);                     \
    template BwdKernel bwd_rows_kernel_for<TX, __half>(int, int, bool);                            \
    template BwdKernel bwd_rows_kernel_for<TX, float>(int, int, bool);                             \
    template BwdKernel bwd_rows_kernel_for<TX, double>(int, int, bool);                            \
    }
#ifdef KCUDA_TIMELINE
#define KCUDA_BWD_ROWS_FILE(TX, name)                                                              \
    KCUDA_BWD_ROWS_INST(TX)                                                                        \
    extern "C" int baton__kcuda_rms_bwd_timeline_rows_##name(                                      \
        unsigned long long(*out)[KCUDA_TL_SLOTS], unsigned long long *entry)                       \
    {                                                                                              \
        cudaError_t e = cudaMemcpyFromSymbol(entry, kcuda::tl_main, sizeof *entry,                 \
                                             KCUDA_TL_ENTRY * sizeof *entry);                      \
        if (e == cudaSuccess && out)                                                               \
            e = cudaMemcpyFromSymbol(out, kcuda::tl_main,                                          \
                                     sizeof(unsigned long long) * KCUDA_TL_MAX_BLOCKS *            \
                                         KCUDA_TL_SLOTS);                                          \
        return (int)e;                                                                             \
    }
#else
#define KCUDA_BWD_ROWS_FILE(TX, name) KCUDA_BWD_ROWS_INST(TX)
#endif

#endif /* BATON_KCUDA_RMS_NORM_BWD_ROWS_CUH */
