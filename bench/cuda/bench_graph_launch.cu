/* bench_graph_launch.cu: the host's time in cudaGraphLaunch (issue 43): hand-built graphs of N
 * empty kernels (plain, with programmatic edges as baton captures them, and cluster launches),
 * from 1 thread and from several threads each with its own stream and executable graph (and one
 * thread per GPU), then baton's own graphs of plan files: baton_runtime_run, the bare launch of
 * each captured graph on the runtime's stream, and copies of each graph with its event nodes,
 * its copies or its programmatic edges taken out, to tell which part of the graph costs the host.
 *
 *   bench_graph_launch [--plan PLAN.json]... [--iters N] [--threads T] [--budget S] [--no-pdl]
 *                      [--quick] [--pair A.json B.json] [--json FILE]
 *
 * --quick: the plans only, without the graph variants, with T runtimes on threads and the
 * GPUs' pace: for a second setting of the same plans (an environment variable) in one call.
 * --pair: runtimes of two plans at once, half the threads each (e.g. the same plan on cuda:0 and
 * on cuda:1): whether two GPUs add up when they share nothing but the process.
 *
 * Every figure is host time (CLOCK_MONOTONIC around the call); "round" is a launch and the
 * stream's synchronisation. Lines starting with RESULT are for scripts. The whole program stops
 * measuring once --budget seconds (50) have passed and says what it skipped. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "baton/baton.h"
#include "bench/cuda/bench_common.h"
extern "C" {
#include "scheduler/cuda/device_cuda.h"
#ifdef BATON_BENCH_HOOKS
#include "scheduler/testing.h"
#endif
}

__global__ void empty_kernel(int)
{
}

/* ---- options, the budget and the results -------------------------------------------------- */

static int g_iters = 2000, g_threads = 8, g_pdl = 1, g_quick = 0;
static double g_t0, g_budget_s = 50;
static FILE *g_json;
static int g_json_rows;

static double elapsed_s()
{
    return (now_ns() - g_t0) / 1e9;
}

/* Whether `need` more seconds fit; else says what is skipped. */
static bool room(double need, const char *what)
{
    if (elapsed_s() + need <= g_budget_s)
        return true;
    printf("SKIPPED (budget: %.1f of %.0f s used): %s\n", elapsed_s(), g_budget_s, what);
    return false;
}

/* Host-time figures of one configuration, in microseconds. */
struct timing {
    double launch_p50, launch_p90, launch_mean, round_p50, queued_each, rate;
};

static double pct(std::vector<double> v, double p)
{
    if (v.empty())
        return NAN;
    std::sort(v.begin(), v.end());
    return v[(size_t)((double)(v.size() - 1) * p)];
}

static void row(const char *section, const std::string &what, int threads, const timing &t)
{
    printf("%-9s %-58s %3d %9.2f %9.2f %9.2f %9.2f %9.2f %10.0f\n", section, what.c_str(), threads,
           t.launch_p50, t.launch_p90, t.launch_mean, t.round_p50, t.queued_each, t.rate);
    std::string key = std::string(section) + "." + what;
    for (char &c : key)
        if (c == ' ' || c == ',' || c == '(' || c == ')' || c == '=')
            c = '_';
    printf("RESULT launch.%s.launch_p50_us %.3f\n", key.c_str(), t.launch_p50);
    if (!g_json)
        return;
    fprintf(g_json, "%s\n  {\"section\": \"%s\", \"what\": \"%s\", \"threads\": %d",
            g_json_rows++ ? "," : "", section, what.c_str(), threads);
    const char *keys[] = {"launch_p50_us", "launch_p90_us",    "launch_mean_us",
                          "round_p50_us",  "queued_launch_us", "launches_per_s"};
    const double vals[] = {t.launch_p50, t.launch_p90,  t.launch_mean,
                           t.round_p50,  t.queued_each, t.rate};
    for (int i = 0; i < 6; i++)
        if (isnan(vals[i]))
            fprintf(g_json, ", \"%s\": null", keys[i]);
        else
            fprintf(g_json, ", \"%s\": %.3f", keys[i], vals[i]);
    fprintf(g_json, "}");
    fflush(g_json);
}

static void header()
{
    printf("%-9s %-58s %3s %9s %9s %9s %9s %9s %10s\n", "section", "graph", "thr", "launch50",
           "launch90", "mean", "round50", "queued", "launches/s");
}

/* ---- timing one executable graph ---------------------------------------------------------- */

/* One graph (or a run's graphs: n execs launched in turn, then their streams synchronised):
 * `iters` rounds of launch + synchronise, each launch timed; then `iters` / 4 launches queued back
 * to back and one synchronisation (queued_each: the host time per launch when the GPU is behind).
 * rate: launches (rounds) per second of the timed rounds. */
struct graph_set {
    std::vector<cudaGraphExec_t> exec;
    std::vector<cudaStream_t> stream;
    std::vector<int> device; /* -1: leave the current device */
};

/* How a round waits for its graphs, as baton's waits can: synchronise the stream (CUDA's default
 * spin or yield), ask the stream every 20 us and sleep in between (BATON_CUDA_WAIT_POLL_US=20),
 * or sleep in the driver on an event made with cudaEventBlockingSync (BATON_CUDA_BLOCKING_WAIT=1).
 */
enum wait_mode { WAIT_SYNC, WAIT_POLL, WAIT_BLOCK };
static const char *wait_name[] = {"sync", "poll 20us", "blocking event"};
static thread_local wait_mode t_wait = WAIT_SYNC;

static void wait_stream(cudaStream_t s)
{
    if (t_wait == WAIT_POLL) {
        const struct timespec nap = {0, 20000};
        cudaError_t e;
        while ((e = cudaStreamQuery(s)) == cudaErrorNotReady)
            nanosleep(&nap, NULL);
        CHECK_CUDA(e);
    } else if (t_wait == WAIT_BLOCK) {
        static thread_local cudaEvent_t ev[4];
        int dev = 0;
        CHECK_CUDA(cudaStreamGetDevice(s, &dev));
        if (!ev[dev & 3]) {
            int cur;
            CHECK_CUDA(cudaGetDevice(&cur));
            CHECK_CUDA(cudaSetDevice(dev));
            CHECK_CUDA(cudaEventCreateWithFlags(&ev[dev & 3],
                                                cudaEventBlockingSync | cudaEventDisableTiming));
            CHECK_CUDA(cudaSetDevice(cur));
        }
        CHECK_CUDA(cudaEventRecord(ev[dev & 3], s));
        CHECK_CUDA(cudaEventSynchronize(ev[dev & 3]));
    } else {
        CHECK_CUDA(cudaStreamSynchronize(s));
    }
}

static timing time_set(const graph_set &g, int iters)
{
    timing t = {};
    std::vector<double> launch, round;
    launch.reserve((size_t)iters);
    round.reserve((size_t)iters);
    const size_t n = g.exec.size();
    double w0 = now_ns();
    for (int i = 0; i < iters; i++) {
        double sum = 0, r0 = now_ns();
        for (size_t k = 0; k < n; k++) {
            if (g.device[k] >= 0)
                CHECK_CUDA(cudaSetDevice(g.device[k]));
            double a = now_ns();
            CHECK_CUDA(cudaGraphLaunch(g.exec[k], g.stream[k]));
            sum += now_ns() - a;
        }
        for (size_t k = 0; k < n; k++)
            wait_stream(g.stream[k]);
        round.push_back((now_ns() - r0) / 1e3);
        launch.push_back(sum / 1e3);
    }
    const double wall = now_ns() - w0;
    t.launch_p50 = pct(launch, 0.5);
    t.launch_p90 = pct(launch, 0.9);
    double s = 0;
    for (double v : launch)
        s += v;
    t.launch_mean = s / (double)launch.size();
    t.round_p50 = pct(round, 0.5);
    t.rate = iters / (wall / 1e9);
    const int q = iters / 4 > 8 ? iters / 4 : 8;
    double q0 = now_ns();
    for (int i = 0; i < q; i++)
        for (size_t k = 0; k < n; k++) {
            if (g.device[k] >= 0)
                CHECK_CUDA(cudaSetDevice(g.device[k]));
            CHECK_CUDA(cudaGraphLaunch(g.exec[k], g.stream[k]));
        }
    t.queued_each = (now_ns() - q0) / 1e3 / q;
    for (size_t k = 0; k < n; k++)
        CHECK_CUDA(cudaStreamSynchronize(g.stream[k]));
    return t;
}

/* Several threads, each timing its own set at once (after a common start): each thread's figures,
 * and the launches (rounds) per second of all of them together. */
struct thread_job {
    const graph_set *g;
    int iters;
    timing t;
    pthread_barrier_t *start;
    wait_mode wait;
};

static void *thread_main(void *p)
{
    thread_job *j = (thread_job *)p;
    if (!j->g->device.empty() && j->g->device[0] >= 0)
        CHECK_CUDA(cudaSetDevice(j->g->device[0]));
    t_wait = j->wait;
    pthread_barrier_wait(j->start);
    j->t = time_set(*j->g, j->iters);
    return NULL;
}

static timing time_threads(const std::vector<graph_set> &sets, int iters,
                           wait_mode wait = WAIT_SYNC)
{
    const size_t n = sets.size();
    std::vector<thread_job> jobs(n);
    std::vector<pthread_t> th(n);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (size_t k = 0; k < n; k++) {
        jobs[k] = {&sets[k], iters, {}, &start, wait};
        pthread_create(&th[k], NULL, thread_main, &jobs[k]);
    }
    for (size_t k = 0; k < n; k++)
        pthread_join(th[k], NULL);
    pthread_barrier_destroy(&start);
    /* the median thread's figures, and the summed rate */
    timing t = {};
    std::vector<double> l50, l90, mean, r50, q;
    for (const thread_job &j : jobs) {
        l50.push_back(j.t.launch_p50), l90.push_back(j.t.launch_p90);
        mean.push_back(j.t.launch_mean), r50.push_back(j.t.round_p50);
        q.push_back(j.t.queued_each);
        t.rate += j.t.rate;
    }
    t.launch_p50 = pct(l50, 0.5), t.launch_p90 = pct(l90, 0.5), t.launch_mean = pct(mean, 0.5);
    t.round_p50 = pct(r50, 0.5), t.queued_each = pct(q, 0.5);
    return t;
}

/* ---- hand-built graphs -------------------------------------------------------------------- */

enum kind { PLAIN, PDL, CLUSTER };
static const char *kind_name[] = {"plain", "pdl", "cluster"};

/* N empty kernels captured on `s` as baton captures a segment: each launch after the first a
 * programmatic dependent launch (PDL), or a cluster launch of 2 blocks (CLUSTER). */
static cudaGraphExec_t build(int n, kind k, cudaStream_t s, long long spin_ns = 0)
{
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; i++) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1];
        cfg.gridDim = dim3(k == CLUSTER ? 2 : 1);
        cfg.blockDim = dim3(32);
        cfg.stream = s;
        cfg.attrs = at;
        if (k == PDL && i > 0) {
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.numAttrs = 1;
        } else if (k == CLUSTER) {
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = 2;
            at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
            cfg.numAttrs = 1;
        }
        CHECK_CUDA(cudaLaunchKernelEx(&cfg, empty_kernel, i));
    }
    if (spin_ns > 0) /* the GPU's work of a run, which the other threads' launches overlap */
        spin_kernel<<<1, 1, 0, s>>>(spin_ns);
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x;
    CHECK_CUDA(cudaGraphInstantiate(&x, g, 0));
    CHECK_CUDA(cudaGraphUpload(x, s));
    CHECK_CUDA(cudaGraphDestroy(g));
    CHECK_CUDA(cudaGraphLaunch(x, s)); /* the first launch's setup stays out of the figures */
    CHECK_CUDA(cudaStreamSynchronize(s));
    return x;
}

static graph_set built_set(int n, kind k, int device, long long spin_ns = 0)
{
    graph_set g;
    cudaStream_t s;
    CHECK_CUDA(cudaSetDevice(device));
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    g.exec.push_back(build(n, k, s, spin_ns));
    g.stream.push_back(s);
    g.device.push_back(device);
    return g;
}

static void free_set(graph_set &g)
{
    for (size_t k = 0; k < g.exec.size(); k++) {
        if (g.device[k] >= 0)
            CHECK_CUDA(cudaSetDevice(g.device[k]));
        CHECK_CUDA(cudaGraphExecDestroy(g.exec[k]));
        CHECK_CUDA(cudaStreamDestroy(g.stream[k]));
    }
    g.exec.clear();
}

static void hand_built(int ngpu)
{
    const int sizes[] = {1, 8, 20, 40};
    printf("\n== hand-built graphs of N empty kernels, stream-captured, on cuda:0 (1 thread)\n");
    header();
    for (int k = PLAIN; k <= CLUSTER; k++)
        for (int n : sizes) {
            if (!room(1, "hand-built graphs"))
                return;
            graph_set g = built_set(n, (kind)k, 0);
            char what[64];
            snprintf(what, sizeof what, "%s N=%d", kind_name[k], n);
            row("built", what, 1, time_set(g, g_iters));
            free_set(g);
        }
    /* several threads, each with its own stream and graph */
    printf("\n== the same from several threads at once, each with its own stream and graph "
           "(median thread; launches/s summed)\n");
    header();
    for (int k = PLAIN; k <= PDL; k++)
        for (int n : {1, 40}) {
            for (int T : {1, 2, 4, g_threads}) {
                if (!room(2, "threaded hand-built graphs"))
                    return;
                std::vector<graph_set> sets;
                for (int i = 0; i < T; i++)
                    sets.push_back(built_set(n, (kind)k, 0));
                char what[64];
                snprintf(what, sizeof what, "%s N=%d, %d threads on cuda:0", kind_name[k], n, T);
                row("threads", what, T, time_threads(sets, g_iters / 2));
                for (graph_set &g : sets)
                    free_set(g);
            }
            if (ngpu < 2)
                continue;
            for (int T : {2, g_threads}) {
                if (!room(2, "threaded hand-built graphs on 2 GPUs"))
                    return;
                std::vector<graph_set> sets;
                for (int i = 0; i < T; i++)
                    sets.push_back(built_set(n, (kind)k, i % 2));
                char what[64];
                snprintf(what, sizeof what, "%s N=%d, %d threads over cuda:0,1", kind_name[k], n,
                         T);
                row("threads", what, T, time_threads(sets, g_iters / 2));
                for (graph_set &g : sets)
                    free_set(g);
            }
        }
    /* as a pool's workers: each graph ends with 200 us of GPU work, so that most threads wait
     * while the others launch; how the waits wait may slow the launches */
    printf("\n== %d threads, each graph N=40 PDL + 200 us of GPU work (a pool's runs), by how "
           "the threads wait\n",
           g_threads);
    header();
    for (int w = WAIT_SYNC; w <= WAIT_BLOCK; w++)
        for (int gpus = 1; gpus <= (ngpu >= 2 ? 2 : 1); gpus++) {
            if (!room(2, "threads with GPU work"))
                return;
            std::vector<graph_set> sets;
            for (int i = 0; i < g_threads; i++)
                sets.push_back(built_set(40, PDL, i % gpus, 200000));
            char what[80];
            snprintf(what, sizeof what, "N=40 pdl + 200us, %d GPU%s, waits: %s", gpus,
                     gpus > 1 ? "s" : "", wait_name[w]);
            row("busy", what, g_threads, time_threads(sets, g_iters / 8, (wait_mode)w));
            for (graph_set &g : sets)
                free_set(g);
        }
    if (ngpu >= 2) {
        /* one thread launching on both GPUs in turn, as one run of a two-stage plan does */
        printf("\n== one thread, a graph on each of 2 GPUs launched in turn (cudaSetDevice "
               "before each)\n");
        header();
        for (int k = PLAIN; k <= PDL; k++) {
            if (!room(1, "one thread over 2 GPUs"))
                return;
            graph_set a = built_set(20, (kind)k, 0), b = built_set(20, (kind)k, 1);
            graph_set both = a;
            both.exec.push_back(b.exec[0]);
            both.stream.push_back(b.stream[0]);
            both.device.push_back(1);
            char what[64];
            snprintf(what, sizeof what, "%s N=20 on cuda:0 + N=20 on cuda:1", kind_name[k]);
            row("2gpu", what, 1, time_set(both, g_iters));
            free_set(both);
        }
    }
}

/* ---- baton's graphs ----------------------------------------------------------------------- */

static void die_baton(const char *what, const baton_error *err)
{
    fprintf(stderr, "bench_graph_launch: %s: %s\n", what, err->message);
    exit(1);
}

/* A runtime of `plan` in graph mode on CUDA with every input filled, run 3 times (captures). With
 * prio != NO_PRIO its streams (one per GPU of the plan, made here and never freed: a benchmark's)
 * have that priority. */
#define NO_PRIO 1000
static baton_runtime *make_runtime(const baton_plan *plan, int prio = NO_PRIO)
{
    baton_options o;
    baton_options_init(&o);
    o.gpu = BATON_GPU_CUDA;
    o.mode = BATON_SYNC_GRAPH;
    o.quiet = 1;
    o.disable_pdl = !g_pdl;
    static thread_local baton_stream streams[16];
    int ns = 0;
    for (int d = 0; prio != NO_PRIO && d < baton_plan_arena_count(plan) && ns < 16; d++) {
        baton_arena a;
        if (baton_plan_arena_info(plan, d, &a) || a.device.kind != BATON_DEVICE_CUDA)
            continue;
        cudaStream_t st;
        CHECK_CUDA(cudaSetDevice(a.device.index));
        CHECK_CUDA(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, prio));
        streams[ns++] = baton_stream{a.device, (void *)st};
    }
    o.streams = ns ? streams : NULL;
    o.n_streams = ns;
    baton_runtime *rt = NULL;
    baton_error err = {};
    if (baton_runtime_create(plan, &o, &rt, &err))
        die_baton("baton_runtime_create", &err);
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_INPUT)
            continue;
        std::vector<char> buf(ti.nbytes ? ti.nbytes : 1, 0);
        if (ti.desc.dtype == BATON_DTYPE_F32 || ti.desc.dtype == BATON_DTYPE_BF16 ||
            ti.desc.dtype == BATON_DTYPE_F16)
            baton_fill_normal(buf.data(), ti.desc.dtype, baton_tensor_desc_numel(&ti.desc),
                              (uint64_t)t + 1, 0, 1);
        if (baton_runtime_set_input(rt, ti.name, buf.data(), ti.nbytes, &err))
            die_baton("baton_runtime_set_input", &err);
    }
    for (int i = 0; i < 3; i++)
        if (baton_runtime_run(rt, &err))
            die_baton("baton_runtime_run", &err);
    return rt;
}

/* baton_runtime_run, timed: per run, its round trip and the host time of its graph launches
 * (step timing puts each launch's time on its segment's first step). */
/* batch > 0: the runs are queued (baton_runtime_run_async) and waited for every `batch` runs
 * (baton_runtime_wait), so that a runtime keeps up to `batch` runs on its GPUs; round is then a
 * batch's time over its runs. */
static timing time_runs(baton_runtime *rt, const baton_plan *plan, int iters, int batch = 0)
{
    baton_error err = {};
    const int ns = baton_plan_step_count(plan);
    baton_runtime_enable_step_timing(rt, 1);
    std::vector<double> launch, round;
    auto launched = [&]() {
        int64_t s = 0, v;
        for (int i = 0; i < ns; i++)
            if (baton_runtime_step_time_ns(rt, i, &v) == 0)
                s += v;
        return (double)s;
    };
    double before = launched(), w0 = now_ns();
    double b0 = now_ns();
    for (int i = 0; i < iters; i++) {
        double r0 = now_ns();
        if (batch > 0) {
            if (baton_runtime_run_async(rt, &err))
                die_baton("baton_runtime_run_async", &err);
            if ((i + 1) % batch == 0 || i + 1 == iters) {
                if (baton_runtime_wait(rt, &err))
                    die_baton("baton_runtime_wait", &err);
                const double now = now_ns();
                round.push_back((now - b0) / 1e3 / batch);
                b0 = now;
            }
        } else {
            if (baton_runtime_run(rt, &err))
                die_baton("baton_runtime_run", &err);
            round.push_back((now_ns() - r0) / 1e3);
        }
        double after = launched();
        launch.push_back((after - before) / 1e3);
        before = after;
    }
    timing t = {};
    t.rate = iters / ((now_ns() - w0) / 1e9);
    baton_runtime_enable_step_timing(rt, 0);
    t.launch_p50 = pct(launch, 0.5), t.launch_p90 = pct(launch, 0.9);
    double s = 0;
    for (double v : launch)
        s += v;
    t.launch_mean = s / (double)launch.size();
    t.round_p50 = pct(round, 0.5);
    t.queued_each = NAN;
    return t;
}

struct run_job {
    baton_runtime *rt;
    const baton_plan *plan;
    int iters;
    timing t;
    pthread_barrier_t *start;
    int batch;
};

static void *run_thread(void *p)
{
    run_job *j = (run_job *)p;
    pthread_barrier_wait(j->start);
    j->t = time_runs(j->rt, j->plan, j->iters, j->batch);
    return NULL;
}

/* Runtimes rts[i] (of plans[i]) run at once, a thread each, `iters` runs apiece: the median
 * thread's figures and the runs per second of all of them together. */
static timing run_threads(const std::vector<baton_runtime *> &rts,
                          const std::vector<const baton_plan *> &plans, int iters, int batch = 0)
{
    const size_t T = rts.size();
    std::vector<run_job> jobs(T);
    std::vector<pthread_t> th(T);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)T);
    for (size_t i = 0; i < T; i++) {
        jobs[i] = {rts[i], plans[i], iters, {}, &start, batch};
        pthread_create(&th[i], NULL, run_thread, &jobs[i]);
    }
    for (size_t i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    timing t = {};
    std::vector<double> l50, l90, mean, r50;
    for (const run_job &j : jobs) {
        l50.push_back(j.t.launch_p50), l90.push_back(j.t.launch_p90);
        mean.push_back(j.t.launch_mean), r50.push_back(j.t.round_p50);
        t.rate += j.t.rate;
    }
    t.launch_p50 = pct(l50, 0.5), t.launch_p90 = pct(l90, 0.5);
    t.launch_mean = pct(mean, 0.5), t.round_p50 = pct(r50, 0.5);
    t.queued_each = NAN;
    return t;
}

#ifdef BATON_BENCH_HOOKS
static std::vector<cudaGraphNode_t> graph_nodes(cudaGraph_t g)
{
    size_t nn = 0;
    CHECK_CUDA(cudaGraphGetNodes(g, NULL, &nn));
    std::vector<cudaGraphNode_t> nodes(nn);
    CHECK_CUDA(cudaGraphGetNodes(g, nodes.data(), &nn));
    nodes.resize(nn);
    return nodes;
}

/* g's edges with their data, asked with room for plenty (a count asked without edge data may be
 * refused as lossy once the graph has programmatic edges) */
static size_t graph_edges(cudaGraph_t g, std::vector<cudaGraphNode_t> &from,
                          std::vector<cudaGraphNode_t> &to, std::vector<cudaGraphEdgeData> &ed)
{
    size_t nn = graph_nodes(g).size(), ne = 8 * nn + 64;
    from.assign(ne, NULL), to.assign(ne, NULL), ed.assign(ne, cudaGraphEdgeData{});
    CHECK_CUDA(cudaGraphGetEdges(g, from.data(), to.data(), ed.data(), &ne));
    return ne;
}

/* What a graph holds: its nodes by kind, its edges, the programmatic ones, and the kernel nodes
 * launched as clusters. */
static std::string census(cudaGraph_t g)
{
    std::vector<cudaGraphNode_t> nodes = graph_nodes(g);
    size_t nn = nodes.size();
    int by[16] = {0}, cluster = 0;
    for (cudaGraphNode_t n : nodes) {
        cudaGraphNodeType t;
        CHECK_CUDA(cudaGraphNodeGetType(n, &t));
        by[(int)t < 16 ? (int)t : 15]++;
        if (t == cudaGraphNodeTypeKernel) {
            cudaLaunchAttributeValue v = {};
            if (cudaGraphKernelNodeGetAttribute(n, cudaLaunchAttributeClusterDimension, &v) ==
                    cudaSuccess &&
                v.clusterDim.x * v.clusterDim.y * v.clusterDim.z > 1)
                cluster++;
            (void)cudaGetLastError();
        }
    }
    std::vector<cudaGraphNode_t> from, to;
    std::vector<cudaGraphEdgeData> ed;
    size_t ne = graph_edges(g, from, to, ed);
    int prog = 0;
    for (size_t i = 0; i < ne; i++)
        prog += ed[i].type == cudaGraphDependencyTypeProgrammatic;
    char s[256];
    snprintf(s, sizeof s,
             "%zu nodes: %d kernel (%d cluster), %d memcpy, %d memset, %d host, %d event record, "
             "%d event wait, %d empty, %d other; %zu edges, %d programmatic",
             nn, by[cudaGraphNodeTypeKernel], cluster, by[cudaGraphNodeTypeMemcpy],
             by[cudaGraphNodeTypeMemset], by[cudaGraphNodeTypeHost],
             by[cudaGraphNodeTypeEventRecord], by[cudaGraphNodeTypeWaitEvent],
             by[cudaGraphNodeTypeEmpty],
             (int)nn - by[cudaGraphNodeTypeKernel] - by[cudaGraphNodeTypeMemcpy] -
                 by[cudaGraphNodeTypeMemset] - by[cudaGraphNodeTypeHost] -
                 by[cudaGraphNodeTypeEventRecord] - by[cudaGraphNodeTypeWaitEvent] -
                 by[cudaGraphNodeTypeEmpty],
             ne, prog);
    return s;
}

/* Node n of g (of nn nodes) replaced by an empty node with the same neighbours (default edges). */
static void to_empty(cudaGraph_t g, cudaGraphNode_t n, size_t nn)
{
    size_t nd = nn, nu = nn;
    std::vector<cudaGraphNode_t> in(nn), out(nn);
    std::vector<cudaGraphEdgeData> ein(nn), eout(nn);
    CHECK_CUDA(cudaGraphNodeGetDependencies(n, in.data(), ein.data(), &nd));
    CHECK_CUDA(cudaGraphNodeGetDependentNodes(n, out.data(), eout.data(), &nu));
    cudaGraphNode_t e;
    CHECK_CUDA(cudaGraphAddEmptyNode(&e, g, in.data(), nd));
    CHECK_CUDA(cudaGraphDestroyNode(n));
    for (size_t i = 0; i < nu; i++)
        CHECK_CUDA(cudaGraphAddDependencies(g, &e, &out[i], NULL, 1));
}

enum variant { V_CLONE, V_NO_EVENTS, V_NO_COPIES, V_NO_PROG, V_KERNELS_ONLY, V_N };
static const char *variant_name[] = {
    "copy of it, instantiated here", "event nodes -> empty", "memcpy/memset nodes -> empty",
    "programmatic edges -> default", "kernels only, default edges"};

/* A copy of template g changed as variant v says, instantiated and uploaded on s. */
static cudaGraphExec_t variant_exec(cudaGraph_t g, variant v, cudaStream_t s)
{
    cudaGraph_t c;
    CHECK_CUDA(cudaGraphClone(&c, g));
    std::vector<cudaGraphNode_t> nodes = graph_nodes(c);
    const size_t nn = nodes.size();
    if (v == V_NO_PROG || v == V_KERNELS_ONLY) {
        std::vector<cudaGraphNode_t> from, to;
        std::vector<cudaGraphEdgeData> ed;
        size_t ne = graph_edges(c, from, to, ed);
        for (size_t i = 0; i < ne; i++)
            if (ed[i].type == cudaGraphDependencyTypeProgrammatic) {
                CHECK_CUDA(cudaGraphRemoveDependencies(c, &from[i], &to[i], &ed[i], 1));
                CHECK_CUDA(cudaGraphAddDependencies(c, &from[i], &to[i], NULL, 1));
            }
    }
    for (cudaGraphNode_t n : nodes) {
        cudaGraphNodeType t;
        CHECK_CUDA(cudaGraphNodeGetType(n, &t));
        const bool ev = t == cudaGraphNodeTypeEventRecord || t == cudaGraphNodeTypeWaitEvent;
        const bool cp = t == cudaGraphNodeTypeMemcpy || t == cudaGraphNodeTypeMemset;
        if ((v == V_NO_EVENTS && ev) || (v == V_NO_COPIES && cp) ||
            (v == V_KERNELS_ONLY && t != cudaGraphNodeTypeKernel && t != cudaGraphNodeTypeEmpty))
            to_empty(c, n, nn);
    }
    cudaGraphExec_t x;
    CHECK_CUDA(cudaGraphInstantiate(&x, c, 0));
    CHECK_CUDA(cudaGraphUpload(x, s));
    CHECK_CUDA(cudaGraphDestroy(c));
    CHECK_CUDA(cudaGraphLaunch(x, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    return x;
}

/* Whether g holds baton's gate kernel (a segment queued ahead of a CPU step): launched outside the
 * runtime, it would wait for a host that never opens it. */
static bool gated(cudaGraph_t g)
{
    for (cudaGraphNode_t n : graph_nodes(g)) {
        cudaGraphNodeType t;
        cudaKernelNodeParams kp;
        const char *name = NULL;
        if (cudaGraphNodeGetType(n, &t) == cudaSuccess && t == cudaGraphNodeTypeKernel &&
            cudaGraphKernelNodeGetParams(n, &kp) == cudaSuccess &&
            cudaFuncGetName(&name, kp.func) == cudaSuccess && name && strstr(name, "gate_kernel"))
            return true;
        (void)cudaGetLastError();
    }
    return false;
}

static int count_kind(cudaGraph_t g, int kind)
{
    int n = 0;
    for (cudaGraphNode_t x : graph_nodes(g)) {
        cudaGraphNodeType t;
        n += cudaGraphNodeGetType(x, &t) == cudaSuccess && (int)t == kind;
    }
    return n;
}

/* The GPUs' pace: `rounds` rounds of every set's graphs queued by this thread without waiting,
 * then one synchronisation; rate in runs (rounds of a set) per second, queued_each the wall time
 * a run, launch_mean the host's time in cudaGraphLaunch a run. */
static timing floor_of(const std::vector<graph_set> &sets, int rounds)
{
    double w0 = now_ns(), in_launch = 0;
    for (int r = 0; r < rounds; r++)
        for (const graph_set &g : sets)
            for (size_t k = 0; k < g.exec.size(); k++) {
                CHECK_CUDA(cudaSetDevice(g.device[k]));
                double a = now_ns();
                CHECK_CUDA(cudaGraphLaunch(g.exec[k], g.stream[k]));
                in_launch += now_ns() - a;
            }
    for (const graph_set &g : sets)
        for (size_t k = 0; k < g.exec.size(); k++)
            CHECK_CUDA(cudaStreamSynchronize(g.stream[k]));
    const double wall = now_ns() - w0, runs = (double)rounds * (double)sets.size();
    timing t = {};
    t.launch_p50 = t.launch_p90 = t.round_p50 = NAN;
    t.launch_mean = in_launch / 1e3 / runs;
    t.queued_each = wall / 1e3 / runs;
    t.rate = runs / (wall / 1e9);
    return t;
}

/* Every captured graph of rt, in device then slot order (a run's order for scripts/pipeline.py's
 * plans), with the stream and GPU the runtime launches it on. */
static graph_set runtime_graphs(baton_runtime *rt, const baton_plan *plan,
                                std::vector<cudaGraph_t> *templates, bool say = true)
{
    graph_set g;
    for (int d = 1; d < baton_plan_arena_count(plan); d++) {
        baton_arena a;
        if (baton_plan_arena_info(plan, d, &a) || a.device.kind != BATON_DEVICE_CUDA)
            continue;
        dev_ctx *ctx = baton__runtime_device_ctx(rt, d);
        if (!ctx)
            continue;
        cudaGraphExec_t x;
        cudaGraph_t t;
        cudaStream_t s;
        int n = baton__dev_cuda_graph(ctx, 0, &x, &t, &s);
        for (int slot = 0; slot < n; slot++) {
            baton__dev_cuda_graph(ctx, slot, &x, &t, &s);
            if (!x)
                continue;
            if (gated(t)) { /* it waits for the host to open the gate: never launched bare */
                if (say && templates)
                    printf("graph slot %d (cuda:%d) begins with baton's gate (queued ahead of a "
                           "CPU step): not launched bare\n",
                           slot, a.device.index);
                continue;
            }
            g.exec.push_back(x);
            g.stream.push_back(s);
            g.device.push_back(a.device.index);
            if (templates)
                templates->push_back(t);
        }
    }
    return g;
}
#endif

static void baton_plans(const std::vector<const char *> &paths)
{
    baton_registry *reg = NULL;
    if (baton_registry_create(&reg)) {
        fprintf(stderr, "bench_graph_launch: baton_registry_create failed\n");
        exit(1);
    }
    for (const char *path : paths) {
        if (!room(3, path))
            break;
        baton_plan *plan = NULL;
        baton_error err = {};
        if (baton_plan_load(reg, path, &plan, &err))
            die_baton(path, &err);
        printf("\n== baton's graphs: %s (%s, graph mode, PDL %s)\n", path, baton_plan_name(plan),
               g_pdl ? "on" : "off");
        baton_runtime *rt = make_runtime(plan);
        if (baton_runtime_note(rt))
            printf("note: %s\n", baton_runtime_note(rt));
        baton_run_stats s0, s1;
        baton_runtime_stats(rt, &s0);
        header();
        const int iters = g_iters / 2 > 100 ? g_iters / 2 : 100;
        row("baton", "baton_runtime_run (launch: its graph launches)", 1,
            time_runs(rt, plan, iters));
        baton_runtime_stats(rt, &s1);
        const double r = (double)(s1.runs - s0.runs);
        printf("per run, over %.0f timed runs: %.2f graph launches, %.3f captures, %.3f graph "
               "updates, %.2f host waits (a capture or an update on every run would cost tens of "
               "us)\n",
               r, (s1.graph_launches - s0.graph_launches) / r, (s1.captures - s0.captures) / r,
               (s1.graph_updates - s0.graph_updates) / r, (s1.host_waits - s0.host_waits) / r);
        printf("RESULT launch.baton.captures_per_run %.4f\nRESULT launch.baton.updates_per_run "
               "%.4f\n",
               (s1.captures - s0.captures) / r, (s1.graph_updates - s0.graph_updates) / r);
#ifdef BATON_BENCH_HOOKS
        std::vector<cudaGraph_t> templ;
        graph_set all = runtime_graphs(rt, plan, &templ);
        for (size_t k = 0; k < all.exec.size(); k++)
            printf("graph %zu (cuda:%d): %s\n", k, all.device[k], census(templ[k]).c_str());
        if (!all.exec.empty())
            row("bare", "all its graphs, cudaGraphLaunch on the runtime's streams", 1,
                time_set(all, iters));
        for (size_t k = 0; k < all.exec.size() && !g_quick && room(2, "graph variants"); k++) {
            graph_set one;
            one.exec.push_back(all.exec[k]);
            one.stream.push_back(all.stream[k]);
            one.device.push_back(all.device[k]);
            CHECK_CUDA(cudaSetDevice(all.device[k]));
            char what[96];
            snprintf(what, sizeof what, "graph %zu (cuda:%d) as baton launches it", k,
                     all.device[k]);
            row("bare", what, 1, time_set(one, iters));
            for (int v = V_CLONE; v < V_N; v++) {
                cudaStream_t st;
                CHECK_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
                graph_set alt;
                alt.exec.push_back(variant_exec(templ[k], (variant)v, st));
                alt.stream.push_back(st);
                alt.device.push_back(all.device[k]);
                snprintf(what, sizeof what, "graph %zu: %s", k, variant_name[v]);
                row("variant", what, 1, time_set(alt, iters));
                free_set(alt);
            }
        }
#else
        printf("(the bare launches and the graph variants need a testing build: "
               "-DBATON_TESTING=ON)\n");
#endif
        /* T runtimes of the plan, one thread each, as a pool's workers run them */
        if (room(6, "baton runtimes in threads")) {
            std::vector<baton_runtime *> rts(g_threads);
            for (int i = 0; i < g_threads; i++)
                rts[i] = make_runtime(plan);
            for (int T : {1, 2, 4, g_threads}) {
                if (g_quick && T != g_threads)
                    continue;
                if (!room(2, "baton runtimes in threads"))
                    break;
                char what[96];
                snprintf(what, sizeof what, "baton_runtime_run, %d runtimes, a thread each", T);
                row("threads", what, T,
                    run_threads(std::vector<baton_runtime *>(rts.begin(), rts.begin() + T),
                                std::vector<const baton_plan *>((size_t)T, plan), iters / 2));
            }
            /* Issue 43's convoy: runs that share each GPU fairly end their first stage
             * together, then all wait on the last GPU while the first idles, since a runtime
             * run to its end holds its thread. Kept queued (run_async, a wait every K runs),
             * a runtime's next first stage follows its last one on the first GPU's stream. */
            for (int T : {2, 4, g_threads})
                for (int K : {2, 4}) {
                    if (!room(2, "runs queued on threads"))
                        break;
                    char what[96];
                    snprintf(what, sizeof what, "%d runtimes, runs queued, a wait every %d", T, K);
                    row("queued", what, T,
                        run_threads(std::vector<baton_runtime *>(rts.begin(), rts.begin() + T),
                                    std::vector<const baton_plan *>((size_t)T, plan), iters / 2,
                                    K));
                }
            /* The convoy again with the runtimes' streams at different priorities (the GPU's
             * range spread over them): whether breaking the fair share staggers the runs. */
            if (room(6, "runtimes at stream priorities")) {
                int least = 0, greatest = 0;
                CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
                std::vector<baton_runtime *> pr;
                for (int i = 0; i < g_threads; i++)
                    pr.push_back(make_runtime(
                        plan, g_threads > 1 ? greatest + (least - greatest) * i / (g_threads - 1)
                                            : least));
                char what[96];
                snprintf(what, sizeof what, "baton_runtime_run, %d runtimes, priorities %d..%d",
                         g_threads, greatest, least);
                row("threads", what, g_threads,
                    run_threads(pr, std::vector<const baton_plan *>((size_t)g_threads, plan),
                                iters / 2));
                for (baton_runtime *x : pr)
                    baton_runtime_destroy(x);
            }
#ifdef BATON_BENCH_HOOKS
            for (int T : {1, g_threads}) {
                if (g_quick)
                    break;
                if (!room(2, "bare launches in threads"))
                    break;
                std::vector<graph_set> sets;
                for (int i = 0; i < T; i++)
                    sets.push_back(runtime_graphs(rts[i], plan, NULL));
                char what[96];
                snprintf(what, sizeof what, "bare launches of a run's graphs, %d runtimes", T);
                row("threads", what, T, time_threads(sets, iters / 2));
            }
            /* The GPUs' own pace: one thread queues every runtime's graphs round after round,
             * never waiting until the end (runs overwrite each other's intermediates: the
             * figures only). A pool capped near this is bound by its GPUs, not its host. Then
             * the same with copies of the graphs without their event nodes (the order between
             * GPUs) or their memcpy nodes (peer copies), on the same streams: what holds the
             * GPUs back, where the plan has them. */
            if (room(3, "the GPUs' floor")) {
                std::vector<graph_set> sets;
                std::vector<std::vector<cudaGraph_t>> templ((size_t)g_threads);
                for (int i = 0; i < g_threads; i++)
                    sets.push_back(runtime_graphs(rts[i], plan, &templ[i], false));
                char what[96];
                snprintf(what, sizeof what,
                         "floor: %d runtimes' graphs queued by 1 thread, no waits (rate: runs/s)",
                         g_threads);
                row("floor", what, 1, floor_of(sets, iters / 2));
                const struct {
                    variant v;
                    int kinds[2];
                    const char *what;
                } alt[] = {
                    {V_NO_EVENTS,
                     {cudaGraphNodeTypeEventRecord, cudaGraphNodeTypeWaitEvent},
                     "floor, event nodes -> empty"},
                    {V_NO_COPIES,
                     {cudaGraphNodeTypeMemcpy, cudaGraphNodeTypeMemset},
                     "floor, memcpy/memset nodes -> empty"},
                };
                for (const auto &x : alt) {
                    bool has = false;
                    for (cudaGraph_t t : templ[0])
                        has = has || count_kind(t, x.kinds[0]) + count_kind(t, x.kinds[1]) > 0;
                    if (!has || g_quick || !room(3, x.what))
                        continue;
                    std::vector<graph_set> alts = sets;
                    for (int i = 0; i < g_threads; i++)
                        for (size_t k = 0; k < alts[i].exec.size(); k++) {
                            CHECK_CUDA(cudaSetDevice(alts[i].device[k]));
                            alts[i].exec[k] = variant_exec(templ[i][k], x.v, alts[i].stream[k]);
                        }
                    row("floor", x.what, 1, floor_of(alts, iters / 2));
                    for (graph_set &g : alts)
                        for (cudaGraphExec_t e : g.exec)
                            CHECK_CUDA(cudaGraphExecDestroy(e));
                }
            }
#endif
            for (baton_runtime *x : rts)
                baton_runtime_destroy(x);
        }
        baton_runtime_destroy(rt);
        baton_plan_free(plan);
    }
    baton_registry_destroy(reg);
}

/* Two plans at once (--pair), e.g. the one-stage plan on cuda:0 and the same on cuda:1: half the
 * threads' runtimes of each, each half alone and then both halves together. Two GPUs that share
 * nothing but the process should add their runs per second. */
static void pair(const char *pa, const char *pb)
{
    if (!room(8, "the pair"))
        return;
    baton_registry *reg = NULL;
    baton_plan *plan[2] = {NULL, NULL};
    baton_error err = {};
    const char *path[2] = {pa, pb};
    if (baton_registry_create(&reg))
        die_baton("baton_registry_create", &err);
    for (int k = 0; k < 2; k++)
        if (baton_plan_load(reg, path[k], &plan[k], &err))
            die_baton(path[k], &err);
    const int half = g_threads / 2 > 0 ? g_threads / 2 : 1;
    printf("\n== together: %d runtimes of %s and %d of %s, a thread each\n", half, pa, half, pb);
    header();
    std::vector<baton_runtime *> rts[2];
    std::vector<const baton_plan *> ps[2];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < half; i++) {
            rts[k].push_back(make_runtime(plan[k]));
            ps[k].push_back(plan[k]);
        }
    const int iters = g_iters / 4 > 100 ? g_iters / 4 : 100;
    char what[96];
    for (int k = 0; k < 2; k++) {
        snprintf(what, sizeof what, "%s alone, %d runtimes", k ? "second" : "first", half);
        row("pair", what, half, run_threads(rts[k], ps[k], iters));
    }
    std::vector<baton_runtime *> all(rts[0]);
    std::vector<const baton_plan *> allp(ps[0]);
    all.insert(all.end(), rts[1].begin(), rts[1].end());
    allp.insert(allp.end(), ps[1].begin(), ps[1].end());
    snprintf(what, sizeof what, "both together, %d runtimes (rate: summed)", 2 * half);
    row("pair", what, 2 * half, run_threads(all, allp, iters));
    for (int k = 0; k < 2; k++) {
        for (baton_runtime *x : rts[k])
            baton_runtime_destroy(x);
        baton_plan_free(plan[k]);
    }
    baton_registry_destroy(reg);
}

/* Last, since CUPTI once enabled slows the process's later launches too: the first plan's runs and
 * bare launches again while the runtime records its device timeline (baton_runtime_trace_begin),
 * as bench_pipeline's traced pass does: how much of a traced launch is CUPTI's. */
static void traced(const char *path)
{
    if (!room(3, "the traced pass"))
        return;
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_error err = {};
    if (baton_registry_create(&reg) || baton_plan_load(reg, path, &plan, &err))
        die_baton(path, &err);
    printf("\n== traced (CUPTI records every kernel, as bench_pipeline's traced pass): %s\n", path);
    baton_runtime *rt = make_runtime(plan);
    const int iters = g_iters / 4 > 100 ? g_iters / 4 : 100;
    header();
    if (baton_runtime_trace_begin(rt,
                                  (size_t)iters * 4 * (size_t)baton_plan_step_count(plan) + 4096)) {
        printf("trace_begin failed (out of memory)\n");
    } else {
        row("traced", "baton_runtime_run (launch: its graph launches)", 1,
            time_runs(rt, plan, iters));
#ifdef BATON_BENCH_HOOKS
        graph_set all = runtime_graphs(rt, plan, NULL);
        if (!all.exec.empty())
            row("traced", "all its graphs, cudaGraphLaunch on the runtime's streams", 1,
                time_set(all, iters));
#endif
        baton_runtime_trace_begin(rt, 0);
    }
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
}

int main(int argc, char **argv)
{
    std::vector<const char *> plans;
    const char *json = NULL, *pair_a = NULL, *pair_b = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plan") && i + 1 < argc)
            plans.push_back(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            g_iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            g_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc)
            g_budget_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--no-pdl"))
            g_pdl = 0;
        else if (!strcmp(argv[i], "--quick"))
            g_quick = 1;
        else if (!strcmp(argv[i], "--pair") && i + 2 < argc) {
            pair_a = argv[++i];
            pair_b = argv[++i];
        } else {
            fprintf(stderr,
                    "usage: bench_graph_launch [--plan PLAN.json]... [--iters N] [--threads T] "
                    "[--budget S] [--no-pdl] [--quick] [--pair A.json B.json] [--json FILE]\n");
            return 2;
        }
    }
    if (g_iters < 16 || g_threads < 1 || g_threads > 64) {
        fprintf(stderr, "bench_graph_launch: --iters >= 16, --threads 1..64\n");
        return 2;
    }
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
        printf("bench_graph_launch: no CUDA device: nothing measured\n");
        return 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* a call cut short by its timeout still shows its rows */
    g_t0 = now_ns();
    if (json && !(g_json = fopen(json, "w"))) {
        fprintf(stderr, "bench_graph_launch: cannot write %s\n", json);
        return 1;
    }
    if (g_json)
        fprintf(g_json, "{\"bench\": \"graph_launch\", \"gpus\": %d, \"rows\": [", ngpu);
    cudaDeviceProp p;
    CHECK_CUDA(cudaGetDeviceProperties(&p, 0));
    int drv = 0, rtv = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rtv);
    printf("bench_graph_launch: %d GPU(s), cuda:0 %s, driver %d, runtime %d; %d iterations; all "
           "figures host us (launch: cudaGraphLaunch, a run's launches summed; round: launch + "
           "cudaStreamSynchronize; queued: each of iters/4 launches issued back to back)\n",
           ngpu, p.name, drv, rtv, g_iters);
    for (int d = 0; d < ngpu && d < 2; d++) { /* contexts made before anything is timed */
        CHECK_CUDA(cudaSetDevice(d));
        CHECK_CUDA(cudaFree(0));
    }
    if (!g_quick)
        hand_built(ngpu);
    if (!plans.empty())
        baton_plans(plans);
    if (pair_a)
        pair(pair_a, pair_b);
    if (!plans.empty() && !g_quick)
        traced(plans[0]);
    if (g_json) {
        fprintf(g_json, "\n]}\n");
        fclose(g_json);
    }
    printf("bench_graph_launch: %.1f s\n", elapsed_s());
    return 0;
}
