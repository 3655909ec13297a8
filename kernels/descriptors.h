/* descriptors.h: the byte layouts of the opaque descriptors that baton's built-in kernels
 * receive, shared by the CPU and CUDA implementations and by whoever packs them (the validator,
 * XLA's backend_config). All fields are little-endian and naturally aligned; docs/kernels.md
 * documents them byte by byte. The structs must stay plain data: a descriptor is memcpy'd. */
#ifndef BATON_KERNELS_DESCRIPTORS_H
#define BATON_KERNELS_DESCRIPTORS_H

#include <stdint.h>

/* rms_norm_fwd and rms_norm_bwd: 40 bytes.
 *   0  int64   n1              rows (product of x's dims not covered by the weight)
 *   8  int64   n2              normalized elements per row (numel of the weight)
 *  16  float64 eps
 *  24  int32   x_dtype         baton_dtype code of x (and grad_input)
 *  28  int32   w_dtype         baton_dtype code of the weight (and y, grad_output, grad_weight:
 *                              grad_output is the gradient of y, so it has y's dtype)
 *  32  int64   part_grad_size  rows of the partial-gradient buffer (bwd; fwd ignores it)
 *
 * Forward buffers:  x, weight | y, invvar
 * Backward buffers: grad_output, invvar, x, weight | grad_input, grad_weight, part_grad
 * invvar is f32 (f64 when x is f64) of n1 elements; part_grad is f32 (f64 for f64 x) of
 * part_grad_size x n2 elements: row p holds the sum of grad_output * x * invvar over the rows of
 * block p, where the n1 rows are split into part_grad_size contiguous blocks of
 * ceil(n1 / part_grad_size) rows (trailing blocks may be empty and hold zeros). grad_weight is the
 * column sum of part_grad in block order, so it is deterministic. */
typedef struct baton_rms_norm_desc {
    int64_t n1;
    int64_t n2;
    double eps;
    int32_t x_dtype;
    int32_t w_dtype;
    int64_t part_grad_size;
} baton_rms_norm_desc;

/* rms_norm_bwd also takes 48 bytes: the 40 above, then
 *  40  int64   unsharded_part_grad_size  0, or the part_grad_size of the call that this one is a
 *                                        row shard of (>= part_grad_size). The CUDA backward
 *                                        then splits each block's rows as that call would, so
 *                                        that the shards' part_grads, gathered, are its bits
 *                                        (docs/shard.md). The CPU adds rows in order anyway.
 * A 40-byte descriptor (the JAX tutorial's) reads it as 0. */
typedef struct baton_rms_norm_shard_desc {
    baton_rms_norm_desc rms;
    int64_t unsharded_part_grad_size;
} baton_rms_norm_shard_desc;

/* rms_norm_fwd and rms_norm_bwd also take the JAX custom-operation tutorial's own
 * RMSNormDescriptor, 32 bytes on x86-64 and AArch64:
 *   struct RMSNormDescriptor { int n1; int n2; double eps; ElementType x_type, w_type;
 *                              int part_grad_size; };  enum ElementType { BF16, F16, F32, F64 };
 *   0  int32   n1
 *   4  int32   n2
 *   8  float64 eps
 *  16  int32   x_type          ElementType: 0 bf16, 1 f16, 2 f32, 3 f64 (baton's code minus 1)
 *  20  int32   w_type          ElementType
 *  24  int32   part_grad_size
 *  28  4 bytes of padding      ignored (the tutorial copies the struct with whatever it holds)
 * The length tells the layouts apart: 32 is the tutorial's, 40 (or 48 for the backward) baton's.
 * desc_check.h decodes both into baton_rms_norm_shard_desc. */
typedef struct baton_rms_norm_tutorial_desc {
    int32_t n1;
    int32_t n2;
    double eps;
    int32_t x_type;
    int32_t w_type;
    int32_t part_grad_size;
    int32_t padding;
} baton_rms_norm_tutorial_desc;

/* rms_norm_grad_weight: 24 bytes.
 *   0  int64   part_grad_size  rows P of part_grad
 *   8  int64   n2              numel of the weight (part_grad's row length)
 *  16  int32   pg_dtype        baton_dtype code of part_grad: f32, or f64 (rms_norm_bwd's for
 *                              f64 x)
 *  20  int32   w_dtype         baton_dtype code of the weight and of grad_weight
 *
 * Buffers: part_grad, weight | grad_weight. The weight is never read: it is an input so that the
 * plan states grad_weight's dtype and shape where rms_norm_bwd does. grad_weight is the column sum
 * of part_grad in the order rms_norm_bwd adds it, so that from the same part_grad both write the
 * same bits on one device kind (the CPU, or CUDA). */
typedef struct baton_rms_grad_weight_desc {
    int64_t part_grad_size;
    int64_t n2;
    int32_t pg_dtype;
    int32_t w_dtype;
} baton_rms_grad_weight_desc;

/* softshrink, add, mul, add_scalar, copy: 32 bytes.
 *   0  int64   n      elements of the first input (and of the output)
 *   8  int64   nb     elements of the second input (add, mul): n or a divisor of n, in which
 *                     case b repeats over a's leading dims; 0 for unary kernels
 *  16  int32   dtype  baton_dtype code of every buffer
 *  20  int32   reserved, 0
 *  24  float64 value  lambda (softshrink) or the scalar (add_scalar); 0 otherwise */
typedef struct baton_ew_desc {
    int64_t n;
    int64_t nb;
    int32_t dtype;
    int32_t reserved;
    double value;
} baton_ew_desc;

/* argmax over the last dimension: 24 bytes.
 *   0  int64  n1     rows
 *   8  int64  n2     elements per row
 *  16  int32  dtype  baton_dtype code of x; the output is int64 (first maximum wins; NaN is
 *                    the maximum)
 *  20  int32  reserved, 0 */
typedef struct baton_argmax_desc {
    int64_t n1;
    int64_t n2;
    int32_t dtype;
    int32_t reserved;
} baton_argmax_desc;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(baton_rms_norm_desc) == 40, "rms_norm descriptor layout");
_Static_assert(sizeof(baton_rms_norm_shard_desc) == 48, "rms_norm shard descriptor layout");
_Static_assert(sizeof(baton_rms_norm_tutorial_desc) == 32, "the JAX tutorial's descriptor layout");
_Static_assert(sizeof(baton_rms_grad_weight_desc) == 24, "rms_norm_grad_weight descriptor layout");
_Static_assert(sizeof(baton_ew_desc) == 32, "elementwise descriptor layout");
_Static_assert(sizeof(baton_argmax_desc) == 24, "argmax descriptor layout");
#endif

#endif /* BATON_KERNELS_DESCRIPTORS_H */
