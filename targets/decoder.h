/* decoder.h: the built-in targets of a Llama-family decoder (targets/decoder.c): embedding, rope,
 * kv_cache_update, attention, silu_mul, silu, gelu, softmax, cast, sample. */
#ifndef BATON_TARGETS_DECODER_H
#define BATON_TARGETS_DECODER_H

#include "baton/baton.h"
#include "core/tune.h"

extern const baton_target baton__target_embedding, baton__target_rope,
    baton__target_kv_cache_update, baton__target_attention, baton__target_silu_mul,
    baton__target_silu, baton__target_gelu, baton__target_softmax, baton__target_cast,
    baton__target_sample, baton__target_swiglu, baton__target_rope_cache_update;

/* A plan's verbatim "opaque" for a step of target t (a->the step's tensors and attributes),
 * decoded and checked at load as the kernel will read it: the size, op, flags and ranges of a
 * baton_decoder_desc, and the step's shapes against the attributes it holds. 0 for a target that
 * is not a decoder op; BATON_EPLAN with the reason in msg. */
int baton__target_opaque_check(const baton_target *t, const baton_sig_args *a, const char *opaque,
                               size_t len, char *msg, size_t cap);

/* The entries of the built-in table (targets/builtin.c lists them with this one line): X(fn) for
 * each target baton__target_fn, so that the table can describe each as it needs (none has a tuning
 * hook; each CUDA kernel has its prepare hook baton__kcuda_fn_prepare). */
#define BATON_DECODER_TARGETS(X)                                                                   \
    X(embedding)                                                                                   \
    X(rope)                                                                                        \
    X(kv_cache_update)                                                                             \
    X(attention)                                                                                   \
    X(silu_mul)                                                                                    \
    X(silu)                                                                                        \
    X(gelu)                                                                                        \
    X(softmax)                                                                                     \
    X(cast)                                                                                        \
    X(sample)                                                                                      \
    X(swiglu)                                                                                      \
    X(rope_cache_update)

#endif
