/* test_registry.c: the target registry as an embedder meets it: what baton_registry_add refuses
 * (each with a message naming the target and the fix), that a refused add changes nothing, that
 * a second registration of a name only adds device kinds to the same signature, that registered
 * strings and delegate tables are copies, and baton_registry_replace over a built-in. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/registry.h"
#include "tests/support.h"

static baton_registry *reg;

static void setup(void)
{
    cr_assert_eq(baton_registry_create(&reg), 0);
}

static void teardown(void)
{
    baton_registry_destroy(reg);
}

TestSuite(registry_add, .init = setup, .fini = teardown);
TestSuite(registry_replace, .init = setup, .fini = teardown);

/* ---- a small f32 target: y = 42 (or a copy of x) --------------------------------------------- */

static int f32_check(const baton_sig_args *a, baton_tensor_desc *expected, char *msg, size_t len)
{
    if (a->n_inputs < 1 || a->inputs[0].dtype != BATON_DTYPE_F32) {
        snprintf(msg, len, "takes f32");
        return BATON_EPLAN;
    }
    for (int o = 0; o < a->n_outputs; o++)
        expected[o] = a->inputs[0];
    return 0;
}

static int numel_pack(const baton_sig_args *a, char *opaque, size_t cap)
{
    int64_t n = baton_tensor_desc_numel(&a->inputs[0]);
    memcpy(opaque, &n, sizeof n);
    return (int)sizeof n;
}

static int fill_42(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    int64_t n;
    memcpy(&n, opaque, sizeof n);
    for (int64_t i = 0; i < n; i++)
        ((float *)buffers[1])[i] = 42.0f;
    return 0;
}

static int fill_42_cuda(const baton_exec_ctx *ctx, void **buffers, const char *opaque, size_t len)
{
    return BATON_ENOTSUP; /* registered, never run here */
}

/* A valid one-input, one-output kernel target named `name`, CPU only. */
static baton_target kernel_target(const char *name)
{
    baton_target t = {
        .struct_size = sizeof(baton_target),
        .name = name,
        .kind = BATON_TARGET_KERNEL,
        .n_inputs = 1,
        .n_outputs = 1,
        .summary = "y = 42",
        .check = f32_check,
        .pack = numel_pack,
        .impls = {{.device = BATON_DEVICE_CPU, .kernel = fill_42}},
        .n_impls = 1,
    };
    return t;
}

/* Expects `t` to be refused with BATON_EINVAL and a message holding each of the NULL-ended
 * `parts`, and the registry to be unchanged. */
static void expect_refused(const baton_target *t, ...)
{
    int before = baton_registry_count(reg);
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, t, &err), BATON_EINVAL, "added: %s", err.message);
    cr_assert_eq(err.code, BATON_EINVAL);
    va_list ap;
    va_start(ap, t);
    for (const char *part; (part = va_arg(ap, const char *));)
        cr_assert(strstr(err.message, part), "message lacks '%s': %s", part, err.message);
    va_end(ap);
    cr_assert_eq(baton_registry_count(reg), before);
}

/* Loads a one-step f32[4] plan using kernel `target` on the CPU and runs it on x = 1, 2, 3, 4. */
static void run_one_step(const char *target, const char *attrs, float y[4])
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"one\",\n"
             " \"tensors\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
             "\"input\"},\n"
             "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}],\n"
             " \"steps\": [{\"name\": \"s\", \"kernel\": \"%s\", \"device\": \"cpu\", "
             "\"inputs\": [\"x\"], \"outputs\": [\"y\"]%s}]}\n",
             target, attrs);
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_plan_load_string(reg, json, strlen(json), "one.json", NULL, &plan, &err), 0,
                 "%s", err.message);
    baton_options o;
    baton_options_init(&o);
    o.quiet = 1;
    baton_runtime *rt = NULL;
    cr_assert_eq(baton_runtime_create(plan, &o, &rt, &err), 0, "%s", err.message);
    float x[4] = {1, 2, 3, 4};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, 4 * sizeof *y, &err), 0, "%s", err.message);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

/* ---- what add refuses ------------------------------------------------------------------------ */

Test(registry_add, refuses_a_target_without_a_signature_check)
{
    baton_target t = kernel_target("unchecked");
    t.check = NULL;
    expect_refused(&t, "baton_registry_add: target 'unchecked'", "check() is NULL",
                   "overflow its arena", NULL);
    cr_assert_null(baton_registry_find(reg, "unchecked"));
}

Test(registry_add, refuses_names_a_plan_cannot_write)
{
    const char *bad[] = {"", "has space", "a/b", "tab\there", "\x1b[31mred", "quote\"d"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        baton_target t = kernel_target(bad[i]);
        expect_refused(&t, "the target name", "letters, digits, '_', '.' and '-'", NULL);
    }
    baton_target t = kernel_target(NULL);
    expect_refused(&t, "is NULL", NULL);
    char *long_name = malloc(300);
    memset(long_name, 'n', 299);
    long_name[299] = 0;
    t = kernel_target(long_name);
    expect_refused(&t, "299 bytes long (at most 255)", NULL);
    free(long_name);
    /* a terminal escape in a name is not echoed back */
    t = kernel_target("\x1b[31mred");
    baton_error err = {0};
    baton_registry_add(reg, &t, &err);
    cr_assert_null(strchr(err.message, '\x1b'), "%s", err.message);
    /* the characters that are allowed */
    t = kernel_target("My_kernel-2.v1");
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
}

Test(registry_add, refuses_input_and_output_counts_outside_0_to_64)
{
    int bad[][2] = {{-1, 1}, {1, -1}, {65, 1}, {1, 65}, {1 << 30, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        baton_target t = kernel_target("counts");
        t.n_inputs = bad[i][0];
        t.n_outputs = bad[i][1];
        expect_refused(&t, "target 'counts'", "must be 0 to 64", NULL);
    }
    baton_target t = kernel_target("counts");
    t.n_inputs = 64;
    t.n_outputs = 0;
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
}

Test(registry_add, refuses_zero_or_too_many_implementations)
{
    baton_target t = kernel_target("impls");
    t.n_impls = 0;
    expect_refused(&t, "target 'impls'", "n_impls is 0", "give 1 to 4", NULL);
    t.n_impls = -3;
    expect_refused(&t, "n_impls is -3", NULL);
    t.n_impls = BATON_MAX_IMPLS + 1;
    expect_refused(&t, "n_impls is 5", NULL);
}

Test(registry_add, refuses_unknown_device_kinds_and_two_implementations_for_one_kind)
{
    baton_target t = kernel_target("devices");
    t.impls[0].device = (baton_device_kind)7;
    expect_refused(&t, "impls[0].device is 7", "BATON_DEVICE_CPU or BATON_DEVICE_CUDA", NULL);
    t.impls[0].device = BATON_DEVICE_NONE;
    expect_refused(&t, "impls[0].device is 0", NULL);
    t = kernel_target("devices");
    t.impls[1] = (baton_target_impl){.device = BATON_DEVICE_CPU, .kernel = fill_42};
    t.n_impls = 2;
    expect_refused(&t, "impls[0] and impls[1] are both for cpu", "one implementation per device",
                   NULL);
}

static int dummy_init(const baton_delegate_init *info, void **state, baton_error *err)
{
    *state = NULL;
    return 0;
}

static int dummy_execute(void *state, const baton_exec_ctx *ctx, void **buffers)
{
    return 0;
}

Test(registry_add, kernels_need_a_kernel_and_delegates_init_and_execute)
{
    baton_target t = kernel_target("calls");
    t.impls[0].kernel = NULL;
    expect_refused(&t, "impls[0] (cpu) has no .kernel", NULL);
    baton_delegate_iface full = {
        .struct_size = sizeof(baton_delegate_iface), .init = dummy_init, .execute = dummy_execute};
    t.impls[0] =
        (baton_target_impl){.device = BATON_DEVICE_CPU, .kernel = fill_42, .delegate = &full};
    expect_refused(&t, "sets .delegate", NULL);

    t = kernel_target("calls");
    t.kind = BATON_TARGET_DELEGATE;
    t.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CPU};
    expect_refused(&t, "has no .delegate", NULL);
    baton_delegate_iface no_init = {.struct_size = sizeof(baton_delegate_iface),
                                    .execute = dummy_execute};
    t.impls[0].delegate = &no_init;
    expect_refused(&t, "without init()", NULL);
    baton_delegate_iface no_exec = {.struct_size = sizeof(baton_delegate_iface),
                                    .init = dummy_init};
    t.impls[0].delegate = &no_exec;
    expect_refused(&t, "without execute()", NULL);
    t.impls[0].delegate = &full;
    t.impls[0].kernel = fill_42;
    expect_refused(&t, "sets .kernel", NULL);
    t.impls[0].kernel = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);

    t = kernel_target("kinds");
    t.kind = (baton_target_kind)5;
    expect_refused(&t, "kind is 5", NULL);
}

Test(registry_add, refuses_attribute_specs_without_names_or_types)
{
    baton_target t = kernel_target("attrs");
    t.attrs[0] = (baton_attr_spec){"alpha", BATON_ATTR_FLOAT, 0, "a scale"};
    t.attrs[2] = (baton_attr_spec){"beta", BATON_ATTR_FLOAT, 0, "after a gap"};
    expect_refused(&t, "attrs[2] 'beta' follows attrs[1], which has no name", NULL);
    t.attrs[2] = (baton_attr_spec){NULL, BATON_ATTR_INT, 0, NULL};
    expect_refused(&t, "attrs[2] has a type, help or required flag but no name", NULL);
    t.attrs[2] = (baton_attr_spec){0};
    t.attrs[1] = (baton_attr_spec){"alpha", BATON_ATTR_INT, 0, NULL};
    expect_refused(&t, "attrs[0] and attrs[1] are both named 'alpha'", NULL);
    t.attrs[1] = (baton_attr_spec){"gamma", (baton_attr_type)9, 0, NULL};
    expect_refused(&t, "attrs[1] 'gamma' has type 9", NULL);
    t.attrs[1] = (baton_attr_spec){"", BATON_ATTR_INT, 0, NULL};
    expect_refused(&t, "the name of attrs[1] '' is empty", NULL);
    t.attrs[1] = (baton_attr_spec){"two words", BATON_ATTR_INT, 0, NULL};
    expect_refused(&t, "the name of attrs[1] 'two words' has a space", NULL);
}

/* ---- a name registered twice ---------------------------------------------------------------- */

Test(registry_add, a_failed_add_leaves_the_registry_as_it_was)
{
    baton_target t = kernel_target("mine");
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
    const baton_target *before = baton_registry_find(reg, "mine");
    /* a CUDA implementation (new) and a CPU one (already there): nothing of it may stay */
    baton_target more = t;
    more.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CUDA, .kernel = fill_42_cuda};
    more.impls[1] = (baton_target_impl){.device = BATON_DEVICE_CPU, .kernel = fill_42};
    more.n_impls = 2;
    cr_assert_eq(baton_registry_add(reg, &more, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "target 'mine': already has a cpu implementation") &&
                  strstr(err.message, "baton_registry_replace"),
              "%s", err.message);
    const baton_target *after = baton_registry_find(reg, "mine");
    cr_assert_eq(after, before);
    cr_assert_eq(after->n_impls, 1);
    cr_assert_null(baton_target_impl_for(after, BATON_DEVICE_CUDA),
                   "a refused add left its CUDA implementation behind");
}

Test(registry_add, a_second_registration_with_another_signature_is_refused)
{
    baton_target t = kernel_target("mine");
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
    baton_target other = t;
    other.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CUDA, .kernel = fill_42_cuda};
    other.n_inputs = 2;
    cr_assert_eq(baton_registry_add(reg, &other, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "target 'mine': already registered with another signature (it "
                                  "takes 1 inputs and 1 outputs, not 2 and 1)"),
              "%s", err.message);
    other.n_inputs = 1;
    other.pack = NULL;
    cr_assert_eq(baton_registry_add(reg, &other, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "pack()"), "%s", err.message);
    other.pack = numel_pack;
    other.attrs[0] = (baton_attr_spec){"eps", BATON_ATTR_FLOAT, 0, NULL};
    cr_assert_eq(baton_registry_add(reg, &other, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "attribute specs differ at attrs[0]"), "%s", err.message);
    other.attrs[0] = (baton_attr_spec){0};
    other.kind = BATON_TARGET_DELEGATE;
    static const baton_delegate_iface d = {
        .struct_size = sizeof(baton_delegate_iface), .init = dummy_init, .execute = dummy_execute};
    other.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CUDA, .delegate = &d};
    cr_assert_eq(baton_registry_add(reg, &other, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "it is a kernel, not a delegate"), "%s", err.message);
    cr_assert_null(baton_target_impl_for(baton_registry_find(reg, "mine"), BATON_DEVICE_CUDA));

    /* the same signature with a new device kind joins the target */
    other = t;
    other.summary = "another summary, ignored";
    other.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CUDA, .kernel = fill_42_cuda};
    cr_assert_eq(baton_registry_add(reg, &other, &err), 0, "%s", err.message);
    const baton_target *now = baton_registry_find(reg, "mine");
    cr_assert_eq(now->n_impls, 2);
    cr_assert_eq(baton_target_impl_for(now, BATON_DEVICE_CUDA)->kernel, fill_42_cuda);
    cr_assert_eq(baton_target_impl_for(now, BATON_DEVICE_CPU)->kernel, fill_42);
    cr_assert_str_eq(now->summary, "y = 42");
}

Test(registry_add, a_builtin_copy_with_another_signature_is_not_silently_dropped)
{
    baton_target t = kernel_target("copy");
    t.n_inputs = 2;
    t.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CUDA, .kernel = fill_42_cuda};
    baton_error err = {0};
    int rc = baton_registry_add(reg, &t, &err);
    cr_assert_eq(rc, BATON_EINVAL, "a second 'copy' with 2 inputs was accepted");
    cr_assert(strstr(err.message, "target 'copy'") && strstr(err.message, "another signature"),
              "%s", err.message);
    cr_assert_eq(baton_registry_find(reg, "copy")->n_inputs, 1);
}

/* ---- copies ---------------------------------------------------------------------------------- */

Test(registry_add, copies_the_strings_it_is_given)
{
    char *name = strdup("scratch_kernel"), *summary = strdup("y = 42, from a plugin");
    char *attr = strdup("scale"), *help = strdup("ignored by the kernel");
    baton_target t = kernel_target(name);
    t.summary = summary;
    t.attrs[0] = (baton_attr_spec){attr, BATON_ATTR_FLOAT, 0, help};
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
    /* a plugin's strings go away with it */
    memset(name, 'X', strlen(name)), memset(summary, 'X', strlen(summary));
    memset(attr, 'X', strlen(attr)), memset(help, 'X', strlen(help));
    free(name), free(summary), free(attr), free(help);
    const baton_target *got = baton_registry_find(reg, "scratch_kernel");
    cr_assert_not_null(got, "the registry kept the caller's name, not a copy");
    cr_assert_str_eq(got->summary, "y = 42, from a plugin");
    cr_assert_str_eq(got->attrs[0].name, "scale");
    cr_assert_str_eq(got->attrs[0].help, "ignored by the kernel");
    float y[4];
    run_one_step("scratch_kernel", ", \"attrs\": {\"scale\": 2}", y);
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(y[i], 42.0f, 0);
}

/* A delegate that adds 1 to an f32[4] input. */
static int plus_one_init(const baton_delegate_init *info, void **state, baton_error *err)
{
    *state = NULL;
    return 0;
}

static int plus_one_execute(void *state, const baton_exec_ctx *ctx, void **buffers)
{
    for (int i = 0; i < 4; i++)
        ((float *)buffers[1])[i] = ((const float *)buffers[0])[i] + 1.0f;
    return 0;
}

Test(registry_add, copies_the_delegate_table_it_is_given)
{
    baton_delegate_iface *iface = malloc(sizeof *iface);
    *iface = (baton_delegate_iface){.struct_size = sizeof(baton_delegate_iface),
                                    .init = plus_one_init,
                                    .execute = plus_one_execute};
    baton_target t = kernel_target("plus_one");
    t.kind = BATON_TARGET_DELEGATE;
    t.impls[0] = (baton_target_impl){.device = BATON_DEVICE_CPU, .delegate = iface};
    baton_error err = {0};
    cr_assert_eq(baton_registry_add(reg, &t, &err), 0, "%s", err.message);
    memset(iface, 0, sizeof *iface);
    free(iface);
    char json[] = "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"d\",\n"
                  " \"tensors\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                  "\"input\"}, {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                  "\"output\"}],\n"
                  " \"steps\": [{\"name\": \"s\", \"delegate\": \"plus_one\", \"device\": \"cpu\", "
                  "\"inputs\": [\"x\"], \"outputs\": [\"y\"]}]}\n";
    baton_plan *plan = NULL;
    cr_assert_eq(baton_plan_load_string(reg, json, strlen(json), "d.json", NULL, &plan, &err), 0,
                 "%s", err.message);
    baton_runtime *rt = NULL;
    cr_assert_eq(baton_runtime_create(plan, NULL, &rt, &err), 0, "%s", err.message);
    float x[4] = {1, 2, 3, 4}, y[4];
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0, "%s", err.message);
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(y[i], x[i] + 1.0f, 0);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

/* ---- replace --------------------------------------------------------------------------------- */

Test(registry_replace, overrides_a_builtin_for_plans_loaded_afterwards)
{
    const char *attrs = ", \"attrs\": {\"value\": 1}";
    char json[1024];
    snprintf(json, sizeof json,
             "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"one\",\n"
             " \"tensors\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
             "\"input\"}, {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
             "\"output\"}],\n"
             " \"steps\": [{\"name\": \"s\", \"kernel\": \"add_scalar\", \"device\": \"cpu\", "
             "\"inputs\": [\"x\"], \"outputs\": [\"y\"]%s}]}\n",
             attrs);
    baton_plan *before = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_plan_load_string(reg, json, strlen(json), "b.json", NULL, &before, &err), 0,
                 "%s", err.message);

    baton_target t = kernel_target("add_scalar");
    t.attrs[0] = (baton_attr_spec){"value", BATON_ATTR_FLOAT, 1, "ignored: y = 42"};
    cr_assert_eq(baton_registry_replace(reg, &t, &err), 0, "%s", err.message);
    cr_assert_eq(baton_registry_find(reg, "add_scalar")->impls[0].kernel, fill_42);

    float y[4];
    run_one_step("add_scalar", attrs, y); /* loaded now: the replacement */
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(y[i], 42.0f, 0);
    /* the plan loaded before keeps the built-in it resolved */
    baton_runtime *rt = NULL;
    cr_assert_eq(baton_runtime_create(before, NULL, &rt, &err), 0, "%s", err.message);
    float x[4] = {1, 2, 3, 4};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0, "%s", err.message);
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(y[i], x[i] + 1.0f, 0);
    baton_runtime_destroy(rt);
    baton_plan_free(before);
}

/* A built-in kernel's tuning hook belongs to that kernel: a replacement that keeps the kernel
 * keeps it, one with another kernel has none (it would tune a kernel that no longer runs). */
Test(registry_replace, a_tuning_hook_stays_with_its_kernel)
{
    const baton_target *fwd = baton_registry_find(reg, "rms_norm_fwd");
    kernel_tune_fn hook = baton__registry_tuner(fwd, BATON_DEVICE_CUDA);
    cr_assert_eq(hook != NULL, baton_cuda_built(), "the CUDA RMSNorm tunes in CUDA builds only");
    cr_assert_null(baton__registry_tuner(fwd, BATON_DEVICE_CPU));
    cr_assert_null(baton__registry_tuner(baton_registry_find(reg, "add"), BATON_DEVICE_CUDA));
    /* the decoder ops' CUDA kernels keep their run-time error record the same way */
    cr_assert_eq(baton__registry_errors(baton_registry_find(reg, "embedding"), BATON_DEVICE_CUDA) !=
                     NULL,
                 baton_cuda_built());
    cr_assert_null(baton__registry_errors(baton_registry_find(reg, "embedding"), BATON_DEVICE_CPU));
    cr_assert_eq(baton__registry_preparer(fwd, BATON_DEVICE_CUDA) != NULL, baton_cuda_built());
    baton_error err = {0};
    baton_target same = *fwd;
    same.summary = "the same kernels, another summary";
    cr_assert_eq(baton_registry_replace(reg, &same, &err), 0, "%s", err.message);
    fwd = baton_registry_find(reg, "rms_norm_fwd");
    cr_assert_eq(baton__registry_tuner(fwd, BATON_DEVICE_CUDA), hook,
                 "the same kernel lost its hook");
    baton_target other = *fwd;
    for (int k = 0; k < other.n_impls; k++)
        other.impls[k].kernel = fill_42;
    if (other.n_impls == 1) /* a CPU-only build: give it a CUDA kernel of the caller's */
        other.impls[other.n_impls++] =
            (baton_target_impl){.device = BATON_DEVICE_CUDA, .kernel = fill_42};
    cr_assert_eq(baton_registry_replace(reg, &other, &err), 0, "%s", err.message);
    cr_assert_null(
        baton__registry_tuner(baton_registry_find(reg, "rms_norm_fwd"), BATON_DEVICE_CUDA),
        "another kernel kept the built-in's tuning hook");
}

Test(registry_replace, refuses_an_unknown_name_and_an_invalid_target)
{
    baton_target t = kernel_target("add_scalr");
    baton_error err = {0};
    cr_assert_eq(baton_registry_replace(reg, &t, &err), BATON_ENOENT);
    cr_assert(strstr(err.message, "no target named 'add_scalr'") &&
                  strstr(err.message, "baton_registry_add"),
              "%s", err.message);
    cr_assert_null(baton_registry_find(reg, "add_scalr"));
    const baton_target *builtin = baton_registry_find(reg, "add_scalar");
    t = kernel_target("add_scalar");
    t.check = NULL;
    cr_assert_eq(baton_registry_replace(reg, &t, &err), BATON_EINVAL);
    cr_assert(strstr(err.message, "baton_registry_replace: target 'add_scalar': check() is NULL"),
              "%s", err.message);
    cr_assert_eq(baton_registry_find(reg, "add_scalar"), builtin);
}
