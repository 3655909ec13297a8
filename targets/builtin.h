/* builtin.h: the targets baton registers by default: the built-in kernels rms_norm_fwd,
 * rms_norm_bwd, softshrink, add, mul, add_scalar, copy, argmax, noop (targets/builtin.c) and the
 * gemm delegate (targets/gemm.c). baton_registry_create() adds each of them. */
#ifndef BATON_TARGETS_BUILTIN_H
#define BATON_TARGETS_BUILTIN_H

#include "baton/baton.h"
#include "core/tune.h"

extern const baton_target baton_target_gemm;
extern const baton_target *const baton_builtin_targets[];
extern const int baton_builtin_target_count;

/* The prepare-time tuning hook of a built-in CUDA kernel (kcuda_rms_norm_fwd and _bwd have one),
 * or NULL: keyed by the kernel function, so a target replaced by another kernel has none. */
kernel_tune_fn target_kernel_tuner(baton_kernel_fn kernel);

#endif /* BATON_TARGETS_BUILTIN_H */
