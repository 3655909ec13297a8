/* pretok.c: the pre-tokenizers' split of a text into pieces, for the three regular expressions
 * that the byte-level tokenizers of GPT-2, Llama 3 and Qwen 2 name, written out as the
 * backtracking matcher would run them (leftmost alternative first, greedy), so that no regular
 * expression engine is needed and every piece is the one `tokenizers` finds:
 *
 *   GPT2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   LLAMA3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 * ?[^\s\p{L}\p{N}]+[\r\n]*
 *          |\s*[\r\n]+|\s+(?!\S)|\s+
 *   QWEN2  as LLAMA3 with \p{N} for \p{N}{1,3}
 */
#include "text/tok_internal.h"
#include "text/unicode.h"

static int is_l(uint32_t c)
{
    return baton__uni_is_letter(c);
}
static int is_n(uint32_t c)
{
    return baton__uni_is_number(c);
}
static int is_s(uint32_t c)
{
    return baton__uni_is_space(c);
}
static int is_crlf(uint32_t c)
{
    return c == '\r' || c == '\n';
}
/* [^\s\p{L}\p{N}] */
static int is_other(uint32_t c)
{
    return !is_s(c) && !is_l(c) && !is_n(c);
}

/* The end of a run of code points from i for which f holds. */
static size_t run(const uint32_t *cp, size_t n, size_t i, int (*f)(uint32_t))
{
    while (i < n && f(cp[i]))
        i++;
    return i;
}

/* ASCII letter c under a case-insensitive match: c itself, its other case, and (for s) U+017F
 * LATIN SMALL LETTER LONG S, whose simple case folding is s */
static int ci(uint32_t c, char want)
{
    return c == (uint32_t)want || c == (uint32_t)(want - 'a' + 'A') || (want == 's' && c == 0x17F);
}

/* 's|'t|'re|'ve|'m|'ll|'d at i (case-insensitive where icase): the end, or 0. */
static size_t contraction(const uint32_t *cp, size_t n, size_t i, int icase)
{
    if (cp[i] != '\'' || i + 1 >= n)
        return 0;
    const uint32_t a = cp[i + 1], b = i + 2 < n ? cp[i + 2] : 0;
#define C(c, w) (icase ? ci(c, w) : (c) == (uint32_t)(w))
    if (C(a, 's') || C(a, 't') || C(a, 'm') || C(a, 'd'))
        return i + 2;
    if ((C(a, 'r') || C(a, 'v')) && C(b, 'e'))
        return i + 3;
    if (C(a, 'l') && C(b, 'l'))
        return i + 3;
#undef C
    return 0;
}

/* \s+(?!\S) then \s+ at i (cp[i] is white space): the run, less its last character where
 * something that is not white space follows and the run is longer than one */
static size_t spaces(const uint32_t *cp, size_t n, size_t i)
{
    const size_t j = run(cp, n, i, is_s);
    if (j == n || j - i == 1)
        return j;
    return j - 1;
}

static size_t gpt2(const uint32_t *cp, size_t n, size_t i)
{
    size_t e = contraction(cp, n, i, 0);
    if (e)
        return e;
    /* ' ?' then a class: the space is taken only where the class follows */
    const size_t k = cp[i] == ' ' && i + 1 < n ? i + 1 : i;
    for (size_t s = k;; s = i) {
        if (is_l(cp[s]))
            return run(cp, n, s, is_l);
        if (is_n(cp[s]))
            return run(cp, n, s, is_n);
        if (is_other(cp[s]))
            return run(cp, n, s, is_other);
        if (s == i)
            break;
    }
    return spaces(cp, n, i);
}

static size_t llama3(const uint32_t *cp, size_t n, size_t i, int max_digits)
{
    size_t e = contraction(cp, n, i, 1);
    if (e)
        return e;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    const uint32_t c = cp[i];
    if (!is_crlf(c) && !is_l(c) && !is_n(c) && i + 1 < n && is_l(cp[i + 1]))
        return run(cp, n, i + 1, is_l);
    if (is_l(c))
        return run(cp, n, i, is_l);
    /* \p{N}{1,max} */
    if (is_n(c)) {
        size_t j = i;
        while (j < n && j - i < (size_t)max_digits && is_n(cp[j]))
            j++;
        return j;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t s = c == ' ' && i + 1 < n && is_other(cp[i + 1]) ? i + 1 : i;
    if (is_other(cp[s]))
        return run(cp, n, run(cp, n, s, is_other), is_crlf);
    /* \s*[\r\n]+: the white space up to its last line break */
    const size_t j = run(cp, n, i, is_s);
    for (size_t k = j; k > i; k--)
        if (is_crlf(cp[k - 1]))
            return k;
    return spaces(cp, n, i);
}

size_t baton__tok_piece_end(int pattern, const uint32_t *cp, size_t n, size_t i)
{
    switch (pattern) {
    case PAT_GPT2: return gpt2(cp, n, i);
    case PAT_LLAMA3: return llama3(cp, n, i, 3);
    case PAT_QWEN2: return llama3(cp, n, i, 1);
    default: return n;
    }
}
