/* gemv_kernel.cuh: the decode GEMV's kernel (gemv.cuh), instantiated per dtype by
 * KCUDA_GEMV_FILE in gemv_bf16.cu, gemv_f16.cu and gemv_f32.cu. */
#ifndef BATON_KCUDA_GEMV_KERNEL_CUH
#define BATON_KCUDA_GEMV_KERNEL_CUH

#include "kernels/cuda/gemv.cuh"

namespace kcuda
{
namespace gv
{

/* Element e of a 16-byte vector of T, as f32 (e a constant after unrolling). */
template <typename T> __device__ __forceinline__ float el(const uint4 &v, int e);
template <> __device__ __forceinline__ float el<__nv_bfloat16>(const uint4 &v, int e)
{
    const uint32_t w = (&v.x)[e >> 1];
    return __uint_as_float(e & 1 ? w & 0xffff0000u : w << 16);
}
template <> __device__ __forceinline__ float el<__half>(const uint4 &v, int e)
{
    const uint32_t w = (&v.x)[e >> 1];
    return __half2float(__ushort_as_half((unsigned short)(e & 1 ? w >> 16 : w & 0xffffu)));
}
template <> __device__ __forceinline__ float el<float>(const uint4 &v, int e)
{
    return __uint_as_float((&v.x)[e]);
}

/* Stages rows [m0, m0 + M) of prologue(x) into xs ([M][k], as T: the values an unfused plan would
 * have written to memory), zeros for rows past a.m. Ends with a barrier. x comes from L2 (the step
 * before wrote it), so every thread issues all its loads of a batch before it uses any: the
 * prologue costs about one L2 round trip, not one per vector. */
template <typename T, int M, int P>
__device__ __forceinline__ void stage(const Args &a, long long m0, T *xs, float *red)
{
    constexpr int VE = 16 / (int)sizeof(T);
    constexpr int NB = 4; /* vectors (of x, and of g or up) a thread has in flight */
    const T *x = (const T *)a.x;
    const long long K = a.k, kv = K / VE, nt = blockDim.x;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    if constexpr (P == BATON_GEMV_PLAIN || P == BATON_GEMV_SWIGLU) {
        /* 32-bit: a 64-bit division is a long software sequence, and this runs per vector */
        const unsigned kvu = (unsigned)kv, total = (unsigned)(M * kv);
        for (unsigned i0 = threadIdx.x; i0 < total; i0 += NB * (unsigned)nt) {
            uint4 gv[NB], uv[NB];
#pragma unroll
            for (int b = 0; b < NB; b++) {
                const unsigned i = i0 + b * (unsigned)nt, m = M == 1 ? 0 : i / kvu;
                const long long j = (long long)(M == 1 ? i : i % kvu) * VE;
                gv[b] = uv[b] = zero;
                if (i < total && m0 + m < a.m) {
                    const T *xr = x + (m0 + m) * a.ldx;
                    gv[b] = *reinterpret_cast<const uint4 *>(xr + j);
                    if constexpr (P == BATON_GEMV_SWIGLU)
                        uv[b] = *reinterpret_cast<const uint4 *>(xr + K + j);
                }
            }
#pragma unroll
            for (int b = 0; b < NB; b++) {
                const unsigned i = i0 + b * (unsigned)nt, m = M == 1 ? 0 : i / kvu;
                const long long j = (long long)(M == 1 ? i : i % kvu) * VE;
                if (i >= total)
                    break;
                if constexpr (P == BATON_GEMV_SWIGLU) {
                    alignas(16) T o[VE];
                    const bool on = m0 + m < a.m;
#pragma unroll
                    for (int e = 0; e < VE;
                         e++) { /* silu_mul's arithmetic (decoder_elementwise.cu act_f) */
                        const float ga = el<T>(gv[b], e);
                        o[e] = from_f<T>(on ? ga / (1.0f + expf(-ga)) * el<T>(uv[b], e) : 0.0f);
                    }
                    *reinterpret_cast<uint4 *>(xs + m * K + j) =
                        *reinterpret_cast<const uint4 *>(o);
                } else {
                    *reinterpret_cast<uint4 *>(xs + m * K + j) = gv[b];
                }
            }
        }
    } else {
        const T *g = (const T *)a.g;
        /* Rows of up to NB vectors a thread are held in registers between the sum of squares and
         * the scaling (one read of x and g, both in flight at once); longer rows read x twice.
         * Either way a thread adds its elements in k order: the same bits. */
        const bool held = K <= NB * nt * VE;
#pragma unroll 1
        for (int m = 0; m < M; m++) {
            const bool on = m0 + m < a.m;
            const T *xr = x + (on ? m0 + m : 0) * a.ldx;
            float ss = 0.0f;
            if (held) {
                uint4 xv[NB], gw[NB];
#pragma unroll
                for (int b = 0; b < NB; b++) {
                    const long long j = (threadIdx.x + b * nt) * VE;
                    xv[b] = j < K ? *reinterpret_cast<const uint4 *>(xr + j) : zero;
                    gw[b] = j < K ? *reinterpret_cast<const uint4 *>(g + j) : zero;
                }
#pragma unroll
                for (int b = 0; b < NB; b++)
                    if ((threadIdx.x + b * nt) * VE < K)
#pragma unroll
                        for (int e = 0; e < VE; e++)
                            ss = fmaf(el<T>(xv[b], e), el<T>(xv[b], e), ss);
                ss = block_sum(ss, red); /* every thread the same bits */
                const float rs = rsqrtf(ss / (float)K + a.eps);
#pragma unroll
                for (int b = 0; b < NB; b++) {
                    const long long j = (threadIdx.x + b * nt) * VE;
                    if (j >= K)
                        break;
                    alignas(16) T o[VE];
#pragma unroll
                    for (int e = 0; e < VE; e++)
                        o[e] = from_f<T>(on ? el<T>(gw[b], e) * (el<T>(xv[b], e) * rs) : 0.0f);
                    *reinterpret_cast<uint4 *>(xs + m * K + j) =
                        *reinterpret_cast<const uint4 *>(o);
                }
                continue;
            }
            for (long long j = (long long)threadIdx.x * VE; j < K; j += nt * VE) {
                const uint4 v = *reinterpret_cast<const uint4 *>(xr + j);
#pragma unroll
                for (int e = 0; e < VE; e++)
                    ss = fmaf(el<T>(v, e), el<T>(v, e), ss);
            }
            ss = block_sum(ss, red);
            const float rs = rsqrtf(ss / (float)K + a.eps);
            for (long long j = (long long)threadIdx.x * VE; j < K; j += nt * VE) {
                const uint4 v = *reinterpret_cast<const uint4 *>(xr + j);
                const uint4 gw = *reinterpret_cast<const uint4 *>(g + j);
                alignas(16) T o[VE];
#pragma unroll
                for (int e = 0; e < VE; e++)
                    o[e] = from_f<T>(on ? el<T>(gw, e) * (el<T>(v, e) * rs) : 0.0f);
                *reinterpret_cast<uint4 *>(xs + m * K + j) = *reinterpret_cast<const uint4 *>(o);
            }
        }
    }
    __syncthreads();
}

/* A warp per R rows of W; a tile is U 16-byte vectors of each row per lane (lane l holds k =
 * VE (32 u + l) + the tile's start), loaded before any FMA, so R U vectors are in flight per lane;
 * with PIPE the next tile's loads are issued before the FMAs of this one (twice the registers).
 * Warps stride over the row groups; blockIdx.y picks the row tile [M y, M y + M) of x. A row of
 * several tiles starts at tile (row / 2) mod tiles and wraps: the warps' loads at any moment are
 * then spread over every part of the rows, not all at the same offset of rows a power of two
 * apart (which strided the memory channels unevenly: K = 8192 ran 1.2x slower than K = 2048 at
 * the same bytes). Each lane sums its elements in that order whatever R, U and PIPE (the rows of
 * a pair share it): every variant gives the same bits. */
template <typename T, int M, int R, int U, bool PIPE, int P>
__global__ void __launch_bounds__(THREADS) gemv_kernel(Args a)
{
    constexpr int VE = 16 / (int)sizeof(T);
    constexpr long long TILE = (long long)VE * 32 * U;
    extern __shared__ uint4 smem_raw[];
    __shared__ float red[32];
    T *xs = reinterpret_cast<T *>(smem_raw);
    const T *w = (const T *)a.w;
    const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const long long K = a.k, N = a.n, m0 = (long long)blockIdx.y * M;
    const long long step = (long long)gridDim.x * nw * R;
    long long row0 = ((long long)blockIdx.x * nw + (threadIdx.x >> 5)) * R;
    const long long tiles = (K + TILE - 1) / TILE;
    /* the start of the row group's ti-th tile in its order (32-bit: rows and tiles fit) */
    auto tile_k = [&](long long r0, long long ti) {
        return tiles == 1
                   ? 0
                   : (long long)(((unsigned)(r0 >> 1) + (unsigned)ti) % (unsigned)tiles) * TILE;
    };

    auto load = [&](uint4(&v)[R][U], long long r0, long long kt) {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < U; u++) {
                const long long kk = kt + (long long)VE * (32 * u + lane);
                if (r0 + r < N && kk < K)
                    v[r][u] = __ldcs(reinterpret_cast<const uint4 *>(w + (r0 + r) * K + kk));
                else
                    v[r][u] = make_uint4(0, 0, 0, 0);
            }
    };
    uint4 wv[R][U], wn[R][U];
    bool have_next = false; /* wn already holds the tile after wv's */
    /* A constant W may stream in while the step before still runs (with PIPE its first two
     * tiles); a W some step writes may not be read before pdl_wait. */
    const bool early = a.w_const && row0 < N;
    if (early) {
        load(wv, row0, tile_k(row0, 0));
        if (PIPE) {
            const long long r1 = tiles > 1 ? row0 : row0 + step;
            if (r1 < N) {
                load(wn, r1, tile_k(r1, tiles > 1 ? 1 : 0));
                have_next = true;
            }
        }
    }
    pdl_wait();
    if (!early && row0 < N)
        load(wv, row0, tile_k(row0, 0));
    stage<T, M, P>(a, m0, xs, red);
    pdl_trigger();

    const T *c = (const T *)a.c;
    T *y = (T *)a.y;
    float acc[M][R];
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[m][r] = 0.0f;
    /* wv holds tile ti of row group row0; the loop walks this warp's tiles in order */
    long long ti = 0;
    while (row0 < N) {
        const long long kt = tile_k(row0, ti);
        long long nrow = row0, nti = ti + 1;
        if (nti == tiles)
            nrow += step, nti = 0;
        if (PIPE && nrow < N && !have_next)
            load(wn, nrow, tile_k(nrow, nti));
        have_next = false;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const long long kk = kt + (long long)VE * (32 * u + lane);
            if (kk >= K)
                break;
#pragma unroll
            for (int m = 0; m < M; m++) {
                const uint4 xv = *reinterpret_cast<const uint4 *>(xs + m * K + kk);
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int e = 0; e < VE; e++)
                        acc[m][r] = fmaf(el<T>(wv[r][u], e), el<T>(xv, e), acc[m][r]);
            }
        }
        if (nti == 0) { /* the row group is done */
#pragma unroll
            for (int m = 0; m < M; m++)
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float s = warp_sum(acc[m][r]);
                    acc[m][r] = 0.0f;
                    const long long row = row0 + r, mm = m0 + m;
                    if (lane == ((m * R + r) & 31) && row < N && mm < a.m) {
                        float v = a.alpha * s;
                        if (c)
                            v += to_f(c[mm * N + row]);
                        y[mm * N + row] = from_f<T>(v);
                    }
                }
        }
        if (nrow < N) {
            if (PIPE) {
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int u = 0; u < U; u++)
                        wv[r][u] = wn[r][u];
            } else {
                load(wv, nrow, tile_k(nrow, nti));
            }
        }
        row0 = nrow, ti = nti;
    }
}

template <typename T, int M, int P> struct Pick {
    static void *kernel(int variant)
    {
        switch (variant) {
        case 1: return (void *)gemv_kernel<T, M, 2, 8, false, P>;
        case 2: return (void *)gemv_kernel<T, M, 1, 8, true, P>;
        default: return (void *)gemv_kernel<T, M, 1, 8, false, P>;
        }
    }
};

template <typename T, int P> static void *pick_m(int mt, int variant)
{
    switch (mt) {
    case 1: return Pick<T, 1, P>::kernel(variant);
    case 2: return Pick<T, 2, P>::kernel(variant);
    case 4: return Pick<T, 4, P>::kernel(variant);
    default: return Pick<T, 8, P>::kernel(variant);
    }
}

template <typename T> void *pick(int mt, int prologue, int variant)
{
    switch (prologue) {
    case BATON_GEMV_RMS: return pick_m<T, BATON_GEMV_RMS>(mt, variant);
    case BATON_GEMV_SWIGLU: return pick_m<T, BATON_GEMV_SWIGLU>(mt, variant);
    default: return pick_m<T, BATON_GEMV_PLAIN>(mt, variant);
    }
}

} /* namespace gv */
} /* namespace kcuda */

#define KCUDA_GEMV_FILE(T) template void *kcuda::gv::pick<T>(int, int, int);

#endif /* BATON_KCUDA_GEMV_KERNEL_CUH */
