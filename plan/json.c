/* json.c: baton's strict one-pass JSON reader (json.h). One pass and a few allocations build the
 * node array, so that large plans read in milliseconds; Jansson stays the authority on syntax and
 * words the message when the text is not well-formed. The fuzzer (tests/fuzz/fuzz_plan_load.c)
 * checks that both accept the same texts. */
#include <errno.h>
#include <jansson.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "plan/json.h"

/* The node array is most of a large plan's memory while it loads. */
_Static_assert(sizeof(void *) != 8 || sizeof(jnode) == 48, "jnode grew");

typedef struct jparser {
    const char *s;
    size_t len, i;
    int line, col;
    int depth;
    jdoc *t;
    locale_t c_locale;
    int failed;
    int err_line, err_col;
    char err[160];
    int nomem;
    int max_nodes; /* the memory bound (JSON_MEMORY_FACTOR) in nodes */
    int too_big;   /* the document has more values than the bound allows */
} jparser;

static void jfail(jparser *p, const char *what)
{
    if (p->failed)
        return;
    p->failed = 1;
    p->err_line = p->line;
    p->err_col = p->col;
    /* Jansson drops a NUL byte that directly follows a number or a literal (its reader uses NUL
     * as "nothing buffered"); JSON allows none, so that is where the two parsers differ. */
    if (p->i < p->len && p->s[p->i] == '\0')
        what = "NUL byte in the text";
    snprintf(p->err, sizeof p->err, "%s", what);
}

/* Advances over one byte, keeping line and column (columns count UTF-8 lead bytes). */
static void jadvance(jparser *p)
{
    unsigned char c = (unsigned char)p->s[p->i++];
    if (c == '\n') {
        p->line++;
        p->col = 1;
    } else if ((c & 0xC0) != 0x80) {
        p->col++;
    }
}

static void jskip_ws(jparser *p)
{
    while (p->i < p->len) {
        char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        jadvance(p);
    }
}

static int jnew(jparser *p, jtype type, int line, int col)
{
    jdoc *t = p->t;
    if (t->n == p->max_nodes) {
        p->too_big = 1;
        snprintf(p->err, sizeof p->err,
                 "the document holds more than %d values in its %zu bytes; baton's reader keeps "
                 "its memory within %d times the file (%zu bytes a value)",
                 p->max_nodes, p->len, JSON_MEMORY_FACTOR + 1, sizeof(jnode));
        p->failed = 1;
        p->err_line = p->line;
        p->err_col = p->col;
        return -1;
    }
    if (t->n == t->cap) {
        /* double, but never past the bound: the doubling would otherwise take up to twice it */
        int cap = t->cap ? 2 * t->cap : 1024;
        if (cap > p->max_nodes || cap < t->cap)
            cap = p->max_nodes;
        jnode *v = t->cap > (1 << 29) ? NULL : realloc(t->v, (size_t)cap * sizeof *v);
        if (!v) {
            p->nomem = 1;
            jfail(p, "out of memory");
            return -1;
        }
        t->v = v;
        t->cap = cap;
    }
    int k = t->n++;
    jnode *n = &t->v[k];
    memset(n, 0, sizeof *n);
    n->type = type;
    n->line = line;
    n->col = col;
    n->first = n->next = -1;
    return k;
}

/* Appends child to parent's children; *last is the previous child (-1 before the first). */
static void jappend(jdoc *t, int parent, int *last, int child)
{
    if (*last >= 0)
        t->v[*last].next = child;
    else
        t->v[parent].first = child;
    *last = child;
    t->v[parent].n++;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* Parses a string at p->i (the opening quote) into the arena. Returns 0 or -1. The decoded form
 * is never longer than the raw one, so the arena (text length + 1) always has room. */
static int jstring(jparser *p, const char **out, size_t *out_len)
{
    jdoc *t = p->t;
    char *start = t->arena + t->arena_used, *d = start;
    jadvance(p); /* " */
    for (;;) {
        /* most of a plan's text: a run of printable ASCII, copied as is, one column a byte */
        size_t run = p->i;
        while (run < p->len) {
            unsigned char r = (unsigned char)p->s[run];
            if (r < 0x20 || r >= 0x80 || r == '"' || r == '\\')
                break;
            run++;
        }
        memcpy(d, p->s + p->i, run - p->i);
        d += run - p->i;
        p->col += (int)(run - p->i);
        p->i = run;
        if (p->i >= p->len) {
            jfail(p, "premature end of input in a string");
            return -1;
        }
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') {
            jadvance(p);
            break;
        }
        if (c < 0x20) {
            jfail(p, "control character in a string");
            return -1;
        }
        if (c == '\\') {
            if (p->i + 1 >= p->len) {
                jfail(p, "premature end of input in a string");
                return -1;
            }
            char e = p->s[p->i + 1];
            if (e == 'u') {
                unsigned cp, lo;
                if (p->i + 6 > p->len || hex4(p->s + p->i + 2, &cp)) {
                    jfail(p, "invalid \\u escape");
                    return -1;
                }
                size_t used = 6;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (p->i + 12 > p->len || p->s[p->i + 6] != '\\' || p->s[p->i + 7] != 'u' ||
                        hex4(p->s + p->i + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                        jfail(p, "invalid Unicode surrogate pair");
                        return -1;
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    used = 12;
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    jfail(p, "lone Unicode low surrogate");
                    return -1;
                } else if (cp == 0) {
                    jfail(p, "\\u0000 is not allowed");
                    return -1;
                }
                d += baton__utf8_put(cp, d);
                for (size_t k = 0; k < used; k++)
                    jadvance(p);
                continue;
            }
            char r;
            switch (e) {
            case '"': r = '"'; break;
            case '\\': r = '\\'; break;
            case '/': r = '/'; break;
            case 'b': r = '\b'; break;
            case 'f': r = '\f'; break;
            case 'n': r = '\n'; break;
            case 'r': r = '\r'; break;
            case 't': r = '\t'; break;
            default: jfail(p, "invalid escape"); return -1;
            }
            *d++ = r;
            jadvance(p);
            jadvance(p);
            continue;
        }
        size_t end = p->i;
        uint32_t cp;
        if (baton__utf8_next(p->s, p->len, &end, &cp)) {
            jfail(p, "invalid UTF-8");
            return -1;
        }
        for (size_t k = p->i; k < end; k++) {
            *d++ = p->s[p->i];
            jadvance(p);
        }
    }
    *d = 0;
    *out = start;
    *out_len = (size_t)(d - start);
    t->arena_used += (size_t)(d - start) + 1;
    return 0;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int jnumber(jparser *p, int node)
{
    size_t b = p->i, i = p->i;
    int real = 0;
    if (i < p->len && p->s[i] == '-')
        i++;
    if (i < p->len && p->s[i] == '0') {
        i++;
        if (i < p->len && is_digit(p->s[i])) {
            jfail(p, "invalid number (leading zero)");
            return -1;
        }
    } else if (i < p->len && is_digit(p->s[i])) {
        while (i < p->len && is_digit(p->s[i]))
            i++;
    } else {
        jfail(p, "invalid token");
        return -1;
    }
    if (i < p->len && p->s[i] == '.') {
        real = 1;
        i++;
        if (i >= p->len || !is_digit(p->s[i])) {
            jfail(p, "invalid number");
            return -1;
        }
        while (i < p->len && is_digit(p->s[i]))
            i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        real = 1;
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-'))
            i++;
        if (i >= p->len || !is_digit(p->s[i])) {
            jfail(p, "invalid number");
            return -1;
        }
        while (i < p->len && is_digit(p->s[i]))
            i++;
    }
    jnode *v = &p->t->v[node];
    size_t n = i - b, digits = n - (p->s[b] == '-');
    int rc = 0;
    if (!real && digits <= 18) { /* exact in a long long: what strtoll gives, without its cost */
        long long x = 0;
        for (size_t k = n - digits; k < n; k++)
            x = x * 10 + (p->s[b + k] - '0');
        v->type = J_INT;
        v->i = p->s[b] == '-' ? -x : x;
        v->f = (double)v->i;
    } else {
        char buf[64], *tmp = buf;
        if (n >= sizeof buf && !(tmp = malloc(n + 1))) {
            p->nomem = 1;
            jfail(p, "out of memory");
            return -1;
        }
        memcpy(tmp, p->s + b, n);
        tmp[n] = 0;
        errno = 0;
        if (!real) {
            v->type = J_INT;
            v->i = strtoll(tmp, NULL, 10);
            v->f = (double)v->i;
            if (errno == ERANGE) {
                jfail(p, "too big integer");
                rc = -1;
            }
        } else {
            v->type = J_REAL;
            v->f = strtod_l(tmp, NULL, p->c_locale);
            if ((v->f == HUGE_VAL || v->f == -HUGE_VAL) && errno == ERANGE) {
                jfail(p, "real number overflow");
                rc = -1;
            }
        }
        if (tmp != buf)
            free(tmp);
    }
    p->col += (int)n; /* a number is ASCII on one line: one column a byte */
    p->i = i;
    return rc;
}

static int jvalue(jparser *p);

/* Keys of one object are distinct: pairwise for small objects, sorted for large ones. */
static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int jcheck_duplicates(jparser *p, int obj)
{
    jdoc *t = p->t;
    int n = t->v[obj].n;
    if (n < 2)
        return 0;
    if (n <= 16) {
        for (int a = t->v[obj].first; a >= 0; a = t->v[a].next)
            for (int b = t->v[a].next; b >= 0; b = t->v[b].next)
                if (t->v[a].key[0] == t->v[b].key[0] && strcmp(t->v[a].key, t->v[b].key) == 0)
                    goto dup;
        return 0;
    }
    const char **keys = malloc((size_t)n * sizeof *keys);
    if (!keys) {
        p->nomem = 1;
        jfail(p, "out of memory");
        return -1;
    }
    int k = 0;
    for (int a = t->v[obj].first; a >= 0; a = t->v[a].next)
        keys[k++] = t->v[a].key;
    qsort(keys, (size_t)n, sizeof *keys, cmp_keys);
    int dup = 0;
    for (int j = 1; j < n && !dup; j++)
        dup = strcmp(keys[j - 1], keys[j]) == 0;
    free(keys);
    if (!dup)
        return 0;
dup:
    jfail(p, "duplicate object key");
    return -1;
}

static int jcontainer(jparser *p, int node, int is_obj)
{
    jadvance(p); /* [ or { */
    jskip_ws(p);
    char close = is_obj ? '}' : ']';
    int last = -1;
    if (p->i < p->len && p->s[p->i] == close) {
        jadvance(p);
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        int key_line = 0, key_col = 0;
        if (is_obj) {
            if (p->i >= p->len || p->s[p->i] != '"') {
                jfail(p, "string or '}' expected");
                return -1;
            }
            key_line = p->line;
            key_col = p->col;
            if (jstring(p, &key, &key_len))
                return -1;
            jskip_ws(p);
            if (p->i >= p->len || p->s[p->i] != ':') {
                jfail(p, "':' expected");
                return -1;
            }
            jadvance(p);
            jskip_ws(p);
        }
        int child = jvalue(p);
        if (child < 0)
            return -1;
        jnode *c = &p->t->v[child];
        c->key = key;
        c->key_line = key_line;
        c->key_col = key_col;
        jappend(p->t, node, &last, child);
        jskip_ws(p);
        if (p->i < p->len && p->s[p->i] == ',') {
            jadvance(p);
            jskip_ws(p);
            continue;
        }
        if (p->i < p->len && p->s[p->i] == close) {
            jadvance(p);
            break;
        }
        jfail(p, is_obj ? "'}' expected" : "']' expected");
        return -1;
    }
    return is_obj ? jcheck_duplicates(p, node) : 0;
}

static int jvalue1(jparser *p);

/* Parses one value at p->i; returns its node or -1. Like Jansson, every value (not only
 * containers) counts toward the depth limit. */
static int jvalue(jparser *p)
{
    if (++p->depth > JSON_MAX_DEPTH) {
        jfail(p, "maximum parsing depth reached");
        return -1;
    }
    int node = jvalue1(p);
    p->depth--;
    return node;
}

static int jvalue1(jparser *p)
{
    if (p->i >= p->len) {
        jfail(p, "unexpected end of input");
        return -1;
    }
    int line = p->line, col = p->col;
    char c = p->s[p->i];
    int node = jnew(p, J_NULL, line, col);
    if (node < 0)
        return -1;
    switch (c) {
    case '{':
    case '[':
        p->t->v[node].type = c == '{' ? J_OBJECT : J_ARRAY;
        return jcontainer(p, node, c == '{') ? -1 : node;
    case '"': {
        const char *s;
        size_t len;
        if (jstring(p, &s, &len))
            return -1;
        p->t->v[node].type = J_STRING;
        p->t->v[node].s = s;
        p->t->v[node].len = len;
        return node;
    }
    case 't':
    case 'f':
    case 'n': {
        static const char *const words[] = {"true", "false", "null"};
        static const jtype types[] = {J_TRUE, J_FALSE, J_NULL};
        int w = c == 't' ? 0 : c == 'f' ? 1 : 2;
        size_t wl = strlen(words[w]);
        /* Jansson reads a whole run of letters as one word */
        size_t e = p->i;
        while (e < p->len &&
               ((p->s[e] >= 'a' && p->s[e] <= 'z') || (p->s[e] >= 'A' && p->s[e] <= 'Z')))
            e++;
        if (e - p->i != wl || memcmp(p->s + p->i, words[w], wl) != 0) {
            jfail(p, "invalid token");
            return -1;
        }
        p->t->v[node].type = types[w];
        while (p->i < e)
            jadvance(p);
        return node;
    }
    default:
        if (c == '-' || is_digit(c))
            return jnumber(p, node) ? -1 : node;
        jfail(p, "invalid token");
        return -1;
    }
}

/* Parses text into t. Returns 0, BATON_EPARSE (p->err says why and where) or BATON_ENOMEM. */
static int jparse(jparser *p, jdoc *t, const char *s, size_t len)
{
    memset(p, 0, sizeof *p);
    p->s = s;
    p->len = len;
    p->line = 1;
    p->col = 1;
    p->t = t;
    /* The nodes and the string arena (at most the text's size) stay within JSON_MEMORY_FACTOR
     * times the text, or JSON_MEMORY_FLOOR for a small one. */
    size_t budget = len <= JSON_MEMORY_FLOOR / JSON_MEMORY_FACTOR ? JSON_MEMORY_FLOOR
                                                                  : JSON_MEMORY_FACTOR * len;
    size_t nodes = (budget - (len + 1 < budget ? len + 1 : 0)) / sizeof(jnode);
    p->max_nodes = nodes > (1u << 29) ? (1 << 29) : (int)nodes;
    t->arena = malloc(len + 1);
    p->c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (!t->arena || p->c_locale == (locale_t)0) {
        if (p->c_locale != (locale_t)0)
            freelocale(p->c_locale);
        return BATON_ENOMEM;
    }
    jskip_ws(p);
    if (p->i >= p->len || (p->s[p->i] != '{' && p->s[p->i] != '[')) {
        jfail(p, "'[' or '{' expected");
    } else if (jvalue(p) >= 0) {
        jskip_ws(p);
        if (p->i < p->len)
            jfail(p, "end of file expected");
    }
    freelocale(p->c_locale);
    if (p->nomem)
        return BATON_ENOMEM;
    if (p->too_big)
        return BATON_EPLAN;
    return p->failed ? BATON_EPARSE : 0;
}

int baton__plan_json_parse(jdoc *doc, const char *text, size_t len, jerror *e)
{
    jparser p;
    int rc = jparse(&p, doc, text, len);
    if (rc == BATON_EPLAN) {
        e->line = p.err_line;
        e->col = p.err_col;
        snprintf(e->text, sizeof e->text, "%s", p.err);
    }
    if (rc != BATON_EPARSE)
        return rc;
    /* Not well-formed: Jansson, the reference parser, words the message; for a small text only,
     * since its tree of a large one would take far more memory than ours (the bound above). */
    json_error_t jerr;
    json_t *root = NULL;
    if (len > JSON_JANSSON_MAX) {
        e->line = p.err_line;
        e->col = p.err_col;
        snprintf(e->text, sizeof e->text, "%s", p.err);
        return BATON_EPARSE;
    }
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        e->line = jerr.line;
        e->col = jerr.column;
        /* Jansson names its own flag for a NUL escape; a plan's author needs the rule instead */
        const char *flag = strstr(jerr.text, "without JSON_ALLOW_NUL");
        if (flag)
            snprintf(e->text, sizeof e->text,
                     "\\u0000 (a NUL character) is not allowed in a plan's strings%s",
                     flag + strlen("without JSON_ALLOW_NUL"));
        else
            snprintf(e->text, sizeof e->text, "%s", jerr.text);
    } else { /* the two parsers disagree: keep ours, which is the stricter here */
        json_decref(root);
        e->line = p.err_line;
        e->col = p.err_col;
        snprintf(e->text, sizeof e->text, "%s", p.err);
    }
    return BATON_EPARSE;
}

void baton__plan_json_free(jdoc *doc)
{
    free(doc->v);
    free(doc->arena);
    doc->v = NULL;
    doc->arena = NULL;
    doc->n = doc->cap = 0;
    doc->arena_used = 0;
}

int baton__plan_json_get(const jdoc *doc, int obj, const char *key)
{
    if (!jis(doc, obj, J_OBJECT))
        return -1;
    for (int c = doc->v[obj].first; c >= 0; c = doc->v[c].next)
        if (strcmp(doc->v[c].key, key) == 0)
            return c;
    return -1;
}

const char *baton__plan_json_kind(const jdoc *doc, int node)
{
    switch (node < 0 ? J_NULL : doc->v[node].type) {
    case J_OBJECT: return "an object";
    case J_ARRAY: return "an array";
    case J_STRING: return "a string";
    case J_INT: return "an integer";
    case J_REAL: return "a number";
    case J_TRUE:
    case J_FALSE: return "a bool";
    default: return "null";
    }
}
