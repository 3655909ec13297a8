/* cli.h: what the files of the `baton` CLI share: the parsed command line, the exit codes and
 * the helpers that load a plan and bind its inputs. The CLI sees only the public headers.
 */
#ifndef BATON_TOOLS_CLI_H
#define BATON_TOOLS_CLI_H

#include <stdint.h>

#include "baton/baton.h"

/* Exit codes: 0 success, 1 invalid plan, 2 bad usage, 3 a run failed (device, kernel, delegate),
 * 4 an input or output file could not be read or written. */
#define EXIT_PLAN    1
#define EXIT_USAGE   2
#define EXIT_RUN     3
#define EXIT_IO      4
#define MAX_BINDINGS 64
#define MAX_NAME     512

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
    int n_in, n_out;
    binding in[MAX_BINDINGS], out[MAX_BINDINGS];
    int print;
    int help; /* --help was given: print the command's usage and exit 0 */
} cli;

/* args.c */
extern const char *cli_usage_main;
void cli_print_usage(const char *cmd);
/* Parses argv[1..] (argv[1] is the command) into *c. No I/O and no exit: returns 0, or -1 with a
 * one-line message in msg, ready to print. */
int cli_parse(int argc, char **argv, cli *c, char *msg, size_t msglen);

/* common.c */
int cli_load(const cli *c, baton_registry **reg, baton_plan **plan);
/* Binds every input of the plan: from its --input file, else seeded N(0, 1) values. */
int cli_bind_inputs(const cli *c, baton_plan *plan, baton_runtime *rt);
int64_t cli_clock_ns(void);

/* baton.c / bench.c */
int cmd_bench(cli *c);

#endif
