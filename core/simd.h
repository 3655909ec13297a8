/* simd.h: the CPU's vector level, chosen at run time (AVX-512, AVX2 + FMA + F16C, or scalar), and
 * the vector loads and stores that convert bf16/f16/f32 to and from f32 in registers with the same
 * bits as core/dtype.h's scalar functions (round to nearest even, subnormals kept, NaNs as the
 * scalar code writes them). Functions for a level carry its target attribute, so the library is
 * built for baseline x86-64 and runs the best code the machine has. */
#ifndef BATON_CORE_SIMD_H
#define BATON_CORE_SIMD_H

#include <stdint.h>

#include "baton/baton.h"

typedef enum simd_level { SIMD_SCALAR = 0, SIMD_AVX2 = 1, SIMD_AVX512 = 2 } simd_level;

/* The best level this CPU has. */
simd_level baton__simd_detect(void);
/* The level kernels use now: the detected one, or lower when BATON_CPU_ISA (scalar, avx2,
 * avx512) or baton__simd_level_set asked for it. Never above the detected one. */
simd_level baton__simd_level_get(void);
/* Sets the level for the whole process (tests and benchmarks compare levels); clamped to the
 * detected one; returns the level in force. */
simd_level baton__simd_level_set(simd_level l);
const char *baton__simd_level_name(simd_level l);
/* Nonzero when the level is AVX-512 and the CPU has AVX512-BF16 (vdpbf16ps: 32 bf16 products
 * summed in pairs into 16 f32 lanes per instruction; it treats subnormal inputs as zero). */
int baton__simd_has_bf16_dot(void);

/* n elements of src (bf16, f16 or f32) as f32 into dst, and back with rounding to nearest even:
 * the same bits as bf16_to_f32/f16_to_f32 and f32_to_bf16/f32_to_f16 element by element. */
void baton__cvt_to_f32(baton_dtype dt, const void *src, float *dst, int64_t n);
void baton__cvt_from_f32(baton_dtype dt, const float *src, void *dst, int64_t n);

/* sum a[i] * b[i] in f32, in an order fixed by the vector level (16 lanes, 8 lanes or in turn):
 * the same bits on every call and thread at one level. */
float baton__simd_dot_f32(const float *a, const float *b, int64_t n);
/* y[i] += s * x[i] (fused where the level has FMA). */
void baton__simd_axpy_f32(float s, const float *x, float *y, int64_t n);

#if defined(__x86_64__) && defined(__GNUC__)
#define SIMD_X86 1
#include <immintrin.h>

#define SIMD_T512   __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define SIMD_T256   __attribute__((target("avx2,fma,f16c")))
#define SIMD_T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

/* ---- AVX-512: 16 lanes; m masks a tail ---- */

static inline SIMD_T512 __m512 v16_bf16(const uint16_t *p, __mmask16 m)
{
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline SIMD_T512 __m512 v16_f16(const uint16_t *p, __mmask16 m)
{
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    __m512 f = _mm512_cvtph_ps(h);
    /* The hardware quiets a signalling NaN; the scalar conversion keeps its bits. */
    __m512i w = _mm512_cvtepu16_epi32(h);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(w, _mm512_set1_epi32(0x7fff)),
                                            _mm512_set1_epi32(0x7c00));
    if (nan) {
        __m512i ref = _mm512_or_si512(
            _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16),
                            _mm512_set1_epi32(0x7f800000)),
            _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13));
        f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(ref));
    }
    return f;
}

static inline SIMD_T512 __m256i v16_to_bf16(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                         _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))),
        16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan,
                              _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

static inline SIMD_T512 __m256i v16_to_f16(__m512 v)
{
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i u = _mm512_castps_si512(v);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    if (nan) { /* the scalar code writes sign | 0x7e00 for every NaN */
        __m512i ref =
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
                            _mm512_set1_epi32(0x7e00));
        h = _mm256_mask_blend_epi16(nan, h, _mm512_cvtepi32_epi16(ref));
    }
    return h;
}

/* Loads 16 elements of dtype dt at p (m: which lanes) as f32. */
static inline SIMD_T512 __m512 v16_load(baton_dtype dt, const void *p, __mmask16 m)
{
    if (dt == BATON_DTYPE_BF16)
        return v16_bf16(p, m);
    if (dt == BATON_DTYPE_F16)
        return v16_f16(p, m);
    return _mm512_maskz_loadu_ps(m, p);
}

static inline SIMD_T512 void v16_store(baton_dtype dt, void *p, __m512 v, __mmask16 m)
{
    if (dt == BATON_DTYPE_BF16)
        _mm256_mask_storeu_epi16(p, m, v16_to_bf16(v));
    else if (dt == BATON_DTYPE_F16)
        _mm256_mask_storeu_epi16(p, m, v16_to_f16(v));
    else
        _mm512_mask_storeu_ps(p, m, v);
}

/* The same for 16 whole elements, without a mask (masked loads and stores cost a loop a third of
 * its speed on Zen 4), and a store that bypasses the caches (for outputs larger than the caches:
 * no read for ownership; p aligned to the vector, _mm_sfence before the data is handed over). */
static inline SIMD_T512 __m512 v16_loadu(baton_dtype dt, const void *p)
{
    if (dt == BATON_DTYPE_F32)
        return _mm512_loadu_ps(p);
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (dt == BATON_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return v16_f16(p, 0xffff);
}

static inline SIMD_T512 void v16_storeu(baton_dtype dt, void *p, __m512 v)
{
    if (dt == BATON_DTYPE_BF16)
        _mm256_storeu_si256((__m256i *)p, v16_to_bf16(v));
    else if (dt == BATON_DTYPE_F16)
        _mm256_storeu_si256((__m256i *)p, v16_to_f16(v));
    else
        _mm512_storeu_ps(p, v);
}

static inline SIMD_T512 void v16_stream(baton_dtype dt, void *p, __m512 v)
{
    if (dt == BATON_DTYPE_BF16)
        _mm256_stream_si256((__m256i *)p, v16_to_bf16(v));
    else if (dt == BATON_DTYPE_F16)
        _mm256_stream_si256((__m256i *)p, v16_to_f16(v));
    else
        _mm512_stream_ps(p, v);
}

static inline __mmask16 v16_tail(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/* ---- AVX2: 8 lanes, whole vectors only (tails go to the scalar code) ---- */

static inline SIMD_T256 __m256 v8_bf16(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline SIMD_T256 __m256 v8_f16(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    __m256 f = _mm256_cvtph_ps(h);
    __m256i w = _mm256_cvtepu16_epi32(h);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7fff)),
                                     _mm256_set1_epi32(0x7c00));
    if (!_mm256_testz_si256(nan, nan)) {
        __m256i ref = _mm256_or_si256(
            _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16),
                            _mm256_set1_epi32(0x7f800000)),
            _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3ff)), 13));
        f = _mm256_blendv_ps(f, _mm256_castsi256_ps(ref), _mm256_castsi256_ps(nan));
    }
    return f;
}

/* 8 values in [0, 0xffff] held in 32-bit lanes, as 8 uint16. */
static inline SIMD_T256 __m128i v8_pack16(__m256i r)
{
    __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
    return _mm256_castsi256_si128(p);
}

/* NaN lanes of u (f32 bits) as all ones; the compare is signed, so clear the sign bit first. */
static inline SIMD_T256 __m256i v8_isnan(__m256i u)
{
    return _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                              _mm256_set1_epi32(0x7f800000));
}

static inline SIMD_T256 __m128i v8_to_bf16(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                         _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))),
        16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, q, v8_isnan(u));
    return v8_pack16(r);
}

static inline SIMD_T256 __m128i v8_to_f16(__m256 v)
{
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i u = _mm256_castps_si256(v);
    __m256i nan = v8_isnan(u);
    if (!_mm256_testz_si256(nan, nan)) {
        __m256i ref =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
                            _mm256_set1_epi32(0x7e00));
        __m256i w = _mm256_blendv_epi8(_mm256_cvtepu16_epi32(h), ref, nan);
        h = v8_pack16(w);
    }
    return h;
}

static inline SIMD_T256 __m256 v8_load(baton_dtype dt, const void *p)
{
    if (dt == BATON_DTYPE_BF16)
        return v8_bf16(p);
    if (dt == BATON_DTYPE_F16)
        return v8_f16(p);
    return _mm256_loadu_ps(p);
}

static inline SIMD_T256 void v8_store(baton_dtype dt, void *p, __m256 v)
{
    if (dt == BATON_DTYPE_BF16)
        _mm_storeu_si128((__m128i *)p, v8_to_bf16(v));
    else if (dt == BATON_DTYPE_F16)
        _mm_storeu_si128((__m128i *)p, v8_to_f16(v));
    else
        _mm256_storeu_ps(p, v);
}

/* Horizontal sums in a fixed order (the same bits wherever they run). */
static inline SIMD_T512 float v16_sum(__m512 v)
{
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

static inline SIMD_T256 float v8_sum(__m256 s)
{
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
#endif /* x86-64 */

#endif /* BATON_CORE_SIMD_H */
