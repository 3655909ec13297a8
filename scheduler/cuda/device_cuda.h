/* device_cuda.h: what the CUDA device (device_cuda.c) offers beyond the dev_ops table: its
 * counters and a failure injector, so that the runtime's fault tests can make the next
 * allocation, launch or capture fail for real on a GPU. Include only in BATON_CUDA builds. */
#ifndef BATON_SCHEDULER_DEVICE_CUDA_H
#define BATON_SCHEDULER_DEVICE_CUDA_H

#include <cuda_runtime.h>

#include "scheduler/device.h"

/* What baton__dev_cuda_inject_fault() makes fail, once; the next matching call consumes it. The
 * generic dev_ops.inject maps DEV_FAULT_ALLOC, _LAUNCH, _CAPTURE and _COPY onto the faults of the
 * same names here; DEV_CUDA_FAULT_INSTANTIATE is reachable only through this header. */
typedef enum dev_cuda_fault {
    DEV_CUDA_FAULT_NONE = 0,
    /* The next alloc() asks cudaMalloc for more memory than any GPU has: a real
     * cudaErrorMemoryAllocation, which the device clears so the context stays usable. */
    DEV_CUDA_FAULT_ALLOC = 1,
    /* The next call() or graph_launch() fails before anything is issued, reported as
     * cudaErrorLaunchOutOfResources (the step does not run). */
    DEV_CUDA_FAULT_LAUNCH = 2,
    /* The next capture_begin() makes an illegal call (cudaStreamSynchronize) inside the capture,
     * which invalidates it for real: calls made during the capture are not issued, and
     * capture_end() returns BATON_ENOTSUP with the reason; the stream stays usable. */
    DEV_CUDA_FAULT_CAPTURE = 3,
    /* The next capture_end() fails to instantiate the captured graph (BATON_ECUDA, reported as
     * cudaErrorInvalidValue); the graph slot is left empty. */
    DEV_CUDA_FAULT_INSTANTIATE = 4,
    /* The next copy() fails before anything is issued (BATON_ECUDA, as cudaErrorInvalidValue). */
    DEV_CUDA_FAULT_COPY = 5
} dev_cuda_fault;

/* Arms one fault on a context opened with baton__dev_cuda_ops (undefined for other devices). A
 * second call replaces the first; DEV_CUDA_FAULT_NONE disarms. */
#ifdef BATON_TESTING /* test hooks exist only in testing builds (-DBATON_TESTING=ON) */
void baton__dev_cuda_inject_fault(dev_ctx *d, int what);
#endif

/* What a captured graph holds, as BATON_GRAPH_EDGES=1 prints it: its nodes and kernel nodes, its
 * edges, the programmatic ones (kernel to kernel, PDL), the kernel-to-kernel edges of the default
 * type (full serialisation), and how many of the PDL calls' edges the capture had left default
 * and the device made programmatic (pdl_made) or found programmatic already (pdl_kept). */
typedef struct dev_cuda_edges {
    int nodes, kernels, edges, programmatic, kernel_default;
    int pdl_made, pdl_kept;
} dev_cuda_edges;

/* The edges of graph `slot` as last captured; BATON_ENOTSUP when the slot holds no graph. */
int baton__dev_cuda_graph_edges(dev_ctx *d, int slot, dev_cuda_edges *out);

/* Graph `slot`'s executable graph and the graph it was instantiated from (both NULL when the slot
 * holds none) and the stream the runtime launches it on, for a benchmark that times the launch
 * without the runtime around it (bench_graph_launch). Returns how many graph slots d has. */
int baton__dev_cuda_graph(dev_ctx *d, int slot, cudaGraphExec_t *exec, cudaGraph_t *graph,
                          cudaStream_t *stream);

/* The context's counters since it was opened (baton__dev_cuda_ops.counters does the same). */
void baton__dev_cuda_counters(dev_ctx *d, dev_counters *out);

/* The device's own kernels (device_kernels.cu). baton__dev_cuda_gate_launch: a kernel that waits
 * until *flag (mapped pinned memory, as the device sees it) is 1, then sets it back to 0.
 * baton__dev_cuda_copy_launch: copies `bytes` between pinned host memory and the device (to_host:
 * dst is the host side), both 16-byte aligned, as a programmatic dependent launch when pdl (only
 * right after a kernel on the stream). Each returns the launch's error, if any. */
#ifdef __cplusplus
extern "C" {
#endif
cudaError_t baton__dev_cuda_gate_launch(void *stream, volatile unsigned *flag);
cudaError_t baton__dev_cuda_copy_launch(void *stream, void *dst, const void *src, size_t bytes,
                                        int to_host, int pdl);
#ifdef __cplusplus
}
#endif

#endif /* BATON_SCHEDULER_DEVICE_CUDA_H */
