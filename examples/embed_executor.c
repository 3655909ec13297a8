/* embed_executor.c: a small executor runtime that embeds baton, as ExecuTorch or an inference
 * server would. It owns its memory (the arenas baton runs in, and the input and output buffers it
 * binds per request), its CUDA stream and its logger; it registers its own kernel ("exec.gelu",
 * CPU and, when built with CUDA, GPU) and its own CPU delegate ("exec.bias", with state prepared
 * once from a constant); and it runs a plan that mixes them with baton's built-ins in all three
 * sync modes, checking that every mode gives the same bits. docs/embedding.md walks through it.
 *   embed_executor [--gpu=auto|cuda|sim|cpu] [--requests=N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/baton.h"

#ifdef EMBED_CUDA
#include <cuda_runtime_api.h>
/* embed_kernels.cu */
int exec_gelu_cuda(void *stream, const float *x, float *y, long long n);
#endif

/* ---- the executor's own state: one struct, handed to its targets as their user pointer ---- */

typedef struct executor {
    int use_cuda;
    long long gelu_calls, bias_calls;
    int log_lines;
} executor;

static void exec_log(void *user, baton_log_level level, const char *message)
{
    executor *ex = user;
    ex->log_lines++;
    fprintf(stderr, "[executor] baton %s: %s\n", level == BATON_LOG_ERROR ? "error" : "note",
            message);
}

/* ---- a kernel: y = gelu(x), tanh form, f32; shapes from the call's context, no pack() ----- */

static float gelu(float v)
{
    return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}

static int gelu_cpu(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    (void)opaque;
    (void)len;
    executor *ex = ctx->user;
    int64_t n = baton_tensor_desc_numel(&ctx->sig->inputs[0]);
    const float *x = buffers[0];
    float *y = buffers[1];
    for (int64_t i = 0; i < n; i++)
        y[i] = gelu(x[i]);
    ex->gelu_calls++;
    return 0;
}

#ifdef EMBED_CUDA
static int gelu_gpu(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    (void)opaque;
    (void)len;
    executor *ex = ctx->user;
    ex->gelu_calls++; /* launches and captures: on CUDA a graph replays without calling */
    if (exec_gelu_cuda(ctx->stream, buffers[0], buffers[1],
                       (long long)baton_tensor_desc_numel(&ctx->sig->inputs[0]))) {
        snprintf(ctx->errbuf, ctx->errbuf_len, "exec.gelu: the launch failed");
        return BATON_ECUDA;
    }
    return 0;
}
#endif

static int same_as_input(const baton_sig_args *a, baton_tensor_desc *expected, char *msg,
                         size_t cap)
{
    if (a->inputs[0].dtype != BATON_DTYPE_F32) {
        snprintf(msg, cap, "takes f32 tensors");
        return BATON_EPLAN;
    }
    expected[0] = a->inputs[0];
    return 0;
}

/* ---- a delegate: y = x + bias, where bias (a plan constant) is summed once at init --------- */

typedef struct bias_state {
    executor *ex;
    float total; /* prepared once from the constant: what a real delegate would pack */
} bias_state;

static int bias_init(const baton_delegate_init *info, void **state, baton_error *err)
{
    if (!info->input_constant[1]) {
        snprintf(err->message, sizeof err->message, "exec.bias wants its bias as a constant");
        return err->code = BATON_EPLAN;
    }
    bias_state *st = calloc(1, sizeof *st);
    if (!st)
        return BATON_ENOMEM;
    st->ex = info->user;
    const float *b = info->input_data[1];
    int64_t n = baton_tensor_desc_numel(&info->sig->inputs[1]);
    for (int64_t i = 0; i < n; i++)
        st->total += b[i];
    *state = st;
    return 0;
}

static int bias_execute(void *state, const baton_exec_ctx *ctx, void **buffers)
{
    bias_state *st = state;
    int64_t n = baton_tensor_desc_numel(&ctx->sig->inputs[0]);
    const float *x = buffers[0];
    float *y = buffers[2];
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] + st->total;
    st->ex->bias_calls++;
    return 0;
}

static void bias_destroy(void *state)
{
    free(state);
}

static int bias_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t cap)
{
    if (a->inputs[0].dtype != BATON_DTYPE_F32 || a->inputs[1].dtype != BATON_DTYPE_F32) {
        snprintf(msg, cap, "takes f32 tensors");
        return BATON_EPLAN;
    }
    expected[0] = a->inputs[0];
    return 0;
}

static const baton_delegate_iface bias_iface = {
    .struct_size = sizeof(baton_delegate_iface),
    .init = bias_init,
    .execute = bias_execute,
    .destroy = bias_destroy,
};

static int register_targets(baton_registry *reg, executor *ex, baton_error *err)
{
    baton_target t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.name = "exec.gelu";
    t.kind = BATON_TARGET_KERNEL;
    t.n_inputs = t.n_outputs = 1;
    t.summary = "the executor's GELU";
    t.check = same_as_input;
    t.impls[t.n_impls++] = (baton_target_impl){.device = BATON_DEVICE_CPU, .kernel = gelu_cpu};
#ifdef EMBED_CUDA
    t.impls[t.n_impls++] = (baton_target_impl){.device = BATON_DEVICE_CUDA, .kernel = gelu_gpu};
#endif
    t.user = ex;
    int rc = baton_registry_add(reg, &t, err);
    if (rc)
        return rc;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.name = "exec.bias";
    t.kind = BATON_TARGET_DELEGATE;
    t.n_inputs = 2;
    t.n_outputs = 1;
    t.summary = "the executor's bias delegate";
    t.check = bias_check;
    t.impls[t.n_impls++] = (baton_target_impl){.device = BATON_DEVICE_CPU, .delegate = &bias_iface};
    t.user = ex;
    return baton_registry_add(reg, &t, err);
}

/* x -> rms_norm (cuda:0) -> exec.gelu (cuda:0) -> exec.bias (cpu) -> softshrink (cuda:0) -> y */
static const char plan_json[] =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"embedded\", \"tensors\": ["
    "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [8, 512], \"role\": \"input\"},"
    "{\"name\": \"w\", \"dtype\": \"f32\", \"shape\": [512], \"role\": \"constant\","
    " \"init\": {\"kind\": \"normal\", \"seed\": 1, \"mean\": 1.0, \"std\": 0.1}},"
    "{\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"constant\","
    " \"init\": {\"kind\": \"values\", \"values\": [0.25, -0.5, 0.125, 0.0625]}},"
    "{\"name\": \"n\", \"dtype\": \"f32\", \"shape\": [8, 512]},"
    "{\"name\": \"inv\", \"dtype\": \"f32\", \"shape\": [8]},"
    "{\"name\": \"g\", \"dtype\": \"f32\", \"shape\": [8, 512]},"
    "{\"name\": \"h\", \"dtype\": \"f32\", \"shape\": [8, 512]},"
    "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [8, 512], \"role\": \"output\"}],"
    "\"steps\": ["
    "{\"name\": \"norm\", \"kernel\": \"rms_norm_fwd\", \"device\": \"cuda:0\","
    " \"inputs\": [\"x\", \"w\"], \"outputs\": [\"n\", \"inv\"]},"
    "{\"name\": \"act\", \"kernel\": \"exec.gelu\", \"device\": \"cuda:0\","
    " \"inputs\": [\"n\"], \"outputs\": [\"g\"]},"
    "{\"name\": \"bias\", \"delegate\": \"exec.bias\", \"device\": \"cpu\","
    " \"inputs\": [\"g\", \"b\"], \"outputs\": [\"h\"]},"
    "{\"name\": \"shrink\", \"kernel\": \"softshrink\", \"device\": \"cuda:0\","
    " \"inputs\": [\"h\"], \"outputs\": [\"y\"], \"attrs\": {\"lambda\": 0.1}}]}";

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "embed_executor: " __VA_ARGS__);                                           \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

/* Memory the executor owns: device memory on the GPU, pinned host memory otherwise when CUDA
 * runs, plain aligned memory without it. */
static void *own_alloc(const executor *ex, baton_device where, size_t n)
{
    void *p = NULL;
    n = (n + BATON_ARENA_ALIGN - 1) / BATON_ARENA_ALIGN * BATON_ARENA_ALIGN;
#ifdef EMBED_CUDA
    if (ex->use_cuda) {
        cudaError_t e = where.kind == BATON_DEVICE_CUDA ? cudaMalloc(&p, n) : cudaMallocHost(&p, n);
        return e == cudaSuccess ? p : NULL;
    }
#endif
    (void)ex;
    (void)where;
    p = aligned_alloc(BATON_ARENA_ALIGN, n ? n : BATON_ARENA_ALIGN);
    return p;
}

static void own_free(const executor *ex, baton_device where, void *p)
{
#ifdef EMBED_CUDA
    if (ex->use_cuda) {
        if (where.kind == BATON_DEVICE_CUDA)
            cudaFree(p);
        else
            cudaFreeHost(p);
        return;
    }
#endif
    (void)ex;
    (void)where;
    free(p);
}

static void own_copy(const executor *ex, void *dst, const void *src, size_t n, int dst_device,
                     int src_device)
{
#ifdef EMBED_CUDA
    if (ex->use_cuda && (dst_device || src_device)) {
        if (cudaMemcpy(dst, src, n, cudaMemcpyDefault) != cudaSuccess)
            FAIL("cudaMemcpy failed");
        return;
    }
#endif
    (void)ex, (void)dst_device, (void)src_device;
    memcpy(dst, src, n);
}

int main(int argc, char **argv)
{
    baton_gpu_backend gpu = BATON_GPU_AUTO;
    int requests = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gpu=cuda"))
            gpu = BATON_GPU_CUDA;
        else if (!strcmp(argv[i], "--gpu=sim"))
            gpu = BATON_GPU_SIM;
        else if (!strcmp(argv[i], "--gpu=cpu"))
            gpu = BATON_GPU_CPU;
        else if (!strncmp(argv[i], "--requests=", 11))
            requests = atoi(argv[i] + 11);
        else if (strcmp(argv[i], "--gpu=auto"))
            FAIL("usage: embed_executor [--gpu=auto|cuda|sim|cpu] [--requests=N]");
    }
    executor ex = {0};
    ex.use_cuda = baton_cuda_built() && baton_cuda_device_count() > 0 &&
                  (gpu == BATON_GPU_AUTO || gpu == BATON_GPU_CUDA);
#ifndef EMBED_CUDA
    ex.use_cuda = 0;
#endif
    if (gpu == BATON_GPU_AUTO)
        gpu = ex.use_cuda ? BATON_GPU_CUDA : BATON_GPU_CPU;
    baton_log_set(exec_log, &ex); /* baton's warnings and notes go to the executor's logger */

    baton_error err;
    baton_registry *reg;
    baton_plan *plan;
    if (baton_registry_create(&reg) || register_targets(reg, &ex, &err))
        FAIL("registering the executor's targets: %s", err.message);
    if (baton_plan_load_string(reg, plan_json, sizeof plan_json - 1, "embedded", NULL, &plan, &err))
        FAIL("%s", err.message);

    /* The arenas: sizes from the plan, memory from the executor. */
    int n_arenas = baton_plan_arena_count(plan);
    baton_arena arenas[8];
    for (int i = 0; i < n_arenas && i < 8; i++) {
        baton_plan_arena_info(plan, i, &arenas[i]);
        arenas[i].data = own_alloc(&ex, arenas[i].device, arenas[i].nbytes);
        if (!arenas[i].data)
            FAIL("cannot allocate the %zu-byte arena", arenas[i].nbytes);
    }
    /* The stream: the executor's own, on which baton issues every GPU step. */
    baton_stream stream = {{BATON_DEVICE_CUDA, 0}, NULL};
#ifdef EMBED_CUDA
    if (ex.use_cuda && cudaStreamCreateWithFlags((cudaStream_t *)&stream.stream,
                                                 cudaStreamNonBlocking) != cudaSuccess)
        FAIL("cudaStreamCreateWithFlags failed");
#endif
    /* The request buffers: inputs on the GPU when there is one (no copy in), outputs on the
     * host (the CPU reads them), two of each so that addresses change between requests. */
    int xi = baton_plan_tensor_index(plan, "x"), yi = baton_plan_tensor_index(plan, "y");
    baton_tensor_info xt, yt;
    baton_plan_tensor_info(plan, xi, &xt);
    baton_plan_tensor_info(plan, yi, &yt);
    baton_device x_dev = {
        ex.use_cuda || gpu == BATON_GPU_SIM ? BATON_DEVICE_CUDA : BATON_DEVICE_CPU, 0};
    baton_device y_dev = {BATON_DEVICE_CPU, 0};
    void *xb[2], *yb[2];
    for (int k = 0; k < 2; k++) {
        xb[k] = own_alloc(&ex, x_dev, xt.nbytes);
        yb[k] = own_alloc(&ex, y_dev, yt.nbytes);
        if (!xb[k] || !yb[k])
            FAIL("cannot allocate request buffers");
    }
    float *x = malloc(xt.nbytes), *first = malloc(yt.nbytes);

    static const baton_sync_mode modes[] = {BATON_SYNC_STRICT, BATON_SYNC_BOUNDARY,
                                            BATON_SYNC_GRAPH};
    int mismatches = 0;
    for (int m = 0; m < 3; m++) {
        baton_options o;
        baton_options_init(&o);
        o.mode = modes[m];
        o.gpu = gpu;
        o.arenas = arenas;
        o.n_arenas = n_arenas;
        if (stream.stream) {
            o.streams = &stream;
            o.n_streams = 1;
        }
        baton_runtime *rt;
        if (baton_runtime_create(plan, &o, &rt, &err))
            FAIL("%s", err.message);
        for (int r = 0; r < requests; r++) {
            int k = r % 2;
            baton_fill_normal(x, BATON_DTYPE_F32, baton_tensor_desc_numel(&xt.desc), 100 + r, 0, 1);
            own_copy(&ex, xb[k], x, xt.nbytes, x_dev.kind == BATON_DEVICE_CUDA && ex.use_cuda, 0);
            baton_buffer bx = {x_dev, xb[k], xt.nbytes, xt.desc.dtype};
            baton_buffer by = {y_dev, yb[k], yt.nbytes, yt.desc.dtype};
            if (baton_runtime_bind(rt, xi, &bx, &err) || baton_runtime_bind(rt, yi, &by, &err) ||
                baton_runtime_run(rt, &err))
                FAIL("%s mode, request %d: %s", baton_sync_mode_name(modes[m]), r, err.message);
            /* the output is in the executor's buffer: no copy out */
            if (m == 0 && r == requests - 1)
                memcpy(first, yb[k], yt.nbytes);
            else if (r == requests - 1 && memcmp(first, yb[k], yt.nbytes) != 0)
                mismatches++;
        }
        baton_run_stats st;
        baton_runtime_stats(rt, &st);
        char dev[32];
        printf("%-8s on %-4s: %lld requests, %lld host waits, %lld launches, %lld graph launches, "
               "%lld B in, %lld B out\n",
               baton_sync_mode_name(modes[m]),
               baton_runtime_gpu_backend(rt) == BATON_GPU_CUDA  ? "cuda"
               : baton_runtime_gpu_backend(rt) == BATON_GPU_SIM ? "sim"
                                                                : "cpu",
               (long long)st.runs, (long long)st.host_waits, (long long)st.kernel_launches,
               (long long)st.graph_launches, (long long)st.bytes_h2d, (long long)st.bytes_d2h);
        (void)dev;
        baton_runtime_destroy(rt);
    }
    printf("y[0..3] = %.6f %.6f %.6f %.6f; exec.gelu called %lld times, exec.bias %lld times; "
           "%d log lines\n",
           first[0], first[1], first[2], first[3], ex.gelu_calls, ex.bias_calls, ex.log_lines);
    printf("%s\n", mismatches ? "MODES DIFFER" : "every mode gave the same bits");
    for (int k = 0; k < 2; k++) {
        own_free(&ex, x_dev, xb[k]);
        own_free(&ex, y_dev, yb[k]);
    }
    for (int i = 0; i < n_arenas; i++)
        own_free(&ex, arenas[i].device, arenas[i].data);
#ifdef EMBED_CUDA
    if (stream.stream)
        cudaStreamDestroy((cudaStream_t)stream.stream);
#endif
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    baton_log_set(NULL, NULL);
    free(x);
    free(first);
    return mismatches ? 1 : 0;
}
