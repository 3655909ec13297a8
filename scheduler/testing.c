/* testing.c: hooks into the runtime for baton's own tests and benchmarks, compiled only in
 * testing builds (-DBATON_TESTING=ON, the default when the tests are built): prepare with a device
 * fault armed, arm a fault in a prepared runtime, and run only a plan's GPU segments (its GPU
 * floor). Declared in scheduler/testing.h. */
#include <string.h>

#include "scheduler/runtime.h"
#include "scheduler/testing.h"

int baton__runtime_create_faulty(const baton_plan *plan, const baton_options *opts, int fault_dev,
                                 dev_fault fault, baton_runtime **out, baton_error *err)
{
    return baton__runtime_prepare(plan, opts, fault_dev, fault, out, err);
}

void baton__runtime_inject(baton_runtime *rt, int device, dev_fault fault)
{
    if (rt && device >= 0 && device < rt->nd && rt->dev[device].ops->inject)
        rt->dev[device].ops->inject(rt->dev[device].ctx, fault);
}

void baton__runtime_skip_cross_waits(baton_runtime *rt, int on)
{
    if (rt)
        rt->no_cross_wait = on;
}

void baton__runtime_gpu_only(baton_runtime *rt, int on)
{
    if (!rt)
        return;
    rt->gpu_only = on;
    if (on) /* nothing is queued behind a gate that no CPU segment would open */
        memset(rt->ahead_ok, 0, (size_t)rt->plan->n_segments + 1);
}

dev_ctx *baton__runtime_device_ctx(baton_runtime *rt, int device)
{
    return rt && device >= 0 && device < rt->nd ? rt->dev[device].ctx : NULL;
}

int baton__runtime_graph_slot(baton_runtime *rt, int segment)
{
    if (!rt || !rt->graph_slot || segment < 0 || segment >= rt->plan->n_segments)
        return -1;
    return rt->graph_slot[segment];
}
