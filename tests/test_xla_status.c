/* test_xla_status.c: failing an XLA legacy custom call (kernels/xla_status.c) where the process
 * has no XlaCustomCallStatusSetFailure, as under pip's jaxlib: the status written in XLA's layout
 * is read back by C++ code that declares it as XLA does (tests/xla_status_probe.cpp), and an
 * object that does not share that layout, or a status already set, is left alone. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <string.h>

#include "kernels/xla_status.h"

void *probe_status_create(void);
void probe_status_destroy(void *s);
long probe_status_message(const void *s, char *out, size_t cap);
int probe_fail(void *s, const char *msg);

static void fails_with(const char *msg)
{
    void *s = probe_status_create();
    cr_assert_not_null(s);
    char got[512];
    cr_assert_eq(probe_status_message(s, got, sizeof got), -1, "a new status holds no message");
    cr_assert_eq(probe_fail(s, msg), XLA_STATUS_BY_LAYOUT);
    cr_assert_eq(probe_status_message(s, got, sizeof got), (long)strlen(msg));
    cr_assert_str_eq(got, msg);
    probe_status_destroy(s); /* XLA's delete of the message: ASan checks the pairing */
}

Test(xla_status, a_short_message_reaches_a_reader_that_declares_the_status_as_xla_does)
{
    cr_assert_null(dlsym(RTLD_DEFAULT, "XlaCustomCallStatusSetFailure"),
                   "this test is about processes without XLA's setter");
    fails_with("");
    fails_with("bad opaque");
    fails_with("exactly 15 char"); /* the longest that fits the string's own buffer */
}

Test(xla_status, a_long_message_is_allocated_as_the_reader_frees_it)
{
    fails_with("exactly 16 chars");
    char msg[400];
    memset(msg, 'x', sizeof msg - 1);
    msg[sizeof msg - 1] = 0;
    memcpy(msg, "baton_rms_norm_fwd: ", 20);
    fails_with(msg);
}

Test(xla_status, a_status_already_failed_keeps_its_first_message)
{
    void *s = probe_status_create();
    cr_assert_eq(probe_fail(s, "the first failure, long enough to be allocated"),
                 XLA_STATUS_BY_LAYOUT);
    cr_assert_eq(probe_fail(s, "a second"), XLA_STATUS_NOT_SET);
    char got[128];
    probe_status_message(s, got, sizeof got);
    cr_assert_str_eq(got, "the first failure, long enough to be allocated");
    probe_status_destroy(s);
}

Test(xla_status, a_caller_without_cxx11_strings_or_unknown_is_refused)
{
    void *s = probe_status_create();
    /* C code in libc: it does not use std::string, so nothing says the status has this layout. */
    void *libc_fn = dlsym(RTLD_DEFAULT, "gnu_get_libc_version");
    cr_assert_not_null(libc_fn);
    cr_assert_eq(xla_status_fail(s, libc_fn, "no"), XLA_STATUS_NOT_SET);
    cr_assert_eq(xla_status_fail(s, NULL, "no"), XLA_STATUS_NOT_SET);
    int on_stack;
    cr_assert_eq(xla_status_fail(s, &on_stack, "no"), XLA_STATUS_NOT_SET, "not in any object");
    char got[16];
    cr_assert_eq(probe_status_message(s, got, sizeof got), -1, "the status is untouched");
    cr_assert_eq(xla_status_fail(NULL, (const void *)probe_fail, "no"), XLA_STATUS_NOT_SET);
    probe_status_destroy(s);
}
