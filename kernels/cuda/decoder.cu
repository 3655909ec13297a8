/* decoder.cu: the decoder ops on CUDA (embedding, rope, kv_cache_update, attention, silu_mul,
 * silu, gelu, softmax, cast, sample). Aimed at the memory
 * roofline of an H100/H200 at batch 1: 16-byte loads wherever rows allow them, decode attention
 * split over the keys across a thread-block cluster whose partial softmaxes are combined through
 * distributed shared memory (no workspace, no second launch, a fixed order: the same bits every
 * run), shapes from ctx->sig on every call and positions read on the device (a captured graph
 * stays valid as the sequence grows). An index out of range is clamped, never followed, and
 * recorded in a device word that baton__kcuda_decoder_error_take() reads at the next host wait. */
#include "kernels/cuda/kcuda_common.cuh"

#include <math.h>
#include <mma.h>

#include <mutex>

#include "kernels/cuda/attn_prefill_sm90.h"
#include "kernels/cuda/cuda_decoder.h"
#include "kernels/decoder_desc.h"

namespace kcuda
{
namespace dec
{

/* ---- run-time errors ----------------------------------------------------------------------------
 * err[0]: 0, or (op << 32) | (step_index + 1) of the first failing call (atomicCAS: first wins);
 * err[1]: the element's index; err[2]: its value; err[3]: the exclusive limit. */
__device__ unsigned long long g_err[4];
/* The first error's copy in mapped pinned host memory (NULL until the host sets it), so that the
 * check after every run reads host memory instead of copying from the device. */
__device__ unsigned long long *g_err_host;

__device__ __noinline__ void record(int op, int step, long long i, long long v, long long limit)
{
    const unsigned long long tag =
        ((unsigned long long)op << 32) | (unsigned long long)(unsigned)(step + 1);
    record_error(g_err, &g_err_host, tag, i, v, limit);
}

template <typename I> __device__ __forceinline__ long long ld_idx(const I *p, long long i)
{
    return (long long)__ldg(p + i);
}

/* ---- 16-byte units ------------------------------------------------------------------------------
 */

/* E elements of T in one 16-byte register group. */
template <typename T> struct alignas(16) U16 {
    static constexpr int E = 16 / (int)sizeof(T);
    T v[E];
};

template <typename T> __device__ __forceinline__ U16<T> ld16(const T *p)
{
    U16<T> u;
    *reinterpret_cast<uint4 *>(u.v) = __ldg(reinterpret_cast<const uint4 *>(p));
    return u;
}

/* Streaming load: read once (the KV cache, weights), do not keep in L1. */
template <typename T> __device__ __forceinline__ U16<T> ld16_stream(const T *p)
{
    U16<T> u;
    *reinterpret_cast<uint4 *>(u.v) = __ldcs(reinterpret_cast<const uint4 *>(p));
    return u;
}

template <typename T> __device__ __forceinline__ void st16(T *p, const U16<T> &u)
{
    *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(u.v);
}

static inline bool al16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

template <typename T> struct Acc {
    using A = float;
};
template <> struct Acc<double> {
    using A = double;
};

template <typename A, typename T> __device__ __forceinline__ A ld_a(T v)
{
    return to_acc<A>(v);
}

/* w / d, in 32 bits where both fit (a 64-bit division is a long call the loads' addresses wait
 * for: at decode size it is the latency of the kernel). */
__device__ __forceinline__ long long row_of(long long w, long long d)
{
    if (((unsigned long long)w | (unsigned long long)d) <= 0xffffffffull)
        return (long long)((unsigned)w / (unsigned)d);
    return w / d;
}

/* ---- embedding ----------------------------------------------------------------------------------
 */

/* Block (row, chunk): copies the id's table row into out, 16 bytes per thread when VEC (ONE: a
 * chunk a row, block b copies row b). Everything but the row's address is formed before the id
 * arrives, and an id out of range is clamped by selects and recorded after the copy, so that the
 * row's load follows the id's by a multiply and an add (a branch on the id, and the thread's
 * offset formed after it, stood between them). */
template <typename I, bool VEC, bool ONE>
__global__ void embedding_kernel(const I *ids, const char *table, char *out, long long rows,
                                 long long V, long long row_bytes, long long chunks, int step)
{
    /* a row a block (4 KB rows and less) without a division */
    const long long b = blockIdx.x, r = ONE ? b : row_of(b, chunks), c = ONE ? 0 : b - r * chunks;
    const long long k = (c * blockDim.x + threadIdx.x) * 16;
    char *dst = out + r * row_bytes;
    pdl_wait(); /* ids and the table may be a predecessor's outputs */
    pdl_trigger();
    const long long raw = ld_idx(ids, r);
    const long long id = raw < 0 ? 0 : raw >= V ? V - 1 : raw;
    const char *src = table + id * row_bytes;
    if (VEC) {
        if (k < row_bytes)
            *reinterpret_cast<uint4 *>(dst + k) = __ldg(reinterpret_cast<const uint4 *>(src + k));
    } else {
        for (long long j = c * blockDim.x * 16 + threadIdx.x;
             j < (c + 1) * blockDim.x * 16 && j < row_bytes; j += blockDim.x)
            dst[j] = src[j];
    }
    if (raw != id && c == 0 && threadIdx.x == 0)
        record(DEC_EMBEDDING, step, r, raw, V);
}

/* ---- rope ---------------------------------------------------------------------------------------
 */

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

/* Every unit on its own, as a copy's vectors: thread g takes units g, g + stride, ... of all rows'
 * units (ROPE_U in flight; a warp's lanes take consecutive units), and for each issues its row's
 * loads, the row's position and its lane's frequencies together. A warp whose units are of one row
 * (the usual case: a row's units are a multiple of 32) forms that row's cos and sin once, a lane
 * for each frequency, into its own table in shared memory (no block barrier), and each lane reads
 * its pairs' values from it; other warps' lanes form their own (each pair's sincos in each lane
 * left rope at 8192 rows compute-bound, 2.3x the copy). Few rows (that rope_decode_kernel does not
 * take: units of one element) go in 64-thread blocks, as the copy spreads its bytes; larger
 * launches are a wave of 256-thread blocks. */
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
                if (one_row) {
                    ld_n<false>(cs + i0[k], c);
                    ld_n<false>(sn + i0[k], sv);
                } else {
#pragma unroll
                    for (int e = 0; e < NP; e++)
                        rope_cs<A>(p[k], __ldg(a.inv_freq + i0[k] + e), (A)a.scale, c[e], sv[e]);
                }
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
                if (one_row) {
                    ld_n<false>(cs + i0[k], c);
                    ld_n<false>(sn + i0[k], sv);
                } else {
#pragma unroll
                    for (int e = 0; e < NI; e++)
                        rope_cs<A>(p[k], __ldg(a.inv_freq + i0[k] + e), (A)a.scale, c[e], sv[e]);
                }
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

/* ---- kv_cache_update ----------------------------------------------------------------------------
 */

/* A streaming 16-byte load that stays where it is written: the compiler may not sink it past a
 * branch on another load's value (a plain load used only after the branch was moved after it,
 * which put the two latencies in series). */
__device__ __forceinline__ uint4 ld16_cs_here(const void *p)
{
    uint4 v;
    asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* An index load that stays where it is written (as ld16_cs_here). */
__device__ __forceinline__ long long ld_idx_here(const int *p, long long i)
{
    int v;
    asm volatile("ld.global.nc.s32 %0, [%1];" : "=r"(v) : "l"(p + i));
    return v;
}
__device__ __forceinline__ long long ld_idx_here(const long long *p, long long i)
{
    long long v;
    asm volatile("ld.global.nc.s64 %0, [%1];" : "=l"(v) : "l"(p + i));
    return v;
}

/* KV_U: 16-byte vectors in flight per thread in kv_update_kernel's grid-stride loop. */
#define KV_U 4

/* vec: the rows' 16-byte vectors, vpr a row, over a grid-stride loop with KV_U vectors a thread in
 * flight (one a thread, a block per chunk of rows, held 1/4 of the copy's bytes in flight: 1.9x
 * its time at 32 MB), each loaded before its row's position is read (one memory latency at decode
 * size); else a block per (row, chunk of blockDim.x * 16 bytes), a byte a thread. */
template <typename I>
__global__ void kv_update_kernel(char *cache, const char *nw, const I *pos, long long rows,
                                 long long S, long long row_bytes, long long chunks, int vec,
                                 int step, long long src_stride, int op)
{
    /* new's row r at r * src_stride bytes (rope_cache_update's v inside qkv) */
    pdl_wait();
    pdl_trigger();
    if (vec) {
        const long long vpr = row_bytes / 16, nvec = rows * vpr;
        const long long stride = (long long)gridDim.x * blockDim.x;
        for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < nvec;
             g += KV_U * stride) {
            uint4 v[KV_U];
            long long r[KV_U], k[KV_U], p[KV_U];
#pragma unroll
            for (int j = 0; j < KV_U; j++) {
                const long long gj = g + j * stride;
                r[j] = gj >= nvec ? -1 : gj < vpr ? 0 : row_of(gj, vpr); /* row 0: no division */
                k[j] = (gj - r[j] * vpr) * 16;
                p[j] = 0;
                if (r[j] >= 0) { /* both loads issued together, ahead of the next vector's tests */
                    v[j] = ld16_cs_here(nw + r[j] * src_stride + k[j]);
                    p[j] = ld_idx_here(pos, r[j]);
                }
            }
#pragma unroll
            for (int j = 0; j < KV_U; j++) {
                if (r[j] < 0)
                    continue;
                if (p[j] < 0 || p[j] >= S) {
                    if (k[j] == 0)
                        record(op, step, r[j], p[j], S);
                    continue; /* a write outside the cache is dropped, not clamped onto a row */
                }
                *reinterpret_cast<uint4 *>(cache + p[j] * row_bytes + k[j]) = v[j];
            }
        }
        return;
    }
    const long long b = blockIdx.x, r = b / chunks, c = b % chunks;
    const long long p = ld_idx(pos, r);
    if (p < 0 || p >= S) {
        if (c == 0 && threadIdx.x == 0)
            record(op, step, r, p, S);
        return;
    }
    char *dst = cache + p * row_bytes;
    const char *src = nw + r * src_stride;
    for (long long j = c * blockDim.x * 16 + threadIdx.x;
         j < (c + 1) * blockDim.x * 16 && j < row_bytes; j += blockDim.x)
        dst[j] = src[j];
}

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

/* One output element's merge over a cluster's C ranks, in rank order (the same bits every run):
 * rank k holds, in its shared memory, its running max m_k (base 2; -inf: no keys), its weighted
 * sum a_k and its weight sum l_k; the result is sum w_k a_k / sum w_k l_k, w_k = 2^(m_k - M). */
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
    float M = -INFINITY;
#pragma unroll
    for (int k = 0; k < CMAX; k++)
        if (k < C)
            M = fmaxf(M, mk[k]);
    float a = 0.f, sl = 0.f;
#pragma unroll
    for (int k = 0; k < CMAX; k++)
        if (k < C) {
            const float w = mk[k] == -INFINITY ? 0.f : exp2f(mk[k] - M);
            a = fmaf(w, ak[k], a);
            sl = fmaf(w, lk[k], sl);
        }
    return a / sl;
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
 * finishing a slice of the outputs: fixed orders, the same bits every run, no workspace. Shared
 * memory rows of 16-byte chunks are XOR-swizzled by the row (chunk c of row r at c ^ (r & 7)), so
 * the 8 rows an ldmatrix reads fall in 8 distinct bank groups. */

#define ATT_TK 16 /* keys per warp step: the n of two MMAs, the k of one */

/* P stages per warp: 192 KB of shared memory for DH 64 with P = 6 and for DH 128 and 256 with
 * P = 3 (one block per SM; 5 tiles, 160 KB, in flight per SM at DH 64: 128 SMs need some 8 MB in
 * flight for the HBM's rate at its loaded latency); DH 64 with P = 3 takes 96 KB, so that two
 * blocks may share an SM where a GPC has too few free SMs for a cluster of 16. */
template <int DH, int P_> struct AttMma {
    static constexpr int NW = DH <= 128 ? 8 : 4; /* warps per block (DH 256: 128 O registers) */
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
template <typename T, int DH, int P_>
__global__ void __launch_bounds__(AttMma<DH, P_>::THREADS, 1)
    attn_mma_kernel(const T *q, const T *kc, const T *vc, const void *pos, int pos64, T *o,
                    long long rows, long long S, int H, int Hkv, int G, int chunks, float qscale,
                    int pf, int hint, int early, int spec, int step)
{
    using L = AttMma<DH, P_>;
    constexpr int NW = L::NW, CH = L::CH, P = L::P, TILE = L::TILE, OS = L::OS;
    constexpr int KS = DH / 16, ND = DH / 8;
    extern __shared__ __align__(128) unsigned char att_dyn[];
    __shared__ float blk_o[16][DH];
    __shared__ float blk_m[16], blk_l[16];

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
    /* The block's state: the warps merged in warp order. */
    for (int idx = tid; idx < np * DH; idx += L::THREADS) {
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
        blk_o[p][d] = a;
        if (d == 0) {
            blk_m[p] = M;
            blk_l[p] = l;
        }
    }
    /* The cluster's: every block finishes a slice of the np x DH outputs, reading the C blocks'
     * states (each thread issues its 3 C remote loads before it uses any). */
    cluster.sync();
    {
        constexpr int CMAX = 16;
        const int total = np * DH, share = (total + C - 1) / C;
        const int lo = rank * share, hi = min(total, lo + share);
        for (int idx = lo + tid; idx < hi; idx += L::THREADS) {
            const int p = idx / DH, d = idx % DH;
            /* the weights sum > 0: key 0 is rank 0's and every pair sees it */
            const unsigned pi = p0 + (unsigned)p, pr = pi / ug;
            o[(long long)pr * F + (long long)(kvh * G + (int)(pi - pr * ug)) * DH + d] = from_f<T>(
                cluster_softmax_merge<CMAX>(cluster, &blk_m[p], &blk_o[p][d], &blk_l[p], C));
        }
    }
    cluster_exit_barrier();
}

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
        long long p = -1; /* a row past T: every key masked, nothing written */
        if (r < rows) {
            p = pos64 ? ((const long long *)pos)[r] : ((const int *)pos)[r];
            if (p < 0 || p >= S) {
                if (h0 == 0)
                    record(DEC_ATTENTION, step, r, p, S);
                p = p < 0 ? 0 : S - 1;
            }
        }
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

/* ---- elementwise: silu_mul, silu, gelu, cast
 * ------------------------------------------------------ */

enum { ACT_SILU_MUL, ACT_SILU, ACT_GELU_ERF, ACT_GELU_TANH, ACT_CAST };

template <typename A, int K> __device__ __forceinline__ A act_f(A a, A b)
{
    if constexpr (K == ACT_SILU_MUL)
        return a / ((A)1 + exp(-a)) * b;
    else if constexpr (K == ACT_SILU)
        return a / ((A)1 + exp(-a));
    else if constexpr (K == ACT_GELU_ERF) /* 1 + erf(x/sqrt2) = erfc(-x/sqrt2): no cancellation */
        return (A)0.5 * a * erfc(-a * (A)0.7071067811865476);
    else if constexpr (K == ACT_GELU_TANH) /* (1 + tanh(u)) / 2 = 1 / (1 + exp(-2u)) */
        return a / ((A)1 + exp((A)-1.5957691216057308 * (a + (A)0.044715 * a * a * a)));
    else
        return a;
}

/* 8 elements per unit: 16 bytes of bf16/f16, two loads of f32, four of f64. */
template <typename T> __device__ __forceinline__ void ld8(const T *p, T (&v)[8])
{
#pragma unroll
    for (int k = 0; k < (int)sizeof(T) * 8 / 16; k++)
        reinterpret_cast<uint4 *>(v)[k] = __ldcs(reinterpret_cast<const uint4 *>(p) + k);
}
template <typename T> __device__ __forceinline__ void st8(T *p, const T (&v)[8])
{
#pragma unroll
    for (int k = 0; k < (int)sizeof(T) * 8 / 16; k++)
        reinterpret_cast<uint4 *>(p)[k] = reinterpret_cast<const uint4 *>(v)[k];
}

/* Units (8 elements) in flight per thread in the grid-stride loops below: as many 16-byte loads
 * per input as the copy floor (bench/cuda/copy_kernels.cuh: copy16<4>) keeps in flight, since at
 * one load per thread a cast of 197 MB ran at 1.45x the copy's time. */
template <typename T> __host__ __device__ constexpr int units_in_flight()
{
    return sizeof(T) <= 2 ? 4 : sizeof(T) == 4 ? 2 : 1;
}

/* swiglu: y[r, c] = silu(gu[r, c]) * gu[r, F + c], with silu_mul's arithmetic (act_f), so the
 * same bits; 8 elements a unit when F is a multiple of 8 and the rows start on 16 bytes. */
template <typename T>
__global__ void swiglu_kernel(const T *gu, T *y, long long n, long long F, int vec)
{
    using A = typename Acc<T>::A;
    constexpr int U = units_in_flight<T>();
    pdl_wait(); /* gu may be a predecessor's output */
    pdl_trigger();
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        const long long units = n / 8, Fu = F / 8;
        for (; u + (U - 1) * stride < units; u += U * stride) {
            alignas(16) T va[U][8];
            alignas(16) T vb[U][8];
#pragma unroll
            for (int j = 0; j < U; j++) {
                const long long w = u + j * stride, r = w < Fu ? 0 : row_of(w, Fu),
                                c = (w - r * Fu) * 8;
                ld8(gu + r * 2 * F + c, va[j]);
                ld8(gu + r * 2 * F + F + c, vb[j]);
            }
#pragma unroll
            for (int j = 0; j < U; j++) {
                alignas(16) T vy[8];
#pragma unroll
                for (int e = 0; e < 8; e++)
                    vy[e] =
                        from_acc<T>(act_f<A, ACT_SILU_MUL>(ld_a<A>(va[j][e]), ld_a<A>(vb[j][e])));
                st8(y + (u + j * stride) * 8, vy);
            }
        }
        for (; u < units; u += stride) {
            /* row 0 (a decode step's only row) without the division: the loads' addresses wait
             * for it */
            const long long r = u < Fu ? 0 : row_of(u, Fu), c = (u - r * Fu) * 8;
            alignas(16) T va[8];
            alignas(16) T vb[8];
            alignas(16) T vy[8];
            ld8(gu + r * 2 * F + c, va);
            ld8(gu + r * 2 * F + F + c, vb);
#pragma unroll
            for (int e = 0; e < 8; e++)
                vy[e] = from_acc<T>(act_f<A, ACT_SILU_MUL>(ld_a<A>(va[e]), ld_a<A>(vb[e])));
            st8(y + u * 8, vy);
        }
    } else {
        for (long long i = u; i < n; i += stride) {
            const long long r = i / F, c = i % F;
            y[i] = from_acc<T>(
                act_f<A, ACT_SILU_MUL>(ld_a<A>(gu[r * 2 * F + c]), ld_a<A>(gu[r * 2 * F + F + c])));
        }
    }
}

template <typename TI, typename TO, int K>
__global__ void act_kernel(const TI *a, const TI *b, TO *y, long long n, int vec)
{
    using A = typename Acc<TI>::A;
    constexpr int U = units_in_flight<TI>();
    pdl_wait(); /* a and b may be a predecessor's outputs */
    pdl_trigger();
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    auto apply = [](const TI(&va)[8], const TI(&vb)[8], TO(&vy)[8]) {
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const A x = ld_a<A>(va[e]);
            const A z = K == ACT_SILU_MUL ? ld_a<A>(vb[e]) : (A)0;
            vy[e] = from_acc<TO>(act_f<A, K>(x, z));
        }
    };
    if (vec) {
        const long long units = n / 8;
        for (; u + (U - 1) * stride < units; u += U * stride) {
            alignas(16) TI va[U][8];
            alignas(16) TI vb[U][8];
#pragma unroll
            for (int j = 0; j < U; j++) {
                ld8(a + (u + j * stride) * 8, va[j]);
                if (K == ACT_SILU_MUL)
                    ld8(b + (u + j * stride) * 8, vb[j]);
            }
#pragma unroll
            for (int j = 0; j < U; j++) {
                alignas(16) TO vy[8];
                apply(va[j], vb[j], vy);
                st8(y + (u + j * stride) * 8, vy);
            }
        }
        for (; u < units; u += stride) {
            alignas(16) TI va[8];
            alignas(16) TI vb[8];
            alignas(16) TO vy[8];
            ld8(a + u * 8, va);
            if (K == ACT_SILU_MUL)
                ld8(b + u * 8, vb);
            apply(va, vb, vy);
            st8(y + u * 8, vy);
        }
    } else {
        for (long long i = u; i < n; i += stride) {
            const A x = ld_a<A>(a[i]);
            const A z = K == ACT_SILU_MUL ? ld_a<A>(b[i]) : (A)0;
            y[i] = from_acc<TO>(act_f<A, K>(x, z));
        }
    }
}

/* A vector of B bytes, for loads and stores of that width. */
template <int B> struct VecOf;
template <> struct VecOf<16> {
    using V = uint4;
};
template <> struct VecOf<8> {
    using V = uint2;
};
template <> struct VecOf<4> {
    using V = unsigned;
};
template <> struct VecOf<2> {
    using V = unsigned short;
};

/* Elements of a cast unit: 16 bytes of the wider side, so that the loads and the stores of a warp
 * are each one contiguous run (8 bf16 into 8 f32 as two 16-byte stores a thread left every warp
 * store half-strided: 1.57x the copy at 197 MB). */
template <typename TI, typename TO> __host__ __device__ constexpr int cast_elems()
{
    return 16 / (int)(sizeof(TI) > sizeof(TO) ? sizeof(TI) : sizeof(TO));
}

/* Loads in flight per thread in cast_kernel's loop: 64 bytes of the input, as copy16<4> keeps
 * (a bf16 to f32 cast loads 8 bytes a unit: 4 of them held half the copy's bytes in flight), at
 * most 8. */
template <typename TI, typename TO> __host__ __device__ constexpr int cast_units()
{
    return 64 / (cast_elems<TI, TO>() * (int)sizeof(TI)) > 8
               ? 8
               : 64 / (cast_elems<TI, TO>() * (int)sizeof(TI));
}

/* Rounds as baton_convert does (core/dtype.h): f64 to bf16/f16 through f32. */
template <typename TI, typename TO>
__global__ void cast_kernel(const TI *x, TO *y, long long n, int vec)
{
    constexpr int U = cast_units<TI, TO>(), VE = cast_elems<TI, TO>();
    using VI = typename VecOf<VE *(int)sizeof(TI)>::V;
    using VO = typename VecOf<VE *(int)sizeof(TO)>::V;
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    auto cv = [](TI v) -> TO {
        if constexpr (sizeof(TI) == 8 && sizeof(TO) == 8)
            return v;
        else if constexpr (sizeof(TI) == 8)
            return from_f<TO>((float)v);
        else
            return from_f<TO>(to_f(v));
    };
    const VI *xv = reinterpret_cast<const VI *>(x);
    VO *yv = reinterpret_cast<VO *>(y);
    auto put = [&](long long w, const VI &in) {
        alignas(16) TI a[VE];
        alignas(16) TO b[VE];
        *reinterpret_cast<VI *>(a) = in;
#pragma unroll
        for (int e = 0; e < VE; e++)
            b[e] = cv(a[e]);
        yv[w] = *reinterpret_cast<const VO *>(b);
    };
    if (vec) {
        const long long units = n / VE;
        for (; u + (U - 1) * stride < units; u += U * stride) {
            VI v[U];
#pragma unroll
            for (int j = 0; j < U; j++)
                v[j] = __ldcs(xv + u + j * stride);
#pragma unroll
            for (int j = 0; j < U; j++)
                put(u + j * stride, v[j]);
        }
        for (; u < units; u += stride)
            put(u, __ldcs(xv + u));
    } else {
        for (long long i = u; i < n; i += stride)
            y[i] = cv(x[i]);
    }
}

/* ---- softmax ------------------------------------------------------------------------------------
 */

/* Max over the block (blockDim.x a multiple of 32); every thread gets it. */
template <typename A> __device__ __forceinline__ A block_max(A v, A *red)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const A t = __shfl_xor_sync(0xffffffffu, v, o);
        v = t > v ? t : v;
    }
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

/* Block per row; each thread adds its strided elements in order, then a fixed tree. The rows
 * that softmax_reg_kernel cannot hold in registers (or read with 16-byte loads). */
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

/* The row of a block of a C-block row (C == 1, or an x-cluster of C) and the vectors [lo, hi) of
 * its nv that the block takes: equal slices in rank order, the last ones shorter or empty. */
template <typename T> struct RowSlice {
    const T *x; /* the block's row of x and of y */
    T *y;
    long long lo, hi;
};
template <typename T>
__device__ __forceinline__ RowSlice<T> row_slice(const T *x, T *y, long long N, int C)
{
    const int rank = C > 1 ? (int)cg::this_cluster().block_rank() : 0;
    const long long row = blockIdx.x / (unsigned)C, nv = N / (16 / (long long)sizeof(T));
    const long long per = row_of(nv + C - 1, C), lo = min(nv, rank * per);
    return RowSlice<T>{x + row * N, y + row * N, lo, min(nv, lo + per)};
}

/* A row read once: C blocks a row (C == 1, or an x-cluster of C), each holding its slice of the
 * row in registers, VPT 16-byte vectors a thread (vector j of the slice at thread j % blockDim.x);
 * the slices' maxima and sums are combined through distributed shared memory in rank order, so
 * every block gets the same bits and the result is the same every run. The logits of a decode
 * step (128256) take 8 blocks of 1024 threads: one load round, where reading the row three times
 * in a strided loop took 7.6x the copy of its bytes. */
template <typename T, int VPT>
__global__ void __launch_bounds__(1024) softmax_reg_kernel(const T *x, T *y, long long N, int C)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T);
    __shared__ A red[32];
    __shared__ A slot[2];
    const RowSlice<T> sl = row_slice(x, y, N, C);
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    A v[VPT][E];
    A mx = -INFINITY;
    U16<T> raw[VPT]; /* every load in flight before the first is used */
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const long long j = sl.lo + (long long)k * blockDim.x + threadIdx.x;
        if (j < sl.hi)
            raw[k] = ld16_stream(sl.x + j * E);
    }
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const long long j = sl.lo + (long long)k * blockDim.x + threadIdx.x;
        if (j < sl.hi) {
#pragma unroll
            for (int e = 0; e < E; e++) {
                v[k][e] = ld_a<A>(raw[k].v[e]);
                mx = v[k][e] > mx ? v[k][e] : mx;
            }
        }
    }
    mx = block_max<A>(mx, red);
    const int lane = threadIdx.x & 31;
    if (C > 1) { /* lane q reads rank q's maximum: the ranks' loads in flight together */
        cg::cluster_group cluster = cg::this_cluster();
        if (threadIdx.x == 0)
            slot[0] = mx;
        cluster.sync();
        A m = lane < C ? *cluster.map_shared_rank(&slot[0], lane) : (A)-INFINITY;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const A t = __shfl_xor_sync(0xffffffffu, m, o);
            m = t > m ? t : m;
        }
        mx = m;
    }
    A sum = 0;
#pragma unroll
    for (int k = 0; k < VPT; k++)
        if (sl.lo + (long long)k * blockDim.x + threadIdx.x < sl.hi)
#pragma unroll
            for (int e = 0; e < E; e++) {
                v[k][e] = exp(v[k][e] - mx);
                sum += v[k][e];
            }
    sum = block_sum<A>(sum, red);
    if (C > 1) /* the ranks' sums added in one fixed tree (cluster_sum): the same bits in all */
        sum = cluster_sum<A>(sum, &slot[1], C);
    const A inv = (A)1 / sum;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const long long j = sl.lo + (long long)k * blockDim.x + threadIdx.x;
        if (j < sl.hi) {
            U16<T> u;
#pragma unroll
            for (int e = 0; e < E; e++)
                u.v[e] = from_acc<T>(v[k][e] * inv);
            st16(sl.y + j * E, u);
        }
    }
    if (C > 1)
        cluster_exit_barrier(); /* peers may still read this block's slots */
}

/* Vectors a thread of softmax_smem_kernel holds in registers: 16 values (4 f32 vectors, 2 of the
 * others), so that 1024 threads fit one block a SM without spilling. */
template <typename T> __host__ __device__ constexpr int smx_reg_vpt()
{
    return sizeof(T) == 4 ? 4 : 2;
}

/* One vector into a running maximum m and a sum s of exp(x - m), s rescaled when m grows. */
template <typename A, typename T>
__device__ __forceinline__ void online_take(const U16<T> &u, A &m, A &s)
{
    constexpr int E = U16<T>::E;
    A v[E], vm = -INFINITY;
#pragma unroll
    for (int e = 0; e < E; e++) {
        v[e] = ld_a<A>(u.v[e]);
        vm = v[e] > vm ? v[e] : vm;
    }
    if (vm > m) { /* rescale the sum to the new maximum (0 while it was -inf) */
        s *= exp(m - vm);
        m = vm;
    }
    if (m != -INFINITY) /* all -inf so far: nothing to add (exp(-inf - -inf) is NaN) */
#pragma unroll
        for (int e = 0; e < E; e++)
            s += exp(v[e] - m);
}

/* Maximum over the warp; every lane gets it. */
template <typename A> __device__ __forceinline__ A warp_max(A v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const A t = __shfl_xor_sync(0xffffffffu, v, o);
        v = t > v ? t : v;
    }
    return v;
}

/* The row's maximum mx and sum of exp(x - mx) over a block and the C (<= 8) blocks of its cluster
 * (C == 1: the block alone), from each thread's running maximum m and sum s of exp(x - m): each
 * warp folds its lanes' pairs, lane 0 puts the warp's in its slot, one barrier (the cluster's, or
 * the block's), then every warp folds all C x 32 slots in one fixed tree (lane q takes slot q of
 * each rank in rank order), so every block of the cluster gets the same bits. One barrier between
 * the last load and the first store, where the block's maximum, its sum and the cluster's pairs
 * took five. */
template <typename A>
__device__ __forceinline__ void row_max_sum(A (*slot)[2], int C, A m, A s, A &mx, A &sum)
{
    const A wm = warp_max<A>(m);
    const A ws = warp_sum<A>(m == -INFINITY ? (A)0 : s * exp(m - wm));
    const int lane = threadIdx.x & 31, nw = (int)(blockDim.x >> 5);
    if (lane == 0) {
        slot[threadIdx.x >> 5][0] = wm;
        slot[threadIdx.x >> 5][1] = ws;
    }
    A qm[8], qs[8];
    if (C > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();
#pragma unroll
        for (int r = 0; r < 8; r++) {
            qm[r] = r < C && lane < nw ? *cluster.map_shared_rank(&slot[lane][0], r) : -INFINITY;
            qs[r] = r < C && lane < nw ? *cluster.map_shared_rank(&slot[lane][1], r) : (A)0;
        }
    } else {
        __syncthreads();
        qm[0] = lane < nw ? slot[lane][0] : -INFINITY;
        qs[0] = lane < nw ? slot[lane][1] : (A)0;
#pragma unroll
        for (int r = 1; r < 8; r++)
            qm[r] = -INFINITY, qs[r] = 0;
    }
    A lm = qm[0];
#pragma unroll
    for (int r = 1; r < 8; r++)
        lm = qm[r] > lm ? qm[r] : lm;
    mx = warp_max<A>(lm);
    A t = 0;
#pragma unroll
    for (int r = 0; r < 8; r++)
        t += qm[r] == -INFINITY ? (A)0 : qs[r] * exp(qm[r] - mx);
    sum = warp_sum<A>(t);
}

/* Vectors of a softmax_smem_kernel thread's share of shared memory, at most (1024 threads). */
#define SMS_KMAX 16

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
__global__ void __launch_bounds__(1024, 1) softmax_smem_kernel(const T *x, T *y, long long N, int C)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T), VPT = smx_reg_vpt<T>();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const U16<T> *sh = reinterpret_cast<const U16<T> *>(smem_raw);
    __shared__ A slot[32][2]; /* a warp's maximum and sum */
    const RowSlice<T> sl = row_slice(x, y, N, C);
    const int tid = threadIdx.x, nt = blockDim.x;
    const long long rlo = sl.lo, rhi = min(sl.hi, sl.lo + (long long)VPT * nt);
    const int ns = (int)max(0LL, sl.hi - rhi); /* vectors in shared memory, from rhi */
    pdl_wait();                                /* x may be a predecessor's output */
    pdl_trigger();
    const unsigned long long pol = l2_evict_first(); /* read once */
    U16<T> raw[VPT];
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const long long j = rlo + (long long)k * nt + tid;
        if (j < rhi)
            raw[k] = ld16_stream(sl.x + j * E);
    }
    /* The warp barrier keeps ptxas from sinking the registers' loads past the copies (it did:
     * each thread then waited for its registers, the last of its bytes, before its first sum, and
     * the read's exps came after the read: 23.9 us on the 64 rows, 1.26x the copy, against 22.0
     * with the loads first). */
    __syncwarp();
#pragma unroll
    for (int k = 0; k < SMS_KMAX; k++) { /* empty groups past the thread's share */
        const int j = tid + k * nt;
        if (j < ns)
            cp_async16_pol(smem_raw + (size_t)j * 16, sl.x + (rhi + j) * E, pol);
        cp_commit();
    }
    A m = -INFINITY, sum = 0;
#pragma unroll
    for (int k = 0; k < VPT; k++)
        if (rlo + (long long)k * nt + tid < rhi)
            online_take<A>(raw[k], m, sum);
    sms_each_group<0, SMS_KMAX>([&](int k) {
        const int j = tid + k * nt;
        if (j < ns)
            online_take<A>(sh[j], m, sum);
    });
    A mx, tot;
    row_max_sum<A>(slot, C, m, sum, mx, tot);
    const A inv = (A)1 / tot;
    auto put = [&](const U16<T> &u, long long j) {
        U16<T> o;
#pragma unroll
        for (int e = 0; e < E; e++)
            o.v[e] = from_acc<T>(exp(ld_a<A>(u.v[e]) - mx) * inv);
        __stcs(reinterpret_cast<uint4 *>(sl.y + j * E), *reinterpret_cast<const uint4 *>(o.v));
    };
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const long long j = rlo + (long long)k * nt + tid;
        if (j < rhi)
            put(raw[k], j);
    }
    for (int j = tid; j < ns; j += nt) /* the thread's own vectors: landed, read by no other */
        put(sh[j], rhi + j);
    if (C > 1)
        cluster_exit_barrier(); /* peers may still read this block's slots */
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
 * slice at thread j % blockDim.x). A block's maximum m and sum s of exp(x - m) go to the start of
 * the row's output (2 G values of A, rank order, then a count; every rank's own stores are
 * elsewhere); after a grid barrier every block combines the G pairs in one fixed tree, so every
 * block has the same bits and the result is the same every run: max M, S = sum s_q exp(m_q - M),
 * y = exp(x - M) / S. Each block then counts itself as having read the pairs (a relaxed atomic);
 * only the blocks whose slices hold the pairs' bytes wait for all G before they store those
 * (a second grid barrier made every block wait for its own stores to land first). */
template <typename T>
__global__ void __launch_bounds__(SMG_THREADS)
    softmax_grid_kernel(const T *x, T *y, long long N, int G)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T);
    __shared__ A red[32];
    const int tid = threadIdx.x, rank = (int)(blockIdx.x % (unsigned)G);
    const long long row = blockIdx.x / (unsigned)G, nv = N / E;
    const long long per = row_of(nv + G - 1, G), lo = min(nv, rank * per), hi = min(nv, lo + per);
    const T *xr = x + row * N;
    T *yr = y + row * N;
    A *pairs = reinterpret_cast<A *>(yr);
    unsigned *count = reinterpret_cast<unsigned *>(pairs + 2 * G);
    /* vectors below `held` overlap the pairs and the count: stored last */
    const long long held = smg_held<A>(G);
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    U16<T> raw[SMG_VPT];
#pragma unroll
    for (int k = 0; k < SMG_VPT; k++) {
        const long long j = lo + (long long)k * SMG_THREADS + tid;
        if (j < hi)
            raw[k] = ld16_stream(xr + j * E);
    }
    A mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < SMG_VPT; k++)
        if (lo + (long long)k * SMG_THREADS + tid < hi)
#pragma unroll
            for (int e = 0; e < E; e++) {
                const A t = ld_a<A>(raw[k].v[e]);
                mx = t > mx ? t : mx;
            }
    mx = block_max<A>(mx, red);
    A sum = 0;
    if (mx != -INFINITY) /* an empty or all -inf slice adds nothing (exp(-inf - -inf) is NaN) */
#pragma unroll
        for (int k = 0; k < SMG_VPT; k++)
            if (lo + (long long)k * SMG_THREADS + tid < hi)
#pragma unroll
                for (int e = 0; e < E; e++)
                    sum += exp(ld_a<A>(raw[k].v[e]) - mx);
    sum = block_sum<A>(sum, red);
    if (tid == 0) {
        pairs[2 * rank] = mx;
        pairs[2 * rank + 1] = sum;
        if (rank == 0)
            *count = 0;
    }
    cg::this_grid().sync();
    /* thread q takes rank q's pair (G <= blockDim.x): one fixed tree in every block */
    const A mq = tid < G ? __ldcg(pairs + 2 * tid) : (A)-INFINITY;
    const A sq = tid < G ? __ldcg(pairs + 2 * tid + 1) : (A)0;
    const A M = block_max<A>(mq, red);
    const A S = block_sum<A>(mq == -INFINITY ? (A)0 : sq * exp(mq - M), red);
    /* block_sum's barrier: every thread's reads of the pairs are done */
    if (tid == 0)
        atomicAdd(count, 1u);
    const A inv = (A)1 / S;
#pragma unroll
    for (int k = 0; k < SMG_VPT; k++) {
        const long long j = lo + (long long)k * SMG_THREADS + tid;
        if (j < hi && j >= held) {
            U16<T> u;
#pragma unroll
            for (int e = 0; e < E; e++)
                u.v[e] = from_acc<T>(exp(ld_a<A>(raw[k].v[e]) - M) * inv);
            __stcs(reinterpret_cast<uint4 *>(yr + j * E), *reinterpret_cast<const uint4 *>(u.v));
        }
    }
    if (lo < held) { /* block-uniform: this slice holds some of the pairs' bytes */
        if (tid == 0)
            while (ld_acquire(count) < (unsigned)G) {
            }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SMG_VPT; k++) {
            const long long j = lo + (long long)k * SMG_THREADS + tid;
            if (j < hi && j < held) {
                U16<T> u;
#pragma unroll
                for (int e = 0; e < E; e++)
                    u.v[e] = from_acc<T>(exp(ld_a<A>(raw[k].v[e]) - M) * inv);
                st16(yr + j * E, u);
            }
        }
    }
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
template <typename T>
__global__ void __launch_bounds__(SMX_THREADS, 3)
    softmax_l2_kernel(const T *x, T *y, long long N, int C)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T), SMX_U = smx_u<T>();
    __shared__ A slot[32][2]; /* a warp's maximum and sum */
    const RowSlice<T> sl = row_slice(x, y, N, C);
    const long long step = (long long)blockDim.x * SMX_U;
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    A m = -INFINITY, sum = 0;
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
            online_take<A>(raw[k], m, sum);
        }
    }
    A mx, tot;
    row_max_sum<A>(slot, C, m, sum, mx, tot);
    const A inv = (A)1 / tot;
    const unsigned long long last = l2_evict_first();
    for (long long j0 = sl.lo + threadIdx.x; j0 < sl.hi; j0 += step) {
        U16<T> raw[SMX_U];
#pragma unroll
        for (int k = 0; k < SMX_U; k++)
            if (j0 + (long long)k * blockDim.x < sl.hi)
                *reinterpret_cast<uint4 *>(raw[k].v) =
                    ld16_last(sl.x + (j0 + (long long)k * blockDim.x) * E, last);
#pragma unroll
        for (int k = 0; k < SMX_U; k++) {
            const long long j = j0 + (long long)k * blockDim.x;
            if (j >= sl.hi)
                break;
            U16<T> u;
#pragma unroll
            for (int e = 0; e < E; e++)
                u.v[e] = from_acc<T>(exp(ld_a<A>(raw[k].v[e]) - mx) * inv);
            __stcs(reinterpret_cast<uint4 *>(sl.y + j * E), *reinterpret_cast<const uint4 *>(u.v));
        }
    }
    if (C > 1)
        cluster_exit_barrier(); /* peers may still read this block's slots */
}

/* ---- sample -------------------------------------------------------------------------------------
 * The CPU's algorithm (kernels/cpu/decoder.c): order keys, weights in 2^-40 fixed point (integer
 * sums: exact, so atomics in shared memory still give the same bits), radix selection of the top_k
 * and top_p cuts, then the first kept index, ascending, whose running weight exceeds u * total.
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
    return (unsigned long long)llrint((double)__expf((logit_f(x, i) - mx) * inv_t) *
                                      1099511627776.0);
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

/* Exclusive scan of one value per thread over the block (fixed order); *total gets the sum. */
__device__ unsigned long long block_excl_scan(unsigned long long v, unsigned long long *sh,
                                              unsigned long long *total)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    unsigned long long inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long t = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o)
            inc += t;
    }
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
 * zeroing. */

#define SMC_C        8
#define SMC_BINS     2048
#define SMC_FIXED    (2 * SMC_BINS * 4 * sizeof(unsigned)) /* counts and 3 mass limbs, x2 */
#define SMC_SMEM_MAX (200 * 1024)
#define SMC_KMAX     1024 /* top_k up to this: the members finish in one block (below) */

__device__ __forceinline__ float key_logit(unsigned k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* The CPU's weight (weight_of in kernels/cpu/decoder.c, sample_kernel's weight_at) from a key. */
__device__ __forceinline__ unsigned long long key_weight(unsigned k, float mx, float inv_t)
{
    return (unsigned long long)llrint((double)__expf((key_logit(k) - mx) * inv_t) *
                                      1099511627776.0);
}

/* Per-thread contiguous ranges of the block's slice of n keys (index order across threads). */
__device__ __forceinline__ void my_range(long long n, long long *b, long long *e)
{
    const long long rp = (n + blockDim.x - 1) / blockDim.x;
    *b = min(n, (long long)threadIdx.x * rp);
    *e = min(n, *b + rp);
}

/* top_k <= SMC_KMAX: after the top_k cut c, the members (at most top_k) gather into rank 0's
 * shared memory (any order), the other blocks leave, and rank 0 finishes alone with no cluster
 * barrier: each member's place in the order (key descending, index ascending) by counting the
 * members before it, the top_p cut by a scan of the weights in that order, and the draw by a scan
 * in index order of the kept ones: the definition itself, in exact integers, so the token of the
 * radix path. The buffers reuse the histograms' space (the top_k passes' counts were last read
 * before the cut's cluster barrier; their masses are unused). */
__device__ __noinline__ void sample_top_k_members(const Cut c, const unsigned *keys, long long n,
                                                  long long lo, float mx, float inv_t, double top_p,
                                                  unsigned long long seed, long long step,
                                                  long long row, long long *out,
                                                  unsigned char *smem_raw,
                                                  unsigned long long *scan_sh, unsigned *s_members)
{
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank(), tid = threadIdx.x, lane = tid & 31;
    unsigned *gkey = reinterpret_cast<unsigned *>(smem_raw);
    long long *gidx = reinterpret_cast<long long *>(smem_raw + SMC_KMAX * sizeof(unsigned));
    unsigned long long *ow = reinterpret_cast<unsigned long long *>(gidx + SMC_KMAX); /* order */
    int *orank = reinterpret_cast<int *>(ow + SMC_KMAX);
    unsigned long long *iw = reinterpret_cast<unsigned long long *>(orank + SMC_KMAX); /* index */
    long long *ii = reinterpret_cast<long long *>(iw + SMC_KMAX);
    unsigned *rkey = cluster.map_shared_rank(gkey, 0),
             *rcount = cluster.map_shared_rank(s_members, 0);
    long long *ridx = cluster.map_shared_rank(gidx, 0);
    for (long long j0 = 0; j0 < n; j0 += blockDim.x) { /* warp-uniform trip count */
        const long long j = j0 + tid;
        const unsigned k = j < n ? keys[j] : 0u;
        const bool m = j < n && is_member(c, k, lo + j);
        const unsigned bal = __ballot_sync(0xffffffffu, m);
        unsigned base = 0;
        if (lane == 0 && bal)
            base = atomicAdd(rcount, (unsigned)__popc(bal));
        base = __shfl_sync(0xffffffffu, base, 0);
        if (m) {
            const unsigned slot = base + __popc(bal & ((1u << lane) - 1u));
            rkey[slot] = k;
            ridx[slot] = lo + j;
        }
    }
    cluster.sync();
    if (rank != 0)
        return;
    const int m = (int)*s_members;
    /* the order: member a's place is the count of members before it */
    unsigned long long wa = 0;
    long long ia = 0;
    int ra = 0;
    if (tid < m) {
        const unsigned ka = gkey[tid];
        ia = gidx[tid];
        wa = key_weight(ka, mx, inv_t);
        for (int b = 0; b < m; b++) {
            const unsigned kb = gkey[b];
            ra += kb > ka || (kb == ka && gidx[b] < ia);
        }
        ow[ra] = wa;
        orank[tid] = ra;
    }
    __syncthreads(); /* every thread has read the count: it becomes the kept count */
    unsigned long long tot;
    const unsigned long long v = tid < m ? ow[tid] : 0ull;
    const unsigned long long excl = block_excl_scan(v, scan_sh, &tot);
    if (top_p < 1) {
        /* the shortest prefix of the order whose mass reaches ceil(top_p * total) */
        const unsigned long long target = (unsigned long long)ceil(top_p * (double)tot);
        if (tid < m && excl < target && excl + v >= target)
            *s_members = (unsigned)tid + 1;
        __syncthreads();
    }
    const int kept = (int)*s_members;
    /* the kept members in index order: each one's place is the count of kept ones before it */
    if (tid < m && ra < kept) {
        int p = 0;
        for (int b = 0; b < m; b++)
            p += orank[b] < kept && gidx[b] < ia;
        iw[p] = wa;
        ii[p] = ia;
    }
    __syncthreads();
    const unsigned long long v2 = tid < kept ? iw[tid] : 0ull;
    const unsigned long long before = block_excl_scan(v2, scan_sh, &tot);
    unsigned long long target = (unsigned long long)(dec_uniform(seed, step, row) * (double)tot);
    if (target >= tot)
        target = tot - 1;
    if (tid < kept && before <= target && before + v2 > target)
        out[row] = ii[tid];
}

template <typename T>
__global__ void __launch_bounds__(SMP_THREADS)
    sample_cluster_kernel(const T *logits, const void *stepp, int step64, long long *out,
                          long long V, long long per, int vec, double temperature, int top_k,
                          double top_p, unsigned long long seed)
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
    __shared__ long long s_need;
    __shared__ Cut s_cut[2];
    __shared__ unsigned s_members;

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
     * the exclusive scan's result */
    auto pass = [&](unsigned prefix, unsigned mask, int shift, unsigned dm, bool with_mass,
                    unsigned long long g[2], unsigned long long gm[2], unsigned long long *above_c,
                    unsigned long long *above_m) {
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
                /* one atomic per distinct bin of the warp: the lanes of a bin (peers, each group
                 * with its own mask) add their counts and limbs first (integer sums: exact) */
                const unsigned b = (k >> shift) & dm;
                const unsigned peers = __match_any_sync(__activemask(), b);
                const bool leader = (int)(threadIdx.x & 31) == __ffs(peers) - 1;
                if (leader)
                    atomicAdd(&h[b], (unsigned)__popc(peers));
                if (with_mass) {
                    const unsigned long long w = key_weight(k, mx, inv_t);
                    const unsigned l0 = __reduce_add_sync(peers, (unsigned)(w & 0x3fff));
                    const unsigned l1 = __reduce_add_sync(peers, (unsigned)(w >> 14 & 0x3fff));
                    const unsigned l2 = __reduce_add_sync(peers, (unsigned)(w >> 28));
                    if (leader) {
                        if (l0)
                            atomicAdd(&hm[0][b], l0);
                        if (l1)
                            atomicAdd(&hm[1][b], l1);
                        if (l2)
                            atomicAdd(&hm[2][b], l2);
                    }
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
            *above_m = block_excl_scan(gm[0] + gm[1], scan_sh, &tot);
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

    if (top_k > 0 && top_k < V) {
        unsigned prefix = 0, mask = 0;
        long long need = top_k;
        int b = 0;
        for (int ps = 0; ps < 3; ps++) {
            const int shift = smp_shift(ps);
            const unsigned dm = smp_digit_mask(ps);
            unsigned long long g[2], gm[2], above, am;
            if (tid == 0) {
                s_b = 0; /* not reached: the matching keys are at least need */
                s_need = need;
            }
            pass(prefix, mask, shift, dm, false, g, gm, &above, &am);
            /* the largest bin whose count with those above reaches need */
            for (int s2 = 0; s2 < 2; s2++) {
                const int bb = (int)dm - 2 * tid - s2;
                const unsigned long long gt = above + (s2 ? g[0] : 0);
                if (bb >= 0 && gt < (unsigned long long)need &&
                    gt + g[s2] >= (unsigned long long)need) {
                    s_b = bb;
                    s_need = need - (long long)gt;
                }
            }
            __syncthreads();
            b = s_b;
            need = s_need;
            prefix |= (unsigned)b << shift;
            mask |= dm << shift;
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
        if (top_k <= SMC_KMAX) {
            sample_top_k_members(c, keys, n, lo, mx, inv_t, top_p, seed, step, row, out, smem_raw,
                                 scan_sh, &s_members);
            return; /* no block reads another's shared memory after the members' gather */
        }
    }

    unsigned long long before_r;
    unsigned long long total = member_mass(0, &before_r);

    if (top_p < 1) {
        const unsigned long long target = (unsigned long long)ceil(top_p * (double)total);
        unsigned prefix = 0, mask = 0;
        unsigned long long before = 0;
        int b = 0;
        for (int ps = 0; ps < 3; ps++) {
            const int shift = smp_shift(ps);
            const unsigned dm = smp_digit_mask(ps);
            unsigned long long g[2], gm[2], above_c, above_m;
            if (tid == 0) {
                s_b = -1;
                s_lowest = 0x7fffffff;
            }
            pass(prefix, mask, shift, dm, true, g, gm, &above_c, &above_m);
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
                if ((int)dm - 2 * tid - s2 == b)
                    s_before = before + above_m + (s2 ? gm[0] : 0);
            __syncthreads();
            before = s_before;
            prefix |= (unsigned)b << shift;
            mask |= dm << shift;
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

/* ---- host side
 * ------------------------------------------------------------------------------------ */

/* The call's descriptor and shapes: kept from prepare (ctx->prepared, baton__dec_prepare) while
 * they still hold, else read and checked now. */
#define DEC_READ(op, nbuf)                                                                         \
    baton_decoder_desc d;                                                                          \
    dec_shape s;                                                                                   \
    int rc = baton__dec_call_decide(ctx, op, buffers, nbuf, opaque, len, &d, &s);                  \
    if (rc)                                                                                        \
    return rc

/* Each op's prepare hook (core/tune.h): its call read once, for DEC_READ. */
#define DEC_PREPARE(fn, op, nbuf)                                                                  \
    extern "C" int baton__kcuda_##fn##_prepare(const baton_exec_ctx *ctx, void **buffers,          \
                                               const char *opaque, size_t len, void **state)       \
    {                                                                                              \
        return baton__dec_prepare(ctx, op, buffers, nbuf, opaque, len, state);                     \
    }
DEC_PREPARE(embedding, DEC_EMBEDDING, 3)
DEC_PREPARE(rope, DEC_ROPE, 4)
DEC_PREPARE(kv_cache_update, DEC_KV_CACHE_UPDATE, 4)
DEC_PREPARE(attention, DEC_ATTENTION, 5)
DEC_PREPARE(silu_mul, DEC_SILU_MUL, 3)
DEC_PREPARE(silu, DEC_SILU, 2)
DEC_PREPARE(gelu, DEC_GELU, 2)
DEC_PREPARE(softmax, DEC_SOFTMAX, 2)
DEC_PREPARE(cast, DEC_CAST, 2)
DEC_PREPARE(sample, DEC_SAMPLE, 3)
DEC_PREPARE(swiglu, DEC_SWIGLU, 2)
DEC_PREPARE(rope_cache_update, DEC_ROPE_CACHE_UPDATE, 8)

/* The grid of a grid-stride kernel over `work` items, a thread each: one block per `threads`
 * items up to one full wave of the kernel's resident blocks (a second partial wave would leave
 * SMs idle at its end). */
static int wave_grid(const baton_exec_ctx *ctx, const void *kernel, long long work, int threads)
{
    int per_sm = 0;
    if (occupancy(ctx, kernel, threads, 0, &per_sm) != cudaSuccess || per_sm < 1) {
        (void)cudaGetLastError();
        per_sm = 2048 / threads;
    }
    long long b = (work + threads - 1) / threads, cap = (long long)per_sm * sm_count(ctx);
    return (int)(b < 1 ? 1 : b > cap ? cap : b);
}

/* embedding_kernel for ids of type I: a kernel per vector copy and chunk count one or more. */
template <typename I>
static int embedding_launch(const baton_exec_ctx *ctx, void **buffers, const dec_shape &s, bool vec,
                            long long row_bytes, long long chunks, long long grid, int threads)
{
    const auto kern =
        vec ? (chunks == 1 ? embedding_kernel<I, true, true> : embedding_kernel<I, true, false>)
            : (chunks == 1 ? embedding_kernel<I, false, true> : embedding_kernel<I, false, false>);
    return launch(ctx, "embedding", kern, (unsigned)grid, threads, 0, 1, (const I *)buffers[0],
                  (const char *)buffers[1], (char *)buffers[2], (long long)s.rows, (long long)s.V,
                  row_bytes, chunks, ctx->step_index);
}

extern "C" int baton__kcuda_embedding(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                      size_t len)
{
    DEC_READ(DEC_EMBEDDING, 3);
    const long long row_bytes = s.F * (long long)baton_dtype_size(s.x_dt);
    const bool vec = row_bytes % 16 == 0 && al16(buffers[1]) && al16(buffers[2]);
    const int threads = 256;
    const long long chunks = (row_bytes + threads * 16LL - 1) / (threads * 16LL);
    const long long grid = s.rows * chunks;
    if (grid > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "embedding: %lld rows is too many for one launch",
                               (long long)s.rows);
    return s.idx_dt == BATON_DTYPE_I32
               ? embedding_launch<int>(ctx, buffers, s, vec, row_bytes, chunks, grid, threads)
               : embedding_launch<long long>(ctx, buffers, s, vec, row_bytes, chunks, grid,
                                             threads);
}

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

/* Launches rope over all rows' units: 16-byte units where every part's rows allow them; where
 * the units fill fewer than a wave of 64-thread blocks (a decode step), rope_decode_kernel's
 * blocks of one part of one row (rope_kernel's 64-thread blocks for units of one element), else a
 * wave of rope_kernel's 256-thread blocks, ROPE_U units a thread at a time. */
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
    if (grid > sms) {
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

template <typename T>
static int rope_typed(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                      const dec_shape &s)
{
    constexpr int E = 16 / (int)sizeof(T);
    const int il = (d.flags & DEC_FLAG_INTERLEAVED) != 0, half = d.head_dim / 2;
    const bool vec =
        al16(b[0]) && al16(b[3]) && (il ? d.head_dim % E == 0 && E % 2 == 0 : half % E == 0);
    RopeArgs a;
    memset(&a, 0, sizeof a);
    a.part[0] = RopePart{b[0], b[3], (long long)s.F, (long long)s.F, (long long)s.F, 0LL, 1};
    a.nparts = 1;
    a.pos = b[1];
    a.pos64 = s.idx_dt == BATON_DTYPE_I64;
    a.inv_freq = (const float *)b[2];
    a.Dh = (int)d.head_dim;
    a.interleaved = il;
    a.scale = d.scale;
    a.step = ctx->step_index;
    return rope_launch<T>(ctx, "rope", a, (long long)s.rows, vec);
}

/* rope_cache_update: rope of qkv's q part into q, of its k part into k_cache at the positions,
 * and its v part copied into v_cache: the rope kernel's arithmetic, so the bits of rope then
 * kv_cache_update, in one launch and no intermediate tensor. */
template <typename T>
static int rope_cache_typed(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                            const dec_shape &s)
{
    constexpr int E = 16 / (int)sizeof(T);
    const int il = (d.flags & DEC_FLAG_INTERLEAVED) != 0, half = d.head_dim / 2;
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
                     (s.QKV * (long long)esz) % 16 == 0 &&
                     (il ? d.head_dim % E == 0 && E % 2 == 0 : half % E == 0);
    RopeArgs a;
    memset(&a, 0, sizeof a);
    a.part[0] = RopePart{qkv, q, (long long)s.F, (long long)s.QKV, (long long)s.F, 0LL, 1};
    a.part[1] = RopePart{qkv + s.F,      kc, (long long)s.KF, (long long)s.QKV, (long long)s.KF,
                         (long long)s.S, 1};
    a.part[2] = RopePart{qkv + s.F + s.KF, vc, (long long)s.KF, (long long)s.QKV, (long long)s.KF,
                         (long long)s.S,   0};
    a.nparts = 3;
    a.pos = b[1];
    a.pos64 = s.idx_dt == BATON_DTYPE_I64;
    a.inv_freq = (const float *)b[2];
    a.Dh = (int)d.head_dim;
    a.interleaved = il;
    a.scale = d.scale;
    a.step = ctx->step_index;
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

extern "C" int baton__kcuda_kv_cache_update(const baton_exec_ctx *ctx, void **buffers,
                                            const char *opaque, size_t len)
{
    DEC_READ(DEC_KV_CACHE_UPDATE, 4);
    const long long row_bytes = s.F * (long long)baton_dtype_size(s.x_dt);
    if (buffers[3] != buffers[0]) { /* not in place: carry the cache over first */
        cudaError_t e = cudaMemcpyAsync(buffers[3], buffers[0], (size_t)(row_bytes * s.S),
                                        cudaMemcpyDeviceToDevice, (cudaStream_t)ctx->stream);
        if (e != cudaSuccess)
            return baton__ctx_fail(ctx, BATON_ECUDA, "kv_cache_update: cudaMemcpyAsync failed: %s",
                                   cudaGetErrorString(e));
    }
    const int vec = row_bytes % 16 == 0 && al16(buffers[1]) && al16(buffers[3]);
    const long long vecs = s.rows * (row_bytes / 16);
    const int threads = vec ? (int)(vecs >= 256 ? 256 : (vecs + 31) / 32 * 32) : 256;
    const long long chunks = (row_bytes + threads * 16LL - 1) / (threads * 16LL);
    const long long grid = !vec ? s.rows * chunks
                           : vecs == 0
                               ? 0
                               : (s.idx_dt == BATON_DTYPE_I32
                                      ? wave_grid(ctx, (const void *)kv_update_kernel<int>,
                                                  (vecs + KV_U - 1) / KV_U, threads)
                                      : wave_grid(ctx, (const void *)kv_update_kernel<long long>,
                                                  (vecs + KV_U - 1) / KV_U, threads));
    if (grid == 0)
        return 0;
    if (grid > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "kv_cache_update: too many rows for one launch");
    if (s.idx_dt == BATON_DTYPE_I32)
        return launch(ctx, "kv_cache_update", kv_update_kernel<int>, (unsigned)grid, threads, 0, 1,
                      (char *)buffers[3], (const char *)buffers[1], (const int *)buffers[2],
                      (long long)s.rows, (long long)s.S, row_bytes, chunks, vec, ctx->step_index,
                      row_bytes, (int)DEC_KV_CACHE_UPDATE);
    return launch(ctx, "kv_cache_update", kv_update_kernel<long long>, (unsigned)grid, threads, 0,
                  1, (char *)buffers[3], (const char *)buffers[1], (const long long *)buffers[2],
                  (long long)s.rows, (long long)s.S, row_bytes, chunks, vec, ctx->step_index,
                  row_bytes, (int)DEC_KV_CACHE_UPDATE);
}

/* Knobs for timing the decode variants against each other (bench_decoder, one setting per
 * process; docs/benchmarks.md): BATON_ATTN_DECODE=simt takes the CUDA-core kernel
 * (attn_split_kernel) for bf16/f16 too, BATON_ATTN_CLUSTER=C (1 to 16) fixes the cluster
 * size of either, BATON_ATTN_STAGES=3, 4 or 6 the stages per warp of the tensor-core kernel at
 * head_dim 64 (6 by default), BATON_ATTN_PREFETCH=n (0 to 16, 0 by default) has its warps ask tile
 * i + n into L2 as they copy tile i; launched with PDL, BATON_ATTN_EARLY=n (0 to 64, 4 by
 * default) has each warp ask its first n tiles into L2 before the wait and BATON_ATTN_SPEC=1
 * starts the ring on the positions' hint (0 by default); BATON_ATTN_VERBOSE=1 prints each
 * configuration the first time it is launched (stderr). The defaults are what
 * docs/decisions/0012 measured fastest. Read once per process; the results do not depend on them
 * beyond rounding (the cluster size changes the order of the merge; the stages, prefetches and
 * the hint change nothing). */
struct AttEnv {
    int simt, cluster, stages, verbose, prefetch, early, spec;
};

static const AttEnv &att_env()
{
    static const AttEnv e = [] {
        AttEnv v = {0, 0, 0, 0, 0, 4, 0};
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

template <typename T, int DH, int P>
static const AttFit &attn_mma_fit(const baton_exec_ctx *ctx, long long clusters)
{
    using L = AttMma<DH, P>;
    auto kern = attn_mma_kernel<T, DH, P>;
    static AttFit fit[KCUDA_MAX_DEVICES + 1]; /* the last: a device out of range, never kept */
    static std::atomic<int> asked[KCUDA_MAX_DEVICES];
    const int dev = device_of(ctx);
    const bool known = dev >= 0 && dev < KCUDA_MAX_DEVICES;
    AttFit &f = fit[known ? dev : KCUDA_MAX_DEVICES];
    if (known && asked[dev].load(std::memory_order_acquire))
        return f;
    /* Asked once, maybe while the caller's stream captures a graph: the thread's capture mode is
     * relaxed around the queries (they enqueue nothing), as the runtime allows for such calls.
     * Remembered even when a query fails (as 0): the cluster size decides the order of the merge,
     * so every later call of the process must choose as the first did. */
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    const bool swapped = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
    const int pr =
        prepare(kern, ctx, "attention", 16, clusters * 16, L::THREADS, L::SMEM, L::SMEM, true);
    AttFit got;
    memset(&got, 0, sizeof got);
    for (int c = 9; c <= 16 && pr == 0; c++)
        if (max_active_clusters((const void *)kern, (unsigned)(clusters * c), L::THREADS, L::SMEM,
                                c, ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0,
                                &got.n[c]) != cudaSuccess) {
            (void)cudaGetLastError();
            got.n[c] = 0;
        }
    if (swapped)
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (pr != 0)
        (void)cudaGetLastError();
    f = got;
    if (known)
        asked[dev].store(1, std::memory_order_release);
    if (att_env().verbose)
        fprintf(stderr,
                "attention: clusters of 16..9 blocks of %d threads, %d KB each, that fit at once: "
                "%d %d %d %d %d %d %d %d\n",
                L::THREADS, L::SMEM >> 10, got.n[16], got.n[15], got.n[14], got.n[13], got.n[12],
                got.n[11], got.n[10], got.n[9]);
    return f;
}

/* The largest cluster size up to C (> 8) whose `clusters` clusters all fit at once, else 8. */
template <typename T, int DH, int P>
static int attn_mma_one_wave(const baton_exec_ctx *ctx, long long clusters, int C)
{
    const AttFit &f = attn_mma_fit<T, DH, P>(ctx, clusters);
    for (int c = C; c > 8; c--)
        if (f.n[c] >= clusters)
            return c;
    return 8;
}

template <typename T, int DH, int P>
static int attn_mma_launch(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                           const dec_shape &s, int C, long long chunks)
{
    using L = AttMma<DH, P>;
    auto kern = attn_mma_kernel<T, DH, P>;
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
    if constexpr (DH == 64) {
        if (env.stages == 3)
            return attn_mma_launch<T, DH, 3>(
                ctx, b, d, s, pick ? attn_mma_one_wave<T, DH, 3>(ctx, clusters, C) : C, chunks);
        if (env.stages == 4)
            return attn_mma_launch<T, DH, 4>(
                ctx, b, d, s, pick ? attn_mma_one_wave<T, DH, 4>(ctx, clusters, C) : C, chunks);
    }
    if (pick)
        C = attn_mma_one_wave<T, DH, PBIG>(ctx, clusters, C);
    return attn_mma_launch<T, DH, PBIG>(ctx, b, d, s, C, chunks);
}

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
            if (d.head_dim == 64 && !prefill_mma_forced() && prefill_block_forced() == PF_AUTO &&
                pf90::usable(ctx, (int)d.n_heads, (int)d.n_kv_heads))
                return attn_prefill_wgmma<T>(ctx, b, d, s);
            return attn_prefill_pick<T>(ctx, b, d, s);
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

template <typename TI, typename TO, int K>
static int act_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s, int binary)
{
    const int vec =
        s.n % 8 == 0 && al16(b[0]) && al16(b[binary ? 2 : 1]) && (!binary || al16(b[1]));
    const int threads = 256;
    const int grid =
        wave_grid(ctx, (const void *)act_kernel<TI, TO, K>, vec ? s.n / 8 : s.n, threads);
    return launch(ctx, "elementwise", act_kernel<TI, TO, K>, (unsigned)grid, threads, 0, 1,
                  (const TI *)b[0], binary ? (const TI *)b[1] : (const TI *)nullptr,
                  (TO *)b[binary ? 2 : 1], (long long)s.n, vec);
}

template <int K> static int act_dispatch(const baton_exec_ctx *ctx, void **b, const dec_shape &s)
{
    const int binary = K == ACT_SILU_MUL;
    switch (s.x_dt) {
    case BATON_DTYPE_BF16: return act_launch<__nv_bfloat16, __nv_bfloat16, K>(ctx, b, s, binary);
    case BATON_DTYPE_F16: return act_launch<__half, __half, K>(ctx, b, s, binary);
    case BATON_DTYPE_F32: return act_launch<float, float, K>(ctx, b, s, binary);
    default: return act_launch<double, double, K>(ctx, b, s, binary);
    }
}

extern "C" int baton__kcuda_silu_mul(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                     size_t len)
{
    DEC_READ(DEC_SILU_MUL, 3);
    return act_dispatch<ACT_SILU_MUL>(ctx, buffers, s);
}

template <typename T>
static int swiglu_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s)
{
    const int vec = s.F % 8 == 0 && al16(b[0]) && al16(b[1]);
    const int threads = 256;
    const int grid = wave_grid(ctx, (const void *)swiglu_kernel<T>, vec ? s.n / 8 : s.n, threads);
    return launch(ctx, "swiglu", swiglu_kernel<T>, (unsigned)grid, threads, 0, 1, (const T *)b[0],
                  (T *)b[1], (long long)s.n, (long long)s.F, vec);
}

extern "C" int baton__kcuda_swiglu(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                   size_t len)
{
    DEC_READ(DEC_SWIGLU, 2);
    switch (s.x_dt) {
    case BATON_DTYPE_BF16: return swiglu_launch<__nv_bfloat16>(ctx, buffers, s);
    case BATON_DTYPE_F16: return swiglu_launch<__half>(ctx, buffers, s);
    case BATON_DTYPE_F32: return swiglu_launch<float>(ctx, buffers, s);
    default: return swiglu_launch<double>(ctx, buffers, s);
    }
}

extern "C" int baton__kcuda_silu(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                 size_t len)
{
    DEC_READ(DEC_SILU, 2);
    return act_dispatch<ACT_SILU>(ctx, buffers, s);
}

extern "C" int baton__kcuda_gelu(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                 size_t len)
{
    DEC_READ(DEC_GELU, 2);
    return (d.flags & DEC_FLAG_TANH) ? act_dispatch<ACT_GELU_TANH>(ctx, buffers, s)
                                     : act_dispatch<ACT_GELU_ERF>(ctx, buffers, s);
}

template <typename TI, typename TO>
static int cast_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s)
{
    const int vec = s.n % 8 == 0 && al16(b[0]) && al16(b[1]);
    const int threads = 256;
    const int grid = wave_grid(ctx, (const void *)cast_kernel<TI, TO>,
                               vec ? s.n / cast_elems<TI, TO>() : s.n, threads);
    return launch(ctx, "cast", cast_kernel<TI, TO>, (unsigned)grid, threads, 0, 1, (const TI *)b[0],
                  (TO *)b[1], (long long)s.n, vec);
}

template <typename TI> static int cast_to(const baton_exec_ctx *ctx, void **b, const dec_shape &s)
{
    switch (s.y_dt) {
    case BATON_DTYPE_BF16: return cast_launch<TI, __nv_bfloat16>(ctx, b, s);
    case BATON_DTYPE_F16: return cast_launch<TI, __half>(ctx, b, s);
    case BATON_DTYPE_F32: return cast_launch<TI, float>(ctx, b, s);
    default: return cast_launch<TI, double>(ctx, b, s);
    }
}

extern "C" int baton__kcuda_cast(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                 size_t len)
{
    DEC_READ(DEC_CAST, 2);
    switch (s.x_dt) {
    case BATON_DTYPE_BF16: return cast_to<__nv_bfloat16>(ctx, buffers, s);
    case BATON_DTYPE_F16: return cast_to<__half>(ctx, buffers, s);
    case BATON_DTYPE_F32: return cast_to<float>(ctx, buffers, s);
    default: return cast_to<double>(ctx, buffers, s);
    }
}

/* Whether clusters of 8 blocks of 1024 threads of `kernel` can run on ctx's device (asked once
 * per device and kernel: a MIG slice or a small GPU may not hold one). */
static bool cluster8_ok(const baton_exec_ctx *ctx, const void *kernel, size_t smem)
{
    FnFacts *f = fn_facts(kernel);
    const int dev = device_of(ctx);
    if (!f || dev < 0 || dev >= KCUDA_MAX_DEVICES)
        return false;
    if (facts_has(f, &FnFacts::cl_known, dev))
        return facts_has(f, &FnFacts::cl_ok, dev);
    int n = 0;
    if (max_active_clusters(kernel, 8, 1024, smem, 8, (cudaStream_t)ctx->stream, &n) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return false; /* not remembered: it may be a passing failure */
    }
    if (n >= 1)
        facts_set(f, &FnFacts::cl_ok, dev);
    facts_set(f, &FnFacts::cl_known, dev);
    return n >= 1;
}

template <typename T, int VPT>
static int softmax_reg_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s, int C,
                              int threads)
{
    return launch(ctx, "softmax", softmax_reg_kernel<T, VPT>, (unsigned)(s.rows * C),
                  (unsigned)threads, 0, C, (const T *)b[0], (T *)b[1], (long long)s.F, C);
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
    int per_sm = 0;
    if (occupancy(ctx, (const void *)softmax_reg_kernel<T, VPT>, threads, 0, &per_sm) !=
            cudaSuccess ||
        per_sm < 1) {
        (void)cudaGetLastError();
        per_sm = 1;
    }
    return per_sm;
}

/* launch() for a cooperative grid (every block resident at once, for grid.sync()). */
template <typename... KArgs, typename... Args>
static int launch_coop(const baton_exec_ctx *ctx, const char *name, void (*kernel)(KArgs...),
                       unsigned grid, unsigned block, Args... args)
{
    return launch_with(ctx, name, true, kernel, grid, block, 0, 1, args...);
}

/* softmax_grid_kernel for at most 4 rows of at least 16384 values: G blocks a row, the most that
 * keep rows * G within the SMs and give every thread a vector at least, when each thread then
 * holds at most SMG_VPT vectors and the row's output holds the G pairs: 0 or the launch's failure,
 * 1 when it does not apply. */
template <typename T>
static int softmax_grid_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s,
                               long long nv, long long sms)
{
    if (s.rows > 4 || s.F < 16384 || !device_facts(ctx).coop)
        return 1;
    const long long G = std::min(sms / s.rows, (nv + SMG_THREADS - 1) / SMG_THREADS);
    if (G < 2 || (nv + G - 1) / G > (long long)SMG_VPT * SMG_THREADS ||
        nv < smg_held<typename Acc<T>::A>((int)G))
        return 1;
    return launch_coop(ctx, "softmax", softmax_grid_kernel<T>, (unsigned)(s.rows * G), SMG_THREADS,
                       (const T *)b[0], (T *)b[1], (long long)s.F, (int)G);
}

/* How many clusters of 2, 4 and 8 blocks of softmax_smem_kernel<T> (1024 threads, the most shared
 * memory) fit at once on ctx's device ([1], [2], [3]; 0 where the query fails): a GPC's SMs left
 * over by its clusters stay idle, so rows * C blocks within the SMs can still take two waves. Asked
 * once per device, in relaxed capture mode (the queries enqueue nothing), and kept even when a
 * query fails: the cluster size orders the sums, later calls must choose as the first did. */
template <typename T> static const int *softmax_smem_fit(const baton_exec_ctx *ctx, size_t smem)
{
    static int fit[KCUDA_MAX_DEVICES + 1][4]; /* the last: a device out of range, never kept */
    static std::atomic<int> asked[KCUDA_MAX_DEVICES];
    const int dev = device_of(ctx);
    const bool known = dev >= 0 && dev < KCUDA_MAX_DEVICES;
    int *f = fit[known ? dev : KCUDA_MAX_DEVICES];
    if (known && asked[dev].load(std::memory_order_acquire))
        return f;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    const bool swapped = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
    const auto kernel = softmax_smem_kernel<T>;
    const int pr = prepare(kernel, ctx, "softmax", 8, 8, 1024, smem, smem, false);
    for (int i = 1; i < 4; i++) {
        f[i] = 0;
        if (pr == 0 && max_active_clusters((const void *)kernel, 8, 1024, smem, 1 << i,
                                           (cudaStream_t)ctx->stream, &f[i]) != cudaSuccess) {
            (void)cudaGetLastError();
            f[i] = 0;
        }
    }
    if (swapped)
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (pr != 0)
        (void)cudaGetLastError();
    if (known)
        asked[dev].store(1, std::memory_order_release);
    return f;
}

/* softmax_smem_kernel where rows * C blocks of 1024 threads (the fewest of C = 1, 2, 4, 8 blocks a
 * row) are one block a SM, all at once, and a slice past the registers' VPT * 1024 vectors fits
 * the shared memory: 0 or the launch's failure, 1 when it does not fit. */
template <typename T>
static int softmax_smem_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s,
                               long long nv, long long sms)
{
    const auto kernel = softmax_smem_kernel<T>;
    const size_t smem_max = (size_t)device_facts(ctx).smem_optin - 1024;
    for (int c = 1, i = 0; c <= 8; c *= 2, i++) {
        const long long per = (nv + c - 1) / c, ns = per - (long long)smx_reg_vpt<T>() * 1024;
        if (s.rows * c > sms || ns * 16 > (long long)smem_max || ns > SMS_KMAX * 1024LL)
            continue;
        if (c > 1 && s.rows > softmax_smem_fit<T>(ctx, smem_max)[i])
            continue;
        const size_t smem = ns > 0 ? (size_t)ns * 16 : 0;
        const long long grid = s.rows * c;
        if (prepare(kernel, ctx, "softmax", c, grid, 1024, smem, smem_max, false))
            return BATON_ECUDA;
        return launch(ctx, "softmax", kernel, (unsigned)grid, 1024, smem, c, (const T *)b[0],
                      (T *)b[1], (long long)s.F, c);
    }
    return 1;
}

template <typename T>
static int softmax_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s)
{
    constexpr int E = 16 / (int)sizeof(T);
    constexpr long long VMAX = sizeof(T) == 4 ? 8 : 4;
    if (s.F % E == 0 && al16(b[0]) && al16(b[1]) && s.rows > 0) {
        const long long nv = s.F / E, sms = sm_count(ctx);
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
        const int rg = softmax_grid_launch<T>(ctx, b, s, nv, sms);
        if (rg <= 0)
            return rg;
        int C = 0;
        const bool cl = s.F >= 16384 && cluster8_ok(ctx, (const void *)softmax_reg_kernel<T, 4>, 0);
        for (int c = 8; cl && c >= 2 && !C; c /= 2)
            if (vpt_of(c) <= VMAX && s.rows * c <= resident(c))
                C = c;
        if (!C && vpt_of(1) <= VMAX)
            C = 1;
        for (int c = 2; cl && c <= 8 && !C; c *= 2)
            if (vpt_of(c) <= VMAX)
                C = c;
        /* more than one wave of blocks of 16 KB or more a thread block: rows held in registers
         * and shared memory where a wave of one block a SM holds them, else the two-pass kernel */
        if (cl && (!C || (s.rows * C > resident(C) && (nv + C - 1) / C * 16 >= 16384))) {
            const int rc = softmax_smem_launch<T>(ctx, b, s, nv, sms);
            if (rc <= 0)
                return rc;
            /* C: the most blocks a row (up to 8, any size) whose rows * C blocks stay one wave
             * (64 rows at 3 blocks a SM: 6, where 8 left a second wave of 116 blocks), and at
             * least enough that a slice is at most 96 KB, so that the slices in flight together
             * stay well inside the L2 for the second read */
            const long long slice = 96 * 1024 / 16; /* vectors */
            int per_sm = 0;
            if (occupancy(ctx, (const void *)softmax_l2_kernel<T>, SMX_THREADS, 0, &per_sm) !=
                    cudaSuccess ||
                per_sm < 1) {
                (void)cudaGetLastError();
                per_sm = 3;
            }
            const long long l2_resident = (long long)per_sm * sms;
            const long long wave_c = l2_resident / s.rows, slice_c = (nv + slice - 1) / slice;
            const int c2 = (int)std::min(8LL, std::max(1LL, std::max(wave_c, slice_c)));
            return launch(ctx, "softmax", softmax_l2_kernel<T>, (unsigned)(s.rows * c2),
                          SMX_THREADS, 0, c2, (const T *)b[0], (T *)b[1], (long long)s.F, c2);
        }
        if (C) {
            const int threads = threads_of(C);
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
                  d.temperature, (int)d.top_k, d.top_p, (unsigned long long)d.seed);
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

/* Per device: 0 no host copy yet, 1 the host copy is in use, 2 none could be made (every check
 * copies from the device). */
static std::atomic<int> g_mirror_state[KCUDA_MAX_DEVICES];
static unsigned long long *g_mirror[KCUDA_MAX_DEVICES];
static std::mutex g_mirror_lock;

/* Gives `device` (current) its host copy of the error record. Once per device and process, after
 * a run's wait: kernels launched before g_err_host was set write only the device record, so the
 * device is synchronised once, and the caller's check that follows still reads the device. */
static void mirror_setup(int device)
{
    std::lock_guard<std::mutex> hold(g_mirror_lock);
    if (g_mirror_state[device].load(std::memory_order_acquire) != 0)
        return;
    void *h = NULL, *dp = NULL;
    int state = 2;
    if (cudaHostAlloc(&h, 4 * sizeof(unsigned long long),
                      cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
        memset(h, 0, 4 * sizeof(unsigned long long));
        if (cudaHostGetDevicePointer(&dp, h, 0) == cudaSuccess &&
            cudaMemcpyToSymbol(dec::g_err_host, &dp, sizeof dp) == cudaSuccess &&
            cudaDeviceSynchronize() == cudaSuccess) {
            g_mirror[device] = (unsigned long long *)h;
            state = 1;
        } else {
            cudaFreeHost(h);
        }
    }
    (void)cudaGetLastError();
    g_mirror_state[device].store(state, std::memory_order_release);
}

extern "C" int baton__kcuda_decoder_error_take(int device, int *step_out, char *msg, size_t len)
{
    if (step_out)
        *step_out = -1;
    const bool known = device >= 0 && device < KCUDA_MAX_DEVICES;
    if (known && g_mirror_state[device].load(std::memory_order_acquire) == 1 &&
        ((volatile unsigned long long *)g_mirror[device])[0] == 0)
        return 0; /* the common case: no CUDA call */
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess)
        return baton__reason_set(msg, len, BATON_ECUDA, "cudaGetDevice failed");
    if (device != prev && cudaSetDevice(device) != cudaSuccess)
        return baton__reason_set(msg, len, BATON_ECUDA, "cudaSetDevice(%d) failed", device);
    if (known && g_mirror_state[device].load(std::memory_order_acquire) == 0)
        mirror_setup(device);
    unsigned long long rec[4] = {0, 0, 0, 0};
    cudaError_t e = cudaMemcpyFromSymbol(rec, dec::g_err, sizeof rec);
    if (e == cudaSuccess && rec[0]) {
        const unsigned long long zero[4] = {0, 0, 0, 0};
        e = cudaMemcpyToSymbol(dec::g_err, zero, sizeof zero);
        if (known && g_mirror_state[device].load(std::memory_order_acquire) == 1)
            memset((void *)g_mirror[device], 0, sizeof zero);
    }
    if (device != prev)
        cudaSetDevice(prev);
    if (e != cudaSuccess)
        return baton__reason_set(msg, len, BATON_ECUDA,
                                 "reading the decoder kernels' error record: %s",
                                 cudaGetErrorString(e));
    if (!rec[0])
        return 0;
    const int op = (int)(rec[0] >> 32), step = (int)(rec[0] & 0xffffffffu) - 1;
    if (step_out)
        *step_out = step;
    const char *what = op == DEC_EMBEDDING ? "ids" : "positions";
    const char *range = op == DEC_EMBEDDING   ? "the table's rows"
                        : op == DEC_ATTENTION ? "the caches' rows"
                                              : "the cache's rows";
    return baton__reason_set(
        msg, len, BATON_EKERNEL,
        "%s at step #%d on cuda:%d: %s[%lld] = %lld is outside [0, %lld) (%s; the "
        "access was clamped and the result is not valid)",
        baton__dec_op_name(op), step, device, what, (long long)rec[1], (long long)rec[2],
        (long long)rec[3], range);
}
