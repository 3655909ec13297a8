/* bench_gemm_rows.cu: what a gemm step's first run at a row count it has not run costs the host,
 * as a prefill of a new length meets it. The four GEMM shapes of a Llama-3.2-1B layer (bf16, W as
 * PyTorch stores it, prepared for 2048 rows), sixteen steps of each as sixteen layers hold them,
 * run at a sequence of row counts: for each, the host's time to enqueue all 64 steps, split into
 * each shape's first step (the one that may ask cuBLASLt's heuristic) and the 60 others, the GPU's
 * time of the round and the heuristic's asks. Then the GPU's time of the steps prepared for 2048
 * rows run at a count against steps prepared for that count, and what one ask of the heuristic
 * costs. Prints tables and "RESULT key value" lines.
 *
 * Usage: bench_gemm_rows [--layers L] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "baton/baton.h"
#include "bench/cuda/bench_common.h"
#include "delegates/cuda/cublaslt_algos.h"
#include "delegates/cuda/gemm_cublaslt.h"

#define CHECK_LT(call)                                                                             \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "bench_gemm_rows: %s failed: %d\n", #call, (int)s_);                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct step_case {
    baton_tensor_desc in[2], out[1];
    baton_attr attrs[1];
    baton_sig_args sig;
};

/* a [m, k] by W [n, k] (trans_b) into c [m, n], bf16 */
static void case_init(step_case *c, int64_t m, int64_t n, int64_t k)
{
    memset(c, 0, sizeof *c);
    c->in[0].dtype = c->in[1].dtype = c->out[0].dtype = BATON_DTYPE_BF16;
    c->in[0].rank = c->in[1].rank = c->out[0].rank = 2;
    c->in[0].shape[0] = m, c->in[0].shape[1] = k;
    c->in[1].shape[0] = n, c->in[1].shape[1] = k;
    c->out[0].shape[0] = m, c->out[0].shape[1] = n;
    c->attrs[0].name = "trans_b";
    c->attrs[0].type = BATON_ATTR_BOOL;
    c->attrs[0].i = 1;
    c->sig.struct_size = sizeof c->sig;
    c->sig.n_inputs = 2, c->sig.inputs = c->in;
    c->sig.n_outputs = 1, c->sig.outputs = c->out;
    c->sig.n_attrs = 1, c->sig.attrs = c->attrs;
}

int main(int argc, char **argv)
{
    int layers = 16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc)
            layers = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_gemm_rows [--layers L]\n");
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_gemm_rows: no CUDA device\n");
        return 1;
    }
    const int64_t max_m = 2048;
    const int64_t shapes[4][2] = {{3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}};
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    void *a, *c, *w[4];
    CHECK_CUDA(cudaMalloc(&a, (size_t)max_m * 8192 * 2));
    CHECK_CUDA(cudaMalloc(&c, (size_t)max_m * 16384 * 2));
    CHECK_CUDA(cudaMemset(a, 0, (size_t)max_m * 8192 * 2));
    for (int s = 0; s < 4; s++) {
        CHECK_CUDA(cudaMalloc(&w[s], (size_t)shapes[s][0] * shapes[s][1] * 2));
        CHECK_CUDA(cudaMemset(w[s], 0, (size_t)shapes[s][0] * shapes[s][1] * 2));
    }
    std::vector<void *> states(4 * (size_t)layers);
    step_case prep[4];
    baton_device dev = {BATON_DEVICE_CUDA, 0};
    baton_target_kind kind = BATON_TARGET_DELEGATE;
    double t0 = now_ns();
    const uint64_t asks0 = baton__lt_algo_asks();
    for (int s = 0; s < 4; s++) {
        case_init(&prep[s], max_m, shapes[s][0], shapes[s][1]);
        baton_delegate_init info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        info.step_name = "proj", info.device = dev, info.stream = stream, info.sig = &prep[s].sig;
        info.n_steps = 1, info.step_devices = &dev, info.step_kinds = &kind;
        for (int l = 0; l < layers; l++) {
            baton_error err;
            memset(&err, 0, sizeof err);
            if (baton__gemm_cublaslt_iface.init(&info, &states[(size_t)s * layers + l], &err)) {
                fprintf(stderr, "bench_gemm_rows: init: %s\n", err.message);
                return 1;
            }
        }
    }
    printf("init of %d steps: %.2f ms, %llu heuristic asks\n", 4 * layers, (now_ns() - t0) * 1e-6,
           (unsigned long long)(baton__lt_algo_asks() - asks0));
    for (int s = 0; s < 4; s++) {
        size_t priv = 0, shared = 0;
        const void *key = NULL;
        baton__gemm_cublaslt_iface.memory(states[(size_t)s * layers], &priv, &key, &shared);
        printf("shape N=%lld K=%lld: %zu bytes of workspace\n", (long long)shapes[s][0],
               (long long)shapes[s][1], priv);
    }
    printf("%6s %6s | %10s %10s %10s | %8s %5s\n", "rows", "count", "host ms", "firsts ms",
           "others ms", "gpu ms", "asks");
    char errbuf[256];
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    /* one round: every step once at m (the steps of shape s from `st`, `per` of them a shape), the
     * host's enqueue time split into each shape's first step and the rest; the GPU's time back */
    auto round = [&](void **st, int per, int64_t m, double *firsts, double *others) -> float {
        step_case run[4];
        for (int s = 0; s < 4; s++)
            case_init(&run[s], m, shapes[s][0], shapes[s][1]);
        *firsts = *others = 0;
        CHECK_CUDA(cudaEventRecord(e0, stream));
        for (int l = 0; l < layers; l++)
            for (int s = 0; s < 4; s++) {
                baton_exec_ctx ctx;
                memset(&ctx, 0, sizeof ctx);
                ctx.struct_size = sizeof ctx;
                ctx.device = dev, ctx.stream = stream, ctx.step_name = "proj";
                ctx.sig = &run[s].sig, ctx.errbuf = errbuf, ctx.errbuf_len = sizeof errbuf;
                void *bufs[3] = {a, w[s], c};
                const double q0 = now_ns();
                if (baton__gemm_cublaslt_iface.execute(st[(size_t)s * per + (per > 1 ? l : 0)],
                                                       &ctx, bufs)) {
                    fprintf(stderr, "bench_gemm_rows: execute at M=%lld: %s\n", (long long)m,
                            errbuf);
                    exit(1);
                }
                (l == 0 ? *firsts : *others) += now_ns() - q0;
            }
        CHECK_CUDA(cudaEventRecord(e1, stream));
        CHECK_CUDA(cudaStreamSynchronize(stream));
        float gpu = 0;
        CHECK_CUDA(cudaEventElapsedTime(&gpu, e0, e1));
        return gpu;
    };
    /* counts not met yet, then one met before */
    const int64_t ms[] = {427, 161, 286, 102, 357, 200, 161};
    std::vector<int64_t> met;
    for (int64_t m : ms) {
        const int seen = std::find(met.begin(), met.end(), m) != met.end();
        met.push_back(m);
        const uint64_t asks = baton__lt_algo_asks();
        double firsts, others;
        const double r0 = now_ns();
        const float gpu = round(states.data(), layers, m, &firsts, &others);
        const double host = now_ns() - r0;
        printf("%6lld %6s | %10.3f %10.3f %10.3f | %8.3f %5llu\n", (long long)m,
               seen ? "seen" : "new", host * 1e-6, firsts * 1e-6, others * 1e-6, gpu,
               (unsigned long long)(baton__lt_algo_asks() - asks));
        printf("RESULT gemm_rows_%lld_%s_host_ms %.4f\n", (long long)m, seen ? "seen" : "new",
               host * 1e-6);
    }
    /* the GPU's time of steps prepared for 2048 rows run at m against steps prepared for m (a plan
     * with dims should cost what a static plan of the run's size costs), median of 21 rounds
     * each, alternating */
    printf("\n%6s | %12s %12s | %6s\n", "rows", "dims ms", "static ms", "ratio");
    for (int64_t m : {161, 286, 427, 200}) {
        void *own[4];
        for (int s = 0; s < 4; s++) {
            step_case pc;
            case_init(&pc, m, shapes[s][0], shapes[s][1]);
            baton_delegate_init info;
            memset(&info, 0, sizeof info);
            info.struct_size = sizeof info;
            info.step_name = "proj", info.device = dev, info.stream = stream, info.sig = &pc.sig;
            info.n_steps = 1, info.step_devices = &dev, info.step_kinds = &kind;
            baton_error err;
            memset(&err, 0, sizeof err);
            if (baton__gemm_cublaslt_iface.init(&info, &own[s], &err)) {
                fprintf(stderr, "bench_gemm_rows: init: %s\n", err.message);
                return 1;
            }
        }
        std::vector<float> td, ts;
        double f, o;
        for (int rep = 0; rep < 21; rep++) {
            td.push_back(round(states.data(), layers, m, &f, &o));
            ts.push_back(round(own, 1, m, &f, &o));
        }
        printf("%6lld | %12.3f %12.3f | %6.3f\n", (long long)m, median(td), median(ts),
               median(td) / median(ts));
        printf("RESULT gemm_rows_%lld_dims_over_static %.4f\n", (long long)m,
               median(td) / median(ts));
        for (int s = 0; s < 4; s++)
            baton__gemm_cublaslt_iface.destroy(own[s]);
    }

    /* what one heuristic ask costs the host at a size it has not met (cuBLASLt keeps answers of
     * its own), with the delegate's preferences (four candidates, every pointer 256-byte aligned):
     * 32 MB of workspace allowed (as at prepare), none (the steps' own workspaces are a few KB at
     * most), and none on layouts kept and resized (as the delegate keeps its own), alternating */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatmulPreference_t pref;
    CHECK_LT(cublasLtCreate(&lt));
    CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t tr = CUBLAS_OP_T;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof tr));
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    const uint32_t align = 256;
    const cublasLtMatmulPreferenceAttributes_t at[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int j = 0; j < 4; j++)
        CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, at[j], &align, sizeof align));
    const int64_t n = 3072, k = 2048;
    const char *what[3] = {"32 MB of workspace", "no workspace", "no workspace, resized layouts"};
    const size_t caps[3] = {(size_t)32 << 20, 0, 0};
    cublasLtMatrixLayout_t kept[3]; /* b, a, c */
    CHECK_LT(cublasLtMatrixLayoutCreate(&kept[0], CUDA_R_16BF, k, n, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&kept[1], CUDA_R_16BF, k, 2048, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&kept[2], CUDA_R_16BF, n, 2048, n));
    std::vector<double> took[3];
    for (int i = 0; i < 36; i++) {
        const int v = i % 3;
        const int64_t m = 1000 + 13 * i; /* a size not asked before */
        CHECK_LT(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &caps[v], sizeof caps[v]));
        cublasLtMatrixLayout_t lay[3];
        if (v == 2) {
            const uint64_t cols = (uint64_t)m;
            for (int j = 1; j < 3; j++)
                CHECK_LT(cublasLtMatrixLayoutSetAttribute(kept[j], CUBLASLT_MATRIX_LAYOUT_COLS,
                                                          &cols, sizeof cols));
            memcpy(lay, kept, sizeof lay);
        } else {
            CHECK_LT(cublasLtMatrixLayoutCreate(&lay[0], CUDA_R_16BF, k, n, k));
            CHECK_LT(cublasLtMatrixLayoutCreate(&lay[1], CUDA_R_16BF, k, m, k));
            CHECK_LT(cublasLtMatrixLayoutCreate(&lay[2], CUDA_R_16BF, n, m, n));
        }
        cublasLtMatmulHeuristicResult_t res[4];
        int got = 0;
        const double q0 = now_ns();
        CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, op, lay[0], lay[1], lay[2], lay[2], pref, 4,
                                                res, &got));
        took[v].push_back((now_ns() - q0) * 1e-6);
        for (int j = 0; v != 2 && j < 3; j++)
            cublasLtMatrixLayoutDestroy(lay[j]);
    }
    printf("\none heuristic ask at a new size, ms (medians of 12):\n");
    for (int v = 0; v < 3; v++) {
        printf("  %s: %.3f\n", what[v], median(took[v]));
        printf("RESULT gemm_rows_ask_%d_ms %.4f\n", v, median(took[v]));
    }
    for (int j = 0; j < 3; j++)
        cublasLtMatrixLayoutDestroy(kept[j]);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
    for (size_t i = 0; i < states.size(); i++)
        baton__gemm_cublaslt_iface.destroy(states[i]);
    return 0;
}
