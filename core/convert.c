/* convert.c: baton_convert, the public element conversion between baton's dtypes, so that programs
 * built on the public header (the CLI, examples/infer.c, embedders) read and write bf16 and f16
 * tensors with the same rounding as baton's kernels. */
#include "core/dtype.h"
#include "core/simd.h"

static int is_f32ish(baton_dtype dt)
{
    return dt == BATON_DTYPE_BF16 || dt == BATON_DTYPE_F16 || dt == BATON_DTYPE_F32;
}

int baton_convert(void *dst, baton_dtype dst_dtype, const void *src, baton_dtype src_dtype,
                  int64_t n)
{
    if (n < 0 || baton_dtype_size(dst_dtype) == 0 || baton_dtype_size(src_dtype) == 0 ||
        (n > 0 && (!dst || !src)))
        return BATON_EINVAL;
    /* Integer to integer without a double in between, which would lose i64 bits beyond 2^53. */
    if ((dst_dtype == BATON_DTYPE_I32 || dst_dtype == BATON_DTYPE_I64) &&
        (src_dtype == BATON_DTYPE_I32 || src_dtype == BATON_DTYPE_I64)) {
        for (int64_t i = 0; i < n; i++) {
            int64_t v = src_dtype == BATON_DTYPE_I32 ? ((const int32_t *)src)[i]
                                                     : ((const int64_t *)src)[i];
            if (dst_dtype == BATON_DTYPE_I64)
                ((int64_t *)dst)[i] = v;
            else
                ((int32_t *)dst)[i] = v < INT32_MIN   ? INT32_MIN
                                      : v > INT32_MAX ? INT32_MAX
                                                      : (int32_t)v;
        }
        return 0;
    }
    /* Between bf16, f16 and f32 every value is exact in f32: convert in vectors through an f32
     * chunk on the stack, not through a double per element (the same bits). */
    if (is_f32ish(dst_dtype) && is_f32ish(src_dtype)) {
        enum { C = 1024 };
        float buf[C];
        const size_t ss = baton_dtype_size(src_dtype), ds = baton_dtype_size(dst_dtype);
        for (int64_t i = 0; i < n; i += C) {
            int64_t c = n - i < C ? n - i : C;
            const char *s = (const char *)src + ss * (size_t)i;
            char *d = (char *)dst + ds * (size_t)i;
            if (src_dtype == BATON_DTYPE_F32)
                baton__cvt_from_f32(dst_dtype, (const float *)s, d, c);
            else if (dst_dtype == BATON_DTYPE_F32)
                baton__cvt_to_f32(src_dtype, s, (float *)d, c);
            else {
                baton__cvt_to_f32(src_dtype, s, buf, c);
                baton__cvt_from_f32(dst_dtype, buf, d, c);
            }
        }
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        store_f64_clamped(dst_dtype, dst, i, load_f64(src_dtype, src, i));
    return 0;
}
