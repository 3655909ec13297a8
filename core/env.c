/* env.c: boolean switches read from the environment once per process (core.h). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

int baton__env_flag(const char *name, int *cache)
{
    /* GCC/Clang atomics on a plain int, so that core.h stays includable from CUDA C++. */
    int v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (v == ENV_UNREAD) {
        const char *e = getenv(name);
        v = !e || !*e ? -1 : strcmp(e, "0") != 0;
        __atomic_store_n(cache, v, __ATOMIC_RELAXED); /* racing first readers agree */
    }
    return v;
}
