/* threads.h: the CPU steps' parallel-for. One pool per process, sized to the cores the process may
 * use, shared by every runtime; or the embedder's own (baton_options.cpu_pool). Kernels split work
 * into tasks by size alone, so results never depend on how many threads ran them. */
#ifndef BATON_CORE_THREADS_H
#define BATON_CORE_THREADS_H

#include <stdint.h>

#include "baton/baton.h"

/* Where the calling thread's parallel-for goes: an embedder's pool, or baton's capped to
 * max_threads (0: all of them; 1: the calling thread only). */
typedef struct par_ctx {
    const baton_parallel_for *ext;
    int max_threads;
} par_ctx;

/* The cores this process may run on (sched_getaffinity), at least 1. Read once. */
int baton__par_cores(void);

/* Binds the calling thread's parallel-for to *p (NULL: baton's pool, all of its threads) and
 * returns the previous binding, so a caller can restore it. The CPU device binds its runtime's
 * options around each step; the pointer must stay valid while bound. */
const par_ctx *baton__par_bind(const par_ctx *p);

/* How many threads a baton__par_for of the calling thread may use at most. */
int baton__par_threads(void);

/* Calls fn(arg, t) for each t in [0, n_tasks) and returns when all have returned. One task, or a
 * binding of one thread, or baton's pool already in use (another step, or a task calling
 * baton__par_for), runs them in order on the calling thread. */
void baton__par_for(int64_t n_tasks, baton_task_fn fn, void *arg);

/* The number of tasks for `work` units cut into pieces of at least `grain` units, at most
 * max_tasks: a function of the sizes alone, so a kernel's split (and its bits) is the same on
 * every machine and thread count. */
static inline int64_t par_tasks(int64_t work, int64_t grain, int64_t max_tasks)
{
    int64_t t = grain > 0 ? work / grain : 1;
    if (t < 1)
        t = 1;
    return t > max_tasks ? max_tasks : t;
}

#endif /* BATON_CORE_THREADS_H */
