/* decoder.c: the signatures and tables of the decoder ops (docs/targets.md). check() and pack()
 * are the shared rules of kernels/decoder_desc.c: attributes into a baton_decoder_desc, shapes
 * from the step's tensors; the kernels read the same rules at run time. */
#include <string.h>

#include "core/core.h"
#include "kernels/cpu/cpu_decoder.h"
#include "kernels/cpu/cpu_decoder_fused.h"
#include "kernels/decoder_desc.h"
#include "targets/builtin.h"
#include "targets/decoder.h"
#ifdef BATON_CUDA
#include "kernels/cuda/cuda_decoder.h"
#endif

static int dec_check(int op, const baton_sig_args *a, baton_tensor_desc *expected, char *msg,
                     size_t len)
{
    baton_decoder_desc d;
    dec_shape s;
    int rc = baton__dec_desc_from_attrs(op, a, &d, msg, len);
    return rc ? rc : baton__dec_shapes(op, a, &d, &s, expected, msg, len);
}

static int dec_pack(int op, const baton_sig_args *a, char *opaque, size_t cap)
{
    baton_decoder_desc d;
    dec_shape s;
    char msg[512];
    int rc = baton__dec_desc_from_attrs(op, a, &d, msg, sizeof msg);
    if (rc == 0)
        rc = baton__dec_shapes(op, a, &d, &s, NULL, msg, sizeof msg);
    if (rc)
        return rc;
    return baton__put_desc(&d, sizeof d, opaque, cap);
}

#define DEC_FNS(name, OP)                                                                          \
    static int name##_check(const baton_sig_args *a, baton_tensor_desc *e, char *m, size_t l)      \
    {                                                                                              \
        return dec_check(OP, a, e, m, l);                                                          \
    }                                                                                              \
    static int name##_pack(const baton_sig_args *a, char *o, size_t c)                             \
    {                                                                                              \
        return dec_pack(OP, a, o, c);                                                              \
    }

DEC_FNS(embedding, DEC_EMBEDDING)
DEC_FNS(rope, DEC_ROPE)
DEC_FNS(kv_cache_update, DEC_KV_CACHE_UPDATE)
DEC_FNS(attention, DEC_ATTENTION)
DEC_FNS(silu_mul, DEC_SILU_MUL)
DEC_FNS(silu, DEC_SILU)
DEC_FNS(gelu, DEC_GELU)
DEC_FNS(softmax, DEC_SOFTMAX)
DEC_FNS(cast, DEC_CAST)
DEC_FNS(sample, DEC_SAMPLE)
DEC_FNS(swiglu, DEC_SWIGLU)
DEC_FNS(rope_cache_update, DEC_ROPE_CACHE_UPDATE)

#define DEC_TARGET(fn, n_in, text, ...) DEC_TARGET_N(fn, n_in, 1, text, __VA_ARGS__)
#define DEC_TARGET_N(fn, n_in, n_out, text, ...)                                                   \
    const baton_target baton__target_##fn = {.struct_size = sizeof(baton_target),                  \
                                             .name = #fn,                                          \
                                             .kind = BATON_TARGET_KERNEL,                          \
                                             .n_inputs = n_in,                                     \
                                             .n_outputs = n_out,                                   \
                                             .summary = text,                                      \
                                             .check = fn##_check,                                  \
                                             .pack = fn##_pack,                                    \
                                             BATON_BUILTIN_KERNEL_IMPLS(fn),                       \
                                             __VA_ARGS__}

DEC_TARGET(embedding, 2,
           "rows of a table by index (F.embedding): inputs ids (i32/i64, any shape S) and table "
           "[V, D]; output S + [D] in the table's dtype; an id outside [0, V) is a run error");

DEC_TARGET(rope, 3,
           "rotary position embedding: inputs x [..., heads * head_dim], positions [rows] "
           "(i32/i64, read at run time), inv_freq f32 [head_dim / 2]; output x's shape and dtype",
           .attrs = {{"head_dim", BATON_ATTR_INT, 1, "features per head; even, >= 2"},
                     {"interleaved", BATON_ATTR_BOOL, 0,
                      "GPT-J pairs (2i, 2i+1); default false: HF rotate_half halves"},
                     {"scale", BATON_ATTR_FLOAT, 0,
                      "multiplies cos and sin (HF attention_scaling); default 1"}});

DEC_TARGET(kv_cache_update, 3,
           "writes KV rows into a cache in place (index_copy_): inputs cache [S_max, kv_heads * "
           "head_dim] (a state tensor), new [..., kv_heads * head_dim] (rows), positions [rows] "
           "(i32/i64); output the cache (aliases input 0): cache[positions[r]] = new[r]; a "
           "position outside [0, S_max) is a run error",
           .aliases = {{0, 0}}, .n_aliases = 1);

DEC_TARGET(attention, 4,
           "grouped-query attention over a KV cache: inputs q [..., n_heads * head_dim] (T rows), "
           "k_cache and v_cache [S_max, n_kv_heads * head_dim], positions [T] (i32/i64); query r "
           "attends to cache rows 0..positions[r] (causal prefill and decode alike); softmax in "
           "f32 (f64 for f64); output q's shape and dtype",
           .attrs = {{"head_dim", BATON_ATTR_INT, 1, "features per head, 1 to 1024"},
                     {"n_heads", BATON_ATTR_INT, 1, "query heads"},
                     {"n_kv_heads", BATON_ATTR_INT, 1, "key/value heads; divides n_heads"},
                     {"scale", BATON_ATTR_FLOAT, 0,
                      "multiplies q.k; default 1/sqrt(head_dim); nonzero"}});

DEC_TARGET(silu_mul, 2, "y = silu(a) * b (SwiGLU gating); a and b of one shape and dtype");

DEC_TARGET(silu, 1, "y = x * sigmoid(x)");

DEC_TARGET(gelu, 1, "y = gelu(x) (F.gelu)",
           .attrs = {{"approximate", BATON_ATTR_BOOL, 0,
                      "true: the tanh approximation; default false: the erf form"}});

DEC_TARGET(softmax, 1, "softmax over the last dim, accumulated in f32 (f64 for f64)");

DEC_TARGET(cast, 1,
           "y = x converted to the dtype the plan declares for y (bf16, f16, f32, f64; round to "
           "nearest even)");

DEC_TARGET(sample, 2,
           "samples a token per row: inputs logits [..., V] and step (i32/i64, one element); "
           "output ids i64 [rows]; softmax(logits / temperature) restricted to the top_k, then "
           "the top_p mass; deterministic per (seed, step value, row)",
           .attrs = {{"temperature", BATON_ATTR_FLOAT, 0, "> 0; default 1 (for 0 use argmax)"},
                     {"top_k", BATON_ATTR_INT, 0, "keep the k most likely; 0 (default) = off"},
                     {"top_p", BATON_ATTR_FLOAT, 0,
                      "keep the smallest most-likely set of mass >= top_p; (0, 1], 1 = off"},
                     {"seed", BATON_ATTR_INT, 0, "the generator's seed; default 0"}});

DEC_TARGET(swiglu, 1,
           "y = silu(gu[..., :F]) * gu[..., F:] for gu [..., 2F] (the gate and up projections of "
           "one GEMM); the bits of silu_mul on the halves");

DEC_TARGET_N(rope_cache_update, 5, 3,
             "rope and the KV-cache update of one packed projection: inputs qkv [..., (n_heads + 2 "
             "n_kv_heads) * head_dim], positions [rows] (i32/i64), inv_freq f32 [head_dim / 2], "
             "k_cache and v_cache [S_max, n_kv_heads * head_dim] (state); outputs q [..., n_heads "
             "* head_dim] (roped), k_cache (in place of input 3) with the roped k rows at "
             "positions, v_cache (in place of input 4) with the v rows; the bits of rope then "
             "kv_cache_update",
             .attrs = {{"head_dim", BATON_ATTR_INT, 1, "features per head; even"},
                       {"n_heads", BATON_ATTR_INT, 1, "query heads"},
                       {"n_kv_heads", BATON_ATTR_INT, 1, "key/value heads; divides n_heads"},
                       {"interleaved", BATON_ATTR_BOOL, 0,
                        "GPT-J pairs (2i, 2i+1); default false: HF rotate_half halves"},
                       {"scale", BATON_ATTR_FLOAT, 0,
                        "multiplies cos and sin (HF attention_scaling); default 1"}},
             .aliases = {{1, 3}, {2, 4}}, .n_aliases = 2);

int baton__target_opaque_check(const baton_target *t, const baton_sig_args *a, const char *opaque,
                               size_t len, char *msg, size_t cap)
{
    static const struct {
        int (*check)(const baton_sig_args *, baton_tensor_desc *, char *, size_t);
        int op;
    } ops[] = {{embedding_check, DEC_EMBEDDING},
               {rope_check, DEC_ROPE},
               {kv_cache_update_check, DEC_KV_CACHE_UPDATE},
               {attention_check, DEC_ATTENTION},
               {silu_mul_check, DEC_SILU_MUL},
               {silu_check, DEC_SILU},
               {gelu_check, DEC_GELU},
               {softmax_check, DEC_SOFTMAX},
               {cast_check, DEC_CAST},
               {sample_check, DEC_SAMPLE},
               {swiglu_check, DEC_SWIGLU},
               {rope_cache_update_check, DEC_ROPE_CACHE_UPDATE}};
    int op = 0;
    for (size_t i = 0; t && i < sizeof ops / sizeof ops[0]; i++)
        if (t->check == ops[i].check)
            op = ops[i].op;
    if (!op)
        return 0;
    baton_decoder_desc d;
    dec_shape s;
    if (baton__dec_desc_read(op, opaque, len, &d, msg, cap) ||
        baton__dec_desc_agrees(op, a, &d, msg, cap) ||
        baton__dec_shapes(op, a, &d, &s, NULL, msg, cap))
        return BATON_EPLAN;
    return 0;
}
