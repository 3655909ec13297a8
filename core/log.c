/* log.c: where the library's messages go. Nothing in libbaton writes to stderr itself: warnings
 * and notes go to the callback of the registry they concern (baton_registry_set_log), else to the
 * process-wide one, which an embedding runtime replaces with its own logger and the CLI with one
 * that honours -q. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "core/core.h"

static void log_stderr(void *user, baton_log_level level, const char *message)
{
    (void)user;
    static const char *const names[] = {"error", "warning", "note"};
    const char *name = (unsigned)level < 3 ? names[level] : "message";
    fprintf(stderr, "baton: %s: %s\n", name, message);
}

/* Two atomics, not a lock: baton_log_set is documented for start-up, and a reader that sees a new
 * function with an old user pointer can only happen while the caller breaks that rule. */
static _Atomic(baton_log_fn) log_fn = log_stderr;
static _Atomic(void *) log_user = NULL;

void baton_log_set(baton_log_fn fn, void *user)
{
    atomic_store(&log_user, user);
    atomic_store(&log_fn, fn ? fn : log_stderr);
}

static void log_v(const log_sink *sink, baton_log_level level, const char *fmt, va_list ap)
{
    char line[BATON_ERROR_MAX + 256];
    vsnprintf(line, sizeof line, fmt, ap);
    if (sink && sink->fn)
        sink->fn(sink->user, level, line);
    else
        atomic_load (&log_fn)(atomic_load(&log_user), level, line);
}

/* The registry's sink while one of its runtimes is prepared on this thread (baton__log_scope), so
 * that what a delegate or kernel logs at prepare, knowing no registry, reaches that registry. */
static _Thread_local const log_sink *scoped;

const log_sink *baton__log_scope(const log_sink *sink)
{
    const log_sink *prev = scoped;
    scoped = sink;
    return prev;
}

void baton__log_msg(baton_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_v(scoped, level, fmt, ap);
    va_end(ap);
}

void baton__log_to(const log_sink *sink, baton_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_v(sink, level, fmt, ap);
    va_end(ap);
}
