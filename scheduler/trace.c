/* trace.c: per-step host timing for `baton bench --steps` and the Chrome trace (Perfetto opens
 * it) of the runs since baton_runtime_trace_begin. Spans go into a buffer sized at begin, so
 * tracing allocates nothing during runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/runtime.h"

void trace_add(baton_runtime *rt, const char *name, const char *cat, int tid, int64_t t0,
               int64_t t1)
{
    if (rt->trace_n < rt->trace_cap)
        rt->trace[rt->trace_n++] = (trace_event){name, cat, tid, t0 - rt->trace_t0, t1 - t0};
}

int baton_runtime_enable_step_timing(baton_runtime *rt, int enable)
{
    if (!rt)
        return BATON_EINVAL;
    rt->timing = enable != 0;
    return 0;
}

int baton_runtime_step_time_ns(const baton_runtime *rt, int step, int64_t *total_ns)
{
    if (!rt || step < 0 || step >= rt->plan->n_steps)
        return BATON_EINVAL;
    *total_ns = rt->step_ns[step];
    return 0;
}

int baton_runtime_trace_begin(baton_runtime *rt, size_t max_events)
{
    if (!rt || max_events == 0)
        return BATON_EINVAL;
    free(rt->trace);
    rt->trace = calloc(max_events, sizeof *rt->trace);
    if (!rt->trace)
        return BATON_ENOMEM;
    rt->trace_cap = max_events;
    rt->trace_n = 0;
    rt->trace_t0 = now_ns();
    return 0;
}

int baton_runtime_trace_write(baton_runtime *rt, const char *path, baton_error *err)
{
    err_clear(err);
    if (!rt || !rt->trace)
        return err_set(err, BATON_ESTATE, "trace: call baton_runtime_trace_begin first");
    FILE *f = fopen(path, "w");
    if (!f)
        return err_set(err, BATON_EIO, "%s: cannot create trace file: %m", path);
    fprintf(f, "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n");
    char name[32];
    for (int d = 0; d < rt->nd; d++)
        fprintf(f,
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": "
                "{\"name\": \"%s (host side)\"}},\n",
                d, baton_device_format(rt->plan->memory[d].device, name, sizeof name));
    for (size_t i = 0; i < rt->trace_n; i++) {
        const trace_event *e = &rt->trace[i];
        /* names come from the plan, whose validator allows only [A-Za-z0-9_.:-] and these
         * transfer labels, so no escaping is needed beyond quotes, which cannot occur */
        fprintf(f,
                "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, "
                "\"ts\": %.3f, \"dur\": %.3f}%s\n",
                e->name, e->cat, e->tid, (double)e->ts_ns / 1000.0, (double)e->dur_ns / 1000.0,
                i + 1 < rt->trace_n ? "," : "");
    }
    fprintf(f, "]}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return err_set(err, BATON_EIO, "%s: write failed", path);
    return 0;
}
