/* test_safetensors.c: constants from safetensors files: the reader against good files of every
 * dtype baton maps and against hostile ones (truncated, lying lengths and offsets, non-UTF-8 or
 * deeply nested headers, a FIFO), the plan's "safetensors" init (did you mean, dtype and shape
 * mismatches naming both), the process-wide mapping cache, and runs reading the weights. */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "baton/baton.h"
#include "plan/plan_internal.h"
#include "tests/support.h"

static char tmpdir[64];
static baton_registry *reg;

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/baton_st_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
    cr_assert_eq(baton_registry_create(&reg), 0);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void teardown(void)
{
    baton_registry_destroy(reg);
    nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(safetensors, .init = setup, .fini = teardown, .timeout = 30);
TestSuite(safetensors_plan, .init = setup, .fini = teardown, .timeout = 30);

static const char *tmp(const char *name)
{
    static char bufs[4][256];
    static int slot;
    char *b = bufs[slot++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", tmpdir, name);
    return b;
}

static void write_raw(const char *name, const void *data, size_t n)
{
    FILE *f = fopen(tmp(name), "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* A file of the given header text (padded with spaces to a multiple of 8, as the format's writer
 * does) followed by data_len bytes of data. */
static void write_st(const char *name, const char *header, const void *data, size_t data_len)
{
    size_t hl = strlen(header), padded = (hl + 7) / 8 * 8;
    size_t total = 8 + padded + data_len;
    unsigned char *buf = calloc(1, total);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    if (data_len)
        memcpy(buf + 8 + padded, data, data_len);
    write_raw(name, buf, total);
    free(buf);
}

/* Parses a file through the mapping cache; returns the code, message in err. */
static int open_st(const char *name, baton_error *err)
{
    st_file *f = NULL;
    int rc = baton__st_open(tmp(name), &f, err);
    baton__st_release(f);
    return rc;
}

static void expect_eio(const char *name, const char *needle)
{
    baton_error err = {0};
    cr_expect_eq(open_st(name, &err), BATON_EIO, "%s", err.message);
    cr_expect(strstr(err.message, needle) != NULL, "want \"%s\" in: %s", needle, err.message);
    cr_expect(strstr(err.message, name) != NULL, "the message names the file: %s", err.message);
    for (const char *c = err.message; *c; c++)
        cr_expect(*c >= 0x20 && *c < 0x7f, "unprintable byte in: %s", err.message);
}

/* ---- the reader ---------------------------------------------------------------------------- */

Test(safetensors, reads_every_dtype_baton_maps)
{
    static const char *const names[] = {"F32", "F16", "BF16", "F64", "I32", "I64", "U8", "BOOL"};
    static const baton_dtype want[] = {BATON_DTYPE_F32, BATON_DTYPE_F16, BATON_DTYPE_BF16,
                                       BATON_DTYPE_F64, BATON_DTYPE_I32, BATON_DTYPE_I64,
                                       BATON_DTYPE_U8,  BATON_DTYPE_BOOL};
    char header[2048] = "{\"__metadata__\": {\"format\": \"pt\"}";
    uint64_t off = 0;
    for (int i = 0; i < 8; i++) {
        size_t es = baton_dtype_size(want[i]);
        char e[160];
        snprintf(e, sizeof e,
                 ", \"t%d\": {\"dtype\": \"%s\", \"shape\": [2, 3], "
                 "\"data_offsets\": [%llu, %llu]}",
                 i, names[i], (unsigned long long)off, (unsigned long long)(off + 6 * es));
        strcat(header, e);
        off += 6 * es;
    }
    strcat(header, "}");
    unsigned char *data = malloc(off);
    for (uint64_t i = 0; i < off; i++)
        data[i] = (unsigned char)(i * 7 + 1);
    write_st("all.safetensors", header, data, off);
    st_file *f = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__st_open(tmp("all.safetensors"), &f, &err), 0, "%s", err.message);
    const st_header *h = baton__st_file_header(f);
    cr_assert_eq(h->n, 8);
    uint64_t at = 0;
    for (int i = 0; i < 8; i++) {
        char key[8];
        snprintf(key, sizeof key, "t%d", i);
        int e = baton__st_header_find(h, key);
        cr_assert_geq(e, 0, "%s", key);
        cr_expect_eq(h->entries[e].desc.dtype, want[i], "%s", names[i]);
        cr_expect_eq(h->entries[e].desc.rank, 2);
        cr_expect_eq(h->entries[e].desc.shape[1], 3);
        size_t n = 6 * baton_dtype_size(want[i]);
        cr_expect_eq(memcmp(baton__st_file_data(f, e), data + at, n), 0, "%s bytes", names[i]);
        at += n;
    }
    cr_expect_eq(baton__st_header_find(h, "__metadata__"), -1);
    baton__st_release(f);
    free(data);
}

Test(safetensors, maps_a_file_once_however_often_it_is_opened)
{
    static const float w[4] = {1, 2, 3, 4};
    write_st("w.safetensors",
             "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", w,
             sizeof w);
    int before = baton__st_cache_count();
    st_file *a = NULL, *b = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__st_open(tmp("w.safetensors"), &a, &err), 0, "%s", err.message);
    /* another path to the same inode */
    cr_assert_eq(symlink(tmp("w.safetensors"), tmp("link.safetensors")), 0);
    cr_assert_eq(baton__st_open(tmp("link.safetensors"), &b, &err), 0, "%s", err.message);
    cr_expect_eq(a, b, "one mapping per file");
    cr_expect_eq(baton__st_cache_count(), before + 1);
    baton__st_release(a);
    cr_expect_eq(baton__st_cache_count(), before + 1, "still held once");
    baton__st_release(b);
    cr_expect_eq(baton__st_cache_count(), before, "the last release unmaps");
}

Test(safetensors, refuses_a_file_shorter_than_the_length_field)
{
    write_raw("short.safetensors", "\x10\0\0", 3);
    expect_eio("short.safetensors", "shorter than the 8-byte header length");
}

Test(safetensors, refuses_a_header_length_beyond_the_file)
{
    unsigned char b[16] = {0xff, 0xff, 0x00, 0x00, 0, 0, 0, 0, '{', '}'};
    write_raw("long.safetensors", b, 10);
    expect_eio("long.safetensors", "the file has only 2 after it");
}

Test(safetensors, refuses_a_huge_header_length)
{
    unsigned char b[16] = {0, 0, 0, 0, 0, 0, 0, 0x7f, '{', '}'};
    write_raw("huge.safetensors", b, 10);
    expect_eio("huge.safetensors", "above the format's limit of 100 MB");
}

Test(safetensors, refuses_offsets_past_the_end)
{
    static const float w[2];
    write_st("past.safetensors",
             "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", w, 8);
    expect_eio("past.safetensors", "run past the end of the data (8 bytes");
}

Test(safetensors, refuses_overlapping_tensors)
{
    static const float w[4];
    write_st("overlap.safetensors",
             "{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 12]}, "
             "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
             w, sizeof w);
    expect_eio("overlap.safetensors", "overlap");
}

Test(safetensors, refuses_reversed_offsets_and_a_wrong_byte_count)
{
    static const float w[4];
    write_st("rev.safetensors",
             "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", w,
             sizeof w);
    expect_eio("rev.safetensors", "is not a range");
    write_st("count.safetensors",
             "{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 16]}}", w,
             sizeof w);
    expect_eio("count.safetensors", "hold 16 bytes but a F32 tensor of that shape has 12");
}

Test(safetensors, refuses_a_non_utf8_header_with_an_escaped_message)
{
    static const float w[1];
    write_st("utf.safetensors",
             "{\"a\xff\xfe\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", w,
             4);
    expect_eio("utf.safetensors",
               "the header is not valid UTF-8 (line 1, column 3: unable to decode byte 0xff");
}

Test(safetensors, refuses_a_deeply_nested_header_before_parsing_it)
{
    size_t n = 100000;
    char *h = malloc(2 * n + 16);
    strcpy(h, "{\"a\": ");
    size_t o = strlen(h);
    for (size_t i = 0; i < n; i++)
        h[o++] = '[';
    for (size_t i = 0; i < n; i++)
        h[o++] = ']';
    h[o++] = '}';
    h[o] = 0;
    write_st("deep.safetensors", h, NULL, 0);
    free(h);
    expect_eio("deep.safetensors", "nests brackets more than 3 deep");
}

Test(safetensors, refuses_other_dtypes_by_name)
{
    static const char w[4];
    write_st("i8.safetensors",
             "{\"q\": {\"dtype\": \"I8\", \"shape\": [4], \"data_offsets\": [0, 4]}}", w, 4);
    baton_error err = {0};
    cr_expect_eq(open_st("i8.safetensors", &err), BATON_EIO);
    cr_expect(strstr(err.message, "tensor \"q\" is I8, which baton has no dtype for") != NULL, "%s",
              err.message);
    cr_expect(strstr(err.message, "F32, F16, BF16, F64, I32, I64, U8 and BOOL") != NULL, "%s",
              err.message);
}

Test(safetensors, refuses_unknown_keys_and_malformed_entries)
{
    static const float w[1];
    write_st("k.safetensors",
             "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"x\": 1}}", w,
             4);
    expect_eio("k.safetensors", "unknown key \"x\"");
    write_st("m.safetensors", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", w, 4);
    expect_eio("m.safetensors", "has no \"data_offsets\"");
    write_st("j.safetensors", "{\"a\": {\"dtype\": \"F32\",", w, 4);
    expect_eio("j.safetensors", "not valid JSON");
    write_st("md.safetensors", "{\"__metadata__\": {\"a\": 1}}", NULL, 0);
    expect_eio("md.safetensors", "__metadata__ is not an object of strings");
}

Test(safetensors, refuses_a_fifo_without_blocking)
{
    cr_assert_eq(mkfifo(tmp("fifo.safetensors"), 0600), 0);
    baton_error err = {0};
    cr_expect_eq(open_st("fifo.safetensors", &err), BATON_EIO);
    cr_expect(strstr(err.message, "is a FIFO, not a regular file: give the path of a safetensors "
                                  "file") != NULL,
              "%s", err.message);
}

/* ---- plans ----------------------------------------------------------------------------------- */

static const float weights[6] = {0.5f, -1.5f, 2, 3.25f, -4, 8};

static void write_weights(void)
{
    /* "pad" first, so that "model.w" begins at a 4-byte (not 8-byte) offset of the data */
    float all[7] = {0};
    memcpy(all + 1, weights, sizeof weights);
    write_st("weights.safetensors",
             "{\"pad\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
             "\"model.w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [4, 28]}}",
             all, sizeof all);
}

static int load_plan_with(const char *init, const char *shape, baton_plan **plan, baton_error *err)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"st\",\n"
             " \"tensors\": [\n"
             "  {\"name\": \"w\", \"dtype\": \"f32\", \"shape\": %s, \"role\": \"constant\",\n"
             "   \"init\": %s},\n"
             "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": %s, \"role\": \"output\"}],\n"
             " \"steps\": [{\"name\": \"s\", \"kernel\": \"copy\", \"device\": \"cpu\", "
             "\"inputs\": [\"w\"], \"outputs\": [\"y\"]}]}\n",
             shape, init, shape);
    write_raw("plan.json", text, strlen(text));
    return baton_plan_load(reg, tmp("plan.json"), plan, err);
}

Test(safetensors_plan, runs_a_plan_reading_a_constant_from_the_file)
{
    write_weights();
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(load_plan_with("{\"kind\": \"safetensors\", \"path\": \"weights.safetensors\", "
                                "\"key\": \"model.w\"}",
                                "[2, 3]", &plan, &err),
                 0, "%s", err.message);
    /* aligned to its element size: CPU steps read the mapping, the arena holds no copy */
    int w = baton__plan_find_tensor(plan, "w");
    cr_expect_eq(plan->memory[0].offset[w], PLAN_OFFSET_MAPPED);
    cr_expect_eq(plan->memory[0].const_bytes, 0);
    cr_expect(plan->tensors[w].init.mapped != NULL);
    baton_gpu_backend gpus[] = {BATON_GPU_AUTO, BATON_GPU_SIM};
    for (int g = 0; g < 2; g++) {
        baton_runtime *rt = test_runtime(plan, gpus[g], BATON_SYNC_GRAPH, 0, 0);
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        float y[6];
        test_poison(y, sizeof y);
        cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0, "%s", err.message);
        cr_expect_eq(memcmp(y, weights, sizeof y), 0);
        baton_runtime_destroy(rt);
    }
    baton_plan_free(plan);
}

/* A constant larger than the CUDA device's two 64 MB staging buffers together (136 MB), read
 * back bit for bit: on a GPU the upload goes through the pinned buffers in three pieces, the
 * third reusing the first buffer once its copy is done (scheduler/cuda/device_cuda.c,
 * copy_staged); elsewhere the steps fall back to the CPU and read the mapping. */
Test(safetensors_plan, uploads_a_constant_larger_than_the_staging_buffers, .timeout = 120)
{
    const int64_t n = 34 * 1000 * 1000;
    const size_t bytes = (size_t)n * sizeof(float);
    float *w = malloc(bytes), *y = malloc(bytes);
    cr_assert(w && y);
    uint64_t x = test_fresh_seed() | 1;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        w[i] = (float)(int32_t)(x >> 40) * 0.125f;
    }
    char header[256];
    snprintf(header, sizeof header,
             "{\"big\": {\"dtype\": \"F32\", \"shape\": [%lld], \"data_offsets\": [0, %zu]}}",
             (long long)n, bytes);
    write_st("big.safetensors", header, w, bytes);
    char text[1024];
    snprintf(text, sizeof text,
             "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"big\",\n"
             " \"tensors\": [\n"
             "  {\"name\": \"w\", \"dtype\": \"f32\", \"shape\": [%lld], \"role\": \"constant\",\n"
             "   \"init\": {\"kind\": \"safetensors\", \"path\": \"big.safetensors\", \"key\": "
             "\"big\"}},\n"
             "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [%lld], \"role\": \"output\"}],\n"
             " \"steps\": [{\"name\": \"s\", \"kernel\": \"copy\", \"device\": \"cuda:0\", "
             "\"inputs\": [\"w\"], \"outputs\": [\"y\"]}]}\n",
             (long long)n, (long long)n);
    write_raw("big.json", text, strlen(text));
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_plan_load(reg, tmp("big.json"), &plan, &err), 0, "%s", err.message);
    baton_runtime *rt = test_runtime(plan, BATON_GPU_AUTO, BATON_SYNC_STRICT, 0, 0);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    test_poison(y, bytes);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, bytes, &err), 0, "%s", err.message);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (memcmp(&w[i], &y[i], sizeof(float)) != 0)
            bad = i;
    cr_expect_eq(bad, -1, "element %lld of 34M differs after the upload", (long long)bad);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    free(w), free(y);
}

Test(safetensors_plan, suggests_the_closest_key)
{
    write_weights();
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_expect_eq(load_plan_with("{\"kind\": \"safetensors\", \"path\": \"weights.safetensors\", "
                                "\"key\": \"model.v\"}",
                                "[2, 3]", &plan, &err),
                 BATON_EPLAN);
    cr_expect(strstr(err.message, "holds no tensor 'model.v' (did you mean 'model.w'?)") != NULL,
              "%s", err.message);
    cr_expect(strstr(err.message, "plan.json:4:") != NULL, "names the place: %s", err.message);
}

Test(safetensors_plan, names_both_descriptions_and_the_key_on_a_mismatch)
{
    write_weights();
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_expect_eq(load_plan_with("{\"kind\": \"safetensors\", \"path\": \"weights.safetensors\", "
                                "\"key\": \"model.w\"}",
                                "[3, 2]", &plan, &err),
                 BATON_EPLAN);
    cr_expect(strstr(err.message, "key 'model.w' of weights.safetensors holds f32[2,3] but the "
                                  "tensor is declared f32[3,2]") != NULL,
              "%s", err.message);
}

Test(safetensors_plan, reports_a_hostile_file_naming_tensor_and_file)
{
    write_raw("weights.safetensors", "\x10\0\0", 3);
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_expect_eq(load_plan_with("{\"kind\": \"safetensors\", \"path\": \"weights.safetensors\", "
                                "\"key\": \"model.w\"}",
                                "[2, 3]", &plan, &err),
                 BATON_EIO);
    cr_expect(strstr(err.message, "tensor 'w': cannot use safetensors init") != NULL, "%s",
              err.message);
    cr_expect(strstr(err.message, "weights.safetensors: not a valid safetensors file") != NULL,
              "%s", err.message);
}

Test(safetensors_plan, requires_path_and_key)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_expect_eq(load_plan_with("{\"kind\": \"safetensors\", \"path\": \"w.safetensors\"}",
                                "[2, 3]", &plan, &err),
                 BATON_EPLAN);
    cr_expect(strstr(err.message, "needs \"key\"") != NULL, "%s", err.message);
    cr_expect_eq(load_plan_with("{\"kind\": \"safetensor\", \"path\": \"w.safetensors\"}", "[2, 3]",
                                &plan, &err),
                 BATON_EPLAN);
    cr_expect(strstr(err.message, "did you mean 'safetensors'") != NULL, "%s", err.message);
}

Test(safetensors_plan, shares_one_mapping_between_plans_and_drops_it_with_the_last)
{
    write_weights();
    int before = baton__st_cache_count();
    baton_plan *a = NULL, *b = NULL;
    baton_error err = {0};
    const char *init =
        "{\"kind\": \"safetensors\", \"path\": \"weights.safetensors\", \"key\": \"model.w\"}";
    cr_assert_eq(load_plan_with(init, "[2, 3]", &a, &err), 0, "%s", err.message);
    cr_assert_eq(load_plan_with(init, "[2, 3]", &b, &err), 0, "%s", err.message);
    cr_expect_eq(baton__st_cache_count(), before + 1);
    baton_plan_free(a);
    cr_expect_eq(baton__st_cache_count(), before + 1);
    baton_plan_free(b);
    cr_expect_eq(baton__st_cache_count(), before);
}

Test(safetensors_plan, copies_a_misaligned_tensor_into_the_arena)
{
    /* "model.w" at data offset 2: not aligned to its 4-byte elements */
    unsigned char all[2 + sizeof weights] = {0};
    memcpy(all + 2, weights, sizeof weights);
    write_st("weights.safetensors",
             "{\"pad\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}, "
             "\"model.w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [2, 26]}}",
             all, sizeof all);
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(load_plan_with("{\"kind\": \"safetensors\", \"path\": \"weights.safetensors\", "
                                "\"key\": \"model.w\"}",
                                "[2, 3]", &plan, &err),
                 0, "%s", err.message);
    int w = baton__plan_find_tensor(plan, "w");
    cr_expect_geq(plan->memory[0].offset[w], 0);
    baton_runtime *rt = test_runtime(plan, BATON_GPU_AUTO, BATON_SYNC_GRAPH, 0, 0);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    float y[6];
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0, "%s", err.message);
    cr_expect_eq(memcmp(y, weights, sizeof y), 0);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

#include <pthread.h>

static st_file *opened[8];
static char shared_path[256];

static void *open_one(void *arg)
{
    baton_error err = {0};
    int i = (int)(intptr_t)arg;
    if (baton__st_open(shared_path, &opened[i], &err))
        opened[i] = NULL;
    return NULL;
}

Test(safetensors, threads_opening_one_file_share_one_mapping)
{
    static const float w[4] = {1, 2, 3, 4};
    write_st("w.safetensors",
             "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", w,
             sizeof w);
    /* tmp() is not thread-safe: resolve the path once, before the threads */
    snprintf(shared_path, sizeof shared_path, "%s", tmp("w.safetensors"));
    int before = baton__st_cache_count();
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, open_one, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 8; i++) {
        cr_expect_not_null(opened[i]);
        cr_expect_eq(opened[i], opened[0], "thread %d got its own mapping", i);
    }
    cr_expect_eq(baton__st_cache_count(), before + 1);
    for (int i = 0; i < 8; i++)
        baton__st_release(opened[i]);
    cr_expect_eq(baton__st_cache_count(), before);
}
