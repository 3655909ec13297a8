/* core.h: the internal core every layer of baton sits on (the role uv-common.h plays in libuv):
 * the error helpers, tensor-descriptor helpers and device names. It depends on the public header
 * only; nothing in core/ includes another layer. Dtype conversions are in core/dtype.h, the
 * seeded generators in core/rng.h and the signature-check helpers in core/sig.h. */
#ifndef BATON_CORE_H
#define BATON_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "baton/baton.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CORE_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CORE_PRINTF(f, a)
#endif

/* The most devices of one kind a plan may name (cuda:0 .. cuda:14), plus the CPU. */
#define CORE_MAX_DEVICES 16
/* The most inputs or outputs one step (and so one target) may have: the registry refuses a target
 * with more, and the validator and the runtime size their per-step arrays with it. */
#define CORE_MAX_STEP_ARGS 64
/* The longest tensor, step, plan or target name, in bytes. */
#define CORE_MAX_NAME 255

/* ---- errors (core/errors.c) ---- */

/* Sets err (when non-NULL) to code and "prefix" + the formatted message; returns code. */
int baton__err_vset(baton_error *err, int code, const char *prefix, const char *fmt, va_list ap);
/* Every public entry point that takes a baton_error clears it first, so that success leaves
 * code 0 and an empty message whatever the caller's struct held. */
static inline void err_clear(baton_error *err)
{
    if (err) {
        err->code = 0;
        err->message[0] = 0;
    }
}

/* Sets err without a place; returns code. */
int baton__err_set(baton_error *err, int code, const char *fmt, ...) CORE_PRINTF(3, 4);
/* Writes a reason into a caller's buffer (a signature check's msg, a kernel's ctx->errbuf) when
 * there is one; returns code. */
int baton__reason_set(char *buf, size_t len, int code, const char *fmt, ...) CORE_PRINTF(4, 5);
/* A kernel's or delegate's failure: the reason into ctx->errbuf (ctx may be NULL); returns code. */
int baton__ctx_fail(const baton_exec_ctx *ctx, int code, const char *fmt, ...) CORE_PRINTF(3, 4);
/* What every kernel that reads its shapes from ctx->sig needs of its call: ctx->sig set and
 * n_buffers buffers, none NULL. 0, or BATON_EINVAL with the reason (naming `name`) in
 * ctx->errbuf. */
int baton__ctx_call_ok(const baton_exec_ctx *ctx, const char *name, void **buffers, int n_buffers);
/* Sends one message line (no newline) to the log callback (baton_log_set; stderr by default). */
void baton__log_msg(baton_log_level level, const char *fmt, ...) CORE_PRINTF(2, 3);
/* A registry's own log callback (baton_registry_set_log); fn NULL: the process-wide one. */
typedef struct log_sink {
    baton_log_fn fn;
    void *user;
} log_sink;
/* As baton__log_msg, to `sink`'s callback when it has one (sink may be NULL). */
void baton__log_to(const log_sink *sink, baton_log_level level, const char *fmt, ...)
    CORE_PRINTF(3, 4);
/* Makes baton__log_msg on this thread go to `sink` (NULL: the process-wide callback) until the next
 * call; returns the previous one, to restore. The runtime sets its registry's around prepare. */
const log_sink *baton__log_scope(const log_sink *sink);

/* ---- the environment (core/env.c) ---- */

/* What the boolean environment variable `name` says, read once per process into *cache (a static
 * of the caller's, starting at ENV_UNREAD): -1 when it is unset or "", 0 when it is "0", 1 for
 * any other value. Thread-safe. */
#define ENV_UNREAD (-2)
int baton__env_flag(const char *name, int *cache);

/* ---- tensor descriptors and names (core/names.c) ---- */

/* "f32[8,4096]" into buf (truncated to cap), for messages that compare shapes. */
void baton__desc_format(char *buf, size_t cap, const baton_tensor_desc *d);

static inline int device_eq(baton_device a, baton_device b)
{
    return a.kind == b.kind && (a.kind != BATON_DEVICE_CUDA || a.index == b.index);
}

static inline int dtype_is_float(baton_dtype dt)
{
    return dt == BATON_DTYPE_BF16 || dt == BATON_DTYPE_F16 || dt == BATON_DTYPE_F32 ||
           dt == BATON_DTYPE_F64;
}

static inline int dtype_is_int(baton_dtype dt)
{
    return dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64;
}

#ifdef __cplusplus
}
#endif

#endif /* BATON_CORE_H */
