/* threads.c: baton's CPU thread pool and the parallel-for that kernels call. Workers sleep on a
 * condition variable between jobs (the cores are shared with the rest of the program); the caller
 * takes part in its own job. A job in progress holds the pool: another caller at the same time
 * runs its tasks on its own thread instead of stacking threads on the same cores. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"
#include "core/threads.h"

#define MAX_WORKERS 255

static struct {
    pthread_once_t once;
    int cores;
    int n_workers;        /* threads besides the caller: cores - 1 */
    int started;          /* workers running (they start with the first job that wants them) */
    pthread_mutex_t busy; /* held by the caller whose job is in progress */
    pthread_mutex_t m;
    pthread_cond_t wake, done;
    pthread_t threads[MAX_WORKERS];
    uint64_t gen0[MAX_WORKERS]; /* the job count when worker i started: older jobs are not its */
    /* the job, written under m before gen moves */
    baton_task_fn fn;
    void *arg;
    int64_t n_tasks;
    int helpers; /* workers with index < helpers take part */
    int active;  /* helpers not done yet */
    _Atomic uint64_t gen;
    _Atomic int64_t next;
} pool = {.once = PTHREAD_ONCE_INIT,
          .busy = PTHREAD_MUTEX_INITIALIZER,
          .m = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

static _Thread_local const par_ctx *tl_bind;

static void pool_once(void)
{
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n < 1) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    /* BATON_CPU_THREADS caps the pool for the whole process (benchmarks, CI). */
    const char *e = getenv("BATON_CPU_THREADS");
    if (e && *e) {
        long v = strtol(e, NULL, 10);
        if (v >= 1 && v < n)
            n = (int)v;
    }
    pool.cores = n;
    pool.n_workers = n - 1 > MAX_WORKERS ? MAX_WORKERS : n - 1;
}

int baton__par_cores(void)
{
    pthread_once(&pool.once, pool_once);
    return pool.cores;
}

const par_ctx *baton__par_bind(const par_ctx *p)
{
    const par_ctx *old = tl_bind;
    tl_bind = p;
    return old;
}

int baton__par_threads(void)
{
    const par_ctx *b = tl_bind;
    if (b && b->ext)
        return b->ext->n_threads > 1 ? b->ext->n_threads : 1;
    int n = baton__par_cores();
    if (b && b->max_threads > 0 && b->max_threads < n)
        n = b->max_threads;
    return n;
}

static void run_tasks(void)
{
    int64_t t;
    while ((t = atomic_fetch_add_explicit(&pool.next, 1, memory_order_relaxed)) < pool.n_tasks)
        pool.fn(pool.arg, t);
}

static void *worker_main(void *argp)
{
    const int idx = (int)(intptr_t)argp;
    uint64_t seen = pool.gen0[idx];
    for (;;) {
        /* A short spin catches the next step's job without a sleep and wake-up in between;
         * then sleep, so an idle pool costs the shared cores nothing. */
        for (int i = 0; i < 200 && atomic_load(&pool.gen) == seen; i++)
            sched_yield();
        pthread_mutex_lock(&pool.m);
        while (atomic_load(&pool.gen) == seen)
            pthread_cond_wait(&pool.wake, &pool.m);
        seen = atomic_load(&pool.gen);
        int mine = idx < pool.helpers;
        pthread_mutex_unlock(&pool.m);
        if (!mine)
            continue;
        run_tasks();
        pthread_mutex_lock(&pool.m);
        if (--pool.active == 0)
            pthread_cond_signal(&pool.done);
        pthread_mutex_unlock(&pool.m);
    }
    return NULL;
}

/* Starts workers up to `want` (under pool.busy); returns how many run. */
static int start_workers(int want)
{
    while (pool.started < want) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pool.gen0[pool.started] = atomic_load(&pool.gen);
        int rc = pthread_create(&pool.threads[pool.started], &attr, worker_main,
                                (void *)(intptr_t)pool.started);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break; /* fewer threads: the work still gets done */
        pool.started++;
    }
    return pool.started;
}

static void run_serial(int64_t n_tasks, baton_task_fn fn, void *arg)
{
    for (int64_t t = 0; t < n_tasks; t++)
        fn(arg, t);
}

void baton__par_for(int64_t n_tasks, baton_task_fn fn, void *arg)
{
    if (n_tasks <= 0)
        return;
    const par_ctx *b = tl_bind;
    if (n_tasks == 1) {
        fn(arg, 0);
        return;
    }
    if (b && b->ext) {
        b->ext->run(b->ext->pool, n_tasks, fn, arg);
        return;
    }
    int want = baton__par_threads() - 1; /* helpers besides the caller */
    if (want > n_tasks - 1)
        want = (int)(n_tasks - 1);
    if (want > pool.n_workers)
        want = pool.n_workers;
    if (want < 1 || pthread_mutex_trylock(&pool.busy) != 0) {
        run_serial(n_tasks, fn, arg);
        return;
    }
    int helpers = start_workers(want);
    if (helpers > want)
        helpers = want;
    if (helpers < 1) {
        pthread_mutex_unlock(&pool.busy);
        run_serial(n_tasks, fn, arg);
        return;
    }
    pthread_mutex_lock(&pool.m);
    pool.fn = fn;
    pool.arg = arg;
    pool.n_tasks = n_tasks;
    pool.helpers = helpers;
    pool.active = helpers;
    atomic_store(&pool.next, 0);
    atomic_fetch_add(&pool.gen, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.m);
    run_tasks();
    pthread_mutex_lock(&pool.m);
    while (pool.active > 0)
        pthread_cond_wait(&pool.done, &pool.m);
    pthread_mutex_unlock(&pool.m);
    pthread_mutex_unlock(&pool.busy);
}
