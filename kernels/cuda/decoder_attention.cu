/* decoder_attention.cu: attention on CUDA. The op's entry sends a prefill of 16 rows or more to
 * tensor cores (decoder_prefill.cu); the decode to a cluster of blocks split over the keys (tensor
 * cores for bf16/f16, CUDA cores otherwise) whose partial softmaxes merge through distributed
 * shared memory (no workspace, no second launch, a fixed order: the same bits every run); any other
 * shape to a generic kernel exact to its accumulation type. */
#include "kernels/cuda/decoder_record.cuh"
#include "kernels/cuda/decoder_attention.cuh"

namespace kcuda
{
namespace dec
{

/* ---- attention: the split-K decode over a cluster
 * ------------------------------------------------ A cluster of C blocks serves one (query row r,
 * KV head kvh, chunk of up to GB query heads of that KV head's group). Its L = positions[r] + 1
 * keys are split into C contiguous ranges, one per block. In a block, lanes form groups of LPK
 * lanes, each lane holding E = 16 / sizeof(T) of the head_dim = LPK * E features; group q takes
 * keys q, q + NG, ... of the range (NG groups per block), keeping an online softmax (max, sum,
 * weighted V) per query head in registers. The groups' states are merged in shared memory in group
 * order, then the blocks' states by rank 0 of the cluster in rank order, through distributed shared
 * memory: fixed orders, so the same bits every run, and no workspace in global memory. Scores are
 * kept in base 2 (q is scaled by scale * log2(e)), so one ex2 per weight. */

/* softmax_fold over a cluster's C ranks, rank k's state read from its shared memory (m, acc, l
 * there), every load issued before any is used. */
template <int CMAX>
__device__ __forceinline__ float cluster_softmax_merge(cg::cluster_group &cluster, float *m,
                                                       float *acc, float *l, int C)
{
    float mk[CMAX], ak[CMAX], lk[CMAX];
#pragma unroll
    for (int k = 0; k < CMAX; k++)
        if (k < C) {
            mk[k] = *cluster.map_shared_rank(m, k);
            ak[k] = *cluster.map_shared_rank(acc, k);
            lk[k] = *cluster.map_shared_rank(l, k);
        }
    return softmax_fold<CMAX>(
        C, [&](int k) { return mk[k]; }, [&](int k) { return ak[k]; },
        [&](int k) { return lk[k]; });
}

#define ATT_GB      4   /* query heads per cluster (of one KV head's group) */
#define ATT_THREADS 256 /* 8 warps */
#define ATT_UNROLL  4   /* keys in flight per group */
#define ATT_MAX_DH  256

template <typename T, int LPK>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_split_kernel(const T *q, const T *kc, const T *vc, const void *pos, int pos64, T *o,
                      long long rows, long long S, int H, int Hkv, int G, int chunks_per_group,
                      float qscale, int step)
{
    constexpr int E = 16 / (int)sizeof(T);
    constexpr int Dh = LPK * E;
    constexpr int GPW = 32 / LPK;
    constexpr int NG = (ATT_THREADS / 32) * GPW;
    __shared__ float red_m[NG][ATT_GB], red_l[NG][ATT_GB];
    __shared__ float red_acc[NG][ATT_GB][Dh];
    __shared__ float blk_m[ATT_GB], blk_l[ATT_GB], blk_acc[ATT_GB][Dh];

    cg::cluster_group cluster = cg::this_cluster();
    const int C = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const long long cid = blockIdx.x / C;
    const int hc = (int)(cid % chunks_per_group);
    const long long kvh = (cid / chunks_per_group) % Hkv;
    const long long r = cid / ((long long)chunks_per_group * Hkv);
    const int h0 = (int)kvh * G + hc * ATT_GB; /* first query head of this cluster */
    const int nh = min(ATT_GB, G - hc * ATT_GB);

    pdl_wait(); /* q, the caches and the positions may be a predecessor's outputs */
    pdl_trigger();
    long long last = pos64 ? ((const long long *)pos)[r] : ((const int *)pos)[r];
    if (last < 0 || last >= S) {
        if (rank == 0 && threadIdx.x == 0 && kvh == 0 && hc == 0)
            record(DEC_ATTENTION, step, r, last, S);
        last = last < 0 ? 0 : S - 1;
    }
    const long long L = last + 1;
    const long long per = (L + C - 1) / C;
    const long long k_begin = min(L, (long long)rank * per), k_end = min(L, k_begin + per);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int grp = warp * GPW + lane / LPK, sub = lane % LPK;
    const long long F = (long long)H * Dh, KF = (long long)Hkv * Dh;

    float qv[ATT_GB][E], acc[ATT_GB][E], m[ATT_GB], l[ATT_GB];
#pragma unroll
    for (int g = 0; g < ATT_GB; g++) {
        const int h = h0 + (g < nh ? g : 0);
        U16<T> u = ld16(q + r * F + (long long)h * Dh + sub * E);
#pragma unroll
        for (int e = 0; e < E; e++) {
            qv[g][e] = to_f(u.v[e]) * qscale;
            acc[g][e] = 0.f;
        }
        m[g] = -INFINITY;
        l[g] = 0.f;
    }
    const T *kbase = kc + kvh * Dh + sub * E, *vbase = vc + kvh * Dh + sub * E;
    /* Block-uniform trip count: every lane reaches every shuffle (groups of a warp differ). The
     * next batch's K and V are loaded before this batch is computed (registers, double-buffered),
     * so the loads of one batch overlap the arithmetic of the previous. Each batch of ATT_UNROLL
     * keys updates the softmax state once: one rescale per batch, one ex2 per key. */
    const long long batch = (long long)NG * ATT_UNROLL;
    U16<T> kr[ATT_UNROLL], vr[ATT_UNROLL], kn[ATT_UNROLL], vn[ATT_UNROLL];
    auto load = [&](long long jb, U16<T>(&kd)[ATT_UNROLL], U16<T>(&vd)[ATT_UNROLL]) {
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) {
            const long long j = jb + (long long)u * NG + grp;
            if (j < k_end) {
                kd[u] = ld16_stream(kbase + j * KF);
                vd[u] = ld16_stream(vbase + j * KF);
            } else {
                *reinterpret_cast<uint4 *>(kd[u].v) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4 *>(vd[u].v) = make_uint4(0, 0, 0, 0);
            }
        }
    };
    if (k_begin < k_end)
        load(k_begin, kr, vr);
    for (long long jb = k_begin; jb < k_end; jb += batch) {
        if (jb + batch < k_end)
            load(jb + batch, kn, vn);
#pragma unroll
        for (int g = 0; g < ATT_GB; g++) {
            float sc[ATT_UNROLL];
            float mn = m[g];
#pragma unroll
            for (int u = 0; u < ATT_UNROLL; u++) {
                float s = 0.f;
#pragma unroll
                for (int e = 0; e < E; e++)
                    s = fmaf(qv[g][e], to_f(kr[u].v[e]), s);
#pragma unroll
                for (int off = LPK / 2; off > 0; off >>= 1)
                    s += __shfl_xor_sync(0xffffffffu, s, off);
                const bool valid = jb + (long long)u * NG + grp < k_end;
                sc[u] = valid ? s : -INFINITY;
                mn = fmaxf(mn, sc[u]);
            }
            if (mn == -INFINITY) /* no key of this group yet (the same for its lanes) */
                continue;
            const float corr = m[g] == -INFINITY ? 0.f : exp2f(m[g] - mn);
            float ps = 0.f;
#pragma unroll
            for (int e = 0; e < E; e++)
                acc[g][e] *= corr;
#pragma unroll
            for (int u = 0; u < ATT_UNROLL; u++) { /* keys in ascending order: a fixed order */
                const float p = sc[u] == -INFINITY ? 0.f : exp2f(sc[u] - mn);
                ps += p;
#pragma unroll
                for (int e = 0; e < E; e++)
                    acc[g][e] = fmaf(p, to_f(vr[u].v[e]), acc[g][e]);
            }
            l[g] = l[g] * corr + ps;
            m[g] = mn;
        }
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) {
            kr[u] = kn[u];
            vr[u] = vn[u];
        }
    }
    /* The groups of the block, merged in group order. */
#pragma unroll
    for (int g = 0; g < ATT_GB; g++) {
        if (sub == 0) {
            red_m[grp][g] = m[g];
            red_l[grp][g] = l[g];
        }
#pragma unroll
        for (int e = 0; e < E; e++)
            red_acc[grp][g][sub * E + e] = acc[g][e];
    }
    __syncthreads();
    for (int t = threadIdx.x; t < ATT_GB * Dh; t += ATT_THREADS) {
        const int g = t / Dh, d = t % Dh;
        float M = -INFINITY;
#pragma unroll 8
        for (int k = 0; k < NG; k++)
            M = fmaxf(M, red_m[k][g]);
        float a = 0.f, s = 0.f;
#pragma unroll 8
        for (int k = 0; k < NG; k++) {
            const float w = red_m[k][g] == -INFINITY ? 0.f : exp2f(red_m[k][g] - M);
            a = fmaf(w, red_acc[k][g][d], a);
            s = fmaf(w, red_l[k][g], s);
        }
        blk_acc[g][d] = a;
        if (d == 0) {
            blk_m[g] = M;
            blk_l[g] = s;
        }
    }
    /* The blocks of the cluster, merged in rank order. Every block merges a slice of the
     * outputs (a rank's share of the head_dim x heads values), and each thread issues its 16
     * remote loads before it uses any: distributed shared memory answers in hundreds of cycles,
     * and one block waiting on them one after another took most of the kernel's time. */
    cluster.sync();
    {
        constexpr int CMAX = 16;
        const int per = (ATT_GB * Dh + C - 1) / C;
        for (int t = rank * per + threadIdx.x; t < min(ATT_GB * Dh, (rank + 1) * per);
             t += ATT_THREADS) {
            const int g = t / Dh, d = t % Dh;
            if (g >= nh)
                continue;
            o[r * F + (long long)(h0 + g) * Dh + d] = from_f<T>(
                cluster_softmax_merge<CMAX>(cluster, &blk_m[g], &blk_acc[g][d], &blk_l[g], C));
        }
    }
    cluster_exit_barrier();
}

/* ---- attention: the decode on tensor cores over a cluster
 * ------------------------------------------------ A cluster of C blocks serves one KV head and up
 * to 16 (query row, query head) pairs of its group: the 16 rows of an m16n8k16 MMA, so K and V are
 * read once for all the heads of the group (and for up to 16 / G decode rows). The keys 0 ..
 * max(positions) + 1 of those rows are split into C contiguous ranges, one per block; in a block,
 * each warp takes tiles of 16 keys (tile w, w + NW, ...) and copies its own tiles into its own
 * ring of P stages of shared memory with cp.async, P - 1 tiles ahead of the one it computes, so
 * the bytes in flight cost no registers and no barrier (a warp reads only what its lanes copied:
 * cp.async.wait_group and __syncwarp order them). Per tile: S = Q K^T (fragments of K by
 * ldmatrix), the scores masked per row by its position, an online softmax per row in f32 (base 2:
 * the scores are scaled by scale * log2(e)), P rounded to the data's type (as FlashAttention
 * does; the row sums add the rounded weights, so each output is a convex combination of V's
 * rows), O += P V (fragments of V by ldmatrix.trans). The warps' states are merged in warp order
 * in shared memory, then the blocks' in rank order through distributed shared memory, every block
 * finishing a slice of the outputs (each block pushes its state of an output to the rank that
 * finishes it: stores before the one barrier, where reading the peers' states after it took
 * loads and an exit barrier; decision 0012): fixed orders, the same bits every run, no
 * workspace. Shared memory rows of 16-byte chunks are XOR-swizzled by the row (chunk c of row r
 * at c ^ (r & 7)), so the 8 rows an ldmatrix reads fall in 8 distinct bank groups. */

#define ATT_TK 16 /* keys per warp step: the n of two MMAs, the k of one */

/* P stages for each of NW warps: 192 KB of shared memory for DH 64 with 8 warps of P = 6 (or 12 of
 * P = 4, 16 of P = 3; 10 of P = 5 take 200 KB) and for DH 128 and 256 with P = 3 (one block per
 * SM; 160 KB in flight per SM at DH 64: 128 SMs need some 8 MB in flight for the HBM's rate at its
 * loaded latency); 8 warps of P = 3 take 96 KB, so that two blocks may share an SM where a GPC has
 * too few free SMs for a cluster of 16. */
template <int DH, int P_, int NW_ = (DH <= 128 ? 8 : 4)> struct AttMma {
    static constexpr int NW = NW_; /* warps per block (DH 256: 128 O registers, 4) */
    static constexpr int THREADS = NW * 32;
    static constexpr int CH = DH / 8;                /* 16-byte chunks of a row */
    static constexpr int TILE = 2 * ATT_TK * DH * 2; /* bytes of one step's K and V */
    static constexpr int P = P_;
    static constexpr int SMEM = NW * P * TILE;
    static constexpr int OS = DH + 4; /* row stride of a warp's O in floats */
    static_assert(16 * OS * 4 + 32 * 4 <= P * TILE, "a warp's state fits in its stages");
    /* the byte offset of 16-byte chunk ch of row r of a stage's K or V (swizzled) */
    static __device__ __forceinline__ unsigned off(int r, int ch)
    {
        return (unsigned)((r * CH + (ch ^ (r & 7))) * 16);
    }
};

template <typename T> struct AttBf16 {
    static constexpr bool value = false;
};
template <> struct AttBf16<__nv_bfloat16> {
    static constexpr bool value = true;
};

/* d += a b: m16n8k16, f32 accumulators, bf16 or f16 operands. */
template <typename T>
__device__ __forceinline__ void att_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                        unsigned b1)
{
    if constexpr (AttBf16<T>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two weights rounded to T, packed low-first as an MMA operand; *sum gets their rounded values. */
template <typename T> __device__ __forceinline__ unsigned att_pack(float x, float y, float *sum)
{
    T v[2] = {from_f<T>(x), from_f<T>(y)};
    *sum += to_f(v[0]) + to_f(v[1]);
    unsigned u;
    memcpy(&u, v, sizeof u);
    return u;
}

/* The keys [kb, ke) of block `rank` of a cluster of C that reads keys [0, lmax) (a multiple of 16
 * keys a block, the last block the rest), and `mine`, how many of their tiles of 16 keys are warp
 * w's (tiles w, w + NW, ...). */
struct AttSplit {
    long long kb, ke;
    int mine;
};

template <int NW>
__device__ __forceinline__ AttSplit att_split(long long lmax, int C, int rank, int w)
{
    const long long per = (row_of(lmax + C - 1, C) + ATT_TK - 1) / ATT_TK * ATT_TK;
    AttSplit sp;
    sp.kb = min(lmax, (long long)rank * per);
    sp.ke = min(lmax, sp.kb + per);
    const int ntiles = (int)((sp.ke - sp.kb + ATT_TK - 1) / ATT_TK);
    sp.mine = w < ntiles ? (ntiles - 1 - w) / NW + 1 : 0;
    return sp;
}

/* Asks warp w's tile i of split sp into L2 without waiting: the 16 rows of K and of V, a lane per
 * 32-byte sector (a warp's request then covers whole lines, whatever a prefetch of one address
 * brings). */
template <typename T, int DH, int NW>
__device__ __forceinline__ void att_prefetch_tile(const T *kg, const T *vg, long long KF,
                                                  const AttSplit &sp, int w, int i, int lane)
{
    constexpr int SEC = DH * (int)sizeof(T) / 32; /* sectors of a row */
    const long long j0 = sp.kb + (long long)(w + i * NW) * ATT_TK;
#pragma unroll
    for (int e = lane; e < 2 * ATT_TK * SEC; e += 32) {
        const int row = e / SEC, sec = e % SEC;
        const long long j = j0 + row % ATT_TK;
        if (j < sp.ke) {
            const char *a = reinterpret_cast<const char *>((row < ATT_TK ? kg : vg) + j * KF);
            asm volatile("prefetch.global.L2 [%0];" ::"l"(a + sec * 32));
        }
    }
}

/* hint (launched with PDL after a kernel): before its grid-dependency wait, while that kernel
 * still runs, each warp asks its first `early` tiles into L2 and, with spec, starts its ring on
 * them right after the wait, the positions read as a hint (below). pf: tile i + pf of a warp is
 * asked into L2 as tile i's copy is issued. */
template <typename T, int DH, int P_, int NW_>
__global__ void __launch_bounds__(AttMma<DH, P_, NW_>::THREADS, 1)
    attn_mma_kernel(const T *q, const T *kc, const T *vc, const void *pos, int pos64, T *o,
                    long long rows, long long S, int H, int Hkv, int G, int chunks, float qscale,
                    int pf, int hint, int early, int spec, int step)
{
    using L = AttMma<DH, P_, NW_>;
    constexpr int NW = L::NW, CH = L::CH, P = L::P, TILE = L::TILE, OS = L::OS;
    constexpr int KS = DH / 16, ND = DH / 8;
    extern __shared__ __align__(128) unsigned char att_dyn[];
    /* The C blocks' states of this block's slice of the outputs: sender k's outputs at
     * rcv_o[k * share ..], its maxima and weight sums of the pairs at rcv_m[k], rcv_l[k]. */
    __shared__ float rcv_o[16 * DH + 16];
    __shared__ float rcv_m[16][16], rcv_l[16][16];

    cg::cluster_group cluster = cg::this_cluster();
    const int C = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    /* Pairs, rows and clusters number below 2^31 (the host checks clusters * 16): 32-bit
     * divisions, not 64-bit ones, which are long calls on the way to the first load. */
    const unsigned cid = blockIdx.x / (unsigned)C, ug = (unsigned)G;
    const int chunk = (int)(cid % (unsigned)chunks), kvh = (int)(cid / (unsigned)chunks);
    const unsigned p0 = (unsigned)chunk * 16u; /* first pair (row * G + head in group) */
    const int np = (int)min(16LL, rows * G - (long long)p0);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3; /* an MMA fragment's row (pair) and column pair */
    const long long F = (long long)H * DH, KF = (long long)Hkv * DH;
    const long long r_a = p0 / ug, r_b = (p0 + (unsigned)np - 1u) / ug; /* this chunk's rows */
    /* the rows and heads of pairs g and g + 8 (-1: past np) */
    const long long row_lo = g < np ? (long long)((p0 + (unsigned)g) / ug) : -1;
    const long long row_hi = g + 8 < np ? (long long)((p0 + (unsigned)g + 8u) / ug) : -1;
    const int head_lo = g < np ? kvh * G + (int)(p0 + (unsigned)g - (unsigned)row_lo * ug) : 0;
    const int head_hi =
        g + 8 < np ? kvh * G + (int)(p0 + (unsigned)g + 8u - (unsigned)row_hi * ug) : 0;
    const T *kg = kc + (long long)kvh * DH, *vg = vc + (long long)kvh * DH;

    /* Before the wait the predecessor may still be writing the positions, the caches and q, so
     * nothing read here is used for its value: the positions (perhaps stale, clamped into the
     * cache) only choose which rows are asked into L2, which is coherent, so the copies after
     * the wait read what the predecessor wrote. __ldcg keeps them out of L1, where the read
     * after the wait could find them stale. */
    AttSplit hs = {0, 0, 0};
    int early_done = 0; /* this warp's tiles of hs asked into L2 before the wait */
    if (hint) {
        long long hmax = 1;
        for (long long r = r_a; r <= r_b; r++) {
            long long v = pos64 ? (long long)__ldcg((const long long *)pos + r)
                                : (long long)__ldcg((const int *)pos + r);
            v = v < 0 ? 0 : v >= S ? S - 1 : v;
            hmax = max(hmax, v + 1);
        }
        hs = att_split<NW>(hmax, C, rank, warp);
        early_done = min(hs.mine, early);
        for (int i = 0; i < early_done; i++)
            att_prefetch_tile<T, DH, NW>(kg, vg, KF, hs, warp, i, lane);
    }

    pdl_wait(); /* q, the caches and the positions may be a predecessor's outputs */
    pdl_trigger();

    /* q of pairs g and g + 8 as A fragments (zeros for pairs past np), loaded first: they do not
     * wait for the positions. */
    const T *qlo = row_lo >= 0 ? q + row_lo * F + (long long)head_lo * DH : nullptr;
    const T *qhi = row_hi >= 0 ? q + row_hi * F + (long long)head_hi * DH : nullptr;
    unsigned qa[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        const int c = ks * 16 + 2 * t;
        qa[ks][0] = qlo ? __ldg(reinterpret_cast<const unsigned *>(qlo + c)) : 0u;
        qa[ks][1] = qhi ? __ldg(reinterpret_cast<const unsigned *>(qhi + c)) : 0u;
        qa[ks][2] = qlo ? __ldg(reinterpret_cast<const unsigned *>(qlo + c + 8)) : 0u;
        qa[ks][3] = qhi ? __ldg(reinterpret_cast<const unsigned *>(qhi + c + 8)) : 0u;
    }

    unsigned char *wbase = att_dyn + warp * P * TILE;
    const unsigned wsa = smem_u32(wbase);
    AttSplit sp = hs; /* the split the ring copies: the hint's until the positions are read */
    /* Tile i of this warp into stage i % P; a commit group per tile, empty past the last. */
    auto issue = [&](int i) {
        if (i < sp.mine) {
            const long long j0 = sp.kb + (long long)(warp + i * NW) * ATT_TK;
            const unsigned sk = wsa + (unsigned)((i % P) * TILE), sv = sk + TILE / 2;
#pragma unroll
            for (int c = 0; c < CH / 2; c++) {
                const int e = c * 32 + lane, row = e / CH, ch = e % CH;
                const long long j = j0 + row;
                const bool ok = j < sp.ke;
                const long long jj = ok ? j : sp.kb;
                const unsigned off = L::off(row, ch);
                cp_async16_or_zero(sk + off, kg + jj * KF + ch * 8, ok);
                cp_async16_or_zero(sv + off, vg + jj * KF + ch * 8, ok);
            }
        }
        cp_commit();
    };
    /* Speculation: the ring starts on the hint's split before the positions are read (the copies
     * follow the wait, so they read the predecessor's writes); it is kept only if the positions
     * give the same split, so the result never depends on the hint. */
    const bool started = hint && spec;
    if (started) {
#pragma unroll
        for (int i = 0; i < P - 1; i++)
            issue(i);
    }

    /* The rows' last keys (clamped and recorded when out of range), the last keys of pairs g and
     * g + 8 (-1 past np: every key masked), and lmax, the keys the cluster reads. */
    long long lmax = 1, last_lo = -1, last_hi = -1;
    for (long long r = r_a; r <= r_b; r++) {
        long long v = pos64 ? ld_idx((const long long *)pos, r) : ld_idx((const int *)pos, r);
        if (v < 0 || v >= S) {
            if (kvh == 0 && rank == 0 && tid == 0)
                record(DEC_ATTENTION, step, r, v, S);
            v = v < 0 ? 0 : S - 1;
        }
        lmax = max(lmax, v + 1);
        if (row_lo == r)
            last_lo = v;
        if (row_hi == r)
            last_hi = v;
    }
    const AttSplit ts = att_split<NW>(lmax, C, rank, warp);
    if (!started || ts.kb != sp.kb || ts.ke != sp.ke) {
        if (started) {
            cp_wait(0); /* the hint's copies land before their stages are written again */
            __syncwarp();
        }
        sp = ts;
#pragma unroll
        for (int i = 0; i < P - 1; i++)
            issue(i);
    }
    const long long kb = sp.kb, ke = sp.ke;
    const int mine = sp.mine;

    /* With pf > 0, tile i + pf of the warp is also asked into L2 when tile i's copy is issued, so
     * that more bytes are in flight than the stages hold (not the tiles asked before the wait). */
    auto prefetch = [&](int i) {
        if (i < mine && i >= early_done)
            att_prefetch_tile<T, DH, NW>(kg, vg, KF, sp, warp, i, lane);
    };
    for (int i = P - 1; i < P - 1 + pf; i++)
        prefetch(i);

    float oacc[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
        oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.f;
    float mlo = -INFINITY, mhi = -INFINITY, llo = 0.f, lhi = 0.f;
    for (int i = 0; i < mine; i++) {
        issue(i + P - 1);
        if (pf)
            prefetch(i + P - 1 + pf);
        cp_wait_group<P - 1>(); /* this lane's copies of tile i have landed */
        __syncwarp();           /* ... and every lane's */
        const unsigned sk = wsa + (unsigned)((i % P) * TILE), sv = sk + TILE / 2;
        const long long j0 = kb + (long long)(warp + i * NW) * ATT_TK;

        float sc[2][4];
#pragma unroll
        for (int n = 0; n < 2; n++)
            sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            /* lanes 0-7: keys 0-7, dims 16 ks ..; 8-15: keys 0-7, dims 16 ks + 8 ..; 16-23 and
             * 24-31: keys 8-15, the same: b0 and b1 of keys 0-7, then of keys 8-15 */
            const int row = (lane & 7) + ((lane >> 4) << 3), ch = 2 * ks + ((lane >> 3) & 1);
            unsigned b[4];
            ldsm_x4(b, sk + L::off(row, ch));
            att_mma<T>(sc[0], qa[ks], b[0], b[1]);
            att_mma<T>(sc[1], qa[ks], b[2], b[3]);
        }
        /* sc[n][e] is (pair g, key 8n + 2t + e), sc[n][2 + e] is (pair g + 8, the same key) */
        float tlo = -INFINITY, thi = -INFINITY;
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const long long j = j0 + 8 * n + 2 * t + e;
                const bool in = j < ke;
                sc[n][e] = in && j <= last_lo ? sc[n][e] * qscale : -INFINITY;
                sc[n][2 + e] = in && j <= last_hi ? sc[n][2 + e] * qscale : -INFINITY;
                tlo = fmaxf(tlo, sc[n][e]);
                thi = fmaxf(thi, sc[n][2 + e]);
            }
        tlo = fmaxf(tlo, __shfl_xor_sync(0xffffffffu, tlo, 1));
        tlo = fmaxf(tlo, __shfl_xor_sync(0xffffffffu, tlo, 2));
        thi = fmaxf(thi, __shfl_xor_sync(0xffffffffu, thi, 1));
        thi = fmaxf(thi, __shfl_xor_sync(0xffffffffu, thi, 2));
        const float nlo = fmaxf(mlo, tlo), nhi = fmaxf(mhi, thi);
        /* a row with no key yet keeps m = -inf; its weights exp2(-inf - 0) are 0 */
        const float slo = nlo == -INFINITY ? 0.f : nlo, shi = nhi == -INFINITY ? 0.f : nhi;
        const float clo = exp2f(mlo - slo), chi = exp2f(mhi - shi);
        mlo = nlo;
        mhi = nhi;
        float plo = 0.f, phi = 0.f;
        /* A of P V: (g, keys 2t ..), (g + 8, 2t ..), (g, 8 + 2t ..), (g + 8, 8 + 2t ..) */
        unsigned pa[4];
        pa[0] = att_pack<T>(exp2f(sc[0][0] - slo), exp2f(sc[0][1] - slo), &plo);
        pa[1] = att_pack<T>(exp2f(sc[0][2] - shi), exp2f(sc[0][3] - shi), &phi);
        pa[2] = att_pack<T>(exp2f(sc[1][0] - slo), exp2f(sc[1][1] - slo), &plo);
        pa[3] = att_pack<T>(exp2f(sc[1][2] - shi), exp2f(sc[1][3] - shi), &phi);
        llo = fmaf(llo, clo, plo);
        lhi = fmaf(lhi, chi, phi);
#pragma unroll
        for (int n = 0; n < ND; n++) {
            oacc[n][0] *= clo;
            oacc[n][1] *= clo;
            oacc[n][2] *= chi;
            oacc[n][3] *= chi;
        }
#pragma unroll
        for (int n = 0; n < ND; n += 2) {
            /* lanes 0-7: keys 0-7 of dims 8n ..; 8-15: keys 8-15 of them; 16-31: the same of
             * dims 8n + 8 ..: transposed, b0 and b1 of dims 8n .., then of dims 8n + 8 .. */
            const int row = lane & 15, ch = n + (lane >> 4);
            unsigned b[4];
            ldsm_x4_trans(b, sv + L::off(row, ch));
            att_mma<T>(oacc[n], pa, b[0], b[1]);
            att_mma<T>(oacc[n + 1], pa, b[2], b[3]);
        }
        __syncwarp(); /* every lane has read stage i % P before the next issue overwrites it */
    }
    cp_wait(0); /* the empty groups; the stages are reused below */
    __syncwarp();

    /* The warp's state into its own stages: O [16][OS], then m [16] and l [16]. */
    llo += __shfl_xor_sync(0xffffffffu, llo, 1);
    llo += __shfl_xor_sync(0xffffffffu, llo, 2);
    lhi += __shfl_xor_sync(0xffffffffu, lhi, 1);
    lhi += __shfl_xor_sync(0xffffffffu, lhi, 2);
    float *ws = reinterpret_cast<float *>(wbase);
#pragma unroll
    for (int n = 0; n < ND; n++) {
        *reinterpret_cast<float2 *>(ws + g * OS + 8 * n + 2 * t) =
            make_float2(oacc[n][0], oacc[n][1]);
        *reinterpret_cast<float2 *>(ws + (g + 8) * OS + 8 * n + 2 * t) =
            make_float2(oacc[n][2], oacc[n][3]);
    }
    if (t == 0) {
        ws[16 * OS + g] = mlo;
        ws[16 * OS + g + 8] = mhi;
        ws[16 * OS + 16 + g] = llo;
        ws[16 * OS + 16 + g + 8] = lhi;
    }
    __syncthreads();
    /* The block's state: the warps merged in warp order, each output pushed into the shared
     * memory of the rank that finishes it (stores: nothing waits on them before the barrier),
     * and each pair's maximum and weight sum to every rank. */
    const int total = np * DH, share = (total + C - 1) / C;
    for (int idx = tid; idx < total; idx += L::THREADS) {
        const int p = idx / DH, d = idx % DH;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++)
            M = fmaxf(M, reinterpret_cast<const float *>(att_dyn + w * P * TILE)[16 * OS + p]);
        float a = 0.f, l = 0.f;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            const float *wv = reinterpret_cast<const float *>(att_dyn + w * P * TILE);
            const float mw = wv[16 * OS + p];
            const float wt = mw == -INFINITY ? 0.f : exp2f(mw - M);
            a = fmaf(wt, wv[p * OS + d], a);
            l = fmaf(wt, wv[16 * OS + 16 + p], l);
        }
        const int dst = idx / share;
        *cluster.map_shared_rank(&rcv_o[rank * share + idx - dst * share], dst) = a;
        if (d < C) { /* C <= 16 <= DH */
            *cluster.map_shared_rank(&rcv_m[rank][p], d) = M;
            *cluster.map_shared_rank(&rcv_l[rank][p], d) = l;
        }
    }
    /* The cluster's: the states arrive with the barrier; every block finishes its slice of the
     * np x DH outputs from them, in rank order (softmax_fold), and no block reads
     * another's shared memory after it, so none waits for the others at its exit. */
    cluster.sync();
    const int lo = rank * share, hi = min(total, lo + share);
    for (int idx = lo + tid; idx < hi; idx += L::THREADS) {
        const int p = idx / DH, d = idx % DH;
        /* the weights sum > 0: key 0 is rank 0's and every pair sees it */
        const unsigned pi = p0 + (unsigned)p, pr = pi / ug;
        o[(long long)pr * F + (long long)(kvh * G + (int)(pi - pr * ug)) * DH + d] =
            from_f<T>(softmax_fold<16>(
                C, [&](int k) { return rcv_m[k][p]; },
                [&](int k) { return rcv_o[k * share + idx - lo]; },
                [&](int k) { return rcv_l[k][p]; }));
    }
}

/* Any dtype and head_dim (f64 included): a block per (row, head), a thread per feature, one key
 * at a time with a block-wide dot product. Slow, but exact to its accumulation type. */
template <typename T>
__global__ void __launch_bounds__(1024)
    attn_generic_kernel(const T *q, const T *kc, const T *vc, const void *pos, int pos64, T *o,
                        long long S, int H, int Hkv, int Dh, double scale, int step)
{
    using A = typename Acc<T>::A;
    __shared__ A red[32];
    const long long r = blockIdx.x / H;
    const int h = (int)(blockIdx.x % H), kvh = h / (H / Hkv);
    pdl_wait();
    pdl_trigger();
    long long last = pos64 ? ((const long long *)pos)[r] : ((const int *)pos)[r];
    if (last < 0 || last >= S) {
        if (h == 0 && threadIdx.x == 0)
            record(DEC_ATTENTION, step, r, last, S);
        last = last < 0 ? 0 : S - 1;
    }
    const long long F = (long long)H * Dh, KF = (long long)Hkv * Dh;
    const int d = threadIdx.x;
    const bool on = d < Dh;
    const A qd = on ? ld_a<A>(q[r * F + (long long)h * Dh + d]) * (A)scale : (A)0;
    A m = -INFINITY, l = 0, acc = 0;
    for (long long j = 0; j <= last; j++) {
        const A kd = on ? ld_a<A>(kc[j * KF + (long long)kvh * Dh + d]) : (A)0;
        const A s = block_sum<A>(qd * kd, red);
        const A mn = s > m ? s : m;
        const A corr = exp(m - mn), p = exp(s - mn);
        l = l * corr + p;
        if (on)
            acc = acc * corr + p * ld_a<A>(vc[j * KF + (long long)kvh * Dh + d]);
        m = mn;
    }
    if (on)
        o[r * F + (long long)h * Dh + d] = from_acc<T>(acc / l);
}
} /* namespace dec */
} /* namespace kcuda */

using namespace kcuda;
using namespace kcuda::dec;

DEC_PREPARE(attention, DEC_ATTENTION, 5)

const AttEnv &kcuda::dec::att_env()
{
    static const AttEnv e = [] {
        AttEnv v = {0, 0, 0, 0, 0, 4, 0, 0};
        const char *a = getenv("BATON_ATTN_DECODE");
        v.simt = a && !strcmp(a, "simt");
        const char *c = getenv("BATON_ATTN_CLUSTER");
        const int n = c ? atoi(c) : 0;
        if (n >= 1 && n <= 16)
            v.cluster = n;
        const char *p = getenv("BATON_ATTN_STAGES");
        const int st = p ? atoi(p) : 0;
        if (st == 3 || st == 4 || st == 6)
            v.stages = st == 6 ? 0 : st;
        const char *wp = getenv("BATON_ATTN_WARPS");
        const int nw = wp ? atoi(wp) : 0;
        v.warps = nw == 8 || nw == 10 || nw == 12 || nw == 16 ? nw : 0;
        const char *pf = getenv("BATON_ATTN_PREFETCH");
        const int np = pf ? atoi(pf) : 0;
        v.prefetch = np > 0 && np <= 16 ? np : 0;
        const char *ea = getenv("BATON_ATTN_EARLY");
        if (ea) {
            const int n = atoi(ea);
            v.early = n > 0 && n <= 64 ? n : 0;
        }
        const char *sp = getenv("BATON_ATTN_SPEC");
        v.spec = sp && !strcmp(sp, "1");
        const char *vb = getenv("BATON_ATTN_VERBOSE");
        v.verbose = vb && *vb && strcmp(vb, "0") != 0;
        return v;
    }();
    return e;
}

/* The cluster size of the split decode: up to 16 blocks (an H100/H200 takes non-portable 16),
 * fewer when the (row, KV head, head chunk) clusters alone fill the GPU, 1 for long prefill. */
template <typename T, int LPK>
static int attn_split(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                      const dec_shape &s)
{
    const int G = d.n_heads / d.n_kv_heads, chunks = (G + ATT_GB - 1) / ATT_GB;
    const long long clusters = s.rows * d.n_kv_heads * chunks;
    const int sms = sm_count(ctx);
    int C = 16;
    while (C > 1 && clusters * C > 4LL * sms)
        C /= 2;
    while (C > 1 && (s.S + C - 1) / C < 32)
        C /= 2; /* at least 32 keys per block of a full cache */
    if (att_env().cluster)
        C = att_env().cluster;
    auto kern = attn_split_kernel<T, LPK>;
    if (C > 8) {
        const int pr = prepare(kern, ctx, "attention", C, clusters * C, ATT_THREADS, 0, 0, true);
        if (pr < 0)
            return BATON_ECUDA;
        if (pr > 0)
            C = 8;
    }
    if (clusters * C > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "attention: too many rows for one launch");
    const float qscale = (float)(d.scale * 1.4426950408889634);
    return launch(ctx, "attention", kern, (unsigned)(clusters * C), ATT_THREADS, 0, C,
                  (const T *)b[0], (const T *)b[1], (const T *)b[2], (const void *)b[3],
                  (int)(s.idx_dt == BATON_DTYPE_I64), (T *)b[4], (long long)s.rows, (long long)s.S,
                  (int)d.n_heads, (int)d.n_kv_heads, G, chunks, qscale, ctx->step_index);
}

/* How many clusters of C blocks (C = 9 .. 16) of attn_mma_kernel<T, DH, P> can be resident at
 * once on ctx's device (C SMs of one GPC each when one block fills an SM), asked once per device:
 * fit[C], 0 where the size cannot be scheduled or the runtime cannot say. An H100/H200 has GPCs
 * of different sizes: 7 clusters of 16 fit where 8 of a smaller size may. */
struct AttFit {
    int n[17];
};

template <typename T, int DH, int P, int NW>
static AttFit attn_mma_fit(const baton_exec_ctx *ctx, long long clusters)
{
    static DeviceOnce<AttFit> once;
    return once.get(device_of(ctx), [&] {
        using L = AttMma<DH, P, NW>;
        auto kern = attn_mma_kernel<T, DH, P, NW>;
        /* Maybe asked while the caller's stream captures a graph. Kept even when a query fails
         * (as 0): the cluster size decides the order of the merge, so every later call of the
         * process must choose as the first did. */
        const RelaxedCapture relaxed;
        const int pr =
            prepare(kern, ctx, "attention", 16, clusters * 16, L::THREADS, L::SMEM, L::SMEM, true);
        AttFit got;
        memset(&got, 0, sizeof got);
        for (int c = 9; c <= 16 && pr == 0; c++)
            if (max_active_clusters((const void *)kern, (unsigned)(clusters * c), L::THREADS,
                                    L::SMEM, c, ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0,
                                    &got.n[c]) != cudaSuccess) {
                (void)cudaGetLastError();
                got.n[c] = 0;
            }
        if (pr != 0)
            (void)cudaGetLastError();
        if (att_env().verbose)
            fprintf(stderr,
                    "attention: clusters of 16..9 blocks of %d threads, %d KB each, that fit at "
                    "once: %d %d %d %d %d %d %d %d\n",
                    L::THREADS, L::SMEM >> 10, got.n[16], got.n[15], got.n[14], got.n[13],
                    got.n[12], got.n[11], got.n[10], got.n[9]);
        return got;
    });
}

/* The largest cluster size up to C (> 8) whose `clusters` clusters all fit at once, else 8. */
template <typename T, int DH, int P, int NW>
static int attn_mma_one_wave(const baton_exec_ctx *ctx, long long clusters, int C)
{
    const AttFit f = attn_mma_fit<T, DH, P, NW>(ctx, clusters);
    for (int c = C; c > 8; c--)
        if (f.n[c] >= clusters)
            return c;
    return 8;
}

template <typename T, int DH, int P, int NW>
static int attn_mma_launch(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                           const dec_shape &s, int C, long long chunks)
{
    using L = AttMma<DH, P, NW>;
    auto kern = attn_mma_kernel<T, DH, P, NW>;
    const long long clusters = (long long)d.n_kv_heads * chunks;
    const int pr =
        prepare(kern, ctx, "attention", C, clusters * C, L::THREADS, L::SMEM, L::SMEM, true);
    if (pr < 0)
        return BATON_ECUDA;
    if (pr > 0)
        C = 8;
    const AttEnv &env = att_env();
    /* the work before the wait pays only while a predecessor runs */
    const int hint = launch_pdl(ctx) && (env.early > 0 || env.spec);
    if (env.verbose) {
        static std::atomic<unsigned long long> shown; /* a bit per cluster size and hint */
        const unsigned long long bit = 1ull << (C + 17 * hint);
        if (!(shown.fetch_or(bit) & bit))
            fprintf(stderr,
                    "attention: tensor cores, head_dim %d, %d-byte elements, %d stages of 16 keys "
                    "per warp, %d warps, %lld clusters of %d blocks, L2 prefetch %d tiles ahead; "
                    "%s\n",
                    DH, (int)sizeof(T), P, L::NW, clusters, C, env.prefetch,
                    hint ? (env.spec ? "after a PDL predecessor: early tiles and speculation"
                                     : "after a PDL predecessor: early tiles")
                         : "no PDL predecessor");
    }
    const float qscale = (float)(d.scale * 1.4426950408889634);
    return launch(ctx, "attention", kern, (unsigned)(clusters * C), L::THREADS, L::SMEM, C,
                  (const T *)b[0], (const T *)b[1], (const T *)b[2], (const void *)b[3],
                  (int)(s.idx_dt == BATON_DTYPE_I64), (T *)b[4], (long long)s.rows, (long long)s.S,
                  (int)d.n_heads, (int)d.n_kv_heads, d.n_heads / d.n_kv_heads, (int)chunks, qscale,
                  env.prefetch, hint, env.early, env.spec, ctx->step_index);
}

/* attn_mma_launch at cluster size C, or (pick) the largest from C down that fits in one wave. */
template <typename T, int DH, int P, int NW>
static int attn_mma_run(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                        const dec_shape &s, long long clusters, int C, bool pick, long long chunks)
{
    if (pick)
        C = attn_mma_one_wave<T, DH, P, NW>(ctx, clusters, C);
    return attn_mma_launch<T, DH, P, NW>(ctx, b, d, s, C, chunks);
}

/* The tensor-core decode: clusters of up to 16 blocks while the clusters alone do not fill the
 * GPU, fewer for a small cache (64 keys a block at least); above 8, the largest size whose
 * clusters all fit at once (one wave: a block per SM where the GPC has room), else 8. */
template <typename T, int DH>
static int attn_mma(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                    const dec_shape &s)
{
    const int G = d.n_heads / d.n_kv_heads;
    const long long chunks = (s.rows * G + 15) / 16, clusters = (long long)d.n_kv_heads * chunks;
    if (clusters * 16 > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "attention: too many rows for one launch");
    constexpr int PBIG = DH == 64 ? 6 : 3;
    constexpr long long ATT_WIDE_FROM = 8192; /* head_dim 64: 12 warps from this cache length */
    const AttEnv &env = att_env();
    int C = env.cluster;
    if (!C) {
        const int sms = sm_count(ctx);
        C = 16;
        while (C > 1 && clusters * C > sms)
            C /= 2;
        while (C > 1 && s.S < 64LL * C)
            C /= 2;
    }
    const bool pick = C > 8 && !env.cluster;
    constexpr int NW = AttMma<DH, PBIG>::NW;
    if constexpr (DH == 64) {
        /* About as many bytes in flight over more warps: each computes fewer tiles, so its ring
         * waits less behind its own math; from 8192 keys of cache up that is faster, below the
         * extra warps' merge costs more than it saves (docs/decisions/0012). */
        const int warps = env.warps ? env.warps : s.S >= ATT_WIDE_FROM ? 12 : 8;
        if (warps == 16)
            return attn_mma_run<T, DH, 3, 16>(ctx, b, d, s, clusters, C, pick, chunks);
        if (warps == 12)
            return attn_mma_run<T, DH, 4, 12>(ctx, b, d, s, clusters, C, pick, chunks);
        if (warps == 10)
            return attn_mma_run<T, DH, 5, 10>(ctx, b, d, s, clusters, C, pick, chunks);
        if (env.stages == 3)
            return attn_mma_run<T, DH, 3, NW>(ctx, b, d, s, clusters, C, pick, chunks);
        if (env.stages == 4)
            return attn_mma_run<T, DH, 4, NW>(ctx, b, d, s, clusters, C, pick, chunks);
    }
    return attn_mma_run<T, DH, PBIG, NW>(ctx, b, d, s, clusters, C, pick, chunks);
}

template <typename T>
static int attn_typed(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                      const dec_shape &s)
{
    const int bytes = d.head_dim * (int)sizeof(T);
    const bool al = al16(b[0]) && al16(b[1]) && al16(b[2]);
    if constexpr (sizeof(T) == 2) {
        /* prefill (16 rows or more): tensor cores. A zero scale (every weight equal) stays off
         * them: the kernel's masked scores are -inf, and -inf * 0 has no value. */
        if (al && al16(b[4]) && s.rows >= 16 && (d.head_dim == 64 || d.head_dim == 128) &&
            s.S <= 0x7fffffffLL && d.scale != 0) {
            return attn_prefill_tc(ctx, b, d, s, std::is_same<T, __half>::value);
        }
    }
    if constexpr (sizeof(T) == 2) {
        /* decode (and head_dim 256 at any rows): tensor cores */
        if (al && !att_env().simt) {
            switch (d.head_dim) {
            case 64: return attn_mma<T, 64>(ctx, b, d, s);
            case 128: return attn_mma<T, 128>(ctx, b, d, s);
            case 256: return attn_mma<T, 256>(ctx, b, d, s);
            default: break;
            }
        }
    }
    if constexpr (sizeof(T) < 8) {
        if (al) {
            switch (bytes) {
            case 64: return attn_split<T, 4>(ctx, b, d, s);
            case 128: return attn_split<T, 8>(ctx, b, d, s);
            case 256: return attn_split<T, 16>(ctx, b, d, s);
            case 512: return attn_split<T, 32>(ctx, b, d, s);
            default: break;
            }
        }
    }
    const long long grid = s.rows * d.n_heads;
    if (grid > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "attention: too many rows for one launch");
    const int threads = ((d.head_dim + 31) / 32) * 32;
    return launch(ctx, "attention", attn_generic_kernel<T>, (unsigned)grid, threads, 0, 1,
                  (const T *)b[0], (const T *)b[1], (const T *)b[2], (const void *)b[3],
                  (int)(s.idx_dt == BATON_DTYPE_I64), (T *)b[4], (long long)s.S, (int)d.n_heads,
                  (int)d.n_kv_heads, (int)d.head_dim, d.scale, ctx->step_index);
}

extern "C" int baton__kcuda_attention(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                      size_t len)
{
    DEC_READ(DEC_ATTENTION, 5);
    switch (s.x_dt) {
    case BATON_DTYPE_BF16: return attn_typed<__nv_bfloat16>(ctx, buffers, d, s);
    case BATON_DTYPE_F16: return attn_typed<__half>(ctx, buffers, d, s);
    case BATON_DTYPE_F32: return attn_typed<float>(ctx, buffers, d, s);
    default: return attn_typed<double>(ctx, buffers, d, s);
    }
}

DEC_RECORD_UNIT(attention)
