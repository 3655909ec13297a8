/* decoder_prefill.cu: attention's prefill on tensor cores: the mma.sync kernel below, and the
 * choice between it and the wgmma kernel of attn_prefill_sm90.cu. */
#include "kernels/cuda/decoder_record.cuh"
#include "kernels/cuda/attn_prefill_sm90.h"
#include "kernels/cuda/decoder_attention.cuh"

namespace kcuda
{
namespace dec
{

/* ---- attention: prefill on tensor cores (FlashAttention-2 style) ------------------------------
 * A block of 4 warps takes BM = 64 * MT (position, head) rows of Q: BM / HP positions of HP heads
 * of one KV head; each warp MT m16 tiles of 16 positions of one head (HP = 2: the same positions
 * of the two heads, so every K and V fragment serves both). Q's fragments stay in registers for
 * the whole block; keys come in tiles of BN = 64 rows of K and V, copied with cp.async into a
 * ring of 3 stages (2 at head_dim 128) of padded shared memory (the next tiles load while this
 * one computes; one barrier a tile). Per tile a warp forms its scores with mma.sync m16n8k16
 * (bf16/f16 in, f32 accumulate), masks key j of row r unless j <= positions[r] (only on tiles that
 * reach past the warp's smallest position), updates each row's online softmax in registers (base
 * 2; a row's four owning lanes meet through quad shuffles), rounds P to the data's type in
 * registers as the A operand of P V (as FlashAttention does) and accumulates O in registers. Tiles
 * start at key 0 and stop at the block's largest position; a warp skips the math of a tile wholly
 * past its rows. Every sum runs in one fixed order: the same bits every run.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16/.f16; lane = 4 g + t, g < 8, t < 4; each
 * 32-bit register packs two 16-bit elements, the lower column or k index in the low half):
 *   A 16x16 (row):  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
 *   B 16x8  (col):  b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
 *   C 16x8  (f32):  c0 c1 (g, 2t, 2t+1)  c2 c3 (g+8, 2t, 2t+1)
 * ldmatrix.x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i, whose register i then holds
 * at each lane (row g, columns 2t, 2t+1); with .trans, (rows 2t, 2t+1, column g) instead.
 *   Q (A operand): lane's row 16 m + (lane & 15), column 16 kk + 8 (lane >> 4): registers a0..a3.
 *   K (B of S = Q K^T, n = key, k = dim): key 16 np + (lane & 7) + 8 (lane >> 4), dim 16 kk +
 *     8 ((lane >> 3) & 1): registers {b0, b1} of key tile 2 np, then of key tile 2 np + 1.
 *   V (B of O = P V, k = key, n = dim; .trans): key 16 kk + (lane & 7) + 8 ((lane >> 3) & 1),
 *     dim 16 dp + 8 (lane >> 4): registers {b0, b1} of dim tile 2 dp, then of 2 dp + 1.
 *   P (A of P V, keys 16 kk ..): the C registers of key tiles 2 kk and 2 kk + 1, packed in pairs:
 *     a0 = tile 2kk (c0, c1), a1 = tile 2kk (c2, c3), a2 = tile 2kk+1 (c0, c1), a3 = (c2, c3).
 * Shared rows are DH + 8 elements long: 16 bytes of padding put the 8 rows an ldmatrix matrix
 * reads in 8 different 16-byte bank groups. */

#define PF_WARPS 4
#define PF_BN    64

template <int DH, int MT, int HP> struct PfLayout {
    static constexpr int BM = PF_WARPS * 16 * MT; /* (position, head) rows of Q */
    static constexpr int BP = BM / HP;            /* positions */
    static constexpr int LD = DH + 8;             /* elements of a shared row */
    static constexpr int TILE = PF_BN * LD;
    /* stages of the K and V ring: 3 (two tiles in flight) where 2 blocks an SM still fit */
    static constexpr int ST = DH == 64 ? 3 : 2;
    static constexpr size_t OFF_K = (size_t)BM * LD * 2; /* then K stages, V stages */
    static constexpr size_t OFF_POS = OFF_K + (size_t)2 * ST * TILE * 2;
    static constexpr size_t BYTES = OFF_POS + (size_t)(BP + PF_WARPS) * 4;
};

/* d += a b on one m16n8k16 tile. */
template <typename T>
__device__ __forceinline__ void pf_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                       unsigned b1)
{
    if constexpr (std::is_same<T, __half>::value)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, "
            "%7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, "
            "%7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* qscale = |scale| * log2(e); qneg: scale < 0, applied by negating Q's elements (exact). */
template <typename T, int DH, int MT, int HP>
__global__ void __launch_bounds__(PF_WARPS * 32, 2)
    attn_prefill_kernel(const T *q, const T *kc, const T *vc, const void *pos, int pos64, T *o,
                        long long rows, int S, int H, int Hkv, float qscale, int qneg, int sms,
                        int step)
{
    using L = PfLayout<DH, MT, HP>;
    constexpr int BM = L::BM, BP = L::BP, LD = L::LD, NT = PF_BN / 8, KD = DH / 16, VR = DH / 8;
    constexpr int PT = MT / HP; /* a warp's m tiles of one head: 16 PT positions */
    constexpr int ST = L::ST;
    constexpr int NTH = PF_WARPS * 32;
    extern __shared__ __align__(128) unsigned char pf_smem[];
    T *sQ = reinterpret_cast<T *>(pf_smem);
    T *sKV = reinterpret_cast<T *>(pf_smem + L::OFF_K);
    int *sPos = reinterpret_cast<int *>(pf_smem + L::OFF_POS), *sMax = sPos + BP;
    const unsigned aQ = (unsigned)__cvta_generic_to_shared(sQ);
    const unsigned aKV = (unsigned)__cvta_generic_to_shared(sKV);

    const long long tiles = (rows + BP - 1) / BP;
    const int HB = H / HP; /* blocks a row tile */
    long long rank = blockIdx.x;
    order_by_work(rank, sms);
    /* heads h0 .. h0 + HP - 1, of one KV head (HP divides G); the G heads of a KV head are
     * neighbours in the grid: their K and V stay in L2 */
    const int h0 = (int)(rank % HB) * HP;
    const long long tile = tiles - 1 - rank / HB;
    const int kvh = h0 / (H / Hkv);
    const long long r0 = tile * BP, F = (long long)H * DH, KF = (long long)Hkv * DH;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    pdl_wait(); /* q, the caches and positions may be a predecessor's outputs */
    pdl_trigger();

    /* Q into shared memory, row hi * BP + i holding position r0 + i of head h0 + hi (rows past
     * T read as zeros) */
    for (int c = tid; c < BM * VR; c += NTH) {
        const int m = c / VR, col = (c % VR) * 8;
        const long long r = r0 + m % BP;
        const bool ok = r < rows;
        cp_async16_or_zero(aQ + (unsigned)(m * LD + col) * 2,
                           ok ? q + r * F + (long long)(h0 + m / BP) * DH + col : q, ok);
    }
    cp_commit();
    if (tid < BP) {
        const long long r = r0 + tid;
        const long long p = prefill_position(pos, pos64, r, rows, S, [&](long long bad) {
            if (h0 == 0)
                record(DEC_ATTENTION, step, r, bad, S);
        });
        sPos[tid] = (int)p;
    }
    __syncthreads();
    /* m tile mt of this warp: positions wp + 16 (mt / HP) + 0..15 of head h0 + mt % HP; this
     * lane's rows in it: g and g + 8 */
    const int wp = warp * 16 * PT;
    int pr[MT][2];
    int wmin = 0x7fffffff, wmax = -1;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            pr[mt][hh] = sPos[wp + 16 * (mt / HP) + g + 8 * hh];
            wmin = min(wmin, pr[mt][hh]);
            wmax = max(wmax, pr[mt][hh]);
        }
    wmin = __reduce_min_sync(0xffffffffu, wmin);
    wmax = __reduce_max_sync(0xffffffffu, wmax);
    if (lane == 0)
        sMax[warp] = wmax;
    __syncthreads();
    int kmax = sMax[0];
#pragma unroll
    for (int w = 1; w < PF_WARPS; w++)
        kmax = max(kmax, sMax[w]);
    const int ntiles = kmax / PF_BN + 1; /* row r0 is in range, so kmax >= 0 */

    /* K and V of key tile `it` into stage `st`; keys past kmax (past S among them) as zeros:
     * masked for every row, and a zero V keeps 0 * (stale bits) out of P V. */
    auto load_kv = [&](int it, int st) {
        const int j0 = it * PF_BN;
        const unsigned sk = aKV + (unsigned)(st * L::TILE) * 2,
                       sv = aKV + (unsigned)((ST + st) * L::TILE) * 2;
        for (int c = tid; c < PF_BN * VR; c += NTH) {
            const int jj = c / VR, col = (c % VR) * 8, j = j0 + jj;
            const bool ok = j <= kmax;
            const long long off = ok ? (long long)j * KF + (long long)kvh * DH + col : 0;
            cp_async16_or_zero(sk + (unsigned)(jj * LD + col) * 2, kc + off, ok);
            cp_async16_or_zero(sv + (unsigned)(jj * LD + col) * 2, vc + off, ok);
        }
    };
    /* the first ST - 1 tiles in flight, one cp.async group each (empty past the last tile) */
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        if (i < ntiles)
            load_kv(i, i);
        cp_commit();
    }
    cp_wait(ST - 1); /* this thread's Q copies */
    __syncthreads();

    unsigned qf[MT][KD][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            ldsm_x4(qf[mt][kk],
                    aQ + (unsigned)(((mt % HP) * BP + wp + 16 * (mt / HP) + (lane & 15)) * LD +
                                    16 * kk + 8 * (lane >> 4)) *
                             2);
            if (qneg)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    qf[mt][kk][i] ^= 0x80008000u;
        }

    float acc[MT][DH / 8][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int d = 0; d < DH / 8; d++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][d][e] = 0.f;
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            m[mt][hh] = -INFINITY, l[mt][hh] = 0.f;
    }
    /* per-lane ldmatrix offsets (bytes) within a K or V tile */
    const unsigned offK =
        (unsigned)(((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1)) * 2;
    const unsigned offV =
        (unsigned)(((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4)) * 2;

    /* One barrier a tile: after it, tile it is in shared memory for every thread (each waited
     * for its own copies), and every warp is done with tile it - 1, whose stage then takes tile
     * it + ST - 1. */
    for (int it = 0; it < ntiles; it++) {
        cp_wait(ST - 2);
        __syncthreads();
        if (it + ST - 1 < ntiles)
            load_kv(it + ST - 1, (it + ST - 1) % ST);
        cp_commit(); /* possibly empty: keeps the wait above uniform */
        const int j0 = it * PF_BN, st = it % ST;
        if (j0 <= wmax) {
            const unsigned sk = aKV + (unsigned)(st * L::TILE) * 2 + offK,
                           sv = aKV + (unsigned)((ST + st) * L::TILE) * 2 + offV;
            float s[MT][NT][4]; /* S = Q K^T */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        s[mt][n][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++)
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    unsigned b[4];
                    ldsm_x4(b, sk + (unsigned)(16 * np * LD + 16 * kk) * 2);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        pf_mma<T>(s[mt][2 * np], qf[mt][kk], b[0], b[1]);
                        pf_mma<T>(s[mt][2 * np + 1], qf[mt][kk], b[2], b[3]);
                    }
                }
            /* the causal mask, on tiles that reach past some row's position */
            if (j0 + PF_BN - 1 > wmin) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int n = 0; n < NT; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            if (j0 + 8 * n + 2 * t + (e & 1) > pr[mt][e >> 1])
                                s[mt][n][e] = -INFINITY;
            }
            /* the online softmax of rows g and g + 8 of each m tile */
            float corr[MT][2];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int n = 0; n < NT; n++)
                        mx = fmaxf(mx, fmaxf(s[mt][n][2 * hh], s[mt][n][2 * hh + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float mnew = fmaxf(m[mt][hh], mx * qscale);
                    const float muse = mnew == -INFINITY ? 0.f : mnew; /* a row with no key yet */
                    corr[mt][hh] = ex2_approx(m[mt][hh] - muse);
                    m[mt][hh] = mnew;
                    float sum = 0.f;
#pragma unroll
                    for (int n = 0; n < NT; n++)
#pragma unroll
                        for (int e = 2 * hh; e < 2 * hh + 2; e++) {
                            const float p = ex2_approx(fmaf(s[mt][n][e], qscale, -muse));
                            s[mt][n][e] = p;
                            sum += p;
                        }
                    l[mt][hh] = l[mt][hh] * corr[mt][hh] + sum; /* this lane's columns only */
                }
            /* O's rescale, skipped (x * 1 = x, bit for bit) while no row of the warp has a new
             * maximum: most tiles once the first few have been seen */
            bool moved = false;
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                moved |= corr[mt][0] != 1.f || corr[mt][1] != 1.f;
            if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int d = 0; d < DH / 8; d++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            acc[mt][d][e] *= corr[mt][e >> 1];
            }
#pragma unroll
            for (int kk = 0; kk < PF_BN / 16; kk++) { /* O += P V, 16 keys a step */
                unsigned a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    a[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    a[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    a[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    a[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < DH / 16; dp++) {
                    unsigned b[4];
                    ldsm_x4_trans(b, sv + (unsigned)(16 * kk * LD + 16 * dp) * 2);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        pf_mma<T>(acc[mt][2 * dp], a[mt], b[0], b[1]);
                        pf_mma<T>(acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
                    }
                }
            }
        }
    }

    /* O / l through the warp's own rows of sQ (its Q fragments are in registers), then out in
     * 16-byte rows. */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            float sum = l[mt][hh];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = sum > 0.f ? 1.f / sum : 0.f;
            T *srow = sQ + ((mt % HP) * BP + wp + 16 * (mt / HP) + g + 8 * hh) * LD + 2 * t;
#pragma unroll
            for (int d = 0; d < DH / 8; d++)
                *reinterpret_cast<unsigned *>(srow + 8 * d) =
                    pack2<T>(acc[mt][d][2 * hh] * inv, acc[mt][d][2 * hh + 1] * inv);
        }
    __syncwarp();
    for (int c = lane; c < 16 * MT * VR; c += 32) {
        const int mt = c / (16 * VR), i = wp + 16 * (mt / HP) + (c / VR) % 16, col = (c % VR) * 8;
        const long long r = r0 + i;
        if (r < rows)
            *reinterpret_cast<uint4 *>(o + r * F + (long long)(h0 + mt % HP) * DH + col) =
                *reinterpret_cast<const uint4 *>(sQ + ((mt % HP) * BP + i) * LD + col);
    }
}

} /* namespace dec */
} /* namespace kcuda */

using namespace kcuda;
using namespace kcuda::dec;

/* The prefill's block at head_dim 64: 4 warps of two m16 tiles each, either 64 positions of two
 * heads of one KV head ("64x2": K and V fragments serve both heads, halving shared-memory and L2
 * reads per flop against one tile a warp, with the causal grain and balance of 64-row blocks) or
 * 128 positions of one head ("128x1"), or 4 warps of one tile each ("64x1": more blocks, for
 * short prompts). head_dim 128 takes 64x1: two tiles' accumulators would not fit in registers.
 * BATON_ATTN_PREFILL_BLOCK=64x1, 128x1 or 64x2 forces head_dim 64's choice (benchmarks; 64x2
 * only where G is even). */
enum { PF_AUTO, PF_64X1, PF_128X1, PF_64X2 };

static int prefill_block_forced(void)
{
    static std::atomic<int> forced{-1};
    int f = forced.load(std::memory_order_relaxed);
    if (f < 0) {
        const char *e = getenv("BATON_ATTN_PREFILL_BLOCK");
        f = !e                    ? PF_AUTO
            : !strcmp(e, "64x1")  ? PF_64X1
            : !strcmp(e, "128x1") ? PF_128X1
            : !strcmp(e, "64x2")  ? PF_64X2
                                  : PF_AUTO;
        forced.store(f, std::memory_order_relaxed);
    }
    return f;
}

template <typename T, int DH, int MT, int HP>
static int attn_prefill(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                        const dec_shape &s)
{
    using L = PfLayout<DH, MT, HP>;
    const long long tiles = (s.rows + L::BP - 1) / L::BP, grid = tiles * (d.n_heads / HP);
    if (grid > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "attention: too many rows for one launch");
    auto kern = attn_prefill_kernel<T, DH, MT, HP>;
    if (prepare(kern, ctx, "attention", 1, grid, PF_WARPS * 32, L::BYTES, L::BYTES, false) < 0)
        return BATON_ECUDA;
    if (att_env().verbose) {
        static std::atomic<int> shown;
        if (!shown.exchange(1))
            fprintf(stderr,
                    "attention prefill: mma.sync, head_dim %d, %d m16 tiles a warp, %d "
                    "heads a block\n",
                    DH, MT, HP);
    }
    const float qscale = (float)(fabs(d.scale) * 1.4426950408889634);
    return launch(ctx, "attention", kern, (unsigned)grid, PF_WARPS * 32, L::BYTES, 1,
                  (const T *)b[0], (const T *)b[1], (const T *)b[2], (const void *)b[3],
                  (int)(s.idx_dt == BATON_DTYPE_I64), (T *)b[4], (long long)s.rows, (int)s.S,
                  (int)d.n_heads, (int)d.n_kv_heads, qscale, (int)(d.scale < 0), sm_count(ctx),
                  ctx->step_index);
}

template <typename T>
static int attn_prefill_pick(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                             const dec_shape &s)
{
    if (d.head_dim == 128)
        return attn_prefill<T, 128, 1, 1>(ctx, b, d, s);
    const bool pairs = (d.n_heads / d.n_kv_heads) % 2 == 0;
    int v = prefill_block_forced();
    if (v == PF_64X2 && !pairs)
        v = PF_AUTO;
    if (v == PF_AUTO) {
        /* When 64x2's blocks would all be resident at once (T = 1024 at Llama-3.2-1B's heads on
         * an H200: 24.4 us against SDPA's 22.8), the block of the longest rows, mostly alone on
         * its SM, is the critical path; 64x1 halves that block (not yet timed there). */
        const long long sms2 = 2LL * sm_count(ctx);
        v = pairs && (s.rows + 63) / 64 * (d.n_heads / 2) > sms2 ? PF_64X2
            : !pairs && (s.rows + 127) / 128 * d.n_heads >= sms2 ? PF_128X1
                                                                 : PF_64X1;
    }
    switch (v) {
    case PF_64X2: return attn_prefill<T, 64, 2, 2>(ctx, b, d, s);
    case PF_128X1: return attn_prefill<T, 64, 2, 1>(ctx, b, d, s);
    default: return attn_prefill<T, 64, 1, 1>(ctx, b, d, s);
    }
}

/* The prefill's kernel at head_dim 64 on a compute capability 9.0 GPU: the wgmma kernel
 * (attn_prefill_sm90.cu), unless BATON_ATTN_PREFILL=mma asks for this file's (the benchmarks'
 * A/B). A forced BATON_ATTN_PREFILL_BLOCK names an mma.sync block, and takes this file's kernel. */
static bool prefill_mma_forced(void)
{
    static std::atomic<int> forced{-1};
    int f = forced.load(std::memory_order_relaxed);
    if (f < 0) {
        const char *e = getenv("BATON_ATTN_PREFILL");
        f = e && !strcmp(e, "mma");
        forced.store(f, std::memory_order_relaxed);
    }
    return f != 0;
}

/* The device addresses of g_err and g_err_host, for kernels compiled apart from this file. */
static int err_symbols(const baton_exec_ctx *ctx, unsigned long long **err,
                       unsigned long long *const **err_host)
{
    static std::atomic<void *> cache[KCUDA_MAX_DEVICES][2];
    const int dev = device_of(ctx);
    if (dev < 0 || dev >= KCUDA_MAX_DEVICES)
        return baton__ctx_fail(ctx, BATON_ECUDA, "attention: no CUDA device index");
    void *e = cache[dev][0].load(std::memory_order_relaxed),
         *h = cache[dev][1].load(std::memory_order_relaxed);
    if (!e || !h) {
        cudaError_t rc = cudaGetSymbolAddress(&e, g_err);
        if (rc == cudaSuccess)
            rc = cudaGetSymbolAddress(&h, g_err_host);
        if (rc != cudaSuccess)
            return baton__ctx_fail(ctx, BATON_ECUDA, "cudaGetSymbolAddress(attention's record): %s",
                                   cudaGetErrorString(rc));
        cache[dev][0].store(e, std::memory_order_relaxed);
        cache[dev][1].store(h, std::memory_order_relaxed);
    }
    *err = (unsigned long long *)e;
    *err_host = (unsigned long long *const *)h;
    return 0;
}

template <typename T>
static int attn_prefill_wgmma(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                              const dec_shape &s)
{
    pf90::Call c;
    c.q = b[0], c.k = b[1], c.v = b[2], c.pos = b[3], c.o = b[4];
    c.pos64 = s.idx_dt == BATON_DTYPE_I64;
    c.rows = s.rows;
    c.S = (int)s.S, c.H = (int)d.n_heads, c.Hkv = (int)d.n_kv_heads;
    c.scale = d.scale;
    c.tag = ((unsigned long long)DEC_ATTENTION << 32) |
            (unsigned long long)(unsigned)(ctx->step_index + 1);
    const int rc = err_symbols(ctx, &c.err, &c.err_host);
    if (rc)
        return rc;
    if (att_env().verbose) {
        static std::atomic<int> shown;
        if (!shown.exchange(1))
            fprintf(stderr, "attention prefill: wgmma (sm_90a), K and V by TMA\n");
    }
    return pf90::launch(ctx, c, std::is_same<T, __half>::value);
}

template <typename T>
static int attn_prefill_typed(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                              const dec_shape &s)
{
    if (d.head_dim == 64 && !prefill_mma_forced() && prefill_block_forced() == PF_AUTO &&
        pf90::usable(ctx, (int)d.n_heads, (int)d.n_kv_heads))
        return attn_prefill_wgmma<T>(ctx, b, d, s);
    return attn_prefill_pick<T>(ctx, b, d, s);
}

int kcuda::dec::attn_prefill_tc(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                                const dec_shape &s, bool f16)
{
    return f16 ? attn_prefill_typed<__half>(ctx, b, d, s)
               : attn_prefill_typed<__nv_bfloat16>(ctx, b, d, s);
}

DEC_RECORD_UNIT(prefill)
