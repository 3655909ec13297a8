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
    int s = plan_find_tensor(plan, "s");
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
    cr_assert_eq(plan_tensor_materialize(plan, plan_find_tensor(plan, "s"), v, &err), 0, "%s",
                 err.message);
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
    const plan_tensor *x = &plan->tensors[plan_find_tensor(plan, "x")];
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
    int h = plan_find_tensor(plan, "h"), v = plan_find_tensor(plan, "v");
    const plan_memory *m = &plan->memory[0];
    cr_expect_geq(m->offset[h], 0);
    cr_expect_eq(m->offset[v], m->offset[h]);
    cr_expect_eq(plan->tensors[v].storage, h);
    /* the base stays live while the view is read: y must not take its bytes */
    int y = plan_find_tensor(plan, "y");
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
