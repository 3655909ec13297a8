/* baton_uv.h: non-blocking runs of a prepared plan on a libuv loop, many in flight.
 *
 * A pool holds N instances of one plan. The instances share the plan's constants (loaded once per
 * device) and each has its own arenas, streams and delegate states, so N runs proceed at once:
 * while one instance waits for its GPU at a GPU->CPU boundary or runs a CPU step, the others keep
 * the GPU busy. A caller submits a job (a caller-owned request, like uv_work_t) and gets its
 * callback on the loop thread, with the outputs written and the run's counters filled. The loop
 * thread never blocks: each instance runs on a worker thread of the pool, which is where CPU steps
 * run and where the host waits for a GPU; the loop only hands jobs out and takes them back
 * (docs/async.md explains the model, the threads, cancellation and errors, and why the workers are
 * the pool's own rather than libuv's shared thread pool).
 *
 * Jobs beyond the free instances queue in submission order and start in that order. A queued job
 * can be cancelled. A failed run reaches its own callback and leaves the other runs going; the
 * instance stays usable. The synchronous API of baton.h is unchanged and may be used beside this.
 *
 * Thread safety: every function here is called on the loop's thread. */
#ifndef BATON_UV_H
#define BATON_UV_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "baton/baton.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct baton_pool baton_pool;
typedef struct baton_job baton_job;

/* A tensor a job reads or writes: its name and a caller-owned host buffer of exactly its size
 * (for a tensor sized by the plan's dims, the size of the run's shape: an input binds the
 * dimension on the instance, as baton_runtime_set_input does, and an output is read in the shape
 * of that run). */
typedef struct baton_binding {
    const char *name;
    void *data;
    size_t nbytes;
} baton_binding;

/* Called on the loop thread when a job ends: status 0, a negative BATON_E* code (job->err says
 * why), or BATON_ECANCELED for a job cancelled (or dropped by baton_pool_close) before it ran. */
typedef void (*baton_job_cb)(baton_job *job, int status);

/* A run request. The caller owns it and its bindings; both stay valid and untouched from
 * baton_pool_submit until the callback. Start from baton_job_init (or a zeroed struct), then fill
 * `data` and the bindings and nothing else; the rest is baton's. A job whose callback has run may
 * be submitted again. */
struct baton_job {
    void *data;                  /* the caller's */
    const baton_binding *inputs; /* copied in when the run starts */
    int n_inputs;
    const baton_binding *outputs; /* written before the callback (only when status is 0) */
    int n_outputs;
    /* Filled by baton before the callback. */
    baton_run_stats stats; /* this run's counters */
    baton_error err;       /* the reason, when status is not 0 */
    int instance;          /* the instance that ran it, -1 if it never ran */
    /* CLOCK_MONOTONIC times: submitted, handed to its instance (jobs start in submission order),
     * finished on the instance */
    int64_t submit_ns, start_ns, end_ns;
    /* Private. */
    baton_job_cb cb_;
    baton_pool *pool_;
    baton_job *next_;
    int state_;
    int status_;
};

/* Zeroes a job: a job must start zeroed. */
BATON_API void baton_job_init(baton_job *job);

/* The most instances of a pool that queue ahead by default (baton_options.disable_queue_ahead 0;
 * -1 forces it on, 1 off). Queueing ahead hides a run's host hand-off from the GPU at the cost of
 * a gate on the GPU; once enough runs are in flight, the other runs fill the hand-off and the
 * gates only cost GPU time. RFC plan on an H100: on was 3-29 % faster at 2 and 4 in flight,
 * off about 3 % faster at 8; about 4.5 runs keep that GPU busy
 * (docs/decisions/0001-pool-queue-ahead.md). */
#define BATON_POOL_QUEUE_AHEAD_MAX 4

/* Creates a pool of `instances` (1 to 64) instances of `plan` with `opts` on `loop`: prepares the
 * first instance (arenas, constants, streams), then the others on its constants, and starts one
 * worker thread per instance. The plan must outlive the pool. On failure *out is NULL.
 * Stream groups: for a plan over several GPUs on CUDA whose runs can be queued (every step on a
 * GPU, no collective, not strict mode; see baton_runtime_run_async) and baton's own streams,
 * instances 0..G-1, G..2G-1, ... (G = the plan's GPUs) issue their runs on their group's first
 * instance's streams, one behind the other, so that a pipeline's stages run different runs at once
 * instead of all runs waiting on the last GPU together (docs/async.md). Each instance keeps its
 * own memory, so jobs stay independent. BATON_POOL_GROUP=N in the environment sets G (1: none). */
BATON_API int baton_pool_create(uv_loop_t *loop, const baton_plan *plan, const baton_options *opts,
                                int instances, baton_pool **out, baton_error *err);

/* One instance's own memory and streams, as baton_options.arenas and .streams are for one runtime
 * (baton.h): the arenas of some or all of the plan's devices and the cudaStream_t of each GPU.
 * Start from a zeroed struct with struct_size = sizeof(baton_pool_instance). */
typedef struct baton_pool_instance {
    size_t struct_size;
    const baton_arena *arenas;
    int n_arenas;
    const baton_stream *streams;
    int n_streams;
} baton_pool_instance;

/* How much memory instance `instance` of a pool of `plan` needs on the plan's arena i (as
 * baton_plan_arena_info): instance 0 holds the pool's constants, the one copy every instance
 * reads, and needs the whole arena; the others need it less the constants. */
BATON_API int baton_pool_arena_info(const baton_plan *plan, int instance, int i, baton_arena *out);

/* baton_pool_create with the caller's memory and streams per instance: per_instance[i] (an array
 * of `instances`, or NULL: baton allocates everything) gives instance i's, each checked as
 * baton_runtime_create checks options.arenas and .streams, the sizes as baton_pool_arena_info
 * says; a refusal names the instance. opts itself must give no arenas or streams (one set cannot
 * serve several instances). The memory and streams must outlive the pool, which never frees or
 * destroys them. */
BATON_API int baton_pool_create_with(uv_loop_t *loop, const baton_plan *plan,
                                     const baton_options *opts, int instances,
                                     const baton_pool_instance *per_instance, baton_pool **out,
                                     baton_error *err);

/* Binds a caller's buffer (host or device memory; NULL: unbind) to input or output `tensor` of
 * one instance, as baton_runtime_bind does for a runtime: every job that instance runs reads the
 * input there or writes the output there, with no copy, until it is bound again (a job's own
 * host binding of that tensor is copied into or out of it). On the loop thread, while the
 * instance is idle (BATON_ESTATE while it runs a job: bind from a job's callback, and pin the
 * jobs with baton_pool_submit_to); BATON_EINVAL as baton_runtime_bind. */
BATON_API int baton_pool_bind(baton_pool *pool, int instance, int tensor, const baton_buffer *buf,
                              baton_error *err);

/* Queues a run; cb is called on the loop thread when it ends. Allocates nothing. BATON_EINVAL for
 * a NULL job or callback or bindings that do not fit (checked here, before anything runs:
 * unknown names, wrong sizes, NULL data, a tensor bound twice; job->err says which);
 * BATON_ESTATE when the pool is closing (job->err says so) or the job is already submitted and its
 * callback has not run: then the job is left untouched, job->err included, since its run may be
 * writing it. */
BATON_API int baton_pool_submit(baton_pool *pool, baton_job *job, baton_job_cb cb);

/* baton_pool_submit for a job that must run on instance `instance` (0 to instances - 1; -1: any,
 * as baton_pool_submit). An instance owns its state tensors (a plan's "role": "state"), so the
 * runs of one session (a conversation's KV cache) go to one instance; a pinned job waits for its
 * instance while later jobs for other instances pass it. BATON_EINVAL for an instance out of
 * range, else as baton_pool_submit. Bindings may name state tensors (read or written with the
 * run, like inputs and outputs). */
BATON_API int baton_pool_submit_to(baton_pool *pool, int instance, baton_job *job, baton_job_cb cb);

/* An instance's state tensors, by name, between its runs (on the loop thread, e.g. in a job's
 * callback): read, write (exactly the tensor's bytes) and reset to their init (as
 * baton_runtime_get_output, set_input and reset_state). BATON_ESTATE while the instance runs a
 * job, BATON_EINVAL for an instance out of range or a tensor that is not state (or wrong size). */
BATON_API int baton_pool_get_state(baton_pool *pool, int instance, const char *name, void *data,
                                   size_t nbytes, baton_error *err);
BATON_API int baton_pool_set_state(baton_pool *pool, int instance, const char *name,
                                   const void *data, size_t nbytes, baton_error *err);
BATON_API int baton_pool_reset_state(baton_pool *pool, int instance, baton_error *err);

/* Cancels a job that has not started: it leaves the queue and its callback is called (on a later
 * turn of the loop) with BATON_ECANCELED. BATON_ESTATE if it is running or has ended. */
BATON_API int baton_pool_cancel(baton_job *job);

/* Closes the pool: cancels the queued jobs, lets the running ones finish (their callbacks are
 * called), stops the workers, frees the instances and calls close_cb(arg) on the loop thread
 * (close_cb may be NULL), after which the pool is gone. The loop then holds nothing of baton's:
 * uv_loop_close succeeds. */
BATON_API void baton_pool_close(baton_pool *pool, void (*close_cb)(void *arg), void *arg);

/* The pool's shape: its instances, and the bytes it holds on all devices, host and GPU: one set
 * of constants (the plan's, and the copies delegates prepared from them, e.g. a weight widened
 * for OpenBLAS, each counted once) plus, per instance, its arenas without the constants and what
 * its steps' delegates hold of their own (scratch, workspaces; baton_delegate_iface.memory).
 * Memory = const_bytes + instances * arena_bytes. */
BATON_API int baton_pool_instances(const baton_pool *pool);
BATON_API void baton_pool_memory(const baton_pool *pool, size_t *const_bytes, size_t *arena_bytes);

/* Runs queued and running now (for throughput tools and tests). */
BATON_API int baton_pool_pending(const baton_pool *pool);
/* The GPU backend the pool's instances use after any fallback (baton_runtime_gpu_backend). */
BATON_API baton_gpu_backend baton_pool_gpu_backend(const baton_pool *pool);
/* 1 when the pool's instances queue ahead in graph mode (disable_queue_ahead, with the pool's
 * default of BATON_POOL_QUEUE_AHEAD_MAX applied), else 0. */
BATON_API int baton_pool_queues_ahead(const baton_pool *pool);

#ifdef __cplusplus
}
#endif
#endif /* BATON_UV_H */
