/* test_plugin.c: plugins (baton_registry_load_plugin): the example plugin's kernel runs in a plan
 * beside built-ins and gives the reference results; a library that is missing, is no plugin, or
 * whose init fails is a clear error and leaves the registry as it was. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support.h"

Test(plugin, the_example_plugin_runs_beside_built_ins)
{
    baton_registry *reg;
    baton_error err;
    cr_assert_eq(baton_registry_create(&reg), 0);
    int before = baton_registry_count(reg);
    cr_assert_eq(baton_registry_load_plugin(reg, BATON_TEST_PLUGIN, &err), 0, "%s", err.message);
    cr_assert_eq(baton_registry_count(reg), before + 1);
    cr_assert_not_null(baton_registry_find(reg, "example.scale"));
    /* again: nothing happens */
    cr_assert_eq(baton_registry_load_plugin(reg, BATON_TEST_PLUGIN, &err), 0, "%s", err.message);
    cr_assert_eq(baton_registry_count(reg), before + 1);
    baton_plan *p;
    cr_assert_eq(baton_plan_load(reg, test_path("examples/plugin/scale_plan.json"), &p, &err), 0,
                 "%s", err.message);
    baton_registry_destroy(reg); /* the plan keeps it, and the plugin, alive */
    enum { R = 4, C = 256 };
    static float x[R * C], w[R * C], y[R * C];
    test_rng r = {test_fresh_seed()};
    test_fill_random(&r, BATON_DTYPE_F32, x, R * C, 1.0);
    cr_assert_eq(baton_fill_normal(w, BATON_DTYPE_F32, C, 5, 1.0, 0.1), 0);
    for (int m = 0; m < 3; m++) {
        baton_options o;
        baton_options_init(&o);
        o.mode = (baton_sync_mode)m;
        o.gpu = test_cuda_devices() ? BATON_GPU_CUDA : BATON_GPU_SIM;
        baton_runtime *rt;
        cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0);
        test_poison(y, sizeof y);
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0);
        /* y = -(2 * rms_norm(x) * w + 0.5), in float64 */
        static double ref[R * C];
        for (int i = 0; i < R; i++) {
            double ss = 0;
            for (int j = 0; j < C; j++)
                ss += (double)x[i * C + j] * x[i * C + j];
            double inv = 1.0 / sqrt(ss / C + 1e-5);
            for (int j = 0; j < C; j++)
                ref[i * C + j] = -(2.0 * (x[i * C + j] * inv * w[j]) + 0.5);
        }
        double e = test_rel_err(BATON_DTYPE_F32, y, ref, R * C);
        cr_assert_lt(e, 1e-5, "%s mode: relative error %g", baton_sync_mode_name(o.mode), e);
        baton_runtime_destroy(rt);
    }
    baton_plan_free(p);
}

static void expect_unchanged_after(const char *path, const char *mode, int code, const char *needle)
{
    baton_registry *reg;
    baton_error err;
    cr_assert_eq(baton_registry_create(&reg), 0);
    int n = baton_registry_count(reg);
    const baton_target *copy = baton_registry_find(reg, "copy");
    if (mode)
        setenv("BATON_TEST_PLUGIN_MODE", mode, 1);
    int rc = baton_registry_load_plugin(reg, path, &err);
    unsetenv("BATON_TEST_PLUGIN_MODE");
    cr_assert_eq(rc, code, "%s: got %d (%s)", path, rc, err.message);
    cr_assert(strstr(err.message, needle), "'%s' lacks '%s'", err.message, needle);
    cr_assert(strstr(err.message, path) || !strchr(path, '/'), "'%s' does not name the file",
              err.message);
    cr_assert_eq(baton_registry_count(reg), n);
    cr_assert_null(baton_registry_find(reg, "bad.first"));
    cr_assert_eq(baton_registry_find(reg, "copy"), copy, "the built-in copy was left replaced");
    baton_registry_destroy(reg);
}

Test(plugin, what_is_no_plugin_is_a_clear_error)
{
    expect_unchanged_after("/nonexistent/libnothing.so", NULL, BATON_EIO, "no such file");
    expect_unchanged_after(test_path("README.md"), NULL, BATON_EIO, "cannot be loaded");
    /* a shared library without the entry point: the bad plugin's sibling, the example, has it;
     * libbaton itself does not */
    expect_unchanged_after(BATON_TEST_PLUGIN_BAD, "fail", BATON_ENODEV, "on purpose");
    /* the loader refuses another plugin API version before init runs (init would register) */
    expect_unchanged_after(BATON_TEST_PLUGIN_BAD, "version", BATON_ENOTSUP, "rebuild the plugin");
    expect_unchanged_after(BATON_TEST_PLUGIN_BAD, "old", BATON_ENOTSUP, "built for plugin API 1");
    /* a return that is not a BATON_E* code is EINVAL, and the message says what it was */
    expect_unchanged_after(BATON_TEST_PLUGIN_BAD, "code", BATON_EINVAL, "failed with 7");
}

Test(plugin, a_library_without_the_entry_point_is_refused)
{
    baton_registry *reg;
    baton_error err;
    cr_assert_eq(baton_registry_create(&reg), 0);
    /* the C library is a shared library, not a plugin */
    int rc = baton_registry_load_plugin(reg, "/lib/x86_64-linux-gnu/libc.so.6", &err);
    if (rc == BATON_EIO && strstr(err.message, "no such file"))
        rc = baton_registry_load_plugin(reg, "/usr/lib/x86_64-linux-gnu/libc.so.6", &err);
    cr_assert_eq(rc, BATON_ENOTARGET, "%s", err.message);
    cr_assert(strstr(err.message, "baton_plugin_init"), "%s", err.message);
    baton_registry_destroy(reg);
}

Test(plugin, a_directory_is_named_as_such)
{
    /* was "no such file", which sent the user looking for a file that is there */
    expect_unchanged_after(test_path("examples/plugin"), NULL, BATON_EIO, "is a directory");
}

/* Whether the dynamic loader still has `path` mapped (RTLD_NOLOAD loads nothing). */
static int is_loaded(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h)
        dlclose(h);
    return h != NULL;
}

Test(plugin, the_library_stays_loaded_until_the_last_runtime_is_gone)
{
    static const char plan_json[] =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"uses-bad-first\","
        " \"tensors\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"},"
        "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}],"
        " \"steps\": [{\"name\": \"s\", \"kernel\": \"bad.first\", \"device\": \"cpu\","
        "  \"inputs\": [\"x\"], \"outputs\": [\"y\"]}]}";
    cr_assert_not(is_loaded(BATON_TEST_PLUGIN_BAD));
    baton_registry *reg;
    baton_error err;
    cr_assert_eq(baton_registry_create(&reg), 0);
    setenv("BATON_TEST_PLUGIN_MODE", "ok", 1);
    cr_assert_eq(baton_registry_load_plugin(reg, BATON_TEST_PLUGIN_BAD, &err), 0, "%s",
                 err.message);
    unsetenv("BATON_TEST_PLUGIN_MODE");
    cr_assert(is_loaded(BATON_TEST_PLUGIN_BAD));
    baton_plan *plan;
    cr_assert_eq(
        baton_plan_load_string(reg, plan_json, sizeof plan_json - 1, "plan", NULL, &plan, &err), 0,
        "%s", err.message);
    baton_runtime *rt;
    cr_assert_eq(baton_runtime_create(plan, NULL, &rt, &err), 0, "%s", err.message);
    /* the caller's references go first: the runtime holds the plan, the plan the registry */
    baton_registry_destroy(reg);
    baton_plan_free(plan);
    cr_assert(is_loaded(BATON_TEST_PLUGIN_BAD), "unloaded while a runtime could call it");
    float x[4] = {1, 2, 3, 4};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message); /* calls the plugin */
    baton_runtime_destroy(rt);
    cr_assert_not(is_loaded(BATON_TEST_PLUGIN_BAD), "still loaded after its last user went");
}

Test(plugin, one_library_by_another_path_loads_once)
{
    char dir[] = "/tmp/baton_plugin_XXXXXX", link[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(link, sizeof link, "%s/alias.so", dir);
    cr_assert_eq(symlink(BATON_TEST_PLUGIN, link), 0);
    baton_registry *reg;
    baton_error err;
    cr_assert_eq(baton_registry_create(&reg), 0);
    int before = baton_registry_count(reg);
    cr_assert_eq(baton_registry_load_plugin(reg, BATON_TEST_PLUGIN, &err), 0, "%s", err.message);
    /* the same file: init does not run again (a second add of example.scale would fail) */
    int rc = baton_registry_load_plugin(reg, link, &err);
    unlink(link);
    rmdir(dir);
    cr_assert_eq(rc, 0, "%s", err.message);
    cr_assert_eq(baton_registry_count(reg), before + 1);
    baton_registry_destroy(reg);
}

/* A plugin's strings are bounded and its numbers range-checked before use (issue 38): an init
 * message without a NUL, a check() message without one, a check() giving rank 1000000. */
Test(plugin, unterminated_messages_and_impossible_ranks_are_contained)
{
    baton_registry *reg;
    baton_error err;
    cr_assert_eq(baton_registry_create(&reg), 0);
    setenv("BATON_TEST_PLUGIN_MODE", "nonul", 1);
    int rc = baton_registry_load_plugin(reg, BATON_TEST_PLUGIN_BAD, &err);
    cr_expect_eq(rc, BATON_EINVAL);
    cr_expect(memchr(err.message, 0, sizeof err.message) != NULL);
    cr_expect(strstr(err.message, "AAAA") != NULL, "%s", err.message);
    setenv("BATON_TEST_PLUGIN_MODE", "checks", 1);
    rc = baton_registry_load_plugin(reg, BATON_TEST_PLUGIN_BAD, &err);
    unsetenv("BATON_TEST_PLUGIN_MODE");
    cr_assert_eq(rc, 0, "%s", err.message);
    const char *fmt = "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"p\", \"tensors\": "
                      "[{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                      "\"input\"}, {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], "
                      "\"role\": \"output\"}], \"steps\": [{\"name\": \"s\", \"kernel\": \"%s\", "
                      "\"device\": \"cpu\", \"inputs\": [\"x\"], \"outputs\": [\"y\"]}]}";
    char text[1024];
    baton_plan *plan = NULL;
    snprintf(text, sizeof text, fmt, "bad.nonul");
    rc = baton_plan_load_string(reg, text, strlen(text), "p.json", NULL, &plan, &err);
    cr_expect_eq(rc, BATON_EPLAN);
    cr_expect(memchr(err.message, 0, sizeof err.message) && strstr(err.message, "MMMM"), "%s",
              err.message);
    snprintf(text, sizeof text, fmt, "bad.rank");
    rc = baton_plan_load_string(reg, text, strlen(text), "p.json", NULL, &plan, &err);
    cr_expect_eq(rc, BATON_EPLAN);
    cr_expect(strstr(err.message, "rank 1000000") && strstr(err.message, "check() is wrong"), "%s",
              err.message);
    baton_registry_destroy(reg);
}

/* The example plugin owns the check of its "opaque" (docs/plugins.md): 8 bytes {alpha, beta},
 * finite, not given twice; the kernel then uses them. */
Test(plugin, the_example_plugin_checks_its_own_descriptor)
{
    baton_registry *reg;
    baton_error err;
    cr_assert_eq(baton_registry_create(&reg), 0);
    cr_assert_eq(baton_registry_load_plugin(reg, BATON_TEST_PLUGIN, &err), 0, "%s", err.message);
    const char *fmt = "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"p\", \"tensors\": "
                      "[{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                      "\"input\"}, {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], "
                      "\"role\": \"output\"}], \"steps\": [{\"name\": \"s\", \"kernel\": "
                      "\"example.scale\", \"device\": \"cpu\", \"inputs\": [\"x\"], \"outputs\": "
                      "[\"y\"]%s, \"opaque\": \"%s\"}]}";
    char text[1024], hex[64];
    const float ab[2] = {3.0f, -1.0f}, inf[2] = {INFINITY, 0};
    baton_plan *plan = NULL;
    struct {
        const char *attrs, *hex, *want;
    } bad[] = {{"", "0000", "is 8 bytes"},
               {"", NULL, "must be finite"},
               {", \"attrs\": {\"alpha\": 2}", "", "give them one way"}};
    for (int i = 0; i < 3; i++) {
        const float *v = bad[i].hex ? ab : inf;
        for (int k = 0; k < 8; k++)
            sprintf(hex + 2 * k, "%02x", ((const unsigned char *)v)[k]);
        snprintf(text, sizeof text, fmt, bad[i].attrs,
                 bad[i].hex && bad[i].hex[0] ? bad[i].hex : hex);
        int rc = baton_plan_load_string(reg, text, strlen(text), "p.json", NULL, &plan, &err);
        cr_expect_eq(rc, BATON_EPLAN, "case %d", i);
        cr_expect(strstr(err.message, bad[i].want), "case %d: %s", i, err.message);
    }
    for (int k = 0; k < 8; k++)
        sprintf(hex + 2 * k, "%02x", ((const unsigned char *)ab)[k]);
    snprintf(text, sizeof text, fmt, "", hex);
    cr_assert_eq(baton_plan_load_string(reg, text, strlen(text), "p.json", NULL, &plan, &err), 0,
                 "%s", err.message);
    baton_runtime *rt = test_runtime(plan, BATON_GPU_CPU, BATON_SYNC_STRICT, 0, 0);
    const float x[4] = {1, 2, -3, 0.5f};
    float y[4];
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(y[i], x[i] * 3.0f - 1.0f, "y[%d] = %g", i, y[i]);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
}
