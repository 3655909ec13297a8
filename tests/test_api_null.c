/* test_api_null.c: every public function given NULL for a pointer it takes returns BATON_EINVAL,
 * or does what baton.h documents for NULL (a NULL result, 0 for a count, nothing for a void
 * function), instead of crashing (issue 38). One row per function; each row runs in its
 * own process (a Criterion parameter), so a crash names the function. A function added to a
 * public header adds a row here. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "baton/baton.h"
#include "baton/baton_tokenizer.h"
#include "baton/baton_uv.h"
#include "tests/support.h"

static baton_registry *reg_(void)
{
    static baton_registry *r;
    if (!r)
        cr_assert_eq(baton_registry_create(&r), 0);
    return r;
}

static baton_plan *plan_(void)
{
    static baton_plan *p;
    baton_error e;
    if (!p)
        cr_assert_eq(baton_plan_load(reg_(), test_path("tests/data/good/minimal.json"), &p, &e), 0,
                     "%s", e.message);
    return p;
}

static baton_runtime *rt_(void)
{
    static baton_runtime *rt;
    if (!rt)
        rt = test_runtime(plan_(), BATON_GPU_CPU, BATON_SYNC_STRICT, 0, 0);
    return rt;
}

#define EINVAL_(call) ((call) == BATON_EINVAL)

static int r_dtype_from_name(void)
{
    return baton_dtype_from_name(NULL) == BATON_DTYPE_INVALID;
}
static int r_convert(void)
{
    float f = 1;
    return EINVAL_(baton_convert(NULL, BATON_DTYPE_F32, &f, BATON_DTYPE_F32, 1)) &&
           EINVAL_(baton_convert(&f, BATON_DTYPE_F32, NULL, BATON_DTYPE_F32, 1));
}
static int r_fill(void)
{
    return EINVAL_(baton_fill_normal(NULL, BATON_DTYPE_F32, 1, 1, 0, 1)) &&
           EINVAL_(baton_fill_uniform(NULL, BATON_DTYPE_F32, 1, 1, 0, 1));
}
static int r_device_format(void)
{
    baton_device d = {BATON_DEVICE_CPU, 0};
    char b[1];
    return baton_device_format(d, NULL, 16) == NULL && baton_device_format(d, b, 0) == b;
}
static int r_device_parse(void)
{
    baton_device d;
    return EINVAL_(baton_device_parse(NULL, &d)) && EINVAL_(baton_device_parse("cpu", NULL));
}
static int r_numel(void)
{
    return baton_tensor_desc_numel(NULL) == -1;
}
static int r_attrs_find(void)
{
    baton_attr a = {.name = "x", .type = BATON_ATTR_INT, .i = 1};
    return baton_attrs_find(NULL, 1, "x") == NULL && baton_attrs_find(&a, 1, NULL) == NULL;
}
static int r_registry(void)
{
    baton_target t = *baton_registry_find(reg_(), "copy");
    baton_error e;
    baton_registry_destroy(NULL);
    return EINVAL_(baton_registry_create(NULL)) && EINVAL_(baton_registry_add(NULL, &t, &e)) &&
           EINVAL_(baton_registry_add(reg_(), NULL, &e)) &&
           EINVAL_(baton_registry_replace(NULL, &t, &e)) &&
           EINVAL_(baton_registry_replace(reg_(), NULL, &e)) &&
           baton_registry_find(NULL, "copy") == NULL && baton_registry_find(reg_(), NULL) == NULL &&
           baton_registry_count(NULL) == 0 && baton_registry_at(NULL, 0) == NULL &&
           baton_target_impl_for(NULL, BATON_DEVICE_CPU) == NULL &&
           EINVAL_(baton_registry_load_plugin(NULL, "x.so", &e)) &&
           EINVAL_(baton_registry_load_plugin(reg_(), NULL, &e));
}
static int r_plan_load(void)
{
    baton_plan *p = NULL;
    baton_error e;
    const char *path = test_path("tests/data/good/minimal.json");
    baton_plan_free(NULL);
    return EINVAL_(baton_plan_load(NULL, path, &p, &e)) &&
           EINVAL_(baton_plan_load(reg_(), NULL, &p, &e)) &&
           EINVAL_(baton_plan_load(reg_(), path, NULL, &e)) &&
           EINVAL_(baton_plan_load_string(NULL, "{}", 2, "x", NULL, &p, &e)) &&
           EINVAL_(baton_plan_load_string(reg_(), NULL, 2, "x", NULL, &p, &e)) &&
           EINVAL_(baton_plan_load_string(reg_(), "{}", 2, "x", NULL, NULL, &e));
}
static int r_plan_queries(void)
{
    baton_tensor_info ti;
    baton_step_info si;
    baton_arena a;
    return baton_plan_name(NULL) == NULL && baton_plan_tensor_count(NULL) == 0 &&
           baton_plan_step_count(NULL) == 0 && EINVAL_(baton_plan_tensor_index(NULL, "x")) &&
           EINVAL_(baton_plan_tensor_index(plan_(), NULL)) &&
           EINVAL_(baton_plan_step_index(NULL, "c")) &&
           EINVAL_(baton_plan_step_index(plan_(), NULL)) &&
           EINVAL_(baton_plan_tensor_info(NULL, 0, &ti)) &&
           EINVAL_(baton_plan_tensor_info(plan_(), 0, NULL)) &&
           EINVAL_(baton_plan_step_info(NULL, 0, &si)) &&
           EINVAL_(baton_plan_step_info(plan_(), 0, NULL)) &&
           EINVAL_(baton_plan_describe(NULL, stdout, 0)) &&
           EINVAL_(baton_plan_describe(plan_(), NULL, 0)) && baton_plan_arena_count(NULL) == 0 &&
           EINVAL_(baton_plan_arena_info(NULL, 0, &a)) &&
           EINVAL_(baton_plan_arena_info(plan_(), 0, NULL));
}
static int r_sync_mode_parse(void)
{
    baton_sync_mode m;
    baton_options_init(NULL);
    return EINVAL_(baton_sync_mode_parse(NULL, &m)) &&
           EINVAL_(baton_sync_mode_parse("graph", NULL));
}
static int r_runtime_create(void)
{
    baton_runtime *rt = NULL;
    baton_error e;
    baton_runtime_destroy(NULL);
    return EINVAL_(baton_runtime_create(NULL, NULL, &rt, &e)) &&
           EINVAL_(baton_runtime_create(plan_(), NULL, NULL, &e));
}
static int r_runtime_io(void)
{
    float x[4] = {0};
    baton_error e;
    return EINVAL_(baton_runtime_set_input(NULL, "x", x, sizeof x, &e)) &&
           EINVAL_(baton_runtime_set_input(rt_(), NULL, x, sizeof x, &e)) &&
           EINVAL_(baton_runtime_set_input(rt_(), "x", NULL, sizeof x, &e)) &&
           EINVAL_(baton_runtime_get_output(NULL, "y", x, sizeof x, &e)) &&
           EINVAL_(baton_runtime_get_output(rt_(), NULL, x, sizeof x, &e)) &&
           EINVAL_(baton_runtime_get_output(rt_(), "y", NULL, sizeof x, &e)) &&
           EINVAL_(baton_runtime_bind(NULL, 0, NULL, &e)) && EINVAL_(baton_runtime_run(NULL, &e));
}
static int r_runtime_queries(void)
{
    baton_run_stats s;
    int64_t ns;
    memset(&s, 0xAB, sizeof s);
    baton_runtime_stats(NULL, &s); /* zeroes *out */
    baton_runtime_stats(rt_(), NULL);
    baton_runtime_reset_stats(NULL);
    return s.runs == 0 && baton_runtime_note(NULL) == NULL &&
           baton_runtime_tuning(NULL, 0) == NULL && EINVAL_(baton_runtime_recapture(NULL)) &&
           baton_runtime_mode(NULL) == BATON_SYNC_STRICT &&
           baton_runtime_gpu_backend(NULL) == BATON_GPU_CPU &&
           EINVAL_(baton_runtime_enable_step_timing(NULL, 1)) &&
           EINVAL_(baton_runtime_step_time_ns(NULL, 0, &ns)) &&
           EINVAL_(baton_runtime_step_time_ns(rt_(), 0, NULL)) &&
           EINVAL_(baton_runtime_trace_begin(NULL, 16)) &&
           EINVAL_(baton_runtime_trace_write(NULL, "t.json", NULL)) &&
           EINVAL_(baton_runtime_trace_write(rt_(), NULL, NULL));
}
static int r_npy(void)
{
    baton_tensor_desc d = {.dtype = BATON_DTYPE_F32, .rank = 1, .shape = {1}};
    void *data = NULL;
    float f = 0;
    baton_error e;
    return EINVAL_(baton_npy_read(NULL, &d, &data, &e)) &&
           EINVAL_(baton_npy_read("x.npy", NULL, &data, &e)) &&
           EINVAL_(baton_npy_read("x.npy", &d, NULL, &e)) &&
           EINVAL_(baton_npy_write(NULL, &d, &f, &e)) &&
           EINVAL_(baton_npy_write("/tmp/x.npy", NULL, &f, &e)) &&
           EINVAL_(baton_npy_write("/tmp/x.npy", &d, NULL, &e));
}
static int r_gpu_busy(void)
{
    baton_error e;
    /* the fraction is optional: without a begin (or a GPU) the call says so, and writes nothing */
    const int rc = baton_gpu_busy_end(NULL, &e);
    return rc == BATON_ESTATE || rc == BATON_ENOTSUP;
}
static int r_pool(void)
{
    baton_pool *pool = NULL;
    baton_job job;
    baton_error e;
    size_t a = 1, b = 1;
    baton_job_init(NULL);
    baton_job_init(&job);
    baton_pool_close(NULL, NULL, NULL);
    baton_pool_memory(NULL, &a, &b);
    baton_pool_memory(NULL, NULL, NULL);
    return EINVAL_(baton_pool_create(NULL, plan_(), NULL, 1, &pool, &e)) &&
           EINVAL_(baton_pool_submit(NULL, &job, NULL)) && EINVAL_(baton_pool_cancel(NULL)) &&
           baton_pool_instances(NULL) == 0 && baton_pool_pending(NULL) == 0 &&
           baton_pool_gpu_backend(NULL) == BATON_GPU_CPU && baton_pool_queues_ahead(NULL) == 0 &&
           a == 0 && b == 0;
}

static int r_dims_and_state(void)
{
    const char *name;
    int64_t v, lo, hi;
    baton_tensor_desc d;
    baton_error e;
    return baton_plan_dim_count(NULL) == 0 &&
           EINVAL_(baton_plan_dim_info(NULL, 0, &name, &lo, &hi)) &&
           baton_plan_tensor_dim(NULL, 0, 0) == -1 &&
           EINVAL_(baton_runtime_reset_state(NULL, &e)) &&
           EINVAL_(baton_runtime_set_dims(NULL, "seq", 1, &e)) &&
           EINVAL_(baton_runtime_set_dims(rt_(), NULL, 1, &e)) &&
           EINVAL_(baton_runtime_get_dims(NULL, "seq", &v)) &&
           EINVAL_(baton_runtime_get_dims(rt_(), NULL, &v)) &&
           EINVAL_(baton_runtime_get_dims(rt_(), "seq", NULL)) &&
           baton_runtime_graph_hits(NULL) == 0 &&
           EINVAL_(baton_runtime_tensor_desc(NULL, "x", &d)) &&
           EINVAL_(baton_runtime_tensor_desc(rt_(), NULL, &d)) &&
           EINVAL_(baton_runtime_tensor_desc(rt_(), "x", NULL));
}
static int r_pool_state(void)
{
    baton_job job;
    float f[4];
    baton_error e;
    baton_job_init(&job);
    return EINVAL_(baton_pool_submit_to(NULL, 0, &job, NULL)) &&
           EINVAL_(baton_pool_get_state(NULL, 0, "s", f, sizeof f, &e)) &&
           EINVAL_(baton_pool_set_state(NULL, 0, "s", f, sizeof f, &e)) &&
           EINVAL_(baton_pool_reset_state(NULL, 0, &e));
}
static int r_tokenizer(void)
{
    baton_tokenizer *t = NULL;
    baton_error e;
    int64_t id, ids[1];
    size_t n;
    char text[4];
    const char *path = test_path("tests/data/tokenizer/byte_level.json");
    if (!EINVAL_(baton_tokenizer_load(NULL, &t, &e)) ||
        !EINVAL_(baton_tokenizer_load(path, NULL, &e)))
        return 0;
    baton_tokenizer_free(NULL);
    if (baton_tokenizer_vocab_size(NULL) != 0 || baton_tokenizer_id_token(NULL, 0) != NULL ||
        baton_tokenizer_load(path, &t, &e) != 0)
        return 0;
    int ok = EINVAL_(baton_tokenizer_token_id(NULL, "a", &id)) &&
             EINVAL_(baton_tokenizer_token_id(t, NULL, &id)) &&
             EINVAL_(baton_tokenizer_token_id(t, "a", NULL)) &&
             EINVAL_(baton_tokenizer_encode(NULL, "a", 1, 1, ids, 1, &n, &e)) &&
             EINVAL_(baton_tokenizer_encode(t, NULL, 1, 1, ids, 1, &n, &e)) &&
             EINVAL_(baton_tokenizer_encode(t, "a", 1, 1, NULL, 1, &n, &e)) &&
             EINVAL_(baton_tokenizer_encode(t, "a", 1, 1, ids, 1, NULL, &e)) &&
             EINVAL_(baton_tokenizer_decode(NULL, ids, 1, 0, text, 4, &n, &e)) &&
             EINVAL_(baton_tokenizer_decode(t, NULL, 1, 0, text, 4, &n, &e)) &&
             EINVAL_(baton_tokenizer_decode(t, ids, 0, 0, NULL, 4, &n, &e)) &&
             EINVAL_(baton_tokenizer_decode(t, ids, 0, 0, text, 4, NULL, &e));
    baton_tokenizer_decoder *d = NULL;
    const char *piece;
    ok = ok && EINVAL_(baton_tokenizer_decoder_create(NULL, 0, &d, &e)) &&
         EINVAL_(baton_tokenizer_decoder_create(t, 0, NULL, &e)) &&
         EINVAL_(baton_tokenizer_decoder_push(NULL, 0, &piece, &n, &e)) &&
         EINVAL_(baton_tokenizer_decoder_finish(NULL, &piece, &n, &e)) &&
         baton_tokenizer_decoder_create(t, 0, &d, &e) == 0 &&
         EINVAL_(baton_tokenizer_decoder_push(d, 0, NULL, &n, &e)) &&
         EINVAL_(baton_tokenizer_decoder_push(d, 0, &piece, NULL, &e)) &&
         EINVAL_(baton_tokenizer_decoder_finish(d, NULL, &n, &e)) &&
         EINVAL_(baton_tokenizer_decoder_finish(d, &piece, NULL, &e));
    baton_tokenizer_decoder_destroy(d);
    baton_tokenizer_decoder_destroy(NULL);
    baton_tokenizer_free(t);
    baton_chat *c = NULL;
    const char *chat = test_path("tests/data/tokenizer/chat.json");
    const baton_chat_message m[1] = {{"user", "a", 0}};
    ok = ok && EINVAL_(baton_chat_load(NULL, &c, &e)) && EINVAL_(baton_chat_load(chat, NULL, &e)) &&
         baton_chat_load(chat, &c, &e) == 0 &&
         EINVAL_(baton_chat_render(NULL, m, 1, 1, text, 4, &n, &e)) &&
         EINVAL_(baton_chat_render(c, NULL, 1, 1, text, 4, &n, &e)) &&
         EINVAL_(baton_chat_render(c, m, 1, 1, NULL, 4, &n, &e)) &&
         EINVAL_(baton_chat_render(c, m, 1, 1, text, 4, NULL, &e));
    ok = ok && baton_chat_turn_end(NULL) == NULL;
    baton_chat_free(c);
    baton_chat_free(NULL);
    return ok;
}
static int r_no_pointers(void)
{
    /* functions without pointer arguments, called for completeness */
    baton_log_set(NULL, NULL);
    return baton_version() != 0 && baton_version_string() && baton_strerror(BATON_EINVAL) &&
           baton_dtype_name(BATON_DTYPE_F32) && baton_dtype_size(BATON_DTYPE_F32) == 4 &&
           baton_role_name(BATON_ROLE_INPUT) && baton_sync_mode_name(BATON_SYNC_GRAPH) &&
           baton_cuda_built() >= 0 && baton_cuda_device_count() >= 0 &&
           (baton_gpu_busy_begin(NULL), 1);
}

typedef struct null_row {
    const char *what;
    int (*ok)(void);
} null_row;

/* Rows are passed by index: Criterion may run each parameter in a fresh exec of this binary, where
 * the table's pointers differ. */
static const null_row rows[] = {
    {"baton_dtype_from_name", r_dtype_from_name},
    {"baton_convert", r_convert},
    {"baton_fill_normal, baton_fill_uniform", r_fill},
    {"baton_device_format", r_device_format},
    {"baton_device_parse", r_device_parse},
    {"baton_tensor_desc_numel", r_numel},
    {"baton_attrs_find", r_attrs_find},
    {"baton_registry_*, baton_target_impl_for", r_registry},
    {"baton_plan_load, baton_plan_load_string, baton_plan_free", r_plan_load},
    {"baton_plan_* queries, baton_plan_describe, baton_plan_arena_*", r_plan_queries},
    {"baton_sync_mode_parse, baton_options_init", r_sync_mode_parse},
    {"baton_runtime_create, baton_runtime_destroy", r_runtime_create},
    {"baton_runtime_set_input, get_output, bind, run", r_runtime_io},
    {"baton_runtime_stats and the other runtime queries", r_runtime_queries},
    {"baton_npy_read, baton_npy_write", r_npy},
    {"baton_gpu_busy_end", r_gpu_busy},
    {"baton_job_init, baton_pool_*", r_pool},
    {"baton_plan_dim_*, baton_plan_tensor_dim, baton_runtime_*_dims, _state, _tensor_desc",
     r_dims_and_state},
    {"baton_pool_submit_to, baton_pool_*_state", r_pool_state},
    {"baton_tokenizer_*", r_tokenizer},
    {"functions without pointer arguments", r_no_pointers},
};
/* Not here: baton_xla.h's entry points, which XLA calls with its own buffers (the FFI handlers
 * and the legacy custom calls check their arguments themselves). */

ParameterizedTestParameters(api_null, every_public_function_survives_null)
{
    static int idx[sizeof rows / sizeof rows[0]];
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        idx[i] = (int)i;
    return cr_make_param_array(int, idx, sizeof idx / sizeof idx[0]);
}

ParameterizedTest(int *i, api_null, every_public_function_survives_null)
{
    const null_row *row = &rows[*i];
    fprintf(stderr, "api_null: %s\n", row->what); /* named before a crash */
    cr_expect(row->ok(), "%s: a NULL argument is not refused as baton.h documents", row->what);
}
