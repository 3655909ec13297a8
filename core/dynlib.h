/* dynlib.h: a shared library opened at run time and its functions looked up by name, for the
 * libraries baton uses only when a plan needs them (cuBLASLt, CUPTI, NCCL), so that linking baton
 * needs none of them. */
#ifndef BATON_CORE_DYNLIB_H
#define BATON_CORE_DYNLIB_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A function to look up: its name, and the function pointer it is stored in. */
typedef struct dynlib_sym {
    const char *name;
    void *slot; /* the address of a function pointer */
} dynlib_sym;

/* Opens the first of names[0..n) that loads (RTLD_NOW | RTLD_LOCAL; NULL entries are skipped)
 * and stores each of syms' functions in its slot. Returns the handle, which stays open. On
 * failure returns NULL, closes what it opened, leaves every slot NULL and says why: *missing is
 * the first symbol the library lacks (NULL when no library loaded), and why holds dlerror()'s
 * last message when none loaded (why_len bytes, may be 0). */
void *baton__dynlib_open(const char *const *names, size_t n, const dynlib_sym *syms, size_t nsyms,
                         const char **missing, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* BATON_CORE_DYNLIB_H */
