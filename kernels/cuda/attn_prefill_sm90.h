/* attn_prefill_sm90.h: the causal prefill attention kernel on Hopper's warpgroup MMA
 * (kernels/cuda/attn_prefill_sm90.cu, compiled for sm_90a alone), as decoder_prefill.cu's prefill
 * launch calls it. C++ only: it names CUDA types through kcuda_common.cuh. */
#ifndef BATON_KERNELS_CUDA_ATTN_PREFILL_SM90_H
#define BATON_KERNELS_CUDA_ATTN_PREFILL_SM90_H

#include "baton/baton.h"

namespace kcuda
{
namespace pf90
{

/* One prefill call: q [rows, H * 64], the caches [S, Hkv * 64], positions [rows] (i64 when
 * pos64), o [rows, H * 64], all 16-byte aligned. A position outside [0, S) is clamped and
 * recorded as decoder_record.cuh's record() does: err is its device record (4 words), err_host the
 * device word that holds the host copy's address, tag the record's first word. */
struct Call {
    const void *q, *k, *v, *pos;
    void *o;
    int pos64;
    long long rows;
    int S, H, Hkv;
    double scale;
    unsigned long long *err;
    unsigned long long *const *err_host;
    unsigned long long tag;
};

/* Whether this build has the kernel (an sm_90a target) and ctx's device runs it (compute
 * capability 9.0), for head_dim 64 and an even number of query heads per KV head. */
bool usable(const baton_exec_ctx *ctx, int H, int Hkv);

/* Launches the kernel on ctx's stream; bf16 when !half, f16 when half. 0, or BATON_ECUDA with the
 * reason in ctx's error buffer. */
int launch(const baton_exec_ctx *ctx, const Call &c, bool half);

} // namespace pf90
} // namespace kcuda
#endif
