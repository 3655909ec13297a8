/* bench_cpu.c: baton's CPU steps against PyTorch's CPU ops on the same inputs and thread count
 * (issue 44). Each row is the fastest of repeated calls of the step's kernel or delegate (on a
 * shared machine the slower calls measure the neighbours); the GEMV rows also time a streaming read
 * of the weight's bytes in the same run, on the same threads, alternating with the GEMV, and give
 * the GEMV's share of that bandwidth; the same GEMV with a weight of 128 MiB (4 x the L3 here), and
 * the GEMV's arithmetic alone (its weight in the L2) against that read, say which limit a share
 * below 80 % meets (docs/decisions/cpu-gemm.md). PyTorch's times come from bench/cpu/peers.py (its
 * JSON,
 * --peers); bench/cpu/run.sh runs both. --gemm-sweep prints the measurements behind
 * docs/decisions/cpu-gemm.md: baton's kernels against OpenBLAS for M = 1..64 (Debian's OpenBLAS
 * 0.3.21 is built without bfloat16: its cblas.h declares sbgemm, the library does not have it).
 * --gemv-sizes prints the GEMV's share of the read floor for weights of 4 to 128 MiB.
 * Usage: bench_cpu [--peers=FILE] [--json=FILE] [--reps=N] [--threads=N] [--gemm-sweep]
 *                  [--gemv-sizes] [--cpu-time] */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/baton.h"
#include "core/dtype.h"
#include "core/simd.h"
#include "core/threads.h"
#include "delegates/cpu/gemv.h"
#include "delegates/gemm.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/descriptors.h"

static int reps = 30;
/* --cpu-time: the calling thread's CPU time instead of the wall clock (with one thread), which a
 * busy shared machine disturbs much less: what the code costs, not what the machine gave it. */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef void (*bench_fn)(void *arg);

/* The fastest of `reps` timed calls after two warm-up calls. */
static double time_us(bench_fn fn, void *arg)
{
    double t[256];
    int n = reps > 256 ? 256 : reps;
    fn(arg);
    fn(arg);
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        fn(arg);
        t[i] = now_us() - t0;
    }
    qsort(t, (size_t)n, sizeof t[0], cmpd);
    return t[0];
}

static void *alloc_rand(baton_dtype dt, int64_t n, unsigned seed, double scale)
{
    void *p = aligned_alloc(64, ((size_t)n * baton_dtype_size(dt) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_cpu: out of memory\n");
        exit(1);
    }
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double v = ((double)(s >> 11) / 9007199254740992.0 * 2 - 1) * scale;
        store_f64(dt, p, i, v);
    }
    return p;
}

/* ---- the streaming read: the floor of a GEMV that reads its weight once ---- */

typedef struct read_job {
    const char *p;
    size_t bytes, per_task;
    float sums[256 * 16];
} read_job;

/* The read at the machine's vector level: AVX-512 code on a CPU without it dies with SIGILL. */
static void read_task_scalar(void *arg, int64_t t)
{
    read_job *j = arg;
    size_t b0 = (size_t)t * j->per_task,
           b1 = b0 + j->per_task < j->bytes ? b0 + j->per_task : j->bytes;
    uint64_t a[8] = {0};
    for (size_t b = b0; b + 64 <= b1; b += 64)
        for (int i = 0; i < 8; i++) {
            uint64_t v;
            memcpy(&v, j->p + b + 8 * i, 8);
            a[i] += v;
        }
    for (int i = 1; i < 8; i++)
        a[0] += a[i];
    j->sums[16 * (t % 256)] = (float)a[0];
}

#ifdef SIMD_X86
/* Eight independent sums over 512 bytes a pass: the fastest plain read measured here (four sums
 * over 256 bytes read 5-10 % slower, an integer OR 5 % slower still). */
static SIMD_T512 void read_task(void *arg, int64_t t)
{
    read_job *j = arg;
    size_t b0 = (size_t)t * j->per_task,
           b1 = b0 + j->per_task < j->bytes ? b0 + j->per_task : j->bytes;
    __m512 a[8];
    for (int i = 0; i < 8; i++)
        a[i] = _mm512_setzero_ps();
    for (size_t b = b0; b + 512 <= b1; b += 512)
        for (int i = 0; i < 8; i++)
            a[i] = _mm512_add_ps(a[i], _mm512_loadu_ps(j->p + b + 64 * i));
    for (int i = 1; i < 8; i++)
        a[0] = _mm512_add_ps(a[0], a[i]);
    _mm512_storeu_ps(j->sums + 16 * (t % 256), a[0]);
}

/* The same with 32-byte vectors, eight sums over 256 bytes a pass. */
static SIMD_T256 void read_task256(void *arg, int64_t t)
{
    read_job *j = arg;
    size_t b0 = (size_t)t * j->per_task,
           b1 = b0 + j->per_task < j->bytes ? b0 + j->per_task : j->bytes;
    __m256 a[8];
    for (int i = 0; i < 8; i++)
        a[i] = _mm256_setzero_ps();
    for (size_t b = b0; b + 256 <= b1; b += 256)
        for (int i = 0; i < 8; i++)
            a[i] = _mm256_add_ps(a[i], _mm256_loadu_ps((const float *)(j->p + b + 32 * i)));
    for (int i = 1; i < 8; i++)
        a[0] = _mm256_add_ps(a[0], a[i]);
    _mm256_storeu_ps(j->sums + 16 * (t % 256), a[0]);
}
#endif

static void read_run(void *arg)
{
    read_job *j = arg;
    int64_t tasks = (int64_t)((j->bytes + j->per_task - 1) / j->per_task);
    void (*task)(void *, int64_t) = read_task_scalar;
#ifdef SIMD_X86
    const simd_level l = baton__simd_level_get();
    task = l == SIMD_AVX512 ? read_task : l == SIMD_AVX2 ? read_task256 : read_task_scalar;
#endif
    baton__par_for(tasks, task, j);
}

static double read_us(const void *p, size_t bytes)
{
    read_job *j = calloc(1, sizeof *j);
    j->p = p;
    j->bytes = bytes;
    j->per_task = 1 << 20; /* the GEMV's tasks are of this order */
    double t = time_us(read_run, j);
    free(j);
    return t;
}

/* ---- steps ---- */

typedef struct step_job {
    const baton_delegate_iface *iface;
    void *state;
    baton_kernel_fn kernel;
    void *bufs[4];
    const void *opaque;
    size_t opaque_len;
    baton_exec_ctx ctx;
    char errbuf[256];
} step_job;

static void step_run(void *arg)
{
    step_job *s = arg;
    int rc = s->kernel ? s->kernel(&s->ctx, s->bufs, s->opaque, s->opaque_len)
                       : s->iface->execute(s->state, &s->ctx, s->bufs);
    if (rc) {
        fprintf(stderr, "bench_cpu: step failed: %s\n", s->errbuf);
        exit(1);
    }
}

typedef struct row {
    char name[64];
    char peer_key[64];
    double us, peer_us, read_us;
    double bytes;     /* bytes the step must read (the GEMV's weight) */
    int compute_only; /* read_us is the memory's time for these bytes, the GEMV's in the L2 */
} row;

static row rows[48];
static int n_rows;

/* A gemm step through the CPU delegate, as a plan would prepare it (the weight a constant). */
typedef struct gemm_step {
    baton_tensor_desc in[2], out;
    baton_attr at[1];
    baton_sig_args sig;
    void *x, *w, *y;
    step_job *s;
} gemm_step;

static gemm_step *gemm_make(const char *name, baton_dtype dt, int trans_b, int64_t m, int64_t n,
                            int64_t k)
{
    gemm_step *g = calloc(1, sizeof *g);
    g->in[0] = (baton_tensor_desc){.dtype = dt, .rank = 2, .shape = {m, k}};
    g->in[1] =
        (baton_tensor_desc){.dtype = dt, .rank = 2, .shape = {trans_b ? n : k, trans_b ? k : n}};
    g->at[0] = (baton_attr){.name = "trans_b", .type = BATON_ATTR_BOOL, .i = trans_b};
    g->sig = (baton_sig_args){.n_inputs = 2,
                              .inputs = g->in,
                              .n_outputs = 1,
                              .outputs = &g->out,
                              .n_attrs = 1,
                              .attrs = g->at};
    baton_gemm_desc d;
    char msg[256];
    if (baton__gemm_resolve(&g->sig, &d, &g->out, msg, sizeof msg)) {
        fprintf(stderr, "bench_cpu: %s\n", msg);
        exit(1);
    }
    step_job *s = g->s = calloc(1, sizeof *s);
    g->x = alloc_rand(dt, m * k, 1, 1.0), g->w = alloc_rand(dt, n * k, 2, 0.02);
    g->y = alloc_rand(dt, m * n, 3, 1.0);
    int constant[2] = {0, 1};
    void *data[2] = {g->x, g->w};
    baton_device cpu = {BATON_DEVICE_CPU, 0};
    baton_delegate_init info = {.step_name = name,
                                .device = cpu,
                                .sig = &g->sig,
                                .input_constant = constant,
                                .input_data = data};
    baton_error err = {0};
    s->iface = &baton__gemm_openblas_iface;
    if (s->iface->init(&info, &s->state, &err)) {
        fprintf(stderr, "bench_cpu: %s\n", err.message);
        exit(1);
    }
    s->bufs[0] = g->x, s->bufs[1] = g->w, s->bufs[2] = g->y;
    s->ctx.device = cpu;
    s->ctx.sig = &g->sig;
    s->ctx.errbuf = s->errbuf;
    s->ctx.errbuf_len = sizeof s->errbuf;
    return g;
}

static void gemm_free(gemm_step *g)
{
    g->s->iface->destroy(g->s->state);
    free(g->x), free(g->w), free(g->y), free(g->s), free(g);
}

static row *new_row(const char *name, const char *peer_key)
{
    row *r = &rows[n_rows++];
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->peer_key, sizeof r->peer_key, "%s", peer_key);
    r->peer_us = NAN;
    return r;
}

/* A GEMV row: the step, and a streaming read of the bytes it streams, alternating. peer_key ""
 * for a row PyTorch is not run on. */
static row *gemm_row(const char *name, const char *peer_key, baton_dtype dt, int trans_b, int64_t m,
                     int64_t n, int64_t k)
{
    gemm_step *g = gemm_make(name, dt, trans_b, m, n, k);
    row *r = new_row(name, peer_key);
    r->bytes = (double)(n * k) * (double)baton_dtype_size(dt);
    /* alternate the two measurements so that both see the same machine */
    r->us = r->read_us = INFINITY;
    for (int round = 0; round < 4; round++) {
        double a = time_us(step_run, g->s);
        double b = read_us(baton__gemm_cpu_gemv_weight(g->s->state, g->w), (size_t)r->bytes);
        r->us = a < r->us ? a : r->us;
        r->read_us = b < r->read_us ? b : r->read_us;
    }
    gemm_free(g);
    return r;
}

/* The GEMV's arithmetic alone: a weight of 768 KiB, which stays in the core's L2 across the
 * repeated calls, against the streaming read of a 4096 x 4096 weight of the same dtype from the
 * memory, both on one thread, alternating. Its share (read time / GEMV time, per byte) says how
 * fast the kernel could go if the memory were free: below 1.25 the arithmetic alone is too slow
 * for 80 % of the read floor. */
static void compute_row(const char *name, baton_dtype dt)
{
    const int64_t k = 4096, n = (768 << 10) / (k * (int64_t)baton_dtype_size(dt));
    gemm_step *g = gemm_make(name, dt, 1, 1, n, k);
    const size_t big = (size_t)4096 * 4096 * baton_dtype_size(dt);
    void *w = alloc_rand(dt, 4096LL * 4096, 2, 0.02);
    row *r = new_row(name, "");
    r->bytes = (double)(n * k) * (double)baton_dtype_size(dt);
    r->compute_only = 1;
    static const par_ctx one = {NULL, 1};
    const par_ctx *prev = baton__par_bind(&one);
    double floor_us = INFINITY;
    r->us = INFINITY;
    for (int round = 0; round < 4; round++) {
        double a = time_us(step_run, g->s);
        double b = read_us(w, big);
        r->us = a < r->us ? a : r->us;
        floor_us = b < floor_us ? b : floor_us;
    }
    baton__par_bind(prev);
    r->read_us = floor_us * r->bytes / (double)big; /* the floor's time for this row's bytes */
    free(w);
    gemm_free(g);
}

static void ew_row(const char *name, const char *peer_key, baton_kernel_fn fn, baton_dtype dt,
                   int64_t n, int binary, double value)
{
    step_job *s = calloc(1, sizeof *s);
    static baton_ew_desc d;
    d = (baton_ew_desc){.n = n, .nb = binary ? n : 0, .dtype = dt, .value = value};
    void *a = alloc_rand(dt, n, 4, 1.0), *b = alloc_rand(dt, n, 5, 1.0),
         *y = alloc_rand(dt, n, 6, 1);
    s->kernel = fn;
    s->opaque = &d;
    s->opaque_len = sizeof d;
    s->bufs[0] = a;
    s->bufs[1] = binary ? b : y;
    s->bufs[2] = y;
    s->ctx.errbuf = s->errbuf;
    s->ctx.errbuf_len = sizeof s->errbuf;
    row *r = new_row(name, peer_key);
    r->us = time_us(step_run, s);
    free(a), free(b), free(y), free(s);
}

static void rms_row(const char *name, const char *peer_key, int64_t n1, int64_t n2)
{
    step_job *s = calloc(1, sizeof *s);
    static baton_rms_norm_desc d;
    d = (baton_rms_norm_desc){.n1 = n1,
                              .n2 = n2,
                              .eps = 1e-5,
                              .x_dtype = BATON_DTYPE_F32,
                              .w_dtype = BATON_DTYPE_F32,
                              .part_grad_size = 16};
    void *x = alloc_rand(BATON_DTYPE_F32, n1 * n2, 7, 1.0);
    void *w = alloc_rand(BATON_DTYPE_F32, n2, 8, 1.0);
    void *y = alloc_rand(BATON_DTYPE_F32, n1 * n2, 9, 1.0);
    void *inv = alloc_rand(BATON_DTYPE_F32, n1, 10, 1.0);
    s->kernel = baton__kcpu_rms_norm_fwd;
    s->opaque = &d;
    s->opaque_len = sizeof d;
    s->bufs[0] = x, s->bufs[1] = w, s->bufs[2] = y, s->bufs[3] = inv;
    s->ctx.errbuf = s->errbuf;
    s->ctx.errbuf_len = sizeof s->errbuf;
    row *r = new_row(name, peer_key);
    r->us = time_us(step_run, s);
    free(x), free(w), free(y), free(inv), free(s);
}

/* The sampler over a decode step's logits (128256, Llama 3's vocabulary), through a one-step CPU
 * plan as generate makes it: inputs set once, the run timed (its few microseconds of runtime
 * around the kernel included). */
static void sample_run(void *rt)
{
    baton_error err = {0};
    if (baton_runtime_run(rt, &err)) {
        fprintf(stderr, "bench_cpu: sample: %s\n", err.message);
        exit(1);
    }
}

static void sample_row(const char *name, const char *peer_key, baton_dtype dt, double temperature,
                       int top_k, double top_p, int peaked)
{
    const int64_t V = 128256;
    char json[1024];
    snprintf(json, sizeof json,
             "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"sampler\", \"tensors\": ["
             "{\"name\": \"logits\", \"dtype\": \"%s\", \"shape\": [1, %lld], \"role\": \"input\"},"
             "{\"name\": \"step\", \"dtype\": \"i64\", \"shape\": [1], \"role\": \"input\"},"
             "{\"name\": \"ids\", \"dtype\": \"i64\", \"shape\": [1], \"role\": \"output\"}],"
             "\"steps\": [{\"name\": \"sample\", \"kernel\": \"sample\", \"device\": \"cpu\", "
             "\"inputs\": [\"logits\", \"step\"], \"outputs\": [\"ids\"], \"attrs\": "
             "{\"temperature\": %.17g, \"top_k\": %d, \"top_p\": %.17g, \"seed\": 1}}]}",
             baton_dtype_name(dt), (long long)V, temperature, top_k, top_p);
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    void *x = alloc_rand(dt, V, 11, 4.0);
    if (peaked) /* a model's logits: 30 tokens at 8 to 12 hold nearly all the mass */
        for (int64_t j = 0; j < 30; j++) /* bench/cpu/peers.py places them alike */
            store_f64(dt, x, (j * 4271 + 17) % V, 8.0 + (double)j / 7.5);
    int64_t step = 7;
    if (baton_registry_create(&reg) ||
        baton_plan_load_string(reg, json, strlen(json), "sampler", NULL, &plan, &err) ||
        baton_runtime_create(plan, NULL, &rt, &err) ||
        baton_runtime_set_input(rt, "logits", x, (size_t)V * baton_dtype_size(dt), &err) ||
        baton_runtime_set_input(rt, "step", &step, sizeof step, &err)) {
        fprintf(stderr, "bench_cpu: the sampler plan: %s\n", err.message);
        exit(1);
    }
    row *r = new_row(name, peer_key);
    r->us = time_us(sample_run, rt);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    free(x);
}

/* ---- --gemm-sweep: baton's kernels against OpenBLAS over M ---- */

typedef struct sweep_job {
    int which; /* 0 baton gemv, 1 sgemm (f32 weight), 2 sgemv (f32 weight, M = 1) */
    baton_dtype dt;
    int trans_b;
    int64_t m, n, k;
    float *xf, *wf, *y, *partial;
    void *w;
} sweep_job;

static void sweep_run(void *arg)
{
    sweep_job *j = arg;
    int tb = j->trans_b;
    switch (j->which) {
    case 0:
        baton__gemv_run(j->dt, tb, j->m, j->n, j->k, 1.0f, j->xf, j->w, j->y, j->partial);
        break;
    case 1:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)j->m,
                    (int)j->n, (int)j->k, 1.0f, j->xf, (int)j->k, j->wf, tb ? (int)j->k : (int)j->n,
                    0.0f, j->y, (int)j->n);
        break;
    default:
        /* sgemv where it applies (M = 1): OpenBLAS's own GEMV */
        cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, tb ? (int)j->n : (int)j->k,
                    tb ? (int)j->k : (int)j->n, 1.0f, j->wf, tb ? (int)j->k : (int)j->n, j->xf, 1,
                    0.0f, j->y, 1);
        break;
    }
}

static void gemm_sweep(void)
{
    const int64_t n = 4096, k = 4096;
    static const int64_t ms[] = {1, 2, 4, 8, 16, 32, 64};
    printf("\n%-6s %-4s %4s %12s %12s %12s   (us, median; OpenBLAS with %d threads)\n", "dtype",
           "W", "M", "baton", "sgemm(f32 W)", "sgemv(f32 W)", baton__par_threads());
    for (int di = 0; di < 2; di++) {
        baton_dtype dt = di == 0 ? BATON_DTYPE_BF16 : BATON_DTYPE_F32;
        for (int tb = 1; tb >= 0; tb--)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                sweep_job j = {.dt = dt, .trans_b = tb, .m = ms[mi], .n = n, .k = k};
                j.w = alloc_rand(dt, n * k, 2, 0.02);
                j.wf = malloc(sizeof(float) * (size_t)(n * k));
                baton__cvt_to_f32(dt == BATON_DTYPE_F32 ? BATON_DTYPE_F32 : dt, j.w, j.wf, n * k);
                j.xf = alloc_rand(BATON_DTYPE_F32, j.m * k, 1, 1.0);
                j.y = malloc(sizeof(float) * (size_t)(j.m * n));
                j.partial = malloc(sizeof(float) * baton__gemv_partial_floats(j.m, n, k, dt));
                double t[3] = {NAN, NAN, NAN};
                for (int w = 0; w < 3; w++) {
                    if (w == 2 && j.m != 1)
                        continue;
                    j.which = w;
                    t[w] = time_us(sweep_run, &j);
                }
                printf("%-6s %-4s %4lld %12.0f %12.0f %12.0f\n", baton_dtype_name(dt),
                       tb ? "NK" : "KN", (long long)j.m, t[0], t[1], t[2]);
                free(j.w), free(j.wf), free(j.xf), free(j.y), free(j.partial);
            }
    }
}

/* ---- --gemv-sizes: the GEMV's share of the read floor as the weight grows past the L3 ---- */

static void gemv_sizes(void)
{
    printf("\n%-6s %8s %10s %10s %9s   (1 x 4096 . 4096 x N, W [N,K], %d threads)\n", "dtype",
           "W MiB", "gemv us", "read us", "share", baton__par_threads());
    for (int di = 0; di < 3; di++) {
        baton_dtype dt = di == 0 ? BATON_DTYPE_BF16 : di == 1 ? BATON_DTYPE_F16 : BATON_DTYPE_F32;
        for (int64_t mib = 4; mib <= 128; mib *= 2) {
            int64_t n = (mib << 20) / (4096 * (int64_t)baton_dtype_size(dt));
            row *r = gemm_row("size sweep", "", dt, 1, 1, n, 4096);
            printf("%-6s %8lld %10.1f %10.1f %8.0f%%\n", baton_dtype_name(dt), (long long)mib,
                   r->us, r->read_us, 100 * r->read_us / r->us);
            n_rows--; /* not a row of the table */
        }
    }
}

/* ---- peers: {"threads": N, "ops": {"key": us, ...}} from peers.py ---- */

static double peer_lookup(const char *json, const char *key)
{
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = json ? strstr(json, pat) : NULL;
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    return b;
}

/* /proc/cpuinfo's model name (the results table's device), "cpu" where there is none. */
static const char *cpu_model(void)
{
    static char name[128] = "cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            c += 1 + strspn(c + 1, " \t");
            c[strcspn(c, "\n\"\\")] = 0;
            snprintf(name, sizeof name, "%s", c);
            break;
        }
    }
    if (f)
        fclose(f);
    return name;
}

int main(int argc, char **argv)
{
    const char *peers = NULL, *json = NULL;
    int sweep = 0, sizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--peers=", 8))
            peers = argv[i] + 8;
        else if (!strncmp(argv[i], "--json=", 7))
            json = argv[i] + 7;
        else if (!strncmp(argv[i], "--reps=", 7))
            reps = atoi(argv[i] + 7);
        else if (!strncmp(argv[i], "--threads=", 10))
            setenv("BATON_CPU_THREADS", argv[i] + 10, 1);
        else if (!strcmp(argv[i], "--gemm-sweep"))
            sweep = 1;
        else if (!strcmp(argv[i], "--gemv-sizes"))
            sizes = 1;
        else if (!strcmp(argv[i], "--cpu-time")) {
            clock_id = CLOCK_THREAD_CPUTIME_ID;
            setenv("BATON_CPU_THREADS", "1", 1);
        } else {
            fprintf(stderr, "usage: bench_cpu [--peers=FILE] [--json=FILE] [--reps=N] "
                            "[--threads=N] [--gemm-sweep] [--gemv-sizes] [--cpu-time]\n");
            return 2;
        }
    }
    if (reps < 3)
        reps = 3;
    int threads = baton__par_threads();
    openblas_set_num_threads(threads);
    char *pj = peers ? read_all(peers) : NULL;
    if (peers && !pj) {
        fprintf(stderr, "bench_cpu: cannot read %s\n", peers);
        return 1;
    }
    if (pj && (int)peer_lookup(pj, "threads") != threads)
        fprintf(stderr, "bench_cpu: warning: peers ran with %g threads, baton with %d\n",
                peer_lookup(pj, "threads"), threads);
    if (sizes) { /* alone: the table's rows would only take its time */
        gemv_sizes();
        return 0;
    }
    gemm_row("gemv 1x4096 . 4096x4096 bf16, W [N,K]", "gemv_bf16_nk", BATON_DTYPE_BF16, 1, 1, 4096,
             4096);
    gemm_row("gemv 1x4096 . 4096x4096 bf16, W [K,N]", "gemv_bf16_kn", BATON_DTYPE_BF16, 0, 1, 4096,
             4096);
    gemm_row("gemv 1x4096 . 4096x4096 f16, W [N,K]", "gemv_f16_nk", BATON_DTYPE_F16, 1, 1, 4096,
             4096);
    gemm_row("gemv 1x4096 . 4096x4096 f16, W [K,N]", "gemv_f16_kn", BATON_DTYPE_F16, 0, 1, 4096,
             4096);
    gemm_row("gemv 1x4096 . 4096x4096 f32, W [N,K]", "gemv_f32_nk", BATON_DTYPE_F32, 1, 1, 4096,
             4096);
    gemm_row("gemv 1x4096 . 4096x4096 f32, W [K,N]", "gemv_f32_kn", BATON_DTYPE_F32, 0, 1, 4096,
             4096);
    /* The weight at 4 x the L3 (32 MiB here: a 4096 x 4096 bf16 weight is exactly its size, and
     * which share of it a repeated read finds there depends on the read's pattern), and the
     * arithmetic alone: docs/decisions/cpu-gemm.md. */
    gemm_row("gemv 1x4096 . 4096x16384 bf16, W [N,K] (128 MiB)", "", BATON_DTYPE_BF16, 1, 1, 16384,
             4096);
    gemm_row("gemv 1x4096 . 4096x16384 f16, W [N,K] (128 MiB)", "", BATON_DTYPE_F16, 1, 1, 16384,
             4096);
    gemm_row("gemv 1x4096 . 4096x8192 f32, W [N,K] (128 MiB)", "", BATON_DTYPE_F32, 1, 1, 8192,
             4096);
    if (threads == 1) { /* a figure of one core: the same in every run */
        compute_row("gemv bf16 compute-only (W 768 KiB, in L2)", BATON_DTYPE_BF16);
        compute_row("gemv f16 compute-only (W 768 KiB, in L2)", BATON_DTYPE_F16);
        compute_row("gemv f32 compute-only (W 768 KiB, in L2)", BATON_DTYPE_F32);
    }
    ew_row("softshrink 2048x4096 f32", "softshrink_f32", baton__kcpu_softshrink, BATON_DTYPE_F32,
           2048LL * 4096, 0, 0.5);
    ew_row("softshrink 4096 f32 (per call)", "softshrink_small", baton__kcpu_softshrink,
           BATON_DTYPE_F32, 4096, 0, 0.5);
    ew_row("add 2048x4096 bf16", "add_bf16", baton__kcpu_add, BATON_DTYPE_BF16, 2048LL * 4096, 1,
           0);
    rms_row("rmsnorm 4096x4096 f32", "rmsnorm_f32", 4096, 4096);
    sample_row("sample 128256 f32, top_k 50, top_p 0.9, t 0.8", "sample_topk_f32", BATON_DTYPE_F32,
               0.8, 50, 0.9, 0);
    sample_row("sample 128256 bf16, top_k 50, top_p 0.9, t 0.8", "sample_topk_bf16",
               BATON_DTYPE_BF16, 0.8, 50, 0.9, 0);
    sample_row("sample 128256 f32, top_p 0.9, t 0.8", "sample_topp_f32", BATON_DTYPE_F32, 0.8, 0,
               0.9, 0);
    sample_row("sample 128256 f32 peaked, top_p 0.9, t 0.8", "sample_topp_peaked_f32",
               BATON_DTYPE_F32, 0.8, 0, 0.9, 1);
    sample_row("sample 128256 f32, greedy (top_k 1)", "sample_greedy_f32", BATON_DTYPE_F32, 1.0, 1,
               1.0, 0);

    printf("baton CPU steps: %d threads, %s, OpenBLAS %s%s\n", threads,
           baton__simd_level_name(baton__simd_level_get()), openblas_get_config(),
           clock_id == CLOCK_MONOTONIC ? "" : "; CPU time of the calling thread");
    printf("%-50s %10s %10s %7s %12s %9s\n", "step", "baton us", "torch us", "ratio", "read GB/s",
           "bw share");
    for (int i = 0; i < n_rows; i++) {
        row *r = &rows[i];
        r->peer_us = r->peer_key[0] ? peer_lookup(pj, r->peer_key) : NAN;
        printf("%-50s %10.1f %10.1f %7.2f", r->name, r->us, r->peer_us, r->us / r->peer_us);
        if (r->bytes > 0)
            printf(" %12.1f %8.0f%%", r->bytes / r->read_us / 1e3, 100 * r->read_us / r->us);
        printf("\n");
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "bench_cpu: cannot write %s\n", json);
            return 1;
        }
        time_t now = time(NULL);
        char date[32];
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        fprintf(f,
                "{\"date\": \"%s\", \"device\": \"%s\", \"threads\": %d, \"isa\": \"%s\",\n "
                "\"command\": \"bench_cpu\", \"rows\": [\n",
                date, cpu_model(), threads, baton__simd_level_name(baton__simd_level_get()));
        for (int i = 0; i < n_rows; i++) {
            row *r = &rows[i];
            fprintf(f, "  {\"step\": \"%s\", \"key\": \"%s\", \"baton_us\": %.2f", r->name,
                    r->peer_key, r->us);
            if (isfinite(r->peer_us))
                fprintf(f, ", \"torch_us\": %.2f, \"ratio\": %.3f", r->peer_us, r->us / r->peer_us);
            if (r->bytes > 0)
                fprintf(f,
                        ", \"bytes\": %.0f, \"read_us\": %.2f, \"read_gbs\": %.2f, "
                        "\"bw_share\": %.3f",
                        r->bytes, r->read_us, r->bytes / r->read_us / 1e3, r->read_us / r->us);
            if (r->compute_only)
                fprintf(f, ", \"compute_only\": true");
            fprintf(f, "}%s\n", i + 1 < n_rows ? "," : "");
        }
        fprintf(f, "]}\n");
        fclose(f);
    }
    if (sweep)
        gemm_sweep();
    free(pj);
    return 0;
}
