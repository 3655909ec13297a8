/* describe.c: `baton inspect`: the analysis of a plan (steps, segments, boundaries, transfers,
 * memory plan, sync points per mode) as readable text or as JSON. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan_internal.h"

static const char *kind_name(baton_target_kind k)
{
    return k == BATON_TARGET_KERNEL       ? "kernel"
           : k == BATON_TARGET_DELEGATE   ? "delegate"
           : k == BATON_TARGET_COLLECTIVE ? "collective"
                                          : "none";
}

static void shape_str(const baton_tensor_desc *d, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < d->rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? "," : "", (long long)d->shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

/* The shape as the plan writes it: a dimension by its name, "[seq,4]". */
static void dims_str(const baton_plan *plan, const plan_tensor *pt, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < pt->desc.rank && n < len; i++)
        n += pt->dim[i] >= 0 ? (size_t)snprintf(buf + n, len - n, "%s%s", i ? "," : "",
                                                plan->dims[pt->dim[i]].name)
                             : (size_t)snprintf(buf + n, len - n, "%s%lld", i ? "," : "",
                                                (long long)pt->desc.shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

static json_t *dev_json(baton_device d)
{
    char b[32];
    return json_string(baton_device_format(d, b, sizeof b));
}

static json_t *describe_json(const baton_plan *plan)
{
    json_t *root = json_object();
    /* A reader checks these two first: docs/inspect.schema.json describes version 1. */
    json_object_set_new(root, "format", json_string("baton.inspect"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "name", json_string(plan->name ? plan->name : ""));
    json_object_set_new(root, "source", json_string(plan->source ? plan->source : ""));
    json_t *dims = json_array();
    for (int k = 0; k < plan->n_dims; k++) {
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(plan->dims[k].name));
        json_object_set_new(o, "min", json_integer((json_int_t)plan->dims[k].min));
        json_object_set_new(o, "max", json_integer((json_int_t)plan->dims[k].max));
        json_array_append_new(dims, o);
    }
    json_object_set_new(root, "dims", dims);

    json_t *tensors = json_array();
    for (int t = 0; t < plan->n_tensors; t++) {
        const plan_tensor *pt = &plan->tensors[t];
        json_t *o = json_object(), *shape = json_array();
        for (int i = 0; i < pt->desc.rank; i++)
            json_array_append_new(shape, json_integer(pt->desc.shape[i]));
        json_object_set_new(o, "name", json_string(pt->name));
        json_object_set_new(o, "dtype", json_string(baton_dtype_name(pt->desc.dtype)));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "role", json_string(baton_role_name(pt->role)));
        json_object_set_new(o, "bytes", json_integer((json_int_t)pt->nbytes));
        json_object_set_new(o, "producer",
                            pt->producer >= 0 ? json_string(plan->steps[pt->producer].name)
                                              : json_null());
        if (pt->has_dims) { /* per axis: the dimension that sizes it (shape holds its max) */
            json_t *dims = json_array();
            for (int i = 0; i < pt->desc.rank; i++)
                json_array_append_new(
                    dims, pt->dim[i] >= 0 ? json_string(plan->dims[pt->dim[i]].name) : json_null());
            json_object_set_new(o, "dims", dims);
        }
        if (pt->view_of >= 0)
            json_object_set_new(o, "view_of", json_string(plan->tensors[pt->view_of].name));
        if (pt->init.kind == INIT_SAFETENSORS) {
            json_t *src = json_object();
            json_object_set_new(src, "path", json_string(pt->init.path));
            json_object_set_new(src, "key", json_string(pt->init.key));
            json_object_set_new(src, "in_place", json_boolean(pt->init.in_place));
            json_object_set_new(o, "safetensors", src);
        }
        if (pt->role == BATON_ROLE_STATE)
            json_object_set_new(o, "state_device",
                                pt->state_device.kind == BATON_DEVICE_NONE
                                    ? json_string("cpu")
                                    : dev_json(pt->state_device));
        json_array_append_new(tensors, o);
    }
    json_object_set_new(root, "tensors", tensors);

    json_t *steps = json_array();
    for (int i = 0; i < plan->n_steps; i++) {
        const plan_step *s = &plan->steps[i];
        json_t *o = json_object(), *in = json_array(), *out = json_array();
        for (int k = 0; k < s->n_inputs; k++)
            json_array_append_new(in, json_string(plan->tensors[s->inputs[k]].name));
        for (int k = 0; k < s->n_outputs; k++)
            json_array_append_new(out, json_string(plan->tensors[s->outputs[k]].name));
        json_object_set_new(o, "name", json_string(s->name));
        json_object_set_new(o, "kind", json_string(kind_name(s->kind)));
        json_object_set_new(o, "target", json_string(s->target_name));
        json_object_set_new(o, "device", dev_json(s->device));
        if (s->n_group) {
            json_t *group = json_array();
            for (int g = 0; g < s->n_group; g++)
                json_array_append_new(group, dev_json(s->group[g]));
            json_object_set_new(o, "devices", group);
        }
        json_object_set_new(o, "segment", json_integer(s->segment));
        json_object_set_new(o, "inputs", in);
        json_object_set_new(o, "outputs", out);
        json_object_set_new(o, "next_device", dev_json(s->next_device));
        json_object_set_new(o, "next_kind", json_string(kind_name(s->next_kind)));
        json_object_set_new(o, "opaque_bytes", json_integer((json_int_t)s->opaque_len));
        json_array_append_new(steps, o);
    }
    json_object_set_new(root, "steps", steps);

    json_t *segs = json_array();
    for (int i = 0; i < plan->n_segments; i++) {
        const plan_segment *g = &plan->segments[i];
        json_t *o = json_object();
        json_object_set_new(o, "device", dev_json(g->device));
        json_object_set_new(o, "first_step", json_string(plan->steps[g->first_step].name));
        json_object_set_new(o, "last_step", json_string(plan->steps[g->last_step].name));
        json_object_set_new(o, "steps", json_integer(g->last_step - g->first_step + 1));
        json_object_set_new(o, "collective", json_boolean(g->collective));
        json_array_append_new(segs, o);
    }
    json_object_set_new(root, "segments", segs);

    json_t *bounds = json_array();
    for (int i = 0; i < plan->n_boundaries; i++) {
        const plan_boundary *b = &plan->boundaries[i];
        json_t *o = json_object();
        json_object_set_new(o, "after_step", json_string(plan->steps[b->after_step].name));
        json_object_set_new(o, "from", dev_json(b->from));
        json_object_set_new(o, "to", dev_json(b->to));
        json_object_set_new(o, "transfers", json_integer(b->n_transfers));
        json_object_set_new(o, "host_wait", json_boolean(b->host_wait));
        json_array_append_new(bounds, o);
    }
    json_object_set_new(root, "boundaries", bounds);

    json_t *xfers = json_array();
    for (int i = 0; i < plan->n_transfers; i++) {
        const plan_transfer *x = &plan->transfers[i];
        json_t *o = json_object();
        json_object_set_new(o, "tensor", json_string(plan->tensors[x->tensor].name));
        json_object_set_new(o, "from", dev_json(x->from));
        json_object_set_new(o, "to", dev_json(x->to));
        json_object_set_new(o, "bytes", json_integer((json_int_t)plan->tensors[x->tensor].nbytes));
        if (x->segment < plan->n_segments)
            json_object_set_new(
                o, "before_step",
                json_string(plan->steps[plan->segments[x->segment].first_step].name));
        else
            json_object_set_new(o, "before_step", json_string("(end of run)"));
        json_array_append_new(xfers, o);
    }
    json_object_set_new(root, "transfers", xfers);

    json_t *mem = json_array();
    for (int d = 0; d < plan->n_devices; d++) {
        const plan_memory *m = &plan->memory[d];
        json_t *o = json_object(), *slots = json_array();
        json_object_set_new(o, "device", dev_json(m->device));
        json_object_set_new(o, "arena_bytes", json_integer((json_int_t)m->arena_bytes));
        json_object_set_new(o, "without_reuse_bytes", json_integer((json_int_t)m->naive_bytes));
        for (int t = 0; t < plan->n_tensors; t++) {
            if (m->offset[t] < 0)
                continue;
            json_t *s = json_object();
            json_object_set_new(s, "tensor", json_string(plan->tensors[t].name));
            json_object_set_new(s, "offset", json_integer(m->offset[t]));
            json_object_set_new(s, "bytes", json_integer((json_int_t)plan->tensors[t].nbytes));
            json_object_set_new(s, "live_from", json_integer(m->live_begin[t]));
            json_object_set_new(s, "live_to", json_integer(m->live_end[t]));
            json_array_append_new(slots, s);
        }
        json_object_set_new(o, "slots", slots);
        json_array_append_new(mem, o);
    }
    json_object_set_new(root, "memory", mem);

    json_t *sync = json_object();
    for (int mode = 0; mode < 3; mode++) {
        json_t *arr = json_array();
        for (int i = 0; i < plan->n_sync[mode]; i++) {
            const plan_sync_point *p = &plan->sync[mode][i];
            json_t *o = json_object();
            json_object_set_new(o, "after_step", json_string(plan->steps[p->after_step].name));
            json_object_set_new(o, "device", dev_json(p->device));
            json_object_set_new(o, "why", json_string(p->why));
            json_array_append_new(arr, o);
        }
        json_object_set_new(sync, baton_sync_mode_name((baton_sync_mode)mode), arr);
    }
    json_object_set_new(root, "host_waits", sync);
    return root;
}

static void describe_text(const baton_plan *plan, FILE *f)
{
    char b1[32], b2[32], shape[128];
    fprintf(f, "plan '%s' (%s): %d tensors, %d steps, %d segments, %d boundaries, %d transfers\n",
            plan->name ? plan->name : "", plan->source ? plan->source : "", plan->n_tensors,
            plan->n_steps, plan->n_segments, plan->n_boundaries, plan->n_transfers);

    if (plan->n_dims) {
        fprintf(f, "\ndims (bound at run time; memory planned for the max)\n");
        for (int k = 0; k < plan->n_dims; k++)
            fprintf(f, "  %-16s %lld..%lld\n", plan->dims[k].name, (long long)plan->dims[k].min,
                    (long long)plan->dims[k].max);
    }
    int n_state = 0, n_views = 0, n_dimmed = 0;
    for (int t = 0; t < plan->n_tensors; t++) {
        n_state += plan->tensors[t].role == BATON_ROLE_STATE;
        n_views += plan->tensors[t].view_of >= 0;
        n_dimmed += plan->tensors[t].has_dims && plan->tensors[t].view_of < 0;
    }
    if (n_dimmed) {
        fprintf(f, "\ntensors sized by dims\n");
        for (int t = 0; t < plan->n_tensors; t++) {
            const plan_tensor *pt = &plan->tensors[t];
            if (!pt->has_dims || pt->view_of >= 0)
                continue;
            char sh[256];
            dims_str(plan, pt, sh, sizeof sh);
            fprintf(f, "  %-16s %-4s %s (at most %zu B)\n", pt->name,
                    baton_dtype_name(pt->desc.dtype), sh, pt->nbytes);
        }
    }
    if (n_state) {
        fprintf(f, "\nstate (kept across runs; live the whole run)\n");
        for (int t = 0; t < plan->n_tensors; t++) {
            const plan_tensor *pt = &plan->tensors[t];
            if (pt->role != BATON_ROLE_STATE)
                continue;
            shape_str(&pt->desc, shape, sizeof shape);
            baton_device d = pt->state_device.kind == BATON_DEVICE_NONE
                                 ? (baton_device){BATON_DEVICE_CPU, 0}
                                 : pt->state_device;
            fprintf(f, "  %-16s %-4s %-14s on %s, written by %s\n", pt->name,
                    baton_dtype_name(pt->desc.dtype), shape, baton_device_format(d, b1, sizeof b1),
                    pt->producer >= 0 ? plan->steps[pt->producer].name : "no step");
        }
    }
    if (n_views) {
        fprintf(f, "\nviews (the base's bytes, no copy)\n");
        for (int t = 0; t < plan->n_tensors; t++) {
            const plan_tensor *pt = &plan->tensors[t];
            if (pt->view_of < 0)
                continue;
            dims_str(plan, pt, shape, sizeof shape);
            fprintf(f, "  %-16s %-14s view of %s\n", pt->name, shape,
                    plan->tensors[pt->view_of].name);
        }
    }

    fprintf(f, "\nsteps\n");
    fprintf(f, "  %-4s %-20s %-9s %-16s %-8s %-4s %s\n", "#", "name", "kind", "target", "device",
            "seg", "next");
    for (int i = 0; i < plan->n_steps; i++) {
        const plan_step *s = &plan->steps[i];
        char dev[96];
        baton_device_format(s->device, dev, sizeof dev);
        for (int g = 1; g < s->n_group; g++) { /* a collective: its group, "cuda:0+cuda:1" */
            size_t len = strlen(dev);
            snprintf(dev + len, sizeof dev - len, "+%s",
                     baton_device_format(s->group[g], b1, sizeof b1));
        }
        fprintf(f, "  %-4d %-20s %-9s %-16s %-8s %-4d %s %s\n", i, s->name, kind_name(s->kind),
                s->target_name, dev, s->segment, baton_device_format(s->next_device, b2, sizeof b2),
                kind_name(s->next_kind));
    }

    fprintf(f, "\nsegments\n");
    for (int i = 0; i < plan->n_segments; i++) {
        const plan_segment *g = &plan->segments[i];
        fprintf(f, "  %-3d %-8s steps %d..%d (%s .. %s)%s\n", i,
                baton_device_format(g->device, b1, sizeof b1), g->first_step, g->last_step,
                plan->steps[g->first_step].name, plan->steps[g->last_step].name,
                g->collective ? ", a collective over its group" : "");
    }

    fprintf(f, "\nboundaries\n");
    if (plan->n_boundaries == 0)
        fprintf(f, "  (none: the plan runs on one device)\n");
    for (int i = 0; i < plan->n_boundaries; i++) {
        const plan_boundary *b = &plan->boundaries[i];
        fprintf(f, "  after %-20s %s -> %s, %d transfer(s)%s\n", plan->steps[b->after_step].name,
                baton_device_format(b->from, b1, sizeof b1),
                baton_device_format(b->to, b2, sizeof b2), b->n_transfers,
                b->host_wait ? ", host waits" : "");
    }

    fprintf(f, "\ntransfers\n");
    if (plan->n_transfers == 0)
        fprintf(f, "  (none)\n");
    for (int i = 0; i < plan->n_transfers; i++) {
        const plan_transfer *x = &plan->transfers[i];
        const char *where = x->segment < plan->n_segments
                                ? plan->steps[plan->segments[x->segment].first_step].name
                                : "(end of run)";
        fprintf(f, "  %-16s %8zu B  %s -> %s  before %s\n", plan->tensors[x->tensor].name,
                plan->tensors[x->tensor].nbytes, baton_device_format(x->from, b1, sizeof b1),
                baton_device_format(x->to, b2, sizeof b2), where);
    }

    fprintf(f, "\nmemory plan\n");
    for (int d = 0; d < plan->n_devices; d++) {
        const plan_memory *m = &plan->memory[d];
        fprintf(f, "  %s: arena %zu bytes (%zu without reuse)\n",
                baton_device_format(m->device, b1, sizeof b1), m->arena_bytes, m->naive_bytes);
        for (int t = 0; t < plan->n_tensors; t++) {
            if (m->offset[t] == PLAN_OFFSET_MAPPED) {
                fprintf(f, "    %-16s read in place from %s (no arena bytes)\n",
                        plan->tensors[t].name, plan->tensors[t].init.path);
                continue;
            }
            if (m->offset[t] < 0 || plan->tensors[t].view_of >= 0)
                continue;
            const plan_tensor *pt = &plan->tensors[t];
            shape_str(&pt->desc, shape, sizeof shape);
            fprintf(f, "    %-16s %-4s %-14s %-12s @%-10lld %9zu B  live %d..%d\n", pt->name,
                    baton_dtype_name(pt->desc.dtype), shape, baton_role_name(pt->role),
                    (long long)m->offset[t], pt->nbytes, m->live_begin[t], m->live_end[t]);
        }
    }

    fprintf(f, "\nhost waits per run\n");
    for (int mode = 0; mode < 3; mode++) {
        fprintf(f, "  %-8s %d", baton_sync_mode_name((baton_sync_mode)mode), plan->n_sync[mode]);
        int shown = 0;
        for (int i = 0; i < plan->n_sync[mode] && shown < 8; i++, shown++)
            fprintf(f, "%s%s/%s(%s)", i ? ", " : ": ",
                    plan->steps[plan->sync[mode][i].after_step].name,
                    baton_device_format(plan->sync[mode][i].device, b1, sizeof b1),
                    plan->sync[mode][i].why);
        if (plan->n_sync[mode] > shown)
            fprintf(f, ", ...");
        fprintf(f, "\n");
    }
    fprintf(f,
            "  (positions: step i runs at 2i+1, a boundary before step f at 2f, the end at %d)\n",
            2 * plan->n_steps);
}

int baton__plan_describe(const baton_plan *plan, FILE *f, int as_json)
{
    if (!as_json) {
        describe_text(plan, f);
        return 0;
    }
    json_t *root = describe_json(plan);
    if (!root)
        return BATON_ENOMEM;
    int rc = json_dumpf(root, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0 ? 0 : BATON_EIO;
    fputc('\n', f);
    json_decref(root);
    return rc;
}

int baton_plan_describe(const baton_plan *plan, void *file, int as_json)
{
    if (!plan || !file)
        return BATON_EINVAL;
    return baton__plan_describe(plan, (FILE *)file, as_json);
}
