/* args.c: the CLI's usage text and its argument parser. cli_parse has no side effects (no I/O,
 * no exit, no globals) so that tests/fuzz/fuzz_cli_args.c can call it on any argv.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char *cli_usage_main =
    "usage: baton <command> [options] PLAN.json\n"
    "\n"
    "commands:\n"
    "  validate   check a plan file and report the first error (file:line:column)\n"
    "  inspect    show a plan's analysis: segments, boundaries, transfers, memory plan, waits\n"
    "  run        run a plan, reading inputs from and writing outputs to .npy files\n"
    "  bench      time runs of a plan in one or more sync modes\n"
    "\n"
    "`baton <command> --help` lists a command's options.\n"
    "exit codes: 0 success, 1 invalid plan, 2 bad usage, 3 run failed, 4 file error\n";

static const char *usage_common =
    "  --gpu=auto|cuda|cpu|sim  where cuda:N steps run (default auto: CUDA when present, else\n"
    "                           the CPU with a warning; sim: the test device)\n"
    "  --no-fallback            with --gpu=auto, a missing CUDA device is an error\n"
    "  --no-pdl                 do not use programmatic dependent launch between kernels\n"
    "  --no-queue-ahead         graph mode: do not queue a GPU segment before the CPU segment\n"
    "                           that feeds it (behind a gate the host opens)\n"
    "  -q, --quiet              no warnings\n";

void cli_print_usage(const char *cmd)
{
    if (!cmd) {
        fputs(cli_usage_main, stdout);
        return;
    }
    if (strcmp(cmd, "validate") == 0) {
        printf("usage: baton validate PLAN.json\n\nLoads, validates and analyses the plan; prints "
               "a one-line summary or the first error.\n");
    } else if (strcmp(cmd, "inspect") == 0) {
        printf("usage: baton inspect [--json] PLAN.json\n\nShows steps (with each step's next "
               "device), segments, boundaries,\ntransfers, the per-device memory plan and the "
               "host waits of each sync mode.\n  --json   machine-readable output\n");
    } else if (strcmp(cmd, "run") == 0) {
        printf(
            "usage: baton run [options] PLAN.json\n\n"
            "  --mode=strict|boundary|graph  sync mode (default graph)\n"
            "  --iters=N                     run N times (default 1); outputs are from the last\n"
            "  --input NAME=FILE.npy         bind an input (inputs not bound are filled with\n"
            "                                seeded N(0,1) values, with a note)\n"
            "  --output NAME=FILE.npy        write an output after the last run\n"
            "  --trace=FILE.json             write a Chrome trace (open it in Perfetto)\n"
            "  --print                       print every output's values, not just a summary\n");
        fputs(usage_common, stdout);
    } else if (strcmp(cmd, "bench") == 0) {
        printf("usage: baton bench [options] PLAN.json\n\n"
               "  --modes=LIST      comma-separated sync modes (default strict,boundary,graph)\n"
               "  --iters=N         timed runs per mode (default 100)\n"
               "  --warmup=N        untimed runs first (default 5)\n"
               "  --format=F        table (default), csv or json\n"
               "  --steps           also print host time per step\n");
        fputs(usage_common, stdout);
    } else {
        fputs(cli_usage_main, stdout);
    }
}

static int parse_binding(const char *arg, binding *b)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1] || (size_t)(eq - arg) >= sizeof b->name)
        return -1;
    memcpy(b->name, arg, (size_t)(eq - arg));
    b->name[eq - arg] = 0;
    b->path = eq + 1;
    return 0;
}

/* Returns the value of --opt=value or --opt value; advances *i for the latter. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt)
{
    size_t n = strlen(opt);
    if (strncmp(argv[*i], opt, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] == 0 && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

int cli_parse(int argc, char **argv, cli *c, char *msg, size_t msglen)
{
    memset(c, 0, sizeof *c);
    if (argc < 2 || !argv[1]) {
        snprintf(msg, msglen, "baton: no command given");
        return -1;
    }
    baton_options_init(&c->opts);
    c->iters = -1;
    c->warmup = 5;
    c->format = "table";
    c->modes = "strict,boundary,graph";
    c->cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            c->help = 1;
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            c->json = 1;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            c->opts.quiet = 1;
        } else if (strcmp(a, "--no-fallback") == 0) {
            c->opts.fallback_is_error = 1;
        } else if (strcmp(a, "--no-pdl") == 0) {
            c->opts.disable_pdl = 1;
        } else if (strcmp(a, "--no-queue-ahead") == 0) {
            c->opts.disable_queue_ahead = 1;
        } else if (strcmp(a, "--steps") == 0) {
            c->per_step = 1;
        } else if (strcmp(a, "--print") == 0) {
            c->print = 1;
        } else if ((v = opt_value(argc, argv, &i, "--mode"))) {
            if (baton_sync_mode_parse(v, &c->opts.mode)) {
                snprintf(msg, msglen, "baton: unknown mode '%s' (use strict, boundary or graph)",
                         v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--modes"))) {
            c->modes = v;
        } else if ((v = opt_value(argc, argv, &i, "--gpu"))) {
            if (strcmp(v, "auto") == 0)
                c->opts.gpu = BATON_GPU_AUTO;
            else if (strcmp(v, "cuda") == 0)
                c->opts.gpu = BATON_GPU_CUDA;
            else if (strcmp(v, "cpu") == 0)
                c->opts.gpu = BATON_GPU_CPU;
            else if (strcmp(v, "sim") == 0)
                c->opts.gpu = BATON_GPU_SIM;
            else {
                snprintf(msg, msglen, "baton: unknown --gpu '%s' (use auto, cuda, cpu or sim)", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--iters"))) {
            c->iters = atoi(v);
            if (c->iters < 1) {
                snprintf(msg, msglen, "baton: --iters needs a positive number, not '%s'", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--warmup"))) {
            c->warmup = atoi(v);
            if (c->warmup < 0) {
                snprintf(msg, msglen, "baton: --warmup needs a number >= 0, not '%s'", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--format"))) {
            if (strcmp(v, "table") && strcmp(v, "csv") && strcmp(v, "json")) {
                snprintf(msg, msglen, "baton: unknown --format '%s' (use table, csv or json)", v);
                return -1;
            }
            c->format = v;
        } else if ((v = opt_value(argc, argv, &i, "--trace"))) {
            c->trace = v;
        } else if ((v = opt_value(argc, argv, &i, "--input"))) {
            if (c->n_in == MAX_BINDINGS || parse_binding(v, &c->in[c->n_in++])) {
                snprintf(msg, msglen, "baton: --input takes NAME=FILE.npy, not '%s'", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--output"))) {
            if (c->n_out == MAX_BINDINGS || parse_binding(v, &c->out[c->n_out++])) {
                snprintf(msg, msglen, "baton: --output takes NAME=FILE.npy, not '%s'", v);
                return -1;
            }
        } else if (a[0] == '-') {
            snprintf(msg, msglen, "baton %s: unknown option '%s' (see baton %s --help)", c->cmd, a,
                     c->cmd);
            return -1;
        } else if (!c->plan_path) {
            c->plan_path = a;
        } else {
            snprintf(msg, msglen, "baton %s: one plan file at a time ('%s' and '%s')", c->cmd,
                     c->plan_path, a);
            return -1;
        }
    }
    if (!c->plan_path) {
        snprintf(msg, msglen, "baton %s: no plan file given (see baton %s --help)", c->cmd, c->cmd);
        return -1;
    }
    return 0;
}
