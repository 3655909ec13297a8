/* tok_internal.h: the loaded tokenizer that tokenizer.c builds from a tokenizer.json, and what
 * its encoder (encode.c: the added tokens, the normalizer, the pre-tokenizer's pieces) and its
 * BPE model (bpe.c) share. */
#ifndef BATON_TEXT_TOK_INTERNAL_H
#define BATON_TEXT_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton_tokenizer.h"

/* The pre-tokenizer patterns known, by the exact regular expression of tokenizer.json */
enum { PAT_NONE, PAT_GPT2, PAT_LLAMA3, PAT_QWEN2 };
enum { META_NEVER, META_FIRST, META_ALWAYS };
enum { DIGITS_NONE, DIGITS_RUNS, DIGITS_EACH }; /* the Digits pre-tokenizer before ByteLevel */

typedef struct tok_added {
    int64_t id;
    const char *text; /* points into the tokenizer's strings */
    size_t len;
    int special;
    int normalized; /* matched in the normalized text (a second pass, as `tokenizers`) */
} tok_added;

/* string -> id, open addressing (a power of two of slots, at most half full) */
typedef struct tok_vocab_map {
    int64_t *slot; /* id + 1; 0: empty */
    size_t mask;
} tok_vocab_map;

/* (left id, right id) -> (rank, merged id) */
typedef struct tok_merge {
    int64_t left, right; /* -1: an empty slot */
    int64_t rank, merged;
} tok_merge;

struct baton_tokenizer {
    char *path;
    /* the model: every id's text (vocabulary and added tokens), NULL for an unused id */
    int64_t n_ids;
    char **text;
    size_t *len;
    unsigned char *is_special; /* an added token marked special */
    tok_vocab_map vocab;       /* the model's vocabulary, not the added tokens */
    tok_merge *merges;
    size_t merges_mask;
    int byte_level;    /* the byte-level alphabet (GPT-2's bytes_to_unicode) */
    int byte_fallback; /* unknown characters as <0xNN> tokens */
    int ignore_merges; /* a word in the vocabulary whole is that token */
    int fuse_unk;
    int64_t unk;          /* -1: none */
    int64_t byte_id[256]; /* <0xNN> (byte_fallback) */
    /* the added tokens, longest first, then by id: the split takes the leftmost, longest match */
    tok_added *added;
    size_t n_added;
    unsigned char added_first[2][256]; /* [normalized][byte]: an added token starts with it */
    /* the normalizer: NFC (encode.c applies it to each span before the normalized added tokens'
     * split, as `tokenizers` does), or SentencePiece's: spaces as "▁" (Replace),
     * with a "▁" before every span (Prepend) */
    int nfc, spm_replace, spm_prepend;
    int pattern; /* PAT_*: the pre-tokenizer's split, then the byte-level mapping */
    int digits;  /* DIGITS_*: numbers split out first (StarCoder's and SmolLM's) */
    /* the Metaspace pre-tokenizer: spaces as "▁", a "▁" before a span that has none (always, or
     * the text's first only), pieces split before each "▁" */
    int metaspace, meta_prepend, meta_split; /* meta_prepend: META_NEVER, META_FIRST, META_ALWAYS */
    /* the post-processor's single-sequence template: ids before and after the text */
    int64_t *pre, *post;
    size_t n_pre, n_post;
    int templated;   /* a TemplateProcessing was read (a second is refused) */
    int spm_decoder; /* the decoder: SentencePiece's sequence, else byte-level */
    int spm_strip;   /* its Strip(" ", 1, 0): the text's first space goes */
};

/* The vocabulary's hash of a token's bytes (FNV-1a), for its table's insertions and lookups. */
uint64_t baton__tok_hash(const char *s, size_t len);

/* The merges' slot of the pair (left, right): the pair's, or the empty one (left < 0) where it
 * goes. */
tok_merge *baton__tok_merge_slot(const baton_tokenizer *t, int64_t left, int64_t right);

/* The id of the len bytes at s in the model's vocabulary, or -1. */
int64_t baton__tok_vocab_get(const baton_tokenizer *t, const char *s, size_t len);

/* An encode's growable arrays: the ids so far, and the BPE model's working arrays, kept from word
 * to word so that a word allocates nothing once they are large enough. */
typedef struct tok_work {
    int64_t *ids;
    size_t n, cap;
    void *sym, *heap; /* bpe.c's symbols and candidate pairs */
    size_t sym_cap, heap_cap;
} tok_work;

/* *p grown to hold need elements of size bytes (doubling *cap): 0 or BATON_ENOMEM. encode.c. */
int baton__tok_grow(void **p, size_t *cap, size_t need, size_t size);
/* id appended to w->ids: 0 or BATON_ENOMEM. encode.c. */
int baton__tok_push(tok_work *w, int64_t id);

/* One BPE word (the byte-level alphabet already applied where the model has it) into ids
 * appended to w->ids: 0 or BATON_ENOMEM, BATON_EINVAL with msg when a character has no token and
 * the model neither falls back to bytes nor has an unknown token. */
int baton__tok_bpe(const baton_tokenizer *t, const char *word, size_t len, tok_work *w, char *msg,
                   size_t msglen);

/* The end of the piece that starts at cp[i] under a pre-tokenizer pattern (PAT_*): the index
 * after its last code point (> i). */
size_t baton__tok_piece_end(int pattern, const uint32_t *cp, size_t n, size_t i);

#endif /* BATON_TEXT_TOK_INTERNAL_H */
