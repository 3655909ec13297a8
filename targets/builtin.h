/* builtin.h: the targets baton registers by default: the built-in kernels rms_norm_fwd,
 * rms_norm_bwd, softshrink, add, mul, add_scalar, copy, argmax, noop (targets/builtin.c) and the
 * gemm delegate (targets/gemm.c). baton_registry_create() adds each of them. */
#ifndef BATON_TARGETS_BUILTIN_H
#define BATON_TARGETS_BUILTIN_H

#include "baton/baton.h"
#include "core/tune.h"

/* The implementations of a built-in kernel `fn`: baton__kcpu_fn, and in a CUDA build
 * baton__kcuda_fn. Every built-in CUDA kernel calls pdl_wait() before it touches global memory,
 * so each may be a programmatic dependent launch (baton_target_impl.supports_pdl). */
#ifdef BATON_CUDA
#define BATON_BUILTIN_KERNEL_IMPLS(fn)                                                             \
    .impls = {{.device = BATON_DEVICE_CPU, .kernel = baton__kcpu_##fn},                            \
              {.device = BATON_DEVICE_CUDA, .kernel = baton__kcuda_##fn, .supports_pdl = 1}},      \
    .n_impls = 2
#else
#define BATON_BUILTIN_KERNEL_IMPLS(fn)                                                             \
    .impls = {{.device = BATON_DEVICE_CPU, .kernel = baton__kcpu_##fn}}, .n_impls = 1
#endif

extern const baton_target baton__target_gemm;
extern const baton_target baton__target_gemm_add; /* gemm with c added (targets/gemm.c) */
/* the decoder's GEMV fusions (targets/gemv_fused.c) */
extern const baton_target baton__target_rms_norm_gemm, baton__target_swiglu_gemm_add;

/* A built-in target as baton describes it: its public description, and what only baton's own
 * implementations have: impls[k]'s prepare-time hooks (core/tune.h), tuning (the CUDA RMSNorm
 * kernels) and deciding each call once (the CUDA RMSNorm forward and backward), and the run-time
 * error record (the decoder ops' CUDA kernels), or NULL. The
 * registry keeps each hook with its implementation. */
typedef struct builtin_target {
    const baton_target *target;
    kernel_tune_fn tune[BATON_MAX_IMPLS];
    kernel_prepare_fn prepare[BATON_MAX_IMPLS]; /* impls[k]'s prepare hook (core/tune.h) */
    kernel_error_fn errors[BATON_MAX_IMPLS];    /* impls[k]'s run-time error record, or NULL */
} builtin_target;

extern const builtin_target baton__builtin_targets[];

/* A target's pack(): copies the `size` bytes of its descriptor into opaque, or BATON_EINVAL when
 * opaque is NULL or smaller; returns the bytes written. */
int baton__put_desc(const void *desc, size_t size, char *opaque, size_t cap);

/* A plan's own descriptor ("opaque"), checked at load: the fix every refusal ends with, and a
 * float field that an attribute may also give, which must agree with it where the step gives it
 * ("... field eps is 0.001 but attribute eps is 1e-05: give one, or the same value in both"). */
#define BATON_OPAQUE_FIX "; fix the bytes, or leave \"opaque\" out and baton packs the descriptor"
int baton__opaque_attr(const baton_sig_args *a, const char *field, double have, const char *attr,
                       double want, char *msg, size_t len);
extern const int baton__builtin_target_count;

#endif /* BATON_TARGETS_BUILTIN_H */
