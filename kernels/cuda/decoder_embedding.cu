/* decoder_embedding.cu: embedding on CUDA, the rows of a table by index (F.embedding), i32 or i64
 * ids read on the device; an id out of range is clamped and recorded (decoder_record.cuh). */
#include "kernels/cuda/decoder_record.cuh"

namespace kcuda
{
namespace dec
{

/* An id clamped into [0, V) by selects (the caller records raw where it differs). */
__device__ __forceinline__ long long clamp_id(long long raw, long long V)
{
    return raw < 0 ? 0 : raw >= V ? V - 1 : raw;
}

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
    const long long id = clamp_id(raw, V);
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

/* Two rows a block (rows 2b and 2b + 1; the last block may hold one), 16 bytes of each a thread,
 * for many rows of at most 4 KB of 16-byte units: both ids' loads, then both rows' loads, are in
 * flight together, so that each block's wait for an id and then its row covers twice the bytes
 * (8192 rows of 896 bf16 were bound by that chain, a block a row). */
template <typename I>
__global__ void embedding_pair_kernel(const I *ids, const char *table, char *out, long long rows,
                                      long long V, long long row_bytes, int step)
{
    const long long r0 = 2LL * blockIdx.x, k = threadIdx.x * 16LL;
    const bool two = r0 + 1 < rows;
    pdl_wait(); /* ids and the table may be a predecessor's outputs */
    pdl_trigger();
    const long long raw0 = ld_idx(ids, r0), raw1 = two ? ld_idx(ids, r0 + 1) : 0;
    const long long id0 = clamp_id(raw0, V), id1 = clamp_id(raw1, V);
    if (k < row_bytes) {
        const uint4 a = __ldg(reinterpret_cast<const uint4 *>(table + id0 * row_bytes + k));
        uint4 b;
        if (two)
            b = __ldg(reinterpret_cast<const uint4 *>(table + id1 * row_bytes + k));
        *reinterpret_cast<uint4 *>(out + r0 * row_bytes + k) = a;
        if (two)
            *reinterpret_cast<uint4 *>(out + (r0 + 1) * row_bytes + k) = b;
    }
    if (threadIdx.x == 0) {
        if (raw0 != id0)
            record(DEC_EMBEDDING, step, r0, raw0, V);
        if (two && raw1 != id1)
            record(DEC_EMBEDDING, step, r0 + 1, raw1, V);
    }
}
} /* namespace dec */
} /* namespace kcuda */

using namespace kcuda;
using namespace kcuda::dec;

DEC_PREPARE(embedding, DEC_EMBEDDING, 3)

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
    /* rows of at most 4 KB a block each of the fewest warps that hold the row at 16 bytes a
     * thread, so that more blocks share a SM (8192 rows of 896 bf16: 1.16x the copy, where
     * 256-thread blocks, 144 of their threads idle, took 1.27x); longer rows in chunks of 256
     * threads */
    const int threads =
        row_bytes > 256 * 16 ? 256 : (int)std::max(32LL, (row_bytes + 511) / 512 * 32);
    const long long chunks = (row_bytes + threads * 16LL - 1) / (threads * 16LL);
    /* rows that fill the SMs many times over even two a block: two a block */
    if (vec && chunks == 1 && (s.rows + 1) / 2 >= 16 * sm_count(ctx) &&
        (s.rows + 1) / 2 <= 0x7fffffffLL) {
        const unsigned g = (unsigned)((s.rows + 1) / 2);
        return s.idx_dt == BATON_DTYPE_I32
                   ? launch(ctx, "embedding", embedding_pair_kernel<int>, g, threads, 0, 1,
                            (const int *)buffers[0], (const char *)buffers[1], (char *)buffers[2],
                            (long long)s.rows, (long long)s.V, row_bytes, ctx->step_index)
                   : launch(ctx, "embedding", embedding_pair_kernel<long long>, g, threads, 0, 1,
                            (const long long *)buffers[0], (const char *)buffers[1],
                            (char *)buffers[2], (long long)s.rows, (long long)s.V, row_bytes,
                            ctx->step_index);
    }
    const long long grid = s.rows * chunks;
    if (grid > 0x7fffffffLL)
        return baton__ctx_fail(ctx, BATON_EINVAL, "embedding: %lld rows is too many for one launch",
                               (long long)s.rows);
    return s.idx_dt == BATON_DTYPE_I32
               ? embedding_launch<int>(ctx, buffers, s, vec, row_bytes, chunks, grid, threads)
               : embedding_launch<long long>(ctx, buffers, s, vec, row_bytes, chunks, grid,
                                             threads);
}

DEC_RECORD_UNIT(embedding)
