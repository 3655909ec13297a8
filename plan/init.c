/* init.c: a constant's initial value, written into a host buffer at prepare time. The seeded
 * kinds (normal, uniform) use only IEEE-754 double +, -, *, / and sqrt, never the C library's
 * log/sin/cos, so every machine and compiler produces the same bits; docs/plan-format.md gives the
 * algorithm step by step so that other tools can reproduce it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dtype.h"
#include "plan/plan_internal.h"

/* No fused multiply-adds: they would change the rounding from one machine to the next. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
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

/* Integer dtypes truncate; keep the value in range so that the conversion is defined. */
static double clamp_for(baton_dtype dt, double v)
{
    if (dt != BATON_DTYPE_I32 && dt != BATON_DTYPE_I64)
        return v;
    if (isnan(v))
        return 0;
    double lo = dt == BATON_DTYPE_I32 ? -2147483648.0 : -9223372036854775808.0;
    double hi = dt == BATON_DTYPE_I32 ? 2147483647.0 : 9223372036854774784.0; /* < 2^63 */
    return v < lo ? lo : v > hi ? hi : v;
}

static void put(baton_dtype dt, void *dst, int64_t i, double v)
{
    store_f64(dt, dst, i, clamp_for(dt, v));
}

static void fill_normal(const tensor_init *in, baton_dtype dt, void *dst, int64_t n)
{
    uint64_t state = in->seed;
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = (double)((splitmix64(&state) >> 11) + 1) * TWO_M53; /* (0, 1] */
        double u2 = (double)(splitmix64(&state) >> 11) * TWO_M53;       /* [0, 1) */
        double l = det_log(u1);
        double radius = sqrt(-2.0 * l);
        double c, s;
        det_sincos_2pi(u2, &c, &s);
        double z0 = radius * c, z1 = radius * s;
        double a0 = in->std * z0, a1 = in->std * z1;
        put(dt, dst, i, in->mean + a0);
        if (i + 1 < n)
            put(dt, dst, i + 1, in->mean + a1);
    }
}

static void fill_uniform(const tensor_init *in, baton_dtype dt, void *dst, int64_t n)
{
    uint64_t state = in->seed;
    double width = in->high - in->low;
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(splitmix64(&state) >> 11) * TWO_M53; /* [0, 1) */
        double a = width * u;
        put(dt, dst, i, in->low + a);
    }
}

int plan_tensor_materialize(const baton_plan *plan, int tensor, void *dst, baton_error *err)
{
    if (!plan || !dst || tensor < 0 || tensor >= plan->n_tensors)
        return baton_seterr(err, BATON_EINVAL,
                            "plan_tensor_materialize: no plan, no buffer or tensor %d out of range",
                            tensor);
    const plan_tensor *t = &plan->tensors[tensor];
    const tensor_init *in = &t->init;
    baton_dtype dt = t->desc.dtype;
    int64_t n = baton_tensor_desc_numel(&t->desc);
    if (t->role != BATON_ROLE_CONSTANT || in->kind == INIT_NONE)
        return plan_error(err, BATON_EINVAL, plan, t->pos,
                          "tensor '%s' is not a constant; only constants have an initial value",
                          t->name);
    switch (in->kind) {
    case INIT_FILL:
        for (int64_t i = 0; i < n; i++)
            put(dt, dst, i, in->value);
        return 0;
    case INIT_NORMAL: fill_normal(in, dt, dst, n); return 0;
    case INIT_UNIFORM: fill_uniform(in, dt, dst, n); return 0;
    case INIT_VALUES:
        if (in->n_values != n)
            return plan_error(err, BATON_EPLAN, plan, t->pos,
                              "tensor '%s' has %lld inline values for %lld elements", t->name,
                              (long long)in->n_values, (long long)n);
        for (int64_t i = 0; i < n; i++)
            put(dt, dst, i, in->values[i]);
        return 0;
    case INIT_NPY: {
        baton_tensor_desc d;
        void *data = NULL;
        baton_error nerr = {0};
        int rc = baton_npy_read(in->path, &d, &data, &nerr);
        if (rc)
            return plan_error(err, rc, plan, t->pos, "tensor '%s': cannot load its npy init: %s",
                              t->name, nerr.message);
        int same = d.dtype == dt && d.rank == t->desc.rank;
        for (int i = 0; same && i < d.rank; i++)
            same = d.shape[i] == t->desc.shape[i];
        if (!same) {
            free(data);
            return plan_error(err, BATON_EPLAN, plan, t->pos,
                              "tensor '%s': %s changed since the plan was loaded: its dtype or "
                              "shape no longer matches the declaration",
                              t->name, in->path);
        }
        memcpy(dst, data, t->nbytes);
        free(data);
        return 0;
    }
    default:
        return plan_error(err, BATON_EINVAL, plan, t->pos, "tensor '%s' has no initialiser",
                          t->name);
    }
}
