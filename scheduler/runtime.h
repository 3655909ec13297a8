/* runtime.h: the runtime's state, shared by the files of scheduler/ that make up baton_runtime:
 * prepare.c (create and destroy), bind.c (inputs, outputs and caller-owned buffers), run.c (the
 * run loop), stats.c (counters and accessors), trace.c (step timing and the Chrome trace) and, in
 * testing builds, testing.c (fault injection). Private to scheduler/. */
#ifndef BATON_SCHEDULER_RUNTIME_H
#define BATON_SCHEDULER_RUNTIME_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "plan/plan_internal.h"
#include "scheduler/device.h"

#define ERRBUF_LEN      512
#define RT_MAX_DEFERRED 4 /* create's warning (a fallback) and notes (ignored streams) */
#define WAIT_SLOT       0
/* The event a GPU records after segment s when another GPU reads what s wrote. */
/* Graph mode's choice of where the order between GPUs lives (baton_runtime.event_nodes): "0"
 * keeps the waits and records outside the graphs, on the streams; anything else, or unset, puts
 * them into the graphs as event nodes. Read at baton_runtime_create. */
#define RT_EVENT_NODES_ENV "BATON_GRAPH_EVENT_NODES"
/* The end of a run on several GPUs: "0" records each GPU's end-of-run event only when the host
 * comes to wait for it, after the waits for the GPUs before it; anything else, or unset, records
 * every GPU's first and then waits (baton_runtime.end_records_first). Read at
 * baton_runtime_create, so that one process can time both. */
#define RT_END_RECORDS_ENV "BATON_END_RECORDS_FIRST"
#define SEG_EVENT(s)       (1 + (s))
/* The event a GPU records after segment s once it has copied what other GPUs wrote for s, in
 * runs queued without the host's wait (run_async): the writers' next run waits for it before it
 * writes those slots again. One per segment, after the SEG_EVENTs. */
#define READ_EVENT(rt, s) (SEG_EVENT((rt)->plan->n_segments) + (s))
/* The most operations a segment queued ahead may issue outside a graph (when it cannot be
 * captured): a stream's queue is finite, and a full one behind a closed gate would block the host
 * that must open it. */
#define AHEAD_MAX_OPS 256
/* The longest delay the test device accepts before each queued op (baton_options.sim_delay_us). */
#define RT_MAX_SIM_DELAY_US 1000000

typedef struct rt_device {
    const dev_ops *ops;
    dev_ctx *ctx;
    char *arena;
    int gpu;      /* the plan places GPU steps here (cuda:N), whatever executes them */
    int pending;  /* work issued since the host last waited */
    int host_mem; /* the arena came from host_alloc (the CPU's, pinned when a GPU exists) */
    const dev_ops *arena_ops;
    dev_ctx *arena_ctx;
    /* A tensor at arena offset `off` lives at consts + off below the plan's const_bytes (the
     * constants, placed first) and at priv + (off - const_bytes) above. A runtime that owns its
     * constants has one allocation, `arena`, with consts = arena and priv = arena + const_bytes;
     * an instance that shares another runtime's constants allocates only the private part. */
    char *consts;
    char *priv;
    int recorded;   /* WAIT_SLOT was recorded before work queued ahead: the next wait uses it */
    int queued;     /* work was queued after that event: still pending after the wait */
    int gate_armed; /* a gate wait is in the stream and the host has not opened it yet */
    int own_arena;  /* the arena is baton's (not the caller's baton_options.arenas) */
    /* one process per GPU (baton_options.world): another rank's GPU. It is not opened (ctx NULL,
     * no arena: its tensors have no address here) and nothing is issued on it. */
    int remote;
} rt_device;

/* A place that holds the address of an input or output tensor on one device: a step's buffer
 * (buf >= 0, the index into bufs) or a transfer's end (xfer >= 0; src or dst per `src`). Binding
 * a caller's buffer rewrites these. */
typedef struct rt_site {
    int tensor, dev;
    int buf, step; /* a step's buffer, or -1 */
    int xfer, src; /* a transfer's source (src 1) or destination, or -1 */
} rt_site;

typedef struct rt_transfer {
    void *dst;
    const void *src;
    size_t bytes;
    dev_copy_kind kind;
    int issuer;    /* device index whose stream issues the copy */
    int from;      /* device index of the source */
    int host_copy; /* host memory to host memory (the CPU fallback): not counted as a transfer */
    int skip;      /* not issued: a caller's buffer bound on the GPU makes it needless */
    int graph_seg; /* the segment whose graph issues it (set when captured), or -1 */
    int wait_seg;  /* GPU to GPU: the writer's segment, whose event the reader waits for; or -1 */
    /* one process per GPU: the rank this one sends the tensor to (send 1) or receives it from,
     * or -1; absent: between devices this rank does not run, so not issued here */
    int peer, send, absent;
    char what[96];
} rt_transfer;

typedef struct trace_event {
    const char *name;
    const char *cat;
    int tid;  /* the host lane: a device index, or TRACE_RUN_LANE */
    int step; /* or -1 */
    int64_t run, bytes;
    int64_t ts_ns, dur_ns;
} trace_event;

#define TRACE_RUN_LANE 99

struct baton_runtime {
    const baton_plan *plan;
    baton_options opts;
    baton_gpu_backend backend; /* what GPU steps actually run on */
    int alias_gpus; /* testing (DEV_TEST_CUDA_ALIAS): the GPUs a plan's cuda:N fold onto, or 0 */
    int gpu_only;   /* testing (baton__runtime_gpu_only): runs skip the CPU segments and their waits
                     */
    int nd;
    rt_device dev[PLAN_MAX_DEVICES];
    int *step_dev; /* per step: device index */
    dev_call *calls;
    char *errbufs;            /* n_steps * ERRBUF_LEN */
    char *tuning;             /* n_steps * ERRBUF_LEN: what tuning chose ("" untuned), or NULL */
    void **kernel_states;     /* per step: its kernel's prepared call (ctx.prepared), or NULL */
    void **bufs;              /* all steps' buffer arrays */
    baton_tensor_desc *descs; /* all steps' tensor descriptors, in the order of bufs */
    const char **names;       /* all steps' tensor names, in the order of bufs */
    int *consts;              /* all steps' "is a plan constant" flags, in the order of bufs */
    baton_sig_args *sigs;     /* per step: its descriptors and attributes (baton_exec_ctx.sig) */
    void **states;            /* per step: delegate state or NULL */
    const baton_target_impl **impls;
    rt_transfer *xfers;
    const baton_runtime *share; /* the runtime whose constants this one uses, or NULL */
    int *graph_state;           /* per segment: 0 to capture, 1 captured, -1 runs uncaptured */
    int recapture;
    int capturing;           /* transfers issued now are recorded into a graph, not yet moved */
    int64_t *seg_bytes;      /* per segment: bytes h2d, d2h its graph moves on each launch */
    int *xfer_first;         /* transfers into segment s are [xfer_first[s], xfer_first[s + 1]); the
                              * analysis sorts them by segment, n_segments being the end of the run */
    unsigned char *ahead_ok; /* per segment: queued ahead of the CPU segment before it */
    uint32_t *seg_signal;    /* per segment: the devices (bits) that record SEG_EVENT after it */
    dev_coll *colls;         /* per segment: its collective (a collective segment), else unused */
    int no_cross_wait; /* testing (baton__runtime_skip_cross_waits): GPU->GPU copies do not wait */
    int prio_rank, prio_of; /* its own streams' priority level (dev_open_args), 0 and 0: default */
    /* graph mode: a GPU segment's waits for other GPUs and its event for them are nodes of its
     * graph (1, the default) or stream calls around its launch (0: BATON_GRAPH_EVENT_NODES=0) */
    int event_nodes;
    /* the end of a run records every waited GPU's event before the first wait (1, the default),
     * or each right before its own wait (0: BATON_END_RECORDS_FIRST=0) */
    int end_records_first;
    /* one process per GPU (baton_options.world > 0): the memory index of this rank's GPU (-1:
     * the plan gives it no step) and the backend's world (world_join) */
    int own;
    void *world;
    int ahead; /* the segment queued ahead in this run, or -1 */
    char note[ERRBUF_LEN];
    /* baton_runtime_create's warnings and notes, logged once it succeeds (defer_log) */
    char deferred[RT_MAX_DEFERRED][ERRBUF_LEN];
    baton_log_level deferred_level[RT_MAX_DEFERRED];
    int n_deferred;
    int last_run;       /* 0: none yet, 1: the last run succeeded, -1: it failed */
    atomic_int running; /* a baton_runtime_run is in progress (run_claim) */
    int64_t in_flight;  /* runs baton_runtime_run_async queued that no wait has ended yet */
    int deferring;      /* the run in progress ends without the host's wait (run_async) */
    int capture_seg;    /* the segment being captured, or -1 */
    /* caller-owned buffers (baton_runtime_bind): per tensor, the device index it is bound on
     * (-1: none) and the address; the sites of every input and output, by tensor */
    int *bind_dev;
    void **bind_data;
    rt_site *sites;
    int *site_first; /* per tensor t: sites [site_first[t], site_first[t + 1]) */
    /* per tensor: 1 once baton_runtime_set_input wrote the runtime's own memory of an input */
    unsigned char *input_set;
    int n_unset_inputs; /* inputs neither set (input_set) nor bound: a run refuses them */
    baton_run_stats stats;
    /* state.c: the dims the next run binds, those the descriptors hold now, the input that
     * bound each since the last run (-1), and the repacked descriptors (n_steps *
     * BATON_OPAQUE_MAX bytes) */
    void **state_ptr; /* per tensor: another runtime's state slot this one uses, or NULL */
    int64_t *dims, *dims_ran;
    int *dims_by;
    char *opaques;
    /* graph mode: executable graphs per binding. Segment s uses graph slot graph_slot[s] of its
     * graph_ways slots (s * graph_ways onwards); per slot its binding (n_dims values), when it
     * was last launched, whether it was ever captured and whether it holds the current
     * addresses. seg_dims[s]: the segment depends on the binding. */
    int graph_ways;
    int *graph_slot;
    unsigned char *seg_dims;
    int64_t *slot_key, *slot_tick, graph_clock, graph_hits;
    unsigned char *slot_used, *slot_ok;
    int timing;
    int64_t *step_ns;
    trace_event *trace;
    size_t trace_cap, trace_n, trace_dropped;
    int64_t trace_t0;
    dev_trace dev_trace[PLAN_MAX_DEVICES]; /* what each device ran (spans NULL: no timeline) */
    char trace_why[PLAN_MAX_DEVICES][160]; /* why a device has no timeline */
};

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* trace.c: records one span when tracing is on and the buffer has room (never allocates). */
void baton__trace_add(baton_runtime *rt, const char *name, const char *cat, int tid, int step,
                      int64_t bytes, int64_t t0, int64_t t1);
/* Stops the devices' timelines and frees the trace (baton_runtime_destroy). */
void baton__trace_end(baton_runtime *rt);

/* prepare.c: baton_runtime_create with `fault` armed on device index `fault_dev` (the plan's
 * memory index: 0 is the CPU) right after it is opened; fault_dev -1 arms nothing. */
int baton__runtime_prepare(const baton_plan *plan, const baton_options *opts, int fault_dev,
                           dev_fault fault, baton_runtime **out, baton_error *err);
/* A pool's instance, its own streams at priority level prio_rank of prio_of (dev_open_args).
 * Without `share`: baton_runtime_create of plan with the options `own`. With it: another instance
 * of `share`'s plan (same plan, same options; `plan` is not read) whose constants are `share`'s,
 * which must outlive it; it has its own arenas, streams and delegate states, the caller's where
 * `own` gives them (its arenas, streams and their counts; NULL: none), an arena then holding the
 * private part only (baton_pool_arena_info). */
int baton__runtime_prepare_instance(const baton_plan *plan, const baton_runtime *share,
                                    const baton_options *own, int prio_rank, int prio_of,
                                    baton_runtime **out, baton_error *err);
/* The stream of each CUDA device of rt that takes a caller's stream, as baton_options.streams
 * takes them: another runtime made with these issues its work behind rt's on every GPU (a pool's
 * stream group). Fills at most max; returns how many (0 on the test device and the CPU). */
int baton__runtime_streams(const baton_runtime *rt, baton_stream *out, int max);
/* The bytes one runtime holds per device: its constants (shared by instances) and the rest. */
void baton__runtime_memory(const baton_runtime *rt, size_t *const_bytes, size_t *private_bytes);

/* prepare.c: the address of tensor t in device index d's arena (constants or private part), or
 * NULL when t has no slot there. */
void *baton__runtime_slot_addr(const baton_runtime *rt, int d, int t);

/* bind.c: every place that holds the address of an input or output tensor (rt->sites), so that
 * binding a caller's buffer rewrites them without a search; called once by prepare. */
int baton__runtime_build_sites(baton_runtime *rt, baton_error *err);
/* bind.c: what each GPU segment's graph copies per launch (rt->seg_bytes), less the transfers
 * that bound buffers make needless; again after each change of those. */
void baton__runtime_count_graph_bytes(baton_runtime *rt);
/* bind.c: BATON_ESTATE naming the inputs that were never given a value (rt->n_unset_inputs > 0),
 * for a run that refuses them (baton_options.allow_unset_inputs). */
int baton__runtime_unset_inputs(const baton_runtime *rt, baton_error *err);
/* Ends the runs baton_runtime_run_async queued (baton_runtime_wait) before a call that reads or
 * writes what they use: host-side inputs and outputs, state, a re-binding that changes a graph. 0
 * at once when none is queued. */
int baton__runtime_settle(baton_runtime *rt, baton_error *err);
/* run.c: whether baton_runtime_run_async queues rt's runs (returns before the GPUs are done)
 * rather than running them as baton_runtime_run does. */
int baton__runtime_queues_runs(const baton_runtime *rt);
/* run.c: records the end events of the runs run_async queued, as the wait does before it waits:
 * a caller whose runtimes share streams calls it while it keeps the others off them, so that the
 * wait itself puts nothing on a stream. */
int baton__runtime_record_ends(baton_runtime *rt, baton_error *err);

/* state.c: state tensors and dims (issue 40). */
#define RT_GRAPH_WAYS 8 /* executable graphs kept per segment that depends on the dims */
int baton__runtime_state_access(baton_runtime *rt, int t, void *data, size_t nbytes, int write,
                                baton_error *err);
int baton__runtime_dims_prepare(baton_runtime *rt, baton_error *err);
void baton__runtime_dims_free(baton_runtime *rt);
/* The bytes tensor t holds under the binding of the next run (ran 0) or of the last (ran 1). */
size_t baton__runtime_tensor_bytes(const baton_runtime *rt, int t, int ran);
/* set_input of an input sized by a dimension with nbytes: binds the dimension it implies. */
int baton__runtime_bind_from_input(baton_runtime *rt, int t, size_t nbytes, baton_error *err);
/* At the start of a run: a changed binding reaches descriptors, transfers and graphs. */
int baton__runtime_apply_dims(baton_runtime *rt, baton_error *err);
int baton__runtime_graphs_prepare(baton_runtime *rt, baton_error *err);
/* Segment s's graph was launched (captured: it was captured just before). */
void baton__runtime_graph_used(baton_runtime *rt, int s, int captured);
void baton__runtime_graphs_free(baton_runtime *rt);

/* world.c: joins the other ranks through the rendezvous file (baton_options.world), on the
 * device with memory index `own`, into rt->world. */
int baton__world_join(baton_runtime *rt, int own, baton_error *err);

static inline int rt_ranks(const baton_runtime *rt)
{
    return rt->opts.world > 0;
}

/* options.c: the caller's options (NULL: the defaults) as this library's baton_options, read by
 * their struct_size (core/abi.h): fields past it keep baton_options_init's values. */
int baton__options_read(const baton_options *in, baton_options *out, baton_error *err);

#endif /* BATON_SCHEDULER_RUNTIME_H */
