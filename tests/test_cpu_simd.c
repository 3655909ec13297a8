/* test_cpu_simd.c: the CPU's vector paths against its scalar ones (conversions, elementwise
 * kernels, argmax: the same bits on every dtype and on tails of 1..67 elements), the thread pool
 * (every task once, the same bits with threads on, off and in an embedder's pool) and baton's own
 * GEMV kernels against float64 at every vector level. BATON_TEST_SEED replays a run's data. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/simd.h"
#include "core/threads.h"
#include "delegates/cpu/gemv.h"
#include "delegates/gemm.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/descriptors.h"
#include "tests/support.h"

static const baton_dtype FLOATS[] = {BATON_DTYPE_BF16, BATON_DTYPE_F16, BATON_DTYPE_F32,
                                     BATON_DTYPE_F64};
static const simd_level LEVELS[] = {SIMD_AVX2, SIMD_AVX512};

/* Random bits, with a share of special values: NaNs of every payload, infinities, zeros,
 * subnormals, and values on the rounding ties of the narrower types. */
static void fill_bits(test_rng *r, baton_dtype dt, void *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t b = test_rng_next(r);
        int kind = (int)(test_rng_next(r) % 8);
        if (dt == BATON_DTYPE_F32) {
            uint32_t u = (uint32_t)b;
            if (kind == 0)
                u = (u & 0x80000000u) | 0x7f800000u | (u & 0x7fffffu); /* inf / NaN */
            else if (kind == 1)
                u &= 0x807fffffu; /* zero / subnormal */
            else if (kind == 2)
                u = (u & 0xffff0000u) | 0x8000u; /* a bf16 tie */
            else if (kind == 3)
                u = (u & 0xffffe000u) | 0x1000u; /* an f16 tie */
            else if (kind == 4)
                u = (u & 0x8fffffffu) | 0x38000000u; /* near f16's subnormal range */
            ((uint32_t *)p)[i] = u;
        } else if (dt == BATON_DTYPE_BF16 || dt == BATON_DTYPE_F16) {
            uint16_t h = (uint16_t)b;
            if (kind == 0)
                h |= dt == BATON_DTYPE_BF16 ? 0x7f80 : 0x7c00;
            ((uint16_t *)p)[i] = h;
        } else {
            double v = test_rng_normal(r) * (kind == 0 ? 1e30 : kind == 1 ? 1e-40 : 1.0);
            ((double *)p)[i] = kind == 2 ? NAN : v;
        }
    }
}

static simd_level set_level(simd_level l)
{
    return baton__simd_level_set(l);
}

Test(cpu_simd, conversions_give_the_scalar_bits_on_every_level_and_tail)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    enum { MAXN = 67 + 64 };
    for (size_t li = 0; li < sizeof LEVELS / sizeof LEVELS[0]; li++) {
        if (set_level(LEVELS[li]) != LEVELS[li])
            continue; /* the CPU has no such level */
        for (int d = 0; d < 2; d++) {
            baton_dtype dt = d ? BATON_DTYPE_F16 : BATON_DTYPE_BF16;
            for (int64_t n = 1; n <= MAXN; n++) {
                uint16_t h[MAXN], h2[MAXN + 1];
                float f[MAXN + 1], ref[MAXN];
                uint32_t fb[MAXN];
                fill_bits(&r, dt, h, n);
                f[n] = 12345.0f; /* nothing past n is written */
                baton__cvt_to_f32(dt, h, f, n);
                for (int64_t i = 0; i < n; i++)
                    ref[i] = dt == BATON_DTYPE_BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
                cr_assert(memcmp(f, ref, sizeof(float) * (size_t)n) == 0 && f[n] == 12345.0f,
                          "%s to f32, %s, n=%lld (seed %llu)", baton_dtype_name(dt),
                          baton__simd_level_name(LEVELS[li]), (long long)n,
                          (unsigned long long)seed);
                fill_bits(&r, BATON_DTYPE_F32, fb, n);
                h2[n] = 0xabcd;
                baton__cvt_from_f32(dt, (const float *)fb, h2, n);
                for (int64_t i = 0; i < n; i++) {
                    float v;
                    memcpy(&v, &fb[i], 4);
                    uint16_t want = dt == BATON_DTYPE_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
                    cr_assert_eq(h2[i], want,
                                 "f32 0x%08x to %s: 0x%04x, scalar 0x%04x, %s, n=%lld (seed %llu)",
                                 fb[i], baton_dtype_name(dt), h2[i], want,
                                 baton__simd_level_name(LEVELS[li]), (long long)n,
                                 (unsigned long long)seed);
                }
                cr_assert_eq(h2[n], 0xabcd);
            }
        }
    }
    baton__simd_level_set(SIMD_AVX512);
}

Test(cpu_simd, baton_convert_between_16_and_32_bit_floats_gives_the_scalar_bits)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    static const baton_dtype T[] = {BATON_DTYPE_BF16, BATON_DTYPE_F16, BATON_DTYPE_F32};
    enum { N = 3000 };
    static uint32_t src[N], out[N], ref[N];
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 3; d++) {
            fill_bits(&r, T[s], src, N);
            baton__simd_level_set(SIMD_SCALAR);
            cr_assert_eq(baton_convert(ref, T[d], src, T[s], N), 0);
            baton__simd_level_set(SIMD_AVX512);
            cr_assert_eq(baton_convert(out, T[d], src, T[s], N), 0);
            cr_assert(memcmp(out, ref, (size_t)N * baton_dtype_size(T[d])) == 0,
                      "%s to %s (seed %llu)", baton_dtype_name(T[s]), baton_dtype_name(T[d]),
                      (unsigned long long)seed);
            /* and the old path through double, element by element */
            /* and the old path through double, element by element (which quiets a signalling
             * NaN on the way: the vector path keeps a NaN's bits, so NaNs compare as NaNs) */
            for (int i = 0; i < N; i++) {
                uint64_t one = 0;
                store_f64_clamped(T[d], &one, 0, load_f64(T[s], src, i));
                double o = load_f64(T[d], out, i), w = load_f64(T[d], &one, 0);
                if (isnan(o) && isnan(w) && signbit(o) == signbit(w))
                    continue;
                cr_assert(memcmp(&one, (char *)out + (size_t)i * baton_dtype_size(T[d]),
                                 baton_dtype_size(T[d])) == 0,
                          "%s to %s element %d", baton_dtype_name(T[s]), baton_dtype_name(T[d]), i);
            }
        }
}

/* Runs kernel fn on n elements (b of nb elements when binary) at `level`, output poisoned. */
static void run_ew(baton_kernel_fn fn, simd_level level, baton_dtype dt, int64_t n, int64_t nb,
                   double value, const void *a, const void *b, void *y)
{
    baton_ew_desc d = {.n = n, .nb = nb, .dtype = dt, .value = value};
    char errbuf[256] = "";
    baton_exec_ctx ctx = {.errbuf = errbuf, .errbuf_len = sizeof errbuf};
    void *bufs[3] = {(void *)a, nb ? (void *)b : y, y};
    test_poison(y, (size_t)n * baton_dtype_size(dt));
    baton__simd_level_set(level);
    cr_assert_eq(fn(&ctx, bufs, (const char *)&d, sizeof d), 0, "%s", errbuf);
}

Test(cpu_simd, elementwise_vectors_give_the_scalar_bits_on_every_dtype_and_tail)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    static const struct {
        const char *name;
        baton_kernel_fn fn;
        int binary;
    } K[] = {{"softshrink", baton__kcpu_softshrink, 0},
             {"add_scalar", baton__kcpu_add_scalar, 0},
             {"add", baton__kcpu_add, 1},
             {"mul", baton__kcpu_mul, 1}};
    enum { MAXN = 67 * 3 };
    static double a[MAXN], b[MAXN], y[MAXN], ref[MAXN];
    for (size_t li = 0; li < sizeof LEVELS / sizeof LEVELS[0]; li++) {
        if (baton__simd_level_set(LEVELS[li]) != LEVELS[li])
            continue;
        for (int k = 0; k < 4; k++)
            for (int d = 0; d < 4; d++)
                for (int64_t n = 1; n <= 67; n++) {
                    baton_dtype dt = FLOATS[d];
                    /* b whole, repeating (n = 3 * nb) and of one element */
                    for (int rep = 0; rep < (K[k].binary ? 3 : 1); rep++) {
                        int64_t nn = rep == 1 ? 3 * n : n, nb = rep == 2 ? 1 : n;
                        fill_bits(&r, dt, a, nn);
                        fill_bits(&r, dt, b, nb);
                        /* a share of values exactly at +-lambda */
                        if (dt != BATON_DTYPE_F64 && nn > 2) {
                            store_f64(dt, a, 0, 0.5);
                            store_f64(dt, a, 1, -0.5);
                        }
                        double v = k == 0 ? 0.5 : 0.3;
                        int64_t bnb = K[k].binary ? nb : 0;
                        run_ew(K[k].fn, SIMD_SCALAR, dt, nn, bnb, v, a, b, ref);
                        run_ew(K[k].fn, LEVELS[li], dt, nn, bnb, v, a, b, y);
                        size_t es = baton_dtype_size(dt);
                        int64_t bad = -1;
                        /* bitwise, except that a NaN may carry either operand's payload when
                         * both are NaN (x86 returns the first operand's, and a compiler may swap
                         * the operands of a commutative operation) */
                        for (int64_t i = 0; i < nn && bad < 0; i++)
                            if (memcmp((char *)y + es * i, (char *)ref + es * i, es) &&
                                !(isnan(load_f64(dt, y, i)) && isnan(load_f64(dt, ref, i))))
                                bad = i;
                        if (bad >= 0)
                            fprintf(stderr, "element %lld: a %g b %g: %g vs scalar %g\n",
                                    (long long)bad, load_f64(dt, a, bad), load_f64(dt, b, bad % nb),
                                    load_f64(dt, y, bad), load_f64(dt, ref, bad));
                        cr_assert(bad < 0,
                                  "%s %s n=%lld nb=%lld at %s differs from the scalar path "
                                  "(seed %llu)",
                                  K[k].name, baton_dtype_name(dt), (long long)nn, (long long)bnb,
                                  baton__simd_level_name(LEVELS[li]), (unsigned long long)seed);
                    }
                }
    }
    baton__simd_level_set(SIMD_AVX512);
}

Test(cpu_simd, argmax_vectors_give_the_scalar_indices_on_every_dtype_and_tail)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    static double x[4 * 1100];
    int64_t out[4], ref[4];
    for (int d = 0; d < 4; d++)
        for (int64_t n2 = 1; n2 <= 1100; n2 += n2 < 67 ? 1 : 97) {
            baton_dtype dt = FLOATS[d];
            test_fill_random(&r, dt, x, 4 * n2, 1.0);
            if (n2 > 3 && test_rng_next(&r) % 2)
                store_f64(dt, x, n2 + 2, NAN); /* row 1 has a NaN */
            baton_argmax_desc desc = {.n1 = 4, .n2 = n2, .dtype = dt};
            char errbuf[256] = "";
            baton_exec_ctx ctx = {.errbuf = errbuf, .errbuf_len = sizeof errbuf};
            void *bufs[2] = {x, out};
            baton__simd_level_set(SIMD_SCALAR);
            cr_assert_eq(baton__kcpu_argmax(&ctx, bufs, (const char *)&desc, sizeof desc), 0);
            memcpy(ref, out, sizeof ref);
            for (int64_t row = 0; row < 4; row++) { /* against a plain scan in double */
                int64_t best = 0;
                double bv = -INFINITY;
                for (int64_t j = 0; j < n2; j++) {
                    double v = load_f64(dt, x, row * n2 + j);
                    if (isnan(v)) {
                        best = j;
                        break;
                    }
                    if (v > bv)
                        bv = v, best = j;
                }
                cr_assert_eq(ref[row], best, "%s row %lld n2=%lld", baton_dtype_name(dt),
                             (long long)row, (long long)n2);
            }
            baton__simd_level_set(SIMD_AVX512);
            cr_assert_eq(baton__kcpu_argmax(&ctx, bufs, (const char *)&desc, sizeof desc), 0);
            cr_assert(memcmp(out, ref, sizeof ref) == 0, "%s n2=%lld (seed %llu)",
                      baton_dtype_name(dt), (long long)n2, (unsigned long long)seed);
        }
}

/* ---- the thread pool ---- */

typedef struct count_job {
    _Atomic int *hits;
} count_job;

static void count_task(void *arg, int64_t t)
{
    count_job *j = arg;
    atomic_fetch_add(&j->hits[t], 1);
}

static void *par_thread(void *arg)
{
    int64_t n = *(int64_t *)arg;
    _Atomic int *hits = calloc((size_t)n, sizeof *hits);
    count_job j = {hits};
    for (int rep = 0; rep < 50; rep++)
        baton__par_for(n, count_task, &j);
    for (int64_t t = 0; t < n; t++)
        if (atomic_load(&hits[t]) != 50) {
            free(hits);
            return (void *)1;
        }
    free(hits);
    return NULL;
}

Test(cpu_pool, runs_every_task_exactly_once_with_callers_on_several_threads)
{
    cr_assert_geq(baton__par_cores(), 1);
    int64_t sizes[3] = {1, 7, 1000};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, par_thread, &sizes[i]), 0);
    for (int i = 0; i < 3; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        cr_assert_null(rv, "baton__par_for of %lld tasks missed or repeated a task",
                       (long long)sizes[i]);
    }
}

/* An embedder's pool that runs the tasks backwards on the calling thread: results must not
 * depend on the order either. */
static int ext_calls;
static void ext_run(void *pool, int64_t n, baton_task_fn fn, void *arg)
{
    ext_calls++;
    for (int64_t t = n - 1; t >= 0; t--)
        fn(arg, t);
}

Test(cpu_pool, threads_on_off_and_an_embedders_pool_give_the_same_bits)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    baton_parallel_for ext = {.struct_size = sizeof ext, .run = ext_run, .n_threads = 3};
    const par_ctx one = {.max_threads = 1}, all = {0}, mine = {.ext = &ext};
    const par_ctx *modes[3] = {&one, &all, &mine};
    /* elementwise, large enough to be split */
    const int64_t n = 300007;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    float *y[3];
    for (int i = 0; i < 3; i++)
        y[i] = malloc(sizeof(float) * n);
    test_fill_random(&r, BATON_DTYPE_F32, a, n, 1.0);
    test_fill_random(&r, BATON_DTYPE_F32, b, n, 1.0);
    for (int i = 0; i < 3; i++) {
        baton__par_bind(modes[i]);
        run_ew(baton__kcpu_add, SIMD_AVX512, BATON_DTYPE_F32, n, n, 0, a, b, y[i]);
    }
    baton__par_bind(NULL);
    cr_assert(memcmp(y[0], y[1], sizeof(float) * n) == 0 &&
              memcmp(y[0], y[2], sizeof(float) * n) == 0);
    cr_assert_gt(ext_calls, 0, "the embedder's pool was not used");
    /* the GEMV: a sum over K, split into tasks and ordered by task */
    for (int d = 0; d < 3; d++)
        for (int tb = 0; tb < 2; tb++)
            for (int64_t m = 1; m <= 3; m += 2) {
                baton_dtype dt = FLOATS[d];
                const int64_t N = 1031, K = 2053;
                void *w = malloc(baton_dtype_size(dt) * (size_t)(N * K));
                float *x = malloc(sizeof(float) * (size_t)(m * K));
                float *p = malloc(sizeof(float) * baton__gemv_partial_floats(m, N, K, dt));
                test_fill_random(&r, dt, w, N * K, 1.0);
                test_fill_random(&r, BATON_DTYPE_F32, x, m * K, 1.0);
                float *out[3];
                for (int i = 0; i < 3; i++) {
                    out[i] = malloc(sizeof(float) * (size_t)(m * N));
                    baton__par_bind(modes[i]);
                    baton__gemv_run(dt, tb, m, N, K, 1.0f, x, w, out[i], p);
                }
                baton__par_bind(NULL);
                for (int i = 1; i < 3; i++)
                    cr_assert(memcmp(out[0], out[i], sizeof(float) * (size_t)(m * N)) == 0,
                              "gemv %s trans_b=%d m=%lld: mode %d differs (seed %llu)",
                              baton_dtype_name(dt), tb, (long long)m, i, (unsigned long long)seed);
                for (int i = 0; i < 3; i++)
                    free(out[i]);
                free(w), free(x), free(p);
            }
    free(a), free(b);
    for (int i = 0; i < 3; i++)
        free(y[i]);
}

/* ---- baton's GEMV kernels against float64, every level, K and N tails ---- */

Test(cpu_gemv, matches_the_float64_reference_at_every_level_with_tails)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    static const simd_level ALL[] = {SIMD_SCALAR, SIMD_AVX2, SIMD_AVX512};
    static const int64_t KS[] = {1,  2,  15, 16,  17,  31,  33,  63,
                                 64, 65, 67, 127, 128, 129, 200, 1000};
    for (size_t li = 0; li < 3; li++) {
        if (baton__simd_level_set(ALL[li]) != ALL[li])
            continue;
        for (int d = 0; d < 3; d++)
            for (int tb = 0; tb < 2; tb++)
                for (size_t ki = 0; ki < sizeof KS / sizeof KS[0]; ki++)
                    for (int64_t m = 1; m <= GEMV_MAX_M; m += m < 5 ? 1 : 11) {
                        baton_dtype dt = FLOATS[d];
                        int64_t K = KS[ki], N = 1 + (int64_t)(test_rng_next(&r) % 67);
                        void *w = malloc(baton_dtype_size(dt) * (size_t)(N * K));
                        void *x16 = malloc(baton_dtype_size(dt) * (size_t)(m * K));
                        float *x = malloc(sizeof(float) * (size_t)(m * K));
                        float *y = malloc(sizeof(float) * (size_t)(m * N));
                        double *ref = malloc(sizeof(double) * (size_t)(m * N));
                        double *terms = malloc(sizeof(double) * (size_t)(m * N));
                        float *p = malloc(sizeof(float) * baton__gemv_partial_floats(m, N, K, dt));
                        test_fill_random(&r, dt, w, N * K, 1.0);
                        /* x holds values of the weight's dtype, as the delegate gives it */
                        test_fill_random(&r, dt, x16, m * K, 1.0);
                        for (int64_t i = 0; i < m * K; i++)
                            x[i] = load_f32(dt, x16, i);
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t j = 0; j < N; j++) {
                                double s = 0, t = 0;
                                for (int64_t k = 0; k < K; k++) {
                                    double v = (double)x[i * K + k] *
                                               load_f64(dt, w, tb ? j * K + k : k * N + j);
                                    s += v;
                                    t += fabs(v);
                                }
                                ref[i * N + j] = -0.75 * s;
                                terms[i * N + j] = 0.75 * t;
                            }
                        test_poison(y, sizeof(float) * (size_t)(m * N));
                        baton__gemv_run(dt, tb, m, N, K, -0.75f, x, w, y, p);
                        /* A sum of K products in f32, in any order and with or without FMA, and
                         * the scaling by alpha are off by at most (K + 2) units of 2^-24 of the
                         * sum of the terms' magnitudes. This bound, not ||y - ref|| / ||ref||,
                         * is what an output that is a few terms' sum can be held to: their sum
                         * may cancel to near zero. A dropped or doubled term misses it by ~1/K. */
                        const double tol = (double)(K + 2) * 0x1p-24;
                        double worst = 0;
                        int64_t at = 0;
                        for (int64_t i = 0; i < m * N; i++) {
                            double d = fabs((double)y[i] - ref[i]);
                            double e = terms[i] > 0 ? d / terms[i] : d == 0 ? 0 : INFINITY;
                            if (!(e <= worst)) { /* a NaN is the worst */
                                worst = e, at = i;
                                if (isnan(e))
                                    break;
                            }
                        }
                        cr_assert_leq(worst, tol,
                                      "gemv %s trans_b=%d m=%lld n=%lld k=%lld at %s: element %lld "
                                      "off by %g of its terms' sum > %g (seed %llu)",
                                      baton_dtype_name(dt), tb, (long long)m, (long long)N,
                                      (long long)K, baton__simd_level_name(ALL[li]), (long long)at,
                                      worst, tol, (unsigned long long)seed);
                        free(terms);
                        free(w), free(x16), free(x), free(y), free(ref), free(p);
                    }
    }
    baton__simd_level_set(SIMD_AVX512);
}

/* The delegate on a plan constant above GEMV_MAX_M rows: OpenBLAS on one shared f32 copy. */
Test(cpu_gemv, constant_weights_are_widened_once_and_shared_between_steps)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    const int64_t M = 40, N = 24, K = 33;
    baton_tensor_desc in[2] = {{.dtype = BATON_DTYPE_BF16, .rank = 2, .shape = {M, K}},
                               {.dtype = BATON_DTYPE_BF16, .rank = 2, .shape = {N, K}}};
    baton_attr at[1] = {{.name = "trans_b", .type = BATON_ATTR_BOOL, .i = 1}};
    baton_tensor_desc out = {0};
    baton_sig_args sig = {
        .n_inputs = 2, .inputs = in, .n_outputs = 1, .outputs = &out, .n_attrs = 1, .attrs = at};
    uint16_t *w = malloc(2 * (size_t)(N * K)), *x = malloc(2 * (size_t)(M * K));
    uint16_t *y = malloc(2 * (size_t)(M * N));
    test_fill_random(&r, BATON_DTYPE_BF16, w, N * K, 1.0);
    test_fill_random(&r, BATON_DTYPE_BF16, x, M * K, 1.0);
    int constant[2] = {0, 1};
    void *data[2] = {x, w};
    baton_delegate_init info = {
        .step_name = "proj", .sig = &sig, .input_constant = constant, .input_data = data};
    size_t before = baton__gemm_cpu_prepared_bytes();
    void *s1 = NULL, *s2 = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__gemm_openblas_iface.init(&info, &s1, &err), 0, "%s", err.message);
    cr_assert_eq(baton__gemm_openblas_iface.init(&info, &s2, &err), 0, "%s", err.message);
    cr_assert_eq(baton__gemm_cpu_prepared_bytes() - before, sizeof(float) * (size_t)(N * K),
                 "two steps on one constant hold one f32 copy");
    char errbuf[256] = "";
    baton_exec_ctx ctx = {.errbuf = errbuf, .errbuf_len = sizeof errbuf, .sig = &sig};
    void *bufs[3] = {x, w, y};
    test_poison(y, 2 * (size_t)(M * N));
    cr_assert_eq(baton__gemm_openblas_iface.execute(s1, &ctx, bufs), 0, "%s", errbuf);
    double *ref = malloc(sizeof(double) * (size_t)(M * N));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)bf16_to_f32(x[i * K + k]) * bf16_to_f32(w[j * K + k]);
            ref[i * N + j] = s;
        }
    double e = test_rel_err(BATON_DTYPE_BF16, y, ref, M * N);
    cr_assert_leq(e, test_tolerance(BATON_DTYPE_BF16) + 2e-7 * sqrt((double)K), "rel err %g", e);
    /* a run with fewer rows (a plan's dims) takes the GEMV path on the same state */
    baton_tensor_desc in3[2] = {in[0], in[1]};
    in3[0].shape[0] = 3;
    baton_sig_args sig3 = sig;
    sig3.inputs = in3;
    ctx.sig = &sig3;
    test_poison(y, 2 * (size_t)(M * N));
    cr_assert_eq(baton__gemm_openblas_iface.execute(s1, &ctx, bufs), 0, "%s", errbuf);
    cr_assert_leq(test_rel_err(BATON_DTYPE_BF16, y, ref, 3 * N),
                  test_tolerance(BATON_DTYPE_BF16) + 2e-7 * sqrt((double)K));
    in3[0].shape[0] = M + 1; /* more rows than prepared: an error, not an overflow */
    cr_assert_neq(baton__gemm_openblas_iface.execute(s1, &ctx, bufs), 0);
    cr_assert(strstr(errbuf, "prepared"), "%s", errbuf);
    baton__gemm_openblas_iface.destroy(s1);
    cr_assert_eq(baton__gemm_cpu_prepared_bytes() - before, sizeof(float) * (size_t)(N * K));
    baton__gemm_openblas_iface.destroy(s2);
    cr_assert_eq(baton__gemm_cpu_prepared_bytes(), before, "the last step frees the copy");
    free(w), free(x), free(y), free(ref);
}

/* A plan constant [K, N] on the GEMV path: one [N, K] copy in its own dtype, shared, counted. */
Test(cpu_gemv, constant_kn_weights_are_transposed_once_and_shared_between_steps)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    for (int d = 0; d < 3; d++) {
        const baton_dtype dt = FLOATS[d];
        const size_t es = baton_dtype_size(dt);
        const int64_t M = 3, N = 37, K = 131;
        baton_tensor_desc in[2] = {{.dtype = dt, .rank = 2, .shape = {M, K}},
                                   {.dtype = dt, .rank = 2, .shape = {K, N}}};
        baton_tensor_desc out = {0};
        baton_sig_args sig = {.n_inputs = 2, .inputs = in, .n_outputs = 1, .outputs = &out};
        void *w = malloc(es * (size_t)(N * K)), *x = malloc(es * (size_t)(M * K));
        void *y = malloc(es * (size_t)(M * N));
        test_fill_random(&r, dt, w, N * K, 1.0);
        test_fill_random(&r, dt, x, M * K, 1.0);
        int constant[2] = {0, 1};
        void *data[2] = {x, w};
        baton_delegate_init info = {
            .step_name = "proj", .sig = &sig, .input_constant = constant, .input_data = data};
        size_t before = baton__gemm_cpu_prepared_bytes();
        void *s1 = NULL, *s2 = NULL;
        baton_error err = {0};
        cr_assert_eq(baton__gemm_openblas_iface.init(&info, &s1, &err), 0, "%s", err.message);
        cr_assert_eq(baton__gemm_openblas_iface.init(&info, &s2, &err), 0, "%s", err.message);
        cr_assert_eq(baton__gemm_cpu_prepared_bytes() - before, es * (size_t)(N * K),
                     "two steps on one constant hold one copy in its own dtype (%s)",
                     baton_dtype_name(dt));
        char errbuf[256] = "";
        baton_exec_ctx ctx = {.errbuf = errbuf, .errbuf_len = sizeof errbuf, .sig = &sig};
        void *bufs[3] = {x, w, y};
        double *ref = malloc(sizeof(double) * (size_t)(M * N));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += load_f64(dt, x, i * K + k) * load_f64(dt, w, k * N + j);
                ref[i * N + j] = s;
            }
        for (int st = 0; st < 2; st++) {
            test_poison(y, es * (size_t)(M * N));
            cr_assert_eq(baton__gemm_openblas_iface.execute(st ? s2 : s1, &ctx, bufs), 0, "%s",
                         errbuf);
            double e = test_rel_err(dt, y, ref, M * N);
            cr_assert_leq(e, test_tolerance(dt) + 2e-7 * sqrt((double)K),
                          "%s step %d: rel err %g (seed %llu)", baton_dtype_name(dt), st, e,
                          (unsigned long long)seed);
        }
        baton__gemm_openblas_iface.destroy(s1);
        cr_assert_eq(baton__gemm_cpu_prepared_bytes() - before, es * (size_t)(N * K));
        baton__gemm_openblas_iface.destroy(s2);
        cr_assert_eq(baton__gemm_cpu_prepared_bytes(), before, "the last step frees the copy");
        free(w), free(x), free(y), free(ref);
    }
}

/* A prepared copy of 4 MiB or more sits on 2 MiB boundaries (for the kernel's huge pages) and is
 * counted in whole 2 MiB pages, what it holds resident; the GEMV reads it as any other. */
Test(cpu_gemv, a_large_prepared_copy_is_huge_page_aligned_and_counted_in_whole_pages)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    const int64_t M = 1, N = 2500, K = 1000; /* 5 000 000 bytes of bf16: 3 pages of 2 MiB */
    const size_t page = (size_t)2 << 20, want = 3 * page;
    baton_tensor_desc in[2] = {{.dtype = BATON_DTYPE_BF16, .rank = 2, .shape = {M, K}},
                               {.dtype = BATON_DTYPE_BF16, .rank = 2, .shape = {K, N}}};
    baton_tensor_desc out = {0};
    baton_sig_args sig = {.n_inputs = 2, .inputs = in, .n_outputs = 1, .outputs = &out};
    uint16_t *w = malloc(2 * (size_t)(N * K)), *x = malloc(2 * (size_t)(M * K));
    uint16_t *y = malloc(2 * (size_t)(M * N));
    test_fill_random(&r, BATON_DTYPE_BF16, w, N * K, 1.0);
    test_fill_random(&r, BATON_DTYPE_BF16, x, M * K, 1.0);
    int constant[2] = {0, 1};
    void *data[2] = {x, w};
    baton_delegate_init info = {
        .step_name = "proj", .sig = &sig, .input_constant = constant, .input_data = data};
    size_t before = baton__gemm_cpu_prepared_bytes();
    void *st = NULL;
    baton_error err = {0};
    cr_assert_eq(baton__gemm_openblas_iface.init(&info, &st, &err), 0, "%s", err.message);
    cr_assert_eq(baton__gemm_cpu_prepared_bytes() - before, want,
                 "the [N, K] copy counts %zu bytes, not whole 2 MiB pages (%zu)",
                 baton__gemm_cpu_prepared_bytes() - before, want);
    const void *copy = baton__gemm_cpu_gemv_weight(st, w);
    cr_assert_neq(copy, (const void *)w, "no [N, K] copy was made");
    cr_assert_eq((uintptr_t)copy % page, 0, "the copy at %p is not on a 2 MiB boundary", copy);
    char errbuf[256] = "";
    baton_exec_ctx ctx = {.errbuf = errbuf, .errbuf_len = sizeof errbuf, .sig = &sig};
    void *bufs[3] = {x, w, y};
    test_poison(y, 2 * (size_t)(M * N));
    cr_assert_eq(baton__gemm_openblas_iface.execute(st, &ctx, bufs), 0, "%s", errbuf);
    double *ref = malloc(sizeof(double) * (size_t)(M * N));
    for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++)
            s += (double)bf16_to_f32(x[k]) * bf16_to_f32(w[k * N + j]);
        ref[j] = s;
    }
    double e = test_rel_err(BATON_DTYPE_BF16, y, ref, M * N);
    cr_assert_leq(e, test_tolerance(BATON_DTYPE_BF16) + 2e-7 * sqrt((double)K),
                  "rel err %g (seed %llu)", e, (unsigned long long)seed);
    baton__gemm_openblas_iface.destroy(st);
    cr_assert_eq(baton__gemm_cpu_prepared_bytes(), before, "destroy frees the copy");
    free(w), free(x), free(y), free(ref);
}

/* ---- the helpers of kernels/cpu/cpu_simd.h ---- */

#include "kernels/cpu/cpu_simd.h"

static void rows_mark(void *arg, int64_t r0, int64_t r1)
{
    _Atomic int *hits = arg;
    for (int64_t r = r0; r < r1; r++)
        atomic_fetch_add(&hits[r], 1);
}

Test(cpu_simd, parallel_rows_covers_every_row_once_and_dot_and_axpy_match_float64)
{
    for (int64_t rows = 1; rows <= 3000; rows = rows * 3 + 1) {
        _Atomic int *hits = calloc((size_t)rows, sizeof *hits);
        kcpu_parallel_rows(rows, 4096, 65536, rows_mark, hits);
        for (int64_t r = 0; r < rows; r++)
            cr_assert_eq(atomic_load(&hits[r]), 1, "row %lld of %lld", (long long)r,
                         (long long)rows);
        free(hits);
    }
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    static const simd_level ALL[] = {SIMD_SCALAR, SIMD_AVX2, SIMD_AVX512};
    float a[67], b[67], y[67], y0[67];
    for (size_t li = 0; li < 3; li++) {
        if (baton__simd_level_set(ALL[li]) != ALL[li])
            continue;
        for (int64_t n = 1; n <= 67; n++) {
            test_fill_random(&r, BATON_DTYPE_F32, a, n, 1.0);
            test_fill_random(&r, BATON_DTYPE_F32, b, n, 1.0);
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++)
                ref += (double)a[i] * b[i], mag += fabs((double)a[i] * b[i]);
            float d = baton__simd_dot_f32(a, b, n);
            cr_assert_leq(fabs(d - ref), 1e-6 * mag + 1e-30, "dot n=%lld at %s: %g vs %g",
                          (long long)n, baton__simd_level_name(ALL[li]), d, ref);
            cr_assert_eq(d, baton__simd_dot_f32(a, b, n), "the same bits on every call");
            memcpy(y, b, sizeof(float) * (size_t)n);
            memcpy(y0, b, sizeof(float) * (size_t)n);
            baton__simd_axpy_f32(0.25f, a, y, n);
            for (int64_t i = 0; i < n; i++)
                cr_assert_leq(fabs(y[i] - (y0[i] + 0.25 * a[i])), 1e-7 * (fabs(y0[i]) + 1),
                              "axpy n=%lld element %lld at %s", (long long)n, (long long)i,
                              baton__simd_level_name(ALL[li]));
        }
    }
    baton__simd_level_set(SIMD_AVX512);
}

/* ---- the options, through a runtime ---- */

static const char *POOL_PLAN =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"pool\", \"tensors\": ["
    "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [300, 1001], \"role\": \"input\"},"
    "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [300, 1001], \"role\": \"output\"}],"
    "\"steps\": [{\"name\": \"shrink\", \"kernel\": \"softshrink\", \"device\": \"cpu\", "
    "\"inputs\": [\"x\"], \"outputs\": [\"y\"], \"attrs\": {\"lambda\": 0.5}}]}";

static int pool_calls;
static void counting_run(void *pool, int64_t n, baton_task_fn fn, void *arg)
{
    pool_calls++;
    for (int64_t t = 0; t < n; t++)
        fn(arg, t);
}

static void run_pool_plan(const baton_options *o, const float *x, float *y)
{
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_registry_create(&reg), 0);
    cr_assert_eq(
        baton_plan_load_string(reg, POOL_PLAN, strlen(POOL_PLAN), "pool", NULL, &plan, &err), 0,
        "%s", err.message);
    cr_assert_eq(baton_runtime_create(plan, o, &rt, &err), 0, "%s", err.message);
    const size_t bytes = sizeof(float) * 300 * 1001;
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, bytes, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, bytes, &err), 0, "%s", err.message);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
}

Test(cpu_pool, runtimes_use_the_embedders_pool_and_refuse_bad_thread_options)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    const int64_t n = 300 * 1001;
    float *x = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n);
    float *y2 = malloc(sizeof(float) * n);
    test_fill_random(&r, BATON_DTYPE_F32, x, n, 1.0);
    baton_options o;
    baton_options_init(&o);
    o.quiet = 1;
    o.cpu_threads = 1;
    run_pool_plan(&o, x, y1);
    baton_parallel_for ext = {
        .struct_size = sizeof ext, .run = counting_run, .pool = NULL, .n_threads = 2};
    o.cpu_threads = 0;
    o.cpu_pool = &ext;
    pool_calls = 0;
    run_pool_plan(&o, x, y2);
    cr_assert_gt(pool_calls, 0, "the runtime's CPU step did not use the embedder's pool");
    cr_assert(memcmp(y1, y2, sizeof(float) * n) == 0, "the same bits with either pool");
    /* bad options */
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_registry_create(&reg), 0);
    cr_assert_eq(
        baton_plan_load_string(reg, POOL_PLAN, strlen(POOL_PLAN), "pool", NULL, &plan, &err), 0);
    o.cpu_pool = NULL;
    o.cpu_threads = -1;
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "cpu_threads"), "%s", err.message);
    o.cpu_threads = 0;
    ext.run = NULL;
    o.cpu_pool = &ext;
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "cpu_pool") && strstr(err.message, "run"), "%s", err.message);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    free(x), free(y1), free(y2);
}

Test(cpu_simd, outputs_larger_than_the_caches_are_streamed_with_the_scalar_bits)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    /* 9 MB of f32 and of bf16 output, the output one element off the vector alignment */
    for (int d = 0; d < 3; d++) {
        baton_dtype dt = FLOATS[d];
        const int64_t n = (9 << 20) / (int64_t)baton_dtype_size(dt) + 13;
        size_t es = baton_dtype_size(dt);
        char *a = malloc(es * (size_t)n), *b = malloc(es * (size_t)n);
        char *y = malloc(es * (size_t)(n + 1)), *ref = malloc(es * (size_t)n);
        test_fill_random(&r, dt, a, n, 1.0);
        test_fill_random(&r, dt, b, n, 1.0);
        for (int k = 0; k < 2; k++) {
            baton_kernel_fn fn = k ? baton__kcpu_add : baton__kcpu_softshrink;
            run_ew(fn, SIMD_SCALAR, dt, n, k ? n : 0, 0.5, a, b, ref);
            run_ew(fn, SIMD_AVX512, dt, n, k ? n : 0, 0.5, a, b, y + es);
            cr_assert(memcmp(y + es, ref, es * (size_t)n) == 0, "%s %s (seed %llu)",
                      k ? "add" : "softshrink", baton_dtype_name(dt), (unsigned long long)seed);
        }
        free(a), free(b), free(y), free(ref);
    }
    baton__simd_level_set(SIMD_AVX512);
}
