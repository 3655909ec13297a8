/* decode.c: baton_tokenizer_decode: the ids' texts through the decoder, as `tokenizers` decodes:
 * byte-level (each token's characters back to their bytes, then the bytes as UTF-8 with U+FFFD
 * for what is not), or SentencePiece's (spaces for "▁", <0xNN> runs as bytes, one U+FFFD a byte
 * where a run is not UTF-8, and the first space of the text stripped). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "text/tok_internal.h"
#include "text/unicode.h"

typedef struct out {
    char *s;
    size_t n, cap;
} out;

static int put(out *o, const void *p, size_t len)
{
    if (baton__tok_grow((void **)&o->s, &o->cap, o->n + len + 1, 1)) /* and the NUL */
        return BATON_ENOMEM;
    memcpy(o->s + o->n, p, len);
    o->n += len;
    return 0;
}

static const char REPLACEMENT[] = "\xef\xbf\xbd"; /* U+FFFD */

/* The length of the longest prefix of s that could begin a UTF-8 sequence (Unicode's "maximal
 * subpart"), at least 1: what one U+FFFD replaces, as Rust's String::from_utf8_lossy does. */
static size_t maximal_subpart(const unsigned char *s, size_t len)
{
    const unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 1;
    size_t k = 1;
    while (k <= need && k < len && s[k] >= (k == 1 ? lo : 0x80) && s[k] <= (k == 1 ? hi : 0xBF))
        k++;
    return k; /* a whole sequence is not asked for here: the caller found it invalid */
}

/* bytes as UTF-8, each maximal invalid subpart as one U+FFFD */
static int put_lossy(out *o, const char *s, size_t len)
{
    int rc = 0;
    for (size_t i = 0; i < len && !rc;) {
        size_t j = i;
        uint32_t cp;
        if (baton__utf8_next(s, len, &j, &cp) == 0) {
            rc = put(o, s + i, j - i);
            i = j;
        } else {
            rc = put(o, REPLACEMENT, 3);
            i += maximal_subpart((const unsigned char *)s + i, len - i);
        }
    }
    return rc;
}

/* The byte a character of the byte-level alphabet stands for, or -1 (encode.c's byte_char
 * inverted) */
static int char_byte(uint32_t c)
{
    if ((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))
        return (int)c;
    if (c >= 256 && c <= 288)
        return (int)(c - 256);
    if (c >= 289 && c <= 322)
        return (int)(c - 162);
    return c == 323 ? 173 : -1;
}

/* A token's text as the byte-level alphabet's bytes, or as it is where a character is not of
 * the alphabet (added tokens spelled in plain text). */
static int byte_level_token(out *bytes, const char *s, size_t len)
{
    const size_t mark = bytes->n;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int b;
        if (baton__utf8_next(s, len, &i, &cp) || (b = char_byte(cp)) < 0) {
            bytes->n = mark;
            return put(bytes, s, len);
        }
        const unsigned char c = (unsigned char)b;
        if (put(bytes, &c, 1))
            return BATON_ENOMEM;
    }
    return 0;
}

/* <0xNN> (either case of hex digit, as ByteFallback reads it): the byte, or -1 */
static int byte_token(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        const char c = s[k];
        const int d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A run of byte tokens: their bytes where they are UTF-8, else one U+FFFD a byte */
static int flush_bytes(out *o, out *run, size_t count)
{
    int rc = 0;
    size_t i = 0;
    uint32_t cp;
    while (i < run->n && baton__utf8_next(run->s, run->n, &i, &cp) == 0)
        ;
    if (i == run->n)
        rc = put(o, run->s, run->n);
    else
        for (size_t k = 0; k < count && !rc; k++)
            rc = put(o, REPLACEMENT, 3);
    run->n = 0;
    return rc;
}

/* A token's text with "▁" as a space */
static int put_spaced(out *o, const char *s, size_t len)
{
    int rc = 0;
    for (size_t i = 0; i < len && !rc;) {
        if (len - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
            rc = put(o, " ", 1);
            i += 3;
        } else {
            rc = put(o, s + i, 1);
            i++;
        }
    }
    return rc;
}

int baton_tokenizer_decode(const baton_tokenizer *t, const int64_t *ids, size_t n, int skip_special,
                           char *text, size_t cap, size_t *len, baton_error *err)
{
    err_clear(err);
    if (!t || (!ids && n) || (!text && cap) || !len)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_tokenizer_decode: the tokenizer, the ids and len are needed");
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return baton__err_set(err, BATON_EINVAL, "id %lld (at %zu) is negative: no token",
                                  (long long)ids[i], i);
    out o = {0}, tmp = {0};
    size_t run = 0; /* byte tokens in tmp (SentencePiece) */
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const int64_t id = ids[i];
        /* an id without a token (a model's vocabulary padded past its tokenizer's) is left out,
         * as `tokenizers` leaves it out */
        if (id >= t->n_ids || !t->text[id] || (skip_special && t->is_special[id]))
            continue;
        const char *s = t->text[id];
        const size_t sl = t->len[id];
        if (!t->spm_decoder) {
            rc = byte_level_token(&tmp, s, sl);
            continue;
        }
        const int b = byte_token(s, sl);
        if (b >= 0) {
            const unsigned char c = (unsigned char)b;
            rc = put(&tmp, &c, 1);
            run++;
            continue;
        }
        if (run && (rc = flush_bytes(&o, &tmp, run)) != 0)
            break;
        run = 0;
        rc = put_spaced(&o, s, sl);
    }
    if (!rc && t->spm_decoder && run)
        rc = flush_bytes(&o, &tmp, run);
    if (!rc && !t->spm_decoder)
        rc = put_lossy(&o, tmp.s, tmp.n);
    if (!rc && o.n == 0)
        rc = put(&o, "", 0);
    const char *body = o.s;
    size_t bl = o.n;
    if (!rc && t->spm_strip && bl > 0 && body[0] == ' ') { /* Strip(" ", 1, 0) */
        body++;
        bl--;
    }
    if (rc) {
        baton__err_set(err, rc, "baton_tokenizer_decode: out of memory");
    } else {
        *len = bl;
        if (cap) {
            const size_t k = bl < cap ? bl : cap - 1;
            memcpy(text, body, k);
            text[k] = 0;
        }
        if (cap && bl >= cap)
            rc = baton__err_set(err, BATON_EINVAL,
                                "baton_tokenizer_decode: %zu bytes and the NUL do not fit the %zu "
                                "given",
                                bl, cap);
    }
    free(o.s);
    free(tmp.s);
    return rc;
}
