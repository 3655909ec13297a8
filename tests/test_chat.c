/* test_chat.c: baton_chat (baton_tokenizer.h): a compiled chat template read from chat.json
 * (tests/data/tokenizer/chat.json is Llama 3's, as baton_export compiles it) and conversations
 * rendered from it, Jinja's trim reproduced, and the refusals at load and at render naming the
 * place. The comparison with transformers' apply_chat_template over model families' templates is
 * python/tests/test_chat.py. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "baton/baton_tokenizer.h"
#include "tests/support.h"

static baton_chat *load_path(const char *path)
{
    baton_chat *c = NULL;
    baton_error e;
    cr_assert_eq(baton_chat_load(path, &c, &e), 0, "%s", e.message);
    return c;
}

/* msgs rendered into a new string (sized by a first call) */
static char *render(const baton_chat *c, const baton_chat_message *m, size_t n, int gen)
{
    baton_error e;
    size_t len;
    cr_assert_eq(baton_chat_render(c, m, n, gen, NULL, 0, &len, &e), 0, "%s", e.message);
    char *s = malloc(len + 1);
    cr_assert_eq(baton_chat_render(c, m, n, gen, s, len + 1, &len, &e), 0, "%s", e.message);
    cr_assert_eq(strlen(s), len);
    return s;
}

#define H(role) "<|start_header_id|>" role "<|end_header_id|>\n\n"

Test(chat, renders_a_conversation_as_the_template_writes_it)
{
    baton_chat *c = load_path(test_path("tests/data/tokenizer/chat.json"));
    const baton_chat_message m[] = {{"system", "  Be brief.\n", 0},
                                    {"user", "Hi!", 0},
                                    {"assistant", "Hello.", 0},
                                    {"user", "2+2?", 0}};
    char *s = render(c, m, 4, 1);
    cr_expect_str_eq(
        s, "<|begin_of_text|>" H("system") "Be brief.<|eot_id|>" H("user") "Hi!<|eot_id|>" H(
               "assistant") "Hello.<|eot_id|>" H("user") "2+2?<|eot_id|>" H("assistant"));
    free(s);
    s = render(c, m + 1, 1, 0);
    cr_expect_str_eq(s, "<|begin_of_text|>" H("user") "Hi!<|eot_id|>");
    free(s);
    s = render(c, NULL, 0, 1);
    cr_expect_str_eq(s, "<|begin_of_text|>" H("assistant"));
    free(s);
    cr_expect_str_eq(baton_chat_turn_end(c), "<|eot_id|>", "the assistant's suffix");
    baton_chat_free(c);
}

/* Jinja's trim is Python's str.strip: every str.isspace character at both ends, the information
 * separators and Unicode's spaces too, nothing else (U+200B is not a space to Python) */
Test(chat, trim_strips_what_pythons_strip_strips)
{
    baton_chat *c = load_path(test_path("tests/data/tokenizer/chat.json"));
    const baton_chat_message m[] = {
        {"user", "\x1c\t\u3000\u00a0\u2028 a b\u2009\u200b\u205f\n\x1f\xc2\x85", 0}};
    char *s = render(c, m, 1, 0);
    cr_expect_str_eq(s, "<|begin_of_text|>" H("user") "a b\u2009\u200b<|eot_id|>");
    free(s);
    const baton_chat_message blank[] = {{"user", " \n\t ", 0}};
    s = render(c, blank, 1, 0);
    cr_expect_str_eq(s, "<|begin_of_text|>" H("user") "<|eot_id|>");
    free(s);
    baton_chat_free(c);
}

/* A content's length where it holds NUL bytes (a model's reply may): all of its bytes go in */
Test(chat, a_content_with_nul_bytes_goes_in_whole_by_its_length)
{
    baton_chat *c = load_path(test_path("tests/data/tokenizer/chat.json"));
    const baton_chat_message m[] = {{"user", " \"\0x\0 ", 5}};
    baton_error e;
    char text[128];
    size_t len;
    cr_assert_eq(baton_chat_render(c, m, 1, 0, text, sizeof text, &len, &e), 0, "%s", e.message);
    const char want[] = "<|begin_of_text|>" H("user") "\"\0x\0<|eot_id|>"; /* trimmed: spaces */
    cr_expect(len == sizeof want - 1 && memcmp(text, want, len) == 0, "%zu bytes", len);
    baton_chat_free(c);
}

Test(chat, a_short_buffer_is_refused_with_the_text_cut)
{
    baton_chat *c = load_path(test_path("tests/data/tokenizer/chat.json"));
    const baton_chat_message m[] = {{"user", "Hi!", 0}};
    baton_error e;
    size_t len;
    char small[8];
    cr_expect_eq(baton_chat_render(c, m, 1, 1, small, sizeof small, &len, &e), BATON_EINVAL);
    cr_expect_str_eq(small, "<|begin");
    cr_expect_eq(len, strlen("<|begin_of_text|>" H("user") "Hi!<|eot_id|>" H("assistant")));
    baton_chat_free(c);
}

static void expect_render_refused(const baton_chat *c, const baton_chat_message *m, size_t n,
                                  const char *says)
{
    baton_error e;
    size_t len;
    cr_expect_eq(baton_chat_render(c, m, n, 1, NULL, 0, &len, &e), BATON_EINVAL, "%s", says);
    cr_expect(strstr(e.message, says), "'%s' does not say '%s'", e.message, says);
}

Test(chat, conversations_the_template_does_not_write_are_refused_naming_the_message)
{
    baton_chat *c = load_path(test_path("tests/data/tokenizer/chat.json"));
    expect_render_refused(c, (baton_chat_message[]){{"user", "a", 0}, {"tool", "b", 0}}, 2,
                          "message 1: the role \"tool\"");
    expect_render_refused(c, (baton_chat_message[]){{"user", "a", 0}, {"system", "b", 0}}, 2,
                          "message 1: a system message goes first");
    expect_render_refused(c, (baton_chat_message[]){{"user", "a\xff", 0}}, 1,
                          "message 0: the content is not UTF-8 (byte 1)");
    expect_render_refused(c, (baton_chat_message[]){{"user", NULL, 0}}, 1,
                          "message 0: a role and a content");
    baton_chat_free(c);
}

/* chat.json written from text, for the refusals and the other forms */
static const char *write_tmp(const char *json)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/baton-chat-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(json, f);
    fclose(f);
    return path;
}

#define ROLES_OK                                                                                   \
    "\"roles\": {\"user\": {\"prefix\": \"<u>\", \"suffix\": \"</u>\", \"trim\": false},"          \
    " \"assistant\": {\"prefix\": \"<a>\", \"suffix\": \"</a>\", \"trim\": false},"                \
    " \"system\": {\"prefix\": \"<s>\", \"suffix\": \"</s>\", \"trim\": false}}"

/* A default system message goes in where the conversation has none; pairs of a role in a row and
 * a last assistant message refused where the template says so */
Test(chat, a_default_system_message_and_the_templates_constraints)
{
    baton_chat *c = load_path(write_tmp(
        "{\"format\": \"baton.chat\", \"version\": 1, \"begin\": \"\", \"default_system\": \"Be "
        "kind.\", " ROLES_OK ", \"generation_prompt\": \"<a>\", \"end\": \"<eot>\", "
        "\"system_refused\": null, \"alternate\": true, "
        "\"assistant_last\": false}"));
    char *s = render(c, (baton_chat_message[]){{"user", " hi ", 0}}, 1, 1);
    cr_expect_str_eq(s, "<s>Be kind.</s><u> hi </u><a>");
    free(s);
    s = render(c, (baton_chat_message[]){{"system", "Terse.", 0}, {"user", "hi", 0}}, 2, 0);
    cr_expect_str_eq(s, "<s>Terse.</s><u>hi</u><eot>", "the end where no generation prompt is");
    free(s);
    expect_render_refused(c, (baton_chat_message[]){{"user", "a", 0}, {"user", "b", 0}}, 2,
                          "message 1: two user messages in a row");
    expect_render_refused(c, (baton_chat_message[]){{"user", "a", 0}, {"assistant", "b", 0}}, 2,
                          "message 1: the model's chat template writes a conversation that ends");
    baton_chat_free(c);
    remove(write_tmp(""));
}

/* A template that moves a system message into a user turn (Mistral's): conversations without one
 * render, one with it is refused with the exporter's reason */
Test(chat, a_system_message_the_template_cannot_place_is_refused_with_the_reason)
{
    baton_chat *c = load_path(write_tmp(
        "{\"format\": \"baton.chat\", \"version\": 1, \"begin\": \"<s>\", \"default_system\": "
        "null, \"roles\": {\"user\": {\"prefix\": \"[INST] \", \"suffix\": \"[/INST]\", \"trim\": "
        "false}, \"assistant\": {\"prefix\": \"\", \"suffix\": \"</s>\", \"trim\": false}}, "
        "\"generation_prompt\": \"\", \"end\": \"\", \"system_refused\": \"it goes into the last "
        "user message\", \"alternate\": true, \"assistant_last\": true}"));
    char *s = render(
        c, (baton_chat_message[]){{"user", "a", 0}, {"assistant", "b", 0}, {"user", "c", 0}}, 3, 1);
    cr_expect_str_eq(s, "<s>[INST] a[/INST]b</s>[INST] c[/INST]");
    free(s);
    expect_render_refused(c, (baton_chat_message[]){{"system", "s", 0}, {"user", "a", 0}}, 2,
                          "message 0: a system message: it goes into the last user message");
    baton_chat_free(c);
    remove(write_tmp(""));
}

static void expect_refused(const char *json, int code, const char *says)
{
    baton_chat *c = NULL;
    baton_error e;
    const char *path = write_tmp(json);
    cr_expect_eq(baton_chat_load(path, &c, &e), code, "%s", e.message);
    cr_expect(c == NULL);
    cr_expect(strstr(e.message, path) && strstr(e.message, says), "'%s' does not say '%s'",
              e.message, says);
    remove(path);
}

#define HEAD "{\"format\": \"baton.chat\", \"version\": 1, "
#define TAIL                                                                                       \
    ", \"generation_prompt\": \"\", \"end\": \"\", \"system_refused\": null, \"alternate\": "      \
    "false, "                                                                                      \
    "\"assistant_last\": true}"

Test(chat, malformed_files_are_refused_naming_the_place)
{
    expect_refused("[1]", BATON_EPLAN, "a chat.json is an object");
    expect_refused("{\"format\": \"baton.plan\"}", BATON_EPLAN, ":1:1: not a chat.json");
    expect_refused("{\"format\": \"baton.chat\", \"version\": 2}", BATON_ENOTSUP,
                   ":1:37: \"version\" must be 1");
    expect_refused(HEAD "\"begin\": 3, \"default_system\": null, " ROLES_OK TAIL, BATON_EPLAN,
                   ":1:49: \"begin\" must be a string");
    expect_refused(HEAD "\"begin\": \"\", \"default_system\": null, \"roles\": {\"user\": "
                        "{\"prefix\": \"\", \"suffix\": \"\", \"trim\": false}}" TAIL,
                   BATON_EPLAN, "\"roles\" needs user and assistant");
    expect_refused(HEAD "\"begin\": \"\", \"default_system\": null, \"roles\": {\"tool\": {}}" TAIL,
                   BATON_ENOTSUP, "role \"tool\": baton renders system, user and assistant");
    expect_refused(HEAD "\"begin\": \"\", \"default_system\": null, " ROLES_OK TAIL "x",
                   BATON_EPARSE, "");
    expect_refused(HEAD "\"begin\": \"\", \"default_system\": null, \"extra\": 1, " ROLES_OK TAIL,
                   BATON_EPLAN, "unknown key \"extra\"");
    expect_refused(HEAD "\"begin\": \"\", \"default_system\": \"x\", \"roles\": {\"user\": "
                        "{\"prefix\": \"\", \"suffix\": \"\", \"trim\": false}, \"assistant\": "
                        "{\"prefix\": \"\", \"suffix\": \"\", \"trim\": \"no\"}}" TAIL,
                   BATON_EPLAN, "\"trim\" must be true or false");
    baton_chat *c = NULL;
    baton_error e;
    cr_expect_eq(baton_chat_load("/nonexistent/chat.json", &c, &e), BATON_EIO);
    cr_expect(strstr(e.message, "/nonexistent/chat.json"), "%s", e.message);
}
