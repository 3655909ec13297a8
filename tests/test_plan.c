/* test_plan.c: the plan file: good plans load, every bad plan under tests/data/bad fails with the
 * message its .expect file names (code, file:line:column, what), dataflow and signature rules,
 * suggestions, verbatim descriptors, accessors, and constants' initial values (reproducible bits,
 * checked against an independent implementation of the documented algorithm). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delegates/gemm.h"
#include "kernels/decoder_desc.h"
#include "kernels/descriptors.h"
#include "kernels/gemv_fused.h"
#include "core/dtype.h"
#include "plan/plan_internal.h"
#include "tests/support.h"

static baton_registry *reg;

static void setup(void)
{
    cr_assert_eq(baton_registry_create(&reg), 0);
}

static void teardown(void)
{
    baton_registry_destroy(reg);
}

TestSuite(plan_load, .init = setup, .fini = teardown);
TestSuite(plan_init, .init = setup, .fini = teardown);
TestSuite(plan_suggest);

/* ---- helpers --------------------------------------------------------------------------------- */

static int load_text(const char *text, baton_plan **plan, baton_error *err)
{
    return baton_plan_load_string(reg, text, strlen(text), "inline.json", NULL, plan, err);
}

/* A plan with the given tensors and steps (JSON array bodies). */
static char *plan_text(const char *tensors, const char *steps)
{
    const char *fmt = "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"t\",\n"
                      "\"tensors\": [%s],\n\"steps\": [%s]}";
    size_t n = strlen(fmt) + strlen(tensors) + strlen(steps) + 1;
    char *s = malloc(n);
    cr_assert_not_null(s);
    snprintf(s, n, fmt, tensors, steps);
    return s;
}

/* Loads a plan that must fail with `code` and a message containing `want`. */
static void expect_failure(const char *tensors, const char *steps, int code, const char *want)
{
    char *text = plan_text(tensors, steps);
    baton_plan *plan = (baton_plan *)0x1;
    baton_error err = {0};
    int rc = load_text(text, &plan, &err);
    cr_expect_eq(rc, code, "rc %d (%s), want %d; message: %s", rc, baton_strerror(rc), code,
                 err.message);
    cr_expect_null(plan, "a failed load leaves *out NULL");
    cr_expect(strstr(err.message, want) != NULL, "message \"%s\" lacks \"%s\"", err.message, want);
    free(text);
}

static baton_plan *load_ok(const char *tensors, const char *steps)
{
    char *text = plan_text(tensors, steps);
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = load_text(text, &plan, &err);
    cr_assert_eq(rc, 0, "load failed: %s", err.message);
    free(text);
    return plan;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names of *.json files in a directory, sorted. */
static int list_json(const char *dir, char ***out)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot open %s", dir);
    int n = 0, cap = 16;
    char **names = malloc((size_t)cap * sizeof *names);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        if (n == cap)
            names = realloc(names, (size_t)(cap *= 2) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    *out = names;
    return n;
}

static const char *const X_Y = "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                               "\"input\"},"
                               "{\"name\": \"h\", \"dtype\": \"f32\", \"shape\": [4]},"
                               "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                               "\"output\"}";

/* ---- good and bad plan files ----------------------------------------------------------------- */

Test(plan_load, loads_every_good_plan)
{
    char **names;
    int n = list_json(test_path("tests/data/good"), &names);
    cr_assert_geq(n, 4, "tests/data/good holds %d plans", n);
    for (int i = 0; i < n; i++) {
        char rel[512];
        snprintf(rel, sizeof rel, "tests/data/good/%s", names[i]);
        baton_plan *plan = NULL;
        baton_error err = {0};
        int rc = baton_plan_load(reg, test_path(rel), &plan, &err);
        cr_expect_eq(rc, 0, "%s: %s", names[i], err.message);
        cr_expect(plan == NULL || baton_plan_step_count(plan) > 0);
        baton_plan_free(plan);
        free(names[i]);
    }
    free(names);
}

static int code_of(const char *name)
{
    static const int codes[] = {BATON_EINVAL, BATON_ENOMEM,    BATON_EIO,   BATON_EPARSE,
                                BATON_EPLAN,  BATON_ENOTARGET, BATON_ENODEV};
    static const char *const names[] = {"BATON_EINVAL", "BATON_ENOMEM", "BATON_EIO",
                                        "BATON_EPARSE", "BATON_EPLAN",  "BATON_ENOTARGET",
                                        "BATON_ENODEV"};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strcmp(name, names[i]) == 0)
            return codes[i];
    return 1;
}

Test(plan_load, rejects_every_bad_plan_with_the_message_its_expect_file_names)
{
    char **names;
    int n = list_json(test_path("tests/data/bad"), &names);
    cr_assert_geq(n, 40, "tests/data/bad holds only %d plans", n);
    /* numbered 01, 02, ... without a gap, so a case deleted by mistake is noticed */
    int have[1000] = {0};
    for (int i = 0; i < n; i++) {
        int k = atoi(names[i]);
        cr_assert(k >= 1 && k < 1000, "%s: bad plans are named NN-what.json", names[i]);
        have[k]++;
    }
    for (int k = 1; k <= n; k++)
        cr_expect_eq(have[k], 1, "tests/data/bad: %d plan(s) numbered %02d", have[k], k);
    for (int i = 0; i < n; i++) {
        char rel[512], want_code[64] = "", want[1024] = "";
        snprintf(rel, sizeof rel, "tests/data/bad/%.*s.expect", (int)strlen(names[i]) - 5,
                 names[i]);
        FILE *f = fopen(test_path(rel), "r");
        cr_assert_not_null(f, "%s has no .expect file", names[i]);
        cr_assert_not_null(fgets(want_code, sizeof want_code, f), "%s: empty .expect", rel);
        cr_assert_not_null(fgets(want, sizeof want, f), "%s: no message line", rel);
        fclose(f);
        want_code[strcspn(want_code, "\n")] = 0;
        want[strcspn(want, "\n")] = 0;
        cr_assert_gt(strlen(want), 10, "%s: the expected message is too short to mean much", rel);

        snprintf(rel, sizeof rel, "tests/data/bad/%s", names[i]);
        baton_plan *plan = (baton_plan *)0x1;
        baton_error err = {0};
        int rc = baton_plan_load(reg, test_path(rel), &plan, &err);
        cr_expect_eq(rc, code_of(want_code), "%s: got %s, want %s; message: %s", names[i],
                     baton_strerror(rc), want_code, err.message);
        cr_expect_eq(err.code, rc, "%s: err.code repeats the return value", names[i]);
        cr_expect_null(plan, "%s: *out must be NULL after a failure", names[i]);
        cr_expect(strstr(err.message, want) != NULL, "%s:\n  message: %s\n  lacks:   %s", names[i],
                  err.message, want);
        baton_plan_free(plan == (baton_plan *)0x1 ? NULL : plan);
        free(names[i]);
    }
    free(names);
}

Test(plan_load, reports_a_missing_file_with_its_path)
{
    baton_plan *plan = (baton_plan *)0x1;
    baton_error err = {0};
    int rc = baton_plan_load(reg, "/nonexistent/dir/plan.json", &plan, &err);
    cr_expect_eq(rc, BATON_EIO);
    cr_expect_null(plan);
    cr_expect(strstr(err.message, "/nonexistent/dir/plan.json") != NULL, "%s", err.message);
    cr_expect(strstr(err.message, "No such file") != NULL, "%s", err.message);
}

Test(plan_load, rejects_null_arguments_without_crashing)
{
    baton_plan *plan = (baton_plan *)0x1;
    baton_error err = {0};
    cr_expect_eq(baton_plan_load(NULL, "x.json", &plan, &err), BATON_EINVAL);
    cr_expect_null(plan);
    cr_expect_eq(baton_plan_load(reg, NULL, &plan, &err), BATON_EINVAL);
    cr_expect_eq(baton_plan_load(reg, "x.json", NULL, &err), BATON_EINVAL);
    cr_expect_eq(baton_plan_load_string(reg, NULL, 0, NULL, NULL, &plan, &err), BATON_EINVAL);
    /* err may be NULL */
    cr_expect_eq(baton_plan_load_string(reg, "{", 1, NULL, NULL, &plan, NULL), BATON_EPARSE);
    baton_plan_free(NULL);
}

Test(plan_load, names_a_string_source_in_parse_errors)
{
    baton_plan *plan;
    baton_error err;
    const char *text = "{\n  \"format\": \"baton.plan\",\n  \"version\": 1 1\n}";
    cr_assert_eq(baton_plan_load_string(reg, text, strlen(text), NULL, NULL, &plan, &err),
                 BATON_EPARSE);
    cr_expect(strncmp(err.message, "<string>:3:", 11) == 0, "%s", err.message);
    cr_expect(strstr(err.message, "JSON syntax error") != NULL, "%s", err.message);
}

Test(plan_load, parses_only_the_given_length)
{
    /* A valid plan followed by bytes the caller did not pass. */
    char *text = plan_text(X_Y, "{\"name\": \"s\", \"kernel\": \"copy\", \"device\": \"cpu\", "
                                "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}");
    size_t len = strlen(text);
    char *buf = malloc(len + 8);
    memcpy(buf, text, len);
    memcpy(buf + len, "garbage", 8);
    baton_plan *plan = NULL;
    baton_error err;
    cr_expect_eq(baton_plan_load_string(reg, buf, len, "b.json", NULL, &plan, &err), 0, "%s",
                 err.message);
    baton_plan_free(plan);
    free(buf);
    free(text);
}

/* ---- positions and accessors ----------------------------------------------------------------- */

Test(plan_load, records_the_line_and_column_of_every_tensor_and_step)
{
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(baton_plan_load(reg, test_path("tests/data/good/rfc-demo.json"), &plan, &err), 0,
                 "%s", err.message);
    /* tensors start at column 5 on lines 4, 5, 7, 9, 10, 11, 12; steps on 15, 16, 18 */
    static const int tline[] = {4, 5, 7, 9, 10, 11, 12};
    for (int i = 0; i < 7; i++) {
        cr_expect_eq(plan->tensors[i].pos.line, tline[i], "tensor %d", i);
        cr_expect_eq(plan->tensors[i].pos.column, 5, "tensor %d", i);
    }
    static const int sline[] = {15, 16, 18};
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(plan->steps[i].pos.line, sline[i], "step %d", i);
        cr_expect_eq(plan->steps[i].pos.column, 5, "step %d", i);
    }
    /* "kernel": "rms_norm_fwd" on line 16 */
    cr_expect_eq(plan->steps[1].target_pos.line, 16);
    cr_expect_eq(plan->steps[1].target_pos.column, 32);
    baton_plan_free(plan);
}

Test(plan_load, answers_accessors_by_name_and_index)
{
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(baton_plan_load(reg, test_path("tests/data/good/rfc-demo.json"), &plan, &err), 0,
                 "%s", err.message);
    cr_expect_str_eq(baton_plan_name(plan), "rfc-demo");
    cr_expect_eq(baton_plan_tensor_count(plan), 7);
    cr_expect_eq(baton_plan_step_count(plan), 3);
    cr_expect_eq(baton_plan_tensor_index(plan, "inv"), 5);
    cr_expect_eq(baton_plan_tensor_index(plan, "nope"), BATON_ENOENT);
    cr_expect_eq(baton_plan_tensor_index(plan, NULL), BATON_EINVAL);
    cr_expect_eq(baton_plan_step_index(plan, "post"), 2);
    cr_expect_eq(baton_plan_step_index(plan, "x"), BATON_ENOENT);

    baton_tensor_info ti;
    cr_assert_eq(baton_plan_tensor_info(plan, 1, &ti), 0);
    cr_expect_str_eq(ti.name, "A");
    cr_expect_eq(ti.desc.dtype, BATON_DTYPE_BF16);
    cr_expect_eq(ti.desc.rank, 2);
    cr_expect_eq(ti.desc.shape[1], 4096);
    cr_expect_eq(ti.role, BATON_ROLE_CONSTANT);
    cr_expect_eq(ti.nbytes, (size_t)4096 * 4096 * 2);
    cr_expect_eq(baton_plan_tensor_info(plan, 7, &ti), BATON_ENOENT);
    cr_expect_eq(baton_plan_tensor_info(plan, -1, &ti), BATON_ENOENT);

    baton_step_info si;
    cr_assert_eq(baton_plan_step_info(plan, 0, &si), 0);
    cr_expect_str_eq(si.name, "proj");
    cr_expect_str_eq(si.target, "gemm");
    cr_expect_eq(si.kind, BATON_TARGET_DELEGATE);
    cr_expect_eq(si.device.kind, BATON_DEVICE_CUDA);
    cr_expect_eq(si.next_device.kind, BATON_DEVICE_CUDA);
    cr_expect_eq(si.next_kind, BATON_TARGET_KERNEL);
    cr_assert_eq(baton_plan_step_info(plan, 2, &si), 0);
    cr_expect_eq(si.device.kind, BATON_DEVICE_CPU);
    cr_expect_eq(si.next_device.kind, BATON_DEVICE_NONE);
    cr_expect_eq(baton_plan_step_info(plan, 3, &si), BATON_ENOENT);
    cr_expect_eq(baton_plan_step_info(NULL, 0, &si), BATON_EINVAL);
    baton_plan_free(plan);
}

Test(plan_load, finds_names_in_a_large_plan)
{
    /* 3000 chained copies: exercises the name index well past its first size */
    size_t cap = 1 << 20, used = 0;
    char *t = malloc(cap), *s = malloc(cap);
    used = (size_t)snprintf(t, cap,
                            "{\"name\": \"t0\", \"dtype\": \"f32\", \"shape\": [2], \"role\": "
                            "\"input\"}");
    size_t sused = 0;
    for (int i = 1; i <= 3000; i++) {
        used += (size_t)snprintf(t + used, cap - used,
                                 ",{\"name\": \"t%d\", \"dtype\": \"f32\", \"shape\": [2]%s}", i,
                                 i == 3000 ? ", \"role\": \"output\"" : "");
        sused += (size_t)snprintf(s + sused, cap - sused,
                                  "%s{\"name\": \"s%d\", \"kernel\": \"copy\", \"device\": "
                                  "\"cpu\", \"inputs\": [\"t%d\"], \"outputs\": [\"t%d\"]}",
                                  i > 1 ? "," : "", i, i - 1, i);
    }
    baton_plan *plan = load_ok(t, s);
    for (int i = 0; i <= 3000; i += 7) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        cr_expect_eq(baton_plan_tensor_index(plan, name), i);
        snprintf(name, sizeof name, "s%d", i + 1);
        if (i < 3000)
            cr_expect_eq(baton_plan_step_index(plan, name), i);
    }
    cr_expect_eq(plan->tensors[2999].producer, 2998);
    cr_expect_eq(plan->tensors[2999].first_read, 2999);
    cr_expect_eq(plan->steps[2999].pos.line, 3);
    baton_plan_free(plan);
    free(t);
    free(s);
}

/* 2^levels names that FNV-1a (the index's hash until issue 9) puts in one slot of any table of up
 * to 2^20 slots. FNV-1a's low bits depend only on the low bits of its state, so two 5-character
 * blocks that collide there from a common state can stand for each other, and one such pair per
 * level, chosen by a birthday search, combines into 2^levels colliding names of 5 * levels
 * characters. Returns the names, one after another, each 5 * levels + 1 bytes. */
static char *fnv_colliding_names(int levels)
{
    const uint32_t mask = (1u << 20) - 1;
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    char(*pair)[2][6] = calloc((size_t)levels, sizeof *pair);
    uint32_t *seen = malloc((mask + 1) * sizeof *seen); /* block number + 1 by low bits */
    cr_assert(pair && seen);
    uint32_t h = 2166136261u;
    for (int lev = 0; lev < levels; lev++) {
        memset(seen, 0, (mask + 1) * sizeof *seen);
        for (uint32_t c = 0;; c++) {
            char b[6];
            uint32_t x = c, v = h;
            for (int k = 0; k < 5; k++, x /= 36) {
                b[k] = alpha[x % 36];
                v = (v ^ (unsigned char)b[k]) * 16777619u;
            }
            b[5] = 0;
            uint32_t *slot = &seen[v & mask];
            if (*slot) {
                uint32_t y = *slot - 1;
                for (int k = 0; k < 5; k++, y /= 36)
                    pair[lev][0][k] = alpha[y % 36];
                memcpy(pair[lev][1], b, 6);
                h = v; /* the other block leaves the same low bits */
                break;
            }
            *slot = c + 1;
        }
    }
    size_t w = (size_t)5 * (size_t)levels + 1, n = (size_t)1 << levels;
    char *names = malloc(n * w);
    cr_assert_not_null(names);
    for (size_t i = 0; i < n; i++)
        for (int lev = 0; lev < levels; lev++)
            memcpy(names + i * w + (size_t)lev * 5, pair[lev][(i >> lev) & 1],
                   lev + 1 < levels ? 5 : 6);
    free(pair);
    free(seen);
    return names;
}

/* A plan whose names were made to share a hash slot: with a fixed hash every lookup scanned all
 * names before it, so this plan took minutes to load (16,384 names: 2.5 s; this is 8 times as
 * many). The timeout is about 100 times what the load takes with a keyed hash. */
Test(plan_load, loads_names_made_to_collide_under_a_fixed_hash, .timeout = 30)
{
    const int levels = 17, n = 1 << levels, w = 5 * levels + 1;
    char *names = fnv_colliding_names(levels);
    size_t cap = (size_t)n * (2 * (size_t)w + 160), tl = 0, sl = 0;
    char *t = malloc(cap), *s = malloc(cap);
    cr_assert(t && s);
    for (int i = 0; i < n; i++) {
        tl += (size_t)snprintf(t + tl, cap - tl,
                               "%s{\"name\": \"%s\", \"dtype\": \"f32\", \"shape\": [2]%s}\n",
                               i ? "," : "", names + (size_t)i * w,
                               i == 0       ? ", \"role\": \"input\""
                               : i == n - 1 ? ", \"role\": \"output\""
                                            : "");
        if (i > 0)
            sl += (size_t)snprintf(s + sl, cap - sl,
                                   "%s{\"name\": \"s%d\", \"kernel\": \"copy\", \"device\": "
                                   "\"cpu\", \"inputs\": [\"%s\"], \"outputs\": [\"%s\"]}\n",
                                   i > 1 ? "," : "", i, names + (size_t)(i - 1) * w,
                                   names + (size_t)i * w);
    }
    baton_plan *plan = load_ok(t, s);
    for (int i = 0; i < n; i++)
        cr_assert_eq(baton_plan_tensor_index(plan, names + (size_t)i * w), i, "name %d", i);
    cr_expect_eq(plan->tensors[n - 1].producer, n - 2);
    baton_plan_free(plan);
    free(names);
    free(t);
    free(s);
}

/* ---- dataflow -------------------------------------------------------------------------------- */

/* The dataflow errors (a tensor read before or never written, written twice, an input or
 * constant written, read and written by one step, an output never written) are the data-driven
 * cases tests/data/bad/57-63, with their messages in the .expect files. */

Test(plan_load, accepts_unused_tensors_and_a_tensor_read_twice)
{
    baton_plan *plan = load_ok("{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                               "\"input\"},"
                               "{\"name\": \"unused\", \"dtype\": \"i64\", \"shape\": [9]},"
                               "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                               "\"output\"}",
                               "{\"name\": \"a\", \"kernel\": \"add\", \"device\": \"cpu\", "
                               "\"inputs\": [\"x\", \"x\"], \"outputs\": [\"y\"]}");
    cr_expect_eq(plan->tensors[1].producer, -1);
    cr_expect_eq(plan->tensors[1].first_read, -1);
    cr_expect_eq(plan->tensors[0].first_read, 0);
    cr_expect_eq(plan->tensors[0].last_read, 0);
    cr_expect_eq(plan->tensors[2].producer, 0);
    baton_plan_free(plan);
}

Test(plan_load, fills_producers_and_readers)
{
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(baton_plan_load(reg, test_path("tests/data/good/rfc-demo.json"), &plan, &err), 0,
                 "%s", err.message);
    int h0 = baton_plan_tensor_index(plan, "h0"), h1 = baton_plan_tensor_index(plan, "h1");
    int x = baton_plan_tensor_index(plan, "x"), w = baton_plan_tensor_index(plan, "w");
    cr_expect_eq(plan->tensors[h0].producer, 0);
    cr_expect_eq(plan->tensors[h0].first_read, 1);
    cr_expect_eq(plan->tensors[h1].producer, 1);
    cr_expect_eq(plan->tensors[h1].last_read, 2);
    cr_expect_eq(plan->tensors[x].producer, -1);
    cr_expect_eq(plan->tensors[w].first_read, 1);
    cr_expect_eq(plan->steps[1].target, baton_registry_find(reg, "rms_norm_fwd"));
    baton_plan_free(plan);
}

/* ---- targets, signatures, attributes --------------------------------------------------------- */

Test(plan_load, lists_registered_kernels_for_an_unknown_one)
{
    expect_failure(X_Y,
                   "{\"name\": \"a\", \"kernel\": \"rms_norm_fw\", \"device\": \"cpu\", "
                   "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}",
                   BATON_ENOTARGET,
                   "inline.json:3:35: step 'a': no kernel named 'rms_norm_fw' is registered (did "
                   "you mean 'rms_norm_fwd'?); kernels on cpu: ");
    expect_failure(X_Y,
                   "{\"name\": \"a\", \"delegate\": \"gem\", \"device\": \"cpu\", "
                   "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}",
                   BATON_ENOTARGET, "(did you mean 'gemm'?); delegates on cpu: gemm");
}

static int fake_kernel(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return 0;
}

static int same_as_input(const baton_sig_args *a, baton_tensor_desc *expected, char *msg,
                         size_t len)
{
    expected[0] = a->inputs[0];
    return 0;
}

Test(plan_load, rejects_a_step_on_a_device_its_target_does_not_run_on)
{
    baton_target t = {.struct_size = sizeof(baton_target),
                      .name = "cuda_only",
                      .kind = BATON_TARGET_KERNEL,
                      .n_inputs = 1,
                      .n_outputs = 1,
                      .summary = "y = x on a GPU",
                      .check = same_as_input,
                      .impls = {{.device = BATON_DEVICE_CUDA, .kernel = fake_kernel}},
                      .n_impls = 1};
    baton_error err;
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
    expect_failure(X_Y,
                   "{\"name\": \"a\", \"kernel\": \"cuda_only\", \"device\": \"cpu\", "
                   "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}",
                   BATON_ENOTARGET,
                   "inline.json:3:58: step 'a': kernel 'cuda_only' has no implementation for "
                   "cpu; it runs on: cuda");
    /* and it is not offered for the CPU either */
    expect_failure(X_Y,
                   "{\"name\": \"a\", \"kernel\": \"cuda_onl\", \"device\": \"cpu\", "
                   "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}",
                   BATON_ENOTARGET, "is registered; kernels on cpu: ");
}

Test(plan_load, accepts_cuda_steps_in_a_build_that_falls_back_to_the_cpu)
{
    baton_plan *plan = load_ok(X_Y, "{\"name\": \"a\", \"kernel\": \"copy\", \"device\": "
                                    "\"cuda:3\", \"inputs\": [\"x\"], \"outputs\": [\"y\"]}");
    cr_expect_eq(plan->steps[0].device.kind, BATON_DEVICE_CUDA);
    cr_expect_eq(plan->steps[0].device.index, 3);
    baton_plan_free(plan);
}

Test(plan_load, checks_declared_outputs_against_the_target)
{
    /* rms_norm_fwd: x [8,64] bf16, weight [64] bf16 -> y bf16 [8,64], invvar f32 [8] */
    const char *tensors =
        "{\"name\": \"x\", \"dtype\": \"bf16\", \"shape\": [8, 64], \"role\": \"input\"},"
        "{\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": [64], \"role\": \"input\"},"
        "{\"name\": \"y\", \"dtype\": \"bf16\", \"shape\": [8, 64], \"role\": \"output\"},"
        "{\"name\": \"inv\", \"dtype\": \"bf16\", \"shape\": [8], \"role\": \"output\"}";
    expect_failure(tensors,
                   "{\"name\": \"n\", \"kernel\": \"rms_norm_fwd\", \"device\": \"cpu\", "
                   "\"inputs\": [\"x\", \"w\"], \"outputs\": [\"y\", \"inv\"]}",
                   BATON_EPLAN,
                   "step 'n': output 'inv' is declared bf16[8] but kernel 'rms_norm_fwd' "
                   "produces f32[8] here");
}

Test(plan_load, packs_the_descriptor_of_a_checked_step)
{
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(baton_plan_load(reg, test_path("tests/data/good/rfc-demo.json"), &plan, &err), 0,
                 "%s", err.message);
    const plan_step *s = &plan->steps[1];
    cr_assert_eq(s->opaque_len, sizeof(baton_rms_norm_desc));
    cr_expect_eq(s->opaque_verbatim, 0);
    baton_rms_norm_desc d;
    memcpy(&d, s->opaque, sizeof d);
    cr_expect_eq(d.n1, 8);
    cr_expect_eq(d.n2, 4096);
    cr_expect_eq(d.eps, 1e-5);
    cr_expect_eq(d.x_dtype, BATON_DTYPE_BF16);
    baton_plan_free(plan);
}

Test(plan_load, checks_attributes_against_the_target)
{
    const char *step = "{\"name\": \"a\", \"kernel\": \"add_scalar\", \"device\": \"cpu\", "
                       "\"inputs\": [\"x\"], \"outputs\": [\"y\"], \"attrs\": %s}";
    char buf[512];
    snprintf(buf, sizeof buf, step, "{\"value\": 2, \"scale\": 1}");
    expect_failure(X_Y, buf, BATON_EPLAN,
                   "step 'a': kernel 'add_scalar' takes no attribute 'scale'; accepted: value");
    snprintf(buf, sizeof buf, step, "{}");
    expect_failure(X_Y, buf, BATON_EPLAN, "needs attribute 'value', a number");
    snprintf(buf, sizeof buf, step, "{\"value\": null}");
    expect_failure(X_Y, buf, BATON_EPLAN, "attribute 'value' must be an integer, a number");
    /* an integer is a valid float attribute */
    snprintf(buf, sizeof buf, step, "{\"value\": 2}");
    char *text = plan_text(X_Y, buf);
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(load_text(text, &plan, &err), 0, "%s", err.message);
    cr_expect_eq(plan->steps[0].attrs[0].type, BATON_ATTR_INT);
    cr_expect_eq(plan->steps[0].attrs[0].f, 2.0);
    baton_ew_desc d;
    memcpy(&d, plan->steps[0].opaque, sizeof d);
    cr_expect_eq(d.value, 2.0);
    baton_plan_free(plan);
    free(text);
}

/* ---- opaque ---------------------------------------------------------------------------------- */

Test(plan_load, passes_opaque_hex_through_verbatim)
{
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(baton_plan_load(reg, test_path("tests/data/good/opaque.json"), &plan, &err), 0,
                 "%s", err.message);
    const plan_step *s = &plan->steps[0];
    cr_expect_eq(s->opaque_verbatim, 1);
    cr_assert_eq(s->opaque_len, 32);
    baton_ew_desc d;
    memcpy(&d, s->opaque, sizeof d);
    cr_expect_eq(d.n, 6);
    cr_expect_eq(d.nb, 0);
    cr_expect_eq(d.dtype, BATON_DTYPE_F32);
    cr_expect_eq(d.value, 0.5);
    baton_plan_free(plan);

    plan = load_ok(X_Y, "{\"name\": \"a\", \"kernel\": \"noop\", \"device\": \"cpu\", "
                        "\"inputs\": [\"x\"], \"outputs\": [\"y\"], \"opaque\": \"00fFa5\"}");
    cr_assert_eq(plan->steps[0].opaque_len, 3);
    cr_expect_eq((unsigned char)plan->steps[0].opaque[0], 0x00);
    cr_expect_eq((unsigned char)plan->steps[0].opaque[1], 0xff);
    cr_expect_eq((unsigned char)plan->steps[0].opaque[2], 0xa5);
    baton_plan_free(plan);

    plan = load_ok(X_Y, "{\"name\": \"a\", \"kernel\": \"noop\", \"device\": \"cpu\", "
                        "\"inputs\": [\"x\"], \"outputs\": [\"y\"], \"opaque\": \"\"}");
    cr_expect_eq(plan->steps[0].opaque_len, 0);
    cr_expect_eq(plan->steps[0].opaque_verbatim, 1);
    baton_plan_free(plan);
}

Test(plan_load, accepts_an_opaque_of_exactly_the_maximum_size)
{
    char hex[2 * BATON_OPAQUE_MAX + 1], step[2 * BATON_OPAQUE_MAX + 256];
    for (int i = 0; i < BATON_OPAQUE_MAX; i++)
        snprintf(hex + 2 * i, 3, "%02x", i & 0xff);
    snprintf(step, sizeof step,
             "{\"name\": \"a\", \"kernel\": \"noop\", \"device\": \"cpu\", \"inputs\": [\"x\"], "
             "\"outputs\": [\"y\"], \"opaque\": \"%s\"}",
             hex);
    /* noop reads no descriptor, so any bytes pass its check; copy's would be decoded */
    baton_plan *plan = load_ok(X_Y, step);
    cr_assert_eq(plan->steps[0].opaque_len, BATON_OPAQUE_MAX);
    cr_expect_eq((unsigned char)plan->steps[0].opaque[255], 0xff);
    baton_plan_free(plan);
}

/* ---- suggestions ----------------------------------------------------------------------------- */

static const char *best_of(const char *word, const char *const *cands, int n)
{
    plan_suggest s;
    baton__plan_suggest_init(&s, word);
    for (int i = 0; i < n; i++)
        baton__plan_suggest_try(&s, cands[i]);
    return baton__plan_suggest_best(&s);
}

Test(plan_suggest, finds_the_closest_word_within_a_small_distance)
{
    static const char *const keys[] = {"name",   "kernel",  "delegate", "device",
                                       "inputs", "outputs", "attrs",    "opaque"};
    cr_expect_str_eq(best_of("ouputs", keys, 8), "outputs");
    cr_expect_str_eq(best_of("inptus", keys, 8), "inputs"); /* a transposition counts 1 */
    cr_expect_str_eq(best_of("Device", keys, 8), "device"); /* case alone */
    cr_expect_str_eq(best_of("delgate", keys, 8), "delegate");
    cr_expect_null(best_of("zzzzzz", keys, 8));
    cr_expect_null(best_of("nam", (const char *const[]){"xyz"}, 1));
    static const char *const short_names[] = {"y", "h0"};
    cr_expect_null(best_of("x", short_names, 2), "one letter against another is no match");
    cr_expect_str_eq(best_of("h9", short_names, 2), "h0");
    static const char *const dtypes[] = {"bf16", "f16", "f32", "f64", "i32", "i64"};
    cr_expect_str_eq(best_of("bf61", dtypes, 6), "bf16");
    cr_expect_str_eq(best_of("float32", (const char *const[]){"f32", "float32x"}, 2), "float32x");
    /* very long words are not compared */
    char long_word[200];
    memset(long_word, 'a', sizeof long_word - 1);
    long_word[sizeof long_word - 1] = 0;
    cr_expect_null(best_of(long_word, keys, 8));
}

/* ---- constants' initial values --------------------------------------------------------------- */

static baton_plan *load_inits(void)
{
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(baton_plan_load(reg, test_path("tests/data/good/inits.json"), &plan, &err), 0,
                 "%s", err.message);
    return plan;
}

static void *materialize(baton_plan *plan, const char *name)
{
    int i = baton_plan_tensor_index(plan, name);
    cr_assert_geq(i, 0, "no tensor %s", name);
    void *buf = malloc(plan->tensors[i].nbytes + 1);
    test_poison(buf, plan->tensors[i].nbytes + 1);
    baton_error err;
    cr_assert_eq(baton__plan_tensor_materialize(plan, i, buf, &err), 0, "%s", err.message);
    cr_expect_eq(((unsigned char *)buf)[plan->tensors[i].nbytes], 0xff, "wrote past the end");
    return buf;
}

static uint64_t bits(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

Test(plan_init, fills_every_element_rounded_to_the_dtype)
{
    baton_plan *plan = load_inits();
    uint16_t *b = materialize(plan, "fill_bf16");
    for (int i = 0; i < 15; i++)
        cr_expect_eq(b[i], f32_to_bf16(0.1f), "element %d", i);
    int32_t *n = materialize(plan, "fill_i32");
    for (int i = 0; i < 7; i++)
        cr_expect_eq(n[i], -3);
    free(b);
    free(n);
    baton_plan_free(plan);
}

Test(plan_init, draws_normal_values_with_the_documented_algorithm)
{
    /* The first values of seed 42, mean 1, std 2, from an independent implementation of
     * docs/plan-format.md (Python, float64). */
    static const uint64_t want[] = {0x3ffd45625aa37a84ull, 0x40027161dd7db1caull,
                                    0xbfe914a9e9d234f6ull, 0x400d3ab5d4785914ull,
                                    0x4011d634e6a0a15eull, 0xc0062279a49132e7ull};
    baton_plan *plan = load_inits();
    double *v = materialize(plan, "normal_f64");
    for (int i = 0; i < 6; i++)
        cr_expect_eq(bits(v[i]), want[i], "element %d: %a", i, v[i]);
    /* and the same numbers as textbook Box-Muller with the C library, to rounding */
    uint64_t state = 42;
    test_rng r = {state};
    for (int i = 0; i < 1000; i += 2) {
        double u1 = (double)((test_rng_next(&r) >> 11) + 1) * 0x1p-53;
        double u2 = (double)(test_rng_next(&r) >> 11) * 0x1p-53;
        double rad = sqrt(-2.0 * log(u1));
        double z0 = 1.0 + 2.0 * rad * cos(2 * M_PI * u2), z1 = 1.0 + 2.0 * rad * sin(2 * M_PI * u2);
        cr_expect_leq(fabs(v[i] - z0), 1e-13 * (1 + fabs(z0)), "element %d: %.17g vs %.17g", i,
                      v[i], z0);
        cr_expect_leq(fabs(v[i + 1] - z1), 1e-13 * (1 + fabs(z1)), "element %d", i + 1);
    }
    /* the sample looks like N(1, 2^2) */
    double sum = 0, sq = 0;
    for (int i = 0; i < 1001; i++)
        sum += v[i];
    double mean = sum / 1001;
    for (int i = 0; i < 1001; i++)
        sq += (v[i] - mean) * (v[i] - mean);
    cr_expect_leq(fabs(mean - 1.0), 0.25, "mean %g", mean);
    cr_expect_leq(fabs(sqrt(sq / 1000) - 2.0), 0.2, "std %g", sqrt(sq / 1000));
    /* f32 of the same init is the f64 sequence rounded, including the odd last element */
    float *f = materialize(plan, "normal_f32");
    for (int i = 0; i < 7; i++)
        cr_expect_eq(f[i], (float)v[i], "element %d", i);
    free(f);
    free(v);
    baton_plan_free(plan);
}

Test(plan_init, gives_the_same_bits_every_time)
{
    baton_plan *a = load_inits(), *b = load_inits();
    static const char *const names[] = {"normal_f64", "normal_f16", "uniform_f64", "uniform_i64",
                                        "fill_bf16"};
    for (int k = 0; k < 5; k++) {
        void *x = materialize(a, names[k]), *y = materialize(b, names[k]),
             *z = materialize(a, names[k]);
        size_t n = a->tensors[baton_plan_tensor_index(a, names[k])].nbytes;
        cr_expect_eq(memcmp(x, y, n), 0, "%s differs between loads", names[k]);
        cr_expect_eq(memcmp(x, z, n), 0, "%s differs between calls", names[k]);
        free(x);
        free(y);
        free(z);
    }
    baton_plan_free(a);
    baton_plan_free(b);
}

Test(plan_init, draws_uniform_values_from_splitmix64)
{
    /* splitmix64 seeded with 0 yields 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4,
     * 0x06c45d188009454f: the published first outputs */
    static const uint64_t sm[] = {0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull,
                                  0x06c45d188009454full};
    baton_plan *plan = load_inits();
    double *u = materialize(plan, "uniform_f64");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(u[i], (double)(sm[i] >> 11) * 0x1p-53, "element %d", i);
    for (int i = 0; i < 16; i++)
        cr_expect(u[i] >= 0 && u[i] < 1);
    int64_t *k = materialize(plan, "uniform_i64");
    int seen_negative = 0, seen_positive = 0;
    for (int i = 0; i < 100; i++) {
        cr_expect(k[i] >= -10 && k[i] < 10, "element %d = %lld", i, (long long)k[i]);
        seen_negative |= k[i] < 0;
        seen_positive |= k[i] > 0;
    }
    cr_expect(seen_negative && seen_positive);
    free(u);
    free(k);
    baton_plan_free(plan);
}

/* The fills are one splitmix64 stream whose k-th value comes from the state seed + k * gamma, so
 * element k on (the pair starting at an even k, for normal) equals element 0 of the fill seeded
 * seed + k * gamma. Large fills run in stretches over the CPU pool: offsets past several stretches
 * must keep that identity. */
Test(plan_init, large_fills_keep_the_one_stream)
{
    static const int64_t offs[] = {131072, 262146, 1000002};
    const uint64_t gamma = 0x9e3779b97f4a7c15ull, seed = 7;
    for (size_t t = 0; t < sizeof offs / sizeof offs[0]; t++) {
        const int64_t k = offs[t], n = k + 4;
        double *big = malloc(sizeof(double) * (size_t)n), small[4];
        cr_assert(big);
        cr_assert_eq(baton_fill_normal(big, BATON_DTYPE_F64, n, seed, 0.5, 2.0), 0);
        cr_assert_eq(
            baton_fill_normal(small, BATON_DTYPE_F64, 4, seed + (uint64_t)k * gamma, 0.5, 2.0), 0);
        cr_expect_eq(memcmp(big + k, small, sizeof small), 0, "normal fill at %lld", (long long)k);
        cr_assert_eq(baton_fill_uniform(big, BATON_DTYPE_F64, n, seed, -1.0, 3.0), 0);
        cr_assert_eq(baton_fill_uniform(small, BATON_DTYPE_F64, 3, seed + (uint64_t)(k + 1) * gamma,
                                        -1.0, 3.0),
                     0);
        cr_expect_eq(memcmp(big + k + 1, small, 3 * sizeof(double)), 0, "uniform fill at %lld",
                     (long long)k + 1);
        free(big);
    }
}

Test(plan_init, copies_npy_and_inline_values)
{
    baton_plan *plan = load_inits();
    float *n = materialize(plan, "npy_f32");
    cr_expect_eq(n[0], 0.5f);
    cr_expect_eq(n[1], -1.25f);
    cr_expect_eq(n[2], 3.0f);
    cr_expect_eq(n[3], 1e-3f);
    float *v = materialize(plan, "values_f32");
    cr_expect_eq(v[0], 1.0f);
    cr_expect_eq(v[1], -2.5f);
    cr_expect_eq(v[2], 3e-3f);
    cr_expect_eq(v[3], 4.0f);
    double *s = materialize(plan, "scalar");
    cr_expect_eq(s[0], 6.25);
    cr_expect_eq(plan->tensors[baton_plan_tensor_index(plan, "scalar")].nbytes, 8);
    free(n);
    free(v);
    free(s);
    baton_plan_free(plan);
}

Test(plan_init, refuses_tensors_that_are_not_constants)
{
    baton_plan *plan = load_inits();
    char buf[64];
    baton_error err;
    cr_expect_eq(
        baton__plan_tensor_materialize(plan, baton_plan_tensor_index(plan, "x"), buf, &err),
        BATON_EINVAL);
    cr_expect(strstr(err.message, "tensor 'x' is not a constant") != NULL, "%s", err.message);
    cr_expect_eq(baton__plan_tensor_materialize(plan, 99, buf, &err), BATON_EINVAL);
    cr_expect_eq(baton__plan_tensor_materialize(plan, 0, NULL, &err), BATON_EINVAL);
    baton_plan_free(plan);
}

Test(plan_init, keeps_integer_draws_in_range)
{
    baton_plan *plan = load_ok("{\"name\": \"c\", \"dtype\": \"i32\", \"shape\": [64], \"role\": "
                               "\"constant\", \"init\": {\"kind\": \"normal\", \"seed\": 1, "
                               "\"std\": 1e300}},"
                               "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                               "\"input\"},"
                               "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                               "\"output\"}",
                               "{\"name\": \"a\", \"kernel\": \"copy\", \"device\": \"cpu\", "
                               "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}");
    int32_t *c = materialize(plan, "c");
    int extremes = 0;
    for (int i = 0; i < 64; i++)
        extremes += c[i] == INT32_MAX || c[i] == INT32_MIN || c[i] == 0;
    cr_expect_eq(extremes, 64, "huge draws saturate");
    free(c);
    baton_plan_free(plan);
}

Test(plan_load, rejects_inline_values_outside_the_dtype)
{
    const char *steps = "{\"name\": \"a\", \"kernel\": \"copy\", \"device\": \"cpu\", "
                        "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}";
    char t[512];
    const char *fmt = "%s, {\"name\": \"c\", \"dtype\": \"%s\", \"shape\": [], \"role\": "
                      "\"constant\", \"init\": %s}";
    snprintf(t, sizeof t, fmt, X_Y, "i32", "{\"kind\": \"fill\", \"value\": 2147483648}");
    expect_failure(t, steps, BATON_EPLAN,
                   "tensor 'c': value 2.14748e+09 is out of the range of i32");
    snprintf(t, sizeof t, fmt, X_Y, "i64", "{\"kind\": \"fill\", \"value\": 9.3e18}");
    expect_failure(t, steps, BATON_EPLAN, "is out of the range of i64");
    snprintf(t, sizeof t, fmt, X_Y, "i64",
             "{\"kind\": \"values\", \"values\": [9007199254740993]}");
    expect_failure(t, steps, BATON_EPLAN, "value 9007199254740993 is beyond 2^53");
    snprintf(t, sizeof t, fmt, X_Y, "f32", "{\"kind\": \"fill\", \"value\": 1e39}");
    expect_failure(t, steps, BATON_EPLAN, "value 1e+39 overflows f32");
    snprintf(t, sizeof t, fmt, X_Y, "f64",
             "{\"kind\": \"uniform\", \"seed\": 1, \"low\": -1e308, \"high\": 1e308}");
    expect_failure(t, steps, BATON_EPLAN, "is wider than a double can hold");
    snprintf(t, sizeof t, fmt, X_Y, "i32", "{\"kind\": \"fill\", \"value\": 2147483647}");
    baton_plan *plan = load_ok(t, steps);
    int32_t *c = materialize(plan, "c");
    cr_expect_eq(c[0], INT32_MAX);
    free(c);
    baton_plan_free(plan);
}

/* ---- the loader's JSON parser agrees with Jansson ------------------------------------------- */

/* Whether baton calls the text malformed exactly when Jansson (JSON_REJECT_DUPLICATES) does. */
static void expect_same_verdict(const char *text, size_t len, const char *what)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = baton_plan_load_string(reg, text, len, "j.json", NULL, &plan, &err);
    json_error_t jerr;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    cr_expect_eq(rc == BATON_EPARSE, j == NULL, "%s: baton %s (%s), Jansson %s (%s)", what,
                 rc == BATON_EPARSE ? "rejects" : "accepts", err.message, j ? "accepts" : "rejects",
                 j ? "" : jerr.text);
    /* Jansson's wording, except where it names its own flag: a NUL escape says the rule */
    const char *flag = j ? NULL : strstr(jerr.text, "without JSON_ALLOW_NUL");
    if (rc == BATON_EPARSE && !j && !flag)
        cr_expect(strstr(err.message, jerr.text) != NULL, "%s: message %s lacks Jansson's %s", what,
                  err.message, jerr.text);
    if (rc == BATON_EPARSE && flag)
        cr_expect(strstr(err.message, "NUL character") && !strstr(err.message, "JSON_ALLOW_NUL"),
                  "%s: %s", what, err.message);
    json_decref(j);
    baton_plan_free(plan);
}

Test(plan_load, parses_json_exactly_as_jansson_does)
{
    static const char *const cases[] = {"{}",
                                        "[]",
                                        " \t\r\n{} \n",
                                        "{} x",
                                        "{}{}",
                                        "",
                                        "   ",
                                        "1",
                                        "\"s\"",
                                        "null",
                                        "{\"a\":}",
                                        "{\"a\" 1}",
                                        "{\"a\":1,}",
                                        "[1,]",
                                        "[,1]",
                                        "{,}",
                                        "[1 2]",
                                        "{\"a\":1 \"b\":2}",
                                        "[-]",
                                        "[-0]",
                                        "[01]",
                                        "[-01]",
                                        "[1.]",
                                        "[.5]",
                                        "[1e]",
                                        "[1e+]",
                                        "[1E-2]",
                                        "[1.5e3]",
                                        "[+1]",
                                        "[0x10]",
                                        "[1e400]",
                                        "[-1e400]",
                                        "[1e-400]",
                                        "[9223372036854775807]",
                                        "[9223372036854775808]",
                                        "[-9223372036854775808]",
                                        "[-9223372036854775809]",
                                        "[true]",
                                        "[tru]",
                                        "[truex]",
                                        "[true1]",
                                        "[True]",
                                        "[nul]",
                                        "[null,false]",
                                        "[NaN]",
                                        "[Infinity]",
                                        "[\"a\\u0041\"]",
                                        "[\"\\u00e9\"]",
                                        "[\"\\ud83d\\ude00\"]",
                                        "[\"\\ud83d\"]",
                                        "[\"\\ud83dx\"]",
                                        "[\"\\ude00\"]",
                                        "[\"\\u0000\"]",
                                        "[\"\\u00\"]",
                                        "[\"\\uZZZZ\"]",
                                        "[\"\\x\"]",
                                        "[\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"]",
                                        "[\"tab\there\"]",
                                        "[\"\xc3\xa9\"]",
                                        "[\"\xc3\"]",
                                        "[\"\xc0\x80\"]",
                                        "[\"\xed\xa0\x80\"]",
                                        "[\"\xf4\x90\x80\x80\"]",
                                        "[\"\xf0\x9f\x98\x80\"]",
                                        "[\"\xe0\x80\xaf\"]",
                                        "[\xc3\xa9]",
                                        "\xef\xbb\xbf{}",
                                        "{\"a\":1,\"a\":2}",
                                        "{\"a\":1,\"b\":{\"a\":2}}",
                                        "{\"\\u0061\":1,\"a\":2}",
                                        "[\"unterminated",
                                        "{\"a\":[1,2,{\"b\":null}]}",
                                        "[\f]",
                                        "[1]\x00",
                                        "\x7f"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_same_verdict(cases[i], strlen(cases[i]), cases[i]);
    /* an embedded NUL, passed by length */
    expect_same_verdict("[\"a\0b\"]", 7, "NUL inside a string");
    expect_same_verdict("[1]\0", 4, "NUL after the value");
    /* the one known difference: Jansson skips a NUL right after a number; baton rejects it */
    baton_plan *plan = NULL;
    baton_error err;
    cr_expect_eq(baton_plan_load_string(reg, "[4, 8\0]", 7, "j.json", NULL, &plan, &err),
                 BATON_EPARSE);
    cr_expect(strstr(err.message, "j.json:1:6: JSON syntax error: NUL byte in the text") != NULL,
              "%s", err.message);

    /* duplicate keys in a large object (sorted check) and a large object without them */
    char big[4096];
    size_t n = 0;
    n += (size_t)snprintf(big + n, sizeof big - n, "{");
    for (int k = 0; k < 40; k++)
        n += (size_t)snprintf(big + n, sizeof big - n, "%s\"k%d\": %d", k ? "," : "", k, k);
    snprintf(big + n, sizeof big - n, "}");
    expect_same_verdict(big, strlen(big), "40 distinct keys");
    snprintf(big + n, sizeof big - n, ",\"k17\": 0}");
    expect_same_verdict(big, strlen(big), "40 keys and a duplicate");

    /* the depth limit: 2048 nested values parse, 2049 do not (scalars count too) */
    static char deep[2 * 2100 + 8];
    for (int d = 2046; d <= 2050; d++) {
        for (int with_scalar = 0; with_scalar < 2; with_scalar++) {
            size_t k = 0;
            for (int i = 0; i < d; i++)
                deep[k++] = '[';
            if (with_scalar)
                deep[k++] = '1';
            for (int i = 0; i < d; i++)
                deep[k++] = ']';
            char what[64];
            snprintf(what, sizeof what, "%d nested arrays%s", d,
                     with_scalar ? " and a scalar" : "");
            expect_same_verdict(deep, k, what);
        }
    }
}

/* ---- a plan's own descriptor ("opaque") ------------------------------------------------------
 * The kernels trust the bytes, so load decodes each built-in target's descriptor and compares it
 * with the step's tensors: a mismatch is refused in validate, naming the step, the field and
 * both values (issue 38: a copy of f32[4] saying 2^20 elements wrote past the arena). */

TestSuite(plan_opaque, .init = setup, .fini = teardown);

static void hex_of(const void *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", ((const unsigned char *)p)[i]);
    out[2 * n] = 0;
}

/* A one-step plan of `kernel` ("delegate:<name>" for a delegate) over `tensors` with the
 * descriptor bytes as its "opaque". */
static char *opaque_plan(const char *tensors, const char *kernel, const char *ins, const char *outs,
                         const char *attrs, const void *desc, size_t n)
{
    char hex[2 * BATON_OPAQUE_MAX + 1], step[4096];
    const int delegate = strncmp(kernel, "delegate:", 9) == 0;
    hex_of(desc, n, hex);
    snprintf(step, sizeof step,
             "{\"name\": \"s\", \"%s\": \"%s\", \"device\": \"cpu\", \"inputs\": [%s], "
             "\"outputs\": [%s]%s%s, \"opaque\": \"%s\"}",
             delegate ? "delegate" : "kernel", kernel + (delegate ? 9 : 0), ins, outs,
             attrs ? ", \"attrs\": " : "", attrs ? attrs : "", hex);
    return plan_text(tensors, step);
}

static void opaque_refused(const char *tensors, const char *kernel, const char *ins,
                           const char *outs, const char *attrs, const void *desc, size_t n,
                           const char *want)
{
    char *text = opaque_plan(tensors, kernel, ins, outs, attrs, desc, n);
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = load_text(text, &plan, &err);
    cr_expect_eq(rc, BATON_EPLAN, "%s: rc %d, message %s", kernel, rc, err.message);
    cr_expect(strstr(err.message, "step 's'") && strstr(err.message, want),
              "%s: message \"%s\" lacks \"%s\"", kernel, err.message, want);
    baton_plan_free(plan);
    free(text);
}

static baton_plan *opaque_loads(const char *tensors, const char *kernel, const char *ins,
                                const char *outs, const char *attrs, const void *desc, size_t n)
{
    char *text = opaque_plan(tensors, kernel, ins, outs, attrs, desc, n);
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(load_text(text, &plan, &err), 0, "%s: %s", kernel, err.message);
    free(text);
    return plan;
}

static const char *const EW4 =
    "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"}, "
    "{\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"}, "
    "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}";

Test(plan_opaque, refuses_elementwise_descriptors_that_disagree_with_the_tensors)
{
    const baton_ew_desc ok = {.n = 4, .dtype = BATON_DTYPE_F32};
    baton_plan_free(opaque_loads(EW4, "copy", "\"x\"", "\"y\"", NULL, &ok, sizeof ok));
    baton_ew_desc d = ok;
    d.n = 1048576; /* the overrun */
    opaque_refused(EW4, "copy", "\"x\"", "\"y\"", NULL, &d, sizeof d,
                   "\"opaque\" field n is 1048576 but x 'x' f32 [4] has 4 elements");
    d.n = 5; /* a small one corrupts silently */
    opaque_refused(EW4, "add_scalar", "\"x\"", "\"y\"", "{\"value\": 0}", &d, sizeof d,
                   "field n is 5 but");
    d = ok;
    d.dtype = BATON_DTYPE_F64;
    opaque_refused(EW4, "copy", "\"x\"", "\"y\"", NULL, &d, sizeof d,
                   "field dtype is code 4 (f64) but x 'x' is f32 (code 3)");
    d = ok;
    d.nb = 4;
    opaque_refused(EW4, "add", "\"x\", \"b\"", "\"y\"", NULL, &ok, sizeof ok, "nb is 0 but n");
    d.nb = 2;
    opaque_refused(EW4, "mul", "\"x\", \"b\"", "\"y\"", NULL, &d, sizeof d,
                   "field nb is 2 but b 'b' f32 [4] has 4 elements");
    d = ok;
    d.value = 1e300;
    opaque_refused(EW4, "softshrink", "\"x\"", "\"y\"", NULL, &d, sizeof d, "overflows to inf");
    opaque_refused(EW4, "copy", "\"x\"", "\"y\"", NULL, &d, sizeof d,
                   "field value is 1e+300 but this kernel takes no scalar");
    d.value = 2;
    opaque_refused(EW4, "add_scalar", "\"x\"", "\"y\"", "{\"value\": 1}", &d, sizeof d,
                   "field value is 2 but attribute value is 1");
    d.value = -1;
    opaque_refused(EW4, "softshrink", "\"x\"", "\"y\"", NULL, &d, sizeof d, "must be >= 0");
    d = ok;
    d.reserved = 7;
    opaque_refused(EW4, "copy", "\"x\"", "\"y\"", NULL, &d, sizeof d, "reserved (bytes 20-23)");
    opaque_refused(EW4, "copy", "\"x\"", "\"y\"", NULL, &ok, sizeof ok - 1,
                   "the descriptor is 31 bytes but must be 32");
}

static const char *const RMS_T =
    "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [6, 8], \"role\": \"input\"}, "
    "{\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": [8], \"role\": \"input\"}, "
    "{\"name\": \"y\", \"dtype\": \"bf16\", \"shape\": [6, 8], \"role\": \"output\"}, "
    "{\"name\": \"iv\", \"dtype\": \"f32\", \"shape\": [6], \"role\": \"output\"}";

static const char *const RMS_BWD_T =
    "{\"name\": \"g\", \"dtype\": \"bf16\", \"shape\": [6, 8], \"role\": \"input\"}, "
    "{\"name\": \"iv\", \"dtype\": \"f32\", \"shape\": [6], \"role\": \"input\"}, "
    "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [6, 8], \"role\": \"input\"}, "
    "{\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": [8], \"role\": \"input\"}, "
    "{\"name\": \"gx\", \"dtype\": \"f32\", \"shape\": [6, 8], \"role\": \"output\"}, "
    "{\"name\": \"gw\", \"dtype\": \"bf16\", \"shape\": [8], \"role\": \"output\"}, "
    "{\"name\": \"pg\", \"dtype\": \"f32\", \"shape\": [3, 8], \"role\": \"output\"}";

Test(plan_opaque, refuses_rms_norm_descriptors_that_disagree_with_the_tensors)
{
    const char *in = "\"x\", \"w\"", *out = "\"y\", \"iv\"";
    const baton_rms_norm_desc ok = {6, 8, 1e-5, BATON_DTYPE_F32, BATON_DTYPE_BF16, 0};
    baton_plan_free(opaque_loads(RMS_T, "rms_norm_fwd", in, out, NULL, &ok, sizeof ok));
    baton_rms_norm_desc d = ok;
    d.n1 = 7;
    opaque_refused(RMS_T, "rms_norm_fwd", in, out, NULL, &d, sizeof d,
                   "field n1 is 7 but x 'x' f32 [6, 8] has 6 rows");
    d = ok;
    d.n2 = 1 << 20;
    opaque_refused(RMS_T, "rms_norm_fwd", in, out, NULL, &d, sizeof d,
                   "field n2 is 1048576 but weight 'w' bf16 [8] has 8 elements");
    d = ok;
    d.w_dtype = BATON_DTYPE_F32;
    opaque_refused(RMS_T, "rms_norm_fwd", in, out, NULL, &d, sizeof d,
                   "field w_dtype is code 3 (f32) but weight 'w' is bf16 (code 1)");
    d = ok;
    d.eps = -1;
    opaque_refused(RMS_T, "rms_norm_fwd", in, out, NULL, &d, sizeof d, "eps is -1");
    d.eps = 1e-3;
    opaque_refused(RMS_T, "rms_norm_fwd", in, out, "{\"eps\": 1e-5}", &d, sizeof d,
                   "field eps is 0.001 but attribute eps is 1.0000000000000001e-05");

    const char *bin = "\"g\", \"iv\", \"x\", \"w\"", *bout = "\"gx\", \"gw\", \"pg\"";
    baton_rms_norm_shard_desc b = {{6, 8, 1e-5, BATON_DTYPE_F32, BATON_DTYPE_BF16, 3}, 0};
    baton_plan_free(opaque_loads(RMS_BWD_T, "rms_norm_bwd", bin, bout, NULL, &b, sizeof b.rms));
    b.rms.part_grad_size = 4096; /* part_grad holds 3 rows */
    opaque_refused(RMS_BWD_T, "rms_norm_bwd", bin, bout, NULL, &b, sizeof b.rms,
                   "field part_grad_size is 4096 but part_grad 'pg' [3, 8] has 3 rows");
    b.rms.part_grad_size = 3;
    b.unsharded_part_grad_size = 2;
    opaque_refused(RMS_BWD_T, "rms_norm_bwd", bin, bout, NULL, &b, sizeof b,
                   "unsharded_part_grad_size is 2: it must be 0 or >= part_grad_size (3)");
    b.unsharded_part_grad_size = 6;
    baton_plan_free(opaque_loads(RMS_BWD_T, "rms_norm_bwd", bin, bout, NULL, &b, sizeof b));
    opaque_refused(RMS_BWD_T, "rms_norm_bwd", bin, bout, "{\"unsharded_part_grad_size\": 12}", &b,
                   sizeof b, "unsharded_part_grad_size is 6 but attribute");

    const char *gw_t = "{\"name\": \"pg\", \"dtype\": \"f32\", \"shape\": [3, 8], \"role\": "
                       "\"input\"}, {\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": [8], "
                       "\"role\": \"input\"}, {\"name\": \"gw\", \"dtype\": \"bf16\", \"shape\": "
                       "[8], \"role\": \"output\"}";
    baton_rms_grad_weight_desc g = {3, 8, BATON_DTYPE_F32, BATON_DTYPE_BF16};
    baton_plan_free(
        opaque_loads(gw_t, "rms_norm_grad_weight", "\"pg\", \"w\"", "\"gw\"", NULL, &g, sizeof g));
    g.part_grad_size = 300;
    opaque_refused(gw_t, "rms_norm_grad_weight", "\"pg\", \"w\"", "\"gw\"", NULL, &g, sizeof g,
                   "field part_grad_size is 300 but part_grad 'pg' f32 [3, 8] has 3 rows");
    g.part_grad_size = 3;
    g.pg_dtype = BATON_DTYPE_F64;
    opaque_refused(gw_t, "rms_norm_grad_weight", "\"pg\", \"w\"", "\"gw\"", NULL, &g, sizeof g,
                   "field pg_dtype is code 4 (f64) but part_grad 'pg' is f32");

    const char *am_t = "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4, 8], \"role\": "
                       "\"input\"}, {\"name\": \"y\", \"dtype\": \"i64\", \"shape\": [4], "
                       "\"role\": \"output\"}";
    baton_argmax_desc am = {4, 8, BATON_DTYPE_F32, 0};
    baton_plan_free(opaque_loads(am_t, "argmax", "\"x\"", "\"y\"", NULL, &am, sizeof am));
    am.n1 = 40;
    opaque_refused(am_t, "argmax", "\"x\"", "\"y\"", NULL, &am, sizeof am,
                   "field n1 is 40 but x 'x' f32 [4, 8] has 4 rows");
}

/* The JAX tutorial's RMSNormDescriptor, as its C++ lays it out: {int n1; int n2; double eps;
 * ElementType x_type, w_type; int part_grad_size;}, ElementType {BF16, F16, F32, F64}. */
static baton_rms_norm_tutorial_desc tutorial_desc(int n1, int n2, double eps, int xt, int wt,
                                                  int pgs)
{
    baton_rms_norm_tutorial_desc t;
    memset(&t, 0xAB, sizeof t); /* the padding holds whatever the tutorial's stack held */
    t.n1 = n1;
    t.n2 = n2;
    t.eps = eps;
    t.x_type = xt;
    t.w_type = wt;
    t.part_grad_size = pgs;
    return t;
}

/* The tutorial's bytes run and give the bits that baton's own descriptor gives. */
static void run_fwd(baton_plan *plan, const float *x, const uint16_t *w, uint16_t *y, float *iv)
{
    baton_runtime *rt = test_runtime(plan, BATON_GPU_CPU, BATON_SYNC_STRICT, 0, 0);
    baton_error err;
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, 48 * sizeof(float), &err), 0, "%s",
                 err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "w", w, 8 * sizeof(uint16_t), &err), 0, "%s",
                 err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, 48 * sizeof(uint16_t), &err), 0);
    cr_assert_eq(baton_runtime_get_output(rt, "iv", iv, 6 * sizeof(float), &err), 0);
    baton_runtime_destroy(rt);
}

Test(plan_opaque, accepts_the_jax_tutorials_32_byte_descriptor)
{
    const char *in = "\"x\", \"w\"", *out = "\"y\", \"iv\"";
    baton_rms_norm_tutorial_desc t = tutorial_desc(6, 8, 1e-5, 2 /* F32 */, 0 /* BF16 */, 16);
    baton_plan *tut = opaque_loads(RMS_T, "rms_norm_fwd", in, out, NULL, &t, sizeof t);
    const baton_rms_norm_desc own = {6, 8, 1e-5, BATON_DTYPE_F32, BATON_DTYPE_BF16, 0};
    baton_plan *mine = opaque_loads(RMS_T, "rms_norm_fwd", in, out, NULL, &own, sizeof own);
    test_rng r = {test_fresh_seed()};
    float x[48], iv1[6], iv2[6];
    uint16_t w[8], y1[48], y2[48];
    test_fill_random(&r, BATON_DTYPE_F32, x, 48, 1.0);
    test_fill_random(&r, BATON_DTYPE_BF16, w, 8, 1.0);
    test_poison(y1, sizeof y1);
    test_poison(y2, sizeof y2);
    run_fwd(tut, x, w, y1, iv1);
    run_fwd(mine, x, w, y2, iv2);
    cr_expect(memcmp(y1, y2, sizeof y1) == 0 && memcmp(iv1, iv2, sizeof iv1) == 0,
              "the tutorial's descriptor gives other bits than baton's");
    baton_plan_free(tut);
    baton_plan_free(mine);

    /* and it is checked like baton's */
    t = tutorial_desc(6, 9, 1e-5, 2, 0, 16);
    opaque_refused(RMS_T, "rms_norm_fwd", in, out, NULL, &t, sizeof t,
                   "field n2 is 9 but weight 'w' bf16 [8] has 8 elements");
    t = tutorial_desc(6, 8, 1e-5, 3 /* F64 */, 0, 16);
    opaque_refused(RMS_T, "rms_norm_fwd", in, out, NULL, &t, sizeof t,
                   "field x_type is ElementType 3 (f64) but x 'x' is f32 (ElementType 2)");
    t = tutorial_desc(6, 8, 1e-5, 2, 7, 16);
    opaque_refused(RMS_T, "rms_norm_fwd", in, out, NULL, &t, sizeof t,
                   "w_type is ElementType 7 in the tutorial's 32-byte descriptor");
    const char *bin = "\"g\", \"iv\", \"x\", \"w\"", *bout = "\"gx\", \"gw\", \"pg\"";
    t = tutorial_desc(6, 8, 1e-5, 2, 0, 3);
    baton_plan_free(opaque_loads(RMS_BWD_T, "rms_norm_bwd", bin, bout, NULL, &t, sizeof t));
    t = tutorial_desc(6, 8, 1e-5, 2, 0, 16);
    opaque_refused(RMS_BWD_T, "rms_norm_bwd", bin, bout, NULL, &t, sizeof t,
                   "field part_grad_size is 16 but part_grad 'pg'");
}

/* The decoder targets (targets/decoder.c) check a plan's descriptor at load too: the bytes baton
 * packs load back, one byte short or of another op is refused in validate. */
Test(plan_opaque, the_decoder_targets_check_a_plans_descriptor_at_load)
{
    const char *t =
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [2, 8], \"role\": \"input\"}, "
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [2, 8], \"role\": \"output\"}";
    baton_plan *packed =
        load_ok(t, "{\"name\": \"s\", \"kernel\": \"softmax\", \"device\": \"cpu\", "
                   "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}");
    const size_t n = packed->steps[0].opaque_len;
    cr_assert_gt(n, 1);
    char bytes[BATON_OPAQUE_MAX];
    memcpy(bytes, packed->steps[0].opaque, n);
    baton_plan_free(packed);
    baton_plan_free(opaque_loads(t, "softmax", "\"x\"", "\"y\"", NULL, bytes, n));
    opaque_refused(t, "softmax", "\"x\"", "\"y\"", NULL, bytes, n - 1, "softmax");
    opaque_refused(t, "silu", "\"x\"", "\"y\"", NULL, bytes, n, "silu");
}

/* A decoder descriptor's unused fields are 0 and each field whose attribute the step also gives
 * holds its value, as RMSNorm's eps: without the check, an attention step's bytes saying 4 heads
 * of 4 where its attributes say 2 of 8 would run with 4 of 4 (q's 16 features and the caches' 8
 * fit both), and a rope's scale 0.5 where its attribute says 1 would run with 0.5. */
Test(plan_opaque, decoder_descriptors_agree_with_the_attributes_and_leave_unused_fields_0)
{
    const char *at =
        "{\"name\": \"q\", \"dtype\": \"f32\", \"shape\": [2, 16], \"role\": \"input\"}, "
        "{\"name\": \"k\", \"dtype\": \"f32\", \"shape\": [8, 8], \"role\": \"input\"}, "
        "{\"name\": \"v\", \"dtype\": \"f32\", \"shape\": [8, 8], \"role\": \"input\"}, "
        "{\"name\": \"p\", \"dtype\": \"i64\", \"shape\": [2], \"role\": \"input\"}, "
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [2, 16], \"role\": \"output\"}";
    const char *ain = "\"q\", \"k\", \"v\", \"p\"",
               *heads = "{\"head_dim\": 8, \"n_heads\": 2, \"n_kv_heads\": 1}";
    baton_decoder_desc a = {
        .op = DEC_ATTENTION, .head_dim = 4, .n_heads = 4, .n_kv_heads = 2, .scale = 0.5};
    baton_plan_free(opaque_loads(at, "attention", ain, "\"y\"",
                                 "{\"head_dim\": 4, \"n_heads\": 4, \"n_kv_heads\": 2}", &a,
                                 sizeof a));
    opaque_refused(at, "attention", ain, "\"y\"", heads, &a, sizeof a,
                   "\"opaque\" field head_dim is 4 but attribute head_dim is 8: give one, or the "
                   "same value in both");

    const char *t =
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [2, 16], \"role\": \"input\"}, "
        "{\"name\": \"p\", \"dtype\": \"i64\", \"shape\": [2], \"role\": \"input\"}, "
        "{\"name\": \"f\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"}, "
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [2, 16], \"role\": \"output\"}";
    const char *in = "\"x\", \"p\", \"f\"", *attrs = "{\"head_dim\": 8}";
    const baton_decoder_desc ok = {.op = DEC_ROPE, .head_dim = 8, .scale = 1};
    baton_plan_free(opaque_loads(t, "rope", in, "\"y\"", attrs, &ok, sizeof ok));
    baton_decoder_desc d = ok;
    d = ok;
    d.flags = DEC_FLAG_INTERLEAVED;
    opaque_refused(t, "rope", in, "\"y\"", "{\"head_dim\": 8, \"interleaved\": false}", &d,
                   sizeof d, "flags say interleaved true but attribute interleaved is false");
    d = ok;
    d.scale = 0.5;
    baton_plan_free(opaque_loads(t, "rope", in, "\"y\"", attrs, &d, sizeof d)); /* no attribute */
    opaque_refused(t, "rope", in, "\"y\"", "{\"head_dim\": 8, \"scale\": 1}", &d, sizeof d,
                   "field scale is 0.5 but attribute scale is 1");
    d = ok;
    d.top_p = 0.5; /* a sampler's field */
    opaque_refused(t, "rope", in, "\"y\"", attrs, &d, sizeof d,
                   "rope: field top_p is not 0 but rope does not use it");

    const char *st =
        "{\"name\": \"l\", \"dtype\": \"f32\", \"shape\": [2, 11], \"role\": \"input\"}, "
        "{\"name\": \"k\", \"dtype\": \"i64\", \"shape\": [1], \"role\": \"input\"}, "
        "{\"name\": \"y\", \"dtype\": \"i64\", \"shape\": [2], \"role\": \"output\"}";
    baton_decoder_desc smp = {
        .op = DEC_SAMPLE, .top_k = 3, .temperature = 1, .top_p = 1, .seed = 7};
    baton_plan_free(
        opaque_loads(st, "sample", "\"l\", \"k\"", "\"y\"", "{\"seed\": 7}", &smp, sizeof smp));
    smp.seed = 8;
    opaque_refused(st, "sample", "\"l\", \"k\"", "\"y\"", "{\"seed\": 7}", &smp, sizeof smp,
                   "\"opaque\" field seed is 8 but attribute seed is 7");
    smp.seed = 7;
    smp.head_dim = 64;
    opaque_refused(st, "sample", "\"l\", \"k\"", "\"y\"", NULL, &smp, sizeof smp,
                   "sample: field head_dim is not 0");
}

/* The GEMV fusions' and the gemm delegates' descriptors: padding 0, eps the attribute's; a gemm's
 * bytes are exactly the ones baton packs (its backends resolve the step from its tensors). */
Test(plan_opaque, gemm_and_gemv_fusion_descriptors_are_the_ones_baton_packs)
{
    const char *t =
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [2, 8], \"role\": \"input\"}, "
        "{\"name\": \"g\", \"dtype\": \"f32\", \"shape\": [8], \"role\": \"input\"}, "
        "{\"name\": \"w\", \"dtype\": \"f32\", \"shape\": [4, 8], \"role\": \"input\"}, "
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [2, 4], \"role\": \"output\"}";
    const char *in = "\"x\", \"g\", \"w\"";
    baton_gemv_fused_desc gf = {.op = GF_RMS_NORM_GEMM, .eps = 1e-5};
    baton_plan_free(
        opaque_loads(t, "rms_norm_gemm", in, "\"y\"", "{\"eps\": 1e-5}", &gf, sizeof gf));
    gf.eps = 1e-6;
    opaque_refused(t, "rms_norm_gemm", in, "\"y\"", "{\"eps\": 1e-5}", &gf, sizeof gf,
                   "\"opaque\" field eps is 9.9999999999999995e-07 but attribute eps is "
                   "1.0000000000000001e-05");
    gf.eps = 1e-5;
    gf.pad = 3;
    opaque_refused(t, "rms_norm_gemm", in, "\"y\"", "{\"eps\": 1e-5}", &gf, sizeof gf,
                   "bytes 4 to 7 are 3");

    const char *gt =
        "{\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [3, 8], \"role\": \"input\"}, "
        "{\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [4, 8], \"role\": \"input\"}, "
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [3, 4], \"role\": \"output\"}";
    const char *gin = "\"a\", \"b\"", *tb = "{\"trans_b\": true}";
    const baton_gemm_desc ok = {3, 4, 8, BATON_DTYPE_F32, BATON_GEMM_TRANS_B, 1.0, 0.0};
    baton_plan_free(opaque_loads(gt, "delegate:gemm", gin, "\"y\"", tb, &ok, sizeof ok));
    baton_gemm_desc d = ok;
    d.k = 1 << 20;
    opaque_refused(gt, "delegate:gemm", gin, "\"y\"", tb, &d, sizeof d,
                   "\"opaque\" field k is 1048576 but the step's tensors and attributes give 8");
    d = ok;
    d.flags = 0;
    opaque_refused(gt, "delegate:gemm", gin, "\"y\"", tb, &d, sizeof d, "field flags is 0 but");
    d = ok;
    d.alpha = 2;
    opaque_refused(gt, "delegate:gemm", gin, "\"y\"", tb, &d, sizeof d,
                   "field alpha is 2 but the step's tensors and attributes give 1");
    opaque_refused(gt, "delegate:gemm", gin, "\"y\"", tb, &ok, sizeof ok - 8,
                   "\"opaque\" is 40 bytes but a gemm descriptor is 48");
}
