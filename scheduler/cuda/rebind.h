/* rebind.h: patching an executable CUDA graph when a caller's buffer moves (baton_runtime_bind).
 * While a segment is captured, the nodes each op (a step's call, a transfer) adds are recorded
 * under its tag. When the op's addresses change, its kernel nodes get new parameters through
 * cudaGraphExecKernelNodeSetParams and its memcpy nodes through
 * cudaGraphExecMemcpyNodeSetParams1D: no capture, no instantiation. Private to scheduler/cuda/. */
#ifndef BATON_SCHEDULER_CUDA_REBIND_H
#define BATON_SCHEDULER_CUDA_REBIND_H

#include <cuda_runtime.h>

#include "scheduler/device.h"

/* The ops of one captured graph and the nodes each added. */
typedef struct rb_set rb_set;

/* Capture-time state: the op being issued and where the graph stood before it. */
typedef struct rb_capture {
    rb_set *set;
    int tag;
    cudaGraphNode_t before; /* the capture's single leaf node before the op, or NULL */
    int broken;             /* the capture's dependencies could not be followed */
} rb_capture;

/* At capture begin, at each tagged op, and at capture end (which returns the set, or NULL when
 * nothing could be recorded; the caller owns it). The stream is the one being captured. */
void baton__rb_capture_begin(rb_capture *cap);
void baton__rb_capture_tag(rb_capture *cap, cudaStream_t stream, int tag);
rb_set *baton__rb_capture_end(rb_capture *cap, cudaStream_t stream);
void baton__rb_set_free(rb_set *set);

/* Points op `tag`'s nodes in `exec` (instantiated from the graph the set was recorded in) at new
 * addresses: the call c's buffers, or a copy's dst and src (c NULL). `probe` is an idle stream of
 * the same device, used once per op to learn where its kernels keep each address (two captures
 * that are never launched). BATON_ENOTSUP, with the reason in err, when the op cannot be patched
 * (a library kernel whose parameters are opaque, a node of another kind): capture again. */
int baton__rb_rebind(rb_set *set, cudaGraphExec_t exec, cudaStream_t probe, int tag,
                     const dev_call *c, void *dst, const void *src, size_t bytes,
                     dev_copy_kind kind, baton_error *err);

#endif /* BATON_SCHEDULER_CUDA_REBIND_H */
