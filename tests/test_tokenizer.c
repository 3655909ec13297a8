/* test_tokenizer.c: baton_tokenizer.h on two small tokenizer.json files that the `tokenizers`
 * library trained and configured as Llama 3's and Llama 2's (tests/data/tokenizer/, made by
 * make_fixtures.py, which printed the ids below): the ids and texts it gives, the buffers' sizing,
 * the refusals at load and at encode, and the Unicode helpers underneath. The comparison with the
 * library over thousands of texts and all four tokenizer families is
 * python/tests/test_tokenizer.py.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "baton/baton_tokenizer.h"
#include "tests/support.h"
#include "text/unicode.h"

static baton_tokenizer *load(const char *rel)
{
    baton_tokenizer *t = NULL;
    baton_error e;
    cr_assert_eq(baton_tokenizer_load(test_path(rel), &t, &e), 0, "%s", e.message);
    return t;
}

/* ids of text (add_special) into a new array of *n */
static int64_t *encode(const baton_tokenizer *t, const char *text, int add_special, size_t *n)
{
    baton_error e;
    cr_assert_eq(baton_tokenizer_encode(t, text, strlen(text), add_special, NULL, 0, n, &e), 0,
                 "%s", e.message);
    int64_t *ids = malloc((*n + 1) * sizeof *ids);
    cr_assert_eq(baton_tokenizer_encode(t, text, strlen(text), add_special, ids, *n, n, &e), 0,
                 "%s", e.message);
    return ids;
}

static char *decode(const baton_tokenizer *t, const int64_t *ids, size_t n, int skip)
{
    baton_error e;
    size_t len;
    cr_assert_eq(baton_tokenizer_decode(t, ids, n, skip, NULL, 0, &len, &e), 0, "%s", e.message);
    char *s = malloc(len + 1);
    cr_assert_eq(baton_tokenizer_decode(t, ids, n, skip, s, len + 1, &len, &e), 0, "%s", e.message);
    cr_assert_eq(strlen(s), len);
    return s;
}

static void expect_ids(const baton_tokenizer *t, const char *text, const int64_t *want, size_t nw)
{
    size_t n;
    int64_t *ids = encode(t, text, 1, &n);
    cr_expect_eq(n, nw, "%s: %zu ids, `tokenizers` gives %zu", text, n, nw);
    for (size_t i = 0; i < n && i < nw; i++)
        cr_expect_eq(ids[i], want[i], "%s: id %zu is %lld, `tokenizers` gives %lld", text, i,
                     (long long)ids[i], (long long)want[i]);
    free(ids);
}

#define IDS(...) ((const int64_t[]){__VA_ARGS__}), sizeof((const int64_t[]){__VA_ARGS__}) / 8

Test(tokenizer, byte_level_ids_are_those_of_the_tokenizers_library)
{
    baton_tokenizer *t = load("tests/data/tokenizer/byte_level.json");
    expect_ids(t, "Hello world! I'LL be there.", IDS(0, 387, 382, 2, 334, 363, 356, 362, 15));
    expect_ids(t, "  x\n\n y  ", IDS(0, 222, 222, 89, 331, 222, 90, 222, 222));
    expect_ids(t, "hi<|eot_id|>there 99999", IDS(0, 73, 74, 1, 265, 306, 222, 26, 26, 26, 26, 26));
    expect_ids(t, "Привет, мир! 日本", IDS(0, 391, 13, 386, 2, 222, 329, 309, 252, 107));
    baton_tokenizer_free(t);
}

Test(tokenizer, sentencepiece_ids_are_those_of_the_tokenizers_library)
{
    baton_tokenizer *t = load("tests/data/tokenizer/spm.json");
    expect_ids(t, "Hello world! I'LL be there.", IDS(1, 468, 449, 427, 282, 265));
    expect_ids(t, "  x\n\n y  ", IDS(1, 339, 318, 301, 343, 318, 302, 339));
    expect_ids(t, "hi<|eot_id|>there 99999",
               IDS(1, 318, 285, 286, 63, 127, 282, 292, 297, 98, 286, 281, 127, 65, 398, 330, 271,
                   271, 271, 271, 271));
    expect_ids(t, "Привет, мир! 日本", IDS(1, 419, 409, 317, 349, 412, 345, 327, 328));
    baton_tokenizer_free(t);
}

/* Random UTF-8 text (ASCII, white space, Cyrillic, CJK, emoji, the added tokens' text) back from
 * its ids: byte-level BPE and byte fallback lose nothing. */
Test(tokenizer, random_text_comes_back_from_its_ids)
{
    const char *files[] = {"tests/data/tokenizer/byte_level.json", "tests/data/tokenizer/spm.json"};
    const char *parts[] = {
        "a",   "Z",          " ",        "  ", "\n", "\r\n", "\t",   "'s",
        "'LL", "7",          "123456",   "é",  "ж",  "日本", "🙂", "👨‍👩‍👧",
        "!?",  "<|eot_id|>", "\xc2\xa0", "ǅ"};
    const uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    for (int f = 0; f < 2; f++) {
        baton_tokenizer *t = load(files[f]);
        for (int k = 0; k < 200; k++) {
            char text[512] = "";
            const int np = (int)(test_rng_next(&r) % 24);
            for (int i = 0; i < np; i++)
                strcat(text, parts[test_rng_next(&r) % (sizeof parts / sizeof parts[0])]);
            /* SentencePiece's decoder strips the first space, which its normalizer added */
            size_t n;
            int64_t *ids = encode(t, text, 0, &n);
            char *back = decode(t, ids, n, 0);
            cr_expect_str_eq(back, text, "%s, seed %llu: \"%s\" came back as \"%s\"", files[f],
                             (unsigned long long)seed, text, back);
            free(back);
            free(ids);
        }
        baton_tokenizer_free(t);
    }
}

Test(tokenizer, special_tokens_are_kept_or_skipped_in_decode)
{
    baton_tokenizer *t = load("tests/data/tokenizer/byte_level.json");
    int64_t bos, eot;
    cr_assert_eq(baton_tokenizer_token_id(t, "<|begin_of_text|>", &bos), 0);
    cr_assert_eq(baton_tokenizer_token_id(t, "<|eot_id|>", &eot), 0);
    cr_expect_eq(baton_tokenizer_token_id(t, "no such token", &bos), BATON_ENOENT);
    size_t n;
    int64_t *ids = encode(t, "hi<|eot_id|>there", 1, &n);
    cr_assert_eq(ids[0], bos);
    char *kept = decode(t, ids, n, 0), *skipped = decode(t, ids, n, 1);
    cr_expect_str_eq(kept, "<|begin_of_text|>hi<|eot_id|>there");
    cr_expect_str_eq(skipped, "hithere");
    free(kept);
    free(skipped);
    free(ids);
    baton_tokenizer_free(t);
}

/* Ids that cut a character: U+FFFD for each maximal invalid part, as from_utf8_lossy. */
Test(tokenizer, ids_that_cut_a_character_decode_to_replacement_characters)
{
    baton_tokenizer *t = load("tests/data/tokenizer/byte_level.json");
    size_t n;
    int64_t *ids = encode(t, "鬱", 0, &n); /* three byte tokens: E9 AC B1 */
    cr_assert_eq(n, 3, "the fixture has no token for 鬱 or a part of it (%zu ids)", n);
    char *two = decode(t, ids, 2, 0), *swapped;
    cr_expect_str_eq(two, "\xef\xbf\xbd", "E9 AC is one maximal part: one U+FFFD");
    int64_t rev[3] = {ids[2], ids[1], ids[0]};
    swapped = decode(t, rev, 3, 0);
    cr_expect_str_eq(swapped, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", "B1 AC E9: three parts");
    free(two);
    free(swapped);
    free(ids);
    baton_tokenizer_free(t);
}

/* The pieces of an incremental decode, put together, are the whole decode's text: on random id
 * lists (byte tokens that begin, cut and complete characters, special tokens, ids past the
 * vocabulary), with and without the special tokens, and a decoder used again after its finish. */
Test(tokenizer, incremental_decode_gives_the_whole_decodes_text)
{
    const char *files[] = {"tests/data/tokenizer/byte_level.json", "tests/data/tokenizer/spm.json"};
    const uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    for (int f = 0; f < 2; f++) {
        baton_tokenizer *t = load(files[f]);
        const int64_t vocab = baton_tokenizer_vocab_size(t);
        size_t nc;
        int64_t *chars = encode(t, "鬱 ж🙂 a", 0, &nc); /* byte tokens of several characters */
        for (int skip = 0; skip < 2; skip++) {
            baton_tokenizer_decoder *d = NULL;
            baton_error e;
            cr_assert_eq(baton_tokenizer_decoder_create(t, skip, &d, &e), 0, "%s", e.message);
            for (int k = 0; k < 300; k++) {
                int64_t ids[40];
                const size_t n = test_rng_next(&r) % 40;
                for (size_t i = 0; i < n; i++) {
                    const uint64_t u = test_rng_next(&r);
                    ids[i] = u % 3 == 0   ? chars[(u >> 8) % nc]
                             : u % 7 == 1 ? vocab + (int64_t)((u >> 8) % 4) /* no token */
                                          : (int64_t)((u >> 8) % (uint64_t)vocab);
                }
                /* (a byte token of 0 puts a NUL inside the text: lengths, not strlen) */
                size_t wl;
                char whole[4096];
                cr_assert_eq(baton_tokenizer_decode(t, ids, n, skip, whole, sizeof whole, &wl, &e),
                             0, "%s", e.message);
                char got[4096] = "";
                size_t at = 0, len;
                const char *piece;
                for (size_t i = 0; i <= n; i++) {
                    const int rc = i < n ? baton_tokenizer_decoder_push(d, ids[i], &piece, &len, &e)
                                         : baton_tokenizer_decoder_finish(d, &piece, &len, &e);
                    cr_assert_eq(rc, 0, "%s", e.message);
                    cr_assert_eq(piece[len], 0);
                    cr_assert_lt(at + len, sizeof got);
                    memcpy(got + at, piece, len + 1);
                    at += len;
                }
                cr_expect(at == wl && memcmp(got, whole, wl) == 0,
                          "%s, skip %d, seed %llu, list %d: pieces \"%s\", whole "
                          "\"%s\"",
                          files[f], skip, (unsigned long long)seed, k, got, whole);
            }
            baton_tokenizer_decoder_destroy(d);
        }
        free(chars);
        baton_tokenizer_free(t);
    }
}

/* A piece holds back only what a later id may change: the bytes of a character begun */
Test(tokenizer, incremental_decode_holds_back_a_character_until_it_is_complete)
{
    baton_tokenizer *t = load("tests/data/tokenizer/byte_level.json");
    size_t n;
    int64_t *ids = encode(t, "a鬱b", 0, &n); /* a, then E9 AC B1 as three tokens, then b */
    cr_assert_eq(n, 5, "the fixture has no token for 鬱 or a part of it (%zu ids)", n);
    baton_tokenizer_decoder *d = NULL;
    baton_error e;
    cr_assert_eq(baton_tokenizer_decoder_create(t, 1, &d, &e), 0);
    const char *want[] = {"a", "", "", "鬱", "b"}, *piece;
    size_t len;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(baton_tokenizer_decoder_push(d, ids[i], &piece, &len, &e), 0);
        cr_expect_str_eq(piece, want[i], "push %zu", i);
    }
    /* a character left unfinished comes out at the finish, as the whole decode's U+FFFD */
    cr_assert_eq(baton_tokenizer_decoder_push(d, ids[1], &piece, &len, &e), 0);
    cr_expect_str_eq(piece, "");
    cr_assert_eq(baton_tokenizer_decoder_push(d, -1, &piece, &len, &e), BATON_EINVAL);
    cr_assert_eq(baton_tokenizer_decoder_finish(d, &piece, &len, &e), 0);
    cr_expect_str_eq(piece, "\xef\xbf\xbd");
    baton_tokenizer_decoder_destroy(d);
    free(ids);
    baton_tokenizer_free(t);
}

Test(tokenizer, buffers_are_sized_by_a_call_with_cap_zero)
{
    baton_tokenizer *t = load("tests/data/tokenizer/byte_level.json");
    baton_error e;
    size_t n, len;
    const char *text = "Hello world! I'LL be there.";
    cr_assert_eq(baton_tokenizer_encode(t, text, strlen(text), 1, NULL, 0, &n, &e), 0);
    cr_assert_eq(n, 9);
    int64_t ids[4] = {-1, -1, -1, -1};
    cr_expect_eq(baton_tokenizer_encode(t, text, strlen(text), 1, ids, 3, &n, &e), BATON_EINVAL);
    cr_expect_eq(n, 9);
    cr_expect(ids[0] == 0 && ids[2] == 382 && ids[3] == -1, "the first 3 written, not the 4th");
    int64_t all[9];
    cr_assert_eq(baton_tokenizer_encode(t, text, strlen(text), 1, all, 9, &n, &e), 0);
    cr_assert_eq(baton_tokenizer_decode(t, all, 9, 0, NULL, 0, &len, &e), 0);
    char small[8];
    cr_expect_eq(baton_tokenizer_decode(t, all, 9, 0, small, sizeof small, &len, &e), BATON_EINVAL);
    cr_expect_str_eq(small, "<|begin", "cut at cap - 1 bytes, NUL-terminated");
    baton_tokenizer_free(t);
}

Test(tokenizer, bad_text_and_bad_ids_are_refused_with_where)
{
    baton_tokenizer *t = load("tests/data/tokenizer/byte_level.json");
    baton_error e;
    size_t n, len;
    const char bad[] = "ok \xc0\xaf overlong";
    cr_expect_eq(baton_tokenizer_encode(t, bad, sizeof bad - 1, 1, NULL, 0, &n, &e), BATON_EINVAL);
    cr_expect(strstr(e.message, "not UTF-8 at byte 3"), "%s", e.message);
    const int64_t ids[] = {5, -2};
    cr_expect_eq(baton_tokenizer_decode(t, ids, 2, 0, NULL, 0, &len, &e), BATON_EINVAL);
    cr_expect(strstr(e.message, "id -2 (at 1)"), "%s", e.message);
    /* ids past the tokenizer's vocabulary (a model's padded one) have no text, as in tokenizers */
    const int64_t padded[] = {41, 600000, 42};
    char *s = decode(t, padded, 3, 0);
    cr_expect_str_eq(s, "HI");
    cr_expect(baton_tokenizer_id_token(t, 600000) == NULL &&
              baton_tokenizer_id_token(t, -1) == NULL);
    cr_expect_str_eq(baton_tokenizer_id_token(t, 41), "H");
    free(s);
    baton_tokenizer_free(t);
}

/* A tokenizer.json written from text, for the refusals */
static const char *write_tmp(const char *json)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/baton-tok-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(json, f);
    fclose(f);
    return path;
}

static void expect_refused(const char *json, int code, const char *says)
{
    baton_tokenizer *t = NULL;
    baton_error e;
    const char *path = write_tmp(json);
    cr_expect_eq(baton_tokenizer_load(path, &t, &e), code, "%s", e.message);
    cr_expect(t == NULL);
    cr_expect(strstr(e.message, path) && strstr(e.message, says), "'%s' does not say '%s'",
              e.message, says);
    remove(path);
}

#define MODEL_BPE                                                                                  \
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "                  \
    "\"merges\": [\"a b\"]}"

Test(tokenizer, unsupported_or_malformed_files_are_refused_naming_the_place)
{
    baton_tokenizer *t = NULL;
    baton_error e;
    cr_expect_eq(baton_tokenizer_load("/nonexistent/tokenizer.json", &t, &e), BATON_EIO);
    cr_expect(strstr(e.message, "/nonexistent/tokenizer.json"), "%s", e.message);
    /* a FIFO is refused at once, not waited on for a writer */
    char fifo[64];
    snprintf(fifo, sizeof fifo, "/tmp/baton-tok-fifo-%d", (int)getpid());
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_expect_eq(baton_tokenizer_load(fifo, &t, &e), BATON_EIO);
    cr_expect(strstr(e.message, "is a FIFO, not a regular file"), "%s", e.message);
    remove(fifo);
    expect_refused("{\"model\": ", BATON_EPARSE, ":1:");
    expect_refused("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", BATON_ENOTSUP,
                   "model type \"WordPiece\"");
    expect_refused("{" MODEL_BPE ", \"decoder\": {\"type\": \"ByteLevel\"}, \"pre_tokenizer\": "
                   "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                   "\"pattern\": {\"Regex\": \"\\\\w+\"}, \"behavior\": \"Isolated\", "
                   "\"invert\": false}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}}",
                   BATON_ENOTSUP, "pattern is not one baton knows");
    expect_refused("{" MODEL_BPE ", \"decoder\": {\"type\": \"ByteLevel\"}, \"added_tokens\": "
                   "[{\"id\": 3, \"content\": \"<x>\", \"lstrip\": true}]}",
                   BATON_ENOTSUP, "\"lstrip\": true");
    expect_refused("{" MODEL_BPE ", \"decoder\": {\"type\": \"WordPiece\"}}", BATON_ENOTSUP,
                   "decoder (\"WordPiece\")");
    expect_refused("{" MODEL_BPE ", \"decoder\": {\"type\": \"ByteLevel\"}, \"normalizer\": "
                   "{\"type\": \"NFKC\"}}",
                   BATON_ENOTSUP, "normalizer (\"NFKC\")");
    expect_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": "
                   "[\"a b\"]}, \"decoder\": {\"type\": \"ByteLevel\"}}",
                   BATON_EPLAN, "the result is not in the vocabulary");
    expect_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2147483000}}, "
                   "\"decoder\": {\"type\": \"ByteLevel\"}}",
                   BATON_EPLAN, "far past the 2 tokens"); /* not tables of 2^31 ids */
    expect_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}}, "
                   "\"decoder\": {\"type\": \"ByteLevel\"}}",
                   BATON_EPLAN, "is also that of");
}

/* Qwen's NFC normalizer: a text NFC changes is tokenized as its NFC form, as `tokenizers` does */
Test(tokenizer, an_nfc_normalizer_composes_the_text_first)
{
    const char *path = write_tmp("{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": "
                                 "\"BPE\", \"vocab\": {\"a\": 0, \"e\": 1, \"\\u00e9\": 2, "
                                 "\"\\u0301\": 3, \"\\u00c5\": 4}, \"merges\": []}, "
                                 "\"decoder\": {\"type\": \"ByteLevel\"}}");
    baton_tokenizer *t = NULL;
    baton_error e;
    cr_assert_eq(baton_tokenizer_load(path, &t, &e), 0, "%s", e.message);
    size_t n;
    int64_t ids[8];
    /* composed already; e + combining acute; the Angstrom sign (a singleton: NFC gives U+00C5) */
    const char *texts[] = {"a\xc3\xa9", "ae\xcc\x81", "a\xe2\x84\xab"};
    const int64_t want[][2] = {{0, 2}, {0, 2}, {0, 4}};
    for (int k = 0; k < 3; k++) {
        cr_expect_eq(baton_tokenizer_encode(t, texts[k], strlen(texts[k]), 0, ids, 8, &n, &e), 0,
                     "%s", e.message);
        cr_expect(n == 2 && ids[0] == want[k][0] && ids[1] == want[k][1], "text %d: %zu ids", k, n);
    }
    baton_tokenizer_free(t);
    remove(path);
}

/* NFC against what Python's unicodedata (15.0) gives for the same code points */
Test(tokenizer, nfc_is_the_standards)
{
    static const struct {
        uint32_t in[6], want[6];
        size_t n_in, n_want;
    } cases[] = {
        {{'e', 0x301}, {0xE9}, 2, 1},
        {{0x212B}, {0xC5}, 1, 1},                    /* a singleton */
        {{0x344}, {0x308, 0x301}, 1, 2},             /* an exclusion, decomposed */
        {{0x1E9B, 0x323}, {0x1E9B, 0x323}, 2, 2},    /* UAX #15's example */
        {{0xE9, 0x323}, {0x1EB9, 0x301}, 2, 2},      /* reordered, then composed */
        {{'a', 0x328, 0x301}, {0x105, 0x301}, 3, 2}, /* ogonek (202) before acute (230) */
        {{'a', 0x301, 0x328}, {0x105, 0x301}, 3, 2}, /* the same, out of order */
        {{0x1100, 0x1161, 0x11A8}, {0xAC01}, 3, 1},  /* Hangul L V T */
        {{0xAC00, 0x11A8}, {0xAC01}, 2, 1},          /* LV + T */
        {{0x301, 'e'}, {0x301, 'e'}, 2, 2},          /* a mark first composes nothing */
        {{0xD55C, 0x1100}, {0xD55C, 0x1100}, 2, 2},  /* LVT + L: no composite */
        {{0x915, 0x93C}, {0x915, 0x93C}, 2, 2},      /* an exclusion stays decomposed */
        {{0x1FB7}, {0x1FB7}, 1, 1},                  /* alpha perispomeni ypogegrammeni */
        {{0x3B1, 0x345, 0x342}, {0x1FB7}, 3, 1},     /* its parts, out of order */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint32_t out[24];
        const size_t m = baton__uni_nfc(cases[k].in, cases[k].n_in, out);
        int same = m == cases[k].n_want;
        for (size_t i = 0; same && i < m; i++)
            same = out[i] == cases[k].want[i];
        cr_expect(same, "case %zu: %zu code points, the first U+%04X", k, m, (unsigned)out[0]);
    }
}

Test(tokenizer, unicode_helpers_match_the_standard)
{
    cr_expect(baton__uni_is_letter('q') && baton__uni_is_letter(0x436) &&
              baton__uni_is_letter(0x65E5) && baton__uni_is_letter(0x1C5) &&
              !baton__uni_is_letter('7') && !baton__uni_is_letter(0x1F642));
    cr_expect(baton__uni_is_number('7') && baton__uni_is_number(0xFF13) &&
              baton__uni_is_number(0x663) && baton__uni_is_number(0xBD) &&
              !baton__uni_is_number('x'));
    cr_expect(baton__uni_is_space(0xA0) && baton__uni_is_space(0x3000) &&
              baton__uni_is_space(0x2028) && !baton__uni_is_space(0x200B) &&
              !baton__uni_is_space(0x1C));
    const char *bad[] = {"\xc0\x80",         "\xe0\x80\x80", "\xed\xa0\x80",
                         "\xf4\x90\x80\x80", "\x80",         "\xe6\x97"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        size_t i = 0;
        uint32_t cp;
        cr_expect_eq(baton__utf8_next(bad[k], strlen(bad[k]), &i, &cp), -1, "case %zu", k);
    }
    uint32_t nfc_ok[] = {'a', 0x915, 0x94D, 0x937}, nfc_bad[] = {'a', 0x323, 0x301, 0x302};
    size_t at;
    uint32_t maybe[] = {0x1EA1, 0x301}, not_nfc[] = {0xE9, 0x323}, jamo[] = {0x1100, 0x1161};
    cr_expect_eq(baton__uni_nfc_stable(nfc_ok, 4, &at), 1, "Devanagari with a virama is NFC");
    cr_expect_eq(baton__uni_nfc_stable(nfc_bad, 4, &at), 0, "a + dot below composes");
    cr_expect_eq(at, 1);
    cr_expect_eq(baton__uni_nfc_stable(jamo, 2, &at), 0, "L + V jamo compose");
    /* a mark after a composed letter: NFC or not depending on the letter's parts, not decided */
    cr_expect_eq(baton__uni_nfc_stable(maybe, 2, &at), -1);
    cr_expect_eq(baton__uni_nfc_stable(not_nfc, 2, &at), -1);
}
