/* rms_norm_bwd.cuh: what the files of the CUDA RMSNorm backward share. The backward is five
 * kernel families, one file each so that they compile in parallel (the build's critical path):
 * rms_norm_bwd_staged.cu (16-byte vectors staged in shared memory), rms_norm_bwd_rows_*.cu
 * (register rows, a file per x dtype), rms_norm_bwd_generic.cu (registers and streaming),
 * rms_norm_bwd_colsum.cu (grad_weight's column sum, and rms_norm_grad_weight),
 * rms_norm_bwd_split.cu (few long rows, two kernels); rms_norm_bwd.cu chooses among them and
 * launches. Each family's file instantiates its kernels for the 16 (x, weight) dtype pairs and
 * hands them out through the functions below. */
#ifndef BATON_KCUDA_RMS_NORM_BWD_CUH
#define BATON_KCUDA_RMS_NORM_BWD_CUH

#include "kernels/cuda/kcuda_common.cuh"

#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/rms_norm_cuda.h"
#include "kernels/cuda/rms_norm_layout.h"
#include "kernels/cuda/rms_norm_tune.h"
#include "kernels/desc_check.h"
#include "kernels/descriptors.h"

namespace kcuda
{

/* out[e] = from_acc(f[e]), two elements per conversion where the output is 16-bit and the
 * accumulation float (the same bits as one at a time). */
template <typename T, typename A, int VEC>
__device__ __forceinline__ void pack_vec(const A (&f)[VEC], T (&out)[VEC])
{
    if constexpr (sizeof(A) == 4 && VEC % 2 == 0 && std::is_same<T, __nv_bfloat16>::value) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2) {
            const __nv_bfloat162 p = __floats2bfloat162_rn(f[e], f[e + 1]);
            memcpy(&out[e], &p, sizeof p);
        }
    } else if constexpr (sizeof(A) == 4 && VEC % 2 == 0 && std::is_same<T, __half>::value) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2) {
            const __half2 p = __floats2half2_rn(f[e], f[e + 1]);
            memcpy(&out[e], &p, sizeof p);
        }
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++)
            out[e] = from_acc<T>(f[e]);
    }
}

struct BwdArgs {
    const void *g;
    const void *invvar;
    const void *x;
    const void *w;
    void *gi;
    void *pg;
    int64_t n1, n2;
    int64_t P;      /* part_grad rows */
    int64_t B;      /* rows per part_grad block: ceil(n1 / P) */
    int64_t active; /* blocks that hold rows: ceil(n1 / B); the rest are zeroed by colsum */
    int64_t chunk;
    int cx, cy;
    int stages;      /* staged kernel: rows in flight per block (1..4) */
    int kx;          /* register backward: clusters per part_grad block (chained when > 1) */
    int prefetch;    /* register backward (PF kernels): rounds of rows asked into L2 ahead */
    unsigned *chain; /* kx > 1: baton__kcuda_rms_chain_bytes of zeroed counters (in grad_weight) */
};

typedef void (*BwdKernel)(BwdArgs);

/* grad_weight[j] = the sum over p of part_grad[p][j], in one fixed shape per column: lane k of
 * KCUDA_COLSUM_LANES adds the rows p = k, k + 8, ... below `active` in order, then the lanes' sums
 * are added in lane order. The rows from `active` on hold zeros, which add nothing (a sum that
 * starts at +0 is never -0, so adding +0 leaves its bits), so leaving them out or not gives the
 * same bits: rms_norm_grad_weight sums all P rows of a part_grad whose trailing blocks came back
 * as zeros. The column sums (rms_norm_bwd_colsum.cu) and the split backward's finish add in this
 * shape. */
#define KCUDA_COLSUM_LANES 8

/* Lane `lane`'s sum of column j, its rows added in row order. BATCH (many rows: part_grad 256 has
 * 32 a lane) loads them KCUDA_COLSUM_BATCH at a time before adding any, so that their latencies
 * overlap: bf16 4096 x 4096's backward at part_grad 256 3 % faster on an H100 and an H200
 * (bench_kernels). A template flag, not a branch: with both loops in one kernel
 * the decode rows' backward lost 0.1-0.2 us. The bits are the same either way. */
#define KCUDA_COLSUM_BATCH 16
template <bool BATCH, typename A>
__device__ __forceinline__ A colsum_lane(const A *pg, int64_t n2, int64_t j, int lane,
                                         int64_t active)
{
    A s = 0;
    if constexpr (!BATCH) {
#pragma unroll 4
        for (int64_t p = lane; p < active; p += KCUDA_COLSUM_LANES)
            s += pg[p * n2 + j];
    } else {
        constexpr int64_t L = KCUDA_COLSUM_LANES, NB = KCUDA_COLSUM_BATCH;
        int64_t p = lane;
        for (; p + (NB - 1) * L < active; p += NB * L) {
            A v[NB];
#pragma unroll
            for (int k = 0; k < NB; k++)
                v[k] = pg[(p + k * L) * n2 + j];
#pragma unroll
            for (int k = 0; k < NB; k++)
                s += v[k];
        }
        for (; p < active; p += L)
            s += pg[p * n2 + j];
    }
    return s;
}

/* Adds the lanes' sums in lane order: lane(k) is lane k's sum. */
template <typename A, typename F> __device__ __forceinline__ A colsum_combine(F lane)
{
    A t = 0;
#pragma unroll
    for (int k = 0; k < KCUDA_COLSUM_LANES; k++)
        t += lane(k);
    return t;
}

/* rms_norm_bwd_staged.cu: the staged kernel (mode KCUDA_RMS_STAGED). */
template <typename TX, typename TW> BwdKernel bwd_staged_kernel();
/* rms_norm_bwd_rows_*.cu: the register backward at nv vectors per thread holding `rows` rows,
 * asking rows into L2 when pf; NULL where it is not compiled (the layout never asks for it). */
template <typename TX, typename TW> BwdKernel bwd_rows_kernel_for(int nv, int rows, bool pf);
/* rms_norm_bwd_generic.cu: the registers (stream false) or streaming kernel, scalar (vec1) or
 * of 16-byte vectors. */
template <typename TX, typename TW> BwdKernel bwd_generic_kernel(bool vec1, bool stream);
/* rms_norm_bwd_colsum.cu: grad_weight from part_grad's first `active` of P rows (A: float or
 * double). */
template <typename A, typename TW>
int launch_colsum(const baton_exec_ctx *ctx, const char *name, long long grid, A *pg, TW *gw,
                  int64_t P, int64_t active, int64_t n2);
/* rms_norm_bwd_split.cu: the split backward's two kernels, launched. */
template <typename TX, typename TW>
int bwd_split(const baton_exec_ctx *ctx, void **buffers, const baton_rms_norm_desc &d,
              const kcuda_rms_layout &L);

/* ---- the timeline (timeline builds only: rms_norm_cuda.h) ----------------------------------- */
#ifdef KCUDA_TIMELINE
static __device__ unsigned long long tl_main[KCUDA_TL_MAX_BLOCKS][KCUDA_TL_SLOTS];
static __device__ unsigned long long tl_colsum[KCUDA_TL_MAX_BLOCKS][KCUDA_TL_SLOTS];
__device__ __forceinline__ void tl_stamp(unsigned long long (*tl)[KCUDA_TL_SLOTS], int slot)
{
    if (threadIdx.x != 0 || blockIdx.x >= KCUDA_TL_MAX_BLOCKS)
        return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    tl[blockIdx.x][slot] = t;
    if (slot == KCUDA_TL_ENTRY) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        tl[blockIdx.x][KCUDA_TL_SM] = sm | (unsigned long long)gridDim.x << 32;
    }
}
#define TL_MAIN(slot)   tl_stamp(tl_main, KCUDA_TL_##slot)
#define TL_COLSUM(slot) tl_stamp(tl_colsum, KCUDA_TL_##slot)
struct tl_marks {
    __device__ void synced() const
    {
        TL_MAIN(SYNCED);
    }
    __device__ void combined() const
    {
        TL_MAIN(COMBINED);
    }
};
#else
#define TL_MAIN(slot)   ((void)0)
#define TL_COLSUM(slot) ((void)0)
typedef no_marks tl_marks;
#endif

} /* namespace kcuda */

/* The 16 (x, weight) dtype pairs, for the explicit instantiations of each family's file. */
#define KCUDA_BWD_PAIRS(X)                                                                         \
    X(__nv_bfloat16, __nv_bfloat16)                                                                \
    X(__nv_bfloat16, __half)                                                                       \
    X(__nv_bfloat16, float)                                                                        \
    X(__nv_bfloat16, double)                                                                       \
    X(__half, __nv_bfloat16)                                                                       \
    X(__half, __half)                                                                              \
    X(__half, float)                                                                               \
    X(__half, double)                                                                              \
    X(float, __nv_bfloat16)                                                                        \
    X(float, __half)                                                                               \
    X(float, float)                                                                                \
    X(float, double)                                                                               \
    X(double, __nv_bfloat16)                                                                       \
    X(double, __half)                                                                              \
    X(double, float)                                                                               \
    X(double, double)

#ifdef KCUDA_TIMELINE
/* Each family's file copies its own stamps (each rms_norm_bwd_rows_*.cu its main kernels', with
 * block 0's entry stamp in *entry to tell which ran last; rms_norm_bwd_colsum.cu the column
 * sum's); 0 or a CUDA error code. */
extern "C" int baton__kcuda_rms_bwd_timeline_rows_bf16(unsigned long long (*out)[KCUDA_TL_SLOTS],
                                                       unsigned long long *entry);
extern "C" int baton__kcuda_rms_bwd_timeline_rows_f16(unsigned long long (*out)[KCUDA_TL_SLOTS],
                                                      unsigned long long *entry);
extern "C" int baton__kcuda_rms_bwd_timeline_rows_f32(unsigned long long (*out)[KCUDA_TL_SLOTS],
                                                      unsigned long long *entry);
extern "C" int baton__kcuda_rms_bwd_timeline_colsum(unsigned long long (*out)[KCUDA_TL_SLOTS]);
#endif

#endif /* BATON_KCUDA_RMS_NORM_BWD_CUH */
