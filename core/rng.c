/* rng.c: the seeded generators of the plan format's "normal" and "uniform" initialisers, also
 * behind the public baton_fill_normal/baton_fill_uniform (the CLI's default inputs, the tests).
 * They use only IEEE-754 double +, -, *, / and sqrt, never the C library's log/sin/cos, so every
 * machine and compiler produces the same bits; docs/plan-format.md gives the algorithm step by step
 * so that other tools can reproduce it. */
#include <math.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/threads.h"

/* No fused multiply-adds: they would change the rounding from one machine to the next. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* splitmix64 is a counter: its k-th value (k from 1) comes from the state seed + k * gamma, so
 * a stretch of a fill can start anywhere and give the same bits as the whole fill in one pass. */
#define SPLITMIX_GAMMA 0x9e3779b97f4a7c15ull

uint64_t baton__rng_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += SPLITMIX_GAMMA);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define TWO_M53 (1.0 / 9007199254740992.0) /* 2^-53 */

/* ln(u) for u in (0, 1]: u = m * 2^e with m in [sqrt(1/2), sqrt(2)), then
 * ln(m) = 2 atanh(s) with s = (m - 1) / (m + 1), summed to s^23. */
static double det_log(double u)
{
    int e;
    double m = frexp(u, &e); /* exact: m in [0.5, 1) */
    if (m < 0.70710678118654752440) {
        m = m * 2.0;
        e = e - 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    double term = s, sum = s;
    for (int k = 1; k <= 11; k++) {
        term = term * s2;
        double q = term / (double)(2 * k + 1);
        sum = sum + q;
    }
    double ln2 = 0.693147180559945286226764; /* the double nearest ln 2: 0x1.62e42fefa39efp-1 */
    double a = (double)e * ln2;
    double b = 2.0 * sum;
    return a + b;
}

/* cos(2 pi u) and sin(2 pi u) for u in [0, 1): the quadrant q = floor(4u + 1/2) is taken exactly,
 * the rest r = 4u - q in [-1/2, 1/2] becomes the angle r * pi/2 in [-pi/4, pi/4], and Taylor
 * series to the 19th power give its cosine and sine, then rotated by q quarter turns. */
static void det_sincos_2pi(double u, double *c, double *s)
{
    double t = u * 4.0; /* exact */
    double q = floor(t + 0.5);
    double r = t - q;                       /* exact */
    double half_pi = 1.5707963267948966192; /* 0x1.921fb54442d18p+0 */
    double x = r * half_pi;
    double x2 = x * x;
    double st = x, ss = x, ct = 1.0, cs = 1.0;
    for (int k = 1; k <= 9; k++) {
        double ds = (double)((2 * k) * (2 * k + 1));
        double dc = (double)((2 * k - 1) * (2 * k));
        st = -(st * x2) / ds;
        ct = -(ct * x2) / dc;
        ss = ss + st;
        cs = cs + ct;
    }
    switch ((int)q & 3) {
    case 0: *c = cs, *s = ss; break;
    case 1: *c = -ss, *s = cs; break;
    case 2: *c = -cs, *s = -ss; break;
    default: *c = ss, *s = -cs; break;
    }
}

/* Elements [i0, i1) of the normal fill (i0 even): pair j takes the stream's values 2j+1, 2j+2. */
static void fill_normal_range(void *dst, baton_dtype dt, int64_t i0, int64_t i1, int64_t n,
                              uint64_t seed, double mean, double std)
{
    uint64_t state = seed + (uint64_t)i0 * SPLITMIX_GAMMA;
    for (int64_t i = i0; i < i1; i += 2) {
        double u1 = (double)((baton__rng_splitmix64(&state) >> 11) + 1) * TWO_M53; /* (0, 1] */
        double u2 = (double)(baton__rng_splitmix64(&state) >> 11) * TWO_M53;       /* [0, 1) */
        double l = det_log(u1);
        double radius = sqrt(-2.0 * l);
        double c, s;
        det_sincos_2pi(u2, &c, &s);
        double z0 = radius * c, z1 = radius * s;
        double a0 = std * z0, a1 = std * z1;
        store_f64_clamped(dt, dst, i, mean + a0);
        if (i + 1 < n)
            store_f64_clamped(dt, dst, i + 1, mean + a1);
    }
}

/* Elements [i0, i1) of the uniform fill: element i takes the stream's value i + 1. */
static void fill_uniform_range(void *dst, baton_dtype dt, int64_t i0, int64_t i1, uint64_t seed,
                               double low, double high)
{
    uint64_t state = seed + (uint64_t)i0 * SPLITMIX_GAMMA;
    double width = high - low;
    for (int64_t i = i0; i < i1; i++) {
        double u = (double)(baton__rng_splitmix64(&state) >> 11) * TWO_M53; /* [0, 1) */
        double a = width * u;
        store_f64_clamped(dt, dst, i, low + a);
    }
}

/* A fill cut into stretches of FILL_GRAIN elements (even) over the CPU pool: the normal fill
 * takes about 40 ns a value on one core (the series' divisions), 43 s for the 2^30 values of the
 * large tutorial plan's inputs. */
#define FILL_GRAIN (1 << 17)

typedef struct fill_job {
    void *dst;
    baton_dtype dt;
    int64_t n;
    uint64_t seed;
    double a, b; /* mean and std, or low and high */
    int normal;
} fill_job;

static void fill_task(void *arg, int64_t t)
{
    const fill_job *j = arg;
    const int64_t i0 = t * FILL_GRAIN, i1 = i0 + FILL_GRAIN < j->n ? i0 + FILL_GRAIN : j->n;
    if (j->normal)
        fill_normal_range(j->dst, j->dt, i0, i1, j->n, j->seed, j->a, j->b);
    else
        fill_uniform_range(j->dst, j->dt, i0, i1, j->seed, j->a, j->b);
}

/* baton__par_for runs a single stretch on the calling thread itself. */
static void fill(const fill_job *j)
{
    baton__par_for((j->n + FILL_GRAIN - 1) / FILL_GRAIN, fill_task, (void *)j);
}

void baton__rng_fill_normal(void *dst, baton_dtype dt, int64_t n, uint64_t seed, double mean,
                            double std)
{
    const fill_job j = {dst, dt, n, seed, mean, std, 1};
    fill(&j);
}

void baton__rng_fill_uniform(void *dst, baton_dtype dt, int64_t n, uint64_t seed, double low,
                             double high)
{
    const fill_job j = {dst, dt, n, seed, low, high, 0};
    fill(&j);
}

int baton_fill_normal(void *dst, baton_dtype dtype, int64_t n, uint64_t seed, double mean,
                      double std)
{
    if ((!dst && n > 0) || n < 0 || baton_dtype_size(dtype) == 0)
        return BATON_EINVAL;
    baton__rng_fill_normal(dst, dtype, n, seed, mean, std);
    return 0;
}

int baton_fill_uniform(void *dst, baton_dtype dtype, int64_t n, uint64_t seed, double low,
                       double high)
{
    if ((!dst && n > 0) || n < 0 || baton_dtype_size(dtype) == 0)
        return BATON_EINVAL;
    baton__rng_fill_uniform(dst, dtype, n, seed, low, high);
    return 0;
}
