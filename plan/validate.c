/* validate.c: checks a built plan against the registry and against the dataflow rules, so that a
 * plan that loads can run: every step names a target with an implementation for its device, its
 * tensors match the target's signature and attributes, every tensor is written once before it is
 * read. It also fills each tensor's producer and readers and packs each step's descriptor. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"
#include "targets/decoder.h"
#include "targets/registry.h"

static int plan_fail(baton_error *err, const baton_plan *plan, int code, plan_pos pos,
                     const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

static int plan_fail(baton_error *err, const baton_plan *plan, int code, plan_pos pos,
                     const char *fmt, ...)
{
    char msg[BATON_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return baton__plan_error(err, code, plan, pos, "%s", msg);
}

static const char *kind_word(baton_target_kind k)
{
    return k == BATON_TARGET_DELEGATE ? "delegate" : "kernel";
}

static const char *device_kind_word(baton_device_kind k)
{
    return k == BATON_DEVICE_CUDA ? "cuda" : k == BATON_DEVICE_CPU ? "cpu" : "none";
}

static const char *attr_type_word(baton_attr_type t)
{
    switch (t) {
    case BATON_ATTR_INT: return "an integer";
    case BATON_ATTR_FLOAT: return "a number";
    case BATON_ATTR_BOOL: return "a bool";
    case BATON_ATTR_STRING: return "a string";
    default: return "nothing";
    }
}

/* Appends ", name" to a list in buf. */
static void append(char *buf, size_t cap, const char *item)
{
    size_t used = strlen(buf);
    if (used < cap)
        snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", item);
}

/* Finds the step's target and its implementation for the step's device. */
static int resolve_target(const baton_plan *plan, plan_step *s, baton_error *err)
{
    const baton_registry *reg = plan->registry;
    const baton_target *t = baton_registry_find(reg, s->target_name);
    if (!t) {
        /* List what would work here: targets of the same kind with an implementation for this
         * device kind. */
        char list[600] = "", hint[PLAN_MAX_NAME + 32] = "";
        plan_suggest sg;
        baton__plan_suggest_init(&sg, s->target_name);
        for (int i = 0; i < baton_registry_count(reg); i++) {
            const baton_target *c = baton_registry_at(reg, i);
            if (!c || c->kind != s->kind)
                continue;
            if (!baton_target_impl_for(c, s->device.kind) &&
                !(s->device.kind == BATON_DEVICE_CUDA &&
                  baton_target_impl_for(c, BATON_DEVICE_CPU)))
                continue;
            append(list, sizeof list, c->name);
            baton__plan_suggest_try(&sg, c->name);
        }
        if (baton__plan_suggest_best(&sg))
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", baton__plan_suggest_best(&sg));
        return plan_fail(err, plan, BATON_ENOTARGET, s->target_pos,
                         "step '%s': no %s named '%.64s' is registered%s; %ss on %s: %s", s->name,
                         kind_word(s->kind), s->target_name, hint, kind_word(s->kind),
                         device_kind_word(s->device.kind), list[0] ? list : "none");
    }
    if (t->kind != s->kind)
        return plan_fail(err, plan, BATON_EPLAN, s->target_pos,
                         "step '%s': '%s' is a %s, not a %s; write \"%s\": \"%s\"", s->name,
                         t->name, kind_word(t->kind), kind_word(s->kind), kind_word(t->kind),
                         t->name);
    /* One rule in every build: a cuda:N step whose target has only a CPU implementation runs on
     * the CPU, that step alone (the runtime notes it). With CUDA built in, the step moves to the
     * CPU here, so that the analysis copies its inputs and outputs like any CPU step's; a CPU-only
     * build runs every cuda:N step on the CPU already, on the device's own (host) memory. */
    int cpu_fallback = s->device.kind == BATON_DEVICE_CUDA &&
                       !baton_target_impl_for(t, BATON_DEVICE_CUDA) &&
                       baton_target_impl_for(t, BATON_DEVICE_CPU) != NULL;
    if (cpu_fallback && baton_cuda_built()) {
        s->fallback_from = s->device;
        s->device = (baton_device){BATON_DEVICE_CPU, 0};
    }
    if (!cpu_fallback && !baton_target_impl_for(t, s->device.kind)) {
        char list[128] = "", dev[32];
        baton_device_format(s->device, dev, sizeof dev);
        for (int i = 0; i < t->n_impls && i < BATON_MAX_IMPLS; i++)
            append(list, sizeof list, device_kind_word(t->impls[i].device));
        return plan_fail(
            err, plan, BATON_ENOTARGET, s->device_pos,
            "step '%s': %s '%s' has no implementation for %s; it runs on: %s; move the "
            "step to one of those devices",
            s->name, kind_word(t->kind), t->name, dev, list[0] ? list : "no device");
    }
    s->target = t;
    s->cuda_tune = baton__registry_tuner(t, BATON_DEVICE_CUDA);
    s->cuda_prepare = baton__registry_preparer(t, BATON_DEVICE_CUDA);
    s->cuda_errors = baton__registry_errors(t, BATON_DEVICE_CUDA);
    return 0;
}

static int check_attrs(const baton_plan *plan, const plan_step *s, baton_error *err)
{
    const baton_target *t = s->target;
    int n_specs = 0;
    while (n_specs < BATON_MAX_ATTR_SPECS && t->attrs[n_specs].name)
        n_specs++;
    for (int a = 0; a < s->n_attrs; a++) {
        const baton_attr *at = &s->attrs[a];
        const baton_attr_spec *spec = NULL;
        plan_suggest sg;
        baton__plan_suggest_init(&sg, at->name);
        for (int k = 0; k < n_specs && !spec; k++) {
            if (strcmp(t->attrs[k].name, at->name) == 0)
                spec = &t->attrs[k];
            baton__plan_suggest_try(&sg, t->attrs[k].name);
        }
        plan_pos pos = s->attr_pos ? s->attr_pos[a] : s->pos;
        if (!spec) {
            char hint[96] = "", accepted[400] = ""; /* formatted only here: this runs per step */
            for (int k = 0; k < n_specs; k++)
                append(accepted, sizeof accepted, t->attrs[k].name);
            if (baton__plan_suggest_best(&sg))
                snprintf(hint, sizeof hint, " (did you mean '%s'?)", baton__plan_suggest_best(&sg));
            return plan_fail(err, plan, BATON_EPLAN, pos,
                             "step '%s': %s '%s' takes no attribute '%.64s'%s; accepted: %s",
                             s->name, kind_word(t->kind), t->name, at->name, hint,
                             accepted[0] ? accepted : "none");
        }
        int ok = at->type == spec->type ||
                 (spec->type == BATON_ATTR_FLOAT && at->type == BATON_ATTR_INT);
        if (!ok)
            return plan_fail(err, plan, BATON_EPLAN, pos,
                             "step '%s': attribute '%s' must be %s, not %s (%s: %s)", s->name,
                             at->name, attr_type_word(spec->type), attr_type_word(at->type),
                             at->name, spec->help ? spec->help : "see baton inspect");
    }
    for (int k = 0; k < n_specs; k++) {
        const baton_attr_spec *spec = &t->attrs[k];
        if (!spec->required || baton_attrs_find(s->attrs, s->n_attrs, spec->name))
            continue;
        return plan_fail(err, plan, BATON_EPLAN, s->pos,
                         "step '%s': %s '%s' needs attribute '%s', %s (%s); add it to \"attrs\"",
                         s->name, kind_word(t->kind), t->name, spec->name,
                         attr_type_word(spec->type), spec->help ? spec->help : "no description");
    }
    return 0;
}

/* Counts, attributes, the target's check() against the declared outputs, then pack(). */
static int check_signature(baton_plan *plan, plan_step *s, baton_error *err)
{
    const baton_target *t = s->target;
    if (s->n_inputs != t->n_inputs || s->n_outputs != t->n_outputs)
        return plan_fail(
            err, plan, BATON_EPLAN, s->pos,
            "step '%s': %s '%s' takes %d input%s and %d output%s but the step lists %d "
            "input%s and %d output%s; %s: %s",
            s->name, kind_word(t->kind), t->name, t->n_inputs, t->n_inputs == 1 ? "" : "s",
            t->n_outputs, t->n_outputs == 1 ? "" : "s", s->n_inputs, s->n_inputs == 1 ? "" : "s",
            s->n_outputs, s->n_outputs == 1 ? "" : "s", t->name,
            t->summary ? t->summary : "see baton inspect");
    int rc = check_attrs(plan, s, err);
    if (rc)
        return rc;

    baton_tensor_desc in[PLAN_MAX_STEP_ARGS], decl[PLAN_MAX_STEP_ARGS], want[PLAN_MAX_STEP_ARGS];
    const char *in_names[PLAN_MAX_STEP_ARGS], *out_names[PLAN_MAX_STEP_ARGS];
    for (int i = 0; i < s->n_inputs; i++) {
        in[i] = plan->tensors[s->inputs[i]].desc;
        in_names[i] = plan->tensors[s->inputs[i]].name;
    }
    for (int i = 0; i < s->n_outputs; i++) {
        decl[i] = plan->tensors[s->outputs[i]].desc;
        want[i] = decl[i];
        out_names[i] = plan->tensors[s->outputs[i]].name;
    }
    baton_sig_args args = {.struct_size = sizeof(baton_sig_args),
                           .n_inputs = s->n_inputs,
                           .inputs = in,
                           .n_outputs = s->n_outputs,
                           .outputs = decl,
                           .n_attrs = s->n_attrs,
                           .attrs = s->attrs,
                           .input_names = in_names,
                           .output_names = out_names,
                           .opaque = s->opaque_verbatim ? s->opaque : NULL,
                           .opaque_len = s->opaque_verbatim ? s->opaque_len : 0};
    if (t->check) {
        char msg[512] = "";
        rc = t->check(&args, want, msg, sizeof msg);
        msg[sizeof msg - 1] = 0; /* a plugin's check() may leave it unterminated */
        if (rc)
            return plan_fail(err, plan, BATON_EPLAN, s->pos, "step '%s' (%s '%s'): %s", s->name,
                             kind_word(t->kind), t->name,
                             msg[0] ? msg : "the signature check failed");
        for (int i = 0; i < s->n_outputs; i++) {
            /* A plugin's check() may write anything: only a descriptor baton could declare is
             * compared, and printed. */
            if (want[i].rank < 0 || want[i].rank > BATON_MAX_RANK || want[i].dtype <= 0 ||
                want[i].dtype >= BATON_DTYPE_COUNT)
                return plan_fail(err, plan, BATON_EPLAN, s->pos,
                                 "step '%s': %s '%s''s check() gave output %d rank %d and dtype "
                                 "code %d, which no tensor can have (rank 0 to %d, dtype 1 to %d): "
                                 "the target's check() is wrong",
                                 s->name, kind_word(t->kind), t->name, i, want[i].rank,
                                 (int)want[i].dtype, BATON_MAX_RANK, BATON_DTYPE_COUNT - 1);
            int same = want[i].dtype == decl[i].dtype && want[i].rank == decl[i].rank;
            for (int d = 0; same && d < decl[i].rank && d < BATON_MAX_RANK; d++)
                same = want[i].shape[d] == decl[i].shape[d];
            if (same)
                continue;
            char have[160], need[160];
            const plan_tensor *o = &plan->tensors[s->outputs[i]];
            baton__desc_format(have, sizeof have, &decl[i]);
            baton__desc_format(need, sizeof need, &want[i]);
            return plan_fail(err, plan, BATON_EPLAN, s->output_pos ? s->output_pos[i] : s->pos,
                             "step '%s': output '%s' is declared %s but %s '%s' produces %s here; "
                             "declare tensor '%s' (line %d:%d) as %s",
                             s->name, o->name, have, kind_word(t->kind), t->name, need, o->name,
                             o->pos.line, o->pos.column, need);
        }
    }
    if (s->opaque_verbatim) {
        /* a descriptor the plan gives is decoded and checked now, not at the first run */
        char msg[512] = "";
        if (baton__target_opaque_check(t, &args, s->opaque, s->opaque_len, msg, sizeof msg))
            return plan_fail(err, plan, BATON_EPLAN, s->pos,
                             "step '%s' (%s '%s'): its \"opaque\" "
                             "descriptor: %s",
                             s->name, kind_word(t->kind), t->name, msg);
        return 0;
    }
    s->opaque = baton__plan_no_descriptor;
    s->opaque_len = 0;
    if (t->pack) {
        char buf[BATON_OPAQUE_MAX];
        int n = t->pack(&args, buf, sizeof buf);
        if (n < 0 || n > BATON_OPAQUE_MAX)
            return plan_fail(err, plan, BATON_EPLAN, s->pos,
                             "step '%s': %s '%s' could not pack its descriptor (%s)", s->name,
                             kind_word(t->kind), t->name, baton_strerror(n < 0 ? n : BATON_EINVAL));
        if (n > 0) {
            char *d = baton__plan_alloc(plan, (size_t)n);
            if (!d)
                return plan_fail(err, plan, BATON_ENOMEM, s->pos, "out of memory");
            memcpy(d, buf, (size_t)n);
            s->opaque = d;
        }
        s->opaque_len = (size_t)n;
    }
    return 0;
}

static int same_desc(const baton_tensor_desc *a, const baton_tensor_desc *b)
{
    int same = a->dtype == b->dtype && a->rank == b->rank;
    for (int d = 0; same && d < a->rank && d < BATON_MAX_RANK; d++)
        same = a->shape[d] == b->shape[d];
    return same;
}

/* A collective: one input and one output per device of its group, inputs alike, outputs as the
 * collective makes them; all_reduce takes "op": "sum" (the default), all_gather nothing. */
static int check_collective(baton_plan *plan, plan_step *s, baton_error *err)
{
    int n = s->n_group;
    if (s->n_inputs != n || s->n_outputs != n)
        return plan_fail(err, plan, BATON_EPLAN, s->pos,
                         "step '%s': %s over %d devices takes %d inputs and %d outputs (input and "
                         "output k on devices[k]) but the step lists %d and %d",
                         s->name, s->target_name, n, n, n, s->n_inputs, s->n_outputs);
    for (int a = 0; a < s->n_attrs; a++) {
        const baton_attr *at = &s->attrs[a];
        plan_pos pos = s->attr_pos ? s->attr_pos[a] : s->pos;
        int op = s->coll == PLAN_COLL_ALL_REDUCE && strcmp(at->name, "op") == 0;
        if (!op)
            return plan_fail(err, plan, BATON_EPLAN, pos,
                             "step '%s': %s takes no attribute '%.64s'; accepted: %s", s->name,
                             s->target_name, at->name,
                             s->coll == PLAN_COLL_ALL_REDUCE ? "op" : "none");
        if (at->type != BATON_ATTR_STRING || strcmp(at->s, "sum") != 0)
            return plan_fail(err, plan, BATON_EPLAN, pos,
                             "step '%s': all_reduce's \"op\" must be \"sum\" (the only reduction "
                             "baton offers)",
                             s->name);
    }
    const baton_tensor_desc *in0 = &plan->tensors[s->inputs[0]].desc;
    for (int k = 1; k < n; k++) {
        const plan_tensor *t = &plan->tensors[s->inputs[k]];
        if (same_desc(&t->desc, in0))
            continue;
        char a[160], b[160];
        baton__desc_format(a, sizeof a, &t->desc);
        baton__desc_format(b, sizeof b, in0);
        return plan_fail(err, plan, BATON_EPLAN, s->input_pos ? s->input_pos[k] : s->pos,
                         "step '%s': %s input '%s' is %s but input '%s' is %s; every device "
                         "contributes the same dtype and shape",
                         s->name, s->target_name, t->name, a, plan->tensors[s->inputs[0]].name, b);
    }
    baton_tensor_desc want = *in0;
    if (s->coll == PLAN_COLL_ALL_GATHER) {
        if (in0->rank < 1)
            return plan_fail(err, plan, BATON_EPLAN, s->pos,
                             "step '%s': all_gather concatenates along dim 0, so its inputs need "
                             "a rank of at least 1; '%s' is a scalar",
                             s->name, plan->tensors[s->inputs[0]].name);
        want.shape[0] *= n;
    }
    for (int k = 0; k < n; k++) {
        const plan_tensor *o = &plan->tensors[s->outputs[k]];
        if (same_desc(&o->desc, &want))
            continue;
        char have[160], need[160];
        baton__desc_format(have, sizeof have, &o->desc);
        baton__desc_format(need, sizeof need, &want);
        return plan_fail(err, plan, BATON_EPLAN, s->output_pos ? s->output_pos[k] : s->pos,
                         "step '%s': output '%s' is declared %s but %s produces %s here; declare "
                         "tensor '%s' (line %d:%d) as %s",
                         s->name, o->name, have, s->target_name, need, o->name, o->pos.line,
                         o->pos.column, need);
    }
    s->opaque = baton__plan_no_descriptor;
    s->opaque_len = 0;
    return 0;
}

/* The first step after `after` that writes tensor t, or -1. Used only to explain an error. */
static int later_writer(const baton_plan *plan, int after, int t)
{
    for (int s = after + 1; s < plan->n_steps; s++)
        for (int o = 0; o < plan->steps[s].n_outputs; o++)
            if (plan->steps[s].outputs[o] == t)
                return s;
    return -1;
}

/* Whether target t declares output k written in place into input i. */
static int declares_alias(const baton_target *t, int k, int i)
{
    for (int a = 0; t && a < t->n_aliases && a < BATON_MAX_ALIASES; a++)
        if (t->aliases[a].output == k && t->aliases[a].input == i)
            return 1;
    return 0;
}

/* A state tensor lives on one device, so that every read and write of it is ordered by that
 * device's queue, across segments and runs, with no copy to keep coherent. */
static int use_state(baton_plan *plan, const plan_step *s, int k, int ti, plan_pos pos,
                     baton_error *err)
{
    plan_tensor *root = &plan->tensors[plan->tensors[ti].storage];
    if (root->role != BATON_ROLE_STATE)
        return 0;
    if (s->kind == BATON_TARGET_COLLECTIVE)
        return plan_fail(err, plan, BATON_EPLAN, pos,
                         "step '%s' is a collective over state tensor '%s'; a state tensor lives "
                         "on one device: copy it into an intermediate first",
                         s->name, root->name);
    baton_device dev = step_arg_device(s, k);
    if (root->state_device.kind == BATON_DEVICE_NONE) {
        root->state_device = dev;
        return 0;
    }
    if (device_eq(root->state_device, dev))
        return 0;
    char a[32], b[32];
    return plan_fail(err, plan, BATON_EPLAN, pos,
                     "step '%s' uses state tensor '%s' on %s but earlier steps use it on %s; a "
                     "state tensor lives on one device: run every step that reads or writes it "
                     "there (copy what another device needs into an intermediate)",
                     s->name, root->name, baton_device_format(dev, a, sizeof a),
                     baton_device_format(root->state_device, b, sizeof b));
}

/* Before the signature, whose message about shapes or descriptors would mislead: views are never
 * written, and a verbatim descriptor cannot follow tensors sized by dimensions. */
static int check_no_view_written(const baton_plan *plan, const plan_step *s, baton_error *err)
{
    int dims = 0;
    for (int k = 0; k < s->n_inputs; k++)
        dims |= plan->tensors[s->inputs[k]].has_dims;
    for (int k = 0; k < s->n_outputs; k++)
        dims |= plan->tensors[s->outputs[k]].has_dims;
    if (dims && s->kind == BATON_TARGET_COLLECTIVE)
        return plan_fail(err, plan, BATON_EPLAN, s->pos,
                         "step '%s' is a collective over a tensor sized by a dimension; a "
                         "collective's tensors have fixed shapes (give them the dimension's max)",
                         s->name);
    if (dims && s->opaque_verbatim)
        return plan_fail(err, plan, BATON_EPLAN, s->pos,
                         "step '%s' has a verbatim \"opaque\" but a tensor sized by a dimension; "
                         "its descriptor could not follow the run's shapes: remove \"opaque\" so "
                         "that the target packs it",
                         s->name);
    for (int o = 0; o < s->n_outputs; o++) {
        const plan_tensor *t = &plan->tensors[s->outputs[o]];
        if (t->view_of >= 0)
            return plan_fail(err, plan, BATON_EPLAN, s->output_pos ? s->output_pos[o] : s->pos,
                             "step '%s' writes tensor '%s', a view of '%s'; views are read-only: "
                             "write '%s' and read the view",
                             s->name, t->name, plan->tensors[t->view_of].name,
                             plan->tensors[t->storage].name);
    }
    return 0;
}

static int check_dataflow(baton_plan *plan, int si, baton_error *err)
{
    plan_step *s = &plan->steps[si];
    int rc;
    for (int i = 0; i < s->n_inputs; i++) {
        int ti = s->inputs[i];
        plan_tensor *t = &plan->tensors[ti];
        plan_tensor *root = &plan->tensors[t->storage];
        plan_pos pos = s->input_pos ? s->input_pos[i] : s->pos;
        s->has_dims |= t->has_dims;
        for (int o = 0; o < s->n_outputs; o++) {
            if (s->outputs[o] != ti)
                continue;
            if (t->role == BATON_ROLE_STATE && declares_alias(s->target, o, i))
                continue;
            if (t->role == BATON_ROLE_STATE)
                return plan_fail(err, plan, BATON_EPLAN, pos,
                                 "step '%s' writes state tensor '%s' in place (input %d, output "
                                 "%d) but %s '%s' declares no such alias; write a new tensor, or "
                                 "use a target that updates its input in place",
                                 s->name, t->name, i, o,
                                 s->kind == BATON_TARGET_COLLECTIVE ? "collective"
                                                                    : kind_word(s->kind),
                                 s->target_name);
            return plan_fail(err, plan, BATON_EPLAN, pos,
                             "step '%s' reads and writes tensor '%s'; steps do not run in place "
                             "(except on state tensors, \"role\": \"state\"): write to a new "
                             "tensor and read that one afterwards",
                             s->name, t->name);
        }
        int readable = root->role == BATON_ROLE_INPUT || root->role == BATON_ROLE_CONSTANT ||
                       root->role == BATON_ROLE_STATE ||
                       (root->producer >= 0 && root->producer < si);
        if (!readable) {
            int later = later_writer(plan, si, t->storage);
            if (later >= 0)
                return plan_fail(err, plan, BATON_EPLAN, pos,
                                 "step '%s' reads tensor '%s' before step '%s' (line %d:%d) writes "
                                 "it; move step '%s' before step '%s'",
                                 s->name, t->name, plan->steps[later].name,
                                 plan->steps[later].pos.line, plan->steps[later].pos.column,
                                 plan->steps[later].name, s->name);
            return plan_fail(err, plan, BATON_EPLAN, pos,
                             "step '%s' reads tensor '%s' but no step writes it; make it an input "
                             "(\"role\": \"input\"), a constant with an init, or add a step that "
                             "writes it",
                             s->name, t->name);
        }
        if ((rc = use_state(plan, s, i, ti, pos, err)))
            return rc;
        if (t->first_read < 0)
            t->first_read = si;
        t->last_read = si;
        if (root != t) {
            if (root->first_read < 0)
                root->first_read = si;
            root->last_read = si;
        }
    }
    for (int o = 0; o < s->n_outputs; o++) {
        int ti = s->outputs[o];
        plan_tensor *t = &plan->tensors[ti];
        plan_pos pos = s->output_pos ? s->output_pos[o] : s->pos;
        s->has_dims |= t->has_dims;
        if (t->role == BATON_ROLE_INPUT || t->role == BATON_ROLE_CONSTANT)
            return plan_fail(err, plan, BATON_EPLAN, pos,
                             "step '%s' writes %s tensor '%s'; inputs and constants are read-only: "
                             "write to a new intermediate or output tensor",
                             s->name, baton_role_name(t->role), t->name);
        for (int p = 0; p < o; p++)
            if (s->outputs[p] == ti)
                return plan_fail(
                    err, plan, BATON_EPLAN, pos,
                    "step '%s' lists tensor '%s' twice in its outputs; each output needs its "
                    "own tensor",
                    s->name, t->name);
        if ((rc = use_state(plan, s, o, ti, pos, err)))
            return rc;
        if (t->role == BATON_ROLE_STATE) {
            /* written by as many steps as the plan says, in step order on its device */
            if (t->producer < 0)
                t->producer = si;
            continue;
        }
        if (t->producer >= 0) {
            const plan_step *p = &plan->steps[t->producer];
            return plan_fail(err, plan, BATON_EPLAN, pos,
                             "tensor '%s' is written by step '%s' (line %d:%d) and again by step "
                             "'%s'; a tensor is written once per run: give step '%s' a new output "
                             "tensor",
                             t->name, p->name, p->pos.line, p->pos.column, s->name, s->name);
        }
        t->producer = si;
    }
    if (s->has_dims && s->opaque_verbatim)
        return plan_fail(err, plan, BATON_EPLAN, s->pos,
                         "step '%s' has a verbatim \"opaque\" but a tensor sized by a dimension; "
                         "its descriptor could not follow the run's shapes: remove \"opaque\" so "
                         "that the target packs it",
                         s->name);
    return 0;
}

int baton__plan_validate(baton_plan *plan, baton_error *err)
{
    if (!plan || !plan->registry)
        return baton__err_set(err, BATON_EINVAL, "baton__plan_validate: no plan or no registry");
    baton_device devices[PLAN_MAX_DEVICES];
    int n_devices = 0;
    for (int ti = 0; ti < plan->n_tensors; ti++) {
        plan->tensors[ti].producer = -1;
        plan->tensors[ti].first_read = plan->tensors[ti].last_read = -1;
        plan->tensors[ti].state_device = (baton_device){BATON_DEVICE_NONE, 0};
    }
    for (int si = 0; si < plan->n_steps; si++) {
        plan_step *s = &plan->steps[si];
        int nd;
        const baton_device *devs = step_devices(s, &nd);
        for (int g = 0; g < nd; g++) {
            baton_device dev = devs[g];
            int known = 0;
            for (int d = 0; d < n_devices && !known; d++)
                known = device_eq(devices[d], dev);
            if (known)
                continue;
            if (n_devices == PLAN_MAX_DEVICES)
                return plan_fail(err, plan, BATON_EPLAN, s->device_pos,
                                 "step '%s' uses a device beyond the %d a plan may use", s->name,
                                 PLAN_MAX_DEVICES);
            devices[n_devices++] = dev;
        }
        int rc = check_no_view_written(plan, s, err);
        if (rc)
            return rc;
        if (s->kind == BATON_TARGET_COLLECTIVE)
            rc = check_collective(plan, s, err);
        else if (!(rc = resolve_target(plan, s, err)))
            rc = check_signature(plan, s, err);
        if (rc || (rc = check_dataflow(plan, si, err)))
            return rc;
    }
    for (int ti = 0; ti < plan->n_tensors; ti++) {
        const plan_tensor *t = &plan->tensors[ti];
        if (t->role == BATON_ROLE_OUTPUT && t->producer < 0)
            return plan_fail(err, plan, BATON_EPLAN, t->pos,
                             "output tensor '%s' is never written; add a step that writes it, or "
                             "change its role",
                             t->name);
    }
    return 0;
}
