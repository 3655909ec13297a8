/* device_cpu.c: the CPU device. Calls run inline on the calling thread, so there is nothing to
 * wait for and nothing to capture; copies are memcpy. It also hosts `cuda:N` steps when a plan
 * falls back to the CPU. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/threads.h"
#include "scheduler/device.h"

struct dev_ctx {
    baton_device dev;
    dev_counters counters;
    dev_fault fault;
    /* The runtime's thread options, bound around each call: kernels read them through
     * core/threads.h without a field in baton_exec_ctx. */
    baton_parallel_for ext;
    par_ctx par;
};

static int cpu_open(baton_device dev, const dev_open_args *a, dev_ctx **out, baton_error *err)
{
    const baton_options *opts = a->opts;
    /* options.cpu_threads and cpu_pool were checked by baton_runtime_create */
    dev_ctx *d = calloc(1, sizeof *d);
    if (!d)
        return baton__err_set(err, BATON_ENOMEM, "cpu: out of memory");
    d->dev = dev;
    if (opts && opts->cpu_pool) {
        d->ext = *opts->cpu_pool;
        d->par.ext = &d->ext;
    }
    d->par.max_threads = opts ? opts->cpu_threads : 0;
    baton__par_cores(); /* sizes the pool now rather than inside the first run */
    *out = d;
    return 0;
}

static void cpu_close(dev_ctx *d)
{
    free(d);
}

static void *cpu_stream(dev_ctx *d)
{
    return NULL;
}

static void *cpu_alloc(dev_ctx *d, size_t bytes, baton_error *err)
{
    char name[32];
    if (d->fault == DEV_FAULT_ALLOC) {
        d->fault = DEV_FAULT_NONE;
        baton__err_set(err, BATON_ENOMEM, "%s: allocation of %zu bytes failed (injected fault)",
                       baton_device_format(d->dev, name, sizeof name), bytes);
        return NULL;
    }
    void *p = dev_host_zeroed(bytes);
    if (!p) {
        baton__err_set(err, BATON_ENOMEM, "%s: allocation of %zu bytes failed",
                       baton_device_format(d->dev, name, sizeof name), bytes);
        return NULL;
    }
    return p;
}

static void cpu_free(dev_ctx *d, void *p)
{
    free(p);
}

static int cpu_copy_sync(dev_ctx *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind,
                         baton_error *err)
{
    memcpy(dst, src, bytes);
    return 0;
}

static int cpu_call(dev_ctx *d, dev_call *c, baton_error *err)
{
    if (d->fault == DEV_FAULT_LAUNCH) {
        d->fault = DEV_FAULT_NONE;
        return baton__err_set(err, BATON_EKERNEL, "launch failed (injected fault)");
    }
    d->counters.launches++;
    const par_ctx *prev = baton__par_bind(&d->par);
    int rc = c->kernel ? c->kernel(&c->ctx, c->buffers, c->opaque, c->opaque_len)
                       : c->delegate->execute(c->state, &c->ctx, c->buffers);
    baton__par_bind(prev);
    if (rc)
        return baton__err_set(err, rc < 0 ? rc : BATON_EKERNEL, "%s",
                              c->ctx.errbuf && c->ctx.errbuf[0] ? c->ctx.errbuf
                                                                : "the call reported a failure");
    return 0;
}

static int cpu_copy(dev_ctx *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind,
                    const char *what, baton_error *err)
{
    if (d->fault == DEV_FAULT_COPY) {
        d->fault = DEV_FAULT_NONE;
        return baton__err_set(err, BATON_EIO, "copy (%s) failed (injected fault)", what);
    }
    memcpy(dst, src, bytes);
    return 0;
}

static int cpu_record(dev_ctx *d, int slot, baton_error *err)
{
    return 0;
}

static int cpu_wait(dev_ctx *d, int slot, const char *where, baton_error *err)
{
    return 0; /* work on the CPU is done when issued */
}

static void cpu_drain(dev_ctx *d)
{
}

/* Work on the CPU (a GPU's steps in the fallback included) is done when issued: there is nothing
 * to wait for, and a collective is computed at once. */
static int cpu_stream_wait(dev_ctx *d, dev_ctx *other, int slot, baton_error *err)
{
    return 0;
}

static int cpu_coll_prepare(dev_coll *c, baton_error *err)
{
    return 0;
}

static int cpu_coll_run(dev_coll *c, baton_error *err)
{
    baton__dev_coll_host(c);
    return 0;
}

static int cpu_supports_pdl(dev_ctx *d)
{
    return 0;
}

static void cpu_counters(dev_ctx *d, dev_counters *out)
{
    *out = d->counters;
}

#ifdef BATON_TESTING
static void cpu_inject(dev_ctx *d, dev_fault fault)
{
    d->fault = fault;
}
#endif

const dev_ops baton__dev_cpu_ops = {
    .name = "cpu",
    .label = "CPU",
    .caps = DEV_CAP_CPU_KERNELS,
    .open = cpu_open,
    .close = cpu_close,
    .stream = cpu_stream,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .copy_sync = cpu_copy_sync,
    .call = cpu_call,
    .copy = cpu_copy,
    .record = cpu_record,
    .wait = cpu_wait,
    .drain = cpu_drain,
    .capture_begin = NULL,
    .capture_end = NULL,
    .graph_launch = NULL,
    .graph_reset = NULL,
    .supports_pdl = cpu_supports_pdl,
    .counters = cpu_counters,
    .stream_wait = cpu_stream_wait,
    .coll_prepare = cpu_coll_prepare,
    .coll_run = cpu_coll_run,
#ifdef BATON_TESTING
    .inject = cpu_inject,
#endif
};
