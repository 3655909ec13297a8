/* gemm.c: the "gemm" and "gemm_add" delegates as targets: their signature check and descriptor
 * (from baton__gemm_resolve, delegates/gemm.c) and its backends, OpenBLAS on the CPU and on CUDA
 * cuBLASLt or, for the few rows of a decode step, baton's own GEMV (kernels/cuda/gemv.cu). The
 * CUDA backend that chooses between them lives here, the one layer that sees both. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "delegates/gemm.h"
#include "targets/builtin.h"
#ifdef BATON_CUDA
#include "delegates/cuda/gemm_cublaslt.h"
#include "kernels/cuda/cuda_gemv.h"
#endif

/* A plan's own descriptor must be the one baton packs: the backends resolve the step from its
 * tensors and attributes, so bytes that say otherwise would be ignored without a word. */
static int gemm_opaque_check(const baton_sig_args *sig, const baton_gemm_desc *want, char *msg,
                             size_t len)
{
    baton_gemm_desc d;
    if (sig->opaque_len != sizeof d)
        return baton__reason_set(msg, len, BATON_EPLAN,
                                 "\"opaque\" is %zu bytes but a gemm descriptor is %zu (m, n, k, "
                                 "dtype, flags, alpha, beta; see docs/targets.md)" BATON_OPAQUE_FIX,
                                 sig->opaque_len, sizeof d);
    memcpy(&d, sig->opaque, sizeof d);
    const struct {
        const char *name;
        int64_t have, want;
    } ints[] = {{"m", d.m, want->m},
                {"n", d.n, want->n},
                {"k", d.k, want->k},
                {"dtype", d.dtype, want->dtype},
                {"flags", d.flags, want->flags}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].have != ints[i].want)
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "\"opaque\" field %s is %lld but the step's tensors and "
                                     "attributes give %lld" BATON_OPAQUE_FIX,
                                     ints[i].name, (long long)ints[i].have,
                                     (long long)ints[i].want);
    const struct {
        const char *name;
        double have, want;
    } nums[] = {{"alpha", d.alpha, want->alpha}, {"beta", d.beta, want->beta}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (!(nums[i].have == nums[i].want))
            return baton__reason_set(msg, len, BATON_EPLAN,
                                     "\"opaque\" field %s is %.17g but the step's tensors and "
                                     "attributes give %.17g" BATON_OPAQUE_FIX,
                                     nums[i].name, nums[i].have, nums[i].want);
    return 0;
}

static int gemm_check(const baton_sig_args *sig, baton_tensor_desc *expected, char *msg, size_t len)
{
    baton_gemm_desc d;
    int rc = baton__gemm_resolve(sig, &d, expected, msg, len);
    return rc == 0 && sig->opaque ? gemm_opaque_check(sig, &d, msg, len) : rc;
}

static int gemm_pack(const baton_sig_args *sig, char *opaque, size_t cap)
{
    baton_gemm_desc d;
    char msg[256];
    int rc = baton__gemm_resolve(sig, &d, NULL, msg, sizeof msg);
    if (rc)
        return rc;
    return baton__put_desc(&d, sizeof d, opaque, cap);
}

#ifdef BATON_CUDA
/* The CUDA backend: cuBLASLt for every M, and baton's GEMV for runs of at most GEMV_ROWS rows
 * (decode) when the policy below picks it. cuBLASLt is prepared either way: a plan with dims may
 * bind more rows on a later run. */
#define GEMV_ROWS 8

typedef struct gemm_cuda {
    void *lt; /* the cuBLASLt backend's state */
    baton_gemm_desc desc;
    int own;     /* runs of at most this many rows take baton's GEMV (0: none) */
    int w_const; /* b is a plan constant: the GEMV may load it before pdl_wait */
} gemm_cuda;

/* Which runs take baton's GEMV: BATON_GEMV=own every run of <= GEMV_ROWS rows it supports,
 * =cublaslt none; unset, the measured rule: one row and W up to 32 MiB. bench_gemv on an H200
 * (cold W, in graphs, no PDL as a delegate launches; us, own / cuBLASLt): K 2048, N 2048 4.55 /
 * 5.78, 2560 5.51 / 6.00, 3072 5.79 / 6.26, 8192 11.29 / 11.40, 16384 19.62 / 19.33, 128256
 * 127.9 / 126.8; N 2048 K 8192 13.04 / 13.41. Returns the most rows a run may have to take it
 * (0: never). */
static int gemv_policy(const baton_gemm_desc *d)
{
    const char *e = getenv("BATON_GEMV");
    if (e && !strcmp(e, "own"))
        return GEMV_ROWS;
    if (e && !strcmp(e, "cublaslt"))
        return 0;
    const double wbytes = (double)d->n * (double)d->k * (double)baton_dtype_size(d->dtype);
    return wbytes <= 32.0 * 1024 * 1024 ? 1 : 0;
}

static void gemm_cuda_destroy(void *p)
{
    gemm_cuda *s = p;
    if (!s)
        return;
    if (s->lt)
        baton__gemm_cublaslt_iface.destroy(s->lt);
    free(s);
}

static int gemm_cuda_init(const baton_delegate_init *info, void **state, baton_error *err)
{
    *state = NULL;
    gemm_cuda *s = calloc(1, sizeof *s);
    if (!s)
        return baton__err_set(err, BATON_ENOMEM, "gemm (CUDA): out of memory");
    int rc = baton__gemm_cublaslt_iface.init(info, &s->lt, err);
    if (rc) {
        free(s);
        return rc;
    }
    char msg[256];
    (void)baton__gemm_resolve(info->sig, &s->desc, NULL, msg, sizeof msg); /* init checked it */
    const baton_gemm_desc *d = &s->desc;
    baton_gemv_args a;
    memset(&a, 0, sizeof a);
    a.m = 1, a.n = d->n, a.k = d->k, a.ldx = d->k, a.dtype = d->dtype;
    /* y = x W^T with W [N, K] as PyTorch stores it: trans_b, not trans_a */
    s->own = (d->flags & (BATON_GEMM_TRANS_A | BATON_GEMM_TRANS_B)) == BATON_GEMM_TRANS_B &&
                     baton__kcuda_gemv_supported(&a, msg, sizeof msg) == 0
                 ? gemv_policy(d)
                 : 0;
    s->w_const = info->input_constant && info->input_constant[1];
    *state = s;
    return 0;
}

static int gemm_cuda_execute(void *state, const baton_exec_ctx *ctx, void **buffers)
{
    gemm_cuda *s = state;
    const int64_t m = s->own ? baton__gemm_run_m(&s->desc, ctx->sig) : 0;
    const int add = s->desc.beta != 0;
    /* the GEMV's W is [N, K] at the prepared K; a run that binds another K goes to cuBLASLt */
    if (m >= 1 && m <= s->own && baton__gemm_run_k(&s->desc, ctx->sig) == s->desc.k &&
        (((uintptr_t)buffers[0] | (uintptr_t)buffers[1] | (uintptr_t)buffers[2] |
          (uintptr_t)buffers[add ? 3 : 2]) &
         15) == 0) {
        baton_gemv_args a;
        memset(&a, 0, sizeof a);
        a.x = buffers[0], a.w = buffers[1], a.c = add ? buffers[2] : NULL;
        a.y = buffers[add ? 3 : 2];
        a.m = m, a.n = s->desc.n, a.k = s->desc.k, a.ldx = s->desc.k;
        a.dtype = s->desc.dtype, a.alpha = (float)s->desc.alpha, a.w_const = s->w_const;
        a.variant = BATON_GEMV_AUTO;
        return baton__kcuda_gemv(ctx, &a);
    }
    return baton__gemm_cublaslt_iface.execute(s->lt, ctx, buffers);
}

/* cuBLASLt's workspace; the GEMV holds nothing of its own. */
static void gemm_cuda_memory(void *state, size_t *private_bytes, const void **shared_key,
                             size_t *shared_bytes)
{
    gemm_cuda *s = state;
    if (s && s->lt && baton__gemm_cublaslt_iface.memory)
        baton__gemm_cublaslt_iface.memory(s->lt, private_bytes, shared_key, shared_bytes);
}

static const baton_delegate_iface gemm_cuda_iface = {
    .struct_size = sizeof(baton_delegate_iface),
    .init = gemm_cuda_init,
    .execute = gemm_cuda_execute,
    .destroy = gemm_cuda_destroy,
    .capturable = 1,
    .memory = gemm_cuda_memory,
};
#endif

/* What gemm and gemm_add share: attributes, signature (gemm_add's c is checked by the same
 * resolve, as its third input) and backends, which both take c when there is one. */
#ifdef BATON_CUDA
#define GEMM_IMPLS                                                                                 \
    .impls = {{.device = BATON_DEVICE_CPU, .delegate = &baton__gemm_openblas_iface},               \
              {.device = BATON_DEVICE_CUDA, .delegate = &gemm_cuda_iface}},                        \
    .n_impls = 2
#else
#define GEMM_IMPLS                                                                                 \
    .impls = {{.device = BATON_DEVICE_CPU, .delegate = &baton__gemm_openblas_iface}}, .n_impls = 1
#endif
#define GEMM_COMMON                                                                                \
    .attrs = {{"trans_a", BATON_ATTR_BOOL, 0, "a is stored [K, M]; default false"},                \
              {"trans_b", BATON_ATTR_BOOL, 0, "b is stored [N, K]; default false"},                \
              {"alpha", BATON_ATTR_FLOAT, 0, "scale of the product; default 1"}},                  \
    .check = gemm_check, .pack = gemm_pack, GEMM_IMPLS

const baton_target baton__target_gemm_add = {
    .struct_size = sizeof(baton_target),
    .name = "gemm_add",
    .kind = BATON_TARGET_DELEGATE,
    .n_inputs = 3,
    .n_outputs = 1,
    .summary = "y = alpha * op(a) * op(b) + c, as gemm with c (the output's dtype and shape) added "
               "in the same call (cuBLASLt's beta = 1; OpenBLAS's beta = 1): a Linear with a "
               "residual, or a bias broadcast by the plan beforehand",
    GEMM_COMMON,
};

const baton_target baton__target_gemm = {
    .struct_size = sizeof(baton_target),
    .name = "gemm",
    .kind = BATON_TARGET_DELEGATE,
    .n_inputs = 2,
    .n_outputs = 1,
    .summary = "out = alpha * op(a) * op(b): a [M,K] (or [K,M] with trans_a; leading dims of a "
               "fold into M), b [K,N] (or [N,K] with trans_b); f32, f64, bf16, f16",
    GEMM_COMMON,
};
