/* attn_prefill_sm90.h: the causal prefill attention kernel on Hopper's warpgroup MMA
 * (kernels/cuda/attn_prefill_sm90.cu, compiled for sm_90a alone), as decoder.cu's prefill launch
 * calls it. C++ only: it names CUDA types through kcuda_common.cuh. */
#ifndef BATON_KERNELS_CUDA_ATTN_PREFILL_SM90_H
#define BATON_KERNELS_CUDA_ATTN_PREFILL_SM90_H

#include "baton/baton.h"

namespace kcuda
{
namespace pf90
{

/* One prefill call: q [rows, H * 64], the caches [S, Hkv * 64], positions [rows] (i64 when
 * pos64), o [rows, H * 64], all 16-byte aligned. A position outside [0, S) is clamped and
 * recorded as decoder.cu's record() does: err is its device record (4 words), err_host the
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

/* The kernel's loops: tiles of 64 keys with the last tile's P V on the tensor cores during a
 * tile's softmax (PIPE), its K and V by cp.async or by TMA; one tile at a time (LOOP), of 64 or
 * 128 keys. PP: the TMA loop with the two warpgroups taking turns on the tensor cores. _QR: Q's
 * fragments in registers rather than read from shared memory by every Q K^T. */
enum Variant {
    PIPE64,
    PIPE64_QR,
    PIPE64_TMA,
    PIPE64_TMA_QR,
    PP64,
    PP64_QR,
    LOOP64,
    LOOP64_QR,
    LOOP128
};

/* Launches the kernel on ctx's stream; bf16 when !half, f16 when half. 0, or BATON_ECUDA with the
 * reason in ctx's error buffer. */
int launch(const baton_exec_ctx *ctx, const Call &c, bool half, Variant v);

} // namespace pf90
} // namespace kcuda
#endif
