/* safetensors.c: weights from safetensors files. A file is memory-mapped once per process (a
 * reference-counted cache keyed by device and inode), so however many constants, plans and
 * runtimes read it, its bytes are paged in only where something reads them; CPU steps read aligned
 * tensors in place.
 *
 * The files may come from anyone: the 8-byte length, the JSON header (strict UTF-8, nesting
 * bounded before it is parsed, exactly the keys the format has) and every tensor's offsets (in
 * the file, no overlap, exactly its dtype and shape's bytes) are checked before any tensor is
 * used, and only regular files are opened. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan/json.h"
#include "plan/plan_internal.h"

/* The safetensors crate refuses headers above 100 MB; so does baton. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
/* A header nests object > tensor > shape: 3 levels. Anything deeper is not safetensors, and is
 * refused before the JSON reader recurses into it. */
#define ST_MAX_DEPTH 3

static const struct {
    const char *name;
    baton_dtype dt;
} st_types[] = {
    {"F32", BATON_DTYPE_F32}, {"F16", BATON_DTYPE_F16},   {"BF16", BATON_DTYPE_BF16},
    {"F64", BATON_DTYPE_F64}, {"I32", BATON_DTYPE_I32},   {"I64", BATON_DTYPE_I64},
    {"U8", BATON_DTYPE_U8},   {"BOOL", BATON_DTYPE_BOOL},
};
#define ST_SUPPORTED "F32, F16, BF16, F64, I32, I64, U8 and BOOL"
/* Dtypes of the format that baton has no type for: refused by name. */
static const char *const st_other[] = {"I8",      "I16",     "U16", "U32",     "U64",     "F8_E4M3",
                                       "F8_E5M2", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

/* Up to 48 bytes of s as printable ASCII (quotes, backslashes and non-ASCII as \xNN), so that a
 * hostile key cannot reach a terminal as is. */
static const char *shown(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0, i = 0;
    for (; i < n && i < 48 && o + 6 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        else
            out[o++] = (char)c;
    }
    if (i < n && o + 4 < cap)
        o += (size_t)snprintf(out + o, cap - o, "...");
    out[o] = 0;
    return out;
}

#define FIX_HINT "write it with safetensors' save_file (or check that it was copied whole)"

static int st_fail(baton_error *err, const char *name, const char *fmt, ...) CORE_PRINTF(3, 4);
static int st_fail(baton_error *err, const char *name, const char *fmt, ...)
{
    char what[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return baton__err_set(err, BATON_EIO, "%s: not a valid safetensors file: %s", name, what);
}

/* How deeply brackets nest outside strings (a string's escapes skipped), stopping early once
 * past `limit`. Malformed JSON is the parser's to report; this only bounds its recursion. */
static int nesting(const unsigned char *s, size_t n, int limit)
{
    int depth = 0, max = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > max && (max = depth) > limit)
                return max;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return max;
}

static int cmp_begin(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

void baton__st_header_free(st_header *h)
{
    if (!h)
        return;
    free(h->entries);
    free(h->names);
    memset(h, 0, sizeof *h);
}

/* One tensor entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]}. */
static int parse_entry(const jdoc *d, int obj, const char *key, size_t key_len, uint64_t data_len,
                       const char *name, st_entry *e, baton_error *err)
{
    char k[256];
    shown(key, key_len, k, sizeof k);
    if (!jis(d, obj, J_OBJECT))
        return st_fail(err, name,
                       "tensor \"%s\" is %s, not an object with dtype, shape and "
                       "data_offsets; " FIX_HINT,
                       k, baton__plan_json_kind(d, obj));
    int jd = -1, js = -1, jo = -1;
    for (int c = d->v[obj].first; c >= 0; c = d->v[c].next) {
        const char *ck = d->v[c].key;
        if (strcmp(ck, "dtype") == 0)
            jd = c;
        else if (strcmp(ck, "shape") == 0)
            js = c;
        else if (strcmp(ck, "data_offsets") == 0)
            jo = c;
        else {
            char u[256];
            return st_fail(err, name,
                           "tensor \"%s\" has an unknown key \"%s\"; an entry has exactly "
                           "dtype, shape and data_offsets",
                           k, shown(ck, strlen(ck), u, sizeof u));
        }
    }
    if (jd < 0 || js < 0 || jo < 0)
        return st_fail(err, name, "tensor \"%s\" has no \"%s\"; " FIX_HINT, k,
                       jd < 0   ? "dtype"
                       : js < 0 ? "shape"
                                : "data_offsets");
    if (!jis(d, jd, J_STRING))
        return st_fail(err, name, "tensor \"%s\": dtype is %s, not a string such as \"F32\"", k,
                       baton__plan_json_kind(d, jd));
    const char *dt = d->v[jd].s;
    e->desc.dtype = BATON_DTYPE_INVALID;
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (strcmp(dt, st_types[i].name) == 0)
            e->desc.dtype = st_types[i].dt;
    if (e->desc.dtype == BATON_DTYPE_INVALID) {
        int known = 0;
        for (size_t i = 0; i < sizeof st_other / sizeof st_other[0]; i++)
            known |= strcmp(dt, st_other[i]) == 0;
        char t[128];
        shown(dt, d->v[jd].len, t, sizeof t);
        if (known)
            return baton__err_set(
                err, BATON_EIO,
                "%s: tensor \"%s\" is %s, which baton has no dtype for; baton reads "
                "" ST_SUPPORTED ": convert that tensor (e.g. to F32 or BF16)",
                name, k, t);
        return st_fail(err, name,
                       "tensor \"%s\" has an unknown dtype \"%s\"; the format's are "
                       "" ST_SUPPORTED " and others baton does not read",
                       k, t);
    }
    if (!jis(d, js, J_ARRAY))
        return st_fail(err, name, "tensor \"%s\": shape is %s, not an array of sizes", k,
                       baton__plan_json_kind(d, js));
    if (d->v[js].n > BATON_MAX_RANK)
        return baton__err_set(err, BATON_EIO,
                              "%s: tensor \"%s\" has %d dimensions; baton tensors have at most %d",
                              name, k, d->v[js].n, BATON_MAX_RANK);
    e->desc.rank = d->v[js].n;
    uint64_t numel = 1;
    int i = 0;
    for (int c = d->v[js].first; c >= 0; c = d->v[c].next, i++) {
        if (!jis(d, c, J_INT) || d->v[c].i < 0)
            return st_fail(err, name, "tensor \"%s\": shape[%d] is not a size (an integer >= 0)", k,
                           i);
        uint64_t n = (uint64_t)d->v[c].i;
        e->desc.shape[i] = (int64_t)n;
        /* no file holds 2^62 bytes: past that the size is surely wrong, and never overflows */
        numel = n && numel > ((uint64_t)1 << 62) / n ? ((uint64_t)1 << 62) + 1 : numel * n;
    }
    if (!jis(d, jo, J_ARRAY) || d->v[jo].n != 2 || !jis(d, d->v[jo].first, J_INT) ||
        !jis(d, d->v[d->v[jo].first].next, J_INT))
        return st_fail(err, name, "tensor \"%s\": data_offsets is not [begin, end], two integers",
                       k);
    long long b = d->v[d->v[jo].first].i, en = d->v[d->v[d->v[jo].first].next].i;
    if (b < 0 || en < b)
        return st_fail(err, name, "tensor \"%s\": data_offsets [%lld, %lld] is not a range", k, b,
                       en);
    if ((uint64_t)en > data_len)
        return st_fail(err, name,
                       "tensor \"%s\": data_offsets [%lld, %lld] run past the end of the data "
                       "(%llu bytes after the header): the file is truncated or its header lies",
                       k, b, en, (unsigned long long)data_len);
    uint64_t want =
        numel > ((uint64_t)1 << 62) ? UINT64_MAX : numel * baton_dtype_size(e->desc.dtype);
    if ((uint64_t)(en - b) != want)
        return st_fail(
            err, name,
            "tensor \"%s\": data_offsets [%lld, %lld] hold %lld bytes but a %s tensor of "
            "that shape has %llu",
            k, b, en, en - b, dt, (unsigned long long)want);
    e->begin = (uint64_t)b;
    e->end = (uint64_t)en;
    return 0;
}

int baton__st_parse(const void *buf, size_t len, uint64_t file_size, const char *name,
                    st_header *out, baton_error *err)
{
    memset(out, 0, sizeof *out);
    const unsigned char *p = buf;
    if (file_size < 8 || len < 8)
        return st_fail(err, name,
                       "%llu bytes, shorter than the 8-byte header length that starts the "
                       "format; the file is truncated or not safetensors",
                       (unsigned long long)file_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | p[i];
    if (n < 2)
        return st_fail(err, name, "the header length is %llu; a header is a JSON object",
                       (unsigned long long)n);
    if (n > ST_MAX_HEADER)
        return st_fail(err, name,
                       "the header length is %llu bytes, above the format's limit of 100 MB: "
                       "this is not a safetensors file",
                       (unsigned long long)n);
    if (n > file_size - 8)
        return st_fail(err, name,
                       "the header length is %llu bytes but the file has only %llu after it: "
                       "the file is truncated or not safetensors",
                       (unsigned long long)n, (unsigned long long)(file_size - 8));
    if (len < 8 + n)
        return baton__err_set(err, BATON_EINVAL,
                              "%s: baton__st_parse needs the whole header in memory", name);
    const char *h = (const char *)p + 8;
    if (h[0] != '{')
        return st_fail(err, name, "the header does not start with '{'; " FIX_HINT);
    int depth = nesting((const unsigned char *)h, (size_t)n, ST_MAX_DEPTH);
    if (depth > ST_MAX_DEPTH)
        return st_fail(err, name,
                       "the header nests brackets more than %d deep; a safetensors header is "
                       "an object of tensor entries, nothing deeper",
                       ST_MAX_DEPTH);
    jdoc doc = {0};
    jerror je;
    int rc = baton__plan_json_parse(&doc, h, (size_t)n, &je);
    if (rc) {
        baton__plan_json_free(&doc);
        if (rc == BATON_ENOMEM)
            return baton__err_set(err, BATON_ENOMEM, "%s: out of memory reading the header", name);
        char t[200];
        shown(je.text, strlen(je.text), t, sizeof t);
        int utf8 = strstr(je.text, "decode byte") || strstr(je.text, "UTF-8");
        return st_fail(err, name, "the header is not valid %s (line %d, column %d: %s)",
                       utf8 ? "UTF-8" : "JSON", je.line, je.col, t);
    }
    uint64_t data_len = file_size - 8 - n;
    if (!jis(&doc, 0, J_OBJECT)) {
        baton__plan_json_free(&doc);
        return st_fail(err, name, "the header is not a JSON object; " FIX_HINT);
    }
    int count = 0;
    size_t name_bytes = 0;
    for (int c = doc.v[0].first; c >= 0; c = doc.v[c].next)
        if (strcmp(doc.v[c].key, "__metadata__") != 0) {
            count++;
            name_bytes += strlen(doc.v[c].key) + 1;
        }
    out->entries = calloc((size_t)count + 1, sizeof *out->entries);
    out->names = malloc(name_bytes + 1);
    if (!out->entries || !out->names) {
        baton__plan_json_free(&doc);
        baton__st_header_free(out);
        return baton__err_set(err, BATON_ENOMEM, "%s: out of memory reading the header", name);
    }
    char *np = out->names;
    for (int c = doc.v[0].first; c >= 0 && !rc; c = doc.v[c].next) {
        const char *key = doc.v[c].key;
        if (strcmp(key, "__metadata__") == 0) {
            /* a map of strings to strings; baton ignores what it says */
            int ok = jis(&doc, c, J_OBJECT);
            for (int m = ok ? doc.v[c].first : -1; m >= 0 && ok; m = doc.v[m].next)
                ok = jis(&doc, m, J_STRING);
            if (!ok)
                rc = st_fail(err, name, "__metadata__ is not an object of strings; " FIX_HINT);
            continue;
        }
        st_entry *e = &out->entries[out->n];
        size_t kl = strlen(key);
        rc = parse_entry(&doc, c, key, kl, data_len, name, e, err);
        if (!rc) {
            memcpy(np, key, kl + 1);
            e->name = np;
            np += kl + 1;
            out->n++;
        }
    }
    baton__plan_json_free(&doc);
    if (rc) {
        baton__st_header_free(out);
        return rc;
    }
    out->data_start = 8 + n;
    out->data_len = data_len;
    /* no two tensors share bytes: sorted by offset, each begins where the last one ended or
     * later (empty tensors take no bytes) */
    qsort(out->entries, (size_t)out->n, sizeof *out->entries, cmp_begin);
    const st_entry *last = NULL;
    for (int i = 0; i < out->n; i++) {
        const st_entry *e = &out->entries[i];
        if (e->end == e->begin)
            continue;
        if (last && e->begin < last->end) {
            char a[256], b[256];
            rc = st_fail(err, name,
                         "tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) overlap; each "
                         "tensor has bytes of its own",
                         shown(last->name, strlen(last->name), a, sizeof a),
                         (unsigned long long)last->begin, (unsigned long long)last->end,
                         shown(e->name, strlen(e->name), b, sizeof b), (unsigned long long)e->begin,
                         (unsigned long long)e->end);
            baton__st_header_free(out);
            return rc;
        }
        last = e;
    }
    qsort(out->entries, (size_t)out->n, sizeof *out->entries, cmp_name);
    return 0;
}

int baton__st_header_find(const st_header *h, const char *key)
{
    int lo = 0, hi = h->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(h->entries[mid].name, key);
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* ---- the process-wide cache of mappings ----------------------------------------------------- */

struct st_file {
    int refs; /* under cache_lock */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    unsigned char *map;
    size_t map_len;
    st_header h;
    struct st_file *next;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static st_file *cache;

int baton__st_open(const char *path, st_file **out, baton_error *err)
{
    *out = NULL;
    uint64_t size;
    int fd = baton__plan_open_regular(path, "safetensors file", &size, err);
    if (fd < 0)
        return fd;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return baton__err_set(err, BATON_EIO, "%s: cannot stat the safetensors file: %s", path,
                              strerror(e));
    }
    pthread_mutex_lock(&cache_lock);
    for (st_file *f = cache; f; f = f->next)
        /* the same file, unchanged since it was mapped (a rewritten file maps anew) */
        if (f->dev == st.st_dev && f->ino == st.st_ino && f->size == st.st_size &&
            f->mtime.tv_sec == st.st_mtim.tv_sec && f->mtime.tv_nsec == st.st_mtim.tv_nsec) {
            f->refs++;
            pthread_mutex_unlock(&cache_lock);
            close(fd);
            *out = f;
            return 0;
        }
    pthread_mutex_unlock(&cache_lock);

    st_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return baton__err_set(err, BATON_ENOMEM, "%s: out of memory", path);
    }
    f->refs = 1;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->size = st.st_size;
    f->mtime = st.st_mtim;
    if (size < 8) {
        close(fd);
        free(f);
        return st_fail(err, path,
                       "%llu bytes, shorter than the 8-byte header length that starts the "
                       "format; the file is truncated or not safetensors",
                       (unsigned long long)size);
    }
    if (size > (uint64_t)SIZE_MAX) {
        close(fd);
        free(f);
        return baton__err_set(err, BATON_EIO, "%s: too large to map on this machine", path);
    }
    /* Mapped, not read: pages come in where a step or an upload touches them. */
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        free(f);
        return baton__err_set(err, BATON_EIO, "%s: cannot map the safetensors file: %s", path,
                              strerror(e));
    }
    f->map = m;
    f->map_len = (size_t)size;
    int rc = baton__st_parse(f->map, f->map_len, size, path, &f->h, err);
    if (rc) {
        munmap(f->map, f->map_len);
        free(f);
        return rc;
    }
    pthread_mutex_lock(&cache_lock);
    /* another thread may have mapped the same file meanwhile: keep one mapping */
    for (st_file *g = cache; g; g = g->next)
        if (g->dev == f->dev && g->ino == f->ino && g->size == f->size &&
            g->mtime.tv_sec == f->mtime.tv_sec && g->mtime.tv_nsec == f->mtime.tv_nsec) {
            g->refs++;
            pthread_mutex_unlock(&cache_lock);
            munmap(f->map, f->map_len);
            baton__st_header_free(&f->h);
            free(f);
            *out = g;
            return 0;
        }
    f->next = cache;
    cache = f;
    pthread_mutex_unlock(&cache_lock);
    *out = f;
    return 0;
}

void baton__st_release(st_file *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&cache_lock);
    int last = --f->refs == 0;
    if (last)
        for (st_file **pp = &cache; *pp; pp = &(*pp)->next)
            if (*pp == f) {
                *pp = f->next;
                break;
            }
    pthread_mutex_unlock(&cache_lock);
    if (!last)
        return;
    munmap(f->map, f->map_len);
    baton__st_header_free(&f->h);
    free(f);
}

const st_header *baton__st_file_header(const st_file *f)
{
    return &f->h;
}

const void *baton__st_file_data(const st_file *f, int entry)
{
    return f->map + f->h.data_start + f->h.entries[entry].begin;
}

int baton__st_cache_count(void)
{
    int n = 0;
    pthread_mutex_lock(&cache_lock);
    for (st_file *f = cache; f; f = f->next)
        n++;
    pthread_mutex_unlock(&cache_lock);
    return n;
}
