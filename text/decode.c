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
 * subpart"), at least 1: what one U+FFFD replaces, as Rust's String::from_utf8_lossy does. *open:
 * that prefix is all of s and a sequence's beginning, so that bytes after s may complete it. */
static size_t maximal_subpart(const unsigned char *s, size_t len, int *open)
{
    const unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
    *open = 0;
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
    *open = k == len && k <= need;
    return k; /* a whole sequence is not asked for here: the caller found it invalid */
}

/* The bytes of s as UTF-8 into o, each maximal invalid subpart as one U+FFFD, up to a tail that
 * later bytes may still complete into a character unless last: the count of bytes taken. */
static int put_lossy(out *o, const char *s, size_t len, int last, size_t *taken)
{
    int rc = 0;
    size_t i = 0;
    while (i < len && !rc) {
        size_t j = i;
        uint32_t cp;
        if (baton__utf8_next(s, len, &j, &cp) == 0) {
            rc = put(o, s + i, j - i);
            i = j;
            continue;
        }
        int open;
        const size_t k = maximal_subpart((const unsigned char *)s + i, len - i, &open);
        if (open && !last)
            break;
        rc = put(o, REPLACEMENT, 3);
        i += k;
    }
    *taken = i;
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

/* A decode in progress, shared by baton_tokenizer_decode (all ids, then finish) and the
 * incremental decoder (an id at a time): the text the ids so far have settled, and what the next
 * ids may still change. */
struct baton_tokenizer_decoder {
    const baton_tokenizer *tok;
    int skip_special;
    out text;    /* settled, not yet handed out */
    out pending; /* byte-level: the bytes of a character not yet complete (at most 3 after a
                  * step); SentencePiece: the run of byte tokens, settled by the next other token */
    size_t run;  /* SentencePiece: the byte tokens in pending */
    int started; /* text has been settled (the decoder's strip of the first space is behind) */
};

/* The text's first settled byte, when it is a space and the decoder strips one (Strip(" ", 1, 0)
 * of SentencePiece's): dropped. */
static void strip_first(baton_tokenizer_decoder *d)
{
    if (d->started || d->text.n == 0)
        return;
    d->started = 1;
    if (d->tok->spm_strip && d->text.s[0] == ' ')
        memmove(d->text.s, d->text.s + 1, --d->text.n);
}

/* id's text into the decode: 0 or BATON_ENOMEM. The id is not negative. */
static int dec_step(baton_tokenizer_decoder *d, int64_t id)
{
    const baton_tokenizer *t = d->tok;
    /* an id without a token (a model's vocabulary padded past its tokenizer's) is left out, as
     * `tokenizers` leaves it out */
    if (id >= t->n_ids || !t->text[id] || (d->skip_special && t->is_special[id]))
        return 0;
    const char *s = t->text[id];
    const size_t sl = t->len[id];
    const int b = t->spm_decoder ? byte_token(s, sl) : -1;
    int rc;
    if (!t->spm_decoder) {
        size_t taken;
        if ((rc = byte_level_token(&d->pending, s, sl)) != 0 ||
            (rc = put_lossy(&d->text, d->pending.s, d->pending.n, 0, &taken)) != 0)
            return rc;
        memmove(d->pending.s, d->pending.s + taken, d->pending.n - taken);
        d->pending.n -= taken;
    } else if (b >= 0) {
        const unsigned char c = (unsigned char)b;
        if ((rc = put(&d->pending, &c, 1)) != 0)
            return rc;
        d->run++;
        return 0;
    } else {
        if (d->run && (rc = flush_bytes(&d->text, &d->pending, d->run)) != 0)
            return rc;
        d->run = 0;
        if ((rc = put_spaced(&d->text, s, sl)) != 0)
            return rc;
    }
    strip_first(d);
    return 0;
}

/* What no later id can change any more, settled: 0 or BATON_ENOMEM. */
static int dec_finish(baton_tokenizer_decoder *d)
{
    int rc = 0;
    if (d->tok->spm_decoder && d->run)
        rc = flush_bytes(&d->text, &d->pending, d->run);
    else if (!d->tok->spm_decoder && d->pending.n) {
        size_t taken;
        rc = put_lossy(&d->text, d->pending.s, d->pending.n, 1, &taken);
    }
    d->run = 0;
    d->pending.n = 0;
    if (!rc)
        strip_first(d);
    return rc;
}

/* d's settled text NUL-terminated, for handing out: 0 or BATON_ENOMEM */
static int terminate(baton_tokenizer_decoder *d)
{
    if (baton__tok_grow((void **)&d->text.s, &d->text.cap, d->text.n + 1, 1))
        return BATON_ENOMEM;
    d->text.s[d->text.n] = 0;
    return 0;
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
    baton_tokenizer_decoder d = {.tok = t, .skip_special = skip_special};
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = dec_step(&d, ids[i]);
    if (!rc)
        rc = dec_finish(&d);
    if (rc) {
        baton__err_set(err, rc, "baton_tokenizer_decode: out of memory");
    } else {
        *len = d.text.n;
        if (cap) {
            const size_t k = d.text.n < cap ? d.text.n : cap - 1;
            if (k)
                memcpy(text, d.text.s, k);
            text[k] = 0;
        }
        if (cap && d.text.n >= cap)
            rc = baton__err_set(err, BATON_EINVAL,
                                "baton_tokenizer_decode: %zu bytes and the NUL do not fit the %zu "
                                "given",
                                d.text.n, cap);
    }
    free(d.text.s);
    free(d.pending.s);
    return rc;
}

int baton_tokenizer_decoder_create(const baton_tokenizer *tok, int skip_special,
                                   baton_tokenizer_decoder **out_dec, baton_error *err)
{
    err_clear(err);
    if (!tok || !out_dec)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_tokenizer_decoder_create: the tokenizer and out are needed");
    *out_dec = NULL;
    baton_tokenizer_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return baton__err_set(err, BATON_ENOMEM, "baton_tokenizer_decoder_create: out of memory");
    d->tok = tok;
    d->skip_special = skip_special != 0;
    *out_dec = d;
    return 0;
}

void baton_tokenizer_decoder_destroy(baton_tokenizer_decoder *d)
{
    if (!d)
        return;
    free(d->text.s);
    free(d->pending.s);
    free(d);
}

int baton_tokenizer_decoder_push(baton_tokenizer_decoder *d, int64_t id, const char **text,
                                 size_t *len, baton_error *err)
{
    err_clear(err);
    if (!d || !text || !len)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_tokenizer_decoder_push: the decoder, text and len are needed");
    *text = "";
    *len = 0;
    if (id < 0)
        return baton__err_set(err, BATON_EINVAL, "id %lld is negative: no token", (long long)id);
    d->text.n = 0;
    int rc = dec_step(d, id);
    if (!rc)
        rc = terminate(d);
    if (rc) { /* the decode cannot go on consistently: start again */
        d->text.n = d->pending.n = d->run = 0;
        d->started = 0;
        return baton__err_set(err, rc, "baton_tokenizer_decoder_push: out of memory");
    }
    *text = d->text.s;
    *len = d->text.n;
    return 0;
}

int baton_tokenizer_decoder_finish(baton_tokenizer_decoder *d, const char **text, size_t *len,
                                   baton_error *err)
{
    err_clear(err);
    if (!d || !text || !len)
        return baton__err_set(
            err, BATON_EINVAL,
            "baton_tokenizer_decoder_finish: the decoder, text and len are needed");
    *text = "";
    *len = 0;
    d->text.n = 0;
    int rc = dec_finish(d);
    if (!rc)
        rc = terminate(d);
    d->started = 0; /* the next push begins a new text */
    if (rc) {
        d->text.n = 0;
        return baton__err_set(err, rc, "baton_tokenizer_decoder_finish: out of memory");
    }
    *text = d->text.s;
    *len = d->text.n;
    return 0;
}
