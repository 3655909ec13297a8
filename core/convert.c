/* convert.c: baton_convert, the public element conversion between baton's dtypes, so that programs
 * built on the public header (the CLI, examples/infer.c, embedders) read and write bf16 and f16
 * tensors with the same rounding as baton's kernels. */
#include "core/dtype.h"

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
    for (int64_t i = 0; i < n; i++)
        store_f64_clamped(dst_dtype, dst, i, load_f64(src_dtype, src, i));
    return 0;
}
