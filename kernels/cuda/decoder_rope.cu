/* decoder_rope.cu: rope and rope_cache_update on CUDA. Both forms (half-split and interleaved),
 * positions read on the device, one kernel for launches of many rows and one per (form, position
 * width, scale) for decode's few; rope_cache_update rotates q and k and writes k and v into the
 * caches at the rows' positions in the same launch. */
#include "kernels/cuda/decoder_record.cuh"

namespace kcuda
{
namespace dec
{

/* n / d for n < 2^31 by a multiply and a shift (d's multiplier and shift from the host): the row
 * and head of a unit, whose loads' addresses wait for them. */
struct FastDiv {
    unsigned d, m, s;
};
static inline FastDiv fast_div(unsigned d)
{
    FastDiv f;
    f.d = d;
    f.s = 0;
    while ((1ull << f.s) < d)
        f.s++;
    f.m = (unsigned)((((1ull << 32) * ((1ull << f.s) - d)) / d) + 1);
    return f;
}
__device__ __forceinline__ unsigned fdiv(unsigned n, const FastDiv &f)
{
    return (__umulhi(n, f.m) + n) >> f.s;
}

/* A rope launch is one to three parts of each row: rope's x into y; or rope_cache_update's q part
 * into q, its k part into k_cache at the row's position and its v part copied (no rotation) into
 * v_cache at the position, in one launch. */
struct RopePart {
    const void *x; /* row r at x + r * xstride elements */
    void *y;       /* row r at y + r * ystride, or (cache_rows > 0) at positions[r] * ystride */
    long long F;   /* elements of a row: heads * head_dim */
    long long xstride, ystride, cache_rows;
    int rotate; /* 0: copied as is */
};
struct RopeArgs {
    RopePart part[3];
    int nparts;
    /* units of part 0, of parts 0 and 1, of a row (all parts), and of all rows; per_row and
     * per_head (a rotated part's units of one head) as FastDivs (total < 2^31 then) */
    long long u1, u2, units, total;
    FastDiv per_row, per_head;
    const void *pos;
    int pos64;
    const float *inv_freq;
    int Dh, interleaved;
    int tbl; /* the warps' cos and sin tables fit the launch's shared memory */
    double scale;
    int step;
};

/* A part's units: E-element vectors (E == 1: elements), rotate_half's holding E pairs (a vector of
 * each half), interleaved's E / 2 pairs (a pair at least). */
template <int E>
__host__ __device__ __forceinline__ long long rope_units(const RopePart &P, int Dh, int il)
{
    constexpr int EA = E > 1 ? E : 2;
    if (!P.rotate)
        return P.F / E;
    if (il)
        return P.F / EA;
    return (P.F / Dh) * (Dh / 2 / E);
}

/* cos and sin of HF's f32 angle p * f (an f32 product), less k turns in f32 (Cody-Waite, 2 pi in
 * three parts: the first step is exact, so the reduced angle is the true one rounded once, as a
 * reduction in double then rounded gives; k may be one off near a half turn, |r| < 3.32), then
 * the fast f32 sincos, accurate on that range; scaled by `scale`. All on the FMA pipe but the
 * sincos: a thread forms its own pairs' values. f64 data: sincos in double. */
template <typename A, bool SC = true>
__device__ __forceinline__ void rope_cs(long long p, float f, A scale, A &c, A &s)
{
    if constexpr (sizeof(A) == 8) {
        double sv, cv;
        sincos((double)p * (double)f, &sv, &cv);
        c = SC ? cv * scale : cv;
        s = SC ? sv * scale : sv;
    } else {
        const float ang = __fmul_rn((float)p, f);
        /* k = rint(ang / 2 pi): 1.5 * 2^23 added and taken away (exact below 2^22 turns) */
        const float k = __fsub_rn(__fmaf_rn(ang, 0.15915493667125702f, 12582912.f), 12582912.f);
        float r = __fmaf_rn(-k, 6.2831854820251465f, ang);
        r = __fmaf_rn(-k, -1.7484555314695172e-07f, r);
        r = __fmaf_rn(-k, -6.8604980400235275e-15f, r);
        float sv, cv;
        __sincosf(r, &sv, &cv);
        c = SC ? cv * scale : cv; /* !SC: scale is 1, the product exact */
        s = SC ? sv * scale : sv;
    }
}

/* ROPE_U: units in flight per thread in rope_kernel's grid-stride loop (64 bytes of bf16 half-split
 * rows a thread, as the copy floor keeps); ROPE_FS: a lane's frequencies of a warp's table
 * (head_dim up to 256). */
#define ROPE_U  2
#define ROPE_FS 4

/* E elements of a unit as loaded: a 16-byte vector (E > 1) or one element (E == 1). */
template <typename T, int E> struct RopeVec {
    U16<T> u;
    __device__ __forceinline__ T &operator[](int e)
    {
        return u.v[e];
    }
};
template <typename T> struct RopeVec<T, 1> {
    T v[2];
    __device__ __forceinline__ T &operator[](int e)
    {
        return v[e];
    }
};

/* N values from p, 16 bytes at a time where N allows and 8 where N is 2 (p is a multiple of N
 * past a 16-byte-aligned base: a rope table, padded to 16 bytes, or inv_freq, whose alignment
 * the decode launch checks); NC: global memory, read by __ldg; else shared memory. */
template <bool NC, typename A, int N> __device__ __forceinline__ void ld_n(const A *p, A (&v)[N])
{
    auto ld = [](const auto *q) {
        if constexpr (NC)
            return __ldg(q);
        else
            return *q;
    };
    if constexpr (sizeof(A) == 4 && N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            const float4 t = ld(reinterpret_cast<const float4 *>(p + i));
            v[i] = t.x, v[i + 1] = t.y, v[i + 2] = t.z, v[i + 3] = t.w;
        }
    } else if constexpr (sizeof(A) == 4 && N == 2) {
        const float2 t = ld(reinterpret_cast<const float2 *>(p));
        v[0] = t.x, v[1] = t.y;
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            v[i] = ld(p + i);
    }
}

/* v_i of three parts' values by arithmetic on all three: ptxas turns a select between kernel
 * parameters into constant loads predicated on i, issued only once i is known, on the way to a
 * decode row's loads; this way all three are read at the kernel's start. */
template <typename V> __device__ __forceinline__ V pick3(int i, V v0, V v1, V v2)
{
    using U = typename std::conditional<sizeof(V) <= 4, unsigned, unsigned long long>::type;
    const U a = (U)v0, b = (U)v1, c = (U)v2;
    return (V)(a + (U)(i >= 1) * (b - a) + (U)(i >= 2) * (c - b));
}

/* rope_kernel's N (cos, sin) pairs of frequencies i0 .. i0 + N - 1 at position p: from the warp's
 * tables (cs, sn at i0) where the launch is one row and they hold it, else computed. */
template <typename A, int N>
__device__ __forceinline__ void rope_pairs(bool one_row, const A *cs, const A *sn,
                                           const RopeArgs &a, long long p, int i0, A (&c)[N],
                                           A (&s)[N])
{
    if (one_row) {
        ld_n<false>(cs, c);
        ld_n<false>(sn, s);
    } else {
#pragma unroll
        for (int e = 0; e < N; e++)
            rope_cs<A>(p, __ldg(a.inv_freq + i0 + e), (A)a.scale, c[e], s[e]);
    }
}

/* Every unit on its own, as a copy's vectors: thread g takes units g, g + stride, ... of all rows'
 * units (ROPE_U in flight; a warp's lanes take consecutive units), and for each issues its row's
 * loads, the row's position and its lane's frequencies together. A warp whose units are of one row
 * (the usual case: a row's units are a multiple of 32) forms that row's cos and sin once, a lane
 * for each frequency, into its own table in shared memory (no block barrier), and each lane reads
 * its pairs' values from it; other warps' lanes form their own (each pair's sincos in each lane
 * left rope at 8192 rows compute-bound, 2.3x the copy). Launches that a wave of 256-thread blocks
 * would not spread over every SM go in 64-thread blocks, a unit a thread, as the copy spreads its
 * bytes (rope_launch); larger launches are a wave of 256-thread blocks. */
template <typename T, int E> __global__ void __launch_bounds__(256, 4) rope_kernel(const RopeArgs a)
{
    using A = typename Acc<T>::A;
    constexpr int EA = E > 1 ? E : 2; /* elements a unit holds: a pair at least (interleaved) */
    constexpr int NP = E > 1 ? E : 1; /* pairs of a rotate_half unit */
    constexpr int NI = EA / 2;        /* pairs of an interleaved unit */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int Dh = a.Dh, half = Dh / 2, il = a.interleaved, lane = threadIdx.x & 31;
    const int hp = (half + 3) & ~3; /* a table's cos (then sin) values, padded to 16 bytes */
    A *tbl = reinterpret_cast<A *>(smem_raw) + (size_t)(threadIdx.x >> 5) * ROPE_U * 2 * hp;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const bool small = a.total < 0x80000000LL;
    pdl_wait(); /* x, positions and inv_freq may be a predecessor's outputs */
    pdl_trigger();
    /* the warp's lanes iterate together (their units are consecutive): collectives below */
    for (long long w0 = (long long)blockIdx.x * blockDim.x + (threadIdx.x & ~31); w0 < a.total;
         w0 += ROPE_U * stride) {
        RopeVec<T, E> va[ROPE_U], vb[ROPE_U];
        long long p[ROPE_U], r[ROPE_U];
        int off[ROPE_U], i0[ROPE_U], pi[ROPE_U], mode[ROPE_U];
        float fl[ROPE_U];   /* this lane's first frequency of the warp's table */
        bool first[ROPE_U]; /* the part's first unit of the row: it records a bad position */
#pragma unroll
        for (int k = 0; k < ROPE_U; k++) {
            const long long g = w0 + lane + k * stride;
            r[k] = -1;
            mode[k] = 2;
            /* every lane's, a unit or not: the lanes past the last unit fill the table too */
            fl[k] = lane < half ? __ldg(a.inv_freq + lane) : 0.f;
            if (g >= a.total)
                continue;
            long long u;
            if (small) {
                r[k] = fdiv((unsigned)g, a.per_row);
                u = (long long)((unsigned)g - (unsigned)r[k] * a.per_row.d);
            } else {
                r[k] = g / a.units;
                u = g - r[k] * a.units;
            }
            pi[k] = u < a.u1 ? 0 : u < a.u2 ? 1 : 2;
            u -= pi[k] == 0 ? 0 : pi[k] == 1 ? a.u1 : a.u2;
            first[k] = u == 0;
            /* the part's fields by arithmetic, not an indexed read of the parameters */
            const T *px = pick3(pi[k], (const T *)a.part[0].x, (const T *)a.part[1].x,
                                (const T *)a.part[2].x);
            const long long xs =
                pick3(pi[k], a.part[0].xstride, a.part[1].xstride, a.part[2].xstride);
            const int rot = pick3(pi[k], a.part[0].rotate, a.part[1].rotate, a.part[2].rotate);
            mode[k] = !rot ? 2 : il; /* 0 rotate_half, 1 interleaved, 2 copy */
            i0[k] = 0;
            if (mode[k] == 0) {
                const unsigned h = fdiv((unsigned)u, a.per_head);
                i0[k] = (int)((unsigned)u - h * a.per_head.d) * NP;
                off[k] = (int)h * Dh + i0[k];
            } else if (mode[k] == 1) {
                const unsigned h = fdiv((unsigned)u, a.per_head);
                i0[k] = (int)((unsigned)u - h * a.per_head.d) * NI;
                off[k] = (int)u * EA;
            } else {
                off[k] = (int)u * E;
            }
            const T *xr = px + r[k] * xs;
            if constexpr (E > 1) {
                va[k].u = ld16(xr + off[k]);
                if (mode[k] == 0)
                    vb[k].u = ld16(xr + off[k] + half);
            } else {
                va[k][0] = xr[off[k]];
                if (mode[k] != 2)
                    vb[k][0] = xr[off[k] + (mode[k] == 0 ? half : 1)];
            }
            p[k] = a.pos64 ? __ldg((const long long *)a.pos + r[k])
                           : (long long)__ldg((const int *)a.pos + r[k]);
        }
#pragma unroll
        for (int k = 0; k < ROPE_U; k++) {
            /* one row for the warp's rotated units: its table; lanes past the end are no row */
            const long long r0 = __shfl_sync(0xffffffffu, r[k], 0);
            const bool one_row =
                __all_sync(0xffffffffu, r[k] < 0 || r[k] == r0) && a.tbl && half <= 32 * ROPE_FS;
            const bool turns = __any_sync(0xffffffffu, r[k] >= 0 && mode[k] != 2);
            A *cs = tbl + k * 2 * hp, *sn = cs + hp;
            if (one_row && turns) {
                const long long p0 = __shfl_sync(0xffffffffu, p[k], 0);
                __syncwarp(); /* the last round's reads of the table are done */
#pragma unroll
                for (int f = 0; f < ROPE_FS; f++)
                    if (lane + 32 * f < half)
                        rope_cs<A>(p0, f == 0 ? fl[k] : __ldg(a.inv_freq + lane + 32 * f),
                                   (A)a.scale, cs[lane + 32 * f], sn[lane + 32 * f]);
                __syncwarp();
            }
            if (r[k] < 0)
                continue;
            const long long cache_rows = pi[k] == 0   ? a.part[0].cache_rows
                                         : pi[k] == 1 ? a.part[1].cache_rows
                                                      : a.part[2].cache_rows;
            if (cache_rows > 0 && (p[k] < 0 || p[k] >= cache_rows)) {
                if (first[k])
                    record(DEC_ROPE_CACHE_UPDATE, a.step, r[k], p[k], cache_rows);
                continue; /* a write outside the cache is dropped */
            }
            void *py = pi[k] == 0 ? a.part[0].y : pi[k] == 1 ? a.part[1].y : a.part[2].y;
            const long long ys = pi[k] == 0   ? a.part[0].ystride
                                 : pi[k] == 1 ? a.part[1].ystride
                                              : a.part[2].ystride;
            T *yr = (T *)py + (cache_rows > 0 ? p[k] : r[k]) * ys;
            if (mode[k] == 0) {
                A c[NP], sv[NP];
                rope_pairs(one_row, cs + i0[k], sn + i0[k], a, p[k], i0[k], c, sv);
#pragma unroll
                for (int e = 0; e < NP; e++) {
                    const A x1 = ld_a<A>(va[k][e]), x2 = ld_a<A>(vb[k][e]);
                    va[k][e] = from_acc<T>(x1 * c[e] - x2 * sv[e]);
                    vb[k][e] = from_acc<T>(x2 * c[e] + x1 * sv[e]);
                }
            } else if (mode[k] == 1) {
                if constexpr (E == 1)
                    va[k][1] = vb[k][0];
                A c[NI], sv[NI];
                rope_pairs(one_row, cs + i0[k], sn + i0[k], a, p[k], i0[k], c, sv);
#pragma unroll
                for (int e = 0; e < NI; e++) {
                    const A x0 = ld_a<A>(va[k][2 * e]), x1 = ld_a<A>(va[k][2 * e + 1]);
                    va[k][2 * e] = from_acc<T>(x0 * c[e] - x1 * sv[e]);
                    va[k][2 * e + 1] = from_acc<T>(x1 * c[e] + x0 * sv[e]);
                }
            }
            if constexpr (E > 1) {
                st16(yr + off[k], va[k].u);
                if (mode[k] == 0)
                    st16(yr + off[k] + half, vb[k].u);
            } else {
                yr[off[k]] = va[k][0];
                if (mode[k] == 0)
                    yr[off[k] + half] = vb[k][0];
                else if (mode[k] == 1)
                    yr[off[k] + 1] = va[k][1];
            }
        }
    }
}

/* rope_decode_kernel's parameters, in the order its loads' addresses need them and 32 bits wide
 * where a decode step's shapes allow: 112 bytes, two 64-byte constant-cache lines, all asked for
 * before the first instruction that waits on one (RopeArgs' 296 bytes took a second round of
 * parameter reads before the loads). Part 0's rows are the rows; parts 1 and 2
 * (rope_cache_update's k and v) are stored at the row's position when S > 0. */
template <typename A> struct RopeDec {
    const void *x; /* part 0 of row r at x + r * xs elements, part i at + xoff_i */
    const void *pos;
    const float *inv_freq;
    int xs, xoff1, xoff2;
    int n0, n1, n2; /* units of each part */
    unsigned hm;    /* units of a head (hd): u / hd = (umulhi(u, hm) + u) >> hs */
    int hd;
    unsigned short Dh;
    unsigned char hs;
    int S; /* cache rows of parts 1 and 2; 0: their rows are the rows */
    void *y0, *y1, *y2;
    int ys0, ys1, ys2;
    A scale;
    int step; /* last: read only to record a bad position */
};

/* A 16-byte store to global memory: the parts' pointers are picked by arithmetic, after which the
 * compiler no longer knows them global and emits generic stores. */
template <typename T> __device__ __forceinline__ void st16_global(T *p, const U16<T> &u)
{
    const uint4 v = *reinterpret_cast<const uint4 *>(u.v);
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}

/* A few rows (a decode step's): 64-thread blocks, block (c, i, r) of chunk c of part i of row r,
 * so that the row, the part and its fields are the block's (uniform registers) and a thread's unit
 * is its block's chunk plus its index. Parts 0 and 1 rotate (IL: interleaved pairs, else
 * rotate_half), part 2 is copied: the hot path is one straight run of code with no branch on the
 * form, and none on the positions' width (P64: i64) or a scale of 1 (SC: cos and sin multiplied
 * by it; together 0.13 us of a 1.54 us row). As the rope floor of bench_decoder, each thread issues
 * its row's position, its vectors and its pairs' frequencies together and forms its own cos and sin
 * (a warp's shared table, as rope_kernel's, put a shared-memory store, a warp barrier and a load
 * between the sincos and the rotation; a decode row is too few threads for the MUFU work to
 * matter), with rope_cs: rope_kernel's bits. */
template <typename T, int E, bool IL, bool P64, bool SC>
__global__ void __launch_bounds__(64) rope_decode_kernel(const RopeDec<typename Acc<T>::A> a)
{
    using A = typename Acc<T>::A;
    constexpr int NP = IL ? E / 2 : E; /* pairs of a unit */
    const int pi = (int)blockIdx.y, ut = (int)blockIdx.x * 64 + (int)threadIdx.x;
    const unsigned row = blockIdx.z;
    const int n = pick3(pi, a.n0, a.n1, a.n2);
    const bool rot = pi < 2, live = ut < n;
    /* A thread past its part's units reads the last one and stores nothing (every part has units):
     * a return here made every parameter read after it wait for the first ones, two rounds to
     * the constant bank before the first load instead of one. */
    const int u = live ? ut : n - 1;
    pdl_wait(); /* x, positions and inv_freq may be a predecessor's outputs */
    pdl_trigger();
    const long long p =
        P64 ? __ldg((const long long *)a.pos + row) : (long long)__ldg((const int *)a.pos + row);
    const unsigned h = (__umulhi((unsigned)u, a.hm) + (unsigned)u) >> a.hs;
    const int i0 = (u - (int)h * a.hd) * NP, half = a.Dh >> 1;
    const int off = rot && !IL ? (int)h * a.Dh + i0 : u * E;
    const T *xr = (const T *)a.x + (long long)row * a.xs + pick3(pi, 0, a.xoff1, a.xoff2);
    RopeVec<T, E> va, vb;
    va.u = ld16(xr + off);
    float f[NP];
    if (rot) {
        if (!IL)
            vb.u = ld16(xr + off + half);
        ld_n<true>(a.inv_freq + i0, f);
    }
    const bool cache = pi > 0 && a.S > 0;
    if (__builtin_expect(cache && (p < 0 || p >= a.S), 0)) {
        if (ut == 0)
            record(DEC_ROPE_CACHE_UPDATE, a.step, row, p, a.S);
        return; /* a write outside the cache is dropped */
    }
    if (!live)
        return;
    T *yr = pick3(pi, (T *)a.y0, (T *)a.y1, (T *)a.y2) +
            (cache ? p : (long long)row) * pick3(pi, a.ys0, a.ys1, a.ys2);
    if (rot) {
#pragma unroll
        for (int e = 0; e < NP; e++) {
            A cv, sv;
            rope_cs<A, SC>(p, f[e], a.scale, cv, sv);
            if constexpr (IL) {
                const A x0 = ld_a<A>(va[2 * e]), x1 = ld_a<A>(va[2 * e + 1]);
                va[2 * e] = from_acc<T>(x0 * cv - x1 * sv);
                va[2 * e + 1] = from_acc<T>(x1 * cv + x0 * sv);
            } else {
                const A x1 = ld_a<A>(va[e]), x2 = ld_a<A>(vb[e]);
                va[e] = from_acc<T>(x1 * cv - x2 * sv);
                vb[e] = from_acc<T>(x2 * cv + x1 * sv);
            }
        }
        if (!IL)
            st16_global(yr + off + half, vb.u);
    }
    st16_global(yr + off, va.u);
}
} /* namespace dec */
} /* namespace kcuda */

using namespace kcuda;
using namespace kcuda::dec;

DEC_PREPARE(rope, DEC_ROPE, 4)
DEC_PREPARE(rope_cache_update, DEC_ROPE_CACHE_UPDATE, 8)

/* rope_decode_kernel for a launch of few rows (rows * blocks a row within two per SM) whose parts
 * are rope's or rope_cache_update's (x's parts in one buffer at one row stride, parts 0 and 1
 * rotated and part 2 copied, part 0 stored at the rows, parts 1 and 2 at the positions) and whose
 * sizes fit 32 bits: 0 or the launch's failure, 1 when it does not apply. */
template <typename T>
static int rope_decode_launch(const baton_exec_ctx *ctx, const char *what, const RopeArgs &a,
                              long long rows, long long sms)
{
    using A = typename Acc<T>::A;
    const long long pu[3] = {a.u1, a.u2 - a.u1, a.units - a.u2};
    long long bp[3], xoff[3] = {0, 0, 0};
    bool fits = a.part[0].cache_rows == 0 && rows <= 65535 && a.Dh < 65536;
    for (int i = 0; i < 3; i++) {
        bp[i] = (pu[i] + 63) / 64;
        if (i >= a.nparts)
            continue;
        const RopePart &P = a.part[i];
        const long long dx = ((const char *)P.x - (const char *)a.part[0].x) / (long long)sizeof(T);
        xoff[i] = dx;
        fits = fits && P.xstride == a.part[0].xstride && dx >= 0 && dx <= 0x7fffffffLL &&
               ((const char *)P.x - (const char *)a.part[0].x) % (long long)sizeof(T) == 0 &&
               P.xstride <= 0x7fffffffLL && P.ystride <= 0x7fffffffLL &&
               P.cache_rows <= 0x7fffffffLL && (i == 0 || P.cache_rows == a.part[1].cache_rows) &&
               (P.rotate != 0) == (i < 2) && pu[i] > 0;
    }
    /* its frequencies are read 16 bytes at a time (ld_n) */
    fits = fits && ((uintptr_t)a.inv_freq & 15) == 0;
    const long long bpr = bp[0] + bp[1] + bp[2], bmax = std::max(bp[0], std::max(bp[1], bp[2]));
    if (!fits || rows * bpr > 2 * sms)
        return 1;
    RopeDec<A> d;
    memset(&d, 0, sizeof d);
    d.x = a.part[0].x;
    d.pos = a.pos;
    d.inv_freq = a.inv_freq;
    d.xs = (int)a.part[0].xstride;
    d.xoff1 = (int)xoff[1];
    d.xoff2 = (int)xoff[2];
    d.n0 = (int)pu[0];
    d.n1 = (int)pu[1];
    d.n2 = (int)pu[2];
    d.hm = a.per_head.m;
    d.hd = (int)a.per_head.d;
    d.hs = (unsigned char)a.per_head.s;
    d.Dh = (unsigned short)a.Dh;
    void *y[3] = {nullptr, nullptr, nullptr};
    int ys[3] = {0, 0, 0};
    for (int i = 0; i < a.nparts; i++) {
        y[i] = a.part[i].y;
        ys[i] = (int)a.part[i].ystride;
    }
    d.S = a.nparts > 1 ? (int)a.part[1].cache_rows : 0;
    d.y0 = y[0], d.y1 = y[1], d.y2 = y[2];
    d.ys0 = ys[0], d.ys1 = ys[1], d.ys2 = ys[2];
    d.scale = (A)a.scale;
    d.step = a.step;
    constexpr int E = 16 / (int)sizeof(T);
    const dim3 grid((unsigned)bmax, (unsigned)a.nparts, (unsigned)rows);
    /* a kernel per form, position width and scale (1 or not): no branch or select on them */
    const int k = (a.interleaved ? 4 : 0) + (a.pos64 ? 2 : 0) + (d.scale != (A)1 ? 1 : 0);
    static constexpr void (*const kern[8])(const RopeDec<A>) = {
        rope_decode_kernel<T, E, false, false, false>, rope_decode_kernel<T, E, false, false, true>,
        rope_decode_kernel<T, E, false, true, false>,  rope_decode_kernel<T, E, false, true, true>,
        rope_decode_kernel<T, E, true, false, false>,  rope_decode_kernel<T, E, true, false, true>,
        rope_decode_kernel<T, E, true, true, false>,   rope_decode_kernel<T, E, true, true, true>};
    return launch(ctx, what, kern[k], grid, 64, 0, 1, d);
}

/* Launches rope over all rows' units: 16-byte units where every part's rows allow them; where a
 * wave of rope_kernel's 256-thread blocks, ROPE_U units a thread at a time, would leave SMs idle,
 * 64-thread blocks a unit a thread: rope_decode_kernel's blocks of one part of one row where they
 * are at most two a SM (a decode step, a short prompt), else rope_kernel's (and for units of one
 * element); else that wave. */
template <typename T>
static int rope_launch(const baton_exec_ctx *ctx, const char *what, RopeArgs &a, long long rows,
                       bool vec)
{
    constexpr int E = 16 / (int)sizeof(T);
    if (rows > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s: %lld rows are too many for one launch", what,
                               (long long)rows);
    long long units = 0;
    for (int i = 0; i < a.nparts; i++) {
        units += vec ? rope_units<E>(a.part[i], a.Dh, a.interleaved)
                     : rope_units<1>(a.part[i], a.Dh, a.interleaved);
        if (i == 0)
            a.u1 = a.u2 = units;
        else if (i == 1)
            a.u2 = units;
    }
    a.units = units;
    a.total = units * rows;
    if (a.total == 0)
        return 0;
    bool long_rows = units > 0x7fffffffLL || a.total / rows != units;
    for (int i = 0; i < a.nparts; i++)
        long_rows = long_rows || a.part[i].F > 0x7fffffffLL;
    if (long_rows)
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s: rows of %lld units are too long", what,
                               (long long)units);
    const int e = vec ? E : 1, ea = e > 1 ? e : 2;
    a.per_row = fast_div((unsigned)units);
    a.per_head = fast_div((unsigned)(a.interleaved ? a.Dh / ea : a.Dh / 2 / e));
    const void *kernel = vec ? (const void *)rope_kernel<T, E> : (const void *)rope_kernel<T, 1>;
    const long long sms = sm_count(ctx);
    int threads = 64;
    long long grid = (a.total + threads - 1) / threads;
    /* 256-thread blocks where a wave of them, ROPE_U units a thread, fills the SMs; else 64-thread
     * blocks a unit a thread (37 rows at head_dim 128 over 32 heads: 19 blocks of 256 threads took
     * 2.00x the copy, 148 of 64 1.10x) */
    if (grid > sms && (a.total + ROPE_U * 256 - 1) / (ROPE_U * 256) >= sms) {
        threads = 256;
        grid = wave_grid(ctx, kernel, (a.total + ROPE_U - 1) / ROPE_U, threads);
    }
    /* each warp's tables: ROPE_U of cos and sin for head_dim / 2 frequencies (padded to 16 B) */
    const size_t hp = (size_t)((a.Dh / 2 + 3) & ~3),
                 smem = (size_t)(threads / 32) * ROPE_U * 2 * hp * sizeof(typename Acc<T>::A);
    a.tbl = a.Dh / 2 <= 32 * ROPE_FS && smem <= 48 * 1024;
    if (vec && threads == 64) {
        const int rc = rope_decode_launch<T>(ctx, what, a, rows, sms);
        if (rc <= 0)
            return rc;
    }
    if (vec)
        return launch(ctx, what, rope_kernel<T, E>, (unsigned)grid, threads, a.tbl ? smem : 0, 1,
                      a);
    return launch(ctx, what, rope_kernel<T, 1>, (unsigned)grid, threads, a.tbl ? smem : 0, 1, a);
}

/* What rope and rope_cache_update set alike: positions b[1], frequencies b[2], the form, the
 * scale and the step. */
static RopeArgs rope_args(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                          const dec_shape &s)
{
    RopeArgs a;
    memset(&a, 0, sizeof a);
    a.pos = b[1];
    a.pos64 = s.idx_dt == BATON_DTYPE_I64;
    a.inv_freq = (const float *)b[2];
    a.Dh = (int)d.head_dim;
    a.interleaved = (d.flags & DEC_FLAG_INTERLEAVED) != 0;
    a.scale = d.scale;
    a.step = ctx->step_index;
    return a;
}

/* Whether a head's rotated pairs fall in whole 16-byte units of T: the half-split form's halves,
 * or the interleaved form's pairs, which a unit must not cut. */
template <typename T> static bool rope_units_fit(const baton_decoder_desc &d)
{
    constexpr int E = 16 / (int)sizeof(T);
    return (d.flags & DEC_FLAG_INTERLEAVED) ? d.head_dim % E == 0 && E % 2 == 0
                                            : (d.head_dim / 2) % E == 0;
}

template <typename T>
static int rope_typed(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                      const dec_shape &s)
{
    const bool vec = al16(b[0]) && al16(b[3]) && rope_units_fit<T>(d);
    RopeArgs a = rope_args(ctx, b, d, s);
    a.part[0] = RopePart{b[0], b[3], (long long)s.F, (long long)s.F, (long long)s.F, 0LL, 1};
    a.nparts = 1;
    return rope_launch<T>(ctx, "rope", a, (long long)s.rows, vec);
}

/* rope_cache_update: rope of qkv's q part into q, of its k part into k_cache at the positions,
 * and its v part copied into v_cache: the rope kernel's arithmetic, so the bits of rope then
 * kv_cache_update, in one launch and no intermediate tensor. */
template <typename T>
static int rope_cache_typed(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                            const dec_shape &s)
{
    const T *qkv = (const T *)b[0];
    T *q = (T *)b[5], *kc = (T *)b[6], *vc = (T *)b[7];
    const size_t esz = sizeof(T);
    cudaStream_t st = (cudaStream_t)ctx->stream;
    const long long kbytes = s.KF * (long long)esz;
    if ((void *)kc != b[3] &&
        cudaMemcpyAsync(kc, b[3], (size_t)(kbytes * s.S), cudaMemcpyDeviceToDevice, st))
        return baton__ctx_fail(ctx, BATON_ECUDA, "rope_cache_update: cudaMemcpyAsync failed");
    if ((void *)vc != b[4] &&
        cudaMemcpyAsync(vc, b[4], (size_t)(kbytes * s.S), cudaMemcpyDeviceToDevice, st))
        return baton__ctx_fail(ctx, BATON_ECUDA, "rope_cache_update: cudaMemcpyAsync failed");
    /* 16-byte units only where every row of qkv, q and the caches starts on 16 bytes */
    const bool vec = al16(qkv) && al16(q) && al16(kc) && al16(vc) &&
                     (s.QKV * (long long)esz) % 16 == 0 && rope_units_fit<T>(d);
    RopeArgs a = rope_args(ctx, b, d, s);
    a.part[0] = RopePart{qkv, q, (long long)s.F, (long long)s.QKV, (long long)s.F, 0LL, 1};
    a.part[1] = RopePart{qkv + s.F,      kc, (long long)s.KF, (long long)s.QKV, (long long)s.KF,
                         (long long)s.S, 1};
    a.part[2] = RopePart{qkv + s.F + s.KF, vc, (long long)s.KF, (long long)s.QKV, (long long)s.KF,
                         (long long)s.S,   0};
    a.nparts = 3;
    return rope_launch<T>(ctx, "rope_cache_update", a, (long long)s.rows, vec);
}

extern "C" int baton__kcuda_rope_cache_update(const baton_exec_ctx *ctx, void **buffers,
                                              const char *opaque, size_t len)
{
    DEC_READ(DEC_ROPE_CACHE_UPDATE, 8);
    switch (s.x_dt) {
    case BATON_DTYPE_BF16: return rope_cache_typed<__nv_bfloat16>(ctx, buffers, d, s);
    case BATON_DTYPE_F16: return rope_cache_typed<__half>(ctx, buffers, d, s);
    case BATON_DTYPE_F32: return rope_cache_typed<float>(ctx, buffers, d, s);
    default: return rope_cache_typed<double>(ctx, buffers, d, s);
    }
}

extern "C" int baton__kcuda_rope(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                 size_t len)
{
    DEC_READ(DEC_ROPE, 4);
    switch (s.x_dt) {
    case BATON_DTYPE_BF16: return rope_typed<__nv_bfloat16>(ctx, buffers, d, s);
    case BATON_DTYPE_F16: return rope_typed<__half>(ctx, buffers, d, s);
    case BATON_DTYPE_F32: return rope_typed<float>(ctx, buffers, d, s);
    default: return rope_typed<double>(ctx, buffers, d, s);
    }
}

DEC_RECORD_UNIT(rope)
