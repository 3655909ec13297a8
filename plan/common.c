/* common.c: the small vocabulary every module shares: error codes and messages, dtypes,
 * devices, roles, sync modes and attribute lookup. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

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
    default: return "BATON_E?: unknown error code";
    }
}

static int vseterr(baton_error *err, int code, const char *prefix, const char *fmt, va_list ap)
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

int baton_seterr(baton_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vseterr(err, code, NULL, fmt, ap);
    va_end(ap);
    return code;
}

int plan_error(baton_error *err, int code, const baton_plan *plan, plan_pos pos, const char *fmt,
               ...)
{
    char prefix[600];
    const char *src = plan && plan->source ? plan->source : "<plan>";
    if (pos.line > 0)
        snprintf(prefix, sizeof prefix, "%s:%d:%d: ", src, pos.line, pos.column);
    else
        snprintf(prefix, sizeof prefix, "%s: ", src);
    va_list ap;
    va_start(ap, fmt);
    vseterr(err, code, prefix, fmt, ap);
    va_end(ap);
    return code;
}

static const char *const dtype_names[BATON_DTYPE_COUNT] = {
    [BATON_DTYPE_INVALID] = "invalid", [BATON_DTYPE_BF16] = "bf16", [BATON_DTYPE_F16] = "f16",
    [BATON_DTYPE_F32] = "f32",         [BATON_DTYPE_F64] = "f64",   [BATON_DTYPE_I32] = "i32",
    [BATON_DTYPE_I64] = "i64",
};

static const size_t dtype_sizes[BATON_DTYPE_COUNT] = {
    [BATON_DTYPE_BF16] = 2, [BATON_DTYPE_F16] = 2, [BATON_DTYPE_F32] = 4,
    [BATON_DTYPE_F64] = 8,  [BATON_DTYPE_I32] = 4, [BATON_DTYPE_I64] = 8,
};

const char *baton_dtype_name(baton_dtype dt)
{
    if ((int)dt <= 0 || (int)dt >= BATON_DTYPE_COUNT)
        return "invalid";
    return dtype_names[dt];
}

size_t baton_dtype_size(baton_dtype dt)
{
    if ((int)dt <= 0 || (int)dt >= BATON_DTYPE_COUNT)
        return 0;
    return dtype_sizes[dt];
}

baton_dtype baton_dtype_from_name(const char *name)
{
    if (!name)
        return BATON_DTYPE_INVALID;
    for (int i = 1; i < BATON_DTYPE_COUNT; i++)
        if (strcmp(name, dtype_names[i]) == 0)
            return (baton_dtype)i;
    return BATON_DTYPE_INVALID;
}

char *baton_device_format(baton_device dev, char *buf, size_t len)
{
    switch (dev.kind) {
    case BATON_DEVICE_CPU: snprintf(buf, len, "cpu"); break;
    case BATON_DEVICE_CUDA: snprintf(buf, len, "cuda:%d", dev.index); break;
    default: snprintf(buf, len, "none"); break;
    }
    return buf;
}

int baton_device_parse(const char *text, baton_device *out)
{
    if (!text || !out)
        return BATON_EINVAL;
    if (strcmp(text, "cpu") == 0) {
        *out = (baton_device){BATON_DEVICE_CPU, 0};
        return 0;
    }
    if (strncmp(text, "cuda:", 5) == 0) {
        const char *p = text + 5;
        if (*p < '0' || *p > '9')
            return BATON_EINVAL;
        long v = 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            v = v * 10 + (*p - '0');
            if (v >= PLAN_MAX_DEVICES - 1)
                return BATON_EINVAL;
        }
        if (*p)
            return BATON_EINVAL;
        *out = (baton_device){BATON_DEVICE_CUDA, (int)v};
        return 0;
    }
    return BATON_EINVAL;
}

const char *baton_role_name(baton_role role)
{
    switch (role) {
    case BATON_ROLE_INTERMEDIATE: return "intermediate";
    case BATON_ROLE_INPUT: return "input";
    case BATON_ROLE_OUTPUT: return "output";
    case BATON_ROLE_CONSTANT: return "constant";
    default: return "invalid";
    }
}

int64_t baton_tensor_desc_numel(const baton_tensor_desc *d)
{
    int64_t n = 1;
    for (int i = 0; i < d->rank; i++)
        n *= d->shape[i];
    return n;
}

void plan_format_desc(char *buf, size_t cap, const baton_tensor_desc *d)
{
    size_t used = (size_t)snprintf(buf, cap, "%s[", baton_dtype_name(d->dtype));
    for (int i = 0; i < d->rank && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? "," : "",
                                 (long long)d->shape[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
}

const baton_attr *baton_attrs_find(const baton_attr *attrs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (attrs[i].name && strcmp(attrs[i].name, name) == 0)
            return &attrs[i];
    return NULL;
}

const char *baton_sync_mode_name(baton_sync_mode mode)
{
    switch (mode) {
    case BATON_SYNC_STRICT: return "strict";
    case BATON_SYNC_BOUNDARY: return "boundary";
    case BATON_SYNC_GRAPH: return "graph";
    default: return "invalid";
    }
}

int baton_sync_mode_parse(const char *text, baton_sync_mode *out)
{
    for (int m = 0; m < 3; m++)
        if (text && strcmp(text, baton_sync_mode_name((baton_sync_mode)m)) == 0) {
            *out = (baton_sync_mode)m;
            return 0;
        }
    return BATON_EINVAL;
}

void baton_options_init(baton_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->mode = BATON_SYNC_GRAPH;
    opts->gpu = BATON_GPU_AUTO;
}

#ifndef BATON_CUDA
/* A CPU-only build: no CUDA device can be used (scheduler/cuda/ defines these otherwise). */
int baton_cuda_built(void)
{
    return 0;
}

int baton_cuda_device_count(void)
{
    return 0;
}
#endif
