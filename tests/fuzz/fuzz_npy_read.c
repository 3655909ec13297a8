/* fuzz_npy_read.c: libFuzzer target for the .npy reader. Any input must either parse, with a
 * header that describes exactly the bytes after it and survives a round trip through the
 * writer's header, or fail with BATON_EIO and a message of printable ASCII (no raw header bytes).
 * The same bytes read through baton_npy_read from a memfd must give the same answer.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DBATON_CUDA=OFF -DBATON_FUZZ=ON -DBATON_SANITIZE=ON
 *        cmake --build build-fuzz --target fuzz_npy_read
 * Run:   build-fuzz/fuzz_npy_read -max_total_time=600 -dict=tests/fuzz/npy.dict \
 *            tests/fuzz/npy_corpus
 * Defines only LLVMFuzzerTestOneInput, so a plain driver can replay the corpus. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "plan/plan_internal.h"

static void check_message(const baton_error *err, int rc)
{
    if (err->code != rc || !memchr(err->message, 0, sizeof err->message) || !err->message[0])
        abort();
    for (const char *c = err->message; *c; c++)
        if (*c < 0x20 || *c > 0x7e) {
            fprintf(stderr, "unprintable byte 0x%02x in: %s\n", (unsigned char)*c, err->message);
            abort();
        }
}

static int same_desc(const baton_tensor_desc *a, const baton_tensor_desc *b)
{
    if (a->dtype != b->dtype || a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

/* The input as a file, for baton_npy_read: a memfd made once, reached through /proc. */
static int file_fd = -2;
static char file_path[64];

static const char *as_file(const uint8_t *data, size_t size)
{
    if (file_fd == -2) {
        file_fd = memfd_create("fuzz.npy", MFD_CLOEXEC);
        snprintf(file_path, sizeof file_path, "/proc/self/fd/%d", file_fd);
        if (file_fd >= 0 && access(file_path, R_OK) != 0) {
            close(file_fd);
            file_fd = -1; /* no /proc: the parser alone is fuzzed */
        }
    }
    if (file_fd < 0 || ftruncate(file_fd, 0) != 0 ||
        (size && pwrite(file_fd, data, size, 0) != (ssize_t)size))
        return NULL;
    return file_path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    baton_tensor_desc d;
    size_t off = 0;
    baton_error err;
    int rc = baton__npy_parse(data, size, size, "fuzz.npy", &d, &off, &err);
    if (rc != 0) {
        if (rc != BATON_EIO)
            abort();
        check_message(&err, rc);
    } else {
        int64_t numel = baton_tensor_desc_numel(&d);
        if (d.rank < 0 || d.rank > BATON_MAX_RANK || numel < 0 || off > size ||
            (uint64_t)numel * baton_dtype_size(d.dtype) != size - off)
            abort();
        /* what the writer would put before the same data reads back as the same array */
        static unsigned char hdr[NPY_PREFIX_MAX];
        size_t hl = baton__npy_format_header(&d, hdr, sizeof hdr);
        baton_tensor_desc d2;
        size_t off2;
        if (!hl || baton__npy_parse(hdr, hl, hl + (size - off), "rt.npy", &d2, &off2, &err) != 0 ||
            off2 != hl || !same_desc(&d, &d2)) {
            fprintf(stderr, "round trip failed: %.*s\n", (int)hl, (const char *)hdr);
            abort();
        }
    }

    const char *path = as_file(data, size);
    if (!path)
        return 0;
    baton_tensor_desc fd_desc;
    void *buf = NULL;
    baton_error ferr;
    int frc = baton_npy_read(path, &fd_desc, &buf, &ferr);
    if (frc != rc || (rc == 0 && (!buf || !same_desc(&d, &fd_desc) ||
                                  memcmp(buf, data + off, size - off) != 0))) {
        fprintf(stderr, "reader and parser disagree: %d vs %d (%s)\n", frc, rc, ferr.message);
        abort();
    }
    if (frc)
        check_message(&ferr, frc);
    free(buf);
    return 0;
}
