/* gemm.c: the gemm delegate's signature (a [M,K] x b [K,N], transposes, a's leading dims folded
 * into M) turned into its descriptor. baton__gemm_resolve() is the single source of the sizes for
 * the target's check and pack (targets/gemm.c) and every backend's init(). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "delegates/gemm.h"
#include "core/sig.h"

static int attr_bool(const baton_sig_args *sig, const char *name, int *out, char *msg, size_t len)
{
    const baton_attr *a =
        sig->n_attrs > 0 ? baton_attrs_find(sig->attrs, sig->n_attrs, name) : NULL;
    *out = 0;
    if (!a)
        return 0;
    if (a->type != BATON_ATTR_BOOL && a->type != BATON_ATTR_INT)
        return baton__reason_set(msg, len, BATON_EPLAN, "attribute %s must be true or false", name);
    if (a->i != 0 && a->i != 1)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "attribute %s is %lld: it must be true or false", name,
                                 (long long)a->i);
    *out = (int)a->i;
    return 0;
}

int baton__gemm_resolve(const baton_sig_args *sig, baton_gemm_desc *desc, baton_tensor_desc *out,
                        char *msg, size_t len)
{
    char s1[200], s2[200];
    if (!sig || (sig->n_inputs != 2 && sig->n_inputs != 3) || !sig->inputs)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "gemm takes 2 inputs (a, b), gemm_add 3 (a, b, c), got %d",
                                 sig ? sig->n_inputs : 0);
    if (sig->n_outputs != 1)
        return baton__reason_set(msg, len, BATON_EPLAN, "gemm writes 1 output, got %d",
                                 sig->n_outputs);
    if (sig->n_attrs > 0 && !sig->attrs)
        return baton__reason_set(msg, len, BATON_EPLAN, "gemm: attrs missing");
    const baton_tensor_desc *a = &sig->inputs[0], *b = &sig->inputs[1];
    baton_dtype dt = a->dtype;
    if (dt != BATON_DTYPE_F32 && dt != BATON_DTYPE_F64 && dt != BATON_DTYPE_BF16 &&
        dt != BATON_DTYPE_F16)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "a is %s but gemm takes f32, f64, bf16 or f16",
                                 baton_dtype_name(dt));
    if (b->dtype != dt)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "a is %s but b is %s: gemm needs a, b and the output in one dtype",
                                 baton_dtype_name(dt), baton_dtype_name(b->dtype));
    int rc = dims_ok(a, "a", msg, len);
    if (rc == 0)
        rc = dims_ok(b, "b", msg, len);
    if (rc)
        return rc;
    int ta, tb;
    double alpha = 1.0;
    rc = attr_bool(sig, "trans_a", &ta, msg, len);
    if (rc == 0)
        rc = attr_bool(sig, "trans_b", &tb, msg, len);
    if (rc)
        return rc;
    const baton_attr *al =
        sig->n_attrs > 0 ? baton_attrs_find(sig->attrs, sig->n_attrs, "alpha") : NULL;
    if (al) {
        if (al->type == BATON_ATTR_FLOAT)
            alpha = al->f;
        else if (al->type == BATON_ATTR_INT)
            alpha = (double)al->i;
        else
            return baton__reason_set(msg, len, BATON_EPLAN, "attribute alpha must be a number");
        if (!isfinite(alpha))
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "alpha is %g: it must be a finite number", alpha);
    }

    int64_t m, k;
    if (ta) {
        if (a->rank != 2)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "a has shape %s but with trans_a it must be 2-D [K, M] (leading batch "
                "dims fold into M only without trans_a)",
                shape_str(a, s1, sizeof s1));
        k = a->shape[0];
        m = a->shape[1];
    } else {
        if (a->rank < 2)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "a has shape %s: it must be [M, K] (or [..., M, K])",
                                     shape_str(a, s1, sizeof s1));
        k = a->shape[a->rank - 1];
        m = 1;
        for (int i = 0; i < a->rank - 1; i++)
            m *= a->shape[i];
    }
    if (b->rank != 2)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "b has shape %s: it must be 2-D, [K, N] (or [N, K] with trans_b)",
                                 shape_str(b, s1, sizeof s1));
    int64_t bk = tb ? b->shape[1] : b->shape[0];
    int64_t n = tb ? b->shape[0] : b->shape[1];
    if (bk != k)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "a is %s%s so K = %lld, but b is %s%s whose K (dim %d) is %lld: b must be "
            "%s",
            shape_str(a, s1, sizeof s1), ta ? " (trans_a)" : "", (long long)k,
            shape_str(b, s2, sizeof s2), tb ? " (trans_b)" : "", tb ? 1 : 0, (long long)bk,
            tb ? "[N, K] with K matching (or set trans_b to false for [K, N])"
               : "[K, N] with K matching (or set trans_b to true for [N, K])");
    if (desc) {
        memset(desc, 0, sizeof *desc);
        desc->m = m;
        desc->n = n;
        desc->k = k;
        desc->dtype = (int32_t)dt;
        desc->flags = (ta ? BATON_GEMM_TRANS_A : 0) | (tb ? BATON_GEMM_TRANS_B : 0);
        desc->alpha = alpha;
        desc->beta = sig->n_inputs == 3 ? 1.0 : 0.0;
    }
    baton_tensor_desc o;
    memset(&o, 0, sizeof o);
    o.dtype = dt;
    if (ta) {
        o.rank = 2;
        o.shape[0] = m;
    } else {
        o.rank = a->rank;
        memcpy(o.shape, a->shape, sizeof(int64_t) * (size_t)(a->rank - 1));
    }
    o.shape[o.rank - 1] = n;
    if (sig->n_inputs == 3) { /* gemm_add: c is added, so it has the output's type */
        const baton_tensor_desc *c = &sig->inputs[2];
        int same = c->dtype == o.dtype && c->rank == o.rank;
        for (int i = 0; same && i < o.rank; i++)
            same = c->shape[i] == o.shape[i];
        if (!same) {
            char s3[200];
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "c is %s%s but gemm_add's output is %s%s here: c must have the "
                "output's dtype and shape (it is added to the product)",
                baton_dtype_name(c->dtype), shape_str(c, s1, sizeof s1), baton_dtype_name(o.dtype),
                shape_str(&o, s3, sizeof s3));
        }
    }
    if (out)
        *out = o;
    return 0;
}

int64_t baton__gemm_run_k(const baton_gemm_desc *desc, const baton_sig_args *sig)
{
    if (!sig || sig->n_inputs < 1 || !sig->inputs)
        return desc->k;
    const baton_tensor_desc *a = &sig->inputs[0];
    if (a->rank < 2)
        return -1;
    return (desc->flags & BATON_GEMM_TRANS_A) ? a->shape[0] : a->shape[a->rank - 1];
}

int baton__gemm_run_n_ok(const baton_gemm_desc *desc, const baton_sig_args *sig, int64_t k,
                         char *msg, size_t len)
{
    if (!sig || sig->n_inputs < 2 || !sig->inputs || sig->inputs[1].rank != 2)
        return 0;
    const baton_tensor_desc *b = &sig->inputs[1];
    const int tb = (desc->flags & BATON_GEMM_TRANS_B) != 0;
    const int64_t bk = tb ? b->shape[1] : b->shape[0], n = tb ? b->shape[0] : b->shape[1];
    if (n != desc->n)
        return baton__reason_set(msg, len, BATON_EINVAL,
                                 "this run's b gives N = %lld where the step was prepared for "
                                 "%lld: N cannot follow a plan's dims",
                                 (long long)n, (long long)desc->n);
    if (bk != k)
        return baton__reason_set(msg, len, BATON_EINVAL,
                                 "this run's a gives K = %lld but its b K = %lld", (long long)k,
                                 (long long)bk);
    return 0;
}

int64_t baton__gemm_run_m(const baton_gemm_desc *desc, const baton_sig_args *sig)
{
    if (!sig || sig->n_inputs < 1 || !sig->inputs)
        return desc->m;
    const baton_tensor_desc *a = &sig->inputs[0];
    if (desc->flags & BATON_GEMM_TRANS_A)
        return a->rank == 2 ? a->shape[1] : -1;
    int64_t m = 1;
    for (int i = 0; i < a->rank - 1; i++)
        m *= a->shape[i];
    return a->rank >= 2 ? m : -1;
}
