/* cli.h: what the files of the `baton` CLI share: the parsed command line, the exit codes and
 * the helpers that load a plan and bind its inputs. The CLI sees only the public headers.
 */
#ifndef BATON_TOOLS_CLI_H
#define BATON_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "baton/baton.h"

/* Exit codes: 0 success, 1 invalid plan, 2 bad usage, 3 a run failed (device, kernel, delegate),
 * 4 an input or output file could not be read or written. */
#define EXIT_PLAN        1
#define EXIT_USAGE       2
#define EXIT_RUN         3
#define EXIT_IO          4
#define MAX_BINDINGS     64
#define MAX_PLUGINS      16
#define MAX_NAME         512
#define CLI_MAX_INFLIGHT 64

typedef struct binding {
    char name[MAX_NAME];
    const char *path; /* points into argv */
} binding;

typedef struct cli {
    const char *cmd;
    const char *plan_path;
    int json;
    baton_options opts;
    const char *modes; /* bench */
    int iters, warmup;
    const char *format; /* bench: table, csv, json */
    int per_step;
    const char *trace;
    const char *report; /* bench: --report=FILE.html */
    int n_in, n_out;
    binding in[MAX_BINDINGS], out[MAX_BINDINGS];
    int print;
    int inflight;  /* bench: runs in flight on a baton_uv pool; 0: one at a time */
    int no_copies; /* bench --inflight: the timed runs bind nothing (the jobs copy nothing) */
    int help;      /* --help was given: print the command's usage and exit 0 */
    const char *plugins[MAX_PLUGINS]; /* --plugin, loaded in order before the plan */
    int n_plugins;
    /* --dim NAME=VALUE: the plan's dimensions bound before the inputs (run) */
    int n_dims;
    char dim_name[MAX_BINDINGS][MAX_NAME];
    long long dim_value[MAX_BINDINGS];
} cli;

/* args.c */
extern const char *cli_usage_main;
extern const char *cli_usage_tokenize; /* `baton tokenize`'s, printed by tokenize.c too */
void cli_print_usage(const char *cmd);
/* Parses argv[1..] (argv[1] is the command) into *c. No I/O and no exit: returns 0, or -1 with a
 * one-line message in msg, ready to print. */
int cli_parse(int argc, char **argv, cli *c, char *msg, size_t msglen);

/* text.c */
/* Copies src into dst (cap bytes, NUL-terminated) with control bytes, DEL, C1 controls and invalid
 * UTF-8 written as \xNN, so that nothing read from a file can drive the terminal; with
 * keep_newlines, '\n' and '\t' pass. Truncates with "...". Returns the length written. */
size_t cli_escape(const char *src, char *dst, size_t cap, int keep_newlines);
/* cli_escape into one of 8 rotating static buffers (1 KiB): for names in a printf. */
const char *cli_esc(const char *s);
/* The CLI's log callback (baton_log_set): "baton: warning: ..." on stderr, escaped. */
void cli_log(void *user, baton_log_level level, const char *message);
/* Rewrites the baton_options fields a library message names into the CLI's flags (--gpu=cpu). */
void cli_flags(const char *message, char *out, size_t cap);
/* Writes len bytes of text (newlines kept, NULs escaped) escaped to f. */
void cli_fputs_safe(const char *s, size_t len, FILE *f);
/* Levenshtein distance of a and b, or limit + 1 when it is larger (or a name is over 64 bytes). */
int cli_edit_distance(const char *a, const char *b, int limit);

/* report.c: the HTML report of `baton bench --report`. One entry per mode: its numbers, its
 * sorted latencies, and the Chrome trace of one run (a file). 0 or an exit code. */
typedef struct report_mode {
    baton_sync_mode mode;
    const char *ran_on;
    double p50_us, p99_us, waits, launches, graphs;
    const int64_t *lat_ns; /* sorted, n entries */
    int n;
    const char *trace_path;
} report_mode;
int cli_report_write(const cli *c, const baton_plan *plan, const report_mode *modes, int n,
                     int ratios, double strict_p50, const char *path);

/* common.c */
/* "baton: out of memory: cannot allocate <what> (<bytes>)" on stderr; returns EXIT_RUN. */
int cli_oom(const char *what, size_t bytes);
/* "N bytes, X GiB": what the arenas of one runtime of the plan take, into buf. */
const char *cli_arena_total(const baton_plan *plan, char *buf, size_t cap);
int cli_load(const cli *c, baton_registry **reg, baton_plan **plan);
/* Checks --input and --output names against the plan (an unknown name lists the choices), and
 * every --output and --trace path for writing, before anything runs. 0 or an exit code. */
int cli_check_bindings(const cli *c, const baton_plan *plan);
/* Reads every input of the plan into bufs[tensor index] (tensor count entries): from its --input
 * file, whose dtype and shape must be the tensor's, else seeded N(0, 1) values (with a note on
 * stderr when `note`). 0 or an exit code; on failure nothing is left allocated. */
int cli_read_inputs(const cli *c, const baton_plan *plan, void **bufs, int note);
void cli_free_inputs(const baton_plan *plan, void **bufs);
/* Sets every input of rt from bufs. 0 or an exit code. */
int cli_bind_inputs(const cli *c, const baton_plan *plan, baton_runtime *rt, void **bufs);
int64_t cli_clock_ns(void);

/* An output file written whole or not at all (cli_stage, then cli_commit or cli_discard). */
typedef struct cli_staged {
    const char *path;
    char tmp[4200]; /* where to write it */
    int direct;     /* a character device: written in place */
    int written;    /* tmp exists and is ours to remove */
} cli_staged;
int cli_stage(cli_staged *s, const char *path);
/* Creates a temporary file by mkstemp(tmpl) and registers it (tmpl must stay valid) to be removed
 * if a signal ends the command, with no moment where it exists unregistered; returns its
 * descriptor, or -1 with errno. cli_temp_remove forgets it once it is renamed or removed. */
int cli_temp_create(char *tmpl);
void cli_temp_remove(const char *path);
/* Installs the handler that removes the registered temporaries on SIGINT, SIGTERM and SIGHUP. */
void cli_clean_up_on_signals(void);
/* Renames every staged file over its path; on failure removes those not yet renamed. */
int cli_commit(cli_staged *s, int n);
void cli_discard(cli_staged *s, int n);

/* A one-line progress indicator on stderr: only on a terminal, without -q, for work estimated
 * from its first runs to take more than about 2 s; at most ~10 updates a second. */
typedef struct cli_progress {
    int on, shown;
    const char *what;
    int64_t total, t0, last;
} cli_progress;
void cli_progress_begin(cli_progress *p, const cli *c, const char *what, int64_t total);
void cli_progress_update(cli_progress *p, int64_t done);
void cli_progress_end(cli_progress *p); /* clears the line */

/* baton.c / bench.c */
int cmd_bench(cli *c);
/* `baton targets [--json] [--plugin=PATH]...` (targets.c): argv as main got it. */
int cmd_targets(int argc, char **argv);
/* `baton tokenize TOKENIZER.json ...` (tokenize.c): argv as main got it. */
int cmd_tokenize(int argc, char **argv);

#endif
