/* init.c: a constant's initial value, written into a host buffer at prepare time. The seeded
 * kinds (normal, uniform) come from core/rng.c, which produces the same bits on every machine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "plan/plan_internal.h"

static void put(baton_dtype dt, void *dst, int64_t i, double v)
{
    store_f64_clamped(dt, dst, i, v);
}

int baton__plan_tensor_materialize(const baton_plan *plan, int tensor, void *dst, baton_error *err)
{
    if (!plan || !dst || tensor < 0 || tensor >= plan->n_tensors)
        return baton__err_set(
            err, BATON_EINVAL,
            "baton__plan_tensor_materialize: no plan, no buffer or tensor %d out of range", tensor);
    const plan_tensor *t = &plan->tensors[tensor];
    const tensor_init *in = &t->init;
    baton_dtype dt = t->desc.dtype;
    int64_t n = baton_tensor_desc_numel(&t->desc);
    if ((t->role != BATON_ROLE_CONSTANT && t->role != BATON_ROLE_STATE) || in->kind == INIT_NONE)
        return baton__plan_error(
            err, BATON_EINVAL, plan, t->pos,
            "tensor '%s' is not a constant or state; only those have an initial "
            "value",
            t->name);
    switch (in->kind) {
    case INIT_FILL:
        for (int64_t i = 0; i < n; i++)
            put(dt, dst, i, in->value);
        return 0;
    case INIT_NORMAL: baton__rng_fill_normal(dst, dt, n, in->seed, in->mean, in->std); return 0;
    case INIT_UNIFORM: baton__rng_fill_uniform(dst, dt, n, in->seed, in->low, in->high); return 0;
    case INIT_VALUES:
        if (in->n_values != n)
            return baton__plan_error(err, BATON_EPLAN, plan, t->pos,
                                     "tensor '%s' has %lld inline values for %lld elements",
                                     t->name, (long long)in->n_values, (long long)n);
        for (int64_t i = 0; i < n; i++)
            put(dt, dst, i, in->values[i]);
        return 0;
    case INIT_NPY: {
        baton_tensor_desc d;
        void *data = NULL;
        baton_error nerr = {0};
        int rc = baton_npy_read(in->path, &d, &data, &nerr);
        if (rc)
            return baton__plan_error(err, rc, plan, t->pos,
                                     "tensor '%s': cannot load its npy init: %s", t->name,
                                     nerr.message);
        int same = d.dtype == dt && d.rank == t->desc.rank;
        for (int i = 0; same && i < d.rank; i++)
            same = d.shape[i] == t->desc.shape[i];
        if (!same) {
            free(data);
            return baton__plan_error(
                err, BATON_EPLAN, plan, t->pos,
                "tensor '%s': %s changed since the plan was loaded: its dtype or "
                "shape no longer matches the declaration",
                t->name, in->path);
        }
        memcpy(dst, data, t->nbytes);
        free(data);
        return 0;
    }
    case INIT_SAFETENSORS:
        /* mapped at load, checked against the declaration there */
        memcpy(dst, in->mapped, t->nbytes);
        return 0;
    default:
        return baton__plan_error(err, BATON_EINVAL, plan, t->pos, "tensor '%s' has no initialiser",
                                 t->name);
    }
}
