/* stats.c: what a prepared runtime reports about itself: the counters of its runs, the note on
 * segments that run uncaptured, the mode and backend it actually uses, and recapture. */
#include <string.h>

#include "scheduler/runtime.h"

void baton_runtime_stats(const baton_runtime *rt, baton_run_stats *out)
{
    if (!out)
        return;
    if (!rt)
        memset(out, 0, sizeof *out);
    else
        *out = rt->stats;
}

void baton_runtime_reset_stats(baton_runtime *rt)
{
    if (!rt)
        return;
    memset(&rt->stats, 0, sizeof rt->stats);
    memset(rt->step_ns, 0, (size_t)rt->plan->n_steps * sizeof *rt->step_ns);
    rt->graph_hits = 0;
}

int64_t baton_runtime_graph_hits(const baton_runtime *rt)
{
    return rt ? rt->graph_hits : 0;
}

const char *baton_runtime_note(const baton_runtime *rt)
{
    return rt && rt->note[0] ? rt->note : NULL;
}

const char *baton_runtime_tuning(const baton_runtime *rt, int step)
{
    if (!rt || !rt->tuning || step < 0 || step >= rt->plan->n_steps)
        return NULL;
    const char *t = rt->tuning + (size_t)step * ERRBUF_LEN;
    return t[0] ? t : NULL;
}

int baton_runtime_recapture(baton_runtime *rt)
{
    if (!rt)
        return BATON_EINVAL;
    rt->recapture = 1;
    /* the graphs kept for other bindings of the dims are captured again when next used */
    if (rt->slot_ok)
        memset(rt->slot_ok, 0, (size_t)rt->plan->n_segments * (size_t)rt->graph_ways);
    return 0;
}

baton_sync_mode baton_runtime_mode(const baton_runtime *rt)
{
    return rt ? rt->opts.mode : BATON_SYNC_STRICT;
}

baton_gpu_backend baton_runtime_gpu_backend(const baton_runtime *rt)
{
    return rt ? rt->backend : BATON_GPU_CPU;
}
