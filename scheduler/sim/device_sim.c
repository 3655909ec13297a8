/* device_sim.c: the test device. It stands in for a GPU on machines without one: a worker
 * thread drains a queue of calls and copies in order, like a CUDA stream, running the targets'
 * CPU implementations; events mark queue positions the host can wait for; captures record the
 * queued operations and replay them as one item, like a CUDA graph; a gate holds the queue until
 * the host opens it, like a stream waiting on a flag in host memory. With opts->sim_delay_us each
 * operation starts late, so a missing wait makes the host read stale data and a test fail. A
 * capture keeps the addresses its calls and copies had, as a CUDA graph does, so a runtime that
 * rebinds a buffer without patching the graph (graph_rebind) computes on the old one. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "core/core.h"
#include "scheduler/device.h"

#define SIM_QUEUE 1024

typedef enum sim_op_kind {
    SIM_CALL,
    SIM_COPY,
    SIM_GRAPH,
    SIM_GATE,
    SIM_WAIT,
    SIM_COLL,
    SIM_RECORD, /* in a graph only: an event record node */
    SIM_SEND,   /* ranks (baton_options.world): to another rank's device */
    SIM_RECV,
    SIM_WCOLL /* this rank's part of a collective over every rank */
} sim_op_kind;

struct sim_world;

/* Buffers a queued call keeps as they were at its launch (more: read when it runs). */
#define SIM_HELD_BUFS 24

typedef struct sim_op {
    sim_op_kind kind;
    dev_call *call; /* SIM_CALL */
    void **bufs;    /* SIM_CALL in a graph: its buffers as captured (owned by the graph) */
    /* SIM_CALL issued alone: its buffers as they were at the launch (a CUDA launch copies its
     * parameters, so a binding for the next run does not reach a queued one), when few enough */
    int n_held;
    void *held[SIM_HELD_BUFS];
    void *dst; /* SIM_COPY */
    const void *src;
    size_t bytes;
    int slot;                /* SIM_GRAPH; SIM_WAIT and SIM_RECORD in a graph: the event slot */
    int from, to;            /* SIM_GRAPH: the part of the graph's ops this queued op replays */
    int first, last;         /* SIM_GRAPH: the launch's first part, its last */
    int tag;                 /* in a graph: the runtime's capture_tag */
    struct dev_ctx *other;   /* SIM_WAIT: the device whose event it waits for */
    long long until;         /* SIM_WAIT: that device's completed count to wait for */
    dev_coll *coll;          /* SIM_COLL, SIM_WCOLL */
    struct sim_world *world; /* SIM_SEND, SIM_RECV, SIM_WCOLL */
    int rank, peer;          /* this device's rank, and the other side's */
} sim_op;

/* Where the members of a collective meet: the last to arrive computes it for all (on the host:
 * every member's earlier work is done by then), and the others go on when it has. */
typedef struct sim_rendezvous {
    uv_mutex_t lock;
    uv_cond_t cond;
    int arrived;
    long long round;
} sim_rendezvous;

typedef struct sim_graph {
    sim_op *ops;
    int n, cap;
    int ready;
} sim_graph;

struct dev_ctx {
    baton_device dev;
    int delay_us;
    uv_thread_t thread;
    uv_mutex_t lock;
    uv_cond_t cond; /* signalled when the queue or the completed count changes */
    sim_op queue[SIM_QUEUE];
    long long issued, done; /* operations enqueued and completed, monotonic */
    int stop;
    int gate; /* 1 while the host has opened the gate and no SIM_GATE has passed it */
    /* the first failure of queued work, reported by the next wait */
    int err_code;
    char err_msg[BATON_ERROR_MAX];
    int err_step;        /* the step whose call failed, -1 if none */
    long long *event_at; /* per event slot: the `issued` count it waits for */
    int n_events;
    sim_graph *graphs;
    int n_graphs;
    int capturing; /* graph slot + 1 while capturing */
    int capture_failed;
    int capture_had_graph;      /* the slot held a graph before this capture: an update */
    int tag;                    /* capture_tag: the op recorded next */
    _Atomic(dev_trace *) trace; /* where the worker records what it runs, or NULL */
    dev_counters counters;
    dev_fault fault;
    int rank; /* in a world of ranks (world_join), else 0 */
    /* worker only: the graph replay in progress, over its parts (its start, its first step) */
    int64_t replay_t0;
    int replay_step;
};

/* Drops a graph's operations and the buffers its calls captured. */
static void graph_clear(sim_graph *g)
{
    for (int i = 0; i < g->n; i++)
        free(g->ops[i].bufs);
    g->n = 0;
    g->ready = 0;
}

static void sim_run_op(dev_ctx *d, const sim_op *op);

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One span of the device's timeline, written by the worker (the only producer). */
static void span(dev_ctx *d, const char *name, const char *cat, int step, int lane, int64_t bytes,
                 int64_t t0)
{
    dev_trace *t = atomic_load_explicit(&d->trace, memory_order_acquire);
    if (!t)
        return;
    size_t i = atomic_load_explicit(&t->n, memory_order_relaxed);
    if (i >= t->cap) {
        atomic_fetch_add_explicit(&t->dropped, 1, memory_order_relaxed);
        return;
    }
    t->spans[i] = (dev_span){name, cat, step, lane, bytes, t0, mono_ns(), 0};
    atomic_store_explicit(&t->n, i + 1, memory_order_release);
}

static void run_call(dev_ctx *d, dev_call *c, void **bufs, int lane)
{
    int64_t t0 = atomic_load_explicit(&d->trace, memory_order_relaxed) ? mono_ns() : 0;
    int rc = c->kernel ? c->kernel(&c->ctx, bufs, c->opaque, c->opaque_len)
                       : c->delegate->execute(c->state, &c->ctx, bufs);
    if (t0)
        span(d, c->ctx.step_name, "kernel", c->ctx.step_index, lane, 0, t0);
    if (rc && !d->err_code) {
        uv_mutex_lock(&d->lock);
        d->err_code = rc < 0 ? rc : BATON_EKERNEL;
        d->err_step = c->ctx.step_index;
        snprintf(d->err_msg, sizeof d->err_msg, "%s",
                 c->ctx.errbuf && c->ctx.errbuf[0] ? c->ctx.errbuf : "the call reported a failure");
        uv_mutex_unlock(&d->lock);
    }
}

/* Holds the worker until the host opens the gate, then closes it behind the worker. */
static void gate_pass(dev_ctx *d)
{
    uv_mutex_lock(&d->lock);
    while (!d->gate && !d->stop)
        uv_cond_wait(&d->cond, &d->lock);
    d->gate = 0;
    uv_mutex_unlock(&d->lock);
}

/* SIM_WAIT: holds this worker until the other device has completed `until` operations, as a
 * stream waits for another GPU's event. */
static void wait_other(const sim_op *op)
{
    dev_ctx *o = op->other;
    uv_mutex_lock(&o->lock);
    while (o->done < op->until && !o->stop)
        uv_cond_wait(&o->cond, &o->lock);
    uv_mutex_unlock(&o->lock);
}

static void meet(const sim_op *op)
{
    dev_coll *c = op->coll;
    sim_rendezvous *r = c->impl;
    uv_mutex_lock(&r->lock);
    long long round = r->round;
    if (++r->arrived == c->n) {
        baton__dev_coll_host(c);
        r->arrived = 0;
        r->round++;
        uv_cond_broadcast(&r->cond);
    } else {
        while (r->round == round)
            uv_cond_wait(&r->cond, &r->lock);
    }
    uv_mutex_unlock(&r->lock);
}

/* ---- ranks (baton_options.world): on the test device they are threads of one process, whose
 * devices meet in a world found by its id in a process-wide registry. One lock and condition
 * for every world: the test device is about order, not speed. A send waits until the receiver
 * has copied its bytes (as a NCCL send of any size may), so a send and a receive issued out of
 * order on two ranks hang here as they would on GPUs. */

typedef struct sim_mailbox {
    const void *src;
    size_t bytes;
    int full;
} sim_mailbox;

typedef struct sim_world {
    unsigned char id[DEV_WORLD_ID_BYTES];
    int n, refs;
    int timeout_ms;  /* how long a send, receive or collective waits for the other side */
    unsigned joined; /* ranks, as bits */
    sim_mailbox box[DEV_MAX_GROUP][DEV_MAX_GROUP]; /* [from][to] */
    dev_coll acc;                                  /* the collective being assembled */
    int arrived;
    long long round;
    struct sim_world *next;
} sim_world;

static uv_once_t worlds_once = UV_ONCE_INIT;
static uv_mutex_t worlds_lock;
static uv_cond_t worlds_cond;
static sim_world *worlds;
static _Atomic unsigned long long world_serial;

static void worlds_init(void)
{
    if (uv_mutex_init(&worlds_lock) || uv_cond_init(&worlds_cond))
        abort(); /* as libuv itself does when it cannot make a lock */
}

/* The first failure of queued work on d (reported by the next host wait), from the worker. */
static void worker_fail(dev_ctx *d, int code, const char *fmt, ...) CORE_PRINTF(3, 4);
static void worker_fail(dev_ctx *d, int code, const char *fmt, ...)
{
    uv_mutex_lock(&d->lock);
    if (!d->err_code) {
        d->err_code = code;
        d->err_step = -1;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->err_msg, sizeof d->err_msg, fmt, ap);
        va_end(ap);
    }
    uv_mutex_unlock(&d->lock);
}

/* Waits on the worlds' condition (worlds_lock held), at most until `deadline`; 0 when the wait
 * timed out, so that a rank whose partner never comes fails instead of hanging. */
static int world_wait(uint64_t deadline)
{
    int64_t left = (int64_t)(deadline - (uint64_t)mono_ns());
    return left > 0 && uv_cond_timedwait(&worlds_cond, &worlds_lock, (uint64_t)left) == 0;
}

static uint64_t world_deadline(const sim_world *w)
{
    return (uint64_t)mono_ns() + (uint64_t)w->timeout_ms * 1000000u;
}

static void world_send_run(dev_ctx *d, const sim_op *op)
{
    sim_world *w = op->world;
    sim_mailbox *b = &w->box[op->rank][op->peer];
    const uint64_t deadline = world_deadline(w);
    int ok = 1;
    uv_mutex_lock(&worlds_lock);
    while (b->full && (ok = world_wait(deadline) || !b->full))
        ;
    if (ok) {
        b->src = op->src;
        b->bytes = op->bytes;
        b->full = 1;
        uv_cond_broadcast(&worlds_cond);
        while (b->full && (ok = world_wait(deadline) || !b->full)) /* until copied */
            ;
        if (!ok)
            b->full = 0; /* taken back: the receiver never came */
    }
    uv_mutex_unlock(&worlds_lock);
    if (!ok)
        worker_fail(d, BATON_ESTATE, "rank %d: rank %d did not receive within %d ms", op->rank,
                    op->peer, w->timeout_ms);
}

static void world_recv_run(dev_ctx *d, const sim_op *op)
{
    sim_world *w = op->world;
    sim_mailbox *b = &w->box[op->peer][op->rank];
    const uint64_t deadline = world_deadline(w);
    int ok = 1;
    uv_mutex_lock(&worlds_lock);
    while (!b->full && (ok = world_wait(deadline) || b->full))
        ;
    if (!ok) {
        uv_mutex_unlock(&worlds_lock);
        worker_fail(d, BATON_ESTATE, "rank %d: rank %d did not send within %d ms", op->rank,
                    op->peer, w->timeout_ms);
        return;
    }
    if (b->bytes == op->bytes)
        memcpy(op->dst, b->src, op->bytes);
    size_t got = b->bytes;
    b->full = 0;
    uv_cond_broadcast(&worlds_cond);
    uv_mutex_unlock(&worlds_lock);
    if (got != op->bytes)
        worker_fail(d, BATON_EINVAL,
                    "rank %d received %zu bytes from rank %d, expected %zu: the ranks run "
                    "different plans",
                    op->rank, got, op->peer, op->bytes);
}

static void world_coll_run(dev_ctx *d, const sim_op *op)
{
    sim_world *w = op->world;
    const dev_coll *c = op->coll;
    const uint64_t deadline = world_deadline(w);
    uv_mutex_lock(&worlds_lock);
    long long round = w->round;
    w->acc.op = c->op;
    w->acc.dtype = c->dtype;
    w->acc.count = c->count;
    w->acc.n = w->n;
    w->acc.send[op->rank] = c->send[op->rank];
    w->acc.recv[op->rank] = c->recv[op->rank];
    if (++w->arrived == w->n) {
        baton__dev_coll_host(&w->acc);
        w->arrived = 0;
        w->round++;
        uv_cond_broadcast(&worlds_cond);
    } else {
        int ok = 1;
        while (w->round == round && (ok = world_wait(deadline) || w->round != round))
            ;
        if (!ok) {
            w->arrived--; /* gone: a later round starts afresh */
            uv_mutex_unlock(&worlds_lock);
            worker_fail(d, BATON_ESTATE,
                        "rank %d: the other ranks did not reach the collective within %d ms",
                        op->rank, w->timeout_ms);
            return;
        }
    }
    uv_mutex_unlock(&worlds_lock);
}

/* opts->sim_delay_us before an operation, in whole milliseconds (what uv_sleep takes) */
static void op_delay(const dev_ctx *d)
{
    if (d->delay_us > 0)
        uv_sleep((unsigned)(d->delay_us + 999) / 1000);
}

static void sim_run_op(dev_ctx *d, const sim_op *op)
{
    op_delay(d);
    /* Waits and collectives are passed even after a fault, like gates: another device's work
     * depends on them, and its host would otherwise wait forever. */
    if (op->kind == SIM_WAIT) {
        wait_other(op);
        return;
    }
    if (op->kind == SIM_SEND) {
        world_send_run(d, op);
        return;
    }
    if (op->kind == SIM_RECV) {
        world_recv_run(d, op);
        return;
    }
    if (op->kind == SIM_WCOLL) {
        world_coll_run(d, op);
        return;
    }
    if (op->kind == SIM_COLL) {
        int64_t t0 = atomic_load_explicit(&d->trace, memory_order_relaxed) ? mono_ns() : 0;
        meet(op);
        if (t0)
            span(d, op->coll->op == DEV_COLL_ALL_REDUCE ? "all_reduce" : "all_gather", "kernel", -1,
                 0, (int64_t)(op->coll->count * baton_dtype_size(op->coll->dtype)), t0);
        return;
    }
    /* Gates are passed even after a fault (later work does not run, like a CUDA stream after
     * one): the host opens them either way, and a gate left open would let the next run's gated
     * work start before the host is ready. */
    if (op->kind == SIM_GATE) {
        gate_pass(d);
        return;
    }
    int64_t t0 = atomic_load_explicit(&d->trace, memory_order_relaxed) ? mono_ns() : 0;
    if (op->kind == SIM_GRAPH) {
        /* one launch is queued as parts split at its record nodes (sim_graph_launch); the
         * timeline shows one span from the first part's start to the last part's end */
        const sim_graph *g = &d->graphs[op->slot];
        if (op->first) {
            d->replay_t0 = t0;
            d->replay_step = -1;
        }
        int step = d->replay_step;
        for (int i = op->from; i < op->to; i++) {
            /* a graph of n operations takes as long as they would: a replay is one launch, not
             * less work, and a slow writer's graph must stay slow for the tests' races */
            if (i > op->from)
                op_delay(d);
            int64_t c0 = t0 ? mono_ns() : 0;
            if (g->ops[i].kind == SIM_GATE)
                gate_pass(d);
            else if (d->err_code)
                continue;
            else if (g->ops[i].kind == SIM_CALL) {
                run_call(d, g->ops[i].call, g->ops[i].bufs, 1);
                if (step < 0)
                    step = g->ops[i].call->ctx.step_index;
            } else if (g->ops[i].kind == SIM_COPY) {
                memcpy(g->ops[i].dst, g->ops[i].src, g->ops[i].bytes);
                if (t0)
                    span(d, "copy", "copy", -1, 1, (int64_t)g->ops[i].bytes, c0);
            }
        }
        d->replay_step = step;
        if (t0 && op->last)
            span(d, "graph", "graph", step, 0, 0, d->replay_t0 ? d->replay_t0 : t0);
        return;
    }
    if (d->err_code)
        return;
    if (op->kind == SIM_CALL)
        run_call(d, op->call, op->n_held ? (void **)op->held : op->call->buffers, 0);
    else if (op->kind == SIM_COPY) {
        memcpy(op->dst, op->src, op->bytes);
        if (t0)
            span(d, "copy", "copy", -1, 0, (int64_t)op->bytes, t0);
    }
}

static void worker(void *arg)
{
    dev_ctx *d = arg;
    uv_mutex_lock(&d->lock);
    for (;;) {
        while (d->done == d->issued && !d->stop)
            uv_cond_wait(&d->cond, &d->lock);
        if (d->done == d->issued && d->stop)
            break;
        sim_op op = d->queue[d->done % SIM_QUEUE];
        uv_mutex_unlock(&d->lock);
        sim_run_op(d, &op);
        uv_mutex_lock(&d->lock);
        d->done++;
        uv_cond_broadcast(&d->cond);
    }
    uv_mutex_unlock(&d->lock);
}

static void enqueue(dev_ctx *d, const sim_op *op)
{
    uv_mutex_lock(&d->lock);
    while (d->issued - d->done >= SIM_QUEUE)
        uv_cond_wait(&d->cond, &d->lock);
    d->queue[d->issued % SIM_QUEUE] = *op;
    d->issued++;
    uv_cond_broadcast(&d->cond);
    uv_mutex_unlock(&d->lock);
}

static int sim_open(baton_device dev, const dev_open_args *a, dev_ctx **out, baton_error *err)
{
    const baton_options *opts = a->opts;
    const int n_graphs = a->n_graphs, n_events = a->n_events;
    dev_ctx *d = calloc(1, sizeof *d);
    if (!d)
        return baton__err_set(err, BATON_ENOMEM, "sim: out of memory");
    d->dev = dev;
    d->err_step = -1;
    d->delay_us = opts ? opts->sim_delay_us : 0;
    d->n_events = n_events > 0 ? n_events : 1;
    d->n_graphs = n_graphs;
    d->event_at = calloc((size_t)d->n_events, sizeof *d->event_at);
    d->graphs = calloc((size_t)(n_graphs > 0 ? n_graphs : 1), sizeof *d->graphs);
    if (!d->event_at || !d->graphs) {
        free(d->event_at);
        free(d->graphs);
        free(d);
        return baton__err_set(err, BATON_ENOMEM, "sim: out of memory");
    }
    int rc = uv_mutex_init(&d->lock);
    if (rc == 0 && (rc = uv_cond_init(&d->cond)) != 0)
        uv_mutex_destroy(&d->lock);
    if (rc == 0 && (rc = uv_thread_create(&d->thread, worker, d)) != 0) {
        uv_cond_destroy(&d->cond);
        uv_mutex_destroy(&d->lock);
    }
    if (rc) {
        free(d->event_at);
        free(d->graphs);
        free(d);
        return baton__err_set(err, BATON_ENOMEM, "sim: cannot start the worker thread: %s",
                              uv_strerror(rc));
    }
    *out = d;
    return 0;
}

static void sim_close(dev_ctx *d)
{
    uv_mutex_lock(&d->lock);
    d->stop = 1;
    uv_cond_broadcast(&d->cond);
    uv_mutex_unlock(&d->lock);
    uv_thread_join(&d->thread);
    uv_cond_destroy(&d->cond);
    uv_mutex_destroy(&d->lock);
    for (int i = 0; i < d->n_graphs; i++) {
        graph_clear(&d->graphs[i]);
        free(d->graphs[i].ops);
    }
    free(d->graphs);
    free(d->event_at);
    free(d);
}

static void *sim_stream(dev_ctx *d)
{
    return NULL;
}

static void *sim_alloc(dev_ctx *d, size_t bytes, baton_error *err)
{
    char name[32];
    baton_device_format(d->dev, name, sizeof name);
    if (d->fault == DEV_FAULT_ALLOC) {
        d->fault = DEV_FAULT_NONE;
        baton__err_set(err, BATON_ENOMEM,
                       "%s (sim): allocation of %zu bytes failed (injected fault)", name, bytes);
        return NULL;
    }
    void *p = dev_host_zeroed(bytes);
    if (!p) {
        baton__err_set(err, BATON_ENOMEM, "%s (sim): allocation of %zu bytes failed", name, bytes);
        return NULL;
    }
    return p;
}

static void sim_free(dev_ctx *d, void *p)
{
    free(p);
}

static void sim_drain(dev_ctx *d)
{
    uv_mutex_lock(&d->lock);
    while (d->done != d->issued)
        uv_cond_wait(&d->cond, &d->lock);
    uv_mutex_unlock(&d->lock);
}

static int sim_copy_sync(dev_ctx *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind,
                         baton_error *err)
{
    sim_drain(d);
    memcpy(dst, src, bytes);
    return 0;
}

static int record_op(dev_ctx *d, const sim_op *in, baton_error *err)
{
    sim_graph *g = &d->graphs[d->capturing - 1];
    sim_op op = *in;
    op.tag = d->tag;
    if (op.kind == SIM_CALL) {
        /* the addresses as they are now: later changes reach the graph only through rebind */
        int n = op.call->ctx.sig->n_inputs + op.call->ctx.sig->n_outputs;
        op.bufs = malloc(((size_t)n + 1) * sizeof *op.bufs);
        if (!op.bufs) {
            d->capture_failed = 1;
            return baton__err_set(err, BATON_ENOMEM, "sim: out of memory while capturing");
        }
        memcpy(op.bufs, op.call->buffers, (size_t)n * sizeof *op.bufs);
    }
    if (g->n == g->cap) {
        /* Only while capturing, which happens on a segment's first graph-mode run. */
        int nc = g->cap ? g->cap * 2 : 16;
        sim_op *no = realloc(g->ops, (size_t)nc * sizeof *no);
        if (!no) {
            d->capture_failed = 1;
            free(op.bufs);
            return baton__err_set(err, BATON_ENOMEM, "sim: out of memory while capturing");
        }
        g->ops = no;
        g->cap = nc;
    }
    g->ops[g->n++] = op;
    return 0;
}

static int sim_trace_attach(dev_ctx *d, dev_trace *t, baton_error *err)
{
    (void)err;
    sim_drain(d); /* the worker is idle: it sees the new buffer from its next op on */
    atomic_store_explicit(&d->trace, t, memory_order_release);
    return 0;
}

static void sim_capture_tag(dev_ctx *d, int tag)
{
    d->tag = tag;
}

static int sim_graph_rebind(dev_ctx *d, int slot, int tag, const dev_call *c, void *dst,
                            const void *src, size_t bytes, dev_copy_kind kind, baton_error *err)
{
    (void)kind;
    if (slot < 0 || slot >= d->n_graphs || !d->graphs[slot].ready)
        return baton__err_set(err, BATON_ENOTSUP, "sim: graph %d is not captured", slot);
    /* A patch reaches only the launches after it (cudaGraphExecKernelNodeSetParams): the graph's
     * queued launches (baton_runtime_run_async) run first with the addresses they had. */
    sim_drain(d);
    sim_graph *g = &d->graphs[slot];
    int found = 0;
    for (int i = 0; i < g->n; i++) {
        sim_op *op = &g->ops[i];
        if (op->tag != tag || op->kind == SIM_GATE || op->kind == SIM_WAIT ||
            op->kind == SIM_RECORD)
            continue;
        if (op->kind == SIM_CALL && c)
            memcpy(op->bufs, c->buffers,
                   (size_t)(c->ctx.sig->n_inputs + c->ctx.sig->n_outputs) * sizeof *op->bufs);
        else if (op->kind == SIM_COPY && !c && op->bytes == bytes) {
            op->dst = dst;
            op->src = src;
        } else
            return baton__err_set(err, BATON_ENOTSUP, "sim: graph %d: op %d is not of that kind",
                                  slot, tag);
        found = 1;
    }
    return found ? 0 : baton__err_set(err, BATON_ENOTSUP, "sim: graph %d has no op %d", slot, tag);
}

static int sim_call(dev_ctx *d, dev_call *c, baton_error *err)
{
    if (d->fault == DEV_FAULT_LAUNCH) {
        d->fault = DEV_FAULT_NONE;
        return baton__err_set(err, BATON_ECUDA, "launch failed (injected fault)");
    }
    sim_op op = {.kind = SIM_CALL, .call = c};
    if (d->capturing)
        return record_op(d, &op, err);
    const int n = c->ctx.sig ? c->ctx.sig->n_inputs + c->ctx.sig->n_outputs : 0;
    if (n > 0 && n <= SIM_HELD_BUFS) {
        memcpy(op.held, c->buffers, (size_t)n * sizeof *op.held);
        op.n_held = n;
    }
    d->counters.launches++;
    enqueue(d, &op);
    return 0;
}

static int sim_copy(dev_ctx *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind,
                    const char *what, baton_error *err)
{
    char name[32];
    if (d->fault == DEV_FAULT_COPY) {
        d->fault = DEV_FAULT_NONE;
        return baton__err_set(err, BATON_ECUDA, "%s (sim): copy (%s) failed (injected fault)",
                              baton_device_format(d->dev, name, sizeof name), what);
    }
    sim_op op = {.kind = SIM_COPY, .dst = dst, .src = src, .bytes = bytes};
    if (d->capturing)
        return record_op(d, &op, err);
    enqueue(d, &op);
    return 0;
}

static int sim_record(dev_ctx *d, int slot, baton_error *err)
{
    if (slot < 0 || slot >= d->n_events)
        return baton__err_set(err, BATON_EINVAL, "sim: event slot %d out of range", slot);
    if (d->capturing) {
        sim_op op = {.kind = SIM_RECORD, .slot = slot};
        return record_op(d, &op, err);
    }
    uv_mutex_lock(&d->lock);
    d->event_at[slot] = d->issued;
    uv_mutex_unlock(&d->lock);
    return 0;
}

static int sim_failed_step(dev_ctx *d)
{
    uv_mutex_lock(&d->lock);
    int s = d->err_step;
    d->err_step = -1;
    uv_mutex_unlock(&d->lock);
    return s;
}

static int sim_wait(dev_ctx *d, int slot, const char *where, baton_error *err)
{
    (void)where;
    if (slot < 0 || slot >= d->n_events)
        return baton__err_set(err, BATON_EINVAL, "sim: event slot %d out of range", slot);
    d->counters.host_waits++;
    uv_mutex_lock(&d->lock);
    while (d->done < d->event_at[slot])
        uv_cond_wait(&d->cond, &d->lock);
    int rc = d->err_code;
    if (rc) {
        /* the reason only: the runtime names the step (sim_failed_step) */
        baton__err_set(err, rc, "%s", d->err_msg);
        d->err_code = 0;
    }
    uv_mutex_unlock(&d->lock);
    return rc;
}

static void sim_drain_clear(dev_ctx *d)
{
    sim_drain(d);
    uv_mutex_lock(&d->lock);
    d->err_code = 0;
    uv_mutex_unlock(&d->lock);
}

static int sim_capture_begin(dev_ctx *d, int slot, baton_error *err)
{
    if (slot < 0 || slot >= d->n_graphs)
        return baton__err_set(err, BATON_EINVAL, "sim: graph slot %d out of range", slot);
    d->capture_had_graph = d->graphs[slot].ready;
    graph_clear(&d->graphs[slot]);
    d->tag = -1;
    d->capturing = slot + 1;
    d->capture_failed = 0;
    return 0;
}

static int sim_capture_end(dev_ctx *d, int slot, int *updated, baton_error *err)
{
    char name[32];
    d->capturing = 0;
    if (updated)
        *updated = 0;
    if (d->fault == DEV_FAULT_CAPTURE) {
        d->fault = DEV_FAULT_NONE;
        graph_clear(&d->graphs[slot]);
        return baton__err_set(err, BATON_ENOTSUP,
                              "%s (sim): capture of the segment failed (injected fault)",
                              baton_device_format(d->dev, name, sizeof name));
    }
    if (d->capture_failed) {
        graph_clear(&d->graphs[slot]);
        return baton__err_set(err, BATON_ENOTSUP, "sim: capture failed");
    }
    d->graphs[slot].ready = 1;
    if (updated)
        *updated = d->capture_had_graph;
    return 0;
}

/* Event nodes: a graph's waits for other devices are taken at its launch (the other device's
 * latest record then, as a CUDA graph's wait node does) and run before the graph; a record node
 * marks the point of the graph where it was captured: the launch is queued in parts split at the
 * records, each record marking the end of the part before it. The runtime captures waits first,
 * so this is the order it asked for. */
static int sim_graph_launch(dev_ctx *d, int slot, baton_error *err)
{
    if (slot < 0 || slot >= d->n_graphs || !d->graphs[slot].ready)
        return baton__err_set(err, BATON_ESTATE, "sim: graph %d was not captured", slot);
    d->counters.graph_launches++;
    const sim_graph *g = &d->graphs[slot];
    for (int i = 0; i < g->n; i++)
        if (g->ops[i].kind == SIM_WAIT) {
            dev_ctx *o = g->ops[i].other;
            uv_mutex_lock(&o->lock);
            sim_op w = {.kind = SIM_WAIT, .other = o, .until = o->event_at[g->ops[i].slot]};
            uv_mutex_unlock(&o->lock);
            enqueue(d, &w);
        }
    int end = 0; /* past the last op that is not a record */
    for (int i = 0; i < g->n; i++)
        if (g->ops[i].kind != SIM_RECORD)
            end = i + 1;
    int from = 0, first = 1;
    for (int i = 0; i <= g->n; i++) {
        if (i < g->n && g->ops[i].kind != SIM_RECORD)
            continue;
        if (i > from) { /* the ops before this record (or the graph's end) */
            sim_op op = {.kind = SIM_GRAPH,
                         .slot = slot,
                         .from = from,
                         .to = i,
                         .first = first,
                         .last = i >= end};
            enqueue(d, &op);
            first = 0;
        }
        if (i < g->n)
            sim_record(d, g->ops[i].slot, err);
        from = i + 1;
    }
    return 0;
}

static void sim_graph_reset(dev_ctx *d, int slot)
{
    if (slot >= 0 && slot < d->n_graphs)
        graph_clear(&d->graphs[slot]);
}

static int sim_can_gate(dev_ctx *d)
{
    return 1;
}

static int sim_gate_wait(dev_ctx *d, baton_error *err)
{
    sim_op op = {.kind = SIM_GATE};
    if (d->capturing)
        return record_op(d, &op, err);
    enqueue(d, &op);
    return 0;
}

static void sim_gate_open(dev_ctx *d)
{
    uv_mutex_lock(&d->lock);
    d->gate = 1;
    uv_cond_broadcast(&d->cond);
    uv_mutex_unlock(&d->lock);
}

static int sim_stream_wait(dev_ctx *d, dev_ctx *other, int slot, baton_error *err)
{
    if (slot < 0 || slot >= other->n_events)
        return baton__err_set(err, BATON_EINVAL, "sim: event slot %d out of range", slot);
    if (d->capturing) {
        sim_op op = {.kind = SIM_WAIT, .other = other, .slot = slot};
        return record_op(d, &op, err);
    }
    uv_mutex_lock(&other->lock);
    long long until = other->event_at[slot];
    uv_mutex_unlock(&other->lock);
    sim_op op = {.kind = SIM_WAIT, .other = other, .until = until};
    d->counters.peer_waits++;
    enqueue(d, &op);
    return 0;
}

static int sim_coll_prepare(dev_coll *c, baton_error *err)
{
    sim_rendezvous *r = calloc(1, sizeof *r);
    if (!r)
        return baton__err_set(err, BATON_ENOMEM, "sim: out of memory");
    if (uv_mutex_init(&r->lock)) {
        free(r);
        return baton__err_set(err, BATON_ENOMEM, "sim: uv_mutex_init failed");
    }
    if (uv_cond_init(&r->cond)) {
        uv_mutex_destroy(&r->lock);
        free(r);
        return baton__err_set(err, BATON_ENOMEM, "sim: uv_cond_init failed");
    }
    c->impl = r;
    return 0;
}

static int sim_coll_run(dev_coll *c, baton_error *err)
{
    for (int m = 0; m < c->n; m++)
        if (c->group[m]->capturing)
            return baton__err_set(err, BATON_EINVAL, "sim: a collective inside a capture");
    for (int m = 0; m < c->n; m++) {
        sim_op op = {.kind = SIM_COLL, .coll = c};
        c->group[m]->counters.launches++;
        enqueue(c->group[m], &op);
    }
    return 0;
}

static void sim_coll_release(dev_coll *c)
{
    sim_rendezvous *r = c->impl;
    if (!r)
        return;
    uv_cond_destroy(&r->cond);
    uv_mutex_destroy(&r->lock);
    free(r);
    c->impl = NULL;
}

static int sim_world_id(unsigned char *id, baton_error *err)
{
    (void)err;
    memset(id, 0, DEV_WORLD_ID_BYTES);
    snprintf((char *)id, DEV_WORLD_ID_BYTES, "sim-world %llu %lld %llu",
             (unsigned long long)uv_os_getpid(), (long long)mono_ns(),
             (unsigned long long)++world_serial);
    return 0;
}

static void sim_world_leave(void *wp)
{
    sim_world *w = wp;
    if (!w)
        return;
    uv_mutex_lock(&worlds_lock);
    if (--w->refs == 0) {
        for (sim_world **p = &worlds; *p; p = &(*p)->next)
            if (*p == w) {
                *p = w->next;
                break;
            }
        free(w);
    }
    uv_mutex_unlock(&worlds_lock);
}

static int sim_world_join(dev_ctx *d, const unsigned char *id, int rank, int world, int timeout_ms,
                          void **out, baton_error *err)
{
    *out = NULL;
    if (world < 1 || world > DEV_MAX_GROUP || rank < 0 || rank >= world)
        return baton__err_set(err, BATON_EINVAL, "sim: rank %d of %d: out of range (at most %d)",
                              rank, world, DEV_MAX_GROUP);
    uv_once(&worlds_once, worlds_init);
    uv_mutex_lock(&worlds_lock);
    sim_world *w = worlds;
    while (w && memcmp(w->id, id, DEV_WORLD_ID_BYTES) != 0)
        w = w->next;
    if (!w) {
        w = calloc(1, sizeof *w);
        if (!w) {
            uv_mutex_unlock(&worlds_lock);
            return baton__err_set(err, BATON_ENOMEM, "sim: out of memory");
        }
        memcpy(w->id, id, DEV_WORLD_ID_BYTES);
        w->n = world;
        w->timeout_ms = timeout_ms;
        w->next = worlds;
        worlds = w;
    }
    int rc = 0;
    if (w->n != world)
        rc = baton__err_set(err, BATON_EINVAL,
                            "sim: rank %d joins a world of %d ranks as one of %d: the ranks "
                            "disagree on baton_options.world",
                            rank, w->n, world);
    else if (w->joined >> rank & 1u)
        rc = baton__err_set(err, BATON_EINVAL,
                            "sim: rank %d has joined this world already: two processes (or "
                            "threads) were given the same baton_options.rank",
                            rank);
    if (rc) {
        uv_mutex_unlock(&worlds_lock);
        return rc;
    }
    w->joined |= 1u << rank;
    w->refs++;
    uv_cond_broadcast(&worlds_cond);
    const uint64_t deadline = (uint64_t)mono_ns() + (uint64_t)timeout_ms * 1000000u;
    const unsigned all = (1u << world) - 1; /* world <= DEV_MAX_GROUP */
    while (w->joined != all) {
        int64_t left = (int64_t)(deadline - (uint64_t)mono_ns());
        if (left <= 0 ||
            uv_cond_timedwait(&worlds_cond, &worlds_lock, (uint64_t)left) == UV_ETIMEDOUT) {
            if (w->joined == all)
                break;
            int n = __builtin_popcount(w->joined);
            w->joined &= ~(1u << rank);
            uv_mutex_unlock(&worlds_lock);
            sim_world_leave(w);
            return baton__err_set(
                err, BATON_ESTATE,
                "sim: rank %d: %d of %d ranks joined within %d ms; start "
                "every rank, with the same rendezvous (on the test device, ranks are threads "
                "of one process)",
                rank, n, world, timeout_ms);
        }
    }
    uv_mutex_unlock(&worlds_lock);
    d->rank = rank;
    *out = w;
    return 0;
}

static int world_op(dev_ctx *d, sim_op *op, baton_error *err)
{
    if (d->capturing)
        return baton__err_set(err, BATON_EINVAL,
                              "sim: a send, receive or collective between "
                              "ranks inside a capture");
    d->counters.launches++;
    enqueue(d, op);
    return 0;
}

static int sim_world_send(void *w, dev_ctx *d, const void *src, size_t bytes, int peer,
                          baton_error *err)
{
    sim_op op = {.kind = SIM_SEND, .world = w, .src = src, .bytes = bytes, .peer = peer};
    op.rank = d->rank;
    return world_op(d, &op, err);
}

static int sim_world_recv(void *w, dev_ctx *d, void *dst, size_t bytes, int peer, baton_error *err)
{
    sim_op op = {.kind = SIM_RECV, .world = w, .dst = dst, .bytes = bytes, .peer = peer};
    op.rank = d->rank;
    return world_op(d, &op, err);
}

static int sim_world_coll(void *w, dev_ctx *d, const dev_coll *c, int rank, baton_error *err)
{
    sim_op op = {.kind = SIM_WCOLL, .world = w, .coll = (dev_coll *)c, .rank = rank};
    return world_op(d, &op, err);
}

static int sim_supports_pdl(dev_ctx *d)
{
    return 0;
}

static void sim_counters(dev_ctx *d, dev_counters *out)
{
    *out = d->counters;
}

#ifdef BATON_TESTING
static void sim_inject(dev_ctx *d, dev_fault fault)
{
    d->fault = fault;
}
#endif

const dev_ops baton__dev_sim_ops = {
    .name = "sim",
    .label = "test device",
    .caps = DEV_CAP_ASYNC | DEV_CAP_CPU_KERNELS | DEV_CAP_DEVICE_MEMORY | DEV_CAP_CAPTURE_ANY |
            DEV_CAP_EVENT_NODES,
    .open = sim_open,
    .close = sim_close,
    .stream = sim_stream,
    .alloc = sim_alloc,
    .free = sim_free,
    .host_alloc = sim_alloc,
    .host_free = sim_free,
    .copy_sync = sim_copy_sync,
    .call = sim_call,
    .copy = sim_copy,
    .record = sim_record,
    .wait = sim_wait,
    .failed_step = sim_failed_step,
    .drain = sim_drain_clear,
    .capture_begin = sim_capture_begin,
    .capture_end = sim_capture_end,
    .graph_launch = sim_graph_launch,
    .graph_reset = sim_graph_reset,
    .can_gate = sim_can_gate,
    .gate_wait = sim_gate_wait,
    .gate_open = sim_gate_open,
    .supports_pdl = sim_supports_pdl,
    .counters = sim_counters,
    .capture_tag = sim_capture_tag,
    .graph_rebind = sim_graph_rebind,
    .trace_attach = sim_trace_attach,
    .trace_sync = sim_drain,
    .stream_wait = sim_stream_wait,
    .coll_prepare = sim_coll_prepare,
    .coll_run = sim_coll_run,
    .coll_release = sim_coll_release,
    .world_id = sim_world_id,
    .world_join = sim_world_join,
    .world_leave = sim_world_leave,
    .world_send = sim_world_send,
    .world_recv = sim_world_recv,
    .world_coll = sim_world_coll,
#ifdef BATON_TESTING
    .inject = sim_inject,
#endif
};
