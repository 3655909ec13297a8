/* device_cuda.c: the scheduler's CUDA device. One non-blocking stream per GPU that every kernel,
 * delegate and transfer of a run shares, events for the waits the scheduler asks for, one
 * executable graph per captured segment, updated in place when a re-capture allows it, and a
 * gate: a flag in mapped pinned memory that a one-thread kernel on the stream waits for, so that
 * work can be queued before the host has produced its inputs (device_kernels.cu, which also
 * holds the kernel that does small host <-> device copies). */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#ifdef BATON_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

#include "core/core.h"
#include "scheduler/cuda/device_cuda.h"
#include "scheduler/cuda/cupti.h"
#include "scheduler/cuda/nccl.h"
#include "scheduler/cuda/rebind.h"
#include "scheduler/device.h"

/* The largest host <-> device copy run as a kernel rather than by the copy engine. */
#define DEV_CUDA_COPY_KERNEL_MAX ((size_t)64 << 10)
/* "1" (read when a device is opened): a copy of at most DEV_CUDA_COPY_KERNEL_MAX bytes from
 * another GPU whose memory this one reads directly (peer access enabled) runs as the copy
 * kernel, which reads the peer's memory over NVLink or PCIe, instead of a copy-engine memcpy
 * between the kernels around it. Off by default until measured (scripts/gpu-multi.sh times
 * both). */
#define DEV_CUDA_PEER_KERNEL_ENV "BATON_PEER_COPY_KERNEL"
/* "1" (read when a device is opened): the host waits for the GPU (wait()) asleep in the driver
 * (cudaEventBlockingSync) instead of polling the event, as it does by default where the process
 * has fewer GPU contexts than cores. With many runs in flight, one polling thread per run may
 * contend with the threads launching work; off by default until measured (gpu-multi.sh). */
#define DEV_CUDA_BLOCKING_WAIT_ENV "BATON_CUDA_BLOCKING_WAIT"
/* N (read when a device is opened): the host's waits ask the event every N microseconds and
 * sleep in between, instead of polling it back to back in the driver: with many runs in flight,
 * whether the polling workers hold back the ones launching (gpu-multi.sh). Off by default. */
#define DEV_CUDA_WAIT_POLL_ENV "BATON_CUDA_WAIT_POLL_US"
/* DIR (diagnostic, issue 43): each captured graph is written, once instantiated or updated, to
 * DIR/cuda0-graph3.dot (cudaGraphDebugDotPrint, verbose: every node's kind, kernel, grid,
 * parameters, attributes and edges). */
#define DEV_CUDA_GRAPH_DOT_ENV "BATON_GRAPH_DOT"
#define DEV_CUDA_DOT_GPUS      64 /* GPUs whose contexts are numbered apart in the file names */

struct dev_ctx {
    baton_device dev;
    char name[24];  /* "cuda:0", for messages */
    int set_device; /* nonzero: make dev current before each call (several GPUs, or not 0) */
    int pdl;        /* compute capability >= 9 */
    int pdl_copies; /* the copy kernel may be a PDL launch (pdl, and the run allows PDL) */
    cudaStream_t stream;
    int own_stream; /* created here; else the caller's (baton_options.streams) */
    /* idle: captures that learn how to patch a graph (rebind.c). Created at the first capture,
     * not at open: CUDA maps streams onto its hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by
     * default) in creation order, so with a stream and a probe each, the working streams of a
     * pool's instances would share queues, and one instance's gate would hold another's work. */
    cudaStream_t probe;
    int n_events;
    cudaEvent_t *events;
    int n_graphs;
    cudaGraphExec_t *graphs;
    cudaGraph_t *templates; /* what each executable graph was instantiated from */
    rb_set **rebind;        /* per graph: the nodes each op added, for patching */
    rb_capture cap;
    dev_trace *trace; /* the device timeline being recorded (CUPTI), or NULL */
    /* capture state */
    int capturing;
    int capture_slot;
    int capture_failed;
    char capture_reason[512];
    /* Programmatic dependent launch. after_kernel: the last op issued on the stream (outside a
     * capture) is a kernel, so a PDL kernel may follow it. During a capture, each PDL call's
     * edge from the kernel node before it (pdl_from[i] -> pdl_to[i]), made programmatic at
     * capture end whatever type the capture gave it. */
    int after_kernel;
    cudaGraphNode_t *pdl_from, *pdl_to;
    int n_pdl, cap_pdl;
    dev_cuda_edges edges; /* of the last capture (graph edges_slot), for BATON_GRAPH_EDGES */
    int edges_slot;
    int serial; /* contexts opened on this GPU before this one in the process (BATON_GRAPH_DOT) */
    int fault;  /* dev_cuda_fault armed by a test */
    /* GPUs whose memory this context reads directly (its own, and peers enabled by
     * peer_enable), and whether small copies from them run as the copy kernel */
    uint64_t peers;
    int peer_kernel;
    int poll_us; /* DEV_CUDA_WAIT_POLL_ENV, or 0 */
    dev_counters counters;
    /* the gate: a flag in mapped pinned memory (NULL if none could be had), and its address as
     * the GPU sees it */
    volatile unsigned *gate;
    volatile unsigned *gate_dev;
    /* prepare-time uploads: two pinned buffers and the copies out of them (stage_uploads) */
    void *stage[2];
    cudaEvent_t stage_ev[2];
    size_t stage_bytes;
};

/* Sets up the gate's flag. Without mapped pinned memory the device simply has no gate. */
static void open_gate(dev_ctx *d)
{
    void *host = NULL, *dev = NULL;
    if (cudaHostAlloc(&host, 64, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (cudaHostGetDevicePointer(&dev, host, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFreeHost(host);
        return;
    }
    memset(host, 0, 64);
    d->gate = host;
    d->gate_dev = dev;
}

/* Names the failed CUDA call: "cuda:0: step 'norm': cudaMemcpyAsync (transfer h0 -> cpu)
 * failed: cudaErrorInvalidValue: invalid argument". step and what may be NULL. */
/* The reason a CUDA call failed, for err: the call, what it was doing, the CUDA error. The runtime
 * adds the step and the device. */
static int cuda_reason(baton_error *err, const dev_ctx *d, const char *step, const char *call,
                       const char *what, cudaError_t e)
{
    (void)d;
    (void)step;
    char detail[300] = "";
    if (what)
        snprintf(detail, sizeof detail, " (%s)", what);
    return baton__err_set(err, BATON_ECUDA, "%s%s failed: %s: %s", call, detail,
                          cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Makes the context's GPU current on the calling thread. Free on one-GPU machines, where
 * device 0 is always current. */
static cudaError_t make_current(const dev_ctx *d)
{
    if (!d->set_device)
        return cudaSuccess;
    return cudaSetDevice(d->dev.index);
}

static int is_capture_error(cudaError_t e)
{
    switch (e) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureWrongThread: return 1;
    default: return 0;
    }
}

/* Ends a capture that must be thrown away and clears the error it left, so that the stream can
 * be used again. */
static void abandon_capture(dev_ctx *d)
{
    cudaGraph_t g = NULL;
    cudaStreamEndCapture(d->stream, &g);
    if (g)
        cudaGraphDestroy(g);
    (void)cudaGetLastError();
    baton__rb_set_free(d->cap.set);
    d->cap.set = NULL;
    d->capturing = 0;
    d->n_pdl = 0;
    d->after_kernel = 0;
    d->capture_failed = 0;
}

/* Remembers why the capture in progress cannot give a graph; capture_end() reports it. */
static void capture_failed(dev_ctx *d, const char *fmt, ...)
{
    if (d->capture_failed)
        return; /* the first reason is the cause, later ones its consequences */
    d->capture_failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->capture_reason, sizeof d->capture_reason, fmt, ap);
    va_end(ap);
}

/* Prepare-time uploads. cudaMemcpy from pageable memory (a safetensors mapping, a materialised
 * constant) runs at ~1.8 GB/s, most of a 2.5 GB model's load: the driver stages it through its
 * own small pinned buffer, one piece at a time. Here the host copies one piece into a pinned
 * buffer while the DMA engine copies the previous piece out of the other one, so the upload runs
 * at the slower of memcpy and the link instead of their sum at small pieces. Two buffers of up to
 * 64 MB, allocated when the runtime announces the bytes to come and freed when it is done.
 * (cudaHostRegister of the mapped range would avoid the host copy, but registering pins the
 * whole file's pages at once and costs time per page; unmeasured here, so the standard form.) */
#define STAGE_MAX ((size_t)64 << 20)
#define STAGE_MIN ((size_t)8 << 20) /* below this in all, pinning costs more than it saves */

static void stage_release(dev_ctx *d)
{
    for (int i = 0; i < 2; i++) {
        if (d->stage_ev[i])
            cudaEventDestroy(d->stage_ev[i]);
        if (d->stage[i])
            cudaFreeHost(d->stage[i]);
        d->stage_ev[i] = NULL;
        d->stage[i] = NULL;
    }
    d->stage_bytes = 0;
    (void)cudaGetLastError();
}

static void cuda_stage_uploads(dev_ctx *d, size_t bytes)
{
    if (make_current(d) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (d->stream)
        (void)cudaStreamSynchronize(d->stream); /* no copy still reads a buffer freed below */
    stage_release(d);
    if (bytes < STAGE_MIN)
        return; /* done, or too little to be worth pinning: copy_sync copies directly */
    size_t half = (bytes / 2 + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    d->stage_bytes = half < STAGE_MAX ? half : STAGE_MAX;
    for (int i = 0; i < 2; i++) {
        if (cudaHostAlloc(&d->stage[i], d->stage_bytes, cudaHostAllocDefault) != cudaSuccess) {
            d->stage[i] = NULL;
            stage_release(d); /* no pinned memory to spare: the plain copy still works */
            return;
        }
        if (cudaEventCreateWithFlags(&d->stage_ev[i], cudaEventDisableTiming) != cudaSuccess) {
            d->stage_ev[i] = NULL;
            stage_release(d);
            return;
        }
    }
}

/* Whether src is pageable host memory (a pinned or device pointer needs no staging). */
static int is_pageable(const void *src)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, src) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return a.type == cudaMemoryTypeUnregistered;
}

/* An upload through the two staging buffers, double-buffered, on the run's stream. */
static int copy_staged(dev_ctx *d, void *dst, const void *src, size_t bytes, baton_error *err)
{
    cudaError_t e;
    int pending[2] = {0, 0};
    size_t n;
    for (size_t off = 0, i = 0; off < bytes; off += n, i ^= 1) {
        n = bytes - off < d->stage_bytes ? bytes - off : d->stage_bytes;
        /* the copy that last read this buffer has finished */
        if (pending[i] && (e = cudaEventSynchronize(d->stage_ev[i])) != cudaSuccess)
            return cuda_reason(err, d, NULL, "cudaEventSynchronize", "staged upload", e);
        memcpy(d->stage[i], (const char *)src + off, n);
        if ((e = cudaMemcpyAsync((char *)dst + off, d->stage[i], n, cudaMemcpyHostToDevice,
                                 d->stream)) != cudaSuccess)
            return cuda_reason(err, d, NULL, "cudaMemcpyAsync", "staged upload", e);
        if ((e = cudaEventRecord(d->stage_ev[i], d->stream)) != cudaSuccess)
            return cuda_reason(err, d, NULL, "cudaEventRecord", "staged upload", e);
        pending[i] = 1;
    }
    if ((e = cudaStreamSynchronize(d->stream)) != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaStreamSynchronize", "staged upload", e);
    return 0;
}

static void cuda_close(dev_ctx *d);
static void cuda_graph_reset(dev_ctx *d, int slot);

static int open_failed(dev_ctx *d, int code)
{
    cuda_close(d);
    return code;
}

static int open_device(baton_device dev, const dev_open_args *a, dev_ctx **out, baton_error *err)
{
    const baton_options *opts = a->opts;
    const int n_graphs = a->n_graphs, n_events = a->n_events;
    *out = NULL;
    char name[24];
    baton_device_format(dev, name, sizeof name);
    if (dev.kind != BATON_DEVICE_CUDA || dev.index < 0 || n_graphs < 0 || n_events < 0)
        return baton__err_set(err, BATON_EINVAL, "%s: the CUDA device cannot open this device",
                              name);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return baton__err_set(err, BATON_ENODEV, "%s: no CUDA device is usable: %s: %s", name,
                              cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (dev.index >= count)
        return baton__err_set(err, BATON_ENODEV,
                              "%s: no such device (%d CUDA device%s present); place the step on "
                              "cuda:0..cuda:%d or on cpu",
                              name, count, count == 1 ? "" : "s", count - 1);
    dev_ctx *d = calloc(1, sizeof *d);
    if (!d)
        return baton__err_set(err, BATON_ENOMEM, "%s: out of memory opening the device", name);
    d->dev = dev;
    memcpy(d->name, name, sizeof d->name);
    d->set_device = count > 1 || dev.index != 0;
    d->n_events = n_events;
    d->n_graphs = n_graphs;
    d->events = calloc((size_t)(n_events > 0 ? n_events : 1), sizeof *d->events);
    d->graphs = calloc((size_t)(n_graphs > 0 ? n_graphs : 1), sizeof *d->graphs);
    d->templates = calloc((size_t)(n_graphs > 0 ? n_graphs : 1), sizeof *d->templates);
    d->rebind = calloc((size_t)(n_graphs > 0 ? n_graphs : 1), sizeof *d->rebind);
    if (!d->events || !d->graphs || !d->templates || !d->rebind) {
        cuda_close(d);
        return baton__err_set(err, BATON_ENOMEM, "%s: out of memory opening the device", name);
    }
    if ((e = cudaSetDevice(dev.index)) != cudaSuccess)
        return open_failed(d, cuda_reason(err, d, NULL, "cudaSetDevice", NULL, e));
    int major = 0;
    if ((e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev.index)) !=
        cudaSuccess)
        return open_failed(
            d, cuda_reason(err, d, NULL, "cudaDeviceGetAttribute", "compute capability", e));
    d->pdl = major >= 9;
    static _Atomic int opened[DEV_CUDA_DOT_GPUS];
    d->serial = opened[dev.index < DEV_CUDA_DOT_GPUS ? dev.index : DEV_CUDA_DOT_GPUS - 1]++;
    if (dev.index < 64)
        d->peers = 1ull << dev.index;
    const char *pk = getenv(DEV_CUDA_PEER_KERNEL_ENV);
    d->peer_kernel = pk && strcmp(pk, "1") == 0;
    const char *pu = getenv(DEV_CUDA_WAIT_POLL_ENV);
    d->poll_us = pu ? atoi(pu) : 0;
    if (d->poll_us < 0 || d->poll_us > 10000)
        d->poll_us = 0;
    d->pdl_copies = d->pdl && !(opts && opts->disable_pdl);
    for (int i = 0; opts && i < opts->n_streams; i++)
        if (opts->streams[i].device.kind == dev.kind && opts->streams[i].device.index == dev.index)
            d->stream = opts->streams[i].stream;
    if (d->stream) {
        int on = -1;
        if ((e = cudaStreamGetDevice(d->stream, &on)) != cudaSuccess) {
            d->stream = NULL;
            return open_failed(d, cuda_reason(err, d, NULL, "cudaStreamGetDevice",
                                              "the caller's stream (baton_options.streams)", e));
        }
        if (on != dev.index) {
            d->stream = NULL;
            cuda_close(d);
            return baton__err_set(
                err, BATON_EINVAL,
                "%s: the caller's stream (baton_options.streams) belongs to cuda:%d; "
                "create it with cuda:%d current",
                name, on, dev.index);
        }
    } else {
        /* Non-blocking: the legacy default stream, which other code in the process may use,
         * must not serialise with a run. */
        int prio = 0, least = 0, greatest = 0;
        if (a->prio_of > 1 && cudaDeviceGetStreamPriorityRange(&least, &greatest) == cudaSuccess)
            prio = greatest + (least - greatest) * a->prio_rank / (a->prio_of - 1);
        (void)cudaGetLastError();
        if ((e = cudaStreamCreateWithPriority(&d->stream, cudaStreamNonBlocking, prio)) !=
            cudaSuccess) {
            d->stream = NULL;
            return open_failed(d,
                               cuda_reason(err, d, NULL, "cudaStreamCreateWithPriority", NULL, e));
        }
        d->own_stream = 1;
    }
    const char *bw = getenv(DEV_CUDA_BLOCKING_WAIT_ENV);
    const unsigned ev_flags =
        cudaEventDisableTiming | (bw && strcmp(bw, "1") == 0 ? cudaEventBlockingSync : 0);
    for (int i = 0; i < n_events; i++) {
        if ((e = cudaEventCreateWithFlags(&d->events[i], ev_flags)) != cudaSuccess) {
            d->events[i] = NULL;
            return open_failed(d, cuda_reason(err, d, NULL, "cudaEventCreateWithFlags", NULL, e));
        }
    }
    open_gate(d);
    *out = d;
    return 0;
}

/* The caller's current CUDA device is theirs: opening (and closing) a context leaves it as it was,
 * whatever device the context is for. */
static int cuda_open(baton_device dev, const dev_open_args *a, dev_ctx **out, baton_error *err)
{
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) {
        (void)cudaGetLastError();
        prev = -1;
    }
    int rc = open_device(dev, a, out, err);
    int now = -1;
    if (prev >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev)
        (void)cudaSetDevice(prev);
    return rc;
}

static void cuda_close(dev_ctx *d)
{
    if (!d)
        return;
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = -1;
    make_current(d);
    if (d->capturing)
        abandon_capture(d);
    if (d->stream)
        cudaStreamSynchronize(d->stream);
    if (d->trace)
        baton__cupti_detach(d->trace);
    for (int i = 0; i < d->n_graphs && d->graphs; i++)
        if (d->graphs[i])
            cudaGraphExecDestroy(d->graphs[i]);
    for (int i = 0; i < d->n_graphs && d->templates; i++)
        if (d->templates[i])
            cudaGraphDestroy(d->templates[i]);
    for (int i = 0; i < d->n_graphs && d->rebind; i++)
        baton__rb_set_free(d->rebind[i]);
    baton__rb_set_free(d->cap.set);
    for (int i = 0; i < d->n_events && d->events; i++)
        if (d->events[i])
            cudaEventDestroy(d->events[i]);
    if (d->stream && d->own_stream)
        cudaStreamDestroy(d->stream);
    if (d->probe)
        cudaStreamDestroy(d->probe);
    if (d->gate)
        cudaFreeHost((void *)d->gate);
    stage_release(d);
    if (prev >= 0 && d->set_device)
        (void)cudaSetDevice(prev);
    free(d->graphs);
    free(d->templates);
    free(d->rebind);
    free(d->events);
    free(d->pdl_from);
    free(d->pdl_to);
    free(d);
}

static void *cuda_stream(dev_ctx *d)
{
    return d->stream;
}

static void *cuda_alloc(dev_ctx *d, size_t bytes, baton_error *err)
{
    cudaError_t e = make_current(d);
    if (e != cudaSuccess) {
        cuda_reason(err, d, NULL, "cudaSetDevice", NULL, e);
        return NULL;
    }
    size_t ask = bytes ? bytes : 1; /* NULL means failure: never return it for 0 bytes */
    if (d->fault == DEV_CUDA_FAULT_ALLOC) {
        d->fault = DEV_CUDA_FAULT_NONE;
        ask = (size_t)1 << 60; /* more than any GPU has: a real allocation failure */
    }
    void *p = NULL;
    char what[64];
    snprintf(what, sizeof what, "%zu bytes", ask);
    if ((e = cudaMalloc(&p, ask)) != cudaSuccess) {
        (void)cudaGetLastError();
        cuda_reason(err, d, NULL, "cudaMalloc", what, e);
        return NULL;
    }
    /* On the run's stream, then waited for: a plain cudaMemset runs on the legacy stream, which
     * a non-blocking stream does not wait for. */
    if ((e = cudaMemsetAsync(p, 0, ask, d->stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(d->stream)) != cudaSuccess) {
        cuda_reason(err, d, NULL, "cudaMemsetAsync", what, e);
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_free(dev_ctx *d, void *p)
{
    if (!p)
        return;
    make_current(d);
    cudaFree(p);
}

static void *cuda_host_alloc(dev_ctx *d, size_t bytes, baton_error *err)
{
    cudaError_t e = make_current(d);
    if (e != cudaSuccess) {
        cuda_reason(err, d, NULL, "cudaSetDevice", NULL, e);
        return NULL;
    }
    size_t ask = bytes ? bytes : 1;
    void *p = NULL;
    if ((e = cudaMallocHost(&p, ask)) != cudaSuccess) {
        (void)cudaGetLastError();
        char what[64];
        snprintf(what, sizeof what, "%zu pinned bytes", ask);
        cuda_reason(err, d, NULL, "cudaMallocHost", what, e);
        return NULL;
    }
    memset(p, 0, ask);
    return p;
}

static void cuda_host_free(dev_ctx *d, void *p)
{
    if (p)
        cudaFreeHost(p);
}

static enum cudaMemcpyKind memcpy_kind(dev_copy_kind kind)
{
    switch (kind) {
    case DEV_COPY_H2D: return cudaMemcpyHostToDevice;
    case DEV_COPY_D2H: return cudaMemcpyDeviceToHost;
    default: return cudaMemcpyDefault; /* on one GPU, or from another (a peer copy) */
    }
}

static int cuda_copy_sync(dev_ctx *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind,
                          baton_error *err)
{
    cudaError_t e = make_current(d);
    if (e != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaSetDevice", NULL, e);
    if (d->capturing)
        return baton__err_set(err, BATON_ESTATE,
                              "%s: a synchronous copy cannot be made while a "
                              "segment is being captured",
                              d->name);
    if (bytes == 0)
        return 0;
    if (kind == DEV_COPY_H2D && d->stage[0] && bytes >= ((size_t)1 << 20) && is_pageable(src))
        return copy_staged(d, dst, src, bytes, err);
    /* Ordered after the work already on the run's stream (a plain cudaMemcpy would use the
     * legacy stream, which does not wait for it). */
    if ((e = cudaMemcpyAsync(dst, src, bytes, memcpy_kind(kind), d->stream)) != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaMemcpyAsync", "synchronous copy", e);
    if ((e = cudaStreamSynchronize(d->stream)) != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaStreamSynchronize", "synchronous copy", e);
    return 0;
}

/* ---- programmatic dependent launch ------------------------------------------------------------
 * A kernel launched with the programmatic-stream-serialization attribute starts while the kernel
 * before it on the stream finishes, and its pdl_wait (griddepcontrol.wait) waits for that grid's
 * completion and its writes. So it may follow any kernel, baton's, a delegate's (cuBLASLt) or the
 * copy kernel, triggering or not; never a memcpy, an event or the host. Stream capture turns the
 * attribute into a programmatic edge between kernel nodes (cudaGraphEdgeData); the device checks
 * that the capture's node before the call is a kernel and, at capture end, that the edge is
 * programmatic, making it so where the capture left it default. */

/* The capture's single current dependency when it is a kernel node, else NULL. */
static cudaGraphNode_t capture_kernel_leaf(dev_ctx *d)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    const cudaGraphNode_t *deps = NULL;
    const cudaGraphEdgeData *ed = NULL; /* asked for: a query without it is lossy after PDL */
    size_t n = 0;
    enum cudaGraphNodeType t;
    if (cudaStreamGetCaptureInfo(d->stream, &st, NULL, NULL, &deps, &ed, &n) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (st != cudaStreamCaptureStatusActive || n != 1 || !deps[0])
        return NULL;
    if (cudaGraphNodeGetType(deps[0], &t) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return t == cudaGraphNodeTypeKernel ? deps[0] : NULL;
}

/* Whether the next kernel issued on d's stream may be a programmatic dependent launch; *before
 * is the kernel node it will follow while capturing. */
static int pdl_may_follow(dev_ctx *d, cudaGraphNode_t *before)
{
    *before = NULL;
    if (!d->pdl)
        return 0; /* the calls' own flag (dev_call.pdl) says whether the run allows it */
    if (!d->capturing)
        return d->after_kernel;
    *before = capture_kernel_leaf(d);
    return *before != NULL;
}

/* After a PDL op during a capture: remembers the edge from `before` into the op's first node (the
 * one node that depends on `before`), when that node is a kernel. Allocates while capturing,
 * which is prepare-like work (a run that captures), never a replay. */
static void pdl_note(dev_ctx *d, cudaGraphNode_t before)
{
    cudaGraphNode_t to[2] = {NULL, NULL};
    cudaGraphEdgeData ed[2];
    size_t n = 2;
    enum cudaGraphNodeType t;
    memset(ed, 0, sizeof ed);
    if (cudaGraphNodeGetDependentNodes(before, to, ed, &n) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (n != 1 || !to[0] || cudaGraphNodeGetType(to[0], &t) != cudaSuccess ||
        t != cudaGraphNodeTypeKernel) {
        (void)cudaGetLastError();
        return; /* the op began with a memset or forked: its first node is no PDL kernel */
    }
    if (d->n_pdl == d->cap_pdl) {
        int nc = d->cap_pdl ? 2 * d->cap_pdl : 64;
        cudaGraphNode_t *f = realloc(d->pdl_from, (size_t)nc * sizeof *f);
        if (f)
            d->pdl_from = f;
        cudaGraphNode_t *g = f ? realloc(d->pdl_to, (size_t)nc * sizeof *g) : NULL;
        if (g)
            d->pdl_to = g;
        if (!f || !g)
            return; /* the edge stays as captured */
        d->cap_pdl = nc;
    }
    d->pdl_from[d->n_pdl] = before;
    d->pdl_to[d->n_pdl] = to[0];
    d->n_pdl++;
}

/* At capture end: every noted edge programmatic (the port that opens when all blocks of the
 * kernel before have triggered or exited, as a captured PDL launch gets). */
static void pdl_apply(dev_ctx *d, cudaGraph_t g)
{
    const cudaGraphEdgeData prog = {.from_port = cudaGraphKernelNodePortProgrammatic,
                                    .type = cudaGraphDependencyTypeProgrammatic};
    d->edges.pdl_made = d->edges.pdl_kept = 0;
    for (int i = 0; i < d->n_pdl; i++) {
        cudaGraphNode_t deps[8];
        cudaGraphEdgeData ed[8];
        size_t n = 8;
        memset(ed, 0, sizeof ed);
        if (cudaGraphNodeGetDependencies(d->pdl_to[i], deps, ed, &n) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        for (size_t k = 0; k < n && k < 8; k++) {
            if (deps[k] != d->pdl_from[i])
                continue;
            if (ed[k].type == cudaGraphDependencyTypeProgrammatic) {
                d->edges.pdl_kept++;
            } else if (cudaGraphRemoveDependencies(g, &d->pdl_from[i], &d->pdl_to[i], &ed[k], 1) ==
                       cudaSuccess) {
                if (cudaGraphAddDependencies(g, &d->pdl_from[i], &d->pdl_to[i], &prog, 1) ==
                    cudaSuccess) {
                    d->edges.pdl_made++;
                } else {
                    (void)cudaGetLastError(); /* refused: keep the full dependency */
                    cudaGraphAddDependencies(g, &d->pdl_from[i], &d->pdl_to[i], &ed[k], 1);
                    (void)cudaGetLastError();
                }
            } else {
                (void)cudaGetLastError();
            }
            break;
        }
    }
    d->n_pdl = 0;
}

/* A node for the edge listing: a kernel's function name, else its kind. */
static const char *node_label(cudaGraphNode_t n, enum cudaGraphNodeType t)
{
    switch (t) {
    case cudaGraphNodeTypeKernel: {
        struct cudaKernelNodeParams p;
        const char *name = NULL;
        if (cudaGraphKernelNodeGetParams(n, &p) == cudaSuccess &&
            cudaFuncGetName(&name, p.func) == cudaSuccess && name)
            return name;
        (void)cudaGetLastError();
        return "kernel";
    }
    case cudaGraphNodeTypeMemcpy: return "memcpy";
    case cudaGraphNodeTypeMemset: return "memset";
    case cudaGraphNodeTypeHost: return "host";
    case cudaGraphNodeTypeEventRecord: return "event record";
    case cudaGraphNodeTypeWaitEvent: return "event wait";
    default: return "other";
    }
}

/* Counts g's nodes and edges by kind; with `list`, prints each edge to it. */
static int count_edges(cudaGraph_t g, dev_cuda_edges *out, FILE *list)
{
    size_t nn = 0, ne = 0;
    int kp = out->pdl_made, kk = out->pdl_kept;
    memset(out, 0, sizeof *out);
    out->pdl_made = kp;
    out->pdl_kept = kk;
    if (cudaGraphGetNodes(g, NULL, &nn) != cudaSuccess) {
        (void)cudaGetLastError();
        return BATON_ECUDA;
    }
    if (cudaGraphGetEdges(g, NULL, NULL, NULL, &ne) != cudaSuccess) {
        (void)cudaGetLastError(); /* lossy without edge data: ask with room for plenty */
        ne = 0;
    }
    size_t cap = (ne > nn ? ne : nn) * 2 + 16;
    cudaGraphNode_t *nodes = calloc(nn + 1, sizeof *nodes);
    cudaGraphNode_t *from = calloc(cap, sizeof *from), *to = calloc(cap, sizeof *to);
    cudaGraphEdgeData *ed = calloc(cap, sizeof *ed);
    int rc = BATON_ECUDA;
    ne = cap;
    if (nodes && from && to && ed && cudaGraphGetNodes(g, nodes, &nn) == cudaSuccess &&
        cudaGraphGetEdges(g, from, to, ed, &ne) == cudaSuccess) {
        out->nodes = (int)nn;
        for (size_t i = 0; i < nn; i++) {
            enum cudaGraphNodeType t;
            out->kernels +=
                cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess && t == cudaGraphNodeTypeKernel;
        }
        out->edges = (int)(ne < cap ? ne : cap);
        for (int i = 0; i < out->edges; i++) {
            enum cudaGraphNodeType tf = cudaGraphNodeTypeEmpty, tt = cudaGraphNodeTypeEmpty;
            (void)cudaGraphNodeGetType(from[i], &tf);
            (void)cudaGraphNodeGetType(to[i], &tt);
            const int kk2 = tf == cudaGraphNodeTypeKernel && tt == cudaGraphNodeTypeKernel;
            const int prog = ed[i].type == cudaGraphDependencyTypeProgrammatic;
            out->programmatic += prog;
            out->kernel_default += kk2 && !prog;
            if (list) {
                int a = -1, b = -1;
                for (size_t k = 0; k < nn; k++) {
                    a = nodes[k] == from[i] ? (int)k : a;
                    b = nodes[k] == to[i] ? (int)k : b;
                }
                fprintf(list, "baton:   edge %d: node %d (%s) -> node %d (%s): %s, port %u\n", i, a,
                        node_label(from[i], tf), b, node_label(to[i], tt),
                        prog ? "programmatic" : "default", (unsigned)ed[i].from_port);
            }
        }
        rc = 0;
    }
    (void)cudaGetLastError();
    free(nodes), free(from), free(to), free(ed);
    return rc;
}

/* ---- the hot path ------------------------------------------------------------------------ */

static int cuda_call(dev_ctx *d, dev_call *c, baton_error *err)
{
    const char *step = c->ctx.step_name ? c->ctx.step_name : "?";
    if (d->capturing && d->capture_failed)
        return 0; /* nothing of a failed capture runs; capture_end() reports why */
    cudaError_t e = make_current(d);
    if (e != cudaSuccess)
        return cuda_reason(err, d, step, "cudaSetDevice", NULL, e);
    if (d->fault == DEV_CUDA_FAULT_LAUNCH) {
        d->fault = DEV_CUDA_FAULT_NONE;
        if (d->capturing)
            abandon_capture(d);
        return baton__err_set(err, BATON_ECUDA,
                              "kernel launch failed: cudaErrorLaunchOutOfResources: too many "
                              "resources requested for launch (injected fault)");
    }
    if (d->capturing && c->delegate && !c->delegate->capturable) {
        capture_failed(d, "step '%s' calls a delegate that cannot be captured", step);
        return 0;
    }
    c->ctx.capturing = d->capturing;
    cudaGraphNode_t before = NULL;
    c->ctx.pdl = c->pdl && c->kernel && pdl_may_follow(d, &before);
    if (c->ctx.errbuf && c->ctx.errbuf_len)
        c->ctx.errbuf[0] = 0;
#ifdef BATON_NVTX
    nvtxRangePushA(step);
#endif
    int rc;
    if (d->trace)
        baton__cupti_push(c->ctx.step_index); /* the device timeline names the step */
    if (c->kernel)
        rc = c->kernel(&c->ctx, c->buffers, c->opaque, c->opaque_len);
    else if (c->delegate && c->delegate->execute)
        rc = c->delegate->execute(c->state, &c->ctx, c->buffers);
    else
        rc = BATON_EINVAL;
    if (d->trace)
        baton__cupti_pop();
    e = cudaGetLastError();
#ifdef BATON_NVTX
    nvtxRangePop();
#endif
    const char *why = c->ctx.errbuf && c->ctx.errbuf[0] ? c->ctx.errbuf : NULL;
    if (d->capturing && (rc != 0 || e != cudaSuccess)) {
        /* A call that is illegal while capturing (a synchronisation, an allocation) invalidates
         * the capture: that is a segment that cannot be captured, not a failed step. Anything
         * else is the step's own failure. */
        enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
        cudaError_t qe = cudaStreamIsCapturing(d->stream, &st);
        if (is_capture_error(e) || qe != cudaSuccess || st == cudaStreamCaptureStatusInvalidated) {
            (void)cudaGetLastError();
            if (e != cudaSuccess)
                capture_failed(d, "step '%s': %s: %s%s%s", step, cudaGetErrorName(e),
                               cudaGetErrorString(e), why ? ": " : "", why ? why : "");
            else
                capture_failed(d, "step '%s' made a call that is illegal during capture%s%s", step,
                               why ? ": " : "", why ? why : "");
            return 0;
        }
        abandon_capture(d);
    }
    if (rc != 0)
        return baton__err_set(
            err, rc < 0 ? rc : BATON_EKERNEL, "%s",
            why ? why : (e != cudaSuccess ? cudaGetErrorString(e) : baton_strerror(rc)));
    if (e != cudaSuccess)
        return cuda_reason(err, d, step, c->kernel ? "kernel launch" : "delegate launch", NULL, e);
    if (before && c->ctx.pdl)
        pdl_note(d, before);
    /* baton's kernels end with a launch, and so does the cuBLASLt delegate; another kernel may
     * end with a copy. (While capturing, the node itself is asked.) */
    d->after_kernel = c->pdl || c->delegate;
    if (!d->capturing)
        d->counters.launches++;
    return 0;
}

/* Whether the copy kernel on d may read src: device memory of d's GPU or of a GPU whose memory
 * d reads directly (DEV_CUDA_PEER_KERNEL_ENV). */
static int peer_readable(const dev_ctx *d, const void *src)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, src) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice && a.device >= 0 && a.device < 64 &&
           (d->peers >> a.device & 1);
}

static int cuda_copy(dev_ctx *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind,
                     const char *what, baton_error *err)
{
    if (d->capturing && d->capture_failed)
        return 0;
    if (d->fault == DEV_CUDA_FAULT_COPY) {
        d->fault = DEV_CUDA_FAULT_NONE;
        if (d->capturing)
            abandon_capture(d);
        return cuda_reason(err, d, NULL, "cudaMemcpyAsync (injected fault)", what,
                           cudaErrorInvalidValue);
    }
    if (bytes == 0)
        return 0;
    cudaError_t e = make_current(d);
    /* Small copies to and from the (pinned) host arenas run as a kernel: no copy-engine hand-off
     * between the kernels around them (device_kernels.cu says what that saves); small copies from
     * a peer GPU too, with DEV_CUDA_PEER_KERNEL_ENV. */
    const int fits =
        bytes <= DEV_CUDA_COPY_KERNEL_MAX && (((uintptr_t)dst | (uintptr_t)src) & 15) == 0;
    const int small = fits && (kind != DEV_COPY_D2D ||
                               (d->peer_kernel && e == cudaSuccess && peer_readable(d, src)));
    const char *call = small ? "the copy kernel" : "cudaMemcpyAsync";
    cudaGraphNode_t before = NULL;
    const int pdl = small && e == cudaSuccess && d->pdl_copies && pdl_may_follow(d, &before);
    if (e == cudaSuccess)
        e = small
                ? baton__dev_cuda_copy_launch(d->stream, dst, src, bytes, kind == DEV_COPY_D2H, pdl)
                : cudaMemcpyAsync(dst, src, bytes, memcpy_kind(kind), d->stream);
    if (e != cudaSuccess) {
        if (d->capturing && is_capture_error(e)) {
            (void)cudaGetLastError();
            capture_failed(d, "%s (%s): %s: %s", call, what ? what : "copy", cudaGetErrorName(e),
                           cudaGetErrorString(e));
            return 0;
        }
        if (d->capturing)
            abandon_capture(d);
        (void)cudaGetLastError();
        return cuda_reason(err, d, NULL, call, what, e);
    }
    if (before && pdl)
        pdl_note(d, before);
    d->after_kernel = small;
    return 0;
}

static int bad_slot(baton_error *err, const dev_ctx *d, const char *what, int slot, int n)
{
    return baton__err_set(err, BATON_EINVAL,
                          "%s: %s slot %d out of range (the device was opened "
                          "with %d)",
                          d->name, what, slot, n);
}

/* An event node's failure during a capture: the segment then runs uncaptured, as for any op the
 * capture refused. */
static int capture_node_failed(dev_ctx *d, const char *call, cudaError_t e)
{
    (void)cudaGetLastError();
    capture_failed(d, "%s (an event node): %s: %s", call, cudaGetErrorName(e),
                   cudaGetErrorString(e));
    return 0;
}

static int cuda_record(dev_ctx *d, int slot, baton_error *err)
{
    if (slot < 0 || slot >= d->n_events)
        return bad_slot(err, d, "event", slot, d->n_events);
    if (d->capturing) {
        /* an event record node: each launch of the graph records the event there */
        if (d->capture_failed)
            return 0;
        cudaError_t e = make_current(d);
        if (e == cudaSuccess)
            e = cudaEventRecordWithFlags(d->events[slot], d->stream, cudaEventRecordExternal);
        return e == cudaSuccess ? 0 : capture_node_failed(d, "cudaEventRecordWithFlags", e);
    }
    cudaError_t e = cudaEventRecord(d->events[slot], d->stream);
    if (e != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaEventRecord", NULL, e);
    d->after_kernel = 0;
    return 0;
}

static int cuda_wait(dev_ctx *d, int slot, const char *where, baton_error *err)
{
    if (slot < 0 || slot >= d->n_events)
        return bad_slot(err, d, "event", slot, d->n_events);
    d->counters.host_waits++;
    d->after_kernel = 0; /* the stream may be handed to its caller's own work */
#ifdef BATON_NVTX
    nvtxRangePushA(where ? where : "wait");
#endif
    cudaError_t e;
    if (d->poll_us > 0) {
        const struct timespec nap = {0, (long)d->poll_us * 1000};
        while ((e = cudaEventQuery(d->events[slot])) == cudaErrorNotReady)
            nanosleep(&nap, NULL);
    } else {
        e = cudaEventSynchronize(d->events[slot]);
    }
#ifdef BATON_NVTX
    nvtxRangePop();
#endif
    if (e != cudaSuccess) {
        /* An error of earlier asynchronous work surfaces here; clear it if it can be cleared. */
        (void)cudaGetLastError();
        return cuda_reason(err, d, NULL, d->poll_us > 0 ? "cudaEventQuery" : "cudaEventSynchronize",
                           where, e);
    }
    return 0;
}

static void cuda_drain(dev_ctx *d)
{
    make_current(d);
    if (d->capturing)
        abandon_capture(d);
    cudaStreamSynchronize(d->stream);
    (void)cudaGetLastError();
    d->after_kernel = 0;
}

static int cuda_capture_begin(dev_ctx *d, int slot, baton_error *err)
{
    if (slot < 0 || slot >= d->n_graphs)
        return bad_slot(err, d, "graph", slot, d->n_graphs);
    if (d->capturing)
        return baton__err_set(err, BATON_ESTATE, "%s: a capture is already in progress (graph %d)",
                              d->name, d->capture_slot);
    cudaError_t e = make_current(d);
    if (e == cudaSuccess && !d->probe &&
        cudaStreamCreateWithFlags(&d->probe, cudaStreamNonBlocking) != cudaSuccess) {
        d->probe = NULL; /* rebinding this device's graphs then re-captures instead */
        (void)cudaGetLastError();
    }
    /* Thread-local: another thread's CUDA calls cannot spoil this capture, and an illegal call
     * made by a kernel or delegate on this thread is caught. */
    if (e == cudaSuccess)
        e = cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cuda_reason(err, d, NULL, "cudaStreamBeginCapture", NULL, e);
    }
    d->capturing = 1;
    d->capture_slot = slot;
    d->capture_failed = 0;
    d->capture_reason[0] = 0;
    d->n_pdl = 0; /* the graph's first node follows nothing inside it */
    baton__rb_set_free(d->cap.set);
    baton__rb_capture_begin(&d->cap);
    if (d->fault == DEV_CUDA_FAULT_CAPTURE) {
        d->fault = DEV_CUDA_FAULT_NONE;
        e = cudaStreamSynchronize(d->stream); /* illegal while capturing: invalidates it */
        (void)cudaGetLastError();
        capture_failed(d, "cudaStreamSynchronize during capture (injected fault): %s: %s",
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return 0;
}

/* BATON_GRAPH_EDGES=1 prints, for each capture, its nodes and edges by kind and what the device
 * did to the PDL calls' edges; BATON_GRAPH_EDGES=2 also lists every edge. Kernel-to-kernel edges
 * of the default type are full serialisations (no PDL overlap). */
static void report_graph(dev_ctx *d, int slot, cudaGraph_t g)
{
    static _Atomic int level = -1;
    if (level < 0) {
        const char *env = getenv("BATON_GRAPH_EDGES");
        level = env && *env >= '1' && *env <= '9' ? *env - '0' : 0;
    }
    d->edges_slot = slot;
    if (!level || count_edges(g, &d->edges, NULL))
        return;
    const dev_cuda_edges *e = &d->edges;
    fprintf(stderr,
            "baton: %s graph %d captured: %d nodes (%d kernels), %d edges: %d programmatic, %d "
            "kernel-to-kernel of the default type; PDL edges: %d captured as programmatic, %d "
            "made programmatic by the device\n",
            d->name, slot, e->nodes, e->kernels, e->edges, e->programmatic, e->kernel_default,
            e->pdl_kept, e->pdl_made);
    if (level >= 2) {
        dev_cuda_edges tmp = *e;
        count_edges(g, &tmp, stderr);
    }
}

/* BATON_GRAPH_DOT=DIR: writes graph g of `slot` to DIR/cuda0-graph3.dot. The contexts opened on
 * the same GPU after the first (a pool's other instances, other runtimes) add their number,
 * cuda0.1-graph3.dot, so that no two threads write one file. */
static void dot_graph(dev_ctx *d, int slot, cudaGraph_t g)
{
    const char *dir = getenv(DEV_CUDA_GRAPH_DOT_ENV);
    if (!dir || !*dir)
        return;
    char path[4096], ctx[16] = "";
    if (d->serial)
        snprintf(ctx, sizeof ctx, ".%d", d->serial);
    snprintf(path, sizeof path, "%s/cuda%d%s-graph%d.dot", dir, d->dev.index, ctx, slot);
    cudaError_t e = cudaGraphDebugDotPrint(g, path, cudaGraphDebugDotFlagsVerbose);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "baton: %s graph %d: cudaGraphDebugDotPrint(%s) failed: %s: %s\n", d->name,
                slot, path, cudaGetErrorName(e), cudaGetErrorString(e));
        return;
    }
    fprintf(stderr, "baton: %s graph %d written to %s\n", d->name, slot, path);
}

int baton__dev_cuda_graph_edges(dev_ctx *d, int slot, dev_cuda_edges *out)
{
    memset(out, 0, sizeof *out);
    if (slot < 0 || slot >= d->n_graphs || !d->templates[slot])
        return BATON_ENOTSUP;
    if (slot == d->edges_slot) {
        out->pdl_made = d->edges.pdl_made;
        out->pdl_kept = d->edges.pdl_kept;
    }
    if (make_current(d) != cudaSuccess) {
        (void)cudaGetLastError();
        return BATON_ECUDA;
    }
    return count_edges(d->templates[slot], out, NULL);
}

int baton__dev_cuda_graph(dev_ctx *d, int slot, cudaGraphExec_t *exec, cudaGraph_t *graph,
                          cudaStream_t *stream)
{
    const int ok = slot >= 0 && slot < d->n_graphs;
    *exec = ok ? d->graphs[slot] : NULL;
    *graph = ok ? d->templates[slot] : NULL;
    *stream = d->stream;
    return d->n_graphs;
}

static int cuda_capture_end(dev_ctx *d, int slot, int *updated, baton_error *err)
{
    if (updated)
        *updated = 0;
    if (!d->capturing)
        return baton__err_set(err, BATON_ESTATE, "%s: no capture in progress", d->name);
    if (slot != d->capture_slot) {
        abandon_capture(d);
        return baton__err_set(err, BATON_EINVAL, "%s: capture of graph %d ended as graph %d",
                              d->name, d->capture_slot, slot);
    }
    rb_set *ops = baton__rb_capture_end(&d->cap, d->stream);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(d->stream, &g);
    d->capturing = 0;
    d->after_kernel = 0;
    if (d->capture_failed || e != cudaSuccess || !g) {
        d->n_pdl = 0;
        baton__rb_set_free(ops);
        if (g)
            cudaGraphDestroy(g);
        (void)cudaGetLastError();
        d->capture_failed = 0;
        if (d->capture_reason[0])
            return baton__err_set(err, BATON_ENOTSUP,
                                  "%s: the segment cannot be captured into a "
                                  "CUDA graph: %s",
                                  d->name, d->capture_reason);
        return baton__err_set(err, BATON_ENOTSUP,
                              "%s: the segment cannot be captured into a CUDA "
                              "graph: cudaStreamEndCapture: %s: %s",
                              d->name, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    pdl_apply(d, g);
    report_graph(d, slot, g);
    if (d->graphs[slot]) {
        /* Same topology, new addresses or parameters: patch the executable graph in place,
         * which costs a fraction of a new instantiation. */
        cudaGraphExecUpdateResultInfo info;
        memset(&info, 0, sizeof info);
        e = cudaGraphExecUpdate(d->graphs[slot], g, &info);
        if (e == cudaSuccess) {
            /* The executable graph's nodes stay those of its template, which the new capture's
             * nodes cannot name: from now on its ops are patched by capturing again. */
            dot_graph(d, slot, g);
            cudaGraphDestroy(g);
            baton__rb_set_free(ops);
            baton__rb_set_free(d->rebind[slot]);
            d->rebind[slot] = NULL;
            if (updated)
                *updated = 1;
            return 0;
        }
        (void)cudaGetLastError(); /* refused (topology changed): instantiate anew */
        cuda_graph_reset(d, slot);
    }
    cudaGraphExec_t x = NULL;
    if (d->fault == DEV_CUDA_FAULT_INSTANTIATE) {
        d->fault = DEV_CUDA_FAULT_NONE;
        e = cudaErrorInvalidValue;
    } else {
        e = cudaGraphInstantiate(&x, g, 0);
    }
    if (e != cudaSuccess) {
        cudaGraphDestroy(g);
        baton__rb_set_free(ops);
        (void)cudaGetLastError();
        char what[32];
        snprintf(what, sizeof what, "graph %d", slot);
        return cuda_reason(err, d, NULL, "cudaGraphInstantiate", what, e);
    }
    /* Moves the graph's setup to now, so that the first replay costs what the others do. */
    if ((e = cudaGraphUpload(x, d->stream)) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaGraphExecDestroy(x);
        cudaGraphDestroy(g);
        baton__rb_set_free(ops);
        return cuda_reason(err, d, NULL, "cudaGraphUpload", NULL, e);
    }
    dot_graph(d, slot, g);
    /* the template stays: cudaGraphExec*SetParams name its nodes */
    d->graphs[slot] = x;
    d->templates[slot] = g;
    d->rebind[slot] = ops;
    return 0;
}

static int cuda_graph_launch(dev_ctx *d, int slot, baton_error *err)
{
    if (slot < 0 || slot >= d->n_graphs)
        return bad_slot(err, d, "graph", slot, d->n_graphs);
    if (!d->graphs[slot])
        return baton__err_set(err, BATON_ESTATE, "%s: graph %d has not been captured", d->name,
                              slot);
    char what[48];
    if (d->fault == DEV_CUDA_FAULT_LAUNCH) {
        d->fault = DEV_CUDA_FAULT_NONE;
        snprintf(what, sizeof what, "graph %d, injected fault", slot);
        return cuda_reason(err, d, NULL, "cudaGraphLaunch", what, cudaErrorLaunchOutOfResources);
    }
    cudaError_t e = make_current(d);
    if (e == cudaSuccess)
        e = cudaGraphLaunch(d->graphs[slot], d->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(what, sizeof what, "graph %d", slot);
        return cuda_reason(err, d, NULL, "cudaGraphLaunch", what, e);
    }
    d->counters.graph_launches++;
    d->after_kernel = 0; /* a graph's last node is not a launch the next kernel can follow */
    return 0;
}

static void cuda_graph_reset(dev_ctx *d, int slot)
{
    if (slot < 0 || slot >= d->n_graphs)
        return;
    if (d->graphs[slot])
        cudaGraphExecDestroy(d->graphs[slot]);
    if (d->templates[slot])
        cudaGraphDestroy(d->templates[slot]);
    baton__rb_set_free(d->rebind[slot]);
    d->graphs[slot] = NULL;
    d->templates[slot] = NULL;
    d->rebind[slot] = NULL;
}

static int cuda_trace_attach(dev_ctx *d, dev_trace *t, baton_error *err)
{
    if (d->trace)
        baton__cupti_detach(d->trace);
    d->trace = NULL;
    if (!t)
        return 0;
    int rc = baton__cupti_attach(d->stream, t, err);
    if (!rc)
        d->trace = t;
    return rc;
}

static void cuda_trace_sync(dev_ctx *d)
{
    if (!d->trace)
        return;
    make_current(d);
    cudaStreamSynchronize(d->stream);
    (void)cudaGetLastError();
    baton__cupti_sync(d->trace);
}

static void cuda_capture_tag(dev_ctx *d, int tag)
{
    /* BATON_NO_CAPTURE_TAGS=1 (diagnostic, issue 43): no capture-info queries between a
     * segment's ops while capturing; rebinding its buffers then captures again instead of
     * patching. To measure whether the queries cost graph mode its PDL overlap. */
    static _Atomic int off = -1;
    if (off < 0) {
        const char *env = getenv("BATON_NO_CAPTURE_TAGS");
        off = env && *env && *env != '0';
    }
    if (d->capturing && !d->capture_failed && !off)
        baton__rb_capture_tag(&d->cap, d->stream, tag);
}

static int cuda_graph_rebind(dev_ctx *d, int slot, int tag, const dev_call *c, void *dst,
                             const void *src, size_t bytes, dev_copy_kind kind, baton_error *err)
{
    if (slot < 0 || slot >= d->n_graphs || !d->graphs[slot])
        return baton__err_set(err, BATON_ENOTSUP, "%s: graph %d is not captured", d->name, slot);
    if (!d->probe)
        return baton__err_set(err, BATON_ENOTSUP, "%s: no stream to learn the graph's nodes on",
                              d->name);
    cudaError_t e = make_current(d);
    if (e != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaSetDevice", NULL, e);
    return baton__rb_rebind(d->rebind[slot], d->graphs[slot], d->probe, tag, c, dst, src, bytes,
                            kind, err);
}

/* Memory a caller hands baton: device memory of this GPU, or pinned host memory that the GPU
 * reaches at the same address (the copy kernel reads and writes it directly). */
static int cuda_mem_check(dev_ctx *d, const void *p, size_t bytes, int host, baton_error *err)
{
    (void)bytes;
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return baton__err_set(err, BATON_EINVAL, "cudaPointerGetAttributes(%p) failed: %s", p,
                              cudaGetErrorString(e));
    }
    if (host) {
        if (a.type != cudaMemoryTypeHost || a.devicePointer != p)
            return baton__err_set(err, BATON_EINVAL,
                                  "host memory at %p is not pinned and mapped; allocate it with "
                                  "cudaHostAlloc (or cudaMallocHost), or register it with "
                                  "cudaHostRegister(..., cudaHostRegisterMapped): pageable memory "
                                  "cannot be copied asynchronously or inside a CUDA graph",
                                  p);
        return 0;
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return baton__err_set(
            err, BATON_EINVAL,
            "memory at %p is not device memory; allocate it with cudaMalloc with %s "
            "current",
            p, d->name);
    if (a.device != d->dev.index)
        return baton__err_set(err, BATON_EINVAL, "memory at %p is on cuda:%d, not on %s", p,
                              a.device, d->name);
    return 0;
}

static int cuda_supports_pdl(dev_ctx *d)
{
    return d->pdl;
}

void baton__dev_cuda_counters(dev_ctx *d, dev_counters *out)
{
    *out = d->counters;
}

static void cuda_counters(dev_ctx *d, struct dev_counters *out)
{
    baton__dev_cuda_counters(d, out);
}

#ifdef BATON_TESTING
void baton__dev_cuda_inject_fault(dev_ctx *d, int what)
{
    d->fault = what;
}
#endif

#ifdef BATON_TESTING
/* The runtime's generic faults, as the CUDA device makes them happen. */
static void cuda_inject(dev_ctx *d, dev_fault fault)
{
    switch (fault) {
    case DEV_FAULT_ALLOC: d->fault = DEV_CUDA_FAULT_ALLOC; break;
    case DEV_FAULT_LAUNCH: d->fault = DEV_CUDA_FAULT_LAUNCH; break;
    case DEV_FAULT_CAPTURE: d->fault = DEV_CUDA_FAULT_CAPTURE; break;
    case DEV_FAULT_COPY: d->fault = DEV_CUDA_FAULT_COPY; break;
    default: d->fault = DEV_CUDA_FAULT_NONE; break;
    }
}
#endif

static int cuda_can_gate(dev_ctx *d)
{
    return d->gate != NULL;
}

/* Queues the gate kernel: it waits for the flag to read 1, then sets it back to 0 (in stream
 * order, so the host's next opening, which follows a wait for later work, cannot be lost). */
static int cuda_gate_wait(dev_ctx *d, baton_error *err)
{
    if (!d->gate)
        return baton__err_set(err, BATON_ENOTSUP, "%s: no gate (no mapped pinned memory)", d->name);
    cudaError_t e = make_current(d);
    if (e == cudaSuccess)
        e = baton__dev_cuda_gate_launch(d->stream, d->gate_dev);
    if (e != cudaSuccess) {
        if (d->capturing)
            capture_failed(d, "the gate kernel could not be captured: %s", cudaGetErrorString(e));
        return cuda_reason(err, d, NULL, "cudaLaunchKernel", "the gate kernel", e);
    }
    d->after_kernel = 1; /* what follows waits for the gate's grid to finish, as for any kernel */
    return 0;
}

/* The host's writes before this store (the CPU segment's outputs in pinned memory) are visible
 * to the GPU before the flag is: x86 keeps stores in order, and the release keeps the compiler
 * from moving them. */
static void cuda_gate_open(dev_ctx *d)
{
    if (d->gate)
        __atomic_store_n((unsigned *)d->gate, 1u, __ATOMIC_RELEASE);
}

/* ---- several GPUs ---------------------------------------------------------------------------- */

static int cuda_stream_wait(dev_ctx *d, dev_ctx *other, int slot, baton_error *err)
{
    if (slot < 0 || slot >= other->n_events)
        return bad_slot(err, other, "event", slot, other->n_events);
    if (d->capturing) {
        /* an event wait node: each launch of the graph waits there for the record of the other
         * GPU's event that was issued before the launch */
        if (d->capture_failed)
            return 0;
        cudaError_t e = make_current(d);
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent(d->stream, other->events[slot], cudaEventWaitExternal);
        return e == cudaSuccess ? 0 : capture_node_failed(d, "cudaStreamWaitEvent", e);
    }
    cudaError_t e = cudaStreamWaitEvent(d->stream, other->events[slot], 0);
    if (e != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaStreamWaitEvent", other->name, e);
    d->counters.peer_waits++;
    d->after_kernel = 0;
    return 0;
}

/* Lets d's context read and write other's memory directly (NVLink or PCIe peer-to-peer) where
 * the GPUs allow it. Without it a cudaMemcpyDefault copy between two GPUs is staged through the
 * host by the driver: on two H200s joined by NVLink it ran at 36-38 GB/s instead of ~390. The
 * runtime calls it both ways for each pair a transfer joins, so a copy issued on either GPU's
 * stream takes the direct path. The caller's current device is left as it was. */
static int cuda_peer_enable(dev_ctx *d, dev_ctx *other, baton_error *err)
{
    int can = 0;
    if (d->dev.index == other->dev.index)
        return 0; /* one GPU twice (the runtime's test alias) */
    cudaError_t e = cudaDeviceCanAccessPeer(&can, d->dev.index, other->dev.index);
    if (e != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaDeviceCanAccessPeer", other->name, e);
    if (!can)
        return 0; /* no peer path between them: copies go through the host */
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) {
        (void)cudaGetLastError();
        prev = -1;
    }
    if ((e = cudaSetDevice(d->dev.index)) == cudaSuccess)
        e = cudaDeviceEnablePeerAccess(other->dev.index, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError(); /* enabled by another runtime of this process: fine */
        e = cudaSuccess;
    }
    if (prev >= 0 && prev != d->dev.index)
        (void)cudaSetDevice(prev);
    if (e != cudaSuccess) {
        char what[64];
        snprintf(what, sizeof what, "%s reading %s", d->name, other->name);
        (void)cudaGetLastError();
        return cuda_reason(err, d, NULL, "cudaDeviceEnablePeerAccess", what, e);
    }
    if (other->dev.index < 64)
        d->peers |= 1ull << other->dev.index;
    return 0;
}

static int cuda_coll_prepare(dev_coll *c, baton_error *err)
{
    int ordinals[DEV_MAX_GROUP];
    for (int k = 0; k < c->n; k++)
        ordinals[k] = c->group[k]->dev.index;
    return baton__nccl_comms_create(c->n, ordinals, &c->impl, err);
}

static int cuda_coll_run(dev_coll *c, baton_error *err)
{
    cudaStream_t streams[DEV_MAX_GROUP];
    for (int k = 0; k < c->n; k++) {
        if (c->group[k]->capturing)
            return baton__err_set(err, BATON_EINVAL, "a collective inside a capture");
        streams[k] = c->group[k]->stream;
        c->group[k]->counters.launches++;
        c->group[k]->after_kernel = 0; /* NCCL's work: no PDL after it */
    }
    return baton__nccl_run(c->impl, c, streams, err);
}

static void cuda_coll_release(dev_coll *c)
{
    baton__nccl_comms_destroy(c->impl, c->n);
    c->impl = NULL;
}

/* ---- one process per GPU: NCCL's communicator of this rank (nccl.c) ---------------------- */

static int cuda_world_join(dev_ctx *d, const unsigned char *id, int rank, int world, int timeout_ms,
                           void **out, baton_error *err)
{
    (void)timeout_ms; /* NCCL's init waits for the other ranks itself */
    cudaError_t e = make_current(d);
    if (e != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaSetDevice", NULL, e);
    return baton__nccl_world_join(id, rank, world, out, err);
}

/* Sends, receives and collectives between ranks run on the stream, outside any graph. */
static int world_ready(dev_ctx *d, baton_error *err)
{
    if (d->capturing)
        return baton__err_set(err, BATON_EINVAL,
                              "%s: a send, receive or collective between ranks inside a capture",
                              d->name);
    cudaError_t e = make_current(d);
    if (e != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaSetDevice", NULL, e);
    d->counters.launches++;
    return 0;
}

static int cuda_world_send(void *w, dev_ctx *d, const void *src, size_t bytes, int peer,
                           baton_error *err)
{
    int rc = world_ready(d, err);
    return rc ? rc : baton__nccl_world_move(w, (void *)src, bytes, peer, 1, d->stream, err);
}

static int cuda_world_recv(void *w, dev_ctx *d, void *dst, size_t bytes, int peer, baton_error *err)
{
    int rc = world_ready(d, err);
    return rc ? rc : baton__nccl_world_move(w, dst, bytes, peer, 0, d->stream, err);
}

static int cuda_world_coll(void *w, dev_ctx *d, const dev_coll *c, int rank, baton_error *err)
{
    int rc = world_ready(d, err);
    return rc ? rc : baton__nccl_world_coll(w, c, rank, d->stream, err);
}

/* Tunes at prepare: the stream is idle and nothing is being captured. */
static int cuda_tune(dev_ctx *d, dev_call *c, kernel_tune_fn tune, char *note, size_t note_len,
                     baton_error *err)
{
    cudaError_t e = make_current(d);
    if (e != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaSetDevice", NULL, e);
    if (d->capturing)
        return baton__err_set(err, BATON_ESTATE,
                              "%s: cannot tune while a segment is being captured", d->name);
    if (c->ctx.errbuf && c->ctx.errbuf_len)
        c->ctx.errbuf[0] = 0;
    c->ctx.capturing = 0;
    int rc = tune(&c->ctx, c->buffers, c->opaque, c->opaque_len, note, note_len);
    if (rc)
        return baton__err_set(
            err, rc, "%s", c->ctx.errbuf && c->ctx.errbuf[0] ? c->ctx.errbuf : baton_strerror(rc));
    if ((e = cudaStreamSynchronize(d->stream)) != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaStreamSynchronize", "after tuning", e);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return cuda_reason(err, d, NULL, "a kernel launch", "while tuning", e);
    return 0;
}

static int cuda_prepare_call(dev_ctx *d, dev_call *c, kernel_prepare_fn prepare, void **state,
                             baton_error *err)
{
    *state = NULL;
    cudaError_t e = make_current(d);
    if (e != cudaSuccess)
        return cuda_reason(err, d, NULL, "cudaSetDevice", NULL, e);
    if (c->ctx.errbuf && c->ctx.errbuf_len)
        c->ctx.errbuf[0] = 0;
    int rc = prepare(&c->ctx, c->buffers, c->opaque, c->opaque_len, state);
    if (rc)
        return baton__err_set(
            err, rc, "%s", c->ctx.errbuf && c->ctx.errbuf[0] ? c->ctx.errbuf : baton_strerror(rc));
    return 0;
}

const dev_ops baton__dev_cuda_ops = {
    .name = "cuda",
    .label = "GPU",
    .caps = DEV_CAP_ASYNC | DEV_CAP_DEVICE_MEMORY | DEV_CAP_CALLER_STREAM | DEV_CAP_EVENT_NODES,
    .open = cuda_open,
    .close = cuda_close,
    .stream = cuda_stream,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy_sync = cuda_copy_sync,
    .stage_uploads = cuda_stage_uploads,
    .call = cuda_call,
    .copy = cuda_copy,
    .record = cuda_record,
    .wait = cuda_wait,
    .drain = cuda_drain,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_reset = cuda_graph_reset,
    .can_gate = cuda_can_gate,
    .gate_wait = cuda_gate_wait,
    .gate_open = cuda_gate_open,
    .supports_pdl = cuda_supports_pdl,
    .counters = cuda_counters,
    .mem_check = cuda_mem_check,
    .capture_tag = cuda_capture_tag,
    .graph_rebind = cuda_graph_rebind,
    .trace_attach = cuda_trace_attach,
    .trace_sync = cuda_trace_sync,
    .tune = cuda_tune,
    .prepare_call = cuda_prepare_call,
#ifdef BATON_TESTING
    .inject = cuda_inject,
#endif
    .stream_wait = cuda_stream_wait,
    .peer_enable = cuda_peer_enable,
    .coll_prepare = cuda_coll_prepare,
    .coll_run = cuda_coll_run,
    .coll_release = cuda_coll_release,
    .world_id = baton__nccl_world_id,
    .world_join = cuda_world_join,
    .world_leave = baton__nccl_world_leave,
    .world_send = cuda_world_send,
    .world_recv = cuda_world_recv,
    .world_coll = cuda_world_coll,
};

int baton_cuda_built(void)
{
    return 1;
}

int baton_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}
