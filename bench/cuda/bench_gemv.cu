/* bench_gemv.cu: the decode GEMV (y[1, N] = x[1, K] W[N, K]^T, bf16) as a decode step sees it:
 * baton's own kernel (each tile variant, with and without a PDL chain), the cuBLASLt backend of
 * the gemm delegate, and three floors of W's bytes (the project's copy kernel moving them, half
 * read and half written, a read-only kernel, and that read in a PDL chain as the GEMV's), all cold
 * (W rotated over sets larger than L2) and timed inside CUDA graphs. Also the fused prologues
 * (RMSNorm, SwiGLU) at their decode shapes, and a check that the GEMV agrees with cuBLASLt and
 * gives the same bits run to run.
 *
 * Usage: bench_gemv [--reps N] [--rows M] [--json FILE]. "RESULT" lines name shape and figure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "baton/baton.h"
#include "bench/cuda/bench_common.h"
#include "bench/cuda/copy_kernels.cuh"
#include "delegates/cuda/gemm_cublaslt.h"
#include "kernels/cuda/cuda_gemv.h"

static cudaStream_t g_stream;
static cudaDeviceProp g_prop;
static int g_reps = 20;
static FILE *g_json;
static int g_first = 1;

struct Pool {
    char *base = nullptr;
    size_t stride = 0;
    int sets = 0;
    void *at(int i) const
    {
        return base + (size_t)(i % sets) * stride;
    }
};

static Pool pool_alloc(size_t bytes, int sets)
{
    Pool p;
    p.stride = (bytes + 255) & ~(size_t)255;
    p.sets = sets;
    CHECK_CUDA(cudaMalloc((void **)&p.base, p.stride * (size_t)sets));
    return p;
}

/* Sets whose total exceeds 2.5 x L2 (and 64 MB), so every call reads W from DRAM. */
static int sets_for(double bytes)
{
    const double want = std::max(64.0 * (1 << 20), 2.5 * (double)g_prop.l2CacheSize);
    return std::max(2, std::min(64, (int)ceil(want / bytes)));
}

static double time_calls(int k, const std::function<void(int)> &fn)
{
    return time_graph(g_stream, fn, k, g_reps);
}

/* A read of n 16-byte vectors folded into one word per thread (written only if impossible, so
 * the loads stay): the floor of a kernel that reads W once. PDL: launched in a programmatic chain
 * as baton's GEMV is in a decode step, its first loads issued before the wait on the kernel before
 * and its dependents let go after it, the GEMV's order without its arithmetic. */
template <bool PDL> __global__ void read16(const uint4 *__restrict__ x, size_t n, unsigned *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned f = 0;
    bool waited = !PDL;
    /* the wait and the trigger, once, after the first loads are issued */
    auto chain = [&] {
        if (!waited) {
            kcuda::pdl_wait();
            kcuda::pdl_trigger();
            waited = true;
        }
    };
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            v[u] = __ldcs(x + i + u * stride);
        chain();
#pragma unroll
        for (int u = 0; u < 4; u++)
            f ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    chain();
    for (; i < n; i += stride) {
        uint4 v = __ldcs(x + i);
        f ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (f == 0x9e3779b9u)
        *sink = f;
}

static void result(const char *what, const char *shape, const char *impl, double us, double bytes,
                   double copy_us, double read_us)
{
    printf("%-10s %-26s %-22s %9.2f us %8.0f GB/s  x%.2f copy  x%.2f read\n", what, shape, impl, us,
           bytes / us * 1e-3, us / copy_us, us / read_us);
    printf("RESULT %s %s %s us=%.3f copy_ratio=%.3f read_ratio=%.3f\n", what, shape, impl, us,
           us / copy_us, us / read_us);
    if (g_json) {
        fprintf(g_json,
                "%s\n  {\"op\": \"%s\", \"shape\": \"%s\", \"impl\": \"%s\", \"us\": %.4f, "
                "\"bytes\": %.0f, \"copy_us\": %.4f, \"read_us\": %.4f}",
                g_first ? "" : ",", what, shape, impl, us, bytes, copy_us, read_us);
        g_first = 0;
    }
}

static baton_tensor_desc td(baton_dtype dt, int64_t a, int64_t b)
{
    baton_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt;
    d.rank = 2;
    d.shape[0] = a;
    d.shape[1] = b;
    return d;
}

static void bench_shape(int64_t M, int64_t N, int64_t K)
{
    const double wbytes = (double)N * (double)K * 2;
    const int sets = sets_for(wbytes), k = sets;
    Pool W = pool_alloc((size_t)wbytes, sets), X = pool_alloc((size_t)(M * 2 * K * 2), sets),
         G = pool_alloc((size_t)K * 2, 1), Y1 = pool_alloc((size_t)(M * N * 2), sets),
         Y2 = pool_alloc((size_t)(M * N * 2), sets);
    fill_random(g_stream, W.base, W.stride * sets, 3);
    fill_random(g_stream, X.base, X.stride * sets, 5);
    fill_random(g_stream, G.base, G.stride, 9);
    CHECK_CUDA(cudaDeviceSynchronize());
    char shape[96];
    snprintf(shape, sizeof shape, "M%lld.N%lld.K%lld", (long long)M, (long long)N, (long long)K);

    char eb[512] = "";
    baton_exec_ctx gc;
    memset(&gc, 0, sizeof gc);
    gc.device.kind = BATON_DEVICE_CUDA;
    gc.stream = g_stream;
    gc.errbuf = eb;
    gc.errbuf_len = sizeof eb;
    auto own = [&](int i, int variant, int pdl, int prologue, void *y) {
        baton_gemv_args a;
        memset(&a, 0, sizeof a);
        a.x = X.at(i), a.w = W.at(i), a.y = y;
        a.g = prologue == BATON_GEMV_RMS ? G.base : NULL;
        a.m = M, a.n = N, a.k = K, a.ldx = prologue == BATON_GEMV_SWIGLU ? 2 * K : K;
        a.dtype = BATON_DTYPE_BF16, a.alpha = 1.0f, a.eps = 1e-5f;
        a.prologue = prologue, a.variant = variant, a.w_const = 1;
        baton_exec_ctx c = gc;
        c.pdl = pdl;
        if (baton__kcuda_gemv(&c, &a)) {
            fprintf(stderr, "bench_gemv: %s: %s\n", shape, eb);
            exit(1);
        }
    };

    /* the cuBLASLt backend as the runtime prepares it: x [M, K], W [N, K], trans_b */
    baton_tensor_desc in[2] = {td(BATON_DTYPE_BF16, M, K), td(BATON_DTYPE_BF16, N, K)},
                      out = td(BATON_DTYPE_BF16, M, N);
    baton_attr tb;
    memset(&tb, 0, sizeof tb);
    tb.name = "trans_b";
    tb.type = BATON_ATTR_BOOL;
    tb.i = 1;
    baton_sig_args sig;
    memset(&sig, 0, sizeof sig);
    sig.n_inputs = 2, sig.inputs = in, sig.n_outputs = 1, sig.outputs = &out;
    sig.n_attrs = 1, sig.attrs = &tb;
    baton_device dev = {BATON_DEVICE_CUDA, 0};
    baton_target_kind kind = BATON_TARGET_DELEGATE;
    baton_delegate_init info;
    memset(&info, 0, sizeof info);
    info.step_name = "gemv";
    info.device = dev;
    info.stream = g_stream;
    info.sig = &sig;
    info.n_steps = 1;
    info.step_devices = &dev;
    info.step_kinds = &kind;
    void *state = NULL;
    baton_error err;
    if (baton__gemm_cublaslt_iface.init(&info, &state, &err)) {
        fprintf(stderr, "bench_gemv: cuBLASLt init: %s\n", err.message);
        exit(1);
    }
    baton_exec_ctx lc = gc;
    lc.device = dev;
    lc.sig = &sig;
    auto lt = [&](int i) {
        void *bufs[3] = {X.at(i), W.at(i), Y2.at(i)};
        if (baton__gemm_cublaslt_iface.execute(state, &lc, bufs)) {
            fprintf(stderr, "bench_gemv: cuBLASLt: %s\n", eb);
            exit(1);
        }
    };

    /* agreement with cuBLASLt, and the same bits on a second run */
    own(0, 0, 0, BATON_GEMV_PLAIN, Y1.at(0));
    lt(0);
    CHECK_CUDA(cudaStreamSynchronize(g_stream));
    std::vector<uint16_t> a((size_t)(M * N)), b((size_t)(M * N)), c((size_t)(M * N));
    CHECK_CUDA(cudaMemcpy(a.data(), Y1.at(0), a.size() * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(b.data(), Y2.at(0), b.size() * 2, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double p = bf2f(a[i]), q = bf2f(b[i]);
        num += (p - q) * (p - q);
        den += q * q;
    }
    const double diff = sqrt(num / std::max(den, 1e-30));
    int same = 1;
    for (int v = BATON_GEMV_AUTO; v < BATON_GEMV_VARIANTS; v++) {
        CHECK_CUDA(cudaMemset(Y1.at(0), 0xff, a.size() * 2));
        own(0, v, 0, BATON_GEMV_PLAIN, Y1.at(0));
        CHECK_CUDA(cudaStreamSynchronize(g_stream));
        CHECK_CUDA(cudaMemcpy(c.data(), Y1.at(0), c.size() * 2, cudaMemcpyDeviceToHost));
        same &= memcmp(a.data(), c.data(), a.size() * 2) == 0;
    }
    printf("%-10s %-26s vs cuBLASLt: rel. rms diff %.2e; variants bitwise equal: %s\n", "check",
           shape, diff, same ? "yes" : "NO");
    printf("RESULT check %s rel_diff=%.3e bitwise=%d\n", shape, diff, same);

    /* floors over the same number of sets */
    const size_t n16 = (size_t)wbytes / 16;
    Pool dst = pool_alloc((size_t)wbytes / 2, sets);
    unsigned *sink;
    CHECK_CUDA(cudaMalloc(&sink, sizeof *sink));
    const int grid = g_prop.multiProcessorCount * 8;
    const double copy = time_calls(k, [&](int i) {
        copy16<4><<<grid, 256, 0, g_stream>>>((const uint4 *)W.at(i), (uint4 *)dst.at(i), n16 / 2);
    });
    const double read = time_calls(k, [&](int i) {
        read16<false><<<grid, 256, 0, g_stream>>>((const uint4 *)W.at(i), n16, sink);
    });
    const double read_pdl = time_calls(k, [&](int i) {
        launch_attr(g_stream, (unsigned)grid, 256,
                    cudaLaunchAttributeProgrammaticStreamSerialization, read16<true>,
                    (const uint4 *)W.at(i), n16, sink);
    });
    result("floor", shape, "copy(W bytes)", copy, wbytes, copy, read);
    result("floor", shape, "read(W)", read, wbytes, copy, read);
    result("floor", shape, "read(W)+pdl", read_pdl, wbytes, copy, read);

    result("gemv", shape, "cublaslt", time_calls(k, lt), wbytes, copy, read);
    static const char *vname[BATON_GEMV_VARIANTS] = {"own.r1u8", "own.r2u8", "own.r1u8pipe"};
    for (int v = 0; v < BATON_GEMV_VARIANTS; v++) {
        std::string nm = vname[v];
        result("gemv", shape, nm.c_str(),
               time_calls(k, [&](int i) { own(i, v, 0, BATON_GEMV_PLAIN, Y1.at(i)); }), wbytes,
               copy, read);
        nm += "+pdl";
        result("gemv", shape, nm.c_str(),
               time_calls(k, [&](int i) { own(i, v, 1, BATON_GEMV_PLAIN, Y1.at(i)); }), wbytes,
               copy, read);
    }
    result("gemv", shape, "own.auto",
           time_calls(k, [&](int i) { own(i, BATON_GEMV_AUTO, 0, BATON_GEMV_PLAIN, Y1.at(i)); }),
           wbytes, copy, read);
    result("gemv", shape, "own.auto+pdl",
           time_calls(k, [&](int i) { own(i, BATON_GEMV_AUTO, 1, BATON_GEMV_PLAIN, Y1.at(i)); }),
           wbytes, copy, read);
    /* the prologues at the shapes the decoder fuses them into (w_const: as the gemm delegate) */
    if (K == 2048)
        result("gemv", shape, "own.rms+pdl",
               time_calls(k, [&](int i) { own(i, BATON_GEMV_AUTO, 1, BATON_GEMV_RMS, Y1.at(i)); }),
               wbytes, copy, read);
    if (K == 8192)
        result(
            "gemv", shape, "own.swiglu+pdl",
            time_calls(k, [&](int i) { own(i, BATON_GEMV_AUTO, 1, BATON_GEMV_SWIGLU, Y1.at(i)); }),
            wbytes, copy, read);

    baton__gemm_cublaslt_iface.destroy(state);
    CHECK_CUDA(cudaFree(sink));
    CHECK_CUDA(cudaFree(dst.base));
    CHECK_CUDA(cudaFree(W.base));
    CHECK_CUDA(cudaFree(X.base));
    CHECK_CUDA(cudaFree(G.base));
    CHECK_CUDA(cudaFree(Y1.base));
    CHECK_CUDA(cudaFree(Y2.base));
}

int main(int argc, char **argv)
{
    const char *json = NULL;
    int64_t rows = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            g_reps = std::max(5, atoi(argv[++i]));
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = std::max(1, std::min(8, atoi(argv[++i])));
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gemv [--reps N] [--rows M] [--json FILE]\n");
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_gemv: no CUDA device\n");
        return 1;
    }
    CHECK_CUDA(cudaGetDeviceProperties(&g_prop, 0));
    CHECK_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    printf("device: %s (%d SMs), L2 %d MB; bf16, cold W, in graphs, median of %d replays\n",
           g_prop.name, g_prop.multiProcessorCount, g_prop.l2CacheSize >> 20, g_reps);
    if (json) {
        g_json = fopen(json, "w");
        if (!g_json) {
            fprintf(stderr, "bench_gemv: cannot write %s\n", json);
            return 1;
        }
        fprintf(g_json, "{\"device\": \"%s\", \"results\": [", g_prop.name);
    }
    const int64_t shapes[][2] = {{2048, 2048},  {2560, 2048},   {3072, 2048}, {8192, 2048},
                                 {16384, 2048}, {128256, 2048}, {2048, 8192}};
    for (const auto &s : shapes)
        bench_shape(rows, s[0], s[1]);
    if (g_json) {
        fprintf(g_json, "\n]}\n");
        fclose(g_json);
    }
    return 0;
}
