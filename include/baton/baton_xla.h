/* baton_xla.h: baton's RMSNorm kernels as XLA custom calls, so that JAX (or any XLA client) can
 * call the same kernels baton schedules. Two conventions:
 *
 * 1. The legacy GPU custom-call ABI of the JAX custom-op tutorial (libbaton, CUDA builds only):
 *    buffers are device pointers, the inputs then the outputs, and `opaque` is the 40-byte
 *    baton_rms_norm_desc of kernels/descriptors.h (docs/kernels.md gives its byte layout):
 *      forward:  x, weight | y, invvar
 *      backward: grad_output, invvar, x, weight | grad_input, grad_weight, part_grad
 *    The plain form cannot report failure: on a bad descriptor (wrong opaque_len, unknown dtype
 *    code, zero-sized shape) or a failed launch it launches nothing and writes the reason to
 *    stderr. The _status form (XLA's API_VERSION_STATUS_RETURNING) reports it to XLA, which
 *    raises it (a Python exception under JAX): through XlaCustomCallStatusSetFailure where the
 *    process has it (looked up at run time in every loaded object, so libbaton links without
 *    XLA); else, as under pip's jaxlib, which has no such symbol, by writing the status in the
 *    layout XLA gives it, std::optional<std::string>, only when the XLA that called was built
 *    against libstdc++'s C++11 strings (its symbols name them, as jaxlib's CUDA plugin's do)
 *    and the status is still empty (BATON_XLA_STATUS_LAYOUT=0 in the environment turns this
 *    off). Where neither holds, the reason goes to the log callback (stderr by default) and the
 *    outputs stay unwritten. examples/jax/legacy_custom_call.py runs this ABI inside JAX
 *    (docs/kernels.md).
 *
 * 2. Typed XLA FFI handlers (libbaton_jax.so, built when CMake is given
 *    -DBATON_XLA_FFI_INCLUDE=<jax.ffi.include_dir()>): for XLA's CPU platform on the CPU kernels,
 *    and for CUDA on the CUDA kernels. Shapes and dtypes come from the buffers (n2 = numel(weight),
 *    n1 = numel(x) / n2, part_grad_size = part_grad's first dim); the one attribute is `eps`
 *    (an f32 or f64 scalar). They answer XLA's metadata query with the command-buffer-compatible
 *    trait, so XLA may capture them into its CUDA graphs. examples/jax/rms_norm.py registers them.
 *
 * Both CUDA conventions launch, for the GPUs and shape classes that baton's tuning measured
 * (docs/kernels.md, "Tuning per GPU"), the variant it chose there: bitwise the same outputs as
 * the fixed default, only faster. Set BATON_NO_AUTOTUNE=1 in the environment for the fixed
 * defaults (reproducible timing).
 *
 * The stream is `void *` (a cudaStream_t) so that this header needs no CUDA include. */
#ifndef BATON_XLA_H
#define BATON_XLA_H

#include <stddef.h>

#include "baton/baton_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- legacy custom-call ABI (libbaton, CUDA builds) ---- */
BATON_API void baton_rms_norm_fwd(void *stream, void **buffers, const char *opaque,
                                  size_t opaque_len);
BATON_API void baton_rms_norm_bwd(void *stream, void **buffers, const char *opaque,
                                  size_t opaque_len);
/* `status` is XLA's XlaCustomCallStatus *. */
BATON_API void baton_rms_norm_fwd_status(void *stream, void **buffers, const char *opaque,
                                         size_t opaque_len, void *status);
BATON_API void baton_rms_norm_bwd_status(void *stream, void **buffers, const char *opaque,
                                         size_t opaque_len, void *status);

/* ---- typed XLA FFI handlers (libbaton_jax.so) ----
 * Each has XLA's XLA_FFI_Handler signature; pass it to jax.ffi.register_ffi_target through
 * jax.ffi.pycapsule. The _cuda ones exist only when libbaton_jax was built with CUDA. */
struct XLA_FFI_Error;
struct XLA_FFI_CallFrame;
BATON_API struct XLA_FFI_Error *baton_ffi_rms_norm_fwd_cpu(struct XLA_FFI_CallFrame *frame);
BATON_API struct XLA_FFI_Error *baton_ffi_rms_norm_bwd_cpu(struct XLA_FFI_CallFrame *frame);
BATON_API struct XLA_FFI_Error *baton_ffi_rms_norm_fwd_cuda(struct XLA_FFI_CallFrame *frame);
BATON_API struct XLA_FFI_Error *baton_ffi_rms_norm_bwd_cuda(struct XLA_FFI_CallFrame *frame);
/* 1 when this libbaton_jax has the _cuda handlers, else 0. */
BATON_API int baton_ffi_has_cuda(void);

#ifdef __cplusplus
}
#endif
#endif /* BATON_XLA_H */
