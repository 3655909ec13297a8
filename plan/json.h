/* json.h: baton's strict one-pass JSON reader. It turns text into an array of nodes in document
 * order that remember where each value and key was written (Jansson does not say), so that the
 * plan builder (load.c) can name line:column in every message. It knows nothing about plans. */
#ifndef BATON_PLAN_JSON_H
#define BATON_PLAN_JSON_H

#include <stddef.h>

#include "baton/baton.h" /* the BATON_E* codes it returns */

/* The reader's memory (its nodes and decoded strings) stays within JSON_MEMORY_FACTOR times the
 * text's size, or JSON_MEMORY_FLOOR for small texts, so that with the text itself a parse needs
 * at most 8 times the file: a document with more values than that allows (more than one per 8
 * bytes; baton's own plans have one per 10 to 12) is refused with BATON_EPLAN rather than grown
 * into. */
#define JSON_MEMORY_FACTOR 7
#define JSON_MEMORY_FLOOR  (4u << 20)
/* A syntax error's message comes from Jansson for texts up to this size (its tree of a larger one
 * would break the bound above), else from this reader. */
#define JSON_JANSSON_MAX (1u << 20)

/* Jansson's JSON_PARSER_MAX_DEPTH: every value, not only containers, counts toward it. */
#define JSON_MAX_DEPTH 2048

typedef enum jtype { J_NULL, J_FALSE, J_TRUE, J_INT, J_REAL, J_STRING, J_ARRAY, J_OBJECT } jtype;

/* One value, 48 bytes: a million-step plan has some 14 million of them. Lines and columns count
 * from 1; columns count UTF-8 characters, as Jansson's do. Only the payload of the node's type is
 * meaningful: first and n of an array or object, s and len of a string, i and f of a number. */
typedef struct jnode {
    jtype type;
    int line, col;         /* the value's first character */
    int key_line, key_col; /* its key's opening quote, in an object; 0 otherwise */
    int next;              /* next sibling, -1 for none */
    const char *key;       /* its key, in an object (decoded, NUL-terminated); NULL otherwise */
    union {
        struct {       /* J_ARRAY, J_OBJECT */
            int first; /* first child, -1 for none */
            int n;     /* children */
        };
        struct {           /* J_STRING */
            const char *s; /* decoded, NUL-terminated (\u0000 is refused, so no NUL inside) */
            size_t len;    /* bytes */
        };
        struct {         /* J_INT, J_REAL */
            long long i; /* J_INT */
            double f;    /* J_REAL, and J_INT converted */
        };
    };
} jnode;

/* A parsed document: v[0] is the root. Strings (values and keys) are decoded into one arena. */
typedef struct jdoc {
    jnode *v;
    int n, cap;
    char *arena;
    size_t arena_used;
} jdoc;

/* Why text is not JSON, and where (line and column of the offending character). */
typedef struct jerror {
    int line, col;
    char text[160]; /* Jansson's JSON_ERROR_TEXT_LENGTH */
} jerror;

/* Parses len bytes of text into *doc (zero it first; free it with baton__plan_json_free, also after
 * a failure). The root must be an object or an array. Accepts exactly what Jansson's
 * json_loadb(JSON_REJECT_DUPLICATES) accepts, except a NUL byte right after a number or a literal,
 * which Jansson skips and this reader refuses ("NUL byte in the text"). Returns 0, BATON_ENOMEM,
 * BATON_EPLAN with *e filled when the text holds more values than the memory bound allows, or
 * BATON_EPARSE with *e filled: Jansson's message and position when Jansson also refuses the
 * text (the reference wording, for texts up to JSON_JANSSON_MAX), else this reader's own. */
int baton__plan_json_parse(jdoc *doc, const char *text, size_t len, jerror *e);
void baton__plan_json_free(jdoc *doc);

/* Reads the whole of a regular file (a FIFO, directory or device is refused at once, never waited
 * on: baton__plan_open_regular) into a new buffer *text of *len bytes, for the parser: 0, or
 * BATON_EIO / BATON_ENOMEM with err naming the path and `what` ("plan file"). plan/npy.c. */
int baton__plan_read_regular(const char *path, const char *what, char **text, size_t *len,
                             baton_error *err);

/* The child of object node obj under key (the first, keys being distinct), or -1 when obj is not
 * an object or has no such key. */
int baton__plan_json_get(const jdoc *doc, int obj, const char *key);

/* "an object", "an array", "a string", "an integer", "a number", "a bool" or "null" (also for a
 * node < 0), for messages such as "must be a string, not an integer". */
const char *baton__plan_json_kind(const jdoc *doc, int node);

static inline int jis(const jdoc *doc, int node, jtype type)
{
    return node >= 0 && doc->v[node].type == type;
}

static inline int jis_number(const jdoc *doc, int node)
{
    return jis(doc, node, J_INT) || jis(doc, node, J_REAL);
}

#endif /* BATON_PLAN_JSON_H */
