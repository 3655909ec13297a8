/* npy.c: reading and writing NumPy .npy files (format versions 1-3), the exchange format for
 * inputs, outputs and constants. Only little-endian, C-ordered arrays of baton's dtypes are
 * accepted. NumPy has no bfloat16: bf16 is stored as 2-byte void ('|V2'), which is what
 * ml_dtypes' bfloat16 arrays save as, so JAX users can np.save/np.load them.
 *
 * The files may come from anyone: the header is parsed by a strict grammar (what Python's
 * literal_eval would accept of a header numpy can write), the size it claims is checked against
 * the file's before anything is allocated, and only regular files are opened
 * (baton__plan_open_regular, which the plan loader uses too). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan/json.h"
#include "plan/plan_internal.h"

static const struct {
    const char *descr;
    baton_dtype dt;
} npy_types[] = {
    {"<f4", BATON_DTYPE_F32},  {"<f8", BATON_DTYPE_F64}, {"<f2", BATON_DTYPE_F16},
    {"<i4", BATON_DTYPE_I32},  {"<i8", BATON_DTYPE_I64}, {"|V2", BATON_DTYPE_BF16},
    {"<V2", BATON_DTYPE_BF16}, {"|u1", BATON_DTYPE_U8},  {"|b1", BATON_DTYPE_BOOL},
};
#define N_TYPES (sizeof npy_types / sizeof npy_types[0])

#define SUPPORTED "little-endian f2, f4, f8, i4, i8, |u1, |b1, or bfloat16 as |V2"
#define RESAVE    "re-save the array with numpy.save"

static int not_regular(const char *path, mode_t mode, const char *what, baton_error *err)
{
    const char *kind = S_ISDIR(mode)    ? "a directory"
                       : S_ISFIFO(mode) ? "a FIFO"
                       : S_ISCHR(mode)  ? "a character device"
                       : S_ISBLK(mode)  ? "a block device"
                       : S_ISSOCK(mode) ? "a socket"
                                        : "a special file";
    return baton__err_set(err, BATON_EIO, "%s is %s, not a regular file: give the path of a %s",
                          path, kind, what);
}

int baton__plan_open_regular(const char *path, const char *what, uint64_t *size, baton_error *err)
{
    /* stat first, so that a FIFO, device or socket is never opened at all; then fstat the
     * descriptor, so that a path swapped between the two calls is caught too. O_NONBLOCK keeps
     * that open from waiting for a FIFO's writer. */
    struct stat st;
    if (stat(path, &st) != 0)
        return baton__err_set(err, BATON_EIO, "%s: cannot open the %s: %s", path, what,
                              strerror(errno));
    if (!S_ISREG(st.st_mode))
        return not_regular(path, st.st_mode, what, err);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return baton__err_set(err, BATON_EIO, "%s: cannot open the %s: %s", path, what,
                              strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return S_ISREG(st.st_mode) ? baton__err_set(err, BATON_EIO, "%s: cannot stat the %s: %s",
                                                    path, what, strerror(e))
                                   : not_regular(path, st.st_mode, what, err);
    }
    /* Back to blocking reads: O_NONBLOCK means nothing for a regular file on Linux, but POSIX
     * leaves it unspecified. */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        return baton__err_set(err, BATON_EIO, "%s: fcntl on the %s: %s", path, what, strerror(e));
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

/* Up to `max` bytes of s as printable ASCII: quotes and controls escaped, whitespace runs
 * squeezed, "..." when cut, so that a hostile header cannot reach a terminal as is. */
static void excerpt(const unsigned char *s, size_t n, size_t max, char *out, size_t cap)
{
    size_t o = 0, i = 0;
    for (; i < n && i < max && o + 8 < cap; i++) {
        unsigned char c = s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
            if (o == 0 || out[o - 1] != ' ')
                out[o++] = ' ';
            while (i + 1 < n && (s[i + 1] == ' ' || s[i + 1] == '\n'))
                i++;
        } else if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    if (i < n && o + 4 < cap)
        o += (size_t)snprintf(out + o, cap - o, "...");
    out[o] = 0;
}

/* ---- the header grammar ----------------------------------------------------------------------
 * dict  := ws '{' ws [entry (ws ',' ws entry)* ws [',']] ws '}' ws
 * entry := str ws ':' ws value      with exactly the keys descr, fortran_order and shape
 * descr := str;  fortran_order := True | False;  shape := '(' [int (',' int)* [',']] ')'
 * int   := '0' | [1-9][0-9]*, with a Python 2 'L' suffix in versions 1 and 2; a one-element
 *          tuple needs its comma, as in Python. */

typedef struct hparse {
    const unsigned char *s; /* the header dict (after the length field) */
    size_t n, i;
    size_t base; /* file offset of s[0], for messages */
    int version;
    const char *name;
    baton_error *err;
} hparse;

static int hp_fail(hparse *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int hp_fail(hparse *p, const char *fmt, ...)
{
    char what[256], near[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t at = p->i < p->n ? p->i : p->n;
    excerpt(p->s + at, p->n - at, 24, near, sizeof near);
    if (at >= p->n || near[0] == 0 || (near[0] == ' ' && near[1] == 0))
        return baton__err_set(p->err, BATON_EIO,
                              "%s: malformed .npy header: %s, at its end (byte %zu); " RESAVE,
                              p->name, what, p->base + at);
    return baton__err_set(p->err, BATON_EIO,
                          "%s: malformed .npy header at byte %zu: %s, near \"%s\"; " RESAVE,
                          p->name, p->base + at, what, near);
}

static int hp_peek(const hparse *p)
{
    return p->i < p->n ? p->s[p->i] : -1;
}

static void hp_ws(hparse *p)
{
    while (p->i < p->n && strchr(" \t\n\r\f", p->s[p->i]) && p->s[p->i])
        p->i++;
}

static int is_ident(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* A quoted string without escapes; its contents in [*start, *start + *len). */
static int hp_string(hparse *p, size_t *start, size_t *len)
{
    int q = hp_peek(p);
    size_t open = p->i;
    for (size_t j = open + 1; j < p->n; j++) {
        int c = p->s[j];
        if (c == q) {
            *start = open + 1;
            *len = j - open - 1;
            p->i = j + 1;
            return 0;
        }
        if (c == '\\' || c == '\n' || c == 0) {
            p->i = j;
            return hp_fail(p, "escapes, line breaks and NUL bytes are not expected in a string");
        }
    }
    return hp_fail(p, "the string opened here is never closed");
}

static int hp_descr(hparse *p, size_t *start, size_t *len)
{
    int c = hp_peek(p);
    if (c == '[')
        return hp_fail(p, "structured dtypes (a list as 'descr') are not supported; save a plain "
                          "array of " SUPPORTED);
    if (c != '\'' && c != '"')
        return hp_fail(p, "expected a quoted dtype such as '<f4' for 'descr'");
    return hp_string(p, start, len);
}

static int hp_bool(hparse *p, int *value)
{
    size_t j = p->i;
    while (j < p->n && is_ident(p->s[j]))
        j++;
    size_t l = j - p->i;
    if (l == 4 && memcmp(p->s + p->i, "True", 4) == 0)
        *value = 1;
    else if (l == 5 && memcmp(p->s + p->i, "False", 5) == 0)
        *value = 0;
    else
        return hp_fail(p, "'fortran_order' must be True or False");
    p->i = j;
    return 0;
}

static int hp_shape(hparse *p, baton_tensor_desc *d)
{
    if (hp_peek(p) != '(')
        return hp_fail(p, "'shape' must be a tuple such as (2, 3), or (6,) for one dimension");
    p->i++;
    for (;;) {
        hp_ws(p);
        if (hp_peek(p) == ')') /* "()", or after a comma */
            break;
        int c = hp_peek(p);
        if (c < '0' || c > '9')
            return hp_fail(p, "expected a non-negative integer%s", d->rank ? "" : " or ')'");
        if (d->rank == BATON_MAX_RANK)
            return hp_fail(p, "a shape has at most %d dimensions", BATON_MAX_RANK);
        if (c == '0' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9')
            return hp_fail(p, "a dimension has a leading zero");
        int64_t v = 0;
        while ((c = hp_peek(p)) >= '0' && c <= '9') {
            if (v > (INT64_MAX - (c - '0')) / 10)
                return hp_fail(p, "a dimension is too large (at most %lld)", (long long)INT64_MAX);
            v = v * 10 + (c - '0');
            p->i++;
        }
        if (p->version < 3 && (hp_peek(p) == 'L' || hp_peek(p) == 'l'))
            p->i++; /* Python 2's long literal, which numpy still reads in these versions */
        d->shape[d->rank++] = v;
        hp_ws(p);
        if (hp_peek(p) == ',') {
            p->i++;
        } else if (hp_peek(p) == ')') {
            if (d->rank == 1)
                return hp_fail(p,
                               "a one-dimensional shape is written (%lld,), with the comma; "
                               "(%lld) is a number, not a tuple",
                               (long long)v, (long long)v);
            break;
        } else {
            return hp_fail(p, "expected ',' or ')' after a dimension");
        }
    }
    p->i++;
    return 0;
}

enum { K_DESCR, K_FORTRAN, K_SHAPE, K_N };
static const char *const key_names[K_N] = {"descr", "fortran_order", "shape"};

static int hp_dict(hparse *p, baton_tensor_desc *d, size_t *descr_at, size_t *descr_len,
                   int *fortran)
{
    int seen[K_N] = {0};
    hp_ws(p);
    if (hp_peek(p) != '{')
        return hp_fail(p, "expected '{' opening the header dict");
    p->i++;
    hp_ws(p);
    while (hp_peek(p) != '}') {
        int c = hp_peek(p);
        if (c != '\'' && c != '"')
            return hp_fail(p, "expected a quoted key ('descr', 'fortran_order' or 'shape') or "
                              "'}' closing the dict");
        size_t key_at = p->i, ks = 0, kl = 0;
        int rc = hp_string(p, &ks, &kl);
        if (rc)
            return rc;
        int k = 0;
        while (k < K_N && !(strlen(key_names[k]) == kl && memcmp(p->s + ks, key_names[k], kl) == 0))
            k++;
        if (k == K_N) {
            p->i = key_at;
            return hp_fail(p, "unknown key (a .npy header has exactly 'descr', 'fortran_order' "
                              "and 'shape')");
        }
        if (seen[k]) {
            p->i = key_at;
            return hp_fail(p, "the key '%s' appears twice", key_names[k]);
        }
        seen[k] = 1;
        hp_ws(p);
        if (hp_peek(p) != ':')
            return hp_fail(p, "expected ':' after the key '%s'", key_names[k]);
        p->i++;
        hp_ws(p);
        rc = k == K_DESCR     ? hp_descr(p, descr_at, descr_len)
             : k == K_FORTRAN ? hp_bool(p, fortran)
                              : hp_shape(p, d);
        if (rc)
            return rc;
        hp_ws(p);
        if (hp_peek(p) == ',') {
            p->i++;
            hp_ws(p);
        } else if (hp_peek(p) != '}') {
            return hp_fail(p, "expected ',' or '}' after the value of '%s'", key_names[k]);
        }
    }
    p->i++;
    hp_ws(p);
    if (p->i < p->n)
        return hp_fail(p, "unexpected text after the header's closing '}'");
    for (int k = 0; k < K_N; k++)
        if (!seen[k])
            return hp_fail(p, "the header has no '%s'", key_names[k]);
    return 0;
}

int baton__npy_parse(const void *buf, size_t len, uint64_t file_size, const char *name,
                     baton_tensor_desc *desc, size_t *data_offset, baton_error *err)
{
    const unsigned char *b = buf;
    if (len > file_size)
        len = (size_t)file_size;
    if (len == 0)
        return baton__err_set(err, BATON_EIO,
                              "%s: the file is empty; give a file written by "
                              "numpy.save",
                              name);
    if (memcmp(b, "\x93NUMPY", len < 6 ? len : 6) != 0)
        return baton__err_set(err, BATON_EIO,
                              "%s: not a .npy file (it does not start with \\x93NUMPY); give a "
                              "file written by numpy.save",
                              name);
    if (len < 10)
        return baton__err_set(err, BATON_EIO, "%s: truncated .npy file (%zu bytes); " RESAVE, name,
                              len);
    int major = b[6], minor = b[7];
    if (major < 1 || major > 3 || minor != 0)
        return baton__err_set(
            err, BATON_EIO,
            "%s: .npy format version %d.%d is not supported (baton reads 1.0, 2.0 "
            "and 3.0); " RESAVE,
            name, major, minor);
    size_t pre = major == 1 ? 10 : 12;
    if (len < pre)
        return baton__err_set(err, BATON_EIO, "%s: truncated .npy header; " RESAVE, name);
    size_t hlen = b[8] | (size_t)b[9] << 8;
    if (major > 1)
        hlen |= (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (hlen > 65535)
        return baton__err_set(err, BATON_EIO,
                              "%s: .npy header of %zu bytes, longer than any array baton reads "
                              "needs (at most 65535); " RESAVE,
                              name, hlen);
    if (hlen > len - pre)
        return baton__err_set(
            err, BATON_EIO, "%s: truncated .npy header (%zu bytes announced, %zu present); " RESAVE,
            name, hlen, len - pre);

    hparse p = {.s = b + pre, .n = hlen, .base = pre, .version = major, .name = name, .err = err};
    baton_tensor_desc td = {0};
    size_t ds = 0, dl = 0;
    int fortran = 0;
    int rc = hp_dict(&p, &td, &ds, &dl, &fortran);
    if (rc)
        return rc;
    for (size_t i = 0; i < N_TYPES && !td.dtype; i++)
        if (strlen(npy_types[i].descr) == dl && memcmp(p.s + ds, npy_types[i].descr, dl) == 0)
            td.dtype = npy_types[i].dt;
    if (!td.dtype) {
        char dt[64];
        excerpt(p.s + ds, dl, 12, dt, sizeof dt);
        return baton__err_set(err, BATON_EIO,
                              "%s: dtype '%s' is not supported; save the array as " SUPPORTED
                              " (e.g. a.astype('<f4'))",
                              name, dt);
    }
    /* Column-major bytes equal row-major ones when at most one dimension exceeds 1. */
    int big = 0;
    for (int i = 0; i < td.rank; i++)
        big += td.shape[i] > 1;
    if (fortran && big > 1)
        return baton__err_set(err, BATON_EIO,
                              "%s: Fortran-ordered arrays are not supported; save with "
                              "np.save(path, np.ascontiguousarray(a))",
                              name);

    char shape[160];
    baton__desc_format(shape, sizeof shape, &td);
    int64_t numel = baton_tensor_desc_numel(&td);
    size_t esize = baton_dtype_size(td.dtype);
    uint64_t avail = file_size - pre - hlen;
    if (numel < 0 || (uint64_t)numel > (uint64_t)SIZE_MAX / esize ||
        (uint64_t)numel > (uint64_t)INT64_MAX / esize)
        return baton__err_set(err, BATON_EIO,
                              "%s: the header's shape %s needs more bytes than any file can hold "
                              "(the file holds %llu bytes of data); the header is corrupt: " RESAVE,
                              name, shape, (unsigned long long)avail);
    uint64_t bytes = (uint64_t)numel * esize;
    if (bytes != avail)
        return baton__err_set(err, BATON_EIO,
                              "%s: the header says %s, %llu bytes of data but the file holds %llu; "
                              "it is truncated or its header is wrong: " RESAVE,
                              name, shape, (unsigned long long)bytes, (unsigned long long)avail);
    *desc = td;
    *data_offset = pre + hlen;
    return 0;
}

/* Reads up to n bytes, retrying short reads; returns how many, with errno set if fewer. */
static size_t read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = 0;
            break;
        }
        got += (size_t)k;
    }
    return got;
}

int baton_npy_read(const char *path, baton_tensor_desc *desc, void **data, baton_error *err)
{
    err_clear(err);
    if (data)
        *data = NULL;
    if (!path || !desc || !data)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_npy_read: path, desc and data must not be NULL");
    uint64_t size;
    int fd = baton__plan_open_regular(path, ".npy file", &size, err);
    if (fd < 0)
        return fd;
    size_t want = size < NPY_PREFIX_MAX ? (size_t)size : NPY_PREFIX_MAX;
    unsigned char *pre = malloc(want ? want : 1);
    void *buf = NULL;
    int rc = BATON_ENOMEM;
    if (!pre) {
        baton__err_set(err, rc, "%s: out of memory", path);
        goto out;
    }
    size_t got = read_full(fd, pre, want);
    if (got < want) {
        rc = baton__err_set(err, BATON_EIO, "%s: cannot read the .npy file: %s", path,
                            errno ? strerror(errno) : "it shrank while being read");
        goto out;
    }
    baton_tensor_desc td;
    size_t off;
    rc = baton__npy_parse(pre, got, size, path, &td, &off, err);
    if (rc)
        goto out;
    /* baton__npy_parse checked that the data is exactly the rest of the file, and that it fits */
    size_t bytes = (size_t)(size - off), have = got - off;
    buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        rc = baton__err_set(err, BATON_ENOMEM, "%s: cannot allocate %zu bytes for its data", path,
                            bytes);
        goto out;
    }
    memcpy(buf, pre + off, have);
    size_t rest = read_full(fd, (char *)buf + have, bytes - have);
    if (rest < bytes - have) {
        rc = baton__err_set(err, BATON_EIO, "%s: cannot read the .npy file's data: %s", path,
                            errno ? strerror(errno) : "it shrank while being read");
        goto out;
    }
    *desc = td;
    *data = buf;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    free(pre);
    close(fd);
    return rc;
}

size_t baton__npy_format_header(const baton_tensor_desc *desc, unsigned char *buf, size_t cap)
{
    const char *descr = NULL;
    for (size_t i = 0; i < N_TYPES && !descr; i++)
        if (npy_types[i].dt == desc->dtype)
            descr = npy_types[i].descr;
    int64_t numel = baton_tensor_desc_numel(desc);
    if (!descr || numel < 0 ||
        (uint64_t)numel > (uint64_t)INT64_MAX / baton_dtype_size(desc->dtype) || cap < 10)
        return 0;
    /* numpy's repr of the shape tuple: "(6,)", "(2, 3)", "()" */
    char dict[400];
    size_t n = (size_t)snprintf(dict, sizeof dict,
                                "{'descr': '%s', 'fortran_order': False, "
                                "'shape': (",
                                descr);
    for (int i = 0; i < desc->rank; i++)
        n += (size_t)snprintf(dict + n, sizeof dict - n, "%s%lld", i ? ", " : "",
                              (long long)desc->shape[i]);
    n += (size_t)snprintf(dict + n, sizeof dict - n, "%s), }", desc->rank == 1 ? "," : "");
    /* spaces so that magic + header is a multiple of 64 bytes, ending in '\n' */
    size_t total = 10 + n + 1;
    total += (64 - total % 64) % 64;
    if (total > cap)
        return 0;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)((total - 10) & 0xff);
    buf[9] = (unsigned char)((total - 10) >> 8);
    memcpy(buf + 10, dict, n);
    memset(buf + 10 + n, ' ', total - 10 - n - 1);
    buf[total - 1] = '\n';
    return total;
}

int baton_npy_write(const char *path, const baton_tensor_desc *desc, const void *data,
                    baton_error *err)
{
    err_clear(err);
    if (!path || !desc)
        return baton__err_set(err, BATON_EINVAL, "baton_npy_write: path and desc must not be NULL");
    unsigned char hdr[512];
    size_t hl = baton__npy_format_header(desc, hdr, sizeof hdr);
    if (!hl) {
        char shape[160] = "it";
        if (desc->rank >= 0 && desc->rank <= BATON_MAX_RANK)
            baton__desc_format(shape, sizeof shape, desc);
        return baton__err_set(err, BATON_EINVAL,
                              "%s: cannot write %s to .npy: the dtype must be one of baton's, the "
                              "rank 0 to %d, every dimension >= 0 and the size below 2^63 bytes",
                              path, shape, BATON_MAX_RANK);
    }
    size_t bytes = (size_t)baton_tensor_desc_numel(desc) * baton_dtype_size(desc->dtype);
    if (!data && bytes)
        return baton__err_set(err, BATON_EINVAL, "%s: baton_npy_write: data is NULL", path);
    FILE *f = fopen(path, "wb");
    if (!f)
        return baton__err_set(err, BATON_EIO, "%s: cannot create .npy file: %s", path,
                              strerror(errno));
    int ok = fwrite(hdr, 1, hl, f) == hl && (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok)
        return baton__err_set(err, BATON_EIO, "%s: write failed: %s", path, strerror(e));
    return 0;
}

int baton__plan_read_regular(const char *path, const char *what, char **text, size_t *len,
                             baton_error *err)
{
    /* only a regular file: a FIFO or device given as the path must not block or stream forever */
    uint64_t size;
    int fd = baton__plan_open_regular(path, what, &size, err);
    if (fd < 0)
        return fd;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return baton__err_set(err, BATON_ENOMEM, "%s: cannot open the %s: %s", path, what,
                              strerror(e));
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0)
            break;
    }
    int read_error = ferror(f);
    fclose(f);
    if (!buf)
        return baton__err_set(err, BATON_ENOMEM, "%s: out of memory reading the %s", path, what);
    if (read_error) {
        free(buf);
        return baton__err_set(err, BATON_EIO, "%s: cannot read the %s", path, what);
    }
    *text = buf;
    *len = n;
    return 0;
}
