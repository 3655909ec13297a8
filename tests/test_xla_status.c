/* test_xla_status.c: failing an XLA legacy custom call (kernels/xla_status.c) where the process
 * has no XlaCustomCallStatusSetFailure, as under pip's jaxlib. Built with
 * -DBATON_XLA_STATUS_LAYOUT=ON (CI's sanitizer build) the layout is written; by default it is not.
 * A stand-in for XLA's plugin (tests/xla_status_probe.cpp, a C++ shared library that declares the
 * status as XLA does) runs the custom calls below and reads back what baton wrote; an object that
 * does not share that layout, or a status already set, is left alone. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/xla_status.h"

/* Each test runs in a process of its own, which reads BATON_XLA_STATUS_LAYOUT once: the tests
 * start from the default (on) whatever the caller's environment says. */
static void layout_on(void)
{
    unsetenv("BATON_XLA_STATUS_LAYOUT");
}
TestSuite(xla_status, .init = layout_on);

typedef int (*probe_custom_call)(void *status, const char *msg);
long probe_run(probe_custom_call call, const char *msg, const char *preset, int *how, char *out,
               size_t cap);

/* As baton's _status entry points do: the caller is the plugin. */
static int fail_from_return_address(void *status, const char *msg)
{
    return baton__xla_status_fail(status, __builtin_return_address(0), msg);
}

/* Callers that say nothing of the status's layout: C code in libc, no address, the stack. */
static int fail_from_libc(void *status, const char *msg)
{
    return baton__xla_status_fail(status, dlsym(RTLD_DEFAULT, "gnu_get_libc_version"), msg);
}
static int fail_from_null(void *status, const char *msg)
{
    return baton__xla_status_fail(status, NULL, msg);
}
static int fail_from_stack(void *status, const char *msg)
{
    int on_stack = 0;
    return baton__xla_status_fail(status, &on_stack, msg);
}

static void reaches_the_plugin(const char *msg)
{
    char got[512];
    int how = -1;
#if !BATON_XLA_STATUS_LAYOUT
    /* built without the layout writer (the default): the status stays unset, the caller logs */
    cr_assert_eq(probe_run(fail_from_return_address, msg, NULL, &how, got, sizeof got), -1);
    cr_assert_eq(how, XLA_STATUS_NOT_SET);
    return;
#endif
    long n = probe_run(fail_from_return_address, msg, NULL, &how, got, sizeof got);
    cr_assert_eq(how, XLA_STATUS_BY_LAYOUT, "for a %zu-byte message", strlen(msg));
    cr_assert_eq(n, (long)strlen(msg));
    cr_assert_str_eq(got, msg);
}

Test(xla_status, a_short_message_reaches_a_reader_that_declares_the_status_as_xla_does)
{
    cr_assert_null(dlsym(RTLD_DEFAULT, "XlaCustomCallStatusSetFailure"),
                   "this test is about processes without XLA's setter");
    reaches_the_plugin("");
    reaches_the_plugin("bad opaque");
    reaches_the_plugin("exactly 15 char"); /* the longest that fits the string's own buffer */
}

Test(xla_status, a_long_message_is_allocated_as_the_reader_frees_it)
{
    reaches_the_plugin("exactly 16 chars");
    char msg[400];
    memset(msg, 'x', sizeof msg - 1);
    msg[sizeof msg - 1] = 0;
    memcpy(msg, "baton_rms_norm_fwd: ", 20);
    reaches_the_plugin(msg); /* ASan checks that the plugin's delete matches baton's new */
}

Test(xla_status, a_status_already_failed_keeps_its_first_message)
{
    char got[128];
    int how = -1;
    const char *first = "the first failure, long enough to be allocated";
    cr_assert_eq(probe_run(fail_from_return_address, "a second", first, &how, got, sizeof got),
                 (long)strlen(first));
    cr_assert_eq(how, XLA_STATUS_NOT_SET);
    cr_assert_str_eq(got, first);
}

Test(xla_status, a_caller_that_says_nothing_of_the_layout_leaves_the_status_alone)
{
    cr_assert_not_null(dlsym(RTLD_DEFAULT, "gnu_get_libc_version"));
    const probe_custom_call calls[] = {fail_from_libc, fail_from_null, fail_from_stack};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        char got[16];
        int how = -1;
        cr_assert_eq(probe_run(calls[i], "no", NULL, &how, got, sizeof got), -1,
                     "case %zu: the status is untouched", i);
        cr_assert_eq(how, XLA_STATUS_NOT_SET, "case %zu", i);
    }
    cr_assert_eq(baton__xla_status_fail(NULL, (const void *)fail_from_return_address, "no"),
                 XLA_STATUS_NOT_SET);
}

Test(xla_status, the_environment_turns_the_layout_off)
{
    cr_assert_eq(setenv("BATON_XLA_STATUS_LAYOUT", "0", 1), 0);
    char got[16];
    int how = -1;
    cr_assert_eq(probe_run(fail_from_return_address, "no", NULL, &how, got, sizeof got), -1);
    cr_assert_eq(how, XLA_STATUS_NOT_SET);
}
