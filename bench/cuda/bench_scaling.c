/* bench_scaling.c: the data-parallel plan against the same computation on one GPU (issue 14), in
 * one process: ONE.json (every step on cuda:0) and SHARDED.json (scripts/shard.py's form over
 * cuda:0..N-1), graph mode, every input and output bound once to a device buffer on the GPU it
 * lives on (baton_runtime_bind), so that a run moves nothing through the host and the time is the
 * GPUs' work and their hand-offs, as XLA's peer figure is (bench/multigpu/xla_scaling.py). The
 * plans run in alternating rounds; it prints the p50 per run of each and the scaling efficiency
 * t(one) / (N * t(sharded)), and checks that grad_weight has the same bits in both (the same
 * x and grad_y: the one-GPU x's rows are the shards' in order).
 *   bench_scaling ONE.json SHARDED.json [--runs N] [--rounds R]   (NCCL_NVLS_ENABLE=0) */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/baton.h"
#include "bench/cuda/bench_stats.h"

static baton_error err;

/* Binds every input and output of rt to a new device buffer on the first GPU it lives on (the
 * runtime refuses the others); inputs get the rows of `x` or `g` named by their prefix, from
 * element offset `at[...]` on, so the shards together hold the one-GPU inputs. Returns the
 * number of GPUs the plan uses. */
static int bind_all(baton_runtime *rt, const baton_plan *plan, const void *x, const void *g,
                    int ngpu, void **grad_w, int *grad_w_dev)
{
    size_t at_x = 0, at_g = 0;
    int used = 0;
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_INPUT && ti.role != BATON_ROLE_OUTPUT)
            continue;
        int bound = 0;
        for (int d = 0; d < ngpu && !bound; d++) {
            void *p;
            CHECK_CUDA(cudaSetDevice(d));
            CHECK_CUDA(cudaMalloc(&p, ti.nbytes));
            baton_buffer b = {{BATON_DEVICE_CUDA, d}, p, ti.nbytes, ti.desc.dtype};
            baton_error e2 = {0};
            if (baton_runtime_bind(rt, t, &b, &e2)) {
                CHECK_CUDA(cudaFree(p));
                continue;
            }
            bound = 1;
            used = d + 1 > used ? d + 1 : used;
            if (ti.role == BATON_ROLE_INPUT && (ti.name[0] == 'x' || ti.name[0] == 'g')) {
                int is_x = ti.name[0] == 'x';
                size_t *at = is_x ? &at_x : &at_g;
                CHECK_CUDA(cudaMemcpy(p, (const char *)(is_x ? x : g) + *at, ti.nbytes,
                                      cudaMemcpyHostToDevice));
                *at += ti.nbytes;
            }
            if (ti.role == BATON_ROLE_OUTPUT && strcmp(ti.name, "grad_weight") == 0) {
                *grad_w = p;
                *grad_w_dev = d;
            }
        }
        if (!bound) {
            fprintf(stderr, "bench_scaling: tensor '%s' lives on no GPU\n", ti.name);
            exit(1);
        }
    }
    return used;
}

int main(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL};
    int runs = 50, rounds = 5, np = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (np < 2)
            paths[np++] = argv[i];
    }
    if (np < 2) {
        fprintf(stderr, "usage: bench_scaling ONE.json SHARDED.json [--runs N] [--rounds R]\n");
        return 2;
    }
    int ngpu = baton_cuda_device_count();
    baton_registry *reg;
    CHECK(baton_registry_create(&reg));
    baton_plan *plan[2];
    for (int k = 0; k < 2; k++)
        CHECK(baton_plan_load(reg, paths[k], &plan[k], &err));
    int x_t = baton_plan_tensor_index(plan[0], "x");
    if (x_t < 0) {
        fprintf(stderr, "bench_scaling: %s has no input 'x'\n", paths[0]);
        return 2;
    }
    baton_tensor_info xi;
    baton_plan_tensor_info(plan[0], x_t, &xi);
    int64_t n = baton_tensor_desc_numel(&xi.desc);
    void *x = malloc(xi.nbytes), *g = malloc(xi.nbytes);
    CHECK(baton_fill_normal(x, xi.desc.dtype, n, 1, 0, 1));
    CHECK(baton_fill_normal(g, xi.desc.dtype, n, 2, 0, 1));
    baton_options o;
    baton_options_init(&o);
    o.mode = BATON_SYNC_GRAPH;
    o.gpu = BATON_GPU_CUDA;
    o.quiet = 1;
    baton_runtime *rt[2];
    void *gw[2];
    int gw_dev[2], gpus[2];
    for (int k = 0; k < 2; k++) {
        if (baton_runtime_create(plan[k], &o, &rt[k], &err)) {
            printf("bench_scaling: %s: %s: nothing measured\n", paths[k], err.message);
            return 0;
        }
        gpus[k] = bind_all(rt[k], plan[k], x, g, ngpu, &gw[k], &gw_dev[k]);
    }
    double *lat[2];
    for (int k = 0; k < 2; k++) {
        lat[k] = malloc((size_t)runs * rounds * sizeof(double));
        for (int i = 0; i < 3; i++) /* captures */
            CHECK(baton_runtime_run(rt[k], &err));
    }
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < runs; i++) {
                double t0 = now_us();
                CHECK(baton_runtime_run(rt[k], &err));
                lat[k][r * runs + i] = now_us() - t0;
            }
    double p50[2];
    for (int k = 0; k < 2; k++)
        p50[k] = pct(lat[k], runs * rounds, 0.5);
    double eff = p50[0] / (gpus[1] * p50[1]);
    printf("%s on %d GPU: p50 %.1f us; %s on %d GPUs: p50 %.1f us; scaling efficiency %.3f\n",
           paths[0], gpus[0], p50[0], paths[1], gpus[1], p50[1], eff);
    printf("RESULT scaling.one_us %.2f\nRESULT scaling.sharded_us %.2f\n", p50[0], p50[1]);
    printf("RESULT scaling.gpus %d\nRESULT scaling.efficiency %.4f\n", gpus[1], eff);
    baton_tensor_info wi;
    baton_plan_tensor_info(plan[0], baton_plan_tensor_index(plan[0], "grad_weight"), &wi);
    void *h[2];
    for (int k = 0; k < 2; k++) {
        h[k] = malloc(wi.nbytes);
        CHECK_CUDA(cudaSetDevice(gw_dev[k]));
        CHECK_CUDA(cudaMemcpy(h[k], gw[k], wi.nbytes, cudaMemcpyDeviceToHost));
    }
    int same = memcmp(h[0], h[1], wi.nbytes) == 0;
    printf("grad_weight: %s bits in both plans\nRESULT scaling.grad_weight_bitwise %d\n",
           same ? "the same" : "DIFFERENT", same);
    return same ? 0 : 1;
}
