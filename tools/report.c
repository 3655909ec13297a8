/* report.c: `baton bench --report=FILE.html`: one self-contained HTML page (inline SVG and CSS,
 * nothing fetched) that shows the sync modes side by side: the plan's segments and boundaries,
 * per mode the latency distribution with p50 and p99 marked and the waits and launches per run,
 * and one traced run per mode as a timeline with host and device lanes, on one time scale, waits
 * in red. The timelines come from the Chrome trace the runtime writes (read back with Jansson). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"

#define W      1100 /* drawing width, px */
#define LANE_H 22

/* HTML text: escapes what could open markup. */
static void html(FILE *f, const char *s)
{
    for (; s && *s; s++)
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

static const char *color(const char *cat, int device)
{
    if (!cat)
        return "#999";
    if (strcmp(cat, "wait") == 0)
        return "#d62728";
    if (strcmp(cat, "graph") == 0)
        return "#1f77b4";
    if (strcmp(cat, "transfer") == 0 || strstr(cat, "copy"))
        return "#7f7f7f";
    if (strcmp(cat, "gate") == 0)
        return "#bcbd22";
    if (strstr(cat, "device graph"))
        return "#9467bd";
    if (device)
        return "#ff7f0e";
    return "#2ca02c";
}

static void machine(FILE *f)
{
    char host[256] = "?", cpu[256] = "?", line[512];
    gethostname(host, sizeof host);
    FILE *in = fopen("/proc/cpuinfo", "r");
    while (in && fgets(line, sizeof line, in))
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                snprintf(cpu, sizeof cpu, "%s", colon + 2);
                cpu[strcspn(cpu, "\n")] = 0;
            }
            break;
        }
    if (in)
        fclose(in);
    fputs("<tr><th>machine</th><td>", f);
    html(f, host);
    fputs(", ", f);
    html(f, cpu);
    fprintf(f, ", %ld CPUs</td></tr>\n", sysconf(_SC_NPROCESSORS_ONLN));
}

/* The plan's steps as boxes by device, grouped in segments, boundaries between them. */
static void segments(FILE *f, const baton_plan *plan)
{
    int n = baton_plan_step_count(plan);
    double bw = n ? (double)W / n : W;
    fprintf(f, "<div class=\"segments\"><svg class=\"segments\" width=\"%d\" height=\"46\">\n", W);
    int prev_seg = -1;
    for (int i = 0; i < n; i++) {
        baton_step_info si;
        baton_plan_step_info(plan, i, &si);
        char dev[32];
        baton_device_format(si.device, dev, sizeof dev);
        double x = i * bw;
        if (si.segment != prev_seg && i > 0)
            fprintf(f,
                    "<line class=\"boundary\" x1=\"%.1f\" y1=\"0\" x2=\"%.1f\" y2=\"46\" "
                    "stroke=\"#000\" stroke-width=\"2\"/>\n",
                    x, x);
        prev_seg = si.segment;
        fprintf(f, "<rect x=\"%.1f\" y=\"6\" width=\"%.1f\" height=\"24\" fill=\"%s\"><title>",
                x + 0.5, bw > 2 ? bw - 1 : bw,
                si.device.kind == BATON_DEVICE_CUDA ? "#ff7f0e" : "#2ca02c");
        html(f, si.name);
        fprintf(f, " (%s on %s, segment %d)</title></rect>\n", si.target, dev, si.segment);
    }
    fprintf(f,
            "<text x=\"0\" y=\"44\" class=\"small\">%d steps; orange: GPU, green: CPU; black "
            "lines: segment boundaries</text>\n</svg></div>\n",
            n);
}

static void histogram(FILE *f, const report_mode *m)
{
    const int H = 120, bins = 40;
    int64_t lo = m->lat_ns[0], hi = m->lat_ns[m->n - 1]; /* sorted */
    if (hi <= lo)
        hi = lo + 1;
    int count[40] = {0}, top = 1;
    for (int i = 0; i < m->n; i++) {
        int b = (int)((double)(m->lat_ns[i] - lo) / (double)(hi - lo) * (bins - 1));
        if (++count[b] > top)
            top = count[b];
    }
    fprintf(f, "<svg class=\"latency\" width=\"%d\" height=\"%d\">\n", W, H + 30);
    double bw = (double)W / bins;
    for (int b = 0; b < bins; b++) {
        double h = (double)count[b] / top * H;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#6baed6\"/>\n",
                b * bw, H - h, bw - 1, h);
    }
    struct {
        const char *cls;
        double us;
    } marks[2] = {{"p50", m->p50_us}, {"p99", m->p99_us}};
    for (int k = 0; k < 2; k++) {
        double x = (marks[k].us * 1e3 - (double)lo) / (double)(hi - lo) * (W - bw) + bw / 2;
        fprintf(f,
                "<line class=\"mark-%s\" x1=\"%.1f\" y1=\"0\" x2=\"%.1f\" y2=\"%d\" "
                "stroke=\"%s\" stroke-width=\"2\"/><text x=\"%.1f\" y=\"%d\" class=\"small\">%s "
                "%.2f µs</text>\n",
                marks[k].cls, x, x, H, k ? "#d62728" : "#000", x + 3, 12 + 14 * k, marks[k].cls,
                marks[k].us);
    }
    fprintf(f,
            "<text x=\"0\" y=\"%d\" class=\"small\">%.2f µs</text><text x=\"%d\" y=\"%d\" "
            "class=\"small\" text-anchor=\"end\">%.2f µs</text>\n</svg>\n",
            H + 16, (double)lo / 1e3, W, H + 16, (double)hi / 1e3);
}

/* One traced run: a lane per (process, thread) of the trace, spans on a common scale. */
static double last_run(const char *trace_path, double *start);

/* The last run of the trace (the ones before warm the tracer up). */
static void timeline(FILE *f, const char *trace_path, double scale_us)
{
    double run0 = 0, run_len = last_run(trace_path, &run0);
    json_error_t jerr;
    json_t *root = json_load_file(trace_path, 0, &jerr);
    json_t *ev = root ? json_object_get(root, "traceEvents") : NULL;
    if (!json_is_array(ev)) {
        fputs("<p>(no trace)</p>\n", f);
        json_decref(root);
        return;
    }
    /* lanes in order of first appearance; names from metadata */
    enum { MAX_LANES = 32 };
    int lane_pid[MAX_LANES], lane_tid[MAX_LANES], n_lanes = 0;
    const char *lane_name[MAX_LANES], *proc_name[MAX_LANES] = {0};
    double t0 = 1e300;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (!ph || strcmp(ph, "X") || (cat && strcmp(cat, "run") == 0))
            continue; /* the run itself is the page's time axis */
        double ts = json_number_value(json_object_get(e, "ts"));
        if (run_len > 0 && (ts < run0 || ts > run0 + run_len))
            continue;
        t0 = ts < t0 ? ts : t0;
        int pid = (int)json_integer_value(json_object_get(e, "pid"));
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        int k = 0;
        while (k < n_lanes && !(lane_pid[k] == pid && lane_tid[k] == tid))
            k++;
        if (k == n_lanes && n_lanes < MAX_LANES) {
            lane_pid[n_lanes] = pid;
            lane_tid[n_lanes] = tid;
            lane_name[n_lanes++] = "";
        }
    }
    json_array_foreach(ev, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        int thread = name && strcmp(name, "thread_name") == 0;
        if (!thread && (!name || strcmp(name, "process_name")))
            continue;
        int pid = (int)json_integer_value(json_object_get(e, "pid"));
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        const char *value = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
        for (int k = 0; k < n_lanes; k++)
            if (lane_pid[k] == pid && (!thread || lane_tid[k] == tid))
                *(thread ? &lane_name[k] : &proc_name[k]) = value;
    }
    const int label_w = 200, plot_w = W - label_w;
    fprintf(f, "<svg class=\"timeline\" width=\"%d\" height=\"%d\">\n", W, n_lanes * LANE_H + 24);
    for (int k = 0; k < n_lanes; k++) {
        fprintf(f, "<text x=\"0\" y=\"%d\" class=\"lane\">", k * LANE_H + 15);
        if (lane_pid[k] != 1 && proc_name[k]) {
            html(f, proc_name[k]);
            fputs(" · ", f);
        }
        html(f, lane_name[k] ? lane_name[k] : "?");
        fprintf(f, "</text><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#eee\"/>\n",
                label_w, k * LANE_H + LANE_H, W, k * LANE_H + LANE_H);
    }
    json_array_foreach(ev, i, e)
    {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (!ph || strcmp(ph, "X") || (cat && strcmp(cat, "run") == 0))
            continue;
        double at = json_number_value(json_object_get(e, "ts"));
        if (run_len > 0 && (at < run0 || at > run0 + run_len))
            continue;
        int pid = (int)json_integer_value(json_object_get(e, "pid"));
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        int k = 0;
        while (k < n_lanes && !(lane_pid[k] == pid && lane_tid[k] == tid))
            k++;
        if (k == n_lanes)
            continue;
        double ts = at - (run_len > 0 ? run0 : t0);
        double dur = json_number_value(json_object_get(e, "dur"));
        double x = label_w + ts / scale_us * plot_w, w = dur / scale_us * plot_w;
        int is_wait = cat && strcmp(cat, "wait") == 0;
        fprintf(f,
                "<rect class=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
                "fill=\"%s\"><title>",
                is_wait ? "wait" : "span", x, k * LANE_H + 3, w < 0.8 ? 0.8 : w, LANE_H - 6,
                color(cat, pid != 1));
        html(f, json_string_value(json_object_get(e, "name")));
        fprintf(f, ": %.2f µs at %.2f µs</title></rect>\n", dur, ts);
    }
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" class=\"small\">0</text><text x=\"%d\" y=\"%d\" "
            "class=\"small\" text-anchor=\"end\">%.1f µs</text>\n</svg>\n",
            label_w, n_lanes * LANE_H + 18, W, n_lanes * LANE_H + 18, scale_us);
    json_decref(root);
}

/* The last run of a trace (its run marker): start and length, µs; length 0 if none. */
static double last_run(const char *trace_path, double *start)
{
    json_t *root = json_load_file(trace_path, 0, NULL);
    json_t *ev = root ? json_object_get(root, "traceEvents") : NULL;
    double len = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (cat && strcmp(cat, "run") == 0) {
            len = json_number_value(json_object_get(e, "dur"));
            if (start)
                *start = json_number_value(json_object_get(e, "ts"));
        }
    }
    json_decref(root);
    return len;
}

int cli_report_write(const cli *c, const baton_plan *plan, const report_mode *modes, int n,
                     int ratios, double strict_p50, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "baton bench: --report=%s: cannot create it\n",
                cli_esc(c->report ? c->report : path));
        return EXIT_IO;
    }
    fputs("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>baton bench: ", f);
    html(f, baton_plan_name(plan));
    fputs("</title><style>\nbody{font:14px/1.4 sans-serif;margin:24px;color:#222}"
          "h1{font-size:22px}h2{font-size:18px;margin-top:28px}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
          ".small{font-size:11px;fill:#555}.lane{font-size:11px;fill:#222}"
          "section.mode{border-top:2px solid #ddd;margin-top:18px}"
          ".num{font-variant-numeric:tabular-nums;font-weight:bold}"
          ".legend span{display:inline-block;padding:0 6px;margin-right:6px;color:#fff}\n"
          "</style></head><body>\n<h1>baton bench: ",
          f);
    html(f, baton_plan_name(plan));
    fputs("</h1>\n<table class=\"meta\">\n", f);
    machine(f);
    fprintf(f, "<tr><th>baton</th><td>%s</td></tr>\n<tr><th>ran on</th><td>",
            baton_version_string());
    html(f, n ? modes[0].ran_on : "?");
    fprintf(f,
            "</td></tr>\n<tr><th>options</th><td>--gpu=%s, pdl %s, queue-ahead %s, %d timed runs "
            "per mode after %d warm-up runs</td></tr>\n</table>\n",
            c->opts.gpu == BATON_GPU_CUDA  ? "cuda"
            : c->opts.gpu == BATON_GPU_CPU ? "cpu"
            : c->opts.gpu == BATON_GPU_SIM ? "sim"
                                           : "auto",
            c->opts.disable_pdl ? "off" : "on", c->opts.disable_queue_ahead > 0 ? "off" : "on",
            modes[0].n, c->warmup);
    fputs("<h2>The plan: steps by device, segments and boundaries</h2>\n", f);
    segments(f, plan);
    fputs("<h2>Summary</h2>\n<table class=\"summary\"><tr><th>mode</th><th>ran on</th><th>p50 "
          "µs</th><th>p99 µs</th><th>host waits / run</th><th>launches / run</th><th>graph "
          "launches / run</th><th>strict/mode p50</th></tr>\n",
          f);
    for (int m = 0; m < n; m++) {
        fprintf(f, "<tr class=\"row-%s\"><td>%s</td><td>", baton_sync_mode_name(modes[m].mode),
                baton_sync_mode_name(modes[m].mode));
        html(f, modes[m].ran_on);
        fprintf(f, "</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>",
                modes[m].p50_us, modes[m].p99_us, modes[m].waits, modes[m].launches,
                modes[m].graphs);
        if (ratios)
            fprintf(f, "%.2fx", strict_p50 / modes[m].p50_us);
        else
            fputs("n/a (fallback or no strict mode)", f);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n<p class=\"legend\">Timelines: <span style=\"background:#2ca02c\">host "
          "step</span><span style=\"background:#1f77b4\">graph launch</span><span "
          "style=\"background:#7f7f7f\">copy</span><span style=\"background:#d62728\">host "
          "wait</span><span style=\"background:#ff7f0e\">device kernel</span><span "
          "style=\"background:#9467bd\">device graph</span> — one traced run per mode, all on "
          "the same time scale.</p>\n",
          f);
    double scale = 1;
    for (int m = 0; m < n; m++) {
        double len = modes[m].trace_path ? last_run(modes[m].trace_path, NULL) : 0;
        scale = len > scale ? len : scale;
    }
    for (int m = 0; m < n; m++) {
        const report_mode *r = &modes[m];
        const char *name = baton_sync_mode_name(r->mode);
        fprintf(f, "<section class=\"mode\" data-mode=\"%s\">\n<h2>%s</h2>\n", name, name);
        fprintf(f,
                "<p>p50 <span class=\"num p50\">%.2f</span> µs, p99 <span class=\"num "
                "p99\">%.2f</span> µs, host waits per run <span class=\"num "
                "waits\">%.2f</span>, launches per run <span class=\"num "
                "launches\">%.2f</span>, graph launches per run <span class=\"num "
                "graphs\">%.2f</span></p>\n",
                r->p50_us, r->p99_us, r->waits, r->launches, r->graphs);
        fputs("<h3>Latency per run</h3>\n", f);
        histogram(f, r);
        fputs("<h3>One run</h3>\n", f);
        if (r->trace_path)
            timeline(f, r->trace_path, scale);
        fputs("</section>\n", f);
    }
    fputs("</body></html>\n", f);
    int bad = ferror(f);
    if (fclose(f) || bad) {
        fprintf(stderr, "baton bench: --report=%s: write failed\n",
                cli_esc(c->report ? c->report : path));
        return EXIT_IO;
    }
    return 0;
}
