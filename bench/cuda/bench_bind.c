/* bench_bind.c: what caller-owned buffers cost per run (issue 10). A plan (default the 64-step
 * RMSNorm chain) runs in graph mode on cuda:0 five ways, interleaved in rounds so that drift hits
 * them alike:
 *   copies     set_input / run / get_output (the runtime's own memory, copied in and out)
 *   fixed      input and output bound once to device buffers
 *   host-fixed input and output bound once to pinned host buffers
 *   moving     bound to a different device buffer every run: graph nodes patched
 *   host       bound to a different pinned host buffer every run
 *   recapture  moving, and the segment captured again every run (cudaGraphExecUpdate): the
 *              alternative to patching nodes
 * It prints p50 and p90 of bind + run per run, the bind calls alone, the bytes copied per run
 * (baton_run_stats), and checks that every way gives the same output bits.
 *   bench_bind [plan.json] [--runs N] [--rounds R] */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/baton.h"
#include "bench/cuda/bench_stats.h"

#define NBUF 8

enum { COPIES, FIXED, HOSTFIXED, MOVING, HOST, RECAPTURE, NWAYS };
static const char *const way_name[NWAYS] = {"copies", "fixed", "host-fixed",
                                            "moving", "host",  "recapture"};

int main(int argc, char **argv)
{
    const char *path = "examples/plans/rmsnorm_chain64.json";
    int runs = 400, rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else
            path = argv[i];
    }
    if (baton_cuda_device_count() == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    baton_error err;
    baton_registry *reg;
    baton_plan *plan;
    CHECK(baton_registry_create(&reg));
    CHECK(baton_plan_load(reg, path, &plan, &err));
    int in = -1, out = -1;
    baton_tensor_info ii = {0}, oi = {0};
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role == BATON_ROLE_INPUT && in < 0)
            in = t, ii = ti;
        if (ti.role == BATON_ROLE_OUTPUT && out < 0)
            out = t, oi = ti;
    }
    baton_options o;
    baton_options_init(&o);
    o.mode = BATON_SYNC_GRAPH;
    o.gpu = BATON_GPU_CUDA;
    baton_runtime *rt[NWAYS];
    for (int w = 0; w < NWAYS; w++)
        CHECK(baton_runtime_create(plan, &o, &rt[w], &err));
    void *xd[NBUF], *yd[NBUF], *xh[NBUF], *yh[NBUF];
    void *x = malloc(ii.nbytes), *y = malloc(oi.nbytes), *ref = malloc(oi.nbytes);
    CHECK(baton_fill_normal(x, ii.desc.dtype, baton_tensor_desc_numel(&ii.desc), 7, 0, 1));
    for (int k = 0; k < NBUF; k++) {
        CHECK_CUDA(cudaMalloc(&xd[k], ii.nbytes));
        CHECK_CUDA(cudaMalloc(&yd[k], oi.nbytes));
        CHECK_CUDA(cudaMallocHost(&xh[k], ii.nbytes));
        CHECK_CUDA(cudaMallocHost(&yh[k], oi.nbytes));
        CHECK_CUDA(cudaMemcpy(xd[k], x, ii.nbytes, cudaMemcpyHostToDevice));
        memcpy(xh[k], x, ii.nbytes);
    }
    const baton_device cpu = {BATON_DEVICE_CPU, 0}, gpu = {BATON_DEVICE_CUDA, 0};
    CHECK(baton_runtime_set_input(rt[COPIES], ii.name, x, ii.nbytes, &err));
    baton_buffer fx = {gpu, xd[0], ii.nbytes, ii.desc.dtype},
                 fy = {gpu, yd[0], oi.nbytes, oi.desc.dtype};
    CHECK(baton_runtime_bind(rt[FIXED], in, &fx, &err));
    CHECK(baton_runtime_bind(rt[FIXED], out, &fy, &err));
    baton_buffer hx = {cpu, xh[0], ii.nbytes, ii.desc.dtype},
                 hy = {cpu, yh[0], oi.nbytes, oi.desc.dtype};
    CHECK(baton_runtime_bind(rt[HOSTFIXED], in, &hx, &err));
    CHECK(baton_runtime_bind(rt[HOSTFIXED], out, &hy, &err));

    int total = runs * rounds;
    double *lat[NWAYS], *bind_us[NWAYS];
    for (int w = 0; w < NWAYS; w++) {
        lat[w] = malloc((size_t)total * sizeof(double));
        bind_us[w] = malloc((size_t)total * sizeof(double));
    }
    /* warm-up: captures, learning the patch maps */
    for (int it = 0; it < 20; it++)
        for (int w = 0; w < NWAYS; w++) {
            int k = it % NBUF;
            if (w >= MOVING) {
                int host = w == HOST;
                baton_buffer bx = {host ? cpu : gpu, host ? xh[k] : xd[k], ii.nbytes,
                                   ii.desc.dtype};
                baton_buffer by = {host ? cpu : gpu, host ? yh[k] : yd[k], oi.nbytes,
                                   oi.desc.dtype};
                CHECK(baton_runtime_bind(rt[w], in, &bx, &err));
                CHECK(baton_runtime_bind(rt[w], out, &by, &err));
            }
            CHECK(baton_runtime_run(rt[w], &err));
        }
    for (int w = 0; w < NWAYS; w++)
        baton_runtime_reset_stats(rt[w]);
    int n = 0;
    for (int r = 0; r < rounds; r++)
        for (int w = 0; w < NWAYS; w++)
            for (int i = 0; i < runs; i++) {
                int k = (r * runs + i) % NBUF, at = r * runs + i;
                double t0 = now_us();
                if (w == COPIES)
                    CHECK(baton_runtime_set_input(rt[w], ii.name, x, ii.nbytes, &err));
                if (w >= MOVING) {
                    int host = w == HOST;
                    baton_buffer bx = {host ? cpu : gpu, host ? xh[k] : xd[k], ii.nbytes,
                                       ii.desc.dtype};
                    baton_buffer by = {host ? cpu : gpu, host ? yh[k] : yd[k], oi.nbytes,
                                       oi.desc.dtype};
                    CHECK(baton_runtime_bind(rt[w], in, &bx, &err));
                    CHECK(baton_runtime_bind(rt[w], out, &by, &err));
                    if (w == RECAPTURE)
                        CHECK(baton_runtime_recapture(rt[w]));
                }
                double t1 = now_us();
                CHECK(baton_runtime_run(rt[w], &err));
                if (w == COPIES)
                    CHECK(baton_runtime_get_output(rt[w], oi.name, y, oi.nbytes, &err));
                double t2 = now_us();
                lat[w][at] = t2 - t0;
                bind_us[w][at] = t1 - t0;
                n++;
            }
    /* the same bits every way */
    CHECK(baton_runtime_get_output(rt[COPIES], oi.name, ref, oi.nbytes, &err));
    int same = 1;
    for (int w = FIXED; w < NWAYS; w++) {
        CHECK(baton_runtime_get_output(rt[w], oi.name, y, oi.nbytes, &err));
        same &= memcmp(y, ref, oi.nbytes) == 0;
    }
    printf("bench_bind: %s, graph mode, %d rounds x %d runs per way, %d buffers in rotation\n",
           path, rounds, runs, NBUF);
    printf("%-10s %10s %10s %12s %10s %10s %9s %8s\n", "way", "p50_us", "p90_us", "bind_p50_us",
           "h2d_B/run", "d2h_B/run", "captures", "updates");
    double fixed_p50 = 0;
    double p50[NWAYS];
    for (int w = 0; w < NWAYS; w++) {
        baton_run_stats st;
        baton_runtime_stats(rt[w], &st);
        double *cp = malloc((size_t)total * sizeof(double));
        memcpy(cp, lat[w], (size_t)total * sizeof(double));
        p50[w] = pct(cp, total, 0.5);
        double p90 = pct(cp, total, 0.9);
        double b50 = pct(bind_us[w], total, 0.5);
        if (w == FIXED)
            fixed_p50 = p50[w];
        printf("%-10s %10.2f %10.2f %12.2f %10lld %10lld %9lld %8lld\n", way_name[w], p50[w], p90,
               b50, st.runs ? (long long)(st.bytes_h2d / st.runs) : 0,
               st.runs ? (long long)(st.bytes_d2h / st.runs) : 0, (long long)st.captures,
               (long long)st.graph_updates);
        free(cp);
    }
    for (int w = 0; w < NWAYS; w++)
        if (w != FIXED && w != HOST)
            printf("RESULT %s/fixed p50 ratio %.3f\n", way_name[w], p50[w] / fixed_p50);
    printf("RESULT host/host-fixed p50 ratio %.3f\n", p50[HOST] / p50[HOSTFIXED]);
    printf("RESULT outputs bitwise equal across ways: %s\n", same ? "yes" : "NO");
    printf("RESULT note: %s\n", baton_runtime_note(rt[MOVING]) ? baton_runtime_note(rt[MOVING])
                                                               : "every segment captured");
    for (int w = 0; w < NWAYS; w++)
        baton_runtime_destroy(rt[w]);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return same ? 0 : 1;
}
