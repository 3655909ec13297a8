/* sig.h: small helpers for targets' check() functions, shared by the built-in kernels
 * (targets/builtin.c) and the gemm delegate (delegates/gemm.c): a shape as text, and the
 * rank/dim/numel checks every signature starts with. Private to baton. */
#ifndef BATON_CORE_SIG_H
#define BATON_CORE_SIG_H

#include <stdarg.h>
#include <stdio.h>

#include "baton/baton.h"
#include "core/core.h"

/* "[8, 4096]" */
static inline const char *shape_str(const baton_tensor_desc *d, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    n += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < d->rank && i < BATON_MAX_RANK && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, i ? ", %lld" : "%lld", (long long)d->shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

/* Rank within [0, BATON_MAX_RANK], every dim >= 1 and a numel that fits int64. */
static inline int dims_ok(const baton_tensor_desc *d, const char *what, char *msg, size_t len)
{
    if (d->rank < 0 || d->rank > BATON_MAX_RANK)
        return baton__reason_set(msg, len, BATON_EPLAN, "%s has rank %d: ranks go from 0 to %d",
                                 what, d->rank, BATON_MAX_RANK);
    int64_t n = 1;
    for (int i = 0; i < d->rank; i++) {
        char s[200];
        if (d->shape[i] < 1)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "%s has shape %s with a dim of %lld: every dim must be >= 1",
                                     what, shape_str(d, s, sizeof s), (long long)d->shape[i]);
        if (n > INT64_MAX / d->shape[i])
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "%s has shape %s, more elements than fit in 64 bits", what,
                                     shape_str(d, s, sizeof s));
        n *= d->shape[i];
    }
    return 0;
}

#endif /* BATON_CORE_SIG_H */
