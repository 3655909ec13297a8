/* rms_norm_bwd.cu: the RMSNorm backward on CUDA, for the 16 (x, weight) dtype pairs: grad_input in
 * one pass over grad_output and x, a deterministic grad_weight through the part_grad buffer that
 * kernels/descriptors.h defines, and the split two-kernel backward for few long rows. This file
 * chooses among the kernel families (rms_norm_bwd.cuh; rms_norm_layout.c chooses the layout) and
 * launches them. No allocation, no synchronisation. */
#include "kernels/cuda/kcuda_common.cuh"

#include <type_traits>

#include "kernels/cuda/rms_norm_bwd.cuh"
#include "kernels/cuda/rms_norm_prepared.cuh"

namespace kcuda
{

template <typename TX, typename TW> static BwdKernel bwd_kernel_for(const kcuda_rms_layout &L)
{
    if (L.mode == KCUDA_RMS_ROWS)
        return sizeof(TX) > 4 || sizeof(TW) > 4 /* register rows: x and w of at most 4 bytes */
                   ? NULL
                   : bwd_rows_kernel_for<TX, TW>(L.nv, L.stages, L.variant.prefetch > 0);
    if (L.mode == KCUDA_RMS_STAGED)
        return bwd_staged_kernel<TX, TW>();
    return bwd_generic_kernel<TX, TW>(L.vec == 1, L.mode == KCUDA_RMS_STREAM);
}

/* A layout that names a kernel this build does not compile: the layout and the kernel's
 * BwdRowsFit disagree, a bug to report rather than a launch of NULL. */
static int no_kernel(const baton_exec_ctx *ctx, const kcuda_rms_layout &L)
{
    return baton__ctx_fail(
        ctx, BATON_ENOTSUP,
        "rms_norm_bwd: no kernel for mode %d, %d vectors per thread, %d threads, %d "
        "rows held (the layout and rms_norm_bwd.cu disagree: please report it)",
        L.mode, L.nv, L.threads, L.stages);
}

/* cudaOccupancyMaxActiveClusters for the register backward at cluster size cy (0 on error). */
struct ClusterAsk {
    BwdKernel k;
    int threads;
    size_t smem;
    cudaStream_t stream;
};

static int clusters_at(void *u, int cy)
{
    const ClusterAsk *q = static_cast<const ClusterAsk *>(u);
    int n = 0;
    if (max_active_clusters((const void *)q->k, (unsigned)cy, q->threads, q->smem, cy, q->stream,
                            &n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

/* baton__kcuda_rms_fit_cy for L (the register backward) with the CUDA runtime's answers for the
 * kernel of the layout's own rows held, remembered per kernel for the last (device, threads, shared
 * memory, blocks, rows per block) asked: only a new shape pays the occupancy queries. Returns 0, or
 * BATON_ECUDA with the reason in ctx's errbuf. */
template <typename TX, typename TW>
static int bwd_fit_cy(const baton_exec_ctx *ctx, const baton_rms_norm_desc &d,
                      kcuda_rms_device *dev, size_t smem_max, kcuda_rms_layout *L)
{
    /* The kernel of the layout's own rows held, and its shared memory at any cy > 1. */
    kcuda_rms_layout Lf = *L;
    Lf.stages = L->fit_stages;
    Lf.variant = kcuda_rms_variant{0, 0, 0}; /* the layout's own kernel: no variant moves cy */
    baton__kcuda_rms_bwd_set_cy(&Lf, &d, 1, 2);
    const BwdKernel k = bwd_kernel_for<TX, TW>(Lf);
    if (!k)
        return no_kernel(ctx, Lf);
    const size_t smem = Lf.smem;
    const int devno = device_of(ctx);
    /* Everything the fit reads besides the kernel: the rows per part_grad block (to 1024: the
     * chain's cap is at most 16 * KCUDA_BWD_CHAIN_MAX * 2 * 8), whether and how the chain may
     * run. The answer is (kx - 1) * 32 + cy. */
    const int64_t bc = L->B < 1024 ? L->B : 1024;
    const int64_t need = L->fit_blocks > L->active ? L->fit_blocks : L->active;
    const bool keyable = devno >= 0 && devno < 64 && L->threads % 32 == 0 &&
                         L->threads <= KCUDA_MAX_THREADS && smem / 16 < (1u << 14) &&
                         need < (1 << 13) && L->kx >= 0 && L->kx <= KCUDA_BWD_CHAIN_MAX;
    const uint64_t key =
        keyable ? (1ull << 55) | (uint64_t)devno << 49 | (uint64_t)(L->threads / 32 - 1) << 45 |
                      (uint64_t)(smem / 16) << 31 | (uint64_t)need << 18 | (uint64_t)(bc - 1) << 8 |
                      (uint64_t)(dev->max_cluster > 8) << 7 | (uint64_t)(L->chain_ok != 0) << 6 |
                      (uint64_t)L->kx << 3
                : 0;
    int got = 0;
    if (fit_get((const void *)k, key, &got)) {
        baton__kcuda_rms_bwd_set_cy(L, &d, got / 32 + 1, got % 32);
        return 0;
    }
    /* Clusters above 8 need the non-portable attribute before the runtime can count them. */
    int rc = prepare(k, ctx, "rms_norm_bwd", dev->max_cluster, (long long)dev->max_cluster,
                     L->threads, smem, smem_max, true, false);
    if (rc < 0)
        return BATON_ECUDA;
    if (rc > 0)
        dev->max_cluster = 8;
    int per_sm = 0;
    cudaError_t e = occupancy(ctx, (const void *)k, L->threads, smem, &per_sm);
    if (e != cudaSuccess)
        return baton__ctx_fail(
            ctx, BATON_ECUDA,
            "cudaOccupancyMaxActiveBlocksPerMultiprocessor(rms_norm_bwd, %d threads) "
            "failed: %s",
            L->threads, cudaGetErrorString(e));
    ClusterAsk q = {k, L->threads, smem, ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0};
    const int cy = baton__kcuda_rms_fit_cy(L, &d, dev, per_sm, clusters_at, &q);
    fit_put((const void *)k, key, (L->kx - 1) * 32 + cy);
    return 0;
}

/* A call decided: its descriptor decoded, its layout (the tuned variant applied, cy fitted) and
 * what launches it: the split backward's launcher, or the main kernel (its attributes set) and
 * the column sum's launcher, typed for the call's dtypes. */
typedef int (*BwdSplitFn)(const baton_exec_ctx *, void **, const baton_rms_norm_desc &,
                          const kcuda_rms_layout &);
typedef int (*ColsumFn)(const baton_exec_ctx *, void **, long long, int64_t, int64_t, int64_t);
struct BwdDecision {
    baton_rms_norm_desc d;
    kcuda_rms_layout L;
    BwdKernel k;
    BwdSplitFn split; /* the split backward, or NULL */
    ColsumFn colsum;
};

/* launch_colsum on the call's part_grad (buffers[6]) and grad_weight (buffers[5]). */
template <typename A, typename TW>
static int colsum_of(const baton_exec_ctx *ctx, void **buffers, long long grid, int64_t P,
                     int64_t active, int64_t n2)
{
    return launch_colsum(ctx, "rms_norm_bwd grad_weight", grid, (A *)buffers[6], (TW *)buffers[5],
                         P, active, n2);
}

template <typename TX, typename TW>
static int bwd_decide(const baton_exec_ctx *ctx, void **buffers, int64_t unsharded,
                      const kcuda_rms_cfg *o, BwdDecision *out)
{
    using A = typename acc_of<TX>::type;
    const baton_rms_norm_desc &d = out->d;
    kcuda_rms_layout &L = out->L;
    /* buffers: grad_output, invvar, x, weight | grad_input, grad_weight, part_grad */
    const DeviceFacts facts = device_facts(ctx);
    kcuda_rms_device dev;
    dev.sms = facts.sms;
    dev.smem_optin = facts.smem_optin;
    dev.max_cluster = KCUDA_MAX_CLUSTER;
    const size_t smem_max = (size_t)baton__kcuda_rms_smem_max(&dev);
    char why[512];
    out->split = NULL;
    out->k = NULL;
    out->colsum = colsum_of<A, TW>;
    for (;;) {
        int rc = baton__kcuda_rms_bwd_layout(&d, buffers, &dev, o, &L, why, sizeof why);
        if (rc)
            return baton__ctx_fail(ctx, rc, "%s", why);
        if (!o && ctx && ctx->autotune)
            baton__kcuda_rms_apply_tuned(device_name(ctx), 1, &d, &dev, &L);
        if (unsharded > L.fit_blocks) /* a row shard: cy as the unsharded call fits it */
            L.fit_blocks = unsharded;
        if (L.fit_cy && (rc = bwd_fit_cy<TX, TW>(ctx, d, &dev, smem_max, &L)) != 0)
            return rc;
        if (L.mode == KCUDA_RMS_SPLIT) {
            out->split = bwd_split<TX, TW>;
            return 0;
        }
        const int cl = L.cx * L.cy;
        const BwdKernel k = bwd_kernel_for<TX, TW>(L);
        if (!k)
            return no_kernel(ctx, L);
        rc = prepare(k, ctx, "rms_norm_bwd", cl, L.grid, L.threads, L.smem, smem_max, L.may_shrink,
                     kcuda_rms_max_carveout(&L));
        if (rc > 0) { /* 16-block clusters cannot run here */
            dev.max_cluster = 8;
            continue;
        }
        if (rc < 0)
            return BATON_ECUDA;
        out->k = k;
        return 0;
    }
}

static int bwd_launch(const baton_exec_ctx *ctx, void **buffers, const BwdDecision &c)
{
    const baton_rms_norm_desc &d = c.d;
    const kcuda_rms_layout &L = c.L;
    if (c.split)
        return c.split(ctx, buffers, d, L);
    BwdArgs a;
    a.g = buffers[0];
    a.invvar = buffers[1];
    a.x = buffers[2];
    a.w = buffers[3];
    a.gi = buffers[4];
    a.pg = buffers[6];
    a.n1 = d.n1;
    a.n2 = d.n2;
    a.P = L.P;
    a.B = L.B;
    a.active = L.active;
    a.chunk = L.chunk;
    a.cx = L.cx;
    a.cy = L.cy;
    a.stages = L.stages;
    a.kx = L.mode == KCUDA_RMS_ROWS && L.kx > 1 ? L.kx : 1;
    a.prefetch = L.mode == KCUDA_RMS_ROWS ? L.variant.prefetch : 0;
    a.chain = a.kx > 1 ? static_cast<unsigned *>(buffers[5]) : NULL;
    const baton_exec_ctx *lc = ctx;
    const baton_exec_ctx c1 = with_pdl(ctx, false);
    if (a.kx > 1) {
        /* The chain's counters, in grad_weight until the column sum writes it. The kernel then
         * waits for the memset as a whole (no programmatic dependent launch). */
        const cudaStream_t st = ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0;
        const size_t bytes = baton__kcuda_rms_chain_bytes(L.active, L.cy);
        const cudaError_t e = cudaMemsetAsync(a.chain, 0, bytes, st);
        if (e != cudaSuccess)
            return baton__ctx_fail(
                ctx, BATON_ECUDA,
                "rms_norm_bwd: cudaMemsetAsync of the chain's %zu bytes failed: %s", bytes,
                cudaGetErrorString(e));
        lc = &c1;
    }
    int rc = launch(lc, "rms_norm_bwd", c.k, (unsigned)L.grid, (unsigned)L.threads, L.smem,
                    L.cx * L.cy, a);
    if (rc)
        return rc;
    /* The column sum reads part_grad only after its pdl_wait: its blocks wait on the SMs that the
     * main kernel leaves free (see pdl_trigger there). */
    const baton_exec_ctx c2 = with_pdl(ctx, true);
    return c.colsum(&c2, buffers, L.colsum_grid, L.P, L.active, d.n2);
}

template <typename TX>
static int bwd_decide_w(const baton_exec_ctx *ctx, void **b, int64_t u, const kcuda_rms_cfg *o,
                        BwdDecision *out)
{
    switch (out->d.w_dtype) {
    case BATON_DTYPE_BF16: return bwd_decide<TX, __nv_bfloat16>(ctx, b, u, o, out);
    case BATON_DTYPE_F16: return bwd_decide<TX, __half>(ctx, b, u, o, out);
    case BATON_DTYPE_F32: return bwd_decide<TX, float>(ctx, b, u, o, out);
    default: return bwd_decide<TX, double>(ctx, b, u, o, out);
    }
}

/* Checks and decodes the descriptor, then decides the call (the override o: NULL to choose). */
static int bwd_decide_call(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                           size_t len, const kcuda_rms_cfg *o, BwdDecision *out)
{
    int64_t u = 0;
    char why[512];
    const int rc = baton__kcuda_rms_check("rms_norm_bwd", buffers, 7, opaque, len, 1, o, &out->d,
                                          &u, why, sizeof why);
    if (rc)
        return baton__ctx_fail(ctx, rc, "%s", why);
    switch (out->d.x_dtype) {
    case BATON_DTYPE_BF16: return bwd_decide_w<__nv_bfloat16>(ctx, buffers, u, o, out);
    case BATON_DTYPE_F16: return bwd_decide_w<__half>(ctx, buffers, u, o, out);
    case BATON_DTYPE_F32: return bwd_decide_w<float>(ctx, buffers, u, o, out);
    default: return bwd_decide_w<double>(ctx, buffers, u, o, out);
    }
}

/* What a step keeps from prepare (ctx->prepared), keyed as rms_norm_prepared.cuh says. */
typedef RmsPrepared<BwdDecision, 7, 64> BwdPrepared;

} /* namespace kcuda */

using namespace kcuda;

extern "C" int baton__kcuda_rms_norm_bwd_cfg(const baton_exec_ctx *ctx, void **buffers,
                                             const char *opaque, size_t len, const kcuda_rms_cfg *o,
                                             kcuda_rms_cfg *chosen)
{
    return rms_cfg<BwdDecision>(ctx, buffers, opaque, len, o, chosen, bwd_decide_call, bwd_launch);
}

extern "C" int baton__kcuda_rms_norm_bwd_prepare(const baton_exec_ctx *ctx, void **buffers,
                                                 const char *opaque, size_t len, void **state)
{
    return rms_prepare<BwdPrepared>(ctx, "rms_norm_bwd", buffers, opaque, len, state,
                                    bwd_decide_call);
}

/* The runtime's calls carry ctx->prepared (rms_call); the XLA-ABI entry points and direct
 * callers decide on every call. */
extern "C" int baton__kcuda_rms_norm_bwd(const baton_exec_ctx *ctx, void **buffers,
                                         const char *opaque, size_t len)
{
    return rms_call<BwdPrepared>(ctx, buffers, opaque, len, bwd_decide_call, bwd_launch);
}

#ifdef KCUDA_TIMELINE
extern "C" int baton__kcuda_rms_bwd_timeline(unsigned long long (*main)[KCUDA_TL_SLOTS],
                                             int *n_main,
                                             unsigned long long (*colsum)[KCUDA_TL_SLOTS],
                                             int *n_colsum)
{
    int e = (int)cudaDeviceSynchronize();
    /* The main kernels' stamps are in the file of each x dtype: the one whose block 0 entered last
     * holds the last launch's. */
    int (*const files[3])(unsigned long long(*)[KCUDA_TL_SLOTS], unsigned long long *) = {
        baton__kcuda_rms_bwd_timeline_rows_bf16, baton__kcuda_rms_bwd_timeline_rows_f16,
        baton__kcuda_rms_bwd_timeline_rows_f32};
    int last = 0;
    unsigned long long latest = 0;
    for (int f = 0; f < 3 && e == 0; f++) {
        unsigned long long entry = 0;
        e = files[f](NULL, &entry);
        if (e == 0 && entry > latest)
            latest = entry, last = f;
    }
    if (e == 0)
        e = files[last](main, &latest);
    if (e == 0)
        e = baton__kcuda_rms_bwd_timeline_colsum(colsum);
    if (e != 0)
        return e;
    /* every block records its grid's size beside its SM */
    *n_main = (int)(main[0][KCUDA_TL_SM] >> 32);
    *n_colsum = (int)(colsum[0][KCUDA_TL_SM] >> 32);
    return 0;
}
#endif
