/* decoder_kv_cache.cu: kv_cache_update on CUDA, rows written in place into a cache at positions
 * read on the device (index_copy_); a position out of range is clamped and recorded. */
#include "kernels/cuda/decoder_record.cuh"

namespace kcuda
{
namespace dec
{

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
/* KV_SMALL_VECS: up to this many 16-byte vectors (512 KB) kv_update_small_kernel takes the call. */
#define KV_SMALL_VECS (1 << 15)

/* Calls past KV_SMALL_VECS vectors, and rows not in 16-byte vectors. vec: the rows' 16-byte
 * vectors, vpr a row, over a grid-stride loop with KV_U vectors a thread in flight (one a thread, a
 * block per chunk of rows, held 1/4 of the copy's bytes in flight: 1.9x its time at 32 MB), each
 * loaded before its row's position is read; else a block per (row, chunk of blockDim.x * 16
 * bytes), a byte a thread. */
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

/* A 16-byte store that happens only when ok, as one predicated instruction: with a branch around a
 * plain store, ptxas moved the row's load into the branch, after the position it tests had
 * arrived (two memory latencies in series, 1.54 us where this takes 1.23). */
__device__ __forceinline__ void st16_if(void *p, uint4 v, int ok)
{
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.s32 q, %5, 0;\n\t"
                 "@q st.global.v4.u32 [%0], {%1, %2, %3, %4};\n\t}"
                 :
                 : "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(ok)
                 : "memory");
}

/* The few rows of a decode step (at most KV_SMALL_VECS vectors): a 16-byte vector a thread, no
 * loop and 32-bit index arithmetic, so that the two loads are a few instructions from the start
 * (the grid-stride kernel's prologue took 1.21x the copy of the same 2 KB; this takes 1.09x). */
template <typename I>
__global__ void kv_update_small_kernel(char *cache, const char *nw, const I *pos, int vpr, int nvec,
                                       long long S, long long row_bytes, long long src_stride,
                                       int step, int op)
{
    pdl_wait();
    pdl_trigger();
    const int g = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (g >= nvec)
        return;
    const int r = g < vpr ? 0 : g / vpr, k = (g - r * vpr) * 16;
    const uint4 v = ld16_cs_here(nw + r * src_stride + k);
    const long long p = ld_idx_here(pos, r);
    const int ok = p >= 0 && p < S;
    st16_if(cache + (ok ? p : 0) * row_bytes + k, v, ok); /* a write outside the cache is dropped */
    if (!ok && k == 0)
        record(op, step, r, p, S);
}
} /* namespace dec */
} /* namespace kcuda */

using namespace kcuda;
using namespace kcuda::dec;

DEC_PREPARE(kv_cache_update, DEC_KV_CACHE_UPDATE, 4)

/* The launch for positions of type I: a decode step's few rows on kv_update_small_kernel, the
 * rest on kv_update_kernel. */
template <typename I>
static int kv_launch(const baton_exec_ctx *ctx, void **buffers, const dec_shape &s,
                     long long row_bytes)
{
    char *cache = (char *)buffers[3];
    const char *nw = (const char *)buffers[1];
    const I *pos = (const I *)buffers[2];
    const int vec = row_bytes % 16 == 0 && al16(buffers[1]) && al16(buffers[3]);
    const long long vecs = s.rows * (row_bytes / 16);
    const int threads = vec ? (int)(vecs >= 256 ? 256 : (vecs + 31) / 32 * 32) : 256;
    if (vec && vecs > 0 && vecs <= KV_SMALL_VECS)
        return launch(ctx, "kv_cache_update", kv_update_small_kernel<I>,
                      (unsigned)((vecs + threads - 1) / threads), (unsigned)threads, 0, 1, cache,
                      nw, pos, (int)(row_bytes / 16), (int)vecs, (long long)s.S, row_bytes,
                      row_bytes, ctx->step_index, (int)DEC_KV_CACHE_UPDATE);
    const long long chunks = (row_bytes + threads * 16LL - 1) / (threads * 16LL);
    const long long grid = !vec        ? s.rows * chunks
                           : vecs == 0 ? 0
                                       : wave_grid(ctx, (const void *)kv_update_kernel<I>,
                                                   (vecs + KV_U - 1) / KV_U, threads);
    if (grid == 0)
        return 0;
    if (grid > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "kv_cache_update: too many rows for one launch");
    return launch(ctx, "kv_cache_update", kv_update_kernel<I>, (unsigned)grid, (unsigned)threads, 0,
                  1, cache, nw, pos, (long long)s.rows, (long long)s.S, row_bytes, chunks, vec,
                  ctx->step_index, row_bytes, (int)DEC_KV_CACHE_UPDATE);
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
    return s.idx_dt == BATON_DTYPE_I32 ? kv_launch<int>(ctx, buffers, s, row_bytes)
                                       : kv_launch<long long>(ctx, buffers, s, row_bytes);
}

DEC_RECORD_UNIT(kv_cache)
