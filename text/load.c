/* load.c: the text layer's file reading and its refusals (load.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "text/load.h"

int baton__text_open(text_file *F, const char *path, const char *what, baton_error *err)
{
    *F = (text_file){path, {0}, err};
    char *text;
    size_t len;
    int rc = baton__plan_read_regular(path, what, &text, &len, err);
    if (rc)
        return rc;
    jerror je;
    rc = baton__plan_json_parse(&F->doc, text, len, &je);
    free(text);
    if (rc == BATON_EPARSE || rc == BATON_EPLAN)
        return baton__err_set(err, rc, "%s:%d:%d: %s", path, je.line, je.col, je.text);
    if (rc)
        return baton__err_set(err, BATON_ENOMEM, "%s: out of memory", path);
    if (!jis(&F->doc, 0, J_OBJECT))
        return baton__text_fail(F, 0, BATON_EPLAN, "a %s is an object", what);
    return 0;
}

void baton__text_close(text_file *F)
{
    baton__plan_json_free(&F->doc);
}

int baton__text_fail(text_file *F, int node, int code, const char *fmt, ...)
{
    char prefix[512];
    if (node >= 0)
        snprintf(prefix, sizeof prefix, "%s:%d:%d: ", F->path, F->doc.v[node].line,
                 F->doc.v[node].col);
    else
        snprintf(prefix, sizeof prefix, "%s: ", F->path);
    va_list ap;
    va_start(ap, fmt);
    baton__err_vset(F->err, code, prefix, fmt, ap);
    va_end(ap);
    return code;
}
