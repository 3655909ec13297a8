/* xla_status.h: failing an XLA legacy custom call (API_VERSION_STATUS_RETURNING) from C, so that
 * the reason reaches the XLA client (a Python exception under JAX). Plain C with no XLA or CUDA
 * header: every build compiles it and tests/test_xla_status.c checks it on the CPU. */
#ifndef BATON_KERNELS_XLA_STATUS_H
#define BATON_KERNELS_XLA_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How baton__xla_status_fail set the status, or why it could not. */
enum {
    XLA_STATUS_NOT_SET = 0,   /* neither way applies: the caller should log the reason */
    XLA_STATUS_BY_XLA = 1,    /* through XLA's own XlaCustomCallStatusSetFailure */
    XLA_STATUS_BY_LAYOUT = 2, /* written in the layout XLA gives the status (see the .c) */
};

/* Sets `status` (XLA's XlaCustomCallStatus *) to failure with the NUL-terminated `msg`.
 * `caller` is a code address in the object that called the custom call (the entry point's
 * __builtin_return_address(0)): when the process has no XlaCustomCallStatusSetFailure (pip's
 * jaxlib has none), the status is written directly only if that object was built against
 * libstdc++'s C++11 strings, whose layout XLA's status then has, and only if the status is
 * still unset; BATON_XLA_STATUS_LAYOUT=0 in the environment turns that off. Thread-safe;
 * allocates only for messages over 15 bytes. */
int baton__xla_status_fail(void *status, const void *caller, const char *msg);

#ifdef __cplusplus
}
#endif
#endif /* BATON_KERNELS_XLA_STATUS_H */
