/* fuzz_safetensors.c: libFuzzer target for the safetensors reader. Any input must either parse,
 * with every tensor's bytes inside the data, of its dtype and shape's size and overlapping no
 * other tensor, or fail with BATON_EIO and a message of printable ASCII (no raw header bytes).
 * The same bytes mapped through baton__st_open from a memfd must give the same answer.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DBATON_CUDA=OFF -DBATON_FUZZ=ON -DBATON_SANITIZE=ON
 *        cmake --build build-fuzz --target fuzz_safetensors
 * Run:   build-fuzz/fuzz_safetensors -max_total_time=600 -dict=tests/fuzz/safetensors.dict \
 *            tests/fuzz/safetensors_corpus
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

static void check_header(const st_header *h, size_t size)
{
    if (h->data_start > size || h->data_len != size - h->data_start)
        abort();
    for (int i = 0; i < h->n; i++) {
        const st_entry *e = &h->entries[i];
        int64_t numel = baton_tensor_desc_numel(&e->desc);
        if (numel < 0 || e->begin > e->end || e->end > h->data_len ||
            (uint64_t)numel * baton_dtype_size(e->desc.dtype) != e->end - e->begin)
            abort();
        if (i > 0 && strcmp(h->entries[i - 1].name, e->name) >= 0)
            abort(); /* sorted by name, names distinct */
        for (int j = 0; j < i; j++) {
            const st_entry *o = &h->entries[j];
            if (e->begin < e->end && o->begin < o->end && e->begin < o->end && o->begin < e->end)
                abort();
        }
        if (baton__st_header_find(h, e->name) != i)
            abort();
    }
}

static int file_fd = -2;
static char file_path[64];

static const char *as_file(const uint8_t *data, size_t size)
{
    if (file_fd == -2) {
        file_fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
        snprintf(file_path, sizeof file_path, "/proc/self/fd/%d", file_fd);
        if (file_fd >= 0 && access(file_path, R_OK) != 0) {
            close(file_fd);
            file_fd = -1;
        }
    }
    if (file_fd < 0 || ftruncate(file_fd, 0) != 0 ||
        (size && pwrite(file_fd, data, size, 0) != (ssize_t)size))
        return NULL;
    return file_path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_header h;
    baton_error err;
    int rc = baton__st_parse(data, size, size, "fuzz.safetensors", &h, &err);
    if (rc != 0) {
        if (rc != BATON_EIO)
            abort();
        check_message(&err, rc);
    } else {
        check_header(&h, size);
        baton__st_header_free(&h);
    }
    const char *path = as_file(data, size);
    if (!path)
        return 0;
    st_file *f = NULL;
    baton_error ferr;
    int frc = baton__st_open(path, &f, &ferr);
    if (frc != rc) {
        fprintf(stderr, "mapping and parser disagree: %d vs %d (%s)\n", frc, rc, ferr.message);
        abort();
    }
    if (frc)
        check_message(&ferr, frc);
    else
        check_header(baton__st_file_header(f), size);
    baton__st_release(f);
    if (baton__st_cache_count() != 0)
        abort(); /* the last release unmaps */
    return 0;
}
