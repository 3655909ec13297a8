/* bench_safetensors_load.c: what loading a plan whose constants come from a large safetensors file
 * costs (issue 40): baton_plan_load should cost no more than mapping the file, and resident memory
 * before the first run should stay within 64 MB of the process baseline on the CPU path (the
 * constants are read in place from the mapping, not copied). Writes the file once (--bytes, 2.5 GB
 * by default, as N BF16 [4096, 4096] tensors) and a plan with one constant per tensor, each read by
 * a CPU noop; then times mmap alone, baton_plan_load and baton_runtime_create, and reads VmRSS at
 * each point. Prints one JSON object; exits 1 when a bound is missed.
 *
 *   bench_safetensors_load [--dir DIR] [--bytes N] [--keep] [--sparse] */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "baton/baton.h"

#define ROWS         4096
#define COLS         4096
#define TENSOR_BYTES ((size_t)ROWS * COLS * 2)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Resident memory of this process, in MB (VmRSS). */
static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtod(line + 6, NULL);
    if (f)
        fclose(f);
    return kb / 1024.0;
}

static int write_file(const char *path, int n, int sparse)
{
    size_t cap = (size_t)n * 128 + 64;
    char *h = malloc(cap);
    size_t o = (size_t)snprintf(h, cap, "{\"__metadata__\": {\"format\": \"pt\"}");
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(h + o, cap - o,
                              ", \"layers.%d.weight\": {\"dtype\": \"BF16\", \"shape\": [%d, %d], "
                              "\"data_offsets\": [%zu, %zu]}",
                              i, ROWS, COLS, (size_t)i * TENSOR_BYTES,
                              (size_t)(i + 1) * TENSOR_BYTES);
    o += (size_t)snprintf(h + o, cap - o, "}");
    while (o % 8)
        h[o++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    uint64_t len = o;
    unsigned char lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (unsigned char)(len >> (8 * i));
    int ok = fwrite(lb, 1, 8, f) == 8 && fwrite(h, 1, o, f) == o;
    free(h);
    if (sparse) { /* holes: the same header, no data written (mapping never reads it at load) */
        ok = ok && fflush(f) == 0 &&
             ftruncate(fileno(f), (off_t)(8 + o + (size_t)n * TENSOR_BYTES)) == 0;
    } else {
        size_t chunk = 1 << 22;
        unsigned char *buf = malloc(chunk);
        uint64_t x = 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < chunk; i += 8) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            memcpy(buf + i, &x, 8);
        }
        for (size_t left = (size_t)n * TENSOR_BYTES; ok && left;) {
            size_t k = left < chunk ? left : chunk;
            ok = fwrite(buf, 1, k, f) == k;
            left -= k;
        }
        free(buf);
    }
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int write_plan(const char *path, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"st_load\", \"tensors\": [\n");
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"name\": \"w%d\", \"dtype\": \"bf16\", \"shape\": [%d, %d], \"role\": "
                "\"constant\", \"init\": {\"kind\": \"safetensors\", \"path\": "
                "\"weights.safetensors\", \"key\": \"layers.%d.weight\"}},\n"
                "{\"name\": \"o%d\", \"dtype\": \"bf16\", \"shape\": [%d, %d]}%s\n",
                i, ROWS, COLS, i, i, ROWS, COLS, i + 1 < n ? "," : "");
    fprintf(f, "],\n\"steps\": [\n");
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"name\": \"s%d\", \"kernel\": \"noop\", \"device\": \"cpu\", \"inputs\": "
                "[\"w%d\"], \"outputs\": [\"o%d\"]}%s\n",
                i, i, i, i + 1 < n ? "," : "");
    fprintf(f, "]}\n");
    return fclose(f);
}

int main(int argc, char **argv)
{
    const char *dir = "/tmp/baton_st_load";
    double bytes = 2.5e9;
    int keep = 0, sparse = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            bytes = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--keep") == 0)
            keep = 1;
        else if (strcmp(argv[i], "--sparse") == 0)
            sparse = 1;
        else {
            fprintf(stderr, "usage: bench_safetensors_load [--dir DIR] [--bytes N] [--keep] "
                            "[--sparse]\n");
            return 2;
        }
    }
    int n = (int)(bytes / (double)TENSOR_BYTES + 0.5);
    if (n < 1)
        n = 1;
    char file[512], plan_path[512];
    mkdir(dir, 0700);
    snprintf(file, sizeof file, "%s/weights.safetensors", dir);
    snprintf(plan_path, sizeof plan_path, "%s/plan.json", dir);
    struct stat st;
    if (stat(file, &st) != 0 || (size_t)st.st_size < (size_t)n * TENSOR_BYTES) {
        fprintf(stderr, "writing %s (%d tensors, %.2f GB)...\n", file, n,
                (double)n * TENSOR_BYTES / 1e9);
        if (write_file(file, n, sparse)) {
            perror(file);
            return 1;
        }
    }
    if (write_plan(plan_path, n)) {
        perror(plan_path);
        return 1;
    }
    /* the file's pages out of the cache is not needed: the load must not read them at all */
    baton_registry *reg = NULL;
    baton_registry_create(&reg);
    double rss0 = rss_mb();

    /* the floor: open and map the file, read its header page */
    double t0 = now_ms();
    int fd = open(file, O_RDONLY);
    fstat(fd, &st);
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    volatile unsigned char touch = ((unsigned char *)m)[0];
    (void)touch;
    double map_ms = now_ms() - t0;
    munmap(m, (size_t)st.st_size);
    close(fd);

    baton_plan *plan = NULL;
    baton_error err = {0};
    t0 = now_ms();
    if (baton_plan_load(reg, plan_path, &plan, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    double load_ms = now_ms() - t0;
    double rss_load = rss_mb();
    baton_options o;
    baton_options_init(&o);
    o.quiet = 1;
    baton_runtime *rt = NULL;
    t0 = now_ms();
    if (baton_runtime_create(plan, &o, &rt, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    double create_ms = now_ms() - t0;
    double rss_create = rss_mb();
    int ok = rss_load - rss0 <= 64 && rss_create - rss0 <= 64;
    printf("{\"bench\": \"safetensors_load\", \"file\": \"%s\", \"file_bytes\": %lld, "
           "\"tensors\": %d, \"sparse\": %s, \"map_ms\": %.3f, \"plan_load_ms\": %.3f, "
           "\"runtime_create_ms\": %.3f, \"rss_baseline_mb\": %.1f, \"rss_after_load_mb\": %.1f, "
           "\"rss_after_create_mb\": %.1f, \"rss_bound_mb\": 64, \"within_bound\": %s}\n",
           file, (long long)st.st_size, n, sparse ? "true" : "false", map_ms, load_ms, create_ms,
           rss0, rss_load, rss_create, ok ? "true" : "false");
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    if (!keep) {
        unlink(file);
        unlink(plan_path);
        rmdir(dir);
    }
    return ok ? 0 : 1;
}
