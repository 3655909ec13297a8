/* rms_norm_tune.cu: the prepare-time tuning of the CUDA RMSNorm: times each variant that may
 * replace a call's chosen layout (rms_norm_layout.c: baton__kcuda_rms_variants, all bitwise equal
 * to it) on the call's own buffers with CUDA events, and caches the fastest per GPU name and shape
 * class (rms_norm_tune.c), where plain calls whose context asks for it (baton_exec_ctx.autotune)
 * find it. Never called while capturing. */
#include "kernels/cuda/kcuda_common.cuh"

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/rms_norm_cuda.h"
#include "kernels/cuda/rms_norm_layout.h"
#include "kernels/cuda/rms_norm_tune.h"
#include "kernels/descriptors.h"

namespace kcuda
{

typedef int (*CfgCall)(const baton_exec_ctx *, void **, const char *, size_t, const kcuda_rms_cfg *,
                       kcuda_rms_cfg *);

/* Timing: each candidate runs once untimed, then ROUNDS rounds time `reps` calls of every candidate
 * in turn (so that a clock or thermal drift falls on all of them), keeping each one's best round. A
 * variant replaces the default only when it is faster by more than MARGIN: two equal kernels must
 * not flip the choice from one process to the next on noise. */
#define TUNE_ROUNDS   3
#define TUNE_MARGIN   0.01
#define TUNE_ROUND_US 300.0 /* about this long per candidate and round */
#define TUNE_MAX_REPS 50

struct Events {
    cudaEvent_t a = nullptr, b = nullptr;
    ~Events()
    {
        if (a)
            cudaEventDestroy(a);
        if (b)
            cudaEventDestroy(b);
    }
};

/* Times `reps` calls of variant v; *us per call. Returns 0, or the call's or CUDA's error (with
 * the reason in ctx's errbuf). */
static int time_calls(const baton_exec_ctx *ctx, CfgCall call, void **buffers, const char *opaque,
                      size_t len, const kcuda_rms_variant &v, int reps, Events &ev, double *us)
{
    kcuda_rms_cfg o;
    memset(&o, 0, sizeof o);
    o.variant = v;
    cudaStream_t s = (cudaStream_t)ctx->stream;
    cudaError_t e = cudaEventRecord(ev.a, s);
    for (int i = 0; e == cudaSuccess && i < reps; i++) {
        const int rc = call(ctx, buffers, opaque, len, &o, NULL);
        if (rc)
            return rc;
    }
    if (e == cudaSuccess)
        e = cudaEventRecord(ev.b, s);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(ev.b);
    float ms = 0;
    if (e == cudaSuccess)
        e = cudaEventElapsedTime(&ms, ev.a, ev.b);
    if (e != cudaSuccess)
        return baton__ctx_fail(ctx, BATON_ECUDA,
                               "rms_norm tuning: timing with CUDA events failed: %s",
                               cudaGetErrorString(e));
    *us = 1000.0 * ms / reps;
    return 0;
}

static void describe_variant(const kcuda_rms_layout &L0, int bwd, const baton_rms_norm_desc &d,
                             const kcuda_rms_device &dev, const kcuda_rms_variant &v, char *buf,
                             size_t cap)
{
    kcuda_rms_layout t = L0;
    if (!kcuda_rms_variant_none(&v) &&
        baton__kcuda_rms_apply_variant(&d, bwd, &dev, &v, &t, NULL, 0))
        t = L0;
    baton__kcuda_rms_describe(&t, bwd, buf, cap);
}

static int tune(int bwd, const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len,
                char *note, size_t note_len)
{
    const char *what = bwd ? "rms_norm_bwd" : "rms_norm_fwd";
    if (note && note_len)
        note[0] = 0;
    baton_rms_norm_desc d;
    char why[512];
    int rc = baton__kcuda_rms_check(what, buffers, bwd ? 7 : 4, opaque, len, bwd, NULL, &d, NULL,
                                    why, sizeof why);
    if (rc)
        return baton__ctx_fail(ctx, rc, "%s", why);
    if (!ctx || !ctx->stream)
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s tuning: needs a context with a stream", what);
    if (ctx->capturing)
        return baton__ctx_fail(
            ctx, BATON_ESTATE,
            "%s tuning: cannot time while a graph is being captured (tune at prepare)", what);
    const DeviceFacts facts = device_facts(ctx);
    kcuda_rms_device dev;
    dev.sms = facts.sms;
    dev.smem_optin = facts.smem_optin;
    dev.max_cluster = KCUDA_MAX_CLUSTER;
    kcuda_rms_layout L0;
    rc = bwd ? baton__kcuda_rms_bwd_layout(&d, buffers, &dev, NULL, &L0, why, sizeof why)
             : baton__kcuda_rms_fwd_layout(&d, buffers, &dev, NULL, &L0, why, sizeof why);
    if (rc)
        return baton__ctx_fail(ctx, rc, "%s", why);
    const char *gpu = device_name(ctx);
    kcuda_rms_variant cand[KCUDA_RMS_MAX_VARIANTS];
    const int n = baton__kcuda_rms_variants(&d, bwd, &dev, &L0, cand, KCUDA_RMS_MAX_VARIANTS);
    char chosen[160];
    kcuda_rms_tune_key key;
    baton__kcuda_rms_tune_key_make(&key, gpu, bwd, &d, &L0);
    kcuda_rms_variant have;
    if (n <= 1) {
        baton__kcuda_rms_describe(&L0, bwd, chosen, sizeof chosen);
        snprintf(note, note_len, "%s (default: no other variant for this shape)", chosen);
        return 0;
    }
    if (baton__kcuda_rms_tune_find(&key, &have)) {
        describe_variant(L0, bwd, d, dev, have, chosen, sizeof chosen);
        snprintf(note, note_len, "%s (%s; measured earlier for this shape class on %s)", chosen,
                 !kcuda_rms_variant_none(&have) ? "tuned" : "default", gpu);
        return 0;
    }

    baton_exec_ctx c = *ctx;
    c.pdl = 0;
    c.autotune = 0;
    const CfgCall call = bwd ? baton__kcuda_rms_norm_bwd_cfg : baton__kcuda_rms_norm_fwd_cfg;
    Events ev;
    cudaError_t e = cudaEventCreate(&ev.a);
    if (e == cudaSuccess)
        e = cudaEventCreate(&ev.b);
    if (e != cudaSuccess)
        return baton__ctx_fail(ctx, BATON_ECUDA, "%s tuning: cudaEventCreate failed: %s", what,
                               cudaGetErrorString(e));
    /* One call of each, untimed but for the default's, which sets the repetitions. A variant
     * that cannot run here (a 16-block cluster that shrank to 8, say) drops out. */
    double best[KCUDA_RMS_MAX_VARIANTS];
    int ok[KCUDA_RMS_MAX_VARIANTS];
    double first = 0;
    for (int i = 0; i < n; i++) {
        best[i] = 1e30;
        rc = time_calls(&c, call, buffers, opaque, len, cand[i], 1, ev, &first);
        ok[i] = rc == 0;
        if (rc && (i == 0 || rc != BATON_EINVAL))
            return rc; /* the reason is in ctx's errbuf */
        if (rc && c.errbuf && c.errbuf_len)
            c.errbuf[0] = 0;
    }
    rc = time_calls(&c, call, buffers, opaque, len, cand[0], 1, ev, &first);
    if (rc)
        return rc;
    int reps = first > 0 ? (int)(TUNE_ROUND_US / first) : TUNE_MAX_REPS;
    reps = reps < 3 ? 3 : reps > TUNE_MAX_REPS ? TUNE_MAX_REPS : reps;
    for (int r = 0; r < TUNE_ROUNDS; r++)
        for (int i = 0; i < n; i++) {
            if (!ok[i])
                continue;
            double us = 0;
            if ((rc = time_calls(&c, call, buffers, opaque, len, cand[i], reps, ev, &us)))
                return rc;
            if (us < best[i])
                best[i] = us;
        }
    int w = 0;
    for (int i = 1; i < n; i++)
        if (ok[i] && best[i] < best[w])
            w = i;
    if (w && best[w] > best[0] * (1.0 - TUNE_MARGIN))
        w = 0;
    if (baton__kcuda_rms_tune_store(&key, &cand[w]))
        w = 0; /* the cache is full: plain calls keep the default, so say so */
    describe_variant(L0, bwd, d, dev, cand[w], chosen, sizeof chosen);
    int measured = 0;
    for (int i = 0; i < n; i++)
        measured += ok[i];
    if (w)
        snprintf(note, note_len,
                 "%s (tuned: %.1f us against %.1f us for the default, %d variants measured on %s)",
                 chosen, best[w], best[0], measured, gpu);
    else
        snprintf(note, note_len, "%s (default: measured fastest, %.1f us, of %d variants on %s)",
                 chosen, best[0], measured, gpu);
    return 0;
}

} /* namespace kcuda */

using namespace kcuda;

extern "C" int baton__kcuda_rms_norm_fwd_tune(const baton_exec_ctx *ctx, void **buffers,
                                              const char *opaque, size_t len, char *note,
                                              size_t note_len)
{
    return tune(0, ctx, buffers, opaque, len, note, note_len);
}

extern "C" int baton__kcuda_rms_norm_bwd_tune(const baton_exec_ctx *ctx, void **buffers,
                                              const char *opaque, size_t len, char *note,
                                              size_t note_len)
{
    return tune(1, ctx, buffers, opaque, len, note, note_len);
}
