/* chat.c: a conversation with an instruct model exported by baton_export, in the terminal: each
 * line on stdin is a user message, each reply is printed as it is generated. The conversation goes
 * through the model's chat template (DIR/chat.json) and tokenizer (DIR/tokenizer.json) at every
 * turn, and the KV cache is kept from turn to turn: only the tokens after the longest prefix
 * already in the cache are run again (the new user message, and whatever of the last reply its
 * text tokenizes differently), so a turn costs its own tokens, not the conversation's. Greedy, or
 * sampled with --temperature; public API only (docs/generate.md, "Chat").
 *
 *   build/chat DIR [--system TEXT] [--max-new-tokens N] [--stop ID,ID,...] [--print-ids]
 *              [--gpu=auto|cuda|cpu|sim] [--mode=strict|boundary|graph] [--prefill-mode=MODE]
 *              [--prefill-rows=auto|exact|pow2] [--no-warmup]
 *              [--temperature T --top-k K --top-p P --seed S]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/baton.h"
#include "baton/baton_tokenizer.h"

#define MAX_STOP 16

enum { ROWS_AUTO, ROWS_EXACT, ROWS_POW2 }; /* --prefill-rows */

typedef struct args {
    const char *dir, *system;
    long max_new;
    int64_t stop[MAX_STOP];
    int n_stop;
    int print_ids;
    int prefill_rows;          /* --prefill-rows: ROWS_AUTO, ROWS_EXACT or ROWS_POW2 */
    int no_warmup;             /* --no-warmup: no prefill of each padded row count at start */
    double temperature, top_p; /* --temperature (0: greedy), --top-p */
    long top_k;                /* --top-k (0: off) */
    unsigned long long seed;   /* --seed */
    baton_options opts;        /* the decode's: --mode, --gpu */
    baton_sync_mode prefill;   /* --prefill-mode */
} args;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int usage(const char *msg)
{
    if (msg)
        fprintf(stderr, "chat: %s\n", msg);
    fprintf(stderr,
            "usage: chat DIR [--system TEXT] [--max-new-tokens N] [--stop ID,ID,...] "
            "[--print-ids]\n"
            "            [--gpu=auto|cuda|cpu|sim] [--mode=strict|boundary|graph]\n"
            "            [--prefill-mode=strict|boundary|graph] [--prefill-rows=auto|exact|pow2]\n"
            "            [--no-warmup]\n"
            "            [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
            "Reads user messages from stdin, one a line, and prints each reply as it comes.\n"
            "DIR is baton_export's: prefill.json, decode.json, weights.safetensors,\n"
            "tokenizer.json and chat.json. A reply ends at the model's end of turn (the first\n"
            "special token of chat.json's assistant suffix), at a --stop id, or after\n"
            "--max-new-tokens (default 256). --print-ids prints each reply's ids after its text,\n"
            "on a line \"ids: 1 2 3\". --mode is the decode's (default graph); --prefill-mode the "
            "prefill's\n"
            "(default boundary: a turn's new tokens are of a length not seen before, and graph\n"
            "mode would capture a graph for each). --prefill-rows=pow2 runs a turn's prefill at a\n"
            "power of two of rows (its tokens, then padding), so that a CUDA GEMM's choice of\n"
            "algorithm per row count is made once; exact runs the tokens alone; auto (the\n"
            "default) is pow2 where the prefill runs on CUDA, exact elsewhere. With pow2 on CUDA\n"
            "each padded count up to 2048 runs once at start (--no-warmup: not).\n"
            "Greedy unless --temperature is given: then each token is drawn by the sample\n"
            "kernel, on the decode's GPU where it has one (top_k off and top_p 1 unless given),\n"
            "the same tokens for a seed.\n");
    return 2;
}

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

/* v as a number >= 0 (an integer below 2^53 where integer): 0, or -1 */
static int number(const char *v, int integer, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(v, &end);
    if (errno || end == v || *end || !(*out >= 0))
        return -1;
    return integer && (*out != (double)(long long)*out || *out > 9007199254740992.0) ? -1 : 0;
}

static int parse_args(int argc, char **argv, args *a)
{
    baton_options_init(&a->opts);
    a->opts.mode = BATON_SYNC_GRAPH;
    a->prefill = BATON_SYNC_BOUNDARY;
    a->max_new = 256;
    a->top_p = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--system"))) {
            a->system = v;
        } else if ((v = opt_value(argc, argv, &i, "--max-new-tokens"))) {
            char *end;
            errno = 0;
            a->max_new = strtol(v, &end, 10);
            if (errno || end == v || *end || a->max_new < 1)
                return usage("--max-new-tokens takes an integer >= 1");
        } else if ((v = opt_value(argc, argv, &i, "--stop"))) {
            for (const char *p = v; *p;) {
                char *end;
                errno = 0;
                long long id = strtoll(p, &end, 10);
                if (errno || end == p || id < 0 || (*end && *end != ',') || a->n_stop == MAX_STOP)
                    return usage("--stop takes up to 16 token ids separated by commas");
                a->stop[a->n_stop++] = id;
                p = *end ? end + 1 : end;
            }
        } else if (strcmp(argv[i], "--print-ids") == 0) {
            a->print_ids = 1;
        } else if ((v = opt_value(argc, argv, &i, "--prefill-rows"))) {
            a->prefill_rows = !strcmp(v, "exact")  ? ROWS_EXACT
                              : !strcmp(v, "pow2") ? ROWS_POW2
                              : !strcmp(v, "auto") ? ROWS_AUTO
                                                   : -1;
            if (a->prefill_rows < 0)
                return usage("--prefill-rows takes auto, exact or pow2");
        } else if (strcmp(argv[i], "--no-warmup") == 0) {
            a->no_warmup = 1;
        } else if ((v = opt_value(argc, argv, &i, "--temperature"))) {
            if (number(v, 0, &a->temperature))
                return usage("--temperature takes a number >= 0 (0: greedy)");
        } else if ((v = opt_value(argc, argv, &i, "--top-p"))) {
            if (number(v, 0, &a->top_p) || a->top_p > 1)
                return usage("--top-p takes a number in [0, 1]");
        } else if ((v = opt_value(argc, argv, &i, "--top-k"))) {
            double d;
            if (number(v, 1, &d))
                return usage("--top-k takes an integer >= 0 (0: off)");
            a->top_k = (long)d;
        } else if ((v = opt_value(argc, argv, &i, "--seed"))) {
            double d;
            if (number(v, 1, &d))
                return usage("--seed takes an integer >= 0");
            a->seed = (unsigned long long)d;
        } else if ((v = opt_value(argc, argv, &i, "--gpu"))) {
            a->opts.gpu = !strcmp(v, "cuda")  ? BATON_GPU_CUDA
                          : !strcmp(v, "cpu") ? BATON_GPU_CPU
                          : !strcmp(v, "sim") ? BATON_GPU_SIM
                                              : BATON_GPU_AUTO;
            if (a->opts.gpu == BATON_GPU_AUTO && strcmp(v, "auto"))
                return usage("--gpu takes auto, cuda, cpu or sim");
        } else if ((v = opt_value(argc, argv, &i, "--mode"))) {
            if (baton_sync_mode_parse(v, &a->opts.mode) != 0)
                return usage("--mode takes strict, boundary or graph");
        } else if ((v = opt_value(argc, argv, &i, "--prefill-mode"))) {
            if (baton_sync_mode_parse(v, &a->prefill) != 0)
                return usage("--prefill-mode takes strict, boundary or graph");
        } else if (argv[i][0] == '-' || a->dir) {
            fprintf(stderr, "chat: unknown argument '%s'\n", argv[i]);
            return usage(NULL);
        } else {
            a->dir = argv[i];
        }
    }
    return a->dir ? 0 : usage("DIR is required");
}

/* Everything a conversation holds: the model's runtimes, its text tools, and the turns so far */
typedef struct chat {
    args a;
    baton_registry *reg;
    baton_plan *pre, *dec;
    baton_runtime *pre_rt, *dec_rt;
    baton_tokenizer *tok;
    baton_chat *tmpl;
    baton_tokenizer_decoder *shown;
    baton_tensor_info logits; /* the decode's [1, 1, vocab] */
    int64_t vocab, max_seq;
    int dec_token; /* the decode plan outputs next_token: 8 bytes a token, not the logits */
    int last_row;  /* the prefill plan takes a one-hot last_row and returns one row of logits */
    baton_dtype last_row_dtype;
    float *row_f32;   /* a row of logits as f32, for the argmax */
    baton_plan *samp; /* --temperature: a one-step plan around the sample kernel */
    baton_runtime *samp_rt;
    int64_t drawn; /* the tokens drawn so far: the sampler's step, so a seed gives one text */
    void *buf;     /* scratch: logits, inputs */
    size_t buf_cap;
    baton_chat_message *msgs; /* the conversation; contents owned */
    size_t n_msgs;
    int64_t *cached; /* the tokens whose keys and values are in the cache, in order */
    size_t n_cached;
    int64_t *ids; /* this turn's: the conversation's tokens, then the reply's */
    size_t ids_cap;
    char *text; /* this turn's conversation as the template writes it */
    size_t text_cap;
} chat;

static int grow(void **p, size_t *cap, size_t bytes)
{
    if (bytes <= *cap)
        return 0;
    void *q = realloc(*p, bytes);
    if (!q)
        return -1;
    *p = q;
    *cap = bytes;
    return 0;
}

static int load_fail(const char *what, const baton_error *err)
{
    fprintf(stderr, "chat: %s: %s\n", what, err->message);
    return 1;
}

static int load(chat *c)
{
    char path[4096];
    baton_error err = {0};
#define PATH(f) (snprintf(path, sizeof path, "%s/%s", c->a.dir, f), path)
    if (baton_registry_create(&c->reg) != 0) {
        fprintf(stderr, "chat: out of memory\n");
        return 1;
    }
    if (baton_plan_load(c->reg, PATH("prefill.json"), &c->pre, &err) ||
        baton_plan_load(c->reg, PATH("decode.json"), &c->dec, &err))
        return load_fail("loading the plans", &err);
    baton_options pre_opts = c->a.opts;
    pre_opts.mode = c->a.prefill;
    if (baton_runtime_create(c->pre, &pre_opts, &c->pre_rt, &err) ||
        baton_runtime_create(c->dec, &c->a.opts, &c->dec_rt, &err))
        return load_fail("preparing the plans", &err);
    /* padding pays where a GEMM chooses per row count (CUDA); on the CPU it is work for nothing */
    if (c->a.prefill_rows == ROWS_AUTO)
        c->a.prefill_rows =
            baton_runtime_gpu_backend(c->pre_rt) == BATON_GPU_CUDA ? ROWS_POW2 : ROWS_EXACT;
    /* one KV cache, filled by the prefill and appended to by the decode, kept between turns */
    if (baton_runtime_share_state(c->dec_rt, c->pre_rt, &err))
        return load_fail("sharing the KV cache between the plans", &err);
    if (baton_tokenizer_load(PATH("tokenizer.json"), &c->tok, &err) ||
        baton_tokenizer_decoder_create(c->tok, 1, &c->shown, &err))
        return load_fail("the tokenizer", &err);
    if (baton_chat_load(PATH("chat.json"), &c->tmpl, &err))
        return load_fail("the chat template (baton_export writes chat.json from the tokenizer's "
                         "template)",
                         &err);
#undef PATH
    int lt = baton_plan_tensor_index(c->dec, "logits"),
        kt = baton_plan_tensor_index(c->dec, "k_cache.0");
    baton_tensor_info ki, ti;
    if (lt < 0 || kt < 0 || baton_plan_tensor_info(c->dec, lt, &c->logits) ||
        baton_plan_tensor_info(c->dec, kt, &ki) || c->logits.desc.rank != 3) {
        fprintf(stderr, "chat: %s/decode.json is not baton_export.export_causal_lm's\n", c->a.dir);
        return 1;
    }
    c->vocab = c->logits.desc.shape[2];
    c->max_seq = ki.desc.shape[0];
    int nt = baton_plan_tensor_index(c->dec, "next_token");
    c->dec_token = nt >= 0 && baton_plan_tensor_info(c->dec, nt, &ti) == 0 &&
                   ti.role == BATON_ROLE_OUTPUT && ti.nbytes == sizeof(int64_t);
    if (!c->dec_token && c->logits.role != BATON_ROLE_OUTPUT) {
        fprintf(stderr, "chat: %s/decode.json outputs neither logits nor next_token\n", c->a.dir);
        return 1;
    }
    baton_tensor_info li;
    const int lri = baton_plan_tensor_index(c->pre, "last_row");
    c->last_row = lri >= 0 && baton_plan_tensor_info(c->pre, lri, &li) == 0;
    c->last_row_dtype = c->last_row ? li.desc.dtype : BATON_DTYPE_F32;
    /* the model's end of turn: the first special token of the assistant's suffix (special: its
     * text goes when special tokens are skipped) */
    const char *end = baton_chat_turn_end(c->tmpl);
    int64_t ids[64];
    size_t n = 0, len;
    char one[8];
    if (baton_tokenizer_encode(c->tok, end, strlen(end), 0, ids, 64, &n, &err) == 0)
        for (size_t i = 0; i < n && c->a.n_stop < MAX_STOP; i++)
            if (baton_tokenizer_decode(c->tok, &ids[i], 1, 1, one, sizeof one, &len, &err) == 0 &&
                len == 0 && baton_tokenizer_id_token(c->tok, ids[i])) {
                c->a.stop[c->a.n_stop++] = ids[i];
                break;
            }
    if (c->a.n_stop == 0)
        fprintf(stderr, "chat: the template's end of turn is no special token: replies end after "
                        "--max-new-tokens unless --stop is given\n");
    if (c->a.temperature > 0) { /* the sample kernel's plan, made here from the settings */
        /* on the decode's GPU where it has one (the logits go there and back, 2 x vocab values a
         * token, where the host's draw over a large vocabulary takes milliseconds) */
        const baton_gpu_backend gb = baton_runtime_gpu_backend(c->dec_rt);
        const int on_gpu = gb == BATON_GPU_CUDA || gb == BATON_GPU_SIM;
        char json[1024];
        if (c->logits.role != BATON_ROLE_OUTPUT) {
            fprintf(stderr,
                    "chat: --temperature draws from the logits, which %s/decode.json does "
                    "not output: export it with decode_outputs=(\"logits\",)\n",
                    c->a.dir);
            return 1;
        }
        snprintf(json, sizeof json,
                 "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"sampler\", "
                 "\"tensors\": [{\"name\": \"logits\", \"dtype\": \"%s\", \"shape\": [1, %" PRId64
                 "], \"role\": \"input\"}, {\"name\": \"step\", \"dtype\": \"i64\", \"shape\": "
                 "[1], \"role\": \"input\"}, {\"name\": \"ids\", \"dtype\": \"i64\", \"shape\": "
                 "[1], \"role\": \"output\"}], \"steps\": [{\"name\": \"sample\", \"kernel\": "
                 "\"sample\", \"device\": \"%s\", \"inputs\": [\"logits\", \"step\"], "
                 "\"outputs\": [\"ids\"], \"attrs\": {\"temperature\": %.17g, \"top_k\": %ld, "
                 "\"top_p\": %.17g, \"seed\": %llu}}]}",
                 baton_dtype_name(c->logits.desc.dtype), c->vocab, on_gpu ? "cuda:0" : "cpu",
                 c->a.temperature, c->a.top_k, c->a.top_p, c->a.seed);
        if (baton_plan_load_string(c->reg, json, strlen(json), "sampler", NULL, &c->samp, &err) ||
            baton_runtime_create(c->samp, on_gpu ? &c->a.opts : NULL, &c->samp_rt, &err))
            return load_fail("the sampler", &err);
    }
    c->row_f32 = malloc((size_t)c->vocab * sizeof *c->row_f32);
    return c->row_f32 ? 0 : 1;
}

/* The next token from a row of logits: the sampler's draw (its step the count of draws so far),
 * or the greedy token */
static int pick(chat *c, const void *row, int64_t *id, baton_error *err)
{
    const int64_t step = c->drawn++;
    if (c->samp_rt) {
        const size_t bytes = (size_t)c->vocab * baton_dtype_size(c->logits.desc.dtype);
        int rc = baton_runtime_set_input(c->samp_rt, "logits", row, bytes, err);
        if (!rc)
            rc = baton_runtime_set_input(c->samp_rt, "step", &step, sizeof step, err);
        if (!rc)
            rc = baton_runtime_run(c->samp_rt, err);
        return rc ? rc : baton_runtime_get_output(c->samp_rt, "ids", id, sizeof *id, err);
    }
    baton_convert(c->row_f32, BATON_DTYPE_F32, row, c->logits.desc.dtype, c->vocab);
    int64_t best = 0;
    for (int64_t i = 1; i < c->vocab; i++)
        if (c->row_f32[i] > c->row_f32[best])
            best = i;
    *id = best;
    return 0;
}

static int is_stop(const chat *c, int64_t id)
{
    for (int k = 0; k < c->a.n_stop; k++)
        if (c->a.stop[k] == id)
            return 1;
    return 0;
}

/* The rows a prefill of t tokens runs: t, or with --prefill-rows=pow2 (auto on CUDA) the next power
 * of two from 16 where the cache has room. A GEMM on CUDA picks its algorithm at the first run of
 * each row count and
 * keeps the last 8: a turn's new tokens, a count not seen before, would pay that choice (about 20
 * ms at Llama-3.2-1B's size on an H200) where the padded counts repeat. The padding rows come
 * after the real ones, so no real row sees them (attention is causal), and the cache rows they
 * write are past the conversation, written over before they are read. */
static int64_t prefill_rows(const chat *c, size_t from, int64_t t)
{
    int64_t b = 16;
    while (b < t)
        b *= 2;
    return c->a.prefill_rows != ROWS_POW2 || (int64_t)from + b > c->max_seq ? t : b;
}

/* The prompt's tokens from `from` on, at their positions: the first reply token into *first. */
static int prefill(chat *c, size_t from, size_t n, int64_t *first, baton_error *err)
{
    const int64_t t = (int64_t)(n - from), T = prefill_rows(c, from, t);
    const size_t row = (size_t)c->vocab * baton_dtype_size(c->logits.desc.dtype);
    const size_t rows = c->last_row ? 1 : (size_t)T;
    /* the logits, then the ids, the positions and the one-hot (at most 8 bytes a value) */
    if (grow(&c->buf, &c->buf_cap, rows * row + (size_t)T * 3 * sizeof(int64_t))) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return BATON_ENOMEM;
    }
    int64_t *in = (int64_t *)((char *)c->buf + rows * row), *pos = in + T;
    for (int64_t i = 0; i < T; i++) {
        in[i] = c->ids[from + (size_t)(i < t ? i : t - 1)]; /* padding: the last token again */
        pos[i] = (int64_t)from + i;
    }
    int rc = baton_runtime_set_dims(c->pre_rt, "seq", T, err);
    if (!rc)
        rc = baton_runtime_set_input(c->pre_rt, "input_ids", in, (size_t)T * sizeof *in, err);
    if (!rc)
        rc =
            baton_runtime_set_input(c->pre_rt, "cache_position", pos, (size_t)T * sizeof *pos, err);
    if (!rc && c->last_row) { /* one-hot at the last real token, in last_row's dtype */
        const size_t es = baton_dtype_size(c->last_row_dtype);
        const float one = 1.0f;
        char *lr = (char *)(pos + T);
        memset(lr, 0, (size_t)T * es); /* zero is all-zero bits in every float dtype */
        baton_convert(lr + (size_t)(t - 1) * es, c->last_row_dtype, &one, BATON_DTYPE_F32, 1);
        rc = baton_runtime_set_input(c->pre_rt, "last_row", lr, (size_t)T * es, err);
    }
    if (!rc)
        rc = baton_runtime_run(c->pre_rt, err);
    if (!rc)
        rc = baton_runtime_get_output(c->pre_rt, "logits", c->buf, rows * row, err);
    if (!rc)
        rc = pick(c, (char *)c->buf + (c->last_row ? 0 : (size_t)(t - 1)) * row, first, err);
    return rc;
}

/* One token in at position p, the next one out */
static int step(chat *c, int64_t id, int64_t p, int64_t *next, baton_error *err)
{
    const size_t row = (size_t)c->vocab * baton_dtype_size(c->logits.desc.dtype);
    int rc = baton_runtime_set_input(c->dec_rt, "input_ids", &id, sizeof id, err);
    if (!rc)
        rc = baton_runtime_set_input(c->dec_rt, "cache_position", &p, sizeof p, err);
    if (!rc)
        rc = baton_runtime_run(c->dec_rt, err);
    if (!rc && c->dec_token && !c->samp_rt) { /* the greedy token, picked on the plan's device */
        c->drawn++;
        return baton_runtime_get_output(c->dec_rt, "next_token", next, sizeof *next, err);
    }
    if (!rc && !(rc = grow(&c->buf, &c->buf_cap, row) ? BATON_ENOMEM : 0))
        rc = baton_runtime_get_output(c->dec_rt, "logits", c->buf, row, err);
    if (!rc)
        rc = pick(c, c->buf, next, err);
    return rc;
}

/* On CUDA, a prefill of each padded row count the GEMMs keep a choice for (16 to 2048: eight),
 * before the first turn, so that no turn pays for its count's first run (decision 0018). The
 * cache rows they write are written over by the turns before they are read. 0, or 1 with the
 * reason on stderr. */
static int warm_up(chat *c)
{
    if (c->a.no_warmup || c->a.prefill_rows != ROWS_POW2 ||
        baton_runtime_gpu_backend(c->pre_rt) != BATON_GPU_CUDA)
        return 0;
    const double t0 = now_s();
    baton_error err;
    int n = 0;
    const int64_t drawn = c->drawn;
    for (int64_t rows = 16; rows <= 2048 && rows <= c->max_seq; rows *= 2, n++) {
        int64_t first;
        if (grow((void **)&c->ids, &c->ids_cap, (size_t)rows * sizeof(int64_t))) {
            fprintf(stderr, "chat: out of memory\n");
            return 1;
        }
        memset(c->ids, 0, (size_t)rows * sizeof(int64_t)); /* id 0 at every position */
        if (prefill(c, 0, (size_t)rows, &first, &err)) {
            fprintf(stderr, "chat: warming up the prefill at %" PRId64 " rows: %s\n", rows,
                    err.message);
            return 1;
        }
    }
    c->drawn = drawn; /* the warm-up's draws count for nothing */
    fprintf(stderr, "chat: prefill of %d row counts warmed up in %.0f ms\n", n,
            (now_s() - t0) * 1e3);
    return 0;
}

static int add_message(chat *c, const char *role, const char *content, size_t len)
{
    baton_chat_message *m = realloc(c->msgs, (c->n_msgs + 1) * sizeof *m);
    char *s = malloc(len + 1);
    if (m)
        c->msgs = m;
    if (!m || !s) {
        free(s);
        return -1;
    }
    memcpy(s, content, len);
    s[len] = 0;
    c->msgs[c->n_msgs++] = (baton_chat_message){role, s, len}; /* len: a reply may hold NULs */
    return 0;
}

/* The conversation through the template and the tokenizer into c->ids (room for a reply after
 * it): 0, or a code with the reason in err */
static int encode_conversation(chat *c, size_t *n, baton_error *err)
{
    /* each into the buffer of the last turn, once; again only where it was short (len and *n:
     * the whole text's, the whole encoding's) */
    size_t len = 0;
    int rc = baton_chat_render(c->tmpl, c->msgs, c->n_msgs, 1, c->text, c->text_cap, &len, err);
    if ((rc == 0 || rc == BATON_EINVAL) && len + 1 > c->text_cap)
        rc = grow((void **)&c->text, &c->text_cap, 2 * len + 64)
                 ? BATON_ENOMEM
                 : baton_chat_render(c->tmpl, c->msgs, c->n_msgs, 1, c->text, c->text_cap, &len,
                                     err);
    const size_t reply = (size_t)c->a.max_new; /* room after the prompt for the reply's ids */
    size_t cap = c->ids_cap / sizeof(int64_t) > reply ? c->ids_cap / sizeof(int64_t) - reply : 0;
    if (!rc)
        rc = cap ? baton_tokenizer_encode(c->tok, c->text, len, 0, c->ids, cap, n, err)
                 : baton_tokenizer_encode(c->tok, c->text, len, 0, NULL, 0, n, err);
    if ((rc == 0 || rc == BATON_EINVAL) && *n > cap) {
        rc = grow((void **)&c->ids, &c->ids_cap, (2 * *n + reply) * sizeof(int64_t))
                 ? BATON_ENOMEM
                 : baton_tokenizer_encode(c->tok, c->text, len, 0, c->ids, 2 * *n, n, err);
    }
    if (rc == BATON_ENOMEM)
        snprintf(err->message, sizeof err->message, "out of memory");
    return rc;
}

/* One turn: the conversation with the user's new message through the template and the
 * tokenizer, the tokens past what the cache holds run, then the reply token by token. A
 * conversation that no longer fits the cache with a reply after it loses its oldest exchanges
 * (a user message and the reply to it; the system message stays). 0, 1 to end the chat (the
 * reason on stderr). */
static int turn(chat *c, int k)
{
    baton_error err;
    size_t len, n;
    const size_t first = c->n_msgs && !strcmp(c->msgs[0].role, "system"); /* the oldest turn */
    int rc;
    while ((rc = encode_conversation(c, &n, &err)) == 0 && (int64_t)n + c->a.max_new > c->max_seq &&
           c->n_msgs >= first + 3) {
        free((char *)c->msgs[first].content);
        free((char *)c->msgs[first + 1].content);
        memmove(c->msgs + first, c->msgs + first + 2, (c->n_msgs - first - 2) * sizeof *c->msgs);
        c->n_msgs -= 2;
        fprintf(stderr,
                "chat: turn %d: the oldest exchange left out (the conversation no longer "
                "fit the cache)\n",
                k);
    }
    if (rc) {
        fprintf(stderr, "chat: turn %d: %s\n", k, err.message);
        return 1;
    }
    if (n == 0) { /* an empty template and message: nothing to run */
        fprintf(stderr, "chat: turn %d: the conversation has no tokens\n", k);
        return 1;
    }
    if ((int64_t)n + c->a.max_new > c->max_seq) {
        fprintf(stderr,
                "chat: turn %d: the message (%zu tokens with the template's) and a reply of up to "
                "%ld do not fit the plans' max_seq_len %" PRId64 ": re-export with a larger one, "
                "or ask for a shorter reply\n",
                k, n, c->a.max_new, c->max_seq);
        return 1;
    }
    /* the longest prefix whose keys and values the cache holds; at least the last token runs,
     * for its logits */
    size_t same = 0;
    while (same < c->n_cached && same < n && c->cached[same] == c->ids[same])
        same++;
    if (same == n)
        same = n - 1;
    double t0 = now_s();
    int64_t id;
    rc = prefill(c, same, n, &id, &err);
    double t1 = now_s();
    long m = 0; /* reply tokens */
    const char *piece;
    while (!rc) {
        c->ids[n + (size_t)m++] = id;
        if (is_stop(c, id) || m == c->a.max_new)
            break;
        if (!(rc = baton_tokenizer_decoder_push(c->shown, id, &piece, &len, &err))) {
            fwrite(piece, 1, len, stdout);
            fflush(stdout);
            rc = step(c, id, (int64_t)(n + (size_t)m - 1), &id, &err);
        }
    }
    if (!rc && !is_stop(c, id) &&
        !(rc = baton_tokenizer_decoder_push(c->shown, id, &piece, &len, &err)))
        fwrite(piece, 1, len, stdout);
    if (!rc && !(rc = baton_tokenizer_decoder_finish(c->shown, &piece, &len, &err)))
        fwrite(piece, 1, len, stdout);
    putchar('\n');
    if (rc) {
        fprintf(stderr, "chat: turn %d: %s\n", k, err.message);
        return 1;
    }
    const long kept = m - is_stop(c, c->ids[n + (size_t)m - 1]); /* the reply, less its end */
    for (long i = 0; c->a.print_ids && i < m; i++) /* "ids:", then each id after a space */
        printf("%s %" PRId64 "%s", i ? "" : "ids:", c->ids[n + (size_t)i], i + 1 < m ? "" : "\n");
    fflush(stdout);
    double t2 = now_s();
    fprintf(stderr,
            "turn %d: %zu prompt tokens, %zu from the cache, %zu run in %.3f ms; %ld reply "
            "tokens in %.3f ms (%.3f ms/token)\n",
            k, n, same, n - same, (t1 - t0) * 1e3, m, (t2 - t1) * 1e3,
            m > 1 ? (t2 - t1) * 1e3 / (double)(m - 1) : 0.0);
    /* the cache now holds the prompt and every reply token but the last (never run) */
    int64_t *keep = realloc(c->cached, (n + (size_t)m) * sizeof *keep);
    if (!keep)
        return 1;
    c->cached = keep;
    memcpy(c->cached, c->ids, (n + (size_t)m - 1) * sizeof *keep);
    c->n_cached = n + (size_t)m - 1;
    /* the reply joins the conversation as its text, as a chat would send it back */
    if (baton_tokenizer_decode(c->tok, c->ids + n, (size_t)kept, 1, NULL, 0, &len, &err) ||
        grow(&c->buf, &c->buf_cap, len + 1) ||
        baton_tokenizer_decode(c->tok, c->ids + n, (size_t)kept, 1, c->buf, len + 1, &len, &err) ||
        add_message(c, "assistant", c->buf, len))
        return 1;
    return 0;
}

int main(int argc, char **argv)
{
    static chat c;
    int rc = parse_args(argc, argv, &c.a);
    if (rc)
        return rc;
    int status = 1;
    if (load(&c) || warm_up(&c) ||
        (c.a.system && add_message(&c, "system", c.a.system, strlen(c.a.system))))
        goto out;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int k = 0;
    status = 0;
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        if (got == 0)
            continue;
        if (add_message(&c, "user", line, (size_t)got) || turn(&c, ++k)) {
            status = 1;
            break;
        }
    }
    free(line);
out:
    for (size_t i = 0; i < c.n_msgs; i++)
        free((char *)c.msgs[i].content);
    free(c.msgs);
    free(c.cached);
    free(c.ids);
    free(c.text);
    free(c.buf);
    free(c.row_f32);
    baton_tokenizer_decoder_destroy(c.shown);
    baton_chat_free(c.tmpl);
    baton_tokenizer_free(c.tok);
    baton_runtime_destroy(c.samp_rt);
    baton_plan_free(c.samp);
    baton_runtime_destroy(c.dec_rt);
    baton_runtime_destroy(c.pre_rt);
    baton_plan_free(c.dec);
    baton_plan_free(c.pre);
    baton_registry_destroy(c.reg);
    return status;
}
