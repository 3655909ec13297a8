/* xla_custom_call.c: the legacy XLA GPU custom-call ABI over the CUDA RMSNorm kernels (see
 * include/baton/baton_xla.h). XlaCustomCallStatusSetFailure is looked up in the process at the
 * time of a failure, so libbaton links without XLA. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "baton/baton_xla.h"
#include "core/core.h"
#include "kernels/cuda/cuda_kernels.h"

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
    (void)name; /* report() names the call */
    ctx.errbuf = err;
    ctx.errbuf_len = errlen;
    err[0] = 0;
    return fn(&ctx, buffers, opaque, opaque_len);
}

static void report(void *status, const char *name, const char *msg)
{
    status_set_failure_fn set = NULL;
    void *sym = status ? dlsym(RTLD_DEFAULT, "XlaCustomCallStatusSetFailure") : NULL;
    memcpy(&set, &sym, sizeof set); /* object to function pointer, as POSIX allows */
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
