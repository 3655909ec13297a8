/* registry.h: the registry's face inside baton. A plan takes a reference on the registry it
 * resolved its targets in, so the targets it points at live as long as it does; the reference is
 * dropped with baton_registry_destroy (targets/registry.c). */
#ifndef BATON_TARGETS_REGISTRY_H
#define BATON_TARGETS_REGISTRY_H

#include "baton/baton.h"

/* Takes one more reference on reg (thread-safe); returns reg. */
const baton_registry *registry_retain(const baton_registry *reg);

#endif /* BATON_TARGETS_REGISTRY_H */
