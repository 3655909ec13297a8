/* fuzz_tokenizer.c: libFuzzer target for baton_tokenizer.h. The input's first byte picks what the
 * rest is: a text for the two fixtures of tests/data/tokenizer/ (byte-level and SentencePiece),
 * or a tokenizer.json of its own, then encoded and decoded. On every input: a load, an encode or
 * a decode succeeds or fails with its code and a message; a text that is UTF-8 encodes under both
 * fixtures and comes back from its ids whole (byte-level BPE and byte fallback lose nothing), and
 * one that is not is refused; a tokenizer that loads encodes a fixed text and decodes ids of every
 * kind (special, unknown, past the vocabulary) without a fault (ASan in the fuzz build); ids
 * decoded an id at a time (baton_tokenizer_decoder) give the whole decode's text; NFC is
 * idempotent, its output passes the NFC check and a text the check passes is unchanged by it; the
 * third kind of input is also read as a chat.json (baton_chat), which loads and renders or is
 * refused.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DBATON_CUDA=OFF -DBATON_FUZZ=ON -DBATON_SANITIZE=ON
 *        cmake --build build-fuzz --target fuzz_tokenizer
 * Run from the repository root (the fixtures' paths):
 *        build-fuzz/fuzz_tokenizer -max_total_time=600 tests/fuzz/tokenizer_corpus
 * Defines only LLVMFuzzerTestOneInput, so a plain driver can replay the corpus. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, memfd_create */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "baton/baton_tokenizer.h"
#include "text/unicode.h"

static void check_error(const baton_error *e, int rc)
{
    if (rc >= 0 || e->code != rc || !e->message[0] || !memchr(e->message, 0, sizeof e->message))
        abort();
}

static baton_tokenizer *fixture(int which)
{
    static baton_tokenizer *t[2];
    static const char *paths[2] = {"tests/data/tokenizer/byte_level.json",
                                   "tests/data/tokenizer/spm.json"};
    if (!t[which]) {
        baton_error e;
        char path[4096];
        const char *root = getenv("BATON_SOURCE_DIR");
        snprintf(path, sizeof path, "%s/%s", root ? root : ".", paths[which]);
        if (baton_tokenizer_load(path, &t[which], &e)) {
            fprintf(stderr, "fuzz_tokenizer: %s (run from the repository root)\n", e.message);
            abort();
        }
    }
    return t[which];
}

static int is_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        if (baton__utf8_next(s, n, &i, &cp))
            return 0;
    }
    return 1;
}

/* ids decoded whole and an id at a time: the pieces put together are the whole text */
static void pieces_match(const baton_tokenizer *t, const int64_t *ids, size_t n, int skip)
{
    baton_error e;
    size_t len, at = 0, pl;
    if (baton_tokenizer_decode(t, ids, n, skip, NULL, 0, &len, &e))
        abort();
    char *whole = malloc(len + 1), *got = malloc(len + 1);
    if (baton_tokenizer_decode(t, ids, n, skip, whole, len + 1, &len, &e))
        abort();
    baton_tokenizer_decoder *d = NULL;
    if (baton_tokenizer_decoder_create(t, skip, &d, &e))
        abort();
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        if ((i < n ? baton_tokenizer_decoder_push(d, ids[i], &piece, &pl, &e)
                   : baton_tokenizer_decoder_finish(d, &piece, &pl, &e)) ||
            piece[pl] != 0 || at + pl > len)
            abort();
        memcpy(got + at, piece, pl);
        at += pl;
    }
    if (at != len || memcmp(got, whole, len) != 0)
        abort();
    baton_tokenizer_decoder_destroy(d);
    free(whole);
    free(got);
}

/* The input's bytes as ids (two bytes an id, some past the vocabulary), decoded both ways */
static void ids_of_bytes(const baton_tokenizer *t, const char *s, size_t n)
{
    int64_t ids[128];
    const int64_t span = baton_tokenizer_vocab_size(t) + 8;
    size_t k = 0;
    for (size_t i = 0; i + 1 < n && k < 128; i += 2)
        ids[k++] = (((unsigned char)s[i] << 8) | (unsigned char)s[i + 1]) % span;
    pieces_match(t, ids, k, n % 2);
}

/* NFC's properties on any text: applying it twice changes nothing more, the check never calls
 * its result not NFC, and a text the check passes is its own NFC */
static void nfc_properties(const char *s, size_t n)
{
    uint32_t *cp = malloc((n + 1) * sizeof *cp), *a = malloc((4 * n + 1) * sizeof *a),
             *b = malloc((16 * n + 1) * sizeof *b);
    size_t k = 0, at;
    for (size_t i = 0; i < n; k++)
        baton__utf8_next(s, n, &i, &cp[k]);
    const size_t m = baton__uni_nfc(cp, k, a), m2 = baton__uni_nfc(a, m, b);
    if (m2 != m || memcmp(a, b, m * sizeof *a) != 0 || baton__uni_nfc_stable(a, m, &at) == 0 ||
        (baton__uni_nfc_stable(cp, k, &at) == 1 && (m != k || memcmp(a, cp, k * sizeof *a))))
        abort();
    free(cp);
    free(a);
    free(b);
}

/* encode then decode: the text back, or its refusal when it is not UTF-8. SentencePiece's
 * decoder turns every "▁" into a space, the text's own too, and its normalizer puts one before
 * every span between added tokens (as `tokenizers` does): such texts only encode and decode. */
static void round_trip(const baton_tokenizer *t, const char *s, size_t n, int spm)
{
    const int whole = !(spm && (memmem(s, n, "\xe2\x96\x81", 3) || memmem(s, n, "<s>", 3) ||
                                memmem(s, n, "</s>", 4) || memmem(s, n, "<unk>", 5)));
    baton_error e;
    size_t count, len;
    ids_of_bytes(t, s, n);
    int rc = baton_tokenizer_encode(t, s, n, 0, NULL, 0, &count, &e);
    if (!is_utf8(s, n)) {
        if (rc != BATON_EINVAL)
            abort();
        check_error(&e, rc);
        return;
    }
    if (rc)
        abort();
    nfc_properties(s, n);
    int64_t *ids = malloc((count + 1) * sizeof *ids);
    if (baton_tokenizer_encode(t, s, n, 0, ids, count, &count, &e))
        abort();
    if (baton_tokenizer_decode(t, ids, count, 0, NULL, 0, &len, &e))
        abort();
    char *back = malloc(len + 1);
    if (baton_tokenizer_decode(t, ids, count, 0, back, len + 1, &len, &e))
        abort();
    /* the text may hold a NUL byte: compare lengths and bytes, not strings */
    if (whole && (len != n || memcmp(back, s, n) != 0))
        abort();
    free(back);
    free(ids);
}

/* The input's own tokenizer.json, through a memfd */
static void own_tokenizer(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("tokenizer.json", MFD_CLOEXEC);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    baton_error e;
    baton_chat *chat = NULL; /* the same bytes as a chat.json: refused with a message, or renders */
    int rc = baton_chat_load(path, &chat, &e);
    if (rc) {
        check_error(&e, rc);
    } else {
        const baton_chat_message m[3] = {
            {"system", " s ", 0}, {"user", "u\xc2\x85", 0}, {"assistant", "a", 0}};
        char out[256];
        size_t len;
        for (size_t n = 0; n <= 3; n++)
            for (int gen = 0; gen < 2; gen++)
                if ((rc = baton_chat_render(chat, m, n, gen, out, sizeof out, &len, &e)) != 0)
                    check_error(&e, rc);
                else if (out[len] != 0)
                    abort();
        baton_chat_free(chat);
    }
    baton_tokenizer *t = NULL;
    rc = baton_tokenizer_load(path, &t, &e);
    if (rc) {
        check_error(&e, rc);
        if (t)
            abort();
        return;
    }
    const char text[] = "Hello wörld, it's 2026! 日本 🙂<s></s>\n\n";
    size_t n, len;
    int64_t ids[256];
    rc = baton_tokenizer_encode(t, text, sizeof text - 1, 1, ids, 256, &n, &e);
    if (rc)
        check_error(&e, rc); /* a character without a token, too many ids: refused, named */
    const int64_t vocab = baton_tokenizer_vocab_size(t);
    int64_t probe[8] = {0, 1, vocab - 1, vocab, vocab + 1000, 3, 2, 1};
    for (int skip = 0; skip < 2; skip++) {
        char out[512];
        rc = baton_tokenizer_decode(t, probe, 8, skip, out, sizeof out, &len, &e);
        if (rc)
            check_error(&e, rc);
        else if (out[len] != 0 || !is_utf8(out, len)) /* a <0x00> token decodes to a NUL */
            abort();
        else
            pieces_match(t, probe, 8, skip);
    }
    baton_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *rest = (const char *)data + 1;
    switch (data[0] % 3) {
    case 0: round_trip(fixture(0), rest, size - 1, 0); break;
    case 1: round_trip(fixture(1), rest, size - 1, 1); break;
    default: own_tokenizer(data + 1, size - 1); break;
    }
    return 0;
}
