/* tokenize.c: `baton tokenize TOKENIZER.json`: a text to its token ids, or ids to their text, with
 * a model's tokenizer.json (baton_tokenizer.h), as the `tokenizers` library would, or a
 * conversation through the model's compiled chat template (chat.json); for checking a prompt's
 * ids before `generate`, and for the tests that compare them with transformers'. Public API only.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/baton_tokenizer.h"
#include "cli.h"

static int usage_error(const char *msg)
{
    fprintf(stderr, "baton tokenize: %s\n\n%s", msg, cli_usage_tokenize);
    return EXIT_USAGE;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *p = realloc(buf, cap * 2);
        if (!p)
            free(buf);
        buf = p;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
        errno = EIO;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* "1,2,3" into a new array of *n ids, or NULL with a message */
static int64_t *parse_ids(const char *s, size_t *n, char *msg, size_t msglen)
{
    size_t count = 1;
    for (const char *p = s; *p; p++)
        count += *p == ',';
    int64_t *ids = malloc(count * sizeof *ids);
    if (!ids) {
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    *n = 0;
    if (*s == 0)
        return ids;
    for (const char *p = s;;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || (*end && *end != ',')) {
            snprintf(msg, msglen, "--decode takes ids such as 1,2,3; '%s' is not one", cli_esc(p));
            free(ids);
            return NULL;
        }
        ids[(*n)++] = v;
        if (!*end)
            break;
        p = end + 1;
    }
    return ids;
}

/* The conversation in the JSON file at path ([{"role": ..., "content": ...}, ...]) rendered with
 * the chat.json at chat_path (or beside the tokenizer) into a new text of *len bytes; NULL with
 * the reason on stderr and *code the exit code. */
static char *render_chat(const char *path, const char *chat_path, const char *tok_path, int gen,
                         size_t *len, int *code)
{
    char fallback[4096];
    if (!chat_path) { /* chat.json beside the tokenizer, as baton_export writes them */
        const char *slash = strrchr(tok_path, '/');
        snprintf(fallback, sizeof fallback, "%.*schat.json",
                 slash ? (int)(slash - tok_path + 1) : 0, tok_path);
        chat_path = fallback;
    }
    *code = EXIT_PLAN;
    baton_error err;
    baton_chat *chat = NULL;
    int rc = baton_chat_load(chat_path, &chat, &err);
    if (rc) {
        fprintf(stderr, "baton tokenize: %s\n", cli_esc(err.message));
        *code = rc == BATON_EIO ? EXIT_IO : EXIT_PLAN;
        return NULL;
    }
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    const size_t n = json_array_size(root);
    baton_chat_message *msgs = calloc(n + 1, sizeof *msgs);
    char *text = NULL;
    if (!root) {
        fprintf(stderr, "baton tokenize: %s:%d:%d: %s\n", cli_esc(path), je.line, je.column,
                cli_esc(je.text));
        *code = EXIT_IO;
        goto out;
    }
    if (!json_is_array(root)) {
        fprintf(stderr,
                "baton tokenize: %s: a conversation is an array of {\"role\": ..., "
                "\"content\": ...}\n",
                cli_esc(path));
        goto out;
    }
    if (!msgs)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(root, i);
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        msgs[i].content = json_string_value(content);
        msgs[i].content_len = json_string_length(content); /* a NUL inside it is its own */
        if (!msgs[i].role || !msgs[i].content) {
            fprintf(stderr,
                    "baton tokenize: %s: message %zu needs \"role\" and \"content\" strings\n",
                    cli_esc(path), i);
            goto out;
        }
    }
    if ((rc = baton_chat_render(chat, msgs, n, gen, NULL, 0, len, &err)) != 0) {
        fprintf(stderr, "baton tokenize: %s: %s\n", cli_esc(path), cli_esc(err.message));
        goto out;
    }
    if (!(text = malloc(*len + 1)))
        goto oom;
    if ((rc = baton_chat_render(chat, msgs, n, gen, text, *len + 1, len, &err)) != 0) {
        fprintf(stderr, "baton tokenize: %s: %s\n", cli_esc(path), cli_esc(err.message));
        free(text);
        text = NULL;
    }
    goto out;
oom:
    fprintf(stderr, "baton tokenize: out of memory\n");
out:
    if (text)
        *code = 0;
    free(msgs);
    json_decref(root);
    baton_chat_free(chat);
    return text;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *path = NULL, *text = NULL, *file = NULL, *decode = NULL, *chat = NULL,
               *chat_format = NULL;
    int no_special = 0, skip_special = 0, json = 0, gen = 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **want = strcmp(a, "--encode") == 0        ? &text
                            : strcmp(a, "--encode-file") == 0 ? &file
                            : strcmp(a, "--decode") == 0      ? &decode
                            : strcmp(a, "--chat") == 0        ? &chat
                            : strcmp(a, "--chat-format") == 0 ? &chat_format
                                                              : NULL;
        if (want) {
            if (i + 1 >= argc)
                return usage_error("a value is needed after the option");
            *want = argv[++i];
        } else if (strcmp(a, "--no-special") == 0) {
            no_special = 1;
        } else if (strcmp(a, "--skip-special") == 0) {
            skip_special = 1;
        } else if (strcmp(a, "--no-generation-prompt") == 0) {
            gen = 0;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_usage_tokenize, stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "baton tokenize: unknown option '%s'\n\n%s", cli_esc(a),
                    cli_usage_tokenize);
            return EXIT_USAGE;
        } else if (!path) {
            path = a;
        } else {
            return usage_error("one tokenizer.json only");
        }
    }
    if (!path)
        return usage_error("a tokenizer.json is needed");
    if (!!text + !!file + !!decode + !!chat != 1)
        return usage_error("one of --encode, --encode-file, --decode and --chat is needed");
    if (chat_format && !chat)
        return usage_error("--chat-format goes with --chat");
    baton_error err;
    baton_tokenizer *tok;
    int rc = baton_tokenizer_load(path, &tok, &err);
    if (rc) {
        fprintf(stderr, "baton tokenize: %s\n", cli_esc(err.message));
        return rc == BATON_EIO ? EXIT_IO : EXIT_PLAN;
    }
    int exit_code = 0;
    if (decode) {
        char msg[256];
        size_t n, len;
        int64_t *ids = parse_ids(decode, &n, msg, sizeof msg);
        char *out = NULL;
        if (!ids) {
            baton_tokenizer_free(tok);
            return usage_error(msg);
        }
        /* one pass into a first guess, a second only for a longer text (len: the whole text's) */
        size_t cap = 4096;
        rc = (out = malloc(cap))
                 ? baton_tokenizer_decode(tok, ids, n, skip_special, out, cap, &len, &err)
                 : 0;
        if (out && rc == BATON_EINVAL && len >= cap) {
            free(out);
            if ((out = malloc(len + 1)) != NULL)
                rc = baton_tokenizer_decode(tok, ids, n, skip_special, out, len + 1, &len, &err);
        }
        if (rc || !out) {
            fprintf(stderr, "baton tokenize: %s\n", rc ? cli_esc(err.message) : "out of memory");
            exit_code = rc == BATON_EINVAL ? EXIT_USAGE : EXIT_PLAN;
        } else if (json) {
            json_t *o = json_pack("{s:s%}", "text", out, len);
            char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
            if (s)
                printf("%s\n", s);
            free(s);
            json_decref(o);
        } else { /* control bytes escaped, as everything a file supplies (--json: exact) */
            cli_fputs_safe(out, len, stdout);
            putchar('\n');
        }
        free(out);
        free(ids);
    } else {
        size_t len = 0;
        char *buf = NULL;
        if (file && !(buf = read_file(file, &len))) {
            fprintf(stderr, "baton tokenize: cannot read %s: %s\n", cli_esc(file), strerror(errno));
            baton_tokenizer_free(tok);
            return EXIT_IO;
        }
        /* a conversation: its text as the template writes it, special tokens spelled out in it
         * (apply_chat_template(tokenize=True) encodes it without adding any) */
        if (chat && !(buf = render_chat(chat, chat_format, path, gen, &len, &exit_code))) {
            baton_tokenizer_free(tok);
            return exit_code;
        }
        no_special |= chat != NULL;
        const char *s = file || chat ? buf : text;
        if (!file && !chat)
            len = strlen(text);
        size_t n = 0;
        int64_t *ids = NULL;
        /* one pass where an id a byte (and a template's few) holds them, as it does unless a
         * normalizer adds tokens; a second, sized by the first (n: the whole encoding's), if not */
        size_t cap = len + 16;
        rc = (ids = malloc(cap * sizeof *ids))
                 ? baton_tokenizer_encode(tok, s, len, !no_special, ids, cap, &n, &err)
                 : 0;
        if (ids && rc == BATON_EINVAL && n > cap) {
            free(ids);
            if ((ids = malloc(n * sizeof *ids)) != NULL)
                rc = baton_tokenizer_encode(tok, s, len, !no_special, ids, n, &n, &err);
        }
        if (rc || !ids) {
            fprintf(stderr, "baton tokenize: %s\n", rc ? cli_esc(err.message) : "out of memory");
            exit_code = EXIT_PLAN;
        } else {
            json_t *t = chat && json ? json_stringn(s, len) : NULL;
            char *ts = t ? json_dumps(t, JSON_ENCODE_ANY) : NULL;
            if (ts) /* --chat --json: the text too, for checking it against the template's */
                printf("{\"text\": %s, ", ts);
            printf(json ? (ts ? "\"ids\": [" : "{\"ids\": [") : "");
            for (size_t i = 0; i < n; i++)
                printf(i ? (json ? ", %lld" : " %lld") : "%lld", (long long)ids[i]);
            printf(json ? "]}\n" : "\n");
            free(ts);
            json_decref(t);
        }
        free(ids);
        free(buf);
    }
    baton_tokenizer_free(tok);
    return exit_code;
}
