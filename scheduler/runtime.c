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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/runtime.h"

/* ---- prepare ------------------------------------------------------------------------------ */

/* Testing builds: the number of GPUs that DEV_TEST_CUDA_ALIAS folds a plan's cuda:N onto, or 0
 * when it is off. */
static int cuda_alias(void)
{
#ifdef BATON_TESTING
    const char *alias = getenv(DEV_TEST_CUDA_ALIAS);
    if (alias && strcmp(alias, "1") == 0)
        return baton_cuda_device_count();
#endif
    return 0;
}

/* The device a plan's device runs on: itself, unless the test alias folds it (CUDA only). */
static baton_device run_on(const baton_runtime *rt, baton_device dv)
{
    if (rt->alias_gpus > 0 && rt->backend == BATON_GPU_CUDA && dv.kind == BATON_DEVICE_CUDA)
        dv.index %= rt->alias_gpus;
    return dv;
}

/* A warning or note of baton_runtime_create, logged when it succeeds (flush_deferred_log): a
 * refused create says everything in its error, once. */
static void defer_log(baton_runtime *rt, baton_log_level level, const char *fmt, ...)
    CORE_PRINTF(3, 4);
static void defer_log(baton_runtime *rt, baton_log_level level, const char *fmt, ...)
{
    if (rt->opts.quiet || rt->n_deferred >= RT_MAX_DEFERRED)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->deferred[rt->n_deferred], ERRBUF_LEN, fmt, ap);
    va_end(ap);
    rt->deferred_level[rt->n_deferred++] = level;
}

static void flush_deferred_log(baton_runtime *rt)
{
    for (int i = 0; i < rt->n_deferred; i++)
        log_to(rt->plan->log, rt->deferred_level[i], "%s", rt->deferred[i]);
    rt->n_deferred = 0;
}

static int choose_backend(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int need = -1, first_step = -1; /* the highest cuda index the plan uses */
    for (int i = 0; i < plan->n_steps; i++) {
        const plan_step *st = &plan->steps[i];
        int nd;
        const baton_device *devs = step_devices(st, &nd);
        for (int g = 0; g < nd; g++) {
            baton_device dv = devs[g];
            if (dv.kind == BATON_DEVICE_CUDA && dv.index > need) {
                need = dv.index;
                first_step = i;
            }
        }
    }
    rt->backend = rt->opts.gpu;
    if (need < 0) {
        rt->backend = BATON_GPU_CPU;
        return 0;
    }
    if (rt->backend == BATON_GPU_SIM || rt->backend == BATON_GPU_CPU)
        return 0;
    int have = baton_cuda_device_count();
    if ((rt->alias_gpus = cuda_alias()) > 0)
        have = need + 1; /* run_on() folds the others onto those present */
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
                       "%s: step '%s' needs cuda:%d but %s; set baton_options.gpu = "
                       "BATON_GPU_CPU to run its steps on the CPU, or BATON_GPU_AUTO without "
                       "baton_options.fallback_is_error to fall back",
                       plan->source, plan->steps[first_step].name, need, why);
    defer_log(rt, BATON_LOG_WARNING,
              "%s: step '%s' needs cuda:%d but %s; running the GPU steps on the CPU "
              "(baton_options.fallback_is_error makes this an error)",
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

/* The caller's arena for device d (baton_options.arenas), or NULL. */
static const baton_arena *caller_arena(const baton_runtime *rt, int d)
{
    for (int i = 0; i < rt->opts.n_arenas; i++)
        if (device_eq(rt->opts.arenas[i].device, rt->plan->memory[d].device))
            return &rt->opts.arenas[i];
    return NULL;
}

/* baton_options.arenas and .streams name devices the plan uses, once each, with memory and
 * streams that can be used; checked before anything is opened. */
static int check_caller_resources(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    const baton_options *o = &rt->opts;
    char name[32];
    if (o->n_arenas < 0 || (o->n_arenas > 0 && !o->arenas) || o->n_streams < 0 ||
        (o->n_streams > 0 && !o->streams))
        return err_set(err, BATON_EINVAL,
                       "baton_runtime_create: options.arenas/n_arenas and streams/n_streams "
                       "must be an array and its length (NULL and 0 for none)");
    if ((o->n_arenas || o->n_streams) && rt->share)
        return err_set(err, BATON_EINVAL,
                       "baton_pool_create: options.arenas and options.streams belong to one "
                       "runtime; a pool's instances each need their own, so a pool allocates "
                       "them (leave both empty)");
    for (int i = 0; i < o->n_arenas; i++) {
        const baton_arena *a = &o->arenas[i];
        baton_device_format(a->device, name, sizeof name);
        int d = plan_memory_index(plan, a->device);
        if (d < 0)
            return err_set(err, BATON_EINVAL,
                           "baton_runtime_create: options.arenas[%d] is for %s, which plan '%s' "
                           "does not use (baton_plan_arena_info lists its devices)",
                           i, name, plan->name);
        for (int j = 0; j < i; j++)
            if (device_eq(o->arenas[j].device, a->device))
                return err_set(err, BATON_EINVAL,
                               "baton_runtime_create: options.arenas[%d] and [%d] are both for "
                               "%s; give one arena per device",
                               j, i, name);
        if (!a->data || ((uintptr_t)a->data & (BATON_ARENA_ALIGN - 1)))
            return err_set(err, BATON_EINVAL,
                           "baton_runtime_create: options.arenas[%d] (%s): data %p is %s; pass "
                           "memory aligned to BATON_ARENA_ALIGN (%d bytes), as cudaMalloc "
                           "and aligned_alloc(256, ...) give",
                           i, name, a->data, a->data ? "misaligned" : "NULL", BATON_ARENA_ALIGN);
        if (a->nbytes < plan->memory[d].arena_bytes)
            return err_set(err, BATON_EINVAL,
                           "baton_runtime_create: options.arenas[%d] (%s) has %zu bytes; plan "
                           "'%s' needs %zu there (baton_plan_arena_info)",
                           i, name, a->nbytes, plan->name, plan->memory[d].arena_bytes);
    }
    for (int i = 0; i < o->n_streams; i++) {
        const baton_stream *st = &o->streams[i];
        baton_device_format(st->device, name, sizeof name);
        if (st->device.kind != BATON_DEVICE_CUDA || plan_memory_index(plan, st->device) < 0)
            return err_set(err, BATON_EINVAL,
                           "baton_runtime_create: options.streams[%d] is for %s, which is not a "
                           "CUDA device plan '%s' uses",
                           i, name, plan->name);
        for (int j = 0; j < i; j++)
            if (device_eq(o->streams[j].device, st->device))
                return err_set(err, BATON_EINVAL,
                               "baton_runtime_create: options.streams[%d] and [%d] are both for "
                               "%s; give one stream per device",
                               j, i, name);
        /* 0, cudaStreamLegacy (1) and cudaStreamPerThread (2) are not streams of one's own */
        if ((uintptr_t)st->stream <= 2)
            return err_set(err, BATON_EINVAL,
                           "baton_runtime_create: options.streams[%d] (%s) is the default stream "
                           "(%p); pass a stream made with cudaStreamCreate(WithFlags): the "
                           "default stream cannot be captured into a graph",
                           i, name, st->stream);
#ifdef BATON_CUDA
        int on_cuda = ops_for(rt, st->device) == &dev_cuda_ops;
#else
        int on_cuda = 0;
#endif
        /* On the CPU (the fallback, or asked for) no step uses a stream: the caller's is
         * ignored, as a program written for a GPU expects on a machine without one. */
        if (!on_cuda && rt->backend == BATON_GPU_CPU) {
            defer_log(rt, BATON_LOG_NOTE,
                      "baton_runtime_create: options.streams[%d] (%s) is not used: plan '%s' "
                      "runs its GPU steps on the CPU here",
                      i, name, plan->name);
            continue;
        }
        if (!on_cuda)
            return err_set(err, BATON_EINVAL,
                           "baton_runtime_create: options.streams[%d] is for %s, which runs on "
                           "%s here, not on CUDA: a caller's stream needs the CUDA backend "
                           "(leave streams empty)",
                           i, name, rt->backend == BATON_GPU_SIM ? "the test device" : "the CPU");
    }
    return 0;
}

static int open_devices(baton_runtime *rt, int fault_dev, dev_fault fault, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    rt->nd = plan->n_devices;
    int rc = check_caller_resources(rt, err);
    if (rc)
        return rc;
    for (int d = 0; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        baton_device dv = plan->memory[d].device;
        rd->gpu = dv.kind == BATON_DEVICE_CUDA;
        rd->ops = ops_for(rt, dv);
        /* events: WAIT_SLOT, and one per segment that another GPU waits for (SEG_EVENT) */
        if ((rc = rd->ops->open(run_on(rt, dv), &rt->opts, plan->n_segments,
                                SEG_EVENT(plan->n_segments), &rd->ctx, err)))
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
        const baton_arena *mine = caller_arena(rt, d);
        if (d > 0) {
            rd->arena_ops = rd->ops;
            rd->arena_ctx = rd->ctx;
        }
        if (mine) {
            /* the caller's: checked for its kind of memory, never freed */
            if (rd->arena_ops->mem_check &&
                (rc = rd->arena_ops->mem_check(rd->arena_ctx, mine->data, mine->nbytes, d == 0,
                                               err))) {
                char name[32], inner[BATON_ERROR_MAX];
                snprintf(inner, sizeof inner, "%s", err ? err->message : "");
                return err_set(err, rc, "baton_runtime_create: the caller's arena for %s: %s",
                               baton_device_format(plan->memory[d].device, name, sizeof name),
                               inner);
            }
            rd->arena = mine->data;
            rd->consts = rd->arena;
            rd->priv = rd->arena + cbytes;
            continue;
        }
        rd->own_arena = 1;
        if (d == 0) {
            rd->arena = rd->arena_ops->host_alloc(rd->arena_ctx, bytes ? bytes : 256, err);
        } else {
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
    rt->descs = calloc((size_t)nb + 1, sizeof *rt->descs);
    rt->names = calloc((size_t)nb + 1, sizeof *rt->names);
    rt->sigs = calloc((size_t)n + 1, sizeof *rt->sigs);
    rt->states = calloc((size_t)n + 1, sizeof *rt->states);
    rt->impls = calloc((size_t)n + 1, sizeof *rt->impls);
    rt->step_ns = calloc((size_t)n + 1, sizeof *rt->step_ns);
    baton_device *devs = calloc((size_t)n + 1, sizeof *devs);
    baton_target_kind *kinds = calloc((size_t)n + 1, sizeof *kinds);
    int rc = 0;
    if (!rt->step_dev || !rt->calls || !rt->errbufs || !rt->bufs || !rt->descs || !rt->names ||
        !rt->sigs || !rt->states || !rt->impls || !rt->step_ns || !devs || !kinds) {
        rc = err_set(err, BATON_ENOMEM, "prepare: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        devs[i] = plan->steps[i].device;
        kinds[i] = plan->steps[i].kind;
    }
    int use_pdl = rt->opts.mode != BATON_SYNC_STRICT && !rt->opts.disable_pdl;
    void **b = rt->bufs;
    baton_tensor_desc *dd = rt->descs;
    const char **nn = rt->names;
    for (int i = 0; i < n; i++) {
        const plan_step *s = &plan->steps[i];
        int d = plan_memory_index(plan, s->device);
        rt_device *rd = &rt->dev[d];
        if (s->kind == BATON_TARGET_COLLECTIVE) {
            /* no call: the buffers, on each member's device, for its dev_coll */
            rt->step_dev[i] = d;
            rt->calls[i].buffers = b;
            for (int k = 0; k < s->n_inputs; k++)
                *b++ = slot_addr(rt, plan_memory_index(plan, step_arg_device(s, k)), s->inputs[k]);
            for (int k = 0; k < s->n_outputs; k++)
                *b++ = slot_addr(rt, plan_memory_index(plan, step_arg_device(s, k)), s->outputs[k]);
            continue;
        }
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
        baton_tensor_desc *step_descs = dd;
        const char **step_names = nn;
        for (int k = 0; k < s->n_inputs; k++) {
            *dd++ = plan->tensors[s->inputs[k]].desc;
            *nn++ = plan->tensors[s->inputs[k]].name;
        }
        for (int k = 0; k < s->n_outputs; k++) {
            *dd++ = plan->tensors[s->outputs[k]].desc;
            *nn++ = plan->tensors[s->outputs[k]].name;
        }
        rt->sigs[i] = (baton_sig_args){.struct_size = sizeof(baton_sig_args),
                                       .n_inputs = s->n_inputs,
                                       .inputs = step_descs,
                                       .n_outputs = s->n_outputs,
                                       .outputs = step_descs + s->n_inputs,
                                       .n_attrs = s->n_attrs,
                                       .attrs = s->attrs,
                                       .input_names = step_names,
                                       .output_names = step_names + s->n_inputs};
        c->opaque = s->opaque;
        c->opaque_len = s->opaque_len;
        c->ctx = (baton_exec_ctx){
            .struct_size = sizeof(baton_exec_ctx),
            .device = run_on(rt, s->device), /* kernels launch on the GPU it runs on */
            .stream = rd->ops->stream(rd->ctx),
            .next_device = s->next_device,
            .next_kind = s->next_kind,
            .capturing = 0,
            .pdl = 0,
            .step_name = s->name,
            .step_index = i,
            .errbuf = rt->errbufs + (size_t)i * ERRBUF_LEN,
            .errbuf_len = ERRBUF_LEN,
            .sig = &rt->sigs[i],
            .user = s->target->user,
            .autotune = !rt->opts.no_autotune,
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
        const baton_sig_args sig = rt->sigs[i];
        int is_const[PLAN_MAX_STEP_ARGS] = {0};
        for (int k = 0; k < s->n_inputs; k++)
            is_const[k] = plan->tensors[s->inputs[k]].role == BATON_ROLE_CONSTANT;
        baton_delegate_init info = {
            .struct_size = sizeof(baton_delegate_init),
            .step_index = i,
            .step_name = s->name,
            .device = c->ctx.device,
            .stream = c->ctx.stream,
            .sig = &sig,
            .n_steps = n,
            .step_devices = devs,
            .step_kinds = kinds,
            .input_constant = is_const,
            .input_data = c->buffers,
            .user = s->target->user,
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

/* Prepare-time tuning: each kernel step on a device that tunes (CUDA) whose kernel has a tuning
 * hook times its variants now, on its own buffers (nothing they hold matters yet), so that its
 * calls, captured or not, launch the fastest (baton_exec_ctx.autotune). */
static int tune_calls(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    if (rt->opts.no_autotune)
        return 0;
    for (int i = 0; i < plan->n_steps; i++) {
        const plan_step *s = &plan->steps[i];
        rt_device *rd = &rt->dev[rt->step_dev[i]];
        if (s->kind != BATON_TARGET_KERNEL || !s->cuda_tune || !rd->ops->tune)
            continue;
        if (!rt->tuning && !(rt->tuning = calloc((size_t)plan->n_steps, ERRBUF_LEN)))
            return err_set(err, BATON_ENOMEM, "prepare: out of memory");
        baton_error derr = {0};
        int rc = rd->ops->tune(rd->ctx, &rt->calls[i], s->cuda_tune,
                               rt->tuning + (size_t)i * ERRBUF_LEN, ERRBUF_LEN, &derr);
        if (rc) {
            char name[32];
            return plan_error(err, rc, plan, s->pos, "step '%s': tuning '%s' on %s: %s", s->name,
                              s->target_name, baton_device_format(s->device, name, sizeof name),
                              derr.message);
        }
    }
    return 0;
}

static int build_transfers(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int rc;
    rt->xfers = calloc((size_t)plan->n_transfers + 1, sizeof *rt->xfers);
    rt->xfer_first = calloc((size_t)plan->n_segments + 2, sizeof *rt->xfer_first);
    rt->seg_signal = calloc((size_t)plan->n_segments + 1, sizeof *rt->seg_signal);
    if (rt->xfer_first)
        for (int s = 0, x = 0; s <= plan->n_segments + 1; s++) {
            while (x < plan->n_transfers && plan->transfers[x].segment < s)
                x++;
            rt->xfer_first[s] = x;
        }
    if (!rt->xfers || !rt->xfer_first || !rt->seg_signal)
        return err_set(err, BATON_ENOMEM, "prepare: out of memory");
    for (int i = 0; i < plan->n_transfers; i++) {
        const plan_transfer *x = &plan->transfers[i];
        rt_transfer *r = &rt->xfers[i];
        int from = plan_memory_index(plan, x->from), to = plan_memory_index(plan, x->to);
        char a[32], b[32];
        r->src = slot_addr(rt, from, x->tensor);
        r->dst = slot_addr(rt, to, x->tensor);
        r->bytes = plan->tensors[x->tensor].nbytes;
        r->from = from;
        r->kind = to == 0 ? DEV_COPY_D2H : from == 0 ? DEV_COPY_H2D : DEV_COPY_D2D;
        r->wait_seg = -1;
        if (r->kind == DEV_COPY_D2D) {
            /* GPU to GPU: the reader copies on its stream after waiting, on the GPU, for the
             * event the writer records after the segment that wrote the tensor */
            const rt_device *rf = &rt->dev[from], *rtd = &rt->dev[to];
            if (!rtd->ops->stream_wait || rf->ops != rtd->ops)
                return err_set(err, BATON_ENOTSUP,
                               "%s: tensor '%s' moves from %s to %s, which this backend (%s) "
                               "cannot order without the host; place both steps on one GPU",
                               plan->source, plan->tensors[x->tensor].name,
                               baton_device_format(x->from, a, sizeof a),
                               baton_device_format(x->to, b, sizeof b), rtd->ops->name);
            r->wait_seg = plan->steps[plan->tensors[x->tensor].producer].segment;
            rt->seg_signal[r->wait_seg] |= 1u << from;
            if (rtd->ops->peer_enable && (rc = rtd->ops->peer_enable(rtd->ctx, rf->ctx, err))) {
                char inner[BATON_ERROR_MAX];
                snprintf(inner, sizeof inner, "%s", err ? err->message : "");
                return err_set(err, rc, "%s: peer access %s -> %s: %s", plan->source,
                               baton_device_format(x->to, a, sizeof a),
                               baton_device_format(x->from, b, sizeof b), inner);
            }
        }
        r->issuer = r->kind == DEV_COPY_D2H ? from : to;
        /* On the CPU fallback both arenas are host memory: a memcpy, not a device transfer. */
        r->host_copy = rt->dev[from].ops == &dev_cpu_ops && rt->dev[to].ops == &dev_cpu_ops;
        r->graph_seg = -1;
        snprintf(r->what, sizeof r->what, "transfer %s %s -> %s", plan->tensors[x->tensor].name,
                 baton_device_format(x->from, a, sizeof a),
                 baton_device_format(x->to, b, sizeof b));
    }
    return 0;
}

/* Each collective step's dev_coll: its members and what they send and receive (the addresses are
 * read again from its call's buffers before each run, which baton_runtime_bind may rewrite). */
static int build_collectives(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    rt->colls = calloc((size_t)plan->n_segments + 1, sizeof *rt->colls);
    if (!rt->colls)
        return err_set(err, BATON_ENOMEM, "prepare: out of memory");
    for (int s = 0; s < plan->n_segments; s++) {
        if (!plan->segments[s].collective)
            continue;
        int i = plan->segments[s].first_step;
        const plan_step *st = &plan->steps[i];
        dev_coll *c = &rt->colls[s];
        c->op = st->coll == PLAN_COLL_ALL_REDUCE ? DEV_COLL_ALL_REDUCE : DEV_COLL_ALL_GATHER;
        c->dtype = plan->tensors[st->inputs[0]].desc.dtype;
        c->count = plan->tensors[st->inputs[0]].nbytes / baton_dtype_size(c->dtype);
        c->n = st->n_group;
        c->what = st->name;
        const dev_ops *ops = rt->dev[plan_memory_index(plan, st->group[0])].ops;
        for (int k = 0; k < c->n; k++)
            c->group[k] = rt->dev[plan_memory_index(plan, st->group[k])].ctx;
        char name[32];
        if (!ops->coll_prepare || !ops->coll_run)
            return plan_error(err, BATON_ENOTSUP, plan, st->pos,
                              "step '%s': %s on %s: this backend (%s) has no collectives; run the "
                              "plan with baton_options.gpu = BATON_GPU_CUDA (NCCL), BATON_GPU_SIM "
                              "or BATON_GPU_CPU",
                              st->name, st->target_name,
                              baton_device_format(st->device, name, sizeof name), ops->name);
        int rc = ops->coll_prepare(c, err);
        if (rc) {
            char inner[BATON_ERROR_MAX];
            snprintf(inner, sizeof inner, "%s", err ? err->message : "");
            return plan_error(err, rc, plan, st->pos, "step '%s' (%s): %s", st->name,
                              st->target_name, inner);
        }
    }
    return 0;
}

/* What each GPU segment's graph copies per launch: its incoming and outgoing transfers, less
 * those that a bound buffer makes needless. Counted into baton_run_stats on each launch. */
static void count_graph_bytes(baton_runtime *rt)
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
            if (src >= 0 && plan_memory_index(plan, plan->segments[src].device) == r->from &&
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
    return plan_memory_index(rt->plan,
                             step_arg_device(st, k < st->n_inputs ? k : k - st->n_inputs));
}

/* Every place that holds the address of an input or output tensor, so that binding a caller's
 * buffer rewrites them without a search (baton_runtime_bind). */

static int build_sites(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int nt = plan->n_tensors, n = 0;
    rt->bind_dev = malloc(((size_t)nt + 1) * sizeof *rt->bind_dev);
    rt->bind_data = calloc((size_t)nt + 1, sizeof *rt->bind_data);
    rt->site_first = calloc((size_t)nt + 2, sizeof *rt->site_first);
    if (!rt->bind_dev || !rt->bind_data || !rt->site_first)
        return err_set(err, BATON_ENOMEM, "prepare: out of memory");
    for (int t = 0; t < nt; t++)
        rt->bind_dev[t] = -1;
#define BINDABLE(t)                                                                                \
    (plan->tensors[t].role == BATON_ROLE_INPUT || plan->tensors[t].role == BATON_ROLE_OUTPUT)
    /* count, then fill in tensor order */
    for (int pass = 0; pass < 2; pass++) {
        int *fill = pass ? calloc((size_t)nt + 1, sizeof *fill) : NULL;
        if (pass && !fill)
            return err_set(err, BATON_ENOMEM, "prepare: out of memory");
        for (int i = 0, pos = 0; i < plan->n_steps; i++) {
            const plan_step *st = &plan->steps[i];
            for (int k = 0; k < st->n_inputs + st->n_outputs; k++, pos++) {
                int t = k < st->n_inputs ? st->inputs[k] : st->outputs[k - st->n_inputs];
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
                (rt_site){t, plan_memory_index(plan, plan->transfers[x].to), -1, -1, x, 0};
        }
        if (!pass) {
            for (int t = 0; t < nt; t++)
                rt->site_first[t + 1] += rt->site_first[t];
            n = rt->site_first[nt];
            rt->sites = calloc((size_t)n + 1, sizeof *rt->sites);
            if (!rt->sites)
                return err_set(err, BATON_ENOMEM, "prepare: out of memory");
        }
        free(fill);
    }
#undef BINDABLE
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
    if (rt->opts.mode != BATON_SYNC_GRAPH || rt->opts.disable_queue_ahead > 0)
        return 0;
    for (int s = 2; s < plan->n_segments; s++) {
        const plan_segment *g = &plan->segments[s], *c = &plan->segments[s - 1],
                           *p = &plan->segments[s - 2];
        if (g->device.kind == BATON_DEVICE_CPU || c->device.kind != BATON_DEVICE_CPU ||
            p->device.kind == BATON_DEVICE_CPU || g->collective || p->collective)
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
    if (share) { /* an instance runs where its first one does */
        rt->backend = share->backend;
        rt->alias_gpus = share->alias_gpus;
    } else
        rc = choose_backend(rt, err);
    if (!rc)
        rc = open_devices(rt, fault_dev, fault, err);
    if (!rc)
        rc = load_constants(rt, err);
    if (!rc)
        rc = build_calls(rt, err);
    if (!rc)
        rc = tune_calls(rt, err);
    if (!rc)
        rc = build_transfers(rt, err);
    if (!rc)
        rc = build_collectives(rt, err);
    if (!rc) {
        rt->graph_state = calloc((size_t)plan->n_segments + 1, sizeof *rt->graph_state);
        rt->seg_bytes = calloc(2 * (size_t)plan->n_segments + 2, sizeof *rt->seg_bytes);
        if (!rt->graph_state || !rt->seg_bytes)
            rc = err_set(err, BATON_ENOMEM, "prepare: out of memory");
    }
    if (!rc)
        count_graph_bytes(rt);
    if (!rc)
        rc = build_sites(rt, err);
    if (!rc)
        rc = plan_queue_ahead(rt, err);
    if (rc) {
        baton_runtime_destroy(rt);
        return rc;
    }
    flush_deferred_log(rt);
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
    trace_end(rt); /* detaches the devices' timelines while they are open */
    for (int d = 0; d < rt->nd; d++)
        if (rt->dev[d].ctx && rt->dev[d].ops->drain)
            rt->dev[d].ops->drain(rt->dev[d].ctx);
    if (rt->states && rt->impls)
        for (int i = 0; i < rt->plan->n_steps; i++)
            if (rt->states[i] && rt->impls[i] && rt->impls[i]->delegate &&
                rt->impls[i]->delegate->destroy)
                rt->impls[i]->delegate->destroy(rt->states[i]);
    if (rt->colls) /* after the drains: no member still runs a collective */
        for (int s = 0; s < rt->plan->n_segments; s++)
            if (rt->colls[s].impl) {
                int d = plan_memory_index(rt->plan, rt->plan->segments[s].device);
                if (rt->dev[d].ops->coll_release)
                    rt->dev[d].ops->coll_release(&rt->colls[s]);
            }
    free(rt->colls);
    /* The CPU arena may come from a GPU's pinned allocator: free it before closing that GPU. */
    for (int d = 0; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        if (!rd->arena || !rd->own_arena)
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
    free(rt->tuning);
    free(rt->bufs);
    free(rt->descs);
    free(rt->names);
    free(rt->sigs);
    free(rt->states);
    free(rt->impls);
    free(rt->step_ns);
    free(rt->xfers);
    free(rt->seg_signal);
    free(rt->graph_state);
    free(rt->seg_bytes);
    free(rt->xfer_first);
    free(rt->ahead_ok);
    free(rt->bind_dev);
    free(rt->bind_data);
    free(rt->sites);
    free(rt->site_first);
    baton_plan_free((baton_plan *)rt->plan); /* drops the runtime's reference */
    free(rt);
}

/* ---- inputs and outputs ------------------------------------------------------------------- */

/* An unknown name given to set_input (want_input) or get_output: the closest name of the right
 * role ("did you mean", as the CLI says) and the names there are. */
static int no_such_tensor(const baton_plan *plan, const char *name, int want_input,
                          baton_error *err)
{
    plan_suggest sg;
    plan_suggest_init(&sg, name);
    char list[320] = "";
    size_t len = 0;
    int listed = 0;
    for (int i = 0; i < plan->n_tensors; i++) {
        const plan_tensor *c = &plan->tensors[i];
        if (c->role != BATON_ROLE_INPUT && (want_input || c->role != BATON_ROLE_OUTPUT))
            continue;
        plan_suggest_try(&sg, c->name);
        if (len + strlen(c->name) + 8 < sizeof list) {
            len += (size_t)snprintf(list + len, sizeof list - len, "%s'%s'", listed ? ", " : "",
                                    c->name);
            listed++;
        } else if (len + 6 < sizeof list && list[len - 1] != '.') {
            len += (size_t)snprintf(list + len, sizeof list - len, ", ...");
        }
    }
    const char *near = plan_suggest_best(&sg);
    char mean[128] = "";
    if (near)
        snprintf(mean, sizeof mean, " (did you mean '%.64s'?)", near);
    return err_set(err, BATON_ENOENT, "%s: %s: plan '%s' has no tensor named '%s'%s; its %s: %s",
                   want_input ? "baton_runtime_set_input" : "baton_runtime_get_output",
                   plan->source, plan->name, name, mean,
                   want_input ? "inputs" : "outputs and inputs", listed ? list : "none");
}

static int host_tensor(baton_runtime *rt, const char *name, size_t nbytes, int want_input,
                       void **addr, baton_error *err)
{
    if (!rt || !name)
        return err_set(err, BATON_EINVAL, "a runtime and a tensor name are required");
    const baton_plan *plan = rt->plan;
    int t = baton_plan_tensor_index(plan, name);
    if (t < 0)
        return no_such_tensor(plan, name, want_input, err);
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
    *addr = rt->bind_dev[t] == 0 ? rt->bind_data[t] : slot_addr(rt, 0, t);
    if (!*addr && rt->bind_dev[t] < 0)
        return err_set(err, BATON_ESTATE, "%s: tensor '%s' has no host copy", plan->source, name);
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
        return err_set(err, rc, "%s: tensor '%s' (bound on the GPU): %s", rt->plan->source, name,
                       inner);
    }
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
    int t = baton_plan_tensor_index(rt->plan, name);
    if (rt->bind_dev[t] > 0)
        return bound_copy(rt, name, rt->bind_data[t], data, nbytes, 1, err);
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
    int t = baton_plan_tensor_index(rt->plan, name);
    if (rt->bind_dev[t] > 0)
        return bound_copy(rt, name, data, rt->bind_data[t], nbytes, 0, err);
    if (nbytes)
        memcpy(data, src, nbytes);
    return 0;
}

/* ---- caller-owned buffers ----------------------------------------------------------------- */

/* Points a captured graph's op at its new addresses, or, when the device cannot patch it, marks
 * the segment for capture on the next run (which updates the executable graph in place). */
static void rebind_graph(baton_runtime *rt, int seg, int tag, const dev_call *c,
                         const rt_transfer *r)
{
    if (seg < 0 || rt->graph_state[seg] != 1)
        return; /* not captured (yet): the capture takes the addresses as they are then */
    const baton_plan *plan = rt->plan;
    rt_device *rd = &rt->dev[plan_memory_index(plan, plan->segments[seg].device)];
    baton_error perr = {0};
    int rc = BATON_ENOTSUP;
    if (rd->ops->graph_rebind)
        rc = c ? rd->ops->graph_rebind(rd->ctx, seg, tag, c, NULL, NULL, 0, DEV_COPY_H2D, &perr)
               : rd->ops->graph_rebind(rd->ctx, seg, tag, NULL, r->dst, r->src, r->bytes, r->kind,
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
            if (g >= 0 && g < plan->n_segments && rt->graph_state[g] == 1)
                rt->graph_state[g] = 0;
        if (r->graph_seg >= 0 && rt->graph_state[r->graph_seg] == 1)
            rt->graph_state[r->graph_seg] = 0;
    }
    if (changed)
        count_graph_bytes(rt);
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
    return err_set(err, BATON_EINVAL, "baton_runtime_bind: %s: tensor '%s': %s", plan->source,
                   tname, why);
}

int baton_runtime_bind(baton_runtime *rt, int tensor, const baton_buffer *buf, baton_error *err)
{
    err_clear(err);
    if (!rt)
        return err_set(err, BATON_EINVAL, "baton_runtime_bind: no runtime");
    const baton_plan *plan = rt->plan;
    if (tensor < 0 || tensor >= plan->n_tensors)
        return err_set(err, BATON_EINVAL,
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
    if (!buf) { /* back to the runtime's own memory */
        if (old >= 0) {
            set_sites(rt, tensor, old, slot_addr(rt, old, tensor));
            set_skips(rt, tensor, old, 0);
        }
        rt->bind_dev[tensor] = -1;
        rt->bind_data[tensor] = NULL;
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
    int d = plan_memory_index(plan, buf->device);
    if (d < 0 || plan->memory[d].offset[tensor] < 0)
        return bind_refuse(err, plan, pt->name, "does not live on %s; bind it on %s", dname, have);
    if (buf->nbytes != pt->nbytes || buf->dtype != pt->desc.dtype) {
        char want[96];
        desc_format(want, sizeof want, &pt->desc);
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
    if (d > 0 && rd->ops == &dev_cpu_ops)
        return bind_refuse(err, plan, pt->name,
                           "%s runs on the CPU here (the fallback: no GPU), so there is no device "
                           "memory to bind; bind a host buffer (device cpu) instead",
                           dname);
    if (d > 0 && pt->role == BATON_ROLE_INPUT && read_elsewhere(rt, tensor, d))
        return bind_refuse(err, plan, pt->name,
                           "is read on more devices than %s (it lives on %s); bind it on the host "
                           "(device cpu), which feeds them all",
                           dname, have);
    if (rd->arena_ops->mem_check) {
        baton_error merr = {0};
        int rc = rd->arena_ops->mem_check(rd->arena_ctx, buf->data, buf->nbytes, d == 0, &merr);
        if (rc)
            return bind_refuse(err, plan, pt->name, "%s", merr.message);
    }
    if (old >= 0 && old != d) {
        set_sites(rt, tensor, old, slot_addr(rt, old, tensor));
        set_skips(rt, tensor, old, 0);
    }
    set_sites(rt, tensor, d, buf->data);
    set_skips(rt, tensor, d, 1);
    rt->bind_dev[tensor] = d;
    rt->bind_data[tensor] = buf->data;
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
    if (rt->capturing && rd->ops->capture_tag)
        rd->ops->capture_tag(rd->ctx, i);
    int64_t t0 = rt->timing || rt->trace ? now_ns() : 0;
    int rc = rd->ops->call(rd->ctx, c, err);
    if (t0) {
        int64_t t1 = now_ns();
        rt->step_ns[i] += t1 - t0;
        if (rt->trace)
            trace_add(rt, rt->plan->steps[i].name, "step", rt->step_dev[i], i, 0, t0, t1);
    }
    if (rc)
        return step_fail(rt, i, rc, err);
    return 0;
}

static int issue_transfer(baton_runtime *rt, int x, baton_error *err)
{
    rt_transfer *r = &rt->xfers[x];
    rt_device *rd = &rt->dev[r->issuer];
    if (r->skip)
        return 0;
    if (rt->capturing) {
        r->graph_seg = rt->capture_seg;
        if (rd->ops->capture_tag)
            rd->ops->capture_tag(rd->ctx, rt->plan->n_steps + x);
    }
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
        trace_add(rt, r->what, "transfer", r->issuer, -1, (int64_t)r->bytes, t0, now_ns());
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
        trace_add(rt, where, "wait", d, step, 0, t0, now_ns());
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
                    log_to(rt->plan->log, BATON_LOG_NOTE, "%s", rt->note);
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
    rt->capture_seg = s;
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
                log_to(rt->plan->log, BATON_LOG_NOTE, "%s", rt->note);
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

static int issue_gpu_segment(baton_runtime *rt, int s, baton_error *err)
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
                    trace_add(rt, "graph", "graph", d, seg->first_step, 0, t0, t1);
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

/* Before segment s reads what another GPU wrote: its copies wait, on the reader's stream, for the
 * event the writer recorded after the writing segment. Never inside a capture: the wait stays
 * on the stream, before the graph's launch. */
static int cross_waits(baton_runtime *rt, int s, baton_error *err)
{
    for (int x = rt->xfer_first[s]; x < rt->xfer_first[s + 1] && !rt->no_cross_wait; x++) {
        const rt_transfer *r = &rt->xfers[x];
        if (r->wait_seg < 0 || r->skip)
            continue;
        rt_device *rd = &rt->dev[r->issuer];
        int rc = rd->ops->stream_wait(rd->ctx, rt->dev[r->from].ctx, SEG_EVENT(r->wait_seg), err);
        if (rc) {
            char inner[BATON_ERROR_MAX];
            snprintf(inner, sizeof inner, "%s", err ? err->message : "");
            return err_set(err, rc, "%s: waiting for the writer: %s", r->what, inner);
        }
    }
    return 0;
}

/* After segment s: the events other GPUs' copies of its outputs wait for. */
static int signal_segment(baton_runtime *rt, int s, baton_error *err)
{
    for (uint32_t m = rt->seg_signal[s]; m; m &= m - 1) {
        rt_device *rd = &rt->dev[__builtin_ctz(m)];
        int rc = rd->ops->record(rd->ctx, SEG_EVENT(s), err);
        if (rc)
            return rc;
    }
    return 0;
}

static int run_gpu_segment(baton_runtime *rt, int s, baton_error *err)
{
    int rc = cross_waits(rt, s, err);
    if (!rc)
        rc = issue_gpu_segment(rt, s, err);
    if (!rc)
        rc = signal_segment(rt, s, err);
    return rc;
}

/* A collective step: its members' incoming copies, then the collective on every member's
 * stream. It is never captured: NCCL's calls over several devices are issued as one group. */
static int run_collective(baton_runtime *rt, int s, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int i = plan->segments[s].first_step, rc;
    const plan_step *st = &plan->steps[i];
    if ((rc = cross_waits(rt, s, err)) || (rc = issue_incoming(rt, s, err)))
        return rc;
    dev_coll *c = &rt->colls[s];
    void **b = rt->calls[i].buffers; /* baton_runtime_bind may have moved them */
    for (int k = 0; k < c->n; k++) {
        c->send[k] = b[k];
        c->recv[k] = b[st->n_inputs + k];
    }
    rt_device *r0 = &rt->dev[rt->step_dev[i]];
    int64_t t0 = rt->timing || rt->trace ? now_ns() : 0;
    rc = r0->ops->coll_run(c, err);
    if (t0) {
        int64_t t1 = now_ns();
        rt->step_ns[i] += t1 - t0;
        if (rt->trace)
            trace_add(rt, st->name, "step", rt->step_dev[i], i, 0, t0, t1);
    }
    if (rc)
        return step_fail(rt, i, rc, err);
    rt->stats.steps++;
    if (r0->ops != &dev_cpu_ops)
        rt->stats.kernel_launches += c->n;
    for (int k = 0; k < c->n; k++) { /* every member's call is issued: waiting is safe */
        int d = plan_memory_index(plan, st->group[k]);
        rt->dev[d].pending = 1;
        if ((rc = issue_outgoing(rt, s, d, err)))
            return rc;
        if (rt->opts.mode == BATON_SYNC_STRICT && (rc = host_wait_step(rt, d, st->name, i, err)))
            return rc;
    }
    return signal_segment(rt, s, err);
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
        trace_add(rt, "open gate", "gate", d, -1, 0, t0, now_ns());
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
    int64_t run_t0 = rt->trace ? now_ns() : 0;
    for (int s = 0; s < plan->n_segments && !rc; s++) {
        if (plan->segments[s].device.kind == BATON_DEVICE_CPU) {
            if (rt->gpu_only)
                continue;
            rc = run_cpu_segment(rt, s, err);
            if (!rc && rt->ahead == s + 1)
                open_gate(rt, s + 1);
            continue;
        }
        if (plan->segments[s].collective) {
            rc = run_collective(rt, s, err);
            continue;
        }
        if (s != rt->ahead)
            rc = run_gpu_segment(rt, s, err);
        if (!rc && s + 2 < plan->n_segments && rt->ahead_ok[s + 2])
            rc = queue_ahead(rt, s + 2, err);
    }
    if (!rc) {
        /* the outputs of the devices the last segment ran on went home at its end */
        int end = plan->n_segments;
        for (int x = rt->xfer_first[end]; x < rt->xfer_first[end + 1] && !rc; x++)
            if (!end ||
                !plan_segment_runs_on(plan, end - 1, plan->memory[rt->xfers[x].from].device))
                rc = issue_transfer(rt, x, err);
        for (int d = 1; d < rt->nd && !rc; d++)
            if (rt->dev[d].pending)
                rc = host_wait(rt, d, "end of run", err);
    }
    if (run_t0)
        trace_add(rt, rc ? "run (failed)" : "run", "run", TRACE_RUN_LANE, -1, 0, run_t0, now_ns());
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
