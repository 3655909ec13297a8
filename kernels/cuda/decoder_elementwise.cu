/* decoder_elementwise.cu: silu_mul, silu, gelu, swiglu and cast on CUDA: 16-byte units, several
 * in flight a thread, over a grid-stride loop (the last few elements one a thread); buffers at
 * different offsets from 16 bytes, values one at a time, as many in flight. */
#include "kernels/cuda/decoder_common.cuh"

namespace kcuda
{
namespace dec
{

enum { ACT_SILU_MUL, ACT_SILU, ACT_GELU_ERF, ACT_GELU_TANH, ACT_CAST, ACT_GELU_ERF_FAST };

/* gelu(a) = a / 2 erfc(-a / sqrt2) for results in bf16 or f16: erfc(z) = t exp(-z^2 + P(t)), t =
 * 1 / (1 + |z| / 2), P of degree 9 (the Chebyshev fit of Numerical Recipes' erfcc, fractional
 * error under 1.2e-7 everywhere), erfc(-z) = 2 - erfc(z), with the special-function unit's
 * reciprocal and 2^x: at most 3.4e-6 relative over [-12, 12] (in f32 arithmetic, against double
 * erfc), under a hundredth of an f16 ulp. CUDA's erfcf made a bf16 gelu bound by its
 * instructions, not its bytes (1.9x the copy at 32 MB and more). */
__device__ __forceinline__ float gelu_erf_fast(float a)
{
    const float z = a * -0.70710678118654752f, az = fabsf(z);
    const float t = __fdividef(1.0f, fmaf(0.5f, az, 1.0f));
    float p = 0.17087277f;
    p = fmaf(p, t, -0.82215223f);
    p = fmaf(p, t, 1.48851587f);
    p = fmaf(p, t, -1.13520398f);
    p = fmaf(p, t, 0.27886807f);
    p = fmaf(p, t, -0.18628806f);
    p = fmaf(p, t, 0.09678418f);
    p = fmaf(p, t, 0.37409196f);
    p = fmaf(p, t, 1.00002368f);
    p = fmaf(p, t, -1.26551223f);
    const float e = t * ex2_approx(fmaf(-az, az, p) * 1.4426950408889634f);
    return 0.5f * a * (z >= 0.0f ? e : 2.0f - e);
}

template <typename A, int K> __device__ __forceinline__ A act_f(A a, A b)
{
    if constexpr (K == ACT_SILU_MUL)
        return a / ((A)1 + exp(-a)) * b;
    else if constexpr (K == ACT_SILU)
        return a / ((A)1 + exp(-a));
    else if constexpr (K == ACT_GELU_ERF) /* 1 + erf(x/sqrt2) = erfc(-x/sqrt2): no cancellation */
        return (A)0.5 * a * erfc(-a * (A)0.7071067811865476);
    else if constexpr (K == ACT_GELU_ERF_FAST)
        return gelu_erf_fast(a);
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

/* Values in flight a thread, per input, where the buffers sit at different offsets from 16 bytes
 * and go one value at a time (a warp's loads still one contiguous run): one a thread took a
 * silu_mul and a swiglu of odd F to 2.8x the copy. */
#define EW_SCALAR 8

/* swiglu: y[r, c] = silu(gu[r, c]) * gu[r, F + c], with silu_mul's arithmetic (act_f), so the
 * same bits; 8 elements a unit, where F is a multiple of 8 and gu and y start on 16 bytes. */
template <typename T> __global__ void swiglu_kernel(const T *gu, T *y, long long n, long long F)
{
    using A = typename Acc<T>::A;
    constexpr int U = units_in_flight<T>();
    pdl_wait(); /* gu may be a predecessor's output */
    pdl_trigger();
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x;
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
                vy[e] = from_acc<T>(act_f<A, ACT_SILU_MUL>(ld_a<A>(va[j][e]), ld_a<A>(vb[j][e])));
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
}

/* swiglu where the halves are not all on 16 bytes (F of no whole 16 bytes, or gu or y a view at
 * an offset): blocks take pieces of a row of EW_SCALAR values a thread, consecutive threads
 * consecutive values, one division a piece (the row) rather than one a value. */
template <typename T>
__global__ void swiglu_rows_kernel(const T *gu, T *y, long long rows, long long F, long long ppr)
{
    using A = typename Acc<T>::A;
    constexpr int S = EW_SCALAR;
    pdl_wait(); /* gu may be a predecessor's output */
    pdl_trigger();
    const long long pieces = rows * ppr, nt = blockDim.x;
    for (long long q = blockIdx.x; q < pieces; q += gridDim.x) {
        const long long r = row_of(q, ppr), c0 = (q - r * ppr) * S * nt + threadIdx.x;
        const T *g = gu + r * 2 * F;
        T *yr = y + r * F;
        T va[S], vb[S];
#pragma unroll
        for (int j = 0; j < S; j++)
            if (c0 + j * nt < F) {
                va[j] = g[c0 + j * nt];
                vb[j] = g[F + c0 + j * nt];
            }
#pragma unroll
        for (int j = 0; j < S; j++)
            if (c0 + j * nt < F)
                yr[c0 + j * nt] =
                    from_acc<T>(act_f<A, ACT_SILU_MUL>(ld_a<A>(va[j]), ld_a<A>(vb[j])));
    }
}

/* Bytes [bs, bs + 16) of the 32 bytes lo:hi (bs a multiple of 2 below 16, lo's bytes first). */
__device__ __forceinline__ uint4 bytes16_at(const uint4 &lo, const uint4 &hi, int bs)
{
    unsigned w[5];
    switch (bs >> 2) { /* the five words from word bs / 4 */
    case 0: w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w, w[4] = hi.x; break;
    case 1: w[0] = lo.y, w[1] = lo.z, w[2] = lo.w, w[3] = hi.x, w[4] = hi.y; break;
    case 2: w[0] = lo.z, w[1] = lo.w, w[2] = hi.x, w[3] = hi.y, w[4] = hi.z; break;
    default: w[0] = lo.w, w[1] = hi.x, w[2] = hi.y, w[3] = hi.z, w[4] = hi.w; break;
    }
    if (bs & 2) /* half a word on: each word's high half, then the next word's low half */
        return make_uint4(__funnelshift_r(w[0], w[1], 16), __funnelshift_r(w[1], w[2], 16),
                          __funnelshift_r(w[2], w[3], 16), __funnelshift_r(w[3], w[4], 16));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* A row of swiglu whose halves are not all on 16 bytes: y's values before its first 16-byte
 * boundary (h), its whole vectors (nv) and the values after (t); the aligned vectors of a and of b
 * from which y's first whole vector's values start sa and sb bytes on (vector j's values are the
 * 16 bytes from there + 16 j, in the aligned vectors j and j + 1 from there; the second only where
 * the offset is not on 16, so only bytes of the row are read). */
template <typename T> struct SwigluRow {
    const T *a, *b;
    const uint4 *pa, *pb;
    T *y;
    long long nv;
    int h, t, sa, sb;
};

/* SwigluRow of the row gu[0, 2F] into y[0, F]: per row on the device (swiglu_shift_kernel), once
 * on the host for a decode row (swiglu_row_kernel). */
template <typename T>
__host__ __device__ __forceinline__ SwigluRow<T> swiglu_row(const T *gu, T *y, long long F)
{
    constexpr long long E = 16 / (long long)sizeof(T), sz = (long long)sizeof(T);
    SwigluRow<T> p;
    p.a = gu;
    p.b = gu + F;
    p.y = y;
    const long long h = (long long)((16 - ((uintptr_t)y & 15)) & 15) / sz;
    p.h = (int)(h < F ? h : F);
    p.nv = (F - p.h) / E;
    p.t = (int)(F - p.h - p.nv * E);
    const long long a0 = (long long)((uintptr_t)p.a & 15) + p.h * sz,
                    b0 = (long long)((uintptr_t)p.b & 15) + p.h * sz;
    p.sa = (int)(a0 & 15);
    p.sb = (int)(b0 & 15);
    p.pa = reinterpret_cast<const uint4 *>(((uintptr_t)p.a & ~(uintptr_t)15) + (a0 & ~15LL));
    p.pb = reinterpret_cast<const uint4 *>(((uintptr_t)p.b & ~(uintptr_t)15) + (b0 & ~15LL));
    return p;
}

/* More than a SwigluRow's values either side of its whole vectors, h + t <= 2 (E - 1): no edge. */
#define SWIGLU_NO_EDGE 16

/* UW of a SwigluRow's whole vectors, j0 + u * step, and, where e < h + t, its value e either side
 * of them (the first h, then the last t), one at a time. Every load is asked for before any
 * shift: a shift behind a branch waited for its vector before the next load was issued, four
 * round trips in series a thread (the decode row took 3.3 us against 2.0 for values one at a
 * time). */
template <typename T, int UW>
__device__ __forceinline__ void swiglu_part(const SwigluRow<T> &p, long long j0, long long step,
                                            long long e)
{
    using A = typename Acc<T>::A;
    constexpr int E = 16 / (int)sizeof(T);
    const bool edge = e < p.h + p.t;
    const long long c = e < p.h ? e : p.h + p.nv * E + (e - p.h);
    T ea, eb;
    if (edge) {
        ea = p.a[c];
        eb = p.b[c];
    }
    uint4 la[UW], ha[UW], lb[UW], hb[UW];
#pragma unroll
    for (int u = 0; u < UW; u++) {
        const long long j = j0 + u * step;
        if (j < p.nv) {
            la[u] = __ldg(p.pa + j);
            ha[u] = __ldg(p.pa + j + (p.sa != 0));
            lb[u] = __ldg(p.pb + j);
            hb[u] = __ldg(p.pb + j + (p.sb != 0));
        }
    }
#pragma unroll
    for (int u = 0; u < UW; u++) {
        const long long j = j0 + u * step;
        if (j < p.nv) {
            const uint4 va = p.sa ? bytes16_at(la[u], ha[u], p.sa) : la[u],
                        vb = p.sb ? bytes16_at(lb[u], hb[u], p.sb) : lb[u];
            const T *xa = reinterpret_cast<const T *>(&va), *xb = reinterpret_cast<const T *>(&vb);
            alignas(16) T vy[E];
#pragma unroll
            for (int k = 0; k < E; k++)
                vy[k] = from_acc<T>(act_f<A, ACT_SILU_MUL>(ld_a<A>(xa[k]), ld_a<A>(xb[k])));
            *reinterpret_cast<uint4 *>(p.y + p.h + j * E) = *reinterpret_cast<const uint4 *>(vy);
        }
    }
    if (edge)
        p.y[c] = from_acc<T>(act_f<A, ACT_SILU_MUL>(ld_a<A>(ea), ld_a<A>(eb)));
}

/* swiglu where the halves are not all on 16 bytes (an odd F, or gu or y a view at an offset):
 * pieces of a row, UW 16-byte vectors of y a thread (swiglu_part), each y vector on y's own
 * 16-byte boundary and its a and b read as the (one or two) aligned vectors that hold them, shifted
 * into place; the values either side by the row's first piece's first threads (bf16[2048,16382]:
 * 1.00x the copy, where values one at a time, 8 in flight a thread, took 1.26x). */
template <typename T, int UW>
__global__ void swiglu_shift_kernel(const T *gu, T *y, long long rows, long long F, long long ppr)
{
    pdl_wait(); /* gu may be a predecessor's output */
    pdl_trigger();
    const long long pieces = rows * ppr, nt = blockDim.x;
    for (long long q = blockIdx.x; q < pieces; q += gridDim.x) {
        const long long r = rows == 1 ? 0 : ppr == 1 ? q : row_of(q, ppr), pc = q - r * ppr;
        swiglu_part<T, UW>(swiglu_row(gu + r * 2 * F, y + r * F, F), pc * nt * UW + threadIdx.x, nt,
                           pc == 0 ? (long long)threadIdx.x : SWIGLU_NO_EDGE);
    }
}

/* swiglu_shift_kernel for one row (a decode step's), its SwigluRow worked out on the host, a
 * vector a thread, with nothing to work out before its loads but its index: at decode size the
 * kernel's time is its chain of dependent instructions, and the general kernel's row, offsets and
 * counts came first. */
template <typename T> __global__ void swiglu_row_kernel(const SwigluRow<T> p)
{
    pdl_wait(); /* gu may be a predecessor's output */
    pdl_trigger();
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    swiglu_part<T, 1>(p, j, 0, j);
}

/* vec: 16-byte units from `head` on (a, b and y at one offset from 16 bytes; the head values
 * before the first boundary one a thread); else every value alone, EW_SCALAR in flight a thread. */
template <typename TI, typename TO, int K>
__global__ void act_kernel(const TI *a, const TI *b, TO *y, long long n, int vec, int head)
{
    using A = typename Acc<TI>::A;
    constexpr int U = units_in_flight<TI>();
    pdl_wait(); /* a and b may be a predecessor's outputs */
    pdl_trigger();
    const long long stride = (long long)gridDim.x * blockDim.x,
                    t0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    /* one output from a's value and b's (silu_mul's alone reads b) */
    auto val = [](TI av, TI bv) {
        return from_acc<TO>(act_f<A, K>(ld_a<A>(av), K == ACT_SILU_MUL ? ld_a<A>(bv) : (A)0));
    };
    auto at = [&](long long i) { return val(a[i], K == ACT_SILU_MUL ? b[i] : a[i]); };
    if (head > 0) {
        if (t0 < head)
            y[t0] = at(t0);
        a += head, y += head, n -= head;
        if (K == ACT_SILU_MUL)
            b += head;
    }
    long long u = t0;
    auto apply = [&](const TI(&va)[8], const TI(&vb)[8], TO(&vy)[8]) {
#pragma unroll
        for (int e = 0; e < 8; e++)
            vy[e] = val(va[e], vb[e]);
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
        u = units * 8 + t0; /* the last n % 8 elements */
    } else {
        constexpr int S = EW_SCALAR;
        for (; u + (S - 1) * stride < n; u += S * stride) {
            TI va[S], vb[S];
#pragma unroll
            for (int j = 0; j < S; j++) {
                va[j] = a[u + j * stride];
                if (K == ACT_SILU_MUL)
                    vb[j] = b[u + j * stride];
            }
#pragma unroll
            for (int j = 0; j < S; j++)
                y[u + j * stride] = val(va[j], vb[j]);
        }
    }
    for (long long i = u; i < n; i += stride)
        y[i] = at(i);
}

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
    using VI = typename raw<VE *(int)sizeof(TI)>::type;
    using VO = typename raw<VE *(int)sizeof(TO)>::type;
    pdl_wait(); /* x may be a predecessor's output */
    pdl_trigger();
    const long long stride = (long long)gridDim.x * blockDim.x,
                    t0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long u = t0;
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
        u = units * VE + t0; /* the last n % VE elements */
    }
    for (long long i = u; i < n; i += stride)
        y[i] = cv(x[i]);
}
} /* namespace dec */
} /* namespace kcuda */

using namespace kcuda;
using namespace kcuda::dec;

DEC_PREPARE(silu_mul, DEC_SILU_MUL, 3)
DEC_PREPARE(silu, DEC_SILU, 2)
DEC_PREPARE(gelu, DEC_GELU, 2)
DEC_PREPARE(swiglu, DEC_SWIGLU, 2)
DEC_PREPARE(cast, DEC_CAST, 2)

template <typename TI, typename TO, int K0>
static int act_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s, int binary)
{
    /* gelu's erf form with 16-bit results: gelu_erf_fast (bf16 at 32 MB: 1.11x the copy, not
     * 1.95x) */
    constexpr int K = K0 == ACT_GELU_ERF && sizeof(TI) == 2 ? ACT_GELU_ERF_FAST : K0;
    static_assert(sizeof(TI) == sizeof(TO), "one offset from 16 bytes is one element count");
    /* 16-byte units where every buffer sits at one offset from 16 bytes (the values before the
     * first boundary and the last n % 8 one a thread), else the values one at a time */
    const uintptr_t off = (uintptr_t)b[0] & 15;
    const int vec = off % sizeof(TI) == 0 && ((uintptr_t)b[binary ? 2 : 1] & 15) == off &&
                    (!binary || ((uintptr_t)b[1] & 15) == off);
    const int head = vec && off ? (int)std::min<long long>(s.n, (16 - off) / sizeof(TI)) : 0;
    const int threads = 256;
    const int grid =
        wave_grid(ctx, (const void *)act_kernel<TI, TO, K>,
                  vec ? (s.n - head + 7) / 8 : (s.n + EW_SCALAR - 1) / EW_SCALAR, threads);
    return launch(ctx, "elementwise", act_kernel<TI, TO, K>, (unsigned)grid, threads, 0, 1,
                  (const TI *)b[0], binary ? (const TI *)b[1] : (const TI *)nullptr,
                  (TO *)b[binary ? 2 : 1], (long long)s.n, vec, head);
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

/* Whether swiglu's unaligned halves take swiglu_shift_kernel (BATON_SWIGLU_SHIFT=0: the kernel
 * of single values, for benchmarks). Read once. */
static bool swiglu_shift_on()
{
    static int cache = ENV_UNREAD;
    return baton__env_flag("BATON_SWIGLU_SHIFT", &cache) != 0;
}

template <typename T>
static int swiglu_launch(const baton_exec_ctx *ctx, void **b, const dec_shape &s)
{
    const int threads = 256;
    if (s.F % 8 == 0 && al16(b[0]) && al16(b[1])) {
        const int grid = wave_grid(ctx, (const void *)swiglu_kernel<T>, s.n / 8, threads);
        return launch(ctx, "swiglu", swiglu_kernel<T>, (unsigned)grid, threads, 0, 1,
                      (const T *)b[0], (T *)b[1], (long long)s.n, (long long)s.F);
    }
    const long long rows = s.F ? s.n / s.F : 0;
    /* halves off 16 bytes: shifted 16-byte vectors, two a thread where the work gives every SM
     * two blocks of 256 threads (bf16[2048,16382] 28.0-28.4 us, 1.00x the copy, against 35.6-35.7
     * for values one at a time, H200); a decode row on a kernel of its own whose offsets the host
     * works out (bf16[1,16382] 1.61 us, 1.19x, against 1.80 on the general kernel at a vector a
     * thread and 2.04 for values one at a time); other small work a vector a thread, in blocks of
     * fewer threads so that more SMs share it */
    const long long nv = s.F / (16 / (long long)sizeof(T)) + 1;
    if (s.F >= 16 / (long long)sizeof(T) && swiglu_shift_on()) {
        const long long sms = sm_count(ctx);
        if (rows * nv >= 2LL * threads * 2 * sms) { /* 2 vectors a thread, 2 blocks a SM */
            const long long ppr = (nv + 2 * threads - 1) / (2 * threads);
            const int grid = wave_grid(ctx, (const void *)swiglu_shift_kernel<T, 2>,
                                       std::max(1LL, rows * ppr) * threads, threads);
            return launch(ctx, "swiglu", swiglu_shift_kernel<T, 2>, (unsigned)grid, threads, 0, 1,
                          (const T *)b[0], (T *)b[1], rows, (long long)s.F, ppr);
        }
        /* the most threads a block, from `most` down to 32, whose blocks (rows of `per` units a
         * thread each) still number the SMs */
        auto spread = [sms](long long rows, long long per, int most) {
            int t = most;
            while (t > 32 && rows * ((per + t - 1) / t) < sms)
                t /= 2;
            return t;
        };
        if (rows == 1) {
            const SwigluRow<T> p = swiglu_row((const T *)b[0], (T *)b[1], s.F);
            const long long work = std::max(p.nv, (long long)(p.h + p.t));
            const int rt = spread(1, work, 128);
            return launch(ctx, "swiglu", swiglu_row_kernel<T>, (unsigned)((work + rt - 1) / rt), rt,
                          0, 1, p);
        }
        const int st = spread(rows, nv, threads);
        const long long ppr = (nv + st - 1) / st; /* a vector a thread */
        const int grid = wave_grid(ctx, (const void *)swiglu_shift_kernel<T, 1>,
                                   std::max(1LL, rows * ppr) * st, st);
        return launch(ctx, "swiglu", swiglu_shift_kernel<T, 1>, (unsigned)grid, st, 0, 1,
                      (const T *)b[0], (T *)b[1], rows, (long long)s.F, ppr);
    }
    const long long ppr = (s.F + EW_SCALAR * threads - 1) / (EW_SCALAR * threads);
    const int grid = wave_grid(ctx, (const void *)swiglu_rows_kernel<T>,
                               std::max(1LL, rows * ppr) * threads, threads);
    return launch(ctx, "swiglu", swiglu_rows_kernel<T>, (unsigned)grid, threads, 0, 1,
                  (const T *)b[0], (T *)b[1], rows, (long long)s.F, ppr);
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
    const int vec = al16(b[0]) && al16(b[1]); /* and the last n % units one a thread */
    const int threads = 256;
    constexpr int VE = cast_elems<TI, TO>();
    const int grid =
        wave_grid(ctx, (const void *)cast_kernel<TI, TO>, vec ? (s.n + VE - 1) / VE : s.n, threads);
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
