/* utf8.h: UTF-8 as baton reads and writes it: the JSON reader's strings (plan/json.c) and the
 * tokenizer's texts (text/). One definition of what is valid: no overlong forms, no surrogates,
 * nothing past U+10FFFF (Jansson's rule, and the Unicode standard's). Inline: the JSON reader
 * asks it for every character of a plan. */
#ifndef BATON_CORE_UTF8_H
#define BATON_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The code point at s[*i] (of len bytes) into *cp, *i moved past it: 0, or -1 for bytes that
 * are not UTF-8 (a bad lead or continuation byte, an overlong form, a surrogate, past U+10FFFF,
 * a sequence cut by the end), *i then at the first bad byte. */
static inline int baton__utf8_next(const char *s, size_t len, size_t *i, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t at = *i;
    unsigned c = u[at];
    int n;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        *i = at + 1;
        return 0;
    }
    if (c >= 0xC2 && c <= 0xDF)
        n = 1, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 2, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 3, v = c & 0x07, min = 0x10000;
    else
        return -1;
    if (len - at - 1 < (size_t)n)
        return -1;
    for (int k = 1; k <= n; k++) {
        if ((u[at + k] & 0xC0) != 0x80)
            return -1;
        v = v << 6 | (u[at + k] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return -1;
    *cp = v;
    *i = at + 1 + (size_t)n;
    return 0;
}

/* The UTF-8 form of cp (a Unicode scalar value) into out (4 bytes at least): its length. */
static inline int baton__utf8_put(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

#endif /* BATON_CORE_UTF8_H */
