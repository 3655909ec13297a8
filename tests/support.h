/* support.h: helpers shared by the Criterion tests: random data, poisoning, float64
 * comparisons, paths to tests/data, and whether a CUDA device is present. */
#ifndef BATON_TESTS_SUPPORT_H
#define BATON_TESTS_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton.h"

/* A small deterministic generator (splitmix64) so failures reproduce from the printed seed. */
typedef struct test_rng {
    uint64_t state;
} test_rng;

/* A fresh seed per call, derived from the run's seed (BATON_TEST_SEED, printed at start), the
 * test's name and a per-test counter: the same run seed gives every test the same data again. */
uint64_t test_fresh_seed(void);
uint64_t test_run_seed(void);
uint64_t test_rng_next(test_rng *r);
double test_rng_uniform(test_rng *r); /* [0, 1) */
double test_rng_normal(test_rng *r);  /* N(0, 1) */

/* Fills n elements of dtype dt with N(0, scale) values (rounded to the dtype). */
void test_fill_random(test_rng *r, baton_dtype dt, void *p, int64_t n, double scale);
/* Integer rows for argmax (the CPU and CUDA kernels' tests, by the same rules): n1 rows of n2
 * values of dtype dt (i32 or i64) into x, and as int64 into v, row r of kind r % 5: few distinct
 * values (ties, so the first maximum must win), the top or the bottom of dt's range, i64 values
 * above 2^53 that differ only in their low bits, a constant row. */
void test_fill_argmax_ints(test_rng *r, baton_dtype dt, int64_t n1, int64_t n2, int64_t *v,
                           void *x);
/* The exact reference: the first index of the maximum of row r of v (n2 values a row). */
int64_t test_argmax_row(const int64_t *v, int64_t n2, int64_t r);
/* Fills a buffer with a NaN pattern (0xFF bytes), so an unwritten element fails any check. */
void test_poison(void *p, size_t nbytes);
/* ||a - ref|| / ||ref|| over n elements, a of dtype dt and ref in double; +inf if a has a NaN. */
double test_rel_err(baton_dtype dt, const void *a, const double *ref, int64_t n);
/* The relative-error bound for results stored in dtype dt. */
double test_tolerance(baton_dtype dt);

/* BATON_SOURCE_DIR/rel (or ./rel when unset), in a static buffer per call slot (4 slots). */
const char *test_path(const char *rel);
/* Reads a whole file; NULL if it cannot. free() the result. */
char *test_read_file(const char *path, size_t *len);

/* Quiet options for gpu in mode, the test device delaying each operation by delay_us, with
 * baton_options.fallback_is_error as given. */
baton_options test_options(baton_gpu_backend gpu, baton_sync_mode mode, int delay_us,
                           int fallback_is_error);

/* A runtime of plan with test_options(gpu, mode, delay_us, fallback_is_error). Asserts that it
 * is created. */
baton_runtime *test_runtime(const baton_plan *plan, baton_gpu_backend gpu, baton_sync_mode mode,
                            int delay_us, int fallback_is_error);

/* Number of CUDA devices, 0 without a device or without CUDA in the build. */
int test_cuda_devices(void);

#endif
