/* decoder_softmax.cu: softmax over the last dimension on CUDA, a kernel per shape class: short rows
 * a warp or a group of lanes each; rows held in registers, or in registers and shared memory, of
 * one block or a cluster a row; past a wave, slices in shared memory, several blocks a SM; rows
 * too long for those, read twice through L2; a few long rows over all SMs. Each reads a row's
 * 16-byte body in vectors and any values either side one at a time (rows of any length, at any
 * offset), and sums in one fixed order: the same bits every run. */
#include "kernels/cuda/decoder_common.cuh"

namespace kcuda
{
namespace dec
{

/* Maximum over the W lanes of a group (W a power of two up to 32, lanes of a group adjacent; W
 * the same for every lane, all of which take part), in one xor tree; every lane gets it. */
template <typename A> __device__ __forceinline__ A lanes_max(A v, int W)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        if (o < W) {
            const A t = __shfl_xor_sync(0xffffffffu, v, o);
            v = t > v ? t : v;
        }
    return v;
}

/* Maximum over the warp; every lane gets it. */
template <typename A> __device__ __forceinline__ A warp_max(A v)
{
    return lanes_max(v, 32);
}

/* Max over the block (blockDim.x a multiple of 32); every thread gets it. */
template <typename A> __device__ __forceinline__ A block_max(A v, A *red)
{
    v = warp_max(v);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0)
        red[wid] = v;
    __syncthreads();
    A m = red[0];
    for (int i = 1; i < nw; i++)
        m = red[i] > m ? red[i] : m;
    return m;
}

/* Block per row; each thread adds its strided elements in order, then a fixed tree. For f64 rows
 * too long for the other kernels' registers (x and y at different offsets from a 16-byte boundary
 * took it too, at 52x the copy: now the warp and read-twice kernels' instances for that). */
template <typename T>
__global__ void __launch_bounds__(1024) softmax_kernel(const T *x, T *y, long long N)
{
    using A = typename Acc<T>::A;
    __shared__ A red[32];
    const T *xr = x + blockIdx.x * N;
    T *yr = y + blockIdx.x * N;
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    A mx = -INFINITY;
    for (long long j = threadIdx.x; j < N; j += blockDim.x) {
        const A v = ld_a<A>(xr[j]);
        mx = v > mx ? v : mx;
    }
    mx = block_max<A>(mx, red);
    A s = 0;
    for (long long j = threadIdx.x; j < N; j += blockDim.x)
        s += exp(ld_a<A>(xr[j]) - mx);
    s = block_sum<A>(s, red);
    const A inv = (A)1 / s;
    for (long long j = threadIdx.x; j < N; j += blockDim.x)
        yr[j] = from_acc<T>(exp(ld_a<A>(xr[j]) - mx) * inv);
}

/* Vectors a thread of softmax_smem_kernel holds in registers: 16 values (4 f32 vectors, 2 of the
 * others), so that 1024 threads fit one block a SM without spilling. */
template <typename T> __host__ __device__ constexpr int smx_reg_vpt()
{
    return sizeof(T) == 4 ? 4 : 2;
}

/* exp(v - m) as the online softmax forms it, the cheapest way each accumulator allows: f32 in
 * base 2 against the maximum scaled once, m2 = m log2(e), so that a term is one FFMA and the
 * special-function unit's 2^x (the subtraction and the multiply were two instructions a value,
 * and the sums the 64 rows' last loads wait for are bound by the instructions issued); f64
 * through exp.
 * Every term, rescale and merge of a row is formed against the same rounded m2 (a rescale or a
 * merge is 2^(m2_a - m2_b)), so its rounding scales the sum and every output's numerator alike
 * and cancels in y = e / sum. */
template <typename A> struct SoftExp {
    static __device__ __forceinline__ A scale(A m)
    {
        return m;
    }
    static __device__ __forceinline__ A term(A v, A m2)
    {
        return exp(v - m2);
    }
    static __device__ __forceinline__ A ratio(A m2a, A m2b)
    {
        return exp(m2a - m2b);
    }
};
template <> struct SoftExp<float> {
    static constexpr float L2E = 1.4426950408889634f;
    static __device__ __forceinline__ float scale(float m)
    {
        return m * L2E;
    }
    static __device__ __forceinline__ float term(float v, float m2)
    {
        return ex2_approx(fmaf(v, L2E, -m2));
    }
    static __device__ __forceinline__ float ratio(float m2a, float m2b)
    {
        return ex2_approx(m2a - m2b);
    }
};

/* A sum s of exp(x - m) as a sum of exp(x - to), to >= m (0 where m is -inf: no values). */
template <typename A> __device__ __forceinline__ A sum_at(A m, A s, A to)
{
    using X = SoftExp<A>;
    return m == -INFINITY ? (A)0 : s * X::ratio(X::scale(m), X::scale(to));
}

/* One value of y = exp(x - mx) / sum, from mx2 = SoftExp scale of mx and inv = 1 / sum. */
template <typename A, typename T> __device__ __forceinline__ T soft_val(T x, A mx2, A inv)
{
    return from_acc<T>(SoftExp<A>::term(ld_a<A>(x), mx2) * inv);
}

/* One vector of y (soft_val). */
template <typename A, typename T>
__device__ __forceinline__ U16<T> soft_out(const U16<T> &u, A mx2, A inv)
{
    U16<T> o;
#pragma unroll
    for (int e = 0; e < U16<T>::E; e++)
        o.v[e] = soft_val<A>(u.v[e], mx2, inv);
    return o;
}

/* E values into a running maximum m (m2 = SoftExp scale of it) and a sum s of exp(x - m), s
 * rescaled when m grows: a vector's (online_take), or one value at a time (edges_take). */
template <typename A, int E>
__device__ __forceinline__ void online_take_vals(const A (&v)[E], A &m, A &m2, A &s)
{
    using X = SoftExp<A>;
    A vm = v[0]; /* fmax ignores a NaN as the compare-and-select did, in one instruction */
#pragma unroll
    for (int e = 1; e < E; e++)
        vm = fmax(vm, v[e]);
    if (vm > m) { /* rescale the sum to the new maximum (0 while it was -inf) */
        const A n2 = X::scale(vm);
        s *= X::ratio(m2, n2);
        m = vm;
        m2 = n2;
    }
    if (m != -INFINITY) /* all -inf so far: nothing to add (exp(-inf - -inf) is NaN) */
#pragma unroll
        for (int e = 0; e < E; e++)
            s += X::term(v[e], m2);
}

/* One vector into a running maximum and sum (online_take_vals). */
template <typename A, typename T>
__device__ __forceinline__ void online_take(const U16<T> &u, A &m, A &m2, A &s)
{
    A v[U16<T>::E];
#pragma unroll
    for (int e = 0; e < U16<T>::E; e++)
        v[e] = ld_a<A>(u.v[e]);
    online_take_vals<A>(v, m, m2, s);
}

/* A row as its 16-byte body and the values either side: h (< E) before x's first 16-byte boundary
 * and t (< E) after its last whole vector. Rows whose bytes are no multiple of 16 start at every
 * offset, and every kernel keeps its 16-byte loads and copies for the body (the loop kernel, a
 * block a row reading it three times a value at a time, took 52x the copy over 7 rows of 1000003
 * f32); its stores are 16 bytes too, at y's own 16-byte boundaries where y sits at another offset
 * (a view: apart_put, in instances of the warp and read-twice kernels of their own, since a branch
 * in the others' stores cost softmax_reg_kernel<float, 8> 40 bytes of spills). */
template <typename T> struct RowSpan {
    const T *x; /* the body's first vector, of x and of y */
    T *y;
    long long nv; /* the body's vectors */
    int h, t;
};
template <typename T>
__device__ __forceinline__ RowSpan<T> row_span(const T *x, T *y, long long row, long long N)
{
    constexpr int E = 16 / (int)sizeof(T);
    const T *xr = x + row * N;
    const int off = (int)((reinterpret_cast<uintptr_t>(xr) & 15) / sizeof(T));
    const int h = (int)min((long long)((E - off) % E), N);
    const long long nv = (N - h) / E;
    return RowSpan<T>{xr + h, y + row * N + h, nv, h, (int)(N - h - nv * E)};
}

/* y at another offset from 16 bytes than x (a view): the body is x's, and y's 16-byte vectors each
 * straddle two of x's. join16(a, b, B) is the 16 bytes from byte B (0 < B < 16) of a then b, by
 * selects over B / 4 that keep every word index constant, so the words stay in registers. */
template <typename T>
__device__ __forceinline__ U16<T> join16(const U16<T> &a, const U16<T> &b, int B)
{
    const uint4 ua = *reinterpret_cast<const uint4 *>(a.v),
                ub = *reinterpret_cast<const uint4 *>(b.v);
    const unsigned sh = 8u * (unsigned)(B & 3);
    auto f = [sh](unsigned lo, unsigned hi) { return __funnelshift_r(lo, hi, sh); };
    const int w = B >> 2;
    const uint4 r =
        w == 0   ? make_uint4(f(ua.x, ua.y), f(ua.y, ua.z), f(ua.z, ua.w), f(ua.w, ub.x))
        : w == 1 ? make_uint4(f(ua.y, ua.z), f(ua.z, ua.w), f(ua.w, ub.x), f(ub.x, ub.y))
        : w == 2 ? make_uint4(f(ua.z, ua.w), f(ua.w, ub.x), f(ub.x, ub.y), f(ub.y, ub.z))
                 : make_uint4(f(ua.w, ub.x), f(ub.x, ub.y), f(ub.y, ub.z), f(ub.z, ub.w));
    U16<T> u;
    *reinterpret_cast<uint4 *>(u.v) = r;
    return u;
}

/* A vector from the lane d above (shfl16_down) or from lane `from` (shfl16_from), all 32 lanes:
 * f, a shuffle, on each of its 32-bit words. */
template <typename T, typename F> __device__ __forceinline__ U16<T> words16(const U16<T> &u, F f)
{
    const uint4 w = *reinterpret_cast<const uint4 *>(u.v);
    U16<T> r;
    *reinterpret_cast<uint4 *>(r.v) = make_uint4(f(w.x), f(w.y), f(w.z), f(w.w));
    return r;
}
template <typename T> __device__ __forceinline__ U16<T> shfl16_down(const U16<T> &u, int d)
{
    return words16(u, [d](unsigned v) { return __shfl_down_sync(0xffffffffu, v, d); });
}
template <typename T> __device__ __forceinline__ U16<T> shfl16_from(const U16<T> &u, int from)
{
    return words16(u, [from](unsigned v) { return __shfl_sync(0xffffffffu, v, from); });
}

/* Output vector j of a body of nv vectors (out; nx: vector j + 1's, where j + 1 < nv) into y's
 * body yb, which starts ob bytes past 16 (0 < ob < 16): the aligned 16 bytes that hold out's last
 * ob bytes and nx's first 16 - ob; the values before the body's first such vector (by vector 0's
 * thread) and after its last (by vector nv - 1's) one at a time. Every other store is whole and
 * aligned, and a warp's are one run (every value stored alone took bf16[1024,32000] to 4.9x the
 * copy). */
template <bool STREAM, typename T>
__device__ __forceinline__ void apart_put(T *yb, long long j, long long nv, int ob,
                                          const U16<T> &out, const U16<T> &nx)
{
    constexpr int E = U16<T>::E;
    const int o = ob / (int)sizeof(T);
    if (j == 0) /* every index constant, predicated: out stays in registers */
#pragma unroll
        for (int e = 0; e < E; e++)
            if (e < E - o)
                yb[e] = out.v[e];
    if (j + 1 < nv) {
        T *const p = yb + (j + 1) * E - o;
        if constexpr (STREAM)
            st16_stream(p, join16(out, nx, 16 - ob));
        else
            st16(p, join16(out, nx, 16 - ob));
    } else
#pragma unroll
        for (int e = 0; e < E; e++)
            if (e >= E - o)
                yb[j * E + e] = out.v[e];
}

/* The row's values before and after its body (edge k of h + t: x[k - h] or the tail's
 * x[nv E + k - h]) into a running maximum m and sum s, a value at a time: edges first, first +
 * step, ... (one each by the first h + t threads of a row's first block, or a warp kernel's lanes
 * in turn; a loop that is not unrolled: the kernels' other threads keep their registers). */
template <typename T> __device__ __forceinline__ long long edge_at(const RowSpan<T> &r, int k)
{
    return k < r.h ? (long long)(k - r.h) : r.nv * (16 / (long long)sizeof(T)) + (k - r.h);
}
template <typename A, typename T>
__device__ __forceinline__ void edges_take(const RowSpan<T> &r, A &m, A &m2, A &s, int first,
                                           int step)
{
#pragma unroll 1
    for (int k = first; k < r.h + r.t; k += step) {
        const A v[1] = {ld_a<A>(r.x[edge_at(r, k)])};
        online_take_vals<A>(v, m, m2, s);
    }
}

/* y of the row's edges, from mx2 = SoftExp scale of the maximum and inv = 1 / sum. */
template <typename A, typename T>
__device__ __forceinline__ void edges_store(const RowSpan<T> &r, A mx2, A inv, int first, int step)
{
#pragma unroll 1
    for (int k = first; k < r.h + r.t; k += step) {
        const long long j = edge_at(r, k);
        r.y[j] = soft_val<A>(r.x[j], mx2, inv);
    }
}

/* The row of a block of a C-block row (C == 1, or an x-cluster of C) and the vectors [lo, hi) of
 * its body that the block takes: equal slices in rank order, the last ones shorter or empty.
 * Threads 0 .. h + t - 1 of rank 0 take an edge each (edge: such a thread): one thread taking them
 * all waited for each value's load in turn, up to 14 round trips before its block's exchange. */
template <typename T> struct RowSlice : RowSpan<T> {
    long long lo, hi;
    bool edge;
};
template <typename T>
__device__ __forceinline__ RowSlice<T> row_slice(const T *x, T *y, long long N, int C,
                                                 long long row)
{
    const int rank = C > 1 ? (int)cg::this_cluster().block_rank() : 0;
    const RowSpan<T> r = row_span(x, y, row, N);
    const long long per = row_of(r.nv + C - 1, C), lo = min(r.nv, rank * per);
    return RowSlice<T>{r, lo, min(r.nv, lo + per), rank == 0 && (int)threadIdx.x < r.h + r.t};
}
/* The block's row: a row a block or a cluster. */
template <typename T>
__device__ __forceinline__ RowSlice<T> row_slice(const T *x, T *y, long long N, int C)
{
    return row_slice(x, y, N, C, (long long)(blockIdx.x / (unsigned)C));
}

/* A slice's edges (RowSlice::edge): the thread's one value, edge threadIdx.x. */
template <typename A, typename T>
__device__ __forceinline__ void edges_take(const RowSlice<T> &sl, A &m, A &m2, A &s)
{
    edges_take<A>(static_cast<const RowSpan<T> &>(sl), m, m2, s, threadIdx.x, blockDim.x);
}
template <typename A, typename T>
__device__ __forceinline__ void edges_store(const RowSlice<T> &sl, A mx2, A inv)
{
    edges_store<A>(static_cast<const RowSpan<T> &>(sl), mx2, inv, threadIdx.x, blockDim.x);
}

/* The row's maximum and sum of exp(x - max) from up to C (<= 8) x nq (<= 32) pairs in one fixed
 * tree: lane q < nq takes pair (r, q) for r = 0 .. C - 1 in order (pair may leave one out: -inf
 * and 0), so every warp that folds them gets the same bits. */
template <typename A, typename F>
__device__ __forceinline__ void fold_pairs(int C, int nq, F &&pair, A &mx, A &sum)
{
    const int lane = threadIdx.x & 31;
    A qm[8], qs[8];
#pragma unroll
    for (int r = 0; r < 8; r++) {
        qm[r] = -INFINITY, qs[r] = 0;
        if (r < C && lane < nq)
            pair(r, lane, qm[r], qs[r]);
    }
    A lm = qm[0];
#pragma unroll
    for (int r = 1; r < 8; r++)
        lm = qm[r] > lm ? qm[r] : lm;
    mx = warp_max<A>(lm);
    A t = 0;
#pragma unroll
    for (int r = 0; r < 8; r++)
        t += sum_at<A>(qm[r], qs[r], mx);
    sum = warp_sum<A>(t);
}

/* Every warp's maximum and sum of a row over a block and the C (<= 8) blocks of its cluster
 * (C == 1: the block alone), by rank and warp: each block's copy, filled by all. */
template <typename A> struct RowPairs {
    A p[8][32][2];
};

/* Before a row_max_sum over a cluster: a peer's shared memory may be written only once the peer
 * has started, so each kernel arrives at the start and row_max_sum waits on it before its first
 * store into a peer (by then long complete). */
__device__ __forceinline__ void cluster_started_arrive()
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

/* The row's maximum mx and sum of exp(x - mx) over a block and the C (<= 8) blocks of its cluster
 * (C == 1: the block alone), from each thread's running maximum m and sum s of exp(x - m): each
 * warp folds its lanes' pairs, and its lane r puts the warp's pair into rank r's table (a store
 * through distributed shared memory); one barrier (the cluster's, or the block's); then every warp
 * folds its own block's table, all C x 32 pairs in one fixed tree, so every block of the cluster
 * gets the same bits. Nothing is read from a peer, so nothing waits for one after the barrier
 * and no block barrier follows it (a copy of the 64-row kernel in graphs: 21.2 us, where warp 0
 * alone reading the peers' pairs and handing them over a block barrier took 21.9, and a bare
 * cluster barrier in place of the exchange 20.3). `wait_started`: false for a block's later rows
 * (softmax_stream_kernel), whose peers have long started. */
template <typename A>
__device__ __forceinline__ void row_max_sum(RowPairs<A> &tab, int C, A m, A s, A &mx, A &sum,
                                            bool wait_started = true)
{
    const A wm = warp_max<A>(m);
    const A ws = warp_sum<A>(sum_at<A>(m, s, wm));
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (C == 1) {
        if (lane == 0)
            tab.p[0][w][0] = wm, tab.p[0][w][1] = ws;
        __syncthreads();
    } else {
        cg::cluster_group cluster = cg::this_cluster();
        if (wait_started)
            asm volatile("barrier.cluster.wait.aligned;" ::
                             : "memory"); /* cluster_started_arrive's */
        if (lane < C) {
            A *to = cluster.map_shared_rank(&tab.p[cluster.block_rank()][w][0], lane);
            to[0] = wm;
            to[1] = ws;
        }
        cluster.sync(); /* release and acquire: every rank's stores are in every table */
    }
    fold_pairs<A>(
        C, (int)(blockDim.x >> 5),
        [&](int r, int q, A &pm, A &ps) { pm = tab.p[r][q][0], ps = tab.p[r][q][1]; }, mx, sum);
}

/* A row read once: C blocks a row (C == 1, or an x-cluster of C), each holding its slice of the
 * row in registers, VPT 16-byte vectors a thread (vector j of the slice at thread j % blockDim.x),
 * with a running maximum and sum a thread; one exchange (row_max_sum) gives every block of the
 * row the same bits, and the result is the same every run; the exponentials are formed again in
 * the stores (8 rows of 128256 f32 over clusters of 8: 6.7 us, where the maximum and then the sum,
 * each over the cluster, with the exponentials kept in registers, took 8.8). The logits of a
 * decode step (128256) take 8 blocks of 1024 threads: one load round, where reading the row three
 * times in a strided loop took 7.6x the copy of its bytes. */
template <typename T, int VPT>
__global__ void __launch_bounds__(1024) softmax_reg_kernel(const T *x, T *y, long long N, int C)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T);
    __shared__ RowPairs<A> tab;
    const RowSlice<T> sl = row_slice(x, y, N, C);
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    if (C > 1)
        cluster_started_arrive();
    U16<T> raw[VPT]; /* every load in flight before the first is used */
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const long long j = sl.lo + (long long)k * blockDim.x + threadIdx.x;
        if (j < sl.hi)
            raw[k] = ld16_stream(sl.x + j * E);
    }
    A m = -INFINITY, m2 = -INFINITY, sum = 0;
    if (sl.edge)
        edges_take<A>(sl, m, m2, sum);
#pragma unroll
    for (int k = 0; k < VPT; k++)
        if (sl.lo + (long long)k * blockDim.x + threadIdx.x < sl.hi)
            online_take<A>(raw[k], m, m2, sum);
    A mx, tot;
    row_max_sum<A>(tab, C, m, sum, mx, tot);
    const A inv = (A)1 / tot, mx2 = SoftExp<A>::scale(mx);
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const long long j = sl.lo + (long long)k * blockDim.x + threadIdx.x;
        if (j < sl.hi)
            st16(sl.y + j * E, soft_out<A>(raw[k], mx2, inv));
    }
    if (sl.edge)
        edges_store<A>(sl, mx2, inv);
}

/* Warps of softmax_warp_kernel's blocks. */
#define SMW_WARPS 8

/* Short rows, W lanes a row (W a power of two: the fewest lanes, up to 32, that hold the row at
 * VPT vectors each; 32 / W rows a warp), at most W * VPT vectors a row,
 * SMW_WARPS warps a block: each lane holds vector j of its row at lane j % W in registers with a
 * running maximum and sum, its W lanes fold them in a fixed shuffle tree (the same bits every
 * run), and nothing waits on a block barrier or shared memory (a block a row of 16 vectors took
 * 7.1x the copy over 65536 rows of 128 bf16: the blocks' launch and barriers, not the bytes; a
 * warp a row 1.40x, half its lanes idle). EDGES: rows may have values outside a 16-byte body
 * (row_span), taken by the row's lanes in turn (by its first lane alone, a view's rows of 128
 * bf16, 8 such values each, took 2.91x the copy); else every row is body, and its address is all
 * the lanes compute before their loads. APART (with EDGES): y at another offset than x, its
 * body's stores realigned (apart_put). */
template <typename T, int VPT, bool EDGES, bool APART = false>
__global__ void __launch_bounds__(SMW_WARPS * 32, APART      ? (VPT == 8 ? 2 : 4)
                                                  : VPT == 1 ? 8
                                                             : 4)
    softmax_warp_kernel(const T *x, T *y, long long rows, long long N, int W)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T);
    const int lane = threadIdx.x & 31, q = lane & (W - 1);
    const long long row =
        ((long long)blockIdx.x * SMW_WARPS + (threadIdx.x >> 5)) * (32 / W) + lane / W;
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    if (row - lane / W >= rows) /* the warp's first row: past it, no lane of the warp has one */
        return;
    const bool live = row < rows; /* a lane past the last row still shuffles */
    RowSpan<T> r{x + row * N, y + row * N, N / E, 0, 0};
    if (EDGES && live)
        r = row_span(x, y, row, N);
    const long long nv = live ? r.nv : 0;
    const bool edge = EDGES && live && q < r.h + r.t; /* lane q takes edges q, q + W, ... */
    U16<T> raw[VPT];
#pragma unroll
    for (int k = 0; k < VPT; k++)
        if (k * W + q < nv)
            raw[k] = ld16_stream(r.x + (long long)(k * W + q) * E);
    A m = -INFINITY, m2 = -INFINITY, sum = 0;
    if (edge)
        edges_take<A>(r, m, m2, sum, q, W);
#pragma unroll
    for (int k = 0; k < VPT; k++)
        if (k * W + q < nv)
            online_take<A>(raw[k], m, m2, sum);
    const A mx = lanes_max<A>(m, W);
    const A tot = lanes_sum<A>(sum_at<A>(m, sum, mx), W);
    const A inv = (A)1 / tot, mx2 = SoftExp<A>::scale(mx);
    if constexpr (APART) {
        /* vector j + 1 is the next lane's, or the group's first lane's next vector */
        const int ob = (int)(reinterpret_cast<uintptr_t>(r.y) & 15);
#pragma unroll
        for (int k = 0; k < VPT; k++)
            raw[k] = soft_out<A>(raw[k], mx2, inv);
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            const U16<T> next = shfl16_down(raw[k], 1);
            const U16<T> wrap = shfl16_from(raw[k + 1 < VPT ? k + 1 : k], lane - q);
            U16<T> nx;
            *reinterpret_cast<uint4 *>(nx.v) = q == W - 1
                                                   ? *reinterpret_cast<const uint4 *>(wrap.v)
                                                   : *reinterpret_cast<const uint4 *>(next.v);
            if (k * W + q < nv)
                apart_put<false>(r.y, (long long)(k * W + q), nv, ob, raw[k], nx);
        }
    } else {
#pragma unroll
        for (int k = 0; k < VPT; k++)
            if (k * W + q < nv)
                st16(r.y + (long long)(k * W + q) * E, soft_out<A>(raw[k], mx2, inv));
    }
    if (edge)
        edges_store<A>(r, mx2, inv, q, W);
}

/* softmax_smem_kernel's threads (one block a SM), and the vectors of a thread's share of shared
 * memory, at most. */
#define SMS_THREADS 1024
#define SMS_KMAX    16

/* f(k) for k = K .. KMAX - 1, each once the thread's group k has landed (groups retire in
 * order: at most KMAX - 1 - k of the KMAX committed ones still pending). */
template <int K, int KMAX, typename F> __device__ __forceinline__ void sms_each_group(F &&f)
{
    if constexpr (K < KMAX) {
        cp_wait_group<KMAX - 1 - K>();
        f(K);
        sms_each_group<K + 1, KMAX>(f);
    }
}

/* Where softmax_smem_kernel and softmax_stream_kernel split a slice: vectors [lo, *rhi) in
 * registers (VPT a thread), *ns from *rhi in shared memory. */
template <typename T>
__device__ __forceinline__ void sms_split(const RowSlice<T> &sl, long long *rhi, int *ns)
{
    *rhi = min(sl.hi, sl.lo + (long long)smx_reg_vpt<T>() * SMS_THREADS);
    *ns = (int)max(0LL, sl.hi - *rhi);
}

/* softmax_smem_kernel's read of a slice (and softmax_stream_kernel's first): the vectors [lo,
 * rhi) into registers, then each thread's own ns - tid shared-memory vectors from rhi (its k-th at
 * tid + k * SMS_THREADS) by cp.async, a commit group per k (empty past its share). The warp
 * barrier keeps ptxas from sinking the registers' loads past the copies (it did: each thread then
 * waited for its registers, the last of its bytes, before its first sum, and the read's exps came
 * after the read: 23.9 us on the 64 rows, 1.26x the copy, against 22.0 with the loads first). */
template <typename T, int VPT>
__device__ __forceinline__ void sms_ask(const RowSlice<T> &sl, long long rhi, int ns,
                                        U16<T> (&raw)[VPT], unsigned char *smem_raw,
                                        unsigned long long pol)
{
    constexpr int E = 16 / (int)sizeof(T), nt = SMS_THREADS;
    const int tid = threadIdx.x;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const long long j = sl.lo + (long long)k * nt + tid;
        if (j < rhi)
            raw[k] = ld16_stream(sl.x + j * E);
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < SMS_KMAX; k++) { /* empty groups past the thread's share */
        const int j = tid + k * nt;
        if (j < ns)
            cp_async16_pol(smem_raw + (size_t)j * 16, sl.x + (rhi + j) * E, pol);
        cp_commit();
    }
}

/* softmax_smem_kernel's and softmax_stream_kernel's start: the predecessor's wait, the arrival on
 * the cluster barrier that row_max_sum's first exchange waits for, and the first slice asked for
 * (sms_ask) at the read-once L2 policy, which it returns for the later slices. */
template <typename T, int VPT>
__device__ __forceinline__ unsigned long long sms_start(const RowSlice<T> &sl, long long rhi,
                                                        int ns, int C, U16<T> (&raw)[VPT],
                                                        unsigned char *smem_raw)
{
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    if (C > 1)
        cluster_started_arrive();
    const unsigned long long pol = l2_evict_first(); /* read once */
    sms_ask(sl, rhi, ns, raw, smem_raw, pol);
    return pol;
}

/* A slice asked for by sms_ask into a running maximum m and sum of exp(x - m): its edges, its
 * registers, then the thread's shared-memory vectors in order as their groups land. */
template <typename A, typename T, int VPT>
__device__ __forceinline__ void sms_take(const RowSlice<T> &sl, long long rhi, int ns,
                                         const U16<T> (&raw)[VPT], unsigned char *smem_raw, A &m,
                                         A &m2, A &sum)
{
    constexpr int nt = SMS_THREADS;
    const int tid = threadIdx.x;
    if (sl.edge)
        edges_take<A>(sl, m, m2, sum);
#pragma unroll
    for (int k = 0; k < VPT; k++)
        if (sl.lo + (long long)k * nt + tid < rhi)
            online_take<A>(raw[k], m, m2, sum);
    const unsigned mine = smem_u32(smem_raw) + 16u * tid; /* the thread's vector of group 0 */
    sms_each_group<0, SMS_KMAX>([&](int k) {
        if (tid + k * nt < ns) {
            U16<T> u;
            *reinterpret_cast<uint4 *>(u.v) = lds16_after_wait(mine + 16u * nt * k);
            online_take<A>(u, m, m2, sum);
        }
    });
}

/* Rows whose slices fit the SMs' registers and shared memory together, one block a SM: C blocks a
 * row (C == 1, or an x-cluster of C), the first VPT * blockDim.x vectors of the block's slice in
 * registers and the rest in shared memory. Every byte of the slice is asked for at once: the
 * registers' loads, then each thread's own shared-memory vectors (k-th at tid + k * blockDim.x)
 * by cp.async, a commit group per k, so that a thread takes its vectors in order as its groups
 * land, with no barrier (the copy engine's pieces, asked for a few at a time so that the first
 * landed early, kept too few bytes in flight: 0.8-1 us slower on the 64 rows; all at once, they
 * all landed near the end). Each thread keeps a running maximum and sum over its vectors
 * (registers, then its groups in order); the warps' and then the cluster's (rank order, through
 * distributed shared memory) follow in one fixed tree (row_max_sum), so every block gets the same
 * bits and the result is the same every run; then y = exp(x - max) / sum from registers and
 * shared memory (the exps formed again: kept in place of x from the read instead, they measured
 * slower). The row is read once and written once, as the copy (64 rows of 128256 f32, 33 MB,
 * over 128 blocks in 2-block clusters, where the two-pass kernel read it twice, 1.5x the copy),
 * and the exponentials overlap the loads. */
template <typename T>
__global__ void __launch_bounds__(SMS_THREADS, 1)
    softmax_smem_kernel(const T *x, T *y, long long N, int C)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T), VPT = smx_reg_vpt<T>();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ RowPairs<A> tab;
    const RowSlice<T> sl = row_slice(x, y, N, C);
    constexpr int nt = SMS_THREADS; /* a constant: the shared-memory offsets are immediates */
    const int tid = threadIdx.x;
    long long rhi;
    int ns; /* vectors in shared memory, from rhi */
    sms_split(sl, &rhi, &ns);
    U16<T> raw[VPT];
    sms_start(sl, rhi, ns, C, raw, smem_raw);
    A m = -INFINITY, m2 = -INFINITY, sum = 0;
    sms_take<A>(sl, rhi, ns, raw, smem_raw, m, m2, sum);
    A mx, tot;
    row_max_sum<A>(tab, C, m, sum, mx, tot);
    const unsigned mine = smem_u32(smem_raw) + 16u * tid; /* the thread's vector of group 0 */
    const A inv = (A)1 / tot, mx2 = SoftExp<A>::scale(mx);
    auto put = [&](const U16<T> &u, T *to) { st16_stream(to, soft_out<A>(u, mx2, inv)); };
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const long long j = sl.lo + (long long)k * nt + tid;
        if (j < rhi)
            put(raw[k], sl.y + j * E);
    }
    T *const ys = sl.y + (rhi + tid) * E; /* the thread's vector of group 0 in y */
#pragma unroll
    for (int k = 0; k < SMS_KMAX; k++) /* the thread's own vectors: landed, read by no other */
        if (tid + k * nt < ns) {
            U16<T> u;
            *reinterpret_cast<uint4 *>(u.v) = lds16_after_wait(mine + 16u * nt * k);
            put(u, ys + (size_t)nt * E * k);
        }
    if (sl.edge)
        edges_store<A>(sl, mx2, inv);
}

/* Rows past a wave whose slices fit a SM's registers and shared memory, as softmax_smem_kernel
 * holds them, on a persistent grid: cluster c takes rows c, c + clusters, ... A block holds one
 * row's slice at a time, and as it stores each of the row's vectors it asks for the next row's
 * vector into the same register or shared-memory slot, so the next row's read streams under this
 * row's stores, as a copy's reads and writes do; one block a SM that held a row and then stored it
 * (softmax_smem_kernel over waves) left the memory idle in each block's exchange and read nothing
 * while it stored. Slot k of shared memory is the thread's own (its k-th vector), read by no
 * other, so it is refilled as soon as the thread has read it. The pairs' tables alternate between
 * rows: a peer's stores of the next row's pairs never meet a warp still folding this row's. The
 * same sums in the same order as softmax_smem_kernel's: the same bits. */
template <typename T>
__global__ void __launch_bounds__(SMS_THREADS, 1)
    softmax_stream_kernel(const T *x, T *y, long long rows, long long N, int C)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T), VPT = smx_reg_vpt<T>();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ RowPairs<A> tab[2];
    constexpr int nt = SMS_THREADS;
    const int tid = threadIdx.x;
    const long long clusters = gridDim.x / (unsigned)C;
    long long row = blockIdx.x / (unsigned)C;
    RowSlice<T> sl = row_slice(x, y, N, C, row);
    long long rhi;
    int ns;
    sms_split(sl, &rhi, &ns);
    U16<T> raw[VPT];
    const unsigned long long pol = sms_start(sl, rhi, ns, C, raw, smem_raw);
    const unsigned mine = smem_u32(smem_raw) + 16u * tid; /* the thread's vector of group 0 */
    for (int it = 0;; it++) {
        A m = -INFINITY, m2 = -INFINITY, sum = 0;
        sms_take<A>(sl, rhi, ns, raw, smem_raw, m, m2, sum);
        A mx, tot;
        row_max_sum<A>(tab[it & 1], C, m, sum, mx, tot, it == 0);
        const A inv = (A)1 / tot, mx2 = SoftExp<A>::scale(mx);
        /* the next row's slice, asked for into each slot as this row's vector leaves it */
        const long long next = row + clusters;
        const bool more = next < rows;
        const RowSlice<T> nx = row_slice(x, y, N, C, more ? next : row);
        long long nrhi;
        int nns;
        sms_split(nx, &nrhi, &nns);
        if (!more)
            nns = 0;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            const long long j = sl.lo + (long long)k * nt + tid,
                            jn = nx.lo + (long long)k * nt + tid;
            if (j < rhi)
                st16_stream(sl.y + j * E, soft_out<A>(raw[k], mx2, inv));
            if (more && jn < nrhi)
                raw[k] = ld16_stream(nx.x + jn * E);
        }
        __syncwarp();
        T *const ys = sl.y + (rhi + tid) * E; /* the thread's vector of group 0 in y */
#pragma unroll
        for (int k = 0; k < SMS_KMAX; k++) {
            const int j = tid + k * nt;
            if (j < ns) {
                U16<T> u;
                *reinterpret_cast<uint4 *>(u.v) = lds16_after_wait(mine + 16u * nt * k);
                st16_stream(ys + (size_t)nt * E * k, soft_out<A>(u, mx2, inv));
            }
            if (j < nns) /* after the slot's read: the same thread, in program order */
                cp_async16_pol(smem_raw + (size_t)j * 16, nx.x + (nrhi + j) * E, pol);
            cp_commit();
        }
        if (sl.edge)
            edges_store<A>(sl, mx2, inv);
        if (!more)
            break;
        row = next;
        sl = nx;
        rhi = nrhi;
        ns = nns;
    }
}

/* Vectors a thread of softmax_grid_kernel holds at most, and its threads. */
#define SMG_VPT     4
#define SMG_THREADS 256

/* The output vectors at the start of a softmax_grid_kernel row that hold its G pairs and the
 * count of blocks that have read them. */
template <typename A> __host__ __device__ __forceinline__ long long smg_held(int G)
{
    return ((long long)(2 * G) * (long long)sizeof(A) + 4 + 15) / 16;
}

/* A few long rows over all SMs, as the copy spreads their bytes (a cluster holds 8 or 16 of them:
 * a decode row's logits took 4x the copy's time over 8 blocks): G blocks a row, launched
 * cooperatively (all resident at once), each holding its slice in registers (vector j of the
 * slice at thread j % blockDim.x) with a running maximum and sum a thread. The block's pair
 * (row_max_sum) goes to the start of the row's output (2 G values of A, rank order, then a count;
 * no block stores its own outputs there); after a grid barrier warp 0 of every block reads the G
 * pairs and folds them in one fixed tree, so every block has the same bits and the result is the
 * same every run: max M, S = sum s_q exp(m_q - M), y = exp(x - M) / S. Each block then counts
 * itself in (acq_rel), and the one that counts last, when every block has read the pairs, stores
 * the `held` vectors over them, from a copy of their inputs every block read before the barrier: no
 * block waits on the count (the pairs' owner waiting for it took 0.14 us more; a second grid
 * barrier 0.5 us more). */
template <typename T>
__global__ void __launch_bounds__(SMG_THREADS)
    softmax_grid_kernel(const T *x, T *y, long long N, int G)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T);
    __shared__ RowPairs<A> tab;
    __shared__ A ms[2];
    __shared__ int last;
    const int tid = threadIdx.x, lane = tid & 31, rank = (int)(blockIdx.x % (unsigned)G);
    const RowSpan<T> r = row_span(x, y, blockIdx.x / (unsigned)G, N);
    const long long nv = r.nv;
    const long long per = row_of(nv + G - 1, G), lo = min(nv, rank * per), hi = min(nv, lo + per);
    const T *xr = r.x;
    T *yr = r.y;
    const bool edge = rank == 0 && tid < r.h + r.t; /* a value each */
    A *pairs = reinterpret_cast<A *>(yr);
    unsigned *count = reinterpret_cast<unsigned *>(pairs + 2 * G);
    const long long held = smg_held<A>(G);
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    U16<T> raw[SMG_VPT], hx;
#pragma unroll
    for (int k = 0; k < SMG_VPT; k++) {
        const long long j = lo + (long long)k * SMG_THREADS + tid;
        if (j < hi)
            raw[k] = ld16_stream(xr + j * E);
    }
    if (tid < held) /* for the block that stores the held vectors, whichever it is */
        *reinterpret_cast<uint4 *>(hx.v) =
            __ldcg(reinterpret_cast<const uint4 *>(xr + (long long)tid * E));
    A m = -INFINITY, m2 = -INFINITY, s = 0;
    if (edge)
        edges_take<A>(r, m, m2, s, tid, SMG_THREADS);
#pragma unroll
    for (int k = 0; k < SMG_VPT; k++)
        if (lo + (long long)k * SMG_THREADS + tid < hi)
            online_take<A>(raw[k], m, m2, s);
    A bm, bs;
    row_max_sum<A>(tab, 1, m, s, bm, bs); /* the block's pair */
    if (tid == 0) {
        pairs[2 * rank] = bm;
        pairs[2 * rank + 1] = bs;
        if (rank == 0)
            *count = 0;
    }
    cg::this_grid().sync();
    if (tid < 32) {
        A M, S; /* lane q takes ranks q, q + 32, ...: G <= 256 */
        fold_pairs<A>(
            8, 32,
            [&](int r, int q, A &pm, A &ps) {
                const int g = q + 32 * r;
                if (g < G)
                    pm = __ldcg(pairs + 2 * g), ps = __ldcg(pairs + 2 * g + 1);
            },
            M, S);
        if (lane == 0) {
            ms[0] = M, ms[1] = S;
            unsigned old;
            /* release: this block's reads of the pairs come before; acquire: the last block's
             * stores over them come after every block's reads */
            asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                         : "=r"(old)
                         : "l"(count)
                         : "memory");
            last = old == (unsigned)(G - 1);
        }
    }
    __syncthreads();
    const A inv = (A)1 / ms[1], M2 = SoftExp<A>::scale(ms[0]);
#pragma unroll
    for (int k = 0; k < SMG_VPT; k++) {
        const long long j = lo + (long long)k * SMG_THREADS + tid;
        if (j < hi && j >= held)
            st16_stream(yr + j * E, soft_out<A>(raw[k], M2, inv));
    }
    if (last && tid < held) /* every block has read the pairs and counted itself in */
        st16(yr + (long long)tid * E, soft_out<A>(hx, M2, inv));
    if (edge)
        edges_store<A>(r, M2, inv, tid, SMG_THREADS);
}

/* softmax_tile_kernel's threads, its bulk copies a slice (each on its own mbarrier, so that the
 * sums start on the first piece while the rest land), and its largest slice: three blocks a SM. */
#define SMT_THREADS 256
#define SMT_PIECES  4
#define SMT_SLICE   (64 << 10)

/* Rows past a wave, a slice a block held in shared memory alone: C blocks a row (C == 1, or an
 * x-cluster of C), slices of at most SMT_SLICE bytes, so that three blocks share a SM at different
 * points of their read, sums and stores, as the copy streams (one block a SM, the registers and
 * shared memory kernel, reads nothing while it stores). One thread asks the copy engine for the
 * whole slice; each thread keeps a running maximum and sum over its vectors (vector j of the slice
 * at thread j % blockDim.x) as the pieces land; row_max_sum gives every block of the row the same
 * bits, and the result is the same every run; y = exp(x - max) / sum from shared memory. APART: y
 * at another offset from 16 bytes than x (a view), each of y's aligned 16 bytes from two of x's
 * vectors in shared memory, joined before the exponentials (x 4 bytes past 16, bf16[1024,32000]:
 * 1.19x the copy, where the two-pass kernel, reading the row twice, took 1.64x, and this kernel
 * with the outputs joined across lanes by shuffles 1.47x, twice the instructions a vector). */
template <typename T, bool APART = false>
__global__ void __launch_bounds__(SMT_THREADS)
    softmax_tile_kernel(const T *x, T *y, long long N, int C)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T);
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ RowPairs<A> tab;
    __shared__ unsigned long long bar[SMT_PIECES];
    const RowSlice<T> sl = row_slice(x, y, N, C);
    /* the stride read at run time: as the constant SMT_THREADS the kernel measured 2-4 % slower
     * (f32[128,128256] 1.20 against 1.18 the copy, bf16[1024,32000] 1.09 against 1.05) */
    const int tid = threadIdx.x, nt = (int)blockDim.x;
    const long long n = sl.hi - sl.lo, piece = (n + SMT_PIECES - 1) / SMT_PIECES;
    if (tid == 0) {
        for (int k = 0; k < SMT_PIECES; k++)
            mbar_init(&bar[k], 1);
        mbar_fence_init();
    }
    __syncthreads();
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    if (C > 1)
        cluster_started_arrive();
    if (tid == 0) {
        const unsigned long long pol = l2_evict_first(); /* read once */
        for (int k = 0; k < SMT_PIECES; k++) {
            const long long lo = min(n, k * piece), hi = min(n, lo + piece);
            if (hi > lo) {
                mbar_arrive_tx(&bar[k], (unsigned)((hi - lo) * 16));
                bulk_g2s(smem_raw + lo * 16, sl.x + (sl.lo + lo) * E, (unsigned)((hi - lo) * 16),
                         &bar[k], pol);
            }
        }
    }
    const unsigned base = smem_u32(smem_raw);
    A m = -INFINITY, m2 = -INFINITY, sum = 0;
    if (sl.edge)
        edges_take<A>(sl, m, m2, sum);
    for (int k = 0; k < SMT_PIECES; k++) {
        const long long lo = min(n, k * piece), hi = min(n, lo + piece);
        if (hi <= lo)
            break;
        mbar_wait(&bar[k], 0);
#pragma unroll 4
        for (long long j = lo + tid; j < hi; j += nt) {
            U16<T> u;
            *reinterpret_cast<uint4 *>(u.v) = lds16_after_wait(base + (unsigned)j * 16u);
            online_take<A>(u, m, m2, sum);
        }
    }
    A mx, tot;
    row_max_sum<A>(tab, C, m, sum, mx, tot);
    const A inv = (A)1 / tot, mx2 = SoftExp<A>::scale(mx);
    if constexpr (APART) {
        /* y's aligned 16 bytes from x's vectors j and j + 1 joined before the exponentials (they
         * go value by value, so the bits are those of joining the outputs): no shuffle, one
         * exponential a value; vector j + 1 past the slice (a peer's, already read by it) from
         * global memory, once a block; the values before y's first boundary and after its last
         * (vectors 0 and nv - 1) by apart_put */
        const int ob = (int)(reinterpret_cast<uintptr_t>(sl.y) & 15), o = ob / (int)sizeof(T);
#pragma unroll 2
        for (long long j = tid; j < n; j += nt) {
            const long long g = sl.lo + j; /* the body's vector */
            U16<T> u, v;
            *reinterpret_cast<uint4 *>(u.v) = lds16_after_wait(base + (unsigned)j * 16u);
            v = u;
            if (j + 1 < n)
                *reinterpret_cast<uint4 *>(v.v) = lds16_after_wait(base + (unsigned)j * 16u + 16u);
            else if (g + 1 < sl.nv)
                v = ld16(sl.x + (g + 1) * E);
            if (g == 0 || g + 1 >= sl.nv)
                apart_put<true>(sl.y, g, sl.nv, ob, soft_out<A>(u, mx2, inv),
                                soft_out<A>(v, mx2, inv));
            else
                st16_stream(sl.y + (g + 1) * E - o, soft_out<A>(join16(u, v, 16 - ob), mx2, inv));
        }
    } else {
#pragma unroll 4
        for (long long j = tid; j < n; j += nt) {
            U16<T> u;
            *reinterpret_cast<uint4 *>(u.v) = lds16_after_wait(base + (unsigned)j * 16u);
            st16_stream(sl.y + (sl.lo + j) * E, soft_out<A>(u, mx2, inv));
        }
    }
    if (sl.edge)
        edges_store<A>(sl, mx2, inv);
#else
    __trap(); /* bulk copies and clusters: the launch asks for compute capability 9.0 */
#endif
}

/* A 16-byte load of data read for the last time, from L2 (the second pass of softmax_l2_kernel):
 * evict it first, it is not read again. */
__device__ __forceinline__ uint4 ld16_last(const void *p, unsigned long long pol)
{
    uint4 v;
    asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
    return v;
}

/* 16-byte vectors in flight per thread in each pass of softmax_l2_kernel: 4 of f32, 2 of the
 * others (8 bf16 or f16 values widened a vector, and f64's, need the registers). */
template <typename T> __host__ __device__ constexpr int smx_u()
{
    return sizeof(T) == 4 ? 4 : 2;
}
#define SMX_THREADS 512

/* Rows too large for the registers of one wave (64 rows of 128256 f32 are 33 MB, more than the
 * register files of an H200: softmax_reg_kernel took two waves of one block a SM, 2x the copy):
 * C blocks a row (C == 1, or an x-cluster of C), each reading its slice twice. The first pass
 * keeps a running maximum and a sum rescaled to it per thread; the warps' and then the cluster's
 * (rank order, through distributed shared memory) maximum and sum follow in one fixed tree
 * (row_max_sum), so every block gets the same bits and the result is the same every run. The
 * second pass reads the slice
 * again, from L2: the launch keeps the slices of the blocks in flight together small (96 KB a
 * block), so it is there, and its loads and the stores evict first so that the slices still to be
 * read stay; DRAM sees the row once in and once out, as the copy. y = exp(x - max) / sum, as
 * softmax_reg_kernel computes it. */
template <typename T, bool APART = false>
__global__ void __launch_bounds__(SMX_THREADS, APART ? 2 : 3)
    softmax_l2_kernel(const T *x, T *y, long long N, int C)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T), SMX_U = smx_u<T>();
    __shared__ RowPairs<A> tab;
    const RowSlice<T> sl = row_slice(x, y, N, C);
    const long long step = (long long)blockDim.x * SMX_U;
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    if (C > 1)
        cluster_started_arrive();
    A m = -INFINITY, m2 = -INFINITY, sum = 0;
    if (sl.edge)
        edges_take<A>(sl, m, m2, sum);
    for (long long j0 = sl.lo + threadIdx.x; j0 < sl.hi; j0 += step) {
        U16<T> raw[SMX_U];
#pragma unroll
        for (int k = 0; k < SMX_U; k++)
            if (j0 + (long long)k * blockDim.x < sl.hi)
                raw[k] = ld16(sl.x + (j0 + (long long)k * blockDim.x) * E);
#pragma unroll
        for (int k = 0; k < SMX_U; k++) {
            if (j0 + (long long)k * blockDim.x >= sl.hi)
                break;
            online_take<A>(raw[k], m, m2, sum);
        }
    }
    A mx, tot;
    row_max_sum<A>(tab, C, m, sum, mx, tot);
    const A inv = (A)1 / tot, mx2 = SoftExp<A>::scale(mx);
    const unsigned long long last = l2_evict_first();
    /* the second read, evicting first */
    auto reload = [&](long long j0, U16<T>(&raw)[SMX_U]) {
#pragma unroll
        for (int k = 0; k < SMX_U; k++)
            if (j0 + (long long)k * blockDim.x < sl.hi)
                *reinterpret_cast<uint4 *>(raw[k].v) =
                    ld16_last(sl.x + (j0 + (long long)k * blockDim.x) * E, last);
    };
    if constexpr (APART) {
        /* a warp at a time (its lanes shuffle): vector j + 1 is the next lane's, or read again
         * (L2) by the warp's last lane and at the slice's end */
        const int lane = threadIdx.x & 31, ob = (int)(reinterpret_cast<uintptr_t>(sl.y) & 15);
        for (long long w0 = sl.lo + (threadIdx.x & ~31u); w0 < sl.hi; w0 += step) {
            const long long j0 = w0 + lane;
            U16<T> raw[SMX_U];
            reload(j0, raw);
#pragma unroll
            for (int k = 0; k < SMX_U; k++) {
                const long long j = j0 + (long long)k * blockDim.x;
                const U16<T> out = soft_out<A>(raw[k], mx2, inv);
                U16<T> nx = shfl16_down(out, 1);
                if (j < sl.hi) {
                    if ((lane == 31 || j + 1 >= sl.hi) && j + 1 < sl.nv)
                        nx = soft_out<A>(ld16(sl.x + (j + 1) * E), mx2, inv);
                    apart_put<true>(sl.y, j, sl.nv, ob, out, nx);
                }
            }
        }
    } else {
        for (long long j0 = sl.lo + threadIdx.x; j0 < sl.hi; j0 += step) {
            U16<T> raw[SMX_U];
            reload(j0, raw);
#pragma unroll
            for (int k = 0; k < SMX_U; k++) {
                const long long j = j0 + (long long)k * blockDim.x;
                if (j >= sl.hi)
                    break;
                st16_stream(sl.y + j * E, soft_out<A>(raw[k], mx2, inv));
            }
        }
    }
    if (sl.edge)
        edges_store<A>(sl, mx2, inv);
}
} /* namespace dec */
} /* namespace kcuda */

using namespace kcuda;
using namespace kcuda::dec;

DEC_PREPARE(softmax, DEC_SOFTMAX, 2)

template <typename T, int VPT>
static int softmax_reg_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s, int C,
                              int threads)
{
    return launch(ctx, "softmax", softmax_reg_kernel<T, VPT>, (unsigned)(s.rows * C),
                  (unsigned)threads, 0, C, (const T *)b[0], (T *)b[1], (long long)s.F, C);
}

/* softmax_warp_kernel for rows of at most 32 * VPT vectors (16-byte vectors of a row's body, nv
 * at most): W lanes a row. */
template <typename T, int VPT>
static int softmax_warp_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s,
                               long long nv, bool edges, bool apart = false)
{
    int W = 1; /* the fewest lanes that hold the row at VPT vectors a lane */
    while (W < 32 && (long long)W * VPT < nv)
        W *= 2;
    const long long per_block = SMW_WARPS * (32 / W);
    const unsigned grid = (unsigned)((s.rows + per_block - 1) / per_block);
    if (apart)
        return launch(ctx, "softmax", softmax_warp_kernel<T, VPT, true, true>, grid, SMW_WARPS * 32,
                      0, 1, (const T *)b[0], (T *)b[1], (long long)s.rows, (long long)s.F, W);
    if (edges)
        return launch(ctx, "softmax", softmax_warp_kernel<T, VPT, true>, grid, SMW_WARPS * 32, 0, 1,
                      (const T *)b[0], (T *)b[1], (long long)s.rows, (long long)s.F, W);
    return launch(ctx, "softmax", softmax_warp_kernel<T, VPT, false>, grid, SMW_WARPS * 32, 0, 1,
                  (const T *)b[0], (T *)b[1], (long long)s.rows, (long long)s.F, W);
}

/* Whether short rows take several vectors a lane (BATON_SOFTMAX_WARP_VPT=0: one, as before, for
 * the benchmark's A/B). Read once. */
static bool softmax_warp_vpt_on()
{
    static int cache = ENV_UNREAD;
    return baton__env_flag("BATON_SOFTMAX_WARP_VPT", &cache) != 0;
}

/* softmax_warp_launch at the fewest vectors a lane that hold rows of nv vectors (nv at most 32
 * times 8 in f32, 4 in the others). */
template <typename T>
static int softmax_warp_pick(const baton_exec_ctx *ctx, void **b, const dec_shape &s, long long nv,
                             bool edges, bool apart)
{
    const long long vpt = (nv + 31) / 32;
    /* rows of at most 16 vectors: several a lane, so that a lane's fixed work (the row's address
     * and split, its shuffle trees) is spread over more bytes, where a vector a lane made the
     * kernel bound by the instructions issued; whole rows 4 a lane, rows with values outside
     * their body 2 (a lane takes those in turn, one load after another). H200, x the copy, three
     * forms (1, 2, 4 a lane) in two calls: bf16[65536,128] 1.08-1.09 / 1.03-1.05 / 0.99-1.00,
     * [65536,127] 1.38-1.39 / 1.15-1.17 / 1.17-1.19, a view's [65536,128] 1.71-1.72 / 1.51-1.52
     * / 2.12-2.13 */
    if (nv <= 16 && softmax_warp_vpt_on()) {
        if (!edges && nv > 4)
            return softmax_warp_launch<T, 4>(ctx, b, s, nv, edges, apart);
        if (nv > 2)
            return softmax_warp_launch<T, 2>(ctx, b, s, nv, edges, apart);
    }
    if (vpt <= 1)
        return softmax_warp_launch<T, 1>(ctx, b, s, nv, edges, apart);
    if (vpt <= 2)
        return softmax_warp_launch<T, 2>(ctx, b, s, nv, edges, apart);
    if constexpr (sizeof(T) == 4)
        if (vpt > 4)
            return softmax_warp_launch<T, 8>(ctx, b, s, nv, edges, apart);
    return softmax_warp_launch<T, 4>(ctx, b, s, nv, edges, apart);
}

/* Rows held in registers where they fit (softmax_reg_kernel): C blocks a row (a cluster), the
 * most of 8, 4, 2 whose rows * C blocks stay one wave of the kernel's resident blocks while the
 * rows alone would leave SMs idle (8 for one decode row: a non-portable 16 measured 9.5 us against
 * 7.5), else the fewest C whose slices fit, or 1;
 * VPT the fewest vectors a thread that hold a block's slice, at most 32 values a thread (16
 * doubles spill). Where those blocks (one or two a SM) would take more than one wave, the rows
 * are read twice instead, the second time from L2 (softmax_l2_kernel), over C blocks a row that
 * fill one wave and keep each block's slice under 96 KB. Other rows: the loop kernel. */
template <typename T, int VPT>
static int softmax_reg_resident(const baton_exec_ctx *ctx, int threads)
{
    return per_sm_or(ctx, (const void *)softmax_reg_kernel<T, VPT>, threads, 1);
}

/* launch() for a cooperative grid (every block resident at once, for grid.sync()). */
template <typename... KArgs, typename... Args>
static int launch_coop(const baton_exec_ctx *ctx, const char *name, void (*kernel)(KArgs...),
                       unsigned grid, unsigned block, Args... args)
{
    return launch_with(ctx, name, true, kernel, grid, block, 0, 1, args...);
}

/* softmax_grid_kernel for at most 4 rows of at least 16384 values: G blocks a row, the most that
 * keep rows * G within the SMs and give every thread a vector at least, when that is more than a
 * cluster's 8 (else a cluster takes the row without the grid barrier), each thread then holds at
 * most SMG_VPT vectors and every row's body (nv vectors at most, nv_min at least) holds the G
 * pairs: 0 or the launch's failure, 1 when it does not apply. */
template <typename T>
static int softmax_grid_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s,
                               long long nv, long long nv_min, long long sms)
{
    if (s.rows > 4 || s.F < 16384 || !device_facts(ctx).coop)
        return 1;
    const long long G = std::min(sms / s.rows, (nv + SMG_THREADS - 1) / SMG_THREADS);
    /* warp 0's lanes read at most 8 pairs each; a thread a held vector */
    if (G <= 8 || G > 256 || (nv + G - 1) / G > (long long)SMG_VPT * SMG_THREADS ||
        nv_min < smg_held<typename Acc<T>::A>((int)G) ||
        smg_held<typename Acc<T>::A>((int)G) > SMG_THREADS)
        return 1;
    return launch_coop(ctx, "softmax", softmax_grid_kernel<T>, (unsigned)(s.rows * G), SMG_THREADS,
                       (const T *)b[0], (T *)b[1], (long long)s.F, (int)G);
}

/* How many clusters of 2, 4 and 8 blocks of a softmax kernel (softmax_smem_kernel<T>: 1024 threads,
 * the most shared memory; softmax_tile_kernel<T>: 256 threads, SMT_SLICE bytes) fit at once on
 * ctx's device (n[1], n[2], n[3]; 0 where the query fails): a GPC's SMs left over by its clusters
 * stay idle, so rows * C blocks within the SMs can still take two waves. Asked once per device
 * and kernel, in relaxed capture mode (the queries enqueue nothing), and kept even when a query
 * fails: the cluster size orders the sums, later calls must choose as the first did. */
struct SmxFit {
    int n[4];
};

/* SmxFit for `kernel` launched as blocks of `threads` with `smem` bytes of dynamic shared memory
 * (n[0] = 1: no cluster). */
template <typename K>
static SmxFit smx_fit_query(K kernel, const baton_exec_ctx *ctx, int threads, size_t smem)
{
    const RelaxedCapture relaxed;
    const int pr = prepare(kernel, ctx, "softmax", 8, 8, threads, smem, smem, false);
    SmxFit f;
    memset(&f, 0, sizeof f);
    f.n[0] = 1;
    for (int i = 1; i < 4; i++)
        if (pr == 0 && max_active_clusters((const void *)kernel, 8, threads, smem, 1 << i,
                                           (cudaStream_t)ctx->stream, &f.n[i]) != cudaSuccess) {
            (void)cudaGetLastError();
            f.n[i] = 0;
        }
    if (pr != 0)
        (void)cudaGetLastError();
    return f;
}

template <typename T> static SmxFit softmax_smem_fit(const baton_exec_ctx *ctx, size_t smem)
{
    static DeviceOnce<SmxFit> once;
    return once.get(device_of(ctx),
                    [&] { return smx_fit_query(softmax_smem_kernel<T>, ctx, SMS_THREADS, smem); });
}

/* Whether a slice of `per` vectors fits the registers-and-shared-memory layout
 * (softmax_smem_kernel, softmax_stream_kernel): smx_reg_vpt vectors a thread in registers, the rest
 * (*ns) in at most smem_max bytes of shared memory, SMS_KMAX a thread. */
template <typename T> static bool sms_fits(long long per, size_t smem_max, long long *ns)
{
    *ns = per - (long long)smx_reg_vpt<T>() * SMS_THREADS;
    return *ns * 16 <= (long long)smem_max && *ns <= SMS_KMAX * (long long)SMS_THREADS;
}

/* A slice of at least this many bytes takes softmax_smem_kernel over several waves (a block a SM,
 * the next starting where one ends) rather than the two-pass kernel, which would split its row
 * over three blocks or more: reading once pays off there, where a block's fixed costs (the loads'
 * ramp, the exchange, the stores' tail) are spread over enough bytes (H200, x the copy, two runs,
 * on rows softmax_tile_kernel now takes: f32 rows of 128256 at 96 to 512 rows 1.30 to 1.06
 * against 1.37 to 1.13, f32[512,65536] 1.08 against 1.18, bf16[256,128256] 1.20 against 1.48;
 * 128 KB slices lost, f32[1024,32000] 1.13 against 1.06). */
#define SMS_WAVES_SLICE (192 << 10)

/* softmax_smem_kernel where rows * C blocks of 1024 threads (the fewest of C = 1, 2, 4, 8 blocks a
 * row) are one block a SM, all at once, or (waves_ok) take several waves of slices of
 * SMS_WAVES_SLICE bytes or more, and a slice past the registers' VPT * 1024 vectors fits the shared
 * memory: 0 or the launch's failure, 1 when it does not fit. */
template <typename T>
static int softmax_smem_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s,
                               long long nv, long long sms, bool waves_ok)
{
    const auto kernel = softmax_smem_kernel<T>;
    /* the kernel's static shared memory (its pairs' table) and a margin come off the opt-in */
    const size_t smem_max =
        (size_t)device_facts(ctx).smem_optin - sizeof(RowPairs<typename Acc<T>::A>) - 1024;
    for (int c = 1, i = 0; c <= 8; c *= 2, i++) {
        const long long per = (nv + c - 1) / c;
        const bool waves = s.rows * c > sms;
        long long ns;
        if ((waves && (!waves_ok || per * 16 < SMS_WAVES_SLICE)) ||
            !sms_fits<T>(per, smem_max, &ns))
            continue;
        /* one wave: every cluster resident at once; several: any cluster that can be had */
        if (c > 1 && (waves ? softmax_smem_fit<T>(ctx, smem_max).n[i] < 1
                            : s.rows > softmax_smem_fit<T>(ctx, smem_max).n[i]))
            continue;
        const size_t smem = ns > 0 ? (size_t)ns * 16 : 0;
        const long long grid = s.rows * c;
        if (prepare(kernel, ctx, "softmax", c, grid, SMS_THREADS, smem, smem_max, false))
            return BATON_ECUDA;
        return launch(ctx, "softmax", kernel, (unsigned)grid, SMS_THREADS, smem, c, (const T *)b[0],
                      (T *)b[1], (long long)s.F, c);
    }
    return 1;
}

/* Whether softmax_stream_kernel may take rows past a wave (BATON_SOFTMAX_STREAM=0: not, so that
 * bench_decoder can set it beside the kernels it replaces). Read once. */
static bool softmax_stream_on()
{
    static int cache = ENV_UNREAD;
    return baton__env_flag("BATON_SOFTMAX_STREAM", &cache) != 0;
}

/* softmax_stream_kernel over the fewest C of 1, 2, 4, 8 blocks a row whose slices, of
 * SMS_WAVES_SLICE bytes or more, fit a block's registers and shared memory, for rows of two rounds
 * of such clusters, where the rounds keep 90 % of the SMs busy: as many clusters as take the rows
 * in two rounds. A SM pulls about 33 GB/s at most, so fewer SMs cannot read at the copy's rate;
 * over more rounds the tile kernel's three blocks a SM drift apart and overlap reads and stores as
 * well (H200, µs against the kernels it would replace, two runs: f32[128,128256] 40.6-40.7 against
 * 41.7-42.5; four rounds, [256,128256] and [512,65536], even; 67 rows of 128256 over 34 clusters
 * of 2 took 30.8 against 24.8, 140 rows of 65536 over 70 blocks 29.9 against 25.6). 0 or the
 * launch's failure, 1 when it does not apply. */
template <typename T>
static int softmax_stream_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s,
                                 long long nv, long long sms)
{
    static DeviceOnce<SmxFit> once;
    const auto kernel = softmax_stream_kernel<T>;
    if (!softmax_stream_on())
        return 1;
    const size_t smem_max =
        (size_t)device_facts(ctx).smem_optin - 2 * sizeof(RowPairs<typename Acc<T>::A>) - 1024;
    for (int c = 1, i = 0; c <= 8; c *= 2, i++) {
        const long long per = (nv + c - 1) / c;
        long long ns;
        if (per * 16 < SMS_WAVES_SLICE || !sms_fits<T>(per, smem_max, &ns))
            continue;
        const SmxFit fit = once.get(
            device_of(ctx), [&] { return smx_fit_query(kernel, ctx, SMS_THREADS, smem_max); });
        const long long at_once = c == 1 ? sms : fit.n[i];
        if (at_once < 1)
            continue;
        if (s.rows <= at_once)
            return 1; /* one wave: softmax_smem_kernel */
        const long long rounds = (s.rows + at_once - 1) / at_once,
                        clusters = (s.rows + rounds - 1) / rounds;
        if (rounds > 2 || clusters * c * 10 < sms * 9)
            return 1;
        const size_t smem = ns > 0 ? (size_t)ns * 16 : 0;
        if (prepare(kernel, ctx, "softmax", c, clusters * c, SMS_THREADS, smem, smem_max, false))
            return BATON_ECUDA;
        return launch(ctx, "softmax", kernel, (unsigned)(clusters * c), SMS_THREADS, smem, c,
                      (const T *)b[0], (T *)b[1], (long long)s.rows, (long long)s.F, c);
    }
    return 1;
}

/* softmax_tile_kernel over the fewest C of 1, 2, 4, 8 blocks a row whose slices fit SMT_SLICE, on
 * a device of compute capability 9.0 or more where an x-cluster of C such blocks can be had (asked
 * once per device and C): 0 or the launch's failure, 1 when it does not apply. Powers of two: 5 to
 * 7 blocks a row, slices at any 16-byte offset, measured slower than 8 (f32[67,128256] 1.33-1.39x
 * the copy against 1.24). */
template <typename T, bool APART = false>
static int softmax_tile_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s,
                               long long nv, long long min_blocks = 0)
{
    static DeviceOnce<SmxFit> once;
    const auto kernel = softmax_tile_kernel<T, APART>;
    if (device_facts(ctx).cc < 90)
        return 1;
    const SmxFit fit = once.get(device_of(ctx),
                                [&] { return smx_fit_query(kernel, ctx, SMT_THREADS, SMT_SLICE); });
    for (int c = 1, i = 0; c <= 8; c *= 2, i++) {
        const long long per = (nv + c - 1) / c;
        if (per * 16 > SMT_SLICE)
            continue;
        if (fit.n[i] < 1 || s.rows * c < min_blocks)
            return 1;
        if (prepare(kernel, ctx, "softmax", c, s.rows * c, SMT_THREADS, (size_t)per * 16, SMT_SLICE,
                    false))
            return BATON_ECUDA;
        return launch(ctx, "softmax", kernel, (unsigned)(s.rows * c), SMT_THREADS, (size_t)per * 16,
                      c, (const T *)b[0], (T *)b[1], (long long)s.F, c);
    }
    return 1;
}

/* softmax_l2_kernel (APART: its instance for a y at another offset than x) over C blocks a row:
 * the most (up to 8, any size) whose rows * C blocks stay one wave (64 rows at 3 blocks a SM: 6,
 * where 8 left a second wave of 116 blocks), and at least enough that a slice is at most 96 KB, so
 * that the slices in flight together stay well inside the L2 for the second read. */
template <typename T, bool APART = false>
static int softmax_l2_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s, long long nv,
                             long long sms)
{
    const long long slice = 96 * 1024 / 16; /* vectors */
    const long long l2_resident =
        (long long)per_sm_or(ctx, (const void *)softmax_l2_kernel<T, APART>, SMX_THREADS, 3) * sms;
    const long long wave_c = l2_resident / s.rows, slice_c = (nv + slice - 1) / slice;
    const int c2 = (int)std::min(8LL, std::max(1LL, std::max(wave_c, slice_c)));
    return launch(ctx, "softmax", softmax_l2_kernel<T, APART>, (unsigned)(s.rows * c2), SMX_THREADS,
                  0, c2, (const T *)b[0], (T *)b[1], (long long)s.F, c2);
}

/* The most threads of softmax_reg_kernel's blocks for rows past a wave that stay in registers
 * rather than take softmax_tile_kernel (softmax_launch). */
#define SMX_MANY_THREADS 256

template <typename T>
static int softmax_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s)
{
    constexpr int E = 16 / (int)sizeof(T);
    constexpr long long VMAX = sizeof(T) == 4 ? 8 : 4;
    /* y at another offset from 16 bytes than x (a view): rows split by x's offset (row_span), y's
     * vectors realigned (apart_put, join16), in the warp kernel's instance for that, the slices
     * kernel's past a wave or else the read-twice kernel's (H200, x 4 bytes past 16, x the copy:
     * f32[1,50257] 3.50, [8,50257] 2.66, bf16[1024,32000] 1.19, [65536,128] 1.71, where the loop
     * kernel took 21.6, 15.4, 3.21 and 7.15; bf16[1024,32000] took 1.64 read twice) */
    const bool apart = (((uintptr_t)b[0] - (uintptr_t)b[1]) & 15) != 0;
    if (apart && s.rows > 0) {
        const long long nv = s.F / E, sms = sm_count(ctx);
        if (nv <= 32 * VMAX)
            return softmax_warp_pick<T>(ctx, b, s, nv, true, true);
        /* slices of shared memory where their blocks fill the SMs (as the aligned rows past a
         * wave take them), else the two-pass kernel */
        const int rc = softmax_tile_launch<T, true>(ctx, b, s, nv, sms);
        return rc <= 0 ? rc : softmax_l2_launch<T, true>(ctx, b, s, nv, sms);
    }
    /* x and y at the same offset from a 16-byte boundary, so that one split of a row into its
     * body and edges (row_span) serves both */
    if (!apart && s.rows > 0) {
        /* whole: every row is body (an aligned x, rows of a multiple of 16 bytes); the vectors
         * of a row's body at most and at least */
        const bool whole = s.F % E == 0 && al16(b[0]);
        const long long nv = s.F / E, sms = sm_count(ctx);
        const long long nv_min = whole ? nv : std::max(0LL, (long long)(s.F - E + 1) / E);
        auto vpt_of = [&](int c) { return ((nv + c - 1) / c + 1023) / 1024; };
        auto threads_of = [&](int c) {
            const long long per = (nv + c - 1) / c;
            return per >= 1024 ? 1024 : (int)((per + 31) / 32) * 32;
        };
        /* the reg kernel's resident blocks a SM for C blocks a row */
        auto resident = [&](int c) -> long long {
            const int th = threads_of(c);
            const long long per = (nv + c - 1) / c, vpt = (per + th - 1) / th;
            int r = 1;
            if (vpt <= 1)
                r = softmax_reg_resident<T, 1>(ctx, th);
            else if (vpt <= 2)
                r = softmax_reg_resident<T, 2>(ctx, th);
            else if (vpt <= 4)
                r = softmax_reg_resident<T, 4>(ctx, th);
            else if constexpr (sizeof(T) == 4)
                r = softmax_reg_resident<T, 8>(ctx, th);
            return (long long)r * sms;
        };
        /* rows of at most 32 * VMAX vectors: a warp each, or rows of at most 16 vectors a group
         * of lanes (H200, x the copy: f32[65536,128] 0.98, [16384,1024] 1.01 and 1.00, where a
         * block a row took 4.10, 1.44 and 1.55; bf16[65536,128] 1.07 at 2 rows a warp, 1.40 a
         * warp a row, 7.06 a block a row) */
        if (nv <= 32 * VMAX)
            return softmax_warp_pick<T>(ctx, b, s, nv, !whole, false);
        const int rg = softmax_grid_launch<T>(ctx, b, s, nv, nv_min, sms);
        if (rg <= 0)
            return rg;
        int C = 0;
        /* clusters for rows of 16384 values or more, and for a few rows (8 blocks a row within
         * the SMs) of 4096 or more (H200, x the copy: f32[1,8192] 2.00, [1,4096] 1.93, [2,8192]
         * 1.92, bf16[1,8192] 2.03, against 2.72, 2.50, 2.60 and 2.74 a block a row) */
        const bool cl = (s.F >= 16384 || (s.F >= 4096 && s.rows * 8 <= sms)) &&
                        cluster8_ok(ctx, (const void *)softmax_reg_kernel<T, 4>, 0);
        for (int c = 8; cl && c >= 2 && !C; c /= 2)
            if (vpt_of(c) <= VMAX && s.rows * c <= resident(c))
                C = c;
        if (!C && vpt_of(1) <= VMAX)
            C = 1;
        for (int c = 2; cl && c <= 8 && !C; c *= 2)
            if (vpt_of(c) <= VMAX)
                C = c;
        /* Rows of one block each past a wave, where blocks of SMX_MANY_THREADS hold them (at most
         * VMAX vectors a thread): small blocks (below), several a SM at different points of their
         * read, sums and stores, as a copy streams (H200, x the copy: f32[4096,8192] 0.98,
         * [8192,4096] 0.97, bf16[4096,8192] 1.10, against 1.61, 1.75 and 1.95 with 1024
         * threads, two blocks a SM) */
        const bool past = C == 1 && s.rows > resident(1); /* a block a row, past a wave */
        const bool many = past && nv <= SMX_MANY_THREADS * VMAX;
        /* more than one wave of blocks of 16 KB or more a thread block (rows a 256-thread block
         * holds aside): rows held in registers and shared memory where one wave of a block a SM
         * holds them (64 rows of 128256 f32); past it, where its slices are large
         * (SMS_WAVES_SLICE) and whole rounds keep the SMs busy, one after another on a persistent
         * grid, each row read under the last one's stores (softmax_stream_launch); else slices of
         * at most 64 KB in shared memory, three blocks a SM (H200, x the copy, against the kernels
         * below: f32 rows of 128256 at 67 / 96 / 200 rows 1.25 / 1.20 / 1.12 against 1.55 / 1.31
         * / 1.17, at 128 and 256 rows even, f32[512,65536] 1.04 against 1.09-1.15,
         * bf16[1024,32000] 1.05 against 1.15; 512 rows of 128256 in f32 and 256 in bf16 lost
         * 0.02-0.04 to them); rows longer than 8 such slices in registers and shared memory over
         * waves where slices are large (SMS_WAVES_SLICE), else the two-pass kernel */
        if (cl && !many && (!C || (s.rows * C > resident(C) && (nv + C - 1) / C * 16 >= 16384))) {
            int rc = softmax_smem_launch<T>(ctx, b, s, nv, sms, false);
            if (rc <= 0 || (rc = softmax_stream_launch<T>(ctx, b, s, nv, sms)) <= 0 ||
                (rc = softmax_tile_launch<T>(ctx, b, s, nv)) <= 0 ||
                (rc = softmax_smem_launch<T>(ctx, b, s, nv, sms, true)) <= 0)
                return rc;
            return softmax_l2_launch<T>(ctx, b, s, nv, sms);
        }
        if (C) {
            int threads = threads_of(C);
            /* past a wave, a block a row: the fewest threads that hold the row at VMAX vectors
             * a thread, so that more blocks share a SM (bf16[4096,4096] 1.09 the copy, [8192,2048]
             * 1.08, [512,14336] 1.30, f32[8192,2048] 1.00, against 1.47, 1.59, 1.82 and 1.10 with
             * 256 or 1024 threads) */
            if (past)
                threads =
                    (int)std::min((long long)threads, (nv + VMAX * 32 - 1) / (VMAX * 32) * 32);
            const long long vpt = ((nv + C - 1) / C + threads - 1) / threads;
            if (vpt <= 1)
                return softmax_reg_launch<T, 1>(ctx, b, s, C, threads);
            if (vpt <= 2)
                return softmax_reg_launch<T, 2>(ctx, b, s, C, threads);
            if (vpt <= 4)
                return softmax_reg_launch<T, 4>(ctx, b, s, C, threads);
            if constexpr (sizeof(T) == 4)
                return softmax_reg_launch<T, 8>(ctx, b, s, C, threads);
        }
    }
    const int threads = s.F >= 8192 ? 1024 : s.F >= 1024 ? 256 : 64;
    return launch(ctx, "softmax", softmax_kernel<T>, (unsigned)s.rows, threads, 0, 1,
                  (const T *)b[0], (T *)b[1], (long long)s.F);
}

extern "C" int baton__kcuda_softmax(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                    size_t len)
{
    DEC_READ(DEC_SOFTMAX, 2);
    if (s.rows > 0x7fffffffLL / 8)
        return baton__ctx_fail(ctx, BATON_EINVAL, "softmax: too many rows for one launch");
    switch (s.x_dt) {
    case BATON_DTYPE_BF16: return softmax_launch<__nv_bfloat16>(ctx, buffers, s);
    case BATON_DTYPE_F16: return softmax_launch<__half>(ctx, buffers, s);
    case BATON_DTYPE_F32: return softmax_launch<float>(ctx, buffers, s);
    default: return softmax_launch<double>(ctx, buffers, s);
    }
}
