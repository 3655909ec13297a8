/* test_device_cuda.c: the scheduler's CUDA device through its dev_ops table: stream order up to
 * an event wait, counters, graph capture, replay and in-place update, illegal calls during
 * capture, cross-context waits, every injected fault, each followed by a working call, and
 * programmatic dependent launch inside captured graphs (programmatic edges, the same bits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/descriptors.h"
#include "scheduler/cuda/device_cuda.h"
#include "scheduler/device.h"
#include "scheduler/testing.h"
#include "tests/support.h"

#define SKIP_WITHOUT_GPU()                                                                         \
    do {                                                                                           \
        if (test_cuda_devices() == 0)                                                              \
            cr_skip("no CUDA device on this machine: the CUDA device needs one");                  \
    } while (0)

static const dev_ops *ops = &baton__dev_cuda_ops;
static const baton_device cuda0 = {BATON_DEVICE_CUDA, 0};

/* Test "kernels": real stream operations issued through the baton_kernel_fn convention. The
 * opaque descriptor is the byte count. */
static int k_copy(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    size_t n;
    memcpy(&n, opaque, sizeof n);
    cudaError_t e = cudaMemcpyAsync(buffers[1], buffers[0], n, cudaMemcpyDeviceToDevice,
                                    (cudaStream_t)ctx->stream);
    if (e != cudaSuccess) {
        snprintf(ctx->errbuf, ctx->errbuf_len, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
        return BATON_ECUDA;
    }
    return 0;
}

static int k_fail(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    snprintf(ctx->errbuf, ctx->errbuf_len, "bad descriptor: n2 must be >= 1");
    return BATON_EKERNEL;
}

/* Waits for its own stream: the classic call that cannot be captured. */
static int k_sync(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)ctx->stream);
    if (e != cudaSuccess) {
        snprintf(ctx->errbuf, ctx->errbuf_len, "cudaStreamSynchronize: %s", cudaGetErrorString(e));
        return BATON_ECUDA;
    }
    return 0;
}

typedef struct fixture {
    dev_ctx *d;
    size_t n;
    unsigned char *host_src, *host_dst; /* pinned */
    void *src, *dst;                    /* device */
    size_t nbytes_opaque;
    char errbuf[256];
    void *buffers[2];
    dev_call call;
} fixture;

static void fx_open(fixture *f, size_t n)
{
    memset(f, 0, sizeof *f);
    baton_error err = {0};
    baton_options opts;
    memset(&opts, 0, sizeof opts);
    int rc = ops->open(cuda0, &(dev_open_args){.opts = &opts, .n_graphs = 4, .n_events = 4}, &f->d,
                       &err);
    cr_assert_eq(rc, 0, "open: %s", err.message);
    f->n = n;
    f->host_src = ops->host_alloc(f->d, n, &err);
    f->host_dst = ops->host_alloc(f->d, n, &err);
    f->src = ops->alloc(f->d, n, &err);
    f->dst = ops->alloc(f->d, n, &err);
    cr_assert(f->host_src && f->host_dst && f->src && f->dst, "alloc: %s", err.message);
    test_rng rng = {test_fresh_seed()};
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = test_rng_next(&rng);
        memcpy(f->host_src + i, &v, n - i < 8 ? n - i : 8);
    }
    f->nbytes_opaque = n;
    f->buffers[0] = f->src;
    f->buffers[1] = f->dst;
    f->call = (dev_call){.kernel = k_copy,
                         .buffers = f->buffers,
                         .opaque = (const char *)&f->nbytes_opaque,
                         .opaque_len = sizeof f->nbytes_opaque,
                         .ctx = {.device = cuda0,
                                 .stream = ops->stream(f->d),
                                 .next_device = {BATON_DEVICE_CPU, 0},
                                 .next_kind = BATON_TARGET_KERNEL,
                                 .step_name = "norm",
                                 .errbuf = f->errbuf,
                                 .errbuf_len = sizeof f->errbuf}};
}

static void fx_close(fixture *f)
{
    ops->free(f->d, f->src);
    ops->free(f->d, f->dst);
    ops->host_free(f->d, f->host_src);
    ops->host_free(f->d, f->host_dst);
    ops->close(f->d);
}

/* h2d(host_src -> src), call(src -> dst), d2h(dst -> host_dst), record, wait; then compare. */
static int fx_roundtrip(fixture *f, baton_error *err)
{
    memset(f->host_dst, 0xa5, f->n);
    int rc;
    if ((rc = ops->copy(f->d, f->src, f->host_src, f->n, DEV_COPY_H2D, "transfer x -> cuda:0",
                        err)) ||
        (rc = ops->call(f->d, &f->call, err)) ||
        (rc = ops->copy(f->d, f->host_dst, f->dst, f->n, DEV_COPY_D2H, "transfer y -> cpu", err)) ||
        (rc = ops->record(f->d, 0, err)) || (rc = ops->wait(f->d, 0, "end of run", err)))
        return rc;
    return memcmp(f->host_src, f->host_dst, f->n) == 0 ? 0 : BATON_ENUMERIC;
}

Test(device_cuda, open_rejects_a_missing_device_by_name)
{
    dev_ctx *d = (dev_ctx *)&d;
    baton_error err = {0};
    baton_options opts;
    memset(&opts, 0, sizeof opts);
    int rc = ops->open((baton_device){BATON_DEVICE_CUDA, 99},
                       &(dev_open_args){.opts = &opts, .n_graphs = 1, .n_events = 1}, &d, &err);
    cr_expect_eq(rc, BATON_ENODEV, "rc %d: %s", rc, err.message);
    cr_expect_null(d);
    cr_expect(strstr(err.message, "cuda:99"), "%s", err.message);
}

Test(device_cuda, alloc_returns_zeroed_device_memory)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 1 << 20);
    baton_error err = {0};
    memset(f.host_dst, 0xa5, f.n);
    cr_assert_eq(ops->copy_sync(f.d, f.host_dst, f.src, f.n, DEV_COPY_D2H, &err), 0, "%s",
                 err.message);
    for (size_t i = 0; i < f.n; i++)
        cr_assert_eq(f.host_dst[i], 0, "byte %zu not zeroed", i);
    fx_close(&f);
}

Test(device_cuda, copies_and_calls_run_in_stream_order_up_to_the_event_wait)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, (size_t)64 << 20); /* large enough that a missing wait reads stale bytes */
    baton_error err = {0};
    for (int rep = 0; rep < 3; rep++) {
        f.host_src[rep] ^= 0x5a; /* new data each time */
        int rc = fx_roundtrip(&f, &err);
        cr_assert_eq(rc, 0, "rep %d: rc %d %s", rep, rc, err.message);
    }
    dev_counters c;
    ops->counters(f.d, &c);
    cr_expect_eq(c.host_waits, 3);
    cr_expect_eq(c.launches, 3);
    fx_close(&f);
}

Test(device_cuda, a_failing_kernel_gives_its_reason_only)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 4096);
    f.call.kernel = k_fail;
    baton_error err = {0};
    int rc = ops->call(f.d, &f.call, &err);
    cr_expect_eq(rc, BATON_EKERNEL);
    /* the device gives the reason only; the runtime names the step and device once */
    cr_expect(!strstr(err.message, "cuda:0") && !strstr(err.message, "step 'norm'"),
              "the device named the step or itself: %s", err.message);
    cr_expect(strstr(err.message, "bad descriptor"), "%s", err.message);
    f.call.kernel = k_copy;
    cr_expect_eq(fx_roundtrip(&f, &err), 0, "%s", err.message);
    fx_close(&f);
}

Test(device_cuda, an_injected_alloc_fault_is_a_real_cuda_failure_and_the_device_recovers)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 4096);
    baton_error err = {0};
    baton__dev_cuda_inject_fault(f.d, DEV_CUDA_FAULT_ALLOC);
    void *p = ops->alloc(f.d, 1024, &err);
    cr_expect_null(p);
    cr_expect_eq(err.code, BATON_ECUDA);
    cr_expect(strstr(err.message, "cudaMalloc") && strstr(err.message, "cudaErrorMemoryAllocation"),
              "%s", err.message);
    p = ops->alloc(f.d, 1024, &err);
    cr_expect_not_null(p, "%s", err.message);
    ops->free(f.d, p);
    cr_expect_eq(fx_roundtrip(&f, &err), 0, "%s", err.message);
    fx_close(&f);
}

Test(device_cuda, an_injected_launch_fault_fails_the_step_without_running_it)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 1 << 20);
    baton_error err = {0};
    cr_assert_eq(ops->copy_sync(f.d, f.src, f.host_src, f.n, DEV_COPY_H2D, &err), 0);
    baton__dev_cuda_inject_fault(f.d, DEV_CUDA_FAULT_LAUNCH);
    int rc = ops->call(f.d, &f.call, &err);
    cr_expect_eq(rc, BATON_ECUDA);
    cr_expect(strstr(err.message, "kernel launch failed") && !strstr(err.message, "step 'norm'"),
              "%s", err.message);
    ops->drain(f.d);
    cr_assert_eq(ops->copy_sync(f.d, f.host_dst, f.dst, f.n, DEV_COPY_D2H, &err), 0);
    for (size_t i = 0; i < f.n; i++)
        cr_assert_eq(f.host_dst[i], 0, "the failed step wrote byte %zu", i);
    dev_counters c;
    ops->counters(f.d, &c);
    cr_expect_eq(c.launches, 0);
    cr_expect_eq(fx_roundtrip(&f, &err), 0, "%s", err.message);
    fx_close(&f);
}

Test(device_cuda, a_captured_segment_replays_and_is_updated_in_place_for_new_addresses)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 1 << 20);
    baton_error err = {0};
    int updated = -1;
    cr_assert_eq(ops->capture_begin(f.d, 1, &err), 0, "%s", err.message);
    cr_assert_eq(ops->call(f.d, &f.call, &err), 0, "%s", err.message);
    cr_assert_eq(ops->capture_end(f.d, 1, &updated, &err), 0, "%s", err.message);
    cr_expect_eq(updated, 0);
    dev_counters c;
    ops->counters(f.d, &c);
    cr_expect_eq(c.launches, 0, "a captured call is recorded, not issued");
    for (int rep = 0; rep < 2; rep++) {
        f.host_src[rep] ^= 0x77;
        cr_assert_eq(ops->copy(f.d, f.src, f.host_src, f.n, DEV_COPY_H2D, "x", &err), 0);
        cr_assert_eq(ops->graph_launch(f.d, 1, &err), 0, "%s", err.message);
        cr_assert_eq(ops->copy(f.d, f.host_dst, f.dst, f.n, DEV_COPY_D2H, "y", &err), 0);
        cr_assert_eq(ops->record(f.d, 2, &err), 0);
        cr_assert_eq(ops->wait(f.d, 2, "end", &err), 0, "%s", err.message);
        cr_assert_eq(memcmp(f.host_src, f.host_dst, f.n), 0, "replay %d", rep);
    }
    /* the same segment on other buffers: the executable graph is updated, not rebuilt */
    void *src2 = ops->alloc(f.d, f.n, &err), *dst2 = ops->alloc(f.d, f.n, &err);
    cr_assert(src2 && dst2);
    f.buffers[0] = src2;
    f.buffers[1] = dst2;
    cr_assert_eq(ops->capture_begin(f.d, 1, &err), 0, "%s", err.message);
    cr_assert_eq(ops->call(f.d, &f.call, &err), 0, "%s", err.message);
    cr_assert_eq(ops->capture_end(f.d, 1, &updated, &err), 0, "%s", err.message);
    cr_expect_eq(updated, 1);
    f.host_src[0] ^= 0x11;
    cr_assert_eq(ops->copy(f.d, src2, f.host_src, f.n, DEV_COPY_H2D, "x", &err), 0);
    cr_assert_eq(ops->graph_launch(f.d, 1, &err), 0, "%s", err.message);
    cr_assert_eq(ops->copy(f.d, f.host_dst, dst2, f.n, DEV_COPY_D2H, "y", &err), 0);
    cr_assert_eq(ops->record(f.d, 2, &err), 0);
    cr_assert_eq(ops->wait(f.d, 2, "end", &err), 0, "%s", err.message);
    cr_expect_eq(memcmp(f.host_src, f.host_dst, f.n), 0, "the updated graph used old buffers");
    ops->counters(f.d, &c);
    cr_expect_eq(c.graph_launches, 3);
    cr_expect_eq(c.launches, 0);
    ops->graph_reset(f.d, 1);
    cr_expect_eq(ops->graph_launch(f.d, 1, &err), BATON_ESTATE);
    ops->free(f.d, src2);
    ops->free(f.d, dst2);
    f.buffers[0] = f.src;
    f.buffers[1] = f.dst;
    fx_close(&f);
}

Test(device_cuda, an_illegal_call_during_capture_makes_the_segment_uncapturable_not_failed)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 1 << 20);
    baton_error err = {0};
    int updated = -1;
    dev_call bad = f.call;
    bad.kernel = k_sync;
    bad.ctx.step_name = "waits_for_its_stream";
    cr_assert_eq(ops->capture_begin(f.d, 0, &err), 0, "%s", err.message);
    cr_expect_eq(ops->call(f.d, &bad, &err), 0, "%s", err.message);
    cr_expect_eq(ops->call(f.d, &f.call, &err), 0, "%s", err.message);
    int rc = ops->capture_end(f.d, 0, &updated, &err);
    cr_expect_eq(rc, BATON_ENOTSUP, "rc %d: %s", rc, err.message);
    cr_expect(strstr(err.message, "cannot be captured") &&
                  strstr(err.message, "waits_for_its_stream"),
              "%s", err.message);
    cr_expect_eq(ops->graph_launch(f.d, 0, &err), BATON_ESTATE);
    /* the stream is usable and the segment runs uncaptured */
    cr_expect_eq(cudaPeekAtLastError(), cudaSuccess);
    cr_expect_eq(ops->call(f.d, &bad, &err), 0, "%s", err.message);
    cr_expect_eq(fx_roundtrip(&f, &err), 0, "%s", err.message);
    fx_close(&f);
}

Test(device_cuda, an_injected_capture_fault_gives_enotsup_and_the_stream_stays_usable)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 1 << 20);
    baton_error err = {0};
    int updated = -1;
    baton__dev_cuda_inject_fault(f.d, DEV_CUDA_FAULT_CAPTURE);
    cr_assert_eq(ops->capture_begin(f.d, 0, &err), 0, "%s", err.message);
    cr_expect_eq(ops->call(f.d, &f.call, &err), 0, "%s", err.message);
    int rc = ops->capture_end(f.d, 0, &updated, &err);
    cr_expect_eq(rc, BATON_ENOTSUP, "rc %d: %s", rc, err.message);
    cr_expect(strstr(err.message, "cuda:0") && strstr(err.message, "cudaStreamSynchronize"), "%s",
              err.message);
    cr_expect_eq(fx_roundtrip(&f, &err), 0, "%s", err.message);
    /* and a clean capture works afterwards */
    cr_assert_eq(ops->capture_begin(f.d, 0, &err), 0, "%s", err.message);
    cr_assert_eq(ops->call(f.d, &f.call, &err), 0, "%s", err.message);
    cr_expect_eq(ops->capture_end(f.d, 0, &updated, &err), 0, "%s", err.message);
    cr_expect_eq(ops->graph_launch(f.d, 0, &err), 0, "%s", err.message);
    ops->drain(f.d);
    fx_close(&f);
}

Test(device_cuda, an_injected_instantiate_fault_is_a_cuda_error_and_leaves_no_graph)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 4096);
    baton_error err = {0};
    int updated = -1;
    baton__dev_cuda_inject_fault(f.d, DEV_CUDA_FAULT_INSTANTIATE);
    cr_assert_eq(ops->capture_begin(f.d, 3, &err), 0, "%s", err.message);
    cr_assert_eq(ops->call(f.d, &f.call, &err), 0, "%s", err.message);
    cr_expect_eq(ops->capture_end(f.d, 3, &updated, &err), BATON_ECUDA);
    cr_expect(strstr(err.message, "cudaGraphInstantiate"), "%s", err.message);
    cr_expect_eq(ops->graph_launch(f.d, 3, &err), BATON_ESTATE);
    cr_expect_eq(fx_roundtrip(&f, &err), 0, "%s", err.message);
    fx_close(&f);
}

Test(device_cuda, an_injected_copy_fault_names_the_transfer)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 4096);
    baton_error err = {0};
    baton__dev_cuda_inject_fault(f.d, DEV_CUDA_FAULT_COPY);
    int rc = ops->copy(f.d, f.host_dst, f.dst, f.n, DEV_COPY_D2H, "transfer h0 -> cpu", &err);
    cr_expect_eq(rc, BATON_ECUDA);
    cr_expect(strstr(err.message, "cudaMemcpyAsync") && strstr(err.message, "transfer h0 -> cpu"),
              "%s", err.message);
    cr_expect_eq(fx_roundtrip(&f, &err), 0, "%s", err.message);
    fx_close(&f);
}

Test(device_cuda, a_kernel_error_during_capture_fails_the_step_and_ends_the_capture)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 4096);
    baton_error err = {0};
    int updated = -1;
    dev_call bad = f.call;
    bad.kernel = k_fail;
    cr_assert_eq(ops->capture_begin(f.d, 0, &err), 0, "%s", err.message);
    cr_expect_eq(ops->call(f.d, &bad, &err), BATON_EKERNEL);
    cr_expect(strstr(err.message, "bad descriptor"), "%s", err.message);
    cr_expect_eq(ops->capture_end(f.d, 0, &updated, &err), BATON_ESTATE);
    cr_expect_eq(fx_roundtrip(&f, &err), 0, "%s", err.message);
    fx_close(&f);
}

Test(device_cuda, drain_abandons_a_capture_in_progress)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 4096);
    baton_error err = {0};
    cr_assert_eq(ops->capture_begin(f.d, 0, &err), 0, "%s", err.message);
    cr_assert_eq(ops->call(f.d, &f.call, &err), 0, "%s", err.message);
    ops->drain(f.d);
    cr_expect_eq(cudaPeekAtLastError(), cudaSuccess);
    cr_expect_eq(fx_roundtrip(&f, &err), 0, "%s", err.message);
    int updated = -1;
    cr_assert_eq(ops->capture_begin(f.d, 0, &err), 0, "%s", err.message);
    cr_assert_eq(ops->call(f.d, &f.call, &err), 0, "%s", err.message);
    cr_expect_eq(ops->capture_end(f.d, 0, &updated, &err), 0, "%s", err.message);
    fx_close(&f);
}

Test(device_cuda, reports_pdl_support_from_the_compute_capability)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 16);
    int major = 0;
    cr_assert_eq(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    cr_expect_eq(ops->supports_pdl(f.d), major >= 9);
    fx_close(&f);
}

Test(device_cuda, rejects_out_of_range_event_and_graph_slots)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 16);
    baton_error err = {0};
    cr_expect_eq(ops->record(f.d, 4, &err), BATON_EINVAL);
    cr_expect_eq(ops->wait(f.d, -1, "x", &err), BATON_EINVAL);
    cr_expect_eq(ops->capture_begin(f.d, 4, &err), BATON_EINVAL);
    cr_expect_eq(ops->graph_launch(f.d, 7, &err), BATON_EINVAL);
    fx_close(&f);
}

Test(device_cuda, the_generic_inject_hook_makes_each_runtime_fault_happen_once)
{
    SKIP_WITHOUT_GPU();
    fixture f;
    fx_open(&f, 4096);
    baton_error err = {0};
    int updated = -1;
    cr_assert_not_null(ops->inject);
    ops->inject(f.d, DEV_FAULT_ALLOC);
    cr_expect_null(ops->alloc(f.d, 64, &err));
    ops->inject(f.d, DEV_FAULT_LAUNCH);
    cr_expect_eq(ops->call(f.d, &f.call, &err), BATON_ECUDA);
    ops->inject(f.d, DEV_FAULT_COPY);
    cr_expect_eq(ops->copy(f.d, f.dst, f.src, f.n, DEV_COPY_D2D, "t", &err), BATON_ECUDA);
    ops->inject(f.d, DEV_FAULT_CAPTURE);
    cr_assert_eq(ops->capture_begin(f.d, 0, &err), 0, "%s", err.message);
    cr_expect_eq(ops->call(f.d, &f.call, &err), 0, "%s", err.message);
    cr_expect_eq(ops->capture_end(f.d, 0, &updated, &err), BATON_ENOTSUP);
    /* each fault was one shot */
    cr_expect_eq(fx_roundtrip(&f, &err), 0, "%s", err.message);
    void *p = ops->alloc(f.d, 64, &err);
    cr_expect_not_null(p, "%s", err.message);
    ops->free(f.d, p);
    fx_close(&f);
}

/* The busy fraction through CUPTI: near 1 while copies run back to back, near 0 while the GPU
 * idles; two begins are a state error. */
static double busy_over(cudaStream_t s, void *a, void *b, size_t n, int copies, int sleep_ms)
{
    baton_error err = {0};
    int rc = baton_gpu_busy_begin(&err);
    if (rc == BATON_ENOTSUP)
        cr_skip("%s", err.message);
    cr_assert_eq(rc, 0, "%s", err.message);
    cr_expect_eq(baton_gpu_busy_begin(&err), BATON_ESTATE);
    for (int i = 0; i < copies; i++)
        cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, n, cudaMemcpyDeviceToDevice, s);
    cudaStreamSynchronize(s);
    if (sleep_ms)
        usleep((useconds_t)sleep_ms * 1000);
    double f = -1;
    cr_assert_eq(baton_gpu_busy_end(&f, &err), 0, "%s", err.message);
    return f;
}

Test(device_cuda, the_gpu_busy_fraction_tells_a_busy_gpu_from_an_idle_one)
{
    SKIP_WITHOUT_GPU();
    size_t n = (size_t)256 << 20;
    void *a = NULL, *b = NULL;
    cudaStream_t s;
    cr_assert_eq(cudaMalloc(&a, n), cudaSuccess);
    cr_assert_eq(cudaMalloc(&b, n), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    /* CUPTI's first window pays its set-up (milliseconds): measure the second */
    busy_over(s, a, b, n, 4, 0);
    /* ~200 x 0.3 ms of copies, nothing else; the busiest of three windows, as another process on
     * the GPU (a test running beside this one) time-slices some of one away: 0.787 once */
    double busy = 0;
    for (int w = 0; w < 3 && busy <= 0.8; w++) {
        const double bw = busy_over(s, a, b, n, 200, 0);
        busy = bw > busy ? bw : busy;
    }
    double idle = busy_over(s, a, b, 4096, 1, 50); /* one tiny copy, then 50 ms of nothing */
    cr_expect(busy > 0.8 && busy <= 1.0, "back-to-back copies: busy %.3f", busy);
    cr_expect(idle >= 0.0 && idle < 0.1, "an idle GPU: busy %.3f", idle);
    /* per device: the stream's GPU holds all of it; another GPU, if any, none of it */
    baton_error err = {0};
    int cur = 0;
    cr_assert_eq(cudaGetDevice(&cur), cudaSuccess);
    busy = busy_over(s, a, b, n, 50, 0);
    double mine = -1, other = -1;
    int64_t work = -1, other_work = -1;
    cr_assert_eq(baton_gpu_busy_device(cur, &mine, &work, &err), 0, "%s", err.message);
    cr_expect(mine > busy - 1e-9 && mine < busy + 1e-9, "cuda:%d %.4f of all %.4f", cur, mine,
              busy);
    cr_expect_gt(work, 0);
    cr_assert_eq(baton_gpu_busy_device(cur + 1, &other, &other_work, &err), 0, "%s", err.message);
    cr_expect(other == 0 && other_work == 0, "cuda:%d ran nothing: %.4f, %lld ns", cur + 1, other,
              (long long)other_work);
    cudaStreamDestroy(s);
    cudaFree(a);
    cudaFree(b);
}

/* ---- programmatic dependent launch inside graphs -------------------------------------------- */

/* A chain of N RMSNorm forward calls, 1 x 4096 bf16, each reading the one before, between an
 * upload of x and a download of the last output (copy kernels: 8 KiB each), as a segment of the
 * runtime issues them. */
#define PDL_N   8
#define PDL_ROW 4096

typedef struct pdl_chain {
    dev_ctx *d;
    void *x, *w, *y[PDL_N], *inv[PDL_N], *tmp;
    unsigned char *x_host, *y_host; /* pinned */
    baton_rms_norm_desc desc;
    void *bufs[PDL_N][4];
    void *copy_bufs[2];
    size_t copy_bytes;
    char errbuf[PDL_N + 1][256];
    dev_call calls[PDL_N];
    dev_call copy; /* a call that copies with cudaMemcpyAsync: no kernel for PDL to follow */
} pdl_chain;

static void pdl_open(pdl_chain *c)
{
    memset(c, 0, sizeof *c);
    baton_error err = {0};
    baton_options opts;
    memset(&opts, 0, sizeof opts);
    cr_assert_eq(ops->open(cuda0, &(dev_open_args){.opts = &opts, .n_graphs = 4, .n_events = 4},
                           &c->d, &err),
                 0, "open: %s", err.message);
    const size_t row = PDL_ROW * 2;
    c->x = ops->alloc(c->d, row, &err);
    c->w = ops->alloc(c->d, row, &err);
    c->tmp = ops->alloc(c->d, row, &err);
    c->x_host = ops->host_alloc(c->d, row, &err);
    c->y_host = ops->host_alloc(c->d, row, &err);
    cr_assert(c->x && c->w && c->tmp && c->x_host && c->y_host, "%s", err.message);
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    test_fill_random(&rng, BATON_DTYPE_BF16, c->x_host, PDL_ROW, 1.0);
    unsigned char *w = malloc(row);
    cr_assert(w);
    test_fill_random(&rng, BATON_DTYPE_BF16, w, PDL_ROW, 1.0);
    cr_assert_eq(ops->copy_sync(c->d, c->w, w, row, DEV_COPY_H2D, &err), 0, "%s", err.message);
    free(w);
    c->desc = (baton_rms_norm_desc){.n1 = 1,
                                    .n2 = PDL_ROW,
                                    .eps = 1e-5,
                                    .x_dtype = BATON_DTYPE_BF16,
                                    .w_dtype = BATON_DTYPE_BF16};
    for (int i = 0; i < PDL_N; i++) {
        c->y[i] = ops->alloc(c->d, row, &err);
        c->inv[i] = ops->alloc(c->d, sizeof(float), &err);
        cr_assert(c->y[i] && c->inv[i], "%s", err.message);
        c->bufs[i][0] = i ? c->y[i - 1] : c->x;
        c->bufs[i][1] = c->w;
        c->bufs[i][2] = c->y[i];
        c->bufs[i][3] = c->inv[i];
        c->calls[i] = (dev_call){.kernel = baton__kcuda_rms_norm_fwd,
                                 .buffers = c->bufs[i],
                                 .opaque = (const char *)&c->desc,
                                 .opaque_len = sizeof c->desc,
                                 .ctx = {.struct_size = sizeof(baton_exec_ctx),
                                         .device = cuda0,
                                         .stream = ops->stream(c->d),
                                         .next_device = cuda0,
                                         .next_kind = BATON_TARGET_KERNEL,
                                         .step_name = "norm",
                                         .step_index = i,
                                         .errbuf = c->errbuf[i],
                                         .errbuf_len = sizeof c->errbuf[i]}};
    }
    c->copy_bytes = row;
    c->copy = (dev_call){.kernel = k_copy,
                         .buffers = c->copy_bufs,
                         .opaque = (const char *)&c->copy_bytes,
                         .opaque_len = sizeof c->copy_bytes,
                         .ctx = {.device = cuda0,
                                 .stream = ops->stream(c->d),
                                 .step_name = "memcpy",
                                 .errbuf = c->errbuf[PDL_N],
                                 .errbuf_len = sizeof c->errbuf[PDL_N]}};
    printf("pdl chain: seed %llu (BATON_TEST_SEED replays it)\n", (unsigned long long)seed);
}

static void pdl_close(pdl_chain *c)
{
    for (int i = 0; i < PDL_N; i++) {
        ops->free(c->d, c->y[i]);
        ops->free(c->d, c->inv[i]);
    }
    ops->free(c->d, c->x);
    ops->free(c->d, c->w);
    ops->free(c->d, c->tmp);
    ops->host_free(c->d, c->x_host);
    ops->host_free(c->d, c->y_host);
    ops->close(c->d);
}

/* Issues the segment (captured when slot >= 0): upload, the chain (the call after step
 * `memcpy_after`, if >= 0, is preceded by a cudaMemcpyAsync call that copies y[memcpy_after] to
 * tmp), download. pdl: the calls ask for PDL. */
static void pdl_issue(pdl_chain *c, int pdl, int memcpy_after)
{
    baton_error err = {0};
    cr_assert_eq(ops->copy(c->d, c->x, c->x_host, PDL_ROW * 2, DEV_COPY_H2D, "x", &err), 0, "%s",
                 err.message);
    for (int i = 0; i < PDL_N; i++) {
        c->calls[i].pdl = pdl;
        cr_assert_eq(ops->call(c->d, &c->calls[i], &err), 0, "step %d: %s", i, err.message);
        if (i == memcpy_after) {
            c->copy_bufs[0] = c->y[i];
            c->copy_bufs[1] = c->tmp;
            cr_assert_eq(ops->call(c->d, &c->copy, &err), 0, "%s", err.message);
        }
    }
    cr_assert_eq(ops->copy(c->d, c->y_host, c->y[PDL_N - 1], PDL_ROW * 2, DEV_COPY_D2H, "y", &err),
                 0, "%s", err.message);
}

/* Runs the segment on the stream (slot < 0) or as graph `slot` (captured first), with every
 * output poisoned before, and returns the last output's bytes in out. */
static void pdl_run(pdl_chain *c, int slot, int pdl, int memcpy_after, unsigned char *out)
{
    baton_error err = {0};
    for (int i = 0; i < PDL_N; i++)
        cr_assert_eq(cudaMemset(c->y[i], 0xff, PDL_ROW * 2), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    test_poison(c->y_host, PDL_ROW * 2);
    if (slot < 0) {
        pdl_issue(c, pdl, memcpy_after);
    } else {
        int updated = 0;
        cr_assert_eq(ops->capture_begin(c->d, slot, &err), 0, "%s", err.message);
        pdl_issue(c, pdl, memcpy_after);
        cr_assert_eq(ops->capture_end(c->d, slot, &updated, &err), 0, "%s", err.message);
        cr_assert_eq(ops->graph_launch(c->d, slot, &err), 0, "%s", err.message);
    }
    cr_assert_eq(ops->record(c->d, 0, &err), 0, "%s", err.message);
    cr_assert_eq(ops->wait(c->d, 0, "end", &err), 0, "%s", err.message);
    memcpy(out, c->y_host, PDL_ROW * 2);
}

static int pdl_device(void)
{
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess)
        return 0;
    return major >= 9;
}

Test(device_cuda, a_captured_chain_of_pdl_kernels_has_programmatic_edges_and_the_same_bits)
{
    SKIP_WITHOUT_GPU();
    if (!pdl_device())
        cr_skip("programmatic dependent launch needs compute capability 9.0 or later");
    pdl_chain c;
    pdl_open(&c);
    unsigned char ref[PDL_ROW * 2], got[PDL_ROW * 2];
    pdl_run(&c, -1, 0, -1, ref); /* on the stream, no PDL */
    cr_assert_neq(ref[0] == 0xff && ref[1] == 0xff, 1, "the chain wrote nothing");

    pdl_run(&c, 0, 1, -1, got);
    cr_expect_eq(memcmp(ref, got, sizeof ref), 0, "a graph with PDL changed the bits");
    dev_cuda_edges e;
    cr_assert_eq(baton__dev_cuda_graph_edges(c.d, 0, &e), 0);
    /* upload kernel -> N norms -> download kernel: N + 2 kernel nodes in a line, every edge
     * programmatic (each node follows a kernel and waits for it) */
    cr_expect_eq(e.nodes, PDL_N + 2);
    cr_expect_eq(e.kernels, PDL_N + 2);
    cr_expect_eq(e.edges, PDL_N + 1);
    cr_expect_eq(e.programmatic, PDL_N + 1, "%d of %d edges programmatic", e.programmatic, e.edges);
    cr_expect_eq(e.kernel_default, 0);
    cr_expect_eq(e.pdl_made + e.pdl_kept, PDL_N + 1, "made %d, kept %d", e.pdl_made, e.pdl_kept);

    /* the calls without PDL: only the download kernel follows its kernel programmatically */
    pdl_run(&c, 1, 0, -1, got);
    cr_expect_eq(memcmp(ref, got, sizeof ref), 0, "a graph without PDL changed the bits");
    cr_assert_eq(baton__dev_cuda_graph_edges(c.d, 1, &e), 0);
    cr_expect_eq(e.programmatic, 1);
    cr_expect_eq(e.kernel_default, PDL_N);

    /* on the stream with PDL: the same bits */
    pdl_run(&c, -1, 1, -1, got);
    cr_expect_eq(memcmp(ref, got, sizeof ref), 0, "PDL on the stream changed the bits");
    pdl_close(&c);
}

Test(device_cuda, a_pdl_kernel_after_a_memcpy_in_a_graph_waits_for_it_in_full)
{
    SKIP_WITHOUT_GPU();
    if (!pdl_device())
        cr_skip("programmatic dependent launch needs compute capability 9.0 or later");
    pdl_chain c;
    pdl_open(&c);
    unsigned char ref[PDL_ROW * 2], got[PDL_ROW * 2];
    pdl_run(&c, -1, 0, 3, ref);
    pdl_run(&c, 2, 1, 3, got);
    cr_expect_eq(memcmp(ref, got, sizeof ref), 0, "PDL around a memcpy changed the bits");
    dev_cuda_edges e;
    cr_assert_eq(baton__dev_cuda_graph_edges(c.d, 2, &e), 0);
    /* the memcpy node splits the line: norm 3 -> memcpy -> norm 4 are default edges, and
     * nothing is made programmatic into or out of it */
    cr_expect_eq(e.nodes, PDL_N + 3);
    cr_expect_eq(e.edges, PDL_N + 2);
    cr_expect_eq(e.programmatic, PDL_N, "%d programmatic", e.programmatic);
    cr_expect_eq(e.kernel_default, 0);
    pdl_close(&c);
}

/* The runtime on the bundled 64-step chain in graph mode: its captured segment is one
 * programmatic chain (upload kernel, 64 norms, download kernel), and --no-pdl gives the same bits
 * from a graph without a programmatic edge. */
static void chain_plan_run(const baton_plan *plan, int no_pdl, const unsigned char *x,
                           unsigned char *out, dev_cuda_edges *e)
{
    baton_options opts = test_options(BATON_GPU_CUDA, BATON_SYNC_GRAPH, 0, 1);
    opts.disable_pdl = no_pdl;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(plan, &opts, &rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, PDL_ROW * 2, &err), 0, "%s", err.message);
    for (int r = 0; r < 2; r++) { /* the first run captures, the second replays */
        test_poison(out, PDL_ROW * 2);
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_get_output(rt, "h64", out, PDL_ROW * 2, &err), 0, "%s",
                     err.message);
    }
    /* memory index 1 is cuda:0 (0 is the CPU); the GPU segment's slot holds the graph */
    dev_ctx *d = baton__runtime_device_ctx(rt, 1);
    cr_assert(d);
    int found = 0;
    for (int s = 0; s < 4 && !found; s++) {
        int slot = baton__runtime_graph_slot(rt, s);
        found = slot >= 0 && baton__dev_cuda_graph_edges(d, slot, e) == 0;
    }
    cr_assert(found, "no captured graph on cuda:0");
    baton_runtime_destroy(rt);
}

Test(device_cuda, the_runtimes_captured_chain_is_one_programmatic_chain_with_the_same_bits)
{
    SKIP_WITHOUT_GPU();
    if (!pdl_device())
        cr_skip("programmatic dependent launch needs compute capability 9.0 or later");
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_registry_create(&reg), 0);
    cr_assert_eq(
        baton_plan_load(reg, test_path("examples/plans/rmsnorm_chain64.json"), &plan, &err), 0,
        "%s", err.message);
    unsigned char x[PDL_ROW * 2], on[PDL_ROW * 2], off[PDL_ROW * 2];
    uint64_t seed = test_fresh_seed();
    test_rng rng = {seed};
    test_fill_random(&rng, BATON_DTYPE_BF16, x, PDL_ROW, 1.0);
    dev_cuda_edges e_on, e_off;
    chain_plan_run(plan, 0, x, on, &e_on);
    chain_plan_run(plan, 1, x, off, &e_off);
    cr_expect_eq(memcmp(on, off, sizeof on), 0, "PDL changed the chain's bits (seed %llu)",
                 (unsigned long long)seed);
    cr_expect_eq(e_on.kernels, 66, "%d kernel nodes", e_on.kernels);
    cr_expect_eq(e_on.edges, 65);
    cr_expect_eq(e_on.programmatic, 65, "%d of %d edges programmatic (%d made, %d captured so)",
                 e_on.programmatic, e_on.edges, e_on.pdl_made, e_on.pdl_kept);
    cr_expect_eq(e_on.kernel_default, 0);
    cr_expect_eq(e_off.programmatic, 0, "--no-pdl left %d programmatic edges", e_off.programmatic);
    cr_expect_eq(e_off.kernel_default, 65);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
}
