/* unicode.c: UTF-8, the character classes of the pre-tokenizers' patterns and the NFC check
 * (unicode.h), by binary search over the generated tables. */
#include "text/unicode.h"

#include "text/unicode_tables.h"

/* The row of a table of [first, last, ...] rows (stride words a row) that holds cp, or -1. */
static long find(const uint32_t *t, size_t rows, size_t stride, uint32_t cp)
{
    size_t lo = 0, hi = rows;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < t[mid * stride])
            hi = mid;
        else if (cp > t[mid * stride + 1])
            lo = mid + 1;
        else
            return (long)mid;
    }
    return -1;
}

#define IN(table, cp) (find(&table[0][0], sizeof table / sizeof table[0], 2, cp) >= 0)

int baton__uni_is_letter(uint32_t cp)
{
    if (cp < 0x80)
        return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return IN(uni_letter, cp);
}

int baton__uni_is_number(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= '0' && cp <= '9';
    return IN(uni_number, cp);
}

int baton__uni_is_space(uint32_t cp)
{
    switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return 1;
    default: return cp >= 0x2000 && cp <= 0x200A;
    }
}

static int ccc_of(uint32_t cp)
{
    if (cp < 0x300)
        return 0;
    long r = find(&uni_ccc[0][0], sizeof uni_ccc / sizeof uni_ccc[0], 3, cp);
    return r < 0 ? 0 : (int)uni_ccc[r][2];
}

/* Whether starter s (without a decomposition) and c compose: the generated pairs, and the
 * Hangul compositions (L + V, LV + T), which are algorithmic. */
static int composes(uint32_t s, uint32_t c)
{
    if (c >= 0x1161 && c <= 0x1175)
        return s >= 0x1100 && s <= 0x1112;
    if (c >= 0x11A8 && c <= 0x11C2)
        return s >= 0xAC00 && s <= 0xD7A3 && (s - 0xAC00) % 28 == 0;
    size_t lo = 0, hi = sizeof uni_pairs / sizeof uni_pairs[0];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uint32_t *p = uni_pairs[mid];
        if (s < p[0] || (s == p[0] && c < p[1]))
            hi = mid;
        else if (s > p[0] || c > p[1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* Hangul syllables decompose algorithmically, not through the table */
static int decomposes(uint32_t cp)
{
    return (cp >= 0xAC00 && cp <= 0xD7A3) || IN(uni_decomposes, cp);
}

int baton__uni_nfc_stable(const uint32_t *cp, size_t n, size_t *at)
{
    int last_ccc = 0;
    long starter = -1;   /* the index of the last starter (combining class 0) */
    int blocked_ccc = 0; /* the highest class since that starter */
    for (size_t i = 0; i < n; i++) {
        const uint32_t c = cp[i];
        if (c < 0x300) { /* Latin-1 and the rest below the first combining mark: all stable */
            last_ccc = 0;
            starter = (long)i;
            blocked_ccc = 0;
            continue;
        }
        const int ccc = ccc_of(c);
        *at = i;
        if (ccc != 0 && last_ccc > ccc) /* not in canonical order */
            return 0;
        if (IN(uni_nfc_no, c))
            return 0;
        if (IN(uni_nfc_maybe, c) && starter >= 0) {
            const uint32_t s = cp[starter];
            /* c reaches the starter unless a character between has class 0 or >= its own */
            const int reaches =
                ccc == 0 ? (size_t)starter + 1 == i : blocked_ccc < ccc || (size_t)starter + 1 == i;
            if (reaches && composes(s, c))
                return 0;
            if (reaches && decomposes(s)) /* may compose with a part of s: not decided here */
                return -1;
        }
        if (ccc == 0) {
            starter = (long)i;
            blocked_ccc = 0;
        } else if (ccc > blocked_ccc) {
            blocked_ccc = ccc;
        }
        last_ccc = ccc;
    }
    return 1;
}
