/* text.c: what the CLI prints that came from a file, made safe for a terminal (control bytes and
 * escape sequences shown as \xNN), and the edit distance behind "did you mean". No I/O here
 * except cli_fputs_safe, so the fuzz target can link it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Length of the valid UTF-8 sequence at s that is not a C1 control (U+0080..U+009F, which some
 * terminals act on), or 0. */
static size_t utf8_ok(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp <= 0x9f)
        return 0;
    return n;
}

size_t cli_escape(const char *src, char *dst, size_t cap, int keep_newlines)
{
    const unsigned char *s = (const unsigned char *)(src ? src : "(null)");
    size_t o = 0;
    if (cap < 4) {
        if (cap)
            dst[0] = 0;
        return 0;
    }
    while (*s) {
        char tmp[8];
        size_t n = 0, adv = 1;
        size_t u = *s >= 0x80 ? utf8_ok(s) : 0;
        if (u) {
            memcpy(tmp, s, u);
            n = adv = u;
        } else if ((*s == '\n' || *s == '\t') && keep_newlines) {
            tmp[n++] = (char)*s;
        } else if (*s < 0x20 || *s >= 0x7f) {
            static const char hex[] = "0123456789abcdef";
            tmp[0] = '\\', tmp[1] = 'x', tmp[2] = hex[*s >> 4], tmp[3] = hex[*s & 15];
            n = 4;
        } else {
            tmp[n++] = (char)*s;
        }
        if (o + n + 4 > cap) { /* keep room for "..." and the NUL */
            if (cap >= 4)
                memcpy(dst + o, "...", 3), o += 3;
            break;
        }
        memcpy(dst + o, tmp, n);
        o += n;
        s += adv;
    }
    dst[o] = 0;
    return o;
}

/* The library's messages name baton_options fields (an embedder's words); the CLI says its flags
 * instead. Each phrase is one the library writes (scheduler/runtime.c). */
static const char *const api_to_flag[][2] = {
    {"set baton_options.gpu = BATON_GPU_CPU", "use --gpu=cpu"},
    {"or BATON_GPU_AUTO without baton_options.fallback_is_error",
     "or drop --gpu=cuda and --no-fallback"},
    {"baton_options.fallback_is_error", "--no-fallback"},
    {"baton_options.gpu = BATON_GPU_CUDA (NCCL), BATON_GPU_SIM or BATON_GPU_CPU",
     "--gpu=cuda (NCCL), sim or cpu"},
    {"(baton_options.rendezvous_timeout_ms waits longer)", "(--rendezvous-timeout=S waits longer)"},
};

void cli_flags(const char *message, char *out, size_t cap)
{
    size_t n = 0;
    while (*message && n + 1 < cap) {
        size_t k = 0, len = 0;
        for (; k < sizeof api_to_flag / sizeof api_to_flag[0]; k++) {
            len = strlen(api_to_flag[k][0]);
            if (strncmp(message, api_to_flag[k][0], len) == 0)
                break;
        }
        if (k == sizeof api_to_flag / sizeof api_to_flag[0]) {
            out[n++] = *message++;
            continue;
        }
        n += (size_t)snprintf(out + n, cap - n, "%s", api_to_flag[k][1]);
        if (n >= cap)
            n = cap - 1;
        message += len;
    }
    out[n] = 0;
}

const char *cli_esc(const char *s)
{
    /* a few rotating buffers, so that one printf can show several names */
    static char buf[8][1024];
    static unsigned next;
    char *b = buf[next++ % 8];
    char said[1024 + 64];
    cli_flags(s, said, sizeof said);
    cli_escape(said, b, sizeof buf[0], 0);
    return b;
}

void cli_fputs_safe(const char *s, size_t len, FILE *f)
{
    /* a line at a time keeps the buffer small whatever the text's size */
    char out[4096 * 4 + 8], line[4096 + 1];
    size_t i = 0;
    while (i < len) {
        size_t n = len - i < sizeof line - 1 ? len - i : sizeof line - 1;
        /* do not cut a UTF-8 sequence: stop before a continuation byte's lead */
        while (n > 4 && i + n < len && ((unsigned char)s[i + n] & 0xc0) == 0x80)
            n--;
        memcpy(line, s + i, n);
        line[n] = 0;
        /* NUL bytes inside: escape them by hand, then go on after them */
        size_t z = strlen(line);
        cli_escape(line, out, sizeof out, 1);
        fputs(out, f);
        if (z < n) {
            fputs("\\x00", f);
            n = z + 1;
        }
        i += n;
    }
}

int cli_edit_distance(const char *a, const char *b, int limit)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return limit + 1;
    if ((la > lb ? la - lb : lb - la) > (size_t)limit)
        return limit + 1;
    int row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            if (up + 1 < best)
                best = up + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] > limit ? limit + 1 : row[lb];
}
