/* gemv.cu: the decode GEMV of baton's own, y = prologue(x) W^T (+ c) for a few rows of x, aimed
 * at the copy roofline of W's bytes: every lane issues all its 16-byte streaming loads of a tile
 * before the first FMA, x (after its prologue: none, RMSNorm or SwiGLU) is staged in shared
 * memory once per block, and the grid holds no more blocks than fit on the GPU at once. */
#include "kernels/cuda/gemv.cuh"

#include "kernels/gemv_fused.h"

namespace kcuda
{
namespace gv
{

/* Rows of W a warp takes in `variant` (gemv_kernel.cuh's Pick: R = 2 in variant 1). */
static int rows_per_warp(int variant)
{
    return variant == 1 ? 2 : 1;
}

/* Rows of x per block: the fewest of 1, 2, 4, 8 that hold all of m, or as many as fit in shared
 * memory. 0 when not even one row fits. */
static int row_tile(long long m, long long k, size_t esz)
{
    int mt = m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : 8;
    while (mt > 0 && (size_t)mt * (size_t)k * esz > SMEM_MAX)
        mt >>= 1;
    return mt;
}

} /* namespace gv */
} /* namespace kcuda */

using namespace kcuda;

extern "C" int baton__kcuda_gemv_supported(const baton_gemv_args *a, char *msg, size_t len)
{
    const size_t esz = dtype_bytes(a->dtype);
    if (a->dtype != BATON_DTYPE_BF16 && a->dtype != BATON_DTYPE_F16 && a->dtype != BATON_DTYPE_F32)
        return baton__reason_set(msg, len, BATON_ENOTSUP, "the GEMV takes bf16, f16 or f32, not %s",
                                 dtype_label(a->dtype));
    const long long ve = 16 / (long long)esz;
    if (a->m < 1 || a->n < 1 || a->k < 1)
        return baton__reason_set(msg, len, BATON_ENOTSUP, "empty product (m=%lld n=%lld k=%lld)",
                                 (long long)a->m, (long long)a->n, (long long)a->k);
    if (a->k % ve || a->ldx % ve)
        return baton__reason_set(msg, len, BATON_ENOTSUP,
                                 "K = %lld (row stride of x %lld) is not a multiple of %lld: the "
                                 "CUDA GEMV reads 16-byte vectors of %s",
                                 (long long)a->k, (long long)a->ldx, ve, dtype_label(a->dtype));
    if (gv::row_tile(a->m, a->k, esz) == 0)
        return baton__reason_set(msg, len, BATON_ENOTSUP,
                                 "K = %lld: a row of x (%lld bytes) does not fit in the %zu bytes "
                                 "of shared memory the CUDA GEMV stages it in",
                                 (long long)a->k, (long long)(a->k * (long long)esz), gv::SMEM_MAX);
    if (a->prologue == BATON_GEMV_RMS && !a->g)
        return baton__reason_set(msg, len, BATON_EINVAL, "the RMS prologue needs its weight g");
    return 0;
}

extern "C" int baton__kcuda_gemv(const baton_exec_ctx *ctx, const baton_gemv_args *a)
{
    char why[256];
    int rc = baton__kcuda_gemv_supported(a, why, sizeof why);
    if (rc)
        return baton__ctx_fail(ctx, rc, "%s", why);
    const uintptr_t addr =
        (uintptr_t)a->x | (uintptr_t)a->w | (uintptr_t)a->c | (uintptr_t)a->g | (uintptr_t)a->y;
    if (addr & 15)
        return baton__ctx_fail(ctx, BATON_EINVAL,
                               "the CUDA GEMV needs 16-byte aligned buffers (x=%p w=%p c=%p y=%p)",
                               a->x, a->w, a->c, a->y);
    const size_t esz = dtype_bytes(a->dtype);
    int variant = a->variant >= 0 && a->variant < BATON_GEMV_VARIANTS ? a->variant : 0;
    if (a->variant == BATON_GEMV_AUTO) /* bench_gemv, H200: the pipelined tile pays only when PDL
                                          hides the prologue; few rows or long rows want it */
        variant = !(ctx && ctx->pdl) ? 0 : a->n <= 2560 || a->k >= 8192 ? 2 : 1;
    const int mt = gv::row_tile(a->m, a->k, esz);
    void *kernel = a->dtype == BATON_DTYPE_BF16  ? gv::pick<__nv_bfloat16>(mt, a->prologue, variant)
                   : a->dtype == BATON_DTYPE_F16 ? gv::pick<__half>(mt, a->prologue, variant)
                                                 : gv::pick<float>(mt, a->prologue, variant);
    typedef void (*kfn)(gv::Args);
    kfn k = (kfn)kernel;
    const size_t smem = (size_t)mt * (size_t)a->k * esz;
    const long long rows_blk = (long long)(gv::THREADS / 32) * gv::rows_per_warp(variant);
    const long long want = (a->n + rows_blk - 1) / rows_blk;
    const long long ytiles = (a->m + mt - 1) / mt;
    if (prepare(k, ctx, "gemv", 1, want, gv::THREADS, smem, gv::SMEM_MAX, false) < 0)
        return BATON_ECUDA;
    int per_sm = 0;
    cudaError_t e = occupancy(ctx, (const void *)k, gv::THREADS, smem, &per_sm);
    if (e != cudaSuccess)
        return baton__ctx_fail(ctx, BATON_ECUDA,
                               "cudaOccupancyMaxActiveBlocksPerMultiprocessor"
                               "(gemv) failed: %s",
                               cudaGetErrorString(e));
    /* One wave: every block resident at once, so x is staged once per block and a constant W's
     * first tiles are in flight before the step before this one ends. */
    long long cap = (long long)sm_count(ctx) * (per_sm > 0 ? per_sm : 1) / ytiles;
    if (cap < 1)
        cap = 1;
    const long long grid = want < cap ? want : cap;
    gv::Args ka;
    ka.x = a->x;
    ka.w = a->w;
    ka.c = a->c;
    ka.g = a->g;
    ka.y = a->y;
    ka.m = a->m;
    ka.n = a->n;
    ka.k = a->k;
    ka.ldx = a->ldx;
    ka.alpha = a->alpha;
    ka.eps = a->eps;
    ka.w_const = a->w_const;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((unsigned)grid, (unsigned)ytiles, 1);
    cfg.blockDim = dim3(gv::THREADS, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0;
    cudaLaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = ctx && ctx->pdl ? 1 : 0;
    e = cudaLaunchKernelEx(&cfg, k, ka);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e != cudaSuccess)
        return baton__ctx_fail(ctx, BATON_ECUDA, "cudaLaunchKernelEx(gemv) failed: %s",
                               cudaGetErrorString(e));
    return 0;
}

/* ---- the fused targets (kernels/gemv_fused.h): the GEMV with its prologue ---------------------
 */

static int fused(int op, const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    baton_gemv_fused_desc d;
    gf_shape s;
    int rc = baton__gf_call_read(ctx, op, buffers, 4, opaque, len, &d, &s);
    if (rc)
        return rc;
    if (s.dt == BATON_DTYPE_F64)
        return baton__ctx_fail(ctx, BATON_ENOTSUP,
                               "%s on CUDA takes bf16, f16 or f32, not f64: place the step on cpu",
                               baton__gf_op_name(op));
    if (s.m == 0)
        return 0;
    baton_gemv_args a;
    memset(&a, 0, sizeof a);
    const bool rms = op == GF_RMS_NORM_GEMM;
    a.x = buffers[0];
    a.g = rms ? buffers[1] : NULL;
    a.w = rms ? buffers[2] : buffers[1];
    a.c = rms ? NULL : buffers[2];
    a.y = buffers[3];
    a.m = s.m, a.n = s.n, a.k = s.k, a.ldx = rms ? s.k : 2 * s.k;
    a.dtype = s.dt;
    a.prologue = rms ? BATON_GEMV_RMS : BATON_GEMV_SWIGLU;
    a.alpha = 1.0f;
    a.eps = (float)d.eps;
    /* W streams in before pdl_wait only when the runtime says it is a plan constant. */
    const baton_sig_args *sg = ctx->sig;
    a.w_const = sg && BATON_HAS_FIELD(sg, baton_sig_args, input_constant) && sg->input_constant &&
                sg->input_constant[rms ? 2 : 1];
    a.variant = BATON_GEMV_AUTO;
    return baton__kcuda_gemv(ctx, &a);
}

extern "C" int baton__kcuda_rms_norm_gemm(const baton_exec_ctx *ctx, void **buffers,
                                          const char *opaque, size_t len)
{
    return fused(GF_RMS_NORM_GEMM, ctx, buffers, opaque, len);
}

extern "C" int baton__kcuda_swiglu_gemm_add(const baton_exec_ctx *ctx, void **buffers,
                                            const char *opaque, size_t len)
{
    return fused(GF_SWIGLU_GEMM_ADD, ctx, buffers, opaque, len);
}
