/* npy.c: reading and writing NumPy .npy files (format versions 1-3), the exchange format for
 * inputs, outputs and constants. Only little-endian, C-ordered arrays of baton's dtypes are
 * accepted. NumPy has no bfloat16: bf16 is stored as 2-byte void ('|V2'), which is what
 * ml_dtypes' bfloat16 arrays save as, so JAX users can np.save/np.load them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

static const struct {
    const char *descr;
    baton_dtype dt;
} npy_types[] = {
    {"<f4", BATON_DTYPE_F32},  {"<f8", BATON_DTYPE_F64}, {"<f2", BATON_DTYPE_F16},
    {"<i4", BATON_DTYPE_I32},  {"<i8", BATON_DTYPE_I64}, {"|V2", BATON_DTYPE_BF16},
    {"<V2", BATON_DTYPE_BF16},
};

/* Finds the value that follows 'key': in a header dict; returns a pointer past the colon. */
static const char *dict_value(const char *hdr, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p)
        return NULL;
    p = strchr(p + strlen(pat), ':');
    if (!p)
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

int baton_npy_read(const char *path, baton_tensor_desc *desc, void **data, baton_error *err)
{
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return baton_seterr(err, BATON_EIO, "%s: cannot open .npy file: %m", path);
    unsigned char pre[12];
    int rc = BATON_EIO;
    char *hdr = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        baton_seterr(err, BATON_EIO, "%s: not a .npy file (bad magic)", path);
        goto out;
    }
    size_t hlen;
    if (pre[6] == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            baton_seterr(err, BATON_EIO, "%s: truncated .npy header", path);
            goto out;
        }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        baton_seterr(err, BATON_EIO, "%s: unsupported .npy version %d", path, pre[6]);
        goto out;
    }
    if (hlen > 1 << 20) {
        baton_seterr(err, BATON_EIO, "%s: .npy header too large", path);
        goto out;
    }
    hdr = malloc(hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) {
        baton_seterr(err, BATON_EIO, "%s: truncated .npy header", path);
        goto out;
    }
    hdr[hlen] = 0;
    const char *d = dict_value(hdr, "descr");
    const char *fo = dict_value(hdr, "fortran_order");
    const char *sh = dict_value(hdr, "shape");
    if (!d || !fo || !sh || *d != '\'' || *sh != '(') {
        baton_seterr(err, BATON_EIO, "%s: malformed .npy header: %s", path, hdr);
        goto out;
    }
    if (strncmp(fo, "False", 5) != 0) {
        baton_seterr(err, BATON_EIO,
                     "%s: Fortran-ordered arrays are not supported; save with np.ascontiguousarray",
                     path);
        goto out;
    }
    baton_tensor_desc td = {0};
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++) {
        size_t l = strlen(npy_types[i].descr);
        if (strncmp(d + 1, npy_types[i].descr, l) == 0 && d[1 + l] == '\'')
            td.dtype = npy_types[i].dt;
    }
    if (!td.dtype) {
        const char *e = strchr(d + 1, '\'');
        baton_seterr(err, BATON_EIO,
                     "%s: dtype %.*s is not supported (use little-endian f2, f4, f8, i4, i8, or "
                     "bfloat16 as |V2)",
                     path, e ? (int)(e - d - 1) : 8, d + 1);
        goto out;
    }
    const char *p = sh + 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || td.rank == BATON_MAX_RANK) {
            baton_seterr(err, BATON_EIO, "%s: unsupported shape in .npy header: %s", path, hdr);
            goto out;
        }
        td.shape[td.rank++] = v;
        p = end;
    }
    int64_t numel = baton_tensor_desc_numel(&td);
    size_t bytes = (size_t)numel * baton_dtype_size(td.dtype);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        baton_seterr(err, BATON_ENOMEM, "%s: cannot allocate %zu bytes", path, bytes);
        rc = BATON_ENOMEM;
        goto out;
    }
    if (fread(buf, 1, bytes, f) != bytes) {
        free(buf);
        baton_seterr(err, BATON_EIO, "%s: file holds fewer than the %zu data bytes its header says",
                     path, bytes);
        goto out;
    }
    *desc = td;
    *data = buf;
    rc = 0;
out:
    free(hdr);
    fclose(f);
    return rc;
}

int baton_npy_write(const char *path, const baton_tensor_desc *desc, const void *data,
                    baton_error *err)
{
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0] && !descr; i++)
        if (npy_types[i].dt == desc->dtype)
            descr = npy_types[i].descr;
    if (!descr)
        return baton_seterr(err, BATON_EINVAL, "%s: cannot write dtype %s to .npy", path,
                            baton_dtype_name(desc->dtype));
    char shape[256];
    size_t n = 0;
    n += (size_t)snprintf(shape + n, sizeof shape - n, "(");
    for (int i = 0; i < desc->rank; i++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%lld,%s", (long long)desc->shape[i],
                              i + 1 < desc->rank ? " " : "");
    snprintf(shape + n, sizeof shape - n, ")");
    char hdr[512];
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      descr, shape);
    /* Pad with spaces so that magic + header is a multiple of 64 bytes, ending in '\n'. */
    int total = 10 + hl + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f)
        return baton_seterr(err, BATON_EIO, "%s: cannot create .npy file: %m", path);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    int len = hl + pad + 1;
    pre[8] = (unsigned char)(len & 0xff);
    pre[9] = (unsigned char)(len >> 8);
    size_t bytes = (size_t)baton_tensor_desc_numel(desc) * baton_dtype_size(desc->dtype);
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)hl, f) == (size_t)hl;
    for (int i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && fwrite(data, 1, bytes, f) == bytes;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok)
        return baton_seterr(err, BATON_EIO, "%s: write failed: %m", path);
    return 0;
}
