/* bpe.c: the BPE model: a word's characters as tokens, merged pair by pair in the order of the
 * merges' ranks, the lowest rank first and the leftmost of equal ranks first, as `tokenizers`
 * merges (a heap of candidate pairs, each checked again when it comes out, since a merge beside
 * it may have taken one of its halves). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "text/tok_internal.h"
#include "text/unicode.h"

uint64_t baton__tok_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

int64_t baton__tok_vocab_get(const baton_tokenizer *t, const char *s, size_t len)
{
    if (!t->vocab.slot)
        return -1;
    for (size_t i = baton__tok_hash(s, len) & t->vocab.mask;; i = (i + 1) & t->vocab.mask) {
        const int64_t v = t->vocab.slot[i];
        if (v == 0)
            return -1;
        const int64_t id = v - 1;
        if (t->len[id] == len && memcmp(t->text[id], s, len) == 0)
            return id;
    }
}

tok_merge *baton__tok_merge_slot(const baton_tokenizer *t, int64_t left, int64_t right)
{
    uint64_t h = (uint64_t)left * 0x9E3779B97F4A7C15ull ^ (uint64_t)right * 0xC2B2AE3D27D4EB4Full;
    for (size_t i = (h ^ h >> 29) & t->merges_mask;; i = (i + 1) & t->merges_mask) {
        tok_merge *m = &t->merges[i];
        if (m->left < 0 || (m->left == left && m->right == right))
            return m;
    }
}

/* The symbols of a word: a doubly linked list over an array (len 0: merged away) */
typedef struct sym {
    int64_t id;
    long prev, next;
    size_t len;
} sym;

/* A candidate merge: the pair starting at symbol pos, its rank and the id it makes */
typedef struct cand {
    int64_t rank, merged;
    long pos;
} cand;

static int cand_less(const cand *a, const cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < *n && cand_less(&h[l], best))
            m = l, best = &h[l];
        if (r < *n && cand_less(&h[r], best))
            m = r;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* Pushes the pair starting at symbol i where the merges have it. */
static void consider(const baton_tokenizer *t, const sym *s, long i, cand *h, size_t *nh)
{
    if (i < 0 || s[i].next < 0)
        return;
    const tok_merge *m = baton__tok_merge_slot(t, s[i].id, s[s[i].next].id);
    if (m->left >= 0)
        heap_push(h, nh, (cand){m->rank, m->merged, i});
}

int baton__tok_bpe(const baton_tokenizer *t, const char *word, size_t len, tok_work *w, char *msg,
                   size_t msglen)
{
    if (len == 0)
        return 0;
    int64_t whole = t->ignore_merges ? baton__tok_vocab_get(t, word, len) : -1;
    if (whole >= 0)
        return baton__tok_push(w, whole);
    /* at most one symbol a byte (byte fallback gives a character's bytes one each), and ns - 1
     * candidate pairs, then 2 a merge */
    if (baton__tok_grow(&w->sym, &w->sym_cap, len, sizeof(sym)) ||
        baton__tok_grow(&w->heap, &w->heap_cap, 3 * len + 1, sizeof(cand)))
        return BATON_ENOMEM;
    sym *s = w->sym;
    cand *h = w->heap;
    int rc = 0;
    long ns = 0;
    int last_unk = 0; /* the last symbol is the unknown token of unknown characters */
    for (size_t i = 0; i < len;) {
        size_t j = i;
        uint32_t cp;
        if (baton__utf8_next(word, len, &j, &cp)) { /* the caller's text was checked */
            return baton__reason_set(msg, msglen, BATON_EINVAL, "not UTF-8");
        }
        int64_t id = baton__tok_vocab_get(t, word + i, j - i);
        int fell_back = 0;
        if (id < 0 && t->byte_fallback) {
            /* the character's bytes as <0xNN> tokens, where each has one */
            int all = 1;
            for (size_t k = i; k < j; k++)
                all &= t->byte_id[(unsigned char)word[k]] >= 0;
            for (size_t k = i; all && k < j; k++, ns++)
                s[ns] = (sym){t->byte_id[(unsigned char)word[k]], ns - 1, -1, 1};
            fell_back = all;
        }
        if (id >= 0) {
            s[ns] = (sym){id, ns - 1, -1, j - i};
            ns++;
            last_unk = 0;
        } else if (fell_back) {
            last_unk = 0;
        } else if (t->unk < 0) {
            return baton__reason_set(msg, msglen, BATON_EINVAL,
                                     "the character U+%04X has no token, and the model has no "
                                     "unknown token",
                                     (unsigned)cp);
        } else if (t->fuse_unk && last_unk) { /* consecutive unknown characters: one token */
            s[ns - 1].len += j - i;
        } else {
            s[ns] = (sym){t->unk, ns - 1, -1, j - i};
            ns++;
            last_unk = 1;
        }
        i = j;
    }
    for (long k = 0; k + 1 < ns; k++)
        s[k].next = k + 1;
    size_t nh = 0;
    for (long k = 0; k + 1 < ns; k++)
        consider(t, s, k, h, &nh);
    while (nh > 0) {
        const cand c = heap_pop(h, &nh);
        const sym *a = &s[c.pos];
        if (a->len == 0 || a->next < 0)
            continue;
        const tok_merge *m = baton__tok_merge_slot(t, a->id, s[a->next].id);
        if (m->left < 0 || m->merged != c.merged) /* a half went to another merge */
            continue;
        const long r = a->next;
        s[c.pos].id = c.merged;
        s[c.pos].len += s[r].len;
        s[c.pos].next = s[r].next;
        s[r].len = 0;
        if (s[r].next >= 0)
            s[s[r].next].prev = c.pos;
        consider(t, s, s[c.pos].prev, h, &nh);
        consider(t, s, c.pos, h, &nh);
    }
    for (long k = 0; k >= 0 && k < ns; k = s[k].next)
        if ((rc = baton__tok_push(w, s[k].id)) != 0)
            break;
    return rc;
}
