/* encode.c: baton_tokenizer_encode, in the order `tokenizers` runs it: the added tokens split out
 * of the text (those matched in the raw text, then those matched in the normalized text), each
 * span between them normalized, cut into pieces by the pre-tokenizer, mapped to the byte-level
 * alphabet where the model has it and merged by the BPE model (bpe.c); then the post-processor's
 * template around the ids. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "text/tok_internal.h"
#include "text/unicode.h"

static const char SPACE[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's "▁" */

/* GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the others for U+0100
 * onwards in byte order: 0-32, then 127-160 (DEL, the C1 controls, NBSP), then 173 (the soft
 * hyphen) */
static uint32_t byte_char(unsigned b)
{
    if (b <= 32)
        return 256 + b;
    if (b >= 127 && b <= 160)
        return b + 162; /* 256 + 33 + (b - 127) */
    return b == 173 ? 323 : b;
}

typedef struct enc {
    const baton_tokenizer *t;
    tok_work w; /* the ids so far and the BPE model's working arrays */
    char *buf;  /* a piece's working text */
    size_t buf_cap;
    uint32_t *cp; /* a span's code points */
    size_t cp_cap;
    char *norm; /* a span's text after the NFC normalizer, where it changes it */
    size_t norm_cap;
    char msg[256];
    size_t span_at; /* the byte offset in the text of the span being encoded */
} enc;

int baton__tok_grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    if (c > SIZE_MAX / size)
        return BATON_ENOMEM;
    void *q = realloc(*p, c * size);
    if (!q)
        return BATON_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int baton__tok_push(tok_work *w, int64_t id)
{
    if (baton__tok_grow((void **)&w->ids, &w->cap, w->n + 1, sizeof *w->ids))
        return BATON_ENOMEM;
    w->ids[w->n++] = id;
    return 0;
}

static int push(enc *e, int64_t id)
{
    return baton__tok_push(&e->w, id);
}

/* A word through the BPE model */
static int word(enc *e, const char *s, size_t len)
{
    return baton__tok_bpe(e->t, s, len, &e->w, e->msg, sizeof e->msg);
}

/* A piece of the byte-level models: its bytes as the alphabet's characters, then BPE */
static int byte_level_word(enc *e, const char *s, size_t len)
{
    if (baton__tok_grow((void **)&e->buf, &e->buf_cap, 2 * len + 1, 1))
        return BATON_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < len; i++)
        k += (size_t)baton__utf8_put(byte_char((unsigned char)s[i]), e->buf + k);
    return word(e, e->buf, k);
}

/* A span of text between added tokens: normalized, pre-tokenized, merged. */
static int span(enc *e, const char *s, size_t len)
{
    const baton_tokenizer *t = e->t;
    if (len == 0)
        return 0;
    if (t->spm_replace || t->metaspace) {
        /* SentencePiece's: spaces as "▁", and a "▁" first where the normalizer prepends one (to
         * every span) or Metaspace does (to a span that has none: always, or the text's first
         * span only, the one at byte 0); then one word, or Metaspace's pieces, each from a "▁" */
        size_t spaces = 0;
        for (size_t i = 0; i < len; i++)
            spaces += s[i] == ' ';
        if (baton__tok_grow((void **)&e->buf, &e->buf_cap, len + 2 * spaces + 7, 1))
            return BATON_ENOMEM;
        char *b = e->buf;
        size_t k = 0;
        if (t->spm_prepend)
            memcpy(b + k, SPACE, 3), k += 3;
        for (size_t i = 0; i < len; i++)
            if (s[i] == ' ')
                memcpy(b + k, SPACE, 3), k += 3;
            else
                b[k++] = s[i];
        if (!t->metaspace)
            return word(e, b, k);
        if ((k < 3 || memcmp(b, SPACE, 3) != 0) &&
            (t->meta_prepend == META_ALWAYS ||
             (t->meta_prepend == META_FIRST && e->span_at == 0))) {
            memmove(b + 3, b, k);
            memcpy(b, SPACE, 3);
            k += 3;
        }
        if (!t->meta_split)
            return word(e, b, k);
        for (size_t i = 0; i < k;) {
            size_t j = i + 1;
            while (j < k && !(k - j >= 3 && memcmp(b + j, SPACE, 3) == 0))
                j++;
            int rc = word(e, b + i, j - i); /* bpe reads it and does not touch buf */
            if (rc)
                return rc;
            i = j;
        }
        return 0;
    }
    if (t->pattern == PAT_NONE && !t->digits)
        return t->byte_level ? byte_level_word(e, s, len) : word(e, s, len);
    /* the code points, and where each starts in s (the pieces are cut between code points) */
    if (baton__tok_grow((void **)&e->cp, &e->cp_cap, 2 * len + 1, sizeof *e->cp))
        return BATON_ENOMEM;
    uint32_t *cp = e->cp, *at = e->cp + len;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        at[n] = (uint32_t)i;
        baton__utf8_next(s, len, &i, &cp[n]); /* checked at the start */
        n++;
    }
    if (t->pattern == PAT_NONE && !t->digits)
        return t->byte_level ? byte_level_word(e, s, len) : word(e, s, len);
    for (size_t lo = 0; lo < n;) {
        /* the Digits pre-tokenizer's piece from lo: a run of numbers (each one alone where the
         * digits are individual) or of anything else; then the pattern's pieces inside it */
        size_t hi = n;
        if (t->digits) {
            const int num = baton__uni_is_number(cp[lo]);
            hi = lo + 1;
            if (!(num && t->digits == DIGITS_EACH))
                while (hi < n && baton__uni_is_number(cp[hi]) == num)
                    hi++;
        }
        for (size_t i = lo; i < hi;) {
            const size_t j = t->pattern == PAT_NONE
                                 ? hi
                                 : lo + baton__tok_piece_end(t->pattern, cp + lo, hi - lo, i - lo);
            const size_t b0 = at[i], b1 = j < n ? at[j] : len;
            int rc = t->byte_level ? byte_level_word(e, s + b0, b1 - b0) : word(e, s + b0, b1 - b0);
            if (rc)
                return rc;
            i = j;
        }
        lo = hi;
    }
    return 0;
}

/* The leftmost, longest added token (of the raw pass or the normalized one) in s, from `from`:
 * its index in t->added and start, or -1. */
static long next_added(const baton_tokenizer *t, const char *s, size_t len, size_t from,
                       int normalized, size_t *start)
{
    for (size_t i = from; i < len; i++) {
        if (!t->added_first[normalized][(unsigned char)s[i]]) /* no token starts with this byte */
            continue;
        for (size_t k = 0; k < t->n_added; k++) { /* longest first */
            const tok_added *a = &t->added[k];
            if (a->normalized == normalized && a->len <= len - i && s[i] == a->text[0] &&
                memcmp(s + i, a->text, a->len) == 0) {
                *start = i;
                return (long)k;
            }
        }
    }
    return -1;
}

/* s as the NFC normalizer leaves it, into *out (s itself where it is already NFC, as nearly all
 * text is; else e->norm) */
static int nfc(enc *e, const char *s, size_t len, const char **out, size_t *out_len)
{
    *out = s;
    *out_len = len;
    size_t n = 0, at;
    if (baton__tok_grow((void **)&e->cp, &e->cp_cap, 5 * len + 1, sizeof *e->cp))
        return BATON_ENOMEM;
    uint32_t *cp = e->cp, *norm = e->cp + len;
    for (size_t i = 0; i < len; n++)
        baton__utf8_next(s, len, &i, &cp[n]); /* checked at the start */
    if (baton__uni_nfc_stable(cp, n, &at) == 1)
        return 0;
    const size_t m = baton__uni_nfc(cp, n, norm);
    if (baton__tok_grow((void **)&e->norm, &e->norm_cap, 4 * m + 1, 1))
        return BATON_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        k += (size_t)baton__utf8_put(norm[i], e->norm + k);
    *out = e->norm;
    *out_len = k;
    return 0;
}

/* s normalized (NFC, where the tokenizer has it) and split by the normalized added tokens, the
 * spans between to span(), as `tokenizers` does: the whole span is normalized before the split. */
static int split_normalized(enc *e, const char *s, size_t len, size_t offset)
{
    if (e->t->nfc && len) {
        int rc = nfc(e, s, len, &s, &len);
        if (rc)
            return rc;
    }
    size_t i = 0, at;
    long k;
    while ((k = next_added(e->t, s, len, i, 1, &at)) >= 0) {
        e->span_at = offset + i;
        int rc = span(e, s + i, at - i);
        if (rc || (rc = push(e, e->t->added[k].id)))
            return rc;
        i = at + e->t->added[k].len;
    }
    e->span_at = offset + i;
    return span(e, s + i, len - i);
}

int baton_tokenizer_encode(const baton_tokenizer *t, const char *text, size_t len, int add_special,
                           int64_t *ids, size_t cap, size_t *n, baton_error *err)
{
    err_clear(err);
    if (!t || (!text && len) || (!ids && cap) || !n)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_tokenizer_encode: the tokenizer, the text and n are needed");
    *n = 0;
    if (len > UINT32_MAX) /* a span's offsets are 32-bit */
        return baton__err_set(err, BATON_EINVAL, "baton_tokenizer_encode: a text of 4 GiB or more");
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        if (baton__utf8_next(text, len, &i, &cp))
            return baton__err_set(err, BATON_EINVAL,
                                  "the text is not UTF-8 at byte %zu (0x%02X): %s encodes UTF-8 "
                                  "text",
                                  i, (unsigned char)text[i], t->path);
    }
    enc e;
    memset(&e, 0, sizeof e);
    e.t = t;
    int rc = 0;
    for (size_t i = 0; add_special && i < t->n_pre && !rc; i++)
        rc = push(&e, t->pre[i]);
    size_t i = 0, at;
    long k;
    while (!rc && (k = next_added(t, text, len, i, 0, &at)) >= 0) {
        rc = split_normalized(&e, text + i, at - i, i);
        if (!rc)
            rc = push(&e, t->added[k].id);
        i = at + t->added[k].len;
    }
    if (!rc)
        rc = split_normalized(&e, text + i, len - i, i);
    for (size_t j = 0; add_special && j < t->n_post && !rc; j++)
        rc = push(&e, t->post[j]);
    if (rc == BATON_ENOMEM)
        baton__err_set(err, rc, "baton_tokenizer_encode: out of memory");
    else if (rc)
        baton__err_set(err, rc, "%s: %s", t->path, e.msg);
    else {
        *n = e.w.n;
        if (cap && e.w.n)
            memcpy(ids, e.w.ids, (e.w.n < cap ? e.w.n : cap) * sizeof *ids);
        if (cap && e.w.n > cap)
            rc = baton__err_set(err, BATON_EINVAL,
                                "baton_tokenizer_encode: %zu ids do not fit the %zu given", e.w.n,
                                cap);
    }
    free(e.w.ids);
    free(e.w.sym);
    free(e.w.heap);
    free(e.buf);
    free(e.cp);
    free(e.norm);
    return rc;
}
