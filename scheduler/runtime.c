/* runtime.c: prepares an analysed plan for running and runs it in a sync mode.
 *
 * Prepare does everything that allocates: arenas from the memory plan, constants, one device
 * context (stream) per device, delegate states, and one prebuilt call per step. A run then only
 * walks the segments: GPU segments are issued on their device's stream without waiting (or
 * replayed from a captured graph), and the host waits where the analysis says: after every GPU
 * step in strict mode, at GPU -> CPU boundaries and at the end otherwise.
 *
 * Queueing ahead (graph mode): in GPU -> CPU -> GPU on one device, the second GPU segment's graph
 * is launched before the CPU segment runs, behind the device's gate, which the host opens when
 * the CPU segment is done. The GPU then starts it without a launch in between; the host still
 * waits once at the boundary, on an event recorded before the queued work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/runtime.h"

/* ---- prepare ------------------------------------------------------------------------------ */

static int choose_backend(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int need = -1, first_step = -1; /* the highest cuda index the plan uses */
    for (int i = 0; i < plan->n_steps; i++)
        if (plan->steps[i].device.kind == BATON_DEVICE_CUDA && plan->steps[i].device.index > need) {
            need = plan->steps[i].device.index;
            first_step = i;
        }
    rt->backend = rt->opts.gpu;
    if (need < 0) {
        rt->backend = BATON_GPU_CPU;
        return 0;
    }
    if (rt->backend == BATON_GPU_SIM || rt->backend == BATON_GPU_CPU)
        return 0;
    int have = baton_cuda_device_count();
    if (have > need) {
        rt->backend = BATON_GPU_CUDA;
        return 0;
    }
    char why[160];
    if (!baton_cuda_built())
        snprintf(why, sizeof why, "this build of baton has no CUDA support");
    else
        snprintf(why, sizeof why, "%d CUDA device(s) present", have);
    if (rt->backend == BATON_GPU_CUDA || rt->opts.fallback_is_error)
        return err_set(err, BATON_ENODEV,
                       "%s: step '%s' needs cuda:%d but %s; run its steps on the CPU with "
                       "--gpu=cpu (or allow the fallback)",
                       plan->source, plan->steps[first_step].name, need, why);
    if (!rt->opts.quiet)
        fprintf(stderr,
                "baton: warning: %s: step '%s' needs cuda:%d but %s; running the GPU steps on "
                "the CPU (--no-fallback makes this an error)\n",
                plan->source, plan->steps[first_step].name, need, why);
    rt->backend = BATON_GPU_CPU;
    return 0;
}

static const dev_ops *ops_for(const baton_runtime *rt, baton_device dev)
{
    if (dev.kind != BATON_DEVICE_CUDA)
        return &dev_cpu_ops;
    switch (rt->backend) {
#ifdef BATON_CUDA
    case BATON_GPU_CUDA: return &dev_cuda_ops;
#endif
    case BATON_GPU_SIM: return &dev_sim_ops;
    default: return &dev_cpu_ops;
    }
}

static int open_devices(baton_runtime *rt, int fault_dev, dev_fault fault, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    rt->nd = plan->n_devices;
    for (int d = 0; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        baton_device dv = plan->memory[d].device;
        rd->gpu = dv.kind == BATON_DEVICE_CUDA;
        rd->ops = ops_for(rt, dv);
        int rc = rd->ops->open(dv, &rt->opts, plan->n_segments, 2, &rd->ctx, err);
        if (rc)
            return rc;
        if (d == fault_dev && rd->ops->inject)
            rd->ops->inject(rd->ctx, fault);
    }
    /* Host memory that GPUs copy from and to is pinned: take it from the first real GPU. */
    rt->dev[0].arena_ops = rt->dev[0].ops;
    rt->dev[0].arena_ctx = rt->dev[0].ctx;
    rt->dev[0].host_mem = 1;
    for (int d = 1; d < rt->nd; d++)
        if (rt->dev[d].ops != &dev_cpu_ops) {
            rt->dev[0].arena_ops = rt->dev[d].ops;
            rt->dev[0].arena_ctx = rt->dev[d].ctx;
            break;
        }
    for (int d = 0; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        size_t cbytes = plan->memory[d].const_bytes;
        size_t bytes = plan->memory[d].arena_bytes - (rt->share ? cbytes : 0);
        if (d == 0) {
            rd->arena = rd->arena_ops->host_alloc(rd->arena_ctx, bytes ? bytes : 256, err);
        } else {
            rd->arena_ops = rd->ops;
            rd->arena_ctx = rd->ctx;
            rd->arena = rd->ops->alloc(rd->ctx, bytes ? bytes : 256, err);
        }
        if (!rd->arena) {
            char name[32];
            char inner[BATON_ERROR_MAX];
            snprintf(inner, sizeof inner, "%s", err ? err->message : "");
            return err_set(err, BATON_ENOMEM, "%s: cannot allocate the %zu-byte arena of %s: %s",
                           plan->source, bytes,
                           baton_device_format(plan->memory[d].device, name, sizeof name), inner);
        }
        rd->consts = rt->share ? rt->share->dev[d].consts : rd->arena;
        rd->priv = rt->share ? rd->arena : rd->arena + cbytes;
    }
    return 0;
}

static void *slot_addr(const baton_runtime *rt, int d, int t)
{
    const plan_memory *m = &rt->plan->memory[d];
    int64_t off = m->offset[t];
    if (off < 0)
        return NULL;
    if ((size_t)off < m->const_bytes)
        return rt->dev[d].consts + off;
    return rt->dev[d].priv + ((size_t)off - m->const_bytes);
}

static int load_constants(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    if (rt->share)
        return 0; /* already loaded, by the runtime that owns them */
    for (int t = 0; t < plan->n_tensors; t++) {
        const plan_tensor *pt = &plan->tensors[t];
        if (pt->role != BATON_ROLE_CONSTANT)
            continue;
        void *host = NULL;
        for (int d = 0; d < rt->nd; d++) {
            void *dst = slot_addr(rt, d, t);
            if (!dst)
                continue;
            if (!host) {
                host = malloc(pt->nbytes ? pt->nbytes : 1);
                if (!host)
                    return err_set(err, BATON_ENOMEM, "constant '%s': out of memory", pt->name);
                int rc = plan_tensor_materialize(plan, t, host, err);
                if (rc) {
                    free(host);
                    return rc;
                }
            }
            int rc = d == 0 ? (memcpy(dst, host, pt->nbytes), 0)
                            : rt->dev[d].ops->copy_sync(rt->dev[d].ctx, dst, host, pt->nbytes,
                                                        DEV_COPY_H2D, err);
            if (rc) {
                free(host);
                return rc;
            }
        }
        free(host);
    }
    return 0;
}

static int build_calls(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int n = plan->n_steps, nb = 0;
    for (int i = 0; i < n; i++)
        nb += plan->steps[i].n_inputs + plan->steps[i].n_outputs;
    rt->step_dev = calloc((size_t)n + 1, sizeof *rt->step_dev);
    rt->calls = calloc((size_t)n + 1, sizeof *rt->calls);
    rt->errbufs = calloc((size_t)n + 1, ERRBUF_LEN);
    rt->bufs = calloc((size_t)nb + 1, sizeof *rt->bufs);
    rt->states = calloc((size_t)n + 1, sizeof *rt->states);
    rt->impls = calloc((size_t)n + 1, sizeof *rt->impls);
    rt->step_ns = calloc((size_t)n + 1, sizeof *rt->step_ns);
    baton_device *devs = calloc((size_t)n + 1, sizeof *devs);
    baton_target_kind *kinds = calloc((size_t)n + 1, sizeof *kinds);
    int rc = 0;
    if (!rt->step_dev || !rt->calls || !rt->errbufs || !rt->bufs || !rt->states || !rt->impls ||
        !rt->step_ns || !devs || !kinds) {
        rc = err_set(err, BATON_ENOMEM, "prepare: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        devs[i] = plan->steps[i].device;
        kinds[i] = plan->steps[i].kind;
    }
    int use_pdl = rt->opts.mode != BATON_SYNC_STRICT && !rt->opts.disable_pdl;
    void **b = rt->bufs;
    for (int i = 0; i < n; i++) {
        const plan_step *s = &plan->steps[i];
        int d = plan_memory_index(plan, s->device);
        rt_device *rd = &rt->dev[d];
        baton_device_kind impl_kind = rd->ops == &dev_cpu_ops || rd->ops == &dev_sim_ops
                                          ? BATON_DEVICE_CPU
                                          : BATON_DEVICE_CUDA;
        const baton_target_impl *im = baton_target_impl_for(s->target, impl_kind);
        char name[32];
        if (!im) {
            rc = plan_error(err, BATON_ENOTARGET, plan, s->pos,
                            "step '%s': target '%s' has no %s implementation to run it on %s",
                            s->name, s->target_name, impl_kind == BATON_DEVICE_CPU ? "CPU" : "CUDA",
                            baton_device_format(s->device, name, sizeof name));
            goto out;
        }
        rt->impls[i] = im;
        rt->step_dev[i] = d;
        dev_call *c = &rt->calls[i];
        c->buffers = b;
        for (int k = 0; k < s->n_inputs; k++)
            *b++ = slot_addr(rt, d, s->inputs[k]);
        for (int k = 0; k < s->n_outputs; k++)
            *b++ = slot_addr(rt, d, s->outputs[k]);
        c->opaque = s->opaque;
        c->opaque_len = s->opaque_len;
        c->ctx = (baton_exec_ctx){
            .device = s->device,
            .stream = rd->ops->stream(rd->ctx),
            .next_device = s->next_device,
            .next_kind = s->next_kind,
            .capturing = 0,
            .pdl = 0,
            .step_name = s->name,
            .step_index = i,
            .errbuf = rt->errbufs + (size_t)i * ERRBUF_LEN,
            .errbuf_len = ERRBUF_LEN,
        };
        /* PDL only between two kernels of one GPU segment that both honour it: the first
         * kernel of a segment follows copies or the host. */
        if (use_pdl && s->kind == BATON_TARGET_KERNEL && im->supports_pdl && i > 0 &&
            plan->steps[i - 1].segment == s->segment &&
            plan->steps[i - 1].kind == BATON_TARGET_KERNEL && rt->impls[i - 1]->supports_pdl &&
            rd->ops->supports_pdl(rd->ctx))
            c->ctx.pdl = 1;
        if (s->kind == BATON_TARGET_KERNEL) {
            c->kernel = im->kernel;
            continue;
        }
        c->delegate = im->delegate;
        /* A delegate sees every input and output: the registry allows PLAN_MAX_STEP_ARGS. */
        baton_tensor_desc ins[PLAN_MAX_STEP_ARGS], outs[PLAN_MAX_STEP_ARGS];
        for (int k = 0; k < s->n_inputs; k++)
            ins[k] = plan->tensors[s->inputs[k]].desc;
        for (int k = 0; k < s->n_outputs; k++)
            outs[k] = plan->tensors[s->outputs[k]].desc;
        baton_sig_args sig = {s->n_inputs, ins, s->n_outputs, outs, s->n_attrs, s->attrs};
        int is_const[PLAN_MAX_STEP_ARGS] = {0};
        for (int k = 0; k < s->n_inputs; k++)
            is_const[k] = plan->tensors[s->inputs[k]].role == BATON_ROLE_CONSTANT;
        baton_delegate_init info = {
            .step_index = i,
            .step_name = s->name,
            .device = s->device,
            .stream = c->ctx.stream,
            .sig = &sig,
            .n_steps = n,
            .step_devices = devs,
            .step_kinds = kinds,
            .input_constant = is_const,
            .input_data = c->buffers,
        };
        if (im->delegate->init) {
            baton_error derr = {0};
            rc = im->delegate->init(&info, &rt->states[i], &derr);
            if (rc) {
                rc = plan_error(err, rc, plan, s->pos, "step '%s': delegate '%s' init on %s: %s",
                                s->name, s->target_name,
                                baton_device_format(s->device, name, sizeof name), derr.message);
                goto out;
            }
        }
        c->state = rt->states[i];
    }
out:
    free(devs);
    free(kinds);
    return rc;
}

static int build_transfers(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    rt->xfers = calloc((size_t)plan->n_transfers + 1, sizeof *rt->xfers);
    rt->xfer_first = calloc((size_t)plan->n_segments + 2, sizeof *rt->xfer_first);
    if (rt->xfer_first)
        for (int s = 0, x = 0; s <= plan->n_segments + 1; s++) {
            while (x < plan->n_transfers && plan->transfers[x].segment < s)
                x++;
            rt->xfer_first[s] = x;
        }
    if (!rt->xfers || !rt->xfer_first)
        return err_set(err, BATON_ENOMEM, "prepare: out of memory");
    for (int i = 0; i < plan->n_transfers; i++) {
        const plan_transfer *x = &plan->transfers[i];
        rt_transfer *r = &rt->xfers[i];
        int from = plan_memory_index(plan, x->from), to = plan_memory_index(plan, x->to);
        char a[32], b[32];
        if (x->from.kind == BATON_DEVICE_CUDA && x->to.kind == BATON_DEVICE_CUDA &&
            rt->backend != BATON_GPU_CPU)
            return err_set(err, BATON_ENOTSUP,
                           "%s: tensor '%s' moves from %s to %s: GPU-to-GPU transfers are not "
                           "supported yet; place both steps on one GPU",
                           plan->source, plan->tensors[x->tensor].name,
                           baton_device_format(x->from, a, sizeof a),
                           baton_device_format(x->to, b, sizeof b));
        r->src = slot_addr(rt, from, x->tensor);
        r->dst = slot_addr(rt, to, x->tensor);
        r->bytes = plan->tensors[x->tensor].nbytes;
        r->from = from;
        r->kind = to == 0 ? DEV_COPY_D2H : from == 0 ? DEV_COPY_H2D : DEV_COPY_D2D;
        r->issuer = r->kind == DEV_COPY_H2D ? to : from;
        /* On the CPU fallback both arenas are host memory: a memcpy, not a device transfer. */
        r->host_copy = rt->dev[from].ops == &dev_cpu_ops && rt->dev[to].ops == &dev_cpu_ops;
        snprintf(r->what, sizeof r->what, "transfer %s %s -> %s", plan->tensors[x->tensor].name,
                 baton_device_format(x->from, a, sizeof a),
                 baton_device_format(x->to, b, sizeof b));
    }
    return 0;
}

/* Which GPU segments are queued ahead: in graph mode, a GPU segment s after a CPU segment after a
 * GPU segment on the same device whose gate works, small enough to issue outside a graph. */
static int plan_queue_ahead(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    rt->ahead = -1;
    rt->ahead_ok = calloc((size_t)plan->n_segments + 1, 1);
    if (!rt->ahead_ok)
        return err_set(err, BATON_ENOMEM, "prepare: out of memory");
    if (rt->opts.mode != BATON_SYNC_GRAPH || rt->opts.disable_queue_ahead)
        return 0;
    for (int s = 2; s < plan->n_segments; s++) {
        const plan_segment *g = &plan->segments[s], *c = &plan->segments[s - 1],
                           *p = &plan->segments[s - 2];
        if (g->device.kind == BATON_DEVICE_CPU || c->device.kind != BATON_DEVICE_CPU ||
            p->device.kind == BATON_DEVICE_CPU)
            continue;
        int d = plan_memory_index(plan, g->device);
        const rt_device *rd = &rt->dev[d];
        if (plan_memory_index(plan, p->device) != d || !rd->ops->can_gate ||
            !rd->ops->can_gate(rd->ctx))
            continue;
        /* its gate, steps, incoming transfers and (at most) the transfers into the next one */
        int ops = 1 + g->last_step - g->first_step + 1;
        ops += rt->xfer_first[s + 2] - rt->xfer_first[s];
        rt->ahead_ok[s] = ops <= AHEAD_MAX_OPS;
    }
    return 0;
}

/* Options a caller filled in by hand may hold anything: name the field and what it may be. */
static int check_options(const baton_options *o, baton_error *err)
{
    if ((unsigned)o->mode > BATON_SYNC_GRAPH)
        return err_set(err, BATON_EINVAL,
                       "baton_runtime_create: options.mode is %d; use BATON_SYNC_STRICT, "
                       "BATON_SYNC_BOUNDARY or BATON_SYNC_GRAPH (0 to 2)",
                       (int)o->mode);
    if ((unsigned)o->gpu > BATON_GPU_SIM)
        return err_set(err, BATON_EINVAL,
                       "baton_runtime_create: options.gpu is %d; use BATON_GPU_AUTO, "
                       "BATON_GPU_CUDA, BATON_GPU_CPU or BATON_GPU_SIM (0 to 3)",
                       (int)o->gpu);
    if (o->sim_delay_us < 0 || o->sim_delay_us > RT_MAX_SIM_DELAY_US)
        return err_set(err, BATON_EINVAL,
                       "baton_runtime_create: options.sim_delay_us is %d; use 0 (no delay) "
                       "to %d microseconds",
                       o->sim_delay_us, RT_MAX_SIM_DELAY_US);
    return 0;
}

static int prepare(const baton_plan *plan, const baton_options *opts, const baton_runtime *share,
                   int fault_dev, dev_fault fault, baton_runtime **out, baton_error *err)
{
    err_clear(err);
    if (!plan || !out)
        return err_set(err, BATON_EINVAL, "baton_runtime_create: plan and out are required");
    *out = NULL;
    baton_options o;
    int rc = options_read(opts, &o, err);
    if (!rc)
        rc = check_options(&o, err);
    if (rc)
        return rc;
    baton_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return err_set(err, BATON_ENOMEM, "prepare: out of memory");
    rt->plan = plan_retain(plan); /* baton_runtime_destroy releases it */
    rt->opts = o;
    rt->share = share;
    if (share)
        rt->backend = share->backend; /* an instance runs where its first one does */
    else
        rc = choose_backend(rt, err);
    if (!rc)
        rc = open_devices(rt, fault_dev, fault, err);
    if (!rc)
        rc = load_constants(rt, err);
    if (!rc)
        rc = build_calls(rt, err);
    if (!rc)
        rc = build_transfers(rt, err);
    if (!rc) {
        rt->graph_state = calloc((size_t)plan->n_segments + 1, sizeof *rt->graph_state);
        rt->seg_bytes = calloc(2 * (size_t)plan->n_segments + 2, sizeof *rt->seg_bytes);
        if (!rt->graph_state || !rt->seg_bytes)
            rc = err_set(err, BATON_ENOMEM, "prepare: out of memory");
    }
    /* What each GPU segment's graph copies per launch: its incoming and outgoing transfers. */
    for (int x = 0; !rc && x < plan->n_transfers; x++) {
        const plan_transfer *pt = &plan->transfers[x];
        const rt_transfer *r = &rt->xfers[x];
        if (pt->segment < plan->n_segments && r->kind == DEV_COPY_H2D)
            rt->seg_bytes[2 * pt->segment] += (int64_t)r->bytes;
        if (r->kind == DEV_COPY_D2H) {
            int src = pt->segment - 1; /* issued at the end of the segment before, if on d */
            if (pt->segment == plan->n_segments)
                src = plan->n_segments - 1;
            if (src >= 0 && plan_memory_index(plan, plan->segments[src].device) == r->from &&
                (pt->segment == plan->n_segments ||
                 plan->segments[pt->segment].device.kind == BATON_DEVICE_CPU))
                rt->seg_bytes[2 * src + 1] += (int64_t)r->bytes;
        }
    }
    if (!rc)
        rc = plan_queue_ahead(rt, err);
    if (rc) {
        baton_runtime_destroy(rt);
        return rc;
    }
    *out = rt;
    return 0;
}

int runtime_prepare(const baton_plan *plan, const baton_options *opts, int fault_dev,
                    dev_fault fault, baton_runtime **out, baton_error *err)
{
    return prepare(plan, opts, NULL, fault_dev, fault, out, err);
}

int runtime_prepare_instance(const baton_runtime *share, baton_runtime **out, baton_error *err)
{
    if (!share)
        return err_set(err, BATON_EINVAL, "runtime_prepare_instance: no runtime to share");
    return prepare(share->plan, &share->opts, share, -1, DEV_FAULT_NONE, out, err);
}

void runtime_memory(const baton_runtime *rt, size_t *const_bytes, size_t *private_bytes)
{
    size_t c = 0, p = 0;
    for (int d = 0; d < rt->nd; d++) {
        const plan_memory *m = &rt->plan->memory[d];
        c += m->const_bytes;
        p += m->arena_bytes - m->const_bytes;
    }
    *const_bytes = c;
    *private_bytes = p;
}

int baton_runtime_create(const baton_plan *plan, const baton_options *opts, baton_runtime **out,
                         baton_error *err)
{
    return prepare(plan, opts, NULL, -1, DEV_FAULT_NONE, out, err);
}

void baton_runtime_destroy(baton_runtime *rt)
{
    if (!rt)
        return;
    for (int d = 0; d < rt->nd; d++)
        if (rt->dev[d].ctx && rt->dev[d].ops->drain)
            rt->dev[d].ops->drain(rt->dev[d].ctx);
    if (rt->states && rt->impls)
        for (int i = 0; i < rt->plan->n_steps; i++)
            if (rt->states[i] && rt->impls[i] && rt->impls[i]->delegate &&
                rt->impls[i]->delegate->destroy)
                rt->impls[i]->delegate->destroy(rt->states[i]);
    /* The CPU arena may come from a GPU's pinned allocator: free it before closing that GPU. */
    for (int d = 0; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        if (!rd->arena)
            continue;
        if (rd->host_mem)
            rd->arena_ops->host_free(rd->arena_ctx, rd->arena);
        else
            rd->arena_ops->free(rd->arena_ctx, rd->arena);
    }
    for (int d = 0; d < rt->nd; d++)
        if (rt->dev[d].ctx)
            rt->dev[d].ops->close(rt->dev[d].ctx);
    free(rt->step_dev);
    free(rt->calls);
    free(rt->errbufs);
    free(rt->bufs);
    free(rt->states);
    free(rt->impls);
    free(rt->step_ns);
    free(rt->xfers);
    free(rt->graph_state);
    free(rt->seg_bytes);
    free(rt->xfer_first);
    free(rt->ahead_ok);
    free(rt->trace);
    baton_plan_free((baton_plan *)rt->plan); /* drops the runtime's reference */
    free(rt);
}

/* ---- inputs and outputs ------------------------------------------------------------------- */

static int host_tensor(baton_runtime *rt, const char *name, size_t nbytes, int want_input,
                       void **addr, baton_error *err)
{
    if (!rt || !name)
        return err_set(err, BATON_EINVAL, "a runtime and a tensor name are required");
    const baton_plan *plan = rt->plan;
    int t = baton_plan_tensor_index(plan, name);
    if (t < 0)
        return err_set(err, BATON_ENOENT, "%s: no tensor named '%s'", plan->source, name);
    const plan_tensor *pt = &plan->tensors[t];
    if (want_input && pt->role != BATON_ROLE_INPUT)
        return err_set(err, BATON_EINVAL,
                       "%s: tensor '%s' is %s, not an input; only inputs can be set (give it "
                       "\"role\": \"input\")",
                       plan->source, name, baton_role_name(pt->role));
    if (!want_input && pt->role != BATON_ROLE_OUTPUT && pt->role != BATON_ROLE_INPUT)
        return err_set(err, BATON_EINVAL,
                       "%s: tensor '%s' is %s; only outputs (and inputs) can be read after a "
                       "run, since the memory plan reuses other tensors' space (give it "
                       "\"role\": \"output\")",
                       plan->source, name, baton_role_name(pt->role));
    if (nbytes != pt->nbytes)
        return err_set(err, BATON_EINVAL,
                       "%s: tensor '%s' (%s, %lld elements) has %zu bytes, not %zu", plan->source,
                       name, baton_dtype_name(pt->desc.dtype),
                       (long long)baton_tensor_desc_numel(&pt->desc), pt->nbytes, nbytes);
    *addr = slot_addr(rt, 0, t);
    if (!*addr)
        return err_set(err, BATON_ESTATE, "%s: tensor '%s' has no host copy", plan->source, name);
    return 0;
}

int baton_runtime_set_input(baton_runtime *rt, const char *name, const void *data, size_t nbytes,
                            baton_error *err)
{
    err_clear(err);
    void *dst;
    int rc = host_tensor(rt, name, nbytes, 1, &dst, err);
    if (rc)
        return rc;
    if (!data && nbytes)
        return err_set(err, BATON_EINVAL,
                       "baton_runtime_set_input: tensor '%s': data is NULL; pass a buffer "
                       "of %zu bytes",
                       name, nbytes);
    if (nbytes)
        memcpy(dst, data, nbytes);
    return 0;
}

int baton_runtime_get_output(baton_runtime *rt, const char *name, void *data, size_t nbytes,
                             baton_error *err)
{
    err_clear(err);
    void *src;
    int rc = host_tensor(rt, name, nbytes, 0, &src, err);
    if (rc)
        return rc;
    if (!data && nbytes)
        return err_set(err, BATON_EINVAL,
                       "baton_runtime_get_output: tensor '%s': data is NULL; pass a buffer "
                       "of %zu bytes",
                       name, nbytes);
    /* An output holds a result only after a run that succeeded (inputs hold what was set). */
    const plan_tensor *pt = &rt->plan->tensors[baton_plan_tensor_index(rt->plan, name)];
    if (pt->role == BATON_ROLE_OUTPUT && rt->last_run <= 0)
        return err_set(err, BATON_ESTATE,
                       rt->last_run == 0
                           ? "baton_runtime_get_output: output '%s': no run has completed "
                             "yet; call baton_runtime_run first"
                           : "baton_runtime_get_output: output '%s': the last run failed, so "
                             "it holds no complete result; run again",
                       name);
    if (nbytes)
        memcpy(data, src, nbytes);
    return 0;
}

/* ---- run ---------------------------------------------------------------------------------- */

/* Wraps a device's error with the step, its target and device. */
/* The one place a failure is tied to its step: "step 'norm' (kernel 'rms_norm_fwd' on cuda:0):"
 * and the reason the device or the call gave, the same words on every backend. A kernel or
 * delegate that refused its arguments (BATON_EINVAL, as it answers a direct call) is reported as
 * BATON_EKERNEL: for the runtime's caller, the step failed. */
static int step_fail(baton_runtime *rt, int i, int rc, baton_error *err)
{
    const plan_step *s = &rt->plan->steps[i];
    char name[32], inner[BATON_ERROR_MAX];
    snprintf(inner, sizeof inner, "%s", err ? err->message : "");
    if (rc == BATON_EINVAL)
        rc = BATON_EKERNEL;
    return err_set(err, rc, "step '%s' (%s '%s' on %s): %s", s->name,
                   s->kind == BATON_TARGET_KERNEL ? "kernel" : "delegate", s->target_name,
                   baton_device_format(s->device, name, sizeof name), inner);
}

static int issue_step(baton_runtime *rt, int i, baton_error *err)
{
    rt_device *rd = &rt->dev[rt->step_dev[i]];
    dev_call *c = &rt->calls[i];
    c->ctx.errbuf[0] = 0;
    int64_t t0 = rt->timing || rt->trace ? now_ns() : 0;
    int rc = rd->ops->call(rd->ctx, c, err);
    if (t0) {
        int64_t t1 = now_ns();
        rt->step_ns[i] += t1 - t0;
        if (rt->trace)
            trace_add(rt, rt->plan->steps[i].name, "step", rt->step_dev[i], t0, t1);
    }
    if (rc)
        return step_fail(rt, i, rc, err);
    return 0;
}

static int issue_transfer(baton_runtime *rt, int x, baton_error *err)
{
    rt_transfer *r = &rt->xfers[x];
    rt_device *rd = &rt->dev[r->issuer];
    int64_t t0 = rt->trace ? now_ns() : 0;
    int rc = rd->ops->copy(rd->ctx, r->dst, r->src, r->bytes, r->kind, r->what, err);
    if (rc) {
        char name[32], inner[BATON_ERROR_MAX];
        snprintf(inner, sizeof inner, "%s", err ? err->message : "");
        return err_set(err, rc, "%s (issued on %s): %s", r->what,
                       baton_device_format(rt->plan->memory[r->issuer].device, name, sizeof name),
                       inner);
    }
    if (t0)
        trace_add(rt, r->what, "transfer", r->issuer, t0, now_ns());
    if (rt->capturing)
        return 0; /* counted on each launch of the graph */
    rd->pending = 1;
    if (r->host_copy)
        return 0; /* not bytes moved to or from a device (baton_run_stats) */
    if (r->kind == DEV_COPY_H2D)
        rt->stats.bytes_h2d += (int64_t)r->bytes;
    else if (r->kind == DEV_COPY_D2H)
        rt->stats.bytes_d2h += (int64_t)r->bytes;
    else
        rt->stats.bytes_d2d += (int64_t)r->bytes;
    return 0;
}

/* Waits for device d. A failure of earlier asynchronous work surfaces here: it is tied to the step
 * the device says failed, else to `step` when the caller knows it (strict mode waits after each
 * step), else to the wait itself. */
static int host_wait_step(baton_runtime *rt, int d, const char *where, int step, baton_error *err)
{
    rt_device *rd = &rt->dev[d];
    int64_t t0 = rt->trace ? now_ns() : 0;
    /* With work queued ahead, the event was recorded before it: wait for what precedes it. */
    int rc = rd->recorded ? 0 : rd->ops->record(rd->ctx, WAIT_SLOT, err);
    if (!rc) {
        rc = rd->ops->wait(rd->ctx, WAIT_SLOT, where, err);
        if (rc) {
            /* an asynchronous failure: name its step when the device knows it */
            int fs = rd->ops->failed_step ? rd->ops->failed_step(rd->ctx) : -1;
            if (fs < 0)
                fs = step;
            if (fs >= 0 && fs < rt->plan->n_steps)
                rc = step_fail(rt, fs, rc, err);
            else {
                char inner[BATON_ERROR_MAX], name[32];
                snprintf(inner, sizeof inner, "%s", err ? err->message : "");
                rc = err_set(err, rc, "%s, at the wait %s: %s",
                             baton_device_format(rt->plan->memory[d].device, name, sizeof name),
                             where, inner);
            }
        }
    }
    if (t0)
        trace_add(rt, where, "wait", d, t0, now_ns());
    rd->pending = rd->recorded && rd->queued;
    rd->recorded = rd->queued = 0;
    /* A GPU step run on the CPU (fallback) finished when it was issued: nothing was waited. */
    if (rd->gpu && rd->ops != &dev_cpu_ops)
        rt->stats.host_waits++;
    return rc;
}

static int host_wait(baton_runtime *rt, int d, const char *where, baton_error *err)
{
    return host_wait_step(rt, d, where, -1, err);
}

/* Transfers issued at the end of GPU segment s on device d: those into the next segment (a CPU
 * one) that come from d, and, after the last segment, the outputs that go back to the host. */
static int issue_outgoing(baton_runtime *rt, int s, int d, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int into = s + 1; /* the next segment, or the end of the run after the last one */
    if (into < plan->n_segments && plan->segments[into].device.kind != BATON_DEVICE_CPU)
        return 0;
    for (int x = rt->xfer_first[into]; x < rt->xfer_first[into + 1]; x++)
        if (rt->xfers[x].from == d) {
            int rc = issue_transfer(rt, x, err);
            if (rc)
                return rc;
        }
    return 0;
}

static int issue_incoming(baton_runtime *rt, int s, baton_error *err)
{
    for (int x = rt->xfer_first[s], rc; x < rt->xfer_first[s + 1]; x++)
        if ((rc = issue_transfer(rt, x, err)))
            return rc;
    return 0;
}

/* Graph mode: whether segment s may be captured. A delegate that says it cannot be captured
 * keeps its segment out of CUDA graphs (the test device replays any recorded call). */
static int segment_capturable(baton_runtime *rt, int s)
{
    const baton_plan *plan = rt->plan;
    const plan_segment *seg = &plan->segments[s];
    rt_device *rd = &rt->dev[plan_memory_index(plan, seg->device)];
    if (rt->graph_state[s] != 0)
        return rt->graph_state[s] > 0;
    if (!rd->ops->capture_begin)
        return 0;
    for (int i = seg->first_step; i <= seg->last_step && rd->ops != &dev_sim_ops; i++) {
        const dev_call *c = &rt->calls[i];
        if (c->delegate && !c->delegate->capturable) {
            rt->graph_state[s] = -1;
            if (!rt->note[0]) {
                snprintf(rt->note, sizeof rt->note,
                         "segment %d runs without a CUDA graph: delegate '%s' of step '%s' "
                         "cannot be captured",
                         s, plan->steps[i].target_name, plan->steps[i].name);
                if (!rt->opts.quiet)
                    fprintf(stderr, "baton: note: %s\n", rt->note);
            }
            return 0;
        }
    }
    return 1;
}

/* Captures segment s — its incoming transfers, its steps and its outgoing transfers — into graph
 * slot s. Returns 0 when captured, BATON_ENOTSUP when the segment cannot be captured (then it is
 * marked to run uncaptured and the note says why), or the failing step's error. */
static int capture_segment(baton_runtime *rt, int s, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    const plan_segment *seg = &plan->segments[s];
    int d = plan_memory_index(plan, seg->device);
    rt_device *rd = &rt->dev[d];
    rt->capturing = 1;
    int rc = rd->ops->capture_begin(rd->ctx, s, err);
    if (!rc && rt->ahead_ok[s])
        rc = rd->ops->gate_wait(rd->ctx, err); /* before the copies of the CPU's outputs */
    if (!rc)
        rc = issue_incoming(rt, s, err);
    for (int i = seg->first_step; !rc && i <= seg->last_step; i++) {
        rt->calls[i].ctx.capturing = 1;
        rc = issue_step(rt, i, err);
        rt->calls[i].ctx.capturing = 0;
    }
    if (!rc)
        rc = issue_outgoing(rt, s, d, err);
    rt->capturing = 0;
    int updated = 0;
    baton_error cerr = {0};
    int rc2 = rd->ops->capture_end(rd->ctx, s, &updated, &cerr);
    if (rc && rc != BATON_ENOTSUP)
        return rc; /* a failing step fails the run; the next run captures again */
    if (!rc && rc2 && rc2 != BATON_ENOTSUP) {
        if (err)
            *err = cerr;
        return rc2;
    }
    if (rc || rc2) {
        rt->graph_state[s] = -1;
        if (!rt->note[0]) {
            char name[32];
            snprintf(rt->note, sizeof rt->note,
                     "segment %d (%s, steps '%s'..'%s') runs without a CUDA graph: %.300s", s,
                     baton_device_format(seg->device, name, sizeof name),
                     plan->steps[seg->first_step].name, plan->steps[seg->last_step].name,
                     rc ? (err ? err->message : "") : cerr.message);
            if (!rt->opts.quiet)
                fprintf(stderr, "baton: note: %s\n", rt->note);
        }
        rd->ops->graph_reset(rd->ctx, s);
        return BATON_ENOTSUP;
    }
    rt->graph_state[s] = 1;
    rt->stats.captures++;
    if (updated)
        rt->stats.graph_updates++;
    return 0;
}

static int run_gpu_segment(baton_runtime *rt, int s, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    const plan_segment *seg = &plan->segments[s];
    int d = plan_memory_index(plan, seg->device), rc;
    rt_device *rd = &rt->dev[d];
    int strict = rt->opts.mode == BATON_SYNC_STRICT;

    if (rt->opts.mode == BATON_SYNC_GRAPH && segment_capturable(rt, s)) {
        if (rt->graph_state[s] == 0 || rt->recapture) {
            rc = capture_segment(rt, s, err);
            if (rc && rc != BATON_ENOTSUP)
                return rc;
        }
        if (rt->graph_state[s] == 1) {
            int64_t t0 = rt->timing || rt->trace ? now_ns() : 0;
            rc = rd->ops->graph_launch(rd->ctx, s, err);
            if (t0) {
                int64_t t1 = now_ns();
                rt->step_ns[seg->first_step] += t1 - t0;
                if (rt->trace)
                    trace_add(rt, "graph", "graph", d, t0, t1);
            }
            if (rc)
                return step_fail(rt, seg->first_step, rc, err);
            rd->gate_armed = rt->ahead_ok[s];
            rt->stats.graph_launches++;
            rt->stats.steps += seg->last_step - seg->first_step + 1;
            rt->stats.bytes_h2d += rt->seg_bytes[2 * s];
            rt->stats.bytes_d2h += rt->seg_bytes[2 * s + 1];
            rd->pending = 1;
            return 0;
        }
    }

    if (rt->ahead_ok[s]) {
        if ((rc = rd->ops->gate_wait(rd->ctx, err)))
            return step_fail(rt, seg->first_step, rc, err);
        rd->gate_armed = 1;
    }
    if ((rc = issue_incoming(rt, s, err)))
        return rc;
    for (int i = seg->first_step; i <= seg->last_step; i++) {
        if ((rc = issue_step(rt, i, err)))
            return rc;
        rt->stats.steps++;
        if (rd->ops != &dev_cpu_ops) /* the CPU fallback runs the call inline: no launch */
            rt->stats.kernel_launches++;
        rd->pending = 1;
        if (strict) {
            /* the copies to the host go before the last step's wait, so it covers them */
            if (i == seg->last_step && (rc = issue_outgoing(rt, s, d, err)))
                return rc;
            if ((rc = host_wait_step(rt, d, plan->steps[i].name, i, err)))
                return rc; /* host_wait_step named the step */
        }
    }
    if (strict)
        return 0;
    rd->pending = 1;
    return issue_outgoing(rt, s, d, err);
}

static int run_cpu_segment(baton_runtime *rt, int s, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    const plan_segment *seg = &plan->segments[s];
    int rc, prev = s > 0 ? plan_memory_index(plan, plan->segments[s - 1].device) : -1;
    int need[PLAN_MAX_DEVICES] = {0};
    if (prev > 0)
        need[prev] = 1;
    for (int x = rt->xfer_first[s]; x < rt->xfer_first[s + 1]; x++) {
        need[rt->xfers[x].from] = 1;
        if (rt->xfers[x].from != prev && (rc = issue_transfer(rt, x, err)))
            return rc;
    }
    for (int d = 1; d < rt->nd; d++)
        if (need[d] && rt->dev[d].pending &&
            (rc = host_wait(rt, d, plan->steps[seg->first_step].name, err)))
            return rc;
    for (int i = seg->first_step; i <= seg->last_step; i++) {
        if ((rc = issue_step(rt, i, err)))
            return rc;
        rt->stats.steps++;
    }
    return 0;
}

/* Queues GPU segment s (graph mode, ahead_ok) behind its device's gate, before the CPU segment
 * s - 1 runs. That segment's wait uses an event recorded first, so it does not wait for s. */
static int queue_ahead(baton_runtime *rt, int s, baton_error *err)
{
    int d = plan_memory_index(rt->plan, rt->plan->segments[s].device);
    rt_device *rd = &rt->dev[d];
    int rc = rd->ops->record(rd->ctx, WAIT_SLOT, err);
    if (rc)
        return rc;
    rd->recorded = 1;
    rt->ahead = s;
    if ((rc = run_gpu_segment(rt, s, err)))
        return rc;
    rd->queued = 1;
    rt->stats.queued_ahead++;
    return 0;
}

/* The CPU segment before s is done and its outputs are in host memory: let s start. */
static void open_gate(baton_runtime *rt, int s)
{
    int d = plan_memory_index(rt->plan, rt->plan->segments[s].device);
    rt_device *rd = &rt->dev[d];
    int64_t t0 = rt->trace ? now_ns() : 0;
    if (rd->recorded) { /* no wait used the event: s is simply pending */
        rd->recorded = 0;
        rd->pending = 1;
    }
    rd->ops->gate_open(rd->ctx);
    rd->gate_armed = 0;
    if (t0)
        trace_add(rt, "open gate", "gate", d, t0, now_ns());
}

/* After a failure: let every stream finish (or fail) what it has, so nothing still writes into
 * the arenas, and forget partial captures. The prepared plan stays usable. */
static void recover(baton_runtime *rt)
{
    for (int d = 0; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        if (rd->gate_armed) /* or the stream never drains; what runs behind it is discarded */
            rd->ops->gate_open(rd->ctx);
        rd->gate_armed = rd->recorded = rd->queued = 0;
        rd->ops->drain(rd->ctx);
        rd->pending = 0;
    }
    rt->ahead = -1;
    for (int i = 0; i < rt->plan->n_steps; i++)
        rt->calls[i].ctx.capturing = 0;
}

int baton_runtime_run(baton_runtime *rt, baton_error *err)
{
    err_clear(err);
    if (!rt)
        return err_set(err, BATON_EINVAL, "baton_runtime_run: no runtime");
    const baton_plan *plan = rt->plan;
    int rc = 0;
    rt->ahead = -1;
    for (int s = 0; s < plan->n_segments && !rc; s++) {
        if (plan->segments[s].device.kind == BATON_DEVICE_CPU) {
            rc = run_cpu_segment(rt, s, err);
            if (!rc && rt->ahead == s + 1)
                open_gate(rt, s + 1);
            continue;
        }
        if (s != rt->ahead)
            rc = run_gpu_segment(rt, s, err);
        if (!rc && s + 2 < plan->n_segments && rt->ahead_ok[s + 2])
            rc = queue_ahead(rt, s + 2, err);
    }
    if (!rc) {
        int last = plan->n_segments
                       ? plan_memory_index(plan, plan->segments[plan->n_segments - 1].device)
                       : 0;
        int end = plan->n_segments;
        for (int x = rt->xfer_first[end]; x < rt->xfer_first[end + 1] && !rc; x++)
            if (rt->xfers[x].from != last)
                rc = issue_transfer(rt, x, err);
        for (int d = 1; d < rt->nd && !rc; d++)
            if (rt->dev[d].pending)
                rc = host_wait(rt, d, "end of run", err);
    }
    rt->last_run = rc ? -1 : 1; /* whether outputs hold a result (get_output) */
    if (rc) {
        recover(rt);
        return rc;
    }
    rt->recapture = 0;
    rt->stats.runs++;
    err_clear(err); /* a segment that fell back to running uncaptured left its reason there */
    return 0;
}
