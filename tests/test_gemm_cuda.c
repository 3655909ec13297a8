/* test_gemm_cuda.c: the cuBLASLt gemm delegate against a float64 reference, for every dtype and
 * transpose, on fresh random inputs with poisoned outputs; its capture safety; and its init
 * errors. The iface is called directly, with a baton_delegate_init built here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <cuda_runtime.h>

#include "delegates/cuda/cublaslt_algos.h"
#include "delegates/cuda/gemm_cublaslt.h"
#include "core/dtype.h"
#include "tests/support.h"

#define SKIP_WITHOUT_GPU()                                                                         \
    do {                                                                                           \
        if (test_cuda_devices() == 0)                                                              \
            cr_skip("no CUDA device on this machine: the cuBLASLt gemm needs one");                \
    } while (0)

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        cr_assert(e_ == cudaSuccess, "%s failed: %s", #call, cudaGetErrorString(e_));              \
    } while (0)

/* One gemm step as the validator would hand it to init(). */
typedef struct gemm_case {
    baton_dtype dt;
    int64_t m, n, k;
    int ta, tb;
    double alpha;
    /* storage */
    baton_tensor_desc in[2], out[1];
    baton_attr attrs[3];
    baton_sig_args sig;
    baton_device devs[1];
    baton_target_kind kinds[1];
    baton_delegate_init info;
} gemm_case;

static void case_init(gemm_case *c, baton_dtype dt, int64_t m, int64_t n, int64_t k, int ta, int tb,
                      double alpha, cudaStream_t stream)
{
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->m = m, c->n = n, c->k = k, c->ta = ta, c->tb = tb, c->alpha = alpha;
    c->in[0] = (baton_tensor_desc){.dtype = dt, .rank = 2};
    c->in[0].shape[0] = ta ? k : m;
    c->in[0].shape[1] = ta ? m : k;
    c->in[1] = (baton_tensor_desc){.dtype = dt, .rank = 2};
    c->in[1].shape[0] = tb ? n : k;
    c->in[1].shape[1] = tb ? k : n;
    c->out[0] = (baton_tensor_desc){.dtype = dt, .rank = 2};
    c->out[0].shape[0] = m;
    c->out[0].shape[1] = n;
    c->attrs[0] = (baton_attr){.name = "trans_a", .type = BATON_ATTR_BOOL, .i = ta};
    c->attrs[1] = (baton_attr){.name = "trans_b", .type = BATON_ATTR_BOOL, .i = tb};
    c->attrs[2] = (baton_attr){.name = "alpha", .type = BATON_ATTR_FLOAT, .f = alpha};
    c->sig = (baton_sig_args){.n_inputs = 2,
                              .inputs = c->in,
                              .n_outputs = 1,
                              .outputs = c->out,
                              .n_attrs = 3,
                              .attrs = c->attrs};
    c->devs[0] = (baton_device){BATON_DEVICE_CUDA, 0};
    c->kinds[0] = BATON_TARGET_DELEGATE;
    c->info = (baton_delegate_init){.step_index = 0,
                                    .step_name = "proj",
                                    .device = c->devs[0],
                                    .stream = stream,
                                    .sig = &c->sig,
                                    .n_steps = 1,
                                    .step_devices = c->devs,
                                    .step_kinds = c->kinds};
}

/* The context of a run of case c's step as the runtime rebinds it to r's shapes (r.sig) */
static baton_exec_ctx rebound_ctx(const gemm_case *c, const gemm_case *r, cudaStream_t stream,
                                  char *errbuf, size_t errbuf_len)
{
    return (baton_exec_ctx){.device = c->devs[0],
                            .stream = stream,
                            .step_name = "proj",
                            .sig = &r->sig,
                            .errbuf = errbuf,
                            .errbuf_len = errbuf_len};
}

/* C = alpha * op(A) op(B) in float64 from the stored (already rounded) operands. */
static void reference(const gemm_case *c, const void *a, const void *b, double *ref)
{
    const int64_t M = c->m, N = c->n, K = c->k;
    double *bd = malloc((size_t)(K * N) * sizeof *bd); /* B as K x N, row-major, in f64 */
    cr_assert(bd);
    for (int64_t kk = 0; kk < K; kk++)
        for (int64_t j = 0; j < N; j++)
            bd[kk * N + j] = load_f64(c->dt, b, c->tb ? j * K + kk : kk * N + j);
    for (int64_t i = 0; i < M; i++) {
        double *row = ref + i * N;
        for (int64_t j = 0; j < N; j++)
            row[j] = 0;
        for (int64_t kk = 0; kk < K; kk++) {
            double av = load_f64(c->dt, a, c->ta ? kk * M + i : i * K + kk);
            const double *br = bd + kk * N;
            for (int64_t j = 0; j < N; j++)
                row[j] += av * br[j];
        }
        for (int64_t j = 0; j < N; j++)
            row[j] *= c->alpha;
    }
    free(bd);
}

/* Device buffers of one case, `shift` elements past a cudaMalloc'd (256-byte aligned) base. */
typedef struct gemm_bufs {
    void *base[3];
    void *dev[3]; /* a, b, c */
    void *host[3];
    size_t bytes[3];
} gemm_bufs;

static void bufs_alloc(gemm_bufs *g, const gemm_case *c, int shift)
{
    size_t es = baton_dtype_size(c->dt);
    g->bytes[0] = (size_t)(c->m * c->k) * es;
    g->bytes[1] = (size_t)(c->k * c->n) * es;
    g->bytes[2] = (size_t)(c->m * c->n) * es;
    for (int i = 0; i < 3; i++) {
        CU(cudaMalloc(&g->base[i], g->bytes[i] + 256));
        g->dev[i] = (char *)g->base[i] + (size_t)shift * es;
        g->host[i] = malloc(g->bytes[i]);
        cr_assert(g->host[i]);
    }
}

static void bufs_free(gemm_bufs *g)
{
    for (int i = 0; i < 3; i++) {
        cudaFree(g->base[i]);
        free(g->host[i]);
    }
}

/* Fresh random a and b on the device; c poisoned (NaN) on the device. */
static void bufs_fill(gemm_bufs *g, const gemm_case *c, test_rng *rng)
{
    test_fill_random(rng, c->dt, g->host[0], c->m * c->k, 1.0);
    test_fill_random(rng, c->dt, g->host[1], c->k * c->n, 1.0);
    CU(cudaMemcpy(g->dev[0], g->host[0], g->bytes[0], cudaMemcpyHostToDevice));
    CU(cudaMemcpy(g->dev[1], g->host[1], g->bytes[1], cudaMemcpyHostToDevice));
    CU(cudaMemset(g->dev[2], 0xff, g->bytes[2]));
    CU(cudaDeviceSynchronize());
}

/* The relative error of the device's c against the float64 reference. */
static double bufs_check(gemm_bufs *g, const gemm_case *c)
{
    CU(cudaMemcpy(g->host[2], g->dev[2], g->bytes[2], cudaMemcpyDeviceToHost));
    double *ref = malloc((size_t)(c->m * c->n) * sizeof *ref);
    cr_assert(ref);
    reference(c, g->host[0], g->host[1], ref);
    double e = test_rel_err(c->dt, g->host[2], ref, c->m * c->n);
    free(ref);
    return e;
}

/* f32 must be computed in f32, not TF32 (whose 10-bit mantissa gives ~1e-4 here). */
static double tolerance(baton_dtype dt)
{
    return test_tolerance(dt);
}

static void run_case(baton_dtype dt, int64_t m, int64_t n, int64_t k, int ta, int tb, double alpha,
                     int shift)
{
    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gemm_case c;
    case_init(&c, dt, m, n, k, ta, tb, alpha, stream);
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    gemm_bufs g;
    bufs_alloc(&g, &c, shift);
    bufs_fill(&g, &c, &rng);

    void *state = NULL;
    baton_error err = {0};
    int rc = baton__gemm_cublaslt_iface.init(&c.info, &state, &err);
    cr_assert_eq(rc, 0, "init %s M=%lld N=%lld K=%lld ta=%d tb=%d: %s", baton_dtype_name(dt),
                 (long long)m, (long long)n, (long long)k, ta, tb, err.message);
    char errbuf[256] = "";
    baton_exec_ctx ctx = {.device = c.devs[0],
                          .stream = stream,
                          .next_device = {BATON_DEVICE_NONE, 0},
                          .step_name = "proj",
                          .errbuf = errbuf,
                          .errbuf_len = sizeof errbuf};
    void *buffers[3] = {g.dev[0], g.dev[1], g.dev[2]};
    rc = baton__gemm_cublaslt_iface.execute(state, &ctx, buffers);
    cr_assert_eq(rc, 0, "execute: %s", errbuf);
    CU(cudaStreamSynchronize(stream));
    double e = bufs_check(&g, &c);
    cr_expect(e <= tolerance(dt),
              "%s M=%lld N=%lld K=%lld ta=%d tb=%d alpha=%g shift=%d: rel err %.3g > %.3g "
              "(seed %llu)",
              baton_dtype_name(dt), (long long)m, (long long)n, (long long)k, ta, tb, alpha, shift,
              e, tolerance(dt), (unsigned long long)seed);
    baton__gemm_cublaslt_iface.destroy(state);
    bufs_free(&g);
    cudaStreamDestroy(stream);
}

static const baton_dtype gpu_dtypes[] = {BATON_DTYPE_BF16, BATON_DTYPE_F16, BATON_DTYPE_F32};

Test(gemm_cuda, matches_float64_reference_for_every_dtype_and_transpose)
{
    SKIP_WITHOUT_GPU();
    for (int d = 0; d < 3; d++)
        for (int t = 0; t < 4; t++) {
            run_case(gpu_dtypes[d], 37, 53, 129, t & 1, (t >> 1) & 1, 1.0, 0);
            run_case(gpu_dtypes[d], 64, 96, 512, t & 1, (t >> 1) & 1, -0.75, 0);
        }
}

Test(gemm_cuda, matches_reference_on_the_decode_shape_1x4096_by_4096x4096)
{
    SKIP_WITHOUT_GPU();
    for (int d = 0; d < 3; d++)
        run_case(gpu_dtypes[d], 1, 4096, 4096, 0, 0, 1.0, 0);
    run_case(BATON_DTYPE_BF16, 8, 4096, 4096, 0, 1, 0.5, 0);
}

Test(gemm_cuda, gives_the_right_result_when_buffers_are_only_element_aligned)
{
    SKIP_WITHOUT_GPU();
    for (int d = 0; d < 3; d++) {
        run_case(gpu_dtypes[d], 33, 40, 72, 0, 0, 1.0, 1); /* 2- or 4-byte aligned */
        run_case(gpu_dtypes[d], 32, 48, 64, 1, 1, 1.0, 8); /* 16- or 32-byte aligned */
    }
}

Test(gemm_cuda, folds_leading_dims_of_a_into_m)
{
    SKIP_WITHOUT_GPU();
    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gemm_case c;
    case_init(&c, BATON_DTYPE_BF16, 12, 40, 64, 0, 0, 1.0, stream);
    /* a [3,4,64] and c [3,4,40]: the same memory as a [12,64] and c [12,40] */
    c.in[0].rank = 3;
    c.in[0].shape[0] = 3, c.in[0].shape[1] = 4, c.in[0].shape[2] = 64;
    c.out[0].rank = 3;
    c.out[0].shape[0] = 3, c.out[0].shape[1] = 4, c.out[0].shape[2] = 40;
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    gemm_bufs g;
    bufs_alloc(&g, &c, 0);
    bufs_fill(&g, &c, &rng);
    void *state = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__gemm_cublaslt_iface.init(&c.info, &state, &err), 0, "%s", err.message);
    char errbuf[256] = "";
    baton_exec_ctx ctx = {
        .device = c.devs[0], .stream = stream, .errbuf = errbuf, .errbuf_len = sizeof errbuf};
    void *buffers[3] = {g.dev[0], g.dev[1], g.dev[2]};
    cr_assert_eq(baton__gemm_cublaslt_iface.execute(state, &ctx, buffers), 0, "%s", errbuf);
    CU(cudaStreamSynchronize(stream));
    double e = bufs_check(&g, &c);
    cr_expect(e <= tolerance(c.dt), "rel err %.3g (seed %llu)", e, (unsigned long long)seed);
    baton__gemm_cublaslt_iface.destroy(state);
    bufs_free(&g);
    cudaStreamDestroy(stream);
}

Test(gemm_cuda, execute_is_capture_safe_and_a_replay_reads_new_inputs)
{
    SKIP_WITHOUT_GPU();
    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int d = 0; d < 3; d++) {
        gemm_case c;
        case_init(&c, gpu_dtypes[d], 16, 256, 1024, 0, 1, 1.0, stream);
        uint64_t seed = test_fresh_seed();
        test_rng rng = {seed};
        gemm_bufs g;
        bufs_alloc(&g, &c, 0);
        void *state = NULL;
        baton_error err = {0};
        cr_assert_eq(baton__gemm_cublaslt_iface.init(&c.info, &state, &err), 0, "%s", err.message);
        cr_assert(baton__gemm_cublaslt_iface.capturable);
        char errbuf[256] = "";
        baton_exec_ctx ctx = {.device = c.devs[0],
                              .stream = stream,
                              .capturing = 1,
                              .step_name = "proj",
                              .errbuf = errbuf,
                              .errbuf_len = sizeof errbuf};
        void *buffers[3] = {g.dev[0], g.dev[1], g.dev[2]};
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CU(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        int rc = baton__gemm_cublaslt_iface.execute(state, &ctx, buffers);
        CU(cudaStreamEndCapture(stream, &graph));
        cr_assert_eq(rc, 0, "execute during capture: %s", errbuf);
        CU(cudaGraphInstantiate(&exec, graph, 0));
        for (int rep = 0; rep < 2; rep++) { /* fresh inputs each time, same buffers */
            bufs_fill(&g, &c, &rng);
            CU(cudaGraphLaunch(exec, stream));
            CU(cudaStreamSynchronize(stream));
            double e = bufs_check(&g, &c);
            cr_expect(e <= tolerance(c.dt), "%s replay %d: rel err %.3g (seed %llu)",
                      baton_dtype_name(c.dt), rep, e, (unsigned long long)seed);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        baton__gemm_cublaslt_iface.destroy(state);
        bufs_free(&g);
    }
    cudaStreamDestroy(stream);
}

/* A plan with dims binds fewer rows than init's max: execute() follows ctx->sig's M. Runs at
 * more distinct Ms than the delegate keeps plans for (some twice, after they were evicted), each
 * against the float64 reference, with the rows past M left as poisoned (so the matmul ran at M,
 * not at the max); then graphs captured at two Ms replay each its own M. shift: the buffers that
 * many elements past cudaMalloc's alignment (a run-time plan asks for the tier they meet). */
static void run_dims_case(baton_dtype dt, int ta, int tb, int shift, cudaStream_t stream)
{
    const int64_t max_m = 96, n = 80, k = 136;
    const int64_t ms[] = {96, 1, 17, 64, 1, 2, 3, 5, 7, 9, 11, 13, 96, 33, 17};
    gemm_case c;
    case_init(&c, dt, max_m, n, k, ta, tb, 1.0, stream);
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    gemm_bufs g;
    bufs_alloc(&g, &c, shift);
    void *state = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__gemm_cublaslt_iface.init(&c.info, &state, &err), 0, "%s", err.message);
    char errbuf[256] = "";
    void *buffers[3] = {g.dev[0], g.dev[1], g.dev[2]};
    const size_t es = baton_dtype_size(dt);
    unsigned char *tail = malloc(g.bytes[2]);
    cr_assert(tail);
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        gemm_case r; /* the step as the runtime rebinds it for M = ms[i] */
        case_init(&r, dt, ms[i], n, k, ta, tb, 1.0, stream);
        bufs_fill(&g, &r, &rng);
        baton_exec_ctx ctx = rebound_ctx(&c, &r, stream, errbuf, sizeof errbuf);
        cr_assert_eq(baton__gemm_cublaslt_iface.execute(state, &ctx, buffers), 0,
                     "execute at M=%lld: %s", (long long)ms[i], errbuf);
        CU(cudaStreamSynchronize(stream));
        double e = bufs_check(&g, &r);
        cr_expect(e <= tolerance(dt),
                  "%s ta=%d tb=%d M=%lld of %lld: rel err %.3g > %.3g (seed %llu)",
                  baton_dtype_name(dt), ta, tb, (long long)ms[i], (long long)max_m, e,
                  tolerance(dt), (unsigned long long)seed);
        const size_t used = (size_t)(ms[i] * n) * es;
        CU(cudaMemcpy(tail, g.dev[2], g.bytes[2], cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t b = used; b < g.bytes[2]; b++)
            bad += tail[b] != 0xff;
        cr_expect_eq(bad, 0, "%s M=%lld: %zu bytes written past the run's %lld rows",
                     baton_dtype_name(dt), (long long)ms[i], bad, (long long)ms[i]);
    }

    /* graphs captured at M=5 and M=40 (40 new: captured while the plan is made), each replayed */
    const int64_t gm[2] = {5, 40};
    cudaGraphExec_t exec[2];
    gemm_case r[2];
    for (int i = 0; i < 2; i++) {
        case_init(&r[i], dt, gm[i], n, k, ta, tb, 1.0, stream);
        baton_exec_ctx ctx = {.device = c.devs[0],
                              .stream = stream,
                              .capturing = 1,
                              .step_name = "proj",
                              .sig = &r[i].sig,
                              .errbuf = errbuf,
                              .errbuf_len = sizeof errbuf};
        cudaGraph_t graph;
        CU(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        int rc = baton__gemm_cublaslt_iface.execute(state, &ctx, buffers);
        CU(cudaStreamEndCapture(stream, &graph));
        cr_assert_eq(rc, 0, "execute during capture at M=%lld: %s", (long long)gm[i], errbuf);
        CU(cudaGraphInstantiate(&exec[i], graph, 0));
        cudaGraphDestroy(graph);
    }
    for (int rep = 0; rep < 2; rep++)
        for (int i = 1; i >= 0; i--) {
            bufs_fill(&g, &r[i], &rng);
            CU(cudaGraphLaunch(exec[i], stream));
            CU(cudaStreamSynchronize(stream));
            double e = bufs_check(&g, &r[i]);
            cr_expect(e <= tolerance(dt), "%s graph at M=%lld: rel err %.3g (seed %llu)",
                      baton_dtype_name(dt), (long long)gm[i], e, (unsigned long long)seed);
        }
    for (int i = 0; i < 2; i++)
        cudaGraphExecDestroy(exec[i]);
    free(tail);
    baton__gemm_cublaslt_iface.destroy(state);
    bufs_free(&g);
}

Test(gemm_cuda, follows_the_runs_m_from_the_signature_at_several_m)
{
    SKIP_WITHOUT_GPU();
    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int d = 0; d < 3; d++)
        for (int t = 0; t < 4; t++)
            for (int shift = 0; shift < 9; shift += shift ? 7 : 1) /* 0, 1 and 8 elements */
                run_dims_case(gpu_dtypes[d], t & 1, (t >> 1) & 1, shift, stream);
    cudaStreamDestroy(stream);
}

/* A run's K below the prepared one (an exporter's one-hot row selection contracts over the
 * sequence): the product over the run's K only, with NaN in the buffers past it, at several Ks
 * (some twice), in every layout. */
static void run_k_case(baton_dtype dt, int ta, int tb, cudaStream_t stream)
{
    const int64_t m = 24, n = 40, max_k = 96;
    const int64_t ks[] = {96, 1, 17, 64, 33, 96, 5, 17};
    gemm_case c;
    case_init(&c, dt, m, n, max_k, ta, tb, 1.0, stream);
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    gemm_bufs g;
    bufs_alloc(&g, &c, 0);
    void *state = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__gemm_cublaslt_iface.init(&c.info, &state, &err), 0, "%s", err.message);
    char errbuf[256] = "";
    void *buffers[3] = {g.dev[0], g.dev[1], g.dev[2]};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gemm_case r; /* the step as the runtime rebinds it for K = ks[i] */
        case_init(&r, dt, m, n, ks[i], ta, tb, 1.0, stream);
        test_poison(g.host[0], g.bytes[0]); /* NaN past the run's values */
        test_poison(g.host[1], g.bytes[1]);
        bufs_fill(&g, &r, &rng);
        baton_exec_ctx ctx = rebound_ctx(&c, &r, stream, errbuf, sizeof errbuf);
        cr_assert_eq(baton__gemm_cublaslt_iface.execute(state, &ctx, buffers), 0,
                     "execute at K=%lld: %s", (long long)ks[i], errbuf);
        CU(cudaStreamSynchronize(stream));
        double e = bufs_check(&g, &r);
        cr_expect(e <= tolerance(dt), "%s ta=%d tb=%d K=%lld of %lld: rel err %.3g (seed %llu)",
                  baton_dtype_name(dt), ta, tb, (long long)ks[i], (long long)max_k, e,
                  (unsigned long long)seed);
    }
    baton__gemm_cublaslt_iface.destroy(state);
    bufs_free(&g);
}

Test(gemm_cuda, contracts_over_the_runs_k_from_the_signature)
{
    SKIP_WITHOUT_GPU();
    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int d = 0; d < 3; d++)
        for (int t = 0; t < 4; t++)
            run_k_case(gpu_dtypes[d], t & 1, (t >> 1) & 1, stream);
    cudaStreamDestroy(stream);
}

/* Steps of one shape share cuBLASLt's answers (cublaslt_algos.h): a second step's init and its
 * first run at a new M ask the heuristic nothing, and compute the first step's bits; a step of
 * another N asks for itself. */
Test(gemm_cuda, a_second_step_of_one_shape_asks_the_heuristic_nothing)
{
    SKIP_WITHOUT_GPU();
    const baton_dtype dt = BATON_DTYPE_BF16;
    const int64_t max_m = 64, n = 48, k = 72, m = 23;
    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gemm_case c, r, other;
    case_init(&c, dt, max_m, n, k, 0, 1, 1.0, stream);
    case_init(&r, dt, m, n, k, 0, 1, 1.0, stream); /* the steps as rebound for M = 23 */
    case_init(&other, dt, max_m, n + 8, k, 0, 1, 1.0, stream);
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    gemm_bufs g;
    bufs_alloc(&g, &c, 0);
    bufs_fill(&g, &r, &rng);
    void *state[2] = {NULL, NULL}, *state_other = NULL;
    baton_error err = {0};
    const uint64_t asks0 = baton__lt_algo_asks();
    cr_assert_eq(baton__gemm_cublaslt_iface.init(&c.info, &state[0], &err), 0, "%s", err.message);
    const uint64_t asks1 = baton__lt_algo_asks();
    cr_expect_gt(asks1, asks0, "the first step's init asked nothing");
    cr_assert_eq(baton__gemm_cublaslt_iface.init(&c.info, &state[1], &err), 0, "%s", err.message);
    cr_expect_eq(baton__lt_algo_asks(), asks1, "the second step's init asked again");

    char errbuf[256] = "";
    void *buffers[3] = {g.dev[0], g.dev[1], g.dev[2]};
    unsigned char *out[2];
    uint64_t asks_after[2];
    for (int i = 0; i < 2; i++) {
        baton_exec_ctx ctx = rebound_ctx(&c, &r, stream, errbuf, sizeof errbuf);
        CU(cudaMemset(g.dev[2], 0xff, g.bytes[2]));
        cr_assert_eq(baton__gemm_cublaslt_iface.execute(state[i], &ctx, buffers), 0,
                     "step %d at M=%lld: %s", i, (long long)m, errbuf);
        CU(cudaStreamSynchronize(stream));
        asks_after[i] = baton__lt_algo_asks();
        cr_expect(bufs_check(&g, &r) <= tolerance(dt), "step %d (seed %llu)", i,
                  (unsigned long long)seed);
        out[i] = malloc(g.bytes[2]);
        cr_assert(out[i]);
        memcpy(out[i], g.host[2], g.bytes[2]);
    }
    cr_expect_eq(asks_after[0], asks1 + 1, "the first run at M=%lld asked %llu times", (long long)m,
                 (unsigned long long)(asks_after[0] - asks1));
    cr_expect_eq(asks_after[1], asks_after[0], "the second step's run at M=%lld asked again",
                 (long long)m);
    cr_expect(memcmp(out[0], out[1], g.bytes[2]) == 0, "the two steps' bits differ");

    cr_assert_eq(baton__gemm_cublaslt_iface.init(&other.info, &state_other, &err), 0, "%s",
                 err.message);
    cr_expect_gt(baton__lt_algo_asks(), asks_after[1], "a step of another N took N=%lld's answer",
                 (long long)n);
    baton__gemm_cublaslt_iface.destroy(state_other);
    for (int i = 0; i < 2; i++) {
        baton__gemm_cublaslt_iface.destroy(state[i]);
        free(out[i]);
    }
    bufs_free(&g);
    cudaStreamDestroy(stream);
}

/* A signature binding more rows than init's max is refused, naming both. */
Test(gemm_cuda, refuses_a_run_binding_more_rows_than_prepared)
{
    SKIP_WITHOUT_GPU();
    gemm_case c, r;
    case_init(&c, BATON_DTYPE_BF16, 8, 16, 32, 0, 0, 1.0, NULL);
    case_init(&r, BATON_DTYPE_BF16, 9, 16, 32, 0, 0, 1.0, NULL);
    void *state = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__gemm_cublaslt_iface.init(&c.info, &state, &err), 0, "%s", err.message);
    char errbuf[256] = "";
    baton_exec_ctx ctx = {
        .device = c.devs[0], .sig = &r.sig, .errbuf = errbuf, .errbuf_len = sizeof errbuf};
    void *buffers[3] = {NULL, NULL, NULL};
    cr_expect_eq(baton__gemm_cublaslt_iface.execute(state, &ctx, buffers), BATON_EINVAL);
    cr_expect(strstr(errbuf, "M=9") && strstr(errbuf, "at most 8"), "%s", errbuf);
    baton__gemm_cublaslt_iface.destroy(state);
}

/* These fail before any CUDA call, so they run on machines without a GPU too. */
Test(gemm_cuda, rejects_f64_at_init_giving_the_alternatives)
{
    gemm_case c;
    case_init(&c, BATON_DTYPE_F64, 4, 4, 4, 0, 0, 1.0, NULL);
    void *state = (void *)&c;
    baton_error err = {0};
    int rc = baton__gemm_cublaslt_iface.init(&c.info, &state, &err);
    cr_assert_eq(rc, BATON_ENOTSUP, "rc %d: %s", rc, err.message);
    cr_expect_null(state);
    /* the reason only: the runtime adds the step and device when it prepares the plan */
    cr_expect(!strstr(err.message, "'proj'"), "%s", err.message);
    cr_expect(strstr(err.message, "f64"), "%s", err.message);
    cr_expect(strstr(err.message, "bf16"), "%s", err.message);
}

Test(gemm_cuda, rejects_operands_of_different_dtypes)
{
    gemm_case c;
    case_init(&c, BATON_DTYPE_BF16, 4, 4, 4, 0, 0, 1.0, NULL);
    c.in[1].dtype = BATON_DTYPE_F32;
    void *state = NULL;
    baton_error err = {0};
    int rc = baton__gemm_cublaslt_iface.init(&c.info, &state, &err);
    cr_expect_neq(rc, 0);
    cr_expect_null(state);
    cr_expect(strstr(err.message, "bf16") && !strstr(err.message, "'proj'"), "%s", err.message);
}

Test(gemm_cuda, rejects_mismatched_inner_dimensions)
{
    gemm_case c;
    case_init(&c, BATON_DTYPE_F32, 4, 5, 6, 0, 0, 1.0, NULL);
    c.in[1].shape[0] = 7; /* b [7,5] against a [4,6] */
    void *state = NULL;
    baton_error err = {0};
    int rc = baton__gemm_cublaslt_iface.init(&c.info, &state, &err);
    cr_expect_neq(rc, 0);
    cr_expect_null(state);
    cr_expect(err.message[0] != 0);
}
