/* registry.h: the registry's face inside baton. A plan takes a reference on the registry it
 * resolved its targets in, so the targets it points at live as long as it does; the reference is
 * dropped with baton_registry_destroy (targets/registry.c). */
#ifndef BATON_TARGETS_REGISTRY_H
#define BATON_TARGETS_REGISTRY_H

#include "baton/baton.h"

/* Takes one more reference on reg (thread-safe); returns reg. */
const baton_registry *registry_retain(const baton_registry *reg);

/* abi.c: the caller's target `in` as this library's baton_target, read by its struct_size (and
 * its delegate tables by theirs, into ifaces[], which out->impls then point to); fields past a
 * struct_size are zero. BATON_EINVAL or BATON_ENOTSUP (core/abi.h) with a message starting "fn: ".
 */
int target_read(const char *fn, const baton_target *in, baton_target *out,
                baton_delegate_iface ifaces[BATON_MAX_IMPLS], baton_error *err);

#endif /* BATON_TARGETS_REGISTRY_H */
