/* registry.h: the registry's face inside baton. A plan takes a reference on the registry it
 * resolved its targets in, so the targets it points at live as long as it does; the reference is
 * dropped with baton_registry_destroy (targets/registry.c). */
#ifndef BATON_TARGETS_REGISTRY_H
#define BATON_TARGETS_REGISTRY_H

#include "baton/baton.h"
#include "core/core.h"
#include "core/tune.h"

/* The prepare-time tuning hook of target t's implementation for `kind` (baton's own CUDA
 * kernels have one), or NULL. t must be a registered target (baton_registry_find's). */
kernel_tune_fn baton__registry_tuner(const baton_target *t, baton_device_kind kind);
/* Its hook that decides each call once at prepare (core/tune.h), or NULL; as baton__registry_tuner.
 */
kernel_prepare_fn baton__registry_preparer(const baton_target *t, baton_device_kind kind);
/* Its run-time error record (core/tune.h; the decoder ops' CUDA kernels), or NULL. */
kernel_error_fn baton__registry_errors(const baton_target *t, baton_device_kind kind);

/* Takes one more reference on reg (thread-safe); returns reg. */
const baton_registry *baton__registry_retain(const baton_registry *reg);
/* Where messages about reg's plans and runtimes go (baton_registry_set_log); lives as long as
 * reg. */
const log_sink *baton__registry_log(const baton_registry *reg);

/* abi.c: the caller's target `in` as this library's baton_target, read by its struct_size (and
 * its delegate tables by theirs, into ifaces[], which out->impls then point to); fields past a
 * struct_size are zero. BATON_EINVAL or BATON_ENOTSUP (core/abi.h) with a message starting "fn: ".
 */
int baton__target_read(const char *fn, const baton_target *in, baton_target *out,
                       baton_delegate_iface ifaces[BATON_MAX_IMPLS], baton_error *err);

/* What a registry holds at one moment, to undo a plugin's init that failed half-way. */
typedef struct registry_snapshot {
    int n, n_retired;
    baton_target **targets; /* a copy of the target pointers */
} registry_snapshot;

int baton__registry_snapshot_take(const baton_registry *reg, registry_snapshot *snap);
/* Frees what was added since the snapshot and puts back what was replaced. */
void baton__registry_snapshot_restore(baton_registry *reg, registry_snapshot *snap);
void baton__registry_snapshot_free(registry_snapshot *snap);
/* Keeps a loaded plugin (a dlopen handle) until the registry is freed: 0 or BATON_ENOMEM. */
int baton__registry_keep_plugin(baton_registry *reg, void *handle);
int baton__registry_has_plugin(const baton_registry *reg, void *handle);
/* plugin.c: unloads a plugin the registry kept. */
void baton__plugin_close(void *handle);

#endif /* BATON_TARGETS_REGISTRY_H */
