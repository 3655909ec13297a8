/* load.c: the plan builder. It turns the node array that the JSON reader (json.c) made of a plan
 * file (format version 1) into a baton_plan, checking the schema and naming file:line:column and
 * the fix for every mistake, then runs the validator (validate.c) and the analysis (analyse.c). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dtype.h"
#include "plan/json.h"
#include "plan/plan_internal.h"
#include "targets/registry.h"

#define PLAN_MAX_ITEMS        1000000            /* tensors or steps in one plan */
#define PLAN_MAX_TENSOR_BYTES ((int64_t)1 << 40) /* 1 TiB: no device holds more */
#define PLAN_MAX_VALUES       4096               /* elements of an inline "values" init */

/* ---- the builder's context and messages -------------------------------------------------- */

typedef struct loader {
    baton_plan *plan;
    baton_error *err;
    jdoc t;
    int recent[4]; /* the tensors that steps' lists named last, -1 for none (see find_tensor) */
    unsigned n_recent;
} loader;

static const jnode *J(const loader *L, int n)
{
    return &L->t.v[n];
}

static plan_pos node_pos(const loader *L, int node)
{
    if (node < 0 || node >= L->t.n)
        return (plan_pos){0, 0};
    return (plan_pos){L->t.v[node].line, L->t.v[node].col};
}

static plan_pos key_pos(const loader *L, int node)
{
    if (node < 0 || node >= L->t.n || L->t.v[node].key_line == 0)
        return node_pos(L, node);
    return (plan_pos){L->t.v[node].key_line, L->t.v[node].key_col};
}

static int is_type(const loader *L, int n, jtype t)
{
    return jis(&L->t, n, t);
}

static int is_number(const loader *L, int n)
{
    return jis_number(&L->t, n);
}

static int jget(const loader *L, int obj, const char *key)
{
    return baton__plan_json_get(&L->t, obj, key);
}

static const char *json_kind(const loader *L, int n)
{
    return baton__plan_json_kind(&L->t, n);
}

static int load_fail(loader *L, int code, plan_pos pos, const char *fmt, ...) CORE_PRINTF(4, 5);

static int load_fail(loader *L, int code, plan_pos pos, const char *fmt, ...)
{
    char msg[BATON_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return baton__plan_error(L->err, code, L->plan, pos, "%s", msg);
}

static void join(char *buf, size_t cap, const char *const *items, int n)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && used < cap; i++) {
        int k = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", items[i]);
        if (k < 0)
            break;
        used += (size_t)k;
    }
}

/* " (did you mean 'x'?)" or "", into buf. */
static const char *did_you_mean(char *buf, size_t cap, const char *word, const char *const *cands,
                                int n)
{
    plan_suggest s;
    baton__plan_suggest_init(&s, word);
    for (int i = 0; i < n; i++)
        baton__plan_suggest_try(&s, cands[i]);
    buf[0] = 0;
    if (baton__plan_suggest_best(&s))
        snprintf(buf, cap, " (did you mean '%s'?)", baton__plan_suggest_best(&s));
    return buf;
}

/* How messages name an item before its name is known: "tensor 'x'" or "tensors[3]". */
static void subject(const loader *L, char *buf, size_t cap, const char *noun, const char *array,
                    int i, int obj)
{
    int name = jget(L, obj, "name");
    size_t nlen = is_type(L, name, J_STRING) ? J(L, name)->len : 0;
    size_t noun_len = strlen(noun);
    if (nlen > 0 && nlen <= PLAN_MAX_NAME && noun_len + nlen + 4 <= cap) {
        /* the common case, once per tensor and step: no printf */
        memcpy(buf, noun, noun_len);
        buf[noun_len] = ' ';
        buf[noun_len + 1] = '\'';
        memcpy(buf + noun_len + 2, J(L, name)->s, nlen);
        buf[noun_len + 2 + nlen] = '\'';
        buf[noun_len + 3 + nlen] = 0;
    } else {
        snprintf(buf, cap, "%s[%d]", array, i);
    }
}

/* Finds each allowed key of obj in one pass: fields[k] is the node of allowed[k], or -1. An
 * unknown key is an error that lists the allowed ones. */
static int collect(loader *L, int obj, const char *subj, const char *const *allowed, int n_allowed,
                   int *fields)
{
    for (int k = 0; k < n_allowed; k++)
        fields[k] = -1;
    for (int c = J(L, obj)->first; c >= 0; c = J(L, c)->next) {
        const char *key = J(L, c)->key;
        int k = 0;
        while (k < n_allowed && (key[0] != allowed[k][0] || strcmp(key, allowed[k]) != 0))
            k++;
        if (k == n_allowed) {
            char list[256], hint[96];
            join(list, sizeof list, allowed, n_allowed);
            return load_fail(L, BATON_EPLAN, key_pos(L, c),
                             "%s: unknown key '%.64s'%s; allowed keys: %s", subj, key,
                             did_you_mean(hint, sizeof hint, key, allowed, n_allowed), list);
        }
        fields[k] = c;
    }
    return 0;
}

static int valid_name(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '-'))
            return 0;
    }
    return 1;
}

/* Reads a tensor or step name (node v of obj) into *out (in the plan's pool). */
static int get_name(loader *L, int obj, int v, const char *subj, char **out)
{
    plan_pos pos = v >= 0 ? node_pos(L, v) : node_pos(L, obj);
    if (v < 0)
        return load_fail(L, BATON_EPLAN, pos, "%s has no \"name\"; add one, e.g. \"name\": \"h0\"",
                         subj);
    if (!is_type(L, v, J_STRING))
        return load_fail(L, BATON_EPLAN, pos, "%s: \"name\" must be a string, not %s", subj,
                         json_kind(L, v));
    const char *s = J(L, v)->s;
    if (J(L, v)->len > PLAN_MAX_NAME || !valid_name(s))
        return load_fail(
            L, BATON_EPLAN, pos,
            "%s: invalid name \"%.64s\"; a name is 1 to %d characters from A-Z a-z 0-9 _ . : -",
            subj, s, PLAN_MAX_NAME);
    if (!(*out = baton__plan_strdup(L->plan, s, J(L, v)->len)))
        return load_fail(L, BATON_ENOMEM, pos, "out of memory");
    return 0;
}

enum item_kind { ITEM_TENSOR, ITEM_STEP };

/* The start of every tensor and step: its subject for messages, an object holding only the
 * allowed keys (fields[k] is the node of keys[k]; keys[0] is "name"), and a valid name that no
 * earlier item of the same kind has, copied into *name. */
static int load_item_head(loader *L, enum item_kind kind, int i, int obj, const char *const *keys,
                          int n_keys, int *fields, char *subj, size_t cap, char **name)
{
    static const char *const nouns[2] = {"tensor", "step"};
    static const char *const arrays[2] = {"tensors", "steps"};
    static const char *const examples[2] = {
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4]}",
        "{\"name\": \"s0\", \"kernel\": \"copy\", \"device\": \"cpu\", \"inputs\": [\"x\"], "
        "\"outputs\": [\"y\"]}"};
    baton_plan *plan = L->plan;
    int rc;
    subject(L, subj, cap, nouns[kind], arrays[kind], i, obj);
    if (!is_type(L, obj, J_OBJECT))
        return load_fail(L, BATON_EPLAN, node_pos(L, obj),
                         "%s: a %s is an object such as %s, not %s", subj, nouns[kind],
                         examples[kind], json_kind(L, obj));
    if ((rc = collect(L, obj, subj, keys, n_keys, fields)) ||
        (rc = get_name(L, obj, fields[0], subj, name)))
        return rc;
    int prev = kind == ITEM_STEP ? baton__plan_index_add_step(plan, i)
                                 : baton__plan_index_add_tensor(plan, i);
    if (prev >= 0) {
        plan_pos first = kind == ITEM_STEP ? plan->steps[prev].pos : plan->tensors[prev].pos;
        return load_fail(L, BATON_EPLAN, node_pos(L, fields[0]),
                         "%s is declared twice (first at line %d:%d); rename one of them", subj,
                         first.line, first.column);
    }
    return 0;
}

/* ---- tensors --------------------------------------------------------------------------------- */

static const char *const dtype_words[] = {"bf16", "f16", "f32", "f64", "i32", "i64", "u8", "bool"};
static const char *const role_words[] = {"input", "output", "constant", "intermediate", "state"};
static const baton_role role_values[] = {BATON_ROLE_INPUT, BATON_ROLE_OUTPUT, BATON_ROLE_CONSTANT,
                                         BATON_ROLE_INTERMEDIATE, BATON_ROLE_STATE};
static const char *const init_words[] = {"fill", "normal", "uniform",
                                         "npy",  "values", "safetensors"};
/* The same lists for messages, spelled out so that the hot path formats nothing. */
#define DTYPE_LIST "bf16, f16, f32, f64, i32, i64, u8, bool"
#define ROLE_LIST  "input, output, constant, intermediate, state"
#define INIT_LIST  "fill, normal, uniform, npy, values, safetensors"

/* Reads the number at node v (key `key` of the init object `obj`). */
static int get_number(loader *L, int obj, int v, const char *key, const char *subj, int required,
                      double *out)
{
    if (v < 0) {
        if (required)
            return load_fail(L, BATON_EPLAN, node_pos(L, obj),
                             "%s: init is missing \"%s\" (a number)", subj, key);
        return 0;
    }
    if (!is_number(L, v))
        return load_fail(L, BATON_EPLAN, node_pos(L, v), "%s: init \"%s\" must be a number, not %s",
                         subj, key, json_kind(L, v));
    *out = J(L, v)->f;
    return 0;
}

/* Checks that value node v is stored exactly enough in dt: integers for integer dtypes, in
 * range; finite after rounding for float dtypes. */
static int check_value(loader *L, int v, const char *subj, baton_dtype dt)
{
    plan_pos pos = node_pos(L, v);
    double x = J(L, v)->f;
    if (dt == BATON_DTYPE_U8 || dt == BATON_DTYPE_BOOL) {
        double hi = dt == BATON_DTYPE_U8 ? 255 : 1;
        if (x != floor(x) || x < 0 || x > hi)
            return load_fail(L, BATON_EPLAN, pos, "%s: value %g is not %s, as a %s tensor holds",
                             subj, x, dt == BATON_DTYPE_U8 ? "an integer from 0 to 255" : "0 or 1",
                             baton_dtype_name(dt));
        return 0;
    }
    if (dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64) {
        double lo = dt == BATON_DTYPE_I32 ? -2147483648.0 : -9223372036854775808.0;
        if (x != floor(x))
            return load_fail(L, BATON_EPLAN, pos,
                             "%s: value %g is not an integer but the tensor is %s", subj, x,
                             baton_dtype_name(dt));
        if (x < lo || x >= -lo) /* -lo is 2^31 or 2^63, one past the largest value */
            return load_fail(L, BATON_EPLAN, pos, "%s: value %g is out of the range of %s", subj, x,
                             baton_dtype_name(dt));
        if (is_type(L, v, J_INT) &&
            (J(L, v)->i > 9007199254740992LL || J(L, v)->i < -9007199254740992LL))
            return load_fail(
                L, BATON_EPLAN, pos,
                "%s: value %lld is beyond 2^53 and cannot be written inline exactly; use "
                "an npy init",
                subj, J(L, v)->i);
        return 0;
    }
    unsigned char tmp[8];
    store_f64(dt, tmp, 0, x);
    if (isinf(load_f64(dt, tmp, 0)))
        return load_fail(L, BATON_EPLAN, pos, "%s: value %g overflows %s", subj, x,
                         baton_dtype_name(dt));
    return 0;
}

/* Whether x, rounded to float dtype dt, stays finite. */
static int fits_dtype(baton_dtype dt, double x)
{
    unsigned char tmp[8];
    store_f64(dt, tmp, 0, x);
    return !isinf(load_f64(dt, tmp, 0));
}

static char *resolve_path(const char *base_dir, const char *path)
{
    if (!base_dir || !*base_dir || path[0] == '/')
        return strdup(path);
    size_t n = strlen(base_dir) + strlen(path) + 2;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s/%s", base_dir, path);
    return out;
}

/* {"kind": "safetensors", "path": "w.safetensors", "key": "model.norm.weight"}: the file is
 * mapped (once per process) and its header checked here, so that a missing key or a wrong dtype or
 * shape fails at load; the bytes are read only where the runtime uses them. */
static int load_safetensors(loader *L, plan_tensor *t, int ji, const char *subj)
{
    static const char *const keys[] = {"kind", "path", "key"};
    tensor_init *in = &t->init;
    plan_pos pos = node_pos(L, ji);
    int f[3], rc;
    in->kind = INIT_SAFETENSORS;
    if ((rc = collect(L, ji, subj, keys, 3, f)))
        return rc;
    int jp = f[1], jk = f[2];
    if (!is_type(L, jp, J_STRING) || J(L, jp)->len == 0)
        return load_fail(L, BATON_EPLAN, jp >= 0 ? node_pos(L, jp) : pos,
                         "%s: a safetensors init needs \"path\", the .safetensors file relative "
                         "to the plan file",
                         subj);
    if (!is_type(L, jk, J_STRING) || J(L, jk)->len == 0)
        return load_fail(L, BATON_EPLAN, jk >= 0 ? node_pos(L, jk) : pos,
                         "%s: a safetensors init needs \"key\", the tensor's name in the file, "
                         "e.g. \"model.norm.weight\"",
                         subj);
    plan_pos ppos = node_pos(L, jp), kpos = node_pos(L, jk);
    if (!(in->path = resolve_path(L->plan->base_dir, J(L, jp)->s)) ||
        !(in->key = strdup(J(L, jk)->s)))
        return load_fail(L, BATON_ENOMEM, ppos, "out of memory");
    baton_error serr = {0};
    if ((rc = baton__st_open(in->path, &in->st, &serr)))
        return load_fail(L, rc == BATON_ENOMEM ? BATON_ENOMEM : BATON_EIO, ppos,
                         "%s: cannot use safetensors init: %s", subj, serr.message);
    const st_header *h = baton__st_file_header(in->st);
    int e = baton__st_header_find(h, in->key);
    if (e < 0) {
        plan_suggest sg;
        char hint[PLAN_MAX_NAME + 40] = "";
        baton__plan_suggest_init(&sg, in->key);
        for (int k = 0; k < h->n; k++)
            baton__plan_suggest_try(&sg, h->entries[k].name);
        if (baton__plan_suggest_best(&sg))
            snprintf(hint, sizeof hint, " (did you mean '%.*s'?)", PLAN_MAX_NAME,
                     baton__plan_suggest_best(&sg));
        return load_fail(L, BATON_EPLAN, kpos,
                         "%s: %s holds no tensor '%.128s'%s; it has %d tensors (list them with "
                         "python -c \"import safetensors; print(safetensors.safe_open('%s', "
                         "'np').keys())\")",
                         subj, J(L, jp)->s, in->key, hint, h->n, J(L, jp)->s);
    }
    const st_entry *en = &h->entries[e];
    int same = en->desc.dtype == t->desc.dtype && en->desc.rank == t->desc.rank;
    for (int i = 0; same && i < en->desc.rank; i++)
        same = en->desc.shape[i] == t->desc.shape[i];
    if (!same) {
        char have[160], want[160];
        baton__desc_format(have, sizeof have, &en->desc);
        baton__desc_format(want, sizeof want, &t->desc);
        return load_fail(L, BATON_EPLAN, kpos,
                         "%s: key '%.128s' of %s holds %s but the tensor is declared %s; declare "
                         "the tensor as the file has it (or convert the file)",
                         subj, in->key, J(L, jp)->s, have, want);
    }
    in->mapped = baton__st_file_data(in->st, e);
    size_t es = baton_dtype_size(t->desc.dtype);
    in->in_place = ((uintptr_t)in->mapped % es) == 0;
    return 0;
}

static int load_init(loader *L, plan_tensor *t, int ji, const char *subj)
{
    tensor_init *in = &t->init;
    plan_pos pos = node_pos(L, ji);
    char hint[96];
    if (!is_type(L, ji, J_OBJECT))
        return load_fail(
            L, BATON_EPLAN, pos,
            "%s: \"init\" must be an object such as {\"kind\": \"fill\", \"value\": 0}, "
            "not %s",
            subj, json_kind(L, ji));
    int jk = jget(L, ji, "kind");
    if (jk < 0)
        return load_fail(L, BATON_EPLAN, pos, "%s: init has no \"kind\"; use one of " INIT_LIST,
                         subj);
    if (!is_type(L, jk, J_STRING))
        return load_fail(L, BATON_EPLAN, node_pos(L, jk),
                         "%s: init \"kind\" must be a string (one of " INIT_LIST "), not %s", subj,
                         json_kind(L, jk));
    const char *kind = J(L, jk)->s;
    static const char *const fill_keys[] = {"kind", "value"};
    static const char *const normal_keys[] = {"kind", "seed", "std", "mean"};
    static const char *const uniform_keys[] = {"kind", "seed", "low", "high"};
    static const char *const npy_keys[] = {"kind", "path"};
    static const char *const values_keys[] = {"kind", "values"};
    int f[4];
    int rc;
    if (strcmp(kind, "fill") == 0) {
        in->kind = INIT_FILL;
        if ((rc = collect(L, ji, subj, fill_keys, 2, f)) ||
            (rc = get_number(L, ji, f[1], "value", subj, 1, &in->value)))
            return rc;
        return check_value(L, f[1], subj, t->desc.dtype);
    }
    if (strcmp(kind, "normal") == 0 || strcmp(kind, "uniform") == 0) {
        int normal = kind[0] == 'n';
        in->kind = normal ? INIT_NORMAL : INIT_UNIFORM;
        if ((rc = collect(L, ji, subj, normal ? normal_keys : uniform_keys, 4, f)))
            return rc;
        if (!is_type(L, f[1], J_INT) || J(L, f[1])->i < 0)
            return load_fail(L, BATON_EPLAN, f[1] >= 0 ? node_pos(L, f[1]) : pos,
                             "%s: a %s init needs \"seed\", an integer from 0 to 2^63-1, e.g. "
                             "\"seed\": 7",
                             subj, kind);
        in->seed = (uint64_t)J(L, f[1])->i;
        if (normal) {
            in->mean = 0;
            if ((rc = get_number(L, ji, f[2], "std", subj, 1, &in->std)) ||
                (rc = get_number(L, ji, f[3], "mean", subj, 0, &in->mean)))
                return rc;
            if (in->std < 0)
                return load_fail(L, BATON_EPLAN, node_pos(L, f[2]),
                                 "%s: \"std\" is %g; a standard deviation must be >= 0", subj,
                                 in->std);
            /* The generator's draws reach 8.58 standard deviations (sqrt(-2 ln 2^-53)): a
             * mean and std whose extreme overflows the dtype would store infinities, as a
             * "fill" beyond it would, and is refused as that is. */
            const double extreme = fabs(in->mean) + 8.58 * in->std;
            if (!dtype_is_int(t->desc.dtype) && !fits_dtype(t->desc.dtype, extreme))
                return load_fail(L, BATON_EPLAN, node_pos(L, f[2]),
                                 "%s: a normal init with mean %g and std %g draws values up to "
                                 "8.58 std from the mean, which overflow %s; give a smaller "
                                 "std or a wider dtype",
                                 subj, in->mean, in->std, baton_dtype_name(t->desc.dtype));
            return 0;
        }
        if ((rc = get_number(L, ji, f[2], "low", subj, 1, &in->low)) ||
            (rc = get_number(L, ji, f[3], "high", subj, 1, &in->high)))
            return rc;
        if (!(in->low < in->high))
            return load_fail(L, BATON_EPLAN, node_pos(L, f[3]),
                             "%s: uniform init needs low < high, got low %g and high %g", subj,
                             in->low, in->high);
        if (!isfinite(in->high - in->low))
            return load_fail(L, BATON_EPLAN, node_pos(L, f[3]),
                             "%s: uniform init range [%g, %g) is wider than a double can hold",
                             subj, in->low, in->high);
        if (!dtype_is_int(t->desc.dtype) &&
            (!fits_dtype(t->desc.dtype, in->low) || !fits_dtype(t->desc.dtype, in->high)))
            return load_fail(L, BATON_EPLAN, node_pos(L, f[3]),
                             "%s: uniform init range [%g, %g) overflows %s; give bounds within "
                             "its range",
                             subj, in->low, in->high, baton_dtype_name(t->desc.dtype));
        return 0;
    }
    if (strcmp(kind, "npy") == 0) {
        in->kind = INIT_NPY;
        if ((rc = collect(L, ji, subj, npy_keys, 2, f)))
            return rc;
        int jp = f[1];
        plan_pos ppos = jp >= 0 ? node_pos(L, jp) : pos;
        if (!is_type(L, jp, J_STRING) || J(L, jp)->len == 0)
            return load_fail(
                L, BATON_EPLAN, ppos,
                "%s: an npy init needs \"path\", the .npy file relative to the plan file", subj);
        in->path = resolve_path(L->plan->base_dir, J(L, jp)->s);
        if (!in->path)
            return load_fail(L, BATON_ENOMEM, ppos, "out of memory");
        /* The whole file is read once here so that a wrong dtype or shape fails at load, not at
         * prepare time; the data is read again when the runtime materialises the constant. */
        baton_tensor_desc d;
        void *data = NULL;
        baton_error nerr = {0};
        rc = baton_npy_read(in->path, &d, &data, &nerr);
        free(data);
        if (rc)
            return load_fail(L, rc == BATON_ENOMEM ? BATON_ENOMEM : BATON_EIO, ppos,
                             "%s: cannot use npy init: %s", subj, nerr.message);
        int same = d.dtype == t->desc.dtype && d.rank == t->desc.rank;
        for (int i = 0; same && i < d.rank; i++)
            same = d.shape[i] == t->desc.shape[i];
        if (!same) {
            char have[160], want[160];
            baton__desc_format(have, sizeof have, &d);
            baton__desc_format(want, sizeof want, &t->desc);
            return load_fail(L, BATON_EPLAN, ppos,
                             "%s: %s holds %s but the tensor is declared %s; convert the file or "
                             "change the declaration",
                             subj, J(L, jp)->s, have, want);
        }
        return 0;
    }
    if (strcmp(kind, "safetensors") == 0)
        return load_safetensors(L, t, ji, subj);
    if (strcmp(kind, "values") == 0) {
        in->kind = INIT_VALUES;
        if ((rc = collect(L, ji, subj, values_keys, 2, f)))
            return rc;
        int ja = f[1];
        int64_t numel = baton_tensor_desc_numel(&t->desc);
        if (!is_type(L, ja, J_ARRAY))
            return load_fail(L, BATON_EPLAN, ja >= 0 ? node_pos(L, ja) : pos,
                             "%s: a values init needs \"values\", an array of %lld numbers", subj,
                             (long long)numel);
        if (numel > PLAN_MAX_VALUES)
            return load_fail(
                L, BATON_EPLAN, pos,
                "%s: inline values are for tensors of at most %d elements and this one "
                "has %lld; use an npy init",
                subj, PLAN_MAX_VALUES, (long long)numel);
        if ((int64_t)J(L, ja)->n != numel)
            return load_fail(L, BATON_EPLAN, node_pos(L, ja),
                             "%s: \"values\" has %d numbers but the tensor has %lld elements", subj,
                             J(L, ja)->n, (long long)numel);
        in->values = malloc((size_t)numel * sizeof(double));
        if (!in->values)
            return load_fail(L, BATON_ENOMEM, pos, "out of memory");
        in->n_values = numel;
        int i = 0;
        for (int c = J(L, ja)->first; c >= 0; c = J(L, c)->next, i++) {
            if (!is_number(L, c))
                return load_fail(L, BATON_EPLAN, node_pos(L, c),
                                 "%s: values[%d] must be a number, not %s", subj, i,
                                 json_kind(L, c));
            in->values[i] = J(L, c)->f;
            if ((rc = check_value(L, c, subj, t->desc.dtype)))
                return rc;
        }
        return 0;
    }
    return load_fail(L, BATON_EPLAN, node_pos(L, jk),
                     "%s: unknown init kind '%.64s'%s; use one of %s", subj, kind,
                     did_you_mean(hint, sizeof hint, kind, init_words, 6), INIT_LIST);
}

static int find_dim(const baton_plan *plan, const char *name)
{
    for (int k = 0; k < plan->n_dims; k++)
        if (strcmp(plan->dims[k].name, name) == 0)
            return k;
    return -1;
}

/* "dims": {"seq": {"min": 1, "max": 2048}, ...}: the dimensions a run binds. */
static int load_dims(loader *L, int jd)
{
    static const char *const keys[] = {"min", "max"};
    baton_plan *plan = L->plan;
    if (jd < 0)
        return 0;
    if (!is_type(L, jd, J_OBJECT))
        return load_fail(L, BATON_EPLAN, node_pos(L, jd),
                         "\"dims\" must be an object such as {\"seq\": {\"min\": 1, \"max\": "
                         "2048}}, not %s",
                         json_kind(L, jd));
    int n = J(L, jd)->n;
    if (n > 127)
        return load_fail(L, BATON_EPLAN, node_pos(L, jd),
                         "\"dims\" declares %d dimensions; a plan has at most 127", n);
    if (!(plan->dims = calloc((size_t)(n ? n : 1), sizeof *plan->dims)))
        return load_fail(L, BATON_ENOMEM, node_pos(L, jd), "out of memory");
    for (int c = J(L, jd)->first; c >= 0; c = J(L, c)->next) {
        const char *name = J(L, c)->key;
        char subj[PLAN_MAX_NAME + 32];
        snprintf(subj, sizeof subj, "dimension '%.64s'", name);
        plan_pos pos = key_pos(L, c);
        if (strlen(name) > PLAN_MAX_NAME || !valid_name(name))
            return load_fail(L, BATON_EPLAN, pos,
                             "dimension name \"%.64s\" is invalid; a name is 1 to %d characters "
                             "from A-Z a-z 0-9 _ . : -",
                             name, PLAN_MAX_NAME);
        if (!is_type(L, c, J_OBJECT))
            return load_fail(L, BATON_EPLAN, node_pos(L, c),
                             "%s must be an object {\"min\": 1, \"max\": 2048}, not %s", subj,
                             json_kind(L, c));
        int f[2], rc;
        if ((rc = collect(L, c, subj, keys, 2, f)))
            return rc;
        for (int k = 0; k < 2; k++)
            if (f[k] < 0 || !is_type(L, f[k], J_INT) || J(L, f[k])->i < 1 ||
                J(L, f[k])->i > PLAN_MAX_TENSOR_BYTES)
                return load_fail(L, BATON_EPLAN, f[k] >= 0 ? node_pos(L, f[k]) : node_pos(L, c),
                                 "%s needs \"%s\", an integer from 1 to 2^40", subj, keys[k]);
        plan_dim *d = &plan->dims[plan->n_dims];
        d->min = J(L, f[0])->i;
        d->max = J(L, f[1])->i;
        d->pos = pos;
        if (d->min > d->max)
            return load_fail(L, BATON_EPLAN, node_pos(L, f[0]),
                             "%s has min %lld above max %lld; give min <= max", subj,
                             (long long)d->min, (long long)d->max);
        if (!(d->name = baton__plan_strdup(plan, name, strlen(name))))
            return load_fail(L, BATON_ENOMEM, pos, "out of memory");
        plan->n_dims++;
    }
    return 0;
}

/* The fixed part of a tensor's element count and how often it names each dimension: two shapes
 * hold the same elements for every binding exactly when both agree. */
static int64_t shape_signature(const baton_plan *plan, const plan_tensor *t, int *count)
{
    int64_t fixed = 1;
    for (int k = 0; k < plan->n_dims; k++)
        count[k] = 0;
    for (int d = 0; d < t->desc.rank; d++) {
        if (t->dim[d] >= 0)
            count[t->dim[d]]++;
        else
            fixed *= t->desc.shape[d];
    }
    return fixed;
}

/* Once every tensor is declared: each view's base, the end of its chain (its storage) and the
 * rules: a declared base, no cycle, the same dtype and as many elements for every binding. */
static int resolve_views(loader *L)
{
    baton_plan *plan = L->plan;
    int ca[128], cb[128];
    for (int i = 0; i < plan->n_tensors; i++) {
        plan_tensor *t = &plan->tensors[i];
        if (t->view_of > -2)
            continue;
        int jv = -2 - t->view_of;
        const char *name = J(L, jv)->s;
        int b = baton__plan_find_tensor(plan, name);
        if (b < 0 || b == i) {
            plan_suggest sg;
            char hint[PLAN_MAX_NAME + 32] = "";
            baton__plan_suggest_init(&sg, name);
            for (int k = 0; k < plan->n_tensors; k++)
                if (k != i)
                    baton__plan_suggest_try(&sg, plan->tensors[k].name);
            if (baton__plan_suggest_best(&sg))
                snprintf(hint, sizeof hint, " (did you mean '%s'?)", baton__plan_suggest_best(&sg));
            return load_fail(L, BATON_EPLAN, t->view_pos,
                             "tensor '%s' is a view of '%.64s', %s%s; name another declared tensor",
                             t->name, name, b == i ? "itself" : "which is not declared", hint);
        }
        t->view_of = b;
    }
    for (int i = 0; i < plan->n_tensors; i++) {
        plan_tensor *t = &plan->tensors[i];
        if (t->view_of < 0)
            continue;
        int r = i, hops = 0;
        while (plan->tensors[r].view_of >= 0 && hops++ <= plan->n_tensors)
            r = plan->tensors[r].view_of;
        if (hops > plan->n_tensors)
            return load_fail(L, BATON_EPLAN, t->view_pos,
                             "tensor '%s' is a view in a cycle of views; one tensor of the chain "
                             "must hold the bytes (no \"view_of\")",
                             t->name);
        t->storage = r;
        const plan_tensor *base = &plan->tensors[t->view_of];
        int64_t fa = shape_signature(plan, t, ca), fb = shape_signature(plan, base, cb);
        int same = fa == fb && t->desc.dtype == base->desc.dtype;
        for (int k = 0; same && k < plan->n_dims; k++)
            same = ca[k] == cb[k];
        if (!same) {
            char a[160], bb[160];
            baton__desc_format(a, sizeof a, &t->desc);
            baton__desc_format(bb, sizeof bb, &base->desc);
            return load_fail(L, BATON_EPLAN, t->view_pos,
                             "tensor '%s' (%s) is a view of '%s' (%s) but does not hold the same "
                             "elements of the same dtype%s; a view reshapes without a copy: give "
                             "it the base's dtype and element count",
                             t->name, a, base->name, bb,
                             t->has_dims || base->has_dims ? " for every value of the dimensions"
                                                           : "");
        }
        t->has_dims = t->has_dims || base->has_dims;
    }
    return 0;
}

enum { T_NAME, T_DTYPE, T_SHAPE, T_ROLE, T_INIT, T_VIEW_OF, T_N };

static int load_tensor(loader *L, int i, int jt)
{
    static const char *const keys[T_N] = {"name", "dtype", "shape", "role", "init", "view_of"};
    baton_plan *plan = L->plan;
    plan_tensor *t = &plan->tensors[i];
    char subj[PLAN_MAX_NAME + 32], hint[96];
    int f[T_N];
    t->pos = node_pos(L, jt);
    t->producer = t->first_read = t->last_read = -1;
    int rc = load_item_head(L, ITEM_TENSOR, i, jt, keys, T_N, f, subj, sizeof subj, &t->name);
    if (rc)
        return rc;

    int jd = f[T_DTYPE];
    if (jd < 0)
        return load_fail(L, BATON_EPLAN, t->pos, "%s has no \"dtype\"; add one of " DTYPE_LIST,
                         subj);
    if (!is_type(L, jd, J_STRING))
        return load_fail(L, BATON_EPLAN, node_pos(L, jd),
                         "%s: \"dtype\" must be a string (one of " DTYPE_LIST "), not %s", subj,
                         json_kind(L, jd));
    t->desc.dtype = baton_dtype_from_name(J(L, jd)->s);
    if (t->desc.dtype == BATON_DTYPE_INVALID)
        return load_fail(L, BATON_EPLAN, node_pos(L, jd),
                         "%s: unknown dtype '%.64s'%s; valid dtypes: " DTYPE_LIST, subj,
                         J(L, jd)->s, did_you_mean(hint, sizeof hint, J(L, jd)->s, dtype_words, 8));

    int js = f[T_SHAPE];
    if (js < 0)
        return load_fail(
            L, BATON_EPLAN, t->pos,
            "%s has no \"shape\"; add one, e.g. \"shape\": [8, 4096] ([] for a scalar)", subj);
    if (!is_type(L, js, J_ARRAY))
        return load_fail(L, BATON_EPLAN, node_pos(L, js),
                         "%s: \"shape\" must be an array of sizes such as [8, 4096], not %s", subj,
                         json_kind(L, js));
    if (J(L, js)->n > BATON_MAX_RANK)
        return load_fail(L, BATON_EPLAN, node_pos(L, js),
                         "%s: shape has %d dimensions; at most %d are supported", subj, J(L, js)->n,
                         BATON_MAX_RANK);
    t->desc.rank = J(L, js)->n;
    int64_t numel = 1;
    int d = 0;
    for (int k = 0; k < BATON_MAX_RANK; k++)
        t->dim[k] = -1;
    for (int c = J(L, js)->first; c >= 0; c = J(L, c)->next, d++) {
        int64_t n;
        if (is_type(L, c, J_STRING)) {
            /* a dimension bound at run time: memory for its max */
            int k = find_dim(L->plan, J(L, c)->s);
            if (k < 0) {
                char h2[PLAN_MAX_NAME + 32] = "";
                plan_suggest sg;
                baton__plan_suggest_init(&sg, J(L, c)->s);
                for (int q = 0; q < L->plan->n_dims; q++)
                    baton__plan_suggest_try(&sg, L->plan->dims[q].name);
                if (baton__plan_suggest_best(&sg))
                    snprintf(h2, sizeof h2, " (did you mean '%s'?)", baton__plan_suggest_best(&sg));
                return load_fail(L, BATON_EPLAN, node_pos(L, c),
                                 "%s: shape[%d] names dimension '%.64s', which is not declared%s; "
                                 "declare it under \"dims\", e.g. \"dims\": {\"%.64s\": "
                                 "{\"min\": 1, \"max\": 2048}}",
                                 subj, d, J(L, c)->s, h2, J(L, c)->s);
            }
            t->dim[d] = (signed char)k;
            t->has_dims = 1;
            n = L->plan->dims[k].max;
        } else if (!is_type(L, c, J_INT) || J(L, c)->i < 1) {
            return load_fail(L, BATON_EPLAN, node_pos(L, c),
                             "%s: shape[%d] must be an integer >= 1 or the name of a dimension "
                             "(a scalar has shape [])",
                             subj, d);
        } else {
            n = (int64_t)J(L, c)->i;
        }
        if (n > PLAN_MAX_TENSOR_BYTES || numel > PLAN_MAX_TENSOR_BYTES / n)
            numel = PLAN_MAX_TENSOR_BYTES + 1;
        else
            numel *= n;
        t->desc.shape[d] = n;
    }
    size_t esize = baton_dtype_size(t->desc.dtype);
    if (numel > PLAN_MAX_TENSOR_BYTES / (int64_t)esize)
        return load_fail(L, BATON_EPLAN, node_pos(L, js),
                         "%s is larger than 1 TiB; no device can hold it: check the shape", subj);
    t->nbytes = (size_t)numel * esize;

    t->role = BATON_ROLE_INTERMEDIATE;
    int jr = f[T_ROLE];
    if (jr >= 0) {
        if (!is_type(L, jr, J_STRING))
            return load_fail(L, BATON_EPLAN, node_pos(L, jr),
                             "%s: \"role\" must be a string (one of " ROLE_LIST "), not %s", subj,
                             json_kind(L, jr));
        int found = -1;
        for (int r = 0; r < 5; r++)
            if (strcmp(J(L, jr)->s, role_words[r]) == 0)
                found = r;
        if (found < 0)
            return load_fail(L, BATON_EPLAN, node_pos(L, jr),
                             "%s: unknown role '%.64s'%s; valid roles: " ROLE_LIST, subj,
                             J(L, jr)->s,
                             did_you_mean(hint, sizeof hint, J(L, jr)->s, role_words, 5));
        t->role = role_values[found];
    }

    int ji = f[T_INIT];
    t->view_of = -1;
    t->storage = i;
    t->state_device = (baton_device){BATON_DEVICE_NONE, 0};
    if (f[T_VIEW_OF] >= 0) {
        int jv = f[T_VIEW_OF];
        t->view_pos = node_pos(L, jv);
        if (!is_type(L, jv, J_STRING))
            return load_fail(L, BATON_EPLAN, t->view_pos,
                             "%s: \"view_of\" must be the name of the tensor whose bytes this one "
                             "reads, not %s",
                             subj, json_kind(L, jv));
        if (t->role != BATON_ROLE_INTERMEDIATE || ji >= 0)
            return load_fail(L, BATON_EPLAN, t->view_pos,
                             "%s is a view (\"view_of\") and so has no role and no init of its "
                             "own: remove its \"%s\"",
                             subj, ji >= 0 ? "init" : "role");
        /* resolved once every tensor is declared (resolve_views) */
        t->view_of = -2 - jv;
        return 0;
    }
    if (t->has_dims && (t->role == BATON_ROLE_CONSTANT || t->role == BATON_ROLE_STATE))
        return load_fail(L, BATON_EPLAN, node_pos(L, js),
                         "%s: a %s has a fixed shape (its bytes live across runs); give "
                         "its dimensions as numbers, the max of a dimension if need be",
                         subj, baton_role_name(t->role));
    if (t->role == BATON_ROLE_STATE) {
        L->plan->has_state = 1;
        if (ji < 0) {
            /* zeros by default */
            t->init.kind = INIT_FILL;
            t->init.value = 0;
            return 0;
        }
        return load_init(L, t, ji, subj);
    }
    if (t->role != BATON_ROLE_CONSTANT) {
        if (ji >= 0)
            return load_fail(L, BATON_EPLAN, key_pos(L, ji),
                             "%s has an init but its role is '%s'; only constants and state take "
                             "one: set \"role\": \"constant\" or remove \"init\"",
                             subj, baton_role_name(t->role));
        return 0;
    }
    if (ji < 0)
        return load_fail(
            L, BATON_EPLAN, t->pos,
            "constant %s has no \"init\"; add one, e.g. \"init\": {\"kind\": \"fill\", "
            "\"value\": 0}",
            subj);
    return load_init(L, t, ji, subj);
}

/* ---- steps ----------------------------------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The index of the tensor a step's list names, or -1. Steps mostly read what the steps just
 * before them wrote and write the tensor declared after that, so those few are tried before the
 * name index, whose slots are scattered over memory that a large plan does not keep in cache. */
static int find_tensor(loader *L, const char *name)
{
    const baton_plan *plan = L->plan;
    int t = -1, last = L->recent[(L->n_recent + 3) % 4u];
    for (int k = 0; k < 4 && t < 0; k++) {
        int c = k < 3 ? L->recent[(L->n_recent + 3u - (unsigned)k) % 4u] : last + 1;
        if (c >= 0 && c < plan->n_tensors && plan->tensors[c].name &&
            plan->tensors[c].name[0] == name[0] && strcmp(plan->tensors[c].name, name) == 0)
            t = c;
    }
    if (t < 0)
        t = baton__plan_find_tensor(plan, name);
    if (t >= 0)
        L->recent[L->n_recent++ % 4u] = t;
    return t;
}

static int load_tensor_list(loader *L, plan_step *s, int ja, const char *key, const char *subj,
                            int **idx, plan_pos **pos, int *count)
{
    *count = 0;
    if (ja < 0)
        return 0;
    if (!is_type(L, ja, J_ARRAY))
        return load_fail(L, BATON_EPLAN, node_pos(L, ja),
                         "%s: \"%s\" must be an array of tensor names, not %s", subj, key,
                         json_kind(L, ja));
    int n = J(L, ja)->n;
    if (n > PLAN_MAX_STEP_ARGS)
        return load_fail(L, BATON_EPLAN, node_pos(L, ja), "%s lists %d %s; a step takes at most %d",
                         subj, n, key, PLAN_MAX_STEP_ARGS);
    if (n == 0)
        return 0;
    *idx = baton__plan_alloc(L->plan, (size_t)n * sizeof(int));
    *pos = baton__plan_alloc(L->plan, (size_t)n * sizeof(plan_pos));
    if (!*idx || !*pos)
        return load_fail(L, BATON_ENOMEM, s->pos, "out of memory");
    int i = 0;
    for (int c = J(L, ja)->first; c >= 0; c = J(L, c)->next, i++) {
        plan_pos p = node_pos(L, c);
        if (!is_type(L, c, J_STRING))
            return load_fail(L, BATON_EPLAN, p,
                             "%s: %s[%d] must be a tensor name (a string), not %s", subj, key, i,
                             json_kind(L, c));
        const char *name = J(L, c)->s;
        int t = find_tensor(L, name);
        if (t < 0) {
            plan_suggest sg;
            char hint[PLAN_MAX_NAME + 32] = "";
            baton__plan_suggest_init(&sg, name);
            for (int k = 0; k < L->plan->n_tensors; k++)
                baton__plan_suggest_try(&sg, L->plan->tensors[k].name);
            if (baton__plan_suggest_best(&sg))
                snprintf(hint, sizeof hint, " (did you mean '%s'?)", baton__plan_suggest_best(&sg));
            return load_fail(
                L, BATON_EPLAN, p,
                "%s: %s '%.64s' is not a declared tensor%s; declare it under \"tensors\"", subj,
                key[0] == 'i' ? "input" : "output", name, hint);
        }
        (*idx)[i] = t;
        (*pos)[i] = p;
        (*count)++;
    }
    return 0;
}

static int load_attrs(loader *L, plan_step *s, int ja, const char *subj)
{
    if (ja < 0)
        return 0;
    if (!is_type(L, ja, J_OBJECT))
        return load_fail(L, BATON_EPLAN, node_pos(L, ja),
                         "%s: \"attrs\" must be an object such as {\"eps\": 1e-5}, not %s", subj,
                         json_kind(L, ja));
    int n = J(L, ja)->n;
    if (n == 0)
        return 0;
    if (n > 64)
        return load_fail(L, BATON_EPLAN, node_pos(L, ja),
                         "%s has %d attributes; a step takes at most 64", subj, n);
    s->attrs = baton__plan_alloc(L->plan, (size_t)n * sizeof *s->attrs);
    s->attr_pos = baton__plan_alloc(L->plan, (size_t)n * sizeof *s->attr_pos);
    if (!s->attrs || !s->attr_pos)
        return load_fail(L, BATON_ENOMEM, s->pos, "out of memory");
    memset(s->attrs, 0, (size_t)n * sizeof *s->attrs);
    for (int c = J(L, ja)->first; c >= 0; c = J(L, c)->next) {
        const jnode *v = J(L, c);
        baton_attr *a = &s->attrs[s->n_attrs];
        s->attr_pos[s->n_attrs] = key_pos(L, c);
        if (!(a->name = baton__plan_strdup(L->plan, v->key, strlen(v->key))))
            return load_fail(L, BATON_ENOMEM, s->pos, "out of memory");
        s->n_attrs++;
        switch (v->type) {
        case J_INT:
            a->type = BATON_ATTR_INT;
            a->i = (int64_t)v->i;
            a->f = (double)a->i;
            break;
        case J_REAL:
            a->type = BATON_ATTR_FLOAT;
            a->f = v->f;
            break;
        case J_TRUE:
        case J_FALSE:
            a->type = BATON_ATTR_BOOL;
            a->i = v->type == J_TRUE;
            break;
        case J_STRING:
            a->type = BATON_ATTR_STRING;
            if (!(a->s = baton__plan_strdup(L->plan, v->s, v->len)))
                return load_fail(L, BATON_ENOMEM, s->pos, "out of memory");
            break;
        default:
            return load_fail(
                L, BATON_EPLAN, node_pos(L, c),
                "%s: attribute '%.64s' must be an integer, a number, a bool or a string, "
                "not %s",
                subj, v->key, json_kind(L, c));
        }
    }
    return 0;
}

static int load_opaque(loader *L, plan_step *s, int jo, const char *subj)
{
    if (jo < 0)
        return 0;
    plan_pos p = node_pos(L, jo);
    if (!is_type(L, jo, J_STRING))
        return load_fail(L, BATON_EPLAN, p,
                         "%s: \"opaque\" must be a hex string such as \"0a1b\", not %s", subj,
                         json_kind(L, jo));
    const char *h = J(L, jo)->s;
    size_t len = J(L, jo)->len;
    if (len % 2)
        return load_fail(
            L, BATON_EPLAN, p,
            "%s: \"opaque\" has %zu hex digits; bytes take two each, so the count must "
            "be even",
            subj, len);
    if (len / 2 > BATON_OPAQUE_MAX)
        return load_fail(L, BATON_EPLAN, p,
                         "%s: \"opaque\" holds %zu bytes; a descriptor is at most %d bytes", subj,
                         len / 2, BATON_OPAQUE_MAX);
    char *bytes = NULL;
    if (len && !(bytes = baton__plan_alloc(L->plan, len / 2)))
        return load_fail(L, BATON_ENOMEM, p, "out of memory");
    for (size_t i = 0; i < len; i += 2) {
        int hi = hexval(h[i]), lo = hexval(h[i + 1]);
        if (hi < 0 || lo < 0)
            return load_fail(L, BATON_EPLAN, p,
                             "%s: \"opaque\" has a non-hex character at offset %zu; use only "
                             "0-9 a-f A-F",
                             subj, hi < 0 ? i : i + 1);
        bytes[i / 2] = (char)(hi << 4 | lo);
    }
    s->opaque = bytes ? bytes : baton__plan_no_descriptor;
    s->opaque_len = len / 2;
    s->opaque_verbatim = 1;
    return 0;
}

enum {
    S_NAME,
    S_KERNEL,
    S_DELEGATE,
    S_DEVICE,
    S_INPUTS,
    S_OUTPUTS,
    S_ATTRS,
    S_OPAQUE,
    S_COLLECTIVE,
    S_DEVICES,
    S_N
};

/* A collective step: "collective": "all_reduce" | "all_gather" and "devices": [...], two or more
 * distinct GPUs; no "device", no "opaque". The validator checks its tensors. */
static int load_collective(loader *L, plan_step *s, const int *f, const char *subj)
{
    int jc = f[S_COLLECTIVE], jg = f[S_DEVICES];
    s->kind = BATON_TARGET_COLLECTIVE;
    s->target_pos = node_pos(L, jc);
    const char *op = is_type(L, jc, J_STRING) ? J(L, jc)->s : NULL;
    if (op && strcmp(op, "all_reduce") == 0)
        s->coll = PLAN_COLL_ALL_REDUCE;
    else if (op && strcmp(op, "all_gather") == 0)
        s->coll = PLAN_COLL_ALL_GATHER;
    else
        return load_fail(L, BATON_EPLAN, s->target_pos,
                         "%s: unknown collective %s%.32s%s; use \"all_reduce\" or \"all_gather\"",
                         subj, op ? "'" : "", op ? op : json_kind(L, jc), op ? "'" : "");
    if (!(s->target_name = baton__plan_strdup(L->plan, op, strlen(op))))
        return load_fail(L, BATON_ENOMEM, s->pos, "out of memory");
    if (f[S_KERNEL] >= 0 || f[S_DELEGATE] >= 0 || f[S_DEVICE] >= 0 || f[S_OPAQUE] >= 0) {
        int j = f[S_KERNEL] >= 0     ? f[S_KERNEL]
                : f[S_DELEGATE] >= 0 ? f[S_DELEGATE]
                : f[S_DEVICE] >= 0   ? f[S_DEVICE]
                                     : f[S_OPAQUE];
        return load_fail(L, BATON_EPLAN, key_pos(L, j),
                         "%s is a collective: it takes \"devices\" (the group) and no \"kernel\", "
                         "\"delegate\", \"device\" or \"opaque\"; remove that key",
                         subj);
    }
    s->device_pos = jg >= 0 ? node_pos(L, jg) : s->pos;
    if (jg < 0 || !is_type(L, jg, J_ARRAY) || J(L, jg)->n < 2)
        return load_fail(L, BATON_EPLAN, s->device_pos,
                         "%s: a collective needs \"devices\": a list of two or more GPUs, e.g. "
                         "[\"cuda:0\", \"cuda:1\"]",
                         subj);
    int n = J(L, jg)->n;
    if (n > PLAN_MAX_DEVICES - 1)
        return load_fail(L, BATON_EPLAN, s->device_pos,
                         "%s lists %d devices; a plan has at most %d GPUs", subj, n,
                         PLAN_MAX_DEVICES - 1);
    if (!(s->group = baton__plan_alloc(L->plan, (size_t)n * sizeof *s->group)))
        return load_fail(L, BATON_ENOMEM, s->pos, "out of memory");
    int k = 0;
    for (int c = J(L, jg)->first; c >= 0; c = J(L, c)->next, k++) {
        plan_pos p = node_pos(L, c);
        int is_str = is_type(L, c, J_STRING);
        if (!is_str || baton_device_parse(J(L, c)->s, &s->group[k]) != 0 ||
            s->group[k].kind != BATON_DEVICE_CUDA)
            return load_fail(L, BATON_EPLAN, p,
                             "%s: devices[%d] is %s%.32s%s; a collective's devices are GPUs, "
                             "\"cuda:N\" with N from 0 to %d",
                             subj, k, is_str ? "'" : "", is_str ? J(L, c)->s : json_kind(L, c),
                             is_str ? "'" : "", PLAN_MAX_DEVICES - 2);
        for (int e = 0; e < k; e++)
            if (device_eq(s->group[e], s->group[k]))
                return load_fail(L, BATON_EPLAN, p,
                                 "%s: devices[%d] repeats '%s'; each device of the group appears "
                                 "once",
                                 subj, k, J(L, c)->s);
    }
    s->n_group = n;
    s->device = s->group[0];
    return 0;
}

static int load_step(loader *L, int i, int js)
{
    static const char *const keys[S_N] = {"name",    "kernel", "delegate", "device",     "inputs",
                                          "outputs", "attrs",  "opaque",   "collective", "devices"};
    baton_plan *plan = L->plan;
    plan_step *s = &plan->steps[i];
    char subj[PLAN_MAX_NAME + 32];
    int f[S_N];
    s->pos = node_pos(L, js);
    s->segment = -1;
    int rc = load_item_head(L, ITEM_STEP, i, js, keys, S_N, f, subj, sizeof subj, &s->name);
    if (rc)
        return rc;

    int jk = f[S_KERNEL], jd = f[S_DELEGATE];
    if (f[S_COLLECTIVE] >= 0) {
        if ((rc = load_collective(L, s, f, subj)) ||
            (rc = load_tensor_list(L, s, f[S_INPUTS], "inputs", subj, &s->inputs, &s->input_pos,
                                   &s->n_inputs)) ||
            (rc = load_tensor_list(L, s, f[S_OUTPUTS], "outputs", subj, &s->outputs, &s->output_pos,
                                   &s->n_outputs)) ||
            (rc = load_attrs(L, s, f[S_ATTRS], subj)))
            return rc;
        s->opaque = baton__plan_no_descriptor;
        return 0;
    }
    if (f[S_DEVICES] >= 0)
        return load_fail(L, BATON_EPLAN, key_pos(L, f[S_DEVICES]),
                         "%s: \"devices\" is for collective steps; a kernel or delegate runs on "
                         "one \"device\"",
                         subj);
    if (jk >= 0 && jd >= 0)
        return load_fail(L, BATON_EPLAN, key_pos(L, jd),
                         "%s names both a kernel and a delegate; a step runs exactly one target: "
                         "keep one",
                         subj);
    if (jk < 0 && jd < 0)
        return load_fail(
            L, BATON_EPLAN, s->pos,
            "%s names no target; add \"kernel\": \"<name>\", \"delegate\": \"<name>\" or "
            "\"collective\": \"all_reduce\"",
            subj);
    const char *tkey = jk >= 0 ? "kernel" : "delegate";
    int jt = jk >= 0 ? jk : jd;
    s->kind = jk >= 0 ? BATON_TARGET_KERNEL : BATON_TARGET_DELEGATE;
    s->target_pos = node_pos(L, jt);
    if (!is_type(L, jt, J_STRING) || J(L, jt)->len == 0)
        return load_fail(L, BATON_EPLAN, s->target_pos,
                         "%s: \"%s\" must be the name of a %s, not %s", subj, tkey, tkey,
                         is_type(L, jt, J_STRING) ? "an empty string" : json_kind(L, jt));
    if (!(s->target_name = baton__plan_strdup(L->plan, J(L, jt)->s, J(L, jt)->len)))
        return load_fail(L, BATON_ENOMEM, s->pos, "out of memory");

    int jdev = f[S_DEVICE];
    s->device_pos = jdev >= 0 ? node_pos(L, jdev) : s->pos;
    if (jdev < 0)
        return load_fail(L, BATON_EPLAN, s->pos,
                         "%s has no \"device\"; add \"device\": \"cpu\" or \"device\": \"cuda:0\"",
                         subj);
    int is_str = is_type(L, jdev, J_STRING);
    if (!is_str || baton_device_parse(J(L, jdev)->s, &s->device) != 0)
        return load_fail(
            L, BATON_EPLAN, s->device_pos,
            "%s: unknown device %s%.32s%s; use \"cpu\" or \"cuda:N\" with N from 0 to %d", subj,
            is_str ? "'" : "", is_str ? J(L, jdev)->s : json_kind(L, jdev), is_str ? "'" : "",
            PLAN_MAX_DEVICES - 2);

    if ((rc = load_tensor_list(L, s, f[S_INPUTS], "inputs", subj, &s->inputs, &s->input_pos,
                               &s->n_inputs)) ||
        (rc = load_tensor_list(L, s, f[S_OUTPUTS], "outputs", subj, &s->outputs, &s->output_pos,
                               &s->n_outputs)) ||
        (rc = load_attrs(L, s, f[S_ATTRS], subj)) || (rc = load_opaque(L, s, f[S_OPAQUE], subj)))
        return rc;
    return 0;
}

/* ---- the top level --------------------------------------------------------------------------- */

enum { P_FORMAT, P_VERSION, P_NAME, P_TENSORS, P_STEPS, P_DIMS, P_N };

static int build(loader *L)
{
    static const char *const keys[P_N] = {"format", "version", "name", "tensors", "steps", "dims"};
    baton_plan *plan = L->plan;
    const int root = 0;
    plan_pos rpos = node_pos(L, root);
    int f[P_N], rc;
    if (!is_type(L, root, J_OBJECT))
        return load_fail(L, BATON_EPLAN, rpos,
                         "a plan is a JSON object with \"format\": \"baton.plan\", \"version\": 1, "
                         "\"name\", \"tensors\" and \"steps\"; this file holds %s",
                         json_kind(L, root));
    if ((rc = collect(L, root, "plan", keys, P_N, f)))
        return rc;

    int jf = f[P_FORMAT];
    if (jf < 0)
        return load_fail(
            L, BATON_EPLAN, rpos,
            "plan has no \"format\"; a baton plan starts with \"format\": \"baton.plan\", "
            "\"version\": 1");
    if (!is_type(L, jf, J_STRING) || strcmp(J(L, jf)->s, "baton.plan") != 0)
        return load_fail(L, BATON_EPLAN, node_pos(L, jf),
                         "\"format\" must be \"baton.plan\"; this is not a baton plan file");
    int jv = f[P_VERSION];
    if (jv < 0)
        return load_fail(L, BATON_EPLAN, rpos, "plan has no \"version\"; add \"version\": %d",
                         BATON_PLAN_FORMAT_VERSION);
    if (!is_type(L, jv, J_INT))
        return load_fail(L, BATON_EPLAN, node_pos(L, jv),
                         "\"version\" must be the integer %d, not %s", BATON_PLAN_FORMAT_VERSION,
                         json_kind(L, jv));
    if (J(L, jv)->i != BATON_PLAN_FORMAT_VERSION)
        return load_fail(L, BATON_EPLAN, node_pos(L, jv),
                         "plan format version %lld is not supported; this baton reads version %d",
                         J(L, jv)->i, BATON_PLAN_FORMAT_VERSION);
    int jn = f[P_NAME];
    if (jn < 0)
        return load_fail(L, BATON_EPLAN, rpos,
                         "plan has no \"name\"; add one, e.g. \"name\": \"demo\"");
    if (!is_type(L, jn, J_STRING) || J(L, jn)->len == 0 || J(L, jn)->len > PLAN_MAX_NAME)
        return load_fail(L, BATON_EPLAN, node_pos(L, jn),
                         "the plan's \"name\" must be a string of 1 to %d characters",
                         PLAN_MAX_NAME);
    if (!(plan->name = strdup(J(L, jn)->s)))
        return load_fail(L, BATON_ENOMEM, rpos, "out of memory");

    int jt = f[P_TENSORS], js = f[P_STEPS];
    if (jt < 0)
        return load_fail(L, BATON_EPLAN, rpos,
                         "plan has no \"tensors\"; add the array of tensors the steps use");
    if (!is_type(L, jt, J_ARRAY))
        return load_fail(L, BATON_EPLAN, node_pos(L, jt), "\"tensors\" must be an array, not %s",
                         json_kind(L, jt));
    if (js < 0)
        return load_fail(L, BATON_EPLAN, rpos,
                         "plan has no \"steps\"; add the array of steps to run");
    if (!is_type(L, js, J_ARRAY))
        return load_fail(L, BATON_EPLAN, node_pos(L, js), "\"steps\" must be an array, not %s",
                         json_kind(L, js));
    if (J(L, js)->n == 0)
        return load_fail(L, BATON_EPLAN, node_pos(L, js),
                         "\"steps\" is empty; a plan runs at least one step");
    if (J(L, jt)->n > PLAN_MAX_ITEMS || J(L, js)->n > PLAN_MAX_ITEMS)
        return load_fail(L, BATON_EPLAN, rpos, "a plan holds at most %d tensors and %d steps",
                         PLAN_MAX_ITEMS, PLAN_MAX_ITEMS);

    int nt = J(L, jt)->n, ns = J(L, js)->n;
    plan->tensors = calloc(nt ? (size_t)nt : 1, sizeof *plan->tensors);
    plan->steps = calloc((size_t)ns, sizeof *plan->steps);
    if (!plan->tensors || !plan->steps)
        return load_fail(L, BATON_ENOMEM, rpos, "out of memory");
    plan->n_tensors = nt;
    plan->n_steps = ns;
    if (baton__plan_index_create(plan))
        return load_fail(L, BATON_ENOMEM, rpos, "out of memory");
    if ((rc = load_dims(L, f[P_DIMS])))
        return rc;

    int i = 0;
    for (int c = J(L, jt)->first; c >= 0; c = J(L, c)->next, i++)
        if ((rc = load_tensor(L, i, c)))
            return rc;
    if ((rc = resolve_views(L)))
        return rc;
    i = 0;
    for (int c = J(L, js)->first; c >= 0; c = J(L, c)->next, i++)
        if ((rc = load_step(L, i, c)))
            return rc;
    return 0;
}

int baton_plan_load_string(const baton_registry *reg, const char *json, size_t len,
                           const char *source, const char *base_dir, baton_plan **out,
                           baton_error *err)
{
    err_clear(err);
    baton_error local;
    if (!err)
        err = &local;
    if (out)
        *out = NULL;
    if (!reg || !json || !out)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_plan_load_string: registry, text and out must not be NULL");
    loader L = {.err = err, .recent = {-1, -1, -1, -1}};
    L.plan = calloc(1, sizeof *L.plan);
    if (!L.plan)
        return baton__err_set(err, BATON_ENOMEM, "out of memory loading a plan");
    baton_plan *plan = L.plan;
    atomic_init(&plan->refs, 1);
    plan->registry = baton__registry_retain(reg); /* baton_plan_free releases it */
    plan->log = baton__registry_log(reg);
    plan->source = strdup(source ? source : "<string>");
    plan->base_dir = base_dir ? strdup(base_dir) : NULL;
    int rc = 0;
    if (!plan->source || (base_dir && !plan->base_dir)) {
        rc = baton__err_set(err, BATON_ENOMEM, "out of memory loading a plan");
        goto done;
    }

    jerror jerr;
    rc = baton__plan_json_parse(&L.t, json, len, &jerr);
    if (rc == BATON_ENOMEM) {
        rc = baton__plan_error(err, BATON_ENOMEM, plan, (plan_pos){0, 0},
                               "out of memory parsing the plan's %zu bytes", len);
        goto done;
    }
    if (rc == BATON_EPLAN) {
        rc = baton__plan_error(err, BATON_EPLAN, plan, (plan_pos){jerr.line, jerr.col},
                               "%s; move large inline data to an npy or safetensors init",
                               jerr.text);
        goto done;
    }
    if (rc) {
        rc = baton__plan_error(err, BATON_EPARSE, plan, (plan_pos){jerr.line, jerr.col},
                               "JSON syntax error: %s", jerr.text);
        goto done;
    }
    if ((rc = build(&L)) || (rc = baton__plan_validate(plan, err)) ||
        (rc = baton__plan_analyse(plan, err)))
        goto done;

done:
    baton__plan_json_free(&L.t);
    if (rc) {
        baton_plan_free(plan);
        return rc;
    }
    err->code = 0;
    err->message[0] = 0;
    *out = plan;
    return 0;
}

int baton_plan_load(const baton_registry *reg, const char *path, baton_plan **out, baton_error *err)
{
    err_clear(err);
    if (out)
        *out = NULL;
    if (!reg || !path || !out)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_plan_load: registry, path and out must not be NULL");
    char *buf;
    size_t len;
    int rc = baton__plan_read_regular(path, "plan file", &buf, &len, err);
    if (rc)
        return rc;
    /* npy paths are relative to the plan file's directory. */
    char *dir = strdup(path);
    if (!dir) {
        free(buf);
        return baton__err_set(err, BATON_ENOMEM, "%s: out of memory", path);
    }
    char *slash = strrchr(dir, '/');
    if (slash)
        slash == dir ? (void)(slash[1] = 0) : (void)(*slash = 0);
    else
        dir[0] = 0;
    rc = baton_plan_load_string(reg, buf, len, path, dir, out, err);
    free(buf);
    free(dir);
    return rc;
}
