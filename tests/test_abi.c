/* test_abi.c: the compatibility promise of baton.h ("Versions and the ABI"): the run-time
 * version matches the header, and the versioned structs (baton_options, baton_target,
 * baton_delegate_iface) are read by their struct_size: a caller built against an older header
 * (a smaller struct_size) gets the defaults of the fields it does not have, one built against a
 * newer header is accepted when it leaves the unknown fields zero, and a struct_size that was
 * never set is refused. The structs baton hands to callbacks (baton_exec_ctx, baton_sig_args,
 * baton_delegate_init) carry their struct_size. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "baton/baton.h"
#include "scheduler/runtime.h"
#include "tests/support.h"

Test(version, the_library_reports_the_version_of_its_header)
{
    cr_assert_eq(baton_version(), (unsigned)BATON_VERSION);
    cr_assert_eq(baton_version() >> 16, (unsigned)BATON_VERSION_MAJOR);
    cr_assert_eq((baton_version() >> 8) & 0xff, (unsigned)BATON_VERSION_MINOR);
    cr_assert_eq(baton_version() & 0xff, (unsigned)BATON_VERSION_PATCH);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", BATON_VERSION_MAJOR, BATON_VERSION_MINOR,
             BATON_VERSION_PATCH);
    cr_assert_str_eq(baton_version_string(), want);
}

/* ---- baton_options ------------------------------------------------------------------------ */

static baton_registry *reg;
static baton_plan *plan;

static void load_minimal(void)
{
    baton_error err = {0};
    cr_assert_eq(baton_registry_create(&reg), 0);
    cr_assert_eq(baton_plan_load(reg, test_path("tests/data/good/minimal.json"), &plan, &err), 0,
                 "%s", err.message);
}

static void free_minimal(void)
{
    baton_plan_free(plan);
    baton_registry_destroy(reg);
}

/* A caller's options as its header laid them out, followed by bytes it does not own. */
typedef struct caller_options {
    baton_options o;
    unsigned char beyond[64];
} caller_options;

static void run_minimal(const baton_options *o)
{
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(plan, o, &rt, &err), 0, "%s", err.message);
    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0, "%s", err.message);
    cr_assert_arr_eq(x, y, sizeof x);
    baton_runtime_destroy(rt);
}

Test(options, a_caller_with_an_older_smaller_struct_gets_defaults_for_the_newer_fields,
     .init = load_minimal, .fini = free_minimal)
{
    /* As if disable_queue_ahead were the newest field: the caller's struct ends before it, and
     * whatever its memory holds there (here 1, and 0xff after) is not the caller's to set. */
    caller_options c;
    memset(&c, 0xff, sizeof c);
    baton_options_init(&c.o);
    c.o.quiet = 1;
    c.o.gpu = BATON_GPU_CPU;
    c.o.disable_queue_ahead = 1;
    c.o.struct_size = offsetof(baton_options, disable_queue_ahead);
    baton_options read;
    baton_error err = {0};
    cr_assert_eq(baton__options_read(&c.o, &read, &err), 0, "%s", err.message);
    cr_assert_eq(read.struct_size, sizeof(baton_options));
    cr_assert_eq(read.disable_queue_ahead, 0, "a field past struct_size was read");
    cr_assert_eq(read.quiet, 1);
    cr_assert_eq(read.gpu, BATON_GPU_CPU);
    cr_assert_eq(read.mode, BATON_SYNC_GRAPH);
    run_minimal(&c.o);

    /* A struct_size that ends inside a field reads none of it. */
    c.o.struct_size = offsetof(baton_options, quiet) + 2;
    cr_assert_eq(baton__options_read(&c.o, &read, &err), 0, "%s", err.message);
    cr_assert_eq(read.quiet, 0);
    cr_assert_eq(read.fallback_is_error, c.o.fallback_is_error);

    /* Only struct_size: every field at its default. */
    c.o.struct_size = sizeof(size_t);
    cr_assert_eq(baton__options_read(&c.o, &read, &err), 0, "%s", err.message);
    baton_options def;
    baton_options_init(&def);
    cr_assert_eq(memcmp(&read, &def, sizeof def), 0);
}

Test(options, a_caller_with_a_newer_larger_struct_is_accepted_when_the_unknown_fields_are_zero,
     .init = load_minimal, .fini = free_minimal)
{
    caller_options c;
    memset(&c, 0, sizeof c);
    baton_options_init(&c.o);
    c.o.quiet = 1;
    c.o.gpu = BATON_GPU_CPU;
    c.o.struct_size = sizeof c;
    run_minimal(&c.o);

    c.beyond[5] = 1; /* a field this library does not know, set */
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(plan, &c.o, &rt, &err), BATON_ENOTSUP);
    cr_assert_null(rt);
    char want[64];
    snprintf(want, sizeof want, "byte %zu is set", offsetof(caller_options, beyond) + 5);
    cr_assert(strstr(err.message, want), "%s", err.message);
    cr_assert(strstr(err.message, "newer baton.h"), "%s", err.message);
}

Test(options, a_struct_size_never_set_is_refused_with_the_fix, .init = load_minimal,
     .fini = free_minimal)
{
    baton_options o;
    memset(&o, 0, sizeof o);
    baton_runtime *rt = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), BATON_EINVAL);
    cr_assert_null(rt);
    cr_assert(strstr(err.message, "struct_size is 0"), "%s", err.message);
    cr_assert(strstr(err.message, "baton_options_init"), "%s", err.message);
    /* NULL options are the defaults. */
    cr_assert_eq(baton_runtime_create(plan, NULL, &rt, &err), 0, "%s", err.message);
    baton_runtime_destroy(rt);
}

/* ---- baton_target and baton_delegate_iface ------------------------------------------------ */

static int copy_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t len)
{
    expected[0] = a->inputs[0];
    return 0;
}

static int copy_kernel(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return 0;
}

static int d_init(const baton_delegate_init *info, void **state, baton_error *err)
{
    *state = NULL;
    return 0;
}

static int d_execute(void *state, const baton_exec_ctx *ctx, void **buffers)
{
    return 0;
}

static baton_target kernel_target(const char *name)
{
    baton_target t = {
        .struct_size = sizeof(baton_target),
        .name = name,
        .kind = BATON_TARGET_KERNEL,
        .n_inputs = 1,
        .n_outputs = 1,
        .check = copy_check,
        .impls = {{.device = BATON_DEVICE_CPU, .kernel = copy_kernel}},
        .n_impls = 1,
    };
    return t;
}

typedef struct caller_target {
    baton_target t;
    unsigned char beyond[32];
} caller_target;

Test(registry_abi, a_target_table_without_struct_size_is_refused_with_the_fix)
{
    baton_registry *r = NULL;
    cr_assert_eq(baton_registry_create(&r), 0);
    baton_target t = kernel_target("no_size");
    t.struct_size = 0;
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(r, &t, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "baton_registry_add"), "%s", err.message);
    cr_assert(strstr(err.message, "struct_size is 0; set it to sizeof(baton_target)"), "%s",
              err.message);
    cr_assert_null(baton_registry_find(r, "no_size"));
    baton_registry_destroy(r);
}

Test(registry_abi, a_target_table_from_a_newer_header_registers_unless_it_sets_unknown_fields)
{
    baton_registry *r = NULL;
    cr_assert_eq(baton_registry_create(&r), 0);
    caller_target c;
    memset(&c, 0, sizeof c);
    c.t = kernel_target("newer");
    c.t.struct_size = sizeof c;
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(r, &c.t, &err), 0, "%s", err.message);
    const baton_target *got = baton_registry_find(r, "newer");
    cr_assert_not_null(got);
    cr_assert_eq(got->struct_size, sizeof(baton_target), "the registry keeps its own size");

    c.t.name = "newer_set";
    c.beyond[0] = 7;
    cr_assert_eq(baton_registry_add(r, &c.t, &err), BATON_ENOTSUP);
    cr_assert(strstr(err.message, "newer baton.h"), "%s", err.message);
    cr_assert_null(baton_registry_find(r, "newer_set"));
    baton_registry_destroy(r);
}

Test(registry_abi, an_older_delegate_table_gets_defaults_for_the_fields_it_lacks)
{
    baton_registry *r = NULL;
    cr_assert_eq(baton_registry_create(&r), 0);
    /* As if `capturable` were newer than the caller's header: its table ends before it. */
    struct {
        baton_delegate_iface d;
        unsigned char beyond[16];
    } older;
    memset(&older, 0xff, sizeof older);
    older.d.init = d_init;
    older.d.execute = d_execute;
    older.d.destroy = NULL;
    older.d.capturable = 1;
    older.d.struct_size = offsetof(baton_delegate_iface, capturable);
    baton_target t = kernel_target("older_delegate");
    t.kind = BATON_TARGET_DELEGATE;
    t.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CPU, .delegate = &older.d};
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(r, &t, &err), 0, "%s", err.message);
    const baton_target_impl *im =
        baton_target_impl_for(baton_registry_find(r, "older_delegate"), BATON_DEVICE_CPU);
    cr_assert_not_null(im);
    cr_assert_neq(im->delegate, &older.d, "the registry reads the table into its own copy");
    cr_assert_eq(im->delegate->struct_size, sizeof(baton_delegate_iface));
    cr_assert_eq(im->delegate->capturable, 0, "a field past struct_size was read");
    cr_assert_eq(im->delegate->init, d_init);
    cr_assert_eq(im->delegate->execute, d_execute);

    /* A delegate table whose struct_size was never set. */
    baton_delegate_iface unset = {.init = d_init, .execute = d_execute};
    t.name = "unset_delegate";
    t.impls[0].delegate = &unset;
    cr_assert_eq(baton_registry_add(r, &t, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "impls[0].delegate: struct_size is 0; set it to "
                                  "sizeof(baton_delegate_iface)"),
              "%s", err.message);
    baton_registry_destroy(r);
}

/* ---- structs handed to callbacks ---------------------------------------------------------- */

/* What the callbacks saw: the struct_size of each struct baton handed them. */
static size_t seen_check_sig, seen_kernel_ctx, seen_kernel_sig, seen_init, seen_init_sig,
    seen_exec_ctx;

static int sized_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t len)
{
    seen_check_sig = a->struct_size;
    expected[0] = a->inputs[0];
    return 0;
}

static int sized_kernel(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    seen_kernel_ctx = ctx->struct_size;
    /* what a plugin built against a newer header does before it reads a field of its own */
    if (BATON_HAS_FIELD(ctx, baton_exec_ctx, sig))
        seen_kernel_sig = ctx->sig->struct_size;
    return 0;
}

static int sized_init(const baton_delegate_init *info, void **state, baton_error *err)
{
    seen_init = info->struct_size;
    seen_init_sig = info->sig->struct_size;
    *state = NULL;
    return 0;
}

static int sized_execute(void *state, const baton_exec_ctx *ctx, void **buffers)
{
    seen_exec_ctx = ctx->struct_size;
    return 0;
}

Test(callback_abi, every_struct_baton_hands_a_callback_carries_its_struct_size)
{
    baton_registry *r = NULL;
    cr_assert_eq(baton_registry_create(&r), 0);
    baton_target k = kernel_target("abi.kernel");
    k.check = sized_check;
    k.impls[0].kernel = sized_kernel;
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(r, &k, &err), 0, "%s", err.message);
    static const baton_delegate_iface d = {
        .struct_size = sizeof(baton_delegate_iface), .init = sized_init, .execute = sized_execute};
    baton_target dt = kernel_target("abi.delegate");
    dt.kind = BATON_TARGET_DELEGATE;
    dt.check = sized_check;
    dt.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CPU, .delegate = &d};
    cr_assert_eq(baton_registry_add(r, &dt, &err), 0, "%s", err.message);
    static const char json[] =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"sized\", \"tensors\": ["
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"},"
        "{\"name\": \"t\", \"dtype\": \"f32\", \"shape\": [4]},"
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}],"
        "\"steps\": ["
        "{\"name\": \"k\", \"kernel\": \"abi.kernel\", \"device\": \"cpu\", \"inputs\": [\"x\"],"
        " \"outputs\": [\"t\"]},"
        "{\"name\": \"d\", \"delegate\": \"abi.delegate\", \"device\": \"cpu\", \"inputs\": "
        "[\"t\"],"
        " \"outputs\": [\"y\"]}]}";
    baton_plan *p = NULL;
    cr_assert_eq(baton_plan_load_string(r, json, strlen(json), "sized.json", NULL, &p, &err), 0,
                 "%s", err.message);
    cr_assert_eq(seen_check_sig, sizeof(baton_sig_args));
    baton_runtime *rt = NULL;
    cr_assert_eq(baton_runtime_create(p, NULL, &rt, &err), 0, "%s", err.message);
    cr_assert_eq(seen_init, sizeof(baton_delegate_init));
    cr_assert_eq(seen_init_sig, sizeof(baton_sig_args));
    float x[4] = {1, 2, 3, 4};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(seen_kernel_ctx, sizeof(baton_exec_ctx));
    cr_assert_eq(seen_kernel_sig, sizeof(baton_sig_args));
    cr_assert_eq(seen_exec_ctx, sizeof(baton_exec_ctx));
    baton_runtime_destroy(rt);
    baton_plan_free(p);
    baton_registry_destroy(r);
}

/* ctx->sig->input_constant: which inputs a kernel may read before its PDL wait. */
static int seen_consts[2] = {-1, -1}, seen_check_consts = -1;

static int consts_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t len)
{
    seen_check_consts = a->input_constant != NULL;
    expected[0] = a->inputs[0];
    return 0;
}

static int consts_kernel(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    const baton_sig_args *sg = ctx->sig;
    if (BATON_HAS_FIELD(sg, baton_sig_args, input_constant) && sg->input_constant) {
        seen_consts[0] = sg->input_constant[0];
        seen_consts[1] = sg->input_constant[1];
    }
    return 0;
}

Test(callback_abi, a_kernel_learns_which_inputs_are_plan_constants)
{
    baton_registry *r = NULL;
    cr_assert_eq(baton_registry_create(&r), 0);
    baton_target k = kernel_target("abi.consts");
    k.n_inputs = 2;
    k.check = consts_check;
    k.impls[0].kernel = consts_kernel;
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(r, &k, &err), 0, "%s", err.message);
    static const char json[] =
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"consts\", \"tensors\": ["
        "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"},"
        "{\"name\": \"w\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"constant\","
        " \"init\": {\"kind\": \"fill\", \"value\": 1.0}},"
        "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}],"
        "\"steps\": [{\"name\": \"k\", \"kernel\": \"abi.consts\", \"device\": \"cpu\", "
        "\"inputs\": [\"x\", \"w\"], \"outputs\": [\"y\"]}]}";
    baton_plan *p = NULL;
    cr_assert_eq(baton_plan_load_string(r, json, strlen(json), "consts.json", NULL, &p, &err), 0,
                 "%s", err.message);
    cr_expect_eq(seen_check_consts, 0, "check() sees no input_constant (it is a run's fact)");
    baton_runtime *rt = NULL;
    cr_assert_eq(baton_runtime_create(p, NULL, &rt, &err), 0, "%s", err.message);
    float x[4] = {1, 2, 3, 4};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_expect_eq(seen_consts[0], 0, "x is an input, not a constant");
    cr_expect_eq(seen_consts[1], 1, "w is a plan constant");
    baton_runtime_destroy(rt);
    baton_plan_free(p);
    baton_registry_destroy(r);
}
