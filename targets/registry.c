/* registry.c: the table of targets (kernels and delegates) that plans name. A registry starts
 * with baton's built-ins; embedders add their own targets or their own device implementations of
 * a built-in (e.g. a ROCm rms_norm) with baton_registry_add. */
#include <stdlib.h>
#include <string.h>

#include "targets/builtin.h"
#include "core/core.h"

struct baton_registry {
    int n, cap;
    baton_target **targets; /* each copy allocated alone: plans keep pointers to them */
};

int baton_registry_create(baton_registry **out)
{
    if (!out)
        return BATON_EINVAL;
    *out = NULL;
    baton_registry *reg = calloc(1, sizeof *reg);
    if (!reg)
        return BATON_ENOMEM;
    for (int i = 0; i < baton_builtin_target_count; i++) {
        int rc = baton_registry_add(reg, baton_builtin_targets[i], NULL);
        if (rc) {
            baton_registry_destroy(reg);
            return rc;
        }
    }
    *out = reg;
    return 0;
}

void baton_registry_destroy(baton_registry *reg)
{
    if (!reg)
        return;
    for (int i = 0; i < reg->n; i++)
        free(reg->targets[i]);
    free(reg->targets);
    free(reg);
}

static baton_target *find_mut(const baton_registry *reg, const char *name)
{
    for (int i = 0; i < reg->n; i++)
        if (strcmp(reg->targets[i]->name, name) == 0)
            return reg->targets[i];
    return NULL;
}

int baton_registry_add(baton_registry *reg, const baton_target *t, baton_error *err)
{
    if (!reg || !t || !t->name || !t->name[0])
        return baton_seterr(err, BATON_EINVAL, "baton_registry_add: a target needs a name");
    if (t->kind != BATON_TARGET_KERNEL && t->kind != BATON_TARGET_DELEGATE)
        return baton_seterr(err, BATON_EINVAL,
                            "baton_registry_add: target '%s' must be a kernel or a delegate",
                            t->name);
    if (t->n_impls < 0 || t->n_impls > BATON_MAX_IMPLS)
        return baton_seterr(err, BATON_EINVAL,
                            "baton_registry_add: target '%s' has %d implementations (at most %d)",
                            t->name, t->n_impls, BATON_MAX_IMPLS);
    for (int i = 0; i < t->n_impls; i++) {
        const baton_target_impl *im = &t->impls[i];
        int ok = t->kind == BATON_TARGET_KERNEL ? im->kernel != NULL
                                                : (im->delegate && im->delegate->execute);
        if (!ok)
            return baton_seterr(
                err, BATON_EINVAL, "baton_registry_add: target '%s' implementation %d has no %s",
                t->name, i, t->kind == BATON_TARGET_KERNEL ? "kernel function" : "execute()");
    }
    baton_target *have = find_mut(reg, t->name);
    if (have) {
        if (have->kind != t->kind)
            return baton_seterr(err, BATON_EINVAL,
                                "baton_registry_add: '%s' is already registered as a %s", t->name,
                                have->kind == BATON_TARGET_KERNEL ? "kernel" : "delegate");
        for (int i = 0; i < t->n_impls; i++) {
            if (baton_target_impl_for(have, t->impls[i].device))
                return baton_seterr(err, BATON_EINVAL,
                                    "baton_registry_add: '%s' already has an implementation for "
                                    "that device kind",
                                    t->name);
            if (have->n_impls == BATON_MAX_IMPLS)
                return baton_seterr(err, BATON_EINVAL,
                                    "baton_registry_add: '%s' has no room for more implementations",
                                    t->name);
            have->impls[have->n_impls++] = t->impls[i];
        }
        return 0;
    }
    if (reg->n == reg->cap) {
        int cap = reg->cap ? reg->cap * 2 : 16;
        baton_target **nt = realloc(reg->targets, (size_t)cap * sizeof *nt);
        if (!nt)
            return baton_seterr(err, BATON_ENOMEM, "baton_registry_add: out of memory");
        reg->targets = nt;
        reg->cap = cap;
    }
    baton_target *copy = malloc(sizeof *copy);
    if (!copy)
        return baton_seterr(err, BATON_ENOMEM, "baton_registry_add: out of memory");
    *copy = *t;
    reg->targets[reg->n++] = copy;
    return 0;
}

const baton_target *baton_registry_find(const baton_registry *reg, const char *name)
{
    if (!reg || !name)
        return NULL;
    return find_mut(reg, name);
}

int baton_registry_count(const baton_registry *reg)
{
    return reg ? reg->n : 0;
}

const baton_target *baton_registry_at(const baton_registry *reg, int i)
{
    if (!reg || i < 0 || i >= reg->n)
        return NULL;
    return reg->targets[i];
}

const baton_target_impl *baton_target_impl_for(const baton_target *t, baton_device_kind kind)
{
    if (!t)
        return NULL;
    for (int i = 0; i < t->n_impls; i++)
        if (t->impls[i].device == kind)
            return &t->impls[i];
    return NULL;
}
