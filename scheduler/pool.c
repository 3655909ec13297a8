/* pool.c: non-blocking runs on a libuv loop (include/baton/baton_uv.h). N instances of one plan
 * share its constants; each instance has a worker thread that runs one job at a time with the
 * synchronous runtime, so host waits and CPU steps happen there and never on the loop thread.
 *
 * The loop thread owns the queue and the instance assignment: submit hands a job to a free
 * instance or appends it to the queue; a worker that finishes moves its job to the done list and
 * wakes the loop through a uv_async_t, whose callback calls the jobs' callbacks and hands the
 * freed instances the next queued jobs, in submission order. Jobs are linked through their own
 * `next_` field, so nothing is allocated per run. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "baton/baton_uv.h"
#include "core/abi.h"
#include "scheduler/pool.h"
#include "scheduler/runtime.h"

#define POOL_MAX_INSTANCES 64
/* How much less the workers get than the loop thread when they compete for a core. */
#ifndef POOL_WORKER_NICE
#define POOL_WORKER_NICE 5
#endif
/* How long a worker looks for its next job before it sleeps (see spin_for_job). */
#define POOL_SPIN_NS 50000

enum job_state { JOB_IDLE = 0, JOB_QUEUED, JOB_RUNNING, JOB_DONE };

typedef struct pool_worker {
    baton_pool *pool;
    int index;
    baton_runtime *rt;
    uv_thread_t thread;
    int started;
    /* the job handed to this worker, or NULL: written under pool->lock, read without it while
     * the worker spins */
    _Atomic(baton_job *) job;
    int sleeping;   /* guarded by pool->lock: the worker waits on `wake`, so it must be signalled */
    uv_cond_t wake; /* this worker waits here for a job or for the pool to stop */
    int cond_ok;
    /* Stream groups (POOL_GROUP_ENV): the instances of a group issue their work on the first
     * one's streams, one after another, under the first one's `group_mutex`. NULL: no group. */
    uv_mutex_t *group;
    uv_mutex_t group_mutex;
    int group_ok;
} pool_worker;

struct baton_pool {
    uv_loop_t *loop;
    const baton_plan *plan;
    int n;
    pool_worker w[POOL_MAX_INSTANCES];
    uv_mutex_t lock;
    uv_async_t async;
    int stopping;    /* guarded by lock: workers exit */
    int64_t spin_ns; /* how long a worker that finished looks for its next job before sleeping */
    int queue_ahead; /* the instances queue ahead in graph mode (baton_pool_queues_ahead) */
    /* loop thread only */
    baton_job *queue_head, *queue_tail;
    int free_list[POOL_MAX_INSTANCES], n_free;
    int running;
    int closing;
    void (*close_cb)(void *);
    void *close_arg;
    /* guarded by lock: finished jobs, in completion order, and cancelled ones */
    baton_job *done_head, *done_tail;
};

/* N (read at baton_pool_create): the instances' streams get unequal priorities, instance 0 the
 * highest: "1" one level each, spread over the GPU's range; "2" and up that many levels, the
 * instances split into equal groups in order. Instances whose runs share each GPU fairly end a
 * pipeline's first stage together and then all wait on its last GPU while the first idles (a
 * convoy, issue 43); unequal priorities stagger them, but starve the low ones. Off by default:
 * the stream groups below break the convoy fairly (decision 0015). */
#define POOL_PRIORITIES_ENV "BATON_POOL_PRIORITIES"

void baton__pool_priority(int i, int n, int levels, int *rank, int *of)
{
    *rank = *of = 0;
    if (levels <= 0 || n < 2 || i < 0 || i >= n)
        return;
    const int groups = levels == 1 || levels > n ? n : levels;
    *of = groups;
    *rank = i * groups / n;
}

/* N (read at baton_pool_create): the instances share each GPU's stream in groups of N
 * consecutive instances; "1" none. A pipeline's runs that share its GPUs fairly end their first
 * stage together and then all wait on the last GPU while the first idles (a convoy, issue 43);
 * two runs of a group on one stream pass through the stages one behind the other, so the first
 * GPU runs one while the second GPU runs the other. A group's instances keep their own memory,
 * so a job's inputs and outputs are its own. Capturing a graph on a stream takes in whatever
 * another thread puts on that stream meanwhile, so whatever a group's instances put on the
 * streams (a run's issue, its end events, a bound tensor's copy) happens under the group's
 * mutex, and only the host's waits happen outside it. */
#define POOL_GROUP_ENV "BATON_POOL_GROUP"

/* The group size of a pool without BATON_POOL_GROUP: for a plan over several GPUs on CUDA whose
 * runs can be queued (every step on a GPU, no collective, not strict mode), as many as the GPUs
 * (one run per stage), unless the caller gives the instances their streams; else no groups. A run
 * that cannot be queued holds its group's mutex until it ends, so grouping would serialise it. */
static int default_group(const baton_plan *plan, int per_instance, const baton_runtime *first)
{
    int gpus = 0;
    for (int i = 0; i < baton_plan_arena_count(plan); i++) {
        baton_arena a;
        gpus += baton_plan_arena_info(plan, i, &a) == 0 && a.device.kind == BATON_DEVICE_CUDA;
    }
    if (gpus < 2 || per_instance || baton_runtime_gpu_backend(first) != BATON_GPU_CUDA ||
        !baton__runtime_queues_runs(first))
        return 1;
    return gpus;
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void done_push(baton_pool *p, baton_job *job) /* with p->lock held */
{
    job->next_ = NULL;
    if (p->done_tail)
        p->done_tail->next_ = job;
    else
        p->done_head = job;
    p->done_tail = job;
}

static void group_lock(pool_worker *w)
{
    if (w->group)
        uv_mutex_lock(w->group);
}

static void group_unlock(pool_worker *w)
{
    if (w->group)
        uv_mutex_unlock(w->group);
}

/* Runs one job on this worker's instance: bind the inputs, run, read the outputs back. In a
 * stream group the run is issued under the group's mutex and waited for outside it, so that the
 * group's next run is issued behind this one while it runs. */
static int run_job(pool_worker *w, baton_job *job)
{
    baton_runtime *rt = w->rt;
    int rc = 0;
    group_lock(w);
    for (int i = 0; i < job->n_inputs && !rc; i++) {
        const baton_binding *b = &job->inputs[i];
        rc = baton_runtime_set_input(rt, b->name, b->data, b->nbytes, &job->err);
    }
    baton_runtime_reset_stats(rt);
    if (!rc && w->group) {
        rc = baton_runtime_run_async(rt, &job->err);
        if (!rc)
            rc = baton__runtime_record_ends(rt, &job->err);
    } else if (!rc) {
        rc = baton_runtime_run(rt, &job->err);
    }
    group_unlock(w);
    /* A failed wait drains this instance's streams, which the group shares: a capture of
     * another instance's running then fails and that run goes uncaptured, still correct. */
    if (!rc && w->group)
        rc = baton_runtime_wait(rt, &job->err);
    baton_runtime_stats(rt, &job->stats);
    if (rc)
        return rc;
    group_lock(w);
    for (int i = 0; i < job->n_outputs && !rc; i++) {
        const baton_binding *b = &job->outputs[i];
        rc = baton_runtime_get_output(rt, b->name, b->data, b->nbytes, &job->err);
    }
    group_unlock(w);
    return rc;
}

/* Waits up to p->spin_ns for a job without sleeping. In a closed loop the next job comes from
 * the completion callback of the last one a few microseconds later; a worker that is still
 * awake saves the loop thread a futex wake-up (a system call and, in a VM, an inter-processor
 * interrupt) per run. */
static void spin_for_job(pool_worker *w)
{
    int64_t until = mono_ns() + w->pool->spin_ns;
    while (!atomic_load_explicit(&w->job, memory_order_acquire) && mono_ns() <= until) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

static void worker_main(void *arg)
{
    pool_worker *w = arg;
    baton_pool *p = w->pool;
#ifdef __linux__
    /* The loop thread is the one whose latency counts (timers, sockets); the workers do the
     * host steps. On a busy machine the scheduler should prefer the loop: a worker thread lowers
     * its own priority (Linux takes a thread id here). Failure only costs that preference. */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), POOL_WORKER_NICE);
#endif
    int spun = 0; /* whether the worker just finished a job and may spin for the next one */
    uv_mutex_lock(&p->lock);
    for (;;) {
        if (spun && !w->job && !p->stopping && p->spin_ns > 0) {
            uv_mutex_unlock(&p->lock);
            spin_for_job(w);
            uv_mutex_lock(&p->lock);
        }
        while (!w->job && !p->stopping) {
            w->sleeping = 1;
            uv_cond_wait(&w->wake, &p->lock);
            w->sleeping = 0;
        }
        baton_job *job = w->job;
        if (!job)
            break; /* stopping, nothing left to run */
        uv_mutex_unlock(&p->lock);

        job->err.code = 0;
        job->err.message[0] = 0;
        job->status_ = run_job(w, job);
        job->end_ns = mono_ns();

        uv_mutex_lock(&p->lock);
        w->job = NULL;
        done_push(p, job);
        uv_async_send(&p->async);
        spun = 1;
    }
    uv_mutex_unlock(&p->lock);
}

/* Loop thread: hands queued jobs to free instances, oldest first. */
/* Loop thread: the first queued job that can start now (one pinned to a busy instance waits,
 * the others pass it), taken out of the queue with its instance taken out of the free list. */
static baton_job *next_startable(baton_pool *p, int *instance)
{
    baton_job *prev = NULL;
    for (baton_job *job = p->queue_head; job; prev = job, job = job->next_) {
        int k = -1;
        if (job->instance < 0) {
            k = p->n_free - 1;
        } else {
            for (int f = 0; f < p->n_free && k < 0; f++)
                if (p->free_list[f] == job->instance)
                    k = f;
            if (k < 0)
                continue;
        }
        *instance = p->free_list[k];
        p->free_list[k] = p->free_list[--p->n_free];
        if (prev)
            prev->next_ = job->next_;
        else
            p->queue_head = job->next_;
        if (p->queue_tail == job)
            p->queue_tail = prev;
        return job;
    }
    return NULL;
}

static void dispatch(baton_pool *p)
{
    baton_job *job;
    int i;
    while (p->n_free > 0 && (job = next_startable(p, &i)) != NULL) {
        job->next_ = NULL;
        job->state_ = JOB_RUNNING;
        job->instance = i;
        job->start_ns = mono_ns();
        p->running++;
        uv_mutex_lock(&p->lock);
        atomic_store_explicit(&p->w[i].job, job, memory_order_release);
        if (p->w[i].sleeping)              /* a spinning worker sees the job without a wake-up */
            uv_cond_signal(&p->w[i].wake); /* only this worker: no herd on a 2-core machine */
        uv_mutex_unlock(&p->lock);
    }
}

static void finish_close(uv_handle_t *h);

/* The async handle keeps the loop alive only while jobs are queued or running, so that uv_run
 * returns when the work is done, as it does for a uv_work_t. */
static void update_ref(baton_pool *p)
{
    int busy = p->running > 0 || p->queue_head != NULL || p->closing;
    if (busy)
        uv_ref((uv_handle_t *)&p->async);
    else
        uv_unref((uv_handle_t *)&p->async);
}

/* Loop thread: the callbacks of finished and cancelled jobs, then the next jobs. */
static void on_async(uv_async_t *a)
{
    baton_pool *p = a->data;
    uv_mutex_lock(&p->lock);
    baton_job *list = p->done_head;
    p->done_head = p->done_tail = NULL;
    uv_mutex_unlock(&p->lock);
    while (list) {
        baton_job *job = list;
        list = job->next_;
        job->next_ = NULL;
        if (job->state_ == JOB_RUNNING) {
            p->free_list[p->n_free++] = job->instance;
            p->running--;
        }
        job->state_ = JOB_DONE;
        job->pool_ = NULL;
        job->cb_(job, job->status_);
    }
    if (!p->closing) {
        dispatch(p);
        update_ref(p);
    } else if (p->running == 0 && !p->queue_head) {
        uv_mutex_lock(&p->lock);
        int more = p->done_head != NULL;
        p->stopping = 1;
        for (int i = 0; i < p->n; i++)
            uv_cond_signal(&p->w[i].wake);
        uv_mutex_unlock(&p->lock);
        if (more)
            return; /* cancelled jobs still to report: the async fires again */
        for (int i = 0; i < p->n; i++)
            if (p->w[i].started) {
                uv_thread_join(&p->w[i].thread);
                p->w[i].started = 0;
            }
        if (!uv_is_closing((uv_handle_t *)&p->async))
            uv_close((uv_handle_t *)&p->async, finish_close);
    }
}

static void destroy(baton_pool *p)
{
    uv_mutex_lock(&p->lock);
    p->stopping = 1;
    for (int i = 0; i < POOL_MAX_INSTANCES; i++)
        if (p->w[i].cond_ok)
            uv_cond_signal(&p->w[i].wake);
    uv_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n; i++)
        if (p->w[i].started)
            uv_thread_join(&p->w[i].thread);
    /* the first instance owns the constants the others use: destroy it last */
    for (int i = p->n - 1; i >= 0; i--)
        baton_runtime_destroy(p->w[i].rt);
    for (int i = 0; i < POOL_MAX_INSTANCES; i++) {
        if (p->w[i].cond_ok)
            uv_cond_destroy(&p->w[i].wake);
        if (p->w[i].group_ok)
            uv_mutex_destroy(&p->w[i].group_mutex);
    }
    uv_mutex_destroy(&p->lock);
    free(p);
}

static void finish_close(uv_handle_t *h)
{
    baton_pool *p = h->data;
    void (*cb)(void *) = p->close_cb;
    void *arg = p->close_arg;
    destroy(p);
    if (cb)
        cb(arg);
}

/* Every field of baton_pool_instance, in order (core/abi.h). */
static const abi_field instance_fields[] = {
    ABI_FIELD(baton_pool_instance, struct_size), ABI_FIELD(baton_pool_instance, arenas),
    ABI_FIELD(baton_pool_instance, n_arenas),    ABI_FIELD(baton_pool_instance, streams),
    ABI_FIELD(baton_pool_instance, n_streams),
};

int baton_pool_arena_info(const baton_plan *plan, int instance, int i, baton_arena *out)
{
    int rc = baton_plan_arena_info(plan, i, out);
    if (rc || instance < 0 || instance >= POOL_MAX_INSTANCES)
        return rc ? rc : BATON_EINVAL;
    if (instance > 0) /* the constants, placed first, are instance 0's */
        out->nbytes -= plan->memory[i].const_bytes;
    return 0;
}

int baton_pool_create(uv_loop_t *loop, const baton_plan *plan, const baton_options *opts,
                      int instances, baton_pool **out, baton_error *err)
{
    return baton_pool_create_with(loop, plan, opts, instances, NULL, out, err);
}

int baton_pool_create_with(uv_loop_t *loop, const baton_plan *plan, const baton_options *opts,
                           int instances, const baton_pool_instance *per_instance, baton_pool **out,
                           baton_error *err)
{
    err_clear(err);
    if (out)
        *out = NULL;
    if (!loop || !plan || !out)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_pool_create: loop, plan and out are required");
    if (instances < 1 || instances > POOL_MAX_INSTANCES)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_pool_create: %d instances: a pool holds 1 to %d", instances,
                              POOL_MAX_INSTANCES);
    baton_pool *p = calloc(1, sizeof *p);
    if (!p)
        return baton__err_set(err, BATON_ENOMEM, "baton_pool_create: out of memory");
    p->loop = loop;
    p->plan = plan;
    /* Spinning for the next job pays only where every worker and the loop have a core of their
     * own; on a smaller machine it would take a core from a worker with work to do. The
     * environment can override the choice (microseconds; 0 turns spinning off). */
    p->spin_ns = uv_available_parallelism() > (unsigned)instances + 1 ? POOL_SPIN_NS : 0;
    const char *spin_env = getenv("BATON_POOL_SPIN_US");
    if (spin_env && *spin_env)
        p->spin_ns = (int64_t)(atof(spin_env) * 1000.0);
    if (uv_mutex_init(&p->lock)) {
        free(p);
        return baton__err_set(err, BATON_ENOMEM, "baton_pool_create: uv_mutex_init failed");
    }
    baton_options o;
    int rc = baton__options_read(opts, &o, err);
    if (!rc && (o.n_arenas || o.n_streams))
        rc = baton__err_set(
            err, BATON_EINVAL,
            "baton_pool_create: options.arenas and options.streams belong to one "
            "runtime; give each instance its own with baton_pool_create_with (or leave "
            "both empty: the pool allocates them)");
    if (!rc && instances > BATON_POOL_QUEUE_AHEAD_MAX && o.disable_queue_ahead == 0)
        o.disable_queue_ahead = 1;
    p->queue_ahead = o.disable_queue_ahead <= 0;
    const char *prio_env = getenv(POOL_PRIORITIES_ENV);
    const int levels = prio_env && *prio_env ? atoi(prio_env) : 0;
    const char *group_env = getenv(POOL_GROUP_ENV);
    int group = group_env && *group_env ? atoi(group_env) : 0; /* 0: decided below */
    for (int i = 0; i < instances && !rc; i++) {
        pool_worker *w = &p->w[i];
        w->pool = p;
        w->index = i;
        if (uv_cond_init(&w->wake)) {
            rc = baton__err_set(err, BATON_ENOMEM, "baton_pool_create: uv_cond_init failed");
            break;
        }
        w->cond_ok = 1;
        baton_options oi = o; /* this instance's memory and streams, if the caller gives them */
        if (per_instance) {
            baton_pool_instance pi;
            rc = baton__abi_read(&pi, sizeof pi, &per_instance[i], instance_fields,
                                 (int)(sizeof instance_fields / sizeof instance_fields[0]),
                                 "baton_pool_create_with: per_instance[i] (set struct_size)",
                                 "baton_pool_instance", err);
            if (rc)
                break;
            oi.arenas = pi.arenas;
            oi.n_arenas = pi.n_arenas;
            oi.streams = pi.streams;
            oi.n_streams = pi.n_streams;
        }
        if (uv_mutex_init(&w->group_mutex)) {
            rc = baton__err_set(err, BATON_ENOMEM, "baton_pool_create: uv_mutex_init failed");
            break;
        }
        w->group_ok = 1;
        if (i == 1 && group <= 0)
            group = default_group(plan, per_instance != NULL, p->w[0].rt);
        baton_stream shared[PLAN_MAX_DEVICES];
        if (group > 1 && i % group) { /* a member: its group's first instance's streams */
            oi.n_streams = baton__runtime_streams(p->w[i - i % group].rt, shared,
                                                  (int)(sizeof shared / sizeof shared[0]));
            oi.streams = oi.n_streams ? shared : oi.streams;
        }
        int prio_rank, prio_of;
        baton__pool_priority(i, instances, levels, &prio_rank, &prio_of);
        rc = baton__runtime_prepare_instance(plan, i == 0 ? NULL : p->w[0].rt, &oi, prio_rank,
                                             prio_of, &w->rt, err);
        if (rc && per_instance) {
            char inner[BATON_ERROR_MAX];
            snprintf(inner, sizeof inner, "%s", err ? err->message : "");
            rc = baton__err_set(err, rc, "baton_pool_create_with: instance %d: %s", i, inner);
        }
        if (!rc)
            p->n = i + 1;
    }
    for (int i = 0; i < p->n && group > 1; i++)
        p->w[i].group = &p->w[i - i % group].group_mutex;
    for (int i = 0; i < p->n && !rc; i++) {
        int e = uv_thread_create(&p->w[i].thread, worker_main, &p->w[i]);
        if (e)
            rc = baton__err_set(err, BATON_ENOMEM, "baton_pool_create: uv_thread_create: %s",
                                uv_strerror(e));
        else
            p->w[i].started = 1;
    }
    if (!rc) {
        int e = uv_async_init(loop, &p->async, on_async);
        if (e)
            rc = baton__err_set(err, BATON_EINVAL, "baton_pool_create: uv_async_init: %s",
                                uv_strerror(e));
    }
    if (rc) {
        destroy(p);
        return rc;
    }
    p->async.data = p;
    uv_unref((uv_handle_t *)&p->async);
    for (int i = 0; i < p->n; i++)
        p->free_list[p->n_free++] = p->n - 1 - i; /* instance 0 is handed out first */
    *out = p;
    return 0;
}

/* The bindings must name the plan's inputs (outputs) with their exact sizes: checked on the loop
 * thread so a bad job fails at once, before it takes an instance. */
static int check_bindings(const baton_pool *p, const baton_binding *b, int n, baton_role role,
                          baton_error *err)
{
    const char *what = role == BATON_ROLE_INPUT ? "input" : "output";
    if (n < 0 || (n > 0 && !b))
        return baton__err_set(err, BATON_EINVAL, "baton_pool_submit: %d %ss but no bindings", n,
                              what);
    for (int i = 0; i < n; i++) {
        int t = b[i].name ? baton_plan_tensor_index(p->plan, b[i].name) : -1;
        baton_tensor_info ti;
        if (t < 0 || baton_plan_tensor_info(p->plan, t, &ti) ||
            (ti.role != role && ti.role != BATON_ROLE_STATE &&
             !(role == BATON_ROLE_OUTPUT && ti.role == BATON_ROLE_INPUT)))
            return baton__err_set(
                err, BATON_EINVAL, "baton_pool_submit: %s %d: '%s' is not an %s of plan '%s'", what,
                i, b[i].name ? b[i].name : "(null)", what, baton_plan_name(p->plan));
        /* a tensor sized by the plan's dims takes the bytes of its run's shape (at most the max;
         * the instance checks the rest when it binds the input or reads the output) */
        int dims = 0;
        for (int k = 0; k < ti.desc.rank; k++)
            dims |= baton_plan_tensor_dim(p->plan, t, k) >= 0;
        int size_ok = dims ? b[i].nbytes > 0 && b[i].nbytes <= ti.nbytes : b[i].nbytes == ti.nbytes;
        if (!b[i].data || !size_ok)
            return baton__err_set(
                err, BATON_EINVAL, "baton_pool_submit: %s '%s': %s; it takes a buffer of %zu bytes",
                what, b[i].name, b[i].data ? "wrong size" : "NULL data", ti.nbytes);
        /* as the CLI refuses a repeated --input: which of the two would the run read? */
        for (int k = 0; k < i; k++)
            if (strcmp(b[k].name, b[i].name) == 0)
                return baton__err_set(err, BATON_EINVAL,
                                      "baton_pool_submit: %ss %d and %d both bind '%s'; bind each "
                                      "tensor once",
                                      what, k, i, b[i].name);
    }
    return 0;
}

void baton_job_init(baton_job *job)
{
    if (job)
        memset(job, 0, sizeof *job);
}

int baton_pool_submit(baton_pool *p, baton_job *job, baton_job_cb cb)
{
    return baton_pool_submit_to(p, -1, job, cb);
}

int baton_pool_submit_to(baton_pool *p, int instance, baton_job *job, baton_job_cb cb)
{
    if (!p || !job || !cb)
        return BATON_EINVAL;
    /* A job in flight belongs to its worker, which clears and fills job->err: touch nothing. */
    if (job->state_ == JOB_QUEUED || job->state_ == JOB_RUNNING)
        return BATON_ESTATE;
    if (instance < -1 || instance >= p->n)
        return baton__err_set(
            &job->err, BATON_EINVAL,
            "baton_pool_submit_to: instance %d; the pool has instances 0 to %d (or -1: "
            "any)",
            instance, p->n - 1);
    if (p->closing)
        return baton__err_set(&job->err, BATON_ESTATE, "baton_pool_submit: the pool is closing");
    int rc = check_bindings(p, job->inputs, job->n_inputs, BATON_ROLE_INPUT, &job->err);
    if (!rc)
        rc = check_bindings(p, job->outputs, job->n_outputs, BATON_ROLE_OUTPUT, &job->err);
    if (rc)
        return rc;
    job->cb_ = cb;
    job->pool_ = p;
    job->next_ = NULL;
    job->state_ = JOB_QUEUED;
    job->status_ = 0;
    /* while queued, `instance` holds the instance it is pinned to (-1: any); set to the one
     * that runs it at dispatch, back to -1 if it is cancelled */
    job->instance = instance;
    job->err.code = 0;
    job->err.message[0] = 0;
    memset(&job->stats, 0, sizeof job->stats);
    job->submit_ns = mono_ns();
    job->start_ns = job->end_ns = 0;
    if (p->queue_tail)
        p->queue_tail->next_ = job;
    else
        p->queue_head = job;
    p->queue_tail = job;
    dispatch(p);
    update_ref(p);
    return 0;
}

/* Loop thread: takes a queued job out of the queue and reports it cancelled. */
static void cancel_queued(baton_pool *p, baton_job *job)
{
    baton_job **pp = &p->queue_head, *prev = NULL;
    while (*pp && *pp != job) {
        prev = *pp;
        pp = &(*pp)->next_;
    }
    if (!*pp)
        return;
    *pp = job->next_;
    if (p->queue_tail == job)
        p->queue_tail = prev;
    job->status_ = BATON_ECANCELED;
    baton__err_set(&job->err, BATON_ECANCELED, "the run was cancelled before it started");
    job->state_ = JOB_QUEUED; /* not running: no instance to give back */
    job->instance = -1;       /* it held the pin while queued */
    uv_mutex_lock(&p->lock);
    done_push(p, job);
    uv_mutex_unlock(&p->lock);
    uv_async_send(&p->async);
}

int baton_pool_cancel(baton_job *job)
{
    if (!job)
        return BATON_EINVAL;
    if (!job->pool_ || job->state_ != JOB_QUEUED)
        return BATON_ESTATE;
    for (baton_job *q = job->pool_->queue_head; q; q = q->next_)
        if (q == job) {
            cancel_queued(job->pool_, job);
            return 0;
        }
    return BATON_ESTATE; /* already cancelled, its callback pending */
}

void baton_pool_close(baton_pool *p, void (*close_cb)(void *arg), void *arg)
{
    if (!p || p->closing)
        return;
    p->closing = 1;
    p->close_cb = close_cb;
    p->close_arg = arg;
    while (p->queue_head)
        cancel_queued(p, p->queue_head);
    update_ref(p);
    /* on_async finishes the close once the running jobs are back */
    uv_async_send(&p->async);
}

int baton_pool_instances(const baton_pool *p)
{
    return p ? p->n : 0;
}

void baton_pool_memory(const baton_pool *p, size_t *const_bytes, size_t *arena_bytes)
{
    size_t c = 0, a = 0;
    if (p && p->n > 0)
        baton__runtime_memory(p->w[0].rt, &c, &a);
    if (const_bytes)
        *const_bytes = c;
    if (arena_bytes)
        *arena_bytes = a;
}

int baton_pool_pending(const baton_pool *p)
{
    int n = p ? p->running : 0;
    for (const baton_job *q = p ? p->queue_head : NULL; q; q = q->next_)
        n++;
    return n;
}

baton_gpu_backend baton_pool_gpu_backend(const baton_pool *p)
{
    return p && p->n > 0 ? baton_runtime_gpu_backend(p->w[0].rt) : BATON_GPU_CPU;
}

int baton_pool_queues_ahead(const baton_pool *p)
{
    return p ? p->queue_ahead : 0;
}

baton_runtime *baton__pool_instance(baton_pool *p, int i)
{
    return p && i >= 0 && i < p->n ? p->w[i].rt : NULL;
}

/* Loop thread: whether instance i is idle (in the free list), so its state may be touched. */
static int instance_idle(const baton_pool *p, int i)
{
    for (int f = 0; f < p->n_free; f++)
        if (p->free_list[f] == i)
            return 1;
    return 0;
}

static int state_call(baton_pool *p, int instance, const char *name, const char *fn,
                      baton_error *err)
{
    if (!p)
        return baton__err_set(err, BATON_EINVAL, "%s: no pool", fn);
    baton_tensor_info ti;
    int t = name ? baton_plan_tensor_index(p->plan, name) : -1;
    if (name && (t < 0 || baton_plan_tensor_info(p->plan, t, &ti) || ti.role != BATON_ROLE_STATE))
        return baton__err_set(err, BATON_EINVAL, "%s: '%s' is not a state tensor of plan '%s'", fn,
                              name, baton_plan_name(p->plan));
    if (instance < 0 || instance >= p->n)
        return baton__err_set(err, BATON_EINVAL, "%s: instance %d; the pool has instances 0 to %d",
                              fn, instance, p->n - 1);
    if (!instance_idle(p, instance))
        return baton__err_set(err, BATON_ESTATE,
                              "%s: instance %d is running a job; touch its state from a job's "
                              "callback or when it is idle",
                              fn, instance);
    return 0;
}

int baton_pool_get_state(baton_pool *p, int instance, const char *name, void *data, size_t nbytes,
                         baton_error *err)
{
    int rc = state_call(p, instance, name, "baton_pool_get_state", err);
    if (rc)
        return rc;
    group_lock(&p->w[instance]); /* a state tensor on a GPU is copied on the group's stream */
    rc = baton_runtime_get_output(p->w[instance].rt, name, data, nbytes, err);
    group_unlock(&p->w[instance]);
    return rc;
}

int baton_pool_set_state(baton_pool *p, int instance, const char *name, const void *data,
                         size_t nbytes, baton_error *err)
{
    int rc = state_call(p, instance, name, "baton_pool_set_state", err);
    if (rc)
        return rc;
    group_lock(&p->w[instance]);
    rc = baton_runtime_set_input(p->w[instance].rt, name, data, nbytes, err);
    group_unlock(&p->w[instance]);
    return rc;
}

int baton_pool_bind(baton_pool *p, int instance, int tensor, const baton_buffer *buf,
                    baton_error *err)
{
    err_clear(err);
    if (!p)
        return baton__err_set(err, BATON_EINVAL, "baton_pool_bind: no pool");
    if (instance < 0 || instance >= p->n)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_pool_bind: instance %d; the pool has instances 0 to %d",
                              instance, p->n - 1);
    /* idle: in the free list, so its worker does not touch its runtime until dispatch hands it
     * a job under the lock, after these writes */
    if (!instance_idle(p, instance))
        return baton__err_set(
            err, BATON_ESTATE,
            "baton_pool_bind: instance %d is running a job; bind from a job's callback "
            "or when it is idle",
            instance);
    group_lock(&p->w[instance]); /* a re-bound graph is updated or captured on the stream */
    int rc = baton_runtime_bind(p->w[instance].rt, tensor, buf, err);
    group_unlock(&p->w[instance]);
    return rc;
}

int baton_pool_reset_state(baton_pool *p, int instance, baton_error *err)
{
    int rc = state_call(p, instance, NULL, "baton_pool_reset_state", err);
    if (rc)
        return rc;
    group_lock(&p->w[instance]);
    rc = baton_runtime_reset_state(p->w[instance].rt, err);
    group_unlock(&p->w[instance]);
    return rc;
}
