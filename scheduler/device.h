/* device.h: the scheduler's device layer. The scheduler decides *when* to wait and what to
 * capture; a device decides *how*: the CPU runs calls inline, CUDA enqueues them on one stream
 * per GPU, and the test device ("sim") runs them on a worker thread that behaves like a stream,
 * so that the scheduler's sync logic is tested on machines without a GPU.
 *
 * A function that fails fills err with the REASON only (the CUDA call that failed, or what the
 * kernel wrote): the runtime adds the step, its target and its device once, in the same words on
 * every backend. Nothing here allocates after open() except alloc()/host_alloc(), which the
 * runtime calls at prepare time. */
#ifndef BATON_SCHEDULER_DEVICE_H
#define BATON_SCHEDULER_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "baton/baton.h"
#include "core/tune.h"

typedef struct dev_ctx dev_ctx; /* one per device a runtime uses; defined by each backend */
struct dev_counters;            /* below */

/* One call of a kernel or delegate, built once at prepare time and reused by every run. */
typedef struct dev_call {
    baton_kernel_fn kernel;               /* kernels */
    const baton_delegate_iface *delegate; /* delegates */
    void *state;                          /* the delegate's state */
    void **buffers;                       /* inputs then outputs, addresses on this device */
    const char *opaque;
    size_t opaque_len;
    baton_exec_ctx ctx; /* stream, next device...; errbuf points at per-call storage */
    /* The call's kernel honours programmatic dependent launch and the run allows it. The device
     * then sets ctx.pdl on each issue where the op before it on the stream is a kernel (any
     * kernel: a pdl_wait waits for that grid's completion and its writes, whether or not the
     * grid triggers); ctx.pdl is the device's to set. */
    int pdl;
} dev_call;

typedef enum dev_copy_kind { DEV_COPY_H2D = 0, DEV_COPY_D2H = 1, DEV_COPY_D2D = 2 } dev_copy_kind;

/* Counters a device keeps (the runtime sums them into baton_run_stats). */
typedef struct dev_counters {
    long long host_waits;
    long long launches; /* calls issued outside graphs */
    long long graph_launches;
    long long peer_waits; /* stream_wait() calls issued on the stream, not captured into a graph */
} dev_counters;

/* Faults a test can inject into a device (one shot each). */
typedef enum dev_fault {
    DEV_FAULT_NONE = 0,
    DEV_FAULT_ALLOC,   /* the next alloc() fails */
    DEV_FAULT_LAUNCH,  /* the next call() fails as a failed launch */
    DEV_FAULT_CAPTURE, /* the next capture_end() fails */
    DEV_FAULT_COPY     /* the next copy() fails */
} dev_fault;

/* What a device ran, for the trace's device tracks: times on CLOCK_MONOTONIC in ns (the host's
 * clock), so host and device spans share one timeline. */
typedef struct dev_span {
    const char *name; /* a step's name, "copy", "graph", or a kernel's name (static strings) */
    const char *cat;  /* "kernel", "copy", "graph" */
    int step;         /* the step it belongs to, or -1 */
    int lane;         /* 0: the stream; 1: inside a graph replay */
    int64_t bytes, t0, t1;
    uint32_t corr; /* CUDA: the launch's correlation id (resolved to `step` when synced) */
} dev_span;

#ifdef __cplusplus
typedef size_t dev_atomic_size; /* the CUDA files in C++ include this header, never trace */
#else
#include <stdatomic.h>
typedef atomic_size_t dev_atomic_size;
#endif

/* Room for spans, filled by the device (its worker thread, or its activity callbacks): one
 * producer, read by the runtime after trace_sync(). */
typedef struct dev_trace {
    dev_span *spans;
    size_t cap;
    dev_atomic_size n, dropped;
} dev_trace;

/* A collective over a group of devices of one backend (a plan's collective step), set up at
 * prepare time: member k sends send[k] and receives into recv[k], both on group device k. */
typedef enum dev_coll_op { DEV_COLL_ALL_REDUCE = 1, DEV_COLL_ALL_GATHER = 2 } dev_coll_op;

#define DEV_MAX_GROUP      16
#define DEV_WORLD_ID_BYTES 128 /* NCCL's ncclUniqueId */

typedef struct dev_coll {
    dev_coll_op op;
    baton_dtype dtype;
    size_t count; /* elements of each send buffer */
    int n;        /* devices in the group */
    dev_ctx *group[DEV_MAX_GROUP];
    const void *send[DEV_MAX_GROUP];
    void *recv[DEV_MAX_GROUP];
    const char *what; /* "step 'x' (all_reduce over cuda:0, cuda:1)", for messages */
    void *impl;       /* the backend's (communicators, a rendezvous), from coll_prepare */
} dev_coll;

/* The collective on the host, in group order: what the CPU and the test device run. all_reduce
 * sums each element as the CPU's `add` kernel does (in double, rounded once to the dtype;
 * integers wrap), so a sum over two devices has the bits of `add` on one. */
void baton__dev_coll_host(const dev_coll *c);

/* What a backend can do, so that the runtime asks instead of comparing tables (ggml's
 * ggml_backend_dev_caps). Read through dev_has() and the wrappers below. */
enum dev_cap {
    /* Calls and copies are queued on a stream and finish later: a host wait is a real wait and a
     * call is a launch. Without it the device runs them inline, on the calling thread (the CPU). */
    DEV_CAP_ASYNC = 1u << 0,
    /* The device runs the targets' CPU implementations (the CPU, and the test device that stands
     * for a GPU); without it, their implementation for the device's own kind (CUDA). */
    DEV_CAP_CPU_KERNELS = 1u << 1,
    /* alloc() gives memory of the device's own, which a caller's buffer may stand for
     * (baton_runtime_bind on the device); without it the device's memory is the host's. */
    DEV_CAP_DEVICE_MEMORY = 1u << 2,
    /* A graph records any call, so a delegate that CUDA graphs cannot capture is captured too. */
    DEV_CAP_CAPTURE_ANY = 1u << 3,
    /* The device runs on a caller's stream (baton_options.streams). */
    DEV_CAP_CALLER_STREAM = 1u << 4,
    /* record() and stream_wait() issued during a capture become nodes of the graph: each launch
     * waits, where the wait was captured, for the latest record of the other device's event
     * issued before the launch, and records its own event where the record was captured. */
    DEV_CAP_EVENT_NODES = 1u << 5,
};

/* What a device is opened with: the runtime's options, the number of graph slots and event slots
 * it needs (one graph per GPU segment and one event per boundary), and the priority of the stream
 * it creates, level `prio_rank` of `prio_of`, 0 the highest (prio_of < 2: the default; a pool's
 * BATON_POOL_PRIORITIES; only the CUDA device has priorities, and only for a stream of its own). */
typedef struct dev_open_args {
    const baton_options *opts;
    int n_graphs, n_events;
    int prio_rank, prio_of;
} dev_open_args;

typedef struct dev_ops {
    const char *name;  /* "cpu", "cuda", "sim" */
    const char *label; /* the device in a trace's words: "CPU", "GPU", "test device" */
    unsigned caps;     /* enum dev_cap bits */
    /* Opens a device for a runtime (a stream, a worker, a handle). */
    int (*open)(baton_device dev, const dev_open_args *a, dev_ctx **out, baton_error *err);
    void (*close)(dev_ctx *d);
    /* The device's stream (cudaStream_t), or NULL. */
    void *(*stream)(dev_ctx *d);
    /* Device memory, zeroed. NULL on failure. */
    void *(*alloc)(dev_ctx *d, size_t bytes, baton_error *err);
    void (*free)(dev_ctx *d, void *p);
    /* Host memory that this device can copy from and to asynchronously (pinned for CUDA). */
    void *(*host_alloc)(dev_ctx *d, size_t bytes, baton_error *err);
    void (*host_free)(dev_ctx *d, void *p);
    /* Synchronous copy for prepare time (constants) and for reading results. */
    int (*copy_sync)(dev_ctx *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind,
                     baton_error *err);
    /* Prepare time: about `bytes` of constants are to be copied in with copy_sync() (0: done).
     * The CUDA device then copies from pageable host memory through pinned staging buffers,
     * allocated here and freed at 0. NULL: copy_sync() is as fast from any memory. */
    void (*stage_uploads)(dev_ctx *d, size_t bytes);

    /* ---- the hot path: nothing below allocates ---- */
    /* Issues a call on the device's stream (or runs it, on the CPU). */
    int (*call)(dev_ctx *d, dev_call *c, baton_error *err);
    /* Issues an asynchronous copy on the stream. */
    int (*copy)(dev_ctx *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind,
                const char *what, baton_error *err);
    /* Records event `slot` after the work issued so far. */
    int (*record)(dev_ctx *d, int slot, baton_error *err);
    /* Blocks the host until event `slot` has completed; reports errors of earlier async work. */
    int (*wait)(dev_ctx *d, int slot, const char *where, baton_error *err);
    /* After wait() failed: the step index (dev_call ctx.step_index) whose call failed
     * asynchronously, or -1 when the device cannot tell (a CUDA error surfaces at the wait with
     * no step attached). The runtime names that step once. NULL: always -1. */
    int (*failed_step)(dev_ctx *d);
    /* Blocks until all issued work is done (used on failure paths to drain the stream). */
    void (*drain)(dev_ctx *d);

    /* Graphs; NULL when the device cannot capture. Between begin and end, call() and copy()
     * record instead of issuing. end() instantiates (or updates) graph `slot`; it returns
     * BATON_ENOTSUP with a reason in err when the segment cannot be captured. */
    int (*capture_begin)(dev_ctx *d, int slot, baton_error *err);
    int (*capture_end)(dev_ctx *d, int slot, int *updated, baton_error *err);
    int (*graph_launch)(dev_ctx *d, int slot, baton_error *err);
    /* Drops graph `slot` so that the next run captures it again. */
    void (*graph_reset)(dev_ctx *d, int slot);
    /* The device's gate, for queueing a GPU segment before the CPU segment that feeds it runs
     * (NULL, or can_gate() 0, when the device has none). gate_wait() makes the stream, or the
     * capture in progress, wait until the host opens the gate, then close it again behind
     * itself; gate_open() opens it from the host once the host has written what the gated work
     * reads. One gate per device: the scheduler queues at most one segment ahead, and opens the
     * gate before it drains a stream. */
    int (*can_gate)(dev_ctx *d);
    int (*gate_wait)(dev_ctx *d, baton_error *err);
    void (*gate_open)(dev_ctx *d);
    /* Whether a kernel launched here may use programmatic dependent launch. */
    int (*supports_pdl)(dev_ctx *d);
    /* Copies the context's counters since open() (host waits; calls issued outside a capture)
     * into *out. NULL: the device keeps none. */
    void (*counters)(dev_ctx *d, struct dev_counters *out);
    /* Testing: makes the next operation of that kind fail once (see dev_fault). NULL: the
     * device cannot inject faults. */
    void (*inject)(dev_ctx *d, dev_fault fault);

    /* Caller-owned memory (baton_options.arenas, baton_runtime_bind). mem_check() says whether
     * `bytes` at p are memory this device can use as its own (host: pinned host memory it can
     * copy from asynchronously; else memory on this device), with the reason in err when not.
     * NULL: any memory will do (the CPU and the test device). */
    int (*mem_check)(dev_ctx *d, const void *p, size_t bytes, int host, baton_error *err);
    /* Rebinding: a captured graph holds the addresses its calls and copies had at capture.
     * During a capture, capture_tag() names the op issued next (a tag >= 0; -1: what is issued
     * next, such as an event node, belongs to no op that is ever rebound). graph_rebind() then
     * sets the nodes of graph `slot` that op `tag` made to new addresses: a call's current
     * c->buffers (c not NULL), or a copy's dst and src. BATON_ENOTSUP, with the reason in err,
     * when it cannot (the runtime then captures the segment again). NULL: never possible. */
    void (*capture_tag)(dev_ctx *d, int tag);
    int (*graph_rebind)(dev_ctx *d, int slot, int tag, const dev_call *c, void *dst,
                        const void *src, size_t bytes, dev_copy_kind kind, baton_error *err);
    /* Device timelines: trace_attach() starts recording what the device runs into t (NULL: stop);
     * BATON_ENOTSUP with a reason when this build or machine cannot. trace_sync() returns once
     * the spans of all work completed so far are in t. NULL: no timeline (the CPU). */
    int (*trace_attach)(dev_ctx *d, dev_trace *t, baton_error *err);
    void (*trace_sync)(dev_ctx *d);

    /* Several GPUs (NULL: the device cannot; the runtime then refuses such a plan at prepare).
     * stream_wait() makes d's stream wait, without the host, until event `slot` of `other` (a
     * device of the same backend, recorded before) has completed. peer_enable() lets d's context
     * read and write other's memory directly where the hardware allows (else copies between them
     * are staged through the host; the runtime calls it both ways);
     * 0 either way. coll_prepare() sets up a collective over c->group (on the group's first
     * device's ops; the members share one backend), coll_run() issues it on every member's
     * stream, each member waiting for its own earlier work only, and coll_release() frees what
     * coll_prepare() made. */
    int (*stream_wait)(dev_ctx *d, dev_ctx *other, int slot, baton_error *err);
    int (*peer_enable)(dev_ctx *d, dev_ctx *other, baton_error *err);
    int (*coll_prepare)(dev_coll *c, baton_error *err);
    int (*coll_run)(dev_coll *c, baton_error *err);
    void (*coll_release)(dev_coll *c);
    /* One process per GPU (baton_options.world): this runtime's device d is rank `rank` of
     * `world` ranks, one device each, of this backend, that find each other through an id of
     * DEV_WORLD_ID_BYTES (the same on every rank: rank 0 made it with world_id() and handed it
     * over, scheduler/world.c). world_join() returns once every rank has joined, or fails after
     * timeout_ms. The rest are issued on d's stream and run in its order: world_send() and
     * world_recv() move `bytes` to and from rank `peer` (a send and a receive between two ranks
     * match in the order they were issued; each holds its stream until the other side has
     * posted), and world_coll() issues this rank's part of collective c over every rank (c->n ==
     * world; only c->send[rank] and c->recv[rank] are read). NULL: the backend has no ranks. */
    int (*world_id)(unsigned char *id, baton_error *err);
    int (*world_join)(dev_ctx *d, const unsigned char *id, int rank, int world, int timeout_ms,
                      void **out, baton_error *err);
    void (*world_leave)(void *w);
    int (*world_send)(void *w, dev_ctx *d, const void *src, size_t bytes, int peer,
                      baton_error *err);
    int (*world_recv)(void *w, dev_ctx *d, void *dst, size_t bytes, int peer, baton_error *err);
    int (*world_coll)(void *w, dev_ctx *d, const dev_coll *c, int rank, baton_error *err);
    /* Prepare-time tuning of kernel call c (core/tune.h): runs `tune` on c's buffers and the
     * device's stream, outside any capture, and returns once its work is done, with its account
     * in note. NULL: the device does not tune (the CPU, the test device). */
    int (*tune)(dev_ctx *d, dev_call *c, kernel_tune_fn tune, char *note, size_t note_len,
                baton_error *err);
    /* Prepare-time decision of kernel call c (core/tune.h): runs `prepare` for c on this device,
     * outside any capture, and stores what it keeps in *state (NULL: nothing). NULL: the device's
     * kernels decide on every call (the CPU, the test device). */
    int (*prepare_call)(dev_ctx *d, dev_call *c, kernel_prepare_fn prepare, void **state,
                        baton_error *err);
} dev_ops;

static inline int dev_has(const dev_ops *ops, unsigned cap)
{
    return (ops->caps & cap) == cap;
}

/* The optional slots, with their defaults (a NULL slot means "not supported"). */
static inline int dev_can_capture(const dev_ops *ops)
{
    return ops->capture_begin != NULL;
}

static inline int dev_can_gate(const dev_ops *ops, dev_ctx *d)
{
    return ops->can_gate && ops->can_gate(d);
}

static inline int dev_supports_pdl(const dev_ops *ops, dev_ctx *d)
{
    return ops->supports_pdl && ops->supports_pdl(d);
}

static inline int dev_can_tune(const dev_ops *ops)
{
    return ops->tune != NULL;
}

static inline int dev_can_prepare_calls(const dev_ops *ops)
{
    return ops->prepare_call != NULL;
}

/* 0 when the device takes any memory (no mem_check). */
static inline int dev_mem_check(const dev_ops *ops, dev_ctx *d, const void *p, size_t bytes,
                                int host, baton_error *err)
{
    return ops->mem_check ? ops->mem_check(d, p, bytes, host, err) : 0;
}

/* The step that failed asynchronously, or -1 (no failed_step). */
static inline int dev_failed_step(const dev_ops *ops, dev_ctx *d)
{
    return ops->failed_step ? ops->failed_step(d) : -1;
}

static inline int dev_can_order_peers(const dev_ops *ops)
{
    return ops->stream_wait != NULL;
}

static inline int dev_has_ranks(const dev_ops *ops)
{
    return ops->world_id && ops->world_join && ops->world_send && ops->world_recv &&
           ops->world_coll;
}

static inline int dev_has_collectives(const dev_ops *ops)
{
    return ops->coll_prepare && ops->coll_run;
}

/* Zeroed host memory aligned to 256 bytes, as the memory plan's offsets assume; NULL on failure.
 * The CPU and test devices allocate their arenas with it (free() releases it). */
static inline void *dev_host_zeroed(size_t bytes)
{
    size_t n = (bytes + 255) & ~(size_t)255;
    void *p = aligned_alloc(256, n ? n : 256);
    if (p)
        memset(p, 0, n ? n : 256);
    return p;
}

/* Testing builds: with this environment variable set to 1, the runtime opens a plan's cuda:N on
 * GPU N % count (each with its own stream), so that a one-GPU machine runs the multi-GPU paths
 * (events between streams, copies between "GPUs", graphs) on one GPU. NCCL refuses such a group. */
#define DEV_TEST_CUDA_ALIAS "BATON_TEST_CUDA_ALIAS"

extern const dev_ops baton__dev_cpu_ops;
extern const dev_ops baton__dev_sim_ops;
#ifdef BATON_CUDA
extern const dev_ops baton__dev_cuda_ops;
#endif

#endif /* BATON_SCHEDULER_DEVICE_H */
