/* test_decoder.c: the decoder ops (embedding, rope, kv_cache_update, attention, silu_mul, silu,
 * gelu, softmax, cast, sample) through their registered targets: check() and pack() as a plan
 * load runs them, then the kernel of each device, on a case table per op, against float64
 * references computed here on fresh random inputs (BATON_TEST_SEED replays them), with the
 * outputs poisoned first. The same tables run on the CPU (suites decoder_*) and on CUDA (suites
 * gpu_*, which skip without a GPU; CTest runs them as test_decoder_gpu, labelled gpu). Also the
 * load-time refusals (shapes, dtypes, head counts, attributes) and the run-time errors (an id or a
 * position out of range, which must name it and leave the outputs unwritten).
 *
 * Tolerances (relative L2 error against float64, per output dtype): bf16 1e-2, f16 2e-3,
 * f32 2e-5 (5e-5 on CUDA, whose exp and erf are the fast forms), f64 1e-12. Embedding, the cache
 * update and cast are exact. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "core/core.h"
#include "core/dtype.h"
#include "core/simd.h"
#include "core/threads.h"
#include "kernels/cpu/cpu_decoder.h"
#include "kernels/decoder_desc.h"
#include "targets/registry.h"
#include "tests/support.h"
#ifdef BATON_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_decoder.h"
#endif

#define MAXT 6

static const baton_dtype FLOATS[4] = {BATON_DTYPE_BF16, BATON_DTYPE_F16, BATON_DTYPE_F32,
                                      BATON_DTYPE_F64};

static double tol(baton_dtype dt, baton_device_kind kind)
{
    switch (dt) {
    case BATON_DTYPE_BF16: return 1e-2;
    case BATON_DTYPE_F16: return 2e-3;
    case BATON_DTYPE_F32: return kind == BATON_DEVICE_CUDA ? 5e-5 : 2e-5;
    default: return 1e-12;
    }
}

static baton_tensor_desc desc(baton_dtype dt, int rank, const int64_t *shape)
{
    baton_tensor_desc d = {.dtype = dt, .rank = rank};
    for (int i = 0; i < rank; i++)
        d.shape[i] = shape[i];
    return d;
}

#define DESC(dt, ...)                                                                              \
    desc(dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static size_t nbytes(const baton_tensor_desc *d)
{
    return (size_t)baton_tensor_desc_numel(d) * baton_dtype_size(d->dtype);
}

static baton_attr A_INT(const char *n, int64_t v)
{
    return (baton_attr){.name = n, .type = BATON_ATTR_INT, .i = v, .f = (double)v};
}
static baton_attr A_FLT(const char *n, double v)
{
    return (baton_attr){.name = n, .type = BATON_ATTR_FLOAT, .f = v};
}
static baton_attr A_BOOL(const char *n, int v)
{
    return (baton_attr){.name = n, .type = BATON_ATTR_BOOL, .i = v};
}

/* One call of a target: inputs (host data), the declared output, attributes. */
typedef struct call {
    const char *target;
    int n_in;
    baton_tensor_desc in[MAXT];
    void *host[MAXT];
    baton_tensor_desc out;
    baton_attr attrs[8];
    int n_attrs;
    int alias0;  /* the output is written into input 0's buffer (kv_cache_update) */
    int prepare; /* CUDA: the kernel's prepare hook first, as the runtime calls it (its state as
                  * ctx->prepared, freed after the call) */
    int shift_in, shift_out; /* CUDA: input 0 and the output this many bytes (< 16) past the
                              * allocation's start, as a view into a larger buffer may be */
} call;

static baton_registry *registry(void)
{
    static baton_registry *reg;
    if (!reg)
        cr_assert_eq(baton_registry_create(&reg), 0);
    return reg;
}

static baton_sig_args sig_of(const call *c)
{
    return (baton_sig_args){.n_inputs = c->n_in,
                            .inputs = c->in,
                            .n_outputs = 1,
                            .outputs = &c->out,
                            .n_attrs = c->n_attrs,
                            .attrs = c->attrs};
}

/* check() as the validator runs it: 0 and the expected output, or the code and msg. */
static int check_call(const call *c, baton_tensor_desc *expected, char *msg, size_t len)
{
    const baton_target *t = baton_registry_find(registry(), c->target);
    cr_assert(t, "target %s is not registered", c->target);
    baton_sig_args a = sig_of(c);
    msg[0] = 0;
    return t->check(&a, expected, msg, len);
}

/* Runs c on a device, writing the output into out (host, nbytes(&c->out)), poisoned first.
 * Returns the kernel's code; its message in err. */
static int run_call(baton_device_kind kind, const call *c, void *out, char *err, size_t err_len)
{
    char msg[512];
    baton_tensor_desc want;
    int rc = check_call(c, &want, msg, sizeof msg);
    cr_assert_eq(rc, 0, "%s: check() refused a good call: %s", c->target, msg);
    char dw[128], dd[128];
    baton__desc_format(dw, sizeof dw, &want);
    baton__desc_format(dd, sizeof dd, &c->out);
    cr_assert_str_eq(dw, dd, "%s: check() expects %s, the test declares %s", c->target, dw, dd);
    const baton_target *t = baton_registry_find(registry(), c->target);
    baton_sig_args a = sig_of(c);
    char opaque[BATON_OPAQUE_MAX];
    int n = t->pack(&a, opaque, sizeof opaque);
    cr_assert_eq(n, (int)sizeof(baton_decoder_desc), "%s: pack() gave %d", c->target, n);
    const baton_target_impl *impl = baton_target_impl_for(t, kind);
    cr_assert(impl && impl->kernel, "%s has no kernel for this device", c->target);
    baton_exec_ctx ctx = {.device = {.kind = kind},
                          .step_name = "test",
                          .errbuf = err,
                          .errbuf_len = err_len,
                          .sig = &a};
    err[0] = 0;
    const size_t ob = nbytes(&c->out);
    void *bufs[MAXT + 1];
    if (kind == BATON_DEVICE_CPU) {
        for (int i = 0; i < c->n_in; i++)
            bufs[i] = c->host[i];
        if (c->alias0) {
            bufs[c->n_in] = c->host[0];
        } else {
            test_poison(out, ob);
            bufs[c->n_in] = out;
        }
        rc = impl->kernel(&ctx, bufs, opaque, (size_t)n);
        if (c->alias0)
            memcpy(out, c->host[0], ob);
        return rc;
    }
#ifdef BATON_CUDA
    cudaStream_t st;
    cr_assert_eq(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    ctx.stream = st;
    void *base[MAXT + 1];
    for (int i = 0; i < c->n_in; i++) {
        cr_assert_eq(cudaMalloc(&base[i], nbytes(&c->in[i]) + 16), cudaSuccess);
        bufs[i] = (char *)base[i] + (i == 0 ? c->shift_in : 0);
        cr_assert_eq(cudaMemcpy(bufs[i], c->host[i], nbytes(&c->in[i]), cudaMemcpyHostToDevice),
                     cudaSuccess);
    }
    if (c->alias0) {
        bufs[c->n_in] = bufs[0];
    } else {
        cr_assert_eq(cudaMalloc(&base[c->n_in], ob + 16), cudaSuccess);
        bufs[c->n_in] = (char *)base[c->n_in] + c->shift_out;
        cr_assert_eq(cudaMemset(base[c->n_in], 0xff, ob + 16), cudaSuccess);
    }
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    void *state = NULL;
    kernel_prepare_fn prep = c->prepare ? baton__registry_preparer(t, kind) : NULL;
    if (prep) {
        cr_assert_eq(prep(&ctx, bufs, opaque, (size_t)n, &state), 0, "%s: prepare: %s", c->target,
                     err);
        ctx.prepared = state;
    }
    rc = impl->kernel(&ctx, bufs, opaque, (size_t)n);
    cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    free(state);
    if (rc == 0)
        rc = baton__kcuda_decoder_error_take(0, NULL, err, err_len);
    cr_assert_eq(cudaMemcpy(out, bufs[c->n_in], ob, cudaMemcpyDeviceToHost), cudaSuccess);
    if (!c->alias0) { /* nothing written outside the output: the allocation's slack still poison */
        unsigned char slack[32];
        const size_t after = 16 - (size_t)c->shift_out;
        cr_assert_eq(cudaMemcpy(slack, base[c->n_in], (size_t)c->shift_out, cudaMemcpyDeviceToHost),
                     cudaSuccess);
        cr_assert_eq(cudaMemcpy(slack + c->shift_out, (char *)bufs[c->n_in] + ob, after,
                                cudaMemcpyDeviceToHost),
                     cudaSuccess);
        for (int i = 0; i < 16; i++)
            cr_assert_eq(slack[i], 0xff, "%s wrote outside its output (byte %d of the slack)",
                         c->target, i);
    }
    for (int i = 0; i < c->n_in; i++)
        cudaFree(base[i]);
    if (!c->alias0)
        cudaFree(base[c->n_in]);
    cudaStreamDestroy(st);
    return rc;
#else
    cr_skip("this build has no CUDA");
    return -1;
#endif
}

static void skip_without_gpu(void)
{
    if (test_cuda_devices() == 0)
        cr_skip("no CUDA device on this machine: the CUDA decoder kernels need one");
}

static void *rand_buf(test_rng *r, const baton_tensor_desc *d, double scale)
{
    void *p = malloc(nbytes(d) + 16);
    cr_assert(p);
    test_fill_random(r, d->dtype, p, baton_tensor_desc_numel(d), scale);
    return p;
}

/* n indices in [0, limit) of dtype dt (i32 or i64); with `at` >= 0, element at is `bad`. */
static void *index_buf(test_rng *r, baton_dtype dt, int64_t n, int64_t limit)
{
    void *p = malloc((size_t)n * 8 + 8);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = (int64_t)(test_rng_uniform(r) * (double)limit);
        if (dt == BATON_DTYPE_I32)
            ((int32_t *)p)[i] = (int32_t)v;
        else
            ((int64_t *)p)[i] = v;
    }
    return p;
}

static int64_t idx(baton_dtype dt, const void *p, int64_t i)
{
    return dt == BATON_DTYPE_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

static void set_idx(baton_dtype dt, void *p, int64_t i, int64_t v)
{
    if (dt == BATON_DTYPE_I32)
        ((int32_t *)p)[i] = (int32_t)v;
    else
        ((int64_t *)p)[i] = v;
}

static void free_call(call *c)
{
    for (int i = 0; i < c->n_in; i++)
        free(c->host[i]);
}

static void expect_close(const call *c, baton_device_kind kind, const void *out, const double *ref,
                         const char *what)
{
    const int64_t n = baton_tensor_desc_numel(&c->out);
    /* Against the reference rounded to the output's dtype, what an exact kernel writes: a value
     * below the dtype's range (gelu(-8) in f16) is then 0 on both sides, not a relative error
     * of 1. */
    double *rr = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        double tmp[1];
        store_f64(c->out.dtype, tmp, 0, ref[i]);
        rr[i] = load_f64(c->out.dtype, tmp, 0);
    }
    double e = test_rel_err(c->out.dtype, out, rr, n);
    free(rr);
    char dd[128];
    baton__desc_format(dd, sizeof dd, &c->out);
    cr_assert(e <= tol(c->out.dtype, kind), "%s %s (%s): relative error %.3g > %.3g", c->target, dd,
              what, e, tol(c->out.dtype, kind));
}

/* ---- embedding ------------------------------------------------------------------------------ */

/* On CUDA a block a row of the fewest warps that hold it at 16 bytes a thread (rows of 896 and
 * 1000: threads past the row's end; 64 in f32: one warp), a byte a thread where rows are no
 * multiple of 16 bytes (33), chunks of 256 threads past 4 KB (2048 but in bf16 and f16); many
 * rows two a block (9001: the last block holds one). */
static const struct {
    baton_dtype idt;
    int64_t rows, V, D;
} EMB[] = {{BATON_DTYPE_I64, 1, 1000, 64},   {BATON_DTYPE_I32, 7, 50, 33},
           {BATON_DTYPE_I64, 17, 300, 2048}, {BATON_DTYPE_I32, 40, 500, 896},
           {BATON_DTYPE_I64, 9, 100, 1000},  {BATON_DTYPE_I64, 9001, 700, 896}};

static void embedding_table(baton_device_kind kind)
{
    for (size_t k = 0; k < sizeof EMB / sizeof EMB[0]; k++)
        for (int f = 0; f < 4; f++) {
            test_rng r = {test_fresh_seed()};
            call c = {.target = "embedding", .n_in = 2};
            c.in[0] = DESC(EMB[k].idt, 1, EMB[k].rows);
            c.in[1] = DESC(FLOATS[f], EMB[k].V, EMB[k].D);
            c.out = DESC(FLOATS[f], 1, EMB[k].rows, EMB[k].D);
            c.host[0] = index_buf(&r, EMB[k].idt, EMB[k].rows, EMB[k].V);
            c.host[1] = rand_buf(&r, &c.in[1], 1.0);
            size_t ob = nbytes(&c.out), row = (size_t)EMB[k].D * baton_dtype_size(FLOATS[f]);
            char *out = malloc(ob), err[512];
            cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s", err);
            for (int64_t i = 0; i < EMB[k].rows; i++)
                cr_assert(memcmp(out + i * row,
                                 (char *)c.host[1] + idx(EMB[k].idt, c.host[0], i) * row, row) == 0,
                          "embedding row %lld differs from table row", (long long)i);
            free(out);
            free_call(&c);
        }
}

Test(decoder_embedding, gathers_table_rows_exactly)
{
    embedding_table(BATON_DEVICE_CPU);
}
Test(gpu_embedding, gathers_table_rows_exactly)
{
    skip_without_gpu();
    embedding_table(BATON_DEVICE_CUDA);
}

/* An id of 10 in a table of 10 rows at row `at` of `rows` (on CUDA 9001 rows take two a block:
 * `at` odd is a block's second row). */
static void embedding_bad_id_at(baton_device_kind kind, int64_t rows, int64_t at)
{
    test_rng r = {test_fresh_seed()};
    call c = {.target = "embedding", .n_in = 2};
    c.in[0] = DESC(BATON_DTYPE_I64, rows);
    c.in[1] = DESC(BATON_DTYPE_F32, 10, 8);
    c.out = DESC(BATON_DTYPE_F32, rows, 8);
    c.host[0] = index_buf(&r, BATON_DTYPE_I64, rows, 10);
    ((int64_t *)c.host[0])[at] = 10;
    c.host[1] = rand_buf(&r, &c.in[1], 1.0);
    char *out = malloc((size_t)rows * 8 * 4), err[512];
    int rc = run_call(kind, &c, out, err, sizeof err);
    cr_assert_eq(rc, BATON_EKERNEL, "an id of 10 in a table of 10 rows gave %d", rc);
    cr_assert(strstr(err, "10") && strstr(err, "[0, 10)"), "message: %s", err);
    if (kind == BATON_DEVICE_CUDA)
        cr_assert(strstr(err, "step #0"), "the CUDA message names the step: %s", err);
    free(out);
    free_call(&c);
}

static void embedding_bad_id(baton_device_kind kind)
{
    embedding_bad_id_at(kind, 4, 2);
    embedding_bad_id_at(kind, 9001, 8999);
}

Test(decoder_embedding, refuses_an_id_outside_the_table_at_run_time)
{
    embedding_bad_id(BATON_DEVICE_CPU);
}
Test(gpu_embedding, records_an_id_outside_the_table_without_reading_out_of_bounds)
{
    skip_without_gpu();
    embedding_bad_id(BATON_DEVICE_CUDA);
}

/* The first check on a device moves the record's reads to a host copy: errors before and after
 * that are reported, each once, and the clean calls between them report none. */
Test(gpu_embedding, reports_every_error_before_and_after_the_record_moves_to_host_memory)
{
    skip_without_gpu();
    for (int round = 0; round < 3; round++) {
        embedding_bad_id(BATON_DEVICE_CUDA);
        embedding_table(BATON_DEVICE_CUDA);
    }
}

/* ---- rope ----------------------------------------------------------------------------------- */

/* On CUDA every unit (16 bytes of a head's half, or of interleaved pairs) is a thread's: a decode
 * row over several blocks ({1, 32, 64}), blocks that span rows ({7, 5, 96}: 30 units a row in
 * bf16), rows of one unit ({13, 1, 16}), positions far from 0 whose angles the kernel reduces
 * ({4, 8, 64} up to 2^22), a scale with i32 positions ({6, 4, 64}: the decode kernels are one per
 * form, position width and scale or none), a prompt's rows over the decode kernel's blocks
 * ({37, 32, 128}), rows over 64-thread blocks where 256-thread blocks would not fill the SMs
 * ({200, 32, 64}), and the last two (CUDA only) a wave of blocks with units a thread in flight: the
 * loop's second unit ({600, 16, 64}), and several turns of the loop ({4096, 32, 64}). */
static const struct {
    int64_t rows, H, Dh;
    int interleaved;
    double scale;
    baton_dtype pdt;
    int64_t plim; /* positions in [0, plim) */
} ROPE[] = {
    {1, 32, 64, 0, 1.0, BATON_DTYPE_I64, 32768},   {5, 8, 64, 1, 1.0, BATON_DTYPE_I32, 32768},
    {9, 3, 128, 0, 0.7, BATON_DTYPE_I64, 32768},   {3, 2, 6, 1, 1.3, BATON_DTYPE_I64, 32768},
    {2, 4, 2, 0, 1.0, BATON_DTYPE_I32, 32768},     {2, 64, 128, 0, 1.0, BATON_DTYPE_I64, 32768},
    {2, 40, 128, 1, 1.0, BATON_DTYPE_I32, 32768},  {7, 5, 96, 0, 1.0, BATON_DTYPE_I64, 32768},
    {7, 5, 96, 1, 1.0, BATON_DTYPE_I32, 32768},    {13, 1, 16, 0, 1.0, BATON_DTYPE_I64, 32768},
    {6, 4, 64, 1, 0.9, BATON_DTYPE_I32, 32768},    {4, 8, 64, 0, 1.0, BATON_DTYPE_I64, 1 << 22},
    {37, 32, 128, 0, 1.0, BATON_DTYPE_I64, 32768}, {200, 32, 64, 0, 1.0, BATON_DTYPE_I32, 32768},
    {600, 16, 64, 1, 1.0, BATON_DTYPE_I64, 32768}, {4096, 32, 64, 0, 1.0, BATON_DTYPE_I64, 32768}};

static size_t rope_cases(baton_device_kind kind)
{
    return sizeof ROPE / sizeof ROPE[0] - (kind == BATON_DEVICE_CUDA ? 0 : 2);
}

/* Llama's inverse frequencies: 1 / 500000^(2i / Dh), in f32. */
static float *inv_freq(int64_t Dh)
{
    float *f = malloc(sizeof(float) * (size_t)(Dh / 2) + 16);
    for (int64_t i = 0; i < Dh / 2; i++)
        f[i] = (float)(1.0 / pow(500000.0, (double)(2 * i) / (double)Dh));
    return f;
}

static void rope_table(baton_device_kind kind)
{
    for (size_t k = 0; k < rope_cases(kind); k++)
        for (int f = 0; f < 4; f++) {
            test_rng r = {test_fresh_seed()};
            const int64_t rows = ROPE[k].rows, F = ROPE[k].H * ROPE[k].Dh, Dh = ROPE[k].Dh;
            const baton_dtype dt = FLOATS[f];
            call c = {.target = "rope", .n_in = 3, .n_attrs = 3};
            c.in[0] = DESC(dt, 1, rows, F);
            c.in[1] = DESC(ROPE[k].pdt, rows);
            c.in[2] = DESC(BATON_DTYPE_F32, Dh / 2);
            c.out = c.in[0];
            c.attrs[0] = A_INT("head_dim", Dh);
            c.attrs[1] = A_BOOL("interleaved", ROPE[k].interleaved);
            c.attrs[2] = A_FLT("scale", ROPE[k].scale);
            c.host[0] = rand_buf(&r, &c.in[0], 1.0);
            c.host[1] = index_buf(&r, ROPE[k].pdt, rows, ROPE[k].plim);
            c.host[2] = inv_freq(Dh);
            const float *fr = c.host[2];
            double *ref = malloc(sizeof(double) * (size_t)(rows * F));
            for (int64_t t = 0; t < rows; t++) {
                const int64_t p = idx(ROPE[k].pdt, c.host[1], t);
                for (int64_t h = 0; h < F / Dh; h++)
                    for (int64_t i = 0; i < Dh / 2; i++) {
                        /* the angle as HF forms it: an f32 product (f64 for f64 data) */
                        double ang = dt == BATON_DTYPE_F64 ? (double)p * (double)fr[i]
                                                           : (double)((float)p * fr[i]);
                        double cs = cos(ang) * ROPE[k].scale, sn = sin(ang) * ROPE[k].scale;
                        int64_t i1 = ROPE[k].interleaved ? 2 * i : i,
                                i2 = ROPE[k].interleaved ? 2 * i + 1 : i + Dh / 2;
                        int64_t b = t * F + h * Dh;
                        double x1 = load_f64(dt, c.host[0], b + i1),
                               x2 = load_f64(dt, c.host[0], b + i2);
                        ref[b + i1] = x1 * cs - x2 * sn;
                        ref[b + i2] = x2 * cs + x1 * sn;
                    }
            }
            void *out = malloc(nbytes(&c.out));
            char err[512];
            cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s", err);
            expect_close(&c, kind, out, ref, ROPE[k].interleaved ? "interleaved" : "half-split");
            free(out);
            free(ref);
            free_call(&c);
        }
}

Test(decoder_rope, matches_float64_in_both_forms)
{
    rope_table(BATON_DEVICE_CPU);
}
Test(gpu_rope, matches_float64_in_both_forms)
{
    skip_without_gpu();
    rope_table(BATON_DEVICE_CUDA);
}

/* ---- kv_cache_update ------------------------------------------------------------------------ */

static const struct {
    int64_t S, KF, rows;
    baton_dtype pdt;
} KVU[] = {{16, 512, 1, BATON_DTYPE_I64},
           {64, 24, 7, BATON_DTYPE_I32},
           {33, 130, 33, BATON_DTYPE_I64},
           /* past 512 KB: CUDA's grid-stride kernel, not the small one */
           {4096, 512, 2048, BATON_DTYPE_I32}};

static void kv_update_table(baton_device_kind kind)
{
    for (size_t k = 0; k < sizeof KVU / sizeof KVU[0]; k++)
        for (int f = 0; f < 4; f++) {
            test_rng r = {test_fresh_seed()};
            const baton_dtype dt = FLOATS[f];
            call c = {.target = "kv_cache_update", .n_in = 3, .alias0 = 1};
            c.in[0] = DESC(dt, KVU[k].S, KVU[k].KF);
            c.in[1] = DESC(dt, 1, KVU[k].rows, KVU[k].KF);
            c.in[2] = DESC(KVU[k].pdt, KVU[k].rows);
            c.out = c.in[0];
            c.host[0] = rand_buf(&r, &c.in[0], 1.0);
            c.host[1] = rand_buf(&r, &c.in[1], 1.0);
            /* distinct positions: a permutation's prefix (index_copy_ with repeats is undefined) */
            c.host[2] = malloc(8 * (size_t)KVU[k].rows);
            int64_t *perm = malloc(sizeof(int64_t) * (size_t)KVU[k].S);
            for (int64_t i = 0; i < KVU[k].S; i++)
                perm[i] = i;
            for (int64_t i = KVU[k].S - 1; i > 0; i--) {
                int64_t j = (int64_t)(test_rng_uniform(&r) * (double)(i + 1)), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            for (int64_t i = 0; i < KVU[k].rows; i++)
                set_idx(KVU[k].pdt, c.host[2], i, perm[i]);
            const size_t row = (size_t)KVU[k].KF * baton_dtype_size(dt), cb = nbytes(&c.in[0]);
            char *want = malloc(cb), *out = malloc(cb), err[512];
            memcpy(want, c.host[0], cb);
            for (int64_t i = 0; i < KVU[k].rows; i++)
                memcpy(want + perm[i] * row, (char *)c.host[1] + i * row, row);
            cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s", err);
            cr_assert(memcmp(out, want, cb) == 0, "kv_cache_update: the cache differs (case %zu)",
                      k);
            free(perm);
            free(want);
            free(out);
            free_call(&c);
        }
}

Test(decoder_kv_cache_update, writes_rows_at_positions_in_place)
{
    kv_update_table(BATON_DEVICE_CPU);
}
Test(gpu_kv_cache_update, writes_rows_at_positions_in_place)
{
    skip_without_gpu();
    kv_update_table(BATON_DEVICE_CUDA);
}

static void kv_update_bad_pos(baton_device_kind kind)
{
    test_rng r = {test_fresh_seed()};
    call c = {.target = "kv_cache_update", .n_in = 3, .alias0 = 1};
    c.in[0] = DESC(BATON_DTYPE_BF16, 8, 16);
    c.in[1] = DESC(BATON_DTYPE_BF16, 2, 16);
    c.in[2] = DESC(BATON_DTYPE_I64, 2);
    c.out = c.in[0];
    c.host[0] = rand_buf(&r, &c.in[0], 1.0);
    c.host[1] = rand_buf(&r, &c.in[1], 1.0);
    c.host[2] = malloc(16);
    ((int64_t *)c.host[2])[0] = 3;
    ((int64_t *)c.host[2])[1] = 8;
    char before[8 * 16 * 2], out[8 * 16 * 2], err[512];
    memcpy(before, c.host[0], sizeof before);
    int rc = run_call(kind, &c, out, err, sizeof err);
    cr_assert_eq(rc, BATON_EKERNEL, "position 8 in a cache of 8 rows gave %d", rc);
    cr_assert(strstr(err, "positions[1] = 8") && strstr(err, "[0, 8)"), "message: %s", err);
    if (kind == BATON_DEVICE_CPU)
        cr_assert(memcmp(before, out, sizeof out) == 0, "the CPU wrote the cache before failing");
    free_call(&c);
}

Test(decoder_kv_cache_update, refuses_a_position_outside_the_cache_and_leaves_it)
{
    kv_update_bad_pos(BATON_DEVICE_CPU);
}
Test(gpu_kv_cache_update, records_a_position_outside_the_cache)
{
    skip_without_gpu();
    kv_update_bad_pos(BATON_DEVICE_CUDA);
}

/* ---- attention ------------------------------------------------------------------------------ */

static const struct {
    int64_t T, S, H, Hkv, Dh;
    int prefill; /* positions p0 .. p0+T-1 (causal prefill); else random positions */
    baton_dtype pdt;
} ATT[] = {
    {1, 64, 32, 8, 64, 0, BATON_DTYPE_I64},   /* Llama-3.2-1B decode, short cache */
    {1, 600, 4, 1, 64, 0, BATON_DTYPE_I64},   /* decode, long enough for many splits */
    {1, 2100, 2, 2, 64, 0, BATON_DTYPE_I32},  /* decode, no grouping */
    {13, 40, 4, 2, 16, 1, BATON_DTYPE_I64},   /* causal prefill after a prefix */
    {70, 70, 8, 2, 64, 1, BATON_DTYPE_I64},   /* prefill from position 0 */
    {5, 32, 6, 3, 128, 0, BATON_DTYPE_I32},   /* head_dim 128 */
    {3, 9, 3, 1, 5, 0, BATON_DTYPE_I64},      /* odd head_dim */
    {40, 100, 4, 1, 128, 1, BATON_DTYPE_I64}, /* prefill, head_dim 128 (CUDA: tensor cores) */
    {20, 50, 4, 2, 64, 0, BATON_DTYPE_I32},   /* 20 rows at random positions */
};

/* An attention call's tensors and attributes (q [rows, H * Dh], K and V caches [S, Hkv * Dh],
 * positions [rows] in pdt), without its host buffers. */
static call attention_call(baton_dtype dt, baton_dtype pdt, int64_t rows, int64_t S, int64_t H,
                           int64_t Hkv, int64_t Dh)
{
    call c = {.target = "attention", .n_in = 4, .n_attrs = 3};
    c.in[0] = DESC(dt, rows, H * Dh);
    c.in[1] = DESC(dt, S, Hkv * Dh);
    c.in[2] = DESC(dt, S, Hkv * Dh);
    c.in[3] = DESC(pdt, rows);
    c.out = c.in[0];
    c.attrs[0] = A_INT("head_dim", Dh);
    c.attrs[1] = A_INT("n_heads", H);
    c.attrs[2] = A_INT("n_kv_heads", Hkv);
    return c;
}

static void attention_table(baton_device_kind kind)
{
    for (size_t k = 0; k < sizeof ATT / sizeof ATT[0]; k++)
        for (int f = 0; f < 4; f++) {
            test_rng r = {test_fresh_seed()};
            const baton_dtype dt = FLOATS[f];
            const int64_t T = ATT[k].T, S = ATT[k].S, H = ATT[k].H, Hkv = ATT[k].Hkv,
                          Dh = ATT[k].Dh, F = H * Dh, KF = Hkv * Dh;
            call c = {.target = "attention", .n_in = 4, .n_attrs = 3};
            c.in[0] = DESC(dt, 1, T, F);
            c.in[1] = DESC(dt, S, KF);
            c.in[2] = DESC(dt, S, KF);
            c.in[3] = DESC(ATT[k].pdt, T);
            c.out = c.in[0];
            c.attrs[0] = A_INT("head_dim", Dh);
            c.attrs[1] = A_INT("n_heads", H);
            c.attrs[2] = A_INT("n_kv_heads", Hkv);
            c.host[0] = rand_buf(&r, &c.in[0], 1.0);
            c.host[1] = rand_buf(&r, &c.in[1], 1.0);
            c.host[2] = rand_buf(&r, &c.in[2], 1.0);
            c.host[3] = index_buf(&r, ATT[k].pdt, T, S);
            if (ATT[k].prefill)
                for (int64_t t = 0; t < T; t++)
                    set_idx(ATT[k].pdt, c.host[3], t, S - T + t);
            else if (k == 0)
                set_idx(ATT[k].pdt, c.host[3], 0, S - 1);
            const double scale = 1.0 / sqrt((double)Dh);
            double *ref = malloc(sizeof(double) * (size_t)(T * F)),
                   *sc = malloc(sizeof(double) * (size_t)S);
            for (int64_t t = 0; t < T; t++) {
                const int64_t last = idx(ATT[k].pdt, c.host[3], t);
                for (int64_t h = 0; h < H; h++) {
                    const int64_t kvh = h / (H / Hkv);
                    double mx = -INFINITY, sum = 0;
                    for (int64_t j = 0; j <= last; j++) {
                        double s = 0;
                        for (int64_t d = 0; d < Dh; d++)
                            s += load_f64(dt, c.host[0], t * F + h * Dh + d) *
                                 load_f64(dt, c.host[1], j * KF + kvh * Dh + d);
                        sc[j] = s * scale;
                        mx = fmax(mx, sc[j]);
                    }
                    for (int64_t j = 0; j <= last; j++)
                        sum += (sc[j] = exp(sc[j] - mx));
                    for (int64_t d = 0; d < Dh; d++) {
                        double o = 0;
                        for (int64_t j = 0; j <= last; j++)
                            o += sc[j] * load_f64(dt, c.host[2], j * KF + kvh * Dh + d);
                        ref[t * F + h * Dh + d] = o / sum;
                    }
                }
            }
            void *out = malloc(nbytes(&c.out));
            char err[512];
            cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s", err);
            char what[64];
            snprintf(what, sizeof what, "case %zu", k);
            expect_close(&c, kind, out, ref, what);
            free(out);
            free(ref);
            free(sc);
            free_call(&c);
        }
}

Test(decoder_attention, matches_float64_for_gqa_decode_and_causal_prefill, .timeout = 600)
{
    attention_table(BATON_DEVICE_CPU);
}
Test(gpu_attention, matches_float64_for_gqa_decode_and_causal_prefill, .timeout = 600)
{
    skip_without_gpu();
    attention_table(BATON_DEVICE_CUDA);
}

/* The CPU's attention splits a long context's (row, head block) work over the CPU pool: the same
 * bits with one thread, all of them, and at every vector level's own order run to run. */
Test(decoder_attention, gives_the_same_bits_with_threads_on_and_off)
{
    test_rng r = {test_fresh_seed()};
    call c = attention_call(BATON_DTYPE_BF16, BATON_DTYPE_I64, 3, 3000, 16, 4, 64);
    for (int i = 0; i < 3; i++)
        c.host[i] = rand_buf(&r, &c.in[i], 1.0);
    c.host[3] = malloc(24);
    ((int64_t *)c.host[3])[0] = 2999;
    ((int64_t *)c.host[3])[1] = 1500;
    ((int64_t *)c.host[3])[2] = 7;
    static char a[3 * 2048], b[3 * 2048];
    char err[512];
    const par_ctx one = {.max_threads = 1};
    const par_ctx *prev = baton__par_bind(&one);
    cr_assert_eq(run_call(BATON_DEVICE_CPU, &c, a, err, sizeof err), 0, "%s", err);
    baton__par_bind(NULL);
    for (int rep = 0; rep < 3; rep++) {
        cr_assert_eq(run_call(BATON_DEVICE_CPU, &c, b, err, sizeof err), 0, "%s", err);
        cr_assert(memcmp(a, b, sizeof a) == 0, "threads on gave other bits (run %d)", rep);
    }
    baton__par_bind(prev);
    free_call(&c);
}

#ifdef BATON_CUDA
/* Bitwise stability: the split-KV decode and its combine add in a fixed order. */
Test(gpu_attention, gives_the_same_bits_run_to_run)
{
    skip_without_gpu();
    test_rng r = {test_fresh_seed()};
    call c = attention_call(BATON_DTYPE_BF16, BATON_DTYPE_I64, 1, 5000, 32, 8, 64);
    for (int i = 0; i < 3; i++)
        c.host[i] = rand_buf(&r, &c.in[i], 1.0);
    c.host[3] = malloc(8);
    ((int64_t *)c.host[3])[0] = 4999;
    char a[4096], b[4096], err[512];
    cr_assert_eq(run_call(BATON_DEVICE_CUDA, &c, a, err, sizeof err), 0, "%s", err);
    for (int rep = 0; rep < 5; rep++) {
        cr_assert_eq(run_call(BATON_DEVICE_CUDA, &c, b, err, sizeof err), 0, "%s", err);
        cr_assert(memcmp(a, b, sizeof a) == 0, "run %d gave other bits", rep);
    }
    free_call(&c);
}
#endif

static void attention_bad_pos(baton_device_kind kind)
{
    test_rng r = {test_fresh_seed()};
    call c = attention_call(BATON_DTYPE_F32, BATON_DTYPE_I32, 2, 4, 1, 1, 8);
    for (int i = 0; i < 3; i++)
        c.host[i] = rand_buf(&r, &c.in[i], 1.0);
    c.host[3] = malloc(8);
    ((int32_t *)c.host[3])[0] = 1;
    ((int32_t *)c.host[3])[1] = -1;
    char out[64], err[512];
    int rc = run_call(kind, &c, out, err, sizeof err);
    cr_assert_eq(rc, BATON_EKERNEL, "position -1 gave %d", rc);
    cr_assert(strstr(err, "positions[1] = -1") && strstr(err, "[0, 4)"), "message: %s", err);
    free_call(&c);
}

Test(decoder_attention, refuses_a_position_outside_the_cache)
{
    attention_bad_pos(BATON_DEVICE_CPU);
}
Test(gpu_attention, records_a_position_outside_the_cache)
{
    skip_without_gpu();
    attention_bad_pos(BATON_DEVICE_CUDA);
}

/* ---- decode attention: the cases of the CUDA decode kernels ---------------------------------
 * Decode rows (1 to 4) against caches of 1 to 40000 rows, at groups of 1 to 32 query heads per KV
 * head and head_dim 64, 128 and 256 (bf16 and f16 take the tensor-core kernel, f32 the CUDA-core
 * one), with the positions at the cache's end, in the middle or mixed: clusters of 1 to 16
 * blocks, blocks and warps with no key (positions 0 to 3 in a long cache), the last partial tile
 * of 16 keys, the (row, head) pairs of one MMA spanning rows and a row's heads spanning two MMAs
 * (G = 5, 16, 32), caches up to 32768 rows whose keys end mid-tile or leave most blocks empty. On
 * CUDA each call is prepared first, as the runtime prepares it. */

enum { POS_END, POS_MID, POS_MIX, POS_LOW };

static const struct {
    int64_t rows, S, H, Hkv, Dh;
    int pos;
    baton_dtype pdt;
} DEC[] = {
    {1, 1, 8, 2, 64, POS_END, BATON_DTYPE_I64},     /* one key */
    {2, 2, 4, 4, 64, POS_END, BATON_DTYPE_I32},     /* G = 1 */
    {1, 31, 32, 8, 64, POS_END, BATON_DTYPE_I64},   /* under two tiles */
    {3, 32, 8, 1, 128, POS_MIX, BATON_DTYPE_I64},   /* G = 8, 24 pairs: two MMAs */
    {4, 33, 32, 8, 64, POS_MIX, BATON_DTYPE_I32},   /* 16 pairs, one key past two tiles */
    {4, 1000, 32, 8, 64, POS_MID, BATON_DTYPE_I64}, /* Llama-3.2-1B, four rows */
    {2, 4097, 8, 1, 64, POS_MIX, BATON_DTYPE_I64},  /* G = 8 */
    {1, 4097, 16, 4, 256, POS_END, BATON_DTYPE_I64},
    {3, 1000, 8, 2, 256, POS_MIX, BATON_DTYPE_I32},
    {4, 77, 10, 2, 64, POS_MIX, BATON_DTYPE_I64},   /* G = 5: row 3's heads in two MMAs */
    {2, 300, 32, 2, 64, POS_MIX, BATON_DTYPE_I64},  /* G = 16: a row per MMA */
    {1, 500, 32, 1, 128, POS_MID, BATON_DTYPE_I64}, /* G = 32: a row in two MMAs */
    {1, 40000, 32, 8, 64, POS_END, BATON_DTYPE_I64},
    {2, 40000, 4, 4, 128, POS_MIX, BATON_DTYPE_I32},
    {4, 4097, 32, 8, 64, POS_LOW, BATON_DTYPE_I64},  /* positions 0..3: blocks with no key */
    {1, 32768, 32, 8, 64, POS_END, BATON_DTYPE_I64}, /* Llama-3.2-1B at 32K */
    {1, 9000, 32, 8, 64, POS_END, BATON_DTYPE_I32},  /* 562.5 tiles: a partial last tile */
    {1, 16385, 32, 8, 64, POS_MID, BATON_DTYPE_I64}, /* the later half of the blocks empty */
    {2, 20000, 32, 8, 64, POS_LOW, BATON_DTYPE_I64}, /* 1 and 2 keys: all but block 0 empty */
    {3, 12345, 16, 2, 64, POS_MIX, BATON_DTYPE_I64}, /* G = 8, 24 pairs: two chunks */
    {1, 8192, 4, 4, 128, POS_MID, BATON_DTYPE_I32},  /* G = 1, head_dim 128 */
    {2, 10000, 16, 4, 256, POS_MIX, BATON_DTYPE_I64},
    {1, 8200, 64, 2, 64, POS_END, BATON_DTYPE_I64}, /* G = 32: a row in two chunks */
};

/* The float64 attention of q's rows over the caches at positions pos (each clamped to [0, S)). */
static void attention_ref(baton_dtype dt, const call *c, int64_t rows, int64_t S, int64_t H,
                          int64_t Hkv, int64_t Dh, double *ref)
{
    const int64_t F = H * Dh, KF = Hkv * Dh, G = H / Hkv;
    const double scale = 1.0 / sqrt((double)Dh);
    /* a KV head's K and V as float64 once (S x Dh each), not an element load per use */
    double *kd = malloc(sizeof(double) * (size_t)(S * Dh)),
           *vd = malloc(sizeof(double) * (size_t)(S * Dh)),
           *sc = malloc(sizeof(double) * (size_t)S), *qd = malloc(sizeof(double) * (size_t)Dh);
    cr_assert(kd && vd && sc && qd);
    for (int64_t kvh = 0; kvh < Hkv; kvh++) {
        for (int64_t j = 0; j < S; j++)
            for (int64_t d = 0; d < Dh; d++) {
                kd[j * Dh + d] = load_f64(dt, c->host[1], j * KF + kvh * Dh + d);
                vd[j * Dh + d] = load_f64(dt, c->host[2], j * KF + kvh * Dh + d);
            }
        for (int64_t t = 0; t < rows; t++) {
            int64_t last = idx(c->in[3].dtype, c->host[3], t);
            last = last < 0 ? 0 : last >= S ? S - 1 : last;
            for (int64_t h = kvh * G; h < (kvh + 1) * G; h++) {
                double *o = ref + t * F + h * Dh;
                for (int64_t d = 0; d < Dh; d++)
                    qd[d] = load_f64(dt, c->host[0], t * F + h * Dh + d);
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= last; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < Dh; d++)
                        s += qd[d] * kd[j * Dh + d];
                    sc[j] = s * scale;
                    mx = fmax(mx, sc[j]);
                }
                for (int64_t j = 0; j <= last; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int64_t d = 0; d < Dh; d++)
                    o[d] = 0;
                for (int64_t j = 0; j <= last; j++)
                    for (int64_t d = 0; d < Dh; d++)
                        o[d] += sc[j] * vd[j * Dh + d];
                for (int64_t d = 0; d < Dh; d++)
                    o[d] /= sum;
            }
        }
    }
    free(kd);
    free(vd);
    free(sc);
    free(qd);
}

/* A decode call of case k in dtype dt on fresh random inputs. */
static call decode_call(test_rng *r, size_t k, baton_dtype dt)
{
    const int64_t rows = DEC[k].rows, S = DEC[k].S;
    call c = attention_call(dt, DEC[k].pdt, rows, S, DEC[k].H, DEC[k].Hkv, DEC[k].Dh);
    c.prepare = 1;
    for (int i = 0; i < 3; i++)
        c.host[i] = rand_buf(r, &c.in[i], 1.0);
    c.host[3] = index_buf(r, DEC[k].pdt, rows, S);
    for (int64_t t = 0; t < rows; t++)
        if (DEC[k].pos == POS_END || (DEC[k].pos == POS_MIX && t == 0))
            set_idx(DEC[k].pdt, c.host[3], t, S - 1);
        else if (DEC[k].pos == POS_MID && t == 0)
            set_idx(DEC[k].pdt, c.host[3], t, S / 2);
        else if (DEC[k].pos == POS_LOW)
            set_idx(DEC[k].pdt, c.host[3], t, t);
    return c;
}

static void decode_table(baton_device_kind kind)
{
    for (size_t k = 0; k < sizeof DEC / sizeof DEC[0]; k++)
        for (int f = 0; f < 3; f++) {
            test_rng r = {test_fresh_seed()};
            call c = decode_call(&r, k, FLOATS[f]);
            const int64_t n = baton_tensor_desc_numel(&c.out);
            double *ref = malloc(sizeof(double) * (size_t)n);
            attention_ref(FLOATS[f], &c, DEC[k].rows, DEC[k].S, DEC[k].H, DEC[k].Hkv, DEC[k].Dh,
                          ref);
            void *out = malloc(nbytes(&c.out));
            char err[512];
            cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s", err);
            char what[96];
            snprintf(what, sizeof what, "decode case %zu: %lld rows, S %lld, G %lld, head_dim %lld",
                     k, (long long)DEC[k].rows, (long long)DEC[k].S,
                     (long long)(DEC[k].H / DEC[k].Hkv), (long long)DEC[k].Dh);
            expect_close(&c, kind, out, ref, what);
            free(out);
            free(ref);
            free_call(&c);
        }
}

Test(decoder_attention, matches_float64_for_decode_rows_over_short_and_long_caches, .timeout = 600)
{
    decode_table(BATON_DEVICE_CPU);
}
Test(gpu_attention, matches_float64_for_decode_rows_over_short_and_long_caches, .timeout = 600)
{
    skip_without_gpu();
    decode_table(BATON_DEVICE_CUDA);
}

#ifdef BATON_CUDA
/* Every decode kernel adds in a fixed order (tiles, warps, then the cluster's blocks by rank): the
 * same bits on every run, for each dtype and head_dim of the table's long cases. */
Test(gpu_attention, gives_the_same_decode_bits_run_to_run_for_each_kernel)
{
    skip_without_gpu();
    static const size_t cases[] = {5, 6, 7, 13, 15, 17, 19, 21};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int f = 0; f < 3; f++) {
            test_rng r = {test_fresh_seed()};
            call c = decode_call(&r, cases[i], FLOATS[f]);
            const size_t ob = nbytes(&c.out);
            char *a = malloc(ob), *b = malloc(ob), err[512];
            cr_assert_eq(run_call(BATON_DEVICE_CUDA, &c, a, err, sizeof err), 0, "%s", err);
            for (int rep = 0; rep < 3; rep++) {
                cr_assert_eq(run_call(BATON_DEVICE_CUDA, &c, b, err, sizeof err), 0, "%s", err);
                cr_assert(memcmp(a, b, ob) == 0, "decode case %zu (%s): run %d gave other bits",
                          cases[i], baton_dtype_name(FLOATS[f]), rep);
            }
            free(a);
            free(b);
            free_call(&c);
        }
}

/* Decode attention of a long cache inside a CUDA graph, as a decode loop replays it: the call
 * prepared and captured once, then replayed with the positions changed between replays (the last
 * key from the cache's last row down to its first and back, so that from all of the blocks to one
 * hold keys), each position set replayed three times: every replay is the float64 attention of
 * its positions, with the bits of the same call made outside the graph (the outputs are poisoned
 * before each). */
Test(gpu_attention, decode_in_a_graph_follows_the_positions_of_each_replay, .timeout = 600)
{
    skip_without_gpu();
    static const struct {
        int64_t rows, S, H, Hkv, Dh;
        baton_dtype dt, pdt;
    } SH[] = {{1, 32768, 32, 8, 64, BATON_DTYPE_BF16, BATON_DTYPE_I64},
              {2, 12000, 16, 2, 128, BATON_DTYPE_F16, BATON_DTYPE_I32}};
    for (size_t k = 0; k < sizeof SH / sizeof SH[0]; k++) {
        const int64_t rows = SH[k].rows, S = SH[k].S, H = SH[k].H, Hkv = SH[k].Hkv, Dh = SH[k].Dh;
        const baton_dtype dt = SH[k].dt, pdt = SH[k].pdt;
        const int64_t LAST[] = {S - 1, 0, 4999, S / 2 + 3, 16, 15, 1000, S - 2, S - 1};
        test_rng r = {test_fresh_seed()};
        call c = attention_call(dt, pdt, rows, S, H, Hkv, Dh);
        for (int i = 0; i < 3; i++)
            c.host[i] = rand_buf(&r, &c.in[i], 1.0);
        c.host[3] = index_buf(&r, pdt, rows, S);
        const baton_target *t = baton_registry_find(registry(), "attention");
        baton_sig_args a = sig_of(&c);
        char opaque[BATON_OPAQUE_MAX], err[512] = "";
        const int n = t->pack(&a, opaque, sizeof opaque);
        const baton_target_impl *impl = baton_target_impl_for(t, BATON_DEVICE_CUDA);
        kernel_prepare_fn prep = baton__registry_preparer(t, BATON_DEVICE_CUDA);
        cr_assert(impl && impl->kernel && prep);
        const size_t ob = nbytes(&c.out), pb = nbytes(&c.in[3]);
        void *bufs[5];
        for (int i = 0; i < 4; i++) {
            cr_assert_eq(cudaMalloc(&bufs[i], nbytes(&c.in[i]) + 16), cudaSuccess);
            cr_assert_eq(cudaMemcpy(bufs[i], c.host[i], nbytes(&c.in[i]), cudaMemcpyHostToDevice),
                         cudaSuccess);
        }
        cr_assert_eq(cudaMalloc(&bufs[4], ob + 16), cudaSuccess);
        cudaStream_t st;
        cr_assert_eq(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
        baton_exec_ctx ctx = {.device = {.kind = BATON_DEVICE_CUDA},
                              .stream = st,
                              .step_name = "test",
                              .errbuf = err,
                              .errbuf_len = sizeof err,
                              .sig = &a};
        void *state = NULL;
        cr_assert_eq(prep(&ctx, bufs, opaque, (size_t)n, &state), 0, "prepare: %s", err);
        ctx.prepared = state;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        cr_assert_eq(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        ctx.capturing = 1;
        const int rc = impl->kernel(&ctx, bufs, opaque, (size_t)n);
        ctx.capturing = 0;
        cr_assert_eq(cudaStreamEndCapture(st, &g), cudaSuccess);
        cr_assert_eq(rc, 0, "capture: %s", err);
        cr_assert_eq(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
        char *out = malloc(ob), *again = malloc(ob);
        double *ref = malloc(sizeof(double) * (size_t)baton_tensor_desc_numel(&c.out));
        for (size_t li = 0; li < sizeof LAST / sizeof LAST[0]; li++) {
            for (int64_t row = 0; row < rows; row++) /* row 1 a few keys short of row 0 */
                set_idx(pdt, c.host[3], row, LAST[li] - 3 * row < 0 ? 0 : LAST[li] - 3 * row);
            cr_assert_eq(cudaMemcpy(bufs[3], c.host[3], pb, cudaMemcpyHostToDevice), cudaSuccess);
            attention_ref(dt, &c, rows, S, H, Hkv, Dh, ref);
            char what[128];
            snprintf(what, sizeof what, "graph replay, %s, head_dim %lld, S %lld, last key %lld",
                     baton_dtype_name(dt), (long long)Dh, (long long)S, (long long)LAST[li]);
            cr_assert_eq(cudaMemset(bufs[4], 0xff, ob), cudaSuccess);
            cr_assert_eq(impl->kernel(&ctx, bufs, opaque, (size_t)n), 0, "%s", err);
            cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
            cr_assert_eq(cudaMemcpy(again, bufs[4], ob, cudaMemcpyDeviceToHost), cudaSuccess);
            for (int rep = 0; rep < 3; rep++) {
                cr_assert_eq(cudaMemset(bufs[4], 0xff, ob), cudaSuccess);
                cr_assert_eq(cudaGraphLaunch(ge, st), cudaSuccess);
                cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
                cr_assert_eq(cudaMemcpy(out, bufs[4], ob, cudaMemcpyDeviceToHost), cudaSuccess);
                cr_assert(memcmp(out, again, ob) == 0, "%s, replay %d: other bits than a call",
                          what, rep);
            }
            expect_close(&c, BATON_DEVICE_CUDA, out, ref, what);
            cr_assert_eq(baton__kcuda_decoder_error_take(0, NULL, err, sizeof err), 0, "%s", err);
        }
        cr_assert_eq(cudaGetLastError(), cudaSuccess);
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
        free(state);
        cudaStreamDestroy(st);
        for (int i = 0; i < 5; i++)
            cudaFree(bufs[i]);
        free(out);
        free(again);
        free(ref);
        free_call(&c);
    }
}

/* A decode position outside the cache is clamped (to the last row, or to 0 below) and recorded:
 * the call reports it, and every output is the attention at the clamped position. */
Test(gpu_attention, clamps_and_records_a_decode_position_outside_the_cache)
{
    skip_without_gpu();
    static const struct {
        size_t k;
        int64_t bad_row, bad;
    } CASES[] = {{4, 2, 33 + 9}, {6, 1, -5}, {9, 3, 77}};
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        for (int f = 0; f < 2; f++) {
            test_rng r = {test_fresh_seed()};
            const size_t k = CASES[i].k;
            call c = decode_call(&r, k, FLOATS[f]);
            set_idx(DEC[k].pdt, c.host[3], CASES[i].bad_row, CASES[i].bad);
            const int64_t n = baton_tensor_desc_numel(&c.out);
            double *ref = malloc(sizeof(double) * (size_t)n);
            attention_ref(FLOATS[f], &c, DEC[k].rows, DEC[k].S, DEC[k].H, DEC[k].Hkv, DEC[k].Dh,
                          ref);
            void *out = malloc(nbytes(&c.out));
            char err[512], want[64], lim[64];
            const int rc = run_call(BATON_DEVICE_CUDA, &c, out, err, sizeof err);
            cr_assert_eq(rc, BATON_EKERNEL, "position %lld gave %d", (long long)CASES[i].bad, rc);
            snprintf(want, sizeof want, "positions[%lld] = %lld", (long long)CASES[i].bad_row,
                     (long long)CASES[i].bad);
            snprintf(lim, sizeof lim, "[0, %lld)", (long long)DEC[k].S);
            cr_assert(strstr(err, want) && strstr(err, lim), "message: %s (want %s, %s)", err, want,
                      lim);
            expect_close(&c, BATON_DEVICE_CUDA, out, ref, "a clamped position");
            free(out);
            free(ref);
            free_call(&c);
        }
}
#endif

#ifdef BATON_CUDA
/* One call of target on device buffers on stream st, as the runtime makes it (pdl: a
 * programmatic dependent launch after the kernel before it on st). */
static void run_on_stream(const char *target, int n_in, const baton_tensor_desc *in,
                          const baton_tensor_desc *out, const baton_attr *attrs, int n_attrs,
                          void **bufs, cudaStream_t st, int pdl)
{
    const baton_target *t = baton_registry_find(registry(), target);
    cr_assert(t, "target %s is not registered", target);
    baton_sig_args a = {.n_inputs = n_in,
                        .inputs = in,
                        .n_outputs = 1,
                        .outputs = out,
                        .n_attrs = n_attrs,
                        .attrs = attrs};
    char msg[512] = "";
    baton_tensor_desc want;
    cr_assert_eq(t->check(&a, &want, msg, sizeof msg), 0, "%s: %s", target, msg);
    char opaque[BATON_OPAQUE_MAX];
    const int n = t->pack(&a, opaque, sizeof opaque);
    cr_assert(n >= 0, "%s: pack() gave %d", target, n);
    const baton_target_impl *impl = baton_target_impl_for(t, BATON_DEVICE_CUDA);
    cr_assert(impl && impl->kernel && impl->supports_pdl, "%s: no CUDA kernel taking PDL", target);
    baton_exec_ctx ctx = {.device = {.kind = BATON_DEVICE_CUDA},
                          .stream = st,
                          .pdl = pdl,
                          .step_name = target,
                          .errbuf = msg,
                          .errbuf_len = sizeof msg,
                          .sig = &a};
    cr_assert_eq(impl->kernel(&ctx, bufs, opaque, (size_t)n), 0, "%s: %s", target, msg);
}

/* Decode attention launched with PDL right after kernels that write what it reads, as a decode
 * step runs it: kv_cache_update writes the new K and V rows at position L - 1, then a copy writes
 * L - 1 over the positions, which held `old` (so the positions attention reads before its wait,
 * to ask its first tiles into L2 and start its ring, are stale or fresh as the race goes). The
 * result must be the float64 attention of the updated caches over L keys, and the bits of the same
 * call without PDL. L = 1, 15, 16, 17, 1023 and the whole cache; old 0, L - 2 and the cache's
 * last row. */
Test(gpu_attention, matches_float64_and_its_own_bits_after_a_pdl_predecessor, .timeout = 600)
{
    skip_without_gpu();
    static const struct {
        int64_t H, Hkv, Dh, S;
    } SH[] = {{32, 8, 64, 2048}, {8, 2, 128, 1100}};
    const int64_t LEN[] = {1, 15, 16, 17, 1023, -1}; /* -1: S */
    for (size_t k = 0; k < sizeof SH / sizeof SH[0]; k++)
        for (int f = 0; f < 2; f++)
            for (size_t li = 0; li < sizeof LEN / sizeof LEN[0]; li++)
                for (int oi = 0; oi < 3; oi++) {
                    const baton_dtype dt = FLOATS[f];
                    const int64_t H = SH[k].H, Hkv = SH[k].Hkv, Dh = SH[k].Dh, S = SH[k].S;
                    const int64_t L = LEN[li] < 0 ? S : LEN[li], KF = Hkv * Dh;
                    const int64_t old = oi == 0 ? 0 : oi == 1 ? (L >= 2 ? L - 2 : 0) : S - 1;
                    test_rng r = {test_fresh_seed()};
                    call c = attention_call(dt, BATON_DTYPE_I64, 1, S, H, Hkv, Dh);
                    for (int i = 0; i < 3; i++)
                        c.host[i] = rand_buf(&r, &c.in[i], 1.0);
                    c.host[3] = malloc(8);
                    ((int64_t *)c.host[3])[0] = L - 1;
                    const baton_tensor_desc rowd = DESC(dt, 1, KF), posd = c.in[3];
                    void *krow = rand_buf(&r, &rowd, 1.0), *vrow = rand_buf(&r, &rowd, 1.0);
                    const size_t esz = baton_dtype_size(dt), rb = (size_t)KF * esz,
                                 cb = nbytes(&c.in[1]), ob = nbytes(&c.out);
                    /* the device's caches before the update; the host's after it */
                    void *d_q, *d_k, *d_v, *d_kr, *d_vr, *d_pos, *d_new, *d_o;
                    cr_assert_eq(cudaMalloc(&d_q, ob), cudaSuccess);
                    cr_assert_eq(cudaMalloc(&d_k, cb), cudaSuccess);
                    cr_assert_eq(cudaMalloc(&d_v, cb), cudaSuccess);
                    cr_assert_eq(cudaMalloc(&d_kr, rb), cudaSuccess);
                    cr_assert_eq(cudaMalloc(&d_vr, rb), cudaSuccess);
                    cr_assert_eq(cudaMalloc(&d_pos, 8), cudaSuccess);
                    cr_assert_eq(cudaMalloc(&d_new, 8), cudaSuccess);
                    cr_assert_eq(cudaMalloc(&d_o, ob), cudaSuccess);
                    cr_assert_eq(cudaMemcpy(d_q, c.host[0], ob, cudaMemcpyHostToDevice),
                                 cudaSuccess);
                    cr_assert_eq(cudaMemcpy(d_k, c.host[1], cb, cudaMemcpyHostToDevice),
                                 cudaSuccess);
                    cr_assert_eq(cudaMemcpy(d_v, c.host[2], cb, cudaMemcpyHostToDevice),
                                 cudaSuccess);
                    cr_assert_eq(cudaMemcpy(d_kr, krow, rb, cudaMemcpyHostToDevice), cudaSuccess);
                    cr_assert_eq(cudaMemcpy(d_vr, vrow, rb, cudaMemcpyHostToDevice), cudaSuccess);
                    cr_assert_eq(cudaMemcpy(d_pos, &old, 8, cudaMemcpyHostToDevice), cudaSuccess);
                    cr_assert_eq(cudaMemcpy(d_new, c.host[3], 8, cudaMemcpyHostToDevice),
                                 cudaSuccess);
                    cr_assert_eq(cudaMemset(d_o, 0xff, ob), cudaSuccess);
                    memcpy((char *)c.host[1] + (size_t)(L - 1) * rb, krow, rb);
                    memcpy((char *)c.host[2] + (size_t)(L - 1) * rb, vrow, rb);
                    cudaStream_t st;
                    cr_assert_eq(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking),
                                 cudaSuccess);
                    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
                    const baton_tensor_desc ukin[3] = {c.in[1], rowd, posd};
                    void *bk[4] = {d_k, d_kr, d_new, d_k}, *bv[4] = {d_v, d_vr, d_new, d_v};
                    run_on_stream("kv_cache_update", 3, ukin, &c.in[1], NULL, 0, bk, st, 0);
                    run_on_stream("kv_cache_update", 3, ukin, &c.in[2], NULL, 0, bv, st, 1);
                    void *bp[2] = {d_new, d_pos};
                    run_on_stream("copy", 1, &posd, &posd, NULL, 0, bp, st, 1);
                    void *ba[5] = {d_q, d_k, d_v, d_pos, d_o};
                    run_on_stream("attention", 4, c.in, &c.out, c.attrs, 3, ba, st, 1);
                    cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
                    char err[512] = "";
                    cr_assert_eq(baton__kcuda_decoder_error_take(0, NULL, err, sizeof err), 0, "%s",
                                 err);
                    void *out = malloc(ob), *again = malloc(ob);
                    cr_assert_eq(cudaMemcpy(out, d_o, ob, cudaMemcpyDeviceToHost), cudaSuccess);
                    /* the same call without PDL, on the caches and positions as written */
                    cr_assert_eq(cudaMemset(d_o, 0xff, ob), cudaSuccess);
                    run_on_stream("attention", 4, c.in, &c.out, c.attrs, 3, ba, st, 0);
                    cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
                    cr_assert_eq(cudaMemcpy(again, d_o, ob, cudaMemcpyDeviceToHost), cudaSuccess);
                    char what[128];
                    snprintf(what, sizeof what,
                             "after a PDL predecessor: %s, head_dim %lld, S %lld, L %lld, "
                             "positions held %lld",
                             baton_dtype_name(dt), (long long)Dh, (long long)S, (long long)L,
                             (long long)old);
                    cr_assert(memcmp(out, again, ob) == 0, "%s: other bits than without PDL", what);
                    const int64_t n = baton_tensor_desc_numel(&c.out);
                    double *ref = malloc(sizeof(double) * (size_t)n);
                    attention_ref(dt, &c, 1, S, H, Hkv, Dh, ref);
                    expect_close(&c, BATON_DEVICE_CUDA, out, ref, what);
                    free(ref);
                    free(out);
                    free(again);
                    free(krow);
                    free(vrow);
                    free_call(&c);
                    cudaStreamDestroy(st);
                    void *dev[] = {d_q, d_k, d_v, d_kr, d_vr, d_pos, d_new, d_o};
                    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
                        cudaFree(dev[i]);
                }
}
#endif

/* ---- attention: causal prefill at the tensor-core kernel's shapes ----------------------------
 * Rows 1..17 (below 16 the decode kernel takes them), 63, 64, 65, 200 and 1024; positions from 0,
 * from an offset, or arbitrary; G = H / Hkv of 1, 4 and 8; head_dim 64 and 128; bf16 and f16;
 * the default scale and others, negative ones among them.
 * Cache rows past the largest position hold NaN, as an unwritten cache may: a kernel must neither
 * read them as keys nor let 0 * NaN into P V. Besides the relative L2 error over the output
 * (tol()), every (row, head) must be within 3 tol() on its own, so one wrong row is not hidden
 * among a thousand right ones. */
typedef struct pf_case {
    int64_t T, S, H, Hkv, Dh;
    int arbitrary; /* positions drawn in [0, S); else p0 .. p0 + T - 1 */
    int64_t p0;
    baton_dtype pdt;
    double scale; /* 0: the default, 1/sqrt(Dh) */
} pf_case;

static int pf_cases(pf_case *out)
{
    static const int64_t G[3] = {1, 4, 8};
    int n = 0;
    for (int64_t T = 1; T <= 17; T++)
        out[n++] = (pf_case){T,
                             T + 40,
                             8,
                             8 / G[T % 3],
                             T % 2 ? 64 : 128,
                             T % 3 == 2,
                             T % 4 == 1 ? 0 : 23,
                             T % 2 ? BATON_DTYPE_I64 : BATON_DTYPE_I32,
                             0};
    const pf_case big[] = {
        {63, 100, 8, 2, 64, 0, 0, BATON_DTYPE_I64, 0},
        {64, 64, 4, 1, 128, 0, 0, BATON_DTYPE_I32, 0},
        {65, 200, 8, 1, 64, 0, 37, BATON_DTYPE_I64, 0},
        {65, 90, 4, 4, 128, 1, 0, BATON_DTYPE_I64, -0.05},
        {200, 300, 8, 2, 64, 0, 37, BATON_DTYPE_I32, -0.2},
        {200, 260, 4, 1, 128, 0, 0, BATON_DTYPE_I64, 0},
        {200, 150, 8, 8, 64, 1, 0, BATON_DTYPE_I64, 0},
        {100, 160, 4, 4, 64, 0, 50, BATON_DTYPE_I64, 0},
        {1024, 1024, 8, 1, 64, 0, 0, BATON_DTYPE_I64, 0.3},
        {1024, 1500, 4, 4, 128, 0, 300, BATON_DTYPE_I32, 0},
        {1024, 1100, 8, 2, 64, 1, 0, BATON_DTYPE_I32, 0},
        /* Llama-3.2-1B's heads, T past a multiple of the tiles (64 and 128 rows), from an offset */
        {1100, 1200, 32, 8, 64, 0, 60, BATON_DTYPE_I32, 0},
        {333, 400, 8, 4, 64, 0, 5, BATON_DTYPE_I64, 0.125}, /* G = 2 */
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        out[n++] = big[i];
    return n;
}

/* The call of case k in dtype dt with fresh inputs, and its float64 reference (malloc'd). */
static call pf_call(const pf_case *pc, baton_dtype dt, double **ref_out)
{
    test_rng r = {test_fresh_seed()};
    const int64_t T = pc->T, S = pc->S, H = pc->H, Hkv = pc->Hkv, Dh = pc->Dh, F = H * Dh,
                  KF = Hkv * Dh, G = H / Hkv;
    call c = attention_call(dt, pc->pdt, T, S, H, Hkv, Dh);
    c.n_attrs = pc->scale != 0 ? 4 : 3;
    c.attrs[3] = A_FLT("scale", pc->scale);
    for (int i = 0; i < 3; i++)
        c.host[i] = rand_buf(&r, &c.in[i], 1.0);
    c.host[3] = index_buf(&r, pc->pdt, T, S);
    int64_t pmax = 0;
    for (int64_t t = 0; t < T; t++) {
        if (!pc->arbitrary)
            set_idx(pc->pdt, c.host[3], t, pc->p0 + t);
        pmax = idx(pc->pdt, c.host[3], t) > pmax ? idx(pc->pdt, c.host[3], t) : pmax;
    }
    const size_t es = baton_dtype_size(dt);
    memset((char *)c.host[1] + (size_t)((pmax + 1) * KF) * es, 0xff,
           (size_t)((S - pmax - 1) * KF) * es);
    memset((char *)c.host[2] + (size_t)((pmax + 1) * KF) * es, 0xff,
           (size_t)((S - pmax - 1) * KF) * es);
    double *q = malloc(sizeof(double) * (size_t)(T * F)),
           *k = malloc(sizeof(double) * (size_t)((pmax + 1) * KF)),
           *v = malloc(sizeof(double) * (size_t)((pmax + 1) * KF)),
           *ref = malloc(sizeof(double) * (size_t)(T * F)),
           *w = malloc(sizeof(double) * (size_t)(pmax + 1));
    for (int64_t i = 0; i < T * F; i++)
        q[i] = load_f64(dt, c.host[0], i);
    for (int64_t i = 0; i < (pmax + 1) * KF; i++) {
        k[i] = load_f64(dt, c.host[1], i);
        v[i] = load_f64(dt, c.host[2], i);
    }
    const double scale = pc->scale != 0 ? pc->scale : 1.0 / sqrt((double)Dh);
    for (int64_t t = 0; t < T; t++) {
        const int64_t last = idx(pc->pdt, c.host[3], t);
        for (int64_t h = 0; h < H; h++) {
            const double *qr = q + t * F + h * Dh;
            const int64_t ko = (h / G) * Dh;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= last; j++) {
                double s = 0;
                for (int64_t d = 0; d < Dh; d++)
                    s += qr[d] * k[j * KF + ko + d];
                w[j] = s * scale;
                mx = fmax(mx, w[j]);
            }
            for (int64_t j = 0; j <= last; j++)
                sum += (w[j] = exp(w[j] - mx));
            double *o = ref + t * F + h * Dh;
            for (int64_t d = 0; d < Dh; d++)
                o[d] = 0;
            for (int64_t j = 0; j <= last; j++)
                for (int64_t d = 0; d < Dh; d++)
                    o[d] += w[j] * v[j * KF + ko + d];
            for (int64_t d = 0; d < Dh; d++)
                o[d] /= sum;
        }
    }
    free(q);
    free(k);
    free(v);
    free(w);
    *ref_out = ref;
    return c;
}

static void pf_expect_rows(const call *c, baton_device_kind kind, const void *out,
                           const double *ref, int64_t Dh, const char *what)
{
    const int64_t n = baton_tensor_desc_numel(&c->out);
    const double bound = 3 * tol(c->out.dtype, kind);
    for (int64_t i = 0; i < n; i += Dh) {
        double num = 0, den = 0;
        for (int64_t d = 0; d < Dh; d++) {
            const double x = load_f64(c->out.dtype, out, i + d), y = ref[i + d];
            num += (x - y) * (x - y);
            den += y * y;
        }
        const double e = sqrt(num / (den > 0 ? den : 1));
        cr_assert(e <= bound,
                  "%s: row %lld head %lld: relative error %.3g > %.3g (NaN: unwritten?)", what,
                  (long long)(i / c->in[0].shape[1]), (long long)(i % c->in[0].shape[1] / Dh), e,
                  bound);
    }
}

static void prefill_table(baton_device_kind kind, int64_t max_T)
{
    pf_case cases[64];
    const int n = pf_cases(cases);
    static const baton_dtype DT[2] = {BATON_DTYPE_BF16, BATON_DTYPE_F16};
    for (int k = 0; k < n; k++) {
        if (cases[k].T > max_T)
            continue;
        for (int f = 0; f < 2; f++) {
            double *ref;
            call c = pf_call(&cases[k], DT[f], &ref);
            void *out = malloc(nbytes(&c.out));
            char err[512], what[160];
            snprintf(what, sizeof what,
                     "T %lld S %lld H %lld Hkv %lld Dh %lld %s p0 %lld scale %g %s",
                     (long long)cases[k].T, (long long)cases[k].S, (long long)cases[k].H,
                     (long long)cases[k].Hkv, (long long)cases[k].Dh,
                     cases[k].arbitrary ? "arbitrary" : "contiguous", (long long)cases[k].p0,
                     cases[k].scale, baton_dtype_name(DT[f]));
            cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s: %s", what, err);
            expect_close(&c, kind, out, ref, what);
            pf_expect_rows(&c, kind, out, ref, cases[k].Dh, what);
            free(out);
            free(ref);
            free_call(&c);
        }
    }
}

Test(decoder_attention, matches_float64_for_causal_prefill_shapes, .timeout = 600)
{
    prefill_table(BATON_DEVICE_CPU, 200);
}
Test(gpu_attention, matches_float64_for_causal_prefill_shapes, .timeout = 900)
{
    skip_without_gpu();
    prefill_table(BATON_DEVICE_CUDA, 1 << 30);
}

#ifdef BATON_CUDA
/* The CUDA prefill at head_dim 64 runs the wgmma kernel on a compute capability 9.0 GPU where G
 * is even (the tests above, there), else the mma.sync kernel, whose block it picks by the grouping
 * and the launch's size; BATON_ATTN_PREFILL_BLOCK (read once per process, and Criterion runs each
 * test in its own) forces the mma.sync kernel and each of its blocks, so all three run on any GPU
 * (64x2 where G is even; the others take G = 1). */
Test(gpu_attention, matches_float64_for_causal_prefill_in_64_row_blocks, .timeout = 900)
{
    skip_without_gpu();
    setenv("BATON_ATTN_PREFILL_BLOCK", "64x1", 1);
    prefill_table(BATON_DEVICE_CUDA, 1 << 30);
}
Test(gpu_attention, matches_float64_for_causal_prefill_in_128_row_blocks, .timeout = 900)
{
    skip_without_gpu();
    setenv("BATON_ATTN_PREFILL_BLOCK", "128x1", 1);
    prefill_table(BATON_DEVICE_CUDA, 1 << 30);
}
Test(gpu_attention, matches_float64_for_causal_prefill_in_two_head_blocks, .timeout = 900)
{
    skip_without_gpu();
    setenv("BATON_ATTN_PREFILL_BLOCK", "64x2", 1);
    prefill_table(BATON_DEVICE_CUDA, 1 << 30);
}

/* A prefill row's position past the cache: recorded (and clamped) by either kernel. */
static void prefill_bad_pos(const char *kernel)
{
    setenv("BATON_ATTN_PREFILL", kernel, 1);
    test_rng r = {test_fresh_seed()};
    call c = attention_call(BATON_DTYPE_BF16, BATON_DTYPE_I64, 70, 100, 8, 2, 64);
    for (int i = 0; i < 3; i++)
        c.host[i] = rand_buf(&r, &c.in[i], 1.0);
    c.host[3] = malloc(70 * sizeof(int64_t));
    for (int t = 0; t < 70; t++)
        ((int64_t *)c.host[3])[t] = t == 40 ? 100 : t;
    char *out = malloc(nbytes(&c.out)), err[512];
    int rc = run_call(BATON_DEVICE_CUDA, &c, out, err, sizeof err);
    cr_assert_eq(rc, BATON_EKERNEL, "%s: position 100 gave %d", kernel, rc);
    cr_assert(strstr(err, "positions[40] = 100") && strstr(err, "[0, 100)"), "%s: message: %s",
              kernel, err);
    free(out);
    free_call(&c);
}
Test(gpu_attention, records_a_prefill_position_outside_the_cache_on_wgmma)
{
    skip_without_gpu();
    prefill_bad_pos("wgmma");
}
Test(gpu_attention, records_a_prefill_position_outside_the_cache_on_mma_sync)
{
    skip_without_gpu();
    prefill_bad_pos("mma");
}

/* Bitwise stability of the prefill: each block adds its keys in one fixed order. */
static void prefill_same_bits(const char *block)
{
    if (block)
        setenv("BATON_ATTN_PREFILL_BLOCK", block, 1);
    const pf_case pc = {1500, 2000, 32, 8, 64, 1, 0, BATON_DTYPE_I64, 0};
    call c = attention_call(BATON_DTYPE_BF16, pc.pdt, pc.T, pc.S, pc.H, pc.Hkv, pc.Dh);
    test_rng r = {test_fresh_seed()};
    for (int i = 0; i < 3; i++)
        c.host[i] = rand_buf(&r, &c.in[i], 1.0);
    c.host[3] = index_buf(&r, pc.pdt, pc.T, pc.S);
    const size_t ob = nbytes(&c.out);
    char *a = malloc(ob), *b = malloc(ob), err[512];
    cr_assert_eq(run_call(BATON_DEVICE_CUDA, &c, a, err, sizeof err), 0, "%s", err);
    for (int rep = 0; rep < 5; rep++) {
        cr_assert_eq(run_call(BATON_DEVICE_CUDA, &c, b, err, sizeof err), 0, "%s", err);
        cr_assert(memcmp(a, b, ob) == 0, "prefill run %d gave other bits", rep);
    }
    free(a);
    free(b);
    free_call(&c);
}

Test(gpu_attention, gives_the_same_bits_run_to_run_in_prefill)
{
    skip_without_gpu();
    prefill_same_bits(NULL);
}
Test(gpu_attention, gives_the_same_bits_run_to_run_in_prefill_in_128_row_blocks)
{
    skip_without_gpu();
    prefill_same_bits("128x1");
}
Test(gpu_attention, gives_the_same_bits_run_to_run_in_prefill_in_64_row_blocks)
{
    skip_without_gpu();
    prefill_same_bits("64x1");
}
#endif

/* ---- silu_mul, silu, gelu, softmax, cast ---------------------------------------------------- */

/* The last size only on CUDA: past 3 waves of 16-byte units (2^23 elements), so the kernels'
 * loop that keeps several units in flight a thread runs, not only its tail. */
static const int64_t EW_N[] = {1, 7, 4096, 8192 * 3 + 5, (1 << 23) + 8 * 3 + 5};

static size_t ew_sizes(baton_device_kind kind)
{
    return sizeof EW_N / sizeof EW_N[0] - (kind == BATON_DEVICE_CUDA ? 0 : 1);
}

/* gelu in float64, in the forms that do not cancel for negative x (0.5 x (1 + tanh u) and
 * 0.5 x (1 + erf(x / sqrt 2)) lose every digit in 1 + (-1 + tiny)): the same functions. */
static double gelu_ref(double x, int tanh_form)
{
    if (tanh_form)
        return x / (1 + exp(-2 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
    return 0.5 * x * erfc(-x / sqrt(2.0));
}

/* silu_mul, silu and gelu of fresh values against float64; on CUDA input 0 and the output
 * shift_in and shift_out values past a 16-byte boundary (where that stays under 16 bytes). */
static void act_table_at(baton_device_kind kind, int shift_in, int shift_out)
{
    static const char *ops[] = {"silu_mul", "silu", "gelu", "gelu"};
    for (int o = 0; o < 4; o++)
        for (size_t k = 0; k < ew_sizes(kind); k++)
            for (int f = 0; f < 4; f++) {
                test_rng r = {test_fresh_seed()};
                const baton_dtype dt = FLOATS[f];
                const int64_t n = EW_N[k];
                const int esz = (int)baton_dtype_size(dt);
                call c = {.target = ops[o],
                          .n_in = o == 0 ? 2 : 1,
                          .shift_in = shift_in * esz < 16 ? shift_in * esz : 0,
                          .shift_out = shift_out * esz < 16 ? shift_out * esz : 0};
                c.in[0] = DESC(dt, 1, n);
                c.in[1] = c.in[0];
                c.out = c.in[0];
                if (o >= 2) {
                    c.attrs[0] = A_BOOL("approximate", o == 3);
                    c.n_attrs = 1;
                }
                for (int i = 0; i < c.n_in; i++)
                    c.host[i] = rand_buf(&r, &c.in[i], 3.0);
                double *ref = malloc(sizeof(double) * (size_t)n);
                for (int64_t i = 0; i < n; i++) {
                    double x = load_f64(dt, c.host[0], i);
                    ref[i] = o == 0   ? x / (1 + exp(-x)) * load_f64(dt, c.host[1], i)
                             : o == 1 ? x / (1 + exp(-x))
                                      : gelu_ref(x, o == 3);
                }
                void *out = malloc(nbytes(&c.out));
                char err[512];
                cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s", err);
                expect_close(&c, kind, out, ref, o == 3 ? "tanh" : "");
                free(out);
                free(ref);
                free_call(&c);
            }
}

Test(decoder_activations, silu_mul_silu_and_gelu_match_float64)
{
    act_table_at(BATON_DEVICE_CPU, 0, 0);
}
Test(gpu_activations, silu_mul_silu_and_gelu_match_float64)
{
    skip_without_gpu();
    act_table_at(BATON_DEVICE_CUDA, 0, 0);
}
/* x and y at one offset (16-byte units after a head of single values; silu_mul's second input
 * stays on 16 bytes, so its buffers are at two offsets), and at two offsets (every value alone). */
Test(gpu_activations, match_float64_at_any_offset)
{
    skip_without_gpu();
    act_table_at(BATON_DEVICE_CUDA, 1, 1);
    act_table_at(BATON_DEVICE_CUDA, 3, 1);
}

/* On CUDA (an H200's 132 SMs): rows of at most 1024 values (256 in f64) a warp a row, eight a
 * block ({9, 1000}, {300, 96}, {2000, 520}); rows of at most 16 vectors a group of fewer lanes,
 * several a warp ({1001, 40}: 16 lanes a row in f32, 8 in bf16; {777, 7}: a lane a row); rows in
 * registers a block a row ({4, 2048}) or over clusters of 8 ({8, 128256}: a batch of decode
 * logits; a few rows of 4096 values or more: {1, 8192}, {2, 4097}, {1, 16384} but in f32); up to 4
 * long rows over all SMs in one cooperative grid ({2, 128256}, {3, 50008}: slices of unequal
 * length, a count a row; {1, 300040} but in f64); where registers would take more than one wave,
 * rows in registers and shared memory, a block a row ({70, 65536}) or over 2-block clusters ({64,
 * 128256}). Past a wave: rows in registers in blocks of 256 threads, several a SM
 * ({600, 4096}); slices of 192 KB or more in registers and shared memory, where whole rounds of
 * them fill the SMs, a cluster or a block taking a row after another, each read under the last
 * one's stores ({130, 128257} over 2-block clusters, {260, 65536} a block a row, in f32); slices
 * of at most 64 KB in shared memory, several blocks a SM, a block a row ({300, 16384}) or over
 * clusters of 2, 4 or 8 by dtype ({200, 20000}, {140, 65536}, {70, 65536} in f64); rows longer
 * than 8 such slices in registers and shared memory over waves ({67, 140000} in f32), else read
 * twice ({67, 140000} and {1, 300040} in f64). Rows whose bytes are no multiple of 16 ({1, 1},
 * {3, 10}, {2, 4097}, {1, 50257}: GPT-2's vocabulary, {3, 1000003}, {777, 7}, and six of the
 * last nine, one a kernel) start at every offset from a 16-byte boundary: each kernel takes their
 * body in 16-byte vectors and the values either side one at a time. {67, 128256} and
 * {100, 128256} are the benchmark's rows just past a wave of 2-block rows (the tile kernel in
 * f32) and under a wave of 1-block rows (in registers and shared memory in bf16 and f16). The
 * last fourteen are CUDA's alone. */
static const int64_t SM[][2] = {
    {1, 1},        {3, 10},       {4, 2048},    {2, 128256},  {9, 1000},    {3, 50008},
    {2, 4097},     {70, 65536},   {1, 300040},  {200, 20000}, {1, 50257},   {3, 1000003},
    {1001, 40},    {777, 7},      {1, 8192},    {1, 16384},   {8, 128256},  {64, 128256},
    {300, 96},     {2000, 520},   {600, 4096},  {300, 16384}, {140, 65536}, {67, 140000},
    {8, 128257},   {64, 128257},  {300, 16385}, {600, 4097},  {2000, 521},  {67, 128256},
    {100, 128256}, {130, 128257}, {260, 65536}};

static size_t softmax_cases(baton_device_kind kind)
{
    return sizeof SM / sizeof SM[0] - (kind == BATON_DEVICE_CUDA ? 0 : 14);
}

/* softmax of fresh [rows, N] values in dt against float64; on CUDA x and y shift_in and shift_out
 * bytes past a 16-byte boundary. */
static void softmax_case(baton_device_kind kind, baton_dtype dt, int64_t rows, int64_t N,
                         int shift_in, int shift_out)
{
    test_rng r = {test_fresh_seed()};
    call c = {.target = "softmax", .n_in = 1, .shift_in = shift_in, .shift_out = shift_out};
    c.in[0] = DESC(dt, rows, N);
    c.out = c.in[0];
    c.host[0] = rand_buf(&r, &c.in[0], 4.0);
    double *ref = malloc(sizeof(double) * (size_t)(rows * N));
    for (int64_t t = 0; t < rows; t++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < N; j++)
            mx = fmax(mx, load_f64(dt, c.host[0], t * N + j));
        for (int64_t j = 0; j < N; j++)
            s += (ref[t * N + j] = exp(load_f64(dt, c.host[0], t * N + j) - mx));
        for (int64_t j = 0; j < N; j++)
            ref[t * N + j] /= s;
    }
    void *out = malloc(nbytes(&c.out));
    char err[512];
    cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s", err);
    char what[96];
    snprintf(what, sizeof what, " [%lld, %lld], x and y %d and %d bytes past 16", (long long)rows,
             (long long)N, shift_in, shift_out);
    expect_close(&c, kind, out, ref, what);
    free(out);
    free(ref);
    free_call(&c);
}

static void softmax_table(baton_device_kind kind)
{
    for (size_t k = 0; k < softmax_cases(kind); k++)
        for (int f = 0; f < 4; f++)
            softmax_case(kind, FLOATS[f], SM[k][0], SM[k][1], 0, 0);
}

Test(decoder_softmax, matches_float64_over_the_last_dim)
{
    softmax_table(BATON_DEVICE_CPU);
}
Test(gpu_softmax, matches_float64_over_the_last_dim)
{
    skip_without_gpu();
    softmax_table(BATON_DEVICE_CUDA);
}

/* x and y inside larger buffers: at the same offset from a 16-byte boundary, every row splits
 * into a 16-byte body and values either side, in each kernel (a warp a row, registers, the grid,
 * registers and shared memory, slices, read twice); at different offsets, split by x's offset with
 * y's vectors realigned across lanes, by groups of lanes ({777, 7}, {1001, 40}), a warp a row
 * ({2000, 520}), slices in shared memory past a wave ({64, 128256} over 8-block clusters,
 * {300, 16384} a block a row) or read twice (the rest). */
Test(gpu_softmax, matches_float64_at_any_offset)
{
    skip_without_gpu();
    static const int64_t SHAPES[][2] = {{2000, 520},  {4, 2048},    {2, 128256},
                                        {64, 128256}, {300, 16384}, {3, 1000003},
                                        {777, 7},     {1001, 40},   {1, 50257}};
    static const int SHIFTS[][2] = {{4, 4}, {8, 8}, {4, 12}, {0, 4}, {12, 0}};
    for (size_t k = 0; k < sizeof SHAPES / sizeof SHAPES[0]; k++)
        for (size_t i = 0; i < sizeof SHIFTS / sizeof SHIFTS[0]; i++) {
            softmax_case(BATON_DEVICE_CUDA, BATON_DTYPE_F32, SHAPES[k][0], SHAPES[k][1],
                         SHIFTS[i][0], SHIFTS[i][1]);
            softmax_case(BATON_DEVICE_CUDA, BATON_DTYPE_BF16, SHAPES[k][0], SHAPES[k][1],
                         SHIFTS[i][0] / 2, SHIFTS[i][1] / 2);
        }
}

/* Each CUDA form's maxima and sums in a fixed order: a decode row and a longer one over all SMs
 * (whichever block counts last stores the pairs' bytes), 8 rows in registers over clusters of 8,
 * 64 rows in registers and shared memory over 2-block clusters, rows read twice, past a wave
 * rows in 256-thread blocks, slices in shared memory (a block a row, 4-block clusters) and rows
 * in registers and shared memory, and short rows a warp each; then rows of no multiple of 16 bytes
 * through the grid, clusters, registers and shared memory, slices and a warp a row; then rows a
 * cluster or a block takes one after another ({130, 128257}, {260, 65536}). */
Test(gpu_softmax, gives_the_same_bits_run_to_run)
{
    skip_without_gpu();
    static const int64_t SHAPES[][2] = {{1, 128256},  {8, 128256},   {64, 128256}, {1, 300040},
                                        {200, 20000}, {600, 4096},   {300, 16384}, {140, 65536},
                                        {67, 140000}, {2000, 520},   {1, 50257},   {8, 128257},
                                        {64, 128257}, {300, 16385},  {2000, 521},  {1001, 40},
                                        {67, 128256}, {130, 128257}, {260, 65536}};
    for (size_t k = 0; k < sizeof SHAPES / sizeof SHAPES[0]; k++) {
        test_rng r = {test_fresh_seed()};
        call c = {.target = "softmax", .n_in = 1};
        c.in[0] = DESC(BATON_DTYPE_F32, SHAPES[k][0], SHAPES[k][1]);
        c.out = c.in[0];
        c.host[0] = rand_buf(&r, &c.in[0], 4.0);
        void *a = malloc(nbytes(&c.out)), *b = malloc(nbytes(&c.out));
        char err[512];
        cr_assert_eq(run_call(BATON_DEVICE_CUDA, &c, a, err, sizeof err), 0, "%s", err);
        cr_assert_eq(run_call(BATON_DEVICE_CUDA, &c, b, err, sizeof err), 0, "%s", err);
        cr_assert(memcmp(a, b, nbytes(&c.out)) == 0, "softmax [%lld, %lld] differs run to run",
                  (long long)SHAPES[k][0], (long long)SHAPES[k][1]);
        free(a), free(b);
        free_call(&c);
    }
}

static void cast_table(baton_device_kind kind)
{
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (size_t k = 0; k < ew_sizes(kind); k++) {
                test_rng r = {test_fresh_seed()};
                const int64_t n = EW_N[k];
                call c = {.target = "cast", .n_in = 1};
                c.in[0] = DESC(FLOATS[a], n);
                c.out = DESC(FLOATS[b], n);
                c.host[0] = rand_buf(&r, &c.in[0], 100.0);
                void *want = malloc(nbytes(&c.out)), *out = malloc(nbytes(&c.out));
                cr_assert_eq(baton_convert(want, FLOATS[b], c.host[0], FLOATS[a], n), 0);
                char err[512];
                cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s", err);
                cr_assert(memcmp(out, want, nbytes(&c.out)) == 0,
                          "cast %s -> %s of %lld elements differs from baton_convert",
                          baton_dtype_name(FLOATS[a]), baton_dtype_name(FLOATS[b]), (long long)n);
                free(want);
                free(out);
                free_call(&c);
            }
}

Test(decoder_cast, rounds_to_nearest_even_as_baton_convert)
{
    cast_table(BATON_DEVICE_CPU);
}
Test(gpu_cast, rounds_to_nearest_even_as_baton_convert)
{
    skip_without_gpu();
    cast_table(BATON_DEVICE_CUDA);
}

/* ---- sample --------------------------------------------------------------------------------- */

/* The sampler's definition, by sorting, in double: the order (value desc, index asc), the top_k,
 * the shortest prefix of mass >= top_p, then the first index ascending whose running weight
 * exceeds u * total; the weights dec_sample_weight's (the function every device computes). */
static const double *g_vals;
static int by_value_desc(const void *a, const void *b)
{
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    float x = (float)g_vals[i], y = (float)g_vals[j];
    return x > y ? -1 : x < y ? 1 : (i > j) - (i < j);
}

static int64_t sample_ref(const double *v, int64_t V, double temp, int top_k, double top_p,
                          uint64_t seed, int64_t step, int64_t row)
{
    int64_t *ord = malloc(sizeof(int64_t) * (size_t)V);
    uint64_t *w = malloc(sizeof(uint64_t) * (size_t)V);
    char *keep = calloc((size_t)V, 1);
    for (int64_t i = 0; i < V; i++)
        ord[i] = i;
    g_vals = v;
    qsort(ord, (size_t)V, sizeof *ord, by_value_desc);
    const float mx = (float)v[ord[0]];
    int64_t n = top_k > 0 && top_k < V ? top_k : V;
    uint64_t z = 0; /* weights in 2^-40 units, as the kernels count them: exact sums */
    for (int64_t i = 0; i < V; i++)
        w[i] = (uint64_t)llrint(dec_sample_weight((float)v[i], mx, (float)(1.0 / temp)));
    for (int64_t i = 0; i < n; i++)
        z += w[ord[i]];
    if (top_p < 1) {
        uint64_t target = (uint64_t)ceil(top_p * (double)z), cum = 0;
        int64_t m = 0;
        while (m < n && cum < target)
            cum += w[ord[m++]];
        n = m;
    }
    uint64_t tot = 0;
    for (int64_t i = 0; i < n; i++) {
        keep[ord[i]] = 1;
        tot += w[ord[i]];
    }
    uint64_t target = (uint64_t)(dec_uniform(seed, step, row) * (double)tot), cum = 0;
    int64_t pick = -1;
    for (int64_t i = 0; i < V && pick < 0; i++)
        if (keep[i] && (cum += w[i]) > target)
            pick = i;
    free(ord);
    free(w);
    free(keep);
    return pick;
}

static const struct {
    int64_t rows, V;
    double temp;
    int top_k;
    double top_p;
} SMP[] = {{1, 128256, 0.8, 50, 0.9},
           {3, 1000, 1.0, 0, 1.0},
           {2, 1000, 0.6, 0, 0.7},
           {4, 5000, 1.3, 40, 1.0},
           {1, 7, 1.0, 1, 1.0},
           {2, 300, 2.0, 300, 0.5},
           {2, 128256, 0.8, 0, 0.9},
           {2, 50000, 0.7, 1, 0.9},
           {1, 128256, 1.0, 1000, 0.95},
           /* CUDA: candidates of the second radix pass, 65 to 128 of them (one warp, 4 a lane) */
           {1, 128256, 0.9, 100, 0.8},
           /* top_k past CUDA's one-block finish: the radix top_p after a top_k cut */
           {2, 20000, 1.0, 2000, 0.9},
           /* more than a cluster's shared memory holds: CUDA's one-block kernel */
           {1, 400000, 0.9, 0, 0.95}};

/* A sample call: logits dt [rows, V] from rand_buf (values in [-2, 2]), a step i64 [1] (c.host[1],
 * set by the caller), ids i64 [rows]. */
static call sample_call(test_rng *r, baton_dtype dt, int64_t rows, int64_t V, double temperature,
                        int top_k, double top_p, uint64_t seed)
{
    call c = {.target = "sample", .n_in = 2, .n_attrs = 4};
    c.in[0] = DESC(dt, rows, V);
    c.in[1] = DESC(BATON_DTYPE_I64, 1);
    c.out = DESC(BATON_DTYPE_I64, rows);
    c.attrs[0] = A_FLT("temperature", temperature);
    c.attrs[1] = A_INT("top_k", top_k);
    c.attrs[2] = A_FLT("top_p", top_p);
    c.attrs[3] = A_INT("seed", (int64_t)seed);
    c.host[0] = rand_buf(r, &c.in[0], 2.0);
    c.host[1] = malloc(8);
    return c;
}

static void sample_table(baton_device_kind kind)
{
    for (size_t k = 0; k < sizeof SMP / sizeof SMP[0]; k++)
        for (int f = 0; f < 4; f++) {
            test_rng r = {test_fresh_seed()};
            const baton_dtype dt = FLOATS[f];
            const int64_t rows = SMP[k].rows, V = SMP[k].V;
            const uint64_t seed = test_rng_next(&r);
            call c =
                sample_call(&r, dt, rows, V, SMP[k].temp, SMP[k].top_k, SMP[k].top_p, seed >> 1);
            double *v = malloc(sizeof(double) * (size_t)V);
            for (int64_t step = 0; step < 6; step++) {
                ((int64_t *)c.host[1])[0] = step * 1000 + 3;
                int64_t out[8], again[8];
                char err[512];
                cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s", err);
                cr_assert_eq(run_call(kind, &c, again, err, sizeof err), 0, "%s", err);
                for (int64_t t = 0; t < rows; t++) {
                    cr_assert_eq(out[t], again[t], "sample is not deterministic per (seed, step)");
                    for (int64_t i = 0; i < V; i++)
                        v[i] = load_f64(dt, c.host[0], t * V + i);
                    int64_t want = sample_ref(v, V, SMP[k].temp, SMP[k].top_k, SMP[k].top_p,
                                              seed >> 1, step * 1000 + 3, t);
                    cr_assert_eq(out[t], want,
                                 "case %zu %s row %lld step %lld: sampled %lld, the definition "
                                 "gives %lld",
                                 k, baton_dtype_name(dt), (long long)t, (long long)step,
                                 (long long)out[t], (long long)want);
                }
            }
            free(v);
            free_call(&c);
        }
}

Test(decoder_sample, follows_its_definition_deterministically, .timeout = 600)
{
    sample_table(BATON_DEVICE_CPU);
}
Test(gpu_sample, follows_its_definition_deterministically, .timeout = 600)
{
    skip_without_gpu();
    sample_table(BATON_DEVICE_CUDA);
}

/* Flat logits: the step's value moves the draw (32 steps over 1000 equal tokens). */
static void sample_steps(baton_device_kind kind)
{
    call c = {.target = "sample", .n_in = 2, .n_attrs = 1};
    c.in[0] = DESC(BATON_DTYPE_F32, 1000);
    c.in[1] = DESC(BATON_DTYPE_I32, 1);
    c.out = DESC(BATON_DTYPE_I64, 1);
    c.attrs[0] = A_INT("seed", 7);
    c.host[0] = calloc(1000, sizeof(float));
    c.host[1] = malloc(4);
    int64_t seen[32];
    int distinct = 0;
    for (int step = 0; step < 32; step++) {
        ((int32_t *)c.host[1])[0] = step;
        char err[512];
        cr_assert_eq(run_call(kind, &c, &seen[step], err, sizeof err), 0, "%s", err);
        cr_assert(seen[step] >= 0 && seen[step] < 1000);
        int dup = 0;
        for (int j = 0; j < step; j++)
            dup |= seen[j] == seen[step];
        distinct += !dup;
    }
    cr_assert_gt(distinct, 20, "32 steps over 1000 equal tokens drew %d distinct ones", distinct);
    free_call(&c);
}

Test(decoder_sample, draws_anew_at_each_step)
{
    sample_steps(BATON_DEVICE_CPU);
}
Test(gpu_sample, draws_anew_at_each_step)
{
    skip_without_gpu();
    sample_steps(BATON_DEVICE_CUDA);
}

/* Four steps of a one-row sample call c (temperature 0.8) against the definition over its logits
 * v; case k of dtype dt in the message. */
static void sample_steps_follow(baton_device_kind kind, call *c, const double *v, int64_t V,
                                int top_k, double top_p, uint64_t seed, size_t k, baton_dtype dt)
{
    for (int64_t step = 0; step < 4; step++) {
        ((int64_t *)c->host[1])[0] = step;
        int64_t out;
        char err[512];
        cr_assert_eq(run_call(kind, c, &out, err, sizeof err), 0, "%s", err);
        int64_t want = sample_ref(v, V, 0.8, top_k, top_p, seed, step, 0);
        cr_assert_eq(out, want, "case %zu %s step %lld: sampled %lld, the definition gives %lld", k,
                     baton_dtype_name(dt), (long long)step, (long long)out, (long long)want);
    }
}

/* Peaked logits (a few tokens hold the mass, as a model's do): the CPU finds the top_p set among
 * the best 256 of its first pass, CUDA among the candidates of its first or second radix pass (at
 * most 2048 keys, sorted in one block); where more tokens share the mass (here 300 large logits,
 * and the flat rows of sample_table) both take the radix passes. Against the definition, with a
 * top_k past the heap (the radix cut first) and without. */
static void sample_peaked(baton_device_kind kind)
{
    const struct {
        int top_k, big; /* big: logits in [8, 12] among the rest's [-2, 2] */
        double top_p;
    } cases[] = {{0, 30, 0.9}, {0, 3, 0.5}, {600, 100, 0.95}, {0, 200, 0.99}, {0, 300, 0.9}};
    const int64_t V = 128256;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int f = 0; f < 4; f++) {
            test_rng r = {test_fresh_seed()};
            const baton_dtype dt = FLOATS[f];
            const uint64_t seed = test_rng_next(&r) >> 1;
            call c = sample_call(&r, dt, 1, V, 0.8, cases[k].top_k, cases[k].top_p, seed);
            for (int j = 0; j < cases[k].big; j++)
                store_f64(dt, c.host[0], (int64_t)(test_rng_next(&r) % (uint64_t)V),
                          8.0 + (double)(test_rng_next(&r) % 4096) / 1024.0);
            double *v = malloc(sizeof(double) * (size_t)V);
            for (int64_t i = 0; i < V; i++)
                v[i] = load_f64(dt, c.host[0], i);
            sample_steps_follow(kind, &c, v, V, cases[k].top_k, cases[k].top_p, seed, k, dt);
            free(v);
            free_call(&c);
        }
}

Test(decoder_sample, peaked_logits_follow_the_definition)
{
    sample_peaked(BATON_DEVICE_CPU);
}
Test(gpu_sample, peaked_logits_follow_the_definition)
{
    skip_without_gpu();
    sample_peaked(BATON_DEVICE_CUDA);
}

/* Ties past the room for candidates: all logits equal but 10, so a top_k's cut falls among more
 * than 2048 equal keys and is taken by index (CUDA: after all three radix passes, the members
 * gathered into one block). Against the definition. */
static void sample_ties(baton_device_kind kind)
{
    const struct {
        int top_k;
        double top_p;
    } cases[] = {{50, 0.9}, {1000, 0.95}};
    const int64_t V = 128256;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        test_rng r = {test_fresh_seed()};
        const uint64_t seed = test_rng_next(&r) >> 1;
        call c = sample_call(&r, BATON_DTYPE_F32, 1, V, 0.8, cases[k].top_k, cases[k].top_p, seed);
        float *x = c.host[0];
        double *v = malloc(sizeof(double) * (size_t)V);
        for (int64_t i = 0; i < V; i++)
            x[i] = 0.25f;
        for (int j = 0; j < 10; j++)
            x[(int64_t)(test_rng_next(&r) % (uint64_t)V)] = 1.5f;
        for (int64_t i = 0; i < V; i++)
            v[i] = x[i];
        sample_steps_follow(kind, &c, v, V, cases[k].top_k, cases[k].top_p, seed, k,
                            BATON_DTYPE_F32);
        free(v);
        free_call(&c);
    }
}

Test(decoder_sample, ties_follow_the_definition)
{
    sample_ties(BATON_DEVICE_CPU);
}
Test(gpu_sample, ties_follow_the_definition)
{
    skip_without_gpu();
    sample_ties(BATON_DEVICE_CUDA);
}

/* NaN logits count as -inf (never drawn, weight 0): a row with NaNs draws what the same row with
 * -inf in their place draws, through the heap (small top_k) and the radix (top_p alone) paths. */
static void sample_nans(baton_device_kind kind)
{
    const int64_t V = 50000;
    const struct {
        int top_k;
        double top_p;
    } cases[] = {{20, 0.9}, {0, 0.8}, {1, 1.0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        test_rng r = {test_fresh_seed()};
        call c = sample_call(&r, BATON_DTYPE_F32, 1, V, 0.7, cases[k].top_k, cases[k].top_p, 5);
        float *x = c.host[0];
        for (int64_t i = 0; i < V; i += 7) /* the largest logit among them, and 1 in 7 of all */
            x[i] = i == 7 * 4000 ? NAN : (test_rng_next(&r) & 1) ? NAN : x[i];
        x[7 * 4000] = NAN;
        for (int64_t step = 0; step < 8; step++) {
            ((int64_t *)c.host[1])[0] = step;
            int64_t with_nan, with_inf;
            char err[512];
            cr_assert_eq(run_call(kind, &c, &with_nan, err, sizeof err), 0, "%s", err);
            cr_assert(with_nan >= 0 && with_nan < V && x[with_nan] == x[with_nan],
                      "case %zu step %lld drew %lld, a NaN", k, (long long)step,
                      (long long)with_nan);
            float *y = malloc(sizeof(float) * (size_t)V);
            for (int64_t i = 0; i < V; i++)
                y[i] = x[i] != x[i] ? -INFINITY : x[i];
            c.host[0] = y;
            cr_assert_eq(run_call(kind, &c, &with_inf, err, sizeof err), 0, "%s", err);
            c.host[0] = x;
            free(y);
            cr_assert_eq(with_nan, with_inf, "case %zu step %lld: NaNs drew %lld, -inf %lld", k,
                         (long long)step, (long long)with_nan, (long long)with_inf);
        }
        free_call(&c);
    }
}

Test(decoder_sample, takes_nan_logits_as_minus_infinity)
{
    sample_nans(BATON_DEVICE_CPU);
}
Test(gpu_sample, takes_nan_logits_as_minus_infinity)
{
    skip_without_gpu();
    sample_nans(BATON_DEVICE_CUDA);
}

/* The weights against exp in double: within 2e-7 (and 0.3 of a unit), 0 past -29, for -inf and
 * NaN, 2^40 at the maximum and for +inf; the rounding the kernels add is llrint's. */
Test(decoder_sample, weights_follow_exp)
{
    test_rng r = {test_fresh_seed()};
    const double one = 1099511627776.0;
    for (int i = 0; i < 200000; i++) {
        const float mx = (float)(test_rng_uniform(&r) * 20 - 10);
        const float f = mx - (float)(test_rng_uniform(&r) * (i & 1 ? 40 : 3));
        const float inv_t = (float)(0.25 + test_rng_uniform(&r) * 2);
        const double want = one * exp((double)(float)((f - mx) * inv_t)),
                     got = dec_sample_weight(f, mx, inv_t);
        cr_assert(fabs(got - want) <= 2e-7 * want + (want < 0.3 ? 0.3 : 0),
                  "weight of f %.9g, mx %.9g, 1/t %.9g: %.17g, exp gives %.17g", f, mx, inv_t, got,
                  want);
    }
    cr_assert_eq(dec_sample_weight(3.5f, 3.5f, 1.3f), one);
    cr_assert_eq(dec_sample_weight(INFINITY, INFINITY, 1.0f), one);
    cr_assert_eq(dec_sample_weight(1.0f, INFINITY, 1.0f), 0);
    cr_assert_eq(dec_sample_weight(-INFINITY, 2.0f, 1.0f), 0);
    cr_assert_eq(dec_sample_weight(NAN, 2.0f, 1.0f), 0);
    cr_assert_eq(dec_sample_weight(-27.1f, 2.0f, 1.0f), 0);
    cr_assert_gt(dec_sample_weight(-26.9f, 2.0f, 1.0f), 0);
    /* subnormals are zeros: the same weights where CUDA flushes them */
    cr_assert_eq(dec_sample_weight(-1e-39f, 0.0f, 1e30f), one);
    cr_assert_eq(dec_sample_weight(0.0f, 1e-39f, 1e30f), one);
}

/* The CPU sampler's loops weigh 8 logits at a time in AVX2's lanes: the same bits as the scalar
 * function for every logit, the special ones among them (at every vector level the CPU has). */
Test(decoder_sample, weighs_in_vector_lanes_as_the_scalar_function)
{
    test_rng r = {test_fresh_seed()};
    enum { N = 4099 };
    static float f[N];
    static uint64_t w[N];
    const float special[] = {NAN, INFINITY, -INFINITY, 1e-39f, -1e-39f, 0.0f, -0.0f, 3.0f};
    const simd_level was = baton__simd_level_get();
    for (int round = 0; round < 20; round++) {
        /* a subnormal or a tiny normal maximum, with 1/t large enough that a subnormal not
         * flushed would move a weight */
        const float mx = round % 8 == 7   ? 1e-39f
                         : round % 4 == 3 ? 2.5e-38f
                                          : (float)(test_rng_uniform(&r) * 8);
        const float inv_t = round % 2 ? 1e37f : (float)(0.2 + test_rng_uniform(&r) * 3);
        for (int i = 0; i < N; i++)
            f[i] = test_rng_next(&r) % 16 == 0
                       ? special[test_rng_next(&r) % 8]
                       : mx - (float)(test_rng_uniform(&r) * (round & 1 ? 40 : 4));
        for (int lvl = SIMD_SCALAR; lvl <= (int)baton__simd_detect(); lvl++) {
            baton__simd_level_set((simd_level)lvl);
            baton__kcpu_sample_weights(f, N, mx, inv_t, w);
            for (int i = 0; i < N; i++) {
                const uint64_t want = (uint64_t)llrint(dec_sample_weight(f[i], mx, inv_t));
                cr_assert_eq(
                    w[i], want, "level %d, f %.9g mx %.9g 1/t %.9g: %llu, the scalar function %llu",
                    lvl, f[i], mx, inv_t, (unsigned long long)w[i], (unsigned long long)want);
            }
        }
    }
    baton__simd_level_set(was);
}

/* Draws that fall within a few float steps of the boundary between two tokens: rows [x, 0], x
 * from the float nearest the boundary that the row's u puts between them, 8 steps below it to 7
 * above, so that which token a row draws turns on the weights' last bits. The CPU and CUDA
 * samplers must both draw what the definition draws (expf against CUDA's __expf disagreed here). */
static void sample_boundaries(baton_device_kind kind)
{
    const int64_t rows = 256;
    const uint64_t seed = 11;
    test_rng r = {test_fresh_seed()};
    const int64_t step = (int64_t)(test_rng_next(&r) >> 40);
    call c = sample_call(&r, BATON_DTYPE_F32, rows, 2, 1.0, 0, 1.0, seed);
    ((int64_t *)c.host[1])[0] = step;
    float *x = c.host[0];
    int turns = 0;
    for (int64_t t = 0; t < rows; t++) {
        const double u = dec_uniform(seed, step, t);
        /* token 0 is drawn iff its weight exceeds u of the two, about where exp(x) = u / (1 - u) */
        float b = (float)log(u / (1 - u));
        for (int k = 0; k < 8; k++)
            b = nextafterf(b, -INFINITY);
        x[2 * t] = b;
        for (int k = 0; k < (int)(t % 16); k++)
            x[2 * t] = nextafterf(x[2 * t], INFINITY);
        x[2 * t + 1] = 0;
        /* the definition turns within the 16 floats from b (else the rows test nothing) */
        double v[2] = {b, 0};
        const int64_t lo = sample_ref(v, 2, 1.0, 0, 1.0, seed, step, t);
        for (int k = 0; k < 16; k++)
            b = nextafterf(b, INFINITY);
        v[0] = b;
        turns += lo != sample_ref(v, 2, 1.0, 0, 1.0, seed, step, t);
    }
    cr_assert_gt(turns, rows * 3 / 4, "only %d of %lld rows turn within 16 floats", turns,
                 (long long)rows);
    int64_t out[256];
    char err[512];
    cr_assert_eq(run_call(kind, &c, out, err, sizeof err), 0, "%s", err);
    for (int64_t t = 0; t < rows; t++) {
        double v[2] = {x[2 * t], 0};
        const int64_t want = sample_ref(v, 2, 1.0, 0, 1.0, seed, step, t);
        cr_assert_eq(out[t], want, "row %lld (x = %.9g, u = %.17g): drew %lld, the definition %lld",
                     (long long)t, x[2 * t], dec_uniform(seed, step, t), (long long)out[t],
                     (long long)want);
    }
    free_call(&c);
}

Test(decoder_sample, draws_at_a_boundary_as_its_definition)
{
    sample_boundaries(BATON_DEVICE_CPU);
}
Test(gpu_sample, draws_at_a_boundary_as_its_definition)
{
    skip_without_gpu();
    sample_boundaries(BATON_DEVICE_CUDA);
}

/* ---- load-time refusals --------------------------------------------------------------------- */

static void expect_refusal(call *c, const char *a, const char *b)
{
    char msg[512];
    baton_tensor_desc want;
    int rc = check_call(c, &want, msg, sizeof msg);
    cr_assert_eq(rc, BATON_EPLAN, "%s: check() accepted a bad call", c->target);
    cr_assert(strstr(msg, a) && (!b || strstr(msg, b)), "%s: message lacks '%s'%s%s: %s", c->target,
              a, b ? " or " : "", b ? b : "", msg);
}

Test(decoder_check, refuses_bad_shapes_dtypes_heads_and_attributes)
{
    call c = attention_call(BATON_DTYPE_BF16, BATON_DTYPE_I64, 1, 100, 32, 8, 64);
    baton_tensor_desc want;
    char msg[512];
    cr_assert_eq(check_call(&c, &want, msg, sizeof msg), 0, "%s", msg);
    c.attrs[2] = A_INT("n_kv_heads", 5);
    expect_refusal(&c, "n_kv_heads is 5", "divide n_heads");
    c.attrs[2] = A_INT("n_kv_heads", 8);
    c.in[1] = DESC(BATON_DTYPE_BF16, 100, 256);
    expect_refusal(&c, "k_cache", "512");
    c.in[1] = c.in[2];
    c.in[2] = DESC(BATON_DTYPE_F16, 100, 512);
    expect_refusal(&c, "v_cache", "f16");
    c.in[2] = c.in[1];
    c.in[3] = DESC(BATON_DTYPE_F32, 1);
    expect_refusal(&c, "positions", "i32 or i64");
    c.in[3] = DESC(BATON_DTYPE_I64, 2);
    expect_refusal(&c, "positions", "[1]");
    c.in[3] = DESC(BATON_DTYPE_I64, 1);
    c.in[0] = DESC(BATON_DTYPE_BF16, 1, 2000);
    expect_refusal(&c, "q", "2048");

    call r = {.target = "rope", .n_in = 3, .n_attrs = 1};
    r.in[0] = DESC(BATON_DTYPE_BF16, 3, 96);
    r.in[1] = DESC(BATON_DTYPE_I64, 3);
    r.in[2] = DESC(BATON_DTYPE_F32, 16);
    r.out = r.in[0];
    r.attrs[0] = A_INT("head_dim", 32);
    cr_assert_eq(check_call(&r, &want, msg, sizeof msg), 0, "%s", msg);
    r.attrs[0] = A_INT("head_dim", 7);
    expect_refusal(&r, "head_dim is 7", "even");
    r.attrs[0] = A_INT("head_dim", 64);
    expect_refusal(&r, "96 features", "head_dim 64");
    r.attrs[0] = A_INT("head_dim", 32);
    r.in[2] = DESC(BATON_DTYPE_F32, 32);
    expect_refusal(&r, "inv_freq", "f32 [16]");
    r.in[2] = DESC(BATON_DTYPE_F32, 16);
    r.n_attrs = 0;
    expect_refusal(&r, "head_dim", NULL);

    call s = {.target = "sample", .n_in = 2, .n_attrs = 1};
    s.in[0] = DESC(BATON_DTYPE_F32, 2, 100);
    s.in[1] = DESC(BATON_DTYPE_I64, 1);
    s.out = DESC(BATON_DTYPE_I64, 2);
    s.attrs[0] = A_FLT("temperature", 0);
    expect_refusal(&s, "temperature is 0", "argmax");
    s.attrs[0] = A_FLT("top_p", 1.5);
    expect_refusal(&s, "top_p is 1.5", "(0, 1]");
    s.attrs[0] = A_INT("top_k", 101);
    expect_refusal(&s, "top_k is 101", "at most 100");
    s.attrs[0] = A_INT("top_k", -1);
    expect_refusal(&s, "top_k", "[0,");

    call e = {.target = "embedding", .n_in = 2};
    e.in[0] = DESC(BATON_DTYPE_F32, 3);
    e.in[1] = DESC(BATON_DTYPE_BF16, 10, 4);
    e.out = DESC(BATON_DTYPE_BF16, 3, 4);
    expect_refusal(&e, "ids", "i32 or i64");
    e.in[0] = DESC(BATON_DTYPE_I64, 3);
    e.in[1] = DESC(BATON_DTYPE_BF16, 40);
    expect_refusal(&e, "table", "[V, D]");

    call k = {.target = "kv_cache_update", .n_in = 3};
    k.in[0] = DESC(BATON_DTYPE_BF16, 16, 64);
    k.in[1] = DESC(BATON_DTYPE_F32, 1, 64);
    k.in[2] = DESC(BATON_DTYPE_I64, 1);
    k.out = k.in[0];
    expect_refusal(&k, "new", "one dtype");
    k.in[1] = DESC(BATON_DTYPE_BF16, 2, 64);
    expect_refusal(&k, "positions", "[2]");

    call m = {.target = "silu_mul", .n_in = 2};
    m.in[0] = DESC(BATON_DTYPE_BF16, 4, 8);
    m.in[1] = DESC(BATON_DTYPE_BF16, 4, 9);
    m.out = m.in[0];
    expect_refusal(&m, "[4, 9]", "[4, 8]");

    call ca = {.target = "cast", .n_in = 1};
    ca.in[0] = DESC(BATON_DTYPE_F32, 4);
    ca.out = DESC(BATON_DTYPE_I32, 4);
    expect_refusal(&ca, "i32", "bf16, f16, f32 or f64");
}

Test(decoder_check, names_the_plans_tensors)
{
    call c = {.target = "silu_mul", .n_in = 2};
    c.in[0] = DESC(BATON_DTYPE_BF16, 4, 8);
    c.in[1] = DESC(BATON_DTYPE_F16, 4, 8);
    c.out = c.in[0];
    const char *in_names[] = {"gate", "up"}, *out_names[] = {"act"};
    baton_sig_args a = sig_of(&c);
    a.input_names = in_names;
    a.output_names = out_names;
    char msg[512] = "";
    baton_tensor_desc want;
    const baton_target *t = baton_registry_find(registry(), "silu_mul");
    cr_assert_eq(t->check(&a, &want, msg, sizeof msg), BATON_EPLAN);
    cr_assert(strstr(msg, "b 'up' is f16") && strstr(msg, "a 'gate' is bf16"), "%s", msg);
}

Test(decoder_check, kernels_refuse_another_ops_descriptor_and_a_missing_sig)
{
    call c = {.target = "silu", .n_in = 1};
    c.in[0] = DESC(BATON_DTYPE_F32, 4);
    c.out = c.in[0];
    baton_sig_args a = sig_of(&c);
    const baton_target *t = baton_registry_find(registry(), "silu"),
                       *g = baton_registry_find(registry(), "gelu");
    char opaque[BATON_OPAQUE_MAX], err[512];
    int n = t->pack(&a, opaque, sizeof opaque);
    float x[4] = {0}, y[4];
    void *bufs[] = {x, y};
    baton_exec_ctx ctx = {.errbuf = err, .errbuf_len = sizeof err, .sig = &a};
    const baton_target_impl *gi = baton_target_impl_for(g, BATON_DEVICE_CPU);
    cr_assert_eq(gi->kernel(&ctx, bufs, opaque, (size_t)n), BATON_EINVAL);
    cr_assert(strstr(err, "for op 6 (silu)"), "%s", err);
    const baton_target_impl *si = baton_target_impl_for(t, BATON_DEVICE_CPU);
    cr_assert_eq(si->kernel(&ctx, bufs, opaque, (size_t)n - 1), BATON_EINVAL);
    cr_assert(strstr(err, "55 bytes but must be 56"), "%s", err);
    ctx.sig = NULL;
    cr_assert_eq(si->kernel(&ctx, bufs, opaque, (size_t)n), BATON_EINVAL);
    cr_assert(strstr(err, "ctx->sig"), "%s", err);
}

/* A plan of run-time size: the kernel takes the shapes of the call's sig, not those packed. */
Test(decoder_check, kernels_read_shapes_from_the_sig_of_each_call)
{
    call c = {.target = "softmax", .n_in = 1};
    c.in[0] = DESC(BATON_DTYPE_F32, 8, 4);
    c.out = c.in[0];
    baton_sig_args a = sig_of(&c);
    const baton_target *t = baton_registry_find(registry(), "softmax");
    char opaque[BATON_OPAQUE_MAX], err[512];
    int n = t->pack(&a, opaque, sizeof opaque);
    float x[32], y[32];
    for (int i = 0; i < 32; i++) {
        x[i] = (float)i;
        y[i] = -1;
    }
    c.in[0].shape[0] = 2; /* the run binds 2 rows */
    c.out = c.in[0];
    void *bufs[] = {x, y};
    baton_exec_ctx ctx = {.errbuf = err, .errbuf_len = sizeof err, .sig = &a};
    cr_assert_eq(baton_target_impl_for(t, BATON_DEVICE_CPU)->kernel(&ctx, bufs, opaque, (size_t)n),
                 0, "%s", err);
    cr_assert(y[7] > 0 && y[8] == -1, "rows past the sig's 2 were written");
}

/* The built-in table: every decoder op once, a CPU kernel, CUDA where built, the cache alias. */
Test(decoder_check, registers_every_op_and_the_cache_alias)
{
    static const char *ops[] = {"embedding", "rope", "kv_cache_update", "attention", "silu_mul",
                                "silu",      "gelu", "softmax",         "cast",      "sample"};
    for (int i = 0; i < 10; i++) {
        const baton_target *t = baton_registry_find(registry(), ops[i]);
        cr_assert(t, "%s is not registered", ops[i]);
        cr_assert(baton_target_impl_for(t, BATON_DEVICE_CPU), "%s has no CPU kernel", ops[i]);
#ifdef BATON_CUDA
        cr_assert(baton_target_impl_for(t, BATON_DEVICE_CUDA), "%s has no CUDA kernel", ops[i]);
#endif
        cr_assert_eq(t->n_aliases, i == 2, "%s: %d aliases", ops[i], t->n_aliases);
    }
    const baton_target *k = baton_registry_find(registry(), "kv_cache_update");
    cr_assert(k->aliases[0].output == 0 && k->aliases[0].input == 0);
}

/* A plan's verbatim "opaque" for a decoder op is decoded and checked at load. */
Test(decoder_check, checks_a_plans_opaque_descriptor_at_load)
{
    const char *fmt =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"o\", \"tensors\": ["
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"},"
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}],"
        "\"steps\": [{\"name\": \"s\", \"kernel\": \"silu\", \"device\": \"cpu\", "
        "\"inputs\": [\"x\"], \"outputs\": [\"y\"], \"opaque\": \"%s\"}]}";
    baton_decoder_desc d = {.op = DEC_SILU};
    char hex[2 * sizeof d + 1], json[1024];
    for (size_t i = 0; i < sizeof d; i++)
        snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)&d)[i]);
    baton_plan *plan = NULL;
    baton_error err;
    snprintf(json, sizeof json, fmt, hex);
    cr_assert_eq(
        baton_plan_load_string(registry(), json, strlen(json), "o.json", NULL, &plan, &err), 0,
        "%s", err.message);
    baton_plan_free(plan);
    d.op = DEC_GELU; /* another op's descriptor */
    for (size_t i = 0; i < sizeof d; i++)
        snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)&d)[i]);
    snprintf(json, sizeof json, fmt, hex);
    cr_assert_eq(
        baton_plan_load_string(registry(), json, strlen(json), "o.json", NULL, &plan, &err),
        BATON_EPLAN);
    cr_assert(strstr(err.message, "\"opaque\" descriptor") && strstr(err.message, "for op 7"), "%s",
              err.message);
    snprintf(json, sizeof json, fmt, "0011");
    cr_assert_eq(
        baton_plan_load_string(registry(), json, strlen(json), "o.json", NULL, &plan, &err),
        BATON_EPLAN);
    cr_assert(strstr(err.message, "2 bytes but must be 56"), "%s", err.message);
}

/* Through a runtime, in graph mode: an id out of range fails the run (on CUDA at its end, where
 * the host waits), naming the step; the next run with good ids succeeds (the record was cleared).
 */
static void run_with_bad_id(const char *device, baton_gpu_backend gpu)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"e\", \"tensors\": ["
             "{\"name\": \"ids\", \"dtype\": \"i64\", \"shape\": [2], \"role\": \"input\"},"
             "{\"name\": \"table\", \"dtype\": \"bf16\", \"shape\": [10, 64], \"role\": "
             "\"constant\", \"init\": {\"kind\": \"normal\", \"seed\": 1, \"mean\": 0, "
             "\"std\": 1}},"
             "{\"name\": \"y\", \"dtype\": \"bf16\", \"shape\": [2, 64], \"role\": \"output\"}],"
             "\"steps\": [{\"name\": \"emb\", \"kernel\": \"embedding\", \"device\": \"%s\", "
             "\"inputs\": [\"ids\", \"table\"], \"outputs\": [\"y\"]}]}",
             device);
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(
        baton_plan_load_string(registry(), json, strlen(json), "e.json", NULL, &plan, &err), 0,
        "%s", err.message);
    baton_runtime *rt = test_runtime(plan, gpu, BATON_SYNC_GRAPH, 0, 1);
    int64_t bad[2] = {3, 12}, good[2] = {3, 9};
    cr_assert_eq(baton_runtime_set_input(rt, "ids", bad, sizeof bad, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), BATON_EKERNEL);
    cr_assert(strstr(err.message, "step 'emb'") && strstr(err.message, "ids[1] = 12") &&
                  strstr(err.message, "[0, 10)"),
              "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "ids", good, sizeof good, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

Test(decoder_embedding, a_run_fails_naming_the_step_of_an_id_out_of_range)
{
    run_with_bad_id("cpu", BATON_GPU_AUTO);
}
Test(gpu_embedding, a_run_fails_naming_the_step_of_an_id_out_of_range)
{
    skip_without_gpu();
    run_with_bad_id("cuda:0", BATON_GPU_CUDA);
}

/* Two steps out of range in one run, kv_cache_update's position and then embedding's id (on CUDA
 * each kernel file keeps its own record, read in another order): the run names the first step,
 * and the next run with good indices succeeds (every record was cleared). */
static void run_with_two_bad_steps(const char *device, baton_gpu_backend gpu)
{
    char json[1536];
    snprintf(json, sizeof json,
             "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"e2\", \"tensors\": ["
             "{\"name\": \"cache\", \"dtype\": \"f32\", \"shape\": [8, 64], \"role\": \"state\"},"
             "{\"name\": \"new\", \"dtype\": \"f32\", \"shape\": [2, 64], \"role\": \"input\"},"
             "{\"name\": \"pos\", \"dtype\": \"i64\", \"shape\": [2], \"role\": \"input\"},"
             "{\"name\": \"ids\", \"dtype\": \"i64\", \"shape\": [2], \"role\": \"input\"},"
             "{\"name\": \"table\", \"dtype\": \"f32\", \"shape\": [10, 64], \"role\": "
             "\"constant\", \"init\": {\"kind\": \"normal\", \"seed\": 1, \"mean\": 0, "
             "\"std\": 1}},"
             "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [2, 64], \"role\": \"output\"}],"
             "\"steps\": [{\"name\": \"kv\", \"kernel\": \"kv_cache_update\", \"device\": "
             "\"%s\", \"inputs\": [\"cache\", \"new\", \"pos\"], \"outputs\": [\"cache\"]},"
             "{\"name\": \"emb\", \"kernel\": \"embedding\", \"device\": \"%s\", "
             "\"inputs\": [\"ids\", \"table\"], \"outputs\": [\"y\"]}]}",
             device, device);
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(
        baton_plan_load_string(registry(), json, strlen(json), "e2.json", NULL, &plan, &err), 0,
        "%s", err.message);
    baton_runtime *rt = test_runtime(plan, gpu, BATON_SYNC_GRAPH, 0, 1);
    float rows[2 * 64] = {0};
    int64_t bad_pos[2] = {0, 9}, bad_ids[2] = {3, 12}, pos[2] = {0, 1}, ids[2] = {3, 9};
    cr_assert_eq(baton_runtime_set_input(rt, "new", rows, sizeof rows, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "pos", bad_pos, sizeof bad_pos, &err), 0, "%s",
                 err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "ids", bad_ids, sizeof bad_ids, &err), 0, "%s",
                 err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), BATON_EKERNEL);
    cr_assert(strstr(err.message, "step 'kv'") && strstr(err.message, "positions[1] = 9") &&
                  strstr(err.message, "[0, 8)"),
              "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "pos", pos, sizeof pos, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "ids", ids, sizeof ids, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

Test(decoder_embedding, a_run_with_two_steps_out_of_range_names_the_first)
{
    run_with_two_bad_steps("cpu", BATON_GPU_AUTO);
}
Test(gpu_embedding, a_run_with_two_steps_out_of_range_names_the_first)
{
    skip_without_gpu();
    run_with_two_bad_steps("cuda:0", BATON_GPU_CUDA);
}

/* ---- the fused targets: the bits of the unfused ones ----------------------------------------- */

/* Runs target with n_in inputs and n_out outputs on a device; output k is written into input
 * alias[k]'s buffer when alias[k] >= 0. outs[k] receives output k (host). */
static int run_multi(baton_device_kind kind, const char *target, int n_in,
                     const baton_tensor_desc *in, void *const *host, int n_out,
                     const baton_tensor_desc *outd, const int *alias, void **outs,
                     const baton_attr *attrs, int n_attrs, char *err, size_t err_len)
{
    const baton_target *t = baton_registry_find(registry(), target);
    cr_assert(t, "%s is not registered", target);
    baton_sig_args a = {.n_inputs = n_in,
                        .inputs = in,
                        .n_outputs = n_out,
                        .outputs = outd,
                        .n_attrs = n_attrs,
                        .attrs = attrs};
    baton_tensor_desc want[4];
    char msg[512] = "", opaque[BATON_OPAQUE_MAX];
    cr_assert_eq(t->check(&a, want, msg, sizeof msg), 0, "%s: %s", target, msg);
    int n = t->pack(&a, opaque, sizeof opaque);
    const baton_target_impl *impl = baton_target_impl_for(t, kind);
    baton_exec_ctx ctx = {.device = {.kind = kind},
                          .step_name = "test",
                          .errbuf = err,
                          .errbuf_len = err_len,
                          .sig = &a};
    void *bufs[12];
    int rc;
    if (kind == BATON_DEVICE_CPU) {
        void *copies[8];
        for (int i = 0; i < n_in; i++) {
            copies[i] = malloc(nbytes(&in[i]) + 16);
            memcpy(copies[i], host[i], nbytes(&in[i]));
            bufs[i] = copies[i];
        }
        for (int k = 0; k < n_out; k++) {
            if (alias[k] < 0)
                test_poison(outs[k], nbytes(&outd[k]));
            bufs[n_in + k] = alias[k] >= 0 ? copies[alias[k]] : outs[k];
        }
        rc = impl->kernel(&ctx, bufs, opaque, (size_t)n);
        for (int k = 0; k < n_out; k++)
            if (alias[k] >= 0)
                memcpy(outs[k], copies[alias[k]], nbytes(&outd[k]));
        for (int i = 0; i < n_in; i++)
            free(copies[i]);
        return rc;
    }
#ifdef BATON_CUDA
    cudaStream_t st;
    cr_assert_eq(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    ctx.stream = st;
    for (int i = 0; i < n_in; i++) {
        cr_assert_eq(cudaMalloc(&bufs[i], nbytes(&in[i]) + 16), cudaSuccess);
        cr_assert_eq(cudaMemcpy(bufs[i], host[i], nbytes(&in[i]), cudaMemcpyHostToDevice),
                     cudaSuccess);
    }
    for (int k = 0; k < n_out; k++) {
        if (alias[k] >= 0) {
            bufs[n_in + k] = bufs[alias[k]];
        } else {
            cr_assert_eq(cudaMalloc(&bufs[n_in + k], nbytes(&outd[k]) + 16), cudaSuccess);
            cr_assert_eq(cudaMemset(bufs[n_in + k], 0xff, nbytes(&outd[k])), cudaSuccess);
        }
    }
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    rc = impl->kernel(&ctx, bufs, opaque, (size_t)n);
    cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
    if (rc == 0)
        rc = baton__kcuda_decoder_error_take(0, NULL, err, err_len);
    for (int k = 0; k < n_out; k++)
        cr_assert_eq(cudaMemcpy(outs[k], bufs[n_in + k], nbytes(&outd[k]), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (int i = 0; i < n_in; i++)
        cudaFree(bufs[i]);
    for (int k = 0; k < n_out; k++)
        if (alias[k] < 0)
            cudaFree(bufs[n_in + k]);
    cudaStreamDestroy(st);
    return rc;
#else
    cr_skip("this build has no CUDA");
    return -1;
#endif
}

/* swiglu(gu) against silu_mul(gu[:, :F], gu[:, F:]), bit for bit, every dtype. */
static void swiglu_table(baton_device_kind kind)
{
    /* F of no whole 16 bytes (7, 8191) takes CUDA's kernel that reads each half's 16-byte
     * vectors and shifts them to y's boundaries (7 in bf16 and f16, under one vector, its kernel
     * of single values); the last two only on CUDA: the loops that keep several units or values
     * in flight a thread (see EW_N) */
    static const int64_t RF[][2] = {{1, 8192}, {3, 24},      {5, 7},
                                    {2, 8191}, {1025, 8192}, {1025, 8191}};
    const size_t nrf = sizeof RF / sizeof RF[0] - (kind == BATON_DEVICE_CUDA ? 0 : 2);
    for (size_t k = 0; k < nrf; k++)
        for (int f = 0; f < 4; f++) {
            test_rng r = {test_fresh_seed()};
            const baton_dtype dt = FLOATS[f];
            const int64_t rows = RF[k][0], F = RF[k][1];
            const size_t esz = baton_dtype_size(dt);
            baton_tensor_desc gd = DESC(dt, 1, rows, 2 * F), yd = DESC(dt, 1, rows, F);
            char *gu = rand_buf(&r, &gd, 3.0), *a = malloc(rows * F * esz),
                 *b = malloc(rows * F * esz);
            for (int64_t t = 0; t < rows; t++) {
                memcpy(a + t * F * esz, gu + 2 * t * F * esz, F * esz);
                memcpy(b + t * F * esz, gu + (2 * t + 1) * F * esz, F * esz);
            }
            void *y1 = malloc(nbytes(&yd)), *y2 = malloc(nbytes(&yd));
            char err[512];
            const int none[1] = {-1};
            void *h1[1] = {gu}, *o1[1] = {y1};
            cr_assert_eq(
                run_multi(kind, "swiglu", 1, &gd, h1, 1, &yd, none, o1, NULL, 0, err, sizeof err),
                0, "%s", err);
            call c = {.target = "silu_mul", .n_in = 2};
            c.in[0] = yd;
            c.in[1] = yd;
            c.out = yd;
            c.host[0] = a;
            c.host[1] = b;
            cr_assert_eq(run_call(kind, &c, y2, err, sizeof err), 0, "%s", err);
            cr_assert(memcmp(y1, y2, nbytes(&yd)) == 0,
                      "swiglu %s [%lld, 2x%lld] differs from silu_mul", baton_dtype_name(dt),
                      (long long)rows, (long long)F);
            free(y1);
            free(y2);
            free_call(&c);
            free(gu);
        }
}

Test(decoder_fused, swiglu_gives_silu_muls_bits)
{
    swiglu_table(BATON_DEVICE_CPU);
}
Test(gpu_fused, swiglu_gives_silu_muls_bits)
{
    skip_without_gpu();
    swiglu_table(BATON_DEVICE_CUDA);
}

/* swiglu of gu and y inside larger buffers, each at its own offset from a 16-byte boundary (views;
 * F a multiple of 8 and odd): on CUDA the kernel that shifts 16-byte vectors into place, in blocks
 * of 256 threads for large work and of fewer for a few rows, and a decode row's kernel; the bits
 * of the same call at 16 bytes, and nothing written outside y (run_call's slack). */
static void swiglu_offsets(baton_device_kind kind)
{
    static const int64_t RF[][2] = {{1025, 8192}, {1025, 8191}, {2, 8192}, {1, 8191}};
    static const int SH[][2] = {{1, 0}, {0, 3}, {3, 5}, {7, 1}}; /* elements past 16 bytes */
    for (size_t k = 0; k < sizeof RF / sizeof RF[0]; k++)
        for (int f = 0; f < 4; f++) {
            test_rng r = {test_fresh_seed()};
            const baton_dtype dt = FLOATS[f];
            const int64_t rows = RF[k][0], F = RF[k][1];
            const int esz = (int)baton_dtype_size(dt);
            call c = {.target = "swiglu", .n_in = 1};
            c.in[0] = DESC(dt, rows, 2 * F);
            c.out = DESC(dt, rows, F);
            c.host[0] = rand_buf(&r, &c.in[0], 3.0);
            void *y0 = malloc(nbytes(&c.out)), *y1 = malloc(nbytes(&c.out));
            char err[512];
            cr_assert_eq(run_call(kind, &c, y0, err, sizeof err), 0, "%s", err);
            for (size_t i = 0; i < sizeof SH / sizeof SH[0]; i++) {
                c.shift_in = SH[i][0] * esz < 16 ? SH[i][0] * esz : 0;
                c.shift_out = SH[i][1] * esz < 16 ? SH[i][1] * esz : 0;
                cr_assert_eq(run_call(kind, &c, y1, err, sizeof err), 0, "%s", err);
                cr_assert(memcmp(y0, y1, nbytes(&c.out)) == 0,
                          "swiglu %s [%lld, 2x%lld], gu and y %d and %d bytes past 16: other bits "
                          "than at 16",
                          baton_dtype_name(dt), (long long)rows, (long long)F, c.shift_in,
                          c.shift_out);
            }
            free(y0);
            free(y1);
            free_call(&c);
        }
}

Test(gpu_fused, swiglu_at_any_offset_gives_the_aligned_bits)
{
    skip_without_gpu();
    swiglu_offsets(BATON_DEVICE_CUDA);
}

/* rope_cache_update(qkv) against rope(q part), rope(k part) + kv_cache_update, kv_cache_update(v
 * part), bit for bit. */
static void rope_cache_table(baton_device_kind kind)
{
    static const struct {
        int64_t rows, H, Hkv, Dh, S;
        int il;
    } RC[] = {{1, 32, 8, 64, 64, 0},
              {5, 4, 2, 16, 20, 1},
              {3, 2, 1, 6, 9, 0},
              {1, 4, 1, 96, 8, 1},
              {300, 8, 2, 64, 512, 0}};
    for (size_t k = 0; k < sizeof RC / sizeof RC[0]; k++)
        for (int f = 0; f < 4; f++) {
            test_rng r = {test_fresh_seed()};
            const baton_dtype dt = FLOATS[f];
            const int64_t rows = RC[k].rows, Dh = RC[k].Dh, QF = RC[k].H * Dh, KF = RC[k].Hkv * Dh,
                          W = QF + 2 * KF, S = RC[k].S;
            const size_t esz = baton_dtype_size(dt);
            baton_tensor_desc in[5] = {DESC(dt, 1, rows, W), DESC(BATON_DTYPE_I64, rows),
                                       DESC(BATON_DTYPE_F32, Dh / 2), DESC(dt, S, KF),
                                       DESC(dt, S, KF)};
            baton_tensor_desc outd[3] = {DESC(dt, 1, rows, QF), in[3], in[4]};
            char *qkv = rand_buf(&r, &in[0], 1.0);
            int64_t *pos = malloc(8 * (size_t)rows);
            for (int64_t t = 0; t < rows; t++)
                pos[t] = (t * 7 + 3) % S; /* distinct while rows <= S / gcd */
            float *fr = inv_freq(Dh);
            void *kc = rand_buf(&r, &in[3], 1.0), *vc = rand_buf(&r, &in[4], 1.0);
            baton_attr at[4] = {A_INT("head_dim", Dh), A_INT("n_heads", RC[k].H),
                                A_INT("n_kv_heads", RC[k].Hkv), A_BOOL("interleaved", RC[k].il)};
            void *host[5] = {qkv, pos, fr, kc, vc};
            void *q1 = malloc(nbytes(&outd[0])), *k1 = malloc(nbytes(&in[3])),
                 *v1 = malloc(nbytes(&in[4]));
            void *outs[3] = {q1, k1, v1};
            const int alias[3] = {-1, 3, 4};
            char err[512];
            cr_assert_eq(run_multi(kind, "rope_cache_update", 5, in, host, 3, outd, alias, outs, at,
                                   4, err, sizeof err),
                         0, "%s", err);
            /* the unfused steps */
            char *qp = malloc(rows * QF * esz), *kp = malloc(rows * KF * esz),
                 *vp = malloc(rows * KF * esz);
            for (int64_t t = 0; t < rows; t++) {
                memcpy(qp + t * QF * esz, qkv + t * W * esz, QF * esz);
                memcpy(kp + t * KF * esz, qkv + (t * W + QF) * esz, KF * esz);
                memcpy(vp + t * KF * esz, qkv + (t * W + QF + KF) * esz, KF * esz);
            }
            call rq = {.target = "rope", .n_in = 3, .n_attrs = 2};
            rq.in[0] = DESC(dt, rows, QF);
            rq.in[1] = in[1];
            rq.in[2] = in[2];
            rq.out = rq.in[0];
            rq.attrs[0] = A_INT("head_dim", Dh);
            rq.attrs[1] = A_BOOL("interleaved", RC[k].il);
            rq.host[0] = qp;
            rq.host[1] = pos;
            rq.host[2] = fr;
            void *q2 = malloc(nbytes(&rq.out));
            cr_assert_eq(run_call(kind, &rq, q2, err, sizeof err), 0, "%s", err);
            call rk = rq;
            rk.in[0] = DESC(dt, rows, KF);
            rk.out = rk.in[0];
            rk.host[0] = kp;
            void *k_roped = malloc(nbytes(&rk.out));
            cr_assert_eq(run_call(kind, &rk, k_roped, err, sizeof err), 0, "%s", err);
            call uk = {.target = "kv_cache_update", .n_in = 3, .alias0 = 1};
            uk.in[0] = in[3];
            uk.in[1] = DESC(dt, rows, KF);
            uk.in[2] = in[1];
            uk.out = in[3];
            uk.host[0] = malloc(nbytes(&in[3]));
            memcpy(uk.host[0], kc, nbytes(&in[3]));
            uk.host[1] = k_roped;
            uk.host[2] = pos;
            void *k2 = malloc(nbytes(&in[3])), *v2 = malloc(nbytes(&in[4]));
            cr_assert_eq(run_call(kind, &uk, k2, err, sizeof err), 0, "%s", err);
            memcpy(uk.host[0], vc, nbytes(&in[4]));
            uk.host[1] = vp;
            cr_assert_eq(run_call(kind, &uk, v2, err, sizeof err), 0, "%s", err);
            cr_assert(memcmp(q1, q2, nbytes(&outd[0])) == 0, "case %zu %s: q differs from rope's",
                      k, baton_dtype_name(dt));
            cr_assert(memcmp(k1, k2, nbytes(&in[3])) == 0, "case %zu %s: k_cache differs", k,
                      baton_dtype_name(dt));
            cr_assert(memcmp(v1, v2, nbytes(&in[4])) == 0, "case %zu %s: v_cache differs", k,
                      baton_dtype_name(dt));
            free(uk.host[0]);
            free(q1), free(k1), free(v1), free(q2), free(k2), free(v2), free(k_roped);
            free(qp), free(kp), free(vp), free(qkv), free(pos), free(fr), free(kc), free(vc);
        }
}

Test(decoder_fused, rope_cache_update_gives_rope_and_cache_update_bits)
{
    rope_cache_table(BATON_DEVICE_CPU);
}
Test(gpu_fused, rope_cache_update_gives_rope_and_cache_update_bits)
{
    skip_without_gpu();
    rope_cache_table(BATON_DEVICE_CUDA);
}

/* A position outside the caches: the error names it; the rows at valid positions are the only
 * cache rows that change (CUDA drops the bad row's k and v, the CPU writes nothing). */
static void rope_cache_bad_pos(baton_device_kind kind)
{
    test_rng r = {test_fresh_seed()};
    const int64_t H = 4, Hkv = 2, Dh = 16, S = 9, rows = 2, QF = H * Dh, KF = Hkv * Dh;
    baton_tensor_desc in[5] = {DESC(BATON_DTYPE_BF16, rows, QF + 2 * KF),
                               DESC(BATON_DTYPE_I64, rows), DESC(BATON_DTYPE_F32, Dh / 2),
                               DESC(BATON_DTYPE_BF16, S, KF), DESC(BATON_DTYPE_BF16, S, KF)};
    baton_tensor_desc outd[3] = {DESC(BATON_DTYPE_BF16, rows, QF), in[3], in[4]};
    char *qkv = rand_buf(&r, &in[0], 1.0), *kc = rand_buf(&r, &in[3], 1.0),
         *vc = rand_buf(&r, &in[4], 1.0);
    int64_t pos[2] = {3, 9};
    float *fr = inv_freq(Dh);
    void *host[5] = {qkv, pos, fr, kc, vc};
    void *q = malloc(nbytes(&outd[0])), *k1 = malloc(nbytes(&in[3])), *v1 = malloc(nbytes(&in[4]));
    void *outs[3] = {q, k1, v1};
    const int alias[3] = {-1, 3, 4};
    baton_attr at[3] = {A_INT("head_dim", Dh), A_INT("n_heads", H), A_INT("n_kv_heads", Hkv)};
    char err[512];
    int rc = run_multi(kind, "rope_cache_update", 5, in, host, 3, outd, alias, outs, at, 3, err,
                       sizeof err);
    cr_assert_eq(rc, BATON_EKERNEL, "position 9 in caches of 9 rows gave %d", rc);
    cr_assert(strstr(err, "positions[1] = 9") && strstr(err, "[0, 9)"), "message: %s", err);
    const size_t row = (size_t)KF * 2;
    for (int64_t p = 0; p < S; p++)
        if (p != 3 || kind == BATON_DEVICE_CPU) {
            cr_assert(memcmp((char *)k1 + p * row, kc + p * row, row) == 0, "k_cache row %lld",
                      (long long)p);
            cr_assert(memcmp((char *)v1 + p * row, vc + p * row, row) == 0, "v_cache row %lld",
                      (long long)p);
        }
    free(q), free(k1), free(v1), free(qkv), free(kc), free(vc), free(fr);
}

Test(decoder_fused, rope_cache_update_refuses_a_position_outside_the_caches)
{
    rope_cache_bad_pos(BATON_DEVICE_CPU);
}
Test(gpu_fused, rope_cache_update_records_a_position_outside_the_caches)
{
    skip_without_gpu();
    rope_cache_bad_pos(BATON_DEVICE_CUDA);
}

/* gemm_add through a runtime: y = x W^T + c against float64, f32 and bf16. */
static void gemm_add_case(const char *device, baton_gpu_backend gpu, baton_dtype dt)
{
    const int64_t M = 3, K = 40, N = 24;
    char json[1400];
    const char *d = baton_dtype_name(dt);
    snprintf(
        json, sizeof json,
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"ga\", \"tensors\": ["
        "{\"name\": \"x\", \"dtype\": \"%s\", \"shape\": [1, %lld, %lld], \"role\": \"input\"},"
        "{\"name\": \"w\", \"dtype\": \"%s\", \"shape\": [%lld, %lld], \"role\": \"input\"},"
        "{\"name\": \"c\", \"dtype\": \"%s\", \"shape\": [1, %lld, %lld], \"role\": \"input\"},"
        "{\"name\": \"y\", \"dtype\": \"%s\", \"shape\": [1, %lld, %lld], \"role\": \"output\"}],"
        "\"steps\": [{\"name\": \"ga\", \"delegate\": \"gemm_add\", \"device\": \"%s\", "
        "\"inputs\": [\"x\", \"w\", \"c\"], \"outputs\": [\"y\"], \"attrs\": {\"trans_b\": "
        "true}}]}",
        d, (long long)M, (long long)K, d, (long long)N, (long long)K, d, (long long)M, (long long)N,
        d, (long long)M, (long long)N, device);
    baton_plan *plan = NULL;
    baton_error err;
    cr_assert_eq(
        baton_plan_load_string(registry(), json, strlen(json), "ga.json", NULL, &plan, &err), 0,
        "%s", err.message);
    baton_runtime *rt = test_runtime(plan, gpu, BATON_SYNC_GRAPH, 0, 1);
    test_rng r = {test_fresh_seed()};
    baton_tensor_desc xd = DESC(dt, 1, M, K), wd = DESC(dt, N, K), cd = DESC(dt, 1, M, N);
    void *x = rand_buf(&r, &xd, 1.0), *w = rand_buf(&r, &wd, 1.0), *c = rand_buf(&r, &cd, 1.0);
    void *y = malloc(nbytes(&cd));
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, nbytes(&xd), &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "w", w, nbytes(&wd), &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "c", c, nbytes(&cd), &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, nbytes(&cd), &err), 0, "%s", err.message);
    double ref[3 * 24];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = load_f64(dt, c, i * N + j);
            for (int64_t k = 0; k < K; k++)
                s += load_f64(dt, x, i * K + k) * load_f64(dt, w, j * K + k);
            ref[i * N + j] = s;
        }
    double e = test_rel_err(dt, y, ref, M * N);
    cr_assert(e <= (dt == BATON_DTYPE_F32 ? 1e-5 : 1e-2), "gemm_add %s on %s: rel err %.3g", d,
              device, e);
    free(x), free(w), free(c), free(y);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

Test(decoder_fused, gemm_add_adds_c_to_the_product)
{
    gemm_add_case("cpu", BATON_GPU_AUTO, BATON_DTYPE_F32);
    gemm_add_case("cpu", BATON_GPU_AUTO, BATON_DTYPE_BF16);
}
Test(gpu_fused, gemm_add_adds_c_to_the_product)
{
    skip_without_gpu();
    gemm_add_case("cuda:0", BATON_GPU_CUDA, BATON_DTYPE_F32);
    gemm_add_case("cuda:0", BATON_GPU_CUDA, BATON_DTYPE_BF16);
}

/* ---- the calls read once at prepare ------------------------------------------------------- */

/* The CUDA kernels' prepare hook keeps a call's descriptor and shapes (baton__dec_prepare); a
 * kernel's read (baton__dec_call_decide) then gives what a fresh read gives while the descriptor
 * and the signature's tensors are those it kept, reads again when the signature changes in place
 * (a binding of the plan's dims), and refuses what a fresh read refuses, with its words. Device
 * independent: run on the CPU. */
Test(decoder_prepared, keeps_a_call_until_its_signature_changes)
{
    call c = {.target = "rope", .n_in = 3};
    c.in[0] = DESC(BATON_DTYPE_BF16, 4, 256);
    c.in[1] = DESC(BATON_DTYPE_I64, 4);
    c.in[2] = DESC(BATON_DTYPE_F32, 32);
    c.out = c.in[0];
    c.attrs[0] = A_INT("head_dim", 64);
    c.n_attrs = 1;
    baton_sig_args a = sig_of(&c);
    const baton_target *t = baton_registry_find(registry(), "rope");
    char opaque[BATON_OPAQUE_MAX];
    const int n = t->pack(&a, opaque, sizeof opaque);
    cr_assert_eq(n, (int)sizeof(baton_decoder_desc));
    char buf[4][16], err[512] = "", err2[512] = "";
    void *bufs[4] = {buf[0], buf[1], buf[2], buf[3]};
    baton_exec_ctx ctx = {.step_name = "test", .errbuf = err, .errbuf_len = sizeof err, .sig = &a};
    void *state = NULL;
    cr_assert_eq(baton__dec_prepare(&ctx, DEC_ROPE, bufs, 4, opaque, (size_t)n, &state), 0, "%s",
                 err);
    cr_assert(state, "a call that reads is kept");
    baton_decoder_desc d0, d1;
    dec_shape s0, s1;
    for (int rows = 4; rows <= 8; rows += 4) {
        c.in[0].shape[0] = c.in[1].shape[0] = c.out.shape[0] = rows; /* in place, as dims do */
        ctx.prepared = NULL;
        cr_assert_eq(baton__dec_call_read(&ctx, DEC_ROPE, bufs, 4, opaque, (size_t)n, &d0, &s0), 0);
        ctx.prepared = state;
        for (int k = 0; k < 2; k++) { /* the second read is the kept one */
            memset(&d1, 0xab, sizeof d1);
            memset(&s1, 0xab, sizeof s1);
            cr_assert_eq(
                baton__dec_call_decide(&ctx, DEC_ROPE, bufs, 4, opaque, (size_t)n, &d1, &s1), 0,
                "%s", err);
            cr_assert(memcmp(&d0, &d1, sizeof d0) == 0 && memcmp(&s0, &s1, sizeof s0) == 0,
                      "rows %d, read %d: the kept call differs from a fresh read", rows, k);
            cr_assert_eq(s1.rows, rows);
        }
    }
    /* shapes that no longer agree, and a NULL buffer: the fresh read's refusals, word for word */
    c.in[1].shape[0] = 5;
    ctx.prepared = NULL;
    ctx.errbuf = err2;
    cr_assert_neq(baton__dec_call_read(&ctx, DEC_ROPE, bufs, 4, opaque, (size_t)n, &d0, &s0), 0);
    ctx.prepared = state;
    ctx.errbuf = err;
    cr_assert_neq(baton__dec_call_decide(&ctx, DEC_ROPE, bufs, 4, opaque, (size_t)n, &d1, &s1), 0);
    cr_assert_str_eq(err, err2);
    cr_assert(strstr(err, "positions"), "%s", err);
    c.in[1].shape[0] = 8;
    bufs[2] = NULL;
    cr_assert_neq(baton__dec_call_decide(&ctx, DEC_ROPE, bufs, 4, opaque, (size_t)n, &d1, &s1), 0);
    cr_assert(strstr(err, "buffer 2 of 4 is NULL"), "%s", err);
    bufs[2] = buf[2];
    cr_assert_eq(baton__dec_call_decide(&ctx, DEC_ROPE, bufs, 4, opaque, (size_t)n, &d1, &s1), 0,
                 "%s", err);
    /* another descriptor (another step's bytes) is read, not taken for the kept one */
    baton_decoder_desc other;
    memcpy(&other, opaque, sizeof other);
    other.scale = 0.5;
    cr_assert_eq(baton__dec_call_decide(&ctx, DEC_ROPE, bufs, 4, (const char *)&other, sizeof other,
                                        &d1, &s1),
                 0, "%s", err);
    cr_assert_eq(d1.scale, 0.5);
    free(state);
}
