/* test_state.c: the plan concepts of issue 40 that the loader, validator and analysis own: state
 * tensors (in place only where a target declares it, one device each, live for the whole run and
 * private to an instance), dimensions bound at run time (declared, bounded, planned at their
 * max), and views (the base's bytes, read-only), each with the error a mistake must give. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/baton.h"
#include "plan/plan_internal.h"
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

TestSuite(state_plan, .init = setup, .fini = teardown);
TestSuite(dims_plan, .init = setup, .fini = teardown);
TestSuite(views_plan, .init = setup, .fini = teardown);

/* A plan of the given "dims" (NULL: none), tensors and steps, as text. */
static int load(const char *dims, const char *tensors, const char *steps, baton_plan **plan,
                baton_error *err)
{
    char text[8192];
    snprintf(text, sizeof text,
             "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"t\", %s%s%s\n"
             " \"tensors\": [%s],\n \"steps\": [%s]}\n",
             dims ? "\"dims\": " : "", dims ? dims : "", dims ? "," : "", tensors, steps);
    *plan = NULL;
    return baton_plan_load_string(reg, text, strlen(text), "p.json", NULL, plan, err);
}

static void expect_refused(const char *dims, const char *tensors, const char *steps,
                           const char *needle)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = load(dims, tensors, steps, &plan, &err);
    cr_expect_eq(rc, BATON_EPLAN, "want EPLAN, got %s: %s", baton_strerror(rc), err.message);
    cr_expect(strstr(err.message, needle) != NULL, "want \"%s\" in: %s", needle, err.message);
    cr_expect(strstr(err.message, "p.json:") == err.message, "names the place: %s", err.message);
    baton_plan_free(plan);
}

static baton_plan *expect_loads(const char *dims, const char *tensors, const char *steps)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    cr_assert_eq(load(dims, tensors, steps, &plan, &err), 0, "%s", err.message);
    return plan;
}

#define T_X "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"input\"}"
#define T_S "{\"name\": \"s\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"state\"}"
#define T_Y "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"output\"}"
#define ACCUM                                                                                      \
    "{\"name\": \"acc\", \"kernel\": \"add\", \"device\": \"cpu\", \"inputs\": [\"s\", \"x\"], "   \
    "\"outputs\": [\"s\"]}"
#define READ_S                                                                                     \
    "{\"name\": \"rd\", \"kernel\": \"copy\", \"device\": \"cpu\", \"inputs\": [\"s\"], "          \
    "\"outputs\": [\"y\"]}"

/* ---- state ----------------------------------------------------------------------------------- */

Test(state_plan, accepts_an_in_place_update_of_a_state_tensor_through_a_declared_alias)
{
    baton_plan *plan = expect_loads(NULL, T_X "," T_S "," T_Y, ACCUM "," READ_S);
    int s = baton__plan_find_tensor(plan, "s");
    baton_tensor_info ti;
    cr_assert_eq(baton_plan_tensor_info(plan, s, &ti), 0);
    cr_expect_eq(ti.role, BATON_ROLE_STATE);
    /* live for the whole run, outside the constants that instances share */
    const plan_memory *m = &plan->memory[0];
    cr_expect_eq(m->live_begin[s], 0);
    cr_expect_eq(m->live_end[s], 2 * plan->n_steps);
    cr_expect_geq((size_t)m->offset[s], m->const_bytes);
    baton_plan_free(plan);
}

Test(state_plan, refuses_in_place_writes_of_a_tensor_that_is_not_state)
{
    expect_refused(NULL,
                   T_X ", {\"name\": \"h\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                       "\"output\"}",
                   "{\"name\": \"a\", \"kernel\": \"add\", \"device\": \"cpu\", \"inputs\": "
                   "[\"h\", \"x\"], \"outputs\": [\"h\"]}",
                   "steps do not run in place (except on state tensors");
}

Test(state_plan, refuses_in_place_writes_where_the_target_declares_no_alias)
{
    expect_refused(NULL, T_S,
                   "{\"name\": \"n\", \"kernel\": \"noop\", \"device\": \"cpu\", \"inputs\": "
                   "[\"s\"], \"outputs\": [\"s\"]}",
                   "writes state tensor 's' in place (input 0, output 0) but kernel 'noop' "
                   "declares no such alias");
    /* add declares output 0 over input 0 only: b may repeat, so b cannot be overwritten */
    expect_refused(NULL, T_X "," T_S,
                   "{\"name\": \"a\", \"kernel\": \"add\", \"device\": \"cpu\", \"inputs\": "
                   "[\"x\", \"s\"], \"outputs\": [\"s\"]}",
                   "(input 1, output 0) but kernel 'add' declares no such alias");
}

Test(state_plan, refuses_a_state_tensor_used_on_two_devices)
{
    expect_refused(NULL, T_X "," T_S "," T_Y,
                   ACCUM ", {\"name\": \"rd\", \"kernel\": \"copy\", \"device\": \"cuda:0\", "
                         "\"inputs\": [\"s\"], \"outputs\": [\"y\"]}",
                   "a state tensor lives on one device");
}

Test(state_plan, refuses_dims_on_a_state_tensor_and_takes_an_init)
{
    expect_refused("{\"seq\": {\"min\": 1, \"max\": 8}}",
                   "{\"name\": \"s\", \"dtype\": \"f32\", \"shape\": [\"seq\"], \"role\": "
                   "\"state\"}",
                   "{\"name\": \"n\", \"kernel\": \"copy\", \"device\": \"cpu\", \"inputs\": "
                   "[\"s\"], \"outputs\": [\"s\"]}",
                   "a state has a fixed shape");
    baton_plan *plan =
        expect_loads(NULL,
                     "{\"name\": \"s\", \"dtype\": \"f32\", \"shape\": [4], \"role\": \"state\", "
                     "\"init\": {\"kind\": \"fill\", \"value\": 2}}," T_Y,
                     READ_S);
    float v[4];
    baton_error err = {0};
    cr_assert_eq(baton__plan_tensor_materialize(plan, baton__plan_find_tensor(plan, "s"), v, &err),
                 0, "%s", err.message);
    cr_expect(v[0] == 2 && v[3] == 2);
    baton_plan_free(plan);
}

Test(state_plan, registry_refuses_aliases_out_of_range)
{
    baton_target t = *baton_registry_find(reg, "copy");
    t.name = "copy2";
    t.aliases[0] = (baton_alias){0, 1};
    t.n_aliases = 1;
    baton_error err = {0};
    cr_expect_eq(baton_registry_add(reg, &t, &err), BATON_EINVAL);
    cr_expect(strstr(err.message, "aliases[0] pairs output 0 with input 1") != NULL, "%s",
              err.message);
    t.n_aliases = BATON_MAX_ALIASES + 1;
    cr_expect_eq(baton_registry_add(reg, &t, &err), BATON_EINVAL);
    cr_expect(strstr(err.message, "n_aliases is 5") != NULL, "%s", err.message);
}

/* ---- dims ------------------------------------------------------------------------------------ */

#define DIMS "{\"seq\": {\"min\": 1, \"max\": 16}}"
#define T_XD "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"seq\", 4], \"role\": \"input\"}"
#define T_YD "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [\"seq\", 4], \"role\": \"output\"}"
#define COPY_XY                                                                                    \
    "{\"name\": \"c\", \"kernel\": \"copy\", \"device\": \"cpu\", \"inputs\": [\"x\"], "           \
    "\"outputs\": [\"y\"]}"

Test(dims_plan, plans_memory_for_the_max_and_remembers_the_axis)
{
    baton_plan *plan = expect_loads(DIMS, T_XD "," T_YD, COPY_XY);
    const plan_tensor *x = &plan->tensors[baton__plan_find_tensor(plan, "x")];
    cr_expect_eq(plan->n_dims, 1);
    cr_expect_str_eq(plan->dims[0].name, "seq");
    cr_expect_eq(x->desc.shape[0], 16);
    cr_expect_eq(x->dim[0], 0);
    cr_expect_eq(x->dim[1], -1);
    cr_expect_eq(x->nbytes, 16 * 4 * 4);
    cr_expect(plan->steps[0].has_dims);
    baton_plan_free(plan);
}

Test(dims_plan, refuses_an_undeclared_dimension_with_a_suggestion)
{
    expect_refused(DIMS,
                   "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"sq\", 4], \"role\": "
                   "\"input\"}," T_YD,
                   COPY_XY,
                   "shape[0] names dimension 'sq', which is not declared (did you mean 'seq'?)");
}

Test(dims_plan, refuses_bad_bounds)
{
    expect_refused("{\"seq\": {\"min\": 9, \"max\": 8}}", T_XD "," T_YD, COPY_XY,
                   "dimension 'seq' has min 9 above max 8");
    expect_refused("{\"seq\": {\"min\": 0, \"max\": 8}}", T_XD "," T_YD, COPY_XY,
                   "dimension 'seq' needs \"min\", an integer from 1");
    expect_refused("{\"seq\": {\"max\": 8, \"mx\": 3}}", T_XD "," T_YD, COPY_XY,
                   "unknown key 'mx' (did you mean 'max'?)");
    expect_refused("[1]", T_XD "," T_YD, COPY_XY, "\"dims\" must be an object");
}

Test(dims_plan, refuses_dims_on_a_constant)
{
    expect_refused(DIMS,
                   "{\"name\": \"w\", \"dtype\": \"f32\", \"shape\": [\"seq\"], \"role\": "
                   "\"constant\", \"init\": {\"kind\": \"fill\", \"value\": 1}}",
                   "{\"name\": \"c\", \"kernel\": \"noop\", \"device\": \"cpu\", \"inputs\": "
                   "[\"w\"], \"outputs\": []}",
                   "a constant has a fixed shape");
}

Test(dims_plan, refuses_a_collective_over_a_tensor_with_dims)
{
    expect_refused(DIMS,
                   "{\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [\"seq\", 4], \"role\": "
                   "\"input\"}, {\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [\"seq\", 4], "
                   "\"role\": \"input\"}, {\"name\": \"c\", \"dtype\": \"f32\", \"shape\": "
                   "[\"seq\", 4], \"role\": \"output\"}, {\"name\": \"d\", \"dtype\": \"f32\", "
                   "\"shape\": [\"seq\", 4], \"role\": \"output\"}",
                   "{\"name\": \"ar\", \"collective\": \"all_reduce\", \"devices\": [\"cuda:0\", "
                   "\"cuda:1\"], \"inputs\": [\"a\", \"b\"], \"outputs\": [\"c\", \"d\"]}",
                   "a collective's tensors have fixed shapes");
}

Test(dims_plan, refuses_a_verbatim_descriptor_on_a_step_with_dims)
{
    expect_refused(DIMS, T_XD "," T_YD,
                   "{\"name\": \"c\", \"kernel\": \"copy\", \"device\": \"cpu\", \"inputs\": "
                   "[\"x\"], \"outputs\": [\"y\"], \"opaque\": \"00\"}",
                   "has a verbatim \"opaque\" but a tensor sized by a dimension");
}

/* ---- views ----------------------------------------------------------------------------------- */

#define T_H  "{\"name\": \"h\", \"dtype\": \"f32\", \"shape\": [2, 4]}"
#define T_V  "{\"name\": \"v\", \"dtype\": \"f32\", \"shape\": [8], \"view_of\": \"h\"}"
#define T_X8 "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [2, 4], \"role\": \"input\"}"
#define T_Y8 "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [8], \"role\": \"output\"}"
#define MK_H                                                                                       \
    "{\"name\": \"mk\", \"kernel\": \"add_scalar\", \"device\": \"cpu\", \"inputs\": [\"x\"], "    \
    "\"outputs\": [\"h\"], \"attrs\": {\"value\": 1}}"
#define RD_V                                                                                       \
    "{\"name\": \"rd\", \"kernel\": \"copy\", \"device\": \"cpu\", \"inputs\": [\"v\"], "          \
    "\"outputs\": [\"y\"]}"

Test(views_plan, shares_the_bases_bytes_in_the_memory_plan)
{
    baton_plan *plan = expect_loads(NULL, T_X8 "," T_H "," T_V "," T_Y8, MK_H "," RD_V);
    int h = baton__plan_find_tensor(plan, "h"), v = baton__plan_find_tensor(plan, "v");
    const plan_memory *m = &plan->memory[0];
    cr_expect_geq(m->offset[h], 0);
    cr_expect_eq(m->offset[v], m->offset[h]);
    cr_expect_eq(plan->tensors[v].storage, h);
    /* the base stays live while the view is read: y must not take its bytes */
    int y = baton__plan_find_tensor(plan, "y");
    cr_expect_neq(m->offset[y], m->offset[h]);
    baton_plan_free(plan);
}

Test(views_plan, refuses_a_view_of_an_undeclared_tensor)
{
    expect_refused(NULL,
                   T_X8 "," T_H ", {\"name\": \"v\", \"dtype\": \"f32\", \"shape\": [8], "
                        "\"view_of\": \"hh\"}," T_Y8,
                   MK_H "," RD_V, "is a view of 'hh', which is not declared (did you mean 'h'?)");
}

Test(views_plan, refuses_a_view_of_other_elements)
{
    expect_refused(NULL,
                   T_X8 "," T_H ", {\"name\": \"v\", \"dtype\": \"f32\", \"shape\": [7], "
                        "\"view_of\": \"h\"}, {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": "
                        "[7], \"role\": \"output\"}",
                   MK_H "," RD_V, "does not hold the same elements of the same dtype");
    expect_refused("{\"seq\": {\"min\": 1, \"max\": 8}}",
                   "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"seq\"], \"role\": "
                   "\"input\"}, {\"name\": \"v\", \"dtype\": \"f32\", \"shape\": [8], "
                   "\"view_of\": \"x\"}, " T_Y8,
                   RD_V, "for every value of the dimensions");
}

Test(views_plan, refuses_writes_roles_and_cycles)
{
    expect_refused(NULL, T_X8 "," T_H "," T_V,
                   "{\"name\": \"mk\", \"kernel\": \"copy\", \"device\": \"cpu\", \"inputs\": "
                   "[\"h\"], \"outputs\": [\"v\"]}",
                   "views are read-only: write 'h' and read the view");
    expect_refused(NULL,
                   T_X8 "," T_H ", {\"name\": \"v\", \"dtype\": \"f32\", \"shape\": [8], "
                        "\"view_of\": \"h\", \"role\": \"output\"}",
                   MK_H, "is a view (\"view_of\") and so has no role");
    expect_refused(NULL,
                   T_X8 ", {\"name\": \"a\", \"dtype\": \"f32\", \"shape\": [8], \"view_of\": "
                        "\"b\"}, {\"name\": \"b\", \"dtype\": \"f32\", \"shape\": [8], "
                        "\"view_of\": \"a\"}," T_Y8,
                   "{\"name\": \"rd\", \"kernel\": \"copy\", \"device\": \"cpu\", \"inputs\": "
                   "[\"a\"], \"outputs\": [\"y\"]}",
                   "a cycle of views");
}

/* ---- runs ------------------------------------------------------------------------------------ */

TestSuite(state_run, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(dims_run, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(views_run, .init = setup, .fini = teardown, .timeout = 60);

static const baton_gpu_backend gpus[] = {BATON_GPU_AUTO, BATON_GPU_SIM};
static const baton_sync_mode modes[] = {BATON_SYNC_STRICT, BATON_SYNC_BOUNDARY, BATON_SYNC_GRAPH};

/* s += x on `dev` every run (state s starts at 1), y = s + 0 read back on the CPU. */
static baton_plan *accumulator(const char *dev)
{
    char steps[1024];
    snprintf(steps, sizeof steps,
             "{\"name\": \"acc\", \"kernel\": \"add\", \"device\": \"%s\", \"inputs\": [\"s\", "
             "\"x\"], \"outputs\": [\"s\"]}, {\"name\": \"rd\", \"kernel\": \"copy\", "
             "\"device\": \"%s\", \"inputs\": [\"s\"], \"outputs\": [\"h\"]}, {\"name\": "
             "\"out\", \"kernel\": \"add_scalar\", \"device\": \"cpu\", \"inputs\": [\"h\"], "
             "\"outputs\": [\"y\"], \"attrs\": {\"value\": 0}}",
             dev, dev);
    return expect_loads(NULL,
                        T_X ", {\"name\": \"s\", \"dtype\": \"f32\", \"shape\": [4], \"role\": "
                            "\"state\", \"init\": {\"kind\": \"fill\", \"value\": 1}}, {\"name\": "
                            "\"h\", \"dtype\": \"f32\", \"shape\": [4]}," T_Y,
                        steps);
}

Test(state_run, keeps_state_across_runs_on_every_device_and_mode)
{
    const char *devs[] = {"cpu", "cuda:0"};
    for (int dv = 0; dv < 2; dv++) {
        baton_plan *plan = accumulator(devs[dv]);
        for (int g = 0; g < 2; g++)
            for (int m = 0; m < 3; m++) {
                baton_runtime *rt = test_runtime(plan, gpus[g], modes[m], 0, 0);
                baton_error err = {0};
                const float x[4] = {1, 2, 3, 4};
                float y[4], s[4];
                cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0, "%s",
                             err.message);
                /* before any run the state holds its init */
                cr_assert_eq(baton_runtime_get_output(rt, "s", s, sizeof s, &err), 0, "%s",
                             err.message);
                cr_expect(s[0] == 1 && s[3] == 1, "init: %g %g", s[0], s[3]);
                for (int r = 1; r <= 3; r++) {
                    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
                    test_poison(y, sizeof y);
                    cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0, "%s",
                                 err.message);
                    for (int i = 0; i < 4; i++)
                        cr_expect_eq(y[i], 1 + r * x[i], "%s gpu %d mode %d run %d y[%d] = %g",
                                     devs[dv], g, m, r, i, y[i]);
                }
                /* written by name, read back by name, then reset to its init */
                const float v[4] = {10, 20, 30, 40};
                cr_assert_eq(baton_runtime_set_input(rt, "s", v, sizeof v, &err), 0, "%s",
                             err.message);
                cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
                cr_assert_eq(baton_runtime_get_output(rt, "s", s, sizeof s, &err), 0, "%s",
                             err.message);
                cr_expect(s[0] == 11 && s[3] == 44, "after set: %g %g", s[0], s[3]);
                cr_assert_eq(baton_runtime_reset_state(rt, &err), 0, "%s", err.message);
                cr_assert_eq(baton_runtime_get_output(rt, "s", s, sizeof s, &err), 0, "%s",
                             err.message);
                cr_expect(s[0] == 1 && s[3] == 1, "after reset: %g", s[0]);
                cr_expect_eq(baton_runtime_get_output(rt, "s", s, 8, &err), BATON_EINVAL);
                cr_expect(strstr(err.message, "state tensor 's'") != NULL, "%s", err.message);
                baton_runtime_destroy(rt);
            }
        baton_plan_free(plan);
    }
}

Test(state_run, gives_each_runtime_of_a_plan_its_own_state)
{
    baton_plan *plan = accumulator("cpu");
    baton_runtime *a = test_runtime(plan, BATON_GPU_AUTO, BATON_SYNC_GRAPH, 0, 0);
    baton_runtime *b = test_runtime(plan, BATON_GPU_AUTO, BATON_SYNC_GRAPH, 0, 0);
    baton_error err = {0};
    const float x[4] = {1, 1, 1, 1};
    float s[4];
    cr_assert_eq(baton_runtime_set_input(a, "x", x, sizeof x, &err), 0);
    cr_assert_eq(baton_runtime_set_input(b, "x", x, sizeof x, &err), 0);
    for (int r = 0; r < 3; r++)
        cr_assert_eq(baton_runtime_run(a, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(b, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_get_output(a, "s", s, sizeof s, &err), 0);
    cr_expect_eq(s[0], 4);
    cr_assert_eq(baton_runtime_get_output(b, "s", s, sizeof s, &err), 0);
    cr_expect_eq(s[0], 2);
    baton_runtime_destroy(a);
    baton_runtime_destroy(b);
    baton_plan_free(plan);
}

/* y = x + 1 on `dev`, x and y [seq, 4] with seq in 2..8 */
static baton_plan *dims_plan_max(const char *dev, int max)
{
    char steps[512], dims[128];
    snprintf(dims, sizeof dims, "{\"seq\": {\"min\": 2, \"max\": %d}}", max);
    snprintf(steps, sizeof steps,
             "{\"name\": \"inc\", \"kernel\": \"add_scalar\", \"device\": \"%s\", \"inputs\": "
             "[\"x\"], \"outputs\": [\"y\"], \"attrs\": {\"value\": 1}}",
             dev);
    return expect_loads(dims, T_XD "," T_YD, steps);
}

static baton_plan *dims_plan(const char *dev)
{
    return dims_plan_max(dev, 8);
}

static void run_seq(baton_runtime *rt, int seq, int by_input)
{
    baton_error err = {0};
    float x[64], y[64 + 4];
    for (int i = 0; i < 64; i++)
        x[i] = (float)(i * 3 + seq);
    if (!by_input)
        cr_assert_eq(baton_runtime_set_dims(rt, "seq", seq, &err), 0, "%s", err.message);
    size_t n = (size_t)seq * 4;
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, n * sizeof(float), &err), 0, "%s",
                 err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    test_poison(y, sizeof y);
    cr_assert_eq(baton_runtime_get_output(rt, "y", y, n * sizeof(float), &err), 0, "%s",
                 err.message);
    for (size_t i = 0; i < n; i++)
        cr_expect_eq(y[i], x[i] + 1, "%s, seq %d (%s): y[%zu] = %g",
                     baton_sync_mode_name(baton_runtime_mode(rt)), seq,
                     by_input ? "bound by the input" : "set_dims", i, y[i]);
}

Test(dims_run, runs_at_the_bounds_and_between_on_every_device_and_mode)
{
    const char *devs[] = {"cpu", "cuda:0"};
    for (int dv = 0; dv < 2; dv++) {
        baton_plan *plan = dims_plan(devs[dv]);
        for (int g = 0; g < 2; g++)
            for (int m = 0; m < 3; m++) {
                baton_runtime *rt = test_runtime(plan, gpus[g], modes[m], 0, 0);
                int seqs[] = {8, 2, 5, 5, 2, 8, 3};
                for (int k = 0; k < 7; k++)
                    run_seq(rt, seqs[k], k % 2);
                baton_runtime_destroy(rt);
            }
        baton_plan_free(plan);
    }
}

Test(dims_run, refuses_values_out_of_bounds_and_unknown_names)
{
    baton_plan *plan = dims_plan("cpu");
    baton_runtime *rt = test_runtime(plan, BATON_GPU_AUTO, BATON_SYNC_GRAPH, 0, 0);
    baton_error err = {0};
    cr_expect_eq(baton_runtime_set_dims(rt, "seq", 9, &err), BATON_EINVAL);
    cr_expect(strstr(err.message, "dimension 'seq' = 9 is outside its bounds 2..8") != NULL, "%s",
              err.message);
    cr_expect_eq(baton_runtime_set_dims(rt, "seq", 1, &err), BATON_EINVAL);
    cr_expect_eq(baton_runtime_set_dims(rt, "sqe", 4, &err), BATON_ENOENT);
    cr_expect(strstr(err.message, "(did you mean 'seq'?)") != NULL, "%s", err.message);
    float x[40] = {0};
    cr_expect_eq(baton_runtime_set_input(rt, "x", x, 1 * 4 * sizeof(float), &err), BATON_EINVAL);
    cr_expect(strstr(err.message,
                     "input 'x' implies dimension 'seq' = 1, outside its bounds 2..8") != NULL,
              "%s", err.message);
    cr_expect_eq(baton_runtime_set_input(rt, "x", x, 10 * sizeof(float), &err), BATON_EINVAL);
    cr_expect(strstr(err.message, "whole number of rows") != NULL, "%s", err.message);
    int64_t v = 0;
    cr_expect_eq(baton_runtime_get_dims(rt, "seq", &v), 0);
    cr_expect_eq(v, 8, "a refused binding leaves the last one");
    /* the runtime stays usable */
    run_seq(rt, 4, 0);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

Test(dims_run, refuses_inputs_that_disagree)
{
    baton_plan *plan =
        expect_loads("{\"seq\": {\"min\": 1, \"max\": 8}}",
                     T_XD ", {\"name\": \"z\", \"dtype\": \"f32\", \"shape\": [\"seq\", 4], "
                          "\"role\": \"input\"}," T_YD,
                     "{\"name\": \"a\", \"kernel\": \"add\", \"device\": \"cpu\", \"inputs\": "
                     "[\"x\", \"z\"], \"outputs\": [\"y\"]}");
    baton_runtime *rt = test_runtime(plan, BATON_GPU_AUTO, BATON_SYNC_GRAPH, 0, 0);
    baton_error err = {0};
    float x[32] = {0};
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, 3 * 16, &err), 0, "%s", err.message);
    cr_expect_eq(baton_runtime_set_input(rt, "z", x, 5 * 16, &err), BATON_EINVAL);
    cr_expect(strstr(err.message, "input 'z' implies dimension 'seq' = 5 but input 'x' bound it "
                                  "to 3") != NULL,
              "%s", err.message);
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
}

/* Graph mode on the test device, and on CUDA when a GPU is present (the lead's GPU run). */
Test(dims_run, keeps_a_graph_per_binding_and_hits_it_again)
{
    baton_plan *plan = dims_plan_max("cuda:0", 16);
    baton_gpu_backend backs[2] = {BATON_GPU_SIM, BATON_GPU_CUDA};
    for (int b = 0; b < (test_cuda_devices() > 0 ? 2 : 1); b++) {
        baton_runtime *rt = test_runtime(plan, backs[b], BATON_SYNC_GRAPH, 0, 1);
        /* 1 in 8 runs changes seq: 3 distinct values, so after their first use every run hits */
        int values[] = {4, 6, 4, 7, 4, 6};
        int changes = 0;
        for (int r = 0; r < 48; r++) {
            int seq = values[r / 8];
            changes += r % 8 == 0;
            run_seq(rt, seq, 0);
        }
        baton_run_stats st;
        baton_runtime_stats(rt, &st);
        /* 4, 6 and 7: one capture each (the max was never run); the repeats hit */
        cr_expect_eq(st.captures, 3, "%s: captures %lld", b ? "cuda" : "sim",
                     (long long)st.captures);
        cr_expect_eq(baton_runtime_graph_hits(rt), changes - 3, "%s: hits %lld", b ? "cuda" : "sim",
                     (long long)baton_runtime_graph_hits(rt));
        cr_expect_eq(st.graph_updates, 0);
        /* more bindings than slots: the least recently used slot is updated in place */
        for (int seq = 2; seq <= 16; seq++)
            run_seq(rt, seq, 0);
        baton_runtime_stats(rt, &st);
        cr_expect_gt(st.graph_updates, 0, "%s: updates %lld", b ? "cuda" : "sim",
                     (long long)st.graph_updates);
        baton_runtime_destroy(rt);
    }
    baton_plan_free(plan);
}

Test(views_run, read_the_bases_bytes_without_a_copy)
{
    baton_plan *plan = expect_loads(NULL, T_X8 "," T_H "," T_V "," T_Y8, MK_H "," RD_V);
    for (int g = 0; g < 2; g++) {
        baton_runtime *rt = test_runtime(plan, gpus[g], BATON_SYNC_GRAPH, 0, 0);
        baton_error err = {0};
        float x[8], y[8];
        for (int i = 0; i < 8; i++)
            x[i] = (float)i;
        cr_assert_eq(baton_runtime_set_input(rt, "x", x, sizeof x, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
        cr_assert_eq(baton_runtime_get_output(rt, "y", y, sizeof y, &err), 0, "%s", err.message);
        for (int i = 0; i < 8; i++)
            cr_expect_eq(y[i], x[i] + 1);
        baton_runtime_destroy(rt);
    }
    baton_plan_free(plan);
}

/* ---- pools: an instance owns its state ------------------------------------------------------- */

#include "baton/baton_uv.h"

static int pool_done;
static void on_job(baton_job *job, int status)
{
    cr_expect_eq(status, 0, "%s", job->err.message);
    pool_done++;
}

Test(state_run, pool_instances_own_their_state_and_pinned_jobs_reach_theirs)
{
    baton_plan *plan = accumulator("cuda:0");
    for (int g = 0; g < 2; g++) {
        uv_loop_t loop;
        cr_assert_eq(uv_loop_init(&loop), 0);
        baton_options o = test_options(gpus[g], BATON_SYNC_GRAPH, 0, 0);
        baton_pool *pool = NULL;
        baton_error err = {0};
        cr_assert_eq(baton_pool_create(&loop, plan, &o, 2, &pool, &err), 0, "%s", err.message);
        static const float x[4] = {1, 2, 3, 4};
        baton_binding in = {"x", (void *)x, sizeof x};
        baton_job jobs[5];
        int pins[5] = {0, 1, 0, 0, 1};
        pool_done = 0;
        for (int k = 0; k < 5; k++) {
            baton_job_init(&jobs[k]);
            jobs[k].inputs = &in;
            jobs[k].n_inputs = 1;
            cr_assert_eq(baton_pool_submit_to(pool, pins[k], &jobs[k], on_job), 0, "%s",
                         jobs[k].err.message);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        cr_expect_eq(pool_done, 5);
        for (int k = 0; k < 5; k++)
            cr_expect_eq(jobs[k].instance, pins[k], "job %d ran on %d", k, jobs[k].instance);
        float s[4];
        cr_assert_eq(baton_pool_get_state(pool, 0, "s", s, sizeof s, &err), 0, "%s", err.message);
        cr_expect(s[0] == 1 + 3 * 1 && s[3] == 1 + 3 * 4, "instance 0: %g %g", s[0], s[3]);
        cr_assert_eq(baton_pool_get_state(pool, 1, "s", s, sizeof s, &err), 0, "%s", err.message);
        cr_expect(s[0] == 1 + 2 * 1 && s[3] == 1 + 2 * 4, "instance 1: %g %g", s[0], s[3]);
        cr_assert_eq(baton_pool_reset_state(pool, 0, &err), 0, "%s", err.message);
        cr_assert_eq(baton_pool_get_state(pool, 0, "s", s, sizeof s, &err), 0, "%s", err.message);
        cr_expect_eq(s[0], 1);
        const float v[4] = {7, 7, 7, 7};
        cr_assert_eq(baton_pool_set_state(pool, 1, "s", v, sizeof v, &err), 0, "%s", err.message);
        cr_assert_eq(baton_pool_get_state(pool, 1, "s", s, sizeof s, &err), 0, "%s", err.message);
        cr_expect_eq(s[2], 7);
        cr_expect_eq(baton_pool_get_state(pool, 2, "s", s, sizeof s, &err), BATON_EINVAL);
        cr_expect_eq(baton_pool_get_state(pool, 0, "x", s, sizeof s, &err), BATON_EINVAL);
        cr_expect(strstr(err.message, "'x' is not a state tensor") != NULL, "%s", err.message);
        baton_job bad;
        baton_job_init(&bad);
        cr_expect_eq(baton_pool_submit_to(pool, 2, &bad, on_job), BATON_EINVAL);
        baton_pool_close(pool, NULL, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        cr_expect_eq(uv_loop_close(&loop), 0);
    }
    baton_plan_free(plan);
}

Test(state_run, kv_cache_appends_in_place_across_runs_with_a_bound_sequence)
{
    /* a KV cache as generate.c uses it: prefill writes rows 0..seq-1, decode appends one row */
    baton_plan *plan = expect_loads(
        "{\"seq\": {\"min\": 1, \"max\": 6}}",
        "{\"name\": \"cache\", \"dtype\": \"f32\", \"shape\": [8, 4], \"role\": \"state\"}, "
        "{\"name\": \"new\", \"dtype\": \"f32\", \"shape\": [\"seq\", 4], \"role\": \"input\"}, "
        "{\"name\": \"pos\", \"dtype\": \"i64\", \"shape\": [\"seq\"], \"role\": \"input\"}",
        "{\"name\": \"kv\", \"kernel\": \"kv_cache_update\", \"device\": \"cuda:0\", \"inputs\": "
        "[\"cache\", \"new\", \"pos\"], \"outputs\": [\"cache\"]}");
    for (int g = 0; g < 2; g++)
        for (int m = 0; m < 3; m++) {
            baton_runtime *rt = test_runtime(plan, gpus[g], modes[m], 0, 0);
            baton_error err = {0};
            float rows[6 * 4];
            for (int i = 0; i < 24; i++)
                rows[i] = (float)(100 + i);
            int64_t pos[6] = {0, 1, 2, 3, 4, 5};
            /* prefill 3 rows, then two decode steps of one row each */
            cr_assert_eq(baton_runtime_set_input(rt, "new", rows, 3 * 16, &err), 0, "%s",
                         err.message);
            cr_assert_eq(baton_runtime_set_input(rt, "pos", pos, 3 * 8, &err), 0, "%s",
                         err.message);
            cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
            for (int step = 3; step < 5; step++) {
                cr_assert_eq(baton_runtime_set_input(rt, "new", rows + 4 * step, 16, &err), 0, "%s",
                             err.message);
                cr_assert_eq(baton_runtime_set_input(rt, "pos", &pos[step], 8, &err), 0, "%s",
                             err.message);
                cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
            }
            float cache[8 * 4];
            cr_assert_eq(baton_runtime_get_output(rt, "cache", cache, sizeof cache, &err), 0, "%s",
                         err.message);
            for (int i = 0; i < 32; i++)
                cr_expect_eq(cache[i], i < 20 ? rows[i] : 0, "gpu %d mode %d cache[%d] = %g", g, m,
                             i, cache[i]);
            baton_runtime_destroy(rt);
        }
    baton_plan_free(plan);
}

/* On cpu (OpenBLAS) and cuda:0 (cuBLASLt on a GPU machine, the CPU fallback elsewhere), in
 * strict and graph mode: more distinct row counts than the cuBLASLt delegate keeps plans for,
 * some repeated after they were evicted, each against the float64 reference. */
Test(dims_run, gemm_multiplies_the_bound_rows_only)
{
    static const char *const devices[] = {"cpu", "cuda:0"};
    static const baton_sync_mode gm_modes[] = {BATON_SYNC_STRICT, BATON_SYNC_GRAPH};
    for (int dv = 0; dv < 2; dv++)
        for (int md = 0; md < 2; md++) {
            char steps[512];
            snprintf(steps, sizeof steps,
                     "{\"name\": \"mm\", \"delegate\": \"gemm\", \"device\": \"%s\", "
                     "\"inputs\": [\"x\", \"w\"], \"outputs\": [\"y\"]}",
                     devices[dv]);
            baton_plan *plan = expect_loads(
                "{\"seq\": {\"min\": 1, \"max\": 16}}",
                "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"seq\", 8], \"role\": "
                "\"input\"}, {\"name\": \"w\", \"dtype\": \"f32\", \"shape\": [8, 4], \"role\": "
                "\"constant\", \"init\": {\"kind\": \"normal\", \"seed\": 3, \"std\": 1}}, "
                "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [\"seq\", 4], \"role\": "
                "\"output\"}",
                steps);
            float w[32];
            baton_error err = {0};
            cr_assert_eq(
                baton__plan_tensor_materialize(plan, baton__plan_find_tensor(plan, "w"), w, &err),
                0);
            baton_runtime *rt = test_runtime(plan, BATON_GPU_AUTO, gm_modes[md], 0, 0);
            test_rng r = {test_fresh_seed()};
            const int seqs[] = {3, 16, 1, 7, 2, 4, 5, 6, 9, 11, 13, 3, 16, 1, 15};
            for (size_t k = 0; k < sizeof seqs / sizeof seqs[0]; k++) {
                int seq = seqs[k];
                float x[16 * 8], y[16 * 4];
                test_fill_random(&r, BATON_DTYPE_F32, x, seq * 8, 1.0);
                cr_assert_eq(baton_runtime_set_input(rt, "x", x, (size_t)seq * 8 * 4, &err), 0,
                             "%s", err.message);
                cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
                test_poison(y, sizeof y);
                cr_assert_eq(baton_runtime_get_output(rt, "y", y, (size_t)seq * 4 * 4, &err), 0,
                             "%s", err.message);
                double ref[16 * 4];
                for (int i = 0; i < seq; i++)
                    for (int j = 0; j < 4; j++) {
                        ref[i * 4 + j] = 0;
                        for (int q = 0; q < 8; q++)
                            ref[i * 4 + j] += (double)x[i * 8 + q] * w[q * 4 + j];
                    }
                double e = test_rel_err(BATON_DTYPE_F32, y, ref, seq * 4);
                cr_expect_leq(e, test_tolerance(BATON_DTYPE_F32), "%s mode %d seq %d: rel err %g",
                              devices[dv], (int)gm_modes[md], seq, e);
            }
            baton_runtime_destroy(rt);
            baton_plan_free(plan);
        }
}

Test(state_run, a_decode_runtime_shares_the_prefill_runtimes_cache)
{
    static const char *const cache = "{\"name\": \"cache\", \"dtype\": \"f32\", \"shape\": [8, 4], "
                                     "\"role\": \"state\"}, ";
    char tensors[1024];
    snprintf(tensors, sizeof tensors,
             "%s{\"name\": \"new\", \"dtype\": \"f32\", \"shape\": [\"seq\", 4], \"role\": "
             "\"input\"}, {\"name\": \"pos\", \"dtype\": \"i64\", \"shape\": [\"seq\"], \"role\": "
             "\"input\"}",
             cache);
    baton_plan *prefill =
        expect_loads("{\"seq\": {\"min\": 1, \"max\": 6}}", tensors,
                     "{\"name\": \"kv\", \"kernel\": \"kv_cache_update\", \"device\": \"cuda:0\", "
                     "\"inputs\": [\"cache\", \"new\", \"pos\"], \"outputs\": [\"cache\"]}");
    snprintf(tensors, sizeof tensors,
             "%s{\"name\": \"new\", \"dtype\": \"f32\", \"shape\": [1, 4], \"role\": \"input\"}, "
             "{\"name\": \"pos\", \"dtype\": \"i64\", \"shape\": [1], \"role\": \"input\"}, "
             "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [8, 4], \"role\": \"output\"}",
             cache);
    baton_plan *decode =
        expect_loads(NULL, tensors,
                     "{\"name\": \"kv\", \"kernel\": \"kv_cache_update\", \"device\": \"cuda:0\", "
                     "\"inputs\": [\"cache\", \"new\", \"pos\"], \"outputs\": [\"cache\"]}, "
                     "{\"name\": \"rd\", \"kernel\": \"copy\", \"device\": \"cuda:0\", \"inputs\": "
                     "[\"cache\"], \"outputs\": [\"y\"]}");
    for (int g = 0; g < 2; g++)
        for (int m = 0; m < 3; m++) {
            baton_runtime *a = test_runtime(prefill, gpus[g], modes[m], 0, 0);
            baton_runtime *b = test_runtime(decode, gpus[g], modes[m], 0, 0);
            baton_error err = {0};
            float rows[24], y[32];
            for (int i = 0; i < 24; i++)
                rows[i] = (float)(10 + i);
            int64_t pos[6] = {0, 1, 2, 3, 4, 5};
            /* b runs once on its own cache first, so that its graphs hold its own slots */
            cr_assert_eq(baton_runtime_set_input(b, "new", rows, 16, &err), 0, "%s", err.message);
            cr_assert_eq(baton_runtime_set_input(b, "pos", &pos[0], 8, &err), 0);
            cr_assert_eq(baton_runtime_run(b, &err), 0, "%s", err.message);
            cr_assert_eq(baton_runtime_reset_state(b, &err), 0, "%s", err.message);
            cr_assert_eq(baton_runtime_share_state(b, a, &err), 0, "%s", err.message);
            cr_assert_eq(baton_runtime_set_input(a, "new", rows, 3 * 16, &err), 0, "%s",
                         err.message);
            cr_assert_eq(baton_runtime_set_input(a, "pos", pos, 3 * 8, &err), 0, "%s", err.message);
            cr_assert_eq(baton_runtime_run(a, &err), 0, "%s", err.message);
            cr_assert_eq(baton_runtime_set_input(b, "new", rows + 12, 16, &err), 0, "%s",
                         err.message);
            cr_assert_eq(baton_runtime_set_input(b, "pos", &pos[3], 8, &err), 0, "%s", err.message);
            cr_assert_eq(baton_runtime_run(b, &err), 0, "%s", err.message);
            test_poison(y, sizeof y);
            cr_assert_eq(baton_runtime_get_output(b, "y", y, sizeof y, &err), 0, "%s", err.message);
            for (int i = 0; i < 32; i++)
                cr_expect_eq(y[i], i < 16 ? rows[i] : 0, "gpu %d mode %d: y[%d] = %g", g, m, i,
                             y[i]);
            /* the prefill runtime sees the decode's append: one cache */
            float c[32];
            cr_assert_eq(baton_runtime_get_output(a, "cache", c, sizeof c, &err), 0, "%s",
                         err.message);
            cr_expect_eq(c[12], rows[12]);
            baton_runtime_destroy(b);
            baton_runtime_destroy(a);
        }
    /* a mismatch is refused, naming the tensor */
    baton_plan *other = expect_loads(
        NULL, "{\"name\": \"cache\", \"dtype\": \"f32\", \"shape\": [9, 4], \"role\": \"state\"}",
        "{\"name\": \"n\", \"kernel\": \"copy\", \"device\": \"cuda:0\", \"inputs\": [\"cache\"], "
        "\"outputs\": [\"cache\"]}");
    baton_runtime *a = test_runtime(prefill, BATON_GPU_SIM, BATON_SYNC_GRAPH, 0, 0);
    baton_runtime *o = test_runtime(other, BATON_GPU_SIM, BATON_SYNC_GRAPH, 0, 0);
    baton_error err = {0};
    cr_expect_eq(baton_runtime_share_state(o, a, &err), BATON_EINVAL);
    cr_expect(strstr(err.message, "state tensor 'cache' is f32[9,4]") != NULL, "%s", err.message);
    baton_runtime_destroy(o);
    baton_runtime_destroy(a);
    baton_plan_free(other);
    baton_plan_free(prefill);
    baton_plan_free(decode);
}

Test(dims_run, pool_jobs_bind_dims_from_their_inputs)
{
    baton_plan *plan = dims_plan("cuda:0");
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    baton_options o = test_options(BATON_GPU_SIM, BATON_SYNC_GRAPH, 0, 0);
    baton_pool *pool = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_pool_create(&loop, plan, &o, 2, &pool, &err), 0, "%s", err.message);
    static float x[4][32], y[4][32];
    int seqs[4] = {3, 8, 2, 5};
    baton_binding in[4], out[4];
    baton_job jobs[4];
    pool_done = 0;
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 32; i++)
            x[k][i] = (float)(k * 100 + i);
        in[k] = (baton_binding){"x", x[k], (size_t)seqs[k] * 16};
        out[k] = (baton_binding){"y", y[k], (size_t)seqs[k] * 16};
        baton_job_init(&jobs[k]);
        jobs[k].inputs = &in[k];
        jobs[k].n_inputs = 1;
        jobs[k].outputs = &out[k];
        jobs[k].n_outputs = 1;
        cr_assert_eq(baton_pool_submit(pool, &jobs[k], on_job), 0, "%s", jobs[k].err.message);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(pool_done, 4);
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < seqs[k] * 4; i++)
            cr_expect_eq(y[k][i], x[k][i] + 1, "job %d y[%d] = %g", k, i, y[k][i]);
    baton_job big;
    baton_job_init(&big);
    baton_binding too = {"x", x[0], 9 * 16};
    big.inputs = &too;
    big.n_inputs = 1;
    cr_expect_eq(baton_pool_submit(pool, &big, on_job), BATON_EINVAL);
    baton_pool_close(pool, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0);
    baton_plan_free(plan);
}

Test(dims_run, a_kept_graph_follows_a_buffer_bound_after_it_was_captured)
{
    baton_plan *plan = dims_plan("cuda:0");
    baton_runtime *rt = test_runtime(plan, BATON_GPU_SIM, BATON_SYNC_GRAPH, 0, 0);
    run_seq(rt, 3, 0); /* a graph for seq 3 */
    run_seq(rt, 5, 0); /* and one for seq 5 */
    baton_error err = {0};
    float *mine = aligned_alloc(256, 256); /* C11: the size is a multiple of the alignment */
    test_poison(mine, 8 * 4 * sizeof(float));
    baton_buffer b = {{BATON_DEVICE_CPU, 0}, mine, 8 * 4 * sizeof(float), BATON_DTYPE_F32};
    cr_assert_eq(baton_runtime_bind(rt, baton__plan_find_tensor(plan, "y"), &b, &err), 0, "%s",
                 err.message);
    float x[32];
    for (int i = 0; i < 32; i++)
        x[i] = (float)i;
    cr_assert_eq(baton_runtime_set_dims(rt, "seq", 3, &err), 0);
    cr_assert_eq(baton_runtime_set_input(rt, "x", x, 3 * 16, &err), 0, "%s", err.message);
    cr_assert_eq(baton_runtime_run(rt, &err), 0, "%s", err.message);
    for (int i = 0; i < 12; i++)
        cr_expect_eq(mine[i], x[i] + 1, "the seq-3 graph wrote the bound buffer: y[%d] = %g", i,
                     mine[i]);
    baton_runtime_destroy(rt);
    free(mine);
    baton_plan_free(plan);
}
