/* scale_plugin.c: a baton plugin, built as its own shared library (libbaton_example_plugin.so),
 * that adds one kernel, "example.scale": y = x * alpha + beta over f32 tensors of any shape,
 * with a CPU implementation here and a CUDA one in scale_cuda.cu (when built with CUDA). It reads
 * its shapes and attributes from the call's context, so it needs no pack(), and registers
 * through the table baton hands it, so it does not link libbaton. Load it with
 *     baton run --plugin ./libbaton_example_plugin.so examples/plugin/scale_plan.json
 * or baton_registry_load_plugin() (docs/plugins.md). */
#include <stdio.h>
#include <string.h>

#include "baton/baton.h"

/* What the plugin keeps for its calls: given to every call as ctx->user, so no globals. */
typedef struct scale_plugin {
    const baton_plugin_api *api;
} scale_plugin;

static scale_plugin plugin;

/* Reads alpha and beta; 0, or the reason in ctx->errbuf. */
static int scale_args(const baton_exec_ctx *ctx, float *alpha, float *beta, int64_t *n)
{
    const scale_plugin *p = ctx->user;
    const baton_attr *a = p->api->attrs_find(ctx->sig->attrs, ctx->sig->n_attrs, "alpha");
    const baton_attr *b = p->api->attrs_find(ctx->sig->attrs, ctx->sig->n_attrs, "beta");
    *alpha = a ? (float)a->f : 1.0f;
    *beta = b ? (float)b->f : 0.0f;
    *n = p->api->tensor_desc_numel(&ctx->sig->inputs[0]);
    if (*n < 0) {
        snprintf(ctx->errbuf, ctx->errbuf_len, "example.scale: bad input shape");
        return BATON_EINVAL;
    }
    return 0;
}

static int scale_cpu(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    (void)opaque;
    (void)len;
    float alpha, beta;
    int64_t n;
    int rc = scale_args(ctx, &alpha, &beta, &n);
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
    (void)opaque;
    (void)len;
    float alpha, beta;
    int64_t n;
    int rc = scale_args(ctx, &alpha, &beta, &n);
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
