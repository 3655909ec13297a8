/* load.c: turns the text of a plan file (format version 1) into a baton_plan: Jansson parses the
 * JSON, a small scanner of the raw text finds where every value was written (Jansson does not say),
 * and the builder checks the schema, naming file:line:column and the fix for every mistake. The
 * validator (validate.c) and the analysis (analyse.c) then run on the built plan. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dtype.h"
#include "plan/plan_internal.h"

#define PLAN_MAX_ITEMS        1000000            /* tensors or steps in one plan */
#define PLAN_MAX_TENSOR_BYTES ((int64_t)1 << 40) /* 1 TiB: no device holds more */
#define PLAN_MAX_VALUES       4096               /* elements of an inline "values" init */

/* ---- where values were written ---------------------------------------------------------------
 * One node per JSON value, in document order, with the position of its first character and of its
 * key when it sits in an object. Children keep document order, which is also Jansson's iteration
 * order for objects (insertion order; duplicate keys are rejected), so the k-th key Jansson yields
 * is the k-th child here. Columns count UTF-8 characters from 1, as Jansson's do. */

typedef struct pnode {
    int line, col;         /* the value */
    int key_line, key_col; /* its key in the enclosing object; 0 otherwise */
    int first, last, next; /* children and next sibling, -1 for none */
} pnode;

typedef struct ptree {
    pnode *v;
    int n, cap;
} ptree;

static int ptree_add(ptree *t, int parent, int line, int col, int key_line, int key_col)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 256;
        pnode *v = realloc(t->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        t->v = v;
        t->cap = cap;
    }
    int i = t->n++;
    t->v[i] = (pnode){line, col, key_line, key_col, -1, -1, -1};
    if (parent >= 0) {
        if (t->v[parent].last >= 0)
            t->v[t->v[parent].last].next = i;
        else
            t->v[parent].first = i;
        t->v[parent].last = i;
    }
    return i;
}

/* Scans text that Jansson has accepted; still bounds-checked so that it cannot read past len. */
static int ptree_scan(ptree *t, const char *s, size_t len)
{
    int cap = 64, depth = 0;
    int *stack = malloc((size_t)cap * sizeof *stack);
    unsigned char *obj = malloc((size_t)cap);
    unsigned char *expect_key = malloc((size_t)cap);
    int line = 1, col = 1, key_line = 0, key_col = 0, rc = 0;
    size_t i = 0;
    if (!stack || !obj || !expect_key) {
        rc = BATON_ENOMEM;
        goto out;
    }
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        int top = depth > 0 ? stack[depth - 1] : -1;
        int in_obj = depth > 0 && obj[depth - 1];
        if (c == '\n') {
            line++;
            col = 1;
            i++;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            col++;
            i++;
            continue;
        }
        if (c == '}' || c == ']') {
            if (depth > 0)
                depth--;
            col++;
            i++;
            continue;
        }
        if (c == ',' || c == ':') {
            if (in_obj)
                expect_key[depth - 1] = c == ',';
            col++;
            i++;
            continue;
        }
        if (c == '"' && in_obj && expect_key[depth - 1]) {
            key_line = line;
            key_col = col;
        } else {
            int n = ptree_add(t, top, line, col, in_obj ? key_line : 0, in_obj ? key_col : 0);
            if (n < 0) {
                rc = BATON_ENOMEM;
                goto out;
            }
            if (c == '{' || c == '[') {
                if (depth == cap) {
                    cap *= 2;
                    int *ns = realloc(stack, (size_t)cap * sizeof *ns);
                    if (ns)
                        stack = ns;
                    unsigned char *no = realloc(obj, (size_t)cap);
                    if (no)
                        obj = no;
                    unsigned char *ne = realloc(expect_key, (size_t)cap);
                    if (ne)
                        expect_key = ne;
                    if (!ns || !no || !ne) {
                        rc = BATON_ENOMEM;
                        goto out;
                    }
                }
                stack[depth] = n;
                obj[depth] = c == '{';
                expect_key[depth] = c == '{';
                depth++;
                col++;
                i++;
                continue;
            }
        }
        if (c == '"') {
            i++;
            col++;
            while (i < len && s[i] != '"') {
                if (s[i] == '\\' && i + 1 < len) { /* the escaped character is ASCII */
                    i += 2;
                    col += 2;
                    continue;
                }
                if (((unsigned char)s[i] & 0xC0) != 0x80)
                    col++;
                i++;
            }
            i++;
            col++;
            continue;
        }
        /* a number or a literal */
        while (i < len && !strchr(" \t\r\n,:]}", s[i]) && s[i] != '\0') {
            if (((unsigned char)s[i] & 0xC0) != 0x80)
                col++;
            i++;
        }
        if (i < len && s[i] == '\0')
            break;
    }
out:
    free(stack);
    free(obj);
    free(expect_key);
    return rc;
}

/* ---- the builder's context and messages -------------------------------------------------- */

typedef struct loader {
    baton_plan *plan;
    baton_error *err;
    ptree t;
} loader;

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

static int first_child(const loader *L, int node)
{
    return node >= 0 && node < L->t.n ? L->t.v[node].first : -1;
}

static int next_sibling(const loader *L, int node)
{
    return node >= 0 && node < L->t.n ? L->t.v[node].next : -1;
}

/* The node of obj[key], or -1 when absent. */
static int field_node(const loader *L, int node, json_t *obj, const char *key)
{
    const char *k;
    json_t *v;
    int child = first_child(L, node);
    json_object_foreach(obj, k, v)
    {
        if (strcmp(k, key) == 0)
            return child;
        child = next_sibling(L, child);
    }
    return -1;
}

/* The position of obj[key]'s value, or of obj itself when the key is absent. */
static plan_pos field_pos(const loader *L, int node, json_t *obj, const char *key)
{
    int n = field_node(L, node, obj, key);
    return n >= 0 ? node_pos(L, n) : node_pos(L, node);
}

static int fail(loader *L, int code, plan_pos pos, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static int fail(loader *L, int code, plan_pos pos, const char *fmt, ...)
{
    char msg[BATON_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return plan_error(L->err, code, L->plan, pos, "%s", msg);
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a bool";
    default: return "null";
    }
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
    plan_suggest_init(&s, word);
    for (int i = 0; i < n; i++)
        plan_suggest_try(&s, cands[i]);
    buf[0] = 0;
    if (plan_suggest_best(&s))
        snprintf(buf, cap, " (did you mean '%s'?)", plan_suggest_best(&s));
    return buf;
}

/* How messages name an item before its name is known: "tensor 'x'" or "tensors[3]". */
static void subject(char *buf, size_t cap, const char *noun, const char *array, int i, json_t *obj)
{
    json_t *name = json_is_object(obj) ? json_object_get(obj, "name") : NULL;
    size_t nlen = json_is_string(name) ? json_string_length(name) : 0;
    size_t noun_len = strlen(noun);
    if (nlen > 0 && nlen <= PLAN_MAX_NAME && noun_len + nlen + 4 <= cap) {
        /* the common case, once per tensor and step: no printf */
        memcpy(buf, noun, noun_len);
        buf[noun_len] = ' ';
        buf[noun_len + 1] = '\'';
        memcpy(buf + noun_len + 2, json_string_value(name), nlen);
        buf[noun_len + 2 + nlen] = '\'';
        buf[noun_len + 3 + nlen] = 0;
    } else {
        snprintf(buf, cap, "%s[%d]", array, i);
    }
}

static int check_keys(loader *L, json_t *obj, int node, const char *subj,
                      const char *const *allowed, int n_allowed)
{
    const char *k;
    json_t *v;
    int child = first_child(L, node);
    json_object_foreach(obj, k, v)
    {
        int ok = 0;
        for (int i = 0; i < n_allowed && !ok; i++)
            ok = strcmp(k, allowed[i]) == 0;
        if (!ok) {
            char list[256], hint[96];
            join(list, sizeof list, allowed, n_allowed);
            return fail(L, BATON_EPLAN, key_pos(L, child),
                        "%s: unknown key '%s'%s; allowed keys: %s", subj, k,
                        did_you_mean(hint, sizeof hint, k, allowed, n_allowed), list);
        }
        child = next_sibling(L, child);
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

/* Reads obj["name"] as a tensor or step name into *out (strdup'd). */
static int get_name(loader *L, json_t *obj, int node, const char *subj, char **out)
{
    json_t *v = json_object_get(obj, "name");
    plan_pos pos = field_pos(L, node, obj, "name");
    if (!v)
        return fail(L, BATON_EPLAN, pos, "%s has no \"name\"; add one, e.g. \"name\": \"h0\"",
                    subj);
    if (!json_is_string(v))
        return fail(L, BATON_EPLAN, pos, "%s: \"name\" must be a string, not %s", subj,
                    json_kind(v));
    const char *s = json_string_value(v);
    if (json_string_length(v) > PLAN_MAX_NAME || strlen(s) != json_string_length(v) ||
        !valid_name(s))
        return fail(
            L, BATON_EPLAN, pos,
            "%s: invalid name \"%.64s\"; a name is 1 to %d characters from A-Z a-z 0-9 _ . : -",
            subj, s, PLAN_MAX_NAME);
    *out = strdup(s);
    return *out ? 0 : fail(L, BATON_ENOMEM, pos, "out of memory");
}

/* ---- tensors --------------------------------------------------------------------------------- */

static const char *const dtype_words[] = {"bf16", "f16", "f32", "f64", "i32", "i64"};
static const char *const role_words[] = {"input", "output", "constant", "intermediate"};
static const baton_role role_values[] = {BATON_ROLE_INPUT, BATON_ROLE_OUTPUT, BATON_ROLE_CONSTANT,
                                         BATON_ROLE_INTERMEDIATE};
static const char *const init_words[] = {"fill", "normal", "uniform", "npy", "values"};
/* The same lists for messages, spelled out so that the hot path formats nothing. */
#define DTYPE_LIST "bf16, f16, f32, f64, i32, i64"
#define ROLE_LIST  "input, output, constant, intermediate"
#define INIT_LIST  "fill, normal, uniform, npy, values"

static void format_desc(char *buf, size_t cap, const baton_tensor_desc *d)
{
    size_t used = (size_t)snprintf(buf, cap, "%s[", baton_dtype_name(d->dtype));
    for (int i = 0; i < d->rank && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? "," : "",
                                 (long long)d->shape[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
}

static int get_number(loader *L, json_t *obj, int node, const char *key, const char *subj,
                      int required, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required)
            return fail(L, BATON_EPLAN, node_pos(L, node), "%s: init is missing \"%s\" (a number)",
                        subj, key);
        return 0;
    }
    if (!json_is_number(v))
        return fail(L, BATON_EPLAN, field_pos(L, node, obj, key),
                    "%s: init \"%s\" must be a number, not %s", subj, key, json_kind(v));
    *out = json_number_value(v);
    return 0;
}

/* Checks that v is stored exactly enough in dt: integers for integer dtypes, in range; finite
 * after rounding for float dtypes. */
static int check_value(loader *L, plan_pos pos, const char *subj, baton_dtype dt, json_t *jv,
                       double v)
{
    if (dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64) {
        double lo = dt == BATON_DTYPE_I32 ? -2147483648.0 : -9223372036854775808.0;
        if (v != floor(v))
            return fail(L, BATON_EPLAN, pos, "%s: value %g is not an integer but the tensor is %s",
                        subj, v, baton_dtype_name(dt));
        if (v < lo || v >= -lo) /* -lo is 2^31 or 2^63, one past the largest value */
            return fail(L, BATON_EPLAN, pos, "%s: value %g is out of the range of %s", subj, v,
                        baton_dtype_name(dt));
        if (json_is_integer(jv) && (json_integer_value(jv) > 9007199254740992LL ||
                                    json_integer_value(jv) < -9007199254740992LL))
            return fail(L, BATON_EPLAN, pos,
                        "%s: value %lld is beyond 2^53 and cannot be written inline exactly; use "
                        "an npy init",
                        subj, (long long)json_integer_value(jv));
        return 0;
    }
    unsigned char tmp[8];
    store_f64(dt, tmp, 0, v);
    if (isinf(load_f64(dt, tmp, 0)))
        return fail(L, BATON_EPLAN, pos, "%s: value %g overflows %s", subj, v,
                    baton_dtype_name(dt));
    return 0;
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

static int load_init(loader *L, plan_tensor *t, json_t *ji, int node, const char *subj)
{
    tensor_init *in = &t->init;
    plan_pos pos = node_pos(L, node);
    if (!json_is_object(ji))
        return fail(L, BATON_EPLAN, pos,
                    "%s: \"init\" must be an object such as {\"kind\": \"fill\", \"value\": 0}, "
                    "not %s",
                    subj, json_kind(ji));
    json_t *jk = json_object_get(ji, "kind");
    const char *list = INIT_LIST;
    char hint[96];
    if (!jk)
        return fail(L, BATON_EPLAN, pos, "%s: init has no \"kind\"; use one of %s", subj, list);
    if (!json_is_string(jk))
        return fail(L, BATON_EPLAN, field_pos(L, node, ji, "kind"),
                    "%s: init \"kind\" must be a string (one of %s), not %s", subj, list,
                    json_kind(jk));
    const char *kind = json_string_value(jk);
    static const char *const fill_keys[] = {"kind", "value"};
    static const char *const normal_keys[] = {"kind", "seed", "std", "mean"};
    static const char *const uniform_keys[] = {"kind", "seed", "low", "high"};
    static const char *const npy_keys[] = {"kind", "path"};
    static const char *const values_keys[] = {"kind", "values"};
    int rc;
    if (strcmp(kind, "fill") == 0) {
        in->kind = INIT_FILL;
        if ((rc = check_keys(L, ji, node, subj, fill_keys, 2)) ||
            (rc = get_number(L, ji, node, "value", subj, 1, &in->value)))
            return rc;
        return check_value(L, field_pos(L, node, ji, "value"), subj, t->desc.dtype,
                           json_object_get(ji, "value"), in->value);
    }
    if (strcmp(kind, "normal") == 0 || strcmp(kind, "uniform") == 0) {
        int normal = kind[0] == 'n';
        in->kind = normal ? INIT_NORMAL : INIT_UNIFORM;
        if ((rc = check_keys(L, ji, node, subj, normal ? normal_keys : uniform_keys, 4)))
            return rc;
        json_t *js = json_object_get(ji, "seed");
        if (!js || !json_is_integer(js) || json_integer_value(js) < 0)
            return fail(L, BATON_EPLAN, field_pos(L, node, ji, "seed"),
                        "%s: a %s init needs \"seed\", an integer from 0 to 2^63-1, e.g. "
                        "\"seed\": 7",
                        subj, kind);
        in->seed = (uint64_t)json_integer_value(js);
        if (normal) {
            in->mean = 0;
            if ((rc = get_number(L, ji, node, "std", subj, 1, &in->std)) ||
                (rc = get_number(L, ji, node, "mean", subj, 0, &in->mean)))
                return rc;
            if (in->std < 0)
                return fail(L, BATON_EPLAN, field_pos(L, node, ji, "std"),
                            "%s: \"std\" is %g; a standard deviation must be >= 0", subj, in->std);
            return 0;
        }
        if ((rc = get_number(L, ji, node, "low", subj, 1, &in->low)) ||
            (rc = get_number(L, ji, node, "high", subj, 1, &in->high)))
            return rc;
        if (!(in->low < in->high))
            return fail(L, BATON_EPLAN, field_pos(L, node, ji, "high"),
                        "%s: uniform init needs low < high, got low %g and high %g", subj, in->low,
                        in->high);
        if (!isfinite(in->high - in->low))
            return fail(L, BATON_EPLAN, field_pos(L, node, ji, "high"),
                        "%s: uniform init range [%g, %g) is wider than a double can hold", subj,
                        in->low, in->high);
        return 0;
    }
    if (strcmp(kind, "npy") == 0) {
        in->kind = INIT_NPY;
        if ((rc = check_keys(L, ji, node, subj, npy_keys, 2)))
            return rc;
        json_t *jp = json_object_get(ji, "path");
        plan_pos ppos = field_pos(L, node, ji, "path");
        if (!json_is_string(jp) || json_string_length(jp) == 0 ||
            strlen(json_string_value(jp)) != json_string_length(jp))
            return fail(L, BATON_EPLAN, ppos,
                        "%s: an npy init needs \"path\", the .npy file relative to the plan file",
                        subj);
        in->path = resolve_path(L->plan->base_dir, json_string_value(jp));
        if (!in->path)
            return fail(L, BATON_ENOMEM, ppos, "out of memory");
        /* The whole file is read once here so that a wrong dtype or shape fails at load, not at
         * prepare time; the data is read again when the runtime materialises the constant. */
        baton_tensor_desc d;
        void *data = NULL;
        baton_error nerr = {0};
        rc = baton_npy_read(in->path, &d, &data, &nerr);
        free(data);
        if (rc)
            return fail(L, rc == BATON_ENOMEM ? BATON_ENOMEM : BATON_EIO, ppos,
                        "%s: cannot use npy init: %s", subj, nerr.message);
        int same = d.dtype == t->desc.dtype && d.rank == t->desc.rank;
        for (int i = 0; same && i < d.rank; i++)
            same = d.shape[i] == t->desc.shape[i];
        if (!same) {
            char have[160], want[160];
            format_desc(have, sizeof have, &d);
            format_desc(want, sizeof want, &t->desc);
            return fail(L, BATON_EPLAN, ppos,
                        "%s: %s holds %s but the tensor is declared %s; convert the file or "
                        "change the declaration",
                        subj, json_string_value(jp), have, want);
        }
        return 0;
    }
    if (strcmp(kind, "values") == 0) {
        in->kind = INIT_VALUES;
        if ((rc = check_keys(L, ji, node, subj, values_keys, 2)))
            return rc;
        json_t *ja = json_object_get(ji, "values");
        int vnode = field_node(L, node, ji, "values");
        int64_t numel = baton_tensor_desc_numel(&t->desc);
        if (!json_is_array(ja))
            return fail(L, BATON_EPLAN, field_pos(L, node, ji, "values"),
                        "%s: a values init needs \"values\", an array of %lld numbers", subj,
                        (long long)numel);
        if (numel > PLAN_MAX_VALUES)
            return fail(L, BATON_EPLAN, pos,
                        "%s: inline values are for tensors of at most %d elements and this one "
                        "has %lld; use an npy init",
                        subj, PLAN_MAX_VALUES, (long long)numel);
        if ((int64_t)json_array_size(ja) != numel)
            return fail(L, BATON_EPLAN, node_pos(L, vnode),
                        "%s: \"values\" has %zu numbers but the tensor has %lld elements", subj,
                        json_array_size(ja), (long long)numel);
        in->values = malloc((size_t)numel * sizeof(double));
        if (!in->values)
            return fail(L, BATON_ENOMEM, pos, "out of memory");
        in->n_values = numel;
        int child = first_child(L, vnode);
        for (size_t i = 0; i < json_array_size(ja); i++, child = next_sibling(L, child)) {
            json_t *e = json_array_get(ja, i);
            if (!json_is_number(e))
                return fail(L, BATON_EPLAN, node_pos(L, child),
                            "%s: values[%zu] must be a number, not %s", subj, i, json_kind(e));
            in->values[i] = json_number_value(e);
            if ((rc = check_value(L, node_pos(L, child), subj, t->desc.dtype, e, in->values[i])))
                return rc;
        }
        return 0;
    }
    return fail(L, BATON_EPLAN, field_pos(L, node, ji, "kind"),
                "%s: unknown init kind '%s'%s; use one of %s", subj, kind,
                did_you_mean(hint, sizeof hint, kind, init_words, 5), list);
}

static int load_tensor(loader *L, int i, json_t *jt, int node)
{
    static const char *const keys[] = {"name", "dtype", "shape", "role", "init"};
    baton_plan *plan = L->plan;
    plan_tensor *t = &plan->tensors[i];
    char subj[PLAN_MAX_NAME + 32], hint[96];
    const char *list = DTYPE_LIST;
    int rc;
    t->pos = node_pos(L, node);
    t->producer = t->first_read = t->last_read = -1;
    subject(subj, sizeof subj, "tensor", "tensors", i, jt);
    if (!json_is_object(jt))
        return fail(L, BATON_EPLAN, t->pos,
                    "%s: a tensor is an object such as {\"name\": \"x\", \"dtype\": \"f32\", "
                    "\"shape\": [4]}, not %s",
                    subj, json_kind(jt));
    if ((rc = check_keys(L, jt, node, subj, keys, 5)) ||
        (rc = get_name(L, jt, node, subj, &t->name)))
        return rc;
    int prev = plan_index_add_tensor(plan, i);
    if (prev >= 0)
        return fail(L, BATON_EPLAN, field_pos(L, node, jt, "name"),
                    "%s is declared twice (first at line %d:%d); rename one of them", subj,
                    plan->tensors[prev].pos.line, plan->tensors[prev].pos.column);

    json_t *jd = json_object_get(jt, "dtype");
    if (!jd)
        return fail(L, BATON_EPLAN, t->pos, "%s has no \"dtype\"; add one of %s", subj, list);
    if (!json_is_string(jd))
        return fail(L, BATON_EPLAN, field_pos(L, node, jt, "dtype"),
                    "%s: \"dtype\" must be a string (one of %s), not %s", subj, list,
                    json_kind(jd));
    t->desc.dtype = baton_dtype_from_name(json_string_value(jd));
    if (t->desc.dtype == BATON_DTYPE_INVALID)
        return fail(L, BATON_EPLAN, field_pos(L, node, jt, "dtype"),
                    "%s: unknown dtype '%s'%s; valid dtypes: %s", subj, json_string_value(jd),
                    did_you_mean(hint, sizeof hint, json_string_value(jd), dtype_words, 6), list);

    json_t *js = json_object_get(jt, "shape");
    int snode = field_node(L, node, jt, "shape");
    if (!js)
        return fail(L, BATON_EPLAN, t->pos,
                    "%s has no \"shape\"; add one, e.g. \"shape\": [8, 4096] ([] for a scalar)",
                    subj);
    if (!json_is_array(js))
        return fail(L, BATON_EPLAN, node_pos(L, snode),
                    "%s: \"shape\" must be an array of sizes such as [8, 4096], not %s", subj,
                    json_kind(js));
    if (json_array_size(js) > BATON_MAX_RANK)
        return fail(L, BATON_EPLAN, node_pos(L, snode),
                    "%s: shape has %zu dimensions; at most %d are supported", subj,
                    json_array_size(js), BATON_MAX_RANK);
    t->desc.rank = (int)json_array_size(js);
    int64_t numel = 1;
    int child = first_child(L, snode);
    for (int d = 0; d < t->desc.rank; d++, child = next_sibling(L, child)) {
        json_t *e = json_array_get(js, (size_t)d);
        if (!json_is_integer(e) || json_integer_value(e) < 1)
            return fail(L, BATON_EPLAN, node_pos(L, child),
                        "%s: shape[%d] must be an integer >= 1 (a scalar has shape [])", subj, d);
        int64_t n = (int64_t)json_integer_value(e);
        if (n > PLAN_MAX_TENSOR_BYTES || numel > PLAN_MAX_TENSOR_BYTES / n)
            numel = PLAN_MAX_TENSOR_BYTES + 1;
        else
            numel *= n;
        t->desc.shape[d] = n;
    }
    size_t esize = baton_dtype_size(t->desc.dtype);
    if (numel > PLAN_MAX_TENSOR_BYTES / (int64_t)esize)
        return fail(L, BATON_EPLAN, node_pos(L, snode),
                    "%s is larger than 1 TiB; no device can hold it: check the shape", subj);
    t->nbytes = (size_t)numel * esize;

    t->role = BATON_ROLE_INTERMEDIATE;
    json_t *jr = json_object_get(jt, "role");
    if (jr) {
        list = ROLE_LIST;
        plan_pos rpos = field_pos(L, node, jt, "role");
        if (!json_is_string(jr))
            return fail(L, BATON_EPLAN, rpos, "%s: \"role\" must be a string (one of %s), not %s",
                        subj, list, json_kind(jr));
        int found = -1;
        for (int r = 0; r < 4; r++)
            if (strcmp(json_string_value(jr), role_words[r]) == 0)
                found = r;
        if (found < 0)
            return fail(L, BATON_EPLAN, rpos, "%s: unknown role '%s'%s; valid roles: %s", subj,
                        json_string_value(jr),
                        did_you_mean(hint, sizeof hint, json_string_value(jr), role_words, 4),
                        list);
        t->role = role_values[found];
    }

    json_t *ji = json_object_get(jt, "init");
    if (t->role != BATON_ROLE_CONSTANT) {
        if (ji)
            return fail(L, BATON_EPLAN, key_pos(L, field_node(L, node, jt, "init")),
                        "%s has an init but its role is '%s'; only constants take one: set "
                        "\"role\": \"constant\" or remove \"init\"",
                        subj, baton_role_name(t->role));
        return 0;
    }
    if (!ji)
        return fail(L, BATON_EPLAN, t->pos,
                    "constant %s has no \"init\"; add one, e.g. \"init\": {\"kind\": \"fill\", "
                    "\"value\": 0}",
                    subj);
    return load_init(L, t, ji, field_node(L, node, jt, "init"), subj);
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

static int load_tensor_list(loader *L, plan_step *s, json_t *jstep, int node, const char *key,
                            const char *subj, int **idx, plan_pos **pos, int *count)
{
    json_t *ja = json_object_get(jstep, key);
    int anode = field_node(L, node, jstep, key);
    *count = 0;
    if (!ja)
        return 0;
    if (!json_is_array(ja))
        return fail(L, BATON_EPLAN, node_pos(L, anode),
                    "%s: \"%s\" must be an array of tensor names, not %s", subj, key,
                    json_kind(ja));
    size_t n = json_array_size(ja);
    if (n > PLAN_MAX_STEP_ARGS)
        return fail(L, BATON_EPLAN, node_pos(L, anode), "%s lists %zu %s; a step takes at most %d",
                    subj, n, key, PLAN_MAX_STEP_ARGS);
    if (n == 0)
        return 0;
    *idx = malloc(n * sizeof(int));
    *pos = malloc(n * sizeof(plan_pos));
    if (!*idx || !*pos)
        return fail(L, BATON_ENOMEM, s->pos, "out of memory");
    int child = first_child(L, anode);
    for (size_t i = 0; i < n; i++, child = next_sibling(L, child)) {
        json_t *e = json_array_get(ja, i);
        plan_pos p = node_pos(L, child);
        if (!json_is_string(e))
            return fail(L, BATON_EPLAN, p, "%s: %s[%zu] must be a tensor name (a string), not %s",
                        subj, key, i, json_kind(e));
        const char *name = json_string_value(e);
        int t = plan_find_tensor(L->plan, name);
        if (t < 0) {
            plan_suggest sg;
            char hint[PLAN_MAX_NAME + 32] = "";
            plan_suggest_init(&sg, name);
            for (int k = 0; k < L->plan->n_tensors; k++)
                plan_suggest_try(&sg, L->plan->tensors[k].name);
            if (plan_suggest_best(&sg))
                snprintf(hint, sizeof hint, " (did you mean '%s'?)", plan_suggest_best(&sg));
            return fail(L, BATON_EPLAN, p,
                        "%s: %s '%.64s' is not a declared tensor%s; declare it under \"tensors\"",
                        subj, key[0] == 'i' ? "input" : "output", name, hint);
        }
        (*idx)[i] = t;
        (*pos)[i] = p;
        (*count)++;
    }
    return 0;
}

static int load_attrs(loader *L, plan_step *s, json_t *jstep, int node, const char *subj)
{
    json_t *ja = json_object_get(jstep, "attrs");
    int anode = field_node(L, node, jstep, "attrs");
    if (!ja)
        return 0;
    if (!json_is_object(ja))
        return fail(L, BATON_EPLAN, node_pos(L, anode),
                    "%s: \"attrs\" must be an object such as {\"eps\": 1e-5}, not %s", subj,
                    json_kind(ja));
    size_t n = json_object_size(ja);
    if (n == 0)
        return 0;
    if (n > 64)
        return fail(L, BATON_EPLAN, node_pos(L, anode),
                    "%s has %zu attributes; a step takes at most 64", subj, n);
    s->attrs = calloc(n, sizeof *s->attrs);
    s->attr_pos = calloc(n, sizeof *s->attr_pos);
    if (!s->attrs || !s->attr_pos)
        return fail(L, BATON_ENOMEM, s->pos, "out of memory");
    const char *k;
    json_t *v;
    int child = first_child(L, anode);
    json_object_foreach(ja, k, v)
    {
        baton_attr *a = &s->attrs[s->n_attrs];
        s->attr_pos[s->n_attrs] = key_pos(L, child);
        if (!(a->name = strdup(k)))
            return fail(L, BATON_ENOMEM, s->pos, "out of memory");
        s->n_attrs++;
        switch (json_typeof(v)) {
        case JSON_INTEGER:
            a->type = BATON_ATTR_INT;
            a->i = (int64_t)json_integer_value(v);
            a->f = (double)a->i;
            break;
        case JSON_REAL:
            a->type = BATON_ATTR_FLOAT;
            a->f = json_real_value(v);
            break;
        case JSON_TRUE:
        case JSON_FALSE:
            a->type = BATON_ATTR_BOOL;
            a->i = json_is_true(v);
            break;
        case JSON_STRING:
            a->type = BATON_ATTR_STRING;
            if (strlen(json_string_value(v)) != json_string_length(v))
                return fail(L, BATON_EPLAN, node_pos(L, child),
                            "%s: attribute '%s' holds a NUL character", subj, k);
            if (!(a->s = strdup(json_string_value(v))))
                return fail(L, BATON_ENOMEM, s->pos, "out of memory");
            break;
        default:
            return fail(L, BATON_EPLAN, node_pos(L, child),
                        "%s: attribute '%s' must be an integer, a number, a bool or a string, "
                        "not %s",
                        subj, k, json_kind(v));
        }
        child = next_sibling(L, child);
    }
    return 0;
}

static int load_opaque(loader *L, plan_step *s, json_t *jstep, int node, const char *subj)
{
    json_t *jo = json_object_get(jstep, "opaque");
    if (!jo)
        return 0;
    plan_pos p = field_pos(L, node, jstep, "opaque");
    if (!json_is_string(jo))
        return fail(L, BATON_EPLAN, p,
                    "%s: \"opaque\" must be a hex string such as \"0a1b\", not %s", subj,
                    json_kind(jo));
    const char *h = json_string_value(jo);
    size_t len = json_string_length(jo);
    if (len % 2)
        return fail(L, BATON_EPLAN, p,
                    "%s: \"opaque\" has %zu hex digits; bytes take two each, so the count must "
                    "be even",
                    subj, len);
    if (len / 2 > BATON_OPAQUE_MAX)
        return fail(L, BATON_EPLAN, p,
                    "%s: \"opaque\" holds %zu bytes; a descriptor is at most %d bytes", subj,
                    len / 2, BATON_OPAQUE_MAX);
    for (size_t i = 0; i < len; i += 2) {
        int hi = hexval(h[i]), lo = hexval(h[i + 1]);
        if (hi < 0 || lo < 0) {
            size_t bad = hi < 0 ? i : i + 1;
            return fail(L, BATON_EPLAN, p,
                        "%s: \"opaque\" has a non-hex character at offset %zu; use only "
                        "0-9 a-f A-F",
                        subj, bad);
        }
        s->opaque[i / 2] = (char)(hi << 4 | lo);
    }
    s->opaque_len = len / 2;
    s->opaque_verbatim = 1;
    return 0;
}

static int load_step(loader *L, int i, json_t *js, int node)
{
    static const char *const keys[] = {"name",   "kernel",  "delegate", "device",
                                       "inputs", "outputs", "attrs",    "opaque"};
    baton_plan *plan = L->plan;
    plan_step *s = &plan->steps[i];
    char subj[PLAN_MAX_NAME + 32];
    int rc;
    s->pos = node_pos(L, node);
    s->segment = -1;
    subject(subj, sizeof subj, "step", "steps", i, js);
    if (!json_is_object(js))
        return fail(L, BATON_EPLAN, s->pos,
                    "%s: a step is an object such as {\"name\": \"s0\", \"kernel\": \"copy\", "
                    "\"device\": \"cpu\", \"inputs\": [\"x\"], \"outputs\": [\"y\"]}, not %s",
                    subj, json_kind(js));
    if ((rc = check_keys(L, js, node, subj, keys, 8)) ||
        (rc = get_name(L, js, node, subj, &s->name)))
        return rc;
    int prev = plan_index_add_step(plan, i);
    if (prev >= 0)
        return fail(L, BATON_EPLAN, field_pos(L, node, js, "name"),
                    "%s is declared twice (first at line %d:%d); rename one of them", subj,
                    plan->steps[prev].pos.line, plan->steps[prev].pos.column);

    json_t *jk = json_object_get(js, "kernel"), *jd = json_object_get(js, "delegate");
    if (jk && jd)
        return fail(L, BATON_EPLAN, key_pos(L, field_node(L, node, js, "delegate")),
                    "%s names both a kernel and a delegate; a step runs exactly one target: "
                    "keep one",
                    subj);
    if (!jk && !jd)
        return fail(L, BATON_EPLAN, s->pos,
                    "%s names no target; add \"kernel\": \"<name>\" or \"delegate\": \"<name>\"",
                    subj);
    const char *tkey = jk ? "kernel" : "delegate";
    json_t *jt = jk ? jk : jd;
    s->kind = jk ? BATON_TARGET_KERNEL : BATON_TARGET_DELEGATE;
    s->target_pos = field_pos(L, node, js, tkey);
    if (!json_is_string(jt) || json_string_length(jt) == 0 ||
        strlen(json_string_value(jt)) != json_string_length(jt))
        return fail(L, BATON_EPLAN, s->target_pos, "%s: \"%s\" must be the name of a %s, not %s",
                    subj, tkey, tkey, json_is_string(jt) ? "an empty string" : json_kind(jt));
    if (!(s->target_name = strdup(json_string_value(jt))))
        return fail(L, BATON_ENOMEM, s->pos, "out of memory");

    json_t *jdev = json_object_get(js, "device");
    s->device_pos = field_pos(L, node, js, "device");
    if (!jdev)
        return fail(L, BATON_EPLAN, s->pos,
                    "%s has no \"device\"; add \"device\": \"cpu\" or \"device\": \"cuda:0\"",
                    subj);
    if (!json_is_string(jdev) || baton_device_parse(json_string_value(jdev), &s->device) != 0)
        return fail(L, BATON_EPLAN, s->device_pos,
                    "%s: unknown device %s%.32s%s; use \"cpu\" or \"cuda:N\" with N from 0 to %d",
                    subj, json_is_string(jdev) ? "'" : "",
                    json_is_string(jdev) ? json_string_value(jdev) : json_kind(jdev),
                    json_is_string(jdev) ? "'" : "", PLAN_MAX_DEVICES - 2);

    if ((rc = load_tensor_list(L, s, js, node, "inputs", subj, &s->inputs, &s->input_pos,
                               &s->n_inputs)) ||
        (rc = load_tensor_list(L, s, js, node, "outputs", subj, &s->outputs, &s->output_pos,
                               &s->n_outputs)) ||
        (rc = load_attrs(L, s, js, node, subj)) || (rc = load_opaque(L, s, js, node, subj)))
        return rc;
    return 0;
}

/* ---- the top level --------------------------------------------------------------------------- */

static int build(loader *L, json_t *root)
{
    static const char *const keys[] = {"format", "version", "name", "tensors", "steps"};
    baton_plan *plan = L->plan;
    plan_pos rpos = node_pos(L, 0);
    int rc;
    if (!json_is_object(root))
        return fail(L, BATON_EPLAN, rpos,
                    "a plan is a JSON object with \"format\": \"baton.plan\", \"version\": 1, "
                    "\"name\", \"tensors\" and \"steps\"; this file holds %s",
                    json_kind(root));
    if ((rc = check_keys(L, root, 0, "plan", keys, 5)))
        return rc;

    json_t *jf = json_object_get(root, "format");
    if (!jf)
        return fail(L, BATON_EPLAN, rpos,
                    "plan has no \"format\"; a baton plan starts with \"format\": \"baton.plan\", "
                    "\"version\": 1");
    if (!json_is_string(jf) || strcmp(json_string_value(jf), "baton.plan") != 0)
        return fail(L, BATON_EPLAN, field_pos(L, 0, root, "format"),
                    "\"format\" must be \"baton.plan\"; this is not a baton plan file");
    json_t *jv = json_object_get(root, "version");
    if (!jv)
        return fail(L, BATON_EPLAN, rpos, "plan has no \"version\"; add \"version\": %d",
                    BATON_PLAN_FORMAT_VERSION);
    if (!json_is_integer(jv))
        return fail(L, BATON_EPLAN, field_pos(L, 0, root, "version"),
                    "\"version\" must be the integer %d, not %s", BATON_PLAN_FORMAT_VERSION,
                    json_kind(jv));
    if (json_integer_value(jv) != BATON_PLAN_FORMAT_VERSION)
        return fail(L, BATON_EPLAN, field_pos(L, 0, root, "version"),
                    "plan format version %lld is not supported; this baton reads version %d",
                    (long long)json_integer_value(jv), BATON_PLAN_FORMAT_VERSION);
    json_t *jn = json_object_get(root, "name");
    if (!jn)
        return fail(L, BATON_EPLAN, rpos, "plan has no \"name\"; add one, e.g. \"name\": \"demo\"");
    if (!json_is_string(jn) || json_string_length(jn) == 0 ||
        json_string_length(jn) > PLAN_MAX_NAME ||
        strlen(json_string_value(jn)) != json_string_length(jn))
        return fail(L, BATON_EPLAN, field_pos(L, 0, root, "name"),
                    "the plan's \"name\" must be a string of 1 to %d characters", PLAN_MAX_NAME);
    if (!(plan->name = strdup(json_string_value(jn))))
        return fail(L, BATON_ENOMEM, rpos, "out of memory");

    json_t *jt = json_object_get(root, "tensors"), *js = json_object_get(root, "steps");
    int tnode = field_node(L, 0, root, "tensors"), snode = field_node(L, 0, root, "steps");
    if (!jt)
        return fail(L, BATON_EPLAN, rpos,
                    "plan has no \"tensors\"; add the array of tensors the steps use");
    if (!json_is_array(jt))
        return fail(L, BATON_EPLAN, node_pos(L, tnode), "\"tensors\" must be an array, not %s",
                    json_kind(jt));
    if (!js)
        return fail(L, BATON_EPLAN, rpos, "plan has no \"steps\"; add the array of steps to run");
    if (!json_is_array(js))
        return fail(L, BATON_EPLAN, node_pos(L, snode), "\"steps\" must be an array, not %s",
                    json_kind(js));
    if (json_array_size(js) == 0)
        return fail(L, BATON_EPLAN, node_pos(L, snode),
                    "\"steps\" is empty; a plan runs at least one step");
    if (json_array_size(jt) > PLAN_MAX_ITEMS || json_array_size(js) > PLAN_MAX_ITEMS)
        return fail(L, BATON_EPLAN, rpos, "a plan holds at most %d tensors and %d steps",
                    PLAN_MAX_ITEMS, PLAN_MAX_ITEMS);

    int nt = (int)json_array_size(jt), ns = (int)json_array_size(js);
    plan->tensors = calloc(nt ? (size_t)nt : 1, sizeof *plan->tensors);
    plan->steps = calloc((size_t)ns, sizeof *plan->steps);
    if (!plan->tensors || !plan->steps)
        return fail(L, BATON_ENOMEM, rpos, "out of memory");
    plan->n_tensors = nt;
    plan->n_steps = ns;
    if (plan_index_create(plan))
        return fail(L, BATON_ENOMEM, rpos, "out of memory");

    int child = first_child(L, tnode);
    for (int i = 0; i < nt; i++, child = next_sibling(L, child))
        if ((rc = load_tensor(L, i, json_array_get(jt, (size_t)i), child)))
            return rc;
    child = first_child(L, snode);
    for (int i = 0; i < ns; i++, child = next_sibling(L, child))
        if ((rc = load_step(L, i, json_array_get(js, (size_t)i), child)))
            return rc;
    return 0;
}

int baton_plan_load_string(const baton_registry *reg, const char *json, size_t len,
                           const char *source, const char *base_dir, baton_plan **out,
                           baton_error *err)
{
    baton_error local;
    if (!err)
        err = &local;
    if (out)
        *out = NULL;
    if (!reg || !json || !out)
        return baton_seterr(err, BATON_EINVAL,
                            "baton_plan_load_string: registry, text and out must not be NULL");
    loader L = {0};
    L.err = err;
    L.plan = calloc(1, sizeof *L.plan);
    if (!L.plan)
        return baton_seterr(err, BATON_ENOMEM, "out of memory loading a plan");
    baton_plan *plan = L.plan;
    plan->registry = reg;
    plan->source = strdup(source ? source : "<string>");
    plan->base_dir = base_dir ? strdup(base_dir) : NULL;
    int rc = 0;
    json_t *root = NULL;
    if (!plan->source || (base_dir && !plan->base_dir)) {
        rc = baton_seterr(err, BATON_ENOMEM, "out of memory loading a plan");
        goto done;
    }

    json_error_t jerr;
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rc = plan_error(err, BATON_EPARSE, plan, (plan_pos){jerr.line, jerr.column},
                        "JSON syntax error: %s", jerr.text);
        goto done;
    }
    if ((rc = ptree_scan(&L.t, json, len)) != 0) {
        rc = baton_seterr(err, rc, "out of memory loading a plan");
        goto done;
    }
    if ((rc = build(&L, root)) || (rc = plan_validate(plan, err)) || (rc = plan_analyse(plan, err)))
        goto done;

done:
    json_decref(root);
    free(L.t.v);
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
    if (out)
        *out = NULL;
    if (!reg || !path || !out)
        return baton_seterr(err, BATON_EINVAL,
                            "baton_plan_load: registry, path and out must not be NULL");
    FILE *f = fopen(path, "rb");
    if (!f)
        return baton_seterr(err, BATON_EIO, "%s: cannot open the plan file: %s", path,
                            strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0)
            break;
    }
    int read_error = ferror(f);
    fclose(f);
    if (!buf)
        return baton_seterr(err, BATON_ENOMEM, "%s: out of memory reading the plan file", path);
    if (read_error) {
        free(buf);
        return baton_seterr(err, BATON_EIO, "%s: cannot read the plan file", path);
    }
    /* npy paths are relative to the plan file's directory. */
    char *dir = strdup(path);
    if (!dir) {
        free(buf);
        return baton_seterr(err, BATON_ENOMEM, "%s: out of memory", path);
    }
    char *slash = strrchr(dir, '/');
    if (slash)
        slash == dir ? (void)(slash[1] = 0) : (void)(*slash = 0);
    else
        dir[0] = 0;
    int rc = baton_plan_load_string(reg, buf, len, path, dir, out, err);
    free(buf);
    free(dir);
    return rc;
}
