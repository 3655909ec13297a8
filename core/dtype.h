/* dtype.h: scalar conversions between baton's element types and float/double on the host.
 * bf16 and f16 are stored as uint16_t; conversions to them round to nearest even, as the
 * hardware does, so CPU and GPU kernels agree bit for bit on stored values. */
#ifndef BATON_CORE_DTYPE_H
#define BATON_CORE_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "baton/baton.h"

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (abs >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below the smallest normal: subnormal or zero */
        if (abs < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = abs >> 23;
        uint32_t man = (abs & 0x7fffffu) | 0x800000u;
        /* value = man * 2^(e-150) and the f16 subnormal unit is 2^-24: drop 126 - e bits */
        uint32_t s = 126u - e;
        uint32_t q = man >> s;
        uint32_t rem = man & ((1u << s) - 1u);
        uint32_t halfway = 1u << (s - 1);
        if (rem > halfway || (rem == halfway && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u); /* round to nearest even */
    r -= 0x38000000u;                               /* rebias 127 -> 15 */
    return (uint16_t)(sign | (r >> 13));
}

/* Loads element i of a buffer of dtype dt as a double. */
static inline double load_f64(baton_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case BATON_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case BATON_DTYPE_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case BATON_DTYPE_F32: return ((const float *)p)[i];
    case BATON_DTYPE_F64: return ((const double *)p)[i];
    case BATON_DTYPE_I32: return ((const int32_t *)p)[i];
    case BATON_DTYPE_I64: return (double)((const int64_t *)p)[i];
    case BATON_DTYPE_U8: return ((const uint8_t *)p)[i];
    case BATON_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return NAN;
    }
}

/* Loads element i as a float (the accumulation type of the 16- and 32-bit kernels). */
static inline float load_f32(baton_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case BATON_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case BATON_DTYPE_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case BATON_DTYPE_F32: return ((const float *)p)[i];
    default: return (float)load_f64(dt, p, i);
    }
}

/* Stores v into element i, rounding to the dtype. Integers truncate toward zero. */
static inline void store_f64(baton_dtype dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case BATON_DTYPE_BF16: ((uint16_t *)p)[i] = f32_to_bf16((float)v); break;
    case BATON_DTYPE_F16: ((uint16_t *)p)[i] = f32_to_f16((float)v); break;
    case BATON_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case BATON_DTYPE_F64: ((double *)p)[i] = v; break;
    case BATON_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case BATON_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case BATON_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case BATON_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

/* store_f64, with integer targets saturated (and NaN stored as 0) so that the conversion is
 * defined for every double: what the initialisers and baton_convert use. */
static inline void store_f64_clamped(baton_dtype dt, void *p, int64_t i, double v)
{
    if (dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64) {
        double lo = dt == BATON_DTYPE_I32 ? -2147483648.0 : -9223372036854775808.0;
        double hi = dt == BATON_DTYPE_I32 ? 2147483647.0 : 9223372036854774784.0; /* < 2^63 */
        v = isnan(v) ? 0 : v < lo ? lo : v > hi ? hi : v;
    } else if (dt == BATON_DTYPE_U8) {
        v = isnan(v) ? 0 : v < 0 ? 0 : v > 255 ? 255 : v;
    }
    store_f64(dt, p, i, v);
}

#endif /* BATON_CORE_DTYPE_H */
