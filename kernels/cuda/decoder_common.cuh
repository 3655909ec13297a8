/* decoder_common.cuh: what the decoder ops' CUDA files share. The ops are a file each
 * (decoder_embedding.cu, decoder_rope.cu, decoder_kv_cache.cu, decoder_attention.cu,
 * decoder_prefill.cu, decoder_elementwise.cu, decoder_softmax.cu, decoder_sample.cu), so that they
 * compile in parallel. Aimed at the memory roofline of an H100/H200 at batch 1: 16-byte loads
 * wherever rows allow them, shapes from ctx->sig on every call and positions read on the device (a
 * captured graph stays valid as the sequence grows). An index out of range is clamped, never
 * followed, and recorded (decoder_record.cuh). */
#ifndef BATON_KCUDA_DECODER_COMMON_CUH
#define BATON_KCUDA_DECODER_COMMON_CUH

#include "kernels/cuda/kcuda_common.cuh"

#include <math.h>

#include "kernels/cuda/cuda_decoder.h"
#include "kernels/decoder_desc.h"

namespace kcuda
{
namespace dec
{

/* An index (i32 or i64) as 64 bits, through the read-only path. */
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

/* Streaming store: written once and not read back by this kernel (softmax's outputs). */
template <typename T> __device__ __forceinline__ void st16_stream(T *p, const U16<T> &u)
{
    __stcs(reinterpret_cast<uint4 *>(p), *reinterpret_cast<const uint4 *>(u.v));
}

__host__ __device__ static inline bool al16(const void *p)
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

/* ---- host side ----------------------------------------------------------------------------------
 */

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

/* A decoder file's error record, for the host side (decoder_record.cuh, decoder_errors.cu). */
struct DecRecordUnit {
    const char *name;
    cudaError_t (*take)(unsigned long long rec[4]); /* the current device's, cleared when set */
    cudaError_t (*mirror)(unsigned long long *dp);  /* where its kernels copy their first error */
};

/* Blocks of `threads` threads (no dynamic shared memory) of `kernel` resident on a SM, or
 * `fallback` where the runtime cannot say. */
static inline int per_sm_or(const baton_exec_ctx *ctx, const void *kernel, int threads,
                            int fallback)
{
    int per_sm = 0;
    if (occupancy(ctx, kernel, threads, 0, &per_sm) != cudaSuccess || per_sm < 1) {
        (void)cudaGetLastError();
        per_sm = fallback;
    }
    return per_sm;
}

/* The grid of a grid-stride kernel over `work` items, a thread each: one block per `threads`
 * items up to one full wave of the kernel's resident blocks (a second partial wave would leave
 * SMs idle at its end). */
static inline int wave_grid(const baton_exec_ctx *ctx, const void *kernel, long long work,
                            int threads)
{
    const int per_sm = per_sm_or(ctx, kernel, threads, 2048 / threads);
    long long b = (work + threads - 1) / threads, cap = (long long)per_sm * sm_count(ctx);
    return (int)(b < 1 ? 1 : b > cap ? cap : b);
}

/* Whether clusters of 8 blocks of 1024 threads of `kernel` can run on ctx's device (asked once
 * per device and kernel: a MIG slice or a small GPU may not hold one). */
static inline bool cluster8_ok(const baton_exec_ctx *ctx, const void *kernel, size_t smem)
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

} /* namespace dec */
} /* namespace kcuda */

#endif /* BATON_KCUDA_DECODER_COMMON_CUH */
