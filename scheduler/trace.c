/* trace.c: per-step host timing for `baton bench --steps` and the Chrome trace (Perfetto opens
 * it) of the runs since baton_runtime_trace_begin. Spans go into a buffer sized at begin, so
 * tracing allocates nothing during runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/runtime.h"

void baton__trace_add(baton_runtime *rt, const char *name, const char *cat, int tid, int step,
                      int64_t bytes, int64_t t0, int64_t t1)
{
    if (rt->trace_n < rt->trace_cap)
        rt->trace[rt->trace_n++] =
            (trace_event){name, cat, tid, step, rt->stats.runs, bytes, t0 - rt->trace_t0, t1 - t0};
    else
        rt->trace_dropped++;
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
    if (!rt || !total_ns || step < 0 || step >= rt->plan->n_steps)
        return BATON_EINVAL;
    *total_ns = rt->step_ns[step];
    return 0;
}

/* Stops every device's timeline and frees the spans. */
void baton__trace_end(baton_runtime *rt)
{
    for (int d = 0; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        if (rt->dev_trace[d].spans && rd->ops->trace_attach)
            rd->ops->trace_attach(rd->ctx, NULL, NULL);
        free(rt->dev_trace[d].spans);
        rt->dev_trace[d].spans = NULL;
        rt->trace_why[d][0] = 0;
    }
    free(rt->trace);
    rt->trace = NULL;
}

int baton_runtime_trace_begin(baton_runtime *rt, size_t max_events)
{
    if (!rt)
        return BATON_EINVAL;
    baton__trace_end(rt);
    if (max_events == 0)
        return 0; /* tracing stopped */
    rt->trace = calloc(max_events, sizeof *rt->trace);
    if (!rt->trace)
        return BATON_ENOMEM;
    rt->trace_cap = max_events;
    rt->trace_n = rt->trace_dropped = 0;
    rt->trace_t0 = now_ns();
    /* each GPU's own timeline, where its device can give one */
    for (int d = 1; d < rt->nd; d++) {
        rt_device *rd = &rt->dev[d];
        dev_trace *t = &rt->dev_trace[d];
        if (rd->remote) {
            snprintf(rt->trace_why[d], sizeof rt->trace_why[d],
                     "another rank's GPU: its own process traces it");
            continue;
        }
        if (!rd->ops->trace_attach) {
            snprintf(rt->trace_why[d], sizeof rt->trace_why[d],
                     "its steps run on the CPU (fallback): no device timeline");
            continue;
        }
        t->spans = calloc(max_events, sizeof *t->spans);
        if (!t->spans) {
            baton__trace_end(rt);
            return BATON_ENOMEM;
        }
        t->cap = max_events;
        atomic_store(&t->n, 0);
        atomic_store(&t->dropped, 0);
        baton_error why = {0};
        if (rd->ops->trace_attach(rd->ctx, t, &why)) {
            free(t->spans);
            t->spans = NULL;
            snprintf(rt->trace_why[d], sizeof rt->trace_why[d], "%.150s", why.message);
        }
    }
    return 0;
}

/* A JSON string: names come from plans (validated), transfer labels and kernel names. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++)
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    fputc('"', f);
}

static void meta(FILE *f, const char *what, int pid, int tid, const char *name, int sort)
{
    fprintf(f, "{\"name\": \"%s\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ",
            what, pid, tid);
    json_str(f, name);
    fprintf(f,
            "}},\n{\"name\": \"%s_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
            "\"args\": {\"sort_index\": %d}},\n",
            strcmp(what, "process_name") == 0 ? "process" : "thread", pid, tid, sort);
}

/* The args every span carries: what it was and where in the runs. */
static void span_args(FILE *f, const baton_runtime *rt, int step, int64_t run, int64_t bytes,
                      const char *mode)
{
    fprintf(f, ", \"args\": {\"run\": %lld, \"mode\": \"%s\"", (long long)run, mode);
    if (step >= 0 && step < rt->plan->n_steps) {
        const plan_step *s = &rt->plan->steps[step];
        fprintf(f, ", \"step\": ");
        json_str(f, s->name);
        fprintf(f, ", \"target\": ");
        json_str(f, s->target_name);
        fprintf(f, ", \"segment\": %d", s->segment);
    }
    if (bytes)
        fprintf(f, ", \"bytes\": %lld", (long long)bytes);
    fprintf(f, "}}");
}

/* The run a device span belongs to: the last run that began before it (runs[] holds the run
 * markers' start times, ascending, and ids). */
static int64_t run_at(const int64_t *ts, const int64_t *id, size_t n, int64_t t)
{
    size_t lo = 0, hi = n; /* first marker after t */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ts[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? id[lo - 1] : 0;
}

int baton_runtime_trace_write(baton_runtime *rt, const char *path, baton_error *err)
{
    err_clear(err);
    if (!rt || !path)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_runtime_trace_write: a runtime and a path are "
                              "required");
    int qrc = baton__runtime_settle(rt, err); /* the queued runs' device spans */
    if (qrc)
        return qrc;
    if (!rt->trace)
        return baton__err_set(err, BATON_ESTATE, "trace: call baton_runtime_trace_begin first");
    for (int d = 1; d < rt->nd; d++)
        if (rt->dev_trace[d].spans && rt->dev[d].ops->trace_sync)
            rt->dev[d].ops->trace_sync(rt->dev[d].ctx);
    FILE *f = fopen(path, "w");
    if (!f)
        return baton__err_set(err, BATON_EIO, "%s: cannot create trace file: %m", path);
    const char *mode = baton_sync_mode_name(rt->opts.mode);
    char name[32], label[256];
    fprintf(f,
            "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"baton_version\": \"%s\", "
            "\"plan\": ",
            baton_version_string());
    json_str(f, rt->plan->name);
    fprintf(f, ", \"mode\": \"%s\", \"host_events_dropped\": %zu", mode, rt->trace_dropped);
    for (int d = 1; d < rt->nd; d++) {
        baton_device_format(rt->plan->memory[d].device, name, sizeof name);
        if (rt->dev_trace[d].spans)
            fprintf(f, ", \"%s_events_dropped\": %zu", name,
                    atomic_load(&rt->dev_trace[d].dropped));
        else {
            fprintf(f, ", \"%s_timeline\": ", name);
            json_str(f, rt->trace_why[d]);
        }
    }
    fprintf(f, "}, \"traceEvents\": [\n");
    snprintf(label, sizeof label, "host (%s mode)", mode);
    meta(f, "process_name", 1, 0, label, 0);
    for (int d = 0; d < rt->nd; d++) {
        baton_device_format(rt->plan->memory[d].device, name, sizeof name);
        snprintf(label, sizeof label, d ? "%s: issue and wait" : "%s: CPU steps", name);
        meta(f, "thread_name", 1, d, label, d + 1);
    }
    meta(f, "thread_name", 1, TRACE_RUN_LANE, "runs", 0);
    for (int d = 1; d < rt->nd; d++) {
        if (!rt->dev_trace[d].spans)
            continue;
        baton_device_format(rt->plan->memory[d].device, name, sizeof name);
        snprintf(label, sizeof label, "%s (%s)", name, rt->dev[d].ops->label);
        meta(f, "process_name", 1 + d, 0, label, d);
        meta(f, "thread_name", 1 + d, 0, "stream", 0);
        meta(f, "thread_name", 1 + d, 1, "inside graphs", 1);
    }
    int first = 1;
    for (size_t i = 0; i < rt->trace_n; i++) {
        const trace_event *e = &rt->trace[i];
        fprintf(f, "%s{\"name\": ", first ? "" : ",\n");
        first = 0;
        if (strcmp(e->cat, "wait") == 0) {
            baton_device_format(rt->plan->memory[e->tid].device, name, sizeof name);
            snprintf(label, sizeof label, "wait %s (%s)", name, e->name);
            json_str(f, label);
        } else if (strcmp(e->cat, "run") == 0) {
            snprintf(label, sizeof label, "%s %lld", e->name, (long long)e->run);
            json_str(f, label);
        } else {
            json_str(f, e->name);
        }
        fprintf(f,
                ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, "
                "\"dur\": %.3f",
                e->cat, e->tid, (double)e->ts_ns / 1000.0, (double)e->dur_ns / 1000.0);
        span_args(f, rt, e->step, e->run, e->bytes, mode);
    }
    size_t n_runs = 0;
    int64_t *run_ts = malloc((rt->trace_n + 1) * sizeof *run_ts);
    int64_t *run_id = malloc((rt->trace_n + 1) * sizeof *run_id);
    for (size_t k = 0; run_ts && run_id && k < rt->trace_n; k++)
        if (rt->trace[k].tid == TRACE_RUN_LANE) {
            run_ts[n_runs] = rt->trace[k].ts_ns;
            run_id[n_runs++] = rt->trace[k].run;
        }
    for (int d = 1; d < rt->nd; d++) {
        const dev_trace *t = &rt->dev_trace[d];
        size_t n = t->spans ? atomic_load(&t->n) : 0;
        for (size_t i = 0; i < n && i < t->cap; i++) {
            const dev_span *sp = &t->spans[i];
            fprintf(f, "%s{\"name\": ", first ? "" : ",\n");
            first = 0;
            json_str(f, sp->name);
            fprintf(f,
                    ", \"cat\": \"device %s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                    "\"ts\": %.3f, \"dur\": %.3f",
                    sp->cat, 1 + d, sp->lane, (double)(sp->t0 - rt->trace_t0) / 1000.0,
                    (double)(sp->t1 - sp->t0) / 1000.0);
            span_args(f, rt, sp->step, run_at(run_ts, run_id, n_runs, sp->t0 - rt->trace_t0),
                      sp->bytes, mode);
        }
    }
    free(run_ts);
    free(run_id);
    fprintf(f, "\n]}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return baton__err_set(err, BATON_EIO, "%s: write failed", path);
    return 0;
}
