/* fuzz_cli_args.c: libFuzzer target for the CLI's argument parser (tools/args.c) and its text
 * helpers (tools/text.c). The input, split on NUL bytes, is argv after "baton". cli_parse must
 * return 0 with a consistent result or -1 with a one-line message, and never print or exit.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DBATON_CUDA=OFF -DBATON_FUZZ=ON
 *        cmake --build build-fuzz --target fuzz_cli_args
 * Run:   build-fuzz/fuzz_cli_args -max_total_time=600 -dict=tests/fuzz/cli.dict \
 *            tests/fuzz/cli_corpus
 * Defines only LLVMFuzzerTestOneInput, so a plain driver can replay the corpus. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

#define MAX_ARGS 256

static cli c; /* large: not on the stack */

/* abort() with the failed property, so that a crash says what broke */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_cli_args: %s:%d: %s\n", __FILE__, __LINE__, #cond);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "baton";
    for (size_t i = 0; i <= size && argc < MAX_ARGS;) {
        argv[argc++] = text + i;
        i += strlen(text + i) + 1;
    }
    argv[argc] = NULL;

    char msg[1024];
    memset(msg, 0x55, sizeof msg);
    int rc = cli_parse(argc, argv, &c, msg, sizeof msg);
    REQUIRE(rc == 0 || rc == -1);
    if (rc == 0) {
        /* a success names a plan file from argv (unless --help), and every binding is sane */
        REQUIRE(c.help || (c.plan_path && c.plan_path >= text && c.plan_path <= text + size));
        REQUIRE(c.n_in >= 0 && c.n_in <= MAX_BINDINGS && c.n_out >= 0 && c.n_out <= MAX_BINDINGS);
        for (int i = 0; i < c.n_in + c.n_out; i++) {
            const binding *b = i < c.n_in ? &c.in[i] : &c.out[i - c.n_in];
            REQUIRE(b->name[0] && memchr(b->name, 0, sizeof b->name) && b->path && b->path[0]);
        }
        REQUIRE(c.help || ((c.iters == -1 || c.iters >= 1) && c.warmup >= 0 && c.inflight >= 0 &&
                           c.inflight <= CLI_MAX_INFLIGHT));
    } else {
        /* one line, NUL-terminated */
        REQUIRE(memchr(msg, 0, sizeof msg) && msg[0] && !strchr(msg, '\n'));
    }

    /* the escaper: its output never holds a control byte, whatever the input */
    char esc[256];
    for (int i = 1; i < argc; i++) {
        size_t n = cli_escape(argv[i], esc, sizeof esc, 0);
        REQUIRE(n == strlen(esc) && n < sizeof esc);
        for (size_t k = 0; k < n; k++)
            REQUIRE((unsigned char)esc[k] >= 0x20 && esc[k] != 0x7f);
    }
    if (argc > 2) {
        int d = cli_edit_distance(argv[1], argv[2], 3);
        REQUIRE(d >= 0 && d <= 4 && (d != 0 || strcmp(argv[1], argv[2]) == 0));
    }
    free(text);
    return 0;
}
