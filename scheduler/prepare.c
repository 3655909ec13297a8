/* prepare.c: prepares an analysed plan for running (baton_runtime_create) and frees it.
 *
 * Prepare does everything that allocates: arenas from the memory plan, constants, one device
 * context (stream) per device, delegate states, and one prebuilt call per step, so that a run
 * (run.c) only walks the segments and binding a caller's buffer (bind.c) only rewrites the
 * addresses prepare recorded. */
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

/* The device a plan's device runs on: itself, unless the test alias or one process per GPU folds
 * it onto the devices present (CUDA only: rank R of a world runs cuda:R on device R % count). */
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
        baton__log_to(rt->plan->log, rt->deferred_level[i], "%s", rt->deferred[i]);
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
    if (rt_ranks(rt)) {
        /* one process per GPU: this rank needs its own GPU only, which CUDA device R modulo the
         * ones it sees stands for */
        if (need >= rt->opts.world)
            return baton__err_set(
                err, BATON_EINVAL,
                "%s: step '%s' is placed on cuda:%d, but options.world is %d: a world of N ranks "
                "runs a plan over cuda:0 .. cuda:N-1, one GPU per rank",
                plan->source, plan->steps[first_step].name, need, rt->opts.world);
        if (rt->backend == BATON_GPU_SIM)
            return 0;
        if (rt->backend == BATON_GPU_CPU || (rt->alias_gpus = baton_cuda_device_count()) < 1)
            return baton__err_set(err, BATON_ENODEV,
                                  "%s: rank %d of %d runs on a GPU: %s; run it with "
                                  "BATON_GPU_CUDA on a machine with one, or BATON_GPU_SIM",
                                  plan->source, rt->opts.rank, rt->opts.world,
                                  rt->backend == BATON_GPU_CPU ? "the CPU fallback cannot"
                                                               : "no CUDA device is present");
        rt->backend = BATON_GPU_CUDA;
        return 0;
    }
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
        return baton__err_set(
            err, BATON_ENODEV,
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

/* The steps the validator moved to the CPU (plan_step.fallback_from) run there on every backend:
 * say so once per runtime, as the whole-plan fallback of choose_backend does, to the registry's
 * log and only once the runtime exists (a refused create reports through its error alone). */
static void note_cpu_fallbacks(const baton_runtime *rt)
{
    const baton_plan *plan = rt->plan;
    for (int i = 0; i < plan->n_steps && !rt->opts.quiet; i++) {
        const plan_step *s = &plan->steps[i];
        char from[32];
        if (s->fallback_from.kind != BATON_DEVICE_NONE)
            baton__log_to(plan->log, BATON_LOG_NOTE,
                          "%s: step '%s' runs on the CPU, not %s: %s '%s' has only a CPU "
                          "implementation (its inputs and outputs are copied to and from the host)",
                          plan->source, s->name,
                          baton_device_format(s->fallback_from, from, sizeof from),
                          s->kind == BATON_TARGET_KERNEL ? "kernel" : "delegate", s->target_name);
    }
}

static const dev_ops *ops_for(const baton_runtime *rt, baton_device dev)
{
    if (dev.kind != BATON_DEVICE_CUDA)
        return &baton__dev_cpu_ops;
    switch (rt->backend) {
#ifdef BATON_CUDA
    case BATON_GPU_CUDA: return &baton__dev_cuda_ops;
#endif
    case BATON_GPU_SIM: return &baton__dev_sim_ops;
    default: return &baton__dev_cpu_ops;
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
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_create: options.arenas/n_arenas and streams/n_streams "
                              "must be an array and its length (NULL and 0 for none)");
    for (int i = 0; i < o->n_arenas; i++) {
        const baton_arena *a = &o->arenas[i];
        baton_device_format(a->device, name, sizeof name);
        int d = baton__plan_memory_index(plan, a->device);
        if (d < 0)
            return baton__err_set(
                err, BATON_EINVAL,
                "baton_runtime_create: options.arenas[%d] is for %s, which plan '%s' "
                "does not use (baton_plan_arena_info lists its devices)",
                i, name, plan->name);
        for (int j = 0; j < i; j++)
            if (device_eq(o->arenas[j].device, a->device))
                return baton__err_set(
                    err, BATON_EINVAL,
                    "baton_runtime_create: options.arenas[%d] and [%d] are both for "
                    "%s; give one arena per device",
                    j, i, name);
        if (!a->data || ((uintptr_t)a->data & (BATON_ARENA_ALIGN - 1)))
            return baton__err_set(
                err, BATON_EINVAL,
                "baton_runtime_create: options.arenas[%d] (%s): data %p is %s; pass "
                "memory aligned to BATON_ARENA_ALIGN (%d bytes), as cudaMalloc "
                "and aligned_alloc(256, ...) give",
                i, name, a->data, a->data ? "misaligned" : "NULL", BATON_ARENA_ALIGN);
        /* an instance of a pool reads the constants of the pool's first runtime */
        size_t need = plan->memory[d].arena_bytes - (rt->share ? plan->memory[d].const_bytes : 0);
        if (a->nbytes < need)
            return baton__err_set(
                err, BATON_EINVAL,
                "baton_runtime_create: options.arenas[%d] (%s) has %zu bytes; plan "
                "'%s' needs %zu there (%s)",
                i, name, a->nbytes, plan->name, need,
                rt->share ? "baton_pool_arena_info" : "baton_plan_arena_info");
    }
    /* Two devices' arenas in one memory would have each overwrite the other's tensors: the
     * address space is one (CUDA's unified addressing), so the ranges baton uses must not meet. */
    for (int i = 0; i < o->n_arenas; i++)
        for (int j = 0; j < i; j++) {
            const baton_arena *a = &o->arenas[i], *b = &o->arenas[j];
            const uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
            /* the bytes used: a pool instance's arenas hold no constants (as `need` above) */
            const plan_memory *ma = &plan->memory[baton__plan_memory_index(plan, a->device)],
                              *mb = &plan->memory[baton__plan_memory_index(plan, b->device)];
            const size_t an = ma->arena_bytes - (rt->share ? ma->const_bytes : 0),
                         bn = mb->arena_bytes - (rt->share ? mb->const_bytes : 0);
            if (an && bn && a0 < b0 + bn && b0 < a0 + an) {
                char other[32];
                baton_device_format(a->device, name, sizeof name);
                baton_device_format(b->device, other, sizeof other);
                return baton__err_set(
                    err, BATON_EINVAL,
                    "baton_runtime_create: options.arenas[%d] (%s, %p, %zu bytes used) "
                    "and [%d] (%s, %p, %zu bytes used) overlap; give each device its "
                    "own memory",
                    j, other, b->data, bn, i, name, a->data, an);
            }
        }
    for (int i = 0; i < o->n_streams; i++) {
        const baton_stream *st = &o->streams[i];
        baton_device_format(st->device, name, sizeof name);
        if (st->device.kind != BATON_DEVICE_CUDA || baton__plan_memory_index(plan, st->device) < 0)
            return baton__err_set(
                err, BATON_EINVAL,
                "baton_runtime_create: options.streams[%d] is for %s, which is not a "
                "CUDA device plan '%s' uses",
                i, name, plan->name);
        for (int j = 0; j < i; j++)
            if (device_eq(o->streams[j].device, st->device))
                return baton__err_set(
                    err, BATON_EINVAL,
                    "baton_runtime_create: options.streams[%d] and [%d] are both for "
                    "%s; give one stream per device",
                    j, i, name);
        /* 0, cudaStreamLegacy (1) and cudaStreamPerThread (2) are not streams of one's own */
        if ((uintptr_t)st->stream <= 2)
            return baton__err_set(
                err, BATON_EINVAL,
                "baton_runtime_create: options.streams[%d] (%s) is the default stream "
                "(%p); pass a stream made with cudaStreamCreate(WithFlags): the "
                "default stream cannot be captured into a graph",
                i, name, st->stream);
        int on_cuda = dev_has(ops_for(rt, st->device), DEV_CAP_CALLER_STREAM);
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
            return baton__err_set(
                err, BATON_EINVAL,
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
    rt->own = -1;
    for (int d = 0; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        baton_device dv = plan->memory[d].device;
        rd->gpu = dv.kind == BATON_DEVICE_CUDA;
        rd->ops = ops_for(rt, dv);
        if (rt_ranks(rt) && rd->gpu && dv.index != rt->opts.rank) {
            rd->remote = 1; /* another rank's */
            continue;
        }
        if (rt_ranks(rt) && rd->gpu)
            rt->own = d;
        /* events: WAIT_SLOT, one per segment that another GPU waits for (SEG_EVENT), and one
         * per segment that copies from another GPU (READ_EVENT) */
        const dev_open_args args = {
            .opts = &rt->opts,
            .n_graphs = plan->n_segments * rt->graph_ways,
            .n_events = SEG_EVENT(plan->n_segments) + plan->n_segments,
            .prio_rank = rt->prio_rank,
            .prio_of = rt->prio_of,
        };
        if ((rc = rd->ops->open(run_on(rt, dv), &args, &rd->ctx, err)))
            return rc;
        if (d == fault_dev && rd->ops->inject)
            rd->ops->inject(rd->ctx, fault);
    }
    /* Host memory that GPUs copy from and to is pinned: take it from the first real GPU. */
    rt->dev[0].arena_ops = rt->dev[0].ops;
    rt->dev[0].arena_ctx = rt->dev[0].ctx;
    rt->dev[0].host_mem = 1;
    for (int d = 1; d < rt->nd; d++)
        if (dev_has(rt->dev[d].ops, DEV_CAP_ASYNC) && !rt->dev[d].remote) {
            rt->dev[0].arena_ops = rt->dev[d].ops;
            rt->dev[0].arena_ctx = rt->dev[d].ctx;
            break;
        }
    for (int d = 0; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        size_t cbytes = plan->memory[d].const_bytes;
        size_t bytes = plan->memory[d].arena_bytes - (rt->share ? cbytes : 0);
        const baton_arena *mine = caller_arena(rt, d);
        if (rd->remote)
            continue;
        if (d > 0) {
            rd->arena_ops = rd->ops;
            rd->arena_ctx = rd->ctx;
        }
        if (mine) {
            /* the caller's: checked for its kind of memory, never freed */
            if ((rc = dev_mem_check(rd->arena_ops, rd->arena_ctx, mine->data, mine->nbytes, d == 0,
                                    err))) {
                char name[32], inner[BATON_ERROR_MAX];
                snprintf(inner, sizeof inner, "%s", err ? err->message : "");
                return baton__err_set(
                    err, rc, "baton_runtime_create: the caller's arena for %s: %s",
                    baton_device_format(plan->memory[d].device, name, sizeof name), inner);
            }
            rd->arena = mine->data;
            rd->consts = rt->share ? rt->share->dev[d].consts : rd->arena;
            rd->priv = rt->share ? rd->arena : rd->arena + cbytes;
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
            return baton__err_set(
                err, BATON_ENOMEM, "%s: cannot allocate the %zu-byte arena of %s: %s", plan->source,
                bytes, baton_device_format(plan->memory[d].device, name, sizeof name), inner);
        }
        rd->consts = rt->share ? rt->share->dev[d].consts : rd->arena;
        rd->priv = rt->share ? rd->arena : rd->arena + cbytes;
    }
    return 0;
}
void *baton__runtime_slot_addr(const baton_runtime *rt, int d, int t)
{
    const plan_memory *m = &rt->plan->memory[d];
    int64_t off = m->offset[t];
    if (rt->dev[d].remote)
        return NULL;               /* another rank's GPU holds it */
    if (off == PLAN_OFFSET_MAPPED) /* read in place from its file's mapping (read-only) */
        return (void *)rt->plan->tensors[rt->plan->tensors[t].storage].init.mapped;
    if (off < 0)
        return NULL;
    if ((size_t)off < m->const_bytes)
        return rt->dev[d].consts + off;
    return rt->dev[d].priv + ((size_t)off - m->const_bytes);
}

static int upload_constants(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    for (int t = 0; t < plan->n_tensors; t++) {
        const plan_tensor *pt = &plan->tensors[t];
        if (pt->role != BATON_ROLE_CONSTANT)
            continue;
        void *host = NULL;
        int mapped = 0;
        for (int d = 0; d < rt->nd; d++) {
            void *dst = baton__runtime_slot_addr(rt, d, t);
            if (!dst || plan->memory[d].offset[t] == PLAN_OFFSET_MAPPED)
                continue;
            if (!host && pt->init.kind == INIT_SAFETENSORS) {
                /* straight from the mapping: no host copy of a file's weights per runtime */
                host = (void *)pt->init.mapped;
                mapped = 1;
            }
            if (!host) {
                host = malloc(pt->nbytes ? pt->nbytes : 1);
                if (!host)
                    return baton__err_set(err, BATON_ENOMEM, "constant '%s': out of memory",
                                          pt->name);
                int rc = baton__plan_tensor_materialize(plan, t, host, err);
                if (rc) {
                    free(host);
                    return rc;
                }
            }
            int rc = d == 0 ? (memcpy(dst, host, pt->nbytes), 0)
                            : rt->dev[d].ops->copy_sync(rt->dev[d].ctx, dst, host, pt->nbytes,
                                                        DEV_COPY_H2D, err);
            if (rc) {
                if (!mapped)
                    free(host);
                return rc;
            }
        }
        if (!mapped)
            free(host);
    }
    return 0;
}

/* Tells each device the constant bytes it is about to receive (the CUDA device then uploads
 * through pinned staging buffers: dev_ops.stage_uploads), uploads them, and lets it free the
 * buffers again. */
static int load_constants(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    if (rt->share)
        return 0; /* already loaded, by the runtime that owns them */
    for (int d = 1; d < rt->nd; d++) {
        if (!rt->dev[d].ops->stage_uploads || rt->dev[d].remote)
            continue;
        size_t bytes = 0;
        for (int t = 0; t < plan->n_tensors; t++)
            if (plan->tensors[t].role == BATON_ROLE_CONSTANT &&
                plan->memory[d].offset[t] != PLAN_OFFSET_MAPPED &&
                baton__runtime_slot_addr(rt, d, t))
                bytes += plan->tensors[t].nbytes;
        rt->dev[d].ops->stage_uploads(rt->dev[d].ctx, bytes);
    }
    int rc = upload_constants(rt, err);
    for (int d = 1; d < rt->nd; d++)
        if (rt->dev[d].ops->stage_uploads && !rt->dev[d].remote)
            rt->dev[d].ops->stage_uploads(rt->dev[d].ctx, 0);
    return rc;
}

/* A step's signature as its kernel or delegate sees it (ctx->sig): its tensors' descriptors, names
 * and "is a plan constant" flags, appended to the runtime's arrays at *dd, *nn and *cc. */
static baton_sig_args step_sig(const baton_plan *plan, const plan_step *s, baton_tensor_desc **dd,
                               const char ***nn, int **cc)
{
    baton_sig_args sig = {.struct_size = sizeof(baton_sig_args),
                          .n_inputs = s->n_inputs,
                          .inputs = *dd,
                          .n_outputs = s->n_outputs,
                          .outputs = *dd + s->n_inputs,
                          .n_attrs = s->n_attrs,
                          .attrs = s->attrs,
                          .input_names = *nn,
                          .output_names = *nn + s->n_inputs,
                          .input_constant = *cc};
    for (int k = 0; k < s->n_inputs + s->n_outputs; k++) {
        const int t = k < s->n_inputs ? s->inputs[k] : s->outputs[k - s->n_inputs];
        *(*dd)++ = plan->tensors[t].desc;
        *(*nn)++ = plan->tensors[t].name;
        *(*cc)++ = k < s->n_inputs && plan->tensors[t].role == BATON_ROLE_CONSTANT;
    }
    return sig;
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
    rt->consts = calloc((size_t)nb + 1, sizeof *rt->consts);
    rt->sigs = calloc((size_t)n + 1, sizeof *rt->sigs);
    rt->states = calloc((size_t)n + 1, sizeof *rt->states);
    rt->impls = calloc((size_t)n + 1, sizeof *rt->impls);
    rt->step_ns = calloc((size_t)n + 1, sizeof *rt->step_ns);
    baton_device *devs = calloc((size_t)n + 1, sizeof *devs);
    baton_target_kind *kinds = calloc((size_t)n + 1, sizeof *kinds);
    int rc = 0;
    if (!rt->step_dev || !rt->calls || !rt->errbufs || !rt->bufs || !rt->descs || !rt->names ||
        !rt->consts || !rt->sigs || !rt->states || !rt->impls || !rt->step_ns || !devs || !kinds) {
        rc = baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
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
    int *cc = rt->consts;
    for (int i = 0; i < n; i++) {
        const plan_step *s = &plan->steps[i];
        int d = baton__plan_memory_index(plan, s->device);
        rt_device *rd = &rt->dev[d];
        if (s->kind == BATON_TARGET_COLLECTIVE) {
            /* no call: the buffers, on each member's device, for its dev_coll */
            rt->step_dev[i] = d;
            rt->calls[i].buffers = b;
            for (int k = 0; k < s->n_inputs; k++)
                *b++ = baton__runtime_slot_addr(
                    rt, baton__plan_memory_index(plan, step_arg_device(s, k)), s->inputs[k]);
            for (int k = 0; k < s->n_outputs; k++)
                *b++ = baton__runtime_slot_addr(
                    rt, baton__plan_memory_index(plan, step_arg_device(s, k)), s->outputs[k]);
            continue;
        }
        if (rd->remote) {
            /* another rank runs it: no call, no state; its buffers have no address here, its
             * descriptors are kept (a binding of the plan's dims repacks every step's) */
            rt->step_dev[i] = d;
            rt->calls[i].buffers = b;
            for (int k = 0; k < s->n_inputs + s->n_outputs; k++)
                *b++ = NULL;
            rt->sigs[i] = step_sig(plan, s, &dd, &nn, &cc);
            rt->calls[i].opaque = s->opaque;
            rt->calls[i].opaque_len = s->opaque_len;
            continue;
        }
        baton_device_kind impl_kind =
            dev_has(rd->ops, DEV_CAP_CPU_KERNELS) ? BATON_DEVICE_CPU : BATON_DEVICE_CUDA;
        const baton_target_impl *im = baton_target_impl_for(s->target, impl_kind);
        char name[32];
        if (!im) {
            rc = baton__plan_error(
                err, BATON_ENOTARGET, plan, s->pos,
                "step '%s': target '%s' has no %s implementation to run it on %s", s->name,
                s->target_name, impl_kind == BATON_DEVICE_CPU ? "CPU" : "CUDA",
                baton_device_format(s->device, name, sizeof name));
            goto out;
        }
        rt->impls[i] = im;
        rt->step_dev[i] = d;
        dev_call *c = &rt->calls[i];
        c->buffers = b;
        for (int k = 0; k < s->n_inputs; k++)
            *b++ = baton__runtime_slot_addr(rt, d, s->inputs[k]);
        for (int k = 0; k < s->n_outputs; k++)
            *b++ = baton__runtime_slot_addr(rt, d, s->outputs[k]);
        rt->sigs[i] = step_sig(plan, s, &dd, &nn, &cc);
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
        /* A kernel that honours PDL may follow any kernel on its stream (a delegate's, the
         * device's copy kernel): its pdl_wait waits for that grid. The device launches it so
         * where the op before it is a kernel (device.h, dev_call.pdl). */
        c->pdl = use_pdl && s->kind == BATON_TARGET_KERNEL && im->supports_pdl &&
                 dev_supports_pdl(rd->ops, rd->ctx);
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
                rc = baton__plan_error(
                    err, rc, plan, s->pos, "step '%s': delegate '%s' init on %s: %s", s->name,
                    s->target_name, baton_device_format(s->device, name, sizeof name),
                    derr.message);
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
        if (s->kind != BATON_TARGET_KERNEL || !s->cuda_tune || !dev_can_tune(rd->ops) || rd->remote)
            continue;
        if (!rt->tuning && !(rt->tuning = calloc((size_t)plan->n_steps, ERRBUF_LEN)))
            return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
        baton_error derr = {0};
        int rc = rd->ops->tune(rd->ctx, &rt->calls[i], s->cuda_tune,
                               rt->tuning + (size_t)i * ERRBUF_LEN, ERRBUF_LEN, &derr);
        if (rc) {
            char name[32];
            return baton__plan_error(
                err, rc, plan, s->pos, "step '%s': tuning '%s' on %s: %s", s->name, s->target_name,
                baton_device_format(s->device, name, sizeof name), derr.message);
        }
    }
    return 0;
}

/* Each kernel step whose kernel decides its calls once (core/tune.h; baton's CUDA RMSNorm
 * forward) does so now, after tuning chose its variant: its calls get the result as
 * ctx->prepared, so the run loop only launches. */
static int prepare_kernel_calls(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    for (int i = 0; i < plan->n_steps; i++) {
        const plan_step *s = &plan->steps[i];
        rt_device *rd = &rt->dev[rt->step_dev[i]];
        if (s->kind != BATON_TARGET_KERNEL || !s->cuda_prepare || !dev_can_prepare_calls(rd->ops) ||
            dev_has(rd->ops, DEV_CAP_CPU_KERNELS) || rd->remote)
            continue;
        if (!rt->kernel_states &&
            !(rt->kernel_states = calloc((size_t)plan->n_steps, sizeof *rt->kernel_states)))
            return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
        baton_error derr = {0};
        int rc = rd->ops->prepare_call(rd->ctx, &rt->calls[i], s->cuda_prepare,
                                       &rt->kernel_states[i], &derr);
        if (rc) {
            char name[32];
            return baton__plan_error(
                err, rc, plan, s->pos, "step '%s': preparing '%s' on %s: %s", s->name,
                s->target_name, baton_device_format(s->device, name, sizeof name), derr.message);
        }
        rt->calls[i].ctx.prepared = rt->kernel_states[i];
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
        return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
    for (int i = 0; i < plan->n_transfers; i++) {
        const plan_transfer *x = &plan->transfers[i];
        rt_transfer *r = &rt->xfers[i];
        int from = baton__plan_memory_index(plan, x->from),
            to = baton__plan_memory_index(plan, x->to);
        char a[32], b[32];
        r->src = baton__runtime_slot_addr(rt, from, x->tensor);
        r->dst = baton__runtime_slot_addr(rt, to, x->tensor);
        r->bytes = plan->tensors[x->tensor].nbytes;
        r->from = from;
        r->kind = to == 0 ? DEV_COPY_D2H : from == 0 ? DEV_COPY_H2D : DEV_COPY_D2D;
        r->wait_seg = -1;
        r->peer = -1;
        if (rt->dev[from].remote || rt->dev[to].remote) {
            /* one process per GPU: another rank's GPU at one end (or both) */
            if (rt->dev[from].remote && to == 0 && x->segment < plan->n_segments)
                return baton__err_set(
                    err, BATON_ENOTSUP,
                    "%s: rank %d: a CPU step reads tensor '%s', which %s makes on another "
                    "rank's GPU; with one process per GPU a CPU step reads only what this "
                    "rank's GPU makes (place the step on a GPU, or run the plan in one process)",
                    plan->source, rt->opts.rank, plan->tensors[x->tensor].name,
                    baton_device_format(x->from, a, sizeof a));
            if (rt->dev[from].remote == rt->dev[to].remote || from == 0 || to == 0) {
                r->absent = 1; /* between devices this rank does not run */
            } else {
                r->send = rt->dev[to].remote;
                r->peer = r->send ? x->to.index : x->from.index;
            }
        }
        if (r->kind == DEV_COPY_D2D && r->peer < 0 && !r->absent) {
            /* GPU to GPU: the reader copies on its stream after waiting, on the GPU, for the
             * event the writer records after the segment that wrote the tensor */
            const rt_device *rf = &rt->dev[from], *rtd = &rt->dev[to];
            if (!dev_can_order_peers(rtd->ops) || rf->ops != rtd->ops)
                return baton__err_set(
                    err, BATON_ENOTSUP,
                    "%s: tensor '%s' moves from %s to %s, which this backend (%s) "
                    "cannot order without the host; place both steps on one GPU",
                    plan->source, plan->tensors[x->tensor].name,
                    baton_device_format(x->from, a, sizeof a),
                    baton_device_format(x->to, b, sizeof b), rtd->ops->name);
            r->wait_seg = plan->steps[plan->tensors[x->tensor].producer].segment;
            rt->seg_signal[r->wait_seg] |= 1u << from;
            /* both ways, so that a copy issued on either GPU's stream reads or writes the other's
             * memory directly (else the driver stages it through the host) */
            if (rtd->ops->peer_enable && ((rc = rtd->ops->peer_enable(rtd->ctx, rf->ctx, err)) ||
                                          (rc = rtd->ops->peer_enable(rf->ctx, rtd->ctx, err)))) {
                char inner[BATON_ERROR_MAX];
                snprintf(inner, sizeof inner, "%s", err ? err->message : "");
                return baton__err_set(err, rc, "%s: peer access between %s and %s: %s",
                                      plan->source, baton_device_format(x->to, a, sizeof a),
                                      baton_device_format(x->from, b, sizeof b), inner);
            }
        }
        r->issuer = r->kind == DEV_COPY_D2H ? from : to;
        /* On the CPU fallback both arenas are host memory: a memcpy, not a device transfer. */
        r->host_copy =
            !dev_has(rt->dev[from].ops, DEV_CAP_ASYNC) && !dev_has(rt->dev[to].ops, DEV_CAP_ASYNC);
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
        return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
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
        const dev_ops *ops = rt->dev[baton__plan_memory_index(plan, st->group[0])].ops;
        for (int k = 0; k < c->n; k++)
            c->group[k] = rt->dev[baton__plan_memory_index(plan, st->group[k])].ctx;
        char name[32];
        if (rt_ranks(rt)) {
            /* one process per GPU: this rank's part, over the world's communicator, whose
             * members are the ranks in order */
            int in_order = c->n == rt->opts.world;
            for (int k = 0; k < c->n && in_order; k++)
                in_order = st->group[k].kind == BATON_DEVICE_CUDA && st->group[k].index == k;
            if (!in_order)
                return baton__plan_error(
                    err, BATON_ENOTSUP, plan, st->pos,
                    "step '%s': %s over a group that is not every rank in order (cuda:0 .. "
                    "cuda:%d): with one process per GPU a collective spans the whole world",
                    st->name, st->target_name, rt->opts.world - 1);
            continue;
        }
        if (!dev_has_collectives(ops))
            return baton__plan_error(
                err, BATON_ENOTSUP, plan, st->pos,
                "step '%s': %s on %s: this backend (%s) has no collectives; run the "
                "plan with baton_options.gpu = BATON_GPU_CUDA (NCCL), BATON_GPU_SIM "
                "or BATON_GPU_CPU",
                st->name, st->target_name, baton_device_format(st->device, name, sizeof name),
                ops->name);
        int rc = ops->coll_prepare(c, err);
        if (rc) {
            char inner[BATON_ERROR_MAX];
            snprintf(inner, sizeof inner, "%s", err ? err->message : "");
            return baton__plan_error(err, rc, plan, st->pos, "step '%s' (%s): %s", st->name,
                                     st->target_name, inner);
        }
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
        return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
    if (rt->opts.mode != BATON_SYNC_GRAPH || rt->opts.disable_queue_ahead > 0)
        return 0;
    for (int s = 2; s < plan->n_segments; s++) {
        const plan_segment *g = &plan->segments[s], *c = &plan->segments[s - 1],
                           *p = &plan->segments[s - 2];
        if (g->device.kind == BATON_DEVICE_CPU || c->device.kind != BATON_DEVICE_CPU ||
            p->device.kind == BATON_DEVICE_CPU || g->collective || p->collective)
            continue;
        int d = baton__plan_memory_index(plan, g->device);
        const rt_device *rd = &rt->dev[d];
        if (baton__plan_memory_index(plan, p->device) != d || rd->remote ||
            !dev_can_gate(rd->ops, rd->ctx))
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
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_create: options.mode is %d; use BATON_SYNC_STRICT, "
                              "BATON_SYNC_BOUNDARY or BATON_SYNC_GRAPH (0 to 2)",
                              (int)o->mode);
    if ((unsigned)o->gpu > BATON_GPU_SIM)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_create: options.gpu is %d; use BATON_GPU_AUTO, "
                              "BATON_GPU_CUDA, BATON_GPU_CPU or BATON_GPU_SIM (0 to 3)",
                              (int)o->gpu);
    if (o->sim_delay_us < 0 || o->sim_delay_us > RT_MAX_SIM_DELAY_US)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_create: options.sim_delay_us is %d; use 0 (no delay) "
                              "to %d microseconds",
                              o->sim_delay_us, RT_MAX_SIM_DELAY_US);
    if (o->world < 0 || o->world > DEV_MAX_GROUP ||
        (o->world > 0 && (o->rank < 0 || o->rank >= o->world)))
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_create: options.rank %d of options.world %d; use a "
                              "world of 1 to %d ranks (0: one process runs every GPU) and a rank "
                              "from 0 to world - 1",
                              o->rank, o->world, DEV_MAX_GROUP);
    if (o->world > 1 && (!o->rendezvous || !o->rendezvous[0]))
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_create: rank %d of %d: options.rendezvous is empty; "
                              "give every rank the same file path, on storage they all see",
                              o->rank, o->world);
    if (o->cpu_threads < 0)
        return baton__err_set(
            err, BATON_EINVAL,
            "baton_runtime_create: options.cpu_threads is %d; use 0 (every core), 1 "
            "(the calling thread only) or a cap >= 2",
            o->cpu_threads);
    if (o->cpu_pool && (o->cpu_pool->struct_size < sizeof(baton_parallel_for) ||
                        !o->cpu_pool->run || o->cpu_pool->n_threads < 1))
        return baton__err_set(err, BATON_EINVAL, "baton_runtime_create: options.cpu_pool: %s",
                              o->cpu_pool->struct_size < sizeof(baton_parallel_for)
                                  ? "struct_size is too small; set it to sizeof(baton_parallel_for)"
                              : !o->cpu_pool->run
                                  ? "run is NULL; it must be the pool's parallel-for"
                                  : "n_threads must be >= 1");
    return 0;
}

static int prepare(const baton_plan *plan, const baton_options *opts, const baton_runtime *share,
                   int prio_rank, int prio_of, int fault_dev, dev_fault fault, baton_runtime **out,
                   baton_error *err)
{
    err_clear(err);
    if (!plan || !out)
        return baton__err_set(err, BATON_EINVAL, "baton_runtime_create: plan and out are required");
    *out = NULL;
    baton_options o;
    int rc = baton__options_read(opts, &o, err);
    if (!rc)
        rc = check_options(&o, err);
    if (rc)
        return rc;
    baton_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
    rt->plan = baton__plan_retain(plan); /* baton_runtime_destroy releases it */
    rt->opts = o;
    static int no_pdl = ENV_UNREAD; /* BATON_NO_PDL=1: --no-pdl for programs that have no flag */
    if (baton__env_flag("BATON_NO_PDL", &no_pdl) == 1)
        rt->opts.disable_pdl = 1;
    rt->share = share;
    rt->prio_rank = prio_rank;
    rt->prio_of = prio_of;
    const char *nodes_env = getenv(RT_EVENT_NODES_ENV);
    rt->event_nodes = !(nodes_env && strcmp(nodes_env, "0") == 0);
    const char *records_env = getenv(RT_END_RECORDS_ENV);
    rt->end_records_first = !(records_env && strcmp(records_env, "0") == 0);
    /* what delegates and kernels log while they prepare goes to the plan's registry */
    const log_sink *outer_log = baton__log_scope(plan->log);
    if (share) { /* an instance runs where its first one does */
        rt->backend = share->backend;
        rt->alias_gpus = share->alias_gpus;
    } else
        rc = choose_backend(rt, err);
    rt->graph_ways = plan->n_dims && o.mode == BATON_SYNC_GRAPH ? RT_GRAPH_WAYS : 1;
    if (!rc)
        rc = open_devices(rt, fault_dev, fault, err);
    if (!rc && rt_ranks(rt) && share)
        rc = baton__err_set(err, BATON_ENOTSUP,
                            "%s: a pool of instances of a rank's runtime (options.world) is not "
                            "supported yet: run one runtime per rank",
                            plan->source);
    if (!rc && rt_ranks(rt) && !share)
        rc = rt->own < 0 ? baton__err_set(err, BATON_EINVAL,
                                          "%s: rank %d of %d: the plan places no step on cuda:%d, "
                                          "this rank's GPU",
                                          plan->source, o.rank, o.world, o.rank)
                         : baton__world_join(rt, rt->own, err);
    if (!rc)
        rc = load_constants(rt, err);
    if (!rc)
        rc = baton_runtime_reset_state(rt, err); /* each instance owns its state */
    if (!rc)
        rc = baton__runtime_dims_prepare(rt, err);
    if (!rc)
        rc = build_calls(rt, err);
    if (!rc)
        rc = tune_calls(rt, err);
    if (!rc)
        rc = prepare_kernel_calls(rt, err);
    if (!rc)
        rc = build_transfers(rt, err);
    if (!rc)
        rc = build_collectives(rt, err);
    if (!rc) {
        rt->graph_state = calloc((size_t)plan->n_segments + 1, sizeof *rt->graph_state);
        rt->seg_bytes = calloc(2 * (size_t)plan->n_segments + 2, sizeof *rt->seg_bytes);
        if (!rt->graph_state || !rt->seg_bytes)
            rc = baton__err_set(err, BATON_ENOMEM, "prepare: out of memory");
    }
    if (!rc)
        rc = baton__runtime_graphs_prepare(rt, err);
    if (!rc)
        baton__runtime_count_graph_bytes(rt);
    if (!rc)
        rc = baton__runtime_build_sites(rt, err);
    if (!rc)
        rc = plan_queue_ahead(rt, err);
    baton__log_scope(outer_log);
    if (rc) {
        baton_runtime_destroy(rt);
        return rc;
    }
    flush_deferred_log(rt);
    if (!share)
        note_cpu_fallbacks(rt);
    *out = rt;
    return 0;
}

int baton__runtime_prepare(const baton_plan *plan, const baton_options *opts, int fault_dev,
                           dev_fault fault, baton_runtime **out, baton_error *err)
{
    return prepare(plan, opts, NULL, 0, 0, fault_dev, fault, out, err);
}

int baton__runtime_prepare_instance(const baton_plan *plan, const baton_runtime *share,
                                    const baton_options *own, int prio_rank, int prio_of,
                                    baton_runtime **out, baton_error *err)
{
    if (!share)
        return prepare(plan, own, NULL, prio_rank, prio_of, -1, DEV_FAULT_NONE, out, err);
    baton_options o = share->opts; /* the same options; its own memory and streams, if any */
    o.arenas = own ? own->arenas : NULL;
    o.n_arenas = own ? own->n_arenas : 0;
    o.streams = own ? own->streams : NULL;
    o.n_streams = own ? own->n_streams : 0;
    return prepare(share->plan, &o, share, prio_rank, prio_of, -1, DEV_FAULT_NONE, out, err);
}

typedef struct shared_copy {
    const void *key;
    size_t bytes;
} shared_copy;

static int cmp_copy(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const shared_copy *)a)->key;
    uintptr_t y = (uintptr_t)((const shared_copy *)b)->key;
    return x < y ? -1 : x > y;
}

int baton__runtime_streams(const baton_runtime *rt, baton_stream *out, int max)
{
    int n = 0;
    for (int d = 1; rt && d < rt->nd && n < max; d++) {
        const rt_device *rd = &rt->dev[d];
        const baton_device dev = rt->plan->memory[d].device;
        if (dev.kind != BATON_DEVICE_CUDA || rd->remote || !rd->ctx ||
            !dev_has(rd->ops, DEV_CAP_CALLER_STREAM) || !rd->ops->stream(rd->ctx))
            continue;
        out[n++] = (baton_stream){.device = dev, .stream = rd->ops->stream(rd->ctx)};
    }
    return n;
}

void baton__runtime_memory(const baton_runtime *rt, size_t *const_bytes, size_t *private_bytes)
{
    size_t c = 0, p = 0;
    for (int d = 0; d < rt->nd; d++) {
        const plan_memory *m = &rt->plan->memory[d];
        c += m->const_bytes;
        p += m->arena_bytes - m->const_bytes;
    }
    /* What delegates hold outside the arenas: their own bytes are this runtime's; a prepared copy
     * of a constant is shared with every step and runtime using that constant (a pool's
     * instances), so it counts with the constants, once per copy. Not on a run's path: the list
     * of copies may allocate. */
    const int n = rt->plan->n_steps;
    shared_copy *copies = n > 0 ? malloc(sizeof *copies * (size_t)n) : NULL;
    int nc = 0;
    for (int i = 0; i < n; i++) {
        const baton_target_impl *im = rt->impls ? rt->impls[i] : NULL;
        if (!im || !im->delegate || !im->delegate->memory || !rt->states || !rt->states[i])
            continue;
        size_t own = 0, shared = 0;
        const void *key = NULL;
        im->delegate->memory(rt->states[i], &own, &key, &shared);
        p += own;
        if (shared && key && copies)
            copies[nc++] = (shared_copy){key, shared};
        else
            c += shared; /* no key, or no list (out of memory): counted, perhaps twice */
    }
    if (nc > 0)
        qsort(copies, (size_t)nc, sizeof *copies, cmp_copy);
    for (int k = 0; k < nc; k++)
        if (k == 0 || copies[k].key != copies[k - 1].key)
            c += copies[k].bytes;
    free(copies);
    *const_bytes = c;
    *private_bytes = p;
}

int baton_runtime_create(const baton_plan *plan, const baton_options *opts, baton_runtime **out,
                         baton_error *err)
{
    return prepare(plan, opts, NULL, 0, 0, -1, DEV_FAULT_NONE, out, err);
}

void baton_runtime_destroy(baton_runtime *rt)
{
    if (!rt)
        return;
    baton__trace_end(rt); /* detaches the devices' timelines while they are open */
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
                int d = baton__plan_memory_index(rt->plan, rt->plan->segments[s].device);
                if (rt->dev[d].ops->coll_release)
                    rt->dev[d].ops->coll_release(&rt->colls[s]);
            }
    free(rt->colls);
    if (rt->world && rt->own >= 0 && rt->dev[rt->own].ops->world_leave)
        rt->dev[rt->own].ops->world_leave(rt->world);
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
    baton__runtime_dims_free(rt);
    baton__runtime_graphs_free(rt);
    free(rt->state_ptr);
    free(rt->step_dev);
    free(rt->calls);
    free(rt->errbufs);
    free(rt->tuning);
    for (int i = 0; rt->kernel_states && i < rt->plan->n_steps; i++)
        free(rt->kernel_states[i]);
    free(rt->kernel_states);
    free(rt->bufs);
    free(rt->descs);
    free(rt->names);
    free(rt->consts);
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
    free(rt->input_set);
    baton_plan_free((baton_plan *)rt->plan); /* drops the runtime's reference */
    free(rt);
}
