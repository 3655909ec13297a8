/* decoder_desc.c: the decoder ops' attributes, descriptor and shape rules (decoder_desc.h), one
 * copy for the signature checks at load and the kernels at run time. */
#include "kernels/decoder_desc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/sig.h"

static const char *const op_names[DEC_OP_MAX + 1] = {
    "?",    "embedding", "rope", "kv_cache_update", "attention", "silu_mul",         "silu",
    "gelu", "softmax",   "cast", "sample",          "swiglu",    "rope_cache_update"};

int baton__dec_op_of(const char *target)
{
    for (int i = 1; target && i <= DEC_OP_MAX; i++)
        if (strcmp(op_names[i], target) == 0)
            return i;
    return 0;
}

const char *baton__dec_op_name(int op)
{
    return op >= 1 && op <= DEC_OP_MAX ? op_names[op] : "?";
}

/* ---- attributes ---------------------------------------------------------------------------- */

static const baton_attr *attr(const baton_sig_args *a, const char *name)
{
    return a->n_attrs > 0 && a->attrs ? baton_attrs_find(a->attrs, a->n_attrs, name) : NULL;
}

static int attr_num(const baton_sig_args *a, const char *op, const char *name, double def,
                    int required, double *out, char *msg, size_t len)
{
    const baton_attr *at = attr(a, name);
    *out = def;
    if (!at)
        return required ? baton__reason_set(msg, len, BATON_EPLAN,
                                            "%s needs attribute %s (a number, e.g. \"%s\": 1.0)",
                                            op, name, name)
                        : 0;
    if (at->type == BATON_ATTR_FLOAT)
        *out = at->f;
    else if (at->type == BATON_ATTR_INT)
        *out = (double)at->i;
    else
        return baton__reason_set(msg, len, BATON_EPLAN, "%s: attribute %s must be a number", op,
                                 name);
    if (!isfinite(*out))
        return baton__reason_set(msg, len, BATON_EPLAN, "%s: attribute %s is %g: it must be finite",
                                 op, name, *out);
    return 0;
}

/* An integer attribute within [lo, hi]. */
static int attr_int(const baton_sig_args *a, const char *op, const char *name, int64_t def,
                    int required, int64_t lo, int64_t hi, int64_t *out, char *msg, size_t len)
{
    const baton_attr *at = attr(a, name);
    *out = def;
    if (!at) {
        if (required)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "%s needs attribute %s (an integer, e.g. \"%s\": 64)", op,
                                     name, name);
        return 0;
    }
    if (at->type == BATON_ATTR_INT)
        *out = at->i;
    else if (at->type == BATON_ATTR_FLOAT && at->f == floor(at->f) && fabs(at->f) < 9e15)
        *out = (int64_t)at->f;
    else
        return baton__reason_set(msg, len, BATON_EPLAN, "%s: attribute %s must be an integer", op,
                                 name);
    if (*out < lo || *out > hi)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "%s: attribute %s is %lld: it must be in [%lld, %lld]", op, name,
                                 (long long)*out, (long long)lo, (long long)hi);
    return 0;
}

static int attr_bool(const baton_sig_args *a, const char *op, const char *name, int *out, char *msg,
                     size_t len)
{
    const baton_attr *at = attr(a, name);
    *out = 0;
    if (!at)
        return 0;
    if (at->type != BATON_ATTR_BOOL && at->type != BATON_ATTR_INT)
        return baton__reason_set(msg, len, BATON_EPLAN, "%s: attribute %s must be true or false",
                                 op, name);
    *out = at->i != 0;
    return 0;
}

int baton__dec_desc_from_attrs(int op, const baton_sig_args *a, baton_decoder_desc *d, char *msg,
                               size_t len)
{
    const char *nm = baton__dec_op_name(op);
    memset(d, 0, sizeof *d);
    d->op = op;
    int64_t v = 0;
    int b = 0, rc = 0;
    switch (op) {
    case DEC_ROPE:
        if ((rc = attr_int(a, nm, "head_dim", 0, 1, 2, 1 << 20, &v, msg, len)))
            return rc;
        if (v % 2)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "rope: head_dim is %lld: it must be even (rope turns pairs)",
                                     (long long)v);
        d->head_dim = (int32_t)v;
        if ((rc = attr_bool(a, nm, "interleaved", &b, msg, len)))
            return rc;
        d->flags = b ? DEC_FLAG_INTERLEAVED : 0;
        return attr_num(a, nm, "scale", 1.0, 0, &d->scale, msg, len);
    case DEC_ROPE_CACHE_UPDATE: {
        int64_t h, hkv;
        if ((rc = attr_int(a, nm, "head_dim", 0, 1, 2, 1024, &v, msg, len)) ||
            (rc = attr_int(a, nm, "n_heads", 0, 1, 1, 1 << 16, &h, msg, len)) ||
            (rc = attr_int(a, nm, "n_kv_heads", 0, 1, 1, 1 << 16, &hkv, msg, len)))
            return rc;
        if (v % 2)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "%s: head_dim is %lld: it must be even (rope turns pairs)", nm,
                                     (long long)v);
        if (h % hkv)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "%s: n_kv_heads is %lld but n_heads is %lld: n_kv_heads must divide "
                "n_heads",
                nm, (long long)hkv, (long long)h);
        d->head_dim = (int32_t)v;
        d->n_heads = (int32_t)h;
        d->n_kv_heads = (int32_t)hkv;
        if ((rc = attr_bool(a, nm, "interleaved", &b, msg, len)))
            return rc;
        d->flags = b ? DEC_FLAG_INTERLEAVED : 0;
        return attr_num(a, nm, "scale", 1.0, 0, &d->scale, msg, len);
    }
    case DEC_ATTENTION: {
        int64_t h, hkv;
        if ((rc = attr_int(a, nm, "head_dim", 0, 1, 1, 1024, &v, msg, len)) ||
            (rc = attr_int(a, nm, "n_heads", 0, 1, 1, 1 << 16, &h, msg, len)) ||
            (rc = attr_int(a, nm, "n_kv_heads", 0, 1, 1, 1 << 16, &hkv, msg, len)))
            return rc;
        if (h % hkv)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "attention: n_kv_heads is %lld but n_heads is %lld: n_kv_heads must "
                "divide n_heads (each KV head serves n_heads / n_kv_heads query "
                "heads)",
                (long long)hkv, (long long)h);
        d->head_dim = (int32_t)v;
        d->n_heads = (int32_t)h;
        d->n_kv_heads = (int32_t)hkv;
        if ((rc = attr_num(a, nm, "scale", 1.0 / sqrt((double)v), 0, &d->scale, msg, len)))
            return rc;
        if (d->scale == 0)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "attention: scale is 0: it must be nonzero (default "
                                     "1/sqrt(head_dim) = %g)",
                                     1.0 / sqrt((double)v));
        return 0;
    }
    case DEC_GELU:
        if ((rc = attr_bool(a, nm, "approximate", &b, msg, len)))
            return rc;
        d->flags = b ? DEC_FLAG_TANH : 0;
        return 0;
    case DEC_SAMPLE:
        if ((rc = attr_num(a, nm, "temperature", 1.0, 0, &d->temperature, msg, len)))
            return rc;
        if (!(d->temperature > 0))
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "sample: temperature is %g: it must be > 0 (for greedy decoding "
                "use an argmax step)",
                d->temperature);
        if ((rc = attr_int(a, nm, "top_k", 0, 0, 0, INT32_MAX, &v, msg, len)))
            return rc;
        d->top_k = (int32_t)v;
        if ((rc = attr_num(a, nm, "top_p", 1.0, 0, &d->top_p, msg, len)))
            return rc;
        if (!(d->top_p > 0 && d->top_p <= 1))
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "sample: top_p is %g: it must be in (0, 1] (1 = off)",
                                     d->top_p);
        if ((rc = attr_int(a, nm, "seed", 0, 0, INT64_MIN, INT64_MAX, &v, msg, len)))
            return rc;
        d->seed = (uint64_t)v;
        return 0;
    default:
        if (op < 1 || op > DEC_OP_MAX)
            return baton__reason_set(msg, len, BATON_EPLAN, "not a decoder op (code %d)", op);
        return 0;
    }
}

/* ---- descriptor ---------------------------------------------------------------------------- */

/* The descriptor's fields after op and flags, and the attribute each is packed from. */
enum {
    F_HEAD_DIM = 1,
    F_N_HEADS = 2,
    F_N_KV_HEADS = 4,
    F_TOP_K = 8,
    F_SCALE = 16,
    F_TEMPERATURE = 32,
    F_TOP_P = 64,
    F_SEED = 128
};
static const struct {
    uint32_t bit;
    const char *name; /* the field's and its attribute's */
} fields[] = {{F_HEAD_DIM, "head_dim"}, {F_N_HEADS, "n_heads"}, {F_N_KV_HEADS, "n_kv_heads"},
              {F_TOP_K, "top_k"},       {F_SCALE, "scale"},     {F_TEMPERATURE, "temperature"},
              {F_TOP_P, "top_p"},       {F_SEED, "seed"}};

/* The fields an op reads; baton packs the others as 0. */
static uint32_t fields_of(int op)
{
    switch (op) {
    case DEC_ROPE: return F_HEAD_DIM | F_SCALE;
    case DEC_ROPE_CACHE_UPDATE:
    case DEC_ATTENTION: return F_HEAD_DIM | F_N_HEADS | F_N_KV_HEADS | F_SCALE;
    case DEC_SAMPLE: return F_TOP_K | F_TEMPERATURE | F_TOP_P | F_SEED;
    default: return 0;
    }
}

/* A field's value as a double; the seed's only as zero or not (its 64 bits are compared whole
 * where it matters). */
static double field_value(const baton_decoder_desc *d, uint32_t bit)
{
    switch (bit) {
    case F_HEAD_DIM: return d->head_dim;
    case F_N_HEADS: return d->n_heads;
    case F_N_KV_HEADS: return d->n_kv_heads;
    case F_TOP_K: return d->top_k;
    case F_SCALE: return d->scale;
    case F_TEMPERATURE: return d->temperature;
    case F_TOP_P: return d->top_p;
    default: return d->seed != 0; /* F_SEED */
    }
}

int baton__dec_desc_read(int op, const char *opaque, size_t opaque_len, baton_decoder_desc *d,
                         char *msg, size_t len)
{
    const char *nm = baton__dec_op_name(op);
    if (!opaque || opaque_len != sizeof *d)
        return baton__reason_set(
            msg, len, BATON_EINVAL,
            "%s: the descriptor is %zu bytes but must be %zu (baton_decoder_desc: "
            "op, flags, head_dim, n_heads, n_kv_heads, top_k, scale, temperature, "
            "top_p, seed; see docs/targets.md)",
            nm, opaque ? opaque_len : 0, sizeof *d);
    memcpy(d, opaque, sizeof *d);
    if (d->op != op)
        return baton__reason_set(msg, len, BATON_EINVAL,
                                 "%s: the descriptor is for op %d (%s), not %d (%s)", nm,
                                 (int)d->op, baton__dec_op_name(d->op), op, nm);
    uint32_t allowed = op == DEC_ROPE || op == DEC_ROPE_CACHE_UPDATE ? DEC_FLAG_INTERLEAVED
                       : op == DEC_GELU                              ? DEC_FLAG_TANH
                                                                     : 0;
    if (d->flags & ~allowed)
        return baton__reason_set(msg, len, BATON_EINVAL,
                                 "%s: flags 0x%x has bits %s does not define", nm,
                                 (unsigned)d->flags, nm);
    const uint32_t used = fields_of(op);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!(used & fields[i].bit) && field_value(d, fields[i].bit) != 0)
            return baton__reason_set(msg, len, BATON_EINVAL,
                                     "%s: field %s is not 0 but %s does not use it: it must be 0",
                                     nm, fields[i].name, nm);
    if (op == DEC_ROPE_CACHE_UPDATE &&
        (d->head_dim < 2 || d->head_dim % 2 || d->head_dim > 1024 || d->n_heads < 1 ||
         d->n_kv_heads < 1 || d->n_heads % d->n_kv_heads || !isfinite(d->scale)))
        return baton__reason_set(
            msg, len, BATON_EINVAL,
            "rope_cache_update: head_dim %d (even, 2 to 1024), n_heads %d, "
            "n_kv_heads %d (dividing n_heads) or scale %g (finite) is out of range",
            (int)d->head_dim, (int)d->n_heads, (int)d->n_kv_heads, d->scale);
    if (op == DEC_ROPE && (d->head_dim < 2 || d->head_dim % 2 || !isfinite(d->scale)))
        return baton__reason_set(msg, len, BATON_EINVAL,
                                 "rope: head_dim %d must be even and >= 2, scale %g finite",
                                 (int)d->head_dim, d->scale);
    if (op == DEC_ATTENTION &&
        (d->head_dim < 1 || d->head_dim > 1024 || d->n_heads < 1 || d->n_kv_heads < 1 ||
         d->n_heads % d->n_kv_heads || !isfinite(d->scale) || d->scale == 0))
        return baton__reason_set(
            msg, len, BATON_EINVAL,
            "attention: head_dim %d (1 to 1024), n_heads %d, n_kv_heads %d (>= 1, "
            "dividing n_heads) and scale %g (finite, nonzero) are out of range",
            (int)d->head_dim, (int)d->n_heads, (int)d->n_kv_heads, d->scale);
    if (op == DEC_SAMPLE && (!(d->temperature > 0) || !isfinite(d->temperature) ||
                             !(d->top_p > 0 && d->top_p <= 1) || d->top_k < 0))
        return baton__reason_set(
            msg, len, BATON_EINVAL,
            "sample: temperature %g (> 0), top_p %g (in (0, 1]) or top_k %d (>= 0) "
            "is out of range",
            d->temperature, d->top_p, (int)d->top_k);
    return 0;
}

#define AGREE_FIX "give one, or the same value in both"

int baton__dec_desc_agrees(int op, const baton_sig_args *a, const baton_decoder_desc *d, char *msg,
                           size_t len)
{
    const char *nm = baton__dec_op_name(op);
    baton_decoder_desc want; /* what the step's attributes pack (its check() read them already) */
    int rc = baton__dec_desc_from_attrs(op, a, &want, msg, len);
    if (rc)
        return rc;
    const char *flag = op == DEC_ROPE || op == DEC_ROPE_CACHE_UPDATE ? "interleaved"
                       : op == DEC_GELU                              ? "approximate"
                                                                     : NULL;
    if (flag && attr(a, flag) && d->flags != want.flags) /* the op's one flag */
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "%s: the \"opaque\" flags say %s %s but attribute %s is %s: " AGREE_FIX, nm, flag,
            d->flags ? "true" : "false", flag, want.flags ? "true" : "false");
    const uint32_t used = fields_of(op);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const uint32_t bit = fields[i].bit;
        const char *name = fields[i].name;
        if (!(used & bit) || !attr(a, name))
            continue;
        if (bit == F_SEED && d->seed != want.seed)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "%s: \"opaque\" field seed is %llu but attribute seed is "
                                     "%lld: " AGREE_FIX,
                                     nm, (unsigned long long)d->seed, (long long)want.seed);
        if (bit != F_SEED && field_value(d, bit) != field_value(&want, bit))
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "%s: \"opaque\" field %s is %.17g but attribute %s is %.17g: "
                                     "" AGREE_FIX,
                                     nm, name, field_value(d, bit), name, field_value(&want, bit));
    }
    return 0;
}

/* ---- shapes -------------------------------------------------------------------------------- */

/* "input 'q'" or, without plan names, "q". */
static const char *tn(const baton_sig_args *a, int out, int i, const char *role, char *buf,
                      size_t cap)
{
    const char *const *names = out ? a->output_names : a->input_names;
    const char *nm = names ? names[i] : NULL;
    if (nm)
        snprintf(buf, cap, "%s '%s'", role, nm);
    else
        snprintf(buf, cap, "%s", role);
    return buf;
}

static int64_t numel(const baton_tensor_desc *d)
{
    int64_t n = 1;
    for (int i = 0; i < d->rank; i++)
        n *= d->shape[i];
    return n;
}

static int want_float(const baton_sig_args *a, int i, const char *role, const char *op, char *msg,
                      size_t len)
{
    char nb[300];
    const baton_tensor_desc *t = &a->inputs[i];
    if (!dtype_is_float(t->dtype))
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "%s is %s but %s takes it in bf16, f16, f32 or f64",
                                 tn(a, 0, i, role, nb, sizeof nb), baton_dtype_name(t->dtype), op);
    return dims_ok(t, tn(a, 0, i, role, nb, sizeof nb), msg, len);
}

static int want_index(const baton_sig_args *a, int i, const char *role, const char *op,
                      int64_t count, char *msg, size_t len)
{
    char nb[300], s[200];
    const baton_tensor_desc *t = &a->inputs[i];
    if (!dtype_is_int(t->dtype))
        return baton__reason_set(msg, len, BATON_EPLAN, "%s is %s but %s takes it in i32 or i64",
                                 tn(a, 0, i, role, nb, sizeof nb), baton_dtype_name(t->dtype), op);
    int rc = dims_ok(t, tn(a, 0, i, role, nb, sizeof nb), msg, len);
    if (rc)
        return rc;
    if (count >= 0 && numel(t) != count)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "%s has shape %s (%lld elements) but %s needs %lld, one per token row "
            "(declare it [%lld])",
            tn(a, 0, i, role, nb, sizeof nb), shape_str(t, s, sizeof s), (long long)numel(t), op,
            (long long)count, (long long)count);
    return 0;
}

/* Token rows of a float tensor [..., F] whose last dim must be F (F > 0) or is read (F == 0). */
static int rows_of(const baton_sig_args *a, int i, const char *role, const char *op, int64_t F,
                   const char *why, int64_t *rows, int64_t *f_out, char *msg, size_t len)
{
    char nb[300], s[200];
    const baton_tensor_desc *t = &a->inputs[i];
    if (t->rank < 1)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "%s is a scalar: %s takes it as [..., features] (rank >= 1)",
                                 tn(a, 0, i, role, nb, sizeof nb), op);
    int64_t last = t->shape[t->rank - 1];
    if (F > 0 && last != F)
        return baton__reason_set(
            msg, len, BATON_EPLAN,
            "%s has shape %s, with %lld features, but %s needs %lld (%s) in its "
            "last dim",
            tn(a, 0, i, role, nb, sizeof nb), shape_str(t, s, sizeof s), (long long)last, op,
            (long long)F, why);
    *rows = numel(t) / last;
    if (f_out)
        *f_out = last;
    return 0;
}

static int same_dtype(const baton_sig_args *a, int i, int j, const char *ri, const char *rj,
                      const char *op, char *msg, size_t len)
{
    char n1[300], n2[300];
    if (a->inputs[i].dtype != a->inputs[j].dtype)
        return baton__reason_set(
            msg, len, BATON_EPLAN, "%s is %s but %s is %s: %s needs them in one dtype",
            tn(a, 0, j, rj, n2, sizeof n2), baton_dtype_name(a->inputs[j].dtype),
            tn(a, 0, i, ri, n1, sizeof n1), baton_dtype_name(a->inputs[i].dtype), op);
    return 0;
}

static int same_shape(const baton_sig_args *a, int i, int j, const char *ri, const char *rj,
                      const char *op, char *msg, size_t len)
{
    const baton_tensor_desc *x = &a->inputs[i], *y = &a->inputs[j];
    int same = x->rank == y->rank;
    for (int k = 0; same && k < x->rank; k++)
        same = x->shape[k] == y->shape[k];
    if (same)
        return 0;
    char n1[300], n2[300], s1[200], s2[200];
    return baton__reason_set(msg, len, BATON_EPLAN,
                             "%s has shape %s but %s has %s: %s needs them equal",
                             tn(a, 0, j, rj, n2, sizeof n2), shape_str(y, s2, sizeof s2),
                             tn(a, 0, i, ri, n1, sizeof n1), shape_str(x, s1, sizeof s1), op);
}

static const int op_inputs[DEC_OP_MAX + 1] = {0, 2, 3, 3, 4, 2, 1, 1, 1, 1, 2, 1, 5};
static const int op_outputs[DEC_OP_MAX + 1] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3};

int baton__dec_shapes(int op, const baton_sig_args *a, const baton_decoder_desc *d, dec_shape *s,
                      baton_tensor_desc *expected, char *msg, size_t len)
{
    const char *nm = baton__dec_op_name(op);
    memset(s, 0, sizeof *s);
    if (op < 1 || op > DEC_OP_MAX)
        return baton__reason_set(msg, len, BATON_EPLAN, "not a decoder op (code %d)", op);
    if (!a || a->n_inputs != op_inputs[op] || !a->inputs)
        return baton__reason_set(msg, len, BATON_EPLAN, "%s takes %d input%s, got %d", nm,
                                 op_inputs[op], op_inputs[op] == 1 ? "" : "s", a ? a->n_inputs : 0);
    if (a->n_outputs != op_outputs[op])
        return baton__reason_set(msg, len, BATON_EPLAN, "%s writes %d output%s, got %d", nm,
                                 op_outputs[op], op_outputs[op] == 1 ? "" : "s", a->n_outputs);
    int rc = 0;
    char nb[300], sb[200];
    const baton_tensor_desc *x = &a->inputs[0];
    baton_tensor_desc out = *x;
    switch (op) {
    case DEC_EMBEDDING: {
        const baton_tensor_desc *tab = &a->inputs[1];
        if ((rc = want_index(a, 0, "ids", nm, -1, msg, len)) ||
            (rc = want_float(a, 1, "table", nm, msg, len)))
            return rc;
        if (tab->rank != 2)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "%s has shape %s but embedding takes the table as [V, D] (rank 2)",
                tn(a, 0, 1, "table", nb, sizeof nb), shape_str(tab, sb, sizeof sb));
        if (x->rank + 1 > BATON_MAX_RANK)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "ids have rank %d: the output ([ids shape..., D]) would exceed rank "
                "%d; reshape the ids",
                x->rank, BATON_MAX_RANK);
        s->rows = numel(x);
        s->V = tab->shape[0];
        s->F = tab->shape[1];
        s->x_dt = tab->dtype;
        s->idx_dt = x->dtype;
        out.dtype = tab->dtype;
        out.shape[out.rank++] = s->F;
        break;
    }
    case DEC_ROPE: {
        if ((rc = want_float(a, 0, "x", nm, msg, len)) ||
            (rc = rows_of(a, 0, "x", nm, 0, "", &s->rows, &s->F, msg, len)))
            return rc;
        if (s->F % d->head_dim)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "%s has %lld features per row, not a multiple of head_dim %d: x is "
                "[..., heads * head_dim]",
                tn(a, 0, 0, "x", nb, sizeof nb), (long long)s->F, (int)d->head_dim);
        if ((rc = want_index(a, 1, "positions", nm, s->rows, msg, len)))
            return rc;
        const baton_tensor_desc *f = &a->inputs[2];
        if (f->dtype != BATON_DTYPE_F32 || numel(f) != d->head_dim / 2 || f->rank < 1)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "%s is %s%s but rope needs f32 [%d] (head_dim / 2 inverse "
                                     "frequencies)",
                                     tn(a, 0, 2, "inv_freq", nb, sizeof nb),
                                     baton_dtype_name(f->dtype), shape_str(f, sb, sizeof sb),
                                     (int)d->head_dim / 2);
        s->n = numel(x);
        s->x_dt = x->dtype;
        s->idx_dt = a->inputs[1].dtype;
        break;
    }
    case DEC_KV_CACHE_UPDATE: {
        if ((rc = want_float(a, 0, "cache", nm, msg, len)))
            return rc;
        if (x->rank < 2)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "%s has shape %s but kv_cache_update takes the cache as [S_max, "
                "kv_heads * head_dim]",
                tn(a, 0, 0, "cache", nb, sizeof nb), shape_str(x, sb, sizeof sb));
        s->F = x->shape[x->rank - 1];
        s->S = numel(x) / s->F;
        if ((rc = want_float(a, 1, "new", nm, msg, len)) ||
            (rc = same_dtype(a, 0, 1, "cache", "new", nm, msg, len)) ||
            (rc = rows_of(a, 1, "new", nm, s->F, "the cache's row width", &s->rows, NULL, msg,
                          len)) ||
            (rc = want_index(a, 2, "positions", nm, s->rows, msg, len)))
            return rc;
        s->n = numel(x);
        s->x_dt = x->dtype;
        s->idx_dt = a->inputs[2].dtype;
        break;
    }
    case DEC_ATTENTION: {
        char why[96];
        const int64_t F = (int64_t)d->n_heads * d->head_dim,
                      KF = (int64_t)d->n_kv_heads * d->head_dim;
        snprintf(why, sizeof why, "n_heads %d x head_dim %d", (int)d->n_heads, (int)d->head_dim);
        if ((rc = want_float(a, 0, "q", nm, msg, len)) ||
            (rc = rows_of(a, 0, "q", nm, F, why, &s->rows, &s->F, msg, len)))
            return rc;
        snprintf(why, sizeof why, "n_kv_heads %d x head_dim %d", (int)d->n_kv_heads,
                 (int)d->head_dim);
        if ((rc = want_float(a, 1, "k_cache", nm, msg, len)) ||
            (rc = same_dtype(a, 0, 1, "q", "k_cache", nm, msg, len)) ||
            (rc = rows_of(a, 1, "k_cache", nm, KF, why, &s->S, NULL, msg, len)) ||
            (rc = want_float(a, 2, "v_cache", nm, msg, len)) ||
            (rc = same_dtype(a, 0, 2, "q", "v_cache", nm, msg, len)) ||
            (rc = same_shape(a, 1, 2, "k_cache", "v_cache", nm, msg, len)) ||
            (rc = want_index(a, 3, "positions", nm, s->rows, msg, len)))
            return rc;
        s->KF = KF;
        s->n = numel(x);
        s->x_dt = x->dtype;
        s->idx_dt = a->inputs[3].dtype;
        break;
    }
    case DEC_SILU_MUL:
        if ((rc = want_float(a, 0, "a", nm, msg, len)) ||
            (rc = want_float(a, 1, "b", nm, msg, len)) ||
            (rc = same_dtype(a, 0, 1, "a", "b", nm, msg, len)) ||
            (rc = same_shape(a, 0, 1, "a", "b", nm, msg, len)))
            return rc;
        s->n = numel(x);
        s->x_dt = x->dtype;
        break;
    case DEC_SILU:
    case DEC_GELU:
    case DEC_CAST:
        if ((rc = want_float(a, 0, "x", nm, msg, len)))
            return rc;
        s->n = numel(x);
        s->x_dt = x->dtype;
        if (op == DEC_CAST) {
            baton_dtype want = a->outputs ? a->outputs[0].dtype : BATON_DTYPE_INVALID;
            if (!dtype_is_float(want))
                return baton__reason_set(msg, len, BATON_EPLAN,
                                         "%s is declared %s but cast writes bf16, f16, f32 or f64: "
                                         "declare the dtype to cast to",
                                         tn(a, 1, 0, "y", nb, sizeof nb), baton_dtype_name(want));
            out.dtype = want;
        }
        break;
    case DEC_SOFTMAX:
        if ((rc = want_float(a, 0, "x", nm, msg, len)) ||
            (rc = rows_of(a, 0, "x", nm, 0, "", &s->rows, &s->F, msg, len)))
            return rc;
        s->n = numel(x);
        s->x_dt = x->dtype;
        break;
    case DEC_SWIGLU: {
        int64_t f2 = 0;
        if ((rc = want_float(a, 0, "gu", nm, msg, len)) ||
            (rc = rows_of(a, 0, "gu", nm, 0, "", &s->rows, &f2, msg, len)))
            return rc;
        if (f2 % 2)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "%s has %lld features per row: swiglu takes [..., 2F] (the gate's F "
                "then the up projection's F), an even count",
                tn(a, 0, 0, "gu", nb, sizeof nb), (long long)f2);
        s->F = f2 / 2;
        s->n = s->rows * s->F;
        s->x_dt = x->dtype;
        out.shape[out.rank - 1] = s->F;
        break;
    }
    case DEC_ROPE_CACHE_UPDATE: {
        char why[96];
        const int64_t Dh = d->head_dim, QF = (int64_t)d->n_heads * Dh,
                      KF = (int64_t)d->n_kv_heads * Dh;
        snprintf(why, sizeof why, "(n_heads %d + 2 x n_kv_heads %d) x head_dim %d", (int)d->n_heads,
                 (int)d->n_kv_heads, (int)Dh);
        if ((rc = want_float(a, 0, "qkv", nm, msg, len)) ||
            (rc = rows_of(a, 0, "qkv", nm, QF + 2 * KF, why, &s->rows, &s->QKV, msg, len)) ||
            (rc = want_index(a, 1, "positions", nm, s->rows, msg, len)))
            return rc;
        const baton_tensor_desc *f = &a->inputs[2];
        if (f->dtype != BATON_DTYPE_F32 || numel(f) != Dh / 2 || f->rank < 1)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "%s is %s%s but %s needs f32 [%d] (head_dim / 2 inverse "
                                     "frequencies)",
                                     tn(a, 0, 2, "inv_freq", nb, sizeof nb),
                                     baton_dtype_name(f->dtype), shape_str(f, sb, sizeof sb), nm,
                                     (int)Dh / 2);
        snprintf(why, sizeof why, "n_kv_heads %d x head_dim %d", (int)d->n_kv_heads, (int)Dh);
        if ((rc = want_float(a, 3, "k_cache", nm, msg, len)) ||
            (rc = same_dtype(a, 0, 3, "qkv", "k_cache", nm, msg, len)) ||
            (rc = rows_of(a, 3, "k_cache", nm, KF, why, &s->S, NULL, msg, len)) ||
            (rc = want_float(a, 4, "v_cache", nm, msg, len)) ||
            (rc = same_dtype(a, 0, 4, "qkv", "v_cache", nm, msg, len)) ||
            (rc = same_shape(a, 3, 4, "k_cache", "v_cache", nm, msg, len)))
            return rc;
        s->F = QF;
        s->KF = KF;
        s->n = s->rows * QF;
        s->x_dt = x->dtype;
        s->idx_dt = a->inputs[1].dtype;
        out.shape[out.rank - 1] = QF;
        if (expected) {
            expected[1] = a->inputs[3];
            expected[2] = a->inputs[4];
        }
        break;
    }
    case DEC_SAMPLE:
        if ((rc = want_float(a, 0, "logits", nm, msg, len)) ||
            (rc = rows_of(a, 0, "logits", nm, 0, "", &s->rows, &s->V, msg, len)) ||
            (rc = want_index(a, 1, "step", nm, 1, msg, len)))
            return rc;
        if (d->top_k > s->V)
            return baton__reason_set(
                msg, len, BATON_EPLAN,
                "sample: top_k is %d but the vocabulary (the last dim of %s) has "
                "%lld entries: top_k must be at most %lld (0 = off)",
                (int)d->top_k, tn(a, 0, 0, "logits", nb, sizeof nb), (long long)s->V,
                (long long)s->V);
        s->F = s->V;
        s->n = numel(x);
        s->x_dt = x->dtype;
        s->idx_dt = a->inputs[1].dtype;
        memset(&out, 0, sizeof out);
        out.dtype = BATON_DTYPE_I64;
        out.rank = 1;
        out.shape[0] = s->rows;
        break;
    }
    s->y_dt = out.dtype;
    if (expected)
        expected[0] = out;
    return 0;
}

int baton__dec_call_read(const baton_exec_ctx *ctx, int op, void **buffers, int n_buffers,
                         const char *opaque, size_t opaque_len, baton_decoder_desc *d, dec_shape *s)
{
    char msg[512];
    const char *nm = baton__dec_op_name(op);
    int rc = baton__dec_desc_read(op, opaque, opaque_len, d, msg, sizeof msg);
    if (rc)
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s", msg);
    if ((rc = baton__ctx_call_ok(ctx, nm, buffers, n_buffers)))
        return rc;
    if ((rc = baton__dec_shapes(op, ctx->sig, d, s, NULL, msg, sizeof msg)))
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s", msg);
    /* The declared output, as the kernel will write it (cast takes its dtype from there). */
    if (ctx->sig->outputs && op != DEC_SAMPLE && op != DEC_EMBEDDING &&
        ctx->sig->outputs[0].dtype != s->y_dt)
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s: the output is %s but must be %s", nm,
                               baton_dtype_name(ctx->sig->outputs[0].dtype),
                               baton_dtype_name(s->y_dt));
    return 0;
}

/* ---- deciding a call once ------------------------------------------------------------------ */

/* The tensors a decoder op's step has at most, inputs and outputs alike (rope_cache_update: 5 and
 * 3); a step with more is decided on every call. */
#define DEC_PREP_TENSORS 8

/* What a step keeps from prepare (ctx->prepared): its descriptor read and its shapes checked,
 * keyed by what they were derived from: the descriptor's bytes, and the step's signature, the
 * same object with the same tensors (a binding of the plan's dims rewrites them in place). */
struct dec_prepared {
    int op, valid, n_in, n_out;
    const baton_sig_args *sig;
    size_t len;
    unsigned char opaque[sizeof(baton_decoder_desc)];
    baton_tensor_desc in[DEC_PREP_TENSORS], out[DEC_PREP_TENSORS];
    baton_decoder_desc d;
    dec_shape s;
};

static int prepared_matches(const struct dec_prepared *p, int op, const baton_sig_args *sig,
                            const char *opaque, size_t len)
{
    return p->valid && p->op == op && p->sig == sig && p->len == len && sig->inputs &&
           sig->n_inputs == p->n_in && sig->n_outputs == p->n_out &&
           memcmp(p->opaque, opaque, len) == 0 &&
           memcmp(p->in, sig->inputs, sizeof p->in[0] * (size_t)p->n_in) == 0 &&
           (!p->n_out || (sig->outputs &&
                          memcmp(p->out, sig->outputs, sizeof p->out[0] * (size_t)p->n_out) == 0));
}

/* Reads the call as baton__dec_call_read does and, where it is keyable, keeps it in p. */
static int prepared_fill(struct dec_prepared *p, const baton_exec_ctx *ctx, int op, void **buffers,
                         int n_buffers, const char *opaque, size_t len)
{
    p->valid = 0;
    int rc = baton__dec_call_read(ctx, op, buffers, n_buffers, opaque, len, &p->d, &p->s);
    if (rc)
        return rc;
    const baton_sig_args *sig = ctx->sig;
    if (!opaque || len > sizeof p->opaque || !sig->inputs || sig->n_inputs > DEC_PREP_TENSORS ||
        sig->n_outputs > DEC_PREP_TENSORS || (sig->n_outputs && !sig->outputs))
        return 0;
    p->op = op;
    p->sig = sig;
    p->len = len;
    memcpy(p->opaque, opaque, len);
    p->n_in = sig->n_inputs;
    p->n_out = sig->n_outputs;
    memcpy(p->in, sig->inputs, sizeof p->in[0] * (size_t)p->n_in);
    if (p->n_out)
        memcpy(p->out, sig->outputs, sizeof p->out[0] * (size_t)p->n_out);
    p->valid = 1;
    return 0;
}

int baton__dec_prepare(const baton_exec_ctx *ctx, int op, void **buffers, int n_buffers,
                       const char *opaque, size_t opaque_len, void **state)
{
    *state = NULL;
    struct dec_prepared *p = calloc(1, sizeof *p);
    if (!p)
        return baton__ctx_fail(ctx, BATON_ENOMEM, "%s: out of memory", baton__dec_op_name(op));
    if (prepared_fill(p, ctx, op, buffers, n_buffers, opaque, opaque_len) || !p->valid) {
        /* nothing kept: each call reads itself and reports what is wrong, as without prepare */
        free(p);
        if (ctx && ctx->errbuf && ctx->errbuf_len)
            ctx->errbuf[0] = 0;
        return 0;
    }
    *state = p;
    return 0;
}

int baton__dec_call_decide(const baton_exec_ctx *ctx, int op, void **buffers, int n_buffers,
                           const char *opaque, size_t opaque_len, baton_decoder_desc *d,
                           dec_shape *s)
{
    struct dec_prepared *p = ctx ? (struct dec_prepared *)ctx->prepared : NULL;
    if (!p)
        return baton__dec_call_read(ctx, op, buffers, n_buffers, opaque, opaque_len, d, s);
    int rc;
    if ((rc = baton__ctx_call_ok(ctx, baton__dec_op_name(op), buffers, n_buffers)))
        return rc;
    if (!prepared_matches(p, op, ctx->sig, opaque, opaque_len)) {
        if ((rc = prepared_fill(p, ctx, op, buffers, n_buffers, opaque, opaque_len)))
            return rc;
        if (!p->valid) /* not keyable: read on every call */
            return baton__dec_call_read(ctx, op, buffers, n_buffers, opaque, opaque_len, d, s);
    }
    *d = p->d;
    *s = p->s;
    return 0;
}
