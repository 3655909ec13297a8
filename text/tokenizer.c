/* tokenizer.c: a Hugging Face tokenizer.json read into a baton_tokenizer (tok_internal.h): the
 * BPE model's vocabulary and merges, the added tokens, and which of the known normalizers,
 * pre-tokenizers, post-processors and decoders it names. Anything else is refused here, at load,
 * naming the file, the line and column and what is not supported, so that encode and decode never
 * give an answer other than the `tokenizers` library's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "text/load.h"
#include "text/tok_internal.h"

/* The two patterns of Split pre-tokenizers this implementation runs (pretok.c), as
 * tokenizer.json spells them */
static const char LLAMA3_RE[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char SPM_SPACE[] = "\xe2\x96\x81"; /* U+2581 LOWER ONE EIGHTH BLOCK, "▁" */

typedef text_file loader;

/* The "type" of an optional part (the normalizer, pre-tokenizer, ...) at node into *type: 1, 0
 * where the part is absent or null, or BATON_EPLAN after a refusal (no "type" string). */
static int part_type(loader *L, int node, const char *what, const char **type)
{
    if (node < 0 || jis(&L->doc, node, J_NULL))
        return 0;
    *type = text_str(L, text_get(L, node, "type"));
    return *type ? 1 : baton__text_fail(L, node, BATON_EPLAN, "%s has no \"type\" string", what);
}

/* A boolean field that must have the value `want` where present. */
static int flag_is(loader *L, int obj, const char *key, int want, const char *what)
{
    int n = text_get(L, obj, key);
    if (n < 0 || jis(&L->doc, n, J_NULL))
        return 0;
    int v = jis(&L->doc, n, J_TRUE);
    if (!v && !jis(&L->doc, n, J_FALSE))
        return baton__text_fail(L, n, BATON_EPLAN, "%s's \"%s\" must be true or false", what, key);
    if (v != want)
        return baton__text_fail(L, n, BATON_ENOTSUP,
                                "%s with \"%s\": %s is not supported (only %s)", what, key,
                                v ? "true" : "false", want ? "true" : "false");
    return 0;
}

/* A field that must be null, absent or the empty string. */
static int unset(loader *L, int obj, const char *key, const char *what)
{
    int n = text_get(L, obj, key);
    if (n < 0 || jis(&L->doc, n, J_NULL) || (jis(&L->doc, n, J_STRING) && L->doc.v[n].len == 0))
        return 0;
    return baton__text_fail(L, n, BATON_ENOTSUP, "%s with a \"%s\" is not supported", what, key);
}

static int set_text(baton_tokenizer *t, int64_t id, const char *s, size_t len)
{
    char *c = malloc(len + 1);
    if (!c)
        return BATON_ENOMEM;
    memcpy(c, s, len);
    c[len] = 0;
    free(t->text[id]);
    t->text[id] = c;
    t->len[id] = len;
    return 0;
}

static size_t pow2_above(size_t n)
{
    size_t p = 16;
    while (p < 2 * n)
        p *= 2;
    return p;
}

/* The model: vocabulary, merges and options. */
static int load_model(loader *L, baton_tokenizer *t, int model, int64_t max_added, int64_t n_added)
{
    const char *type = text_str(L, text_get(L, model, "type"));
    if (type && strcmp(type, "BPE") != 0)
        return baton__text_fail(
            L, model, BATON_ENOTSUP,
            "the model type \"%s\" is not supported: baton reads BPE models (GPT-2, "
            "Llama, Qwen, Mistral and their kin)",
            type);
    int rc;
    if ((rc = unset(L, model, "continuing_subword_prefix", "a BPE model")) ||
        (rc = unset(L, model, "end_of_word_suffix", "a BPE model")))
        return rc;
    int d = text_get(L, model, "dropout");
    if (d >= 0 && !jis(&L->doc, d, J_NULL) && !(jis_number(&L->doc, d) && L->doc.v[d].f == 0))
        return baton__text_fail(L, d, BATON_ENOTSUP,
                                "BPE dropout is not supported (a tokenizer for "
                                "inference has \"dropout\": null)");
    const int vocab = text_get(L, model, "vocab");
    const int merges = text_get(L, model, "merges");
    if (!jis(&L->doc, vocab, J_OBJECT))
        return baton__text_fail(L, vocab < 0 ? model : vocab, BATON_EPLAN,
                                "the model's \"vocab\" must be an object of token: id");
    if (merges >= 0 && !jis(&L->doc, merges, J_ARRAY))
        return baton__text_fail(L, merges, BATON_EPLAN, "the model's \"merges\" must be an array");
    t->fuse_unk = jis(&L->doc, text_get(L, model, "fuse_unk"), J_TRUE);
    t->byte_fallback = jis(&L->doc, text_get(L, model, "byte_fallback"), J_TRUE);
    t->ignore_merges = jis(&L->doc, text_get(L, model, "ignore_merges"), J_TRUE);
    /* the ids' range: the vocabulary's and the added tokens' */
    int64_t n_ids = max_added + 1;
    for (int c = L->doc.v[vocab].first; c >= 0; c = L->doc.v[c].next) {
        if (!jis(&L->doc, c, J_INT) || L->doc.v[c].i < 0 || L->doc.v[c].i >= (1LL << 31))
            return baton__text_fail(L, c, BATON_EPLAN,
                                    "the id of \"%s\" must be an integer in [0, 2^31)",
                                    L->doc.v[c].key);
        if (L->doc.v[c].i + 1 > n_ids)
            n_ids = L->doc.v[c].i + 1;
    }
    /* the ids are dense in every real file: a few far ids would size the tables by the largest */
    const int64_t n_tokens = (int64_t)L->doc.v[vocab].n + n_added;
    if (n_ids > 2 * n_tokens + 1024)
        return baton__text_fail(
            L, vocab, BATON_EPLAN,
            "the largest id, %lld, is far past the %lld tokens: a tokenizer's ids run from "
            "0 with few gaps",
            (long long)n_ids - 1, (long long)n_tokens);
    t->n_ids = n_ids;
    t->text = calloc((size_t)n_ids, sizeof *t->text);
    t->len = calloc((size_t)n_ids, sizeof *t->len);
    t->is_special = calloc((size_t)n_ids, 1);
    const size_t nv = (size_t)L->doc.v[vocab].n;
    t->vocab.mask = pow2_above(nv) - 1;
    t->vocab.slot = calloc(t->vocab.mask + 1, sizeof *t->vocab.slot);
    if (!t->text || !t->len || !t->is_special || !t->vocab.slot)
        return BATON_ENOMEM;
    for (int c = L->doc.v[vocab].first; c >= 0; c = L->doc.v[c].next) {
        const int64_t id = L->doc.v[c].i;
        const char *k = L->doc.v[c].key;
        const size_t len = strlen(k);
        if (t->text[id])
            return baton__text_fail(L, c, BATON_EPLAN,
                                    "the id %lld of \"%s\" is also that of \"%s\"", (long long)id,
                                    k, t->text[id]);
        if (set_text(t, id, k, len))
            return BATON_ENOMEM;
        size_t i = baton__tok_hash(k, len) & t->vocab.mask;
        while (t->vocab.slot[i])
            i = (i + 1) & t->vocab.mask;
        t->vocab.slot[i] = id + 1;
    }
    /* the unknown token, the byte tokens */
    t->unk = -1;
    const int unk = text_get(L, model, "unk_token");
    if (jis(&L->doc, unk, J_STRING)) {
        t->unk = baton__tok_vocab_get(t, L->doc.v[unk].s, L->doc.v[unk].len);
        if (t->unk < 0)
            return baton__text_fail(L, unk, BATON_EPLAN,
                                    "the unknown token \"%s\" is not in the vocabulary",
                                    L->doc.v[unk].s);
    } else if (unk >= 0 && !jis(&L->doc, unk, J_NULL)) {
        return baton__text_fail(L, unk, BATON_EPLAN, "\"unk_token\" must be a string or null");
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = t->byte_fallback ? baton__tok_vocab_get(t, name, 6) : -1;
    }
    /* the merges: "left right" strings or [left, right] pairs, ranked by their order */
    const size_t nm = merges < 0 ? 0 : (size_t)L->doc.v[merges].n;
    t->merges_mask = pow2_above(nm) - 1;
    t->merges = malloc((t->merges_mask + 1) * sizeof *t->merges);
    if (!t->merges)
        return BATON_ENOMEM;
    for (size_t i = 0; i <= t->merges_mask; i++)
        t->merges[i].left = -1;
    char *buf = NULL;
    size_t cap = 0;
    int64_t rank = 0;
    rc = 0;
    for (int c = merges < 0 ? -1 : L->doc.v[merges].first; c >= 0 && !rc;
         c = L->doc.v[c].next, rank++) {
        const char *a, *b;
        size_t la, lb;
        const jnode *m = &L->doc.v[c];
        if (m->type == J_STRING) {
            const char *sp = strchr(m->s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                rc = baton__text_fail(L, c, BATON_EPLAN,
                                      "a merge must be \"left right\" (one space)");
                break;
            }
            a = m->s, la = (size_t)(sp - m->s), b = sp + 1, lb = m->len - la - 1;
        } else if (m->type == J_ARRAY && m->n == 2 && jis(&L->doc, m->first, J_STRING) &&
                   jis(&L->doc, L->doc.v[m->first].next, J_STRING)) {
            const jnode *x = &L->doc.v[m->first], *y = &L->doc.v[x->next];
            a = x->s, la = x->len, b = y->s, lb = y->len;
        } else {
            rc = baton__text_fail(L, c, BATON_EPLAN,
                                  "a merge must be \"left right\" or [left, right]");
            break;
        }
        const int64_t l = baton__tok_vocab_get(t, a, la), r = baton__tok_vocab_get(t, b, lb);
        if (la + lb + 1 > cap) {
            cap = 2 * (la + lb + 1);
            char *p = realloc(buf, cap);
            if (!p) {
                rc = BATON_ENOMEM;
                break;
            }
            buf = p;
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        const int64_t mid = baton__tok_vocab_get(t, buf, la + lb);
        if (l < 0 || r < 0 || mid < 0) {
            rc = baton__text_fail(L, c, BATON_EPLAN,
                                  "the merge of \"%.*s\" and \"%.*s\": %s is not in the "
                                  "vocabulary",
                                  (int)la, a, (int)lb, b,
                                  l < 0   ? "the left"
                                  : r < 0 ? "the right"
                                          : "the result");
            break;
        }
        tok_merge *slot = baton__tok_merge_slot(t, l, r);
        if (slot->left < 0) /* a repeated pair keeps its first rank, as `tokenizers` */
            *slot = (tok_merge){l, r, rank, mid};
    }
    free(buf);
    return rc;
}

/* The added tokens: ids and texts, which are special; none with options that change matching. */
static int load_added(loader *L, baton_tokenizer *t, int added, int64_t n_vocab)
{
    int64_t max_ids = -1, *max_id = &max_ids;
    size_t n = 0;
    for (int c = added < 0 ? -1 : L->doc.v[added].first; c >= 0; c = L->doc.v[c].next)
        n++;
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added)
        return BATON_ENOMEM;
    for (int c = added < 0 ? -1 : L->doc.v[added].first; c >= 0; c = L->doc.v[c].next) {
        const int id = text_get(L, c, "id"), content = text_get(L, c, "content");
        if (!jis(&L->doc, id, J_INT) || L->doc.v[id].i < 0 || L->doc.v[id].i >= t->n_ids ||
            !jis(&L->doc, content, J_STRING) || L->doc.v[content].len == 0)
            return baton__text_fail(
                L, c, BATON_EPLAN,
                "an added token needs an \"id\" (an integer >= 0) and a non-empty "
                "\"content\" string");
        int rc;
        if ((rc = flag_is(L, c, "lstrip", 0, "an added token")) ||
            (rc = flag_is(L, c, "rstrip", 0, "an added token")) ||
            (rc = flag_is(L, c, "single_word", 0, "an added token")))
            return rc;
        const int norm = jis(&L->doc, text_get(L, c, "normalized"), J_TRUE);
        if (norm && t->spm_replace)
            return baton__text_fail(
                L, c, BATON_ENOTSUP,
                "an added token with \"normalized\": true under the \"▁\" normalizer "
                "is not supported");
        const int64_t i = L->doc.v[id].i;
        /* `tokenizers` does not read an added token's id: it gives the vocabulary's id of the
         * same text, or the next after the vocabulary and the added tokens before; a file whose
         * ids differ would encode to other ids there */
        int64_t want = baton__tok_vocab_get(t, L->doc.v[content].s, L->doc.v[content].len);
        for (size_t k = 0; want < 0 && k < t->n_added; k++)
            if (t->added[k].len == L->doc.v[content].len &&
                memcmp(t->added[k].text, L->doc.v[content].s, t->added[k].len) == 0)
                want = t->added[k].id;
        if (want < 0)
            want = *max_id < 0 || *max_id < n_vocab ? n_vocab : *max_id + 1;
        if (i != want)
            return baton__text_fail(
                L, id, BATON_EPLAN,
                "the added token \"%s\" has id %lld where the tokenizers library gives "
                "it %lld (the vocabulary's id of the text, else the next free one): the "
                "file is inconsistent",
                L->doc.v[content].s, (long long)i, (long long)want);
        if (i > *max_id)
            *max_id = i;
        if (set_text(t, i, L->doc.v[content].s, L->doc.v[content].len))
            return BATON_ENOMEM;
        t->is_special[i] = jis(&L->doc, text_get(L, c, "special"), J_TRUE);
        t->added[t->n_added++] = (tok_added){i, t->text[i], t->len[i], t->is_special[i], norm};
    }
    return 0;
}

/* Replace(" ", "▁") */
static int is_space_replace(loader *L, int n)
{
    const char *type = text_str(L, text_get(L, n, "type"));
    const char *pat = text_str(L, text_get(L, text_get(L, n, "pattern"), "String"));
    const char *to = text_str(L, text_get(L, n, "content"));
    return type && pat && to && strcmp(type, "Replace") == 0 && strcmp(pat, " ") == 0 &&
           strcmp(to, SPM_SPACE) == 0;
}

static int load_normalizer(loader *L, baton_tokenizer *t, int n)
{
    const char *type;
    const int has = part_type(L, n, "the normalizer", &type);
    if (has <= 0)
        return has;
    if (strcmp(type, "NFC") == 0) {
        t->nfc = 1;
        return 0;
    }
    /* SentencePiece's, as transformers' converters write it: Replace(" ", "▁") alone (Gemma),
     * or after Prepend("▁") (Llama 2, Mistral v0.1) */
    if (is_space_replace(L, n)) {
        t->spm_replace = 1;
        return 0;
    }
    const int list = text_get(L, n, "normalizers");
    if (strcmp(type, "Sequence") == 0 && jis(&L->doc, list, J_ARRAY) && L->doc.v[list].n == 2) {
        const int a = L->doc.v[list].first, b = L->doc.v[a].next;
        const char *ta = text_str(L, text_get(L, a, "type")),
                   *pre = text_str(L, text_get(L, a, "prepend"));
        if (ta && pre && strcmp(ta, "Prepend") == 0 && strcmp(pre, SPM_SPACE) == 0 &&
            is_space_replace(L, b)) {
            t->spm_prepend = t->spm_replace = 1;
            return 0;
        }
    }
    return baton__text_fail(L, n, BATON_ENOTSUP,
                            "the normalizer (\"%s\") is not supported: baton has none, NFC, and "
                            "SentencePiece's Replace(\" \", \"▁\") and Sequence[Prepend(\"▁\"), "
                            "Replace(\" \", \"▁\")]",
                            type);
}

/* A ByteLevel pre-tokenizer: without a prefix space; its own regex where use_regex. */
static int byte_level_pre(loader *L, int n, int *use_regex)
{
    int rc = flag_is(L, n, "add_prefix_space", 0, "a ByteLevel pre-tokenizer");
    if (rc)
        return rc;
    const int u = text_get(L, n, "use_regex");
    *use_regex = u < 0 || jis(&L->doc, u, J_TRUE); /* its default is true */
    return 0;
}

static int load_pre(loader *L, baton_tokenizer *t, int n)
{
    const char *type;
    const int has = part_type(L, n, "the pre-tokenizer", &type);
    if (has <= 0)
        return has;
    int use_regex, rc;
    if (strcmp(type, "ByteLevel") == 0) {
        if ((rc = byte_level_pre(L, n, &use_regex)))
            return rc;
        t->byte_level = 1;
        t->pattern = use_regex ? PAT_GPT2 : PAT_NONE;
        return 0;
    }
    if (strcmp(type, "Metaspace") ==
        0) { /* SentencePiece's, as tokenizers 0.19 and later write it */
        const char *rep = text_str(L, text_get(L, n, "replacement"));
        const char *scheme = text_str(L, text_get(L, n, "prepend_scheme"));
        const int split = text_get(L, n, "split");
        if (!rep || strcmp(rep, SPM_SPACE) != 0)
            return baton__text_fail(
                L, n, BATON_ENOTSUP,
                "a Metaspace pre-tokenizer's \"replacement\" other than \"▁\" is not "
                "supported");
        if (!scheme ||
            (strcmp(scheme, "first") && strcmp(scheme, "always") && strcmp(scheme, "never")))
            return baton__text_fail(
                L, n, BATON_ENOTSUP,
                "a Metaspace pre-tokenizer needs a \"prepend_scheme\" of \"first\", "
                "\"always\" or \"never\" (an older file's \"add_prefix_space\" is not "
                "read)");
        if (split >= 0 && !jis(&L->doc, split, J_TRUE) && !jis(&L->doc, split, J_FALSE))
            return baton__text_fail(L, split, BATON_EPLAN,
                                    "a Metaspace pre-tokenizer's \"split\" must be "
                                    "true or false");
        t->metaspace = 1;
        t->meta_prepend = !strcmp(scheme, "first")    ? META_FIRST
                          : !strcmp(scheme, "always") ? META_ALWAYS
                                                      : META_NEVER;
        t->meta_split = split < 0 || jis(&L->doc, split, J_TRUE); /* its default is true */
        return 0;
    }
    const int list = text_get(L, n, "pretokenizers");
    if (strcmp(type, "Sequence") == 0 && jis(&L->doc, list, J_ARRAY) && L->doc.v[list].n == 2) {
        const int a = L->doc.v[list].first, b = L->doc.v[a].next;
        const char *ta = text_str(L, text_get(L, a, "type")),
                   *tb = text_str(L, text_get(L, b, "type"));
        if (ta && tb && strcmp(ta, "Digits") == 0 && strcmp(tb, "ByteLevel") == 0) {
            /* numbers split out, then GPT-2's pattern (StarCoder, SmolLM) */
            if ((rc = byte_level_pre(L, b, &use_regex)))
                return rc;
            t->digits = jis(&L->doc, text_get(L, a, "individual_digits"), J_TRUE) ? DIGITS_EACH
                                                                                  : DIGITS_RUNS;
            t->byte_level = 1;
            t->pattern = use_regex ? PAT_GPT2 : PAT_NONE;
            return 0;
        }
        if (ta && tb && strcmp(ta, "Split") == 0 && strcmp(tb, "ByteLevel") == 0) {
            const int re = text_get(L, text_get(L, a, "pattern"), "Regex");
            const char *beh = text_str(L, text_get(L, a, "behavior"));
            if ((rc = flag_is(L, a, "invert", 0, "a Split pre-tokenizer")))
                return rc;
            if (!beh || strcmp(beh, "Isolated") != 0)
                return baton__text_fail(
                    L, a, BATON_ENOTSUP,
                    "a Split pre-tokenizer's behavior \"%s\" is not supported (only "
                    "\"Isolated\")",
                    beh ? beh : "(none)");
            const char *p = text_str(L, re);
            t->pattern = !p                          ? PAT_NONE
                         : strcmp(p, LLAMA3_RE) == 0 ? PAT_LLAMA3
                         : strcmp(p, QWEN2_RE) == 0  ? PAT_QWEN2
                                                     : PAT_NONE;
            if (t->pattern == PAT_NONE)
                return baton__text_fail(
                    L, re < 0 ? a : re, BATON_ENOTSUP,
                    "a Split pre-tokenizer's pattern is not one baton knows: it runs "
                    "Llama 3's and Qwen 2's exactly (docs/generate.md)");
            if ((rc = byte_level_pre(L, b, &use_regex)))
                return rc;
            if (use_regex)
                return baton__text_fail(
                    L, b, BATON_ENOTSUP,
                    "a ByteLevel pre-tokenizer with \"use_regex\": true after a Split is "
                    "not supported");
            t->byte_level = 1;
            return 0;
        }
    }
    return baton__text_fail(
        L, n, BATON_ENOTSUP,
        "the pre-tokenizer (\"%s\") is not supported: baton has none, ByteLevel, "
        "Metaspace, Sequence[Split(Llama 3's or Qwen 2's pattern), ByteLevel] and "
        "Sequence[Digits, ByteLevel]",
        type);
}

/* TemplateProcessing's single template: the ids before and after $A. */
static int load_template(loader *L, baton_tokenizer *t, int n)
{
    const int single = text_get(L, n, "single"), specials = text_get(L, n, "special_tokens");
    if (t->templated++)
        return baton__text_fail(L, n, BATON_ENOTSUP,
                                "a second TemplateProcessing is not supported");
    if (!jis(&L->doc, single, J_ARRAY))
        return baton__text_fail(L, n, BATON_EPLAN, "TemplateProcessing needs a \"single\" array");
    int seen_a = 0;
    for (int c = L->doc.v[single].first; c >= 0; c = L->doc.v[c].next) {
        const int seq = text_get(L, c, "Sequence"), sp = text_get(L, c, "SpecialToken");
        if (seq >= 0) {
            const char *id = text_str(L, text_get(L, seq, "id"));
            if (!id || strcmp(id, "A") != 0 || seen_a)
                return baton__text_fail(
                    L, c, BATON_ENOTSUP,
                    "a single-sequence template holds $A once and no other sequence");
            seen_a = 1;
            continue;
        }
        const char *name = text_str(L, text_get(L, sp, "id"));
        const int ids = text_get(L, text_get(L, specials, name ? name : ""), "ids");
        if (!name || !jis(&L->doc, ids, J_ARRAY))
            return baton__text_fail(
                L, c, BATON_EPLAN,
                "a template's special token must name an entry of \"special_tokens\" "
                "with its \"ids\"");
        for (int k = L->doc.v[ids].first; k >= 0; k = L->doc.v[k].next) {
            if (!jis(&L->doc, k, J_INT) || L->doc.v[k].i < 0 || L->doc.v[k].i >= t->n_ids)
                return baton__text_fail(L, k, BATON_EPLAN,
                                        "a special token's id must be in the vocabulary");
            int64_t **v = seen_a ? &t->post : &t->pre;
            size_t *m = seen_a ? &t->n_post : &t->n_pre;
            int64_t *p = realloc(*v, (*m + 1) * sizeof *p);
            if (!p)
                return BATON_ENOMEM;
            p[(*m)++] = L->doc.v[k].i;
            *v = p;
        }
    }
    if (!seen_a)
        return baton__text_fail(L, single, BATON_EPLAN, "the single-sequence template has no $A");
    return 0;
}

static int load_post(loader *L, baton_tokenizer *t, int n)
{
    const char *type;
    const int has = part_type(L, n, "the post-processor", &type);
    if (has <= 0)
        return has;
    if (strcmp(type, "ByteLevel") == 0) /* offsets only */
        return 0;
    if (strcmp(type, "TemplateProcessing") == 0)
        return load_template(L, t, n);
    const int list = text_get(L, n, "processors");
    if (strcmp(type, "Sequence") == 0 && jis(&L->doc, list, J_ARRAY)) {
        for (int c = L->doc.v[list].first; c >= 0; c = L->doc.v[c].next) {
            const char *tc = text_str(L, text_get(L, c, "type"));
            if (tc && strcmp(tc, "Sequence") != 0) { /* one level */
                int rc = load_post(L, t, c);
                if (rc)
                    return rc;
                continue;
            }
            return baton__text_fail(L, c, BATON_ENOTSUP,
                                    "a post-processor in a Sequence must be ByteLevel "
                                    "or TemplateProcessing");
        }
        return 0;
    }
    return baton__text_fail(L, n, BATON_ENOTSUP,
                            "the post-processor (\"%s\") is not supported: baton has ByteLevel, "
                            "TemplateProcessing and a Sequence of them",
                            type);
}

#define SPM_DECODER                                                                                \
    "SentencePiece's Sequence[Replace(\"▁\", \" \"), ByteFallback, Fuse] with or without a "     \
    "Strip(\" \", 1, 0) after them"

static int load_decoder(loader *L, baton_tokenizer *t, int n)
{
    const char *type;
    const int has = part_type(L, n, "the decoder", &type);
    if (has == 0)
        return baton__text_fail(
            L, -1, BATON_ENOTSUP,
            "a tokenizer without a decoder is not supported (baton has ByteLevel and "
            "%s)",
            SPM_DECODER);
    if (has < 0)
        return has;
    if (strcmp(type, "ByteLevel") == 0)
        return 0;
    const int list = text_get(L, n, "decoders");
    const int nd = jis(&L->doc, list, J_ARRAY) ? L->doc.v[list].n : 0;
    if (strcmp(type, "Sequence") == 0 && (nd == 3 || nd == 4)) {
        const int a = L->doc.v[list].first, b = L->doc.v[a].next, c = L->doc.v[b].next,
                  d = nd == 4 ? L->doc.v[c].next : -1;
        const char *ta = text_str(L, text_get(L, a, "type")),
                   *tb = text_str(L, text_get(L, b, "type")),
                   *tc = text_str(L, text_get(L, c, "type")),
                   *td = text_str(L, text_get(L, d, "type"));
        const char *pat = text_str(L, text_get(L, text_get(L, a, "pattern"), "String"));
        const char *to = text_str(L, text_get(L, a, "content")),
                   *strip = text_str(L, text_get(L, d, "content"));
        const int start = text_get(L, d, "start"), stop = text_get(L, d, "stop");
        /* the Strip(" ", 1, 0) that follows where the converter prepended a space (not Gemma's) */
        const int strips = d >= 0 && td && strip && strcmp(td, "Strip") == 0 &&
                           strcmp(strip, " ") == 0 && jis(&L->doc, start, J_INT) &&
                           L->doc.v[start].i == 1 && jis(&L->doc, stop, J_INT) &&
                           L->doc.v[stop].i == 0;
        if (ta && tb && tc && pat && to && strcmp(ta, "Replace") == 0 &&
            strcmp(pat, SPM_SPACE) == 0 && strcmp(to, " ") == 0 &&
            strcmp(tb, "ByteFallback") == 0 && strcmp(tc, "Fuse") == 0 && (d < 0 || strips)) {
            t->spm_decoder = 1;
            t->spm_strip = strips;
            return 0;
        }
    }
    return baton__text_fail(L, n, BATON_ENOTSUP,
                            "the decoder (\"%s\") is not supported: baton has ByteLevel and %s",
                            type, SPM_DECODER);
}

/* Longest first, so that the split's scan takes the longest token at a place; then by id. */
static int added_order(const void *a, const void *b)
{
    const tok_added *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int baton_tokenizer_load(const char *path, baton_tokenizer **out, baton_error *err)
{
    err_clear(err);
    if (!path || !out)
        return baton__err_set(err, BATON_EINVAL, "baton_tokenizer_load: path and out are needed");
    *out = NULL;
    loader L;
    baton_tokenizer *t = NULL;
    int rc = baton__text_open(&L, path, "tokenizer.json", err);
    if (rc)
        goto fail;
    t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        rc = baton__err_set(err, BATON_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    const int root = 0;
    const int model = text_get(&L, root, "model");
    if (!jis(&L.doc, model, J_OBJECT)) {
        rc = baton__text_fail(&L, model < 0 ? root : model, BATON_EPLAN,
                              "a tokenizer.json needs a \"model\" "
                              "object");
        goto fail;
    }
    /* the added tokens' largest id sizes the id table with the vocabulary's */
    const int added = text_get(&L, root, "added_tokens");
    if (added >= 0 && !jis(&L.doc, added, J_ARRAY) && !jis(&L.doc, added, J_NULL)) {
        rc = baton__text_fail(&L, added, BATON_EPLAN, "\"added_tokens\" must be an array");
        goto fail;
    }
    int64_t max_added = -1, n_added = 0;
    for (int c = jis(&L.doc, added, J_ARRAY) ? L.doc.v[added].first : -1; c >= 0;
         c = L.doc.v[c].next, n_added++) {
        const int id = text_get(&L, c, "id");
        if (jis(&L.doc, id, J_INT) && L.doc.v[id].i > max_added && L.doc.v[id].i < (1LL << 31))
            max_added = L.doc.v[id].i;
    }
    if ((rc = load_normalizer(&L, t, text_get(&L, root, "normalizer"))) ||
        (rc = load_model(&L, t, model, max_added, n_added)) ||
        (rc = load_added(&L, t, jis(&L.doc, added, J_ARRAY) ? added : -1,
                         (int64_t)L.doc.v[text_get(&L, model, "vocab")].n)) ||
        (rc = load_pre(&L, t, text_get(&L, root, "pre_tokenizer"))) ||
        (rc = load_post(&L, t, text_get(&L, root, "post_processor"))) ||
        (rc = load_decoder(&L, t, text_get(&L, root, "decoder"))))
        goto fail;
    qsort(t->added, t->n_added, sizeof *t->added, added_order);
    for (size_t i = 0; i < t->n_added; i++)
        t->added_first[t->added[i].normalized][(unsigned char)t->added[i].text[0]] = 1;
    baton__text_close(&L);
    *out = t;
    return 0;
fail:
    if (rc == BATON_ENOMEM && err && !err->message[0])
        baton__err_set(err, BATON_ENOMEM, "%s: out of memory", path);
    baton__text_close(&L);
    baton_tokenizer_free(t);
    return rc;
}

void baton_tokenizer_free(baton_tokenizer *t)
{
    if (!t)
        return;
    for (int64_t i = 0; t->text && i < t->n_ids; i++)
        free(t->text[i]);
    free(t->text);
    free(t->len);
    free(t->is_special);
    free(t->vocab.slot);
    free(t->merges);
    free(t->added);
    free(t->pre);
    free(t->post);
    free(t->path);
    free(t);
}

int64_t baton_tokenizer_vocab_size(const baton_tokenizer *t)
{
    return t ? t->n_ids : 0;
}

int baton_tokenizer_token_id(const baton_tokenizer *t, const char *token, int64_t *id)
{
    if (!t || !token || !id)
        return BATON_EINVAL;
    const size_t len = strlen(token);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == len && memcmp(t->added[i].text, token, len) == 0) {
            *id = t->added[i].id;
            return 0;
        }
    const int64_t v = baton__tok_vocab_get(t, token, len);
    if (v < 0)
        return BATON_ENOENT;
    *id = v;
    return 0;
}

const char *baton_tokenizer_id_token(const baton_tokenizer *t, int64_t id)
{
    return t && id >= 0 && id < t->n_ids ? t->text[id] : NULL;
}
