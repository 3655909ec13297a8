/* run.c: runs a prepared plan in a sync mode (baton_runtime_run).
 *
 * A run only walks the segments: GPU segments are issued on their device's stream without waiting
 * (or replayed from a captured graph), and the host waits where the analysis says: after every GPU
 * step in strict mode, at GPU -> CPU boundaries and at the end otherwise.
 *
 * Queueing ahead (graph mode): in GPU -> CPU -> GPU on one device, the second GPU segment's graph
 * is launched before the CPU segment runs, behind the device's gate, which the host opens when
 * the CPU segment is done. The GPU then starts it without a launch in between; the host still
 * waits once at the boundary, on an event recorded before the queued work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/runtime.h"

/* ---- run ---------------------------------------------------------------------------------- */

/* Wraps a device's error with the step, its target and device. */
/* The one place a failure is tied to its step: "step 'norm' (kernel 'rms_norm_fwd' on cuda:0):"
 * and the reason the device or the call gave, the same words on every backend. A kernel or
 * delegate that refused its arguments (BATON_EINVAL, as it answers a direct call) is reported as
 * BATON_EKERNEL: for the runtime's caller, the step failed. */
static int step_fail(baton_runtime *rt, int i, int rc, baton_error *err)
{
    const plan_step *s = &rt->plan->steps[i];
    char name[32], inner[BATON_ERROR_MAX];
    snprintf(inner, sizeof inner, "%s", err ? err->message : "");
    if (rc == BATON_EINVAL)
        rc = BATON_EKERNEL;
    return baton__err_set(err, rc, "step '%s' (%s '%s' on %s): %s", s->name,
                          s->kind == BATON_TARGET_KERNEL ? "kernel" : "delegate", s->target_name,
                          baton_device_format(s->device, name, sizeof name), inner);
}

/* Errors that CUDA kernels recorded on the device instead of reading out of bounds (the decoder
 * ops' ids and positions), read once the host has waited for every GPU at the end of a run: the
 * run fails naming the step. Only plans with such kernels on a real GPU pay the read (one small
 * synchronous copy per device and run). */
static int take_kernel_errors(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    uint64_t polled = 0;
    for (int i = 0; i < plan->n_steps; i++) {
        const plan_step *s = &plan->steps[i];
        if (!s->cuda_errors || !rt->impls[i] || rt->impls[i]->device != BATON_DEVICE_CUDA ||
            rt->calls[i].kernel != rt->impls[i]->kernel)
            continue;
        const int dev = rt->calls[i].ctx.device.index;
        if (dev < 0 || dev >= 64 || (polled >> dev & 1))
            continue;
        polled |= 1ull << dev;
        char msg[BATON_ERROR_MAX / 2];
        int step = -1;
        int rc = s->cuda_errors(dev, &step, msg, sizeof msg);
        if (rc) {
            baton__err_set(err, rc, "%s", msg);
            return step >= 0 && step < plan->n_steps ? step_fail(rt, step, rc, err) : rc;
        }
    }
    return 0;
}

static int issue_step(baton_runtime *rt, int i, baton_error *err)
{
    rt_device *rd = &rt->dev[rt->step_dev[i]];
    dev_call *c = &rt->calls[i];
    c->ctx.errbuf[0] = 0;
    if (rt->capturing && rd->ops->capture_tag)
        rd->ops->capture_tag(rd->ctx, i);
    int64_t t0 = rt->timing || rt->trace ? now_ns() : 0;
    int rc = rd->ops->call(rd->ctx, c, err);
    if (t0) {
        int64_t t1 = now_ns();
        rt->step_ns[i] += t1 - t0;
        if (rt->trace)
            baton__trace_add(rt, rt->plan->steps[i].name, "step", rt->step_dev[i], i, 0, t0, t1);
    }
    if (rc)
        return step_fail(rt, i, rc, err);
    return 0;
}

static int issue_transfer(baton_runtime *rt, int x, baton_error *err)
{
    rt_transfer *r = &rt->xfers[x];
    rt_device *rd = &rt->dev[r->issuer];
    if (r->skip || r->absent || r->peer >= 0)
        return 0; /* needless, another rank's, or sent and received by rank_transfers */
    if (rt->capturing) {
        r->graph_seg = rt->capture_seg;
        if (rd->ops->capture_tag)
            rd->ops->capture_tag(rd->ctx, rt->plan->n_steps + x);
    }
    int64_t t0 = rt->trace ? now_ns() : 0;
    int rc = rd->ops->copy(rd->ctx, r->dst, r->src, r->bytes, r->kind, r->what, err);
    if (rc) {
        char name[32], inner[BATON_ERROR_MAX];
        snprintf(inner, sizeof inner, "%s", err ? err->message : "");
        return baton__err_set(
            err, rc, "%s (issued on %s): %s", r->what,
            baton_device_format(rt->plan->memory[r->issuer].device, name, sizeof name), inner);
    }
    if (t0)
        baton__trace_add(rt, r->what, "transfer", r->issuer, -1, (int64_t)r->bytes, t0, now_ns());
    if (rt->capturing)
        return 0; /* counted on each launch of the graph */
    rd->pending = 1;
    if (r->host_copy)
        return 0; /* not bytes moved to or from a device (baton_run_stats) */
    if (r->kind == DEV_COPY_H2D)
        rt->stats.bytes_h2d += (int64_t)r->bytes;
    else if (r->kind == DEV_COPY_D2H)
        rt->stats.bytes_d2h += (int64_t)r->bytes;
    else
        rt->stats.bytes_d2d += (int64_t)r->bytes;
    return 0;
}

/* Waits for device d. A failure of earlier asynchronous work surfaces here: it is tied to the step
 * the device says failed, else to `step` when the caller knows it (strict mode waits after each
 * step), else to the wait itself. */
static int host_wait_step(baton_runtime *rt, int d, const char *where, int step, baton_error *err)
{
    rt_device *rd = &rt->dev[d];
    int64_t t0 = rt->trace ? now_ns() : 0;
    /* With work queued ahead, the event was recorded before it: wait for what precedes it. */
    int rc = rd->recorded ? 0 : rd->ops->record(rd->ctx, WAIT_SLOT, err);
    if (!rc) {
        rc = rd->ops->wait(rd->ctx, WAIT_SLOT, where, err);
        if (rc) {
            /* an asynchronous failure: name its step when the device knows it */
            int fs = rd->ops->failed_step ? rd->ops->failed_step(rd->ctx) : -1;
            if (fs < 0)
                fs = step;
            if (fs >= 0 && fs < rt->plan->n_steps)
                rc = step_fail(rt, fs, rc, err);
            else {
                char inner[BATON_ERROR_MAX], name[32];
                snprintf(inner, sizeof inner, "%s", err ? err->message : "");
                rc = baton__err_set(
                    err, rc, "%s, at the wait %s: %s",
                    baton_device_format(rt->plan->memory[d].device, name, sizeof name), where,
                    inner);
            }
        }
    }
    if (t0)
        baton__trace_add(rt, where, "wait", d, step, 0, t0, now_ns());
    rd->pending = rd->recorded && rd->queued;
    rd->recorded = rd->queued = 0;
    /* A GPU step run on the CPU (fallback) finished when it was issued: nothing was waited. */
    if (rd->gpu && dev_has(rd->ops, DEV_CAP_ASYNC))
        rt->stats.host_waits++;
    return rc;
}

static int host_wait(baton_runtime *rt, int d, const char *where, baton_error *err)
{
    return host_wait_step(rt, d, where, -1, err);
}

/* Transfers issued at the end of GPU segment s on device d: those into the next segment (a CPU
 * one) that come from d, and, after the last segment, the outputs that go back to the host. */
static int issue_outgoing(baton_runtime *rt, int s, int d, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int into = s + 1; /* the next segment, or the end of the run after the last one */
    if (into < plan->n_segments && plan->segments[into].device.kind != BATON_DEVICE_CPU)
        return 0;
    for (int x = rt->xfer_first[into]; x < rt->xfer_first[into + 1]; x++)
        if (rt->xfers[x].from == d) {
            int rc = issue_transfer(rt, x, err);
            if (rc)
                return rc;
        }
    return 0;
}

static int issue_incoming(baton_runtime *rt, int s, baton_error *err)
{
    for (int x = rt->xfer_first[s], rc; x < rt->xfer_first[s + 1]; x++)
        if ((rc = issue_transfer(rt, x, err)))
            return rc;
    return 0;
}

/* Graph mode: whether segment s may be captured. A delegate that says it cannot be captured
 * keeps its segment out of CUDA graphs (the test device replays any recorded call). */
static int segment_capturable(baton_runtime *rt, int s)
{
    const baton_plan *plan = rt->plan;
    const plan_segment *seg = &plan->segments[s];
    rt_device *rd = &rt->dev[baton__plan_memory_index(plan, seg->device)];
    if (rt->graph_state[s] != 0)
        return rt->graph_state[s] > 0;
    if (!rd->ops->capture_begin)
        return 0;
    for (int i = seg->first_step; i <= seg->last_step && !dev_has(rd->ops, DEV_CAP_CAPTURE_ANY);
         i++) {
        const dev_call *c = &rt->calls[i];
        if (c->delegate && !c->delegate->capturable) {
            rt->graph_state[s] = -1;
            if (!rt->note[0]) {
                snprintf(rt->note, sizeof rt->note,
                         "segment %d runs without a CUDA graph: delegate '%s' of step '%s' "
                         "cannot be captured",
                         s, plan->steps[i].target_name, plan->steps[i].name);
                if (!rt->opts.quiet)
                    baton__log_to(rt->plan->log, BATON_LOG_NOTE, "%s", rt->note);
            }
            return 0;
        }
    }
    return 1;
}

static int cross_waits(baton_runtime *rt, int s, baton_error *err);
static int signal_segment(baton_runtime *rt, int s, baton_error *err);

/* Whether segment s copies a tensor another GPU of this process wrote. */
static int reads_peer(const baton_runtime *rt, int s)
{
    for (int x = rt->xfer_first[s]; x < rt->xfer_first[s + 1]; x++)
        if (rt->xfers[x].wait_seg >= 0 && !rt->xfers[x].skip)
            return 1;
    return 0;
}

/* Whether segment s's graph holds its waits for other GPUs and the event other GPUs wait for,
 * as event nodes (baton_runtime.event_nodes, where the device can), instead of
 * having them issued on the stream around each launch. */
static int event_nodes(const baton_runtime *rt, int s)
{
    const int d = baton__plan_memory_index(rt->plan, rt->plan->segments[s].device);
    /* only the segment's own GPU records after it (a collective, recorded by several, is never
     * captured) */
    return rt->event_nodes && dev_has(rt->dev[d].ops, DEV_CAP_EVENT_NODES) &&
           (rt->seg_signal[s] & ~(1u << d)) == 0;
}

/* Captures segment s — its incoming transfers, its steps and its outgoing transfers — into graph
 * slot s. Returns 0 when captured, BATON_ENOTSUP when the segment cannot be captured (then it is
 * marked to run uncaptured and the note says why), or the failing step's error. */
static int capture_segment(baton_runtime *rt, int s, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    const plan_segment *seg = &plan->segments[s];
    int d = baton__plan_memory_index(plan, seg->device);
    rt_device *rd = &rt->dev[d];
    rt->capturing = 1;
    rt->capture_seg = s;
    int slot = rt->graph_slot[s];
    const int nodes = event_nodes(rt, s);
    int rc = rd->ops->capture_begin(rd->ctx, slot, err);
    if (!rc && rt->ahead_ok[s])
        rc = rd->ops->gate_wait(rd->ctx, err); /* before the copies of the CPU's outputs */
    /* untagged (-1), as everything before the first tag: no op the runtime rebinds */
    if (!rc && nodes)
        rc = cross_waits(rt, s, err);
    if (!rc)
        rc = issue_incoming(rt, s, err);
    if (!rc && nodes && reads_peer(rt, s)) {
        /* the copies from other GPUs are done here: queued runs' writers wait for this node */
        if (rd->ops->capture_tag)
            rd->ops->capture_tag(rd->ctx, -1);
        rc = rd->ops->record(rd->ctx, READ_EVENT(rt, s), err);
    }
    for (int i = seg->first_step; !rc && i <= seg->last_step; i++) {
        rt->calls[i].ctx.capturing = 1;
        rc = issue_step(rt, i, err);
        rt->calls[i].ctx.capturing = 0;
    }
    if (!rc)
        rc = issue_outgoing(rt, s, d, err);
    if (!rc && nodes && rt->seg_signal[s]) {
        if (rd->ops->capture_tag)
            rd->ops->capture_tag(rd->ctx, -1);
        rc = signal_segment(rt, s, err);
    }
    rt->capturing = 0;
    int updated = 0;
    baton_error cerr = {0};
    int rc2 = rd->ops->capture_end(rd->ctx, slot, &updated, &cerr);
    if (rc && rc != BATON_ENOTSUP)
        return rc; /* a failing step fails the run; the next run captures again */
    if (!rc && rc2 && rc2 != BATON_ENOTSUP) {
        if (err)
            *err = cerr;
        return rc2;
    }
    if (rc || rc2) {
        rt->graph_state[s] = -1;
        if (!rt->note[0]) {
            char name[32];
            snprintf(rt->note, sizeof rt->note,
                     "segment %d (%s, steps '%s'..'%s') runs without a CUDA graph: %.300s", s,
                     baton_device_format(seg->device, name, sizeof name),
                     plan->steps[seg->first_step].name, plan->steps[seg->last_step].name,
                     rc ? (err ? err->message : "") : cerr.message);
            if (!rt->opts.quiet)
                baton__log_to(rt->plan->log, BATON_LOG_NOTE, "%s", rt->note);
        }
        rd->ops->graph_reset(rd->ctx, slot);
        return BATON_ENOTSUP;
    }
    rt->graph_state[s] = 1;
    baton__runtime_graph_used(rt, s, 1);
    rt->stats.captures++;
    if (updated)
        rt->stats.graph_updates++;
    return 0;
}

static int settle(baton_runtime *rt, baton_error *err);

/* Graph mode: captures segment s when it must be. 1 when s then runs as its graph, 0 when it runs
 * uncaptured, or the failing step's error. */
static int graph_ready(baton_runtime *rt, int s, baton_error *err)
{
    if (rt->opts.mode != BATON_SYNC_GRAPH || !segment_capturable(rt, s))
        return 0;
    if (rt->graph_state[s] == 0 || rt->recapture) {
        /* the graph it replaces may still run in a queued run (run_async) */
        int rc = settle(rt, err);
        if (rc)
            return rc;
        rc = capture_segment(rt, s, err);
        if (rc && rc != BATON_ENOTSUP)
            return rc;
    }
    return rt->graph_state[s] == 1;
}

/* Issues segment s: its graph (graphed 1; graph_ready captured it) or its copies and calls. */
static int issue_gpu_segment(baton_runtime *rt, int s, int graphed, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    const plan_segment *seg = &plan->segments[s];
    int d = baton__plan_memory_index(plan, seg->device), rc;
    rt_device *rd = &rt->dev[d];
    int strict = rt->opts.mode == BATON_SYNC_STRICT;

    if (graphed) {
        int64_t t0 = rt->timing || rt->trace ? now_ns() : 0;
        rc = rd->ops->graph_launch(rd->ctx, rt->graph_slot[s], err);
        baton__runtime_graph_used(rt, s, 0);
        if (t0) {
            int64_t t1 = now_ns();
            rt->step_ns[seg->first_step] += t1 - t0;
            if (rt->trace)
                baton__trace_add(rt, "graph", "graph", d, seg->first_step, 0, t0, t1);
        }
        if (rc)
            return step_fail(rt, seg->first_step, rc, err);
        rd->gate_armed = rt->ahead_ok[s];
        rt->stats.graph_launches++;
        rt->stats.steps += seg->last_step - seg->first_step + 1;
        rt->stats.bytes_h2d += rt->seg_bytes[2 * s];
        rt->stats.bytes_d2h += rt->seg_bytes[2 * s + 1];
        rd->pending = 1;
        return 0;
    }

    if (rt->ahead_ok[s]) {
        if ((rc = rd->ops->gate_wait(rd->ctx, err)))
            return step_fail(rt, seg->first_step, rc, err);
        rd->gate_armed = 1;
    }
    if ((rc = issue_incoming(rt, s, err)))
        return rc;
    if (rt->deferring && reads_peer(rt, s) &&
        (rc = rd->ops->record(rd->ctx, READ_EVENT(rt, s), err))) /* see wait_for_readers */
        return rc;
    for (int i = seg->first_step; i <= seg->last_step; i++) {
        if ((rc = issue_step(rt, i, err)))
            return rc;
        rt->stats.steps++;
        if (dev_has(rd->ops, DEV_CAP_ASYNC)) /* the CPU fallback runs it inline: no launch */
            rt->stats.kernel_launches++;
        rd->pending = 1;
        if (strict) {
            /* the copies to the host go before the last step's wait, so it covers them */
            if (i == seg->last_step && (rc = issue_outgoing(rt, s, d, err)))
                return rc;
            if ((rc = host_wait_step(rt, d, plan->steps[i].name, i, err)))
                return rc; /* host_wait_step named the step */
        }
    }
    if (strict)
        return 0;
    rd->pending = 1;
    return issue_outgoing(rt, s, d, err);
}

/* Before segment s reads what another GPU wrote: its copies wait, on the reader's stream, for the
 * event the writer recorded after the writing segment. Inside a capture (event_nodes) the waits
 * become the graph's first nodes; else they stay on the stream, before the graph's launch. */
static int cross_waits(baton_runtime *rt, int s, baton_error *err)
{
    for (int x = rt->xfer_first[s]; x < rt->xfer_first[s + 1] && !rt->no_cross_wait; x++) {
        const rt_transfer *r = &rt->xfers[x];
        if (r->wait_seg < 0 || r->skip)
            continue;
        rt_device *rd = &rt->dev[r->issuer];
        int rc = rd->ops->stream_wait(rd->ctx, rt->dev[r->from].ctx, SEG_EVENT(r->wait_seg), err);
        if (rc) {
            char inner[BATON_ERROR_MAX];
            snprintf(inner, sizeof inner, "%s", err ? err->message : "");
            return baton__err_set(err, rc, "%s: waiting for the writer: %s", r->what, inner);
        }
    }
    return 0;
}

/* After segment s: the events other GPUs' copies of its outputs wait for. */
static int signal_segment(baton_runtime *rt, int s, baton_error *err)
{
    for (uint32_t m = rt->seg_signal[s]; m; m &= m - 1) {
        rt_device *rd = &rt->dev[__builtin_ctz(m)];
        int rc = rd->ops->record(rd->ctx, SEG_EVENT(s), err);
        if (rc)
            return rc;
    }
    return 0;
}

/* One process per GPU: the tensors that move into segment s between this rank's GPU and another
 * rank's, sent or received on this rank's stream, in the plan's transfer order, which every rank
 * walks alike, so that each send meets its receive. Outside any graph: before the graph that
 * reads what arrives, and after the work that wrote what leaves. */
static int rank_transfers(baton_runtime *rt, int s, baton_error *err)
{
    for (int x = rt->xfer_first[s]; x < rt->xfer_first[s + 1]; x++) {
        rt_transfer *r = &rt->xfers[x];
        if (r->peer < 0 || r->skip)
            continue;
        rt_device *rd = &rt->dev[rt->own];
        int rc = r->send ? rd->ops->world_send(rt->world, rd->ctx, r->src, r->bytes, r->peer, err)
                         : rd->ops->world_recv(rt->world, rd->ctx, r->dst, r->bytes, r->peer, err);
        if (rc) {
            char inner[BATON_ERROR_MAX];
            snprintf(inner, sizeof inner, "%s", err ? err->message : "");
            return baton__err_set(err, rc, "%s (%s rank %d): %s", r->what,
                                  r->send ? "sent to" : "received from", r->peer, inner);
        }
        rd->pending = 1;
        if (!r->send)
            rt->stats.bytes_d2d += (int64_t)r->bytes;
    }
    return 0;
}

/* Runs queued without the host's wait (run_async): a GPU's next run may start while another GPU
 * has yet to copy what it wrote in the run before, and would overwrite it. So before this run
 * issues anything, each GPU that others copy from waits, on its stream, for the event each
 * reader recorded after its copies in the queued run before (READ_EVENT): the writer's later
 * work waits for the reader's copy, as the host's wait at the end of a run ensures otherwise. */
static int wait_for_readers(baton_runtime *rt, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    for (int s = 0; s < plan->n_segments; s++) {
        uint32_t done = 0; /* writers already made to wait for this segment's reader */
        for (int x = rt->xfer_first[s]; x < rt->xfer_first[s + 1]; x++) {
            const rt_transfer *r = &rt->xfers[x];
            if (r->wait_seg < 0 || r->skip || (done >> r->from & 1))
                continue;
            done |= 1u << r->from;
            rt_device *w = &rt->dev[r->from];
            int rc = w->ops->stream_wait(w->ctx, rt->dev[r->issuer].ctx, READ_EVENT(rt, s), err);
            if (rc) {
                char inner[BATON_ERROR_MAX];
                snprintf(inner, sizeof inner, "%s", err ? err->message : "");
                return baton__err_set(err, rc, "%s: the queued run before has yet to copy it: %s",
                                      r->what, inner);
            }
        }
    }
    return 0;
}

/* A GPU segment with its ordering against other GPUs: the waits before it and the event after
 * it are stream calls around it, unless its graph holds them as event nodes. */
static int run_gpu_segment(baton_runtime *rt, int s, baton_error *err)
{
    const rt_device *rd =
        &rt->dev[baton__plan_memory_index(rt->plan, rt->plan->segments[s].device)];
    if (rd->remote) /* another rank's: only what this rank sends it */
        return rank_transfers(rt, s, err);
    if (rt_ranks(rt)) {
        int rc = rank_transfers(rt, s, err);
        if (rc)
            return rc;
    }
    int graphed = graph_ready(rt, s, err);
    if (graphed < 0)
        return graphed;
    const int inside = graphed && event_nodes(rt, s);
    int rc = inside ? 0 : cross_waits(rt, s, err);
    if (!rc)
        rc = issue_gpu_segment(rt, s, graphed, err);
    if (!rc && !inside)
        rc = signal_segment(rt, s, err);
    /* a graph with event nodes records READ_EVENT after its copies, and an uncaptured segment
     * on its stream after them; a graph without them, after it all */
    if (!rc && graphed && !inside && rt->deferring && reads_peer(rt, s)) {
        rt_device *rd = &rt->dev[baton__plan_memory_index(rt->plan, rt->plan->segments[s].device)];
        rc = rd->ops->record(rd->ctx, READ_EVENT(rt, s), err);
    }
    return rc;
}

/* A collective step: its members' incoming copies, then the collective on every member's
 * stream. It is never captured: NCCL's calls over several devices are issued as one group. */
static int run_collective(baton_runtime *rt, int s, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    int i = plan->segments[s].first_step, rc;
    const plan_step *st = &plan->steps[i];
    if ((rc = cross_waits(rt, s, err)) || (rc = issue_incoming(rt, s, err)))
        return rc;
    if (rt_ranks(rt) && (rc = rank_transfers(rt, s, err)))
        return rc;
    dev_coll *c = &rt->colls[s];
    void **b = rt->calls[i].buffers; /* baton_runtime_bind may have moved them */
    for (int k = 0; k < c->n; k++) {
        c->send[k] = b[k];
        c->recv[k] = b[st->n_inputs + k];
    }
    rt_device *r0 = &rt->dev[rt_ranks(rt) ? rt->own : rt->step_dev[i]];
    int64_t t0 = rt->timing || rt->trace ? now_ns() : 0;
    /* one process per GPU: this rank's member only, over the world's communicator */
    rc = rt_ranks(rt) ? r0->ops->world_coll(rt->world, r0->ctx, c, rt->opts.rank, err)
                      : r0->ops->coll_run(c, err);
    if (t0) {
        int64_t t1 = now_ns();
        rt->step_ns[i] += t1 - t0;
        if (rt->trace)
            baton__trace_add(rt, st->name, "step", rt->step_dev[i], i, 0, t0, t1);
    }
    if (rc)
        return step_fail(rt, i, rc, err);
    rt->stats.steps++;
    if (dev_has(r0->ops, DEV_CAP_ASYNC))
        rt->stats.kernel_launches += rt_ranks(rt) ? 1 : c->n;
    for (int k = 0; k < c->n; k++) { /* every member's call is issued: waiting is safe */
        int d = baton__plan_memory_index(plan, st->group[k]);
        if (rt->dev[d].remote)
            continue;
        rt->dev[d].pending = 1;
        if ((rc = issue_outgoing(rt, s, d, err)))
            return rc;
        if (rt->opts.mode == BATON_SYNC_STRICT && (rc = host_wait_step(rt, d, st->name, i, err)))
            return rc;
    }
    return signal_segment(rt, s, err);
}

static int run_cpu_segment(baton_runtime *rt, int s, baton_error *err)
{
    const baton_plan *plan = rt->plan;
    const plan_segment *seg = &plan->segments[s];
    int rc, prev = s > 0 ? baton__plan_memory_index(plan, plan->segments[s - 1].device) : -1;
    int need[PLAN_MAX_DEVICES] = {0};
    if (prev > 0)
        need[prev] = 1;
    for (int x = rt->xfer_first[s]; x < rt->xfer_first[s + 1]; x++) {
        need[rt->xfers[x].from] = 1;
        if (rt->xfers[x].from != prev && (rc = issue_transfer(rt, x, err)))
            return rc;
    }
    for (int d = 1; d < rt->nd; d++)
        if (need[d] && rt->dev[d].pending &&
            (rc = host_wait(rt, d, plan->steps[seg->first_step].name, err)))
            return rc;
    for (int i = seg->first_step; i <= seg->last_step; i++) {
        if ((rc = issue_step(rt, i, err)))
            return rc;
        rt->stats.steps++;
    }
    return 0;
}

/* Queues GPU segment s (graph mode, ahead_ok) behind its device's gate, before the CPU segment
 * s - 1 runs. That segment's wait uses an event recorded first, so it does not wait for s. */
static int queue_ahead(baton_runtime *rt, int s, baton_error *err)
{
    int d = baton__plan_memory_index(rt->plan, rt->plan->segments[s].device);
    rt_device *rd = &rt->dev[d];
    int rc = rd->ops->record(rd->ctx, WAIT_SLOT, err);
    if (rc)
        return rc;
    rd->recorded = 1;
    rt->ahead = s;
    if ((rc = run_gpu_segment(rt, s, err)))
        return rc;
    rd->queued = 1;
    rt->stats.queued_ahead++;
    return 0;
}

/* The CPU segment before s is done and its outputs are in host memory: let s start. */
static void open_gate(baton_runtime *rt, int s)
{
    int d = baton__plan_memory_index(rt->plan, rt->plan->segments[s].device);
    rt_device *rd = &rt->dev[d];
    int64_t t0 = rt->trace ? now_ns() : 0;
    if (rd->recorded) { /* no wait used the event: s is simply pending */
        rd->recorded = 0;
        rd->pending = 1;
    }
    rd->ops->gate_open(rd->ctx);
    rd->gate_armed = 0;
    if (t0)
        baton__trace_add(rt, "open gate", "gate", d, -1, 0, t0, now_ns());
}

/* After a failure: let every stream finish (or fail) what it has, so nothing still writes into
 * the arenas, and forget partial captures. The prepared plan stays usable. */
static void recover(baton_runtime *rt)
{
    for (int d = 0; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        if (rd->gate_armed) /* or the stream never drains; what runs behind it is discarded */
            rd->ops->gate_open(rd->ctx);
        rd->gate_armed = rd->recorded = rd->queued = 0;
        if (rd->remote)
            continue;
        rd->ops->drain(rd->ctx);
        rd->pending = 0;
    }
    rt->ahead = -1;
    for (int i = 0; i < rt->plan->n_steps; i++)
        rt->calls[i].ctx.capturing = 0;
}

/* Two threads running one runtime at once would share its arenas and streams: not allowed
 * (baton.h), and detected with one atomic exchange a run. 1 when the caller may run. */
static int run_claim(baton_runtime *rt)
{
    return atomic_exchange_explicit(&rt->running, 1, memory_order_acquire) == 0;
}

static void run_release(baton_runtime *rt)
{
    atomic_store_explicit(&rt->running, 0, memory_order_release);
}

static int run_plan(baton_runtime *rt, int defer, baton_error *err);

static int busy(baton_error *err, const char *fn)
{
    return baton__err_set(err, BATON_ESTATE,
                          "%s: this runtime is already running on another thread; a runtime "
                          "runs one run at a time (create one per thread, or use a baton_pool)",
                          fn);
}

int baton_runtime_run(baton_runtime *rt, baton_error *err)
{
    err_clear(err);
    if (!rt)
        return baton__err_set(err, BATON_EINVAL, "baton_runtime_run: no runtime");
    if (!run_claim(rt))
        return busy(err, "baton_runtime_run");
    const int rc = run_plan(rt, 0, err);
    run_release(rt);
    return rc;
}

/* A run may end without the host's wait when nothing after its GPU work needs the host: every
 * segment on a GPU of this process, no collective, and not strict mode (which waits per step). */
static int can_defer(const baton_runtime *rt)
{
    const baton_plan *plan = rt->plan;
    if (rt->opts.mode == BATON_SYNC_STRICT || rt->world || plan->n_segments == 0)
        return 0;
    for (int s = 0; s < plan->n_segments; s++)
        if (plan->segments[s].device.kind == BATON_DEVICE_CPU || plan->segments[s].collective)
            return 0;
    for (int d = 1; d < rt->nd; d++)
        if (!rt->dev[d].gpu || !dev_has(rt->dev[d].ops, DEV_CAP_ASYNC))
            return 0;
    return 1;
}

int baton_runtime_run_async(baton_runtime *rt, baton_error *err)
{
    err_clear(err);
    if (!rt)
        return baton__err_set(err, BATON_EINVAL, "baton_runtime_run_async: no runtime");
    if (!run_claim(rt))
        return busy(err, "baton_runtime_run_async");
    const int rc = run_plan(rt, can_defer(rt), err);
    run_release(rt);
    return rc;
}

/* The end of a run (or of the runs queued): every GPU with work in flight records its event
 * before the host waits for the first. Recorded only once the wait for the GPU before it has
 * returned, a GPU's event would cost one more trip from the host to that GPU and back after the
 * run's work is done: on several GPUs that finish together (a collective at the end), each GPU
 * after the first. */
static int record_ends(baton_runtime *rt, baton_error *err)
{
    for (int d = 1; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        if (!rd->pending || rd->recorded)
            continue; /* recorded: queued ahead, its wait is for the work before that */
        int rc = rd->ops->record(rd->ctx, WAIT_SLOT, err);
        if (rc)
            return rc;
        rd->recorded = 1;
    }
    return 0;
}

/* The end of the runs run_async queued: the host waits for every device they used, then the
 * kernels' run-time errors are read, as at the end of a run. */
static int settle(baton_runtime *rt, baton_error *err)
{
    if (!rt->in_flight)
        return 0;
    int rc = rt->end_records_first ? record_ends(rt, err) : 0;
    for (int d = 1; d < rt->nd && !rc; d++)
        if (rt->dev[d].pending)
            rc = host_wait(rt, d, "baton_runtime_wait", err);
    if (!rc)
        rc = take_kernel_errors(rt, err);
    rt->in_flight = 0;
    rt->last_run = rc ? -1 : 1;
    if (rc)
        recover(rt);
    return rc;
}

int baton_runtime_wait(baton_runtime *rt, baton_error *err)
{
    err_clear(err);
    if (!rt)
        return baton__err_set(err, BATON_EINVAL, "baton_runtime_wait: no runtime");
    if (!run_claim(rt))
        return busy(err, "baton_runtime_wait");
    const int rc = settle(rt, err);
    run_release(rt);
    return rc;
}

int baton__runtime_queues_runs(const baton_runtime *rt)
{
    return rt && can_defer(rt);
}

int baton__runtime_record_ends(baton_runtime *rt, baton_error *err)
{
    return rt && rt->in_flight ? record_ends(rt, err) : 0;
}

int baton__runtime_settle(baton_runtime *rt, baton_error *err)
{
    if (!rt || !rt->in_flight)
        return 0;
    return baton_runtime_wait(rt, err);
}

static int run_plan(baton_runtime *rt, int defer, baton_error *err)
{
    if (rt->n_unset_inputs > 0 && !rt->opts.allow_unset_inputs)
        return baton__runtime_unset_inputs(rt, err);
    const baton_plan *plan = rt->plan;
    int rc = baton__runtime_apply_dims(rt, err); /* a changed binding, before anything is issued */
    if (rc)
        return rc;
    rt->ahead = -1;
    int64_t run_t0 = rt->trace ? now_ns() : 0;
    rt->deferring = defer;
    if (rt->in_flight > 0)
        rc = wait_for_readers(rt, err);
    for (int s = 0; s < plan->n_segments && !rc; s++) {
        if (plan->segments[s].device.kind == BATON_DEVICE_CPU) {
            if (rt->gpu_only)
                continue;
            rc = run_cpu_segment(rt, s, err);
            if (!rc && rt->ahead == s + 1)
                open_gate(rt, s + 1);
            continue;
        }
        if (plan->segments[s].collective) {
            rc = run_collective(rt, s, err);
            continue;
        }
        if (s != rt->ahead)
            rc = run_gpu_segment(rt, s, err);
        if (!rc && s + 2 < plan->n_segments && rt->ahead_ok[s + 2])
            rc = queue_ahead(rt, s + 2, err);
    }
    if (!rc) {
        /* the outputs of the devices the last segment ran on went home at its end */
        int end = plan->n_segments;
        for (int x = rt->xfer_first[end]; x < rt->xfer_first[end + 1] && !rc; x++)
            if (!end ||
                !baton__plan_segment_runs_on(plan, end - 1, plan->memory[rt->xfers[x].from].device))
                rc = issue_transfer(rt, x, err);
        if (defer) {
            rt->in_flight++; /* baton_runtime_wait (or the next call that needs it) waits */
        } else {
            if (rt->end_records_first)
                rc = record_ends(rt, err);
            for (int d = 1; d < rt->nd && !rc; d++)
                if (rt->dev[d].pending)
                    rc = host_wait(rt, d, "end of run", err);
            if (!rc)
                rc = take_kernel_errors(rt, err);
            rt->in_flight = 0; /* the waits covered the queued runs before this one */
        }
    }
    if (run_t0)
        baton__trace_add(rt, rc ? "run (failed)" : "run", "run", TRACE_RUN_LANE, -1, 0, run_t0,
                         now_ns());
    rt->last_run = rc ? -1 : 1; /* whether outputs hold a result (get_output) */
    if (rc) {
        rt->in_flight = 0; /* recover() drains the queued runs with the failed one */
        recover(rt);
        return rc;
    }
    rt->recapture = 0;
    rt->stats.runs++;
    err_clear(err); /* a segment that fell back to running uncaptured left its reason there */
    return 0;
}
