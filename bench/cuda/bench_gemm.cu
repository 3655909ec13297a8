/* bench_gemm.cu: baton's cuBLASLt gemm delegate against a plain cublasGemmEx call on the same
 * shapes (bf16, f32 accumulation), timed with CUDA events, median of >= 50, inputs rotated so that
 * L2 does not hold them. The wrapping should cost nothing measurable: the table shows the ratio.
 *
 * Usage: bench_gemm [--iters N]   (N >= 50, default 200). "RESULT key value" lines for scripts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "baton/baton.h"
#include "bench/cuda/bench_common.h"
#include "delegates/cuda/gemm_cublaslt.h"

#define CHECK_CUBLAS(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "bench_gemm: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,       \
                    cublasGetStatusString(s_));                                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct shape {
    int64_t m, n, k;
};

int main(int argc, char **argv)
{
    int iters = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = std::max(50, atoi(argv[++i]));
        else {
            fprintf(stderr, "usage: bench_gemm [--iters N]\n");
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_gemm: no CUDA device\n");
        return 1;
    }
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d), L2 %d MB; bf16 C = A B, f32 accumulation, median of %d\n",
           prop.name, prop.major, prop.minor, prop.l2CacheSize >> 20, iters);

    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t blas;
    CHECK_CUBLAS(cublasCreate(&blas));
    CHECK_CUBLAS(cublasSetStream(blas, stream));

    const shape shapes[] = {{1, 4096, 4096}, {8, 4096, 4096}, {32, 4096, 4096}, {4096, 4096, 4096}};
    printf("\n%-18s %11s %11s %7s %11s %11s %7s %9s %9s %9s\n", "M x N x K", "delegate", "cublasEx",
           "ratio", "b2b deleg", "b2b cublas", "ratio", "TFLOP/s", "issue ns", "issue ns");
    printf("%-18s %11s %11s %7s %11s %11s %7s %9s %9s %9s\n", "", "us/call", "us/call", "",
           "us/call", "us/call", "", "delegate", "delegate", "cublasEx");
    int ok = 1;
    for (const shape &sh : shapes) {
        const int64_t M = sh.m, N = sh.n, K = sh.k;
        const size_t ba = (size_t)(M * K) * 2, bb = (size_t)(K * N) * 2, bc = (size_t)(M * N) * 2;
        /* enough input sets that one pass over them is ~4x the L2 */
        size_t per = ba + bb + bc;
        int sets =
            (int)std::min<size_t>(16, std::max<size_t>(2, (size_t)prop.l2CacheSize * 4 / per + 1));
        sets += sets & 1; /* even: the delegate and cuBLAS never read a set the other just read */
        std::vector<void *> A(sets), B(sets), C(sets), C2(sets);
        std::vector<uint16_t> h(std::max(ba, bb) / 2);
        srand(7);
        for (size_t i = 0; i < h.size(); i++)
            h[i] = f2bf(((float)rand() / RAND_MAX * 2.0f - 1.0f) * 0.05f);
        for (int s = 0; s < sets; s++) {
            CHECK_CUDA(cudaMalloc(&A[s], ba));
            CHECK_CUDA(cudaMalloc(&B[s], bb));
            CHECK_CUDA(cudaMalloc(&C[s], bc));
            CHECK_CUDA(cudaMalloc(&C2[s], bc));
            CHECK_CUDA(cudaMemcpy(A[s], h.data(), ba, cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemcpy(B[s], h.data(), bb, cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemset(C[s], 0xff, bc));
            CHECK_CUDA(cudaMemset(C2[s], 0xff, bc));
        }
        CHECK_CUDA(cudaDeviceSynchronize()); /* the legacy stream's memsets, before ours reads */

        /* the delegate, prepared as the runtime would */
        baton_tensor_desc in[2], out[1];
        memset(in, 0, sizeof in);
        memset(out, 0, sizeof out);
        in[0].dtype = in[1].dtype = out[0].dtype = BATON_DTYPE_BF16;
        in[0].rank = in[1].rank = out[0].rank = 2;
        in[0].shape[0] = M, in[0].shape[1] = K;
        in[1].shape[0] = K, in[1].shape[1] = N;
        out[0].shape[0] = M, out[0].shape[1] = N;
        baton_sig_args sig;
        memset(&sig, 0, sizeof sig);
        sig.n_inputs = 2, sig.inputs = in, sig.n_outputs = 1, sig.outputs = out;
        baton_device dev = {BATON_DEVICE_CUDA, 0};
        baton_target_kind kind = BATON_TARGET_DELEGATE;
        baton_delegate_init info;
        memset(&info, 0, sizeof info);
        info.step_name = "bench";
        info.device = dev;
        info.stream = stream;
        info.sig = &sig;
        info.n_steps = 1;
        info.step_devices = &dev;
        info.step_kinds = &kind;
        void *state = NULL;
        baton_error err;
        int rc = baton__gemm_cublaslt_iface.init(&info, &state, &err);
        if (rc) {
            fprintf(stderr, "bench_gemm: init: %s\n", err.message);
            return 1;
        }
        char errbuf[256] = "";
        baton_exec_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.struct_size = sizeof ctx;
        ctx.device = dev;
        ctx.stream = stream;
        ctx.step_name = "bench";
        ctx.errbuf = errbuf;
        ctx.errbuf_len = sizeof errbuf;
        const float alpha = 1.0f, beta = 0.0f;
        auto delegate = [&](int s) {
            void *bufs[3] = {A[s], B[s], C[s]};
            if (baton__gemm_cublaslt_iface.execute(state, &ctx, bufs)) {
                fprintf(stderr, "bench_gemm: execute: %s\n", errbuf);
                exit(1);
            }
        };
        /* the same row-major product, column-major: C^T[N,M] = B^T[N,K] A^T[K,M] */
        auto plain = [&](int s) {
            CHECK_CUBLAS(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                      &alpha, B[s], CUDA_R_16BF, (int)N, A[s], CUDA_R_16BF, (int)K,
                                      &beta, C2[s], CUDA_R_16BF, (int)N, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
        };

        /* same answer? (both poisoned first; every element must be written) */
        delegate(0);
        plain(0);
        CHECK_CUDA(cudaStreamSynchronize(stream));
        std::vector<uint16_t> c1((size_t)(M * N)), c2((size_t)(M * N));
        CHECK_CUDA(cudaMemcpy(c1.data(), C[0], bc, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(c2.data(), C2[0], bc, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (size_t i = 0; i < c1.size(); i++) {
            double a = bf2f(c1[i]), b = bf2f(c2[i]);
            num += (a - b) * (a - b);
            den += b * b;
            if (isnan(a) || isnan(b))
                num = INFINITY;
        }
        double diff = den > 0 ? sqrt(num / den) : sqrt(num);

        for (int w = 0; w < 10; w++) {
            delegate(w % sets);
            plain(w % sets);
        }
        CHECK_CUDA(cudaStreamSynchronize(stream));

        /* per call: an event pair around each call, delegate and cuBLAS alternating */
        std::vector<cudaEvent_t> ev(4 * (size_t)iters);
        for (auto &e : ev)
            CHECK_CUDA(cudaEventCreate(&e));
        std::vector<double> issue_d, issue_p;
        for (int i = 0; i < iters; i++) {
            int s = (2 * i) % sets;
            CHECK_CUDA(cudaEventRecord(ev[4 * i], stream));
            double t0 = now_ns();
            delegate(s);
            double t1 = now_ns();
            CHECK_CUDA(cudaEventRecord(ev[4 * i + 1], stream));
            CHECK_CUDA(cudaEventRecord(ev[4 * i + 2], stream));
            double t2 = now_ns();
            plain(s + 1);
            double t3 = now_ns();
            CHECK_CUDA(cudaEventRecord(ev[4 * i + 3], stream));
            issue_d.push_back(t1 - t0);
            issue_p.push_back(t3 - t2);
        }
        CHECK_CUDA(cudaStreamSynchronize(stream));
        std::vector<double> td, tp;
        for (int i = 0; i < iters; i++) {
            float a, b;
            CHECK_CUDA(cudaEventElapsedTime(&a, ev[4 * i], ev[4 * i + 1]));
            CHECK_CUDA(cudaEventElapsedTime(&b, ev[4 * i + 2], ev[4 * i + 3]));
            td.push_back(a * 1e3);
            tp.push_back(b * 1e3);
        }
        /* back to back: 20 calls between two events, per call */
        const int batch = M >= 1024 ? 5 : 20;
        std::vector<double> bd, bp;
        for (int i = 0; i < std::max(50, iters / 4); i++) {
            for (int which = 0; which < 2; which++) {
                CHECK_CUDA(cudaEventRecord(ev[0], stream));
                for (int j = 0; j < batch; j++)
                    which ? plain((j + sets / 2) % sets) : delegate(j % sets);
                CHECK_CUDA(cudaEventRecord(ev[1], stream));
                CHECK_CUDA(cudaEventSynchronize(ev[1]));
                float ms;
                CHECK_CUDA(cudaEventElapsedTime(&ms, ev[0], ev[1]));
                (which ? bp : bd).push_back(ms * 1e3 / batch);
            }
        }
        for (auto &e : ev)
            CHECK_CUDA(cudaEventDestroy(e));

        double md = median(td), mp = median(tp), mbd = median(bd), mbp = median(bp);
        double tflops = 2.0 * M * N * K / (md * 1e-6) / 1e12;
        char name[64];
        snprintf(name, sizeof name, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
        printf("%-18s %11.2f %11.2f %7.3f %11.2f %11.2f %7.3f %9.1f %9.0f %9.0f\n", name, md, mp,
               md / mp, mbd, mbp, mbd / mbp, tflops, median(issue_d), median(issue_p));
        printf("RESULT gemm.%s.delegate_us %.3f\nRESULT gemm.%s.cublas_us %.3f\n", name, md, name,
               mp);
        printf("RESULT gemm.%s.ratio %.4f\nRESULT gemm.%s.b2b_ratio %.4f\n", name, md / mp, name,
               mbd / mbp);
        printf("RESULT gemm.%s.rel_diff_vs_cublas %.3g\n", name, diff);
        if (!(diff < 1e-2)) {
            printf("  %s: the delegate and cublasGemmEx disagree (rel diff %.3g)\n", name, diff);
            ok = 0;
        }
        baton__gemm_cublaslt_iface.destroy(state);
        for (int s = 0; s < sets; s++) {
            cudaFree(A[s]);
            cudaFree(B[s]);
            cudaFree(C[s]);
            cudaFree(C2[s]);
        }
    }
    cublasDestroy(blas);
    cudaStreamDestroy(stream);
    printf("RESULT gemm.agree %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
