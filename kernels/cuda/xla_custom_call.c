/* xla_custom_call.c: the legacy XLA GPU custom-call ABI over the CUDA RMSNorm kernels (see
 * include/baton/baton_xla.h). Failures of the status-returning forms reach XLA through
 * kernels/xla_status.c, so libbaton links without XLA. */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "baton/baton_xla.h"
#include "core/core.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/rms_norm_tune.h"
#include "kernels/desc_check.h"
#include "kernels/xla_status.h"

int baton__kcuda_zero_async(void *p, size_t bytes, void *stream, char *err, size_t errlen)
{
    if (bytes == 0)
        return 0;
    const cudaError_t e = cudaMemsetAsync(p, 0, bytes, (cudaStream_t)stream);
    if (e != cudaSuccess)
        return baton__reason_set(err, errlen, BATON_ECUDA,
                                 "cudaMemsetAsync of %zu bytes failed: %s", bytes,
                                 cudaGetErrorString(e));
    return 0;
}

/* An empty batch (n1 = 0; the tutorial's jax.grad over x of shape (0, n)) launches no kernel:
 * the forward writes nothing, the backward zeros grad_weight and part_grad, as PyTorch gives.
 * 1 when it was one (rc in *rc), 0 to run the kernel. */
static int empty_batch(baton_kernel_fn fn, void *stream, void **buffers, const char *opaque,
                       size_t opaque_len, char *err, size_t errlen, int *rc)
{
    const int bwd = fn == baton__kcuda_rms_norm_bwd;
    baton_rms_norm_shard_desc d;
    if (!baton__rms_norm_desc_empty_batch(opaque, opaque_len, bwd, &d))
        return 0;
    *rc = 0;
    if (bwd && buffers && buffers[5] && buffers[6]) {
        const size_t iv = d.rms.x_dtype == BATON_DTYPE_F64 ? 8 : 4;
        *rc = baton__kcuda_zero_async(
            buffers[5], (size_t)d.rms.n2 * baton_dtype_size(d.rms.w_dtype), stream, err, errlen);
        if (*rc == 0)
            *rc = baton__kcuda_zero_async(
                buffers[6], (size_t)(d.rms.part_grad_size * d.rms.n2) * iv, stream, err, errlen);
    } else if (bwd) {
        *rc = baton__reason_set(err, errlen, BATON_EINVAL, "a NULL buffer");
    }
    return 1;
}

static int call(baton_kernel_fn fn, const char *name, void *stream, void **buffers,
                const char *opaque, size_t opaque_len, char *err, size_t errlen)
{
    int empty_rc;
    err[0] = 0;
    if (empty_batch(fn, stream, buffers, opaque, opaque_len, err, errlen, &empty_rc))
        return empty_rc;
    baton_exec_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.struct_size = sizeof ctx;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        dev = -1;
    ctx.device.kind = BATON_DEVICE_CUDA;
    ctx.device.index = dev;
    ctx.stream = stream;
    /* No prepare step to time at: the GPU's built-in picks (the same bits as the defaults). */
    ctx.autotune = baton__kcuda_rms_autotune_from_env();
    (void)name; /* report() names the call */
    ctx.errbuf = err;
    ctx.errbuf_len = errlen;
    err[0] = 0;
    return fn(&ctx, buffers, opaque, opaque_len);
}

/* A failure of the _status forms goes to XLA (xla_status.h), or where it cannot, to the log as the
 * plain forms' failures do. `caller` is the entry point's return address: XLA's thunk. */
static void report(void *status, const void *caller, const char *name, const char *msg)
{
    if (status) {
        char named[BATON_ERROR_MAX + 64];
        snprintf(named, sizeof named, "%s: %s", name, msg);
        if (baton__xla_status_fail(status, caller, named) != XLA_STATUS_NOT_SET)
            return;
    }
    baton__log_msg(BATON_LOG_ERROR, "%s failed: %s", name, msg);
}

void baton_rms_norm_fwd(void *stream, void **buffers, const char *opaque, size_t opaque_len)
{
    char err[BATON_ERROR_MAX];
    if (call(baton__kcuda_rms_norm_fwd, "baton_rms_norm_fwd", stream, buffers, opaque, opaque_len,
             err, sizeof err))
        report(NULL, NULL, "baton_rms_norm_fwd", err);
}

void baton_rms_norm_bwd(void *stream, void **buffers, const char *opaque, size_t opaque_len)
{
    char err[BATON_ERROR_MAX];
    if (call(baton__kcuda_rms_norm_bwd, "baton_rms_norm_bwd", stream, buffers, opaque, opaque_len,
             err, sizeof err))
        report(NULL, NULL, "baton_rms_norm_bwd", err);
}

void baton_rms_norm_fwd_status(void *stream, void **buffers, const char *opaque, size_t opaque_len,
                               void *status)
{
    char err[BATON_ERROR_MAX];
    if (call(baton__kcuda_rms_norm_fwd, "baton_rms_norm_fwd", stream, buffers, opaque, opaque_len,
             err, sizeof err))
        report(status, __builtin_return_address(0), "baton_rms_norm_fwd", err);
}

void baton_rms_norm_bwd_status(void *stream, void **buffers, const char *opaque, size_t opaque_len,
                               void *status)
{
    char err[BATON_ERROR_MAX];
    if (call(baton__kcuda_rms_norm_bwd, "baton_rms_norm_bwd", stream, buffers, opaque, opaque_len,
             err, sizeof err))
        report(status, __builtin_return_address(0), "baton_rms_norm_bwd", err);
}
