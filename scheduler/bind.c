/* bind.c: a runtime's inputs and outputs: set_input and get_output by name, and caller-owned
 * buffers (baton_runtime_bind), which rewrite the addresses that prepare (prepare.c) recorded in
 * the steps' calls and the transfers, and patch the captured graphs that hold them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/runtime.h"

/* ---- inputs and outputs ------------------------------------------------------------------- */

/* An unknown name given to set_input (want_input) or get_output: the closest name of the right
 * role ("did you mean", as the CLI says) and the names there are. */
static int no_such_tensor(const baton_plan *plan, const char *name, int want_input,
                          baton_error *err)
{
    plan_suggest sg;
    baton__plan_suggest_init(&sg, name);
    char list[320] = "";
    size_t len = 0;
    int listed = 0;
    for (int i = 0; i < plan->n_tensors; i++) {
        const plan_tensor *c = &plan->tensors[i];
        /* what set_input (inputs and state) or get_output (outputs too) accepts */
        if (c->role != BATON_ROLE_INPUT && c->role != BATON_ROLE_STATE &&
            (want_input || c->role != BATON_ROLE_OUTPUT))
            continue;
        baton__plan_suggest_try(&sg, c->name);
        if (len + strlen(c->name) + 8 < sizeof list) {
            len += (size_t)snprintf(list + len, sizeof list - len, "%s'%s'", listed ? ", " : "",
                                    c->name);
            listed++;
        } else if (len > 0 && len + 6 < sizeof list && list[len - 1] != '.') {
            len += (size_t)snprintf(list + len, sizeof list - len, ", ...");
        }
    }
    const char *near = baton__plan_suggest_best(&sg);
    char mean[128] = "";
    if (near)
        snprintf(mean, sizeof mean, " (did you mean '%.64s'?)", near);
    return baton__err_set(
        err, BATON_ENOENT, "%s: %s: plan '%s' has no tensor named '%s'%s; its %s: %s",
        want_input ? "baton_runtime_set_input" : "baton_runtime_get_output", plan->source,
        plan->name, name, mean, want_input ? "inputs and state" : "outputs, inputs and state",
        listed ? list : "none");
}

/* One process per GPU (baton_options.world): whether tensor t moves only between devices other
 * ranks run (every transfer of it absent here) and no CPU step reads it: an input this rank need
 * not be given, or an output it does not make. */
static int rank_elsewhere(const baton_runtime *rt, int t)
{
    const baton_plan *plan = rt->plan;
    if (!rt_ranks(rt))
        return 0;
    int moved = 0;
    for (int x = 0; x < plan->n_transfers; x++)
        if (plan->transfers[x].tensor == t) {
            if (!rt->xfers[x].absent)
                return 0;
            moved = 1;
        }
    for (int i = 0; i < plan->n_steps; i++)
        if (plan->steps[i].device.kind == BATON_DEVICE_CPU)
            for (int k = 0; k < plan->steps[i].n_inputs; k++)
                if (plan->steps[i].inputs[k] == t)
                    return 0;
    return moved;
}

static int host_tensor(baton_runtime *rt, const char *name, size_t nbytes, int want_input,
                       void **addr, baton_error *err)
{
    if (!rt || !name)
        return baton__err_set(err, BATON_EINVAL, "a runtime and a tensor name are required");
    const baton_plan *plan = rt->plan;
    int t = baton_plan_tensor_index(plan, name);
    if (t < 0)
        return no_such_tensor(plan, name, want_input, err);
    const plan_tensor *pt = &plan->tensors[t];
    if (want_input && pt->role != BATON_ROLE_INPUT)
        return baton__err_set(
            err, BATON_EINVAL,
            "%s: tensor '%s' is %s, not an input; only inputs can be set (give it "
            "\"role\": \"input\")",
            plan->source, name, baton_role_name(pt->role));
    if (!want_input && pt->role != BATON_ROLE_OUTPUT && pt->role != BATON_ROLE_INPUT)
        return baton__err_set(
            err, BATON_EINVAL,
            "%s: tensor '%s' is %s; only outputs, inputs and state can be read "
            "after a run, since the memory plan reuses other tensors' space (give it "
            "\"role\": \"output\")",
            plan->source, name, baton_role_name(pt->role));
    if (!want_input && pt->role == BATON_ROLE_OUTPUT && rank_elsewhere(rt, t)) {
        int from = -1; /* the GPU whose copy goes home: its rank makes the output */
        for (int x = 0; x < plan->n_transfers; x++)
            if (plan->transfers[x].tensor == t && plan->transfers[x].to.kind == BATON_DEVICE_CPU)
                from = plan->transfers[x].from.index;
        return baton__err_set(err, BATON_ESTATE,
                              "%s: output '%s' is made on cuda:%d, not on this rank's GPU "
                              "(cuda:%d); read it on rank %d",
                              plan->source, name, from, rt->opts.rank, from);
    }
    /* a tensor sized by a dimension holds the bytes of the binding: the next run's for an
     * input, the last run's for an output */
    size_t want = baton__runtime_tensor_bytes(rt, t, pt->role == BATON_ROLE_OUTPUT);
    if (nbytes != want)
        return baton__err_set(err, BATON_EINVAL,
                              "%s: tensor '%s' (%s, %lld elements%s) has %zu bytes, not %zu",
                              plan->source, name, baton_dtype_name(pt->desc.dtype),
                              (long long)(want / baton_dtype_size(pt->desc.dtype)),
                              pt->has_dims ? " with the dims bound now" : "", want, nbytes);
    *addr = rt->bind_dev[t] == 0 ? rt->bind_data[t] : baton__runtime_slot_addr(rt, 0, t);
    if (!*addr && rt->bind_dev[t] < 0)
        return baton__err_set(err, BATON_ESTATE, "%s: tensor '%s' has no host copy", plan->source,
                              name);
    return 0;
}

/* A tensor bound on a GPU is read and written there, synchronously (set_input / get_output). */
static int bound_copy(baton_runtime *rt, const char *name, void *dst, const void *src, size_t n,
                      int to_device, baton_error *err)
{
    int t = baton_plan_tensor_index(rt->plan, name);
    rt_device *rd = &rt->dev[rt->bind_dev[t]];
    int rc = rd->ops->copy_sync(rd->ctx, dst, src, n, to_device ? DEV_COPY_H2D : DEV_COPY_D2H, err);
    if (rc) {
        char inner[BATON_ERROR_MAX];
        snprintf(inner, sizeof inner, "%s", err ? err->message : "");
        return baton__err_set(err, rc, "%s: tensor '%s' (bound on the GPU): %s", rt->plan->source,
                              name, inner);
    }
    return 0;
}

/* Whether input t has a value for the next run: set into the runtime's memory, or bound. */
static int input_given(const baton_runtime *rt, int t)
{
    return rt->input_set[t] || rt->bind_dev[t] >= 0;
}

/* Records that input t was set (set 1) or bound/unbound (set 0: the binding changed), keeping
 * rt->n_unset_inputs, which a run checks, in step. `was` is input_given before the change. */
static void input_changed(baton_runtime *rt, int t, int was, int set)
{
    if (rt->plan->tensors[t].role != BATON_ROLE_INPUT)
        return;
    if (set)
        rt->input_set[t] = 1;
    rt->n_unset_inputs += was - input_given(rt, t);
}

int baton__runtime_unset_inputs(const baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    char names[320] = "";
    size_t len = 0;
    int n = 0;
    for (int t = 0; t < plan->n_tensors; t++) {
        if (plan->tensors[t].role != BATON_ROLE_INPUT || input_given(rt, t))
            continue;
        if (n++ < 4 && len < sizeof names) {
            int k = snprintf(names + len, sizeof names - len, "%s'%.60s'", n > 1 ? ", " : "",
                             plan->tensors[t].name);
            len += k > 0 ? (size_t)k : 0;
        }
    }
    if (n > 4 && len < sizeof names)
        snprintf(names + len, sizeof names - len, " and %d more", n - 4);
    return baton__err_set(
        err, BATON_ESTATE,
        "baton_runtime_run: %s: input%s %s %s never set; give %s a value with "
        "baton_runtime_set_input (or bind a buffer with baton_runtime_bind) before the "
        "run, or set options.allow_unset_inputs to run on whatever the memory holds",
        plan->source, n > 1 ? "s" : "", names, n > 1 ? "were" : "was", n > 1 ? "each" : "it");
}

int baton_runtime_set_input(baton_runtime *rt, const char *name, const void *data, size_t nbytes,
                            baton_error *err)
{
    err_clear(err);
    int qrc = baton__runtime_settle(rt, err); /* a queued run may still read the old value */
    if (qrc)
        return qrc;
    void *dst;
    int st = rt && name ? baton_plan_tensor_index(rt->plan, name) : -1;
    if (st >= 0 && rt->plan->tensors[st].role == BATON_ROLE_STATE)
        return baton__runtime_state_access(rt, st, (void *)data, nbytes, 1, err);
    if (st >= 0 && rt->plan->tensors[st].role == BATON_ROLE_INPUT) {
        int brc = baton__runtime_bind_from_input(rt, st, nbytes, err);
        if (brc)
            return brc;
    }
    int rc = host_tensor(rt, name, nbytes, 1, &dst, err);
    if (rc)
        return rc;
    if (!data && nbytes)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_set_input: tensor '%s': data is NULL; pass a buffer "
                              "of %zu bytes",
                              name, nbytes);
    int t = baton_plan_tensor_index(rt->plan, name);
    if (rt->bind_dev[t] > 0)
        return bound_copy(rt, name, rt->bind_data[t], data, nbytes, 1, err);
    if (nbytes)
        memcpy(dst, data, nbytes);
    if (rt->bind_dev[t] < 0) /* the runtime's own memory holds it now (else the caller's) */
        input_changed(rt, t, input_given(rt, t), 1);
    return 0;
}

int baton_runtime_get_output(baton_runtime *rt, const char *name, void *data, size_t nbytes,
                             baton_error *err)
{
    err_clear(err);
    int qrc = baton__runtime_settle(rt, err); /* the queued runs' outputs land first */
    if (qrc)
        return qrc;
    void *src;
    int st = rt && name ? baton_plan_tensor_index(rt->plan, name) : -1;
    if (st >= 0 && rt->plan->tensors[st].role == BATON_ROLE_STATE)
        return baton__runtime_state_access(rt, st, data, nbytes, 0, err);
    int rc = host_tensor(rt, name, nbytes, 0, &src, err);
    if (rc)
        return rc;
    if (!data && nbytes)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_get_output: tensor '%s': data is NULL; pass a buffer "
                              "of %zu bytes",
                              name, nbytes);
    /* An output holds a result only after a run that succeeded (inputs hold what was set). */
    const plan_tensor *pt = &rt->plan->tensors[baton_plan_tensor_index(rt->plan, name)];
    if (pt->role == BATON_ROLE_OUTPUT && rt->last_run <= 0)
        return baton__err_set(
            err, BATON_ESTATE,
            rt->last_run == 0 ? "baton_runtime_get_output: output '%s': no run has completed "
                                "yet; call baton_runtime_run first"
                              : "baton_runtime_get_output: output '%s': the last run failed, so "
                                "it holds no complete result; run again",
            name);
    int t = baton_plan_tensor_index(rt->plan, name);
    if (rt->bind_dev[t] > 0)
        return bound_copy(rt, name, data, rt->bind_data[t], nbytes, 0, err);
    if (nbytes)
        memcpy(data, src, nbytes);
    return 0;
}

/* ---- caller-owned buffers ----------------------------------------------------------------- */

/* What each GPU segment's graph copies per launch: its incoming and outgoing transfers, less
 * those that a bound buffer makes needless. Counted into baton_run_stats on each launch. */
void baton__runtime_count_graph_bytes(baton_runtime *rt)
{
    const baton_plan *plan = rt->plan;
    memset(rt->seg_bytes, 0, (2 * (size_t)plan->n_segments + 2) * sizeof *rt->seg_bytes);
    for (int x = 0; x < plan->n_transfers; x++) {
        const plan_transfer *pt = &plan->transfers[x];
        const rt_transfer *r = &rt->xfers[x];
        if (r->skip)
            continue;
        if (pt->segment < plan->n_segments && r->kind == DEV_COPY_H2D)
            rt->seg_bytes[2 * pt->segment] += (int64_t)r->bytes;
        if (r->kind == DEV_COPY_D2H) {
            int src = pt->segment - 1; /* issued at the end of the segment before, if on d */
            if (pt->segment == plan->n_segments)
                src = plan->n_segments - 1;
            if (src >= 0 && baton__plan_memory_index(plan, plan->segments[src].device) == r->from &&
                (pt->segment == plan->n_segments ||
                 plan->segments[pt->segment].device.kind == BATON_DEVICE_CPU))
                rt->seg_bytes[2 * src + 1] += (int64_t)r->bytes;
        }
    }
}

/* The device of step i's buffer k (inputs then outputs): a collective's member device. */
static int site_dev(const baton_runtime *rt, int i, int k)
{
    const plan_step *st = &rt->plan->steps[i];
    return baton__plan_memory_index(rt->plan,
                                    step_arg_device(st, k < st->n_inputs ? k : k - st->n_inputs));
}

/* Every place that holds the address of an input or output tensor, so that binding a caller's
 * buffer rewrites them without a search (baton_runtime_bind). */

int baton__runtime_build_sites(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int nt = plan->n_tensors, n = 0;
    rt->bind_dev = malloc(((size_t)nt + 1) * sizeof *rt->bind_dev);
    rt->bind_data = calloc((size_t)nt + 1, sizeof *rt->bind_data);
    rt->site_first = calloc((size_t)nt + 2, sizeof *rt->site_first);
    rt->input_set = calloc((size_t)nt + 1, 1);
    if (!rt->bind_dev || !rt->bind_data || !rt->site_first || !rt->input_set)
        return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
    for (int t = 0; t < nt; t++) {
        rt->bind_dev[t] = -1;
        if (plan->tensors[t].role == BATON_ROLE_INPUT && rank_elsewhere(rt, t))
            rt->input_set[t] = 1; /* only other ranks read it: never missing here */
        else
            rt->n_unset_inputs += plan->tensors[t].role == BATON_ROLE_INPUT;
    }
#define BINDABLE(t)                                                                                \
    (plan->tensors[t].role == BATON_ROLE_INPUT || plan->tensors[t].role == BATON_ROLE_OUTPUT)
    /* count, then fill in tensor order */
    for (int pass = 0; pass < 2; pass++) {
        int *fill = pass ? calloc((size_t)nt + 1, sizeof *fill) : NULL;
        if (pass && !fill)
            return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
        for (int i = 0, pos = 0; i < plan->n_steps; i++) {
            const plan_step *st = &plan->steps[i];
            for (int k = 0; k < st->n_inputs + st->n_outputs; k++, pos++) {
                int t = k < st->n_inputs ? st->inputs[k] : st->outputs[k - st->n_inputs];
                t = plan->tensors[t].storage; /* a view's buffer is its base's bytes */
                if (!BINDABLE(t))
                    continue;
                if (!pass) {
                    rt->site_first[t + 1]++;
                    continue;
                }
                rt->sites[rt->site_first[t] + fill[t]++] =
                    (rt_site){t, site_dev(rt, i, k), pos, i, -1, 0};
            }
        }
        for (int x = 0; x < plan->n_transfers; x++) {
            int t = plan->transfers[x].tensor;
            if (!BINDABLE(t))
                continue;
            if (!pass) {
                rt->site_first[t + 1] += 2;
                continue;
            }
            rt->sites[rt->site_first[t] + fill[t]++] =
                (rt_site){t, rt->xfers[x].from, -1, -1, x, 1};
            rt->sites[rt->site_first[t] + fill[t]++] =
                (rt_site){t, baton__plan_memory_index(plan, plan->transfers[x].to), -1, -1, x, 0};
        }
        if (!pass) {
            for (int t = 0; t < nt; t++)
                rt->site_first[t + 1] += rt->site_first[t];
            n = rt->site_first[nt];
            rt->sites = calloc((size_t)n + 1, sizeof *rt->sites);
            if (!rt->sites)
                return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
        }
        free(fill);
    }
#undef BINDABLE
    return 0;
}

/* The segment's graphs kept for other bindings of the dims hold the old addresses or copies:
 * each is captured again (and updated in place) when its binding comes back. */
static void forget_other_bindings(baton_runtime *rt, int seg)
{
    for (int j = seg * rt->graph_ways; rt->slot_ok && j < (seg + 1) * rt->graph_ways; j++)
        if (j != rt->graph_slot[seg])
            rt->slot_ok[j] = 0;
}

/* Points a captured graph's op at its new addresses, or, when the device cannot patch it, marks
 * the segment for capture on the next run (which updates the executable graph in place). */
static void rebind_graph(baton_runtime *rt, int seg, int tag, const dev_call *c,
                         const rt_transfer *r)
{
    if (seg < 0 || rt->graph_state[seg] != 1)
        return; /* not captured (yet): the capture takes the addresses as they are then */
    const baton_plan *plan = rt->plan;
    rt_device *rd = &rt->dev[baton__plan_memory_index(plan, plan->segments[seg].device)];
    baton_error perr = {0};
    int rc = BATON_ENOTSUP;
    int slot = rt->graph_slot[seg];
    forget_other_bindings(rt, seg);
    if (rd->ops->graph_rebind)
        rc = c ? rd->ops->graph_rebind(rd->ctx, slot, tag, c, NULL, NULL, 0, DEV_COPY_H2D, &perr)
               : rd->ops->graph_rebind(rd->ctx, slot, tag, NULL, r->dst, r->src, r->bytes, r->kind,
                                       &perr);
    if (rc) {
        rt->graph_state[seg] = 0;
        if (!rt->note[0])
            snprintf(rt->note, sizeof rt->note,
                     "segment %d is captured again when the buffers of %s '%s' move: %.300s", seg,
                     c ? "step" : "transfer", c ? plan->steps[tag].name : r->what, perr.message);
    }
}

/* Writes addr into every site of tensor t on device index d, and patches the graphs that hold
 * the old address. */
static void set_sites(baton_runtime *rt, int t, int d, void *addr)
{
    for (int k = rt->site_first[t]; k < rt->site_first[t + 1]; k++) {
        const rt_site *st = &rt->sites[k];
        if (st->dev != d)
            continue;
        if (st->buf >= 0) {
            if (rt->bufs[st->buf] == addr)
                continue;
            rt->bufs[st->buf] = addr;
            rebind_graph(rt, rt->plan->steps[st->step].segment, st->step, &rt->calls[st->step],
                         NULL);
            continue;
        }
        rt_transfer *r = &rt->xfers[st->xfer];
        if (st->src ? r->src == addr : r->dst == addr)
            continue;
        if (st->src)
            r->src = addr;
        else
            r->dst = addr;
        if (!r->skip)
            rebind_graph(rt, r->graph_seg, rt->plan->n_steps + st->xfer, NULL, r);
    }
}

/* Whether a step on another device than d reads tensor t (then an input bound on d would leave
 * them without it). */
static int read_elsewhere(const baton_runtime *rt, int t, int d)
{
    for (int k = rt->site_first[t]; k < rt->site_first[t + 1]; k++) {
        const rt_site *st = &rt->sites[k];
        if (st->buf >= 0 && st->dev != d)
            return 1;
    }
    return 0;
}

/* The transfers that a buffer of tensor t bound on GPU d makes needless: an input's copy from
 * the host to d, an output's copy from d back to the host when no CPU step reads it. A change
 * of what a graph copies changes its shape: that segment is captured again. */
static void set_skips(baton_runtime *rt, int t, int d, int on)
{
    const baton_plan *plan = rt->plan;
    int changed = 0;
    int input = plan->tensors[t].role == BATON_ROLE_INPUT;
    for (int k = rt->site_first[t]; k < rt->site_first[t + 1]; k++) {
        const rt_site *st = &rt->sites[k];
        if (st->xfer < 0 || st->src)
            continue; /* each transfer once, by its destination */
        rt_transfer *r = &rt->xfers[st->xfer];
        int needless = d > 0 && (input ? st->dev == d && r->from == 0
                                       : r->from == d && st->dev == 0 && !read_elsewhere(rt, t, d));
        int want = on && needless;
        if (r->skip == want)
            continue;
        r->skip = want;
        changed = 1;
        int seg = plan->transfers[st->xfer].segment;
        for (int g = seg - 1; g <= seg; g++) /* captured into the segment before or its own */
            if (g >= 0 && g < plan->n_segments && rt->graph_state[g] == 1) {
                rt->graph_state[g] = 0;
                forget_other_bindings(rt, g);
            }
        if (r->graph_seg >= 0 && rt->graph_state[r->graph_seg] == 1) {
            rt->graph_state[r->graph_seg] = 0;
            forget_other_bindings(rt, r->graph_seg);
        }
    }
    if (changed)
        baton__runtime_count_graph_bytes(rt);
}

static int bind_refuse(baton_error *err, const baton_plan *plan, const char *tname, const char *fmt,
                       ...) CORE_PRINTF(4, 5);
static int bind_refuse(baton_error *err, const baton_plan *plan, const char *tname, const char *fmt,
                       ...)
{
    char why[BATON_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return baton__err_set(err, BATON_EINVAL, "baton_runtime_bind: %s: tensor '%s': %s",
                          plan->source, tname, why);
}

int baton_runtime_bind(baton_runtime *rt, int tensor, const baton_buffer *buf, baton_error *err)
{
    err_clear(err);
    if (!rt)
        return baton__err_set(err, BATON_EINVAL, "baton_runtime_bind: no runtime");
    const baton_plan *plan = rt->plan;
    if (tensor < 0 || tensor >= plan->n_tensors)
        return baton__err_set(
            err, BATON_EINVAL,
            "baton_runtime_bind: %s: tensor index %d out of range (the plan has %d; "
            "baton_plan_tensor_index finds one by name)",
            plan->source, tensor, plan->n_tensors);
    const plan_tensor *pt = &plan->tensors[tensor];
    if (pt->role != BATON_ROLE_INPUT && pt->role != BATON_ROLE_OUTPUT)
        return bind_refuse(err, plan, pt->name,
                           "is %s; only inputs and outputs can be bound (the memory plan reuses "
                           "the space of the others)",
                           baton_role_name(pt->role));
    int old = rt->bind_dev[tensor];
    /* A new address on the same device patches the graph for the runs to come (the queued ones
     * keep the old); anything else may change the graph that queued runs replay. */
    if (!buf || old != baton__plan_memory_index(plan, buf->device)) {
        int qrc = baton__runtime_settle(rt, err);
        if (qrc)
            return qrc;
    }
    if (!buf) { /* back to the runtime's own memory */
        if (old >= 0) {
            set_sites(rt, tensor, old, baton__runtime_slot_addr(rt, old, tensor));
            set_skips(rt, tensor, old, 0);
        }
        int was = input_given(rt, tensor);
        rt->bind_dev[tensor] = -1;
        rt->bind_data[tensor] = NULL;
        input_changed(rt, tensor, was, 0);
        return 0;
    }
    char dname[32], have[160] = "";
    baton_device_format(buf->device, dname, sizeof dname);
    for (int d = 0, n = 0; d < rt->nd; d++)
        if (plan->memory[d].offset[tensor] >= 0) {
            char one[32];
            size_t len = strlen(have);
            snprintf(have + len, sizeof have - len, "%s%s", n++ ? ", " : "",
                     baton_device_format(plan->memory[d].device, one, sizeof one));
        }
    int d = baton__plan_memory_index(plan, buf->device);
    if (d < 0 || plan->memory[d].offset[tensor] < 0)
        return bind_refuse(err, plan, pt->name, "does not live on %s; bind it on %s", dname, have);
    if (buf->nbytes != pt->nbytes || buf->dtype != pt->desc.dtype) {
        char want[96];
        baton__desc_format(want, sizeof want, &pt->desc);
        return bind_refuse(err, plan, pt->name,
                           "the buffer is %zu bytes of %s; the tensor is %s, %zu bytes",
                           buf->nbytes, baton_dtype_name(buf->dtype), want, pt->nbytes);
    }
    if (!buf->data || ((uintptr_t)buf->data & (BATON_ARENA_ALIGN - 1)))
        return bind_refuse(err, plan, pt->name,
                           "data %p is %s; pass memory aligned to BATON_ARENA_ALIGN (%d bytes), "
                           "as cudaMalloc and aligned_alloc(256, ...) give",
                           buf->data, buf->data ? "misaligned" : "NULL", BATON_ARENA_ALIGN);
    const rt_device *rd = &rt->dev[d];
    if (d > 0 && !dev_has(rd->ops, DEV_CAP_DEVICE_MEMORY))
        return bind_refuse(err, plan, pt->name,
                           "%s runs on the CPU here (the fallback: no GPU), so there is no device "
                           "memory to bind; bind a host buffer (device cpu) instead",
                           dname);
    if (d > 0 && pt->role == BATON_ROLE_INPUT && read_elsewhere(rt, tensor, d))
        return bind_refuse(err, plan, pt->name,
                           "is read on more devices than %s (it lives on %s); bind it on the host "
                           "(device cpu), which feeds them all",
                           dname, have);
    /* A caller's buffer shared with another bound tensor, or lying in an arena, would be
     * overwritten by that tensor's or the plan's other writes. */
    const uintptr_t b0 = (uintptr_t)buf->data, b1 = b0 + buf->nbytes;
    for (int t = 0; t < plan->n_tensors; t++) {
        const uintptr_t o0 = (uintptr_t)rt->bind_data[t], o1 = o0 + plan->tensors[t].nbytes;
        if (t != tensor && rt->bind_dev[t] >= 0 && b0 < o1 && o0 < b1)
            return bind_refuse(err, plan, pt->name,
                               "the buffer %p (%zu bytes) overlaps the one bound to '%s' (%p, "
                               "%zu bytes); give each tensor its own memory",
                               buf->data, buf->nbytes, plan->tensors[t].name, rt->bind_data[t],
                               plan->tensors[t].nbytes);
    }
    for (int k = 0; k < rt->nd; k++) {
        const plan_memory *m = &plan->memory[k];
        const struct {
            const char *base;
            size_t n;
        } part[2] = {{rt->dev[k].consts, m->const_bytes},
                     {rt->dev[k].priv, m->arena_bytes - m->const_bytes}};
        for (int p = 0; p < 2; p++) {
            const uintptr_t a0 = (uintptr_t)part[p].base, a1 = a0 + part[p].n;
            if (part[p].base && part[p].n && b0 < a1 && a0 < b1) {
                char aname[32];
                return bind_refuse(err, plan, pt->name,
                                   "the buffer %p (%zu bytes) lies in the runtime's arena of %s; "
                                   "give it memory of its own",
                                   buf->data, buf->nbytes,
                                   baton_device_format(m->device, aname, sizeof aname));
            }
        }
    }
    baton_error merr = {0};
    if (dev_mem_check(rd->arena_ops, rd->arena_ctx, buf->data, buf->nbytes, d == 0, &merr))
        return bind_refuse(err, plan, pt->name, "%s", merr.message);
    if (old >= 0 && old != d) {
        set_sites(rt, tensor, old, baton__runtime_slot_addr(rt, old, tensor));
        set_skips(rt, tensor, old, 0);
    }
    set_sites(rt, tensor, d, buf->data);
    set_skips(rt, tensor, d, 1);
    int was = input_given(rt, tensor);
    rt->bind_dev[tensor] = d;
    rt->bind_data[tensor] = buf->data;
    input_changed(rt, tensor, was, 0);
    return 0;
}
