/* collective.c: all_reduce and all_gather computed on the host, for the devices whose memory is
 * host memory (the CPU, and the test device that stands in for GPUs): the logic and the ordering
 * of collectives are then tested without a GPU. The CUDA device uses NCCL instead. */
#include <stdint.h>
#include <string.h>

#include "core/core.h"
#include "core/dtype.h"
#include "scheduler/device.h"

void baton__dev_coll_host(const dev_coll *c)
{
    size_t esize = baton_dtype_size(c->dtype), bytes = c->count * esize;
    if (c->op == DEV_COLL_ALL_GATHER) {
        /* every member's recv is the sends in group order; recv never overlaps a send */
        for (int m = 0; m < c->n; m++)
            for (int k = 0; k < c->n; k++)
                memcpy((char *)c->recv[m] + (size_t)k * bytes, c->send[k], bytes);
        return;
    }
    /* all_reduce: into member 0's recv, then copied to the others (a recv may be its own send:
     * member 0's send is read before anything is written, element by element) */
    void *out = c->recv[0];
    for (size_t i = 0; i < c->count; i++) {
        if (c->dtype == BATON_DTYPE_I32) {
            uint32_t acc = 0;
            for (int k = 0; k < c->n; k++)
                acc += (uint32_t)((const int32_t *)c->send[k])[i];
            ((int32_t *)out)[i] = (int32_t)acc;
        } else if (c->dtype == BATON_DTYPE_I64) {
            uint64_t acc = 0;
            for (int k = 0; k < c->n; k++)
                acc += (uint64_t)((const int64_t *)c->send[k])[i];
            ((int64_t *)out)[i] = (int64_t)acc;
        } else {
            double acc = load_f64(c->dtype, c->send[0], (int64_t)i);
            for (int k = 1; k < c->n; k++)
                acc += load_f64(c->dtype, c->send[k], (int64_t)i);
            store_f64(c->dtype, out, (int64_t)i, acc);
        }
    }
    for (int m = 1; m < c->n; m++)
        memcpy(c->recv[m], out, bytes);
}
