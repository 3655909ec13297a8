/* chat.c: a model's chat template as baton_export compiled it (chat.json: the text before a
 * conversation, each role's prefix and suffix, a default system message, the generation prompt or
 * the end written in its place), and conversations rendered from it: the text transformers'
 * apply_chat_template writes, for templates that place each message between fixed strings (the
 * exporter checked that it is one). */
#include <stdlib.h>
#include <string.h>

#include "baton/baton_tokenizer.h"
#include "text/load.h"
#include "text/unicode.h"

enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, N_ROLES };
static const char *const ROLE_NAMES[N_ROLES] = {"system", "user", "assistant"};

/* The ROLE_* of a role's name, or N_ROLES for another (or none) */
static int role_index(const char *name)
{
    int r = 0;
    while (name && r < N_ROLES && strcmp(ROLE_NAMES[r], name) != 0)
        r++;
    return name ? r : N_ROLES;
}

typedef struct piece {
    char *s;
    size_t len;
} piece;

typedef struct chat_role {
    int present;
    piece prefix, suffix;
    int trim; /* the template strips white space at the content's ends (Jinja's trim) */
} chat_role;

struct baton_chat {
    piece begin, default_system, generation_prompt;
    piece end; /* after the messages where no generation prompt is (Phi-3's end of text) */
    piece system_refused; /* why a system message is refused, where the template has one that
                           * fixed pieces cannot place (Mistral's); NULL otherwise */
    int has_default_system;
    chat_role role[N_ROLES];
    int alternate;      /* two user or two assistant messages in a row are refused */
    int assistant_last; /* a conversation may end with the assistant's message */
};

static int bool_of(text_file *F, int obj, const char *key, int *v)
{
    const int n = text_get(F, obj, key);
    if (!jis(&F->doc, n, J_TRUE) && !jis(&F->doc, n, J_FALSE))
        return baton__text_fail(F, n < 0 ? obj : n, BATON_EPLAN, "\"%s\" must be true or false",
                                key);
    *v = jis(&F->doc, n, J_TRUE);
    return 0;
}

/* A string field into *p (a copy); null where nullable allows it (*p then NULL). */
static int piece_of(text_file *F, int obj, const char *key, int nullable, piece *p)
{
    const int n = text_get(F, obj, key);
    if (nullable && jis(&F->doc, n, J_NULL))
        return 0;
    const char *s = text_str(F, n);
    if (!s)
        return baton__text_fail(F, n < 0 ? obj : n, BATON_EPLAN, "\"%s\" must be a string%s", key,
                                nullable ? " or null" : "");
    p->len = F->doc.v[n].len;
    if (!(p->s = malloc(p->len + 1)))
        return BATON_ENOMEM;
    memcpy(p->s, s, p->len + 1);
    return 0;
}

static int load_chat(text_file *F, baton_chat *c)
{
    static const char *const KEYS[] = {"format",          "version",
                                       "begin",           "default_system",
                                       "roles",           "generation_prompt",
                                       "alternate",       "assistant_last",
                                       "template_sha256", "end",
                                       "system_refused"};
    const int root = 0;
    const char *format = text_str(F, text_get(F, root, "format"));
    if (!format || strcmp(format, "baton.chat") != 0)
        return baton__text_fail(F, root, BATON_EPLAN,
                                "not a chat.json: \"format\" must be \"baton.chat\" (baton_export "
                                "writes it from a model's chat template)");
    const int version = text_get(F, root, "version");
    if (!jis(&F->doc, version, J_INT) || F->doc.v[version].i != 1)
        return baton__text_fail(F, version < 0 ? root : version, BATON_ENOTSUP,
                                "\"version\" must be 1, the one this baton reads: export the "
                                "model again with this baton's baton_export");
    for (int k = F->doc.v[root].first; k >= 0; k = F->doc.v[k].next) {
        size_t i = 0;
        while (i < sizeof KEYS / sizeof KEYS[0] && strcmp(KEYS[i], F->doc.v[k].key) != 0)
            i++;
        if (i == sizeof KEYS / sizeof KEYS[0])
            return baton__text_fail(F, k, BATON_EPLAN, "unknown key \"%s\"", F->doc.v[k].key);
    }
    int rc;
    if ((rc = piece_of(F, root, "begin", 0, &c->begin)) ||
        (rc = piece_of(F, root, "default_system", 1, &c->default_system)) ||
        (rc = piece_of(F, root, "generation_prompt", 0, &c->generation_prompt)) ||
        (rc = piece_of(F, root, "end", 0, &c->end)) ||
        (rc = piece_of(F, root, "system_refused", 1, &c->system_refused)) ||
        (rc = bool_of(F, root, "alternate", &c->alternate)) ||
        (rc = bool_of(F, root, "assistant_last", &c->assistant_last)))
        return rc;
    c->has_default_system = c->default_system.s != NULL;
    const int roles = text_get(F, root, "roles");
    if (!jis(&F->doc, roles, J_OBJECT))
        return baton__text_fail(F, roles < 0 ? root : roles, BATON_EPLAN,
                                "\"roles\" must be an object of system, user and assistant");
    for (int k = F->doc.v[roles].first; k >= 0; k = F->doc.v[k].next) {
        const int r = role_index(F->doc.v[k].key);
        if (r == N_ROLES)
            return baton__text_fail(F, k, BATON_ENOTSUP,
                                    "role \"%s\": baton renders system, user and assistant "
                                    "messages",
                                    F->doc.v[k].key);
        if (!jis(&F->doc, k, J_OBJECT))
            return baton__text_fail(F, k, BATON_EPLAN, "role \"%s\" must be an object",
                                    ROLE_NAMES[r]);
        chat_role *cr = &c->role[r];
        cr->present = 1;
        if ((rc = piece_of(F, k, "prefix", 0, &cr->prefix)) ||
            (rc = piece_of(F, k, "suffix", 0, &cr->suffix)) ||
            (rc = bool_of(F, k, "trim", &cr->trim)))
            return rc;
    }
    if (!c->role[ROLE_USER].present || !c->role[ROLE_ASSISTANT].present)
        return baton__text_fail(F, roles, BATON_EPLAN, "\"roles\" needs user and assistant");
    if (c->has_default_system && !c->role[ROLE_SYSTEM].present)
        return baton__text_fail(F, text_get(F, root, "default_system"), BATON_EPLAN,
                                "a default system message needs the system role");
    return 0;
}

int baton_chat_load(const char *path, baton_chat **out, baton_error *err)
{
    err_clear(err);
    if (!path || !out)
        return baton__err_set(err, BATON_EINVAL, "baton_chat_load: path and out are needed");
    *out = NULL;
    text_file F;
    baton_chat *c = NULL;
    int rc = baton__text_open(&F, path, "chat.json", err);
    if (!rc && !(c = calloc(1, sizeof *c)))
        rc = BATON_ENOMEM;
    if (!rc)
        rc = load_chat(&F, c);
    if (rc == BATON_ENOMEM && err && !err->message[0])
        baton__err_set(err, BATON_ENOMEM, "%s: out of memory", path);
    baton__text_close(&F);
    if (rc) {
        baton_chat_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void baton_chat_free(baton_chat *c)
{
    if (!c)
        return;
    free(c->begin.s);
    free(c->default_system.s);
    free(c->generation_prompt.s);
    free(c->end.s);
    free(c->system_refused.s);
    for (int r = 0; r < N_ROLES; r++) {
        free(c->role[r].prefix.s);
        free(c->role[r].suffix.s);
    }
    free(c);
}

/* Python's str.isspace, which Jinja's trim filter (str.strip) goes by: Unicode's White_Space (the
 * pre-tokenizers' \s, unicode.c) and the four information separators U+001C-U+001F. */
static int py_space(uint32_t c)
{
    return baton__uni_is_space(c) || (c >= 0x1C && c <= 0x1F);
}

/* s[*b .. *e) less the white space at both ends; s is UTF-8 */
static void trim(const char *s, size_t *b, size_t *e)
{
    size_t i = *b, j;
    uint32_t cp;
    while (i < *e && (j = i, baton__utf8_next(s, *e, &j, &cp) == 0) && py_space(cp))
        i = j;
    *b = i;
    while (*e > *b) {
        size_t k = *e - 1;
        while (k > *b && ((unsigned char)s[k] & 0xC0) == 0x80) /* the last character's start */
            k--;
        j = k;
        if (baton__utf8_next(s, *e, &j, &cp) || !py_space(cp))
            break;
        *e = k;
    }
}

typedef struct sink {
    char *text;
    size_t cap, len;
} sink;

static void put(sink *o, const char *s, size_t len)
{
    if (o->len < o->cap) {
        const size_t room = o->cap - o->len;
        memcpy(o->text + o->len, s, len < room ? len : room);
    }
    o->len += len;
}

static void put_piece(sink *o, const piece *p)
{
    put(o, p->s, p->len);
}

static size_t content_len(const baton_chat_message *m)
{
    return m->content_len ? m->content_len : strlen(m->content);
}

int baton_chat_render(const baton_chat *c, const baton_chat_message *msgs, size_t n,
                      int add_generation_prompt, char *text, size_t cap, size_t *len,
                      baton_error *err)
{
    err_clear(err);
    if (!c || (!msgs && n) || (!text && cap) || !len)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_chat_render: the chat, the messages and len are needed");
    *len = 0;
    int prev = -1;
    for (size_t i = 0; i < n; i++) { /* everything refused before anything is written */
        const baton_chat_message *m = &msgs[i];
        const int r = role_index(m->role);
        if (!m->role || !m->content)
            return baton__err_set(err, BATON_EINVAL, "message %zu: a role and a content are needed",
                                  i);
        if (r == ROLE_SYSTEM && !c->role[r].present && c->system_refused.s)
            return baton__err_set(err, BATON_EINVAL, "message %zu: a system message: %s", i,
                                  c->system_refused.s);
        if (r == N_ROLES || !c->role[r].present)
            return baton__err_set(err, BATON_EINVAL,
                                  "message %zu: the role \"%.40s\" is not one the model's chat "
                                  "template writes (%suser and assistant)",
                                  i, m->role, c->role[ROLE_SYSTEM].present ? "system and " : "");
        if (r == ROLE_SYSTEM && i)
            return baton__err_set(err, BATON_EINVAL,
                                  "message %zu: a system message goes first, before the "
                                  "conversation",
                                  i);
        if (c->alternate && r == prev)
            return baton__err_set(err, BATON_EINVAL,
                                  "message %zu: two %s messages in a row, which the model's chat "
                                  "template refuses or writes otherwise: join them into one",
                                  i, ROLE_NAMES[r]);
        const size_t cl = content_len(m);
        for (size_t k = 0; k < cl;) {
            uint32_t cp;
            if (baton__utf8_next(m->content, cl, &k, &cp))
                return baton__err_set(err, BATON_EINVAL,
                                      "message %zu: the content is not UTF-8 (byte %zu)", i, k);
        }
        prev = r;
    }
    if (prev == ROLE_ASSISTANT && !c->assistant_last)
        return baton__err_set(err, BATON_EINVAL,
                              "message %zu: the model's chat template writes a conversation that "
                              "ends with the assistant's message otherwise than its other turns; "
                              "end it with a user message",
                              n - 1);
    sink o = {text, cap, 0};
    put_piece(&o, &c->begin);
    if (c->has_default_system && (n == 0 || role_index(msgs[0].role) != ROLE_SYSTEM)) {
        put_piece(&o, &c->role[ROLE_SYSTEM].prefix);
        put_piece(&o, &c->default_system);
        put_piece(&o, &c->role[ROLE_SYSTEM].suffix);
    }
    for (size_t i = 0; i < n; i++) {
        const chat_role *cr = &c->role[role_index(msgs[i].role)]; /* checked above */
        size_t b = 0, e = content_len(&msgs[i]);
        if (cr->trim)
            trim(msgs[i].content, &b, &e);
        put_piece(&o, &cr->prefix);
        put(&o, msgs[i].content + b, e - b);
        put_piece(&o, &cr->suffix);
    }
    put_piece(&o, add_generation_prompt ? &c->generation_prompt : &c->end);
    *len = o.len;
    if (cap) {
        text[o.len < cap ? o.len : cap - 1] = 0;
        if (o.len >= cap)
            return baton__err_set(err, BATON_EINVAL,
                                  "baton_chat_render: %zu bytes and the NUL do not fit the %zu "
                                  "given",
                                  o.len, cap);
    }
    return 0;
}

const char *baton_chat_turn_end(const baton_chat *c)
{
    return c ? c->role[ROLE_ASSISTANT].suffix.s : NULL;
}
