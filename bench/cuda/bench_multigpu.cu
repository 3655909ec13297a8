/* bench_multigpu.cu: what a plan over two GPUs costs against the floors of the same machine, in
 * one process: (1) a GPU-to-GPU copy of 16 MiB to 1 GiB: cudaMemcpyPeerAsync before the process
 * enables peer access (the driver stages it through the host), then, with peer access on both
 * ways, cudaMemcpyPeerAsync, a copy kernel reading the peer's memory in 16-byte loads, and baton's
 * transfer (the CUDA device's copy() as the runtime issues it), each checked for the bytes it
 * moved; (2) a collective step (a plan of one all_reduce or all_gather over cuda:0 and cuda:1, run
 * by the runtime) against NCCL's own call on the same bytes, each as a host-timed round trip that
 * ends when both GPUs are done; (3) where graph mode keeps a GPU-to-GPU dependency: a run of K
 * small kernels on cuda:0, a peer copy and K kernels on cuda:1, as per-GPU graphs with the event
 * record and wait outside them, with event record/wait nodes inside them, or captured into one
 * graph over both GPUs; µs per run over back-to-back runs, each variant checked for the values
 * that the dependencies promise; and the same work as a baton plan in graph mode, with the
 * runtime's waits outside its graphs and as event nodes inside them. Needs two GPUs (prints why
 * and exits 0 otherwise) and NCCL for (2).
 *   bench_multigpu [--reps N]     (keep NCCL_NVLS_ENABLE=0 on the GPU machines) */
#include <nccl.h>

#include <string>

#include "baton/baton.h"
#include "bench/cuda/bench_common.h"
#include "core/dynlib.h"
extern "C" {
#include "scheduler/device.h"
}

static struct {
    ncclResult_t (*init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
} nccl;

static int load_nccl(void)
{
    const char *const names[] = {getenv("BATON_NCCL_LIBRARY"), "libnccl.so.2"};
    const dynlib_sym syms[] = {
        {"ncclCommInitAll", &nccl.init_all}, {"ncclAllReduce", &nccl.all_reduce},
        {"ncclAllGather", &nccl.all_gather}, {"ncclGroupStart", &nccl.group_start},
        {"ncclGroupEnd", &nccl.group_end},
    };
    const char *missing;
    return baton__dynlib_open(names, 2, syms, sizeof syms / sizeof syms[0], &missing, NULL, 0) !=
           NULL;
}

/* ---- (1) GPU-to-GPU copies ------------------------------------------------------------------ */

/* A pattern of the word index, so that a copy that moved the wrong bytes (or none) is caught. */
__global__ void pattern_fill(uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint32_t)i * 2654435761u ^ seed;
}

__global__ void pattern_check(const uint32_t *p, size_t n, uint32_t seed, unsigned long long *bad)
{
    unsigned long long mine = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        mine += p[i] != ((uint32_t)i * 2654435761u ^ seed);
    if (mine)
        atomicAdd(bad, mine);
}

/* The copy kernel of the comparison: launched on the reader, it reads the peer's memory over
 * NVLink in 16-byte loads (the bytes are a multiple of 16 here). */
__global__ void peer_read_copy(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n16)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

typedef struct copy_bufs {
    void *src, *dst; /* on cuda:0 and cuda:1 */
    size_t bytes;
    cudaStream_t s; /* cuda:1's: every copy below is issued by the reader, as baton's transfer is */
    cudaEvent_t e0, e1;
    unsigned long long *bad; /* on cuda:1 */
    int sms;                 /* cuda:1's multiprocessors */
} copy_bufs;

static copy_bufs copy_bufs_make(size_t bytes)
{
    copy_bufs b;
    memset(&b, 0, sizeof b);
    b.bytes = bytes;
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaMalloc(&b.src, bytes));
    pattern_fill<<<1024, 256>>>((uint32_t *)b.src, bytes / 4, (uint32_t)bytes);
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaMalloc(&b.dst, bytes));
    CHECK_CUDA(cudaMalloc(&b.bad, sizeof *b.bad));
    CHECK_CUDA(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreate(&b.e0));
    CHECK_CUDA(cudaEventCreate(&b.e1));
    CHECK_CUDA(cudaDeviceGetAttribute(&b.sms, cudaDevAttrMultiProcessorCount, 1));
    return b;
}

static void copy_bufs_free(copy_bufs *b)
{
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaFree(b->dst));
    CHECK_CUDA(cudaFree(b->bad));
    CHECK_CUDA(cudaStreamDestroy(b->s));
    CHECK_CUDA(cudaEventDestroy(b->e0));
    CHECK_CUDA(cudaEventDestroy(b->e1));
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaFree(b->src));
}

/* GB/s of issue() (one copy of b->bytes on b->s), median of `reps` after two warm-ups, each timed
 * by events on the reader's stream; -1 when the copy left the destination wrong (poisoned before
 * each timed copy is checked once, after the last). */
template <typename F> static double copy_gbs(copy_bufs *b, int reps, const char *what, F issue)
{
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaMemsetAsync(b->dst, 0xA5, b->bytes, b->s));
    std::vector<double> t;
    for (int r = 0; r < reps + 2; r++) {
        CHECK_CUDA(cudaEventRecord(b->e0, b->s));
        issue();
        CHECK_CUDA(cudaEventRecord(b->e1, b->s));
        CHECK_CUDA(cudaEventSynchronize(b->e1));
        float ms;
        CHECK_CUDA(cudaEventElapsedTime(&ms, b->e0, b->e1));
        if (r >= 2)
            t.push_back(ms);
    }
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaMemsetAsync(b->bad, 0, sizeof *b->bad, b->s));
    pattern_check<<<1024, 256, 0, b->s>>>((const uint32_t *)b->dst, b->bytes / 4,
                                          (uint32_t)b->bytes, b->bad);
    unsigned long long bad = 0;
    CHECK_CUDA(cudaMemcpyAsync(&bad, b->bad, sizeof bad, cudaMemcpyDeviceToHost, b->s));
    CHECK_CUDA(cudaStreamSynchronize(b->s));
    if (bad) {
        printf("peer copy %zu B: %s left %llu wrong words: not timed\n", b->bytes, what, bad);
        return -1;
    }
    return b->bytes / (median(t) * 1e6);
}

/* (1a) Before anything enables peer access: what a cudaMemcpyPeerAsync costs when the driver
 * stages it through the host. The figure the earlier benchmark reported for both of its columns
 * (its copies ran before any cudaDeviceEnablePeerAccess of the process). */
static double peer_copy_off(size_t bytes, int reps)
{
    copy_bufs b = copy_bufs_make(bytes);
    double off = copy_gbs(&b, reps, "cudaMemcpyPeerAsync (peer access off)",
                          [&] { CHECK_CUDA(cudaMemcpyPeerAsync(b.dst, 1, b.src, 0, bytes, b.s)); });
    copy_bufs_free(&b);
    return off;
}

/* (1b) With peer access on both ways: cudaMemcpyPeerAsync, the peer-reading copy kernel, and
 * baton's transfer as the runtime issues it (the CUDA device's copy() of a GPU-to-GPU transfer
 * on the reader's stream, after the runtime's prepare-time peer_enable() both ways), in
 * alternating order; GB/s and baton's ratio to the best of the other two. */
static void peer_copy(size_t bytes, int reps, double off, const dev_ops *ops, dev_ctx *d0,
                      dev_ctx *d1)
{
    copy_bufs b = copy_bufs_make(bytes);
    const size_t n16 = bytes / 16;
    const unsigned blocks = (unsigned)b.sms * 4;
    cudaStream_t bs = (cudaStream_t)ops->stream(d1);
    /* baton's copy goes on its own stream: the events that time it are recorded there */
    copy_bufs bb = b;
    bb.s = bs;
    double memcpy_gbs = copy_gbs(&b, reps, "cudaMemcpyPeerAsync", [&] {
        CHECK_CUDA(cudaMemcpyPeerAsync(b.dst, 1, b.src, 0, bytes, b.s));
    });
    double kernel_gbs = copy_gbs(&b, reps, "the peer-reading copy kernel", [&] {
        peer_read_copy<<<blocks, 512, 0, b.s>>>((const uint4 *)b.src, (uint4 *)b.dst, n16);
        CHECK_CUDA(cudaGetLastError());
    });
    double baton_gbs = copy_gbs(&bb, reps, "baton's transfer", [&] {
        baton_error err = {0};
        if (ops->copy(d1, b.dst, b.src, bytes, DEV_COPY_D2D, "bench", &err)) {
            fprintf(stderr, "bench_multigpu: baton's transfer: %s\n", err.message);
            exit(1);
        }
    });
    double best = memcpy_gbs > kernel_gbs ? memcpy_gbs : kernel_gbs;
    printf("peer copy %7.1f MiB   peer access off %6.1f GB/s   on: cudaMemcpyPeerAsync %6.1f   "
           "copy kernel %6.1f   baton %6.1f   baton/best %.3f\n",
           bytes / 1048576.0, off, memcpy_gbs, kernel_gbs, baton_gbs, baton_gbs / best);
    printf("RESULT peer.%zu off_gbs %.2f memcpy_gbs %.2f kernel_gbs %.2f baton_gbs %.2f "
           "baton_ratio %.4f\n",
           bytes, off, memcpy_gbs, kernel_gbs, baton_gbs, baton_gbs / best);
    copy_bufs_free(&b);
}

static void peer_copies(int reps)
{
    static const size_t mib[] = {16, 64, 256, 1024};
    double off[4];
    for (int i = 0; i < 4; i++)
        off[i] = peer_copy_off(mib[i] << 20, reps);
    int can01 = 0, can10 = 0;
    CHECK_CUDA(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CHECK_CUDA(cudaDeviceCanAccessPeer(&can10, 1, 0));
    printf("peer access: cuda:0 -> cuda:1 %s, cuda:1 -> cuda:0 %s\n", can01 ? "can" : "cannot",
           can10 ? "can" : "cannot");
    const dev_ops *ops = &baton__dev_cuda_ops;
    dev_ctx *d0 = NULL, *d1 = NULL;
    baton_error err = {0};
    baton_device c0 = {BATON_DEVICE_CUDA, 0}, c1 = {BATON_DEVICE_CUDA, 1};
    dev_open_args args = {};
    args.n_events = 1;
    if (ops->open(c0, &args, &d0, &err) || ops->open(c1, &args, &d1, &err) ||
        ops->peer_enable(d1, d0, &err) || ops->peer_enable(d0, d1, &err)) {
        fprintf(stderr, "bench_multigpu: opening baton's CUDA devices: %s\n", err.message);
        exit(1);
    }
    for (int i = 0; i < 4; i++)
        peer_copy(mib[i] << 20, reps, off[i], ops, d0, d1);
    ops->close(d1);
    ops->close(d0);
}

/* A plan of one collective over two GPUs, on constants, with nothing copied to the host. */
static baton_runtime *coll_plan(baton_registry *reg, const char *op, long long elems,
                                baton_plan **plan)
{
    char json[2048];
    long long out = strcmp(op, "all_gather") == 0 ? 2 * elems : elems;
    snprintf(json, sizeof json,
             "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"coll\", \"tensors\": ["
             "{\"name\": \"c0\", \"dtype\": \"f32\", \"shape\": [%lld], \"role\": \"constant\", "
             "\"init\": {\"kind\": \"fill\", \"value\": 1}},"
             "{\"name\": \"c1\", \"dtype\": \"f32\", \"shape\": [%lld], \"role\": \"constant\", "
             "\"init\": {\"kind\": \"fill\", \"value\": 2}},"
             "{\"name\": \"r0\", \"dtype\": \"f32\", \"shape\": [%lld]},"
             "{\"name\": \"r1\", \"dtype\": \"f32\", \"shape\": [%lld]}],"
             "\"steps\": [{\"name\": \"c\", \"collective\": \"%s\", \"devices\": [\"cuda:0\", "
             "\"cuda:1\"], \"inputs\": [\"c0\", \"c1\"], \"outputs\": [\"r0\", \"r1\"]}]}",
             elems, elems, out, out, op);
    baton_error err = {0};
    if (baton_plan_load_string(reg, json, strlen(json), "coll.json", NULL, plan, &err)) {
        fprintf(stderr, "bench_multigpu: %s\n", err.message);
        exit(1);
    }
    baton_options o;
    baton_options_init(&o);
    o.gpu = BATON_GPU_CUDA;
    o.mode = BATON_SYNC_BOUNDARY;
    baton_runtime *rt = NULL;
    if (baton_runtime_create(*plan, &o, &rt, &err)) {
        fprintf(stderr, "bench_multigpu: %s\n", err.message);
        exit(1);
    }
    return rt;
}

/* (2) µs per round trip: baton's collective step against NCCL's call, alternating. */
static void collective(baton_registry *reg, const char *op, long long elems, int reps)
{
    baton_plan *plan = NULL;
    baton_runtime *rt = coll_plan(reg, op, elems, &plan);
    const int devs[2] = {0, 1};
    ncclComm_t comms[2];
    if (nccl.init_all(comms, 2, devs) != ncclSuccess) {
        fprintf(stderr, "bench_multigpu: ncclCommInitAll failed\n");
        exit(1);
    }
    void *send[2], *recv[2];
    cudaStream_t s[2];
    size_t out = strcmp(op, "all_gather") == 0 ? 2 * elems : elems;
    for (int k = 0; k < 2; k++) {
        CHECK_CUDA(cudaSetDevice(k));
        CHECK_CUDA(cudaMalloc(&send[k], elems * 4));
        CHECK_CUDA(cudaMalloc(&recv[k], out * 4));
        CHECK_CUDA(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    }
    std::vector<double> t[2];
    baton_error err = {0};
    for (int r = 0; r < reps + 10; r++) {
        double t0 = now_ns();
        if (baton_runtime_run(rt, &err)) {
            fprintf(stderr, "bench_multigpu: %s\n", err.message);
            exit(1);
        }
        double t1 = now_ns();
        nccl.group_start();
        for (int k = 0; k < 2; k++)
            if (strcmp(op, "all_gather") == 0)
                nccl.all_gather(send[k], recv[k], elems, ncclFloat32, comms[k], s[k]);
            else
                nccl.all_reduce(send[k], recv[k], elems, ncclFloat32, ncclSum, comms[k], s[k]);
        nccl.group_end();
        for (int k = 0; k < 2; k++)
            CHECK_CUDA(cudaStreamSynchronize(s[k]));
        double t2 = now_ns();
        if (r >= 10) {
            t[0].push_back((t1 - t0) / 1e3);
            t[1].push_back((t2 - t1) / 1e3);
        }
    }
    double a = median(t[0]), b = median(t[1]);
    printf("%-10s %9lld B per GPU   baton step %8.2f us   NCCL %8.2f us   added %+7.2f us\n", op,
           elems * 4, a, b, a - b);
    printf("RESULT coll.%s.%lld baton_us %.3f nccl_us %.3f added_us %.3f\n", op, elems * 4, a, b,
           a - b);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

/* ---- (3) where graph mode keeps a GPU-to-GPU dependency ------------------------------------ */

__global__ void bump(float *p, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1.0f;
}

enum { PLACE_ELEMS = 1024, PLACE_KERNELS = 4 };

/* The two GPUs' work of one run: cuda:0 bumps a K times; cuda:1 copies a into b and bumps b K
 * times. In the graphs below it is captured as it is issued here. */
static void place_gpu0(float *a, cudaStream_t s0)
{
    for (int k = 0; k < PLACE_KERNELS; k++)
        bump<<<PLACE_ELEMS / 256, 256, 0, s0>>>(a, PLACE_ELEMS);
}

static void place_gpu1(float *a, float *b, cudaStream_t s1)
{
    CHECK_CUDA(cudaMemcpyAsync(b, a, PLACE_ELEMS * sizeof(float), cudaMemcpyDefault, s1));
    for (int k = 0; k < PLACE_KERNELS; k++)
        bump<<<PLACE_ELEMS / 256, 256, 0, s1>>>(b, PLACE_ELEMS);
}

/* A variant that cannot be built here says why and is skipped (not every driver captures across
 * devices); returns false then. */
static bool place_ok(cudaError_t e, const char *what, const char *variant)
{
    if (e == cudaSuccess)
        return true;
    printf("graph placement: %s: %s failed: %s (variant skipped)\n", variant, what,
           cudaGetErrorString(e));
    cudaGetLastError();
    return false;
}

/* Captures body() (false: it failed and said why) on s into *x, with an event-wait node on `wait`
 * first and an event-record node on `record` last where they are given. false, having said why,
 * when the driver refuses a step. */
template <typename F>
static bool capture_graph(const char *variant, cudaStream_t s, cudaEvent_t wait, cudaEvent_t record,
                          F body, cudaGraphExec_t *x)
{
    if (!place_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture", variant))
        return false;
    bool ok = !wait ||
              place_ok(cudaStreamWaitEvent(s, wait, cudaEventWaitExternal), "wait node", variant);
    ok = ok && body();
    ok = ok && (!record || place_ok(cudaEventRecordWithFlags(record, s, cudaEventRecordExternal),
                                    "record node", variant));
    cudaGraph_t g;
    const cudaError_t ec = cudaStreamEndCapture(s, &g);
    ok = ok && place_ok(ec, "end capture", variant) &&
         place_ok(cudaGraphInstantiate(x, g, 0), "instantiate", variant);
    if (ec == cudaSuccess)
        cudaGraphDestroy(g);
    return ok;
}

/* µs per run of `runs` back-to-back runs issued by launch(), over `rounds` rounds (median), after
 * a check: b[0] must be K * (runs + 1) + ... as the dependencies make it, else the variant lost
 * an ordering and its time means nothing. */
template <typename F>
static double place_time(const char *variant, float *a, float *b, cudaStream_t s0, cudaStream_t s1,
                         int runs, int rounds, F launch)
{
    std::vector<double> t;
    for (int r = 0; r < rounds + 1; r++) {
        CHECK_CUDA(cudaSetDevice(0));
        CHECK_CUDA(cudaMemsetAsync(a, 0, PLACE_ELEMS * sizeof(float), s0));
        CHECK_CUDA(cudaStreamSynchronize(s0));
        const double t0 = now_ns();
        for (int i = 0; i < runs; i++)
            launch();
        CHECK_CUDA(cudaSetDevice(1));
        CHECK_CUDA(cudaStreamSynchronize(s1));
        CHECK_CUDA(cudaSetDevice(0));
        CHECK_CUDA(cudaStreamSynchronize(s0));
        const double t1 = now_ns();
        float got = 0;
        CHECK_CUDA(cudaSetDevice(1));
        CHECK_CUDA(cudaMemcpy(&got, b, sizeof got, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaSetDevice(0));
        /* run i copies a after cuda:0's i + 1 rounds of K bumps, then bumps K times */
        const float want = (float)(PLACE_KERNELS * runs + PLACE_KERNELS);
        if (got != want) {
            printf("graph placement: %s: b[0] = %g after %d runs, expected %g: an ordering was "
                   "lost (variant not timed)\n",
                   variant, got, runs, want);
            return -1;
        }
        if (r > 0)
            t.push_back((t1 - t0) / 1e3 / runs);
    }
    return median(t);
}

static void graph_placement(int runs)
{
    float *a, *b;
    cudaStream_t s0, s1;
    cudaEvent_t e01, e10;
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaMalloc(&a, PLACE_ELEMS * sizeof(float)));
    CHECK_CUDA(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&e01, cudaEventDisableTiming));
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaMalloc(&b, PLACE_ELEMS * sizeof(float)));
    CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&e10, cudaEventDisableTiming));
    int peer = 0;
    CHECK_CUDA(cudaDeviceCanAccessPeer(&peer, 1, 0));
    if (peer)
        cudaDeviceEnablePeerAccess(0, 0), cudaGetLastError();
    CHECK_CUDA(cudaSetDevice(0));
    if (peer)
        cudaDeviceEnablePeerAccess(1, 0), cudaGetLastError();

    /* (a) baton's: a graph per GPU; the record and the wait are stream calls between launches.
     * e10 is the back edge: cuda:0 rewrites a only after cuda:1 has copied it. */
    cudaGraphExec_t x0 = NULL, x1 = NULL, y0 = NULL, y1 = NULL, z = NULL;
    const auto gpu0 = [&] {
        place_gpu0(a, s0);
        return true;
    };
    const auto gpu1 = [&] {
        place_gpu1(a, b, s1);
        return true;
    };
    CHECK_CUDA(cudaSetDevice(0));
    bool ok = capture_graph("waits outside", s0, NULL, NULL, gpu0, &x0);
    CHECK_CUDA(cudaSetDevice(1));
    ok = ok && capture_graph("waits outside", s1, NULL, NULL, gpu1, &x1);
    if (!ok)
        exit(1); /* baton's own way must build */
    const double outside = place_time("waits outside", a, b, s0, s1, runs, 5, [&] {
        CHECK_CUDA(cudaSetDevice(0));
        CHECK_CUDA(cudaStreamWaitEvent(s0, e10, 0));
        CHECK_CUDA(cudaGraphLaunch(x0, s0));
        CHECK_CUDA(cudaEventRecord(e01, s0));
        CHECK_CUDA(cudaSetDevice(1));
        CHECK_CUDA(cudaStreamWaitEvent(s1, e01, 0));
        CHECK_CUDA(cudaGraphLaunch(x1, s1));
        CHECK_CUDA(cudaEventRecord(e10, s1));
    });

    /* (b) event nodes inside the per-GPU graphs: each launch carries its own wait and record. */
    CHECK_CUDA(cudaSetDevice(0));
    ok = capture_graph("event nodes", s0, e10, e01, gpu0, &y0);
    CHECK_CUDA(cudaSetDevice(1));
    ok = ok && capture_graph("event nodes", s1, e01, e10, gpu1, &y1);
    double nodes = -1;
    if (ok)
        nodes = place_time("event nodes", a, b, s0, s1, runs, 5, [&] {
            CHECK_CUDA(cudaSetDevice(0));
            CHECK_CUDA(cudaGraphLaunch(y0, s0));
            CHECK_CUDA(cudaSetDevice(1));
            CHECK_CUDA(cudaGraphLaunch(y1, s1));
        });

    /* (c) one graph over both GPUs: s1 joins s0's capture through e01 and rejoins through e10;
     * launched on s0, a run starts after the whole previous run. */
    CHECK_CUDA(cudaSetDevice(0));
    ok = capture_graph(
        "one graph", s0, NULL, NULL,
        [&] {
            place_gpu0(a, s0);
            bool fine = place_ok(cudaEventRecord(e01, s0), "fork record", "one graph");
            CHECK_CUDA(cudaSetDevice(1));
            fine = fine && place_ok(cudaStreamWaitEvent(s1, e01, 0), "fork wait", "one graph");
            if (fine)
                place_gpu1(a, b, s1);
            fine = fine && place_ok(cudaEventRecord(e10, s1), "join record", "one graph");
            CHECK_CUDA(cudaSetDevice(0));
            return fine && place_ok(cudaStreamWaitEvent(s0, e10, 0), "join wait", "one graph");
        },
        &z);
    double one = -1;
    if (ok)
        one = place_time("one graph", a, b, s0, s1, runs, 5, [&] {
            CHECK_CUDA(cudaSetDevice(0));
            CHECK_CUDA(cudaGraphLaunch(z, s0));
        });

    printf("graph placement, %d kernels per GPU + a %zu B peer copy per run, %d runs:   waits "
           "outside %7.2f us/run   event nodes %7.2f   one graph %7.2f   (-1: skipped)\n",
           PLACE_KERNELS, (size_t)PLACE_ELEMS * sizeof(float), runs, outside, nodes, one);
    printf("RESULT place outside_us %.3f nodes_us %.3f one_graph_us %.3f\n", outside, nodes, one);
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaDeviceSynchronize());
    for (cudaGraphExec_t e : {x0, x1, y0, y1, z})
        if (e)
            cudaGraphExecDestroy(e);
    CHECK_CUDA(cudaFree(b));
    CHECK_CUDA(cudaStreamDestroy(s1));
    CHECK_CUDA(cudaEventDestroy(e10));
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaStreamDestroy(s0));
    CHECK_CUDA(cudaEventDestroy(e01));
}

/* (3b) The same shape as a baton plan in graph mode: K add_scalar steps on cuda:0, the tensor
 * moved to cuda:1, K steps there, input and output bound to GPU buffers (no host copy). µs per
 * baton_runtime_run (which ends with a host wait on each GPU) with the order between the GPUs
 * as event nodes inside the graphs and as waits on the streams (BATON_GRAPH_EVENT_NODES=0), in
 * alternating rounds, each run's output checked. */
static baton_runtime *place_runtime(baton_registry *reg, int nodes, baton_plan **plan, float *x,
                                    float *y)
{
    std::string json = "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"place\", "
                       "\"tensors\": [{\"name\": \"t0\", \"dtype\": \"f32\", \"shape\": [1024], "
                       "\"role\": \"input\"}";
    for (int k = 1; k <= 2 * PLACE_KERNELS; k++)
        json += ", {\"name\": \"t" + std::to_string(k) +
                "\", \"dtype\": \"f32\", \"shape\": [1024], \"role\": \"" +
                (k == 2 * PLACE_KERNELS ? "output" : "intermediate") + "\"}";
    json += "], \"steps\": [";
    for (int k = 1; k <= 2 * PLACE_KERNELS; k++)
        json += std::string(k > 1 ? ", " : "") + "{\"name\": \"s" + std::to_string(k) +
                "\", \"kernel\": \"add_scalar\", \"device\": \"cuda:" +
                (k <= PLACE_KERNELS ? "0" : "1") + "\", \"inputs\": [\"t" + std::to_string(k - 1) +
                "\"], \"outputs\": [\"t" + std::to_string(k) + "\"], \"attrs\": {\"value\": 1.0}}";
    json += "]}";
    baton_error err = {0};
    if (baton_plan_load_string(reg, json.c_str(), json.size(), "place.json", NULL, plan, &err)) {
        fprintf(stderr, "bench_multigpu: %s\n", err.message);
        exit(1);
    }
    setenv("BATON_GRAPH_EVENT_NODES", nodes ? "1" : "0", 1);
    baton_options o;
    baton_options_init(&o);
    o.gpu = BATON_GPU_CUDA;
    o.mode = BATON_SYNC_GRAPH;
    baton_runtime *rt = NULL;
    int rc = baton_runtime_create(*plan, &o, &rt, &err);
    unsetenv("BATON_GRAPH_EVENT_NODES");
    baton_buffer in = {{BATON_DEVICE_CUDA, 0}, x, 1024 * sizeof(float), BATON_DTYPE_F32};
    baton_buffer out = {{BATON_DEVICE_CUDA, 1}, y, 1024 * sizeof(float), BATON_DTYPE_F32};
    if (rc || baton_runtime_bind(rt, baton_plan_tensor_index(*plan, "t0"), &in, &err) ||
        baton_runtime_bind(
            rt, baton_plan_tensor_index(*plan, ("t" + std::to_string(2 * PLACE_KERNELS)).c_str()),
            &out, &err)) {
        fprintf(stderr, "bench_multigpu: %s\n", err.message);
        exit(1);
    }
    return rt;
}

static void place_baton(baton_registry *reg, int runs)
{
    float *x, *y;
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaMalloc(&x, 1024 * sizeof(float)));
    std::vector<float> hx(1024), hy(1024);
    for (int i = 0; i < 1024; i++)
        hx[i] = (float)i;
    CHECK_CUDA(cudaMemcpy(x, hx.data(), 1024 * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaMalloc(&y, 1024 * sizeof(float)));
    baton_plan *plans[2] = {NULL, NULL};
    baton_runtime *rts[2];
    for (int v = 0; v < 2; v++)
        rts[v] = place_runtime(reg, v, &plans[v], x, y);
    std::vector<double> t[2];
    baton_error err = {0};
    for (int round = 0; round < 7; round++)
        for (int v = 0; v < 2; v++) {
            CHECK_CUDA(cudaSetDevice(1));
            CHECK_CUDA(cudaMemset(y, 0, 1024 * sizeof(float)));
            CHECK_CUDA(cudaDeviceSynchronize());
            const double t0 = now_ns();
            for (int i = 0; i < runs; i++)
                if (baton_runtime_run(rts[v], &err)) {
                    fprintf(stderr, "bench_multigpu: %s\n", err.message);
                    exit(1);
                }
            const double t1 = now_ns();
            CHECK_CUDA(cudaSetDevice(1));
            CHECK_CUDA(cudaMemcpy(hy.data(), y, 1024 * sizeof(float), cudaMemcpyDeviceToHost));
            for (int i = 0; i < 1024; i++)
                if (hy[i] != hx[i] + 2 * PLACE_KERNELS) {
                    printf("baton placement: y[%d] = %g, expected %g: an ordering was lost\n", i,
                           hy[i], hx[i] + 2 * PLACE_KERNELS);
                    exit(1);
                }
            if (round >= 2) /* the first rounds capture and warm up */
                t[v].push_back((t1 - t0) / 1e3 / runs);
        }
    const double outside = median(t[0]), nodes = median(t[1]);
    printf("baton graph mode, same work as a plan (%d runs, each ending in a host wait per GPU):   "
           "waits outside %7.2f us/run   event nodes %7.2f us/run\n",
           runs, outside, nodes);
    printf("RESULT place_baton outside_us %.3f nodes_us %.3f\n", outside, nodes);
    for (int v = 0; v < 2; v++) {
        baton_runtime_destroy(rts[v]);
        baton_plan_free(plans[v]);
    }
    CHECK_CUDA(cudaFree(y));
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaFree(x));
}

int main(int argc, char **argv)
{
    int reps = 50;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        printf("bench_multigpu: needs two CUDA devices, found %d: nothing measured\n", n);
        return 0;
    }
    peer_copies(reps);
    graph_placement(20 * reps);
    baton_registry *reg = NULL;
    baton_registry_create(&reg);
    place_baton(reg, 20 * reps);
    if (!load_nccl()) {
        printf("bench_multigpu: libnccl.so.2 cannot be loaded: no collective measured\n");
        baton_registry_destroy(reg);
        return 0;
    }
    for (long long elems : {4096LL, 1LL << 20, 16LL << 20}) {
        collective(reg, "all_reduce", elems, reps);
        collective(reg, "all_gather", elems, reps);
    }
    baton_registry_destroy(reg);
    return 0;
}
