/* rms_norm_tune.h: the per-device choice of the CUDA RMSNorm's variant (rms_norm_cuda.h): a cache,
 * keyed by the GPU's name and the call's shape class, of the variant that prepare-time tuning
 * measured fastest. Plain C with no CUDA header: CPU-only builds compile it, and
 * tests/test_rms_layout.c checks the keys and the cache; rms_norm_tune.cu measures. */
#ifndef BATON_KCUDA_RMS_NORM_TUNE_H
#define BATON_KCUDA_RMS_NORM_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/rms_norm_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A shape class on one kind of GPU. Calls of one class share a tuned variant: the same GPU name,
 * pass, dtypes, row length, alignment (vec) and chosen kernel family (mode), rows within a power
 * of two (and, backward, part_grad blocks within a power of two). Any variant is bitwise safe on
 * any call it applies to, so a class only decides whose measurement a call reuses. */
typedef struct kcuda_rms_tune_key {
    char device[64]; /* cudaDeviceProp.name, truncated, NUL-padded */
    int bwd;
    int x_dtype, w_dtype;
    int mode, vec; /* the chosen layout's, before any variant */
    int n1_log2, p_log2;
    int64_t n2;
} kcuda_rms_tune_key;

/* Fills *k (every byte: keys are compared with memcmp) for a call d whose layout, chosen with no
 * variant, is L, on a GPU named `device`. */
void baton__kcuda_rms_tune_key_make(kcuda_rms_tune_key *k, const char *device, int bwd,
                                    const baton_rms_norm_desc *d, const kcuda_rms_layout *L);

/* The cache: process-wide, lock-free (a slot is claimed with an atomic counter and published with
 * a release store), at most KCUDA_RMS_TUNE_SLOTS classes. find: 1 and *v when the class has an
 * entry, else 0. store: 0, or BATON_ENOMEM when the cache is full (the class then keeps its
 * default); a class stored twice (two tunings racing) keeps the first entry. */
#define KCUDA_RMS_TUNE_SLOTS 256
int baton__kcuda_rms_tune_find(const kcuda_rms_tune_key *k, kcuda_rms_variant *v);
int baton__kcuda_rms_tune_store(const kcuda_rms_tune_key *k, const kcuda_rms_variant *v);
/* Empties the cache, for tests; not while another thread uses it. */
void baton__kcuda_rms_tune_reset(void);
/* Nonzero while the cache holds nothing (for tests). */
int baton__kcuda_rms_tune_empty(void);

/* The built-in picks: what prepare-time tuning chose, per GPU name and shape class, on the GPUs
 * baton's benchmarks ran on (bench/kernels/rmsnorm_tune.json, bench_kernels). They serve calls that
 * ask for tuned variants but whose class this process has not measured: the JAX/XLA entry points,
 * which have no prepare step to time at. A measurement in this process (the cache) always comes
 * first. baton__kcuda_rms_tune_builtin: 1 and *v when the table has k's class, else 0. _count and
 * _at list the table (tests check that every pick applies to the layout its class chooses). */
int baton__kcuda_rms_tune_builtin(const kcuda_rms_tune_key *k, kcuda_rms_variant *v);
int baton__kcuda_rms_tune_builtin_count(void);
void baton__kcuda_rms_tune_builtin_at(int i, kcuda_rms_tune_key *k, kcuda_rms_variant *v);

/* For a plain call (no override) whose context asks for tuned variants (baton_exec_ctx.autotune):
 * when the cache, or else the built-in table, holds a variant for L's class on the GPU named
 * `device`, applies it to L (the layout chosen for d with no override); else, or when it does not
 * apply, leaves L as it is. Every variant gives the default's bits, so only speed depends on it. */
void baton__kcuda_rms_apply_tuned(const char *device, int bwd, const baton_rms_norm_desc *d,
                                  const kcuda_rms_device *dev, kcuda_rms_layout *L);

/* Whether the entry points that have no options (the JAX/XLA handlers) ask for tuned variants:
 * yes, unless the environment sets BATON_NO_AUTOTUNE to anything but "" or "0" (the fixed
 * defaults, for reproducible timing, as `baton --no-autotune`). Read once per process. */
int baton__kcuda_rms_autotune_from_env(void);

#ifdef __cplusplus
}
#endif
#endif /* BATON_KCUDA_RMS_NORM_TUNE_H */
