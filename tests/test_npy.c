/* test_npy.c: the .npy reader and writer against hostile and careless input: non-regular paths
 * (FIFO, directory, device, socket) that must never block, shapes whose size overflows or exceeds
 * the file, a strict header grammar with short escaped excerpts, and what plan loading makes of it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "baton/baton.h"
#include "tests/support.h"

static char tmpdir[64];
static baton_registry *reg;

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/baton_npy_XXXXXX");
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

/* Non-regular paths block on open() before the fix: the timeout turns a hang into a failure. */
TestSuite(npy_read, .init = setup, .fini = teardown, .timeout = 20);
TestSuite(npy_write, .init = setup, .fini = teardown);
TestSuite(npy_plan, .init = setup, .fini = teardown, .timeout = 20);
TestSuite(tensor_desc);

/* ---- helpers --------------------------------------------------------------------------------- */

/* tmpdir/name, in one of 4 rotating static buffers. */
static const char *tmp(const char *name)
{
    static char bufs[4][256];
    static int slot;
    char *b = bufs[slot++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", tmpdir, name);
    return b;
}

static void write_raw(const char *name, const void *bytes, size_t n)
{
    FILE *f = fopen(tmp(name), "wb");
    cr_assert_not_null(f, "cannot create %s", tmp(name));
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* A .npy of the given version whose header is `dict` padded as numpy pads it (spaces to a
 * multiple of 64, then '\n'), followed by n data bytes. */
static void write_npy(const char *name, int version, const char *dict, const void *data, size_t n)
{
    size_t pre = version == 1 ? 10 : 12, dl = strlen(dict);
    size_t hlen = dl + 1 + (64 - (pre + dl + 1) % 64) % 64;
    unsigned char *b = calloc(1, pre + hlen + n + 1);
    cr_assert_not_null(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)version;
    for (size_t i = 0; i < pre - 8; i++)
        b[8 + i] = (unsigned char)(hlen >> (8 * i));
    memset(b + pre, ' ', hlen);
    memcpy(b + pre, dict, dl);
    b[pre + hlen - 1] = '\n';
    if (n)
        memcpy(b + pre + hlen, data, n);
    write_raw(name, b, pre + hlen + n);
    free(b);
}

static int read_npy(const char *name, baton_tensor_desc *d, void **data, baton_error *err)
{
    memset(err, 0, sizeof *err);
    return baton_npy_read(tmp(name), d, data, err);
}

/* Expects baton_npy_read of name to fail with BATON_EIO, a message naming the file and holding
 * `want`, and no buffer. */
static void expect_eio(const char *name, const char *want)
{
    baton_tensor_desc d;
    void *data = (void *)&d;
    baton_error err;
    int rc = read_npy(name, &d, &data, &err);
    cr_expect_eq(rc, BATON_EIO, "%s: rc %d (%s), want BATON_EIO; message: %s", name, rc,
                 baton_strerror(rc), err.message);
    cr_expect_eq(err.code, rc);
    cr_expect_null(data, "%s: a failed read must leave *data NULL", name);
    cr_expect(strstr(err.message, tmp(name)) != NULL, "%s: message does not name the file: %s",
              name, err.message);
    cr_expect(strstr(err.message, want) != NULL, "%s: message lacks \"%s\": %s", name, want,
              err.message);
    free(data == (void *)&d ? NULL : data);
}

/* ---- paths that are not regular files ----------------------------------------------------------
 */

Test(npy_read, refuses_a_fifo_without_blocking)
{
    cr_assert_eq(mkfifo(tmp("fifo.npy"), 0600), 0);
    expect_eio("fifo.npy", "is a FIFO, not a regular file: give the path of a .npy file");
}

Test(npy_read, refuses_a_directory_instead_of_saying_bad_magic)
{
    cr_assert_eq(mkdir(tmp("dir.npy"), 0700), 0);
    expect_eio("dir.npy", "is a directory, not a regular file");
}

Test(npy_read, refuses_a_character_device)
{
    baton_tensor_desc d;
    void *data = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_npy_read("/dev/zero", &d, &data, &err), BATON_EIO);
    cr_expect(strstr(err.message, "/dev/zero is a character device, not a regular file") != NULL,
              "%s", err.message);
    cr_expect_null(data);
}

Test(npy_read, refuses_a_socket)
{
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert_geq(s, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", tmp("sock.npy"));
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0, "bind: %s", strerror(errno));
    expect_eio("sock.npy", "is a socket, not a regular file");
    close(s);
}

Test(npy_read, reports_a_missing_file_with_its_path)
{
    expect_eio("none.npy", "No such file or directory");
}

/* ---- sizes --------------------------------------------------------------------------------------
 */

Test(npy_read, rejects_a_shape_whose_element_count_overflows)
{
    /* 4611686018427387905 * 4 wraps to 4 in int64: 16 bytes would have looked right */
    static const float four[4] = {1, 2, 3, 4};
    write_npy("wrap.npy", 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387905, 4), }", four,
              sizeof four);
    expect_eio("wrap.npy", "more bytes than");
}

Test(npy_read, rejects_a_shape_whose_byte_count_overflows)
{
    /* 2**61 f64 elements: numel fits int64, bytes wrap size_t to 0 */
    write_npy("wrap8.npy", 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }", NULL,
              0);
    expect_eio("wrap8.npy", "more bytes than");
}

Test(npy_read, checks_the_file_size_before_allocating_what_the_header_claims)
{
    /* 1 TiB claimed, nothing there: an EIO naming both sizes, never an allocation (ENOMEM) */
    write_npy("tib.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (274877906944,), }",
              NULL, 0);
    expect_eio("tib.npy", "1099511627776 bytes of data but the file holds 0");
}

Test(npy_read, rejects_data_shorter_than_the_header_says)
{
    static const float two[2] = {1, 2};
    write_npy("short.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", two,
              sizeof two);
    expect_eio("short.npy", "16 bytes of data but the file holds 8");
}

Test(npy_read, rejects_bytes_after_the_data)
{
    static const float three[3] = {1, 2, 3};
    write_npy("long.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", three,
              sizeof three);
    expect_eio("long.npy", "8 bytes of data but the file holds 12");
}

Test(npy_read, rejects_a_truncated_header)
{
    write_raw("trunc.npy", "\x93NUMPY\x01\x00\x76\x00{'descr'", 17);
    expect_eio("trunc.npy", "truncated");
}

Test(npy_read, rejects_bad_magic_and_unknown_versions)
{
    static const char zip[] = "PK\x03\x04 this is a zip";
    write_raw("magic.npy", zip, sizeof zip - 1);
    expect_eio("magic.npy", "not a .npy file");
    write_raw("v9.npy", "\x93NUMPY\x09\x00\x00\x00", 10);
    expect_eio("v9.npy", "version 9");
}

Test(npy_read, reads_data_beyond_the_first_header_sized_chunk)
{
    /* 256 KiB of data: the reader's first read (header and what follows, 64 KiB at most) holds
     * only part of it */
    baton_tensor_desc d = {.dtype = BATON_DTYPE_I32, .rank = 2, .shape = {256, 256}};
    int32_t *x = malloc(256 * 256 * sizeof *x);
    cr_assert_not_null(x);
    for (int i = 0; i < 256 * 256; i++)
        x[i] = i * 7 - 3;
    baton_error err = {0};
    cr_assert_eq(baton_npy_write(tmp("big.npy"), &d, x, &err), 0, "%s", err.message);
    baton_tensor_desc got;
    void *data = NULL;
    cr_assert_eq(read_npy("big.npy", &got, &data, &err), 0, "%s", err.message);
    cr_expect_eq(memcmp(data, x, 256 * 256 * sizeof *x), 0);
    free(data);
    free(x);
}

Test(npy_read, rejects_a_header_longer_than_any_array_needs)
{
    /* a version 2 header of 70000 bytes: numpy itself refuses headers over 10000 by default */
    char *dict = malloc(70001);
    cr_assert_not_null(dict);
    int n = snprintf(dict, 70001, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }");
    memset(dict + n, ' ', (size_t)(70000 - n));
    dict[70000] = 0;
    static const float two[2] = {1, 2};
    write_npy("hdr70k.npy", 2, dict, two, sizeof two);
    free(dict);
    expect_eio("hdr70k.npy", "at most 65535");
}

/* ---- the header grammar ------------------------------------------------------------------------
 */

static const struct {
    const char *dict, *want;
} bad_headers[] = {
    {"{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", "twice"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (2,), }", "twice"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), ", "expected"},
    {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,), }", "True or False"},
    {"{'descr': '<f4', 'fortran_order': false, 'shape': (2,), }", "True or False"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (+2,), }", "non-negative integer"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", "non-negative integer"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (02,), }", "leading zero"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2x,), }", "expected"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", "(2,)"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,,), }", "non-negative integer"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4, 5, 6, 7, 8, 1), }",
     "at most 8"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "too large"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } garbage", "after the header"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }}", "after the header"},
    {"{'descr': '<f4', 'fortran_order': False, }", "no 'shape'"},
    {"{'fortran_order': False, 'shape': (2,), }", "no 'descr'"},
    {"{'descr': '<f4', 'shape': (2,), }", "no 'fortran_order'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1, }", "unknown key"},
    {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", "expected"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,) 'x', }", "expected"},
    {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }", "expected ':'"},
    {"{descr: '<f4', 'fortran_order': False, 'shape': (2,), }", "quoted key"},
    {"['descr', '<f4']", "expected '{'"},
    {"", "expected '{'"},
    {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", "structured"},
    {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", "not supported"},
    {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", "Fortran-ordered"},
};

Test(npy_read, rejects_every_malformed_header_with_a_pointed_message)
{
    static const float data[4] = {0};
    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu.npy", i);
        write_npy(name, 1, bad_headers[i].dict, data, 8);
        expect_eio(name, bad_headers[i].want);
    }
}

Test(npy_read, rejects_a_nul_byte_in_the_header)
{
    static const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    unsigned char b[128] = "\x93NUMPY\x01\x00";
    size_t dl = sizeof dict - 1;
    b[8] = (unsigned char)(dl + 2);
    memcpy(b + 10, dict, dl);
    b[10 + dl] = 0;
    b[11 + dl] = '\n';
    memset(b + 12 + dl, 0, 8);
    write_raw("nul.npy", b, 20 + dl);
    expect_eio("nul.npy", "\\x00");
}

Test(npy_read, quotes_a_malformed_header_short_and_escaped)
{
    /* a terminal escape in the header and 3000 bytes of padding: neither may reach the message */
    char dict[3200];
    int n = snprintf(dict, sizeof dict,
                     "{'descr': '<f4', 'fortran_order': \x1b[2J\x1b[31mFalse, 'shape': (2,), }");
    memset(dict + n, ' ', 3000);
    dict[n + 3000] = 0;
    static const float two[2] = {1, 2};
    write_npy("esc.npy", 1, dict, two, sizeof two);
    baton_tensor_desc d;
    void *data = NULL;
    baton_error err;
    cr_assert_eq(read_npy("esc.npy", &d, &data, &err), BATON_EIO);
    cr_expect(strchr(err.message, '\x1b') == NULL, "raw escape in: %s", err.message);
    cr_expect(strstr(err.message, "\\x1b[2J") != NULL, "no escaped excerpt in: %s", err.message);
    cr_expect(strstr(err.message, "          ") == NULL, "padding echoed in: %s", err.message);
    cr_expect_lt(strlen(err.message), 400, "message of %zu bytes: %s", strlen(err.message),
                 err.message);
}

static const struct {
    int version;
    const char *dict;
    baton_dtype dtype;
    int rank;
    int64_t shape[3];
} good_headers[] = {
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", BATON_DTYPE_F32, 2, {2, 3}},
    {2, "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), }", BATON_DTYPE_F64, 1, {6}},
    {3, "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 6), }", BATON_DTYPE_I64, 2, {1, 6}},
    {1,
     "{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (3, 2)}",
     BATON_DTYPE_I32,
     2,
     {3, 2}},
    {1, "{'shape': (2, 3), 'fortran_order': False, 'descr': '|V2'}", BATON_DTYPE_BF16, 2, {2, 3}},
    {1,
     "{ 'descr' : '<f2' ,\t'fortran_order':False,\n'shape':( 6 , ) , }",
     BATON_DTYPE_F16,
     1,
     {6}},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", BATON_DTYPE_F32, 0, {0}},
    {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (6,), }", BATON_DTYPE_F32, 1, {6}},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", BATON_DTYPE_F32, 2, {0, 3}},
    {1,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",
     BATON_DTYPE_F32,
     2,
     {2, 3}},
};

Test(npy_read, accepts_every_header_numpy_could_have_written)
{
    static const unsigned char data[48] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    for (size_t i = 0; i < sizeof good_headers / sizeof good_headers[0]; i++) {
        baton_tensor_desc want = {.dtype = good_headers[i].dtype, .rank = good_headers[i].rank};
        memcpy(want.shape, good_headers[i].shape, sizeof good_headers[i].shape);
        size_t bytes = (size_t)baton_tensor_desc_numel(&want) * baton_dtype_size(want.dtype);
        char name[32];
        snprintf(name, sizeof name, "good%zu.npy", i);
        write_npy(name, good_headers[i].version, good_headers[i].dict, data, bytes);
        baton_tensor_desc d;
        void *got = NULL;
        baton_error err;
        int rc = read_npy(name, &d, &got, &err);
        cr_expect_eq(rc, 0, "%s: %s", good_headers[i].dict, err.message);
        if (rc)
            continue;
        cr_expect_eq(d.dtype, want.dtype, "%s", good_headers[i].dict);
        cr_expect_eq(d.rank, want.rank, "%s", good_headers[i].dict);
        for (int k = 0; k < d.rank && k < want.rank; k++)
            cr_expect_eq(d.shape[k], want.shape[k], "%s: dim %d", good_headers[i].dict, k);
        cr_expect(bytes == 0 || memcmp(got, data, bytes) == 0, "%s", good_headers[i].dict);
        free(got);
    }
}

/* ---- writer and round trip ---------------------------------------------------------------------
 */

Test(npy_write, round_trips_every_dtype)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    for (int dt = 1; dt < BATON_DTYPE_COUNT; dt++) {
        baton_tensor_desc d = {.dtype = (baton_dtype)dt, .rank = 1 + (int)(test_rng_next(&r) % 3)};
        for (int k = 0; k < d.rank; k++)
            d.shape[k] = 1 + (int64_t)(test_rng_next(&r) % 5);
        size_t bytes = (size_t)baton_tensor_desc_numel(&d) * baton_dtype_size(d.dtype);
        unsigned char *buf = malloc(bytes);
        for (size_t i = 0; i < bytes; i++)
            buf[i] = (unsigned char)test_rng_next(&r);
        baton_error err = {0};
        cr_assert_eq(baton_npy_write(tmp("rt.npy"), &d, buf, &err), 0, "%s", err.message);
        baton_tensor_desc got;
        void *data = NULL;
        cr_assert_eq(read_npy("rt.npy", &got, &data, &err), 0, "%s (seed %llu)", err.message,
                     (unsigned long long)seed);
        cr_expect_eq(got.dtype, d.dtype);
        cr_expect_eq(got.rank, d.rank);
        for (int k = 0; k < d.rank; k++)
            cr_expect_eq(got.shape[k], d.shape[k]);
        cr_expect_eq(memcmp(data, buf, bytes), 0, "dtype %s (seed %llu)", baton_dtype_name(d.dtype),
                     (unsigned long long)seed);
        free(data);
        free(buf);
    }
}

Test(npy_write, refuses_a_desc_it_cannot_describe)
{
    static const float x[4];
    baton_tensor_desc bad[] = {
        {.dtype = BATON_DTYPE_F32, .rank = BATON_MAX_RANK + 1},
        {.dtype = BATON_DTYPE_F32, .rank = -1},
        {.dtype = BATON_DTYPE_F32, .rank = 1, .shape = {-4}},
        {.dtype = BATON_DTYPE_F32, .rank = 2, .shape = {INT64_C(4611686018427387905), 4}},
        {.dtype = BATON_DTYPE_F64, .rank = 1, .shape = {INT64_C(2305843009213693952)}},
        {.dtype = BATON_DTYPE_INVALID, .rank = 1, .shape = {4}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        baton_error err = {0};
        cr_expect_eq(baton_npy_write(tmp("w.npy"), &bad[i], x, &err), BATON_EINVAL, "case %zu: %s",
                     i, err.message);
        cr_expect_neq(access(tmp("w.npy"), F_OK), 0, "case %zu left a file behind", i);
        unlink(tmp("w.npy"));
    }
    baton_tensor_desc d = {.dtype = BATON_DTYPE_F32, .rank = 1, .shape = {4}};
    baton_error err = {0};
    cr_expect_eq(baton_npy_write(tmp("w.npy"), &d, NULL, &err), BATON_EINVAL, "NULL data: %s",
                 err.message);
}

/* ---- numel -------------------------------------------------------------------------------------
 */

Test(tensor_desc, numel_reports_overflow_instead_of_wrapping)
{
    baton_tensor_desc wrap = {
        .dtype = BATON_DTYPE_F32, .rank = 2, .shape = {INT64_C(4611686018427387905), 4}};
    cr_expect_eq(baton_tensor_desc_numel(&wrap), -1);
    baton_tensor_desc zero = {
        .dtype = BATON_DTYPE_F32, .rank = 3, .shape = {INT64_C(4611686018427387905), 4, 0}};
    cr_expect_eq(baton_tensor_desc_numel(&zero), 0);
    baton_tensor_desc neg = {.dtype = BATON_DTYPE_F32, .rank = 2, .shape = {3, -1}};
    cr_expect_eq(baton_tensor_desc_numel(&neg), -1);
    baton_tensor_desc deep = {.dtype = BATON_DTYPE_F32, .rank = BATON_MAX_RANK + 1};
    cr_expect_eq(baton_tensor_desc_numel(&deep), -1);
    baton_tensor_desc scalar = {.dtype = BATON_DTYPE_F32, .rank = 0};
    cr_expect_eq(baton_tensor_desc_numel(&scalar), 1);
    baton_tensor_desc max = {
        .dtype = BATON_DTYPE_F32, .rank = 2, .shape = {INT64_C(4611686018427387903), 2}};
    cr_expect_eq(baton_tensor_desc_numel(&max), INT64_C(9223372036854775806));
}

/* ---- what plan loading makes of it ------------------------------------------------------------
 */

static const char plan_text[] =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"npy\",\n"
    " \"tensors\": [\n"
    "  {\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [2], \"role\": \"input\"},\n"
    "  {\"name\": \"w\", \"dtype\": \"f32\", \"shape\": [2], \"role\": \"constant\",\n"
    "   \"init\": {\"kind\": \"npy\", \"path\": \"w.npy\"}},\n"
    "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [2], \"role\": \"output\"}],\n"
    " \"steps\": [{\"name\": \"s\", \"kernel\": \"add\", \"device\": \"cpu\",\n"
    "             \"inputs\": [\"x\", \"w\"], \"outputs\": [\"y\"]}]}\n";

/* Loads plan_text from tmpdir/plan.json and expects BATON_EIO naming the plan, the tensor and
 * the npy file, with `want`. */
static void expect_plan_eio(const char *want)
{
    write_raw("plan.json", plan_text, sizeof plan_text - 1);
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = baton_plan_load(reg, tmp("plan.json"), &plan, &err);
    cr_expect_eq(rc, BATON_EIO, "rc %d: %s", rc, err.message);
    cr_expect_null(plan);
    char where[300];
    snprintf(where, sizeof where, "%s:5:", tmp("plan.json"));
    cr_expect(strncmp(err.message, where, strlen(where)) == 0, "does not start with %s: %s", where,
              err.message);
    cr_expect(strstr(err.message, "'w'") != NULL, "no tensor name in: %s", err.message);
    cr_expect(strstr(err.message, tmp("w.npy")) != NULL, "no npy path in: %s", err.message);
    cr_expect(strstr(err.message, want) != NULL, "no \"%s\" in: %s", want, err.message);
    baton_plan_free(plan);
}

Test(npy_plan, loads_a_good_npy_constant)
{
    static const float w[2] = {0.5f, -2};
    write_npy("w.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", w, 8);
    write_raw("plan.json", plan_text, sizeof plan_text - 1);
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_plan_load(reg, tmp("plan.json"), &plan, &err), 0, "%s", err.message);
    baton_plan_free(plan);
}

Test(npy_plan, refuses_a_fifo_as_a_constant_without_blocking)
{
    cr_assert_eq(mkfifo(tmp("w.npy"), 0600), 0);
    expect_plan_eio("is a FIFO, not a regular file");
}

Test(npy_plan, reports_a_malformed_constant_as_eio_naming_plan_and_tensor)
{
    static const float w[2];
    write_npy("w.npy", 1, "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,), }", w, 8);
    expect_plan_eio("True or False");
}

Test(npy_plan, reports_an_oversized_constant_as_eio_not_enomem)
{
    write_npy("w.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (274877906944,), }",
              NULL, 0);
    expect_plan_eio("but the file holds 0");
}

Test(npy_plan, refuses_a_fifo_as_the_plan_path_without_blocking)
{
    cr_assert_eq(mkfifo(tmp("fifo.json"), 0600), 0);
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_expect_eq(baton_plan_load(reg, tmp("fifo.json"), &plan, &err), BATON_EIO, "%s", err.message);
    cr_expect(strstr(err.message, "is a FIFO, not a regular file: give the path of a plan file") !=
                  NULL,
              "%s", err.message);
    cr_expect_null(plan);
}

Test(npy_plan, refuses_a_directory_as_the_plan_path)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_expect_eq(baton_plan_load(reg, tmpdir, &plan, &err), BATON_EIO, "%s", err.message);
    cr_expect(strstr(err.message, "is a directory, not a regular file") != NULL, "%s", err.message);
}
