/* generate.c: text generation with a causal LM exported by baton_export.export_causal_lm, through
 * the public API only. The prefill plan runs the prompt, its KV cache moves to the decode plan's
 * runtime by name, and the decode plan runs one token at a time (docs/generate.md).
 *
 *   build/generate DIR (--prompt 1,5,7 | --text TEXT [--no-special] |
 *                       --chat TEXT [--system TEXT]) --max-new-tokens N
 *                  [--print-text] [--stream]
 *                  [--gpu=auto|cuda|cpu|sim]
 *                  [--mode=strict|boundary|graph] [--temperature T --top-k K --top-p P --seed S]
 *                  [--sample-on=auto|host|device] [--warmup N] [--no-pdl] [--trace FILE]
 *                  [--queue-tokens] [--stop ID,ID,...|eos]
 *
 * Prints the generated ids space-separated as the last line of stdout, rates on stderr; with
 * --text, --chat or --print-text, the generated text before them (DIR/tokenizer.json and
 * DIR/chat.json, baton_tokenizer.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/baton.h"
#include "baton/baton_tokenizer.h"

#ifdef GENERATE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_PROMPT 65536
#define MAX_STOP   64

enum { SAMPLE_AUTO, SAMPLE_HOST, SAMPLE_DEVICE };

typedef struct gen_args {
    const char *dir;
    int64_t prompt[MAX_PROMPT];
    int n_prompt;
    long max_new;
    baton_options opts;
    int sampling;
    int sample_on; /* SAMPLE_AUTO, SAMPLE_HOST or SAMPLE_DEVICE (--sample-on) */
    double temperature, top_p;
    long top_k;
    unsigned long long seed;
    long warmup;
    const char *trace;      /* a Chrome trace of the decode runs after the first (--trace) */
    int queue_tokens;       /* --queue-tokens: greedy tokens stay on the GPU, runs queued */
    int64_t stop[MAX_STOP]; /* --stop: ids that end the generation (the id is printed) */
    int n_stop;
    int stop_eos;       /* --stop eos: the ids are config.json's eos_token_id */
    const char *text;   /* --text: the prompt as text, encoded with DIR/tokenizer.json */
    int print_text;     /* --print-text (implied by --text): the generated text on stdout */
    int stream;         /* --stream: that text printed as the tokens come */
    int no_special;     /* --no-special: --text without the tokenizer's special tokens (a BOS) */
    const char *chat;   /* --chat: a user message through DIR/chat.json, the model's template */
    const char *system; /* --system: the system message before it */
    char *chat_text;    /* the conversation's text (owned), then encoded as --text is */
} gen_args;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int usage(const char *msg)
{
    if (msg)
        fprintf(stderr, "generate: %s\n", msg);
    fprintf(
        stderr,
        "usage: generate DIR (--prompt ID,ID,... | --text TEXT | --chat TEXT [--system TEXT])\n"
        "                --max-new-tokens N\n"
        "                [--no-special] [--print-text] [--stream] [--gpu=auto|cuda|cpu|sim]\n"
        "                [--mode=strict|boundary|graph] [--temperature T] [--top-k K]\n"
        "                [--top-p P] [--seed S] [--sample-on=auto|host|device] [--warmup N]\n"
        "                [--no-pdl] [--trace FILE] [--queue-tokens] [--stop ID,ID,...|eos]\n"
        "DIR holds prefill.json, decode.json and weights.safetensors from\n"
        "baton_export.export_causal_lm. Greedy unless --temperature is given.\n"
        "--text encodes the prompt with DIR/tokenizer.json (as transformers' tokenizer(text)\n"
        "does, with its special tokens) and prints the generated text before the ids, as\n"
        "--print-text does for a --prompt of ids; --stream prints it token by token.\n"
        "--no-special encodes --text without the tokenizer's special tokens (a BOS): for a\n"
        "chat template written out in the text, special tokens and all.\n"
        "--chat TEXT [--system TEXT] gives the prompt as a user message (and a system one)\n"
        "through the model's chat template, DIR/chat.json (baton_export compiles it), with\n"
        "the prompt for the assistant's turn: apply_chat_template(add_generation_prompt=True).\n"
        "--sample-on: where sampling draws the token; auto (the default) is the decode's GPU\n"
        "when it runs on one (the logits stay there), else the host.\n"
        "--warmup N runs the prompt (and its first token's draw) N times before the timed\n"
        "prefill (for benchmarks).\n"
        "--no-pdl launches without programmatic dependent launch (to compare).\n"
        "--trace FILE writes a Chrome trace of the decode runs after the first (host spans,\n"
        "and every kernel's start and end on the GPU where CUPTI is available).\n"
        "--queue-tokens keeps greedy tokens on the GPU and queues the decode runs (CUDA; by\n"
        "default the host reads each token before the next run, which measured as fast).\n"
        "--stop ends the generation at the first of these ids (printed, as transformers does;\n"
        "eos: DIR/config.json's eos_token_id); without it, exactly --max-new-tokens ids.\n");
    return 2;
}

/* The value of "--name=V" or "--name V"; NULL when argv[*i] is not --name. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] == '\0' && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

static int parse_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno || end == s || *end ? -1 : 0;
}

static int parse_int(const char *s, long long *out)
{
    char *end;
    errno = 0;
    *out = strtoll(s, &end, 10);
    return errno || end == s || *end ? -1 : 0;
}

/* Token ids separated by commas into ids[*n ...], at most cap of them: 0, or -1 when v is not
 * such a list (*what says why). */
static int parse_ids(const char *v, int64_t *ids, int *n, int cap, const char **what)
{
    const char *p = v;
    *what = "takes token ids separated by commas, e.g. 1,5,7";
    if (!*p)
        return -1;
    while (*p) {
        char *end;
        errno = 0;
        long long id = strtoll(p, &end, 10);
        if (errno || end == p || id < 0 || (*end && *end != ',') || (*end == ',' && !end[1]))
            return -1;
        if (*n == cap) {
            *what = "has too many ids";
            return -1;
        }
        ids[(*n)++] = id;
        p = *end ? end + 1 : end;
    }
    return 0;
}

static int parse_args(int argc, char **argv, gen_args *a)
{
    baton_options_init(&a->opts);
    a->max_new = -1;
    a->temperature = 0;
    a->top_p = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        long long n;
        double d;
        const char *why;
        char msg[128];
        if ((v = opt_value(argc, argv, &i, "--prompt"))) {
            if (parse_ids(v, a->prompt, &a->n_prompt, MAX_PROMPT, &why)) {
                snprintf(msg, sizeof msg, "--prompt %s", why);
                return usage(msg);
            }
        } else if ((v = opt_value(argc, argv, &i, "--text"))) {
            a->text = v;
            a->print_text = 1;
        } else if ((v = opt_value(argc, argv, &i, "--chat"))) {
            a->chat = v;
            a->print_text = 1;
        } else if ((v = opt_value(argc, argv, &i, "--system"))) {
            a->system = v;
        } else if (strcmp(argv[i], "--print-text") == 0) {
            a->print_text = 1;
        } else if (strcmp(argv[i], "--no-special") == 0) {
            a->no_special = 1;
        } else if (strcmp(argv[i], "--stream") == 0) {
            a->print_text = a->stream = 1;
        } else if ((v = opt_value(argc, argv, &i, "--stop"))) {
            if (!strcmp(v, "eos")) {
                a->stop_eos = 1;
            } else if (parse_ids(v, a->stop, &a->n_stop, MAX_STOP, &why)) {
                snprintf(msg, sizeof msg, "--stop %s, or eos", why);
                return usage(msg);
            }
        } else if ((v = opt_value(argc, argv, &i, "--max-new-tokens"))) {
            if (parse_int(v, &n) || n < 1)
                return usage("--max-new-tokens takes an integer >= 1");
            a->max_new = (long)n;
        } else if ((v = opt_value(argc, argv, &i, "--gpu"))) {
            if (!strcmp(v, "auto"))
                a->opts.gpu = BATON_GPU_AUTO;
            else if (!strcmp(v, "cuda"))
                a->opts.gpu = BATON_GPU_CUDA;
            else if (!strcmp(v, "cpu"))
                a->opts.gpu = BATON_GPU_CPU;
            else if (!strcmp(v, "sim"))
                a->opts.gpu = BATON_GPU_SIM;
            else
                return usage("--gpu takes auto, cuda, cpu or sim");
        } else if (strcmp(argv[i], "--no-pdl") == 0) {
            a->opts.disable_pdl = 1;
        } else if ((v = opt_value(argc, argv, &i, "--mode"))) {
            if (baton_sync_mode_parse(v, &a->opts.mode) != 0)
                return usage("--mode takes strict, boundary or graph");
        } else if ((v = opt_value(argc, argv, &i, "--temperature"))) {
            if (parse_num(v, &d) || !(d > 0))
                return usage("--temperature takes a number > 0 (greedy is the default)");
            a->temperature = d;
            a->sampling = 1;
        } else if ((v = opt_value(argc, argv, &i, "--top-k"))) {
            if (parse_int(v, &n) || n < 0)
                return usage("--top-k takes an integer >= 0 (0: off)");
            a->top_k = (long)n;
        } else if ((v = opt_value(argc, argv, &i, "--top-p"))) {
            if (parse_num(v, &d) || !(d > 0 && d <= 1))
                return usage("--top-p takes a number in (0, 1]");
            a->top_p = d;
        } else if ((v = opt_value(argc, argv, &i, "--seed"))) {
            if (parse_int(v, &n) || n < 0)
                return usage("--seed takes an integer >= 0");
            a->seed = (unsigned long long)n;
        } else if ((v = opt_value(argc, argv, &i, "--sample-on"))) {
            if (!strcmp(v, "auto"))
                a->sample_on = SAMPLE_AUTO;
            else if (!strcmp(v, "host"))
                a->sample_on = SAMPLE_HOST;
            else if (!strcmp(v, "device"))
                a->sample_on = SAMPLE_DEVICE;
            else
                return usage("--sample-on takes auto, host or device");
        } else if (strcmp(argv[i], "--queue-tokens") == 0) {
            a->queue_tokens = 1;
        } else if ((v = opt_value(argc, argv, &i, "--trace"))) {
            a->trace = v;
        } else if ((v = opt_value(argc, argv, &i, "--warmup"))) {
            if (parse_int(v, &n) || n < 0)
                return usage("--warmup takes an integer >= 0");
            a->warmup = (long)n;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            return usage(NULL);
        } else if (argv[i][0] == '-' || a->dir) {
            fprintf(stderr, "generate: unknown argument '%s'\n", argv[i]);
            return usage(NULL);
        } else {
            a->dir = argv[i];
        }
    }
    if (a->stream && a->queue_tokens)
        return usage("--stream prints each token as it comes; --queue-tokens sees them every 64");
    if (a->no_special && !a->text)
        return usage("--no-special is how --text is encoded: it needs --text");
    if (!!a->text + !!a->n_prompt + !!a->chat > 1)
        return usage("--prompt, --text and --chat are three ways to give the prompt: one of them");
    if (a->system && !a->chat)
        return usage("--system is the system message of a --chat conversation: it needs --chat");
    if (!a->dir || (!a->n_prompt && !a->text && !a->chat) || a->max_new < 0)
        return usage("DIR, --prompt (or --text, or --chat) and --max-new-tokens are required");
    if (!a->sampling && (a->top_k || a->top_p != 1.0 || a->seed || a->sample_on))
        return usage("--top-k, --top-p, --seed and --sample-on need --temperature (sampling)");
    return 0;
}

/* Whether id ends the generation (--stop). */
static int is_stop(const gen_args *a, int64_t id)
{
    for (int k = 0; k < a->n_stop; k++)
        if (a->stop[k] == id)
            return 1;
    return 0;
}

static void skip_space(const char **p)
{
    while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r')
        (*p)++;
}

/* --stop eos: the ids of DIR/config.json's "eos_token_id", an id or a list of ids (the exporter
 * writes the model's). A scan for that key's value, not a JSON parser: the file is the
 * exporter's, and anything else there is not read. 0, or -1 with the reason on stderr. */
static int read_eos(gen_args *a)
{
    enum { CAP = 1 << 20 };
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", a->dir) >= (int)sizeof path) {
        fprintf(stderr, "generate: --stop eos: the path %s/config.json is too long\n", a->dir);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr,
                "generate: --stop eos: cannot open %s (%s); export the model with "
                "baton_export.export_causal_lm, or give the ids: --stop ID,ID,...\n",
                path, strerror(errno));
        return -1;
    }
    char *buf = malloc(CAP + 1);
    size_t n = buf ? fread(buf, 1, CAP + 1, f) : 0;
    fclose(f);
    if (!buf || n > CAP) {
        fprintf(stderr, "generate: --stop eos: %s\n",
                buf ? "config.json is larger than 1 MB: not the exporter's" : "out of memory");
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    int rc = -1, list, got = 0;
    const char *key = "\"eos_token_id\"", *p = strstr(buf, key);
    if (!p) {
        fprintf(stderr,
                "generate: --stop eos: %s has no \"eos_token_id\"; give the ids: --stop "
                "ID,ID,...\n",
                path);
        goto done;
    }
    p += strlen(key);
    skip_space(&p);
    if (*p++ != ':')
        goto bad;
    skip_space(&p);
    if (!strncmp(p, "null", 4)) {
        fprintf(stderr,
                "generate: --stop eos: %s: eos_token_id is null (the model names none); "
                "give the ids: --stop ID,ID,...\n",
                path);
        goto done;
    }
    list = *p == '[';
    if (list)
        p++;
    for (;;) {
        skip_space(&p);
        if (list && *p == ']' && !got)
            break; /* [] : refused below */
        char *end;
        errno = 0;
        long long id = strtoll(p, &end, 10);
        if (errno || end == p || id < 0 || a->n_stop == MAX_STOP)
            goto bad;
        a->stop[a->n_stop++] = id;
        got++;
        p = end;
        skip_space(&p);
        if (!list) {
            if (*p != ',' && *p != '}') /* not 2.5, 2e3 or "2" */
                goto bad;
            break;
        }
        if (*p == ']')
            break;
        if (*p++ != ',')
            goto bad;
    }
    if (!got) {
        fprintf(stderr,
                "generate: --stop eos: %s: eos_token_id is an empty list; give the ids: "
                "--stop ID,ID,...\n",
                path);
        goto done;
    }
    rc = 0;
    goto done;
bad:
    fprintf(stderr,
            "generate: --stop eos: %s: eos_token_id at byte %ld is not an id or a list of at most "
            "%d ids\n",
            path, (long)(p - buf), MAX_STOP);
done:
    free(buf);
    return rc;
}

/* DIR/tokenizer.json, for --text and --print-text: 0, or 1 with the reason on stderr. */
static int load_tokenizer(const gen_args *a, baton_tokenizer **tok)
{
    char path[4096];
    baton_error err;
    if (snprintf(path, sizeof path, "%s/tokenizer.json", a->dir) >= (int)sizeof path) {
        fprintf(stderr, "generate: the path %s/tokenizer.json is too long\n", a->dir);
        return 1;
    }
    if (baton_tokenizer_load(path, tok, &err)) {
        fprintf(stderr, "generate: %s%s\n", err.message,
                err.code == BATON_EIO ? " (baton_export copies the model's tokenizer.json into "
                                        "DIR; or give ids: --prompt ID,ID,...)"
                                      : "");
        return 1;
    }
    return 0;
}

/* --text: the prompt's ids, with the tokenizer's special tokens (a BOS) unless --no-special, as
 * transformers' tokenizer(text, add_special_tokens=...) gives them. 0, or 1 with the reason on
 * stderr. */
static int encode_prompt(gen_args *a, const baton_tokenizer *tok)
{
    baton_error err;
    size_t n = 0;
    int rc = baton_tokenizer_encode(tok, a->text, strlen(a->text), !a->no_special, a->prompt,
                                    MAX_PROMPT, &n, &err);
    if (n > MAX_PROMPT || (rc == 0 && n == 0)) { /* n: the whole encoding's, past the cap too */
        fprintf(stderr, "generate: --text makes %zu ids: a prompt has 1 to %d\n", n, MAX_PROMPT);
        return 1;
    }
    if (rc) {
        fprintf(stderr, "generate: --text: %s\n", err.message);
        return 1;
    }
    a->n_prompt = (int)n;
    return 0;
}

/* --chat: the conversation (--system's message, then --chat's) as the model's chat template writes
 * it with the generation prompt (DIR/chat.json), into a->text, to be encoded without the
 * tokenizer's special tokens: the template writes them, as apply_chat_template(tokenize=True). 0,
 * or 1 with the reason on stderr. */
static int chat_prompt(gen_args *a)
{
    char path[4096];
    baton_error err;
    baton_chat *chat = NULL;
    if (snprintf(path, sizeof path, "%s/chat.json", a->dir) >= (int)sizeof path) {
        fprintf(stderr, "generate: the path %s/chat.json is too long\n", a->dir);
        return 1;
    }
    if (baton_chat_load(path, &chat, &err)) {
        fprintf(stderr, "generate: --chat: %s%s\n", err.message,
                err.code == BATON_EIO ? " (baton_export writes DIR/chat.json from the tokenizer's "
                                        "chat template; without one, give the conversation "
                                        "written out: --text TEXT --no-special)"
                                      : "");
        return 1;
    }
    const baton_chat_message m[2] = {{"system", a->system, 0}, {"user", a->chat, 0}};
    const baton_chat_message *first = a->system ? m : m + 1;
    const size_t n = a->system ? 2 : 1;
    size_t len;
    int rc = baton_chat_render(chat, first, n, 1, NULL, 0, &len, &err);
    if (!rc && !(a->chat_text = malloc(len + 1)))
        snprintf(err.message, sizeof err.message, "out of memory"), rc = BATON_ENOMEM;
    if (!rc)
        rc = baton_chat_render(chat, first, n, 1, a->chat_text, len + 1, &len, &err);
    baton_chat_free(chat);
    if (rc) {
        fprintf(stderr, "generate: --chat: %s\n", err.message);
        return 1;
    }
    a->text = a->chat_text;
    a->no_special = 1;
    return 0;
}

/* --print-text's output: the generated ids' text without special tokens (as transformers'
 * decode(ids, skip_special_tokens=True) shows it) on stdout, once at the end, or with --stream as
 * the tokens come, through an incremental decoder (each token's cost its own, not the text's so
 * far; a character that a byte token begins is printed when it is complete). */
typedef struct text_out {
    const baton_tokenizer *tok;
    baton_tokenizer_decoder *dec; /* --stream */
    long pushed;                  /* the ids given to dec */
} text_out;

static int text_fail(const baton_error *err)
{
    fprintf(stderr, "generate: --print-text: %s\n", err->message);
    return 1;
}

/* The text of ids[0 .. n) not yet printed; last: all of it, a newline and a note of ids without a
 * token. 0, or 1 with the reason on stderr. */
static int text_show(text_out *o, const int64_t *ids, long n, int last)
{
    baton_error err;
    const char *piece;
    size_t len;
    for (; o->dec && o->pushed < n; o->pushed++) {
        if (baton_tokenizer_decoder_push(o->dec, ids[o->pushed], &piece, &len, &err))
            return text_fail(&err);
        fwrite(piece, 1, len, stdout);
    }
    if (!last) {
        fflush(stdout);
        return 0;
    }
    if (o->dec) {
        if (baton_tokenizer_decoder_finish(o->dec, &piece, &len, &err))
            return text_fail(&err);
        fwrite(piece, 1, len, stdout);
    } else {
        char *text = NULL;
        if (baton_tokenizer_decode(o->tok, ids, (size_t)n, 1, NULL, 0, &len, &err) ||
            !(text = malloc(len + 1)) ||
            baton_tokenizer_decode(o->tok, ids, (size_t)n, 1, text, len + 1, &len, &err)) {
            if (!text)
                snprintf(err.message, sizeof err.message, "out of memory");
            free(text);
            return text_fail(&err);
        }
        fwrite(text, 1, len, stdout);
        free(text);
    }
    putchar('\n');
    long missing = 0; /* ids the model has and its tokenizer not (a padded vocabulary) */
    for (long i = 0; i < n; i++)
        missing += baton_tokenizer_id_token(o->tok, ids[i]) == NULL;
    if (missing)
        fprintf(stderr,
                "generate: --print-text: %ld of the ids have no token in tokenizer.json (the "
                "model's vocabulary is larger): left out of the text, as transformers' decode "
                "leaves them out\n",
                missing);
    return 0;
}

static int fail(const char *what, const baton_error *err)
{
    fprintf(stderr, "generate: %s: %s\n", what, err->message);
    return 1;
}

static int load(baton_registry *reg, const char *dir, const char *file, baton_plan **plan,
                baton_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return baton_plan_load(reg, path, plan, err);
}

/* Index of the largest logit (the first one on ties, as torch.argmax). */
static int64_t argmax_row(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* The sampler: a one-step plan around the `sample` kernel, made from the command line's
 * settings, so a decode plan needs no re-export to change them; on `device` ("cpu", or "cuda:0"
 * beside a decode on that GPU, with the runtime options `opts`). */
static int make_sampler(baton_registry *reg, const gen_args *a, baton_dtype logits_dtype,
                        int64_t vocab, const char *device, const baton_options *opts,
                        baton_plan **plan, baton_runtime **rt, baton_error *err)
{
    char json[2048];
    snprintf(json, sizeof json,
             "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"sampler\", \"tensors\": ["
             "{\"name\": \"logits\", \"dtype\": \"%s\", \"shape\": [1, %" PRId64 "], "
             "\"role\": \"input\"},"
             "{\"name\": \"step\", \"dtype\": \"i64\", \"shape\": [1], \"role\": \"input\"},"
             "{\"name\": \"ids\", \"dtype\": \"i64\", \"shape\": [1], \"role\": \"output\"}],"
             "\"steps\": [{\"name\": \"sample\", \"kernel\": \"sample\", \"device\": \"%s\", "
             "\"inputs\": [\"logits\", \"step\"], \"outputs\": [\"ids\"], \"attrs\": "
             "{\"temperature\": %.17g, \"top_k\": %ld, \"top_p\": %.17g, \"seed\": %llu}}]}",
             baton_dtype_name(logits_dtype), vocab, device, a->temperature, a->top_k, a->top_p,
             a->seed);
    int rc = baton_plan_load_string(reg, json, strlen(json), "sampler", NULL, plan, err);
    if (rc == 0)
        rc = baton_runtime_create(*plan, opts, rt, err);
    return rc;
}

/* The next token from a row of logits: argmax on the host, or the sampler plan (row NULL: the
 * logits are already in the device buffer the sampler's input is bound to). */
static int next_token(baton_runtime *sampler, const void *row, size_t row_bytes, baton_dtype dtype,
                      float *row_f32, int64_t vocab, int64_t step, int64_t *tok, baton_error *err)
{
    if (!sampler) {
        if (baton_convert(row_f32, BATON_DTYPE_F32, row, dtype, vocab) != 0) {
            snprintf(err->message, sizeof err->message, "logits of dtype %s cannot be read",
                     baton_dtype_name(dtype));
            return BATON_EINVAL;
        }
        *tok = argmax_row(row_f32, vocab);
        return 0;
    }
    int rc = row ? baton_runtime_set_input(sampler, "logits", row, row_bytes, err) : 0;
    if (rc == 0)
        rc = baton_runtime_set_input(sampler, "step", &step, sizeof step, err);
    if (rc == 0)
        rc = baton_runtime_run(sampler, err);
    if (rc == 0)
        rc = baton_runtime_get_output(sampler, "ids", tok, sizeof *tok, err);
    return rc;
}

/* Binds tensor `name` of rt to `p` on cuda:0 (on the test device, host memory). */
static int bind_dev(baton_runtime *rt, const baton_plan *plan, const char *name, void *p,
                    baton_error *err)
{
    baton_tensor_info ti;
    int t = baton_plan_tensor_index(plan, name);
    if (t < 0 || baton_plan_tensor_info(plan, t, &ti))
        return BATON_EINVAL;
    baton_buffer b = {{BATON_DEVICE_CUDA, 0}, p, ti.nbytes, ti.desc.dtype};
    return baton_runtime_bind(rt, t, &b, err);
}

/* Sampling on the decode's GPU: the decode plan's logits output and the sampler's logits input
 * are bound to one buffer there (cudaMalloc; host memory on the test device), so a token brings 8
 * bytes to the host rather than the logits (256 KB for a 128k vocabulary in bf16), and the draw
 * runs on the GPU instead of the host's cores. */
typedef struct dev_row {
    void *p;
    int cuda; /* cudaMalloc'd (else host memory, for BATON_GPU_SIM) */
} dev_row;

static int dev_row_alloc(dev_row *r, size_t n, int cuda)
{
    r->cuda = cuda;
#ifdef GENERATE_CUDA
    if (cuda)
        return cudaMalloc(&r->p, n) == cudaSuccess ? 0 : -1;
#endif
    r->p = aligned_alloc(BATON_ARENA_ALIGN,
                         (n + BATON_ARENA_ALIGN - 1) / BATON_ARENA_ALIGN * BATON_ARENA_ALIGN);
    return r->p ? 0 : -1;
}

static void dev_row_free(dev_row *r)
{
#ifdef GENERATE_CUDA
    if (r->cuda) {
        cudaFree(r->p);
        r->p = NULL;
        return;
    }
#endif
    free(r->p);
    r->p = NULL;
}

#ifdef GENERATE_CUDA
/* Greedy decode with the tokens kept on the GPU (a decode plan with next_token, CUDA, boundary or
 * graph mode). The decode runtime runs on generate's own stream (baton_options.streams), and
 * input_ids, cache_position and next_token are bound once to three device slots, so the captured
 * graph never changes. Between runs generate queues, on that stream, the copies that carry a
 * token into the next run: next_token to input_ids and to the host's list of ids, and the next
 * position from a pinned host array. The runs are queued (baton_runtime_run_async) and the GPU
 * goes from one token's graph to the next without the host; the host waits every QUEUE_CHUNK
 * tokens. Run 1 captures; the timed runs start at 2. */
#define QUEUE_CHUNK 64
#define SLOT        256 /* BATON_ARENA_ALIGN: every bound buffer starts on it */

typedef struct decode_times {
    double first, rest, host; /* run 1; runs 2.. (to the last wait); host time outside runs */
    baton_run_stats st0, st1;
} decode_times;

static int cuda_fail(baton_error *err, const char *what, cudaError_t e)
{
    snprintf(err->message, sizeof err->message, "%s: %s", what, cudaGetErrorString(e));
    return BATON_ECUDA;
}

static int decode_queued(baton_runtime *rt, const baton_plan *plan, cudaStream_t s, int64_t T,
                         const gen_args *a, long *n_out, int64_t *out_ids, decode_times *tm,
                         baton_error *err)
{
    const long max_new = *n_out;
    long seen = 0;  /* tokens checked for a --stop id, at the waits */
    char *d = NULL; /* three slots: input_ids, cache_position, next_token */
    int64_t *h_pos = NULL, *h_ids = NULL;
    const size_t n = (size_t)max_new;
    cudaError_t e = cudaMalloc((void **)&d, 3 * SLOT);
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&h_pos, n * sizeof *h_pos);
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&h_ids, n * sizeof *h_ids);
    int rc = e == cudaSuccess ? 0 : cuda_fail(err, "allocating the token slots", e);
    char *d_in = d, *d_pos = d + SLOT, *d_out = d + 2 * SLOT;
    for (long i = 1; !rc && i < max_new; i++)
        h_pos[i] = T + i - 1; /* run i's position */
    if (!rc && (e = cudaMemcpy(d_in, &out_ids[0], sizeof(int64_t), cudaMemcpyHostToDevice)))
        rc = cuda_fail(err, "the first token to the GPU", e);
    if (!rc)
        rc = bind_dev(rt, plan, "input_ids", d_in, err);
    if (!rc)
        rc = bind_dev(rt, plan, "cache_position", d_pos, err);
    if (!rc)
        rc = bind_dev(rt, plan, "next_token", d_out, err);
    double t = now_s();
    for (long i = 1; !rc && i < max_new; i++) {
        double th = now_s();
        if (i == 2) {
            tm->first = th - t;
            t = th;
            tm->host = 0;
            baton_runtime_stats(rt, &tm->st0);
        }
        e = cudaMemcpyAsync(d_pos, &h_pos[i], sizeof *h_pos, cudaMemcpyHostToDevice, s);
        tm->host += now_s() - th;
        if (e) {
            rc = cuda_fail(err, "queueing the position", e);
            break;
        }
        rc = baton_runtime_run_async(rt, err);
        th = now_s();
        if (!rc) { /* after run i on the stream: its token to the list and into run i + 1 */
            e = cudaMemcpyAsync(&h_ids[i], d_out, sizeof *h_ids, cudaMemcpyDeviceToHost, s);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(d_in, d_out, sizeof(int64_t), cudaMemcpyDeviceToDevice, s);
            if (e)
                rc = cuda_fail(err, "queueing the token's copies", e);
        }
        tm->host += now_s() - th;
        if (!rc && (i == 1 || i % QUEUE_CHUNK == 0 || i == max_new - 1)) {
            rc = baton_runtime_wait(rt, err);
            if (!rc && (e = cudaStreamSynchronize(s))) /* the copies queued after the run */
                rc = cuda_fail(err, "cudaStreamSynchronize", e);
            /* a --stop id among the tokens landed since the last wait ends it there (the runs
             * queued after it in the chunk are spent) */
            while (!rc && seen < i)
                if (is_stop(a, h_ids[++seen])) {
                    *n_out = seen + 1;
                    break;
                }
            if (*n_out < max_new)
                break;
        }
    }
    tm->rest = now_s() - t;
    baton_runtime_stats(rt, &tm->st1);
    for (long i = 1; !rc && i < *n_out; i++)
        out_ids[i] = h_ids[i];
    baton_runtime_wait(rt, NULL); /* nothing of a failed run may still use the buffers */
    cudaStreamSynchronize(s);
    baton_error ignore = {0};
    const char *names[3] = {"input_ids", "cache_position", "next_token"};
    for (int k = 0; k < 3; k++)
        baton_runtime_bind(rt, baton_plan_tensor_index(plan, names[k]), NULL, &ignore);
    cudaFree(d);
    cudaFreeHost(h_pos);
    cudaFreeHost(h_ids);
    return rc;
}
#endif

int main(int argc, char **argv)
{
    static gen_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    if (a.stop_eos && read_eos(&a))
        return 1;
    baton_tokenizer *tok = NULL;
    if (a.print_text && load_tokenizer(&a, &tok))
        return 1;
    text_out shown = {tok, NULL, 0};
    if (a.stream) {
        baton_error err;
        if (baton_tokenizer_decoder_create(tok, 1, &shown.dec, &err)) {
            baton_tokenizer_free(tok);
            return text_fail(&err);
        }
    }
    if ((a.chat && chat_prompt(&a)) || (a.text && encode_prompt(&a, tok))) {
        baton_tokenizer_decoder_destroy(shown.dec);
        baton_tokenizer_free(tok);
        free(a.chat_text);
        return 1;
    }
    free(a.chat_text); /* encoded: a.prompt holds its ids */
    a.text = a.chat_text = NULL;

    baton_error err = {0};
    baton_registry *reg = NULL;
    baton_plan *pre = NULL, *dec = NULL, *samp_plan = NULL;
    baton_runtime *pre_rt = NULL, *dec_rt = NULL, *samp_rt = NULL;
    void *logits = NULL, *state = NULL;
    dev_row drow = {NULL, 0}; /* the logits on the decode's GPU, when it samples there */
    float *row_f32 = NULL;
    int64_t *out_ids = NULL;
    int status = 1;
#ifdef GENERATE_CUDA
    cudaStream_t dec_stream = NULL; /* decode_queued's stream (freed at out:) */
#endif
    double t0 = now_s();

    if (baton_registry_create(&reg) != 0)
        return 1;
    /* 1. Both plans, and one runtime each. They read the same weights.safetensors. */
    if (load(reg, a.dir, "prefill.json", &pre, &err) ||
        load(reg, a.dir, "decode.json", &dec, &err)) {
        fail("loading the plans", &err);
        goto out;
    }
    baton_options dec_opts = a.opts;
#ifdef GENERATE_CUDA
    /* Greedy on the GPU (the plan's next_token) on CUDA: the decode runtime runs on a stream of
     * generate's own, where decode_queued queues each token's copies between the runs. */
    baton_stream dec_bs;
    if (a.queue_tokens && !a.sampling && !a.trace && a.opts.mode != BATON_SYNC_STRICT &&
        baton_plan_tensor_index(dec, "next_token") >= 0 &&
        (a.opts.gpu == BATON_GPU_CUDA || a.opts.gpu == BATON_GPU_AUTO) &&
        baton_cuda_device_count() > 0 &&
        cudaStreamCreateWithFlags(&dec_stream, cudaStreamNonBlocking) == cudaSuccess) {
        dec_bs.device = (baton_device){BATON_DEVICE_CUDA, 0};
        dec_bs.stream = dec_stream;
        dec_opts.streams = &dec_bs;
        dec_opts.n_streams = 1;
    }
#endif
    if (baton_runtime_create(pre, &a.opts, &pre_rt, &err) ||
        baton_runtime_create(dec, &dec_opts, &dec_rt, &err)) {
        fail("preparing the plans", &err);
        goto out;
    }
    /* The decode runtime reads and appends the prefill runtime's KV cache (its state tensors,
     * by name): no copy per prompt. A build or plan pair that cannot share copies instead. */
    baton_error serr = {0};
    int shared = baton_runtime_share_state(dec_rt, pre_rt, &serr) == 0;
    if (!shared)
        fprintf(stderr, "generate: the KV cache is copied per prompt (%s)\n", serr.message);
    double t_loaded = now_s();

    /* 2. Sizes from the decode plan: logits [1, 1, vocab], caches [max_seq_len, ...]. */
    baton_tensor_info li, ki;
    int lt = baton_plan_tensor_index(dec, "logits"), kt = baton_plan_tensor_index(dec, "k_cache.0");
    if (lt < 0 || kt < 0 || baton_plan_tensor_info(dec, lt, &li) ||
        baton_plan_tensor_info(dec, kt, &ki) || li.desc.rank != 3) {
        fprintf(stderr,
                "generate: %s/decode.json has no logits [1, 1, vocab] or k_cache.0; "
                "export it with baton_export.export_causal_lm\n",
                a.dir);
        goto out;
    }
    /* A decode plan exported with decode_outputs=("next_token",) picks the greedy token on its
     * device: a token is then 8 bytes back to the host, not the logits. */
    baton_tensor_info ti;
    int nt = baton_plan_tensor_index(dec, "next_token");
    const int dec_token = nt >= 0 && baton_plan_tensor_info(dec, nt, &ti) == 0 &&
                          ti.role == BATON_ROLE_OUTPUT && ti.desc.dtype == BATON_DTYPE_I64 &&
                          ti.nbytes == sizeof(int64_t);
    const int dec_logits = li.role == BATON_ROLE_OUTPUT;
    const int greedy_on_device = dec_token && !a.sampling; /* read next_token, not the logits */
    if (!dec_logits && (a.sampling || !dec_token)) {
        fprintf(stderr,
                "generate: %s/decode.json outputs no logits%s; export it with "
                "decode_outputs=(\"logits\",) to sample on the host\n",
                a.dir, dec_token ? ", only the greedy next_token" : "");
        goto out;
    }
    int64_t vocab = li.desc.shape[2], max_seq = ki.desc.shape[0];
    size_t esize = baton_dtype_size(li.desc.dtype), row_bytes = (size_t)vocab * esize;
    int64_t T = a.n_prompt;
    if (T + a.max_new > max_seq) {
        fprintf(stderr,
                "generate: the prompt (%" PRId64 ") plus --max-new-tokens (%ld) exceed the "
                "plans' max_seq_len %" PRId64 "; re-export with a larger max_seq_len\n",
                T, a.max_new, max_seq);
        goto out;
    }
    for (int i = 0; i < a.n_prompt; i++)
        if (a.prompt[i] >= vocab) {
            fprintf(stderr,
                    "generate: prompt token %" PRId64 " is outside the vocabulary (%" PRId64
                    " ids)\n",
                    a.prompt[i], vocab);
            goto out;
        }
    for (int i = 0; i < a.n_stop; i++)
        if (a.stop[i] >= vocab) { /* never drawn: a stop that cannot stop */
            fprintf(stderr,
                    "generate: --stop id %" PRId64 "%s is outside the vocabulary (%" PRId64
                    " ids)\n",
                    a.stop[i], a.stop_eos ? " (config.json's eos_token_id)" : "", vocab);
            goto out;
        }
    logits = malloc((size_t)T * row_bytes);
    row_f32 = malloc((size_t)vocab * sizeof *row_f32);
    out_ids = malloc((size_t)a.max_new * sizeof *out_ids);
    if (!logits || !row_f32 || !out_ids) {
        fprintf(stderr, "generate: out of memory\n");
        goto out;
    }
    /* Sampling on the decode's GPU where it runs on one (CUDA, or the test device), else on the
     * host: the same selections and draw either way (docs/targets.md; the weights' exp is each
     * device's own, so a draw that falls within their last bits can differ). */
    const baton_gpu_backend gb = baton_runtime_gpu_backend(dec_rt);
    int samp_dev = a.sampling && a.sample_on != SAMPLE_HOST && dec_logits &&
                   (gb == BATON_GPU_CUDA || gb == BATON_GPU_SIM);
    if (a.sampling && a.sample_on == SAMPLE_DEVICE && !samp_dev) {
        fprintf(stderr,
                "generate: --sample-on=device: the decode runs on no GPU here (--gpu=%s); "
                "use --sample-on=host or a GPU\n",
                gb == BATON_GPU_CPU ? "cpu" : "auto without a device");
        goto out;
    }
    if (samp_dev) {
        if (make_sampler(reg, &a, li.desc.dtype, vocab, "cuda:0", &a.opts, &samp_plan, &samp_rt,
                         &err) ||
            dev_row_alloc(&drow, row_bytes, gb == BATON_GPU_CUDA) ||
            bind_dev(dec_rt, dec, "logits", drow.p, &err) ||
            bind_dev(samp_rt, samp_plan, "logits", drow.p, &err)) {
            if (!err.message[0])
                snprintf(err.message, sizeof err.message, "no memory for the logits on the GPU");
            fail("the sampler on the decode's GPU", &err);
            goto out;
        }
    } else if (a.sampling && make_sampler(reg, &a, li.desc.dtype, vocab, "cpu", NULL, &samp_plan,
                                          &samp_rt, &err)) {
        fail("the sampler", &err);
        goto out;
    }
    if (a.sampling)
        fprintf(stderr, "sampling: on %s\n",
                samp_dev ? "the decode's GPU (the logits stay there)" : "the host");

    /* 3. Prefill: bind the prompt length to the plan's "seq" dim, then the inputs. */
    int64_t *pos = malloc((size_t)T * sizeof *pos);
    if (!pos)
        goto out;
    for (int64_t i = 0; i < T; i++)
        pos[i] = i;
    /* A prefill exported with prefill_logits="last" takes a one-hot `last_row` that selects the
     * prompt's last token, and returns the logits of that row only. */
    int64_t lr_rows = T;
    void *last_row = NULL;
    size_t last_row_bytes = 0;
    int lrt = baton_plan_tensor_index(pre, "last_row");
    if (lrt >= 0) {
        baton_tensor_info lri;
        baton_plan_tensor_info(pre, lrt, &lri);
        float *onehot = calloc((size_t)T, sizeof *onehot);
        last_row_bytes = (size_t)T * baton_dtype_size(lri.desc.dtype);
        last_row = malloc(last_row_bytes);
        int ok = onehot && last_row;
        if (ok) {
            onehot[T - 1] = 1.0f;
            ok = baton_convert(last_row, lri.desc.dtype, onehot, BATON_DTYPE_F32, T) == 0;
        }
        if (!ok) {
            free(onehot);
            free(last_row);
            free(pos);
            fprintf(stderr, "generate: cannot make the last_row input\n");
            goto out;
        }
        free(onehot);
        lr_rows = 1;
    }
    /* Warm-up runs (--warmup) capture graph mode's graph for this length first; each run writes
     * the same cache rows, so the timed one starts from the same state. */
    double tp = 0;
    rc = 0;
    for (long w = 0; w <= a.warmup && rc == 0; w++) {
        tp = now_s();
        rc = baton_runtime_set_dims(pre_rt, "seq", T, &err);
        if (rc == 0)
            rc = baton_runtime_set_input(pre_rt, "input_ids", a.prompt, (size_t)T * sizeof(int64_t),
                                         &err);
        if (rc == 0)
            rc = baton_runtime_set_input(pre_rt, "cache_position", pos, (size_t)T * sizeof *pos,
                                         &err);
        if (rc == 0 && last_row)
            rc = baton_runtime_set_input(pre_rt, "last_row", last_row, last_row_bytes, &err);
        if (rc == 0)
            rc = baton_runtime_run(pre_rt, &err);
        if (rc == 0)
            rc = baton_runtime_get_output(pre_rt, "logits", logits, (size_t)lr_rows * row_bytes,
                                          &err);
        /* the prompt's last row of logits, through the sampler's input (on the GPU when it is
         * bound there: set_input copies into the bound buffer); in the warm-up runs too, so the
         * sampler's first run (graph mode captures its graph) is not the timed one's. Its draw
         * is a function of the seed and the step, so a warm-up draw changes nothing. */
        if (rc == 0)
            rc = next_token(samp_rt, (char *)logits + (size_t)(lr_rows - 1) * row_bytes, row_bytes,
                            li.desc.dtype, row_f32, vocab, 0, &out_ids[0], &err);
    }
    free(pos);
    free(last_row);
    if (rc) {
        fail("prefill", &err);
        goto out;
    }
    double t_prefill = now_s() - tp;
    long n_out = is_stop(&a, out_ids[0]) ? 1 : a.max_new; /* the ids generated (--stop) */
    if (a.stream && text_show(&shown, out_ids, 1, 0))
        goto out;

    /* 4. The KV cache: shared since step 1; otherwise every state tensor of the decode plan,
     * from the prefill runtime by name, once per prompt. */
    for (int t = 0; !shared && t < baton_plan_tensor_count(dec); t++) {
        baton_tensor_info si;
        baton_plan_tensor_info(dec, t, &si);
        if (si.role != BATON_ROLE_STATE)
            continue;
        void *buf = realloc(state, si.nbytes);
        if (!buf)
            goto out;
        state = buf;
        if (baton_runtime_get_output(pre_rt, si.name, state, si.nbytes, &err) ||
            baton_runtime_set_input(dec_rt, si.name, state, si.nbytes, &err)) {
            fail("copying the KV cache to the decode runtime", &err);
            goto out;
        }
    }
    double t_first = now_s() - t0;

    /* 5. Decode: one token per run; the position is an input, so graph mode replays one graph.
     * The first run captures it: the rate counts the runs after it. */
    double td = now_s(), t_decode1 = 0, t_host = 0; /* t_host: a token's time outside the run */
    baton_run_stats st0 = {0}, st1;
    double t_decode = 0; /* the runs after the first */
    int queued = 0;
#ifdef GENERATE_CUDA
    /* Greedy on the GPU with a GPU to keep the tokens on: queue the runs (decode_queued). */
    queued = greedy_on_device && dec_stream && baton_runtime_gpu_backend(dec_rt) == BATON_GPU_CUDA;
    if (queued && n_out > 1) {
        decode_times tm = {0};
        rc = decode_queued(dec_rt, dec, dec_stream, T, &a, &n_out, out_ids, &tm, &err);
        if (rc) {
            fprintf(stderr, "generate: decode (queued runs): %s\n", err.message);
            goto out;
        }
        t_decode1 = n_out > 2 ? tm.first : tm.rest;
        t_decode = n_out > 2 ? tm.rest : 0;
        t_host = tm.host;
        st0 = tm.st0;
        st1 = tm.st1;
    }
#endif
    for (long i = 1; !queued && i < n_out; i++) {
        if (i == 2) {
            t_decode1 = now_s() - td;
            td = now_s();
            t_host = 0;
            baton_runtime_stats(dec_rt, &st0);
            /* room for every step of the remaining tokens, once per device */
            if (a.trace &&
                baton_runtime_trace_begin(dec_rt, (size_t)(a.max_new - 2) *
                                                      (size_t)(baton_plan_step_count(dec) + 8)))
                fprintf(stderr, "generate: --trace: tracing could not start; no trace written\n");
        }
        double th = now_s();
        int64_t id = out_ids[i - 1], p = T + i - 1;
        rc = baton_runtime_set_input(dec_rt, "input_ids", &id, sizeof id, &err);
        if (rc == 0)
            rc = baton_runtime_set_input(dec_rt, "cache_position", &p, sizeof p, &err);
        if (rc == 0) {
            t_host += now_s() - th;
            rc = baton_runtime_run(dec_rt, &err);
            th = now_s();
        }
        if (rc == 0 && greedy_on_device) {
            rc = baton_runtime_get_output(dec_rt, "next_token", &out_ids[i], sizeof(int64_t), &err);
        } else if (rc == 0) {
            if (!samp_dev) /* sampling on the GPU reads them where the decode left them */
                rc = baton_runtime_get_output(dec_rt, "logits", logits, row_bytes, &err);
            if (rc == 0)
                rc = next_token(samp_rt, samp_dev ? NULL : logits, row_bytes, li.desc.dtype,
                                row_f32, vocab, i, &out_ids[i], &err);
        }
        t_host += now_s() - th;
        if (rc) {
            fprintf(stderr, "generate: decode token %ld: %s\n", i, err.message);
            goto out;
        }
        if (is_stop(&a, out_ids[i]))
            n_out = i + 1;
        if (a.stream && text_show(&shown, out_ids, i + 1, 0)) /* in the decode's wall time */
            goto out;
    }
    if (!queued) {
        t_decode = now_s() - td;
        baton_runtime_stats(dec_rt, &st1);
    }
    if (a.trace && n_out > 2) {
        if (baton_runtime_trace_write(dec_rt, a.trace, &err))
            fprintf(stderr, "generate: --trace %s: %s\n", a.trace, err.message);
        baton_runtime_trace_begin(dec_rt, 0);
    }

    fprintf(stderr, "load+prepare %.3f s, first token %.3f s after start\n", t_loaded - t0,
            t_first);
    fprintf(stderr, "prefill: %" PRId64 " tokens in %.3f ms (%.1f tokens/s)\n", T, t_prefill * 1e3,
            (double)T / t_prefill);
    if (n_out < a.max_new)
        fprintf(stderr, "generate: stopped at id %" PRId64 " (--stop) after %ld of %ld tokens\n",
                out_ids[n_out - 1], n_out, a.max_new);
    if (n_out > 1)
        fprintf(stderr, "decode: first run %.3f ms (graph mode captures there: %lld captures)\n",
                t_decode1 ? t_decode1 * 1e3 : t_decode * 1e3,
                (long long)(n_out > 2 ? st0.captures : st1.captures));
    if (n_out > 2) {
        double n = (double)(n_out - 2);
        fprintf(stderr,
                "decode: %ld tokens in %.3f ms (%.1f tokens/s, %.3f ms/token), per token %.2f "
                "host waits, %.2f graph launches, %.2f kernel launches\n",
                n_out - 2, t_decode * 1e3, n / t_decode, t_decode * 1e3 / n,
                (double)(st1.host_waits - st0.host_waits) / n,
                (double)(st1.graph_launches - st0.graph_launches) / n,
                (double)(st1.kernel_launches - st0.kernel_launches) / n);
        fprintf(stderr,
                "decode: %.1f us/token on the host outside baton_runtime_run (inputs, "
                "logits, picking the token)\n",
                t_host * 1e6 / n);
        /* After the first run a token is its inputs' memcpys, one graph replay (graph mode) and
         * the one wait for the logits: a capture or graph update here would be a regression. */
        long long caps = (long long)(st1.captures - st0.captures);
        long long upd = (long long)(st1.graph_updates - st0.graph_updates);
        fprintf(stderr, "decode: after the first run %lld captures, %lld graph updates%s\n", caps,
                upd, caps || upd ? " (expected 0: the graph is not being reused)" : "");
    }
    if (tok && text_show(&shown, out_ids, n_out, 1))
        goto out;
    for (long i = 0; i < n_out; i++)
        printf("%s%" PRId64, i ? " " : "", out_ids[i]);
    printf("\n");
    status = 0;
out:
    baton_tokenizer_decoder_destroy(shown.dec);
    baton_tokenizer_free(tok);
    free(logits);
    free(state);
    free(row_f32);
    free(out_ids);
    baton_runtime_destroy(samp_rt);
    baton_runtime_destroy(dec_rt);
    baton_runtime_destroy(pre_rt);
    if (drow.p) /* after the runtimes bound to it */
        dev_row_free(&drow);
#ifdef GENERATE_CUDA
    if (dec_stream) /* after the runtime that used it */
        cudaStreamDestroy(dec_stream);
#endif
    baton_plan_free(samp_plan);
    baton_plan_free(dec);
    baton_plan_free(pre);
    baton_registry_destroy(reg);
    return status;
}
