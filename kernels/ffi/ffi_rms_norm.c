/* ffi_rms_norm.c: RMSNorm forward and backward as typed XLA FFI handlers (xla/ffi/api/c_api.h),
 * for XLA's CPU platform on the CPU kernels and for CUDA on the CUDA kernels, so that JAX calls
 * the very functions baton schedules. Shapes and dtypes come from the buffers; `eps` is the one
 * attribute. Built into libbaton_jax.so by cmake/ffi.cmake. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "xla/ffi/api/c_api.h"

#include "baton/baton.h"
#include "baton/baton_xla.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/descriptors.h"
#ifdef BATON_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/rms_norm_tune.h"
#endif

#define FFI_MSG_MAX 1024

static XLA_FFI_Error *ffi_error(const XLA_FFI_CallFrame *f, XLA_FFI_Error_Code code,
                                const char *msg)
{
    XLA_FFI_Error_Create_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    a.message = msg;
    a.errc = code;
    return f->api->XLA_FFI_Error_Create(&a);
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static XLA_FFI_Error *
invalid(const XLA_FFI_CallFrame *f, const char *what, const char *fmt, ...)
{
    char reason[FFI_MSG_MAX / 2], msg[FFI_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "baton %s: %s", what, reason);
    return ffi_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
}

/* XLA asks a handler for its metadata by calling it with this extension: answer with the API
 * version of the headers used and the command-buffer-compatible trait (the kernels launch the same
 * work on every call and never synchronise, so XLA may capture them in a CUDA graph). */
static int metadata_query(XLA_FFI_CallFrame *f)
{
    if (!f->extension_start || f->extension_start->type != XLA_FFI_Extension_Metadata)
        return 0;
    XLA_FFI_Metadata_Extension *ext = (XLA_FFI_Metadata_Extension *)f->extension_start;
    XLA_FFI_Metadata *m = ext->metadata;
    m->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
    m->api_version.extension_start = NULL;
    m->api_version.major_version = XLA_FFI_API_MAJOR;
    m->api_version.minor_version = XLA_FFI_API_MINOR;
    m->traits = XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE;
    /* Newer XLA also reads a state type id; older structs end before it. */
    if (m->struct_size >= offsetof(XLA_FFI_Metadata, state_type_id) + sizeof m->state_type_id)
        m->state_type_id.type_id = 0;
    return 1;
}

static baton_dtype from_xla(XLA_FFI_DataType t)
{
    switch (t) {
    case XLA_FFI_DataType_BF16: return BATON_DTYPE_BF16;
    case XLA_FFI_DataType_F16: return BATON_DTYPE_F16;
    case XLA_FFI_DataType_F32: return BATON_DTYPE_F32;
    case XLA_FFI_DataType_F64: return BATON_DTYPE_F64;
    default: return BATON_DTYPE_INVALID;
    }
}

static int64_t numel(const XLA_FFI_Buffer *b)
{
    int64_t n = 1;
    for (int64_t i = 0; i < b->rank; i++)
        n *= b->dims[i];
    return n;
}

/* The buffers of a call, after checking their count and kind. */
static XLA_FFI_Error *buffers_of(const XLA_FFI_CallFrame *f, const char *what, int n_args,
                                 int n_rets, XLA_FFI_Buffer **out)
{
    if (f->args.size != n_args || f->rets.size != n_rets)
        return invalid(f, what, "takes %d operands and %d results, got %lld and %lld", n_args,
                       n_rets, (long long)f->args.size, (long long)f->rets.size);
    for (int i = 0; i < n_args; i++) {
        if (f->args.types[i] != XLA_FFI_ArgType_BUFFER)
            return invalid(f, what, "operand %d is not a buffer", i);
        out[i] = (XLA_FFI_Buffer *)f->args.args[i];
    }
    for (int i = 0; i < n_rets; i++) {
        if (f->rets.types[i] != XLA_FFI_RetType_BUFFER)
            return invalid(f, what, "result %d is not a buffer", i);
        out[n_args + i] = (XLA_FFI_Buffer *)f->rets.rets[i];
    }
    return NULL;
}

static XLA_FFI_Error *eps_of(const XLA_FFI_CallFrame *f, const char *what, double *eps)
{
    for (int64_t i = 0; i < f->attrs.size; i++) {
        const XLA_FFI_ByteSpan *name = f->attrs.names[i];
        if (name->len != 3 || memcmp(name->ptr, "eps", 3) != 0)
            continue;
        if (f->attrs.types[i] != XLA_FFI_AttrType_SCALAR)
            return invalid(f, what, "attribute eps must be a scalar");
        const XLA_FFI_Scalar *s = (const XLA_FFI_Scalar *)f->attrs.attrs[i];
        if (s->dtype == XLA_FFI_DataType_F32)
            *eps = *(const float *)s->value;
        else if (s->dtype == XLA_FFI_DataType_F64)
            *eps = *(const double *)s->value;
        else
            return invalid(f, what, "attribute eps must be an f32 or f64 scalar (np.float32(eps))");
        return NULL;
    }
    return invalid(f, what, "attribute eps is missing (pass eps=np.float32(1e-5))");
}

/* x's trailing dims must be the weight's dims: the normalized dims are all of the weight's. */
static XLA_FFI_Error *rows_of(const XLA_FFI_CallFrame *f, const char *what, const XLA_FFI_Buffer *x,
                              const XLA_FFI_Buffer *w, int64_t *n1, int64_t *n2)
{
    if (w->rank < 1 || x->rank < w->rank)
        return invalid(f, what,
                       "x has rank %lld and the weight rank %lld; x must end with the "
                       "weight's dims",
                       (long long)x->rank, (long long)w->rank);
    for (int64_t i = 0; i < w->rank; i++)
        if (x->dims[x->rank - w->rank + i] != w->dims[i])
            return invalid(f, what,
                           "x's dim %lld is %lld but the weight's dim %lld is %lld; x "
                           "must end with the weight's dims",
                           (long long)(x->rank - w->rank + i),
                           (long long)x->dims[x->rank - w->rank + i], (long long)i,
                           (long long)w->dims[i]);
    *n2 = numel(w);
    *n1 = *n2 > 0 ? numel(x) / *n2 : 0;
    /* n1 = 0 is an empty batch, x of shape (0, n): answered without a kernel (empty_batch). */
    if (*n1 < 0 || *n2 < 1)
        return invalid(f, what,
                       "zero-sized weight (n1 = %lld rows, n2 = %lld columns): the weight needs "
                       "at least one element",
                       (long long)*n1, (long long)*n2);
    return NULL;
}

/* The backward of an empty batch: grad_input is empty, grad_weight and part_grad are zeros (as
 * PyTorch gives); the forward writes nothing. Zero bits are +0 in every float dtype. */
static XLA_FFI_Error *zero_fill(XLA_FFI_CallFrame *f, const char *what, int cuda,
                                const XLA_FFI_Buffer *b)
{
    const size_t bytes = (size_t)numel(b) * baton_dtype_size(from_xla(b->dtype));
    if (!cuda) {
        if (bytes)
            memset(b->data, 0, bytes);
        return NULL;
    }
#ifdef BATON_CUDA
    XLA_FFI_Stream_Get_Args sa;
    memset(&sa, 0, sizeof sa);
    sa.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
    sa.ctx = f->ctx;
    XLA_FFI_Error *e = f->api->XLA_FFI_Stream_Get(&sa);
    if (e)
        return e;
    char err[FFI_MSG_MAX];
    if (baton__kcuda_zero_async(b->data, bytes, sa.stream, err, sizeof err))
        return invalid(f, what, "%s", err);
    return NULL;
#else
    return invalid(f, what, "CUDA is not in this build");
#endif
}

static XLA_FFI_Error *run(XLA_FFI_CallFrame *f, const char *what, baton_kernel_fn fn, int cuda,
                          void **buffers, const baton_rms_norm_desc *d)
{
    char err[FFI_MSG_MAX];
    err[0] = 0;
    baton_exec_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.struct_size = sizeof ctx;
    ctx.device.kind = cuda ? BATON_DEVICE_CUDA : BATON_DEVICE_CPU;
    ctx.device.index = cuda ? -1 : 0; /* -1: the current device */
    ctx.errbuf = err;
    ctx.errbuf_len = sizeof err;
    if (cuda) {
        XLA_FFI_Stream_Get_Args sa;
        memset(&sa, 0, sizeof sa);
        sa.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
        sa.ctx = f->ctx;
        XLA_FFI_Error *e = f->api->XLA_FFI_Stream_Get(&sa);
        if (e)
            return e;
        ctx.stream = sa.stream;
#ifdef BATON_CUDA
        /* No prepare step to time at: the GPU's built-in picks (the same bits as the defaults). */
        ctx.autotune = baton__kcuda_rms_autotune_from_env();
#endif
        const size_t need = offsetof(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get) +
                            sizeof f->api->XLA_FFI_DeviceOrdinal_Get;
        if (f->api->struct_size >= need && f->api->XLA_FFI_DeviceOrdinal_Get) {
            XLA_FFI_DeviceOrdinal_Get_Args da;
            memset(&da, 0, sizeof da);
            da.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE;
            da.ctx = f->ctx;
            XLA_FFI_Error *de = f->api->XLA_FFI_DeviceOrdinal_Get(&da);
            if (de) {
                XLA_FFI_Error_Destroy_Args xa;
                memset(&xa, 0, sizeof xa);
                xa.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
                xa.error = de;
                f->api->XLA_FFI_Error_Destroy(&xa);
            } else {
                ctx.device.index = da.device_ordinal;
            }
        }
    }
    int rc = fn(&ctx, buffers, (const char *)d, sizeof *d);
    if (rc) {
        char msg[FFI_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "baton %s: %s (%s)", what, err[0] ? err : "failed",
                 baton_strerror(rc));
        return ffi_error(f,
                         rc == BATON_EINVAL ? XLA_FFI_Error_Code_INVALID_ARGUMENT
                                            : XLA_FFI_Error_Code_INTERNAL,
                         msg);
    }
    return NULL;
}

/* invvar's dtype: f64 for f64 rows, else f32. */
static baton_dtype invvar_dtype(const baton_rms_norm_desc *d)
{
    return d->x_dtype == (int32_t)BATON_DTYPE_F64 ? BATON_DTYPE_F64 : BATON_DTYPE_F32;
}

/* The descriptor of x's rows over the weight w (eps, n1, n2, the dtypes), and invvar's check:
 * n1 values of invvar_dtype. */
static XLA_FFI_Error *desc_of(XLA_FFI_CallFrame *f, const char *what, const XLA_FFI_Buffer *x,
                              const XLA_FFI_Buffer *w, const XLA_FFI_Buffer *inv,
                              baton_rms_norm_desc *d)
{
    XLA_FFI_Error *e;
    memset(d, 0, sizeof *d);
    if ((e = eps_of(f, what, &d->eps)) || (e = rows_of(f, what, x, w, &d->n1, &d->n2)))
        return e;
    d->x_dtype = from_xla(x->dtype);
    d->w_dtype = from_xla(w->dtype);
    const baton_dtype iv = invvar_dtype(d);
    if (from_xla(inv->dtype) != iv || numel(inv) != d->n1)
        return invalid(f, what, "invvar must hold n1 = %lld elements of %s", (long long)d->n1,
                       baton_dtype_name(iv));
    return NULL;
}

static XLA_FFI_Error *fwd(XLA_FFI_CallFrame *f, baton_kernel_fn fn, int cuda)
{
    const char *what = cuda ? "rms_norm_fwd (cuda)" : "rms_norm_fwd (cpu)";
    if (metadata_query(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE)
        return NULL;
    XLA_FFI_Buffer *b[4];
    XLA_FFI_Error *e = buffers_of(f, what, 2, 2, b);
    if (e)
        return e;
    baton_rms_norm_desc d;
    if ((e = desc_of(f, what, b[0], b[1], b[3], &d)))
        return e;
    if ((int32_t)from_xla(b[2]->dtype) != d.w_dtype || numel(b[2]) != d.n1 * d.n2)
        return invalid(f, what, "y must have x's shape and the weight's dtype");
    if (d.n1 == 0)
        return NULL; /* an empty batch: y and invvar are empty */
    void *buffers[4] = {b[0]->data, b[1]->data, b[2]->data, b[3]->data};
    return run(f, what, fn, cuda, buffers, &d);
}

/* part_grad's shape, as the plan validator takes it (targets/builtin.c): [P] + the weight's
 * shape, or [P, n2] as the JAX tutorial's abstract evaluation declares it; the bytes are the same.
 */
static int part_grad_shape_ok(const XLA_FFI_Buffer *pg, const XLA_FFI_Buffer *w, int64_t n2)
{
    if (pg->rank < 1 || pg->dims[0] < 1)
        return 0;
    if (pg->rank == 2 && pg->dims[1] == n2)
        return 1;
    if (pg->rank != w->rank + 1)
        return 0;
    for (int64_t i = 0; i < w->rank; i++)
        if (pg->dims[i + 1] != w->dims[i])
            return 0;
    return 1;
}

/* "[16, 21]" */
static const char *dims_str(const XLA_FFI_Buffer *b, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int64_t i = 0; i < b->rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, i ? ", %lld" : "%lld", (long long)b->dims[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

static XLA_FFI_Error *bwd(XLA_FFI_CallFrame *f, baton_kernel_fn fn, int cuda)
{
    const char *what = cuda ? "rms_norm_bwd (cuda)" : "rms_norm_bwd (cpu)";
    if (metadata_query(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE)
        return NULL;
    /* grad_output, invvar, x, weight | grad_input, grad_weight, part_grad */
    XLA_FFI_Buffer *b[7];
    XLA_FFI_Error *e = buffers_of(f, what, 4, 3, b);
    if (e)
        return e;
    baton_rms_norm_desc d;
    if ((e = desc_of(f, what, b[2], b[3], b[1], &d)))
        return e;
    const baton_dtype iv = invvar_dtype(&d);
    if ((int32_t)from_xla(b[0]->dtype) != d.w_dtype || numel(b[0]) != d.n1 * d.n2)
        return invalid(f, what, "grad_output must have x's shape and the weight's dtype");
    if ((int32_t)from_xla(b[4]->dtype) != d.x_dtype || numel(b[4]) != d.n1 * d.n2)
        return invalid(f, what, "grad_input must have x's shape and dtype");
    if ((int32_t)from_xla(b[5]->dtype) != d.w_dtype || numel(b[5]) != d.n2)
        return invalid(f, what, "grad_weight must have the weight's shape and dtype");
    if (from_xla(b[6]->dtype) != iv || !part_grad_shape_ok(b[6], b[3], d.n2)) {
        char got[160];
        return invalid(f, what,
                       "part_grad is %s %s but must be %s of shape [P] + the weight's shape or "
                       "[P, %lld] (P >= 1 row blocks, as the JAX tutorial declares it)",
                       baton_dtype_name(from_xla(b[6]->dtype)), dims_str(b[6], got, sizeof got),
                       baton_dtype_name(iv), (long long)d.n2);
    }
    d.part_grad_size = b[6]->dims[0];
    if (d.n1 == 0) { /* an empty batch */
        XLA_FFI_Error *z = zero_fill(f, what, cuda, b[5]);
        return z ? z : zero_fill(f, what, cuda, b[6]);
    }
    void *buffers[7];
    for (int i = 0; i < 7; i++)
        buffers[i] = b[i]->data;
    return run(f, what, fn, cuda, buffers, &d);
}

XLA_FFI_Error *baton_ffi_rms_norm_fwd_cpu(XLA_FFI_CallFrame *f)
{
    return fwd(f, baton__kcpu_rms_norm_fwd, 0);
}

XLA_FFI_Error *baton_ffi_rms_norm_bwd_cpu(XLA_FFI_CallFrame *f)
{
    return bwd(f, baton__kcpu_rms_norm_bwd, 0);
}

#ifdef BATON_CUDA
XLA_FFI_Error *baton_ffi_rms_norm_fwd_cuda(XLA_FFI_CallFrame *f)
{
    return fwd(f, baton__kcuda_rms_norm_fwd, 1);
}

XLA_FFI_Error *baton_ffi_rms_norm_bwd_cuda(XLA_FFI_CallFrame *f)
{
    return bwd(f, baton__kcuda_rms_norm_bwd, 1);
}

int baton_ffi_has_cuda(void)
{
    return 1;
}
#else
int baton_ffi_has_cuda(void)
{
    return 0;
}
#endif
