/* decoder_read.h: what the CPU's decoder kernels (decoder.c, sample.c) share to read a call: its
 * descriptor and shapes (READ), and an index tensor's values (i32 or i64). Private to kernels/cpu/.
 */
#ifndef BATON_KERNELS_CPU_DECODER_READ_H
#define BATON_KERNELS_CPU_DECODER_READ_H

#include <stdint.h>

#include "baton/baton.h"
#include "kernels/decoder_desc.h"

static inline int64_t idx_at(baton_dtype dt, const void *p, int64_t i)
{
    return dt == BATON_DTYPE_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* The call's descriptor d and shapes s (baton__dec_call_read), or its error returned. */
#define READ(op, nbuf)                                                                             \
    baton_decoder_desc d;                                                                          \
    dec_shape s;                                                                                   \
    int rc = baton__dec_call_read(ctx, op, buffers, nbuf, opaque, len, &d, &s);                    \
    if (rc)                                                                                        \
    return rc

#endif
