/* state.c: what a runtime keeps between runs (issue 40): state tensors, initialised at prepare and
 * by baton_runtime_reset_state and read or written by name between runs, and the binding of the
 * plan's dimensions, which updates every affected step's descriptors (ctx->sig and the packed
 * opaque) and the transfers' byte counts before the first run that uses new values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/runtime.h"

/* The device index a state tensor lives on (its steps' one device; the host when unused). */
static int state_dev(const baton_runtime *rt, int t)
{
    const plan_tensor *pt = &rt->plan->tensors[t];
    if (pt->state_device.kind == BATON_DEVICE_NONE)
        return 0;
    return baton__plan_memory_index(rt->plan, pt->state_device);
}

/* Copies between a host buffer and a state tensor's slot, synchronously. */
static int state_copy(baton_runtime *rt, int t, void *host, size_t n, int to_device,
                      baton_error *err)
{
    int d = state_dev(rt, t);
    rt_device *rd = &rt->dev[d];
    void *slot =
        rt->state_ptr && rt->state_ptr[t] ? rt->state_ptr[t] : baton__runtime_slot_addr(rt, d, t);
    if (!slot)
        return baton__err_set(err, BATON_ESTATE, "state tensor '%s' has no slot",
                              rt->plan->tensors[t].name);
    if (!rd->gpu || !dev_has(rd->ops, DEV_CAP_DEVICE_MEMORY)) { /* host memory */
        if (to_device)
            memcpy(slot, host, n);
        else
            memcpy(host, slot, n);
        return 0;
    }
    int rc = to_device ? rd->ops->copy_sync(rd->ctx, slot, host, n, DEV_COPY_H2D, err)
                       : rd->ops->copy_sync(rd->ctx, host, slot, n, DEV_COPY_D2H, err);
    if (rc) {
        char inner[BATON_ERROR_MAX], name[32];
        snprintf(inner, sizeof inner, "%s", err ? err->message : "");
        return baton__err_set(err, rc, "state tensor '%s' on %s: %s", rt->plan->tensors[t].name,
                              baton_device_format(rt->plan->memory[d].device, name, sizeof name),
                              inner);
    }
    return 0;
}

int baton_runtime_reset_state(baton_runtime *rt, baton_error *err)
{
    err_clear(err);
    if (!rt)
        return baton__err_set(err, BATON_EINVAL, "baton_runtime_reset_state: no runtime");
    int qrc = baton__runtime_settle(rt, err);
    if (qrc)
        return qrc;
    const baton_plan *plan = rt->plan;
    if (!plan->has_state)
        return 0;
    size_t most = 0;
    for (int t = 0; t < plan->n_tensors; t++)
        if (plan->tensors[t].role == BATON_ROLE_STATE && plan->tensors[t].nbytes > most)
            most = plan->tensors[t].nbytes;
    void *host = malloc(most ? most : 1);
    if (!host)
        return baton__err_set(err, BATON_ENOMEM, "baton_runtime_reset_state: out of memory");
    int rc = 0;
    for (int t = 0; t < plan->n_tensors && !rc; t++) {
        const plan_tensor *pt = &plan->tensors[t];
        if (pt->role != BATON_ROLE_STATE || rt->dev[state_dev(rt, t)].remote)
            continue; /* another rank's GPU holds it (baton_options.world) */
        rc = baton__plan_tensor_materialize(plan, t, host, err);
        if (!rc)
            rc = state_copy(rt, t, host, pt->nbytes, 1, err);
    }
    free(host);
    return rc;
}

int baton__runtime_state_access(baton_runtime *rt, int t, void *data, size_t nbytes, int write,
                                baton_error *err)
{
    const plan_tensor *pt = &rt->plan->tensors[t];
    if (nbytes != pt->nbytes)
        return baton__err_set(err, BATON_EINVAL,
                              "%s: state tensor '%s' (%s, %lld elements) has %zu bytes, not %zu",
                              rt->plan->source, pt->name, baton_dtype_name(pt->desc.dtype),
                              (long long)baton_tensor_desc_numel(&pt->desc), pt->nbytes, nbytes);
    if (!data && nbytes)
        return baton__err_set(err, BATON_EINVAL,
                              "state tensor '%s': data is NULL; pass a buffer of %zu "
                              "bytes",
                              pt->name, nbytes);
    return state_copy(rt, t, data, nbytes, write, err);
}

/* ---- dimensions ------------------------------------------------------------------------------ */

int baton__runtime_dims_prepare(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    if (!plan->n_dims)
        return 0;
    rt->dims = calloc((size_t)plan->n_dims, sizeof *rt->dims);
    rt->dims_ran = calloc((size_t)plan->n_dims, sizeof *rt->dims_ran);
    rt->dims_by = calloc((size_t)plan->n_dims, sizeof *rt->dims_by);
    rt->opaques = calloc((size_t)plan->n_steps, BATON_OPAQUE_MAX);
    if (!rt->dims || !rt->dims_ran || !rt->dims_by || !rt->opaques)
        return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
    /* memory and check() were made for the max: runs start there */
    for (int k = 0; k < plan->n_dims; k++) {
        rt->dims[k] = rt->dims_ran[k] = plan->dims[k].max;
        rt->dims_by[k] = -1;
    }
    return 0;
}

void baton__runtime_dims_free(baton_runtime *rt)
{
    free(rt->dims);
    free(rt->dims_ran);
    free(rt->dims_by);
    free(rt->opaques);
}

/* Tensor t's shape under the given binding. */
static void bound_desc(const baton_plan *plan, const int64_t *dims, int t, baton_tensor_desc *out)
{
    const plan_tensor *pt = &plan->tensors[t];
    *out = pt->desc;
    if (!pt->has_dims || !dims)
        return;
    for (int a = 0; a < out->rank; a++)
        if (pt->dim[a] >= 0)
            out->shape[a] = dims[pt->dim[a]];
}

size_t baton__runtime_tensor_bytes(const baton_runtime *rt, int t, int ran)
{
    const plan_tensor *pt = &rt->plan->tensors[t];
    if (!pt->has_dims || !rt->dims)
        return pt->nbytes;
    baton_tensor_desc d;
    bound_desc(rt->plan, ran ? rt->dims_ran : rt->dims, t, &d);
    return (size_t)baton_tensor_desc_numel(&d) * baton_dtype_size(d.dtype);
}

static int find_dim(const baton_plan *plan, const char *name)
{
    for (int k = 0; k < plan->n_dims; k++)
        if (strcmp(plan->dims[k].name, name) == 0)
            return k;
    return -1;
}

/* Binds dimension k for the next run; `by` is the input that implies it (-1: explicit). */
static int bind_dim(baton_runtime *rt, int k, int64_t value, int by, baton_error *err)
{
    const plan_dim *pd = &rt->plan->dims[k];
    if (value < pd->min || value > pd->max) {
        if (by >= 0)
            return baton__err_set(
                err, BATON_EINVAL,
                "%s: input '%s' implies dimension '%s' = %lld, outside its bounds "
                "%lld..%lld; give the input a shape within them",
                rt->plan->source, rt->plan->tensors[by].name, pd->name, (long long)value,
                (long long)pd->min, (long long)pd->max);
        return baton__err_set(
            err, BATON_EINVAL,
            "%s: dimension '%s' = %lld is outside its bounds %lld..%lld (the plan's "
            "\"dims\")",
            rt->plan->source, pd->name, (long long)value, (long long)pd->min, (long long)pd->max);
    }
    if (by >= 0 && rt->dims_by[k] >= 0 && rt->dims_by[k] != by && rt->dims[k] != value)
        return baton__err_set(
            err, BATON_EINVAL,
            "%s: input '%s' implies dimension '%s' = %lld but input '%s' bound it to "
            "%lld for this run; the inputs disagree on '%s'",
            rt->plan->source, rt->plan->tensors[by].name, pd->name, (long long)value,
            rt->plan->tensors[rt->dims_by[k]].name, (long long)rt->dims[k], pd->name);
    rt->dims[k] = value;
    if (by >= 0)
        rt->dims_by[k] = by;
    return 0;
}

int baton_runtime_set_dims(baton_runtime *rt, const char *name, int64_t value, baton_error *err)
{
    err_clear(err);
    if (!rt || !name)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_set_dims: a runtime and a name are "
                              "required");
    int qrc =
        baton__runtime_settle(rt, err); /* queued runs keep the shapes they were issued with */
    if (qrc)
        return qrc;
    const baton_plan *plan = rt->plan;
    int k = find_dim(plan, name);
    if (k < 0) {
        plan_suggest sg;
        char hint[PLAN_MAX_NAME + 32] = "";
        baton__plan_suggest_init(&sg, name);
        for (int q = 0; q < plan->n_dims; q++)
            baton__plan_suggest_try(&sg, plan->dims[q].name);
        if (baton__plan_suggest_best(&sg))
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", baton__plan_suggest_best(&sg));
        return baton__err_set(err, BATON_ENOENT, "%s: the plan declares no dimension '%.64s'%s%s",
                              plan->source, name, hint, plan->n_dims ? "" : "; it has no \"dims\"");
    }
    return bind_dim(rt, k, value, -1, err);
}

int baton_runtime_get_dims(const baton_runtime *rt, const char *name, int64_t *value)
{
    if (!rt || !name || !value)
        return BATON_EINVAL;
    int k = find_dim(rt->plan, name);
    if (k < 0)
        return BATON_ENOENT;
    *value = rt->dims[k];
    return 0;
}

int baton__runtime_bind_from_input(baton_runtime *rt, int t, size_t nbytes, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    const plan_tensor *pt = &plan->tensors[t];
    if (!pt->has_dims || nbytes == baton__runtime_tensor_bytes(rt, t, 0))
        return 0;
    int k = -1, axes = 0;
    size_t fixed = baton_dtype_size(pt->desc.dtype);
    for (int a = 0; a < pt->desc.rank; a++) {
        if (pt->dim[a] < 0) {
            fixed *= (size_t)pt->desc.shape[a];
            continue;
        }
        if (k >= 0 && pt->dim[a] != k)
            return baton__err_set(
                err, BATON_EINVAL,
                "%s: input '%s' has %zu bytes, not the %zu its dimensions give now, and "
                "its shape names two dimensions, so its size alone cannot bind them; "
                "call baton_runtime_set_dims first",
                plan->source, pt->name, nbytes, baton__runtime_tensor_bytes(rt, t, 0));
        k = pt->dim[a];
        axes++;
    }
    if (axes != 1 || nbytes % fixed != 0)
        return baton__err_set(
            err, BATON_EINVAL,
            "%s: input '%s' has %zu bytes, not the %zu its dimensions give now%s; give "
            "a whole number of rows or call baton_runtime_set_dims first",
            plan->source, pt->name, nbytes, baton__runtime_tensor_bytes(rt, t, 0),
            axes != 1 ? " (a dimension used twice in its shape)" : "");
    return bind_dim(rt, k, (int64_t)(nbytes / fixed), t, err);
}

/* The dims as "seq=17, batch=2", for messages. */
static void format_binding(const baton_runtime *rt, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = 0;
    for (int k = 0; k < rt->plan->n_dims && used < cap; k++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s=%lld", k ? ", " : "",
                                 rt->plan->dims[k].name, (long long)rt->dims[k]);
}

/* Step i's tensors under the pending binding, and its target's check() of them. */
static int check_step(baton_runtime *rt, int i, baton_tensor_desc *dd, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    const plan_step *s = &plan->steps[i];
    for (int k = 0; k < s->n_inputs; k++)
        bound_desc(plan, rt->dims, s->inputs[k], &dd[k]);
    for (int k = 0; k < s->n_outputs; k++)
        bound_desc(plan, rt->dims, s->outputs[k], &dd[s->n_inputs + k]);
    const baton_target *t = s->target;
    if (!t->check)
        return 0;
    baton_sig_args sig = rt->sigs[i];
    sig.inputs = dd;
    sig.outputs = dd + s->n_inputs;
    baton_tensor_desc want[PLAN_MAX_STEP_ARGS];
    for (int k = 0; k < s->n_outputs; k++)
        want[k] = dd[s->n_inputs + k];
    char msg[512] = "";
    int rc = t->check(&sig, want, msg, sizeof msg);
    for (int k = 0; !rc && k < s->n_outputs; k++) {
        const baton_tensor_desc *o = &dd[s->n_inputs + k];
        int same = want[k].dtype == o->dtype && want[k].rank == o->rank;
        for (int a = 0; same && a < o->rank; a++)
            same = want[k].shape[a] == o->shape[a];
        if (!same) {
            char have[160], need[160];
            baton__desc_format(have, sizeof have, o);
            baton__desc_format(need, sizeof need, &want[k]);
            snprintf(msg, sizeof msg, "output '%s' is %s with them but the target produces %s",
                     plan->tensors[s->outputs[k]].name, have, need);
            rc = BATON_EPLAN;
        }
    }
    if (!rc)
        return 0;
    char bind[256];
    format_binding(rt, bind, sizeof bind);
    return baton__err_set(
        err, BATON_EINVAL,
        "%s: step '%s' (%s '%s') does not accept the dims %s: %s; bind other values", plan->source,
        s->name, s->kind == BATON_TARGET_KERNEL ? "kernel" : "delegate", s->target_name, bind,
        msg[0] ? msg : "its check failed");
}

/* Graph mode keeps up to RT_GRAPH_WAYS executable graphs per segment that depends on the dims,
 * one per binding: a binding seen before launches its graph as it is (a hit); a new one is
 * captured into a free slot, or into the least recently used one, whose executable graph is then
 * updated in place (cudaGraphExecUpdate) rather than instantiated again. */
static void select_graphs(baton_runtime *rt)
{
    const baton_plan *plan = rt->plan;
    size_t kb = (size_t)plan->n_dims * sizeof *rt->dims;
    for (int s = 0; s < plan->n_segments; s++) {
        if (!rt->seg_dims[s] || rt->graph_state[s] < 0)
            continue;
        int base = s * rt->graph_ways, pick = -1, lru = -1;
        int64_t *keys = rt->slot_key;
        /* the current slot keeps what a bind or a recapture decided for it */
        int cur = rt->graph_slot[s];
        rt->slot_ok[cur] = rt->graph_state[s] == 1;
        for (int j = base; j < base + rt->graph_ways && pick < 0; j++)
            if (rt->slot_ok[j] && memcmp(keys + (size_t)j * plan->n_dims, rt->dims, kb) == 0)
                pick = j;
        if (pick >= 0) {
            rt->graph_slot[s] = pick;
            rt->graph_state[s] = 1;
            rt->graph_hits++;
            continue;
        }
        /* this binding's slot, made stale by a bind since: captured again and updated */
        for (int j = base; j < base + rt->graph_ways && lru < 0; j++)
            if (rt->slot_used[j] && memcmp(keys + (size_t)j * plan->n_dims, rt->dims, kb) == 0)
                lru = j;
        for (int j = base; j < base + rt->graph_ways && lru < 0; j++)
            if (!rt->slot_used[j]) /* never captured: instantiated fresh */
                lru = j;
        if (lru < 0) { /* all taken: the least recently launched */
            lru = base;
            for (int j = base + 1; j < base + rt->graph_ways; j++)
                if (rt->slot_tick[j] < rt->slot_tick[lru])
                    lru = j;
        }
        rt->graph_slot[s] = lru;
        rt->graph_state[s] = 0;
        rt->slot_ok[lru] = 0;
        memcpy(keys + (size_t)lru * plan->n_dims, rt->dims, kb);
    }
}

int baton__runtime_apply_dims(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    if (!plan->n_dims)
        return 0;
    for (int k = 0; k < plan->n_dims; k++)
        rt->dims_by[k] = -1;
    size_t kb = (size_t)plan->n_dims * sizeof *rt->dims;
    if (memcmp(rt->dims, rt->dims_ran, kb) == 0)
        return 0;
    /* every step first, so that a refused binding changes nothing */
    baton_tensor_desc dd[2 * PLAN_MAX_STEP_ARGS];
    for (int i = 0; i < plan->n_steps; i++) {
        const plan_step *s = &plan->steps[i];
        if (!s->has_dims || s->kind == BATON_TARGET_COLLECTIVE)
            continue;
        int rc = check_step(rt, i, dd, err);
        if (rc) {
            memcpy(rt->dims, rt->dims_ran, kb);
            return rc;
        }
    }
    for (int i = 0; i < plan->n_steps; i++) {
        const plan_step *s = &plan->steps[i];
        if (!s->has_dims || s->kind == BATON_TARGET_COLLECTIVE)
            continue;
        baton_sig_args *sig = &rt->sigs[i];
        baton_tensor_desc *mine = rt->descs + (sig->inputs - rt->descs);
        for (int k = 0; k < s->n_inputs; k++)
            bound_desc(plan, rt->dims, s->inputs[k], &mine[k]);
        for (int k = 0; k < s->n_outputs; k++)
            bound_desc(plan, rt->dims, s->outputs[k], &mine[s->n_inputs + k]);
        if (s->target->pack && !s->opaque_verbatim) {
            char *buf = rt->opaques + (size_t)i * BATON_OPAQUE_MAX;
            int n = s->target->pack(sig, buf, BATON_OPAQUE_MAX);
            if (n < 0 || n > BATON_OPAQUE_MAX)
                n = 0; /* check() accepted these shapes: a pack that fails now is the target's */
            rt->calls[i].opaque = n ? buf : baton__plan_no_descriptor;
            rt->calls[i].opaque_len = (size_t)n;
        }
    }
    for (int x = 0; x < plan->n_transfers; x++)
        rt->xfers[x].bytes = baton__runtime_tensor_bytes(rt, plan->transfers[x].tensor, 0);
    baton__runtime_count_graph_bytes(rt);
    memcpy(rt->dims_ran, rt->dims, kb);
    if (rt->opts.mode == BATON_SYNC_GRAPH)
        select_graphs(rt);
    return 0;
}

int baton__runtime_graphs_prepare(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int ns = plan->n_segments, ways = rt->graph_ways;
    rt->graph_slot = calloc((size_t)ns + 1, sizeof *rt->graph_slot);
    rt->seg_dims = calloc((size_t)ns + 1, 1);
    if (!rt->graph_slot || !rt->seg_dims)
        return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
    for (int s = 0; s < ns; s++)
        rt->graph_slot[s] = s * ways;
    if (ways == 1)
        return 0;
    size_t nslots = (size_t)ns * (size_t)ways;
    rt->slot_key = calloc(nslots * (size_t)plan->n_dims + 1, sizeof *rt->slot_key);
    rt->slot_tick = calloc(nslots + 1, sizeof *rt->slot_tick);
    rt->slot_used = calloc(nslots + 1, 1);
    rt->slot_ok = calloc(nslots + 1, 1);
    if (!rt->slot_key || !rt->slot_tick || !rt->slot_used || !rt->slot_ok)
        return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
    for (int s = 0; s < ns; s++) {
        memcpy(rt->slot_key + (size_t)s * ways * plan->n_dims, rt->dims,
               (size_t)plan->n_dims * sizeof *rt->dims);
        for (int i = plan->segments[s].first_step; i <= plan->segments[s].last_step; i++)
            rt->seg_dims[s] |= (unsigned char)plan->steps[i].has_dims;
    }
    /* a segment whose copies move a tensor sized by a dimension depends on the binding too */
    for (int x = 0; x < plan->n_transfers; x++) {
        if (!plan->tensors[plan->transfers[x].tensor].has_dims)
            continue;
        int into = plan->transfers[x].segment;
        if (into < ns)
            rt->seg_dims[into] = 1;
        if (into > 0)
            rt->seg_dims[into - 1] =
                1; /* a copy back to the host is issued by the segment before */
    }
    return 0;
}

void baton__runtime_graph_used(baton_runtime *rt, int s, int captured)
{
    if (rt->graph_ways == 1)
        return;
    int j = rt->graph_slot[s];
    rt->slot_tick[j] = ++rt->graph_clock;
    if (captured) {
        rt->slot_used[j] = 1;
        rt->slot_ok[j] = 1;
    }
}

void baton__runtime_graphs_free(baton_runtime *rt)
{
    free(rt->graph_slot);
    free(rt->seg_dims);
    free(rt->slot_key);
    free(rt->slot_tick);
    free(rt->slot_used);
    free(rt->slot_ok);
}

int baton_runtime_tensor_desc(const baton_runtime *rt, const char *name, baton_tensor_desc *out)
{
    if (!rt || !name || !out)
        return BATON_EINVAL;
    int t = baton__plan_find_tensor(rt->plan, name);
    if (t < 0)
        return BATON_ENOENT;
    const int64_t *dims = rt->plan->tensors[t].role == BATON_ROLE_OUTPUT ? rt->dims_ran : rt->dims;
    bound_desc(rt->plan, dims, t, out);
    return 0;
}

/* ---- state shared between runtimes ----------------------------------------------------------- */

int baton_runtime_share_state(baton_runtime *rt, const baton_runtime *owner, baton_error *err)
{
    err_clear(err);
    if (!rt || !owner || rt == owner)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_share_state: two different runtimes are required");
    const baton_plan *plan = rt->plan, *op = owner->plan;
    if (rt->backend != owner->backend)
        return baton__err_set(
            err, BATON_EINVAL,
            "baton_runtime_share_state: the runtimes run their GPU steps on different "
            "backends; create both with the same baton_options.gpu");
    int qrc = baton__runtime_settle(rt, err);
    if (!qrc)
        qrc = baton__runtime_settle((baton_runtime *)owner, err);
    if (qrc)
        return qrc;
    /* check every pair first, so that a refusal changes nothing */
    int n = 0;
    for (int t = 0; t < plan->n_tensors; t++) {
        const plan_tensor *pt = &plan->tensors[t];
        if (pt->role != BATON_ROLE_STATE)
            continue;
        int u = baton__plan_find_tensor(op, pt->name);
        const plan_tensor *ou = u >= 0 ? &op->tensors[u] : NULL;
        char a[160], b[160], da[32], db[32];
        if (!ou || ou->role != BATON_ROLE_STATE)
            return baton__err_set(
                err, BATON_EINVAL,
                "baton_runtime_share_state: state tensor '%s' of %s is not a state "
                "tensor of %s; both plans must declare it",
                pt->name, plan->source, op->source);
        int same = pt->desc.dtype == ou->desc.dtype && pt->desc.rank == ou->desc.rank;
        for (int k = 0; same && k < pt->desc.rank; k++)
            same = pt->desc.shape[k] == ou->desc.shape[k];
        if (!same) {
            baton__desc_format(a, sizeof a, &pt->desc);
            baton__desc_format(b, sizeof b, &ou->desc);
            return baton__err_set(
                err, BATON_EINVAL,
                "baton_runtime_share_state: state tensor '%s' is %s in %s but %s in %s", pt->name,
                a, plan->source, b, op->source);
        }
        baton_device dv = plan->memory[state_dev(rt, t)].device;
        baton_device dw = op->memory[state_dev(owner, u)].device;
        if (!device_eq(dv, dw))
            return baton__err_set(
                err, BATON_EINVAL,
                "baton_runtime_share_state: state tensor '%s' lives on %s in %s but on "
                "%s in %s; run the steps that use it on one device in both plans",
                pt->name, baton_device_format(dv, da, sizeof da), plan->source,
                baton_device_format(dw, db, sizeof db), op->source);
        n++;
    }
    if (!n)
        return 0;
    if (!rt->state_ptr && !(rt->state_ptr = calloc((size_t)plan->n_tensors, sizeof(void *))))
        return baton__err_set(err, BATON_ENOMEM, "baton_runtime_share_state: out of memory");
    for (int t = 0; t < plan->n_tensors; t++) {
        const plan_tensor *pt = &plan->tensors[t];
        if (pt->role != BATON_ROLE_STATE)
            continue;
        int u = baton__plan_find_tensor(op, pt->name);
        void *ptr = owner->state_ptr && owner->state_ptr[u]
                        ? owner->state_ptr[u]
                        : baton__runtime_slot_addr(owner, state_dev(owner, u), u);
        rt->state_ptr[t] = ptr;
        /* every step buffer that holds it (or a view of it) now holds the owner's slot */
        for (int i = 0; i < plan->n_steps; i++) {
            const plan_step *s = &plan->steps[i];
            int hit = 0;
            for (int k = 0; k < s->n_inputs + s->n_outputs; k++) {
                int v = k < s->n_inputs ? s->inputs[k] : s->outputs[k - s->n_inputs];
                if (plan->tensors[v].storage == t) {
                    rt->calls[i].buffers[k] = ptr;
                    hit = 1;
                }
            }
            int g = s->segment;
            if (hit && rt->graph_state && rt->graph_state[g] == 1)
                rt->graph_state[g] = 0; /* captured again, the graph updated in place */
            for (int j = g * rt->graph_ways; hit && rt->slot_ok && j < (g + 1) * rt->graph_ways;
                 j++)
                rt->slot_ok[j] = 0;
        }
    }
    return 0;
}
