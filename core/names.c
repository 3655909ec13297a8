/* names.c: the small vocabulary every module shares: dtypes, devices, roles, sync modes, tensor
 * descriptors and attribute lookup, by name and back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static const char *const dtype_names[BATON_DTYPE_COUNT] = {
    [BATON_DTYPE_INVALID] = "invalid", [BATON_DTYPE_BF16] = "bf16", [BATON_DTYPE_F16] = "f16",
    [BATON_DTYPE_F32] = "f32",         [BATON_DTYPE_F64] = "f64",   [BATON_DTYPE_I32] = "i32",
    [BATON_DTYPE_I64] = "i64",         [BATON_DTYPE_U8] = "u8",     [BATON_DTYPE_BOOL] = "bool",
};

static const size_t dtype_sizes[BATON_DTYPE_COUNT] = {
    [BATON_DTYPE_BF16] = 2, [BATON_DTYPE_F16] = 2, [BATON_DTYPE_F32] = 4, [BATON_DTYPE_F64] = 8,
    [BATON_DTYPE_I32] = 4,  [BATON_DTYPE_I64] = 8, [BATON_DTYPE_U8] = 1,  [BATON_DTYPE_BOOL] = 1,
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
    if (!buf || !len)
        return buf;
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
            if (v >= CORE_MAX_DEVICES - 1)
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
    case BATON_ROLE_STATE: return "state";
    default: return "invalid";
    }
}

int64_t baton_tensor_desc_numel(const baton_tensor_desc *d)
{
    if (!d || d->rank < 0 || d->rank > BATON_MAX_RANK)
        return -1;
    for (int i = 0; i < d->rank; i++) {
        if (d->shape[i] < 0)
            return -1;
        if (d->shape[i] == 0)
            return 0; /* even when the other dimensions' product overflows */
    }
    int64_t n = 1;
    for (int i = 0; i < d->rank; i++) {
        if (n > INT64_MAX / d->shape[i])
            return -1;
        n *= d->shape[i];
    }
    return n;
}

const baton_attr *baton_attrs_find(const baton_attr *attrs, int n, const char *name)
{
    if (!attrs || !name)
        return NULL;
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
    if (!out)
        return BATON_EINVAL;
    for (int m = 0; m < 3; m++)
        if (text && strcmp(text, baton_sync_mode_name((baton_sync_mode)m)) == 0) {
            *out = (baton_sync_mode)m;
            return 0;
        }
    return BATON_EINVAL;
}

void baton__desc_format(char *buf, size_t cap, const baton_tensor_desc *d)
{
    size_t used = (size_t)snprintf(buf, cap, "%s[", baton_dtype_name(d->dtype));
    for (int i = 0; i < d->rank && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? "," : "",
                                 (long long)d->shape[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
}
