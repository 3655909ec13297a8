/* unicode.c: the character classes of the pre-tokenizers' patterns, the check that a text is
 * already NFC and NFC itself (unicode.h), by binary search over the generated tables. */
#include "text/unicode.h"

#include "text/unicode_tables.h"

/* The row of a sorted table (stride words a row) that holds cp, or -1: rows of [first, last, ...]
 * ranges, or of [key, ...] where last is 0 (the key is then both). */
static long find(const uint32_t *t, size_t rows, size_t stride, size_t last, uint32_t cp)
{
    size_t lo = 0, hi = rows;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < t[mid * stride])
            hi = mid;
        else if (cp > t[mid * stride + last])
            lo = mid + 1;
        else
            return (long)mid;
    }
    return -1;
}

#define IN(table, cp) (find(&table[0][0], sizeof table / sizeof table[0], 2, 1, cp) >= 0)

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
    long r = find(&uni_ccc[0][0], sizeof uni_ccc / sizeof uni_ccc[0], 3, 1, cp);
    return r < 0 ? 0 : (int)uni_ccc[r][2];
}

/* Hangul's algorithmic parts (Unicode 3.12): syllables from leading consonants, vowels and
 * trailing consonants */
enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7 };
enum { L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = 11172 };

/* The primary composite of s and c, or 0: Hangul's (L + V, LV + T) or the generated pairs. */
static uint32_t compose(uint32_t s, uint32_t c)
{
    if (s >= L_BASE && s < L_BASE + L_COUNT && c >= V_BASE && c < V_BASE + V_COUNT)
        return S_BASE + ((s - L_BASE) * V_COUNT + (c - V_BASE)) * T_COUNT;
    if (s >= S_BASE && s < S_BASE + S_COUNT && (s - S_BASE) % T_COUNT == 0 && c > T_BASE &&
        c < T_BASE + T_COUNT)
        return s + (c - T_BASE);
    size_t lo = 0, hi = sizeof uni_pairs / sizeof uni_pairs[0];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uint32_t *p = uni_pairs[mid];
        if (s < p[0] || (s == p[0] && c < p[1]))
            hi = mid;
        else if (s > p[0] || c > p[1])
            lo = mid + 1;
        else
            return p[2];
    }
    return 0;
}

static int composes(uint32_t s, uint32_t c)
{
    return compose(s, c) != 0;
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

size_t baton__uni_nfc(const uint32_t *in, size_t n, uint32_t *out)
{
    /* the canonical decomposition, each character's in full */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t c = in[i];
        long r;
        if (c >= S_BASE && c < S_BASE + S_COUNT) {
            const uint32_t k = c - S_BASE;
            out[m++] = L_BASE + k / N_COUNT;
            out[m++] = V_BASE + k % N_COUNT / T_COUNT;
            if (k % T_COUNT)
                out[m++] = T_BASE + k % T_COUNT;
        } else if (c >= 0xC0 &&
                   (r = find(&uni_decomp[0][0], sizeof uni_decomp / sizeof uni_decomp[0], 3, 0,
                             c)) >= 0) {
            for (uint32_t k = 0; k < uni_decomp[r][2]; k++)
                out[m++] = uni_decomp_pool[uni_decomp[r][1] + k];
        } else {
            out[m++] = c;
        }
    }
    /* the canonical order: each run of marks sorted by combining class, stably */
    for (size_t i = 1; i < m; i++) {
        const uint32_t c = out[i];
        const int cc = ccc_of(c);
        size_t j = i;
        while (cc != 0 && j > 0 && ccc_of(out[j - 1]) > cc) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = c;
    }
    /* the canonical composition (UAX #15's algorithm): each character joins the last starter
     * where nothing between blocks it (a starter, or a mark of its class or higher) */
    if (m == 0)
        return 0;
    size_t starter = 0, w = 1;
    int last = ccc_of(out[0]) ? 256 : 0; /* a text that starts with a mark composes nothing */
    for (size_t i = 1; i < m; i++) {
        const uint32_t c = out[i];
        const int cc = ccc_of(c);
        const uint32_t comp = compose(out[starter], c);
        if (comp && (last < cc || last == 0)) {
            out[starter] = comp;
            continue;
        }
        if (cc == 0)
            starter = w;
        last = cc;
        out[w++] = c;
    }
    return w;
}
