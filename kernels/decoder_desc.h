/* decoder_desc.h: the descriptor of the decoder ops (embedding, rope, kv_cache_update, attention,
 * silu_mul, silu, gelu, softmax, cast, sample) and the shape rules they share. The signature
 * checks (targets/decoder.c) and the CPU and CUDA kernels call the same functions, so a load-time
 * check and a run-time call refuse the same shapes with the same words. Shapes come from the
 * step's signature (ctx->sig) on every call: a plan with run-time dims changes them between runs;
 * the descriptor carries only the attributes. */
#ifndef BATON_KERNELS_DECODER_DESC_H
#define BATON_KERNELS_DECODER_DESC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "baton/baton.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define DEC_HD __host__ __device__
#else
#define DEC_HD
#endif

/* Which op a descriptor is for (byte 0 of it). */
typedef enum dec_op {
    DEC_EMBEDDING = 1,
    DEC_ROPE = 2,
    DEC_KV_CACHE_UPDATE = 3,
    DEC_ATTENTION = 4,
    DEC_SILU_MUL = 5,
    DEC_SILU = 6,
    DEC_GELU = 7,
    DEC_SOFTMAX = 8,
    DEC_CAST = 9,
    DEC_SAMPLE = 10,
    DEC_SWIGLU = 11,           /* silu(gu[..., :F]) * gu[..., F:] */
    DEC_ROPE_CACHE_UPDATE = 12 /* rope of q and k from a packed qkv, k and v into the caches */
} dec_op;
#define DEC_OP_MAX 12

/* flags */
#define DEC_FLAG_INTERLEAVED 1u /* rope: GPT-J pairs (2i, 2i+1) instead of HF rotate_half */
#define DEC_FLAG_TANH        2u /* gelu: the tanh approximation */

/* The decoder ops' descriptor: 56 bytes, little-endian (docs/kernels.md, docs/targets.md).
 *   0  int32   op           dec_op code; a kernel refuses another op's descriptor
 *   4  uint32  flags        DEC_FLAG_*; other bits 0
 *   8  int32   head_dim     rope, attention, rope_cache_update (even for the ropes); else 0
 *  12  int32   n_heads      attention, rope_cache_update; else 0
 *  16  int32   n_kv_heads   attention, rope_cache_update (divides n_heads); else 0
 *  20  int32   top_k        sample: 0 = off
 *  24  float64 scale        rope: multiplies cos and sin (HF attention_scaling, 1 = none);
 *                           attention: the softmax scale (1/sqrt(head_dim) by default)
 *  32  float64 temperature  sample: > 0
 *  40  float64 top_p        sample: in (0, 1]; 1 = off
 *  48  uint64  seed         sample */
typedef struct baton_decoder_desc {
    int32_t op;
    uint32_t flags;
    int32_t head_dim;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t top_k;
    double scale;
    double temperature;
    double top_p;
    uint64_t seed;
} baton_decoder_desc;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(baton_decoder_desc) == 56, "decoder descriptor layout");
#endif

/* A call's shapes, as baton__dec_shapes() reads them from a signature. Token-major: a tensor [...,
 * F] is rows = numel / F tokens of F features. */
typedef struct dec_shape {
    int64_t n;          /* elements of the first input (elementwise ops, softmax, rope, cast) */
    int64_t rows;       /* token rows: ids (embedding), x / new / q rows, logits rows */
    int64_t F;          /* features per row: D (embedding), H*Dh (rope, q), Hkv*Dh (caches), N */
    int64_t V;          /* embedding: table rows; sample: vocabulary */
    int64_t S;          /* cache rows S_max (kv_cache_update, attention) */
    int64_t KF;         /* attention, rope_cache_update: cache row width Hkv*Dh */
    int64_t QKV;        /* rope_cache_update: qkv's row width (H + 2 Hkv) * Dh */
    baton_dtype x_dt;   /* the float data: table, x, cache, q, a, logits */
    baton_dtype y_dt;   /* the (first) output */
    baton_dtype idx_dt; /* ids, positions or the step: i32 or i64 (0 when the op has none) */
} dec_shape;

/* The op of a target name ("rope" -> DEC_ROPE), or 0; and back ("rope"; "?" for others). */
int baton__dec_op_of(const char *target);
const char *baton__dec_op_name(int op);

/* The attributes of a step of `op` (a->attrs) as a descriptor, each checked (head_dim >= 1 and
 * even for rope, n_kv_heads dividing n_heads, temperature > 0, top_p in (0, 1], top_k >= 0, a
 * finite scale), with unused fields zero. 0, or BATON_EPLAN with the reason in msg naming the
 * attribute and the value it must have. */
int baton__dec_desc_from_attrs(int op, const baton_sig_args *a, baton_decoder_desc *d, char *msg,
                               size_t len);

/* Checks a descriptor's bytes (size, op, flags, ranges; the fields the op does not use 0, as
 * baton packs them) into *d: 0 or BATON_EINVAL, reason in msg. */
int baton__dec_desc_read(int op, const char *opaque, size_t opaque_len, baton_decoder_desc *d,
                         char *msg, size_t len);

/* A plan's own descriptor against the step's attributes: each field whose attribute the step also
 * gives must hold that attribute's value (as RMSNorm's and the elementwise ops' descriptors are
 * checked). 0, or BATON_EPLAN naming the field and both values. */
int baton__dec_desc_agrees(int op, const baton_sig_args *a, const baton_decoder_desc *d, char *msg,
                           size_t len);

/* The shape rules: the inputs of a, for the op and attributes of d, into *s, and the outputs the
 * step must declare into expected (a->n_outputs entries; NULL: not wanted). For cast, the
 * output's dtype is the declared one (a->outputs[0].dtype). 0, or BATON_EPLAN with the reason in
 * msg naming the tensor (by its plan name where a gives names) and the expected value. */
int baton__dec_shapes(int op, const baton_sig_args *a, const baton_decoder_desc *d, dec_shape *s,
                      baton_tensor_desc *expected, char *msg, size_t len);

/* For a kernel: the descriptor (opaque) and ctx->sig, read and checked as above, and the n
 * buffers present. 0, or BATON_EINVAL with the reason (naming the op) in ctx->errbuf. */
int baton__dec_call_read(const baton_exec_ctx *ctx, int op, void **buffers, int n_buffers,
                         const char *opaque, size_t opaque_len, baton_decoder_desc *d,
                         dec_shape *s);

/* A decoder op's CUDA kernel's prepare hook (core/tune.h's kernel_prepare_fn, for the op and its n
 * buffers): reads the call as baton__dec_call_read does, once, into *state (freed by the runtime
 * with free()). A call that does not read (it will fail the same way when run) keeps nothing
 * (*state NULL): 0 either way, or BATON_ENOMEM. */
int baton__dec_prepare(const baton_exec_ctx *ctx, int op, void **buffers, int n_buffers,
                       const char *opaque, size_t opaque_len, void **state);

/* A kernel's read of its call: with ctx->prepared from baton__dec_prepare, the descriptor and
 * shapes kept there while the descriptor's bytes and ctx->sig's tensors are those they were read
 * from (only the buffers are checked on each call); else, or when they changed (the plan's dims),
 * baton__dec_call_read's, with its errors, kept again. */
int baton__dec_call_decide(const baton_exec_ctx *ctx, int op, void **buffers, int n_buffers,
                           const char *opaque, size_t opaque_len, baton_decoder_desc *d,
                           dec_shape *s);

/* The sampler's counter-based generator: a uniform double in [0, 1) for (seed, step, row), the
 * same on every device (splitmix64 finalisers over the three keys). */
DEC_HD static inline uint64_t dec_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
DEC_HD static inline double dec_uniform(uint64_t seed, int64_t step, int64_t row)
{
    uint64_t h = dec_mix64(seed + 0x9e3779b97f4a7c15ull);
    h = dec_mix64(h ^ ((uint64_t)step * 0xd1b54a32d192ed03ull + 0x9e3779b97f4a7c15ull));
    h = dec_mix64(h ^ ((uint64_t)row * 0xaef17502108ef2d9ull + 0x632be59bd9b4e019ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* A float's order as an unsigned key: a < b (floats, NaN aside) iff key(a) < key(b). The sampler
 * selects its top-k and top-p sets by these keys (radix selection, and on the CPU a heap of the
 * best), with no sort of the row and no scratch. */
DEC_HD static inline uint32_t dec_order_key(uint32_t bits)
{
    /* negative: all bits flipped; else the sign bit set. As a mask rather than a branch: the
     * sign of random logits is a coin toss, and the CPU's sampler mispredicted half of them */
    return bits ^ ((uint32_t)((int32_t)bits >> 31) | 0x80000000u);
}

/* The sampler's weights, the same bits on every device. A library's expf and CUDA's __expf differ
 * in their last bits, and a draw that fell between two tokens' running weights by less than that
 * took different tokens on the CPU and the GPU; so both compute exp here, from IEEE float
 * operations alone, each rounded as written:
 *  - no multiply and add fused into one: CUDA's __fmul_rn/__fadd_rn are never contracted; on the
 *    CPU, an empty asm hides each product from the compiler (glibc's math_opt_barrier does the
 *    same), whatever -ffp-contract says;
 *  - subnormals taken as zero: CUDA's --use_fast_math flushes them, the CPU keeps them unless the
 *    caller's MXCSR flushes them too (XLA:CPU does), so those that a multiply could scale into a
 *    normal number (the logits, their difference, 1/temperature) are flushed here. A subnormal
 *    anywhere else is lost in a sum with 1 or a coefficient, flushed or not. */
DEC_HD static inline float dec_fmul_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    float p = a * b;
#if defined(__GNUC__) && defined(__x86_64__)
    __asm__("" : "+x"(p));
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__("" : "+w"(p));
#elif defined(__GNUC__)
    __asm__("" : "+m"(p));
#else
    volatile float q = p;
    p = q;
#endif
    return p;
#endif
}

DEC_HD static inline float dec_fadd_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

#define DEC_W_FLT_MIN 1.17549435e-38f /* the smallest normal float */
DEC_HD static inline float dec_ftz(float v)
{
    return (v < DEC_W_FLT_MIN && v > -DEC_W_FLT_MIN) ? 0.0f : v;
}

/* 2^40 exp((f - mx) * inv_t) before rounding, for f <= mx: an exact double (a float times a power
 * of two) that llrint takes to the weight in 2^-40 units. 0 below 2^40 e^-29 (0.28, which rounds
 * to 0), for -inf and for NaN; 2^40 for f == mx, +inf among them. exp(z) = 2^k e^r with k the
 * integer nearest z / ln 2, r = z - k ln 2 in two parts (k ln2_hi exact), e^r by its Taylor
 * polynomial of degree 7 (|r| <= 0.35: truncated at 7e-9): within 1.1e-7 of exp, twice
 * expf's 0.5 ulp (tests/test_decoder.c checks 2e-7). */
#define DEC_W_Z_MIN    (-29.0f)    /* below it the weight rounds to 0 */
#define DEC_W_LOG2E    1.44269502f /* 1 / ln 2 */
#define DEC_W_ROUND    12582912.0f /* 1.5 * 2^23: added and taken away, the nearest integer */
#define DEC_W_LN2_HI   0.693145751953125f /* ln 2's high 16 bits: k ln2_hi is exact */
#define DEC_W_LN2_LO   1.42860677e-06f    /* and the rest */
#define DEC_W_C3       1.66666672e-01f    /* 1/3! .. 1/7! */
#define DEC_W_C4       4.16666679e-02f
#define DEC_W_C5       8.33333377e-03f
#define DEC_W_C6       1.38888892e-03f
#define DEC_W_C7       1.98412701e-04f
#define DEC_W_EXP_BIAS (1023 + 40) /* a double's exponent field of 2^(40 + k), less k */
DEC_HD static inline double dec_sample_weight(float f, float mx, float inv_t)
{
    f = dec_ftz(f);
    mx = dec_ftz(mx);
    /* f == mx: the maximum's weight is 2^40, +inf's too (inf - inf is NaN) */
    const float d = f == mx ? 0.0f : dec_ftz(dec_fadd_rn(f, -mx));
    const float z = dec_fmul_rn(d, dec_ftz(inv_t)); /* a subnormal z gives 1 as 0 does */
    if (!(z > DEC_W_Z_MIN))
        return 0;
    const float t = dec_fmul_rn(z, DEC_W_LOG2E);
    const float kf = dec_fadd_rn(dec_fadd_rn(t, DEC_W_ROUND), -DEC_W_ROUND);
    float r = dec_fadd_rn(z, -dec_fmul_rn(kf, DEC_W_LN2_HI));
    r = dec_fadd_rn(r, -dec_fmul_rn(kf, DEC_W_LN2_LO));
    /* sum of r^i / i!, i <= 7, by Estrin's scheme (a third of Horner's dependent steps), the terms
     * past 1 summed first so that only the last sum rounds at 1's scale */
    const float r2 = dec_fmul_rn(r, r), r4 = dec_fmul_rn(r2, r2);
    const float b = dec_fadd_rn(0.5f, dec_fmul_rn(DEC_W_C3, r));
    const float c = dec_fadd_rn(DEC_W_C4, dec_fmul_rn(DEC_W_C5, r));
    const float e = dec_fadd_rn(DEC_W_C6, dec_fmul_rn(DEC_W_C7, r));
    const float hi = dec_fadd_rn(c, dec_fmul_rn(r2, e));
    const float q = dec_fadd_rn(dec_fadd_rn(r, dec_fmul_rn(r2, b)), dec_fmul_rn(r4, hi));
    const float p = dec_fadd_rn(1.0f, q);
    /* 2^(40 + k), k in [-42, 0]: a double's exponent field, exact */
    const uint64_t bits = (uint64_t)(DEC_W_EXP_BIAS + (int)kf) << 52;
    double s;
#ifdef __CUDA_ARCH__
    s = __longlong_as_double((long long)bits);
#else
    memcpy(&s, &bits, sizeof s);
#endif
    return (double)p * s;
}

#ifdef __cplusplus
}
#endif
#endif /* BATON_KERNELS_DECODER_DESC_H */
