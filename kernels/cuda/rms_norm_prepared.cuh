/* rms_norm_prepared.cuh: an RMSNorm call's decision kept between runs (the runtime's
 * ctx->prepared), for the forward and the backward alike. Deciding reads the tuner's tables and
 * the device's facts: too slow for every run of a small call. */
#ifndef BATON_KCUDA_RMS_NORM_PREPARED_CUH
#define BATON_KCUDA_RMS_NORM_PREPARED_CUH

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kcuda_common.cuh"
#include "kernels/cuda/rms_norm_layout.h"

namespace kcuda
{

/* A decision D with what it was decided for: the descriptor's bytes (up to OPAQUE; a longer one
 * is decided again on every call), the NB buffers' addresses modulo 16 (the layout reads their
 * alignment only), the device and the autotune setting (the variant depends on them). A call
 * equal in all of them is decided alike and only launches; anything else (the plan's dims
 * re-packed the descriptor, a bound buffer of another alignment) decides again and keeps that.
 * Decide is the op's int(ctx, buffers, opaque, len, const kcuda_rms_cfg *, D *). */
template <typename D, int NB, size_t OPAQUE> struct RmsPrepared {
    typedef D Decision;
    unsigned char opaque[OPAQUE];
    size_t len;
    unsigned char low[NB];
    int device, autotune;
    D c;

    bool matches(const baton_exec_ctx *ctx, void **buffers, const char *op, size_t n) const
    {
        if (n != len || memcmp(op, opaque, n) != 0 || ctx->device.index != device ||
            ctx->autotune != autotune)
            return false;
        for (int k = 0; k < NB; k++)
            if (((uintptr_t)buffers[k] & 15) != low[k])
                return false;
        return true;
    }

    template <typename Decide>
    int fill(const baton_exec_ctx *ctx, void **buffers, const char *op, size_t n, Decide decide)
    {
        len = 0; /* matches nothing until decided */
        const int rc = decide(ctx, buffers, op, n, (const kcuda_rms_cfg *)NULL, &c);
        if (rc || !op || n > sizeof opaque) /* kept only when it has a key */
            return rc;
        memcpy(opaque, op, n);
        len = n;
        for (int k = 0; k < NB; k++)
            low[k] = (unsigned char)((uintptr_t)buffers[k] & 15);
        device = ctx->device.index;
        autotune = ctx->autotune;
        return 0;
    }
};

/* The op's prepare: a P decided for this call, in *state (what: the op, for the message). */
template <typename P, typename Decide>
static int rms_prepare(const baton_exec_ctx *ctx, const char *what, void **buffers,
                       const char *opaque, size_t len, void **state, Decide decide)
{
    *state = NULL;
    P *p = (P *)calloc(1, sizeof *p);
    if (!p)
        return baton__ctx_fail(ctx, BATON_ENOMEM, "%s: out of memory", what);
    const int rc = p->fill(ctx, buffers, opaque, len, decide);
    if (rc) {
        free(p);
        return rc;
    }
    *state = p;
    return 0;
}

/* The op's call decided now, with the overrides o (the tuner's, the tests'; NULL: none), the
 * choice reported in *chosen (NULL: not asked). Launch is the op's int(ctx, buffers, const D &). */
template <typename D, typename Decide, typename Launch>
static int rms_cfg(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len,
                   const kcuda_rms_cfg *o, kcuda_rms_cfg *chosen, Decide decide, Launch launch)
{
    D c;
    const int rc = decide(ctx, buffers, opaque, len, o, &c);
    if (rc)
        return rc;
    baton__kcuda_rms_report(&c.L, chosen);
    return launch(ctx, buffers, c);
}

/* The op's call: the runtime's calls carry ctx->prepared, decided again where the call differs;
 * the XLA-ABI entry points and direct callers do not, and decide on every call. */
template <typename P, typename Decide, typename Launch>
static int rms_call(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len,
                    Decide decide, Launch launch)
{
    P *p = ctx ? (P *)ctx->prepared : NULL;
    if (!p)
        return rms_cfg<typename P::Decision>(ctx, buffers, opaque, len, NULL, NULL, decide, launch);
    if (!p->matches(ctx, buffers, opaque, len)) {
        const int rc = p->fill(ctx, buffers, opaque, len, decide);
        if (rc)
            return rc;
    }
    return launch(ctx, buffers, p->c);
}

} /* namespace kcuda */

#endif
