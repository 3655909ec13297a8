/* test_embedder.c: what an embedder sharing the process with another one relies on: a registry's
 * own log callback (the process-wide one stays the default), library messages that name
 * baton_options fields rather than CLI flags, a refused baton_runtime_create that reports through
 * its error alone (no warning logged before it), a caller's stream ignored with a note when the
 * GPU steps fall back to the CPU, and "did you mean" for an unknown tensor name. The plans ask
 * for cuda:14, which no machine here has, so the CPU fallback happens in every build. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "baton/baton.h"
#include "tests/support.h"

#define MAX_LINES 16

typedef struct captured {
    int n;
    baton_log_level level[MAX_LINES];
    char line[MAX_LINES][BATON_ERROR_MAX];
} captured;

static captured global, mine;

static void capture(void *user, baton_log_level level, const char *message)
{
    captured *c = user;
    if (c->n < MAX_LINES) {
        c->level[c->n] = level;
        snprintf(c->line[c->n], sizeof c->line[0], "%s", message);
    }
    c->n++;
}

static void setup(void)
{
    memset(&global, 0, sizeof global);
    memset(&mine, 0, sizeof mine);
    baton_log_set(capture, &global);
}

static void teardown(void)
{
    baton_log_set(NULL, NULL);
}

TestSuite(embedder, .init = setup, .fini = teardown);

static const char plan_json[] =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"far\", \"tensors\": ["
    "{\"name\": \"tokens\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"},"
    "{\"name\": \"logits\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}],"
    "\"steps\": [{\"name\": \"c\", \"kernel\": \"copy\", \"device\": \"cuda:14\","
    " \"inputs\": [\"tokens\"], \"outputs\": [\"logits\"]}]}";

static baton_plan *load(baton_registry *reg)
{
    baton_plan *p = NULL;
    baton_error err = {0};
    cr_assert_eq(
        baton_plan_load_string(reg, plan_json, strlen(plan_json), "far.json", NULL, &p, &err), 0,
        "%s", err.message);
    return p;
}

/* Creates and destroys a runtime of p with the defaults (BATON_GPU_AUTO: the CPU fallback). */
static void create_default(baton_plan *p)
{
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(p, NULL, &rt, &err), 0, "%s", err.message);
    baton_runtime_destroy(rt);
}

Test(embedder, a_registry_with_its_own_log_callback_keeps_its_messages_from_the_process_wide_one)
{
    baton_registry *a = NULL, *b = NULL;
    cr_assert_eq(baton_registry_create(&a), 0);
    cr_assert_eq(baton_registry_create(&b), 0);
    baton_registry_set_log(a, capture, &mine);
    baton_plan *pa = load(a), *pb = load(b);

    create_default(pa);
    cr_assert_eq(mine.n, 1, "the fallback warning reaches a's callback once (got %d)", mine.n);
    cr_assert_eq(mine.level[0], BATON_LOG_WARNING);
    cr_assert(strstr(mine.line[0], "needs cuda:14"), "%s", mine.line[0]);
    cr_assert_eq(global.n, 0, "a's message reached the process-wide callback: %s", global.line[0]);

    create_default(pb); /* b has no callback of its own: the process-wide one */
    cr_assert_eq(global.n, 1);
    cr_assert(strstr(global.line[0], "needs cuda:14"), "%s", global.line[0]);
    cr_assert_eq(mine.n, 1);

    baton_registry_set_log(a, NULL, NULL); /* back to the process-wide callback */
    create_default(pa);
    cr_assert_eq(global.n, 2);
    cr_assert_eq(mine.n, 1);
    baton_plan_free(pa);
    baton_plan_free(pb);
    baton_registry_destroy(a);
    baton_registry_destroy(b);
}

Test(embedder, messages_name_the_options_an_embedder_sets_not_cli_flags)
{
    baton_registry *reg = NULL;
    cr_assert_eq(baton_registry_create(&reg), 0);
    baton_plan *p = load(reg);
    create_default(p);
    cr_assert_eq(global.n, 1);
    cr_assert(strstr(global.line[0], "baton_options.fallback_is_error"), "%s", global.line[0]);
    cr_assert_null(strstr(global.line[0], "--"), "a CLI flag in a library message: %s",
                   global.line[0]);

    baton_options o;
    baton_options_init(&o);
    o.fallback_is_error = 1;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), BATON_ENODEV);
    cr_assert(strstr(err.message, "baton_options.gpu = BATON_GPU_CPU"), "%s", err.message);
    cr_assert_null(strstr(err.message, "--"), "a CLI flag in a library message: %s", err.message);
    baton_plan_free(p);
    baton_registry_destroy(reg);
}

Test(embedder, a_refused_create_reports_through_its_error_alone)
{
    baton_registry *reg = NULL;
    cr_assert_eq(baton_registry_create(&reg), 0);
    baton_plan *p = load(reg);
    /* the fallback is chosen first, then the arenas are refused: no warning about a runtime
     * that does not exist */
    static char memory[4096] __attribute__((aligned(256)));
    baton_arena arena = {.device = {BATON_DEVICE_CUDA, 3}, .data = memory, .nbytes = sizeof memory};
    baton_options o;
    baton_options_init(&o);
    o.arenas = &arena;
    o.n_arenas = 1;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "options.arenas[0]"), "%s", err.message);
    cr_assert_eq(global.n, 0, "a refused create also logged: %s", global.line[0]);
    baton_plan_free(p);
    baton_registry_destroy(reg);
}

Test(embedder, a_callers_stream_is_ignored_with_a_note_when_the_gpu_steps_fall_back_to_the_cpu)
{
    baton_registry *reg = NULL;
    cr_assert_eq(baton_registry_create(&reg), 0);
    baton_plan *p = load(reg);
    /* never dereferenced: the CPU runs the step */
    baton_stream st = {.device = {BATON_DEVICE_CUDA, 14}, .stream = (void *)(uintptr_t)0x1000};
    baton_options o;
    baton_options_init(&o);
    o.streams = &st;
    o.n_streams = 1;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), 0, "%s", err.message);
    cr_assert_eq(global.n, 2, "the fallback warning and the note, once each (got %d)", global.n);
    cr_assert_eq(global.level[0], BATON_LOG_WARNING);
    cr_assert_eq(global.level[1], BATON_LOG_NOTE);
    cr_assert(strstr(global.line[1], "options.streams[0] (cuda:14) is not used"), "%s",
              global.line[1]);
    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    cr_assert_eq(baton_runtime_set_input(rt, "tokens", x, sizeof x, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "logits", y, sizeof y, &err), 0, "%s", err.message);
    cr_assert_arr_eq(x, y, sizeof x);
    baton_runtime_destroy(rt);

    /* quiet: neither */
    o.quiet = 1;
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), 0, "%s", err.message);
    cr_assert_eq(global.n, 2);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
    baton_registry_destroy(reg);
}

Test(embedder, an_unknown_tensor_name_gets_did_you_mean_and_the_choices)
{
    baton_registry *reg = NULL;
    cr_assert_eq(baton_registry_create(&reg), 0);
    baton_plan *p = load(reg);
    baton_options o;
    baton_options_init(&o);
    o.gpu = BATON_GPU_CPU;
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(p, &o, &rt, &err), 0, "%s", err.message);
    float x[4] = {0};
    cr_assert_eq(baton_runtime_set_input(rt, "token", x, sizeof x, &err), BATON_ENOENT);
    cr_assert(strstr(err.message, "baton_runtime_set_input"), "%s", err.message);
    cr_assert(strstr(err.message, "no tensor named 'token' (did you mean 'tokens'?)"), "%s",
              err.message);
    cr_assert(strstr(err.message, "its inputs and state: 'tokens'"), "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "logit", x, sizeof x, &err), BATON_ENOENT);
    cr_assert(strstr(err.message, "(did you mean 'logits'?)"), "%s", err.message);
    /* nothing close: no guess, the choices still */
    cr_assert_eq(baton_runtime_set_input(rt, "zzzzzzzz", x, sizeof x, &err), BATON_ENOENT);
    cr_assert_null(strstr(err.message, "did you mean"), "%s", err.message);
    cr_assert(strstr(err.message, "its inputs and state: 'tokens'"), "%s", err.message);
    baton_runtime_destroy(rt);
    baton_plan_free(p);
    baton_registry_destroy(reg);
}

Test(embedder, what_a_built_in_delegate_logs_at_create_reaches_the_registrys_callback)
{
    /* a bf16 gemm of 16 rows on the CPU takes the OpenBLAS path, which makes an f32 copy of its
     * constant weight and says so in a note */
    static const char gemm_json[] =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"mm\", \"tensors\": ["
        "{\"name\": \"x\", \"dtype\": \"bf16\", \"shape\": [16, 32], \"role\": \"input\"},"
        "{\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": [32, 32], \"role\": \"constant\","
        " \"init\": {\"kind\": \"normal\", \"seed\": 3, \"std\": 0.02}},"
        "{\"name\": \"y\", \"dtype\": \"bf16\", \"shape\": [16, 32], \"role\": \"output\"}],"
        "\"steps\": [{\"name\": \"mm\", \"delegate\": \"gemm\", \"device\": \"cpu\","
        " \"inputs\": [\"x\", \"w\"], \"outputs\": [\"y\"]}]}";
    baton_registry *reg = NULL;
    cr_assert_eq(baton_registry_create(&reg), 0);
    baton_registry_set_log(reg, capture, &mine);
    baton_plan *p = NULL;
    baton_error err = {0};
    cr_assert_eq(
        baton_plan_load_string(reg, gemm_json, strlen(gemm_json), "mm.json", NULL, &p, &err), 0,
        "%s", err.message);
    create_default(p);
    cr_assert_eq(global.n, 0, "reached the process-wide callback: %s", global.line[0]);
    cr_assert_eq(mine.n, 1, "got %d messages", mine.n);
    cr_assert_eq(mine.level[0], BATON_LOG_NOTE);
    cr_assert(strstr(mine.line[0], "step mm (gemm on cpu)"), "%s", mine.line[0]);
    baton_plan_free(p);
    baton_registry_destroy(reg);
}
