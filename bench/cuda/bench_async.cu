/* bench_async.cu: how a libuv loop best learns that GPU work is done, the choice behind
 * scheduler/pool.c (docs/async.md). Three ways, each timed as the round trip from the loop
 * thread launching an empty kernel to a callback on the loop thread that knows it finished:
 *   worker:   a worker thread blocks in cudaEventSynchronize, then uv_async_send (what the pool
 *             does: its instance threads wait, the loop is woken);
 *   hostfunc: cudaLaunchHostFunc behind the kernel calls uv_async_send from CUDA's callback thread;
 *   poll:     a uv_idle handle on the loop calls cudaEventQuery every iteration (the loop spins).
 * Also the loop thread's own CPU time per notification. Prints "RESULT async.<way>.<what> value"
 * lines; median and p99 of --reps round trips (default 3000).
 *   bench_async [--reps N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "bench/cuda/bench_common.h"

__global__ void empty_kernel()
{
}

enum way { WORKER = 0, HOSTFUNC = 1, POLL = 2 };
static const char *way_names[] = {"worker", "hostfunc", "poll"};

typedef struct state {
    uv_loop_t loop;
    uv_async_t async;
    uv_idle_t idle;
    cudaStream_t stream;
    cudaEvent_t ev;
    int way;
    int reps, done;
    double t0;
    std::vector<double> rt;
    /* worker */
    uv_thread_t thread;
    uv_mutex_t lock;
    uv_cond_t cond;
    int pending, stop;
} state;

static void launch(state *s);

static void finish_one(state *s)
{
    s->rt.push_back(now_ns() - s->t0);
    if (++s->done < s->reps)
        launch(s);
    else {
        uv_close((uv_handle_t *)&s->async, NULL);
        if (s->way == POLL)
            uv_close((uv_handle_t *)&s->idle, NULL);
    }
}

static void on_async(uv_async_t *a)
{
    finish_one((state *)a->data);
}

static void CUDART_CB host_fn(void *arg)
{
    uv_async_send(&((state *)arg)->async);
}

static void on_idle(uv_idle_t *h)
{
    state *s = (state *)h->data;
    cudaError_t e = cudaEventQuery(s->ev);
    if (e == cudaErrorNotReady)
        return;
    CHECK_CUDA(e);
    uv_idle_stop(h);
    finish_one(s);
}

static void worker_main(void *arg)
{
    state *s = (state *)arg;
    uv_mutex_lock(&s->lock);
    for (;;) {
        while (!s->pending && !s->stop)
            uv_cond_wait(&s->cond, &s->lock);
        if (s->stop)
            break;
        s->pending = 0;
        uv_mutex_unlock(&s->lock);
        CHECK_CUDA(cudaEventSynchronize(s->ev));
        uv_async_send(&s->async);
        uv_mutex_lock(&s->lock);
    }
    uv_mutex_unlock(&s->lock);
}

static void launch(state *s)
{
    s->t0 = now_ns();
    empty_kernel<<<1, 1, 0, s->stream>>>();
    CHECK_CUDA(cudaGetLastError());
    switch (s->way) {
    case WORKER:
        CHECK_CUDA(cudaEventRecord(s->ev, s->stream));
        uv_mutex_lock(&s->lock);
        s->pending = 1;
        uv_cond_signal(&s->cond);
        uv_mutex_unlock(&s->lock);
        break;
    case HOSTFUNC: CHECK_CUDA(cudaLaunchHostFunc(s->stream, host_fn, s)); break;
    case POLL:
        CHECK_CUDA(cudaEventRecord(s->ev, s->stream));
        uv_idle_start(&s->idle, on_idle);
        break;
    }
}

static double pct(std::vector<double> v, double p)
{
    std::sort(v.begin(), v.end());
    size_t i = (size_t)(p * (double)(v.size() - 1));
    return v[i];
}

int main(int argc, char **argv)
{
    int reps = 3000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_async [--reps N]\n");
            return 2;
        }
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "bench_async: no CUDA device\n");
        return 1;
    }
    printf("loop wake-up after GPU work: round trip from launching an empty kernel on the loop "
           "thread to a callback on it; %d reps each\n",
           reps);
    printf("  %-9s %10s %10s %16s\n", "way", "p50 us", "p99 us", "loop CPU us/rep");
    for (int w = 0; w < 3; w++) {
        state *s = new state();
        s->way = w;
        s->reps = reps;
        CHECK_CUDA(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
        CHECK_CUDA(cudaEventCreateWithFlags(&s->ev, cudaEventDisableTiming));
        uv_loop_init(&s->loop);
        uv_async_init(&s->loop, &s->async, on_async);
        s->async.data = s;
        uv_idle_init(&s->loop, &s->idle);
        s->idle.data = s;
        uv_mutex_init(&s->lock);
        uv_cond_init(&s->cond);
        if (w == WORKER)
            uv_thread_create(&s->thread, worker_main, s);
        /* warm up: module load, first launches */
        for (int k = 0; k < 50; k++)
            empty_kernel<<<1, 1, 0, s->stream>>>();
        CHECK_CUDA(cudaStreamSynchronize(s->stream));
        uv_rusage_t r0, r1;
        uv_getrusage(&r0);
        launch(s);
        uv_run(&s->loop, UV_RUN_DEFAULT);
        uv_getrusage(&r1);
        /* the process's CPU time is the loop thread's plus the worker's or CUDA's callback
         * thread's: an upper bound on the loop's own */
        double cpu_us = ((double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) * 1e6 +
                         (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) +
                         (double)(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1e6 +
                         (double)(r1.ru_stime.tv_usec - r0.ru_stime.tv_usec)) /
                        reps;
        if (w == WORKER) {
            uv_mutex_lock(&s->lock);
            s->stop = 1;
            uv_cond_signal(&s->cond);
            uv_mutex_unlock(&s->lock);
            uv_thread_join(&s->thread);
        }
        uv_run(&s->loop, UV_RUN_DEFAULT);
        uv_loop_close(&s->loop);
        double p50 = median(s->rt) / 1e3, p99 = pct(s->rt, 0.99) / 1e3;
        printf("  %-9s %10.2f %10.2f %16.2f\n", way_names[w], p50, p99, cpu_us);
        printf("RESULT async.%s.p50_us %.2f\nRESULT async.%s.p99_us %.2f\n"
               "RESULT async.%s.cpu_us_per_rep %.2f\n",
               way_names[w], p50, way_names[w], p99, way_names[w], cpu_us);
        uv_mutex_destroy(&s->lock);
        uv_cond_destroy(&s->cond);
        CHECK_CUDA(cudaEventDestroy(s->ev));
        CHECK_CUDA(cudaStreamDestroy(s->stream));
        delete s;
    }
    return 0;
}
