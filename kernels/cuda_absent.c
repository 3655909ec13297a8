/* cuda_absent.c: the legacy XLA custom-call entry points of a CPU-only build (-DBATON_CUDA=OFF).
 * CMake compiles this file instead of kernels/cuda/xla_custom_call.c, so that both builds export
 * the same symbols (scripts/check-exports.py) and one program links against either library; here
 * each call launches nothing and reports that this build has no CUDA. */
#include "baton/baton_xla.h"
#include "core/core.h"
#include "kernels/xla_status.h"

#define NO_CUDA "this build of baton has no CUDA (rebuild with -DBATON_CUDA=ON)"

/* As the CUDA build reports a failed call: to XLA through the status where it can, else the log.
 * `caller` is the entry point's return address, XLA's thunk. */
static void report(void *status, const void *caller, const char *name)
{
    if (status && baton__xla_status_fail(status, caller, name) != XLA_STATUS_NOT_SET)
        return;
    baton__log_msg(BATON_LOG_ERROR, "%s", name);
}

void baton_rms_norm_fwd(void *stream, void **buffers, const char *opaque, size_t opaque_len)
{
    report(NULL, NULL, "baton_rms_norm_fwd failed: " NO_CUDA);
}

void baton_rms_norm_bwd(void *stream, void **buffers, const char *opaque, size_t opaque_len)
{
    report(NULL, NULL, "baton_rms_norm_bwd failed: " NO_CUDA);
}

void baton_rms_norm_fwd_status(void *stream, void **buffers, const char *opaque, size_t opaque_len,
                               void *status)
{
    report(status, __builtin_return_address(0), "baton_rms_norm_fwd: " NO_CUDA);
}

void baton_rms_norm_bwd_status(void *stream, void **buffers, const char *opaque, size_t opaque_len,
                               void *status)
{
    report(status, __builtin_return_address(0), "baton_rms_norm_bwd: " NO_CUDA);
}
