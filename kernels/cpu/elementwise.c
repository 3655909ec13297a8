/* elementwise.c: the CPU elementwise kernels (softshrink, add, mul, add_scalar, copy), argmax and
 * noop. bf16/f16/f32 are computed in f32 vectors (AVX-512 or AVX2, chosen at run time) and rounded
 * once to the dtype; the scalar path computes in double on stack chunks. Both give the same bits:
 * a sum, difference or product of two f32 values rounded from double equals the f32 operation
 * (53 >= 2 * 24 + 2), and bf16/f16 operands make the f32 result exact or far from a tie (scalars
 * are rounded to f32 first, as on the GPU). Large steps are split into tasks on the CPU pool.
 * Integers wrap in two's complement. Nothing is allocated. */
#include <math.h>
#include <string.h>

#include "core/simd.h"
#include "core/threads.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/desc_check.h"
#include "kernels/descriptors.h"

/* Elements per task of a parallel step: below two of these a step stays on its calling thread. */
#define EW_GRAIN     65536
#define EW_MAX_TASKS 256
/* Outputs from this size on are stored around the caches (they would not stay there, and a
 * normal store reads each line first): a third less memory traffic for a unary step. */
#define EW_STREAM_BYTES (8 << 20)
#define ALWAYS_INLINE   inline __attribute__((always_inline))

/* One elementwise float job on bf16/f16/f32 data, computed in f32. */
enum ew_op { EW_ADD, EW_MUL, EW_ADDS, EW_MULS, EW_SHRINK };
typedef struct ew_job {
    enum ew_op op;
    baton_dtype dt;
    const void *a, *b; /* b: NULL for the ops with a scalar */
    void *y;
    int64_t n, nb; /* b repeats every nb elements */
    float s;       /* the scalar (lambda for softshrink) */
    int64_t per_task;
    int stream; /* the output is larger than the caches: store around them */
} ew_job;

static inline float ew_scalar_op(enum ew_op op, float a, float b, float s)
{
    switch (op) {
    case EW_ADD: return a + b;
    case EW_MUL: return a * b;
    case EW_ADDS: return a + s;
    case EW_MULS: return a * s;
    default: return a > s ? a - s : a < -s ? a + s : 0.0f;
    }
}

/* Elements [0, cnt) of the run: a and y at element i, b at element jb. */
static void run_f32_scalar(const ew_job *j, int64_t i, int64_t jb, int64_t cnt, int64_t k)
{
    for (; k < cnt; k++) {
        float a = load_f32(j->dt, j->a, i + k);
        float b = j->b ? load_f32(j->dt, j->b, jb + k) : 0.0f;
        float v = ew_scalar_op(j->op, a, b, j->s);
        switch (j->dt) {
        case BATON_DTYPE_BF16: ((uint16_t *)j->y)[i + k] = f32_to_bf16(v); break;
        case BATON_DTYPE_F16: ((uint16_t *)j->y)[i + k] = f32_to_f16(v); break;
        default: ((float *)j->y)[i + k] = v; break;
        }
    }
}

#ifdef SIMD_X86
static ALWAYS_INLINE SIMD_T512 __m512 op_512(enum ew_op op, __m512 va, __m512 vb, __m512 s,
                                             __m512 ns)
{
    switch (op) {
    case EW_ADD: return _mm512_add_ps(va, vb);
    case EW_MUL: return _mm512_mul_ps(va, vb);
    case EW_ADDS: return _mm512_add_ps(va, s);
    case EW_MULS: return _mm512_mul_ps(va, s);
    default: {
        /* ordered compares: NaN is neither above lambda nor below -lambda, so it gives 0 */
        __mmask16 hi = _mm512_cmp_ps_mask(va, s, _CMP_GT_OQ);
        __mmask16 lo = _mm512_cmp_ps_mask(va, ns, _CMP_LT_OQ);
        __m512 r = _mm512_maskz_sub_ps(hi, va, s);
        return _mm512_mask_add_ps(r, lo, va, s);
    }
    }
}

static ALWAYS_INLINE SIMD_T512 void run_512_op(const enum ew_op op, const ew_job *j, int64_t i,
                                               int64_t jb, int64_t cnt)
{
    const baton_dtype dt = j->dt;
    const size_t es = baton_dtype_size(dt);
    const int binary = op == EW_ADD || op == EW_MUL;
    const char *a = (const char *)j->a + es * (size_t)i;
    const char *b = binary ? (const char *)j->b + es * (size_t)jb : NULL;
    char *y = (char *)j->y + es * (size_t)i;
    const __m512 s = _mm512_set1_ps(j->s), ns = _mm512_set1_ps(-j->s);
    const __m512 z = _mm512_setzero_ps();
    int64_t k = 0;
    if (j->stream) {
        /* up to the output's first vector-aligned element, then stores that bypass the caches */
        const size_t vb = 16 * es;
        int64_t head = (int64_t)(((vb - ((uintptr_t)y & (vb - 1))) & (vb - 1)) / es);
        if (head > cnt)
            head = cnt;
        if (head) {
            __mmask16 m = v16_tail(head);
            v16_store(dt, y, op_512(op, v16_load(dt, a, m), binary ? v16_load(dt, b, m) : z, s, ns),
                      m);
            k = head;
        }
        for (; k + 16 <= cnt; k += 16)
            v16_stream(dt, y + es * k,
                       op_512(op, v16_loadu(dt, a + es * k), binary ? v16_loadu(dt, b + es * k) : z,
                              s, ns));
        _mm_sfence();
    }
    for (; k + 16 <= cnt; k += 16)
        v16_storeu(
            dt, y + es * k,
            op_512(op, v16_loadu(dt, a + es * k), binary ? v16_loadu(dt, b + es * k) : z, s, ns));
    if (k < cnt) {
        __mmask16 m = v16_tail(cnt - k);
        v16_store(dt, y + es * k,
                  op_512(op, v16_load(dt, a + es * k, m), binary ? v16_load(dt, b + es * k, m) : z,
                         s, ns),
                  m);
    }
}

static SIMD_T512 void run_512(const ew_job *j, int64_t i, int64_t jb, int64_t cnt)
{
    switch (j->op) {
    case EW_ADD: run_512_op(EW_ADD, j, i, jb, cnt); break;
    case EW_MUL: run_512_op(EW_MUL, j, i, jb, cnt); break;
    case EW_ADDS: run_512_op(EW_ADDS, j, i, jb, cnt); break;
    case EW_MULS: run_512_op(EW_MULS, j, i, jb, cnt); break;
    default: run_512_op(EW_SHRINK, j, i, jb, cnt); break;
    }
}

static SIMD_T256 void run_256(const ew_job *j, int64_t i, int64_t jb, int64_t cnt)
{
    const baton_dtype dt = j->dt;
    const size_t es = baton_dtype_size(dt);
    const char *a = (const char *)j->a + es * (size_t)i;
    const char *b = j->b ? (const char *)j->b + es * (size_t)jb : NULL;
    char *y = (char *)j->y + es * (size_t)i;
    const __m256 s = _mm256_set1_ps(j->s), ns = _mm256_set1_ps(-j->s);
    int64_t k = 0;
    for (; k + 8 <= cnt; k += 8) {
        __m256 va = v8_load(dt, a + es * k), r;
        switch (j->op) {
        case EW_ADD: r = _mm256_add_ps(va, v8_load(dt, b + es * k)); break;
        case EW_MUL: r = _mm256_mul_ps(va, v8_load(dt, b + es * k)); break;
        case EW_ADDS: r = _mm256_add_ps(va, s); break;
        case EW_MULS: r = _mm256_mul_ps(va, s); break;
        default: {
            __m256 hi = _mm256_cmp_ps(va, s, _CMP_GT_OQ);
            __m256 lo = _mm256_cmp_ps(va, ns, _CMP_LT_OQ);
            r = _mm256_and_ps(hi, _mm256_sub_ps(va, s));
            r = _mm256_blendv_ps(r, _mm256_add_ps(va, s), lo);
            break;
        }
        }
        v8_store(dt, y + es * k, r);
    }
    run_f32_scalar(j, i, jb, cnt, k);
}
#endif

/* Elements [i0, i1) of the job, in runs where b does not wrap. */
static void ew_range(const ew_job *j, int64_t i0, int64_t i1, simd_level l)
{
    for (int64_t i = i0; i < i1;) {
        int64_t jb = j->b && j->nb != j->n ? i % j->nb : i;
        int64_t cnt = i1 - i;
        if (j->b && j->nb != j->n && j->nb - jb < cnt)
            cnt = j->nb - jb;
#ifdef SIMD_X86
        if (l == SIMD_AVX512)
            run_512(j, i, jb, cnt);
        else if (l == SIMD_AVX2)
            run_256(j, i, jb, cnt);
        else
#endif
            run_f32_scalar(j, i, jb, cnt, 0);
        i += cnt;
    }
}

static void ew_task(void *arg, int64_t t)
{
    const ew_job *j = arg;
    int64_t i0 = t * j->per_task, i1 = i0 + j->per_task < j->n ? i0 + j->per_task : j->n;
    ew_range(j, i0, i1, baton__simd_level_get());
}

/* Runs a bf16/f16/f32 job on the vector path; returns 0 when the scalar (double) path must run
 * instead (no vectors on this CPU, or f64). */
static int ew_vector(ew_job *j)
{
    if (baton__simd_level_get() == SIMD_SCALAR || j->dt == BATON_DTYPE_F64)
        return 0;
    /* b of one element is a scalar: one run instead of n runs of one element */
    if (j->b && j->nb == 1) {
        j->s = load_f32(j->dt, j->b, 0);
        j->op = j->op == EW_ADD ? EW_ADDS : EW_MULS;
        j->b = NULL;
    }
    int64_t tasks = par_tasks(j->n, EW_GRAIN, EW_MAX_TASKS);
    j->per_task = (j->n + tasks - 1) / tasks;
    /* not in place: a streamed store would evict the input the next vector reads anyway */
    j->stream =
        (size_t)j->n * baton_dtype_size(j->dt) >= EW_STREAM_BYTES && j->y != j->a && j->y != j->b;
    baton__par_for(tasks, ew_task, j);
    return 1;
}

enum ew_kind { EW_UNARY = 0, EW_BINARY = 1 };

/* Validates an elementwise descriptor (desc_check.h) and its buffers. */
static int read_ew(const baton_exec_ctx *ctx, const char *name, int binary, int ints,
                   void **buffers, const char *opaque, size_t len, baton_ew_desc *d)
{
    int rc = baton__ew_desc_read(ctx, name, opaque, len, binary, ints, d);
    return rc ? rc : check_buffers(ctx, name, buffers, binary ? 3 : 2);
}

/* The scalar as the computation sees it: f32 for bf16/f16/f32 data, as GPU kernels use it. */
static double scalar_for(baton_dtype dt, double v)
{
    return dt == BATON_DTYPE_F64 ? v : (double)(float)v;
}

int baton__kcpu_softshrink(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                           size_t len)
{
    baton_ew_desc d;
    int rc = read_ew(ctx, "softshrink", EW_UNARY, 0, buffers, opaque, len, &d);
    if (rc)
        return rc;
    if (d.value < 0)
        return baton__ctx_fail(ctx, BATON_EINVAL, "softshrink: lambda is %g: it must be >= 0",
                               d.value);
    const baton_dtype dt = (baton_dtype)d.dtype;
    const double l = scalar_for(dt, d.value);
    ew_job job = {
        .op = EW_SHRINK, .dt = dt, .a = buffers[0], .y = buffers[1], .n = d.n, .s = (float)l};
    if (ew_vector(&job))
        return 0;
    double b[CHUNK];
    for (int64_t j = 0; j < d.n; j += CHUNK) {
        int c = d.n - j < CHUNK ? (int)(d.n - j) : CHUNK;
        load_chunk(dt, buffers[0], j, c, b);
        /* NaN falls to the last branch and gives 0, as in the formula and the CUDA kernel. */
        for (int i = 0; i < c; i++) {
            double v = b[i];
            b[i] = v > l ? v - l : v < -l ? v + l : 0.0;
        }
        store_chunk(dt, buffers[1], j, c, b);
    }
    return 0;
}

enum bin_op { OP_ADD, OP_MUL };

static int binary(const baton_exec_ctx *ctx, const char *name, enum bin_op op, void **buffers,
                  const char *opaque, size_t len)
{
    baton_ew_desc d;
    int rc = read_ew(ctx, name, EW_BINARY, 1, buffers, opaque, len, &d);
    if (rc)
        return rc;
    const baton_dtype dt = (baton_dtype)d.dtype;
    const void *a = buffers[0], *b = buffers[1];
    void *y = buffers[2];
    if (dt == BATON_DTYPE_I32) {
        const int32_t *pa = a, *pb = b;
        int32_t *py = y;
        for (int64_t i = 0, j = 0; i < d.n; i++, j = j + 1 == d.nb ? 0 : j + 1) {
            uint32_t u = (uint32_t)pa[i], v = (uint32_t)pb[j];
            py[i] = (int32_t)(op == OP_ADD ? u + v : u * v);
        }
        return 0;
    }
    if (dt == BATON_DTYPE_I64) {
        const int64_t *pa = a, *pb = b;
        int64_t *py = y;
        for (int64_t i = 0, j = 0; i < d.n; i++, j = j + 1 == d.nb ? 0 : j + 1) {
            uint64_t u = (uint64_t)pa[i], v = (uint64_t)pb[j];
            py[i] = (int64_t)(op == OP_ADD ? u + v : u * v);
        }
        return 0;
    }
    ew_job job = {.op = op == OP_ADD ? EW_ADD : EW_MUL,
                  .dt = dt,
                  .a = a,
                  .b = b,
                  .y = y,
                  .n = d.n,
                  .nb = d.nb};
    if (ew_vector(&job))
        return 0;
    double ba[CHUNK], bb[CHUNK];
    for (int64_t i0 = 0; i0 < d.n; i0 += CHUNK) {
        int c = d.n - i0 < CHUNK ? (int)(d.n - i0) : CHUNK;
        load_chunk(dt, a, i0, c, ba);
        if (d.nb == d.n) {
            load_chunk(dt, b, i0, c, bb);
        } else {
            /* b repeats: gather its elements for this chunk, in runs that do not wrap. */
            int64_t jb = i0 % d.nb;
            for (int t = 0; t < c;) {
                int run = d.nb - jb < c - t ? (int)(d.nb - jb) : c - t;
                load_chunk(dt, b, jb, run, bb + t);
                t += run;
                jb = 0;
            }
        }
        if (op == OP_ADD)
            for (int t = 0; t < c; t++)
                ba[t] += bb[t];
        else
            for (int t = 0; t < c; t++)
                ba[t] *= bb[t];
        store_chunk(dt, y, i0, c, ba);
    }
    return 0;
}

int baton__kcpu_add(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return binary(ctx, "add", OP_ADD, buffers, opaque, len);
}

int baton__kcpu_mul(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return binary(ctx, "mul", OP_MUL, buffers, opaque, len);
}

int baton__kcpu_add_scalar(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                           size_t len)
{
    baton_ew_desc d;
    int rc = read_ew(ctx, "add_scalar", EW_UNARY, 1, buffers, opaque, len, &d);
    if (rc)
        return rc;
    const baton_dtype dt = (baton_dtype)d.dtype;
    if (dt == BATON_DTYPE_I32 || dt == BATON_DTYPE_I64) {
        double lim = dt == BATON_DTYPE_I32 ? 2147483648.0 : 9223372036854775808.0;
        if (d.value != floor(d.value) || d.value >= lim || d.value < -lim)
            return baton__ctx_fail(ctx, BATON_EINVAL,
                                   "add_scalar: value %.17g is not an integer in %s's range",
                                   d.value, baton_dtype_name(dt));
        if (dt == BATON_DTYPE_I32) {
            const int32_t *x = buffers[0];
            int32_t *y = buffers[1];
            uint32_t v = (uint32_t)(int32_t)d.value;
            for (int64_t i = 0; i < d.n; i++)
                y[i] = (int32_t)((uint32_t)x[i] + v);
        } else {
            const int64_t *x = buffers[0];
            int64_t *y = buffers[1];
            uint64_t v = (uint64_t)(int64_t)d.value;
            for (int64_t i = 0; i < d.n; i++)
                y[i] = (int64_t)((uint64_t)x[i] + v);
        }
        return 0;
    }
    const double v = scalar_for(dt, d.value);
    ew_job job = {
        .op = EW_ADDS, .dt = dt, .a = buffers[0], .y = buffers[1], .n = d.n, .s = (float)v};
    if (ew_vector(&job))
        return 0;
    double b[CHUNK];
    for (int64_t j = 0; j < d.n; j += CHUNK) {
        int c = d.n - j < CHUNK ? (int)(d.n - j) : CHUNK;
        load_chunk(dt, buffers[0], j, c, b);
        for (int i = 0; i < c; i++)
            b[i] += v;
        store_chunk(dt, buffers[1], j, c, b);
    }
    return 0;
}

int baton__kcpu_copy(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    baton_ew_desc d;
    int rc = read_ew(ctx, "copy", EW_UNARY, 1, buffers, opaque, len, &d);
    if (rc)
        return rc;
    if (buffers[0] != buffers[1])
        memmove(buffers[1], buffers[0], (size_t)d.n * baton_dtype_size((baton_dtype)d.dtype));
    return 0;
}

typedef struct argmax_job {
    baton_dtype dt;
    const void *x;
    int64_t *out;
    int64_t n1, n2, rows_per_task;
} argmax_job;

/* The first maximum of each row, a NaN counting as the maximum (its first one), as torch does.
 * Values compare in f32 (exact for bf16/f16/f32) or in double for f64. */
static void argmax_task(void *arg, int64_t t)
{
    const argmax_job *j = arg;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > j->n1)
        r1 = j->n1;
    for (int64_t r = r0; r < r1; r++) {
        int64_t best = 0;
        if (j->dt == BATON_DTYPE_F64) {
            const double *x = (const double *)j->x + r * j->n2;
            double bv = -INFINITY;
            for (int64_t i = 0; i < j->n2; i++) {
                if (isnan(x[i])) {
                    best = i;
                    break;
                }
                if (x[i] > bv) {
                    bv = x[i];
                    best = i;
                }
            }
        } else {
            float b[CHUNK], bv = -INFINITY;
            int found_nan = 0;
            const size_t es = baton_dtype_size(j->dt);
            for (int64_t c0 = 0; c0 < j->n2 && !found_nan; c0 += CHUNK) {
                int c = j->n2 - c0 < CHUNK ? (int)(j->n2 - c0) : CHUNK;
                baton__cvt_to_f32(j->dt, (const char *)j->x + es * (size_t)(r * j->n2 + c0), b, c);
                for (int i = 0; i < c; i++) {
                    if (isnan(b[i])) {
                        best = c0 + i;
                        found_nan = 1;
                        break;
                    }
                    if (b[i] > bv) {
                        bv = b[i];
                        best = c0 + i;
                    }
                }
            }
        }
        j->out[r] = best;
    }
}

int baton__kcpu_argmax(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    baton_argmax_desc d;
    int rc = baton__argmax_desc_read(ctx, opaque, len, &d);
    if (rc)
        return rc;
    if (!buffers || !buffers[0] || !buffers[1])
        return baton__ctx_fail(ctx, BATON_EINVAL, "argmax: a NULL buffer (x, out expected)");
    const baton_dtype dt = (baton_dtype)d.dtype;
    int64_t *out = buffers[1];
    if (dtype_is_int(dt)) { /* exact: an i64 above 2^53 would round through double */
        for (int64_t r = 0; r < d.n1; r++) {
            int64_t best = 0, bv = INT64_MIN;
            for (int64_t j = 0; j < d.n2; j++) {
                int64_t v = dt == BATON_DTYPE_I32 ? ((const int32_t *)buffers[0])[r * d.n2 + j]
                                                  : ((const int64_t *)buffers[0])[r * d.n2 + j];
                if (j == 0 || v > bv) {
                    bv = v;
                    best = j;
                }
            }
            out[r] = best;
        }
        return 0;
    }
    argmax_job job = {.dt = dt, .x = buffers[0], .out = out, .n1 = d.n1, .n2 = d.n2};
    int64_t tasks = par_tasks(d.n1 * d.n2, EW_GRAIN, EW_MAX_TASKS);
    if (tasks > d.n1)
        tasks = d.n1;
    job.rows_per_task = (d.n1 + tasks - 1) / tasks;
    baton__par_for(tasks, argmax_task, &job);
    return 0;
}

int baton__kcpu_noop(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return 0;
}
