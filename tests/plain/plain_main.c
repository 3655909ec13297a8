/* plain_main.c: the runner of tests/plain/criterion/criterion.h: every registered test in order,
 * each between its suite's .init and .fini, in this one process and on this one thread, so that
 * ThreadSanitizer sees only baton's threads. Exit 0 when none failed (skips are reported). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <criterion/criterion.h>

const struct criterion_test *criterion_current_test;

static cr_plain_test *tests, **tests_tail = &tests;
static cr_plain_suite *suites;
static pthread_t runner;
static jmp_buf test_exit;
static int test_failed;

void cr_plain_register(cr_plain_test *t)
{
    *tests_tail = t; /* constructors run in file order: keep it */
    tests_tail = &t->next;
}

void cr_plain_register_suite(cr_plain_suite *s)
{
    s->next = suites;
    suites = s;
}

void cr_plain_fail(int fatal, const char *file, int line, const char *cond, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s:%d: %s: %s%s%s\n", file, line,
            fatal ? "assertion failed" : "expectation failed", cond, msg[0] ? ": " : "", msg);
    test_failed = 1;
    if (!fatal)
        return;
    if (!pthread_equal(pthread_self(), runner)) {
        fprintf(stderr, "a fatal assertion failed on another thread: aborting\n");
        abort();
    }
    longjmp(test_exit, 1);
}

void cr_plain_skip(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "  skipped: %s\n", msg);
    longjmp(test_exit, 2);
}

void cr_plain_log(const char *level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  [%s] ", level);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const cr_plain_suite *suite_of(const cr_plain_test *t)
{
    for (const cr_plain_suite *s = suites; s; s = s->next)
        if (strcmp(s->name, t->suite) == 0)
            return s;
    return NULL;
}

/* The test being run: statics, so that nothing setjmp's frame keeps can be clobbered. */
static void (*cur_init)(void), (*cur_fn)(void), (*cur_fini)(void);

/* Runs cur_fn between cur_init and cur_fini; returns 2 when it skipped, else 0 or 1. */
static int run_one(void)
{
    volatile int inited = 0, how = setjmp(test_exit);
    if (how == 0) {
        if (cur_init)
            cur_init();
        inited = 1;
        cur_fn();
    }
    if (inited && cur_fini && setjmp(test_exit) == 0)
        cur_fini();
    return how;
}

int main(int argc, char **argv)
{
    /* Criterion's flags (--jobs=N) are accepted and ignored; a bare argument selects tests whose
     * "suite/name" contains it. */
    const char *only = NULL;
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-')
            only = argv[i];
    runner = pthread_self();
    int passed = 0, failed = 0, skipped = 0;
    for (cr_plain_test *t = tests; t; t = t->next) {
        char full[512];
        snprintf(full, sizeof full, "%s/%s", t->suite, t->name);
        if ((only && !strstr(full, only)) || t->opts.disabled)
            continue;
        const cr_plain_suite *s = suite_of(t);
        cur_init = t->opts.init ? t->opts.init : s ? s->opts.init : NULL;
        cur_fini = t->opts.fini ? t->opts.fini : s ? s->opts.fini : NULL;
        cur_fn = t->fn;
        struct criterion_test cur = {t->name, t->suite};
        criterion_current_test = &cur;
        fprintf(stderr, "[RUN ] %s\n", full);
        test_failed = 0;
        int how = run_one();
        if (how == 2 && !test_failed) {
            skipped++;
            fprintf(stderr, "[SKIP] %s\n", full);
        } else if (test_failed) {
            failed++;
            fprintf(stderr, "[FAIL] %s\n", full);
        } else {
            passed++;
            fprintf(stderr, "[ OK ] %s\n", full);
        }
    }
    fprintf(stderr, "%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
