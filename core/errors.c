/* errors.c: the error vocabulary every layer shares: the names of baton's error codes and the one
 * family of helpers that fill a baton_error (or a reason buffer) and return the code. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

const char *baton_strerror(int code)
{
    switch (code) {
    case BATON_OK: return "BATON_OK: success";
    case BATON_EINVAL: return "BATON_EINVAL: invalid argument";
    case BATON_ENOMEM: return "BATON_ENOMEM: out of memory";
    case BATON_EIO: return "BATON_EIO: input/output error";
    case BATON_EPARSE: return "BATON_EPARSE: plan file is not valid JSON";
    case BATON_EPLAN: return "BATON_EPLAN: invalid plan";
    case BATON_ENOTARGET: return "BATON_ENOTARGET: unknown kernel or delegate";
    case BATON_ENODEV: return "BATON_ENODEV: device not present";
    case BATON_ECUDA: return "BATON_ECUDA: CUDA call failed";
    case BATON_EKERNEL: return "BATON_EKERNEL: kernel or delegate failed";
    case BATON_ENOTSUP: return "BATON_ENOTSUP: not supported";
    case BATON_ESTATE: return "BATON_ESTATE: call does not fit the object's state";
    case BATON_ENOENT: return "BATON_ENOENT: no such name";
    case BATON_ENUMERIC: return "BATON_ENUMERIC: numeric check failed";
    case BATON_ECANCELED: return "BATON_ECANCELED: cancelled before it ran";
    default: return "BATON_E?: unknown error code";
    }
}

int baton__err_vset(baton_error *err, int code, const char *prefix, const char *fmt, va_list ap)
{
    if (!err)
        return code;
    err->code = code;
    size_t n = 0;
    if (prefix) {
        int k = snprintf(err->message, sizeof err->message, "%s", prefix);
        n = k < 0 ? 0 : (size_t)k;
        if (n >= sizeof err->message)
            n = sizeof err->message - 1;
    }
    vsnprintf(err->message + n, sizeof err->message - n, fmt, ap);
    return code;
}

int baton__err_set(baton_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    baton__err_vset(err, code, NULL, fmt, ap);
    va_end(ap);
    return code;
}

int baton__reason_set(char *buf, size_t len, int code, const char *fmt, ...)
{
    if (buf && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, len, fmt, ap);
        va_end(ap);
    }
    return code;
}

int baton__ctx_fail(const baton_exec_ctx *ctx, int code, const char *fmt, ...)
{
    if (ctx && ctx->errbuf && ctx->errbuf_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->errbuf, ctx->errbuf_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

int baton__ctx_call_ok(const baton_exec_ctx *ctx, const char *name, void **buffers, int n_buffers)
{
    if (!ctx || !ctx->sig)
        return baton__ctx_fail(ctx, BATON_EINVAL,
                               "%s reads its shapes from ctx->sig, which is NULL: call it through "
                               "a runtime, or set ctx->sig to the step's signature",
                               name);
    if (!buffers)
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s: buffers is NULL", name);
    for (int i = 0; i < n_buffers; i++)
        if (!buffers[i])
            return baton__ctx_fail(ctx, BATON_EINVAL, "%s: buffer %d of %d is NULL", name, i,
                                   n_buffers);
    return 0;
}
