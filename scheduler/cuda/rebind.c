/* rebind.c: patching an executable CUDA graph when a caller's buffer moves (rebind.h).
 *
 * A kernel node's parameters are an opaque block: baton cannot know which bytes of a custom
 * call's parameters are buffer addresses, or whether a kernel receives buffers[k] + offset. So
 * the first time an op is rebound, it is captured twice on an idle stream, never launched: once
 * with its current addresses and once with every address k moved by a distinct large delta.
 * The parameter bytes that differ by exactly delta(k) hold buffer k (plus a fixed offset); any
 * other difference means the op cannot be patched this way. From then on a rebind writes the new
 * addresses into a saved copy of the parameters and calls cudaGraphExecKernelNodeSetParams, which
 * costs about a microsecond per node. Whole-segment re-capture with cudaGraphExecUpdate remains
 * the fallback (bench/cuda/bench_bind.c compares the two). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "scheduler/cuda/device_cuda.h"
#include "scheduler/cuda/rebind.h"

#define RB_MAX_NODES 8 /* nodes one op may add and still be patched */
#define RB_MAX_BUFS  CORE_MAX_STEP_ARGS

typedef struct rb_fix {
    size_t off;   /* where in the parameter block */
    int buf;      /* which buffer of the op */
    intptr_t add; /* the kernel receives buffers[buf] + add */
} rb_fix;

typedef struct rb_node {
    cudaGraphNode_t node; /* in the graph the executable graph was instantiated from */
    enum cudaGraphNodeType type;
    struct cudaKernelNodeParams kp; /* kernel nodes, once learnt: kernelParams point into blob */
    void **args;
    unsigned char *blob;
    rb_fix *fix;
    int n_fix;
} rb_node;

typedef struct rb_op {
    int tag;
    int n;       /* nodes, or -1 when they could not be told apart */
    int learned; /* 0 not yet, 1 the kernel nodes' maps are known, -1 cannot be patched */
    rb_node nodes[RB_MAX_NODES];
} rb_op;

struct rb_set {
    rb_op *ops;
    int n, cap;
};

/* The delta that marks buffer k in a probe: far beyond any offset a kernel adds to a buffer. */
static uintptr_t delta(int k)
{
    return (uintptr_t)(k + 1) << 36;
}

/* The single node the capture's next op will depend on, or NULL (none yet, or several). */
static cudaGraphNode_t leaf(cudaStream_t s, int *several)
{
    enum cudaStreamCaptureStatus st;
    const cudaGraphNode_t *deps = NULL;
    const cudaGraphEdgeData *edges = NULL; /* asked for, or a programmatic edge (PDL) makes the
                                            * query lossy and it fails */
    size_t n = 0;
    if (cudaStreamGetCaptureInfo(s, &st, NULL, NULL, &deps, &edges, &n) != cudaSuccess) {
        (void)cudaGetLastError();
        *several = 1;
        return NULL;
    }
    *several = n > 1;
    return n == 1 ? deps[0] : NULL;
}

/* The chain of nodes from `last` back to (not including) `before`, in creation order: an op on
 * one stream adds a chain. -1 when it is not a chain or is too long. */
static int chain(cudaGraphNode_t last, cudaGraphNode_t before, cudaGraphNode_t *out)
{
    cudaGraphNode_t back[RB_MAX_NODES];
    int n = 0;
    for (cudaGraphNode_t node = last; node && node != before;) {
        if (n == RB_MAX_NODES)
            return -1;
        back[n++] = node;
        /* with edge data, in one query: a query without it fails (is lossy) on the
         * programmatic edges of PDL launches; room for two tells one dependency from several */
        cudaGraphNode_t deps[2] = {NULL, NULL};
        cudaGraphEdgeData edges[2];
        size_t nd = 2;
        if (cudaGraphNodeGetDependencies(node, deps, edges, &nd) != cudaSuccess || nd > 1) {
            (void)cudaGetLastError();
            return -1;
        }
        cudaGraphNode_t dep = nd == 1 ? deps[0] : NULL;
        if (!dep && before)
            return -1; /* ran past the op before without meeting it */
        node = dep;
    }
    for (int i = 0; i < n; i++)
        out[i] = back[n - 1 - i];
    return n;
}

void baton__rb_capture_begin(rb_capture *cap)
{
    cap->set = calloc(1, sizeof *cap->set); /* NULL: nothing recorded, rebinds re-capture */
    cap->tag = -1;
    cap->before = NULL;
    cap->broken = 0;
}

/* Records the nodes the op in progress added. */
static void close_op(rb_capture *cap, cudaStream_t s)
{
    int several = 0;
    cudaGraphNode_t last = leaf(s, &several);
    if (cap->tag >= 0 && cap->set) {
        rb_set *set = cap->set;
        if (set->n == set->cap) {
            int nc = set->cap ? set->cap * 2 : 32;
            rb_op *no = realloc(set->ops, (size_t)nc * sizeof *no);
            if (!no) {
                baton__rb_set_free(set);
                cap->set = NULL;
                return;
            }
            set->ops = no;
            set->cap = nc;
        }
        rb_op *op = &set->ops[set->n++];
        memset(op, 0, sizeof *op);
        op->tag = cap->tag;
        cudaGraphNode_t nodes[RB_MAX_NODES];
        op->n = cap->broken || several ? -1
                : last == cap->before  ? 0
                                       : chain(last, cap->before, nodes);
        for (int i = 0; i < op->n; i++) {
            op->nodes[i].node = nodes[i];
            if (cudaGraphNodeGetType(nodes[i], &op->nodes[i].type) != cudaSuccess) {
                (void)cudaGetLastError();
                op->n = -1;
            }
        }
    }
    cap->broken = several;
    cap->before = last;
}

void baton__rb_capture_tag(rb_capture *cap, cudaStream_t stream, int tag)
{
    close_op(cap, stream);
    cap->tag = tag;
}

rb_set *baton__rb_capture_end(rb_capture *cap, cudaStream_t stream)
{
    close_op(cap, stream);
    rb_set *set = cap->set;
    cap->set = NULL;
    return set;
}

void baton__rb_set_free(rb_set *set)
{
    if (!set)
        return;
    for (int i = 0; i < set->n; i++)
        for (int k = 0; k < set->ops[i].n; k++) {
            free(set->ops[i].nodes[k].args);
            free(set->ops[i].nodes[k].blob);
            free(set->ops[i].nodes[k].fix);
        }
    free(set->ops);
    free(set);
}

/* ---- learning where an op's kernels keep its addresses ------------------------------------ */

typedef struct probe {
    cudaGraph_t graph;
    int n;
    cudaGraphNode_t nodes[RB_MAX_NODES];
} probe;

/* Captures the op once more on `s` with buffers `bufs`, never to launch it. */
static int probe_capture(cudaStream_t s, const dev_call *c, void **bufs, size_t bytes,
                         dev_copy_kind kind, probe *out, baton_error *err)
{
    memset(out, 0, sizeof *out);
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return baton__err_set(err, BATON_ENOTSUP, "cudaStreamBeginCapture (probe): %s",
                              cudaGetErrorString(e));
    }
    int rc = 0;
    if (c) {
        dev_call pc = *c;
        char why[256] = "";
        pc.ctx.stream = s;
        pc.ctx.capturing = 1;
        pc.ctx.errbuf = why;
        pc.ctx.errbuf_len = sizeof why;
        rc = c->kernel ? c->kernel(&pc.ctx, bufs, c->opaque, c->opaque_len)
                       : c->delegate->execute(c->state, &pc.ctx, bufs);
    } else {
        e = baton__dev_cuda_copy_launch(s, bufs[0], bufs[1], bytes, kind == DEV_COPY_D2H, 0);
        rc = e == cudaSuccess ? 0 : BATON_ECUDA;
    }
    int several = 0;
    cudaGraphNode_t last = leaf(s, &several);
    out->n = several ? -1 : chain(last, NULL, out->nodes);
    e = cudaStreamEndCapture(s, &out->graph);
    (void)cudaGetLastError();
    if (rc || e != cudaSuccess || !out->graph || out->n < 0) {
        if (out->graph)
            cudaGraphDestroy(out->graph);
        out->graph = NULL;
        return baton__err_set(err, BATON_ENOTSUP,
                              "the op could not be captured again to learn its "
                              "parameters");
    }
    return 0;
}

/* Compares the two probes of one kernel node and keeps the first's parameters with a map of
 * where each buffer goes. */
static int learn_node(rb_node *rn, cudaGraphNode_t n1, cudaGraphNode_t n2, void **b1,
                      baton_error *err)
{
    struct cudaKernelNodeParams p1, p2, t;
    if (cudaGraphKernelNodeGetParams(n1, &p1) != cudaSuccess ||
        cudaGraphKernelNodeGetParams(n2, &p2) != cudaSuccess ||
        cudaGraphKernelNodeGetParams(rn->node, &t) != cudaSuccess) {
        (void)cudaGetLastError();
        return baton__err_set(err, BATON_ENOTSUP, "cudaGraphKernelNodeGetParams failed");
    }
    if (p1.func != t.func || p2.func != t.func ||
        memcmp(&p1.gridDim, &p2.gridDim, sizeof p1.gridDim) ||
        memcmp(&p1.blockDim, &p2.blockDim, sizeof p1.blockDim) ||
        p1.sharedMemBytes != p2.sharedMemBytes || !p1.kernelParams || !p2.kernelParams || p1.extra)
        return baton__err_set(err, BATON_ENOTSUP,
                              "its kernel's launch depends on the addresses, or its parameters are "
                              "opaque");
    size_t np = 0, total = 0, off, size;
    while (cudaFuncGetParamInfo(p1.func, np, &off, &size) == cudaSuccess) {
        if (off + size > total)
            total = off + size;
        np++;
    }
    (void)cudaGetLastError();
    size_t words = (total + 7) / 8;
    uint64_t *w2 = calloc(words + 1, 8);
    rn->blob = calloc(words + 1, 8);
    rn->args = calloc(np + 1, sizeof *rn->args);
    rn->fix = calloc(words + 1, sizeof *rn->fix);
    if (!w2 || !rn->blob || !rn->args || !rn->fix) {
        free(w2);
        return baton__err_set(err, BATON_ENOMEM,
                              "out of memory learning a kernel node's parameters");
    }
    /* Both probes laid out as the device sees the parameters; an address is an aligned 8-byte
     * word, whether a parameter of its own or a field of a struct passed by value. */
    for (size_t j = 0; j < np; j++) {
        cudaFuncGetParamInfo(p1.func, j, &off, &size);
        rn->args[j] = rn->blob + off;
        memcpy(rn->blob + off, p1.kernelParams[j], size);
        memcpy((unsigned char *)w2 + off, p2.kernelParams[j], size);
    }
    int rc = 0;
    for (size_t w = 0; w < words && !rc; w++) {
        uint64_t v1, v2;
        memcpy(&v1, rn->blob + 8 * w, 8);
        v2 = w2[w];
        if (v1 == v2)
            continue;
        int k = -1;
        for (int b = 0; b < RB_MAX_BUFS && k < 0; b++)
            if (v2 - v1 == (uint64_t)delta(b))
                k = b;
        if (k < 0)
            rc = baton__err_set(
                err, BATON_ENOTSUP,
                "byte %zu of its kernel's parameters changes with the addresses in a "
                "way that is not an address",
                8 * w);
        else
            rn->fix[rn->n_fix++] = (rb_fix){8 * w, k, (intptr_t)(v1 - (uint64_t)(uintptr_t)b1[k])};
    }
    free(w2);
    if (rc)
        return rc;
    rn->kp = p1;
    rn->kp.kernelParams = rn->args;
    rn->kp.extra = NULL;
    return 0;
}

static int learn(rb_op *op, cudaStream_t s, const dev_call *c, void **b1, int nb, size_t bytes,
                 dev_copy_kind kind, baton_error *err)
{
    void *b2[RB_MAX_BUFS];
    for (int k = 0; k < nb; k++)
        b2[k] = (char *)b1[k] + delta(k);
    probe p1, p2;
    int rc = probe_capture(s, c, b1, bytes, kind, &p1, err);
    if (rc)
        return rc;
    rc = probe_capture(s, c, b2, bytes, kind, &p2, err);
    if (!rc && (p1.n != op->n || p2.n != op->n))
        rc = baton__err_set(err, BATON_ENOTSUP,
                            "it adds another number of nodes when captured again");
    for (int i = 0; !rc && i < op->n; i++) {
        if (op->nodes[i].type != cudaGraphNodeTypeKernel)
            rc = baton__err_set(err, BATON_ENOTSUP, "it adds a node that is not a kernel");
        else
            rc = learn_node(&op->nodes[i], p1.nodes[i], p2.nodes[i], b1, err);
    }
    if (p1.graph)
        cudaGraphDestroy(p1.graph);
    if (p2.graph)
        cudaGraphDestroy(p2.graph);
    return rc;
}

int baton__rb_rebind(rb_set *set, cudaGraphExec_t exec, cudaStream_t probe_stream, int tag,
                     const dev_call *c, void *dst, const void *src, size_t bytes,
                     dev_copy_kind kind, baton_error *err)
{
    rb_op *op = NULL;
    for (int i = 0; set && i < set->n && !op; i++)
        if (set->ops[i].tag == tag)
            op = &set->ops[i];
    if (!op || op->n < 0 || op->learned < 0)
        return baton__err_set(err, BATON_ENOTSUP, "the op's graph nodes are not known");
    void *copy_bufs[2] = {dst, (void *)src};
    void **bufs = c ? c->buffers : copy_bufs;
    int nb = c ? c->ctx.sig->n_inputs + c->ctx.sig->n_outputs : 2;
    /* A copy by the copy engine: one memcpy node, whose addresses are plain parameters. */
    if (!c && op->n == 1 && op->nodes[0].type == cudaGraphNodeTypeMemcpy) {
        enum cudaMemcpyKind mk = kind == DEV_COPY_H2D   ? cudaMemcpyHostToDevice
                                 : kind == DEV_COPY_D2H ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
        cudaError_t e =
            cudaGraphExecMemcpyNodeSetParams1D(exec, op->nodes[0].node, dst, src, bytes, mk);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return baton__err_set(err, BATON_ENOTSUP, "cudaGraphExecMemcpyNodeSetParams1D: %s",
                                  cudaGetErrorString(e));
        }
        return 0;
    }
    if (nb > RB_MAX_BUFS)
        return baton__err_set(err, BATON_ENOTSUP, "too many buffers");
    if (!op->learned) {
        int rc = learn(op, probe_stream, c, bufs, nb, bytes, kind, err);
        op->learned = rc ? -1 : 1;
        if (rc)
            return rc == BATON_ENOMEM ? rc : BATON_ENOTSUP;
    }
    for (int i = 0; i < op->n; i++) {
        rb_node *rn = &op->nodes[i];
        for (int f = 0; f < rn->n_fix; f++) {
            uintptr_t v = (uintptr_t)bufs[rn->fix[f].buf] + (uintptr_t)rn->fix[f].add;
            memcpy(rn->blob + rn->fix[f].off, &v, sizeof v);
        }
        cudaError_t e = cudaGraphExecKernelNodeSetParams(exec, rn->node, &rn->kp);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            op->learned = -1;
            return baton__err_set(err, BATON_ENOTSUP, "cudaGraphExecKernelNodeSetParams: %s",
                                  cudaGetErrorString(e));
        }
    }
    return 0;
}
