/* scale_plugin.c: a baton plugin, built as its own shared library (libbaton_example_plugin.so),
 * that adds one kernel, "example.scale": y = x * alpha + beta over f32 tensors of any shape,
 * with a CPU implementation here and a CUDA one in scale_cuda.cu (when built with CUDA). It reads
 * its shapes and attributes from the call's context, so it needs no pack(); a plan may give alpha
 * and beta as an 8-byte "opaque" instead, which its check() decodes and checks. It registers
 * through the table baton hands it, so it does not link libbaton. Load it with
 *     baton run --plugin ./libbaton_example_plugin.so examples/plugin/scale_plan.json
 * or baton_registry_load_plugin() (docs/plugins.md). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "baton/baton.h"

/* What the plugin keeps for its calls: given to every call as ctx->user, so no globals. */
typedef struct scale_plugin {
    const baton_plugin_api *api;
} scale_plugin;

static scale_plugin plugin;

/* A plan may give alpha and beta as a descriptor instead of attributes: "opaque" holding
 * {float alpha; float beta;}, 8 bytes. baton hands the bytes to the kernel unread, so check()
 * decodes and checks them at load time (docs/plugins.md): a kernel then trusts them. */
typedef struct scale_desc {
    float alpha, beta;
} scale_desc;

/* Reads alpha and beta (from the descriptor, which check() accepted, or the attributes); 0, or
 * the reason in ctx->errbuf. */
static int scale_args(const baton_exec_ctx *ctx, const char *opaque, size_t len, float *alpha,
                      float *beta, int64_t *n)
{
    const scale_plugin *p = ctx->user;
    const baton_attr *a = p->api->attrs_find(ctx->sig->attrs, ctx->sig->n_attrs, "alpha");
    const baton_attr *b = p->api->attrs_find(ctx->sig->attrs, ctx->sig->n_attrs, "beta");
    *alpha = a ? (float)a->f : 1.0f;
    *beta = b ? (float)b->f : 0.0f;
    if (opaque && len == sizeof(scale_desc)) {
        scale_desc d;
        memcpy(&d, opaque, sizeof d);
        *alpha = d.alpha;
        *beta = d.beta;
    }
    *n = p->api->tensor_desc_numel(&ctx->sig->inputs[0]);
    if (*n < 0) {
        snprintf(ctx->errbuf, ctx->errbuf_len, "example.scale: bad input shape");
        return BATON_EINVAL;
    }
    return 0;
}

static int scale_cpu(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    float alpha, beta;
    int64_t n;
    int rc = scale_args(ctx, opaque, len, &alpha, &beta, &n);
    if (rc)
        return rc;
    const float *x = buffers[0];
    float *y = buffers[1];
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * alpha + beta;
    return 0;
}

#ifdef EXAMPLE_PLUGIN_CUDA
/* scale_cuda.cu */
int example_scale_launch(void *stream, const float *x, float *y, long long n, float alpha,
                         float beta, char *why, size_t why_len);

static int scale_gpu(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    float alpha, beta;
    int64_t n;
    int rc = scale_args(ctx, opaque, len, &alpha, &beta, &n);
    if (rc)
        return rc;
    return example_scale_launch(ctx->stream, buffers[0], buffers[1], (long long)n, alpha, beta,
                                ctx->errbuf, ctx->errbuf_len);
}
#endif

static int scale_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t cap)
{
    if (a->inputs[0].dtype != BATON_DTYPE_F32) {
        snprintf(msg, cap, "example.scale takes an f32 tensor (declare x as f32)");
        return BATON_EPLAN;
    }
    /* The plan's "opaque", if any, is this target's to check: its size, its numbers' ranges,
     * and that it does not contradict the attributes. */
    if (a->opaque) {
        scale_desc d;
        if (a->opaque_len != sizeof d) {
            snprintf(msg, cap,
                     "example.scale's descriptor is 8 bytes ({float alpha; float beta;}), "
                     "\"opaque\" holds %zu",
                     a->opaque_len);
            return BATON_EPLAN;
        }
        memcpy(&d, a->opaque, sizeof d);
        if (!isfinite(d.alpha) || !isfinite(d.beta)) {
            snprintf(msg, cap, "\"opaque\" gives alpha %g and beta %g: both must be finite",
                     (double)d.alpha, (double)d.beta);
            return BATON_EPLAN;
        }
        for (int i = 0; i < a->n_attrs; i++)
            if (strcmp(a->attrs[i].name, "alpha") == 0 || strcmp(a->attrs[i].name, "beta") == 0) {
                snprintf(msg, cap,
                         "\"opaque\" gives alpha %g and beta %g, and attribute %s is given too: "
                         "give them one way",
                         (double)d.alpha, (double)d.beta, a->attrs[i].name);
                return BATON_EPLAN;
            }
    }
    expected[0] = a->inputs[0];
    return 0;
}

/* The plugin API version this file was built against: the loader compares it with its own before
 * it calls anything here. */
BATON_PLUGIN_DECLARE_VERSION();

/* The plugin's entry point, found by name (BATON_PLUGIN_INIT_SYMBOL). */
__attribute__((visibility("default"))) int
baton_plugin_init(baton_registry *reg, const baton_plugin_api *api, baton_error *err)
{
    plugin.api = api;
    baton_target t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.name = "example.scale";
    t.kind = BATON_TARGET_KERNEL;
    t.n_inputs = 1;
    t.n_outputs = 1;
    t.summary = "y = x * alpha + beta (f32), from examples/plugin";
    t.attrs[0] = (baton_attr_spec){"alpha", BATON_ATTR_FLOAT, 0, "factor (default 1)"};
    t.attrs[1] = (baton_attr_spec){"beta", BATON_ATTR_FLOAT, 0, "offset (default 0)"};
    t.check = scale_check;
    t.impls[t.n_impls++] = (baton_target_impl){.device = BATON_DEVICE_CPU, .kernel = scale_cpu};
#ifdef EXAMPLE_PLUGIN_CUDA
    t.impls[t.n_impls++] = (baton_target_impl){.device = BATON_DEVICE_CUDA, .kernel = scale_gpu};
#endif
    t.user = &plugin;
    return api->registry_add(reg, &t, err);
}
