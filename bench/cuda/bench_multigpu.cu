/* bench_multigpu.cu: what a plan over two GPUs costs against the floors of the same machine, in
 * one process: (1) a GPU-to-GPU copy as baton issues it (cudaMemcpyAsync, cudaMemcpyDefault, on
 * the reader's stream after an event wait) against cudaMemcpyPeerAsync of the same bytes; (2) a
 * collective step (a plan of one all_reduce or all_gather over cuda:0 and cuda:1, run by the
 * runtime) against NCCL's own call on the same bytes, each as a host-timed round trip that ends
 * when both GPUs are done. Needs two GPUs (prints why and exits 0 otherwise) and NCCL for (2).
 *   bench_multigpu [--reps N]     (keep NCCL_NVLS_ENABLE=0 on the GPU machines) */
#include <nccl.h>

#include "baton/baton.h"
#include "bench/cuda/bench_common.h"
#include "core/dynlib.h"

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
    return dynlib_open(names, 2, syms, sizeof syms / sizeof syms[0], &missing, NULL, 0) != NULL;
}

/* (1) GB/s of `bytes` from cuda:0 to cuda:1 on cuda:1's stream, either way, alternating. */
static void peer_copy(size_t bytes, int reps)
{
    void *src, *dst;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaMalloc(&src, bytes));
    CHECK_CUDA(cudaMemset(src, 1, bytes));
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaMalloc(&dst, bytes));
    CHECK_CUDA(cudaStreamCreate(&s));
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    std::vector<double> t[2];
    for (int r = 0; r < reps + 2; r++)
        for (int way = 0; way < 2; way++) {
            CHECK_CUDA(cudaEventRecord(e0, s));
            if (way == 0)
                CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
            else
                CHECK_CUDA(cudaMemcpyPeerAsync(dst, 1, src, 0, bytes, s));
            CHECK_CUDA(cudaEventRecord(e1, s));
            CHECK_CUDA(cudaEventSynchronize(e1));
            float ms;
            CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 2)
                t[way].push_back(ms);
        }
    double a = bytes / (median(t[0]) * 1e6), b = bytes / (median(t[1]) * 1e6);
    printf("peer copy %8.1f MiB   baton's copy %7.1f GB/s   cudaMemcpyPeerAsync %7.1f GB/s   "
           "ratio %.3f\n",
           bytes / 1048576.0, a, b, a / b);
    printf("RESULT peer.%zu baton_gbs %.2f peer_gbs %.2f ratio %.4f\n", bytes, a, b, a / b);
    CHECK_CUDA(cudaFree(dst));
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaFree(src));
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
    for (size_t mb : {16, 256, 1024})
        peer_copy(mb << 20, reps);
    if (!load_nccl()) {
        printf("bench_multigpu: libnccl.so.2 cannot be loaded: no collective measured\n");
        return 0;
    }
    baton_registry *reg = NULL;
    baton_registry_create(&reg);
    for (long long elems : {4096LL, 1LL << 20, 16LL << 20}) {
        collective(reg, "all_reduce", elems, reps);
        collective(reg, "all_gather", elems, reps);
    }
    baton_registry_destroy(reg);
    return 0;
}
