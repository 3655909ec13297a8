/* simd.c: the CPU's vector level (detected once, lowered by BATON_CPU_ISA or a test) and the array
 * conversions between bf16/f16/f32 and f32 at that level, with the scalar functions of dtype.h for
 * tails and CPUs without AVX2. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/simd.h"

static _Atomic int level = -1;

simd_level baton__simd_detect(void)
{
#ifdef SIMD_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        return SIMD_AVX512;
    /* F16C comes with every AVX2 CPU; GCC's builtin cannot name it, so it is assumed. */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return SIMD_AVX2;
#endif
    return SIMD_SCALAR;
}

simd_level baton__simd_level_set(simd_level l)
{
    simd_level d = baton__simd_detect();
    if ((int)l > (int)d)
        l = d;
    if ((int)l < 0)
        l = SIMD_SCALAR;
    atomic_store(&level, (int)l);
    return l;
}

simd_level baton__simd_level_get(void)
{
    int l = atomic_load_explicit(&level, memory_order_relaxed);
    if (l >= 0)
        return (simd_level)l;
    simd_level want = SIMD_AVX512;
    const char *e = getenv("BATON_CPU_ISA");
    if (e && strcmp(e, "scalar") == 0)
        want = SIMD_SCALAR;
    else if (e && strcmp(e, "avx2") == 0)
        want = SIMD_AVX2;
    return baton__simd_level_set(want);
}

int baton__simd_has_bf16_dot(void)
{
#ifdef SIMD_X86
    static _Atomic int has = -1;
    int h = atomic_load_explicit(&has, memory_order_relaxed);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx512bf16") ? 1 : 0;
        atomic_store_explicit(&has, h, memory_order_relaxed);
    }
    return h && baton__simd_level_get() == SIMD_AVX512;
#else
    return 0;
#endif
}

const char *baton__simd_level_name(simd_level l)
{
    return l == SIMD_AVX512 ? "avx512" : l == SIMD_AVX2 ? "avx2" : "scalar";
}

#ifdef SIMD_X86
static SIMD_T512 void to_f32_512(baton_dtype dt, const void *src, float *dst, int64_t n)
{
    const size_t es = dt == BATON_DTYPE_F32 ? 4 : 2;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = v16_tail(n - i);
        _mm512_mask_storeu_ps(dst + i, m, v16_load(dt, (const char *)src + es * i, m));
    }
}

static SIMD_T512 void from_f32_512(baton_dtype dt, const float *src, void *dst, int64_t n)
{
    const size_t es = dt == BATON_DTYPE_F32 ? 4 : 2;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = v16_tail(n - i);
        v16_store(dt, (char *)dst + es * i, _mm512_maskz_loadu_ps(m, src + i), m);
    }
}

static SIMD_T256 int64_t to_f32_256(baton_dtype dt, const void *src, float *dst, int64_t n)
{
    const size_t es = dt == BATON_DTYPE_F32 ? 4 : 2;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, v8_load(dt, (const char *)src + es * i));
    return i;
}

static SIMD_T256 int64_t from_f32_256(baton_dtype dt, const float *src, void *dst, int64_t n)
{
    const size_t es = dt == BATON_DTYPE_F32 ? 4 : 2;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        v8_store(dt, (char *)dst + es * i, _mm256_loadu_ps(src + i));
    return i;
}
#endif

void baton__cvt_to_f32(baton_dtype dt, const void *src, float *dst, int64_t n)
{
    int64_t i = 0;
    if (dt == BATON_DTYPE_F32) {
        memmove(dst, src, sizeof(float) * (size_t)n);
        return;
    }
#ifdef SIMD_X86
    simd_level l = baton__simd_level_get();
    if (l == SIMD_AVX512) {
        to_f32_512(dt, src, dst, n);
        return;
    }
    if (l == SIMD_AVX2)
        i = to_f32_256(dt, src, dst, n);
#endif
    const uint16_t *s = src;
    if (dt == BATON_DTYPE_BF16)
        for (; i < n; i++)
            dst[i] = bf16_to_f32(s[i]);
    else
        for (; i < n; i++)
            dst[i] = f16_to_f32(s[i]);
}

void baton__cvt_from_f32(baton_dtype dt, const float *src, void *dst, int64_t n)
{
    int64_t i = 0;
    if (dt == BATON_DTYPE_F32) {
        memmove(dst, src, sizeof(float) * (size_t)n);
        return;
    }
#ifdef SIMD_X86
    simd_level l = baton__simd_level_get();
    if (l == SIMD_AVX512) {
        from_f32_512(dt, src, dst, n);
        return;
    }
    if (l == SIMD_AVX2)
        i = from_f32_256(dt, src, dst, n);
#endif
    uint16_t *d = dst;
    if (dt == BATON_DTYPE_BF16)
        for (; i < n; i++)
            d[i] = f32_to_bf16(src[i]);
    else
        for (; i < n; i++)
            d[i] = f32_to_f16(src[i]);
}

#ifdef SIMD_X86
static SIMD_T512 float dot_512(const float *a, const float *b, int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = v16_tail(n - i);
        acc =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return v16_sum(acc);
}

static SIMD_T256 float dot_256(const float *a, const float *b, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = v8_sum(acc);
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static SIMD_T512 void axpy_512(float s, const float *x, float *y, int64_t n)
{
    const __m512 sv = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = v16_tail(n - i);
        _mm512_mask_storeu_ps(
            y + i, m,
            _mm512_fmadd_ps(sv, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static SIMD_T256 void axpy_256(float s, const float *x, float *y, int64_t n)
{
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(sv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] = __builtin_fmaf(s, x[i], y[i]);
}
#endif

float baton__simd_dot_f32(const float *a, const float *b, int64_t n)
{
#ifdef SIMD_X86
    simd_level l = baton__simd_level_get();
    if (l == SIMD_AVX512)
        return dot_512(a, b, n);
    if (l == SIMD_AVX2)
        return dot_256(a, b, n);
#endif
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void baton__simd_axpy_f32(float s, const float *x, float *y, int64_t n)
{
#ifdef SIMD_X86
    simd_level l = baton__simd_level_get();
    if (l == SIMD_AVX512) {
        axpy_512(s, x, y, n);
        return;
    }
    if (l == SIMD_AVX2) {
        axpy_256(s, x, y, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        y[i] += s * x[i];
}
