/* plugin_bad.c: a plugin that misbehaves on purpose, for test_plugin: BATON_TEST_PLUGIN_MODE
 * "fail" registers a target and replaces a built-in, then fails; "version" refuses the API
 * version as a plugin built for a newer baton would; "code" returns 7 without a message; "nonul"
 * fails with a message that fills err->message without a NUL; "checks" registers bad.nonul and
 * bad.rank, whose check() leaves its message unterminated or gives rank 1000000; "ok"
 * registers "bad.first" and succeeds (a CPU-only library with no dependencies, so the tests can see
 * when it is unloaded). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/baton.h"

/* The declared version, as BATON_PLUGIN_DECLARE_VERSION() exports it, but writable so that the
 * "version" mode can claim a newer plugin API and "old" the first one; dlopen runs the
 * constructor before the loader reads it. In those modes init() registers without checking
 * anything, so only the loader's check keeps the registry unchanged. */
__attribute__((visibility("default"))) unsigned int baton_plugin_api_version =
    BATON_PLUGIN_API_VERSION;

__attribute__((constructor)) static void pick_version(void)
{
    const char *mode = getenv("BATON_TEST_PLUGIN_MODE");
    if (mode && strcmp(mode, "version") == 0)
        baton_plugin_api_version = BATON_PLUGIN_API_VERSION + 1;
    if (mode && strcmp(mode, "old") == 0)
        baton_plugin_api_version = 1;
}

static int nop(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    (void)ctx, (void)buffers, (void)opaque, (void)len;
    return 0;
}

static int same(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t cap)
{
    (void)msg, (void)cap;
    expected[0] = a->inputs[0];
    return 0;
}

/* "bad.nonul": a check() that fills its whole message without a terminating NUL. */
static int nonul_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t cap)
{
    (void)a, (void)expected;
    memset(msg, 'M', cap);
    return BATON_EPLAN;
}

/* "bad.rank": a check() that gives an output no tensor can have. */
static int rank_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t cap)
{
    (void)msg, (void)cap;
    expected[0] = a->inputs[0];
    expected[0].rank = 1000000;
    return 0;
}

__attribute__((visibility("default"))) int
baton_plugin_init(baton_registry *reg, const baton_plugin_api *api, baton_error *err)
{
    const char *mode = getenv("BATON_TEST_PLUGIN_MODE");
    if (mode && strcmp(mode, "code") == 0)
        return 7;                             /* not a BATON_E* code, and no message */
    if (mode && strcmp(mode, "nonul") == 0) { /* a message without its terminating NUL */
        memset(err->message, 'A', sizeof err->message);
        return err->code = BATON_EINVAL;
    }
    baton_target t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.name = "bad.first";
    t.kind = BATON_TARGET_KERNEL;
    t.n_inputs = t.n_outputs = 1;
    t.check = same;
    t.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CPU, .kernel = nop};
    t.n_impls = 1;
    int rc = api->registry_add(reg, &t, err);
    if (mode && strcmp(mode, "checks") == 0) { /* targets whose check() misbehaves */
        t.name = "bad.nonul";
        t.check = nonul_check;
        if (!rc)
            rc = api->registry_add(reg, &t, err);
        t.name = "bad.rank";
        t.check = rank_check;
        if (!rc)
            rc = api->registry_add(reg, &t, err);
        return rc;
    }
    if (mode &&
        (strcmp(mode, "ok") == 0 || strcmp(mode, "version") == 0 || strcmp(mode, "old") == 0))
        return rc;
    t.name = "copy"; /* a built-in, replaced */
    if (!rc)
        rc = api->registry_replace(reg, &t, err);
    if (rc)
        return rc;
    snprintf(err->message, sizeof err->message, "the device it needs is missing (on purpose)");
    return err->code = BATON_ENODEV;
}
