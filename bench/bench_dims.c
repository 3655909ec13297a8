/* bench_dims.c: what dimensions bound at run time cost in graph mode (issue 40). Two plans of the
 * same chain of K add_scalar steps on cuda:0 (x [R, F] copied in, y copied out): one static, one
 * whose row count is the dimension "seq" (max R). Part 1 times runs of each with the binding left
 * at R: the dims plan should cost what the static one does (within 3 %). Part 2 runs the dims plan
 * 1,000 times changing seq every 8th run among a few values, and counts captures, in-place graph
 * updates and hits of a kept graph (a value seen before launches its graph as is), with the
 * latency of the runs that changed the binding and of those that did not. Part 3 cycles 12 values
 * (more than the 8 graphs kept per segment), so each change captures and updates a graph in place:
 * the cost of an update over an unchanged run. Prints one JSON object.
 *
 *   bench_dims [--gpu cuda|sim] [--steps K] [--rows R] [--features F] [--iters N] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/baton.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static char *chain_plan(int steps, int rows, int feats, int dims)
{
    size_t cap = (size_t)steps * 400 + 4096, o = 0;
    char *p = malloc(cap);
    char shape[64];
    if (dims)
        snprintf(shape, sizeof shape, "[\"seq\", %d]", feats);
    else
        snprintf(shape, sizeof shape, "[%d, %d]", rows, feats);
    o += (size_t)snprintf(p + o, cap - o,
                          "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"chain%d%s\", ",
                          steps, dims ? "_dims" : "");
    if (dims)
        o += (size_t)snprintf(p + o, cap - o, "\"dims\": {\"seq\": {\"min\": 1, \"max\": %d}}, ",
                              rows);
    o += (size_t)snprintf(p + o, cap - o,
                          "\"tensors\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": %s, "
                          "\"role\": \"input\"}",
                          shape);
    for (int i = 0; i < steps; i++)
        o += (size_t)snprintf(
            p + o, cap - o, ", {\"name\": \"%s%d\", \"dtype\": \"f32\", \"shape\": %s%s}",
            i + 1 == steps ? "y" : "h", i, shape, i + 1 == steps ? ", \"role\": \"output\"" : "");
    o += (size_t)snprintf(p + o, cap - o, "], \"steps\": [");
    for (int i = 0; i < steps; i++) {
        char in[32], out[32];
        snprintf(in, sizeof in, i ? "h%d" : "x", i - 1);
        snprintf(out, sizeof out, "%s%d", i + 1 == steps ? "y" : "h", i);
        o += (size_t)snprintf(p + o, cap - o,
                              "%s{\"name\": \"s%d\", \"kernel\": \"add_scalar\", \"device\": "
                              "\"cuda:0\", \"inputs\": [\"%s\"], \"outputs\": [\"%s\"], \"attrs\": "
                              "{\"value\": 1}}",
                              i ? ", " : "", i, in, out);
    }
    snprintf(p + o, cap - o, "]}");
    return p;
}

typedef struct timing {
    double p50_us, mean_us;
} timing;

static timing summarize(int64_t *ns, int n)
{
    timing t = {0, 0};
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)ns[i];
    qsort(ns, (size_t)n, sizeof *ns, cmp64);
    t.p50_us = n ? (double)ns[n / 2] / 1e3 : 0;
    t.mean_us = n ? sum / n / 1e3 : 0;
    return t;
}

int main(int argc, char **argv)
{
    int steps = 64, rows = 64, feats = 1024, iters = 2000;
    baton_gpu_backend gpu = BATON_GPU_CUDA;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--gpu") == 0 && i + 1 < argc) {
            i++;
            gpu = strcmp(argv[i], "sim") == 0 ? BATON_GPU_SIM : BATON_GPU_CUDA;
        } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc)
            rows = atoi(argv[++i]);
        else if (strcmp(argv[i], "--features") == 0 && i + 1 < argc)
            feats = atoi(argv[++i]);
        else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_dims [--gpu cuda|sim] [--steps K] [--rows R] "
                            "[--features F] [--iters N]\n");
            return 2;
        }
    }
    if (steps < 1 || rows < 16 || feats < 1 || iters < 10) {
        fprintf(stderr, "bench_dims: steps >= 1, rows >= 16, features >= 1, iters >= 10\n");
        return 2;
    }
    baton_registry *reg = NULL;
    baton_registry_create(&reg);
    baton_error err = {0};
    baton_plan *plans[2] = {NULL, NULL};
    baton_runtime *rts[2] = {NULL, NULL};
    baton_options o;
    baton_options_init(&o);
    o.gpu = gpu;
    o.mode = BATON_SYNC_GRAPH;
    o.quiet = 1;
    o.fallback_is_error = 1;
    float *x = calloc((size_t)rows * feats, sizeof *x);
    for (int k = 0; k < 2; k++) {
        char *text = chain_plan(steps, rows, feats, k);
        if (baton_plan_load_string(reg, text, strlen(text), "bench_dims", NULL, &plans[k], &err) ||
            baton_runtime_create(plans[k], &o, &rts[k], &err) ||
            baton_runtime_set_input(rts[k], "x", x, (size_t)rows * feats * sizeof *x, &err)) {
            fprintf(stderr, "bench_dims: %s\n", err.message);
            return 1;
        }
        free(text);
    }
    /* part 1: static against dims unchanged, interleaved in blocks so drift hits both alike */
    int64_t *lat[2] = {malloc((size_t)iters * sizeof(int64_t)),
                       malloc((size_t)iters * sizeof(int64_t))};
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 50; w++)
            if (baton_runtime_run(rts[k], &err)) {
                fprintf(stderr, "bench_dims: %s\n", err.message);
                return 1;
            }
    for (int b = 0; b < iters; b += 100)
        for (int k = 0; k < 2; k++)
            for (int i = b; i < b + 100 && i < iters; i++) {
                int64_t t0 = now_ns();
                if (baton_runtime_run(rts[k], &err)) {
                    fprintf(stderr, "bench_dims: %s\n", err.message);
                    return 1;
                }
                lat[k][i] = now_ns() - t0;
            }
    timing st = summarize(lat[0], iters), dy = summarize(lat[1], iters);

    /* part 2: 1,000 runs, seq changes every 8th run among 4 values */
    baton_runtime *rt = rts[1];
    baton_runtime_reset_stats(rt);
    int values[4] = {rows, rows / 2, rows / 4, rows - 3};
    int64_t *chg = malloc(1000 * sizeof(int64_t)), *same = malloc(1000 * sizeof(int64_t));
    int n_chg = 0, n_same = 0;
    for (int r = 0; r < 1000; r++) {
        int seq = values[(r / 8) % 4];
        int changed = r % 8 == 0;
        int64_t t0 = now_ns();
        if (baton_runtime_set_input(rt, "x", x, (size_t)seq * feats * sizeof *x, &err) ||
            baton_runtime_run(rt, &err)) {
            fprintf(stderr, "bench_dims: run %d: %s\n", r, err.message);
            return 1;
        }
        int64_t dt = now_ns() - t0;
        if (changed)
            chg[n_chg++] = dt;
        else
            same[n_same++] = dt;
    }
    baton_run_stats s;
    baton_runtime_stats(rt, &s);
    int64_t hits = baton_runtime_graph_hits(rt);
    timing tc = summarize(chg, n_chg), ts = summarize(same, n_same);

    /* part 3: more values than kept graphs (12 > 8): every change captures and updates the least
     * recently used graph in place; its cost is that of a changed run over an unchanged one */
    baton_runtime_reset_stats(rt);
    int n_upd = 0;
    for (int r = 0; r < 1000; r++) {
        int seq = rows - (r / 8) % 12;
        int64_t t0 = now_ns();
        if (baton_runtime_set_input(rt, "x", x, (size_t)seq * feats * sizeof *x, &err) ||
            baton_runtime_run(rt, &err)) {
            fprintf(stderr, "bench_dims: run %d: %s\n", r, err.message);
            return 1;
        }
        if (r % 8 == 0 && r >= 8 * 12)
            chg[n_upd++] = now_ns() - t0; /* past the first round: slots full */
    }
    baton_run_stats s3;
    baton_runtime_stats(rt, &s3);
    timing tu = summarize(chg, n_upd);
    printf("{\"bench\": \"dims\", \"gpu\": \"%s\", \"steps\": %d, \"rows\": %d, \"features\": %d, "
           "\"iters\": %d,\n"
           " \"static\": {\"p50_us\": %.2f, \"mean_us\": %.2f},\n"
           " \"dims_unchanged\": {\"p50_us\": %.2f, \"mean_us\": %.2f},\n"
           " \"ratio_p50_dims_over_static\": %.4f, \"within_3_percent\": %s,\n"
           " \"pattern\": {\"runs\": 1000, \"changes\": %d, \"values\": [%d, %d, %d, %d], "
           "\"captures\": %lld, \"graph_updates\": %lld, \"graph_hits\": %lld, "
           "\"changed_run_p50_us\": %.2f, \"unchanged_run_p50_us\": %.2f},\n"
           " \"update_pattern\": {\"runs\": 1000, \"values\": 12, \"kept_graphs\": 8, "
           "\"captures\": %lld, \"graph_updates\": %lld, \"graph_hits\": %lld, "
           "\"updating_run_p50_us\": %.2f, \"update_cost_p50_us\": %.2f}}\n",
           gpu == BATON_GPU_SIM ? "sim" : "cuda", steps, rows, feats, iters, st.p50_us, st.mean_us,
           dy.p50_us, dy.mean_us, dy.p50_us / st.p50_us,
           dy.p50_us <= st.p50_us * 1.03 ? "true" : "false", n_chg, values[0], values[1], values[2],
           values[3], (long long)s.captures, (long long)s.graph_updates, (long long)hits, tc.p50_us,
           ts.p50_us, (long long)s3.captures, (long long)s3.graph_updates,
           (long long)baton_runtime_graph_hits(rt), tu.p50_us, tu.p50_us - ts.p50_us);
    for (int k = 0; k < 2; k++) {
        baton_runtime_destroy(rts[k]);
        baton_plan_free(plans[k]);
        free(lat[k]);
    }
    free(chg);
    free(same);
    free(x);
    baton_registry_destroy(reg);
    return 0;
}
