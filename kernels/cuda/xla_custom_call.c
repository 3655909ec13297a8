/* xla_custom_call.c: the legacy XLA GPU custom-call ABI over the CUDA RMSNorm kernels (see
 * include/baton/baton_xla.h). XlaCustomCallStatusSetFailure is looked up in the process at the
 * time of a failure (in every loaded object: Python loads jaxlib with RTLD_LOCAL), so libbaton
 * links without XLA. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dl_iterate_phdr */
#endif
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "baton/baton_xla.h"
#include "core/core.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/rms_norm_tune.h"

typedef void (*status_set_failure_fn)(void *status, const char *message, size_t message_len);

static int call(baton_kernel_fn fn, const char *name, void *stream, void **buffers,
                const char *opaque, size_t opaque_len, char *err, size_t errlen)
{
    baton_exec_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        dev = -1;
    ctx.device.kind = BATON_DEVICE_CUDA;
    ctx.device.index = dev;
    ctx.stream = stream;
    /* No prepare step to time at: the GPU's built-in picks (the same bits as the defaults). */
    ctx.autotune = kcuda_rms_autotune_from_env();
    (void)name; /* report() names the call */
    ctx.errbuf = err;
    ctx.errbuf_len = errlen;
    err[0] = 0;
    return fn(&ctx, buffers, opaque, opaque_len);
}

/* Asks one loaded object for the symbol (a handle that only references it: RTLD_NOLOAD). */
static int find_in(struct dl_phdr_info *info, size_t size, void *out)
{
    (void)size;
    if (!info->dlpi_name || !info->dlpi_name[0])
        return 0;
    void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return 0;
    void *sym = dlsym(h, "XlaCustomCallStatusSetFailure");
    dlclose(h);
    if (!sym)
        return 0;
    *(void **)out = sym;
    return 1;
}

/* XLA's XlaCustomCallStatusSetFailure, wherever the process has it: in the global scope (an XLA
 * linked into the program), or in a library loaded with RTLD_LOCAL, as Python loads jaxlib. */
static status_set_failure_fn status_setter(void)
{
    static _Atomic(void *) cached;
    void *sym = atomic_load(&cached);
    if (!sym) {
        sym = dlsym(RTLD_DEFAULT, "XlaCustomCallStatusSetFailure");
        if (!sym)
            dl_iterate_phdr(find_in, &sym);
        atomic_store(&cached, sym);
    }
    status_set_failure_fn set = NULL;
    memcpy(&set, &sym, sizeof set); /* object to function pointer, as POSIX allows */
    return set;
}

static void report(void *status, const char *name, const char *msg)
{
    status_set_failure_fn set = status ? status_setter() : NULL;
    if (set) {
        set(status, msg, strlen(msg));
        return;
    }
    log_msg(BATON_LOG_ERROR, "%s failed: %s", name, msg);
}

void baton_rms_norm_fwd(void *stream, void **buffers, const char *opaque, size_t opaque_len)
{
    char err[BATON_ERROR_MAX];
    if (call(kcuda_rms_norm_fwd, "baton_rms_norm_fwd", stream, buffers, opaque, opaque_len, err,
             sizeof err))
        report(NULL, "baton_rms_norm_fwd", err);
}

void baton_rms_norm_bwd(void *stream, void **buffers, const char *opaque, size_t opaque_len)
{
    char err[BATON_ERROR_MAX];
    if (call(kcuda_rms_norm_bwd, "baton_rms_norm_bwd", stream, buffers, opaque, opaque_len, err,
             sizeof err))
        report(NULL, "baton_rms_norm_bwd", err);
}

void baton_rms_norm_fwd_status(void *stream, void **buffers, const char *opaque, size_t opaque_len,
                               void *status)
{
    char err[BATON_ERROR_MAX];
    if (call(kcuda_rms_norm_fwd, "baton_rms_norm_fwd", stream, buffers, opaque, opaque_len, err,
             sizeof err))
        report(status, "baton_rms_norm_fwd", err);
}

void baton_rms_norm_bwd_status(void *stream, void **buffers, const char *opaque, size_t opaque_len,
                               void *status)
{
    char err[BATON_ERROR_MAX];
    if (call(kcuda_rms_norm_bwd, "baton_rms_norm_bwd", stream, buffers, opaque, opaque_len, err,
             sizeof err))
        report(status, "baton_rms_norm_bwd", err);
}
