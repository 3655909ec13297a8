/* decoder_sample.cu: sample on CUDA (temperature, top_k, top_p, a seeded draw), one block a row,
 * or a cluster of blocks where a row's keys fit their shared memory. */
#include "kernels/cuda/decoder_common.cuh"

namespace kcuda
{
namespace dec
{

/* ---- sample -------------------------------------------------------------------------------------
 * The CPU's definition (kernels/cpu/sample.c): order keys, weights in 2^-40 fixed point (integer
 * sums: exact, so atomics in shared memory still give the same bits), the top_k and top_p cuts
 * (here by radix selection), then the first kept index, ascending, whose running weight exceeds
 * u * total.
 * Index-ordered walks use a block scan over contiguous per-thread ranges. One block per row. */

#define SMP_THREADS 1024

template <typename T> __device__ __forceinline__ float logit_f(const T *x, long long i)
{
    float f = to_f(x[i]);
    return f != f ? -INFINITY : f;
}

template <typename T> __device__ __forceinline__ unsigned key_at(const T *x, long long i)
{
    return dec_order_key(__float_as_uint(logit_f(x, i)));
}

template <typename T>
__device__ __forceinline__ unsigned long long weight_at(const T *x, long long i, float mx,
                                                        float inv_t)
{
    return (unsigned long long)llrint(dec_sample_weight(logit_f(x, i), mx, inv_t));
}

struct Cut {
    unsigned t;
    long long i_cut;
};

/* The radix digits of the selections: 11, 11 and 10 bits from the top. Three passes; and a first
 * digit of sign, exponent and 3 mantissa bits spreads logits over many buckets, where 8 bits put
 * nearly all of them in two (shared-memory atomics on one address serialise). The selected key
 * does not depend on the digits: the CPU's 8-bit passes select the same. */
__device__ __forceinline__ int smp_shift(int pass)
{
    return pass == 0 ? 21 : pass == 1 ? 10 : 0;
}
__device__ __forceinline__ unsigned smp_digit_mask(int pass)
{
    return pass == 2 ? 1023u : 2047u;
}

/* cnt[b] += 1 for each lane, one atomic per distinct bucket of the warp's active lanes (integer
 * counts: any order gives the same sum). */
__device__ __forceinline__ void count_bucket(unsigned *cnt, unsigned b)
{
    const unsigned act = __activemask(), peers = __match_any_sync(act, b);
    if ((threadIdx.x & 31) == __ffs(peers) - 1)
        atomicAdd(&cnt[b], (unsigned)__popc(peers));
}

__device__ __forceinline__ bool is_member(const Cut &c, unsigned key, long long i)
{
    return key > c.t || (key == c.t && i <= c.i_cut);
}

/* Inclusive scan of one value a lane over the warp. */
__device__ __forceinline__ unsigned long long warp_incl_scan(unsigned long long v)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o)
            v += t;
    }
    return v;
}

/* Exclusive scan of one value per thread over the block (fixed order); *total gets the sum. */
__device__ unsigned long long block_excl_scan(unsigned long long v, unsigned long long *sh,
                                              unsigned long long *total)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const unsigned long long inc = warp_incl_scan(v);
    __syncthreads();
    if (lane == 31)
        sh[wid] = inc;
    __syncthreads();
    unsigned long long before = 0, all = 0;
    for (int w = 0; w < nw; w++) {
        if (w < wid)
            before += sh[w];
        all += sh[w];
    }
    *total = all;
    return before + inc - v;
}

template <typename T>
__global__ void __launch_bounds__(SMP_THREADS)
    sample_kernel(const T *logits, const void *stepp, int step64, long long *out, long long V,
                  double temperature, int top_k, double top_p, unsigned long long seed)
{
    __shared__ unsigned long long mass[2048], scan_sh[32];
    __shared__ unsigned cnt[2048];
    __shared__ unsigned s_key;
    __shared__ long long s_idx;
    __shared__ Cut s_cut;
    const long long row = blockIdx.x;
    const T *x = logits + row * V;
    pdl_wait(); /* the logits and the step may be a predecessor's outputs */
    pdl_trigger();
    const long long step = step64 ? *(const long long *)stepp : *(const int *)stepp;
    const int tid = threadIdx.x;
    const long long per = (V + SMP_THREADS - 1) / SMP_THREADS;
    const long long lo = min(V, tid * per), hi = min(V, lo + per);

    /* the maximum: largest key, first index */
    unsigned kmax = 0;
    long long imax = -1;
    for (long long i = lo; i < hi; i++) {
        const unsigned k = key_at(x, i);
        if (imax < 0 || k > kmax) {
            kmax = k;
            imax = i;
        }
    }
    if (tid == 0) {
        s_key = 0;
        s_idx = V;
    }
    __syncthreads();
    if (imax >= 0)
        atomicMax(&s_key, kmax);
    __syncthreads();
    if (imax >= 0 && kmax == s_key)
        atomicMin((unsigned long long *)&s_idx, (unsigned long long)imax);
    __syncthreads();
    const long long i_max = s_idx;
    const float mx = logit_f(x, i_max);
    if (mx == -INFINITY) {
        if (tid == 0)
            out[row] = i_max;
        return;
    }
    const float inv_t = (float)(1.0 / temperature);
    Cut c = {0u, 0x7fffffffffffffffLL};

    if (top_k > 0 && top_k < V) {
        unsigned prefix = 0, mask = 0;
        long long need = top_k;
        for (int pass = 0; pass < 3; pass++) {
            const int shift = smp_shift(pass);
            const unsigned dm = smp_digit_mask(pass);
            for (int b = tid; b <= (int)dm; b += SMP_THREADS)
                cnt[b] = 0;
            __syncthreads();
            for (long long i = tid; i < V; i += SMP_THREADS) {
                const unsigned k = key_at(x, i);
                if ((k & mask) == prefix)
                    count_bucket(cnt, (k >> shift) & dm);
            }
            __syncthreads();
            int b = (int)dm; /* every thread walks the same counts: the same answer */
            for (; b > 0 && (long long)cnt[b] < need; b--)
                need -= cnt[b];
            prefix |= (unsigned)b << shift;
            mask |= dm << shift;
            __syncthreads();
        }
        /* the need-th tie of key == prefix, in index order */
        unsigned long long mine = 0, tot;
        for (long long i = lo; i < hi; i++)
            mine += key_at(x, i) == prefix;
        const unsigned long long before = block_excl_scan(mine, scan_sh, &tot);
        if (before < (unsigned long long)need && before + mine >= (unsigned long long)need) {
            unsigned long long k = before;
            for (long long i = lo; i < hi; i++)
                if (key_at(x, i) == prefix && ++k == (unsigned long long)need) {
                    s_cut.t = prefix;
                    s_cut.i_cut = i;
                    break;
                }
        }
        __syncthreads();
        c = s_cut;
    }

    unsigned long long mine = 0, total;
    for (long long i = lo; i < hi; i++)
        if (is_member(c, key_at(x, i), i))
            mine += weight_at(x, i, mx, inv_t);
    block_excl_scan(mine, scan_sh, &total);

    if (top_p < 1) {
        const unsigned long long target = (unsigned long long)ceil(top_p * (double)total);
        unsigned prefix = 0, mask = 0;
        unsigned long long before = 0;
        for (int pass = 0; pass < 3; pass++) {
            const int shift = smp_shift(pass);
            const unsigned dm = smp_digit_mask(pass);
            for (int b = tid; b <= (int)dm; b += SMP_THREADS) {
                cnt[b] = 0;
                mass[b] = 0;
            }
            __syncthreads();
            for (long long i = tid; i < V; i += SMP_THREADS) {
                const unsigned k = key_at(x, i);
                if ((k & mask) == prefix && is_member(c, k, i)) {
                    count_bucket(cnt, (k >> shift) & dm);
                    const unsigned long long w = weight_at(x, i, mx, inv_t);
                    if (w)
                        atomicAdd(&mass[(k >> shift) & dm], w);
                }
            }
            __syncthreads();
            int b = (int)dm, lowest = -1;
            for (; b >= 0; b--) {
                if (!cnt[b])
                    continue;
                lowest = b;
                if (before + mass[b] >= target)
                    break;
                before += mass[b];
            }
            if (b < 0) {
                b = lowest;
                before -= mass[b];
            }
            prefix |= (unsigned)b << shift;
            mask |= dm << shift;
            __syncthreads();
        }
        /* ties of key == prefix among the members, in index order, until the mass reaches it */
        unsigned long long tm = 0, ttot;
        for (long long i = lo; i < hi; i++) {
            const unsigned k = key_at(x, i);
            if (k == prefix && is_member(c, k, i))
                tm += weight_at(x, i, mx, inv_t);
        }
        const unsigned long long tb = block_excl_scan(tm, scan_sh, &ttot);
        if (tid == 0) {
            s_cut.t = prefix;
            s_cut.i_cut = -1;
        }
        __syncthreads();
        /* the thread whose range crosses the target, or (short of it) the last tie */
        const bool cross = before + tb < target && before + tb + tm >= target;
        const bool last_tie = before + ttot < target && tm > 0 && tb + tm == ttot;
        if (cross || last_tie) {
            unsigned long long cum = before + tb;
            for (long long i = lo; i < hi; i++) {
                const unsigned k = key_at(x, i);
                if (k == prefix && is_member(c, k, i)) {
                    s_cut.i_cut = i;
                    cum += weight_at(x, i, mx, inv_t);
                    if (cum >= target && cross)
                        break;
                }
            }
        }
        __syncthreads();
        const Cut p = s_cut;
        if (p.t > c.t || (p.t == c.t && p.i_cut < c.i_cut))
            c = p;
        mine = 0;
        for (long long i = lo; i < hi; i++)
            if (is_member(c, key_at(x, i), i))
                mine += weight_at(x, i, mx, inv_t);
        block_excl_scan(mine, scan_sh, &total);
    }

    const unsigned long long target =
        (unsigned long long)(dec_uniform(seed, step, row) * (double)total);
    mine = 0;
    for (long long i = lo; i < hi; i++)
        if (is_member(c, key_at(x, i), i))
            mine += weight_at(x, i, mx, inv_t);
    unsigned long long tot2;
    const unsigned long long before = block_excl_scan(mine, scan_sh, &tot2);
    if (before <= target && before + mine > target) {
        unsigned long long cum = before;
        for (long long i = lo; i < hi; i++)
            if (is_member(c, key_at(x, i), i)) {
                cum += weight_at(x, i, mx, inv_t);
                if (cum > target) {
                    out[row] = i;
                    break;
                }
            }
    }
}

/* ---- sample over a cluster -------------------------------------------------------------------
 * The same selections as sample_kernel (so the same token), with the row read once: SMC_C blocks a
 * row, each holding the order keys of its contiguous slice of the row (rank order = index order)
 * in shared memory. The radix passes' histograms are combined across the cluster through
 * distributed shared memory (integer counts and 2^-40 masses: exact, so the same in any order),
 * the bucket of each pass found by a block scan of the bins rather than a walk of 2048 of them by
 * every thread, and the cuts within a bucket's ties, and the draw, in the one block whose slice
 * holds them (a block scan over contiguous per-thread ranges, index order). top_k == 1 (greedy)
 * is the maximum's index: its weight is the whole mass. Histogram buffers alternate between passes:
 * a pass's cluster barrier orders the peers' reads of the buffer of two passes before against its
 * zeroing. Where the keys at or above the first or second pass's cut bin are few (SMC_CAND), they
 * are gathered into rank 0, which finishes alone (sample_candidates_warp / _finish). */

#define SMC_C        8
#define SMC_BINS     2048
#define SMC_FIXED    (2 * SMC_BINS * 4 * sizeof(unsigned)) /* counts and 3 mass limbs, x2 */
#define SMC_SMEM_MAX (200 * 1024)
#define SMC_KMAX     1024 /* top_k up to this: the members finish in one block (candidates) */

__device__ __forceinline__ float key_logit(unsigned k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* The CPU's weight (weight_of in kernels/cpu/sample.c, sample_kernel's weight_at) from a key. */
__device__ __forceinline__ unsigned long long key_weight(unsigned k, float mx, float inv_t)
{
    return (unsigned long long)llrint(dec_sample_weight(key_logit(k), mx, inv_t));
}

/* Per-thread contiguous ranges of the block's slice of n keys (index order across threads). */
__device__ __forceinline__ void my_range(long long n, long long *b, long long *e)
{
    const long long rp = (n + blockDim.x - 1) / blockDim.x;
    *b = min(n, (long long)threadIdx.x * rp);
    *e = min(n, *b + rp);
}

/* Candidates (the keys of a radix pass's cut bin and above) that rank 0 takes alone, at most:
 * their order by a sort in shared memory (16 KB of 64-bit entries) replaces the passes left, the
 * ties' search and the members' weighing over the whole row. */
#define SMC_CAND 2048
/* the gather's buffer within a mass buffer; the weights in the other, the index order past both */
static_assert(SMC_CAND * 8 <= 3 * SMC_BINS * sizeof(unsigned),
              "a candidate buffer in a mass buffer");
static_assert(3 * SMC_BINS * sizeof(unsigned) + 2 * SMC_CAND * 8 <= SMC_FIXED,
              "candidates' buffers");

/* Sorts a[0 .. m) in shared memory over the block, descending or ascending: a bitonic network over
 * the next power of two (at most SMC_CAND entries), the entries past m padded to sort last (0, or
 * all ones), a block barrier a stage. */
__device__ void block_bitonic(unsigned long long *a, int m, bool desc)
{
    int n = 1;
    while (n < m)
        n <<= 1;
    for (int i = m + threadIdx.x; i < n; i += blockDim.x)
        a[i] = desc ? 0ull : ~0ull;
    __syncthreads();
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const int l = i ^ j;
                if (l > i) {
                    const unsigned long long x = a[i], y = a[l];
                    if ((((i & k) == 0) != desc) ? x > y : x < y) {
                        a[i] = y;
                        a[l] = x;
                    }
                }
            }
            __syncthreads();
        }
}

/* The draw from the m candidates that rank 0 gathered into cand (key << 32 | ~index: the order,
 * key descending then index ascending, is the entries' descending order): the sort gives the
 * order; the first K = min(top_k, m) (cut_k: a top_k cut) or all m are the members; the top_p cut
 * is the shortest prefix whose mass reaches ceil(top_p * z), z the members' mass (tot_all, every
 * key's, where no top_k cut); the kept ones sorted by index, and the first whose running weight
 * exceeds u * their mass is the token: the definition in exact integers, as the radix path. Each
 * thread scans entries 2 tid and 2 tid + 1. wts and idxc: SMC_CAND entries each. */
__device__ __noinline__ void
sample_candidates_finish(unsigned long long *cand, int m, bool cut_k, int top_k,
                         unsigned long long tot_all, float mx, float inv_t, double top_p,
                         unsigned long long seed, long long step, long long row, long long *out,
                         unsigned long long *wts, unsigned long long *idxc,
                         unsigned long long *scan_sh, int *s_kept)
{
    const int tid = threadIdx.x, T_ = blockDim.x;
    block_bitonic(cand, m, true); /* no key is 0: its padding sorts last */
    const int K = cut_k && top_k < m ? top_k : m;
    for (int i = tid; i < K; i += T_)
        wts[i] = key_weight((unsigned)(cand[i] >> 32), mx, inv_t);
    if (tid == 0)
        *s_kept = K;
    __syncthreads();
    const int i0 = 2 * tid, i1 = 2 * tid + 1;
    int kept = K;
    if (top_p < 1) {
        const unsigned long long a0 = i0 < K ? wts[i0] : 0ull, a1 = i1 < K ? wts[i1] : 0ull;
        unsigned long long tot;
        const unsigned long long ex = block_excl_scan(a0 + a1, scan_sh, &tot);
        const unsigned long long target =
            (unsigned long long)ceil(top_p * (double)(cut_k ? tot : tot_all));
        if (i0 < K && ex < target && ex + a0 >= target)
            *s_kept = i0 + 1;
        else if (i1 < K && ex + a0 < target && ex + a0 + a1 >= target)
            *s_kept = i1 + 1;
        __syncthreads();
        kept = *s_kept;
    }
    /* the kept ones by index: index << 32 | place in the order (the stored ~index, inverted) */
    for (int i = tid; i < kept; i += T_)
        idxc[i] = ((unsigned long long)(~(unsigned)cand[i]) << 32) | (unsigned)i;
    block_bitonic(idxc, kept, false);
    const unsigned long long b0 = i0 < kept ? wts[(unsigned)idxc[i0]] : 0ull,
                             b1 = i1 < kept ? wts[(unsigned)idxc[i1]] : 0ull;
    unsigned long long tot;
    const unsigned long long before = block_excl_scan(b0 + b1, scan_sh, &tot);
    unsigned long long target = (unsigned long long)(dec_uniform(seed, step, row) * (double)tot);
    if (target >= tot)
        target = tot - 1;
    if (i0 < kept && before <= target && before + b0 > target)
        out[row] = (long long)(idxc[i0] >> 32);
    else if (i1 < kept && before + b0 <= target && before + b0 + b1 > target)
        out[row] = (long long)(idxc[i1] >> 32);
}

/* Sorts the warp's 32 E values (value e of lane l is entry l E + e), descending or ascending: the
 * bitonic network in registers, partners in other lanes by shuffles. */
template <int E> __device__ __forceinline__ void warp_bitonic(unsigned long long (&v)[E], bool desc)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 2; k <= 32 * E; k <<= 1)
#pragma unroll
        for (int j = k >> 1; j > 0; j >>= 1)
#pragma unroll
            for (int e = 0; e < E; e++) {
                const int i = lane * E + e;
                const bool up = ((i & k) == 0) != desc; /* this pair ascending */
                if (j < E) {
                    const int f = e ^ j;
                    if (f > e) {
                        const unsigned long long a = v[e], b = v[f];
                        if (up ? a > b : a < b) {
                            v[e] = b;
                            v[f] = a;
                        }
                    }
                } else {
                    const unsigned long long o = __shfl_xor_sync(0xffffffffu, v[e], j / E);
                    const bool low = (i & j) == 0; /* the pair's lower entry keeps the least */
                    v[e] = (low == up) ? (o < v[e] ? o : v[e]) : (o > v[e] ? o : v[e]);
                }
            }
}

/* Exclusive scan of one value a lane over the warp; *total gets the sum. */
__device__ __forceinline__ unsigned long long warp_excl_scan(unsigned long long v,
                                                             unsigned long long *total)
{
    const unsigned long long inc = warp_incl_scan(v);
    *total = __shfl_sync(0xffffffffu, inc, 31);
    return inc - v;
}

/* sample_candidates_finish's steps in one warp, for m <= 32 E candidates: the block's form paid
 * a barrier of 1024 threads for each step of its sorts and scans (about 12 us in all, H200),
 * where a warp's registers and shuffles take none. wts: m entries of shared memory. */
template <int E>
__device__ __noinline__ void
sample_candidates_warp(const unsigned long long *cand, int m, bool cut_k, int top_k,
                       unsigned long long tot_all, float mx, float inv_t, double top_p,
                       unsigned long long seed, long long step, long long row, long long *out,
                       unsigned long long *wts)
{
    const int lane = threadIdx.x & 31;
    unsigned long long v[E], w[E], sum = 0, tot;
#pragma unroll
    for (int e = 0; e < E; e++)
        v[e] = lane * E + e < m ? cand[lane * E + e] : 0ull; /* no key is 0: padding sorts last */
    warp_bitonic<E>(v, true);
    const int K = cut_k && top_k < m ? top_k : m;
#pragma unroll
    for (int e = 0; e < E; e++) {
        w[e] = lane * E + e < K ? key_weight((unsigned)(v[e] >> 32), mx, inv_t) : 0ull;
        sum += w[e];
    }
    int kept = K;
    if (top_p < 1) {
        unsigned long long run = warp_excl_scan(sum, &tot);
        const unsigned long long target =
            (unsigned long long)ceil(top_p * (double)(cut_k ? tot : tot_all));
        int hit = 0;
#pragma unroll
        for (int e = 0; e < E; e++) {
            if (lane * E + e < K && run < target && run + w[e] >= target)
                hit = lane * E + e + 1;
            run += w[e];
        }
        hit = __reduce_max_sync(0xffffffffu, hit);
        if (hit)
            kept = hit;
    }
    /* the kept ones by index: index << 32 | place in the order, their weights by place */
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int i = lane * E + e;
        if (i < kept)
            wts[i] = w[e];
        v[e] = i < kept ? ((unsigned long long)(~(unsigned)v[e]) << 32) | (unsigned)i : ~0ull;
    }
    __syncwarp();
    warp_bitonic<E>(v, false);
    sum = 0;
#pragma unroll
    for (int e = 0; e < E; e++) {
        w[e] = lane * E + e < kept ? wts[(unsigned)v[e]] : 0ull;
        sum += w[e];
    }
    unsigned long long run = warp_excl_scan(sum, &tot);
    unsigned long long target = (unsigned long long)(dec_uniform(seed, step, row) * (double)tot);
    if (target >= tot)
        target = tot - 1;
#pragma unroll
    for (int e = 0; e < E; e++) {
        if (lane * E + e < kept && run <= target && run + w[e] > target)
            out[row] = (long long)(v[e] >> 32);
        run += w[e];
    }
}

template <typename T>
__global__ void __launch_bounds__(SMP_THREADS)
    sample_cluster_kernel(const T *logits, const void *stepp, int step64, long long *out,
                          long long V, long long per, int vec, double temperature, int top_k,
                          double top_p, unsigned long long seed, int cand_max)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    /* masses as three 14-bit limbs of the 41-bit weights, each summed with 32-bit shared atomics
     * (a slice's 2^15 weights sum under 2^30 a limb): a 64-bit add in shared memory may be a
     * compare-and-swap loop, and the first pass of flat logits puts most of them on a few bins */
    unsigned(*mass)[3][SMC_BINS] = reinterpret_cast<unsigned(*)[3][SMC_BINS]>(smem_raw);
    unsigned(*cnt)[SMC_BINS] =
        reinterpret_cast<unsigned(*)[SMC_BINS]>(smem_raw + 2 * 3 * SMC_BINS * sizeof(unsigned));
    unsigned *keys = reinterpret_cast<unsigned *>(smem_raw + SMC_FIXED);
    __shared__ unsigned long long scan_sh[32], s_sum[2], s_before, s_imax;
    __shared__ unsigned s_kmax;
    __shared__ int s_b, s_lowest;
    __shared__ long long s_need, s_ge, s_gt;
    __shared__ Cut s_cut[2];
    __shared__ unsigned s_members;
    __shared__ int s_kept;

    cg::cluster_group cluster = cg::this_cluster();
    /* launched in clusters of SMC_C: a constant, so the loops over the ranks unroll and their
     * distributed shared memory loads are in flight together */
    constexpr int C = SMC_C;
    const int rank = (int)cluster.block_rank();
    const int tid = threadIdx.x, T_ = blockDim.x;
    const long long row = blockIdx.x / (unsigned)C;
    const T *x = logits + row * V;
    const long long lo = min(V, rank * per), n = min(V, lo + per) - lo;
    pdl_wait(); /* the logits and the step may be a predecessor's outputs */
    pdl_trigger();
    const long long step = step64 ? *(const long long *)stepp : *(const int *)stepp;

    /* the slice's keys into shared memory; the thread's largest key, first index */
    unsigned kmax = 0;
    long long imax = -1;
    auto put = [&](long long j, T v) {
        float f = to_f(v);
        f = f != f ? -INFINITY : f;
        const unsigned k = dec_order_key(__float_as_uint(f));
        keys[j] = k;
        if (imax < 0 || k > kmax || (k == kmax && lo + j < imax)) {
            kmax = k;
            imax = lo + j;
        }
    };
    constexpr int E = 16 / (int)sizeof(T);
    long long done = 0;
    if (vec) {
        /* four vectors a thread loaded before any is used: one memory latency for a decode
         * step's slice, where a loop of load-then-use waited for each */
        const long long nv = n / E;
        for (long long j0 = 0; j0 < nv; j0 += 4LL * T_) {
            U16<T> u[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const long long j = j0 + (long long)k * T_ + tid;
                if (j < nv)
                    u[k] = ld16_stream(x + lo + j * E);
            }
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const long long j = j0 + (long long)k * T_ + tid;
                if (j < nv)
#pragma unroll
                    for (int e = 0; e < E; e++)
                        put(j * E + e, u[k].v[e]);
            }
        }
        done = nv * E;
    }
    for (long long j = done + tid; j < n; j += T_)
        put(j, x[lo + j]);
    if (tid == 0) {
        s_kmax = 0;
        s_imax = ~0ull;
        s_members = 0;
    }
    __syncthreads();
    {
        /* the warp's maximum first, then one shared atomic a warp: 1024 lanes on one address
         * were 1024 serialised atomics (keys are never 0: 0 is a lane without elements) */
        const unsigned wk = __reduce_max_sync(0xffffffffu, imax >= 0 ? kmax : 0u);
        if ((tid & 31) == 0 && wk)
            atomicMax(&s_kmax, wk);
    }
    __syncthreads();
    if (imax >= 0 && kmax == s_kmax)
        atomicMin(&s_imax, (unsigned long long)imax);
    cluster.sync();
    /* the row's maximum: the largest key of the ranks, its first index (ranks in index order) */
    unsigned gk = 0;
    long long gi = -1;
#pragma unroll
    for (int q = 0; q < C; q++) {
        const unsigned long long qi = *cluster.map_shared_rank(&s_imax, q);
        const unsigned qk = *cluster.map_shared_rank(&s_kmax, q);
        if (qi != ~0ull && (gi < 0 || qk > gk)) {
            gk = qk;
            gi = (long long)qi;
        }
    }
    const float mx = key_logit(gk);
    if (mx == -INFINITY || top_k == 1) { /* nothing to weigh, or greedy */
        if (rank == 0 && tid == 0)
            out[row] = gi;
        cluster_exit_barrier();
        return;
    }
    const float inv_t = (float)(1.0 / temperature);
    Cut c = {0u, 0x7fffffffffffffffLL};
    int par = 0;

    /* bin b of rank q's mass limbs, as one weight sum */
    auto limbs = [&](unsigned(*hm)[SMC_BINS], int b, int q) {
        return (unsigned long long)*cluster.map_shared_rank(&hm[0][b], q) +
               ((unsigned long long)*cluster.map_shared_rank(&hm[1][b], q) << 14) +
               ((unsigned long long)*cluster.map_shared_rank(&hm[2][b], q) << 28);
    };
    /* one radix pass over the members under `c` whose key matches prefix/mask: this block's counts
     * (and masses when with_mass) of digit (key >> shift) & dm into buffer par, then the cluster's
     * sums of bins dm - 2 tid and dm - 2 tid - 1 into g[0..1] (and gm), bins above them into
     * the exclusive scan's result, and all bins' mass into *tot_m */
    auto pass = [&](unsigned prefix, unsigned mask, int shift, unsigned dm, bool with_mass,
                    unsigned long long g[2], unsigned long long gm[2], unsigned long long *above_c,
                    unsigned long long *above_m, unsigned long long *tot_m) {
        unsigned *h = cnt[par];
        unsigned(*hm)[SMC_BINS] = mass[par];
        for (int b = tid; b <= (int)dm; b += T_) {
            h[b] = 0;
            if (with_mass)
                hm[0][b] = hm[1][b] = hm[2][b] = 0;
        }
        __syncthreads();
        for (long long j = tid; j < n; j += T_) {
            const unsigned k = keys[j];
            if ((k & mask) == prefix && is_member(c, k, lo + j)) {
                /* each lane's own shared-memory atomics (integer sums: exact in any order);
                 * grouping a warp's lanes by bin first was slower: decision 0016 */
                const unsigned b = (k >> shift) & dm;
                atomicAdd(&h[b], 1u);
                if (with_mass) {
                    const unsigned long long w = key_weight(k, mx, inv_t);
                    if (w & 0x3fff)
                        atomicAdd(&hm[0][b], (unsigned)(w & 0x3fff));
                    if (w >> 14 & 0x3fff)
                        atomicAdd(&hm[1][b], (unsigned)(w >> 14 & 0x3fff));
                    if (w >> 28)
                        atomicAdd(&hm[2][b], (unsigned)(w >> 28));
                }
            }
        }
        cluster.sync();
        /* bins dm - 2 tid and the one below it, as one 8-byte load of each rank's counts (and of
         * each mass limb): dm is odd, so the pair starts on an even bin. Half the distributed
         * shared memory loads of a bin at a time, which every block makes for every bin. */
        g[0] = g[1] = gm[0] = gm[1] = 0;
        const int pb = (int)dm - 2 * tid - 1;
        if (pb >= 0)
#pragma unroll
            for (int q = 0; q < C; q++) {
                const uint2 hc = *cluster.map_shared_rank(reinterpret_cast<uint2 *>(&h[pb]), q);
                g[0] += hc.y;
                g[1] += hc.x;
                if (with_mass)
#pragma unroll
                    for (int l = 0; l < 3; l++) {
                        const uint2 hl =
                            *cluster.map_shared_rank(reinterpret_cast<uint2 *>(&hm[l][pb]), q);
                        gm[0] += (unsigned long long)hl.y << (14 * l);
                        gm[1] += (unsigned long long)hl.x << (14 * l);
                    }
            }
        unsigned long long tot;
        *above_c = block_excl_scan(g[0] + g[1], scan_sh, &tot);
        if (with_mass)
            *above_m = block_excl_scan(gm[0] + gm[1], scan_sh, tot_m);
    };
    /* the members' mass in this block's slice, then the cluster's: *before the ranks' below this */
    auto member_mass = [&](int slot, unsigned long long *before) {
        unsigned long long mine = 0;
        for (long long j = tid; j < n; j += T_) {
            const unsigned k = keys[j];
            if (is_member(c, k, lo + j))
                mine += key_weight(k, mx, inv_t);
        }
        mine = block_sum<unsigned long long>(mine, scan_sh);
        if (tid == 0)
            s_sum[slot] = mine;
        cluster.sync();
        unsigned long long tot = 0, b = 0;
#pragma unroll
        for (int q = 0; q < C; q++) {
            const unsigned long long v = *cluster.map_shared_rank(&s_sum[slot], q);
            if (q < rank)
                b += v;
            tot += v;
        }
        *before = b;
        return tot;
    };

    const bool cut_k = top_k > 0 && top_k < V;
    /* the keys that keep(key, index) selects (at most SMC_CAND: the keys at or above a pass's cut
     * bin, or the top_k members after the three passes) into rank 0's shared memory in any order,
     * a warp's at once, and rank 0 finishes alone (sample_candidates_warp / _finish). The gather
     * fills the mass buffer that this pass left alone (the last pass's, whose reads ended before
     * this pass's barrier), while peers may still read this pass's histograms; after the gather's
     * barrier the rest is free. */
    auto candidates = [&](auto keep, unsigned long long tot_all) {
        unsigned long long *buf = reinterpret_cast<unsigned long long *>(&mass[par ^ 1][0][0]);
        unsigned long long *rbuf = cluster.map_shared_rank(buf, 0);
        unsigned *rcount = cluster.map_shared_rank(&s_members, 0);
        const int lane = tid & 31;
        for (long long j0 = 0; j0 < n; j0 += T_) { /* warp-uniform trip count */
            const long long j = j0 + tid;
            const unsigned k = j < n ? keys[j] : 0u;
            const bool in = j < n && keep(k, lo + j);
            const unsigned bal = __ballot_sync(0xffffffffu, in);
            unsigned base = 0;
            if (lane == 0 && bal)
                base = atomicAdd(rcount, (unsigned)__popc(bal));
            base = __shfl_sync(0xffffffffu, base, 0);
            if (in)
                rbuf[base + __popc(bal & ((1u << lane) - 1u))] =
                    ((unsigned long long)k << 32) | (unsigned)~(unsigned)(lo + j);
        }
        cluster.sync(); /* every peer's gather, and its reads of the first pass's histograms */
        if (rank != 0)
            return;
        const int m = (int)s_members;
        /* the order's weights in the other mass buffer, the index order past both */
        unsigned long long *wts = reinterpret_cast<unsigned long long *>(&mass[par][0][0]),
                           *idxc =
                               reinterpret_cast<unsigned long long *>(&mass[1][0][0]) + SMC_CAND;
        if (m <= 128) {
            if (tid < 32) {
                if (m <= 64)
                    sample_candidates_warp<2>(buf, m, cut_k, top_k, tot_all, mx, inv_t, top_p, seed,
                                              step, row, out, wts);
                else
                    sample_candidates_warp<4>(buf, m, cut_k, top_k, tot_all, mx, inv_t, top_p, seed,
                                              step, row, out, wts);
            }
            return;
        }
        sample_candidates_finish(buf, m, cut_k, top_k, tot_all, mx, inv_t, top_p, seed, step, row,
                                 out, wts, idxc, scan_sh, &s_kept);
    };

    if (cut_k) {
        unsigned prefix = 0, mask = 0;
        long long need = top_k;
        int b = 0;
        for (int ps = 0; ps < 3; ps++) {
            const int shift = smp_shift(ps);
            const unsigned dm = smp_digit_mask(ps);
            unsigned long long g[2], gm[2], above, am, tm;
            if (tid == 0) {
                s_b = 0; /* not reached: the matching keys are at least need */
                s_need = need;
                s_ge = V + 1;
            }
            pass(prefix, mask, shift, dm, false, g, gm, &above, &am, &tm);
            /* the largest bin whose count with those above reaches need */
            for (int s2 = 0; s2 < 2; s2++) {
                const int bb = (int)dm - 2 * tid - s2;
                const unsigned long long gt = above + (s2 ? g[0] : 0);
                if (bb >= 0 && gt < (unsigned long long)need &&
                    gt + g[s2] >= (unsigned long long)need) {
                    s_b = bb;
                    s_need = need - (long long)gt;
                    s_ge = (long long)(gt + g[s2]);
                }
            }
            __syncthreads();
            b = s_b;
            /* keys at or above the cut bin: those above this pass's prefix, and its own */
            const long long ge = top_k - need + s_ge;
            need = s_need;
            prefix |= (unsigned)b << shift;
            mask |= dm << shift;
            if (ps < 2 && ge <= cand_max) {
                candidates([prefix](unsigned k, long long) { return k >= prefix; }, 0ull);
                return; /* no block reads another's shared memory after the gather */
            }
            if (ps < 2)
                par ^= 1;
            __syncthreads(); /* s_b and s_need are read before the next pass resets them */
        }
        /* the need-th tie of key == prefix in index order: in the rank whose ties reach it */
        const unsigned *h = cnt[par];
        int owner = C - 1;
        long long tb = 0;
#pragma unroll
        for (int q = 0; q < C; q++) {
            const long long tq = (long long)*cluster.map_shared_rank(&h[b], q);
            if (tb + tq >= need) {
                owner = q;
                break;
            }
            tb += tq;
        }
        if (rank == owner) {
            const long long want = need - tb;
            long long jb, je;
            my_range(n, &jb, &je);
            unsigned long long mine = 0, tot;
            for (long long j = jb; j < je; j++)
                mine += keys[j] == prefix;
            const unsigned long long before = block_excl_scan(mine, scan_sh, &tot);
            if (before < (unsigned long long)want && before + mine >= (unsigned long long)want) {
                unsigned long long k = before;
                for (long long j = jb; j < je; j++)
                    if (keys[j] == prefix && ++k == (unsigned long long)want) {
                        s_cut[0].t = prefix;
                        s_cut[0].i_cut = lo + j;
                        break;
                    }
            }
        }
        par ^= 1;
        cluster.sync();
        c = *cluster.map_shared_rank(&s_cut[0], owner);
        if (top_k <= SMC_KMAX) { /* the members, exactly top_k of them */
            candidates([c](unsigned k, long long i) { return is_member(c, k, i); }, 0ull);
            return; /* no block reads another's shared memory after the gather */
        }
    }

    unsigned long long before_r, total = 0;
    if (top_p < 1) {
        /* the members' total is the first pass's mass over all its bins (a pass of its own
         * weighed every member once more) */
        unsigned long long target = 0;
        unsigned prefix = 0, mask = 0;
        unsigned long long before = 0, tot_all = 0;
        long long n_above = 0; /* keys above the prefix */
        int b = 0;
        for (int ps = 0; ps < 3; ps++) {
            const int shift = smp_shift(ps);
            const unsigned dm = smp_digit_mask(ps);
            unsigned long long g[2], gm[2], above_c, above_m, tot_m;
            if (tid == 0) {
                s_b = -1;
                s_lowest = 0x7fffffff;
                s_ge = V + 1;
            }
            pass(prefix, mask, shift, dm, true, g, gm, &above_c, &above_m, &tot_m);
            if (ps == 0) {
                target = (unsigned long long)ceil(top_p * (double)tot_m);
                tot_all = tot_m;
            }
            /* the CPU's walk from the top bin: the first non-empty bin where the mass above and
             * its own reach the target; short of it everywhere, the lowest non-empty bin */
            for (int s2 = 0; s2 < 2; s2++) {
                const int bb = (int)dm - 2 * tid - s2;
                const unsigned long long ge = before + above_m + gm[0] + (s2 ? gm[1] : 0);
                if (bb >= 0 && g[s2] > 0) {
                    atomicMin(&s_lowest, bb);
                    if (ge >= target)
                        atomicMax(&s_b, bb);
                }
            }
            __syncthreads();
            b = s_b >= 0 ? s_b : s_lowest;
            for (int s2 = 0; s2 < 2; s2++)
                if ((int)dm - 2 * tid - s2 == b) {
                    s_before = before + above_m + (s2 ? gm[0] : 0);
                    s_gt = (long long)(above_c + (s2 ? g[0] : 0));
                    s_ge = s_gt + (long long)g[s2];
                }
            __syncthreads();
            before = s_before;
            /* keys at or above the cut bin: those above this pass's prefix, and its own */
            const long long ge = n_above + s_ge;
            n_above += s_gt;
            prefix |= (unsigned)b << shift;
            mask |= dm << shift;
            if (ps < 2 && !cut_k && ge <= cand_max) {
                /* the kept set lies in the cut bin and above: their mass reaches the target */
                candidates([prefix](unsigned k, long long) { return k >= prefix; }, tot_all);
                return;
            }
            if (ps < 2)
                par ^= 1;
        }
        /* the ties of key == prefix among the members, in index order, until the mass reaches
         * the target: in the rank whose ties' mass crosses it, else the last rank with ties (its
         * last tie) */
        const unsigned *h = cnt[par];
        unsigned(*hm)[SMC_BINS] = mass[par];
        int owner = -1, last = -1;
        unsigned long long tb = before;
        bool cross = false;
#pragma unroll
        for (int q = 0; q < C; q++) {
            const unsigned long long tq = limbs(hm, b, q);
            if (*cluster.map_shared_rank(&h[b], q))
                last = q;
            if (owner < 0 && tb < target && tb + tq >= target) {
                owner = q;
                cross = true;
            }
            if (owner < 0)
                tb += tq;
        }
        if (owner < 0)
            owner = last;
        if (rank == owner) {
            long long jb, je;
            my_range(n, &jb, &je);
            unsigned long long tm = 0, ttot;
            for (long long j = jb; j < je; j++) {
                const unsigned k = keys[j];
                if (k == prefix && is_member(c, k, lo + j))
                    tm += key_weight(k, mx, inv_t);
            }
            const unsigned long long tbl = block_excl_scan(tm, scan_sh, &ttot);
            if (tid == 0) {
                s_cut[1].t = prefix;
                s_cut[1].i_cut = -1;
                s_imax = 0;
            }
            __syncthreads();
            if (cross) {
                if (tb + tbl < target && tb + tbl + tm >= target) {
                    unsigned long long cum = tb + tbl;
                    for (long long j = jb; j < je; j++) {
                        const unsigned k = keys[j];
                        if (k == prefix && is_member(c, k, lo + j)) {
                            cum += key_weight(k, mx, inv_t);
                            if (cum >= target) {
                                s_cut[1].i_cut = lo + j;
                                break;
                            }
                        }
                    }
                }
            } else {
                for (long long j = je - 1; j >= jb; j--)
                    if (keys[j] == prefix && is_member(c, keys[j], lo + j)) {
                        atomicMax(&s_imax, (unsigned long long)(lo + j));
                        break;
                    }
                __syncthreads();
                if (tid == 0)
                    s_cut[1].i_cut = (long long)s_imax;
            }
        }
        par ^= 1;
        cluster.sync();
        const Cut p = *cluster.map_shared_rank(&s_cut[1], owner < 0 ? 0 : owner);
        if (p.t > c.t || (p.t == c.t && p.i_cut < c.i_cut))
            c = p;
        total = member_mass(1, &before_r);
    } else {
        total = member_mass(0, &before_r);
    }

    /* the draw: the first member, ascending, whose running weight exceeds u * total */
    unsigned long long target = (unsigned long long)(dec_uniform(seed, step, row) * (double)total);
    /* u * total can round up to total above 2^53: a token all the same */
    if (target >= total)
        target = total - 1;
    const unsigned long long mine_r = s_sum[top_p < 1 ? 1 : 0];
    if (before_r <= target && target < before_r + mine_r) {
        long long jb, je;
        my_range(n, &jb, &je);
        unsigned long long mine = 0, tot;
        for (long long j = jb; j < je; j++)
            if (is_member(c, keys[j], lo + j))
                mine += key_weight(keys[j], mx, inv_t);
        const unsigned long long before = before_r + block_excl_scan(mine, scan_sh, &tot);
        if (before <= target && before + mine > target) {
            unsigned long long cum = before;
            for (long long j = jb; j < je; j++)
                if (is_member(c, keys[j], lo + j)) {
                    cum += key_weight(keys[j], mx, inv_t);
                    if (cum > target) {
                        out[row] = lo + j;
                        break;
                    }
                }
        }
    }
    cluster_exit_barrier(); /* peers may still read this block's histograms and slots */
}
} /* namespace dec */
} /* namespace kcuda */

using namespace kcuda;
using namespace kcuda::dec;

DEC_PREPARE(sample, DEC_SAMPLE, 3)

/* Whether the cluster sampler may finish among a radix pass's candidates
 * (BATON_SAMPLE_CANDIDATES=0: not, for an A/B against the passes it replaces). Read once. */
static bool sample_candidates_on()
{
    static int cache = ENV_UNREAD;
    return baton__env_flag("BATON_SAMPLE_CANDIDATES", &cache) != 0;
}

/* The cluster sampler where a row's keys fit in the shared memory of SMC_C blocks and a cluster
 * of them fits the device: 0 or the launch's failure, 1 when the one-block kernel must do. */
template <typename T>
static int sample_cluster(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                          const dec_shape &s)
{
    const long long per = ((s.V + SMC_C - 1) / SMC_C + 7) / 8 * 8; /* 16-byte slices */
    const size_t smem = SMC_FIXED + (size_t)per * sizeof(unsigned);
    if (smem > SMC_SMEM_MAX || s.rows * SMC_C > 0x7fffffffLL)
        return 1;
    const void *k = (const void *)sample_cluster_kernel<T>;
    if (prepare(sample_cluster_kernel<T>, ctx, "sample", SMC_C, s.rows * SMC_C, SMP_THREADS, smem,
                SMC_SMEM_MAX, false, false) < 0)
        return BATON_ECUDA; /* the reason is in ctx->errbuf */
    if (!cluster8_ok(ctx, k, SMC_SMEM_MAX))
        return 1;
    const int vec = al16(b[0]) && (s.V * (long long)sizeof(T)) % 16 == 0;
    return launch(ctx, "sample", sample_cluster_kernel<T>, (unsigned)(s.rows * SMC_C), SMP_THREADS,
                  smem, SMC_C, (const T *)b[0], (const void *)b[1],
                  (int)(s.idx_dt == BATON_DTYPE_I64), (long long *)b[2], (long long)s.V, per, vec,
                  d.temperature, (int)d.top_k, d.top_p, (unsigned long long)d.seed,
                  sample_candidates_on() ? SMC_CAND : 0);
}

extern "C" int baton__kcuda_sample(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                   size_t len)
{
    DEC_READ(DEC_SAMPLE, 3);
    if (s.rows > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "sample: too many rows for one launch");
    const unsigned g = (unsigned)s.rows;
    const int s64 = s.idx_dt == BATON_DTYPE_I64;
    long long *out = (long long *)buffers[2];
    switch (s.x_dt) {
    case BATON_DTYPE_BF16: rc = sample_cluster<__nv_bfloat16>(ctx, buffers, d, s); break;
    case BATON_DTYPE_F16: rc = sample_cluster<__half>(ctx, buffers, d, s); break;
    case BATON_DTYPE_F32: rc = sample_cluster<float>(ctx, buffers, d, s); break;
    default: rc = sample_cluster<double>(ctx, buffers, d, s); break;
    }
    if (rc <= 0)
        return rc;
#define SMP_LAUNCH(T)                                                                              \
    launch(ctx, "sample", sample_kernel<T>, g, SMP_THREADS, 0, 1, (const T *)buffers[0],           \
           (const void *)buffers[1], s64, out, (long long)s.V, d.temperature, (int)d.top_k,        \
           d.top_p, (unsigned long long)d.seed)
    switch (s.x_dt) {
    case BATON_DTYPE_BF16: return SMP_LAUNCH(__nv_bfloat16);
    case BATON_DTYPE_F16: return SMP_LAUNCH(__half);
    case BATON_DTYPE_F32: return SMP_LAUNCH(float);
    default: return SMP_LAUNCH(double);
    }
#undef SMP_LAUNCH
}
