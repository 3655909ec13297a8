/* builtin.c: the signatures of baton's built-in kernels (what dtypes and shapes each accepts, what
 * its outputs are, how its attributes become the descriptor of kernels/descriptors.h) and the
 * table of built-in targets that baton_registry_create() adds. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/dtype.h"
#include "core/sig.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/desc_check.h"
#include "kernels/descriptors.h"
#include "targets/builtin.h"
#include "targets/decoder.h"
#ifdef BATON_CUDA
#include "kernels/cuda/cuda_decoder.h"
#include "kernels/cuda/cuda_kernels.h"
#endif

/* ---- helpers ----------------------------------------------------------------------------------
 */

static int64_t numel(const baton_tensor_desc *d)
{
    int64_t n = 1;
    for (int i = 0; i < d->rank; i++)
        n *= d->shape[i];
    return n;
}

static int counts_ok(const baton_sig_args *a, int n_in, int n_out, const char *target, char *msg,
                     size_t len)
{
    if (!a || a->n_inputs != n_in || (n_in && !a->inputs))
        return baton__reason_set(msg, len, BATON_EPLAN, "%s takes %d input%s, got %d", target, n_in,
                                 n_in == 1 ? "" : "s", a ? a->n_inputs : 0);
    if (a->n_outputs != n_out)
        return baton__reason_set(msg, len, BATON_EPLAN, "%s writes %d output%s, got %d", target,
                                 n_out, n_out == 1 ? "" : "s", a->n_outputs);
    if (a->n_attrs > 0 && !a->attrs)
        return baton__reason_set(msg, len, BATON_EPLAN, "%s: attrs missing", target);
    return 0;
}

/* The plan's name of output i, or NULL when the caller gave no names. */
static const char *out_name(const baton_sig_args *a, int i)
{
    return a->output_names && i < a->n_outputs ? a->output_names[i] : NULL;
}

static const baton_attr *find_attr(const baton_sig_args *a, const char *name)
{
    return a->n_attrs > 0 ? baton_attrs_find(a->attrs, a->n_attrs, name) : NULL;
}

/* A float attribute (an INT is accepted: `"eps": 0` is a float). Must be finite. */
static int attr_float(const baton_sig_args *a, const char *name, double def, int required,
                      double *out, char *msg, size_t len)
{
    const baton_attr *at = find_attr(a, name);
    *out = def;
    if (!at) {
        if (required)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "attribute %s is required (a number, e.g. \"%s\": 1.0)", name,
                                     name);
        return 0;
    }
    if (at->type == BATON_ATTR_FLOAT)
        *out = at->f;
    else if (at->type == BATON_ATTR_INT)
        *out = (double)at->i;
    else
        return baton__reason_set(msg, len, BATON_EPLAN, "attribute %s must be a number", name);
    if (!isfinite(*out))
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "attribute %s is %g: it must be a finite number", name, *out);
    return 0;
}

static int attr_int(const baton_sig_args *a, const char *name, int64_t def, int64_t *out, char *msg,
                    size_t len)
{
    const baton_attr *at = find_attr(a, name);
    *out = def;
    if (!at)
        return 0;
    if (at->type == BATON_ATTR_INT) {
        *out = at->i;
        return 0;
    }
    if (at->type == BATON_ATTR_FLOAT && at->f == floor(at->f) && fabs(at->f) < 9e15) {
        *out = (int64_t)at->f;
        return 0;
    }
    return baton__reason_set(msg, len, BATON_EPLAN, "attribute %s must be an integer", name);
}

/* ---- a plan's own descriptor -------------------------------------------------------------------
 * A plan's "opaque" replaces the descriptor pack() would build, and the kernels trust it, so each
 * check decodes it (kernels/desc_check.c: its own ranges) and compares it field by field with what
 * the step's tensors and attributes give. A mismatch names the field and both values. */

static int opaque_bad(char *msg, size_t len, const char *why)
{
    return baton__reason_set(msg, len, BATON_EPLAN, "\"opaque\": %s" BATON_OPAQUE_FIX, why);
}

/* An integer field: `have` from the bytes, `want` as the tensors give it: "... but <tensor>
 * <shape> has <want> <unit>". */
static int opaque_int(const char *field, int64_t have, int64_t want, const char *tensor,
                      const baton_tensor_desc *t, const char *unit, char *msg, size_t len)
{
    if (have == want)
        return 0;
    char sh[200];
    return baton__reason_set(
        msg, len, BATON_EPLAN,
        "\"opaque\" field %s is %lld but %s %s %s has %lld %s" BATON_OPAQUE_FIX, field,
        (long long)have, tensor, baton_dtype_name(t->dtype), shape_str(t, sh, sizeof sh),
        (long long)want, unit);
}

static const char *code_name(int32_t code)
{
    return code >= BATON_DTYPE_BF16 && code < BATON_DTYPE_COUNT
               ? baton_dtype_name((baton_dtype)code)
               : "no dtype";
}

/* A dtype field; `tutorial`: the bytes hold the JAX tutorial's ElementType (baton's code - 1). */
static int opaque_dtype(const char *field, int32_t have, int32_t want, const char *tensor,
                        int tutorial, char *msg, size_t len)
{
    if (have == want)
        return 0;
    const char *kind = tutorial ? "ElementType" : "code";
    const int off = tutorial ? 1 : 0;
    return baton__reason_set(
        msg, len, BATON_EPLAN,
        "\"opaque\" field %s is %s %d (%s) but %s is %s (%s %d)" BATON_OPAQUE_FIX, field, kind,
        (int)have - off, code_name(have), tensor, code_name(want), kind, (int)want - off);
}

int baton__opaque_attr(const baton_sig_args *a, const char *field, double have, const char *attr,
                       double want, char *msg, size_t len)
{
    if (!find_attr(a, attr) || have == want)
        return 0;
    return baton__reason_set(msg, len, BATON_EPLAN,
                             "\"opaque\" field %s is %.17g but attribute %s is %.17g: give one, or "
                             "the same value in both",
                             field, have, attr, want);
}

/* The name a message gives input i: the plan's name, else its role. */
static const char *in_name(const baton_sig_args *a, int i, const char *role)
{
    return a->input_names && i < a->n_inputs && a->input_names[i] ? a->input_names[i] : role;
}

/* ---- rms_norm ---------------------------------------------------------------------------------
 */

typedef struct rms_info {
    int64_t n1, n2;
    baton_dtype invvar_dtype;
    baton_tensor_desc rows; /* x's leading dims ([1] if none): the shape of invvar */
} rms_info;

static int rms_resolve(const baton_tensor_desc *x, const baton_tensor_desc *w, const char *target,
                       rms_info *info, char *msg, size_t len)
{
    char s1[200], s2[200];
    if (!dtype_is_float(x->dtype))
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "x is %s but %s takes x in bf16, f16, f32 or f64",
                                 baton_dtype_name(x->dtype), target);
    if (!dtype_is_float(w->dtype))
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "weight is %s but %s takes the weight in bf16, f16, f32 or f64",
                                 baton_dtype_name(w->dtype), target);
    int rc = dims_ok(x, "x", msg, len);
    if (rc == 0)
        rc = dims_ok(w, "weight", msg, len);
    if (rc)
        return rc;
    if (w->rank == 0)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "weight is a scalar (shape []): its shape must equal the normalized (last) "
            "dims of x %s, e.g. [%lld]",
            shape_str(x, s1, sizeof s1), (long long)(x->rank ? x->shape[x->rank - 1] : 1));
    if (w->rank > x->rank)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "weight %s has more dims than x %s: the weight's shape must equal x's last "
            "dims (the normalized ones)",
            shape_str(w, s1, sizeof s1), shape_str(x, s2, sizeof s2));
    int off = x->rank - w->rank;
    for (int i = 0; i < w->rank; i++) {
        if (x->shape[off + i] != w->shape[i]) {
            baton_tensor_desc tail = {.dtype = x->dtype, .rank = w->rank};
            memcpy(tail.shape, x->shape + off, sizeof(int64_t) * (size_t)w->rank);
            char s3[200];
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "weight %s has %lld elements but x's trailing dims %s (%lld) do not "
                "match: the weight's shape must equal x's last %d dim%s (x is %s)",
                shape_str(w, s1, sizeof s1), (long long)numel(w), shape_str(&tail, s3, sizeof s3),
                (long long)numel(&tail), w->rank, w->rank == 1 ? "" : "s",
                shape_str(x, s2, sizeof s2));
        }
    }
    info->n2 = numel(w);
    info->n1 = numel(x) / info->n2;
    info->invvar_dtype = x->dtype == BATON_DTYPE_F64 ? BATON_DTYPE_F64 : BATON_DTYPE_F32;
    memset(&info->rows, 0, sizeof info->rows);
    info->rows.dtype = info->invvar_dtype;
    if (off == 0) {
        info->rows.rank = 1;
        info->rows.shape[0] = 1;
    } else {
        info->rows.rank = off;
        memcpy(info->rows.shape, x->shape, sizeof(int64_t) * (size_t)off);
    }
    return 0;
}

static int rms_eps(const baton_sig_args *a, double *eps, char *msg, size_t len)
{
    int rc = attr_float(a, "eps", 1e-5, 0, eps, msg, len);
    if (rc)
        return rc;
    if (*eps < 0)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "eps is %g: it must be >= 0 (it is added to mean(x^2); 1e-5 is usual)", *eps);
    return 0;
}

/* The plan's rms_norm_fwd/bwd descriptor (baton's layout or the tutorial's) against the step:
 * n1, n2 and the dtypes from x and the weight, part_grad_size (bwd) from part_grad's rows, eps
 * and unsharded_part_grad_size against their attributes where the plan gives those too. */
static int rms_opaque_check(const baton_sig_args *a, int bwd, const rms_info *info, double eps,
                            int64_t pgs, int64_t unsharded, char *msg, size_t len)
{
    baton_rms_norm_shard_desc d;
    int tut;
    char why[320];
    if (baton__rms_norm_desc_decode(a->opaque, a->opaque_len, bwd, &d, &tut, why, sizeof why))
        return opaque_bad(msg, len, why);
    const int xi = bwd ? 2 : 0, wi = bwd ? 3 : 1;
    const baton_tensor_desc *x = &a->inputs[xi], *w = &a->inputs[wi];
    char xn[80], wn[80];
    snprintf(xn, sizeof xn, "x '%.64s'", in_name(a, xi, "x"));
    snprintf(wn, sizeof wn, "weight '%.64s'", in_name(a, wi, "weight"));
    int rc = opaque_int("n1", d.rms.n1, info->n1, xn, x, "rows", msg, len);
    if (rc == 0)
        rc = opaque_int("n2", d.rms.n2, info->n2, wn, w, "elements", msg, len);
    if (rc == 0)
        rc = opaque_dtype(tut ? "x_type" : "x_dtype", d.rms.x_dtype, (int32_t)x->dtype, xn, tut,
                          msg, len);
    if (rc == 0)
        rc = opaque_dtype(tut ? "w_type" : "w_dtype", d.rms.w_dtype, (int32_t)w->dtype, wn, tut,
                          msg, len);
    if (rc == 0)
        rc = baton__opaque_attr(a, "eps", d.rms.eps, "eps", eps, msg, len);
    if (rc || !bwd)
        return rc;
    if (d.rms.part_grad_size != pgs) {
        const baton_tensor_desc *pg = a->n_outputs > 2 && a->outputs ? &a->outputs[2] : NULL;
        const char *pn = out_name(a, 2);
        char sh[200];
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "\"opaque\" field part_grad_size is %lld but part_grad '%.64s'%s%s "
            "has %lld rows (part_grad_size %lld)" BATON_OPAQUE_FIX,
            (long long)d.rms.part_grad_size, pn ? pn : "part_grad", pg ? " " : "",
            pg ? shape_str(pg, sh, sizeof sh) : "", (long long)pgs, (long long)pgs);
    }
    if (find_attr(a, "unsharded_part_grad_size") && d.unsharded_part_grad_size != unsharded)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "\"opaque\" field unsharded_part_grad_size is %lld but attribute "
            "unsharded_part_grad_size is %lld: give one, or the same value in both",
            (long long)d.unsharded_part_grad_size, (long long)unsharded);
    return 0;
}

static int rms_fwd_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg,
                         size_t len)
{
    rms_info info;
    double eps;
    int rc = counts_ok(a, 2, 2, "rms_norm_fwd", msg, len);
    if (rc == 0)
        rc = rms_resolve(&a->inputs[0], &a->inputs[1], "rms_norm_fwd", &info, msg, len);
    if (rc == 0)
        rc = rms_eps(a, &eps, msg, len);
    if (rc == 0 && a->opaque)
        rc = rms_opaque_check(a, 0, &info, eps, 0, 0, msg, len);
    if (rc)
        return rc;
    if (expected) {
        expected[0] = a->inputs[0];
        expected[0].dtype = a->inputs[1].dtype;
        expected[1] = info.rows;
    }
    return 0;
}

/* The rows P of a declared part_grad of shape [P] + weight's shape, or [P, n2] (then *flat is set
 * when that differs from the first form); 0 when part_grad is declared some other way, which the
 * validator then reports against the expected shape. */
static int64_t rms_declared_part_grad(const baton_sig_args *a, const baton_tensor_desc *w,
                                      int64_t n2, int *flat)
{
    *flat = 0;
    if (a->n_outputs < 3 || !a->outputs)
        return 0;
    const baton_tensor_desc *pg = &a->outputs[2];
    if (pg->rank < 1 || pg->shape[0] < 1)
        return 0;
    if (pg->rank == w->rank + 1 &&
        memcmp(pg->shape + 1, w->shape, sizeof(int64_t) * (size_t)w->rank) == 0)
        return pg->shape[0];
    if (pg->rank == 2 && pg->shape[1] == n2) {
        *flat = 1;
        return pg->shape[0];
    }
    return 0;
}

/* unsharded: 0 (absent), or the part_grad_size of the call that this step is a row shard of
 * (scripts/shard.py sets it), at least this step's own. */
static int rms_bwd_resolve(const baton_sig_args *a, rms_info *info, double *eps, int64_t *pgs,
                           int64_t *unsharded, int *flat, char *msg, size_t len)
{
    int rc = counts_ok(a, 4, 3, "rms_norm_bwd", msg, len);
    if (rc)
        return rc;
    const baton_tensor_desc *g = &a->inputs[0], *iv = &a->inputs[1], *x = &a->inputs[2],
                            *w = &a->inputs[3];
    rc = rms_resolve(x, w, "rms_norm_bwd", info, msg, len);
    if (rc)
        return rc;
    char s1[200], s2[200];
    if (g->dtype != w->dtype)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "grad_output is %s but the weight is %s: grad_output has the dtype of the "
            "forward output y, which is the weight's (%s)",
            baton_dtype_name(g->dtype), baton_dtype_name(w->dtype), baton_dtype_name(w->dtype));
    if (g->rank != x->rank || memcmp(g->shape, x->shape, sizeof(int64_t) * (size_t)x->rank) != 0)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "grad_output has shape %s but x has %s: they must be equal",
                                 shape_str(g, s1, sizeof s1), shape_str(x, s2, sizeof s2));
    if (iv->dtype != info->invvar_dtype)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "invvar is %s but must be %s (f32, or f64 when x is f64): pass the invvar "
            "output of rms_norm_fwd",
            baton_dtype_name(iv->dtype), baton_dtype_name(info->invvar_dtype));
    rc = dims_ok(iv, "invvar", msg, len);
    if (rc)
        return rc;
    if (numel(iv) != info->n1)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "invvar has shape %s (%lld elements) but x has %lld rows: invvar must be %s, "
            "one value per row",
            shape_str(iv, s1, sizeof s1), (long long)numel(iv), (long long)info->n1,
            shape_str(&info->rows, s2, sizeof s2));
    rc = rms_eps(a, eps, msg, len);
    if (rc)
        return rc;
    /* part_grad may be declared [P] + weight's shape or, as the JAX tutorial's abstract evaluation
     * has it, [P, n2]. Without the attribute, P comes from that declaration; otherwise the default
     * sizes the buffer to the work: one row block per row up to 256, enough blocks to fill a GPU
     * without writing rows of zeros for short inputs. */
    int64_t declared = rms_declared_part_grad(a, w, info->n2, flat);
    const baton_attr *given = find_attr(a, "part_grad_size");
    rc = attr_int(a, "part_grad_size",
                  declared > 0     ? declared
                  : info->n1 < 256 ? info->n1
                                   : 256,
                  pgs, msg, len);
    if (rc)
        return rc;
    if (*pgs < 1)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "part_grad_size is %lld: it must be >= 1 (the number of row blocks whose "
            "partial sums form grad_weight; the default is min(rows, 256))",
            (long long)*pgs);
    if (given && declared > 0 && *pgs != declared) {
        /* Name the tensor as the plan does, both row counts and each of the three fixes. */
        const char *pg = out_name(a, 2);
        char tname[300], s3[200];
        snprintf(tname, sizeof tname, "%s%s%s", pg ? "'" : "part_grad", pg ? pg : "",
                 pg ? "'" : "");
        baton_tensor_desc fix = a->outputs[2];
        fix.shape[0] = *pgs;
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "part_grad_size is %lld but part_grad%s%s is declared %s, with %lld "
            "rows: they must agree; set \"part_grad_size\": %lld, or leave the "
            "attribute out (the declaration then decides), or declare %s as %s",
            (long long)*pgs, pg ? " " : "", pg ? tname : "",
            shape_str(&a->outputs[2], s1, sizeof s1), (long long)declared, (long long)declared,
            tname, shape_str(&fix, s3, sizeof s3));
    }
    if (*pgs > INT64_MAX / info->n2)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "part_grad_size %lld times %lld normalized elements overflows",
                                 (long long)*pgs, (long long)info->n2);
    if (!*flat && w->rank + 1 > BATON_MAX_RANK)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "the weight has rank %d, so part_grad ([part_grad_size] + weight shape) would "
            "exceed rank %d: reshape the weight to fewer dims",
            w->rank, BATON_MAX_RANK);
    rc = attr_int(a, "unsharded_part_grad_size", 0, unsharded, msg, len);
    if (rc)
        return rc;
    if (find_attr(a, "unsharded_part_grad_size") && *unsharded < *pgs)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "unsharded_part_grad_size is %lld but part_grad_size is %lld: it must be "
            "at least part_grad_size (it is the part_grad_size of the call that "
            "this step is a row shard of: for N equal shards, N times this step's), "
            "or leave it out",
            (long long)*unsharded, (long long)*pgs);
    return 0;
}

static int rms_bwd_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg,
                         size_t len)
{
    rms_info info;
    double eps;
    int64_t pgs;
    int flat;
    int64_t unsharded;
    int rc = rms_bwd_resolve(a, &info, &eps, &pgs, &unsharded, &flat, msg, len);
    if (rc == 0 && a->opaque)
        rc = rms_opaque_check(a, 1, &info, eps, pgs, unsharded, msg, len);
    if (rc)
        return rc;
    if (expected) {
        const baton_tensor_desc *w = &a->inputs[3];
        expected[0] = a->inputs[2];
        expected[1] = *w;
        memset(&expected[2], 0, sizeof expected[2]);
        expected[2].dtype = info.invvar_dtype;
        expected[2].shape[0] = pgs;
        if (flat) {
            expected[2].rank = 2;
            expected[2].shape[1] = info.n2;
        } else {
            expected[2].rank = w->rank + 1;
            memcpy(expected[2].shape + 1, w->shape, sizeof(int64_t) * (size_t)w->rank);
        }
    }
    return 0;
}

int baton__put_desc(const void *desc, size_t size, char *opaque, size_t cap)
{
    if (!opaque || cap < size)
        return BATON_EINVAL;
    memcpy(opaque, desc, size);
    return (int)size;
}

static int rms_fwd_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    char msg[256];
    rms_info info;
    double eps;
    int rc = counts_ok(a, 2, 2, "rms_norm_fwd", msg, sizeof msg);
    if (rc == 0)
        rc = rms_resolve(&a->inputs[0], &a->inputs[1], "rms_norm_fwd", &info, msg, sizeof msg);
    if (rc == 0)
        rc = rms_eps(a, &eps, msg, sizeof msg);
    if (rc)
        return rc;
    baton_rms_norm_desc d = {.n1 = info.n1,
                             .n2 = info.n2,
                             .eps = eps,
                             .x_dtype = (int32_t)a->inputs[0].dtype,
                             .w_dtype = (int32_t)a->inputs[1].dtype,
                             .part_grad_size = 0};
    return baton__put_desc(&d, sizeof d, opaque, cap);
}

static int rms_bwd_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    char msg[256];
    rms_info info;
    double eps;
    int64_t pgs;
    int flat;
    int64_t unsharded;
    int rc = rms_bwd_resolve(a, &info, &eps, &pgs, &unsharded, &flat, msg, sizeof msg);
    if (rc)
        return rc;
    /* The tutorial's 40 bytes, or 48 with unsharded_part_grad_size where the plan sets it. */
    baton_rms_norm_shard_desc d = {{.n1 = info.n1,
                                    .n2 = info.n2,
                                    .eps = eps,
                                    .x_dtype = (int32_t)a->inputs[2].dtype,
                                    .w_dtype = (int32_t)a->inputs[3].dtype,
                                    .part_grad_size = pgs},
                                   unsharded};
    return baton__put_desc(&d, unsharded ? sizeof d : sizeof d.rms, opaque, cap);
}

/* ---- rms_norm_grad_weight ----------------------------------------------------------------------
 * grad_weight from rms_norm_bwd's part_grad, e.g. after an all_gather of the part_grads of row
 * shards. The weight is an input only for its descriptor: grad_weight takes its dtype and shape,
 * as in rms_norm_bwd, so the plan names them in one place and a wrong declaration is caught. */

static int rms_gw_resolve(const baton_sig_args *a, baton_rms_grad_weight_desc *d, char *msg,
                          size_t len)
{
    const char *t = "rms_norm_grad_weight";
    int rc = counts_ok(a, 2, 1, t, msg, len);
    if (rc)
        return rc;
    const baton_tensor_desc *pg = &a->inputs[0], *w = &a->inputs[1];
    char s1[200], s2[200];
    if (!dtype_is_float(w->dtype))
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "weight is %s but %s takes the weight in bf16, f16, f32 or f64",
                                 baton_dtype_name(w->dtype), t);
    if (pg->dtype != BATON_DTYPE_F32 && pg->dtype != BATON_DTYPE_F64)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "part_grad is %s but must be f32 (f64 when x is f64): pass the "
                                 "part_grad output of rms_norm_bwd",
                                 baton_dtype_name(pg->dtype));
    rc = dims_ok(w, "weight", msg, len);
    if (rc == 0)
        rc = dims_ok(pg, "part_grad", msg, len);
    if (rc)
        return rc;
    if (w->rank == 0)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "weight is a scalar (shape []): pass the weight of the rms_norm_bwd "
            "step that wrote part_grad");
    const int64_t n2 = numel(w);
    const int full = pg->rank == w->rank + 1 &&
                     memcmp(pg->shape + 1, w->shape, sizeof(int64_t) * (size_t)w->rank) == 0;
    const int flat = pg->rank == 2 && pg->shape[1] == n2;
    if (!full && !flat)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "part_grad has shape %s but the weight is %s: part_grad must be [P] + "
            "the weight's shape or [P, %lld], as rms_norm_bwd writes it",
            shape_str(pg, s1, sizeof s1), shape_str(w, s2, sizeof s2), (long long)n2);
    memset(d, 0, sizeof *d);
    d->part_grad_size = pg->shape[0];
    d->n2 = n2;
    d->pg_dtype = (int32_t)pg->dtype;
    d->w_dtype = (int32_t)w->dtype;
    return 0;
}

static int rms_gw_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t len)
{
    baton_rms_grad_weight_desc d = {0}, have; /* GCC 12 -O3 cannot see rms_gw_resolve fill it */
    int rc = rms_gw_resolve(a, &d, msg, len);
    if (rc == 0 && a->opaque) {
        char why[320], pn[80], wn[80];
        if (baton__rms_grad_weight_desc_decode(a->opaque, a->opaque_len, &have, why, sizeof why))
            return opaque_bad(msg, len, why);
        snprintf(pn, sizeof pn, "part_grad '%.64s'", in_name(a, 0, "part_grad"));
        snprintf(wn, sizeof wn, "weight '%.64s'", in_name(a, 1, "weight"));
        rc = opaque_int("part_grad_size", have.part_grad_size, d.part_grad_size, pn, &a->inputs[0],
                        "rows", msg, len);
        if (rc == 0)
            rc = opaque_int("n2", have.n2, d.n2, wn, &a->inputs[1], "elements", msg, len);
        if (rc == 0)
            rc = opaque_dtype("pg_dtype", have.pg_dtype, d.pg_dtype, pn, 0, msg, len);
        if (rc == 0)
            rc = opaque_dtype("w_dtype", have.w_dtype, d.w_dtype, wn, 0, msg, len);
    }
    if (rc == 0 && expected)
        expected[0] = a->inputs[1];
    return rc;
}

static int rms_gw_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    baton_rms_grad_weight_desc d;
    char msg[256];
    int rc = rms_gw_resolve(a, &d, msg, sizeof msg);
    return rc ? rc : baton__put_desc(&d, sizeof d, opaque, cap);
}

/* ---- elementwise ------------------------------------------------------------------------------
 */

/* Resolves an elementwise step into its descriptor; `ints` says whether i32/i64 are accepted. */
static int ew_resolve(const baton_sig_args *a, const char *target, int n_in, int ints,
                      baton_ew_desc *d, char *msg, size_t len)
{
    int rc = counts_ok(a, n_in, 1, target, msg, len);
    if (rc)
        return rc;
    const baton_tensor_desc *x = &a->inputs[0];
    const char *xname = n_in == 2 ? "a" : "x";
    if (!dtype_is_float(x->dtype) && !(ints && dtype_is_int(x->dtype)))
        return baton__reason_set(
            msg, len, BATON_EPLAN, "%s is %s but %s takes %s", xname, baton_dtype_name(x->dtype),
            target, ints ? "bf16, f16, f32, f64, i32 or i64" : "bf16, f16, f32 or f64");
    rc = dims_ok(x, xname, msg, len);
    if (rc)
        return rc;
    memset(d, 0, sizeof *d);
    d->n = numel(x);
    d->dtype = (int32_t)x->dtype;
    if (n_in == 2) {
        const baton_tensor_desc *b = &a->inputs[1];
        char s1[200], s2[200];
        if (b->dtype != x->dtype)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "a is %s but b is %s: %s needs both in one dtype (%s)",
                                     baton_dtype_name(x->dtype), baton_dtype_name(b->dtype), target,
                                     baton_dtype_name(x->dtype));
        rc = dims_ok(b, "b", msg, len);
        if (rc)
            return rc;
        /* b's leading 1s are broadcast dims; the rest must be a's trailing dims. */
        int lead = 0;
        while (lead < b->rank && b->shape[lead] == 1)
            lead++;
        int ok = b->rank <= x->rank;
        for (int i = lead; ok && i < b->rank; i++)
            ok = b->shape[i] == x->shape[x->rank - b->rank + i];
        if (!ok)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "b has shape %s but a has %s: b must have a's shape or a's trailing dims "
                "(e.g. [%lld]; leading 1s are allowed), and then repeats over a's leading "
                "dims",
                shape_str(b, s1, sizeof s1), shape_str(x, s2, sizeof s2),
                (long long)(x->rank ? x->shape[x->rank - 1] : 1));
        d->nb = numel(b);
    }
    return 0;
}

static int ew_check_out(const baton_sig_args *a, baton_tensor_desc *expected)
{
    if (expected)
        expected[0] = a->inputs[0];
    return 0;
}

static double dtype_max_finite(baton_dtype dt)
{
    switch (dt) {
    case BATON_DTYPE_BF16: return 3.3895313892515355e38; /* 0x7f7f */
    case BATON_DTYPE_F16: return 65504.0;
    case BATON_DTYPE_F32: return FLT_MAX;
    default: return DBL_MAX;
    }
}

/* A scalar attribute must be representable in x's dtype: an integer within range for i32/i64,
 * finite once rounded for the floats (as the plan's "fill" init requires), so that 1e300 on f32
 * is refused here rather than turning every element into inf. */
static int scalar_fits(const char *name, double v, baton_dtype dt, char *msg, size_t len)
{
    if (dtype_is_int(dt)) {
        double lim = dt == BATON_DTYPE_I32 ? 2147483648.0 : 9223372036854775808.0;
        if (v != floor(v) || v >= lim || v < -lim)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "%s is %.17g but x is %s: give an integer value within %s's range, "
                "or make x a float tensor",
                name, v, baton_dtype_name(dt), baton_dtype_name(dt));
        return 0;
    }
    unsigned char tmp[8];
    store_f64(dt, tmp, 0, v);
    if (isinf(load_f64(dt, tmp, 0)))
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "%s is %g but x is %s, whose largest finite value is %g: it overflows "
            "to inf; give a smaller value or a wider dtype",
            name, v, baton_dtype_name(dt), dtype_max_finite(dt));
    return 0;
}

static int softshrink_resolve(const baton_sig_args *a, baton_ew_desc *d, char *msg, size_t len)
{
    int rc = ew_resolve(a, "softshrink", 1, 0, d, msg, len);
    if (rc == 0)
        rc = attr_float(a, "lambda", 0.5, 0, &d->value, msg, len);
    if (rc)
        return rc;
    if (d->value < 0)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "lambda is %g: it must be >= 0 (0.5 is the default)", d->value);
    return scalar_fits("lambda", d->value, (baton_dtype)d->dtype, msg, len);
}

static int add_scalar_resolve(const baton_sig_args *a, baton_ew_desc *d, char *msg, size_t len)
{
    int rc = ew_resolve(a, "add_scalar", 1, 1, d, msg, len);
    if (rc == 0)
        rc = attr_float(a, "value", 0, 1, &d->value, msg, len);
    return rc ? rc : scalar_fits("value", d->value, (baton_dtype)d->dtype, msg, len);
}

static int add_resolve(const baton_sig_args *a, baton_ew_desc *d, char *msg, size_t len)
{
    return ew_resolve(a, "add", 2, 1, d, msg, len);
}

static int mul_resolve(const baton_sig_args *a, baton_ew_desc *d, char *msg, size_t len)
{
    return ew_resolve(a, "mul", 2, 1, d, msg, len);
}

static int copy_resolve(const baton_sig_args *a, baton_ew_desc *d, char *msg, size_t len)
{
    return ew_resolve(a, "copy", 1, 1, d, msg, len);
}

/* What tells the elementwise targets apart: how the descriptor is resolved, whether integers
 * are taken, and the attribute that gives the descriptor's value (NULL: value is 0). */
typedef struct ew_kind {
    int (*resolve)(const baton_sig_args *a, baton_ew_desc *d, char *msg, size_t len);
    int ints;
    const char *scalar;
} ew_kind;

static const ew_kind ew_softshrink = {softshrink_resolve, 0, "lambda"};
static const ew_kind ew_add = {add_resolve, 1, NULL};
static const ew_kind ew_mul = {mul_resolve, 1, NULL};
static const ew_kind ew_add_scalar = {add_scalar_resolve, 1, "value"};
static const ew_kind ew_copy = {copy_resolve, 1, NULL};

/* The plan's elementwise descriptor against the step's: n, nb and dtype from the tensors, value
 * in x's dtype's range and equal to the attribute where the plan gives that too. */
static int ew_opaque_check(const baton_sig_args *a, const ew_kind *k, const baton_ew_desc *want,
                           char *msg, size_t len)
{
    baton_ew_desc d;
    char why[320], xn[80], bn[80];
    const int binary = a->n_inputs == 2;
    if (baton__ew_desc_decode(a->opaque, a->opaque_len, binary, k->ints, &d, why, sizeof why))
        return opaque_bad(msg, len, why);
    snprintf(xn, sizeof xn, "%s '%.64s'", binary ? "a" : "x", in_name(a, 0, binary ? "a" : "x"));
    int rc = opaque_int("n", d.n, want->n, xn, &a->inputs[0], "elements", msg, len);
    if (rc == 0 && binary) {
        snprintf(bn, sizeof bn, "b '%.64s'", in_name(a, 1, "b"));
        rc = opaque_int("nb", d.nb, want->nb, bn, &a->inputs[1], "elements", msg, len);
    }
    if (rc == 0)
        rc = opaque_dtype("dtype", d.dtype, want->dtype, xn, 0, msg, len);
    if (rc)
        return rc;
    if (!k->scalar) {
        if (d.value != 0)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "\"opaque\" field value is %g but this kernel takes no scalar: it "
                "must be 0" BATON_OPAQUE_FIX,
                d.value);
        return 0;
    }
    if (find_attr(a, k->scalar))
        return baton__opaque_attr(a, "value", d.value, k->scalar, want->value, msg, len);
    if (k->ints == 0 && d.value < 0) /* softshrink's lambda */
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "\"opaque\" field value (lambda) is %g: it must be >= 0" BATON_OPAQUE_FIX, d.value);
    return scalar_fits("\"opaque\" field value", d.value, (baton_dtype)d.dtype, msg, len);
}

static int ew_check(const ew_kind *k, const baton_sig_args *a, baton_tensor_desc *expected,
                    char *msg, size_t len)
{
    baton_ew_desc d;
    int rc = k->resolve(a, &d, msg, len);
    if (rc == 0 && a->opaque)
        rc = ew_opaque_check(a, k, &d, msg, len);
    return rc ? rc : ew_check_out(a, expected);
}

static int ew_pack(const ew_kind *k, const baton_sig_args *a, char *opaque, size_t cap)
{
    baton_ew_desc d;
    char msg[256];
    int rc = k->resolve(a, &d, msg, sizeof msg);
    return rc ? rc : baton__put_desc(&d, sizeof d, opaque, cap);
}

static int softshrink_check(const baton_sig_args *a, baton_tensor_desc *e, char *msg, size_t len)
{
    return ew_check(&ew_softshrink, a, e, msg, len);
}
static int softshrink_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    return ew_pack(&ew_softshrink, a, opaque, cap);
}
static int add_check(const baton_sig_args *a, baton_tensor_desc *e, char *msg, size_t len)
{
    return ew_check(&ew_add, a, e, msg, len);
}
static int add_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    return ew_pack(&ew_add, a, opaque, cap);
}
static int mul_check(const baton_sig_args *a, baton_tensor_desc *e, char *msg, size_t len)
{
    return ew_check(&ew_mul, a, e, msg, len);
}
static int mul_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    return ew_pack(&ew_mul, a, opaque, cap);
}
static int add_scalar_check(const baton_sig_args *a, baton_tensor_desc *e, char *msg, size_t len)
{
    return ew_check(&ew_add_scalar, a, e, msg, len);
}
static int add_scalar_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    return ew_pack(&ew_add_scalar, a, opaque, cap);
}
static int copy_check(const baton_sig_args *a, baton_tensor_desc *e, char *msg, size_t len)
{
    return ew_check(&ew_copy, a, e, msg, len);
}
static int copy_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    return ew_pack(&ew_copy, a, opaque, cap);
}

/* ---- argmax -----------------------------------------------------------------------------------
 */

static int argmax_resolve(const baton_sig_args *a, baton_argmax_desc *d, baton_tensor_desc *out,
                          char *msg, size_t len)
{
    int rc = counts_ok(a, 1, 1, "argmax", msg, len);
    if (rc)
        return rc;
    const baton_tensor_desc *x = &a->inputs[0];
    if (!dtype_is_float(x->dtype) && !dtype_is_int(x->dtype))
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "x is %s but argmax takes bf16, f16, f32, f64, i32 or i64",
                                 baton_dtype_name(x->dtype));
    rc = dims_ok(x, "x", msg, len);
    if (rc)
        return rc;
    if (x->rank < 1)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "x is a scalar (shape []): argmax runs over the last dim, so x needs "
            "rank >= 1, e.g. [n]");
    memset(d, 0, sizeof *d);
    d->n2 = x->shape[x->rank - 1];
    d->n1 = numel(x) / d->n2;
    d->dtype = (int32_t)x->dtype;
    if (out) {
        memset(out, 0, sizeof *out);
        out->dtype = BATON_DTYPE_I64;
        if (x->rank == 1) {
            out->rank = 1;
            out->shape[0] = 1;
        } else {
            out->rank = x->rank - 1;
            memcpy(out->shape, x->shape, sizeof(int64_t) * (size_t)out->rank);
        }
    }
    return 0;
}

static int argmax_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t len)
{
    baton_argmax_desc d, have;
    int rc = argmax_resolve(a, &d, expected, msg, len);
    if (rc || !a->opaque)
        return rc;
    char why[320], xn[80];
    if (baton__argmax_desc_decode(a->opaque, a->opaque_len, &have, why, sizeof why))
        return opaque_bad(msg, len, why);
    snprintf(xn, sizeof xn, "x '%.64s'", in_name(a, 0, "x"));
    rc = opaque_int("n1", have.n1, d.n1, xn, &a->inputs[0], "rows", msg, len);
    if (rc == 0)
        rc = opaque_int("n2", have.n2, d.n2, xn, &a->inputs[0], "elements per row", msg, len);
    if (rc == 0)
        rc = opaque_dtype("dtype", have.dtype, d.dtype, xn, 0, msg, len);
    return rc;
}

static int argmax_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    baton_argmax_desc d;
    char msg[256];
    int rc = argmax_resolve(a, &d, NULL, msg, sizeof msg);
    return rc ? rc : baton__put_desc(&d, sizeof d, opaque, cap);
}

/* ---- noop -------------------------------------------------------------------------------------
 */

static int noop_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t len)
{
    int rc = counts_ok(a, 1, 1, "noop", msg, len);
    if (rc == 0)
        rc = dims_ok(&a->inputs[0], "x", msg, len);
    if (rc)
        return rc;
    if (expected)
        expected[0] = a->inputs[0];
    return 0;
}

/* ---- the table --------------------------------------------------------------------------------
 */

static const baton_target target_rms_norm_fwd = {
    .struct_size = sizeof(baton_target),
    .name = "rms_norm_fwd",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 2,
    .n_outputs = 2,
    .summary = "RMSNorm forward: inputs x, weight (shape = x's last dims); outputs y = weight * x "
               "* invvar (weight's dtype) and invvar = 1/sqrt(mean(x^2) + eps) per row",
    .attrs = {{"eps", BATON_ATTR_FLOAT, 0, "added to mean(x^2); default 1e-5, >= 0"}},
    .check = rms_fwd_check,
    .pack = rms_fwd_pack,
    BATON_BUILTIN_KERNEL_IMPLS(rms_norm_fwd),
};

static const baton_target target_rms_norm_bwd = {
    .struct_size = sizeof(baton_target),
    .name = "rms_norm_bwd",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 4,
    .n_outputs = 3,
    .summary = "RMSNorm backward: inputs grad_output, invvar, x, weight; outputs grad_input, "
               "grad_weight and part_grad (per-row-block partial sums of grad_weight, declared "
               "[P] + weight's shape or [P, numel(weight)])",
    .attrs = {{"eps", BATON_ATTR_FLOAT, 0, "as in the forward step (invvar already holds it)"},
              {"part_grad_size", BATON_ATTR_INT, 0,
               "row blocks of the partial-gradient buffer; default: the rows of the declared "
               "part_grad, else min(rows, 256); >= 1"},
              {"unsharded_part_grad_size", BATON_ATTR_INT, 0,
               "in a row shard (scripts/shard.py): the unsharded call's part_grad_size, so that "
               "CUDA adds each block's rows in that call's order and the gathered part_grads give "
               "its grad_weight bits; >= part_grad_size"}},
    .check = rms_bwd_check,
    .pack = rms_bwd_pack,
    BATON_BUILTIN_KERNEL_IMPLS(rms_norm_bwd),
};

static const baton_target target_rms_norm_grad_weight = {
    .struct_size = sizeof(baton_target),
    .name = "rms_norm_grad_weight",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 2,
    .n_outputs = 1,
    .summary = "grad_weight from rms_norm_bwd's part_grad: inputs part_grad ([P] + weight's shape "
               "or [P, numel(weight)], f32 or f64) and weight (read for its dtype and shape "
               "only); output grad_weight, the column sum in rms_norm_bwd's order (its bits)",
    .check = rms_gw_check,
    .pack = rms_gw_pack,
    BATON_BUILTIN_KERNEL_IMPLS(rms_norm_grad_weight),
};

static const baton_target target_softshrink = {
    .struct_size = sizeof(baton_target),
    .name = "softshrink",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 1,
    .n_outputs = 1,
    .summary = "y = x - lambda if x > lambda, x + lambda if x < -lambda, else 0",
    .attrs = {{"lambda", BATON_ATTR_FLOAT, 0, "the threshold; default 0.5, >= 0"}},
    .check = softshrink_check,
    .pack = softshrink_pack,
    BATON_BUILTIN_KERNEL_IMPLS(softshrink),
    .aliases = {{0, 0}},
    .n_aliases = 1, /* elementwise: in place on state */
};

static const baton_target target_add = {
    .struct_size = sizeof(baton_target),
    .name = "add",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 2,
    .n_outputs = 1,
    .summary = "y = a + b; b has a's shape or a's trailing dims (then it repeats)",
    .check = add_check,
    .pack = add_pack,
    BATON_BUILTIN_KERNEL_IMPLS(add),
    .aliases = {{0, 0}},
    .n_aliases = 1, /* elementwise: in place on state (b may repeat) */
};

static const baton_target target_mul = {
    .struct_size = sizeof(baton_target),
    .name = "mul",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 2,
    .n_outputs = 1,
    .summary = "y = a * b; b has a's shape or a's trailing dims (then it repeats)",
    .check = mul_check,
    .pack = mul_pack,
    BATON_BUILTIN_KERNEL_IMPLS(mul),
    .aliases = {{0, 0}},
    .n_aliases = 1, /* elementwise: in place on state (b may repeat) */
};

static const baton_target target_add_scalar = {
    .struct_size = sizeof(baton_target),
    .name = "add_scalar",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 1,
    .n_outputs = 1,
    .summary = "y = x + value",
    .attrs = {{"value", BATON_ATTR_FLOAT, 1, "the scalar to add (an integer for i32/i64 x)"}},
    .check = add_scalar_check,
    .pack = add_scalar_pack,
    BATON_BUILTIN_KERNEL_IMPLS(add_scalar),
    .aliases = {{0, 0}},
    .n_aliases = 1, /* elementwise: in place on state */
};

static const baton_target target_copy = {
    .struct_size = sizeof(baton_target),
    .name = "copy",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 1,
    .n_outputs = 1,
    .summary = "y = x",
    .check = copy_check,
    .pack = copy_pack,
    BATON_BUILTIN_KERNEL_IMPLS(copy),
    .aliases = {{0, 0}},
    .n_aliases = 1, /* elementwise: in place on state */
};

static const baton_target target_argmax = {
    .struct_size = sizeof(baton_target),
    .name = "argmax",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 1,
    .n_outputs = 1,
    .summary = "index (i64) of the largest element along the last dim; the first maximum wins, "
               "NaN counts as the maximum",
    .check = argmax_check,
    .pack = argmax_pack,
    BATON_BUILTIN_KERNEL_IMPLS(argmax),
};

static const baton_target target_noop = {
    .struct_size = sizeof(baton_target),
    .name = "noop",
    .kind = BATON_TARGET_KERNEL,
    .n_inputs = 1,
    .n_outputs = 1,
    .summary = "does nothing (the output keeps whatever it held); measures dispatch cost",
    .check = noop_check,
    .pack = NULL,
    BATON_BUILTIN_KERNEL_IMPLS(noop),
};

/* The hooks of BATON_BUILTIN_KERNEL_IMPLS(fn)'s CUDA implementation (impls[1]). */
#ifdef BATON_CUDA
#define CUDA_TUNE(fn)         .tune = {NULL, baton__kcuda_##fn##_tune}
#define CUDA_TUNE_PREPARE(fn) CUDA_TUNE(fn), .prepare = {NULL, baton__kcuda_##fn##_prepare}
#else
#define CUDA_TUNE_PREPARE(fn) .tune = {NULL}
#define CUDA_TUNE(fn)         .tune = {NULL}
#endif
/* The decoder ops (targets/decoder.c, DEC_IMPLS): their CUDA kernels (impls[1]) read their
 * descriptor and shapes once at prepare, and record an index out of range on the device, read
 * after the host waits (core/tune.h's kernel_prepare_fn and kernel_error_fn). */
#ifdef BATON_CUDA
#define UNTUNED(fn)                                                                                \
    {.target = &baton__target_##fn,                                                                \
     .prepare = {NULL, baton__kcuda_##fn##_prepare},                                               \
     .errors = {NULL, baton__kcuda_decoder_error_take}},
#else
#define UNTUNED(fn) {.target = &baton__target_##fn},
#endif

/* One target a line. */
/* clang-format off */
const builtin_target baton__builtin_targets[] = {
    {.target = &target_rms_norm_fwd, CUDA_TUNE_PREPARE(rms_norm_fwd)},
    {.target = &target_rms_norm_bwd, CUDA_TUNE_PREPARE(rms_norm_bwd)},
    {.target = &target_rms_norm_grad_weight},
    {.target = &target_softshrink},
    {.target = &target_add},
    {.target = &target_mul},
    {.target = &target_add_scalar},
    {.target = &target_copy},
    {.target = &target_argmax},
    {.target = &target_noop},
    {.target = &baton__target_gemm},
    BATON_DECODER_TARGETS(UNTUNED)
    /* a delegate: it records no device-side errors, so it takes no error hook */
    {.target = &baton__target_gemm_add},
    {.target = &baton__target_rms_norm_gemm},
    {.target = &baton__target_swiglu_gemm_add},
};
/* clang-format on */

const int baton__builtin_target_count =
    (int)(sizeof baton__builtin_targets / sizeof baton__builtin_targets[0]);
