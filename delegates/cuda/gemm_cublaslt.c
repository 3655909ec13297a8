/* gemm_cublaslt.c: the "gemm" delegate on CUDA devices, through cuBLASLt. init() resolves the
 * step's sizes with the same function as the CPU backend, builds the matmul and layout
 * descriptors, asks cuBLASLt's heuristic for an algorithm and allocates its workspace, so that
 * execute() is one capture-safe cublasLtMatmul on the run's stream.
 *
 * A plan with dims binds fewer rows than the max (prefill of 1024 tokens in a 1161-row plan):
 * execute() multiplies the run's M (ctx->sig, rebound by the runtime when the dims change), with
 * layouts and algorithms chosen for that M (and K, where a dim binds it: an exporter's one-hot row
 * selection contracts over the sequence). They live in a small per-(M, K) cache whose layout
 * objects are created at init, so the first run of a new M only sets their sizes and takes an
 * algorithm for the alignment its pointers have (host calls, legal during capture), and a run
 * whose M is the last one's does nothing extra. That algorithm is the heuristic's answer for M
 * and K, kept for the process (cublaslt_algos.h): of a decoder's GEMM steps at a new M, only the
 * first of each shape asks (0.1-0.2 ms an ask on an H200; that step's first launch of an algorithm
 * the process has not run costs about 2 ms more, cuBLASLt's own: decision 0018). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "delegates/cuda/cublaslt_algos.h"
#include "delegates/cuda/cublaslt_api.h"
#include "delegates/cuda/gemm_cublaslt.h"
#include "delegates/gemm.h"
#include "core/core.h"

/* Hopper's recommended cuBLASLt workspace; the heuristic asks for less when it can. */
#define GEMM_MAX_WORKSPACE ((size_t)32 << 20)
/* Algorithms are chosen for three pointer alignments, most demanding first: cudaMalloc'd
 * buffers (256 bytes), arena slots (16), and anything element-aligned. execute() uses the first
 * one the actual pointers satisfy, so a badly aligned tensor is slower, never wrong. */
#define GEMM_TIERS 3
/* Per-M plans kept: as many as the runtime keeps graphs per segment (one per dims binding), so a
 * run switching among the bindings it keeps graphs for never re-plans. */
#define GEMM_PLANS 8
/* Candidates asked of the heuristic: the first that fits is taken */
#define LT_RESULTS 4

/* The layouts and algorithms for one M and K (a plan's dim may bind K too: gemm.h). A plan made at
 * run time takes an algorithm for the alignment tier the run's pointers meet only (tier_fill);
 * another tier when a run needs it. */
typedef struct gemm_plan {
    int64_t m, k;                 /* m 0: not filled */
    uint64_t stamp;               /* when last switched to: the least recent is refilled first */
    cublasLtMatrixLayout_t lay_a; /* cuBLASLt's "B": the stored A */
    cublasLtMatrixLayout_t lay_b; /* cuBLASLt's "A": the stored B (column-major view) */
    cublasLtMatrixLayout_t lay_c;
    signed char have[GEMM_TIERS]; /* 1: algo[t] chosen; -1: none at that alignment; 0: not asked */
    cublasLtMatmulAlgo_t algo[GEMM_TIERS];
} gemm_plan;

typedef struct gemm_state {
    const lt_api *api; /* cuBLASLt, loaded on the first init() (cublaslt_api.h) */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatmulPreference_t pref; /* kept for plans made at run time */
    gemm_plan plan[GEMM_PLANS];
    int cur; /* the plan the last execute() used */
    uint64_t clock;
    void *workspace;
    size_t workspace_bytes; /* allocated; bounds the algorithms of every plan */
    size_t workspace_cap;   /* what the heuristic may ask for: the max at init, then the above */
    float alpha, beta;
    baton_gemm_desc desc;
    int device;
} gemm_state;

static void gemm_destroy(void *p);

/* "gemm on cuda:0 (step 'proj'): ..." */
static int init_fail(baton_error *err, int code, const baton_delegate_init *info, const char *fmt,
                     ...)
{
    /* the reason only: the runtime names the step and its device */
    (void)info;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return baton__err_set(err, code, "cuBLASLt: %s", msg);
}

static int lt_fail(baton_error *err, const baton_delegate_init *info, const gemm_state *s,
                   const char *call, cublasStatus_t st)
{
    return init_fail(err, BATON_ECUDA, info, "%s failed: %s: %s", call,
                     s->api->cublasLtGetStatusName(st), s->api->cublasLtGetStatusString(st));
}

static int cuda_type(baton_dtype dt, cudaDataType_t *out)
{
    switch (dt) {
    case BATON_DTYPE_BF16: *out = CUDA_R_16BF; return 0;
    case BATON_DTYPE_F16: *out = CUDA_R_16F; return 0;
    case BATON_DTYPE_F32: *out = CUDA_R_32F; return 0;
    default: return -1;
    }
}

/* Points plan p's layouts at M rows and K columns: A [M,K] is K x M (ld K), or with trans_a [K,M]
 * is M x K (ld M); B [K,N] is N x K (ld N), or with trans_b [N,K] is K x N (ld K); C [M,N] is
 * N x M (ld N). */
static cublasStatus_t plan_resize(const gemm_state *s, gemm_plan *p, int64_t m, int64_t k)
{
    const int ta = (s->desc.flags & BATON_GEMM_TRANS_A) != 0;
    const int tb = (s->desc.flags & BATON_GEMM_TRANS_B) != 0;
    const uint64_t M = (uint64_t)m, K = (uint64_t)k, N = (uint64_t)s->desc.n;
    const uint64_t a_rows = ta ? M : K, a_cols = ta ? K : M, c_cols = M;
    const uint64_t b_rows = tb ? K : N, b_cols = tb ? N : K;
    const int64_t a_ld = (int64_t)(ta ? M : K), b_ld = (int64_t)(tb ? K : N);
    const struct {
        cublasLtMatrixLayout_t lay;
        cublasLtMatrixLayoutAttribute_t attr;
        const void *v;
        size_t size;
    } set[] = {
        {p->lay_a, CUBLASLT_MATRIX_LAYOUT_ROWS, &a_rows, sizeof a_rows},
        {p->lay_a, CUBLASLT_MATRIX_LAYOUT_COLS, &a_cols, sizeof a_cols},
        {p->lay_a, CUBLASLT_MATRIX_LAYOUT_LD, &a_ld, sizeof a_ld},
        {p->lay_b, CUBLASLT_MATRIX_LAYOUT_ROWS, &b_rows, sizeof b_rows},
        {p->lay_b, CUBLASLT_MATRIX_LAYOUT_COLS, &b_cols, sizeof b_cols},
        {p->lay_b, CUBLASLT_MATRIX_LAYOUT_LD, &b_ld, sizeof b_ld},
        {p->lay_c, CUBLASLT_MATRIX_LAYOUT_COLS, &c_cols, sizeof c_cols},
    };
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++) {
        cublasStatus_t st = s->api->cublasLtMatrixLayoutSetAttribute(set[i].lay, set[i].attr,
                                                                     set[i].v, set[i].size);
        if (st != CUBLAS_STATUS_SUCCESS)
            return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* The pointer alignment of tier t: cudaMalloc'd buffers, arena slots, the element */
static uint32_t tier_align(const gemm_state *s, int t)
{
    return t == 0 ? 256 : t == 1 ? 16 : (uint32_t)baton_dtype_size((baton_dtype)s->desc.dtype);
}

/* The heuristic's answer for plan p's layouts at alignment align within cap bytes of workspace,
 * into *ans (have -1 where it has none). 0, or BATON_ECUDA with the reason in msg. */
static int ask(gemm_state *s, gemm_plan *p, uint32_t align, size_t cap, lt_algo_answer *ans,
               char *msg, size_t msg_len)
{
    const cublasLtMatmulPreferenceAttributes_t al[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    cublasStatus_t st = s->api->cublasLtMatmulPreferenceSetAttribute(
        s->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cap, sizeof cap);
    for (int j = 0; j < 4 && st == CUBLAS_STATUS_SUCCESS; j++)
        st = s->api->cublasLtMatmulPreferenceSetAttribute(s->pref, al[j], &align, sizeof align);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(msg, msg_len, "cublasLtMatmulPreferenceSetAttribute failed: %s",
                 s->api->cublasLtGetStatusName(st));
        return BATON_ECUDA;
    }
    cublasLtMatmulHeuristicResult_t res[LT_RESULTS];
    int n_res = 0;
    memset(res, 0, sizeof res);
    memset(ans, 0, sizeof *ans);
    ans->have = -1;
    st = s->api->cublasLtMatmulAlgoGetHeuristic(s->lt, s->op, p->lay_b, p->lay_a, p->lay_c,
                                                p->lay_c, s->pref, LT_RESULTS, res, &n_res);
    for (int r = 0; st == CUBLAS_STATUS_SUCCESS && r < n_res; r++) {
        if (res[r].state != CUBLAS_STATUS_SUCCESS || res[r].workspaceSize > cap)
            continue;
        ans->have = 1;
        ans->algo = res[r].algo;
        ans->workspace = res[r].workspaceSize;
        break;
    }
    return 0;
}

/* Plan p's algorithm at alignment tier t, within s->workspace_cap (raising s->workspace_bytes at
 * init): the process's kept answer where a step of this shape asked before (cublaslt_algos.h),
 * else the heuristic's, then kept. p->have[t] becomes 1 or -1. Host calls only, no allocation of
 * ours: legal while the stream is being captured. 0, or a code with the reason in msg. */
static int tier_fill(gemm_state *s, gemm_plan *p, int t, char *msg, size_t msg_len)
{
    const lt_algo_key key = {.device = s->device,
                             .dtype = s->desc.dtype,
                             .flags = s->desc.flags & (BATON_GEMM_TRANS_A | BATON_GEMM_TRANS_B),
                             .align = tier_align(s, t),
                             .m = p->m,
                             .n = s->desc.n,
                             .k = p->k,
                             .cap = s->workspace_cap};
    lt_algo_answer ans;
    if (!baton__lt_algo_find(&key, &ans)) {
        int rc = ask(s, p, key.align, key.cap, &ans, msg, msg_len);
        if (rc)
            return rc;
        baton__lt_algo_keep(&key, &ans);
    }
    p->have[t] = (signed char)ans.have;
    if (ans.have == 1) {
        p->algo[t] = ans.algo;
        if (ans.workspace > s->workspace_bytes)
            s->workspace_bytes = ans.workspace;
    }
    return 0; /* no algorithm at this alignment: a less demanding tier may have one */
}

/* Why plan p has no algorithm for pointers from tier t on, into msg: BATON_ENOTSUP */
static int no_algorithm(const gemm_state *s, const gemm_plan *p, char *msg, size_t msg_len)
{
    const int ta = (s->desc.flags & BATON_GEMM_TRANS_A) != 0;
    const int tb = (s->desc.flags & BATON_GEMM_TRANS_B) != 0;
    snprintf(msg, msg_len, "cuBLASLt has no algorithm for %s M=%lld N=%lld K=%lld%s%s",
             baton_dtype_name((baton_dtype)s->desc.dtype), (long long)p->m, (long long)s->desc.n,
             (long long)p->k, ta ? " trans_a" : "", tb ? " trans_b" : "");
    return BATON_ENOTSUP;
}

/* Makes plan p the plan for M = m and K = k: resizes its layouts, and with all_tiers (at init,
 * where the workspace is sized by every tier's algorithm) asks the heuristic for each alignment
 * tier; at run time the tiers are asked as runs need them (plan_algo). 0, or a code with the reason
 * in msg (then p is left unfilled). */
static int plan_fill(gemm_state *s, gemm_plan *p, int64_t m, int64_t k, int all_tiers, char *msg,
                     size_t msg_len)
{
    p->m = 0;
    memset(p->have, 0, sizeof p->have);
    cublasStatus_t st = plan_resize(s, p, m, k);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(msg, msg_len, "cublasLtMatrixLayoutSetAttribute (M=%lld, K=%lld) failed: %s",
                 (long long)m, (long long)k, s->api->cublasLtGetStatusName(st));
        return BATON_ECUDA;
    }
    p->m = m;
    p->k = k;
    int rc = 0, any = 0;
    for (int t = 0; all_tiers && t < GEMM_TIERS && !rc; t++)
        if (!(rc = tier_fill(s, p, t, msg, msg_len)))
            any |= p->have[t] == 1;
    if (!rc && all_tiers && !any)
        rc = no_algorithm(s, p, msg, msg_len);
    if (rc) {
        p->m = 0;
        return rc;
    }
    p->stamp = ++s->clock;
    return 0;
}

/* The algorithm of plan p for pointers of the alignment addr: the most demanding tier they meet
 * whose algorithm the heuristic has (asked now where it was not yet), or NULL with the reason. */
static const cublasLtMatmulAlgo_t *plan_algo(gemm_state *s, gemm_plan *p, uintptr_t addr, int *code,
                                             char *msg, size_t msg_len)
{
    int t = 0;
    while (t < GEMM_TIERS && (addr & (tier_align(s, t) - 1)) != 0)
        t++;
    if (t == GEMM_TIERS) {
        snprintf(msg, msg_len, "the buffers are not aligned to their element size");
        *code = BATON_EINVAL;
        return NULL;
    }
    for (; t < GEMM_TIERS; t++) {
        if (p->have[t] == 0 && (*code = tier_fill(s, p, t, msg, msg_len)) != 0)
            return NULL;
        if (p->have[t] == 1)
            return &p->algo[t];
    }
    *code = no_algorithm(s, p, msg, msg_len);
    return NULL;
}

static int gemm_init(const baton_delegate_init *info, void **state, baton_error *err)
{
    *state = NULL;
    if (!info || !info->sig)
        return baton__err_set(err, BATON_EINVAL, "gemm (cuBLASLt): init() needs the step's sig");
    if (info->device.kind != BATON_DEVICE_CUDA)
        return init_fail(err, BATON_EINVAL, info, "this backend runs on CUDA devices only");

    baton_gemm_desc desc;
    char msg[512] = "";
    int rc = baton__gemm_resolve(info->sig, &desc, NULL, msg, sizeof msg);
    if (rc != 0)
        return init_fail(err, rc, info, "%s", msg[0] ? msg : baton_strerror(rc));
    const baton_sig_args *sig = info->sig;
    for (int i = 0; i < sig->n_inputs; i++)
        if (sig->inputs[i].dtype != (baton_dtype)desc.dtype)
            return init_fail(err, BATON_EPLAN, info,
                             "input %d is %s but the gemm is %s; all "
                             "operands must have one dtype",
                             i, baton_dtype_name(sig->inputs[i].dtype),
                             baton_dtype_name((baton_dtype)desc.dtype));
    if (sig->n_outputs >= 1 && sig->outputs[0].dtype != (baton_dtype)desc.dtype)
        return init_fail(err, BATON_EPLAN, info, "the output is %s but the inputs are %s",
                         baton_dtype_name(sig->outputs[0].dtype),
                         baton_dtype_name((baton_dtype)desc.dtype));
    cudaDataType_t ty;
    if (cuda_type((baton_dtype)desc.dtype, &ty) != 0)
        return init_fail(err, BATON_ENOTSUP, info,
                         "dtype %s is not supported on CUDA; use bf16, f16 or f32, or place the "
                         "step on cpu",
                         baton_dtype_name((baton_dtype)desc.dtype));
    if (desc.m <= 0 || desc.n <= 0 || desc.k <= 0)
        return init_fail(err, BATON_ENOTSUP, info,
                         "empty product (M=%lld, N=%lld, K=%lld) is not supported",
                         (long long)desc.m, (long long)desc.n, (long long)desc.k);

    /* cuBLASLt is loaded here, on the first gemm prepared on a GPU, not when libbaton is: a
     * missing library is this step's error, and programs that never run a GPU gemm never pay
     * for it. */
    char why[768];
    const lt_api *api = baton__lt_api_get(why, sizeof why);
    if (!api)
        return init_fail(err, BATON_ECUDA, info, "%s", why);

    int cur = -1;
    cudaError_t ce = cudaGetDevice(&cur);
    if (ce == cudaSuccess && cur != info->device.index)
        ce = cudaSetDevice(info->device.index);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return init_fail(err, BATON_ECUDA, info, "cudaSetDevice(%d) failed: %s: %s",
                         info->device.index, cudaGetErrorName(ce), cudaGetErrorString(ce));
    }

    gemm_state *s = calloc(1, sizeof *s);
    if (!s)
        return init_fail(err, BATON_ENOMEM, info, "out of memory");
    s->api = api;
    s->desc = desc;
    s->alpha = (float)desc.alpha;
    s->beta = (float)desc.beta;
    s->device = info->device.index;
    const int ta = (desc.flags & BATON_GEMM_TRANS_A) != 0;
    const int tb = (desc.flags & BATON_GEMM_TRANS_B) != 0;
    const uint64_t M = (uint64_t)desc.m, N = (uint64_t)desc.n, K = (uint64_t)desc.k;

    cublasStatus_t st;
    if ((st = s->api->cublasLtCreate(&s->lt)) != CUBLAS_STATUS_SUCCESS) {
        s->lt = NULL;
        rc = lt_fail(err, info, s, "cublasLtCreate", st);
        goto fail;
    }
    /* f32 accumulation and scaling for every dtype; CUBLAS_COMPUTE_32F (not _FAST_TF32) keeps f32
     * products in full f32. */
    if ((st = s->api->cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) !=
        CUBLAS_STATUS_SUCCESS) {
        s->op = NULL;
        rc = lt_fail(err, info, s, "cublasLtMatmulDescCreate", st);
        goto fail;
    }
    /* Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: cuBLASLt's A is
     * the stored B and its B the stored A, each transposed when the step transposes it. */
    cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if ((st = s->api->cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b,
                                                     sizeof op_b)) != CUBLAS_STATUS_SUCCESS ||
        (st = s->api->cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a,
                                                     sizeof op_a)) != CUBLAS_STATUS_SUCCESS) {
        rc = lt_fail(err, info, s, "cublasLtMatmulDescSetAttribute", st);
        goto fail;
    }
    /* Every plan's layouts now, at the max M and K, so that a plan made at run time only resizes
     * them (cublasLtMatrixLayoutSetAttribute allocates nothing). B [K,N] column-major: N x K (ld
     * N), or with trans_b [N,K]: K x N (ld K). */
    for (int p = 0; p < GEMM_PLANS; p++) {
        if ((st = s->api->cublasLtMatrixLayoutCreate(&s->plan[p].lay_b, ty, tb ? K : N, tb ? N : K,
                                                     (int64_t)(tb ? K : N))) !=
            CUBLAS_STATUS_SUCCESS) {
            s->plan[p].lay_b = NULL;
            rc = lt_fail(err, info, s, "cublasLtMatrixLayoutCreate (b)", st);
            goto fail;
        }
        if ((st = s->api->cublasLtMatrixLayoutCreate(&s->plan[p].lay_a, ty, ta ? M : K, ta ? K : M,
                                                     (int64_t)(ta ? M : K))) !=
            CUBLAS_STATUS_SUCCESS) {
            s->plan[p].lay_a = NULL;
            rc = lt_fail(err, info, s, "cublasLtMatrixLayoutCreate (a)", st);
            goto fail;
        }
        if ((st = s->api->cublasLtMatrixLayoutCreate(&s->plan[p].lay_c, ty, N, M, (int64_t)N)) !=
            CUBLAS_STATUS_SUCCESS) {
            s->plan[p].lay_c = NULL;
            rc = lt_fail(err, info, s, "cublasLtMatrixLayoutCreate (c)", st);
            goto fail;
        }
    }

    if ((st = s->api->cublasLtMatmulPreferenceCreate(&s->pref)) != CUBLAS_STATUS_SUCCESS) {
        s->pref = NULL;
        rc = lt_fail(err, info, s, "cublasLtMatmulPreferenceCreate", st);
        goto fail;
    }
    /* The workspace is sized by the plans for the max M and for M = 1 (where cuBLASLt splits K
     * and wants workspace most); plans for other Ms get algorithms that fit in it. */
    s->workspace_cap = GEMM_MAX_WORKSPACE;
    char why2[512];
    if ((rc = plan_fill(s, &s->plan[0], desc.m, desc.k, 1, why2, sizeof why2)) != 0) {
        rc = init_fail(err, rc, info, "%s", why2);
        goto fail;
    }
    /* M = 1 only sizes the workspace: without an algorithm there, the step still runs at max M */
    if (desc.m > 1 && plan_fill(s, &s->plan[1], 1, desc.k, 1, why2, sizeof why2) != 0)
        s->plan[1].stamp = 0;
    s->cur = 0;
    if (s->workspace_bytes > 0) {
        ce = cudaMalloc(&s->workspace, s->workspace_bytes);
        if (ce != cudaSuccess) {
            s->workspace = NULL;
            (void)cudaGetLastError();
            rc = init_fail(err, BATON_ECUDA, info,
                           "cudaMalloc (%zu bytes of workspace) failed: "
                           "%s: %s",
                           s->workspace_bytes, cudaGetErrorName(ce), cudaGetErrorString(ce));
            goto fail;
        }
    }
    s->workspace_cap = s->workspace_bytes;
    *state = s;
    return 0;

fail:
    gemm_destroy(s);
    return rc;
}

static int exec_fail(const baton_exec_ctx *ctx, int code, const char *fmt, ...)
{
    if (ctx->errbuf && ctx->errbuf_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->errbuf, ctx->errbuf_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* The plan for the run's M: the last one used (the common case: nothing to do), another one
 * kept, or the least recently used one refilled for m. NULL with the reason in ctx->errbuf. */
static gemm_plan *plan_for(gemm_state *s, const baton_exec_ctx *ctx, int64_t m, int64_t k)
{
    if (s->plan[s->cur].m == m && s->plan[s->cur].k == k)
        return &s->plan[s->cur];
    int lru = 0;
    for (int p = 0; p < GEMM_PLANS; p++) {
        if (s->plan[p].m == m && s->plan[p].k == k) {
            s->cur = p;
            s->plan[p].stamp = ++s->clock;
            return &s->plan[p];
        }
        if (s->plan[p].stamp < s->plan[lru].stamp)
            lru = p; /* an unfilled plan has stamp 0: it goes first */
    }
    char why[512];
    int rc = plan_fill(s, &s->plan[lru], m, k, 0, why, sizeof why);
    if (rc != 0) {
        s->plan[lru].stamp = 0;
        (void)exec_fail(ctx, rc, "gemm (cuBLASLt): %s", why);
        return NULL;
    }
    s->cur = lru;
    return &s->plan[lru];
}

static int gemm_execute(void *state, const baton_exec_ctx *ctx, void **buffers)
{
    gemm_state *s = state;
    const int64_t m = baton__gemm_run_m(&s->desc, ctx->sig);
    if (m == 0)
        return 0; /* no rows bound: nothing to write */
    if (m < 0 || m > s->desc.m)
        return exec_fail(ctx, BATON_EINVAL,
                         "gemm (cuBLASLt): the run binds M=%lld rows but the step was prepared "
                         "for at most %lld",
                         (long long)m, (long long)s->desc.m);
    const int64_t k = baton__gemm_run_k(&s->desc, ctx->sig);
    if (k < 1 || k > s->desc.k)
        return exec_fail(ctx, BATON_EINVAL,
                         "gemm (cuBLASLt): the run's a gives K=%lld but the step was prepared for "
                         "at most %lld",
                         (long long)k, (long long)s->desc.k);
    char why0[256];
    if (baton__gemm_run_n_ok(&s->desc, ctx->sig, k, why0, sizeof why0))
        return exec_fail(ctx, BATON_EINVAL, "gemm (cuBLASLt): %s", why0);
    gemm_plan *p = plan_for(s, ctx, m, k);
    if (!p)
        return BATON_ENOTSUP;
    const void *a = buffers[0], *b = buffers[1];
    /* gemm_add (beta 1): C is the added input, D the output; gemm: both are the output */
    const int add = s->desc.beta != 0;
    void *c = buffers[2], *dst = buffers[add ? 3 : 2];
    const uintptr_t addr = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)dst;
    char why[512];
    int code = 0;
    const cublasLtMatmulAlgo_t *algo = plan_algo(s, p, addr, &code, why, sizeof why);
    if (!algo)
        return exec_fail(ctx, code, "gemm (cuBLASLt): %s (a=%p b=%p c=%p)", why, a, b, (void *)c);
    cublasStatus_t st = s->api->cublasLtMatmul(
        s->lt, s->op, &s->alpha, b, p->lay_b, a, p->lay_a, &s->beta, c, p->lay_c, dst, p->lay_c,
        algo, s->workspace, s->workspace_bytes, (cudaStream_t)ctx->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return exec_fail(ctx, BATON_ECUDA, "cublasLtMatmul failed: %s: %s",
                         s->api->cublasLtGetStatusName(st), s->api->cublasLtGetStatusString(st));
    return 0;
}

static void gemm_destroy(void *p)
{
    gemm_state *s = p;
    if (!s)
        return;
    if (s->workspace)
        cudaFree(s->workspace); /* waits for work that still uses it */
    if (s->pref)
        s->api->cublasLtMatmulPreferenceDestroy(s->pref);
    for (int i = 0; i < GEMM_PLANS; i++) {
        if (s->plan[i].lay_c)
            s->api->cublasLtMatrixLayoutDestroy(s->plan[i].lay_c);
        if (s->plan[i].lay_a)
            s->api->cublasLtMatrixLayoutDestroy(s->plan[i].lay_a);
        if (s->plan[i].lay_b)
            s->api->cublasLtMatrixLayoutDestroy(s->plan[i].lay_b);
    }
    if (s->op)
        s->api->cublasLtMatmulDescDestroy(s->op);
    if (s->lt)
        s->api->cublasLtDestroy(s->lt);
    free(s);
}

/* The workspace is the step's own device memory; the weights stay the plan's (no copy). */
static void gemm_memory(void *state, size_t *private_bytes, const void **shared_key,
                        size_t *shared_bytes)
{
    const gemm_state *s = state;
    (void)shared_key;
    (void)shared_bytes;
    if (s && s->workspace)
        *private_bytes = s->workspace_bytes;
}

const baton_delegate_iface baton__gemm_cublaslt_iface = {
    .struct_size = sizeof(baton_delegate_iface),
    .init = gemm_init,
    .execute = gemm_execute,
    .destroy = gemm_destroy,
    .capturable = 1,
    .memory = gemm_memory,
};
