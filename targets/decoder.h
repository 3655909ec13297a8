/* decoder.h: the built-in targets of a Llama-family decoder (targets/decoder.c): embedding, rope,
 * kv_cache_update, attention, silu_mul, silu, gelu, softmax, cast, sample. */
#ifndef BATON_TARGETS_DECODER_H
#define BATON_TARGETS_DECODER_H

#include "baton/baton.h"
#include "core/tune.h"

extern const baton_target baton_target_embedding, baton_target_rope, baton_target_kv_cache_update,
    baton_target_attention, baton_target_silu_mul, baton_target_silu, baton_target_gelu,
    baton_target_softmax, baton_target_cast, baton_target_sample, baton_target_swiglu,
    baton_target_rope_cache_update, baton_target_gemm_add;

/* A plan's verbatim "opaque" for a step of target t (a->the step's tensors and attributes),
 * decoded and checked at load as the kernel will read it: the size, op, flags and ranges of a
 * baton_decoder_desc, and the step's shapes against the attributes it holds. 0 for a target that
 * is not a decoder op; BATON_EPLAN with the reason in msg. */
int target_opaque_check(const baton_target *t, const baton_sig_args *a, const char *opaque,
                        size_t len, char *msg, size_t cap);

/* The entries of the built-in table (targets/builtin.c lists them with this one line): X(t) for
 * each target t, so that the table can describe each as it needs (none has a tuning hook). */
#define BATON_DECODER_TARGETS(X)                                                                   \
    X(baton_target_embedding)                                                                      \
    X(baton_target_rope)                                                                           \
    X(baton_target_kv_cache_update)                                                                \
    X(baton_target_attention)                                                                      \
    X(baton_target_silu_mul)                                                                       \
    X(baton_target_silu)                                                                           \
    X(baton_target_gelu)                                                                           \
    X(baton_target_softmax)                                                                        \
    X(baton_target_cast)                                                                           \
    X(baton_target_sample)                                                                         \
    X(baton_target_swiglu)                                                                         \
    X(baton_target_rope_cache_update)                                                              \
    X(baton_target_gemm_add)

#endif
