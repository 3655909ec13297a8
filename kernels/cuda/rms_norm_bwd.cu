/* rms_norm_bwd.cu: the RMSNorm backward on CUDA, for the 16 (x, weight) dtype pairs: grad_input in
 * one pass over grad_output and x, a deterministic grad_weight through the part_grad buffer that
 * kernels/descriptors.h defines, the split two-kernel backward for few long rows, and their
 * launch; rms_norm_layout.c chooses the layout. rms_norm_grad_weight (grad_weight from a given
 * part_grad) runs the same column sum. No allocation, no synchronisation. */
#include "kernels/cuda/kcuda_common.cuh"

#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/rms_norm_cuda.h"
#include "kernels/cuda/rms_norm_layout.h"
#include "kernels/cuda/rms_norm_tune.h"
#include "kernels/desc_check.h"
#include "kernels/descriptors.h"

namespace kcuda
{

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
    int stages;      /* staged kernel: rows in flight per block (1..4) */
    int kx;          /* register backward: clusters per part_grad block (chained when > 1) */
    int prefetch;    /* register backward (PF kernels): rounds of rows asked into L2 ahead */
    unsigned *chain; /* kx > 1: kcuda_rms_chain_bytes of zeroed counters (in grad_weight) */
};

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

/* ---- the timeline (timeline builds only: rms_norm_cuda.h) ----------------------------------- */
#ifdef KCUDA_TIMELINE
static __device__ unsigned long long tl_main[KCUDA_TL_MAX_BLOCKS][KCUDA_TL_SLOTS];
static __device__ unsigned long long tl_colsum[KCUDA_TL_MAX_BLOCKS][KCUDA_TL_SLOTS];
__device__ __forceinline__ void tl_stamp(unsigned long long (*tl)[KCUDA_TL_SLOTS], int slot)
{
    if (threadIdx.x != 0 || blockIdx.x >= KCUDA_TL_MAX_BLOCKS)
        return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    tl[blockIdx.x][slot] = t;
    if (slot == KCUDA_TL_ENTRY) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        tl[blockIdx.x][KCUDA_TL_SM] = sm | (unsigned long long)gridDim.x << 32;
    }
}
#define TL_MAIN(slot)   tl_stamp(tl_main, KCUDA_TL_##slot)
#define TL_COLSUM(slot) tl_stamp(tl_colsum, KCUDA_TL_##slot)
struct tl_marks {
    __device__ void synced() const
    {
        TL_MAIN(SYNCED);
    }
    __device__ void combined() const
    {
        TL_MAIN(COMBINED);
    }
};
#else
#define TL_MAIN(slot)   ((void)0)
#define TL_COLSUM(slot) ((void)0)
typedef no_marks tl_marks;
#endif

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

/* grad_weight[j] = the sum over p of part_grad[p][j], in one fixed shape per column: lane k of
 * KCUDA_COLSUM_LANES adds the rows p = k, k + 8, ... below `active` in order, then the lanes' sums
 * are added in lane order. The rows from `active` on hold zeros, which add nothing (a sum that
 * starts at +0 is never -0, so adding +0 leaves its bits), so leaving them out or not gives the
 * same bits: rms_norm_grad_weight sums all P rows of a part_grad whose trailing blocks came back
 * as zeros. The kernels below and the split backward's finish add in this shape. */
#define KCUDA_COLSUM_LANES 8

/* Lane `lane`'s sum of column j, its rows added in row order. BATCH (many rows: part_grad 256 has
 * 32 a lane) loads them KCUDA_COLSUM_BATCH at a time before adding any, so that their latencies
 * overlap: bf16 4096 x 4096's backward at part_grad 256 3 % faster on an H100 and an H200
 * (bench_kernels). A template flag, not a branch: with both loops in one kernel
 * the decode rows' backward lost 0.1-0.2 us. The bits are the same either way. */
#define KCUDA_COLSUM_BATCH 16
template <bool BATCH, typename A>
__device__ __forceinline__ A colsum_lane(const A *pg, int64_t n2, int64_t j, int lane,
                                         int64_t active)
{
    A s = 0;
    if constexpr (!BATCH) {
#pragma unroll 4
        for (int64_t p = lane; p < active; p += KCUDA_COLSUM_LANES)
            s += pg[p * n2 + j];
    } else {
        constexpr int64_t L = KCUDA_COLSUM_LANES, NB = KCUDA_COLSUM_BATCH;
        int64_t p = lane;
        for (; p + (NB - 1) * L < active; p += NB * L) {
            A v[NB];
#pragma unroll
            for (int k = 0; k < NB; k++)
                v[k] = pg[(p + k * L) * n2 + j];
#pragma unroll
            for (int k = 0; k < NB; k++)
                s += v[k];
        }
        for (; p < active; p += L)
            s += pg[p * n2 + j];
    }
    return s;
}

/* Adds the lanes' sums in lane order: lane(k) is lane k's sum. */
template <typename A, typename F> __device__ __forceinline__ A colsum_combine(F lane)
{
    A t = 0;
#pragma unroll
    for (int k = 0; k < KCUDA_COLSUM_LANES; k++)
        t += lane(k);
    return t;
}

/* Column j of a 32 x 8 block: lane (lx, ly) is colsum_lane ly of column j0 + lx. The blocks from
 * `active` on hold no rows: this kernel writes their zeros (the main kernel launches no block for
 * them) and leaves them out of the sum. */
template <typename A, typename TW, bool BATCH>
__global__ void __launch_bounds__(256) rms_colsum_kernel(A *__restrict__ pg, TW *__restrict__ gw,
                                                         int64_t P, int64_t active, int64_t n2)
{
    static_assert(KCUDA_COLSUM_LANES == 8, "a block is 32 columns x KCUDA_COLSUM_LANES lanes");
    __shared__ A part[KCUDA_COLSUM_LANES][33];
    const int lx = threadIdx.x & 31, ly = threadIdx.x >> 5;
    TL_COLSUM(ENTRY);
    pdl_wait();
    TL_COLSUM(WAITED);
    for (int64_t j0 = (int64_t)blockIdx.x * 32; j0 < n2; j0 += (int64_t)gridDim.x * 32) {
        const int64_t j = j0 + lx;
        A s = 0;
        if (j < n2) {
            s = colsum_lane<BATCH>(pg, n2, j, ly, active);
            for (int64_t p = active + ly; p < P; p += KCUDA_COLSUM_LANES)
                pg[p * n2 + j] = 0;
        }
        part[ly][lx] = s;
        __syncthreads();
        if (ly == 0 && j < n2)
            gw[j] = from_acc<TW>(colsum_combine<A>([&](int k) { return part[k][lx]; }));
        __syncthreads();
    }
    TL_COLSUM(EXIT);
    pdl_trigger();
}

/* The column sum of at most KCUDA_COLSUM_COLS_P part_grad rows (the tutorial's 16; decode rows):
 * a thread per column loads all of its rows before adding any, one round trip to L2 where a
 * lane of rms_colsum_kernel waits for each of its rows in turn, then adds them as the lanes do
 * and the lanes in lane order (the same bits), with no barrier between lanes. bf16 4096 x 4096's
 * backward at part_grad 16 0.2-0.9 us faster on an H100 and an H200 (bench_kernels). */
template <typename A, typename TW>
__global__ void __launch_bounds__(KCUDA_COLSUM_COLS_THREADS)
    rms_colsum_cols(A *__restrict__ pg, TW *__restrict__ gw, int64_t P, int64_t active, int64_t n2)
{
    constexpr int L = KCUDA_COLSUM_LANES;
    static_assert(KCUDA_COLSUM_COLS_P % (2 * L) == 0, "whole rounds of 2 rows a lane");
    TL_COLSUM(ENTRY);
    pdl_wait();
    TL_COLSUM(WAITED);
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n2;
         j += (int64_t)gridDim.x * blockDim.x) {
        A lanes[L];
#pragma unroll
        for (int k = 0; k < L; k++)
            lanes[k] = 0;
#pragma unroll
        for (int p0 = 0; p0 < KCUDA_COLSUM_COLS_P; p0 += 2 * L) {
            if (p0 >= active)
                break;
            /* rows p0 .. p0 + 15: lane k's rows p0 + k and p0 + k + 8, in its order; a row past
             * `active` adds +0, which leaves a lane's bits (see above) */
            A v[2 * L];
#pragma unroll
            for (int i = 0; i < 2 * L; i++)
                v[i] = p0 + i < active ? pg[(p0 + i) * n2 + j] : A(0);
#pragma unroll
            for (int i = 0; i < 2 * L; i++)
                lanes[i % L] += v[i];
        }
        for (int64_t p = active; p < P; p++)
            pg[p * n2 + j] = 0;
        gw[j] = from_acc<TW>(colsum_combine<A>([&](int k) { return lanes[k]; }));
    }
    TL_COLSUM(EXIT);
    pdl_trigger();
}

/* The column sum for `active` part_grad blocks: batched loads where the lanes have many rows. */
template <typename A, typename TW>
using ColsumKernel = void (*)(A *, TW *, int64_t, int64_t, int64_t);
template <typename A, typename TW> static ColsumKernel<A, TW> colsum_kernel_for(int64_t active)
{
    return active >= KCUDA_COLSUM_LANES * KCUDA_COLSUM_BATCH ? rms_colsum_kernel<A, TW, true>
                                                             : rms_colsum_kernel<A, TW, false>;
}

/* Launches the column sum of part_grad's P rows (`active` of them with rows) into grad_weight on
 * kcuda_rms_colsum_grid's grid: the backward's second kernel and rms_norm_grad_weight alike. */
template <typename A, typename TW>
static int launch_colsum(const baton_exec_ctx *ctx, const char *name, long long grid, A *pg, TW *gw,
                         int64_t P, int64_t active, int64_t n2)
{
    if (P <= KCUDA_COLSUM_COLS_P)
        return launch(ctx, name, rms_colsum_cols<A, TW>, (unsigned)grid,
                      (unsigned)KCUDA_COLSUM_COLS_THREADS, 0, 1, pg, gw, P, active, n2);
    return launch(ctx, name, colsum_kernel_for<A, TW>(active), (unsigned)grid, 256u, 0, 1, pg, gw,
                  P, active, n2);
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

/* ---- launch ---------------------------------------------------------------------------------- */

typedef void (*BwdKernel)(BwdArgs);

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

template <typename TX, typename TW> static BwdKernel bwd_kernel_for(const kcuda_rms_layout &L)
{
    constexpr int VX = 16 / (int)sizeof(TX);
    if (L.mode == KCUDA_RMS_ROWS) {
        const bool pf = L.variant.prefetch > 0;
        return L.nv == 1   ? bwd_rows_kernel<TX, TW, 1>(L.stages, pf)
               : L.nv == 2 ? bwd_rows_kernel<TX, TW, 2>(L.stages, pf)
               : L.nv == 4 ? bwd_rows_kernel<TX, TW, 4>(L.stages, pf)
                           : bwd_rows_kernel<TX, TW, 8>(L.stages, pf);
    }
    if (L.mode == KCUDA_RMS_STAGED)
        return rms_bwd_staged<TX, TW>;
    if (L.vec == 1)
        return L.mode == KCUDA_RMS_STREAM ? rms_bwd_kernel<TX, TW, 1, 4, true>
                                          : rms_bwd_kernel<TX, TW, 1, 4, false>;
    return rms_bwd_kernel<TX, TW, VX, 2, true>;
}

/* The split backward: the partial-dot kernel, then the finishing kernel. */
template <typename TX, typename TW>
static int bwd_split(const baton_exec_ctx *ctx, void **buffers, const baton_rms_norm_desc &d,
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

/* A layout that names a kernel this build does not compile: the layout and the kernel's
 * BwdRowsFit disagree, a bug to report rather than a launch of NULL. */
static int no_kernel(const baton_exec_ctx *ctx, const kcuda_rms_layout &L)
{
    return ctx_fail(ctx, BATON_ENOTSUP,
                    "rms_norm_bwd: no kernel for mode %d, %d vectors per thread, %d threads, %d "
                    "rows held (the layout and rms_norm_bwd.cu disagree: please report it)",
                    L.mode, L.nv, L.threads, L.stages);
}

/* cudaOccupancyMaxActiveClusters for the register backward at cluster size cy (0 on error). */
struct ClusterAsk {
    BwdKernel k;
    int threads;
    size_t smem;
    cudaStream_t stream;
};

static int clusters_at(void *u, int cy)
{
    const ClusterAsk *q = static_cast<const ClusterAsk *>(u);
    int n = 0;
    if (max_active_clusters((const void *)q->k, (unsigned)cy, q->threads, q->smem, cy, q->stream,
                            &n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

/* kcuda_rms_fit_cy for L (the register backward) with the CUDA runtime's answers for the kernel of
 * the layout's own rows held, remembered per kernel for the last (device, threads, shared memory,
 * blocks, rows per block) asked: only a new shape pays the occupancy queries. Returns 0, or
 * BATON_ECUDA with the reason in ctx's errbuf. */
template <typename TX, typename TW>
static int bwd_fit_cy(const baton_exec_ctx *ctx, const baton_rms_norm_desc &d,
                      kcuda_rms_device *dev, size_t smem_max, kcuda_rms_layout *L)
{
    /* The kernel of the layout's own rows held, and its shared memory at any cy > 1. */
    kcuda_rms_layout Lf = *L;
    Lf.stages = L->fit_stages;
    Lf.variant = kcuda_rms_variant{0, 0, 0}; /* the layout's own kernel: no variant moves cy */
    kcuda_rms_bwd_set_cy(&Lf, &d, 1, 2);
    const BwdKernel k = bwd_kernel_for<TX, TW>(Lf);
    if (!k)
        return no_kernel(ctx, Lf);
    const size_t smem = Lf.smem;
    const int devno = device_of(ctx);
    /* Everything the fit reads besides the kernel: the rows per part_grad block (to 1024: the
     * chain's cap is at most 16 * KCUDA_BWD_CHAIN_MAX * 2 * 8), whether and how the chain may
     * run. The answer is (kx - 1) * 32 + cy. */
    const int64_t bc = L->B < 1024 ? L->B : 1024;
    const int64_t need = L->fit_blocks > L->active ? L->fit_blocks : L->active;
    const bool keyable = devno >= 0 && devno < 64 && L->threads % 32 == 0 &&
                         L->threads <= KCUDA_MAX_THREADS && smem / 16 < (1u << 14) &&
                         need < (1 << 13) && L->kx >= 0 && L->kx <= KCUDA_BWD_CHAIN_MAX;
    const uint64_t key =
        keyable ? (1ull << 55) | (uint64_t)devno << 49 | (uint64_t)(L->threads / 32 - 1) << 45 |
                      (uint64_t)(smem / 16) << 31 | (uint64_t)need << 18 | (uint64_t)(bc - 1) << 8 |
                      (uint64_t)(dev->max_cluster > 8) << 7 | (uint64_t)(L->chain_ok != 0) << 6 |
                      (uint64_t)L->kx << 3
                : 0;
    int got = 0;
    if (fit_get((const void *)k, key, &got)) {
        kcuda_rms_bwd_set_cy(L, &d, got / 32 + 1, got % 32);
        return 0;
    }
    /* Clusters above 8 need the non-portable attribute before the runtime can count them. */
    int rc = prepare(k, ctx, "rms_norm_bwd", dev->max_cluster, (long long)dev->max_cluster,
                     L->threads, smem, smem_max, true, false);
    if (rc < 0)
        return BATON_ECUDA;
    if (rc > 0)
        dev->max_cluster = 8;
    int per_sm = 0;
    cudaError_t e = occupancy(ctx, (const void *)k, L->threads, smem, &per_sm);
    if (e != cudaSuccess)
        return ctx_fail(ctx, BATON_ECUDA,
                        "cudaOccupancyMaxActiveBlocksPerMultiprocessor(rms_norm_bwd, %d threads) "
                        "failed: %s",
                        L->threads, cudaGetErrorString(e));
    ClusterAsk q = {k, L->threads, smem, ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0};
    const int cy = kcuda_rms_fit_cy(L, &d, dev, per_sm, clusters_at, &q);
    fit_put((const void *)k, key, (L->kx - 1) * 32 + cy);
    return 0;
}

template <typename TX, typename TW>
static int bwd_typed(const baton_exec_ctx *ctx, void **buffers, const baton_rms_norm_desc &d,
                     int64_t unsharded, const kcuda_rms_cfg *o, kcuda_rms_cfg *chosen)
{
    using A = typename acc_of<TX>::type;
    /* buffers: grad_output, invvar, x, weight | grad_input, grad_weight, part_grad */
    const DeviceFacts facts = device_facts(ctx);
    kcuda_rms_device dev;
    dev.sms = facts.sms;
    dev.smem_optin = facts.smem_optin;
    dev.max_cluster = KCUDA_MAX_CLUSTER;
    const size_t smem_max = (size_t)kcuda_rms_smem_max(&dev);
    char why[512];
    kcuda_rms_layout L;
    for (;;) {
        int rc = kcuda_rms_bwd_layout(&d, buffers, &dev, o, &L, why, sizeof why);
        if (rc)
            return ctx_fail(ctx, rc, "%s", why);
        if (!o && ctx && ctx->autotune)
            kcuda_rms_apply_tuned(device_name(ctx), 1, &d, &dev, &L);
        if (unsharded > L.fit_blocks) /* a row shard: cy as the unsharded call fits it */
            L.fit_blocks = unsharded;
        if (L.fit_cy && (rc = bwd_fit_cy<TX, TW>(ctx, d, &dev, smem_max, &L)) != 0)
            return rc;
        if (L.mode == KCUDA_RMS_SPLIT) {
            kcuda_rms_report(&L, chosen);
            return bwd_split<TX, TW>(ctx, buffers, d, L);
        }
        const int cl = L.cx * L.cy;
        const BwdKernel k = bwd_kernel_for<TX, TW>(L);
        if (!k)
            return no_kernel(ctx, L);
        rc = prepare(k, ctx, "rms_norm_bwd", cl, L.grid, L.threads, L.smem, smem_max, L.may_shrink,
                     kcuda_rms_max_carveout(&L));
        if (rc > 0) { /* 16-block clusters cannot run here */
            dev.max_cluster = 8;
            continue;
        }
        if (rc < 0)
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
        a.P = L.P;
        a.B = L.B;
        a.active = L.active;
        a.chunk = L.chunk;
        a.cx = L.cx;
        a.cy = L.cy;
        a.stages = L.stages;
        a.kx = L.mode == KCUDA_RMS_ROWS && L.kx > 1 ? L.kx : 1;
        a.prefetch = L.mode == KCUDA_RMS_ROWS ? L.variant.prefetch : 0;
        a.chain = a.kx > 1 ? static_cast<unsigned *>(buffers[5]) : NULL;
        kcuda_rms_report(&L, chosen);
        const baton_exec_ctx *lc = ctx;
        const baton_exec_ctx c1 = with_pdl(ctx, false);
        if (a.kx > 1) {
            /* The chain's counters, in grad_weight until the column sum writes it. The kernel
             * then waits for the memset as a whole (no programmatic dependent launch). */
            const cudaStream_t st = ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0;
            const size_t bytes = kcuda_rms_chain_bytes(L.active, L.cy);
            const cudaError_t e = cudaMemsetAsync(a.chain, 0, bytes, st);
            if (e != cudaSuccess)
                return ctx_fail(ctx, BATON_ECUDA,
                                "rms_norm_bwd: cudaMemsetAsync of the chain's %zu bytes failed: %s",
                                bytes, cudaGetErrorString(e));
            lc = &c1;
        }
        rc = launch(lc, "rms_norm_bwd", k, (unsigned)L.grid, (unsigned)L.threads, L.smem, cl, a);
        if (rc)
            return rc;
        /* The column sum reads part_grad only after its pdl_wait: its blocks wait on the SMs
         * that the main kernel leaves free (see pdl_trigger there). */
        const baton_exec_ctx c2 = with_pdl(ctx, true);
        return launch_colsum(&c2, "rms_norm_bwd grad_weight", L.colsum_grid, (A *)buffers[6],
                             (TW *)buffers[5], L.P, L.active, d.n2);
    }
}

template <typename TX>
static int bwd_w(const baton_exec_ctx *ctx, void **b, const baton_rms_norm_desc &d, int64_t u,
                 const kcuda_rms_cfg *o, kcuda_rms_cfg *c)
{
    switch (d.w_dtype) {
    case BATON_DTYPE_BF16: return bwd_typed<TX, __nv_bfloat16>(ctx, b, d, u, o, c);
    case BATON_DTYPE_F16: return bwd_typed<TX, __half>(ctx, b, d, u, o, c);
    case BATON_DTYPE_F32: return bwd_typed<TX, float>(ctx, b, d, u, o, c);
    default: return bwd_typed<TX, double>(ctx, b, d, u, o, c);
    }
}

} /* namespace kcuda */

using namespace kcuda;

extern "C" int kcuda_rms_norm_bwd_cfg(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                      size_t len, const kcuda_rms_cfg *o, kcuda_rms_cfg *chosen)
{
    baton_rms_norm_desc d;
    int64_t u = 0;
    char why[512];
    const int rc =
        kcuda_rms_check("rms_norm_bwd", buffers, 7, opaque, len, 1, o, &d, &u, why, sizeof why);
    if (rc)
        return ctx_fail(ctx, rc, "%s", why);
    switch (d.x_dtype) {
    case BATON_DTYPE_BF16: return bwd_w<__nv_bfloat16>(ctx, buffers, d, u, o, chosen);
    case BATON_DTYPE_F16: return bwd_w<__half>(ctx, buffers, d, u, o, chosen);
    case BATON_DTYPE_F32: return bwd_w<float>(ctx, buffers, d, u, o, chosen);
    default: return bwd_w<double>(ctx, buffers, d, u, o, chosen);
    }
}

extern "C" int kcuda_rms_norm_bwd(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                  size_t len)
{
    return kcuda_rms_norm_bwd_cfg(ctx, buffers, opaque, len, NULL, NULL);
}

/* grad_weight from a part_grad: the backward's column sum kernel over all P rows (none to zero,
 * so the input is only read). */
template <typename A>
static int grad_weight_w(const baton_exec_ctx *ctx, void **buffers,
                         const baton_rms_grad_weight_desc &d, long long grid)
{
    const char *name = "rms_norm_grad_weight";
    A *pg = static_cast<A *>(buffers[0]);
    const int64_t P = d.part_grad_size, n2 = d.n2;
    switch (d.w_dtype) {
    case BATON_DTYPE_BF16:
        return launch_colsum(ctx, name, grid, pg, (__nv_bfloat16 *)buffers[2], P, P, n2);
    case BATON_DTYPE_F16: return launch_colsum(ctx, name, grid, pg, (__half *)buffers[2], P, P, n2);
    case BATON_DTYPE_F32: return launch_colsum(ctx, name, grid, pg, (float *)buffers[2], P, P, n2);
    default: return launch_colsum(ctx, name, grid, pg, (double *)buffers[2], P, P, n2);
    }
}

extern "C" int kcuda_rms_norm_grad_weight(const baton_exec_ctx *ctx, void **buffers,
                                          const char *opaque, size_t len)
{
    const char *name = "rms_norm_grad_weight";
    baton_rms_grad_weight_desc d;
    const int rc = rms_grad_weight_desc_read(ctx, opaque, len, &d);
    if (rc)
        return rc;
    if (!buffers || !buffers[0] || !buffers[1] || !buffers[2])
        return ctx_fail(ctx, BATON_EINVAL, "%s: a buffer (part_grad, weight, grad_weight) is NULL",
                        name);
    const long long grid = kcuda_rms_colsum_grid(d.n2, d.part_grad_size, device_facts(ctx).sms);
    return d.pg_dtype == BATON_DTYPE_F32 ? grad_weight_w<float>(ctx, buffers, d, grid)
                                         : grad_weight_w<double>(ctx, buffers, d, grid);
}

#ifdef KCUDA_TIMELINE
extern "C" int kcuda_rms_bwd_timeline(unsigned long long (*main)[KCUDA_TL_SLOTS], int *n_main,
                                      unsigned long long (*colsum)[KCUDA_TL_SLOTS], int *n_colsum)
{
    const size_t bytes = sizeof(unsigned long long) * KCUDA_TL_MAX_BLOCKS * KCUDA_TL_SLOTS;
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaMemcpyFromSymbol(main, kcuda::tl_main, bytes);
    if (e == cudaSuccess)
        e = cudaMemcpyFromSymbol(colsum, kcuda::tl_colsum, bytes);
    if (e != cudaSuccess)
        return (int)e;
    /* every block records its grid's size beside its SM */
    *n_main = (int)(main[0][KCUDA_TL_SM] >> 32);
    *n_colsum = (int)(colsum[0][KCUDA_TL_SM] >> 32);
    return 0;
}
#endif
