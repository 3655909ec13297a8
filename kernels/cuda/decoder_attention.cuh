/* decoder_attention.cuh: what the attention op's two files share: decoder_attention.cu (the
 * op's entry, and its decode and generic kernels) and decoder_prefill.cu (the prefill of 16 rows
 * or more on tensor cores). */
#ifndef BATON_KCUDA_DECODER_ATTENTION_CUH
#define BATON_KCUDA_DECODER_ATTENTION_CUH

#include "kernels/cuda/decoder_common.cuh"

namespace kcuda
{
namespace dec
{

/* Knobs for timing the decode variants against each other (bench_decoder, one setting per
 * process; docs/benchmarks.md): BATON_ATTN_DECODE=simt takes the CUDA-core kernel
 * (attn_split_kernel) for bf16/f16 too, BATON_ATTN_CLUSTER=C (1 to 16) fixes the cluster
 * size of either, BATON_ATTN_STAGES=3, 4 or 6 the stages per warp of the tensor-core kernel at
 * head_dim 64 with 8 warps (6 by default), BATON_ATTN_WARPS=8, 10, 12 or 16 the warps that share
 * its 192 KB (or 200 KB) of stages at head_dim 64 (6, 5, 4 or 3 stages each; by default 12 for
 * caches of 8192 rows and more, else 8), BATON_ATTN_PREFETCH=n (0 to 16, 0 by default) has its
 * warps ask tile i + n into L2 as they copy tile i; launched with PDL, BATON_ATTN_EARLY=n (0 to 64,
 * 4 by default) has each warp ask its first n tiles into L2 before the wait and BATON_ATTN_SPEC=1
 * starts the ring on the positions' hint (0 by default); BATON_ATTN_VERBOSE=1 prints each
 * configuration the first time it is launched (stderr). The defaults are what
 * docs/decisions/0012 measured fastest. Read once per process; the results do not depend on them
 * beyond rounding (the cluster size and the warps change the order of the merge; the stages,
 * prefetches and the hint change nothing). */
struct AttEnv {
    int simt, cluster, stages, verbose, prefetch, early, spec, warps;
};

/* The knobs, read on first use (decoder_attention.cu). */
const AttEnv &att_env();

/* The prefill on tensor cores (decoder_prefill.cu): q, K, V and o of f16 (f16 true) or bf16,
 * 16-byte aligned, 16 rows or more, head_dim 64 or 128, S within 32 bits and a scale not 0 (the
 * caller checks): 0 or the launch's failure. */
int attn_prefill_tc(const baton_exec_ctx *ctx, void **b, const baton_decoder_desc &d,
                    const dec_shape &s, bool f16);

} /* namespace dec */
} /* namespace kcuda */

#endif /* BATON_KCUDA_DECODER_ATTENTION_CUH */
