/* args.c: the CLI's usage text and its argument parser. cli_parse has no side effects (no I/O,
 * no exit, no globals) so that tests/fuzz/fuzz_cli_args.c can call it on any argv.
 */
#include <errno.h>
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
    "  targets    list the registered kernels and delegates (--json; --plugin=PATH adds a\n"
    "             plugin's)\n"
    "  tokenize   text to token ids and back with a model's tokenizer.json\n"
    "\n"
    "`baton <command> --help` lists a command's options.\n"
    "exit codes: 0 success, 1 invalid plan, 2 bad usage, 3 run failed, 4 file error\n";

const char *cli_usage_tokenize =
    "usage: baton tokenize TOKENIZER.json (--encode TEXT | --encode-file PATH | --decode IDS |\n"
    "                      --chat MESSAGES.json [--chat-format CHAT.json]\n"
    "                      [--no-generation-prompt]) [--no-special] [--skip-special] [--json]\n"
    "\n"
    "Encodes UTF-8 text into token ids (printed space-separated), or decodes comma-separated ids\n"
    "into text, with a Hugging Face tokenizer.json (the directory baton_export writes holds the\n"
    "model's). The ids are those of the tokenizers library's encode(text), the text that of its\n"
    "decode(ids); a tokenizer or a text baton cannot tokenize exactly is refused (exit 1).\n"
    "  --encode TEXT       the text to encode\n"
    "  --encode-file PATH  the text to encode, the file's bytes as they are\n"
    "  --decode IDS        ids to decode, as 1,2,3\n"
    "  --chat MESSAGES.json  a conversation ([{\"role\": \"user\", \"content\": \"...\"}, ...])\n"
    "                      through the model's chat template, compiled by baton_export into\n"
    "                      chat.json (--chat-format; default: beside TOKENIZER.json), and\n"
    "                      encoded as apply_chat_template(tokenize=True); --json adds the text\n"
    "  --no-generation-prompt  no prompt for the assistant's turn after the conversation\n"
    "  --no-special        encode without the post-processor's special tokens (a BOS)\n"
    "  --skip-special      decode without the special tokens\n"
    "  --json              print {\"ids\": [...]} or {\"text\": \"...\"} on one line (the text\n"
    "                      exact; without it, control bytes are printed as \\xNN)\n";

static const char *usage_common =
    "  --gpu=auto|cuda|cpu|sim  where cuda:N steps run (default auto: CUDA when present, else\n"
    "                           the CPU with a warning; sim: the test device)\n"
    "  --no-fallback            with --gpu=auto, a missing CUDA device is an error\n"
    "  --no-pdl                 do not use programmatic dependent launch between kernels\n"
    "  --no-queue-ahead         graph mode: do not queue a GPU segment before the CPU segment\n"
    "                           that feeds it (behind a gate the host opens)\n"
    "  --no-autotune            kernels that tune (RMSNorm on CUDA) keep their fixed default\n"
    "                           instead of the variant measured fastest at prepare (the same\n"
    "                           bits either way; for timings that must not depend on it)\n"
    "  --cpu-threads=N          threads for the CPU's steps: 1 the calling thread only, N at\n"
    "                           most N (default: every core; the same results either way)\n"
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
            "  --output NAME=FILE.npy        write an output (or a state tensor) after the last\n"
            "                                run\n"
            "  --dim NAME=VALUE              bind a dimension of the plan (\"dims\"); inputs\n"
            "                                given with --input bind theirs from their shapes\n"
            "  --trace=FILE.json             write a Chrome trace (open it in Perfetto)\n"
            "  --print                       print every output's values, not just a summary\n"
            "  --rank=R --world=N --rendezvous=PATH\n"
            "                                one process per GPU: run only the steps of cuda:R\n"
            "                                (rank R of N, plan devices cuda:0..cuda:N-1); the\n"
            "                                ranks meet through the file PATH, which must not\n"
            "                                exist yet (rank 0 writes it, and removes it once\n"
            "                                all have joined); outputs are read on the rank\n"
            "                                that makes them (docs/multi-gpu.md)\n"
            "  --rendezvous-timeout=S        how long a rank waits for the others (default 300)\n");
        fputs(usage_common, stdout);
    } else if (strcmp(cmd, "bench") == 0) {
        printf("usage: baton bench [options] PLAN.json\n\n"
               "  --modes=LIST      comma-separated sync modes (default strict,boundary,graph)\n"
               "  --iters=N         timed runs per mode (default 100)\n"
               "  --warmup=N        untimed runs first (default 5)\n"
               "  --format=F        table (default), csv or json\n"
               "  --steps           also print host time per step\n"
               "  --report=F.html   also write an HTML report: latency per mode, one traced run\n"
               "                    per mode as a timeline with host and device lanes\n"
               "  --inflight=N      instead: keep N runs in flight on a pool of N instances\n"
               "                    (include/baton/baton_uv.h) and print throughput, latency\n"
               "                    and the libuv loop's busy time per run\n"
               "  --queue-ahead     with --inflight above 4: queue ahead anyway (a pool of\n"
               "                    more than 4 instances does not by default)\n"
               "  --no-copies       with --inflight: the warm-up runs copy the inputs into every\n"
               "                    instance and the timed runs bind nothing, so the jobs' copies\n"
               "                    into and out of the instances are not timed (the plan's own\n"
               "                    transfers between host and GPU still are)\n");
        fputs(usage_common, stdout);
    } else if (strcmp(cmd, "tokenize") == 0) {
        fputs(cli_usage_tokenize, stdout);
    } else if (strcmp(cmd, "targets") == 0) {
        printf("usage: baton targets [--json] [--plugin=PATH]...\n\nLists every registered "
               "kernel and delegate: kind, devices, inputs, outputs,\nin-place aliases and "
               "attributes (docs/targets.md).\n  --json   machine-readable output\n");
    } else {
        fputs(cli_usage_main, stdout);
        return;
    }
    fputs("  --plugin=PATH            load kernels and delegates from a plugin's shared library\n"
          "                           before the plan (repeatable; docs/plugins.md)\n",
          stdout);
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

/* A decimal number in [lo, hi], all of v; 0 or -1. */
static int parse_count(const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return -1;
    *out = (int)x;
    return 0;
}

/* The options that take a value, so that one given last without it gets the right message. */
static int needs_value(const char *a)
{
    static const char *const with_value[] = {"--mode",   "--modes",    "--gpu",    "--iters",
                                             "--warmup", "--format",   "--trace",  "--input",
                                             "--output", "--inflight", "--plugin", "--report",
                                             "--dim",    "--rank",     "--world",  "--rendezvous"};
    for (size_t i = 0; i < sizeof with_value / sizeof with_value[0]; i++)
        if (strcmp(a, with_value[i]) == 0)
            return 1;
    return 0;
}

/* The commands each option belongs to; an option given to another command is an error rather
 * than silently ignored (bench --output wrote nothing). Options not listed apply to all. */
static const char *option_commands(const char *a)
{
    static const struct {
        const char *opt, *cmds;
    } table[] = {
        {"--json", "inspect"},
        {"--steps", "bench"},
        {"--print", "run"},
        {"--mode", "run"},
        {"--modes", "bench"},
        {"--gpu", "run bench"},
        {"--no-fallback", "run bench"},
        {"--no-pdl", "run bench"},
        {"--no-queue-ahead", "run bench"},
        {"--queue-ahead", "bench"},
        {"--no-copies", "bench"},
        {"--no-autotune", "run bench"},
        {"--cpu-threads", "run bench"},
        {"--iters", "run bench"},
        {"--warmup", "bench"},
        {"--inflight", "bench"},
        {"--format", "bench"},
        {"--report", "bench"},
        {"--trace", "run"},
        {"--input", "run bench"},
        {"--output", "run"},
        {"--dim", "run"},
        {"--rank", "run"},
        {"--world", "run"},
        {"--rendezvous", "run"},
        {"--rendezvous-timeout", "run"},
    };
    size_t n = strcspn(a, "=");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strlen(table[i].opt) == n && strncmp(a, table[i].opt, n) == 0)
            return table[i].cmds;
    return NULL;
}

static int word_in(const char *word, const char *list)
{
    size_t n = strlen(word);
    if (n == 0)
        return 0; /* strstr finds "" everywhere: this looped forever (found by fuzz_cli_args) */
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' '))
            return 1;
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

static int parse(int argc, char **argv, cli *c, char *msg, size_t msglen)
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
        const char *cmds = option_commands(a);
        if (cmds && !word_in(c->cmd, cmds)) {
            snprintf(msg, msglen, "baton %s: %.*s is not an option of %s (it is for: %s)", c->cmd,
                     (int)strcspn(a, "="), a, c->cmd, cmds);
            return -1;
        }
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
        } else if (strcmp(a, "--queue-ahead") == 0) {
            c->opts.disable_queue_ahead = -1;
        } else if (strcmp(a, "--no-copies") == 0) {
            c->no_copies = 1;
        } else if (strcmp(a, "--no-autotune") == 0) {
            c->opts.no_autotune = 1;
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
        } else if ((v = opt_value(argc, argv, &i, "--cpu-threads"))) {
            if (parse_count(v, 1, 4096, &c->opts.cpu_threads)) {
                snprintf(msg, msglen, "baton: --cpu-threads '%s' is not a count from 1 to 4096", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--rank"))) {
            if (parse_count(v, 0, 15, &c->opts.rank)) {
                snprintf(msg, msglen, "baton: --rank '%s' is not a rank from 0 to 15", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--world"))) {
            if (parse_count(v, 1, 16, &c->opts.world)) {
                snprintf(msg, msglen, "baton: --world '%s' is not a count of ranks from 1 to 16",
                         v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--rendezvous-timeout"))) {
            int sec = 0;
            if (parse_count(v, 1, 86400, &sec)) {
                snprintf(msg, msglen,
                         "baton: --rendezvous-timeout '%s' is not a number of seconds from 1 to "
                         "86400",
                         v);
                return -1;
            }
            c->opts.rendezvous_timeout_ms = sec * 1000;
        } else if ((v = opt_value(argc, argv, &i, "--rendezvous"))) {
            c->opts.rendezvous = v;
        } else if ((v = opt_value(argc, argv, &i, "--iters"))) {
            if (parse_count(v, 1, 1000000000, &c->iters)) {
                snprintf(msg, msglen,
                         "baton: --iters needs a number from 1 to 1000000000, not '%s'", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--warmup"))) {
            if (parse_count(v, 0, 1000000000, &c->warmup)) {
                snprintf(msg, msglen,
                         "baton: --warmup needs a number from 0 to 1000000000, not '%s'", v);
                return -1;
            }
        } else if ((v = opt_value(argc, argv, &i, "--inflight"))) {
            if (parse_count(v, 1, CLI_MAX_INFLIGHT, &c->inflight)) {
                snprintf(msg, msglen, "baton: --inflight needs a number from 1 to %d, not '%s'",
                         CLI_MAX_INFLIGHT, v);
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
        } else if ((v = opt_value(argc, argv, &i, "--report"))) {
            c->report = v;
        } else if ((v = opt_value(argc, argv, &i, "--plugin"))) {
            if (c->n_plugins == MAX_PLUGINS) {
                snprintf(msg, msglen, "baton: at most %d --plugin options", MAX_PLUGINS);
                return -1;
            }
            c->plugins[c->n_plugins++] = v;
        } else if ((v = opt_value(argc, argv, &i, "--dim"))) {
            const char *eq = strchr(v, '=');
            char *end = NULL;
            long long val = eq ? strtoll(eq + 1, &end, 10) : 0;
            if (!eq || eq == v || (size_t)(eq - v) >= MAX_NAME || !end || end == eq + 1 || *end ||
                val < 1) {
                snprintf(msg, msglen,
                         "baton: --dim takes NAME=VALUE, a dimension of the plan and a size >= 1 "
                         "(e.g. --dim seq=17), not '%.200s'",
                         v);
                return -1;
            }
            if (c->n_dims == MAX_BINDINGS) {
                snprintf(msg, msglen, "baton: at most %d --dim options", MAX_BINDINGS);
                return -1;
            }
            snprintf(c->dim_name[c->n_dims], MAX_NAME, "%.*s", (int)(eq - v), v);
            c->dim_value[c->n_dims++] = val;
        } else if ((v = opt_value(argc, argv, &i, "--input")) ||
                   (v = opt_value(argc, argv, &i, "--output"))) {
            int is_in = strncmp(a, "--input", 7) == 0;
            const char *opt = is_in ? "--input" : "--output";
            binding *list = is_in ? c->in : c->out;
            int *n = is_in ? &c->n_in : &c->n_out;
            if (*n == MAX_BINDINGS) {
                snprintf(msg, msglen, "baton: at most %d %s options", MAX_BINDINGS, opt);
                return -1;
            }
            if (parse_binding(v, &list[*n])) {
                snprintf(msg, msglen,
                         "baton: %s takes NAME=FILE.npy (a name under %d bytes), not '%s'", opt,
                         MAX_NAME, v);
                return -1;
            }
            for (int k = 0; k < *n; k++)
                if (strcmp(list[k].name, list[*n].name) == 0) {
                    snprintf(msg, msglen,
                             "baton: %s %s is given twice (%s and %s); give each name once", opt,
                             list[k].name, list[k].path, list[*n].path);
                    return -1;
                }
            ++*n;
        } else if (needs_value(a)) {
            snprintf(msg, msglen, "baton %s: %s needs a value (%s=VALUE)", c->cmd, a, a);
            return -1;
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
    if (c->no_copies && !c->inflight) {
        snprintf(msg, msglen,
                 "baton %s: --no-copies applies to runs in flight; add --inflight=N (one run at a "
                 "time, the CLI binds its inputs once and copies no output)",
                 c->cmd);
        return -1;
    }
    if ((c->opts.rank > 0 || c->opts.rendezvous) && c->opts.world == 0) {
        snprintf(msg, msglen,
                 "baton %s: --rank and --rendezvous need --world=N (the number of ranks)", c->cmd);
        return -1;
    }
    return 0;
}

int cli_parse(int argc, char **argv, cli *c, char *msg, size_t msglen)
{
    if (parse(argc, argv, c, msg, msglen) == 0)
        return 0;
    /* the message quotes arguments: escape what they hold (newlines, escape sequences), so it
     * stays one printable line (found by fuzz_cli_args) */
    char raw[1024];
    snprintf(raw, sizeof raw, "%s", msg);
    cli_escape(raw, msg, msglen, 0);
    return -1;
}
