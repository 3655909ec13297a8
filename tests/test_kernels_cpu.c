/* test_kernels_cpu.c: the built-in kernel targets on the CPU: check() and pack() against their
 * documented signatures and byte layouts, every CPU kernel against a float64 reference written
 * here (fresh random inputs, outputs poisoned first, every dtype pair, odd sizes), and bad
 * descriptors giving an error instead of a crash. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "targets/builtin.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/descriptors.h"
#include "core/dtype.h"
#include "tests/support.h"

static const baton_dtype FLOATS[4] = {BATON_DTYPE_BF16, BATON_DTYPE_F16, BATON_DTYPE_F32,
                                      BATON_DTYPE_F64};
static const baton_dtype ALL[6] = {BATON_DTYPE_BF16, BATON_DTYPE_F16, BATON_DTYPE_F32,
                                   BATON_DTYPE_F64,  BATON_DTYPE_I32, BATON_DTYPE_I64};

/* ---- helpers ----------------------------------------------------------------------------------
 */

static const baton_target *target(const char *name)
{
    for (int i = 0; i < baton__builtin_target_count; i++)
        if (strcmp(baton__builtin_targets[i].target->name, name) == 0)
            return baton__builtin_targets[i].target;
    cr_assert_fail("built-in target %s is missing", name);
    return NULL;
}

static baton_tensor_desc mkdesc(baton_dtype dt, const int64_t *shape, int rank)
{
    baton_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt;
    d.rank = rank;
    for (int i = 0; i < rank; i++)
        d.shape[i] = shape[i];
    return d;
}
#define SHAPE(...)    (int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8)
#define DESC(dt, ...) mkdesc(dt, SHAPE(__VA_ARGS__))

static baton_attr attr_f(const char *name, double v)
{
    return (baton_attr){.name = name, .type = BATON_ATTR_FLOAT, .f = v};
}
static baton_attr attr_i(const char *name, int64_t v)
{
    return (baton_attr){.name = name, .type = BATON_ATTR_INT, .i = v, .f = (double)v};
}

static baton_sig_args sig(int n_in, const baton_tensor_desc *in, int n_out, int n_attrs,
                          const baton_attr *attrs)
{
    return (baton_sig_args){.n_inputs = n_in,
                            .inputs = in,
                            .n_outputs = n_out,
                            .outputs = NULL,
                            .n_attrs = n_attrs,
                            .attrs = attrs};
}

static int desc_eq(const baton_tensor_desc *a, const baton_tensor_desc *b)
{
    if (a->dtype != b->dtype || a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

static const char *dstr(const baton_tensor_desc *d, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%s[", baton_dtype_name(d->dtype));
    for (int i = 0; i < d->rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, i ? ",%lld" : "%lld", (long long)d->shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

#define ASSERT_DESC(got, want)                                                                     \
    do {                                                                                           \
        char b1_[128], b2_[128];                                                                   \
        cr_assert(desc_eq(&(got), &(want)), "expected %s, check() gave %s",                        \
                  dstr(&(want), b1_, sizeof b1_), dstr(&(got), b2_, sizeof b2_));                  \
    } while (0)

/* Runs check(); asserts it succeeds and returns nothing else. */
static void check_ok(const char *name, const baton_sig_args *a, baton_tensor_desc *expected)
{
    char msg[512] = "";
    int rc = target(name)->check(a, expected, msg, sizeof msg);
    cr_assert_eq(rc, 0, "%s check() rejected a good signature: %s", name, msg);
}

/* Runs check(); asserts BATON_EPLAN with a message containing each of the given words. */
static void check_bad(const char *name, const baton_sig_args *a, const char *w1, const char *w2)
{
    char msg[512] = "";
    baton_tensor_desc expected[4];
    int rc = target(name)->check(a, expected, msg, sizeof msg);
    cr_assert_eq(rc, BATON_EPLAN, "%s check() accepted a bad signature (rc %d)", name, rc);
    cr_assert(strlen(msg) > 10, "%s check() gave no reason", name);
    cr_assert(strchr(msg, '\n') == NULL, "the reason must be one line: %s", msg);
    cr_assert(!w1 || strstr(msg, w1), "%s: reason \"%s\" does not mention \"%s\"", name, msg, w1);
    cr_assert(!w2 || strstr(msg, w2), "%s: reason \"%s\" does not mention \"%s\"", name, msg, w2);
}

static int pack(const char *name, const baton_sig_args *a, char *opaque)
{
    memset(opaque, 0xab, BATON_OPAQUE_MAX);
    return target(name)->pack(a, opaque, BATON_OPAQUE_MAX);
}

static int64_t rd_i64(const char *p, size_t off)
{
    int64_t v;
    memcpy(&v, p + off, 8);
    return v;
}
static int32_t rd_i32(const char *p, size_t off)
{
    int32_t v;
    memcpy(&v, p + off, 4);
    return v;
}
static double rd_f64(const char *p, size_t off)
{
    double v;
    memcpy(&v, p + off, 8);
    return v;
}

static void *poisoned(baton_dtype dt, int64_t n)
{
    size_t bytes = (size_t)n * baton_dtype_size(dt);
    void *p = malloc(bytes ? bytes : 1);
    cr_assert(p, "out of memory");
    test_poison(p, bytes);
    return p;
}

static void *random_buf(test_rng *r, baton_dtype dt, int64_t n, double scale)
{
    void *p = poisoned(dt, n);
    test_fill_random(r, dt, p, n, scale);
    return p;
}

static double *dalloc(int64_t n)
{
    double *p = calloc((size_t)(n ? n : 1), sizeof(double));
    cr_assert(p, "out of memory");
    return p;
}

static baton_exec_ctx cpu_ctx(char *errbuf, size_t len)
{
    baton_exec_ctx c;
    memset(&c, 0, sizeof c);
    c.device.kind = BATON_DEVICE_CPU;
    c.step_name = "test";
    c.errbuf = errbuf;
    c.errbuf_len = len;
    if (errbuf && len)
        errbuf[0] = 0;
    return c;
}

static baton_dtype ivdt_of(baton_dtype x)
{
    return x == BATON_DTYPE_F64 ? BATON_DTYPE_F64 : BATON_DTYPE_F32;
}

static double fmax2(double a, double b)
{
    return a > b ? a : b;
}

/* ---- the table --------------------------------------------------------------------------------
 */

Test(builtin_targets, lists_every_kernel_and_the_gemm_delegate_once_with_a_cpu_implementation)
{
    static const char *names[] = {"rms_norm_fwd", "rms_norm_bwd", "rms_norm_grad_weight",
                                  "softshrink",   "add",          "mul",
                                  "add_scalar",   "copy",         "argmax",
                                  "noop",         "gemm"};
    static const int ins[] = {2, 4, 2, 1, 2, 2, 1, 1, 1, 1, 2},
                     outs[] = {2, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    /* these 11, then the 12 decoder ops and gemm_add (tests/test_decoder.c checks those), and
     * rms_norm_gemm and swiglu_gemm_add (tests/test_gemv_fused.c) */
    cr_assert_eq(baton__builtin_target_count, 26);
    for (int i = 0; i < 11; i++) {
        int found = 0;
        for (int j = 0; j < baton__builtin_target_count; j++) {
            const baton_target *t = baton__builtin_targets[j].target;
            if (strcmp(t->name, names[i]) != 0)
                continue;
            found++;
            cr_assert_eq(t->n_inputs, ins[i], "%s inputs", names[i]);
            cr_assert_eq(t->n_outputs, outs[i], "%s outputs", names[i]);
            cr_assert(t->check, "%s has no check()", names[i]);
            cr_assert(t->summary && *t->summary, "%s has no summary", names[i]);
            int is_gemm = strcmp(names[i], "gemm") == 0;
            cr_assert_eq(t->kind, is_gemm ? BATON_TARGET_DELEGATE : BATON_TARGET_KERNEL);
            const baton_target_impl *cpu = NULL;
            for (int k = 0; k < t->n_impls; k++)
                if (t->impls[k].device == BATON_DEVICE_CPU)
                    cpu = &t->impls[k];
            cr_assert(cpu, "%s has no CPU implementation", names[i]);
            cr_assert(is_gemm ? cpu->delegate != NULL && cpu->kernel == NULL
                              : cpu->kernel != NULL && cpu->delegate == NULL,
                      "%s's CPU implementation is of the wrong kind", names[i]);
#ifdef BATON_CUDA
            cr_assert_eq(t->n_impls, 2, "%s has no CUDA implementation", names[i]);
#else
            cr_assert_eq(t->n_impls, 1, "%s: a CPU-only build registers only the CPU", names[i]);
#endif
        }
        cr_assert_eq(found, 1, "%s appears %d times", names[i], found);
    }
}

/* ---- check() and pack() -----------------------------------------------------------------------
 */

Test(rms_norm_check, gives_y_in_the_weights_dtype_and_f32_invvar_per_row)
{
    for (int xi = 0; xi < 4; xi++)
        for (int wi = 0; wi < 4; wi++) {
            baton_tensor_desc in[2] = {DESC(FLOATS[xi], 8, 4096), DESC(FLOATS[wi], 4096)};
            baton_sig_args a = sig(2, in, 2, 0, NULL);
            baton_tensor_desc e[2];
            check_ok("rms_norm_fwd", &a, e);
            baton_tensor_desc y = DESC(FLOATS[wi], 8, 4096), iv = DESC(ivdt_of(FLOATS[xi]), 8);
            ASSERT_DESC(e[0], y);
            ASSERT_DESC(e[1], iv);
        }
}

Test(rms_norm_check, normalizes_over_every_dim_of_the_weight)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_BF16, 4, 512, 512),
                               DESC(BATON_DTYPE_BF16, 512, 512)};
    baton_attr at[1] = {attr_f("eps", 1e-6)};
    baton_sig_args a = sig(2, in, 2, 1, at);
    baton_tensor_desc e[2];
    check_ok("rms_norm_fwd", &a, e);
    baton_tensor_desc y = DESC(BATON_DTYPE_BF16, 4, 512, 512), iv = DESC(BATON_DTYPE_F32, 4);
    ASSERT_DESC(e[0], y);
    ASSERT_DESC(e[1], iv);
    char op[BATON_OPAQUE_MAX];
    cr_assert_eq(pack("rms_norm_fwd", &a, op), 40);
    cr_assert_eq(rd_i64(op, 0), 4, "n1");
    cr_assert_eq(rd_i64(op, 8), 262144, "n2");
    cr_assert_eq(rd_f64(op, 16), 1e-6, "eps");
    cr_assert_eq(rd_i32(op, 24), BATON_DTYPE_BF16, "x_dtype");
    cr_assert_eq(rd_i32(op, 28), BATON_DTYPE_BF16, "w_dtype");
    cr_assert_eq((unsigned char)op[40], 0xab, "pack wrote past its 40 bytes");
}

Test(rms_norm_check, gives_invvar_shape_1_when_x_has_no_leading_dims)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F64, 7), DESC(BATON_DTYPE_F16, 7)};
    baton_sig_args a = sig(2, in, 2, 0, NULL);
    baton_tensor_desc e[2];
    check_ok("rms_norm_fwd", &a, e);
    baton_tensor_desc iv = DESC(BATON_DTYPE_F64, 1);
    ASSERT_DESC(e[1], iv);
}

Test(rms_norm_check, packs_the_default_eps_and_accepts_an_integer_eps)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F32, 3, 5), DESC(BATON_DTYPE_F64, 5)};
    baton_sig_args a = sig(2, in, 2, 0, NULL);
    char op[BATON_OPAQUE_MAX];
    cr_assert_eq(pack("rms_norm_fwd", &a, op), 40);
    cr_assert_eq(rd_f64(op, 16), 1e-5);
    cr_assert_eq(rd_i64(op, 0), 3);
    cr_assert_eq(rd_i64(op, 8), 5);
    cr_assert_eq(rd_i32(op, 24), BATON_DTYPE_F32);
    cr_assert_eq(rd_i32(op, 28), BATON_DTYPE_F64);
    baton_attr at[1] = {attr_i("eps", 0)};
    a = sig(2, in, 2, 1, at);
    check_ok("rms_norm_fwd", &a, NULL);
    cr_assert_eq(pack("rms_norm_fwd", &a, op), 40);
    cr_assert_eq(rd_f64(op, 16), 0.0);
}

Test(rms_norm_check, rejects_a_weight_that_is_not_xs_trailing_dims)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_BF16, 8, 4096), DESC(BATON_DTYPE_BF16, 512)};
    baton_sig_args a = sig(2, in, 2, 0, NULL);
    check_bad("rms_norm_fwd", &a, "512", "must equal x's last");
    baton_tensor_desc in2[2] = {DESC(BATON_DTYPE_BF16, 4, 512, 256),
                                DESC(BATON_DTYPE_BF16, 256, 512)};
    a = sig(2, in2, 2, 0, NULL);
    check_bad("rms_norm_fwd", &a, "[256, 512]", "must equal x's last 2 dims");
    baton_tensor_desc in3[2] = {DESC(BATON_DTYPE_BF16, 512), DESC(BATON_DTYPE_BF16, 2, 512)};
    a = sig(2, in3, 2, 0, NULL);
    check_bad("rms_norm_fwd", &a, "more dims", NULL);
}

Test(rms_norm_check, rejects_integer_dtypes_naming_the_valid_ones)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_I32, 8, 16), DESC(BATON_DTYPE_F32, 16)};
    baton_sig_args a = sig(2, in, 2, 0, NULL);
    check_bad("rms_norm_fwd", &a, "x is i32", "bf16, f16, f32 or f64");
    baton_tensor_desc in2[2] = {DESC(BATON_DTYPE_F32, 8, 16), DESC(BATON_DTYPE_I64, 16)};
    a = sig(2, in2, 2, 0, NULL);
    check_bad("rms_norm_fwd", &a, "weight is i64", "bf16, f16, f32 or f64");
}

Test(rms_norm_check, rejects_a_negative_eps_and_zero_sized_dims)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F32, 8, 16), DESC(BATON_DTYPE_F32, 16)};
    baton_attr at[1] = {attr_f("eps", -1e-5)};
    baton_sig_args a = sig(2, in, 2, 1, at);
    check_bad("rms_norm_fwd", &a, "eps", ">= 0");
    char op[BATON_OPAQUE_MAX];
    cr_assert_lt(pack("rms_norm_fwd", &a, op), 0, "pack() must refuse what check() refuses");
    baton_tensor_desc in2[2] = {DESC(BATON_DTYPE_F32, 0, 16), DESC(BATON_DTYPE_F32, 16)};
    a = sig(2, in2, 2, 0, NULL);
    check_bad("rms_norm_fwd", &a, "dim of 0", ">= 1");
    baton_tensor_desc in3[1] = {DESC(BATON_DTYPE_F32, 16)};
    a = sig(1, in3, 2, 0, NULL);
    check_bad("rms_norm_fwd", &a, "2 inputs", NULL);
}

Test(rms_norm_check, backward_gives_grads_and_a_part_grad_of_part_grad_size_rows)
{
    baton_tensor_desc in[4] = {DESC(BATON_DTYPE_BF16, 4, 512, 512), DESC(BATON_DTYPE_F32, 4),
                               DESC(BATON_DTYPE_F16, 4, 512, 512),
                               DESC(BATON_DTYPE_BF16, 512, 512)};
    baton_sig_args a = sig(4, in, 3, 0, NULL);
    baton_tensor_desc e[3];
    check_ok("rms_norm_bwd", &a, e);
    baton_tensor_desc gi = DESC(BATON_DTYPE_F16, 4, 512, 512),
                      gw = DESC(BATON_DTYPE_BF16, 512, 512),
                      pg = DESC(BATON_DTYPE_F32, 4, 512, 512);
    ASSERT_DESC(e[0], gi);
    ASSERT_DESC(e[1], gw);
    ASSERT_DESC(e[2], pg);
    char op[BATON_OPAQUE_MAX];
    cr_assert_eq(pack("rms_norm_bwd", &a, op), 40);
    cr_assert_eq(rd_i64(op, 0), 4);
    cr_assert_eq(rd_i64(op, 8), 262144);
    cr_assert_eq(rd_i32(op, 24), BATON_DTYPE_F16);
    cr_assert_eq(rd_i32(op, 28), BATON_DTYPE_BF16);
    cr_assert_eq(rd_i64(op, 32), 4, "the default part_grad_size is min(rows, 256)");

    baton_tensor_desc in64[4] = {DESC(BATON_DTYPE_F32, 6, 7), DESC(BATON_DTYPE_F64, 6),
                                 DESC(BATON_DTYPE_F64, 6, 7), DESC(BATON_DTYPE_F32, 7)};
    baton_attr at[2] = {attr_i("part_grad_size", 3), attr_f("eps", 1e-3)};
    a = sig(4, in64, 3, 2, at);
    check_ok("rms_norm_bwd", &a, e);
    baton_tensor_desc pg64 = DESC(BATON_DTYPE_F64, 3, 7);
    ASSERT_DESC(e[2], pg64);
    cr_assert_eq(pack("rms_norm_bwd", &a, op), 40);
    cr_assert_eq(rd_i64(op, 32), 3);
    cr_assert_eq(rd_f64(op, 16), 1e-3);

    /* A row shard's step: 48 bytes, the unsharded call's part_grad_size last. */
    baton_attr sh[2] = {attr_i("part_grad_size", 3), attr_i("unsharded_part_grad_size", 6)};
    a = sig(4, in64, 3, 2, sh);
    check_ok("rms_norm_bwd", &a, e);
    cr_assert_eq(pack("rms_norm_bwd", &a, op), 48);
    cr_assert_eq(rd_i64(op, 32), 3);
    cr_assert_eq(rd_i64(op, 40), 6);
    sh[1] = attr_i("unsharded_part_grad_size", 2);
    a = sig(4, in64, 3, 2, sh);
    check_bad("rms_norm_bwd", &a, "unsharded_part_grad_size is 2 but part_grad_size is 3",
              "row shard");
}

Test(rms_norm_check, backward_rejects_mismatched_grad_output_invvar_and_part_grad_size)
{
    baton_tensor_desc in[4] = {DESC(BATON_DTYPE_F32, 8, 64), DESC(BATON_DTYPE_F32, 8),
                               DESC(BATON_DTYPE_BF16, 8, 64), DESC(BATON_DTYPE_BF16, 64)};
    baton_sig_args a = sig(4, in, 3, 0, NULL);
    check_bad("rms_norm_bwd", &a, "grad_output is f32", "weight's (bf16)");
    in[0] = DESC(BATON_DTYPE_BF16, 8, 32);
    check_bad("rms_norm_bwd", &a, "grad_output has shape [8, 32]", "must be equal");
    in[0] = DESC(BATON_DTYPE_BF16, 8, 64);
    in[1] = DESC(BATON_DTYPE_F64, 8);
    check_bad("rms_norm_bwd", &a, "invvar is f64", "must be f32");
    in[1] = DESC(BATON_DTYPE_F32, 4);
    check_bad("rms_norm_bwd", &a, "8 rows", "one value per row");
    in[1] = DESC(BATON_DTYPE_F32, 8);
    check_ok("rms_norm_bwd", &a, NULL);
    baton_attr at[1] = {attr_i("part_grad_size", 0)};
    a = sig(4, in, 3, 1, at);
    check_bad("rms_norm_bwd", &a, "part_grad_size is 0", ">= 1");
}

/* part_grad as the JAX tutorial's abstract evaluation declares it, [P, numel(weight)], or as
 * [P] + weight's shape: without the attribute P is the declaration's; a disagreeing attribute
 * names the tensor (the plan's name when the caller gives names, else its role) and the fixes. */
Test(rms_norm_check, backward_takes_p_from_a_declared_part_grad_of_either_form)
{
    baton_tensor_desc in[4] = {DESC(BATON_DTYPE_F32, 5, 3, 7), DESC(BATON_DTYPE_F32, 5),
                               DESC(BATON_DTYPE_F32, 5, 3, 7), DESC(BATON_DTYPE_F32, 3, 7)};
    baton_tensor_desc out[3] = {DESC(BATON_DTYPE_F32, 5, 3, 7), DESC(BATON_DTYPE_F32, 3, 7),
                                DESC(BATON_DTYPE_F32, 16, 21)};
    baton_sig_args a = sig(4, in, 3, 0, NULL);
    a.outputs = out;
    baton_tensor_desc e[3];
    char op[BATON_OPAQUE_MAX];
    check_ok("rms_norm_bwd", &a, e);
    ASSERT_DESC(e[2], out[2]);
    cr_assert_eq(pack("rms_norm_bwd", &a, op), 40);
    cr_assert_eq(rd_i64(op, 32), 16, "P comes from the [P, n2] declaration");

    out[2] = DESC(BATON_DTYPE_F32, 16, 3, 7);
    check_ok("rms_norm_bwd", &a, e);
    ASSERT_DESC(e[2], out[2]);
    cr_assert_eq(pack("rms_norm_bwd", &a, op), 40);
    cr_assert_eq(rd_i64(op, 32), 16, "P comes from the [P] + weight shape declaration");

    /* an agreeing attribute is fine in either form */
    baton_attr at[1] = {attr_i("part_grad_size", 16)};
    a = sig(4, in, 3, 1, at);
    a.outputs = out;
    check_ok("rms_norm_bwd", &a, e);
    ASSERT_DESC(e[2], out[2]);
    out[2] = DESC(BATON_DTYPE_F32, 16, 21);
    check_ok("rms_norm_bwd", &a, e);
    ASSERT_DESC(e[2], out[2]);

    /* a disagreeing one: both values and the three fixes, the tensor by role without names ... */
    at[0] = attr_i("part_grad_size", 8);
    check_bad("rms_norm_bwd", &a, "part_grad_size is 8 but part_grad is declared [16, 21], with 16",
              "set \"part_grad_size\": 16, or leave the attribute out");
    check_bad("rms_norm_bwd", &a, "declare part_grad as [8, 21]", NULL);
    /* ... and by the plan's name with them */
    const char *in_names[4] = {"g", "inv", "x", "w"}, *out_names[3] = {"dx", "dw", "pg"};
    a.input_names = in_names;
    a.output_names = out_names;
    check_bad("rms_norm_bwd", &a, "part_grad 'pg' is declared [16, 21]", "declare 'pg' as [8, 21]");

    /* any other declaration is left to the validator, against [part_grad_size] + weight shape */
    out[2] = DESC(BATON_DTYPE_F32, 16, 20);
    check_ok("rms_norm_bwd", &a, e);
    baton_tensor_desc want = DESC(BATON_DTYPE_F32, 8, 3, 7);
    ASSERT_DESC(e[2], want);
}

Test(rms_norm_check, grad_weight_takes_the_weights_desc_from_either_part_grad_form)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F32, 16, 512, 512),
                               DESC(BATON_DTYPE_BF16, 512, 512)};
    baton_sig_args a = sig(2, in, 1, 0, NULL);
    baton_tensor_desc e[1];
    check_ok("rms_norm_grad_weight", &a, e);
    ASSERT_DESC(e[0], in[1]);
    char op[BATON_OPAQUE_MAX];
    cr_assert_eq(pack("rms_norm_grad_weight", &a, op), 24);
    cr_assert_eq(rd_i64(op, 0), 16);
    cr_assert_eq(rd_i64(op, 8), 262144);
    cr_assert_eq(rd_i32(op, 16), BATON_DTYPE_F32);
    cr_assert_eq(rd_i32(op, 20), BATON_DTYPE_BF16);
    /* The JAX tutorial's flat [P, n2] and an f64 part_grad (rms_norm_bwd's for f64 x). */
    in[0] = DESC(BATON_DTYPE_F64, 3, 262144);
    check_ok("rms_norm_grad_weight", &a, e);
    ASSERT_DESC(e[0], in[1]);
    cr_assert_eq(pack("rms_norm_grad_weight", &a, op), 24);
    cr_assert_eq(rd_i64(op, 0), 3);
    cr_assert_eq(rd_i32(op, 16), BATON_DTYPE_F64);
}

Test(rms_norm_check, grad_weight_rejects_a_part_grad_that_rms_norm_bwd_would_not_write)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_BF16, 4, 64), DESC(BATON_DTYPE_BF16, 64)};
    baton_sig_args a = sig(2, in, 1, 0, NULL);
    check_bad("rms_norm_grad_weight", &a, "part_grad is bf16", "must be f32");
    in[0] = DESC(BATON_DTYPE_F32, 4, 32);
    check_bad("rms_norm_grad_weight", &a, "part_grad has shape [4, 32]", "[P, 64]");
    in[0] = DESC(BATON_DTYPE_F32, 4, 2, 32);
    check_bad("rms_norm_grad_weight", &a, "[P] + the weight's shape", NULL);
    in[0] = DESC(BATON_DTYPE_F32, 4, 64);
    in[1] = DESC(BATON_DTYPE_I32, 64);
    check_bad("rms_norm_grad_weight", &a, "weight is i32", NULL);
    in[1] = DESC(BATON_DTYPE_F32, 64);
    check_ok("rms_norm_grad_weight", &a, NULL);
    a = sig(1, in, 1, 0, NULL);
    check_bad("rms_norm_grad_weight", &a, "2 inputs", NULL);
}

Test(elementwise_check, gives_the_output_the_first_inputs_desc_and_packs_the_layout)
{
    char op[BATON_OPAQUE_MAX];
    for (int d = 0; d < 6; d++) {
        baton_tensor_desc in[2] = {DESC(ALL[d], 2, 3, 5), DESC(ALL[d], 3, 5)};
        baton_tensor_desc e[1];
        const char *bins[2] = {"add", "mul"};
        for (int k = 0; k < 2; k++) {
            baton_sig_args a = sig(2, in, 1, 0, NULL);
            check_ok(bins[k], &a, e);
            ASSERT_DESC(e[0], in[0]);
            cr_assert_eq(pack(bins[k], &a, op), 32);
            cr_assert_eq(rd_i64(op, 0), 30, "n");
            cr_assert_eq(rd_i64(op, 8), 15, "nb");
            cr_assert_eq(rd_i32(op, 16), (int32_t)ALL[d], "dtype");
            cr_assert_eq(rd_i32(op, 20), 0, "reserved");
            cr_assert_eq(rd_f64(op, 24), 0.0, "value");
            cr_assert_eq((unsigned char)op[32], 0xab, "pack wrote past its 32 bytes");
        }
        baton_attr at[1] = {attr_f("value", -3.0)};
        baton_sig_args a = sig(1, in, 1, 1, at);
        check_ok("add_scalar", &a, e);
        ASSERT_DESC(e[0], in[0]);
        cr_assert_eq(pack("add_scalar", &a, op), 32);
        cr_assert_eq(rd_i64(op, 8), 0, "nb of a unary kernel");
        cr_assert_eq(rd_f64(op, 24), -3.0);
        a = sig(1, in, 1, 0, NULL);
        check_ok("copy", &a, e);
        ASSERT_DESC(e[0], in[0]);
        check_ok("noop", &a, e);
        ASSERT_DESC(e[0], in[0]);
        cr_assert_eq(pack("copy", &a, op), 32);
        cr_assert_eq(rd_i64(op, 0), 30);
        if (d < 4) {
            check_ok("softshrink", &a, e);
            ASSERT_DESC(e[0], in[0]);
            cr_assert_eq(pack("softshrink", &a, op), 32);
            cr_assert_eq(rd_f64(op, 24), 0.5, "the default lambda is 0.5");
        }
    }
}

Test(elementwise_check, rejects_b_that_is_neither_as_shape_nor_its_trailing_dims)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F32, 2, 4), DESC(BATON_DTYPE_F32, 2)};
    baton_sig_args a = sig(2, in, 1, 0, NULL);
    check_bad("add", &a, "b has shape [2]", "trailing dims");
    in[1] = DESC(BATON_DTYPE_F32, 3, 2, 4);
    check_bad("mul", &a, "a has [2, 4]", NULL);
    in[1] = DESC(BATON_DTYPE_F16, 4);
    check_bad("add", &a, "b is f16", "one dtype");
    in[1] = DESC(BATON_DTYPE_F32, 1, 4);
    check_ok("add", &a, NULL);
}

Test(elementwise_check, rejects_bad_attribute_values_and_dtypes)
{
    baton_tensor_desc in[1] = {DESC(BATON_DTYPE_I32, 9)};
    baton_sig_args a = sig(1, in, 1, 0, NULL);
    check_bad("add_scalar", &a, "value is required", NULL);
    baton_attr half[1] = {attr_f("value", 0.5)};
    a = sig(1, in, 1, 1, half);
    check_bad("add_scalar", &a, "i32", "integer");
    baton_attr big[1] = {attr_f("value", 4e9)};
    a = sig(1, in, 1, 1, big);
    check_bad("add_scalar", &a, "range", NULL);
    a = sig(1, in, 1, 0, NULL);
    check_bad("softshrink", &a, "x is i32", "bf16, f16, f32 or f64");
    in[0] = DESC(BATON_DTYPE_F32, 9);
    baton_attr neg[1] = {attr_f("lambda", -0.1)};
    a = sig(1, in, 1, 1, neg);
    check_bad("softshrink", &a, "lambda", ">= 0");
    baton_attr inf[1] = {attr_f("value", INFINITY)};
    a = sig(1, in, 1, 1, inf);
    check_bad("add_scalar", &a, "finite", NULL);
    in[0].dtype = BATON_DTYPE_INVALID;
    a = sig(1, in, 1, 0, NULL);
    check_bad("copy", &a, "copy takes", NULL);
}

Test(argmax_check, gives_i64_indices_over_the_leading_dims)
{
    baton_tensor_desc in[1] = {DESC(BATON_DTYPE_BF16, 3, 4, 1000)};
    baton_sig_args a = sig(1, in, 1, 0, NULL);
    baton_tensor_desc e[1];
    check_ok("argmax", &a, e);
    baton_tensor_desc want = DESC(BATON_DTYPE_I64, 3, 4);
    ASSERT_DESC(e[0], want);
    char op[BATON_OPAQUE_MAX];
    cr_assert_eq(pack("argmax", &a, op), 24);
    cr_assert_eq(rd_i64(op, 0), 12, "n1");
    cr_assert_eq(rd_i64(op, 8), 1000, "n2");
    cr_assert_eq(rd_i32(op, 16), BATON_DTYPE_BF16);
    cr_assert_eq(rd_i32(op, 20), 0);
    cr_assert_eq((unsigned char)op[24], 0xab, "pack wrote past its 24 bytes");
    in[0] = DESC(BATON_DTYPE_F64, 17);
    check_ok("argmax", &a, e);
    want = DESC(BATON_DTYPE_I64, 1);
    ASSERT_DESC(e[0], want);
    in[0] = mkdesc(BATON_DTYPE_F32, NULL, 0);
    check_bad("argmax", &a, "scalar", "rank >= 1");
    /* integers are accepted (compared exactly), on the CPU as on CUDA */
    in[0] = DESC(BATON_DTYPE_I32, 4);
    check_ok("argmax", &a, e);
    ASSERT_DESC(e[0], want);
}

Test(pack, refuses_a_buffer_too_small_for_the_descriptor)
{
    baton_tensor_desc in[2] = {DESC(BATON_DTYPE_F32, 3, 5), DESC(BATON_DTYPE_F32, 5)};
    baton_sig_args a = sig(2, in, 2, 0, NULL);
    char op[64];
    cr_assert_lt(target("rms_norm_fwd")->pack(&a, op, 39), 0);
    a = sig(2, in, 1, 0, NULL);
    cr_assert_lt(target("add")->pack(&a, op, 31), 0);
    cr_assert_eq(target("add")->pack(&a, op, 32), 32);
    cr_assert_null(target("noop")->pack, "noop has no descriptor");
}

/* ---- rms_norm: the float64 reference ----------------------------------------------------------
 */

static void ref_fwd(baton_dtype xdt, const void *x, baton_dtype wdt, const void *w, int64_t n1,
                    int64_t n2, double eps, double *y, double *iv)
{
    for (int64_t r = 0; r < n1; r++) {
        double ss = 0;
        for (int64_t j = 0; j < n2; j++) {
            double v = load_f64(xdt, x, r * n2 + j);
            ss += v * v;
        }
        iv[r] = 1.0 / sqrt(ss / (double)n2 + eps);
        for (int64_t j = 0; j < n2; j++)
            y[r * n2 + j] = load_f64(wdt, w, j) * load_f64(xdt, x, r * n2 + j) * iv[r];
    }
}

/* grad_input (and the magnitudes of its two terms); part (pgs x n2) of block sums; gw (n2)
 * summed over all rows directly. */
static void ref_bwd(baton_dtype xdt, baton_dtype wdt, const void *g, const void *ivs, const void *x,
                    const void *w, int64_t n1, int64_t n2, int64_t pgs, double *gi,
                    double *gi_terms, double *part, double *gw)
{
    baton_dtype ivdt = ivdt_of(xdt);
    int64_t block = (n1 + pgs - 1) / pgs;
    memset(part, 0, sizeof(double) * (size_t)(pgs * n2));
    memset(gw, 0, sizeof(double) * (size_t)n2);
    for (int64_t r = 0; r < n1; r++) {
        double iv = load_f64(ivdt, ivs, r), s = 0;
        for (int64_t j = 0; j < n2; j++)
            s += load_f64(wdt, g, r * n2 + j) * load_f64(wdt, w, j) * load_f64(xdt, x, r * n2 + j);
        double mean = s / (double)n2;
        for (int64_t j = 0; j < n2; j++) {
            double gv = load_f64(wdt, g, r * n2 + j), xv = load_f64(xdt, x, r * n2 + j);
            gi[r * n2 + j] = iv * (gv * load_f64(wdt, w, j) - xv * iv * iv * mean);
            gi_terms[r * n2 + j] =
                fabs(iv * gv * load_f64(wdt, w, j)) + fabs(xv * iv * iv * iv * mean);
            part[(r / block) * n2 + j] += gv * xv * iv;
            gw[j] += gv * xv * iv;
        }
    }
}

/* grad_input subtracts two terms that nearly cancel when n2 is small (n2 = 1: the result is
 * ~eps), so its error is measured against ||ref|| + 1e-3 ||terms||: a sum that is accurate
 * relative to its terms passes, and where nothing cancels this is test_rel_err within 0.1%.
 * Such results can be f16 subnormals, so an error under half the dtype's smallest step (what
 * rounding to the dtype alone costs) is not counted. */
static double cancel_err(baton_dtype dt, const void *a, const double *ref, const double *terms,
                         int64_t n)
{
    const double half_step = dt == BATON_DTYPE_F16 ? 0x1p-25 : 0; /* half of f16's 2^-24 */
    double num = 0, den = 0, tden = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = load_f64(dt, a, i);
        if (isnan(v) && !isnan(ref[i]))
            return INFINITY;
        double d = fabs(v - ref[i]) - half_step;
        if (d > 0)
            num += d * d;
        den += ref[i] * ref[i];
        tden += terms[i] * terms[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-3 * sqrt(tden));
}

typedef struct rms_bufs {
    void *x, *w, *y, *iv, *g, *gi, *gw, *part;
} rms_bufs;

static void rms_free(rms_bufs *b)
{
    free(b->x);
    free(b->w);
    free(b->y);
    free(b->iv);
    free(b->g);
    free(b->gi);
    free(b->gw);
    free(b->part);
}

/* One forward and backward case through check(), pack() and the CPU kernels. */
static void rms_case(test_rng *rng, uint64_t seed, baton_dtype xdt, baton_dtype wdt,
                     const baton_tensor_desc *xd, const baton_tensor_desc *wd, double eps,
                     int64_t pgs)
{
    char errbuf[256], op[BATON_OPAQUE_MAX];
    baton_exec_ctx ctx = cpu_ctx(errbuf, sizeof errbuf);
    baton_tensor_desc in[4] = {*xd, *wd};
    in[0].dtype = xdt;
    in[1].dtype = wdt;
    baton_attr at[2] = {attr_f("eps", eps), attr_i("part_grad_size", pgs)};
    baton_sig_args a = sig(2, in, 2, 1, at);
    baton_tensor_desc e[3];
    check_ok("rms_norm_fwd", &a, e);
    cr_assert_eq(pack("rms_norm_fwd", &a, op), 40);
    const int64_t n2 = baton_tensor_desc_numel(wd), n1 = baton_tensor_desc_numel(xd) / n2;
    const baton_dtype ivdt = ivdt_of(xdt);
    const char *xs = baton_dtype_name(xdt), *ws = baton_dtype_name(wdt);

    rms_bufs b = {0};
    b.x = random_buf(rng, xdt, n1 * n2, 1.0);
    b.w = random_buf(rng, wdt, n2, 1.0);
    b.y = poisoned(wdt, n1 * n2);
    b.iv = poisoned(ivdt, n1);
    double *ry = dalloc(n1 * n2), *riv = dalloc(n1);
    ref_fwd(xdt, b.x, wdt, b.w, n1, n2, eps, ry, riv);
    void *fb[4] = {b.x, b.w, b.y, b.iv};
    int rc = baton__kcpu_rms_norm_fwd(&ctx, fb, op, 40);
    cr_assert_eq(rc, 0, "rms_norm_fwd failed: %s", errbuf);
    double ey = test_rel_err(wdt, b.y, ry, n1 * n2), eiv = test_rel_err(ivdt, b.iv, riv, n1);
    cr_assert_leq(ey, test_tolerance(wdt),
                  "fwd y x=%s w=%s n1=%lld n2=%lld: rel err %g > %g (seed %llu)", xs, ws,
                  (long long)n1, (long long)n2, ey, test_tolerance(wdt), (unsigned long long)seed);
    cr_assert_leq(eiv, test_tolerance(ivdt),
                  "fwd invvar x=%s w=%s n1=%lld n2=%lld: rel err %g (seed %llu)", xs, ws,
                  (long long)n1, (long long)n2, eiv, (unsigned long long)seed);

    /* Backward, fed with the reference invvar rounded to its dtype. */
    in[0] = *xd;
    in[0].dtype = wdt;
    in[1] = e[1];
    in[2] = *xd;
    in[2].dtype = xdt;
    in[3] = *wd;
    in[3].dtype = wdt;
    a = sig(4, in, 3, 2, at);
    check_ok("rms_norm_bwd", &a, e);
    cr_assert_eq(pack("rms_norm_bwd", &a, op), 40);
    b.g = random_buf(rng, wdt, n1 * n2, 1.0);
    for (int64_t r = 0; r < n1; r++)
        store_f64(ivdt, b.iv, r, riv[r]);
    b.gi = poisoned(xdt, n1 * n2);
    b.gw = poisoned(wdt, n2);
    b.part = poisoned(ivdt, pgs * n2);
    double *rgi = dalloc(n1 * n2), *rterms = dalloc(n1 * n2), *rpart = dalloc(pgs * n2),
           *rgw = dalloc(n2);
    ref_bwd(xdt, wdt, b.g, b.iv, b.x, b.w, n1, n2, pgs, rgi, rterms, rpart, rgw);
    void *bb[7] = {b.g, b.iv, b.x, b.w, b.gi, b.gw, b.part};
    rc = baton__kcpu_rms_norm_bwd(&ctx, bb, op, 40);
    cr_assert_eq(rc, 0, "rms_norm_bwd failed: %s", errbuf);
    double egi = cancel_err(xdt, b.gi, rgi, rterms, n1 * n2);
    double epart = test_rel_err(ivdt, b.part, rpart, pgs * n2);
    /* grad_weight sums part_grad rounded to f32, then rounds to the weight's dtype. The sum may
     * cancel (n2 = 1, many rows), so the error is taken against the partials' magnitude too:
     * a wrong sum is still off by the size of the partials. */
    double *rpabs = dalloc(n2);
    for (int64_t p = 0; p < pgs; p++)
        for (int64_t j = 0; j < n2; j++)
            rpabs[j] += fabs(rpart[p * n2 + j]);
    double egw;
    {
        double num = 0, den = 0, tden = 0;
        for (int64_t j = 0; j < n2; j++) {
            double v = load_f64(wdt, b.gw, j);
            num += (v - rgw[j]) * (v - rgw[j]);
            den += rgw[j] * rgw[j];
            tden += rpabs[j] * rpabs[j];
        }
        egw = isnan(num) ? INFINITY : sqrt(num) / (sqrt(den) + sqrt(tden));
    }
    free(rpabs);
    double tgw = fmax2(test_tolerance(wdt), test_tolerance(ivdt));
    cr_assert_leq(egi, test_tolerance(xdt),
                  "bwd grad_input x=%s w=%s n1=%lld n2=%lld: rel err %g (seed %llu)", xs, ws,
                  (long long)n1, (long long)n2, egi, (unsigned long long)seed);
    cr_assert_leq(epart, test_tolerance(ivdt),
                  "bwd part_grad x=%s w=%s n1=%lld n2=%lld pgs=%lld: rel err %g (seed %llu)", xs,
                  ws, (long long)n1, (long long)n2, (long long)pgs, epart,
                  (unsigned long long)seed);
    cr_assert_leq(egw, tgw, "bwd grad_weight x=%s w=%s n1=%lld n2=%lld: rel err %g (seed %llu)", xs,
                  ws, (long long)n1, (long long)n2, egw, (unsigned long long)seed);
    free(ry);
    free(riv);
    free(rgi);
    free(rterms);
    free(rpart);
    free(rgw);
    rms_free(&b);
}

Test(rms_norm_cpu, matches_the_float64_reference_for_every_dtype_pair_and_odd_sizes)
{
    static const int64_t n2s[] = {1, 7, 4095}, n1s[] = {1, 5, 33};
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    for (int xi = 0; xi < 4; xi++)
        for (int wi = 0; wi < 4; wi++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) {
                    baton_tensor_desc xd = DESC(FLOATS[xi], n1s[j], n2s[i]);
                    baton_tensor_desc wd = DESC(FLOATS[wi], n2s[i]);
                    rms_case(&rng, seed, FLOATS[xi], FLOATS[wi], &xd, &wd, 1e-5, 1 + j * 3);
                }
}

Test(rms_norm_cpu, matches_the_float64_reference_on_rows_of_262147_for_every_dtype_pair)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    for (int xi = 0; xi < 4; xi++)
        for (int wi = 0; wi < 4; wi++) {
            baton_tensor_desc xd = DESC(FLOATS[xi], 2, 262147), wd = DESC(FLOATS[wi], 262147);
            rms_case(&rng, seed, FLOATS[xi], FLOATS[wi], &xd, &wd, 1e-5, 16);
        }
}

Test(rms_norm_cpu, normalizes_the_tutorials_4x512x512_over_a_512x512_weight)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    baton_tensor_desc xd = DESC(BATON_DTYPE_BF16, 4, 512, 512);
    baton_tensor_desc wd = DESC(BATON_DTYPE_BF16, 512, 512);
    rms_case(&rng, seed, BATON_DTYPE_BF16, BATON_DTYPE_BF16, &xd, &wd, 1e-5, 16);
    rms_case(&rng, seed, BATON_DTYPE_F32, BATON_DTYPE_F32, &xd, &wd, 0.0, 3);
}

Test(rms_norm_cpu, uses_eps_inside_the_square_root)
{
    /* One row of constant c: invvar = 1/sqrt(c^2 + eps) exactly in double. */
    double x[4] = {0.5, 0.5, 0.5, 0.5}, w[4] = {1, 2, 3, 4}, y[4], iv[1];
    baton_rms_norm_desc d = {
        .n1 = 1, .n2 = 4, .eps = 0.75, .x_dtype = BATON_DTYPE_F64, .w_dtype = BATON_DTYPE_F64};
    void *bufs[4] = {x, w, y, iv};
    cr_assert_eq(baton__kcpu_rms_norm_fwd(NULL, bufs, (const char *)&d, sizeof d), 0);
    cr_assert_eq(iv[0], 1.0, "invvar = 1/sqrt(0.25 + 0.75)");
    for (int i = 0; i < 4; i++)
        cr_assert_eq(y[i], 0.5 * (i + 1));
}

/* The part_grad layout of descriptors.h, exactly, and grad_weight as its column sum in order. */
static void part_grad_case(int64_t n1, int64_t n2, int64_t pgs, baton_dtype xdt)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    const baton_dtype wdt = BATON_DTYPE_F32, ivdt = ivdt_of(xdt);
    void *g = random_buf(&rng, wdt, n1 * n2, 1), *x = random_buf(&rng, xdt, n1 * n2, 1);
    void *w = random_buf(&rng, wdt, n2, 1), *iv = random_buf(&rng, ivdt, n1, 0.5);
    for (int64_t r = 0; r < n1; r++) /* any positive invvar will do */
        store_f64(ivdt, iv, r, fabs(load_f64(ivdt, iv, r)) + 0.1);
    void *gi = poisoned(xdt, n1 * n2), *gw = poisoned(wdt, n2), *part = poisoned(ivdt, pgs * n2);
    baton_rms_norm_desc d = {
        .n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = xdt, .w_dtype = wdt, .part_grad_size = pgs};
    char errbuf[256];
    baton_exec_ctx ctx = cpu_ctx(errbuf, sizeof errbuf);
    void *bufs[7] = {g, iv, x, w, gi, gw, part};
    cr_assert_eq(baton__kcpu_rms_norm_bwd(&ctx, bufs, (const char *)&d, sizeof d), 0, "%s", errbuf);
    int64_t block = (n1 + pgs - 1) / pgs;
    for (int64_t p = 0; p < pgs; p++) {
        int64_t r0 = p * block, r1 = r0 + block < n1 ? r0 + block : n1;
        for (int64_t j = 0; j < n2; j++) {
            double s = 0;
            for (int64_t r = r0; r < r1; r++)
                s += load_f64(wdt, g, r * n2 + j) * load_f64(xdt, x, r * n2 + j) *
                     load_f64(ivdt, iv, r);
            double got = load_f64(ivdt, part, p * n2 + j);
            if (r0 >= n1)
                cr_assert_eq(got, 0.0, "empty block %lld must hold zeros", (long long)p);
            else
                cr_assert(fabs(got - s) <= 1e-6 * (fabs(s) + 1e-3),
                          "part_grad[%lld][%lld] = %g, rows %lld..%lld sum to %g (seed %llu)",
                          (long long)p, (long long)j, got, (long long)r0, (long long)r1 - 1, s,
                          (unsigned long long)seed);
        }
    }
    for (int64_t j = 0; j < n2; j++) {
        double s = 0;
        for (int64_t p = 0; p < pgs; p++)
            s += load_f64(ivdt, part, p * n2 + j);
        float want = (float)s;
        cr_assert_eq(memcmp(&want, (float *)gw + j, 4), 0,
                     "grad_weight[%lld] = %.9g is not the in-order column sum of part_grad %.9g",
                     (long long)j, ((float *)gw)[j], want);
    }
    free(g);
    free(x);
    free(w);
    free(iv);
    free(gi);
    free(gw);
    free(part);
}

Test(rms_norm_cpu, part_grad_holds_the_sums_of_contiguous_row_blocks)
{
    part_grad_case(10, 7, 4, BATON_DTYPE_F64);  /* blocks of 3, 3, 3, 1 rows */
    part_grad_case(10, 7, 16, BATON_DTYPE_F32); /* 1-row blocks, 6 empty ones */
    part_grad_case(37, 513, 1, BATON_DTYPE_BF16);
    part_grad_case(64, 9, 16, BATON_DTYPE_F16);
}

Test(rms_norm_cpu, grad_weight_is_bitwise_identical_across_runs)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    const int64_t n1 = 97, n2 = 1031, pgs = 16;
    const baton_dtype xdt = BATON_DTYPE_BF16, wdt = BATON_DTYPE_BF16;
    void *g = random_buf(&rng, wdt, n1 * n2, 1), *x = random_buf(&rng, xdt, n1 * n2, 1);
    void *w = random_buf(&rng, wdt, n2, 1), *iv = random_buf(&rng, BATON_DTYPE_F32, n1, 1);
    void *gi[2], *gw[2], *part[2];
    baton_rms_norm_desc d = {
        .n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = xdt, .w_dtype = wdt, .part_grad_size = pgs};
    for (int k = 0; k < 2; k++) {
        gi[k] = poisoned(xdt, n1 * n2);
        gw[k] = poisoned(wdt, n2);
        part[k] = poisoned(BATON_DTYPE_F32, pgs * n2);
        if (k == 1) /* different garbage the second time: the result must not depend on it */
            memset(gw[k], 0x3c, (size_t)n2 * 2), memset(part[k], 0x11, (size_t)(pgs * n2) * 4);
        void *bufs[7] = {g, iv, x, w, gi[k], gw[k], part[k]};
        cr_assert_eq(baton__kcpu_rms_norm_bwd(NULL, bufs, (const char *)&d, sizeof d), 0);
    }
    cr_assert_eq(memcmp(gw[0], gw[1], (size_t)n2 * 2), 0, "grad_weight differs between runs");
    cr_assert_eq(memcmp(part[0], part[1], (size_t)(pgs * n2) * 4), 0, "part_grad differs");
    cr_assert_eq(memcmp(gi[0], gi[1], (size_t)(n1 * n2) * 2), 0, "grad_input differs");
    free(g), free(x), free(w), free(iv);
    for (int k = 0; k < 2; k++)
        free(gi[k]), free(gw[k]), free(part[k]);
}

/* ---- rms_norm_grad_weight and row shards -------------------------------------------------------
 * The data-parallel plan (scripts/shard.py) relies on two properties, checked bitwise here: the
 * grad_weight kernel gives rms_norm_bwd's grad_weight from its part_grad, and a backward over a
 * shard of n1 / N rows with P / N blocks writes exactly its blocks of the full backward's part_grad
 * (P dividing n1). */

typedef struct bwd_io {
    void *g, *iv, *x, *w; /* inputs */
    void *gi, *gw, *pg;   /* outputs */
} bwd_io;

/* Fresh inputs of n1 x n2 (x and grad_output dtype xdt / wdt) with any positive invvar. */
static void bwd_inputs(test_rng *rng, baton_dtype xdt, baton_dtype wdt, int64_t n1, int64_t n2,
                       bwd_io *b)
{
    const baton_dtype ivdt = ivdt_of(xdt);
    b->g = random_buf(rng, wdt, n1 * n2, 1);
    b->x = random_buf(rng, xdt, n1 * n2, 1);
    b->w = random_buf(rng, wdt, n2, 1);
    b->iv = random_buf(rng, ivdt, n1, 0.5);
    for (int64_t r = 0; r < n1; r++)
        store_f64(ivdt, b->iv, r, fabs(load_f64(ivdt, b->iv, r)) + 0.1);
}

/* rms_norm_bwd on rows r0 .. r0 + n1 - 1 of `in` with P blocks, into fresh poisoned outputs. */
static void bwd_rows(baton_dtype xdt, baton_dtype wdt, const bwd_io *in, int64_t r0, int64_t n1,
                     int64_t n2, int64_t P, bwd_io *out)
{
    const baton_dtype ivdt = ivdt_of(xdt);
    const size_t xs = baton_dtype_size(xdt), ws = baton_dtype_size(wdt);
    out->gi = poisoned(xdt, n1 * n2);
    out->gw = poisoned(wdt, n2);
    out->pg = poisoned(ivdt, P * n2);
    baton_rms_norm_desc d = {
        .n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = xdt, .w_dtype = wdt, .part_grad_size = P};
    void *bufs[7] = {(char *)in->g + (size_t)(r0 * n2) * ws,
                     (char *)in->iv + (size_t)r0 * baton_dtype_size(ivdt),
                     (char *)in->x + (size_t)(r0 * n2) * xs,
                     in->w,
                     out->gi,
                     out->gw,
                     out->pg};
    char errbuf[256];
    baton_exec_ctx ctx = cpu_ctx(errbuf, sizeof errbuf);
    cr_assert_eq(baton__kcpu_rms_norm_bwd(&ctx, bufs, (const char *)&d, sizeof d), 0, "%s", errbuf);
}

/* rms_norm_grad_weight of a part_grad of P rows, into a fresh poisoned buffer. */
static void *grad_weight_of(baton_dtype pgdt, const void *pg, const void *w, baton_dtype wdt,
                            int64_t P, int64_t n2)
{
    void *gw = poisoned(wdt, n2);
    baton_rms_grad_weight_desc d = {
        .part_grad_size = P, .n2 = n2, .pg_dtype = pgdt, .w_dtype = wdt};
    void *bufs[3] = {(void *)pg, (void *)w, gw};
    char errbuf[256];
    baton_exec_ctx ctx = cpu_ctx(errbuf, sizeof errbuf);
    cr_assert_eq(baton__kcpu_rms_norm_grad_weight(&ctx, bufs, (const char *)&d, sizeof d), 0, "%s",
                 errbuf);
    return gw;
}

static void bwd_free(bwd_io *b)
{
    free(b->g), free(b->iv), free(b->x), free(b->w), free(b->gi), free(b->gw), free(b->pg);
    memset(b, 0, sizeof *b);
}

Test(rms_norm_cpu, grad_weight_kernel_gives_the_backwards_bits_from_its_part_grad)
{
    /* P dividing n1, not dividing it, and above it (trailing blocks of zeros). */
    static const int64_t shapes[][3] = {{64, 1031, 1}, {64, 1031, 16}, {37, 513, 3},
                                        {10, 7, 16},   {96, 4096, 32}, {4, 262144, 4}};
    static const baton_dtype pairs[][2] = {{BATON_DTYPE_BF16, BATON_DTYPE_BF16},
                                           {BATON_DTYPE_F32, BATON_DTYPE_F32},
                                           {BATON_DTYPE_BF16, BATON_DTYPE_F32},
                                           {BATON_DTYPE_F64, BATON_DTYPE_F16}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const baton_dtype xdt = pairs[k][0], wdt = pairs[k][1];
            const int64_t n1 = shapes[s][0], n2 = shapes[s][1], P = shapes[s][2];
            uint64_t seed = test_fresh_seed();
            test_rng rng = {seed};
            bwd_io in = {0}, out = {0};
            bwd_inputs(&rng, xdt, wdt, n1, n2, &in);
            bwd_rows(xdt, wdt, &in, 0, n1, n2, P, &out);
            void *gw = grad_weight_of(ivdt_of(xdt), out.pg, in.w, wdt, P, n2);
            cr_assert_eq(memcmp(gw, out.gw, (size_t)n2 * baton_dtype_size(wdt)), 0,
                         "x %s, w %s, %lld x %lld, P %lld: rms_norm_grad_weight(part_grad) is "
                         "not rms_norm_bwd's grad_weight (seed %llu)",
                         baton_dtype_name(xdt), baton_dtype_name(wdt), (long long)n1, (long long)n2,
                         (long long)P, (unsigned long long)seed);
            free(gw);
            bwd_free(&in);
            free(out.gi), free(out.gw), free(out.pg);
        }
}

/* The full backward (P blocks) against N shards of n1 / N rows with P / N blocks each. */
static void shard_case(baton_dtype xdt, baton_dtype wdt, int64_t n1, int64_t n2, int64_t P, int N)
{
    cr_assert(n1 % P == 0 && P % N == 0, "a shard case needs P | n1 and N | P");
    const baton_dtype ivdt = ivdt_of(xdt);
    const size_t as = baton_dtype_size(ivdt), ws = baton_dtype_size(wdt);
    const size_t xs = baton_dtype_size(xdt);
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    char what[200];
    snprintf(what, sizeof what, "x %s, w %s, %lld x %lld, P %lld over %d shards (seed %llu)",
             baton_dtype_name(xdt), baton_dtype_name(wdt), (long long)n1, (long long)n2,
             (long long)P, N, (unsigned long long)seed);
    bwd_io in = {0}, full = {0};
    bwd_inputs(&rng, xdt, wdt, n1, n2, &in);
    bwd_rows(xdt, wdt, &in, 0, n1, n2, P, &full);
    const int64_t rows = n1 / N, Ps = P / N;
    /* all_gather: the shards' part_grads one after another, in device order. */
    char *gathered = poisoned(ivdt, P * n2);
    for (int i = 0; i < N; i++) {
        bwd_io sh = {0};
        bwd_rows(xdt, wdt, &in, i * rows, rows, n2, Ps, &sh);
        memcpy(gathered + (size_t)(i * Ps * n2) * as, sh.pg, (size_t)(Ps * n2) * as);
        cr_assert_eq(
            memcmp(sh.gi, (char *)full.gi + (size_t)(i * rows * n2) * xs, (size_t)(rows * n2) * xs),
            0, "shard %d's grad_input differs from its rows of the full one (%s)", i, what);
        free(sh.gi), free(sh.gw), free(sh.pg);
    }
    for (int64_t p = 0; p < P; p++)
        cr_assert_eq(memcmp(gathered + (size_t)(p * n2) * as,
                            (char *)full.pg + (size_t)(p * n2) * as, (size_t)n2 * as),
                     0, "part_grad block %lld of the shards differs from the full backward's (%s)",
                     (long long)p, what);
    void *gw = grad_weight_of(ivdt, gathered, in.w, wdt, P, n2);
    cr_assert_eq(memcmp(gw, full.gw, (size_t)n2 * ws), 0,
                 "grad_weight of the gathered part_grads differs from the full backward's (%s)",
                 what);
    free(gw);
    free(gathered);
    bwd_free(&in);
    free(full.gi), free(full.gw), free(full.pg);
}

Test(rms_norm_cpu, row_shards_give_the_full_part_grad_and_grad_weight_bitwise)
{
    for (int N = 2; N <= 4; N += 2) {
        shard_case(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 4, 262144, 4, N); /* the tutorial */
        shard_case(BATON_DTYPE_BF16, BATON_DTYPE_BF16, 256, 1031, 16, N);
        shard_case(BATON_DTYPE_F32, BATON_DTYPE_F32, 96, 4096, 32, N);
        shard_case(BATON_DTYPE_F16, BATON_DTYPE_BF16, 64, 513, 64, N); /* one row per block */
        shard_case(BATON_DTYPE_F64, BATON_DTYPE_F32, 40, 77, 8, N);
    }
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

Test(rms_norm_cpu, normalizes_a_262144_element_row_in_a_few_milliseconds)
{
#ifdef UNDER_SANITIZER
    cr_skip("timing is meaningless under AddressSanitizer");
#elif !defined(__OPTIMIZE__)
    cr_skip("timing is meaningless in an unoptimized (-O0) build");
#endif
    const int64_t n1 = 4, n2 = 262144;
    test_rng rng = {test_fresh_seed()};
    void *x = random_buf(&rng, BATON_DTYPE_BF16, n1 * n2, 1),
         *w = random_buf(&rng, BATON_DTYPE_BF16, n2, 1);
    void *y = poisoned(BATON_DTYPE_BF16, n1 * n2), *iv = poisoned(BATON_DTYPE_F32, n1);
    baton_rms_norm_desc d = {
        .n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = BATON_DTYPE_BF16, .w_dtype = BATON_DTYPE_BF16};
    void *bufs[4] = {x, w, y, iv};
    double best = 1e9;
    for (int k = 0; k < 5; k++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cr_assert_eq(baton__kcpu_rms_norm_fwd(NULL, bufs, (const char *)&d, sizeof d), 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        best = ms < best ? ms : best;
    }
    cr_log_info("rms_norm_fwd bf16: %.3f ms per 262144-element row", best / (double)n1);
    /* A generous bound (shared 2-core CI machines, Debug builds): catches a pathological slowdown.
     */
    cr_assert_lt(best / (double)n1, 10.0, "%.3f ms per row", best / (double)n1);
    free(x), free(w), free(y), free(iv);
}

/* ---- elementwise kernels ----------------------------------------------------------------------
 */

static double scalar_for(baton_dtype dt, double v)
{
    return dt == BATON_DTYPE_F64 ? v : (double)(float)v;
}

static const int64_t EW_SIZES[] = {1, 7, 4095, 262147};

static void fill_ints(test_rng *r, baton_dtype dt, void *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t v = test_rng_next(r);
        if (dt == BATON_DTYPE_I32)
            ((int32_t *)p)[i] = (int32_t)(uint32_t)v;
        else
            ((int64_t *)p)[i] = (int64_t)v;
    }
}

static void *ew_input(test_rng *r, baton_dtype dt, int64_t n)
{
    void *p = poisoned(dt, n);
    if (dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64)
        fill_ints(r, dt, p, n);
    else
        test_fill_random(r, dt, p, n, 2.0);
    return p;
}

static int64_t ld_int(baton_dtype dt, const void *p, int64_t i)
{
    return dt == BATON_DTYPE_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* Runs a kernel on a packed descriptor built by the target's own pack(). */
static void run_kernel(const char *name, baton_kernel_fn fn, const baton_sig_args *a, void **bufs)
{
    char op[BATON_OPAQUE_MAX], errbuf[256];
    int len = pack(name, a, op);
    cr_assert_gt(len, 0, "%s pack() failed (%d)", name, len);
    baton_exec_ctx ctx = cpu_ctx(errbuf, sizeof errbuf);
    int rc = fn(&ctx, bufs, op, (size_t)len);
    cr_assert_eq(rc, 0, "%s failed: %s", name, errbuf);
}

Test(elementwise_cpu, softshrink_matches_the_reference_and_zeroes_the_dead_zone)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 4; s++) {
            baton_dtype dt = FLOATS[d];
            int64_t n = EW_SIZES[s];
            double lambda = s == 0 ? 0.0 : 0.25 + test_rng_uniform(&rng);
            baton_tensor_desc in[1] = {DESC(dt, n)};
            baton_attr at[1] = {attr_f("lambda", lambda)};
            baton_sig_args a = sig(1, in, 1, 1, at);
            void *x = ew_input(&rng, dt, n), *y = poisoned(dt, n);
            if (n > 1) /* NaN matches no branch but the last: 0 */
                store_f64(dt, x, n / 2, NAN);
            double *ref = dalloc(n), l = scalar_for(dt, lambda);
            for (int64_t i = 0; i < n; i++) {
                double v = load_f64(dt, x, i);
                ref[i] = v > l ? v - l : v < -l ? v + l : 0.0;
            }
            void *bufs[2] = {x, y};
            run_kernel("softshrink", baton__kcpu_softshrink, &a, bufs);
            double err = test_rel_err(dt, y, ref, n);
            cr_assert_leq(err, test_tolerance(dt), "softshrink %s n=%lld: %g (seed %llu)",
                          baton_dtype_name(dt), (long long)n, err, (unsigned long long)seed);
            for (int64_t i = 0; i < n; i++)
                if (!(fabs(load_f64(dt, x, i)) > l))
                    cr_assert_eq(load_f64(dt, y, i), 0.0, "softshrink(%g) with lambda %g is not 0",
                                 load_f64(dt, x, i), l);
            free(x), free(y), free(ref);
        }
}

static void binary_case(test_rng *rng, uint64_t seed, const char *name, baton_kernel_fn fn,
                        int is_mul, baton_dtype dt, const baton_tensor_desc *ad,
                        const baton_tensor_desc *bd)
{
    baton_tensor_desc in[2] = {*ad, *bd};
    in[0].dtype = in[1].dtype = dt;
    baton_sig_args a = sig(2, in, 1, 0, NULL);
    check_ok(name, &a, NULL);
    int64_t n = baton_tensor_desc_numel(ad), nb = baton_tensor_desc_numel(bd);
    void *x = ew_input(rng, dt, n), *b = ew_input(rng, dt, nb), *y = poisoned(dt, n);
    void *bufs[3] = {x, b, y};
    run_kernel(name, fn, &a, bufs);
    if (dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64) {
        for (int64_t i = 0; i < n; i++) {
            uint64_t u = (uint64_t)ld_int(dt, x, i), v = (uint64_t)ld_int(dt, b, i % nb);
            uint64_t want = is_mul ? u * v : u + v;
            int64_t w = dt == BATON_DTYPE_I32 ? (int64_t)(int32_t)(uint32_t)want : (int64_t)want;
            cr_assert_eq(ld_int(dt, y, i), w, "%s %s [%lld]: %lld, want %lld (wrapping)", name,
                         baton_dtype_name(dt), (long long)i, (long long)ld_int(dt, y, i),
                         (long long)w);
        }
    } else {
        double *ref = dalloc(n);
        for (int64_t i = 0; i < n; i++) {
            double u = load_f64(dt, x, i), v = load_f64(dt, b, i % nb);
            ref[i] = is_mul ? u * v : u + v;
        }
        double err = test_rel_err(dt, y, ref, n);
        cr_assert_leq(err, test_tolerance(dt), "%s %s n=%lld nb=%lld: %g (seed %llu)", name,
                      baton_dtype_name(dt), (long long)n, (long long)nb, err,
                      (unsigned long long)seed);
        free(ref);
    }
    free(x), free(b), free(y);
}

Test(elementwise_cpu, add_and_mul_match_the_reference_with_and_without_repeating_b)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    for (int d = 0; d < 6; d++)
        for (int k = 0; k < 2; k++) {
            const char *name = k ? "mul" : "add";
            baton_kernel_fn fn = k ? baton__kcpu_mul : baton__kcpu_add;
            for (int s = 0; s < 4; s++) {
                baton_tensor_desc ad = DESC(ALL[d], EW_SIZES[s]);
                binary_case(&rng, seed, name, fn, k, ALL[d], &ad, &ad);
            }
            baton_tensor_desc a3 = DESC(ALL[d], 3, 5, 4099), b1 = DESC(ALL[d], 4099),
                              b2 = DESC(ALL[d], 5, 4099), s1 = DESC(ALL[d], 1),
                              a1 = DESC(ALL[d], 1000);
            binary_case(&rng, seed, name, fn, k, ALL[d], &a3, &b1);
            binary_case(&rng, seed, name, fn, k, ALL[d], &a3, &b2);
            binary_case(&rng, seed, name, fn, k, ALL[d], &a1, &s1);
        }
}

Test(elementwise_cpu, add_scalar_and_copy_match_the_reference_for_every_dtype)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    for (int d = 0; d < 6; d++)
        for (int s = 0; s < 4; s++) {
            baton_dtype dt = ALL[d];
            int64_t n = EW_SIZES[s];
            int ints = dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64;
            double value =
                ints ? (double)(int64_t)(test_rng_normal(&rng) * 1e6) : test_rng_normal(&rng) * 3;
            baton_tensor_desc in[1] = {DESC(dt, n)};
            baton_attr at[1] = {attr_f("value", value)};
            baton_sig_args a = sig(1, in, 1, 1, at);
            void *x = ew_input(&rng, dt, n), *y = poisoned(dt, n);
            void *bufs[2] = {x, y};
            run_kernel("add_scalar", baton__kcpu_add_scalar, &a, bufs);
            if (ints) {
                for (int64_t i = 0; i < n; i++) {
                    uint64_t want = (uint64_t)ld_int(dt, x, i) + (uint64_t)(int64_t)value;
                    int64_t w =
                        dt == BATON_DTYPE_I32 ? (int64_t)(int32_t)(uint32_t)want : (int64_t)want;
                    cr_assert_eq(ld_int(dt, y, i), w, "add_scalar %s [%lld]", baton_dtype_name(dt),
                                 (long long)i);
                }
            } else {
                double *ref = dalloc(n), v = scalar_for(dt, value);
                for (int64_t i = 0; i < n; i++)
                    ref[i] = load_f64(dt, x, i) + v;
                double err = test_rel_err(dt, y, ref, n);
                cr_assert_leq(err, test_tolerance(dt), "add_scalar %s n=%lld: %g (seed %llu)",
                              baton_dtype_name(dt), (long long)n, err, (unsigned long long)seed);
                free(ref);
            }
            test_poison(y, (size_t)n * baton_dtype_size(dt));
            a = sig(1, in, 1, 0, NULL);
            run_kernel("copy", baton__kcpu_copy, &a, bufs);
            cr_assert_eq(memcmp(x, y, (size_t)n * baton_dtype_size(dt)), 0, "copy %s n=%lld",
                         baton_dtype_name(dt), (long long)n);
            free(x), free(y);
        }
}

Test(elementwise_cpu, add_scalar_rounds_like_f32_arithmetic_for_16_bit_dtypes)
{
    /* 1 + 2^-8 is a tie in bf16: nearest even keeps 1.0; 1 + 3*2^-8 is a tie that goes up to the
     * even 1 + 2^-6. */
    uint16_t x[2] = {f32_to_bf16(1.0f), f32_to_bf16(1.0f)}, y[2] = {0xffff, 0xffff};
    baton_ew_desc d = {.n = 1, .dtype = BATON_DTYPE_BF16, .value = 0.00390625};
    void *bufs[2] = {x, y};
    cr_assert_eq(baton__kcpu_add_scalar(NULL, bufs, (const char *)&d, sizeof d), 0);
    cr_assert_eq(bf16_to_f32(y[0]), 1.0f, "tie to even");
    d.value = 3 * 0.00390625;
    cr_assert_eq(baton__kcpu_add_scalar(NULL, bufs, (const char *)&d, sizeof d), 0);
    cr_assert_eq(bf16_to_f32(y[0]), 1.015625f, "round to nearest");
    cr_assert_eq(y[1], 0xffff, "n = 1 must write one element");
}

static int64_t ref_argmax(baton_dtype dt, const void *x, int64_t row, int64_t n2)
{
    int64_t best = 0;
    double bv = load_f64(dt, x, row * n2);
    if (isnan(bv))
        return 0;
    for (int64_t j = 1; j < n2; j++) {
        double v = load_f64(dt, x, row * n2 + j);
        if (isnan(v))
            return j;
        if (v > bv)
            bv = v, best = j;
    }
    return best;
}

Test(argmax_cpu, finds_the_first_maximum_of_each_row_with_nan_as_the_maximum)
{
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    static const int64_t n2s[] = {1, 7, 4095, 262147};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 4; s++) {
            baton_dtype dt = FLOATS[d];
            int64_t n2 = n2s[s], n1 = 6;
            baton_tensor_desc in[1] = {DESC(dt, n1, n2)};
            baton_sig_args a = sig(1, in, 1, 0, NULL);
            void *x = ew_input(&rng, dt, n1 * n2);
            int64_t *y = poisoned(BATON_DTYPE_I64, n1);
            /* Row 1: a tie of maxima (the first wins); row 2: a NaN after the max; row 3: all
             * -inf; row 4: two NaNs. Only where the row is long enough. */
            if (n2 >= 3) {
                store_f64(dt, x, 1 * n2 + 1, 100.0);
                store_f64(dt, x, 1 * n2 + n2 - 1, 100.0);
                store_f64(dt, x, 2 * n2 + 0, 100.0);
                store_f64(dt, x, 2 * n2 + n2 - 1, NAN);
                for (int64_t j = 0; j < n2; j++)
                    store_f64(dt, x, 3 * n2 + j, -INFINITY);
                store_f64(dt, x, 4 * n2 + 2, NAN);
                store_f64(dt, x, 4 * n2 + 1, NAN);
            }
            void *bufs[2] = {x, y};
            run_kernel("argmax", baton__kcpu_argmax, &a, bufs);
            for (int64_t r = 0; r < n1; r++)
                cr_assert_eq(y[r], ref_argmax(dt, x, r, n2), "argmax %s n2=%lld row %lld: %lld",
                             baton_dtype_name(dt), (long long)n2, (long long)r, (long long)y[r]);
            if (n2 >= 3) {
                cr_assert_eq(y[1], 1, "first of tied maxima");
                cr_assert_eq(y[2], n2 - 1, "NaN is the maximum");
                cr_assert_eq(y[3], 0, "all -inf: the first");
                cr_assert_eq(y[4], 1, "the first NaN");
            }
            free(x), free(y);
        }
}

/* Integer x, as the CUDA kernel takes it: fresh random rows of a few kinds (test_fill_argmax_ints)
 * against an exact reference where the first maximum wins. tests/test_kernels_cuda.c checks the
 * CUDA kernel against the same rules. */

Test(argmax_cpu, finds_the_first_maximum_of_random_integer_rows_with_ties)
{
    test_rng rng = {test_fresh_seed()};
    static const int64_t n2s[] = {1, 2, 7, 4095, 262147};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof n2s / sizeof n2s[0]; s++) {
            const baton_dtype dt = d ? BATON_DTYPE_I64 : BATON_DTYPE_I32;
            const int64_t n2 = n2s[s], n1 = 10;
            baton_tensor_desc in[1] = {DESC(dt, n1, n2)};
            baton_sig_args a = sig(1, in, 1, 0, NULL);
            void *x = poisoned(dt, n1 * n2);
            int64_t *v = malloc(sizeof(int64_t) * (size_t)(n1 * n2));
            cr_assert(v, "out of memory");
            test_fill_argmax_ints(&rng, dt, n1, n2, v, x);
            int64_t *y = poisoned(BATON_DTYPE_I64, n1);
            void *bufs[2] = {x, y};
            run_kernel("argmax", baton__kcpu_argmax, &a, bufs);
            for (int64_t r = 0; r < n1; r++) {
                const int64_t best = test_argmax_row(v, n2, r);
                cr_assert_eq(y[r], best,
                             "argmax %s n2=%lld row %lld (kind %d): %lld, expected %lld",
                             baton_dtype_name(dt), (long long)n2, (long long)r, (int)(r % 5),
                             (long long)y[r], (long long)best);
            }
            cr_assert_eq(y[4], 0, "a constant row gives its first index");
            free(x), free(y), free(v);
        }
}

/* ---- bad descriptors --------------------------------------------------------------------------
 */

typedef struct kcase {
    const char *name;
    baton_kernel_fn fn;
    int n_buffers;
    size_t len;
} kcase;

static const kcase KERNELS[] = {
    {"rms_norm_fwd", baton__kcpu_rms_norm_fwd, 4, 40},
    {"rms_norm_bwd", baton__kcpu_rms_norm_bwd, 7, 40},
    {"softshrink", baton__kcpu_softshrink, 2, 32},
    {"add", baton__kcpu_add, 3, 32},
    {"mul", baton__kcpu_mul, 3, 32},
    {"add_scalar", baton__kcpu_add_scalar, 2, 32},
    {"copy", baton__kcpu_copy, 2, 32},
    {"argmax", baton__kcpu_argmax, 2, 24},
};
#define N_KERNELS (int)(sizeof KERNELS / sizeof KERNELS[0])

/* A valid descriptor for each kernel: 4 rows of 8 f32, b with 8 elements. */
static void good_desc(const kcase *k, char *out)
{
    memset(out, 0, BATON_OPAQUE_MAX);
    if (k->len == 40) {
        baton_rms_norm_desc d = {.n1 = 4,
                                 .n2 = 8,
                                 .eps = 1e-5,
                                 .x_dtype = BATON_DTYPE_F32,
                                 .w_dtype = BATON_DTYPE_F32,
                                 .part_grad_size = 2};
        memcpy(out, &d, sizeof d);
    } else if (k->len == 32) {
        int bin = k->n_buffers == 3;
        baton_ew_desc d = {.n = 32, .nb = bin ? 8 : 0, .dtype = BATON_DTYPE_F32, .value = 0.5};
        memcpy(out, &d, sizeof d);
    } else {
        baton_argmax_desc d = {.n1 = 4, .n2 = 8, .dtype = BATON_DTYPE_F32};
        memcpy(out, &d, sizeof d);
    }
}

/* Calls the kernel on big enough buffers and returns its code; the reason must name it. */
static int call_bad(const kcase *k, const char *op, size_t len, int with_ctx)
{
    static double mem[7][64];
    void *bufs[7];
    for (int i = 0; i < 7; i++)
        bufs[i] = mem[i];
    char errbuf[512];
    baton_exec_ctx ctx = cpu_ctx(errbuf, sizeof errbuf);
    ctx.errbuf = with_ctx == 2 ? NULL : errbuf;
    int rc = k->fn(with_ctx ? &ctx : NULL, bufs, op, len);
    if (rc != 0 && with_ctx == 1) {
        cr_assert(strstr(errbuf, k->name), "%s's reason does not name it: \"%s\"", k->name, errbuf);
        cr_assert(strlen(errbuf) > strlen(k->name) + 10, "%s gave no reason", k->name);
    }
    return rc;
}

Test(bad_descriptors, a_good_descriptor_is_accepted_so_the_rejections_below_mean_something)
{
    char op[BATON_OPAQUE_MAX];
    for (int i = 0; i < N_KERNELS; i++) {
        good_desc(&KERNELS[i], op);
        cr_assert_eq(call_bad(&KERNELS[i], op, KERNELS[i].len, 1), 0, "%s", KERNELS[i].name);
    }
}

Test(bad_descriptors, a_wrong_length_or_missing_descriptor_is_an_error_not_a_crash)
{
    char op[BATON_OPAQUE_MAX];
    for (int i = 0; i < N_KERNELS; i++) {
        const kcase *k = &KERNELS[i];
        good_desc(k, op);
        const int bwd = !strcmp(k->name, "rms_norm_bwd");
        size_t lens[] = {0, k->len - 1, k->len + 1, k->len + 8, 4};
        for (int l = 0; l < 5; l++)
            for (int c = 0; c < 3; c++) {
                if (bwd && lens[l] == 48) /* the row-shard form: below */
                    continue;
                cr_assert_eq(call_bad(k, op, lens[l], c), BATON_EINVAL, "%s len %zu", k->name,
                             lens[l]);
            }
        if (bwd) {
            /* 48 bytes: unsharded_part_grad_size 0 (none) or >= part_grad_size (2) */
            cr_assert_eq(call_bad(k, op, 48, 1), 0, "rms_norm_bwd, 48 bytes, unsharded 0");
            const int64_t u[] = {4, 1, -1};
            for (int i = 0; i < 3; i++) {
                memcpy(op + 40, &u[i], sizeof u[i]);
                cr_assert_eq(call_bad(k, op, 48, 1), i == 0 ? 0 : BATON_EINVAL,
                             "rms_norm_bwd, unsharded_part_grad_size %lld", (long long)u[i]);
            }
        }
        cr_assert_eq(call_bad(k, NULL, k->len, 1), BATON_EINVAL, "%s NULL opaque", k->name);
    }
}

Test(bad_descriptors, an_unknown_dtype_code_is_an_error_not_a_crash)
{
    char op[BATON_OPAQUE_MAX];
    int32_t codes[] = {0, 7, -1, 99, 0x7fffffff};
    for (int i = 0; i < N_KERNELS; i++) {
        const kcase *k = &KERNELS[i];
        size_t offs[2] = {k->len == 40 ? 24u : 16u, k->len == 40 ? 28u : 16u};
        for (int o = 0; o < 2; o++)
            for (int c = 0; c < 5; c++) {
                good_desc(k, op);
                memcpy(op + offs[o], &codes[c], 4);
                cr_assert_eq(call_bad(k, op, k->len, 1), BATON_EINVAL, "%s dtype %d at %zu",
                             k->name, codes[c], offs[o]);
                cr_assert_eq(call_bad(k, op, k->len, 2), BATON_EINVAL);
            }
        /* Integer codes where only floats are supported. */
        if (k->fn == baton__kcpu_rms_norm_fwd || k->fn == baton__kcpu_rms_norm_bwd ||
            k->fn == baton__kcpu_softshrink) {
            int32_t i32 = BATON_DTYPE_I32;
            good_desc(k, op);
            memcpy(op + offs[0], &i32, 4);
            cr_assert_eq(call_bad(k, op, k->len, 1), BATON_EINVAL, "%s accepted i32", k->name);
        }
    }
}

Test(bad_descriptors, zero_negative_or_inconsistent_sizes_are_errors_not_crashes)
{
    char op[BATON_OPAQUE_MAX];
    int64_t sizes[] = {0, -1, INT64_MIN, INT64_MAX};
    for (int i = 0; i < N_KERNELS; i++) {
        const kcase *k = &KERNELS[i];
        for (int f = 0; f < 2; f++) /* n1/n, then n2/nb */
            for (int s = 0; s < 4; s++) {
                if (k->len == 32 && f == 1 && k->n_buffers == 2 && sizes[s] == 0)
                    continue; /* nb = 0 is right for a unary kernel */
                good_desc(k, op);
                memcpy(op + 8 * f, &sizes[s], 8);
                cr_assert_eq(call_bad(k, op, k->len, 1), BATON_EINVAL, "%s field %d = %lld",
                             k->name, f, (long long)sizes[s]);
            }
    }
    /* b's count must divide a's; a unary kernel has none; the reserved word is 0. */
    baton_ew_desc d = {.n = 32, .nb = 5, .dtype = BATON_DTYPE_F32};
    cr_assert_eq(call_bad(&KERNELS[3], (const char *)&d, sizeof d, 1), BATON_EINVAL);
    d.nb = 64;
    cr_assert_eq(call_bad(&KERNELS[4], (const char *)&d, sizeof d, 1), BATON_EINVAL);
    d.nb = 8;
    cr_assert_eq(call_bad(&KERNELS[6], (const char *)&d, sizeof d, 1), BATON_EINVAL);
    d.nb = 8;
    d.reserved = 1;
    cr_assert_eq(call_bad(&KERNELS[3], (const char *)&d, sizeof d, 1), BATON_EINVAL);
    /* rms_norm: negative or NaN eps, part_grad_size 0 for the backward pass. */
    baton_rms_norm_desc r = {.n1 = 4,
                             .n2 = 8,
                             .eps = -1,
                             .x_dtype = BATON_DTYPE_F32,
                             .w_dtype = BATON_DTYPE_F32,
                             .part_grad_size = 2};
    cr_assert_eq(call_bad(&KERNELS[0], (const char *)&r, sizeof r, 1), BATON_EINVAL);
    r.eps = NAN;
    cr_assert_eq(call_bad(&KERNELS[0], (const char *)&r, sizeof r, 1), BATON_EINVAL);
    r.eps = 1e-5;
    r.part_grad_size = 0;
    cr_assert_eq(call_bad(&KERNELS[1], (const char *)&r, sizeof r, 1), BATON_EINVAL);
    /* softshrink with a negative lambda; add_scalar with a fractional value on integers. */
    baton_ew_desc s = {.n = 32, .dtype = BATON_DTYPE_F32, .value = -0.5};
    cr_assert_eq(call_bad(&KERNELS[2], (const char *)&s, sizeof s, 1), BATON_EINVAL);
    s.dtype = BATON_DTYPE_I32;
    cr_assert_eq(call_bad(&KERNELS[5], (const char *)&s, sizeof s, 1), BATON_EINVAL);
    s.value = INFINITY;
    s.dtype = BATON_DTYPE_F32;
    cr_assert_eq(call_bad(&KERNELS[5], (const char *)&s, sizeof s, 1), BATON_EINVAL);
}

Test(bad_descriptors, a_null_buffer_is_an_error_not_a_crash)
{
    char op[BATON_OPAQUE_MAX], errbuf[256];
    static double mem[7][64];
    for (int i = 0; i < N_KERNELS; i++) {
        const kcase *k = &KERNELS[i];
        good_desc(k, op);
        baton_exec_ctx ctx = cpu_ctx(errbuf, sizeof errbuf);
        cr_assert_eq(k->fn(&ctx, NULL, op, k->len), BATON_EINVAL, "%s NULL buffers", k->name);
        for (int b = 0; b < k->n_buffers; b++) {
            void *bufs[7];
            for (int j = 0; j < 7; j++)
                bufs[j] = mem[j];
            bufs[b] = NULL;
            cr_assert_eq(k->fn(&ctx, bufs, op, k->len), BATON_EINVAL, "%s NULL buffer %d", k->name,
                         b);
            cr_assert(strstr(errbuf, "NULL"), "%s: %s", k->name, errbuf);
        }
    }
}

/* Integers are compared as integers: values above 2^53 that differ by 1 would tie as doubles. */
Test(argmax_cpu, compares_i32_and_i64_exactly)
{
    char eb[256];
    baton_exec_ctx ctx = {.errbuf = eb, .errbuf_len = sizeof eb};
    static int64_t x64[3][4] = {
        {INT64_MAX - 1, INT64_MAX, INT64_MAX - 2, 0},
        {((int64_t)1 << 53) + 1, ((int64_t)1 << 53) + 2, ((int64_t)1 << 53) + 1, 5},
        {7, -3, 7, INT64_MIN}, /* a tie: the first wins */
    };
    int64_t y[3] = {-1, -1, -1};
    baton_argmax_desc d = {3, 4, BATON_DTYPE_I64, 0};
    void *b64[2] = {x64, y};
    cr_assert_eq(baton__kcpu_argmax(&ctx, b64, (const char *)&d, sizeof d), 0, "%s", eb);
    cr_assert(y[0] == 1 && y[1] == 1 && y[2] == 0, "i64: %lld %lld %lld", (long long)y[0],
              (long long)y[1], (long long)y[2]);
    static int32_t x32[2][3] = {{INT32_MIN, -1, INT32_MIN}, {5, 9, 9}};
    d = (baton_argmax_desc){2, 3, BATON_DTYPE_I32, 0};
    void *b32[2] = {x32, y};
    cr_assert_eq(baton__kcpu_argmax(&ctx, b32, (const char *)&d, sizeof d), 0, "%s", eb);
    cr_assert(y[0] == 1 && y[1] == 1, "i32: %lld %lld", (long long)y[0], (long long)y[1]);
    /* and the signature check accepts i64 as it does i32 */
    baton_tensor_desc in[1] = {DESC(BATON_DTYPE_I64, 3, 4)};
    baton_sig_args a = sig(1, in, 1, 0, NULL);
    baton_tensor_desc e[1];
    check_ok("argmax", &a, e);
    baton_tensor_desc want = DESC(BATON_DTYPE_I64, 3);
    ASSERT_DESC(e[0], want);
}

/* ---- the caller's floating-point mode ---------------------------------------------------------
 * XLA:CPU calls custom calls with flush-to-zero and denormals-are-zero set. A row whose RMS is
 * above 8.5e37 has an invvar below FLT_MIN: flushed, it made grad_weight all zeros under JAX
 * (issue 38). The kernels run in IEEE mode whatever the caller's, and give it back. */
#if defined(__x86_64__)
#include <xmmintrin.h>

Test(rms_norm_cpu, gives_the_same_bits_under_flush_to_zero_and_restores_the_mode)
{
    enum { N1 = 3, N2 = 16, P = 2 };
    float x[N1 * N2], w[N2], g[N1 * N2];
    test_rng r = {test_fresh_seed()};
    test_fill_random(&r, BATON_DTYPE_F32, x, N1 * N2, 1.0);
    test_fill_random(&r, BATON_DTYPE_F32, w, N2, 1.0);
    test_fill_random(&r, BATON_DTYPE_F32, g, N1 * N2, 1.0);
    for (int i = 0; i < N2; i++)
        x[i] = x[i] < 0 ? -1.5e38f : 1.5e38f; /* row 0: RMS 1.5e38, invvar 6.7e-39: subnormal */
    const baton_rms_norm_desc fd = {N1, N2, 1e-5, BATON_DTYPE_F32, BATON_DTYPE_F32, 0},
                              bd = {N1, N2, 1e-5, BATON_DTYPE_F32, BATON_DTYPE_F32, P};
    float out[2][N1 * N2 + N1 + N1 * N2 + N2 + P * N2];
    char eb[256];
    baton_exec_ctx c = cpu_ctx(eb, sizeof eb);
    for (int ftz = 0; ftz < 2; ftz++) {
        float *y = out[ftz], *iv = y + N1 * N2, *gx = iv + N1, *gw = gx + N1 * N2, *pg = gw + N2;
        test_poison(out[ftz], sizeof out[ftz]);
        const unsigned int saved = _mm_getcsr();
        if (ftz)
            _mm_setcsr(saved | 0x8040u);
        void *fb[4] = {x, w, y, iv}, *bb[7] = {g, iv, x, w, gx, gw, pg};
        int rf = baton__kcpu_rms_norm_fwd(&c, fb, (const char *)&fd, sizeof fd);
        int rb = baton__kcpu_rms_norm_bwd(&c, bb, (const char *)&bd, sizeof bd);
        const unsigned int after = _mm_getcsr();
        _mm_setcsr(saved);
        cr_assert(rf == 0 && rb == 0, "%s", eb);
        cr_expect_eq(after, ftz ? (saved | 0x8040u) : saved, "the caller's mode is given back");
        cr_expect(iv[0] > 0 && iv[0] < 1.2e-38f, "invvar of row 0 is %g: a subnormal", iv[0]);
    }
    cr_expect(memcmp(out[0], out[1], sizeof out[0]) == 0,
              "flush-to-zero changed the results (grad_weight[0] %g without, %g with)",
              out[0][N1 * N2 + N1 + N1 * N2], out[1][N1 * N2 + N1 + N1 * N2]);
}
#endif

/* The JAX tutorial's 32-byte descriptor gives the kernels what baton's 40 bytes give. */
Test(rms_norm_cpu, takes_the_jax_tutorials_descriptor_as_baton_s_own)
{
    enum { N1 = 5, N2 = 24 };
    float x[N1 * N2], w[N2], y[2][N1 * N2], iv[2][N1];
    test_rng r = {test_fresh_seed()};
    test_fill_random(&r, BATON_DTYPE_F32, x, N1 * N2, 1.0);
    test_fill_random(&r, BATON_DTYPE_F32, w, N2, 1.0);
    baton_rms_norm_tutorial_desc t;
    memset(&t, 0x5A, sizeof t);
    t.n1 = N1;
    t.n2 = N2;
    t.eps = 1e-6;
    t.x_type = 2; /* ElementType F32 */
    t.w_type = 2;
    t.part_grad_size = 16;
    const baton_rms_norm_desc d = {N1, N2, 1e-6, BATON_DTYPE_F32, BATON_DTYPE_F32, 16};
    char eb[256];
    baton_exec_ctx c = cpu_ctx(eb, sizeof eb);
    test_poison(y, sizeof y);
    void *b0[4] = {x, w, y[0], iv[0]}, *b1[4] = {x, w, y[1], iv[1]};
    cr_assert_eq(baton__kcpu_rms_norm_fwd(&c, b0, (const char *)&t, sizeof t), 0, "%s", eb);
    cr_assert_eq(baton__kcpu_rms_norm_fwd(&c, b1, (const char *)&d, sizeof d), 0, "%s", eb);
    cr_expect(memcmp(y[0], y[1], sizeof y[0]) == 0 && memcmp(iv[0], iv[1], sizeof iv[0]) == 0);
    t.x_type = 4;
    cr_expect_neq(baton__kcpu_rms_norm_fwd(&c, b0, (const char *)&t, sizeof t), 0);
    cr_expect(strstr(eb, "rms_norm_fwd: x_type is ElementType 4 in the tutorial's"), "%s", eb);
}
