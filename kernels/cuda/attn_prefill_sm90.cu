/* attn_prefill_sm90.cu: causal prefill attention at head_dim 64 on Hopper's warpgroup MMA (wgmma,
 * sm_90a), past the ~300 TFLOP/s where decoder_prefill.cu's mma.sync kernel stops (decision 0011).
 * Compiled for sm_90a alone (CMakeLists.txt); that kernel serves every other GPU and shape. */
#include "kernels/cuda/kcuda_common.cuh"

#include <math.h>

#include <type_traits>

#include "kernels/cuda/attn_prefill_sm90.h"

/* The wgmma code exists in the sm_90a compilation only; anywhere else the kernel is an empty stub
 * that usable() never lets run. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PF90_WGMMA 1
#endif

namespace kcuda
{
namespace pf90
{

/* ---- the block ----------------------------------------------------------------------------------
 * A block of two warpgroups takes 64 positions of two heads of one KV head (warpgroup w: head
 * h0 + w), so every K and V tile in shared memory serves both. Per key tile of 64 rows a
 * warpgroup forms S = Q K^T (64 x 64) with wgmma m64n64k16 from shared memory (Q and K), masks
 * the keys past a row's position (only on tiles that reach past the warp's smallest one), runs the
 * online softmax on the accumulator registers (base 2; a row's four lanes meet through quad
 * shuffles), rounds P to the data's type in registers and adds P V with wgmma m64n64k16 whose A
 * comes from those registers, P V of tile it - 1 running on the tensor cores during the softmax of
 * tile it (as FlashAttention-3 overlaps within a warpgroup). K and V come by TMA (one thread's
 * bulk copies through tensor maps, completing on a stage's mbarrier) into a ring of 5 stages; one
 * block barrier a tile gives a stage back. The blocks of the longest rows start first. Every sum
 * runs in one fixed order: the same bits every run.
 *
 * Shared tiles are rows of 64 elements (128 bytes), in wgmma's 128-byte swizzle: 16-byte chunk c
 * of row r sits at r * 128 + ((c ^ (r % 8)) * 16), tiles 1024-byte aligned (the swizzle is taken
 * from address bits 4-6 and 7-9). Q (A, K-major) and K (B, K-major): descriptors with 1024 bytes
 * between groups of 8 rows, a k16 step 32 bytes further. V is B with N (the features) contiguous,
 * "MN-major" (the transpose flag): 1024 bytes between groups of 8 keys, a k16 step 16 keys (2048
 * bytes) further, the leading offset (between 64-feature column blocks) unused at N = 64.
 *
 * Accumulators (m64n64, f32; lane = 4 g + t of warp w of the warpgroup): d[4 n + e] holds row
 * 16 w + g + 8 (e >> 1), column 8 n + 2 t + (e & 1). The A registers of a k16 step (keys
 * 16 kk ..): a0 = (row g, keys 2t, 2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8,
 * 2t + 8..): the accumulators of columns 2 kk and 2 kk + 1 of S, packed in pairs. */

constexpr int DH = 64; /* head_dim */
constexpr int BP = 64; /* positions a block */
constexpr int WGS = 2; /* warpgroups (heads) a block */
constexpr int NTH = 128 * WGS;
constexpr unsigned QB = BP * DH * 2; /* bytes of one head's Q tile */

constexpr int BN = 64;                /* keys a tile */
constexpr int ST = 5;                 /* stages of the ring */
constexpr unsigned TB = BN * DH * 2;  /* bytes of a K or V tile */
constexpr unsigned OFF_KV = WGS * QB; /* then stage st's K at 2 st TB, its V at (2 st + 1) TB */
constexpr unsigned OFF_BAR = OFF_KV + 2 * ST * TB; /* a stage's mbarrier: its tile landed */
constexpr unsigned OFF_POS = OFF_BAR + 8 * ST;
/* 1024 bytes of slack: the tiles are placed at the first 1024-byte boundary */
constexpr size_t BYTES = 1024 + OFF_POS + (BP + 2) * 4;

#ifdef PF90_WGMMA
__device__ __forceinline__ unsigned sw128(int row, int chunk)
{
    return (unsigned)(row * 128 + ((chunk ^ (row & 7)) << 4));
}

/* A wgmma shared-memory descriptor of a 128-byte-swizzled tile at shared address addr. */
__device__ __forceinline__ unsigned long long sw128_desc(unsigned addr, unsigned lbo)
{
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | (unsigned long long)(lbo >> 4) << 16 |
           (unsigned long long)(1024 >> 4) << 32 | 1ull << 62;
}

__device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
/* Keeps the compiler from moving reads or writes of accumulators across a wgmma wait. */
template <int N> __device__ __forceinline__ void fence_regs(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}
/* Orders this thread's generic-proxy writes to shared memory (cp.async, stores) before the async
 * proxy's reads (wgmma) that follow a barrier. */
__device__ __forceinline__ void fence_async_shared()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

#define PF90_F4(c, d, i) c(d[i]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3])
#define PF90_F16(c, d, i)                                                                          \
    PF90_F4(c, d, i), PF90_F4(c, d, i + 4), PF90_F4(c, d, i + 8), PF90_F4(c, d, i + 12)
#define PF90_F32(c, d, i) PF90_F16(c, d, i), PF90_F16(c, d, i + 16)
#define PF90_R32                                                                                   \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
/* d (=, or += when ACC) A B over one k16 step, A and B K-major in shared memory. */
#define PF90_SS64(TY, C, ACC)                                                                      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " PF90_R32              \
                 ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                                 \
                 : PF90_F32(C, d, 0)                                                               \
                 : "l"(da), "l"(db), "r"(ACC))
/* d += A B over one k16 step, A in registers, B MN-major in shared memory. */
#define PF90_RS64(TY)                                                                              \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " PF90_R32              \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                   \
                 : PF90_F32("+f", d, 0)                                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))

/* S (=, or += when ACC) Q K^T over one k16 step of 64 keys. */
template <typename T, bool ACC>
__device__ __forceinline__ void wg_qk(float (&d)[32], unsigned long long da, unsigned long long db)
{
    constexpr bool H = std::is_same<T, __half>::value;
    if constexpr (!ACC) {
        if constexpr (H)
            PF90_SS64("f16", "=f", 0);
        else
            PF90_SS64("bf16", "=f", 0);
    } else {
        if constexpr (H)
            PF90_SS64("f16", "+f", 1);
        else
            PF90_SS64("bf16", "+f", 1);
    }
}

/* O += P V over one k16 step of keys. */
template <typename T>
__device__ __forceinline__ void wg_pv(float (&d)[32], const unsigned (&a)[4], unsigned long long db)
{
    if constexpr (std::is_same<T, __half>::value)
        PF90_RS64("f16");
    else
        PF90_RS64("bf16");
}

/* decoder_record.cuh's record() on the record passed in (this file is compiled apart from it). */
__device__ __noinline__ void record(unsigned long long *err, unsigned long long *const *err_host,
                                    unsigned long long tag, long long i, long long v,
                                    long long limit)
{
    record_error(err, err_host, tag, i, v, limit);
}

/* The causal mask on a tile of S that reaches past some row's position of the warp: key j0 + col
 * of row (e >> 1) masked past pr[e >> 1]. */
template <int NC>
__device__ __forceinline__ void mask_tile(float (&s)[4 * NC], int j0, int t, const int (&pr)[2])
{
#pragma unroll
    for (int n = 0; n < NC; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (j0 + 8 * n + 2 * t + (e & 1) > pr[e >> 1])
                s[4 * n + e] = -INFINITY;
}

/* The online softmax of this lane's rows g and g + 8 over a tile: s becomes P (unrounded), m and
 * l move on, corr is what O's rows must be multiplied by. */
template <int NC>
__device__ __forceinline__ void softmax_tile(float (&s)[4 * NC], float (&m)[2], float (&l)[2],
                                             float (&corr)[2], float qscale)
{
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < NC; n++)
            mx = fmaxf(mx, fmaxf(s[4 * n + 2 * hh], s[4 * n + 2 * hh + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(m[hh], mx * qscale);
        const float muse = mnew == -INFINITY ? 0.f : mnew; /* a row with no key yet */
        corr[hh] = ex2_approx(m[hh] - muse);
        m[hh] = mnew;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < NC; n++)
#pragma unroll
            for (int e = 2 * hh; e < 2 * hh + 2; e++) {
                const float p = ex2_approx(fmaf(s[4 * n + e], qscale, -muse));
                s[4 * n + e] = p;
                sum += p;
            }
        l[hh] = l[hh] * corr[hh] + sum; /* this lane's columns only */
    }
}

/* O's rescale, skipped (x * 1 = x, bit for bit) while no row of the warp has a new maximum: most
 * tiles once the first few have been seen. */
__device__ __forceinline__ void rescale(float (&acc)[32], const float (&corr)[2])
{
    if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
        for (int i = 0; i < 32; i++)
            acc[i] *= corr[(i >> 1) & 1];
    }
}

/* P rounded to T as the A registers of P V's k16 steps. */
template <typename T, int NC>
__device__ __forceinline__ void pack_p(const float (&s)[4 * NC], unsigned (&a)[NC / 2][4])
{
#pragma unroll
    for (int kk = 0; kk < NC / 2; kk++) {
        a[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        a[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        a[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        a[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

/* S = Q K^T of one key tile, issued (not waited for). */
template <typename T>
__device__ __forceinline__ void issue_qk(float (&s)[BN / 2], unsigned long long dq,
                                         unsigned long long dk)
{
    wg_fence();
    wg_qk<T, false>(s, dq, dk);
#pragma unroll
    for (int kk = 1; kk < DH / 16; kk++)
        wg_qk<T, true>(s, dq + 2 * kk, dk + 2 * kk);
    wg_commit();
}

/* O += P V of one key tile, issued (not waited for). */
template <typename T>
__device__ __forceinline__ void issue_pv(float (&acc)[32], const unsigned (&a)[BN / 16][4],
                                         unsigned long long dv)
{
    fence_regs(acc);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
        wg_pv<T>(acc, a[kk], dv + 128 * kk);
    wg_commit();
}

template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

#endif

/* qscale = |scale| * log2(e); qneg: scale < 0, applied by negating Q's elements (exact). tmK and
 * tmV: the caches' tensor maps ([S, Hkv * 64], boxes of 64 x BN, 128-byte swizzle). */
template <typename T>
__global__ void __launch_bounds__(NTH, 2)
    pf90_kernel(const T *q, const void *pos, int pos64, T *o, long long rows, int S, int H, int Hkv,
                float qscale, int qneg, int sms, unsigned long long *err,
                unsigned long long *const *err_host, unsigned long long tag,
                const __grid_constant__ CUtensorMap tmK, const __grid_constant__ CUtensorMap tmV)
{
#ifdef PF90_WGMMA
    constexpr int NC = BN / 8, NS = BN / 2;
    extern __shared__ unsigned char pf90_smem[];
    const unsigned raw = smem_u32(pf90_smem), base = (raw + 1023u) & ~1023u;
    unsigned char *gbase = pf90_smem + (base - raw);
    int *sPos = reinterpret_cast<int *>(gbase + OFF_POS);
    unsigned long long *full = reinterpret_cast<unsigned long long *>(gbase + OFF_BAR);
    const unsigned sKV = base + OFF_KV;

    const long long tiles = (rows + BP - 1) / BP;
    const int HB = H / WGS; /* blocks a row tile */
    long long rank = blockIdx.x;
    order_by_work(rank, sms);
    const int h0 = (int)(rank % HB) * WGS;
    const long long tile = tiles - 1 - rank / HB;
    const int kvh = h0 / (H / Hkv);
    const long long r0 = tile * BP, F = (long long)H * DH;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31,
              g = lane >> 2, t = lane & 3;

    if (tid == 0) {
        for (int i = 0; i < ST; i++)
            mbar_init(&full[i], 1);
        mbar_fence_init(); /* the __syncthreads below publishes them */
    }
    pdl_wait(); /* q, the caches and positions may be a predecessor's outputs */
    pdl_trigger();

    /* Q: head h0 + i's tile at i * QB, row m holding position r0 + m (rows past T as zeros) */
    for (int c = tid; c < WGS * BP * 8; c += NTH) {
        const int hi = c / (BP * 8), m = (c / 8) % BP, ch = c % 8;
        const long long r = r0 + m;
        const bool ok = r < rows;
        cp_async16_or_zero(base + (unsigned)hi * QB + sw128(m, ch),
                           ok ? q + r * F + (long long)(h0 + hi) * DH + ch * 8 : q, ok);
    }
    cp_commit();
    if (tid < BP) {
        const long long r = r0 + tid;
        const long long p = prefill_position(pos, pos64, r, rows, S, [&](long long bad) {
            if (h0 == 0)
                record(err, err_host, tag, r, bad, S);
        });
        sPos[tid] = (int)p;
        const int mx = __reduce_max_sync(0xffffffffu, (int)p);
        if (lane == 0)
            sPos[BP + (tid >> 5)] = mx;
    }
    __syncthreads();
    const int kmax = max(sPos[BP], sPos[BP + 1]); /* row r0 is in range: kmax >= 0 */
    const int ntiles = kmax / BN + 1;
    /* this lane's rows: 16 warp + g and 16 warp + g + 8 */
    const int pr[2] = {sPos[16 * warp + g], sPos[16 * warp + g + 8]};
    const int wmin = __reduce_min_sync(0xffffffffu, min(pr[0], pr[1]));

    /* K and V of key tile `it` into stage `st`, by thread 0; keys past S come as zeros, those
     * past kmax are cleared below */
    auto load_kv = [&](int it, int st) {
        if (tid == 0) {
            const unsigned sk = sKV + (unsigned)st * 2 * TB;
            mbar_arrive_tx(&full[st], 2 * TB);
            tma_2d(sk, &tmK, kvh * DH, it * BN, &full[st]);
            tma_2d(sk + TB, &tmV, kvh * DH, it * BN, &full[st]);
        }
    };
    /* the first ST - 1 tiles in flight */
#pragma unroll
    for (int i = 0; i < ST - 1; i++)
        if (i < ntiles)
            load_kv(i, i);
    cp_wait(0); /* this thread's Q chunks */
    if (qneg) {
        for (int c = tid; c < WGS * BP * 8; c += NTH) {
            uint4 *p =
                reinterpret_cast<uint4 *>(gbase + (c / (BP * 8)) * QB + sw128((c / 8) % BP, c % 8));
            uint4 x = *p;
            x.x ^= 0x80008000u, x.y ^= 0x80008000u, x.z ^= 0x80008000u, x.w ^= 0x80008000u;
            *p = x;
        }
    }

    float acc[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 32; i++)
        acc[i] = 0.f;
    const unsigned long long dq = sw128_desc(base + (unsigned)wg * QB, 16);
    /* the K (+ 0) and V (+ TB) descriptors of stage st */
    auto dk_of = [&](int st) { return sw128_desc(sKV + (unsigned)st * 2 * TB, 16); };
    auto dv_of = [&](int st) { return sw128_desc(sKV + (unsigned)st * 2 * TB + TB, TB); };

    /* Iteration it issues S of tile it and P V of tile it - 1 (P and O's factor from the softmax
     * of tile it - 1), then takes the softmax of tile it while that P V runs; both are waited for
     * within the iteration, so no register in flight crosses the loop's back edge (ptxas would
     * serialise the wgmma). Tile k goes to stage k % ST; iteration it loads tile it + ST - 2 into
     * the stage of tile it - 2, whose P V both warpgroups waited for before the barrier of
     * iteration it. */
    fence_async_shared(); /* Q, by cp.async (and its sign) */
    __syncthreads();
    mbar_wait(&full[0], 0);
    unsigned a[BN / 16][4];
    float corr[2];
    {
        float s[NS];
        issue_qk<T>(s, dq, dk_of(0));
        wg_wait<0>();
        fence_regs(s);
        if (BN - 1 > wmin)
            mask_tile<NC>(s, 0, t, pr);
        softmax_tile<NC>(s, m, l, corr, qscale);
        pack_p<T, NC>(s, a);
    }
    for (int it = 1; it < ntiles; it++) {
        __syncthreads();
        if (it + ST - 2 < ntiles)
            load_kv(it + ST - 2, (it + ST - 2) % ST);
        __syncwarp();
        mbar_wait(&full[it % ST], (unsigned)(it / ST) & 1);
        float s[NS];
        issue_qk<T>(s, dq, dk_of(it % ST));
        rescale(acc, corr);
        issue_pv<T>(acc, a, dv_of((it - 1) % ST));
        wg_wait<1>(); /* S of tile it; P V of tile it - 1 runs on */
        fence_regs(s);
        if (it * BN + BN - 1 > wmin)
            mask_tile<NC>(s, it * BN, t, pr);
        softmax_tile<NC>(s, m, l, corr, qscale);
        wg_wait<0>();
        fence_regs(acc);
        pack_p<T, NC>(s, a);
    }
    if (ntiles * BN - 1 > kmax) {
        /* the last tile's V rows past kmax hold whatever the cache holds there (NaN, say): zeros,
         * as P's zeros there must not meet them (its K rows are masked) */
        const int j0 = (ntiles - 1) * BN, n = (ntiles * BN - 1 - kmax) * 8;
        unsigned char *sv = gbase + OFF_KV + ((ntiles - 1) % ST) * 2 * TB + TB;
        for (int c = tid; c < n; c += NTH) {
            const int jj = kmax + 1 - j0 + (c >> 3);
            *reinterpret_cast<uint4 *>(sv + sw128(jj, c & 7)) = make_uint4(0, 0, 0, 0);
        }
        fence_async_shared();
        __syncthreads();
    }
    rescale(acc, corr);
    issue_pv<T>(acc, a, dv_of((ntiles - 1) % ST));
    wg_wait<0>();
    fence_regs(acc);

    /* O / l through this warpgroup's Q tile (its wgmma are done with it), then out in 16-byte
     * rows */
    unsigned char *sO = gbase + wg * QB;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        float sum = l[hh];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int row = 16 * warp + g + 8 * hh;
#pragma unroll
        for (int n = 0; n < DH / 8; n++)
            *reinterpret_cast<unsigned *>(sO + sw128(row, n) + 4 * t) =
                pack2<T>(acc[4 * n + 2 * hh] * inv, acc[4 * n + 2 * hh + 1] * inv);
    }
    asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory"); /* this warpgroup's threads */
    for (int c = tid & 127; c < BP * 8; c += 128) {
        const int row = c >> 3, ch = c & 7;
        const long long r = r0 + row;
        if (r < rows)
            *reinterpret_cast<uint4 *>(o + r * F + (long long)(h0 + wg) * DH + ch * 8) =
                *reinterpret_cast<const uint4 *>(sO + sw128(row, ch));
    }
#else
    (void)q, (void)pos, (void)pos64, (void)o, (void)rows, (void)S, (void)H, (void)Hkv, (void)qscale;
    (void)qneg, (void)sms, (void)err, (void)err_host, (void)tag, (void)tmK, (void)tmV;
#endif
}

template <typename T> static int launch_t(const baton_exec_ctx *ctx, const Call &c)
{
    const long long tiles = (c.rows + BP - 1) / BP, grid = tiles * (c.H / WGS);
    if (grid > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "attention: too many rows for one launch");
    constexpr bool half = std::is_same<T, __half>::value;
    CUtensorMap mk, mv;
    int rc = cache_tensor_map(ctx, "attention", &mk, c.k, half, c.S, c.Hkv, DH, BN);
    if (!rc)
        rc = cache_tensor_map(ctx, "attention", &mv, c.v, half, c.S, c.Hkv, DH, BN);
    if (rc)
        return rc;
    auto kern = pf90_kernel<T>;
    if (prepare(kern, ctx, "attention", 1, grid, NTH, BYTES, BYTES, false) < 0)
        return BATON_ECUDA;
    const float qscale = (float)(fabs(c.scale) * 1.4426950408889634);
    return kcuda::launch(ctx, "attention", kern, (unsigned)grid, NTH, BYTES, 1, (const T *)c.q,
                         c.pos, c.pos64, (T *)c.o, c.rows, c.S, c.H, c.Hkv, qscale,
                         (int)(c.scale < 0), sm_count(ctx), c.err, c.err_host, c.tag, mk, mv);
}

bool usable(const baton_exec_ctx *ctx, int H, int Hkv)
{
#ifdef BATON_SM90A
    if (Hkv <= 0 || H % Hkv != 0 || (H / Hkv) % 2 != 0)
        return false;
    return device_facts(ctx).cc == 90;
#else
    (void)ctx, (void)H, (void)Hkv;
    return false;
#endif
}

int launch(const baton_exec_ctx *ctx, const Call &c, bool half)
{
    return half ? launch_t<__half>(ctx, c) : launch_t<__nv_bfloat16>(ctx, c);
}

} // namespace pf90
} // namespace kcuda
