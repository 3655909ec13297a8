/* dynlib.c: run-time loading of optional libraries (dynlib.h). */
#include "core/dynlib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void clear_slots(const dynlib_sym *syms, size_t nsyms)
{
    for (size_t i = 0; i < nsyms; i++) {
        void *none = NULL;
        memcpy(syms[i].slot, &none, sizeof none);
    }
}

void *baton__dynlib_open(const char *const *names, size_t n, const dynlib_sym *syms, size_t nsyms,
                         const char **missing, char *why, size_t why_len)
{
    *missing = NULL;
    if (why && why_len)
        why[0] = 0;
    void *lib = NULL;
    for (size_t i = 0; i < n && !lib; i++)
        if (names[i] && names[i][0])
            lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        if (why && why_len)
            snprintf(why, why_len, "%s", e ? e : "dlopen failed");
        clear_slots(syms, nsyms);
        return NULL;
    }
    for (size_t i = 0; i < nsyms; i++) {
        void *p = dlsym(lib, syms[i].name);
        if (!p) {
            *missing = syms[i].name;
            dlclose(lib);
            clear_slots(syms, nsyms);
            return NULL;
        }
        memcpy(syms[i].slot, &p, sizeof p); /* object to function pointer, as POSIX allows */
    }
    return lib;
}
