/* tests/plain/criterion/criterion.h: a plain stand-in for the part of Criterion that the threaded
 * tests use (Test, TestSuite with .init/.fini, cr_assert*, cr_expect*, cr_skip, cr_log_*), so they
 * can run under ThreadSanitizer, where Criterion's own runner (forked workers, its IPC) aborts.
 * The tests run one after another in one process (tests/plain/plain_main.c); a fatal assertion
 * ends its test with longjmp, or aborts the process when it fails on another thread. Built only
 * with -DBATON_TSAN=ON (CMakeLists.txt puts this directory first on the include path). */
#ifndef BATON_PLAIN_CRITERION_H
#define BATON_PLAIN_CRITERION_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct cr_plain_opts {
    int unused_; /* lets `{0, __VA_ARGS__}` be valid with no options */
    void (*init)(void);
    void (*fini)(void);
    double timeout;
    bool disabled;
    const char *description;
    int exit_code;
    int signal;
} cr_plain_opts;

typedef struct cr_plain_test {
    const char *suite;
    const char *name;
    void (*fn)(void);
    cr_plain_opts opts;
    struct cr_plain_test *next;
} cr_plain_test;

typedef struct cr_plain_suite {
    const char *name;
    cr_plain_opts opts;
    struct cr_plain_suite *next;
} cr_plain_suite;

/* What support.c reads as Criterion's: the running test's name. */
struct criterion_test {
    const char *name;
    const char *category;
};
extern const struct criterion_test *criterion_current_test;

void cr_plain_register(cr_plain_test *t);
void cr_plain_register_suite(cr_plain_suite *s);
/* fmt is "" when an assertion gives no message (the macros paste "" before the caller's): no
 * format attribute, which would warn about that empty format under -Werror. */
void cr_plain_fail(int fatal, const char *file, int line, const char *cond, const char *fmt, ...);
void cr_plain_skip(const char *fmt, ...) __attribute__((noreturn));
void cr_plain_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define Test(suite, name, ...)                                                                     \
    static void suite##_##name##_fn(void);                                                         \
    __attribute__((constructor)) static void suite##_##name##_reg(void)                            \
    {                                                                                              \
        static cr_plain_test t = {#suite, #name, suite##_##name##_fn, {0, __VA_ARGS__}, NULL};     \
        cr_plain_register(&t);                                                                     \
    }                                                                                              \
    static void suite##_##name##_fn(void)

#define TestSuite(suite, ...)                                                                      \
    __attribute__((constructor)) static void suite##_suite_reg(void)                               \
    {                                                                                              \
        static cr_plain_suite s = {#suite, {0, __VA_ARGS__}, NULL};                                \
        cr_plain_register_suite(&s);                                                               \
    }

#define CR_PLAIN_CHECK(fatal, cond, text, ...)                                                     \
    do {                                                                                           \
        if (!(cond))                                                                               \
            cr_plain_fail(fatal, __FILE__, __LINE__, text, "" __VA_ARGS__);                        \
    } while (0)

#define cr_assert(c, ...)          CR_PLAIN_CHECK(1, (c), #c, __VA_ARGS__)
#define cr_expect(c, ...)          CR_PLAIN_CHECK(0, (c), #c, __VA_ARGS__)
#define cr_assert_eq(a, b, ...)    CR_PLAIN_CHECK(1, (a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_expect_eq(a, b, ...)    CR_PLAIN_CHECK(0, (a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...)   CR_PLAIN_CHECK(1, (a) != (b), #a " != " #b, __VA_ARGS__)
#define cr_expect_neq(a, b, ...)   CR_PLAIN_CHECK(0, (a) != (b), #a " != " #b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...)    CR_PLAIN_CHECK(1, (a) > (b), #a " > " #b, __VA_ARGS__)
#define cr_expect_gt(a, b, ...)    CR_PLAIN_CHECK(0, (a) > (b), #a " > " #b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...)   CR_PLAIN_CHECK(1, (a) >= (b), #a " >= " #b, __VA_ARGS__)
#define cr_expect_geq(a, b, ...)   CR_PLAIN_CHECK(0, (a) >= (b), #a " >= " #b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...)    CR_PLAIN_CHECK(1, (a) < (b), #a " < " #b, __VA_ARGS__)
#define cr_expect_lt(a, b, ...)    CR_PLAIN_CHECK(0, (a) < (b), #a " < " #b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...)   CR_PLAIN_CHECK(1, (a) <= (b), #a " <= " #b, __VA_ARGS__)
#define cr_expect_leq(a, b, ...)   CR_PLAIN_CHECK(0, (a) <= (b), #a " <= " #b, __VA_ARGS__)
#define cr_assert_null(p, ...)     CR_PLAIN_CHECK(1, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_expect_null(p, ...)     CR_PLAIN_CHECK(0, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...) CR_PLAIN_CHECK(1, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_expect_not_null(p, ...) CR_PLAIN_CHECK(0, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...)                                                                \
    CR_PLAIN_CHECK(1, strcmp((a), (b)) == 0, #a " eq " #b, __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...)                                                                \
    CR_PLAIN_CHECK(0, strcmp((a), (b)) == 0, #a " eq " #b, __VA_ARGS__)
#define cr_assert_str_empty(a, ...) CR_PLAIN_CHECK(1, (a)[0] == 0, #a " is empty", __VA_ARGS__)
#define cr_expect_str_empty(a, ...) CR_PLAIN_CHECK(0, (a)[0] == 0, #a " is empty", __VA_ARGS__)
#define cr_assert_arr_eq(a, b, n, ...)                                                             \
    CR_PLAIN_CHECK(1, memcmp((a), (b), (n)) == 0, #a " eq " #b, __VA_ARGS__)
#define cr_expect_arr_eq(a, b, n, ...)                                                             \
    CR_PLAIN_CHECK(0, memcmp((a), (b), (n)) == 0, #a " eq " #b, __VA_ARGS__)
#define cr_assert_fail(...) cr_plain_fail(1, __FILE__, __LINE__, "cr_assert_fail", "" __VA_ARGS__)
#define cr_skip(...)        cr_plain_skip("" __VA_ARGS__)
#define cr_skip_test(...)   cr_plain_skip("" __VA_ARGS__)
#define cr_log_info(...)    cr_plain_log("info", __VA_ARGS__)
#define cr_log_warn(...)    cr_plain_log("warn", __VA_ARGS__)
#define cr_log_error(...)   cr_plain_log("error", __VA_ARGS__)

#endif /* BATON_PLAIN_CRITERION_H */
