/* test_json.c: the JSON reader alone (plan/json.c), without plans: node layout and nesting, string
 * escapes and UTF-8, numbers at their edges, duplicate keys, NUL bytes, and the line:column it
 * reports for values, keys and errors. The plan-level differential against Jansson is in
 * test_plan.c and the fuzzer. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/json.h"

/* Parses text of length len; the document is freed by the caller with baton__plan_json_free. */
static int parse_n(jdoc *doc, const char *text, size_t len, jerror *e)
{
    memset(doc, 0, sizeof *doc);
    memset(e, 0, sizeof *e);
    return baton__plan_json_parse(doc, text, len, e);
}

/* Parses text that must be well-formed; returns the document. */
static jdoc parse_ok(const char *text)
{
    jdoc doc;
    jerror e;
    int rc = parse_n(&doc, text, strlen(text), &e);
    cr_assert_eq(rc, 0, "'%s' did not parse: %d:%d: %s", text, e.line, e.col, e.text);
    return doc;
}

/* Parses text that must be refused; returns the error. */
static jerror parse_bad_n(const char *text, size_t len)
{
    jdoc doc;
    jerror e;
    int rc = parse_n(&doc, text, len, &e);
    baton__plan_json_free(&doc);
    cr_assert_eq(rc, BATON_EPARSE, "'%s' parsed (rc %d) but must be refused", text, rc);
    cr_assert(e.line >= 1 && e.col >= 0, "'%s': no position (%d:%d)", text, e.line, e.col);
    cr_assert(e.text[0] != 0, "'%s': no message", text);
    return e;
}

static jerror parse_bad(const char *text)
{
    return parse_bad_n(text, strlen(text));
}

/* The k-th child (0-based) of node n. */
static int child(const jdoc *doc, int n, int k)
{
    int c = doc->v[n].first;
    while (c >= 0 && k-- > 0)
        c = doc->v[c].next;
    cr_assert(c >= 0, "node %d has no child %d", n, k);
    return c;
}

/* The decoded string of ["..."] (one string in an array). */
static void expect_string(const char *text, const char *want, size_t want_len)
{
    jdoc doc = parse_ok(text);
    int s = doc.v[0].first;
    cr_assert(jis(&doc, s, J_STRING), "%s: not a string", text);
    cr_expect_eq(doc.v[s].len, want_len, "%s: %zu bytes, want %zu", text, doc.v[s].len, want_len);
    cr_expect(memcmp(doc.v[s].s, want, want_len) == 0, "%s: wrong bytes", text);
    cr_expect_eq(doc.v[s].s[want_len], 0, "%s: not NUL-terminated", text);
    baton__plan_json_free(&doc);
}

/* ---- structure --------------------------------------------------------------------------- */

Test(json, links_children_of_nested_containers_in_document_order)
{
    jdoc doc = parse_ok("{\"a\": [1, [2, 3], {}], \"b\": {\"c\": null}, \"d\": []}");
    cr_assert(jis(&doc, 0, J_OBJECT));
    cr_expect_eq(doc.v[0].n, 3);
    int a = baton__plan_json_get(&doc, 0, "a"), b = baton__plan_json_get(&doc, 0, "b");
    int d = baton__plan_json_get(&doc, 0, "d");
    cr_assert(a >= 0 && b >= 0 && d >= 0);
    cr_expect_eq(a, child(&doc, 0, 0));
    cr_expect_eq(b, child(&doc, 0, 1));
    cr_expect_eq(d, child(&doc, 0, 2));
    cr_expect_eq(doc.v[d].next, -1, "the last child ends the sibling list");

    cr_assert(jis(&doc, a, J_ARRAY));
    cr_expect_eq(doc.v[a].n, 3);
    cr_expect_eq(doc.v[child(&doc, a, 0)].i, 1);
    int inner = child(&doc, a, 1);
    cr_assert(jis(&doc, inner, J_ARRAY));
    cr_expect_eq(doc.v[inner].n, 2);
    cr_expect_eq(doc.v[child(&doc, inner, 0)].i, 2);
    cr_expect_eq(doc.v[child(&doc, inner, 1)].i, 3);
    int empty = child(&doc, a, 2);
    cr_expect(jis(&doc, empty, J_OBJECT));
    cr_expect_eq(doc.v[empty].n, 0);
    cr_expect_eq(doc.v[empty].first, -1);

    /* nodes are in document order: a parent precedes its children */
    for (int k = 0; k < doc.n; k++)
        if (jis(&doc, k, J_ARRAY) || jis(&doc, k, J_OBJECT))
            for (int c = doc.v[k].first; c >= 0; c = doc.v[c].next)
                cr_expect_gt(c, k);
    cr_expect(jis(&doc, baton__plan_json_get(&doc, b, "c"), J_NULL));
    cr_expect_str_eq(doc.v[a].key, "a");
    cr_expect_null(doc.v[child(&doc, a, 0)].key, "array elements have no key");
    cr_expect_eq(doc.n, 10, "one node per value");
    baton__plan_json_free(&doc);
}

Test(json, answers_get_only_for_objects_and_present_keys)
{
    jdoc doc = parse_ok("{\"k\": 1, \"kk\": 2, \"list\": [{\"k\": 3}]}");
    cr_expect_eq(doc.v[baton__plan_json_get(&doc, 0, "kk")].i, 2);
    cr_expect_eq(baton__plan_json_get(&doc, 0, "missing"), -1);
    cr_expect_eq(baton__plan_json_get(&doc, 0, ""), -1);
    int list = baton__plan_json_get(&doc, 0, "list");
    cr_expect_eq(baton__plan_json_get(&doc, list, "k"), -1, "an array has no keys");
    cr_expect_eq(baton__plan_json_get(&doc, -1, "k"), -1, "no node, no key");
    cr_expect_eq(doc.v[baton__plan_json_get(&doc, doc.v[list].first, "k")].i, 3);
    baton__plan_json_free(&doc);
}

Test(json, names_each_kind_for_messages)
{
    jdoc doc = parse_ok("[{}, [], \"s\", 1, 1.5, true, false, null]");
    static const char *const want[] = {"an object", "an array", "a string", "an integer",
                                       "a number",  "a bool",   "a bool",   "null"};
    int k = 0;
    for (int c = doc.v[0].first; c >= 0; c = doc.v[c].next, k++)
        cr_expect_str_eq(baton__plan_json_kind(&doc, c), want[k]);
    cr_expect_eq(k, 8);
    cr_expect_str_eq(baton__plan_json_kind(&doc, -1), "null");
    baton__plan_json_free(&doc);
}

Test(json, accepts_only_an_object_or_an_array_at_the_top)
{
    static const char *const bad[] = {"",     "   ",  "1",    "\"s\"",         "null",
                                      "true", "{} x", "{}{}", "\xef\xbb\xbf{}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        parse_bad(bad[i]);
    jdoc doc = parse_ok(" \t\r\n[] \n");
    cr_expect(jis(&doc, 0, J_ARRAY));
    baton__plan_json_free(&doc);
}

Test(json, nests_up_to_jansson_depth_and_no_deeper)
{
    /* every value counts: JSON_MAX_DEPTH arrays, or that many minus one around a scalar */
    static char text[2 * (JSON_MAX_DEPTH + 2) + 1];
    for (int extra = 0; extra <= 1; extra++) {
        for (int scalar = 0; scalar <= 1; scalar++) {
            int depth = JSON_MAX_DEPTH - scalar + extra;
            size_t k = 0;
            for (int i = 0; i < depth; i++)
                text[k++] = '[';
            if (scalar)
                text[k++] = '7';
            for (int i = 0; i < depth; i++)
                text[k++] = ']';
            jdoc doc;
            jerror e;
            int rc = parse_n(&doc, text, k, &e);
            if (extra) {
                cr_expect_eq(rc, BATON_EPARSE, "depth %d%s must be refused", depth,
                             scalar ? " + a scalar" : "");
                cr_expect(strstr(e.text, "depth") != NULL, "message: %s", e.text);
            } else {
                cr_expect_eq(rc, 0, "depth %d%s: %s", depth, scalar ? " + a scalar" : "", e.text);
                cr_expect_eq(doc.n, depth + scalar);
            }
            baton__plan_json_free(&doc);
        }
    }
}

/* ---- strings ----------------------------------------------------------------------------- */

Test(json, decodes_every_short_escape)
{
    expect_string("[\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"]", "\" \\ / \b \f \n \r \t", 15);
    parse_bad("[\"\\x\"]");
    parse_bad("[\"\\'\"]");
    parse_bad("[\"\\");
    parse_bad("[\"tab\there\"]"); /* a raw control character */
    parse_bad("[\"line\nbreak\"]");
}

Test(json, decodes_unicode_escapes_to_utf8)
{
    expect_string("[\"a\\u0041\"]", "aA", 2);
    expect_string("[\"\\u00e9\"]", "\xc3\xa9", 2);
    expect_string("[\"\\u20AC\"]", "\xe2\x82\xac", 3); /* upper-case hex, 3 bytes */
    expect_string("[\"\\uffff\"]", "\xef\xbf\xbf", 3);
    expect_string("[\"\\u007f\\u0080\\u07ff\\u0800\"]", "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80", 8);
    parse_bad("[\"\\u00\"]");
    parse_bad("[\"\\uZZZZ\"]");
    parse_bad("[\"\\u12");
    /* a NUL would cut the decoded string; the message says the rule, not a parser flag */
    jerror e = parse_bad("[\"\\u0000\"]");
    cr_expect(strstr(e.text, "NUL character") && !strstr(e.text, "JSON_ALLOW_NUL"), "%s", e.text);
}

Test(json, joins_surrogate_pairs_and_refuses_halves)
{
    expect_string("[\"\\ud83d\\ude00\"]", "\xf0\x9f\x98\x80", 4);     /* U+1F600 */
    expect_string("[\"\\uD800\\uDC00\"]", "\xf0\x90\x80\x80", 4);     /* U+10000, the first */
    expect_string("[\"\\udbff\\udfff\"]", "\xf4\x8f\xbf\xbf", 4);     /* U+10FFFF, the last */
    expect_string("[\"x\\ud83d\\ude00y\"]", "x\xf0\x9f\x98\x80y", 6); /* within text */
    parse_bad("[\"\\ud83d\"]");                                       /* high half alone */
    parse_bad("[\"\\ud83dx\"]");       /* high half, then a character */
    parse_bad("[\"\\ud83d\\u0041\"]"); /* high half, then not a low half */
    parse_bad("[\"\\ud83d\\ud83d\"]"); /* two high halves */
    parse_bad("[\"\\ude00\"]");        /* low half alone */
    parse_bad("[\"\\ude00\\ud83d\"]"); /* the pair reversed */
}

Test(json, checks_raw_utf8)
{
    expect_string("[\"\xc3\xa9\"]", "\xc3\xa9", 2);
    expect_string("[\"\xf0\x9f\x98\x80\"]", "\xf0\x9f\x98\x80", 4);
    parse_bad("[\"\xc3\"]");             /* truncated sequence */
    parse_bad("[\"\xc0\x80\"]");         /* overlong NUL */
    parse_bad("[\"\xe0\x80\xaf\"]");     /* overlong '/' */
    parse_bad("[\"\xed\xa0\x80\"]");     /* an encoded surrogate */
    parse_bad("[\"\xf4\x90\x80\x80\"]"); /* above U+10FFFF */
    parse_bad("[\"\x80\"]");             /* a lone continuation byte */
    parse_bad("[\xc3\xa9]");             /* UTF-8 outside a string */
}

Test(json, decodes_keys_like_values)
{
    jdoc doc = parse_ok("{\"\\u0061b\\n\": 1}");
    cr_expect_str_eq(doc.v[1].key, "ab\n");
    cr_expect_eq(baton__plan_json_get(&doc, 0, "ab\n"), 1);
    baton__plan_json_free(&doc);
}

/* ---- numbers ----------------------------------------------------------------------------- */

Test(json, reads_integers_to_the_edges_of_64_bits)
{
    /* 18 digits and fewer are read without strtoll, 19 with it: both sides of that line */
    jdoc doc = parse_ok("[0, -0, 7, -12, 999999999999999999, -999999999999999999, "
                        "1000000000000000000, 9223372036854775807, -9223372036854775808]");
    static const long long want[] = {0,
                                     0,
                                     7,
                                     -12,
                                     999999999999999999LL,
                                     -999999999999999999LL,
                                     1000000000000000000LL,
                                     9223372036854775807LL,
                                     -9223372036854775807LL - 1};
    int k = 0;
    for (int c = doc.v[0].first; c >= 0; c = doc.v[c].next, k++) {
        cr_expect(jis(&doc, c, J_INT), "element %d is not an integer", k);
        cr_expect_eq(doc.v[c].i, want[k], "element %d: %lld", k, doc.v[c].i);
        cr_expect_eq(doc.v[c].f, (double)want[k], "element %d: f is the integer's value", k);
    }
    cr_expect_eq(k, 9);
    baton__plan_json_free(&doc);
    jerror e = parse_bad("[9223372036854775808]");
    cr_expect(strstr(e.text, "too big") != NULL, "message: %s", e.text);
    parse_bad("[-9223372036854775809]");
}

Test(json, reads_reals_in_every_json_form)
{
    /* 1e-400 underflows to 0, which Jansson accepts too */
    jdoc doc = parse_ok("[1.5, -0.25, 1e3, 1E-2, 2.5e+2, 0.0, 1e-400]");
    static const double want[] = {1.5, -0.25, 1000, 0.01, 250, 0, 0};
    int k = 0;
    for (int c = doc.v[0].first; c >= 0; c = doc.v[c].next, k++) {
        cr_expect(jis(&doc, c, J_REAL), "element %d is not a real", k);
        cr_expect_eq(doc.v[c].f, want[k], "element %d: %g", k, doc.v[c].f);
    }
    cr_expect_eq(k, 7);
    baton__plan_json_free(&doc);
    /* a literal longer than the reader's stack buffer (64 bytes) */
    char text[256];
    snprintf(text, sizeof text, "[0.%0100d1]", 0);
    doc = parse_ok(text);
    cr_expect(jis(&doc, 1, J_REAL));
    cr_expect(doc.v[1].f > 0 && doc.v[1].f < 1e-99, "%g", doc.v[1].f);
    baton__plan_json_free(&doc);
}

Test(json, refuses_numbers_json_does_not_allow)
{
    static const char *const bad[] = {"[-]",      "[01]",  "[-01]",      "[1.]",    "[.5]",
                                      "[1e]",     "[1e+]", "[+1]",       "[0x10]",  "[1e400]",
                                      "[-1e400]", "[NaN]", "[Infinity]", "[1.5.2]", "[--1]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        parse_bad(bad[i]);
}

Test(json, reads_literals_as_whole_words)
{
    jdoc doc = parse_ok("[true,false,null]");
    cr_expect(jis(&doc, 1, J_TRUE));
    cr_expect(jis(&doc, 2, J_FALSE));
    cr_expect(jis(&doc, 3, J_NULL));
    baton__plan_json_free(&doc);
    static const char *const bad[] = {"[tru]", "[truex]", "[True]", "[nul]", "[nulll]", "[f]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        parse_bad(bad[i]);
}

/* ---- duplicate keys and NUL bytes -------------------------------------------------------- */

Test(json, refuses_a_key_repeated_in_one_object)
{
    parse_bad("{\"a\": 1, \"a\": 2}");
    parse_bad("{\"\\u0061\": 1, \"a\": 2}"); /* the same key once decoded */
    jdoc doc = parse_ok("{\"a\": 1, \"b\": {\"a\": 2}, \"c\": [{\"a\": 3}, {\"a\": 4}]}");
    baton__plan_json_free(&doc);

    /* a large object is checked by sorting its keys: a duplicate far apart is still found */
    char text[4096];
    size_t n = (size_t)snprintf(text, sizeof text, "{");
    for (int k = 0; k < 100; k++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%s\"k%d\": %d", k ? "," : "", k, k);
    snprintf(text + n, sizeof text - n, "}");
    doc = parse_ok(text);
    cr_expect_eq(doc.v[0].n, 100);
    baton__plan_json_free(&doc);
    snprintf(text + n, sizeof text - n, ", \"k3\": 0}");
    jerror e = parse_bad(text);
    cr_expect(strstr(e.text, "duplicate") != NULL, "message: %s", e.text);
}

Test(json, refuses_nul_bytes_anywhere)
{
    parse_bad_n("[\"a\0b\"]", 7);   /* inside a string */
    parse_bad_n("[1]\0", 4);        /* after the document */
    parse_bad_n("[\0]", 3);         /* where a value starts */
    parse_bad_n("{\"a\0\": 1}", 9); /* inside a key */
    /* Jansson skips a NUL right after a number or literal; this reader says what it is */
    jerror e = parse_bad_n("[4, 8\0]", 7);
    cr_expect_str_eq(e.text, "NUL byte in the text");
    cr_expect_eq(e.line, 1);
    cr_expect_eq(e.col, 6);
    e = parse_bad_n("[\ntrue\0]", 8);
    cr_expect_str_eq(e.text, "NUL byte in the text");
    cr_expect_eq(e.line, 2);
    cr_expect_eq(e.col, 5);
}

Test(json, reads_only_the_given_length)
{
    /* the text goes on past len: what is beyond must not be read */
    const char *text = "{\"a\": [1, 2]} trailing garbage";
    jdoc doc;
    jerror e;
    cr_assert_eq(parse_n(&doc, text, 13, &e), 0, "%s", e.text);
    cr_expect_eq(doc.v[baton__plan_json_get(&doc, 0, "a")].n, 2);
    baton__plan_json_free(&doc);
    parse_bad_n(text, 12); /* cut before the closing brace */
}

/* ---- positions --------------------------------------------------------------------------- */

Test(json, records_line_and_column_of_values_and_keys)
{
    /* columns count characters, not bytes: é is one column */
    const char *text = "{\n"
                       "  \"a\": [1,\n"
                       "     \"\xc3\xa9\xc3\xa9\", 2],\n"
                       "\t\"b\":{}}";
    jdoc doc = parse_ok(text);
    cr_expect_eq(doc.v[0].line, 1);
    cr_expect_eq(doc.v[0].col, 1);
    int a = baton__plan_json_get(&doc, 0, "a");
    cr_expect_eq(doc.v[a].key_line, 2);
    cr_expect_eq(doc.v[a].key_col, 3);
    cr_expect_eq(doc.v[a].line, 2);
    cr_expect_eq(doc.v[a].col, 8);
    int one = child(&doc, a, 0), str = child(&doc, a, 1), two = child(&doc, a, 2);
    cr_expect_eq(doc.v[one].line, 2);
    cr_expect_eq(doc.v[one].col, 9);
    cr_expect_eq(doc.v[one].key_line, 0, "array elements have no key position");
    cr_expect_eq(doc.v[str].line, 3);
    cr_expect_eq(doc.v[str].col, 6);
    cr_expect_eq(doc.v[two].line, 3);
    cr_expect_eq(doc.v[two].col, 12, "after two 2-byte characters, columns count characters");
    int b = baton__plan_json_get(&doc, 0, "b");
    cr_expect_eq(doc.v[b].key_line, 4);
    cr_expect_eq(doc.v[b].key_col, 2, "a tab is one column");
    cr_expect_eq(doc.v[b].col, 6);
    baton__plan_json_free(&doc);

    /* escapes take as many columns as they are written with */
    doc = parse_ok("[\"\\ud83d\\ude00\\n\", 5]");
    cr_expect_eq(doc.v[2].col, 20);
    baton__plan_json_free(&doc);
}

Test(json, reports_where_the_text_goes_wrong)
{
    jerror e = parse_bad("[1,\n 2,\n ]");
    cr_expect_eq(e.line, 3, "%d:%d: %s", e.line, e.col, e.text);
    e = parse_bad("{\n\"a\": tru}");
    cr_expect_eq(e.line, 2, "%d:%d: %s", e.line, e.col, e.text);
    e = parse_bad("[\"never closed");
    cr_expect_eq(e.line, 1, "%d:%d: %s", e.line, e.col, e.text);
    cr_expect_geq(e.col, 14, "%d:%d: %s", e.line, e.col, e.text);
}

/* The reader's memory stays within JSON_MEMORY_FACTOR times the text (issue 38: a 50 MB plan
 * reached 1.2 GB before its first error): a document denser in values than that allows is
 * refused, naming the bound, with nothing allocated past it; a plan-like one of the same size is
 * read. */
Test(json, keeps_its_memory_within_a_multiple_of_the_text)
{
    const size_t n = 4u << 20; /* 4 Mi values of "0,": 8 MiB of text */
    char *text = malloc(2 * n + 2);
    cr_assert_not_null(text);
    text[0] = '[';
    for (size_t i = 0; i < n; i++) {
        text[1 + 2 * i] = '0';
        text[2 + 2 * i] = ',';
    }
    text[2 * n] = ']';
    const size_t len = 2 * n + 1;
    jdoc doc = {0};
    jerror e;
    cr_expect_eq(baton__plan_json_parse(&doc, text, len, &e), BATON_EPLAN);
    cr_expect(strstr(e.text, "baton's reader keeps its memory within 8 times the file"), "%s",
              e.text);
    const size_t used = (size_t)doc.cap * sizeof(jnode) + len + 1;
    cr_expect_leq(used, JSON_MEMORY_FACTOR * len, "%zu bytes for %zu of text", used, len);
    baton__plan_json_free(&doc);
    /* one value a 10 bytes or so, as baton's compact plans have: read whole */
    size_t m = 0;
    for (size_t i = 0; m + 64 < len; i++)
        m += (size_t)snprintf(text + m, 64, "%s{\"name\":\"t%zu\",\"dtype\":\"f32\"}",
                              i ? "," : "[", i);
    text[m++] = ']';
    memset(&doc, 0, sizeof doc);
    cr_expect_eq(baton__plan_json_parse(&doc, text, m, &e), 0, "%s", e.text);
    cr_expect_leq((size_t)doc.cap * sizeof(jnode) + m + 1, JSON_MEMORY_FACTOR * m);
    baton__plan_json_free(&doc);
    free(text);
}
