/* test_gemm_cpu.c: the gemm delegate's signature (shapes, transposes, folded batch dims, the
 * descriptor's byte layout) and its OpenBLAS backend against a float64 reference for every dtype
 * and transpose, on fresh random inputs with the output poisoned first. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "delegates/gemm.h"
#include "targets/builtin.h"
#include "core/dtype.h"
#include "tests/support.h"

static const baton_dtype DTYPES[4] = {BATON_DTYPE_F32, BATON_DTYPE_F64, BATON_DTYPE_BF16,
                                      BATON_DTYPE_F16};

static baton_tensor_desc mkdesc(baton_dtype dt, const int64_t *shape, int rank)
{
    baton_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt;
    d.rank = rank;
    for (int i = 0; i < rank; i++)
        d.shape[i] = shape[i];
    return d;
}
#define SHAPE(...)    (int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8)
#define DESC(dt, ...) mkdesc(dt, SHAPE(__VA_ARGS__))

static baton_attr attr_b(const char *name, int v)
{
    return (baton_attr){.name = name, .type = BATON_ATTR_BOOL, .i = v};
}
static baton_attr attr_f(const char *name, double v)
{
    return (baton_attr){.name = name, .type = BATON_ATTR_FLOAT, .f = v};
}
static baton_attr attr_i(const char *name, int64_t v)
{
    return (baton_attr){.name = name, .type = BATON_ATTR_INT, .i = v, .f = (double)v};
}

static baton_sig_args sig(const baton_tensor_desc *in, int n_attrs, const baton_attr *attrs)
{
    return (baton_sig_args){
        .n_inputs = 2, .inputs = in, .n_outputs = 1, .n_attrs = n_attrs, .attrs = attrs};
}

static void expect_out(const baton_sig_args *a, baton_tensor_desc want)
{
    char msg[512] = "";
    baton_tensor_desc got;
    int rc = baton__target_gemm.check(a, &got, msg, sizeof msg);
    cr_assert_eq(rc, 0, "gemm check() rejected a good signature: %s", msg);
    cr_assert_eq(got.dtype, want.dtype);
    cr_assert_eq(got.rank, want.rank, "rank %d, want %d", got.rank, want.rank);
    for (int i = 0; i < want.rank; i++)
        cr_assert_eq(got.shape[i], want.shape[i], "dim %d: %lld, want %lld", i,
                     (long long)got.shape[i], (long long)want.shape[i]);
}

static void expect_bad(const baton_sig_args *a, const char *w1, const char *w2)
{
    char msg[512] = "";
    baton_tensor_desc got;
    int rc = baton__target_gemm.check(a, &got, msg, sizeof msg);
    cr_assert_eq(rc, BATON_EPLAN, "gemm check() accepted a bad signature");
    cr_assert(strchr(msg, '\n') == NULL && strlen(msg) > 10, "bad reason: \"%s\"", msg);
    cr_assert(!w1 || strstr(msg, w1), "reason \"%s\" does not mention \"%s\"", msg, w1);
    cr_assert(!w2 || strstr(msg, w2), "reason \"%s\" does not mention \"%s\"", msg, w2);
    char op[BATON_OPAQUE_MAX];
    cr_assert_lt(baton__target_gemm.pack(a, op, sizeof op), 0, "pack() accepted it");
}

Test(gemm_check, gives_m_by_n_and_folds_as_leading_dims_into_m)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_BF16, 8, 4096), DESC(BATON_DTYPE_BF16, 4096, 512)};
    baton_sig_args a = sig(in, 0, NULL);
    expect_out(&a, DESC(BATON_DTYPE_BF16, 8, 512));
    in[0] = DESC(BATON_DTYPE_BF16, 2, 3, 4096);
    expect_out(&a, DESC(BATON_DTYPE_BF16, 2, 3, 512));
    baton_gemm_desc d;
    cr_assert_eq(baton__gemm_resolve(&a, &d, NULL, NULL, 0), 0);
    cr_assert_eq(d.m, 6);
    cr_assert_eq(d.n, 512);
    cr_assert_eq(d.k, 4096);
}

Test(gemm_check, reads_the_transposed_layouts)
{
    baton_attr at[3] = {attr_b("trans_a", 1), attr_b("trans_b", 1), attr_i("alpha", 2)};
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F32, 5, 3), DESC(BATON_DTYPE_F32, 7, 5)};
    baton_sig_args a = sig(in, 3, at);
    expect_out(&a, DESC(BATON_DTYPE_F32, 3, 7));
    char op[BATON_OPAQUE_MAX];
    memset(op, 0xab, sizeof op);
    cr_assert_eq(baton__target_gemm.pack(&a, op, sizeof op), 48);
    int64_t m, n, k;
    int32_t dt, flags;
    double alpha, beta;
    memcpy(&m, op + 0, 8);
    memcpy(&n, op + 8, 8);
    memcpy(&k, op + 16, 8);
    memcpy(&dt, op + 24, 4);
    memcpy(&flags, op + 28, 4);
    memcpy(&alpha, op + 32, 8);
    memcpy(&beta, op + 40, 8);
    cr_assert_eq(m, 3);
    cr_assert_eq(n, 7);
    cr_assert_eq(k, 5);
    cr_assert_eq(dt, BATON_DTYPE_F32);
    cr_assert_eq(flags, BATON_GEMM_TRANS_A | BATON_GEMM_TRANS_B);
    cr_assert_eq(alpha, 2.0, "an integer alpha is accepted");
    cr_assert_eq(beta, 0.0);
    cr_assert_eq((unsigned char)op[48], 0xab, "pack wrote past its 48 bytes");
    cr_assert_lt(baton__target_gemm.pack(&a, op, 47), 0, "pack() into too small a buffer");
    a = sig(in, 1, at + 1); /* only trans_b: a [5,3] is [M=5, K=3], b [7,5] has K=5 */
    expect_bad(&a, "K = 3", "dim 1");
}

Test(gemm_check, rejects_mismatched_k_with_the_fix)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F32, 8, 4096), DESC(BATON_DTYPE_F32, 512, 4096)};
    baton_sig_args a = sig(in, 0, NULL);
    expect_bad(&a, "K = 4096", "trans_b to true");
}

Test(gemm_check, rejects_bad_dtypes_ranks_and_attribute_values)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_I32, 4, 4), DESC(BATON_DTYPE_I32, 4, 4)};
    baton_sig_args a = sig(in, 0, NULL);
    expect_bad(&a, "a is i32", "f32, f64, bf16 or f16");
    in[0] = DESC(BATON_DTYPE_F32, 4, 4);
    in[1] = DESC(BATON_DTYPE_F16, 4, 4);
    expect_bad(&a, "b is f16", "one dtype");
    in[1] = DESC(BATON_DTYPE_F32, 2, 4, 4);
    expect_bad(&a, "b has shape [2, 4, 4]", "2-D");
    in[0] = DESC(BATON_DTYPE_F32, 4);
    in[1] = DESC(BATON_DTYPE_F32, 4, 4);
    expect_bad(&a, "a has shape [4]", "[M, K]");
    in[0] = DESC(BATON_DTYPE_F32, 2, 4, 4);
    baton_attr ta[1] = {attr_b("trans_a", 1)};
    a = sig(in, 1, ta);
    expect_bad(&a, "trans_a", "2-D");
    in[0] = DESC(BATON_DTYPE_F32, 0, 4);
    a = sig(in, 0, NULL);
    expect_bad(&a, "dim of 0", NULL);
    in[0] = DESC(BATON_DTYPE_F32, 4, 4);
    baton_attr al[1] = {attr_f("alpha", NAN)};
    a = sig(in, 1, al);
    expect_bad(&a, "alpha", "finite");
    baton_attr bad_bool[1] = {attr_i("trans_a", 2)};
    a = sig(in, 1, bad_bool);
    expect_bad(&a, "trans_a", "true or false");
}

/* ---- numerics ---------------------------------------------------------------------------------
 */

/* C[m][n] = alpha * sum_k op(A)[m][k] * op(B)[k][n], from the stored (rounded) inputs. */
static void ref_gemm(baton_dtype dt, const void *a, const void *b, int64_t m, int64_t n, int64_t k,
                     int ta, int tb, double alpha, double *c)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++) {
                double av = load_f64(dt, a, ta ? p * m + i : i * k + p);
                double bv = load_f64(dt, b, tb ? j * k + p : p * n + j);
                s += av * bv;
            }
            c[i * n + j] = alpha * s;
        }
}

static void *rnd(test_rng *r, baton_dtype dt, int64_t n)
{
    void *p = malloc((size_t)n * baton_dtype_size(dt));
    cr_assert(p);
    test_fill_random(r, dt, p, n, 1.0);
    return p;
}

/* init + execute (twice, to check the state is reusable) + compare. */
static void gemm_case(test_rng *rng, uint64_t seed, baton_dtype dt, const baton_tensor_desc *ad,
                      const baton_tensor_desc *bd, int ta, int tb, double alpha)
{
    baton_tensor_desc in[2] = {*ad, *bd};
    in[0].dtype = in[1].dtype = dt;
    baton_attr at[3] = {attr_b("trans_a", ta), attr_b("trans_b", tb), attr_f("alpha", alpha)};
    baton_sig_args a = sig(in, 3, at);
    baton_gemm_desc d;
    char msg[512];
    cr_assert_eq(baton__gemm_resolve(&a, &d, NULL, msg, sizeof msg), 0, "%s", msg);
    baton_device cpu = {BATON_DEVICE_CPU, 0};
    baton_target_kind kind = BATON_TARGET_DELEGATE;
    baton_delegate_init info = {.step_index = 0,
                                .step_name = "proj",
                                .device = cpu,
                                .sig = &a,
                                .n_steps = 1,
                                .step_devices = &cpu,
                                .step_kinds = &kind};
    const baton_delegate_iface *iface = &baton__gemm_openblas_iface;
    void *state = NULL;
    baton_error err = {0};
    cr_assert_eq(iface->init(&info, &state, &err), 0, "init: %s", err.message);
    void *A = rnd(rng, dt, d.m * d.k), *B = rnd(rng, dt, d.k * d.n);
    size_t cbytes = (size_t)(d.m * d.n) * baton_dtype_size(dt);
    void *C = malloc(cbytes);
    double *ref = malloc(sizeof(double) * (size_t)(d.m * d.n));
    cr_assert(C && ref);
    ref_gemm(dt, A, B, d.m, d.n, d.k, ta, tb, alpha, ref);
    char errbuf[256] = "";
    baton_exec_ctx ctx = {
        .device = cpu, .step_name = "proj", .errbuf = errbuf, .errbuf_len = sizeof errbuf};
    void *bufs[3] = {A, B, C};
    /* the exact result rounded to the output's dtype is as close as any kernel can come: its error
     * (a few per cent for a lone f16 product in the subnormal range, below 6e-5) is allowed */
    void *best = malloc(cbytes);
    cr_assert(best && baton_convert(best, dt, ref, BATON_DTYPE_F64, d.m * d.n) == 0);
    const double floor_err = test_rel_err(dt, best, ref, d.m * d.n);
    free(best);
    for (int rep = 0; rep < 2; rep++) {
        test_poison(C, cbytes);
        cr_assert_eq(iface->execute(state, &ctx, bufs), 0, "execute: %s", errbuf);
        double e = test_rel_err(dt, C, ref, d.m * d.n);
        /* f32 accumulation over K terms on top of the output's rounding. */
        double tol =
            test_tolerance(dt) + (dt == BATON_DTYPE_F64 ? 0 : 2e-7 * sqrt((double)d.k)) + floor_err;
        cr_assert_leq(e, tol,
                      "gemm %s m=%lld n=%lld k=%lld ta=%d tb=%d alpha=%g: rel err %g > %g (seed "
                      "%llu)",
                      baton_dtype_name(dt), (long long)d.m, (long long)d.n, (long long)d.k, ta, tb,
                      alpha, e, tol, (unsigned long long)seed);
    }
    iface->destroy(state);
    free(A), free(B), free(C), free(ref);
}

Test(gemm_cpu, matches_the_float64_reference_for_every_dtype_and_transpose)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 130, 257}};
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 4; s++)
            for (int t = 0; t < 4; t++) {
                int ta = t & 1, tb = (t >> 1) & 1;
                int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                baton_tensor_desc ad = ta ? DESC(DTYPES[d], k, m) : DESC(DTYPES[d], m, k);
                baton_tensor_desc bd = tb ? DESC(DTYPES[d], n, k) : DESC(DTYPES[d], k, n);
                double alpha = t == 3 ? -0.5 + test_rng_uniform(&rng) : 1.0;
                gemm_case(&rng, seed, DTYPES[d], &ad, &bd, ta, tb, alpha);
            }
}

Test(gemm_cpu, multiplies_a_batch_folded_into_m)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    for (int d = 0; d < 4; d++) {
        baton_tensor_desc ad = DESC(DTYPES[d], 3, 5, 31), bd = DESC(DTYPES[d], 31, 9);
        gemm_case(&rng, seed, DTYPES[d], &ad, &bd, 0, 0, 1.0);
        bd = DESC(DTYPES[d], 9, 31);
        gemm_case(&rng, seed, DTYPES[d], &ad, &bd, 0, 1, 2.0);
    }
}

/* A plan with dims rebinds the step's signature to fewer rows than init's max: execute()
 * multiplies ctx->sig's M rows (the reference's), and leaves the rows past them as they were. */
/* One run of the CPU gemm's step as the runtime binds it (signature ra) on a, b and c */
static int execute_as(void *state, baton_sig_args *ra, void *a, void *b, void *c, char *errbuf,
                      size_t len)
{
    baton_exec_ctx ctx = {.device = {BATON_DEVICE_CPU, 0},
                          .step_name = "proj",
                          .sig = ra,
                          .errbuf = errbuf,
                          .errbuf_len = len};
    void *bufs[3] = {a, b, c};
    return baton__gemm_openblas_iface.execute(state, &ctx, bufs);
}

/* The CPU gemm's state for a step of signature a (one step, on the CPU) */
static void *init_cpu(baton_sig_args *a)
{
    baton_device cpu = {BATON_DEVICE_CPU, 0};
    baton_target_kind kind = BATON_TARGET_DELEGATE;
    baton_delegate_init info = {.step_name = "proj",
                                .device = cpu,
                                .sig = a,
                                .n_steps = 1,
                                .step_devices = &cpu,
                                .step_kinds = &kind};
    void *state = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__gemm_openblas_iface.init(&info, &state, &err), 0, "%s", err.message);
    return state;
}

Test(gemm_cpu, follows_the_runs_m_from_the_signature)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    const int64_t max_m = 20, n = 9, k = 31;
    const int64_t ms[] = {20, 1, 7, 3, 20, 2};
    for (int d = 0; d < 4; d++)
        for (int ta = 0; ta < 2; ta++) {
            baton_dtype dt = DTYPES[d];
            baton_tensor_desc in[2] = {ta ? DESC(dt, k, max_m) : DESC(dt, max_m, k),
                                       DESC(dt, k, n)};
            baton_attr at[1] = {attr_b("trans_a", ta)};
            baton_sig_args a = sig(in, 1, at);
            void *state = init_cpu(&a);
            const size_t es = baton_dtype_size(dt), cbytes = (size_t)(max_m * n) * es;
            unsigned char *C = malloc(cbytes), *poison = malloc(cbytes);
            double *ref = malloc(sizeof(double) * (size_t)(max_m * n));
            cr_assert(C && poison && ref);
            test_poison(poison, cbytes);
            for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
                const int64_t m = ms[i];
                baton_tensor_desc rin[2] = {ta ? DESC(dt, k, m) : DESC(dt, m, k), in[1]};
                baton_sig_args ra = sig(rin, 1, at);
                void *A = rnd(&rng, dt, m * k), *B = rnd(&rng, dt, k * n);
                ref_gemm(dt, A, B, m, n, k, ta, 0, 1.0, ref);
                memcpy(C, poison, cbytes);
                char errbuf[256] = "";
                cr_assert_eq(execute_as(state, &ra, A, B, C, errbuf, sizeof errbuf), 0, "%s",
                             errbuf);
                double e = test_rel_err(dt, C, ref, m * n);
                double tol = test_tolerance(dt) + (dt == BATON_DTYPE_F64 ? 0 : 2e-7 * sqrt(31.0));
                cr_expect_leq(e, tol, "%s ta=%d M=%lld of %lld: rel err %g (seed %llu)",
                              baton_dtype_name(dt), ta, (long long)m, (long long)max_m, e,
                              (unsigned long long)seed);
                const size_t used = (size_t)(m * n) * es;
                cr_expect(memcmp(C + used, poison + used, cbytes - used) == 0,
                          "%s ta=%d M=%lld: rows past the run's M were written",
                          baton_dtype_name(dt), ta, (long long)m);
                free(A), free(B);
            }
            baton__gemm_openblas_iface.destroy(state);
            free(C), free(poison), free(ref);
        }
}

/* A run's K below the prepared one (an exporter's one-hot row selection [1, 1, seq] by [seq, D]
 * contracts over the plan's dim): the product over the run's K only, whatever the buffers hold
 * past it (NaN here: another run's values), at few rows (the GEMV) and many (BLAS), a and b in
 * every layout. */
Test(gemm_cpu, contracts_over_the_runs_k_from_the_signature)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    const int64_t max_k = 40, n = 9;
    const int64_t ks[] = {40, 1, 17, 3, 40, 29};
    for (int d = 0; d < 4; d++)
        for (int64_t m = 1; m <= 33; m += 32) /* the GEMV's rows, then BLAS's */
            for (int t = 0; t < 4; t++) {
                const int ta = t & 1, tb = t >> 1;
                const baton_dtype dt = DTYPES[d];
                baton_tensor_desc in[2] = {ta ? DESC(dt, max_k, m) : DESC(dt, m, max_k),
                                           tb ? DESC(dt, n, max_k) : DESC(dt, max_k, n)};
                baton_attr at[2] = {attr_b("trans_a", ta), attr_b("trans_b", tb)};
                baton_sig_args a = sig(in, 2, at);
                void *state = init_cpu(&a);
                const size_t es = baton_dtype_size(dt);
                void *C = malloc((size_t)(m * n) * es);
                double *ref = malloc(sizeof(double) * (size_t)(m * n));
                unsigned char *A = malloc((size_t)(m * max_k) * es),
                              *B = malloc((size_t)(max_k * n) * es);
                cr_assert(C && ref && A && B);
                for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
                    const int64_t k = ks[i];
                    baton_tensor_desc rin[2] = {ta ? DESC(dt, k, m) : DESC(dt, m, k),
                                                tb ? DESC(dt, n, k) : DESC(dt, k, n)};
                    baton_sig_args ra = sig(rin, 2, at);
                    test_poison(A, (size_t)(m * max_k) * es); /* NaN past the run's values */
                    test_poison(B, (size_t)(max_k * n) * es);
                    test_fill_random(&rng, dt, A, m * k, 1.0);
                    test_fill_random(&rng, dt, B, k * n, 1.0);
                    ref_gemm(dt, A, B, m, n, k, ta, tb, 1.0, ref);
                    char errbuf[256] = "";
                    cr_assert_eq(execute_as(state, &ra, A, B, C, errbuf, sizeof errbuf), 0, "%s",
                                 errbuf);
                    const double e = test_rel_err(dt, C, ref, m * n);
                    const double tol =
                        test_tolerance(dt) + (dt == BATON_DTYPE_F64 ? 0 : 2e-7 * sqrt(40.0));
                    cr_expect_leq(e, tol,
                                  "%s M=%lld ta=%d tb=%d K=%lld of %lld: rel err %g (seed %llu)",
                                  baton_dtype_name(dt), (long long)m, ta, tb, (long long)k,
                                  (long long)max_k, e, (unsigned long long)seed);
                }
                baton__gemm_openblas_iface.destroy(state);
                free(A), free(B), free(C), free(ref);
            }
}

/* N never follows a plan's dims, and a run's b must contract over the run's K: refused with the
 * reason, never a product of mismatched shapes */
Test(gemm_cpu, refuses_a_run_whose_n_or_b_disagrees)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F32, 4, 8), DESC(BATON_DTYPE_F32, 8, 6)};
    baton_sig_args a = sig(in, 0, NULL);
    void *state = init_cpu(&a);
    float A[32] = {0}, B[48] = {0}, C[24];
    const struct {
        baton_tensor_desc a, b;
        const char *says;
    } bad[] = {{DESC(BATON_DTYPE_F32, 4, 8), DESC(BATON_DTYPE_F32, 8, 5), "N = 5 where"},
               {DESC(BATON_DTYPE_F32, 4, 6), DESC(BATON_DTYPE_F32, 8, 6), "its b K = 8"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        baton_tensor_desc rin[2] = {bad[i].a, bad[i].b};
        baton_sig_args ra = sig(rin, 0, NULL);
        char errbuf[256] = "";
        cr_expect_eq(execute_as(state, &ra, A, B, C, errbuf, sizeof errbuf), BATON_EINVAL);
        cr_expect(strstr(errbuf, bad[i].says), "'%s' does not say '%s'", errbuf, bad[i].says);
    }
    baton__gemm_openblas_iface.destroy(state);
}

Test(gemm_cpu, init_rejects_a_bad_signature_naming_the_step)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F32, 8, 16), DESC(BATON_DTYPE_F32, 8, 16)};
    baton_sig_args a = sig(in, 0, NULL);
    baton_device cpu = {BATON_DEVICE_CPU, 0};
    baton_delegate_init info = {.step_name = "proj", .device = cpu, .sig = &a, .n_steps = 1};
    void *state = (void *)1;
    baton_error err = {0};
    int rc = baton__gemm_openblas_iface.init(&info, &state, &err);
    cr_assert_eq(rc, BATON_EPLAN);
    cr_assert_eq(err.code, BATON_EPLAN);
    cr_assert_null(state);
    cr_assert(strstr(err.message, "proj") && strstr(err.message, "K = 16"), "%s", err.message);
    cr_assert_eq(baton__gemm_openblas_iface.init(NULL, &state, NULL), BATON_EINVAL);
}

Test(gemm_cpu, init_refuses_sizes_beyond_openblas_int_range)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F32, 3000000000LL, 1), DESC(BATON_DTYPE_F32, 1, 1)};
    baton_sig_args a = sig(in, 0, NULL);
    baton_delegate_init info = {.step_name = "big", .sig = &a};
    void *state = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__gemm_openblas_iface.init(&info, &state, &err), BATON_ENOTSUP);
    cr_assert(strstr(err.message, "big") && strstr(err.message, "split"), "%s", err.message);
}

Test(gemm_cpu, execute_reports_missing_buffers_or_state_instead_of_crashing)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_BF16, 4, 4), DESC(BATON_DTYPE_BF16, 4, 4)};
    baton_sig_args a = sig(in, 0, NULL);
    baton_delegate_init info = {.step_name = "proj", .sig = &a};
    void *state = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__gemm_openblas_iface.init(&info, &state, &err), 0, "%s", err.message);
    uint16_t A[16] = {0}, C[16];
    char errbuf[256] = "";
    baton_exec_ctx ctx = {.errbuf = errbuf, .errbuf_len = sizeof errbuf};
    void *bufs[3] = {A, NULL, C};
    cr_assert_eq(baton__gemm_openblas_iface.execute(state, &ctx, bufs), BATON_EINVAL);
    cr_assert(strstr(errbuf, "NULL"), "%s", errbuf);
    cr_assert_eq(baton__gemm_openblas_iface.execute(state, NULL, NULL), BATON_EINVAL);
    cr_assert_eq(baton__gemm_openblas_iface.execute(NULL, &ctx, bufs), BATON_EINVAL);
    baton__gemm_openblas_iface.destroy(state);
    baton__gemm_openblas_iface.destroy(NULL);
}
