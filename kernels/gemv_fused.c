/* gemv_fused.c: the descriptor and shape rules of rms_norm_gemm and swiglu_gemm_add
 * (gemv_fused.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/sig.h"
#include "kernels/gemv_fused.h"

const char *baton__gf_op_name(int op)
{
    return op == GF_RMS_NORM_GEMM     ? "rms_norm_gemm"
           : op == GF_SWIGLU_GEMM_ADD ? "swiglu_gemm_add"
                                      : "?";
}

int baton__gf_desc_from_attrs(int op, const baton_sig_args *a, baton_gemv_fused_desc *d, char *msg,
                              size_t len)
{
    memset(d, 0, sizeof *d);
    d->op = op;
    if (op != GF_RMS_NORM_GEMM)
        return 0;
    const baton_attr *e =
        a && a->n_attrs > 0 && a->attrs ? baton_attrs_find(a->attrs, a->n_attrs, "eps") : NULL;
    if (!e)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "rms_norm_gemm needs the attribute eps (the norm's epsilon, e.g. "
                                 "1e-5)");
    if (e->type == BATON_ATTR_FLOAT)
        d->eps = e->f;
    else if (e->type == BATON_ATTR_INT)
        d->eps = (double)e->i;
    else
        return baton__reason_set(msg, len, BATON_EPLAN, "attribute eps must be a number");
    if (!isfinite(d->eps) || d->eps <= 0)
        return baton__reason_set(msg, len, BATON_EPLAN, "eps is %g: it must be a finite number > 0",
                                 d->eps);
    return 0;
}

int baton__gf_desc_read(int op, const char *opaque, size_t len, baton_gemv_fused_desc *d, char *msg,
                        size_t cap)
{
    if (!opaque || len != sizeof *d)
        return baton__reason_set(msg, cap, BATON_EINVAL,
                                 "%s: the descriptor is %zu bytes, it must be %zu",
                                 baton__gf_op_name(op), len, sizeof *d);
    memcpy(d, opaque, sizeof *d);
    if (d->op != op)
        return baton__reason_set(msg, cap, BATON_EINVAL, "%s: the descriptor is for op %d, not %d",
                                 baton__gf_op_name(op), (int)d->op, op);
    if (d->pad != 0)
        return baton__reason_set(msg, cap, BATON_EINVAL,
                                 "%s: the descriptor's bytes 4 to 7 are %d: they must be 0",
                                 baton__gf_op_name(op), (int)d->pad);
    if (op == GF_RMS_NORM_GEMM && !(isfinite(d->eps) && d->eps > 0))
        return baton__reason_set(msg, cap, BATON_EINVAL, "rms_norm_gemm: eps %g is not > 0",
                                 d->eps);
    if (op != GF_RMS_NORM_GEMM && d->eps != 0)
        return baton__reason_set(msg, cap, BATON_EINVAL,
                                 "%s: field eps is %g but %s has no eps: it must be 0",
                                 baton__gf_op_name(op), d->eps, baton__gf_op_name(op));
    return 0;
}

/* "input 'h1'" (the plan's name) or, without plan names, the role: "x". */
static const char *tn(const baton_sig_args *a, int i, const char *role, char *buf, size_t cap)
{
    const char *nm = a->input_names ? a->input_names[i] : NULL;
    if (nm)
        snprintf(buf, cap, "input '%s' (%s)", nm, role);
    else
        snprintf(buf, cap, "%s", role);
    return buf;
}

static const char *role_of(int op, int i)
{
    static const char *const rms[3] = {"x", "g", "w"}, *const sw[3] = {"gu", "w", "c"};
    return op == GF_RMS_NORM_GEMM ? rms[i] : sw[i];
}

int baton__gf_shapes(int op, const baton_sig_args *a, gf_shape *s, baton_tensor_desc *expected,
                     char *msg, size_t len)
{
    const char *nm = baton__gf_op_name(op);
    const int n_in = 3;
    char b1[96], b2[96], s1[200], s2[200];
    if (!a || a->n_inputs != n_in || !a->inputs)
        return baton__reason_set(msg, len, BATON_EPLAN, "%s takes %d inputs (%s), got %d", nm, n_in,
                                 op == GF_RMS_NORM_GEMM ? "x, g, w" : "gu, w, c",
                                 a ? a->n_inputs : 0);
    if (a->n_outputs != 1)
        return baton__reason_set(msg, len, BATON_EPLAN, "%s writes 1 output, got %d", nm,
                                 a->n_outputs);
    const baton_tensor_desc *x = &a->inputs[0], *w = &a->inputs[op == GF_RMS_NORM_GEMM ? 2 : 1];
    const char *xr = op == GF_RMS_NORM_GEMM ? "x" : "gu";
    const int wi = op == GF_RMS_NORM_GEMM ? 2 : 1;
    for (int i = 0; i < n_in; i++) {
        int rc = dims_ok(&a->inputs[i], tn(a, i, role_of(op, i), b1, sizeof b1), msg, len);
        if (rc)
            return rc;
    }
    const baton_dtype dt = x->dtype;
    if (dt != BATON_DTYPE_F32 && dt != BATON_DTYPE_F64 && dt != BATON_DTYPE_BF16 &&
        dt != BATON_DTYPE_F16)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "%s is %s but %s takes f32, f64, bf16 or f16",
                                 tn(a, 0, xr, b1, sizeof b1), baton_dtype_name(dt), nm);
    for (int i = 1; i < n_in; i++)
        if (a->inputs[i].dtype != dt)
            return baton__reason_set(
                msg, len, BATON_EPLAN, "%s is %s but %s is %s: %s takes every tensor in one dtype",
                tn(a, i, role_of(op, i), b1, sizeof b1), baton_dtype_name(a->inputs[i].dtype),
                tn(a, 0, xr, b2, sizeof b2), baton_dtype_name(dt), nm);
    if (x->rank < 1)
        return baton__reason_set(msg, len, BATON_EPLAN, "%s is a scalar: it must be [..., %s]",
                                 tn(a, 0, xr, b1, sizeof b1), op == GF_RMS_NORM_GEMM ? "K" : "2K");
    if (w->rank != 2)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "%s has shape %s: it must be 2-D [N, K] (a Linear's weight as "
                                 "PyTorch stores it)",
                                 tn(a, wi, "w", b1, sizeof b1), shape_str(w, s1, sizeof s1));
    const int64_t n = w->shape[0], k = w->shape[1], xf = x->shape[x->rank - 1];
    const int64_t want = op == GF_RMS_NORM_GEMM ? k : 2 * k;
    if (xf != want)
        return baton__reason_set(
            msg, len, BATON_EPLAN, "%s has shape %s but w is %s: its last dim must be %lld%s",
            tn(a, 0, xr, b1, sizeof b1), shape_str(x, s1, sizeof s1), shape_str(w, s2, sizeof s2),
            (long long)want,
            op == GF_RMS_NORM_GEMM ? " (w's K)" : " (2 K: the gate's K features, then the up's)");
    int64_t m = 1;
    for (int i = 0; i < x->rank - 1; i++)
        m *= x->shape[i];
    baton_tensor_desc o;
    memset(&o, 0, sizeof o);
    o.dtype = dt;
    o.rank = x->rank;
    memcpy(o.shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
    o.shape[o.rank - 1] = n;
    if (op == GF_RMS_NORM_GEMM) {
        const baton_tensor_desc *g = &a->inputs[1];
        if (g->rank != 1 || g->shape[0] != k)
            return baton__reason_set(
                msg, len, BATON_EPLAN, "%s has shape %s: the norm's weight must be [%lld] (w's K)",
                tn(a, 1, "g", b1, sizeof b1), shape_str(g, s1, sizeof s1), (long long)k);
    } else {
        const baton_tensor_desc *c = &a->inputs[2];
        int same = c->rank == o.rank;
        for (int i = 0; same && i < o.rank; i++)
            same = c->shape[i] == o.shape[i];
        if (!same)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "%s has shape %s but the output is %s: c is added to the "
                                     "product, so it must have the output's shape",
                                     tn(a, 2, "c", b1, sizeof b1), shape_str(c, s1, sizeof s1),
                                     shape_str(&o, s2, sizeof s2));
    }
    if (s) {
        s->m = m, s->n = n, s->k = k;
        s->dt = dt;
    }
    if (expected)
        *expected = o;
    return 0;
}

int baton__gf_call_read(const baton_exec_ctx *ctx, int op, void **buffers, int n_buffers,
                        const char *opaque, size_t opaque_len, baton_gemv_fused_desc *d,
                        gf_shape *s)
{
    char msg[512];
    const char *nm = baton__gf_op_name(op);
    int rc = baton__gf_desc_read(op, opaque, opaque_len, d, msg, sizeof msg);
    if (rc)
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s", msg);
    if ((rc = baton__ctx_call_ok(ctx, nm, buffers, n_buffers)))
        return rc;
    if ((rc = baton__gf_shapes(op, ctx->sig, s, NULL, msg, sizeof msg)))
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s", msg);
    if (ctx->sig->outputs && ctx->sig->outputs[0].dtype != s->dt)
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s: the output is %s but must be %s", nm,
                               baton_dtype_name(ctx->sig->outputs[0].dtype),
                               baton_dtype_name(s->dt));
    return 0;
}
