/* load.h: what the text layer's two file readers share (tokenizer.c's tokenizer.json, chat.c's
 * chat.json): the file read whole and parsed by the plan's JSON reader, and refusals that name the
 * file, the line and the column. */
#ifndef BATON_TEXT_LOAD_H
#define BATON_TEXT_LOAD_H

#include "core/core.h"
#include "plan/json.h"

typedef struct text_file {
    const char *path;
    jdoc doc;
    baton_error *err;
} text_file;

/* path read (a regular file only: a FIFO is refused, not waited on) and parsed into F->doc, whose
 * root must be an object: 0, or BATON_EIO, BATON_EPARSE, BATON_EPLAN or BATON_ENOMEM with err
 * naming the path (and where it is not JSON). `what` names the file's kind ("tokenizer.json"). F
 * is freed with baton__text_close, also after a failure. */
int baton__text_open(text_file *F, const char *path, const char *what, baton_error *err);
void baton__text_close(text_file *F);

/* A refusal at node (its line and column; the file alone for node < 0): returns code. */
int baton__text_fail(text_file *F, int node, int code, const char *fmt, ...) CORE_PRINTF(4, 5);

/* The child of object obj under key, or -1 */
static inline int text_get(const text_file *F, int obj, const char *key)
{
    return baton__plan_json_get(&F->doc, obj, key);
}

/* node's string, or NULL where node is not a string */
static inline const char *text_str(const text_file *F, int node)
{
    return jis(&F->doc, node, J_STRING) ? F->doc.v[node].s : NULL;
}

#endif /* BATON_TEXT_LOAD_H */
